//! Partitions of a parallel run: each owns some devices and handles only their events;
//! what crosses to another partition is a packet on a cut link (data, ACK, CNP, PFC
//! frame), and the receiving half of a transfer's QP, which the receiver needs when that
//! transfer's first packet arrives. Both travel in an outbox, delivered at the end of
//! each window; a packet sent in a window arrives no earlier than the window's end,
//! because windows are no longer than the shortest time a packet takes on a cut link
//! (the lookahead).

use std::sync::Arc;

use super::Sim;
use super::collective::TransferRecord;
use super::flows::Origin;
use super::ids::{FlowId, PortId, QpId};
use super::nic::QpRx;
use crate::cc::int::Record;
use crate::packet::{INT_TAG, Packet};
use crate::queue::Queue;
use crate::time::Ps;

/// Which partition owns each device, and which one this is.
#[derive(Debug, Clone)]
pub struct PartMap {
    /// This partition.
    pub me: u16,
    /// Partitions in the run.
    pub parts: u16,
    /// The partition of each device (NICs, then switches).
    pub of_dev: Arc<Vec<u16>>,
}

impl PartMap {
    /// Whether this partition owns device `dev`.
    #[inline]
    pub fn owns(&self, dev: u32) -> bool {
        self.of_dev[dev as usize] == self.me
    }
}

/// A packet leaving its partition on a cut link, with what its arrival needs.
#[derive(Debug, Clone)]
pub struct LinkMsg {
    /// The link (the port it leaves).
    pub link: PortId,
    /// When it arrives.
    pub at: Ps,
    /// The tie of its arrival event.
    pub tie: u64,
    /// The packet.
    pub pkt: Packet,
    /// Its INT record, if it carries one (HPCC): the index in the packet is only
    /// meaningful in the partition that made it.
    pub int: Option<Record>,
}

/// What one partition sends another at the end of a window.
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    /// Packets, in the order they were put on their links.
    pub(crate) links: Vec<LinkMsg>,
    /// Receiving halves of transfers' QPs whose receiver the other partition owns.
    pub(crate) rx: Vec<(QpId, QpRx)>,
}

impl Outbox {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty() && self.rx.is_empty()
    }

    /// The earliest arrival of a packet in it.
    pub fn first_arrival(&self) -> Option<Ps> {
        self.links.iter().map(|m| m.at).min()
    }

    /// Packets in it.
    pub fn packets(&self) -> usize {
        self.links.len()
    }
}

/// Ids of transfers' QP slots are taken in blocks, block `k * parts + me` being this
/// partition's `k`-th: no two partitions ever take the same id, and neither's ids depend
/// on the other's pace.
pub(crate) const QP_BLOCK: u32 = 1024;

impl<Q: Queue> Sim<Q> {
    /// Whether this run owns device `dev` (a serial run owns every device).
    #[inline]
    pub(crate) fn owns(&self, dev: u32) -> bool {
        self.part.as_ref().is_none_or(|p| p.owns(dev))
    }

    /// Sends a packet over a cut link to the partition at its other end.
    pub(crate) fn ship(&mut self, p: PortId, at: Ps, tie: u64, mut pkt: Packet) {
        let to_dev = self.links[p].to_dev;
        let dest = self
            .part
            .as_ref()
            .expect("invariant: only partitioned runs cut links")
            .of_dev[to_dev as usize] as usize;
        let int = pkt.int_index().map(|i| {
            let rec = self.ints.records[i as usize];
            self.ints.give_back(i);
            pkt.ts = 0;
            rec
        });
        // The packet lives on in the other partition's ledger.
        self.ledger.live_packets -= 1;
        self.shipped_packets += 1;
        self.outbox[dest].links.push(LinkMsg {
            link: p,
            at,
            tie,
            pkt,
            int,
        });
    }

    /// Takes what another partition sent: packets onto their links (their arrivals are
    /// queued as each becomes its link's head) and receiving halves to install.
    pub fn deliver(&mut self, from: &mut Outbox) {
        for m in from.links.drain(..) {
            let mut pkt = m.pkt;
            if let Some(rec) = m.int {
                let i = self.ints.take(rec.multi);
                self.ints.records[i as usize] = rec;
                pkt.ts = INT_TAG | u64::from(i);
            }
            self.ledger.live_packets += 1;
            self.ledger.peak_live_packets = self.ledger.peak_live_packets.max(self.ledger.live_packets);
            self.put_on_link(m.link, m.at, m.tie, pkt);
        }
        for (qi, rx) in from.rx.drain(..) {
            self.qps_rx.grow_to(qi.idx() + 1, QpRx::placeholder);
            self.rx_init.grow_to(qi.idx() + 1, || None);
            self.rx_init[qi] = Some(rx);
        }
    }

    /// Hands the receiving half of transfer QP `qi` to whoever owns its receiver.
    pub(crate) fn place_rx_init(&mut self, qi: QpId, rx: QpRx, receiver_dev: u32) {
        match &self.part {
            Some(p) if !p.owns(receiver_dev) => {
                let dest = p.of_dev[receiver_dev as usize] as usize;
                self.outbox[dest].rx.push((qi, rx));
            }
            _ => self.rx_init[qi] = Some(rx),
        }
    }

    /// The first slot of a new group of `n` QP slots for a transfer (see [`QP_BLOCK`]).
    pub(crate) fn new_qp_group(&mut self, n: u32) -> u32 {
        let (me, parts) = self
            .part
            .as_ref()
            .map_or((0, 1), |p| (u32::from(p.me), u32::from(p.parts)));
        if self.qp_block_left < n {
            let k = self.qp_blocks_taken;
            self.qp_blocks_taken += 1;
            self.qp_next = self.qp_base + (k * parts + me) * QP_BLOCK;
            self.qp_block_left = QP_BLOCK;
        }
        let first = self.qp_next;
        self.qp_next += n;
        self.qp_block_left -= n;
        first
    }

    /// The outboxes of this window, to hand to the other partitions.
    pub fn take_outboxes(&mut self) -> Vec<Outbox> {
        let n = self.outbox.len();
        std::mem::replace(&mut self.outbox, vec![Outbox::default(); n])
    }
}

impl<Q: Queue> Sim<Q> {
    /// The partitions of a finished run folded into one, which reads as the serial run
    /// would: each port, link ring, switch, flow half and QP half from the partition that
    /// owns it (a link's ring from its far end, where its packets arrive), transfer records
    /// field by field from the side that wrote each, totals summed, samples gathered in
    /// time and port order. Every partition must have finished (`finish_run`) at the same
    /// time. Transfers' flows and QP slots are left out: the records say what the results
    /// need of them.
    ///
    /// # Panics
    /// When `parts` is empty or not the partitions of one run (an engine bug).
    pub fn merge(mut parts: Vec<Sim<Q>>) -> Sim<Q> {
        parts.sort_by_key(|s| s.part.as_ref().map_or(0, |p| p.me));
        let mut rest = parts.split_off(1);
        let mut base = parts.pop().expect("invariant: a run has a partition");
        let Some(map) = base.part.clone() else {
            assert!(rest.is_empty(), "invariant: a serial run is one partition");
            return base;
        };
        let n_nics = base.nics.len();
        let n_defs = base
            .flows
            .iter()
            .position(|f| f.origin != Origin::Def)
            .unwrap_or(base.flows.len());
        let qp_base = base.qp_base as usize;
        base.flows.truncate(n_defs);
        base.qps_tx.truncate(qp_base);
        base.qps_rx.truncate(qp_base);
        for o in &mut rest {
            let me = o.part.as_ref().expect("invariant: partitions of one run").me;
            let mine = |dev: u32| map.of_dev[dev as usize] == me;
            for pi in 0..base.ports.len() {
                let p = PortId::from(pi);
                if mine(base.ports[p].dev_idx) {
                    std::mem::swap(&mut base.ports[p], &mut o.ports[p]);
                    std::mem::swap(&mut base.counters[p], &mut o.counters[p]);
                }
                if mine(base.links[p].to_dev) {
                    std::mem::swap(&mut base.links[p], &mut o.links[p]);
                }
            }
            for s in 0..base.switches.len() {
                if mine((n_nics + s) as u32) {
                    std::mem::swap(&mut base.switches[s], &mut o.switches[s]);
                }
            }
            for q in 0..qp_base {
                let q = QpId(q as u32);
                let (src, dst) = (o.qps_tx[q].src_port, o.qps_tx[q].dst_port);
                if mine(base.ports[src].dev_idx) {
                    std::mem::swap(&mut base.qps_tx[q], &mut o.qps_tx[q]);
                }
                if mine(base.ports[dst].dev_idx) {
                    std::mem::swap(&mut base.qps_rx[q], &mut o.qps_rx[q]);
                }
            }
            for i in 0..n_defs {
                let f = FlowId::from(i);
                let (b, x) = (&mut base.flows[f], &mut o.flows[f]);
                // A flow inside a host has both halves there; a network flow's receiver
                // is its QPs' destination.
                let receiver = match b.local {
                    Some(_) => b.dev,
                    None => base.ports[base.qps_tx[QpId(b.tx.first_qp)].dst_port].dev_idx,
                };
                if mine(b.dev) {
                    b.started = x.started;
                    std::mem::swap(&mut b.tx, &mut x.tx);
                }
                if mine(receiver) {
                    std::mem::swap(&mut b.rx, &mut x.rx);
                }
            }
            for (b, x) in base.colls.iter_mut().zip(&mut o.colls) {
                b.arrived += x.arrived;
                b.last_arrival = b.last_arrival.max(x.last_arrival);
                if let (Some(br), Some(xr)) = (&mut b.records, &mut x.records) {
                    for (b, x) in br.iter_mut().zip(xr.iter_mut()) {
                        if let Some(x) = x.take() {
                            b.get_or_insert_with(TransferRecord::default).absorb(x);
                        }
                    }
                }
            }
            base.samples.counters.append(&mut o.samples.counters);
            base.samples.rates.append(&mut o.samples.rates);
            base.samples.queues.append(&mut o.samples.queues);
            base.pfc_log.append(&mut o.pfc_log);
            base.ledger.absorb(&o.ledger);
            base.events += o.events;
            base.packet_hops += o.packet_hops;
            base.shipped_packets += o.shipped_packets;
            base.stray_packets += o.stray_packets;
            base.qps_failed += o.qps_failed;
            base.flows_done += o.flows_done;
            base.last_done_at = base.last_done_at.max(o.last_done_at);
            base.ints.live += o.ints.live;
            // Peaks of different partitions need not coincide: their sum bounds the run's.
            base.peak_live_transfers += o.peak_live_transfers;
            base.peak_live_transfer_qps += o.peak_live_transfer_qps;
            base.merged_peak_pending += o.q.peak() + o.merged_peak_pending;
            debug_assert_eq!(base.now, o.now, "invariant: partitions finish at one time");
        }
        // Each partition's samples are in time order, and at one time in port order.
        base.samples.counters.sort_by_key(|&(t, p, ..)| (t, p));
        base.samples.queues.sort_by_key(|&(t, p, prio, _)| (t, p, prio));
        for l in base.links.iter_mut() {
            l.cut = false;
        }
        base.part = None;
        base
    }
}

impl TransferRecord {
    /// Takes the fields another partition wrote (the sender's or the receiver's).
    fn absorb(&mut self, x: TransferRecord) {
        self.start = self.start.or(x.start);
        self.finish = self.finish.or(x.finish);
        self.rx_done = self.rx_done.or(x.rx_done);
        self.ideal = self.ideal.max(x.ideal);
        self.lower_bound = self.lower_bound.max(x.lower_bound);
        self.bytes_received += x.bytes_received;
    }
}
