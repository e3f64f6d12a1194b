//! nccl-tests on the twin against real nccl-tests runs (VALIDATION.md, "nccl-tests on the
//! twin"): every fixture with known hardware swept on a scenario of that hardware
//! (`scenarios/nccl-tests/`), size by size. Heavy (minutes): run it with
//!
//! ```sh
//! cargo test --release -p xirang-sim --test sweep_validation -- --ignored --nocapture
//! ```
//!
//! which prints each fixture's table as it finishes (most of an hour). `XIRANG_SWEEP_ONLY=a,b`
//! runs only the tests whose `file#index` contains one of the comma-separated parts;
//! `XIRANG_SWEEP_MAX_RANK_BYTES` changes the largest ranks x bytes simulated.
//!
//! The logs do not say which algorithm and protocol NCCL ran, so each size is simulated
//! with NCCL's tuner's pick (the cost model) and with each of the NCCL algorithms and
//! protocols the simulator runs; the one the measurement matches is the closest of those
//! (a protocol or algorithm switch with size shows as a change in the matching one).
//! Targets (the NCCL-transport issue): from 1 MiB up, busbw within 15 % of the measured
//! with the matching algorithm, within 5 % at the largest size simulated, the time at the
//! smallest sizes within 30 %. A fixture that cannot meet them says why (`cannot`), a
//! size whose miss is known and explained is listed (`KNOWN_MISSES`), and the test fails
//! on any other miss.

use std::path::Path;

use xirang_collective::nccl_tests::{self, TestRun};
use xirang_fabric::config::NcclProto;
use xirang_fabric::scenario::Scenario;
use xirang_sim::sweep::{SizePoint, SweepSpec, run_size, workload_of};

const MIB: u64 = 1 << 20;

/// (fixture, test in the file, scenario, operation, why the targets cannot be met).
type CaseRow = (
    &'static str,
    usize,
    &'static str,
    xirang_collective::schedule::CollectiveOp,
    Option<&'static str>,
);

/// Sizes of a fixture whose miss is known and explained in VALIDATION.md ("nccl-tests on
/// the twin"): (fixture, test in the file, size in bytes). Any other miss fails the test.
const KNOWN_MISSES: &[(&str, usize, u64)] = &[
    // The tree at mid sizes: the engine's tree pipelines better than NCCL's does; the
    // measurement sits between the ring's bound and the engine's tree.
    ("h100-2node-4gpu-hdr-ib-debug-info.txt", 0, 8 << 20),
    ("h100-2node-4gpu-hdr-ib-debug-info.txt", 0, 256 << 20),
    // The 80-GPU rings from 128 MiB: slower mid sizes than the engine's, and a plateau
    // 10-12 % below the ring's bound on the hardware the scenario assumes (the log does
    // not state its network).
    ("h100-10node-80gpu-all-collectives.txt", 1, 134_216_960),
    ("h100-10node-80gpu-all-collectives.txt", 1, 268_435_200),
    ("h100-10node-80gpu-all-collectives.txt", 1, 536_870_400),
    ("h100-10node-80gpu-all-collectives.txt", 1, 1_073_740_800),
    ("h100-10node-80gpu-all-collectives.txt", 1, 2_147_482_880),
    ("h100-10node-80gpu-all-collectives.txt", 2, 134_216_960),
    ("h100-10node-80gpu-all-collectives.txt", 2, 268_435_200),
    ("h100-10node-80gpu-all-collectives.txt", 2, 536_870_400),
    ("h100-10node-80gpu-all-collectives.txt", 2, 1_073_740_800),
    ("h100-10node-80gpu-all-collectives.txt", 2, 2_147_482_880),
];

/// The largest ranks x bytes simulated: a run's work grows with both, and at 80 ranks a
/// 4 GiB AllReduce is hours of the whole comparison (every candidate at every size). Above
/// it a row is shown as not simulated, and the largest size judged is the largest
/// simulated.
const MAX_RANK_BYTES: u64 = 80 * 2 * (1 << 30);

fn cases() -> Vec<CaseRow> {
    use xirang_collective::schedule::CollectiveOp as O;
    vec![
        (
            "h100-2node-4gpu-hdr-ib-debug-info.txt",
            0,
            "hdr-2node-4gpu",
            O::AllReduce,
            None,
        ),
        (
            "a100-2node-8gpu-roce-oci-b4.txt",
            0,
            "a100-2node-8gpu-oci",
            O::AllReduce,
            None,
        ),
        (
            "h100-10node-80gpu-all-collectives.txt",
            0,
            "h100-10node-80gpu",
            O::AllReduce,
            None,
        ),
        (
            "h100-10node-80gpu-all-collectives.txt",
            1,
            "h100-10node-80gpu",
            O::AllGather,
            None,
        ),
        (
            "h100-10node-80gpu-all-collectives.txt",
            2,
            "h100-10node-80gpu",
            O::ReduceScatter,
            None,
        ),
        (
            "h100-2node-8gpu-roce-oci.txt",
            0,
            "h100-2node-8gpu-oci",
            O::AllReduce,
            Some(
                "471 GB/s needs NVLink SHARP (NVLSTree: one buffer per direction on a GPU's NVLink); \
                 the simulator's tree runs its 8-GPU chain over NVLink (two buffers), bound at about 385 GB/s",
            ),
        ),
        (
            "h100-10node-80gpu-all-collectives.txt",
            3,
            "h100-10node-80gpu",
            O::AllToAll,
            None,
        ),
        (
            "h100-10node-80gpu-all-collectives.txt",
            4,
            "h100-10node-80gpu",
            O::SendRecv,
            Some(PAIR_LIMIT),
        ),
        (
            "sendrecv-2node-1gpu-roce400.txt",
            0,
            "pair-2node-1gpu-400g",
            O::SendRecv,
            Some(PAIR_LIMIT),
        ),
        (
            "pair-2node-1gpu-healthy.txt",
            0,
            "pair-2node-1gpu-400g",
            O::AllToAll,
            Some(PAIR_LIMIT),
        ),
        (
            "pair-2node-1gpu-healthy.txt",
            1,
            "pair-2node-1gpu-400g",
            O::SendRecv,
            Some(PAIR_LIMIT),
        ),
        (
            "h100-1node-8gpu-all-collectives.txt",
            1,
            "h100-1node-8gpu",
            O::AllGather,
            None,
        ),
        (
            "h100-1node-8gpu-all-collectives.txt",
            2,
            "h100-1node-8gpu",
            O::ReduceScatter,
            None,
        ),
        (
            "h100-1node-8gpu-all-collectives.txt",
            0,
            "h100-1node-8gpu",
            O::AllReduce,
            Some(
                "482 GB/s is NVLS (NVLink SHARP reduces in the NVSwitch); a ring over NVLink, what the \
                 simulator runs, is bound by NVLink at 360 GB/s",
            ),
        ),
    ]
}

/// Why the one-GPU-per-node fixtures cannot be met on their assumed hardware.
const PAIR_LIMIT: &str = "three independent clusters move 13.5-15.2 GB/s between one GPU and one GPU of \
     another host where a 400 Gbit/s NIC carries 49 (perftest reaches 370 Gbit/s on the same link of \
     `sendrecv-2node-1gpu-roce400.txt`): a limit on the hosts' path between GPU and NIC that the logs do \
     not show and the scenario does not model";

/// (algorithm, protocol) candidates the simulator runs for `op`.
fn candidates(
    op: xirang_collective::schedule::CollectiveOp,
) -> Vec<(
    Option<xirang_collective::schedule::CollectiveAlgorithm>,
    Option<NcclProto>,
)> {
    use xirang_collective::schedule::CollectiveAlgorithm as A;
    let protos = [NcclProto::Ll, NcclProto::Ll128, NcclProto::Simple];
    let mut v = vec![(None, None)];
    let algos: &[A] = if op == xirang_collective::schedule::CollectiveOp::AllReduce {
        &[A::Ring, A::Tree]
    } else {
        &[A::Ring]
    };
    for &a in algos {
        for p in protos {
            v.push((Some(a), Some(p)));
        }
    }
    v
}

fn fixture(name: &str, index: usize) -> TestRun {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../xirang-collective/test_data/nccl-tests")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    nccl_tests::parse(&text)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .tests
        .swap_remove(index)
}

#[test]
#[ignore = "minutes: sweeps every fixture's sizes on its scenario (VALIDATION.md)"]
fn sweeps_match_real_nccl_tests_runs() {
    let mut failures = Vec::new();
    let mut out = String::new();
    let only = std::env::var("XIRANG_SWEEP_ONLY").ok();
    for (file, index, scenario, op, cannot) in cases() {
        let id = format!("{file}#{index}");
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|o| id.contains(o)))
        {
            continue;
        }
        let run = fixture(file, index);
        let ranks = u64::from(run.nranks().unwrap_or(1));
        // XIRANG_SWEEP_MAX_RANK_BYTES lowers (or raises) the bound for a quicker (or fuller) run.
        let bound = std::env::var("XIRANG_SWEEP_MAX_RANK_BYTES")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(MAX_RANK_BYTES);
        let simulated = |bytes: u64| ranks.saturating_mul(bytes) <= bound;
        let table_start = out.len();
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scenarios/nccl-tests")
            .join(format!("{scenario}.toml"));
        let loaded = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let (name, _) = workload_of(&loaded, None).unwrap();
        out.push_str(&format!(
            "\n### `{file}` ({}) on `scenarios/nccl-tests/{scenario}.toml`\n\n| size | measured µs | busbw GB/s | NCCL's tuner: ran | µs | busbw GB/s | error | matching: ran | busbw GB/s | error |\n|---|---|---|---|---|---|---|---|---|---|\n",
            run.name.as_deref().unwrap_or("?")
        ));
        let largest = run
            .rows
            .iter()
            .map(|r| r.size_bytes)
            .filter(|&b| simulated(b))
            .max()
            .unwrap_or(0);
        let smallest = run.rows.iter().map(|r| r.size_bytes).min().unwrap_or(0);
        for row in &run.rows {
            let measured = row.busbw_gbs();
            // The better placement, as the busbw above (a log's out-of-place time can be an
            // outlier where its in-place one is not).
            let measured_us = row.out_of_place.time_us.min(row.in_place.time_us);
            if !simulated(row.size_bytes) {
                out.push_str(&format!(
                    "| {} | {:.1} | {measured:.2} | not simulated ({ranks} ranks x size above the comparison's bound) | | | | | | |\n",
                    nccl_tests::size_text(row.size_bytes),
                    measured_us
                ));
                continue;
            }
            let small = row.size_bytes < MIB;
            let mut points: Vec<SizePoint> = Vec::new();
            for (algorithm, proto) in candidates(op) {
                // Below 1 MiB only NCCL's own pick is compared (the latency floor).
                if small && algorithm.is_some() {
                    continue;
                }
                let spec = SweepSpec {
                    workload: Some(name.clone()),
                    sizes: vec![row.size_bytes],
                    op: Some(op),
                    algorithm,
                    proto,
                    with_background: false,
                    warmup_iters: 1,
                    iters: 1,
                };
                // Every candidate is one the simulator runs for this operation: an error is
                // a failure, never a row quietly left out (nor a candidate standing in for
                // the tuner's pick).
                match run_size(&loaded, &spec, &name, row.size_bytes) {
                    Ok(p) => points.push(p),
                    Err(e) => failures.push(format!(
                        "{file} {}: {algorithm:?}/{proto:?} did not run: {e}",
                        row.size_bytes
                    )),
                }
                if points.is_empty() {
                    // The tuner's pick (the first candidate) failed: nothing to compare.
                    break;
                }
            }
            let Some(auto) = points.first().cloned() else {
                continue;
            };
            let err = |p: &SizePoint| p.busbw_gbs.map_or(f64::INFINITY, |b| b / measured - 1.0);
            let best = points
                .iter()
                .filter(|p| p.busbw_gbs.is_some())
                .min_by(|a, b| err(a).abs().total_cmp(&err(b).abs()))
                .cloned()
                .unwrap_or_else(|| auto.clone());
            let pct = |e: f64| format!("{:+.1} %", e * 100.0);
            // Below 1 MiB the log's busbw has too few digits: the time is compared.
            let time_ratio = auto.time_us.unwrap_or(f64::INFINITY) / measured_us;
            let (auto_error, matching) = if small {
                (format!("time {}", pct(time_ratio - 1.0)), "| | |".to_string())
            } else {
                (
                    pct(err(&auto)),
                    format!(
                        "{} | {:.2} | {} |",
                        best.simulated,
                        best.busbw_gbs.unwrap_or(0.0),
                        pct(err(&best))
                    ),
                )
            };
            out.push_str(&format!(
                "| {} | {:.1} | {:.2} | {} | {:.1} | {:.2} | {} | {}\n",
                nccl_tests::size_text(row.size_bytes),
                measured_us,
                measured,
                auto.simulated,
                auto.time_us.unwrap_or(0.0),
                auto.busbw_gbs.unwrap_or(0.0),
                auto_error,
                matching,
            ));
            if cannot.is_some() || KNOWN_MISSES.contains(&(file, index, row.size_bytes)) {
                continue;
            }
            let e = err(&best).abs();
            if small {
                // The latency floor: the time at the smallest sizes within 30 %.
                if row.size_bytes <= 4 * smallest.max(1) && !(0.7..=1.3).contains(&time_ratio) {
                    failures.push(format!(
                        "{file} {}: time {time_ratio:.2}x the measured",
                        row.size_bytes
                    ));
                }
            } else if e > 0.15 || (row.size_bytes == largest && e > 0.05) {
                failures.push(format!(
                    "{file} {}: {} off by {}",
                    row.size_bytes,
                    best.simulated,
                    pct(err(&best))
                ));
            }
        }
        if let Some(why) = cannot {
            out.push_str(&format!("\nCannot be met: {why}.\n"));
        }
        // Each table as soon as its fixture is done: the whole run takes most of an hour.
        println!("{}", &out[table_start..]);
    }
    assert!(failures.is_empty(), "{failures:#?}\n{out}");
}
