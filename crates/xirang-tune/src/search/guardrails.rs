//! The per-class guardrails: how far past its tolerance a class's mean metric is (a
//! penalty in the search's early rounds, a broken constraint in its last, a bound on the
//! ablation's reverts), and each class's guardrail on the held-out seeds, for the report
//! and the verdict. Pure functions of scores: they run nothing and choose nothing.

use std::collections::BTreeMap;

use serde::Serialize;

use super::mix;
use crate::eval::Score;
use crate::stats::{Interval, mean_interval};

/// One class's guardrail on the held-out seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Guardrail {
    /// Traffic class.
    pub class: String,
    /// How much worse than the vendor its metric may get (0.01 = 1 %).
    pub tolerance: f64,
    /// Its metric relative to the vendor's, minus 1, per held-out seed: mean and interval
    /// (+0.03 = 3 % worse).
    pub change: Interval,
    /// `tolerance - change.mean`: how far from the guardrail (negative: broken).
    pub margin: f64,
}

/// Each class's mean metric (relative to the vendor's) over `scores`.
fn class_means(scores: &[Score]) -> BTreeMap<&str, f64> {
    let mut sums: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for sc in scores {
        for (c, r) in &sc.classes {
            let e = sums.entry(c.as_str()).or_default();
            e.0 += r;
            e.1 += 1;
        }
    }
    sums.into_iter()
        .map(|(c, (sum, n))| (c, sum / n as f64))
        .collect()
}

/// The first class whose mean metric over `scores` is past its guardrail.
pub(super) fn guardrail_broken(scores: &[Score], spec: &xirang_fabric::tune::TuneSpec) -> Option<String> {
    class_means(scores).into_iter().find_map(|(c, mean)| {
        let change = mean - 1.0;
        let tol = spec.guardrail(c);
        (change > tol).then(|| {
            format!(
                "guardrail {c}: {:+.1} % past its {:.1} % tolerance",
                change * 100.0,
                tol * 100.0
            )
        })
    })
}

/// How far past their guardrails the classes are over `scores`, summed (0 when every
/// guardrail holds).
pub(super) fn guardrail_excess(scores: &[Score], spec: &xirang_fabric::tune::TuneSpec) -> f64 {
    class_means(scores)
        .into_iter()
        .map(|(c, mean)| (mean - 1.0 - spec.guardrail(c)).max(0.0))
        .sum()
}

/// Each class's guardrail on the tested recommendation's held-out `scores`: how much
/// worse than the vendor its metric got, against the class's tolerance.
pub(super) fn guardrails_of<'a>(
    classes: impl Iterator<Item = &'a String>,
    scores: &[Score],
    spec: &xirang_fabric::tune::TuneSpec,
) -> Vec<Guardrail> {
    classes
        .map(|class| {
            let changes: Vec<f64> = scores
                .iter()
                .filter_map(|sc| sc.classes.get(class).map(|r| r - 1.0))
                .collect();
            let change = mean_interval(&changes, mix(spec.seed, class.len() as u64));
            let tolerance = spec.guardrail(class);
            Guardrail {
                class: class.clone(),
                tolerance,
                margin: tolerance - change.mean,
                change,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! The guardrails on made-up scores.
    use super::*;

    #[test]
    fn guardrails_by_class_mean() {
        let mut spec = xirang_fabric::tune::TuneSpec::default();
        let sc = |inference: f64| Score {
            objective: 0.9,
            relative: 0.9,
            classes: BTreeMap::from([("inference".to_string(), inference)]),
            violation: None,
        };
        // Mean +1.5 % over two seeds: past the default 1 %.
        let s = [sc(1.0), sc(1.03)];
        assert!(
            guardrail_broken(&s, &spec)
                .unwrap()
                .starts_with("guardrail inference: +1.5 % past its 1.0 % tolerance")
        );
        assert!((guardrail_excess(&s, &spec) - 0.005).abs() < 1e-12);
        spec.guardrails.insert("inference".into(), 0.02);
        assert_eq!(guardrail_broken(&s, &spec), None);
        assert_eq!(guardrail_excess(&s, &spec), 0.0);
    }
}
