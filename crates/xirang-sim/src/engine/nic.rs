//! A NIC's RoCE transport: queue pairs segmenting messages at the path MTU, per-QP rate
//! limiters, round robin over the QPs of a port, an ACK per data packet, NACK on a PSN gap
//! and go-back-N, CNPs from the notification point, and the local ACK timeout.
//!
//! A QP has two halves that never touch each other: [`QpTx`] at the sending NIC and
//! [`QpRx`] at the receiving NIC, under the same [`QpId`]. They meet only through the
//! packets they exchange.
//!
//! A scenario flow's QP carries one message, its share of the flow. A collective's QP is
//! persistent: it lives for the run and carries one message (work request) after another,
//! in one sequence space, with its congestion-control state carried from each to the
//! next, as NCCL's connections' QPs do (docs/reference/nccl-transport.md §4). A message's
//! last packet is marked (`Packet::last`, the write's immediate data): the receiver
//! completes a receive on it, the sender completes the work request when its last byte is
//! acknowledged, and `engine::transport` hears of both.

use std::collections::VecDeque;

use super::event::Event;
use super::ids::{FlowId, PortId, QpId, RouteId};
use super::{NEVER, Sim};
use crate::cc::{DcqcnState, DctcpState, HpccState, TimelyState, int, var_window};
use crate::packet::{Kind, Packet, Stamp};
use crate::queue::Queue;
use crate::time::{PS_PER_US, Ps};

/// ACK size on the wire: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4 + FCS 4.
/// Header sizes: docs/reference/linux-rdma-sysfs.md §4 (AETH's 4 bytes: IBTA, unconfirmed
/// there).
pub const ACK_BYTES: u16 = 66;
/// CNP size: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + 16 reserved + ICRC 4 + FCS 4 (the
/// 16-byte CNP payload is IBTA RoCEv2 annex A17, unconfirmed in docs/reference).
pub const CNP_BYTES: u16 = 78;
/// The HPCC simulator's NACK generation interval, 500 µs (docs/hpcc-model.md §5).
const NACK_INTERVAL: Ps = 500 * PS_PER_US;

/// The reaction point's congestion control of a QP, with the index of its parameter set.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) enum Cc {
    None,
    Dcqcn(u16, Box<DcqcnState>),
    Timely(u16, Box<TimelyState>),
    Hpcc(u16, Box<HpccState>),
    Dctcp(u16, Box<DctcpState>),
}

/// What a QP carries, at the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum TxOwner {
    /// One message of a scenario flow.
    Flow(FlowId),
    /// Data QP `k` of a collective's connection (`engine::transport`).
    Conn { conn: u32, k: u16 },
    /// The clear-to-send writes of a connection, from its receiver back to its sender.
    Cts { conn: u32 },
}

/// The sending half of a QP.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct QpTx {
    pub(crate) owner: TxOwner,
    pub(crate) src_port: PortId,
    pub(crate) route: RouteId,
    /// End of the bytes posted (a flow's QP: its share of the flow).
    pub(crate) size: u64,
    pub(crate) snd_nxt: u64,
    pub(crate) snd_una: u64,
    /// A persistent QP's messages not yet acknowledged: (end in the sequence space, the
    /// result id of the transfer it belongs to). Capacity reserved at set-up.
    pub(crate) wrs: VecDeque<(u64, u64)>,
    /// Index in `wrs` of the message `snd_nxt` is in.
    pub(crate) wr_tx: u32,
    pub(crate) next_avail: Ps,
    /// When the last data packet left, and its size: a rate increase re-times the gap
    /// after it, as a NIC's rate limiter applies a new rate at once.
    pub(crate) last_sent: Ps,
    pub(crate) last_wire: u32,
    pub(crate) prio: u8,
    pub(crate) cc: Cc,
    pub(crate) line_bps: f64,
    pub(crate) mtu: u32,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    /// The receiving NIC port (where a `gdr_off` credit gate sits).
    pub(crate) dst_port: PortId,
    /// This QP holds the gate's next credit, from its `next_avail` on.
    pub(crate) rx_reserved: bool,
    /// In-flight bytes allowed at line rate, scaled by the current rate (0: no window).
    pub(crate) win_bytes: u64,
    pub(crate) last_progress: Ps,
    /// ACK timeouts since the last progress.
    pub(crate) timeouts: u8,
    pub(crate) rto_pending: bool,
    pub(crate) inc_pending: bool,
    /// Nothing to send and every byte acknowledged (a persistent QP: until its next
    /// message).
    pub(crate) done: bool,
    /// In its port's round robin (a persistent QP leaves it while idle).
    pub(crate) listed: bool,
}

impl QpTx {
    /// A QP of a collective's connection, which lives for the run.
    #[inline]
    pub(crate) fn persistent(&self) -> bool {
        !matches!(self.owner, TxOwner::Flow(_))
    }

    /// Finished for good: a flow's QP with every byte acknowledged or given up. Timers of
    /// a persistent QP run on while it is idle, as a NIC's rate limiter does.
    #[inline]
    pub(crate) fn retired(&self) -> bool {
        self.done && !self.persistent()
    }

    /// Current sending rate, bit/s.
    #[inline]
    pub(crate) fn rate_bps(&self) -> f64 {
        match &self.cc {
            Cc::None => self.line_bps,
            Cc::Dcqcn(_, s) => s.rc,
            Cc::Timely(_, s) => s.rate,
            Cc::Hpcc(_, s) => s.rate,
            Cc::Dctcp(_, s) => s.rate,
        }
    }

    /// The window stops the QP: as many bytes in flight as its rate allows (the HPCC
    /// simulator's `IsWinBound`, checked before a packet, so one packet may overshoot).
    #[inline]
    pub(crate) fn win_bound(&self) -> bool {
        self.win_bytes != 0
            && self.snd_nxt - self.snd_una >= var_window(self.win_bytes, self.rate_bps(), self.line_bps)
    }

    /// End of the message `snd_nxt` is in (a flow's QP: its size), with whether it ends a
    /// message (so its last packet is marked).
    #[inline]
    fn message_end(&mut self) -> (u64, bool) {
        if self.wrs.is_empty() {
            return (self.size, false);
        }
        while (self.wr_tx as usize) < self.wrs.len() && self.wrs[self.wr_tx as usize].0 <= self.snd_nxt {
            self.wr_tx += 1;
        }
        match self.wrs.get(self.wr_tx as usize) {
            Some(&(end, _)) => (end, true),
            None => (self.size, false),
        }
    }
}

/// What a QP's data is for, at the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum RxOwner {
    /// A flow of the scenario's workloads (its receiving half is `Sim::flows[f].rx`).
    Flow(FlowId),
    /// Data QP `k` of a collective's connection.
    Conn { conn: u32, k: u16 },
    /// The clear-to-send writes of a connection, arriving at its sender.
    Cts { conn: u32 },
}

/// The receiving half of a QP.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct QpRx {
    pub(crate) owner: RxOwner,
    /// Bytes a flow's QP receives (a persistent QP: unbounded).
    pub(crate) size: u64,
    /// Where ACKs, NACKs and CNPs go (the reverse route).
    pub(crate) ack_route: RouteId,
    /// The data's priority (ACKs go on it unless they ride the CNP priority).
    pub(crate) prio: u8,
    /// The notification point's minimum gap between CNPs; None when the QP's class does
    /// not run DCQCN (roce_np disabled on its priority).
    pub(crate) cnp_interval: Option<Ps>,
    /// ACKs echo the CE mark of the packet they answer (DCTCP's ECN-Echo).
    pub(crate) echo_ecn: bool,
    pub(crate) rx_expected: u64,
    pub(crate) rx_next_cnp: Ps,
    pub(crate) rx_nack_at: Ps,
    pub(crate) rx_last_nack: u64,
    pub(crate) rx_done: bool,
    /// Messages received whole (a persistent QP's).
    pub(crate) msgs: u64,
}

impl<Q: Queue> Sim<Q> {
    /// When a `gdr_off` receiver grants QP `qi` its next credit (0: no gate, or the QP
    /// already holds one).
    ///
    /// This reads the receiving NIC's gate directly: the one place a device looks at
    /// another's state (see the module docs of `engine`). NCCL's receiver grants credit
    /// per connection with messages; modelling those is what a partitioned engine needs.
    #[inline]
    pub(crate) fn rx_gate(&self, qi: QpId) -> Ps {
        // Runs without a `gdr_off` fault (nearly all) skip the receiver lookup per QP.
        if !self.fab.rx_gated() {
            return 0;
        }
        let q = self.xport.tx(qi);
        let d = self.fab.port(q.dst_port).nic();
        if d.rx_cap.is_some() && !q.rx_reserved {
            d.rx_free_at
        } else {
            0
        }
    }

    /// QP `qi` finds the receiver's credit gate busy: it takes the next credit in turn
    /// (free at `at`) and waits for it, so that the receiver's senders share its rate in
    /// the order they asked, as NCCL's receiver grants credit per connection.
    fn reserve_rx(&mut self, qi: QpId, at: Ps) {
        let header = self.fab.net().header_bytes;
        let q = self.xport.tx_mut(qi);
        let wire = (q.size - q.snd_nxt).min(u64::from(q.mtu)) as u32 + header;
        let d = self.fab.port_mut(q.dst_port).nic_mut();
        if let Some(cap) = d.rx_cap {
            d.rx_free_at = at + cap.tx_time(wire);
            q.next_avail = at;
            q.rx_reserved = true;
        }
    }

    /// A packet arrives at NIC port `p`.
    pub(crate) fn nic_receive(&mut self, p: PortId, pkt: Packet) {
        match pkt.kind {
            Kind::Data => {
                if self.fab.port(p).nic().slow_rx.is_some() {
                    self.slow_rx_arrival(p, &pkt);
                }
                self.nic_rx_data(p, &pkt)
            }
            Kind::Ack | Kind::Nack => self.nic_rx_ack(&pkt),
            Kind::Cnp => self.nic_rx_cnp(p, &pkt),
            Kind::Pause => self.receive_pause(p, &pkt),
        }
        self.consume(&pkt);
    }

    /// Queues an ACK, NACK or CNP from the receiver of `qp` back to its sender.
    fn send_ctrl(&mut self, qp: QpId, kind: Kind, seq: u64, stamp: Stamp, ce: bool) {
        let q = self.xport.rx(qp);
        let prio = if kind == Kind::Cnp || self.fab.net().ack_prio_high {
            self.fab.net().cnp_prio
        } else {
            q.prio
        };
        let route = q.ack_route;
        let size = if kind == Kind::Cnp {
            CNP_BYTES
        } else if stamp.int_index().is_some() {
            // The ACK carries the data packet's INT back.
            ACK_BYTES + int::HEADER_BYTES as u16
        } else {
            ACK_BYTES
        };
        let pkt = self.alloc(Packet {
            seq,
            stamp,
            qp,
            route,
            in_port: PortId(0),
            size,
            payload: 0,
            hop: 1,
            kind,
            prio,
            ce,
            last: false,
        });
        let port = self.fab.routes().first(route);
        self.fab.port_mut(port).push_q(prio as usize, pkt);
        self.kick(port);
    }

    fn nic_rx_data(&mut self, p: PortId, pkt: &Packet) {
        let now = self.now;
        let qi = pkt.qp;
        if pkt.ce {
            self.stats.port(p).np_ecn_marked_roce_packets += 1;
            // The NP answers CE marks only for classes running DCQCN (roce_np enabled on
            // their priority), at most one CNP per QP per interval.
            let q = self.xport.rx_mut(qi);
            if let Some(interval) = q.cnp_interval
                && now >= q.rx_next_cnp
            {
                q.rx_next_cnp = now + interval;
                self.stats.port(p).np_cnp_sent += 1;
                self.send_ctrl(qi, Kind::Cnp, 0, Stamp::sent_at(now), false);
            }
        }
        let q = self.xport.rx_mut(qi);
        let ece = pkt.ce && q.echo_ecn;
        if pkt.seq == q.rx_expected {
            q.rx_expected += u64::from(pkt.payload);
            let ack = q.rx_expected;
            let complete = !q.rx_done && ack >= q.size;
            if complete {
                q.rx_done = true;
            }
            let owner = q.owner;
            self.send_ctrl(qi, Kind::Ack, ack, pkt.stamp, ece);
            if complete {
                self.qp_received(qi);
            }
            // A message's last packet completes a receive of a connection.
            if pkt.last && !matches!(owner, RxOwner::Flow(_)) {
                self.message_arrived(owner, qi);
            }
        } else if pkt.seq > q.rx_expected {
            self.stats.port(p).out_of_sequence += 1;
            let q = self.xport.rx_mut(qi);
            if now >= q.rx_nack_at || q.rx_last_nack != q.rx_expected {
                q.rx_nack_at = now + NACK_INTERVAL;
                q.rx_last_nack = q.rx_expected;
                let exp = q.rx_expected;
                self.send_ctrl(qi, Kind::Nack, exp, pkt.stamp, ece);
            } else {
                // No answer: the packet's INT ends here.
                self.drop_int(pkt);
            }
        } else {
            // A duplicate: the sender went back (NACK or timeout) or an ACK was lost. An RC
            // responder answers with the cumulative ACK, so a lost last ACK cannot leave
            // the sender retransmitting forever.
            self.stats.port(p).duplicate_request += 1;
            let ack = self.xport.rx(qi).rx_expected;
            self.send_ctrl(qi, Kind::Ack, ack, pkt.stamp, ece);
        }
    }

    /// Returns the INT record of a packet that will not be answered or delivered.
    #[inline]
    pub(crate) fn drop_int(&mut self, pkt: &Packet) {
        if let Some(i) = pkt.int_index() {
            self.cc.ints_mut().give_back(i);
        }
    }

    fn nic_rx_ack(&mut self, pkt: &Packet) {
        let now = self.now;
        let qi = pkt.qp;
        let q = self.xport.tx_mut(qi);
        // A finished QP has nothing to learn.
        if q.done {
            return;
        }
        let was_bound = q.win_bound();
        if pkt.seq > q.snd_una {
            q.snd_una = pkt.seq;
            q.last_progress = now;
            q.timeouts = 0;
            // Messages whose every byte is acknowledged complete (a persistent QP's).
            if q.wrs.front().is_some_and(|w| w.0 <= q.snd_una) {
                self.messages_acked(qi);
            }
        }
        let q = self.xport.tx_mut(qi);
        let mut kick = false;
        if pkt.kind == Kind::Nack {
            let sp = q.src_port;
            if q.snd_nxt > q.snd_una {
                q.snd_nxt = q.snd_una;
                q.wr_tx = 0;
                kick = true;
            }
            self.stats.port(sp).packet_seq_err += 1;
        }
        let q = self.xport.tx_mut(qi);
        let mut raised = false;
        let mut changed = false;
        match &mut q.cc {
            Cc::Timely(pi, s) => {
                let before = s.rate;
                s.on_ack(
                    pkt.seq,
                    q.snd_nxt,
                    now.saturating_sub(
                        pkt.stamp
                            .sent_time()
                            .expect("invariant: TIMELY's packets carry their send time"),
                    ),
                    self.cc.timely(*pi),
                );
                raised = s.rate > before;
            }
            Cc::Hpcc(pi, s) => {
                if let Some(i) = pkt.int_index() {
                    let rec = self.cc.ints().record(i);
                    changed = s.on_ack(pkt.seq, q.snd_nxt, &rec, self.cc.hpcc(*pi));
                }
            }
            Cc::Dctcp(pi, s) => {
                // The new rate applies from the next packet: the simulator sets it without
                // re-timing the one already scheduled.
                s.on_ack(pkt.seq, q.snd_nxt, pkt.ce, u64::from(q.mtu), self.cc.dctcp(*pi));
            }
            Cc::None | Cc::Dcqcn(..) => {}
        }
        let unbound = was_bound && !self.xport.tx(qi).win_bound();
        if self.xport.tx(qi).snd_una >= self.xport.tx(qi).size {
            if self.xport.tx(qi).persistent() {
                self.qp_idle(qi);
            } else {
                self.qp_complete(qi);
            }
        } else if changed {
            // HPCC re-times the next packet both ways (the simulator's `ChangeRate`).
            self.rate_changed(qi);
            if unbound {
                let sp = self.xport.tx(qi).src_port;
                self.kick(sp);
            }
        } else if kick || unbound {
            let sp = self.xport.tx(qi).src_port;
            self.kick(sp);
        } else if raised {
            self.rate_raised(qi);
        }
    }

    fn nic_rx_cnp(&mut self, p: PortId, pkt: &Packet) {
        let now = self.now;
        let qi = pkt.qp;
        let q = self.xport.tx_mut(qi);
        let sp = q.src_port;
        let _ = p;
        // A persistent QP reacts even when idle: its rate carries to its next message.
        let retired = q.retired();
        match &mut q.cc {
            Cc::Dcqcn(pi, s) if !retired => {
                self.stats.port(sp).rp_cnp_handled += 1;
                if let Some(t) = s.on_cnp(now, self.cc.dcqcn(*pi)) {
                    self.schedule(t, Event::DcqcnDec(qi));
                }
            }
            _ => self.stats.port(sp).rp_cnp_ignored += 1,
        }
    }

    /// Arms QP `qi`'s ACK timer at `at`. ACK timers live in their own heap, so that a QP
    /// that completes takes its timer with it (with a 4.3 s timeout, a timer left in the
    /// event queue would outlive nearly every run and every QP).
    fn arm_rto(&mut self, qi: QpId, at: Ps) {
        let dev = self.fab.port(self.xport.tx(qi).src_port).dev_idx;
        let tie = self.tie(at, dev);
        self.xport.arm(qi, at, tie);
    }

    /// The ACK timer of QP `qi` fired: go back to the last acknowledged byte if nothing
    /// moved for a whole timeout.
    pub(crate) fn rto(&mut self, qi: QpId) {
        let now = self.now;
        let q = self.xport.tx_mut(qi);
        if q.done || q.snd_una >= q.snd_nxt {
            q.rto_pending = false;
            return;
        }
        let deadline = q.last_progress + self.fab.net().ack_timeout;
        if deadline > now {
            self.arm_rto(qi, deadline);
            return;
        }
        let sp = q.src_port;
        self.stats.port(sp).local_ack_timeout_err += 1;
        if q.timeouts >= self.fab.net().retry_cnt {
            self.qp_failed(qi);
            return;
        }
        q.timeouts += 1;
        let q = self.xport.tx_mut(qi);
        q.snd_nxt = q.snd_una;
        q.wr_tx = 0;
        q.last_progress = now;
        self.arm_rto(qi, now + self.fab.net().ack_timeout);
        self.kick(sp);
    }

    /// NIC port `p`'s transmitter is free: PFC frames first, then control packets by
    /// priority, then data from the QPs in round robin.
    pub(crate) fn nic_send(&mut self, p: PortId) {
        let now = self.now;
        if let Some(pkt) = self.fab.port_mut(p).ctrl.pop_front() {
            self.transmit(p, pkt);
            self.after_nic_tx(p);
            return;
        }
        if let Some(prio) = self.sendable(p).highest() {
            // Control packets, highest priority first.
            let pkt = self.fab.port_mut(p).pop_q(prio);
            self.transmit(p, pkt);
            self.after_nic_tx(p);
            return;
        }
        // Data waits while the host side (a degraded PCIe link) is still busy.
        if self.fab.port(p).nic().host_free_at > now {
            self.after_nic_tx(p);
            return;
        }
        // Data: round robin over QPs whose rate limiter allows a packet now.
        let n = self.fab.port(p).nic().qps.len();
        let start = self.fab.port(p).nic().rr_qp;
        let mut any_done = false;
        let mut chosen = None;
        for i in 1..=n {
            let idx = (start + i) % n;
            let qi = self.fab.port(p).nic().qps[idx];
            let q = self.xport.tx(qi);
            if q.done {
                any_done = true;
                continue;
            }
            if q.snd_nxt >= q.size || q.next_avail > now || q.win_bound() {
                continue;
            }
            let prio = q.prio as usize;
            if self.is_paused(p, prio) {
                continue;
            }
            let gate = self.rx_gate(qi);
            if gate > now {
                self.reserve_rx(qi, gate);
                continue;
            }
            chosen = Some((idx, qi));
            break;
        }
        if let Some((idx, qi)) = chosen {
            self.fab.port_mut(p).nic_mut().rr_qp = idx;
            self.send_data(p, qi);
        }
        if any_done {
            let xport = &mut self.xport;
            let port = self.fab.port_mut(p).nic_mut();
            // Keep the round-robin pointer on the same QP: shift it by the finished QPs
            // removed before it.
            let removed_before = port.qps[..port.rr_qp.min(port.qps.len())]
                .iter()
                .filter(|q| xport.tx(**q).done)
                .count();
            port.qps.retain(|q| {
                let keep = !xport.tx(*q).done;
                if !keep {
                    xport.tx_mut(*q).listed = false;
                }
                keep
            });
            port.rr_qp = (port.rr_qp - removed_before).min(port.qps.len().saturating_sub(1));
        }
        self.after_nic_tx(p);
    }

    fn send_data(&mut self, p: PortId, qi: QpId) {
        let now = self.now;
        let header = self.fab.net().header_bytes;
        let q = self.xport.tx_mut(qi);
        // Packets never span two messages: a message's last one may be short.
        let (end, message) = q.message_end();
        let payload = (end - q.snd_nxt).min(u64::from(q.mtu)) as u32;
        let seq = q.snd_nxt;
        q.snd_nxt += u64::from(payload);
        let last = message && q.snd_nxt == end;
        // An HPCC packet carries INT: its bytes on the wire, its record out of line.
        let (stamp, int_bytes) = match &q.cc {
            Cc::Hpcc(pi, _) => {
                let multi = self.cc.hpcc(*pi).multi as u8;
                (Stamp::int(self.cc.ints_mut().take(multi)), int::HEADER_BYTES)
            }
            _ => (Stamp::sent_at(now), 0),
        };
        let q = self.xport.tx_mut(qi);
        let wire = payload + header + int_bytes;
        if let Cc::Dcqcn(pi, s) = &mut q.cc {
            s.on_sent(wire, self.cc.dcqcn(*pi));
        }
        q.last_sent = now;
        q.last_wire = wire;
        q.next_avail = now + super::cc_timers::paced_gap(q, self.fab.port(p).rate.tx_time(wire));
        if !matches!(q.owner, TxOwner::Cts { .. }) {
            // A clear-to-send QP is the receiver's control path, not a sender of data
            // (the rate samples leave it out too).
            self.stats.steady_sent(qi, now, q.rate_bps(), q.snd_nxt < q.size);
        }
        let dst = q.dst_port;
        let port = self.fab.port_mut(p);
        let n = port.nic_mut();
        if let Some(cap) = n.host_cap {
            n.host_free_at = n.host_free_at.max(now) + cap.tx_time(wire);
        }
        let d = self.fab.port_mut(dst).nic_mut();
        if q.rx_reserved {
            // The credit was taken when the QP asked for it.
            q.rx_reserved = false;
        } else if let Some(cap) = d.rx_cap {
            d.rx_free_at = d.rx_free_at.max(now) + cap.tx_time(wire);
        }
        let arm_rto = !q.rto_pending;
        q.rto_pending = true;
        let (prio, route) = (q.prio, q.route);
        let pkt = self.alloc(Packet {
            seq,
            stamp,
            qp: qi,
            route,
            in_port: PortId(0),
            size: wire as u16,
            payload: payload as u16,
            hop: 1,
            kind: Kind::Data,
            prio,
            ce: false,
            last,
        });
        self.transmit(p, pkt);
        if arm_rto {
            self.arm_rto(qi, now + self.fab.net().ack_timeout);
        }
    }

    /// Schedules the next wake of NIC port `p`: when the link is free if control packets
    /// wait, else when the earliest rate limiter or pause lets a QP send.
    fn after_nic_tx(&mut self, p: PortId) {
        let now = self.now;
        let port = self.fab.port(p);
        let busy = port.busy_until.max(now);
        let mut t = NEVER;
        if !port.ctrl.is_empty() {
            t = busy;
        }
        for prio in port.nonempty.iter() {
            let pause_end = port.pfc[prio].paused_until;
            t = t.min(if pause_end > now {
                pause_end.max(busy)
            } else {
                busy
            });
        }
        let nic = port.nic();
        for &qi in &nic.qps {
            let q = self.xport.tx(qi);
            // A window-bound QP waits for an ACK, which kicks the port.
            if q.done || q.snd_nxt >= q.size || q.win_bound() {
                continue;
            }
            let pause_end = port.pfc[q.prio as usize].paused_until;
            let ready = q
                .next_avail
                .max(busy)
                .max(nic.host_free_at)
                .max(self.rx_gate(qi))
                .max(if pause_end > now { pause_end } else { 0 });
            t = t.min(ready);
        }
        if t != NEVER {
            debug_assert!(
                t > now || self.fab.port(p).busy_until > now,
                "invariant: nic_send sends whatever is sendable now"
            );
            self.schedule_wake(p, t.max(now + 1));
        }
    }

    /// Bytes the receiver of a QP got in order.
    pub(crate) fn qp_received_bytes(&self, qp: QpId) -> u64 {
        let q = self.xport.rx(qp);
        q.rx_expected.min(q.size)
    }
}
