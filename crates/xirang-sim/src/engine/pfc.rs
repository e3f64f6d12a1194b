//! Priority flow control (IEEE 802.1Qbb): when a switch's ingress accounting calls for
//! XOFF and XON ([`xoff_due`], [`xon_due`]), PAUSE frames sent ahead of all traffic, the
//! pause they impose on the receiving transmitter, refreshes of a pause still needed, and
//! the pause time both ends count. The pause state is a port's own: `Port`'s methods here
//! take the port, the time and its counters, and nothing else; the `Sim` methods only
//! make the frame, log it and schedule what the port asks for.

use super::event::{Event, PFC_GEN_MASK};
use super::ids::{PortId, QpId, RouteId};
use super::link::{Ingress, PFC_FRAME_BYTES, Port};
use super::{Dev, NEVER, Sim};
use crate::counters::{N_PRIO, PortCounters};
use crate::packet::{Kind, Packet, Stamp};
use crate::queue::Queue;
use crate::time::Ps;

/// A pause quantum is 512 bit times
/// (docs/reference/congestion-control.md §6) = 64 bytes of line time.
const PAUSE_QUANTUM_BYTES: u32 = 64;

/// One PFC frame received, in the HPCC simulator's PFC-file terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PfcEvent {
    /// When it arrived.
    pub time: Ps,
    /// Node id of the receiving device.
    pub node_id: u32,
    /// True if the receiver is a switch.
    pub at_switch: bool,
    /// 1-based interface index of the receiving port.
    pub ifindex: u16,
    /// Priority.
    pub prio: u8,
    /// Pause (true) or resume.
    pub pause: bool,
}

/// Whether an ingress priority's accounting calls for XOFF: it is in its headroom, or
/// its shared share reached the dynamic threshold `threshold` (the HPCC simulator's
/// `CheckShouldPause`, docs/hpcc-model.md).
#[inline(always)]
pub(crate) fn xoff_due(st: &Ingress, reserved_bytes: u64, threshold: u64) -> bool {
    st.hdrm > 0 || st.ing.saturating_sub(reserved_bytes) >= threshold
}

/// Whether a paused ingress priority may resume (XON): its headroom is empty and its
/// shared share is gone or `xon_offset` below the threshold (`CheckShouldResume`). The
/// threshold is computed only when needed.
#[inline(always)]
pub(crate) fn xon_due(
    st: &Ingress,
    reserved_bytes: u64,
    xon_offset_bytes: u64,
    threshold: impl FnOnce() -> u64,
) -> bool {
    st.hdrm == 0 && {
        let shared = st.ing.saturating_sub(reserved_bytes);
        shared == 0 || shared + xon_offset_bytes <= threshold()
    }
}

/// A PFC frame for `prio` leaving port `p` at `now`, pausing for `quanta` (0: XON).
fn pfc_frame(p: PortId, prio: usize, quanta: u16, now: Ps) -> Packet {
    Packet {
        seq: u64::from(quanta),
        stamp: Stamp::sent_at(now),
        qp: QpId(u32::MAX),
        route: RouteId(0),
        in_port: p,
        size: PFC_FRAME_BYTES,
        payload: 0,
        hop: 0,
        kind: Kind::Pause,
        prio: prio as u8,
        ce: false,
        last: false,
    }
}

impl Port {
    /// Whether this port's transmitter is paused on `prio` at `now`. A pause that has ended
    /// is settled: `settle` gets its duration for the port's `rx_pause_ps` (a closure, so
    /// that the counters are looked up only then: this runs per packet sent).
    #[inline(always)]
    pub(crate) fn paused(&mut self, prio: usize, now: Ps, settle: impl FnOnce(Ps)) -> bool {
        let st = &mut self.pfc[prio];
        if st.paused_until > now {
            return true;
        }
        self.pause_mask.remove(prio);
        if st.pause_since != NEVER {
            settle(st.paused_until - st.pause_since);
            st.pause_since = NEVER;
        }
        false
    }

    /// Counts the pause time still running at `now` (the end of a run) into `c`, as the
    /// hardware's running duration counters do, and restarts it from `now`.
    pub(crate) fn settle_pauses(&mut self, now: Ps, c: &mut PortCounters) {
        for prio in 0..N_PRIO {
            let st = &mut self.pfc[prio];
            if st.pause_since != NEVER {
                c.rx_pause_ps[prio] += st.paused_until.min(now) - st.pause_since;
                st.pause_since = if st.paused_until > now { now } else { NEVER };
            }
            if self.xoff.contains(prio) {
                c.tx_pause_ps[prio] += now - st.xoff_since;
                st.xoff_since = now;
            }
        }
    }

    /// Queues PFC frame `frame` for `prio` ahead of all traffic. XOFF (`quanta` > 0) records
    /// that this port asked its peer to pause and returns the refresh to schedule: when
    /// (half the pause time from `now`, as switches refresh pauses before they expire) and
    /// the pause's generation. XON ends the pause and counts its duration into `c`.
    pub(crate) fn queue_pfc(
        &mut self,
        frame: Packet,
        prio: usize,
        quanta: u16,
        now: Ps,
        c: &mut PortCounters,
    ) -> Option<(Ps, u32)> {
        self.ctrl.push_back(frame);
        let st = &mut self.pfc[prio];
        if quanta == 0 {
            self.xoff.remove(prio);
            c.tx_pause_ps[prio] += now - st.xoff_since;
            st.xoff_since = NEVER;
            return None;
        }
        if !self.xoff.contains(prio) {
            self.xoff.insert(prio);
            st.xoff_since = now;
        }
        st.pfc_gen = st.pfc_gen.wrapping_add(1) & PFC_GEN_MASK;
        let half = self.rate.tx_time(u32::from(quanta) * PAUSE_QUANTUM_BYTES) / 2;
        Some((now + half.max(1), st.pfc_gen))
    }

    /// Whether the pause this port asked for on `prio` is still generation `generation`
    /// (its refresh is due).
    pub(crate) fn refresh_due(&self, prio: usize, generation: u32) -> bool {
        self.xoff.contains(prio) && self.pfc[prio].pfc_gen == generation
    }

    /// Takes a PFC frame from the peer for `prio` at `now`: `quanta` > 0 pauses the
    /// transmitter for that long, 0 resumes it. Counts the frame, and a pause's duration
    /// when it ends, into `c`. Returns whether the transmitter resumed.
    pub(crate) fn take_pause(&mut self, prio: usize, quanta: u32, now: Ps, c: &mut PortCounters) -> bool {
        let paused = self.paused(prio, now, |d| c.rx_pause_ps[prio] += d);
        c.rx_pause[prio] += 1;
        let st = &mut self.pfc[prio];
        if quanta > 0 {
            if !paused {
                st.pause_since = now;
            }
            st.paused_until = now + self.rate.tx_time(quanta * PAUSE_QUANTUM_BYTES);
            self.pause_mask.insert(prio);
            return false;
        }
        if paused {
            c.rx_pause_ps[prio] += now - st.pause_since;
            st.pause_since = NEVER;
            c.rx_pause_transition[prio] += 1;
        }
        st.paused_until = 0;
        self.pause_mask.remove(prio);
        true
    }
}

impl<Q: Queue> Sim<Q> {
    /// Is port `p`'s transmitter paused on `prio`? Settles expired pauses' durations.
    #[inline(always)]
    pub(crate) fn is_paused(&mut self, p: PortId, prio: usize) -> bool {
        let stats = &mut self.stats;
        self.fab
            .port_mut(p)
            .paused(prio, self.now, |d| stats.port(p).rx_pause_ps[prio] += d)
    }

    /// Adds pause time still running at the end of the run to the counters.
    pub(crate) fn settle_pause_durations(&mut self) {
        for (port, c) in self.fab.ports_mut().zip(self.stats.ports_mut()) {
            port.settle_pauses(self.now, c);
        }
    }

    /// Sends a PFC frame out of port `p` (towards its peer) for `prio`.
    pub(crate) fn send_pfc(&mut self, p: PortId, prio: usize, xoff: bool) {
        let quanta = if xoff { self.fab.net().pause_quanta } else { 0 };
        let frame = self.alloc(pfc_frame(p, prio, quanta, self.now));
        let refresh = self
            .fab
            .port_mut(p)
            .queue_pfc(frame, prio, quanta, self.now, self.stats.port(p));
        if let Some((at, generation)) = refresh {
            self.schedule(
                at,
                Event::PfcRefresh {
                    port: p,
                    prio: prio as u8,
                    generation,
                },
            );
        }
        self.kick(p);
    }

    /// A refresh timer fired: re-send XOFF if this pause is still the one asserted.
    pub(crate) fn pfc_refresh(&mut self, p: PortId, prio: usize, generation: u32) {
        if self.fab.port(p).refresh_due(prio, generation) {
            self.send_pfc(p, prio, true);
        }
    }

    /// Port `p` received a PFC frame from its peer.
    pub(crate) fn receive_pause(&mut self, p: PortId, pkt: &Packet) {
        let prio = pkt.prio as usize;
        let quanta = pkt.seq as u32;
        let port = self.fab.port(p);
        let (node_id, at_switch) = match port.dev {
            Dev::Nic(n) => (self.fab.nic(n.index()).node_id, false),
            Dev::Switch(s) => (self.fab.switch(s.index()).hash_seed, true),
        };
        let ifindex = port.local + 1;
        self.stats.log_pfc(PfcEvent {
            time: self.reported_now(),
            node_id,
            at_switch,
            ifindex,
            prio: prio as u8,
            pause: quanta > 0,
        });
        let resumed = self
            .fab
            .port_mut(p)
            .take_pause(prio, quanta, self.now, self.stats.port(p));
        if resumed {
            self.kick(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::link::{NicPort, Role};
    use crate::time::Rate;
    use xirang_fabric::model::NicId;

    fn nic_port() -> Port {
        let role = Role::Nic(NicPort::default());
        Port::new(Dev::Nic(NicId(0)), 0, 0, PortId(1), Rate::from_gbps(100.0), role)
    }

    fn frame(prio: usize) -> Packet {
        pfc_frame(PortId(0), prio, 0, 0)
    }

    /// A pause holds the transmitter for its quanta (512 bit times each), ends by itself
    /// or by XON, and its duration is counted once either way.
    #[test]
    fn a_received_pause_holds_until_it_expires_or_xon_and_is_counted_once() {
        let (mut port, mut c) = (nic_port(), PortCounters::default());
        // 100 Gbit/s: a quantum is 64 bytes = 5.12 ns; 100 quanta = 512 ns.
        assert!(!port.take_pause(3, 100, 1_000, &mut c));
        assert!(port.pause_mask.contains(3));
        let mut settled = 0;
        assert!(port.paused(3, 1_000 + 511_999, |d| settled += d));
        assert!(!port.paused(3, 1_000 + 512_000, |d| settled += d));
        assert_eq!(settled, 512_000);
        assert!(!port.pause_mask.contains(3));
        assert!(!port.paused(3, 2_000_000, |_| unreachable!("settled once")));

        // A second pause ended early by XON counts up to the XON.
        assert!(!port.take_pause(3, 100, 3_000_000, &mut c));
        assert!(port.take_pause(3, 0, 3_100_000, &mut c));
        assert_eq!(c.rx_pause[3], 3);
        assert_eq!(c.rx_pause_ps[3], 100_000);
        assert_eq!(c.rx_pause_transition[3], 1);
        assert!(!port.paused(3, 3_100_000, |_| unreachable!("XON settled it")));
    }

    /// XOFF asks for a refresh at half its pause time with a new generation; XON ends it
    /// and counts how long this port held its peer paused.
    #[test]
    fn xoff_schedules_its_refresh_and_xon_counts_the_pause_asked_for() {
        let (mut port, mut c) = (nic_port(), PortCounters::default());
        let (at, generation) = port
            .queue_pfc(frame(3), 3, 100, 1_000, &mut c)
            .expect("XOFF refreshes");
        assert_eq!(at, 1_000 + 256_000);
        assert!(port.refresh_due(3, generation));
        let (_, next) = port
            .queue_pfc(frame(3), 3, 100, at, &mut c)
            .expect("XOFF refreshes");
        assert!(!port.refresh_due(3, generation) && port.refresh_due(3, next));
        assert_eq!(port.queue_pfc(frame(3), 3, 0, 501_000, &mut c), None);
        assert!(!port.xoff.contains(3) && !port.refresh_due(3, next));
        assert_eq!(c.tx_pause_ps[3], 500_000);
        assert_eq!(port.ctrl.len(), 3, "every frame goes ahead of the queues");
    }

    fn ingress(ing: u64, hdrm: u64) -> Ingress {
        Ingress {
            ing,
            hdrm,
            ..Ingress::default()
        }
    }

    /// docs/hpcc-model.md: pause once in headroom or once the shared share reaches the
    /// threshold; resume once out of headroom and the shared share is gone or the XON
    /// offset below the threshold.
    #[test]
    fn xoff_and_xon_follow_the_hpcc_rules() {
        let (reserved, offset) = (4096, 3072);
        assert!(!xoff_due(&ingress(4096, 0), reserved, 1));
        assert!(xoff_due(&ingress(4096 + 10_000, 0), reserved, 10_000));
        assert!(!xoff_due(&ingress(4096 + 9_999, 0), reserved, 10_000));
        assert!(xoff_due(&ingress(0, 1), reserved, u64::MAX));

        assert!(!xon_due(&ingress(0, 1), reserved, offset, || u64::MAX));
        assert!(xon_due(&ingress(4096, 0), reserved, offset, || unreachable!(
            "no shared bytes: no threshold"
        )));
        assert!(xon_due(&ingress(4096 + 7_000, 0), reserved, offset, || 10_072));
        assert!(!xon_due(&ingress(4096 + 7_001, 0), reserved, offset, || 10_072));
    }
}
