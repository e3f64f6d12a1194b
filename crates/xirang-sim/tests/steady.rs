//! The steadiness probe (`engine::steady`): it changes no result, its figures are the same
//! however the run is divided, and on a case with a known answer it finds it.

use std::path::Path;

use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_sim::engine::steady::{SteadyReport, SteadyShare, WORMHOLE_THETA, WORMHOLE_WINDOW};
use xirang_sim::parallel::simulate_threads;
use xirang_sim::{RunResult, options, simulate};

fn load_text(text: &str) -> Loaded {
    Scenario::parse(text, Path::new("test.toml"))
        .and_then(|s| s.build(Path::new("test.toml"), Path::new("."), Some(text)))
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn load_file(rel: &str) -> Loaded {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Every output a run writes but engine.json.
fn outputs(r: &RunResult) -> Vec<String> {
    vec![
        r.fct_hpcc(),
        r.pfc_hpcc(0),
        r.flows_json(),
        r.counters_csv(),
        r.rates_csv(),
        r.queues_csv(),
        r.counter_series_csv(),
        serde_json::to_string_pretty(&r.summary()).unwrap(),
    ]
}

fn share(s: &SteadyShare, theta: f64, window: u32) -> f64 {
    s.criteria
        .iter()
        .find(|c| c.theta == theta && c.window_samples == window)
        .unwrap()
        .steady_share
}

fn probed(l: &Loaded) -> (RunResult, SteadyReport) {
    let mut opts = options(l);
    opts.steady_probe = true;
    let r = simulate(l, &opts, &mut |_| {});
    let s = r.engine.steady.clone().expect("probed");
    (r, s)
}

/// The default scenario (training collectives with NCCL's transport beside inference):
/// the probe reads and never writes, and is off unless asked for.
#[test]
fn probing_changes_no_result_and_is_the_same_on_threads() {
    let l = load_file("scenarios/default.toml");
    let plain = simulate(&l, &options(&l), &mut |_| {});
    assert!(plain.engine.steady.is_none());
    let (with, report) = probed(&l);
    assert_eq!(outputs(&plain), outputs(&with));
    assert!(report.qps.active_ps > 0 && report.connections.active_ps > 0);
    for s in [&report.qps, &report.connections, &report.connections_over_periods] {
        for c in &s.criteria {
            assert!(c.steady_ps <= s.active_ps && (0.0..=1.0).contains(&c.steady_share));
        }
    }
    // Each QP and connection end is sampled where it runs: a divided run adds up to the
    // same figures.
    let mut opts = options(&l);
    opts.steady_probe = true;
    for (parts, threads) in [(2, 2), (4, 2)] {
        let (par, _) = simulate_threads(&l, &opts, parts, threads, &mut |_| {});
        assert_eq!(par.engine.steady.as_ref(), Some(&report), "{parts} partitions");
        assert_eq!(outputs(&par), outputs(&plain));
    }
}

/// One 100 MB flow on an idle 100 Gbit/s path runs at line rate from its first packet
/// to its last (about 8.2 ms): its rate is steady once a window has passed, so the steady
/// share is (duration - window) / duration, for every θ. Two such flows into one
/// receiver share its link under DCQCN, whose sawtooth is wider than 3 %.
#[test]
fn a_lone_flow_is_steady_after_one_window_and_contention_is_not() {
    let fabric = r#"
[topology.leaf_spine]
leaves = 2
spines = 2
hosts_per_leaf = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
"#;
    let (r, s) = probed(&load_text(&format!(
        "{fabric}\n[workloads.one.flows]\nlist = [{{ src = \"h0\", dst = \"h2\", bytes = 100_000_000 }}]\n"
    )));
    let fct_us = r.flows[0].fct_ps.expect("finished") as f64 / 1e6;
    assert!((8000.0..8600.0).contains(&fct_us), "{fct_us}");
    let sampled_us = s.qps.active_ps as f64 / 1e6;
    assert!(
        (sampled_us - fct_us).abs() < 20.0,
        "{sampled_us} against {fct_us}"
    );
    for (theta, window) in [
        (0.03, 100),
        (WORMHOLE_THETA, 500),
        (WORMHOLE_THETA, WORMHOLE_WINDOW),
    ] {
        let want = (sampled_us - f64::from(window)) / sampled_us;
        let got = share(&s.qps, theta, window);
        assert!(
            (got - want).abs() < 0.005,
            "θ {theta} l {window}: {got} against {want}"
        );
        // One sender: the whole-fabric figure is its own.
        let c = s
            .qps
            .criteria
            .iter()
            .find(|c| c.theta == theta && c.window_samples == window)
            .unwrap();
        assert_eq!(c.all_steady_us * 1_000_000, c.steady_ps);
    }
    let (_, s) = probed(&load_text(&format!(
        "{fabric}\n[workloads.two.flows]\nlist = [{{ src = \"h0\", dst = \"h2\", bytes = 20_000_000 }}, {{ src = \"h1\", dst = \"h2\", bytes = 20_000_000 }}]\n"
    )));
    assert!(share(&s.qps, 0.03, 2000) < 0.05, "{s:?}");
}
