//! Measured against modelled: an nccl-tests run compared, size by size, with what the cost
//! model says the platform should reach.

use serde::Serialize;

use crate::cost::{self, Algo, Coll, GpuGen, Platform, Prediction, Proto};
use crate::nccl_tests::TestRun;

/// Below this share of the model's bus bandwidth a size is flagged (issue acceptance: 80%).
pub const SLOW_SHARE: f64 = 0.8;

/// A size is judged when at least this share of the model's time moves bytes.
pub const JUDGED_BANDWIDTH_SHARE: f64 = 0.5;

/// Point-to-point collectives (sendrecv, all-to-all) are judged from this size.
pub const P2P_JUDGED_FROM_BYTES: u64 = 512 << 20;

/// GPUs per node of the HGX boards that carry NVSwitches.
const HGX_NVSWITCH_GPUS: u32 = 8;

/// One size, measured and modelled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeCheck {
    /// Line of the row.
    pub line: usize,
    /// Buffer size, bytes.
    pub size_bytes: u64,
    /// Measured bus bandwidth (the better of out-of-place and in-place), GB/s.
    pub measured_busbw_gbs: f64,
    /// The model's prediction for the algorithm and protocol it picks (or the forced ones).
    pub model: Prediction,
    /// Measured bandwidth / the model's (= model time / measured time).
    pub ratio: f64,
    /// The model's time at this size is mostly moving bytes, not latency: only such sizes
    /// are judged, since NCCL's latency constants are estimates (VALIDATION.md).
    pub judged: bool,
    /// Judged and below [`SLOW_SHARE`] of the model.
    pub slow: bool,
    /// Elements that failed validation (data corruption when non-zero).
    pub wrong: u64,
}

/// A whole run checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunCheck {
    /// Test name, when known.
    pub name: Option<String>,
    /// The collective compared.
    pub collective: Coll,
    /// The platform the model assumed.
    pub platform: Platform,
    /// Per size.
    pub sizes: Vec<SizeCheck>,
}

impl RunCheck {
    /// Sizes below [`SLOW_SHARE`] of the model.
    pub fn slow(&self) -> impl Iterator<Item = &SizeCheck> {
        self.sizes.iter().filter(|s| s.slow)
    }

    /// Sizes with elements that failed validation.
    pub fn corrupt(&self) -> impl Iterator<Item = &SizeCheck> {
        self.sizes.iter().filter(|s| s.wrong > 0)
    }

    /// The largest size.
    pub fn largest(&self) -> Option<&SizeCheck> {
        self.sizes.iter().max_by_key(|s| s.size_bytes)
    }
}

/// The platform a run used, from a template describing the hardware (NICs, NVLink) with the
/// node count, GPUs per node and GPU generation the log shows. With `gpu_links_from_log`,
/// the GPU-to-GPU bandwidth also follows the GPU model the log names (NVLink generation,
/// or PCIe for cards without NVLink) instead of the template's, and NVLS is assumed only
/// on 8-GPU (NVSwitch) nodes.
pub fn platform_of_run(run: &TestRun, template: &Platform, gpu_links_from_log: bool) -> Option<Platform> {
    let ranks = run.nranks()?;
    let nodes = (run.hosts().len() as u32).max(1);
    if ranks % nodes != 0 {
        return None;
    }
    let mut p = *template;
    p.nodes = nodes;
    p.gpus_per_node = ranks / nodes;
    if let Some(model) = run.gpu_model() {
        p.generation = GpuGen::from_model(model);
        if gpu_links_from_log {
            match cost::nvlink_gbs_of_model(model) {
                Some(gbs) => {
                    p.nvlink = true;
                    p.intra_gbs = gbs * cost::NVLINK_EFFICIENCY;
                }
                None => {
                    p.nvlink = false;
                    p.nvls = false;
                    p.intra_gbs = cost::PCIE_GEN4_X16_GBS;
                }
            }
        }
        p.nvls &= matches!(p.generation, GpuGen::Hopper | GpuGen::Blackwell);
    }
    // Without a described host, NVSwitch (and so NVLS) is assumed only on 8-GPU nodes:
    // 4-GPU HGX boards join their GPUs directly.
    if gpu_links_from_log && p.gpus_per_node < HGX_NVSWITCH_GPUS {
        p.nvls = false;
    }
    Some(p)
}

/// Compares every row of `run` with the model on `p`. `force` pins the algorithm and
/// protocol (as `NCCL_ALGO`/`NCCL_PROTO` would); otherwise the model's own pick is used.
pub fn check(run: &TestRun, coll: Coll, p: &Platform, force: Option<(Algo, Proto)>) -> RunCheck {
    let sizes = run
        .rows
        .iter()
        .filter_map(|r| {
            let model = match force {
                Some((a, pr)) => cost::predict(coll, a, pr, r.size_bytes, p)?,
                None => cost::choose(coll, r.size_bytes, p)?,
            };
            let measured = r.busbw_gbs();
            // Bandwidths are printed with two decimals (0.00 for tiny sizes); times keep
            // their precision, and for one size the bandwidth ratio is the inverse time ratio.
            let time_us = r.out_of_place.time_us.min(r.in_place.time_us);
            let ratio = if time_us > 0.0 {
                model.time_us / time_us
            } else {
                0.0
            };
            // NCCL spreads point-to-point operations over more channels as they grow (the
            // single-node fixture's sendrecv takes ~0.8 ms from 64 to 256 MiB), which the
            // model does not describe: those collectives are judged at large sizes only.
            let p2p = matches!(coll, Coll::SendRecv | Coll::AllToAll);
            let judged = model.bandwidth_share >= JUDGED_BANDWIDTH_SHARE
                && (!p2p || r.size_bytes >= P2P_JUDGED_FROM_BYTES);
            Some(SizeCheck {
                line: r.line,
                size_bytes: r.size_bytes,
                measured_busbw_gbs: measured,
                model,
                ratio,
                judged,
                slow: judged && ratio < SLOW_SHARE,
                wrong: r.wrong(),
            })
        })
        .collect();
    RunCheck {
        name: run.name.clone(),
        collective: coll,
        platform: *p,
        sizes,
    }
}

/// One run of a log as `xirang nccl check` reports it: what the log says of it, and the
/// comparison with the model, or why there is none.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport<'a> {
    /// Line of the run's header in the log.
    pub line: usize,
    /// The test binary's name, when the log says it.
    pub name: Option<&'a str>,
    /// NCCL's version, when the log says it.
    pub nccl_version: Option<&'a str>,
    /// Hosts the run listed.
    pub nodes: usize,
    /// Ranks, when listed.
    pub ranks: Option<u32>,
    /// The GPU model, when listed.
    pub gpu: Option<&'a str>,
    /// Measured against the model, size by size.
    pub check: Option<RunCheck>,
    /// Why the run was not compared with the model.
    pub not_checked: Option<String>,
    /// The log's average bus bandwidth, GB/s.
    pub avg_busbw_gbs: Option<f64>,
    /// Failures the log reports (line, text).
    pub failures: &'a [(usize, String)],
    /// Sizes below [`SLOW_SHARE`] of the model.
    pub slow_sizes: usize,
    /// Sizes with `#wrong` above 0.
    pub corrupt_sizes: usize,
}

impl RunReport<'_> {
    /// Findings of the run: slow and corrupt sizes, failures, and a run with rows that
    /// could not be judged at all.
    pub fn findings(&self) -> usize {
        self.slow_sizes
            + self.corrupt_sizes
            + self.failures.len()
            + usize::from(self.check.is_none() && self.failures.is_empty())
    }
}

/// Judges one run of a log. `coll` is the collective (the command line's, else the
/// log's); `template` the platform the run is on, its GPU links taken from the log's GPU
/// model when `gpu_links_from_log`; `force` an algorithm and protocol instead of NCCL's
/// choice.
pub fn judge<'a>(
    run: &'a TestRun,
    coll: Option<Coll>,
    template: &Platform,
    gpu_links_from_log: bool,
    force: Option<(Algo, Proto)>,
) -> RunReport<'a> {
    let platform = platform_of_run(run, template, gpu_links_from_log);
    let (check, not_checked) = match (coll, platform) {
        _ if run.rows.is_empty() => (None, Some("no result rows".to_string())),
        (None, _) => (
            None,
            Some("the log does not name the collective; pass --collective".to_string()),
        ),
        (_, None) => (
            None,
            Some("ranks are not listed or do not divide evenly over the hosts".to_string()),
        ),
        (Some(c), Some(p)) => {
            let rc = check(run, c, &p, force);
            if rc.sizes.is_empty() {
                let why = match force {
                    Some((al, pr)) => format!(
                        "the model has no {}/{} for {c:?} on this platform",
                        al.nccl_name(),
                        pr.nccl_name()
                    ),
                    None => format!("the model has no algorithm for {c:?} on this platform"),
                };
                (None, Some(why))
            } else {
                (Some(rc), None)
            }
        }
    };
    let slow_sizes = check.as_ref().map_or(0, |c| c.slow().count());
    let corrupt_sizes = check.as_ref().map_or_else(
        || run.rows.iter().filter(|r| r.wrong() > 0).count(),
        |c| c.corrupt().count(),
    );
    RunReport {
        line: run.line,
        name: run.name.as_deref(),
        nccl_version: run.nccl_version.as_deref(),
        nodes: run.hosts().len(),
        ranks: run.nranks(),
        gpu: run.gpu_model(),
        check,
        not_checked,
        avg_busbw_gbs: run.avg_busbw_gbs,
        failures: &run.failures,
        slow_sizes,
        corrupt_sizes,
    }
}
