//! `xirang diagnose`: ranked findings with scope, advice and evidence; exit 1 on a fault.

use anyhow::{Context, Result};
use xirang_diagnose::Severity;
use xirang_diagnose::finding::render_text;
use xirang_diagnose::nccl::{Log, diagnose};

use crate::Outcome;
use crate::cli::DiagnoseNcclArgs;
use crate::cmd::out;

/// Largest log read (nccl-tests logs with NCCL_DEBUG=INFO run to a few MiB).
const MAX_LOG_BYTES: u64 = 64 << 20;

pub(crate) fn nccl(a: &DiagnoseNcclArgs) -> Result<Outcome> {
    let mut logs = Vec::new();
    for p in &a.logs {
        let meta = std::fs::metadata(p).with_context(|| format!("reading {}", p.display()))?;
        anyhow::ensure!(
            meta.len() <= MAX_LOG_BYTES,
            "{}: {} bytes, more than the {} MiB a log may have",
            p.display(),
            meta.len(),
            MAX_LOG_BYTES >> 20
        );
        let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        logs.push(Log {
            name: p.display().to_string(),
            text: String::from_utf8_lossy(&bytes).into_owned(),
        });
    }
    let findings = diagnose(&logs)?;
    if a.json {
        out(&(serde_json::to_string_pretty(&findings)? + "\n"))?;
    } else {
        out(&render_text(&findings))?;
    }
    Ok(if findings.iter().any(|f| f.severity <= Severity::Medium) {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}
