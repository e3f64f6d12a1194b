//! NCCL RAS's JSON forms (docs/reference/live-signals.md §B): the status document
//! (`ncclras -f json`, raw data without verdicts) and monitor events (`ncclras -m -f
//! json`, pretty-printed objects one after another), read into a [`Report`] with the
//! verdicts the text form would print derived here.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::finding::Class;
use crate::ras::{
    Comm, CountMismatch, Event, Form, Level, MAX_LISTED, MAX_LISTED_SHARE, Process, RasError, Report,
    apply_event, error_class, error_name, norm_hash,
};

/// NCCL's in-progress result code, the state of a communicator still initializing (and
/// what a non-blocking communicator's async error reads while an operation runs).
const NCCL_IN_PROGRESS: i64 = 7;

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    init_state: i64,
    #[serde(default)]
    async_error: i64,
    #[serde(default)]
    finalize_called: bool,
    #[serde(default)]
    abort_flag: bool,
}

#[derive(Deserialize)]
struct Rank {
    rank: u32,
    #[serde(default)]
    host: String,
    #[serde(default)]
    pid: Option<i64>,
    #[serde(default)]
    cuda_dev: Option<i64>,
    status: Status,
    #[serde(default)]
    collective_counts: BTreeMap<String, u64>,
}

#[derive(Deserialize)]
struct MissingStatus {
    #[serde(default)]
    considered_dead: bool,
}

#[derive(Deserialize)]
struct Missing {
    rank: u32,
    #[serde(default)]
    host: String,
    #[serde(default)]
    pid: Option<i64>,
    #[serde(default)]
    cuda_dev: Option<i64>,
    status: MissingStatus,
}

#[derive(Deserialize)]
struct JComm {
    hash: String,
    #[serde(default)]
    ranks: Vec<Rank>,
    #[serde(default)]
    missing_ranks: Vec<Missing>,
}

#[derive(Deserialize)]
struct Ras {
    #[serde(default)]
    collection_time_sec: Option<f64>,
    #[serde(default)]
    timeouts_count: u64,
}

#[derive(Deserialize)]
struct Status_ {
    #[serde(default)]
    nccl_version: Option<String>,
    communicators: Vec<JComm>,
    #[serde(default)]
    ras: Option<Ras>,
}

#[derive(Deserialize)]
struct Peer {
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    addr: Option<String>,
    #[serde(default)]
    pid: Option<i64>,
    #[serde(default)]
    cuda_devs: Vec<i64>,
}

#[derive(Deserialize)]
struct JEvent {
    event: String,
    peer: Peer,
}

fn gpu(d: Option<i64>) -> Option<u32> {
    d.and_then(|d| u32::try_from(d).ok())
}

/// -1 is RAS's "unknown" pid (`client_support.cc:2120-2126`).
fn pid(p: Option<i64>) -> Option<i64> {
    p.filter(|p| *p >= 0)
}

/// Reads a status document or a stream of monitor events.
pub(crate) fn parse(text: &str, source: &str) -> Result<Report, RasError> {
    let mut r = Report::new_json(source);
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
    let (mut line, mut counted) = (1usize, 0usize);
    loop {
        let start = stream.byte_offset();
        let v = match stream.next() {
            None => break,
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                return Err(RasError {
                    source_name: source.to_string(),
                    line: Some(e.line()),
                    message: format!("{e}: expected NCCL RAS JSON (a status document or monitor events)"),
                });
            }
        };
        // The line the object starts on (past the whitespace before it), counted on from
        // the last object's, so a long stream of events costs one pass.
        let skipped = text[start..].len() - text[start..].trim_start().len();
        let at = start + skipped;
        line += text.as_bytes()[counted..at]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        counted = at;
        let err = |what: String| RasError {
            source_name: source.to_string(),
            line: Some(line),
            message: what,
        };
        if v.get("communicators").is_some() {
            let doc: Status_ = serde_path_to_error::deserialize(v)
                .map_err(|e| err(format!("{}: {}", e.path(), e.inner())))?;
            r.form = Form::Json;
            status_document(&mut r, doc, line);
        } else if v.get("event").is_some() {
            let ev: JEvent = serde_path_to_error::deserialize(v)
                .map_err(|e| err(format!("{}: {}", e.path(), e.inner())))?;
            r.form = Form::MonitorJson;
            let host = ev.peer.host.or(ev.peer.addr).unwrap_or_default();
            apply_event(
                &mut r,
                Event {
                    name: ev.event,
                    peer: Process {
                        host,
                        pid: pid(ev.peer.pid),
                        gpu: gpu(ev.peer.cuda_devs.first().copied()),
                        rank: None,
                    },
                },
                line,
            );
        } else {
            return Err(err(
                "an object with neither `communicators` (a RAS status document) nor `event` (a monitor event)".into(),
            ));
        }
    }
    Ok(r)
}

/// Whether RAS lists the ranks of a level of `ranks` out of `total`.
fn listed(ranks: u64, total: u64) -> bool {
    ranks <= MAX_LISTED && (ranks as f64) <= MAX_LISTED_SHARE * total as f64
}

fn status_document(r: &mut Report, doc: Status_, line: usize) {
    r.nccl_version = doc.nccl_version;
    if let Some(ras) = doc.ras {
        r.collection_s = ras.collection_time_sec;
        r.timeouts = ras.timeouts_count;
    }
    for c in doc.communicators {
        let mut comm = Comm {
            hash: norm_hash(&c.hash),
            line,
            ..Comm::default()
        };
        for m in &c.missing_ranks {
            comm.missing_ranks.push(m.rank);
            let p = Process {
                host: m.host.clone(),
                pid: pid(m.pid),
                gpu: gpu(m.cuda_dev),
                rank: None,
            };
            let list = if m.status.considered_dead {
                &mut r.dead
            } else {
                &mut r.unresponsive
            };
            if !list.iter().any(|(q, _)| q.host == p.host && q.pid == p.pid) {
                list.push((p, line));
            }
        }
        counts(&mut comm, &c.ranks);
        statuses(&mut comm, &c.ranks);
        errors(&mut comm, &c.ranks);
        if !(comm.missing_ranks.is_empty()
            && comm.counts.is_empty()
            && comm.statuses.is_empty()
            && comm.errors.is_empty())
        {
            r.comms.push(comm);
        }
    }
}

fn process(rk: &Rank) -> Process {
    Process {
        host: rk.host.clone(),
        pid: pid(rk.pid),
        gpu: gpu(rk.cuda_dev),
        rank: Some(rk.rank),
    }
}

/// Levels of equal value, the ranks of the listed ones named.
fn levels(values: &[(String, &Rank)], total: u64) -> Vec<Level> {
    let mut by: BTreeMap<&str, Vec<&Rank>> = BTreeMap::new();
    for (v, rk) in values {
        by.entry(v.as_str()).or_default().push(rk);
    }
    by.into_iter()
        .map(|(v, ranks)| Level {
            ranks: ranks.len() as u64,
            value: v.to_string(),
            listed: if listed(ranks.len() as u64, total) {
                ranks.iter().map(|rk| process(rk)).collect()
            } else {
                Vec::new()
            },
        })
        .collect()
}

/// Operations whose counts differ between ranks.
fn counts(comm: &mut Comm, ranks: &[Rank]) {
    let ops: Vec<&String> = ranks
        .iter()
        .flat_map(|r| r.collective_counts.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for op in ops {
        let values: Vec<(String, &Rank)> = ranks
            .iter()
            .map(|r| (r.collective_counts.get(op).copied().unwrap_or(0).to_string(), r))
            .collect();
        let lv = levels(&values, ranks.len() as u64);
        if lv.len() > 1 {
            comm.counts.push(CountMismatch {
                op: Some(op.clone()),
                levels: lv,
            });
        }
    }
}

/// The status the text report would print for a rank.
fn status_word(s: &Status) -> &'static str {
    if s.abort_flag {
        "ABORT"
    } else if s.finalize_called {
        "FINALIZE"
    } else if s.init_state == NCCL_IN_PROGRESS {
        "INIT"
    } else {
        "RUNNING"
    }
}

fn statuses(comm: &mut Comm, ranks: &[Rank]) {
    let values: Vec<(String, &Rank)> = ranks
        .iter()
        .map(|r| (status_word(&r.status).to_string(), r))
        .collect();
    let mut lv = levels(&values, ranks.len() as u64);
    if lv.len() > 1 {
        lv.sort_by(|a, b| b.ranks.cmp(&a.ranks).then(a.value.cmp(&b.value)));
        comm.statuses = lv;
    }
}

/// Initialization and asynchronous errors, by result code, as the text report counts them.
fn errors(comm: &mut Comm, ranks: &[Rank]) {
    let is_error = |c: i64| c != 0 && c != NCCL_IN_PROGRESS;
    for (what, code_of) in [
        (
            "Initialization",
            (|s: &Status| s.init_state) as fn(&Status) -> i64,
        ),
        ("Asynchronous", |s: &Status| s.async_error),
    ] {
        let mut by: BTreeMap<i64, u64> = BTreeMap::new();
        for rk in ranks {
            let c = code_of(&rk.status);
            if is_error(c) {
                *by.entry(c).or_default() += 1;
            }
        }
        for (code, n) in by {
            comm.errors
                .push(format!("{what} error(s) on {n} rank(s): {}", error_name(code)));
            let class = error_class(code);
            if class == Class::Nic || comm.error_class.is_none() {
                comm.error_class = Some(class);
            }
        }
    }
}
