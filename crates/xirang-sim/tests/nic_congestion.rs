//! A NIC's own DCQCN knobs (`[[overrides]] congestion`) and a switch port's own ECN
//! profile (`[[overrides]] ecn`): the sender's `roce_rp/enable/P` decides whether a QP
//! runs DCQCN and with whose parameters, the receiver's `roce_np/enable/P` whether marks
//! are answered with CNPs; a port's profile replaces its tier's.

use std::path::Path;

use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_sim::{RunResult, options, simulate};

fn load(text: &str) -> Result<Loaded, String> {
    Scenario::parse(text, Path::new("cc.toml"))
        .and_then(|s| s.build(Path::new("cc.toml"), Path::new("."), Some(text)))
        .map_err(|e| e.to_string())
}

fn run(text: &str) -> RunResult {
    let l = load(text).unwrap_or_else(|e| panic!("{e}"));
    let r = simulate(&l, &options(&l), &mut |_| {});
    r.check_conservation()
        .unwrap_or_else(|e| panic!("conservation: {e}"));
    r
}

/// Sum of a counter over every entity.
fn total(r: &RunResult, name: &str) -> u64 {
    r.counters
        .iter()
        .filter(|c| c.name == name)
        .map(|c| c.value)
        .sum()
}

/// A counter of one entity.
fn of(r: &RunResult, entity: &str, name: &str) -> u64 {
    r.counters
        .iter()
        .find(|c| c.entity == entity && c.name == name)
        .map_or(0, |c| c.value)
}

/// `leaves` leaves of `per_leaf` hosts (one 100 Gbit/s NIC each) under one spine, the
/// leaves marking above 20 KB, class `training` on priority 3 with `cc`, flows `flows`
/// (`src > dst bytes` each), then `extra` (overrides).
fn fabric(leaves: u32, per_leaf: u32, cc: &str, flows: &[(&str, &str, u64)], extra: &str) -> String {
    let list: Vec<String> = flows
        .iter()
        .map(|(a, b, n)| format!("{{ src = \"{a}\", dst = \"{b}\", bytes = {n} }}"))
        .collect();
    format!(
        r#"
[topology.leaf_spine]
leaves = {leaves}
spines = 1
hosts_per_leaf = {per_leaf}
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[topology.leaf_spine.host]
gpus = 0
nics = 1

[config.ecn.leaf]
kmin_bytes = 20_000
kmax_bytes = 200_000
pmax = 0.2

[config.classes.training]
priority = 3
cc = "{cc}"

[workloads.w.flows]
list = [{}]
{extra}
"#,
        list.join(", ")
    )
}

/// Three hosts on one leaf, h0 and h1 sending 4 MB each to h2 (a 2:1 incast that marks
/// at the leaf's 20 KB threshold), class `cc` on priority 3, then `extra` (overrides).
fn incast(cc: &str, extra: &str) -> String {
    fabric(
        1,
        3,
        cc,
        &[("h0", "h2", 4_000_000), ("h1", "h2", 4_000_000)],
        extra,
    )
}

fn congestion(target: &str, rp: &str, np: &str, dcqcn: &str) -> String {
    format!(
        r#"
[[overrides]]
target = "{target}"
congestion = {{ rp_priorities = [{rp}], np_priorities = [{np}], dcqcn = {{ {dcqcn} }} }}
"#
    )
}

#[test]
fn without_overrides_the_class_decides() {
    let r = run(&incast("dcqcn", ""));
    assert!(total(&r, "np_ecn_marked_roce_packets") > 0);
    assert!(total(&r, "np_cnp_sent") > 0);
    assert!(total(&r, "rp_cnp_handled") > 0);
    assert_eq!(total(&r, "rp_cnp_ignored"), 0);
}

#[test]
fn a_receiver_without_its_notification_point_sends_no_cnps() {
    let r = run(&incast("dcqcn", &congestion("h2/mlx5_0", "3", "", "")));
    assert!(total(&r, "np_ecn_marked_roce_packets") > 0, "marked as before");
    assert_eq!(total(&r, "np_cnp_sent"), 0);
    assert_eq!(total(&r, "rp_cnp_handled"), 0);
}

#[test]
fn a_sender_without_its_reaction_point_ignores_cnps() {
    let r = run(&incast(
        "dcqcn",
        &(congestion("h0/mlx5_0", "", "3", "") + &congestion("h1/mlx5_0", "", "3", "")),
    ));
    assert!(total(&r, "np_cnp_sent") > 0, "the receiver still answers marks");
    assert_eq!(total(&r, "rp_cnp_handled"), 0);
    assert!(total(&r, "rp_cnp_ignored") > 0);
}

#[test]
fn nics_turn_dcqcn_on_for_a_class_that_runs_without_it() {
    let plain = run(&incast("none", ""));
    assert_eq!(total(&plain, "np_cnp_sent"), 0);
    let on = run(&incast(
        "none",
        &["h0/mlx5_0", "h1/mlx5_0", "h2/mlx5_0"]
            .map(|n| congestion(n, "3", "3", ""))
            .concat(),
    ));
    assert!(total(&on, "np_cnp_sent") > 0);
    assert!(total(&on, "rp_cnp_handled") > 0);
    // DCQCN keeps the leaf's queue towards h2 shorter than line-rate senders do.
    let peak = |r: &RunResult| of(r, "leaf0:2/q3", "SAI_QUEUE_STAT_WATERMARK_BYTES");
    assert!(peak(&on) < peak(&plain), "{} < {}", peak(&on), peak(&plain));
}

#[test]
fn the_senders_parameters_govern_its_qps() {
    // One flow alone, no congestion: a sender whose rate cap (`rpg_max_rate`) is 25 Gbit/s
    // takes four times as long as at line rate.
    let one = |extra: &str| {
        run(&fabric(1, 2, "dcqcn", &[("h0", "h1", 4_000_000)], extra)).flows[0]
            .fct_ps
            .expect("finished") as f64
    };
    let line = one("");
    let capped = one(&congestion("h0/mlx5_0", "3", "3", "rpg_max_rate_mbps = 25000.0"));
    let ratio = capped / line;
    assert!((3.5..4.5).contains(&ratio), "{ratio}");
    // The receiver's cap does not slow what it receives.
    let recv = one(&congestion("h1/mlx5_0", "3", "3", "rpg_max_rate_mbps = 25000.0"));
    assert!((recv / line - 1.0).abs() < 0.01, "{}", recv / line);
}

#[test]
fn a_port_profile_replaces_its_tiers() {
    let base = run(&incast("dcqcn", ""));
    // The leaf's port towards h2 (its third down port) stops marking.
    let off = run(&incast(
        "dcqcn",
        "[[overrides]]\ntarget = \"leaf0:2\"\necn = { enabled = false }\n",
    ));
    assert!(of(&base, "leaf0:2/q3", "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS") > 0);
    assert_eq!(total(&off, "np_ecn_marked_roce_packets"), 0);
    assert_eq!(total(&off, "np_cnp_sent"), 0);
    // A threshold low enough marks more than the tier's.
    let low = run(&incast(
        "dcqcn",
        "[[overrides]]\ntarget = \"leaf0\"\necn = { kmin_bytes = 1_000, kmax_bytes = 2_000, pmax = 1.0 }\n",
    ));
    assert!(
        total(&low, "np_ecn_marked_roce_packets") > total(&base, "np_ecn_marked_roce_packets"),
        "{} > {}",
        total(&low, "np_ecn_marked_roce_packets"),
        total(&base, "np_ecn_marked_roce_packets")
    );
}

#[test]
fn overrides_are_checked_at_load() {
    let err = |extra: &str| match load(&incast("dcqcn", extra)) {
        Ok(_) => panic!("accepted: {extra}"),
        Err(e) => e,
    };
    let e = err(&congestion("h0/mlx5_0", "9", "", ""));
    assert!(
        e.contains("overrides[0].congestion") && e.contains("found 9"),
        "{e}"
    );
    let e =
        err("[[overrides]]\ntarget = \"leaf0\"\ncongestion = { rp_priorities = [3], np_priorities = [3] }\n");
    assert!(e.contains("is a switch port"), "{e}");
    // Neither enable list is assumed.
    let e = err("[[overrides]]\ntarget = \"h0/mlx5_0\"\ncongestion = { rp_priorities = [3] }\n");
    assert!(e.contains("np_priorities"), "{e}");
    // The parameters are held to the firmware's ranges, as a class's are.
    let e = err(&congestion("h0/mlx5_0", "3", "3", "rpg_gd = 5"));
    assert!(e.contains("overrides[0].congestion.dcqcn.rpg_gd"), "{e}");
    let e = err("[[overrides]]\ntarget = \"h0/mlx5_0\"\necn = { enabled = false }\n");
    assert!(e.contains("`ecn` applies to switch ports"), "{e}");
    let e = err("[[overrides]]\ntarget = \"leaf0\"\necn = { kmin_bytes = 9_000, kmax_bytes = 1_000 }\n");
    assert!(e.contains("overrides[0].ecn.kmin_bytes"), "{e}");
}

#[test]
fn per_nic_knobs_give_the_same_bytes_on_any_partition_count() {
    // Two leaves under a spine, senders on both, each NIC with its own knobs: the
    // partitions (one per leaf and the spine) each decide their QPs' DCQCN from the
    // same NICs' settings.
    let overrides = r#"
[[overrides]]
target = "h0/mlx5_0"
congestion = { rp_priorities = [3], np_priorities = [3], dcqcn = { rpg_max_rate_mbps = 40000.0 } }

[[overrides]]
target = "h2/mlx5_0"
congestion = { rp_priorities = [3], np_priorities = [3] }

[[overrides]]
target = "h3/mlx5_0"
congestion = { rp_priorities = [], np_priorities = [3], dcqcn = { min_time_between_cnps_us = 50.0 } }

[[overrides]]
target = "leaf1:1"
ecn = { kmin_bytes = 5_000, kmax_bytes = 50_000, pmax = 0.5 }
"#;
    let text = fabric(
        2,
        2,
        "none",
        &[
            ("h0", "h3", 2_000_000),
            ("h1", "h3", 2_000_000),
            ("h2", "h3", 2_000_000),
        ],
        overrides,
    );
    let l = load(&text).unwrap_or_else(|e| panic!("{e}"));
    let opts = options(&l);
    let serial = simulate(&l, &opts, &mut |_| {});
    assert!(total(&serial, "rp_cnp_handled") > 0 && total(&serial, "rp_cnp_ignored") > 0);
    for parts in [2, 3] {
        let (par, report) = xirang_sim::parallel::simulate_threads(&l, &opts, parts, 2, &mut |_| {});
        assert!(
            report.plan.parts() >= 2,
            "{parts} partitions asked, the run was divided"
        );
        assert_eq!(par.counters_csv(), serial.counters_csv(), "{parts} partitions");
        assert_eq!(par.fct_hpcc(), serial.fct_hpcc(), "{parts} partitions");
    }
}
