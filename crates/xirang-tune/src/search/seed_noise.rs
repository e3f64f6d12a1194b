//! The seeds' effect, measured before a tune spends runs on it. A run seed moves ECMP
//! placement, request arrivals and the start's jitter; where none of that moves what
//! the tune measures, every further seed is a run that cannot change the report. The
//! pilot is the vendor and every baseline on the first two search seeds and the first
//! two held-out seeds (runs every tune makes anyway): when no figure of any of them
//! moves between those seeds by more than [`SEED_NOISE_FLOOR`], every seed set is cut to
//! [`QUIET_SEEDS`] (successive halving's first rounds to [`QUIET_FIRST_ROUND_SEEDS`], the
//! sweeps to [`QUIET_SWEEP_SEEDS`] per point). A configuration that moves with the seed
//! all the same is caught where the claim is made: the held-out evaluation runs it on the
//! scenario's full held-out set (`held_out.rs`) when its objective moved across the seeds
//! it ran on, and the report gives the largest spread any configuration showed across its
//! seeds, with a warning past the floor.
//!
//! This file decides the seed counts only: it judges no configuration.

use std::collections::BTreeMap;

use serde::Serialize;

use super::result::TuneError;
use super::runs::FULL;
use super::tuning::Search;
use crate::eval::{ClassMetrics, RunMetrics};
use crate::space::Baseline;
use crate::stats::SMALLEST_EFFECT;

/// Seeds the pilot takes from the search set and from the held-out set each.
pub const PILOT_SEEDS_EACH: usize = 2;

/// Largest spread of a figure across the pilot's seeds (its range over its largest
/// magnitude) at which the seeds count as quiet: the smallest effect a tune claims
/// ([`SMALLEST_EFFECT`], a tenth of the finest difference the report prints). Seeds
/// that move every figure by less cannot move a judgement.
pub const SEED_NOISE_FLOOR: f64 = SMALLEST_EFFECT;

/// Seeds of every set (search, held-out, validation) when the seeds are quiet: two, not
/// one, so that every judgement but the first rounds' screening still pairs two seeds
/// and a configuration that does move with the seed shows it in its spread.
pub const QUIET_SEEDS: usize = 2;

/// Seeds of successive halving's first two rounds when the seeds are quiet: a screening,
/// as the first round always is (every candidate, the cheapest judgement); the best
/// quarter's last round, which the selection rests on, runs on all [`QUIET_SEEDS`].
pub const QUIET_FIRST_ROUND_SEEDS: usize = 1;

/// Seeds per sensitivity-sweep point when the seeds are quiet: a sweep looks for a cliff
/// tens of percent high (`DEFAULT_SENSITIVITY_SEEDS`), which a second quiet seed would
/// only repeat.
pub const QUIET_SWEEP_SEEDS: usize = 1;

/// What the pilot found, and what the tune did with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedNoise {
    /// The pilot's seeds.
    pub seeds: Vec<u64>,
    /// Configurations the pilot ran on them: the vendor and every baseline.
    pub configurations: usize,
    /// The figure that moved most across the seeds (`configuration: figure`), and by how
    /// much (range over largest magnitude); `None` when the pilot had fewer than two seeds.
    pub widest: Option<(String, f64)>,
    /// [`SEED_NOISE_FLOOR`].
    pub floor: f64,
    /// The seed sets were cut to [`QUIET_SEEDS`]: quiet, and the scenario's
    /// `[tune] seed_pilot` left on.
    pub cut: bool,
    /// After the tune: the largest spread of any configuration's objective (relative to
    /// the vendor, without penalties) across the seeds it ran on, and the configuration's
    /// trial-log id.
    pub widest_configuration: Option<(i64, f64)>,
}

impl SeedNoise {
    /// The pilot's verdict on `runs`: each configuration's name and its metrics on the
    /// pilot's seeds, in the seeds' order. The seeds are quiet when there are at least two
    /// and no figure of any configuration spreads by more than [`SEED_NOISE_FLOOR`]; they
    /// are cut only when `enabled` too.
    pub fn of(seeds: &[u64], runs: &[(String, Vec<RunMetrics>)], enabled: bool) -> SeedNoise {
        let mut widest: Option<(String, f64)> = None;
        if seeds.len() >= 2 {
            for (name, metrics) in runs {
                for (figure, spread) in spreads(metrics) {
                    if widest.as_ref().is_none_or(|w| spread > w.1) {
                        widest = Some((format!("{name}: {figure}"), spread));
                    }
                }
            }
        }
        let quiet = seeds.len() >= 2 && widest.as_ref().is_none_or(|w| w.1 <= SEED_NOISE_FLOOR);
        SeedNoise {
            seeds: seeds.to_vec(),
            configurations: runs.len(),
            widest,
            floor: SEED_NOISE_FLOOR,
            cut: quiet && enabled,
            widest_configuration: None,
        }
    }

    /// One sentence for the reports: what the pilot saw and what the tune did.
    pub fn describe(&self) -> String {
        let Some((figure, spread)) = &self.widest else {
            return "seed pilot: fewer than two seeds, so the seeds' effect is not measured; every seed set at its full size".into();
        };
        let seen = if *spread == 0.0 {
            format!(
                "no figure of {} configurations moved across seeds {:?}",
                self.configurations, self.seeds
            )
        } else {
            format!(
                "the largest spread across seeds {:?} of {} configurations' figures is {} ({figure})",
                self.seeds,
                self.configurations,
                share(*spread)
            )
        };
        let quiet = *spread <= self.floor;
        let mut s = match (quiet, self.cut) {
            (true, true) => format!(
                "seed pilot: {seen}, within {}: every seed set cut to {QUIET_SEEDS} seeds, {QUIET_FIRST_ROUND_SEEDS} for the search's first rounds and {QUIET_SWEEP_SEEDS} per sweep point (`[tune] seed_pilot = false` runs them all)",
                share(self.floor)
            ),
            (true, false) => format!(
                "seed pilot: {seen}, within {}, but `[tune] seed_pilot = false`: every seed set at its full size",
                share(self.floor)
            ),
            _ => format!(
                "seed pilot: {seen}, over {}: every seed set at its full size",
                share(self.floor)
            ),
        };
        if let (true, Some((id, x))) = (self.cut, self.widest_configuration) {
            if self.broken() {
                s.push_str(&format!(
                    "; WARNING: configuration {id}'s objective moved by {} across its seeds, though the baselines' did not: the search and the ablation judged on two seeds, which may be too few for such configurations (a recommendation that moves is judged on the full held-out set); rerun with `[tune] seed_pilot = false` to judge on every seed",
                    share(x)
                ));
            } else {
                s.push_str(&format!(
                    "; no configuration's objective moved by more than {} across its seeds",
                    share(x)
                ));
            }
        }
        s
    }

    /// A configuration's objective moved with the seed by more than the floor although
    /// the pilot's did not: the cut seed sets may be too few for it.
    pub fn broken(&self) -> bool {
        self.cut && self.widest_configuration.is_some_and(|(_, s)| s > self.floor)
    }
}

impl Search<'_> {
    /// The pilot: the vendor (uncapped, as every reference run) and then every other
    /// baseline on the pilot's seeds, and what they show. The runs stay in the log for
    /// the stages that need them.
    pub(super) fn seed_pilot(&mut self, baselines: &[Baseline]) -> Result<SeedNoise, TuneError> {
        let seeds = self.seeds.pilot();
        self.add_references(&seeds)?;
        let id = |i: usize| -(i as i64) - 1;
        let mut jobs = Vec::new();
        for (i, b) in baselines.iter().enumerate().skip(1) {
            jobs.extend(self.jobs(id(i), &format!("\"{}\"", b.name), &b.config, &seeds));
        }
        let got = self.runs.run(jobs)?;
        let runs: Vec<(String, Vec<RunMetrics>)> = baselines
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let metrics = seeds
                    .iter()
                    .map(|s| match i {
                        0 => self.reference[s].clone(),
                        _ => got[&(id(i), FULL, *s)].clone(),
                    })
                    .collect();
                (b.name.to_string(), metrics)
            })
            .collect();
        Ok(SeedNoise::of(&seeds, &runs, self.spec.seed_pilot))
    }

    /// Each configuration's objective (relative to the vendor's on the same seed, a
    /// broken constraint's penalty included) on every seed this tune ran it on.
    fn objectives_by_id(&self) -> BTreeMap<i64, Vec<Option<f64>>> {
        let mut by_id: BTreeMap<i64, Vec<Option<f64>>> = BTreeMap::new();
        for ((id, level, seed), m) in self.runs.asked() {
            if level == FULL && self.reference.contains_key(&seed) {
                by_id
                    .entry(id)
                    .or_default()
                    .push(Some(self.score_of(&m, seed).objective));
            }
        }
        by_id
    }

    /// Whether configuration `id`'s objective moves across the seeds this tune ran it on
    /// by more than [`SEED_NOISE_FLOOR`].
    pub(super) fn moves_with_seed(&self, id: i64) -> bool {
        self.objectives_by_id()
            .get(&id)
            .is_some_and(|v| spread(v) > SEED_NOISE_FLOOR)
    }

    /// The largest spread of any configuration's objective across the seeds it ran on,
    /// of those that ran on two or more; the lowest id among equals.
    pub(super) fn widest_configuration(&self) -> Option<(i64, f64)> {
        self.objectives_by_id()
            .into_iter()
            .filter(|(_, v)| v.len() >= 2)
            .map(|(id, v)| (id, spread(&v)))
            .fold(None, |w: Option<(i64, f64)>, (id, x)| match w {
                Some((_, y)) if y >= x => w,
                _ => Some((id, x)),
            })
    }
}

/// A spread as a reader takes it: a percentage down to 0.01 %, below that in powers of
/// ten.
fn share(x: f64) -> String {
    if x >= 1e-4 {
        format!("{:.2} %", x * 100.0)
    } else if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.1e}")
    }
}

/// A figure's spread across runs: its range over its largest magnitude (0 when every
/// value is 0; a figure some runs lack counts as 1, the largest possible change).
pub(super) fn spread(values: &[Option<f64>]) -> f64 {
    let present: Vec<f64> = values.iter().flatten().copied().collect();
    if present.len() < values.len() {
        return if present.is_empty() { 0.0 } else { 1.0 };
    }
    let lo = present.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = present.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let scale = lo.abs().max(hi.abs());
    if scale == 0.0 { 0.0 } else { (hi - lo) / scale }
}

/// Every figure of `runs` (one configuration on several seeds) with its spread: each
/// class's metrics, the fabric's counters, and whether the run finished.
fn spreads(runs: &[RunMetrics]) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut figure = |name: String, f: &dyn Fn(&RunMetrics) -> Option<f64>| {
        let values: Vec<Option<f64>> = runs.iter().map(f).collect();
        out.push((name, spread(&values)));
    };
    figure("finished".into(), &|m| Some(f64::from(u8::from(m.finished))));
    figure("lossless_drops".into(), &|m| Some(m.lossless_drops as f64));
    figure("pause_ratio".into(), &|m| Some(m.pause_ratio));
    figure("pfc_frames".into(), &|m| Some(m.pfc_frames as f64));
    figure("ecn_marks".into(), &|m| Some(m.ecn_marks as f64));
    let mut classes: Vec<&String> = runs.iter().flat_map(|m| m.classes.keys()).collect();
    classes.sort();
    classes.dedup();
    type Get = fn(&ClassMetrics) -> Option<f64>;
    let metrics: [(&str, Get); 8] = [
        ("collective_us", |c| c.collective_us),
        ("p99_us", |c| c.p99_us),
        ("p999_us", |c| c.p999_us),
        ("slowdown_p99", |c| c.slowdown_p99),
        ("ttft_p50_us", |c| c.ttft_p50_us),
        ("ttft_p99_us", |c| c.ttft_p99_us),
        ("tpot_p50_us", |c| c.tpot_p50_us),
        ("tpot_p99_us", |c| c.tpot_p99_us),
    ];
    for class in classes {
        for (name, get) in metrics {
            let values: Vec<Option<f64>> = runs.iter().map(|m| m.classes.get(class).and_then(get)).collect();
            if values.iter().any(Option::is_some) {
                out.push((format!("classes.{class}.{name}"), spread(&values)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn run(collective_us: f64, marks: u64) -> RunMetrics {
        RunMetrics {
            classes: BTreeMap::from([(
                "training".to_string(),
                ClassMetrics {
                    collective_us: Some(collective_us),
                    ..ClassMetrics::default()
                },
            )]),
            finished: true,
            ecn_marks: marks,
            sim_us: collective_us,
            ..RunMetrics::default()
        }
    }

    #[test]
    fn a_spread_is_the_range_over_the_largest_magnitude() {
        assert_eq!(spread(&[Some(0.0), Some(0.0)]), 0.0);
        assert!((spread(&[Some(100.0), Some(99.0), Some(100.0)]) - 0.01).abs() < 1e-12);
        assert_eq!(spread(&[Some(0.0), Some(3.0)]), 1.0);
        // A figure one seed lacks moved as far as a figure can.
        assert_eq!(spread(&[Some(5.0), None]), 1.0);
        assert_eq!(spread(&[None, None]), 0.0);
    }

    #[test]
    fn seeds_that_move_nothing_are_cut_and_one_figure_that_moves_keeps_them() {
        let seeds = [1, 2, 1_000_001, 1_000_002];
        // The 8,192-GPU ring's vendor runs: 29,525.5124 to 29,525.5142 µs.
        let flat = vec![
            run(29_525.512_4, 0),
            run(29_525.514_2, 0),
            run(29_525.513, 0),
            run(29_525.514, 0),
        ];
        let quiet = SeedNoise::of(&seeds, &[("vendor".into(), flat.clone())], true);
        assert!(quiet.cut, "{quiet:?}");
        let (_, w) = quiet.widest.clone().unwrap();
        assert!(w > 0.0 && w < 1e-7, "{w}");
        // The same, but the scenario turned the pilot off.
        assert!(!SeedNoise::of(&seeds, &[("vendor".into(), flat.clone())], false).cut);
        // One baseline's collective time moves by 0.1 % with the seed.
        let moving = vec![run(1000.0, 0), run(1001.0, 0), run(1000.0, 0), run(1000.0, 0)];
        let noisy = SeedNoise::of(
            &seeds,
            &[("vendor".into(), flat.clone()), ("paper".into(), moving)],
            true,
        );
        assert!(!noisy.cut);
        assert_eq!(noisy.widest.unwrap().0, "paper: classes.training.collective_us");
        // Marks on one seed only.
        let marks = vec![run(1000.0, 0), run(1000.0, 3), run(1000.0, 0), run(1000.0, 0)];
        let n = SeedNoise::of(&seeds, &[("vendor".into(), marks)], true);
        assert!(!n.cut);
        assert_eq!(n.widest.unwrap().0, "vendor: ecn_marks");
        // One seed cannot show the seeds' effect.
        assert!(!SeedNoise::of(&[1], &[("vendor".into(), vec![run(1.0, 0)])], true).cut);
    }

    #[test]
    fn a_configuration_that_moves_under_cut_seeds_is_flagged() {
        let mut n = SeedNoise::of(
            &[1, 2],
            &[("vendor".into(), vec![run(1.0, 0), run(1.0, 0)])],
            true,
        );
        n.widest_configuration = Some((7, 5e-5));
        assert!(!n.broken());
        n.widest_configuration = Some((7, 2e-3));
        assert!(n.broken());
        n.cut = false;
        assert!(!n.broken());
    }
}
