//! `xirang memreg bench` through the binary (a short run: the figures are BENCHMARKS.md's).

use crate::util::{run_expect, run_json};

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
    for what in ["pool get+put", "malloc+free", "crossbeam ArrayQueue pop+push"] {
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
    assert!(
        err.contains("expected --pairs and --registrations above 0"),
        "{err}"
    );
}
