//! A diagnosis finding: what is wrong, where, how sure, how far it reaches, what to do,
//! and what was read.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Where the fault is (MISSION 5.3: NIC, link, switch, or the application's
/// configuration; host configuration split out as the audit does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A NIC (or the host behind it: PCIe, driver).
    Nic,
    /// A link (cable, optics, port pair), or the network path between two nodes.
    Link,
    /// One switch port.
    SwitchPort,
    /// A switch.
    Switch,
    /// Host configuration (GPUDirect, NIC/GPU placement, drivers).
    HostConfig,
    /// Application configuration (NCCL settings, transport, QPs).
    AppConfig,
}

impl Class {
    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            Class::Nic => "NIC",
            Class::Link => "link",
            Class::SwitchPort => "switch port",
            Class::Switch => "switch",
            Class::HostConfig => "host config",
            Class::AppConfig => "application config",
        }
    }
}

/// How bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Jobs fail or lose most of their bandwidth.
    High,
    /// Measurable loss.
    Medium,
    /// Worth knowing; not a fault.
    Low,
}

/// One piece of evidence: where it was read (`file:line`, a counter and its window, a
/// configuration key), and what. The audit's type: a diagnosis carries the audit's
/// evidence as it is.
pub use xirang_audit::rules::Evidence;

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Rule id (`NCCL-ABORT`, ...).
    pub rule: &'static str,
    /// Where the fault is.
    pub class: Class,
    /// The entity: `host`, `host/nic`, `hostA<->hostB`, `switch:port`.
    pub entity: String,
    /// How bad.
    pub severity: Severity,
    /// The root cause, in one sentence.
    pub cause: String,
    /// 0..1.
    pub confidence: f64,
    /// Who is affected and what is lost (hosts, ranks, bandwidth).
    pub scope: String,
    /// What to do: concrete actions or commands.
    pub advice: Vec<String>,
    /// What was read.
    pub evidence: Vec<Evidence>,
}

/// Orders findings: severity first, then confidence, then rule and entity (stable).
pub fn rank(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        a.severity
            .cmp(&b.severity)
            .then(b.confidence.total_cmp(&a.confidence))
            .then(a.rule.cmp(b.rule))
            .then(a.entity.cmp(&b.entity))
    });
}

/// Findings as text: one block per finding, ranked.
pub fn render_text(findings: &[Finding]) -> String {
    let mut s = String::new();
    if findings.is_empty() {
        s.push_str("No fault found.\n");
        return s;
    }
    for (i, f) in findings.iter().enumerate() {
        let _ = writeln!(
            s,
            "{}. [{:?}] {} {} — {} (rule {}, confidence {:.0}%)",
            i + 1,
            f.severity,
            f.class.name(),
            f.entity,
            f.cause,
            f.rule,
            f.confidence * 100.0
        );
        let _ = writeln!(s, "   scope: {}", f.scope);
        for a in &f.advice {
            let _ = writeln!(s, "   advice: {a}");
        }
        for e in &f.evidence {
            let _ = writeln!(s, "   evidence: {}: {}", e.source, e.value);
        }
    }
    s
}
