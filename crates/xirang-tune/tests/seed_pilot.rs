//! The seed pilot (search/seed_noise.rs) on runs whose dependence on the seed is made up:
//! a runner that scales one real run of the vendor by what a configuration gains and by a
//! seed's noise, so that each case puts the noise exactly where the pilot can or cannot
//! see it.

use std::path::Path;

use xirang_fabric::Loaded;
use xirang_fabric::config::FabricConfig;
use xirang_fabric::scenario::Scenario;
use xirang_fabric::tune::{ParamValue, value_of};
use xirang_tune::eval::{Evaluator, RunMetrics};
use xirang_tune::search::{OnDone, RunJob, Runner, TuneError, TuneResult, Verdict, tune_with};
use xirang_tune::space;
use xirang_tune::store::Store;

/// Which configurations move with the seed.
#[derive(Clone, Copy)]
enum Noise {
    Nowhere,
    /// Every configuration but the vendor and the baselines: what the pilot cannot see.
    CandidatesOnly,
    Everywhere,
}

/// The made-up fabric: a leaf Kmin under 50 KB takes 5 % off every class's figure; a
/// noisy configuration's figures are 1 % lower on even seeds and 1 % higher on odd ones.
struct Fake {
    vendor_run: RunMetrics,
    baselines: Vec<FabricConfig>,
    tiers: Vec<xirang_fabric::model::Tier>,
    noise: Noise,
}

/// Gain of a small Kmin.
const GAIN: f64 = 0.05;
/// Kmin under which it is had, bytes.
const SMALL_KMIN_BYTES: f64 = 50_000.0;
/// How far a noisy configuration's figures move with the seed, either way.
const NOISE: f64 = 0.01;

impl Fake {
    fn metrics(&self, job: &RunJob) -> RunMetrics {
        let kmin = match value_of(&job.config, &self.tiers, "ecn.leaf.kmin_bytes") {
            Some(ParamValue::Number(x)) => x,
            other => panic!("kmin {other:?}"),
        };
        let baseline = self.baselines.contains(&job.config);
        let noisy = match self.noise {
            Noise::Nowhere => false,
            Noise::CandidatesOnly => !baseline,
            Noise::Everywhere => true,
        };
        let mut factor = if kmin < SMALL_KMIN_BYTES { 1.0 - GAIN } else { 1.0 };
        if noisy {
            factor *= if job.seed.is_multiple_of(2) {
                1.0 - NOISE
            } else {
                1.0 + NOISE
            };
        }
        let mut m = self.vendor_run.clone();
        for c in m.classes.values_mut() {
            for x in [
                &mut c.collective_us,
                &mut c.p99_us,
                &mut c.p999_us,
                &mut c.slowdown_p99,
            ] {
                *x = x.map(|v| v * factor);
            }
        }
        m
    }
}

impl Runner for Fake {
    fn run(
        &self,
        _: &Evaluator<'_>,
        jobs: &[RunJob],
        done: &OnDone<'_>,
    ) -> Result<Vec<RunMetrics>, TuneError> {
        jobs.iter()
            .enumerate()
            .map(|(i, j)| {
                let m = self.metrics(j);
                done(i, &m, 0.0)?;
                Ok(m)
            })
            .collect()
    }
}

fn loaded() -> Loaded {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/incast-mice.toml");
    let mut loaded = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
    let t = &mut loaded.scenario.tune;
    t.budget = 8;
    t.search_seeds = 6;
    t.held_out_seeds = 8;
    t.sensitivity_seeds = 3;
    loaded
}

fn tune_under(noise: Noise, pilot: bool) -> TuneResult {
    let mut loaded = loaded();
    loaded.scenario.tune.seed_pilot = pilot;
    let eval = Evaluator::new(&loaded);
    let sp = space::space(&loaded);
    let baselines = space::baselines(&loaded);
    let fake = Fake {
        vendor_run: eval.run(&baselines[0].config, loaded.scenario.run.seed, None),
        baselines: baselines.iter().map(|b| b.config.clone()).collect(),
        tiers: loaded.fabric.tiers(),
        noise,
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("trials.sqlite"), false, &[("t", "1".into())]).unwrap();
    tune_with(&eval, &sp, &baselines, store, &|_| {}, &fake).unwrap()
}

#[test]
fn quiet_seeds_are_cut_to_two() {
    let r = tune_under(Noise::Nowhere, true);
    let n = &r.seed_noise;
    assert!(n.cut && !n.broken(), "{n:?}");
    assert_eq!(n.seeds, vec![1, 2, 1_000_001, 1_000_002]);
    assert_eq!(n.configurations, 5);
    assert_eq!(n.widest.as_ref().unwrap().1, 0.0);
    assert_eq!(r.seeds.0, vec![1, 2]);
    assert_eq!(r.seeds.1, vec![1_000_001, 1_000_002]);
    assert_eq!(r.validation_seeds, vec![2_000_001, 2_000_002]);
    assert_eq!(r.sensitivity_seeds, vec![1_000_001]);
    assert_eq!(r.verdict, Verdict::Recommended);
    let g = r.gain.unwrap();
    assert!((g.mean - GAIN).abs() < 1e-9, "{g:?}");
    assert!(
        n.describe().contains("every seed set cut to 2 seeds"),
        "{}",
        n.describe()
    );
    // The search's first round screened every candidate on one seed, the last round
    // judged on both.
    assert!(r.candidates.iter().all(|c| !c.objectives.is_empty()));
    assert!(r.candidates.iter().any(|c| c.objectives.len() == 3));
    // The same tune with the pilot turned off runs every set at its size.
    let full = tune_under(Noise::Nowhere, false);
    assert!(!full.seed_noise.cut && full.seed_noise.widest.as_ref().unwrap().1 == 0.0);
    assert_eq!((full.seeds.0.len(), full.seeds.1.len()), (6, 8));
    assert_eq!(full.verdict, Verdict::Recommended);
    assert!(r.runs.0 * 2 < full.runs.0, "{:?} against {:?}", r.runs, full.runs);
}

#[test]
fn seeds_that_move_the_baselines_are_all_run() {
    let r = tune_under(Noise::Everywhere, true);
    let n = &r.seed_noise;
    assert!(!n.cut, "{n:?}");
    // The range of 0.99 and 1.01 over 1.01.
    let (_, w) = n.widest.clone().unwrap();
    assert!((w - 2.0 * NOISE / (1.0 + NOISE)).abs() < 1e-9, "{n:?}");
    assert_eq!(
        (
            r.seeds.0.len(),
            r.validation_seeds.len(),
            r.sensitivity_seeds.len()
        ),
        (6, 8, 3)
    );
    assert!(r.seeds.1.len() >= 8);
    assert!(
        n.describe().contains("every seed set at its full size"),
        "{}",
        n.describe()
    );
    // Not cut, the pilot's runs are the runs the tune makes anyway: with it off, the same
    // runs and the same result.
    let off = tune_under(Noise::Everywhere, false);
    assert_eq!(off.runs.0, r.runs.0);
    assert_eq!(
        (
            &off.seeds,
            &off.verdict,
            &off.gain,
            &off.recommendation,
            &off.held_out
        ),
        (&r.seeds, &r.verdict, &r.gain, &r.recommendation, &r.held_out)
    );
}

#[test]
fn a_tested_configuration_that_moves_with_the_seed_is_judged_on_the_full_held_out_set() {
    let r = tune_under(Noise::CandidatesOnly, true);
    let n = &r.seed_noise;
    // The pilot sees only the baselines, which are quiet: the sets are cut...
    assert!(n.cut, "{n:?}");
    assert_eq!(r.seeds.0.len(), 2);
    // ...but the recommendation moves with the seed, so the held-out evaluation runs
    // the scenario's eight seeds (or more, were its gain unclear), and the report warns.
    assert_eq!(r.verdict, Verdict::Recommended);
    assert!(r.seeds.1.len() >= 8, "{:?}", r.seeds.1);
    assert_eq!(
        &r.seeds.1[..8],
        &(1..=8).map(|i| 1_000_000 + i).collect::<Vec<u64>>()[..]
    );
    assert!(n.broken(), "{n:?}");
    assert!(n.describe().contains("WARNING"), "{}", n.describe());
}
