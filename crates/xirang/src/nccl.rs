//! `xirang nccl ...`: nccl-tests results against the cost model, and NCCL advice.

use anyhow::{Context, Result, bail};
use serde::Serialize;
use xirang_collective::check::{RunReport, SLOW_SHARE, judge};
use xirang_collective::cost::{Algo, Coll, Platform, Proto};
use xirang_collective::nccl_tests::{self, TestRun};

use crate::Outcome;
use crate::cli::{AlgoArg, CollArg, NcclAdviseArgs, NcclCheckArgs, ProtoArg};
use crate::cmd::{out, table};

impl From<CollArg> for Coll {
    fn from(c: CollArg) -> Coll {
        match c {
            CollArg::AllReduce => Coll::AllReduce,
            CollArg::AllGather => Coll::AllGather,
            CollArg::ReduceScatter => Coll::ReduceScatter,
            CollArg::Alltoall => Coll::AllToAll,
            CollArg::Broadcast => Coll::Broadcast,
            CollArg::Sendrecv => Coll::SendRecv,
        }
    }
}

impl From<AlgoArg> for Algo {
    fn from(a: AlgoArg) -> Algo {
        match a {
            AlgoArg::Ring => Algo::Ring,
            AlgoArg::Tree => Algo::Tree,
            AlgoArg::Nvls => Algo::Nvls,
            AlgoArg::Nvlstree => Algo::NvlsTree,
        }
    }
}

impl From<ProtoArg> for Proto {
    fn from(p: ProtoArg) -> Proto {
        match p {
            ProtoArg::Ll => Proto::Ll,
            ProtoArg::Ll128 => Proto::Ll128,
            ProtoArg::Simple => Proto::Simple,
        }
    }
}

/// The hosts a scenario describes (its first host), as the cost model sees them.
pub(crate) fn scenario_platform(s: &std::path::Path) -> Result<Platform> {
    let loaded = crate::cmd::load(s)?;
    Platform::of_fabric(&loaded.fabric, &loaded.scenario.config, &[], 0)
        .with_context(|| format!("{}: the scenario has no hosts", s.display()))
}

/// `--nics` and `--nic-gbps` within what a fabric can hold.
pub(crate) fn check_nics(nics: Option<u32>, nic_gbps: Option<f64>) -> Result<()> {
    let max_nics = xirang_fabric::topology::MAX_DEVICES_PER_HOST;
    let max_gbps = xirang_fabric::topology::MAX_LINK_RATE_GBPS;
    if let Some(n) = nics
        && !(1..=max_nics).contains(&n)
    {
        bail!("--nics: expected 1..={max_nics} NICs per node, found {n}");
    }
    if let Some(g) = nic_gbps
        && !(g.is_finite() && g > 0.0 && g <= max_gbps)
    {
        bail!(
            "--nic-gbps: expected a rate above 0 and at most {max_gbps} Gbit/s, found {}",
            xirang_fabric::limits::Num(g)
        );
    }
    Ok(())
}

/// The hardware template: from a scenario's first host, or from the flags on top of the
/// built-in defaults (H100 NVLink with NVSwitch).
fn template(a: &NcclCheckArgs) -> Result<(Platform, String)> {
    if let Some(s) = &a.scenario {
        return Ok((scenario_platform(s)?, format!("hosts as in {}", s.display())));
    }
    check_nics(Some(a.nics), Some(a.nic_gbps))?;
    let p = Platform::of_nics(a.nics, a.nic_gbps);
    Ok((
        p,
        format!(
            "{} NICs x {} Gbit/s per node (--nics/--nic-gbps); GPU links from the GPU model in the log",
            a.nics, a.nic_gbps
        ),
    ))
}

#[derive(Serialize)]
struct FileReport<'a> {
    file: String,
    assumed: &'a str,
    runs: Vec<RunReport<'a>>,
    warnings: &'a [(usize, String)],
    findings: usize,
}

/// `xirang nccl check FILE`.
pub(crate) fn check(a: &NcclCheckArgs) -> Result<Outcome> {
    let log = nccl_tests::read_log(&a.file)?;
    if let Some(line) = log.first_invalid_line {
        eprintln!(
            "warning: {}:{line}: bytes that are not UTF-8 text, read as U+FFFD (the first such line)",
            a.file.display()
        );
    }
    let text = log.text;
    let report = nccl_tests::parse(&text)
        .map_err(|e| anyhow::anyhow!("{}:{}: {}", a.file.display(), e.line, e.message))?;
    if report.tests.is_empty() {
        bail!(
            "{}: no nccl-tests output found (expected `# nThread ...` headers or result rows)",
            a.file.display()
        );
    }
    let (tmpl, assumed) = template(a)?;
    let force = a.algo.map(|al| (Algo::from(al), Proto::from(a.proto)));
    let runs: Vec<RunReport<'_>> = report
        .tests
        .iter()
        .map(|run| {
            let coll = a.collective.map(Coll::from).or(run.collective);
            judge(run, coll, &tmpl, a.scenario.is_none(), force)
        })
        .collect();
    let findings: usize = runs.iter().map(RunReport::findings).sum();
    let file = FileReport {
        file: a.file.display().to_string(),
        assumed: &assumed,
        runs,
        warnings: &report.warnings,
        findings,
    };
    if a.json {
        out(&(serde_json::to_string_pretty(&file)? + "\n"))?;
    } else {
        out(&render(&file, &report.tests))?;
    }
    Ok(if findings > 0 {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}

/// The platform in one line.
fn describe(p: &Platform) -> String {
    format!(
        "{:?}, {} x {} GPUs, GPU links {:.0} GB/s, network {:.1} GB/s per node, {} channels{}",
        p.generation,
        p.nodes,
        p.gpus_per_node,
        p.intra_gbs,
        p.node_net_gbs,
        p.channels,
        if p.nvls { ", NVLS" } else { "" }
    )
}

fn render(f: &FileReport, tests: &[TestRun]) -> String {
    let mut s = String::new();
    for (r, run) in f.runs.iter().zip(tests) {
        let name = r.name.unwrap_or(match run.collective {
            Some(_) if run.collective_inferred => "(unnamed; AllReduce by its bandwidth ratio)",
            _ => "(unnamed test)",
        });
        s.push_str(&format!(
            "{name} (line {}): {} ranks on {} hosts{}{}\n",
            r.line,
            r.ranks.map_or("?".to_string(), |n| n.to_string()),
            r.nodes,
            r.gpu.map(|g| format!(", {g}")).unwrap_or_default(),
            r.nccl_version.map(|v| format!(", NCCL {v}")).unwrap_or_default(),
        ));
        if let Some(c) = &r.check {
            s.push_str(&format!("model: {} ({})\n", describe(&c.platform), f.assumed));
            let mut t = table(&[
                "size",
                "busbw GB/s",
                "model GB/s",
                "model algorithm",
                "measured/model",
                "",
            ]);
            for x in &c.sizes {
                let mut flag = Vec::new();
                if x.slow {
                    flag.push("SLOW".to_string());
                } else if !x.judged {
                    flag.push("(latency-bound: not judged)".to_string());
                }
                if x.wrong > 0 {
                    flag.push(format!("#wrong {} (DATA CORRUPTION)", x.wrong));
                }
                t.add_row(vec![
                    nccl_tests::size_text(x.size_bytes),
                    format!("{:.2}", x.measured_busbw_gbs),
                    format!("{:.2}", x.model.busbw_gbs),
                    format!("{}/{}", x.model.algo.nccl_name(), x.model.proto.nccl_name()),
                    format!("{:.0}%", x.ratio * 100.0),
                    flag.join(", "),
                ]);
            }
            s.push_str(&format!("{t}\n"));
            if r.slow_sizes > 0 {
                s.push_str(&format!(
                    "finding: {} of {} sizes below {:.0}% of the model\n",
                    r.slow_sizes,
                    c.sizes.len(),
                    SLOW_SHARE * 100.0
                ));
            }
        } else if let Some(why) = &r.not_checked {
            s.push_str(&format!("not compared with the model: {why}\n"));
        }
        if r.corrupt_sizes > 0 {
            s.push_str(&format!(
                "finding: {} sizes report #wrong > 0: the collective returned wrong data (data corruption)\n",
                r.corrupt_sizes
            ));
        }
        for (line, msg) in r.failures {
            s.push_str(&format!("finding: the test failed at line {line}: {msg}\n"));
        }
        if let Some(avg) = r.avg_busbw_gbs {
            s.push_str(&format!("average bus bandwidth (as reported): {avg} GB/s\n"));
        }
        s.push('\n');
    }
    for (line, w) in f.warnings {
        s.push_str(&format!("warning: line {line}: {w}\n"));
    }
    s.push_str(&if f.findings == 0 {
        "no findings\n".to_string()
    } else {
        format!("{} findings\n", f.findings)
    });
    s
}

/// `xirang nccl advise [SCENARIO]`.
pub(crate) fn advise(a: &NcclAdviseArgs) -> Result<Outcome> {
    let (loaded, _, _) = crate::plan::scenario_platform(a.scenario.as_deref())?;
    let advice = xirang_collective::advise::advise(&loaded).map_err(|e| anyhow::anyhow!("{e}"))?;
    let layout = crate::layout::if_asked(&loaded, a.json);
    let mut env = advice.env_file(&loaded.scenario.name);
    if let Some(l) = &layout {
        env.push_str(&crate::layout::comment(l));
    }
    let dir = a
        .out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = a
        .out
        .file_name()
        .with_context(|| format!("--out {}: expected a file name", a.out.display()))?
        .to_string_lossy()
        .into_owned();
    crate::cmd::write_atomic(dir, &name, &env)?;
    if a.json {
        let v = crate::layout::WithLayout {
            result: &advice,
            nic_layout: layout.as_ref(),
        };
        out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
        // The same status as the text: warnings are findings.
        return Ok(if advice.warnings.is_empty() {
            Outcome::Clean
        } else {
            Outcome::Findings
        });
    }
    let mut s = env.clone();
    let algos: Vec<Algo> = advice
        .table
        .first()
        .map(|r| r.algorithms.iter().map(|x| x.0).collect())
        .unwrap_or_default();
    let mut header: Vec<String> = vec!["AllReduce size".to_string()];
    header.extend(algos.iter().map(|a| format!("{} GB/s", a.nccl_name())));
    header.push("model picks".to_string());
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = table(&header_refs);
    for r in &advice.table {
        let mut row = vec![nccl_tests::size_text(r.bytes)];
        row.extend(
            r.algorithms
                .iter()
                .map(|(_, p, bw)| format!("{bw:.1} ({})", p.nccl_name())),
        );
        row.push(r.best.nccl_name().to_string());
        t.add_row(row);
    }
    s.push_str(&format!(
        "\npredicted AllReduce bus bandwidth (best protocol in brackets) on {}:\n{t}\nwritten to {}\n",
        describe(&advice.platform),
        a.out.display()
    ));
    if let Some(l) = &layout {
        s.push('\n');
        s.push_str(&crate::layout::render(l));
    }
    out(&s)?;
    Ok(if advice.warnings.is_empty() {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}
