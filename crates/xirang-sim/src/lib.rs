//! Xirang's packet-level discrete-event simulator of RoCE fabrics.
//!
//! It runs a fabric model (`xirang-fabric`) under a workload and reports application
//! metrics (flow completion times, request latency, collective completion time with
//! nccl-tests' algbw and busbw) and the counters real NICs and switches expose, under their
//! real names. The engine (`engine`) is a set of components that meet only through
//! packets on links, PFC frames and their own timers:
//!
//! - time and events: integer picoseconds; a closed `Event` enum encoded in 8 bytes;
//!   `queue`'s calendar queue of 1,024 ps buckets keyed by (time, tie), with a 4-ary heap for
//!   far events and a cancellable heap of ACK timers (the plain heap is kept as the
//!   reference engine `xirang bench` compares against);
//! - ports and links (`engine::link`): serialization, propagation and the packets in
//!   flight, held in rings, no allocation per packet; 8 priorities, PFC frames first, the
//!   CNP priority strictly next, DWRR between the others (`engine::switch`);
//! - switches: a shared buffer with dynamic thresholds per ingress priority group, PFC
//!   XOFF/XON with headroom and pause refresh (`engine::pfc`), RED/ECN at dequeue per tier,
//!   lossy drops, ECMP with the HPCC simulator's hash over routes computed for every QP at
//!   the start, destination leaf by destination leaf (`engine::routes`);
//! - NICs (`engine::nic`): QPs segmented at the path MTU, per-QP pacing, an ACK per packet,
//!   go-back-N on NACK or ACK timeout with NCCL's retry count; DCQCN, TIMELY, HPCC (with
//!   in-band telemetry) and DCTCP per traffic class as pure state machines (`cc`), their
//!   timers in `engine::cc_timers`;
//! - workloads (`workload`, `engine::flows`): flows, inference requests and HPCC flow
//!   files;
//! - collectives as NCCL runs them (`engine::collective`, `engine::transport`): GPU threads
//!   running NCCL's device programs slice by slice over connections with persistent QPs,
//!   NCCL's slots and the receivers' clear-to-send, each slice paying the GPU's and the
//!   proxy's time; memory follows the fabric's connections, never the schedule; `sweep`
//!   runs nccl-tests on the twin;
//! - faults (`engine::faults`), counter sampling (`engine::sampling`) and the conservation
//!   ledger (`engine::ledger`);
//! - parallel runs (`parallel`, `engine::part`): the fabric divided into partitions at
//!   links, run in windows of the link latency on threads or MPI ranks (`xirang-mpi`), with
//!   results byte-identical to the serial run's.
//!
//! Simplifications are stated where they are made; see also VALIDATION.md at the
//! repository root for the comparison with the HPCC ns-3 simulator.
//!
//! ```
//! use std::path::Path;
//! use xirang_fabric::scenario::Scenario;
//!
//! let text = r#"
//! [topology.leaf_spine]
//! leaves = 1
//! spines = 1
//! hosts_per_leaf = 2
//! host_rate_gbps = 100
//! fabric_rate_gbps = 100
//!
//! [workloads.one.flows]
//! list = [{ src = "h0", dst = "h1", bytes = 100_000 }]
//! "#;
//! let loaded = Scenario::parse(text, Path::new("x.toml")).unwrap()
//!     .build(Path::new("x.toml"), Path::new("."), Some(text)).unwrap();
//! let result = xirang_sim::simulate(&loaded, &xirang_sim::options(&loaded), &mut |_| {});
//! assert!(result.flows[0].fct_ps.is_some());
//! result.check_conservation().unwrap();
//! ```

pub mod cc;
pub mod counters;
pub mod engine;
pub mod output;
pub mod packet;
pub mod parallel;
pub mod queue;
pub mod rng;
pub mod serving;
pub mod sweep;
pub mod time;
pub mod workload;

pub use engine::{Ledger, PfcEvent, Progress, RunOptions, Sim};
pub use output::{EngineStats, FlowResult, RunResult, Summary};

use xirang_fabric::Loaded;
use xirang_fabric::built::Model;
use xirang_fabric::scenario::{FaultKind, FaultTarget, ResolvedFault};

use crate::engine::ids::{FlowId, PortId, QpId};
use crate::output::{RequestResult, RunStats};
use crate::time::us;

/// Run options from a scenario's `[run]` section.
pub fn options(loaded: &Loaded) -> RunOptions {
    let model = loaded.model();
    let r = &loaded.scenario.run;
    RunOptions {
        seed: r.seed,
        end: (r.end_us > 0.0).then(|| us(r.end_us)),
        sample_interval: (r.sample_interval_us > 0.0).then(|| us(r.sample_interval_us)),
        ecmp: r.ecmp,
        hot_switch: model.faults.iter().find_map(|f| match f.target {
            FaultTarget::Switch(s) if f.fault.kind == FaultKind::EcmpImbalance => Some((s, f.fault.share?)),
            _ => None,
        }),
        transfer_records: r.transfer_records,
        steady_probe: false,
        fast_forward: match r.fast_forward {
            Some(true) => Some(crate::engine::ffwd::FastForwardCriterion::default()),
            Some(false) => None,
            None => Some(crate::engine::ffwd::FastForwardCriterion::by_default()),
        },
    }
}

/// Expands the scenario's workloads, runs them, and collects the results. `progress`
/// receives how far the run is now and then.
pub fn simulate(loaded: &Loaded, opts: &RunOptions, progress: &mut dyn FnMut(Progress)) -> RunResult {
    debug_assert_built(loaded);
    simulate_model(loaded.model(), opts, progress)
}

/// A run simulates the built workloads (`Loaded::workloads`), not the scenario's text: a
/// caller that edits `loaded.scenario.workloads` after the build must build again. Debug
/// builds refuse the stale case, which would otherwise run the old workloads silently.
pub(crate) fn debug_assert_built(loaded: &Loaded) {
    debug_assert!(
        loaded.workloads.len() == loaded.scenario.workloads.len()
            && loaded
                .workloads
                .iter()
                .zip(loaded.scenario.workloads.iter())
                .all(|(b, (name, spec))| b.name == *name && b.spec == *spec),
        "invariant: the scenario's workloads were edited after the build; build it again (Scenario::build)"
    );
}

/// [`simulate`] of a built model: what a caller that varies the configuration runs, so
/// that each run borrows the fabric and the workloads instead of copying them.
pub fn simulate_model(model: Model<'_>, opts: &RunOptions, progress: &mut dyn FnMut(Progress)) -> RunResult {
    simulate_with::<queue::EventQueue>(model, opts, progress)
}

/// [`simulate`] on the plain 4-ary heap, the reference engine `xirang bench` compares the
/// calendar queue with. Not generic, like [`simulate`], so that the engine is compiled
/// here, under this crate's profile (one codegen unit), and not in the caller's crate:
/// a generic call from the CLI instantiated the whole engine there, at the CLI's
/// opt-level.
pub fn simulate_heap(loaded: &Loaded, opts: &RunOptions, progress: &mut dyn FnMut(Progress)) -> RunResult {
    debug_assert_built(loaded);
    simulate_with::<queue::HeapQueue>(loaded.model(), opts, progress)
}

/// [`simulate_model`] with a chosen event queue implementation. A caller in another
/// crate compiles the engine in its own crate: prefer [`simulate`] and [`simulate_heap`].
pub fn simulate_with<Q: queue::Queue>(
    model: Model<'_>,
    opts: &RunOptions,
    progress: &mut dyn FnMut(Progress),
) -> RunResult {
    let expanded = prepare(model, opts);
    run_prepared::<Q>(model, opts, &expanded, progress)
}

/// The scenario's workloads expanded, with the faults that rewrite flows applied.
fn prepare(model: Model<'_>, opts: &RunOptions) -> workload::Expanded {
    let mut expanded = workload::expand(model, opts.seed);
    funnel(model.fabric, model.faults, &mut expanded);
    single_qp(model.faults, &mut expanded);
    expanded
}

/// Runs prepared workloads serially and collects the results.
fn run_prepared<Q: queue::Queue>(
    model: Model<'_>,
    opts: &RunOptions,
    expanded: &workload::Expanded,
    progress: &mut dyn FnMut(Progress),
) -> RunResult {
    let mut sim = Sim::<Q>::new(model.fabric, model.config, expanded, opts);
    sim.inject(model.fabric, model.faults, opts.seed);
    sim.run(progress);
    collect(model, expanded, &sim)
}

/// Applies `nic_funnel` faults: every flow from or to a NIC of the target's host uses the
/// target NIC instead (the application picked one NIC for all its GPUs).
fn funnel(fabric: &xirang_fabric::model::Fabric, faults: &[ResolvedFault], ex: &mut workload::Expanded) {
    use xirang_fabric::model::Node;
    for f in faults.iter().filter(|f| f.fault.kind == FaultKind::NicFunnel) {
        let FaultTarget::Port(p) = f.target else {
            continue;
        };
        let Node::Nic(nic) = p.node else {
            continue;
        };
        let host = fabric.nics[nic.index()].host;
        let on_host = |n: xirang_fabric::model::NicId| fabric.nics[n.index()].host == host;
        // Collectives apply it to each transfer as they create it.
        for c in &mut ex.collectives {
            c.funnel.push(nic);
        }
        for d in ex.flows.iter_mut() {
            // Traffic between two NICs of the host itself is left alone: funnelled, it
            // would go from the NIC to itself.
            match (on_host(d.src), on_host(d.dst)) {
                (true, false) => d.src = nic,
                (false, true) => d.dst = nic,
                _ => {}
            }
        }
    }
}

/// Applies `single_qp` faults: every connection of the named workload is one QP.
fn single_qp(faults: &[ResolvedFault], ex: &mut workload::Expanded) {
    for f in faults.iter().filter(|f| f.fault.kind == FaultKind::SingleQp) {
        let FaultTarget::Workload(name) = &f.target else {
            continue;
        };
        let Some(w) = ex.workload_ids.iter().position(|id| id == name) else {
            continue;
        };
        for d in ex.flows.iter_mut().filter(|d| usize::from(d.workload) == w) {
            d.qps = Some(1);
        }
        for c in ex.collectives.iter_mut().filter(|c| usize::from(c.workload) == w) {
            c.qps = Some(1);
        }
    }
}

/// The run's results from a finished engine.
fn collect<Q: queue::Queue>(model: Model<'_>, ex: &workload::Expanded, sim: &Sim<Q>) -> RunResult {
    let flows = flow_results(model, ex, sim);
    let mut pfc = sim.stats.pfc_log().to_vec();
    // Port by port within an instant: the order of devices at one instant is the
    // engine's business, and a parallel run gathers each port's events from where it ran.
    pfc.sort_by_key(|e| (e.time, e.at_switch, e.node_id, e.ifindex));
    let queue_series = sim
        .stats
        .samples()
        .queues
        .iter()
        .map(|(t, p, prio, b)| (*t, sim.fab.port_name(*p).to_string(), *prio, *b))
        .collect();
    RunResult {
        engine: engine_stats(sim),
        flows,
        requests: request_results(ex, sim),
        collectives: collective_results(ex, sim),
        counters: sim.named_counters(),
        pfc,
        stats: run_stats(sim),
        rate_series: rate_series(ex, sim),
        queue_series,
        counter_series: counter_series(sim),
        skipped: ex.skipped.clone(),
        priorities_with_pfc: sim.fab.net().pfc_prios.clone(),
        moe: serving::moe_results(ex, sim),
        kv: serving::kv_results(ex, sim),
    }
}

/// The answered requests of inference workloads.
fn request_results<Q: queue::Queue>(ex: &workload::Expanded, sim: &Sim<Q>) -> Vec<RequestResult> {
    let id_of = |i: u32| ex.flows[i as usize].id;
    ex.requests
        .iter()
        .map(|r| {
            let req = sim.work.flow(FlowId(r.request));
            let resp = sim.work.flow(FlowId(r.response));
            RequestResult {
                workload: ex.workloads[r.workload as usize].clone(),
                class: ex.flows[r.request as usize].class.clone(),
                request: id_of(r.request),
                response: id_of(r.response),
                latency_ps: match (req.started, resp.rx.rx_done) {
                    (Some(s), Some(e)) => Some(e - s),
                    _ => None,
                },
            }
        })
        .collect()
}

/// Every flow's result, a recorded collective's transfers among them, in id order.
fn flow_results<Q: queue::Queue>(model: Model<'_>, ex: &workload::Expanded, sim: &Sim<Q>) -> Vec<FlowResult> {
    let fabric = model.fabric;
    let port_name = |pi: PortId| sim.fab.port_name(pi).to_string();
    let originals = sim.faults.failover_originals();
    let route_names = |qp: QpId| {
        sim.route_as_computed(sim.xport.tx(qp).route, &originals)
            .into_iter()
            .map(port_name)
            .collect::<Vec<_>>()
    };
    let mut flows: Vec<FlowResult> = ex
        .flows
        .iter()
        .enumerate()
        .filter(|(_, d)| !d.marker)
        .map(|(i, d)| {
            let f = sim.work.flow(FlowId::from(i));
            let q0 = (f.tx.n_qps > 0).then(|| sim.xport.tx(QpId(f.tx.first_qp)));
            let start = f.started.unwrap_or(d.start);
            FlowResult {
                id: d.id,
                workload: ex.workloads[d.workload as usize].clone(),
                class: d.class.clone(),
                src: workload::nic_name(fabric, d.src),
                dst: workload::nic_name(fabric, d.dst),
                src_node: sim.fab.nic(d.src.index()).node_id,
                dst_node: sim.fab.nic(d.dst.index()).node_id,
                sport: q0.map_or(0, |q| q.sport),
                dport: q0.map_or(0, |q| q.dport),
                bytes: d.bytes,
                start_ps: start + d.time_offset,
                fct_ps: f.tx.finish.map(|t| t - start),
                failed: f.tx.failed,
                rx_done_ps: f.rx.rx_done.map(|t| t - start),
                ideal_ps: f.ideal,
                lower_bound_ps: f.lower_bound,
                bytes_received: if f.local.is_some() {
                    if f.rx.rx_done.is_some() { d.bytes } else { 0 }
                } else {
                    f.qp_ids().map(|q| sim.qp_received_bytes(q)).sum()
                },
                in_collective: false,
                nvlink: f.local.is_some(),
                path: if f.local.is_some() {
                    Vec::new()
                } else {
                    route_names(QpId(f.tx.first_qp))
                },
            }
        })
        .collect();
    flows.extend(collective_flows(model, ex, sim));
    // Every flow in id order, a recorded collective's transfers among the others.
    flows.sort_by_key(|f| f.id);
    flows
}

/// Each collective's result.
fn collective_results<Q: queue::Queue>(
    ex: &workload::Expanded,
    sim: &Sim<Q>,
) -> Vec<output::CollectiveResult> {
    sim.work
        .colls()
        .iter()
        .map(|rt| {
            let c = &rt.run;
            let transfers = c.per_iteration * u64::from(c.iterations);
            let last = rt.iter_end.last().copied().flatten();
            let finished = !rt.failed
                && transfers > 0
                && rt.arrived == transfers
                && rt.iter_done.last().is_some_and(|d| *d == c.ranks);
            // From the collective's start to the end of its last iteration on its last rank.
            let total = finished.then(|| last.unwrap_or(c.start) - c.start);
            let time = total.map(|t| t / time::Ps::from(c.iterations));
            let algbw = time.map(|t| c.bytes as f64 / (t as f64 / 1e12) / 1e9);
            output::CollectiveResult {
                workload: ex.workloads[c.workload as usize].clone(),
                class: c.class.clone(),
                op: serde_name(&c.op),
                algorithm: serde_name(&c.algorithm),
                protocol: c.proto.nccl_name().to_string(),
                channels: c.program.channels(),
                comm_channels: c.comm_channels,
                choice: c.choice.clone(),
                ranks: c.ranks,
                hosts: c.host_names.clone(),
                ranks_per_host: {
                    let mut n = vec![0u32; c.host_names.len()];
                    for &h in &c.rank_host {
                        n[h as usize] += 1;
                    }
                    n
                },
                bytes: c.bytes,
                iterations: c.iterations,
                finished,
                total_ps: total,
                time_ps: time,
                algbw_gbs: algbw,
                busbw_gbs: algbw.map(|a| a * xirang_collective::schedule::bus_factor(c.op, c.ranks)),
                iteration_end_ps: rt.iter_end.iter().map(|e| e.map(|e| e - c.start)).collect(),
                transfers,
                transfers_arrived: rt.arrived,
                transfers_recorded: rt.records.is_some(),
            }
        })
        .collect()
}

/// The run's totals and what was still in flight at its end.
fn run_stats<Q: queue::Queue>(sim: &Sim<Q>) -> RunStats {
    let (n, bytes, data, int_packets) = sim.in_flight();
    RunStats {
        sim_time_ps: sim.now(),
        events: sim.stats.events(),
        packet_hops: sim.stats.packet_hops(),
        stray_packets: sim.xport.stray(),
        qps_failed: sim.xport.failed(),
        packets_in_flight_at_end: n,
        bytes_in_flight_at_end: bytes,
        data_bytes_in_flight_at_end: data,
        int_packets_at_end: int_packets,
        int_records_at_end: sim.cc.ints().live(),
        ledger: *sim.stats.ledger(),
    }
}

/// The QP rate samples, by flow id.
fn rate_series<Q: queue::Queue>(ex: &workload::Expanded, sim: &Sim<Q>) -> Vec<(time::Ps, u64, u32, f64)> {
    let mut rate_series: Vec<(time::Ps, u64, u32, f64)> = sim
        .stats
        .samples()
        .rates
        .iter()
        .map(|&(t, of, qp, r)| {
            let id = match of {
                engine::sampling::RateOf::Flow(i) => ex.flows[i as usize].id,
                engine::sampling::RateOf::Transfer {
                    coll,
                    iteration,
                    index,
                } => {
                    let run = &sim.work.coll(coll as usize).run;
                    run.first_id + u64::from(iteration) * run.per_iteration + index
                }
            };
            (t, id, qp, r)
        })
        .collect();
    // By flow, as a run divided among partitions would gather them.
    rate_series.sort_by_key(|&(t, id, qp, _)| (t, id, qp));
    rate_series
}

/// The sampled counters, by port or queue name.
fn counter_series<Q: queue::Queue>(sim: &Sim<Q>) -> Vec<(time::Ps, counters::CounterValue)> {
    sim.stats
        .samples()
        .counters
        .iter()
        .map(|&(t, p, scope, name, value)| {
            let entity = match scope {
                counters::Scope::Port => sim.fab.port_name(p).to_string(),
                counters::Scope::Queue(q) => format!("{}/q{q}", sim.fab.port_name(p)),
            };
            (
                t,
                counters::CounterValue {
                    entity,
                    name: name.render(),
                    value,
                },
            )
        })
        .collect()
}

/// What the engine itself used.
fn engine_stats<Q: queue::Queue>(sim: &Sim<Q>) -> output::EngineStats {
    output::EngineStats {
        peak_packets: sim.peak_live_packets(),
        packet_ring_bytes: sim.packet_ring_bytes(),
        peak_events_pending: sim.peak_events_pending(),
        peak_transfers_in_flight: sim.work.peak_live_transfers(),
        peak_transfer_qps: sim
            .work
            .conns()
            .iter()
            .filter_map(|k| k.net.as_ref())
            .map(|n| (n.qps.end - n.qps.start) as usize + 1)
            .sum(),
        peak_slices_outstanding: sim.work.peak_slices_outstanding(),
        steady: sim.stats.steady_report(),
        fast_forward: sim.ff.report(sim.now()),
    }
}

/// The transfers of the collectives that record them, as flows: those that finished as
/// they were reported, those under way as they are now, those never started with their
/// collective's start time.
fn collective_flows<Q: queue::Queue>(
    model: Model<'_>,
    ex: &workload::Expanded,
    sim: &Sim<Q>,
) -> Vec<FlowResult> {
    let fabric = model.fabric;
    let mut out = Vec::new();
    let originals = sim.faults.failover_originals();
    for rt in sim.work.colls() {
        let Some(records) = &rt.records else { continue };
        let c = &rt.run;
        let class = &c.class;
        let workload = &ex.workloads[c.workload as usize];
        engine::collective::for_each_transfer(c, &mut |index, channel, a, b, bytes| {
            let (src, dst) = c.nics(fabric, channel, a, b);
            let conn = sim.work.conn(rt.conns.get(channel, a, b) as usize);
            let q0 = engine::collective::conn_qps(conn).map(|q| sim.xport.tx(q.start));
            for it in 0..c.iterations {
                let slot = (u64::from(it) * c.per_iteration + index) as usize;
                let rec = records[slot].clone();
                let (ideal, lower_bound) = match (&rec, &conn.net) {
                    (Some(r), _) if r.ideal > 0 => (r.ideal, r.lower_bound),
                    (_, Some(n)) => n.path.fct(bytes, n.mtu, sim.fab.net().header_bytes),
                    (_, None) => (0, 0),
                };
                let start = rec.as_ref().and_then(|r| r.start).unwrap_or(c.start);
                out.push(FlowResult {
                    id: c.first_id + slot as u64,
                    workload: workload.clone(),
                    class: class.clone(),
                    src: workload::nic_name(fabric, src),
                    dst: workload::nic_name(fabric, dst),
                    src_node: sim.fab.nic(src.index()).node_id,
                    dst_node: sim.fab.nic(dst.index()).node_id,
                    sport: q0.map_or(0, |q| q.sport),
                    dport: q0.map_or(0, |q| q.dport),
                    bytes,
                    start_ps: start,
                    fct_ps: rec.as_ref().and_then(|r| r.finish).map(|t| t - start),
                    // A collective's failed transfer shows as the collective unfinished.
                    failed: false,
                    rx_done_ps: rec.as_ref().and_then(|r| r.rx_done).map(|t| t - start),
                    ideal_ps: ideal,
                    lower_bound_ps: lower_bound,
                    bytes_received: rec.as_ref().map_or(0, |r| r.bytes_received),
                    in_collective: true,
                    nvlink: conn.net.is_none(),
                    path: q0.map_or_else(Vec::new, |q| {
                        sim.route_as_computed(q.route, &originals)
                            .into_iter()
                            .map(|p| sim.fab.port_name(p).to_string())
                            .collect()
                    }),
                });
            }
        });
    }
    out
}

/// A value's name as scenario files spell it (the serde name of an enum variant).
fn serde_name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
