//! What the inventory adds to a telemetry window (`xirang diagnose --inventory DIR`,
//! the directory `xirang audit` and `xirang rollout` read): the cabling and each port's
//! nominal rate, which live counters do not carry, so that both ends of a link are
//! compared and a port is judged against its configured speed; and the audit's
//! configuration findings, which explain what the counters show (docs/reference/diagnosis.md §2's
//! "check configuration" column).

use std::collections::BTreeMap;

use xirang_audit::cluster::Cluster;

use crate::finding::{Class, Evidence, Finding, Severity};
use crate::window::Window;

/// The host token a window uses for `host`: the name itself, or Prometheus's
/// `instance` (`host:port`) when the series carry no `host` label.
fn host_tokens(w: &Window) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for s in &w.series {
        let token = s.labels.get("host").or_else(|| s.labels.get("instance"));
        if let Some(t) = token {
            let bare = t.rsplit_once(':').map(|(h, _)| h).unwrap_or(t);
            out.entry(bare.to_string()).or_insert_with(|| t.clone());
            out.entry(t.clone()).or_insert_with(|| t.clone());
        }
    }
    out
}

/// Adds the inventory's cabling to `w.links` and the switch ports' configured speeds
/// (SONiC `PORT|<port>.speed`, Mb/s) to `w.nominal_rate_mbps`, for both ends of each
/// cable. Returns how many links were added.
pub fn apply(w: &mut Window, c: &Cluster) -> usize {
    let Some(cabling) = &c.cabling else {
        return 0;
    };
    let tokens = host_tokens(w);
    let speed = |switch: &str, port: &str| {
        c.switch(switch)
            .and_then(|s| s.db.ports.get(port))
            .and_then(|p| p.speed_mbps)
            .map(|m| m as f64)
    };
    let mut added = 0;
    for cable in &cabling.links {
        let sw_end = format!("{}:{}", cable.switch, cable.port);
        let other = match (&cable.host, &cable.nic, &cable.peer_switch, &cable.peer_port) {
            (Some(host), Some(nic), _, _) => {
                // The cabling may name the netdev; counters are per RDMA device port.
                let inv = c.hosts.iter().find(|h| h.hostname == *host);
                let dev = inv
                    .and_then(|h| h.rdma.iter().find(|d| d.name == *nic || d.netdevs.contains(nic)))
                    .map(|d| d.name.clone())
                    .unwrap_or_else(|| nic.clone());
                let token = tokens.get(host).cloned().unwrap_or_else(|| host.clone());
                format!("{token}/{dev}/1")
            }
            (_, _, Some(ps), Some(pp)) => format!("{ps}:{pp}"),
            _ => continue,
        };
        if let Some(mbps) = speed(&cable.switch, &cable.port) {
            w.nominal_rate_mbps.insert(sw_end.clone(), mbps);
            w.nominal_rate_mbps.entry(other.clone()).or_insert(mbps);
        }
        if let (Some(ps), Some(pp)) = (&cable.peer_switch, &cable.peer_port)
            && let Some(mbps) = speed(ps, pp)
        {
            w.nominal_rate_mbps.insert(other.clone(), mbps);
        }
        if !w
            .links
            .iter()
            .any(|(a, b)| (*a == sw_end && *b == other) || (*a == other && *b == sw_end))
        {
            w.links.push((sw_end, other));
            added += 1;
        }
    }
    added
}

/// The audit's findings as diagnosis findings: errors medium, warnings low, notes left
/// out; where a counter finding names the same place, the configuration line is added
/// to its evidence instead (the counters show the symptom, the configuration the cause).
pub fn merge_audit(findings: &mut Vec<Finding>, c: &Cluster) {
    use xirang_audit::rules::{Layer, Severity as AuditSeverity};
    // Only the counter findings take configuration evidence, not each other's.
    let counted = findings.len();
    for a in xirang_audit::rules::audit(c) {
        let severity = match a.severity {
            AuditSeverity::Error => Severity::Medium,
            AuditSeverity::Warning => Severity::Low,
            AuditSeverity::Info => continue,
        };
        let evidence: Vec<Evidence> = a
            .evidence
            .iter()
            .map(|e| Evidence {
                source: format!("audit {}: {}", a.rule, e.source),
                value: e.value.clone(),
            })
            .collect();
        // `h3/mlx5_1` covers the counter entity `h3/mlx5_1/1`; `leaf1:Ethernet8` is itself.
        let covers = |entity: &str| {
            let bare = strip_instance_port(entity);
            bare == a.entity || bare.starts_with(&format!("{}/", a.entity))
        };
        if let Some(f) = findings[..counted].iter_mut().find(|f| covers(&f.entity)) {
            f.evidence.extend(evidence);
            f.advice.push(format!("configuration ({}): {}", a.rule, a.fix));
            f.confidence = (f.confidence + 0.1).min(0.95);
            continue;
        }
        let on_switch = a.entity.contains(':') && !a.entity.contains('/');
        let class = match (a.layer, on_switch) {
            (_, true) => Class::SwitchPort,
            (Layer::Physical, false) => Class::Nic,
            (Layer::Application, false) => Class::AppConfig,
            _ => Class::HostConfig,
        };
        findings.push(Finding {
            rule: a.rule,
            class,
            entity: a.entity.clone(),
            severity,
            cause: format!("{} (configuration, from the audit)", a.message),
            confidence: 0.7,
            scope: format!("traffic through {}", a.entity),
            advice: vec![a.fix.clone()],
            evidence,
        });
    }
}

/// `h1:9100/mlx5_0/1` → `h1/mlx5_0/1` (Prometheus's instance label carries the port).
fn strip_instance_port(entity: &str) -> String {
    match entity.split_once('/') {
        Some((host, rest)) => {
            let bare = host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host);
            format!("{bare}/{rest}")
        }
        None => entity.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::{Series, diagnose_window};
    use xirang_telemetry::Entity;
    use xirang_telemetry::metric::metric_for;

    /// The audit's fixture cluster: 8 hosts with 2 NICs, NIC i of every host cabled to
    /// leaf i+1 at port 4 x (host - 1), 100 Gbit/s ports.
    fn cluster() -> Cluster {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../xirang-audit/test_data/cluster");
        Cluster::load_dir(&dir).unwrap()
    }

    /// A NIC-port series as Prometheus gives it (`instance` = `host:9100`).
    fn nic_series(host: &str, counter: &str, values: [f64; 2]) -> Series {
        let e: Entity = format!("{host}/mlx5_1/1").parse().unwrap();
        let m = metric_for(&e, counter, true);
        let mut labels: BTreeMap<String, String> =
            m.labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        labels.remove("host");
        labels.insert("instance".into(), format!("{host}:9100"));
        Series {
            metric: m.name,
            labels,
            points: vec![(0, values[0] * m.scale), (60_000, values[1] * m.scale)],
        }
    }

    fn window(series: Vec<Series>) -> Window {
        Window {
            source: "test".into(),
            until_ms: 60_000,
            series,
            ..Window::default()
        }
    }

    #[test]
    fn the_cabling_and_port_speeds_join_live_series() {
        // h3's second NIC trained at 50 of 100 Gbit/s; it is the only NIC in the window,
        // so without the inventory there is nothing to compare it with.
        let w0 = window(vec![
            nic_series("h3", "rate", [50_000.0, 50_000.0]),
            nic_series("h3", "port_xmit_data", [0.0, 1e9]),
        ]);
        assert!(diagnose_window(&w0).is_empty());
        let mut w = w0.clone();
        let c = cluster();
        // 16 NIC cables and one between the leaves.
        assert_eq!(apply(&mut w, &c), 17);
        assert!(
            w.links
                .contains(&("leaf2:Ethernet8".into(), "h3:9100/mlx5_1/1".into())),
            "{:?}",
            w.links
        );
        assert_eq!(w.nominal_rate_mbps["h3:9100/mlx5_1/1"], 100_000.0);
        assert_eq!(w.nominal_rate_mbps["leaf2:Ethernet8"], 100_000.0);
        let f = diagnose_window(&w);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].rule, f[0].entity.as_str()),
            ("LINK-SLOW", "h3:9100/mlx5_1/1")
        );
        assert!(f[0].cause.contains("instead of 100"), "{}", f[0].cause);
        // Applying twice adds nothing.
        assert_eq!(apply(&mut w, &c), 0);
    }

    #[test]
    fn audit_findings_join_the_report_or_the_counter_finding_they_explain() {
        let mut c = cluster();
        let mut findings = Vec::new();
        merge_audit(&mut findings, &c);
        assert!(findings.is_empty(), "the fixture cluster is clean: {findings:#?}");
        // h5's second NIC on another firmware than its peers.
        let h5 = c.hosts.iter_mut().find(|h| h.hostname == "h5").unwrap();
        h5.rdma.iter_mut().find(|d| d.name == "mlx5_1").unwrap().fw_ver = Some("22.36.1010".into());
        merge_audit(&mut findings, &c);
        // Off the policy's allowed list (an audit error: medium), and off its peers' (a
        // warning: low).
        let policy = findings
            .iter()
            .find(|f| f.rule == "PHY-FW-POLICY")
            .expect("a policy finding");
        assert_eq!(
            (policy.class, policy.entity.as_str(), policy.severity),
            (Class::Nic, "h5/mlx5_1", Severity::Medium)
        );
        let drift = findings
            .iter()
            .find(|f| f.rule == "PHY-FW-DRIFT")
            .expect("a drift finding");
        assert_eq!(drift.severity, Severity::Low);
        assert!(
            drift.cause.ends_with("(configuration, from the audit)"),
            "{}",
            drift.cause
        );
        assert!(
            drift.evidence.iter().any(|e| e.value.contains("22.36.1010")),
            "{drift:#?}"
        );
        // With a counter finding on that NIC's port, the configuration is its evidence.
        let mut w = window(vec![
            nic_series("h5", "rate", [50_000.0, 50_000.0]),
            nic_series("h5", "port_xmit_data", [0.0, 1e9]),
        ]);
        apply(&mut w, &c);
        let mut findings = diagnose_window(&w);
        let before = findings[0].evidence.len();
        merge_audit(&mut findings, &c);
        assert_eq!(findings.len(), 1, "{findings:#?}");
        assert_eq!(findings[0].rule, "LINK-SLOW");
        assert!(findings[0].evidence.len() > before);
        assert!(
            findings[0]
                .advice
                .iter()
                .any(|a| a.starts_with("configuration (PHY-FW-DRIFT)"))
        );
        assert!(
            findings[0]
                .advice
                .iter()
                .any(|a| a.starts_with("configuration (PHY-FW-POLICY)"))
        );
    }
}
