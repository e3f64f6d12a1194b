//! The optimizer against an exhaustive grid on a two-parameter subspace (Kmin x Kmax at
//! the leaf tier) of a small scenario: the search must get within 5% of the grid's best
//! while simulating at most a tenth of what the grid simulates.

use std::path::Path;

use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_fabric::tune::{ParamValue, apply};
use xirang_tune::eval::Evaluator;
use xirang_tune::search::tune;
use xirang_tune::space::{self, Domain};
use xirang_tune::store::Store;

fn load() -> Loaded {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/incast-mice.toml");
    Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"))
}

/// Points per axis of the grid.
const GRID: usize = 15;

fn axis(d: &Domain) -> Vec<f64> {
    let Domain::Number { lo, hi, .. } = d else {
        panic!("numeric")
    };
    (0..GRID)
        .map(|i| (lo.ln() + (hi.ln() - lo.ln()) * i as f64 / (GRID - 1) as f64).exp())
        .collect()
}

#[test]
fn search_gets_within_5_percent_of_the_grid_with_a_tenth_of_its_runs() {
    let loaded = load();
    let eval = Evaluator::new(&loaded);
    let sp = space::space(&loaded);
    assert_eq!(sp.len(), 2);
    let tiers = loaded.fabric.tiers();
    let seeds: Vec<u64> = (0..u64::from(loaded.scenario.tune.search_seeds))
        .map(|i| loaded.scenario.run.seed + i)
        .collect();
    let vendor = space::vendor(&loaded.scenario.config);
    let reference: Vec<_> = seeds.iter().map(|s| eval.run(&vendor, *s, None)).collect();

    // The grid: every point on every search seed.
    let mut grid = Vec::new();
    for kmin in axis(&sp[0].domain) {
        for ratio in axis(&sp[1].domain) {
            let values = vec![
                (sp[0].name.clone(), ParamValue::Number(kmin.round())),
                (sp[1].name.clone(), ParamValue::Number(ratio)),
            ];
            let config = apply(&loaded.scenario.config, &tiers, &values).unwrap();
            let obj = seeds
                .iter()
                .zip(&reference)
                .map(|(s, r)| eval.score(&eval.run(&config, *s, None), r).objective)
                .sum::<f64>()
                / seeds.len() as f64;
            grid.push(obj);
        }
    }
    let grid_runs = grid.len() * seeds.len() + reference.len();
    let grid_best = grid.iter().copied().fold(f64::INFINITY, f64::min);
    // The landscape is not flat: most points are more than 5% off the best, so reaching
    // 5% is a real test.
    let far = grid.iter().filter(|x| **x > grid_best * 1.05).count();
    assert!(
        far * 2 > grid.len(),
        "only {far} of {} grid points are more than 5% off {grid_best}",
        grid.len()
    );

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("trials.sqlite"), false, &[("t", "1".into())]).unwrap();
    // The vendor, paper and scenario baselines (the published production settings are
    // comparisons for the report, not part of finding the optimum).
    let baselines: Vec<_> = space::baselines(&loaded).into_iter().take(3).collect();
    let r = tune(&eval, &sp, &baselines, store, &|_| {}).unwrap();
    // Everything the search simulated: candidates, baselines, the held-out checks. The
    // ablation after it (which of the winner's changes earn their place) and the
    // sensitivity sweeps are separate steps on their own seeds, not part of finding the
    // optimum.
    let tune_runs = r.runs.0.saturating_sub(r.ablation_runs + r.sweep_runs) as usize;
    assert!(
        tune_runs * 10 <= grid_runs,
        "tune ran {tune_runs}, grid {grid_runs}"
    );
    // The best the search saw (every candidate ran on both search seeds), and the one it
    // recommends.
    let found = r
        .candidates
        .iter()
        .map(|c| c.objectives[0])
        .fold(f64::INFINITY, f64::min);
    assert!(
        found <= grid_best * 1.05,
        "found {found:.4}, grid best {grid_best:.4}"
    );
    let best = r
        .candidates
        .iter()
        .find(|c| Some(c.id) == r.best)
        .expect("a recommendation");
    assert!(
        best.objectives[2] <= grid_best * 1.05,
        "{best:?} vs {grid_best:.4}"
    );
}
