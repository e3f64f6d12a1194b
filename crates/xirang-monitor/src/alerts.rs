//! Alert rules: a signal above a threshold for some consecutive rounds fires for that
//! entity, exported as `xirang_alert{rule,entity,severity,layer} 1`.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use xirang_telemetry::metric::Metric;
use xirang_telemetry::spec::Kind;

use crate::collect::{Point, Round};

/// The shipped default rules (monitoring/alert-rules.toml).
pub const DEFAULT_RULES: &str = include_str!("../../../monitoring/alert-rules.toml");

/// One rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Rule name (the `rule` label).
    pub name: String,
    /// Metric it watches.
    pub signal: String,
    /// Fires when the signal is above this.
    pub above: f64,
    /// Consecutive rounds above before it fires.
    #[serde(default = "one")]
    pub for_rounds: u32,
    /// `warning` or `critical`.
    pub severity: String,
    /// `physical`, `network` or `application`.
    pub layer: String,
    /// What it means.
    pub summary: String,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    rule: Vec<Rule>,
}

/// Why a rules file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct RulesError {
    /// The file.
    pub path: String,
    /// The line the problem is on, when it is on one.
    pub line: Option<usize>,
    /// What is wrong: the key path, what was expected and what was found.
    pub message: String,
}

/// Every gauge the agent derives or reads that a rule can watch by its exact name: the
/// health signals computed from counter deltas (`collect::signals`), the PCIe link
/// gauges, the NCCL RAS feed's process counts, and what the simulator's replay and twin
/// serve. `tests/shipped.rs` keeps it true: every name the agent emits must be known.
pub const SIGNALS: &[&str] = &[
    "xirang_pfc_pause_ratio",
    "xirang_ecn_marked_ratio",
    "xirang_cnp_sent_per_second",
    "xirang_cnp_handled_per_second",
    "xirang_link_errors_per_second",
    "xirang_phy_errors_per_second",
    "xirang_link_flaps",
    "xirang_retransmissions_per_second",
    "xirang_discards_per_second",
    "xirang_pcie_link_downgraded",
    "xirang_pcie_link_width",
    "xirang_pcie_link_speed_gts",
    "xirang_nccl_ras_connected",
    "xirang_nccl_ras_dead_processes",
    "xirang_nccl_ras_unresponsive_processes",
    "xirang_job_collective_seconds",
    "xirang_collector_duration_seconds",
    "xirang_service_request_seconds_bucket",
    xirang_telemetry::inspector::EXEC_TIME_US,
    xirang_telemetry::inspector::BUS_BANDWIDTH_GBS,
];

/// Families whose members are named after what a device or switch reports, so no list
/// can hold them: a NIC's hardware and ethtool counters, per-priority counters, a
/// switch's SAI statistics, node_exporter's InfiniBand and PCIe series.
pub const SIGNAL_FAMILIES: &[&str] = &[
    "xirang_infiniband_",
    "xirang_ethtool_",
    "xirang_priority_",
    "xirang_pfc_",
    "xirang_netdev_",
    "xirang_switch_",
    "xirang_nccl_ras_",
    "xirang_collector_",
    "xirang_history_",
    "node_infiniband_",
    "node_pcidevice_",
];

/// Whether the agent can ever produce a series named `name`.
pub fn signal_known(name: &str) -> bool {
    SIGNALS.contains(&name)
        || SIGNAL_FAMILIES
            .iter()
            .any(|f| name.starts_with(f) && name.len() > f.len())
}

/// The values `severity` takes (the `severity` label Alertmanager routes on).
pub const SEVERITIES: [&str; 2] = ["warning", "critical"];
/// The values `layer` takes: the diagnosis's layers (docs/reference/diagnosis.md).
pub const LAYERS: [&str; 3] = ["physical", "network", "application"];

/// Parses rules from TOML text; `path` names the file in errors.
pub fn parse_rules(text: &str, path: &str) -> Result<Vec<Rule>, RulesError> {
    let f: RulesFile = xirang_files::diag::parse_toml(text).map_err(|d| RulesError {
        path: path.to_string(),
        line: d.line,
        message: d.keyed(),
    })?;
    check_rules(&f.rule).map_err(|m| {
        let d = xirang_files::diag::keyed_message(text, &m);
        RulesError {
            path: path.to_string(),
            line: d.line,
            message: d.keyed(),
        }
    })?;
    Ok(f.rule)
}

/// What the TOML types cannot say: a rule watches a series the agent produces, fires
/// at all, has a name of its own and a severity and layer Alertmanager and the
/// diagnosis know. Each message starts with the rule's key path.
fn check_rules(rules: &[Rule]) -> Result<(), String> {
    use xirang_files::diag::closest;
    for (i, r) in rules.iter().enumerate() {
        let at = format!("rule[{i}]");
        if r.name.trim().is_empty() {
            return Err(format!("{at}.name: expected a rule name, found an empty string"));
        }
        if let Some(j) = rules[..i].iter().position(|o| o.name == r.name) {
            return Err(format!(
                "{at}.name: expected a name no other rule has, found `{}` again (rule[{j}])",
                r.name
            ));
        }
        if !signal_known(&r.signal) {
            let hint = match closest(&r.signal, SIGNALS.iter().copied()) {
                Some(c) => format!("; did you mean `{c}`?"),
                None => "; the agent's signals are listed in docs/guide/monitor.md".into(),
            };
            return Err(format!(
                "{at}.signal: unknown signal `{}`, so the rule could never fire{hint}",
                r.signal
            ));
        }
        if r.for_rounds == 0 {
            return Err(format!("{at}.for_rounds: expected 1 or more rounds, found 0"));
        }
        if !r.above.is_finite() {
            return Err(format!(
                "{at}.above: expected a finite threshold, found {}",
                r.above
            ));
        }
        for (k, v, allowed) in [
            ("severity", &r.severity, &SEVERITIES[..]),
            ("layer", &r.layer, &LAYERS[..]),
        ] {
            if !allowed.contains(&v.as_str()) {
                return Err(format!(
                    "{at}.{k}: expected one of {}, found `{v}`",
                    allowed.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// Largest alert rules file read (the shipped one is a few KB).
pub const RULES_LIMIT: xirang_files::Limit = xirang_files::Limit::new(16 << 20, "alert rules file");

/// Loads rules from a file.
pub fn load_rules(path: &Path) -> Result<Vec<Rule>, RulesError> {
    let text = xirang_files::read_text(path, RULES_LIMIT).map_err(|e| RulesError {
        path: path.display().to_string(),
        line: None,
        message: e.detail(),
    })?;
    parse_rules(&text, &path.display().to_string())
}

/// A firing alert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Firing {
    /// Rule name.
    pub rule: String,
    /// Entity: the signal's labels, `k=v` joined by commas.
    pub entity: String,
    /// Severity.
    pub severity: String,
    /// Layer.
    pub layer: String,
    /// The signal's value.
    pub value: f64,
}

/// Evaluates rules round after round.
#[derive(Debug, Clone, Default)]
pub struct Evaluator {
    rules: Vec<Rule>,
    streak: HashMap<(String, String), u32>,
}

fn entity_of(m: &Metric) -> String {
    m.labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl Evaluator {
    /// An evaluator of `rules`.
    pub fn new(rules: Vec<Rule>) -> Self {
        Evaluator {
            rules,
            streak: HashMap::new(),
        }
    }

    /// Evaluates one round; returns what fires now.
    pub fn eval(&mut self, round: &Round) -> Vec<Firing> {
        let mut firing = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for rule in &self.rules {
            for p in round.points.iter().filter(|p| p.metric.name == rule.signal) {
                let entity = entity_of(&p.metric);
                let key = (rule.name.clone(), entity.clone());
                seen.insert(key.clone());
                let s = self.streak.entry(key).or_insert(0);
                if p.value > rule.above {
                    *s += 1;
                } else {
                    *s = 0;
                }
                if *s >= rule.for_rounds {
                    firing.push(Firing {
                        rule: rule.name.clone(),
                        entity,
                        severity: rule.severity.clone(),
                        layer: rule.layer.clone(),
                        value: p.value,
                    });
                }
            }
        }
        // A signal that is gone (no delta this round, device vanished) breaks its streak.
        self.streak.retain(|k, _| seen.contains(k));
        firing
    }
}

/// Firing alerts as points (`xirang_alert{...} 1`).
pub fn alert_points(firing: &[Firing]) -> Vec<Point> {
    firing
        .iter()
        .map(|f| Point {
            metric: std::sync::Arc::new(Metric {
                name: "xirang_alert".into(),
                labels: vec![
                    ("rule", f.rule.clone()),
                    ("entity", f.entity.clone()),
                    ("severity", f.severity.clone()),
                    ("layer", f.layer.clone()),
                ],
                kind: Kind::Gauge,
                scale: 1.0,
                help: "1 while an alert rule fires for an entity (monitoring/alert-rules.toml).",
            }),
            value: 1.0,
        })
        .collect()
}
