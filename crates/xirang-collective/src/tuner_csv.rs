//! The configuration file of NCCL's example tuner plugin (NVIDIA/nccl `ext-tuner/example`,
//! loaded with `NCCL_TUNER_CONFIG_FILE`): per collective and message-size range, the
//! algorithm and protocol the cost model finds fastest for a platform's node and rank
//! counts, and the reader that checks such a file by the plugin's documented rules.
//!
//! Format (the plugin's README): one configuration per line,
//! `collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]`;
//! `#` starts a comment line, empty lines are ignored, no spaces around the commas.
//! Collectives `broadcast`, `reduce`, `allgather`, `reducescatter`, `allreduce`;
//! algorithms `tree`, `ring`, `collnet_direct`, `collnet_chain`, `nvls`, `nvls_tree`,
//! `pat`; protocols `ll`, `ll128`, `simple`; `channels`, `nNodes`, `nRanks` and
//! `numPipeOps` a positive integer or `-1` (NCCL's default / any); `regBuff` `0`, `1` or
//! `-1`. `0` to `4294967295` covers every size.

use crate::cost::{self, Algo, Coll, Platform, Proto};

/// The largest size the plugin's ranges name ("use 4294967295 for maximum").
pub const ALL_SIZES_MAX_BYTES: u64 = 4_294_967_295;

/// The collectives the plugin takes, with the model's name for each (the model has no
/// Reduce: it is left to NCCL).
const COLLECTIVES: [(Coll, &str); 4] = [
    (Coll::AllReduce, "allreduce"),
    (Coll::AllGather, "allgather"),
    (Coll::ReduceScatter, "reducescatter"),
    (Coll::Broadcast, "broadcast"),
];
const ALGORITHMS: [&str; 7] = [
    "tree",
    "ring",
    "collnet_direct",
    "collnet_chain",
    "nvls",
    "nvls_tree",
    "pat",
];
const PROTOCOLS: [&str; 3] = ["ll", "ll128", "simple"];

/// One configuration line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunerRow {
    /// `allreduce`, ...
    pub collective: String,
    /// Smallest message size it applies to, bytes.
    pub min_bytes: u64,
    /// Largest, bytes.
    pub max_bytes: u64,
    /// `ring`, `tree`, ...
    pub algorithm: String,
    /// `ll`, `ll128`, `simple`.
    pub protocol: String,
    /// Channels, or -1 for NCCL's choice.
    pub channels: i64,
    /// Nodes it matches, or -1 for any.
    pub n_nodes: i64,
    /// Ranks it matches, or -1 for any.
    pub n_ranks: i64,
    /// Pipelined operations it matches (-1 any); absent in 8-field lines.
    pub num_pipe_ops: Option<i64>,
    /// Registered buffers it matches (0, 1, -1 any); absent in 8- and 9-field lines.
    pub reg_buff: Option<i64>,
}

fn algo_name(a: Algo) -> &'static str {
    match a {
        Algo::Ring => "ring",
        Algo::Tree => "tree",
        Algo::Nvls => "nvls",
        Algo::NvlsTree => "nvls_tree",
    }
}

fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Ll => "ll",
        Proto::Ll128 => "ll128",
        Proto::Simple => "simple",
    }
}

/// The model's choice for every collective it covers on `p`, by power-of-two size range
/// (judged at the middle of each range: 1.5 x its lower end), consecutive ranges with the
/// same choice merged. The lines match `p`'s exact node and rank counts; channels are left
/// to NCCL (-1): the model takes a channel count as an input, it does not choose one.
pub fn rows(p: &Platform) -> Vec<TunerRow> {
    let n_nodes = i64::from(p.nodes);
    let n_ranks = i64::from(p.nodes * p.gpus_per_node);
    let mut out: Vec<TunerRow> = Vec::new();
    for (coll, name) in COLLECTIVES {
        let mut lo = 0u64;
        for k in 0..32u32 {
            let hi = if k == 31 {
                ALL_SIZES_MAX_BYTES
            } else {
                (2u64 << k) - 1
            };
            let at = ((1u64 << k) * 3 / 2).max(1);
            let Some(pred) = cost::choose(coll, at, p) else {
                lo = hi + 1;
                continue;
            };
            let (algorithm, protocol) = (algo_name(pred.algo), proto_name(pred.proto));
            match out.last_mut() {
                Some(r)
                    if r.collective == name
                        && r.algorithm == algorithm
                        && r.protocol == protocol
                        && r.max_bytes + 1 == lo =>
                {
                    r.max_bytes = hi;
                }
                _ => out.push(TunerRow {
                    collective: name.to_string(),
                    min_bytes: lo,
                    max_bytes: hi,
                    algorithm: algorithm.to_string(),
                    protocol: protocol.to_string(),
                    channels: -1,
                    n_nodes,
                    n_ranks,
                    num_pipe_ops: Some(-1),
                    reg_buff: Some(-1),
                }),
            }
            lo = hi + 1;
        }
    }
    out
}

/// The file: `header` lines as comments, the column names, then one line per row.
pub fn render(header: &[String], rows: &[TunerRow]) -> String {
    let mut s = String::new();
    for h in header {
        s.push_str(&format!("# {h}\n"));
    }
    s.push_str("# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{}",
            r.collective, r.min_bytes, r.max_bytes, r.algorithm, r.protocol, r.channels, r.n_nodes, r.n_ranks
        ));
        if let Some(n) = r.num_pipe_ops {
            s.push_str(&format!(",{n}"));
            if let Some(b) = r.reg_buff {
                s.push_str(&format!(",{b}"));
            }
        }
        s.push('\n');
    }
    s
}

/// A line the plugin would not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TunerCsvError {
    /// 1-based line.
    pub line: usize,
    /// What was expected there.
    pub message: String,
}

/// Reads a configuration file by the plugin's rules.
///
/// # Errors
/// The first line that breaks them, with what was expected.
pub fn parse(text: &str) -> Result<Vec<TunerRow>, TunerCsvError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.strip_suffix('\r').unwrap_or(line);
        if t.trim().is_empty() || t.trim_start().starts_with('#') {
            continue;
        }
        let bad = |message: String| TunerCsvError { line: n, message };
        let f: Vec<&str> = t.split(',').collect();
        if !(8..=10).contains(&f.len()) {
            return Err(bad(format!(
                "8, 9 or 10 comma-separated fields, found {}",
                f.len()
            )));
        }
        if let Some(x) = f.iter().find(|x| x.trim() != **x || x.is_empty()) {
            return Err(bad(format!(
                "no empty field and no spaces around commas, found `{x}`"
            )));
        }
        let names = COLLECTIVES.map(|c| c.1);
        if !names.contains(&f[0]) && f[0] != "reduce" {
            return Err(bad(format!(
                "a collective (broadcast, reduce, allgather, reducescatter, allreduce), found `{}`",
                f[0]
            )));
        }
        let size = |x: &str, what: &str| -> Result<u64, TunerCsvError> {
            x.parse::<u64>()
                .ok()
                .filter(|v| *v <= ALL_SIZES_MAX_BYTES)
                .ok_or_else(|| {
                    bad(format!(
                        "{what}: bytes from 0 to {ALL_SIZES_MAX_BYTES}, found `{x}`"
                    ))
                })
        };
        let (min_bytes, max_bytes) = (size(f[1], "min_bytes")?, size(f[2], "max_bytes")?);
        if min_bytes > max_bytes {
            return Err(bad(format!("min_bytes {min_bytes} above max_bytes {max_bytes}")));
        }
        if !ALGORITHMS.contains(&f[3]) {
            return Err(bad(format!(
                "an algorithm ({}), found `{}`",
                ALGORITHMS.join(", "),
                f[3]
            )));
        }
        if !PROTOCOLS.contains(&f[4]) {
            return Err(bad(format!(
                "a protocol ({}), found `{}`",
                PROTOCOLS.join(", "),
                f[4]
            )));
        }
        let count = |x: &str, what: &str| -> Result<i64, TunerCsvError> {
            x.parse::<i64>()
                .ok()
                .filter(|v| *v == -1 || *v > 0)
                .ok_or_else(|| bad(format!("{what}: a positive integer or -1, found `{x}`")))
        };
        let channels = count(f[5], "channels")?;
        let n_nodes = count(f[6], "nNodes")?;
        let n_ranks = count(f[7], "nRanks")?;
        let num_pipe_ops = f.get(8).map(|x| count(x, "numPipeOps")).transpose()?;
        let reg_buff = f
            .get(9)
            .map(|x| {
                x.parse::<i64>()
                    .ok()
                    .filter(|v| matches!(v, -1..=1))
                    .ok_or_else(|| bad(format!("regBuff: 0, 1 or -1, found `{x}`")))
            })
            .transpose()?;
        out.push(TunerRow {
            collective: f[0].to_string(),
            min_bytes,
            max_bytes,
            algorithm: f[3].to_string(),
            protocol: f[4].to_string(),
            channels,
            n_nodes,
            n_ranks,
            num_pipe_ops,
            reg_buff,
        });
    }
    Ok(out)
}
