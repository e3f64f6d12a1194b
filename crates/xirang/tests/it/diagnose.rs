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
