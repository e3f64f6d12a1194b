//! The batching planner: its queueing simulation against queueing facts, and the shipped
//! serving example.

use std::path::Path;

use xirang_collective::batching::{Aggregation, Policy, ServingFile, plan, simulate};
use xirang_collective::cost::Platform;
use xirang_fabric::scenario::Scenario;

const STEP_US: f64 = 1000.0;

#[test]
fn a_trickle_is_served_one_by_one_without_waiting() {
    let o = simulate(
        10.0,
        Policy {
            max_batch: 64,
            window_us: 0.0,
        },
        5000,
        7,
        &|_| STEP_US,
    );
    assert!(o.mean_batch < 1.05, "{o:?}");
    assert!((o.p50_us - STEP_US).abs() < 1.0, "{o:?}");
}

#[test]
fn a_window_holds_lone_requests_for_its_length() {
    let o = simulate(
        10.0,
        Policy {
            max_batch: 64,
            window_us: 2000.0,
        },
        5000,
        7,
        &|_| STEP_US,
    );
    assert!((o.p50_us - (2000.0 + STEP_US)).abs() < 1.0, "{o:?}");
}

#[test]
fn overload_runs_at_capacity_and_queues_grow() {
    // One request per 1 ms step: capacity 1000/s; offered 2000/s.
    let o = simulate(
        2000.0,
        Policy {
            max_batch: 1,
            window_us: 0.0,
        },
        20_000,
        7,
        &|_| STEP_US,
    );
    assert!((o.throughput_per_s / 1000.0 - 1.0).abs() < 0.01, "{o:?}");
    assert!(o.p99_us > 100.0 * STEP_US, "{o:?}");
    // Batching absorbs the same load: steps of up to 8 for barely more time.
    let o = simulate(
        2000.0,
        Policy {
            max_batch: 8,
            window_us: 0.0,
        },
        20_000,
        7,
        &|b| STEP_US + 10.0 * f64::from(b),
    );
    assert!((o.throughput_per_s / 2000.0 - 1.0).abs() < 0.03, "{o:?}");
    assert!(o.p99_us < 5.0 * STEP_US, "{o:?}");
}

#[test]
fn m_d_1_mean_wait() {
    // Poisson arrivals, one server, deterministic service s at load 0.5: the median wait
    // is 0 (half the requests find the server idle) and p99 is a few service times.
    let o = simulate(
        500.0,
        Policy {
            max_batch: 1,
            window_us: 0.0,
        },
        50_000,
        3,
        &|_| STEP_US,
    );
    assert!((o.p50_us / STEP_US) < 1.6, "{o:?}");
    assert!(o.p99_us > 3.0 * STEP_US && o.p99_us < 8.0 * STEP_US, "{o:?}");
}

fn repo(p: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(p)
}

#[test]
fn batched_collectives_beat_per_request_ones_on_the_shipped_example() {
    let f = ServingFile::load(&repo("models/llama-70b-tp8-serving.toml")).unwrap();
    let l = Scenario::load(&repo("scenarios/rail-64gpu.toml")).unwrap();
    let mut p = Platform::of_fabric(&l.fabric, &l.scenario.config, &[], 0).unwrap();
    p.nodes = 1;
    let results = plan(&f, &p, 2000, 1, &mut || {});
    let rate = |a: Aggregation| {
        results
            .iter()
            .find(|r| r.aggregation == a)
            .unwrap()
            .best
            .max_rate_per_s
    };
    assert!(rate(Aggregation::Batched) > 10.0 * rate(Aggregation::PerRequest));
    assert!(rate(Aggregation::Batched) >= rate(Aggregation::Sharded));
    let best = &results
        .iter()
        .find(|r| r.aggregation == Aggregation::Batched)
        .unwrap()
        .best;
    assert!(best.at_rate.p99_us <= f.slo_p99_us, "{best:?}");
    assert!(best.policy.max_batch > 1);
}

#[test]
fn serving_files_report_errors_with_lines() {
    let text = std::fs::read_to_string(repo("models/llama-70b-tp8-serving.toml")).unwrap();
    let bad = text.replace("tp_ranks = 8", "tp_ranks = 1");
    let e = ServingFile::parse(&bad, Path::new("s.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("s.toml:21: tp_ranks: expected 2 or more GPUs"),
        "{e}"
    );
    let bad = text.replace("slo_p99_us = 50000", "slo_p99_us = \"fast\"");
    let e = ServingFile::parse(&bad, Path::new("s.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("s.toml:18:"), "{e}");
}
