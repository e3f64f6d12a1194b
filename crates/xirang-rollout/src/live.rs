//! The statistical test behind gates on live application metrics: canaries against a
//! control group in the same failure domains, over the same window, one sample per
//! interval (a collective's time, a bus bandwidth, a request-latency quantile, an ECN
//! or pause ratio).
//!
//! The test is a one-sided Mann-Whitney U (Wilcoxon rank-sum) test on the two groups'
//! per-interval samples, with average ranks for ties, the tie-corrected variance and a
//! continuity correction, p-values from the normal approximation. It makes no assumption
//! on the metric's distribution (latency quantiles are skewed), and it compares groups of
//! different sizes. The control's samples are first moved by the tolerance, the tuner's
//! guardrail (a relative margin: 0.01 = 1 % worse allowed), and the canaries are then
//! tested both ways:
//! - worse beyond the tolerance with p < alpha: the gate fails;
//! - no worse than the tolerance with p < alpha (non-inferiority): the gate passes;
//! - neither, or fewer samples than asked: the soak must go on.
//!
//! A group without samples is not a pass: the caller names the missing series and the
//! gate fails closed.

use serde::{Deserialize, Serialize};

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Times, latencies, ratios of marks, pauses, drops.
    Lower,
    /// Bandwidths, throughputs.
    Higher,
}

/// What the test concludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The canaries are no worse than the control beyond the tolerance.
    Pass,
    /// The canaries are worse than the control beyond the tolerance.
    Fail,
    /// Neither is shown yet: soak longer.
    Longer,
}

/// One metric's comparison, with what it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Samples used per group (finite values only).
    pub canary_n: usize,
    /// Control samples used.
    pub control_n: usize,
    /// Medians, for the message.
    pub canary_median: f64,
    /// Control median.
    pub control_median: f64,
    /// p-value of "the canaries are worse than the control beyond the tolerance".
    pub p_worse: f64,
    /// p-value of "the canaries are no worse than that" (non-inferiority).
    pub p_no_worse: f64,
    /// The conclusion at the given alpha.
    pub verdict: Verdict,
}

/// A group had no usable sample.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no {group} samples: the series is missing or holds no number in the window")]
pub struct NoSamples {
    /// `canary` or `control`.
    pub group: &'static str,
}

/// Compares the canaries' per-interval samples with the control's.
///
/// `tolerance` is the relative margin allowed (>= 0), `alpha` the test's level, and
/// `min_samples` the fewest samples per group before anything but "soak longer" is said.
/// Non-finite samples (Prometheus' NaN for an empty histogram bucket) are left out.
pub fn compare(
    better: Better,
    tolerance: f64,
    canary: &[f64],
    control: &[f64],
    alpha: f64,
    min_samples: usize,
) -> Result<Comparison, NoSamples> {
    compare_with(better, tolerance, 0.0, canary, control, alpha, min_samples)
}

/// [`compare`] with an absolute margin too, in the metric's unit, added to the relative
/// one: what lets a ratio that is 0 on both sides (no ECN marks on either) pass, which a
/// relative margin of 0 cannot show.
pub fn compare_with(
    better: Better,
    tolerance: f64,
    absolute: f64,
    canary: &[f64],
    control: &[f64],
    alpha: f64,
    min_samples: usize,
) -> Result<Comparison, NoSamples> {
    let canary: Vec<f64> = canary.iter().copied().filter(|x| x.is_finite()).collect();
    let control: Vec<f64> = control.iter().copied().filter(|x| x.is_finite()).collect();
    if canary.is_empty() {
        return Err(NoSamples { group: "canary" });
    }
    if control.is_empty() {
        return Err(NoSamples { group: "control" });
    }
    // In "lower is better" terms: a higher-is-better metric is negated, and the
    // control moved to the edge of what is allowed.
    let (sign, edge) = match better {
        Better::Lower => (1.0, 1.0 + tolerance.max(0.0)),
        Better::Higher => (-1.0, 1.0 - tolerance.max(0.0)),
    };
    let a: Vec<f64> = canary.iter().map(|x| sign * x).collect();
    let absolute = if absolute.is_finite() {
        absolute.max(0.0)
    } else {
        0.0
    };
    let b: Vec<f64> = control.iter().map(|x| sign * x * edge + absolute).collect();
    let (p_worse, p_no_worse) = mann_whitney_one_sided(&a, &b);
    let enough = canary.len() >= min_samples && control.len() >= min_samples;
    let verdict = if !enough {
        Verdict::Longer
    } else if p_worse < alpha {
        Verdict::Fail
    } else if p_no_worse < alpha {
        Verdict::Pass
    } else {
        Verdict::Longer
    };
    Ok(Comparison {
        canary_n: canary.len(),
        control_n: control.len(),
        canary_median: median(&canary),
        control_median: median(&control),
        p_worse,
        p_no_worse,
        verdict,
    })
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One-sided Mann-Whitney U of `a` against `b`: (p of "a tends to be greater than b",
/// p of "a tends to be less than b"), normal approximation with tie and continuity
/// corrections (as scipy.stats.mannwhitneyu with `method="asymptotic"`).
pub fn mann_whitney_one_sided(a: &[f64], b: &[f64]) -> (f64, f64) {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let n = n1 + n2;
    let mut pooled: Vec<(f64, bool)> = a
        .iter()
        .map(|x| (*x, true))
        .chain(b.iter().map(|x| (*x, false)))
        .collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));
    // Average ranks over ties; the tie term of the variance.
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < pooled.len() {
        let mut j = i;
        while j + 1 < pooled.len() && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        let avg_rank = (i + j) as f64 / 2.0 + 1.0;
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        rank_sum_a += avg_rank * pooled[i..=j].iter().filter(|p| p.1).count() as f64;
        i = j + 1;
    }
    let u = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let var = n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
    if var <= 0.0 {
        // Every value equal: no evidence either way.
        return (1.0, 1.0);
    }
    let sd = var.sqrt();
    let greater = normal_sf((u - mean - 0.5) / sd);
    let less = normal_sf((mean - u - 0.5) / sd);
    (greater, less)
}

/// P(Z > z) for a standard normal Z: erfc(z/√2)/2, with erfc from the Chebyshev fit of
/// Numerical Recipes (2nd ed., §6.2, `erfcc`), fractional error below 1.2e-7 everywhere,
/// ample for p-values compared with a level of a few per cent.
fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// p-values of scipy 1.17.1, `scipy.stats.mannwhitneyu(a, b, alternative=...,
    /// method="asymptotic", use_continuity=True)`, on the same samples.
    #[test]
    fn p_values_match_scipy() {
        let a = [12.1, 14.3, 11.8, 15.2, 13.9, 16.4, 12.7, 14.8];
        let b = [10.2, 11.1, 12.0, 10.8, 11.9, 12.4, 10.5];
        let (greater, less) = mann_whitney_one_sided(&a, &b);
        assert!((greater - SCIPY_GREATER).abs() < 1e-6, "{greater}");
        assert!((less - SCIPY_LESS).abs() < 1e-6, "{less}");
        // With ties.
        let a = [1.0, 2.0, 2.0, 3.0, 3.0, 3.0];
        let b = [2.0, 3.0, 4.0, 4.0];
        let (greater, less) = mann_whitney_one_sided(&a, &b);
        assert!((greater - SCIPY_TIES_GREATER).abs() < 1e-6, "{greater}");
        assert!((less - SCIPY_TIES_LESS).abs() < 1e-6, "{less}");
    }

    const SCIPY_GREATER: f64 = 0.003_268_080_587_121_337_7;
    const SCIPY_LESS: f64 = 0.997_711_038_821_157_2;
    const SCIPY_TIES_GREATER: f64 = 0.941_237_565_951_680_4;
    const SCIPY_TIES_LESS: f64 = 0.089_856_247_439_499_88;

    #[test]
    fn an_absolute_margin_passes_zeros_on_both_sides() {
        let zeros = [0.0; 12];
        let c = compare(Better::Lower, 0.05, &zeros, &zeros, 0.05, 8).unwrap();
        assert_eq!(
            c.verdict,
            Verdict::Longer,
            "a relative margin cannot tell 0 from 0"
        );
        let c = compare_with(Better::Lower, 0.05, 0.001, &zeros, &zeros, 0.05, 8).unwrap();
        assert_eq!(c.verdict, Verdict::Pass);
        // A canary marking every packet fails against a control marking none.
        let c = compare_with(Better::Lower, 0.05, 0.001, &[0.9; 12], &zeros, 0.05, 8).unwrap();
        assert_eq!(c.verdict, Verdict::Fail);
        // For a higher-is-better metric the margin is taken off the control.
        let c = compare_with(Better::Higher, 0.0, 1.0, &[99.5; 12], &[100.0; 12], 0.05, 8).unwrap();
        assert_eq!(c.verdict, Verdict::Pass);
        let c = compare_with(Better::Higher, 0.0, 1.0, &[98.0; 12], &[100.0; 12], 0.05, 8).unwrap();
        assert_eq!(c.verdict, Verdict::Fail);
    }

    fn series(base: f64, spread: f64, n: usize) -> Vec<f64> {
        // A deterministic spread around `base`.
        (0..n)
            .map(|i| base + spread * (((i * 7) % 11) as f64 / 10.0 - 0.5))
            .collect()
    }

    #[test]
    fn a_clearly_worse_canary_fails_and_a_like_one_passes() {
        let control = series(100.0, 10.0, 20);
        let worse = series(130.0, 10.0, 20);
        let c = compare(Better::Lower, 0.01, &worse, &control, 0.05, 10).unwrap();
        assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
        // The same samples, 5 % allowed: clearly within it.
        let same = series(100.0, 10.0, 20);
        let c = compare(Better::Lower, 0.05, &same, &control, 0.05, 10).unwrap();
        assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
        // 4 % worse with 5 % allowed, in noise six times the difference: not shown
        // either way yet.
        let noisy_control = series(100.0, 60.0, 20);
        let noisy = series(104.0, 60.0, 20);
        let c = compare(Better::Lower, 0.05, &noisy, &noisy_control, 0.05, 10).unwrap();
        assert_eq!(c.verdict, Verdict::Longer, "{c:?}");
        let better = series(80.0, 10.0, 20);
        let c = compare(Better::Lower, 0.01, &better, &control, 0.05, 10).unwrap();
        assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
        // Bandwidth: higher is better.
        let c = compare(Better::Higher, 0.01, &worse, &control, 0.05, 10).unwrap();
        assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
        let c = compare(Better::Higher, 0.01, &better, &control, 0.05, 10).unwrap();
        assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
    }

    #[test]
    fn too_few_samples_means_soak_longer_and_none_fails_closed() {
        let control = series(100.0, 10.0, 20);
        let worse = series(200.0, 10.0, 3);
        let c = compare(Better::Lower, 0.01, &worse, &control, 0.05, 10).unwrap();
        assert_eq!(c.verdict, Verdict::Longer);
        assert_eq!(
            compare(Better::Lower, 0.01, &[], &control, 0.05, 10)
                .unwrap_err()
                .group,
            "canary"
        );
        assert_eq!(
            compare(
                Better::Lower,
                0.01,
                &[f64::NAN, f64::INFINITY],
                &control,
                0.05,
                10
            )
            .unwrap_err()
            .group,
            "canary"
        );
        assert_eq!(
            compare(Better::Lower, 0.01, &control, &[], 0.05, 10)
                .unwrap_err()
                .group,
            "control"
        );
    }

    #[test]
    fn all_equal_is_no_evidence() {
        assert_eq!(mann_whitney_one_sided(&[1.0; 5], &[1.0; 5]), (1.0, 1.0));
    }
}

/// Why a metric's samples could not be had: each names the query, so a gate that fails
/// closed says which series to export.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SeriesError {
    /// The server answered, with no series for the query.
    #[error(
        "no series for `{query}` in the window: the gate fails closed (is the metric exported and scraped?)"
    )]
    Missing {
        /// The PromQL query.
        query: String,
    },
    /// The server refused the query or could not be read.
    #[error("`{query}`: {message}")]
    Query {
        /// The PromQL query.
        query: String,
        /// What went wrong.
        message: String,
    },
}

/// The per-interval samples of a Prometheus `query_range` answer for one group: the
/// values of every series at each step, averaged over the group's series (one sample per
/// interval), in time order. NaN values (an empty histogram) are left out; an answer
/// without any series is [`SeriesError::Missing`].
pub fn samples_from_query_range(body: &serde_json::Value, query: &str) -> Result<Vec<f64>, SeriesError> {
    if body["status"] != "success" {
        return Err(SeriesError::Query {
            query: query.to_string(),
            message: format!(
                "query failed: {}",
                body["error"].as_str().unwrap_or("no error text")
            ),
        });
    }
    let result = body["data"]["result"].as_array().cloned().unwrap_or_default();
    if result.is_empty() {
        return Err(SeriesError::Missing {
            query: query.to_string(),
        });
    }
    // Time (ms) -> (sum, count) over the group's series.
    let mut at: std::collections::BTreeMap<i64, (f64, u32)> = Default::default();
    for r in &result {
        for p in r["values"].as_array().into_iter().flatten() {
            let (Some(t), Some(v)) = (
                p.get(0).and_then(serde_json::Value::as_f64),
                p.get(1)
                    .and_then(serde_json::Value::as_str)
                    .and_then(|s| s.parse::<f64>().ok()),
            ) else {
                continue;
            };
            if v.is_finite() {
                let e = at.entry((t * 1000.0).round() as i64).or_default();
                e.0 += v;
                e.1 += 1;
            }
        }
    }
    Ok(at.values().map(|(s, n)| s / f64::from(*n)).collect())
}

/// A query template with `{nodes}` filled with a regex alternation of `nodes` (for
/// `node=~"{nodes}"`), each name's regex metacharacters escaped, written as PromQL
/// double-quoted string content (a backslash doubled).
pub fn fill_nodes(template: &str, nodes: &[String]) -> String {
    let alternation = nodes
        .iter()
        .map(|n| {
            let mut e = String::new();
            for c in n.chars() {
                if c == '\\' {
                    // Escaped for the regex, then each backslash again for the string.
                    e.push_str("\\\\\\\\");
                    continue;
                }
                if ".+*?()|[]{}^$".contains(c) {
                    e.push_str("\\\\");
                }
                if c == '"' {
                    e.push('\\');
                }
                e.push(c);
            }
            e
        })
        .collect::<Vec<_>>()
        .join("|");
    template.replace("{nodes}", &alternation)
}

/// Most time a query may take.
const QUERY_TIMEOUT_S: u64 = 30;

/// One group's samples from Prometheus at `base`: `query_range` of `query` over
/// `[since_ms, until_ms]` every `step_s`.
pub fn query_range(
    base: &str,
    query: &str,
    since_ms: i64,
    until_ms: i64,
    step_s: f64,
) -> Result<Vec<f64>, SeriesError> {
    let fail = |message: String| SeriesError::Query {
        query: query.to_string(),
        message,
    };
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(QUERY_TIMEOUT_S)))
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut resp = agent
        .get(&format!("{}/api/v1/query_range", base.trim_end_matches('/')))
        .query("query", query)
        .query("start", format!("{:.3}", since_ms as f64 / 1000.0))
        .query("end", format!("{:.3}", until_ms as f64 / 1000.0))
        .query("step", format!("{step_s:.3}"))
        .call()
        .map_err(|e| fail(format!("{base}: {e}")))?;
    let body: serde_json::Value = resp
        .body_mut()
        .read_json()
        .map_err(|e| fail(format!("{base}: the answer is not JSON: {e}")))?;
    samples_from_query_range(&body, query)
}

#[cfg(test)]
mod series_tests {
    use super::*;

    #[test]
    fn group_samples_average_the_series_at_each_step() {
        let body = serde_json::json!({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"__name__": "nccl_allreduce_seconds", "host": "h1"}, "values": [[10, "1.0"], [20, "3.0"], [30, "NaN"]]},
            {"metric": {"__name__": "nccl_allreduce_seconds", "host": "h2"}, "values": [[10, "2.0"], [20, "5.0"]]}
        ]}});
        assert_eq!(samples_from_query_range(&body, "q").unwrap(), vec![1.5, 4.0]);
    }

    #[test]
    fn a_missing_series_fails_closed_naming_the_query() {
        let body = serde_json::json!({"status": "success", "data": {"resultType": "matrix", "result": []}});
        let q = r#"histogram_quantile(0.99, rate(request_latency_seconds_bucket{host=~"h1|h2"}[1m]))"#;
        let e = samples_from_query_range(&body, q).unwrap_err();
        assert_eq!(e, SeriesError::Missing { query: q.to_string() });
        assert!(
            e.to_string().contains("request_latency_seconds_bucket")
                && e.to_string().contains("fails closed")
        );
        let body = serde_json::json!({"status": "error", "error": "parse error at char 3"});
        assert!(
            samples_from_query_range(&body, "q{")
                .unwrap_err()
                .to_string()
                .contains("parse error")
        );
    }
}
