//! Voting along the paths of degraded flows (007, NSDI 2018; R-Pingmesh's localisation,
//! docs/reference/diagnosis.md §1.2): every flow that ran much slower than the others
//! (or never finished) gives one vote, split evenly over the links of its path; the link
//! with the most votes is the element the degraded flows share. A flow's path is what a
//! traceroute of its 5-tuple gives; the simulator writes each flow's (first QP's) path
//! in its `flows.json`.
//!
//! Votes corroborate: where a counter rule already names an end of the top link, the
//! vote joins that finding's evidence and raises its confidence; otherwise the vote is a
//! low finding of its own (congestion slows flows through a hot spot as surely as a
//! fault does, so a vote alone never says more than where to look).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::finding::{Class, Evidence, Finding, Severity};

/// A flow whose slowdown is this many times the median flow's is degraded.
const DEGRADED_FACTOR: f64 = 2.0;
/// The top link must collect at least this many degraded flows' votes, and this
/// factor more votes than the runner-up, to be named.
const MIN_VOTING_FLOWS: usize = 2;
const LEAD_FACTOR: f64 = 1.5;
/// Confidence a counter finding gains when the votes point at its link.
const CORROBORATION_GAIN: f64 = 0.1;
/// The evidence source of a vote.
pub const VOTE_SOURCE: &str = "path votes of degraded flows";

/// One flow: its endpoints, the egress ports along its path (sender NIC first), and how
/// much slower than on an empty fabric it ran (None: it never finished).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowPath {
    /// `host/nic` of the sender.
    pub src: String,
    /// `host/nic` of the receiver.
    pub dst: String,
    /// Egress ports along the path (`h0/mlx5_0/1`, `leaf0:4`, ...).
    pub path: Vec<String>,
    /// Completion time over the empty-fabric time; None when it did not finish.
    pub slowdown: Option<f64>,
}

/// Reads the flows of a simulator's `flows.json` (flows over NVLink have no path and
/// are left out).
pub fn flows_from_json(text: &str) -> Result<Vec<FlowPath>, String> {
    #[derive(Deserialize)]
    struct Row {
        src: String,
        dst: String,
        #[serde(default)]
        path: Vec<String>,
        slowdown: Option<f64>,
        #[serde(default)]
        nvlink: bool,
    }
    let rows: Vec<Row> = serde_json::from_str(text).map_err(|e| format!("line {}: {e}", e.line()))?;
    Ok(rows
        .into_iter()
        .filter(|r| !r.nvlink && !r.path.is_empty())
        .map(|r| FlowPath {
            src: r.src,
            dst: r.dst,
            path: r.path,
            slowdown: r.slowdown,
        })
        .collect())
}

/// The link an egress port sends on, as both its ends (the peer from the cabling).
fn link_of<'a>(port: &'a str, links: &'a [(String, String)]) -> (&'a str, Option<&'a str>) {
    let peer = links.iter().find_map(|(a, b)| {
        if a == port {
            Some(b.as_str())
        } else if b == port {
            Some(a.as_str())
        } else {
            None
        }
    });
    (port, peer)
}

/// Votes over `flows` and joins the result to `findings` (see the module comment).
pub fn vote(findings: &mut Vec<Finding>, flows: &[FlowPath], links: &[(String, String)]) {
    let mut slow: Vec<f64> = flows.iter().filter_map(|f| f.slowdown).collect();
    if slow.len() < 3 {
        return;
    }
    slow.sort_by(f64::total_cmp);
    let median = slow[slow.len() / 2];
    let degraded: Vec<&FlowPath> = flows
        .iter()
        .filter(|f| f.slowdown.is_none_or(|s| s >= DEGRADED_FACTOR * median))
        .collect();
    // egress port -> (votes, degraded flows through it)
    let mut votes: BTreeMap<&str, (f64, Vec<&FlowPath>)> = BTreeMap::new();
    for f in &degraded {
        let share = 1.0 / f.path.len() as f64;
        for p in &f.path {
            let e = votes.entry(p.as_str()).or_default();
            e.0 += share;
            e.1.push(f);
        }
    }
    let mut ranked: Vec<(&str, f64, Vec<&FlowPath>)> =
        votes.into_iter().map(|(p, (v, f))| (p, v, f)).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let Some((top, top_votes, top_flows)) = ranked.first() else {
        return;
    };
    let runner_up = ranked.get(1).map_or(0.0, |r| r.1);
    if top_flows.len() < MIN_VOTING_FLOWS || *top_votes < LEAD_FACTOR * runner_up {
        return;
    }
    let (port, peer) = link_of(top, links);
    let through = flows.iter().filter(|f| f.path.iter().any(|p| p == top)).count();
    let sample: Vec<String> = top_flows
        .iter()
        .take(4)
        .map(|f| match f.slowdown {
            Some(s) => format!("{}->{} {s:.1}x", f.src, f.dst),
            None => format!("{}->{} unfinished", f.src, f.dst),
        })
        .collect();
    let evidence = Evidence {
        source: VOTE_SOURCE.into(),
        value: format!(
            "{} of {} degraded flows (slowdown >= {DEGRADED_FACTOR}x the median {median:.2}x, or unfinished) cross {port}{}, {top_votes:.2} votes against {runner_up:.2} for the next link; {through} flows cross it in all ({})",
            top_flows.len(),
            degraded.len(),
            peer.map(|p| format!(" (to {p})")).unwrap_or_default(),
            sample.join(", ")
        ),
    };
    let names_link = |e: &str| e == port || Some(e) == peer;
    if let Some(f) = findings.iter_mut().find(|f| names_link(&f.entity)) {
        f.evidence.push(evidence);
        f.confidence = (f.confidence + CORROBORATION_GAIN).min(0.95);
        return;
    }
    findings.push(Finding {
        rule: "PATH-VOTE",
        class: Class::Link,
        entity: peer.map_or_else(|| port.to_string(), |p| format!("{port} -> {p}")),
        severity: Severity::Low,
        cause: format!(
            "the degraded flows share the link out of {port}: a fault there or a hot spot (votes alone do not tell which)"
        ),
        confidence: 0.4,
        scope: format!("{} degraded flow(s) through {port}", top_flows.len()),
        advice: vec![format!(
            "read both ends' error, pause and ECN counters of {port} over the same window; probe the pair paths through it (`ib_write_bw` between the hosts of the flows listed)"
        )],
        evidence: vec![evidence],
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(src: &str, dst: &str, path: &[&str], slowdown: Option<f64>) -> FlowPath {
        FlowPath {
            src: src.into(),
            dst: dst.into(),
            path: path.iter().map(|p| p.to_string()).collect(),
            slowdown,
        }
    }

    fn links() -> Vec<(String, String)> {
        [
            ("h0/m/1", "leaf0:0"),
            ("h1/m/1", "leaf0:1"),
            ("h2/m/1", "leaf1:0"),
            ("h3/m/1", "leaf1:1"),
        ]
        .iter()
        .chain(&[
            ("leaf0:2", "spine0:0"),
            ("leaf1:2", "spine0:1"),
            ("leaf0:3", "spine1:0"),
            ("leaf1:3", "spine1:1"),
        ])
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
    }

    /// Flows between the leaves; those into h2 (over either spine) are slow.
    fn flows() -> Vec<FlowPath> {
        vec![
            flow(
                "h0/m",
                "h2/m",
                &["h0/m/1", "leaf0:3", "spine1:1", "leaf1:0"],
                Some(6.0),
            ),
            flow(
                "h1/m",
                "h2/m",
                &["h1/m/1", "leaf0:2", "spine0:1", "leaf1:0"],
                Some(5.0),
            ),
            flow(
                "h0/m",
                "h3/m",
                &["h0/m/1", "leaf0:2", "spine0:1", "leaf1:1"],
                Some(1.1),
            ),
            flow(
                "h1/m",
                "h3/m",
                &["h1/m/1", "leaf0:3", "spine1:1", "leaf1:1"],
                Some(1.0),
            ),
            flow(
                "h2/m",
                "h0/m",
                &["h2/m/1", "leaf1:2", "spine0:0", "leaf0:0"],
                Some(1.2),
            ),
        ]
    }

    #[test]
    fn degraded_flows_vote_for_the_link_they_share() {
        let mut f = Vec::new();
        vote(&mut f, &flows(), &links());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].rule, f[0].severity, f[0].entity.as_str()),
            ("PATH-VOTE", Severity::Low, "leaf1:0 -> h2/m/1")
        );
        assert!(
            f[0].evidence[0].value.contains("2 of 2 degraded flows")
                && f[0].evidence[0].value.contains("0.50 votes against 0.25"),
            "{}",
            f[0].evidence[0].value
        );
        // Where the flows share two links equally, votes cannot tell them apart.
        let mut tied = flows();
        tied[1] = flow(
            "h1/m",
            "h2/m",
            &["h1/m/1", "leaf0:3", "spine1:1", "leaf1:0"],
            Some(5.0),
        );
        let mut f = Vec::new();
        vote(&mut f, &tied, &links());
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn a_vote_for_a_link_a_counter_rule_names_corroborates_it() {
        let mut f = vec![Finding {
            rule: "LINK-ERRORS",
            class: Class::Link,
            entity: "h2/m/1".into(),
            severity: Severity::Medium,
            cause: String::new(),
            confidence: 0.8,
            scope: String::new(),
            advice: vec![],
            evidence: vec![],
        }];
        vote(&mut f, &flows(), &links());
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!((f[0].confidence - 0.9).abs() < 1e-9);
        assert_eq!(f[0].evidence[0].source, "path votes of degraded flows");
    }

    #[test]
    fn evenly_slow_or_evenly_fast_flows_name_nothing() {
        let mut fast = flows();
        fast.iter_mut().for_each(|f| f.slowdown = Some(1.0));
        let mut f = Vec::new();
        vote(&mut f, &fast, &links());
        assert!(f.is_empty());
        // One slow flow is no pattern.
        fast[0].slowdown = Some(9.0);
        vote(&mut f, &fast, &links());
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn the_simulators_flows_json_reads_back() {
        let text = r#"[{"src":"h0/m","dst":"h1/m","path":["h0/m/1","leaf0:1"],"slowdown":1.5,"nvlink":false,"bytes":1},
                       {"src":"h0/g","dst":"h0/g","path":[],"slowdown":null,"nvlink":true}]"#;
        let f = flows_from_json(text).unwrap();
        assert_eq!(f, vec![flow("h0/m", "h1/m", &["h0/m/1", "leaf0:1"], Some(1.5))]);
        assert!(flows_from_json("[{").unwrap_err().starts_with("line 1:"));
    }
}
