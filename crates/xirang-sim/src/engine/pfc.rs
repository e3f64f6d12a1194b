//! Priority flow control (IEEE 802.1Qbb): when a switch's ingress accounting calls for
//! XOFF and XON ([`xoff_due`], [`xon_due`]), PAUSE frames sent ahead of all traffic, the
//! pause they impose on the receiving transmitter, refreshes of a pause still needed, and
//! the pause time both ends count.

use super::event::{Event, PFC_GEN_MASK};
use super::ids::{PortId, QpId, RouteId};
use super::link::{Ingress, PFC_FRAME_BYTES};
use super::{Dev, NEVER, Sim};
use crate::counters::N_PRIO;
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

impl<Q: Queue> Sim<Q> {
    /// Is port `p`'s transmitter paused on `prio`? Settles expired pauses' durations.
    #[inline(always)]
    pub(crate) fn is_paused(&mut self, p: PortId, prio: usize) -> bool {
        let now = self.now;
        let port = self.fab.port_mut(p);
        if port.pfc[prio].paused_until > now {
            return true;
        }
        port.pause_mask.remove(prio);
        if port.pfc[prio].pause_since != NEVER {
            self.stats.port(p).rx_pause_ps[prio] += port.pfc[prio].paused_until - port.pfc[prio].pause_since;
            port.pfc[prio].pause_since = NEVER;
        }
        false
    }

    /// Adds pause time still running at the end of the run to the counters.
    pub(crate) fn settle_pause_durations(&mut self) {
        let now = self.now;
        for (port, c) in self.fab.ports_mut().zip(self.stats.ports_mut()) {
            for prio in 0..N_PRIO {
                if port.pfc[prio].pause_since != NEVER {
                    c.rx_pause_ps[prio] += port.pfc[prio].paused_until.min(now) - port.pfc[prio].pause_since;
                    port.pfc[prio].pause_since = if port.pfc[prio].paused_until > now {
                        now
                    } else {
                        NEVER
                    };
                }
                if port.xoff.contains(prio) {
                    c.tx_pause_ps[prio] += now - port.pfc[prio].xoff_since;
                    port.pfc[prio].xoff_since = now;
                }
            }
        }
    }

    /// Sends a PFC frame out of port `p` (towards its peer) for `prio`.
    pub(crate) fn send_pfc(&mut self, p: PortId, prio: usize, xoff: bool) {
        let quanta = if xoff { self.fab.net().pause_quanta } else { 0 };
        let pkt = self.alloc(Packet {
            seq: u64::from(quanta),
            stamp: Stamp::sent_at(self.now),
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
        });
        let now = self.now;
        let port = self.fab.port_mut(p);
        port.ctrl.push_back(pkt);
        if xoff {
            if !port.xoff.contains(prio) {
                port.xoff.insert(prio);
                port.pfc[prio].xoff_since = now;
            }
            port.pfc[prio].pfc_gen = port.pfc[prio].pfc_gen.wrapping_add(1) & PFC_GEN_MASK;
            // Re-send XOFF when half the pause time has passed, as switches refresh pauses
            // before they expire.
            let half = port.rate.tx_time(u32::from(quanta) * PAUSE_QUANTUM_BYTES) / 2;
            let generation = port.pfc[prio].pfc_gen;
            self.schedule(
                now + half.max(1),
                Event::PfcRefresh {
                    port: p,
                    prio: prio as u8,
                    generation,
                },
            );
        } else {
            port.xoff.remove(prio);
            self.stats.port(p).tx_pause_ps[prio] += now - port.pfc[prio].xoff_since;
            port.pfc[prio].xoff_since = NEVER;
        }
        self.kick(p);
    }

    /// A refresh timer fired: re-send XOFF if this pause is still the one asserted.
    pub(crate) fn pfc_refresh(&mut self, p: PortId, prio: usize, generation: u32) {
        let port = self.fab.port(p);
        if port.xoff.contains(prio) && port.pfc[prio].pfc_gen == generation {
            self.send_pfc(p, prio, true);
        }
    }

    /// Port `p` received a PFC frame from its peer.
    pub(crate) fn receive_pause(&mut self, p: PortId, pkt: &Packet) {
        let prio = pkt.prio as usize;
        let quanta = pkt.seq as u32;
        let now = self.now;
        let paused = self.is_paused(p, prio);
        let (node_id, at_switch) = match self.fab.port(p).dev {
            Dev::Nic(n) => (self.fab.nic(n.index()).node_id, false),
            Dev::Switch(s) => (self.fab.switch(s.index()).hash_seed, true),
        };
        let port = self.fab.port_mut(p);
        self.stats.port(p).rx_pause[prio] += 1;
        self.stats.log_pfc(PfcEvent {
            time: now,
            node_id,
            at_switch,
            ifindex: port.local + 1,
            prio: prio as u8,
            pause: quanta > 0,
        });
        if quanta > 0 {
            if !paused {
                port.pfc[prio].pause_since = now;
            }
            port.pfc[prio].paused_until = now + port.rate.tx_time(quanta * PAUSE_QUANTUM_BYTES);
            port.pause_mask.insert(prio);
        } else {
            if paused {
                self.stats.port(p).rx_pause_ps[prio] += now - port.pfc[prio].pause_since;
                port.pfc[prio].pause_since = NEVER;
                self.stats.port(p).rx_pause_transition[prio] += 1;
            }
            port.pfc[prio].paused_until = 0;
            port.pause_mask.remove(prio);
            self.kick(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
