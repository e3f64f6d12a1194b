//! The workload driver's state, its component: the flows, the collectives with their GPU
//! threads and connections, and how much of the run's work is done. Its fields are its
//! own: handlers take one flow, collective, thread or connection at a time, add them at
//! set-up, and count work done through it; a parallel run moves a partition's share out
//! and back through it.
//!
//! ```compile_fail
//! // A handler cannot reach the work counts behind the driver's back.
//! fn cheat(w: &mut xirang_sim::engine::work::Work) {
//!     w.flows_done = w.flows_total;
//! }
//! ```

use super::collective::{CollectiveRt, Thread};
use super::flows::Flow;
use super::ids::{FlowId, IdVec};
use super::transport::Conn;
use crate::time::Ps;

/// The flows and collectives of a run and how far they are.
pub struct Work {
    flows: IdVec<FlowId, Flow>,
    colls: Vec<CollectiveRt>,
    /// The collectives' GPU threads and connections.
    threads: Vec<Thread>,
    conns: Vec<Conn>,
    /// Transfers of collectives under way at their senders (a slice written, the last not
    /// yet completed), and the most at once.
    live_transfers: usize,
    peak_live_transfers: usize,
    /// Most slices one connection had outstanding at once: sent and not yet given back
    /// to its GPU, or its receives posted and not yet consumed (NCCL allows its slots).
    peak_slices_outstanding: u64,
    /// Flows and collective transfers in the whole run, and those this run (partition)
    /// has done (sent, or failed).
    flows_total: u64,
    flows_done: u64,
    /// When this run (partition) last did one.
    last_done_at: Option<Ps>,
}

/// The work counts a partition hands to the partition that gathers the run.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct Counts {
    pub(crate) flows_done: u64,
    pub(crate) last_done_at: Option<Ps>,
    pub(crate) peak_live_transfers: usize,
    pub(crate) peak_slices_outstanding: u64,
}

impl Work {
    /// No work yet, room for `flows` flows, which the run counts.
    pub(crate) fn new(flows: usize) -> Work {
        Work {
            flows: IdVec::with_capacity(flows),
            colls: Vec::new(),
            threads: Vec::new(),
            conns: Vec::new(),
            live_transfers: 0,
            peak_live_transfers: 0,
            peak_slices_outstanding: 0,
            flows_total: flows as u64,
            flows_done: 0,
            last_done_at: None,
        }
    }

    /// Flow `f`.
    #[inline(always)]
    pub(crate) fn flow(&self, f: FlowId) -> &Flow {
        &self.flows[f]
    }

    /// Flow `f`, to change.
    #[inline(always)]
    pub(crate) fn flow_mut(&mut self, f: FlowId) -> &mut Flow {
        &mut self.flows[f]
    }

    /// Flows created so far.
    pub(crate) fn n_flows(&self) -> usize {
        self.flows.len()
    }

    /// Adds a flow.
    pub(crate) fn push_flow(&mut self, f: Flow) {
        self.flows.push(f);
    }

    /// Collective `c`.
    #[inline(always)]
    pub(crate) fn coll(&self, c: usize) -> &CollectiveRt {
        &self.colls[c]
    }

    /// Collective `c`, to change.
    #[inline(always)]
    pub(crate) fn coll_mut(&mut self, c: usize) -> &mut CollectiveRt {
        &mut self.colls[c]
    }

    /// Every collective, in order.
    pub(crate) fn colls(&self) -> &[CollectiveRt] {
        &self.colls
    }

    /// Every collective, to change (a partition ships or absorbs its share).
    pub(crate) fn colls_mut(&mut self) -> impl Iterator<Item = &mut CollectiveRt> {
        self.colls.iter_mut()
    }

    /// Adds a collective.
    pub(crate) fn push_coll(&mut self, c: CollectiveRt) {
        self.colls.push(c);
    }

    /// GPU thread `t`.
    #[inline(always)]
    pub(crate) fn thread(&self, t: usize) -> &Thread {
        &self.threads[t]
    }

    /// GPU thread `t`, to change.
    #[inline(always)]
    pub(crate) fn thread_mut(&mut self, t: usize) -> &mut Thread {
        &mut self.threads[t]
    }

    /// GPU threads created so far.
    pub(crate) fn n_threads(&self) -> usize {
        self.threads.len()
    }

    /// Adds a GPU thread.
    pub(crate) fn push_thread(&mut self, t: Thread) {
        self.threads.push(t);
    }

    /// Connection `c`.
    #[inline(always)]
    pub(crate) fn conn(&self, c: usize) -> &Conn {
        &self.conns[c]
    }

    /// Connection `c`, to change.
    #[inline(always)]
    pub(crate) fn conn_mut(&mut self, c: usize) -> &mut Conn {
        &mut self.conns[c]
    }

    /// Every connection, in order.
    pub(crate) fn conns(&self) -> &[Conn] {
        &self.conns
    }

    /// Connections created so far.
    pub(crate) fn n_conns(&self) -> usize {
        self.conns.len()
    }

    /// Adds a connection.
    pub(crate) fn push_conn(&mut self, c: Conn) {
        self.conns.push(c);
    }

    /// `n` more units of work in the run (a collective's transfers).
    pub(crate) fn add_total(&mut self, n: u64) {
        self.flows_total += n;
    }

    /// One unit of work was done at `now`.
    #[inline]
    pub(crate) fn did_one(&mut self, now: Ps) {
        self.flows_done += 1;
        self.last_done_at = Some(now);
    }

    /// `n` units of work were done by a fast-forward ending at `at` (reported time).
    pub(crate) fn did_many(&mut self, n: u64, at: Ps) {
        self.flows_done += n;
        self.last_done_at = Some(at);
    }

    /// Units of work done by this run (partition), and in the whole run.
    #[inline]
    pub(crate) fn progress(&self) -> (u64, u64) {
        (self.flows_done, self.flows_total)
    }

    /// A collective's transfer started at its sender.
    #[inline]
    pub(crate) fn transfer_started(&mut self) {
        self.live_transfers += 1;
        self.peak_live_transfers = self.peak_live_transfers.max(self.live_transfers);
    }

    /// A collective's transfer ended at its sender.
    #[inline]
    pub(crate) fn transfer_ended(&mut self) {
        self.live_transfers -= 1;
    }

    /// A connection has `n` slices outstanding.
    #[inline]
    pub(crate) fn outstanding(&mut self, n: u64) {
        self.peak_slices_outstanding = self.peak_slices_outstanding.max(n);
    }

    /// Most transfers under way at once.
    pub(crate) fn peak_live_transfers(&self) -> usize {
        self.peak_live_transfers
    }

    /// Most slices one connection had outstanding at once.
    pub(crate) fn peak_slices_outstanding(&self) -> u64 {
        self.peak_slices_outstanding
    }

    /// Takes the flows out (a partition keeps its own halves to ship).
    pub(crate) fn take_flows(&mut self) -> IdVec<FlowId, Flow> {
        std::mem::take(&mut self.flows)
    }

    /// This partition's counts.
    pub(crate) fn counts(&self) -> Counts {
        Counts {
            flows_done: self.flows_done,
            last_done_at: self.last_done_at,
            peak_live_transfers: self.peak_live_transfers,
            peak_slices_outstanding: self.peak_slices_outstanding,
        }
    }

    /// Adds another partition's counts: work done and peaks (transfers at once add up,
    /// as the partitions' transfers are distinct; one connection's slices do not).
    pub(crate) fn absorb_counts(&mut self, o: Counts) {
        self.flows_done += o.flows_done;
        self.last_done_at = self.last_done_at.max(o.last_done_at);
        self.peak_live_transfers += o.peak_live_transfers;
        self.peak_slices_outstanding = self.peak_slices_outstanding.max(o.peak_slices_outstanding);
    }
}
