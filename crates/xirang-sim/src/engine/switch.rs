//! A switch: shared-buffer admission per ingress port and priority (the HPCC simulator's
//! switch MMU: reserved, shared with a dynamic threshold, headroom after XOFF), asking
//! `engine::pfc` whether the ingress accounting calls for XOFF or XON, egress scheduling (PFC frames, then the CNP
//! priority strictly, then DWRR), and at dequeue the RED/ECN decision of `engine::ecn`.

use xirang_fabric::model::SwitchId;

use super::ids::PortId;
use super::pfc;
use super::{Dev, NEVER, Sim};
use crate::counters::N_PRIO;
use crate::packet::{Kind, Packet};
use crate::queue::Queue;
use crate::time::PS_PER_NS;

/// DWRR quantum per visit: one jumbo frame, so equal-weight queues share bytes fairly.
const DWRR_QUANTUM_BYTES: i64 = 9216;

/// Switch-wide buffer state.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct SwitchState {
    /// ECMP hash seed (also the node id in HPCC PFC files).
    pub(crate) hash_seed: u32,
    buffer: u64,
    /// Bytes of the buffer set aside (headroom of all ports + reserved per port).
    set_aside: u64,
    shared_used: u64,
    used: u64,
}

impl SwitchState {
    pub(crate) fn new(hash_seed: u32, buffer: u64, set_aside: u64) -> Self {
        SwitchState {
            hash_seed,
            buffer,
            set_aside,
            shared_used: 0,
            used: 0,
        }
    }

    /// Threshold 2^th x free shared buffer (`dynamic_th`, docs/reference/switch-config.md).
    #[inline]
    fn threshold(&self, th: i8) -> u64 {
        let free = self.buffer.saturating_sub(self.set_aside + self.shared_used);
        if th < 0 {
            free >> (-th) as u32
        } else {
            free << th as u32
        }
    }
}

impl<Q: Queue> Sim<Q> {
    /// A packet arrives at switch `s` through port `inp`: a PFC frame pauses the port; a
    /// packet is admitted into the buffer (or dropped) and queued at its egress port.
    pub(crate) fn switch_receive(&mut self, s: SwitchId, inp: PortId, mut pkt: Packet) {
        if pkt.kind == Kind::Pause {
            self.receive_pause(inp, &pkt);
            self.consume(&pkt);
            return;
        }
        let out = self.fab.routes().hop(pkt.route, pkt.hop);
        pkt.hop += 1;
        let prio = pkt.prio as usize;
        let size = u64::from(pkt.size);
        let lossless = self.fab.net().pfc_lossless[prio] && !self.fab.port(inp).switch().pfc_off;
        let reserved = self.fab.net().reserved;
        // The thresholds are settings: read before the switch and port are borrowed.
        let (pfc_th, lossy_th) = (self.fab.net().pfc_th, self.fab.net().lossy_th);
        let (sw, port) = self.fab.switch_and_port_mut(s.index(), inp);
        if sw.used + size > sw.buffer {
            self.stats.port(inp).in_discards += 1;
            self.drop_packet(out, &pkt);
            return;
        }
        // Thresholds are taken before this packet is counted (HPCC `CheckIngressAdmission`).
        let shared_pq = port.ingress[prio].ing.saturating_sub(reserved);
        let new = port.ingress[prio].ing + size;
        if lossless {
            let thr = sw.threshold(pfc_th);
            if port.ingress[prio].hdrm + size > port.switch().headroom && shared_pq + size > thr {
                // Headroom overflow: a lossless packet is lost. Sized headroom prevents it.
                self.stats.port(inp).in_discards += 1;
                self.drop_packet(out, &pkt);
                return;
            }
            if new <= reserved {
                port.ingress[prio].ing = new;
            } else if new - reserved > thr {
                port.ingress[prio].hdrm += size;
            } else {
                port.ingress[prio].ing = new;
                sw.shared_used += size.min(new - reserved);
            }
        } else {
            let thr = sw.threshold(lossy_th);
            if shared_pq + size > thr {
                self.stats.port(inp).in_discards += 1;
                self.drop_packet(out, &pkt);
                return;
            }
            port.ingress[prio].ing = new;
            if new > reserved {
                sw.shared_used += size.min(new - reserved);
            }
        }
        sw.used += size;
        if lossless
            && !port.xoff.contains(prio)
            && pfc::xoff_due(&port.ingress[prio], reserved, sw.threshold(pfc_th))
        {
            self.send_pfc(inp, prio, true);
        }
        pkt.in_port = inp;
        let o = self.fab.port_mut(out);
        o.egress[prio].egr += size;
        if o.egress[prio].egr > o.pfc[prio].watermark {
            o.pfc[prio].watermark = o.egress[prio].egr;
        }
        o.push_q(prio, pkt);
        self.kick(out);
    }

    /// Accounts a packet dropped by admission on its way to egress port `out`.
    fn drop_packet(&mut self, out: PortId, k: &Packet) {
        self.account_drop(k);
        let c = self.stats.port(out);
        c.tx_discards += 1;
        c.q_dropped[k.prio as usize] += 1;
    }

    /// Picks the next queue of switch port `p`: the CNP priority strictly first, then DWRR
    /// over the others with a quantum of one jumbo frame.
    fn pick_queue(&mut self, p: PortId) -> Option<usize> {
        let cnp = self.fab.net().cnp_prio as usize;
        let ready = self.sendable(p);
        if ready.contains(cnp) {
            return Some(cnp);
        }
        let others = ready.without(cnp);
        if others.is_empty() {
            return None;
        }
        let port = self.fab.port_mut(p);
        // Classic DWRR: a queue gets one quantum when its turn starts and sends while its
        // deficit covers the head packet; then the turn passes to the next ready queue.
        // Each pass either serves or moves the pointer, so two rotations always suffice.
        for _ in 0..3 * N_PRIO {
            let rr = usize::from(port.rr);
            let prio = others.next_from(rr).expect("invariant: `others` is not empty");
            if prio != rr {
                port.rr = prio as u8;
                port.turn_credited = false;
            }
            if !port.turn_credited {
                port.egress[prio].deficit += DWRR_QUANTUM_BYTES;
                port.turn_credited = true;
            }
            let head = i64::from(port.egress[prio].queue[0].size);
            if port.egress[prio].deficit >= head {
                port.egress[prio].deficit -= head;
                return Some(prio);
            }
            port.rr = ((prio + 1) % N_PRIO) as u8;
            port.turn_credited = false;
        }
        unreachable!("invariant: DWRR serves a ready queue within two rotations")
    }

    /// Switch port `p`'s transmitter is free: send its next packet.
    pub(crate) fn switch_send(&mut self, p: PortId) {
        if let Some(pkt) = self.fab.port_mut(p).ctrl.pop_front() {
            self.transmit(p, pkt);
            self.after_switch_tx(p);
            return;
        }
        let Some(prio) = self.pick_queue(p) else {
            self.wake_for_pause(p);
            return;
        };
        let mut pkt = self.fab.port_mut(p).pop_q(prio);
        self.switch_dequeue(p, &mut pkt);
        self.transmit(p, pkt);
        self.after_switch_tx(p);
    }

    fn after_switch_tx(&mut self, p: PortId) {
        let port = self.fab.port(p);
        if !port.nonempty.is_empty() || !port.ctrl.is_empty() {
            let t = port.busy_until;
            self.schedule_wake(p, t);
        }
    }

    /// Nothing sendable: if queues wait behind a pause, wake when it expires.
    fn wake_for_pause(&mut self, p: PortId) {
        let port = self.fab.port(p);
        let mut t = NEVER;
        for prio in 0..N_PRIO {
            if port.nonempty.contains(prio) && port.pfc[prio].paused_until > self.now {
                t = t.min(port.pfc[prio].paused_until);
            }
        }
        if t != NEVER {
            self.schedule_wake(p, t);
        }
    }

    /// A packet leaves switch port `out`: release its buffer, decide ECN, maybe resume.
    fn switch_dequeue(&mut self, out: PortId, pkt: &mut Packet) {
        let prio = pkt.prio as usize;
        let size = u64::from(pkt.size);
        let inp = pkt.in_port;
        let reserved = self.fab.net().reserved;
        let Dev::Switch(s) = self.fab.port(out).dev else {
            unreachable!("invariant: switch_dequeue runs on switch ports")
        };
        let (lossless, xon_offset, pfc_th) = {
            let net = self.fab.net();
            (net.pfc_lossless[prio], net.xon_offset, net.pfc_th)
        };
        let (sw, port) = self.fab.switch_and_port_mut(s.index(), inp);
        let from_hdrm = port.ingress[prio].hdrm.min(size);
        let from_shared = (size - from_hdrm).min(port.ingress[prio].ing.saturating_sub(reserved));
        port.ingress[prio].hdrm -= from_hdrm;
        port.ingress[prio].ing -= size - from_hdrm;
        sw.shared_used -= from_shared;
        sw.used -= size;
        let resume = lossless
            && port.xoff.contains(prio)
            && pfc::xon_due(&port.ingress[prio], reserved, xon_offset, || sw.threshold(pfc_th));
        let o = self.fab.port_mut(out);
        o.egress[prio].egr -= size;
        let queued = o.egress[prio].egr;
        if pkt.kind == Kind::Data && o.switch_mut().red_mark(queued) {
            self.stats.port(out).q_ecn_marked[prio] += 1;
            pkt.ce = true;
        }
        if pkt.kind == Kind::Data
            && let Some(i) = pkt.int_index()
        {
            // HPCC's INT hop at egress dequeue (the simulator's SwitchNotifyDequeue): the
            // port's bytes sent before this packet, its queue (every priority) after it.
            let o = self.fab.port(out);
            let tx_bytes: u64 = o.egress.iter().map(|s| s.tx_bytes).sum();
            let qlen: u64 = o.egress.iter().map(|s| s.egr).sum();
            let rec = self.cc.ints_mut().record_mut(i);
            let hop = crate::cc::int::Hop::encode(
                self.now / PS_PER_NS,
                tx_bytes,
                qlen,
                o.rate.bps,
                u64::from(rec.multi),
            );
            rec.push(hop);
        }
        if resume {
            self.send_pfc(inp, prio, false);
        }
    }
}
