//! The driver for real fleets: inventory from an audit-style directory, commands run
//! through `sh -c`, benchmark files read from the policy's paths.
//!
//! Inventory directory layout (the audit's): `hosts/` (one host tree or snapshot per
//! host, re-read after each flash, so a `collect` command can refresh it),
//! `switches/` (SONiC config_db JSON), `topology.toml` (cabling), `policy.toml` (the
//! audit's policy), `fleet.toml` (racks and jobs). Only `hosts/` is required.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use xirang_audit::cluster::{Cluster, FirmwareRule};
use xirang_audit::rules::{Severity, audit};

use crate::RolloutError;
use crate::exec::{Driver, Job, Outcome, Phase, Purpose};
use crate::fleet::{Fleet, FleetFile};
use crate::gates::{BenchFigure, Reading, SOAK_COUNTERS, bench_figure};
use crate::policy::{Policy, shell_quote};

/// A loaded inventory.
#[derive(Debug, Clone)]
pub struct Inventory {
    /// The directory.
    pub dir: PathBuf,
    /// Hosts, switches, cabling, audit policy.
    pub cluster: Cluster,
    /// The fleet view.
    pub fleet: Fleet,
}

/// Loads `dir` (see the module's documentation for the layout).
pub fn load_inventory(dir: &Path) -> Result<Inventory, RolloutError> {
    let hosts = dir.join("hosts");
    if !hosts.is_dir() {
        return Err(RolloutError::Inventory(format!(
            "{}: expected a `hosts/` directory (one host tree or snapshot per host)",
            dir.display()
        )));
    }
    let opt = |name: &str| {
        let p = dir.join(name);
        p.exists().then_some(p)
    };
    let switches = opt("switches");
    let topology = opt("topology.toml");
    let policy = opt("policy.toml");
    let cluster = Cluster::load(
        Some(&hosts),
        switches.as_deref(),
        topology.as_deref(),
        policy.as_deref(),
    )
    .map_err(|e| RolloutError::Inventory(e.to_string()))?;
    if let Some((p, e)) = cluster.unreadable.first() {
        return Err(RolloutError::Inventory(format!(
            "{p}: unreadable ({e}); fix or remove it before planning"
        )));
    }
    let fleet_path = dir.join("fleet.toml");
    let extra = if fleet_path.is_file() {
        FleetFile::load(&fleet_path)?
    } else {
        FleetFile::default()
    };
    let fleet = Fleet::from_cluster(&cluster, &extra, &fleet_path)?;
    Ok(Inventory {
        dir: dir.to_path_buf(),
        cluster,
        fleet,
    })
}

/// Largest benchmark file read (nccl-tests logs are a few hundred KiB).
const MAX_BENCH_BYTES: u64 = 16 << 20;
/// Output kept from a command.
const MAX_OUTPUT_BYTES: usize = 64 << 10;

/// Runs commands on, and reads, real nodes.
pub struct CommandDriver {
    inv: Inventory,
    policy: Policy,
    stdin: Option<File>,
    timeout: Duration,
    markers: Option<PathBuf>,
}

impl CommandDriver {
    /// A driver over `inv`; `stdin` (the state lock, held) is handed to every command
    /// so that the lock outlives a killed executor until its command ends. With
    /// `markers`, a flash command first writes `markers/<intent>` itself, so that after
    /// an interruption a command that never started is told from one that ran.
    pub fn new(
        inv: Inventory,
        policy: Policy,
        stdin: Option<File>,
        timeout: Duration,
        markers: Option<PathBuf>,
    ) -> Self {
        CommandDriver {
            inv,
            policy,
            stdin,
            timeout,
            markers,
        }
    }

    fn marked(&self, j: &Job) -> String {
        match (&self.markers, j.intent) {
            (Some(dir), seq) if seq > 0 => format!(
                ": > {} && {{ {}\n}}",
                shell_quote(&dir.join(seq.to_string()).display().to_string()),
                j.command
            ),
            _ => j.command.clone(),
        }
    }

    fn host_path(&self, node: &str) -> Option<PathBuf> {
        let hosts = self.inv.dir.join("hosts");
        [
            hosts.join(node),
            hosts.join(format!("{node}.tar.gz")),
            hosts.join(format!("{node}.tgz")),
        ]
        .into_iter()
        .find(|p| p.exists())
    }
}

/// Runs `sh -c command` with stdout and stderr together, killed after `timeout`.
pub fn run_shell(command: &str, stdin: Option<&File>, timeout: Duration) -> Outcome {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("{{ {command}\n}} 2>&1"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    match stdin.and_then(|f| f.try_clone().ok()) {
        Some(f) => cmd.stdin(Stdio::from(f)),
        None => cmd.stdin(Stdio::null()),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                code: None,
                output: format!("could not start sh: {e}"),
            };
        }
    };
    let mut out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut buf);
        }
        buf
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let buf = reader.join().unwrap_or_default();
    let mut output = String::from_utf8_lossy(&buf[buf.len().saturating_sub(MAX_OUTPUT_BYTES)..]).into_owned();
    if status.is_none() {
        output.push_str(&format!("\n[killed after the {} s timeout]", timeout.as_secs()));
    }
    Outcome {
        code: status.and_then(|s| s.code()),
        output,
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Driver for CommandDriver {
    fn read(&mut self, node: &str) -> Result<Reading, String> {
        if let Some(c) = &self.policy.commands.collect {
            let cmd = c.replace("{node}", &shell_quote(node));
            let out = run_shell(&cmd, self.stdin.as_ref(), self.timeout);
            if !out.ok() {
                return Err(format!(
                    "collect command failed ({:?}): {cmd}: {}",
                    out.code,
                    out.output.trim()
                ));
            }
        }
        let path = self.host_path(node).ok_or_else(|| {
            format!(
                "{}/hosts/{node}: no host tree or snapshot",
                self.inv.dir.display()
            )
        })?;
        let inv = xirang_host::read(&path).map_err(|e| e.to_string())?;
        let mut fw = BTreeMap::new();
        let mut errors = BTreeMap::new();
        for d in &inv.rdma {
            fw.insert(d.name.clone(), d.fw_ver.clone());
            for p in &d.ports {
                for c in SOAK_COUNTERS {
                    if let Some(v) = p.counters.get(*c) {
                        errors.insert(format!("{}/{}/{c}", d.name, p.port), *v);
                    }
                }
            }
        }
        let mut cluster = self.inv.cluster.clone();
        let mut hinv = inv;
        if hinv.hostname.is_empty() {
            hinv.hostname = node.to_string();
        }
        cluster.hosts = vec![hinv];
        cluster.missing_nics.clear();
        cluster.unreadable.clear();
        // The new firmware is allowed by definition during its own rollout.
        for t in &self.policy.firmware {
            cluster.policy.firmware.push(FirmwareRule {
                hca_type: t.hca_type.clone(),
                board_id: t.board_id.clone(),
                allowed: std::iter::once(t.target.clone())
                    .chain(t.allowed_from.iter().cloned())
                    .collect(),
            });
        }
        let audit_errors = audit(&cluster)
            .into_iter()
            .filter(|f| f.severity == Severity::Error)
            .filter(|f| f.entity == node || f.entity.starts_with(&format!("{node}/")))
            .map(|f| {
                let ev: Vec<String> = f
                    .evidence
                    .iter()
                    .map(|e| format!("{} = {}", e.source, e.value))
                    .collect();
                format!("{} {}: {} [{}]", f.rule, f.entity, f.message, ev.join("; "))
            })
            .collect();
        Ok(Reading {
            fw,
            errors,
            audit_errors,
            source: path.display().to_string(),
            ts_ns: now_ns(),
        })
    }

    fn run(&mut self, _node: &str, _nic: Option<&str>, _purpose: Purpose, command: &str) -> Outcome {
        run_shell(command, self.stdin.as_ref(), self.timeout)
    }

    fn started(&mut self, seq: i64) -> Option<bool> {
        // Valid because the executor holds the state lock: no command of an earlier,
        // killed executor is still running (it would hold the lock through its stdin).
        let dir = self.markers.as_ref()?;
        Some(dir.join(seq.to_string()).exists())
    }

    fn run_many(&mut self, jobs: &[Job]) -> Vec<Outcome> {
        let (stdin, timeout) = (self.stdin.as_ref(), self.timeout);
        let lines: Vec<String> = jobs.iter().map(|j| self.marked(j)).collect();
        std::thread::scope(|s| {
            let handles: Vec<_> = lines
                .iter()
                .map(|c| s.spawn(move || run_shell(c, stdin, timeout)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| Outcome {
                        code: None,
                        output: "the thread running the command panicked".into(),
                    })
                })
                .collect()
        })
    }

    fn bench(&mut self, node: &str, phase: Phase) -> Result<(String, BenchFigure), String> {
        let b = self.policy.gates.benchmark.as_ref().ok_or("no benchmark gate")?;
        let template = match phase {
            Phase::Before => &b.baseline,
            Phase::After => &b.result,
        };
        let path = self.policy.path_for(template, node);
        let shown = path.display().to_string();
        let f = File::open(&path).map_err(|e| format!("{shown}: {e}"))?;
        let mut text = String::new();
        f.take(MAX_BENCH_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| format!("{shown}: {e}"))?;
        let fig = bench_figure(&text).map_err(|e| format!("{shown}: {e}"))?;
        Ok((shown, fig))
    }

    fn sleep_s(&mut self, s: f64) {
        std::thread::sleep(Duration::from_secs_f64(s));
    }

    fn now_ms(&mut self) -> i64 {
        (now_ns() / 1_000_000) as i64
    }
}
