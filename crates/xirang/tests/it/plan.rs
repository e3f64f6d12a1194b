//! `xirang plan ...` through the binary.

use crate::util::{run_expect, run_json};

#[test]
fn overlap_reports_the_best_bucket() {
    let (out, _) = run_expect(&["plan", "overlap", "models/transformer-7b.toml"], 0);
    assert!(
        out.contains("AllReduce on default (the hosts of workload `training`: 12 x 2 GPUs"),
        "{out}"
    );
    assert!(out.contains("PyTorch default"), "{out}");
    assert!(out.contains("beats the PyTorch default (25 MiB"), "{out}");
    let v = run_json(&[
        "plan",
        "overlap",
        "models/resnet50.toml",
        "--scenario",
        "scenarios/rail-64gpu.toml",
        "--json",
    ]);
    assert_eq!(v["model"], "resnet50");
    assert!(v["best_iteration_us"].as_f64().unwrap() <= v["default_iteration_us"].as_f64().unwrap());
    let (_, err) = run_expect(&["plan", "overlap", "scenarios/default.toml"], 1);
    assert!(err.contains("scenarios/default.toml:"), "{err}");
}
