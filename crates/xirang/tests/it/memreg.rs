//! `xirang memreg` through the binary: `bench` (a short run: the figures are
//! BENCHMARKS.md's) and `plan` on shipped scenarios.

use crate::util::{root, run, run_expect, run_json};

#[test]
fn memreg_bench_times_every_way_on_one_and_two_threads() {
    let v = run_json(&[
        "memreg",
        "bench",
        "--pairs",
        "2000",
        "--registrations",
        "50",
        "--json",
    ]);
    let rows = v.as_array().unwrap();
    let key = |r: &serde_json::Value| {
        (
            r["what"].as_str().unwrap().to_string(),
            r["threads"].as_u64().unwrap(),
        )
    };
    let got: Vec<(String, u64)> = rows.iter().map(key).collect();
    for what in [
        "pool get+put (thread cache)",
        "pool get+put (shared free list)",
        "malloc+free",
        "crossbeam ArrayQueue pop+push",
    ] {
        for threads in [1, 2] {
            assert!(
                got.contains(&(what.to_string(), threads)),
                "{what} x{threads}: {got:?}"
            );
        }
    }
    assert!(got.contains(&("mlock+munlock per operation (host registration)".into(), 1)));
    assert!(
        rows.iter().all(|r| r["ns_per_pair"].as_f64().unwrap() > 0.0),
        "{v:#}"
    );
    let (_, err) = run_expect(&["memreg", "bench", "--pairs", "0"], 1);
    assert!(err.contains("--pairs: expected 1..=1000000000, found 0"), "{err}");
    let (_, err) = run_expect(&["memreg", "bench", "--pairs", "100000000000000"], 1);
    assert!(
        err.contains("--pairs: expected 1..=1000000000, found 100000000000000"),
        "{err}"
    );
}

#[test]
fn memreg_plan_sizes_each_nic_from_the_workload_and_judges_the_configured_region() {
    let scenario = root().join("scenarios/incast-16to1.toml");
    let v = run_json(&["memreg", "plan", scenario.to_str().unwrap(), "--json"]);
    let nics = v["nics"].as_array().unwrap();
    // 16 senders into one receiver: the receiver's NIC has all 16 connection ends.
    let busiest = nics.iter().find(|n| n["nic"] == v["busiest_nic"]).unwrap();
    let qps: u64 = busiest["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["qps"].as_u64().unwrap())
        .sum();
    assert_eq!(qps, 16, "{busiest:#}");
    assert_eq!(v["connections"], 16);
    // The sum of classes is the need; the region adds 25 % and rounds to the page.
    let need: u64 = busiest["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(busiest["need_bytes"].as_u64().unwrap(), need);
    let region = busiest["region_bytes"].as_u64().unwrap();
    assert!(
        region >= need + need / 4 && region < need + need / 4 + 4096,
        "{region} for {need}"
    );
    let hosts: u64 = v["pinned_bytes_per_host"]
        .as_object()
        .unwrap()
        .values()
        .map(|b| b.as_u64().unwrap())
        .sum();
    assert_eq!(v["total_pinned_bytes"].as_u64().unwrap(), hosts);
    // The shipped 1 GiB region is far more than 16 x 4 MiB messages need.
    assert_eq!(v["verdict"], "oversized");

    // A region smaller than the need: exit 1 and say so.
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small.toml");
    let text = std::fs::read_to_string(&scenario).unwrap();
    std::fs::write(
        &small,
        format!("{text}\n[config.memory]\nregion_bytes = 8388608\n"),
    )
    .unwrap();
    let (out, _) = run_expect(&["memreg", "plan", small.to_str().unwrap()], 1);
    assert!(out.contains("too small"), "{out}");

    // More headroom, a larger region.
    let more = run_json(&[
        "memreg",
        "plan",
        scenario.to_str().unwrap(),
        "--headroom",
        "1",
        "--json",
    ]);
    let big = more["nics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["nic"] == v["busiest_nic"])
        .unwrap()["region_bytes"]
        .as_u64()
        .unwrap();
    assert!(big >= 2 * need, "{big} for {need}");
}

/// On a machine without an RDMA device the pool falls back to the host backend and says
/// so; registering the planned region either works or names the memlock limit.
#[test]
fn memreg_plan_registers_the_busiest_pool_here_through_the_automatic_backend() {
    let scenario = root().join("scenarios/fat-tree-k8.toml");
    let out = run(&[
        "memreg",
        "plan",
        scenario.to_str().unwrap(),
        "--register",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["registered_here"];
    let text = r["message"].as_str().or(r["error"].as_str()).unwrap();
    assert!(text.contains("host backend"), "{v:#}");
    if r["ok"] == true {
        assert!(text.contains("MiB of"), "{text}");
    } else {
        assert!(text.contains("RLIMIT_MEMLOCK"), "{text}");
    }
}
