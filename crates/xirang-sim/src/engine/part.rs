//! Partitions of a parallel run: each owns some devices and handles only their events;
//! what crosses to another partition is a packet on a cut link (data, ACK, CNP, PFC
//! frame, a collective's clear-to-send), in an outbox delivered at the end of each
//! window; a packet sent in a window arrives no earlier than the window's end, because
//! windows are no longer than the shortest time a packet takes on a cut link (the
//! lookahead).
//!
//! ```compile_fail
//! // Only this module moves a partition's outboxes and its count of packets shipped.
//! fn forge(d: &mut xirang_sim::engine::part::Dist) {
//!     d.shipped_packets = 0;
//! }
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Sim;
use super::collective::TransferRecord;
use super::flows::{FlowRx, FlowTx};
use super::ids::{FlowId, PortId, QpId};
use super::link::{Link, Port};
use super::nic::QpRx;
use super::nic::QpTx;
use super::switch::SwitchState;
use crate::cc::int::Record;
use crate::counters::PortCounters;
use crate::packet::{Packet, Stamp};
use crate::queue::{Queue, Tie};
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

/// A partition's place among the others: the partition component. Its state is its
/// own; this module's handlers ship packets and merge partitions, the others ask it.
#[derive(Debug)]
pub struct Dist {
    /// The partition this is, in a parallel run.
    map: Option<PartMap>,
    /// What this partition sends each other one at the end of the window.
    outbox: Vec<Outbox>,
    /// Packets sent to other partitions.
    shipped_packets: u64,
    /// The other partitions' peaks of pending events, once merged (`Sim::merge`).
    merged_peak_pending: usize,
}

impl Dist {
    /// The partition `map` of a parallel run (None: the whole run).
    pub fn new(map: Option<PartMap>) -> Dist {
        Dist {
            outbox: vec![Outbox::default(); map.as_ref().map_or(0, |p| usize::from(p.parts))],
            map,
            shipped_packets: 0,
            merged_peak_pending: 0,
        }
    }

    /// The partition this is, in a parallel run.
    pub fn map(&self) -> Option<&PartMap> {
        self.map.as_ref()
    }

    /// This partition's number (0 for a whole run).
    pub fn me(&self) -> u16 {
        self.map.as_ref().map_or(0, |p| p.me)
    }

    /// True when this partition runs device `dev` (a whole run runs every one).
    #[inline(always)]
    pub fn owns(&self, dev: u32) -> bool {
        self.map.as_ref().is_none_or(|p| p.owns(dev))
    }

    /// The other partitions' peaks of pending events, once merged.
    pub fn merged_peak_pending(&self) -> usize {
        self.merged_peak_pending
    }
}

/// A packet leaving its partition on a cut link, with what its arrival needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkMsg {
    /// The link (the port it leaves).
    pub link: PortId,
    /// When it arrives.
    pub at: Ps,
    /// The tie of its arrival event.
    pub tie: Tie,
    /// The packet.
    pub pkt: Packet,
    /// Its INT record, if it carries one (HPCC): the index in the packet is only
    /// meaningful in the partition that made it.
    pub int: Option<Record>,
}

/// What one partition sends another at the end of a window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Outbox {
    /// Packets, in the order they were put on their links.
    pub(crate) links: Vec<LinkMsg>,
}

impl Outbox {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
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

impl<Q: Queue> Sim<Q> {
    /// Whether this run owns device `dev` (a serial run owns every device).
    #[inline]
    pub(crate) fn owns(&self, dev: u32) -> bool {
        self.dist.owns(dev)
    }

    /// Sends a packet over a cut link to the partition at its other end.
    pub(crate) fn ship(&mut self, p: PortId, at: Ps, tie: Tie, mut pkt: Packet) {
        let to_dev = self.fab.link(p).to_dev;
        let dest = self
            .dist
            .map
            .as_ref()
            .expect("invariant: only partitioned runs cut links")
            .of_dev[to_dev as usize] as usize;
        let int = pkt.int_index().map(|i| {
            let rec = self.cc.ints().record(i);
            self.cc.ints_mut().give_back(i);
            pkt.stamp = Stamp::NONE;
            rec
        });
        // The packet lives on in the other partition's ledger.
        self.stats.ledger_mut().live_packets -= 1;
        self.dist.shipped_packets += 1;
        self.dist.outbox[dest].links.push(LinkMsg {
            link: p,
            at,
            tie,
            pkt,
            int,
        });
    }

    /// Takes what another partition sent: packets onto their links (their arrivals are
    /// queued as each becomes its link's head).
    pub fn deliver(&mut self, from: &mut Outbox) {
        for m in from.links.drain(..) {
            let mut pkt = m.pkt;
            if let Some(rec) = m.int {
                let i = self.cc.ints_mut().put(rec);
                pkt.stamp = Stamp::int(i);
            }
            let l = self.stats.ledger_mut();
            l.live_packets += 1;
            l.peak_live_packets = l.peak_live_packets.max(l.live_packets);
            self.put_on_link(m.link, m.at, m.tie, pkt);
        }
    }

    /// The outboxes of this window, to hand to the other partitions.
    pub fn take_outboxes(&mut self) -> Vec<Outbox> {
        let n = self.dist.outbox.len();
        std::mem::replace(&mut self.dist.outbox, vec![Outbox::default(); n])
    }
}

/// What a finished partition contributes to the run's results: the state of what it
/// owns (each port with its counters, each link ring arriving at one of its devices, each
/// switch, the flow and QP halves of its NICs, its collectives' arrivals and its side of
/// their transfer records) and its totals. It travels to the partition that gathers the
/// run (another thread, or rank 0 of an MPI run), which [`Sim::absorb`]s it.
#[derive(Debug, Serialize, Deserialize)]
pub struct PartState {
    me: u16,
    now: Ps,
    ports: Vec<(PortId, Port, PortCounters)>,
    links: Vec<(PortId, Link)>,
    switches: Vec<(u32, SwitchState)>,
    qps_tx: Vec<(QpId, QpTx)>,
    qps_rx: Vec<(QpId, QpRx)>,
    flows_tx: Vec<(FlowId, Option<Ps>, FlowTx)>,
    flows_rx: Vec<(FlowId, FlowRx)>,
    colls: Vec<CollPart>,
    stats: super::stats::Shipped,
    shipped_packets: u64,
    stray_packets: u64,
    qps_failed: u64,
    work: super::work::Counts,
    ints_live: usize,
    peak_pending: usize,
    /// What fast-forward skips added to the ports it owns.
    ff_offsets: Vec<(PortId, PortCounters)>,
}

impl PartState {
    /// The partition it comes from.
    pub fn part(&self) -> u16 {
        self.me
    }
}

/// A partition's side of one collective.
#[derive(Debug, Serialize, Deserialize)]
struct CollPart {
    arrived: u64,
    last_arrival: Option<Ps>,
    records: Option<Vec<Option<TransferRecord>>>,
    iter_done: Vec<u32>,
    iter_end: Vec<Option<Ps>>,
    failed: bool,
}

impl<Q: Queue> Sim<Q> {
    /// The device that receives flow `f` (a flow inside a host has both halves there; a
    /// network flow's receiver is its QPs' destination).
    fn receiver_of(&self, f: FlowId) -> u32 {
        let fl = self.work.flow(f);
        match fl.local {
            Some(_) => fl.dev,
            None => {
                self.fab
                    .port(self.xport.tx(QpId(fl.tx.first_qp)).dst_port)
                    .dev_idx
            }
        }
    }

    /// What a finished partition owns (see [`PartState`]); the rest of it is dropped.
    ///
    /// # Panics
    /// When the run is not partitioned.
    pub fn into_part_state(mut self) -> PartState {
        let map = self
            .dist
            .map
            .clone()
            .expect("invariant: a partition's state comes from a partitioned run");
        let mine = |dev: u32| map.owns(dev);
        let n_nics = self.fab.nics().len();
        // Who owns what, while every port still names its device.
        let qp_owned: Vec<(bool, bool)> = (0..self.xport.n_qps())
            .map(|q| {
                let q = self.xport.tx(QpId(q));
                (
                    mine(self.fab.port(q.src_port).dev_idx),
                    mine(self.fab.port(q.dst_port).dev_idx),
                )
            })
            .collect();
        let flow_owned: Vec<(bool, bool)> = (0..self.work.n_flows())
            .map(|i| {
                let f = FlowId::from(i);
                (mine(self.work.flow(f).dev), mine(self.receiver_of(f)))
            })
            .collect();
        let ff_offsets: Vec<(PortId, PortCounters)> = self
            .ff
            .take_offsets()
            .map(|o| {
                o.into_iter_enumerated()
                    .filter(|(p, _)| mine(self.fab.port(*p).dev_idx))
                    .collect()
            })
            .unwrap_or_default();
        let counters = self.stats.take_counters();
        let (ports, links, switches) = self.fab.take_owned(
            counters,
            |p| mine(p.dev_idx),
            |l| mine(l.to_dev),
            |s| mine((n_nics + s) as u32),
        );
        let (qps_tx, qps_rx) = self.xport.take();
        let qps_tx = qps_tx
            .into_iter_enumerated()
            .filter(|(q, _)| qp_owned[q.idx()].0)
            .collect();
        let qps_rx = qps_rx
            .into_iter_enumerated()
            .filter(|(q, _)| qp_owned[q.idx()].1)
            .collect();
        let mut flows_tx = Vec::new();
        let mut flows_rx = Vec::new();
        for (f, fl) in self.work.take_flows().into_iter_enumerated() {
            let (tx, rx) = flow_owned[f.idx()];
            if tx {
                flows_tx.push((f, fl.started, fl.tx));
            }
            if rx {
                flows_rx.push((f, fl.rx));
            }
        }
        let colls = self
            .work
            .colls_mut()
            .map(|c| CollPart {
                arrived: c.arrived,
                last_arrival: c.last_arrival,
                records: c.records.take(),
                iter_done: std::mem::take(&mut c.iter_done),
                iter_end: std::mem::take(&mut c.iter_end),
                failed: c.failed,
            })
            .collect();
        PartState {
            me: map.me,
            now: self.now,
            ports,
            links,
            switches,
            qps_tx,
            qps_rx,
            flows_tx,
            flows_rx,
            colls,
            stats: self.stats.ship(),
            shipped_packets: self.dist.shipped_packets,
            stray_packets: self.xport.stray(),
            qps_failed: self.xport.failed(),
            work: self.work.counts(),
            ints_live: self.cc.ints().live(),
            peak_pending: self.q.peak() + self.dist.merged_peak_pending,
            ff_offsets,
        }
    }

    /// Puts another partition's state into this one (see [`PartState`]).
    pub fn absorb(&mut self, o: PartState) {
        for (p, port, counters) in o.ports {
            self.fab.set_port(p, port);
            self.stats.set_counters(p, counters);
        }
        let n_ports = self.fab.ports().count();
        for (p, off) in o.ff_offsets {
            self.ff.set_offset(p, off, n_ports);
        }
        for (p, link) in o.links {
            self.fab.set_link(p, link);
        }
        for (s, sw) in o.switches {
            self.fab.set_switch(s as usize, sw);
        }
        for (q, tx) in o.qps_tx {
            self.xport.set_tx(q, tx);
        }
        for (q, rx) in o.qps_rx {
            self.xport.set_rx(q, rx);
        }
        for (f, started, tx) in o.flows_tx {
            self.work.flow_mut(f).started = started;
            self.work.flow_mut(f).tx = tx;
        }
        for (f, rx) in o.flows_rx {
            self.work.flow_mut(f).rx = rx;
        }
        for (b, x) in self.work.colls_mut().zip(o.colls) {
            b.arrived += x.arrived;
            b.last_arrival = b.last_arrival.max(x.last_arrival);
            b.failed |= x.failed;
            for (d, e) in b.iter_done.iter_mut().zip(x.iter_done) {
                *d += e;
            }
            for (d, e) in b.iter_end.iter_mut().zip(x.iter_end) {
                *d = (*d).max(e);
            }
            if let (Some(br), Some(xr)) = (&mut b.records, x.records) {
                for (b, x) in br.iter_mut().zip(xr) {
                    if let Some(x) = x {
                        b.get_or_insert_with(TransferRecord::default).absorb(x);
                    }
                }
            }
        }
        self.stats.absorb(o.stats);
        self.dist.shipped_packets += o.shipped_packets;
        self.xport.absorb_totals(o.stray_packets, o.qps_failed);
        // Peaks of different partitions need not coincide: their sum bounds the run's.
        self.work.absorb_counts(o.work);
        self.cc.ints_mut().absorb_live(o.ints_live);
        self.dist.merged_peak_pending += o.peak_pending;
        debug_assert_eq!(self.now, o.now, "invariant: partitions finish at one time");
    }

    /// The partitions of a finished run folded into one, which reads as the serial run
    /// would: each port, link ring, switch, flow half and QP half from the partition that
    /// owns it (a link's ring from its far end, where its packets arrive), transfer records
    /// field by field from the side that wrote each, totals summed, samples gathered in
    /// time and port order. Every partition must have finished (`finish_run`) at the same
    /// time.
    pub fn merge(mut parts: Vec<Sim<Q>>) -> Sim<Q> {
        parts.sort_by_key(|s| s.dist.map.as_ref().map_or(0, |p| p.me));
        let rest = parts.split_off(1);
        let mut base = parts.pop().expect("invariant: a run has a partition");
        if base.dist.map.is_none() {
            assert!(rest.is_empty(), "invariant: a serial run is one partition");
            return base;
        }
        let states: Vec<PartState> = rest.into_iter().map(Sim::into_part_state).collect();
        base.gather(states);
        base
    }

    /// Folds the other partitions' states into this one (partition 0) and makes it the
    /// serial run's image (see [`Sim::merge`]).
    pub fn gather(&mut self, states: Vec<PartState>) {
        for st in states {
            self.absorb(st);
        }
        self.stats.sort_samples();
        for l in self.fab.links_mut() {
            l.cut = false;
        }
        self.dist.map = None;
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
