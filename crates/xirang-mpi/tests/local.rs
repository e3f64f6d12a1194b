//! Runs over the wire format between threads (the `local` transport): every output is the
//! serial run's, byte for byte, with each worker's posts and finished partitions encoded
//! and decoded as they are between MPI ranks; a worker that is gone ends the run with an
//! error.

use std::path::Path;

use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_sim::parallel::DistributedError;
use xirang_sim::{RunResult, options, simulate};

fn load_text(text: &str) -> Loaded {
    Scenario::parse(text, Path::new("test.toml"))
        .and_then(|s| s.build(Path::new("test.toml"), Path::new("."), Some(text)))
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn outputs(r: &RunResult) -> Vec<(&'static str, String)> {
    vec![
        ("fct.txt", r.fct_hpcc()),
        ("pfc.txt", r.pfc_hpcc(0)),
        ("flows.json", r.flows_json()),
        ("counters.csv", r.counters_csv()),
        ("rates.csv", r.rates_csv()),
        ("queues.csv", r.queues_csv()),
        ("counters_series.csv", r.counter_series_csv()),
        (
            "summary.json",
            serde_json::to_string_pretty(&r.summary()).unwrap(),
        ),
    ]
}

/// Runs `text` on `workers` threads joined by the local transport.
fn distributed(l: &Loaded, workers: usize, parts: usize) -> Result<RunResult, DistributedError> {
    distributed_threads(l, workers, parts, 1)
}

/// As [`distributed`], each worker on `threads` threads.
fn distributed_threads(
    l: &Loaded,
    workers: usize,
    parts: usize,
    threads: usize,
) -> Result<RunResult, DistributedError> {
    let opts = options(l);
    let ends = xirang_mpi::local::workers(workers);
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = ends
            .into_iter()
            .map(|t| {
                let opts = &opts;
                s.spawn(move || xirang_mpi::simulate(t, l, opts, parts, threads, &mut |_| {}))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("a worker panicked"))
            .collect()
    });
    let mut got = None;
    for (w, r) in results.into_iter().enumerate() {
        match r? {
            Some((res, report)) => {
                assert_eq!(w, 0, "only worker 0 has the results");
                assert_eq!(report.ranks, workers);
                got = Some(res);
            }
            None => assert_ne!(w, 0, "worker 0 has the results"),
        }
    }
    Ok(got.expect("worker 0 returned results"))
}

fn same_as_serial(text: &str, workers: usize, parts: usize) {
    same_as_serial_loaded(&load_text(text), workers, parts);
}

fn same_as_serial_loaded(l: &Loaded, workers: usize, parts: usize) {
    let serial = simulate(l, &options(l), &mut |_| {});
    let par = distributed(l, workers, parts).unwrap_or_else(|e| panic!("{e}"));
    par.check_conservation().unwrap();
    for ((name, a), (_, b)) in outputs(&serial).into_iter().zip(outputs(&par)) {
        assert!(a == b, "{name} differs on {workers} workers, {parts} partitions");
    }
}

const INCAST_HPCC: &str = r#"
[topology.leaf_spine]
leaves = 4
spines = 2
hosts_per_leaf = 4
host_rate_gbps = 100
fabric_rate_gbps = 100

[config.classes.bulk]
priority = 3
cc = "hpcc"

[workloads.incast.incast]
class = "bulk"
senders = 8
receiver = "h0"
bytes = 200_000

[run]
sample_interval_us = 5
"#;

const RAIL: &str = r#"
[topology.rail_optimized]
hosts = 8
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 500
hosts_per_group = 4
spines = 2

[topology.rail_optimized.host]
gpus = 4
nics = 4

[workloads.ar.collective]
op = "all_reduce"
algorithm = "ring"
bytes = 4_000_000
channels = 4

[run]
transfer_records = 100000
"#;

#[test]
fn incast_with_int_records_is_identical_over_the_wire() {
    same_as_serial(INCAST_HPCC, 2, 2);
    same_as_serial(INCAST_HPCC, 3, 4);
}

#[test]
fn rail_allreduce_is_identical_over_the_wire() {
    same_as_serial(RAIL, 2, 2);
    same_as_serial(RAIL, 2, 3);
}

#[test]
fn the_reference_incast_is_identical_over_the_wire() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/reference/incast16-4mb-dcqcn.toml");
    let l = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
    same_as_serial_loaded(&l, 2, 2);
}

#[test]
fn a_worker_that_is_gone_ends_the_run_with_an_error() {
    let l = load_text(RAIL);
    let opts = options(&l);
    let mut ends = xirang_mpi::local::workers(2);
    drop(ends.pop());
    let end = ends.pop().unwrap();
    let err = xirang_mpi::simulate(end, &l, &opts, 2, 1, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("gone"), "{err}");
}

#[test]
fn more_workers_than_partitions_is_an_error_saying_how_many() {
    // Two hosts under one leaf: nothing to divide into 3.
    let text = "[topology.leaf_spine]\nleaves = 2\nspines = 1\nhosts_per_leaf = 1\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\n\n[workloads.w.flows]\nlist = [{ src = \"h0\", dst = \"h1\", bytes = 100000 }]\n";
    let l = load_text(text);
    match distributed(&l, 4, 4) {
        Err(DistributedError::TooFewPartitions { parts, workers }) => {
            assert!(parts < workers, "{parts} {workers}");
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("ran on 4 workers"),
    }
}

#[test]
fn workers_on_several_threads_are_identical_over_the_wire() {
    for (text, workers, parts, threads) in [(INCAST_HPCC, 2, 4, 2), (RAIL, 2, 4, 2), (INCAST_HPCC, 2, 6, 3)] {
        let l = load_text(text);
        let serial = simulate(&l, &options(&l), &mut |_| {});
        let par = distributed_threads(&l, workers, parts, threads).unwrap_or_else(|e| panic!("{e}"));
        par.check_conservation().unwrap();
        for ((name, a), (_, b)) in outputs(&serial).into_iter().zip(outputs(&par)) {
            assert!(
                a == b,
                "{name} differs on {workers} workers x {threads} threads, {parts} partitions"
            );
        }
    }
}

/// A ring AllReduce of many loops that fast-forwards (`[run] fast_forward`), on hosts in
/// pairs under leaves of their own, so partitions divide the hosts.
const RING_FF: &str = r#"
[topology.rail_optimized]
hosts = 8
host_rate_gbps = 400
fabric_rate_gbps = 400
link_delay_ns = 500
hosts_per_group = 2
spines = 2

[topology.rail_optimized.host]
gpus = 8
nics = 8

[workloads.ar.collective]
op = "all_reduce"
algorithm = "ring"
protocol = "ll"
bytes = 67_108_864
channels = 2

[run]
transfer_records = 0
fast_forward = true
"#;

/// Fast-forward over the wire: each check's surveys travel in the windows' posts, and
/// every worker skips as the serial run does; the outputs and the fast-forward's report
/// are the serial run's, byte for byte.
#[test]
fn fast_forward_is_identical_over_the_wire() {
    let l = load_text(RING_FF);
    let serial = simulate(&l, &options(&l), &mut |_| {});
    let f = serial.engine.fast_forward.as_ref().expect("the scenario asks");
    assert!(f.skips > 0 && f.off.is_none(), "{f:?}");
    for (workers, parts, threads) in [(2, 2, 1), (2, 4, 1), (2, 4, 2)] {
        let par = distributed_threads(&l, workers, parts, threads).unwrap_or_else(|e| panic!("{e}"));
        par.check_conservation().unwrap();
        let what = format!("{workers} workers x {threads} threads, {parts} partitions");
        for ((name, a), (_, b)) in outputs(&serial).into_iter().zip(outputs(&par)) {
            assert!(a == b, "{name} differs on {what}");
        }
        assert_eq!(serial.engine.fast_forward, par.engine.fast_forward, "{what}");
    }
}
