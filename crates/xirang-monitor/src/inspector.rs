//! NCCL Inspector's JSON-lines output read directly (`monitor --nccl-inspector DIR`), for
//! a host whose node_exporter has no textfile collector: each round reads what the job's
//! processes appended to their `<hostname>-pid<pid>.log` files since the last one and
//! exports it as the Inspector's own Prometheus series, so every reader queries one set of
//! names whichever way they were collected.
//!
//! Facts (docs/reference/live-signals.md §A): one compact JSON object per line, per
//! completed operation per communicator, `header` {`id`, `comm_name`, `rank`, `n_ranks`,
//! `nnodes`}, `metadata` {`hostname`, `pid`, ...} and `coll_perf` {`coll`,
//! `coll_msg_size_bytes`, `coll_exec_time_us`, `coll_busbw_gbs`, ...} (or `p2p_perf`);
//! doubles may be the string `"nan"`; files grow for the whole run; the upstream exporter
//! reads `.log` and `.jsonl`. The Prometheus form aggregates per (communicator name, ranks,
//! nodes, collective, message-size bucket, algorithm and protocol) over each dump interval:
//! mean execution time, geometric mean of bus bandwidth, and no sample for a bucket with
//! no operation in the interval. This reader does the same per round. The JSON names no
//! GPU and no algorithm: `gpu` and `algo_proto` are `unknown` (the Inspector's word for a
//! missing value), so the processes of one host, like communicators of one name on one
//! GPU in the Prometheus form, merge into one series.
//!
//! Every read is bounded: files per directory, bytes per file per round (the rest is read
//! the next rounds), bytes per line. A file that is replaced (another inode) or shrinks
//! (truncated) is read again from its start; one that vanishes is forgotten.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use xirang_telemetry::inspector as ins;

use crate::collect::{FeedRound, Point};

/// Most files read in the directory (a job of a thousand ranks per host is far above any
/// real node's GPU count).
pub const MAX_FILES: usize = 1024;
/// Most bytes read from one file in one round: at the README's 200-500 bytes per
/// operation, 80,000 operations per file per round.
pub const MAX_BYTES_PER_ROUND: u64 = 32 << 20;
/// Longest line kept: a verbose record with its per-channel kernel events is a few KB.
pub const MAX_LINE_BYTES: usize = 256 << 10;

/// Where one file was read to.
#[derive(Debug, Default)]
struct FileState {
    /// Identity of the file read (device, inode): another one means the file was replaced.
    id: (u64, u64),
    /// Bytes consumed.
    offset: u64,
    /// The start of a line not yet ended.
    partial: Vec<u8>,
    /// Skipping the rest of a line longer than [`MAX_LINE_BYTES`].
    skipping: bool,
}

/// One series' accumulation over a round.
#[derive(Default)]
struct Acc {
    time_us_sum: f64,
    time_n: u64,
    log_bw_sum: f64,
    bw_n: u64,
}

/// A directory of Inspector JSON-lines files.
pub struct InspectorDir {
    dir: PathBuf,
    files: HashMap<PathBuf, FileState>,
    /// No round has run yet: files already there are history, read from their end.
    first: bool,
    job_id: String,
    limits: (usize, u64, usize),
}

/// `nccl-inspector-<SLURM_JOBID>` is the Inspector's default directory name: the job id
/// label comes from it where it has one.
fn job_id_of(dir: &Path) -> String {
    dir.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("nccl-inspector-"))
        .filter(|id| !id.is_empty() && *id != "unknown-jobid")
        .unwrap_or(ins::UNKNOWN)
        .to_string()
}

#[cfg(unix)]
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    (m.dev(), m.ino())
}

#[cfg(not(unix))]
fn file_id(_: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

/// A number that may be written as a string (`"nan"`) or be absent.
fn num(v: &serde_json::Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .filter(|x| x.is_finite())
}

impl InspectorDir {
    /// A reader of `dir` (read from the first round on, from each file's start).
    pub fn new(dir: &Path) -> InspectorDir {
        InspectorDir {
            dir: dir.to_path_buf(),
            files: HashMap::new(),
            first: true,
            job_id: job_id_of(dir),
            limits: (MAX_FILES, MAX_BYTES_PER_ROUND, MAX_LINE_BYTES),
        }
    }

    /// The same with other bounds (files, bytes per file per round, bytes per line), for tests.
    pub fn with_limits(dir: &Path, files: usize, bytes_per_round: u64, line_bytes: usize) -> InspectorDir {
        InspectorDir {
            limits: (files, bytes_per_round, line_bytes),
            ..InspectorDir::new(dir)
        }
    }

    /// The files to read: `.log`, `.jsonl`, in name order, at most the limit.
    fn list(&self, problems: &mut Vec<String>) -> Vec<PathBuf> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) => {
                problems.push(format!("{}: {e}", self.dir.display()));
                return Vec::new();
            }
        };
        let mut v: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .and_then(|x| x.to_str())
                    .is_some_and(|x| x == "log" || x == "jsonl")
            })
            .collect();
        v.sort();
        if v.len() > self.limits.0 {
            problems.push(format!(
                "{}: {} Inspector files, more than the {} read; the rest are left out",
                self.dir.display(),
                v.len(),
                self.limits.0
            ));
            v.truncate(self.limits.0);
        }
        v
    }

    /// New complete lines of `path` since the last round (at most the round's bytes).
    fn new_lines(&mut self, path: &Path, problems: &mut Vec<String>) -> Vec<Vec<u8>> {
        let (_, per_round, max_line) = self.limits;
        let mut f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                return Vec::new();
            }
        };
        let Ok(meta) = f.metadata() else {
            return Vec::new();
        };
        let first = self.first;
        // A file there before the first round holds what happened before the agent
        // started: read on from its end, so a round reports only what is new; if a record
        // is being written there, the rest of it is skipped.
        let mid_line = first && meta.len() > 0 && {
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(meta.len() - 1))
                .and_then(|_| f.read_exact(&mut last))
                .map(|()| last[0] != b'\n')
                .unwrap_or(false)
        };
        let st = self.files.entry(path.to_path_buf()).or_insert_with(|| FileState {
            id: file_id(&meta),
            offset: if first { meta.len() } else { 0 },
            skipping: mid_line,
            ..FileState::default()
        });
        let id = file_id(&meta);
        if st.id != id || meta.len() < st.offset {
            // Replaced or truncated: its content is new from the start.
            *st = FileState {
                id,
                ..FileState::default()
            };
        }
        if meta.len() == st.offset {
            return Vec::new();
        }
        let mut buf = Vec::new();
        let read = f
            .seek(SeekFrom::Start(st.offset))
            .and_then(|_| f.take(per_round).read_to_end(&mut buf));
        if let Err(e) = read {
            problems.push(format!("{}: {e}", path.display()));
            return Vec::new();
        }
        st.offset += buf.len() as u64;
        let mut lines = Vec::new();
        let mut start = 0;
        for (i, b) in buf.iter().enumerate() {
            if *b != b'\n' {
                continue;
            }
            let piece = &buf[start..i];
            start = i + 1;
            if st.skipping {
                st.skipping = false;
                continue;
            }
            let mut line = std::mem::take(&mut st.partial);
            if line.len() + piece.len() > max_line {
                problems.push(format!(
                    "{}: a line longer than {max_line} bytes, left out",
                    path.display()
                ));
                continue;
            }
            line.extend_from_slice(piece);
            lines.push(line);
        }
        let rest = &buf[start..];
        if !st.skipping {
            if st.partial.len() + rest.len() > max_line {
                problems.push(format!(
                    "{}: a line longer than {max_line} bytes, left out",
                    path.display()
                ));
                st.partial.clear();
                st.skipping = true;
            } else {
                st.partial.extend_from_slice(rest);
            }
        }
        lines
    }

    /// One round: every record appended since the last, as the Inspector's series.
    pub fn round(&mut self) -> FeedRound {
        let mut out = FeedRound::default();
        let files = self.list(&mut out.problems);
        self.files.retain(|p, _| files.contains(p));
        let mut acc: BTreeMap<Vec<(&'static str, String)>, Acc> = BTreeMap::new();
        for path in files {
            let mut bad = (0usize, None::<String>);
            for line in self.new_lines(&path, &mut out.problems) {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match record(&line, &self.job_id) {
                    Ok(Some((labels, time_us, busbw))) => {
                        let a = acc.entry(labels).or_default();
                        if let Some(t) = time_us {
                            a.time_us_sum += t;
                            a.time_n += 1;
                        }
                        if let Some(b) = busbw.filter(|b| *b > 0.0) {
                            a.log_bw_sum += b.ln();
                            a.bw_n += 1;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        bad.0 += 1;
                        bad.1.get_or_insert(e);
                    }
                }
            }
            if let (n, Some(first)) = bad {
                out.problems.push(format!(
                    "{}: {n} line(s) that are not Inspector records, left out (the first: {first})",
                    path.display()
                ));
            }
        }
        self.first = false;
        for (labels, a) in acc {
            if a.time_n > 0 {
                out.points
                    .push(point(ins::EXEC_TIME_US, &labels, a.time_us_sum / a.time_n as f64));
            }
            if a.bw_n > 0 {
                out.points.push(point(
                    ins::BUS_BANDWIDTH_GBS,
                    &labels,
                    (a.log_bw_sum / a.bw_n as f64).exp(),
                ));
            }
        }
        out
    }
}

/// One record of an Inspector file: a collective's series labels (the directory's job id
/// in `slurm_job_id`), execution time (µs) and bus bandwidth (GB/s); `None` for another
/// kind of record (point-to-point); an error saying what is missing.
#[allow(clippy::type_complexity)]
pub fn record(
    line: &[u8],
    job_id: &str,
) -> Result<Option<(Vec<(&'static str, String)>, Option<f64>, Option<f64>)>, String> {
    let v: serde_json::Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    if v.get("p2p_perf").is_some() {
        return Ok(None);
    }
    let c = v.get("coll_perf").ok_or("no coll_perf or p2p_perf")?;
    let h = v.get("header").ok_or("no header")?;
    let text = |x: &serde_json::Value| {
        x.as_str()
            .map(str::to_owned)
            .or_else(|| x.as_u64().map(|n| n.to_string()))
            .unwrap_or_else(|| ins::UNKNOWN.to_string())
    };
    let coll = c["coll"].as_str().ok_or("coll_perf.coll: expected a name")?;
    let bytes = c["coll_msg_size_bytes"]
        .as_u64()
        .ok_or("coll_perf.coll_msg_size_bytes: expected a byte count")?;
    let labels = vec![
        ("version", ins::FORMAT_VERSION.to_string()),
        ("slurm_job_id", job_id.to_string()),
        ("node", text(&v["metadata"]["hostname"])),
        ("gpu", ins::UNKNOWN.to_string()),
        ("comm_name", text(&h["comm_name"])),
        ("n_nodes", text(&h["nnodes"])),
        ("nranks", text(&h["n_ranks"])),
        ("collective", coll.to_string()),
        ("message_size", ins::message_size_bucket(bytes)),
        ("algo_proto", ins::UNKNOWN.to_string()),
    ];
    Ok(Some((
        labels,
        num(&c["coll_exec_time_us"]),
        num(&c["coll_busbw_gbs"]),
    )))
}

fn point(name: &str, labels: &[(&'static str, String)], value: f64) -> Point {
    let help = if name == ins::EXEC_TIME_US {
        "Mean execution time of the bucket's collectives since the last round, µs (NCCL Inspector's JSON lines)."
    } else {
        "Geometric mean of the bucket's bus bandwidths since the last round, GB/s (NCCL Inspector's JSON lines)."
    };
    crate::collect::gauge(name, labels.to_vec(), value, help)
}
