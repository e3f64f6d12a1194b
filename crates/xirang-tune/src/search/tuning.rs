//! A whole tune: [`tune`] and [`tune_with`], which read as the stages in order (the
//! vendor's reference runs, the baselines, the search, the selection, the ablation, the
//! held-out evaluation and its verdict, the sensitivity sweeps, the comparison with the
//! baselines), and `Search`, one tune in progress: the scenario, its seeds, the vendor's
//! uncapped runs every score is paired with, and how a configuration becomes capped jobs
//! and scores. It decides nothing a stage decides, and runs nothing but through `Runs`.

use std::collections::HashMap;
use std::time::Instant;

use xirang_fabric::config::FabricConfig;
use xirang_fabric::tune::{ParamValue, apply, value_of};

use super::ablation::tested_of;
use super::baselines::versus;
use super::guardrails::{Guardrail, guardrail_excess, guardrails_of};
use super::halving::select;
use super::held_out::{gain_interval, verdict_of};
use super::plan::{Plan, Seeds};
use super::propose::Model;
use super::result::{Progress, TuneError, TuneResult, Verdict};
use super::runs::{FULL, Job, Runner, Runs, Threads};
use super::seed_noise::{QUIET_FIRST_ROUND_SEEDS, QUIET_SEEDS, QUIET_SWEEP_SEEDS};
use crate::eval::{Evaluator, RunMetrics, Score};
use crate::space::{Baseline, Param};
use crate::store::{EvalKey, Store};

/// A candidate's runs stop at this multiple of the vendor's run time on the same seed (a
/// deadlocked or starved fabric would run forever).
pub const TIME_CAP_FACTOR: f64 = 10.0;

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

/// One tune in progress: the scenario, its seeds, the vendor's reference runs every
/// score is paired with, and the runs.
pub(super) struct Search<'a> {
    eval: &'a Evaluator<'a>,
    pub(super) spec: &'a xirang_fabric::tune::TuneSpec,
    base_config: &'a FabricConfig,
    pub(super) tiers: Vec<xirang_fabric::model::Tier>,
    pub(super) base_seed: u64,
    pub(super) seeds: Seeds,
    vendor: &'a FabricConfig,
    pub(super) runs: Runs<'a>,
    /// The vendor's runs, uncapped, by seed: what every score is relative to.
    pub(super) reference: HashMap<u64, RunMetrics>,
    /// The seed sets were cut by the seed pilot (`seed_noise.rs`).
    pub(super) seeds_cut: bool,
}

/// Job parameters as the trial log records them.
pub(super) fn params_json(values: &[(String, ParamValue)]) -> String {
    serde_json::to_string(values).expect("values serialize")
}

impl Search<'_> {
    pub(super) fn config_of(
        &self,
        id: i64,
        values: &[(String, ParamValue)],
    ) -> Result<FabricConfig, TuneError> {
        apply(self.base_config, &self.tiers, values).map_err(|e| TuneError::Apply(id, e))
    }

    /// A run's simulated-time cap on `seed`: a multiple of the vendor's time there.
    fn cap(&self, seed: u64) -> Option<f64> {
        self.reference.get(&seed).map(|m| m.sim_us * TIME_CAP_FACTOR)
    }

    /// Runs the vendor, uncapped, on seeds that have no reference yet.
    pub(super) fn add_references(&mut self, seeds: &[u64]) -> Result<(), TuneError> {
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
    pub(super) fn score_of(&self, m: &RunMetrics, seed: u64) -> Score {
        self.eval.score(m, &self.reference[&seed])
    }

    /// The jobs of configuration `id` on `seeds`, capped.
    pub(super) fn jobs(&self, id: i64, values: &str, config: &FabricConfig, seeds: &[u64]) -> Vec<Job> {
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
    pub(super) fn scores_on(
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

    pub(super) fn seed_scores(
        &self,
        id: i64,
        seeds: &[u64],
        got: &HashMap<EvalKey, RunMetrics>,
    ) -> Vec<Score> {
        seeds
            .iter()
            .map(|s| self.score_of(&got[&(id, FULL, *s)], *s))
            .collect()
    }

    /// The mean objective of `id` on `seeds`, a guardrail's excess added: in the early
    /// rounds a guardrail is a penalty that steers the proposals away from hurting a
    /// class; the last round makes it hard. With the first constraint a seed broke.
    pub(super) fn mean_score(
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
    let mut plan = Plan::of(spec, space, baselines, &seeds, tiers.len());
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
        seeds_cut: false,
    };
    // The seeds' effect first, on runs the tune needs anyway; where the seeds move
    // nothing, fewer of them.
    let mut seed_noise = s.seed_pilot(baselines)?;
    if seed_noise.cut {
        s.seeds = s
            .seeds
            .cut(QUIET_SEEDS, QUIET_FIRST_ROUND_SEEDS, QUIET_SWEEP_SEEDS);
        s.seeds_cut = true;
        plan = Plan::of(spec, space, baselines, &s.seeds, s.tiers.len());
        s.runs.set_total(plan.total);
    }
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
    seed_noise.widest_configuration = s.widest_configuration();
    let runs = (*s.runs.ran.lock().expect("unpoisoned"), s.runs.read_back);
    Ok(TuneResult {
        seed_noise,
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
