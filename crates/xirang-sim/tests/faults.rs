//! Injected faults show only through the real counter schema, where real hardware
//! would show them, and every run still conserves packets.

use std::path::Path;

use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_sim::{RunResult, options, simulate};

fn load(text: &str) -> Loaded {
    Scenario::parse(text, Path::new("test.toml"))
        .and_then(|s| s.build(Path::new("test.toml"), Path::new("."), Some(text)))
        .unwrap_or_else(|e| panic!("{e}"))
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

#[test]
fn bad_faults_are_errors_with_their_key() {
    for (fault, want) in [
        (
            "kind = \"link_errors\"\ntarget = \"h9/mlx5_0\"\nloss = 0.1",
            "faults[0].target",
        ),
        (
            "kind = \"link_errors\"\ntarget = \"h1/mlx5_0\"",
            "faults[0].loss: link_errors needs `loss`",
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
            "faults[0].loss: link_down takes no `loss`",
        ),
        ("kind = \"melt\"\ntarget = \"h1/mlx5_0\"", "faults[0].kind"),
    ] {
        let text = format!("{FABRIC}\n[[faults]]\n{fault}\n");
        let e = Scenario::parse(&text, Path::new("test.toml"))
            .and_then(|s| s.build(Path::new("test.toml"), Path::new("."), Some(&text)))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{fault}\n got: {e}\nwant: {want}");
    }
}
