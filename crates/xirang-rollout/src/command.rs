//! The driver for real fleets: inventory from an audit-style directory, commands run
//! through `sh -c`, benchmark files read from the policy's paths.
//!
//! Inventory directory layout (the audit's): `hosts/` (one host tree or snapshot per
//! host, re-read after each flash, so a `collect` command can refresh it),
//! `switches/` (SONiC config_db JSON), `topology.toml` (cabling), `policy.toml` (the
//! audit's policy), `fleet.toml` (racks and jobs). Only `hosts/` is required.
//!
//! Commands run in the inventory directory, in their own process group (a Ctrl-C or a
//! dropped ssh session of the operator does not reach a flash in progress), with their
//! output written to a file rather than a pipe (a flash tool outlives a killed executor
//! instead of dying of SIGPIPE on its next progress line), and with the state lock as
//! their standard input (the lock outlives a killed executor until they end).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use xirang_audit::cluster::{Cluster, FirmwareRule};
use xirang_audit::rules::{Severity, audit};

use crate::RolloutError;
use crate::exec::{Driver, Job, Outcome, Phase};
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

/// Loads `dir` for planning: any unreadable host or switch file is an error (a plan
/// must see every node).
pub fn load_inventory(dir: &Path) -> Result<Inventory, RolloutError> {
    let inv = load_inventory_lenient(dir)?;
    if let Some((p, e)) = inv.cluster.unreadable.first() {
        return Err(RolloutError::Inventory(format!(
            "{p}: unreadable ({e}); fix or remove it before planning"
        )));
    }
    Ok(inv)
}

/// Loads `dir` for executing: unreadable hosts are kept as problems (a node being
/// re-collected must not stop the rollout of the others; reading it fails later).
pub fn load_inventory_lenient(dir: &Path) -> Result<Inventory, RolloutError> {
    let cluster = Cluster::load_dir(dir).map_err(|e| RolloutError::Inventory(e.to_string()))?;
    let fleet_path = dir.join(xirang_audit::cluster::FLEET_FILE);
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
const MAX_OUTPUT_BYTES: u64 = 64 << 10;
/// How often a running command is polled.
const POLL: Duration = Duration::from_millis(20);
/// File-time slack when judging a result file against the flash time (coarse file
/// system timestamps).
const MTIME_SLACK_MS: i64 = 2_000;
/// Runs commands on, and reads, real nodes.
pub struct CommandDriver {
    inv: Inventory,
    policy: Policy,
    stdin: Option<File>,
    timeout: Duration,
    markers: Option<PathBuf>,
    work: PathBuf,
    runs: u64,
    /// The inventory's switches, cabling and audit policy (hosts left out), with the
    /// rollout's versions allowed: one node is audited against it.
    audit_template: Cluster,
}

impl CommandDriver {
    /// A driver over `inv`. `stdin` is the state lock (held), handed to every command so
    /// that the lock outlives a killed executor until its command ends. `markers` is the
    /// rollout's marker directory ([`crate::layout::RolloutFiles::markers`]); `None` makes every interrupted flash
    /// an operator's decision. `work` holds the commands' output files.
    pub fn new(
        inv: Inventory,
        policy: Policy,
        stdin: Option<File>,
        timeout: Duration,
        markers: Option<PathBuf>,
        work: PathBuf,
    ) -> Self {
        let mut audit_template = inv.cluster.clone();
        audit_template.hosts.clear();
        audit_template.missing_nics.clear();
        audit_template.unreadable.clear();
        allow_targets(&mut audit_template, &policy);
        CommandDriver {
            inv,
            policy,
            stdin,
            timeout,
            markers,
            work,
            runs: 0,
            audit_template,
        }
    }

    fn host_path(&self, node: &str) -> Option<PathBuf> {
        let hosts = self.inv.dir.join(xirang_audit::cluster::HOSTS_DIR);
        [
            hosts.join(node),
            hosts.join(format!("{node}.tar.gz")),
            hosts.join(format!("{node}.tgz")),
        ]
        .into_iter()
        .find(|p| p.exists())
    }

    /// Runs a collect template for `node` in the inventory directory.
    fn collect(&mut self, template: &str, node: &str) -> Result<(), String> {
        let mut v = BTreeMap::new();
        v.insert("node", node.to_string());
        let line =
            crate::policy::fill(template, &v).map_err(|e| format!("collect command `{template}`: {e}"))?;
        let out_file = self.out_file(0);
        let out = run_shell(&line, &self.inv.dir, self.stdin.as_ref(), &out_file, self.timeout);
        if !out.ok() {
            return Err(format!(
                "collect command failed ({:?}): {line}: {}",
                out.code,
                out.output.trim()
            ));
        }
        Ok(())
    }

    /// A switch read now: its config_db file again, the state of the paths its tier's
    /// patch writes as its unit's version, and the audit's error findings on it.
    fn read_switch(&mut self, sw: &crate::fleet::Switch) -> Result<Reading, String> {
        let patch = self
            .policy
            .configuration
            .as_ref()
            .and_then(|c| c.patches.iter().find(|p| Some(&p.tier) == sw.tier.as_ref()))
            .ok_or_else(|| {
                format!(
                    "{}: no patch for its tier ({}) in the rollout",
                    sw.name,
                    sw.tier.as_deref().unwrap_or("unknown")
                )
            })?;
        let path = Path::new(&sw.source);
        let db = crate::config::read_config_db(path)?;
        let mut fw = BTreeMap::new();
        fw.insert(
            crate::config::SWITCH_UNIT.to_string(),
            Some(crate::config::switch_state(patch, &db)),
        );
        let typed = xirang_switch::sonic::load(path).map_err(|e| e.to_string())?;
        let mut cluster = self.audit_template.clone();
        for s in &mut cluster.switches {
            if s.name == sw.name {
                s.db = typed.clone();
            }
        }
        let node = sw.name.as_str();
        let audit_errors = audit(&cluster)
            .into_iter()
            .filter(|f| f.severity == Severity::Error)
            .filter(|f| f.entity == node || f.entity.starts_with(&format!("{node}/")))
            .map(|f| format!("{} {}: {}", f.rule, f.entity, f.message))
            .collect();
        Ok(Reading {
            fw,
            pci: BTreeMap::new(),
            errors: self.switch_link_errors(&sw.name)?,
            audit_errors,
            source: sw.source.clone(),
            ts_ns: now_ns(),
        })
    }

    /// The error counters of a switch's links as its cabled hosts' ports count them
    /// (`host/dev/port/counter`): a switch's config_db has no counters, and a change that
    /// hurts its links shows there. The hosts are collected first (`collect`, all at
    /// once), as a host's own read does; a host that cannot be collected or read fails
    /// the switch's read, naming it (a soak that silently watched fewer links would pass
    /// untested).
    fn switch_link_errors(&mut self, switch: &str) -> Result<BTreeMap<String, u64>, String> {
        let mut errors = BTreeMap::new();
        let Some(cabling) = &self.inv.cluster.cabling else {
            return Ok(errors);
        };
        let mut by_host: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in &cabling.links {
            if c.switch == switch
                && let (Some(h), Some(n)) = (&c.host, &c.nic)
            {
                by_host.entry(h.clone()).or_default().push(n.clone());
            }
        }
        if let Some(template) = self.policy.commands.collect.clone() {
            let mut lines = Vec::new();
            for host in by_host.keys() {
                let mut v = BTreeMap::new();
                v.insert("node", host.clone());
                let line = crate::policy::fill(&template, &v)
                    .map_err(|e| format!("collect command `{template}`: {e}"))?;
                lines.push((host.clone(), line, self.out_file(0)));
            }
            let (stdin, timeout, dir) = (self.stdin.as_ref(), self.timeout, self.inv.dir.as_path());
            let failed: Vec<String> = std::thread::scope(|s| {
                let handles: Vec<_> = lines
                    .iter()
                    .map(|(h, line, out)| (h, s.spawn(move || run_shell(line, dir, stdin, out, timeout))))
                    .collect();
                handles
                    .into_iter()
                    .filter_map(|(host, h)| (!h.join().is_ok_and(|o| o.ok())).then(|| host.clone()))
                    .collect()
            });
            if !failed.is_empty() {
                return Err(format!(
                    "{switch}: the collect command failed for its cabled host(s) {}: their link errors cannot be read",
                    failed.join(", ")
                ));
            }
        }
        for (host, nics) in by_host {
            let inv = self
                .host_path(&host)
                .ok_or_else(|| format!("{host}: no host tree or snapshot"))
                .and_then(|p| xirang_host::read(&p).map_err(|e| e.to_string()))
                .map_err(|e| format!("{switch}: its cabled host {host} cannot be read: {e}"))?;
            for d in &inv.rdma {
                // The cable names the RDMA device or its interface.
                if !nics.iter().any(|n| *n == d.name || d.netdevs.contains(n)) {
                    continue;
                }
                for p in &d.ports {
                    for c in SOAK_COUNTERS {
                        if let Some(v) = p.counters.get(*c) {
                            errors.insert(format!("{host}/{}/{}/{c}", d.name, p.port), *v);
                        }
                    }
                }
            }
        }
        Ok(errors)
    }

    /// A fresh output file for one command.
    fn out_file(&mut self, intent: i64) -> PathBuf {
        self.runs += 1;
        let tag = if intent > 0 {
            intent.to_string()
        } else {
            "run".into()
        };
        self.work
            .join(format!("{tag}-{}-{}.out", std::process::id(), self.runs))
    }

    /// The line to run for a job (behind its start marker when it has an intent) and
    /// its output file.
    fn prepare(&mut self, j: &Job) -> (String, PathBuf) {
        let out = self.out_file(j.intent);
        let line = match (&self.markers, j.intent) {
            (Some(dir), seq) if seq > 0 => format!(
                ": > {} && {{ {}\n}}",
                shell_quote(&dir.join(seq.to_string()).to_string_lossy()),
                j.command
            ),
            _ => j.command.clone(),
        };
        (line, out)
    }
}

/// The rollout's targets and qualified versions are allowed by the audit's firmware
/// policy during the rollout: every audit rule about the same model gets them, and a
/// rule for the target's model goes first (the audit takes the first matching rule).
fn allow_targets(c: &mut Cluster, policy: &Policy) {
    for t in &policy.firmware {
        let mut allowed: Vec<String> = std::iter::once(t.target.clone())
            .chain(t.allowed_from.iter().cloned())
            .collect();
        for r in &mut c.policy.firmware {
            let same = (r.hca_type.is_some() && r.hca_type == t.hca_type)
                || (r.board_id.is_some() && r.board_id == t.board_id);
            if same {
                for v in &allowed {
                    if !r.allowed.contains(v) {
                        r.allowed.push(v.clone());
                    }
                }
                for v in &r.allowed {
                    if !allowed.contains(v) {
                        allowed.push(v.clone());
                    }
                }
            }
        }
        c.policy.firmware.insert(
            0,
            FirmwareRule {
                hca_type: t.hca_type.clone(),
                board_id: t.board_id.clone(),
                allowed,
            },
        );
    }
}

/// Runs `sh -c line` in `dir`, in its own process group, output (stdout and stderr)
/// into `out`, the whole group killed after `timeout`. `stdin` must be passed on when
/// given: a command that cannot inherit the lock does not run.
pub fn run_shell(line: &str, dir: &Path, stdin: Option<&File>, out: &Path, timeout: Duration) -> Outcome {
    let fail = |m: String| Outcome {
        code: None,
        output: m,
    };
    let file = match File::create(out) {
        Ok(f) => f,
        Err(e) => return fail(format!("cannot create {}: {e}", out.display())),
    };
    let err = match file.try_clone() {
        Ok(f) => f,
        Err(e) => return fail(format!("cannot duplicate {}: {e}", out.display())),
    };
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(line)
        .current_dir(dir)
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(err))
        .process_group(0);
    match stdin {
        Some(f) => match f.try_clone() {
            Ok(f) => {
                cmd.stdin(Stdio::from(f));
            }
            Err(e) => return fail(format!("cannot pass the state lock to the command: {e}")),
        },
        None => {
            cmd.stdin(Stdio::null());
        }
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("could not start sh: {e}")),
    };
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() > timeout => {
                // The whole group: the vendor tool is a grandchild of sh.
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(_) => break None,
        }
    };
    let mut output = read_tail(out);
    let _ = std::fs::remove_file(out);
    if status.is_none() {
        output.push_str(&format!(
            "\n[killed after the {} s timeout: its effect is unknown]",
            timeout.as_secs()
        ));
    }
    Outcome {
        code: status.and_then(|s| s.code()),
        output,
    }
}

fn read_tail(p: &Path) -> String {
    let Ok(mut f) = xirang_files::open_regular(p) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::new();
    if len > MAX_OUTPUT_BYTES {
        use std::io::Seek;
        let _ = f.seek(std::io::SeekFrom::Start(len - MAX_OUTPUT_BYTES));
    }
    let _ = f.take(MAX_OUTPUT_BYTES).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Driver for CommandDriver {
    fn read(&mut self, node: &str) -> Result<Reading, String> {
        if let Some(sw) = self.inv.fleet.switch(node).cloned() {
            if let Some(c) = self.policy.commands.switch_collect.clone() {
                self.collect(&c, node)?;
            }
            return self.read_switch(&sw);
        }
        if let Some(c) = self.policy.commands.collect.clone() {
            self.collect(&c, node)?;
        }
        let path = self.host_path(node).ok_or_else(|| {
            format!(
                "{}/hosts/{node}: no host tree or snapshot",
                self.inv.dir.display()
            )
        })?;
        let mut inv = xirang_host::read(&path).map_err(|e| e.to_string())?;
        let mut fw = BTreeMap::new();
        let mut pci = BTreeMap::new();
        let mut errors = BTreeMap::new();
        // A configuration's "version" of a NIC is the state of its knobs.
        let states = self
            .policy
            .configuration
            .as_ref()
            .map(|c| crate::config::states(&inv, &c.knobs));
        for d in &inv.rdma {
            let version = match &states {
                Some(s) => s.get(&d.name).cloned().flatten(),
                None => d.fw_ver.clone(),
            };
            fw.insert(d.name.clone(), version);
            if let Some(p) = &d.pci {
                pci.insert(p.clone(), d.name.clone());
            }
            for p in &d.ports {
                for c in SOAK_COUNTERS {
                    if let Some(v) = p.counters.get(*c) {
                        errors.insert(format!("{}/{}/{c}", d.name, p.port), *v);
                    }
                }
            }
        }
        if inv.hostname.is_empty() {
            inv.hostname = node.to_string();
        }
        let mut cluster = self.audit_template.clone();
        cluster.hosts = vec![inv];
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
            pci,
            errors,
            audit_errors,
            source: path.display().to_string(),
            ts_ns: now_ns(),
        })
    }

    fn started(&mut self, seq: i64) -> Option<bool> {
        // Valid because the executor holds the state lock: no command of an earlier,
        // killed executor is still running (it would hold the lock through its stdin).
        let dir = self.markers.as_ref()?;
        Some(dir.join(seq.to_string()).exists())
    }

    fn run_many(&mut self, jobs: &[Job]) -> Vec<Outcome> {
        // A configuration's script is read again before it is applied: edited (or
        // re-tuned) since the rollout started, it is not what the plan and its gates
        // expect, and nothing is applied.
        if let Some(c) = &self.policy.configuration
            && jobs.iter().any(|j| j.purpose == crate::exec::Purpose::Flash)
        {
            let dir = Path::new(&c.dir);
            // Patches are compared only when the rollout has some: a rollout started
            // without (`switches = false`, or before switch patches were rolled out)
            // applies none.
            let patches = if c.patches.is_empty() {
                Ok(Vec::new())
            } else {
                crate::config::load_switch_patches(dir)
            };
            let problem = match (crate::config::load_knobs(dir), patches) {
                (Ok(k), Ok(p)) if k == c.knobs && p == c.patches => None,
                (Ok(k), Ok(_)) if k == c.knobs => Some(format!(
                    "{}: its switch patches changed since the rollout started; nothing was applied (start a new rollout for the new configuration)",
                    c.dir
                )),
                (Ok(_), Ok(_)) => Some(format!(
                    "{}/{}: its KNOBS changed since the rollout started; nothing was applied (start a new rollout for the new configuration)",
                    c.dir,
                    crate::config::SCRIPT
                )),
                (Err(e), _) | (_, Err(e)) => Some(format!("{e}; nothing was applied")),
            };
            if let Some(p) = problem {
                return jobs
                    .iter()
                    .map(|_| Outcome {
                        code: Some(2),
                        output: p.clone(),
                    })
                    .collect();
            }
        }
        let prepared: Vec<(String, PathBuf)> = jobs.iter().map(|j| self.prepare(j)).collect();
        let (stdin, timeout, dir) = (self.stdin.as_ref(), self.timeout, self.inv.dir.as_path());
        std::thread::scope(|s| {
            let handles: Vec<_> = prepared
                .iter()
                .map(|(line, out)| s.spawn(move || run_shell(line, dir, stdin, out, timeout)))
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

    fn bench(
        &mut self,
        node: &str,
        phase: Phase,
        since_ms: Option<i64>,
    ) -> Result<(String, BenchFigure), String> {
        let b = self.policy.gates.benchmark.as_ref().ok_or("no benchmark gate")?;
        let template = match phase {
            Phase::Before => &b.baseline,
            Phase::After => &b.result,
        };
        let path = self.policy.path_for(template, node);
        let shown = path.display().to_string();
        if phase == Phase::After && path == self.policy.path_for(&b.baseline, node) {
            return Err(format!("{shown}: the result file is the baseline file"));
        }
        // A result is a file the benchmark wrote: never wait on a FIFO put in its place.
        let f = xirang_files::open_regular(&path).map_err(|e| e.to_string())?;
        if let Some(since) = since_ms {
            let mtime_ms = f
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as i64);
            if let Some(m) = mtime_ms
                && m + MTIME_SLACK_MS < since
            {
                return Err(format!(
                    "{shown}: written before the node was flashed ({} < {}): a stale result",
                    crate::exec::utc(m),
                    crate::exec::utc(since)
                ));
            }
        }
        let mut text = String::new();
        f.take(MAX_BENCH_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| format!("{shown}: {e}"))?;
        let fig = bench_figure(&text).map_err(|e| format!("{shown}: {e}"))?;
        Ok((shown, fig))
    }

    fn sleep_s(&mut self, s: f64) {
        std::thread::sleep(Duration::from_secs_f64(s.max(0.0)));
    }

    fn now_ms(&mut self) -> i64 {
        (now_ns() / 1_000_000) as i64
    }
}
