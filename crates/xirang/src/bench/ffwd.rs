//! `xirang bench --fast-forward`: fast-forward against the exact run, in one benchmark.
//!
//! Each scenario runs exactly and with fast-forward (`engine::ffwd`), alternately, each run
//! in a fresh child process (`xirang bench --child exact|ffwd`), `--runs` times. The table
//! has the wall times and speedup, how much simulated time was skipped, and the
//! differences of what the run reports: every collective's time, the flows' mean and p99
//! completion times, every counter's total over the ports (those the exact run counted at
//! least [`COUNTER_FLOOR`] of, a few events being no rate, and not levels such as
//! watermarks), and whether every transfer was done. These are the validation figures: collective times and mean FCT
//! within 1 %, FCT p99 and counters within 3 %.
//!
//! A scenario that samples (`[run] sample_interval_us`) is compared sample by sample too
//! ([`Sampled`]): each counter's total over the ports at every sample time both runs
//! have, and the QPs' mean rate at every time the exact run has any, held to the
//! counters' 3 %. Two figures are shown, not judged: how many QP rates the fast-forwarded
//! run lists against the exact run at the same times (a sample a skip makes up lists
//! every QP of the collective, where the exact run lists those with a message posted at
//! that instant), and the share of the transfers the exact run's rate samples name that
//! the fast-forwarded run's name too (a made-up sample names a transfer to within one,
//! `engine::sampling`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::Measurement;
use crate::Outcome;
use crate::cli::BenchArgs;
use xirang_sim::counters::LEVELS;

/// The scenarios of `bench --fast-forward` without any: the 1,024-GPU ring, where a skip
/// pays, and the default reference cases, which are not steady for long (the issue asks
/// that they be no slower than exact by more than 3 %).
const DEFAULT_SCENARIOS: [&str; 4] = [
    "scenarios/rail-1024gpu.toml",
    "scenarios/reference/incast16-16mb-dcqcn.toml",
    "scenarios/reference/perm128-4mb-dcqcn.toml",
    "scenarios/reference/websearch-320h-dcqcn.toml",
];

/// The shipped scenarios of `--matrix`: every reference case (incast, permutation and
/// WebSearch under each congestion control), the default scenario (training beside
/// inference), and the tuning scenarios (the run with faults is generated:
/// [`MATRIX_FAULT`]).
const MATRIX_SHIPPED: [&str; 20] = [
    "scenarios/reference/incast16-16mb-dcqcn.toml",
    "scenarios/reference/incast16-16mb-dctcp.toml",
    "scenarios/reference/incast16-16mb-hpcc.toml",
    "scenarios/reference/incast16-16mb-timely.toml",
    "scenarios/reference/incast16-4mb-dcqcn.toml",
    "scenarios/reference/incast16-4mb-dctcp.toml",
    "scenarios/reference/incast16-4mb-hpcc.toml",
    "scenarios/reference/incast16-4mb-timely.toml",
    "scenarios/reference/perm128-4mb-dcqcn.toml",
    "scenarios/reference/perm128-4mb-dctcp.toml",
    "scenarios/reference/perm128-4mb-hpcc.toml",
    "scenarios/reference/perm128-4mb-timely.toml",
    "scenarios/reference/websearch-320h-dcqcn.toml",
    "scenarios/reference/websearch-320h-dctcp.toml",
    "scenarios/reference/websearch-320h-hpcc.toml",
    "scenarios/reference/websearch-320h-timely.toml",
    "scenarios/default.toml",
    "scenarios/shallow-buffer.toml",
    "scenarios/storage-incast.toml",
    "scenarios/rail-512gpu-mix.toml",
];
/// The generated collectives of `--matrix`: GPUs, bytes and algorithms.
const MATRIX_GPUS: [u32; 3] = [16, 128, 1024];
const MATRIX_BYTES: [(u64, &str); 3] = [(1 << 20, "1m"), (64 << 20, "64m"), (1 << 30, "1g")];
const MATRIX_ALGORITHMS: [&str; 3] = ["ring", "tree", "hierarchical"];

/// The matrix's AllReduce cases as scenario files in `dir`: rail-optimized scalable units
/// of 8-GPU hosts at 400 Gbit/s, 8 channels, transfer records off (fast-forward does not
/// make them up); and the 64 MiB rings again over [`MATRIX_ITERATIONS`] iterations,
/// with flows beside them and sampled (128 and 1,024 GPUs), and with ECN marking and
/// with a fault (128 GPUs).
fn matrix_cases(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for gpus in MATRIX_GPUS {
        for (bytes, b) in MATRIX_BYTES {
            for alg in MATRIX_ALGORITHMS {
                let name = format!("{alg}-{gpus}gpu-{b}");
                let text = format!(
                    "name = \"{name}\"\n[topology.rail_optimized]\nhosts = {hosts}\nhost_rate_gbps = 400\n\
                     fabric_rate_gbps = 400\nlink_delay_ns = 500\n[topology.rail_optimized.host]\ngpus = 8\nnics = 8\n\n\
                     [workloads.allreduce.collective]\nop = \"all_reduce\"\nalgorithm = \"{alg}\"\nbytes = {bytes}\n\
                     channels = 8\nclass = \"training\"\n\n[run]\nseed = 1\ntransfer_records = 0\n",
                    hosts = gpus / 8
                );
                // A case and its variants: `name-suffix`, the base's text changed.
                let mut write = |suffix: &str, text: String| -> Result<()> {
                    let case = format!("{name}{suffix}");
                    let file = dir.join(format!("{case}.toml"));
                    let text = text.replacen(&format!("name = \"{name}\""), &format!("name = \"{case}\""), 1);
                    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
                    files.push(file);
                    Ok(())
                };
                write("", text.clone())?;
                if alg == "ring" && bytes == 64 << 20 && gpus == 128 {
                    // DCQCN marking: the ring's crossings between groups of hosts are
                    // bottlenecks, whose queues ECN marks from 20 KB (MATRIX_ECN).
                    let at = "fabric_rate_gbps = 400\n";
                    debug_assert!(text.contains(at));
                    write("-ecn", text.replacen(at, MATRIX_ECN_FABRIC, 1) + MATRIX_ECN)?;
                    // A run with faults: a NIC link at half its rate throughout, a
                    // steady state like any other (faults are interrupts).
                    write("-faults", text.clone() + MATRIX_FAULT)?;
                }
                if alg == "ring" && bytes == 64 << 20 && gpus >= 128 {
                    // A training loop: the same AllReduce again and again, whose later
                    // phases the memo of steady states serves.
                    let looped = text.replace(
                        "class = \"training\"\n",
                        &format!("class = \"training\"\niterations = {MATRIX_ITERATIONS}\n"),
                    );
                    write(&format!("-x{MATRIX_ITERATIONS}"), looped)?;
                    // Flows are interrupts: the ring skips between them.
                    write("-flows", text.clone() + &matrix_flows(gpus / 8))?;
                    // Samples at the tune report's cadence: those in skipped time are
                    // made up.
                    let sampled = text.replace(
                        "transfer_records = 0\n",
                        &format!("transfer_records = 0\nsample_interval_us = {MATRIX_SAMPLE_US}\n"),
                    );
                    write("-sampled", sampled)?;
                }
            }
        }
    }
    Ok(files)
}

/// Flows beside a matrix ring on `hosts` hosts: [`MATRIX_FLOWS`] messages of 2 MB
/// between hosts half the fabric apart, one every 200 µs from 200 µs, so that some
/// start while the ring is steady and some while it is not.
fn matrix_flows(hosts: u32) -> String {
    let mut s = String::from("\n[workloads.rpc.flows]\nclass = \"training\"\nlist = [\n");
    for k in 0..MATRIX_FLOWS {
        let src = (k * 3) % hosts;
        let dst = (src + hosts / 2) % hosts;
        s.push_str(&format!(
            "  {{ src = \"h{src}\", dst = \"h{dst}\", bytes = 2_000_000, start_us = {} }},\n",
            200 * (k + 1)
        ));
    }
    s + "]\n"
}

/// The fabric of the matrix's case with ECN marking: groups of 4 hosts under leaves of
/// their own, joined by one spine at a quarter of the NICs' rate, so the ring's crossings
/// between groups queue.
const MATRIX_ECN_FABRIC: &str = "fabric_rate_gbps = 100\nhosts_per_group = 4\nspines = 1\n";

/// Its marking: DCQCN on the ring's class, and ECN from 20 KB to 200 KB at up to 20 %
/// (the reference cases' pmax, scaled down from their 400 KB and 1.6 MB so that a
/// ring's queues, a few slices deep, reach it).
const MATRIX_ECN: &str = "\n[config.ecn.leaf]\nkmin_bytes = 20_000\nkmax_bytes = 200_000\npmax = 0.2\n\n\
[config.ecn.spine]\nkmin_bytes = 20_000\nkmax_bytes = 200_000\npmax = 0.2\n\n\
[config.classes.training]\npriority = 3\ncc = \"dcqcn\"\n";

/// The fault of the matrix's case with faults: one NIC link trained down to half its rate.
const MATRIX_FAULT: &str = "\n[[faults]]\nkind = \"slow_link\"\ntarget = \"h0/mlx5_0\"\nrate_gbps = 200\n";

/// The sampling interval of a matrix case that samples: the tune report's
/// (`xirang_tune::report::SAMPLE_US`).
const MATRIX_SAMPLE_US: u32 = 20;

/// Iterations of a matrix case that repeats its collective.
const MATRIX_ITERATIONS: u32 = 4;

/// Flows of a matrix case with flows.
const MATRIX_FLOWS: u32 = 8;

/// Counters whose exact total is below this are not judged.
pub(crate) const COUNTER_FLOOR: u64 = 1000;

/// What a run reports that fast-forward must keep: the figures a child adds to its
/// measurement.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Reported {
    /// Each collective's time, ps (None: unfinished).
    pub(crate) collective_ps: Vec<Option<u64>>,
    /// Every collective finished and every flow is done.
    pub(crate) all_done: bool,
    /// Mean and p99 completion time of the finished flows, ps.
    pub(crate) fct_mean_ps: Option<f64>,
    pub(crate) fct_p99_ps: Option<u64>,
    /// Every counter's total over the ports, by name.
    pub(crate) counters: BTreeMap<String, u64>,
    /// What fast-forward did.
    pub(crate) fast_forward: Option<xirang_sim::engine::ffwd::FastForwardReport>,
    /// The samples, when the run takes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) samples: Option<Sampled>,
}

/// A run's samples, in the form the comparison reads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Sampled {
    /// Each counter's total over the ports at each sample time (ps), by name: a sample
    /// lists the counters that changed, the others keep their last value.
    pub(crate) counters: BTreeMap<String, BTreeMap<u64, u64>>,
    /// At each sample time with a sending QP: the QPs' rates summed (bit/s), how many,
    /// and the flows and transfers they name (ids).
    pub(crate) rates: BTreeMap<u64, (f64, u64, Vec<u64>)>,
}

impl Sampled {
    fn of(r: &xirang_sim::RunResult) -> Option<Sampled> {
        if r.counter_series.is_empty() && r.rate_series.is_empty() {
            return None;
        }
        let mut s = Sampled::default();
        let mut last: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        let series = &r.counter_series;
        let mut i = 0;
        while i < series.len() {
            let t = series[i].0;
            while i < series.len() && series[i].0 == t {
                let c = &series[i].1;
                last.insert((c.entity.as_str(), c.name.as_str()), c.value);
                i += 1;
            }
            for (&(_, name), &v) in &last {
                *s.counters
                    .entry(name.to_string())
                    .or_default()
                    .entry(t)
                    .or_default() += v;
            }
        }
        for &(t, id, _, rate) in &r.rate_series {
            let e = s.rates.entry(t).or_default();
            e.0 += rate;
            e.1 += 1;
            e.2.push(id);
        }
        for (_, _, ids) in s.rates.values_mut() {
            ids.sort_unstable();
            ids.dedup();
        }
        Some(s)
    }
}

/// The fast-forwarded run's samples against the exact run's.
#[derive(Debug, Serialize)]
struct SampleDiff {
    /// The counter furthest from the exact run's at a sample time (its total over the
    /// ports, where the exact run's is at least [`COUNTER_FLOOR`]), its time in µs and its
    /// difference in percent.
    worst_counter: Option<(String, f64, f64)>,
    /// The largest difference of the QPs' mean rate at a sample time, percent.
    worst_rate_pct: Option<f64>,
    /// Sample times at which the exact run has rates and the fast-forwarded run none.
    rates_missing: usize,
    /// QP rates the fast-forwarded run lists over those the exact run lists, at the
    /// times both have.
    listed: f64,
    /// Of the transfers the exact run's rate samples name, the share the fast-forwarded
    /// run's samples at the same time name too, and the share they name to within one
    /// (the transfer before or after).
    names_matched: f64,
    names_near: f64,
}

impl SampleDiff {
    fn of(e: &Sampled, f: &Sampled) -> SampleDiff {
        let mut worst_counter: Option<(String, f64, f64)> = None;
        for (name, series) in e.counters.iter().filter(|(k, _)| !LEVELS.contains(&k.as_str())) {
            let Some(fs) = f.counters.get(name) else { continue };
            for (t, &a) in series.iter().filter(|(_, a)| **a >= COUNTER_FLOOR) {
                let Some(&b) = fs.get(t) else { continue };
                let d = diff_pct(a as f64, b as f64);
                if worst_counter.as_ref().is_none_or(|w| d.abs() > w.2.abs()) {
                    worst_counter = Some((name.clone(), *t as f64 / 1e6, d));
                }
            }
        }
        let (mut worst_rate_pct, mut rates_missing, mut named, mut all) = (None::<f64>, 0, 0, 0);
        let mut near = 0;
        let (mut listed_e, mut listed_f) = (0, 0);
        for (t, (a, na, ids)) in &e.rates {
            let Some((b, nb, fids)) = f.rates.get(t) else {
                rates_missing += 1;
                continue;
            };
            listed_e += na;
            listed_f += nb;
            let d = diff_pct(a / *na as f64, b / (*nb).max(1) as f64);
            if worst_rate_pct.is_none_or(|w| d.abs() > w.abs()) {
                worst_rate_pct = Some(d);
            }
            let has = |i: u64| fids.binary_search(&i).is_ok();
            named += ids.iter().filter(|&&i| has(i)).count();
            near += ids
                .iter()
                .filter(|&&i| has(i) || has(i + 1) || i.checked_sub(1).is_some_and(has))
                .count();
            all += ids.len();
        }
        SampleDiff {
            worst_counter,
            worst_rate_pct,
            rates_missing,
            listed: listed_f as f64 / listed_e.max(1) as f64,
            names_matched: if all == 0 { 1.0 } else { named as f64 / all as f64 },
            names_near: if all == 0 { 1.0 } else { near as f64 / all as f64 },
        }
    }

    /// Within the counters' tolerance, 3 %, and rates at every time the exact run has
    /// them.
    fn within(&self) -> bool {
        self.rates_missing == 0
            && self.worst_rate_pct.is_none_or(|d| d.abs() <= 3.0)
            && self.worst_counter.as_ref().is_none_or(|w| w.2.abs() <= 3.0)
    }
}

impl Reported {
    pub(crate) fn of(r: &xirang_sim::RunResult) -> Reported {
        let mut fcts: Vec<u64> = r.flows.iter().filter_map(|f| f.fct_ps).collect();
        fcts.sort_unstable();
        let mut counters = BTreeMap::new();
        for c in &r.counters {
            *counters.entry(c.name.clone()).or_default() += c.value;
        }
        Reported {
            collective_ps: r.collectives.iter().map(|c| c.time_ps).collect(),
            all_done: r.collectives.iter().all(|c| c.finished) && r.flows.iter().all(|f| f.fct_ps.is_some()),
            fct_mean_ps: (!fcts.is_empty())
                .then(|| fcts.iter().map(|&f| f as f64).sum::<f64>() / fcts.len() as f64),
            fct_p99_ps: (!fcts.is_empty()).then(|| fcts[((fcts.len() * 99).div_ceil(100)).max(1) - 1]),
            counters,
            fast_forward: r.engine.fast_forward.clone(),
            samples: Sampled::of(r),
        }
    }
}

/// Relative difference of `b` from `a`, percent.
fn diff_pct(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (b - a) / a.abs().max(f64::MIN_POSITIVE) * 100.0
    }
}

/// One scenario's comparison.
#[derive(Debug, Serialize)]
struct Row {
    scenario: String,
    runs: u32,
    exact_best_s: f64,
    exact_median_s: f64,
    ffwd_best_s: f64,
    ffwd_median_s: f64,
    speedup_median: f64,
    skipped_share: f64,
    skips: u64,
    /// Why the run could not skip at all.
    off: Option<String>,
    /// Largest difference of a collective's time, percent (None: no collective).
    collective_diff_pct: Option<f64>,
    fct_mean_diff_pct: Option<f64>,
    fct_p99_diff_pct: Option<f64>,
    /// The counter furthest from the exact run's, and its difference in percent.
    worst_counter: Option<(String, f64)>,
    all_done: bool,
    /// The samples compared, when the scenario samples.
    samples: Option<SampleDiff>,
    /// Within the tolerances.
    within: bool,
}

fn child(exe: &Path, file: &Path, engine: &str) -> Result<Measurement> {
    let out = Command::new(exe)
        .args(["bench", "--child", engine, "--runs", "1"])
        .arg(file)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!("{} [{engine}]: {}", file.display(), err.trim());
    }
    serde_json::from_slice(&out.stdout).context("reading the child's figures")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn compare(scenario: String, runs: u32, exact: &[Measurement], ffwd: &[Measurement]) -> Row {
    let wall = |ms: &[Measurement]| ms.iter().map(|m| m.best_wall_s).collect::<Vec<_>>();
    let (mut we, mut wf) = (wall(exact), wall(ffwd));
    let (e, f) = (
        exact[0].reported.clone().unwrap_or_default(),
        ffwd[0].reported.clone().unwrap_or_default(),
    );
    let collective_diff_pct = e
        .collective_ps
        .iter()
        .zip(&f.collective_ps)
        .filter_map(|(a, b)| Some(diff_pct(*a.as_ref()? as f64, b.unwrap_or(0) as f64)))
        .max_by(|a, b| a.abs().total_cmp(&b.abs()));
    let fct_mean_diff_pct = e.fct_mean_ps.map(|a| diff_pct(a, f.fct_mean_ps.unwrap_or(0.0)));
    let fct_p99_diff_pct = e
        .fct_p99_ps
        .map(|a| diff_pct(a as f64, f.fct_p99_ps.unwrap_or(0) as f64));
    let worst_counter = e
        .counters
        .iter()
        .filter(|(k, a)| **a >= COUNTER_FLOOR && !LEVELS.contains(&k.as_str()))
        .map(|(k, &a)| {
            (
                k.clone(),
                diff_pct(a as f64, f.counters.get(k).copied().unwrap_or(0) as f64),
            )
        })
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()));
    let ff = f.fast_forward.clone().unwrap_or_default();
    let samples = e
        .samples
        .as_ref()
        .map(|es| SampleDiff::of(es, f.samples.as_ref().unwrap_or(&Sampled::default())));
    let within = f.all_done == e.all_done
        && samples.as_ref().is_none_or(SampleDiff::within)
        && collective_diff_pct.is_none_or(|d| d.abs() <= 1.0)
        && fct_mean_diff_pct.is_none_or(|d| d.abs() <= 1.0)
        && fct_p99_diff_pct.is_none_or(|d| d.abs() <= 3.0)
        && worst_counter.as_ref().is_none_or(|(_, d)| d.abs() <= 3.0);
    let (em, fm) = (median(&mut we), median(&mut wf));
    Row {
        scenario,
        runs,
        exact_best_s: we[0],
        exact_median_s: em,
        ffwd_best_s: wf[0],
        ffwd_median_s: fm,
        speedup_median: em / fm,
        skipped_share: ff.skipped_share,
        skips: ff.skips,
        off: ff.off,
        collective_diff_pct,
        fct_mean_diff_pct,
        fct_p99_diff_pct,
        worst_counter,
        all_done: f.all_done,
        samples,
        within,
    }
}

pub(crate) fn run(a: &BenchArgs) -> Result<Outcome> {
    let exe = std::env::current_exe().context("locating the xirang binary")?;
    let dir = tempfile::tempdir().context("creating a directory for the matrix's scenarios")?;
    let mut scenarios: Vec<PathBuf> = if a.matrix {
        let mut v: Vec<PathBuf> = MATRIX_SHIPPED.iter().map(PathBuf::from).collect();
        v.extend(matrix_cases(dir.path())?);
        v
    } else if a.scenarios.is_empty() {
        DEFAULT_SCENARIOS.iter().map(PathBuf::from).collect()
    } else {
        a.scenarios.clone()
    };
    if let Some(o) = &a.only {
        scenarios.retain(|s| {
            s.file_stem()
                .is_some_and(|n| n.to_string_lossy().contains(o.as_str()))
        });
        anyhow::ensure!(
            !scenarios.is_empty(),
            "--only {o}: no scenario's file name contains it"
        );
    }
    let mut rows = Vec::new();
    for (i, s) in scenarios.iter().enumerate() {
        let (mut exact, mut ffwd) = (Vec::new(), Vec::new());
        for run in 0..a.runs {
            for (engine, side) in [("exact", &mut exact), ("ffwd", &mut ffwd)] {
                let m = child(&exe, s, engine)?;
                if !a.json {
                    eprintln!(
                        "[{}/{}] {} run {}/{} [{engine}]: {:.2} s",
                        i + 1,
                        scenarios.len(),
                        m.scenario,
                        run + 1,
                        a.runs,
                        m.best_wall_s
                    );
                }
                side.push(m);
            }
        }
        rows.push(compare(exact[0].scenario.clone(), a.runs, &exact, &ffwd));
    }
    if a.json {
        crate::cmd::out(&(serde_json::to_string_pretty(&rows)? + "\n"))?;
        return Ok(Outcome::Clean);
    }
    crate::cmd::out(&table(&rows, a.markdown))?;
    Ok(Outcome::Clean)
}

/// The sample columns of a row: worst counter, rates, transfers named ("-" unsampled).
fn sample_cells(s: Option<&SampleDiff>) -> [String; 3] {
    let Some(s) = s else {
        return ["-".to_string(), "-".to_string(), "-".to_string()];
    };
    [
        s.worst_counter
            .as_ref()
            .map_or("-".to_string(), |(k, t, d)| format!("{k} at {t:.0} us {d:+.3} %")),
        match (s.worst_rate_pct, s.rates_missing) {
            (None, 0) => "-".to_string(),
            (d, 0) => format!("{:+.3} %, {:.2}x listed", d.unwrap_or(0.0), s.listed),
            (d, m) => format!("{:+.3} %, {:.2}x listed, {m} missing", d.unwrap_or(0.0), s.listed),
        },
        format!(
            "{:.1} % ({:.1} % within one)",
            s.names_matched * 100.0,
            s.names_near * 100.0
        ),
    ]
}

fn table(rows: &[Row], markdown: bool) -> String {
    let header = [
        "scenario",
        "exact s",
        "fast-forward s",
        "speedup",
        "skipped",
        "collective",
        "FCT mean",
        "FCT p99",
        "worst counter",
        "all done",
        "within",
    ];
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |d| format!("{d:+.3} %"));
    let sampled = rows.iter().any(|r| r.samples.is_some());
    let mut header = header.to_vec();
    if sampled {
        header.splice(
            header.len() - 1..header.len() - 1,
            ["worst sampled counter", "sampled rates", "transfers named"],
        );
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.scenario.clone(),
                format!("{:.2} ({:.2})", r.exact_median_s, r.exact_best_s),
                format!("{:.2} ({:.2})", r.ffwd_median_s, r.ffwd_best_s),
                format!("{:.2}x", r.speedup_median),
                match &r.off {
                    Some(why) => format!("off: {why}"),
                    None => format!("{:.1} % in {}", r.skipped_share * 100.0, r.skips),
                },
                pct(r.collective_diff_pct),
                pct(r.fct_mean_diff_pct),
                pct(r.fct_p99_diff_pct),
                r.worst_counter
                    .as_ref()
                    .map_or("-".to_string(), |(k, d)| format!("{k} {d:+.3} %")),
                if r.all_done { "yes" } else { "no" }.to_string(),
            ];
            if sampled {
                row.extend(sample_cells(r.samples.as_ref()));
            }
            row.push(if r.within { "yes" } else { "NO" }.to_string());
            row
        })
        .collect();
    let note = "Wall times: median (best) of the runs, each in a fresh process. Differences: \
                fast-forward against exact; tolerances: collective time and FCT mean 1 %, \
                FCT p99 and counters 3 % (counters the exact run counted fewer than 1000 of \
                are not judged).\n";
    let note = if sampled {
        format!(
            "{note}Samples: each counter's total over the ports at each sample time (3 %), the \
             QPs' mean rate at each (3 %; missing: times the exact run has rates and the \
             fast-forwarded run none; listed: QP rates listed against the exact run's, a \
             made-up sample listing every QP of the collective), and the share of the \
             transfers the exact run's rate samples name that the fast-forwarded run's name \
             at the same time, and to within one transfer (not judged: a made-up name follows \
             the skip's pace, and a pace 0.01 % off is a slice off within a few \
             milliseconds).\n"
        )
    } else {
        note.to_string()
    };
    if markdown {
        let mut s = format!("| {} |\n|{}\n", header.join(" | "), "---|".repeat(header.len()));
        for c in cells {
            s.push_str(&format!("| {} |\n", c.join(" | ")));
        }
        return s + "\n" + &note;
    }
    let mut t = crate::cmd::table(&header);
    for c in cells {
        t.add_row(c);
    }
    format!("{t}\n{note}")
}
