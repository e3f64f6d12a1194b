//! Sensitivity: each kept setting and every tier's ECN thresholds swept one at a time
//! around the recommendation (`SWEEP_OFFSETS` along the setting's range, at the device's
//! resolution; every choice of a choice), every other setting as recommended, on the
//! first `sensitivity_seeds` held-out seeds; [`Sweep`] and its points, with the nearest
//! guardrail break. The sweeps describe the recommendation: they must not change it.

use std::collections::BTreeMap;

use serde::Serialize;
use xirang_fabric::tune::ParamValue;

use super::result::TuneError;
use super::runs::FULL;
use super::set_value;
use super::tuning::{Search, params_json};
use crate::eval::Score;
use crate::space::{Domain, Param};

/// Trial-log ids of the sensitivity sweeps' configurations start here, above the
/// ablation's.
pub const SWEEP_ID_BASE: i64 = 1 << 41;
/// Points of a numeric sensitivity sweep, as offsets along the setting's searched range
/// (on its log scale if it has one) from the recommended value: a tenth of the range
/// either side and two and three tenths for the cliffs further out. On the built-in
/// Kmin range (5 KB to 2 MB, log) a tenth is a factor of 1.8.
pub(super) const SWEEP_OFFSETS: [f64; 7] = [-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3];

/// One setting swept around the recommendation, every other setting at its recommended
/// value, on the first `sensitivity_seeds` held-out seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sweep {
    /// The setting.
    pub name: String,
    /// Its recommended value (the vendor's when the vendor default stands).
    pub at: ParamValue,
    /// Why it is swept: `kept` (a recommended change) or `ecn` (every tier's Kmin and
    /// Kmax are).
    pub why: &'static str,
    /// The points, in the setting's order.
    pub points: Vec<SweepPoint>,
}

impl Sweep {
    /// The lowest and highest objective over the sweep's points.
    pub fn objective_range(&self) -> (f64, f64) {
        self.points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.objective), hi.max(p.objective))
        })
    }

    /// The point nearest the recommended value (in sweep order) at which a class's metric
    /// is past its guardrail (`tolerance(class)`, a share): the point, the class and its
    /// change (+0.05: 5 % worse than the vendor). `None`: every point keeps every
    /// guardrail.
    pub fn nearest_break(&self, tolerance: impl Fn(&str) -> f64) -> Option<(&SweepPoint, &str, f64)> {
        let center = self.points.iter().position(|p| p.value == self.at).unwrap_or(0);
        let mut order: Vec<usize> = (0..self.points.len()).collect();
        order.sort_by_key(|i| (i.abs_diff(center), *i));
        order.into_iter().find_map(|i| {
            let p = &self.points[i];
            p.classes
                .iter()
                .map(|(c, r)| (c.as_str(), r - 1.0))
                .filter(|(c, x)| *x > tolerance(c))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(c, x)| (p, c, x))
        })
    }
}

/// One point of a [`Sweep`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// The setting's value.
    pub value: ParamValue,
    /// The objective relative to the vendor's (1 = the vendor's), mean over the seeds.
    pub objective: f64,
    /// Each class's metric relative to the vendor's, mean over the seeds.
    pub classes: BTreeMap<String, f64>,
    /// A constraint this point broke on some seed.
    pub violation: Option<String>,
}

/// The values a sensitivity sweep of `p` around `center` runs: every choice of a choice,
/// else [`SWEEP_OFFSETS`] along the range, at the device's resolution, each once, in
/// order.
pub fn sweep_values(p: &Param, center: &ParamValue) -> Vec<ParamValue> {
    match &p.domain {
        Domain::Choice(c) => c.iter().map(|x| ParamValue::Choice(x.clone())).collect(),
        Domain::Number { .. } => {
            let u0 = p.position(center);
            let mut v: Vec<ParamValue> = SWEEP_OFFSETS
                .iter()
                .map(|o| {
                    if *o == 0.0 {
                        p.normalize(center)
                    } else {
                        p.normalize(&p.at(u0 + o))
                    }
                })
                .collect();
            v.dedup();
            v
        }
    }
}

impl Search<'_> {
    /// Sensitivity: each kept setting and every tier's ECN thresholds swept one at a time
    /// around what is recommended, all points run together on the sweep seeds. Returns
    /// the sweeps and the runs they asked for.
    pub(super) fn sensitivity(
        &self,
        space: &[Param],
        recommendation: &[(String, ParamValue)],
        recommended_id: i64,
        kept_names: &[&str],
    ) -> Result<(Vec<Sweep>, u64), TuneError> {
        let swept: Vec<(&Param, &'static str)> = space
            .iter()
            .filter_map(|p| {
                if kept_names.contains(&p.name.as_str()) {
                    Some((p, "kept"))
                } else if p.name.starts_with("ecn.")
                    && (p.name.ends_with(".kmin_bytes") || p.name.ends_with(".kmax_ratio"))
                {
                    Some((p, "ecn"))
                } else {
                    None
                }
            })
            .collect();
        let seeds = &self.seeds.sweep;
        let mut sweep_points: Vec<(usize, ParamValue, i64)> = Vec::new();
        let mut jobs = Vec::new();
        if !seeds.is_empty() {
            for (i, (p, _)) in swept.iter().enumerate() {
                let Some(center) = recommendation.iter().find(|(n, _)| *n == p.name).map(|(_, v)| v) else {
                    continue;
                };
                for v in sweep_values(p, center) {
                    if v == *center {
                        sweep_points.push((i, v, recommended_id));
                        continue;
                    }
                    let id = SWEEP_ID_BASE + sweep_points.len() as i64;
                    let mut values = recommendation.to_vec();
                    set_value(&mut values, &p.name, v.clone());
                    let config = self.config_of(id, &values)?;
                    jobs.extend(self.jobs(id, &params_json(&values), &config, seeds));
                    sweep_points.push((i, v, id));
                }
            }
        }
        let run_count = jobs.len() as u64;
        let got = self.runs.run(jobs)?;
        let mut sweeps: Vec<Sweep> = swept
            .iter()
            .map(|(p, why)| Sweep {
                name: p.name.clone(),
                at: recommendation
                    .iter()
                    .find(|(n, _)| *n == p.name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or(ParamValue::Number(0.0)),
                why,
                points: Vec::new(),
            })
            .collect();
        for (i, value, id) in sweep_points {
            let scores: Vec<Score> = seeds
                .iter()
                .map(|s| {
                    let m = got
                        .get(&(id, FULL, *s))
                        .cloned()
                        .or_else(|| self.runs.get(&(id, FULL, *s)))
                        .expect("the recommendation ran on every held-out seed");
                    self.score_of(&m, *s)
                })
                .collect();
            let n = scores.len() as f64;
            let mut classes: BTreeMap<String, f64> = BTreeMap::new();
            for sc in &scores {
                for (c, r) in &sc.classes {
                    *classes.entry(c.clone()).or_default() += r / n;
                }
            }
            sweeps[i].points.push(SweepPoint {
                value,
                objective: scores.iter().map(|s| s.relative).sum::<f64>() / n,
                classes,
                violation: scores.iter().find_map(|s| s.violation.clone()),
            });
        }
        sweeps.retain(|s| !s.points.is_empty());
        Ok((sweeps, run_count))
    }
}

#[cfg(test)]
mod tests {
    //! The sweeps' points, and the nearest guardrail break.
    use super::*;
    use crate::search::num;

    #[test]
    fn a_sweep_spans_the_range_around_the_value_at_the_device_resolution() {
        let p = Param {
            name: "ecn.leaf.kmin_bytes".into(),
            domain: Domain::Number {
                lo: 5_000.0,
                hi: 2_000_000.0,
                log: true,
                step: Some(1.0),
            },
            source: "test",
        };
        let v = sweep_values(&p, &num(100_000.0));
        let xs: Vec<f64> = v
            .iter()
            .map(|x| match x {
                ParamValue::Number(x) => *x,
                ParamValue::Choice(_) => panic!(),
            })
            .collect();
        assert_eq!(xs.len(), 7, "{xs:?}");
        assert_eq!(xs[3], 100_000.0);
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
        // A tenth of the log range is a factor of 400^0.1 = 1.82.
        assert!((xs[4] / xs[3] - 400f64.powf(0.1)).abs() < 1e-3, "{xs:?}");
        assert!(xs.iter().all(|x| x.fract() == 0.0));
        // At the floor, the points below collapse onto it, each once.
        let low = sweep_values(&p, &num(5_000.0));
        assert_eq!(low.len(), 4, "{low:?}");
        let choice = Param {
            name: "classes.training.cc".into(),
            domain: Domain::Choice(vec!["dcqcn".into(), "timely".into()]),
            source: "test",
        };
        assert_eq!(
            sweep_values(&choice, &ParamValue::Choice("timely".into())).len(),
            2
        );
    }

    #[test]
    fn the_nearest_guardrail_break_is_found_outward_from_the_recommendation() {
        let point = |x: f64, inference: f64| SweepPoint {
            value: num(x),
            objective: 1.0,
            classes: BTreeMap::from([
                ("inference".to_string(), inference),
                ("training".to_string(), 1.0),
            ]),
            violation: None,
        };
        let sw = Sweep {
            name: "x".into(),
            at: num(3.0),
            why: "kept",
            points: vec![
                point(1.0, 1.30),
                point(2.0, 1.005),
                point(3.0, 0.99),
                point(4.0, 1.02),
                point(5.0, 1.5),
            ],
        };
        let (p, class, x) = sw.nearest_break(|_| 0.01).unwrap();
        assert_eq!((p.value.clone(), class), (num(4.0), "inference"));
        assert!((x - 0.02).abs() < 1e-12);
        assert!(sw.nearest_break(|_| 0.6).is_none());
    }
}
