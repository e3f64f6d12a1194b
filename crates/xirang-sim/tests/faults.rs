//! Injected faults show only through the real counter schema, where real hardware
//! would show them, and every run still conserves packets.

use std::path::Path;

use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_sim::{RunResult, options, simulate};

fn try_load(text: &str) -> Result<Loaded, xirang_fabric::scenario::ScenarioError> {
    Scenario::parse(text, Path::new("test.toml"))
        .and_then(|s| s.build(Path::new("test.toml"), Path::new("."), Some(text)))
}

fn load(text: &str) -> Loaded {
    try_load(text).unwrap_or_else(|e| panic!("{e}"))
}

/// The error a scenario that must not load gives.
fn load_err(text: &str) -> String {
    try_load(text).map(|_| ()).unwrap_err().to_string()
}

fn run(l: &Loaded) -> RunResult {
    let r = simulate(l, &options(l), &mut |_| {});
    r.check_conservation()
        .unwrap_or_else(|e| panic!("conservation: {e}"));
    r
}

fn nonzero(r: &RunResult, name: &str) -> Vec<(String, u64)> {
    r.counters
        .iter()
        .filter(|c| c.name == name && c.value > 0)
        .map(|c| (c.entity.clone(), c.value))
        .collect()
}

const FABRIC: &str = r#"
[topology.leaf_spine]
leaves = 2
spines = 2
hosts_per_leaf = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[workloads.one.flows]
list = [{ src = "h0", dst = "h2", bytes = 20_000_000 }, { src = "h3", dst = "h1", bytes = 20_000_000 }]
"#;

#[test]
fn bit_errors_count_at_the_receiving_end_and_the_sender_retransmits() {
    let healthy = run(&load(FABRIC));
    for c in [
        "symbol_error",
        "port_rcv_errors",
        "rx_crc_errors_phy",
        "link_downed",
        "SAI_PORT_STAT_IF_IN_ERRORS",
    ] {
        assert!(nonzero(&healthy, c).is_empty(), "{c} on a healthy run");
    }
    let text =
        format!("{FABRIC}\n[[faults]]\nkind = \"link_errors\"\ntarget = \"h2/mlx5_0\"\nloss = 0.002\n");
    let r = run(&load(&text));
    let sym = nonzero(&r, "symbol_error");
    assert_eq!(sym.len(), 1, "{sym:?}");
    assert_eq!(sym[0].0, "h2/mlx5_0/1");
    assert_eq!(nonzero(&r, "port_rcv_errors"), sym);
    // The PHY counts the same frames: FCS failures that FEC could not correct.
    assert_eq!(nonzero(&r, "rx_crc_errors_phy"), sym);
    assert_eq!(nonzero(&r, "rx_pcs_symbol_err_phy"), sym);
    // The sender of the corrupted flow saw NAKs for the gaps and resent.
    assert!(!nonzero(&r, "packet_seq_err").is_empty());
    assert!(
        r.flows.iter().all(|f| f.fct_ps.is_some()),
        "every flow still finishes"
    );
    let slow = r.flows[0].fct_ps.unwrap();
    assert!(
        slow > healthy.flows[0].fct_ps.unwrap(),
        "retransmissions cost time"
    );
    // Deterministic: same scenario and seed, same corrupted packets.
    let again = run(&load(&text));
    assert_eq!(nonzero(&again, "symbol_error"), sym);
}

#[test]
fn bit_errors_on_a_switch_port_count_in_its_sai_in_errors() {
    // h0's traffic to h2 enters leaf1 from a spine; h3 -> h1 enters leaf0. Find the port
    // by name through the counters of a healthy run: the leaf port facing h2.
    let text = format!("{FABRIC}\n[[faults]]\nkind = \"link_errors\"\ntarget = \"leaf1:2\"\nloss = 0.01\n");
    let l = load(&text);
    let r = run(&l);
    let errs = nonzero(&r, "SAI_PORT_STAT_IF_IN_ERRORS");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].0, "leaf1:2");
}

#[test]
fn a_link_down_window_counts_at_the_nic_end_and_traffic_recovers() {
    let text = format!(
        "{FABRIC}\n[[faults]]\nkind = \"link_down\"\ntarget = \"h2/mlx5_0\"\nstart_us = 200\nend_us = 400\n"
    );
    let r = run(&load(&text));
    let downs = nonzero(&r, "link_downed");
    assert_eq!(
        downs,
        vec![("h2/mlx5_0/1".to_string(), 1)],
        "the NIC end (the switch end has no such PMA counter)"
    );
    assert!(
        r.flows.iter().all(|f| f.fct_ps.is_some()),
        "traffic recovers after the link comes back"
    );
    assert!(
        r.flows[0].fct_ps.unwrap() > 400_000_000,
        "the flow waited for the link"
    );
}

/// Issue 21: a link down for good makes the sender's QP give up after NCCL's retry count
/// instead of retransmitting every timeout forever; the run ends by itself and says which
/// flow failed.
#[test]
fn a_link_down_for_good_fails_the_flow_after_its_retries() {
    let text = format!("{FABRIC}\n[[faults]]\nkind = \"link_down\"\ntarget = \"h2/mlx5_0\"\nstart_us = 50\n");
    let r = run(&load(&text));
    let failed: Vec<_> = r.flows.iter().filter(|f| f.failed).collect();
    assert!(!failed.is_empty(), "a flow through the dead link fails");
    for f in &failed {
        assert!(f.fct_ps.is_none() && f.bytes_received < f.bytes);
        assert!(
            f.src.starts_with("h2/") || f.dst.starts_with("h2/"),
            "{} -> {}",
            f.src,
            f.dst
        );
    }
    assert!(
        r.flows.iter().filter(|f| !f.failed).all(|f| f.fct_ps.is_some()),
        "the others finish"
    );
    assert_eq!(r.stats.qps_failed as usize, failed.len());
    // One timeout per retry and the last one: 8 per failed QP at the sender.
    let timeouts: u64 = nonzero(&r, "local_ack_timeout_err").iter().map(|(_, v)| v).sum();
    assert_eq!(timeouts, 8 * r.stats.qps_failed);
    // Eight timeouts of 4.3 s, then the run stops.
    let t = r.stats.sim_time_ps as f64 / 1e12;
    assert!((34.0..36.0).contains(&t), "{t} s");
}

#[test]
fn bad_faults_are_errors_with_their_key() {
    for (fault, want) in [
        (
            "kind = \"link_errors\"\ntarget = \"h9/mlx5_0\"\nloss = 0.1",
            "faults[0].target",
        ),
        (
            "kind = \"link_errors\"\ntarget = \"h1/mlx5_0\"",
            "faults[0].loss: `link_errors` needs `loss`",
        ),
        (
            "kind = \"link_errors\"\ntarget = \"h1/mlx5_0\"\nloss = 2",
            "faults[0].loss: expected a share of packets in (0, 1], found 2",
        ),
        (
            "kind = \"link_down\"\ntarget = \"h1/mlx5_0\"\nstart_us = 5\nend_us = 5",
            "faults[0].end_us: expected a time after start_us (5), found 5",
        ),
        (
            "kind = \"link_down\"\ntarget = \"h1/mlx5_0\"\nloss = 0.5",
            "faults[0].loss: `link_down` takes no `loss`",
        ),
        ("kind = \"melt\"\ntarget = \"h1/mlx5_0\"", "faults[0].kind"),
        (
            "kind = \"ecn_off\"\ntarget = \"leaf0:0\"\nend_us = 100\n[[faults]]\nkind = \"ecn_off\"\ntarget = \"leaf0:0\"\nstart_us = 100",
            "faults[1].start_us: overlaps or touches faults[0] on the same place",
        ),
        (
            // Both ends of one link.
            "kind = \"slow_link\"\ntarget = \"h1/mlx5_0\"\nrate_gbps = 50\n[[faults]]\nkind = \"slow_link\"\ntarget = \"leaf0:1\"\nrate_gbps = 25\nstart_us = 50",
            "faults[1].start_us: overlaps or touches faults[0]",
        ),
        (
            "kind = \"slow_link\"\ntarget = \"h1/mlx5_0\"\nrate_gbps = 100",
            "faults[0].rate_gbps: expected a rate of at least 0.001 Gbit/s (1 Mbit/s) and below the link's 100 Gbit/s, found 100",
        ),
        (
            "kind = \"slow_link\"\ntarget = \"h1/mlx5_0\"",
            "faults[0].rate_gbps: `slow_link` needs `rate_gbps`",
        ),
        (
            "kind = \"ecn_off\"\ntarget = \"h1/mlx5_0\"",
            "faults[0].target: `ecn_off` sits on a switch port, found NIC port `h1/mlx5_0`",
        ),
        (
            "kind = \"pfc_off\"\ntarget = \"leaf0:0\"\nmtu_bytes = 1500",
            "faults[0].mtu_bytes: `pfc_off` takes no `mtu_bytes`",
        ),
        (
            "kind = \"mtu_mismatch\"\ntarget = \"leaf0:0\"\nmtu_bytes = 100",
            "faults[0].mtu_bytes: expected an MTU of 576..=9100 bytes, found 100",
        ),
        (
            "kind = \"slow_receiver\"\ntarget = \"leaf0:0\"\ndrain_gbps = 10",
            "faults[0].target: `slow_receiver` sits on a NIC port, found switch port `leaf0:0`",
        ),
        (
            "kind = \"slow_receiver\"\ntarget = \"h1/mlx5_0\"\ndrain_gbps = 0",
            "faults[0].drain_gbps: expected a rate of at least 0.001 Gbit/s (1 Mbit/s) and below the link's 100 Gbit/s, found 0",
        ),
    ] {
        let text = format!("{FABRIC}\n[[faults]]\n{fault}\n");
        let e = load_err(&text);
        assert!(e.contains(want), "{fault}\n got: {e}\nwant: {want}");
    }
}

fn value(r: &RunResult, entity: &str, name: &str) -> u64 {
    r.counters
        .iter()
        .find(|c| c.entity == entity && c.name == name)
        .unwrap_or_else(|| panic!("no {name} of {entity}"))
        .value
}

fn fct_us(r: &RunResult, flow: usize) -> f64 {
    r.flows[flow].fct_ps.expect("the flow finished") as f64 / 1e6
}

#[test]
fn a_link_trained_down_runs_and_reports_its_rate_at_both_ends() {
    let healthy = run(&load(FABRIC));
    assert_eq!(value(&healthy, "h0/mlx5_0/1", "rate"), 100_000);
    let text =
        format!("{FABRIC}\n[[faults]]\nkind = \"slow_link\"\ntarget = \"h0/mlx5_0\"\nrate_gbps = 25\n");
    let r = run(&load(&text));
    assert_eq!(value(&r, "h0/mlx5_0/1", "rate"), 25_000);
    assert_eq!(value(&r, "leaf0:0", "SAI_PORT_ATTR_SPEED"), 25_000);
    assert_eq!(value(&r, "h1/mlx5_0/1", "rate"), 100_000);
    // 20 MB at 25 Gbit/s takes at least 6.4 ms.
    assert!(fct_us(&r, 0) >= 6_400.0, "{}", fct_us(&r, 0));
    assert!(fct_us(&healthy, 0) < 2_500.0);
    // Ended early, the link is back at its rate.
    let text = format!(
        "{FABRIC}\n[[faults]]\nkind = \"slow_link\"\ntarget = \"h0/mlx5_0\"\nrate_gbps = 25\nend_us = 500\n"
    );
    let r = run(&load(&text));
    assert_eq!(value(&r, "leaf0:0", "SAI_PORT_ATTR_SPEED"), 100_000);
    assert!(fct_us(&r, 0) > fct_us(&healthy, 0) && fct_us(&r, 0) < 6_400.0);
}

/// Two senders into h2: the leaf port facing h2 queues and marks.
const INCAST: &str = r#"
[topology.leaf_spine]
leaves = 2
spines = 2
hosts_per_leaf = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[workloads.incast.flows]
list = [{ src = "h0", dst = "h2", bytes = 10_000_000 }, { src = "h3", dst = "h2", bytes = 10_000_000 }]
"#;

#[test]
fn ecn_off_on_a_port_stops_its_marks_only() {
    let marks = |r: &RunResult| value(r, "leaf1:0/q3", "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS");
    let healthy = run(&load(INCAST));
    assert!(marks(&healthy) > 0);
    let r = run(&load(&format!(
        "{INCAST}\n[[faults]]\nkind = \"ecn_off\"\ntarget = \"leaf1:0\"\n"
    )));
    assert_eq!(marks(&r), 0);
    assert!(
        value(&r, "leaf1:0/q3", "SAI_QUEUE_STAT_WATERMARK_BYTES")
            > value(&healthy, "leaf1:0/q3", "SAI_QUEUE_STAT_WATERMARK_BYTES"),
        "without marks the senders do not slow down and the queue goes deeper"
    );
}

#[test]
fn pfc_off_on_a_port_never_pauses_and_drops_at_its_ingress() {
    // Shallow buffers: the incast reaches the XOFF threshold before ECN acts.
    let shallow = format!("{INCAST}\n[config.buffer]\nswitch_bytes = 400_000\n");
    let healthy = run(&load(&shallow));
    let pauses = |r: &RunResult, p: &str| value(r, p, "SAI_PORT_STAT_PFC_3_TX_PKTS");
    let discards = |r: &RunResult| nonzero(r, "SAI_PORT_STAT_IF_IN_DISCARDS");
    assert!(
        discards(&healthy).is_empty(),
        "lossless: {:?}",
        discards(&healthy)
    );
    let paused: Vec<String> = healthy
        .counters
        .iter()
        .filter(|c| c.name == "SAI_PORT_STAT_PFC_3_TX_PKTS" && c.value > 0)
        .map(|c| c.entity.clone())
        .collect();
    let port = paused.first().expect("the healthy shallow incast pauses").clone();
    let r = run(&load(&format!(
        "{shallow}\n[[faults]]\nkind = \"pfc_off\"\ntarget = \"{port}\"\n"
    )));
    assert_eq!(pauses(&r, &port), 0, "{port} sent PFC frames");
    let d = discards(&r);
    assert!(!d.is_empty() && d.iter().all(|(e, _)| *e == port), "{d:?}");
}

#[test]
fn an_mtu_below_the_frames_drops_them_as_oversize_input_errors() {
    let r = run(&load(&format!(
        "{FABRIC}\n[[faults]]\nkind = \"mtu_mismatch\"\ntarget = \"leaf0:0\"\nmtu_bytes = 1500\n\n[run]\nend_us = 2000\n"
    )));
    let oversize = nonzero(&r, "SAI_PORT_STAT_ETHER_RX_OVERSIZE_PKTS");
    assert_eq!(oversize.len(), 1, "{oversize:?}");
    assert_eq!(oversize[0].0, "leaf0:0");
    assert_eq!(nonzero(&r, "SAI_PORT_STAT_IF_IN_ERRORS"), oversize);
    assert!(r.flows[0].fct_ps.is_none(), "h0's full-size packets never pass");
    assert!(
        r.flows[1].fct_ps.is_some(),
        "h3 -> h1 does not cross leaf0:0's input"
    );
}

#[test]
fn a_slow_receiver_pauses_its_switch_and_limits_its_senders() {
    let text =
        format!("{FABRIC}\n[[faults]]\nkind = \"slow_receiver\"\ntarget = \"h2/mlx5_0\"\ndrain_gbps = 20\n");
    let r = run(&load(&text));
    assert!(value(&r, "h2/mlx5_0/1", "tx_prio3_pause") > 0);
    let paused_us = value(&r, "h2/mlx5_0/1", "tx_prio3_pause_duration") as f64;
    // 20 MB drained at 20 Gbit/s: 8 ms, paused most of it.
    let fct = fct_us(&r, 0);
    assert!(fct >= 8_000.0 * 0.95, "{fct}");
    assert!(paused_us > 0.5 * fct, "paused {paused_us} µs of {fct}");
    // The switch port facing h2 received the pauses; nobody else's receiver paused.
    assert!(value(&r, "leaf1:0", "SAI_PORT_STAT_PFC_3_RX_PKTS") > 0);
    assert_eq!(value(&r, "h1/mlx5_0/1", "tx_prio3_pause"), 0);
}

#[test]
fn a_degraded_pcie_link_caps_the_nic_and_reports_its_width() {
    let healthy = run(&load(FABRIC));
    assert_eq!(
        value(&healthy, "h0/mlx5_0/1", "current_link_width"),
        value(&healthy, "h0/mlx5_0/1", "max_link_width")
    );
    // h0 sends 20 MB to h2 and h2 receives it: degrade both ends' NICs in turn.
    for nic in ["h0/mlx5_0", "h2/mlx5_0"] {
        let r = run(&load(&format!(
            "{FABRIC}\n[[faults]]\nkind = \"pcie_degraded\"\ntarget = \"{nic}\"\npcie_width = 2\n"
        )));
        let port = format!("{nic}/1");
        assert_eq!(value(&r, &port, "current_link_width"), 2);
        let speed_gts = value(&r, &port, "current_link_speed") as f64 / 1000.0;
        let usable_gbps = speed_gts * 2.0 * 128.0 / 130.0;
        assert!(usable_gbps < 100.0);
        // 20 MB at the PCIe rate.
        let floor_us = 20e6 * 8.0 / (usable_gbps * 1e3);
        assert!(
            fct_us(&r, 0) >= 0.95 * floor_us,
            "{nic}: {} < {floor_us}",
            fct_us(&r, 0)
        );
        let pauses = value(&r, &port, "tx_prio3_pause");
        if nic == "h2/mlx5_0" {
            assert!(pauses > 0, "the receiver backs up into PFC");
        } else {
            assert_eq!(pauses, 0, "a capped sender has nothing to pause");
        }
    }
}

#[test]
fn a_nic_funnel_moves_a_hosts_flows_onto_one_nic() {
    const RAIL: &str = r#"
[topology.rail_optimized]
hosts = 2
spines = 1
host_rate_gbps = 100
fabric_rate_gbps = 100

[topology.rail_optimized.host]
gpus = 2
nics = 2

[workloads.pair.flows]
list = [
  { src = "h0/GPU0", dst = "h1/GPU0", bytes = 1_000_000 },
  { src = "h0/GPU1", dst = "h1/GPU1", bytes = 1_000_000 },
]
"#;
    let healthy = run(&load(RAIL));
    assert!(value(&healthy, "h0/mlx5_1/1", "port_xmit_data") > 0);
    let r = run(&load(&format!(
        "{RAIL}\n[[faults]]\nkind = \"nic_funnel\"\ntarget = \"h0/mlx5_0\"\n"
    )));
    assert_eq!(value(&r, "h0/mlx5_1/1", "port_xmit_data"), 0);
    // Both flows' words on one port (each port count rounds down to whole 4-byte words).
    let both =
        value(&healthy, "h0/mlx5_0/1", "port_xmit_data") + value(&healthy, "h0/mlx5_1/1", "port_xmit_data");
    assert!(value(&r, "h0/mlx5_0/1", "port_xmit_data").abs_diff(both) <= 1);
    assert!(
        r.flows.iter().all(|f| f.src == "h0/mlx5_0"),
        "{:?}",
        r.flows.iter().map(|f| &f.src).collect::<Vec<_>>()
    );
    // The application's configuration holds for the whole run.
    let bad = format!("{RAIL}\n[[faults]]\nkind = \"nic_funnel\"\ntarget = \"h0/mlx5_0\"\nstart_us = 5\n");
    let e = load_err(&bad);
    assert!(
        e.contains("faults[0].start_us: `nic_funnel` is configuration and holds for the whole run"),
        "{e}"
    );
}

#[test]
fn gdr_off_caps_what_a_nic_sends_and_is_sent_without_pausing_anyone() {
    // Two flows into h2 and one out of it, 4 MB each: the bounce through host memory
    // caps both directions at 25 Gbit/s.
    const F: &str = r#"
[topology.leaf_spine]
leaves = 2
spines = 2
hosts_per_leaf = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[workloads.w.flows]
list = [
  { src = "h0", dst = "h2", bytes = 4_000_000 }, { src = "h1", dst = "h2", bytes = 4_000_000 },
  { src = "h2", dst = "h1", bytes = 4_000_000 }, { src = "h3", dst = "h0", bytes = 4_000_000 },
]
"#;
    let healthy = run(&load(F));
    let r = run(&load(&format!(
        "{F}\n[[faults]]\nkind = \"gdr_off\"\ntarget = \"h2/mlx5_0\"\nbounce_gbps = 25\n"
    )));
    let bounce_us = |bytes: f64| bytes * 8.0 / 25e9 * 1e6;
    // Into h2: 8 MB share one 25 Gbit/s gate (payload only: headers make it slower).
    let into = fct_us(&r, 0).max(fct_us(&r, 1));
    assert!(into >= bounce_us(8e6), "{into} µs");
    assert!(into < 1.3 * bounce_us(8e6), "{into} µs");
    // ... and share it: neither sender waits for the other to finish.
    let first = fct_us(&r, 0).min(fct_us(&r, 1));
    assert!(first > 0.8 * into, "{first} µs of {into}");
    // Out of h2: its own 4 MB at the cap.
    let out = fct_us(&r, 2);
    assert!(out >= bounce_us(4e6) && out < 1.3 * bounce_us(4e6), "{out} µs");
    // The flow that does not touch h2 runs as in the healthy run.
    assert!((fct_us(&r, 3) / fct_us(&healthy, 3) - 1.0).abs() < 0.1);
    // Nothing pauses: the host grants less credit, it does not back-pressure the wire.
    assert!(nonzero(&r, "tx_prio3_pause").is_empty());
    assert!(nonzero(&r, "SAI_PORT_STAT_PFC_3_TX_PKTS").is_empty());
    // The NIC's PCIe link is healthy: what it reports is its maximum.
    assert_eq!(
        value(&r, "h2/mlx5_0/1", "current_link_width"),
        value(&r, "h2/mlx5_0/1", "max_link_width")
    );
    // Configuration: the whole run, on a NIC, with its bounce rate.
    let e = load_err(&format!(
        "{F}\n[[faults]]\nkind = \"gdr_off\"\ntarget = \"leaf0:0\"\nstart_us = 3\n"
    ));
    assert!(e.contains("faults[0].target: `gdr_off` names a NIC"), "{e}");
    assert!(
        e.contains("faults[0].start_us: `gdr_off` is configuration"),
        "{e}"
    );
    assert!(
        e.contains("faults[0].bounce_gbps: `gdr_off` needs `bounce_gbps`"),
        "{e}"
    );
}

/// Two leaves of four hosts under four spines; every host of leaf0 sends 4 MB to a host
/// of leaf1 over 8 QPs (32 ECMP flows out of leaf0).
const WIDE: &str = r#"
[topology.leaf_spine]
leaves = 2
spines = 4
hosts_per_leaf = 4
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[config.transport]
qps_per_connection = 8

[workloads.w.flows]
list = [
  { src = "h0", dst = "h4", bytes = 4_000_000 }, { src = "h1", dst = "h5", bytes = 4_000_000 },
  { src = "h2", dst = "h6", bytes = 4_000_000 }, { src = "h3", dst = "h7", bytes = 4_000_000 },
]
"#;

/// Data bytes each spine received, by spine index.
fn spine_bytes(r: &RunResult, spines: usize) -> Vec<u64> {
    (0..spines)
        .map(|s| {
            r.counters
                .iter()
                .filter(|c| {
                    c.name == "SAI_PORT_STAT_IF_IN_OCTETS" && c.entity.starts_with(&format!("spine{s}:"))
                })
                .map(|c| c.value)
                .sum()
        })
        .collect()
}

#[test]
fn an_ecmp_imbalance_sends_its_share_of_flows_to_the_hot_spine() {
    let share = |b: &[u64], s: usize| b[s] as f64 / b.iter().sum::<u64>() as f64;
    let healthy = spine_bytes(&run(&load(WIDE)), 4);
    assert!(share(&healthy, 1) < 0.45, "{healthy:?}");
    let r = run(&load(&format!(
        "{WIDE}\n[[faults]]\nkind = \"ecmp_imbalance\"\ntarget = \"spine1\"\nshare = 0.75\n"
    )));
    let hot = spine_bytes(&r, 4);
    assert!(share(&hot, 1) > 0.6, "{hot:?}");
    // The rest still spread over the other spines (more than acknowledgements' worth).
    assert!(hot.iter().filter(|b| **b > 500_000).count() >= 3, "{hot:?}");
    let e = load_err(&format!(
        "{WIDE}\n[[faults]]\nkind = \"ecmp_imbalance\"\ntarget = \"spine9\"\nshare = 1.5\n\n[[faults]]\nkind = \"ecmp_imbalance\"\ntarget = \"spine0\"\nshare = 0.5\n"
    ));
    assert!(
        e.contains("faults[0].target: `ecmp_imbalance` takes a switch name: unknown switch `spine9`"),
        "{e}"
    );
    assert!(
        e.contains("faults[0].share: expected a share of flows in (0, 1), found 1.5"),
        "{e}"
    );
    assert!(
        e.contains("faults[1].kind: faults[0] already sets the switches' ECMP hashing"),
        "{e}"
    );
    // A leaf is nobody's equal-cost choice here.
    let e = load_err(&format!(
        "{WIDE}\n[[faults]]\nkind = \"ecmp_imbalance\"\ntarget = \"leaf0\"\nshare = 0.5\n"
    ));
    assert!(
        e.contains("faults[0].target: `leaf0` is never one of several equal-cost next hops"),
        "{e}"
    );
}

#[test]
fn single_qp_puts_each_connection_of_the_workload_on_one_path() {
    // Spines that carried a connection's data (ACKs are a few kB).
    let used = |r: &RunResult| spine_bytes(r, 4).iter().filter(|b| **b > 500_000).count();
    let one = WIDE.replace(
        "list = [\n  { src = \"h0\", dst = \"h4\", bytes = 4_000_000 }, { src = \"h1\", dst = \"h5\", bytes = 4_000_000 },\n  { src = \"h2\", dst = \"h6\", bytes = 4_000_000 }, { src = \"h3\", dst = \"h7\", bytes = 4_000_000 },\n]",
        "list = [{ src = \"h0\", dst = \"h4\", bytes = 4_000_000 }]",
    );
    assert_ne!(one, WIDE);
    assert!(used(&run(&load(&one))) >= 2, "8 QPs spread over the spines");
    let r = run(&load(&format!(
        "{one}\n[[faults]]\nkind = \"single_qp\"\ntarget = \"w\"\n"
    )));
    assert_eq!(used(&r), 1);
    let e = load_err(&format!(
        "{one}\n[[faults]]\nkind = \"single_qp\"\ntarget = \"x\"\n"
    ));
    assert!(
        e.contains("faults[0].target: `single_qp` takes a workload name: unknown workload `x`"),
        "{e}"
    );
}
