//! Turns a scenario's workload declarations into concrete flows.
//!
//! Every random choice (incast senders, permutation, request arrivals and sizes) draws from
//! a stream derived from the run seed and the workload's position, so a workload's flows
//! do not change when another workload is added.

use std::collections::BTreeMap;

use xirang_collective::lazy::{self, Expansion};
use xirang_collective::schedule::{CollectiveAlgorithm, CollectiveOp, Shape};
use xirang_fabric::Loaded;
use xirang_fabric::model::{Fabric, NicId, Node};
use xirang_fabric::scenario::resolve_endpoint;
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
}

/// A collective workload, expanded as it runs (`xirang_collective::lazy`): its ranks, how
/// they map to hosts and NICs, and the timing of its NVLink steps. Its transfers are not
/// listed here; the simulator creates each one when its dependencies have arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveRun {
    /// Workload index.
    pub workload: u16,
    /// The operation.
    pub op: CollectiveOp,
    /// The algorithm.
    pub algorithm: CollectiveAlgorithm,
    /// Ranks (GPUs).
    pub ranks: u32,
    /// Buffer bytes.
    pub bytes: u64,
    /// Repetitions.
    pub iterations: u32,
    /// The schedule's shape.
    pub shape: Shape,
    /// Transfers per iteration.
    pub per_iteration: u64,
    /// Result id of iteration 0's transfer 0; transfer t of iteration i has id
    /// `first_id + i * per_iteration + t`.
    pub first_id: u64,
    /// Traffic class.
    pub class: String,
    /// When the first iteration starts.
    pub start: Ps,
    /// Reduction/kernel time before a step that waited for another.
    pub step: Ps,
    /// NVLink: latency of a transfer between GPUs of one host.
    pub nvlink_latency: Ps,
    /// NVLink bandwidth each channel gets, Gbit/s (0: copies take no time).
    pub nvlink_gbps_per_channel: f64,
    /// Index in [`CollectiveRun::host_nics`] of each rank's host.
    pub rank_host: Vec<u32>,
    /// The NICs of each participating host.
    pub host_nics: Vec<Vec<NicId>>,
    /// The hierarchical algorithm: the NIC under each rank's GPU (None for a rank on a host
    /// without GPUs, which uses its channel's rail). Empty for the other algorithms.
    pub rank_nic: Vec<Option<NicId>>,
    /// QPs per connection when a `single_qp` fault overrides the configuration.
    pub qps: Option<u32>,
    /// `nic_funnel` faults, in order: traffic between a host and other hosts goes through
    /// this NIC of the host.
    pub funnel: Vec<NicId>,
}

impl CollectiveRun {
    /// The expansion that yields the transfers (valid: checked when the run was built).
    pub fn expansion(&self) -> Box<dyn Expansion> {
        lazy::build(self.op, self.algorithm, self.shape)
            .expect("invariant: the shape was checked when the workload was expanded")
    }

    /// Both ranks on one host: the transfer goes over NVLink.
    pub fn same_host(&self, a: u32, b: u32) -> bool {
        self.rank_host[a as usize] == self.rank_host[b as usize]
    }

    /// The (sending, receiving) NICs of a transfer on `channel`: NIC `channel mod nics` of
    /// each host (NCCL keeps a channel on one rail), or the NIC under each rank's GPU for
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

    /// Time of an NVLink transfer of `bytes`.
    pub fn nvlink_ps(&self, bytes: u64) -> Ps {
        let gbps = self.nvlink_gbps_per_channel;
        let copy = if gbps > 0.0 {
            bytes as f64 * 8.0 / (gbps * 1e9)
        } else {
            0.0
        };
        self.nvlink_latency + (copy * 1e12).round() as Ps
    }

    /// Every transfer of one iteration with its NICs: (sending NIC, receiving NIC, bytes,
    /// over NVLink), in schedule order. Takes time in proportion to the schedule.
    pub fn for_each_transfer(&self, fabric: &Fabric, f: &mut dyn FnMut(NicId, NicId, u64, bool)) {
        self.expansion().for_each_transfer(&mut |st| {
            let (a, b) = self.nics(fabric, st.channel, st.src, st.dst);
            f(a, b, st.bytes, self.same_host(st.src, st.dst));
        });
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
    /// Flows.
    pub flows: Vec<FlowDef>,
    /// Inference requests.
    pub requests: Vec<Request>,
    /// Collectives.
    pub collectives: Vec<CollectiveRun>,
    /// Workloads that were not expanded, with the reason.
    pub skipped: Vec<(String, String)>,
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

/// Expands every workload of a loaded scenario.
pub fn expand(loaded: &Loaded, seed: u64) -> Expanded {
    let fabric = &loaded.fabric;
    let mut out = Expanded::default();
    let mut next_id = 0u64;
    for (wi, (name, w)) in loaded.scenario.workloads.iter().enumerate() {
        let widx = wi as u16;
        let first_flow = out.flows.len();
        out.workloads.push(name.clone());
        let mut rng = Stream::new(seed, Purpose::Workload, wi as u64);
        let ep = |s: &str| resolve_endpoint(fabric, s).expect("invariant: endpoints are validated at load");
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
        };
        match w {
            Workload::Flows(f) => {
                let first = out.flows.len() as u32;
                let ids: BTreeMap<&str, u32> = f
                    .list
                    .iter()
                    .enumerate()
                    .filter_map(|(i, x)| x.id.as_deref().map(|id| (id, first + i as u32)))
                    .collect();
                for x in &f.list {
                    out.flows.push(FlowDef {
                        class: x.class.clone().unwrap_or_else(|| f.class.clone()),
                        src: ep(&x.src),
                        dst: ep(&x.dst),
                        bytes: x.bytes,
                        start: us(x.start_us),
                        prio: x.priority,
                        after: x.after.iter().map(|a| ids[a.as_str()]).collect(),
                        ..base.clone()
                    });
                }
            }
            Workload::Incast(x) => {
                let dst = ep(&x.receiver);
                let senders: Vec<NicId> = if x.sender_hosts.is_empty() {
                    pick_incast_senders(fabric, dst, x.senders.map_or(1, |c| c.get()) as usize, &mut rng)
                } else {
                    x.sender_hosts.iter().map(|s| ep(s)).collect()
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
            Workload::Permutation(x) => {
                let eps = endpoints(fabric, &x.hosts, &ep);
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
            Workload::AllToAll(x) => {
                let eps = endpoints(fabric, &x.hosts, &ep);
                for &s in &eps {
                    for &d in &eps {
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
            Workload::Inference(x) => {
                let clients: Vec<NicId> = x.clients.iter().map(|s| ep(s)).collect();
                let servers: Vec<NicId> = x.servers.iter().map(|s| ep(s)).collect();
                let mean_gap_us = 1e6 / x.requests_per_sec;
                let end = x.start_us + x.duration_us;
                for &c in &clients {
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
                        let req_bytes = sample_size(&x.request, &mut rng);
                        let resp_bytes = sample_size(&x.response, &mut rng);
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
            Workload::HpccFlows(h) => {
                let offset = us(h.time_offset_us);
                let mut pair_port: BTreeMap<(u32, u32), u16> = BTreeMap::new();
                for f in &loaded.hpcc_flows[name] {
                    // The HPCC simulator numbers source ports per (src, dst) pair from 10000
                    // (docs/hpcc-model.md §6).
                    const HPCC_FIRST_SPORT: u16 = 10000;
                    let sport = pair_port.entry((f.src, f.dst)).or_insert(HPCC_FIRST_SPORT);
                    let this = *sport;
                    *sport = sport.wrapping_add(1);
                    out.flows.push(FlowDef {
                        src: ep(&format!("h{}", f.src)),
                        dst: ep(&format!("h{}", f.dst)),
                        bytes: f.bytes,
                        start: f.start_ps.saturating_sub(offset),
                        prio: Some(f.pg),
                        hpcc_ports: Some((this, f.dport)),
                        time_offset: offset.min(f.start_ps),
                        ..base.clone()
                    });
                }
            }
            Workload::Collective(c) => match expand_collective(loaded, c, widx, next_id) {
                Ok(run) => {
                    next_id += run.per_iteration * u64::from(run.iterations);
                    out.collectives.push(run);
                }
                Err(why) => out.skipped.push((name.clone(), why)),
            },
        }
        for f in &mut out.flows[first_flow..] {
            f.id = next_id;
            next_id += 1;
        }
    }
    out
}

/// NCCL's Simple-protocol chunk: `NCCL_BUFFSIZE` / `NCCL_STEPS` x the AllReduce chunk
/// steps (`STEPS/2`) = 4 MiB / 8 x 4 (docs/reference/collectives-and-nccl.md §1): steps
/// pipeline in pieces of at most this size.
const NCCL_SIMPLE_CHUNK_BYTES: u64 = 2 * 1024 * 1024;
/// Chunks per piece are capped to keep the number of flows in proportion; larger pieces
/// then move in bigger chunks.
const MAX_CHUNKS: u32 = 8;

/// Prepares a collective: ranks are the GPUs of the listed hosts (host by host, GPU by
/// GPU); steps between GPUs of one host go over NVLink; steps between hosts go NIC to NIC
/// on the channel's rail (NIC `channel mod nics` on both hosts, as NCCL keeps a channel on
/// one rail), or, for the hierarchical algorithm, between the NICs under the two GPUs' own
/// PCIe switches. NCCL also rotates each channel's ring so that the GPU at a host boundary
/// is the one under that rail's NIC; the schedules keep one ring order for all channels,
/// which changes nothing here because the simulator does not model the PCIe hop between a
/// GPU and its NIC (the rail choice alone decides the network traffic).
fn expand_collective(
    loaded: &Loaded,
    c: &xirang_fabric::workload::CollectiveSpec,
    workload: u16,
    first_id: u64,
) -> Result<CollectiveRun, String> {
    let fabric = &loaded.fabric;
    // Host names were validated with the scenario.
    let hosts = fabric.hosts_named(&c.hosts);
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
    if c.algorithm == CollectiveAlgorithm::Hierarchical && per_host.iter().any(|x| *x != per_host[0]) {
        return Err("the hierarchical algorithm needs the same number of GPUs on every host".to_string());
    }
    let n = rank_host.len() as u32;
    // Pieces of at most one NCCL chunk, so that steps pipeline as NCCL's do.
    let per_piece = c.bytes / u64::from(n.max(1) * c.channels.max(1));
    let chunks = per_piece
        .div_ceil(NCCL_SIMPLE_CHUNK_BYTES)
        .clamp(1, u64::from(MAX_CHUNKS)) as u32;
    let shape = Shape {
        ranks: n,
        bytes: c.bytes,
        channels: c.channels,
        chunks,
        ranks_per_host: per_host[0] as u32,
    };
    let per_iteration = lazy::build(c.op, c.algorithm, shape)?.len();
    let cfg = &loaded.scenario.config.intra_host;
    let rank_nic = if c.algorithm == CollectiveAlgorithm::Hierarchical {
        gpus.iter()
            .map(|g| g.map(|g| fabric.nic_for_gpu(g).expect("hosts have NICs")))
            .collect()
    } else {
        Vec::new()
    };
    Ok(CollectiveRun {
        workload,
        op: c.op,
        algorithm: c.algorithm,
        ranks: n,
        bytes: c.bytes,
        iterations: c.iterations,
        shape,
        per_iteration,
        first_id,
        class: c.class.clone(),
        start: us(c.start_us),
        step: us(c.step_us),
        nvlink_latency: us(cfg.nvlink_latency_us),
        // Each channel gets an equal share of the GPU's NVLink bandwidth.
        nvlink_gbps_per_channel: cfg.nvlink_gbps / f64::from(c.channels),
        rank_host,
        host_nics: hosts.iter().map(|h| h.nics.clone()).collect(),
        rank_nic,
        qps: None,
        funnel: Vec::new(),
    })
}

fn endpoints(fabric: &Fabric, hosts: &[String], ep: &dyn Fn(&str) -> NicId) -> Vec<NicId> {
    if hosts.is_empty() {
        fabric
            .hosts
            .iter()
            .filter_map(|h| h.nics.first().copied())
            .collect()
    } else {
        hosts.iter().map(|h| ep(h)).collect()
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
