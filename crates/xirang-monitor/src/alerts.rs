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
#[error("{path}: {message}")]
pub struct RulesError {
    /// The file.
    pub path: String,
    /// What is wrong (with line and column for TOML errors).
    pub message: String,
}

/// Parses rules from TOML text; `path` names the file in errors.
pub fn parse_rules(text: &str, path: &str) -> Result<Vec<Rule>, RulesError> {
    let f: RulesFile = toml::from_str(text).map_err(|e| RulesError {
        path: path.to_string(),
        message: e.to_string(),
    })?;
    for r in &f.rule {
        if r.for_rounds == 0 || !r.above.is_finite() {
            return Err(RulesError {
                path: path.to_string(),
                message: format!(
                    "rule `{}`: expected for_rounds >= 1 and a finite threshold",
                    r.name
                ),
            });
        }
    }
    Ok(f.rule)
}

/// Largest alert rules file read (the shipped one is a few KB).
pub const RULES_LIMIT: xirang_files::Limit = xirang_files::Limit::new(16 << 20, "alert rules file");

/// Loads rules from a file.
pub fn load_rules(path: &Path) -> Result<Vec<Rule>, RulesError> {
    let text = xirang_files::read_text(path, RULES_LIMIT).map_err(|e| RulesError {
        path: path.display().to_string(),
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
