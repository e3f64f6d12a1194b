//! Collectives in the engine: each collective runs its lazy expansion
//! (`xirang_collective::lazy`), which yields a transfer when the transfers it waits for have
//! arrived; the engine creates the transfer's flow and QPs then, in slots it reuses, so a
//! collective of thousands of ranks holds what it has in flight and never its whole
//! schedule.
//!
//! NCCL opens its connections (one per channel and peer, `NCCL_IB_QPS_PER_CONNECTION` QPs
//! each) when the communicator is created and sends every step over them; so here each
//! (channel, sender, receiver) is a connection whose QPs' source ports, routes and rates
//! are fixed before the run, and each transfer gets fresh QP state on them (the
//! congestion-control state starts at line rate per transfer: a simplification, since a
//! real QP keeps its rate from one step to the next).

use std::ops::Range;

use xirang_collective::lazy::{Expansion, Step};
use xirang_fabric::config::FabricConfig;
use xirang_fabric::model::{Fabric, NicId};
use xirang_fabric::scenario::EcmpMode;

use super::event::Event;
use super::flows::{Flow, Origin, PathTerms, QpSpec, path_mtu, route_requests};
use super::ids::{FlowId, QpId, RouteId};
use super::nic::RxOwner;
use super::routes::RouteRequest;
use super::{ClassRt, RunOptions, Sim};
use crate::queue::Queue;
use crate::rng::{Purpose, Stream, splitmix};
use crate::time::Ps;
use crate::workload::CollectiveRun;

/// The HPCC simulator numbers source ports from 10000 (docs/hpcc-model.md §6); in that
/// ECMP mode a connection's QPs take consecutive ports from there, by channel.
const HPCC_FIRST_SPORT: u16 = 10000;
/// The UDP destination port of RoCE v2 (IANA), and the one the HPCC simulator uses.
const ROCE_V2_DPORT: u16 = 4791;
const HPCC_DPORT: u16 = 100;

/// One NCCL connection between two ranks on one channel.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) mtu: u32,
    /// Its first QP's route, for the standalone FCT of its transfers.
    pub(crate) path: PathTerms,
    /// Its QPs' fixed parts, in `Sim::conn_specs`.
    pub(crate) specs: Range<u32>,
    /// First slots of its QP groups free for its next transfer.
    pub(crate) free: Vec<u32>,
}

/// What a recorded collective keeps of each transfer for the results: the sender's part
/// (start, finish, ideal times) and the receiver's (when every byte arrived, how many
/// did), each written where it happens.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct TransferRecord {
    pub(crate) start: Option<Ps>,
    pub(crate) finish: Option<Ps>,
    pub(crate) rx_done: Option<Ps>,
    pub(crate) ideal: Ps,
    pub(crate) lower_bound: Ps,
    pub(crate) bytes_received: u64,
}

/// A collective's NVLink transfer under way: a delay that needs no port, no QP and no
/// flow slot, only what its arrival reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NvlinkTransfer {
    /// Dense index of the host's first NIC, where the completion happens.
    pub(crate) dev: u32,
    coll: u32,
    iteration: u32,
    index: u64,
    start: Ps,
    bytes: u64,
}

/// A collective while it runs.
pub(crate) struct CollectiveRt {
    pub(crate) run: CollectiveRun,
    pub(crate) expansion: Box<dyn Expansion>,
    pub(crate) iteration: u32,
    terminals_left: u64,
    /// Connection of each (channel, sender rank, receiver rank) on different hosts.
    pub(crate) conns: ConnIndex,
    class: ClassRt,
    pub(crate) arrived: u64,
    pub(crate) last_arrival: Option<Ps>,
    /// One entry per transfer of every iteration when the run records them.
    pub(crate) records: Option<Vec<Option<TransferRecord>>>,
    scratch: Vec<Step>,
    /// The last NVLink transfer's size and time.
    nvlink_last: (u64, Ps),
}

/// The connection of each (channel, sender, receiver), looked up once per network transfer:
/// the pairs grouped by (channel, sender), each group a few receivers long (one in a ring,
/// up to three in a tree), so a lookup is an index and a short scan, with no hashing.
pub(crate) struct ConnIndex {
    ranks: u32,
    /// Start of each (channel, sender)'s entries in `entries`, and one past the last.
    start: Vec<u32>,
    /// (receiver, connection), by (channel, sender) and then as planned.
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
        ConnIndex {
            ranks,
            start,
            entries,
        }
    }

    /// The connection from `src` to `dst` on `channel`.
    ///
    /// # Panics
    /// When it was never planned: every network transfer's connection is set up before the
    /// run (an engine bug otherwise).
    pub(crate) fn get(&self, channel: u32, src: u32, dst: u32) -> u32 {
        let g = (channel * self.ranks + src) as usize;
        let group = &self.entries[self.start[g] as usize..self.start[g + 1] as usize];
        group
            .iter()
            .find(|e| e.0 == dst)
            .expect("invariant: every network transfer's connection was set up")
            .1
    }
}

/// A collective's connections before their routes are known.
pub(crate) struct CollectivePlan {
    keys: Vec<(u32, u32, u32)>,
    /// (src NIC, dst NIC) and the (sport, dport) of each QP, connection by connection.
    ends: Vec<(NicId, NicId)>,
    ports: Vec<Vec<(u16, u16)>>,
}

impl<Q: Queue> Sim<Q> {
    /// Lists every network connection of a collective with its QPs' ports and the routes
    /// they need (appended to `requests`).
    pub(crate) fn plan_collective(
        &self,
        fabric: &Fabric,
        config: &FabricConfig,
        run: &CollectiveRun,
        opts: &RunOptions,
        requests: &mut Vec<RouteRequest>,
    ) -> CollectivePlan {
        let n_qps = run.qps.unwrap_or(config.transport.qps_per_connection).max(1);
        let mut keys = Vec::new();
        run.expansion().connections(&mut |c, a, b| {
            if !run.same_host(a, b) {
                keys.push((c, a, b));
            }
        });
        let mut plan = CollectivePlan {
            ends: Vec::with_capacity(keys.len()),
            ports: Vec::with_capacity(keys.len()),
            keys,
        };
        for &(c, a, b) in &plan.keys {
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
            let ips = (self.nics[src.index()].ip, self.nics[dst.index()].ip);
            for &(sport, dport) in &ports {
                requests.extend(route_requests(ips, src, dst, sport, dport));
            }
            plan.ends.push((src, dst));
            plan.ports.push(ports);
        }
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
        let class = self
            .classes
            .iter()
            .find(|c| c.name == run.class)
            .expect("invariant: classes are validated at load")
            .clone();
        let mut conns = Vec::with_capacity(plan.keys.len());
        let mut r = 0;
        for (i, key) in plan.keys.iter().enumerate() {
            let (src, dst) = plan.ends[i];
            let first = self.conn_specs.len() as u32;
            for &ports in &plan.ports[i] {
                let spec = self.qp_spec(&class, class.prio, (src, dst), routes[r], routes[r + 1], ports);
                r += 2;
                self.conn_specs.push(spec);
            }
            conns.push((*key, self.conns.len() as u32));
            let mtu = path_mtu(fabric, config, src, dst);
            self.conns.push(Conn {
                mtu,
                path: self.path_terms(self.conn_specs[first as usize].route, mtu),
                specs: first..self.conn_specs.len() as u32,
                free: Vec::new(),
            });
        }
        let expansion = run.expansion();
        let total = run.per_iteration * u64::from(run.iterations);
        self.flows_total += total;
        self.colls.push(CollectiveRt {
            terminals_left: expansion.terminals(),
            records: record.then(|| vec![None; total as usize]),
            expansion,
            iteration: 0,
            conns: ConnIndex::new(run.shape.channels, run.shape.ranks, &conns),
            class,
            arrived: 0,
            last_arrival: None,
            scratch: Vec::new(),
            nvlink_last: (u64::MAX, 0),
            run,
        });
    }

    /// The transfers a collective starts with (its first iteration's).
    pub(crate) fn collective_begin(&mut self, c: usize) -> Vec<Step> {
        let mut out = Vec::new();
        if self.colls[c].run.iterations > 0 {
            self.colls[c].expansion.begin(&mut out);
        }
        out
    }

    /// The device transfer `st` of collective `c` starts at: the sending NIC, or for a
    /// transfer inside a host, the host's first NIC.
    pub(crate) fn transfer_dev(&self, c: usize, st: Step) -> u32 {
        let rt = &self.colls[c];
        if rt.run.same_host(st.src, st.dst) {
            rt.run.host_nics[rt.run.rank_host[st.src as usize] as usize][0].index() as u32
        } else {
            let conn = &self.conns[rt.conns.get(st.channel, st.src, st.dst) as usize];
            self.ports[self.conn_specs[conn.specs.start as usize].src_port].dev_idx
        }
    }

    /// Creates transfer `st` of collective `c`'s iteration `iteration`, to start at `at`.
    pub(crate) fn new_transfer(&mut self, c: usize, iteration: u32, st: Step, at: Ps) {
        let rt = &self.colls[c];
        let earliest = rt.run.start;
        if rt.run.same_host(st.src, st.dst) {
            let dev = rt.run.host_nics[rt.run.rank_host[st.src as usize] as usize][0].index() as u32;
            // It is done one NVLink time after it starts; nothing happens in between. A
            // collective's pieces take one or two sizes, so the time is remembered.
            let dur = match rt.nvlink_last {
                (b, d) if b == st.bytes => d,
                _ => {
                    let d = rt.run.nvlink_ps(st.bytes);
                    self.colls[c].nvlink_last = (st.bytes, d);
                    d
                }
            };
            let t = NvlinkTransfer {
                dev,
                coll: c as u32,
                iteration,
                index: st.index,
                start: at,
                bytes: st.bytes,
            };
            let slot = match self.free_nvlink.pop() {
                Some(s) => {
                    self.nvlink[s as usize] = t;
                    s
                }
                None => {
                    self.nvlink.push(t);
                    (self.nvlink.len() - 1) as u32
                }
            };
            self.live_transfers += 1;
            self.peak_live_transfers = self.peak_live_transfers.max(self.live_transfers);
            self.schedule(at + dur, Event::NvlinkDone(slot));
            return;
        }
        let conn_id = rt.conns.get(st.channel, st.src, st.dst);
        let origin = Origin::Transfer {
            coll: c as u32,
            iteration,
            index: st.index,
            conn: conn_id,
        };
        let prio = rt.class.prio;
        let conn = &self.conns[conn_id as usize];
        let (specs, mtu, path) = (conn.specs.clone(), conn.mtu, conn.path);
        let n = specs.end - specs.start;
        let (f, first_qp) = self.alloc_transfer(conn_id, n);
        // An empty piece still moves a byte: NCCL's protocols signal every step, and the
        // receiver learns of the transfer only from its packets.
        let wire_bytes = st.bytes.max(1);
        let per_qp = wire_bytes / u64::from(n);
        let first = QpId(first_qp);
        let owner = RxOwner::Transfer {
            first,
            coll: c as u32,
            iteration,
            index: st.index,
        };
        let mut receiving = 0;
        let mut halves = std::mem::take(&mut self.rx_scratch);
        for k in 0..n {
            let bytes = if k == 0 {
                wire_bytes - per_qp * u64::from(n - 1)
            } else {
                per_qp
            };
            let spec: QpSpec = self.conn_specs[(specs.start + k) as usize].clone();
            let qi = QpId(first_qp + k);
            let rx = self.make_qp(qi, f, &spec, bytes, prio, mtu, owner);
            if bytes > 0 {
                receiving += 1;
                halves.push((qi, rx));
            }
        }
        // The first QP counts the transfer's QPs, and those with data (it always has some).
        if let Some((_, first_rx)) = halves.first_mut() {
            first_rx.group_left = receiving;
            first_rx.group_size = n;
        }
        let receiver = self.ports[self.conn_specs[specs.start as usize].dst_port].dev_idx;
        for (qi, rx) in halves.drain(..) {
            self.place_rx_init(qi, rx, receiver);
        }
        self.rx_scratch = halves;
        // The standalone FCT is reported only with the transfer's record.
        let (ideal, lower_bound) = if self.colls[c].records.is_some() {
            path.fct(st.bytes, mtu, self.net.header_bytes)
        } else {
            (0, 0)
        };
        let dev = self.ports[self.conn_specs[specs.start as usize].src_port].dev_idx;
        let flow = Flow::new(origin, dev, earliest, None, first_qp, n, ideal, lower_bound);
        self.place_flow(f, flow);
        self.schedule(at, Event::FlowStart(f));
    }

    /// Transfer `index` of collective `c` arrived: start what it readied, and the next
    /// iteration once the last terminal transfer of this one is in.
    pub(crate) fn transfer_arrived(&mut self, c: usize, iteration: u32, index: u64) {
        let now = self.now;
        let rt = &mut self.colls[c];
        rt.arrived += 1;
        rt.last_arrival = Some(now);
        let mut out = std::mem::take(&mut rt.scratch);
        let terminal = rt.expansion.arrived(index, &mut out);
        // Every transfer readied here waited for another: the per-step kernel time
        // applies, as it does to the next iteration's first transfers.
        let at = (now + rt.run.step).max(rt.run.start);
        let mut next_iteration = false;
        if terminal {
            rt.terminals_left -= 1;
            if rt.terminals_left == 0 && rt.iteration + 1 < rt.run.iterations {
                rt.iteration += 1;
                rt.terminals_left = rt.expansion.terminals();
                next_iteration = true;
            }
        }
        for st in out.drain(..) {
            self.new_transfer(c, iteration, st, at);
        }
        if next_iteration {
            self.colls[c].expansion.begin(&mut out);
            for st in out.drain(..) {
                self.new_transfer(c, iteration + 1, st, at);
            }
        }
        self.colls[c].scratch = out;
    }

    /// An NVLink transfer is done: it is sent and received at once.
    pub(crate) fn nvlink_done(&mut self, slot: u32) {
        let t = self.nvlink[slot as usize];
        self.free_nvlink.push(slot);
        self.live_transfers -= 1;
        self.flow_done();
        let c = t.coll as usize;
        let now = self.now;
        let per = self.colls[c].run.per_iteration;
        if let Some(records) = &mut self.colls[c].records {
            let dur = now - t.start;
            records[(u64::from(t.iteration) * per + t.index) as usize] = Some(TransferRecord {
                start: Some(t.start),
                finish: Some(now),
                rx_done: Some(now),
                ideal: dur,
                lower_bound: dur,
                bytes_received: t.bytes,
            });
        }
        self.transfer_arrived(c, t.iteration, t.index);
    }

    /// The record of transfer `index` of iteration `iteration`, if collective `c` records.
    fn record_mut(&mut self, c: usize, iteration: u32, index: u64) -> Option<&mut TransferRecord> {
        let per = self.colls[c].run.per_iteration;
        let records = self.colls[c].records.as_mut()?;
        let r = &mut records[(u64::from(iteration) * per + index) as usize];
        Some(r.get_or_insert_with(TransferRecord::default))
    }

    /// A transfer the sender is done with reports the sender's part, if its collective
    /// records.
    pub(crate) fn record_transfer_sent(&mut self, c: usize, iteration: u32, index: u64, f: FlowId) {
        let flow = &self.flows[f];
        let (start, finish, ideal, lower_bound) =
            (flow.started, flow.tx.finish, flow.ideal, flow.lower_bound);
        if let Some(r) = self.record_mut(c, iteration, index) {
            r.start = start;
            r.finish = finish;
            r.ideal = ideal;
            r.lower_bound = lower_bound;
        }
    }

    /// Every byte of the transfer whose first QP is `first` arrived: the receiver's part of
    /// its record, then what the collective does next.
    pub(crate) fn transfer_received(&mut self, first: QpId, c: usize, iteration: u32, index: u64) {
        let n = self.qps_rx[first].group_size;
        let bytes: u64 = (first.0..first.0 + n)
            .map(|q| self.qp_received_bytes(QpId(q)))
            .sum();
        let now = self.now;
        if let Some(r) = self.record_mut(c, iteration, index) {
            r.rx_done = Some(now);
            r.bytes_received = bytes;
        }
        self.transfer_arrived(c, iteration, index);
    }

    /// A run that ended with transfers under way: each device writes what it has of
    /// them into their records, as it would have on finishing. The sender its part (start
    /// and standalone times) of network transfers it still sends and of NVLink transfers,
    /// the receiver the bytes it has so far of transfers it still receives. Each writes
    /// only its own fields, so the records of a partitioned run, merged, are the serial
    /// run's.
    pub(crate) fn record_in_flight(&mut self) {
        if self.colls.iter().all(|rt| rt.records.is_none()) {
            return;
        }
        for i in 0..self.flows.len() {
            let f = FlowId::from(i);
            if let Origin::Transfer {
                coll,
                iteration,
                index,
                ..
            } = self.flows[f].origin
                && self.owns(self.flows[f].dev)
            {
                self.record_transfer_sent(coll as usize, iteration, index, f);
            }
        }
        let free: std::collections::BTreeSet<u32> = self.free_nvlink.iter().copied().collect();
        for slot in 0..self.nvlink.len() as u32 {
            if free.contains(&slot) {
                continue;
            }
            let t = self.nvlink[slot as usize];
            let ps = self.colls[t.coll as usize].run.nvlink_ps(t.bytes);
            if let Some(r) = self.record_mut(t.coll as usize, t.iteration, t.index) {
                r.start = Some(t.start);
                r.ideal = ps;
                r.lower_bound = ps;
            }
        }
        // Receiving halves in place (installed: their first packet came), of transfers not
        // yet received.
        for qi in 0..self.qps_rx.len() as u32 {
            let q = &self.qps_rx[QpId(qi)];
            let RxOwner::Transfer {
                coll,
                iteration,
                index,
                ..
            } = q.owner
            else {
                continue;
            };
            let bytes = self.qp_received_bytes(QpId(qi));
            let per = self.colls[coll as usize].run.per_iteration;
            if let Some(records) = &mut self.colls[coll as usize].records {
                let r = records[(u64::from(iteration) * per + index) as usize]
                    .get_or_insert_with(TransferRecord::default);
                if r.rx_done.is_none() {
                    r.bytes_received += bytes;
                }
            }
        }
    }
}
