//! `xirang rollout`: plan, start, advance, halt, resume, roll back, simulate.

use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::json;
use xirang_rollout::command::{CommandDriver, load_inventory};
use xirang_rollout::exec::{self, ExecOptions, Executor, Progress, State};
use xirang_rollout::layout::RolloutFiles;
use xirang_rollout::simulate::{Degradation, SimSpec, default_policy, simulate, simulate_fleet};
use xirang_rollout::store::Store;
use xirang_rollout::{Policy, plan};

use crate::Outcome;
use crate::cli::{
    RolloutCmd, RolloutPatchArgs, RolloutPlanArgs, RolloutRunArgs, RolloutSimArgs, RolloutStartArgs,
    RolloutStateArgs,
};
use crate::cmd::out;

/// Test hook for the crash tests: abort before the n-th step (log append or command
/// round) of this process.
const CRASH_ENV: &str = "XIRANG_ROLLOUT_CRASH_BEFORE_STEP";

pub(crate) fn run(cmd: RolloutCmd) -> Result<Outcome> {
    match cmd {
        RolloutCmd::Plan(a) => plan_cmd(&a),
        RolloutCmd::Start(a) => start(&a),
        RolloutCmd::Status(a) => status(&a),
        RolloutCmd::Log(a) => log(&a),
        RolloutCmd::Advance(a) => with_executor(&a, |ex| ex.advance().map(Some)),
        RolloutCmd::Halt(a) => {
            // No lock: a running executor holds it for a whole wave, and looks for this
            // halt between rounds and during the soak.
            let store = Store::open(&a.state)?;
            let mut ex = Executor::new(&store, exec::NoDriver, ExecOptions::default(), |_| {})?;
            ex.halt_now(&a.reason)?;
            eprintln!(
                "halted: {}; a running executor stops after its current round of commands",
                a.reason
            );
            Ok(Outcome::Clean)
        }
        RolloutCmd::Resume(a) => {
            let (recheck, reflash) = (a.recheck, a.reflash.clone());
            with_executor(&a.run, move |ex| ex.resume(recheck, &reflash).map(Some))
        }
        RolloutCmd::Rollback(a) => {
            let only = a.node.clone();
            if !a.run.execute {
                let store = Store::open_read_only(&a.run.state)?;
                let meta = store.meta()?;
                let st = State::from_events(&store.events()?);
                let targets = exec::rollback_targets(&meta, &st, &only)?;
                for t in &targets {
                    let note = match t.phase {
                        exec::NicPhase::Flashed => String::new(),
                        p => format!(
                            "  (now {p:?}: its version is read first; run only if it shows {})",
                            t.nic.to
                        ),
                    };
                    out(&format!("would run: {}{note}\n", t.command))?;
                }
                out(&format!(
                    "{} NIC(s) would be rolled back; dry run: nothing was run or recorded; add --execute\n",
                    targets.len()
                ))?;
                return Ok(Outcome::Clean);
            }
            with_executor(&a.run, move |ex| {
                let n = ex.rollback(&only)?;
                eprintln!("{n} NIC(s) rolled back");
                Ok(None)
            })
        }
        RolloutCmd::Simulate(a) => simulate_cmd(&a),
        RolloutCmd::ApplyPatch(a) => apply_patch(&a),
    }
}

fn apply_patch(a: &RolloutPatchArgs) -> Result<Outcome> {
    use xirang_rollout::config;
    let mut db = config::read_config_db(&a.config_db).map_err(anyhow::Error::msg)?;
    let text = xirang_files::read_text(&a.patch, config::PATCH_LIMIT)?;
    let ops = config::parse_patch(&text, &a.patch)?;
    config::apply_patch(&mut db, &ops).map_err(|e| {
        anyhow::anyhow!(
            "{} does not apply to {} (nothing changed): {e}",
            a.patch.display(),
            a.config_db.display()
        )
    })?;
    let text = serde_json::to_string_pretty(&db)? + "\n";
    match &a.output {
        Some(p) => xirang_files::write_atomic(p, text.as_bytes())?,
        None => out(&text)?,
    }
    Ok(Outcome::Clean)
}

fn plan_cmd(a: &RolloutPlanArgs) -> Result<Outcome> {
    let (_, policy, plan) = make_plan(a)?;
    if a.json {
        out(&(serde_json::to_string_pretty(&plan)? + "\n"))?;
    } else {
        out(&plan.render_text(&policy))?;
    }
    Ok(Outcome::Clean)
}

fn make_plan(
    a: &RolloutPlanArgs,
) -> Result<(xirang_rollout::command::Inventory, Policy, xirang_rollout::Plan)> {
    let policy = Policy::load(&a.policy)?;
    let inv = load_inventory(&a.inventory)?;
    let plan = plan(&inv.fleet, &policy);
    Ok((inv, policy, plan))
}

fn start(a: &RolloutStartArgs) -> Result<Outcome> {
    let (_, policy, plan) = make_plan(&a.plan)?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    RolloutFiles::new(&a.state).start(&a.plan.inventory, &a.plan.policy, policy, plan.clone(), now_ms)?;
    eprintln!(
        "rollout recorded in {}: {} node(s) in {} wave(s), {} skipped; `xirang rollout advance --state {}` shows the first wave",
        a.state.display(),
        plan.upgrade_count(),
        plan.waves.len(),
        plan.skipped.len(),
        a.state.display()
    );
    Ok(Outcome::Clean)
}

fn with_executor(
    a: &RolloutRunArgs,
    f: impl FnOnce(&mut Executor<'_, CommandDriver>) -> Result<Option<Progress>, xirang_rollout::RolloutError>,
) -> Result<Outcome> {
    // A dry run only reads the state.
    let store = if a.execute {
        Store::open(&a.state)?
    } else {
        Store::open_read_only(&a.state)?
    };
    let meta = store.meta()?;
    if !a.execute {
        let st = State::from_events(&store.events()?);
        for l in exec::preview(&meta, &st) {
            out(&format!("{l}\n"))?;
        }
        return Ok(Outcome::Clean);
    }
    let files = RolloutFiles::new(&a.state);
    let lock = files.lock(Duration::from_secs(a.lock_wait_s), |p| {
        eprintln!(
            "waiting for {} (another executor, or a flash command still running)",
            p.display()
        )
    })?;
    let driver = files.command_driver(&meta, lock, Duration::from_secs(a.command_timeout_s), |w| {
        eprintln!("warning: {w}")
    })?;
    let opts = ExecOptions {
        crash_before_step: std::env::var(CRASH_ENV).ok().and_then(|v| v.parse().ok()),
    };
    let mut ex = Executor::new(&store, driver, opts, |l| eprintln!("{l}"))?;
    match f(&mut ex)? {
        None => Ok(Outcome::Clean),
        Some(Progress::WavePassed { wave }) => {
            eprintln!("wave {wave} passed; `advance --execute` runs the next one");
            Ok(Outcome::Clean)
        }
        Some(Progress::Completed) => {
            eprintln!("rollout completed: every wave passed its gates");
            Ok(Outcome::Clean)
        }
        Some(Progress::Halted(h)) => {
            eprintln!(
                "rollout halted ({}): {}\n`xirang rollout status --state {}` shows the evidence and the rollback commands",
                h.kind,
                h.reason,
                a.state.display()
            );
            Ok(Outcome::Findings)
        }
    }
}

fn status(a: &RolloutStateArgs) -> Result<Outcome> {
    let store = Store::open_read_only(&a.state)?;
    let meta = store.meta()?;
    let events = store.events()?;
    let st = State::from_events(&events);
    let waves = st.waves(&meta);
    if a.json {
        let v = json!({
            "state_file": a.state.display().to_string(),
            "policy": meta.policy_file,
            "inventory": meta.inventory,
            "completed": st.completed,
            "rolled_back": st.rolled_back,
            "halt": st.halt,
            "waves": waves,
            "events": events.len(),
        });
        out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
    } else {
        let mut s = format!(
            "Rollout {} (policy {}, inventory {})\n",
            a.state.display(),
            meta.policy_file,
            meta.inventory
        );
        let passed = st.passed.len();
        s += &format!(
            "{passed} of {} wave(s) passed{}{}\n",
            meta.plan.waves.len(),
            if st.completed { "; completed" } else { "" },
            if st.rolled_back { "; rolled back" } else { "" }
        );
        if let Some(h) = &st.halt {
            s += &format!("HALTED ({}, log #{}): {}\n", h.kind, h.seq, h.reason);
            for f in &h.failures {
                s += &format!("  {} {}: {}\n", f.node, f.gate, f.summary);
                for e in &f.evidence {
                    s += &format!("      {e}\n");
                }
                for c in &f.rollback {
                    s += &format!("    rollback: {c}\n");
                }
            }
        }
        let mut t = crate::cmd::table(&["wave", "stage", "nodes", "flashed", "state", "failed gates"]);
        for w in &waves {
            t.add_row(vec![
                w.wave.to_string(),
                w.stage.clone(),
                w.nodes.to_string(),
                w.flashed.to_string(),
                w.state.to_string(),
                w.failed.join(", "),
            ]);
        }
        s += &format!("{t}\n");
        out(&s)?;
    }
    Ok(if st.failing() {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}

fn log(a: &RolloutStateArgs) -> Result<Outcome> {
    let store = Store::open_read_only(&a.state)?;
    let events = store.events()?;
    if a.json {
        out(&(serde_json::to_string_pretty(&events)? + "\n"))?;
    } else {
        out(&exec::render_log(&events, true))?;
    }
    Ok(Outcome::Clean)
}

fn simulate_cmd(a: &RolloutSimArgs) -> Result<Outcome> {
    let degradation = match a.degradation.as_str() {
        "bandwidth" => Degradation::Bandwidth { factor: 0.7 },
        "errors" => Degradation::LinkErrors { per_s: 0.05 },
        "stays-old" => Degradation::StaysOld,
        "latency" => Degradation::Latency { factor: 1.3 },
        other => bail!("--degradation {other}: expected bandwidth, errors, stays-old or latency"),
    };
    anyhow::ensure!(
        (0.0..=1.0).contains(&a.degrade_share),
        "--degrade-share: expected a share in [0, 1], found {}",
        xirang_fabric::limits::Num(a.degrade_share)
    );
    let mut spec = SimSpec {
        seed: a.seed,
        degrade_share: a.degrade_share,
        degraded_nodes: a.degraded.clone(),
        degradation,
        ..SimSpec::default()
    };
    let max = xirang_rollout::fleet::MAX_SYNTHETIC_NODES;
    anyhow::ensure!(
        (1..=max).contains(&a.nodes),
        "--nodes: expected 1..={max} nodes, found {}",
        a.nodes
    );
    anyhow::ensure!(
        (1..=a.nodes).contains(&a.rack_size),
        "--rack-size: expected 1..={} nodes per rack (at most the fleet), found {}",
        a.nodes,
        a.rack_size
    );
    spec.fleet.nodes = a.nodes;
    spec.fleet.rack_size = a.rack_size;
    let policy = match &a.policy {
        Some(p) => Policy::load(p)?,
        None => default_policy(&spec),
    };
    let (plan, report) = match &a.inventory {
        Some(dir) => {
            let inv = load_inventory(dir)?;
            simulate_fleet(&inv.fleet, &dir.display().to_string(), &spec, &policy)?
        }
        None => simulate(&spec, &policy)?,
    };
    if a.json {
        let mut v = report.to_json();
        v["plan"] = json!(
            plan.waves
                .iter()
                .map(|w| json!({"wave": w.number, "stage": w.stage, "nodes": w.nodes.len()}))
                .collect::<Vec<_>>()
        );
        out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
    } else {
        let mut s = String::from("Waves: ");
        s += &plan
            .waves
            .iter()
            .map(|w| format!("{} ({}) {}", w.number, w.stage, w.nodes.len()))
            .collect::<Vec<_>>()
            .join(" · ");
        s.push('\n');
        s += &report.render_text();
        out(&s)?;
    }
    Ok(if report.halted_wave.is_some() {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}
