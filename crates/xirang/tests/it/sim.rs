//! `xirang sim` and `xirang bench`.

use crate::util::{run_expect, run_json};

#[test]
fn sim_writes_every_output_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let o = out.to_str().unwrap();
    let (table, _) = run_expect(
        &[
            "sim",
            "scenarios/incast-16to1.toml",
            "--out",
            o,
            "--sample",
            "200us",
            "--quiet",
        ],
        0,
    );
    assert!(table.contains("training") && table.contains("16/16"), "{table}");
    assert!(table.contains("packet-hops"), "{table}");
    for f in [
        "fct.txt",
        "pfc.txt",
        "flows.json",
        "counters.csv",
        "summary.json",
        "rates.csv",
        "queues.csv",
        "counters_series.csv",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let fct = std::fs::read_to_string(out.join("fct.txt")).unwrap();
    assert_eq!(fct.lines().count(), 16);
    let counters = std::fs::read_to_string(out.join("counters.csv")).unwrap();
    assert!(counters.starts_with("entity,counter,value\n"));
    assert!(counters.contains("h0/mlx5_0/1,port_rcv_data,"));
    // No temporary files are left behind.
    assert!(
        std::fs::read_dir(&out)
            .unwrap()
            .all(|e| !e.unwrap().file_name().to_string_lossy().starts_with('.'))
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["summary"]["drops"], 0);
    assert!(summary["summary"]["stats"]["packet_hops"].as_u64().unwrap() > 100_000);
    // An unsampled run into the same directory leaves no series of the previous run
    // behind for `diagnose --sim-out` to read as its own.
    run_expect(&["sim", "scenarios/incast-16to1.toml", "--out", o, "--quiet"], 0);
    for f in ["rates.csv", "queues.csv", "counters_series.csv"] {
        assert!(!out.join(f).exists(), "{f} of the previous run left behind");
    }
    assert!(out.join("fct.txt").is_file());
}

#[test]
fn sim_runs_hpcc_files_and_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let v = run_json(&[
        "sim",
        "--hpcc-topology",
        "scenarios/reference/fattree_k8_128h_100g.txt",
        "--hpcc-flows",
        "scenarios/reference/incast16_4MB.flow",
        "--cc",
        "timely",
        "--until",
        "1ms",
        "--json",
        "--quiet",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(v["scenario"], "incast16_4MB-timely");
    assert!(v["summary"]["stats"]["sim_time_ps"].as_u64().unwrap() <= 1_000_000_000);
    // Stopped at 1 ms: nothing finished, and PFC lines carry the flow file's 2 s offset.
    let pfc = std::fs::read_to_string(dir.path().join("pfc.txt")).unwrap();
    assert!(pfc.lines().next().unwrap().starts_with("2000"), "{pfc}");
}

#[test]
fn sim_says_what_it_skips_and_rejects_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let (_, err) = run_expect(
        &[
            "sim",
            "scenarios/default.toml",
            "--until",
            "300us",
            "--quiet",
            "--out",
            dir.path().to_str().unwrap(),
        ],
        0,
    );
    assert!(
        err.contains("warning: collective `training` did not finish"),
        "{err}"
    );
    let (_, err) = run_expect(&["sim", "scenarios/default.toml", "--until", "3pc"], 2);
    assert!(
        err.contains("expected a duration with its unit, like 800ns"),
        "{err}"
    );
    // A bare number is refused: it meant µs here and seconds to `monitor` once.
    let (_, err) = run_expect(&["sim", "scenarios/default.toml", "--until", "3000"], 2);
    assert!(err.contains("`3000` has no unit"), "{err}");
    // Durations beyond the clock are refused, not saturated; an exponent is a number's,
    // not a unit's.
    for d in [
        "999999999999s",
        "9000000000000000000000000us",
        "30000000000ms",
        "1e300s",
        "infs",
    ] {
        let (_, err) = run_expect(&["sim", "scenarios/default.toml", "--until", d], 2);
        assert!(err.contains("at most one hour of simulated time"), "{d}: {err}");
    }
    // An interval that would round to nothing is refused too.
    let (_, err) = run_expect(&["sim", "scenarios/default.toml", "--sample", "1ns"], 2);
    assert!(
        err.contains("expected a sampling interval of 0.1..=3.6e9 µs, found 0.001"),
        "{err}"
    );
    let (_, err) = run_expect(&["sim"], 1);
    assert!(err.contains("give a scenario file"), "{err}");
    // A flow from a host to itself in an HPCC flow file is refused with its line.
    let dir = tempfile::tempdir().unwrap();
    let flows = dir.path().join("self.flow");
    std::fs::write(&flows, "1\n3 3 3 100 1000 2.0\n").unwrap();
    let (_, err) = run_expect(
        &[
            "sim",
            "--hpcc-topology",
            "scenarios/reference/fattree_k8_128h_100g.txt",
            "--hpcc-flows",
            flows.to_str().unwrap(),
            "--quiet",
        ],
        1,
    );
    assert!(err.contains("flow 1: node 3 sends to itself"), "{err}");
}

/// Fast-forward's command line: a run it cannot serve says why when asked (the default
/// scenario's collectives record their transfers); the scenario's key asks for it, and a
/// run on two threads skips as the serial one, byte for byte; `--exact` overrides the
/// key; windows and thresholds out of range are refused.
#[test]
fn sim_fast_forward_says_why_and_refuses_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().to_str().unwrap();
    let (table, _) = run_expect(
        &[
            "sim",
            "scenarios/default.toml",
            "--fast-forward",
            "--quiet",
            "--out",
            o,
        ],
        0,
    );
    assert!(
        table.contains("fast-forward: off for this run: transfers are recorded one by one"),
        "{table}"
    );
    let example = "docs/guide/examples/ring-256gpu-ff.toml";
    // The scenario's key asks; on two threads the run skips as on one, byte for byte.
    let other = tempfile::tempdir().unwrap();
    let two = other.path().to_str().unwrap();
    let (serial, _) = run_expect(&["sim", example, "--quiet", "--out", o], 0);
    let (threaded, _) = run_expect(&["sim", example, "--threads", "2", "--quiet", "--out", two], 0);
    let ff_line = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("fast-forward: skipped"))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no fast-forward line:\n{t}"))
    };
    assert_eq!(ff_line(&serial), ff_line(&threaded));
    for f in [
        "counters.csv",
        "summary.json",
        "flows.json",
        "links.csv",
        "pfc.txt",
    ] {
        let read =
            |d: &str| std::fs::read(std::path::Path::new(d).join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(read(o) == read(two), "{f} differs on two threads");
    }
    let (table, _) = run_expect(
        &["sim", example, "--exact", "--threads", "2", "--quiet", "--out", o],
        0,
    );
    assert!(!table.contains("fast-forward"), "{table}");
    let (_, err) = run_expect(&["sim", example, "--ff-window", "100us"], 2);
    assert!(
        err.contains("expected a window from 300us to 100ms, found 100us"),
        "{err}"
    );
    let (_, err) = run_expect(&["sim", example, "--ff-theta", "1.5"], 2);
    assert!(err.contains("expected a spread between 0 and 1"), "{err}");
    let (_, err) = run_expect(&["sim", example, "--exact", "--fast-forward"], 2);
    assert!(err.contains("cannot be used with"), "{err}");
    // The memo: the example's all-gather skips on the reduce-scatter's steady state; with
    // --ff-no-memo both skips are measured, and engine.json has no memo.
    let memo = |dir: &str| {
        let e: serde_json::Value =
            serde_json::from_slice(&std::fs::read(std::path::Path::new(dir).join("engine.json")).unwrap())
                .unwrap();
        e["engine"]["fast_forward"]["memo"].clone()
    };
    assert!(ff_line(&serial).contains("1 of them from the memo"), "{serial}");
    run_expect(&["sim", example, "--quiet", "--out", two], 0);
    let m = memo(two);
    assert_eq!(
        (m["hits"].as_u64(), m["misses"].as_u64()),
        (Some(1), Some(1)),
        "{m}"
    );
    assert!(m["rule"].as_str().unwrap().contains("for 50 us"), "{m}");
    let (table, _) = run_expect(&["sim", example, "--ff-no-memo", "--quiet", "--out", two], 0);
    assert!(!ff_line(&table).contains("memo"), "{table}");
    assert!(memo(two).is_null());
    run_expect(
        &["sim", example, "--ff-confirm", "20us", "--quiet", "--out", two],
        0,
    );
    assert!(memo(two)["rule"].as_str().unwrap().contains("for 20 us"));
    let (_, err) = run_expect(&["sim", example, "--ff-confirm", "300us"], 2);
    assert!(
        err.contains("expected a confirmation from 20us to 200us, found 300us"),
        "{err}"
    );
    let (_, err) = run_expect(&["sim", example, "--ff-confirm", "50us", "--ff-no-memo"], 2);
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn bench_measures_a_scenario() {
    let v = run_json(&[
        "bench",
        "--runs",
        "1",
        "--no-reference",
        "--json",
        "scenarios/incast-16to1.toml",
    ]);
    let m = &v[0];
    assert_eq!(m["engine"], "calendar");
    assert!(m["packet_hops"].as_u64().unwrap() > 100_000);
    assert!(m["packet_hops_per_s"].as_f64().unwrap() > 0.0);
    assert!(m["bytes_per_packet_in_flight"].as_f64().unwrap() > 0.0);
}

/// `bench --scale` writes each case's scenario, runs it in a child process with this binary
/// and the reference one, and reports what a binary could not run instead of failing.
#[test]
fn bench_scale_runs_each_case_with_both_binaries() {
    let scale = |reference: &str| {
        run_json(&[
            "bench",
            "--scale",
            "--max-gpus",
            "128",
            "--only",
            "perm-k8",
            "--reference-binary",
            reference,
            "--json",
        ])
    };
    let v = scale(env!("CARGO_BIN_EXE_xirang"));
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    for r in rows {
        assert_eq!(r["case"], "perm-k8");
        assert_eq!(r["gpus"], 128);
        let f = &r["figures"];
        assert!(f["packet_hops"].as_u64().unwrap() > 100_000, "{r}");
        assert!(f["peak_rss_bytes"].as_u64().unwrap() > 0);
    }
    assert_eq!(
        rows[0]["figures"]["packet_hops"],
        rows[1]["figures"]["packet_hops"]
    );
    // A reference that cannot run the cases is reported, row by row.
    let v = scale("/nonexistent/xirang");
    let err = v[1]["error"].as_str().unwrap();
    assert!(err.contains("cannot run /nonexistent/xirang"), "{err}");
}

#[cfg(not(feature = "mpi"))]
#[test]
fn sim_mpi_without_the_feature_says_how_to_build_it() {
    let (_, err) = crate::util::run_expect(&["sim", "scenarios/incast-16to1.toml", "--mpi", "--quiet"], 1);
    assert!(err.contains("--features mpi"), "{err}");
}

#[test]
fn sim_on_two_threads_writes_the_serial_runs_files() {
    let dir = tempfile::tempdir().unwrap();
    let run_with = |threads: &str| {
        let out = dir.path().join(format!("t{threads}"));
        run_expect(
            &[
                "sim",
                "scenarios/incast-16to1.toml",
                "--quiet",
                "--threads",
                threads,
                "--sample",
                "20us",
                "--out",
                out.to_str().unwrap(),
            ],
            0,
        );
        out
    };
    let (serial, parallel) = (run_with("1"), run_with("2"));
    let mut names: Vec<_> = std::fs::read_dir(&serial)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(names.contains(&"rates.csv".to_string()), "{names:?}");
    for n in names.iter().filter(|n| *n != "engine.json") {
        assert!(
            std::fs::read(serial.join(n)).unwrap() == std::fs::read(parallel.join(n)).unwrap(),
            "{n} differs between 1 and 2 threads"
        );
    }
    let engine: serde_json::Value =
        serde_json::from_slice(&std::fs::read(parallel.join("engine.json")).unwrap()).unwrap();
    assert_eq!(engine["parallel"]["partitions"], 2, "{engine}");
    assert_eq!(engine["parallel"]["threads"], 2, "{engine}");
    assert!(
        engine["parallel"]["packets_between_partitions"].as_u64().unwrap() > 0,
        "{engine}"
    );
}
