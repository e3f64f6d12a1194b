//! `xirang plan ...`: planners on top of the collective cost model.

use anyhow::{Result, bail};
use serde::Serialize;
use xirang_collective::cost::{Coll, Platform, choose};
use xirang_collective::overlap::{self, ModelFile, PYTORCH_DEFAULT_BUCKET_BYTES};

use crate::Outcome;
use crate::args::scenario_platform;
use crate::cli::{BatchingArgs, OverlapArgs};
use crate::cmd::{out, table};

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
    // A bucket is at most a model's gradients; 64 GiB is the gradients of a 32-billion-
    // parameter model in bf16, and larger buckets all behave as one.
    const MAX_BUCKET_MIB: f64 = 65_536.0;
    if !(a.first_bucket_mib.is_finite() && a.first_bucket_mib > 0.0 && a.first_bucket_mib <= MAX_BUCKET_MIB) {
        anyhow::bail!(
            "--first-bucket-mib: expected a size above 0 and at most {MAX_BUCKET_MIB} MiB, found {}",
            xirang_fabric::limits::Num(a.first_bucket_mib)
        );
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

/// The tensor-parallel group must fit the scenario's GPUs and fill whole hosts once it
/// spans more than one: 33 GPUs on hosts of 8 would be modelled as 40.
fn check_tp_group(
    a: &BatchingArgs,
    tp: u32,
    p: &Platform,
    loaded: &xirang_fabric::scenario::Loaded,
) -> Result<()> {
    let scenario = &loaded.scenario.name;
    let per_host = p.gpus_per_node.max(1);
    let hosts = &loaded.fabric.hosts;
    let gpus: u64 = hosts.iter().map(|h| h.gpus.len() as u64).sum();
    let problem = if u64::from(tp) > gpus {
        format!(
            "expected at most the {gpus} GPUs of scenario `{scenario}` ({} hosts), found {tp}",
            hosts.len()
        )
    } else if tp > per_host && !tp.is_multiple_of(per_host) {
        format!(
            "expected at most {per_host} GPUs (one host) or a multiple of {per_host} (whole hosts of scenario `{scenario}`), found {tp}"
        )
    } else {
        return Ok(());
    };
    let line = xirang_files::read_text(&a.file, xirang_collective::input::INPUT_LIMIT)
        .ok()
        .and_then(|t| xirang_fabric::diag::KeyPath::parse("tp_ranks").line_in(&t))
        .map(|l| format!(":{l}"))
        .unwrap_or_default();
    bail!("{}{line}: tp_ranks: {problem}", a.file.display())
}

/// `xirang plan batching FILE`.
pub(crate) fn batching(a: &BatchingArgs) -> Result<Outcome> {
    use xirang_collective::batching::{self, ServingFile};
    let f = ServingFile::load(&a.file)?;
    let (loaded, template, _) = scenario_platform(a.scenario.as_deref())?;
    check_tp_group(a, f.tp_ranks, &template, &loaded)?;
    // The tensor-parallel group fills hosts before spanning them.
    let mut p = template;
    p.gpus_per_node = f.tp_ranks.min(template.gpus_per_node.max(1));
    p.nodes = f.tp_ranks.div_ceil(p.gpus_per_node);
    let bar = if a.json {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(batching::policy_count() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} batching policies {pos}/{len} {bar:30} [{elapsed}]",
            )
            .expect("valid template"),
        );
        b
    };
    let results = batching::plan(&f, &p, a.requests, a.seed, &mut || bar.inc(1));
    bar.finish_and_clear();
    if a.json {
        #[derive(Serialize)]
        struct Report<'a> {
            serving: &'a ServingFile,
            platform: &'a Platform,
            results: &'a [batching::AggregationResult],
        }
        out(&(serde_json::to_string_pretty(&Report {
            serving: &f,
            platform: &p,
            results: &results,
        })? + "\n"))?;
        return Ok(if f.slo_met(&results) {
            Outcome::Clean
        } else {
            Outcome::Findings
        });
    }
    out(&batching_text(&f, &p, &results))?;
    Ok(if f.slo_met(&results) {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}

/// `plan batching`'s text: the group, each aggregation with its best policy, the best.
fn batching_text(
    f: &xirang_collective::batching::ServingFile,
    p: &Platform,
    results: &[xirang_collective::batching::AggregationResult],
) -> String {
    let mut s = format!(
        "{}: {} requests/s, p99 SLO {:.1} ms, {} collectives of {} B per request per step\ntensor-parallel group: {} GPUs = {} x {} ({}network {:.1} GB/s per node)\n",
        f.name,
        f.arrival_rate_per_s,
        f.slo_p99_us / 1e3,
        f.collectives_per_step,
        f.payload_bytes,
        f.tp_ranks,
        p.nodes,
        p.gpus_per_node,
        if p.nodes == 1 {
            "one host, GPU links only; "
        } else {
            ""
        },
        p.node_net_gbs,
    );
    let mut t = table(&[
        "aggregation",
        "step ms (1 / 256)",
        "best batch",
        "window us",
        "max req/s in SLO",
        "p50 ms",
        "p99 ms",
        "meets SLO",
    ]);
    for r in results {
        let b = &r.best;
        t.add_row(vec![
            r.aggregation.name().to_string(),
            format!("{:.2} / {:.2}", r.step_us.0 / 1e3, r.step_us.1 / 1e3),
            b.policy.max_batch.to_string(),
            format!("{:.0}", b.policy.window_us),
            format!("{:.0}", b.max_rate_per_s),
            format!("{:.2}", b.at_rate.p50_us / 1e3),
            format!("{:.2}", b.at_rate.p99_us / 1e3),
            if b.at_rate.p99_us <= f.slo_p99_us {
                "yes"
            } else {
                "NO"
            }
            .to_string(),
        ]);
    }
    s.push_str(&format!(
        "{t}\n(p50, p99 and meets SLO at {} requests/s, with each row's best policy)\n",
        f.arrival_rate_per_s
    ));
    let best = results
        .iter()
        .max_by(|x, y| x.best.max_rate_per_s.total_cmp(&y.best.max_rate_per_s))
        .expect("three aggregations");
    s.push_str(&format!(
        "best: {} collectives, batches of up to {} with a {:.0} us window: {:.0} requests/s within the SLO ({:.1}x the offered load)\n",
        best.aggregation.name(),
        best.best.policy.max_batch,
        best.best.policy.window_us,
        best.best.max_rate_per_s,
        best.best.max_rate_per_s / f.arrival_rate_per_s
    ));
    s
}
