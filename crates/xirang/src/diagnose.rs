//! `xirang diagnose`: ranked findings with scope, advice and evidence; exit 1 on a fault.

use anyhow::{Context, Result};
use xirang_diagnose::Severity;
use xirang_diagnose::finding::render_text;
use xirang_diagnose::nccl::{Log, diagnose};

use crate::Outcome;
use crate::cli::{DiagnoseArgs, DiagnoseNcclArgs, DiagnoseSuiteArgs};
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
    report(&findings, a.json)
}

fn report(findings: &[xirang_diagnose::Finding], json: bool) -> Result<Outcome> {
    if json {
        out(&(serde_json::to_string_pretty(findings)? + "\n"))?;
    } else {
        out(&render_text(findings))?;
    }
    Ok(if findings.iter().any(|f| f.severity <= Severity::Medium) {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}

pub(crate) fn counters(a: &DiagnoseArgs) -> Result<Outcome> {
    let since = crate::monitor::parse_duration(&a.since).context("--since")?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let from_ms = now_ms - since.as_millis() as i64;
    let window = match (&a.history, &a.prometheus, &a.sim_out) {
        (Some(h), _, _) => xirang_diagnose::source::from_history(h, from_ms, now_ms)?,
        (None, Some(url), _) => xirang_diagnose::source::from_prometheus(url, from_ms, now_ms)?,
        (None, None, Some(dir)) => xirang_diagnose::source::from_sim_out(dir)?,
        (None, None, None) => anyhow::bail!(
            "nothing to read: give --history FILE, --prometheus URL or --sim-out DIR (or `xirang diagnose nccl LOG...`)"
        ),
    };
    if !a.json {
        eprintln!(
            "read {} series from {}{}",
            window.series.len(),
            window.source,
            if window.relative {
                " (the whole run)".to_string()
            } else {
                format!(" over the last {}", a.since)
            }
        );
    }
    report(&xirang_diagnose::counters::diagnose_window(&window), a.json)
}

/// Share of faulty runs that must be located (issue 9, acceptance 1).
const SUITE_MIN_ACCURACY: f64 = 0.95;

pub(crate) fn suite(a: &DiagnoseSuiteArgs) -> Result<Outcome> {
    use xirang_diagnose::suite::{cases, render_markdown, run_case};
    let cases = cases();
    let bar = indicatif::ProgressBar::new(cases.len() as u64);
    let mut results = Vec::new();
    for c in &cases {
        bar.set_message(c.name.clone());
        results.push(run_case(c).map_err(anyhow::Error::msg)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if a.json {
        out(&(serde_json::to_string_pretty(&results)? + "\n"))?;
    } else {
        out(&render_markdown(&results))?;
    }
    let faulty = results.iter().filter(|r| !r.injected.is_empty()).count();
    let located = results
        .iter()
        .filter(|r| !r.injected.is_empty() && r.correct)
        .count();
    let healthy_clean = results
        .iter()
        .filter(|r| r.injected.is_empty())
        .all(|r| r.correct);
    Ok(
        if located as f64 >= SUITE_MIN_ACCURACY * faulty as f64 && healthy_clean {
            Outcome::Clean
        } else {
            Outcome::Findings
        },
    )
}
