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

/// `plan serving` measures each batch size on the twin: a larger batch takes longer per
/// step and gives more tokens per second; the SLO picks the largest that meets it.
#[test]
fn serving_finds_the_largest_batch_within_the_slo() {
    let scenario = "scenarios/validation/deepep-ll-ep16.toml";
    let v = run_json(&[
        "plan",
        "serving",
        scenario,
        "--batches",
        "16,128",
        "--tpot-p99",
        "1ms",
        "--settings",
        "scenarios/validation/deepep-ll-ep32.toml",
        "--json",
    ]);
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 4, "{v}");
    let tpot = |i: usize| points[i]["tpot_p99_us"].as_f64().unwrap();
    let tokens = |i: usize| points[i]["tokens_per_s"].as_f64().unwrap();
    // Points are (batch, settings) in order: 16 and 128, each under both settings.
    assert_eq!(points[0]["batch"], 16);
    assert_eq!(points[2]["batch"], 128);
    assert!(tpot(2) > tpot(0), "{v}");
    assert!(tokens(2) > tokens(0), "{v}");
    assert_eq!(v["best"]["batch"], 128, "{v}");
    // Below what batch 128 takes, only 16 is left; below both, none.
    let between = format!("{}us", (tpot(0) + tpot(2)) / 2.0);
    let v = run_json(&[
        "plan",
        "serving",
        scenario,
        "--batches",
        "16,128",
        "--tpot-p99",
        &between,
        "--json",
    ]);
    assert_eq!(v["best"]["batch"], 16, "{v}");
    let (out, _) = run_expect(
        &[
            "plan",
            "serving",
            scenario,
            "--batches",
            "16",
            "--tpot-p99",
            "10us",
        ],
        1,
    );
    assert!(
        out.contains("no batch size and settings tried meet the SLOs"),
        "{out}"
    );
    let (_, err) = run_expect(&["plan", "serving", scenario, "--ttft-p99", "1s"], 1);
    assert!(err.contains("no `kv_transfer` workload"), "{err}");
    // Settings without this scenario's classes are refused, not simulated.
    let (_, err) = run_expect(
        &[
            "plan",
            "serving",
            scenario,
            "--settings",
            "scenarios/storage-incast.toml",
        ],
        1,
    );
    assert!(err.contains("no traffic class `inference`"), "{err}");
}
