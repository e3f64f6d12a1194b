//! What a fault costs the jobs on its host, from their own figures in the same window:
//! NCCL Inspector's collective time and bus bandwidth per communicator, collective and
//! message-size bucket (docs/reference/live-signals.md §A), added to the findings about
//! that host's NICs and links as evidence and scope. The figures judge nothing: the
//! counters found the fault; these say what the application saw meanwhile.

use std::collections::BTreeMap;

use xirang_telemetry::inspector::{BUS_BANDWIDTH_GBS, EXEC_TIME_US, bucket_range};

use crate::finding::{Evidence, Finding};
use crate::window::Window;

/// Buckets quoted per finding (the largest messages first: the bandwidth-bound ones).
const MAX_QUOTED: usize = 3;

/// The hosts a finding's entity names: `h1/mlx5_0/1` → h1, `h1/mlx5_0/1<->leaf1:Ethernet0`
/// → h1, `h1<->h2` → both; a switch port names none.
fn hosts_of(entity: &str) -> Vec<String> {
    entity
        .split("<->")
        .filter(|end| !end.contains(':') || end.contains('/'))
        .map(|end| end.split('/').next().unwrap_or(end))
        // A Prometheus `instance` (`host:9316`) stands for its host.
        .map(|h| h.rsplit_once(':').map_or(h, |(h, _)| h).to_string())
        .filter(|h| !h.is_empty())
        .collect()
}

/// One bucket's figures on one node over the window.
#[derive(Default)]
struct Figures {
    time_us: Vec<f64>,
    busbw_gbs: Vec<f64>,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Adds, to each finding about a host, the Inspector figures of that host's jobs in the
/// window (each series' samples averaged; a bucket idle in part of the window simply
/// has fewer samples).
pub fn attach(w: &Window, findings: &mut [Finding]) {
    // node -> (comm_name, collective, bucket) -> figures
    let mut by: BTreeMap<String, BTreeMap<(String, String, String), Figures>> = BTreeMap::new();
    for s in w
        .series
        .iter()
        .filter(|s| s.metric == EXEC_TIME_US || s.metric == BUS_BANDWIDTH_GBS)
    {
        let label = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
        // The job names its host (`node`, its hostname); the counters' findings name it
        // as Prometheus knows the agent (`instance`, often an address): a series counts
        // under both, so either finds it.
        let mut keys: Vec<String> = s.labels.get("node").cloned().into_iter().collect();
        if let Some(i) = s.labels.get("instance") {
            let h = i.rsplit_once(':').map_or(i.as_str(), |(h, _)| h).to_string();
            if !keys.contains(&h) {
                keys.push(h);
            }
        }
        let values: Vec<f64> = s
            .points
            .iter()
            .map(|p| p.1)
            .filter(|v| v.is_finite() && *v >= 0.0)
            .collect();
        for key in keys {
            let f = by
                .entry(key)
                .or_default()
                .entry((label("comm_name"), label("collective"), label("message_size")))
                .or_default();
            if s.metric == EXEC_TIME_US {
                f.time_us.extend(&values);
            } else {
                f.busbw_gbs.extend(&values);
            }
        }
    }
    if by.is_empty() {
        return;
    }
    for f in findings.iter_mut() {
        for host in hosts_of(&f.entity) {
            let Some(buckets) = by.get(&host) else { continue };
            let mut quoted: Vec<(&(String, String, String), &Figures)> = buckets.iter().collect();
            quoted.sort_by_key(|((_, _, b), _)| std::cmp::Reverse(bucket_range(b).map_or(0, |r| r.0)));
            let mut scope = Vec::new();
            for ((comm, coll, bucket), fig) in quoted.into_iter().take(MAX_QUOTED) {
                let (Some(t), bw) = (mean(&fig.time_us), mean(&fig.busbw_gbs)) else {
                    continue;
                };
                let bw_text = bw
                    .map(|b| format!(", bus bandwidth {b:.1} GB/s"))
                    .unwrap_or_default();
                f.evidence.push(Evidence {
                    source: format!(
                        "{} {EXEC_TIME_US}{{node=\"{host}\",comm_name=\"{comm}\",collective=\"{coll}\",message_size=\"{bucket}\"}}",
                        w.source
                    ),
                    value: format!("{t:.1} µs mean over {} samples{bw_text} (NCCL Inspector)", fig.time_us.len()),
                });
                scope.push(format!("{coll} {bucket} of `{comm}` at {t:.0} µs{bw_text}"));
            }
            if !scope.is_empty() {
                f.scope = format!("{}; jobs on {host} meanwhile: {}", f.scope, scope.join("; "));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::Series;

    #[test]
    fn a_host_findings_get_its_jobs_figures() {
        assert_eq!(hosts_of("h1/mlx5_0/1"), vec!["h1"]);
        assert_eq!(hosts_of("h1/mlx5_0/1<->leaf1:Ethernet0"), vec!["h1"]);
        assert_eq!(hosts_of("h1<->h2"), vec!["h1", "h2"]);
        assert_eq!(hosts_of("leaf1:Ethernet0"), Vec::<String>::new());
        assert_eq!(hosts_of("10.0.0.1:9316/mlx5_0/1"), vec!["10.0.0.1"]);
        let s = |m: &str, bucket: &str, v: f64| {
            Series::new(
                m,
                &[
                    ("node", "h1"),
                    ("comm_name", "dp"),
                    ("collective", "AllReduce"),
                    ("message_size", bucket),
                ],
                &[(0, v), (1000, v)],
            )
        };
        let w = Window {
            source: "prometheus http://p:9090".into(),
            series: vec![
                s(EXEC_TIME_US, "5-6MB", 1046.0),
                s(BUS_BANDWIDTH_GBS, "5-6MB", 9.5),
                s(EXEC_TIME_US, "1-2KB", 30.0),
            ],
            ..Window::default()
        };
        let mut f = vec![Finding {
            rule: "LINK-ERRORS",
            class: crate::finding::Class::Link,
            entity: "h1/mlx5_0/1".into(),
            severity: crate::finding::Severity::High,
            cause: String::new(),
            confidence: 0.9,
            scope: "h1's traffic".into(),
            advice: vec![],
            evidence: vec![],
        }];
        attach(&w, &mut f);
        assert_eq!(
            f[0].scope,
            "h1's traffic; jobs on h1 meanwhile: AllReduce 5-6MB of `dp` at 1046 µs, bus bandwidth 9.5 GB/s; AllReduce 1-2KB of `dp` at 30 µs"
        );
        assert_eq!(f[0].evidence.len(), 2);
        assert!(
            f[0].evidence[0].source.ends_with(r#"message_size="5-6MB"}"#),
            "{:?}",
            f[0].evidence
        );
        // A job whose hostname is not how Prometheus knows its agent: found by `instance`.
        let w = Window {
            series: vec![Series::new(
                EXEC_TIME_US,
                &[
                    ("node", "gpu-h1.cluster"),
                    ("instance", "10.0.0.5:9316"),
                    ("message_size", "5-6MB"),
                ],
                &[(0, 800.0)],
            )],
            ..Window::default()
        };
        let mut f = vec![Finding {
            entity: "10.0.0.5:9316/mlx5_0/1".into(),
            scope: String::new(),
            evidence: vec![],
            ..f.remove(0)
        }];
        attach(&w, &mut f);
        assert!(
            f[0].scope.contains("jobs on 10.0.0.5 meanwhile") && f[0].scope.contains("800 µs"),
            "{}",
            f[0].scope
        );
    }
}
