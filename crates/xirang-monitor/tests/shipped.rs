//! The shipped alert rules and Grafana dashboard refer only to metrics the agent emits,
//! the PromQL rules mirror the agent's own rules, and the agent's rules fire on the
//! faults they describe.

use std::collections::BTreeSet;
use std::path::Path;

use xirang_host::tree::DirTree;
use xirang_monitor::alerts::{DEFAULT_RULES, Evaluator, parse_rules};
use xirang_monitor::collect::{Collector, Source};

const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../monitoring");
const S: u64 = 1_000_000_000;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&p);
    std::fs::write(p, text).unwrap();
}

/// A host whose every watched counter moves between two rounds: one port of each kind of
/// trouble, so every signal and every alert appears.
fn troubled_host(root: &Path, second: bool) {
    let k = u64::from(second);
    let p = "sys/class/infiniband/mlx5_0/ports/1";
    write(root, &format!("{p}/state"), "4: ACTIVE\n");
    write(root, &format!("{p}/phys_state"), "5: LinkUp\n");
    write(root, &format!("{p}/rate"), "100 Gb/sec (4X EDR)\n");
    write(root, "sys/class/infiniband/mlx5_0/fw_ver", "22.38.1002\n");
    write(
        root,
        "sys/class/infiniband/mlx5_0/device",
        "../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0",
    );
    let dev = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0";
    for (f, v) in [
        ("class", "0x020000"),
        ("vendor", "0x15b3"),
        ("device", "0x101d"),
        ("current_link_speed", "16.0 GT/s PCIe"),
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("current_link_width", "8"),
        ("max_link_width", "16"),
    ] {
        write(root, &format!("{dev}/{f}"), &format!("{v}\n"));
    }
    for (c, step) in [
        ("counters/port_xmit_data", 1_000_000),
        ("counters/port_rcv_data", 1_000_000),
        ("counters/port_rcv_packets", 10_000),
        ("counters/symbol_error", 5),
        ("counters/link_downed", 1),
        ("counters/port_xmit_discards", 3),
        ("hw_counters/np_ecn_marked_roce_packets", 5_000),
        ("hw_counters/np_cnp_sent", 500),
        ("hw_counters/rp_cnp_handled", 400),
        ("hw_counters/out_of_sequence", 7),
        ("hw_counters/out_of_buffer", 2),
    ] {
        write(root, &format!("{p}/{c}"), &format!("{}\n", 100 + k * step));
    }
    write(root, "sys/class/net/ens1np0/operstate", "up\n");
    write(
        root,
        "sys/class/net/ens1np0/carrier_changes",
        &format!("{}\n", 2 + 2 * k),
    );
    write(
        root,
        "commands/ethtool-S-ens1np0.txt",
        &format!(
            "NIC statistics:\n     rx_crc_errors_phy: {}\n     rx_discards_phy: {}\n     rx_prio3_pause: {}\n     rx_prio3_pause_duration: {}\n",
            k * 9,
            k * 4,
            k * 1000,
            k * 9_000_000
        ),
    );
}

fn emitted() -> (BTreeSet<String>, BTreeSet<String>) {
    let dir = tempfile::tempdir().unwrap();
    troubled_host(dir.path(), false);
    let mut c = Collector::new(
        Source::Host {
            tree: Box::new(DirTree::new(dir.path())),
            run_ethtool: false,
        },
        None,
    );
    // A job beside, whose NCCL RAS said one process died and another stopped answering
    // (`monitor --nccl-ras`), as its feed serves them.
    let mut ras = xirang_monitor::nccl_ras::PeerStates::default();
    for line in [
        "[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node 172.16.64.245 managing GPU 1",
        "[2025-12-19 13:07:08] PEER_UNRESPONSIVE: Process 1524346 on node 172.16.64.246 managing GPU 0",
    ] {
        ras.apply(&xirang_monitor::nccl_ras::monitor_event(line).unwrap());
    }
    c.extra
        .push(Box::new(move |_| xirang_monitor::collect::FeedRound {
            points: ras.points(true),
            ..Default::default()
        }));
    let mut ev = Evaluator::new(parse_rules(DEFAULT_RULES, "default").unwrap());
    ev.eval(&c.round(0));
    troubled_host(dir.path(), true);
    let mut fired = BTreeSet::new();
    let mut names = BTreeSet::new();
    // Three rounds at the same rates (for_rounds up to 3), counters advancing each time.
    for i in 1..=3u64 {
        if i > 1 {
            // Keep every counter moving at the same pace.
            let p = dir.path();
            for entry in walk(p) {
                if let Ok(text) = std::fs::read_to_string(&entry)
                    && let Ok(v) = text.trim().parse::<u64>()
                    && entry.to_string_lossy().contains("counters")
                {
                    let first = v - 100;
                    write(
                        p,
                        entry.strip_prefix(p).unwrap().to_str().unwrap(),
                        &format!("{}\n", v + first),
                    );
                }
            }
            let k = i;
            write(
                p,
                "sys/class/net/ens1np0/carrier_changes",
                &format!("{}\n", 2 + 2 * k),
            );
            write(
                p,
                "commands/ethtool-S-ens1np0.txt",
                &format!(
                    "NIC statistics:\n     rx_crc_errors_phy: {}\n     rx_discards_phy: {}\n     rx_prio3_pause: {}\n     rx_prio3_pause_duration: {}\n",
                    k * 9,
                    k * 4,
                    k * 1000,
                    k * 9_000_000
                ),
            );
        }
        let r = c.round(i * 10 * S);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        names.extend(r.points.iter().map(|p| p.metric.name.clone()));
        fired.extend(ev.eval(&r).into_iter().map(|f| f.rule));
    }
    (names, fired)
}

fn walk(p: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap().flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Metric names in a PromQL expression (words that start like ours).
fn metrics_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            cur.push(c);
        } else {
            if cur.starts_with("node_infiniband_") || cur.starts_with("xirang_") {
                out.push(cur.clone());
            }
            cur.clear();
        }
    }
    out
}

#[test]
fn every_default_rule_fires_on_its_fault() {
    let (_, fired) = emitted();
    let rules = parse_rules(DEFAULT_RULES, "default").unwrap();
    for r in &rules {
        assert!(
            fired.contains(&r.name),
            "rule {} did not fire; fired: {fired:?}",
            r.name
        );
    }
}

/// A rule file is checked against the names the agent can produce: every name it emits
/// on a troubled host with a RAS feed must be among them, or a valid rule would be refused.
#[test]
fn every_emitted_series_is_a_signal_a_rule_may_watch() {
    let (names, _) = emitted();
    assert!(names.len() > 20, "{names:?}");
    let unknown: Vec<&String> = names
        .iter()
        .filter(|n| !xirang_monitor::alerts::signal_known(n))
        .collect();
    assert!(
        unknown.is_empty(),
        "emitted but not known to the rule check: {unknown:?}"
    );
}

/// Each way a rule can never fire, or can never be routed, is refused with its line and
/// key path.
#[test]
fn rules_that_could_never_work_are_refused_at_their_line() {
    let rule = |signal: &str, extra: &str| {
        format!(
            "[[rule]]\nname = \"a\"\nsignal = \"xirang_link_errors_per_second\"\nabove = 0\n\
             severity = \"warning\"\nlayer = \"physical\"\nsummary = \"s\"\n\n\
             [[rule]]\nname = \"b\"\nsignal = \"{signal}\"\nabove = 0\n{extra}\
             severity = \"warning\"\nlayer = \"physical\"\nsummary = \"s\"\n"
        )
    };
    let err = |text: String| parse_rules(&text, "r.toml").unwrap_err().to_string();
    assert_eq!(
        err(rule("xirang_link_error_per_second", "")),
        "r.toml:11: rule[1].signal: unknown signal `xirang_link_error_per_second`, so the rule could never fire; did you mean `xirang_link_errors_per_second`?"
    );
    assert_eq!(
        err(rule("xirang_link_errors_per_second", "for_rounds = 0\n")),
        "r.toml:13: rule[1].for_rounds: expected 1 or more rounds, found 0"
    );
    assert_eq!(
        err(rule("xirang_link_errors_per_second", "").replace("name = \"b\"", "name = \"a\"")),
        "r.toml:10: rule[1].name: expected a name no other rule has, found `a` again (rule[0])"
    );
    assert_eq!(
        err(rule("xirang_link_errors_per_second", "").replacen(
            "layer = \"physical\"\nsummary = \"s\"\n\n",
            "layer = \"fysical\"\nsummary = \"s\"\n\n",
            1
        )),
        "r.toml:6: rule[0].layer: expected one of physical, network, application, found `fysical`"
    );
    assert_eq!(
        err(rule("xirang_link_errors_per_second", "for_rounds = -1\n")),
        "r.toml:13: rule[1].for_rounds: expected an integer 0..=4294967295, found -1"
    );
    // Families named by the device are known by their prefix.
    parse_rules(&rule("xirang_switch_queue_watermark_bytes", ""), "r.toml").unwrap();
}

#[test]
fn shipped_files_use_emitted_metrics_and_mirror_the_rules() {
    let (mut names, _) = emitted();
    // And what a SONiC switch gives (`monitor --sonic`): SONiC's own mock COUNTERS_DB
    // through the reader's translation and a round.
    let snap = xirang_monitor::sonic::snapshot_from_json(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/test_data/sonic/counters_db.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let r = xirang_monitor::sonic::translate("sw", "", &snap);
    let mut switch = Collector::new(Source::External, None);
    let round = switch.fold(0, &r.values, r.points, r.problems);
    assert!(round.problems.is_empty(), "{:?}", round.problems);
    names.extend(round.points.iter().map(|p| p.metric.name.clone()));
    // And what NCCL Inspector's files give (`monitor --nccl-inspector`).
    let ins = tempfile::tempdir().unwrap();
    let rec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/test_data/nccl-inspector/readme-json-coll-record.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut reader = xirang_monitor::inspector::InspectorDir::new(ins.path());
    reader.round();
    std::fs::write(ins.path().join("h-pid1.log"), rec.to_string() + "\n").unwrap();
    let r = reader.round();
    assert!(r.problems.is_empty() && r.points.len() == 2, "{:?}", r.problems);
    names.extend(r.points.iter().map(|p| p.metric.name.clone()));
    // And a job's NCCL RAS events (`monitor --nccl-ras`).
    let mut ras = xirang_monitor::nccl_ras::PeerStates::default();
    ras.apply(
        &xirang_monitor::nccl_ras::monitor_event(
            "[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node 172.16.64.245 managing GPU 1",
        )
        .unwrap(),
    );
    names.extend(ras.points(true).iter().map(|p| p.metric.name.clone()));
    // Emitted outside a round: by the server and the alert evaluator.
    for n in [
        "xirang_alert",
        "xirang_collector_duration_seconds",
        "xirang_scrape_render_duration_seconds",
        "xirang_history_errors_total",
    ] {
        names.insert(n.to_string());
    }
    let yml = std::fs::read_to_string(Path::new(MONITORING).join("prometheus-alerts.yml")).unwrap();
    let exprs: Vec<&str> = yml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr: "))
        .collect();
    assert!(!exprs.is_empty());
    for e in &exprs {
        for m in metrics_in(e) {
            assert!(
                names.contains(&m),
                "prometheus-alerts.yml uses `{m}`, which the agent does not emit"
            );
        }
    }
    for r in parse_rules(DEFAULT_RULES, "default").unwrap() {
        let want = format!("{} > {}", r.signal, r.above);
        assert!(
            exprs.iter().any(|e| e.starts_with(&want))
                || exprs
                    .iter()
                    .any(|e| *e == format!("{} > {:?}", r.signal, r.above)),
            "no PromQL alert `{want}` for rule {}",
            r.name
        );
    }
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(MONITORING).join("grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut n = 0;
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            for m in metrics_in(t["expr"].as_str().unwrap()) {
                assert!(
                    names.contains(&m),
                    "dashboard panel `{}` uses `{m}`, which the agent does not emit",
                    p["title"]
                );
                n += 1;
            }
        }
    }
    assert!(n >= 24, "{n}");
    // promtool, when installed (scripts/test.sh installs prometheus), accepts the file.
    if let Ok(out) = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(Path::new(MONITORING).join("prometheus-alerts.yml"))
        .output()
    {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    }
}
