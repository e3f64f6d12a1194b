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

#[test]
fn batching_finds_a_policy_within_the_slo() {
    let args = [
        "plan",
        "batching",
        "models/llama-70b-tp8-serving.toml",
        "--requests",
        "2000",
    ];
    let mut on_rail = args.to_vec();
    on_rail.extend(["--scenario", "scenarios/rail-64gpu.toml"]);
    let (out, _) = run_expect(&on_rail, 0);
    assert!(
        out.contains("tensor-parallel group: 8 GPUs = 1 x 8 (one host"),
        "{out}"
    );
    assert!(out.contains("best: batched collectives"), "{out}");
    // Spread over four hosts of the default scenario, the 100 Gbit/s NICs cannot keep up.
    let (out, _) = run_expect(&args, 1);
    assert!(out.contains("tensor-parallel group: 8 GPUs = 4 x 2"), "{out}");
    let mut json = on_rail.clone();
    json.push("--json");
    let (out, _) = run_expect(&json, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["results"].as_array().unwrap().len(), 3);
}
