//! What a tune returns: [`TuneResult`] (the recommendation and the evidence for it:
//! candidates, baselines, ablation, held-out table, guardrails, sweeps, seeds and run
//! counts) with its [`Verdict`], the [`Progress`] reported after every simulation, and
//! [`TuneError`]. Types only, serialized as they are into the reports: no stage's logic.

use serde::Serialize;
use xirang_fabric::config::FabricConfig;
use xirang_fabric::tune::ParamValue;

use super::ablation::Ablation;
use super::baselines::BaselineResult;
use super::guardrails::Guardrail;
use super::halving::Candidate;
use super::held_out::HeldOut;
use super::seed_noise::SeedNoise;
use super::sensitivity::Sweep;
use crate::stats::Interval;
use crate::store::StoreError;

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
    /// The seed pilot: how far the seeds moved the vendor's and the baselines' figures,
    /// and whether the seed sets were cut.
    pub seed_noise: SeedNoise,
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
