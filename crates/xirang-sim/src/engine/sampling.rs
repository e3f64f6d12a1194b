//! Time series: each sending QP's rate, each non-empty switch egress queue, and every
//! counter that changed since the previous sample, taken every sampling interval.
//!
//! Samples are taken in reported time. A fast-forward skip makes up the samples of the
//! time it skips (`Sim::ff_make_up_samples`): the steady state it skips holds every rate
//! and queue, and its counters grow in proportion to time.
//!
//! A sample compares each counter with its last value by slot (port, then the counter's
//! position in what the port reports) and keeps changed values as codes; names are
//! rendered when results are collected, never in the sampling event.

use super::ids::PortId;
use super::nic::TxOwner;
use super::{Dev, Sim};
use crate::counters::{CounterName, N_PRIO, SLOTS_PER_PORT, Scope};
use crate::queue::Queue;
use crate::time::Ps;

/// Whose rate a sample is: a scenario flow by its definition slot, or a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum RateOf {
    Flow(u32),
    Transfer { coll: u32, iteration: u32, index: u64 },
}

/// A counter never sampled.
const UNSEEN: u64 = u64::MAX;

/// Time-series samples.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Samples {
    /// (time, port, scope, counter, value) for every counter whose value changed since the
    /// previous sample, in the order the ports report them.
    pub(crate) counters: Vec<(Ps, PortId, Scope, CounterName, u64)>,
    /// Last value of each (port, slot); `UNSEEN` before its first report.
    last: Vec<u64>,
    /// (time, what the QP's flow is, the QP's place in its flow, rate bit/s) of sending
    /// QPs: named by their flow, not by their slot, which a collective reuses.
    pub(crate) rates: Vec<(Ps, RateOf, u32, f64)>,
    /// (time, port, prio, bytes) of non-empty switch egress queues.
    pub queues: Vec<(Ps, PortId, u8, u64)>,
}

/// A sample a fast-forward skip makes up, `into` the skip (`dt` long, `slices` per
/// connection). It takes every data QP of collective `coll` (whose connections the skip
/// moves) as sending, idle or not at the skip's instant: over a steady state they send,
/// while at one instant the exact run lists those with a message posted (on a 128-GPU
/// ring, all or none: its QPs send in step, and the skip's check may fall where none
/// has). Each is named by the transfer of the slice as many on from the one at its head
/// (idle, the last handed on) as its connection hands on by then, one per time per
/// slice (`dt / slices`) from when it handed its last (`ConnTx::handed_at`), its
/// primitives being `per` slices each (`transport::Conn::transfer_ahead`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MadeUp {
    pub(crate) coll: u32,
    pub(crate) into: Ps,
    pub(crate) dt: Ps,
    pub(crate) slices: u64,
    pub(crate) per: u64,
}

impl<Q: Queue> Sim<Q> {
    /// The sample due now.
    pub(crate) fn sample(&mut self) {
        self.take_sample(self.reported_now(), None);
    }

    /// A sample at `now` (reported time) of what the run holds, or one a skip makes up
    /// ([`MadeUp`]).
    pub(crate) fn take_sample(&mut self, now: Ps, made_up: Option<MadeUp>) {
        for (qi, q) in self.xport.tx_iter() {
            let steady_conn = match (made_up, q.owner) {
                (Some(MadeUp { coll, .. }), TxOwner::Conn { conn, .. }) => {
                    let c = self.work.conn(conn as usize);
                    c.coll == coll && self.owns(c.src_dev)
                }
                _ => false,
            };
            if q.done && !steady_conn {
                continue;
            }
            let (origin, place) = match q.owner {
                TxOwner::Flow(f) => {
                    let flow = self.work.flow(f);
                    if flow.started.is_none() {
                        continue;
                    }
                    (RateOf::Flow(f.0), qi.0 - flow.tx.first_qp)
                }
                // A connection's data QP, named by the transfer whose bytes it sends now
                // (the oldest it has not had acknowledged).
                TxOwner::Conn { conn, k } => {
                    let c = self.work.conn(conn as usize);
                    let head = q.wrs.front().map(|&(_, slice)| slice);
                    let meta = match (made_up.filter(|_| steady_conn), head) {
                        (None, Some(slice)) => c.tx.meta[(slice % u64::from(c.slots)) as usize],
                        (None, None) => continue,
                        (Some(m), _) => {
                            let since = m.into + self.now.saturating_sub(c.tx.handed_at);
                            let moved =
                                (u128::from(since) * u128::from(m.slices) / u128::from(m.dt.max(1))) as u64;
                            match c.transfer_ahead(head, moved, m.per) {
                                Some(meta) => meta,
                                None => continue,
                            }
                        }
                    };
                    (
                        RateOf::Transfer {
                            coll: c.coll,
                            iteration: meta.iteration,
                            index: meta.transfer,
                        },
                        u32::from(k),
                    )
                }
                TxOwner::Cts { .. } => continue,
            };
            self.stats
                .samples_mut()
                .rates
                .push((now, origin, place, q.rate_bps()));
        }
        // A partition samples its own ports (a QP sends only where it was made).
        for (pi, port) in self.fab.ports() {
            if !self.owns(port.dev_idx) {
                continue;
            }
            if matches!(port.dev, Dev::Switch(_)) {
                for prio in 0..N_PRIO {
                    if port.egress[prio].egr > 0 {
                        self.stats
                            .samples_mut()
                            .queues
                            .push((now, pi, prio as u8, port.egress[prio].egr));
                    }
                }
            }
        }
        let counters = self.port_counters();
        let samples = self.stats.samples_mut();
        if samples.last.is_empty() {
            samples.last = vec![UNSEEN; counters.len() * SLOTS_PER_PORT];
        }
        for (pi, c) in counters.iter_enumerated() {
            let dev = self.fab.port(pi).dev_idx;
            if !self.dist.owns(dev) {
                continue;
            }
            let base = pi.idx() * SLOTS_PER_PORT;
            let (last, out) = (&mut samples.last, &mut samples.counters);
            let mut keep = |slot: usize, scope: Scope, name: CounterName, value: u64| {
                let l = &mut last[base + slot];
                // A counter appears with its first non-zero value, then with every change.
                if *l != value && !(*l == UNSEEN && value == 0) {
                    *l = value;
                    out.push((now, pi, scope, name, value));
                }
            };
            match self.fab.port(pi).dev {
                Dev::Nic(_) => c.visit_nic(&self.fab.net().pfc_prios, &mut keep),
                Dev::Switch(_) => c.visit_switch(&self.fab.net().pfc_prios, &mut keep),
            }
        }
    }
}
