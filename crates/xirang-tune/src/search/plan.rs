//! The plan of a tune, before anything runs: `Plan` cuts the budget of candidates into
//! brackets (of [`MIN_BRACKET`] to [`MAX_BRACKET`] candidates, at least [`MIN_BRACKETS`]
//! of them) and estimates the runs of the whole tune, for progress; `Seeds` derives every
//! seed set from the scenario's run seed (the search's, its rounds', the held-out, the
//! validation and the sweep seeds), each set apart from the others. It runs nothing, and
//! the estimate must not steer the search.

use super::halving::round_sizes;
use super::sensitivity::SWEEP_OFFSETS;
use crate::space::{Baseline, Param};

/// Largest bracket: candidates proposed together, then halved.
pub const MAX_BRACKET: usize = 16;
/// Smallest bracket.
pub const MIN_BRACKET: usize = 4;
/// Brackets a budget is cut into, at least: so that TPE proposes most candidates after
/// the first bracket's spread.
pub const MIN_BRACKETS: usize = 4;

/// Seeds of the first round.
const FIRST_ROUND_SEEDS: usize = 2;

/// Run seeds of the held-out evaluation start here, far from the search seeds.
pub const HELD_OUT_SEED_OFFSET: u64 = 1_000_000;
/// Run seeds of the ablation (which settings earn their place) start here: apart from
/// both the search's and the held-out evaluation's, so that neither the choice of the
/// candidate nor the final report reuses them.
pub const VALIDATION_SEED_OFFSET: u64 = 2_000_000;

/// The run seeds of a tune, each set derived from the scenario's run seed.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Seeds {
    /// The search's seeds.
    pub(super) search: Vec<u64>,
    /// Successive halving's first round: the first [`FIRST_ROUND_SEEDS`] search seeds.
    pub(super) early: Vec<u64>,
    /// Its second round: half the search seeds (at least the first round's).
    pub(super) half: Vec<u64>,
    /// The held-out seeds the report's figures come from.
    pub(super) held: Vec<u64>,
    /// The validation seeds the ablation judges on (neither chooses nor reports).
    pub(super) validation: Vec<u64>,
    /// The held-out seeds the sensitivity sweeps run on.
    pub(super) sweep: Vec<u64>,
}

impl Seeds {
    pub(super) fn of(base: u64, spec: &xirang_fabric::tune::TuneSpec) -> Seeds {
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
    pub(super) fn held_out(base: u64, i: usize) -> u64 {
        base + HELD_OUT_SEED_OFFSET + i as u64
    }
}

/// How a tune spends its budget of candidates: brackets of a size, proposed together and
/// halved, and the runs the whole tune will need, for progress.
pub(super) struct Plan {
    pub(super) budget: usize,
    pub(super) bracket_size: usize,
    pub(super) brackets: usize,
    /// Estimated runs of the whole tune (the ablation's and the sweeps' depend on what
    /// they find).
    pub(super) total: u64,
}

impl Plan {
    pub(super) fn of(
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
