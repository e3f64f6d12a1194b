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
        Seeds::of_sets(
            from(0, spec.search_seeds),
            from(HELD_OUT_SEED_OFFSET, spec.held_out_seeds),
            from(VALIDATION_SEED_OFFSET, spec.held_out_seeds),
            spec.sensitivity_seeds as usize,
            FIRST_ROUND_SEEDS,
        )
    }

    /// The rounds' and the sweeps' seeds from the three sets.
    fn of_sets(
        search: Vec<u64>,
        held: Vec<u64>,
        validation: Vec<u64>,
        sweep_seeds: usize,
        first_round_seeds: usize,
    ) -> Seeds {
        let early: Vec<u64> = search.iter().copied().take(first_round_seeds).collect();
        let half = search
            .iter()
            .copied()
            .take(search.len().div_ceil(2).max(early.len()))
            .collect();
        let sweep = held.iter().copied().take(sweep_seeds).collect();
        Seeds {
            validation,
            search,
            early,
            half,
            held,
            sweep,
        }
    }

    /// The seed pilot's seeds: the first few of the search set and of the held-out set
    /// (`seed_noise.rs`).
    pub(super) fn pilot(&self) -> Vec<u64> {
        let each = super::seed_noise::PILOT_SEEDS_EACH;
        self.search
            .iter()
            .take(each)
            .chain(self.held.iter().take(each))
            .copied()
            .collect()
    }

    /// Every set cut to its first `each` seeds, successive halving's first round to
    /// `first_round` and the sweeps' to `sweep` (never more than they had): the seed sets
    /// of a tune whose seeds are quiet.
    pub(super) fn cut(&self, each: usize, first_round: usize, sweep: usize) -> Seeds {
        let first = |v: &[u64], n: usize| v.iter().copied().take(n).collect::<Vec<u64>>();
        Seeds::of_sets(
            first(&self.search, each),
            first(&self.held, each),
            first(&self.validation, each),
            sweep.min(self.sweep.len()),
            first_round.min(self.early.len()),
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use xirang_fabric::tune::TuneSpec;

    #[test]
    fn the_pilot_takes_runs_the_tune_makes_and_a_cut_keeps_each_set_apart() {
        let seeds = Seeds::of(7, &TuneSpec::default());
        assert_eq!(seeds.pilot(), vec![7, 8, 1_000_007, 1_000_008]);
        let cut = seeds.cut(2, 1, 1);
        assert_eq!(cut.search, vec![7, 8]);
        // The first round on one seed, the second on as many (half of two), the last on
        // both.
        assert_eq!((cut.early.clone(), cut.half.clone()), (vec![7], vec![7]));
        assert_eq!(cut.held, vec![1_000_007, 1_000_008]);
        assert_eq!(cut.validation, vec![2_000_007, 2_000_008]);
        assert_eq!(cut.sweep, vec![1_000_007]);
        // A set already smaller stays as it was; no sweeps stays no sweeps.
        let small = TuneSpec {
            search_seeds: 1,
            held_out_seeds: 1,
            sensitivity_seeds: 0,
            ..TuneSpec::default()
        };
        let s = Seeds::of(1, &small);
        assert_eq!(s.pilot(), vec![1, 1_000_001]);
        let c = s.cut(2, 1, 1);
        assert_eq!(
            (c.search.len(), c.held.len(), c.validation.len(), c.sweep.len()),
            (1, 1, 1, 0)
        );
    }
}
