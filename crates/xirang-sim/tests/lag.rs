//! Bonded NICs (RoCE LAG): one device over two ports, its QPs placed by a per-QP hash,
//! failover when a member's link goes down (docs/reference/nic-aggregation.md §4).

use std::path::Path;

use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_sim::{RunResult, options, simulate};

/// Bytes per `port_xmit_data` unit: the PMA counter counts 4-byte words
/// (docs/reference/linux-rdma-sysfs.md §2).
const BYTES_PER_WORD: u64 = 4;
/// One member port's rate.
const PORT_GBPS: f64 = 100.0;

fn load(text: &str) -> Loaded {
    Scenario::parse(text, Path::new("lag.toml"))
        .and_then(|s| s.build(Path::new("lag.toml"), Path::new("."), Some(text)))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn run(text: &str) -> RunResult {
    let l = load(text);
    let r = simulate(&l, &options(&l), &mut |_| {});
    r.check_conservation()
        .unwrap_or_else(|e| panic!("conservation: {e}"));
    r
}

/// Two leaves of two hosts, each host one bond of two 100 Gbit/s ports on its leaf;
/// non-blocking (400 Gbit/s up per leaf).
fn fabric(aggregate: &str, qps: u32, flows: &str, faults: &str) -> String {
    format!(
        r#"
[topology.leaf_spine]
leaves = 2
spines = 1
hosts_per_leaf = 2
host_rate_gbps = {PORT_GBPS}
fabric_rate_gbps = 400
link_delay_ns = 1000

[topology.leaf_spine.host]
gpus = 0
nics = 2
aggregate = "{aggregate}"

[config.transport]
qps_per_connection = {qps}

[run]
end_us = 20000

[workloads.w.flows]
list = [{flows}]
{faults}
"#
    )
}

/// Data bytes sent by a NIC port, from its counter.
fn sent(r: &RunResult, entity: &str) -> u64 {
    r.counters
        .iter()
        .find(|c| c.entity == entity && c.name == "port_xmit_data")
        .map_or(0, |c| c.value * BYTES_PER_WORD)
}

fn downed(r: &RunResult, entity: &str) -> u64 {
    r.counters
        .iter()
        .find(|c| c.entity == entity && c.name == "link_downed")
        .map_or(0, |c| c.value)
}

#[test]
fn a_bond_is_one_device_over_both_ports() {
    let l = load(&fabric(
        "lag",
        1,
        r#"{ src = "h0", dst = "h2", bytes = 1000 }"#,
        "",
    ));
    let h0 = &l.fabric.hosts[0];
    assert_eq!(h0.nics.len(), 1, "one RDMA device per bond");
    let nic = &l.fabric.nics[h0.nics[0].index()];
    assert_eq!(nic.name, "mlx5_bond_0");
    assert_eq!(nic.ports.len(), 2);
    assert!(nic.ports.iter().all(|p| p.link.is_some()));
    let ind = load(&fabric(
        "independent",
        1,
        r#"{ src = "h0", dst = "h2", bytes = 1000 }"#,
        "",
    ));
    let names: Vec<_> = ind.fabric.hosts[0]
        .nics
        .iter()
        .map(|n| ind.fabric.nics[n.index()].name.as_str())
        .collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);
}

/// Acceptance 2a: a single QP never uses more than one port, so it never goes faster than
/// one port's rate over a two-port bond.
#[test]
fn a_single_qp_over_a_bond_never_exceeds_one_port() {
    const BYTES: u64 = 8_000_000;
    let r = run(&fabric(
        "lag",
        1,
        &format!(r#"{{ src = "h0", dst = "h2", bytes = {BYTES} }}"#),
        "",
    ));
    let fct_ps = r.flows[0].fct_ps.expect("the flow completes");
    let gbps = BYTES as f64 * 8.0 / (fct_ps as f64 / 1e12) / 1e9;
    assert!(
        gbps < PORT_GBPS,
        "one QP ran at {gbps:.1} Gbit/s over a bond of {PORT_GBPS} Gbit/s ports"
    );
    assert!(gbps > 0.8 * PORT_GBPS, "and near one port's rate: {gbps:.1}");
    let (a, b) = (sent(&r, "h0/mlx5_bond_0/1"), sent(&r, "h0/mlx5_bond_0/2"));
    assert!(
        a.max(b) >= BYTES && a.min(b) == 0,
        "all on one member: {a} and {b} bytes"
    );
}

/// Acceptance 2b: many QPs spread over the members. 64 QPs placed by a hash: each member
/// gets its binomial share, within 35-65 % of the bytes (2.4 standard deviations), and
/// the bond carries more than one port could.
#[test]
fn many_qps_spread_over_the_members() {
    const FLOWS: u64 = 16;
    const BYTES: u64 = 2_000_000;
    let list: Vec<String> = (0..FLOWS)
        .map(|i| format!(r#"{{ src = "h0", dst = "h{}", bytes = {BYTES} }}"#, 2 + i % 2))
        .collect();
    let r = run(&fabric("lag", 4, &list.join(", "), ""));
    assert!(r.flows.iter().all(|f| f.fct_ps.is_some()));
    let (a, b) = (sent(&r, "h0/mlx5_bond_0/1"), sent(&r, "h0/mlx5_bond_0/2"));
    let share = a as f64 / (a + b) as f64;
    assert!(
        (0.35..=0.65).contains(&share),
        "member 1 carried {:.0} %",
        share * 100.0
    );
    let end_ps = r
        .flows
        .iter()
        .map(|f| f.start_ps + f.fct_ps.unwrap())
        .max()
        .unwrap();
    let gbps = (FLOWS * BYTES) as f64 * 8.0 / (end_ps as f64 / 1e12) / 1e9;
    assert!(gbps > 1.2 * PORT_GBPS, "the bond carried {gbps:.1} Gbit/s");
}

/// Acceptance 2c: a member's link goes down for good mid-transfer; its QPs move to the
/// other port and every flow completes. The same link down on an independent NIC
/// leaves the flow unfinished (the contrast the layout advice rests on).
#[test]
fn a_member_down_moves_its_qps_and_the_run_completes() {
    const BYTES: u64 = 8_000_000;
    let flows = format!(
        r#"{{ src = "h0", dst = "h2", bytes = {BYTES} }}, {{ src = "h1", dst = "h3", bytes = {BYTES} }}"#
    );
    for (target, side) in [("h0/mlx5_bond_0/1", "sender"), ("h2/mlx5_bond_0/2", "receiver")] {
        let fault = format!("[[faults]]\nkind = \"link_down\"\ntarget = \"{target}\"\nstart_us = 100\n");
        let r = run(&fabric("lag", 8, &flows, &fault));
        for f in &r.flows {
            assert!(f.fct_ps.is_some() && !f.failed, "{side} side down: {f:?}");
        }
        assert_eq!(downed(&r, target), 1, "{side}");
    }
    // The sender's member 1 stops at the failure; member 2 carries the rest.
    let fault = "[[faults]]\nkind = \"link_down\"\ntarget = \"h0/mlx5_bond_0/1\"\nstart_us = 100\n";
    let r = run(&fabric("lag", 8, &flows, fault));
    let (a, b) = (sent(&r, "h0/mlx5_bond_0/1"), sent(&r, "h0/mlx5_bond_0/2"));
    // 100 µs at one port's rate bounds what member 1 sent before it went down.
    let before_bytes = (PORT_GBPS * 1e9 / 8.0 * 100e-6) as u64;
    assert!(a <= before_bytes + 64_000, "member 1 sent {a} bytes");
    assert!(b >= BYTES - a, "member 2 sent {b} bytes");

    let r = run(&fabric(
        "independent",
        8,
        &flows,
        "[[faults]]\nkind = \"link_down\"\ntarget = \"h0/mlx5_0\"\nstart_us = 100\n",
    ));
    assert!(
        r.flows[0].fct_ps.is_none(),
        "an independent NIC has no other port: {:?}",
        r.flows[0]
    );
}

/// The link comes back: traffic returns to the member and the run completes.
#[test]
fn a_member_back_up_takes_its_qps_back() {
    const BYTES: u64 = 16_000_000;
    let fault =
        "[[faults]]\nkind = \"link_down\"\ntarget = \"h0/mlx5_bond_0/1\"\nstart_us = 100\nend_us = 300\n";
    let r = run(&fabric(
        "lag",
        8,
        &format!(r#"{{ src = "h0", dst = "h2", bytes = {BYTES} }}"#),
        fault,
    ));
    assert!(r.flows[0].fct_ps.is_some());
    let a = sent(&r, "h0/mlx5_bond_0/1");
    let before_bytes = (PORT_GBPS * 1e9 / 8.0 * 100e-6) as u64;
    assert!(
        a > 2 * before_bytes,
        "member 1 carries traffic again after 300 µs: {a} bytes"
    );
}

#[test]
fn a_bond_across_switches_cannot_fail_over_and_says_so() {
    let text = r#"
[topology.rail_optimized]
hosts = 2
spines = 1
host_rate_gbps = 100
fabric_rate_gbps = 100

[topology.rail_optimized.host]
gpus = 2
nics = 2
aggregate = "lag"

[workloads.w.flows]
list = [{ src = "h0", dst = "h1", bytes = 1000 }]

[[faults]]
kind = "link_down"
target = "h0/mlx5_bond_0/1"
start_us = 10
"#;
    let err = Scenario::parse(text, Path::new("x.toml"))
        .and_then(|s| s.build(Path::new("x.toml"), Path::new("."), Some(text)))
        .expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("failover for members on one switch only"), "{msg}");
}

#[test]
fn bond_ports_must_divide_the_ports() {
    let text =
        fabric("lag", 1, r#"{ src = "h0", dst = "h2", bytes = 1000 }"#, "").replace("nics = 2", "nics = 3");
    let err = Scenario::parse(&text, Path::new("x.toml"))
        .and_then(|s| s.build(Path::new("x.toml"), Path::new("."), Some(&text)))
        .expect_err("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("multiple of bond_ports (2)") && msg.contains("nics"),
        "{msg}"
    );
}

/// A hash policy without L4 ports (layer2+3) puts every QP of a host pair on one member,
/// as the audit's NET-BOND-HASH rule says; layer3+4 spreads the same QPs.
#[test]
fn a_policy_without_ports_keeps_a_host_pair_on_one_member() {
    let list: Vec<String> = (0..8)
        .map(|_| r#"{ src = "h0", dst = "h2", bytes = 1_000_000 }"#.to_string())
        .collect();
    let layer23 =
        fabric("lag", 4, &list.join(", "), "") + "\n[config.intra_host]\nbond_hash_policy = \"layer2+3\"\n";
    let r = run(&layer23);
    let (a, b) = (sent(&r, "h0/mlx5_bond_0/1"), sent(&r, "h0/mlx5_bond_0/2"));
    assert!(a.min(b) == 0 && a.max(b) >= 8_000_000, "one member: {a} and {b}");
    let r = run(&fabric("lag", 4, &list.join(", "), ""));
    let (a, b) = (sent(&r, "h0/mlx5_bond_0/1"), sent(&r, "h0/mlx5_bond_0/2"));
    assert!(a.min(b) > 1_000_000, "layer3+4 spreads 32 QPs: {a} and {b}");
}

/// Queue affinity (older kernels and firmware) gives each new QP the next port whatever
/// the hash policy: the same 32 QPs of one host pair split evenly even under layer2+3.
#[test]
fn queue_affinity_alternates_ports_whatever_the_policy() {
    let list: Vec<String> = (0..8)
        .map(|_| r#"{ src = "h0", dst = "h2", bytes = 1_000_000 }"#.to_string())
        .collect();
    let text = fabric("lag", 4, &list.join(", "), "")
        + "\n[config.intra_host]\nbond_hash_policy = \"layer2+3\"\nlag_port_select = \"queue_affinity\"\n";
    let r = run(&text);
    let (a, b) = (sent(&r, "h0/mlx5_bond_0/1"), sent(&r, "h0/mlx5_bond_0/2"));
    let share = a as f64 / (a + b) as f64;
    assert!((0.45..=0.55).contains(&share), "round-robin halves: {a} and {b}");
}

/// The member's link named at the switch end (`leaf0:0` faces h0's first port) fails
/// over as well.
#[test]
fn a_member_down_named_at_the_switch_end_fails_over() {
    let flows =
        r#"{ src = "h0", dst = "h2", bytes = 8_000_000 }, { src = "h2", dst = "h0", bytes = 8_000_000 }"#;
    let fault = "[[faults]]\nkind = \"link_down\"\ntarget = \"leaf0:0\"\nstart_us = 100\n";
    let r = run(&fabric("lag", 8, flows, fault));
    for f in &r.flows {
        assert!(f.fct_ps.is_some(), "{f:?}");
    }
}

/// Both members down, then one back: with every member down the mapping is the native
/// one (mlx5's, docs/reference/nic-aggregation.md §2.2), everything goes to the member that
/// returns, and a flow that starts while the first member is down still completes.
#[test]
fn both_members_down_then_one_back_completes_on_the_returning_one() {
    let flows = r#"{ src = "h0", dst = "h2", bytes = 4_000_000 }, { src = "h0", dst = "h3", bytes = 4_000_000, start_us = 120 }"#;
    let faults = "[[faults]]\nkind = \"link_down\"\ntarget = \"h0/mlx5_bond_0/1\"\nstart_us = 100\n\
                  [[faults]]\nkind = \"link_down\"\ntarget = \"h0/mlx5_bond_0/2\"\nstart_us = 150\nend_us = 400\n";
    let text = fabric("lag", 8, flows, faults)
        .replace("[config.transport]\n", "[config.transport]\nib_timeout = 10\n");
    let r = run(&text);
    for f in &r.flows {
        assert!(f.fct_ps.is_some() && !f.failed, "{f:?}");
    }
    let b = sent(&r, "h0/mlx5_bond_0/2");
    assert!(
        b >= 4_000_000,
        "the returning member carried most of the 8 MB: {b} bytes"
    );
}

/// Two overlapping faults on one link (named at each end, ending at different times):
/// the link is up only when both have ended, and the traffic returns to it then.
#[test]
fn overlapping_faults_on_one_link_keep_it_down_until_the_last_ends() {
    let flows = r#"{ src = "h0", dst = "h2", bytes = 30_000_000 }"#;
    let faults = "[[faults]]\nkind = \"link_down\"\ntarget = \"h0/mlx5_bond_0/1\"\nstart_us = 100\nend_us = 300\n\
                  [[faults]]\nkind = \"link_down\"\ntarget = \"leaf0:0\"\nstart_us = 200\nend_us = 1200\n";
    let text = fabric("lag", 8, flows, faults)
        .replace("[config.transport]\n", "[config.transport]\nib_timeout = 10\n");
    let r = run(&text);
    assert!(r.flows[0].fct_ps.is_some(), "{:?}", r.flows[0]);
    // Member 1 carried only what it sent before 100 µs and after 1200 µs: the flow's
    // QPs came back to it, so it carried more than its first 100 µs.
    let a = sent(&r, "h0/mlx5_bond_0/1");
    let before_bytes = (PORT_GBPS * 1e9 / 8.0 * 100e-6) as u64;
    assert!(a > 2 * before_bytes, "member 1 back after 1200 µs: {a} bytes");
}

/// A bond of four ports spreads a failed member's QPs over the three survivors (hash
/// mode, docs/reference/nic-aggregation.md §2.2).
#[test]
fn a_four_port_bond_spreads_a_failed_members_qps_over_the_survivors() {
    let text = fabric(
        "lag",
        16,
        r#"{ src = "h0", dst = "h2", bytes = 16_000_000 }"#,
        "[[faults]]\nkind = \"link_down\"\ntarget = \"h0/mlx5_bond_0/1\"\nstart_us = 0\n",
    )
    .replace("nics = 2\n", "nics = 4\nbond_ports = 4\n")
    .replace("fabric_rate_gbps = 400", "fabric_rate_gbps = 800");
    let r = run(&text);
    assert!(r.flows[0].fct_ps.is_some());
    let sent_by: Vec<u64> = (1..=4)
        .map(|p| sent(&r, &format!("h0/mlx5_bond_0/{p}")))
        .collect();
    // At most the packet that left at the very instant the link went down.
    assert!(sent_by[0] < 10_000, "{sent_by:?}");
    assert!(
        sent_by[1..].iter().all(|b| *b > 2_000_000),
        "three survivors share: {sent_by:?}"
    );
}

/// An HPCC topology file gives each host one port: `aggregate` in its host template
/// changes nothing (it made zero devices before a review caught it).
#[test]
fn an_hpcc_topology_ignores_aggregate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/reference");
    let text =
        "[topology.hpcc]\nfile = \"fattree_k8_128h_100g.txt\"\n\n[topology.hpcc.host]\naggregate = \"lag\"\n";
    let file = dir.join("lag-probe.toml");
    let l = Scenario::parse(text, &file)
        .and_then(|s| s.build(&file, &dir, Some(text)))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(l.fabric.nics.iter().all(|n| n.ports.len() == 1));
    assert_eq!(l.fabric.hosts.len(), l.fabric.nics.len());
}
