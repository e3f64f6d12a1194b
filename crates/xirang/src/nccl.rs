//! `xirang nccl ...`: nccl-tests results against the cost model, and NCCL advice.

use anyhow::{Context, Result, bail};
use serde::Serialize;
use xirang_collective::check::{RunReport, SLOW_SHARE, judge};
use xirang_collective::cost::{Algo, Coll, Platform, Proto};
use xirang_collective::nccl_tests::{self, TestRun};

use crate::Outcome;
use crate::args::{check_nics, host_platform, scenario_platform};
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

/// The hardware template: from a scenario's first host, or from the flags on top of the
/// built-in defaults (H100 NVLink with NVSwitch).
fn template(a: &NcclCheckArgs) -> Result<(Platform, String)> {
    if let Some(s) = &a.scenario {
        return Ok((host_platform(s)?, format!("hosts as in {}", s.display())));
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
    let (loaded, _, _) = scenario_platform(a.scenario.as_deref())?;
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

impl From<crate::cli::SweepOpArg> for xirang_collective::schedule::CollectiveOp {
    fn from(o: crate::cli::SweepOpArg) -> Self {
        use crate::cli::SweepOpArg as S;
        use xirang_collective::schedule::CollectiveOp as O;
        match o {
            S::AllReduce => O::AllReduce,
            S::AllGather => O::AllGather,
            S::ReduceScatter => O::ReduceScatter,
            S::Alltoall => O::AllToAll,
            S::Broadcast => O::Broadcast,
            S::Sendrecv => O::SendRecv,
        }
    }
}

impl From<crate::cli::SweepAlgoArg> for xirang_collective::schedule::CollectiveAlgorithm {
    fn from(a: crate::cli::SweepAlgoArg) -> Self {
        use crate::cli::SweepAlgoArg as S;
        use xirang_collective::schedule::CollectiveAlgorithm as A;
        match a {
            S::Ring => A::Ring,
            S::Tree => A::Tree,
            S::Hierarchical => A::Hierarchical,
            S::HalvingDoubling => A::HalvingDoubling,
        }
    }
}

/// Most sizes one sweep runs (a step of 1 byte from 1 to 1 TiB would never end).
const MAX_SWEEP_SIZES: usize = 10_000;

#[derive(Serialize)]
struct SweepReport<'a> {
    scenario: String,
    workload: String,
    test: &'static str,
    ranks: u32,
    hosts: usize,
    warmup_iters: u32,
    iters: u32,
    sizes: &'a [xirang_sim::sweep::SizePoint],
    avg_busbw_gbs: Option<f64>,
}

/// `xirang nccl sweep [SCENARIO]`.
pub(crate) fn sweep(a: &crate::cli::NcclSweepArgs) -> Result<Outcome> {
    use xirang_sim::sweep::{self, SweepSpec};
    let loaded = match &a.scenario {
        Some(p) => crate::cmd::load(p)?,
        None => xirang_fabric::Scenario::builtin_default().context("the built-in default scenario")?,
    };
    let sizes = sweep_sizes(a)?;
    let (name, spec_w) =
        sweep::workload_of(&loaded, a.workload.as_deref()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let op = a.op.map(Into::into).unwrap_or(spec_w.op);
    let spec = SweepSpec {
        workload: Some(name.clone()),
        sizes,
        op: a.op.map(Into::into),
        algorithm: a.algo.map(Into::into),
        proto: a.proto.map(|p| sweep::proto_of(Proto::from(p))),
        with_background: a.with_background,
        warmup_iters: a.warmup_iters as u32,
        iters: a.iters as u32,
    };
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let bar = indicatif::ProgressBar::new(spec.sizes.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {bar:30} {pos}/{len} sizes  [{elapsed} < {eta}]")
            .expect("valid template"),
    );
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    let points = sweep::sweep(&loaded, &spec, threads, &|done, _| bar.set_position(done as u64))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    bar.finish_and_clear();
    let hosts = loaded.fabric.hosts_named(&spec_w.hosts);
    let finished: Vec<f64> = points.iter().filter_map(|p| p.busbw_gbs).collect();
    let swept = Swept {
        loaded: &loaded,
        workload: name,
        coll: Coll::of_op(op),
        spec: &spec,
        ranks: ranks(&loaded, &hosts),
        avg: (!finished.is_empty()).then(|| finished.iter().sum::<f64>() / finished.len() as f64),
        points: &points,
    };
    if a.json {
        let r = SweepReport {
            scenario: loaded.scenario.name.clone(),
            workload: swept.workload.clone(),
            test: swept.coll.test_name(),
            ranks: swept.ranks.len() as u32,
            hosts: hosts.len(),
            warmup_iters: spec.warmup_iters,
            iters: spec.iters,
            sizes: &points,
            avg_busbw_gbs: swept.avg,
        };
        out(&(serde_json::to_string_pretty(&r)? + "\n"))?;
    } else {
        let table = swept.nccl_tests_table(a);
        match &a.out {
            // The whole table or nothing: a log another tool reads must not be cut short.
            Some(path) => {
                xirang_files::write_atomic(path, table.as_bytes())?;
                eprintln!("wrote {}", path.display());
            }
            None => out(&table)?,
        }
    }
    if finished.len() == points.len() {
        Ok(Outcome::Clean)
    } else {
        eprintln!("error: some sizes did not finish (see the notes above the table)");
        Ok(Outcome::Findings)
    }
}

/// The sizes `--minbytes`, `--maxbytes` and the step ask for, refused when out of order
/// or too many to ever finish.
fn sweep_sizes(a: &crate::cli::NcclSweepArgs) -> Result<Vec<u64>> {
    if a.min_bytes > a.max_bytes {
        bail!(
            "--minbytes {} is above --maxbytes {}: expected the smallest size first",
            a.min_bytes,
            a.max_bytes
        );
    }
    let sizes = xirang_sim::sweep::sizes(
        a.min_bytes,
        a.max_bytes,
        a.step_factor.map(|f| f as u64),
        a.step_bytes,
    );
    if sizes.len() > MAX_SWEEP_SIZES {
        bail!(
            "{} sizes from {} to {} B: expected at most {MAX_SWEEP_SIZES} (use a larger --stepbytes or a --stepfactor)",
            sizes.len(),
            a.min_bytes,
            a.max_bytes
        );
    }
    Ok(sizes)
}

/// The ranks as nccl-tests lists them: one per GPU of each host (one for a host without
/// GPUs), with NVIDIA's model names.
fn ranks(loaded: &xirang_fabric::Loaded, hosts: &[&xirang_fabric::model::Host]) -> Vec<nccl_tests::Rank> {
    let mut ranks = Vec::new();
    for h in hosts {
        for d in 0..h.gpus.len().max(1) {
            let gpu = h.gpus.get(d).map(|g| {
                let model = &loaded.fabric.gpus[g.index()].model;
                if model.starts_with("NVIDIA") {
                    model.clone()
                } else {
                    format!("NVIDIA {model}")
                }
            });
            ranks.push(nccl_tests::Rank {
                rank: ranks.len() as u32,
                host: h.name.clone(),
                device: d as u32,
                bus_id: format!("0000:{:02x}:00", d),
                gpu,
            });
        }
    }
    ranks
}

/// A finished sweep, as its outputs need it.
struct Swept<'a> {
    loaded: &'a xirang_fabric::Loaded,
    workload: String,
    coll: Coll,
    spec: &'a xirang_sim::sweep::SweepSpec,
    points: &'a [xirang_sim::sweep::SizePoint],
    ranks: Vec<nccl_tests::Rank>,
    /// Mean bus bandwidth of the sizes that finished.
    avg: Option<f64>,
}

impl Swept<'_> {
    /// The sweep as nccl-tests prints it, so the tools that read nccl-tests logs read it:
    /// its header, a row per finished size (in place = out of place), and notes saying
    /// how each size was simulated.
    fn nccl_tests_table(&self, a: &crate::cli::NcclSweepArgs) -> String {
        let coll = self.coll;
        let redop = match coll {
            Coll::AllReduce | Coll::ReduceScatter | Coll::SendRecv => "sum",
            _ => "none",
        };
        let root = if coll == Coll::Broadcast { 0 } else { -1 };
        let rows = self
            .points
            .iter()
            .map(|p| {
                // The twin moves the same bytes in place and out of place: both columns
                // are the one run; `N/A`: no data is checked.
                let m = nccl_tests::Measure {
                    time_us: p.time_us.unwrap_or(f64::NAN),
                    algbw_gbs: p.algbw_gbs.unwrap_or(0.0),
                    busbw_gbs: p.busbw_gbs.unwrap_or(0.0),
                    wrong: None,
                };
                nccl_tests::Row {
                    line: 0,
                    size_bytes: p.size_bytes,
                    count: p.count,
                    dtype: "float".to_string(),
                    redop: redop.to_string(),
                    root,
                    out_of_place: m,
                    in_place: m,
                }
            })
            .filter(|r| r.out_of_place.time_us.is_finite())
            .collect();
        let mut run = nccl_tests::TestRun::default_named(coll.test_name());
        run.params = Some(nccl_tests::Params {
            threads: 1,
            gpus: 1,
            min_bytes: a.min_bytes,
            max_bytes: a.max_bytes,
            step: match a.step_factor {
                Some(f) => nccl_tests::Step::Factor(f as u64),
                None => nccl_tests::Step::Bytes(a.step_bytes),
            },
            warmup_iters: self.spec.warmup_iters,
            iters: self.spec.iters,
        });
        run.ranks = self.ranks.clone();
        run.rows = rows;
        run.avg_busbw_gbs = self.avg;
        nccl_tests::render(&run, &self.notes())
    }

    /// The notes above the table: where it came from, then how each size ran.
    fn notes(&self) -> Vec<String> {
        let mut notes = vec![format!(
            "nccl-tests table simulated by xirang {}: scenario {}, workload {}, seed {}; in-place = out-of-place (the same bytes move)",
            env!("CARGO_PKG_VERSION"),
            self.loaded.scenario.name,
            self.workload,
            self.loaded.scenario.run.seed
        )];
        for p in self.points {
            let model = p
                .model_busbw_gbs
                .map_or_else(String::new, |m| format!(", cost model busbw {m:.2} GB/s"));
            let pick = p.nccl_pick.as_ref().map_or_else(String::new, |x| {
                format!(" (NCCL's tuner picks {x}, not modelled)")
            });
            let state = if p.time_us.is_some() {
                ""
            } else {
                ": did not finish"
            };
            notes.push(format!(
                "{} B: {} on {} channel(s){pick}{model}{state}",
                p.size_bytes, p.simulated, p.channels
            ));
        }
        notes
    }
}
