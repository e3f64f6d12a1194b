//! `xirang calibrate`: fit a scenario's workload to a fabric's counters; write the
//! calibrated scenario, or exit 1 naming the figures the fit could not bring within the
//! tolerance.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use xirang_calibrate::counters::AppFigure;
use xirang_calibrate::{Calibration, Figure, Options, calibrate, calibrated_toml, observed_figures};
use xirang_diagnose::source;
use xirang_diagnose::window::Window;
use xirang_fabric::scenario::{BUILTIN_DEFAULT, Scenario};

use crate::Outcome;
use crate::cli::CalibrateArgs;
use crate::cmd::{out, table};

#[derive(Serialize)]
struct Report<'a> {
    scenario: String,
    source: &'a str,
    window_seconds: f64,
    #[serde(flatten)]
    calibration: &'a Calibration,
    /// The file written, or null when the fit was refused.
    written: Option<String>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A number as the tables show it: four significant digits.
fn num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e4 || v.abs() < 1e-3 {
        format!("{v:.3e}")
    } else {
        format!("{:.1$}", v, (3 - v.abs().log10().floor() as i32).max(0) as usize)
    }
}

/// A recorded run's final counters (`counters.csv`, zeros included) over its simulated
/// length (`summary.json`).
fn sim_out_window(dir: &std::path::Path) -> Result<xirang_diagnose::window::Window> {
    use xirang_monitor::replay;
    use xirang_telemetry::sim_out::{COUNTERS, SimOut};
    let fail = |e: xirang_telemetry::sim_out::SimOutError| anyhow::anyhow!("{}: {}", e.path, e.message);
    let (text, path) = SimOut::open(dir)
        .and_then(|o| o.optional(COUNTERS))
        .map_err(fail)?
        .with_context(|| {
            format!(
                "{}: expected {COUNTERS} (a `xirang sim --out` directory)",
                dir.display()
            )
        })?;
    let last: Vec<_> = replay::parse_rows(&text, &path.display().to_string(), false)?
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    let run_ns = replay::run_length_ns(dir)?.with_context(|| {
        format!(
            "{}: expected the run's length in summary.json (summary.stats.sim_time_ps)",
            dir.display()
        )
    })?;
    let mut w =
        xirang_calibrate::counters::window_of_counters(format!("sim-out {}", dir.display()), &last, run_ns);
    // The training jobs' collective time, as they would have exported it at the end.
    if let Some((text, path)) = SimOut::open(dir)
        .and_then(|o| o.optional(xirang_telemetry::sim_out::SUMMARY))
        .map_err(fail)?
    {
        for c in replay::finished_collectives(&text, &path.display().to_string())? {
            w.series.push(xirang_diagnose::window::Series {
                metric: xirang_calibrate::app::COLLECTIVE_SECONDS.into(),
                labels: [("class", c.class), ("op", c.op), ("workload", c.workload)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                points: vec![(w.until_ms, c.seconds)],
            });
        }
    }
    Ok(w)
}

pub(crate) fn run(a: &CalibrateArgs) -> Result<Outcome> {
    let loaded = match &a.scenario {
        Some(p) => crate::cmd::load(p)?,
        None => Scenario::builtin_default()?,
    };
    let original = match &a.scenario {
        Some(p) => xirang_files::read_text(p, xirang_fabric::scenario::SCENARIO_LIMIT)?,
        None => BUILTIN_DEFAULT.to_string(),
    };
    let since = xirang_fabric::limits::wall_duration(&a.since)
        .map_err(anyhow::Error::msg)
        .context("--since")?;
    let now = now_ms();
    let from = now - since.as_millis() as i64;
    let names = xirang_calibrate::counters::metric_names();
    let window = match (&a.prometheus, &a.history, &a.sim_out) {
        (Some(url), _, _) => source::from_prometheus_raw_of(url, from, now, &names)?,
        (_, Some(h), _) => source::from_history_of(h, from, now, &names)?,
        (_, _, Some(dir)) => sim_out_window(dir)?,
        _ => anyhow::bail!(
            "nothing to calibrate against: give --prometheus URL, --history FILE or --sim-out DIR"
        ),
    };
    let observed = figures_to_fit(&window, &loaded, &names)?;
    let c = fit(a, &loaded, &observed)?;
    let written = if c.holds() {
        write_calibrated(a, &original, &c, &window, now)?;
        Some(a.out.display().to_string())
    } else {
        None
    };
    if a.json {
        let r = Report {
            scenario: loaded.file.display().to_string(),
            source: &window.source,
            window_seconds: window.seconds(),
            calibration: &c,
            written: written.clone(),
        };
        out(&(serde_json::to_string_pretty(&r)? + "\n"))?;
    } else {
        out(&render(&loaded, &window, &c))?;
        if let Some(w) = &written {
            out(&format!("wrote {w}\n"))?;
        }
    }
    if written.is_none() {
        refuse(a, &c);
        return Ok(Outcome::Findings);
    }
    Ok(Outcome::Clean)
}

/// The window's figures the scenario can be fitted to, saying on stderr what was left
/// out; an error when nothing is left.
fn figures_to_fit(window: &Window, loaded: &xirang_fabric::Loaded, names: &[String]) -> Result<Vec<Figure>> {
    let observed = observed_figures(window, loaded);
    for f in &observed.left_out {
        let Some(app) = &f.app else { continue };
        let collective = matches!(app, AppFigure::CollectiveTime { .. });
        eprintln!(
            "warning: {}: the scenario has no {} of class `{}`; left out",
            f.name,
            if collective { "collective" } else { "workload" },
            app.class()
        )
    }
    if !observed.unknown_switches.is_empty() {
        eprintln!(
            "warning: counters of switches the scenario does not have were left out: {}",
            observed.unknown_switches.join(", ")
        );
    }
    if observed.figures.is_empty() {
        return Err(xirang_calibrate::CalibrateError::NothingObserved {
            window: window.source.clone(),
            metrics: names.join(", "),
        }
        .into());
    }
    Ok(observed.figures)
}

/// The fit, with a progress bar over its budget of runs unless the output is JSON.
fn fit(a: &CalibrateArgs, loaded: &xirang_fabric::Loaded, observed: &[Figure]) -> Result<Calibration> {
    let bar = if a.json {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(a.max_runs as u64);
        b.set_style(
            ProgressStyle::with_template("{spinner} fitting {bar:30} {pos}/{len} runs at most [{elapsed}]")
                .expect("valid template"),
        );
        b
    };
    let opts = Options {
        tolerance: a.tolerance,
        seeds: (0..a.seeds as u64)
            .map(|i| loaded.scenario.run.seed + i)
            .collect(),
        max_runs: a.max_runs,
        fit: a.fit.clone(),
    };
    let c = calibrate(loaded, observed, &opts, &|done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    Ok(c)
}

/// Writes the calibrated scenario to `--out` under a header saying where it came from,
/// after checking that it loads: a file that claims to be calibrated must be usable.
fn write_calibrated(
    a: &CalibrateArgs,
    original: &str,
    c: &Calibration,
    window: &Window,
    now: i64,
) -> Result<()> {
    let header = format!(
        "# Calibrated by `xirang calibrate` from {} ({:.0} s of counters) on {}.\n# Fitted: {}.\n# Largest residual {:.1} % (tolerance {:.0} %).\n",
        window.source,
        window.seconds(),
        xirang_telemetry::time::utc(now),
        c.knobs
            .iter()
            .map(|k| format!("{} {} -> {}", k.key, num(k.initial), num(k.fitted)))
            .collect::<Vec<_>>()
            .join("; "),
        c.residuals.iter().map(|r| r.residual.abs()).fold(0.0, f64::max) * 100.0,
        c.tolerance * 100.0
    );
    let text = calibrated_toml(original, c, &header)?;
    // The calibrated text must load as the scenario it claims to be.
    Scenario::parse(&text, &a.out)
        .context("the calibrated scenario does not parse (a bug: please report it)")?;
    xirang_files::write_atomic(&a.out, text.as_bytes())?;
    Ok(())
}

/// The fit as tables: the parameters, then each figure against the tolerance.
fn render(loaded: &xirang_fabric::Loaded, window: &Window, c: &Calibration) -> String {
    let mut k = table(&["parameter", "scenario", "fitted", "range searched"]);
    for f in &c.knobs {
        k.add_row(vec![
            f.key.clone(),
            num(f.initial),
            num(f.fitted),
            format!("{} .. {}", num(f.min), num(f.max)),
        ]);
    }
    let mut t = table(&["counter", "observed", "simulated", "residual", ""]);
    for r in &c.residuals {
        t.add_row(vec![
            r.name.clone(),
            format!("{} {}", num(r.observed), r.unit),
            num(r.simulated),
            format!("{:+.1} %", r.residual * 100.0),
            if r.within { "ok" } else { "OUTSIDE" }.to_string(),
        ]);
    }
    format!(
        "calibrated {} against {} ({} s): {} runs, objective {} -> {}\n{k}\n{t}\n",
        loaded.file.display(),
        window.source,
        num(window.seconds()),
        c.runs,
        num(c.objective_initial),
        num(c.objective)
    )
}

/// Says on stderr which figures kept the fit from holding, so nothing was written.
fn refuse(a: &CalibrateArgs, c: &Calibration) {
    let outside: Vec<String> = c
        .residuals
        .iter()
        .filter(|r| !r.within)
        .map(|r| {
            format!(
                "{} ({:+.1} %, from {})",
                r.name,
                r.residual * 100.0,
                r.metrics.join(" / ")
            )
        })
        .collect();
    eprintln!(
        "error: the fit stays outside ±{:.0} % on: {}; {} not written",
        c.tolerance * 100.0,
        outside.join(", "),
        a.out.display()
    );
}
