//! Collectives in the engine: NCCL's kernels as GPU threads.
//!
//! A collective's program (`xirang_collective::program`) gives each (channel, rank) one or
//! more threads of primitives; here each thread runs its primitives slice by slice, as a
//! thread block of NCCL's kernel does: a slice starts when every connection it receives
//! from has the slice there and every connection it sends on has a free slot
//! (`engine::transport`), takes the GPU its time (the protocol's per-slice latency, the
//! protocol's per-channel rate, and over NVLink the GPU's NVLink, shared by its channels),
//! then frees the slots it read and writes the slices it sends. A rank's threads start an
//! iteration together and the next one when all of them finished the last (one kernel per
//! collective call, launched back to back: no barrier across ranks).
//!
//! A *transfer* is one primitive's chunk on one connection (all its slices), numbered per
//! connection in the order the connection carries them; the results report the
//! transfers, and a collective is done when its receivers have consumed every one.
//! Memory follows the fabric: threads, connections and a few counters per rank, never the
//! schedule.

use std::ops::Range;

use xirang_collective::program::{Prim, Repeat};
use xirang_fabric::config::FabricConfig;
use xirang_fabric::model::{Fabric, NicId};
use xirang_fabric::scenario::EcmpMode;

use super::event::Event;
use super::flows::{QpSpec, path_mtu, route_requests};
use super::ids::{QpId, RouteId};
use super::nic::{RxOwner, TxOwner};
use super::routes::RouteRequest;
use super::transport::{Conn, ConnRx, ConnTx, NetConn, SlotMeta};
use super::{RunOptions, Sim};
use crate::queue::Queue;
use crate::rng::{Purpose, Stream, splitmix};
use crate::time::{Ps, tx_time_at};
use crate::workload::CollectiveRun;

/// The HPCC simulator numbers source ports from 10000 (docs/hpcc-model.md §6); in that
/// ECMP mode a connection's QPs take consecutive ports from there, by channel.
const HPCC_FIRST_SPORT: u16 = 10000;
/// The UDP destination port of RoCE v2 (IANA), and the one the HPCC simulator uses.
const ROCE_V2_DPORT: u16 = 4791;
const HPCC_DPORT: u16 = 100;
/// No connection (an unused place in a primitive's peers).
const NO_CONN: u32 = u32::MAX;

/// What a recorded collective keeps of each transfer for the results: the sender's part
/// (start, finish, standalone times) and the receiver's (when it consumed the last slice,
/// how many bytes it consumed), each written where it happens.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct TransferRecord {
    pub(crate) start: Option<Ps>,
    pub(crate) finish: Option<Ps>,
    pub(crate) rx_done: Option<Ps>,
    pub(crate) ideal: Ps,
    pub(crate) lower_bound: Ps,
    pub(crate) bytes_received: u64,
}

/// A GPU thread: one thread block's role on one channel of one rank.
#[derive(Debug, Clone)]
pub(crate) struct Thread {
    pub(crate) coll: u32,
    pub(crate) channel: u32,
    pub(crate) rank: u32,
    pub(crate) role: u32,
    /// The device its events run at (its host's first NIC).
    pub(crate) dev: u32,
    /// Primitives per iteration.
    len: u64,
    iteration: u32,
    index: u64,
    slice: u32,
    prim: Prim,
    recv: [u32; 3],
    send: [u32; 3],
    /// A slice is under way.
    busy: bool,
    /// Not running: done with its iteration and waiting for the rank's other threads, or
    /// waiting for its kernel to start.
    parked: bool,
    /// When the current primitive's first slice began.
    prim_start: Ps,
}

/// A collective while it runs.
pub(crate) struct CollectiveRt {
    pub(crate) run: CollectiveRun,
    /// Connection of each (channel, sender, receiver), and the range of `Sim::conns`.
    pub(crate) conns: ConnIndex,
    pub(crate) conn_range: Range<u32>,
    /// First thread of each (channel, rank) in `Sim::threads`, and one past the last.
    thread_base: Vec<u32>,
    /// Threads of each rank (with primitives) still in their current iteration.
    rank_left: Vec<u32>,
    /// Ranks (of this partition) done with each iteration, and when the last of them was.
    pub(crate) iter_done: Vec<u32>,
    pub(crate) iter_end: Vec<Option<Ps>>,
    /// Transfers consumed by their receivers, and when the last was.
    pub(crate) arrived: u64,
    pub(crate) last_arrival: Option<Ps>,
    /// One entry per transfer of every iteration when the run records them.
    pub(crate) records: Option<Vec<Option<TransferRecord>>>,
    /// When each rank's NVLink next has room (its channels share it).
    nv_free: Vec<Ps>,
    /// A connection's QP gave up after its retries: NCCL aborts, nothing more moves.
    pub(crate) failed: bool,
}

/// The connection of each (channel, sender, receiver): the pairs grouped by (channel,
/// sender), receivers sorted, so a lookup is an index and a binary search.
pub(crate) struct ConnIndex {
    ranks: u32,
    start: Vec<u32>,
    entries: Vec<(u32, u32)>,
}

impl ConnIndex {
    fn new(channels: u32, ranks: u32, conns: &[((u32, u32, u32), u32)]) -> Self {
        let groups = channels as usize * ranks as usize;
        let mut start = vec![0u32; groups + 1];
        for &((c, a, _), _) in conns {
            start[(c * ranks + a) as usize + 1] += 1;
        }
        for g in 0..groups {
            start[g + 1] += start[g];
        }
        let mut fill = start.clone();
        let mut entries = vec![(0, 0); conns.len()];
        for &((c, a, b), id) in conns {
            let g = (c * ranks + a) as usize;
            entries[fill[g] as usize] = (b, id);
            fill[g] += 1;
        }
        for g in 0..groups {
            entries[start[g] as usize..start[g + 1] as usize].sort_unstable();
        }
        ConnIndex {
            ranks,
            start,
            entries,
        }
    }

    /// The connection from `src` to `dst` on `channel`.
    ///
    /// # Panics
    /// When it was never planned: every connection a program uses is set up before the
    /// run (an engine bug otherwise).
    pub(crate) fn get(&self, channel: u32, src: u32, dst: u32) -> u32 {
        let g = (channel * self.ranks + src) as usize;
        let group = &self.entries[self.start[g] as usize..self.start[g + 1] as usize];
        let at = group
            .binary_search_by_key(&dst, |e| e.0)
            .expect("invariant: every connection a program uses was set up");
        group[at].1
    }
}

/// A collective's connections between hosts before their routes are known.
pub(crate) struct CollectivePlan {
    /// (src NIC, dst NIC) and the (sport, dport) of each QP, connection by connection.
    ends: Vec<(NicId, NicId)>,
    ports: Vec<Vec<(u16, u16)>>,
}

impl<Q: Queue> Sim<Q> {
    /// Lists the network connections of a collective with its QPs' ports and the routes
    /// they need (appended to `requests`: data then ACK direction of each data QP; the
    /// clear-to-send QP takes data QP 0's two routes the other way round).
    pub(crate) fn plan_collective(
        &self,
        fabric: &Fabric,
        config: &FabricConfig,
        run: &CollectiveRun,
        opts: &RunOptions,
        requests: &mut Vec<RouteRequest>,
    ) -> CollectivePlan {
        let n_qps = run.qps.unwrap_or(config.transport.qps_per_connection).max(1);
        let mut plan = CollectivePlan {
            ends: Vec::new(),
            ports: Vec::new(),
        };
        run.program.connections(&mut |c, a, b, _, _| {
            if run.same_host(a, b) {
                return;
            }
            let (src, dst) = run.nics(fabric, c, a, b);
            // Each connection draws its QPs' source ports from a stream of its own, so a
            // connection's ports do not depend on which others exist.
            let id = splitmix(splitmix(splitmix(u64::from(run.workload)) ^ u64::from(c)) ^ u64::from(a))
                ^ u64::from(b);
            let mut rng = Stream::new(opts.seed, Purpose::Connection, id);
            let ports: Vec<(u16, u16)> = (0..n_qps)
                .map(|k| match opts.ecmp {
                    EcmpMode::Hpcc => (HPCC_FIRST_SPORT.wrapping_add((c * n_qps + k) as u16), HPCC_DPORT),
                    // The ephemeral range, as for every RoCE v2 QP (see `plan_eager`).
                    EcmpMode::Seeded => (49152 + rng.below(16384) as u16, ROCE_V2_DPORT),
                })
                .collect();
            let ips = (self.fab.nic(src.index()).ip, self.fab.nic(dst.index()).ip);
            for &(sport, dport) in &ports {
                requests.extend(route_requests(ips, src, dst, sport, dport));
            }
            plan.ends.push((src, dst));
            plan.ports.push(ports);
        });
        plan
    }

    /// Sets a collective up from its plan and routes (in the order `plan_collective`
    /// requested them); `record` keeps a result per transfer.
    pub(crate) fn add_collective(
        &mut self,
        fabric: &Fabric,
        config: &FabricConfig,
        run: CollectiveRun,
        plan: CollectivePlan,
        routes: &[RouteId],
        record: bool,
    ) {
        let coll = self.work.colls().len() as u32;
        let class = self.cc.class(&run.class).clone();
        let p = run.program.clone();
        let (n, nch) = (run.ranks, p.channels());
        let (thread_base, rank_left) = self.add_threads(coll, &run);
        // Connections, in the program's order.
        let first_conn = self.work.n_conns() as u32;
        let mut keys = Vec::new();
        let mut net_at = 0usize;
        let mut route_at = 0usize;
        let mut transfer_base = 0u64;
        let iterations = u64::from(run.iterations);
        let slots = p.slots();
        let proto = p.proto();
        let wr_depth = config.transport.wr_depth;
        let mut conns = Vec::new();
        p.connections(&mut |c, a, b, transfers, slices| {
            conns.push((c, a, b, transfers, slices));
        });
        for (c, a, b, transfers, slices) in conns {
            let id = self.work.n_conns() as u32;
            keys.push(((c, a, b), id));
            let (tx_role, rx_role) = p.conn_roles(c, a, b);
            let thread_of = |r: u32, role: u32| thread_base[(c * n + r) as usize] + role;
            let local = run.same_host(a, b);
            let (net, src_dev, dst_dev) = if local {
                let dev = self.rank_dev(&run, a);
                (None, dev, dev)
            } else {
                let (src, dst) = plan.ends[net_at];
                let ports = &plan.ports[net_at];
                net_at += 1;
                let qp_routes = &routes[route_at..route_at + 2 * ports.len()];
                route_at += 2 * ports.len();
                let (net, src_dev, dst_dev) = self.open_net_conn(
                    fabric,
                    config,
                    &class,
                    &run,
                    id,
                    (src, dst),
                    ports,
                    qp_routes,
                    slots,
                );
                (Some(net), src_dev, dst_dev)
            };
            self.work.push_conn(Conn {
                coll,
                net,
                slots,
                src_dev,
                dst_dev,
                tx_thread: thread_of(a, tx_role),
                rx_thread: thread_of(b, rx_role),
                total_slices: slices * iterations,
                per_iteration: transfers,
                transfer_base,
                flagged: proto != xirang_collective::cost::Proto::Simple,
                proxy: run.gpu.proxy,
                flush: run.gpu.flush,
                cq_count: config.transport.cq_moderation_count.max(1),
                cq_delay: u64::from(config.transport.cq_moderation_us) * crate::time::PS_PER_US,
                wr_depth,
                tx: ConnTx::default(),
                rx: ConnRx::default(),
            });
            transfer_base += transfers;
        }
        debug_assert_eq!(
            transfer_base, run.per_iteration,
            "invariant: the run counted the program's transfers"
        );
        let total = run.per_iteration * iterations;
        // A transfer is done twice: when its sender's last send completes and when its
        // receiver has consumed its last slice (the run ends when both are).
        self.work.add_total(2 * total);
        let conn_range = first_conn..self.work.n_conns() as u32;
        self.work.push_coll(CollectiveRt {
            conns: ConnIndex::new(nch, n, &keys),
            conn_range,
            thread_base,
            rank_left,
            iter_done: vec![0; run.iterations as usize],
            iter_end: vec![None; run.iterations as usize],
            arrived: 0,
            last_arrival: None,
            records: record.then(|| vec![None; total as usize]),
            nv_free: vec![0; n as usize],
            failed: false,
            run,
        });
        // Each thread's first primitive's connections.
        let rt = self.work.colls().len() - 1;
        let threads = self.work.coll(rt).thread_base[0]..*self.work.coll(rt).thread_base.last().expect("set");
        for t in threads {
            self.load_conns(t);
        }
    }

    /// A collective's GPU threads, channel by channel, rank by rank: each thread's first
    /// index (one past the last at the end) and each rank's threads with work.
    fn add_threads(&mut self, coll: u32, run: &CollectiveRun) -> (Vec<u32>, Vec<u32>) {
        let p = &run.program;
        let (n, nch) = (run.ranks, p.channels());
        let mut thread_base = Vec::with_capacity((nch * n) as usize + 1);
        let mut rank_left = vec![0u32; n as usize];
        for c in 0..nch {
            for r in 0..n {
                thread_base.push(self.work.n_threads() as u32);
                let dev = self.rank_dev(run, r);
                for role in 0..p.roles(c, r) {
                    let len = p.len(c, r, role);
                    if len > 0 {
                        rank_left[r as usize] += 1;
                    }
                    self.work.push_thread(Thread {
                        coll,
                        channel: c,
                        rank: r,
                        role,
                        dev,
                        len,
                        iteration: 0,
                        index: 0,
                        slice: 0,
                        prim: p.prim(c, r, role, 0),
                        recv: [NO_CONN; 3],
                        send: [NO_CONN; 3],
                        busy: false,
                        // Until its kernel starts (`GpuStart`).
                        parked: true,
                        prim_start: 0,
                    });
                }
            }
        }
        thread_base.push(self.work.n_threads() as u32);
        (thread_base, rank_left)
    }

    /// The QPs of a connection between hosts: a data QP per port pair of `ports` (its
    /// routes two by two in `routes`, data then ACK) and the QP of its receiver's
    /// clear-to-send writes; with the devices at its two ends.
    #[allow(clippy::too_many_arguments)]
    fn open_net_conn(
        &mut self,
        fabric: &Fabric,
        config: &FabricConfig,
        class: &super::ClassRt,
        run: &CollectiveRun,
        id: u32,
        (src, dst): (NicId, NicId),
        ports: &[(u16, u16)],
        routes: &[RouteId],
        slots: u32,
    ) -> (NetConn, u32, u32) {
        let split = run.split_data;
        let wr_depth = config.transport.wr_depth;
        let mtu = path_mtu(fabric, config, src, dst);
        let first = self.xport.n_qps();
        let prio = class.prio;
        let mut spec0: Option<QpSpec> = None;
        for (k, &pp) in ports.iter().enumerate() {
            let spec = self.qp_spec(class, prio, (src, dst), routes[2 * k], routes[2 * k + 1], pp);
            self.make_qp(
                TxOwner::Conn {
                    conn: id,
                    k: k as u16,
                },
                RxOwner::Conn {
                    conn: id,
                    k: k as u16,
                },
                &spec,
                0,
                prio,
                mtu,
                wr_depth.min(slots) as usize,
            );
            spec0.get_or_insert(spec);
        }
        let spec0 = spec0.expect("invariant: a connection has at least one QP");
        // The clear-to-send writes go the other way on data QP 0's routes, on the
        // FIFO's priority (`NCCL_IB_FIFO_TC`, by default the data's).
        let fifo_prio = run.fifo_prio.unwrap_or(prio);
        let cts_spec = self.qp_spec(
            class,
            fifo_prio,
            (dst, src),
            spec0.ack_route,
            spec0.route,
            (spec0.dport, spec0.sport),
        );
        let cts = self.make_qp(
            TxOwner::Cts { conn: id },
            RxOwner::Cts { conn: id },
            &cts_spec,
            0,
            fifo_prio,
            mtu,
            wr_depth.min(slots) as usize,
        );
        let src_dev = self.fab.port(spec0.src_port).dev_idx;
        let dst_dev = self.fab.port(spec0.dst_port).dev_idx;
        (
            NetConn {
                qps: first..first + ports.len() as u32,
                cts,
                split,
                path: self.path_terms(spec0.route, mtu),
                mtu,
            },
            src_dev,
            dst_dev,
        )
    }

    /// The device a rank's GPU threads run at: its host's first NIC.
    fn rank_dev(&self, run: &CollectiveRun, rank: u32) -> u32 {
        run.host_nics[run.rank_host[rank as usize] as usize][0].index() as u32
    }

    /// A collective starts: every thread with work is started, and every receiver posts
    /// its first receives.
    pub(crate) fn collective_start(&mut self, c: usize) {
        let rt = self.work.coll(c);
        if rt.run.iterations == 0 {
            return;
        }
        let at = rt.run.start;
        // Each rank's kernel pays its fixed cost before its threads start.
        let go = at + rt.run.gpu.base;
        let threads = rt.thread_base[0]..*rt.thread_base.last().expect("set");
        for k in rt.conn_range.clone() {
            self.conns_start(k, at);
        }
        for t in threads {
            if self.work.thread(t as usize).len > 0 {
                self.schedule(go, Event::GpuStart(t));
            }
        }
    }

    /// The connections of thread `t`'s current primitive.
    fn load_conns(&mut self, t: u32) {
        let th = self.work.thread(t as usize);
        let rt = self.work.coll(th.coll as usize);
        let (c, r) = (th.channel, th.rank);
        let mut recv = [NO_CONN; 3];
        let mut send = [NO_CONN; 3];
        for (i, &peer) in th.prim.recv.as_slice().iter().enumerate() {
            recv[i] = rt.conns.get(c, peer, r);
        }
        for (i, &peer) in th.prim.send.as_slice().iter().enumerate() {
            send[i] = rt.conns.get(c, r, peer);
        }
        let th = self.work.thread_mut(t as usize);
        th.recv = recv;
        th.send = send;
    }

    /// Thread `t` starts its next slice if it can: its inputs are there and its outputs
    /// have room. Otherwise a connection wakes it when that changes.
    pub(crate) fn thread_try(&mut self, t: u32) {
        let th = self.work.thread(t as usize);
        if th.busy || th.parked || th.index >= th.len {
            return;
        }
        if let Some((role, need)) = th.prim.after {
            let rt = self.work.coll(th.coll as usize);
            let sib = rt.thread_base[(th.channel * rt.run.ranks + th.rank) as usize] + role;
            let s = self.work.thread(sib as usize);
            let done = if s.iteration > th.iteration {
                s.len
            } else {
                s.index
            };
            if done < need {
                return;
            }
        }
        let ready = th
            .recv
            .iter()
            .all(|&c| c == NO_CONN || self.work.conn(c as usize).can_read())
            && th
                .send
                .iter()
                .all(|&c| c == NO_CONN || self.work.conn(c as usize).can_write());
        if !ready {
            return;
        }
        let now = self.now;
        let end = self.slice_end(t);
        let th = self.work.thread_mut(t as usize);
        th.busy = true;
        if th.slice == 0 {
            th.prim_start = now;
        }
        self.schedule(end, Event::GpuDone(t));
    }

    /// When thread `t`'s slice, starting now, ends: the protocol's per-slice latency, its
    /// data at the protocol's per-channel rate (and the kernel time of a primitive that
    /// waited for data), and a copy over NVLink once the GPU's NVLink has room.
    fn slice_end(&mut self, t: u32) -> Ps {
        let now = self.now;
        let th = self.work.thread(t as usize);
        let (_, bytes) = th.prim.slice(th.slice);
        let rt = self.work.coll(th.coll as usize);
        let gpu = &rt.run.gpu;
        let mut compute = gpu.slice;
        if gpu.rate_bps > 0.0 {
            // LL and LL128 flag every line: the GPU reads a slice from the network as it
            // streams in, so the time the slice took to arrive at line rate overlaps its
            // processing (a simplification of line-by-line polling).
            let wire = rt.run.program.proto().wire_bytes(bytes).min(u64::from(u32::MAX)) as u32;
            let streamed = th
                .recv
                .iter()
                .filter(|&&c| c != NO_CONN)
                .filter_map(|&c| {
                    let conn = self.work.conn(c as usize);
                    let net = conn.net.as_ref().filter(|_| conn.flagged)?;
                    Some(tx_time_at(wire, self.xport.tx(QpId(net.qps.start)).line_bps))
                })
                .max()
                .unwrap_or(0);
            let process = tx_time_at(bytes.min(u64::from(u32::MAX)) as u32, gpu.rate_bps);
            compute += process.saturating_sub(streamed);
        }
        if th.slice == 0 && !th.prim.recv.is_empty() {
            compute += gpu.step;
        }
        // A straggler's GPU takes longer for everything it does.
        let slow = rt.run.rank_slowdown.get(th.rank as usize).copied().unwrap_or(1.0);
        if slow > 1.0 {
            compute = (compute as f64 * slow).round() as Ps;
        }
        let mut end = now + compute;
        let wire = rt.run.program.proto().wire_bytes(bytes);
        let nvlink_bps = gpu.nvlink_bps;
        let rank = th.rank as usize;
        let sends = th.send;
        for c in sends {
            if c == NO_CONN || self.work.conn(c as usize).net.is_some() {
                continue;
            }
            let rt = self.work.coll_mut(self.work.thread(t as usize).coll as usize);
            let start = rt.nv_free[rank].max(now);
            let copy = if nvlink_bps > 0.0 {
                (wire as f64 * 8.0 / nvlink_bps * 1e12).round() as Ps
            } else {
                0
            };
            rt.nv_free[rank] = start + copy;
            end = end.max(start + copy);
        }
        end
    }

    /// A thread's kernel starts (its rank's first call, or its next).
    pub(crate) fn gpu_start(&mut self, t: u32) {
        self.work.thread_mut(t as usize).parked = false;
        self.thread_try(t);
    }

    /// Thread `t` finished a slice: it frees the slots it read, writes what it sends, and
    /// goes on.
    pub(crate) fn gpu_done(&mut self, t: u32) {
        let now = self.now;
        // What this slice was (the thread's record is changed below).
        let th = SliceDone::of(self.work.thread(t as usize));
        let coll = th.coll as usize;
        let (_, bytes) = th.prim.slice(th.slice);
        let last_slice = th.slice + 1 >= th.prim.slices;
        let proto = self.work.coll(coll).run.program.proto();
        for c in th.recv {
            if c == NO_CONN {
                continue;
            }
            let conn = self.work.conn_mut(c as usize);
            let (iteration, index) = transfer_of(conn.rx.transfers, conn.per_iteration, conn.transfer_base);
            if last_slice {
                conn.rx.transfers += 1;
            }
            if let Some(r) = self.record_mut(coll, iteration, index) {
                r.bytes_received += bytes;
                if last_slice {
                    r.rx_done = Some(now);
                }
            }
            if last_slice {
                let at = self.reported_now();
                let rt = self.work.coll_mut(coll);
                rt.arrived += 1;
                rt.last_arrival = Some(at);
                self.flow_done();
            }
            self.conn_consumed(c);
        }
        for c in th.send {
            if c == NO_CONN {
                continue;
            }
            let conn = self.work.conn_mut(c as usize);
            let (iteration, transfer) =
                transfer_of(conn.tx.transfers, conn.per_iteration, conn.transfer_base);
            if last_slice {
                conn.tx.transfers += 1;
            }
            let nvlink = conn.net.is_none();
            let standalone = match &conn.net {
                Some(n) => n.path.fct(th.prim.bytes, n.mtu, self.fab.net().header_bytes),
                None => {
                    let d = now - th.prim_start;
                    (d, d)
                }
            };
            if let Some(r) = self.record_mut(coll, iteration, transfer) {
                if th.slice == 0 {
                    r.start = Some(th.prim_start);
                    r.ideal = standalone.0;
                    r.lower_bound = standalone.1;
                }
                if last_slice && nvlink {
                    r.finish = Some(now);
                    r.ideal = now - th.prim_start;
                    r.lower_bound = r.ideal;
                }
            }
            if th.slice == 0 {
                self.work.transfer_started();
            }
            if last_slice && nvlink {
                self.work.transfer_ended();
                self.flow_done();
            }
            let meta = SlotMeta {
                wire: proto.wire_bytes(bytes),
                iteration,
                transfer,
                last: last_slice,
            };
            self.conn_written(c, meta);
        }
        // On to the next slice, primitive or iteration.
        let th = self.work.thread_mut(t as usize);
        if last_slice {
            th.slice = 0;
            th.index += 1;
        } else {
            th.slice += 1;
        }
        let done_iteration = th.index >= th.len;
        if !done_iteration && last_slice {
            let rt = self.work.coll(coll);
            let th = self.work.thread(t as usize);
            let prim = rt.run.program.prim(th.channel, th.rank, th.role, th.index);
            // A ring's or a tree's primitives keep their peers: their connections too.
            let same_peers = prim.recv == th.prim.recv && prim.send == th.prim.send;
            self.work.thread_mut(t as usize).prim = prim;
            if !same_peers {
                self.load_conns(t);
            }
        }
        self.work.thread_mut(t as usize).busy = false;
        if last_slice {
            self.wake_siblings(t);
        }
        if done_iteration {
            self.thread_finished(t);
        } else {
            self.thread_try(t);
        }
    }

    /// Threads of the same (channel, rank) that wait for this one's progress
    /// (`Prim::after`) may go on.
    fn wake_siblings(&mut self, t: u32) {
        let th = self.work.thread(t as usize);
        let rt = self.work.coll(th.coll as usize);
        let at = (th.channel * rt.run.ranks + th.rank) as usize;
        let (first, end) = (rt.thread_base[at], rt.thread_base[at + 1]);
        if end - first < 2 {
            return;
        }
        for s in first..end {
            if s != t && self.work.thread(s as usize).prim.after.is_some() {
                self.thread_try(s);
            }
        }
    }

    /// Thread `t` finished its iteration: when the rank's other threads have too, the
    /// rank's next kernel starts them all again.
    fn thread_finished(&mut self, t: u32) {
        let now = self.now;
        let at = self.reported_now();
        let th = self.work.thread_mut(t as usize);
        th.parked = true;
        let (coll, rank, iteration) = (th.coll as usize, th.rank, th.iteration);
        let rt = self.work.coll_mut(coll);
        rt.rank_left[rank as usize] -= 1;
        if rt.rank_left[rank as usize] > 0 {
            return;
        }
        rt.iter_done[iteration as usize] += 1;
        let end = &mut rt.iter_end[iteration as usize];
        *end = Some(end.map_or(at, |e| e.max(at)));
        if iteration + 1 >= rt.run.iterations {
            return;
        }
        let n = rt.run.ranks;
        let channels = rt.run.program.channels();
        let mut restart = Vec::new();
        for c in 0..channels {
            let at = (c * n + rank) as usize;
            restart.extend(rt.thread_base[at]..rt.thread_base[at + 1]);
        }
        let mut left = 0;
        for &s in &restart {
            let th = self.work.thread_mut(s as usize);
            th.iteration += 1;
            th.index = 0;
            th.slice = 0;
            // Parked until the rank's next kernel starts (`GpuStart`).
            th.parked = true;
            left += u32::from(th.len > 0);
            if th.len > 0 {
                let (channel, rank, role) = (th.channel, th.rank, th.role);
                let prim = self.work.coll(coll).run.program.prim(channel, rank, role, 0);
                self.work.thread_mut(s as usize).prim = prim;
                self.load_conns(s);
            }
        }
        self.work.coll_mut(coll).rank_left[rank as usize] = left;
        // The rank's next kernel pays its fixed cost before its threads go on.
        let go = now + self.work.coll(coll).run.gpu.base;
        for s in restart {
            if self.work.thread(s as usize).len > 0 {
                self.schedule(go, Event::GpuStart(s));
            }
        }
    }

    /// The last slice of a transfer between hosts completed at its sender.
    pub(crate) fn transfer_sent(&mut self, c: u32, meta: SlotMeta) {
        let now = self.now;
        self.work.transfer_ended();
        self.flow_done();
        let coll = self.work.conn(c as usize).coll as usize;
        if let Some(r) = self.record_mut(coll, meta.iteration, meta.transfer) {
            r.finish = Some(now);
        }
    }

    /// A QP of connection `c` gave up after its retries.
    pub(crate) fn connection_failed(&mut self, c: u32) {
        let coll = self.work.conn(c as usize).coll as usize;
        self.work.coll_mut(coll).failed = true;
    }

    /// How far a fast-forward may move collective `c`'s GPU threads now (`engine::ffwd`),
    /// as far as the threads this run (partition) owns tell: in either of two ways,
    /// inside every thread's uniform run (`Program::uniform_run`), or by whole repeats of
    /// every thread's sequence (`Program::repeats`, a ring's loops). The surveys of every
    /// partition combine into the whole run's ([`RoomSurvey::combine`]), whose
    /// [`RoomSurvey::room`] says how far, or why neither is open.
    pub(crate) fn room_survey(&self, c: usize) -> RoomSurvey {
        let rt = self.work.coll(c);
        let threads = rt.thread_base[0]..*rt.thread_base.last().expect("set");
        let mut s = RoomSurvey::NONE;
        for t in threads {
            let th = self.work.thread(t as usize);
            if th.len == 0 || !self.owns(th.dev) {
                continue;
            }
            if th.parked || th.index >= th.len {
                s.between = true;
                continue;
            }
            if th.prim.after.is_some() {
                s.waits = true;
                continue;
            }
            let p = &rt.run.program;
            // A move inside uniform runs counts one transfer each way per primitive on
            // every connection (`Move::Within`): only for primitives with one peer each way.
            let one_each = th.prim.recv.as_slice().len() == 1 && th.prim.send.as_slice().len() == 1;
            let run = if one_each {
                p.uniform_run(th.channel, th.rank, th.role, th.index)
            } else {
                1
            };
            let one = RoomSurvey {
                within: run - 1,
                repeats: match p.repeats(th.channel, th.rank, th.role, th.index) {
                    Some(r) => Repeats::Same(r),
                    None => Repeats::Broken,
                },
                slices: Some((th.prim.slices, th.prim.slices)),
                slice_bytes: th.prim.slice_bytes,
                chunk_bytes: th.prim.bytes,
                ..RoomSurvey::NONE
            };
            s = s.combine(one);
        }
        s
    }

    /// Moves every GPU thread of collective `c` on by `mv`, and its connections with it,
    /// as if that much had run (`engine::ffwd`; `RoomSurvey::room` said how far they may go).
    /// What they did counts as done: each transfer on each connection once at its sender
    /// and once at its receiver.
    pub(crate) fn advance_threads(&mut self, c: usize, mv: Move, slices: u32) {
        let (prims, recv, send) = mv.prims_recv_send();
        let (first, end, conns) = {
            let rt = self.work.coll(c);
            (
                rt.thread_base[0],
                *rt.thread_base.last().expect("set"),
                rt.conn_range.clone(),
            )
        };
        for t in first..end {
            let th = self.work.thread(t as usize);
            if th.len == 0 || !self.owns(th.dev) {
                continue;
            }
            let (channel, rank, role, index) = (th.channel, th.rank, th.role, th.index + prims);
            // A thread in the middle of a slice finishes it as a slice of the new primitive:
            // in a rebalanced loop its bytes may differ from those whose GPU time was
            // scheduled (a simplification: at most one slice per thread per skip).
            let prim = self.work.coll(c).run.program.prim(channel, rank, role, index);
            debug_assert!(
                prim.same_moves(&th.prim),
                "invariant: a thread moves only to a primitive that moves like its own"
            );
            let th = self.work.thread_mut(t as usize);
            th.index = index;
            th.prim = prim;
        }
        let mut done = 0u64;
        let mut arrived = 0u64;
        // Every thread's primitives have `slices` slices (`RoomSurvey::room`). Each
        // partition moves the ends it owns.
        let slices = u64::from(slices);
        for k in conns {
            let (src, dst) = {
                let conn = self.work.conn(k as usize);
                (self.owns(conn.src_dev), self.owns(conn.dst_dev))
            };
            let conn = self.work.conn_mut(k as usize);
            if src {
                conn.skip_tx(send * slices, send);
                done += send;
            }
            if dst {
                conn.skip_rx(recv * slices, recv);
                done += recv;
                arrived += recv;
            }
        }
        let at = self.reported_now();
        let rt = self.work.coll_mut(c);
        rt.arrived += arrived;
        rt.last_arrival = Some(at);
        self.work.did_many(done, at);
    }

    /// The record of transfer `index` of iteration `iteration`, if collective `c` records.
    fn record_mut(&mut self, c: usize, iteration: u32, index: u64) -> Option<&mut TransferRecord> {
        let per = self.work.coll(c).run.per_iteration;
        let records = self.work.coll_mut(c).records.as_mut()?;
        let r = records.get_mut((u64::from(iteration) * per + index) as usize)?;
        Some(r.get_or_insert_with(TransferRecord::default))
    }
}

/// What `gpu_done` needs of the slice a thread just finished.
struct SliceDone {
    coll: u32,
    prim: Prim,
    slice: u32,
    recv: [u32; 3],
    send: [u32; 3],
    prim_start: Ps,
}

impl SliceDone {
    fn of(th: &Thread) -> SliceDone {
        SliceDone {
            coll: th.coll,
            prim: th.prim,
            slice: th.slice,
            recv: th.recv,
            send: th.send,
            prim_start: th.prim_start,
        }
    }
}

/// (iteration, index in the iteration) of a connection's `ordinal`-th transfer.
pub(crate) fn transfer_of(ordinal: u64, per_iteration: u64, base: u64) -> (u32, u64) {
    let per = per_iteration.max(1);
    ((ordinal / per) as u32, base + ordinal % per)
}

/// Every transfer of one iteration of a collective, in index order: (index, channel,
/// sender, receiver, bytes). Takes time in proportion to the schedule (for results of
/// recorded runs and for planners).
pub(crate) fn for_each_transfer(run: &CollectiveRun, f: &mut dyn FnMut(u64, u32, u32, u32, u64)) {
    let p = &run.program;
    let mut conns = Vec::new();
    p.connections(&mut |c, a, b, k, _| conns.push((c, a, b, k)));
    let mut index = 0;
    for (c, a, b, k) in conns {
        let (role, _) = p.conn_roles(c, a, b);
        let mut left = k;
        let len = p.len(c, a, role);
        let mut i = 0;
        while left > 0 && i < len {
            let prim = p.prim(c, a, role, i);
            if prim.send.as_slice().contains(&b) {
                f(index, c, a, b, prim.bytes);
                index += 1;
                left -= 1;
            }
            i += 1;
        }
    }
}

/// The data QPs of a connection, for results.
pub(crate) fn conn_qps(conn: &Conn) -> Option<Range<QpId>> {
    conn.net.as_ref().map(|n| QpId(n.qps.start)..QpId(n.qps.end))
}

/// How far a fast-forward may move a collective's threads (`RoomSurvey::room`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Room {
    /// Primitives every thread may move on inside its uniform run (0: none).
    pub(crate) within: u64,
    /// Whole repeats every thread may move on by, the same for all.
    pub(crate) repeats: Option<Repeat>,
    /// Slices of every thread's primitives.
    pub(crate) slices: u32,
}

/// What the threads a run (or partition) owns say of a fast-forward's room
/// (`Sim::room_survey`), in a form that combines exactly over partitions, whatever their
/// order: flags, minima, and the repeat all share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RoomSurvey {
    /// A thread is between iterations, or done.
    between: bool,
    /// A thread waits on another of its rank.
    waits: bool,
    /// Fewest and most slices of the threads' primitives (None: no thread has work).
    slices: Option<(u32, u32)>,
    /// Most bytes of a full slice of the threads' primitives (0: no thread seen).
    slice_bytes: u64,
    /// Most data bytes of the threads' primitives' chunks.
    chunk_bytes: u64,
    /// Primitives every thread may move on inside its uniform run.
    within: u64,
    /// Whole repeats every thread may move on by.
    repeats: Repeats,
}

/// The repeat every thread shares, as far as seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Repeats {
    /// No thread seen yet.
    Unseen,
    /// Every thread seen repeats this (its count the least of theirs).
    Same(Repeat),
    /// A thread does not repeat, or not as the others.
    Broken,
}

impl RoomSurvey {
    /// No thread seen: the identity of [`RoomSurvey::combine`].
    pub(crate) const NONE: RoomSurvey = RoomSurvey {
        between: false,
        waits: false,
        slices: None,
        slice_bytes: 0,
        chunk_bytes: 0,
        within: u64::MAX,
        repeats: Repeats::Unseen,
    };

    /// Both surveys as one (associative and commutative, so partitions may combine in
    /// any order).
    pub(crate) fn combine(self, o: RoomSurvey) -> RoomSurvey {
        RoomSurvey {
            between: self.between || o.between,
            waits: self.waits || o.waits,
            slices: match (self.slices, o.slices) {
                (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
                (x, None) | (None, x) => x,
            },
            slice_bytes: self.slice_bytes.max(o.slice_bytes),
            chunk_bytes: self.chunk_bytes.max(o.chunk_bytes),
            within: self.within.min(o.within),
            repeats: match (self.repeats, o.repeats) {
                (Repeats::Unseen, x) | (x, Repeats::Unseen) => x,
                (Repeats::Same(r), Repeats::Same(q))
                    if (r.prims, r.recv, r.send) == (q.prims, q.recv, q.send) =>
                {
                    Repeats::Same(Repeat {
                        count: r.count.min(q.count),
                        ..q
                    })
                }
                _ => Repeats::Broken,
            },
        }
    }

    /// The shape of the threads' work, what the memo of steady states knows a steady
    /// state by ([`super::ffwd::MemoKey`]): their primitives' slices, which every thread
    /// shares, and the most bytes of a full slice and of a chunk. The most, because a
    /// loop's chunks are equal but for a short one at the buffer's end, which only some
    /// threads hold at a time: the most is the loop's chunk for a whole loop, and a
    /// rebalanced last loop has its own. None: no thread has work, or their slices differ,
    /// or a thread is between iterations or waits (its shape is not yet the one the others
    /// will share: the shape is known once every thread of the collective runs).
    pub(crate) fn memo_shape(&self) -> Option<(u32, u64, u64)> {
        if self.between || self.waits {
            return None;
        }
        let (s0, s1) = self.slices?;
        (s0 == s1).then_some((s0, self.slice_bytes, self.chunk_bytes))
    }

    /// The whole run's room, or why there is none: a thread is between iterations or
    /// done, waits on a sibling, or the threads' primitives differ.
    pub(crate) fn room(self) -> Result<Room, &'static str> {
        if self.between {
            return Err("a GPU thread is between iterations");
        }
        if self.waits {
            return Err("a GPU thread waits on another of its rank");
        }
        let Some((least, most)) = self.slices else {
            return Err("no GPU thread has work");
        };
        if least != most {
            return Err("GPU threads' primitives differ in slices");
        }
        let repeats = match self.repeats {
            Repeats::Same(r) => Some(r),
            Repeats::Unseen | Repeats::Broken => None,
        };
        if self.within == 0 && repeats.is_none() {
            return Err("a GPU thread is at a phase's first or last step, and no whole loop is left");
        }
        Ok(Room {
            within: self.within,
            repeats,
            slices: least,
        })
    }
}

/// A move of every thread of a collective (`Sim::advance_threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Move {
    /// This many primitives, inside uniform runs: one transfer each way per primitive on
    /// every connection.
    Within(u64),
    /// This many whole repeats.
    Repeats(u64, Repeat),
}

impl Move {
    /// Primitives each thread moves, and transfers each connection receives and sends.
    pub(crate) fn prims_recv_send(self) -> (u64, u64, u64) {
        match self {
            Move::Within(n) => (n, n, n),
            Move::Repeats(k, r) => (k * r.prims, k * r.recv, k * r.send),
        }
    }
}
