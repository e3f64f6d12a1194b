//! Diagnosis from nccl-tests logs alone: what NCCL printed (INFO lines, the command line,
//! failures) and what it measured (bus bandwidth per size, per node pair).
//!
//! Rules (shared/reference/diagnosis.md §1.7 and the symptom table, rules 15 and 18):
//! - `NCCL-ABORT`: "remote process exited or there was a network error" — the pair's path
//!   (or the remote process) failed; named with the pair and the abort line.
//! - `NCCL-FAILED`: any other test failure line.
//! - `NCCL-WRONG`: `#wrong` > 0 — results corrupted in transit or on a GPU.
//! - `NCCL-SOCKET`: inter-node traffic over TCP sockets (`NCCL_IB_DISABLE=1`, or
//!   `Using network Socket`) instead of IB/RoCE.
//! - `NCCL-GDR-OFF`: NET/IB channels without `/GDRDMA`, or "GPU Direct RDMA Disabled":
//!   data bounces through host memory.
//! - `NCCL-NIC-SHARED`: several GPUs of a host send through one NIC while the host has
//!   more NICs than that.
//! - `NCCL-SLOW-PAIR` / `NCCL-SLOW-NODE`: over a set of pairwise logs (2 hosts each), a
//!   pair well below the median pair, or a node slow or failing with every peer
//!   (C4's row/column reading of the pair matrix).

use std::collections::{BTreeMap, BTreeSet};

use xirang_collective::nccl_tests::{self, Report};

use crate::finding::{Class, Evidence, Finding, Severity, rank};

/// A log to diagnose.
#[derive(Debug, Clone)]
pub struct Log {
    /// Name as given (a path), used in evidence.
    pub name: String,
    /// Its text.
    pub text: String,
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

fn ev(log: &Log, line: usize, text: &str) -> Evidence {
    Evidence {
        source: format!("{}:{line}", log.name),
        text: text.trim().chars().take(300).collect(),
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
        }
        if let Some((nic, gdr)) = via_net_ib(rest) {
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

/// Diagnoses one log on its own.
fn diagnose_one(log: &Log, f: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    let hosts_text = if f.hosts.is_empty() {
        "the hosts of this run".to_string()
    } else {
        f.hosts.iter().cloned().collect::<Vec<_>>().join(", ")
    };
    let multi_host = f.hosts.len() >= 2;
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
    out
}

/// Diagnoses logs: each on its own, then the set as a pair matrix when the logs are
/// pairwise runs (two hosts each).
pub fn diagnose(logs: &[Log]) -> Result<Vec<Finding>, LogError> {
    let mut out = Vec::new();
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
        let f = facts(log, &rep);
        out.extend(diagnose_one(log, &f));
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
    out.extend(pair_matrix(logs, &pairs));
    rank(&mut out);
    Ok(out)
}

fn pair_matrix(
    logs: &[Log],
    pairs: &BTreeMap<(String, String), (Option<f64>, usize, usize)>,
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
        if !bad(v) || bad_nodes.contains(a.as_str()) || bad_nodes.contains(b.as_str()) {
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
