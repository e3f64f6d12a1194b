//! `xirang diagnose nccl` through the binary.

use crate::util::{run, run_expect};

const DIR: &str = "crates/xirang-collective/test_data/nccl-tests";

#[test]
fn nccl_logs_abort_exits_1_with_evidence_healthy_exits_0() {
    let bad = format!("{DIR}/pair-2node-1gpu-network-error.txt");
    let o = run(&["diagnose", "nccl", &bad, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["rule"], "NCCL-ABORT");
    assert_eq!(v[0]["class"], "link");
    assert_eq!(v[0]["entity"], "cnode2-005<->cnode2-016");
    assert_eq!(v[0]["evidence"][0]["source"], format!("{bad}:12"));
    let (out, _) = run_expect(
        &["diagnose", "nccl", &format!("{DIR}/pair-2node-1gpu-healthy.txt")],
        0,
    );
    assert_eq!(out, "No fault found.\n");
    let (_, err) = run_expect(&["diagnose", "nccl", "/nonexistent.log"], 1);
    assert!(err.contains("/nonexistent.log"), "{err}");
}

/// A simulated run with a lossy NIC port, written by `xirang sim --out --sample`, read
/// back by `xirang diagnose --sim-out`: the port is named with its counters.
#[test]
fn a_simulated_bit_error_fault_is_found_from_the_sim_output() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("lossy.toml");
    std::fs::write(
        &scenario,
        r#"
[topology.leaf_spine]
leaves = 1
spines = 1
hosts_per_leaf = 3
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[workloads.one.flows]
list = [{ src = "h0", dst = "h1", bytes = 20_000_000 }]

[[faults]]
kind = "link_errors"
target = "h1/mlx5_0"
loss = 0.001
"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    run_expect(
        &[
            "sim",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--sample",
            "20us",
        ],
        0,
    );
    let o = run(&["diagnose", "--sim-out", out.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(v[0]["rule"], "LINK-ERRORS");
    assert_eq!(v[0]["entity"], "h1/mlx5_0/1");
    assert!(
        v[0]["evidence"][0]["text"]
            .as_str()
            .unwrap()
            .contains("from t+0 µs"),
        "{v:#}"
    );
}
