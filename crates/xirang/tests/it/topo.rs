//! `xirang topo`.

use crate::util::{run_expect, run_json};

#[test]
fn fat_tree_k8_has_128_hosts_80_switches_full_bisection() {
    let v = run_json(&["topo", "show", "scenarios/fat-tree-k8.toml", "--json"]);
    assert_eq!(v["hosts"], 128);
    assert_eq!(v["switches"], 80);
    assert_eq!(v["full_bisection"], true);
    assert_eq!(v["bisection_gbps"], 6400.0);
    assert_eq!(v["diameter_hops"], 6);
    assert_eq!(v["sample_pair"]["ecmp_paths"], 16);
    assert_eq!(v["sample_pair"]["path_mtu_bytes"], 9000);
    let tiers: Vec<_> = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["switches"].as_u64().unwrap())
        .collect();
    assert_eq!(tiers, [32, 32, 16]);
}

#[test]
fn rail_scenario_pairs_gpu_i_with_nic_i() {
    let v = run_json(&["topo", "show", "scenarios/rail-64gpu.toml", "--json"]);
    assert_eq!(v["gpus"], 64);
    assert_eq!(v["pcie"]["gpu_i_with_nic_i"], true);
    assert_eq!(v["pcie"]["gpus_with_pix_nic"], 64);
    assert_eq!(v["pcie"]["gpus_with_sys_nic_only"], 0);
}

#[test]
fn default_scenario_is_oversubscribed() {
    let v = run_json(&["topo", "show", "scenarios/default.toml", "--json"]);
    assert_eq!(v["full_bisection"], false);
    assert_eq!(v["tiers"][0]["oversubscription"], 2.0);
    let (table, _) = run_expect(&["topo", "show", "scenarios/default.toml"], 0);
    assert!(table.contains("oversubscription 2.00:1"), "{table}");
}

#[test]
fn dot_draws_every_link() {
    let (dot, _) = run_expect(&["topo", "dot", "scenarios/incast-16to1.toml"], 0);
    assert!(dot.starts_with("graph fabric {"));
    assert_eq!(dot.matches(" -- ").count(), 64);
}

#[test]
fn rail_1024_divides_into_two_balanced_partitions_with_the_link_delay_as_lookahead() {
    let v = run_json(&[
        "topo",
        "show",
        "scenarios/rail-1024gpu.toml",
        "--partitions",
        "2",
        "--json",
    ]);
    let p = &v["partition"];
    assert_eq!(p["parts"], 2, "{p}");
    assert_eq!(p["lookahead_ns"], 500, "{p}");
    assert_eq!(p["serial_because"], serde_json::Value::Null, "{p}");
    let members = p["members"].as_array().unwrap();
    assert_eq!(members[0]["hosts"], 64);
    assert_eq!(members[0]["ports"], members[1]["ports"]);
    // Each cut link has one port on each side.
    let cut_ports: u64 = members.iter().map(|m| m["cut_ports"].as_u64().unwrap()).sum();
    assert_eq!(cut_ports, 2 * p["cut_links"].as_u64().unwrap());
    let (table, _) = run_expect(
        &["topo", "show", "scenarios/rail-1024gpu.toml", "--partitions", "2"],
        0,
    );
    assert!(table.contains("lookahead 500 ns"), "{table}");
    assert!(table.contains("partition 1"), "{table}");
}

#[test]
fn a_run_that_must_be_serial_says_why_in_topo_show() {
    let v = run_json(&[
        "topo",
        "show",
        "crates/xirang/tests/data/gdr-off.toml",
        "--partitions",
        "2",
        "--json",
    ]);
    let why = v["partition"]["serial_because"].as_str().unwrap_or_default();
    assert!(why.contains("gdr_off"), "{v}");
}
