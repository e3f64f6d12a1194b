//! The input probe (issue 44): every command that reads a file is run on mutations of a
//! real fixture (numbers turned to 0, -1, 1e-300, 1e300, 2^64 - 1 and NaN; strings
//! emptied, duplicated or unknown; the file emptied, truncated, binary or a FIFO), and
//! each run must end in exit 0, 1 or 2, never a panic, a signal, a hang or more than
//! 2 GB of address space; a refusal must name the input; and a nonsensical number must
//! not pass with exit 0 unless its key is one where that value is legitimate (the
//! allowlist below, each with its reason).
//!
//! CI runs a fixed seed and a small budget (`PROBE_BUDGET` mutations per fixture);
//! `scripts/probe-inputs.sh` runs a longer one. VALIDATION.md, "Inputs", records both.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand_xoshiro::Xoshiro256PlusPlus as Prng;
use rand_xoshiro::rand_core::{Rng as _, SeedableRng};

use crate::util::root;

/// Mutations tried per fixture in the default suite.
const PROBE_BUDGET: usize = 12;
/// Longest a command may take on a mutated input (the slowest fixture runs in a second).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// The address-space limit of each run, KiB (2 GiB).
const PROBE_VMEM_KIB: u64 = 2 * 1024 * 1024;

/// Nonsensical numbers.
const NUMBERS: [&str; 6] = ["0", "-1", "1e-300", "1e300", "18446744073709551615", "nan"];

/// Keys (or nccl-tests columns) where a mutated number is a legitimate value, with why.
const ALLOWED: [(&str, &str); 9] = [
    (
        "switch",
        "a failure-domain share below one node is the one-node floor, which the plan reports",
    ),
    ("rail", "as `switch`"),
    ("rack", "as `switch`"),
    ("job", "as `switch`"),
    ("above", "an alert threshold may be any finite number"),
    ("seed", "any 64-bit seed is a seed"),
    ("start_us", "0 is a valid start time"),
    ("root", "an nccl-tests root of -1 means none"),
    ("#wrong", "0 wrong elements is the healthy value"),
];

/// A command reading one file, `{}` standing for it.
struct Target {
    fixture: &'static str,
    args: &'static [&'static str],
}

const TARGETS: &[Target] = &[
    Target {
        fixture: "scenarios/default.toml",
        args: &["scenario", "check", "{}"],
    },
    Target {
        fixture: "scenarios/incast-16to1.toml",
        args: &["scenario", "check", "{}"],
    },
    Target {
        fixture: "docs/guide/examples/slow-link.toml",
        args: &["scenario", "check", "{}"],
    },
    Target {
        fixture: "scenarios/fat-tree-k8.toml",
        args: &["topo", "show", "{}"],
    },
    Target {
        fixture: "crates/xirang-collective/test_data/nccl-tests/h100-1node-8gpu-all-collectives.txt",
        args: &["nccl", "check", "{}"],
    },
    Target {
        fixture: "crates/xirang-collective/test_data/nccl-tests/pair-2node-1gpu-healthy.txt",
        args: &["diagnose", "nccl", "--nics", "1", "--nic-gbps", "100", "{}"],
    },
    Target {
        fixture: "models/transformer-7b.toml",
        args: &["plan", "overlap", "{}"],
    },
    Target {
        fixture: "models/llama-70b-tp8-serving.toml",
        args: &["plan", "batching", "{}", "--requests", "200"],
    },
    Target {
        fixture: "crates/xirang-rollout/test_data/policy.toml",
        args: &["rollout", "simulate", "--nodes", "64", "--policy", "{}"],
    },
    Target {
        fixture: "crates/xirang-audit/test_data/cluster/policy.toml",
        args: &[
            "audit",
            "--hosts",
            "crates/xirang-audit/test_data/cluster/hosts",
            "--policy",
            "{}",
        ],
    },
    Target {
        fixture: "crates/xirang-audit/test_data/cluster/topology.toml",
        args: &[
            "audit",
            "--hosts",
            "crates/xirang-audit/test_data/cluster/hosts",
            "--topology",
            "{}",
        ],
    },
    Target {
        fixture: "monitoring/alert-rules.toml",
        args: &[
            "monitor",
            "--once",
            "--no-ethtool",
            "--root",
            "crates/xirang-audit/test_data/cluster/hosts/h1",
            "--alerts",
            "{}",
        ],
    },
];

/// One mutation: what was done, and the new bytes (None: a FIFO).
struct Mutation {
    what: String,
    /// The key (or column) a number mutation changed, for the allowlist.
    key: Option<String>,
    /// Whether the value is nonsense wherever it sits (a number mutation).
    nonsense: bool,
    bytes: Option<Vec<u8>>,
}

/// Byte ranges of numbers in `text`: after `= ` in TOML, whitespace-separated fields of
/// a log's rows; each with the key (or column number) it belongs to.
fn numbers(text: &str, toml: bool) -> Vec<(std::ops::Range<usize>, String)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        if line.trim_start().starts_with('#') {
            continue;
        }
        if toml {
            let b = line.as_bytes();
            let mut i = 0;
            let mut in_string = false;
            while i < b.len() {
                if b[i] == b'"' {
                    in_string = !in_string;
                    i += 1;
                } else if b[i] == b'=' && !in_string {
                    let key: String = line[..i]
                        .rsplit(['{', ',', '['])
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_string();
                    let mut j = i + 1;
                    while j < b.len() && b[j] == b' ' {
                        j += 1;
                    }
                    let k0 = j;
                    while j < b.len() && (b[j].is_ascii_alphanumeric() || b"._+-".contains(&b[j])) {
                        j += 1;
                    }
                    if j > k0 && (b[k0].is_ascii_digit() || (b[k0] == b'-' && j > k0 + 1)) {
                        out.push((start + k0..start + j, key));
                    }
                    i = j;
                } else {
                    i += 1;
                }
            }
        } else if line.split_whitespace().count() >= 13 {
            let mut pos = 0;
            for (col, tok) in line.split_whitespace().enumerate() {
                let at = line[pos..].find(tok).unwrap() + pos;
                pos = at + tok.len();
                if tok.parse::<f64>().is_ok() {
                    let name = [
                        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                    ]
                    .get(if col >= 9 { col - 4 } else { col })
                    .copied()
                    .unwrap_or("?");
                    out.push((start + at..start + pos, name.to_string()));
                }
            }
        }
    }
    out
}

/// A number below `n` (n > 0).
fn below(rng: &mut Prng, n: usize) -> usize {
    (rng.next_u64() % n as u64) as usize
}

fn mutations(text: &str, toml: bool, rng: &mut Prng, budget: usize) -> Vec<Mutation> {
    let mut out = vec![
        Mutation {
            what: "empty file".into(),
            key: None,
            nonsense: false,
            bytes: Some(Vec::new()),
        },
        Mutation {
            what: "truncated at half".into(),
            key: None,
            nonsense: false,
            bytes: Some(text.as_bytes()[..text.len() / 2].to_vec()),
        },
        Mutation {
            what: "binary".into(),
            key: None,
            nonsense: false,
            bytes: Some((0..4096).map(|_| rng.next_u64() as u8).collect()),
        },
        Mutation {
            what: "a FIFO".into(),
            key: None,
            nonsense: false,
            bytes: None,
        },
    ];
    let nums = numbers(text, toml);
    let strings: Vec<std::ops::Range<usize>> = {
        let mut v = Vec::new();
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'"' {
                let s = i;
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    i += 1;
                }
                if i < b.len() && b[i] == b'"' {
                    v.push(s + 1..i);
                }
            }
            i += 1;
        }
        v
    };
    for _ in 0..budget {
        let pick_number = !nums.is_empty() && (strings.is_empty() || below(rng, 10) < 7);
        if pick_number {
            let (r, key) = &nums[below(rng, nums.len())];
            let v = NUMBERS[below(rng, NUMBERS.len())];
            let mut t = text.to_string();
            t.replace_range(r.clone(), v);
            out.push(Mutation {
                what: format!("`{key}` = {} -> {v}", &text[r.clone()]),
                key: Some(key.clone()),
                nonsense: v != "0" || !toml,
                bytes: Some(t.into_bytes()),
            });
        } else if toml && !strings.is_empty() {
            let r = strings[below(rng, strings.len())].clone();
            let mut t = text.to_string();
            let (what, new) = match below(rng, 3) {
                0 => ("emptied", String::new()),
                1 => ("made unknown", "no-such-name-xyz".to_string()),
                _ => {
                    // The whole line again, below itself: duplicate keys, ids, entries.
                    let ls = text[..r.start].rfind('\n').map_or(0, |i| i + 1);
                    let le = text[r.end..].find('\n').map_or(text.len(), |i| r.end + i + 1);
                    t.insert_str(le, &text[ls..le]);
                    out.push(Mutation {
                        what: format!("line with \"{}\" duplicated", &text[r.clone()]),
                        key: None,
                        nonsense: false,
                        bytes: Some(t.into_bytes()),
                    });
                    continue;
                }
            };
            t.replace_range(r.clone(), &new);
            out.push(Mutation {
                what: format!("string \"{}\" {what}", &text[r]),
                key: None,
                nonsense: false,
                bytes: Some(t.into_bytes()),
            });
        }
    }
    out
}

/// One run: (exit code or None for a signal, stdout + stderr, elapsed).
fn run_limited(args: &[String]) -> (Option<i32>, String, Duration) {
    let bin = assert_cmd::cargo::cargo_bin("xirang");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {PROBE_VMEM_KIB} && exec \"$@\""))
        .arg("sh")
        .arg(&bin)
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let out = std::thread::scope(|s| {
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let a = s.spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut so, &mut v).ok();
            v
        });
        let b = s.spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut se, &mut v).ok();
            v
        });
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&a.join().unwrap()),
                    String::from_utf8_lossy(&b.join().unwrap())
                );
                return (st.code(), text);
            }
            if t0.elapsed() > PROBE_TIMEOUT {
                child.kill().ok();
                child.wait().ok();
                return (None, "killed: timeout".to_string());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    (out.0, out.1, t0.elapsed())
}

/// What a probe found wrong, one line each.
pub(crate) fn probe(seed: u64, budget: usize) -> (usize, Vec<String>) {
    let mut rng = Prng::seed_from_u64(seed);
    let mut problems = Vec::new();
    let mut tried = 0;
    let dir = tempfile::tempdir().unwrap();
    for t in TARGETS {
        let text = std::fs::read_to_string(root().join(t.fixture)).unwrap();
        let toml = t.fixture.ends_with(".toml");
        let name = Path::new(t.fixture)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for (i, m) in mutations(&text, toml, &mut rng, budget).into_iter().enumerate() {
            // In a directory of its own, never beside the fixtures: other tests walk
            // those directories (a FIFO there would block them). No fixture here names
            // a file relative to itself.
            let file: PathBuf = dir.path().join(format!("probe-{seed}-{i}-{name}"));
            let _cleanup = Cleanup(file.clone());
            match &m.bytes {
                Some(b) => std::fs::write(&file, b).unwrap(),
                None => assert!(Command::new("mkfifo").arg(&file).status().unwrap().success()),
            }
            let args: Vec<String> = t
                .args
                .iter()
                .map(|a| {
                    if *a == "{}" {
                        file.display().to_string()
                    } else {
                        a.to_string()
                    }
                })
                .collect();
            let (code, out, took) = run_limited(&args);
            tried += 1;
            let case = format!("{} ({}): {}", t.args[..2].join(" "), t.fixture, m.what);
            // A measured row set aside as an input problem at its line is not accepted.
            let flagged = out.contains("result row ignored");
            match code {
                Some(0)
                    if m.nonsense
                        && !flagged
                        && !m
                            .key
                            .as_deref()
                            .is_some_and(|k| ALLOWED.iter().any(|(a, _)| k == *a)) =>
                {
                    problems.push(format!("{case}: accepted (exit 0)"));
                }
                Some(0..=2) => {}
                Some(c) => problems.push(format!("{case}: exit {c}: {}", tail(&out))),
                None => problems.push(format!("{case}: killed after {took:?}: {}", tail(&out))),
            }
            if out.contains("panicked") {
                problems.push(format!("{case}: panicked: {}", tail(&out)));
            }
            // A refusal says which input it is about (exit 1 on findings of a valid
            // input is not a refusal, and says no `error:`).
            if out.contains("error:") && !out.contains(&*file.file_name().unwrap().to_string_lossy()) {
                problems.push(format!(
                    "{case}: refused without naming the input: {}",
                    tail(&out)
                ));
            }
        }
    }
    (tried, problems)
}

fn tail(s: &str) -> String {
    let t: Vec<&str> = s.lines().rev().take(3).collect();
    t.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

struct Cleanup(PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

#[test]
fn every_file_reader_survives_the_probe() {
    let budget = std::env::var("PROBE_BUDGET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PROBE_BUDGET);
    let seed = std::env::var("PROBE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(44);
    let (tried, problems) = probe(seed, budget);
    eprintln!(
        "probe: seed {seed}, {tried} inputs over {} commands, {} problems",
        TARGETS.len(),
        problems.len()
    );
    assert!(
        problems.is_empty(),
        "{} of {tried} inputs:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
