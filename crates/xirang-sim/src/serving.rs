//! LLM-serving workloads as flows: the expert-parallel all-to-all of MoE layers (`moe`)
//! and the prefill-to-decode KV-cache transfers of disaggregated serving (`kv_transfer`).
//! Facts and formulas: docs/reference/llm-inference-traffic.md.
//!
//! A MoE layer is a dispatch then a combine, on every rank of the expert-parallel group,
//! chained as the GPUs run them:
//!
//! - rank `s` starts layer `l`'s dispatch `layer_compute_us` after it has every combine
//!   message of layer `l - 1` (its tokens back) or, for the first layer, after the start;
//! - rank `d` starts its combine `expert_compute_us` after it has every dispatch message of
//!   the layer.
//!
//! "Has every message" is a zero-byte local marker flow per (layer, rank, phase) that
//! waits for every flow into the rank: the engine's dependencies do the rest, and the
//! markers' arrival times are the metrics (dispatch and combine latency per layer, time
//! per step). Markers are left out of the run's flow results.
//!
//! Messages between the same two endpoints of one phase travel as one flow on their QP
//! (DeepEP posts them back to back on that QP): a low-latency flow is every token a rank
//! sends to one expert, on the QP of that expert. Packets are cut from the flow's bytes,
//! not message by message: a 7,408-byte message is 2 packets at a 4,096-byte MTU and 1.81
//! here, a difference of headers only. Transfers between GPUs of one host use NVLink at
//! the configured rate times NCCL's efficiency, a GPU's concurrent copies sharing its
//! NVLink (`Nvlink`); the receiving GPU's NVLink is not a second bottleneck.
//!
//! Normal mode couples every pair of the group's hosts (a GPU's hand-offs are its peer's
//! dependencies on another host), so a parallel run keeps the group in one partition.

use xirang_fabric::config::FabricConfig;
use xirang_fabric::model::{Fabric, HostId, NicId};
use xirang_fabric::workload::{KvMode, KvTransferSpec, MoeMode, MoeSpec, Routing};

use crate::rng::Stream;
use crate::time::{Ps, us};
use crate::workload::{Expanded, FlowDef, sample_size};

/// An RDMA atomic carries an 8-byte operand (InfiniBand AtomicETH): DeepEP's
/// low-latency kernels add a token count (dispatch) or set a flag (combine) on every
/// (rank, expert) pair, also where no token travels.
pub const LL_SIGNAL_BYTES: u64 = 8;

/// An RDMA READ request carries a 16-byte RDMA extended transport header (RETH) and no
/// payload; a pull sends one per slice (InfiniBand Architecture Specification §9.3.3).
pub const READ_REQUEST_BYTES: u64 = 16;

/// Tokens per RDMA write of DeepEP's normal kernels: chunks of at most 6 to 20 tokens
/// (llm-inference-traffic.md §1, `deep_ep/buffers/legacy.py:246-287`); the forwarder
/// passes a chunk on over NVLink while the next arrives, so only the last chunk's forward
/// follows the last RDMA byte.
pub const NORMAL_CHUNK_TOKENS: u64 = 20;

/// One GPU's NVLink as the MoE kernels use it: copies to other GPUs of the host leave at
/// once and share the sending GPU's NVLink bandwidth fairly (processor sharing), so the
/// last of them ends when all its bytes have gone. Copies to the GPU itself take the
/// latency only (a local memory copy). The receiving GPU's NVLink is not a second
/// bottleneck here: an all-to-all loads every GPU's in and out alike.
struct Nvlink {
    bps: f64,
    latency: Ps,
}

impl Nvlink {
    fn time(&self, bytes: u64) -> Ps {
        self.latency + (bytes as f64 * 8.0 * 1e12 / self.bps).round() as Ps
    }

    /// Sets the durations of one GPU's concurrent copies `group` (local flows of `out`):
    /// under processor sharing, a copy of b bytes ends after sum over the group of
    /// min(b_j, b) bytes.
    fn share(&self, out: &mut Expanded, group: &[u32]) {
        self.share_with(out, group, &[]);
    }

    /// [`Nvlink::share`] with copies of `other` sizes leaving the GPU in the same phase
    /// (normal mode's forwards, which start as their data arrives: counting them as
    /// present from the start is a bound).
    fn share_with(&self, out: &mut Expanded, group: &[u32], other: &[u64]) {
        let mut sizes: Vec<u64> = group.iter().map(|&i| out.flows[i as usize].bytes).collect();
        sizes.extend_from_slice(other);
        sizes.sort_unstable();
        let mut prefix = Vec::with_capacity(sizes.len() + 1);
        prefix.push(0u64);
        for &b in &sizes {
            prefix.push(prefix.last().copied().unwrap_or(0) + b);
        }
        for &i in group {
            let b = out.flows[i as usize].bytes;
            // Copies no larger than b count whole; the larger ones count b each.
            let k = sizes.partition_point(|&x| x <= b);
            let shared = prefix[k] + b * (sizes.len() - k) as u64;
            out.flows[i as usize].local = Some(self.time(shared));
        }
    }
}

/// What a flow of a MoE workload is, for its metrics and conservation checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoePart {
    /// Dispatch data (tokens to experts; in normal mode, a host's records or a forward).
    Dispatch,
    /// Combine data (expert outputs back).
    Combine,
    /// A low-latency count or flag where no token travels.
    Signal,
    /// A rank has every message of a phase.
    Marker,
}

/// A MoE workload as expanded.
#[derive(Debug, Clone)]
pub struct MoeRun {
    /// Workload index.
    pub workload: u16,
    /// Kernel family.
    pub mode: MoeMode,
    /// Ranks (GPUs) of the group.
    pub ranks: u32,
    /// Hosts of the group.
    pub hosts: u32,
    /// Layers per step.
    pub layers: u32,
    /// Steps.
    pub steps: u32,
    /// Compute before each dispatch.
    pub layer_compute: Ps,
    /// Compute before each combine.
    pub expert_compute: Ps,
    /// The dispatch and combine kernels' own GPU time, per layer.
    pub kernels: Ps,
    /// When the first step starts.
    pub start: Ps,
    /// Markers, `[(step * layers + layer) * ranks + rank]`: (the rank has every dispatch
    /// message, the rank has every combine message), as flow indices.
    pub marks: Vec<(u32, u32)>,
    /// The workload's flows: `[first, end)` in [`Expanded::flows`], each with its part.
    pub first_flow: u32,
    /// One past the last flow.
    pub end_flow: u32,
    /// Each flow's part, from `first_flow`.
    pub parts: Vec<MoePart>,
    /// (token, expert) pairs routed, over every layer and step: the low-latency messages
    /// of each phase.
    pub token_experts: u64,
    /// Bytes of one dispatch and one combine message.
    pub message_bytes: (u64, u64),
    /// Normal mode: RDMA payload bytes each rank dispatches over the whole run, as DeepEP
    /// counts them: a token's FP8 activation and scales once per destination host, its
    /// own host included.
    pub rdma_payload_bytes: Vec<u64>,
    /// Low latency: dispatch data bytes each rank sends over the run (NVLink included).
    pub sent_bytes: Vec<u64>,
    /// Low latency: combine data bytes each rank gets back over the run.
    pub returned_bytes: Vec<u64>,
}

/// A KV transfer request as expanded.
#[derive(Debug, Clone)]
pub struct KvRequest {
    /// Workload index.
    pub workload: u16,
    /// Arrival time.
    pub arrival: Ps,
    /// Waiting for its prefill host.
    pub queueing: Ps,
    /// Prefill done: the transfer starts.
    pub prefill_end: Ps,
    /// Prompt tokens.
    pub tokens: u64,
    /// KV bytes.
    pub bytes: u64,
    /// Its flows, `[first, end)` in [`Expanded::flows`]: one per NIC pair, each after
    /// its read requests in pull mode.
    pub flows: (u32, u32),
}

/// The ranks of a group: each host's GPUs in order (a host without GPUs is one rank on its
/// first NIC), with their host index and NIC.
struct Ranks {
    host: Vec<u32>,
    local: Vec<u32>,
    nic: Vec<NicId>,
    first: Vec<u32>,
}

impl Ranks {
    fn of(fabric: &Fabric, hosts: &[HostId]) -> Ranks {
        let mut r = Ranks {
            host: Vec::new(),
            local: Vec::new(),
            nic: Vec::new(),
            first: Vec::new(),
        };
        for (hi, &h) in hosts.iter().enumerate() {
            let host = &fabric.hosts[h.index()];
            r.first.push(r.host.len() as u32);
            for g in 0..host.gpus.len().max(1) {
                r.host.push(hi as u32);
                r.local.push(g as u32);
                let nic = host
                    .gpus
                    .get(g)
                    .and_then(|&gpu| fabric.nic_for_gpu(gpu))
                    .or(host.nics.first().copied())
                    .expect("validation: every host of the group has a NIC");
                r.nic.push(nic);
            }
        }
        r
    }

    fn len(&self) -> usize {
        self.host.len()
    }
}

/// Picks `k` distinct items of `from`, uniformly or by weight (Efraimidis-Spirakis keys),
/// into `out`.
fn pick(from: &[u32], k: usize, weights: Option<&[f64]>, rng: &mut Stream, out: &mut Vec<u32>) {
    out.clear();
    match weights {
        None if 2 * k <= from.len() => {
            while out.len() < k {
                let x = from[rng.below(from.len() as u64) as usize];
                if !out.contains(&x) {
                    out.push(x);
                }
            }
        }
        None => {
            let mut v = from.to_vec();
            for i in 0..k {
                let j = i + rng.below((v.len() - i) as u64) as usize;
                v.swap(i, j);
            }
            out.extend_from_slice(&v[..k]);
        }
        Some(w) => {
            // The k largest ln(u) / w: a weighted draw without replacement.
            let mut keyed: Vec<(f64, u32)> = from
                .iter()
                .map(|&x| ((1.0 - rng.uniform()).ln() / w[x as usize], x))
                .collect();
            keyed.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            out.extend(keyed[..k].iter().map(|p| p.1));
        }
    }
}

/// One layer's routing: per (rank, expert) the tokens, per (rank, rank) and (rank, host)
/// the tokens with at least one expert there.
struct Routed {
    per_expert: Vec<u32>,
    per_rank: Vec<u32>,
    per_host: Vec<u32>,
}

fn route_layer(
    x: &MoeSpec,
    ranks: &Ranks,
    hosts: usize,
    weights: Option<&[f64]>,
    rng: &mut Stream,
) -> Routed {
    let n = ranks.len();
    let epg = x.experts_per_gpu as usize;
    let experts = n * epg;
    let all: Vec<u32> = (0..experts as u32).collect();
    let host_experts: Vec<Vec<u32>> = (0..hosts)
        .map(|h| {
            let first = ranks.first[h] as usize;
            let end = ranks.first.get(h + 1).map_or(n, |&e| e as usize);
            ((first * epg) as u32..(end * epg) as u32).collect()
        })
        .collect();
    let host_w: Option<Vec<f64>> = weights.map(|w| {
        host_experts
            .iter()
            .map(|es| es.iter().map(|&e| w[e as usize]).sum())
            .collect()
    });
    let all_hosts: Vec<u32> = (0..hosts as u32).collect();
    let mut r = Routed {
        per_expert: vec![0; n * experts],
        per_rank: vec![0; n * n],
        per_host: vec![0; n * hosts],
    };
    let (mut chosen, mut hs, mut pool) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen_rank = Vec::new();
    let mut seen_host = Vec::new();
    for s in 0..n {
        for _ in 0..x.tokens_per_gpu {
            match x.max_hosts_per_token {
                Some(m) if (m as usize) < hosts => {
                    pick(&all_hosts, m as usize, host_w.as_deref(), rng, &mut hs);
                    hs.sort_unstable();
                    pool.clear();
                    for &h in &hs {
                        pool.extend_from_slice(&host_experts[h as usize]);
                    }
                    pick(&pool, x.top_k as usize, weights, rng, &mut chosen);
                }
                _ => pick(&all, x.top_k as usize, weights, rng, &mut chosen),
            }
            seen_rank.clear();
            seen_host.clear();
            for &e in &chosen {
                r.per_expert[s * experts + e as usize] += 1;
                let t = e as usize / epg;
                if !seen_rank.contains(&t) {
                    seen_rank.push(t);
                    r.per_rank[s * n + t] += 1;
                }
                let h = ranks.host[t] as usize;
                if !seen_host.contains(&h) {
                    seen_host.push(h);
                    r.per_host[s * hosts + h] += 1;
                }
            }
        }
    }
    r
}

/// Expands a MoE workload into flows (see the module's documentation).
#[allow(clippy::too_many_arguments)]
pub(crate) fn expand_moe(
    fabric: &Fabric,
    config: &FabricConfig,
    x: &MoeSpec,
    hosts: &[HostId],
    base: &FlowDef,
    widx: u16,
    rng: &mut Stream,
    out: &mut Expanded,
) -> Result<MoeRun, String> {
    // A group left to its default is every host; those without a NIC take no part.
    let hosts: Vec<HostId> = hosts
        .iter()
        .copied()
        .filter(|h| !fabric.hosts[h.index()].nics.is_empty())
        .collect();
    let hosts = &hosts[..];
    let ranks = Ranks::of(fabric, hosts);
    let n = ranks.len();
    let nh = hosts.len();
    if n < 2 {
        return Err("the expert-parallel group has fewer than 2 GPUs".to_string());
    }
    let nvlink_bps = config.intra_host.nvlink_gbps * 1e9;
    if (nvlink_bps.is_nan() || nvlink_bps <= 0.0) && nh < n {
        return Err("GPUs of one host need NVLink between them (`intra_host.nvlink_gbps` > 0)".to_string());
    }
    let per_host = (0..nh)
        .map(|h| ranks.first.get(h + 1).map_or(n as u32, |&e| e) - ranks.first[h])
        .collect::<Vec<_>>();
    if x.mode == MoeMode::Normal && per_host.iter().any(|&g| g != per_host[0]) {
        return Err("normal mode forwards to the GPU of the same local index on each host: every host needs the same number of GPUs".to_string());
    }
    let link = Nvlink {
        // The share of NVLink a GPU's copies get, as for collectives.
        bps: nvlink_bps * xirang_collective::cost::NVLINK_EFFICIENCY,
        latency: us(config.intra_host.nvlink_latency_us),
    };
    let epg = x.experts_per_gpu as usize;
    let experts = n * epg;
    // Expert popularity: a Zipf law over a seeded order of the experts.
    let weights: Option<Vec<f64>> = match x.routing {
        Routing::Uniform => None,
        Routing::Zipf { exponent } => {
            let mut order: Vec<usize> = (0..experts).collect();
            for i in (1..experts).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let mut w = vec![0.0; experts];
            for (rank, &e) in order.iter().enumerate() {
                w[e] = 1.0 / ((rank + 1) as f64).powf(exponent);
            }
            Some(w)
        }
    };
    let first_flow = out.flows.len() as u32;
    let mut parts: Vec<MoePart> = Vec::new();
    let start = us(x.start_us);
    let (lc, ec) = (us(x.layer_compute_us), us(x.expert_compute_us));
    let (kd, kc) = (us(x.dispatch_kernel_us()), us(x.combine_kernel_us()));
    let mut run = MoeRun {
        workload: widx,
        mode: x.mode,
        ranks: n as u32,
        hosts: nh as u32,
        layers: x.layers,
        steps: x.steps,
        layer_compute: lc,
        expert_compute: ec,
        kernels: kd + kc,
        start,
        marks: Vec::new(),
        first_flow,
        end_flow: first_flow,
        parts: Vec::new(),
        token_experts: 0,
        message_bytes: (x.dispatch_message_bytes(), x.combine_message_bytes()),
        rdma_payload_bytes: vec![0; n],
        sent_bytes: vec![0; n],
        returned_bytes: vec![0; n],
    };
    // What starts a rank's dispatch: `lc + kd` after its previous combine marker, else
    // after the start.
    let mut prev_combine: Vec<Option<u32>> = vec![None; n];
    let mut into: Vec<Vec<u32>> = vec![Vec::new(); n];
    for _step in 0..x.steps {
        for _layer in 0..x.layers {
            let routed = route_layer(x, &ranks, nh, weights.as_deref(), rng);
            run.token_experts += routed.per_expert.iter().map(|&c| u64::from(c)).sum::<u64>();
            let prev = prev_combine.clone();
            let gate = move |s: usize| match prev[s] {
                Some(m) => (vec![m], lc + kd, start),
                None => (Vec::new(), 0, start + lc + kd),
            };
            let mut phase = Phase {
                x,
                ranks: &ranks,
                per_host: &per_host,
                routed: &routed,
                link: &link,
                base,
                start,
                gate: &gate,
                marks: &[],
                ec_kc: ec + kc,
                run: &mut run,
                parts: &mut parts,
                into: &mut into,
                out,
            };
            match x.mode {
                MoeMode::LowLatency => ll_dispatch(&mut phase),
                MoeMode::Normal => normal_dispatch(&mut phase),
            }
            let dmark = phase.markers(true);
            phase.marks = &dmark;
            match x.mode {
                MoeMode::LowLatency => ll_combine(&mut phase),
                MoeMode::Normal => normal_combine(&mut phase),
            }
            let cmark = phase.markers(false);
            run.marks.extend(dmark.iter().zip(&cmark).map(|(&a, &b)| (a, b)));
            for (p, &c) in prev_combine.iter_mut().zip(&cmark) {
                *p = Some(c);
            }
        }
    }
    run.end_flow = out.flows.len() as u32;
    run.parts = parts;
    Ok(run)
}

/// Expands a KV-transfer workload: Poisson arrivals over the pool, round robin over the
/// prefill hosts, each waiting for its host (first come, first served) and its prefill,
/// then its KV cache in slices dealt round robin over the NIC pairs of the two hosts, one
/// flow per pair (pull mode: after that pair's read requests).
#[allow(clippy::too_many_arguments)]
pub(crate) fn expand_kv(
    fabric: &Fabric,
    x: &KvTransferSpec,
    prefill: &[HostId],
    decode: &[HostId],
    base: &FlowDef,
    widx: u16,
    rng: &mut Stream,
    out: &mut Expanded,
) {
    let per_token = x.kv.bytes_per_token();
    let mean_gap_us = 1e6 / x.requests_per_sec;
    let end = x.start_us + x.duration_us;
    let tokens_dist = x.prompt_tokens.as_sizes();
    let mut free_at: Vec<Ps> = vec![0; prefill.len()];
    let mut t = x.start_us + rng.exponential(mean_gap_us);
    let mut next_prefill = 0usize;
    let mut made = 0usize;
    out.kv_workloads.push((widx, base.class.clone()));
    while t < end {
        let p = next_prefill;
        next_prefill = (next_prefill + 1) % prefill.len();
        let d = rng.below(decode.len() as u64) as usize;
        let tokens = sample_size(&tokens_dist, rng);
        let bytes = tokens * per_token;
        let arrival = us(t);
        let prefill_start = arrival.max(free_at[p]);
        // Validation bounds one prefill to an hour; a long queue of them saturates
        // instead of wrapping.
        let prefill_end = prefill_start.saturating_add(us(x.prefill_us_per_token * tokens as f64));
        free_at[p] = prefill_end;
        let (pn, dn) = (
            &fabric.hosts[prefill[p].index()].nics,
            &fabric.hosts[decode[d].index()].nics,
        );
        let pairs = x
            .nics_per_transfer
            .map_or(pn.len().min(dn.len()), |k| k as usize)
            .clamp(1, pn.len().min(dn.len()).max(1));
        let slices = bytes.div_ceil(x.slice_bytes);
        let first = out.flows.len() as u32;
        // Requests take turns on the NIC pairs when they use fewer than there are (the
        // engine picks a NIC per request, Mooncake's `rdma_transport.cpp`); slices then go
        // round robin over the request's pairs.
        let nics = pn.len().min(dn.len()).max(1);
        let turn = made % nics;
        made += 1;
        for k in 0..pairs {
            let nic = (turn + k) % nics;
            // Slices k, k + pairs, ...: whole slices, the last one short.
            let mine = slices / pairs as u64 + u64::from((k as u64) < slices % pairs as u64);
            if mine == 0 {
                continue;
            }
            let last_is_mine = (slices - 1) % pairs as u64 == k as u64;
            let short = bytes - (slices - 1) * x.slice_bytes;
            let pair_bytes =
                (mine - u64::from(last_is_mine)) * x.slice_bytes + if last_is_mine { short } else { 0 };
            let after = match x.mode {
                KvMode::Push => Vec::new(),
                KvMode::Pull => {
                    out.flows.push(FlowDef {
                        src: dn[nic],
                        dst: pn[nic],
                        bytes: mine * READ_REQUEST_BYTES,
                        start: prefill_end,
                        qps: x.qps,
                        ..base.clone()
                    });
                    vec![(out.flows.len() - 1) as u32]
                }
            };
            out.flows.push(FlowDef {
                src: pn[nic],
                dst: dn[nic],
                bytes: pair_bytes,
                start: prefill_end,
                after,
                qps: x.qps,
                ..base.clone()
            });
        }
        out.kv.push(KvRequest {
            workload: widx,
            arrival,
            queueing: prefill_start - arrival,
            prefill_end,
            tokens,
            bytes,
            flows: (first, out.flows.len() as u32),
        });
        t += rng.exponential(mean_gap_us);
    }
}

/// Mean, median, 99th percentile and maximum of a set of times, µs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Spread {
    /// How many times.
    pub n: usize,
    /// The smallest.
    pub min_us: Option<f64>,
    /// Their mean.
    pub mean_us: Option<f64>,
    /// Their median.
    pub p50_us: Option<f64>,
    /// Their 99th percentile.
    pub p99_us: Option<f64>,
    /// The largest.
    pub max_us: Option<f64>,
}

impl Spread {
    /// The spread of `times`.
    pub fn of(mut times: Vec<Ps>) -> Spread {
        times.sort_unstable();
        let to_us = |t: Ps| t as f64 / crate::time::PS_PER_US as f64;
        Spread {
            n: times.len(),
            min_us: times.first().copied().map(to_us),
            mean_us: (!times.is_empty())
                .then(|| times.iter().map(|&t| to_us(t)).sum::<f64>() / times.len() as f64),
            p50_us: crate::output::percentile(&times, 50.0).map(to_us),
            p99_us: crate::output::percentile(&times, 99.0).map(to_us),
            max_us: times.last().copied().map(to_us),
        }
    }
}

/// A MoE workload's outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MoeResult {
    /// Workload name.
    pub workload: String,
    /// Traffic class.
    pub class: String,
    /// `low_latency` or `normal`.
    pub mode: String,
    /// GPUs of the group.
    pub ranks: u32,
    /// Hosts of the group.
    pub hosts: u32,
    /// MoE layers per step.
    pub layers: u32,
    /// Steps.
    pub steps: u32,
    /// Every phase of every rank completed.
    pub finished: bool,
    /// Per (layer, rank): from the rank's dispatch start to its last dispatched token in
    /// (DeepEP's dispatch kernel time on that rank).
    pub dispatch: Spread,
    /// Per (layer, rank): from the rank's combine start to its last token back.
    pub combine: Spread,
    /// Per (step, rank): the time per output token, compute included.
    pub step: Spread,
    /// Per (step, rank): the step less the GPUs' time on its critical path (`layers` x
    /// (layer compute + expert compute + the two kernels' own time)): what the fabric
    /// adds to the time per output token.
    pub step_network: Spread,
    /// (token, expert) pairs routed over the run.
    pub token_experts: u64,
    /// Dispatch data flows and their bytes.
    pub dispatch_flows: u64,
    /// Bytes they carry.
    pub dispatch_bytes: u64,
    /// Combine data flows.
    pub combine_flows: u64,
    /// Bytes they carry.
    pub combine_bytes: u64,
    /// Counts and flags sent where no token travels (low latency).
    pub signals: u64,
    /// Dispatch bytes over the network (not NVLink).
    pub dispatch_rdma_bytes: u64,
    /// Normal mode: the mean over (layer, rank) of the rank's RDMA payload over its
    /// dispatch time, GB/s, as DeepEP's normal benchmark reports it.
    pub dispatch_rdma_gbs: Option<f64>,
    /// Low latency: DeepEP's "bandwidth", every dispatched byte (NVLink and local
    /// included) over the dispatch time, GB/s, mean over (layer, rank).
    pub dispatch_logical_gbs: Option<f64>,
    /// The same for the combine.
    pub combine_logical_gbs: Option<f64>,
}

/// A KV-transfer workload's outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KvResult {
    /// Workload name.
    pub workload: String,
    /// Traffic class.
    pub class: String,
    /// Requests made.
    pub requests: usize,
    /// Requests whose KV cache arrived whole.
    pub transferred: usize,
    /// KV bytes of every request.
    pub bytes: u64,
    /// Per request: from the end of its prefill to its last KV byte at the decode host.
    pub transfer: Spread,
    /// Per request: waiting for its prefill host.
    pub queueing: Spread,
    /// Per request: time to first token, arrival to the last KV byte (queueing, prefill
    /// and transfer; the decode step that follows is the time per output token's).
    pub ttft: Spread,
    /// Mean over requests of its bytes over its transfer time, GB/s.
    pub transfer_gbs: Option<f64>,
    /// Every transferred byte over the span from the first transfer's start to the last
    /// byte's arrival, GB/s (what a transfer-engine benchmark reports).
    pub throughput_gbs: Option<f64>,
}

/// Absolute arrival time of flow `i`, if it arrived.
fn arrived<Q: crate::queue::Queue>(sim: &crate::Sim<Q>, i: u32) -> Option<Ps> {
    sim.work.flow(crate::engine::ids::FlowId(i)).rx.rx_done
}

/// Every MoE workload's result from a finished run.
pub(crate) fn moe_results<Q: crate::queue::Queue>(ex: &Expanded, sim: &crate::Sim<Q>) -> Vec<MoeResult> {
    ex.moe
        .iter()
        .map(|run| {
            let n = run.ranks as usize;
            let layers_total = (run.layers * run.steps) as usize;
            let mut finished = true;
            let (mut dispatch, mut combine, mut step, mut step_net) = (vec![], vec![], vec![], vec![]);
            let (mut rdma_gbs, mut dlog, mut clog) = (vec![], vec![], vec![]);
            let per_layer_rdma = |r: usize| run.rdma_payload_bytes[r] as f64 / layers_total as f64;
            let ll = run.mode == MoeMode::LowLatency;
            // Bytes each rank dispatches (low latency: tokens x top-k x message) and gets
            // back, over the run.
            let (sent, got_back) = (&run.sent_bytes, &run.returned_bytes);
            for s in 0..run.steps as usize {
                for r in 0..n {
                    let step_start = if s == 0 {
                        Some(run.start)
                    } else {
                        arrived(sim, run.marks[((s * run.layers as usize) - 1) * n + r].1)
                    };
                    let mut prev_c = step_start;
                    for l in 0..run.layers as usize {
                        let (dm, cm) = run.marks[(s * run.layers as usize + l) * n + r];
                        let (d, c) = (arrived(sim, dm), arrived(sim, cm));
                        let (Some(pc), Some(d), Some(c)) = (prev_c, d, c) else {
                            finished = false;
                            prev_c = None;
                            continue;
                        };
                        let d_start = pc + run.layer_compute;
                        let d_time = d.saturating_sub(d_start);
                        let c_time = c.saturating_sub(d + run.expert_compute);
                        dispatch.push(d_time);
                        combine.push(c_time);
                        let secs = |t: Ps| t as f64 / 1e12;
                        if d_time > 0 {
                            if ll {
                                dlog.push(sent[r] as f64 / layers_total as f64 / secs(d_time) / 1e9);
                            } else {
                                rdma_gbs.push(per_layer_rdma(r) / secs(d_time) / 1e9);
                            }
                        }
                        if ll && c_time > 0 {
                            clog.push(got_back[r] as f64 / layers_total as f64 / secs(c_time) / 1e9);
                        }
                        prev_c = Some(c);
                    }
                    if let (Some(a), Some(b)) = (step_start, prev_c) {
                        let t = b - a;
                        step.push(t);
                        let gpu =
                            u64::from(run.layers) * (run.layer_compute + run.expert_compute + run.kernels);
                        step_net.push(t.saturating_sub(gpu));
                    }
                }
            }
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            let mut r = MoeResult {
                workload: ex.workloads[run.workload as usize].clone(),
                class: ex.flows[run.first_flow as usize].class.clone(),
                mode: match run.mode {
                    MoeMode::LowLatency => "low_latency",
                    MoeMode::Normal => "normal",
                }
                .to_string(),
                ranks: run.ranks,
                hosts: run.hosts,
                layers: run.layers,
                steps: run.steps,
                finished,
                dispatch: Spread::of(dispatch),
                combine: Spread::of(combine),
                step: Spread::of(step),
                step_network: Spread::of(step_net),
                token_experts: run.token_experts,
                dispatch_flows: 0,
                dispatch_bytes: 0,
                combine_flows: 0,
                combine_bytes: 0,
                signals: 0,
                dispatch_rdma_bytes: 0,
                dispatch_rdma_gbs: mean(&rdma_gbs),
                dispatch_logical_gbs: mean(&dlog),
                combine_logical_gbs: mean(&clog),
            };
            for (k, part) in run.parts.iter().enumerate() {
                let f = &ex.flows[run.first_flow as usize + k];
                match part {
                    MoePart::Dispatch => {
                        r.dispatch_flows += 1;
                        r.dispatch_bytes += f.bytes;
                        if f.local.is_none() {
                            r.dispatch_rdma_bytes += f.bytes;
                        }
                    }
                    MoePart::Combine => {
                        r.combine_flows += 1;
                        r.combine_bytes += f.bytes;
                    }
                    MoePart::Signal => r.signals += 1,
                    MoePart::Marker => {}
                }
            }
            r
        })
        .collect()
}

/// Every KV-transfer workload's result from a finished run.
pub(crate) fn kv_results<Q: crate::queue::Queue>(ex: &Expanded, sim: &crate::Sim<Q>) -> Vec<KvResult> {
    ex.kv_workloads
        .iter()
        .map(|(w, class)| {
            let w = *w;
            let reqs: Vec<&KvRequest> = ex.kv.iter().filter(|r| r.workload == w).collect();
            let (mut transfer, mut queueing, mut ttft, mut gbs) = (vec![], vec![], vec![], vec![]);
            let (mut first_start, mut last_end, mut moved) = (Ps::MAX, 0, 0u64);
            for r in &reqs {
                let last = (r.flows.0..r.flows.1)
                    .map(|i| arrived(sim, i))
                    .try_fold(0, |m, a| a.map(|a| a.max(m)));
                let Some(last) = last else { continue };
                let t = last - r.prefill_end;
                first_start = first_start.min(r.prefill_end);
                last_end = last_end.max(last);
                moved += r.bytes;
                transfer.push(t);
                ttft.push(last - r.arrival);
                if t > 0 {
                    gbs.push(r.bytes as f64 / (t as f64 / 1e12) / 1e9);
                }
            }
            for r in &reqs {
                queueing.push(r.queueing);
            }
            KvResult {
                workload: ex.workloads[w as usize].clone(),
                class: class.clone(),
                requests: reqs.len(),
                transferred: transfer.len(),
                bytes: reqs.iter().map(|r| r.bytes).sum(),
                transfer: Spread::of(transfer),
                queueing: Spread::of(queueing),
                ttft: Spread::of(ttft),
                transfer_gbs: (!gbs.is_empty()).then(|| gbs.iter().sum::<f64>() / gbs.len() as f64),
                throughput_gbs: (last_end > first_start)
                    .then(|| moved as f64 / ((last_end - first_start) as f64 / 1e12) / 1e9),
            }
        })
        .collect()
}

/// What the phases of one layer share.
struct Phase<'a> {
    x: &'a MoeSpec,
    ranks: &'a Ranks,
    per_host: &'a [u32],
    routed: &'a Routed,
    link: &'a Nvlink,
    base: &'a FlowDef,
    start: Ps,
    /// A rank's dispatch gate: (dependencies, delay, earliest start).
    gate: &'a dyn Fn(usize) -> (Vec<u32>, Ps, Ps),
    /// The combine: each rank's dispatch marker.
    marks: &'a [u32],
    /// The combine: expert compute and kernel time after the dispatch marker.
    ec_kc: Ps,
    run: &'a mut MoeRun,
    parts: &'a mut Vec<MoePart>,
    into: &'a mut [Vec<u32>],
    out: &'a mut Expanded,
}

impl Phase<'_> {
    /// One marker per rank, waiting for every flow into it (`dispatch`: a rank that
    /// receives nothing has its dispatch at its gate; in the combine every rank gets its
    /// tokens back).
    fn markers(&mut self, dispatch: bool) -> Vec<u32> {
        (0..self.ranks.len())
            .map(|r| {
                let into = std::mem::take(&mut self.into[r]);
                let deps = if into.is_empty() && dispatch {
                    (self.gate)(r)
                } else {
                    debug_assert!(!into.is_empty(), "invariant: every rank routes a token");
                    (into, 0, self.start)
                };
                let f = FlowDef {
                    local: Some(0),
                    ..self.flow(r, r, 0, deps)
                };
                self.push(MoePart::Marker, f)
            })
            .collect()
    }

    fn push(&mut self, part: MoePart, f: FlowDef) -> u32 {
        self.out.flows.push(FlowDef {
            marker: part == MoePart::Marker,
            ..f
        });
        self.parts.push(part);
        (self.out.flows.len() - 1) as u32
    }

    fn flow(&self, src: usize, dst: usize, bytes: u64, deps: (Vec<u32>, Ps, Ps)) -> FlowDef {
        FlowDef {
            src: self.ranks.nic[src],
            dst: self.ranks.nic[dst],
            bytes,
            after: deps.0,
            after_delay: deps.1,
            start: deps.2,
            ..self.base.clone()
        }
    }

    /// A low-latency message flow from `src` to `dst`: over NVLink inside a host (its
    /// duration set by [`Nvlink::share`]), else on one QP of its own.
    fn ll_message(
        &mut self,
        src: usize,
        dst: usize,
        bytes: u64,
        part: MoePart,
        deps: (Vec<u32>, Ps, Ps),
    ) -> u32 {
        let f = self.flow(src, dst, bytes, deps);
        let f = if self.ranks.host[src] == self.ranks.host[dst] {
            FlowDef {
                local: Some(self.link.latency),
                ..f
            }
        } else {
            FlowDef { qps: Some(1), ..f }
        };
        self.push(part, f)
    }

    /// The GPUs of host `m`.
    fn host(&self, m: usize) -> std::ops::Range<usize> {
        let first = self.ranks.first[m] as usize;
        first..first + self.per_host[m] as usize
    }

    /// The forwarder on host `m` for rank `s`: the GPU of `s`'s local index.
    fn forwarder(&self, s: usize, m: usize) -> usize {
        self.ranks.first[m] as usize + self.ranks.local[s] as usize
    }
}

/// Normal-mode dispatch of one layer (DeepEP's internode kernels): each rank sends each
/// token once per destination host, over RDMA to its rail peer there (the GPU of its
/// local index), which forwards it over NVLink to the token's GPUs on that host; tokens
/// for its own host go over NVLink directly. Forwarding runs while the RDMA data arrives,
/// so a forward ends at the later of its RDMA data's arrival plus one chunk's forward and
/// the forwarder's NVLink having sent everything it sends in the phase (its own tokens
/// and every forward): that second bound is a zero-byte local step per forwarder lasting
/// the whole phase's NVLink time, on which each forward waits.
// Ranks index several tables at once (routing, totals, the flows into each rank).
#[allow(clippy::needless_range_loop)]
fn normal_dispatch(c: &mut Phase<'_>) {
    let (n, nh) = (c.ranks.len(), c.per_host.len());
    let payload = c.x.dispatch_payload_bytes();
    let record = c.x.dispatch_message_bytes();
    // Each rank's NVLink bytes: to other GPUs of its host, its own tokens and forwards.
    let mut egress = vec![Vec::<u64>::new(); n];
    let mut forwards = vec![Vec::<u64>::new(); n];
    for s in 0..n {
        let hs = c.ranks.host[s] as usize;
        for m in 0..nh {
            let f = c.forwarder(s, m);
            for t in c.host(m) {
                let k = u64::from(c.routed.per_rank[s * n + t]);
                let from = if m == hs { s } else { f };
                if k > 0 && t != from {
                    egress[from].push(k * payload);
                    if m != hs {
                        forwards[from].push(k * payload);
                    }
                }
            }
        }
    }
    let mut budget = vec![0u32; n];
    for (f, b) in budget.iter_mut().enumerate() {
        let total: u64 = egress[f].iter().sum();
        let gate = (c.gate)(f);
        let step = FlowDef {
            local: Some(c.link.time(total)),
            ..c.flow(f, f, 0, gate)
        };
        *b = c.push(MoePart::Marker, step);
        // A rank's dispatch ends when its own NVLink sends do, too (it may receive
        // nothing, or only from itself).
        c.into[f].push(*b);
    }
    let mut group = Vec::new();
    for s in 0..n {
        let hs = c.ranks.host[s] as usize;
        let gate = (c.gate)(s);
        group.clear();
        for m in 0..nh {
            let tokens = u64::from(c.routed.per_host[s * nh + m]);
            if tokens == 0 {
                continue;
            }
            // DeepEP's benchmark counts every (token, host) pair, its own host's too,
            // though those never reach the NIC (`tests/legacy/test_internode.py:60-63`).
            c.run.rdma_payload_bytes[s] += tokens * payload;
            if m == hs {
                for t in c.host(m) {
                    let k = u64::from(c.routed.per_rank[s * n + t]);
                    if k > 0 {
                        let f = FlowDef {
                            local: Some(c.link.latency),
                            ..c.flow(s, t, k * payload, gate.clone())
                        };
                        let fi = c.push(MoePart::Dispatch, f);
                        if t != s {
                            group.push(fi);
                        }
                        c.into[t].push(fi);
                    }
                }
                continue;
            }
            let fwd = c.forwarder(s, m);
            let rdma = c.flow(s, fwd, tokens * record, gate.clone());
            let rdma = c.push(
                MoePart::Dispatch,
                FlowDef {
                    qps: Some(c.x.channels),
                    ..rdma
                },
            );
            c.into[fwd].push(rdma);
            for t in c.host(m).filter(|&t| t != fwd) {
                let k = u64::from(c.routed.per_rank[s * n + t]);
                if k > 0 {
                    let last = k.min(NORMAL_CHUNK_TOKENS) * payload;
                    let f = FlowDef {
                        local: Some(c.link.time(last)),
                        ..c.flow(fwd, t, k * payload, (vec![rdma, budget[fwd]], 0, c.start))
                    };
                    let fi = c.push(MoePart::Dispatch, f);
                    c.into[t].push(fi);
                }
            }
        }
        // Its direct copies share its NVLink with the forwards it makes.
        c.link.share_with(c.out, &group, &forwards[s]);
    }
}

/// Normal-mode combine of one layer, the dispatch reversed: each expert GPU hands its
/// outputs for a remote token to its rail peer's counterpart on its own host (the
/// forwarder), which reduces them and sends one record per token over RDMA; outputs for
/// tokens of its own host go over NVLink directly. All of a GPU's NVLink sends leave
/// together and share its NVLink; the forwarder's RDMA send starts when its own experts
/// are done and streams as the hand-offs arrive, so the token's rank has its outputs when
/// both the RDMA data and the hand-offs are in (the last chunk's RDMA time after the last
/// hand-off, a few µs, is not added).
fn normal_combine(c: &mut Phase<'_>) {
    let (n, nh) = (c.ranks.len(), c.per_host.len());
    let cmsg = c.x.combine_message_bytes();
    let marks = c.marks;
    let (ec_kc, start) = (c.ec_kc, c.start);
    let ready = move |t: usize| (vec![marks[t]], ec_kc, start);
    let mut by_sender: Vec<Vec<u32>> = vec![Vec::new(); n];
    for s in 0..n {
        let hs = c.ranks.host[s] as usize;
        for m in 0..nh {
            let tokens = u64::from(c.routed.per_host[s * nh + m]);
            if tokens == 0 {
                continue;
            }
            let to = if m == hs { s } else { c.forwarder(s, m) };
            for t in c.host(m) {
                let k = u64::from(c.routed.per_rank[s * n + t]);
                if k > 0 && !(m != hs && t == to) {
                    let f = FlowDef {
                        local: Some(c.link.latency),
                        ..c.flow(t, to, k * cmsg, ready(t))
                    };
                    let fi = c.push(MoePart::Combine, f);
                    if t != to {
                        by_sender[t].push(fi);
                    }
                    c.into[s].push(fi);
                }
            }
            if m != hs {
                let rdma = c.flow(to, s, tokens * cmsg, ready(to));
                let fi = c.push(
                    MoePart::Combine,
                    FlowDef {
                        qps: Some(c.x.channels),
                        ..rdma
                    },
                );
                c.into[s].push(fi);
            }
        }
    }
    for g in &by_sender {
        c.link.share(c.out, g);
    }
    // A rank's combine starts after its own experts are done, whatever it gets back.
    for r in 0..n {
        let own = FlowDef {
            local: Some(0),
            ..c.flow(r, r, 0, ready(r))
        };
        let fi = c.push(MoePart::Marker, own);
        c.into[r].push(fi);
    }
}

/// Low-latency dispatch of one layer (DeepEP's decode kernels): every rank writes each
/// (token, expert) pair to the expert's GPU on the QP of that expert, any GPU to any GPU,
/// over NVLink inside its host; a pair with no token still gets its count.
// Ranks index several tables at once (routing, totals, the flows into each rank).
#[allow(clippy::needless_range_loop)]
fn ll_dispatch(c: &mut Phase<'_>) {
    let n = c.ranks.len();
    let epg = c.x.experts_per_gpu as usize;
    let experts = n * epg;
    let dmsg = c.x.dispatch_message_bytes();
    let mut group = Vec::new();
    for s in 0..n {
        let gate = (c.gate)(s);
        group.clear();
        for e in 0..experts {
            let d = e / epg;
            let k = u64::from(c.routed.per_expert[s * experts + e]);
            let (part, bytes) = if k > 0 {
                c.run.sent_bytes[s] += k * dmsg;
                (MoePart::Dispatch, k * dmsg)
            } else {
                (MoePart::Signal, LL_SIGNAL_BYTES)
            };
            let fi = c.ll_message(s, d, bytes, part, gate.clone());
            if c.ranks.host[s] == c.ranks.host[d] && s != d {
                group.push(fi);
            }
            c.into[d].push(fi);
        }
        c.link.share(c.out, &group);
    }
}

/// Low-latency combine of one layer: each expert's GPU writes every token's output back
/// to the token's GPU once its experts are done; a pair with no token still gets its flag.
// Ranks index several tables at once (routing, totals, the flows into each rank).
#[allow(clippy::needless_range_loop)]
fn ll_combine(c: &mut Phase<'_>) {
    let n = c.ranks.len();
    let epg = c.x.experts_per_gpu as usize;
    let experts = n * epg;
    let cmsg = c.x.combine_message_bytes();
    let mut by_sender: Vec<Vec<u32>> = vec![Vec::new(); n];
    for e in 0..experts {
        let d = e / epg;
        let ready = (vec![c.marks[d]], c.ec_kc, c.start);
        for s in 0..n {
            let k = u64::from(c.routed.per_expert[s * experts + e]);
            let (part, bytes) = if k > 0 {
                c.run.returned_bytes[s] += k * cmsg;
                (MoePart::Combine, k * cmsg)
            } else {
                (MoePart::Signal, LL_SIGNAL_BYTES)
            };
            let fi = c.ll_message(d, s, bytes, part, ready.clone());
            if c.ranks.host[s] == c.ranks.host[d] && s != d {
                by_sender[d].push(fi);
            }
            c.into[s].push(fi);
        }
    }
    for g in &by_sender {
        c.link.share(c.out, g);
    }
}
