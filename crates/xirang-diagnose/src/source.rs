//! Where a telemetry window comes from: the monitor's SQLite history, or a Prometheus
//! server over its HTTP API (PromQL `query_range` on the rules' metric names).

use std::collections::BTreeMap;
use std::path::Path;

use thiserror::Error;
use xirang_monitor::history::History;

use crate::window::{Series, Window, metric_names, rule_counters};
use xirang_telemetry::sim_out::{self, SimOut};
use xirang_telemetry::spec::Kind;

/// A source problem.
#[derive(Debug, Error)]
pub enum SourceError {
    /// The history file.
    #[error("history {path}: {message}")]
    History {
        /// File.
        path: String,
        /// What failed.
        message: String,
    },
    /// A simulator output directory.
    #[error("sim-out {path}: {message}")]
    SimOut {
        /// Directory.
        path: String,
        /// What failed.
        message: String,
    },
    /// The Prometheus server.
    #[error("prometheus {url}: {message}")]
    Prometheus {
        /// Base URL.
        url: String,
        /// What failed.
        message: String,
    },
}

/// Points per series asked of Prometheus at most (its limit is 11 000).
const PROMETHEUS_POINTS: i64 = 500;
/// Smallest query step, ms (the agent's fastest interval).
const MIN_STEP_MS: i64 = 1_000;

/// Reads the rules' series in `[since_ms, until_ms]` from a monitor history file.
pub fn from_history(path: &Path, since_ms: i64, until_ms: i64) -> Result<Window, SourceError> {
    from_history_of(path, since_ms, until_ms, &metric_names())
}

/// Reads the series of the metrics `names` in `[since_ms, until_ms]` from a monitor
/// history file.
pub fn from_history_of(
    path: &Path,
    since_ms: i64,
    until_ms: i64,
    names: &[String],
) -> Result<Window, SourceError> {
    let err = |m: String| SourceError::History {
        path: path.display().to_string(),
        message: m,
    };
    if let Err(e) = xirang_files::open_regular(path) {
        return Err(err(e.detail()));
    }
    let h = History::open_read_only(path).map_err(|e| err(e.to_string()))?;
    let mut series = Vec::new();
    for name in names {
        for w in h
            .query(since_ms, until_ms, Some(name.as_str()))
            .map_err(|e| err(e.to_string()))?
        {
            let labels: BTreeMap<String, String> = w.key.labels.into_iter().collect();
            let points: Vec<(i64, f64)> = w.points.iter().map(|p| (p.ts_ms, p.value)).collect();
            // A series comes as its minute roll-ups then its raw samples: one series.
            match series
                .iter_mut()
                .find(|s: &&mut Series| s.metric == w.key.name && s.labels == labels)
            {
                Some(s) => s.points.extend(points),
                None => series.push(Series {
                    metric: w.key.name.clone(),
                    labels,
                    points,
                }),
            }
        }
    }
    for s in &mut series {
        s.points.sort_by_key(|p| p.0);
    }
    Ok(Window {
        source: format!("history {}", path.display()),
        since_ms,
        until_ms,
        series,
        relative: false,
        ..Window::default()
    })
}

/// The PromQL selector for the rules' metrics.
pub fn promql_selector() -> String {
    selector_of(&metric_names())
}

/// The PromQL selector for these metrics.
pub fn selector_of(names: &[String]) -> String {
    format!("{{__name__=~\"{}\"}}", names.join("|"))
}

/// Reads the rules' series in `[since_ms, until_ms]` from a Prometheus server.
pub fn from_prometheus(url: &str, since_ms: i64, until_ms: i64) -> Result<Window, SourceError> {
    from_prometheus_of(url, since_ms, until_ms, &metric_names())
}

/// Reads the series of the metrics `names` in `[since_ms, until_ms]` from a Prometheus
/// server (one `query_range`).
pub fn from_prometheus_of(
    url: &str,
    since_ms: i64,
    until_ms: i64,
    names: &[String],
) -> Result<Window, SourceError> {
    let base = url.trim_end_matches('/');
    let step_ms = ((until_ms - since_ms) / PROMETHEUS_POINTS).max(MIN_STEP_MS);
    let query = selector_of(names);
    let params = [
        ("query", query.clone()),
        ("start", format!("{:.3}", since_ms as f64 / 1000.0)),
        ("end", format!("{:.3}", until_ms as f64 / 1000.0)),
        ("step", format!("{:.3}", step_ms as f64 / 1000.0)),
    ];
    prometheus_window(base, "query_range", &params, since_ms, until_ms)
}

/// One Prometheus API call (`query` or `query_range`) whose answer is a matrix, as a
/// window.
fn prometheus_window(
    base: &str,
    api: &str,
    params: &[(&str, String)],
    since_ms: i64,
    until_ms: i64,
) -> Result<Window, SourceError> {
    let err = |m: String| SourceError::Prometheus {
        url: base.to_string(),
        message: m,
    };
    let mut req = ureq::get(&format!("{base}/api/v1/{api}"));
    for (k, v) in params {
        req = req.query(k, v);
    }
    let query = params
        .iter()
        .find(|p| p.0 == "query")
        .map_or("", |p| p.1.as_str());
    let mut resp = req.call().map_err(|e| err(format!("{api} {query}: {e}")))?;
    let body: serde_json::Value = resp
        .body_mut()
        .read_json()
        .map_err(|e| err(format!("the answer is not JSON: {e}")))?;
    if body["status"] == "success" && body["data"]["resultType"] != "matrix" {
        return Err(err(format!(
            "{api} {query}: expected a matrix (series over time), found {}",
            body["data"]["resultType"]
        )));
    }
    let series = series_from_query_range(&body).map_err(err)?;
    Ok(Window {
        source: format!("prometheus {base}"),
        since_ms,
        until_ms,
        series,
        relative: false,
        ..Window::default()
    })
}

/// Reads the raw samples of the metrics `names` in the last `until_ms - since_ms` before
/// `until_ms` from a Prometheus server, with the times they were scraped at (a range
/// vector selector through the instant-query API). Rates over these are exact, where a
/// `query_range` answer gives each step the latest sample before it, whose age varies
/// by up to a scrape interval from step to step.
pub fn from_prometheus_raw_of(
    url: &str,
    since_ms: i64,
    until_ms: i64,
    names: &[String],
) -> Result<Window, SourceError> {
    let base = url.trim_end_matches('/');
    let range_ms = (until_ms - since_ms).max(MIN_STEP_MS);
    let params = [
        ("query", format!("{}[{range_ms}ms]", selector_of(names))),
        ("time", format!("{:.3}", until_ms as f64 / 1000.0)),
    ];
    prometheus_window(base, "query", &params, since_ms, until_ms)
}

/// The series of a Prometheus `query_range` answer (`{"status": "success", "data":
/// {"result": [{"metric": {...}, "values": [[t, "v"], ...]}]}}`). A series without a
/// `__name__` and a point that is not `[number, "number"]` are skipped: the answer is
/// outside input.
pub fn series_from_query_range(body: &serde_json::Value) -> Result<Vec<Series>, String> {
    if body["status"] != "success" {
        return Err(format!(
            "query failed: {}",
            body["error"].as_str().unwrap_or("no error text")
        ));
    }
    let mut series = Vec::new();
    for r in body["data"]["result"].as_array().into_iter().flatten() {
        let mut labels: BTreeMap<String, String> = r["metric"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
            .collect();
        let Some(metric) = labels.remove("__name__") else {
            continue;
        };
        let points = r["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let t = p.get(0)?.as_f64()?;
                let v: f64 = p.get(1)?.as_str()?.parse().ok()?;
                Some(((t * 1000.0).round() as i64, v))
            })
            .collect();
        series.push(Series {
            metric,
            labels,
            points,
        });
    }
    Ok(series)
}

/// Reads the rules' counters from a simulator output directory (`xirang sim --out`,
/// with `--sample`): times are from the run's start (Unix ms 0 = the run's start), and
/// every counter starts at 0, as a simulated fabric does.
pub fn from_sim_out(dir: &Path) -> Result<Window, SourceError> {
    from_sim_out_of(dir, &rule_counters())
}

/// Reads the counters `wanted` (hardware names) from a simulator output directory, as
/// [`from_sim_out`] does.
pub fn from_sim_out_of(dir: &Path, wanted: &[String]) -> Result<Window, SourceError> {
    let fail = |e: sim_out::SimOutError| SourceError::SimOut {
        path: e.path,
        message: e.message,
    };
    let out = SimOut::open(dir).map_err(fail)?;
    // The final counters alone are one sample: rates, rises and flaps need a series.
    if !out.is_sampled() {
        return Err(SourceError::SimOut {
            path: dir.display().to_string(),
            message: format!(
                "an unsampled run (no {}): diagnosis reads counters over time; \
                 run it again with --sample (for example --sample 10us)",
                sim_out::COUNTERS_SERIES
            ),
        });
    }
    let replay = xirang_monitor::replay::load(dir).map_err(|e| SourceError::SimOut {
        path: dir.display().to_string(),
        message: e.to_string(),
    })?;
    let samples = replay
        .rounds
        .iter()
        .flat_map(|(t_ns, values)| values.iter().map(move |c| ((*t_ns / 1_000) as i64, c)));
    let mut w = window_from_samples_of(format!("sim-out {}", dir.display()), samples, wanted);
    if let Some((text, links)) = out.optional(sim_out::LINKS).map_err(fail)? {
        add_links(&mut w, &text).map_err(|message| SourceError::SimOut {
            path: links.display().to_string(),
            message,
        })?;
    }
    if let Some((text, flows)) = out.optional(sim_out::FLOWS).map_err(fail)? {
        w.flows = crate::paths::flows_from_json(&text).map_err(|message| SourceError::SimOut {
            path: flows.display().to_string(),
            message,
        })?;
    }
    Ok(w)
}

/// Adds a fabric's cabling and nominal rates (`links.csv`: `port_a,port_b,rate_gbps`)
/// to a window.
pub fn add_links(w: &mut Window, csv: &str) -> Result<(), String> {
    for (i, line) in csv.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let [a, b, rate] = f[..] else {
            return Err(format!(
                "line {}: expected `port_a,port_b,rate_gbps`, found `{line}`",
                i + 1
            ));
        };
        let gbps: f64 = rate
            .parse()
            .ok()
            .filter(|r: &f64| r.is_finite() && *r > 0.0)
            .ok_or_else(|| format!("line {}: expected a rate in Gbit/s, found `{rate}`", i + 1))?;
        w.nominal_rate_mbps.insert(a.to_string(), gbps * 1000.0);
        w.nominal_rate_mbps.insert(b.to_string(), gbps * 1000.0);
        w.links.push((a.to_string(), b.to_string()));
    }
    Ok(())
}

/// A metric name and its labels.
type SeriesId = (String, Vec<(String, String)>);

/// A window from counter samples of a simulated run, `(µs since the run started,
/// counter)`; every series starts at 0 at time 0, as a simulated fabric does.
pub fn window_from_samples<'a>(
    source: String,
    samples: impl Iterator<Item = (i64, &'a xirang_telemetry::CounterValue)>,
) -> Window {
    window_from_samples_of(source, samples, &rule_counters())
}

/// [`window_from_samples`] keeping the counters `wanted` (hardware names).
pub fn window_from_samples_of<'a>(
    source: String,
    samples: impl Iterator<Item = (i64, &'a xirang_telemetry::CounterValue)>,
    wanted: &[String],
) -> Window {
    let mut by_key: BTreeMap<SeriesId, Vec<(i64, f64)>> = BTreeMap::new();
    let mut until_ms = 0;
    for (t_ms, c) in samples {
        until_ms = until_ms.max(t_ms);
        if !wanted.contains(&c.name) {
            continue;
        }
        let Ok(entity) = c.entity.parse::<xirang_telemetry::Entity>() else {
            continue;
        };
        let m = xirang_telemetry::metric::metric_for(&entity, &c.name, true);
        let labels: Vec<(String, String)> =
            m.labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        // A counter starts at 0 with the run; a level (a rate) has no such origin.
        let origin = if m.kind == Kind::Gauge {
            vec![]
        } else {
            vec![(0, 0.0)]
        };
        by_key
            .entry((m.name, labels))
            .or_insert(origin)
            .push((t_ms, c.value as f64 * m.scale));
    }
    let series = by_key
        .into_iter()
        .map(|((metric, labels), points)| Series {
            metric,
            labels: labels.into_iter().collect(),
            points,
        })
        .collect();
    Window {
        source,
        since_ms: 0,
        until_ms,
        series,
        relative: true,
        ..Window::default()
    }
}
