//! `xirang tune`: search, then write the recommendation, the renderings and the report.

use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use xirang_tune::eval::Evaluator;
use xirang_tune::search::{Progress, TuneResult, tune};
use xirang_tune::store::Store;
use xirang_tune::{render, space};

use crate::Outcome;
use crate::cli::TuneArgs;
use crate::cmd::{out, table, write_atomic};

/// Name of the HTML report in the output directory.
pub(crate) const REPORT: &str = "report.html";

/// Name of the trial log in the output directory.
pub(crate) const TRIAL_LOG: &str = "trials.sqlite";

pub(crate) fn run(a: &TuneArgs) -> Result<Outcome> {
    let (mut loaded, _, _) = crate::plan::scenario_platform(a.scenario.as_deref())?;
    if let Some(b) = a.budget {
        anyhow::ensure!(b > 0, "--budget: expected at least 1 candidate");
        loaded.scenario.tune.budget = b;
    }
    if let Some(s) = a.seed {
        loaded.scenario.tune.seed = s;
    }
    #[cfg(not(feature = "mpi"))]
    anyhow::ensure!(
        !a.mpi,
        "this xirang was built without MPI; build it with `cargo build --release --features mpi` \
         (Debian packages libopenmpi-dev, openmpi-bin and libclang-dev: scripts/install-mpi.sh)"
    );
    #[cfg(feature = "mpi")]
    let job = if a.mpi {
        Some(crate::mpi::Job::start()?)
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
            job.abort(&anyhow::anyhow!(e));
        }
        return Ok(Outcome::Clean);
    }
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
        job.abort(&anyhow::anyhow!("{e}"));
    }
    let store = store?;
    let eval = Evaluator::new(&loaded);

    let bar = if a.quiet || a.json {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(1);
        b.set_style(
            ProgressStyle::with_template("{spinner} {msg} {bar:30} {pos}/{len} runs [{elapsed} < {eta}]")
                .expect("valid template"),
        );
        b
    };
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
        Some(job) => {
            let runner = xirang_mpi::tune::MpiRunner::new(job.world());
            let r = xirang_tune::search::tune_with(&eval, &space, &baselines, store, &report, &runner);
            match r {
                Ok(r) => {
                    if let Err(e) = runner.finish() {
                        job.abort(&anyhow::anyhow!(e));
                    }
                    r
                }
                Err(e) => job.abort(&e.into()),
            }
        }
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
    let artifacts = render::all(&cx);
    for art in &artifacts {
        write_atomic(&dir, &art.name, &art.text)?;
        if art.executable {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.join(&art.name);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", path.display()))?;
        }
    }
    bar.set_message("sampling the report's runs");
    let samples = xirang_tune::report::samples(&eval, &result, &baselines);
    let html = xirang_tune::report::html(&cx, &result, &space, &samples);
    write_atomic(&dir, REPORT, &html)?;
    if a.json {
        out(&(serde_json::to_string_pretty(&result)? + "\n"))?;
    } else {
        out(&render(&result, &dir, &artifacts))?;
    }
    Ok(Outcome::Clean)
}

/// A value with four significant digits.
fn short(v: &xirang_fabric::tune::ParamValue) -> String {
    match v {
        xirang_fabric::tune::ParamValue::Number(x) if x.fract() != 0.0 => format!("{x:.4}"),
        other => other.to_string(),
    }
}

fn render(r: &TuneResult, dir: &std::path::Path, artifacts: &[render::Artifact]) -> String {
    let mut s = String::new();
    let mut t = table(&[
        "configuration",
        "objective (held-out mean)",
        "spread (sd)",
        "vs vendor",
        "per class",
        "violations",
    ]);
    for h in &r.held_out {
        let classes: Vec<String> = h.classes.iter().map(|(c, x)| format!("{c} {:.3}", x)).collect();
        t.add_row(vec![
            h.name.clone(),
            format!("{:.4}", h.mean()),
            format!("{:.4}", h.std()),
            format!("{:+.1}%", (1.0 - h.mean()) * 100.0),
            classes.join(", "),
            if h.violations.is_empty() {
                "none".to_string()
            } else {
                h.violations.join("; ")
            },
        ]);
    }
    s.push_str(&format!(
        "{} candidates, {} simulations run ({} read from the trial log) in {:.0} s\nsearch seeds {:?}, held-out seeds {:?}\n{t}\n",
        r.candidates.len(),
        r.runs.0,
        r.runs.1,
        r.wall_s,
        r.seeds.0,
        r.seeds.1
    ));
    match r.best {
        Some(id) => {
            s.push_str(&format!("recommendation (candidate {id}), settings that differ from the vendor's:\n"));
            let mut t = table(&["setting", "vendor", "recommended"]);
            for (k, v) in &r.recommendation {
                let vendor = r.vendor_values.iter().find(|(n, _)| n == k).map(|(_, x)| x);
                if vendor != Some(v) {
                    t.add_row(vec![k.clone(), vendor.map_or("-".to_string(), short), short(v)]);
                }
            }
            s.push_str(&format!("{t}\n"));
        }
        None => s.push_str(
            "no candidate beat the vendor defaults on the search seeds by more than its standard error: the recommendation is the vendor's\n",
        ),
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
