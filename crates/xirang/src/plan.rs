//! `xirang plan ...`: planners on top of the collective cost model.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use xirang_collective::cost::{Coll, Platform, choose};
use xirang_collective::overlap::{self, ModelFile, PYTORCH_DEFAULT_BUCKET_BYTES};
use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_fabric::workload::Workload;

use crate::Outcome;
use crate::cli::OverlapArgs;
use crate::cmd::{out, table};

/// The built-in default scenario (scenarios/default.toml), for planners run without one.
const DEFAULT_SCENARIO: &str = include_str!("../../../scenarios/default.toml");

/// The scenario (given or built-in) and the platform of its data-parallel group: the hosts
/// of its first collective workload, else all hosts.
pub(crate) fn scenario_platform(path: Option<&Path>) -> Result<(Loaded, Platform, String)> {
    let loaded = match path {
        Some(p) => crate::cmd::load(p)?,
        None => {
            let p = Path::new("scenarios/default.toml (built in)");
            Scenario::parse(DEFAULT_SCENARIO, p)
                .and_then(|s| s.build(p, Path::new("."), Some(DEFAULT_SCENARIO)))
                .context("the built-in default scenario")?
        }
    };
    let (hosts, channels, what) = loaded
        .scenario
        .workloads
        .iter()
        .find_map(|(name, w)| match w {
            Workload::Collective(c) => Some((
                c.hosts.clone(),
                c.channels,
                format!("the hosts of workload `{name}`"),
            )),
            _ => None,
        })
        .unwrap_or_else(|| (Vec::new(), 0, "all hosts".to_string()));
    let platform = Platform::of_fabric(&loaded.fabric, &loaded.scenario.config, &hosts, channels)
        .context("the scenario has no hosts to run a collective on")?;
    let desc = format!(
        "{} ({what}: {} x {} GPUs, network {:.1} GB/s per node)",
        loaded.scenario.name, platform.nodes, platform.gpus_per_node, platform.node_net_gbs
    );
    Ok((loaded, platform, desc))
}

#[derive(Serialize)]
struct OverlapReport<'a> {
    model: &'a str,
    scenario: &'a str,
    total_grad_bytes: u64,
    backward_us: f64,
    sweep: &'a overlap::Sweep,
    best_bucket_bytes: u64,
    best_iteration_us: f64,
    default_iteration_us: f64,
    gain_vs_default: f64,
}

const MIB: f64 = 1024.0 * 1024.0;

/// `xirang plan overlap FILE`.
pub(crate) fn overlap(a: &OverlapArgs) -> Result<Outcome> {
    let model = ModelFile::load(&a.file)?;
    let (_, platform, desc) = scenario_platform(a.scenario.as_deref())?;
    if !(a.first_bucket_mib.is_finite() && a.first_bucket_mib > 0.0) {
        anyhow::bail!("--first-bucket-mib must be positive");
    }
    let first = (a.first_bucket_mib * MIB) as u64;
    let allreduce_us = |bytes: u64| choose(Coll::AllReduce, bytes, &platform).map_or(0.0, |p| p.time_us);
    let sweep = overlap::sweep(&model, first, &allreduce_us);
    let best = &sweep.plans[sweep.best];
    let default = &sweep.plans[sweep.default];
    let gain = 1.0 - best.iteration_us / default.iteration_us;
    if a.json {
        let r = OverlapReport {
            model: &model.name,
            scenario: &desc,
            total_grad_bytes: model.total_grad_bytes(),
            backward_us: model.backward_us(),
            sweep: &sweep,
            best_bucket_bytes: best.bucket_bytes,
            best_iteration_us: best.iteration_us,
            default_iteration_us: default.iteration_us,
            gain_vs_default: gain,
        };
        out(&(serde_json::to_string_pretty(&r)? + "\n"))?;
        return Ok(Outcome::Clean);
    }
    let mut s = format!(
        "{}: {:.2} GB of gradients, backward {:.1} ms, compute alone {:.1} ms per iteration\nAllReduce on {desc}\n",
        model.name,
        model.total_grad_bytes() as f64 / 1e9,
        model.backward_us() / 1e3,
        sweep.compute_only_us / 1e3
    );
    let mut t = table(&[
        "bucket MiB",
        "buckets",
        "AllReduce ms",
        "exposed ms",
        "iteration ms",
        "",
    ]);
    for (i, p) in sweep.plans.iter().enumerate() {
        let mut note = Vec::new();
        if i == sweep.best {
            note.push("best");
        }
        if p.bucket_bytes == PYTORCH_DEFAULT_BUCKET_BYTES {
            note.push("PyTorch default");
        }
        t.add_row(vec![
            format!("{:.1}", p.bucket_bytes as f64 / MIB),
            p.buckets.to_string(),
            format!("{:.1}", p.comm_us / 1e3),
            format!("{:.1}", p.exposed_comm_us / 1e3),
            format!("{:.1}", p.iteration_us / 1e3),
            note.join(", "),
        ]);
    }
    s.push_str(&format!("{t}\n"));
    s.push_str(&format!(
        "best bucket {:.1} MiB: {:.1} ms per iteration, {:.1} ms of it exposed communication; \
         {} the PyTorch default (25 MiB, {:.1} ms) by {:.1}%\n",
        best.bucket_bytes as f64 / MIB,
        best.iteration_us / 1e3,
        best.exposed_comm_us / 1e3,
        if gain > 0.0 { "beats" } else { "ties" },
        default.iteration_us / 1e3,
        gain * 100.0
    ));
    out(&s)?;
    Ok(Outcome::Clean)
}
