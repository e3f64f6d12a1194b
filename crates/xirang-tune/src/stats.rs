//! Confidence for tuning claims: a percentile bootstrap of the mean of paired differences
//! (each seed's figure with a setting minus without it, on the same seed), deterministic
//! for a given seed so that a tune's report is reproducible.

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use serde::Serialize;

/// Resamples per interval: the percentile bootstrap's 2.5 % and 97.5 % points move by
/// well under a tenth of the interval's width past a couple of thousand resamples
/// (Efron & Tibshirani 1993, §13.3; our check in the tests below).
pub const RESAMPLES: usize = 2000;
/// Two-sided confidence of every interval.
pub const CONFIDENCE: f64 = 0.95;

/// The smallest effect a tune claims, as a share of the vendor's figure: the report
/// prints shares to a tenth of a percent (`Interval::percent`), and a difference ten times
/// smaller than that is none an operator can act on. Runs of a fabric whose seeds move
/// nothing differ by less than this (the 8,192-GPU ring's by 6e-8, BENCHMARKS.md), and
/// without a floor such a difference would be an interval clear of zero on any number of
/// seeds.
pub const SMALLEST_EFFECT: f64 = 1e-4;

/// A mean with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// The mean of the samples.
    pub mean: f64,
    /// Lower end of the 95 % interval.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
    /// Samples it rests on.
    pub n: usize,
}

impl Interval {
    /// Entirely above zero by more than [`SMALLEST_EFFECT`]: a positive effect the tune
    /// claims.
    pub fn clearly_above_zero(&self) -> bool {
        self.lo > SMALLEST_EFFECT
    }

    /// Entirely below zero by more than [`SMALLEST_EFFECT`].
    pub fn clearly_below_zero(&self) -> bool {
        self.hi < -SMALLEST_EFFECT
    }

    /// Half its width.
    pub fn half_width(&self) -> f64 {
        (self.hi - self.lo) / 2.0
    }

    /// `+3.1 % [+1.2, +5.0]` for shares.
    pub fn percent(&self) -> String {
        format!(
            "{:+.1} % [{:+.1}, {:+.1}]",
            self.mean * 100.0,
            self.lo * 100.0,
            self.hi * 100.0
        )
    }
}

/// The percentile bootstrap interval of the mean of `xs` (paired differences), with
/// [`RESAMPLES`] resamples drawn from `seed`. One sample gives a zero-width interval at
/// it; none gives zeros.
pub fn mean_interval(xs: &[f64], seed: u64) -> Interval {
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n.max(1) as f64;
    if n < 2 {
        return Interval {
            mean,
            lo: mean,
            hi: mean,
            n,
        };
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let mut s = 0.0;
            for _ in 0..n {
                // Modulo bias is below 2^-50 for these sizes.
                s += xs[(rng.next_u64() % n as u64) as usize];
            }
            s / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let tail = (1.0 - CONFIDENCE) / 2.0;
    let at = |q: f64| means[((q * RESAMPLES as f64) as usize).min(RESAMPLES - 1)];
    Interval {
        mean,
        lo: at(tail),
        hi: at(1.0 - tail),
        n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_samples_give_a_point() {
        let i = mean_interval(&[0.25; 10], 1);
        assert_eq!((i.mean, i.lo, i.hi), (0.25, 0.25, 0.25));
    }

    #[test]
    fn an_effect_below_the_smallest_claimed_is_no_effect() {
        // A fabric whose seeds move nothing: every seed gives the same tiny difference.
        let tiny = mean_interval(&[5e-5; 4], 1);
        assert!(tiny.lo > 0.0 && !tiny.clearly_above_zero(), "{tiny:?}");
        assert!(!mean_interval(&[-5e-5; 4], 1).clearly_below_zero());
        assert!(mean_interval(&[2e-4; 4], 1).clearly_above_zero());
        assert!(mean_interval(&[-2e-4; 4], 1).clearly_below_zero());
    }

    #[test]
    fn a_clear_effect_excludes_zero_and_noise_does_not() {
        let clear: Vec<f64> = (0..16).map(|i| 0.05 + 0.01 * ((i % 4) as f64 - 1.5)).collect();
        assert!(mean_interval(&clear, 7).clearly_above_zero());
        let noise: Vec<f64> = (0..16).map(|i| if i % 2 == 0 { 0.1 } else { -0.1 }).collect();
        let i = mean_interval(&noise, 7);
        assert!(i.lo < 0.0 && i.hi > 0.0, "{i:?}");
    }

    #[test]
    fn the_interval_is_near_the_normal_one_and_stable_across_seeds() {
        // 20 samples of mean 1, sd ~0.58: the normal 95 % half-width is 1.96 sd/sqrt(n).
        let xs: Vec<f64> = (0..20).map(|i| (i % 3) as f64).collect();
        let sd = (xs.iter().map(|x| (x - 1.0f64).powi(2)).sum::<f64>() / 19.0).sqrt();
        let normal = 1.96 * sd / 20f64.sqrt();
        let widths: Vec<f64> = (0..5).map(|s| mean_interval(&xs, s).half_width()).collect();
        for w in &widths {
            assert!((w / normal - 1.0).abs() < 0.15, "{w} vs {normal}");
        }
        let spread =
            widths.iter().cloned().fold(f64::MIN, f64::max) - widths.iter().cloned().fold(f64::MAX, f64::min);
        assert!(spread < 0.1 * normal, "{widths:?}");
    }
}
