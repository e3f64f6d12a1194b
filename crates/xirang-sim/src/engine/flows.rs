//! The workload driver of the scenario's flows: flows become QPs at the sending NIC, start
//! when their start time has come and the flows they wait for have arrived, and report when
//! they are sent (every byte acknowledged at the sender) and received (every byte in order
//! at the receiver). Transfers between GPUs of one host take their NVLink time and use no
//! port.
//!
//! A flow's dependencies are application logic (a response after its request): a flow
//! starts the moment the last data it waits for arrives, wherever its sender is. In
//! inference that sender is the host that received the data; an explicit flow list may
//! name any flow.
//!
//! Flows of the scenario's workloads exist from the start, in definition order, each QP
//! carrying its share of one message. Collectives run elsewhere (`engine::collective`,
//! `engine::transport`), on persistent QPs made here by `make_qp`.

use xirang_fabric::config::{CcAlgorithm, FabricConfig, roce_active_mtu};
use xirang_fabric::model::{Fabric, NicId};
use xirang_fabric::scenario::EcmpMode;

use super::NEVER;
use super::event::Event;
use super::ids::{FlowId, PortId, QpId, RouteId};
use super::nic::{QpRx, QpTx, RxOwner, TxOwner};
use super::routes::RouteRequest;
use super::{ClassRt, RunOptions, Sim};
use crate::queue::Queue;
use crate::rng::{Purpose, Stream};
use crate::time::Ps;
use crate::workload::FlowDef;

/// A route's terms of the standalone FCT: its propagation delay, one MTU's
/// serialization at every hop, and its slowest rate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathTerms {
    delay: Ps,
    tx_one: Ps,
    bottleneck_bps: f64,
}

impl PathTerms {
    /// The standalone FCT of `bytes` and its strict lower bound (see `Sim::ideal_fct`).
    pub(crate) fn fct(self, bytes: u64, mtu: u32, header_bytes: u32) -> (Ps, Ps) {
        let pkts = bytes.div_ceil(u64::from(mtu)).max(1);
        let wire = bytes + pkts * u64::from(header_bytes);
        let at_bottleneck = (wire as f64 * 8.0 * 1e12 / self.bottleneck_bps).floor() as Ps;
        (
            2 * self.delay + self.tx_one + at_bottleneck,
            2 * self.delay + at_bottleneck,
        )
    }
}

/// A flow's progress. The workload driver owns the dependency fields, the sending NIC
/// `tx`, the receiving NIC `rx`.
#[derive(Debug)]
pub(crate) struct Flow {
    /// Dense index of the sending device (a NIC; for a transfer inside a host, the host's
    /// first NIC): where its start and its NVLink completion happen.
    pub(crate) dev: u32,
    /// Dependencies not yet arrived.
    pub(crate) deps_left: u32,
    /// Flows waiting for this one.
    pub(crate) dependents: Vec<FlowId>,
    /// Earliest start (the workload's start time).
    pub(crate) earliest: Ps,
    /// Delay after the last dependency arrived.
    pub(crate) after_delay: Ps,
    /// A transfer inside a host (NVLink) that takes this long and uses no network port.
    pub(crate) local: Option<Ps>,
    /// When its start is queued, on the engine's clock ([`NEVER`]: not queued, or
    /// started; in a partition, read only for the flows it sends). A fast-forward skip
    /// queues the start again ΔT earlier (`Sim::ff_shift_flow_starts`); the one it leaves
    /// behind finds this changed and does nothing.
    pub(crate) start_at: Ps,
    /// When it started, in reported time (as every time a result holds).
    pub(crate) started: Option<Ps>,
    pub(crate) tx: FlowTx,
    pub(crate) rx: FlowRx,
    /// The HPCC simulator's standalone FCT, and the strict lower bound.
    pub(crate) ideal: Ps,
    pub(crate) lower_bound: Ps,
}

/// The sending side of a flow.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct FlowTx {
    /// Its QPs: `n_qps` slots from `first_qp`.
    pub(crate) first_qp: u32,
    pub(crate) n_qps: u32,
    pub(crate) qps_left: u32,
    /// Every byte acknowledged.
    pub(crate) finish: Option<Ps>,
    /// A QP gave up after its retries (the requester's retry-exceeded completion error).
    pub(crate) failed: bool,
}

/// The receiving side of a flow.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct FlowRx {
    pub(crate) rx_left: u32,
    /// Every byte arrived.
    pub(crate) rx_done: Option<Ps>,
}

impl Flow {
    /// A flow not started, waiting for nothing, over `n_qps` QPs from `first_qp` (none for
    /// a local transfer of `local` time).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        dev: u32,
        earliest: Ps,
        local: Option<Ps>,
        first_qp: u32,
        n_qps: u32,
        ideal: Ps,
        lower_bound: Ps,
    ) -> Flow {
        Flow {
            dev,
            deps_left: 0,
            dependents: Vec::new(),
            earliest,
            after_delay: 0,
            local,
            start_at: NEVER,
            started: None,
            tx: FlowTx {
                first_qp,
                n_qps,
                qps_left: n_qps,
                failed: false,
                finish: None,
            },
            rx: FlowRx {
                rx_left: n_qps,
                rx_done: None,
            },
            ideal,
            lower_bound,
        }
    }

    /// The flow's QPs.
    pub(crate) fn qp_ids(&self) -> impl Iterator<Item = QpId> + use<> {
        (self.tx.first_qp..self.tx.first_qp + self.tx.n_qps).map(QpId)
    }
}

/// How a QP's congestion control starts: the algorithm's parameter set (interned per line
/// rate), and the notification point's CNP gap.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CcParams {
    None,
    Dcqcn(u16),
    Timely(u16),
    Hpcc(u16),
    Dctcp(u16),
}

/// Everything a QP is made from, known before the run: its ports and routes.
#[derive(Debug, Clone)]
pub(crate) struct QpSpec {
    pub(crate) route: RouteId,
    pub(crate) ack_route: RouteId,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    pub(crate) src_port: PortId,
    pub(crate) dst_port: PortId,
    pub(crate) line_bps: f64,
    pub(crate) cc: CcParams,
    pub(crate) cnp_interval: Option<Ps>,
    /// The receiver echoes CE marks in its ACKs (DCTCP).
    pub(crate) echo_ecn: bool,
    /// In-flight bytes allowed at line rate (0: no window).
    pub(crate) win_bytes: u64,
}

/// The RoCE MTU of a path between two NICs: the configured one, capped by both NICs'
/// netdev MTU.
pub(crate) fn path_mtu(fabric: &Fabric, config: &FabricConfig, src: NicId, dst: NicId) -> u32 {
    let src_mtu = fabric.nics[src.index()].ports[0].mtu_bytes;
    let dst_mtu = fabric.nics[dst.index()].ports[0].mtu_bytes;
    config
        .transport
        .roce_mtu_bytes
        .min(roce_active_mtu(src_mtu).unwrap_or(256))
        .min(roce_active_mtu(dst_mtu).unwrap_or(256))
}

/// The route keys of one QP (data, then ACK direction): source and destination IP, UDP
/// ports.
pub(crate) fn route_requests(
    ips: (u32, u32),
    src: NicId,
    dst: NicId,
    sport: u16,
    dport: u16,
) -> [RouteRequest; 2] {
    let (src_ip, dst_ip) = ips;
    [
        RouteRequest {
            src,
            dst,
            key: [src_ip, dst_ip, u32::from(sport) | (u32::from(dport) << 16)],
            ack: false,
        },
        RouteRequest {
            src: dst,
            dst: src,
            key: [dst_ip, src_ip, u32::from(dport) | (u32::from(sport) << 16)],
            ack: true,
        },
    ]
}

/// The eager flows' QPs before their routes are known.
pub(crate) struct EagerPlan {
    /// (sport, dport) of each QP, flow by flow.
    pub(crate) ports: Vec<(u16, u16)>,
    /// Two route requests per QP (data, ACK).
    pub(crate) requests: Vec<RouteRequest>,
}

impl<Q: Queue> Sim<Q> {
    /// Draws every eager QP's source port, in definition order (as RoCE NICs derive them
    /// from QP numbers), and lists the routes they need.
    pub(crate) fn plan_eager(&self, config: &FabricConfig, defs: &[FlowDef], opts: &RunOptions) -> EagerPlan {
        let mut sport_rng = Stream::new(opts.seed, Purpose::Ecmp, 1);
        let mut pair_sport: std::collections::BTreeMap<(u32, u32), u16> = Default::default();
        let config_qps = config.transport.qps_per_connection.max(1);
        let mut plan = EagerPlan {
            ports: Vec::new(),
            requests: Vec::new(),
        };
        for d in defs.iter().filter(|d| d.local.is_none()) {
            let n_qps = d.qps.unwrap_or(config_qps).max(1);
            for k in 0..n_qps {
                let (sport, dport) = match (d.hpcc_ports, opts.ecmp) {
                    (Some(p), _) if k == 0 => p,
                    (_, EcmpMode::Hpcc) => {
                        let e = pair_sport.entry((d.src.0, d.dst.0)).or_insert(10000);
                        let s = *e;
                        *e = e.wrapping_add(1);
                        (s, 100)
                    }
                    // RoCE v2 source ports come from a hash of the QP number; draw one from
                    // the ephemeral range (49152..65535).
                    _ => (49152 + sport_rng.below(16384) as u16, 4791),
                };
                plan.ports.push((sport, dport));
                let ips = (self.fab.nic(d.src.index()).ip, self.fab.nic(d.dst.index()).ip);
                plan.requests
                    .extend(route_requests(ips, d.src, d.dst, sport, dport));
            }
        }
        plan
    }

    /// A QP's fixed parts from its class, priority, ends (sender, receiver) and routes.
    pub(crate) fn qp_spec(
        &mut self,
        class: &ClassRt,
        prio: u8,
        ends: (NicId, NicId),
        route: RouteId,
        ack_route: RouteId,
        ports: (u16, u16),
    ) -> QpSpec {
        let src_port = self.fab.routes().first(route);
        let line_bps = self.fab.port(src_port).rate.bps;
        let (cc, cnp_interval, win_bytes) = self.cc.qp_params(class, prio, ends, line_bps);
        QpSpec {
            route,
            ack_route,
            sport: ports.0,
            dport: ports.1,
            src_port,
            dst_port: self.route_end(route),
            line_bps,
            cc,
            cnp_interval,
            echo_ecn: matches!(class.cc, CcAlgorithm::Dctcp),
            win_bytes,
        }
    }

    /// Appends a QP for `bytes` (a persistent QP: 0, its messages come later) and returns
    /// its id. Both halves are made here: every partition sets up every QP, and each
    /// touches only the halves of the NICs it owns.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn make_qp(
        &mut self,
        owner: TxOwner,
        rx_owner: RxOwner,
        spec: &QpSpec,
        bytes: u64,
        prio: u8,
        mtu: u32,
        wr_capacity: usize,
    ) -> QpId {
        let cc = self.cc.start(spec.cc);
        let persistent = !matches!(owner, TxOwner::Flow(_));
        // Zero-byte QPs are complete from the start; a persistent QP idles until its first
        // message.
        let empty = bytes == 0;
        let tx = QpTx {
            owner,
            src_port: self.fab.routes().first(spec.route),
            route: spec.route,
            size: bytes,
            snd_nxt: 0,
            snd_una: 0,
            wrs: std::collections::VecDeque::with_capacity(wr_capacity),
            wr_tx: 0,
            next_avail: 0,
            last_sent: 0,
            last_wire: 0,
            prio,
            cc,
            line_bps: spec.line_bps,
            mtu,
            sport: spec.sport,
            dport: spec.dport,
            dst_port: spec.dst_port,
            rx_reserved: false,
            win_bytes: spec.win_bytes,
            last_progress: 0,
            timeouts: 0,
            rto_pending: false,
            inc_pending: false,
            done: empty,
            listed: false,
        };
        let rx = QpRx {
            owner: rx_owner,
            size: if persistent { u64::MAX } else { bytes },
            ack_route: spec.ack_route,
            prio,
            cnp_interval: spec.cnp_interval,
            echo_ecn: spec.echo_ecn,
            rx_expected: 0,
            rx_next_cnp: 0,
            rx_nack_at: 0,
            rx_last_nack: u64::MAX,
            rx_done: empty && !persistent,
            msgs: 0,
        };
        self.xport.push(tx, rx)
    }

    /// Creates the scenario's flows and their QPs, routes given (`plan_eager`'s requests,
    /// in order). Start events are queued by the caller.
    pub(crate) fn add_flows(
        &mut self,
        fabric: &Fabric,
        config: &FabricConfig,
        defs: &[FlowDef],
        plan: &EagerPlan,
        routes: &[RouteId],
    ) {
        let config_qps = config.transport.qps_per_connection.max(1);
        let mut qp_at = 0usize;
        for d in defs {
            if let Some(dur) = d.local {
                let at = self.xport.n_qps();
                self.work.push_flow(Flow {
                    deps_left: d.after.len() as u32,
                    after_delay: d.after_delay,
                    ..Flow::new(d.src.index() as u32, d.start, Some(dur), at, 0, dur, dur)
                });
                continue;
            }
            let n_qps = d.qps.unwrap_or(config_qps).max(1);
            let fi = FlowId::from(self.work.n_flows());
            let class = self.cc.class(&d.class).clone();
            let prio = d.prio.unwrap_or(class.prio);
            let mtu = path_mtu(fabric, config, d.src, d.dst);
            let first_qp = self.xport.n_qps();
            let per_qp = d.bytes / u64::from(n_qps);
            let mut receiving = 0;
            for k in 0..n_qps {
                let bytes = if k == 0 {
                    d.bytes - per_qp * u64::from(n_qps - 1)
                } else {
                    per_qp
                };
                let spec = self.qp_spec(
                    &class,
                    prio,
                    (d.src, d.dst),
                    routes[2 * qp_at],
                    routes[2 * qp_at + 1],
                    plan.ports[qp_at],
                );
                qp_at += 1;
                self.make_qp(TxOwner::Flow(fi), RxOwner::Flow(fi), &spec, bytes, prio, mtu, 0);
                receiving += u32::from(bytes > 0);
            }
            let (ideal, lower_bound) = self.ideal_fct(self.xport.tx(QpId(first_qp)).route, d.bytes, mtu);
            let mut flow = Flow {
                deps_left: d.after.len() as u32,
                after_delay: d.after_delay,
                ..Flow::new(
                    d.src.index() as u32,
                    d.start,
                    None,
                    first_qp,
                    n_qps,
                    ideal,
                    lower_bound,
                )
            };
            // QPs a message too small to split leaves empty send nothing: the receiver
            // waits only for the others.
            flow.rx.rx_left = receiving;
            self.work.push_flow(flow);
        }
        for (fi, d) in defs.iter().enumerate() {
            for &a in &d.after {
                self.work.flow_mut(FlowId(a)).dependents.push(FlowId::from(fi));
            }
        }
    }

    /// The NIC port at the end of a route.
    pub(crate) fn route_end(&self, route: RouteId) -> PortId {
        let last = self
            .fab
            .route_ports(route)
            .last()
            .expect("invariant: routes are not empty");
        self.fab.port(last).peer
    }

    /// The HPCC simulator's "standalone" FCT: base RTT (twice the path's propagation delay
    /// plus one MTU-sized payload serialised at every hop) plus all bytes with headers at
    /// the bottleneck rate (docs/hpcc-model.md §6, `qp_finish`). It counts the first hop's
    /// serialization twice, so a real FCT can come in under it; the second value is a
    /// strict lower bound: every wire byte at the bottleneck plus the propagation delay
    /// there and back.
    pub(crate) fn ideal_fct(&self, route: RouteId, bytes: u64, mtu: u32) -> (Ps, Ps) {
        self.path_terms(route, mtu)
            .fct(bytes, mtu, self.fab.net().header_bytes)
    }

    /// What [`Sim::ideal_fct`] needs of a route, at the ports' current rates (set-up
    /// takes them before any fault slows a link: the standalone FCT is the healthy
    /// fabric's, and a transfer made later reads it from its connection, never from
    /// ports another partition may own).
    pub(crate) fn path_terms(&self, route: RouteId, mtu: u32) -> PathTerms {
        let mut t = PathTerms {
            delay: 0,
            tx_one: 0,
            bottleneck_bps: f64::INFINITY,
        };
        for p in self.fab.route_ports(route) {
            let port = self.fab.port(p);
            t.delay += self.fab.link(p).delay;
            t.tx_one += port.rate.tx_time(mtu);
            t.bottleneck_bps = t.bottleneck_bps.min(port.rate.bps);
        }
        t
    }

    /// A flow's start time came and its dependencies arrived: its QPs join their port's
    /// round robin, or an NVLink transfer begins.
    pub(crate) fn start_flow(&mut self, f: FlowId) {
        let now = self.now;
        let at = self.reported_now();
        let flow = self.work.flow_mut(f);
        if flow.start_at != now {
            // A start a fast-forward skip queued again earlier: the flow has started.
            return;
        }
        flow.start_at = NEVER;
        flow.started = Some(at);
        if let Some(dur) = flow.local {
            self.schedule(now + dur, Event::LocalDone(f));
            return;
        }
        for qi in flow.qp_ids() {
            let q = self.xport.tx_mut(qi);
            if q.done {
                // An empty QP (a message smaller than its QPs) is sent as it starts.
                self.qp_sent_empty(qi);
                continue;
            }
            q.next_avail = now;
            q.last_progress = now;
            // The route's first hop, which a bond's failover may have moved since the QP
            // was made.
            let sp = self.fab.routes().first(q.route);
            q.src_port = sp;
            q.listed = true;
            self.fab.port_mut(sp).nic_mut().qps.push(qi);
            self.kick(sp);
        }
    }

    /// An NVLink transfer is complete: it is sent and received at once.
    pub(crate) fn local_done(&mut self, f: FlowId) {
        self.work.flow_mut(f).tx.finish = Some(self.reported_now());
        self.flow_done();
        self.flow_arrived(f);
    }

    fn qp_sent_empty(&mut self, qi: QpId) {
        let TxOwner::Flow(f) = self.xport.tx(qi).owner else {
            unreachable!("invariant: only flows' QPs start empty")
        };
        let flow = self.work.flow_mut(f);
        flow.tx.qps_left -= 1;
        if flow.tx.qps_left == 0 {
            self.flow_sent(f);
        }
    }

    /// Every QP of flow `f` is sent (each byte acknowledged): the sender is done with it.
    fn flow_sent(&mut self, f: FlowId) {
        self.work.flow_mut(f).tx.finish = Some(self.reported_now());
        self.flow_done();
    }

    /// The receiver of a flow's QP `qi` has every byte.
    pub(crate) fn qp_received(&mut self, qi: QpId) {
        let RxOwner::Flow(f) = self.xport.rx(qi).owner else {
            unreachable!("invariant: only flows' QPs have a size to complete")
        };
        let flow = self.work.flow_mut(f);
        flow.rx.rx_left -= 1;
        if flow.rx.rx_left == 0 {
            self.flow_arrived(f);
        }
    }

    /// The sender of QP `qi` has every byte acknowledged.
    pub(crate) fn qp_complete(&mut self, qi: QpId) {
        let q = self.xport.tx_mut(qi);
        q.done = true;
        q.rto_pending = false;
        let owner = q.owner;
        self.xport.disarm(qi);
        let TxOwner::Flow(f) = owner else {
            unreachable!("invariant: a persistent QP idles, it does not complete")
        };
        let flow = self.work.flow_mut(f);
        flow.tx.qps_left -= 1;
        if flow.tx.qps_left == 0 {
            self.flow_sent(f);
        }
    }

    /// The sender of QP `qi` gave up: its ACK timer expired more often in a row than the
    /// QP's retry count allows. The message fails (a real requester completes it with a
    /// retry-exceeded error and the QP goes to the error state), so the flow never
    /// finishes and nothing waiting for it starts; the run goes on without it.
    pub(crate) fn qp_failed(&mut self, qi: QpId) {
        let q = self.xport.tx_mut(qi);
        q.done = true;
        q.rto_pending = false;
        let owner = q.owner;
        self.xport.count_failed();
        match owner {
            TxOwner::Flow(f) => {
                let flow = self.work.flow_mut(f);
                flow.tx.failed = true;
                flow.tx.qps_left -= 1;
                if flow.tx.qps_left == 0 {
                    self.flow_done();
                }
            }
            // A connection's QP in the error state: NCCL aborts the communicator, so the
            // collective stops where it is (its transfers never complete).
            TxOwner::Conn { conn, .. } | TxOwner::Cts { conn } => self.connection_failed(conn),
        }
    }

    /// All of a scenario flow's data arrived: start the flows waiting for it.
    fn flow_arrived(&mut self, f: FlowId) {
        let skipped = self.ff.skipped_ps();
        let at = self.reported_now();
        let flow = self.work.flow_mut(f);
        flow.rx.rx_done = Some(at);
        let deps = std::mem::take(&mut flow.dependents);
        for &d in &deps {
            let dep = self.work.flow_mut(d);
            dep.deps_left -= 1;
            if dep.deps_left == 0 {
                // The earliest start is in reported time, the queue on the engine's clock.
                let t = (self.now + dep.after_delay).max(dep.earliest.saturating_sub(skipped));
                dep.start_at = t;
                self.schedule(t, Event::FlowStart(d));
            }
        }
        self.work.flow_mut(f).dependents = deps;
    }

    /// Data path of a QP as egress port ids, sender NIC first (as the arena holds it now).
    #[cfg(test)]
    pub(crate) fn route_of(&self, qp: QpId) -> Vec<PortId> {
        self.fab.route_ports(self.xport.tx(qp).route).collect()
    }

    /// A route as it was computed, before any bond failover moved its hops: what the
    /// results report as a flow's path. A failover rewrites each hop in the partition
    /// that owns it, so the arena of the sender's partition may not hold another
    /// partition's rewrite; the route as computed is the same everywhere. `originals` is
    /// [`Faults::failover_originals`](super::faults::Faults::failover_originals).
    pub(crate) fn route_as_computed(
        &self,
        route: RouteId,
        originals: &std::collections::HashMap<u32, PortId>,
    ) -> Vec<PortId> {
        self.fab
            .route_ports(route)
            .enumerate()
            .map(|(k, p)| {
                originals
                    .get(&(route.idx() as u32 + k as u32))
                    .copied()
                    .unwrap_or(p)
            })
            .collect()
    }
}
