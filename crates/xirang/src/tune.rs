//! `xirang tune`: search, then write the recommendation, the renderings and the report.

use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use xirang_fabric::scenario::Scenario;
use xirang_tune::eval::Evaluator;
use xirang_tune::search::{Ablation, Progress, TuneResult, Verdict, tune};
use xirang_tune::store::Store;
use xirang_tune::{render, space};

use crate::Outcome;
use crate::cli::TuneArgs;
use crate::cmd::{out, table, write_atomic};

/// Name of the HTML report in the output directory.
pub(crate) const REPORT: &str = "report.html";

/// Name of the trial log in the output directory.
pub(crate) const TRIAL_LOG: &str = "trials.sqlite";

/// The NIC layout comparison, when the scenario asks for one.
const LAYOUT: &str = "nic-layout.json";

pub(crate) fn run(a: &TuneArgs) -> Result<Outcome> {
    let loaded = scenario(a)?;
    #[cfg(not(feature = "mpi"))]
    anyhow::ensure!(!a.mpi, xirang_mpi::NOT_BUILT);
    #[cfg(feature = "mpi")]
    let job = if a.mpi {
        Some(xirang_mpi::job::Job::start()?)
    } else {
        None
    };
    // Ranks other than 0 only simulate what rank 0 sends them.
    #[cfg(feature = "mpi")]
    if let Some(job) = &job
        && job.rank() != 0
    {
        let eval = Evaluator::new(&loaded);
        if let Err(e) = xirang_mpi::tune::serve(job.world(), &eval) {
            job.abort(&format!("{:#}", anyhow::anyhow!(e)));
        }
        return Ok(Outcome::Clean);
    }
    let dir = out_dir(a, &loaded)?;

    let space = space::space(&loaded);
    let baselines = space::baselines(&loaded);
    let identity = [
        ("scenario", loaded.scenario.to_toml()),
        ("space", serde_json::to_string(&space)?),
        ("format", "1".to_string()),
    ];
    let store = Store::open(&dir.join(TRIAL_LOG), a.resume, &identity);
    #[cfg(feature = "mpi")]
    if let (Some(job), Err(e)) = (&job, &store) {
        // The other ranks wait for batches: end them too.
        job.abort(e);
    }
    let store = store?;
    let eval = Evaluator::new(&loaded);

    let bar = progress_bar(a.quiet || a.json);
    let report = |p: Progress| {
        bar.set_length(p.total.max(p.done));
        bar.set_position(p.done);
        bar.set_message(match p.best {
            Some(b) => format!("best {:.3} of vendor", b),
            None => "searching".to_string(),
        });
    };
    #[cfg(feature = "mpi")]
    let result = match &job {
        Some(job) => tune_over_mpi(job, &eval, &space, &baselines, store, &report),
        None => tune(&eval, &space, &baselines, store, &report)?,
    };
    #[cfg(not(feature = "mpi"))]
    let result = tune(&eval, &space, &baselines, store, &report)?;
    bar.finish_and_clear();
    write_atomic(
        &dir,
        "result.json",
        &(serde_json::to_string_pretty(&result)? + "\n"),
    )?;
    let source = a.scenario.as_ref().map_or_else(
        || "the built-in default scenario (scenarios/default.toml)".to_string(),
        |p| p.display().to_string(),
    );
    let cx = render::Context::of(&loaded, &source, &result);
    let (artifacts, layout) = write_artifacts(&dir, &cx, a.quiet || a.json)?;
    bar.set_message("sampling the report's runs");
    let samples = xirang_tune::report::samples(&eval, &result, &baselines);
    let html = xirang_tune::report::html(&cx, &result, &space, &samples);
    write_atomic(&dir, REPORT, &html)?;
    if a.json {
        let v = crate::layout::WithLayout {
            result: &result,
            nic_layout: layout.as_ref(),
        };
        out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
    } else {
        let mut text = render(&result, &loaded.scenario.tune, &dir, &artifacts);
        if let Some(l) = &layout {
            text.push('\n');
            text.push_str(&crate::layout::render(l));
            text.push_str(&format!("written to {}\n", dir.join(LAYOUT).display()));
        }
        out(&text)?;
    }
    Ok(Outcome::Clean)
}

/// The output directory, created: `--out`, or `out/tune-<scenario name>`.
fn out_dir(a: &TuneArgs, loaded: &xirang_fabric::Loaded) -> Result<PathBuf> {
    let name = if loaded.scenario.name.is_empty() {
        "scenario".to_string()
    } else {
        loaded.scenario.name.clone()
    };
    let dir = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("out/tune-{name}")));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The scenario to tune: the file (or the built-in default) with `--time`, `--budget` and
/// `--seed` in its `[tune]` section, warning when some NICs or ports keep their own knobs
/// whatever the search sets.
fn scenario(a: &TuneArgs) -> Result<xirang_fabric::Loaded> {
    let mut loaded = match &a.scenario {
        Some(p) => crate::cmd::load(p)?,
        None => Scenario::builtin_default().context("the built-in default scenario")?,
    };
    if let Some(t) = &a.time {
        let d = xirang_fabric::limits::wall_duration(t)
            .map_err(anyhow::Error::msg)
            .context("--time")?;
        anyhow::ensure!(
            !d.is_zero(),
            "--time: expected a positive duration like 90s or 10m, found {t}"
        );
        loaded.scenario.tune.time_budget_s = Some(d.as_secs_f64());
    }
    if let Some(b) = a.budget {
        anyhow::ensure!(b > 0, "--budget: expected at least 1 candidate");
        loaded.scenario.tune.budget = b;
    }
    if let Some(s) = a.seed {
        loaded.scenario.tune.seed = s;
    }
    // NICs and switch ports with their own knobs keep them whatever the candidate: the
    // search moves the classes' DCQCN and the tiers' ECN only.
    let own_nics = loaded
        .fabric
        .nics
        .iter()
        .filter(|n| n.congestion.is_some())
        .count();
    let own_ports = loaded
        .fabric
        .switches
        .iter()
        .flat_map(|s| &s.ports)
        .filter(|p| p.ecn.is_some())
        .count();
    if own_nics + own_ports > 0 {
        eprintln!(
            "warning: {own_nics} NIC(s) and {own_ports} switch port(s) have their own knobs ([[overrides]] congestion / ecn): they keep them in every candidate, and the search's DCQCN and ECN settings reach only the others"
        );
    }
    Ok(loaded)
}

/// The search's progress bar over its estimated runs (hidden when `hidden`).
fn progress_bar(hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(1);
    b.set_style(
        ProgressStyle::with_template("{spinner} {msg} {bar:30} {pos}/{len} runs [{elapsed} < {eta}]")
            .expect("valid template"),
    );
    b
}

/// The tune with rank 0 sending the simulations to the other ranks; a failure ends the
/// whole job, since the other ranks would wait for batches forever.
#[cfg(feature = "mpi")]
fn tune_over_mpi(
    job: &xirang_mpi::job::Job,
    eval: &Evaluator<'_>,
    space: &[xirang_tune::space::Param],
    baselines: &[xirang_tune::space::Baseline],
    store: Store,
    report: &(dyn Fn(Progress) + Sync),
) -> TuneResult {
    let runner = xirang_mpi::tune::MpiRunner::new(job.world());
    let r = xirang_tune::search::tune_with(eval, space, baselines, store, report, &runner);
    match r {
        Ok(r) => {
            if let Err(e) = runner.finish() {
                job.abort(&format!("{:#}", anyhow::anyhow!(e)));
            }
            r
        }
        Err(e) => job.abort(&format!("{:#}", anyhow::Error::from(e))),
    }
}

/// Writes the renderings of the recommendation into `dir` (scripts executable), with the
/// NIC layout comparison under the recommended configuration when the scenario asks for
/// one: the artifacts and the comparison, for the summary.
fn write_artifacts(
    dir: &std::path::Path,
    cx: &render::Context<'_>,
    quiet: bool,
) -> Result<(Vec<render::Artifact>, Option<xirang_tune::layout::LayoutAdvice>)> {
    let mut artifacts = render::all(cx);
    // The NIC layout, judged under the recommended configuration.
    let layout = {
        let mut tuned = cx.loaded.clone();
        tuned.scenario.config = cx.config.clone();
        crate::layout::if_asked(&tuned, quiet)
    };
    if let Some(l) = &layout {
        for art in artifacts
            .iter_mut()
            .filter(|art| art.name == "recommendation.toml" || art.name == "nccl.env")
        {
            art.text.push_str(&crate::layout::comment(l));
        }
        write_atomic(dir, LAYOUT, &(serde_json::to_string_pretty(l)? + "\n"))?;
    }
    for art in &artifacts {
        write_atomic(dir, &art.name, &art.text)?;
        if art.executable {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.join(&art.name);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", path.display()))?;
        }
    }
    Ok((artifacts, layout))
}

/// A value with at most four decimals (the tuner's values are already at the device's
/// resolution; a vendor value may not be).
fn short(v: &xirang_fabric::tune::ParamValue) -> String {
    match v {
        xirang_fabric::tune::ParamValue::Number(x) if x.fract() != 0.0 => format!("{x:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string(),
        other => other.to_string(),
    }
}

/// The sensitivity table: per swept setting, the objective's range over the sweep and the
/// nearest value at which a class passes its guardrail.
fn sensitivity_table(r: &TuneResult, spec: &xirang_fabric::tune::TuneSpec) -> Option<String> {
    if r.sensitivity.is_empty() {
        return None;
    }
    let mut t = table(&[
        "swept setting",
        "at",
        "from .. to",
        "objective over the sweep",
        "nearest guardrail break",
    ]);
    for sw in &r.sensitivity {
        let (lo, hi) = sw.objective_range();
        let first = sw.points.first().map(|p| short(&p.value)).unwrap_or_default();
        let last = sw.points.last().map(|p| short(&p.value)).unwrap_or_default();
        t.add_row(vec![
            sw.name.clone(),
            short(&sw.at),
            format!("{first} .. {last}"),
            format!("{lo:.3} .. {hi:.3} of vendor"),
            match sw.nearest_break(|c| spec.guardrail(c)) {
                Some((p, class, x)) => format!("{class} {:+.1} % at {}", x * 100.0, short(&p.value)),
                None => "none".to_string(),
            },
        ]);
    }
    Some(format!(
        "sensitivity (one setting at a time around the recommendation, {} held-out seeds per point; the report plots every class):\n{t}\n",
        r.sensitivity_seeds.len()
    ))
}

/// The tune's summary on stdout: the held-out results, the verdict and what it rests on,
/// then where the artifacts are.
fn render(
    r: &TuneResult,
    spec: &xirang_fabric::tune::TuneSpec,
    dir: &std::path::Path,
    artifacts: &[render::Artifact],
) -> String {
    let mut s = held_out(r);
    s.push_str(&verdict(r));
    if !matches!(r.verdict, Verdict::Recommended)
        && let Some((k, n, first)) = r.vendor_violations()
    {
        s.push_str(&format!(
            "WARNING: the vendor default breaks a constraint itself, on {k} of {n} held-out seeds ({first}): no candidate fixed that within the guardrails; compare the baselines above\n"
        ));
    }
    if let Some((name, d)) = &r.versus_best_baseline {
        let tested = r.held_out.iter().any(|h| h.name == "tuned");
        s.push_str(&match (tested, d.clearly_above_zero(), d.clearly_below_zero()) {
            (true, true, _) => format!("against the best baseline, {name}: the recommendation is {} better on the held-out seeds\n", d.percent()),
            (true, _, true) => format!("against the best baseline, {name}: the recommendation is WORSE, {} on the held-out seeds: prefer {name}\n", d.percent()),
            (true, _, _) => format!("against the best baseline, {name}: no significant difference ({}) on the held-out seeds\n", d.percent()),
            (false, true, _) => format!("the best baseline, {name}, is {} better than the vendor on the held-out seeds (not a tuned result: a published setting to consider)\n", d.percent()),
            (false, _, _) => format!("the best baseline, {name}, is not significantly better than the vendor ({})\n", d.percent()),
        });
    }
    if !r.guardrails.is_empty() {
        let mut t = table(&[
            "guardrail",
            "tolerance",
            "change on held-out seeds (95 %)",
            "margin",
        ]);
        for g in &r.guardrails {
            t.add_row(vec![
                g.class.clone(),
                format!("{:.1} %", g.tolerance * 100.0),
                g.change.percent(),
                format!("{:+.1} %", g.margin * 100.0),
            ]);
        }
        s.push_str(&format!("{t}\n"));
    }
    if let Some(a) = &r.ablation {
        s.push_str(&ablation(r, a));
    }
    if let Some(t) = sensitivity_table(r, spec) {
        s.push_str(&t);
    }
    s.push_str(&format!(
        "artifacts in {}:\n  {}\n",
        dir.display(),
        dir.join(REPORT).display()
    ));
    for a in artifacts {
        s.push_str(&format!("  {}\n", dir.join(&a.name).display()));
    }
    s
}

/// What the tune cost and every configuration on the held-out seeds: the figures the
/// verdict rests on, first.
fn held_out(r: &TuneResult) -> String {
    let mut t = table(&[
        "configuration",
        "objective (held-out mean)",
        "spread (sd)",
        "vs vendor",
        "tuned better by (paired, 95 %)",
        "per class",
        "violations",
    ]);
    for h in &r.held_out {
        let classes: Vec<String> = h.classes.iter().map(|(c, x)| format!("{c} {:.3}", x)).collect();
        let versus = r
            .versus_baselines
            .iter()
            .find(|(n, _)| *n == h.name)
            .map_or_else(String::new, |(_, d)| d.percent());
        t.add_row(vec![
            h.name.clone(),
            format!("{:.4}", h.mean()),
            format!("{:.4}", h.std()),
            format!("{:+.1}%", (1.0 - h.mean()) * 100.0),
            versus,
            classes.join(", "),
            if h.violations.is_empty() {
                "none".to_string()
            } else {
                h.violations.join("; ")
            },
        ]);
    }
    let mut s = format!(
        "{} candidates, {} simulations run ({} read from the trial log) in {:.0} s\nsearch seeds {:?}, held-out seeds {:?}\n{}\n{t}\n",
        r.candidates.len(),
        r.runs.0,
        r.runs.1,
        r.wall_s,
        r.seeds.0,
        r.seeds.1,
        r.seed_noise.describe()
    );
    if let Some(why) = &r.search_stopped {
        s.push_str(&format!("{why}\n"));
    }
    s.push_str(&serving(r));
    s
}

/// Time to first token and time per output token per configuration and class, means over
/// the held-out seeds (empty without serving workloads).
fn serving(r: &TuneResult) -> String {
    if r.held_out.iter().all(|h| h.serving().is_empty()) {
        return String::new();
    }
    let mut t = table(&[
        "configuration",
        "class",
        "TTFT p50 us",
        "TTFT p99 us",
        "TPOT p50 us",
        "TPOT p99 us",
    ]);
    let cell = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    for h in &r.held_out {
        for f in h.serving() {
            t.add_row(vec![
                h.name.clone(),
                f.class,
                cell(f.ttft_p50_us),
                cell(f.ttft_p99_us),
                cell(f.tpot_p50_us),
                cell(f.tpot_p99_us),
            ]);
        }
    }
    format!("serving on the held-out seeds (means of each run's p50 and p99):\n{t}\n")
}

/// The verdict in a sentence: the gain recommended, or why the vendor default stands.
fn verdict(r: &TuneResult) -> String {
    match &r.verdict {
        Verdict::Recommended => {
            let g = r.gain.expect("a recommendation has its gain");
            format!(
                "recommendation: {} better than the vendor on {} held-out seeds (95 % interval), every guardrail kept\n",
                g.percent(),
                g.n
            )
        }
        Verdict::NothingBeatTheVendor => "no candidate beat the vendor within the constraints and guardrails on the search seeds: the recommendation is the vendor default\n".to_string(),
        Verdict::NoChangeEarnsItsPlace => "no significant gain: none of the chosen candidate's changes is significantly worse to revert within the constraints and guardrails on the validation seeds: the recommendation is the vendor default\n".to_string(),
        Verdict::NoSignificantGain => format!(
            "no significant gain: the reduced candidate is {} better than the vendor on {} held-out seeds, an interval that does not clear zero by 0.01 %: the recommendation is the vendor default\n",
            r.gain.map_or("?".to_string(), |g| g.percent()),
            r.gain.map_or(0, |g| g.n)
        ),
        Verdict::GuardrailBroken { class } => format!(
            "the reduced candidate breaks the {class} guardrail on the held-out seeds: the recommendation is the vendor default\n"
        ),
    }
}

/// The ablation: how many of the candidate's changes earn their place, what was reverted
/// and why, and what each kept change is worth.
fn ablation(r: &TuneResult, a: &Ablation) -> String {
    let mut s = format!(
        "of candidate {}'s {} changed settings, in {} changes (a class's congestion control is one), {} earn their place (each significantly worse to revert on {} validation seeds, or needed to keep a guardrail; {} reverted):\n",
        r.best.map_or("?".to_string(), |b| b.to_string()),
        a.before.len(),
        a.kept.len() + a.reverted.len(),
        a.kept.len(),
        r.validation_seeds.len(),
        a.reverted.len()
    );
    if !a.reverted.is_empty() {
        let mut t = table(&["reverted", "worse without it (95 %)", "why"]);
        for (name, cost, why) in &a.reverted {
            t.add_row(vec![name.clone(), cost.percent(), why.clone()]);
        }
        s.push_str(&format!("{t}\n"));
    }
    // Kept on the validation seeds but not recommended (the held-out seeds did not
    // confirm a gain, or a guardrail broke): the column says so.
    let recommended = matches!(r.verdict, Verdict::Recommended);
    let mut t = table(&[
        "setting",
        "vendor",
        if recommended {
            "recommended"
        } else {
            "tested, not recommended"
        },
        "worse without it (95 %)",
    ]);
    for c in &a.kept {
        for (i, (n, vendor, value)) in c.settings.iter().enumerate() {
            let worth = match (i, c.needed_for_guardrail, &c.revert_breaks) {
                (0, false, _) => c.without.percent(),
                (0, true, Some(b)) => format!("{}; reverting it breaks: {b}", c.without.percent()),
                (0, true, None) => format!("{} (kept for a guardrail)", c.without.percent()),
                _ => format!("(with {})", c.name),
            };
            t.add_row(vec![n.clone(), short(vendor), short(value), worth]);
        }
    }
    if !a.kept.is_empty() {
        s.push_str(&format!("{t}\n"));
    }
    s
}
