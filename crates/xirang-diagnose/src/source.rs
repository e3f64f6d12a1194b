//! Where a telemetry window comes from: the monitor's SQLite history, or a Prometheus
//! server over its HTTP API (PromQL `query_range` on the rules' metric names).

use std::collections::BTreeMap;
use std::path::Path;

use thiserror::Error;
use xirang_monitor::history::{History, Retention};

use crate::counters::{Series, Window, metric_names};

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
    let err = |m: String| SourceError::History {
        path: path.display().to_string(),
        message: m,
    };
    if !path.is_file() {
        return Err(err("no such file".into()));
    }
    let h = History::open(path, Retention::default()).map_err(|e| err(e.to_string()))?;
    let mut series = Vec::new();
    for name in metric_names() {
        for w in h
            .query(since_ms, until_ms, Some(&name))
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
    })
}

/// The PromQL selector for the rules' metrics.
pub fn promql_selector() -> String {
    format!("{{__name__=~\"{}\"}}", metric_names().join("|"))
}

/// Reads the rules' series in `[since_ms, until_ms]` from a Prometheus server.
pub fn from_prometheus(url: &str, since_ms: i64, until_ms: i64) -> Result<Window, SourceError> {
    let base = url.trim_end_matches('/');
    let err = |m: String| SourceError::Prometheus {
        url: base.to_string(),
        message: m,
    };
    let step_ms = ((until_ms - since_ms) / PROMETHEUS_POINTS).max(MIN_STEP_MS);
    let query = promql_selector();
    let mut resp = ureq::get(&format!("{base}/api/v1/query_range"))
        .query("query", &query)
        .query("start", format!("{:.3}", since_ms as f64 / 1000.0))
        .query("end", format!("{:.3}", until_ms as f64 / 1000.0))
        .query("step", format!("{:.3}", step_ms as f64 / 1000.0))
        .call()
        .map_err(|e| err(format!("query_range {query}: {e}")))?;
    let body: serde_json::Value = resp
        .body_mut()
        .read_json()
        .map_err(|e| err(format!("the answer is not JSON: {e}")))?;
    if body["status"] != "success" {
        return Err(err(format!(
            "query failed: {}",
            body["error"].as_str().unwrap_or("no error text")
        )));
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
    Ok(Window {
        source: format!("prometheus {base}"),
        since_ms,
        until_ms,
        series,
    })
}
