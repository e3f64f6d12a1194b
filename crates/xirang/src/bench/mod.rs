//! `xirang bench`: simulator throughput on named scenarios.
//!
//! Each (scenario, engine) pair runs in a fresh child process, so that its peak memory is
//! its own. The figures of the reference simulators (htsim, HPCC ns-3) cannot be re-run
//! here (they are not installable on this machine); the ones published for this kind of
//! machine in scenarios/reference/README.md are printed beside ours, and the same engine
//! with a plain 4-ary heap event queue runs in the same benchmark as the in-run reference.
//!
//! The harness is this module and its two children: `scale` (`xirang bench --scale`, the
//! fabric-size study) and `monitor` (`xirang monitor bench`, the agent against
//! node_exporter). Commands only call their entry points.

mod ffwd;
pub(crate) mod monitor;
mod scale;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::Outcome;
use crate::cli::BenchArgs;

const DEFAULT_SCENARIOS: [&str; 3] = [
    "scenarios/reference/incast16-16mb-dcqcn.toml",
    "scenarios/reference/perm128-4mb-dcqcn.toml",
    "scenarios/reference/websearch-320h-dcqcn.toml",
];

/// Published single-threaded packet-hops/s of the reference simulators on this kind of
/// machine (docs/reference/reference-scenarios.md): (htsim, HPCC ns-3).
fn published(name: &str) -> (Option<f64>, Option<f64>) {
    match name {
        "incast16-16mb-dcqcn" => (Some(2.9e6), Some(0.9e6)),
        "perm128-4mb-dcqcn" => (Some(1.1e6), Some(0.3e6)),
        "websearch-320h-dcqcn" => (None, Some(0.35e6)),
        _ => (None, None),
    }
}

/// One (scenario, engine) measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Measurement {
    pub(crate) scenario: String,
    engine: String,
    runs: u32,
    pub(crate) best_wall_s: f64,
    median_wall_s: f64,
    pub(crate) events: u64,
    pub(crate) packet_hops: u64,
    pub(crate) events_per_s: f64,
    pub(crate) packet_hops_per_s: f64,
    pub(crate) peak_packets_in_flight: usize,
    pub(crate) peak_rss_bytes: u64,
    rss_growth_bytes: u64,
    /// Packet rings (queues and links) at their grown size over peak packets in flight.
    pub(crate) bytes_per_packet_in_flight: f64,
    /// RSS growth over peak packets: an upper bound that also counts routes, flows and
    /// results.
    rss_growth_per_packet: f64,
    /// Simulated time at the end, ps (absent from older binaries' figures).
    #[serde(default)]
    pub(crate) sim_time_ps: Option<u64>,
    /// Most transfers of collectives alive at once.
    #[serde(default)]
    pub(crate) peak_transfers_in_flight: Option<usize>,
    /// Threads the run used (absent from older binaries' figures).
    #[serde(default)]
    pub(crate) threads: Option<usize>,
    /// Windows of a parallel run.
    #[serde(default)]
    pub(crate) windows: Option<u64>,
    /// A hash of the run's results (its summary and per-flow records), to show that runs
    /// on different thread counts gave the same results.
    #[serde(default)]
    pub(crate) digest: Option<String>,
    /// What the run reports, for `bench --fast-forward`'s comparison (exact and ffwd
    /// children).
    #[serde(default)]
    pub(crate) reported: Option<ffwd::Reported>,
}

/// FNV-1a over the run's summary and flow records as JSON: equal digests mean equal
/// results (`tests/parallel.rs` checks the files byte for byte; this is the benchmark's
/// quick check of the same).
fn digest(r: &xirang_sim::RunResult) -> String {
    // FNV-1a 64-bit offset basis and prime (the published FNV parameters).
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let text = serde_json::to_string(&(&r.summary(), &r.flows)).unwrap_or_default();
    let h = text
        .bytes()
        .fold(FNV_OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME));
    format!("{h:016x}")
}

fn rss_bytes(field: &str) -> u64 {
    // /proc/self/status lines such as "VmHWM:     12345 kB".
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn measure_here(path: &Path, engine: &str, runs: u32, threads: usize) -> Result<Measurement> {
    let loaded = xirang_fabric::Scenario::load(path)?;
    let mut opts = xirang_sim::options(&loaded);
    // Every engine but `ffwd` simulates every packet, whatever the scenario's
    // `[run] fast_forward` asks.
    opts.fast_forward = (engine == "ffwd").then(xirang_sim::engine::ffwd::FastForwardCriterion::default);
    let before = rss_bytes("VmRSS:");
    let mut walls = Vec::new();
    let mut last = None;
    let mut windows = None;
    for _ in 0..runs.max(1) {
        let t0 = Instant::now();
        let r = match engine {
            "heap" => xirang_sim::simulate_heap(&loaded, &opts, &mut |_| {}),
            _ if threads > 1 => {
                let (r, report) =
                    xirang_sim::parallel::simulate_threads(&loaded, &opts, threads, threads, &mut |_| {});
                windows = Some(report.stats.windows);
                r
            }
            _ => xirang_sim::simulate(&loaded, &opts, &mut |_| {}),
        };
        walls.push(t0.elapsed().as_secs_f64());
        last = Some(r);
    }
    let r = last.expect("at least one run");
    walls.sort_by(f64::total_cmp);
    let best = walls[0];
    let peak = rss_bytes("VmHWM:");
    let growth = peak.saturating_sub(before);
    Ok(Measurement {
        scenario: loaded.scenario.name.clone(),
        engine: engine.to_string(),
        runs,
        best_wall_s: best,
        median_wall_s: walls[walls.len() / 2],
        events: r.stats.events,
        packet_hops: r.stats.packet_hops,
        events_per_s: r.stats.events as f64 / best,
        packet_hops_per_s: r.stats.packet_hops as f64 / best,
        peak_packets_in_flight: r.engine.peak_packets,
        peak_rss_bytes: peak,
        rss_growth_bytes: growth,
        bytes_per_packet_in_flight: r.engine.packet_ring_bytes as f64 / r.engine.peak_packets.max(1) as f64,
        rss_growth_per_packet: growth as f64 / r.engine.peak_packets.max(1) as f64,
        sim_time_ps: Some(r.stats.sim_time_ps),
        peak_transfers_in_flight: Some(r.engine.peak_transfers_in_flight),
        threads: Some(threads),
        windows,
        digest: Some(digest(&r)),
        reported: matches!(engine, "exact" | "ffwd").then(|| ffwd::Reported::of(&r)),
    })
}

pub(crate) fn run(a: &BenchArgs) -> Result<Outcome> {
    // `--only` picks among the --scale or --parallel cases; alone it was ignored and the
    // whole reference benchmark ran.
    anyhow::ensure!(
        a.only.is_none() || a.scale || a.parallel || a.fast_forward || a.child.is_some(),
        "--only selects among the --scale, --parallel or --fast-forward cases: give one of them"
    );
    if a.scale && a.child.is_none() {
        return scale::run(a);
    }
    if a.mpi_sync {
        #[cfg(feature = "mpi")]
        return crate::mpi::sync_bench(a.json);
        #[cfg(not(feature = "mpi"))]
        bail!("this xirang was built without MPI; build it with `cargo build --release --features mpi`");
    }
    if a.parallel && a.child.is_none() {
        return scale::run_parallel(a);
    }
    if a.fast_forward && a.child.is_none() {
        return ffwd::run(a);
    }
    if let Some(engine) = &a.child {
        let [path] = a.scenarios.as_slice() else {
            bail!("--child takes exactly one scenario")
        };
        let m = measure_here(path, engine, a.runs, a.threads.unwrap_or(1))?;
        crate::cmd::out(&(serde_json::to_string(&m)? + "\n"))?;
        return Ok(Outcome::Clean);
    }
    let scenarios: Vec<PathBuf> = if a.scenarios.is_empty() {
        DEFAULT_SCENARIOS.iter().map(PathBuf::from).collect()
    } else {
        a.scenarios.clone()
    };
    let engines: &[&str] = if a.no_reference {
        &["calendar"]
    } else {
        &["calendar", "heap"]
    };
    let exe = std::env::current_exe().context("locating the xirang binary")?;
    let mut all = Vec::new();
    for s in &scenarios {
        for e in engines {
            let out = Command::new(&exe)
                .args(["bench", "--child", e, "--runs", &a.runs.to_string()])
                .arg(s)
                .output()
                .with_context(|| format!("running the benchmark child for {}", s.display()))?;
            if !out.status.success() {
                bail!("{}: {}", s.display(), String::from_utf8_lossy(&out.stderr).trim());
            }
            let m: Measurement =
                serde_json::from_slice(&out.stdout).context("reading the child's figures")?;
            if !a.json {
                eprintln!(
                    "{} [{}]: {:.2} M packet-hops/s",
                    m.scenario,
                    m.engine,
                    m.packet_hops_per_s / 1e6
                );
            }
            all.push(m);
        }
    }
    if a.json {
        crate::cmd::out(&(serde_json::to_string_pretty(&all)? + "\n"))?;
        return Ok(Outcome::Clean);
    }
    crate::cmd::out(&bench_table(&all))?;
    Ok(Outcome::Clean)
}

/// The figures of every (scenario, engine) pair beside the heap's and the published
/// reference simulators'.
fn bench_table(all: &[Measurement]) -> String {
    let mut t = crate::cmd::table(&[
        "scenario",
        "engine",
        "best s",
        "median s",
        "M events/s",
        "M pkt-hops/s",
        "vs heap",
        "htsim*",
        "ns-3*",
        "peak pkts",
        "B/pkt",
        "RSS B/pkt",
        "peak RSS MB",
    ]);
    for m in all {
        let heap = all
            .iter()
            .find(|x| x.scenario == m.scenario && x.engine == "heap")
            .map(|h| format!("{:.2}x", m.packet_hops_per_s / h.packet_hops_per_s));
        let (htsim, ns3) = published(&m.scenario);
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{:.2}", x / 1e6));
        t.add_row(vec![
            m.scenario.clone(),
            m.engine.clone(),
            format!("{:.3}", m.best_wall_s),
            format!("{:.3}", m.median_wall_s),
            format!("{:.2}", m.events_per_s / 1e6),
            format!("{:.2}", m.packet_hops_per_s / 1e6),
            heap.unwrap_or_else(|| "-".into()),
            f(htsim),
            f(ns3),
            m.peak_packets_in_flight.to_string(),
            format!("{:.0}", m.bytes_per_packet_in_flight),
            format!("{:.0}", m.rss_growth_per_packet),
            format!("{:.1}", m.peak_rss_bytes as f64 / 1e6),
        ]);
    }
    format!(
        "{t}\n* published M packet-hops/s of the reference simulators on this kind of machine \
         (scenarios/reference/README.md), not re-run here.\nB/pkt: memory of the packet rings \
         (queues and links) at their grown size over peak packets in flight. RSS B/pkt: peak \
         RSS growth over peak packets, an upper bound that includes routes, flows and results.\n"
    )
}
