//! The search: TPE (tree-structured Parzen estimators, the `tpe` crate) proposing
//! candidates, successive halving judging them (every candidate on two run seeds, the best
//! quarter on half the search seeds, the best of those on all of them), simulations in
//! parallel on all cores, every finished run in the trial log. The cheap rounds are cheap
//! by seeds, not by shorter runs (see `Evaluator::variant` for why).
//!
//! Determinism: candidates are proposed in brackets; a bracket's proposals depend only on
//! the results of earlier brackets and on random streams derived from the search seed and
//! the candidate's number, never on the order in which parallel runs finish. A resumed
//! tune therefore proposes the same candidates and reaches the same result, reading the
//! runs it already has from the log instead of simulating them again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::SeedableRng;
use rayon::prelude::*;
use serde::Serialize;
use xirang_fabric::config::FabricConfig;
use xirang_fabric::tune::{ParamValue, apply, value_of};

use crate::eval::{Evaluator, RunMetrics, Score};
use crate::space::{Baseline, Domain, Param};
use crate::stats::{Interval, mean_interval};
use crate::store::{EvalKey, Store, StoreError};

/// Level of every run in the trial log (the log's key keeps a level so that a later
/// multi-fidelity scheme can share the format).
const FULL: u32 = 1;
/// Largest bracket: candidates proposed together, then halved.
pub const MAX_BRACKET: usize = 16;
/// Smallest bracket.
pub const MIN_BRACKET: usize = 4;
/// Brackets a budget is cut into, at least: so that TPE proposes most candidates after
/// the first bracket's spread.
pub const MIN_BRACKETS: usize = 4;
/// Successive-halving keep ratio between rounds.
pub const ETA: usize = 4;
/// Seeds of the first round.
const FIRST_ROUND_SEEDS: usize = 2;
/// A candidate's runs stop at this multiple of the vendor's run time on the same seed (a
/// deadlocked or starved fabric would run forever).
pub const TIME_CAP_FACTOR: f64 = 10.0;
/// Run seeds of the held-out evaluation start here, far from the search seeds.
pub const HELD_OUT_SEED_OFFSET: u64 = 1_000_000;
/// Run seeds of the ablation (which settings earn their place) start here: apart from
/// both the search's and the held-out evaluation's, so that neither the choice of the
/// candidate nor the final report reuses them.
pub const VALIDATION_SEED_OFFSET: u64 = 2_000_000;
/// Trial-log ids of the ablation's configurations start here, above any candidate's.
pub const ABLATION_ID_BASE: i64 = 1 << 40;
/// The held-out evaluation adds seeds, half its first count at a time, while the gain's
/// interval still straddles zero and is wider than this (a share of the vendor's)...
pub const NARROW_ENOUGH: f64 = 0.01;
/// ...up to this many times its first count.
pub const HELD_OUT_GROWTH_CAP: usize = 3;
/// Reverts the ablation may make to bring a configuration back within its guardrails.
const REPAIR_STEPS: usize = 3;
/// Trial-log ids of the sensitivity sweeps' configurations start here, above the
/// ablation's.
pub const SWEEP_ID_BASE: i64 = 1 << 41;
/// Points of a numeric sensitivity sweep, as offsets along the setting's searched range
/// (on its log scale if it has one) from the recommended value: a tenth of the range
/// either side and two and three tenths for the cliffs further out. On the built-in
/// Kmin range (5 KB to 2 MB, log) a tenth is a factor of 1.8.
const SWEEP_OFFSETS: [f64; 7] = [-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3];

/// One candidate and how far it got.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// Number (0, 1, 2, ... in proposal order).
    pub id: i64,
    /// Bracket it was proposed in.
    pub bracket: usize,
    /// Parameter values.
    pub values: Vec<(String, ParamValue)>,
    /// Mean objective after each round it reached (two seeds, half the search seeds, all).
    pub objectives: Vec<f64>,
    /// Constraint broken in its last round, if any.
    pub violation: Option<String>,
    /// After the last round: mean objective plus one standard error over the search
    /// seeds, the pessimistic figure the recommendation is chosen by.
    pub bound: Option<f64>,
}

/// A baseline's figures during the search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineResult {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Mean objective over the search seeds (the vendor's is 1 by construction).
    pub objective: f64,
}

/// Per-seed results on the held-out seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldOut {
    /// `tuned` or a baseline's name.
    pub name: String,
    /// Objective per held-out seed, relative to the vendor on that seed, without the
    /// penalty of broken constraints (those are in `violations`).
    pub objectives: Vec<f64>,
    /// Each class's metric relative to the vendor's, mean over seeds.
    pub classes: BTreeMap<String, f64>,
    /// Constraint violations on any seed.
    pub violations: Vec<String>,
    /// Raw metrics per seed.
    pub metrics: Vec<RunMetrics>,
}

impl HeldOut {
    /// Mean objective.
    pub fn mean(&self) -> f64 {
        self.objectives.iter().sum::<f64>() / self.objectives.len().max(1) as f64
    }

    /// Sample standard deviation of the objective.
    pub fn std(&self) -> f64 {
        let n = self.objectives.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.objectives.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// What a kept change is worth: reverting it to the vendor's values, the rest kept. A
/// change is one setting, or a class's congestion control (the algorithm and its
/// parameters, which act only together).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contribution {
    /// The change: a setting's name, or `classes.<class> congestion control`.
    pub name: String,
    /// Its settings: (name, vendor value, recommended value).
    pub settings: Vec<(String, ParamValue, ParamValue)>,
    /// Objective without it minus with it, per validation seed (a share of the vendor's:
    /// +0.02 = 2 % worse without it): mean and 95 % interval.
    pub without: Interval,
    /// Kept although its revert is not significantly worse: reverting it breaks a
    /// constraint or takes a class further past its guardrail.
    pub needed_for_guardrail: bool,
    /// What reverting it breaks, when it breaks something: the first constraint broken
    /// on a validation seed, or the guardrail it takes a class past. (`without` is then
    /// the metrics' change alone, without the penalty the search adds for it.)
    pub revert_breaks: Option<String>,
}

/// Backward elimination of the chosen candidate's changes, on the validation seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ablation {
    /// The candidate's changes from the vendor, before.
    pub before: Vec<(String, ParamValue)>,
    /// Changes kept, each significantly worse to revert.
    pub kept: Vec<Contribution>,
    /// Changes reverted to the vendor's values: the change, what reverting it cost when it
    /// was reverted (objective without minus with it, as in [`Contribution::without`]),
    /// and why (`not significant`, or the guardrail it brought the configuration back
    /// within).
    pub reverted: Vec<(String, Interval, String)>,
}

/// One class's guardrail on the held-out seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Guardrail {
    /// Traffic class.
    pub class: String,
    /// How much worse than the vendor its metric may get (0.01 = 1 %).
    pub tolerance: f64,
    /// Its metric relative to the vendor's, minus 1, per held-out seed: mean and interval
    /// (+0.03 = 3 % worse).
    pub change: Interval,
    /// `tolerance - change.mean`: how far from the guardrail (negative: broken).
    pub margin: f64,
}

/// One setting swept around the recommendation, every other setting at its recommended
/// value, on the first `sensitivity_seeds` held-out seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sweep {
    /// The setting.
    pub name: String,
    /// Its recommended value (the vendor's when the vendor default stands).
    pub at: ParamValue,
    /// Why it is swept: `kept` (a recommended change) or `ecn` (every tier's Kmin and
    /// Kmax are).
    pub why: &'static str,
    /// The points, in the setting's order.
    pub points: Vec<SweepPoint>,
}

impl Sweep {
    /// The lowest and highest objective over the sweep's points.
    pub fn objective_range(&self) -> (f64, f64) {
        self.points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.objective), hi.max(p.objective))
        })
    }

    /// The point nearest the recommended value (in sweep order) at which a class's metric
    /// is past its guardrail (`tolerance(class)`, a share): the point, the class and its
    /// change (+0.05: 5 % worse than the vendor). `None`: every point keeps every
    /// guardrail.
    pub fn nearest_break(&self, tolerance: impl Fn(&str) -> f64) -> Option<(&SweepPoint, &str, f64)> {
        let center = self.points.iter().position(|p| p.value == self.at).unwrap_or(0);
        let mut order: Vec<usize> = (0..self.points.len()).collect();
        order.sort_by_key(|i| (i.abs_diff(center), *i));
        order.into_iter().find_map(|i| {
            let p = &self.points[i];
            p.classes
                .iter()
                .map(|(c, r)| (c.as_str(), r - 1.0))
                .filter(|(c, x)| *x > tolerance(c))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(c, x)| (p, c, x))
        })
    }
}

impl TuneResult {
    /// When the vendor default itself breaks a constraint on held-out seeds: on how many
    /// of them, and the first such violation. The vendor default is what a tune falls
    /// back to, so a report must say so.
    pub fn vendor_violations(&self) -> Option<(usize, usize, String)> {
        let v = self.held_out.iter().find(|h| h.name == "vendor")?;
        let first = v.violations.first()?;
        Some((v.violations.len(), v.objectives.len(), first.clone()))
    }
}

/// One point of a [`Sweep`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// The setting's value.
    pub value: ParamValue,
    /// The objective relative to the vendor's (1 = the vendor's), mean over the seeds.
    pub objective: f64,
    /// Each class's metric relative to the vendor's, mean over the seeds.
    pub classes: BTreeMap<String, f64>,
    /// A constraint this point broke on some seed.
    pub violation: Option<String>,
}

/// The values a sensitivity sweep of `p` around `center` runs: every choice of a choice,
/// else [`SWEEP_OFFSETS`] along the range, at the device's resolution, each once, in
/// order.
pub fn sweep_values(p: &Param, center: &ParamValue) -> Vec<ParamValue> {
    match &p.domain {
        Domain::Choice(c) => c.iter().map(|x| ParamValue::Choice(x.clone())).collect(),
        Domain::Number { .. } => {
            let u0 = p.position(center);
            let mut v: Vec<ParamValue> = SWEEP_OFFSETS
                .iter()
                .map(|o| {
                    if *o == 0.0 {
                        p.normalize(center)
                    } else {
                        p.normalize(&p.at(u0 + o))
                    }
                })
                .collect();
            v.dedup();
            v
        }
    }
}

/// What the tune concludes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Verdict {
    /// The recommendation beats the vendor significantly on the held-out seeds and keeps
    /// every guardrail.
    Recommended,
    /// No candidate beat the vendor during the search within the constraints and
    /// guardrails: the vendor default stands.
    NothingBeatTheVendor,
    /// The ablation reverted every change of the chosen candidate (none was significantly
    /// worse to revert within the constraints and guardrails, on the validation seeds):
    /// the vendor default stands.
    NoChangeEarnsItsPlace,
    /// The recommendation's gain on the held-out seeds is not significant: the vendor
    /// default stands.
    NoSignificantGain,
    /// The recommendation broke a guardrail on the held-out seeds: the vendor default
    /// stands.
    GuardrailBroken {
        /// The class.
        class: String,
    },
}

/// What a tune found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneResult {
    /// Why the search stopped before its budget of candidates, if it did (`--time`).
    pub search_stopped: Option<String>,
    /// The best baseline other than the vendor on the held-out seeds, and the tested
    /// recommendation's advantage over it per seed (its objective minus the
    /// recommendation's: positive = the recommendation is better); without a tested
    /// recommendation, the baseline's own gain over the vendor.
    pub versus_best_baseline: Option<(String, Interval)>,
    /// The tested recommendation's advantage over each baseline on the held-out seeds,
    /// paired by seed, in the baselines' order (empty when nothing was tested).
    pub versus_baselines: Vec<(String, Interval)>,
    /// What the tune concludes; unless [`Verdict::Recommended`], the recommendation is
    /// the vendor default.
    pub verdict: Verdict,
    /// The candidate's changes reduced to those that earn their place.
    pub ablation: Option<Ablation>,
    /// The tested recommendation's gain over the vendor on the held-out seeds (1 - its
    /// objective per seed): mean and interval.
    pub gain: Option<Interval>,
    /// Each class's guardrail on the held-out seeds, for the tested recommendation.
    pub guardrails: Vec<Guardrail>,
    /// The ablation's seeds.
    pub validation_seeds: Vec<u64>,
    /// Simulations the ablation needed (the vendor and each configuration it tried on the
    /// validation seeds), run or read back.
    pub ablation_runs: u64,
    /// One-at-a-time sweeps around the recommendation: its kept settings and every tier's
    /// ECN thresholds.
    pub sensitivity: Vec<Sweep>,
    /// The held-out seeds every sweep point ran on.
    pub sensitivity_seeds: Vec<u64>,
    /// Simulations of the sweeps (the points other than the recommendation), whether run or
    /// read back from the trial log.
    pub sweep_runs: u64,
    /// Every candidate.
    pub candidates: Vec<Candidate>,
    /// The best candidate that passed every round, if it beats the vendor baseline.
    pub best: Option<i64>,
    /// The recommended parameter values (the vendor's when nothing beat it).
    pub recommendation: Vec<(String, ParamValue)>,
    /// The recommended configuration.
    pub config: FabricConfig,
    /// The vendor baseline's values of the searched parameters.
    pub vendor_values: Vec<(String, ParamValue)>,
    /// Baselines over the search seeds.
    pub baselines: Vec<BaselineResult>,
    /// The recommendation and the baselines on the held-out seeds.
    pub held_out: Vec<HeldOut>,
    /// Search seeds and held-out seeds.
    pub seeds: (Vec<u64>, Vec<u64>),
    /// Simulations run by this invocation, and read back from the trial log.
    pub runs: (u64, u64),
    /// Wall time of this invocation, s.
    pub wall_s: f64,
}

/// Progress of a tune, reported after every simulation.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Simulations finished (run or read back).
    pub done: u64,
    /// Simulations the tune will need in all (an estimate until the last round).
    pub total: u64,
    /// Best objective so far (full runs on every search seed).
    pub best: Option<f64>,
}

/// A search failure.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The trial log.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A candidate's values do not make a configuration (a bug, or a space that names a
    /// setting the scenario cannot take).
    #[error("candidate {0}: {1}")]
    Apply(i64, String),
    /// The processes running the simulations failed.
    #[error("running the simulations: {0}")]
    Runner(String),
}

/// One evaluation: a configuration on a run seed, stopped at `cap_us` of simulated time
/// if given. What a [`Runner`] runs.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RunJob {
    /// The configuration.
    pub config: FabricConfig,
    /// The run seed.
    pub seed: u64,
    /// Simulated time to stop at, us.
    pub cap_us: Option<f64>,
}

impl RunJob {
    /// Simulates the job; returns its metrics and the wall seconds it took.
    pub fn run(&self, eval: &Evaluator<'_>) -> (RunMetrics, f64) {
        let t = Instant::now();
        let m = eval.run(&self.config, self.seed, self.cap_us);
        (m, t.elapsed().as_secs_f64())
    }
}

/// Called as each job of a batch finishes: its index in the batch, its metrics and the
/// wall seconds it took. An error (the trial log) stops the tune.
pub type OnDone<'a> = dyn Fn(usize, &RunMetrics, f64) -> Result<(), StoreError> + Sync + 'a;

/// Where a tune's simulations run: this process's cores ([`Threads`]), or several
/// processes (`xirang-mpi`'s MPI runner). Each job's result depends only on the job, so
/// where it ran never changes the tune.
pub trait Runner {
    /// Runs every job of `jobs` and returns their metrics in order, calling `done` for each
    /// as it finishes.
    ///
    /// # Errors
    /// What `done` returned, or a runner's own failure.
    fn run(
        &self,
        eval: &Evaluator<'_>,
        jobs: &[RunJob],
        done: &OnDone<'_>,
    ) -> Result<Vec<RunMetrics>, TuneError>;
}

/// The jobs on this process's cores, with rayon.
pub struct Threads;

impl Runner for Threads {
    fn run(
        &self,
        eval: &Evaluator<'_>,
        jobs: &[RunJob],
        done: &OnDone<'_>,
    ) -> Result<Vec<RunMetrics>, TuneError> {
        jobs.par_iter()
            .enumerate()
            .map(|(i, j)| {
                let (m, seconds) = j.run(eval);
                done(i, &m, seconds)?;
                Ok(m)
            })
            .collect()
    }
}

/// A simulation to do.
struct Job {
    key: EvalKey,
    config: FabricConfig,
    params: String,
    cap_us: Option<f64>,
}

/// Per-parameter TPE models.
enum Model {
    Number(tpe::TpeOptimizer, bool),
    Choice(tpe::TpeOptimizer, Vec<String>),
}

/// A uniform number in [0, 1).
fn unit(rng: &mut Xoshiro256PlusPlus) -> f64 {
    use rand_xoshiro::rand_core::Rng;
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// 0..n in a random order (Fisher-Yates).
fn shuffled(n: usize, rng: &mut Xoshiro256PlusPlus) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (unit(rng) * (i + 1) as f64) as usize;
        v.swap(i, j.min(i));
    }
    v
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// Standard error of the mean (0 for fewer than two values).
fn standard_error(xs: &[f64]) -> f64 {
    let n = xs.len();
    if n < 2 {
        return 0.0;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64 / n as f64).sqrt()
}

fn mix(a: u64, b: u64) -> u64 {
    // SplitMix64 finaliser: decorrelates nearby seeds.
    let mut z = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_add(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Model {
    fn new(p: &Param) -> Model {
        match &p.domain {
            Domain::Number { lo, hi, log, .. } => {
                let (a, b) = if *log { (lo.ln(), hi.ln()) } else { (*lo, *hi) };
                Model::Number(
                    tpe::TpeOptimizer::new(
                        tpe::parzen_estimator(),
                        tpe::range(a, b).expect("validated range"),
                    ),
                    *log,
                )
            }
            Domain::Choice(c) => Model::Choice(
                tpe::TpeOptimizer::new(
                    tpe::histogram_estimator(),
                    tpe::categorical_range(c.len()).expect("at least one choice"),
                ),
                c.clone(),
            ),
        }
    }

    fn ask(&mut self, rng: &mut Xoshiro256PlusPlus) -> ParamValue {
        match self {
            Model::Number(o, log) => {
                let x = o.ask(rng).expect("a range always samples");
                ParamValue::Number(if *log { x.exp() } else { x })
            }
            Model::Choice(o, c) => {
                let i = o.ask(rng).expect("a range always samples") as usize;
                ParamValue::Choice(c[i.min(c.len() - 1)].clone())
            }
        }
    }

    fn tell(&mut self, p: &Param, v: &ParamValue, objective: f64) {
        let v = p.normalize(v);
        let x = match (&*self, &v) {
            (Model::Number(_, log), ParamValue::Number(x)) => {
                if *log {
                    x.ln()
                } else {
                    *x
                }
            }
            (Model::Choice(_, c), ParamValue::Choice(s)) => c.iter().position(|x| x == s).unwrap_or(0) as f64,
            _ => return,
        };
        let o = match self {
            Model::Number(o, _) | Model::Choice(o, _) => o,
        };
        // The value is inside the range (normalised above), so telling cannot fail; a
        // rounding edge at the range's end is clamped by the normalisation.
        let _ = o.tell(x, objective);
    }
}

/// Each class's mean metric (relative to the vendor's) over `scores`.
fn class_means(scores: &[Score]) -> BTreeMap<&str, f64> {
    let mut sums: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for sc in scores {
        for (c, r) in &sc.classes {
            let e = sums.entry(c.as_str()).or_default();
            e.0 += r;
            e.1 += 1;
        }
    }
    sums.into_iter()
        .map(|(c, (sum, n))| (c, sum / n as f64))
        .collect()
}

/// The first class whose mean metric over `scores` is past its guardrail.
fn guardrail_broken(scores: &[Score], spec: &xirang_fabric::tune::TuneSpec) -> Option<String> {
    class_means(scores).into_iter().find_map(|(c, mean)| {
        let change = mean - 1.0;
        let tol = spec.guardrail(c);
        (change > tol).then(|| {
            format!(
                "guardrail {c}: {:+.1} % past its {:.1} % tolerance",
                change * 100.0,
                tol * 100.0
            )
        })
    })
}

/// How far past their guardrails the classes are over `scores`, summed (0 when every
/// guardrail holds).
fn guardrail_excess(scores: &[Score], spec: &xirang_fabric::tune::TuneSpec) -> f64 {
    class_means(scores)
        .into_iter()
        .map(|(c, mean)| (mean - 1.0 - spec.guardrail(c)).max(0.0))
        .sum()
}

/// The gain over the vendor per seed (1 - objective; an infeasible run counts with its
/// penalty), mean and interval.
fn gain_interval(scores: &[Score], seed: u64) -> Interval {
    let gains: Vec<f64> = scores.iter().map(|s| 1.0 - s.objective).collect();
    mean_interval(&gains, seed)
}

/// Sets `name` in `values`.
fn set_value(values: &mut [(String, ParamValue)], name: &str, v: ParamValue) {
    if let Some(x) = values.iter_mut().find(|(n, _)| n == name) {
        x.1 = v;
    }
}

/// Per-seed objective differences `a - b` (paired by seed).
fn paired(a: &[Score], b: &[Score]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x.objective - y.objective).collect()
}

/// As [`paired`], on the application metrics alone (no penalty for a broken constraint):
/// what a report can state as a percentage.
fn paired_relative(a: &[Score], b: &[Score]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x.relative - y.relative).collect()
}

/// What the ablation reverts at once: a class's congestion control (its algorithm with
/// the parameters of that algorithm, which act only together) or one other setting.
type Unit = (String, Vec<(String, ParamValue)>);

/// `changes` grouped into [`Unit`]s, in first-appearance order.
fn units(changes: &[(String, ParamValue)]) -> Vec<Unit> {
    let mut out: Vec<Unit> = Vec::new();
    for (n, v) in changes {
        let segs: Vec<&str> = n.split('.').collect();
        let label = match segs.as_slice() {
            ["classes", class, "cc"] | ["classes", class, "dcqcn" | "timely" | "hpcc" | "dctcp", _] => {
                format!("classes.{class} congestion control")
            }
            _ => n.clone(),
        };
        match out.iter_mut().find(|u| u.0 == label) {
            Some(u) => u.1.push((n.clone(), v.clone())),
            None => out.push((label, vec![(n.clone(), v.clone())])),
        }
    }
    out
}

/// Backward elimination of `chosen`'s changes from `vendor`, by [`Unit`]: every change is first tried
/// reverted alone; then, least costly first, reverted for good while the result is not
/// significantly worse (the paired interval of the objective difference reaches zero) and
/// keeps every constraint and guardrail. `eval(k, values)` scores configuration number
/// `k` on the validation seeds (numbers follow a fixed order, so a resumed tune reads them
/// back from its log). Returns the number of the final configuration and the ablation.
fn ablate(
    chosen: &[(String, ParamValue)],
    vendor: &[(String, ParamValue)],
    spec: &xirang_fabric::tune::TuneSpec,
    mut eval: impl FnMut(usize, &[(String, ParamValue)]) -> Result<Vec<Score>, TuneError>,
) -> Result<(usize, Ablation), TuneError> {
    let changed: Vec<(String, ParamValue)> = chosen
        .iter()
        .filter(|(n, v)| vendor_value(vendor, n).as_ref() != Some(v))
        .cloned()
        .collect();
    let before = units(&changed);
    let current = eval(0, &with_changes(vendor, &before))?;
    let mut a = Ablating {
        vendor,
        spec,
        eval,
        kept: vec![true; before.len()],
        before,
        k_next: 1,
        current,
        current_k: 0,
        reverted: Vec::new(),
    };
    let alone = a.each_reverted_alone()?;
    a.eliminate(alone)?;
    a.repair()?;
    let kept = a.contributions()?;
    Ok((
        a.current_k,
        Ablation {
            before: changed,
            kept,
            reverted: a.reverted,
        },
    ))
}

/// `vendor`'s value of setting `name`.
fn vendor_value(vendor: &[(String, ParamValue)], name: &str) -> Option<ParamValue> {
    vendor.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

/// The vendor's values with `changes` applied.
fn with_changes(vendor: &[(String, ParamValue)], changes: &[Unit]) -> Vec<(String, ParamValue)> {
    let mut values = vendor.to_vec();
    for (_, settings) in changes {
        for (n, v) in settings {
            set_value(&mut values, n, v.clone());
        }
    }
    values
}

/// The ablation in progress, shared by its passes: the changes and which are still kept,
/// the configuration they make now with its scores, the next configuration's number (a
/// fixed sequence whatever the passes find, so that a resumed tune reads the same
/// configurations back), and what was reverted and why.
struct Ablating<'a, F> {
    vendor: &'a [(String, ParamValue)],
    spec: &'a xirang_fabric::tune::TuneSpec,
    eval: F,
    before: Vec<Unit>,
    kept: Vec<bool>,
    k_next: usize,
    current: Vec<Score>,
    current_k: usize,
    reverted: Vec<(String, Interval, String)>,
}

impl<F> Ablating<'_, F>
where
    F: FnMut(usize, &[(String, ParamValue)]) -> Result<Vec<Score>, TuneError>,
{
    /// The units `kept` marks, less unit `i`.
    fn without_unit(&self, i: usize, kept: &[bool]) -> Vec<Unit> {
        self.before
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i && kept[*j])
            .map(|(_, c)| c.clone())
            .collect()
    }

    /// Scores the vendor with `changes` as the next configuration: its number and scores.
    fn score_next(&mut self, changes: &[Unit]) -> Result<(usize, Vec<Score>), TuneError> {
        let k = self.k_next;
        self.k_next += 1;
        let without = (self.eval)(k, &with_changes(self.vendor, changes))?;
        Ok((k, without))
    }

    /// The interval of configuration `k`'s objective difference from the current one.
    fn cost(&self, without: &[Score], k: usize, paired_by: fn(&[Score], &[Score]) -> Vec<f64>) -> Interval {
        mean_interval(
            &paired_by(without, &self.current),
            mix(self.spec.seed, (k as u64) ^ 0xab1a_7e00),
        )
    }

    /// Whether a configuration keeps every constraint and goes no further past a guardrail
    /// than the current one (a guardrail it already broke is the repair's).
    fn allowed(&self, without: &[Score]) -> bool {
        without.iter().all(|s| s.violation.is_none())
            && guardrail_excess(without, self.spec) <= guardrail_excess(&self.current, self.spec)
    }

    /// Makes configuration `k` (unit `i` reverted) the current one.
    fn revert(&mut self, i: usize, cost: Interval, why: String, without: Vec<Score>, k: usize) {
        self.kept[i] = false;
        self.reverted.push((self.before[i].0.clone(), cost, why));
        self.current = without;
        self.current_k = k;
    }

    /// Each change reverted alone, the rest kept: what reverting it costs, cheapest first
    /// (ties to the earlier change), the order the elimination tries them in.
    fn each_reverted_alone(&mut self) -> Result<Vec<(usize, Interval)>, TuneError> {
        let mut alone: Vec<(usize, Interval)> = Vec::new();
        for i in 0..self.before.len() {
            let rest = self.without_unit(i, &vec![true; self.before.len()]);
            let (k, without) = self.score_next(&rest)?;
            alone.push((i, self.cost(&without, k, paired)));
        }
        alone.sort_by(|a, b| a.1.mean.total_cmp(&b.1.mean).then(a.0.cmp(&b.0)));
        Ok(alone)
    }

    /// The elimination: each change, in `alone`'s order, reverted for good when the
    /// result is not significantly worse and allowed.
    fn eliminate(&mut self, alone: Vec<(usize, Interval)>) -> Result<(), TuneError> {
        for (i, cost_alone) in alone {
            // Significantly worse to revert even alone: it stays.
            if cost_alone.above_zero() {
                continue;
            }
            let rest = self.without_unit(i, &self.kept);
            let (k, without) = self.score_next(&rest)?;
            let cost = self.cost(&without, k, paired);
            // A revert may not break a constraint or a guardrail the configuration kept (a
            // guardrail it already broke is the repair's below).
            if !cost.above_zero() && self.allowed(&without) {
                self.revert(
                    i,
                    cost,
                    "not significantly worse to revert".to_string(),
                    without,
                    k,
                );
            }
        }
        Ok(())
    }

    /// Repair: while the configuration is past a guardrail on these seeds, revert the kept
    /// change whose revert brings it back the most (the search judged the guardrails on
    /// its own seeds; these may disagree).
    fn repair(&mut self) -> Result<(), TuneError> {
        for _ in 0..REPAIR_STEPS {
            let excess = guardrail_excess(&self.current, self.spec);
            if excess <= 0.0 {
                break;
            }
            let mut best_fix: Option<(usize, f64, Vec<Score>, usize)> = None;
            let kept: Vec<usize> = (0..self.before.len()).filter(|i| self.kept[*i]).collect();
            for i in kept {
                let rest = self.without_unit(i, &self.kept);
                let (k, without) = self.score_next(&rest)?;
                let e = guardrail_excess(&without, self.spec);
                if without.iter().all(|s| s.violation.is_none()) && best_fix.as_ref().is_none_or(|b| e < b.1)
                {
                    best_fix = Some((i, e, without, k));
                }
            }
            match best_fix {
                Some((i, e, without, k)) if e < excess => {
                    let why = format!(
                        "over its guardrails: {}",
                        guardrail_broken(&self.current, self.spec).unwrap_or_else(|| "a class".into())
                    );
                    let cost = self.cost(&without, k, paired);
                    self.revert(i, cost, why, without, k);
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// What each kept change is worth in the final configuration; a change that the others
    /// have made redundant (its revert no longer significantly worse, and allowed) is
    /// reverted and the rest judged again, until every kept change earns its place.
    fn contributions(&mut self) -> Result<Vec<Contribution>, TuneError> {
        loop {
            let changes: Vec<(usize, Unit)> = self
                .before
                .iter()
                .enumerate()
                .filter(|(i, _)| self.kept[*i])
                .map(|(i, c)| (i, c.clone()))
                .collect();
            let mut judged: Vec<(usize, Contribution, Vec<Score>, usize, bool)> = Vec::new();
            for (i, (name, settings)) in &changes {
                let rest: Vec<_> = changes
                    .iter()
                    .filter(|(j, _)| j != i)
                    .map(|(_, c)| c.clone())
                    .collect();
                let (k, without) = self.score_next(&rest)?;
                let allowed = self.allowed(&without);
                let revert_breaks = without.iter().find_map(|s| s.violation.clone()).or_else(|| {
                    (!allowed)
                        .then(|| guardrail_broken(&without, self.spec))
                        .flatten()
                });
                let cost = if revert_breaks.is_some() {
                    self.cost(&without, k, paired_relative)
                } else {
                    self.cost(&without, k, paired)
                };
                let c = Contribution {
                    name: name.clone(),
                    settings: settings
                        .iter()
                        .map(|(n, v)| {
                            (
                                n.clone(),
                                vendor_value(self.vendor, n).unwrap_or_else(|| v.clone()),
                                v.clone(),
                            )
                        })
                        .collect(),
                    without: cost,
                    needed_for_guardrail: !allowed,
                    revert_breaks,
                };
                judged.push((*i, c, without, k, allowed));
            }
            let weakest = judged
                .iter()
                .enumerate()
                .filter(|(_, j)| j.4 && !j.1.without.above_zero())
                .min_by(|a, b| a.1.1.without.mean.total_cmp(&b.1.1.without.mean))
                .map(|(n, _)| n);
            match weakest {
                Some(n) => {
                    let (i, c, without, k, _) = judged.swap_remove(n);
                    self.kept[i] = false;
                    self.reverted
                        .push((c.name, c.without, "not significantly worse to revert".to_string()));
                    self.current = without;
                    self.current_k = k;
                }
                None => return Ok(judged.into_iter().map(|j| j.1).collect()),
            }
        }
    }
}

/// Runs a whole tune: baselines, brackets, held-out evaluation.
pub fn tune(
    eval: &Evaluator<'_>,
    space: &[Param],
    baselines: &[Baseline],
    store: Store,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<TuneResult, TuneError> {
    tune_with(eval, space, baselines, store, progress, &Threads)
}

/// The run seeds of a tune, each set derived from the scenario's run seed.
#[derive(Debug, Clone, PartialEq)]
struct Seeds {
    /// The search's seeds.
    search: Vec<u64>,
    /// Successive halving's first round: the first [`FIRST_ROUND_SEEDS`] search seeds.
    early: Vec<u64>,
    /// Its second round: half the search seeds (at least the first round's).
    half: Vec<u64>,
    /// The held-out seeds the report's figures come from.
    held: Vec<u64>,
    /// The validation seeds the ablation judges on (neither chooses nor reports).
    validation: Vec<u64>,
    /// The held-out seeds the sensitivity sweeps run on.
    sweep: Vec<u64>,
}

impl Seeds {
    fn of(base: u64, spec: &xirang_fabric::tune::TuneSpec) -> Seeds {
        let from = |offset: u64, n: u32| -> Vec<u64> {
            (0..u64::from(n.max(1))).map(|i| base + offset + i).collect()
        };
        let search = from(0, spec.search_seeds);
        let early: Vec<u64> = search.iter().copied().take(FIRST_ROUND_SEEDS).collect();
        let half = search
            .iter()
            .copied()
            .take(search.len().div_ceil(2).max(early.len()))
            .collect();
        let held = from(HELD_OUT_SEED_OFFSET, spec.held_out_seeds);
        let sweep = held
            .iter()
            .copied()
            .take(spec.sensitivity_seeds as usize)
            .collect();
        Seeds {
            validation: from(VALIDATION_SEED_OFFSET, spec.held_out_seeds),
            search,
            early,
            half,
            held,
            sweep,
        }
    }

    /// Held-out seed number `i` (the set grows while a gain is unclear).
    fn held_out(base: u64, i: usize) -> u64 {
        base + HELD_OUT_SEED_OFFSET + i as u64
    }
}

/// The sizes of successive halving's three rounds for a bracket of `n` candidates: all
/// of them, the best quarter, the best sixteenth (each at least one).
fn round_sizes(n: usize) -> [usize; 3] {
    [n, n.div_ceil(ETA), n.div_ceil(ETA * ETA)]
}

/// The `keep` best of `scored` (a candidate's index and objective): lowest objective
/// first, ties to the lower index, so the choice never depends on run order.
fn best_of(scored: &[(usize, f64)], keep: usize) -> Vec<usize> {
    let mut s = scored.to_vec();
    s.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    s.into_iter().take(keep).map(|x| x.0).collect()
}

/// Proposes bracket `bracket`'s `n` candidates, numbered from `first`. The first bracket
/// spreads them over the whole space (a Latin hypercube: each parameter's range cut into
/// `n` strata, one candidate per stratum, the strata shuffled independently per
/// parameter), since TPE needs observations across the space before its densities mean
/// anything; later brackets ask each parameter's TPE model. Every random stream derives
/// from `seed`, the candidate's number and the parameter's, never from run order.
fn propose(
    space: &[Param],
    models: &mut [Model],
    seed: u64,
    bracket: usize,
    first: i64,
    n: usize,
) -> Vec<(i64, Vec<(String, ParamValue)>)> {
    let strata: Vec<Vec<usize>> = (0..space.len())
        .map(|j| {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(mix(mix(seed, u64::MAX), j as u64));
            shuffled(n, &mut rng)
        })
        .collect();
    (0..n as i64)
        .map(|k| {
            let id = first + k;
            let values = space
                .iter()
                .zip(models.iter_mut())
                .enumerate()
                .map(|(j, (p, m))| {
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(mix(mix(seed, id as u64), j as u64));
                    let v = if bracket == 0 {
                        let u = (strata[j][k as usize] as f64 + unit(&mut rng)) / n as f64;
                        p.at(u)
                    } else {
                        m.ask(&mut rng)
                    };
                    (p.name.clone(), p.normalize(&v))
                })
                .collect();
            (id, values)
        })
        .collect()
}

/// The recommendation's candidate: among those that passed every round without breaking
/// a constraint, the one whose mean plus one standard error is lowest, and only if that
/// pessimistic figure still beats the vendor (1.0). Choosing by the plain mean would
/// favour whichever candidate the search seeds happened to flatter (a winner's curse that
/// the held-out seeds then expose).
fn select(candidates: &[Candidate]) -> Option<i64> {
    candidates
        .iter()
        .filter(|c| c.violation.is_none() && c.bound.is_some_and(|b| b < 1.0))
        .min_by(|a, b| {
            a.bound
                .unwrap_or(f64::MAX)
                .total_cmp(&b.bound.unwrap_or(f64::MAX))
                .then(a.id.cmp(&b.id))
        })
        .map(|c| c.id)
}

/// The verdict from what was tested on the held-out seeds.
fn verdict_of(tested: bool, gain: Option<&Interval>, guardrails: &[Guardrail], ablated: bool) -> Verdict {
    match (tested, gain) {
        (true, Some(g)) => match guardrails.iter().find(|g| g.margin < 0.0) {
            Some(b) => Verdict::GuardrailBroken {
                class: b.class.clone(),
            },
            None if !g.above_zero() => Verdict::NoSignificantGain,
            None => Verdict::Recommended,
        },
        _ if ablated => Verdict::NoChangeEarnsItsPlace,
        _ => Verdict::NothingBeatTheVendor,
    }
}

/// The runs of one tune: the trial log (read back at the start, appended as runs end),
/// the runner, and progress. Every batch of simulations goes through [`Runs::run`].
struct Runs<'a> {
    eval: &'a Evaluator<'a>,
    runner: &'a dyn Runner,
    progress: &'a (dyn Fn(Progress) + Sync),
    /// Every run known: read back from the log or run here.
    cache: Mutex<HashMap<EvalKey, RunMetrics>>,
    store: Mutex<Store>,
    /// Runs read back from the log at the start.
    read_back: u64,
    /// Runs simulated here.
    ran: Mutex<u64>,
    /// Runs done or read back, for progress.
    done: Mutex<u64>,
    /// The best feasible full-round objective so far, for progress.
    best_so_far: Mutex<Option<f64>>,
    /// Estimated runs of the whole tune, for progress.
    total: u64,
}

impl<'a> Runs<'a> {
    fn new(
        eval: &'a Evaluator<'a>,
        runner: &'a dyn Runner,
        progress: &'a (dyn Fn(Progress) + Sync),
        store: Store,
        total: u64,
    ) -> Result<Runs<'a>, TuneError> {
        let cache = store.load()?;
        Ok(Runs {
            eval,
            runner,
            progress,
            read_back: cache.len() as u64,
            cache: Mutex::new(cache),
            store: Mutex::new(store),
            ran: Mutex::new(0),
            done: Mutex::new(0),
            best_so_far: Mutex::new(None),
            total,
        })
    }

    /// Runs every job not in the log, in parallel; returns every job's metrics.
    fn run(&self, jobs: Vec<Job>) -> Result<HashMap<EvalKey, RunMetrics>, TuneError> {
        let mut out = HashMap::new();
        let mut todo = Vec::new();
        {
            let c = self.cache.lock().expect("unpoisoned");
            for j in jobs {
                match c.get(&j.key) {
                    Some(m) => {
                        out.insert(j.key, m.clone());
                    }
                    None => todo.push(j),
                }
            }
        }
        *self.done.lock().expect("unpoisoned") += out.len() as u64;
        let run_jobs: Vec<RunJob> = todo
            .iter()
            .map(|j| RunJob {
                config: j.config.clone(),
                seed: j.key.2,
                cap_us: j.cap_us,
            })
            .collect();
        // The closure runs on the runner's threads: it takes the shared state, not `self`
        // (whose runner need not be Sync).
        let (store, ran, done, best, progress, total) = (
            &self.store,
            &self.ran,
            &self.done,
            &self.best_so_far,
            self.progress,
            self.total,
        );
        let on_done = |i: usize, m: &RunMetrics, seconds: f64| -> Result<(), StoreError> {
            let j = &todo[i];
            store
                .lock()
                .expect("unpoisoned")
                .insert(j.key, &j.params, m, seconds)?;
            *ran.lock().expect("unpoisoned") += 1;
            let d = {
                let mut d = done.lock().expect("unpoisoned");
                *d += 1;
                *d
            };
            progress(Progress {
                done: d,
                total,
                best: *best.lock().expect("unpoisoned"),
            });
            Ok(())
        };
        let results = self.runner.run(self.eval, &run_jobs, &on_done)?;
        let mut c = self.cache.lock().expect("unpoisoned");
        for (j, m) in todo.iter().zip(results) {
            c.insert(j.key, m.clone());
            out.insert(j.key, m);
        }
        Ok(out)
    }

    /// A run already done (or read back).
    fn get(&self, key: &EvalKey) -> Option<RunMetrics> {
        self.cache.lock().expect("unpoisoned").get(key).cloned()
    }

    /// A feasible full-round objective, for progress.
    fn note_best(&self, m: f64) {
        let mut b = self.best_so_far.lock().expect("unpoisoned");
        *b = Some(b.map_or(m, |x: f64| x.min(m)));
    }
}

/// One tune in progress: the scenario, its seeds, the vendor's reference runs every
/// score is paired with, and the runs.
struct Search<'a> {
    eval: &'a Evaluator<'a>,
    spec: &'a xirang_fabric::tune::TuneSpec,
    base_config: &'a FabricConfig,
    tiers: Vec<xirang_fabric::model::Tier>,
    base_seed: u64,
    seeds: Seeds,
    vendor: &'a FabricConfig,
    runs: Runs<'a>,
    /// The vendor's runs, uncapped, by seed: what every score is relative to.
    reference: HashMap<u64, RunMetrics>,
}

/// Job parameters as the trial log records them.
fn params_json(values: &[(String, ParamValue)]) -> String {
    serde_json::to_string(values).expect("values serialize")
}

impl Search<'_> {
    fn config_of(&self, id: i64, values: &[(String, ParamValue)]) -> Result<FabricConfig, TuneError> {
        apply(self.base_config, &self.tiers, values).map_err(|e| TuneError::Apply(id, e))
    }

    /// A run's simulated-time cap on `seed`: a multiple of the vendor's time there.
    fn cap(&self, seed: u64) -> Option<f64> {
        self.reference.get(&seed).map(|m| m.sim_us * TIME_CAP_FACTOR)
    }

    /// Runs the vendor, uncapped, on seeds that have no reference yet.
    fn add_references(&mut self, seeds: &[u64]) -> Result<(), TuneError> {
        let jobs = seeds
            .iter()
            .filter(|s| !self.reference.contains_key(s))
            .map(|s| Job {
                key: (-1, FULL, *s),
                config: self.vendor.clone(),
                params: "\"vendor\"".into(),
                cap_us: None,
            })
            .collect();
        for ((_, _, s), m) in self.runs.run(jobs)? {
            self.reference.insert(s, m);
        }
        Ok(())
    }

    /// Scores pair a run with the vendor's on the same seed: the same request arrivals
    /// and, with the same QP count, the same ECMP placement, so the ratio shows what the
    /// settings changed rather than the seed's luck.
    fn score_of(&self, m: &RunMetrics, seed: u64) -> Score {
        self.eval.score(m, &self.reference[&seed])
    }

    /// The jobs of configuration `id` on `seeds`, capped.
    fn jobs(&self, id: i64, values: &str, config: &FabricConfig, seeds: &[u64]) -> Vec<Job> {
        seeds
            .iter()
            .map(|s| Job {
                key: (id, FULL, *s),
                config: config.clone(),
                params: values.to_string(),
                cap_us: self.cap(*s),
            })
            .collect()
    }

    /// Configuration `id` run (or read back) on `seeds`, scored.
    fn scores_on(
        &self,
        id: i64,
        values: &[(String, ParamValue)],
        seeds: &[u64],
    ) -> Result<Vec<Score>, TuneError> {
        let config = self.config_of(id, values)?;
        let got = self
            .runs
            .run(self.jobs(id, &params_json(values), &config, seeds))?;
        Ok(self.seed_scores(id, seeds, &got))
    }

    fn seed_scores(&self, id: i64, seeds: &[u64], got: &HashMap<EvalKey, RunMetrics>) -> Vec<Score> {
        seeds
            .iter()
            .map(|s| self.score_of(&got[&(id, FULL, *s)], *s))
            .collect()
    }

    /// The mean objective of `id` on `seeds`, a guardrail's excess added: in the early
    /// rounds a guardrail is a penalty that steers the proposals away from hurting a
    /// class; the last round makes it hard. With the first constraint a seed broke.
    fn mean_score(
        &self,
        id: i64,
        seeds: &[u64],
        got: &HashMap<EvalKey, RunMetrics>,
    ) -> (f64, Option<String>) {
        let scores = self.seed_scores(id, seeds, got);
        let mean = scores.iter().map(|s| s.objective).sum::<f64>() / scores.len() as f64;
        (
            mean + guardrail_excess(&scores, self.spec),
            scores.iter().find_map(|s| s.violation.clone()),
        )
    }

    /// The baselines other than the vendor on the search and held-out seeds; each
    /// baseline's search objective, and each told to the models as a first observation.
    fn baselines(
        &self,
        baselines: &[Baseline],
        models: &mut [Model],
        space: &[Param],
    ) -> Result<Vec<BaselineResult>, TuneError> {
        let mut jobs = Vec::new();
        for (i, b) in baselines.iter().enumerate().skip(1) {
            let id = -(i as i64) - 1;
            let both: Vec<u64> = self
                .seeds
                .search
                .iter()
                .chain(&self.seeds.held)
                .copied()
                .collect();
            jobs.extend(self.jobs(id, &format!("\"{}\"", b.name), &b.config, &both));
        }
        let mut got = self.runs.run(jobs)?;
        for s in self
            .seeds
            .search
            .iter()
            .chain(&self.seeds.held)
            .chain(&self.seeds.validation)
        {
            got.insert((-1, FULL, *s), self.reference[s].clone());
        }
        let mut out = Vec::new();
        for (i, b) in baselines.iter().enumerate() {
            let id = -(i as i64) - 1;
            let (first, _) = self.mean_score(id, &self.seeds.early, &got);
            let full = mean(
                &self
                    .seed_scores(id, &self.seeds.search, &got)
                    .iter()
                    .map(|s| s.relative)
                    .collect::<Vec<_>>(),
            );
            for (p, m) in space.iter().zip(models.iter_mut()) {
                if let Some(v) = value_of(&b.config, &self.tiers, &p.name) {
                    m.tell(p, &v, first);
                }
            }
            out.push(BaselineResult {
                name: b.name.to_string(),
                description: b.description.to_string(),
                objective: full,
            });
        }
        Ok(out)
    }

    /// One bracket of successive halving over `proposed`: every candidate on the first
    /// round's seeds (each told to the models), the best quarter on half the search seeds,
    /// the best of those on all of them (a class past its guardrail there breaks a
    /// constraint).
    fn bracket(
        &self,
        bracket: usize,
        proposed: &[(i64, Vec<(String, ParamValue)>)],
        space: &[Param],
        models: &mut [Model],
    ) -> Result<Vec<Candidate>, TuneError> {
        let configs = proposed
            .iter()
            .map(|(id, values)| self.config_of(*id, values))
            .collect::<Result<Vec<_>, _>>()?;
        let round = |ids: &[usize], seeds: &[u64]| -> Result<HashMap<EvalKey, RunMetrics>, TuneError> {
            let mut jobs = Vec::new();
            for &i in ids {
                let (id, values) = &proposed[i];
                jobs.extend(self.jobs(*id, &params_json(values), &configs[i], seeds));
            }
            self.runs.run(jobs)
        };
        let [_, second, third] = round_sizes(proposed.len());
        let all: Vec<usize> = (0..proposed.len()).collect();
        let r1 = round(&all, &self.seeds.early)?;
        let mut records = Vec::with_capacity(proposed.len());
        let mut scored = Vec::with_capacity(proposed.len());
        for &i in &all {
            let (id, values) = &proposed[i];
            let (obj, violation) = self.mean_score(*id, &self.seeds.early, &r1);
            scored.push((i, obj));
            records.push(Candidate {
                id: *id,
                bracket,
                values: values.clone(),
                objectives: vec![obj],
                violation,
                bound: None,
            });
        }
        for &(i, obj) in &scored {
            for (p, m) in space.iter().zip(models.iter_mut()) {
                if let Some((_, v)) = proposed[i].1.iter().find(|(k, _)| *k == p.name) {
                    m.tell(p, v, obj);
                }
            }
        }
        let keep2 = best_of(&scored, second);
        let r2 = round(&keep2, &self.seeds.half)?;
        let mut scored2 = Vec::with_capacity(keep2.len());
        for &i in &keep2 {
            let (obj, violation) = self.mean_score(proposed[i].0, &self.seeds.half, &r2);
            records[i].objectives.push(obj);
            records[i].violation = violation;
            scored2.push((i, obj));
        }
        let keep3 = best_of(&scored2, third);
        let r3 = round(&keep3, &self.seeds.search)?;
        for &i in &keep3 {
            let scores = self.seed_scores(proposed[i].0, &self.seeds.search, &r3);
            let objectives: Vec<f64> = scores.iter().map(|s| s.objective).collect();
            let m = mean(&objectives);
            let violation = scores
                .iter()
                .find_map(|s| s.violation.clone())
                .or_else(|| guardrail_broken(&scores, self.spec));
            records[i].objectives.push(m);
            records[i].bound = Some(m + standard_error(&objectives));
            if violation.is_none() {
                self.runs.note_best(m);
            }
            records[i].violation = violation;
        }
        Ok(records)
    }

    /// The tested recommendation on the held-out seeds, with seeds added (half a set at a
    /// time, up to [`HELD_OUT_GROWTH_CAP`] sets) while its gain is unclear: its scores and
    /// the seeds they are on.
    fn held_out(
        &mut self,
        id: i64,
        values: &[(String, ParamValue)],
    ) -> Result<(Vec<Score>, Vec<u64>), TuneError> {
        let mut held = self.seeds.held.clone();
        let mut scores = self.scores_on(id, values, &held)?;
        let batch = self.seeds.held.len().div_ceil(2).max(1);
        loop {
            let g = gain_interval(&scores, self.spec.seed);
            if !(g.lo <= 0.0 && g.half_width() > NARROW_ENOUGH)
                || held.len() + batch > HELD_OUT_GROWTH_CAP * self.seeds.held.len()
            {
                break;
            }
            let more: Vec<u64> = (held.len()..held.len() + batch)
                .map(|i| Seeds::held_out(self.base_seed, i))
                .collect();
            // The vendor on the new seeds, uncapped, before anything is scored on them.
            self.add_references(&more)?;
            scores.extend(self.scores_on(id, values, &more)?);
            held.extend(more);
        }
        Ok((scores, held))
    }

    /// Sensitivity: each kept setting and every tier's ECN thresholds swept one at a time
    /// around what is recommended, all points run together on the sweep seeds. Returns
    /// the sweeps and the runs they asked for.
    fn sensitivity(
        &self,
        space: &[Param],
        recommendation: &[(String, ParamValue)],
        recommended_id: i64,
        kept_names: &[&str],
    ) -> Result<(Vec<Sweep>, u64), TuneError> {
        let swept: Vec<(&Param, &'static str)> = space
            .iter()
            .filter_map(|p| {
                if kept_names.contains(&p.name.as_str()) {
                    Some((p, "kept"))
                } else if p.name.starts_with("ecn.")
                    && (p.name.ends_with(".kmin_bytes") || p.name.ends_with(".kmax_ratio"))
                {
                    Some((p, "ecn"))
                } else {
                    None
                }
            })
            .collect();
        let seeds = &self.seeds.sweep;
        let mut sweep_points: Vec<(usize, ParamValue, i64)> = Vec::new();
        let mut jobs = Vec::new();
        if !seeds.is_empty() {
            for (i, (p, _)) in swept.iter().enumerate() {
                let Some(center) = recommendation.iter().find(|(n, _)| *n == p.name).map(|(_, v)| v) else {
                    continue;
                };
                for v in sweep_values(p, center) {
                    if v == *center {
                        sweep_points.push((i, v, recommended_id));
                        continue;
                    }
                    let id = SWEEP_ID_BASE + sweep_points.len() as i64;
                    let mut values = recommendation.to_vec();
                    set_value(&mut values, &p.name, v.clone());
                    let config = self.config_of(id, &values)?;
                    jobs.extend(self.jobs(id, &params_json(&values), &config, seeds));
                    sweep_points.push((i, v, id));
                }
            }
        }
        let run_count = jobs.len() as u64;
        let got = self.runs.run(jobs)?;
        let mut sweeps: Vec<Sweep> = swept
            .iter()
            .map(|(p, why)| Sweep {
                name: p.name.clone(),
                at: recommendation
                    .iter()
                    .find(|(n, _)| *n == p.name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or(ParamValue::Number(0.0)),
                why,
                points: Vec::new(),
            })
            .collect();
        for (i, value, id) in sweep_points {
            let scores: Vec<Score> = seeds
                .iter()
                .map(|s| {
                    let m = got
                        .get(&(id, FULL, *s))
                        .cloned()
                        .or_else(|| self.runs.get(&(id, FULL, *s)))
                        .expect("the recommendation ran on every held-out seed");
                    self.score_of(&m, *s)
                })
                .collect();
            let n = scores.len() as f64;
            let mut classes: BTreeMap<String, f64> = BTreeMap::new();
            for sc in &scores {
                for (c, r) in &sc.classes {
                    *classes.entry(c.clone()).or_default() += r / n;
                }
            }
            sweeps[i].points.push(SweepPoint {
                value,
                objective: scores.iter().map(|s| s.relative).sum::<f64>() / n,
                classes,
                violation: scores.iter().find_map(|s| s.violation.clone()),
            });
        }
        sweeps.retain(|s| !s.points.is_empty());
        Ok((sweeps, run_count))
    }

    /// The held-out table: the tuned configuration (on its grown seed set, with the scores
    /// it was judged by) and every baseline (on the held-out seeds).
    fn held_out_table(&self, baselines: &[Baseline], tuned: Option<(i64, &[Score], &[u64])>) -> Vec<HeldOut> {
        let tuned_entry = tuned.map(|(id, _, _)| ("tuned".to_string(), id));
        let entries = tuned_entry.into_iter().chain(
            baselines
                .iter()
                .enumerate()
                .map(|(i, b)| (b.name.to_string(), -(i as i64) - 1)),
        );
        entries
            .map(|(name, id)| {
                let is_tuned = tuned.is_some_and(|t| t.0 == id);
                let seeds: &[u64] = match tuned {
                    Some((_, _, held)) if is_tuned => held,
                    _ => &self.seeds.held,
                };
                let mut h = HeldOut {
                    name,
                    objectives: Vec::new(),
                    classes: BTreeMap::new(),
                    violations: Vec::new(),
                    metrics: Vec::new(),
                };
                for (k, s) in seeds.iter().enumerate() {
                    let m = self
                        .runs
                        .get(&(id, FULL, *s))
                        .expect("every held-out run was done");
                    let sc = match tuned {
                        Some((_, scores, _)) if is_tuned => scores[k].clone(),
                        _ => self.score_of(&m, *s),
                    };
                    h.objectives.push(sc.relative);
                    for (c, r) in &sc.classes {
                        *h.classes.entry(c.clone()).or_default() += r / seeds.len() as f64;
                    }
                    if let Some(v) = sc.violation {
                        h.violations.push(format!("seed {s}: {v}"));
                    }
                    h.metrics.push(m);
                }
                h
            })
            .collect()
    }
}

impl Search<'_> {
    /// The search proper: brackets of candidates proposed together and judged by
    /// successive halving, until the budget of candidates is spent or, checked between
    /// brackets, the time budget. Every candidate, and why the search stopped early if it
    /// did.
    fn search(
        &self,
        plan: &Plan,
        space: &[Param],
        models: &mut [Model],
        t0: Instant,
    ) -> Result<(Vec<Candidate>, Option<String>), TuneError> {
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut stopped: Option<String> = None;
        for bracket in 0..plan.brackets {
            if bracket > 0
                && let Some(b) = self.spec.time_budget_s
                && t0.elapsed().as_secs_f64() >= b
            {
                stopped = Some(format!(
                    "the search stopped after {bracket} of {} brackets ({} candidates): its {} time budget was spent",
                    plan.brackets,
                    candidates.len(),
                    if b < 1.0 {
                        format!("{:.0} ms", b * 1e3)
                    } else {
                        format!("{b:.0} s")
                    }
                ));
                break;
            }
            let n = plan.bracket_size.min(plan.budget - bracket * plan.bracket_size);
            let proposed = propose(space, models, self.spec.seed, bracket, candidates.len() as i64, n);
            candidates.extend(self.bracket(bracket, &proposed, space, models)?);
        }
        Ok((candidates, stopped))
    }

    /// Which of the best candidate's changes earn their place: backward elimination on
    /// the validation seeds, which neither chose the candidate nor report on it (no best
    /// candidate: no ablation). With the runs it needed, the validation seeds' vendor
    /// runs included, whether run or read back.
    fn ablation(
        &self,
        best: Option<i64>,
        candidates: &[Candidate],
        vendor_values: &[(String, ParamValue)],
    ) -> Result<(Option<(usize, Ablation)>, u64), TuneError> {
        // The chosen candidate's values, settings its algorithms do not use set back to the
        // vendor's.
        let chosen: Vec<(String, ParamValue)> = match best {
            Some(id) => crate::space::effective(
                &candidates
                    .iter()
                    .find(|c| c.id == id)
                    .expect("best exists")
                    .values,
                vendor_values,
            ),
            None => vendor_values.to_vec(),
        };
        let ablated_configs = std::cell::Cell::new(0u64);
        let ablation = match best {
            Some(_) => Some(ablate(&chosen, vendor_values, self.spec, |k, values| {
                ablated_configs.set(ablated_configs.get() + 1);
                self.scores_on(ABLATION_ID_BASE + k as i64, values, &self.seeds.validation)
            })?),
            None => None,
        };
        let runs = (ablated_configs.get() + 1) * self.seeds.validation.len() as u64;
        Ok((ablation, runs))
    }
}

/// [`tune`] with its simulations run by `runner`; the result is the same whatever runs
/// them.
///
/// # Errors
/// As [`tune`], and a runner's failure.
pub fn tune_with(
    eval: &Evaluator<'_>,
    space: &[Param],
    baselines: &[Baseline],
    store: Store,
    progress: &(dyn Fn(Progress) + Sync),
    runner: &dyn Runner,
) -> Result<TuneResult, TuneError> {
    let t0 = Instant::now();
    let loaded = eval.loaded();
    let spec = &loaded.scenario.tune;
    let tiers = loaded.fabric.tiers();
    let base_seed = loaded.scenario.run.seed;
    let seeds = Seeds::of(base_seed, spec);
    let plan = Plan::of(spec, space, baselines, &seeds, tiers.len());
    let vendor = &baselines[0].config;
    let mut s = Search {
        eval,
        spec,
        base_config: &loaded.scenario.config,
        tiers,
        base_seed,
        vendor,
        runs: Runs::new(eval, runner, progress, store, plan.total)?,
        reference: HashMap::new(),
        seeds,
    };
    // The vendor reference on every seed, uncapped.
    let all_seeds: Vec<u64> = s
        .seeds
        .search
        .iter()
        .chain(&s.seeds.held)
        .chain(&s.seeds.validation)
        .copied()
        .collect();
    s.add_references(&all_seeds)?;
    // The other baselines on every level; they also seed the models.
    let mut models: Vec<Model> = space.iter().map(Model::new).collect();
    let baseline_results = s.baselines(baselines, &mut models, space)?;
    let (candidates, stopped) = s.search(&plan, space, &mut models, t0)?;

    let best = select(&candidates);
    let vendor_values: Vec<(String, ParamValue)> = space
        .iter()
        .filter_map(|p| value_of(vendor, &s.tiers, &p.name).map(|v| (p.name.clone(), v)))
        .collect();
    let (ablation, ablation_runs) = s.ablation(best, &candidates, &vendor_values)?;
    let tested = tested_of(ablation.as_ref(), &vendor_values);
    let ablation = ablation.map(|a| a.1);

    // Held-out seeds: the tested recommendation, with seeds added while its gain is
    // unclear, and the baselines.
    let (tested_scores, held) = match &tested {
        Some((id, values)) => s.held_out(*id, values)?,
        None => (Vec::new(), s.seeds.held.clone()),
    };
    let gain = tested.as_ref().map(|_| gain_interval(&tested_scores, spec.seed));
    let guardrails: Vec<Guardrail> = if tested.is_some() {
        guardrails_of(eval.weights.keys(), &tested_scores, spec)
    } else {
        Vec::new()
    };
    let verdict = verdict_of(tested.is_some(), gain.as_ref(), &guardrails, ablation.is_some());
    let (recommendation, config, recommended_id) = match (&verdict, &tested) {
        (Verdict::Recommended, Some((id, values))) => {
            let values = crate::space::effective(values, &vendor_values);
            let config = s.config_of(*id, &values)?;
            (values, config, *id)
        }
        _ => (vendor_values.clone(), vendor.clone(), -1),
    };
    let kept_names: Vec<&str> = match (&verdict, &ablation) {
        (Verdict::Recommended, Some(a)) => a
            .kept
            .iter()
            .flat_map(|c| c.settings.iter().map(|(n, _, _)| n.as_str()))
            .collect(),
        _ => Vec::new(),
    };
    let (sensitivity, sweep_run_count) =
        s.sensitivity(space, &recommendation, recommended_id, &kept_names)?;

    let held_out = s.held_out_table(
        baselines,
        tested
            .as_ref()
            .map(|(id, _)| (*id, tested_scores.as_slice(), held.as_slice())),
    );
    let (versus_baselines, versus_best_baseline) = versus(&held_out, spec.seed);
    let runs = (*s.runs.ran.lock().expect("unpoisoned"), s.runs.read_back);
    Ok(TuneResult {
        search_stopped: stopped,
        versus_best_baseline,
        versus_baselines,
        verdict,
        ablation,
        gain,
        guardrails,
        validation_seeds: s.seeds.validation.clone(),
        ablation_runs,
        sensitivity,
        sensitivity_seeds: s.seeds.sweep.clone(),
        sweep_runs: sweep_run_count,
        candidates,
        best,
        recommendation,
        config,
        vendor_values,
        baselines: baseline_results,
        held_out,
        seeds: (s.seeds.search.clone(), held),
        runs,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

/// How a tune spends its budget of candidates: brackets of a size, proposed together and
/// halved, and the runs the whole tune will need, for progress.
struct Plan {
    budget: usize,
    bracket_size: usize,
    brackets: usize,
    /// Estimated runs of the whole tune (the ablation's and the sweeps' depend on what
    /// they find).
    total: u64,
}

impl Plan {
    fn of(
        spec: &xirang_fabric::tune::TuneSpec,
        space: &[Param],
        baselines: &[Baseline],
        seeds: &Seeds,
        tiers: usize,
    ) -> Plan {
        let budget = spec.budget.max(1) as usize;
        let bracket_size = (budget / MIN_BRACKETS).clamp(MIN_BRACKET, MAX_BRACKET);
        let brackets = budget.div_ceil(bracket_size);
        // Runs per bracket: two seeds for all, half the seeds for a quarter, all seeds for the
        // best.
        let [_, second, third] = round_sizes(bracket_size);
        let per_bracket = bracket_size * seeds.early.len()
            + second * (seeds.half.len() - seeds.early.len())
            + third * (seeds.search.len() - seeds.half.len());
        // The ablation's runs depend on what it finds: about three configurations per changed
        // setting on the validation seeds.
        let ablation_estimate = 3 * space.len() * seeds.validation.len();
        // About six points per swept setting: two ECN settings per tier and a kept change or
        // two.
        let sweep_estimate = (2 * tiers + 2) * (SWEEP_OFFSETS.len() - 1) * seeds.sweep.len();
        let total = (baselines.len() * (seeds.search.len() + seeds.held.len())
            + seeds.validation.len()
            + brackets * per_bracket
            + ablation_estimate
            + seeds.held.len()
            + sweep_estimate) as u64;
        Plan {
            budget,
            bracket_size,
            brackets,
            total,
        }
    }
}

/// The tested recommendation: the ablated candidate with only the kept changes, numbered
/// as the ablation's final configuration (none kept: the vendor default stands, and there
/// is nothing to test).
fn tested_of(
    ablation: Option<&(usize, Ablation)>,
    vendor_values: &[(String, ParamValue)],
) -> Option<(i64, Vec<(String, ParamValue)>)> {
    ablation.filter(|a| !a.1.kept.is_empty()).map(|a| {
        let mut values = vendor_values.to_vec();
        for c in &a.1.kept {
            for (n, _, v) in &c.settings {
                set_value(&mut values, n, v.clone());
            }
        }
        (ABLATION_ID_BASE + a.0 as i64, values)
    })
}

/// Each class's guardrail on the tested recommendation's held-out `scores`: how much
/// worse than the vendor its metric got, against the class's tolerance.
fn guardrails_of<'a>(
    classes: impl Iterator<Item = &'a String>,
    scores: &[Score],
    spec: &xirang_fabric::tune::TuneSpec,
) -> Vec<Guardrail> {
    classes
        .map(|class| {
            let changes: Vec<f64> = scores
                .iter()
                .filter_map(|sc| sc.classes.get(class).map(|r| r - 1.0))
                .collect();
            let change = mean_interval(&changes, mix(spec.seed, class.len() as u64));
            let tolerance = spec.guardrail(class);
            Guardrail {
                class: class.clone(),
                tolerance,
                margin: tolerance - change.mean,
                change,
            }
        })
        .collect()
}

/// A baseline's name and the tuned configuration's advantage over it per seed.
type Versus = (String, Interval);

/// The tuned configuration against the baselines on the held-out seeds: its advantage
/// over each, and the best baseline's entry of that list (see
/// [`TuneResult::versus_best_baseline`]).
fn versus(held_out: &[HeldOut], seed: u64) -> (Vec<Versus>, Option<Versus>) {
    // Against the best baseline other than the vendor (lowest held-out mean): the tuned
    // configuration's advantage per seed, paired on the seeds both ran; without one, the
    // baseline's own gain over the vendor.
    let best_baseline = held_out
        .iter()
        .filter(|h| h.name != "tuned" && h.name != "vendor")
        .min_by(|a, b| a.mean().total_cmp(&b.mean()).then(a.name.cmp(&b.name)));
    // Against every baseline: the tuned configuration's advantage per seed (its objective
    // subtracted from the baseline's; +0.05: 5 % of the vendor's better), paired on the
    // seeds both ran.
    let versus_baselines: Vec<(String, Interval)> = match held_out.iter().find(|h| h.name == "tuned") {
        Some(t) => held_out
            .iter()
            .filter(|h| h.name != "tuned")
            .map(|b| {
                let diffs: Vec<f64> = b
                    .objectives
                    .iter()
                    .zip(&t.objectives)
                    .map(|(x, y)| x - y)
                    .collect();
                (b.name.clone(), mean_interval(&diffs, mix(seed, 0xba5e)))
            })
            .collect(),
        None => Vec::new(),
    };
    // The best baseline's entry of that list (one interval per comparison, wherever it is
    // shown); with nothing tested, the baseline's own gain over the vendor.
    let versus_best_baseline =
        best_baseline.map(|b| match versus_baselines.iter().find(|(n, _)| *n == b.name) {
            Some(v) => v.clone(),
            None => {
                let gains: Vec<f64> = b.objectives.iter().map(|x| 1.0 - x).collect();
                (b.name.clone(), mean_interval(&gains, mix(seed, 0xba5e)))
            }
        });
    (versus_baselines, versus_best_baseline)
}

#[cfg(test)]
mod tests {
    //! The ablation and the guardrails on a synthetic evaluator: each setting's effect is
    //! known, the seed noise deterministic.
    use super::*;

    fn num(x: f64) -> ParamValue {
        ParamValue::Number(x)
    }

    /// A score per seed: objective 1 minus the effects of the changed settings, plus seed
    /// noise of +-`noise`; class `inference` worse by `hurt` when `q` is changed.
    fn scores(values: &[(String, ParamValue)], effects: &[(&str, f64)], noise: f64, hurt: f64) -> Vec<Score> {
        let on = |n: &str| values.iter().any(|(k, v)| k == n && *v != num(0.0));
        (0..16)
            .map(|seed| {
                let jitter = noise * (((seed * 7919) % 13) as f64 / 6.0 - 1.0);
                let gain: f64 = effects.iter().filter(|(n, _)| on(n)).map(|(_, e)| e).sum();
                let objective = 1.0 - gain + jitter;
                let inference = 1.0 + if on("q") { hurt } else { 0.0 } + jitter;
                Score {
                    objective,
                    relative: objective,
                    classes: BTreeMap::from([
                        ("inference".to_string(), inference),
                        ("training".to_string(), objective),
                    ]),
                    violation: None,
                }
            })
            .collect()
    }

    fn values(names: &[&str], x: f64) -> Vec<(String, ParamValue)> {
        names.iter().map(|n| (n.to_string(), num(x))).collect()
    }

    fn number(name: &str, lo: f64, hi: f64) -> Param {
        Param {
            name: name.into(),
            domain: Domain::Number {
                lo,
                hi,
                log: false,
                step: None,
            },
            source: "test",
        }
    }

    #[test]
    fn the_first_bracket_puts_one_candidate_in_every_stratum_of_every_parameter() {
        let space = [number("a", 0.0, 1.0), number("b", 10.0, 20.0)];
        let mut models: Vec<Model> = space.iter().map(Model::new).collect();
        let n = 8;
        let got = propose(&space, &mut models, 42, 0, 100, n);
        assert_eq!(
            got.iter().map(|c| c.0).collect::<Vec<_>>(),
            (100..108).collect::<Vec<i64>>()
        );
        for (j, p) in space.iter().enumerate() {
            let Domain::Number { lo, hi, .. } = p.domain else {
                unreachable!()
            };
            let mut strata: Vec<usize> = got
                .iter()
                .map(|(_, v)| match &v[j].1 {
                    ParamValue::Number(x) => ((x - lo) / (hi - lo) * n as f64) as usize,
                    other => panic!("{other:?}"),
                })
                .collect();
            strata.sort();
            assert_eq!(strata, (0..n).collect::<Vec<_>>(), "{}", p.name);
        }
        // The same seed proposes the same candidates; another seed others.
        let mut again: Vec<Model> = space.iter().map(Model::new).collect();
        assert_eq!(propose(&space, &mut again, 42, 0, 100, n), got);
        assert_ne!(propose(&space, &mut again, 43, 0, 100, n), got);
    }

    #[test]
    fn later_brackets_ask_the_models_what_they_learned() {
        let space = [number("a", 0.0, 1.0)];
        let mut models: Vec<Model> = space.iter().map(Model::new).collect();
        // Low values good, high values bad.
        for i in 0..40 {
            let x = f64::from(i) / 40.0;
            models[0].tell(&space[0], &num(x), x);
        }
        let got = propose(&space, &mut models, 7, 1, 0, 16);
        let low = got
            .iter()
            .filter(|(_, v)| matches!(v[0].1, ParamValue::Number(x) if x < 0.5))
            .count();
        assert!(low >= 12, "{low} of 16 proposals in the good half: {got:?}");
    }

    #[test]
    fn halving_keeps_the_lowest_objectives_with_ties_to_the_lower_index() {
        assert_eq!(round_sizes(16), [16, 4, 1]);
        assert_eq!(round_sizes(5), [5, 2, 1]);
        assert_eq!(round_sizes(1), [1, 1, 1]);
        let scored = [(0, 0.9), (1, 0.5), (2, 0.7), (3, 0.5), (4, f64::NAN)];
        assert_eq!(best_of(&scored, 2), [1, 3]);
        assert_eq!(best_of(&scored, 3), [1, 3, 2]);
        assert_eq!(best_of(&scored, 9).len(), 5);
    }

    fn candidate(id: i64, bound: Option<f64>, violation: Option<&str>) -> Candidate {
        Candidate {
            id,
            bracket: 0,
            values: Vec::new(),
            objectives: Vec::new(),
            violation: violation.map(String::from),
            bound,
        }
    }

    #[test]
    fn selection_takes_the_lowest_pessimistic_bound_that_beats_the_vendor() {
        let c = [
            candidate(0, Some(0.80), Some("training past its guardrail")),
            candidate(1, None, None),
            candidate(2, Some(0.90), None),
            candidate(3, Some(0.85), None),
            candidate(4, Some(0.85), None),
        ];
        assert_eq!(
            select(&c),
            Some(3),
            "ties to the lower id; infeasible and unfinished ones never"
        );
        assert_eq!(
            select(&[candidate(0, Some(1.0), None)]),
            None,
            "not better than the vendor"
        );
        assert_eq!(select(&[]), None);
    }

    #[test]
    fn the_verdict_follows_the_held_out_gain_and_the_guardrails() {
        let gain = |lo: f64| Interval {
            mean: lo + 0.01,
            lo,
            hi: lo + 0.02,
            n: 16,
        };
        let rail = |margin: f64| Guardrail {
            class: "inference".into(),
            tolerance: 0.01,
            margin,
            change: gain(0.0),
        };
        assert_eq!(
            verdict_of(true, Some(&gain(0.02)), &[rail(0.005)], true),
            Verdict::Recommended
        );
        assert_eq!(
            verdict_of(true, Some(&gain(-0.01)), &[rail(0.005)], true),
            Verdict::NoSignificantGain
        );
        assert_eq!(
            verdict_of(true, Some(&gain(0.02)), &[rail(-0.001)], true),
            Verdict::GuardrailBroken {
                class: "inference".into()
            }
        );
        assert_eq!(verdict_of(false, None, &[], true), Verdict::NoChangeEarnsItsPlace);
        assert_eq!(verdict_of(false, None, &[], false), Verdict::NothingBeatTheVendor);
    }

    #[test]
    fn ablation_keeps_what_matters_and_reverts_the_rest() {
        let names = ["a", "b", "noop1", "noop2"];
        let effects = [("a", 0.05), ("b", 0.03)];
        let spec = xirang_fabric::tune::TuneSpec::default();
        let (_, ab) = ablate(&values(&names, 1.0), &values(&names, 0.0), &spec, |_, v| {
            Ok(scores(v, &effects, 0.01, 0.0))
        })
        .unwrap();
        let kept: Vec<&str> = ab.kept.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(kept, ["a", "b"]);
        assert!(
            ab.kept
                .iter()
                .all(|c| c.without.above_zero() && !c.needed_for_guardrail),
            "{ab:#?}"
        );
        let mut reverted: Vec<&str> = ab.reverted.iter().map(|r| r.0.as_str()).collect();
        reverted.sort();
        assert_eq!(reverted, ["noop1", "noop2"]);
        assert_eq!(ab.before.len(), 4);
    }

    #[test]
    fn a_change_that_hurts_a_guarded_class_is_reverted_even_when_it_pays() {
        // `q` gains 10 % overall but makes inference 5 % worse: past the 1 % guardrail.
        let names = ["a", "q"];
        let effects = [("a", 0.04), ("q", 0.10)];
        let spec = xirang_fabric::tune::TuneSpec::default();
        let (_, ab) = ablate(&values(&names, 1.0), &values(&names, 0.0), &spec, |_, v| {
            Ok(scores(v, &effects, 0.005, 0.05))
        })
        .unwrap();
        let kept: Vec<&str> = ab.kept.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(kept, ["a"]);
        let (name, cost, why) = &ab.reverted[0];
        assert_eq!(name, "q");
        assert!(
            why.starts_with("over its guardrails: guardrail inference: +4.9 % past its 1.0 % tolerance"),
            "{why}"
        );
        // Reverting it cost a significant 10 %: the guardrail, not the objective, decided.
        assert!(cost.above_zero() && (cost.mean - 0.10).abs() < 0.01, "{cost:?}");
    }

    #[test]
    fn a_class_congestion_control_is_reverted_as_one() {
        let changes = vec![
            (
                "classes.training.cc".to_string(),
                ParamValue::Choice("timely".into()),
            ),
            ("classes.training.timely.beta".to_string(), num(0.5)),
            ("ecn.leaf.pmax".to_string(), num(0.2)),
        ];
        let u = units(&changes);
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].0, "classes.training congestion control");
        assert_eq!(u[0].1.len(), 2);
        assert_eq!(u[1].0, "ecn.leaf.pmax");
    }

    #[test]
    fn guardrails_by_class_mean() {
        let mut spec = xirang_fabric::tune::TuneSpec::default();
        let sc = |inference: f64| Score {
            objective: 0.9,
            relative: 0.9,
            classes: BTreeMap::from([("inference".to_string(), inference)]),
            violation: None,
        };
        // Mean +1.5 % over two seeds: past the default 1 %.
        let s = [sc(1.0), sc(1.03)];
        assert!(
            guardrail_broken(&s, &spec)
                .unwrap()
                .starts_with("guardrail inference: +1.5 % past its 1.0 % tolerance")
        );
        assert!((guardrail_excess(&s, &spec) - 0.005).abs() < 1e-12);
        spec.guardrails.insert("inference".into(), 0.02);
        assert_eq!(guardrail_broken(&s, &spec), None);
        assert_eq!(guardrail_excess(&s, &spec), 0.0);
    }

    #[test]
    fn a_sweep_spans_the_range_around_the_value_at_the_device_resolution() {
        let p = Param {
            name: "ecn.leaf.kmin_bytes".into(),
            domain: Domain::Number {
                lo: 5_000.0,
                hi: 2_000_000.0,
                log: true,
                step: Some(1.0),
            },
            source: "test",
        };
        let v = sweep_values(&p, &num(100_000.0));
        let xs: Vec<f64> = v
            .iter()
            .map(|x| match x {
                ParamValue::Number(x) => *x,
                ParamValue::Choice(_) => panic!(),
            })
            .collect();
        assert_eq!(xs.len(), 7, "{xs:?}");
        assert_eq!(xs[3], 100_000.0);
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
        // A tenth of the log range is a factor of 400^0.1 = 1.82.
        assert!((xs[4] / xs[3] - 400f64.powf(0.1)).abs() < 1e-3, "{xs:?}");
        assert!(xs.iter().all(|x| x.fract() == 0.0));
        // At the floor, the points below collapse onto it, each once.
        let low = sweep_values(&p, &num(5_000.0));
        assert_eq!(low.len(), 4, "{low:?}");
        let choice = Param {
            name: "classes.training.cc".into(),
            domain: Domain::Choice(vec!["dcqcn".into(), "timely".into()]),
            source: "test",
        };
        assert_eq!(
            sweep_values(&choice, &ParamValue::Choice("timely".into())).len(),
            2
        );
    }

    #[test]
    fn the_nearest_guardrail_break_is_found_outward_from_the_recommendation() {
        let point = |x: f64, inference: f64| SweepPoint {
            value: num(x),
            objective: 1.0,
            classes: BTreeMap::from([
                ("inference".to_string(), inference),
                ("training".to_string(), 1.0),
            ]),
            violation: None,
        };
        let sw = Sweep {
            name: "x".into(),
            at: num(3.0),
            why: "kept",
            points: vec![
                point(1.0, 1.30),
                point(2.0, 1.005),
                point(3.0, 0.99),
                point(4.0, 1.02),
                point(5.0, 1.5),
            ],
        };
        let (p, class, x) = sw.nearest_break(|_| 0.01).unwrap();
        assert_eq!((p.value.clone(), class), (num(4.0), "inference"));
        assert!((x - 0.02).abs() < 1e-12);
        assert!(sw.nearest_break(|_| 0.6).is_none());
    }
}
