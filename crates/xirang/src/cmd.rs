//! Command implementations: call the libraries, print the results.

use std::io::Write;

use anyhow::{Context, Result};
use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use serde::Serialize;
use xirang_fabric::analysis::{self, TopoSummary};
use xirang_fabric::diag::Diagnostic;
use xirang_fabric::scenario::{Scenario, ScenarioError};
use xirang_fabric::topology::TopologySpec;

use crate::Outcome;
use crate::cli::{Cli, Command, FileArgs, HostCmd, NcclCmd, PlanCmd, ScenarioCmd, TopoCmd, TopoShowArgs};

pub(crate) fn run(cli: Cli) -> Result<Outcome> {
    match cli.command {
        Command::Scenario(ScenarioCmd::Check(a)) => scenario_check(&a),
        Command::Scenario(ScenarioCmd::Expand { file }) => scenario_expand(&file),
        Command::Topo(TopoCmd::Show(a)) => topo_show(&a),
        Command::Sim(a) => crate::sim::run(&a),
        Command::Bench(a) => crate::bench::run(&a),
        Command::Nccl(NcclCmd::Check(a)) => crate::nccl::check(&a),
        Command::Nccl(NcclCmd::Advise(a)) => crate::nccl::advise(&a),
        Command::Nccl(NcclCmd::Sweep(a)) => crate::nccl::sweep(&a),
        Command::Plan(PlanCmd::Overlap(a)) => crate::plan::overlap(&a),
        Command::Plan(PlanCmd::Batching(a)) => crate::plan::batching(&a),
        Command::Plan(PlanCmd::Serving(a)) => crate::serving::plan(&a),
        Command::Tune(a) => crate::tune::run(&a),
        Command::Calibrate(a) => crate::calibrate::run(&a),
        Command::Host(HostCmd::Show(a)) => crate::host::show(&a),
        Command::Audit(a) => crate::audit::run(&a),
        Command::Monitor(a) => crate::monitor::run(&a),
        Command::Rollout(a) => crate::rollout::run(a),
        Command::Memreg(crate::cli::MemregCmd::Bench(a)) => crate::memreg::bench(&a),
        Command::Memreg(crate::cli::MemregCmd::Loopback(a)) => crate::memreg::loopback(&a),
        Command::Memreg(crate::cli::MemregCmd::Plan(a)) => crate::memreg::plan(&a),
        Command::Diagnose(a) => match &a.command {
            Some(crate::cli::DiagnoseCmd::Nccl(n)) => crate::diagnose::nccl(n),
            Some(crate::cli::DiagnoseCmd::NcclRas(n)) => crate::diagnose::nccl_ras(n),
            Some(crate::cli::DiagnoseCmd::Suite(s)) => crate::diagnose::suite(s),
            Some(crate::cli::DiagnoseCmd::Bench(b)) => crate::diagnose::bench(b),
            None => crate::diagnose::counters(&a),
        },
        Command::Host(HostCmd::Snapshot(a)) => crate::host::snapshot(&a),
        Command::Topo(TopoCmd::Dot { file }) => {
            let loaded = load(&file)?;
            out(&analysis::to_dot(&loaded.fabric))?;
            Ok(Outcome::Clean)
        }
    }
}

/// A table in the house style with the given header.
pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(header.to_vec());
    t
}

/// Writes to stdout, surfacing a closed pipe as an error `main` can recognise.
pub(crate) fn out(s: &str) -> Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(s.as_bytes())?;
    o.flush()?;
    Ok(())
}

/// Writes `text` to `dir/name` so that a reader never sees half a file, and never over a
/// FIFO, a device or a directory.
pub(crate) fn write_atomic(dir: &std::path::Path, name: &str, text: &str) -> Result<()> {
    Ok(xirang_files::write_atomic(&dir.join(name), text.as_bytes())?)
}

pub(crate) fn load(file: &std::path::Path) -> Result<xirang_fabric::Loaded> {
    let loaded = Scenario::load(file)?;
    for w in &loaded.warnings {
        eprintln!("{}", w.render(&loaded.file));
    }
    Ok(loaded)
}

#[derive(Serialize)]
struct CheckReport<'a> {
    file: String,
    ok: bool,
    errors: Vec<&'a Diagnostic>,
    warnings: Vec<&'a Diagnostic>,
}

fn scenario_check(a: &FileArgs) -> Result<Outcome> {
    let (diags, ok) = match Scenario::load(&a.file) {
        Ok(l) => (l.warnings, true),
        Err(ScenarioError::Invalid { diagnostics, .. }) => (diagnostics, false),
        Err(e) => return Err(e.into()),
    };
    let (errors, warnings): (Vec<_>, Vec<_>) = diags
        .iter()
        .partition(|d| d.severity == xirang_fabric::diag::Severity::Error);
    if a.json {
        let r = CheckReport {
            file: a.file.display().to_string(),
            ok,
            errors,
            warnings,
        };
        out(&(serde_json::to_string_pretty(&r)? + "\n"))?;
    } else {
        let mut s = String::new();
        for d in errors.iter().chain(&warnings) {
            s.push_str(&d.render(&a.file));
            s.push('\n');
        }
        if ok {
            s.push_str(&format!("{}: ok\n", a.file.display()));
            out(&s)?;
        } else {
            eprint!("{s}");
        }
    }
    Ok(if ok { Outcome::Clean } else { Outcome::Findings })
}

fn scenario_expand(file: &std::path::Path) -> Result<Outcome> {
    let loaded = load(file)?;
    let mut s = loaded.scenario.clone();
    s.topology = TopologySpec::Explicit(loaded.fabric.to_explicit());
    s.overrides = xirang_fabric::scenario::mtu_overrides(&loaded.fabric, &s.config);
    let text = s.to_toml();
    out(&format!(
        "# {} expanded by `xirang scenario expand`: the generated topology as an explicit list.\n{text}",
        file.display()
    ))
    .context("writing the expanded scenario")?;
    Ok(Outcome::Clean)
}

#[derive(Serialize)]
struct ShowReport<'a> {
    scenario: &'a str,
    #[serde(flatten)]
    summary: &'a TopoSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<PartitionReport<'a>>,
}

/// How a parallel run would divide the fabric.
#[derive(Serialize)]
struct PartitionReport<'a> {
    #[serde(flatten)]
    partition: &'a xirang_fabric::partition::Partition,
    /// Why the run would be serial though more partitions were asked for.
    serial_because: Option<&'a str>,
}

fn topo_show(a: &TopoShowArgs) -> Result<Outcome> {
    let loaded = load(&a.file)?;
    let s = analysis::summarize(&loaded.fabric);
    let plan = a.partitions.map(|n| {
        let opts = xirang_sim::options(&loaded);
        xirang_sim::parallel::plan_for(&loaded, &opts, n)
    });
    let partition = plan.as_ref().map(|p| PartitionReport {
        partition: &p.partition,
        serial_because: p.serial_because.as_deref(),
    });
    if a.json {
        let r = ShowReport {
            scenario: &loaded.scenario.name,
            summary: &s,
            partition,
        };
        out(&(serde_json::to_string_pretty(&r)? + "\n"))?;
        return Ok(Outcome::Clean);
    }
    let mut t = summary_table(&s);
    if let Some(p) = &plan {
        partition_rows(&mut t, p);
    }
    out(&format!(
        "{}: {}\n{t}\n",
        a.file.display(),
        loaded.scenario.description
    ))?;
    Ok(Outcome::Clean)
}

/// The fabric's figures, one row each.
fn summary_table(s: &analysis::TopoSummary) -> Table {
    let mut t = table(&["", "value"]);
    t.add_row(vec!["hosts".to_string(), s.hosts.to_string()]);
    t.add_row(vec![
        "GPUs / NICs".to_string(),
        format!("{} / {}", s.gpus, s.nics),
    ]);
    for ts in &s.tiers {
        t.add_row(vec![
            format!("{} switches", ts.tier),
            match ts.oversubscription {
                Some(o) => format!("{} (oversubscription {:.2}:1)", ts.switches, o),
                None => ts.switches.to_string(),
            },
        ]);
    }
    t.add_row(vec!["links".to_string(), s.links.to_string()]);
    t.add_row(vec![
        "host capacity".to_string(),
        format!("{} Gbit/s", s.host_capacity_gbps),
    ]);
    t.add_row(vec![
        "bisection bandwidth".to_string(),
        format!(
            "{} Gbit/s ({})",
            s.bisection_gbps,
            if !s.connected {
                "disconnected: some hosts cannot reach others"
            } else if s.full_bisection {
                "full"
            } else {
                "oversubscribed"
            }
        ),
    ]);
    t.add_row(vec![
        "diameter".to_string(),
        if s.connected {
            format!("{} hops", s.diameter_hops)
        } else {
            format!(
                "infinite: some NICs cannot reach others ({} hops between the farthest that can)",
                s.diameter_hops
            )
        },
    ]);
    t.add_row(vec!["connected".to_string(), s.connected.to_string()]);
    if let Some(p) = &s.sample_pair {
        t.add_row(vec![
            format!("{} -> {}", p.src, p.dst),
            format!(
                "{} hops, {} ECMP paths, path MTU {} B",
                p.hops, p.ecmp_paths, p.path_mtu_bytes
            ),
        ]);
    }
    t.add_row(vec![
        "GPU/NIC PCIe".to_string(),
        format!(
            "{} PIX, {} NODE, {} SYS only; GPU i with NIC i: {}; downgraded links: {}",
            s.pcie.gpus_with_pix_nic,
            s.pcie.gpus_with_node_nic,
            s.pcie.gpus_with_sys_nic_only,
            s.pcie.gpu_i_with_nic_i,
            s.pcie.downgraded_pcie_links
        ),
    ]);
    t
}

/// How a parallel run would divide the fabric: the partitions and what each holds, or
/// why the run would be serial.
fn partition_rows(t: &mut Table, p: &xirang_sim::parallel::Plan) {
    let part = &p.partition;
    t.add_row(vec![
        "partitions".to_string(),
        match &p.serial_because {
            Some(why) => format!("1 (serial: {why})"),
            None => format!(
                "{} ({} groups below the {} tier), {} links cut, lookahead {}",
                part.parts,
                part.groups,
                part.split_above.map_or("top".to_string(), |t| t.to_string()),
                part.cut_links,
                part.lookahead_ns.map_or("-".to_string(), |ns| format!("{ns} ns"))
            ),
        },
    ]);
    if p.serial_because.is_none() {
        for (i, m) in part.members.iter().enumerate() {
            t.add_row(vec![
                format!("partition {i}"),
                format!(
                    "{} hosts, {} switches, {} ports ({} on cut links)",
                    m.hosts, m.switches, m.ports, m.cut_ports
                ),
            ]);
        }
    }
}
