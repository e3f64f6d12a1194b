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

/// What a tune found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneResult {
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
    let search_seeds: Vec<u64> = (0..u64::from(spec.search_seeds.max(1)))
        .map(|i| base_seed + i)
        .collect();
    let held_seeds: Vec<u64> = (0..u64::from(spec.held_out_seeds.max(1)))
        .map(|i| base_seed + HELD_OUT_SEED_OFFSET + i)
        .collect();
    let early: Vec<u64> = search_seeds.iter().copied().take(FIRST_ROUND_SEEDS).collect();
    let half: Vec<u64> = search_seeds
        .iter()
        .copied()
        .take(search_seeds.len().div_ceil(2).max(early.len()))
        .collect();
    let budget = spec.budget.max(1) as usize;
    let bracket_size = (budget / MIN_BRACKETS).clamp(MIN_BRACKET, MAX_BRACKET);
    let brackets = budget.div_ceil(bracket_size);

    let cache = Mutex::new(store.load()?);
    let read_back = cache.lock().expect("unpoisoned").len() as u64;
    let ran = Mutex::new(0u64);
    let store = Mutex::new(store);
    let done = Mutex::new(0u64);
    let best_so_far: Mutex<Option<f64>> = Mutex::new(None);
    // Runs per bracket: two seeds for all, half the seeds for a quarter, all seeds for the
    // best.
    let per_bracket = bracket_size * early.len()
        + bracket_size.div_ceil(ETA) * (half.len() - early.len())
        + bracket_size.div_ceil(ETA * ETA) * (search_seeds.len() - half.len());
    let total = (baselines.len() * (search_seeds.len() + held_seeds.len())
        + brackets * per_bracket
        + held_seeds.len()) as u64;

    // Runs every job not in the log, in parallel; returns all results.
    let run_jobs = |jobs: Vec<Job>| -> Result<HashMap<EvalKey, RunMetrics>, TuneError> {
        let mut out = HashMap::new();
        let mut todo = Vec::new();
        {
            let c = cache.lock().expect("unpoisoned");
            for j in jobs {
                match c.get(&j.key) {
                    Some(m) => {
                        out.insert(j.key, m.clone());
                    }
                    None => todo.push(j),
                }
            }
        }
        *done.lock().expect("unpoisoned") += out.len() as u64;
        let run_jobs: Vec<RunJob> = todo
            .iter()
            .map(|j| RunJob {
                config: j.config.clone(),
                seed: j.key.2,
                cap_us: j.cap_us,
            })
            .collect();
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
                best: *best_so_far.lock().expect("unpoisoned"),
            });
            Ok(())
        };
        let results = runner.run(eval, &run_jobs, &on_done)?;
        let mut c = cache.lock().expect("unpoisoned");
        for (j, m) in todo.iter().zip(results) {
            c.insert(j.key, m.clone());
            out.insert(j.key, m);
        }
        Ok(out)
    };

    let params_json =
        |values: &[(String, ParamValue)]| serde_json::to_string(values).expect("values serialize");
    let config_of = |id: i64, values: &[(String, ParamValue)]| -> Result<FabricConfig, TuneError> {
        apply(&loaded.scenario.config, &tiers, values).map_err(|e| TuneError::Apply(id, e))
    };

    // The vendor reference on every seed and level, uncapped.
    let vendor = &baselines[0].config;
    let mut jobs = Vec::new();
    for s in search_seeds.iter().chain(&held_seeds) {
        jobs.push(Job {
            key: (-1, FULL, *s),
            config: vendor.clone(),
            params: "\"vendor\"".into(),
            cap_us: None,
        });
    }
    let reference = run_jobs(jobs)?;
    let cap = |seed: u64| {
        reference
            .get(&(-1, FULL, seed))
            .map(|m| m.sim_us * TIME_CAP_FACTOR)
    };
    // Scores pair a run with the vendor's on the same seed: the same request arrivals and,
    // with the same QP count, the same ECMP placement, so the ratio shows what the settings
    // changed rather than the seed's luck.
    let score_of = |m: &RunMetrics, seed: u64| -> Score { eval.score(m, &reference[&(-1, FULL, seed)]) };
    let seed_scores = |id: i64, seeds: &[u64], got: &HashMap<EvalKey, RunMetrics>| -> Vec<Score> {
        seeds
            .iter()
            .map(|s| score_of(&got[&(id, FULL, *s)], *s))
            .collect()
    };
    let mean_score = |id: i64, seeds: &[u64], got: &HashMap<EvalKey, RunMetrics>| -> (f64, Option<String>) {
        let scores = seed_scores(id, seeds, got);
        let mean = scores.iter().map(|s| s.objective).sum::<f64>() / scores.len() as f64;
        (mean, scores.iter().find_map(|s| s.violation.clone()))
    };

    // The other baselines on every level; they also seed the models.
    let mut jobs = Vec::new();
    for (i, b) in baselines.iter().enumerate().skip(1) {
        let id = -(i as i64) - 1;
        for s in search_seeds.iter().chain(&held_seeds) {
            jobs.push(Job {
                key: (id, FULL, *s),
                config: b.config.clone(),
                params: format!("\"{}\"", b.name),
                cap_us: cap(*s),
            });
        }
    }
    let base_runs = run_jobs(jobs)?;
    let mut models: Vec<Model> = space.iter().map(Model::new).collect();
    let mut baseline_results = Vec::new();
    for (i, b) in baselines.iter().enumerate() {
        let id = -(i as i64) - 1;
        let got = if i == 0 { &reference } else { &base_runs };
        let (first, _) = mean_score(id, &early, got);
        let full = mean(
            &seed_scores(id, &search_seeds, got)
                .iter()
                .map(|s| s.relative)
                .collect::<Vec<_>>(),
        );
        for (p, m) in space.iter().zip(models.iter_mut()) {
            if let Some(v) = value_of(&b.config, &tiers, &p.name) {
                m.tell(p, &v, first);
            }
        }
        baseline_results.push(BaselineResult {
            name: b.name.to_string(),
            description: b.description.to_string(),
            objective: full,
        });
    }

    let mut candidates: Vec<Candidate> = Vec::new();
    for bracket in 0..brackets {
        let n = bracket_size.min(budget - bracket * bracket_size);
        // Propose: the first bracket spreads its candidates over the whole space (a Latin
        // hypercube: each parameter's range cut into n strata, one candidate per stratum,
        // strata shuffled independently per parameter), as TPE needs observations across
        // the space before its densities mean anything; later brackets ask TPE.
        let first = candidates.len() as i64;
        let strata: Vec<Vec<usize>> = (0..space.len())
            .map(|j| {
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(mix(mix(spec.seed, u64::MAX), j as u64));
                shuffled(n, &mut rng)
            })
            .collect();
        let mut proposed = Vec::new();
        for k in 0..n as i64 {
            let id = first + k;
            let values: Vec<(String, ParamValue)> = space
                .iter()
                .zip(models.iter_mut())
                .enumerate()
                .map(|(j, (p, m))| {
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(mix(mix(spec.seed, id as u64), j as u64));
                    let v = if bracket == 0 {
                        let u = (strata[j][k as usize] as f64 + unit(&mut rng)) / n as f64;
                        p.at(u)
                    } else {
                        m.ask(&mut rng)
                    };
                    (p.name.clone(), p.normalize(&v))
                })
                .collect();
            let config = config_of(id, &values)?;
            proposed.push((id, values, config));
        }
        // Round 1: two seeds for all.
        let round = |ids: &[usize], seeds: &[u64]| -> Result<HashMap<EvalKey, RunMetrics>, TuneError> {
            let mut jobs = Vec::new();
            for &i in ids {
                let (id, values, config) = &proposed[i];
                for s in seeds {
                    jobs.push(Job {
                        key: (*id, FULL, *s),
                        config: config.clone(),
                        params: params_json(values),
                        cap_us: cap(*s),
                    });
                }
            }
            run_jobs(jobs)
        };
        let all: Vec<usize> = (0..n).collect();
        let r1 = round(&all, &early)?;
        let mut scored: Vec<(usize, f64, Option<String>)> = all
            .iter()
            .map(|&i| {
                let (m, v) = mean_score(proposed[i].0, &early, &r1);
                (i, m, v)
            })
            .collect();
        for (i, obj, _) in &scored {
            for (p, m) in space.iter().zip(models.iter_mut()) {
                let v = proposed[*i]
                    .1
                    .iter()
                    .find(|(k, _)| *k == p.name)
                    .map(|(_, v)| v.clone());
                if let Some(v) = v {
                    m.tell(p, &v, *obj);
                }
            }
        }
        let mut records: Vec<Candidate> = scored
            .iter()
            .map(|(i, obj, v)| Candidate {
                id: proposed[*i].0,
                bracket,
                values: proposed[*i].1.clone(),
                objectives: vec![*obj],
                violation: v.clone(),
                bound: None,
            })
            .collect();
        // Round 2: half the search seeds for the best quarter.
        scored.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let keep2: Vec<usize> = scored.iter().take(n.div_ceil(ETA)).map(|x| x.0).collect();
        let r2 = round(&keep2, &half)?;
        let mut scored2: Vec<(usize, f64)> = keep2
            .iter()
            .map(|&i| {
                let (m, v) = mean_score(proposed[i].0, &half, &r2);
                records[i].objectives.push(m);
                records[i].violation = v;
                (i, m)
            })
            .collect();
        // Round 3: every search seed for the best of those.
        scored2.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let keep3: Vec<usize> = scored2.iter().take(n.div_ceil(ETA * ETA)).map(|x| x.0).collect();
        let r3 = round(&keep3, &search_seeds)?;
        for &i in &keep3 {
            let scores = seed_scores(proposed[i].0, &search_seeds, &r3);
            let objectives: Vec<f64> = scores.iter().map(|s| s.objective).collect();
            let m = mean(&objectives);
            let v = scores.iter().find_map(|s| s.violation.clone());
            records[i].objectives.push(m);
            records[i].bound = Some(m + standard_error(&objectives));
            records[i].violation = v.clone();
            if v.is_none() {
                let mut b = best_so_far.lock().expect("unpoisoned");
                *b = Some(b.map_or(m, |x: f64| x.min(m)));
            }
        }
        candidates.extend(records);
    }

    // The recommendation: among candidates that passed every round without breaking a
    // constraint, the one whose mean plus one standard error is lowest, and only if that
    // pessimistic figure still beats the vendor. Choosing by the plain mean would favour
    // whichever candidate the search seeds happened to flatter (a winner's curse that the
    // held-out seeds then expose).
    let best = candidates
        .iter()
        .filter(|c| c.violation.is_none() && c.bound.is_some_and(|b| b < 1.0))
        .min_by(|a, b| {
            a.bound
                .unwrap_or(f64::MAX)
                .total_cmp(&b.bound.unwrap_or(f64::MAX))
                .then(a.id.cmp(&b.id))
        })
        .map(|c| c.id);
    let vendor_values: Vec<(String, ParamValue)> = space
        .iter()
        .filter_map(|p| value_of(vendor, &tiers, &p.name).map(|v| (p.name.clone(), v)))
        .collect();
    let (recommendation, config) = match best {
        Some(id) => {
            let values = crate::space::effective(
                &candidates
                    .iter()
                    .find(|c| c.id == id)
                    .expect("best exists")
                    .values,
                &vendor_values,
            );
            let config = config_of(id, &values)?;
            (values, config)
        }
        None => (vendor_values.clone(), vendor.clone()),
    };

    // Held-out seeds: the recommendation against every baseline.
    let tuned_id = best.unwrap_or(-1);
    let mut jobs = Vec::new();
    if best.is_some() {
        for s in &held_seeds {
            jobs.push(Job {
                key: (tuned_id, FULL, *s),
                config: config.clone(),
                params: params_json(&recommendation),
                cap_us: cap(*s),
            });
        }
    }
    let tuned_runs = run_jobs(jobs)?;
    let mut held_out = Vec::new();
    let entries: Vec<(String, i64)> = std::iter::once(("tuned".to_string(), tuned_id))
        .chain(
            baselines
                .iter()
                .enumerate()
                .map(|(i, b)| (b.name.to_string(), -(i as i64) - 1)),
        )
        .collect();
    for (name, id) in entries {
        let got = |s: u64| -> &RunMetrics {
            tuned_runs
                .get(&(id, FULL, s))
                .or_else(|| base_runs.get(&(id, FULL, s)))
                .or_else(|| reference.get(&(id, FULL, s)))
                .expect("every held-out run was done")
        };
        let mut objectives = Vec::new();
        let mut classes: BTreeMap<String, f64> = BTreeMap::new();
        let mut violations = Vec::new();
        let mut metrics = Vec::new();
        for s in &held_seeds {
            let m = got(*s);
            let sc = score_of(m, *s);
            objectives.push(sc.relative);
            for (c, r) in &sc.classes {
                *classes.entry(c.clone()).or_default() += r / held_seeds.len() as f64;
            }
            if let Some(v) = sc.violation {
                violations.push(format!("seed {s}: {v}"));
            }
            metrics.push(m.clone());
        }
        held_out.push(HeldOut {
            name,
            objectives,
            classes,
            violations,
            metrics,
        });
    }
    let runs = (*ran.lock().expect("unpoisoned"), read_back);
    Ok(TuneResult {
        candidates,
        best,
        recommendation,
        config,
        vendor_values,
        baselines: baseline_results,
        held_out,
        seeds: (search_seeds, held_seeds),
        runs,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}
