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
//!
//! One file per stage of a tune, in the order `tune_with` runs them, and beside them the
//! plan, the runs and the result; the public items are re-exported here, at the paths
//! they always had, and this file holds nothing else but three helpers the stages share
//! (`mean`, `mix`, `set_value`).
//!
//! | file | owns |
//! |---|---|
//! | `tuning` | `tune` and `tune_with`, the stages in order; `Search`, one tune in progress: its seeds, the vendor's reference runs, a configuration's jobs and scores |
//! | `plan` | the budget of candidates cut into brackets, the runs estimated for progress; `Seeds`, every seed set |
//! | `runs` | every batch of simulations: `Runner`, `Threads`, `RunJob`, and `Runs` over the trial log |
//! | `seed_noise` | the seed pilot: the vendor and the baselines on four seeds, and the seed sets cut where the seeds move nothing |
//! | `baselines` | the baselines on the search and held-out seeds (the models' first observations), and the tuned configuration against each |
//! | `propose` | the per-parameter TPE models; a bracket's candidates, a Latin hypercube first |
//! | `halving` | successive halving in a bracket, the brackets under the time budget, `select` |
//! | `ablation` | backward elimination of the chosen candidate's changes on the validation seeds |
//! | `held_out` | the tested recommendation on the held-out seeds, grown while its gain is unclear; the held-out table; the verdict |
//! | `guardrails` | each class's guardrail: past it, by how much, and on the held-out seeds |
//! | `sensitivity` | one-at-a-time sweeps around the recommendation |
//! | `result` | `TuneResult`, `Verdict`, `Progress`, `TuneError` |

mod ablation;
mod baselines;
mod guardrails;
mod halving;
mod held_out;
mod plan;
mod propose;
mod result;
mod runs;
mod seed_noise;
mod sensitivity;
mod tuning;

use xirang_fabric::tune::ParamValue;

pub use ablation::{ABLATION_ID_BASE, Ablation, Contribution};
pub use baselines::BaselineResult;
pub use guardrails::Guardrail;
pub use halving::{Candidate, ETA};
pub use held_out::{HELD_OUT_GROWTH_CAP, HeldOut, NARROW_ENOUGH};
pub use plan::{HELD_OUT_SEED_OFFSET, MAX_BRACKET, MIN_BRACKET, MIN_BRACKETS, VALIDATION_SEED_OFFSET};
pub use result::{Progress, TuneError, TuneResult, Verdict};
pub use runs::{OnDone, RunJob, Runner, Threads};
pub use seed_noise::{
    PILOT_SEEDS_EACH, QUIET_FIRST_ROUND_SEEDS, QUIET_SEEDS, QUIET_SWEEP_SEEDS, SEED_NOISE_FLOOR, SeedNoise,
};
pub use sensitivity::{SWEEP_ID_BASE, Sweep, SweepPoint, sweep_values};
pub use tuning::{TIME_CAP_FACTOR, tune, tune_with};

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

fn mix(a: u64, b: u64) -> u64 {
    // SplitMix64 finaliser: decorrelates nearby seeds.
    let mut z = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_add(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Sets `name` in `values`.
fn set_value(values: &mut [(String, ParamValue)], name: &str, v: ParamValue) {
    if let Some(x) = values.iter_mut().find(|(n, _)| n == name) {
        x.1 = v;
    }
}

#[cfg(test)]
fn num(x: f64) -> ParamValue {
    ParamValue::Number(x)
}
