//! Judging the candidates: successive halving in a bracket (every candidate on the first
//! round's seeds, the best quarter, by [`ETA`], on half the search seeds, the best of
//! those on all of them), the brackets in turn until the budget of candidates or of time
//! is spent, and `select`, the recommendation's candidate by its pessimistic bound. Every
//! choice goes by objective with ties to the lower index or id: it must not depend on the
//! order runs finish.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;
use xirang_fabric::tune::ParamValue;

use super::guardrails::guardrail_broken;
use super::mean;
use super::plan::Plan;
use super::propose::{Model, propose};
use super::result::TuneError;
use super::tuning::{Search, params_json};
use crate::eval::RunMetrics;
use crate::space::Param;
use crate::stats::SMALLEST_EFFECT;
use crate::store::EvalKey;

/// Successive-halving keep ratio between rounds.
pub const ETA: usize = 4;

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

/// Standard error of the mean (0 for fewer than two values).
fn standard_error(xs: &[f64]) -> f64 {
    let n = xs.len();
    if n < 2 {
        return 0.0;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64 / n as f64).sqrt()
}

/// The sizes of successive halving's three rounds for a bracket of `n` candidates: all
/// of them, the best quarter, the best sixteenth (each at least one).
pub(super) fn round_sizes(n: usize) -> [usize; 3] {
    [n, n.div_ceil(ETA), n.div_ceil(ETA * ETA)]
}

/// The `keep` best of `scored` (a candidate's index and objective): lowest objective
/// first, ties to the lower index, so the choice never depends on run order.
fn best_of(scored: &[(usize, f64)], keep: usize) -> Vec<usize> {
    let mut s = scored.to_vec();
    s.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    s.into_iter().take(keep).map(|x| x.0).collect()
}

/// The recommendation's candidate: among those that passed every round without breaking
/// a constraint, the one whose mean plus one standard error is lowest, and only if that
/// pessimistic figure still beats the vendor (1.0) by more than the smallest effect a tune
/// claims ([`SMALLEST_EFFECT`]). Choosing by the plain mean would
/// favour whichever candidate the search seeds happened to flatter (a winner's curse that
/// the held-out seeds then expose).
pub(super) fn select(candidates: &[Candidate]) -> Option<i64> {
    candidates
        .iter()
        .filter(|c| c.violation.is_none() && c.bound.is_some_and(|b| b < 1.0 - SMALLEST_EFFECT))
        .min_by(|a, b| {
            a.bound
                .unwrap_or(f64::MAX)
                .total_cmp(&b.bound.unwrap_or(f64::MAX))
                .then(a.id.cmp(&b.id))
        })
        .map(|c| c.id)
}

impl Search<'_> {
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

    /// The search proper: brackets of candidates proposed together and judged by
    /// successive halving, until the budget of candidates is spent or, checked between
    /// brackets, the time budget. Every candidate, and why the search stopped early if it
    /// did.
    pub(super) fn search(
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
}

#[cfg(test)]
mod tests {
    //! Halving's choices and the selection, on made-up objectives.
    use super::*;

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
        assert_eq!(
            select(&[candidate(0, Some(1.0 - 5e-5), None)]),
            None,
            "better by less than the smallest effect a tune claims"
        );
        assert_eq!(select(&[candidate(0, Some(1.0 - 2e-4), None)]), Some(0));
        assert_eq!(select(&[]), None);
    }
}
