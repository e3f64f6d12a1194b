//! `xirang plan serving`: which decode batch sizes, under which settings, keep a serving
//! scenario inside its SLOs, measured on the twin. Each batch size sets the tokens per GPU
//! of every `moe` workload and the scenario is simulated as it stands (its fabric, its
//! other workloads, its seed): the time per output token is the MoE workloads' step, the
//! time to first token the KV-transfer workloads' (docs/guide/serving.md). Output tokens
//! per second count each decode GPU's batch once per step.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use xirang_fabric::Loaded;
use xirang_fabric::built::Model;
use xirang_fabric::config::FabricConfig;
use xirang_fabric::workload::Workload;

use crate::Outcome;
use crate::cli::ServingArgs;
use crate::cmd::{out, table};

/// One (settings, batch size) point.
#[derive(Debug, Clone, Serialize)]
struct Point {
    /// `scenario` (its own `[config]`) or the `--settings` file's name.
    settings: String,
    /// Tokens per GPU of every MoE workload.
    batch: usize,
    /// Every workload finished.
    finished: bool,
    /// Time per output token, µs: the largest p50 and p99 over the MoE workloads.
    tpot_p50_us: Option<f64>,
    tpot_p99_us: Option<f64>,
    /// Time to first token, µs: the largest p50 and p99 over the KV-transfer workloads.
    ttft_p50_us: Option<f64>,
    ttft_p99_us: Option<f64>,
    /// Output tokens per second of the decode GPUs: batch x GPUs / median step.
    tokens_per_s: Option<f64>,
    /// Every SLO given is met (and the run finished).
    meets_slo: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    scenario: &'a str,
    tpot_p99_slo_us: Option<f64>,
    ttft_p99_slo_us: Option<f64>,
    points: &'a [Point],
    /// The point with the most output tokens per second among those meeting the SLOs.
    best: Option<&'a Point>,
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// The scenario with every MoE workload at `batch` tokens per GPU, built.
fn with_batch(base: &Loaded, batch: usize) -> Result<Loaded> {
    let mut s = base.scenario.clone();
    for w in s.workloads.values_mut() {
        if let Workload::Moe(m) = w {
            m.tokens_per_gpu = batch as u32;
        }
    }
    let dir = base.file.parent().unwrap_or(Path::new("."));
    s.build(&base.file, dir, None)
        .with_context(|| format!("{} at {batch} tokens per GPU", base.file.display()))
}

/// Simulates `loaded` under `config` and reads its serving figures.
fn measure(
    loaded: &Loaded,
    config: &FabricConfig,
    seed: u64,
    settings: &str,
    batch: usize,
    a: &ServingArgs,
) -> Point {
    let mut opts = xirang_sim::options(loaded);
    opts.seed = seed;
    opts.sample_interval = None;
    let model = Model {
        config,
        ..loaded.model()
    };
    let r = xirang_sim::simulate_model(model, &opts, &mut |_| {});
    let s = r.summary();
    let mut p = Point {
        settings: settings.to_string(),
        batch,
        finished: r.flows.iter().all(|f| f.fct_ps.is_some())
            && s.collectives.iter().all(|c| c.finished)
            && s.moe.iter().all(|m| m.finished)
            && s.kv.iter().all(|k| k.transferred == k.requests),
        tpot_p50_us: None,
        tpot_p99_us: None,
        ttft_p50_us: None,
        ttft_p99_us: None,
        tokens_per_s: None,
        meets_slo: false,
    };
    let mut tokens = 0.0;
    for m in &s.moe {
        p.tpot_p50_us = max_opt(p.tpot_p50_us, m.step.p50_us);
        p.tpot_p99_us = max_opt(p.tpot_p99_us, m.step.p99_us);
        if let Some(step) = m.step.p50_us.filter(|t| *t > 0.0) {
            tokens += (batch as f64) * f64::from(m.ranks) / (step / 1e6);
        }
    }
    p.tokens_per_s = (tokens > 0.0).then_some(tokens);
    for k in &s.kv {
        p.ttft_p50_us = max_opt(p.ttft_p50_us, k.ttft.p50_us);
        p.ttft_p99_us = max_opt(p.ttft_p99_us, k.ttft.p99_us);
    }
    let within = |v: Option<f64>, slo: Option<f64>| match slo {
        None => true,
        Some(slo) => v.is_some_and(|v| v <= slo),
    };
    p.meets_slo = p.finished && within(p.tpot_p99_us, a.tpot_p99) && within(p.ttft_p99_us, a.ttft_p99);
    p
}

/// `xirang plan serving SCENARIO`.
pub(crate) fn plan(a: &ServingArgs) -> Result<Outcome> {
    let base = crate::cmd::load(&a.scenario)?;
    let has = |f: fn(&Workload) -> bool| base.scenario.workloads.values().any(f);
    if !has(|w| matches!(w, Workload::Moe(_) | Workload::KvTransfer(_))) {
        bail!(
            "{}: expected a serving scenario, with a `moe` or `kv_transfer` workload (scenarios/serving-moe.toml)",
            a.scenario.display()
        );
    }
    if a.tpot_p99.is_some() && !has(|w| matches!(w, Workload::Moe(_))) {
        bail!(
            "--tpot-p99: {} has no `moe` workload, so no time per output token",
            a.scenario.display()
        );
    }
    if a.ttft_p99.is_some() && !has(|w| matches!(w, Workload::KvTransfer(_))) {
        bail!(
            "--ttft-p99: {} has no `kv_transfer` workload, so no time to first token",
            a.scenario.display()
        );
    }
    let other = a.settings.as_deref().map(crate::cmd::load).transpose()?;
    // Another scenario's settings must name every class this one's workloads run in.
    if let (Some(o), Some(path)) = (&other, &a.settings) {
        for (name, w) in &base.scenario.workloads {
            if !o.scenario.config.classes.contains_key(w.class()) {
                bail!(
                    "--settings {}: no traffic class `{}`, which workload `{name}` of {} runs in; expected settings for the same classes (a tune's recommendation.toml of this scenario)",
                    path.display(),
                    w.class(),
                    a.scenario.display()
                );
            }
        }
    }
    let mut settings: Vec<(String, &FabricConfig)> = vec![("scenario".to_string(), &base.scenario.config)];
    if let (Some(o), Some(path)) = (&other, &a.settings) {
        settings.push((
            path.file_name()
                .map_or_else(|| "settings".to_string(), |n| n.to_string_lossy().into_owned()),
            &o.scenario.config,
        ));
    }
    // Batch sizes matter only to MoE workloads; without one, a single run per setting.
    let batches: Vec<usize> = if has(|w| matches!(w, Workload::Moe(_))) {
        let mut b = a.batches.clone();
        b.sort_unstable();
        b.dedup();
        b
    } else {
        vec![0]
    };
    let seed = a.seed.unwrap_or(base.scenario.run.seed);
    let bar = if a.json {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new((batches.len() * settings.len()) as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} serving runs {pos}/{len} {bar:30} {msg} [{elapsed}]",
            )
            .expect("valid template"),
        );
        b
    };
    let mut points = Vec::new();
    for &batch in &batches {
        let loaded = if batch == 0 {
            None
        } else {
            Some(with_batch(&base, batch)?)
        };
        let l = loaded.as_ref().unwrap_or(&base);
        for (name, config) in &settings {
            bar.set_message(format!("{name}, batch {batch}"));
            points.push(measure(l, config, seed, name, batch, a));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let best = points.iter().filter(|p| p.meets_slo).max_by(|x, y| {
        x.tokens_per_s
            .unwrap_or(0.0)
            .total_cmp(&y.tokens_per_s.unwrap_or(0.0))
    });
    let report = Report {
        scenario: &base.file.display().to_string(),
        tpot_p99_slo_us: a.tpot_p99,
        ttft_p99_slo_us: a.ttft_p99,
        points: &points,
        best,
    };
    if a.json {
        out(&(serde_json::to_string_pretty(&report)? + "\n"))?;
    } else {
        out(&text(&report))?;
    }
    Ok(if best.is_some() {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}

fn text(r: &Report<'_>) -> String {
    let ms = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{:.2}", v / 1e3));
    let slo = |x: Option<f64>| x.map_or_else(|| "none".to_string(), |v| format!("{:.2} ms", v / 1e3));
    let mut t = table(&[
        "settings",
        "batch",
        "TPOT p50 ms",
        "TPOT p99 ms",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "tokens/s",
        "SLO",
    ]);
    for p in r.points {
        t.add_row(vec![
            p.settings.clone(),
            if p.batch == 0 {
                "-".to_string()
            } else {
                p.batch.to_string()
            },
            ms(p.tpot_p50_us),
            ms(p.tpot_p99_us),
            ms(p.ttft_p50_us),
            ms(p.ttft_p99_us),
            p.tokens_per_s
                .map_or_else(|| "-".to_string(), |v| format!("{v:.0}")),
            if !p.finished {
                "unfinished".to_string()
            } else if p.meets_slo {
                "met".to_string()
            } else {
                "missed".to_string()
            },
        ]);
    }
    let verdict = match r.best {
        Some(b) if b.batch > 0 => format!(
            "best within the SLOs: batch {} under {} settings, {} output tokens/s\n",
            b.batch,
            b.settings,
            b.tokens_per_s
                .map_or_else(|| "-".to_string(), |v| format!("{v:.0}"))
        ),
        Some(b) => format!("the SLOs are met under {} settings\n", b.settings),
        None => "no batch size and settings tried meet the SLOs\n".to_string(),
    };
    format!(
        "{}: SLOs TPOT p99 {}, TTFT p99 {}\n{t}\n{verdict}",
        r.scenario,
        slo(r.tpot_p99_slo_us),
        slo(r.ttft_p99_slo_us)
    )
}
