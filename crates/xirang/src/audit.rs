//! `xirang audit`: rules over hosts, switches and cabling; exit 1 on any error finding.

use anyhow::Result;
use xirang_audit::{Cluster, Severity, as_scenario, audit, report};

use crate::Outcome;
use crate::cli::AuditArgs;
use crate::cmd::out;

pub(crate) fn run(a: &AuditArgs) -> Result<Outcome> {
    anyhow::ensure!(
        a.hosts.is_some() || a.switches.is_some(),
        "nothing to audit: give --hosts DIR and/or --switches DIR"
    );
    let cluster = Cluster::load(
        a.hosts.as_deref(),
        a.switches.as_deref(),
        a.topology.as_deref(),
        a.policy.as_deref(),
    )?;
    let findings = audit(&cluster);
    if let Some(path) = &a.emit_scenario {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "audited".into());
        let (_, text) = as_scenario::to_scenario(&cluster, &name);
        xirang_files::write_atomic(path, text.as_bytes())?;
        eprintln!("fabric model written to {}", path.display());
    }
    let (h, s) = (cluster.hosts.len(), cluster.switches.len());
    if a.sarif {
        out(&(serde_json::to_string_pretty(&report::sarif(&findings))? + "\n"))?;
    } else if a.json {
        out(&(serde_json::to_string_pretty(&report::json(&findings, h, s))? + "\n"))?;
    } else {
        out(&report::text(&findings, h, s))?;
    }
    Ok(if findings.iter().any(|f| f.severity == Severity::Error) {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}
