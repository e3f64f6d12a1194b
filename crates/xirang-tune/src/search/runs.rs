//! Every batch of simulations: the [`Runner`] trait (where they run: [`Threads`] on this
//! process's cores, or MPI ranks in `xirang-mpi`), a [`RunJob`], and `Runs`, which reads
//! the trial log back at the start, runs only the jobs it lacks, commits each finished run
//! to the log before it counts, and reports progress. A job's result depends only on the
//! job: nothing here may depend on where or in what order the jobs ran.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;
use xirang_fabric::config::FabricConfig;

use super::result::{Progress, TuneError};
use crate::eval::{Evaluator, RunMetrics};
use crate::store::{EvalKey, Store, StoreError};

/// Level of every run in the trial log (the log's key keeps a level so that a later
/// multi-fidelity scheme can share the format).
pub(super) const FULL: u32 = 1;

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
pub(super) struct Job {
    pub(super) key: EvalKey,
    pub(super) config: FabricConfig,
    pub(super) params: String,
    pub(super) cap_us: Option<f64>,
}

/// The runs of one tune: the trial log (read back at the start, appended as runs end),
/// the runner, and progress. Every batch of simulations goes through [`Runs::run`].
pub(super) struct Runs<'a> {
    eval: &'a Evaluator<'a>,
    runner: &'a dyn Runner,
    progress: &'a (dyn Fn(Progress) + Sync),
    /// Every run known: read back from the log or run here.
    cache: Mutex<HashMap<EvalKey, RunMetrics>>,
    /// The runs this tune asked for (the log may hold others, from an earlier tune of the
    /// same scenario under another `--time`).
    asked: Mutex<HashSet<EvalKey>>,
    store: Mutex<Store>,
    /// Runs read back from the log at the start.
    pub(super) read_back: u64,
    /// Runs simulated here.
    pub(super) ran: Mutex<u64>,
    /// Runs done or read back, for progress.
    done: Mutex<u64>,
    /// The best feasible full-round objective so far, for progress.
    best_so_far: Mutex<Option<f64>>,
    /// Estimated runs of the whole tune, for progress.
    total: u64,
}

impl<'a> Runs<'a> {
    pub(super) fn new(
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
            asked: Mutex::new(HashSet::new()),
            store: Mutex::new(store),
            ran: Mutex::new(0),
            done: Mutex::new(0),
            best_so_far: Mutex::new(None),
            total,
        })
    }

    /// Runs every job not in the log, in parallel; returns every job's metrics.
    pub(super) fn run(&self, jobs: Vec<Job>) -> Result<HashMap<EvalKey, RunMetrics>, TuneError> {
        let mut out = HashMap::new();
        let mut todo = Vec::new();
        self.asked
            .lock()
            .expect("unpoisoned")
            .extend(jobs.iter().map(|j| j.key));
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
    pub(super) fn get(&self, key: &EvalKey) -> Option<RunMetrics> {
        self.cache.lock().expect("unpoisoned").get(key).cloned()
    }

    /// Every run this tune asked for, in no particular order.
    pub(super) fn asked(&self) -> Vec<(EvalKey, RunMetrics)> {
        let asked = self.asked.lock().expect("unpoisoned");
        let cache = self.cache.lock().expect("unpoisoned");
        asked
            .iter()
            .filter_map(|k| cache.get(k).map(|m| (*k, m.clone())))
            .collect()
    }

    /// A new estimate of the runs the whole tune needs, for progress.
    pub(super) fn set_total(&mut self, total: u64) {
        self.total = total;
    }

    /// A feasible full-round objective, for progress.
    pub(super) fn note_best(&self, m: f64) {
        let mut b = self.best_so_far.lock().expect("unpoisoned");
        *b = Some(b.map_or(m, |x: f64| x.min(m)));
    }
}
