//! The ablation: backward elimination of the chosen candidate's changes from the vendor's
//! values, by unit (a setting, or a class's congestion control as one), on the
//! validation seeds, which neither chose the candidate nor report on it. A change is kept
//! when reverting it is significantly worse, or breaks a constraint or a guardrail the
//! configuration kept. Its configurations are numbered in a fixed order from
//! [`ABLATION_ID_BASE`], so that a resumed tune reads them back; it must not run on the
//! search or the held-out seeds.

use serde::Serialize;
use xirang_fabric::tune::ParamValue;

use super::guardrails::{guardrail_broken, guardrail_excess};
use super::halving::Candidate;
use super::result::TuneError;
use super::tuning::Search;
use super::{mix, set_value};
use crate::eval::Score;
use crate::stats::{Interval, mean_interval};

/// Trial-log ids of the ablation's configurations start here, above any candidate's.
pub const ABLATION_ID_BASE: i64 = 1 << 40;

/// Reverts the ablation may make to bring a configuration back within its guardrails.
const REPAIR_STEPS: usize = 3;

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
/// significantly worse (the paired interval of the objective difference does not clear
/// zero by `stats::SMALLEST_EFFECT`) and
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
            if cost_alone.clearly_above_zero() {
                continue;
            }
            let rest = self.without_unit(i, &self.kept);
            let (k, without) = self.score_next(&rest)?;
            let cost = self.cost(&without, k, paired);
            // A revert may not break a constraint or a guardrail the configuration kept (a
            // guardrail it already broke is the repair's below).
            if !cost.clearly_above_zero() && self.allowed(&without) {
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
                .filter(|(_, j)| j.4 && !j.1.without.clearly_above_zero())
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

impl Search<'_> {
    /// Which of the best candidate's changes earn their place: backward elimination on
    /// the validation seeds, which neither chose the candidate nor report on it (no best
    /// candidate: no ablation). With the runs it needed, the validation seeds' vendor
    /// runs included, whether run or read back.
    pub(super) fn ablation(
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

/// The tested recommendation: the ablated candidate with only the kept changes, numbered
/// as the ablation's final configuration (none kept: the vendor default stands, and there
/// is nothing to test).
pub(super) fn tested_of(
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

#[cfg(test)]
mod tests {
    //! The ablation on a synthetic evaluator: each setting's effect is known, the seed
    //! noise deterministic.
    use std::collections::BTreeMap;

    use super::*;
    use crate::search::num;

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
                .all(|c| c.without.clearly_above_zero() && !c.needed_for_guardrail),
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
        assert!(
            cost.clearly_above_zero() && (cost.mean - 0.10).abs() < 0.01,
            "{cost:?}"
        );
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
}
