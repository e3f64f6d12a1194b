//! Renderings of an audit: text grouped by layer (for people), JSON, and SARIF 2.1.0
//! (for code-scanning dashboards and pipelines).

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::json;

use crate::rules::{Finding, Layer, RULES, Severity};

/// Counts by severity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Errors.
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
    /// Notes.
    pub infos: usize,
}

/// Counts the findings by severity.
pub fn summary(findings: &[Finding]) -> Summary {
    let mut s = Summary::default();
    for f in findings {
        match f.severity {
            Severity::Error => s.errors += 1,
            Severity::Warning => s.warnings += 1,
            Severity::Info => s.infos += 1,
        }
    }
    s
}

fn layer_title(l: Layer) -> &'static str {
    match l {
        Layer::Physical => "Physical layer (links, firmware, PCIe)",
        Layer::Network => "Network layer (MTU, PFC, ECN, congestion control)",
        Layer::Transport => "Transport layer (RoCE GIDs, retransmissions)",
        Layer::Application => "Application layer (defaults applications inherit)",
        Layer::Inputs => "Inputs (what could not be read)",
    }
}

fn sev(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

/// Plain text, grouped by layer; `hosts` and `switches` say what was audited.
pub fn text(findings: &[Finding], hosts: usize, switches: usize) -> String {
    let s = summary(findings);
    let mut out = format!(
        "audited {hosts} hosts and {switches} switches: {} errors, {} warnings, {} notes\n",
        s.errors, s.warnings, s.infos
    );
    let mut layer = None;
    for f in findings {
        if layer != Some(f.layer) {
            layer = Some(f.layer);
            let _ = write!(out, "\n{}\n", layer_title(f.layer));
        }
        let _ = writeln!(
            out,
            "  {:<7} {:<18} {}: {}",
            sev(f.severity),
            f.rule,
            f.entity,
            f.message
        );
        for e in &f.evidence {
            let _ = writeln!(out, "          evidence: {} = {}", e.source, e.value);
        }
        let _ = writeln!(out, "          fix: {}", f.fix);
    }
    if findings.is_empty() {
        out.push_str("no findings\n");
    }
    out
}

/// JSON: the summary and every finding.
pub fn json(findings: &[Finding], hosts: usize, switches: usize) -> serde_json::Value {
    json!({
        "hosts": hosts,
        "switches": switches,
        "summary": summary(findings),
        "findings": findings,
    })
}

/// SARIF 2.1.0: one run, the rules as the tool's rules, each finding a result located
/// at its first evidence file.
pub fn sarif(findings: &[Finding]) -> serde_json::Value {
    let rules: Vec<_> = RULES
        .iter()
        .map(|r| json!({"id": r.id, "shortDescription": {"text": r.title}, "properties": {"layer": r.layer}}))
        .collect();
    let results: Vec<_> = findings
        .iter()
        .map(|f| {
            let level = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Info => "note",
            };
            let locations: Vec<_> = f
                .evidence
                .iter()
                .take(1)
                .map(|e| {
                    let uri = e.source.split(": ").next().unwrap_or(&e.source);
                    json!({"physicalLocation": {"artifactLocation": {"uri": uri}}, "logicalLocations": [{"name": f.entity}]})
                })
                .collect();
            json!({
                "ruleId": f.rule,
                "level": level,
                "message": {"text": format!("{}: {} Fix: {}", f.entity, f.message, f.fix)},
                "locations": locations,
                "properties": {"layer": f.layer, "entity": f.entity, "evidence": f.evidence},
            })
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "xirang-audit", "informationUri": "https://github.com/xirang", "rules": rules}},
            "results": results,
        }],
    })
}
