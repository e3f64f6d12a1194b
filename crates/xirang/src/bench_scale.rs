//! `xirang bench --scale`: the simulator on fabrics from 128 to 16,384 GPUs.
//!
//! Every case is a scenario written to a temporary directory and run by a fresh child
//! process (`xirang bench --child calendar --runs 1 FILE`), so that its peak memory is its
//! own; with `--reference-binary` a previous build runs the same files in the same way,
//! beside the current one. The cases:
//!
//! - `ring-su-N` and `tree-su-N`: NCCL ring and double binary tree AllReduce of 256 MiB
//!   over 8 channels across N GPUs of rail-optimized scalable units (32 hosts of 8 GPUs and
//!   8 x 400G NICs, radix-64 switches: `scenarios/rail-*gpu.toml` are three of them);
//! - `ring-classic-N`: the fabric the scale issue measured (one group of rail leaves of
//!   unbounded radix, 8 spines), the one older binaries can read, up to 1,024 GPUs;
//! - `perm-kK`: a random permutation of 4 MB flows on a k-ary fat tree at 100 Gbit/s.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::Outcome;
use crate::bench::Measurement;
use crate::cli::BenchArgs;

/// The GPU counts of the collective cases.
const GPU_COUNTS: [u32; 8] = [128, 256, 512, 1024, 2048, 4096, 8192, 16384];
/// The classic fabric is the one the table measured, up to this size.
const CLASSIC_MAX_GPUS: u32 = 1024;
/// Fat-tree radices of the permutation cases (k = 32 is 8,192 hosts).
const FAT_TREE_K: [u32; 3] = [8, 16, 32];

struct Case {
    name: String,
    gpus: u32,
    text: String,
}

fn collective(name: &str, topology: &str, algorithm: &str) -> String {
    format!(
        "name = \"{name}\"\n{topology}\n[workloads.allreduce.collective]\nop = \"all_reduce\"\n\
         algorithm = \"{algorithm}\"\nbytes = 268_435_456\nchannels = 8\nclass = \"training\"\n\n[run]\nseed = 1\n"
    )
}

fn cases(max_gpus: u32) -> Vec<Case> {
    let host = "[topology.rail_optimized.host]\ngpus = 8\nnics = 8\n";
    let mut v = Vec::new();
    for gpus in GPU_COUNTS.into_iter().filter(|g| *g <= max_gpus) {
        let hosts = gpus / 8;
        let su = format!(
            "[topology.rail_optimized]\nhosts = {hosts}\nhost_rate_gbps = 400\nfabric_rate_gbps = 400\nlink_delay_ns = 500\n\n{host}"
        );
        for alg in ["ring", "tree"] {
            let name = format!("{alg}-su-{gpus}");
            v.push(Case {
                text: collective(&name, &su, alg),
                name,
                gpus,
            });
        }
        if gpus <= CLASSIC_MAX_GPUS {
            let classic = format!(
                "[topology.rail_optimized]\nhosts = {hosts}\nspines = 8\nhost_rate_gbps = 400\nfabric_rate_gbps = 400\nlink_delay_ns = 500\n\n{host}"
            );
            let name = format!("ring-classic-{gpus}");
            v.push(Case {
                text: collective(&name, &classic, "ring"),
                name,
                gpus,
            });
        }
    }
    for k in FAT_TREE_K {
        let hosts = k * k * k / 4;
        if hosts > max_gpus {
            continue;
        }
        let name = format!("perm-k{k}");
        v.push(Case {
            text: format!(
                "name = \"{name}\"\n[topology.fat_tree]\nk = {k}\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\n\
                 link_delay_ns = 1000\n\n[workloads.permutation.permutation]\nbytes = 4_000_000\nclass = \"training\"\n\n[run]\nseed = 1\n"
            ),
            name,
            gpus: hosts,
        });
    }
    v
}

/// One row: a case run by one binary.
#[derive(Debug, Serialize)]
struct Row {
    case: String,
    gpus: u32,
    binary: String,
    /// The figures, or why the binary could not run the case.
    result: std::result::Result<Measurement, String>,
}

fn measure(exe: &Path, file: &Path) -> std::result::Result<Measurement, String> {
    let out = Command::new(exe)
        .args(["bench", "--child", "calendar", "--runs", "1"])
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("failed").trim().to_string());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("unreadable figures: {e}"))
}

pub(crate) fn run(a: &BenchArgs) -> Result<Outcome> {
    let dir = tempfile::tempdir().context("creating a directory for the scale scenarios")?;
    let exe = std::env::current_exe().context("locating the xirang binary")?;
    let mut binaries: Vec<(String, PathBuf)> = vec![("this build".to_string(), exe)];
    if let Some(r) = &a.reference_binary {
        binaries.push((r.display().to_string(), r.clone()));
    }
    let mut rows = Vec::new();
    let all = cases(a.max_gpus);
    let chosen: Vec<&Case> = all
        .iter()
        .filter(|c| a.only.as_deref().is_none_or(|o| c.name.contains(o)))
        .collect();
    for (i, c) in chosen.iter().enumerate() {
        let file = dir.path().join(format!("{}.toml", c.name));
        std::fs::write(&file, &c.text).with_context(|| format!("writing {}", file.display()))?;
        for (label, bin) in &binaries {
            let result = measure(bin, &file);
            if !a.json {
                match &result {
                    Ok(m) => eprintln!(
                        "[{}/{}] {} [{label}]: {:.1} s, {:.2} M packet-hops/s, {:.0} MB",
                        i + 1,
                        chosen.len(),
                        c.name,
                        m.best_wall_s,
                        m.packet_hops_per_s / 1e6,
                        m.peak_rss_bytes as f64 / 1e6
                    ),
                    Err(e) => eprintln!("[{}/{}] {} [{label}]: {e}", i + 1, chosen.len(), c.name),
                }
            }
            rows.push(Row {
                case: c.name.clone(),
                gpus: c.gpus,
                binary: label.clone(),
                result,
            });
        }
    }
    if a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "case": r.case, "gpus": r.gpus, "binary": r.binary,
                    "figures": r.result.as_ref().ok(), "error": r.result.as_ref().err(),
                })
            })
            .collect();
        crate::cmd::out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
        return Ok(Outcome::Clean);
    }
    let header = [
        "case",
        "GPUs or hosts",
        "binary",
        "M packet-hops",
        "wall s",
        "M events/s",
        "M packet-hops/s",
        "peak RSS MB",
        "B per packet in flight",
        "peak transfers in flight",
        "simulated ms",
    ];
    let cells = |r: &Row| -> Vec<String> {
        let mut v = vec![r.case.clone(), r.gpus.to_string(), r.binary.clone()];
        match &r.result {
            Ok(m) => v.extend([
                format!("{:.1}", m.packet_hops as f64 / 1e6),
                format!("{:.1}", m.best_wall_s),
                format!("{:.2}", m.events_per_s / 1e6),
                format!("{:.2}", m.packet_hops_per_s / 1e6),
                format!("{:.0}", m.peak_rss_bytes as f64 / 1e6),
                format!("{:.0}", m.bytes_per_packet_in_flight),
                m.peak_transfers_in_flight
                    .map_or("-".to_string(), |p| p.to_string()),
                m.sim_time_ps
                    .map_or("-".to_string(), |t| format!("{:.3}", t as f64 / 1e9)),
            ]),
            Err(e) => {
                v.push(format!("cannot run it: {e}"));
                v.extend(std::iter::repeat_n(String::new(), header.len() - 4));
            }
        }
        v
    };
    let text = if a.markdown {
        let mut t = format!("| {} |\n|{}\n", header.join(" | "), "---|".repeat(header.len()));
        for r in &rows {
            t.push_str(&format!("| {} |\n", cells(r).join(" | ")));
        }
        t
    } else {
        let mut t = crate::cmd::table(&header);
        for r in &rows {
            t.add_row(cells(r));
        }
        format!("{t}\n")
    };
    crate::cmd::out(&text)?;
    Ok(Outcome::Clean)
}
