//! `xirang calibrate` through the real binary: against a digital twin served by the
//! monitoring agent and scraped by a real Prometheus, and against recorded runs.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::monitor::{Guard, free_port, get, prometheus_binary, start_prometheus, wait_for, wait_stored};
use crate::util::{root, run, run_expect};

fn twin() -> String {
    std::fs::read_to_string(root().join("crates/xirang-calibrate/test_data/twin.toml")).unwrap()
}

/// What the fleet really runs: the twin with other workload values. These are what
/// calibration must find from the twin file's own (8 MiB, 60,000/s, uniform 0.5).
const FLEET_BYTES: f64 = 5_242_880.0;
const FLEET_RATE: f64 = 90_000.0;
const FLEET_SHARE: f64 = 0.25;

/// The fleet's scenario: the twin with the injected values.
fn fleet() -> String {
    let t = twin()
        .replace("bytes = 8_388_608", &format!("bytes = {}", FLEET_BYTES as u64))
        .replace(
            "requests_per_sec = 60_000",
            &format!("requests_per_sec = {FLEET_RATE}\nlocal_share = {FLEET_SHARE}"),
        );
    assert_eq!(
        t.matches("local_share").count(),
        1,
        "the twin's values moved: update the test"
    );
    assert!(t.contains(&format!("bytes = {}", FLEET_BYTES as u64)));
    t
}

/// A test's files: the fleet's recorded run, the twin's scenario, where the calibrated
/// scenario goes.
struct Files {
    out: std::path::PathBuf,
    twin: std::path::PathBuf,
    calibrated: std::path::PathBuf,
}

/// Simulates the fleet, sampled, into `dir/fleet-out`, and writes the twin beside it.
fn play_fleet(dir: &Path) -> Files {
    let f = dir.join("fleet.toml");
    std::fs::write(&f, fleet()).unwrap();
    let out = dir.join("fleet-out");
    run_expect(
        &[
            "sim",
            f.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--sample",
            "50us",
        ],
        0,
    );
    let twin_file = dir.join("twin.toml");
    std::fs::write(&twin_file, twin()).unwrap();
    Files {
        out,
        twin: twin_file,
        calibrated: dir.join("calibrated.toml"),
    }
}

fn knob(v: &serde_json::Value, suffix: &str) -> f64 {
    v["knobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"].as_str().unwrap().ends_with(suffix))
        .unwrap_or_else(|| panic!("no knob {suffix} in {v:#}"))["fitted"]
        .as_f64()
        .unwrap()
}

/// Stated tolerance of the recovery: 5 % on loads, 0.05 on the share. Prometheus's
/// window holds a fraction of a pass of the run more or less than a whole number of
/// passes (about 2 % of each rate at 40 passes per window), and the search's last step
/// is 3 % of a load.
const LOAD_TOLERANCE: f64 = 0.05;
const SHARE_TOLERANCE: f64 = 0.05;

fn check_recovered(v: &serde_json::Value) {
    let bytes = knob(v, "collective.bytes");
    let rate = knob(v, "requests_per_sec");
    let share = knob(v, "local_share");
    assert!(
        (bytes / FLEET_BYTES - 1.0).abs() <= LOAD_TOLERANCE,
        "bytes {bytes}: {v:#}"
    );
    assert!(
        (rate / FLEET_RATE - 1.0).abs() <= LOAD_TOLERANCE,
        "rate {rate}: {v:#}"
    );
    assert!(
        (share - FLEET_SHARE).abs() <= SHARE_TOLERANCE,
        "share {share}: {v:#}"
    );
}

/// Acceptance 1 of the closed-loop issue: the simulator plays the live fleet, its counters
/// served by the monitoring agent (`monitor --replay --live`), a real Prometheus scrapes
/// it, and `xirang calibrate --prometheus` finds the injected workload from the twin's.
#[test]
fn calibration_recovers_the_fleet_through_the_agent_and_prometheus() {
    recover_through_prometheus("both", "xirang_job_collective_seconds");
}

/// Acceptance 3 of the live-signals issue: the same fleet whose jobs export their
/// collective time only as NCCL Inspector's series (one per GPU: `--app-series
/// inspector`), recovered within the same tolerance.
#[test]
fn calibration_recovers_the_fleet_from_nccl_inspector_series_alone() {
    recover_through_prometheus("inspector", "nccl_collective_exec_time_microseconds");
}

/// Plays the fleet through the agent (serving the jobs' collective figures as
/// `app_series`) and Prometheus, calibrates, and checks the recovery and that the
/// collective time came from `collective_metric`.
fn recover_through_prometheus(app_series: &str, collective_metric: &str) {
    let _turn = crate::monitor::live_alone();
    let prometheus = prometheus_binary();
    let dir = tempfile::tempdir().unwrap();
    let Files {
        out,
        twin: twin_file,
        calibrated,
    } = play_fleet(dir.path());
    let agent_port = free_port();
    // 4 ms of simulation per 0.4 s: 40 passes in a 16 s window.
    let _agent = Guard(
        Command::new(env!("CARGO_BIN_EXE_xirang"))
            .args([
                "monitor",
                "--replay",
                out.to_str().unwrap(),
                "--live",
                "--dilation",
                "100",
                "--app-series",
                app_series,
                "--interval",
                "1s",
                "--listen",
                &format!("127.0.0.1:{agent_port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let metrics_url = format!("http://127.0.0.1:{agent_port}/metrics");
    wait_for(&metrics_url, "the agent");
    // The agent answers before its first round is in (a loaded machine takes seconds).
    let t_round = Instant::now();
    while !get(&metrics_url).is_some_and(|m| m.contains("xirang_switch_queue_bytes_total{")) {
        assert!(
            t_round.elapsed() < Duration::from_secs(60),
            "no replayed round in 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The services' histogram per serving host (the twin's servers are h2, h3, h6, h7), and
    // the training job's collective time.
    let m = get(&metrics_url).unwrap_or_default();
    for want in [
        r#"xirang_service_request_seconds_bucket{class="inference",node="h2",le="+Inf"}"#,
        r#"xirang_service_request_seconds_bucket{class="inference",node="h6",le="+Inf"}"#,
    ] {
        assert!(m.contains(want), "{want} not in the agent's metrics");
    }
    let gauge = r#"xirang_job_collective_seconds{class="training",op="all_reduce",workload="training"}"#;
    assert_eq!(m.contains(gauge), app_series != "inspector", "{gauge}");
    // The Inspector's series, with its labels, one per rank's GPU (5 MiB: the bucket 5-6MB).
    let inspector = r#"nccl_collective_exec_time_microseconds{version="v5.1",slurm_job_id="training",node="h1",gpu="GPU0",comm_name="training","#;
    assert!(m.contains(inspector), "{inspector} not in the agent's metrics");
    assert!(
        m.contains(r#"collective="AllReduce",message_size="5-6MB",algo_proto="#),
        "{m}"
    );
    let (_prom, prom_port) = start_prometheus(prometheus, dir.path(), agent_port);
    let url = format!("http://127.0.0.1:{prom_port}");
    // Until Prometheus holds 17 samples (16 s of rates).
    wait_stored(
        &url,
        "xirang_switch_queue_bytes_total",
        17,
        Duration::from_secs(180),
    );
    let o = run(&[
        "calibrate",
        "--scenario",
        twin_file.to_str().unwrap(),
        "--prometheus",
        &url,
        "--since",
        "20s",
        "-o",
        calibrated.to_str().unwrap(),
        // On this eight-host twin the congestion figures swing by about 30 % when a load
        // moves by 1 % (which flows collide changes; VALIDATION.md, "Calibration"), and
        // Prometheus's window moves the fitted loads by that much: the congestion
        // figures are held to 50 % here, the loads to the stated 5 % below. (40 % was
        // too tight: on a loaded machine the CNP rate came out 43.7 % off while bytes,
        // rate and share were within 0.2 %, 1.1 % and 0.005.)
        "--tolerance",
        "0.5",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{v:#}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(v["source"].as_str().unwrap().starts_with("prometheus "), "{v:#}");
    check_recovered(&v);
    // Every figure the issue names was compared.
    let names: Vec<&str> = v["residuals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for want in [
        "util host p3 (training)",
        "util spine p4 (inference)",
        "ecn_ratio leaf",
        "cnp_rate",
        "pause_ratio host",
        "pfc_ratio spine",
        // The services' latency histogram, which the replay serves from the run's
        // requests, and the training job's collective time, from its summary.
        "request p99 (inference)",
        "collective time (training)",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // The collective time is the fleet's own (the replayed run's), and the fit's is
    // near it.
    let coll = v["residuals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "collective time (training)")
        .unwrap();
    let observed = coll["observed"].as_f64().unwrap();
    assert!(observed > 1e-4 && observed < 4e-3, "{coll:#}");
    assert_eq!(coll["metrics"][0], collective_metric, "{coll:#}");
    assert!(coll["residual"].as_f64().unwrap().abs() <= 0.2, "{coll:#}");
    // The calibrated scenario is a scenario, with the fitted values and the twin's
    // comments.
    let text = std::fs::read_to_string(&calibrated).unwrap();
    assert!(
        text.starts_with("# Calibrated by `xirang calibrate` from prometheus "),
        "{text}"
    );
    assert!(text.contains("# The digital twin of calibration's"), "{text}");
    assert!(text.contains("local_share = "), "{text}");
    run_expect(&["scenario", "check", calibrated.to_str().unwrap()], 0);
}

/// The same fit from the recorded run (no Prometheus): the same values.
#[test]
fn calibration_recovers_the_fleet_from_a_recorded_run() {
    let dir = tempfile::tempdir().unwrap();
    let Files {
        out,
        twin: twin_file,
        calibrated,
    } = play_fleet(dir.path());
    let o = run(&[
        "calibrate",
        "--scenario",
        twin_file.to_str().unwrap(),
        "--sim-out",
        out.to_str().unwrap(),
        "-o",
        calibrated.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    check_recovered(&v);
    assert!(calibrated.is_file());
    // The run's collective time, from its summary, as the job would have exported it.
    assert!(
        v["residuals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "collective time (training)" && r["within"] == true),
        "{v:#}"
    );
}

/// A fit held away from the fleet (only the training load may move, the inference rate
/// stays wrong) is refused: exit 1, the figures named with their metrics, nothing written.
#[test]
fn a_fit_outside_the_tolerance_is_refused_naming_the_counters() {
    let dir = tempfile::tempdir().unwrap();
    let Files {
        out,
        twin: twin_file,
        calibrated,
    } = play_fleet(dir.path());
    let (stdout, stderr) = run_expect(
        &[
            "calibrate",
            "--scenario",
            twin_file.to_str().unwrap(),
            "--sim-out",
            out.to_str().unwrap(),
            "-o",
            calibrated.to_str().unwrap(),
            "--fit",
            "workloads.training.collective.bytes",
        ],
        1,
    );
    assert!(stdout.contains("OUTSIDE"), "{stdout}");
    assert!(
        stderr.contains("the fit stays outside ±20 % on: util host p4 (inference)"),
        "{stderr}"
    );
    assert!(stderr.contains("xirang_priority_bytes_total"), "{stderr}");
    assert!(!calibrated.exists());
}

/// Input errors name what was expected.
#[test]
fn calibration_input_errors_say_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let Files {
        out,
        twin: twin_file,
        calibrated: _,
    } = play_fleet(dir.path());
    // No window: the default scenario's run lasts as long as its AllReduce.
    let (_, e) = run_expect(&["calibrate", "--sim-out", out.to_str().unwrap()], 1);
    assert!(e.contains("[run] end_us: expected the simulated window"), "{e}");
    // An unknown parameter.
    let (_, e) = run_expect(
        &[
            "calibrate",
            "--scenario",
            twin_file.to_str().unwrap(),
            "--sim-out",
            out.to_str().unwrap(),
            "--fit",
            "workloads.training.collective.channels",
        ],
        1,
    );
    assert!(
        e.contains("--fit workloads.training.collective.channels: not a parameter of this scenario; expected one of: workloads.inference.inference.requests_per_sec"),
        "{e}"
    );
    // Nothing to read.
    let (_, e) = run_expect(&["calibrate", "--scenario", twin_file.to_str().unwrap()], 1);
    assert!(
        e.contains("give --prometheus URL, --history FILE or --sim-out DIR"),
        "{e}"
    );
}
