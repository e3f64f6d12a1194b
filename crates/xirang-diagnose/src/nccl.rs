//! Diagnosis from nccl-tests logs alone: what NCCL printed (INFO lines, the command line,
//! failures) and what it measured (bus bandwidth per size, per node pair).
//!
//! Rules (docs/reference/diagnosis.md §1.7 and the symptom table, rules 15 and 18):
//! - `NCCL-ABORT`: "remote process exited or there was a network error" — the pair's path
//!   (or the remote process) failed; named with the pair and the abort line.
//! - `NCCL-FAILED`: any other test failure line.
//! - `NCCL-WRONG`: `#wrong` > 0 — results corrupted in transit or on a GPU.
//! - `NCCL-SOCKET`: inter-node traffic over TCP sockets (`NCCL_IB_DISABLE=1`, or
//!   `Using network Socket`) instead of IB/RoCE.
//! - `NCCL-GDR-OFF`: NET/IB channels without `/GDRDMA`, or "GPU Direct RDMA Disabled":
//!   data bounces through host memory.
//! - `NCCL-NIC-SHARED`: several GPUs of a host send through one NIC while the host has
//!   more NICs than that, or the host runs more local ranks than NCCL lists NICs (k GPUs
//!   share each NIC: a ceiling near the NIC's rate / k) and the run, where judged, falls
//!   short of the model (which shares a node's network among its GPUs).
//! - `NCCL-BW-FALLS`: bus bandwidth that falls as messages grow (well below the run's own
//!   peak at the largest sizes): the path between the hosts degrades under sustained load
//!   (congestion, a degraded or flapping link).
//! - `NCCL-BELOW-MODEL`: sizes below [`SLOW_SHARE`] of the cost model that no other finding
//!   on the log explains (a NIC, link or PCIe path short of its rate).
//! - `NCCL-SLOW-PAIR` / `NCCL-SLOW-NODE`: over a set of pairwise logs (2 hosts each), a
//!   pair well below the median pair, or a node slow or failing with every peer
//!   (C4's row/column reading of the pair matrix).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use xirang_collective::check::{
    self, JUDGED_BANDWIDTH_SHARE, P2P_JUDGED_FROM_BYTES, SLOW_SHARE, platform_of_run,
};
use xirang_collective::cost::{Coll, Platform};
use xirang_collective::nccl_tests::{self, Report, TestRun, size_text};

use crate::finding::{Class, Evidence, Finding, Severity, rank};

/// A log to diagnose.
#[derive(Debug, Clone)]
pub struct Log {
    /// Name as given (a path), used in evidence.
    pub name: String,
    /// Its text.
    pub text: String,
}

/// The data files of an evidence bundle of a log diagnosis: each log as read, under
/// `logs/NNN-<file name>` (numbered, so two logs of one name stay apart).
pub fn bundle_data(logs: &[Log]) -> Vec<(String, Vec<u8>)> {
    logs.iter()
        .enumerate()
        .map(|(i, l)| {
            let base = std::path::Path::new(&l.name)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| format!("log{i}"));
            (format!("logs/{i:03}-{base}"), l.text.clone().into_bytes())
        })
        .collect()
}

/// A log that does not parse at all.
#[derive(Debug, Clone, PartialEq)]
pub struct LogError {
    /// The log.
    pub name: String,
    /// What the reader said (with the line).
    pub message: String,
}

impl std::fmt::Display for LogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.message)
    }
}

impl std::error::Error for LogError {}

/// The message NCCL's tests print when the peer process or the network went away.
const ABORT_TEXT: &str = "remote process exited or there was a network error";
/// A pair below this share of the median pair is slow: the same 80 % rule as
/// `xirang nccl check` (sizes below 80 % of the model are flagged).
const SLOW_PAIR_SHARE: f64 = 0.8;
/// Fewer pairs than this give no median worth comparing against.
const MIN_PAIRS: usize = 3;
/// Confidence of an abort meaning a network fault: the same line is printed when the
/// remote process crashed, which the log alone cannot rule out.
const ABORT_CONFIDENCE: f64 = 0.6;
/// Confidence of rules read from what NCCL itself says it uses (transport, GDR, NICs).
const SAID_BY_NCCL_CONFIDENCE: f64 = 0.95;
/// Confidence of a configuration read from the command line (it may be overridden).
const COMMAND_LINE_CONFIDENCE: f64 = 0.85;
/// Confidence of a slow node seen slow or failing with every peer.
const SLOW_NODE_CONFIDENCE: f64 = 0.8;
/// Confidence of a single slow pair (one measurement, could be a transient).
const SLOW_PAIR_CONFIDENCE: f64 = 0.6;
/// Bandwidth that "falls as messages grow": the largest size below this share of the run's
/// own peak at a smaller size. Healthy runs in the project's fixtures stay above 90 % of
/// their peak at the largest size (80 ranks, 16 GiB: 320.5 of 344.9 GB/s); the collapsing
/// pairs of the same cluster end near 10 % (test_data/nccl-tests/SOURCE.md).
const FALL_SHARE: f64 = 0.5;
/// Sizes below this are latency-bound on every fabric and do not count for the shape.
const SHAPE_FROM_BYTES: u64 = 1 << 20;
/// A run is "flat" when its bandwidth-bound sizes stay within this factor of each other.
const FLAT_SPREAD: f64 = 1.15;
/// Confidence of a shortfall against the model with no cause in the log: the model's
/// assumptions (NIC count and rate) may be what is wrong.
const BELOW_MODEL_CONFIDENCE: f64 = 0.5;
/// Confidence of a bandwidth collapse with size: one run, but a shape no healthy run has.
const FALLS_CONFIDENCE: f64 = 0.7;
/// Every collective nccl-tests measures, for logs that do not name theirs.
const ALL_COLLECTIVES: [Coll; 6] = [
    Coll::AllReduce,
    Coll::AllGather,
    Coll::ReduceScatter,
    Coll::AllToAll,
    Coll::Broadcast,
    Coll::SendRecv,
];

/// What the diagnosis knows of the hardware beyond what the logs say.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hardware {
    /// NICs per node; without it, the NICs NCCL lists in the log (`NET/IB : Using ...`).
    pub nics: Option<u32>,
    /// NIC line rate, Gbit/s. No log states it, so without it (or `platform`) bandwidth
    /// levels are not judged against the model; shapes and what NCCL says still are.
    pub nic_gbps: Option<f64>,
    /// The hosts as a scenario describes them (NICs, rates, GPU links): overrides both.
    pub platform: Option<Platform>,
}

/// The diagnosis of a set of logs.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    /// Ranked findings.
    pub findings: Vec<Finding>,
    /// Runs not compared with the cost model, and why (`file:line: reason`).
    pub not_judged: Vec<String>,
}

/// One bandwidth-bound size against the model.
#[derive(Debug, Clone)]
struct SizeView {
    line: usize,
    size_bytes: u64,
    measured_gbs: f64,
    model_gbs: f64,
    ratio: f64,
}

/// A run against the model: only the sizes the model says are bandwidth-bound.
#[derive(Debug, Clone)]
struct RunView {
    /// The collective(s) it was judged as.
    judged_as: String,
    /// The platform in words.
    platform: String,
    sizes: Vec<SizeView>,
}

impl RunView {
    fn slow(&self) -> Vec<&SizeView> {
        self.sizes.iter().filter(|s| s.ratio < SLOW_SHARE).collect()
    }

    fn largest(&self) -> Option<&SizeView> {
        self.sizes.iter().max_by_key(|s| s.size_bytes)
    }

    /// "busbw 0.90 GB/s at 16 GiB is 6% of the model's 14.00 GB/s (AllToAll; ...)".
    fn at(&self, s: &SizeView) -> String {
        format!(
            "busbw {:.2} GB/s at {} is {:.0}% of the model's {:.2} GB/s ({}; {})",
            s.measured_gbs,
            size_text(s.size_bytes),
            s.ratio * 100.0,
            s.model_gbs,
            self.judged_as,
            self.platform
        )
    }

    /// The shortfall in one sentence, at the largest judged size.
    fn summary(&self) -> String {
        let slow = self.slow();
        match self.largest() {
            Some(l) => format!(
                "{}; {} of {} bandwidth-bound sizes below {:.0}% of the model",
                self.at(l),
                slow.len(),
                self.sizes.len(),
                SLOW_SHARE * 100.0
            ),
            None => "no bandwidth-bound size".into(),
        }
    }
}

/// The collectives a run can be: the one it names (or its rows prove), else every
/// collective whose bus/algorithm bandwidth factor at this rank count matches the rows.
fn candidates(run: &TestRun) -> Result<(Vec<Coll>, bool), String> {
    if let Some(c) = run.collective {
        return Ok((vec![c], !run.collective_inferred));
    }
    let n = run
        .nranks()
        .ok_or("the ranks are not listed, so the collective cannot be read from the rows")?;
    let row = run
        .rows
        .iter()
        .rev()
        .find(|r| r.out_of_place.algbw_gbs > 1.0)
        .ok_or("the log does not name the collective and no row has bandwidth to read it from")?;
    let fits: Vec<Coll> = ALL_COLLECTIVES
        .into_iter()
        .filter(|c| nccl_tests::bus_factor_fits(row, c.bus_factor(n)))
        .collect();
    if fits.is_empty() {
        return Err(format!(
            "the log does not name the collective and its bus/algorithm bandwidth ratio {:.3} (line {}) fits none at {n} ranks",
            row.out_of_place.busbw_gbs / row.out_of_place.algbw_gbs,
            row.line
        ));
    }
    Ok((fits, false))
}

/// The platform to judge `run` on, and how it was found.
fn platform(run: &TestRun, hw: &Hardware, f: &Facts) -> Result<(Platform, String), String> {
    const UNEVEN: &str = "the ranks are not listed or do not divide evenly over the hosts";
    if let Some(p) = &hw.platform {
        let p = platform_of_run(run, p, false).ok_or(UNEVEN)?;
        return Ok((p, "hosts as the scenario describes them".into()));
    }
    let gbps = hw
        .nic_gbps
        .ok_or("the NIC rate is unknown (no log states it): pass --nic-gbps or --scenario")?;
    let (nics, from) = match hw.nics {
        Some(n) => (n, "given"),
        // The NICs the channels use, where the log shows channels; NCCL may list more
        // than it uses (a management RoCE port beside the IB rails).
        None => match f.nics_used.values().map(|v| v.len() as u32).max() {
            Some(n) => (n, "as NCCL's channels use them"),
            None => (
                f.nic_names
                    .values()
                    .map(|v| v.len() as u32)
                    .max()
                    .ok_or("the NIC count is unknown (the log lists no NET/IB devices): pass --nics")?,
                "as NCCL lists them",
            ),
        },
    };
    let p = platform_of_run(run, &Platform::of_nics(nics, gbps), true).ok_or(UNEVEN)?;
    Ok((p, format!("{nics} NIC(s) x {gbps} Gbit/s per node, NICs {from}")))
}

/// `run` against the model, judged leniently when the collective is not named: a size is
/// judged only where every candidate says it is bandwidth-bound, against the candidate
/// that expects the least.
fn view(run: &TestRun, hw: &Hardware, f: &Facts) -> Result<RunView, String> {
    if run.rows.is_empty() {
        return Err("no result rows".into());
    }
    let (colls, named) = candidates(run)?;
    let (p, how) = platform(run, hw, f)?;
    let checks: Vec<_> = colls.iter().map(|c| check::check(run, *c, &p, None)).collect();
    let mut sizes = Vec::new();
    for r in &run.rows {
        let per: Vec<_> = checks
            .iter()
            .map(|c| c.sizes.iter().find(|s| s.line == r.line))
            .collect();
        if per.iter().any(|s| s.is_none_or(|s| !s.judged)) {
            continue;
        }
        let Some(best) = per
            .into_iter()
            .flatten()
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
        else {
            continue;
        };
        sizes.push(SizeView {
            line: best.line,
            size_bytes: best.size_bytes,
            measured_gbs: best.measured_busbw_gbs,
            model_gbs: best.model.busbw_gbs,
            ratio: best.ratio,
        });
    }
    if sizes.is_empty() {
        return Err(format!(
            "no size is bandwidth-bound under the model (sizes where less than {:.0}% of the time moves bytes{} are not judged)",
            JUDGED_BANDWIDTH_SHARE * 100.0,
            if colls.iter().any(|c| matches!(c, Coll::SendRecv | Coll::AllToAll)) {
                format!(
                    ", and point-to-point sizes below {}",
                    size_text(P2P_JUDGED_FROM_BYTES)
                )
            } else {
                String::new()
            }
        ));
    }
    let names: Vec<String> = colls.iter().map(|c| format!("{c:?}")).collect();
    let judged_as = if named {
        names[0].clone()
    } else if names.len() == 1 {
        format!("{} by its rows", names[0])
    } else {
        format!(
            "any of {} (the log does not name it; the most lenient is used)",
            names.join(", ")
        )
    };
    Ok(RunView {
        judged_as,
        platform: format!(
            "{} x {} GPUs, network {:.1} GB/s per node: {how}",
            p.nodes, p.gpus_per_node, p.node_net_gbs
        ),
        sizes,
    })
}

/// A row as the shape rules see it: (line, size in bytes, busbw GB/s).
type ShapeRow = (usize, u64, f64);

/// Bandwidth falling as messages grow: the rows from the peak to the largest size.
fn falls(run: &TestRun) -> Option<Vec<ShapeRow>> {
    let mut rows: Vec<ShapeRow> = run
        .rows
        .iter()
        .filter(|r| r.size_bytes >= SHAPE_FROM_BYTES && r.busbw_gbs() > 0.0)
        .map(|r| (r.line, r.size_bytes, r.busbw_gbs()))
        .collect();
    rows.sort_by_key(|r| r.1);
    let peak = rows.iter().copied().max_by(|a, b| a.2.total_cmp(&b.2))?;
    let last = *rows.last()?;
    (last.1 > peak.1 && last.2 < FALL_SHARE * peak.2)
        .then(|| rows.into_iter().filter(|r| r.1 >= peak.1).collect())
}

/// The bandwidth-bound sizes stay within [`FLAT_SPREAD`] of each other.
fn flat(v: &RunView) -> bool {
    let lo = v
        .sizes
        .iter()
        .map(|s| s.measured_gbs)
        .fold(f64::INFINITY, f64::min);
    let hi = v.sizes.iter().map(|s| s.measured_gbs).fold(0.0, f64::max);
    lo > 0.0 && hi / lo <= FLAT_SPREAD
}

/// Longest evidence text kept from a log, in characters: a log line or a finding's
/// summary of one; longer ones end at a word with `…`.
const EVIDENCE_CHARS: usize = 300;

fn ev(log: &Log, line: usize, text: &str) -> Evidence {
    let text = text.trim();
    let value = match text.char_indices().nth(EVIDENCE_CHARS) {
        None => text.to_string(),
        Some((end, _)) => {
            let cut = text[..end].rfind(char::is_whitespace).unwrap_or(end);
            format!("{} …", text[..cut].trim_end())
        }
    };
    Evidence {
        source: format!("{}:{line}", log.name),
        value,
    }
}

/// `host:pid:tid [dev] NCCL INFO rest` → (host, dev, rest).
fn info(line: &str) -> Option<(&str, u32, &str)> {
    let at = line.find("] NCCL INFO ")?;
    let prefix = &line[..at];
    let open = prefix.rfind('[')?;
    let dev = prefix[open + 1..].trim().parse().ok()?;
    let host = prefix[..open].trim().split(':').next()?.trim();
    Some((host, dev, &line[at + "] NCCL INFO ".len()..]))
}

/// `... via NET/IB/3/GDRDMA` → (3, true); `via NET/IB/1(5)/GDRDMA` (PXN: through the
/// NIC of rank 5's GPU) → (1, true).
fn via_net_ib(rest: &str) -> Option<(u32, bool)> {
    let at = rest.find("via NET/IB/")?;
    let tail = &rest[at + "via NET/IB/".len()..];
    let end = tail.find(|c: char| !c.is_ascii_digit()).unwrap_or(tail.len());
    let dev = tail[..end].parse().ok()?;
    let mut after = &tail[end..];
    if let Some(p) = after.strip_prefix('(') {
        after = p.find(')').map(|c| &p[c + 1..]).unwrap_or(p);
    }
    Some((dev, after.starts_with("/GDRDMA")))
}

/// A line of a log: number and text.
type Line = (usize, String);
/// Local GPU → NET/IB device → the first line that shows it sending there.
type GpuNics = BTreeMap<u32, BTreeMap<u32, Line>>;

/// What one log says.
struct Facts {
    hosts: BTreeSet<String>,
    /// (line, text) of lines saying TCP sockets carry inter-node traffic.
    socket: Vec<(usize, String)>,
    /// Channels over NET/IB without GPUDirect, and explicit "disabled" lines.
    no_gdr: Vec<(usize, String)>,
    gdr_channels: usize,
    /// host → local GPU → NET/IB devices it sends through (first line seen).
    nic_use: BTreeMap<String, GpuNics>,
    /// host → NICs NCCL lists as usable.
    nics_available: BTreeMap<String, usize>,
    /// host → the NICs NCCL lists (`mlx5_5:1`), with the line that lists them.
    nic_names: BTreeMap<String, Vec<String>>,
    nic_line: BTreeMap<String, Line>,
    /// host → NET/IB device indices its channels use (send or receive).
    nics_used: BTreeMap<String, BTreeSet<u32>>,
    /// host → ranks NCCL places on it (`localRanks k`), with the line that says so.
    local_ranks: BTreeMap<String, (u32, Line)>,
    largest_busbw_gbs: Option<(f64, u64, usize)>,
    failures: Vec<(usize, String)>,
    wrong: Vec<(usize, u64)>,
}

fn facts(log: &Log, rep: &Report) -> Facts {
    let mut f = Facts {
        hosts: rep
            .tests
            .iter()
            .flat_map(|t| t.ranks.iter().map(|r| r.host.clone()))
            .collect(),
        socket: Vec::new(),
        no_gdr: Vec::new(),
        gdr_channels: 0,
        nic_use: BTreeMap::new(),
        nics_available: BTreeMap::new(),
        nic_names: BTreeMap::new(),
        nics_used: BTreeMap::new(),
        nic_line: BTreeMap::new(),
        local_ranks: BTreeMap::new(),
        largest_busbw_gbs: None,
        failures: Vec::new(),
        wrong: Vec::new(),
    };
    for (i, line) in log.text.lines().enumerate() {
        let n = i + 1;
        if line.contains("NCCL_IB_DISABLE=1") {
            f.socket.push((n, line.to_string()));
        }
        let Some((host, dev, rest)) = info(line) else {
            continue;
        };
        if rest.starts_with("Using network Socket") || rest.starts_with("NET/Socket : Using") {
            f.socket.push((n, line.to_string()));
        }
        if rest.contains("GPU Direct RDMA Disabled") {
            f.no_gdr.push((n, line.to_string()));
        }
        if let Some(list) = rest.strip_prefix("NET/IB : Using ") {
            let count = list
                .split_whitespace()
                .filter(|t| t.starts_with('[') && t.contains(']') && !t.starts_with("[RO]"))
                .count();
            f.nics_available.insert(host.to_string(), count);
            // `[0]mlx5_5:1/RoCE` → `mlx5_5:1`; `[RO]` is a flag, not a NIC.
            let names = list
                .split(';')
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .filter(|t| t.starts_with('[') && !t.starts_with("[RO]"))
                .filter_map(|t| {
                    t.split_once(']')
                        .map(|(_, n)| n.split('/').next().unwrap_or(n).to_string())
                })
                .collect();
            f.nic_names.insert(host.to_string(), names);
            f.nic_line
                .entry(host.to_string())
                .or_insert((n, line.to_string()));
        }
        if let Some(k) = rest
            .split_once(" localRanks ")
            .and_then(|(_, t)| t.split_whitespace().next())
            .and_then(|t| t.parse::<u32>().ok())
        {
            let e = f
                .local_ranks
                .entry(host.to_string())
                .or_insert((k, (n, line.to_string())));
            if k > e.0 {
                *e = (k, (n, line.to_string()));
            }
        }
        if let Some((nic, gdr)) = via_net_ib(rest) {
            f.nics_used.entry(host.to_string()).or_default().insert(nic);
            if gdr {
                f.gdr_channels += 1;
            } else {
                f.no_gdr.push((n, line.to_string()));
            }
            if rest.contains("[send]") {
                f.nic_use
                    .entry(host.to_string())
                    .or_default()
                    .entry(dev)
                    .or_default()
                    .entry(nic)
                    .or_insert((n, line.to_string()));
            }
        }
    }
    for t in &rep.tests {
        f.failures.extend(t.failures.iter().cloned());
        for r in &t.rows {
            if r.wrong() > 0 {
                f.wrong.push((r.line, r.wrong()));
            }
        }
        if let Some(r) = t.largest()
            && f.largest_busbw_gbs.is_none_or(|(_, s, _)| r.size_bytes > s)
        {
            f.largest_busbw_gbs = Some((r.busbw_gbs(), r.size_bytes, r.line));
        }
    }
    f
}

fn pair_name(hosts: &BTreeSet<String>) -> String {
    hosts.iter().cloned().collect::<Vec<_>>().join("<->")
}

/// Diagnoses one log on its own; `views` holds each run against the model (or why not).
fn diagnose_one(log: &Log, f: &Facts, rep: &Report, views: &[Result<RunView, String>]) -> Vec<Finding> {
    let mut out = Vec::new();
    let hosts_text = if f.hosts.is_empty() {
        "the hosts of this run".to_string()
    } else {
        f.hosts.iter().cloned().collect::<Vec<_>>().join(", ")
    };
    let multi_host = f.hosts.len() >= 2;
    failure_findings(log, f, &hosts_text, &mut out);
    setup_findings(log, f, views, &hosts_text, multi_host, &mut out);
    falling_finding(log, f, rep, views, &hosts_text, &mut out);
    below_model_findings(log, f, rep, views, &hosts_text, &mut out);
    // Findings about how NCCL ran say, too, how far below the model the run is.
    for x in out
        .iter_mut()
        .filter(|x| matches!(x.rule, "NCCL-SOCKET" | "NCCL-GDR-OFF"))
    {
        if let Some((run, v)) = rep.tests.iter().zip(views).find(|(r, _)| !r.rows.is_empty()) {
            x.evidence.push(model_evidence(log, run, v));
        }
    }
    out
}

/// Failed or aborted runs.
fn failure_findings(log: &Log, f: &Facts, hosts_text: &str, out: &mut Vec<Finding>) {
    for (line, text) in &f.failures {
        let abort = text.contains(ABORT_TEXT);
        let reporter = text.split(':').next().filter(|h| f.hosts.contains(*h));
        out.push(Finding {
            rule: if abort { "NCCL-ABORT" } else { "NCCL-FAILED" },
            class: if abort { Class::Link } else { Class::AppConfig },
            entity: pair_name(&f.hosts),
            severity: Severity::High,
            cause: if abort {
                format!(
                    "the collective aborted: {} lost its peer (the network path between the hosts failed, or the remote process died)",
                    reporter.unwrap_or("a rank")
                )
            } else {
                "the test failed".to_string()
            },
            confidence: if abort { ABORT_CONFIDENCE } else { 0.5 },
            scope: format!("every job spanning {hosts_text} fails"),
            advice: if abort {
                vec![
                    format!("run ib_write_bw between {hosts_text} (both directions) to test the path without NCCL"),
                    "read both ends' link error counters (symbol_error, link_downed, port_rcv_errors) and `dmesg | grep -i mlx5` for resets".into(),
                    "if the path is clean, look for the remote process's own crash (out of memory, Xid errors in dmesg)".into(),
                ]
            } else {
                vec!["read the lines before the failure for the NCCL WARN that names the cause; rerun with NCCL_DEBUG=INFO".into()]
            },
            evidence: vec![ev(log, *line, text)],
        });
        if abort {
            // One abort is enough: the "Test failure common.cu" lines that follow are
            // its unwinding.
            break;
        }
    }
}

/// How NCCL was set up: wrong values, sockets instead of RDMA, GPUDirect off, NICs used and local ranks.
fn setup_findings(
    log: &Log,
    f: &Facts,
    views: &[Result<RunView, String>],
    hosts_text: &str,
    multi_host: bool,
    out: &mut Vec<Finding>,
) {
    if !f.wrong.is_empty() {
        let (line, n) = f.wrong[0];
        out.push(Finding {
            rule: "NCCL-WRONG",
            class: Class::Nic,
            entity: pair_name(&f.hosts),
            severity: Severity::High,
            cause: format!("{n} wrong element(s): data corrupted in transit or on a GPU"),
            confidence: 0.7,
            scope: format!("results of every collective over {hosts_text} are suspect"),
            advice: vec![
                "rerun single-node tests on each host to rule out a GPU; then check NIC and link error counters on the path".into(),
            ],
            evidence: vec![ev(log, line, &format!("#wrong = {n}"))],
        });
    }
    if multi_host && !f.socket.is_empty() {
        let lost = f
            .largest_busbw_gbs
            .map(|(b, s, _)| format!("; busbw {b:.2} GB/s at {s} B"))
            .unwrap_or_default();
        let said_by_nccl = f.socket.iter().any(|(_, t)| t.contains("NCCL INFO"));
        out.push(Finding {
            rule: "NCCL-SOCKET",
            class: Class::AppConfig,
            entity: pair_name(&f.hosts),
            severity: Severity::High,
            cause: "inter-node traffic goes over TCP sockets, not IB/RoCE".into(),
            confidence: if said_by_nccl {
                SAID_BY_NCCL_CONFIDENCE
            } else {
                COMMAND_LINE_CONFIDENCE
            },
            scope: format!("all ranks on {hosts_text}{lost}"),
            advice: vec![
                "remove NCCL_IB_DISABLE=1 (and check NCCL_NET / NCCL_IB_HCA name real RDMA devices)".into(),
                "check the RDMA devices are up on every host (`ibv_devinfo`, `xirang host show`)".into(),
                "rerun with NCCL_DEBUG=INFO: `NCCL INFO Using network IB` and `via NET/IB/<n>` lines confirm RDMA".into(),
            ],
            evidence: f.socket.iter().take(3).map(|(l, t)| ev(log, *l, t)).collect(),
        });
    }
    if !f.no_gdr.is_empty() {
        out.push(Finding {
            rule: "NCCL-GDR-OFF",
            class: Class::HostConfig,
            entity: pair_name(&f.hosts),
            severity: Severity::Medium,
            cause: format!(
                "GPUDirect RDMA is not used on {} NET/IB channel(s) ({} with it): data bounces through host memory",
                f.no_gdr.len(),
                f.gdr_channels
            ),
            confidence: SAID_BY_NCCL_CONFIDENCE,
            scope: format!("inter-node bandwidth of {hosts_text} is capped by host memory and PCIe round trips"),
            advice: vec![
                "load nvidia-peermem (or use dma-buf: NCCL_DMABUF_ENABLE=1 with a recent driver)".into(),
                "check GPU-NIC affinity with `nvidia-smi topo -m` (PIX/PXB wanted, not SYS) and disable ACS on PCIe switches on bare metal".into(),
                "verify with `ib_write_bw --use_cuda=0` between the hosts".into(),
            ],
            evidence: f.no_gdr.iter().take(3).map(|(l, t)| ev(log, *l, t)).collect(),
        });
    }
    nic_findings(log, f, views, out);
}

/// The NICs NCCL used per host, and more local ranks than NICs.
fn nic_findings(log: &Log, f: &Facts, views: &[Result<RunView, String>], out: &mut Vec<Finding>) {
    for (host, gpus) in &f.nic_use {
        let mut by_nic: BTreeMap<u32, Vec<(u32, usize, String)>> = BTreeMap::new();
        for (gpu, nics) in gpus {
            for (nic, (line, text)) in nics {
                by_nic.entry(*nic).or_default().push((*gpu, *line, text.clone()));
            }
        }
        let used = by_nic.len();
        let available = f.nics_available.get(host).copied().unwrap_or(0);
        let gpus_n = gpus.len();
        if used < gpus_n.min(available) {
            let Some((nic, users)) = by_nic.iter().find(|(_, g)| g.len() > 1) else {
                continue;
            };
            out.push(Finding {
                rule: "NCCL-NIC-SHARED",
                class: Class::HostConfig,
                entity: format!("{host}/NET-IB-{nic}"),
                severity: Severity::Medium,
                cause: format!(
                    "{} GPUs of {host} send through NET/IB/{nic} while {available} NICs are usable: {used} NIC(s) carry {gpus_n} GPUs' traffic",
                    users.len()
                ),
                confidence: SAID_BY_NCCL_CONFIDENCE,
                scope: format!(
                    "{host}: inter-node bandwidth limited to {used} of {available} NICs"
                ),
                advice: vec![
                    "list one NIC per GPU in NCCL_IB_HCA, or unset it so NCCL picks the closest NIC per GPU".into(),
                    "check `nvidia-smi topo -m`: each GPU should have a NIC at PIX/PXB".into(),
                ],
                evidence: users.iter().take(4).map(|(_, l, t)| ev(log, *l, t)).collect(),
            });
        }
    }
    // More local ranks than NICs NCCL can use: each NIC carries several GPUs' traffic.
    for (host, (k, kline)) in &f.local_ranks {
        let Some(names) = f.nic_names.get(host).filter(|n| !n.is_empty()) else {
            continue;
        };
        let n = names.len() as u32;
        if *k <= n
            || out
                .iter()
                .any(|x| x.rule == "NCCL-NIC-SHARED" && x.entity.starts_with(&format!("{host}/")))
        {
            continue;
        }
        // A layout with fewer NICs than GPUs that reaches what the model gives it (the
        // model shares a node's network among its GPUs) is a design, not a fault.
        let judged: Vec<&RunView> = views.iter().flatten().filter(|v| !v.sizes.is_empty()).collect();
        if !judged.is_empty() && judged.iter().all(|v| v.slow().is_empty()) {
            continue;
        }
        let per_nic = k.div_ceil(n);
        let mut evidence = vec![ev(log, kline.0, &kline.1)];
        if let Some((l, t)) = f.nic_line.get(host) {
            evidence.push(ev(log, *l, t));
        }
        let level = views.iter().flatten().find(|v| !v.sizes.is_empty()).map(|v| {
            let l = v.largest().expect("non-empty");
            evidence.push(ev(log, l.line, &format!("model: {}", v.at(l))));
            format!(
                "; {} at {:.2} GB/s, {:.0}% of the model",
                if flat(v) { "flat" } else { "tops out" },
                l.measured_gbs,
                l.ratio * 100.0
            )
        });
        out.push(Finding {
            rule: "NCCL-NIC-SHARED",
            class: Class::HostConfig,
            entity: format!("{host}/{}", names.join("+")),
            severity: Severity::Medium,
            cause: format!(
                "{k} local ranks on {host} share {n} NIC(s) ({}): up to {per_nic} GPUs per NIC, each with at most 1/{per_nic} of its rate{}",
                names.join(", "),
                level.as_deref().unwrap_or("")
            ),
            confidence: SAID_BY_NCCL_CONFIDENCE,
            scope: format!("inter-node bandwidth of every GPU on {host}"),
            advice: vec![
                "give each GPU its own NIC (list them in NCCL_IB_HCA, or unset it so NCCL finds them), or run one rank per NIC".into(),
                "check `nvidia-smi topo -m` and `ibv_devinfo`: NICs that exist but are missing from `NET/IB : Using` are down or filtered out".into(),
            ],
            evidence,
        });
    }
}

/// Bandwidth that falls as messages grow: one finding per log, the run that falls furthest leading.
fn falling_finding(
    log: &Log,
    f: &Facts,
    rep: &Report,
    views: &[Result<RunView, String>],
    hosts_text: &str,
    out: &mut Vec<Finding>,
) {
    let falling: Vec<(&TestRun, &Result<RunView, String>, Vec<ShapeRow>)> = rep
        .tests
        .iter()
        .zip(views)
        .filter_map(|(run, v)| falls(run).map(|rows| (run, v, rows)))
        .collect();
    // One finding per log: the run that falls furthest leads, the others are evidence.
    let share = |rows: &[ShapeRow]| rows[rows.len() - 1].2 / rows[0].2;
    if let Some((run, v, rows)) = falling.iter().min_by(|a, b| share(&a.2).total_cmp(&share(&b.2))) {
        let (peak, last) = (rows[0], rows[rows.len() - 1]);
        let model = v.as_ref().ok().and_then(|v| {
            v.sizes
                .iter()
                .find(|s| s.line == last.0)
                .map(|s| format!(", {:.0}% of the model", s.ratio * 100.0))
        });
        let mut evidence = Vec::new();
        for (run, v, rows) in &falling {
            // The peak and the last three sizes show the shape.
            let tail = rows.len().saturating_sub(3).max(1);
            for (l, size, bw) in std::iter::once(&rows[0]).chain(&rows[tail..]) {
                evidence.push(ev(
                    log,
                    *l,
                    &format!(
                        "{}: busbw {bw:.2} GB/s at {}",
                        run.name.as_deref().unwrap_or("unnamed test"),
                        size_text(*size)
                    ),
                ));
            }
            evidence.push(model_evidence(log, run, v));
        }
        out.push(Finding {
            rule: "NCCL-BW-FALLS",
            class: Class::Link,
            entity: pair_name(&f.hosts),
            severity: Severity::High,
            cause: format!(
                "bandwidth falls as messages grow, from {:.2} GB/s at {} to {:.2} GB/s at {} ({:.0}% of its own peak{}){}: the path between {hosts_text} degrades under sustained load (congestion, or a degraded or flapping link)",
                peak.2,
                size_text(peak.1),
                last.2,
                size_text(last.1),
                share(rows) * 100.0,
                model.unwrap_or_default(),
                match falling.len() {
                    1 => String::new(),
                    n => format!(" in {} and {} other test(s) of the log", run.name.as_deref().unwrap_or("one test"), n - 1),
                }
            ),
            confidence: FALLS_CONFIDENCE,
            scope: format!(
                "large transfers between {hosts_text}: every collective whose messages exceed {}",
                size_text(peak.1)
            ),
            advice: vec![
                format!("run ib_write_bw between {hosts_text} for a minute with large messages; watch both ends' link error and pause counters (`xirang monitor`) while it runs"),
                "read the switch ports on the path for discards, PFC pause storms and flaps (link_downed, `show interfaces counters errors`)".into(),
                "test each node with a third, healthy node: the one that stays slow holds the bad link".into(),
            ],
            evidence,
        });
    }
}

/// Runs below the model when nothing else explains them.
fn below_model_findings(
    log: &Log,
    f: &Facts,
    rep: &Report,
    views: &[Result<RunView, String>],
    hosts_text: &str,
    out: &mut Vec<Finding>,
) {
    let explained = !out.is_empty();
    for (run, v) in rep.tests.iter().zip(views) {
        let Ok(v) = v else { continue };
        let slow = v.slow();
        if explained || slow.is_empty() {
            continue;
        }
        let worst = slow
            .iter()
            .min_by(|a, b| a.ratio.total_cmp(&b.ratio))
            .expect("non-empty");
        out.push(Finding {
            rule: "NCCL-BELOW-MODEL",
            class: Class::Nic,
            entity: pair_name(&f.hosts),
            severity: Severity::Medium,
            cause: format!(
                "{} of {} bandwidth-bound sizes below {:.0}% of the model{}, worst {}: a NIC, link or PCIe path short of its rate, or fewer or slower NICs than assumed",
                slow.len(),
                v.sizes.len(),
                SLOW_SHARE * 100.0,
                if flat(v) { ", flat" } else { "" },
                v.at(worst)
            ),
            confidence: BELOW_MODEL_CONFIDENCE,
            scope: format!("every collective over {hosts_text}"),
            advice: vec![
                "audit the hosts (`xirang audit`): NIC link rate, PCIe width and speed, GPU-NIC affinity".into(),
                "rerun with NCCL_DEBUG=INFO: the NICs, GPUDirect and transport NCCL uses explain most shortfalls".into(),
                "if the hardware differs from the assumption, pass --nics/--nic-gbps or --scenario".into(),
            ],
            evidence: slow
                .iter()
                .take(4)
                .map(|s| ev(log, s.line, &format!("model: {}", v.at(s))))
                .chain(std::iter::once(ev(log, run.line, &format!("run: {}", run.name.as_deref().unwrap_or("unnamed test")))))
                .collect(),
        });
    }
}

/// The run against the model in one evidence line, or why it was not compared.
fn model_evidence(log: &Log, run: &TestRun, v: &Result<RunView, String>) -> Evidence {
    match v {
        Ok(v) => ev(
            log,
            v.largest().map_or(run.line, |s| s.line),
            &format!("model: {}", v.summary()),
        ),
        Err(why) => ev(log, run.line, &format!("not compared with the model: {why}")),
    }
}

/// Diagnoses logs: each on its own, then the set as a pair matrix when the logs are
/// pairwise runs (two hosts each).
pub fn diagnose(logs: &[Log], hw: &Hardware) -> Result<Diagnosis, LogError> {
    let mut out = Vec::new();
    let mut not_judged = Vec::new();
    // pair -> (busbw at the largest size or None when failed, log index, line)
    let mut pairs: BTreeMap<(String, String), (Option<f64>, usize, usize)> = BTreeMap::new();
    for (i, log) in logs.iter().enumerate() {
        let rep = nccl_tests::parse(&log.text).map_err(|e| LogError {
            name: log.name.clone(),
            message: e.to_string(),
        })?;
        // "No fault found" is only said about data that was there: a file with no result
        // table and no line NCCL wrote is not a log of either.
        if rep.tests.is_empty()
            && !log
                .text
                .lines()
                .any(|l| l.contains("NCCL") || l.contains(ABORT_TEXT))
        {
            return Err(LogError {
                name: log.name.clone(),
                message: "no nccl-tests result table and no line NCCL wrote: expected the output of an nccl-tests binary or an NCCL_DEBUG=INFO log".into(),
            });
        }
        // What the reader set aside (a row that breaks nccl-tests' own arithmetic, an
        // unfinished row) is an input problem at its line, never a finding.
        for (line, w) in &rep.warnings {
            not_judged.push(format!("{}:{line}: {w}", log.name));
        }
        let f = facts(log, &rep);
        let views: Vec<Result<RunView, String>> = rep.tests.iter().map(|t| view(t, hw, &f)).collect();
        for (t, v) in rep.tests.iter().zip(&views) {
            if let Err(why) = v
                && !t.rows.is_empty()
            {
                not_judged.push(format!(
                    "{}:{}: not compared with the model: {why}",
                    log.name, t.line
                ));
            }
        }
        out.extend(diagnose_one(log, &f, &rep, &views));
        if f.hosts.len() == 2 {
            let mut h = f.hosts.iter().cloned();
            let key = (h.next().unwrap_or_default(), h.next().unwrap_or_default());
            let failed = f.failures.first().map(|x| x.0);
            let value = match (failed, f.largest_busbw_gbs) {
                (Some(l), _) => (None, i, l),
                (None, Some((b, _, l))) => (Some(b), i, l),
                (None, None) => continue,
            };
            pairs.insert(key, value);
        }
    }
    // A pair whose own log already explains it is not repeated as a slow pair.
    let explained: BTreeSet<String> = out
        .iter()
        .filter(|x| x.rule == "NCCL-BW-FALLS")
        .map(|x| x.entity.clone())
        .collect();
    out.extend(pair_matrix(logs, &pairs, &explained));
    rank(&mut out);
    Ok(Diagnosis {
        findings: out,
        not_judged,
    })
}

fn pair_matrix(
    logs: &[Log],
    pairs: &BTreeMap<(String, String), (Option<f64>, usize, usize)>,
    explained: &BTreeSet<String>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if pairs.len() < MIN_PAIRS {
        return out;
    }
    let mut ok: Vec<f64> = pairs.values().filter_map(|v| v.0).collect();
    if ok.is_empty() {
        return out;
    }
    ok.sort_by(f64::total_cmp);
    let median = ok[ok.len() / 2];
    let bad = |v: &Option<f64>| v.is_none_or(|b| b < SLOW_PAIR_SHARE * median);
    let mut per_node: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for ((a, b), (v, _, _)) in pairs {
        for n in [a.as_str(), b.as_str()] {
            let e = per_node.entry(n).or_insert((0, 0));
            e.0 += 1;
            if bad(v) {
                e.1 += 1;
            }
        }
    }
    // A node bad with every peer (at least two) is the node; its pairs are not repeated.
    let bad_nodes: BTreeSet<&str> = per_node
        .iter()
        .filter(|(_, (n, b))| *n >= 2 && n == b)
        .map(|(k, _)| *k)
        .collect();
    for node in &bad_nodes {
        let evidence: Vec<Evidence> = pairs
            .iter()
            .filter(|((a, b), _)| a == node || b == node)
            .map(|((a, b), (v, i, l))| {
                ev(
                    &logs[*i],
                    *l,
                    &match v {
                        Some(x) => format!("{a}<->{b}: busbw {x:.2} GB/s (median pair {median:.2})"),
                        None => format!("{a}<->{b}: failed"),
                    },
                )
            })
            .collect();
        out.push(Finding {
            rule: "NCCL-SLOW-NODE",
            class: Class::Nic,
            entity: node.to_string(),
            severity: Severity::High,
            cause: format!(
                "{node} is slow or failing with every peer it was tested with ({} pair(s)): its NIC, its link or the host",
                per_node[node].0
            ),
            confidence: SLOW_NODE_CONFIDENCE,
            scope: format!("every job placed on {node}; drain it until fixed"),
            advice: vec![
                format!("drain {node}; read its NIC ports (`xirang host show`, link error counters, PCIe link state) and `dmesg`"),
                format!("ib_write_bw from {node} to two healthy nodes to confirm"),
            ],
            evidence,
        });
    }
    for ((a, b), (v, i, l)) in pairs {
        if !bad(v)
            || bad_nodes.contains(a.as_str())
            || bad_nodes.contains(b.as_str())
            || explained.contains(&format!("{a}<->{b}"))
        {
            continue;
        }
        // Failed pairs already have their NCCL-ABORT/NCCL-FAILED finding.
        let Some(x) = v else { continue };
        out.push(Finding {
            rule: "NCCL-SLOW-PAIR",
            class: Class::Link,
            entity: format!("{a}<->{b}"),
            severity: Severity::Medium,
            cause: format!(
                "this pair reaches {:.0}% of the median pair: the path between them (a link or switch port on it), while each node is fine with others",
                x / median * 100.0
            ),
            confidence: SLOW_PAIR_CONFIDENCE,
            scope: format!("traffic between {a} and {b}"),
            advice: vec![
                format!("trace the ECMP paths between {a} and {b} and read the error and discard counters of every port on them"),
                "rerun the pair to rule out a transient".into(),
            ],
            evidence: vec![ev(
                &logs[*i],
                *l,
                &format!("{a}<->{b}: busbw {x:.2} GB/s (median pair {median:.2})"),
            )],
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{EVIDENCE_CHARS, Log, ev};

    #[test]
    fn long_evidence_ends_at_a_word() {
        let log = Log {
            name: "l".into(),
            text: String::new(),
        };
        let e = ev(&log, 3, &"word ".repeat(100));
        assert!(e.value.ends_with("word …"), "{}", e.value);
        assert!(e.value.chars().count() <= EVIDENCE_CHARS + 2);
        assert_eq!(e.source, "l:3");
        assert_eq!(ev(&log, 3, "  short line ").value, "short line");
    }
}
