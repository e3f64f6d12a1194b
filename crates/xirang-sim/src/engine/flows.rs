//! The workload driver: flows become QPs at the sending NIC, start when their start time
//! has come and the flows they wait for have arrived, and report when they are sent
//! (every byte acknowledged at the sender) and received (every byte in order at the
//! receiver). Transfers between GPUs of one host take their NVLink time and use no port.
//!
//! A flow's dependencies are application logic (a response after its request, a
//! collective step after the one before): a flow starts the moment the last data it
//! waits for arrives, wherever its sender is. In collectives and inference that sender is
//! the host that received the data; an explicit flow list may name any flow.

use std::ops::Range;

use xirang_fabric::config::{CcAlgorithm, FabricConfig, roce_active_mtu};
use xirang_fabric::model::Fabric;
use xirang_fabric::scenario::EcmpMode;

use super::event::Event;
use super::ids::{FlowId, PortId, QpId, RouteId};
use super::nic::{Cc, QpRx, QpTx};
use super::routes::RouteBuilder;
use super::{RunOptions, Sim, intern};
use crate::cc::{Dcqcn, DcqcnState, Timely, TimelyState};
use crate::queue::Queue;
use crate::rng::{Purpose, Stream};
use crate::time::Ps;
use crate::workload::FlowDef;

/// A flow's progress. The workload driver owns the dependency fields, the sending NIC
/// `tx`, the receiving NIC `rx`.
#[derive(Debug)]
pub(crate) struct Flow {
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
    pub(crate) started: Option<Ps>,
    pub(crate) tx: FlowTx,
    pub(crate) rx: FlowRx,
    /// The HPCC simulator's standalone FCT, and the strict lower bound.
    pub(crate) ideal: Ps,
    pub(crate) lower_bound: Ps,
}

/// The sending side of a flow.
#[derive(Debug)]
pub(crate) struct FlowTx {
    pub(crate) qps: Range<u32>,
    pub(crate) qps_left: u32,
    /// Every byte acknowledged.
    pub(crate) finish: Option<Ps>,
}

/// The receiving side of a flow.
#[derive(Debug)]
pub(crate) struct FlowRx {
    pub(crate) rx_left: u32,
    /// Every byte arrived.
    pub(crate) rx_done: Option<Ps>,
}

impl Flow {
    /// The flow's QPs.
    pub(crate) fn qp_ids(&self) -> impl Iterator<Item = QpId> {
        self.tx.qps.clone().map(QpId)
    }
}

impl<Q: Queue> Sim<Q> {
    pub(crate) fn add_flows(
        &mut self,
        fabric: &Fabric,
        config: &FabricConfig,
        defs: &[FlowDef],
        nic_ports: &[Vec<PortId>],
        sw_ports: &[Vec<PortId>],
        opts: &RunOptions,
    ) {
        let mut rb = RouteBuilder::new(fabric, nic_ports, sw_ports, opts.ecmp, opts.hot_switch);
        let mut sport_rng = Stream::new(opts.seed, Purpose::Ecmp, 1);
        let mut pair_sport: std::collections::BTreeMap<(u32, u32), u16> = Default::default();
        let config_qps = config.transport.qps_per_connection.max(1);
        for d in defs {
            let n_qps = d.qps.unwrap_or(config_qps).max(1);
            if let Some(dur) = d.local {
                let at = self.qps_tx.len() as u32;
                self.flows.push(Flow {
                    deps_left: d.after.len() as u32,
                    dependents: Vec::new(),
                    earliest: d.start,
                    after_delay: d.after_delay,
                    local: Some(dur),
                    started: None,
                    tx: FlowTx {
                        qps: at..at,
                        qps_left: 0,
                        finish: None,
                    },
                    rx: FlowRx {
                        rx_left: 0,
                        rx_done: None,
                    },
                    ideal: dur,
                    lower_bound: dur,
                });
                continue;
            }
            let fi = self.flows.next_id();
            let class_idx = self
                .classes
                .iter()
                .position(|c| c.name == d.class)
                .expect("invariant: classes are validated at load");
            let class = self.classes[class_idx].clone();
            let prio = d.prio.unwrap_or(class.prio);
            let src_mtu = fabric.nics[d.src.index()].ports[0].mtu_bytes;
            let dst_mtu = fabric.nics[d.dst.index()].ports[0].mtu_bytes;
            let mtu = config
                .transport
                .roce_mtu_bytes
                .min(roce_active_mtu(src_mtu).unwrap_or(256))
                .min(roce_active_mtu(dst_mtu).unwrap_or(256));
            let first_qp = self.qps_tx.len() as u32;
            let per_qp = d.bytes / u64::from(n_qps);
            for k in 0..n_qps {
                let bytes = if k == 0 {
                    d.bytes - per_qp * u64::from(n_qps - 1)
                } else {
                    per_qp
                };
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
                let src_ip = self.nics[d.src.index()].ip;
                let dst_ip = self.nics[d.dst.index()].ip;
                let route = rb.route(
                    &mut self.routes,
                    &self.nics,
                    &self.switches,
                    d.src,
                    d.dst,
                    [src_ip, dst_ip, u32::from(sport) | (u32::from(dport) << 16)],
                );
                let ack_route = rb.route(
                    &mut self.routes,
                    &self.nics,
                    &self.switches,
                    d.dst,
                    d.src,
                    [dst_ip, src_ip, u32::from(dport) | (u32::from(sport) << 16)],
                );
                let src_port = self.routes.first(route);
                let line_bps = self.ports[src_port].rate.bps;
                let (cc, cnp_interval) = match class.cc {
                    CcAlgorithm::None => (Cc::None, None),
                    CcAlgorithm::Dcqcn => {
                        let p = Dcqcn::new(&class.dcqcn, line_bps);
                        let idx = intern(&mut self.dcqcn, p);
                        let par = &self.dcqcn[idx as usize];
                        (
                            Cc::Dcqcn(idx, Box::new(DcqcnState::new(par))),
                            Some(par.cnp_interval),
                        )
                    }
                    CcAlgorithm::Timely => {
                        let p = Timely::new(&class.timely, line_bps);
                        let idx = intern(&mut self.timely, p);
                        (
                            Cc::Timely(idx, Box::new(TimelyState::new(&self.timely[idx as usize]))),
                            None,
                        )
                    }
                };
                let dst_port = self.route_end(route);
                // Zero-byte QPs are complete from the start.
                let empty = bytes == 0;
                self.qps_tx.push(QpTx {
                    flow: fi,
                    src_port,
                    route,
                    size: bytes,
                    snd_nxt: 0,
                    snd_una: 0,
                    next_avail: 0,
                    last_sent: 0,
                    last_wire: 0,
                    prio,
                    cc,
                    line_bps,
                    mtu,
                    sport,
                    dport,
                    dst_port,
                    rx_reserved: false,
                    last_progress: 0,
                    rto_pending: false,
                    inc_pending: false,
                    done: empty,
                });
                self.qps_rx.push(QpRx {
                    flow: fi,
                    size: bytes,
                    ack_route,
                    prio,
                    cnp_interval,
                    rx_expected: 0,
                    rx_next_cnp: 0,
                    rx_nack_at: 0,
                    rx_last_nack: u64::MAX,
                    rx_done: empty,
                });
            }
            let qps = first_qp..self.qps_tx.len() as u32;
            let (ideal, lower_bound) = self.ideal_fct(self.qps_tx[QpId(first_qp)].route, d.bytes, mtu);
            self.flows.push(Flow {
                deps_left: d.after.len() as u32,
                dependents: Vec::new(),
                earliest: d.start,
                after_delay: d.after_delay,
                local: None,
                started: None,
                tx: FlowTx {
                    qps_left: qps.len() as u32,
                    qps,
                    finish: None,
                },
                rx: FlowRx {
                    rx_left: n_qps,
                    rx_done: None,
                },
                ideal,
                lower_bound,
            });
        }
        for (fi, d) in defs.iter().enumerate() {
            for &a in &d.after {
                self.flows[FlowId(a)].dependents.push(FlowId::from(fi));
            }
            if d.after.is_empty() {
                self.schedule(d.start, Event::FlowStart(FlowId::from(fi)));
            }
        }
    }

    /// The NIC port at the end of a route.
    pub(crate) fn route_end(&self, route: RouteId) -> PortId {
        let last = self
            .routes
            .ports_of(route, &self.ports)
            .last()
            .expect("invariant: routes are not empty");
        self.ports[last].peer
    }

    /// The HPCC simulator's "standalone" FCT: base RTT (twice the path's propagation delay
    /// plus one MTU-sized payload serialised at every hop) plus all bytes with headers at
    /// the bottleneck rate (docs/hpcc-model.md §6, `qp_finish`). It counts the first hop's
    /// serialization twice, so a real FCT can come in under it; the second value is a
    /// strict lower bound: every wire byte at the bottleneck plus the propagation delay
    /// there and back.
    fn ideal_fct(&self, route: RouteId, bytes: u64, mtu: u32) -> (Ps, Ps) {
        let mut delay = 0;
        let mut tx_one = 0;
        let mut bottleneck = f64::INFINITY;
        for p in self.routes.ports_of(route, &self.ports) {
            let port = &self.ports[p];
            delay += self.links[p].delay;
            tx_one += port.rate.tx_time(mtu);
            bottleneck = bottleneck.min(port.rate.bps);
        }
        let pkts = bytes.div_ceil(u64::from(mtu)).max(1);
        let wire = bytes + pkts * u64::from(self.net.header_bytes);
        let at_bottleneck = (wire as f64 * 8.0 * 1e12 / bottleneck).floor() as Ps;
        (2 * delay + tx_one + at_bottleneck, 2 * delay + at_bottleneck)
    }

    /// A flow's start time came and its dependencies arrived: its QPs join their port's
    /// round robin, or an NVLink transfer begins.
    pub(crate) fn start_flow(&mut self, f: FlowId) {
        let now = self.now;
        let flow = &mut self.flows[f];
        flow.started = Some(now);
        if let Some(dur) = flow.local {
            self.schedule(now + dur, Event::LocalDone(f));
            return;
        }
        let qps = flow.tx.qps.clone();
        for qi in qps.map(QpId) {
            let q = &mut self.qps_tx[qi];
            if q.done {
                // A zero-byte message completes as it starts.
                self.qp_received_empty(qi);
                continue;
            }
            q.next_avail = now;
            q.last_progress = now;
            let sp = q.src_port;
            self.ports[sp].qps.push(qi);
            self.kick(sp);
        }
    }

    /// An NVLink transfer is complete: it is sent and received at once.
    pub(crate) fn local_done(&mut self, f: FlowId) {
        self.flows[f].tx.finish = Some(self.now);
        self.flows_left -= 1;
        self.flow_arrived(f);
    }

    fn qp_received_empty(&mut self, qi: QpId) {
        let f = self.qps_tx[qi].flow;
        let flow = &mut self.flows[f];
        flow.tx.qps_left -= 1;
        if flow.tx.qps_left == 0 {
            flow.tx.finish = Some(self.now);
            self.flows_left -= 1;
        }
        self.qp_received(qi);
    }

    /// The receiver of QP `qi` has every byte.
    pub(crate) fn qp_received(&mut self, qi: QpId) {
        let f = self.qps_rx[qi].flow;
        let flow = &mut self.flows[f];
        flow.rx.rx_left -= 1;
        if flow.rx.rx_left > 0 {
            return;
        }
        self.flow_arrived(f);
    }

    /// The sender of QP `qi` has every byte acknowledged.
    pub(crate) fn qp_complete(&mut self, qi: QpId) {
        let q = &mut self.qps_tx[qi];
        q.done = true;
        let f = q.flow;
        let flow = &mut self.flows[f];
        flow.tx.qps_left -= 1;
        if flow.tx.qps_left == 0 {
            flow.tx.finish = Some(self.now);
            self.flows_left -= 1;
        }
    }

    /// All of a flow's data arrived: start the flows waiting for it.
    fn flow_arrived(&mut self, f: FlowId) {
        let flow = &mut self.flows[f];
        flow.rx.rx_done = Some(self.now);
        let deps = std::mem::take(&mut flow.dependents);
        for &d in &deps {
            let dep = &mut self.flows[d];
            dep.deps_left -= 1;
            if dep.deps_left == 0 {
                let t = (self.now + dep.after_delay).max(dep.earliest);
                self.schedule(t, Event::FlowStart(d));
            }
        }
        self.flows[f].dependents = deps;
    }

    /// Data path of a QP as egress port ids, sender NIC first.
    pub(crate) fn route_of(&self, qp: QpId) -> Vec<PortId> {
        self.routes.ports_of(self.qps_tx[qp].route, &self.ports).collect()
    }
}
