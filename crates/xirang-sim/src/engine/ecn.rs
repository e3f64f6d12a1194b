//! ECN marking at a switch's egress: RED on the queue a data packet leaves behind
//! (docs/reference/congestion-control.md §1.1), each port with its own profile (its tier's,
//! scaled to its rate where the configuration says so) and its own random stream, so a
//! port's marks do not depend on any other port's traffic.

use super::link::SwitchPort;

impl SwitchPort {
    /// RED decision for a data packet leaving with `queued_bytes` still behind it
    /// (docs/reference/congestion-control.md §1.1: marking on the egress queue, evaluated
    /// at dequeue as the HPCC simulator does).
    #[inline]
    pub(crate) fn red_mark(&mut self, queued_bytes: u64) -> bool {
        if !self.red.enabled {
            return false;
        }
        let p = self.red.mark_probability(queued_bytes);
        p >= 1.0 || (p > 0.0 && self.ecn_rng.uniform() < p)
    }
}
