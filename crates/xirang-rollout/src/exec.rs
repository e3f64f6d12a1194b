//! The executor: runs a started rollout one wave at a time, records every step in the
//! audit log before acting on it, and stops at the first failed gate.
//!
//! Crash safety comes from the order of writes (the log is the only state):
//! - a `flash-intent` is committed before the flash command runs, and its outcome after;
//!   a NIC left with an intent and no outcome (the executor died in between) is never
//!   flashed again automatically: its firmware is read, and if it shows the target
//!   the flash is recorded as recovered, otherwise the rollout halts until an operator
//!   says `resume --reflash NODE`;
//! - a wave is marked passed only after every node's gates are recorded as passed; a
//!   failed gate recorded for the wave in progress halts it on resume, without a
//!   second evaluation (only an operator's `resume --recheck` re-evaluates);
//! - nodes are taken in plan order and a node's NICs in name order, so a resumed wave
//!   continues with the first node not done, and no node is skipped.
//!
//! The flash command inherits the state lock as its standard input, so a resume waits
//! for a flash still running after its executor was killed.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Value, json};

use crate::RolloutError;
use crate::gates::{self, BenchFigure, GateResult, Reading};
use crate::plan::{NicUpgrade, PlannedNode, Wave};
use crate::policy::fill;
use crate::store::{Event, Meta, NewEvent, Store};

/// What a command is run for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Flash a NIC.
    Flash,
    /// Put a NIC back on its previous firmware.
    Rollback,
    /// Produce a benchmark result file.
    Benchmark,
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// Exit status; `None` when it could not start, timed out or died of a signal.
    pub code: Option<i32>,
    /// The end of its output (stdout and stderr).
    pub output: String,
}

impl Outcome {
    /// Exit status 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// One command of a round.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Node.
    pub node: String,
    /// NIC.
    pub nic: Option<String>,
    /// Why.
    pub purpose: Purpose,
    /// The filled command line.
    pub command: String,
    /// Sequence number of its `flash-intent` (0 when it has none).
    pub intent: i64,
}

/// Before or after the upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Baseline.
    Before,
    /// Result.
    After,
}

/// The world the executor acts on: real hosts through commands and inventory reads
/// ([`crate::exec::Driver`] implemented in the CLI's command driver), or the
/// synthetic fleet of [`crate::simulate`].
pub trait Driver {
    /// Reads a node now (firmware, error counters, audit findings).
    fn read(&mut self, node: &str) -> Result<Reading, String>;
    /// Runs a command for a node.
    fn run(&mut self, node: &str, nic: Option<&str>, purpose: Purpose, command: &str) -> Outcome;
    /// The node's benchmark figure before or after the upgrade, with its source.
    fn bench(&mut self, node: &str, phase: Phase) -> Result<(String, BenchFigure), String>;
    /// Whether the command of intent `seq` started (a marker the command itself
    /// writes before anything else): `Some(false)` only when it certainly never ran.
    fn started(&mut self, _seq: i64) -> Option<bool> {
        None
    }
    /// Runs several commands at once (one flash round); outcomes in the same order.
    /// The default runs them one after another.
    fn run_many(&mut self, jobs: &[Job]) -> Vec<Outcome> {
        jobs.iter()
            .map(|j| self.run(&j.node, j.nic.as_deref(), j.purpose, &j.command))
            .collect()
    }
    /// Waits (the soak window).
    fn sleep_s(&mut self, s: f64);
    /// Now, Unix milliseconds (or simulated).
    fn now_ms(&mut self) -> i64;
}

/// Where a NIC stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NicPhase {
    /// Not touched yet.
    Pending,
    /// A flash was started and its outcome not recorded.
    Intent,
    /// Flashed (command succeeded, or the version shows the target after an interruption).
    Flashed,
    /// The flash command failed.
    Failed,
    /// Interrupted and the version does not show the target: waits for an operator.
    Unknown,
    /// A rollback was started and its outcome not recorded.
    RollbackIntent,
    /// Back on its previous firmware.
    RolledBack,
    /// The rollback command failed.
    RollbackFailed,
}

/// A halt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Halt {
    /// `operator`, `gate`, `precheck`, `flash-failed`, `flash-unknown`, `unreadable`,
    /// `rollback`.
    pub kind: String,
    /// Why, with the evidence's summary.
    pub reason: String,
    /// Wave.
    pub wave: Option<usize>,
    /// Log sequence number of the halt.
    pub seq: i64,
}

/// A node's progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeProgress {
    /// Pre-upgrade check passed.
    pub prechecked: bool,
    /// Per NIC.
    pub nics: BTreeMap<String, NicPhase>,
    /// Flash commands started per NIC (intents).
    pub flash_attempts: BTreeMap<String, u32>,
    /// Sequence number of each NIC's latest flash intent.
    pub intents: BTreeMap<String, i64>,
    /// The latest gate results.
    pub gates: Vec<GateResult>,
}

/// The rollout's state: the fold of its log.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct State {
    /// `start` was recorded.
    pub started: bool,
    /// Waves whose gates all passed.
    pub passed: BTreeSet<usize>,
    /// The wave started and not passed.
    pub current: Option<usize>,
    /// The halt in force.
    pub halt: Option<Halt>,
    /// Per node that has any event.
    pub nodes: BTreeMap<String, NodeProgress>,
    /// A gate failure is recorded for the current wave since it started or was rechecked.
    pub gate_failed: bool,
    /// Every wave passed.
    pub completed: bool,
    /// A rollback was run (the rollout cannot advance any more).
    pub rolled_back: bool,
}

impl State {
    /// Folds the log.
    pub fn from_events(events: &[Event]) -> State {
        let mut s = State::default();
        for e in events {
            let node = e.node.clone().unwrap_or_default();
            let nic = e.nic.clone().unwrap_or_default();
            let set = |s: &mut State, p: NicPhase| {
                s.nodes
                    .entry(node.clone())
                    .or_default()
                    .nics
                    .insert(nic.clone(), p);
            };
            match e.kind.as_str() {
                "started" => s.started = true,
                "wave-started" => {
                    s.current = e.wave;
                    s.gate_failed = false;
                }
                "precheck" => {
                    s.nodes.entry(node.clone()).or_default().prechecked =
                        e.detail["ok"].as_bool() == Some(true)
                }
                "flash-intent" => {
                    set(&mut s, NicPhase::Intent);
                    s.nodes
                        .entry(node.clone())
                        .or_default()
                        .intents
                        .insert(nic.clone(), e.seq);
                    *s.nodes
                        .entry(node.clone())
                        .or_default()
                        .flash_attempts
                        .entry(nic.clone())
                        .or_insert(0) += 1;
                }
                "flash-done" | "flash-recovered" => set(&mut s, NicPhase::Flashed),
                "flash-failed" => set(&mut s, NicPhase::Failed),
                "flash-unknown" => set(&mut s, NicPhase::Unknown),
                "flash-reset" | "flash-not-started" => set(&mut s, NicPhase::Pending),
                "gate" => {
                    if let Ok(g) = serde_json::from_value::<GateResult>(e.detail.clone()) {
                        if !g.passed {
                            s.gate_failed = true;
                        }
                        let p = s.nodes.entry(node.clone()).or_default();
                        p.gates.retain(|x| x.gate != g.gate);
                        p.gates.push(g);
                    }
                }
                "wave-passed" => {
                    if let Some(w) = e.wave {
                        s.passed.insert(w);
                    }
                    s.current = None;
                }
                "halted" => {
                    s.halt = Some(Halt {
                        kind: e.detail["kind"].as_str().unwrap_or("operator").to_string(),
                        reason: e.detail["reason"].as_str().unwrap_or("").to_string(),
                        wave: e.wave,
                        seq: e.seq,
                    })
                }
                "resumed" => {
                    s.halt = None;
                    if e.detail["recheck"].as_bool() == Some(true) {
                        s.gate_failed = false;
                    }
                }
                "completed" => s.completed = true,
                "rollback-intent" => set(&mut s, NicPhase::RollbackIntent),
                "rollback-done" | "rollback-recovered" => set(&mut s, NicPhase::RolledBack),
                "rollback-failed" => set(&mut s, NicPhase::RollbackFailed),
                "rolled-back" => s.rolled_back = true,
                _ => {}
            }
        }
        s
    }

    /// A NIC's phase.
    pub fn nic(&self, node: &str, nic: &str) -> NicPhase {
        self.nodes
            .get(node)
            .and_then(|p| p.nics.get(nic))
            .copied()
            .unwrap_or(NicPhase::Pending)
    }
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Progress {
    /// A wave passed its gates.
    WavePassed {
        /// Wave.
        wave: usize,
    },
    /// The last wave passed.
    Completed,
    /// Halted.
    Halted(Halt),
}

/// Options of one executor call.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// Test hook for the crash tests: abort the process (as a kill -9 would stop it)
    /// right before its n-th step, 1-based; a step is a log append (or a batch of
    /// intents) or the start of a round of commands.
    pub crash_before_step: Option<u64>,
}

/// Runs operations on one rollout.
pub struct Executor<'a, D: Driver> {
    store: &'a Store,
    meta: Meta,
    driver: D,
    opts: ExecOptions,
    steps: u64,
    say: Box<dyn FnMut(&str) + 'a>,
}

const EXECUTOR: &str = "executor";
const OPERATOR: &str = "operator";

fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut i = s.len() - max;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    format!("...{}", &s[i..])
}

/// Template values for a NIC.
pub fn values(node: &str, u: &NicUpgrade) -> BTreeMap<&'static str, String> {
    let mut v = BTreeMap::new();
    v.insert("node", node.to_string());
    v.insert("nic", u.nic.clone());
    v.insert("pci", u.pci.clone().unwrap_or_default());
    v.insert("hca_type", u.hca_type.clone().unwrap_or_default());
    v.insert("board_id", u.board_id.clone().unwrap_or_default());
    v.insert("image", u.image.clone());
    v.insert("target", u.to.clone());
    v.insert("previous", u.from.clone());
    v
}

/// The command lines a wave would run, for dry runs.
pub fn wave_commands(meta: &Meta, wave: &Wave) -> Vec<String> {
    let mut out = Vec::new();
    for n in &wave.nodes {
        for u in &n.nics {
            out.push(fill(&meta.policy.commands.flash, &values(&n.name, u)));
        }
        if let Some(b) = &meta.policy.gates.benchmark
            && let Some(c) = &b.command
        {
            let mut v = BTreeMap::new();
            v.insert("node", n.name.clone());
            out.push(fill(c, &v));
        }
    }
    out
}

/// The rollback command for every NIC of a node.
pub fn rollback_commands(meta: &Meta, node: &PlannedNode) -> Vec<String> {
    node.nics
        .iter()
        .map(|u| fill(&meta.policy.commands.rollback, &values(&node.name, u)))
        .collect()
}

impl<'a, D: Driver> Executor<'a, D> {
    /// An executor over `store` (whose meta it reads) acting through `driver`; `say`
    /// receives one line per step for the operator.
    pub fn new(
        store: &'a Store,
        driver: D,
        opts: ExecOptions,
        say: impl FnMut(&str) + 'a,
    ) -> Result<Self, RolloutError> {
        let meta = store.meta()?;
        Ok(Executor {
            store,
            meta,
            driver,
            opts,
            steps: 0,
            say: Box::new(say),
        })
    }

    /// The driver (the simulation reads its fleet back).
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The state now.
    pub fn state(&self) -> Result<State, RolloutError> {
        Ok(State::from_events(&self.store.events()?))
    }

    fn append(
        &mut self,
        actor: &str,
        kind: &str,
        wave: Option<usize>,
        node: Option<&str>,
        nic: Option<&str>,
        detail: Value,
    ) -> Result<i64, RolloutError> {
        self.step();
        let ts = self.driver.now_ms();
        self.store.append(
            ts,
            &NewEvent {
                actor,
                kind,
                wave,
                node,
                nic,
                detail,
            },
        )
    }

    /// Counts a step; the crash tests' hook aborts here.
    fn step(&mut self) {
        self.steps += 1;
        if self.opts.crash_before_step == Some(self.steps) {
            std::process::abort();
        }
    }

    /// Appends several events in one transaction (a round's intents: all or none).
    fn append_all(&mut self, events: &[NewEvent<'_>]) -> Result<Vec<i64>, RolloutError> {
        self.step();
        let ts = self.driver.now_ms();
        self.store.append_all(ts, events)
    }

    fn halt(
        &mut self,
        kind: &str,
        wave: usize,
        node: Option<&str>,
        reason: String,
        extra: Value,
    ) -> Result<Progress, RolloutError> {
        (self.say)(&format!("HALT ({kind}): {reason}"));
        let seq = self.append(
            EXECUTOR,
            "halted",
            Some(wave),
            node,
            None,
            json!({"kind": kind, "reason": reason, "evidence": extra}),
        )?;
        Ok(Progress::Halted(Halt {
            kind: kind.into(),
            reason,
            wave: Some(wave),
            seq,
        }))
    }

    /// Records the start of the rollout (once).
    pub fn start(&mut self) -> Result<(), RolloutError> {
        if self.state()?.started {
            return Err(RolloutError::Refused("the rollout is already started".into()));
        }
        let p = &self.meta.plan;
        let detail = json!({
            "waves": p.waves.len(),
            "nodes": p.upgrade_count(),
            "skipped": p.skipped.len(),
            "policy": self.meta.policy_file,
            "inventory": self.meta.inventory,
        });
        self.append(OPERATOR, "started", None, None, None, detail)?;
        Ok(())
    }

    fn refuse_halted(h: &Halt) -> RolloutError {
        let what = match h.kind.as_str() {
            "operator" => "`resume` continues",
            "gate" | "precheck" => {
                "fix the node and `resume --recheck`, or `rollback` (see `status` for the evidence)"
            }
            "flash-unknown" | "flash-failed" => {
                "check the NIC with the vendor tool, then `resume --recheck` (the version now shows the target) or `resume --reflash NODE`"
            }
            _ => "see `status`",
        };
        RolloutError::Refused(format!(
            "the rollout is halted ({}, log #{}): {}; {what}",
            h.kind, h.seq, h.reason
        ))
    }

    /// Runs the next wave (or finishes the one in progress).
    pub fn advance(&mut self) -> Result<Progress, RolloutError> {
        let st = self.state()?;
        if !st.started {
            return Err(RolloutError::Refused("the rollout is not started".into()));
        }
        if st.rolled_back {
            return Err(RolloutError::Refused(
                "this rollout was rolled back: plan and start a new one".into(),
            ));
        }
        if st.completed {
            return Ok(Progress::Completed);
        }
        if let Some(h) = &st.halt {
            return Err(Self::refuse_halted(h));
        }
        let w = match st.current {
            Some(w) => {
                (self.say)(&format!("wave {w}: continuing after an interruption"));
                w
            }
            None => {
                let Some(w) = self
                    .meta
                    .plan
                    .waves
                    .iter()
                    .map(|w| w.number)
                    .find(|n| !st.passed.contains(n))
                else {
                    self.append(EXECUTOR, "completed", None, None, None, json!({}))?;
                    return Ok(Progress::Completed);
                };
                let wave = &self.meta.plan.waves[w - 1];
                let detail = json!({"stage": wave.stage, "nodes": wave.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>()});
                (self.say)(&format!(
                    "wave {w} ({}): {} node(s)",
                    wave.stage,
                    wave.nodes.len()
                ));
                self.append(EXECUTOR, "wave-started", Some(w), None, None, detail)?;
                w
            }
        };
        self.run_wave(w, st)
    }

    fn run_wave(&mut self, w: usize, st: State) -> Result<Progress, RolloutError> {
        let wave = self.meta.plan.waves[w - 1].clone();
        if st.gate_failed {
            let failed: Vec<String> = wave
                .nodes
                .iter()
                .flat_map(|n| {
                    st.nodes
                        .get(&n.name)
                        .map(|p| {
                            p.gates
                                .iter()
                                .filter(|g| !g.passed)
                                .map(|g| format!("{} {}: {}", n.name, g.gate, g.summary))
                                .collect::<Vec<_>>()
                        })
                        .unwrap_or_default()
                })
                .collect();
            return self.halt(
                "gate",
                w,
                None,
                format!(
                    "wave {w} has a failed gate recorded before the interruption: {}",
                    failed.join("; ")
                ),
                json!({}),
            );
        }
        // Settle interrupted flashes and pre-check every node before the first flash.
        for node in &wave.nodes {
            if let Some(p) = self.settle_and_precheck(w, node, &st)? {
                return Ok(p);
            }
        }
        if let Some(p) = self.flash_rounds(w, &wave)? {
            return Ok(p);
        }
        self.evaluate_gates(w, &wave)
    }

    /// Settles a node's interrupted or failed flashes (never flashing again), then
    /// pre-checks it when it has NICs still to flash.
    fn settle_and_precheck(
        &mut self,
        w: usize,
        node: &PlannedNode,
        st: &State,
    ) -> Result<Option<Progress>, RolloutError> {
        let name = node.name.as_str();
        let unsettled: Vec<&NicUpgrade> = node
            .nics
            .iter()
            .filter(|u| {
                matches!(
                    st.nic(name, &u.nic),
                    NicPhase::Intent | NicPhase::Failed | NicPhase::Unknown
                )
            })
            .collect();
        if !unsettled.is_empty() {
            let reading = match self.driver.read(name) {
                Ok(r) => r,
                Err(e) => {
                    return self
                        .halt(
                            "unreadable",
                            w,
                            Some(name),
                            format!("{name}: cannot read the node to settle an interrupted flash: {e}"),
                            json!({}),
                        )
                        .map(Some);
                }
            };
            for u in unsettled {
                let shown = reading.fw.get(&u.nic).cloned().flatten();
                let ev = json!({"fw_ver": shown, "target": u.to, "source": reading.source});
                if shown.as_deref() == Some(u.to.as_str()) {
                    (self.say)(&format!(
                        "{name}/{}: shows {} after the interruption: recorded as flashed, not flashed again",
                        u.nic, u.to
                    ));
                    self.append(EXECUTOR, "flash-recovered", Some(w), Some(name), Some(&u.nic), ev)?;
                } else {
                    let was = st.nic(name, &u.nic);
                    let seq = st.nodes.get(name).and_then(|p| p.intents.get(&u.nic)).copied();
                    if was == NicPhase::Intent && seq.is_some_and(|q| self.driver.started(q) == Some(false)) {
                        (self.say)(&format!(
                            "{name}/{}: its flash command never started (no start marker, nothing running): it runs now",
                            u.nic
                        ));
                        self.append(
                            EXECUTOR,
                            "flash-not-started",
                            Some(w),
                            Some(name),
                            Some(&u.nic),
                            ev,
                        )?;
                        continue;
                    }
                    if was != NicPhase::Unknown && was != NicPhase::Failed {
                        self.append(
                            EXECUTOR,
                            "flash-unknown",
                            Some(w),
                            Some(name),
                            Some(&u.nic),
                            ev.clone(),
                        )?;
                    }
                    let kind = if was == NicPhase::Failed {
                        "flash-failed"
                    } else {
                        "flash-unknown"
                    };
                    return self
                        .halt(
                            kind,
                            w,
                            Some(name),
                            format!(
                                "{name}/{}: the flash did not complete and the NIC shows {} (target {}); not flashing it again without an operator",
                                u.nic,
                                shown.as_deref().unwrap_or("no version"),
                                u.to
                            ),
                            ev,
                        )
                        .map(Some);
                }
            }
        }
        let pending = node
            .nics
            .iter()
            .any(|u| st.nic(name, &u.nic) == NicPhase::Pending);
        let prechecked = st.nodes.get(name).is_some_and(|p| p.prechecked);
        if pending && !prechecked {
            return self.precheck(w, name);
        }
        Ok(None)
    }

    /// Flashes every pending NIC of the wave: in rounds of at most `commands.parallel`
    /// commands run together, each node's NICs one after another (one per round).
    fn flash_rounds(&mut self, w: usize, wave: &Wave) -> Result<Option<Progress>, RolloutError> {
        let parallel = self.meta.policy.commands.parallel.max(1);
        let st = self.state()?;
        let mut done: BTreeSet<(String, String)> = BTreeSet::new();
        loop {
            let mut jobs: Vec<(&PlannedNode, &NicUpgrade)> = Vec::new();
            for n in &wave.nodes {
                if jobs.len() == parallel {
                    break;
                }
                if let Some(u) = n.nics.iter().find(|u| {
                    st.nic(&n.name, &u.nic) == NicPhase::Pending
                        && !done.contains(&(n.name.clone(), u.nic.clone()))
                }) {
                    jobs.push((n, u));
                }
            }
            if jobs.is_empty() {
                return Ok(None);
            }
            let mut cmds = Vec::new();
            let mut intents = Vec::new();
            for (n, u) in &jobs {
                let cmd = fill(&self.meta.policy.commands.flash, &values(&n.name, u));
                (self.say)(&format!("{}/{}: {} → {}: {cmd}", n.name, u.nic, u.from, u.to));
                intents.push(NewEvent {
                    actor: EXECUTOR,
                    kind: "flash-intent",
                    wave: Some(w),
                    node: Some(&n.name),
                    nic: Some(&u.nic),
                    detail: json!({"command": cmd, "from": u.from, "to": u.to}),
                });
                cmds.push(Job {
                    node: n.name.clone(),
                    nic: Some(u.nic.clone()),
                    purpose: Purpose::Flash,
                    command: cmd,
                    intent: 0,
                });
            }
            let seqs = self.append_all(&intents)?;
            for (j, seq) in cmds.iter_mut().zip(seqs) {
                j.intent = seq;
            }
            self.step();
            let outs = self.driver.run_many(&cmds);
            let mut first_failure = None;
            for ((n, u), out) in jobs.iter().zip(outs) {
                done.insert((n.name.clone(), u.nic.clone()));
                let detail = json!({"code": out.code, "output": tail(&out.output, 2000)});
                if out.ok() {
                    self.append(
                        EXECUTOR,
                        "flash-done",
                        Some(w),
                        Some(&n.name),
                        Some(&u.nic),
                        detail,
                    )?;
                } else {
                    self.append(
                        EXECUTOR,
                        "flash-failed",
                        Some(w),
                        Some(&n.name),
                        Some(&u.nic),
                        detail.clone(),
                    )?;
                    first_failure.get_or_insert((n.name.clone(), u.nic.clone(), out, detail));
                }
            }
            if let Some((name, nic, out, detail)) = first_failure {
                return self
                    .halt(
                        "flash-failed",
                        w,
                        Some(&name),
                        format!(
                            "{name}/{nic}: the flash command exited with {}: {}",
                            out.code
                                .map(|c| c.to_string())
                                .unwrap_or_else(|| "no status (signal, timeout or not started)".into()),
                            tail(out.output.trim(), 300)
                        ),
                        detail,
                    )
                    .map(Some);
            }
        }
    }

    /// Before touching a node: it must read, be audit-clean, and have its baseline.
    fn precheck(&mut self, w: usize, name: &str) -> Result<Option<Progress>, RolloutError> {
        let mut problems = Vec::new();
        let mut evidence = Vec::new();
        match self.driver.read(name) {
            Ok(r) => {
                if self.meta.policy.gates.audit && !r.audit_errors.is_empty() {
                    problems.push(format!(
                        "the audit finds {} error(s) before the upgrade (the gate could not tell them from the firmware's)",
                        r.audit_errors.len()
                    ));
                    evidence.extend(r.audit_errors.clone());
                }
            }
            Err(e) => problems.push(format!("cannot read the node: {e}")),
        }
        if self.meta.policy.gates.benchmark.is_some() {
            match self.driver.bench(name, Phase::Before) {
                Ok((src, f)) => evidence.push(format!("{src}:{}: baseline {} = {}", f.line, f.what, f.value)),
                Err(e) => problems.push(format!("no benchmark baseline: {e}")),
            }
        }
        let ok = problems.is_empty();
        self.append(
            EXECUTOR,
            "precheck",
            Some(w),
            Some(name),
            None,
            json!({"ok": ok, "problems": problems, "evidence": evidence}),
        )?;
        if ok {
            return Ok(None);
        }
        self.halt(
            "precheck",
            w,
            Some(name),
            format!("{name} is not ready for the upgrade: {}", problems.join("; ")),
            json!({"evidence": evidence}),
        )
        .map(Some)
    }

    fn evaluate_gates(&mut self, w: usize, wave: &Wave) -> Result<Progress, RolloutError> {
        let policy = self.meta.policy.clone();
        let mut before: BTreeMap<String, Result<Reading, String>> = BTreeMap::new();
        for n in &wave.nodes {
            before.insert(n.name.clone(), self.driver.read(&n.name));
        }
        if policy.gates.soak_s > 0.0 {
            (self.say)(&format!("wave {w}: soaking {} s", policy.gates.soak_s));
            self.driver.sleep_s(policy.gates.soak_s);
        }
        let mut failures = Vec::new();
        for n in &wave.nodes {
            let mut results = Vec::new();
            let after = self.driver.read(&n.name);
            match (&before[&n.name], &after) {
                (Ok(b), Ok(a)) => {
                    results.push(gates::firmware(n, a));
                    if policy.gates.audit {
                        results.push(gates::audit(a));
                    }
                    if policy.gates.soak_s > 0.0 {
                        results.push(gates::soak(
                            b,
                            a,
                            policy.gates.max_error_increase,
                            policy.gates.soak_s,
                        ));
                    }
                }
                (Err(e), _) | (_, Err(e)) => results.push(GateResult {
                    gate: "read".into(),
                    passed: false,
                    summary: format!("cannot read the node: {e}"),
                    evidence: vec![],
                }),
            }
            if let Some(b) = &policy.gates.benchmark {
                if let Some(c) = &b.command {
                    let mut v = BTreeMap::new();
                    v.insert("node", n.name.clone());
                    let cmd = fill(c, &v);
                    let out = self.driver.run(&n.name, None, Purpose::Benchmark, &cmd);
                    if !out.ok() {
                        results.push(GateResult {
                            gate: "benchmark".into(),
                            passed: false,
                            summary: format!("benchmark command failed ({:?}): {cmd}", out.code),
                            evidence: vec![tail(out.output.trim(), 500)],
                        });
                    }
                }
                if !results.iter().any(|r| r.gate == "benchmark") {
                    let base = self.driver.bench(&n.name, Phase::Before);
                    let res = self.driver.bench(&n.name, Phase::After);
                    results.push(gates::benchmark(base, res, b.min_ratio));
                }
            }
            for r in results {
                if !r.passed {
                    failures.push((n.clone(), r.clone()));
                }
                (self.say)(&format!(
                    "{}: gate {} {}: {}",
                    n.name,
                    r.gate,
                    if r.passed { "passed" } else { "FAILED" },
                    r.summary
                ));
                let detail = serde_json::to_value(&r).unwrap_or(Value::Null);
                self.append(EXECUTOR, "gate", Some(w), Some(&n.name), None, detail)?;
            }
        }
        if !failures.is_empty() {
            let (node, first) = &failures[0];
            let rollback = rollback_commands(&self.meta, node);
            let reason = format!(
                "wave {w}: {} failed the {} gate: {}{}",
                node.name,
                first.gate,
                first.summary,
                if failures.len() > 1 {
                    format!(" (and {} more failure(s))", failures.len() - 1)
                } else {
                    String::new()
                }
            );
            let evidence: Vec<Value> = failures
                .iter()
                .map(|(n, g)| json!({"node": n.name, "gate": g.gate, "summary": g.summary, "evidence": g.evidence, "rollback": rollback_commands(&self.meta, n)}))
                .collect();
            let _ = rollback;
            return self.halt("gate", w, Some(&node.name), reason, Value::Array(evidence));
        }
        (self.say)(&format!("wave {w}: every gate passed"));
        self.append(EXECUTOR, "wave-passed", Some(w), None, None, json!({}))?;
        if w == self.meta.plan.waves.len() {
            self.append(EXECUTOR, "completed", None, None, None, json!({}))?;
            return Ok(Progress::Completed);
        }
        Ok(Progress::WavePassed { wave: w })
    }

    /// An operator's halt.
    pub fn halt_now(&mut self, reason: &str) -> Result<(), RolloutError> {
        let st = self.state()?;
        if st.completed {
            return Err(RolloutError::Refused("the rollout is already completed".into()));
        }
        if let Some(h) = &st.halt {
            return Err(RolloutError::Refused(format!(
                "the rollout is already halted ({}): {}",
                h.kind, h.reason
            )));
        }
        let w = st.current;
        self.append(
            OPERATOR,
            "halted",
            w,
            None,
            None,
            json!({"kind": "operator", "reason": reason}),
        )?;
        Ok(())
    }

    /// Resumes: lifts an operator's halt (or, with `recheck` / `reflash`, a failure
    /// halt) and continues the wave in progress.
    pub fn resume(&mut self, recheck: bool, reflash: &[String]) -> Result<Progress, RolloutError> {
        let st = self.state()?;
        if st.rolled_back {
            return Err(RolloutError::Refused(
                "this rollout was rolled back: plan and start a new one".into(),
            ));
        }
        let Some(h) = st.halt.clone() else {
            if st.current.is_some() {
                return self.advance();
            }
            return Err(RolloutError::Refused(
                "nothing to resume: the rollout is not halted and no wave was interrupted; `advance` runs the next wave".into(),
            ));
        };
        let w = h.wave.or(st.current);
        if h.kind != "operator" && !recheck && reflash.is_empty() {
            return Err(Self::refuse_halted(&h));
        }
        for node in reflash {
            let Some(wave) = w.map(|w| &self.meta.plan.waves[w - 1]) else {
                return Err(RolloutError::Refused("no wave in progress".into()));
            };
            let Some(pn) = wave.nodes.iter().find(|n| &n.name == node).cloned() else {
                return Err(RolloutError::Refused(format!(
                    "--reflash {node}: not in the wave in progress"
                )));
            };
            let reading = self
                .driver
                .read(node)
                .map_err(|e| RolloutError::Refused(format!("--reflash {node}: cannot read it: {e}")))?;
            let mut any = false;
            for u in &pn.nics {
                let ph = st.nic(node, &u.nic);
                if !matches!(ph, NicPhase::Failed | NicPhase::Unknown) {
                    continue;
                }
                let shown = reading.fw.get(&u.nic).cloned().flatten();
                if shown.as_deref() == Some(u.to.as_str()) {
                    return Err(RolloutError::Refused(format!(
                        "--reflash {node}: {} already shows the target {}; use --recheck",
                        u.nic, u.to
                    )));
                }
                any = true;
                self.append(
                    OPERATOR,
                    "flash-reset",
                    w,
                    Some(node),
                    Some(&u.nic),
                    json!({"fw_ver": shown, "reason": "operator asked for another flash attempt"}),
                )?;
            }
            if !any {
                return Err(RolloutError::Refused(format!(
                    "--reflash {node}: no NIC of it has a failed or interrupted flash"
                )));
            }
        }
        self.append(
            OPERATOR,
            "resumed",
            w,
            None,
            None,
            json!({"after": h.kind, "recheck": recheck || !reflash.is_empty()}),
        )?;
        let st = self.state()?;
        match st.current {
            Some(w) => {
                (self.say)(&format!("wave {w}: resuming"));
                self.run_wave(w, st)
            }
            None => self.advance(),
        }
    }

    /// Puts flashed NICs back on their previous firmware (all, or those of `only`),
    /// latest wave first. The rollout cannot advance afterwards.
    pub fn rollback(&mut self, only: &[String]) -> Result<usize, RolloutError> {
        let st = self.state()?;
        let mut todo: Vec<(usize, PlannedNode, NicUpgrade)> = Vec::new();
        for wave in self.meta.plan.waves.iter().rev() {
            for n in wave.nodes.iter().rev() {
                if !only.is_empty() && !only.contains(&n.name) {
                    continue;
                }
                for u in &n.nics {
                    if matches!(
                        st.nic(&n.name, &u.nic),
                        NicPhase::Flashed | NicPhase::RollbackIntent | NicPhase::RollbackFailed
                    ) {
                        todo.push((wave.number, n.clone(), u.clone()));
                    }
                }
            }
        }
        for name in only {
            if self.meta.plan.wave_of(name).is_none() {
                return Err(RolloutError::Refused(format!("--node {name}: not in the plan")));
            }
        }
        if st.halt.is_none() && !st.completed && st.started && !st.rolled_back {
            self.append(
                OPERATOR,
                "halted",
                st.current,
                None,
                None,
                json!({"kind": "rollback", "reason": "rollback requested"}),
            )?;
        }
        let mut done = 0;
        for (w, n, u) in todo {
            let name = n.name.as_str();
            if st.nic(name, &u.nic) == NicPhase::RollbackIntent {
                let r = self.driver.read(name).map_err(|e| {
                    RolloutError::Refused(format!(
                        "{name}: cannot read it to settle an interrupted rollback: {e}"
                    ))
                })?;
                let shown = r.fw.get(&u.nic).cloned().flatten();
                if shown.as_deref() == Some(u.from.as_str()) {
                    self.append(
                        EXECUTOR,
                        "rollback-recovered",
                        Some(w),
                        Some(name),
                        Some(&u.nic),
                        json!({"fw_ver": shown}),
                    )?;
                    done += 1;
                    continue;
                }
                return Err(RolloutError::Refused(format!(
                    "{name}/{}: an interrupted rollback left it on {}; check it with the vendor tool",
                    u.nic,
                    shown.as_deref().unwrap_or("no version")
                )));
            }
            let cmd = fill(&self.meta.policy.commands.rollback, &values(name, &u));
            (self.say)(&format!("{name}/{}: back to {}: {cmd}", u.nic, u.from));
            self.append(
                OPERATOR,
                "rollback-intent",
                Some(w),
                Some(name),
                Some(&u.nic),
                json!({"command": cmd}),
            )?;
            let out = self.driver.run(name, Some(&u.nic), Purpose::Rollback, &cmd);
            let detail = json!({"code": out.code, "output": tail(&out.output, 2000)});
            if out.ok() {
                self.append(
                    EXECUTOR,
                    "rollback-done",
                    Some(w),
                    Some(name),
                    Some(&u.nic),
                    detail,
                )?;
                done += 1;
            } else {
                self.append(
                    EXECUTOR,
                    "rollback-failed",
                    Some(w),
                    Some(name),
                    Some(&u.nic),
                    detail,
                )?;
                return Err(RolloutError::Refused(format!(
                    "{name}/{}: the rollback command failed ({:?}); the rest was not rolled back",
                    u.nic, out.code
                )));
            }
        }
        self.append(
            OPERATOR,
            "rolled-back",
            st.current,
            None,
            None,
            json!({"nics": done}),
        )?;
        Ok(done)
    }
}

/// The audit log as text: one line per event (`#seq time actor kind wave node/nic:
/// detail`); `with_time` false leaves the time out (golden files).
pub fn render_log(events: &[Event], with_time: bool) -> String {
    let mut s = String::new();
    for e in events {
        let when = if with_time {
            format!("{} ", utc(e.ts_ms))
        } else {
            String::new()
        };
        let what = match (&e.node, &e.nic) {
            (Some(n), Some(c)) => format!(" {n}/{c}"),
            (Some(n), None) => format!(" {n}"),
            _ => String::new(),
        };
        let wave = e.wave.map(|w| format!(" w{w}")).unwrap_or_default();
        s.push_str(&format!(
            "#{:<4} {when}{:<8} {:<16}{wave}{what}: {}\n",
            e.seq, e.actor, e.kind, e.detail
        ));
    }
    s
}

/// What `advance` (or `resume`) would do now, without doing it: one line per step.
pub fn preview(meta: &Meta, st: &State) -> Vec<String> {
    let mut out = Vec::new();
    if st.completed {
        out.push("the rollout is completed: nothing to do".into());
        return out;
    }
    if let Some(h) = &st.halt {
        out.push(format!("halted ({}): {}", h.kind, h.reason));
    }
    let next = st.current.or_else(|| {
        meta.plan
            .waves
            .iter()
            .map(|w| w.number)
            .find(|n| !st.passed.contains(n))
    });
    let Some(w) = next else {
        out.push("every wave passed: the next step records completion".into());
        return out;
    };
    let wave = &meta.plan.waves[w - 1];
    out.push(format!(
        "wave {w} ({}){}: {} node(s)",
        wave.stage,
        if st.current.is_some() { ", in progress" } else { "" },
        wave.nodes.len()
    ));
    for n in &wave.nodes {
        for u in &n.nics {
            match st.nic(&n.name, &u.nic) {
                NicPhase::Pending => out.push(format!(
                    "  would run: {}",
                    fill(&meta.policy.commands.flash, &values(&n.name, u))
                )),
                NicPhase::Flashed => out.push(format!("  {}/{}: already flashed", n.name, u.nic)),
                other => out.push(format!(
                    "  {}/{}: {:?}: its firmware is read before anything else",
                    n.name, u.nic, other
                )),
            }
        }
    }
    let g = &meta.policy.gates;
    let mut gates = vec!["firmware"];
    if g.audit {
        gates.push("audit");
    }
    if g.soak_s > 0.0 {
        gates.push("soak");
    }
    if g.benchmark.is_some() {
        gates.push("benchmark");
    }
    out.push(format!(
        "  then gates on every node: {}{}",
        gates.join(", "),
        if g.soak_s > 0.0 {
            format!(" (soak {} s)", g.soak_s)
        } else {
            String::new()
        }
    ));
    out.push("dry run: nothing was run or recorded; add --execute".into());
    out
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (proleptic Gregorian, UTC).
pub fn utc(ms: i64) -> String {
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_767_225_600_000), "2026-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc(1_796_131_153_157), "2026-12-01T13:19:13.157Z");
    }
}
