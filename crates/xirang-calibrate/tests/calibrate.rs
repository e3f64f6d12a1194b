//! Calibration's parts on the test twin: its parameters, the figures of a run, the
//! fit from the scenario's own values, and the calibrated file.

use std::path::Path;

use xirang_calibrate::counters::{Tiers, figures, window_of_run};
use xirang_calibrate::{Options, Param, calibrate, calibrated_toml, knobs};
use xirang_fabric::scenario::Scenario;

fn twin_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/twin.toml")
}

fn twin() -> xirang_fabric::Loaded {
    Scenario::load(&twin_path()).unwrap()
}

/// The twin with knobs set on its scenario: built again, as the simulator runs the built
/// workloads, not the scenario's text.
fn fleet(l: &xirang_fabric::Loaded, set: &[(usize, f64)]) -> xirang_fabric::Loaded {
    let k = knobs(&l.scenario, &l.fabric);
    let mut s = l.scenario.clone();
    for &(i, v) in set {
        k[i].set(&mut s, v);
    }
    let dir = twin_path().parent().unwrap().to_path_buf();
    s.build(&twin_path(), &dir, None).unwrap()
}

#[test]
fn the_twin_has_a_load_per_workload_and_a_crossing_share() {
    let l = twin();
    let k = knobs(&l.scenario, &l.fabric);
    let keys: Vec<String> = k.iter().map(|k| k.key()).collect();
    assert_eq!(
        keys,
        [
            "workloads.inference.inference.requests_per_sec",
            "workloads.inference.inference.local_share",
            "workloads.training.collective.bytes",
        ]
    );
    // Two clients on leaf 1, two of the four servers there: uniform is a share of 0.5.
    let share = &k[1];
    assert_eq!(share.param, Param::LocalShare);
    assert_eq!(share.initial, 0.5);
    for knob in &k {
        let u = knob.position(knob.initial);
        assert!((knob.at(u) / knob.initial - 1.0).abs() < 1e-9, "{knob:?}");
        assert!(knob.at(0.0) >= knob.min && knob.at(1.0) <= knob.max * (1.0 + 1e-12));
    }
}

#[test]
fn figures_of_a_run_do_not_depend_on_the_time_unit() {
    let l = twin();
    let r = xirang_sim::simulate(&l, &xirang_sim::options(&l), &mut |_| {});
    let tiers = Tiers::of(&l);
    let w = window_of_run(&r, Some(4_000_000));
    let f = figures(&w, &tiers, &mut Vec::new());
    // As a Prometheus window: Unix ms, the run 4 ms long.
    let mut abs = w.clone();
    abs.relative = false;
    for s in &mut abs.series {
        for p in &mut s.points {
            p.0 /= 1000;
        }
    }
    let g = figures(&abs, &tiers, &mut Vec::new());
    assert_eq!(f.len(), g.len());
    for (a, b) in f.iter().zip(&g) {
        assert_eq!(a.name, b.name);
        assert!(
            (a.value - b.value).abs() <= 1e-12 * a.value.abs().max(1.0),
            "{a:?} {b:?}"
        );
    }
    // The ring of 8 ranks (two GPUs on each of 4 hosts) sends 2 (n-1)/n of 8 MiB per
    // rank; half of its hops are inside a host (NVLink), so 4 ranks' worth crosses the
    // NICs, of 16 NIC ports' capacity over the 4 ms window, plus headers.
    let payload_bytes = 2.0 * 7.0 / 8.0 * 8_388_608.0 * 4.0;
    let capacity = 16.0 * 100e9 / 8.0 * 4e-3;
    let host3 = f.iter().find(|x| x.name == "util host p3 (training)").unwrap();
    assert!(host3.value >= payload_bytes / capacity, "{host3:?}");
    assert!(host3.value < 1.2 * payload_bytes / capacity, "{host3:?}");
}

#[test]
fn the_fit_finds_values_a_run_was_made_with() {
    let l = twin();
    // The "fleet": the training load halved, the inference rate up by half.
    let fleet = fleet(&l, &[(0, 90_000.0), (2, 4_194_304.0)]);
    let r = xirang_sim::simulate(&fleet, &xirang_sim::options(&fleet), &mut |_| {});
    let observed = figures(
        &window_of_run(&r, Some(4_000_000)),
        &Tiers::of(&l),
        &mut Vec::new(),
    );
    let opts = Options {
        tolerance: 0.2,
        seeds: vec![],
        max_runs: 200,
        fit: vec![],
    };
    let c = calibrate(&l, &observed, &opts, &|_, _| {}).unwrap();
    assert!(c.objective < c.objective_initial);
    let fitted = |suffix: &str| c.knobs.iter().find(|k| k.key.ends_with(suffix)).unwrap().fitted;
    assert!(
        (fitted("requests_per_sec") / 90_000.0 - 1.0).abs() < 0.05,
        "{:?}",
        c.knobs
    );
    assert!(
        (fitted("bytes") / 4_194_304.0 - 1.0).abs() < 0.05,
        "{:?}",
        c.knobs
    );
    assert!((fitted("local_share") - 0.5).abs() < 0.05, "{:?}", c.knobs);
    assert!(c.runs <= 200);
    // The calibrated text keeps the file's comments and layout, with the values in place.
    let original = std::fs::read_to_string(twin_path()).unwrap();
    let text = calibrated_toml(&original, &c, "# header\n").unwrap();
    assert!(text.starts_with("# header\n# The digital twin"), "{text}");
    assert!(text.contains("\n[workloads.training.collective]\n"), "{text}");
    assert!(text.contains("local_share = "), "{text}");
    let s = Scenario::parse(&text, Path::new("calibrated.toml")).unwrap();
    let again = knobs(&s, &l.fabric);
    for (a, b) in again.iter().zip(&c.knobs) {
        assert!((a.initial / b.fitted - 1.0).abs() < 1e-3, "{a:?} {b:?}");
    }
}

#[test]
fn a_scenario_without_a_window_is_refused() {
    let l = Scenario::builtin_default().unwrap();
    let opts = Options {
        tolerance: 0.2,
        seeds: vec![],
        max_runs: 20,
        fit: vec![],
    };
    let e = calibrate(&l, &[], &opts, &|_, _| {}).unwrap_err().to_string();
    assert!(e.contains("[run] end_us: expected the simulated window"), "{e}");
}

/// With the services' latency histogram in the window (as README's metric contract has
/// them export it), the request p99 is one more figure, through the same buckets on
/// both sides, and the fit still finds the fleet's values.
#[test]
fn an_exported_request_histogram_is_compared_through_its_buckets() {
    use xirang_calibrate::app::{REQUEST_BUCKETS, figures as app_figures};
    let l = twin();
    let fleet = fleet(&l, &[(0, 90_000.0)]);
    let r = xirang_sim::simulate(&fleet, &xirang_sim::options(&fleet), &mut |_| {});
    let mut w = window_of_run(&r, Some(4_000_000));
    // Buckets of 10 µs to about 10 ms, doubling, and +Inf, as a service would declare.
    let mut les: Vec<f64> = (0..11).map(|i| 10e-6 * f64::from(1u32 << i)).collect();
    les.push(f64::INFINITY);
    for le in &les {
        let count = r
            .requests
            .iter()
            .filter(|q| q.class == "inference")
            .filter_map(|q| q.latency_ps)
            .filter(|ps| *ps as f64 * 1e-12 <= *le)
            .count();
        w.series.push(xirang_diagnose::window::Series {
            metric: REQUEST_BUCKETS.into(),
            labels: [
                ("class".to_string(), "inference".to_string()),
                ("le".to_string(), le.to_string()),
            ]
            .into_iter()
            .collect(),
            points: vec![(0, 0.0), (4_000, count as f64)],
        });
    }
    let mut observed = figures(&w, &Tiers::of(&l), &mut Vec::new());
    let app = app_figures(&w);
    assert_eq!(app.len(), 1);
    let p99 = app[0].value;
    // The histogram's p99 lies within a bucket of the exact one.
    let mut exact: Vec<f64> = r
        .requests
        .iter()
        .filter_map(|q| q.latency_ps)
        .map(|ps| ps as f64 * 1e-12)
        .collect();
    exact.sort_by(f64::total_cmp);
    let e = exact[(exact.len() * 99).div_ceil(100) - 1];
    assert!(p99 <= 2.0 * e && e <= 2.0 * p99, "{p99} {e}");
    observed.extend(app);
    let opts = Options {
        tolerance: 0.2,
        seeds: vec![],
        max_runs: 200,
        fit: vec![],
    };
    let c = calibrate(&l, &observed, &opts, &|_, _| {}).unwrap();
    let row = c
        .residuals
        .iter()
        .find(|x| x.name == "request p99 (inference)")
        .unwrap();
    assert!(row.within, "{row:?}");
    let rate = c
        .knobs
        .iter()
        .find(|x| x.key.ends_with("requests_per_sec"))
        .unwrap()
        .fitted;
    assert!((rate / 90_000.0 - 1.0).abs() < 0.05, "{:?}", c.knobs);
}
