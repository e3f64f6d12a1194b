//! `xirang diagnose`: ranked findings with scope, advice and evidence; exit 1 on a fault.

use anyhow::{Context, Result};
use xirang_diagnose::Severity;
use xirang_diagnose::finding::render_text;
use xirang_diagnose::nccl::{Hardware, Log, diagnose};

use crate::Outcome;
use crate::cli::{DiagnoseArgs, DiagnoseBenchArgs, DiagnoseNcclArgs, DiagnoseNcclRasArgs, DiagnoseSuiteArgs};
use crate::cmd::out;

pub(crate) fn nccl(a: &DiagnoseNcclArgs) -> Result<Outcome> {
    let mut logs = Vec::new();
    for p in &a.logs {
        let log = xirang_collective::nccl_tests::read_log(p)?;
        if let Some(line) = log.first_invalid_line {
            eprintln!(
                "warning: {}:{line}: bytes that are not UTF-8 text, read as U+FFFD (the first such line)",
                p.display()
            );
        }
        logs.push(Log {
            name: p.display().to_string(),
            text: log.text,
        });
    }
    crate::args::check_nics(a.nics, a.nic_gbps)?;
    let hw = Hardware {
        nics: a.nics,
        nic_gbps: a.nic_gbps,
        platform: a
            .scenario
            .as_deref()
            .map(crate::args::host_platform)
            .transpose()?,
    };
    let d = diagnose(&logs, &hw)?;
    let findings = d.findings;
    if let Some(path) = &a.bundle {
        let data = xirang_diagnose::nccl::bundle_data(&logs);
        write_bundle(
            path,
            &findings,
            logs.iter().map(|l| l.name.clone()).collect::<Vec<_>>().join(" "),
            data,
        )?;
    }
    // What could not be judged is said on stderr, so stdout stays the findings (a JSON
    // array with --json, like the other diagnose commands).
    for n in &d.not_judged {
        eprintln!("note: {n}");
    }
    report(&findings, a.json)
}

/// Reads a RAS report from a file or stdin, at most one byte past the limit (so a larger
/// one is refused, not read whole).
fn read_report(path: &std::path::Path) -> Result<(String, String)> {
    use std::io::Read as _;
    let limit = xirang_diagnose::ras::MAX_REPORT_BYTES as u64 + 1;
    let mut buf = Vec::new();
    let name = if path.as_os_str() == "-" {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut buf)
            .context("reading standard input")?;
        "stdin".to_string()
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(limit).read_to_end(&mut buf))
            .with_context(|| format!("reading {}", path.display()))?;
        path.display().to_string()
    };
    Ok((String::from_utf8_lossy(&buf).into_owned(), name))
}

pub(crate) fn nccl_ras(a: &DiagnoseNcclRasArgs) -> Result<Outcome> {
    use xirang_diagnose::ras;
    let (text, source) = match (&a.report, &a.connect) {
        (_, Some(addr)) => {
            let timeout = xirang_fabric::limits::wall_duration(&a.timeout)
                .map_err(anyhow::Error::msg)
                .context("--timeout")?;
            let f = xirang_monitor::nccl_ras::fetch(addr, timeout)?;
            if !f.json {
                eprintln!("note: {addr} has no JSON reports (NCCL before 2.28.7): read its text report");
            }
            (f.text, format!("ras {addr}"))
        }
        (Some(p), None) => read_report(p)?,
        (None, None) => anyhow::bail!("give a report file (or - for stdin), or --connect HOST[:PORT]"),
    };
    let parsed = ras::parse(&text, &source)?;
    for (line, t) in &parsed.not_understood {
        eprintln!("note: {source}:{line}: not understood, left out: {t}");
    }
    let mut findings = ras::findings(&parsed);
    if let Some(dir) = &a.inventory {
        let cluster = xirang_audit::cluster::Cluster::load_dir(dir)
            .with_context(|| format!("--inventory {}", dir.display()))?;
        let named = ras::join_inventory(&mut findings, &cluster);
        if let Some(url) = &a.prometheus {
            use xirang_diagnose::request::{Request, Source, diagnose};
            let since = xirang_fabric::limits::wall_duration(&a.since)
                .map_err(anyhow::Error::msg)
                .context("--since")?;
            let done = diagnose(&Request {
                source: Source::Prometheus(url.clone()),
                now_ms: now_ms(),
                since_ms: since.as_millis() as i64,
                inventory: Some(dir.clone()),
            })?;
            findings.extend(ras::related(done.findings, &named));
            xirang_diagnose::finding::rank(&mut findings);
        }
    }
    report(&findings, a.json)
}

/// Exit 1 when any finding is a fault (medium or worse).
fn outcome(findings: &[xirang_diagnose::Finding]) -> Outcome {
    if findings.iter().any(|f| f.severity <= Severity::Medium) {
        Outcome::Findings
    } else {
        Outcome::Clean
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn write_bundle(
    path: &std::path::Path,
    findings: &[xirang_diagnose::Finding],
    source: String,
    data: Vec<(String, Vec<u8>)>,
) -> Result<()> {
    let contents = xirang_diagnose::bundle::Contents {
        source,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        data,
        kernel: xirang_diagnose::bundle::kernel_log_lines(),
        created_ms: now_ms(),
    };
    xirang_diagnose::bundle::write(path, findings, &contents)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("writing the evidence bundle {}", path.display()))?;
    eprintln!("evidence bundle written to {}", path.display());
    Ok(())
}

fn report(findings: &[xirang_diagnose::Finding], json: bool) -> Result<Outcome> {
    if json {
        out(&(serde_json::to_string_pretty(findings)? + "\n"))?;
    } else {
        out(&render_text(findings))?;
    }
    Ok(outcome(findings))
}

pub(crate) fn counters(a: &DiagnoseArgs) -> Result<Outcome> {
    use xirang_diagnose::request::{Request, Source, diagnose};
    let since = xirang_fabric::limits::wall_duration(&a.since)
        .map_err(anyhow::Error::msg)
        .context("--since")?;
    let source = match (&a.history, &a.prometheus, &a.sim_out) {
        (Some(h), _, _) => Source::History(h.clone()),
        (None, Some(url), _) => Source::Prometheus(url.clone()),
        (None, None, Some(dir)) => Source::SimOut(dir.clone()),
        (None, None, None) => anyhow::bail!(
            "nothing to read: give --history FILE, --prometheus URL or --sim-out DIR (or `xirang diagnose nccl LOG...`)"
        ),
    };
    let done = diagnose(&Request {
        source,
        now_ms: now_ms(),
        since_ms: since.as_millis() as i64,
        inventory: a.inventory.clone(),
    })?;
    if !a.json {
        let w = &done.window;
        eprintln!(
            "read {} series from {}{}",
            w.series.len(),
            w.source,
            if w.relative {
                " (the whole run)".to_string()
            } else {
                format!(" over the last {}", a.since)
            }
        );
        if let Some(i) = &done.inventory {
            eprintln!(
                "inventory {}: {} hosts, {} switches, {} links added to the window",
                i.dir.display(),
                i.hosts,
                i.switches,
                i.links
            );
        }
    }
    if let Some(path) = &a.bundle {
        write_bundle(
            path,
            &done.findings,
            done.window.source.clone(),
            done.bundle_data()?,
        )?;
    }
    report(&done.findings, a.json)
}

pub(crate) fn suite(a: &DiagnoseSuiteArgs) -> Result<Outcome> {
    use xirang_suite::{cases, render_markdown, run_case};
    let cases: Vec<_> = cases()?
        .into_iter()
        .filter(|c| a.only.as_ref().is_none_or(|o| c.name.contains(o.as_str())))
        .collect();
    anyhow::ensure!(!cases.is_empty(), "no suite case matches --only");
    let bar = indicatif::ProgressBar::new(cases.len() as u64);
    let mut results = Vec::new();
    for c in &cases {
        bar.set_message(c.name.clone());
        results.push(run_case(c)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if a.json {
        out(&(serde_json::to_string_pretty(&results)? + "\n"))?;
    } else {
        out(&render_markdown(&results))?;
    }
    Ok(if xirang_suite::passed(&results) {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}

/// The agent's default sampling interval in the synthetic window, ms.
const BENCH_INTERVAL_MS: i64 = 10_000;

pub(crate) fn bench(a: &DiagnoseBenchArgs) -> Result<Outcome> {
    use std::time::Instant;
    use xirang_diagnose::window::{diagnose_window, synthetic_window};
    anyhow::ensure!(
        a.hosts > 0 && a.nics > 0 && a.runs > 0,
        "expected --hosts, --nics and --runs above 0"
    );
    let faulty: Vec<(usize, usize)> = (0..a.hosts).step_by(97).map(|h| (h, h % a.nics)).collect();
    let t0 = Instant::now();
    let w = synthetic_window(a.hosts, a.nics, a.minutes, BENCH_INTERVAL_MS, &faulty);
    let build = t0.elapsed();
    let points: usize = w.series.iter().map(|s| s.points.len()).sum();
    let mut times = Vec::new();
    let mut found = 0;
    for _ in 0..a.runs {
        let t = Instant::now();
        found = diagnose_window(&w).len();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    anyhow::ensure!(
        found == faulty.len(),
        "expected {} findings, got {found}",
        faulty.len()
    );
    let history_line = if a.from_history {
        history_bench(a, &w, faulty.len())?
    } else {
        String::new()
    };
    out(&format!(
        "{} hosts x {} NIC ports, {} min at {} s: {} series, {} points (built in {:.2} s)\n\
         diagnose: median {:.3} s over {} runs (min {:.3}, max {:.3}); {} faulty ports found\n",
        a.hosts,
        a.nics,
        a.minutes,
        BENCH_INTERVAL_MS / 1000,
        w.series.len(),
        points,
        build.as_secs_f64(),
        median,
        a.runs,
        times[0],
        times[times.len() - 1],
        found
    ))?;
    out(&history_line)?;
    Ok(Outcome::Clean)
}

/// `--from-history`: the window written to a history file, then read back and diagnosed
/// `runs` times; the line that reports it.
fn history_bench(
    a: &DiagnoseBenchArgs,
    w: &xirang_diagnose::window::Window,
    faulty: usize,
) -> Result<String> {
    use std::time::Instant;
    use xirang_diagnose::window::diagnose_window;
    use xirang_monitor::history::{History, Retention, SeriesKey};
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("history.sqlite");
    let t = Instant::now();
    {
        let mut h = History::open(&path, Retention::default())?;
        let keys: Vec<SeriesKey> = w
            .series
            .iter()
            .map(|s| SeriesKey::new(s.metric.clone(), s.labels.clone()))
            .collect();
        // Anchored at now, so the window is the last `minutes`.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64;
        let start = now - w.until_ms;
        let n = w.series.first().map(|s| s.points.len()).unwrap_or(0);
        for i in 0..n {
            let ts = start + w.series[0].points[i].0;
            let values: Vec<(SeriesKey, f64)> = keys
                .iter()
                .zip(&w.series)
                .map(|(k, s)| (k.clone(), s.points[i].1))
                .collect();
            h.append(ts, &values)?;
        }
    }
    let written = t.elapsed().as_secs_f64();
    let mut times = Vec::new();
    let mut n_found = 0;
    for _ in 0..a.runs {
        let t = Instant::now();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64;
        let hw = xirang_diagnose::source::from_history(&path, now - w.until_ms - 60_000, now)?;
        n_found = diagnose_window(&hw).len();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    anyhow::ensure!(
        n_found == faulty,
        "from history: expected {} findings, got {n_found}",
        faulty
    );
    Ok(format!(
        "read from history + diagnose: median {:.3} s over {} runs (min {:.3}, max {:.3}); history of {:.0} MiB written in {:.1} s\n",
        times[times.len() / 2],
        a.runs,
        times[0],
        times[times.len() - 1],
        std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64 / (1 << 20) as f64,
        written
    ))
}
