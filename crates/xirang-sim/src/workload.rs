//! Turns a scenario's workload declarations into concrete flows.
//!
//! Every random choice (incast senders, permutation, request arrivals and sizes) draws from
//! a stream derived from the run seed and the workload's position, so a workload's flows
//! do not change when another workload is added.

use std::collections::BTreeMap;
use std::sync::Arc;

use xirang_collective::cost::{self, Algo, Coll, Platform, Proto};
use xirang_collective::program::{self, Buffers, Program};
use xirang_collective::schedule::{CollectiveAlgorithm, CollectiveOp};
use xirang_fabric::built::{CollectiveEnds, Ends, Model, WorkloadId};
use xirang_fabric::model::{Fabric, Host, NicId, Node};
use xirang_fabric::workload::{SizeDist, Workload};

use crate::rng::{Purpose, Stream};
use crate::time::{Ps, us};

/// One message from one NIC to another.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowDef {
    /// Its id in results (`FlowResult::id`): flows are numbered in workload order, and a
    /// collective takes one id per transfer of every iteration whether its transfers are
    /// recorded or not, so a flow keeps its id when a collective before it grows.
    pub id: u64,
    /// Index of the workload in [`Expanded::workloads`].
    pub workload: u16,
    /// Traffic class name.
    pub class: String,
    /// Sending NIC.
    pub src: NicId,
    /// Receiving NIC.
    pub dst: NicId,
    /// Message size.
    pub bytes: u64,
    /// Earliest start.
    pub start: Ps,
    /// Priority (the class's unless overridden).
    pub prio: Option<u8>,
    /// Flows whose data must have fully arrived before this one starts.
    pub after: Vec<u32>,
    /// Extra delay after the last of `after` arrived (server think time).
    pub after_delay: Ps,
    /// QPs of this connection, when a fault overrides `transport.qps_per_connection`
    /// (`single_qp`).
    pub qps: Option<u32>,
    /// Source port for HPCC-format flows (others get theirs from the ECMP mode).
    pub hpcc_ports: Option<(u16, u16)>,
    /// Added to start times in outputs, so HPCC flow files keep their absolute times.
    pub time_offset: Ps,
    /// A transfer between GPUs of one host, over NVLink: it takes this long and uses no
    /// network port (`src` and `dst` are then the hosts' NICs, for naming only).
    pub local: Option<Ps>,
    /// A zero-byte point where a GPU has every message it waits for (a serving
    /// workload's phase boundary, `serving`): it takes no result id and is left out of the
    /// run's flow results.
    pub marker: bool,
}

/// Where a collective's algorithm, protocol or channel count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Chosen {
    /// The workload sets it.
    Workload,
    /// `[config.nccl]` sets it (`algo`, `proto`, `min_channels`/`max_channels`).
    Config,
    /// NCCL's choice: its tuner's cost model (`xirang_collective::cost`), or its channel
    /// count (two per NIC).
    Nccl,
}

/// How a collective is run, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NcclChoice {
    /// Where the algorithm came from.
    pub algorithm: Chosen,
    /// Where the protocol came from.
    pub protocol: Chosen,
    /// Where the communicator's channel count came from.
    pub channels: Chosen,
    /// What NCCL's tuner picks when it differs from what is simulated (`NVLSTree/Simple`:
    /// NVLink SHARP is not modelled, its tree between hosts is simulated instead).
    pub nccl_pick: Option<String>,
}

/// What a GPU thread's slices cost, and the proxy's actions
/// (`engine::collective`, `engine::transport`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuCosts {
    /// Latency of one slice on the GPU.
    pub slice: Ps,
    /// The protocol's per-channel rate, bit/s (0: none in NCCL's tables).
    pub rate_bps: f64,
    /// Kernel time before a primitive that received (the workload's `step_us`).
    pub step: Ps,
    /// A rank's kernel's fixed cost at the start of each call.
    pub base: Ps,
    /// The proxy's overhead per action.
    pub proxy: Ps,
    /// The flush before a Simple slice is visible (0: none).
    pub flush: Ps,
    /// One GPU's NVLink bandwidth NCCL can use, bit/s, shared by its channels.
    pub nvlink_bps: f64,
}

/// A collective workload, run as NCCL's kernels and proxies run it
/// (`xirang_collective::program`, `engine::collective`, `engine::transport`): its ranks,
/// how they map to hosts and NICs, its program, and what slices cost.
#[derive(Debug, Clone)]
pub struct CollectiveRun {
    /// Workload index.
    pub workload: u16,
    /// The operation.
    pub op: CollectiveOp,
    /// The algorithm simulated.
    pub algorithm: CollectiveAlgorithm,
    /// The protocol.
    pub proto: Proto,
    /// The communicator's channels (the program may use fewer).
    pub comm_channels: u32,
    /// Where the algorithm, protocol and channels came from.
    pub choice: NcclChoice,
    /// Ranks (GPUs).
    pub ranks: u32,
    /// Buffer bytes.
    pub bytes: u64,
    /// Repetitions.
    pub iterations: u32,
    /// The per-(channel, rank) threads of primitives.
    pub program: Arc<dyn Program>,
    /// Transfers per iteration (primitives' chunks on connections).
    pub per_iteration: u64,
    /// Result id of iteration 0's transfer 0; transfer t of iteration i has id
    /// `first_id + i * per_iteration + t`.
    pub first_id: u64,
    /// Traffic class.
    pub class: String,
    /// When the first iteration starts.
    pub start: Ps,
    /// What slices and proxy actions cost.
    pub gpu: GpuCosts,
    /// Index in [`CollectiveRun::host_nics`] of each rank's host.
    pub rank_host: Vec<u32>,
    /// The NICs of each participating host.
    pub host_nics: Vec<Vec<NicId>>,
    /// The participating hosts' names, in rank order (for reports; the run uses ids).
    pub host_names: Vec<String>,
    /// The hierarchical algorithm: the NIC under each rank's GPU (None for a rank on a host
    /// without GPUs, which uses its channel's rail). Empty for the other algorithms.
    pub rank_nic: Vec<Option<NicId>>,
    /// QPs per connection when a `single_qp` fault overrides the configuration.
    pub qps: Option<u32>,
    /// `nic_funnel` faults, in order: traffic between a host and other hosts goes through
    /// this NIC of the host.
    pub funnel: Vec<NicId>,
    /// Messages are cut over every QP of a connection (`NCCL_IB_SPLIT_DATA_ON_QPS`).
    pub split_data: bool,
    /// The priority of the clear-to-send writes (None: the data's).
    pub fifo_prio: Option<u8>,
    /// How many times longer each rank's GPU takes per slice (1: as fast as the others;
    /// the workload's `stragglers`).
    pub rank_slowdown: Vec<f64>,
}

impl CollectiveRun {
    /// Both ranks on one host: their connection is NVLink.
    pub fn same_host(&self, a: u32, b: u32) -> bool {
        self.rank_host[a as usize] == self.rank_host[b as usize]
    }

    /// The (sending, receiving) NICs of a connection on `channel`: NIC `channel mod nics`
    /// of each host (NCCL keeps a channel on one rail), or the NIC under each rank's GPU for
    /// the hierarchical algorithm; then the `nic_funnel` faults.
    pub fn nics(&self, fabric: &Fabric, channel: u32, src: u32, dst: u32) -> (NicId, NicId) {
        let nic = |r: u32| match self.rank_nic.get(r as usize).copied().flatten() {
            Some(n) => n,
            None => {
                let h = &self.host_nics[self.rank_host[r as usize] as usize];
                h[channel as usize % h.len()]
            }
        };
        let (mut a, mut b) = (nic(src), nic(dst));
        for &f in &self.funnel {
            let host = fabric.nics[f.index()].host;
            let on = |n: NicId| fabric.nics[n.index()].host == host;
            match (on(a), on(b)) {
                (true, false) => a = f,
                (false, true) => b = f,
                _ => {}
            }
        }
        (a, b)
    }

    /// Every transfer of one iteration with its NICs: (sending NIC, receiving NIC, bytes,
    /// over NVLink), in result order. Takes time in proportion to the schedule.
    pub fn for_each_transfer(&self, fabric: &Fabric, f: &mut dyn FnMut(NicId, NicId, u64, bool)) {
        crate::engine::collective::for_each_transfer(self, &mut |_, c, a, b, bytes| {
            let (x, y) = self.nics(fabric, c, a, b);
            f(x, y, bytes, self.same_host(a, b));
        });
    }

    /// The algorithm and protocol, as NCCL names them (`Ring/Simple`).
    pub fn nccl_name(&self) -> String {
        let algo = match self.algorithm {
            CollectiveAlgorithm::Ring => "Ring",
            CollectiveAlgorithm::Tree => "Tree",
            CollectiveAlgorithm::HalvingDoubling => "HalvingDoubling",
            CollectiveAlgorithm::Hierarchical => "Hierarchical",
        };
        format!("{algo}/{}", self.proto.nccl_name())
    }
}

/// A request/response pair of an inference workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Workload index.
    pub workload: u16,
    /// The request flow.
    pub request: u32,
    /// The response flow.
    pub response: u32,
}

/// The flows of all workloads.
#[derive(Debug, Clone, Default)]
pub struct Expanded {
    /// Workload names, in scenario order.
    pub workloads: Vec<String>,
    /// Each of [`Expanded::workloads`]' place in the scenario (what faults name).
    pub workload_ids: Vec<WorkloadId>,
    /// Flows.
    pub flows: Vec<FlowDef>,
    /// Inference requests.
    pub requests: Vec<Request>,
    /// Collectives.
    pub collectives: Vec<CollectiveRun>,
    /// Workloads that were not expanded, with the reason.
    pub skipped: Vec<(String, String)>,
    /// MoE workloads (`serving::expand_moe`).
    pub moe: Vec<crate::serving::MoeRun>,
    /// KV-transfer requests (`serving::expand_kv`).
    pub kv: Vec<crate::serving::KvRequest>,
    /// Every KV-transfer workload with its class, requests or none (a Poisson draw can
    /// make none: the workload still has its result, marked as transferring nothing).
    pub kv_workloads: Vec<(u16, String)>,
}

/// One transfer between two NICs, as [`Expanded::for_each_nic_transfer`] yields it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicTransfer {
    /// Workload index.
    pub workload: u16,
    /// Sending NIC.
    pub src: NicId,
    /// Receiving NIC.
    pub dst: NicId,
    /// Bytes of one transfer.
    pub bytes: u64,
    /// How many times it is made (a collective's iterations).
    pub repeat: u64,
    /// QPs of its connection.
    pub qps: u32,
}

impl Expanded {
    /// Every transfer that crosses a NIC (not NVLink inside a host, not a NIC to
    /// itself), flows first, then each collective's one iteration with its iteration
    /// count (every iteration moves the same bytes). `default_qps` is the scenario's
    /// `transport.qps_per_connection`, for workloads that do not set their own.
    pub fn for_each_nic_transfer(&self, fabric: &Fabric, default_qps: u32, f: &mut dyn FnMut(NicTransfer)) {
        for fl in self.flows.iter().filter(|f| f.local.is_none() && f.src != f.dst) {
            f(NicTransfer {
                workload: fl.workload,
                src: fl.src,
                dst: fl.dst,
                bytes: fl.bytes,
                repeat: 1,
                qps: fl.qps.unwrap_or(default_qps),
            });
        }
        for run in &self.collectives {
            let qps = run.qps.unwrap_or(default_qps);
            let repeat = u64::from(run.iterations);
            run.for_each_transfer(fabric, &mut |src, dst, bytes, local| {
                if !local && src != dst {
                    f(NicTransfer {
                        workload: run.workload,
                        src,
                        dst,
                        bytes,
                        repeat,
                        qps,
                    });
                }
            });
        }
    }
}

/// Expands every workload of a built scenario (its random streams keyed by the workload's
/// place in `model.workloads`).
pub fn expand(model: Model<'_>, seed: u64) -> Expanded {
    let fabric = model.fabric;
    let mut out = Expanded::default();
    let mut next_id = 0u64;
    for (wi, bw) in model.workloads.iter().enumerate() {
        let (name, w) = (&bw.name, &bw.spec);
        let widx = wi as u16;
        let first_flow = out.flows.len();
        out.workloads.push(name.clone());
        out.workload_ids.push(bw.id);
        let mut rng = Stream::new(seed, Purpose::Workload, wi as u64);
        let base = FlowDef {
            id: 0,
            workload: widx,
            class: w.class().to_string(),
            src: NicId(0),
            dst: NicId(0),
            bytes: 0,
            start: 0,
            prio: None,
            after: Vec::new(),
            after_delay: 0,
            qps: None,
            hpcc_ports: None,
            time_offset: 0,
            local: None,
            marker: false,
        };
        match (w, &bw.ends) {
            (Workload::Flows(f), Ends::Flows(ends)) => {
                let first = out.flows.len() as u32;
                for (x, e) in f.list.iter().zip(ends) {
                    out.flows.push(FlowDef {
                        class: x.class.clone().unwrap_or_else(|| f.class.clone()),
                        src: e.src,
                        dst: e.dst,
                        bytes: x.bytes,
                        start: us(x.start_us),
                        prio: x.priority,
                        after: e.after.iter().map(|a| first + a).collect(),
                        ..base.clone()
                    });
                }
            }
            (Workload::Incast(x), Ends::Incast { receiver, senders }) => {
                let dst = *receiver;
                let senders: Vec<NicId> = if senders.is_empty() {
                    pick_incast_senders(fabric, dst, x.senders.map_or(1, |c| c.get()) as usize, &mut rng)
                } else {
                    senders.clone()
                };
                for src in senders {
                    out.flows.push(FlowDef {
                        src,
                        dst,
                        bytes: x.bytes,
                        start: us(x.start_us),
                        ..base.clone()
                    });
                }
            }
            (Workload::Permutation(x), Ends::Hosts(eps)) => {
                // Sattolo's algorithm: a uniformly random cyclic permutation, so nobody sends
                // to itself.
                let mut perm: Vec<usize> = (0..eps.len()).collect();
                for i in (1..perm.len()).rev() {
                    let j = rng.below(i as u64) as usize;
                    perm.swap(i, j);
                }
                for (i, &j) in perm.iter().enumerate() {
                    if i != j {
                        out.flows.push(FlowDef {
                            src: eps[i],
                            dst: eps[j],
                            bytes: x.bytes,
                            start: us(x.start_us),
                            ..base.clone()
                        });
                    }
                }
            }
            (Workload::AllToAll(x), Ends::Hosts(eps)) => {
                for &s in eps {
                    for &d in eps {
                        if s != d {
                            out.flows.push(FlowDef {
                                src: s,
                                dst: d,
                                bytes: x.bytes,
                                start: us(x.start_us),
                                ..base.clone()
                            });
                        }
                    }
                }
            }
            (Workload::Inference(x), Ends::Inference { clients, servers }) => {
                expand_inference(fabric, x, clients, servers, &base, widx, &mut rng, &mut out);
            }
            (Workload::HpccFlows(h), Ends::Hpcc(lines)) => expand_hpcc(h, lines, &base, &mut out),
            (Workload::Collective(c), Ends::Collective(ends)) => {
                match expand_collective(model, c, ends, widx, next_id) {
                    Ok(run) => {
                        next_id += run.per_iteration * u64::from(run.iterations);
                        out.collectives.push(run);
                    }
                    Err(why) => out.skipped.push((name.clone(), why)),
                }
            }
            (Workload::Moe(x), Ends::Moe(hosts)) => {
                match crate::serving::expand_moe(
                    fabric,
                    model.config,
                    x,
                    hosts,
                    &base,
                    widx,
                    &mut rng,
                    &mut out,
                ) {
                    Ok(run) => out.moe.push(run),
                    Err(why) => out.skipped.push((name.clone(), why)),
                }
            }
            (Workload::KvTransfer(x), Ends::Kv { prefill, decode }) => {
                crate::serving::expand_kv(fabric, x, prefill, decode, &base, widx, &mut rng, &mut out);
            }
            // `Scenario::build` resolves each kind's own endpoints; a pair of another kind
            // would be a bug there, reported rather than guessed at.
            _ => out.skipped.push((
                name.clone(),
                format!("its endpoints were resolved for another kind than `{}`", w.kind()),
            )),
        }
        for f in &mut out.flows[first_flow..] {
            if f.marker {
                f.id = u64::MAX;
            } else {
                f.id = next_id;
                next_id += 1;
            }
        }
    }
    out
}

/// An HPCC flow file's flows, each keeping its own start time, priority and ports.
fn expand_hpcc(
    h: &xirang_fabric::workload::HpccFlowsSpec,
    lines: &[xirang_fabric::built::HpccEnds],
    base: &FlowDef,
    out: &mut Expanded,
) {
    let offset = us(h.time_offset_us);
    let mut pair_port: BTreeMap<(u32, u32), u16> = BTreeMap::new();
    for line in lines {
        let f = &line.flow;
        // The HPCC simulator numbers source ports per (src, dst) pair from 10000
        // (docs/hpcc-model.md §6).
        const HPCC_FIRST_SPORT: u16 = 10000;
        let sport = pair_port.entry((f.src, f.dst)).or_insert(HPCC_FIRST_SPORT);
        let this = *sport;
        *sport = sport.wrapping_add(1);
        out.flows.push(FlowDef {
            src: line.src,
            dst: line.dst,
            bytes: f.bytes,
            start: f.start_ps.saturating_sub(offset),
            prio: Some(f.pg),
            hpcc_ports: Some((this, f.dport)),
            time_offset: offset.min(f.start_ps),
            ..base.clone()
        });
    }
}

/// An inference workload's requests: each client sends requests at Poisson times to a
/// server drawn uniformly (or, with a local share, from its own leaf's or the others'),
/// and each answer leaves the server `service_us` after the request arrived.
#[allow(clippy::too_many_arguments)]
fn expand_inference(
    fabric: &xirang_fabric::model::Fabric,
    x: &xirang_fabric::workload::InferenceSpec,
    clients: &[NicId],
    servers: &[NicId],
    base: &FlowDef,
    widx: u16,
    rng: &mut Stream,
    out: &mut Expanded,
) {
    let mean_gap_us = 1e6 / x.requests_per_sec;
    let end = x.start_us + x.duration_us;
    for &c in clients {
        // With a local share, servers split by whether they share the
        // client's leaf; without one, one uniform draw (the draws of
        // scenarios without the key are unchanged).
        let groups = x.local_share.map(|share| {
            let leaf = |n: NicId| fabric.attached_switch(n, 0).map(|p| p.node);
            let (local, remote): (Vec<NicId>, Vec<NicId>) =
                servers.iter().partition(|&&s| leaf(s) == leaf(c));
            (share, local, remote)
        });
        let mut t = x.start_us + rng.exponential(mean_gap_us);
        while t < end {
            let s = match &groups {
                None => servers[rng.below(servers.len() as u64) as usize],
                Some((share, local, remote)) => {
                    let pick_local = if local.is_empty() {
                        false
                    } else if remote.is_empty() {
                        true
                    } else {
                        rng.uniform() < *share
                    };
                    let g = if pick_local { local } else { remote };
                    g[rng.below(g.len() as u64) as usize]
                }
            };
            let req_bytes = sample_size(&x.request, rng);
            let resp_bytes = sample_size(&x.response, rng);
            let req = out.flows.len() as u32;
            out.flows.push(FlowDef {
                src: c,
                dst: s,
                bytes: req_bytes,
                start: us(t),
                ..base.clone()
            });
            out.flows.push(FlowDef {
                src: s,
                dst: c,
                bytes: resp_bytes,
                start: us(t),
                after: vec![req],
                after_delay: us(x.service_us),
                ..base.clone()
            });
            out.requests.push(Request {
                workload: widx,
                request: req,
                response: req + 1,
            });
            t += rng.exponential(mean_gap_us);
        }
    }
}

/// Prepares a collective: ranks are the GPUs of the listed hosts (host by host, GPU by
/// GPU); connections between GPUs of one host are NVLink; between hosts they go NIC to
/// NIC on the channel's rail (NIC `channel mod nics` on both hosts, as NCCL keeps a
/// channel on one rail), or, for the hierarchical algorithm, between the NICs under the
/// two GPUs' own PCIe switches. NCCL also rotates each channel's ring so that the GPU at a
/// host boundary is the one under that rail's NIC; the programs keep one ring order for
/// all channels, which changes nothing here because the simulator does not model the PCIe
/// hop between a GPU and its NIC (the rail choice alone decides the network traffic).
fn expand_collective(
    model: Model<'_>,
    c: &xirang_fabric::workload::CollectiveSpec,
    ends: &CollectiveEnds,
    workload: u16,
    first_id: u64,
) -> Result<CollectiveRun, String> {
    let fabric = model.fabric;
    let config = model.config;
    let hosts: Vec<&Host> = ends.hosts.iter().map(|h| &fabric.hosts[h.index()]).collect();
    let mut rank_host = Vec::new();
    let mut gpus = Vec::new();
    for (hi, h) in hosts.iter().enumerate() {
        if h.nics.is_empty() {
            return Err(format!("host `{}` has no NIC", h.name));
        }
        // A host without GPUs is one rank on its NIC.
        for g in 0..h.gpus.len().max(1) {
            rank_host.push(hi as u32);
            gpus.push(h.gpus.get(g).copied());
        }
    }
    let per_host = hosts.iter().map(|h| h.gpus.len().max(1)).collect::<Vec<_>>();
    let uniform = per_host.iter().all(|x| *x == per_host[0]);
    let n = rank_host.len() as u32;
    let choice = nccl_choice(model, c, &hosts, n)?;
    let (algorithm, proto, comm_channels, picked) = choice;
    if algorithm == CollectiveAlgorithm::Hierarchical && !uniform {
        return Err("the hierarchical algorithm needs the same number of GPUs on every host".to_string());
    }
    // Programs cut ranks into hosts of equal size; with uneven hosts (only the ring and
    // point-to-point programs, which do not look at hosts) each rank counts as its own.
    let ranks_per_host = if uniform { per_host[0] as u32 } else { 1 };
    let nccl = &config.nccl;
    let buffers = Buffers {
        simple_bytes: nccl.buffsize_bytes,
        ll_bytes: nccl.ll_buffsize_bytes,
        ll128_bytes: nccl.ll128_buffsize_bytes,
        p2p_net_chunk_bytes: nccl.p2p_net_chunk_bytes,
        ..Buffers::default()
    };
    let spec = program::Spec {
        op: c.op,
        algorithm,
        proto,
        ranks: n,
        ranks_per_host,
        bytes: c.bytes,
        channels: program::nccl_channels(algorithm, proto, n, c.bytes, comm_channels),
        buffers,
    };
    let prog: Arc<dyn Program> = Arc::from(program::build(&spec)?);
    let mut per_iteration = 0;
    prog.connections(&mut |_, _, _, k, _| per_iteration += k);
    let rank_nic = if algorithm == CollectiveAlgorithm::Hierarchical {
        gpus.iter()
            .map(|g| g.map(|g| fabric.nic_for_gpu(g).expect("hosts have NICs")))
            .collect()
    } else {
        Vec::new()
    };
    let platform = Platform::of_hosts(fabric, config, &hosts, comm_channels)
        .ok_or_else(|| "the collective has no hosts".to_string())?;
    let rank_slowdown = rank_host.iter().map(|&h| ends.slowdown[h as usize]).collect();
    Ok(CollectiveRun {
        workload,
        op: c.op,
        algorithm,
        proto,
        comm_channels,
        choice: picked,
        ranks: n,
        bytes: c.bytes,
        iterations: c.iterations,
        gpu: gpu_costs(config, &platform, algorithm, proto, c.step_us),
        program: prog,
        per_iteration,
        first_id,
        class: c.class.clone(),
        start: us(c.start_us),
        rank_host,
        host_nics: hosts.iter().map(|h| h.nics.clone()).collect(),
        host_names: hosts.iter().map(|h| h.name.clone()).collect(),
        rank_nic,
        qps: None,
        funnel: Vec::new(),
        split_data: nccl.ib_split_data_on_qps,
        fifo_prio: nccl.fifo_priority,
        rank_slowdown,
    })
}

/// The algorithm, protocol and communicator channels a collective runs with: the
/// workload's, else `[config.nccl]`'s, else NCCL's own choice (its tuner's cost model over
/// the collective's hosts, one source of truth with `xirang nccl advise`; two channels per
/// NIC). NVLink SHARP (NVLS, NVLSTree) is not simulated: where NCCL's tuner picks it, the
/// ring (one host) or the tree (between hosts) runs instead, and the choice says so.
fn nccl_choice(
    model: Model<'_>,
    c: &xirang_fabric::workload::CollectiveSpec,
    hosts: &[&Host],
    ranks: u32,
) -> Result<(CollectiveAlgorithm, Proto, u32, NcclChoice), String> {
    use xirang_fabric::config::{NcclAlgo, NcclProto};
    let config = model.config;
    let nccl = &config.nccl;
    let clamp = |x: u32| {
        let lo = if nccl.min_channels > 0 {
            nccl.min_channels
        } else {
            1
        };
        let hi = if nccl.max_channels > 0 {
            nccl.max_channels
        } else {
            xirang_fabric::config::NCCL_MAX_CHANNELS
        };
        x.clamp(lo, hi.max(lo))
    };
    let platform = Platform::of_hosts(model.fabric, config, hosts, c.channels.unwrap_or(0))
        .ok_or_else(|| "the collective has no hosts".to_string())?;
    let (comm_channels, ch_from) = match c.channels {
        Some(ch) => (ch, Chosen::Workload),
        None if nccl.min_channels > 0 || nccl.max_channels > 0 => (clamp(platform.channels), Chosen::Config),
        None => (platform.channels, Chosen::Nccl),
    };
    let platform = Platform {
        channels: comm_channels,
        ..platform
    };
    let coll = Coll::of_op(c.op);
    let p2p = matches!(c.op, CollectiveOp::AllToAll | CollectiveOp::SendRecv);
    let fixed_proto = |p: NcclProto| match p {
        NcclProto::Auto => None,
        NcclProto::Ll => Some(Proto::Ll),
        NcclProto::Ll128 => Some(Proto::Ll128),
        NcclProto::Simple => Some(Proto::Simple),
    };
    let (want_proto, proto_from) = match (c.protocol.and_then(fixed_proto), fixed_proto(nccl.proto)) {
        (Some(p), _) => (Some(p), Chosen::Workload),
        (None, Some(p)) => (Some(p), Chosen::Config),
        (None, None) => (None, Chosen::Nccl),
    };
    // NCCL's tuner over what it may choose from.
    let best = |algos: &[Algo], proto: Option<Proto>| {
        cost::all(coll, c.bytes, &platform)
            .into_iter()
            .filter(|x| algos.contains(&x.algo) && proto.is_none_or(|p| p == x.proto))
            .min_by(|a, b| a.time_us.total_cmp(&b.time_us))
    };
    let (algorithm, algo_from, pick) = match (c.algorithm, nccl.algo) {
        (Some(a), _) => (a, Chosen::Workload, None),
        (None, NcclAlgo::Ring) => (CollectiveAlgorithm::Ring, Chosen::Config, None),
        (None, NcclAlgo::Tree) if coll == Coll::AllReduce => {
            (CollectiveAlgorithm::Tree, Chosen::Config, None)
        }
        (None, _) if coll != Coll::AllReduce => (CollectiveAlgorithm::Ring, Chosen::Nccl, None),
        (None, _) => {
            let b = best(&[Algo::Ring, Algo::Tree, Algo::Nvls, Algo::NvlsTree], want_proto);
            let a = match b.map(|x| x.algo) {
                Some(Algo::Tree | Algo::NvlsTree) if platform.nodes > 1 => CollectiveAlgorithm::Tree,
                _ => CollectiveAlgorithm::Ring,
            };
            (a, Chosen::Nccl, b)
        }
    };
    let as_algo = match algorithm {
        CollectiveAlgorithm::Tree => Algo::Tree,
        _ => Algo::Ring,
    };
    // NVLink SHARP runs only Simple: where NCCL's tuner picks NVLS or NVLSTree, the ring
    // or tree simulated instead runs Simple too.
    let nvls_pick = pick.is_some_and(|x| matches!(x.algo, Algo::Nvls | Algo::NvlsTree));
    let proto = if nvls_pick && want_proto.is_none() {
        Proto::Simple
    } else if p2p
        || matches!(
            algorithm,
            CollectiveAlgorithm::HalvingDoubling | CollectiveAlgorithm::Hierarchical
        )
    {
        // Point-to-point operations run Simple; the two algorithms NCCL does not have
        // are given its bulk protocol.
        want_proto.unwrap_or(Proto::Simple)
    } else {
        match want_proto {
            Some(p) => p,
            None => best(&[as_algo], None).map_or(Proto::Simple, |x| x.proto),
        }
    };
    let nccl_pick = pick
        .filter(|x| matches!(x.algo, Algo::Nvls | Algo::NvlsTree))
        .map(|x| format!("{}/{}", x.algo.nccl_name(), x.proto.nccl_name()));
    let _ = ranks;
    Ok((
        algorithm,
        proto,
        comm_channels,
        NcclChoice {
            algorithm: algo_from,
            protocol: if p2p { Chosen::Nccl } else { proto_from },
            channels: ch_from,
            nccl_pick,
        },
    ))
}

/// What a collective's slices cost on `platform` under `config` (see [`GpuCosts`]).
fn gpu_costs(
    config: &xirang_fabric::config::FabricConfig,
    platform: &Platform,
    algorithm: CollectiveAlgorithm,
    proto: Proto,
    step_us: f64,
) -> GpuCosts {
    use xirang_fabric::config::GdrFlush;
    let nccl = &config.nccl;
    let slice_us = match proto {
        Proto::Ll => nccl.ll_slice_us,
        Proto::Ll128 => nccl.ll128_slice_us,
        Proto::Simple => nccl.simple_slice_us,
    };
    let algo = match algorithm {
        CollectiveAlgorithm::Tree => Algo::Tree,
        _ => Algo::Ring,
    };
    let cap_gbs = cost::channel_cap_gbs(algo, proto, platform);
    // The tuner triples the proxy's overhead for Simple (docs/reference/nccl-transport-details.md §10).
    const SIMPLE_OVERHEAD_FACTOR: f64 = 3.0;
    let proxy_us = nccl.net_overhead_us
        * if proto == Proto::Simple {
            SIMPLE_OVERHEAD_FACTOR
        } else {
            1.0
        };
    let flush = match nccl.gdr_flush {
        GdrFlush::On => true,
        GdrFlush::Off => false,
        GdrFlush::Auto => !matches!(
            platform.generation,
            cost::GpuGen::Hopper | cost::GpuGen::Blackwell
        ),
    } && proto == Proto::Simple;
    let base_us = nccl.base_latency_us.unwrap_or_else(|| {
        let a = usize::from(algorithm != CollectiveAlgorithm::Tree);
        xirang_fabric::config::NCCL_BASE_LATENCY_US[a][proto.table_index()]
    });
    GpuCosts {
        base: us(base_us),
        slice: us(slice_us),
        rate_bps: cap_gbs.map_or(0.0, |g| g * 8e9),
        step: us(step_us),
        proxy: us(proxy_us),
        flush: if flush { us(nccl.flush_us) } else { 0 },
        // The share of NVLink NCCL counts (`cost::NVLINK_EFFICIENCY`).
        nvlink_bps: config.intra_host.nvlink_gbps * 1e9 * cost::NVLINK_EFFICIENCY,
    }
}

/// `n` senders, preferring hosts not under the receiver's leaf, chosen at random.
fn pick_incast_senders(fabric: &Fabric, dst: NicId, n: usize, rng: &mut Stream) -> Vec<NicId> {
    let leaf_of = |nic: NicId| fabric.attached_switch(nic, 0).map(|p| p.node);
    let dst_leaf = leaf_of(dst);
    let dst_host = fabric.nics[dst.index()].host;
    let mut far = Vec::new();
    let mut near = Vec::new();
    for h in &fabric.hosts {
        let Some(&nic) = h.nics.first() else { continue };
        if fabric.nics[nic.index()].host == dst_host {
            continue;
        }
        if leaf_of(nic).is_some() && leaf_of(nic) != dst_leaf {
            far.push(nic);
        } else {
            near.push(nic);
        }
    }
    shuffle(&mut far, rng);
    shuffle(&mut near, rng);
    far.into_iter().chain(near).take(n).collect()
}

fn shuffle<T>(v: &mut [T], rng: &mut Stream) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// Draws a size from a distribution.
pub fn sample_size(d: &SizeDist, rng: &mut Stream) -> u64 {
    match d {
        SizeDist::Fixed(b) => *b,
        SizeDist::Uniform { min_bytes, max_bytes } => min_bytes + rng.below(max_bytes - min_bytes + 1),
        SizeDist::Cdf(points) => {
            let u = rng.uniform();
            let mut prev = (0u64, 0.0f64);
            for &(b, p) in points {
                if u <= p {
                    // Linear interpolation inside the step, as the HPCC traffic generator does.
                    let span = p - prev.1;
                    let frac = if span > 0.0 { (u - prev.1) / span } else { 1.0 };
                    return (prev.0 as f64 + frac * (b - prev.0) as f64).round().max(1.0) as u64;
                }
                prev = (b, p);
            }
            prev.0.max(1)
        }
    }
}

/// Endpoints are NICs; this names one for outputs (`h3/mlx5_0`).
pub fn nic_name(fabric: &Fabric, nic: NicId) -> String {
    fabric.node_name(Node::Nic(nic))
}
