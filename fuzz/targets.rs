//! The fuzz targets' bodies: one function per target, taking the fuzzer's bytes. Shared by
//! the cargo-fuzz binaries (`fuzz/fuzz_targets/*.rs`) and by the regression test that
//! replays every seed and every input a fuzzer ever crashed on in the normal test suite
//! (`crates/xirang/tests/it/fuzz_inputs.rs`), so a fixed crash stays fixed.
//!
//! A body returns quietly on any error: errors are the expected answer to bad input. A
//! panic is a bug, and so is a violated invariant (asserted here): a scenario that
//! loads must serialize and load again; a simulated run must conserve its bytes.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;
use std::sync::OnceLock;

use xirang_fabric::scenario::Scenario;

/// A target's body.
pub(crate) type Body = fn(&[u8]);

/// Every target, by the name cargo-fuzz knows it by.
pub(crate) const TARGETS: &[(&str, Body)] = &[
    ("scenario", scenario),
    ("scenario_sim", scenario_sim),
    ("hpcc", hpcc),
    ("nccl_tests", nccl_tests),
    ("sonic", sonic),
    ("sonic_counters", sonic_counters),
    ("nccl_ras", nccl_ras),
    ("nccl_inspector", nccl_inspector),
    ("host_tools", host_tools),
    ("snapshot", snapshot),
    ("monitor_config", monitor_config),
    ("rollout_inputs", rollout_inputs),
    ("planner_inputs", planner_inputs),
    ("counters", counters),
];

/// Fabrics larger than this are loaded but not analysed: a fuzzer that writes `k = 100`
/// would spend seconds per input on a valid, uninteresting fabric.
const MAX_ANALYSED_NICS: usize = 4096;
/// Scenarios simulated by `scenario_sim` are this small, and run this long, so that an
/// input takes milliseconds.
const MAX_SIMULATED_NICS: usize = 64;
const MAX_SIMULATED_TRANSFERS: u64 = 2_000;
const SIMULATED_PS: u64 = 50_000_000;

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// Parses and builds a scenario as `scenario check` does; files it names are looked up in
/// a directory that does not exist, so the fuzzer's own files are never read.
fn load(data: &[u8]) -> Option<xirang_fabric::Loaded> {
    let text = text(data)?;
    let path = Path::new("fuzz.toml");
    let s = Scenario::parse(text, path).ok()?;
    s.build(path, Path::new("/nonexistent-fuzz-dir"), Some(text)).ok()
}

/// The scenario loader, the topology analysis, and the serialize/parse round trip.
pub(crate) fn scenario(data: &[u8]) {
    let Some(l) = load(data) else { return };
    let again = l.scenario.to_toml();
    assert!(
        Scenario::parse(&again, Path::new("again.toml")).is_ok(),
        "a loaded scenario serializes to text that does not parse:\n{again}"
    );
    if l.fabric.nics.len() <= MAX_ANALYSED_NICS {
        let _ = xirang_fabric::analysis::summarize(&l.fabric);
        let _ = xirang_fabric::analysis::to_dot(&l.fabric);
    }
}

/// A valid scenario runs in the simulator without panicking and conserves its bytes:
/// nothing that passes `scenario check` may fail later.
pub(crate) fn scenario_sim(data: &[u8]) {
    let Some(l) = load(data) else { return };
    if l.fabric.nics.len() > MAX_SIMULATED_NICS {
        return;
    }
    let mut opts = xirang_sim::options(&l);
    let ex = xirang_sim::workload::expand(l.model(), opts.seed);
    let transfers: u64 = ex.flows.len() as u64
        + ex.collectives
            .iter()
            .map(|c| c.per_iteration.saturating_mul(u64::from(c.iterations)))
            .fold(0u64, u64::saturating_add);
    if transfers > MAX_SIMULATED_TRANSFERS {
        return;
    }
    opts.end = Some(opts.end.map_or(SIMULATED_PS, |e| e.min(SIMULATED_PS)));
    let r = xirang_sim::simulate(&l, &opts, &mut |_| {});
    if let Err(e) = r.check_conservation() {
        panic!("conservation broken: {e}");
    }
    let _ = r.summary();
    let _ = r.flows_json();
    let _ = r.counters_csv();
}

/// The HPCC simulator's topology and flow formats.
pub(crate) fn hpcc(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(t) = xirang_fabric::hpcc::parse_topology(text) {
        let _ = t.tiers();
    }
    let _ = xirang_fabric::hpcc::parse_flows(text);
}

fn default_platform() -> &'static xirang_collective::cost::Platform {
    static P: OnceLock<xirang_collective::cost::Platform> = OnceLock::new();
    P.get_or_init(|| {
        let text = include_str!("../scenarios/default.toml");
        let path = Path::new("default.toml");
        let l = Scenario::parse(text, path)
            .and_then(|s| s.build(path, Path::new("."), Some(text)))
            .expect("the default scenario loads");
        xirang_collective::cost::Platform::of_fabric(&l.fabric, &l.scenario.config, &[], 0)
            .expect("the default scenario has hosts")
    })
}

/// nccl-tests logs: the reader, the cost-model check of every run, and the diagnosis
/// rules over the log.
pub(crate) fn nccl_tests(data: &[u8]) {
    let text = String::from_utf8_lossy(data).into_owned();
    if let Ok(report) = xirang_collective::nccl_tests::parse(&text) {
        for run in &report.tests {
            let (Some(coll), Some(p)) = (
                run.collective,
                xirang_collective::check::platform_of_run(run, default_platform(), true),
            ) else {
                continue;
            };
            let _ = xirang_collective::check::check(run, coll, &p, None);
        }
    }
    let logs = [xirang_diagnose::nccl::Log {
        name: "fuzz.log".into(),
        text,
    }];
    // Both with nothing known (shapes only) and with a rate (levels against the model).
    let _ = xirang_diagnose::nccl::diagnose(&logs, &xirang_diagnose::nccl::Hardware::default());
    let hw = xirang_diagnose::nccl::Hardware {
        nic_gbps: Some(400.0),
        ..Default::default()
    };
    let _ = xirang_diagnose::nccl::diagnose(&logs, &hw);
}

/// SONiC `config_db.json` and `pg_profile_lookup.ini`.
pub(crate) fn sonic(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(db) = xirang_switch::sonic::parse(text) {
        for port in ["Ethernet0", "global"] {
            let _ = db.pfc_enabled(port);
        }
    }
    let _ = xirang_switch::sonic::parse_pg_profile_lookup(text);
}

/// Bytes a fuzzer plays as a server's replies are cut here: a unix socket pair holds
/// them before the reader starts (no thread), and the reader's own bounds are what is
/// under test, not the socket's buffer.
const MAX_REPLY_BYTES: usize = 64 << 10;

/// What a switch's Redis may send (RESP2 replies to the reader's commands), a
/// `--sonic` URL, and a COUNTERS_DB snapshot (SONiC's mock-table JSON) through the
/// translation into counters.
pub(crate) fn sonic_counters(data: &[u8]) {
    use std::io::Write as _;
    use xirang_monitor::redis::{Conn, Limits};
    let (mut server, client) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
    let _ = server.write_all(&data[..data.len().min(MAX_REPLY_BYTES)]);
    let _ = server.shutdown(std::net::Shutdown::Write);
    let limits = Limits {
        timeout: std::time::Duration::from_millis(200),
        deadline: std::time::Duration::from_secs(1),
        max_bulk_bytes: 4096,
        max_array_len: 4096,
        max_reply_bytes: 1 << 20,
        max_line_bytes: 256,
    };
    if let Ok(mut c) = Conn::over(client, limits, "fuzz") {
        for _ in 0..3 {
            match c.command(&["HGETALL", "COUNTERS_PORT_NAME_MAP"]) {
                Ok(v) => {
                    let _ = v.into_pairs();
                }
                Err(_) => break,
            }
        }
    }
    let Some(text) = text(data) else { return };
    let _ = text.parse::<xirang_monitor::sonic::SonicUrl>();
    let Ok(snap) = xirang_monitor::sonic::snapshot_from_json(text) else {
        return;
    };
    let r = xirang_monitor::sonic::translate("s", "", &snap);
    // Every counter names an entity of the schema.
    for v in &r.values {
        assert!(
            v.entity.parse::<xirang_telemetry::Entity>().is_ok(),
            "{}",
            v.entity
        );
    }
}

/// An NCCL RAS report (text, JSON, monitor events) into findings.
pub(crate) fn nccl_ras(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(r) = xirang_diagnose::ras::parse(text, "fuzz") {
        let f = xirang_diagnose::ras::findings(&r);
        let _ = xirang_diagnose::finding::render_text(&f);
    }
}

/// NCCL Inspector's JSON lines, each as the monitor reads it.
pub(crate) fn nccl_inspector(data: &[u8]) {
    for line in data.split(|b| *b == b'\n') {
        if let Ok(Some((labels, time, bw))) = xirang_monitor::inspector::record(line, "fuzz") {
            assert_eq!(labels.len(), xirang_telemetry::inspector::LABELS.len());
            assert!(time.is_none_or(f64::is_finite) && bw.is_none_or(f64::is_finite));
        }
    }
}

/// The RDMA tools' outputs a host snapshot holds.
pub(crate) fn host_tools(data: &[u8]) {
    let Some(text) = text(data) else { return };
    use xirang_host::parse::{ethtool, ibv_devinfo, lspci, mlnx_qos, nvidia_topo};
    let _ = ethtool::parse(text);
    let _ = ibv_devinfo::parse(text);
    let _ = lspci::parse_vvv(text);
    let _ = lspci::parse_tree(text);
    let _ = lspci::acs_ctl_values(text);
    let _ = mlnx_qos::parse(text);
    let _ = nvidia_topo::parse(text);
}

/// A host snapshot archive (gzip, tar), then the host reader over what it holds.
pub(crate) fn snapshot(data: &[u8]) {
    if let Ok(tree) = xirang_host::snapshot::load_from(Cursor::new(data), Path::new("fuzz.tar.gz")) {
        let _ = xirang_host::sysfs::read_host(&tree);
    }
}

/// The monitoring agent's alert rules and exporter web configuration.
pub(crate) fn monitor_config(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = xirang_monitor::alerts::parse_rules(text, "fuzz.toml");
    let _ = xirang_monitor::web::parse(text, Path::new("fuzz.yml"));
}

/// Rollout policies, fleet files, command templates (rendered with hostile values) and
/// perftest reports.
pub(crate) fn rollout_inputs(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = xirang_rollout::Policy::parse(text, Path::new("/nonexistent-fuzz-dir/policy.toml"));
    let _ = xirang_rollout::FleetFile::parse(text, Path::new("fleet.toml"));
    if let Ok(t) = xirang_rollout::template::Template::parse(text, &["node", "nic"]) {
        let values: BTreeMap<&str, String> = [
            ("node", "n1'; rm -rf / #".to_string()),
            ("nic", "$(reboot)\n`id`".to_string()),
        ]
        .into_iter()
        .collect();
        let _ = t.render(&values);
    }
    let _ = xirang_rollout::perftest::parse(text);
    // A switch patch, applied (all or nothing) to a small config_db, and the same text as
    // a config_db taking a fixed patch: the fingerprints of both must be computable.
    let fingerprints = |ops: Vec<xirang_rollout::config::PatchOp>, db: &serde_json::Value| {
        let p = xirang_rollout::config::SwitchPatch {
            tier: "leaf".into(),
            file: "sonic-leaf.patch.json".into(),
            ops,
        };
        let _ = xirang_rollout::config::switch_state(&p, db);
        let _ = xirang_rollout::config::switch_after(&p, db);
    };
    if let Ok(ops) = xirang_rollout::config::parse_patch(text, Path::new("sonic-leaf.patch.json")) {
        let mut db = serde_json::json!({"QUEUE": {"Ethernet0|3": {"wred_profile": "A"}}, "WRED_PROFILE": {}});
        let _ = xirang_rollout::config::apply_patch(&mut db, &ops);
        fingerprints(ops, &db);
    }
    if let Ok(db) = serde_json::from_str::<serde_json::Value>(text) {
        let ops = xirang_rollout::config::parse_patch(
            r#"[{"op": "add", "path": "/QUEUE/Ethernet0|3/wred_profile", "value": "X"}]"#,
            Path::new("leaf.json"),
        )
        .expect("a fixed patch");
        fingerprints(ops, &db);
    }
}

/// The planners' model and serving files.
pub(crate) fn planner_inputs(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = xirang_collective::overlap::ModelFile::parse(text, Path::new("model.toml"));
    let _ = xirang_collective::batching::ServingFile::parse(text, Path::new("serving.toml"));
}

/// Counters from outside: a Prometheus `query_range` answer and a simulator's counter
/// CSV, each through the diagnosis rules; flows and links a run wrote.
pub(crate) fn counters(data: &[u8]) {
    use xirang_diagnose::window::{Window, diagnose_window};
    if let Ok(body) = serde_json::from_slice::<serde_json::Value>(data)
        && let Ok(series) = xirang_diagnose::source::series_from_query_range(&body)
    {
        let w = Window {
            source: "fuzz".into(),
            series,
            ..Window::default()
        };
        let _ = diagnose_window(&w);
    }
    let Some(text) = text(data) else { return };
    for with_time in [true, false] {
        if let Ok(rows) = xirang_monitor::replay::parse_rows(text, "fuzz.csv", with_time) {
            let samples = rows.iter().map(|(t, c)| ((*t / 1_000_000) as i64, c));
            let mut w = xirang_diagnose::source::window_from_samples("fuzz".into(), samples);
            w.relative = true;
            let _ = diagnose_window(&w);
        }
    }
    let _ = xirang_diagnose::paths::flows_from_json(text);
    let _ = xirang_diagnose::source::add_links(&mut Window::default(), text);
}
