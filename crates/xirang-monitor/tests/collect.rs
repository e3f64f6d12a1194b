//! The collector on real and damaged host trees.

use std::path::{Path, PathBuf};

use serde_json::Value;
use xirang_host::tree::DirTree;
use xirang_monitor::collect::{Collector, Round, Source};
use xirang_monitor::expose;
use xirang_telemetry::metric::metric_for;

/// The procfs fixture, shared with the host reader's tests.
const PROCFS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../xirang-host/test_data/sysfs/procfs"
);

fn collector(root: &Path) -> Collector {
    Collector::new(
        Source::Host {
            tree: Box::new(DirTree::new(root)),
            run_ethtool: false,
        },
        None,
    )
}

const S: u64 = 1_000_000_000;

#[test]
fn procfs_metrics_equal_upstream_expectations() {
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(PROCFS).join("expected.json")).unwrap())
            .unwrap();
    let round = collector(Path::new(PROCFS)).round(S);
    let mut checked = 0;
    for (dev, d) in exp["infiniband"].as_object().unwrap() {
        for (port, p) in d["ports"].as_object().unwrap() {
            let l = [("device", dev.as_str()), ("port", port.as_str())];
            assert_eq!(
                round.get("node_infiniband_state_id", &l),
                p["state_id"].as_f64(),
                "{dev}/{port}"
            );
            assert_eq!(
                round.get("node_infiniband_physical_state_id", &l),
                p["phys_state_id"].as_f64(),
                "{dev}/{port}"
            );
            assert_eq!(
                round.get("node_infiniband_rate_bytes_per_second", &l),
                p["rate_bytes_per_sec"].as_f64(),
                "{dev}/{port}"
            );
            for group in ["counters", "hw_counters"] {
                let Some(cs) = p.get(group).and_then(|v| v.as_object()) else {
                    continue;
                };
                for (name, v) in cs {
                    // expected.json names byte counters `<sysfs name>_bytes` (raw x 4).
                    let sysfs = name.strip_suffix("_bytes").unwrap_or(name);
                    let entity = format!("local/{dev}/{port}").parse().unwrap();
                    let m = metric_for(&entity, sysfs, false);
                    let got = round
                        .get(&m.name, &l)
                        .unwrap_or_else(|| panic!("no {} for {dev}/{port} {name}", m.name));
                    let want = if sysfs == "lifespan" {
                        v.as_f64().unwrap() / 1000.0
                    } else {
                        v.as_f64().unwrap()
                    };
                    assert_eq!(got, want, "{dev}/{port} {name} as {}", m.name);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 40, "{checked}");
    // node_exporter's names and labels, for a few counters it has.
    let text = expose::render_round(&round, &[], false);
    for line in [
        "node_infiniband_port_data_transmitted_bytes_total{device=\"mlx5_0\",port=\"1\"} 11523046035392",
        "node_infiniband_port_transmit_wait_total{device=\"mlx4_0\",port=\"1\"} 3599",
        "node_infiniband_local_ack_timeout_errors_total{device=\"mlx5_0\",port=\"1\"} 131",
        "# TYPE node_infiniband_symbol_error_total counter",
        "node_infiniband_info{device=\"mlx4_0\",board_id=\"SM_1141000001000\",firmware_version=\"2.31.5050\",hca_type=\"MT4099\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing `{line}`");
    }
    let om = expose::render_round(&round, &[], true);
    assert!(om.contains("# TYPE node_infiniband_symbol_error counter\n") && om.ends_with("# EOF\n"));
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&p);
    std::fs::write(p, text).unwrap();
}

/// A Soft-RoCE-like device: ports with hw_counters only (no PMA counters/ directory).
fn rxe_tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let p = "sys/class/infiniband/rxe0/ports/1";
    write(&root, &format!("{p}/state"), "4: ACTIVE\n");
    write(&root, &format!("{p}/phys_state"), "5: LinkUp\n");
    write(&root, &format!("{p}/rate"), "10 Gb/sec (1X QDR)\n");
    write(&root, &format!("{p}/hw_counters/sent_pkts"), "100\n");
    write(&root, &format!("{p}/hw_counters/rcvd_pkts"), "100\n");
    write(&root, &format!("{p}/hw_counters/out_of_sequence"), "4294967200\n");
    (dir, root)
}

#[test]
fn wrap_reset_vanish_and_garbage() {
    let (_d, root) = rxe_tree();
    let mut c = collector(&root);
    let p = "sys/class/infiniband/rxe0/ports/1/hw_counters";
    let l = [("device", "rxe0"), ("port", "1")];
    let r1 = c.round(S);
    assert_eq!(r1.get("xirang_infiniband_sent_pkts_total", &l), Some(100.0));
    // out_of_sequence is a 32-bit Q-counter: it wraps; sent_pkts is reset (device reset).
    write(&root, &format!("{p}/out_of_sequence"), "104\n");
    write(&root, &format!("{p}/sent_pkts"), "7\n");
    let r2 = c.round(2 * S);
    assert_eq!(
        r2.get("node_infiniband_out_of_sequence_packets_received_total", &l),
        Some(4294967200.0 + 200.0)
    );
    assert_eq!(r2.get("xirang_retransmissions_per_second", &l), Some(200.0));
    assert_eq!(
        r2.get("xirang_infiniband_sent_pkts_total", &l),
        Some(107.0),
        "monotonic across the reset"
    );
    assert_eq!(r2.resets, vec!["local/rxe0/1 sent_pkts".to_string()]);
    // Garbage in a file: a problem (counted), the counter vanishes, the round goes on.
    write(&root, &format!("{p}/rcvd_pkts"), "\u{0}\u{ff}garbage");
    let r3 = c.round(3 * S);
    assert!(
        r3.problems.iter().any(|x| x.contains("rcvd_pkts")),
        "{:?}",
        r3.problems
    );
    assert_eq!(r3.vanished, vec!["local/rxe0/1 rcvd_pkts".to_string()]);
    assert_eq!(r3.get("xirang_collector_errors_total", &[]), Some(1.0));
    assert!(r3.get("xirang_infiniband_sent_pkts_total", &l).is_some());
    // The whole device vanishes, then comes back: no error, no stale series, no rate
    // across the gap.
    std::fs::remove_dir_all(root.join("sys/class/infiniband/rxe0")).unwrap();
    let r4 = c.round(4 * S);
    assert!(r4.get("xirang_infiniband_sent_pkts_total", &l).is_none());
    assert_eq!(r4.get("xirang_collector_errors_total", &[]), Some(1.0));
    let (_d2, root2) = rxe_tree();
    let mut moved = collector(&root2);
    let r5: Round = moved.round(5 * S);
    assert!(r5.get("xirang_retransmissions_per_second", &l).is_none());
    // An unreadable directory where a counter file was.
    std::fs::create_dir_all(root2.join("sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts.d")).unwrap();
    std::fs::remove_file(root2.join("sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts")).unwrap();
    std::fs::create_dir_all(root2.join("sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts")).unwrap();
    let r6 = moved.round(6 * S);
    assert!(
        r6.problems.iter().any(|x| x.contains("sent_pkts")),
        "{:?}",
        r6.problems
    );
}

#[test]
fn pause_ratio_and_ecn_signals_from_fixture_counters() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let p = "sys/class/infiniband/mlx5_0/ports/1";
    write(root, &format!("{p}/state"), "4: ACTIVE\n");
    write(root, &format!("{p}/phys_state"), "5: LinkUp\n");
    write(root, &format!("{p}/counters/port_rcv_packets"), "1000\n");
    write(
        root,
        &format!("{p}/hw_counters/np_ecn_marked_roce_packets"),
        "0\n",
    );
    write(root, &format!("{p}/hw_counters/np_cnp_sent"), "0\n");
    write(root, "sys/class/net/ens1np0/operstate", "up\n");
    write(
        root,
        "commands/ethtool-S-ens1np0.txt",
        "NIC statistics:\n     rx_prio3_pause: 0\n     rx_prio3_pause_duration: 0\n",
    );
    let mut c = collector(root);
    c.round(10 * S);
    write(root, &format!("{p}/counters/port_rcv_packets"), "11000\n");
    write(
        root,
        &format!("{p}/hw_counters/np_ecn_marked_roce_packets"),
        "2500\n",
    );
    write(root, &format!("{p}/hw_counters/np_cnp_sent"), "300\n");
    // 6 s of pause in a 10 s interval.
    write(
        root,
        "commands/ethtool-S-ens1np0.txt",
        "NIC statistics:\n     rx_prio3_pause: 120\n     rx_prio3_pause_duration: 6000000\n",
    );
    let r = c.round(20 * S);
    let l = [("device", "mlx5_0"), ("port", "1")];
    assert_eq!(r.get("xirang_ecn_marked_ratio", &l), Some(0.25));
    assert_eq!(r.get("xirang_cnp_sent_per_second", &l), Some(30.0));
    let pl = [("device", "ens1np0"), ("direction", "rx"), ("priority", "3")];
    assert_eq!(r.get("xirang_pfc_pause_ratio", &pl), Some(0.6));
    assert_eq!(r.get("xirang_pfc_pause_seconds_total", &pl), Some(6.0));
    assert_eq!(r.get("xirang_pfc_pause_frames_total", &pl), Some(120.0));
}

#[test]
fn a_counter_missing_for_a_round_continues_its_total() {
    let (_d, root) = rxe_tree();
    let mut c = collector(&root);
    let p = "sys/class/infiniband/rxe0/ports/1/hw_counters";
    let l = [("device", "rxe0"), ("port", "1")];
    let name = "node_infiniband_out_of_sequence_packets_received_total";
    c.round(S);
    write(&root, &format!("{p}/out_of_sequence"), "104\n"); // wrapped: total 4294967400
    assert_eq!(c.round(2 * S).get(name, &l), Some(4294967400.0));
    write(&root, &format!("{p}/out_of_sequence"), "garbage");
    assert_eq!(c.round(3 * S).get(name, &l), None);
    write(&root, &format!("{p}/out_of_sequence"), "110\n");
    // Continues from the total it had, rather than restarting at the raw 110.
    assert_eq!(c.round(4 * S).get(name, &l), Some(4294967406.0));
}

#[test]
fn a_commands_link_out_of_the_root_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    write(&root, "sys/class/net/ens1np0/operstate", "up\n");
    let outside = dir.path().join("outside");
    write(
        &outside,
        "ethtool-S-ens1np0.txt",
        "NIC statistics:\n     rx_prio3_pause: 7\n",
    );
    std::os::unix::fs::symlink("../outside", root.join("commands")).unwrap();
    let r = collector(&root).round(S);
    assert!(
        r.points.iter().all(|p| !p.metric.name.starts_with("xirang_pfc")),
        "read through a link out of the root"
    );
    // Inside the root, a linked commands directory is fine.
    std::fs::remove_file(root.join("commands")).unwrap();
    write(
        &root,
        "captured/ethtool-S-ens1np0.txt",
        "NIC statistics:\n     rx_prio3_pause: 7\n",
    );
    std::os::unix::fs::symlink("captured", root.join("commands")).unwrap();
    let r = collector(&root).round(S);
    assert_eq!(
        r.get("xirang_pfc_pause_frames_total", &[("device", "ens1np0")]),
        Some(7.0)
    );
}
