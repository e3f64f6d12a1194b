//! The held-out evaluation: the tested recommendation on the held-out seeds, with seeds
//! added while its gain's interval does not clear zero (by the smallest effect a tune
//! claims, `stats::SMALLEST_EFFECT`) and is wider than [`NARROW_ENOUGH`] (up
//! to [`HELD_OUT_GROWTH_CAP`] times the first set), the held-out table of it and every
//! baseline, and the verdict. The held-out seeds judge what was chosen: nothing here
//! proposes, selects or changes a configuration.

use std::collections::BTreeMap;

use serde::Serialize;
use xirang_fabric::tune::ParamValue;

use super::guardrails::Guardrail;
use super::plan::Seeds;
use super::result::{TuneError, Verdict};
use super::runs::FULL;
use super::tuning::Search;
use crate::eval::{RunMetrics, Score};
use crate::space::Baseline;
use crate::stats::{Interval, mean_interval};

/// The held-out evaluation adds seeds, half its first count at a time, while the gain's
/// interval does not clear zero and is wider than this (a share of the vendor's)...
pub const NARROW_ENOUGH: f64 = 0.01;
/// ...up to this many times its first count.
pub const HELD_OUT_GROWTH_CAP: usize = 3;

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

/// One configuration's serving metrics for one class: TTFT and TPOT (median and p99),
/// each the mean over the held-out seeds, µs.
#[derive(Debug, Clone, PartialEq)]
pub struct ServingFigures {
    /// The traffic class.
    pub class: String,
    /// TTFT p50.
    pub ttft_p50_us: Option<f64>,
    /// TTFT p99.
    pub ttft_p99_us: Option<f64>,
    /// TPOT p50.
    pub tpot_p50_us: Option<f64>,
    /// TPOT p99.
    pub tpot_p99_us: Option<f64>,
}

impl HeldOut {
    /// The serving metrics of every class that has them (empty without serving workloads).
    pub fn serving(&self) -> Vec<ServingFigures> {
        let mut names: Vec<&String> = self.metrics.iter().flat_map(|m| m.classes.keys()).collect();
        names.sort();
        names.dedup();
        let mean = |class: &str, f: fn(&crate::eval::ClassMetrics) -> Option<f64>| {
            let v: Vec<f64> = self
                .metrics
                .iter()
                .filter_map(|m| m.classes.get(class).and_then(f))
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        names
            .into_iter()
            .map(|c| ServingFigures {
                class: c.clone(),
                ttft_p50_us: mean(c, |m| m.ttft_p50_us),
                ttft_p99_us: mean(c, |m| m.ttft_p99_us),
                tpot_p50_us: mean(c, |m| m.tpot_p50_us),
                tpot_p99_us: mean(c, |m| m.tpot_p99_us),
            })
            .filter(|f| f.ttft_p50_us.is_some() || f.tpot_p50_us.is_some())
            .collect()
    }

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

/// The gain over the vendor per seed (1 - objective; an infeasible run counts with its
/// penalty), mean and interval.
pub(super) fn gain_interval(scores: &[Score], seed: u64) -> Interval {
    let gains: Vec<f64> = scores.iter().map(|s| 1.0 - s.objective).collect();
    mean_interval(&gains, seed)
}

/// The verdict from what was tested on the held-out seeds.
pub(super) fn verdict_of(
    tested: bool,
    gain: Option<&Interval>,
    guardrails: &[Guardrail],
    ablated: bool,
) -> Verdict {
    match (tested, gain) {
        (true, Some(g)) => match guardrails.iter().find(|g| g.margin < 0.0) {
            Some(b) => Verdict::GuardrailBroken {
                class: b.class.clone(),
            },
            None if !g.clearly_above_zero() => Verdict::NoSignificantGain,
            None => Verdict::Recommended,
        },
        _ if ablated => Verdict::NoChangeEarnsItsPlace,
        _ => Verdict::NothingBeatTheVendor,
    }
}

impl Search<'_> {
    /// The tested recommendation on the held-out seeds, with seeds added (half a set at a
    /// time, up to [`HELD_OUT_GROWTH_CAP`] sets) while its gain is unclear: its scores and
    /// the seeds they are on. When the seed pilot cut the set and this configuration's
    /// objective moves across it all the same, the set is first the scenario's full one.
    pub(super) fn held_out(
        &mut self,
        id: i64,
        values: &[(String, ParamValue)],
    ) -> Result<(Vec<Score>, Vec<u64>), TuneError> {
        let mut held = self.seeds.held.clone();
        let mut scores = self.scores_on(id, values, &held)?;
        // The seed pilot cut the set, but this configuration moves with the seed (on the
        // validation and held-out seeds it ran on): it is judged on the scenario's full
        // held-out set, and grows from there.
        if self.seeds_cut && self.moves_with_seed(id) {
            let full = self.spec.held_out_seeds.max(1) as usize;
            let more: Vec<u64> = (held.len()..full)
                .map(|i| Seeds::held_out(self.base_seed, i))
                .collect();
            self.add_references(&more)?;
            scores.extend(self.scores_on(id, values, &more)?);
            held.extend(more);
        }
        let first = held.len();
        let batch = first.div_ceil(2).max(1);
        loop {
            let g = gain_interval(&scores, self.spec.seed);
            if g.clearly_above_zero()
                || g.half_width() <= NARROW_ENOUGH
                || held.len() + batch > HELD_OUT_GROWTH_CAP * first
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

    /// The held-out table: the tuned configuration (on its grown seed set, with the scores
    /// it was judged by) and every baseline (on the held-out seeds).
    pub(super) fn held_out_table(
        &self,
        baselines: &[Baseline],
        tuned: Option<(i64, &[Score], &[u64])>,
    ) -> Vec<HeldOut> {
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

#[cfg(test)]
mod tests {
    //! The verdict from made-up intervals and guardrails.
    use super::*;

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
}
