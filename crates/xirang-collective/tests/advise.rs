//! The NCCL advisor on shipped scenarios and on a badly placed, lossy one.

use std::path::Path;

use xirang_collective::advise::{SizeRow, advise, algo_setting};
use xirang_collective::cost::{Algo, Proto};
use xirang_fabric::scenario::Scenario;

fn load(p: &str) -> xirang_fabric::Loaded {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(p);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn value<'a>(a: &'a xirang_collective::advise::Advice, name: &str) -> Option<&'a str> {
    a.settings
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .value
        .as_deref()
}

#[test]
fn default_scenario() {
    let a = advise(&load("../../scenarios/default.toml")).unwrap();
    assert_eq!(a.hosts.len(), 12);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    assert_eq!(value(&a, "NCCL_IB_HCA"), Some("=mlx5_0:1,mlx5_1:1"));
    // Training: DSCP 26 on lossless priority 3.
    assert_eq!(value(&a, "NCCL_IB_TC"), Some("104"));
    assert_eq!(value(&a, "NCCL_IB_SL"), Some("3"));
    // The ring crosses leaves over two spines: several paths, so more QPs.
    assert_eq!(value(&a, "NCCL_IB_QPS_PER_CONNECTION"), Some("4"));
    assert_eq!(value(&a, "NCCL_NET_GDR_LEVEL"), Some("PXB"));
    assert_eq!(value(&a, "NCCL_IB_GID_INDEX"), None);
    assert_eq!(value(&a, "NCCL_MIN_NCHANNELS"), Some("2"));
    assert_eq!(a.table.len(), 12);
    let env = a.env_file("default");
    // Every setting line comes right after its reason.
    let lines: Vec<&str> = env.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("NCCL_") || l.starts_with("# NCCL_") {
            assert!(
                lines[i - 1].starts_with("# ") && lines[i - 1].len() > 20,
                "{l} has no reason"
            );
        }
    }
}

#[test]
fn rail_scenario_orders_nics_by_gpu_and_keeps_rails_single_path() {
    let a = advise(&load("../../scenarios/rail-64gpu.toml")).unwrap();
    let hca = value(&a, "NCCL_IB_HCA").unwrap();
    let expect: Vec<String> = (0..8).map(|i| format!("mlx5_{i}:1")).collect();
    assert_eq!(hca, format!("={}", expect.join(",")));
    assert_eq!(a.platform.nodes, 8);
    assert_eq!(value(&a, "NCCL_MIN_NCHANNELS"), Some("8"));
}

#[test]
fn far_nics_and_lossy_classes_are_warned_about() {
    let a = advise(&load("test_data/scenarios/far-nic-lossy.toml")).unwrap();
    assert_eq!(a.hosts, ["b", "a"]);
    assert_eq!(a.warnings.len(), 2, "{:?}", a.warnings);
    assert!(a.warnings[0].contains("not lossless"), "{:?}", a.warnings);
    assert!(
        a.warnings[1].contains("1 only across sockets"),
        "{:?}",
        a.warnings
    );
    assert_eq!(value(&a, "NCCL_NET_GDR_LEVEL"), Some("SYS"));
    assert_eq!(value(&a, "NCCL_IB_QPS_PER_CONNECTION"), None);
    assert!(a.env_file("far").contains("# WARNING: class `training`"));
}

#[test]
fn nccl_algo_is_pinned_only_on_a_clear_win() {
    let row = |bytes: u64, ring: f64, tree: f64| SizeRow {
        bytes,
        algorithms: vec![
            (Algo::Ring, Proto::Simple, ring),
            (Algo::Tree, Proto::Simple, tree),
        ],
        best: if ring >= tree { Algo::Ring } else { Algo::Tree },
    };
    // Small sizes do not count; from 1 MiB the tree leads by 25% or more everywhere.
    let clear = [
        row(1 << 10, 5.0, 1.0),
        row(1 << 20, 10.0, 12.5),
        row(1 << 30, 100.0, 130.0),
    ];
    assert_eq!(algo_setting(&clear).value.as_deref(), Some("allreduce:Tree"));
    // A 10% lead at one size is not clear.
    let close = [row(1 << 20, 10.0, 12.5), row(1 << 30, 100.0, 110.0)];
    assert_eq!(algo_setting(&close).value, None);
    // Different winners at different sizes: leave it to NCCL.
    let mixed = [row(1 << 20, 20.0, 12.5), row(1 << 30, 100.0, 130.0)];
    assert_eq!(algo_setting(&mixed).value, None);
}

#[test]
fn a_scenario_that_sets_its_channels_gets_that_count_even_below_two() {
    // mini-mix's AllReduce runs on one channel: the advice is what was simulated, not a
    // floor (it had said 2 "as the scenario's collective uses").
    let a = advise(&load("../xirang-tune/test_data/mini-mix.toml")).unwrap();
    assert_eq!(value(&a, "NCCL_MIN_NCHANNELS"), Some("1"));
    let env = a.env_file("mini-mix");
    assert!(
        env.contains(
            "# 1 channel(s), as the scenario's collective uses (what was simulated)\nNCCL_MIN_NCHANNELS=1"
        ),
        "{env}"
    );
}

/// Bonded devices: the HCA list names the bonds, every connection gets a QP per member,
/// and the advice warns that NCCL prefers separate ports.
#[test]
fn bonded_devices_get_a_qp_per_member_and_a_warning() {
    let mut l = load("../../scenarios/nic-layout-training.toml");
    let host = l.scenario.topology.host_mut().unwrap();
    host.aggregate = Some(xirang_fabric::topology::Aggregate::Lag);
    let text = l.scenario.to_toml();
    let l = Scenario::parse(&text, &l.file)
        .and_then(|s| s.build(&l.file, Path::new("."), Some(&text)))
        .unwrap_or_else(|e| panic!("{e}"));
    let a = advise(&l).unwrap();
    assert_eq!(
        value(&a, "NCCL_IB_HCA"),
        Some("=mlx5_bond_0:1,mlx5_bond_1:1,mlx5_bond_2:1,mlx5_bond_3:1")
    );
    // A bond over two rails reaches its peer over either rail's leaf: several paths, so
    // the multipath count (4) covers the two members.
    assert_eq!(value(&a, "NCCL_IB_QPS_PER_CONNECTION"), Some("4"));
    assert!(
        a.settings
            .iter()
            .any(|s| s.name == "NCCL_IB_QPS_PER_CONNECTION" && s.why.contains("bonds of 2 ports")),
        "the reason names the bonds"
    );
    assert_eq!(value(&a, "NCCL_IB_SPLIT_DATA_ON_QPS"), Some("0"));
    assert!(
        a.warnings
            .iter()
            .any(|w| w.contains("bonded devices") && w.contains("NCCL_IB_MERGE_NICS")),
        "{:?}",
        a.warnings
    );
    // The same hosts with independent ports: no bond advice.
    let ind = advise(&load("../../scenarios/nic-layout-training.toml")).unwrap();
    assert!(ind.warnings.iter().all(|w| !w.contains("bonded")));
}
