//! nccl-tests on the twin: a scenario's collective run at every size of a sweep, each size
//! a fresh packet-level run, timed as nccl-tests times it (the mean of `iters` iterations
//! after `warmup` untimed ones), with algbw and busbw by nccl-tests' rules
//! (docs/reference/collectives-and-nccl.md §3) and the cost model's prediction beside it.
//! `xirang nccl sweep` prints the result in nccl-tests' own format
//! (`xirang_collective::nccl_tests::render`).

use xirang_collective::cost::{self, Algo, Coll, Platform, Proto};
use xirang_collective::schedule::{CollectiveAlgorithm, CollectiveOp};
use xirang_fabric::Loaded;
use xirang_fabric::built::{BuiltWorkload, Ends, Model};
use xirang_fabric::config::NcclProto;
use xirang_fabric::model::Host;
use xirang_fabric::workload::{CollectiveSpec, Workload};

/// nccl-tests' element type: `float`, 4 bytes (its `-d` default).
pub const ELEM_BYTES: u64 = 4;

/// What to sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepSpec {
    /// The collective workload (None: the scenario's only one).
    pub workload: Option<String>,
    /// Sizes, as asked (each is aligned as nccl-tests aligns it: [`align`]).
    pub sizes: Vec<u64>,
    /// Run this operation instead of the workload's.
    pub op: Option<CollectiveOp>,
    /// Force an algorithm (as `NCCL_ALGO`).
    pub algorithm: Option<CollectiveAlgorithm>,
    /// Force a protocol (as `NCCL_PROTO`).
    pub proto: Option<NcclProto>,
    /// Keep the scenario's other workloads running beside the collective.
    pub with_background: bool,
    /// Untimed iterations before the timed ones.
    pub warmup_iters: u32,
    /// Timed iterations.
    pub iters: u32,
}

/// Why a sweep cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// The scenario has no collective workload of that name, or several and none named.
    #[error("{0}")]
    Workload(String),
    /// A size outside what a scenario can hold.
    #[error("size {size} B: {why}")]
    Size {
        /// The size asked for.
        size: u64,
        /// What was expected.
        why: String,
    },
    /// The collective could not be set up (its hosts, its algorithm).
    #[error("{0}")]
    Collective(String),
}

/// One size of a sweep.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SizePoint {
    /// nccl-tests' size for the operation, bytes.
    pub size_bytes: u64,
    /// nccl-tests' element count column.
    pub count: u64,
    /// Mean time of the timed iterations, µs (None: the run did not finish).
    pub time_us: Option<f64>,
    /// size / time, GB/s.
    pub algbw_gbs: Option<f64>,
    /// algbw x the operation's bus factor, GB/s.
    pub busbw_gbs: Option<f64>,
    /// The algorithm and protocol simulated (`Ring/Simple`).
    pub simulated: String,
    /// Channels that carried data.
    pub channels: u32,
    /// NCCL's own pick where it is not what was simulated (NVLS, NVLSTree).
    pub nccl_pick: Option<String>,
    /// The cost model's busbw for what was simulated, GB/s.
    pub model_busbw_gbs: Option<f64>,
}

/// The sizes nccl-tests visits from `min` to `max`: times `factor` when it is above 1,
/// else plus `step_bytes`.
pub fn sizes(min: u64, max: u64, factor: Option<u64>, step_bytes: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = min;
    while s <= max {
        out.push(s);
        let next = match factor {
            Some(f) if f > 1 => s.saturating_mul(f),
            _ => s.saturating_add(step_bytes.max(1)),
        };
        if next <= s {
            break;
        }
        s = next;
    }
    out
}

/// nccl-tests' (size, count) for `size` bytes of `op` over `ranks`: all-gather,
/// reduce-scatter and all-to-all count whole elements per rank block (the size is then
/// the ranks' blocks), the others whole elements of the buffer; at least one.
pub fn align(op: CollectiveOp, ranks: u32, size: u64) -> (u64, u64) {
    let per_rank = matches!(
        op,
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll
    );
    let div = if per_rank { u64::from(ranks.max(1)) } else { 1 };
    let count = (size / ELEM_BYTES / div).max(1);
    (count * ELEM_BYTES * div, count)
}

/// The collective workload a sweep runs: its name and spec. The name is the user's
/// `--workload`, looked up once here, before anything runs.
pub fn workload_of<'a>(
    loaded: &'a Loaded,
    name: Option<&str>,
) -> Result<(String, &'a CollectiveSpec), SweepError> {
    let colls: Vec<(String, &str, &CollectiveSpec)> = loaded
        .workloads
        .iter()
        .filter_map(|w| match &w.spec {
            Workload::Collective(c) => Some((w.name.clone(), w.name.as_str(), c)),
            _ => None,
        })
        .collect();
    let names = || {
        colls
            .iter()
            .map(|c| format!("`{}`", c.1))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match name {
        Some(n) => colls
            .iter()
            .find(|c| c.1 == n)
            .map(|c| (c.0.clone(), c.2))
            .ok_or_else(|| {
                SweepError::Workload(if colls.is_empty() {
                    format!("--workload {n}: the scenario has no collective workload")
                } else {
                    format!(
                        "--workload {n}: expected one of its collective workloads: {}",
                        names()
                    )
                })
            }),
        None => match colls.as_slice() {
            [one] => Ok((one.0.clone(), one.2)),
            [] => Err(SweepError::Workload(
                "the scenario has no collective workload to sweep (add a [workloads.NAME.collective])"
                    .to_string(),
            )),
            _ => Err(SweepError::Workload(format!(
                "the scenario has several collective workloads ({}): name one with --workload",
                names()
            ))),
        },
    }
}

/// The workloads of one size: the workload at that size, op, algorithm and protocol, run
/// `warmup + iters` times, alone unless the sweep keeps the background.
pub fn workloads_of(
    loaded: &Loaded,
    spec: &SweepSpec,
    name: &str,
    size: u64,
) -> Result<Vec<BuiltWorkload>, SweepError> {
    let w = loaded
        .workloads
        .iter()
        .find(|w| w.name == name)
        .ok_or_else(|| SweepError::Workload(format!("no workload `{name}`")))?;
    let Workload::Collective(mut c) = w.spec.clone() else {
        return Err(SweepError::Workload(format!("`{name}` is not a collective")));
    };
    if let Some(op) = spec.op {
        c.op = op;
    }
    if spec.algorithm.is_some() {
        c.algorithm = spec.algorithm;
    }
    if spec.proto.is_some() {
        c.protocol = spec.proto;
    }
    let limit = xirang_fabric::limits::MAX_TRANSFER_BYTES;
    if size == 0 || size > limit {
        return Err(SweepError::Size {
            size,
            why: format!("expected 1 B to {limit} B (the largest transfer a scenario holds)"),
        });
    }
    c.bytes = size;
    c.iterations = spec.warmup_iters + spec.iters.max(1);
    c.start_us = 0.0;
    let mut out: Vec<BuiltWorkload> = loaded
        .workloads
        .iter()
        .filter(|w| spec.with_background || w.name == name)
        .cloned()
        .collect();
    for w in out.iter_mut().filter(|w| w.name == name) {
        w.spec = Workload::Collective(c.clone());
    }
    Ok(out)
}

/// Runs one size (see [`workloads_of`]) and times it.
pub fn run_size(loaded: &Loaded, spec: &SweepSpec, name: &str, asked: u64) -> Result<SizePoint, SweepError> {
    // Ranks decide the alignment: the sized workloads are made twice, the first time only
    // to count them.
    let probe = workloads_of(loaded, spec, name, asked.max(1))?;
    let ex = crate::workload::expand(
        Model {
            workloads: &probe,
            ..loaded.model()
        },
        loaded.scenario.run.seed,
    );
    let run = ex
        .collectives
        .iter()
        .find(|c| ex.workloads[c.workload as usize] == name)
        .ok_or_else(|| {
            let why = ex
                .skipped
                .iter()
                .find(|s| s.0 == name)
                .map_or("not expanded", |s| s.1.as_str());
            SweepError::Collective(format!("`{name}`: {why}"))
        })?;
    let op = run.op;
    let (size, count) = align(op, run.ranks, asked);
    let size = size.max(ELEM_BYTES);
    let sized = workloads_of(loaded, spec, name, size)?;
    let model = Model {
        workloads: &sized,
        ..loaded.model()
    };
    let opts = crate::options(loaded);
    let r = crate::simulate_model(model, &opts, &mut |_| {});
    let c = r
        .collectives
        .iter()
        .find(|c| c.workload == name)
        .ok_or_else(|| SweepError::Collective(format!("`{name}` did not run")))?;
    let warm = spec.warmup_iters as usize;
    let iters = spec.iters.max(1);
    let end = c
        .iteration_end_ps
        .get(warm + iters as usize - 1)
        .copied()
        .flatten();
    let begin = if warm == 0 {
        Some(0)
    } else {
        c.iteration_end_ps.get(warm - 1).copied().flatten()
    };
    let time_us = match (begin, end, c.finished) {
        (Some(b), Some(e), true) => Some((e - b) as f64 / 1e6 / f64::from(iters)),
        _ => None,
    };
    let coll = Coll::of_op(op);
    let algbw = time_us.map(|t| size as f64 / t / 1e3);
    let ranks = run.ranks;
    let hosts: Vec<&Host> = match sized.iter().find(|w| w.name == name).map(|w| &w.ends) {
        Some(Ends::Collective(e)) => e.hosts.iter().map(|h| &model.fabric.hosts[h.index()]).collect(),
        _ => Vec::new(),
    };
    let model = Platform::of_hosts(model.fabric, model.config, &hosts, run.comm_channels)
        .and_then(|p| {
            let algo = match run.algorithm {
                CollectiveAlgorithm::Tree => Algo::Tree,
                _ => Algo::Ring,
            };
            cost::predict(coll, algo, run.proto, size, &p)
        })
        .map(|m| m.busbw_gbs);
    Ok(SizePoint {
        size_bytes: size,
        count,
        time_us,
        algbw_gbs: algbw,
        busbw_gbs: algbw.map(|a| a * coll.bus_factor(ranks)),
        simulated: run.nccl_name(),
        channels: c.channels,
        nccl_pick: run.choice.nccl_pick.clone(),
        model_busbw_gbs: model,
    })
}

/// Runs every size of `spec` on up to `threads` threads (sizes are independent), calling
/// `done(finished, total)` as each ends; points come back in size order.
pub fn sweep(
    loaded: &Loaded,
    spec: &SweepSpec,
    threads: usize,
    done: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<SizePoint>, SweepError> {
    let (name, _) = workload_of(loaded, spec.workload.as_deref())?;
    let n = spec.sizes.len();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<Result<SizePoint, SweepError>>>> =
        std::sync::Mutex::new(vec![None; n]);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let r = run_size(loaded, spec, &name, spec.sizes[i]);
                    results.lock().expect("no worker panicked holding it")[i] = Some(r);
                    let k = finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    done(k, n);
                }
            });
        }
    });
    results
        .into_inner()
        .expect("no worker panicked holding it")
        .into_iter()
        .map(|r| r.expect("every size ran"))
        .collect()
}

/// The protocol names `--proto` takes, as the scenario's `protocol` spells them.
pub fn proto_of(p: Proto) -> NcclProto {
    match p {
        Proto::Ll => NcclProto::Ll,
        Proto::Ll128 => NcclProto::Ll128,
        Proto::Simple => NcclProto::Simple,
    }
}
