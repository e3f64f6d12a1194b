//! NCCL RAS reports into findings: dead and unreachable job processes and their hosts,
//! ranks behind the rest (the straggler or hung rank), communicators whose ranks
//! disagree on their state, NCCL errors, and timeouts of the collection itself.
//!
//! RAS (NCCL 2.24 and later, on by default) answers on `localhost:28028`; `ncclras` or
//! `echo verbose status | nc localhost 28028` prints its report. What is read, with its
//! source lines, is in docs/reference/live-signals.md §B:
//! - the text report: `Communicators... (<s>s)`, the group table (`Status`, `Errors`),
//!   the `Errors` section (`INCOMPLETE`, `DEAD`, per communicator `#<group>-<idx>
//!   (<hash>) INCOMPLETE|ERROR`) and the `Warnings` section (`TIMEOUT`, per communicator
//!   `MISMATCH` of status or of operation counts, with `Rank r -- GPU g managed by
//!   process p on node h` under the level they belong to);
//! - the JSON report (`-f json`, 2.28.7 and later): raw data without verdicts, which are
//!   derived here the way the text report states them (missing ranks, per-rank status
//!   and collective counts);
//! - monitor events (`-m`, 2.29 and later), text (`[date time] EVENT: peer details`) or
//!   JSON objects one after another.
//!
//! The three forms parse into one [`Report`], and findings come only from it, so the
//! text and the JSON form of one report give the same findings.
//!
//! NCCL's result codes (`ncclResult_t` in NCCL's `nccl.h`): 0 success, 1 unhandled CUDA
//! error, 2 system error, 3 internal error, 4 invalid argument, 5 invalid usage, 6 remote
//! error, 7 in progress (docs/reference/live-signals.md §B: `init_state` 0 is success, 7
//! in progress, anything else an error).

use std::fmt::Write as _;

use crate::finding::{Class, Evidence, Finding, Severity};

use xirang_monitor::nccl_ras::{Effect, effect, monitor_event, process_line, same};
pub use xirang_monitor::nccl_ras::{Event, MAX_REPORT_BYTES, PEER_DEAD_S, Process};

/// RAS lists the ranks of a level only when it has at most this many ranks and at most
/// [`MAX_LISTED_SHARE`] of them (non-verbose; docs/reference/live-signals.md §B,
/// `client_support.cc:21-26`); the JSON form's levels are listed by the same rule, so
/// both forms of one report name the same ranks.
pub const MAX_LISTED: u64 = 10;
/// See [`MAX_LISTED`].
pub const MAX_LISTED_SHARE: f64 = 0.25;

/// Ranks that share one value (an operation count or a status), with those RAS lists.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    /// How many ranks.
    pub ranks: u64,
    /// The operation count, or the status.
    pub value: String,
    /// The ranks listed under it (the text lists only the minority; JSON every rank).
    pub listed: Vec<Process>,
}

/// Ranks that launched different numbers of one operation.
#[derive(Debug, Clone, PartialEq)]
pub struct CountMismatch {
    /// The operation (`AllReduce`), when the report says (NCCL 2.26 and later).
    pub op: Option<String>,
    /// By count, lowest first.
    pub levels: Vec<Level>,
}

/// What RAS said about one communicator.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Comm {
    /// Its hash, 16 hex digits.
    pub hash: String,
    /// The group it is in (text reports).
    pub group: Option<u32>,
    /// Ranks whose data is missing.
    pub missing_ranks: Vec<u32>,
    /// Operation counts that differ.
    pub counts: Vec<CountMismatch>,
    /// Statuses that differ, by status.
    pub statuses: Vec<Level>,
    /// NCCL errors on its ranks (as RAS words them).
    pub errors: Vec<String>,
    /// The class of the worst error (a remote or system error points at the network).
    pub error_class: Option<Class>,
    /// Where in the input (line), for evidence.
    pub line: usize,
    /// Whether the last level line was a status (rank lines go under it) or a count.
    pub(crate) last_was_status: bool,
}

/// A row of the text report's group table.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Group number.
    pub group: u32,
    /// Communicators in it.
    pub comms: u64,
    /// Ranks per communicator.
    pub ranks_per_comm: u64,
    /// `RUNNING`, `INIT`, ...
    pub status: String,
    /// `OK`, `MISMATCH`, `INCOMPLETE,ERROR`, ...
    pub errors: String,
    /// Line.
    pub line: usize,
}

/// Which form the input was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `ncclras` text.
    Text,
    /// `ncclras -f json`.
    Json,
    /// `ncclras -m` text events.
    MonitorText,
    /// `ncclras -m -f json` events.
    MonitorJson,
}

/// One RAS report (or a stream of monitor events), in whichever form it came.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The form.
    pub form: Form,
    /// Where it came from (a file, stdin, `host:port`).
    pub source: String,
    /// NCCL's version, when stated.
    pub nccl_version: Option<String>,
    /// How long RAS took to gather the data, seconds.
    pub collection_s: Option<f64>,
    /// Communication timeouts while gathering.
    pub timeouts: u64,
    /// The group table (text).
    pub groups: Vec<Group>,
    /// Processes considered dead, with the line that says so.
    pub dead: Vec<(Process, usize)>,
    /// Processes that did not answer (not yet dead), with the line.
    pub unresponsive: Vec<(Process, usize)>,
    /// Communicators with something to say.
    pub comms: Vec<Comm>,
    /// Lines that were not understood (line, text), for the reader to see.
    pub not_understood: Vec<(usize, String)>,
}

/// Why a report could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct RasError {
    /// The input's name.
    pub source_name: String,
    /// Line, when one is to blame.
    pub line: Option<usize>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl Report {
    /// An empty report of the JSON form (its reader fills it).
    pub(crate) fn new_json(source: &str) -> Report {
        Report::new(Form::Json, source)
    }

    fn new(form: Form, source: &str) -> Report {
        Report {
            form,
            source: source.to_string(),
            nccl_version: None,
            collection_s: None,
            timeouts: 0,
            groups: Vec::new(),
            dead: Vec::new(),
            unresponsive: Vec::new(),
            comms: Vec::new(),
            not_understood: Vec::new(),
        }
    }
}

/// Reads a report in any of its forms; `source` names it in errors and evidence.
pub fn parse(text: &str, source: &str) -> Result<Report, RasError> {
    let err = |line: Option<usize>, message: String| RasError {
        source_name: source.to_string(),
        line,
        message,
    };
    if text.len() > MAX_REPORT_BYTES {
        return Err(err(
            None,
            format!(
                "{} bytes, more than the {MAX_REPORT_BYTES} a RAS report may have",
                text.len()
            ),
        ));
    }
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        return Err(err(
            None,
            "empty: expected an NCCL RAS report (text or JSON) or monitor events".into(),
        ));
    }
    let report = if trimmed.starts_with('{') {
        crate::ras_json::parse(text, source)?
    } else {
        text_report(text, source)
    };
    let understood = report.groups.len()
        + report.dead.len()
        + report.unresponsive.len()
        + report.comms.len()
        + usize::from(report.collection_s.is_some() || report.nccl_version.is_some() || report.timeouts > 0);
    if understood == 0 && !report.not_understood.is_empty() && !looks_like_ras(text) {
        let (line, first) = &report.not_understood[0];
        return Err(err(
            Some(*line),
            format!(
                "`{}`: expected an NCCL RAS report (`ncclras`, or `echo verbose status | nc localhost 28028`), its JSON form, or monitor events",
                first.chars().take(60).collect::<String>()
            ),
        ));
    }
    Ok(report)
}

/// Words only a RAS report has (a job summary alone, or a monitor banner, is a report
/// with nothing wrong in it).
fn looks_like_ras(text: &str) -> bool {
    text.contains("Job summary") || text.contains("RAS Monitor Mode")
}

/// `Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210`.
fn rank_line(l: &str) -> Option<Process> {
    let rest = l.strip_prefix("Rank ")?;
    let (rank, rest) = rest.split_once(" -- GPU ")?;
    let (gpu, rest) = rest.split_once(" managed by process ")?;
    let (pid, host) = rest.split_once(" on node ")?;
    Some(Process {
        host: host.trim().to_string(),
        pid: pid.trim().parse().ok(),
        gpu: gpu.trim().parse().ok(),
        rank: rank.trim().parse().ok(),
    })
}

/// `#0-0 (27a079b828ff1a75) MISMATCH` → (group, hash, kind).
fn comm_header(l: &str) -> Option<(u32, String, String)> {
    let rest = l.strip_prefix('#')?;
    let (gi, rest) = rest.split_once(" (")?;
    let (hash, kind) = rest.split_once(") ")?;
    let group = gi.split('-').next()?.parse().ok()?;
    Some((
        group,
        hash.trim_start_matches("0x").to_ascii_lowercase(),
        kind.trim().to_string(),
    ))
}

/// A group table row: `0  8  4  1  4  32  RUNNING  OK` (ranks per node may be `7-8`).
fn group_row(l: &str, line: usize) -> Option<Group> {
    let f: Vec<&str> = l.split_whitespace().collect();
    let [g, comms, _nodes, _rpn, rpc, _rig, status, errors] = f.as_slice() else {
        return None;
    };
    if !status.chars().all(|c| c.is_ascii_uppercase()) {
        return None;
    }
    Some(Group {
        group: g.parse().ok()?,
        comms: comms.parse().ok()?,
        ranks_per_comm: rpc.parse().ok()?,
        status: status.to_string(),
        errors: errors.to_string(),
        line,
    })
}

/// Where the text parser is.
enum Block {
    None,
    Incomplete,
    Dead,
    Timeout,
    Comm(usize),
}

/// Lines of the text report that carry nothing to judge.
fn is_furniture(t: &str) -> bool {
    t.is_empty()
        || t.chars().all(|c| c == '=')
        || t == "[...]"
        || matches!(t, "Errors" | "Warnings" | "Job summary")
        || t.starts_with("Group ")
        || t.starts_with("# ")
        || t.starts_with("Nodes ")
        || t.starts_with("(total)")
        || t.starts_with("CUDA runtime version")
        || t.starts_with("RAS Monitor Mode")
        || t.starts_with("Missing communicator data from")
        || t.contains("is considered dead")
        || t.contains("considered dead (unreachable")
        // The job summary's row of numbers (ranges such as `7-8` where nodes differ).
        || t.split_whitespace().all(|w| w.chars().all(|c| c.is_ascii_digit() || c == '-'))
}

fn text_report(text: &str, source: &str) -> Report {
    let mut r = Report::new(Form::Text, source);
    let mut block = Block::None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let t = raw.trim();
        if let Some(ev) = monitor_event(t) {
            r.form = Form::MonitorText;
            apply_event(&mut r, ev, line);
            continue;
        }
        if !raw.starts_with(' ') {
            // A block header, or a top-level line.
            block = Block::None;
            if let Some(v) = t.strip_prefix("NCCL version ") {
                r.nccl_version = v.split_whitespace().next().map(str::to_owned);
                continue;
            }
            if let Some(rest) = t.strip_prefix("Communicators... (") {
                r.collection_s = rest.trim_end_matches(')').trim_end_matches('s').parse().ok();
                continue;
            }
            match t {
                "INCOMPLETE" => block = Block::Incomplete,
                "DEAD" => block = Block::Dead,
                "TIMEOUT" => block = Block::Timeout,
                _ => {}
            }
            if !matches!(block, Block::None) {
                continue;
            }
            if let Some((group, hash, kind)) = comm_header(t) {
                let at = comm_at(&mut r, &hash, Some(group), line);
                if kind.contains("ERROR") && r.comms[at].errors.is_empty() {
                    r.comms[at].error_class = Some(Class::AppConfig);
                }
                block = Block::Comm(at);
                continue;
            }
        }
        if let Some(g) = group_row(t, line) {
            r.groups.push(g);
            continue;
        }
        if !block_line(&mut r, &block, t, line) && !is_furniture(t) {
            r.not_understood.push((line, t.to_string()));
        }
    }
    r
}

/// The index of the communicator with `hash`, added if new.
fn comm_at(r: &mut Report, hash: &str, group: Option<u32>, line: usize) -> usize {
    if let Some(i) = r.comms.iter().position(|c| c.hash == hash) {
        return i;
    }
    r.comms.push(Comm {
        hash: hash.to_string(),
        group,
        line,
        ..Comm::default()
    });
    r.comms.len() - 1
}

/// An indented line of a block; false when it means nothing there.
fn block_line(r: &mut Report, block: &Block, t: &str, line: usize) -> bool {
    match block {
        Block::Incomplete | Block::Dead => {
            let Some(p) = process_line(t) else { return false };
            if matches!(block, Block::Dead) {
                r.dead.push((p, line));
            } else {
                r.unresponsive.push((p, line));
            }
            true
        }
        Block::Timeout => {
            let n = t
                .strip_prefix("Encountered ")
                .and_then(|s| s.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(n) = n {
                r.timeouts += n;
            }
            n.is_some()
        }
        Block::Comm(at) => comm_line(&mut r.comms[*at], t),
        Block::None => false,
    }
}

/// A line under `#g-i (hash) KIND`.
fn comm_line(c: &mut Comm, t: &str) -> bool {
    if let Some(rest) = t
        .strip_prefix("The missing rank: ")
        .or_else(|| t.strip_prefix("The missing ranks: "))
    {
        c.missing_ranks.extend(
            rest.split([',', ' '])
                .filter_map(|x| x.trim().parse::<u32>().ok()),
        );
        return true;
    }
    if let Some(rest) = t.strip_prefix("Communicator ranks have different ") {
        if rest != "status" {
            let op = rest
                .strip_suffix(" operation counts")
                .filter(|o| *o != "collective")
                .map(str::to_owned);
            c.counts.push(CountMismatch {
                op,
                levels: Vec::new(),
            });
        }
        return true;
    }
    let level = |n: &str, value: &str| Level {
        ranks: n.parse().unwrap_or(0),
        value: value.to_string(),
        listed: Vec::new(),
    };
    if let Some((n, rest)) = t
        .split_once(" ranks have launched up to operation ")
        .or_else(|| t.split_once(" rank has launched up to operation "))
    {
        if let Some(m) = c.counts.last_mut() {
            m.levels.push(level(n, rest.trim()));
            c.last_was_status = false;
            return true;
        }
        return false;
    }
    if let Some((n, rest)) = t
        .split_once(" ranks have status ")
        .or_else(|| t.split_once(" rank has status "))
    {
        c.statuses.push(level(n, rest.trim()));
        c.last_was_status = true;
        return true;
    }
    if let Some(p) = rank_line(t) {
        // Listed under the level line before it.
        let under_status = c.statuses.last_mut();
        let under_count = c.counts.last_mut().and_then(|m| m.levels.last_mut());
        let target = match (under_status, under_count) {
            (Some(s), Some(_)) if c.last_was_status => s,
            (_, Some(k)) => k,
            (Some(s), None) => s,
            (None, None) => return false,
        };
        target.listed.push(p);
        return true;
    }
    if t.contains("error(s)") || t.starts_with("ncclRemoteError") || t.starts_with("ncclSystemError") {
        // A remote or system error is the network's or a peer's (see `error_class`).
        if t.contains("RemoteError") || t.contains("SystemError") || t.contains("network") {
            c.error_class = Some(Class::Nic);
        }
        c.errors.push(t.to_string());
        return true;
    }
    false
}

/// Folds one monitor event into the report: the latest word on a peer wins.
pub(crate) fn apply_event(r: &mut Report, ev: Event, line: usize) {
    let Event { name, peer } = ev;
    match effect(&name) {
        Effect::Dead => {
            r.unresponsive.retain(|(p, _)| !same(p, &peer));
            if !r.dead.iter().any(|(p, _)| same(p, &peer)) {
                r.dead.push((peer, line));
            }
        }
        Effect::Unresponsive => {
            if !r.dead.iter().chain(&r.unresponsive).any(|(p, _)| same(p, &peer)) {
                r.unresponsive.push((peer, line));
            }
        }
        Effect::Recovered | Effect::New => {
            r.unresponsive.retain(|(p, _)| !same(p, &peer));
            if effect(&name) == Effect::New {
                r.dead.retain(|(p, _)| !same(p, &peer));
            }
        }
        Effect::None => {}
        Effect::Unknown => r.not_understood.push((line, format!("monitor event {name}"))),
    }
}

/// Evidence from a line of the report.
fn at(r: &Report, line: usize, value: String) -> Evidence {
    Evidence {
        source: format!("{}:{line}", r.source),
        value,
    }
}

/// The hosts of these processes, in order, once each.
fn hosts<'a>(ps: impl Iterator<Item = &'a Process>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in ps {
        if !out.contains(&p.host) {
            out.push(p.host.clone());
        }
    }
    out
}

/// Communicators missing data, as a sentence.
fn missing_scope(r: &Report) -> String {
    let parts: Vec<String> = r
        .comms
        .iter()
        .filter(|c| !c.missing_ranks.is_empty())
        .map(|c| {
            format!(
                "communicator {} misses rank{} {}",
                c.hash,
                if c.missing_ranks.len() == 1 { "" } else { "s" },
                c.missing_ranks
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    parts.join("; ")
}

/// Findings for processes that are dead (`dead`) or did not answer.
fn process_findings(r: &Report, dead: bool, out: &mut Vec<Finding>) {
    let list = if dead { &r.dead } else { &r.unresponsive };
    for host in hosts(list.iter().map(|(p, _)| p)) {
        let here: Vec<&(Process, usize)> = list.iter().filter(|(p, _)| p.host == host).collect();
        let what = here
            .iter()
            .map(|(p, _)| p.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let n = here.len();
        let s = if n == 1 { "" } else { "es" };
        let (rule, severity, confidence, cause) = if dead {
            (
                "NCCL-RAS-DEAD",
                Severity::High,
                0.9,
                format!(
                    "{n} job process{s} on {host} considered dead: unreachable over NCCL's RAS network for {PEER_DEAD_S} s (x NCCL_RAS_TIMEOUT_FACTOR); the job cannot progress without {}",
                    if n == 1 { "it" } else { "them" }
                ),
            )
        } else {
            (
                "NCCL-RAS-UNREACHABLE",
                Severity::Medium,
                0.6,
                format!(
                    "{n} job process{s} on {host} did not answer RAS: {} data is missing from the report; RAS declares a process dead after {PEER_DEAD_S} s unreachable",
                    if n == 1 { "its" } else { "their" }
                ),
            )
        };
        let mut scope = what.clone();
        let missing = missing_scope(r);
        if !missing.is_empty() {
            let _ = write!(scope, "; {missing}");
        }
        out.push(Finding {
            rule,
            class: Class::Nic,
            entity: host.clone(),
            severity,
            cause,
            confidence,
            scope,
            advice: vec![
                format!("check that {host} is up and its processes alive (`ssh {host} 'dmesg -T | grep -i -e xid -e mlx5 -e \"link down\"'`)"),
                format!("check {host}'s NIC ports and the switch ports they are cabled to: `xirang diagnose --prometheus URL --inventory DIR` (or give this command --inventory)"),
                if dead {
                    format!("restart the job without {host}, or once it is repaired")
                } else {
                    "query RAS again in a minute: a process that stays unreachable is declared dead".into()
                },
            ],
            evidence: here
                .iter()
                .map(|(p, line)| at(r, *line, format!("{} {p}", if dead { "dead:" } else { "missing:" })))
                .collect(),
        });
    }
}

/// Ranks behind the others in one operation's count.
fn count_findings(r: &Report, c: &Comm, m: &CountMismatch, out: &mut Vec<Finding>) {
    // Levels whose count is not a number say nothing of who is behind.
    let mut levels: Vec<(u64, &Level)> = m
        .levels
        .iter()
        .filter_map(|l| Some((l.value.parse::<u64>().ok()?, l)))
        .collect();
    levels.sort_by_key(|(n, _)| *n);
    let (Some(&(lo, low)), Some(&(hi, _))) = (levels.first(), levels.last()) else {
        return;
    };
    if hi == lo {
        return;
    }
    let op = m.op.as_deref().unwrap_or("collective");
    let spread = levels
        .iter()
        .map(|(_, l)| format!("{} at {}", l.ranks, l.value))
        .collect::<Vec<_>>()
        .join(", ");
    let behind_hosts = hosts(low.listed.iter());
    let (entity, class, confidence) = match behind_hosts.as_slice() {
        [one] => (one.clone(), Class::Nic, if hi - lo > 1 { 0.7 } else { 0.5 }),
        [] => (format!("communicator {}", c.hash), Class::AppConfig, 0.3),
        _ => (format!("communicator {}", c.hash), Class::AppConfig, 0.4),
    };
    let named = if low.listed.is_empty() {
        format!(
            "RAS does not list the {} ranks at {lo} (it lists only a minority): ask `ncclras -v`",
            low.ranks
        )
    } else {
        low.listed
            .iter()
            .map(Process::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    out.push(Finding {
        rule: "NCCL-RAS-BEHIND",
        class,
        entity,
        severity: Severity::Medium,
        cause: format!(
            "{} rank{} of communicator {} launched {op} operations only up to {lo} while others reached {hi}: {}",
            low.ranks,
            if low.ranks == 1 { "" } else { "s" },
            c.hash,
            if hi - lo > 1 {
                "they stopped progressing (a hung or straggling rank, or the host or NIC under it)"
            } else {
                "one operation behind, which a rank still launching shows too; a second report with the same counts means they stopped"
            }
        ),
        confidence,
        scope: format!("{spread}; behind: {named}"),
        advice: vec![
            "run the RAS query again: counts that do not move mark the hung ranks".into(),
            "look at the behind ranks' host: its GPU (`nvidia-smi`, Xid errors in dmesg), its NIC counters and link (`xirang diagnose --prometheus URL`)".into(),
            "if the job is hung, a stack dump of the behind ranks (py-spy dump, or `cuda-gdb -p PID`) shows where".into(),
        ],
        evidence: vec![at(r, c.line, format!("{} {op} operation counts: {spread}", c.hash))],
    });
}

/// Ranks of one communicator in different states.
fn status_finding(r: &Report, c: &Comm, out: &mut Vec<Finding>) {
    let spread = c
        .statuses
        .iter()
        .map(|l| format!("{} {}", l.ranks, l.value))
        .collect::<Vec<_>>()
        .join(", ");
    let listed: Vec<String> = c
        .statuses
        .iter()
        .flat_map(|l| l.listed.iter().map(move |p| format!("{p} ({})", l.value)))
        .collect();
    out.push(Finding {
        rule: "NCCL-RAS-STATUS",
        class: Class::AppConfig,
        entity: format!("communicator {}", c.hash),
        severity: Severity::Medium,
        cause: format!(
            "the ranks of communicator {} are in different states ({spread}): some have not created it, or have finalized or aborted it, while others use it; the ones still using it wait for the rest",
            c.hash
        ),
        confidence: 0.6,
        scope: if listed.is_empty() { spread.clone() } else { listed.join(", ") },
        advice: vec![
            "if the job is starting or ending, query RAS again: the states converge".into(),
            "ranks that finalized or aborted early exited a code path the others did not: their logs (NCCL_DEBUG=WARN) say why".into(),
        ],
        evidence: vec![at(r, c.line, format!("{} statuses: {spread}", c.hash))],
    });
}

/// Findings from a report.
pub fn findings(r: &Report) -> Vec<Finding> {
    let mut out = Vec::new();
    process_findings(r, true, &mut out);
    process_findings(r, false, &mut out);
    let named_processes = !r.dead.is_empty() || !r.unresponsive.is_empty();
    for c in &r.comms {
        if !c.missing_ranks.is_empty() && !named_processes {
            out.push(Finding {
                rule: "NCCL-RAS-INCOMPLETE",
                class: Class::AppConfig,
                entity: format!("communicator {}", c.hash),
                severity: Severity::Medium,
                cause: format!(
                    "RAS has no data from rank{} {} of communicator {}: their processes did not answer",
                    if c.missing_ranks.len() == 1 { "" } else { "s" },
                    c.missing_ranks
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    c.hash
                ),
                confidence: 0.5,
                scope: missing_scope(r),
                advice: vec!["`ncclras -v` names the missing ranks' processes and hosts".into()],
                evidence: vec![at(
                    r,
                    c.line,
                    format!("{} missing ranks {:?}", c.hash, c.missing_ranks),
                )],
            });
        }
        for m in &c.counts {
            count_findings(r, c, m, &mut out);
        }
        if c.statuses.len() > 1 {
            status_finding(r, c, &mut out);
        }
        if !c.errors.is_empty() {
            let class = c.error_class.unwrap_or(Class::AppConfig);
            out.push(Finding {
                rule: "NCCL-RAS-ERROR",
                class,
                entity: format!("communicator {}", c.hash),
                severity: Severity::High,
                cause: format!("NCCL reports errors on communicator {}: {}", c.hash, c.errors.join("; ")),
                confidence: 0.8,
                scope: c.errors.join("; "),
                advice: vec![
                    "the ranks' NCCL_DEBUG=WARN logs name the failing call and its peer".into(),
                    if class == Class::Nic {
                        "a remote or system error is the network's or a peer's: check the peers' NICs and links (`xirang diagnose --prometheus URL`)".into()
                    } else {
                        "an invalid argument or usage is the application's: check the collective calls of the failing ranks".into()
                    },
                ],
                evidence: vec![at(r, c.line, c.errors.join("; "))],
            });
        }
    }
    group_findings(r, &mut out);
    if r.timeouts > 0 {
        out.push(Finding {
            rule: "NCCL-RAS-TIMEOUT",
            class: Class::Link,
            entity: "RAS network".into(),
            severity: Severity::Low,
            cause: format!(
                "RAS met {} communication timeout{} while gathering the report: some processes answer slowly or not at all, so the report may be incomplete",
                r.timeouts,
                if r.timeouts == 1 { "" } else { "s" }
            ),
            confidence: 0.5,
            scope: r.collection_s.map(|s| format!("collection took {s:.2} s")).unwrap_or_default(),
            advice: vec!["query RAS again; processes that stay silent are reported INCOMPLETE, then DEAD".into()],
            evidence: vec![Evidence {
                source: r.source.clone(),
                value: format!("{} timeouts", r.timeouts),
            }],
        });
    }
    crate::finding::rank(&mut out);
    out
}

/// Groups the table flags with no detail below it (a report without its sections, or
/// one of many groups cut by `[...]`).
fn group_findings(r: &Report, out: &mut Vec<Finding>) {
    for g in &r.groups {
        if g.errors == "OK" || r.comms.iter().any(|c| c.group == Some(g.group)) {
            continue;
        }
        if g.errors.contains("INCOMPLETE") && (!r.dead.is_empty() || !r.unresponsive.is_empty()) {
            continue;
        }
        out.push(Finding {
            rule: "NCCL-RAS-GROUP",
            class: Class::AppConfig,
            entity: format!("group {}", g.group),
            severity: Severity::Medium,
            cause: format!(
                "RAS flags group {} ({} communicator{} of {} ranks, {}) as {}, and the report says no more",
                g.group,
                g.comms,
                if g.comms == 1 { "" } else { "s" },
                g.ranks_per_comm,
                g.status,
                g.errors
            ),
            confidence: 0.4,
            scope: format!("{} communicators", g.comms),
            advice: vec!["`ncclras -v` (or `echo verbose status | nc localhost 28028`) lists the ranks and what differs".into()],
            evidence: vec![at(r, g.line, format!("group {}: {} {}", g.group, g.status, g.errors))],
        });
    }
}

/// The class an NCCL result code points at: a remote or system error is the network's
/// or a peer's (the NIC or the path), an unhandled CUDA error the host's, the rest the
/// application's.
pub fn error_class(code: i64) -> Class {
    match code {
        2 | 6 => Class::Nic,
        1 => Class::HostConfig,
        _ => Class::AppConfig,
    }
}

/// NCCL's name of a result code.
pub fn error_name(code: i64) -> String {
    match code {
        0 => "ncclSuccess".into(),
        1 => "ncclUnhandledCudaError".into(),
        2 => "ncclSystemError".into(),
        3 => "ncclInternalError".into(),
        4 => "ncclInvalidArgument".into(),
        5 => "ncclInvalidUsage".into(),
        6 => "ncclRemoteError".into(),
        7 => "ncclInProgress".into(),
        n => format!("NCCL error {n}"),
    }
}

/// Hashes as the text report prints them: 16 hex digits, no `0x`.
pub(crate) fn norm_hash(h: &str) -> String {
    h.trim_start_matches("0x").to_ascii_lowercase()
}

/// The IPv4 address of an IPv4-mapped RoCE v2 GID (`0000:…:ffff:0a00:0001` → 10.0.0.1).
fn gid_ipv4(gid: &str) -> Option<std::net::Ipv4Addr> {
    let g: Vec<&str> = gid.split(':').collect();
    if g.len() != 8
        || g[..5].iter().any(|x| u16::from_str_radix(x, 16) != Ok(0))
        || !g[5].eq_ignore_ascii_case("ffff")
    {
        return None;
    }
    let hi = u16::from_str_radix(g[6], 16).ok()?;
    let lo = u16::from_str_radix(g[7], 16).ok()?;
    Some(std::net::Ipv4Addr::new(
        (hi >> 8) as u8,
        hi as u8,
        (lo >> 8) as u8,
        lo as u8,
    ))
}

/// The inventory's host that RAS names `token`: by host name, or by an address one of its
/// RDMA ports holds (RAS names nodes by the address of NCCL's bootstrap interface, which
/// is often the RoCE one).
pub fn inventory_host<'a>(
    c: &'a xirang_audit::cluster::Cluster,
    token: &str,
) -> Option<&'a xirang_host::inventory::HostInventory> {
    let ip: Option<std::net::Ipv4Addr> = token.parse().ok();
    c.hosts.iter().find(|h| {
        h.hostname == token
            || ip.is_some_and(|ip| {
                h.rdma
                    .iter()
                    .flat_map(|d| &d.ports)
                    .flat_map(|p| &p.gids)
                    .any(|g| gid_ipv4(&g.gid) == Some(ip))
            })
    })
}

/// A host's NICs as the inventory has them: `(entity prefix, [(device, netdevs, switch
/// port it is cabled to)])`.
fn host_nics(
    c: &xirang_audit::cluster::Cluster,
    h: &xirang_host::inventory::HostInventory,
) -> Vec<(String, String, Option<String>)> {
    h.rdma
        .iter()
        .map(|d| {
            let cable = c.cable_of(&h.hostname, &d.name, d.netdevs.first().map(String::as_str));
            (
                d.name.clone(),
                d.netdevs.join(","),
                cable.map(|c| format!("{}:{}", c.switch, c.port)),
            )
        })
        .collect()
}

/// Adds what the inventory knows of each host a finding names: its NICs and the switch
/// ports they are cabled to (as evidence), so the counters of those ports can be read.
/// Returns, per host token, the inventory host name and the switch ports, for a reader
/// of the counters of the same window.
pub fn join_inventory(
    findings: &mut [Finding],
    c: &xirang_audit::cluster::Cluster,
) -> Vec<(String, String, Vec<String>)> {
    let mut named = Vec::new();
    for f in findings.iter_mut() {
        if f.class != Class::Nic || !f.rule.starts_with("NCCL-RAS-") {
            continue;
        }
        let Some(h) = inventory_host(c, &f.entity) else {
            f.evidence.push(Evidence {
                source: "inventory".into(),
                value: format!("no host named {} or holding it as a RoCE address", f.entity),
            });
            continue;
        };
        let nics = host_nics(c, h);
        let text = nics
            .iter()
            .map(|(d, n, sp)| {
                format!(
                    "{d}{}{}",
                    if n.is_empty() {
                        String::new()
                    } else {
                        format!(" ({n})")
                    },
                    sp.as_ref().map(|s| format!(" cabled to {s}")).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        f.evidence.push(Evidence {
            source: format!("inventory host {}", h.hostname),
            value: if text.is_empty() {
                "no RDMA device".into()
            } else {
                text
            },
        });
        if !named
            .iter()
            .any(|(t, _, _): &(String, String, Vec<String>)| *t == f.entity)
        {
            named.push((
                f.entity.clone(),
                h.hostname.clone(),
                nics.into_iter().filter_map(|(_, _, sp)| sp).collect(),
            ));
        }
    }
    named
}

/// Of a window's findings, those about a host RAS named (its NICs, its links, the
/// switch ports its NICs are cabled to), from [`join_inventory`]'s list.
pub fn related(window_findings: Vec<Finding>, named: &[(String, String, Vec<String>)]) -> Vec<Finding> {
    window_findings
        .into_iter()
        .filter(|f| {
            // A finding's entity is one end (`h1/mlx5_0/1`, `leaf1:Ethernet8`,
            // `leaf1:Ethernet8/q3`) or two joined by `<->`; each end names the host, or the
            // switch port, whole: `leaf0:1` is not `leaf0:10`.
            f.entity.split("<->").any(|end| {
                let head = end.split('/').next().unwrap_or(end);
                // A Prometheus `instance` (`h1:9316`) stands for its host.
                let host_of_instance = head
                    .rsplit_once(':')
                    .filter(|(_, port)| port.parse::<u16>().is_ok())
                    .map(|(h, _)| h);
                named.iter().any(|(_, host, ports)| {
                    head == host || host_of_instance == Some(host.as_str()) || ports.iter().any(|p| head == p)
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(entity: &str) -> Finding {
        Finding {
            rule: "X",
            class: Class::Link,
            entity: entity.into(),
            severity: Severity::Medium,
            cause: String::new(),
            confidence: 0.5,
            scope: String::new(),
            advice: vec![],
            evidence: vec![],
        }
    }

    #[test]
    fn related_findings_name_the_host_or_its_port_whole() {
        let named = vec![(
            "10.0.0.1".to_string(),
            "h1".to_string(),
            vec!["leaf0:1".to_string()],
        )];
        let keep: Vec<String> = related(
            [
                "h1/mlx5_0/1",
                "h1:9316/mlx5_0/1",
                "leaf0:1",
                "leaf0:1/q3",
                "h2/mlx5_0/1<->leaf0:1",
                "h11/mlx5_0/1",
                "leaf0:10",
                "leaf0:12/q3",
                "xh1/mlx5_0/1",
            ]
            .into_iter()
            .map(finding)
            .collect(),
            &named,
        )
        .into_iter()
        .map(|f| f.entity)
        .collect();
        assert_eq!(
            keep,
            [
                "h1/mlx5_0/1",
                "h1:9316/mlx5_0/1",
                "leaf0:1",
                "leaf0:1/q3",
                "h2/mlx5_0/1<->leaf0:1"
            ]
        );
    }

    #[test]
    fn counts_that_are_not_numbers_say_nothing() {
        let level = |n: u64, v: &str| Level {
            ranks: n,
            value: v.into(),
            listed: vec![],
        };
        let c = Comm {
            hash: "ab".into(),
            ..Comm::default()
        };
        let r = Report::new(Form::Text, "t");
        let mut out = Vec::new();
        let m = CountMismatch {
            op: None,
            levels: vec![level(3, "12"), level(1, "garbage")],
        };
        count_findings(&r, &c, &m, &mut out);
        assert!(out.is_empty(), "{out:?}");
        let m = CountMismatch {
            op: None,
            levels: vec![level(3, "12"), level(1, "9"), level(1, "x")],
        };
        count_findings(&r, &c, &m, &mut out);
        assert_eq!(out.len(), 1);
        assert!(
            out[0].cause.contains("only up to 9 while others reached 12"),
            "{}",
            out[0].cause
        );
    }
}
