//! `xirang bench --scale`: the simulator on fabrics from 128 to 16,384 GPUs.
//!
//! Every case is a scenario written to a temporary directory and run by a fresh child
//! process (`xirang bench --child calendar --runs 1 FILE`), so that its peak memory is its
//! own; with `--reference-binary` a previous build runs the same files in the same way,
//! beside the current one. The cases:
//!
//! - `ring-su-N` and `tree-su-N`: NCCL ring and double binary tree AllReduce of 256 MiB
//!   over 8 channels across N GPUs of rail-optimized scalable units (32 hosts of 8 GPUs and
//!   8 x 400G NICs, radix-64 switches: `scenarios/rail-*gpu.toml` are three of them);
//! - `ring-classic-N`: the fabric the scale issue measured (one group of rail leaves of
//!   unbounded radix, 8 spines), the one older binaries can read, up to 1,024 GPUs;
//! - `perm-kK`: a random permutation of 4 MB flows on a k-ary fat tree at 100 Gbit/s.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use serde::Serialize;

use super::Measurement;
use crate::Outcome;
use crate::cli::BenchArgs;

/// The GPU counts of the collective cases.
const GPU_COUNTS: [u32; 8] = [128, 256, 512, 1024, 2048, 4096, 8192, 16384];
/// The classic fabric is the one the table measured, up to this size.
const CLASSIC_MAX_GPUS: u32 = 1024;
/// Fat-tree radices of the permutation cases (k = 32 is 8,192 hosts).
const FAT_TREE_K: [u32; 3] = [8, 16, 32];

struct Case {
    name: String,
    gpus: u32,
    text: String,
}

fn collective(name: &str, topology: &str, algorithm: &str) -> String {
    format!(
        "name = \"{name}\"\n{topology}\n[workloads.allreduce.collective]\nop = \"all_reduce\"\n\
         algorithm = \"{algorithm}\"\nbytes = 268_435_456\nchannels = 8\nclass = \"training\"\n\n[run]\nseed = 1\n"
    )
}

fn cases(max_gpus: u32) -> Vec<Case> {
    let host = "[topology.rail_optimized.host]\ngpus = 8\nnics = 8\n";
    let mut v = Vec::new();
    for gpus in GPU_COUNTS.into_iter().filter(|g| *g <= max_gpus) {
        let hosts = gpus / 8;
        let su = format!(
            "[topology.rail_optimized]\nhosts = {hosts}\nhost_rate_gbps = 400\nfabric_rate_gbps = 400\nlink_delay_ns = 500\n\n{host}"
        );
        for alg in ["ring", "tree"] {
            let name = format!("{alg}-su-{gpus}");
            v.push(Case {
                text: collective(&name, &su, alg),
                name,
                gpus,
            });
        }
        if gpus <= CLASSIC_MAX_GPUS {
            let classic = format!(
                "[topology.rail_optimized]\nhosts = {hosts}\nspines = 8\nhost_rate_gbps = 400\nfabric_rate_gbps = 400\nlink_delay_ns = 500\n\n{host}"
            );
            let name = format!("ring-classic-{gpus}");
            v.push(Case {
                text: collective(&name, &classic, "ring"),
                name,
                gpus,
            });
        }
    }
    for k in FAT_TREE_K {
        let hosts = k * k * k / 4;
        if hosts > max_gpus {
            continue;
        }
        let name = format!("perm-k{k}");
        v.push(Case {
            text: format!(
                "name = \"{name}\"\n[topology.fat_tree]\nk = {k}\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\n\
                 link_delay_ns = 1000\n\n[workloads.permutation.permutation]\nbytes = 4_000_000\nclass = \"training\"\n\n[run]\nseed = 1\n"
            ),
            name,
            gpus: hosts,
        });
    }
    v
}

/// One row: a case run by one binary.
#[derive(Debug, Serialize)]
struct Row {
    case: String,
    gpus: u32,
    binary: String,
    /// The figures, or why the binary could not run the case.
    result: std::result::Result<Measurement, String>,
}

fn measure(exe: &Path, file: &Path) -> std::result::Result<Measurement, String> {
    measure_threads(exe, file, None)
}

/// One run of `file` in a child process, on `threads` threads (`None`: the child's default,
/// serial, and an argument older binaries understand).
fn measure_threads(
    exe: &Path,
    file: &Path,
    threads: Option<usize>,
) -> std::result::Result<Measurement, String> {
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "--child", "calendar", "--runs", "1"]);
    if let Some(t) = threads {
        cmd.args(["--threads", &t.to_string()]);
    }
    let out = cmd
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("failed").trim().to_string());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("unreadable figures: {e}"))
}

pub(crate) fn run(a: &BenchArgs) -> Result<Outcome> {
    let dir = tempfile::tempdir().context("creating a directory for the scale scenarios")?;
    let exe = std::env::current_exe().context("locating the xirang binary")?;
    let mut binaries: Vec<(String, PathBuf)> = vec![("this build".to_string(), exe)];
    if let Some(r) = &a.reference_binary {
        binaries.push((r.display().to_string(), r.clone()));
    }
    let mut rows = Vec::new();
    let all = cases(a.max_gpus);
    let chosen: Vec<&Case> = all
        .iter()
        .filter(|c| a.only.as_deref().is_none_or(|o| c.name.contains(o)))
        .collect();
    only_matched(
        a.only.as_deref(),
        chosen.is_empty(),
        all.iter().map(|c| c.name.as_str()),
    )?;
    for (i, c) in chosen.iter().enumerate() {
        let file = dir.path().join(format!("{}.toml", c.name));
        std::fs::write(&file, &c.text).with_context(|| format!("writing {}", file.display()))?;
        for (label, bin) in &binaries {
            let result = measure(bin, &file);
            if !a.json {
                match &result {
                    Ok(m) => eprintln!(
                        "[{}/{}] {} [{label}]: {:.1} s, {:.2} M packet-hops/s, {:.0} MB",
                        i + 1,
                        chosen.len(),
                        c.name,
                        m.best_wall_s,
                        m.packet_hops_per_s / 1e6,
                        m.peak_rss_bytes as f64 / 1e6
                    ),
                    Err(e) => eprintln!("[{}/{}] {} [{label}]: {e}", i + 1, chosen.len(), c.name),
                }
            }
            rows.push(Row {
                case: c.name.clone(),
                gpus: c.gpus,
                binary: label.clone(),
                result,
            });
        }
    }
    if a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "case": r.case, "gpus": r.gpus, "binary": r.binary,
                    "figures": r.result.as_ref().ok(), "error": r.result.as_ref().err(),
                })
            })
            .collect();
        crate::cmd::out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
        return Ok(Outcome::Clean);
    }
    let header = [
        "case",
        "GPUs or hosts",
        "binary",
        "M packet-hops",
        "wall s",
        "M events/s",
        "M packet-hops/s",
        "peak RSS MB",
        "B per packet in flight",
        "peak transfers in flight",
        "simulated ms",
    ];
    let cells = |r: &Row| -> Vec<String> {
        let mut v = vec![r.case.clone(), r.gpus.to_string(), r.binary.clone()];
        match &r.result {
            Ok(m) => v.extend([
                format!("{:.1}", m.packet_hops as f64 / 1e6),
                format!("{:.1}", m.best_wall_s),
                format!("{:.2}", m.events_per_s / 1e6),
                format!("{:.2}", m.packet_hops_per_s / 1e6),
                format!("{:.0}", m.peak_rss_bytes as f64 / 1e6),
                format!("{:.0}", m.bytes_per_packet_in_flight),
                m.peak_transfers_in_flight
                    .map_or("-".to_string(), |p| p.to_string()),
                m.sim_time_ps
                    .map_or("-".to_string(), |t| format!("{:.3}", t as f64 / 1e9)),
            ]),
            Err(e) => {
                v.push(format!("cannot run it: {e}"));
                v.extend(std::iter::repeat_n(String::new(), header.len() - 4));
            }
        }
        v
    };
    crate::cmd::out(&render_table(&header, rows.iter().map(cells), a.markdown))?;
    Ok(Outcome::Clean)
}

/// The cases of `bench --parallel`: the two large cases and a small one, where
/// synchronization costs the most for what it divides.
const PARALLEL_CASES: [&str; 2] = ["ring-su-1024", "perm-k16"];
/// The largest fabric among them, in GPUs or hosts.
const PARALLEL_MAX_GPUS: u32 = 1024;
/// The small case of `bench --parallel`, relative to the working directory.
const PARALLEL_SMALL: &str = "scenarios/reference/perm128-4mb-dcqcn.toml";

/// A case's runs on one thread count.
#[derive(Debug, Default, Serialize)]
struct Side {
    walls_s: Vec<f64>,
    peak_rss_bytes: u64,
    windows: Option<u64>,
    digest: Option<String>,
}

impl Side {
    fn add(&mut self, m: &Measurement) {
        self.walls_s.push(m.best_wall_s);
        self.peak_rss_bytes = self.peak_rss_bytes.max(m.peak_rss_bytes);
        self.windows = m.windows;
        self.digest.clone_from(&m.digest);
    }
    fn best(&self) -> f64 {
        self.walls_s.iter().copied().fold(f64::INFINITY, f64::min)
    }
    fn median(&self) -> f64 {
        let mut w = self.walls_s.clone();
        w.sort_by(f64::total_cmp);
        w.get(w.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

#[derive(Debug, Serialize)]
struct ParallelRow {
    case: String,
    threads: usize,
    serial: Side,
    parallel: Side,
    /// Serial median wall over parallel median wall.
    speedup_median: f64,
    /// Serial best wall over parallel best wall.
    speedup_best: f64,
    same_results: bool,
}

/// `xirang bench --parallel`: serial and threaded runs of the same files, alternating in
/// fresh processes so that a noisy machine slows both alike.
pub(crate) fn run_parallel(a: &BenchArgs) -> Result<Outcome> {
    let dir = tempfile::tempdir().context("creating a directory for the benchmark scenarios")?;
    let exe = std::env::current_exe().context("locating the xirang binary")?;
    let all = cases(PARALLEL_MAX_GPUS);
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for name in PARALLEL_CASES {
        let c = all
            .iter()
            .find(|c| c.name == name)
            .expect("invariant: the parallel cases are scale cases");
        let file = dir.path().join(format!("{}.toml", c.name));
        std::fs::write(&file, &c.text).with_context(|| format!("writing {}", file.display()))?;
        files.push((c.name.clone(), file));
    }
    files.push(("perm128".to_string(), PathBuf::from(PARALLEL_SMALL)));
    let names: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    files.retain(|(n, _)| a.only.as_deref().is_none_or(|o| n.contains(o)));
    only_matched(
        a.only.as_deref(),
        files.is_empty(),
        names.iter().map(String::as_str),
    )?;
    let threads = a.threads.unwrap_or(2);
    let mut rows = Vec::new();
    for (i, (name, file)) in files.iter().enumerate() {
        let mut serial = Side::default();
        let mut parallel = Side::default();
        for run in 0..a.runs {
            for (side, threads) in [(&mut serial, Some(1)), (&mut parallel, Some(threads))] {
                let m = measure_threads(&exe, file, threads)
                    .map_err(|e| anyhow::anyhow!("{name} on {} threads: {e}", threads.unwrap_or(1)))?;
                if !a.json {
                    eprintln!(
                        "[{}/{}] {name} run {}/{} on {} thread(s): {:.2} s",
                        i + 1,
                        files.len(),
                        run + 1,
                        a.runs,
                        threads.unwrap_or(1),
                        m.best_wall_s
                    );
                }
                side.add(&m);
            }
        }
        rows.push(ParallelRow {
            case: name.clone(),
            threads,
            speedup_median: serial.median() / parallel.median(),
            speedup_best: serial.best() / parallel.best(),
            same_results: serial.digest.is_some() && serial.digest == parallel.digest,
            serial,
            parallel,
        });
    }
    if a.json {
        crate::cmd::out(&(serde_json::to_string_pretty(&rows)? + "\n"))?;
        return Ok(Outcome::Clean);
    }
    let header = [
        "case",
        "threads",
        "serial s (best, median)",
        "parallel s (best, median)",
        "speedup (best, median)",
        "windows",
        "peak RSS MB (serial, parallel)",
        "same results",
    ];
    let cells = |r: &ParallelRow| -> Vec<String> {
        vec![
            r.case.clone(),
            r.threads.to_string(),
            format!("{:.2}, {:.2}", r.serial.best(), r.serial.median()),
            format!("{:.2}, {:.2}", r.parallel.best(), r.parallel.median()),
            format!("{:.2}x, {:.2}x", r.speedup_best, r.speedup_median),
            r.parallel.windows.map_or("-".to_string(), |w| w.to_string()),
            format!(
                "{:.0}, {:.0}",
                r.serial.peak_rss_bytes as f64 / 1e6,
                r.parallel.peak_rss_bytes as f64 / 1e6
            ),
            if r.same_results { "yes" } else { "NO" }.to_string(),
        ]
    };
    crate::cmd::out(&render_table(&header, rows.iter().map(cells), a.markdown))?;
    if rows.iter().any(|r| !r.same_results) {
        anyhow::bail!("a parallel run's results differ from the serial run's");
    }
    Ok(Outcome::Clean)
}

/// A table of `header` and `rows`, as markdown (for BENCHMARKS.md) or for the terminal.
fn render_table(header: &[&str], rows: impl Iterator<Item = Vec<String>>, markdown: bool) -> String {
    if markdown {
        let mut t = format!("| {} |\n|{}\n", header.join(" | "), "---|".repeat(header.len()));
        for r in rows {
            t.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        t
    } else {
        let mut t = crate::cmd::table(header);
        for r in rows {
            t.add_row(r);
        }
        format!("{t}\n")
    }
}

/// `--only TEXT` that matched no case is an error naming the cases (an empty table with
/// exit 0 looked like a run).
fn only_matched<'a>(only: Option<&str>, none: bool, names: impl Iterator<Item = &'a str>) -> Result<()> {
    match only {
        Some(o) if none => {
            let names: Vec<&str> = names.collect();
            let hint = xirang_fabric::diag::closest(o, names.iter().copied())
                .map(|c| format!("did you mean `{c}`? "))
                .unwrap_or_default();
            anyhow::bail!(
                "--only {o}: no case name contains it; {hint}the cases are {}",
                names.join(", ")
            )
        }
        _ => Ok(()),
    }
}
