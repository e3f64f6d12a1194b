//! The NIC transport's state, its component: every QP as a sender half and a receiver
//! half, their ACK timers, and the transport's totals. Its fields are its own: handlers
//! take one QP half at a time, create QPs, arm and disarm timers, and a parallel run moves
//! a partition's QPs out and back through it.
//!
//! ```compile_fail
//! // A handler cannot take the QP arrays themselves.
//! fn all(x: &xirang_sim::engine::xport::Xport) -> usize {
//!     x.qps_tx.len()
//! }
//! ```

use super::ids::{IdVec, QpId};
use super::nic::{QpRx, QpTx};
use crate::queue::{Key, Tie, TimerHeap};
use crate::time::Ps;

/// The QPs of a run.
#[derive(Default)]
pub struct Xport {
    qps_tx: IdVec<QpId, QpTx>,
    qps_rx: IdVec<QpId, QpRx>,
    /// ACK timers of the QPs (see `nic::Sim::arm_rto`).
    rto: TimerHeap,
    /// Always 0: no QP slot is ever reused (kept in the results' totals, whose readers
    /// know it).
    stray_packets: u64,
    /// QPs that gave up after their retries.
    qps_failed: u64,
}

impl Xport {
    /// QP `q`'s sender half.
    #[inline(always)]
    pub(crate) fn tx(&self, q: QpId) -> &QpTx {
        &self.qps_tx[q]
    }

    /// QP `q`'s sender half, to change.
    #[inline(always)]
    pub(crate) fn tx_mut(&mut self, q: QpId) -> &mut QpTx {
        &mut self.qps_tx[q]
    }

    /// QP `q`'s receiver half.
    #[inline(always)]
    pub(crate) fn rx(&self, q: QpId) -> &QpRx {
        &self.qps_rx[q]
    }

    /// QP `q`'s receiver half, to change.
    #[inline(always)]
    pub(crate) fn rx_mut(&mut self, q: QpId) -> &mut QpRx {
        &mut self.qps_rx[q]
    }

    /// QPs created so far (the next one's index).
    #[inline]
    pub(crate) fn n_qps(&self) -> u32 {
        self.qps_tx.len() as u32
    }

    /// Creates a QP from its two halves.
    pub(crate) fn push(&mut self, tx: QpTx, rx: QpRx) -> QpId {
        let id = self.qps_tx.next_id();
        self.qps_tx.push(tx);
        self.qps_rx.push(rx);
        id
    }

    /// Every sender half, in QP order.
    pub(crate) fn tx_iter(&self) -> impl Iterator<Item = (QpId, &QpTx)> {
        self.qps_tx.iter_enumerated()
    }

    /// Arms (or moves) QP `q`'s ACK timer.
    #[inline]
    pub(crate) fn arm(&mut self, q: QpId, at: Ps, tie: Tie) {
        self.rto.set(q.0, at, tie);
    }

    /// Disarms QP `q`'s ACK timer.
    #[inline]
    pub(crate) fn disarm(&mut self, q: QpId) {
        self.rto.cancel(q.0);
    }

    /// The earliest armed timer: its key and QP.
    #[inline]
    pub(crate) fn next_timer(&self) -> Option<(Key, u32)> {
        self.rto.peek()
    }

    /// Takes the earliest armed timer.
    #[inline]
    pub(crate) fn pop_timer(&mut self) {
        self.rto.pop();
    }

    /// No timer is armed.
    #[inline]
    pub(crate) fn no_timers(&self) -> bool {
        self.rto.is_empty()
    }

    /// A QP gave up after its retries.
    pub(crate) fn count_failed(&mut self) {
        self.qps_failed += 1;
    }

    /// QPs that gave up after their retries.
    pub(crate) fn failed(&self) -> u64 {
        self.qps_failed
    }

    /// Packets for a QP slot that was reused (always 0).
    pub(crate) fn stray(&self) -> u64 {
        self.stray_packets
    }

    /// Takes every QP out (a partition keeps its own share to ship).
    pub(crate) fn take(&mut self) -> (IdVec<QpId, QpTx>, IdVec<QpId, QpRx>) {
        (std::mem::take(&mut self.qps_tx), std::mem::take(&mut self.qps_rx))
    }

    /// Puts QP `q`'s sender half back from the partition that ran it.
    pub(crate) fn set_tx(&mut self, q: QpId, tx: QpTx) {
        self.qps_tx[q] = tx;
    }

    /// Puts QP `q`'s receiver half back from the partition that ran it.
    pub(crate) fn set_rx(&mut self, q: QpId, rx: QpRx) {
        self.qps_rx[q] = rx;
    }

    /// Adds another partition's totals.
    pub(crate) fn absorb_totals(&mut self, stray: u64, failed: u64) {
        self.stray_packets += stray;
        self.qps_failed += failed;
    }
}
