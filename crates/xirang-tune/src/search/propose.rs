//! Proposing a bracket's candidates: a TPE model per parameter (numbers on their log
//! scale where the range has one), told every baseline and every first-round objective,
//! and `propose`: a Latin hypercube over the whole space for the first bracket, the
//! models' proposals after it. Every random stream derives from the search seed, the
//! candidate's number and the parameter's: it must not depend on the order runs finish,
//! and it runs nothing.

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::SeedableRng;
use xirang_fabric::tune::ParamValue;

use super::mix;
use crate::space::{Domain, Param};

/// Per-parameter TPE models.
pub(super) enum Model {
    Number(tpe::TpeOptimizer, bool),
    Choice(tpe::TpeOptimizer, Vec<String>),
}

/// A uniform number in [0, 1).
fn unit(rng: &mut Xoshiro256PlusPlus) -> f64 {
    use rand_xoshiro::rand_core::Rng;
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// 0..n in a random order (Fisher-Yates).
fn shuffled(n: usize, rng: &mut Xoshiro256PlusPlus) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (unit(rng) * (i + 1) as f64) as usize;
        v.swap(i, j.min(i));
    }
    v
}

impl Model {
    pub(super) fn new(p: &Param) -> Model {
        match &p.domain {
            Domain::Number { lo, hi, log, .. } => {
                let (a, b) = if *log { (lo.ln(), hi.ln()) } else { (*lo, *hi) };
                Model::Number(
                    tpe::TpeOptimizer::new(
                        tpe::parzen_estimator(),
                        tpe::range(a, b).expect("validated range"),
                    ),
                    *log,
                )
            }
            Domain::Choice(c) => Model::Choice(
                tpe::TpeOptimizer::new(
                    tpe::histogram_estimator(),
                    tpe::categorical_range(c.len()).expect("at least one choice"),
                ),
                c.clone(),
            ),
        }
    }

    fn ask(&mut self, rng: &mut Xoshiro256PlusPlus) -> ParamValue {
        match self {
            Model::Number(o, log) => {
                let x = o.ask(rng).expect("a range always samples");
                ParamValue::Number(if *log { x.exp() } else { x })
            }
            Model::Choice(o, c) => {
                let i = o.ask(rng).expect("a range always samples") as usize;
                ParamValue::Choice(c[i.min(c.len() - 1)].clone())
            }
        }
    }

    pub(super) fn tell(&mut self, p: &Param, v: &ParamValue, objective: f64) {
        let v = p.normalize(v);
        let x = match (&*self, &v) {
            (Model::Number(_, log), ParamValue::Number(x)) => {
                if *log {
                    x.ln()
                } else {
                    *x
                }
            }
            (Model::Choice(_, c), ParamValue::Choice(s)) => c.iter().position(|x| x == s).unwrap_or(0) as f64,
            _ => return,
        };
        let o = match self {
            Model::Number(o, _) | Model::Choice(o, _) => o,
        };
        // The value is inside the range (normalised above), so telling cannot fail; a
        // rounding edge at the range's end is clamped by the normalisation.
        let _ = o.tell(x, objective);
    }
}

/// Proposes bracket `bracket`'s `n` candidates, numbered from `first`. The first bracket
/// spreads them over the whole space (a Latin hypercube: each parameter's range cut into
/// `n` strata, one candidate per stratum, the strata shuffled independently per
/// parameter), since TPE needs observations across the space before its densities mean
/// anything; later brackets ask each parameter's TPE model. Every random stream derives
/// from `seed`, the candidate's number and the parameter's, never from run order.
pub(super) fn propose(
    space: &[Param],
    models: &mut [Model],
    seed: u64,
    bracket: usize,
    first: i64,
    n: usize,
) -> Vec<(i64, Vec<(String, ParamValue)>)> {
    let strata: Vec<Vec<usize>> = (0..space.len())
        .map(|j| {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(mix(mix(seed, u64::MAX), j as u64));
            shuffled(n, &mut rng)
        })
        .collect();
    (0..n as i64)
        .map(|k| {
            let id = first + k;
            let values = space
                .iter()
                .zip(models.iter_mut())
                .enumerate()
                .map(|(j, (p, m))| {
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(mix(mix(seed, id as u64), j as u64));
                    let v = if bracket == 0 {
                        let u = (strata[j][k as usize] as f64 + unit(&mut rng)) / n as f64;
                        p.at(u)
                    } else {
                        m.ask(&mut rng)
                    };
                    (p.name.clone(), p.normalize(&v))
                })
                .collect();
            (id, values)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! Proposals: the first bracket's Latin hypercube, and the models after it.
    use super::*;
    use crate::search::num;

    fn number(name: &str, lo: f64, hi: f64) -> Param {
        Param {
            name: name.into(),
            domain: Domain::Number {
                lo,
                hi,
                log: false,
                step: None,
            },
            source: "test",
        }
    }

    #[test]
    fn the_first_bracket_puts_one_candidate_in_every_stratum_of_every_parameter() {
        let space = [number("a", 0.0, 1.0), number("b", 10.0, 20.0)];
        let mut models: Vec<Model> = space.iter().map(Model::new).collect();
        let n = 8;
        let got = propose(&space, &mut models, 42, 0, 100, n);
        assert_eq!(
            got.iter().map(|c| c.0).collect::<Vec<_>>(),
            (100..108).collect::<Vec<i64>>()
        );
        for (j, p) in space.iter().enumerate() {
            let Domain::Number { lo, hi, .. } = p.domain else {
                unreachable!()
            };
            let mut strata: Vec<usize> = got
                .iter()
                .map(|(_, v)| match &v[j].1 {
                    ParamValue::Number(x) => ((x - lo) / (hi - lo) * n as f64) as usize,
                    other => panic!("{other:?}"),
                })
                .collect();
            strata.sort();
            assert_eq!(strata, (0..n).collect::<Vec<_>>(), "{}", p.name);
        }
        // The same seed proposes the same candidates; another seed others.
        let mut again: Vec<Model> = space.iter().map(Model::new).collect();
        assert_eq!(propose(&space, &mut again, 42, 0, 100, n), got);
        assert_ne!(propose(&space, &mut again, 43, 0, 100, n), got);
    }

    #[test]
    fn later_brackets_ask_the_models_what_they_learned() {
        let space = [number("a", 0.0, 1.0)];
        let mut models: Vec<Model> = space.iter().map(Model::new).collect();
        // Low values good, high values bad.
        for i in 0..40 {
            let x = f64::from(i) / 40.0;
            models[0].tell(&space[0], &num(x), x);
        }
        let got = propose(&space, &mut models, 7, 1, 0, 16);
        let low = got
            .iter()
            .filter(|(_, v)| matches!(v[0].1, ParamValue::Number(x) if x < 0.5))
            .count();
        assert!(low >= 12, "{low} of 16 proposals in the good half: {got:?}");
    }
}
