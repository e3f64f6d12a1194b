//! The NIC transport of collectives: NCCL's connections, as the network proxy drives them.
//!
//! A connection is one channel's link from one rank to another (`Conn`), opened before
//! the run and kept for it. Between hosts it owns `qps_per_connection` persistent data
//! QPs and one QP the other way for the receiver's clear-to-send writes (the reverse
//! direction of data QP 0, so it takes that QP's return path:
//! docs/reference/nccl-transport-details.md §8); inside a host it is an NVLink FIFO the
//! sending GPU writes straight into (§9). Every connection has `slots` slices of buffer
//! at each end (`NCCL_STEPS` / steps per slice) and moves its slices in order:
//!
//! - the sending GPU writes a slice into a free slot of its send buffer (`written`; a slot
//!   frees when the proxy has seen its send complete, `freed`);
//! - the receiver's proxy posts one receive per slice while fewer than `slots` are
//!   unconsumed by its GPU, each announced to the sender by a 64-byte RDMA write on the
//!   clear-to-send QP (`posted`; §7-§8);
//! - the sender's proxy posts a slice's send once its data is written and its
//!   clear-to-send has arrived (`cts`), whole on data QP `slice mod nqps`, or cut in
//!   128-byte-aligned parts over all of them with `ib_split_data_on_qps` (§8);
//! - a send completes when its last byte is acknowledged, and the receiver's QP completes
//!   its receive on the message's last packet; both go through the completion queue,
//!   which delivers them after its moderation (`cq_moderation_count`, `_us`), and each
//!   proxy action costs the proxy's overhead;
//! - with Simple, the receiving GPU sees a slice when the proxy has moved the tail (after
//!   the GPUDirect flush on GPUs that need one, §7); LL and LL128 flag every line, so the
//!   GPU reads a slice as soon as it lands (§2).
//!
//! Each side of a connection is touched only by events of its own NIC (or, inside a host,
//! of the host), and the two sides meet only through packets: the partition boundary.

use std::ops::Range;

use super::Sim;
use super::collective::transfer_of;
use super::event::{Event, ProxyAction};
use super::flows::PathTerms;
use super::ids::QpId;
use super::nic::{RxOwner, TxOwner};
use super::{NEVER, QpTx};
use crate::queue::Queue;
use crate::time::Ps;

/// Bytes of one clear-to-send entry, `ncclIbSendFifo` (docs/reference/nccl-transport-details.md §8).
pub(crate) const CTS_BYTES: u64 = 64;
/// With `ib_split_data_on_qps`, a message's parts are 128-byte aligned (same section).
const SPLIT_ALIGN_BYTES: u64 = 128;
/// Most slots a connection has (`NCCL_STEPS`).
pub(crate) const MAX_SLOTS: usize = 8;

/// What the sender keeps of a slice it wrote, until the slice is sent and completed.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SlotMeta {
    /// Bytes it puts on the wire (the protocol's, flags included).
    pub(crate) wire: u64,
    /// The transfer it belongs to: its iteration and index in the iteration.
    pub(crate) iteration: u32,
    pub(crate) transfer: u64,
    /// It is the transfer's last slice.
    pub(crate) last: bool,
}

/// The sending end of a connection.
#[derive(Debug, Default)]
pub(crate) struct ConnTx {
    /// Slices the GPU wrote into the send buffer.
    pub(crate) written: u64,
    /// Clear-to-sends that arrived (the receiver's posted receives).
    pub(crate) cts: u64,
    /// Slices handed to the QPs.
    pub(crate) sent: u64,
    /// The bytes of the messages they were handed over as (with split data, a part of
    /// an empty slice is one byte too), counted slice by slice (a skip's slices are not:
    /// only the fast-forward's windows between skips use it).
    pub(crate) sent_bytes: u64,
    /// When the last slice was handed to the QPs (engine time): where a skip's made-up
    /// samples find the pipeline's phase (`sampling::MadeUp`).
    pub(crate) handed_at: Ps,
    /// Slices whose send completed, in order.
    pub(crate) completed: u64,
    /// Slots given back to the GPU.
    pub(crate) freed: u64,
    /// Completions the completion queue holds back (moderation), and since when.
    pub(crate) cq_held: u64,
    pub(crate) cq_since: Ps,
    /// Per slot: parts of its send that completed (with split data, one per QP).
    pub(crate) parts: [u8; MAX_SLOTS],
    pub(crate) meta: [SlotMeta; MAX_SLOTS],
    /// Sends the proxy has come to (one per slice whose data and clear-to-send are
    /// there, after the proxy's overhead); those beyond `sent` wait for room in a QP's
    /// send queue (`wr_depth`).
    pub(crate) send_due: u64,
    pub(crate) blocked: bool,
    /// Prims that sent on it (over the run): the transfer numbering.
    pub(crate) transfers: u64,
}

/// The receiving end of a connection.
#[derive(Debug, Default)]
pub(crate) struct ConnRx {
    /// Receives posted (each a clear-to-send to the sender).
    pub(crate) posted: u64,
    /// Slices that arrived whole, in order.
    pub(crate) arrived: u64,
    /// Slices the GPU can read.
    pub(crate) visible: u64,
    /// Slices the GPU consumed.
    pub(crate) consumed: u64,
    /// Completions the completion queue holds back, and since when.
    pub(crate) cq_held: u64,
    pub(crate) cq_since: Ps,
    /// Per slot: parts of the slice that arrived.
    pub(crate) parts: [u8; MAX_SLOTS],
    /// Receives scheduled (the proxy posts each after its overhead), those it has come
    /// to, and whether one waits for room in the CTS QP's send queue.
    pub(crate) cts_wanted: u64,
    pub(crate) cts_due: u64,
    pub(crate) blocked: bool,
    /// Prims that received from it (over the run).
    pub(crate) transfers: u64,
}

/// A connection's network side.
#[derive(Debug)]
pub(crate) struct NetConn {
    /// Its data QPs.
    pub(crate) qps: Range<u32>,
    /// The QP of the receiver's clear-to-send writes.
    pub(crate) cts: QpId,
    /// Messages are cut over every QP (`NCCL_IB_SPLIT_DATA_ON_QPS=1`).
    pub(crate) split: bool,
    /// Data QP 0's path, for the standalone time of the transfers it records.
    pub(crate) path: PathTerms,
    pub(crate) mtu: u32,
}

/// One NCCL connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) coll: u32,
    /// Between hosts: its QPs; None for NVLink inside a host.
    pub(crate) net: Option<NetConn>,
    /// Slices of buffer at each end.
    pub(crate) slots: u32,
    /// The devices its two ends' events run at.
    pub(crate) src_dev: u32,
    pub(crate) dst_dev: u32,
    /// The GPU threads that send and receive on it (`Sim::threads`).
    pub(crate) tx_thread: u32,
    pub(crate) rx_thread: u32,
    /// Slices it carries in the whole run, and transfers per iteration.
    pub(crate) total_slices: u64,
    pub(crate) per_iteration: u64,
    /// Index of its first transfer in an iteration of its collective.
    pub(crate) transfer_base: u64,
    /// The protocol lets the receiving GPU read slices as they land (LL, LL128).
    pub(crate) flagged: bool,
    /// Proxy overhead per action, and the flush read before a Simple slice is visible.
    pub(crate) proxy: Ps,
    pub(crate) flush: Ps,
    pub(crate) cq_count: u32,
    pub(crate) cq_delay: Ps,
    pub(crate) wr_depth: u32,
    pub(crate) tx: ConnTx,
    pub(crate) rx: ConnRx,
}

impl Conn {
    fn slot(&self, k: u64) -> usize {
        (k % u64::from(self.slots)) as usize
    }

    /// Its data QPs (1 inside a host).
    pub(crate) fn nqps(&self) -> u32 {
        self.net.as_ref().map_or(1, |n| n.qps.end - n.qps.start)
    }

    /// The sending GPU may write its next slice: a free slot in its send buffer (between
    /// hosts) or in the receiver's buffer (over NVLink, which it writes directly).
    pub(crate) fn can_write(&self) -> bool {
        let free = if self.net.is_some() {
            self.tx.freed
        } else {
            self.rx.consumed
        };
        self.tx.written < free + u64::from(self.slots)
    }

    /// The receiving GPU may read its next slice.
    pub(crate) fn can_read(&self) -> bool {
        self.rx.visible > self.rx.consumed
    }

    /// Slices a fast-forward may move this connection on (`engine::ffwd`): every counter
    /// of both ends stays below its total by a buffer's slots, so that nothing a skip
    /// adds reaches the clamps at the run's end (`conn_consumed`). A partition counts the
    /// ends it runs (`tx`, `rx`); the least over every partition is the whole run's.
    pub(crate) fn skip_room(&self, tx: bool, rx: bool) -> u64 {
        let (t, r) = (&self.tx, &self.rx);
        let sending = [t.written, t.cts, t.sent, t.completed, t.freed, t.send_due];
        let receiving = [
            r.posted,
            r.arrived,
            r.visible,
            r.consumed,
            r.cts_wanted,
            r.cts_due,
        ];
        let most = sending
            .into_iter()
            .filter(|_| tx)
            .chain(receiving.into_iter().filter(|_| rx))
            .max()
            .unwrap_or(0);
        self.total_slices.saturating_sub(most + u64::from(self.slots))
    }

    /// Its sending end moves `slices` slices (`transfers` primitives) on, as if they had
    /// been written, cleared to send, sent, completed and freed: what stays in flight
    /// keeps its place, since a skip is a multiple of the slots and of the QPs (the slot
    /// and QP of a slice are its number modulo these).
    /// Between hosts the slices in flight are the skip's last ones from now on: their
    /// transfers move on too (`Conn::ahead`), so that a rate sample names the transfer a
    /// QP sends. (Over NVLink nothing reads them: `freed` does not move there.)
    pub(crate) fn skip_tx(&mut self, slices: u64, transfers: u64) {
        if self.net.is_some() {
            let held = self.tx.written.saturating_sub(u64::from(self.slots));
            for k in self.tx.freed.max(held)..self.tx.written {
                let slot = self.slot(k);
                self.tx.meta[slot] = self.ahead(self.tx.meta[slot], transfers);
            }
        }
        let t = &mut self.tx;
        t.written += slices;
        t.transfers += transfers;
        if self.net.is_some() {
            t.cts += slices;
            t.sent += slices;
            t.completed += slices;
            t.freed += slices;
            t.send_due += slices;
        }
    }

    /// `meta`, of a slice of this connection's, as the slice `transfers` primitives on
    /// (a connection's primitives are its transfers, numbered by `transfer_of`).
    pub(crate) fn ahead(&self, meta: SlotMeta, transfers: u64) -> SlotMeta {
        let per = self.per_iteration.max(1);
        let ordinal = u64::from(meta.iteration) * per + (meta.transfer - self.transfer_base);
        let (iteration, transfer) = transfer_of(ordinal + transfers, per, self.transfer_base);
        SlotMeta {
            iteration,
            transfer,
            ..meta
        }
    }

    /// The transfer of the slice `moved` slices on from `head` (a slice at a QP's head;
    /// None, an idle QP: the last slice handed on, as a QP's head is its oldest slice not
    /// acknowledged, or the next when that one's slot was written again), its
    /// primitives being `per` slices each: counted from the transfer ends among the
    /// slices whose slots still hold them (`SlotMeta::last`), then every `per` slices.
    /// None before its first slice.
    pub(crate) fn transfer_ahead(&self, head: Option<u64>, mut moved: u64, per: u64) -> Option<SlotMeta> {
        let t = &self.tx;
        let meta = |k: u64| t.meta[self.slot(k)];
        let per = per.max(1);
        // The oldest slice whose slot holds it still.
        let held = t.written.saturating_sub(u64::from(self.slots));
        // Slices held before `k` in its transfer.
        let before = |k: u64| (held..k).rev().take_while(|&j| !meta(j).last).count() as u64;
        let k0 = match head {
            Some(h) => h,
            None if t.sent > held => t.sent - 1,
            None => {
                moved = moved.saturating_sub(1);
                t.sent
            }
        };
        // Its transfer, and the slices of it after `k0`.
        let (m0, rest) = if k0 < t.written {
            match (k0..t.written).find(|&j| meta(j).last) {
                Some(end) => (meta(k0), end - k0),
                None => (meta(k0), per.saturating_sub(1 + before(k0))),
            }
        } else if t.written == 0 {
            return None;
        } else {
            // Not written yet: the slice after the last written.
            let prev = meta(t.written - 1);
            if prev.last {
                (self.ahead(prev, 1), per - 1)
            } else {
                (prev, per.saturating_sub(2 + before(t.written - 1)))
            }
        };
        let crossed = if moved <= rest {
            0
        } else {
            1 + (moved - rest - 1) / per
        };
        Some(if crossed > 0 { self.ahead(m0, crossed) } else { m0 })
    }

    /// Its receiving end moves `slices` slices on (`transfers` primitives), as if they
    /// had been posted, arrived, seen and consumed.
    pub(crate) fn skip_rx(&mut self, slices: u64, transfers: u64) {
        let r = &mut self.rx;
        r.arrived += slices;
        r.visible += slices;
        r.consumed += slices;
        r.transfers += transfers;
        if self.net.is_some() {
            r.posted += slices;
            r.cts_wanted += slices;
            r.cts_due += slices;
        }
    }
}

impl<Q: Queue> Sim<Q> {
    /// The sending GPU wrote a slice (`meta`) into connection `c`.
    pub(crate) fn conn_written(&mut self, c: u32, meta: SlotMeta) {
        let now = self.now;
        let conn = self.work.conn_mut(c as usize);
        let k = conn.tx.written;
        let slot = conn.slot(k);
        conn.tx.meta[slot] = meta;
        conn.tx.written += 1;
        if conn.net.is_none() {
            // Over NVLink the data is in the receiver's buffer as the write ends.
            conn.rx.arrived += 1;
            conn.rx.visible += 1;
            let t = conn.rx_thread;
            self.thread_try(t);
        } else if conn.tx.cts > k {
            let at = now + conn.proxy;
            self.schedule(
                at,
                Event::Proxy {
                    conn: c,
                    action: ProxyAction::Send,
                },
            );
        }
    }

    /// The receiving GPU consumed a slice of connection `c`: its slot frees, and the
    /// proxy posts the receive that reuses it.
    pub(crate) fn conn_consumed(&mut self, c: u32) {
        let now = self.now;
        let conn = self.work.conn_mut(c as usize);
        conn.rx.consumed += 1;
        if conn.net.is_none() {
            // The sender polls the receiver's head over NVLink.
            let t = conn.tx_thread;
            self.thread_try(t);
            return;
        }
        let want = (conn.rx.consumed + u64::from(conn.slots)).min(conn.total_slices);
        if conn.rx.cts_wanted < want {
            conn.rx.cts_wanted += 1;
            let at = now + conn.proxy;
            self.schedule(
                at,
                Event::Proxy {
                    conn: c,
                    action: ProxyAction::Cts,
                },
            );
        }
    }

    /// A collective starts: every receiver posts its first receives.
    pub(crate) fn conns_start(&mut self, c: u32, at: Ps) {
        let conn = self.work.conn_mut(c as usize);
        if conn.net.is_none() {
            return;
        }
        let n = u64::from(conn.slots).min(conn.total_slices);
        conn.rx.cts_wanted = n;
        let t = at + conn.proxy;
        for _ in 0..n {
            self.schedule(
                t,
                Event::Proxy {
                    conn: c,
                    action: ProxyAction::Cts,
                },
            );
        }
    }

    /// A proxy action comes due.
    pub(crate) fn proxy(&mut self, c: u32, action: ProxyAction) {
        match action {
            ProxyAction::Send => {
                self.work.conn_mut(c as usize).tx.send_due += 1;
                self.flush_sends(c);
            }
            ProxyAction::Head => {
                let conn = self.work.conn_mut(c as usize);
                let k = conn.tx.freed;
                let meta = conn.tx.meta[conn.slot(k)];
                conn.tx.freed += 1;
                let t = conn.tx_thread;
                if meta.last {
                    self.transfer_sent(c, meta);
                }
                self.thread_try(t);
            }
            ProxyAction::Tail => {
                let conn = self.work.conn_mut(c as usize);
                conn.rx.visible += 1;
                let t = conn.rx_thread;
                self.thread_try(t);
            }
            ProxyAction::Cts => {
                self.work.conn_mut(c as usize).rx.cts_due += 1;
                self.flush_cts(c);
            }
            ProxyAction::CqTx => {
                let conn = self.work.conn(c as usize);
                if conn.tx.cq_held > 0 && conn.tx.cq_since + conn.cq_delay <= self.now {
                    self.cq_release(c, true);
                }
            }
            ProxyAction::CqRx => {
                let conn = self.work.conn(c as usize);
                if conn.rx.cq_held > 0 && conn.rx.cq_since + conn.cq_delay <= self.now {
                    self.cq_release(c, false);
                }
            }
        }
    }

    /// Posts the sends the proxy has come to, in order, on their QP(s), until one finds
    /// no room in a send queue.
    fn flush_sends(&mut self, c: u32) {
        loop {
            let conn = self.work.conn(c as usize);
            let k = conn.tx.sent;
            if k >= conn.tx.send_due {
                self.work.conn_mut(c as usize).tx.blocked = false;
                return;
            }
            debug_assert!(
                k < conn.tx.written && k < conn.tx.cts,
                "invariant: a due send has data and credit"
            );
            let net = conn
                .net
                .as_ref()
                .expect("invariant: only network connections send through a proxy");
            let meta = conn.tx.meta[conn.slot(k)];
            let nq = u64::from(net.qps.end - net.qps.start);
            let depth = conn.wr_depth as usize;
            let (first, split) = (net.qps.start, net.split);
            let room = |q: &QpTx| q.wrs.len() < depth;
            let fits = if split {
                (0..nq).all(|i| room(self.xport.tx(QpId(first + i as u32))))
            } else {
                room(self.xport.tx(QpId(first + (k % nq) as u32)))
            };
            if !fits {
                self.work.conn_mut(c as usize).tx.blocked = true;
                return;
            }
            let conn = self.work.conn_mut(c as usize);
            conn.tx.sent += 1;
            conn.tx.handed_at = self.now;
            let out = conn.tx.sent - conn.tx.freed;
            self.work.outstanding(out);
            // An empty slice still goes out as a zero-byte write; the simulator gives it
            // one byte so that it has a place in the QP's byte sequence (a simplification
            // of one byte per empty slice).
            let wire = meta.wire.max(1);
            let mut handed = 0;
            if split {
                let part = wire.div_ceil(nq).next_multiple_of(SPLIT_ALIGN_BYTES);
                for i in 0..nq {
                    let start = (i * part).min(wire);
                    // An empty part is a one-byte write too.
                    let bytes = part.min(wire - start).max(1);
                    handed += bytes;
                    self.post_message(QpId(first + i as u32), bytes, k);
                }
            } else {
                handed = wire;
                self.post_message(QpId(first + (k % nq) as u32), wire, k);
            }
            self.work.conn_mut(c as usize).tx.sent_bytes += handed;
        }
    }

    /// Posts the receives the proxy has come to, each a clear-to-send write to the
    /// sender, until the CTS QP's send queue is full.
    fn flush_cts(&mut self, c: u32) {
        loop {
            let conn = self.work.conn(c as usize);
            if conn.rx.posted >= conn.rx.cts_due {
                self.work.conn_mut(c as usize).rx.blocked = false;
                return;
            }
            let cts = conn
                .net
                .as_ref()
                .expect("invariant: only network connections post receives")
                .cts;
            if self.xport.tx(cts).wrs.len() >= conn.wr_depth as usize {
                self.work.conn_mut(c as usize).rx.blocked = true;
                return;
            }
            let conn = self.work.conn_mut(c as usize);
            let k = conn.rx.posted;
            conn.rx.posted += 1;
            let out = conn.rx.posted - conn.rx.consumed;
            self.work.outstanding(out);
            self.post_message(cts, CTS_BYTES, k);
        }
    }

    /// Appends a message of `bytes` to persistent QP `qi` (tagged `tag`, what its
    /// completion reports) and lets it send.
    pub(crate) fn post_message(&mut self, qi: QpId, bytes: u64, tag: u64) {
        let now = self.now;
        let q = self.xport.tx_mut(qi);
        debug_assert!(q.persistent(), "invariant: only persistent QPs take messages");
        q.size += bytes;
        q.wrs.push_back((q.size, tag));
        if q.done {
            // Back from idle: nothing outstanding, so the ACK timer starts afresh.
            q.done = false;
            q.last_progress = now;
            q.timeouts = 0;
        }
        if !q.listed {
            q.listed = true;
            q.next_avail = q.next_avail.max(now);
            let sp = self.fab.routes().first(q.route);
            q.src_port = sp;
            self.fab.port_mut(sp).nic_mut().qps.push(qi);
        }
        let sp = self.xport.tx(qi).src_port;
        self.kick(sp);
    }

    /// Every byte a persistent QP was given is acknowledged: it idles until its next
    /// message, keeping its congestion-control state.
    pub(crate) fn qp_idle(&mut self, qi: QpId) {
        let q = self.xport.tx_mut(qi);
        q.done = true;
        q.rto_pending = false;
        self.xport.disarm(qi);
    }

    /// The messages of QP `qi` whose every byte is now acknowledged complete.
    pub(crate) fn messages_acked(&mut self, qi: QpId) {
        loop {
            let q = self.xport.tx_mut(qi);
            let Some(&(end, tag)) = q.wrs.front() else { return };
            if end > q.snd_una {
                return;
            }
            q.wrs.pop_front();
            q.wr_tx = q.wr_tx.saturating_sub(1);
            match q.owner {
                TxOwner::Conn { conn, .. } => self.send_completed(conn, tag),
                // Clear-to-send writes are unsignalled: their completion only frees room in
                // the send queue.
                TxOwner::Cts { conn } => {
                    if self.work.conn(conn as usize).rx.blocked {
                        self.flush_cts(conn);
                    }
                }
                TxOwner::Flow(_) => unreachable!("invariant: a flow's QP posts no messages"),
            }
        }
    }

    /// Part of slice `k`'s send (one QP's message) completed.
    fn send_completed(&mut self, c: u32, k: u64) {
        let conn = self.work.conn_mut(c as usize);
        let slot = conn.slot(k);
        conn.tx.parts[slot] += 1;
        let whole = if conn.net.as_ref().is_some_and(|n| n.split) {
            u32::from(conn.tx.parts[slot]) == conn.nqps()
        } else {
            true
        };
        if !whole {
            return;
        }
        // The proxy tests its requests in order: a send counts once those before it did.
        let mut newly = 0;
        while conn.tx.completed < conn.tx.sent {
            let s = conn.slot(conn.tx.completed);
            let need = if conn.net.as_ref().is_some_and(|n| n.split) {
                conn.nqps()
            } else {
                1
            };
            if u32::from(conn.tx.parts[s]) < need {
                break;
            }
            conn.tx.parts[s] = 0;
            conn.tx.completed += 1;
            newly += 1;
        }
        let blocked = conn.tx.blocked;
        self.cq_deliver(c, true, newly);
        if blocked {
            self.flush_sends(c);
        }
    }

    /// A message arrived whole at the receiving end of a connection's QP.
    pub(crate) fn message_arrived(&mut self, owner: RxOwner, qi: QpId) {
        let now = self.now;
        let msgs = {
            let q = self.xport.rx_mut(qi);
            q.msgs += 1;
            q.msgs - 1
        };
        match owner {
            RxOwner::Cts { conn: c } => {
                let conn = self.work.conn_mut(c as usize);
                conn.tx.cts += 1;
                let k = conn.tx.cts - 1;
                if conn.tx.written > k {
                    let at = now + conn.proxy;
                    self.schedule(
                        at,
                        Event::Proxy {
                            conn: c,
                            action: ProxyAction::Send,
                        },
                    );
                }
            }
            RxOwner::Conn { conn: c, k: part } => {
                let conn = self.work.conn_mut(c as usize);
                let nq = u64::from(conn.nqps());
                let split = conn.net.as_ref().is_some_and(|n| n.split);
                // Whole messages go round robin over the QPs; split ones on all of them.
                let m = if split { msgs } else { msgs * nq + u64::from(part) };
                let slot = conn.slot(m);
                conn.rx.parts[slot] += 1;
                let need = if split { conn.nqps() } else { 1 };
                let mut newly = 0;
                while conn.rx.arrived < conn.rx.posted {
                    let s = conn.slot(conn.rx.arrived);
                    if u32::from(conn.rx.parts[s]) < need {
                        break;
                    }
                    conn.rx.parts[s] = 0;
                    conn.rx.arrived += 1;
                    newly += 1;
                }
                if newly > 0 {
                    self.stats.steady_slices(c, now, newly);
                    self.ff.slices(c, now, newly);
                }
                if conn.flagged {
                    // LL and LL128: the GPU polls the flags in its buffer, not the proxy.
                    conn.rx.visible += newly;
                    let t = conn.rx_thread;
                    if newly > 0 {
                        self.thread_try(t);
                    }
                } else {
                    self.cq_deliver(c, false, newly);
                }
            }
            RxOwner::Flow(_) => unreachable!("invariant: flows complete by size"),
        }
    }

    /// `n` completions reach a connection end's completion queue: delivered at once, or
    /// held until the moderation count or timer.
    fn cq_deliver(&mut self, c: u32, at_sender: bool, n: u64) {
        if n == 0 {
            return;
        }
        let now = self.now;
        let conn = self.work.conn_mut(c as usize);
        if conn.cq_count <= 1 {
            self.cq_pass(c, at_sender, n);
            return;
        }
        let (held, since) = if at_sender {
            (&mut conn.tx.cq_held, &mut conn.tx.cq_since)
        } else {
            (&mut conn.rx.cq_held, &mut conn.rx.cq_since)
        };
        if *held == 0 {
            *since = now;
            let at = now + conn.cq_delay;
            let action = if at_sender {
                ProxyAction::CqTx
            } else {
                ProxyAction::CqRx
            };
            self.schedule(at, Event::Proxy { conn: c, action });
        }
        let conn = self.work.conn_mut(c as usize);
        let held = if at_sender {
            &mut conn.tx.cq_held
        } else {
            &mut conn.rx.cq_held
        };
        *held += n;
        if *held >= u64::from(conn.cq_count) {
            self.cq_release(c, at_sender);
        }
    }

    /// The completion queue delivers what it held.
    fn cq_release(&mut self, c: u32, at_sender: bool) {
        let conn = self.work.conn_mut(c as usize);
        let held = if at_sender {
            std::mem::take(&mut conn.tx.cq_held)
        } else {
            std::mem::take(&mut conn.rx.cq_held)
        };
        if at_sender {
            conn.tx.cq_since = NEVER;
        } else {
            conn.rx.cq_since = NEVER;
        }
        self.cq_pass(c, at_sender, held);
    }

    /// The proxy sees `n` completions: a send's slot frees, a received slice becomes
    /// visible (after the flush, where one is needed).
    fn cq_pass(&mut self, c: u32, at_sender: bool, n: u64) {
        let now = self.now;
        let conn = self.work.conn(c as usize);
        let (at, action) = if at_sender {
            (now + conn.proxy, ProxyAction::Head)
        } else {
            (now + conn.proxy + conn.flush, ProxyAction::Tail)
        };
        for _ in 0..n {
            self.schedule(at, Event::Proxy { conn: c, action });
        }
    }
}
