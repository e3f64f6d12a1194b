//! Setting a run up: the ports and links of the fabric, its devices, the classes and
//! fabric-wide settings, then routes, flows, collectives and the first events. Each step
//! is a function of the scenario's model; `Sim::new_part` puts them together.

use xirang_fabric::config::{CcAlgorithm, FabricConfig};
use xirang_fabric::model::{Fabric, Node};
use xirang_fabric::scenario::EcmpMode;

use super::event::Event;
use super::ids::{self, IdVec, PortId};
use super::link::{Link, NicPort, Port, Role, SwitchPort};
use super::switch::SwitchState;
use super::{ClassRt, Dev, MAX_DEVICES, NetConfig, NicState, RunOptions, Sim, routes};
use crate::queue::Queue;
use crate::rng::{Purpose, Stream};
use crate::time::{PS_PER_NS, PS_PER_US, Ps, Rate};
use crate::workload::Expanded;

/// The fabric's ports (two per link, a link's ends adjacent) and the directed link
/// leaving each, with where each NIC's and switch's ports landed.
pub(crate) struct PortLayout {
    pub(crate) ports: IdVec<PortId, Port>,
    pub(crate) links: IdVec<PortId, Link>,
    /// Each NIC's ports by port number (`u32::MAX`: no link).
    pub(crate) nic_ports: Vec<Vec<PortId>>,
    /// Each switch's ports by port number.
    pub(crate) sw_ports: Vec<Vec<PortId>>,
}

/// The ports and links of `fabric` under `config`.
pub(crate) fn ports_and_links(fabric: &Fabric, config: &FabricConfig, opts: &RunOptions) -> PortLayout {
    let mut ports: IdVec<PortId, Port> = IdVec::with_capacity(fabric.links.len() * 2);
    let mut links: IdVec<PortId, Link> = IdVec::with_capacity(fabric.links.len() * 2);
    let mut nic_ports: Vec<Vec<PortId>> = fabric
        .nics
        .iter()
        .map(|n| vec![PortId(u32::MAX); n.ports.len()])
        .collect();
    let mut sw_ports: Vec<Vec<PortId>> = fabric
        .switches
        .iter()
        .map(|s| vec![PortId(u32::MAX); s.ports.len()])
        .collect();
    let dev_of = |n: Node| match n {
        Node::Nic(x) => Dev::Nic(x),
        Node::Switch(x) => Dev::Switch(x),
    };
    assert!(
        fabric.nics.len() + fabric.switches.len() <= MAX_DEVICES,
        "invariant: scenario validation keeps devices below MAX_DEVICES"
    );
    let n_nics_usize = fabric.nics.len();
    let dev_index = |n: Node| match n {
        Node::Nic(x) => x.index() as u32,
        Node::Switch(x) => (n_nics_usize + x.index()) as u32,
    };
    let pfc = &config.pfc;
    for l in &fabric.links {
        let base = ports.next_id().0;
        for (end, peer) in [(l.a, base + 1), (l.b, base)] {
            let id = ports.next_id();
            match end.node {
                Node::Nic(n) => nic_ports[n.index()][end.port as usize] = id,
                Node::Switch(s) => sw_ports[s.index()][end.port as usize] = id,
            }
            let rate = Rate::from_gbps(l.rate_gbps);
            // HPCC sizes headroom per port as 3 x rate x one-way delay
            // (docs/reference/congestion-control.md §6).
            let headroom = pfc
                .headroom_bytes
                .unwrap_or_else(|| xirang_fabric::config::default_headroom_bytes(l.rate_gbps, l.delay_ns));
            let role = match end.node {
                Node::Switch(s) => {
                    let sw = &fabric.switches[s.index()];
                    let red = sw.ports[end.port as usize]
                        .ecn
                        .unwrap_or_else(|| config.ecn.profile_at(sw.tier, l.rate_gbps));
                    let ecn_rng = Stream::new(opts.seed, Purpose::Ecn, u64::from(id.0));
                    Role::Switch(SwitchPort::new(headroom, red, ecn_rng))
                }
                Node::Nic(n) => Role::Nic(NicPort {
                    pcie: Some(fabric.nics[n.index()].pcie),
                    ..NicPort::default()
                }),
            };
            let port = Port::new(
                dev_of(end.node),
                dev_index(end.node),
                end.port,
                PortId(peer),
                rate,
                role,
            );
            ports.push(port);
            let far = if end.node == l.a.node && end.port == l.a.port {
                l.b
            } else {
                l.a
            };
            links.push(Link::new(l.delay_ns * PS_PER_NS, dev_index(far.node)));
        }
    }
    PortLayout {
        ports,
        links,
        nic_ports,
        sw_ports,
    }
}

/// The switches' and NICs' run-time identities and the switches' buffers.
pub(crate) fn devices(
    fabric: &Fabric,
    config: &FabricConfig,
    opts: &RunOptions,
    layout: &PortLayout,
) -> (Vec<SwitchState>, Vec<NicState>) {
    let (ports, sw_ports, pfc) = (&layout.ports, &layout.sw_ports, &config.pfc);
    let n_nics = fabric.nics.len() as u32;
    // Node ids: HPCC topologies keep the file's ids (hosts `h<id>`, switches `sw<id>`);
    // otherwise NICs count from 0 and switches follow.
    let hpcc_ids = fabric
        .hosts
        .iter()
        .all(|h| h.nics.len() == 1 && xirang_fabric::hpcc::node_id_from_name(&h.name).is_some())
        && fabric
            .switches
            .iter()
            .all(|s| xirang_fabric::hpcc::node_id_from_name(&s.name).is_some());
    let nic_node_id = |i: usize| {
        if hpcc_ids {
            xirang_fabric::hpcc::node_id_from_name(&fabric.hosts[fabric.nics[i].host.index()].name)
                .expect("checked")
        } else {
            i as u32
        }
    };
    let sw_node_id = |i: usize| {
        if hpcc_ids {
            xirang_fabric::hpcc::node_id_from_name(&fabric.switches[i].name).expect("checked")
        } else {
            n_nics + i as u32
        }
    };
    let seed_mix = match opts.ecmp {
        EcmpMode::Hpcc => 0,
        EcmpMode::Seeded => Stream::new(opts.seed, Purpose::Ecmp, 0).next_u64() as u32,
    };
    let switches: Vec<SwitchState> = (0..fabric.switches.len())
        .map(|i| {
            let mine = sw_ports[i].iter().filter(|p| p.0 != u32::MAX);
            let total_hdrm: u64 = if pfc.enabled {
                mine.clone().map(|p| ports[*p].switch().headroom).sum()
            } else {
                0
            };
            SwitchState::new(
                sw_node_id(i) ^ seed_mix,
                config.buffer.switch_bytes,
                total_hdrm + mine.count() as u64 * config.buffer.reserved_bytes,
            )
        })
        .collect();
    let nics: Vec<NicState> = (0..fabric.nics.len())
        .map(|i| {
            let id = nic_node_id(i);
            NicState {
                node_id: id,
                ip: xirang_fabric::hpcc::node_ip(id),
            }
        })
        .collect();
    (switches, nics)
}

/// The traffic classes at run time, and the fabric's base RTT when a class needs it.
pub(crate) fn classes(
    fabric: &Fabric,
    config: &FabricConfig,
) -> (Vec<ClassRt>, Option<xirang_fabric::model::BaseRtt>) {
    let classes: Vec<ClassRt> = config
        .classes
        .iter()
        .map(|(name, c)| ClassRt {
            name: name.clone(),
            prio: c.priority,
            cc: c.cc,
            dcqcn: c.dcqcn,
            timely: c.timely,
            hpcc: c.hpcc,
            dctcp: c.dctcp,
        })
        .collect();
    let windowed = classes
        .iter()
        .any(|c| matches!(c.cc, CcAlgorithm::Hpcc | CcAlgorithm::Dctcp));
    let base_rtt = windowed.then(|| fabric.base_rtt(config.transport.roce_mtu_bytes));
    (classes, base_rtt)
}

/// The fabric-wide settings every device reads.
pub(crate) fn net_config(config: &FabricConfig) -> NetConfig {
    let pfc = &config.pfc;
    NetConfig {
        pfc_lossless: std::array::from_fn(|p| pfc.is_lossless(p as u8)),
        pfc_prios: if pfc.enabled {
            pfc.priorities.clone()
        } else {
            Vec::new()
        },
        pfc_th: pfc.dynamic_th,
        lossy_th: config.buffer.lossy_dynamic_th,
        reserved: config.buffer.reserved_bytes,
        xon_offset: pfc.xon_offset_bytes,
        pause_quanta: pfc.pause_quanta,
        cnp_prio: config.cnp.priority,
        ack_prio_high: config.cnp.ack_on_cnp_priority,
        header_bytes: config.transport.header_bytes,
        ack_timeout: config.transport.ack_timeout_ps(),
        retry_cnt: config.transport.retry_cnt,
    }
}

/// Each port's name, for results and messages.
pub(crate) fn port_names(fabric: &Fabric, ports: &IdVec<PortId, Port>) -> IdVec<PortId, String> {
    ports
        .iter()
        .map(|p| {
            let node = match p.dev {
                Dev::Nic(n) => Node::Nic(n),
                Dev::Switch(s) => Node::Switch(s),
            };
            fabric.port_name(xirang_fabric::model::PortRef { node, port: p.local })
        })
        .collect()
}

/// How far ahead most events are scheduled: one serialization plus one link delay, or, in
/// a collective, one slice of GPU or proxy time (the calendar queue's horizon).
pub(crate) fn queue_horizon(fabric: &Fabric, ex: &Expanded) -> Ps {
    ex.collectives
        .iter()
        .map(|c| c.gpu.slice + c.gpu.step + c.gpu.proxy + c.gpu.flush)
        .chain([fabric.links.iter().map(|l| l.delay_ns).max().unwrap_or(0) * PS_PER_NS])
        .max()
        .unwrap_or(0)
        + PS_PER_US
}

impl<Q: Queue> Sim<Q> {
    /// Routes every flow and collective connection, adds them, cuts the links whose far
    /// end another partition runs, and queues the first events.
    pub(crate) fn populate(
        &mut self,
        fabric: &Fabric,
        config: &FabricConfig,
        ex: &Expanded,
        opts: &RunOptions,
        nic_ports: &[Vec<PortId>],
        sw_ports: &[Vec<PortId>],
    ) {
        let sim = self;
        let flows = &ex.flows;
        // Every route of the run at once, destination by destination: the flows' QPs,
        // then each collective's connections.
        let eager = sim.plan_eager(config, flows, opts);
        let mut requests = eager.requests.clone();
        let plans: Vec<_> = ex
            .collectives
            .iter()
            .map(|run| {
                let first = requests.len();
                let plan = sim.plan_collective(fabric, config, run, opts, &mut requests);
                (plan, first..requests.len())
            })
            .collect();
        let routes = {
            let mut rb = routes::RouteBuilder::new(
                fabric,
                nic_ports,
                sw_ports,
                sim.fab.nics(),
                sim.fab.switches(),
                opts.ecmp,
                opts.hot_switch,
            )
            .with_bonds(
                config.intra_host.bond_hash_policy,
                config.intra_host.lag_port_select,
            );
            let (arena, switches) = sim.fab.routes_and_switches();
            rb.compute(&requests, arena, switches)
        };
        sim.add_flows(fabric, config, flows, &eager, &routes[..eager.requests.len()]);
        // A link whose far end another partition owns is cut: what this partition puts on
        // it goes to that partition's outbox.
        if let Some(p) = sim.dist.map() {
            sim.fab.cut_links(|from, to| p.owns(from) && !p.owns(to));
        }
        let mut budget = opts.transfer_records;
        for (run, (plan, span)) in ex.collectives.iter().zip(plans) {
            let total = run.per_iteration * u64::from(run.iterations);
            let record = total <= budget;
            if record {
                budget -= total;
            }
            sim.add_collective(fabric, config, run.clone(), plan, &routes[span], record);
        }
        // Start events in flow id order, the scenario's flows and each collective's
        // threads alike.
        enum First {
            Flow(usize),
            Collective(usize),
        }
        let mut firsts: Vec<(u64, First)> = flows
            .iter()
            .enumerate()
            .filter(|(_, d)| d.after.is_empty())
            .map(|(i, d)| (d.id, First::Flow(i)))
            .collect();
        firsts.extend(
            (0..sim.work.colls().len()).map(|c| (sim.work.coll(c).run.first_id, First::Collective(c))),
        );
        firsts.sort_by_key(|(id, _)| *id);
        for (_, first) in firsts {
            match first {
                First::Flow(i) => {
                    let f = ids::FlowId::from(i);
                    sim.work.flow_mut(f).start_at = flows[i].start;
                    sim.schedule(flows[i].start, Event::FlowStart(f));
                }
                First::Collective(c) => sim.collective_start(c),
            }
        }
    }
}
