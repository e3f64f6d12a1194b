//! Application figures: an inference service's request p99 from the latency histogram
//! the services export (`xirang_service_request_seconds`, README's metric contract), and
//! a training job's collective time from the gauge the jobs export
//! (`xirang_job_collective_seconds`), when the window holds them.
//!
//! The collective time observed is the mean of the gauge's samples over the window, over
//! every series of the class (each host's rank 0, each op); the simulated one is the
//! mean time per iteration of the class's collectives that finished in the run.
//!
//! Both sides go through the same buckets: the observed p99 is Prometheus's
//! `histogram_quantile` over the window's increase of each bucket; the simulated one is
//! the same quantile over the simulated requests counted into the observed bucket
//! bounds, so the bucket resolution costs both sides alike.

use std::collections::BTreeMap;

use xirang_diagnose::window::{Window, increase};

use crate::counters::{AppFigure, Figure};

/// The buckets of the services' request-latency histogram.
pub const REQUEST_BUCKETS: &str = "xirang_service_request_seconds_bucket";
/// The training jobs' gauge of their last collective's time, s.
pub const COLLECTIVE_SECONDS: &str = "xirang_job_collective_seconds";
/// NCCL Inspector's mean collective time per GPU and bucket, µs (docs/reference/live-signals.md §A).
pub const INSPECTOR_EXEC_TIME_US: &str = xirang_telemetry::inspector::EXEC_TIME_US;
/// Seconds per microsecond.
const US: f64 = 1e-6;
/// Quantile the figure takes.
const QUANTILE: f64 = 0.99;
/// A microsecond: below it a latency residual is noise.
const LATENCY_FLOOR_S: f64 = 1e-6;

/// The quantile `q` of a cumulative histogram (`(le, count)` sorted by `le`, the last
/// `+Inf`) as Prometheus's `histogram_quantile` computes it: linear within the bucket
/// the rank falls in, the lowest bucket starting at 0, the `+Inf` bucket answering the
/// highest finite bound. `None` without observations.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    // As Prometheus: no +Inf bucket, or nothing but it, answers nothing (NaN there).
    if buckets.len() < 2 || !buckets.last()?.0.is_infinite() {
        return None;
    }
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            if count == lower.1 {
                return Some(le);
            }
            return Some(lower.0 + (le - lower.0) * (rank - lower.1) / (count - lower.1));
        }
        // Counts that fall (summed from exporters sampled at different times) are
        // taken at their running maximum.
        lower = (le, count.max(lower.1));
    }
    Some(lower.0)
}

/// Each class's cumulative bucket increases over the window: class -> `(le, count)`.
/// Series of one class with different bucket sets (two service versions) are summed
/// over the bounds they all have, so that the sum stays cumulative.
pub fn observed_buckets(w: &Window) -> BTreeMap<String, Vec<(f64, f64)>> {
    // class -> the series' other labels -> le bits -> (le, increase)
    type Groups = BTreeMap<Vec<(String, String)>, BTreeMap<u64, (f64, f64)>>;
    let mut by: BTreeMap<String, Groups> = BTreeMap::new();
    for s in w.series.iter().filter(|s| s.metric == REQUEST_BUCKETS) {
        let (Some(class), Some(le)) = (s.labels.get("class"), s.labels.get("le")) else {
            continue;
        };
        let Ok(le) = le.parse::<f64>() else { continue };
        if le.is_nan() {
            continue;
        }
        let rest: Vec<(String, String)> = s
            .labels
            .iter()
            .filter(|(k, _)| k.as_str() != "le")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let e = by
            .entry(class.clone())
            .or_default()
            .entry(rest)
            .or_default()
            .entry(le.to_bits())
            .or_insert((le, 0.0));
        e.1 += increase(&s.points);
    }
    by.into_iter()
        .filter_map(|(c, groups)| {
            let mut common: Option<std::collections::BTreeSet<u64>> = None;
            for g in groups.values() {
                let keys: std::collections::BTreeSet<u64> = g.keys().copied().collect();
                common = Some(match common {
                    None => keys,
                    Some(c) => c.intersection(&keys).copied().collect(),
                });
            }
            let common = common?;
            let mut v: Vec<(f64, f64)> = common
                .iter()
                .map(|bits| {
                    let le = f64::from_bits(*bits);
                    (le, groups.values().map(|g| g[bits].1).sum())
                })
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            Some((c, v))
        })
        .collect()
}

/// The request p99 figure of each class with a histogram in the window, carrying its
/// bucket bounds for the simulated side.
pub fn figures(w: &Window) -> Vec<Figure> {
    observed_buckets(w)
        .into_iter()
        .filter_map(|(class, b)| {
            let p99 = histogram_quantile(QUANTILE, &b)?;
            Some(Figure {
                name: format!("request p99 ({class})"),
                value: p99,
                unit: "s",
                floor: LATENCY_FLOOR_S,
                weight: 1.0,
                metrics: vec![REQUEST_BUCKETS.to_string()],
                app: Some(AppFigure::RequestP99 {
                    class,
                    les: b.iter().map(|x| x.0).collect(),
                }),
            })
        })
        .collect()
}

/// Each series' mean over its samples (NaN and negative ones left out), by class: `None`
/// for a series with no sample.
fn series_mean(s: &xirang_diagnose::window::Series, scale: f64) -> Option<f64> {
    let v: Vec<f64> = s
        .points
        .iter()
        .map(|p| p.1 * scale)
        .filter(|v| v.is_finite() && *v >= 0.0)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The class a series of NCCL Inspector's is counted in: its communicator's name when
/// that is a class of `classes` (name the job's communicator after its class), else the
/// only class when there is one, else the communicator's name (a figure the scenario
/// cannot simulate, which calibration leaves out and says so). A series of a collective
/// the class does not run counts in none.
fn inspector_class(
    s: &xirang_diagnose::window::Series,
    classes: &BTreeMap<String, Vec<String>>,
) -> Option<String> {
    let comm = s.labels.get("comm_name")?;
    let class = if classes.contains_key(comm) {
        comm.clone()
    } else if classes.len() == 1 {
        classes.keys().next()?.clone()
    } else {
        return Some(comm.clone());
    };
    let coll = s.labels.get("collective")?;
    classes[&class]
        .iter()
        .any(|op| op.eq_ignore_ascii_case(coll))
        .then_some(class)
}

/// Each class's mean collective time over the window, s, and the metric it came from:
/// each series of the class averaged over its samples, then the series averaged, so that
/// a series sampled more often weighs no more. Xirang's gauge (`xirang_job_collective_seconds`,
/// by `class`) where the class has it, else NCCL Inspector's
/// `nccl_collective_exec_time_microseconds`: the series counted in the class by
/// [`inspector_class`] (its collectives, by communicator name), of its largest
/// message-size bucket only (the simulated side is one size per collective, and the
/// largest messages are the ones the network's bandwidth decides; a bucket idle in part
/// of the window simply has fewer samples there). `classes`: the scenario's classes with
/// collectives, and their collectives under NCCL's names.
pub fn observed_collective_seconds(
    w: &Window,
    classes: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, (f64, &'static str)> {
    // (class, metric) -> (message-size bucket's lower bound, sum of series means, series)
    let mut by: BTreeMap<(String, &'static str), (u64, f64, usize)> = BTreeMap::new();
    for s in &w.series {
        let (class, metric, scale, bucket) = if s.metric == COLLECTIVE_SECONDS {
            let Some(class) = s.labels.get("class") else {
                continue;
            };
            (class.clone(), COLLECTIVE_SECONDS, 1.0, 0)
        } else if s.metric == INSPECTOR_EXEC_TIME_US {
            let Some(class) = inspector_class(s, classes) else {
                continue;
            };
            let bucket = s
                .labels
                .get("message_size")
                .and_then(|b| xirang_telemetry::inspector::bucket_range(b))
                .map_or(0, |r| r.0);
            (class, INSPECTOR_EXEC_TIME_US, US, bucket)
        } else {
            continue;
        };
        let Some(mean) = series_mean(s, scale) else {
            continue;
        };
        let e = by.entry((class, metric)).or_insert((bucket, 0.0, 0));
        if bucket > e.0 {
            *e = (bucket, 0.0, 0);
        }
        if bucket == e.0 {
            e.1 += mean;
            e.2 += 1;
        }
    }
    let mut out: BTreeMap<String, (f64, &'static str)> = BTreeMap::new();
    for ((class, metric), (_, sum, n)) in by {
        // Xirang's own gauge first: BTreeMap order puts `nccl_...` before `xirang_...`.
        if metric == COLLECTIVE_SECONDS || !out.contains_key(&class) {
            out.insert(class, (sum / n as f64, metric));
        }
    }
    out
}

/// The collective time figure of each class the jobs exported.
pub fn collective_figures(w: &Window, classes: &BTreeMap<String, Vec<String>>) -> Vec<Figure> {
    observed_collective_seconds(w, classes)
        .into_iter()
        .map(|(class, (v, metric))| Figure {
            name: format!("collective time ({class})"),
            value: v,
            unit: "s",
            floor: LATENCY_FLOOR_S,
            weight: 1.0,
            metrics: vec![metric.to_string()],
            app: Some(AppFigure::CollectiveTime { class }),
        })
        .collect()
}

/// The simulated collective time of `class`: the mean time per iteration of its
/// collectives, one that did not finish counted as the run's length `end_s` (it took at
/// least that); `end_s` when the class has none.
pub fn simulated_collective(r: &xirang_sim::RunResult, class: &str, end_s: f64) -> f64 {
    let t: Vec<f64> = r
        .collectives
        .iter()
        .filter(|c| c.class == class)
        .map(|c| c.time_ps.map_or(end_s, |ps| ps as f64 * 1e-12))
        .collect();
    if t.is_empty() {
        end_s
    } else {
        t.iter().sum::<f64>() / t.len() as f64
    }
}

/// The simulated request p99 of `class` through the bucket bounds `les`: the answered
/// requests of that class counted cumulatively into them.
pub fn simulated(r: &xirang_sim::RunResult, class: &str, les: &[f64]) -> Option<f64> {
    let lat: Vec<f64> = r
        .requests
        .iter()
        .filter(|q| q.class == class)
        .filter_map(|q| q.latency_ps)
        .map(|ps| ps as f64 * 1e-12)
        .collect();
    let buckets: Vec<(f64, f64)> = les
        .iter()
        .map(|&le| (le, lat.iter().filter(|&&x| x <= le).count() as f64))
        .collect();
    histogram_quantile(QUANTILE, &buckets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collective_time_is_the_mean_of_every_sample_of_the_class() {
        let series = |class: &str, op: &str, v: &[f64]| xirang_diagnose::window::Series {
            metric: COLLECTIVE_SECONDS.into(),
            labels: [("class", class), ("op", op)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            points: v.iter().enumerate().map(|(i, &x)| (i as i64 * 1000, x)).collect(),
        };
        let w = Window {
            series: vec![
                series("training", "all_reduce", &[0.002, 0.004, 0.003]),
                series("training", "all_gather", &[0.005, f64::NAN]),
                series("other", "all_reduce", &[]),
            ],
            ..Window::default()
        };
        let m = observed_collective_seconds(&w, &BTreeMap::new());
        assert_eq!(m.len(), 1, "a class without samples has no figure: {m:?}");
        // (0.003 + 0.005) / 2: each series' mean, then the series'.
        assert!((m["training"].0 - 0.004).abs() < 1e-15);
        let f = collective_figures(&w, &BTreeMap::new());
        assert_eq!(f[0].name, "collective time (training)");
        assert_eq!(
            f[0].app,
            Some(AppFigure::CollectiveTime {
                class: "training".into()
            })
        );
    }

    #[test]
    fn inspector_series_count_in_their_communicators_class() {
        let series =
            |comm: &str, gpu: &str, coll: &str, bucket: &str, v: &[f64]| xirang_diagnose::window::Series {
                metric: INSPECTOR_EXEC_TIME_US.into(),
                labels: [
                    ("comm_name", comm),
                    ("gpu", gpu),
                    ("collective", coll),
                    ("message_size", bucket),
                    ("node", "h1"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
                points: v.iter().enumerate().map(|(i, &x)| (i as i64 * 1000, x)).collect(),
            };
        let w = Window {
            series: vec![
                // GPU0 idle for one interval (a vanished sample), GPU1 at every one.
                series("training", "GPU0", "AllReduce", "5-6MB", &[2000.0, 4000.0]),
                series(
                    "training",
                    "GPU1",
                    "AllReduce",
                    "5-6MB",
                    &[3000.0, 3000.0, 3000.0],
                ),
                // Smaller messages, and a collective the class does not run: not counted.
                series("training", "GPU0", "AllReduce", "1-2KB", &[40.0]),
                series("training", "GPU0", "Broadcast", "64-65MB", &[90_000.0]),
                series("unknown", "GPU0", "AllReduce", "5-6MB", &[9000.0]),
            ],
            ..Window::default()
        };
        let ops = |c: &str| (c.to_string(), vec!["AllReduce".to_string()]);
        let classes: BTreeMap<String, Vec<String>> =
            [ops("training"), ops("inference")].into_iter().collect();
        let m = observed_collective_seconds(&w, &classes);
        assert!((m["training"].0 - 0.003).abs() < 1e-12, "{m:?}");
        assert_eq!(m["training"].1, INSPECTOR_EXEC_TIME_US);
        // An unnamed communicator is the class only when the scenario has one.
        assert!(m.contains_key("unknown"));
        let one: BTreeMap<String, Vec<String>> = [ops("training")].into_iter().collect();
        let one = observed_collective_seconds(&w, &one);
        assert_eq!(one.len(), 1);
        // Each GPU's series weighs the same: (0.003 + 0.003 + 0.009) / 3.
        assert!((one["training"].0 - 0.005).abs() < 1e-12, "{one:?}");
        // Xirang's own gauge, where the class has it, is taken instead.
        let mut w2 = w.clone();
        w2.series.push(xirang_diagnose::window::Series {
            metric: COLLECTIVE_SECONDS.into(),
            labels: [("class".to_string(), "training".to_string())]
                .into_iter()
                .collect(),
            points: vec![(0, 0.005)],
        });
        assert_eq!(
            observed_collective_seconds(&w2, &classes)["training"],
            (0.005, COLLECTIVE_SECONDS)
        );
    }

    #[test]
    fn quantiles_as_prometheus_computes_them() {
        // 100 observations: 50 under 1 ms, 40 more under 2 ms, 10 more under 4 ms.
        let b = [
            (0.001, 50.0),
            (0.002, 90.0),
            (0.004, 100.0),
            (f64::INFINITY, 100.0),
        ];
        // Rank 99 falls in (2 ms, 4 ms], 9 of its 10: 2 + 2 * 0.9 ms.
        assert!((histogram_quantile(0.99, &b).unwrap() - 0.0038).abs() < 1e-12);
        // Rank 25 in the first bucket, from 0.
        assert!((histogram_quantile(0.25, &b).unwrap() - 0.0005).abs() < 1e-12);
        // Everything beyond the last finite bound: that bound.
        let inf = [(0.001, 0.0), (f64::INFINITY, 10.0)];
        assert_eq!(histogram_quantile(0.99, &inf), Some(0.001));
        assert_eq!(
            histogram_quantile(0.99, &[(0.001, 0.0), (f64::INFINITY, 0.0)]),
            None
        );
        assert_eq!(histogram_quantile(0.99, &[]), None);
        // No +Inf bucket, or only it: nothing, as Prometheus's NaN.
        assert_eq!(histogram_quantile(0.99, &[(0.001, 5.0), (0.002, 10.0)]), None);
        assert_eq!(histogram_quantile(0.99, &[(f64::INFINITY, 10.0)]), None);
    }

    #[test]
    fn series_with_different_buckets_are_summed_over_the_bounds_they_share() {
        use xirang_diagnose::window::Series;
        let series = |node: &str, le: &str, n: f64| Series {
            metric: REQUEST_BUCKETS.into(),
            labels: [("class", "inference"), ("node", node), ("le", le)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            points: vec![(0, 0.0), (1000, n)],
        };
        let w = Window {
            series: vec![
                series("a", "0.01", 10.0),
                series("a", "+Inf", 10.0),
                series("b", "0.005", 4.0),
                series("b", "0.05", 10.0),
                series("b", "+Inf", 10.0),
            ],
            ..Window::default()
        };
        let b = &observed_buckets(&w)["inference"];
        assert_eq!(b, &vec![(f64::INFINITY, 20.0)]);
    }
}
