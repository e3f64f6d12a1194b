//! The executor: runs a started rollout one wave at a time, records every step in the
//! audit log before acting on it, and stops at the first failed gate.
//!
//! Crash safety comes from the order of writes (the log is the only state):
//! - a round's `flash-intent`s are committed together before its commands run, and each
//!   outcome after. A NIC left with an intent and no outcome (the executor died in
//!   between) is never flashed again automatically: its firmware is read; if it shows the
//!   target the flash is recorded as recovered; if the driver can prove the command never
//!   started (a marker the command itself writes first is absent, and nothing of an
//!   earlier executor is still running) it is flashed now, once; otherwise the rollout
//!   halts until an operator says `resume --reflash NODE`;
//! - a wave is marked passed only after every node's gates are recorded as passed; a
//!   failed gate or pre-check recorded for the wave in progress halts it on resume,
//!   without a second evaluation (only an operator's `resume --recheck` re-evaluates);
//! - nodes are taken in plan order and a node's NICs in name order, so a resumed wave
//!   continues with what is not done, and nothing planned is skipped;
//! - a rollback is recorded (`rollback-started`) before its first command, and from then
//!   on the rollout never advances.
//!
//! An operator's `halt` is an append by another process; the executor looks for it
//! between rounds and during the soak.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::RolloutError;
use crate::event::{self, Detail, EventKind, FlashOutcome, HaltKind, Ran, Shown};
use crate::gates::{self, BenchFigure, GateResult, Reading};
use crate::live;
use crate::policy::{LiveGates, LiveMetric, fill};
use crate::store::{Event, Meta, NewEvent, Store};
use crate::waves::{NicUpgrade, PlannedNode, Wave};

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
    /// Exit status; `None` when it could not start, timed out or died of a signal (its
    /// effect is then unknown).
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
    /// Sequence number of its intent event (0 when it has none).
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
/// ([`crate::command::CommandDriver`]), or the synthetic fleet of [`crate::simulate`].
pub trait Driver {
    /// Reads a node now (firmware, error counters, audit findings).
    fn read(&mut self, node: &str) -> Result<Reading, String>;
    /// Runs several commands at once; outcomes in the same order. A job with an intent
    /// writes its start marker first (see [`Driver::started`]).
    fn run_many(&mut self, jobs: &[Job]) -> Vec<Outcome>;
    /// Whether the command of intent `seq` started: `Some(false)` only when it certainly
    /// never ran (no start marker, and nothing of an earlier executor still running).
    fn started(&mut self, _seq: i64) -> Option<bool> {
        None
    }
    /// The node's benchmark figure before or after the upgrade, with its source; an
    /// `After` result older than `since_ms` is refused (a stale file).
    fn bench(
        &mut self,
        node: &str,
        phase: Phase,
        since_ms: Option<i64>,
    ) -> Result<(String, BenchFigure), String>;
    /// One group's per-interval samples of a live metric over `[since_ms, until_ms]`,
    /// with the query as sent (the gate's evidence). By default, Prometheus's
    /// `query_range` at the policy's URL.
    fn live_samples(
        &mut self,
        gate: &LiveGates,
        metric: &LiveMetric,
        nodes: &[String],
        since_ms: i64,
        until_ms: i64,
    ) -> (String, Result<Vec<f64>, live::SeriesError>) {
        let q = live::fill_nodes(&metric.query, nodes);
        let r = live::query_range(&gate.prometheus, &q, since_ms, until_ms, gate.step_s);
        (q, r)
    }
    /// Waits (the soak window), in small steps.
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
    /// Already on the target when its node was pre-checked: never flashed by us.
    Preexisting,
    /// A flash was started and its outcome not recorded.
    Intent,
    /// Flashed (command succeeded, or the version shows the target after an interruption).
    Flashed,
    /// The flash command exited with an error.
    Failed,
    /// The flash's effect is unknown (timed out, killed, or interrupted with the NIC not
    /// on target): waits for an operator.
    Unknown,
    /// A rollback was started and its outcome not recorded.
    RollbackIntent,
    /// Back on its previous firmware (or found there).
    RolledBack,
    /// The rollback command failed or its effect is unknown.
    RollbackFailed,
}

/// One failure behind a halt: what failed, what was read, how to undo the node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Node.
    pub node: String,
    /// `firmware`, `audit`, `soak`, `benchmark`, `read`, `precheck`, `flash`.
    pub gate: String,
    /// One line.
    pub summary: String,
    /// What was read.
    pub evidence: Vec<String>,
    /// Commands that put the node's flashed NICs back.
    pub rollback: Vec<String>,
}

/// A halt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Halt {
    /// Why it halted.
    pub kind: HaltKind,
    /// Why, in one line.
    pub reason: String,
    /// Wave.
    pub wave: Option<usize>,
    /// Log sequence number of the halt.
    pub seq: i64,
    /// The failures, with evidence and rollback commands.
    pub failures: Vec<Failure>,
}

/// A node's progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeProgress {
    /// Pre-upgrade check passed.
    pub prechecked: bool,
    /// Per NIC.
    pub nics: BTreeMap<String, NicPhase>,
    /// Sequence number of each NIC's latest flash or rollback intent.
    pub intents: BTreeMap<String, i64>,
    /// Time of the node's latest recorded flash outcome.
    pub flashed_at_ms: Option<i64>,
    /// The latest gate results.
    pub gates: Vec<GateResult>,
}

/// The rollout's state: the fold of its log.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct State {
    /// `started` was recorded.
    pub started: bool,
    /// Waves whose gates all passed.
    pub passed: BTreeSet<usize>,
    /// The wave started and not passed.
    pub current: Option<usize>,
    /// The halt in force.
    pub halt: Option<Halt>,
    /// Per node that has any event.
    pub nodes: BTreeMap<String, NodeProgress>,
    /// A failed gate or pre-check is recorded for the current wave since it started or
    /// was rechecked.
    pub failure_recorded: Vec<Failure>,
    /// Every wave passed.
    pub completed: bool,
    /// A rollback was started: the rollout never advances again.
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
            match (e.kind, &e.detail) {
                (EventKind::Started, _) => s.started = true,
                (EventKind::WaveStarted, _) => {
                    s.current = e.wave;
                    s.failure_recorded.clear();
                }
                (EventKind::Precheck, Detail::Precheck(p)) => {
                    s.nodes.entry(node.clone()).or_default().prechecked = p.ok;
                    if !p.ok {
                        s.failure_recorded.push(Failure {
                            node: node.clone(),
                            gate: "precheck".into(),
                            summary: p.problems.join("; "),
                            evidence: p.evidence.clone(),
                            rollback: vec![],
                        });
                    }
                }
                (EventKind::AlreadyOnTarget, _) => set(&mut s, NicPhase::Preexisting),
                (EventKind::FlashIntent | EventKind::RollbackIntent, _) => {
                    let p = s.nodes.entry(node.clone()).or_default();
                    p.intents.insert(nic.clone(), e.seq);
                    if e.kind == EventKind::FlashIntent {
                        set(&mut s, NicPhase::Intent);
                    } else {
                        set(&mut s, NicPhase::RollbackIntent);
                    }
                }
                (EventKind::FlashDone | EventKind::FlashRecovered, _) => {
                    set(&mut s, NicPhase::Flashed);
                    s.nodes.entry(node.clone()).or_default().flashed_at_ms = Some(e.ts_ms);
                }
                (EventKind::FlashFailed, _) => set(&mut s, NicPhase::Failed),
                (EventKind::FlashUnknown, _) => set(&mut s, NicPhase::Unknown),
                (EventKind::FlashReset | EventKind::FlashNotStarted, _) => set(&mut s, NicPhase::Pending),
                (EventKind::Gate, Detail::Gate(g)) => {
                    if !g.passed {
                        s.failure_recorded.push(Failure {
                            node: node.clone(),
                            gate: g.gate.clone(),
                            summary: g.summary.clone(),
                            evidence: g.evidence.clone(),
                            rollback: vec![],
                        });
                    }
                    let p = s.nodes.entry(node.clone()).or_default();
                    p.gates.retain(|x| x.gate != g.gate);
                    p.gates.push(g.clone());
                }
                (EventKind::WavePassed, _) => {
                    if let Some(w) = e.wave {
                        s.passed.insert(w);
                    }
                    s.current = None;
                }
                (EventKind::Halted, Detail::Halted(h)) => {
                    s.halt = Some(Halt {
                        kind: h.kind,
                        reason: h.reason.clone(),
                        wave: e.wave,
                        seq: e.seq,
                        failures: h.evidence.clone(),
                    })
                }
                (EventKind::Resumed, Detail::Resumed(r)) => {
                    s.halt = None;
                    if r.recheck {
                        s.failure_recorded.clear();
                    }
                }
                (EventKind::Completed, _) => s.completed = true,
                (EventKind::RollbackStarted, _) => s.rolled_back = true,
                (
                    EventKind::RollbackDone | EventKind::RollbackRecovered | EventKind::RollbackNotNeeded,
                    _,
                ) => set(&mut s, NicPhase::RolledBack),
                (EventKind::RollbackFailed | EventKind::RollbackUnknown, _) => {
                    set(&mut s, NicPhase::RollbackFailed)
                }
                (EventKind::RollbackNotStarted, _) => set(&mut s, NicPhase::Flashed),
                // Events that change no state: what a soak or a benchmark ran.
                (EventKind::SoakStarted | EventKind::BenchmarkRun, _) => {}
                // The store reads every row in its kind's shape (Detail::parse), so a
                // kind with another kind's details cannot reach here.
                (EventKind::Precheck | EventKind::Gate | EventKind::Halted | EventKind::Resumed, _) => {
                    unreachable!("log row {}: {} read with details of another kind", e.seq, e.kind)
                }
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

    fn intent(&self, node: &str, nic: &str) -> Option<i64> {
        self.nodes.get(node).and_then(|p| p.intents.get(nic)).copied()
    }
}

/// A driver for operations that run nothing (start, halt).
pub struct NoDriver;

impl Driver for NoDriver {
    fn read(&mut self, _: &str) -> Result<Reading, String> {
        Err("no reads in this operation".into())
    }
    fn run_many(&mut self, jobs: &[Job]) -> Vec<Outcome> {
        jobs.iter()
            .map(|_| Outcome {
                code: None,
                output: "no commands in this operation".into(),
            })
            .collect()
    }
    fn bench(&mut self, _: &str, _: Phase, _: Option<i64>) -> Result<(String, BenchFigure), String> {
        Err("no benchmarks in this operation".into())
    }
    fn sleep_s(&mut self, _: f64) {}
    fn now_ms(&mut self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// One wave as `rollout status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaveStatus {
    /// Wave number.
    pub wave: usize,
    /// Its stage.
    pub stage: String,
    /// Nodes in it.
    pub nodes: usize,
    /// Nodes whose every NIC is flashed.
    pub flashed: usize,
    /// Nodes with a failed gate.
    pub failed: Vec<String>,
    /// `passed`, `in progress` or `pending`.
    pub state: &'static str,
}

impl State {
    /// Each planned wave's progress.
    pub fn waves(&self, meta: &Meta) -> Vec<WaveStatus> {
        meta.plan
            .waves
            .iter()
            .map(|w| WaveStatus {
                wave: w.number,
                stage: w.stage.clone(),
                nodes: w.nodes.len(),
                flashed: w
                    .nodes
                    .iter()
                    .filter(|n| {
                        n.nics
                            .iter()
                            .all(|u| self.nic(&n.name, &u.nic) == NicPhase::Flashed)
                    })
                    .count(),
                failed: w
                    .nodes
                    .iter()
                    .filter(|n| {
                        self.nodes
                            .get(&n.name)
                            .is_some_and(|p| p.gates.iter().any(|g| !g.passed))
                    })
                    .map(|n| n.name.clone())
                    .collect(),
                state: if self.passed.contains(&w.number) {
                    "passed"
                } else if self.current == Some(w.number) {
                    "in progress"
                } else {
                    "pending"
                },
            })
            .collect()
    }

    /// A failure holds the rollout: not an operator's halt, and not once it was rolled
    /// back (that is the end of it).
    pub fn failing(&self) -> bool {
        !self.rolled_back && self.halt.as_ref().is_some_and(|h| h.kind != HaltKind::Operator)
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
    /// The last log entry this executor knows of; anything later was appended by
    /// someone else (an operator's halt).
    last_seen: i64,
    say: Box<dyn FnMut(&str) + 'a>,
}

const EXECUTOR: &str = "executor";
const OPERATOR: &str = "operator";
/// Output kept in the log per command.
const LOG_OUTPUT_BYTES: usize = 2000;
/// How often the soak looks for an operator's halt, s.
const SOAK_CHECK_S: f64 = 1.0;

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

/// A number with four significant digits, as gate messages show it.
fn sig(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return format!("{v}");
    }
    let digits = 3 - v.abs().log10().floor() as i32;
    if (0..=6).contains(&digits) {
        format!("{v:.0$}", digits as usize)
    } else {
        format!("{v:.3e}")
    }
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
    v.insert("netdev", u.netdev.clone().unwrap_or_default());
    v.insert("dir", u.image.clone());
    if let Some(t) = &u.tier {
        v.insert("tier", t.clone());
        v.insert("patch", u.patch_file().unwrap_or_default());
    }
    v
}

/// Which live metrics judge a wave: a switch wave's units are switches.
fn wave_scope(wave: &Wave) -> crate::policy::Scope {
    if wave.nodes.iter().any(|n| n.nics.iter().any(|u| u.tier.is_some())) {
        crate::policy::Scope::Switches
    } else {
        crate::policy::Scope::Hosts
    }
}

/// The command that applies a unit: a NIC's flash, or a switch's patch.
pub fn apply_template<'p>(policy: &'p crate::policy::Policy, u: &NicUpgrade) -> &'p str {
    match (&u.tier, &policy.commands.switch_apply) {
        (Some(_), Some(t)) => t,
        // A plan with switch units is made only with the switch commands (the policy's
        // check); an empty template refuses to run.
        (Some(_), None) => "",
        (None, _) => &policy.commands.flash,
    }
}

/// The command that puts a unit back.
pub fn rollback_template<'p>(policy: &'p crate::policy::Policy, u: &NicUpgrade) -> &'p str {
    match (&u.tier, &policy.commands.switch_rollback) {
        (Some(_), Some(t)) => t,
        (Some(_), None) => "",
        (None, _) => &policy.commands.rollback,
    }
}

fn node_values(node: &str) -> BTreeMap<&'static str, String> {
    let mut v = BTreeMap::new();
    v.insert("node", node.to_string());
    v
}

/// A command filled for running: a value that cannot be one word of it (only a plan
/// made before values were checked against their grammar can hold one) refuses the step.
fn command_for(template: &str, v: &BTreeMap<&'static str, String>) -> Result<String, RolloutError> {
    if template.trim().is_empty() {
        return Err(RolloutError::Refused(format!(
            "{}: no command for this step in the policy",
            v.get("node").map_or("", String::as_str)
        )));
    }
    fill(template, v).map_err(|e| {
        RolloutError::Refused(format!(
            "{}: a value cannot be put in the command `{template}`: {e}",
            v.get("node").map_or("", String::as_str)
        ))
    })
}

/// A command filled for showing.
fn shown_command(template: &str, v: &BTreeMap<&'static str, String>) -> String {
    fill(template, v).unwrap_or_else(|e| format!("(cannot be run: {e})"))
}

/// The rollback command for every NIC of a node, as shown in a report.
pub fn rollback_commands(meta: &Meta, node: &PlannedNode) -> Vec<String> {
    node.nics
        .iter()
        .map(|u| shown_command(rollback_template(&meta.policy, u), &values(&node.name, u)))
        .collect()
}

/// What a rollback would do to one NIC.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RollbackTarget {
    /// Wave.
    pub wave: usize,
    /// Node.
    pub node: String,
    /// The planned upgrade.
    pub nic: NicUpgrade,
    /// Its phase now.
    pub phase: NicPhase,
    /// The command.
    pub command: String,
}

/// The NICs a rollback takes (every NIC we may have changed, latest wave first), for
/// `only` those nodes when given. A named node with nothing to roll back is an error.
pub fn rollback_targets(
    meta: &Meta,
    st: &State,
    only: &[String],
) -> Result<Vec<RollbackTarget>, RolloutError> {
    for name in only {
        if meta.plan.wave_of(name).is_none() {
            return Err(RolloutError::Refused(format!("--node {name}: not in the plan")));
        }
    }
    let mut out = Vec::new();
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for wave in meta.plan.waves.iter().rev() {
        for n in wave.nodes.iter().rev() {
            if !only.is_empty() && !only.contains(&n.name) {
                continue;
            }
            for u in &n.nics {
                let phase = st.nic(&n.name, &u.nic);
                if matches!(
                    phase,
                    NicPhase::Pending | NicPhase::Preexisting | NicPhase::RolledBack
                ) {
                    continue;
                }
                *per_node.entry(n.name.as_str()).or_insert(0) += 1;
                out.push(RollbackTarget {
                    wave: wave.number,
                    node: n.name.clone(),
                    nic: u.clone(),
                    phase,
                    command: command_for(rollback_template(&meta.policy, u), &values(&n.name, u))?,
                });
            }
        }
    }
    for name in only {
        if !per_node.contains_key(name.as_str()) {
            return Err(RolloutError::Refused(format!(
                "--node {name}: none of its NICs was flashed by this rollout (or all are back already)"
            )));
        }
    }
    Ok(out)
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
            last_seen: 0,
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

    /// Runs one command through the driver.
    fn run_one(&mut self, job: Job) -> Outcome {
        self.driver.run_many(&[job]).pop().unwrap_or(Outcome {
            code: None,
            output: "the driver returned no outcome".into(),
        })
    }

    /// Counts a step; the crash tests' hook aborts here.
    fn step(&mut self) {
        self.steps += 1;
        if self.opts.crash_before_step == Some(self.steps) {
            std::process::abort();
        }
    }

    fn append(
        &mut self,
        actor: &str,
        kind: EventKind,
        wave: Option<usize>,
        node: Option<&str>,
        nic: Option<&str>,
        detail: Detail,
    ) -> Result<i64, RolloutError> {
        self.step();
        let ts = self.driver.now_ms();
        let seq = self.store.append(
            ts,
            &NewEvent {
                actor,
                kind,
                wave,
                node,
                nic,
                detail,
            },
        )?;
        self.last_seen = self.last_seen.max(seq);
        Ok(seq)
    }

    /// Records that every wave passed.
    fn complete(&mut self) -> Result<Progress, RolloutError> {
        self.append(
            EXECUTOR,
            EventKind::Completed,
            None,
            None,
            None,
            Detail::None(event::Nothing {}),
        )?;
        Ok(Progress::Completed)
    }

    /// Appends several events in one transaction (a round's intents: all or none).
    fn append_all(&mut self, events: &[NewEvent<'_>]) -> Result<Vec<i64>, RolloutError> {
        self.step();
        let ts = self.driver.now_ms();
        let seqs = self.store.append_all(ts, events)?;
        if let Some(&last) = seqs.last() {
            self.last_seen = self.last_seen.max(last);
        }
        Ok(seqs)
    }

    fn with_rollback(&self, mut failures: Vec<Failure>) -> Vec<Failure> {
        for f in &mut failures {
            if let Some(n) = self
                .meta
                .plan
                .waves
                .iter()
                .flat_map(|w| &w.nodes)
                .find(|n| n.name == f.node)
            {
                f.rollback = rollback_commands(&self.meta, n);
            }
        }
        failures
    }

    fn halt(
        &mut self,
        kind: HaltKind,
        wave: usize,
        reason: String,
        failures: Vec<Failure>,
    ) -> Result<Progress, RolloutError> {
        (self.say)(&format!("HALT ({kind}): {reason}"));
        let failures = self.with_rollback(failures);
        let node = failures.first().map(|f| f.node.clone());
        let seq = self.append(
            EXECUTOR,
            EventKind::Halted,
            Some(wave),
            node.as_deref(),
            None,
            Detail::Halted(event::Halted {
                kind,
                reason: reason.clone(),
                evidence: failures.clone(),
            }),
        )?;
        Ok(Progress::Halted(Halt {
            kind,
            reason,
            wave: Some(wave),
            seq,
            failures,
        }))
    }

    /// An operator's halt appended since the executor last looked, if any (one cheap
    /// query when nothing was appended by anyone else).
    fn operator_halt(&mut self) -> Result<Option<Halt>, RolloutError> {
        let last = self.store.last_seq()?;
        if last <= self.last_seen {
            return Ok(None);
        }
        let since = self.last_seen;
        self.last_seen = last;
        Ok(self
            .store
            .events_since(since)?
            .into_iter()
            .find_map(|e| match e.detail {
                Detail::Halted(h) => Some(Halt {
                    kind: h.kind,
                    reason: h.reason,
                    wave: e.wave,
                    seq: e.seq,
                    failures: vec![],
                }),
                _ => None,
            }))
    }

    fn refuse_halted(h: &Halt) -> RolloutError {
        let what = match h.kind {
            HaltKind::Operator => "`resume` continues",
            HaltKind::Gate | HaltKind::Precheck => {
                "fix the node and `resume --recheck`, or `rollback` (`status` shows the evidence and the rollback commands)"
            }
            HaltKind::FlashUnknown | HaltKind::FlashFailed => {
                "check the NIC with the vendor tool, then `resume --recheck` (when it shows the target) or `resume --reflash NODE` (to flash it again)"
            }
            HaltKind::Unreadable => {
                "make the node readable (its host tree or snapshot), then `resume --recheck`"
            }
        };
        RolloutError::Refused(format!(
            "the rollout is halted ({}, log #{}): {}; {what}",
            h.kind, h.seq, h.reason
        ))
    }

    fn refuse_state(st: &State) -> Result<(), RolloutError> {
        if !st.started {
            return Err(RolloutError::Refused("the rollout is not started".into()));
        }
        if st.rolled_back {
            return Err(RolloutError::Refused(
                "this rollout was rolled back (or a rollback was started): plan and start a new one".into(),
            ));
        }
        Ok(())
    }

    /// Runs the next wave (or finishes the one in progress).
    pub fn advance(&mut self) -> Result<Progress, RolloutError> {
        let st = self.state()?;
        Self::refuse_state(&st)?;
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
                    return self.complete();
                };
                let wave = &self.meta.plan.waves[w - 1];
                let detail = Detail::WaveStarted(event::WaveStarted {
                    stage: wave.stage.clone(),
                    nodes: wave.nodes.iter().map(|n| n.name.clone()).collect(),
                });
                (self.say)(&format!(
                    "wave {w} ({}): {} node(s)",
                    wave.stage,
                    wave.nodes.len()
                ));
                self.append(EXECUTOR, EventKind::WaveStarted, Some(w), None, None, detail)?;
                w
            }
        };
        self.run_wave(w, st)
    }

    fn run_wave(&mut self, w: usize, st: State) -> Result<Progress, RolloutError> {
        let wave = self.meta.plan.waves[w - 1].clone();
        if !st.failure_recorded.is_empty() {
            let f = &st.failure_recorded[0];
            let reason = format!(
                "wave {w}: {} failed the {} check before the interruption: {}",
                f.node, f.gate, f.summary
            );
            return self.halt(HaltKind::Gate, w, reason, st.failure_recorded.clone());
        }
        self.last_seen = self.store.last_seq()?;
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

    /// Settles a node's interrupted or failed flashes (never flashing again unless the
    /// command provably never started), then pre-checks it when it has NICs to flash.
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
                    let f = Failure {
                        node: name.into(),
                        gate: "read".into(),
                        summary: format!("cannot read the node to settle an interrupted flash: {e}"),
                        ..Failure::default()
                    };
                    return self
                        .halt(HaltKind::Unreadable, w, format!("{name}: {}", f.summary), vec![f])
                        .map(Some);
                }
            };
            for u in unsettled {
                let shown = reading.fw_of(u).flatten();
                let ev = Detail::Shown(Shown {
                    fw_ver: shown.clone(),
                    target: Some(u.to.clone()),
                    source: Some(reading.source.clone()),
                    ..Shown::default()
                });
                if shown.as_deref() == Some(u.to.as_str()) {
                    (self.say)(&format!(
                        "{name}/{}: shows {} after the interruption: recorded as flashed, not flashed again",
                        u.nic, u.to
                    ));
                    self.append(
                        EXECUTOR,
                        EventKind::FlashRecovered,
                        Some(w),
                        Some(name),
                        Some(&u.nic),
                        ev,
                    )?;
                    continue;
                }
                let was = st.nic(name, &u.nic);
                if was == NicPhase::Intent
                    && shown.as_deref() == Some(u.from.as_str())
                    && st
                        .intent(name, &u.nic)
                        .is_some_and(|q| self.driver.started(q) == Some(false))
                {
                    (self.say)(&format!(
                        "{name}/{}: its flash command never started: it runs now",
                        u.nic
                    ));
                    self.append(
                        EXECUTOR,
                        EventKind::FlashNotStarted,
                        Some(w),
                        Some(name),
                        Some(&u.nic),
                        ev,
                    )?;
                    continue;
                }
                if was == NicPhase::Intent {
                    self.append(
                        EXECUTOR,
                        EventKind::FlashUnknown,
                        Some(w),
                        Some(name),
                        Some(&u.nic),
                        ev.clone(),
                    )?;
                }
                let kind = if was == NicPhase::Failed {
                    HaltKind::FlashFailed
                } else {
                    HaltKind::FlashUnknown
                };
                let f = Failure {
                    node: name.into(),
                    gate: "flash".into(),
                    summary: format!(
                        "{}: the flash did not complete and the NIC shows {} (from {}, target {}); not flashing it again without an operator",
                        u.nic,
                        reading.shown(u),
                        u.from,
                        u.to
                    ),
                    evidence: vec![format!(
                        "{}: {} fw_ver = {}",
                        reading.source,
                        u.nic,
                        reading.shown(u)
                    )],
                    ..Failure::default()
                };
                return self
                    .halt(kind, w, format!("{name}/{}", f.summary), vec![f])
                    .map(Some);
            }
        }
        let pending = node
            .nics
            .iter()
            .any(|u| st.nic(name, &u.nic) == NicPhase::Pending);
        let prechecked = st.nodes.get(name).is_some_and(|p| p.prechecked);
        if pending && !prechecked {
            return self.precheck(w, node, st);
        }
        Ok(None)
    }

    /// Before touching a node: it must read, show the versions the plan expects, be
    /// audit-clean, and have its benchmark baseline. NICs already on target are recorded
    /// and left alone.
    fn precheck(
        &mut self,
        w: usize,
        node: &PlannedNode,
        st: &State,
    ) -> Result<Option<Progress>, RolloutError> {
        let name = node.name.as_str();
        let mut problems = Vec::new();
        let mut evidence = Vec::new();
        let mut on_target = Vec::new();
        match self.driver.read(name) {
            Ok(r) => {
                for u in &node.nics {
                    if st.nic(name, &u.nic) != NicPhase::Pending {
                        continue;
                    }
                    let shown = r.shown(u);
                    evidence.push(format!("{}: {} fw_ver = {shown}", r.source, u.nic));
                    if shown == u.to {
                        on_target.push(u);
                    } else if shown != u.from {
                        problems.push(format!(
                            "{} shows {shown}, the plan expected {} (the inventory changed since the rollout started)",
                            u.nic, u.from
                        ));
                    }
                }
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
            match self.driver.bench(name, Phase::Before, None) {
                Ok((src, f)) => evidence.push(format!("{src}:{}: baseline {} = {}", f.line, f.what, f.value)),
                Err(e) => problems.push(format!("no benchmark baseline: {e}")),
            }
        }
        let ok = problems.is_empty();
        if ok {
            for u in on_target {
                self.append(
                    EXECUTOR,
                    EventKind::AlreadyOnTarget,
                    Some(w),
                    Some(name),
                    Some(&u.nic),
                    Detail::Shown(Shown {
                        fw_ver: Some(u.to.clone()),
                        ..Shown::default()
                    }),
                )?;
            }
        }
        self.append(
            EXECUTOR,
            EventKind::Precheck,
            Some(w),
            Some(name),
            None,
            Detail::Precheck(event::Precheck {
                ok,
                problems: problems.clone(),
                evidence: evidence.clone(),
            }),
        )?;
        if ok {
            return Ok(None);
        }
        let f = Failure {
            node: name.into(),
            gate: "precheck".into(),
            summary: problems.join("; "),
            evidence,
            ..Failure::default()
        };
        self.halt(
            HaltKind::Precheck,
            w,
            format!("{name} is not ready for the upgrade: {}", f.summary),
            vec![f],
        )
        .map(Some)
    }

    /// Flashes every pending NIC of the wave: in rounds of at most `commands.parallel`
    /// commands run together, each node's NICs one after another (one per round).
    fn flash_rounds(&mut self, w: usize, wave: &Wave) -> Result<Option<Progress>, RolloutError> {
        let parallel = self.meta.policy.commands.parallel.max(1);
        let st = self.state()?;
        let mut done: BTreeSet<(&str, &str)> = BTreeSet::new();
        let mut cursor = 0;
        loop {
            if let Some(h) = self.operator_halt()? {
                (self.say)(&format!("halted by the operator: {}", h.reason));
                return Ok(Some(Progress::Halted(h)));
            }
            // The next `parallel` nodes (in plan order, from the cursor, wrapping) with a
            // NIC still to flash, one NIC each.
            let mut jobs: Vec<(&PlannedNode, &NicUpgrade)> = Vec::new();
            let n = wave.nodes.len();
            for k in 0..n {
                if jobs.len() == parallel {
                    break;
                }
                let node = &wave.nodes[(cursor + k) % n];
                if let Some(u) = node.nics.iter().find(|u| {
                    st.nic(&node.name, &u.nic) == NicPhase::Pending
                        && !done.contains(&(node.name.as_str(), u.nic.as_str()))
                }) {
                    jobs.push((node, u));
                }
            }
            if jobs.is_empty() {
                return Ok(None);
            }
            cursor = (cursor + parallel) % n.max(1);
            let mut cmds = Vec::new();
            let mut intents = Vec::new();
            for (node, u) in &jobs {
                let cmd = command_for(apply_template(&self.meta.policy, u), &values(&node.name, u))?;
                (self.say)(&format!("{}/{}: {} → {}: {cmd}", node.name, u.nic, u.from, u.to));
                intents.push(NewEvent {
                    actor: EXECUTOR,
                    kind: EventKind::FlashIntent,
                    wave: Some(w),
                    node: Some(&node.name),
                    nic: Some(&u.nic),
                    detail: Detail::Intent(event::Intent {
                        command: cmd.clone(),
                        from: Some(u.from.clone()),
                        to: Some(u.to.clone()),
                    }),
                });
                cmds.push(Job {
                    node: node.name.clone(),
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
            let mut failures = Vec::new();
            let mut unknown = false;
            for ((node, u), out) in jobs.iter().zip(outs) {
                done.insert((node.name.as_str(), u.nic.as_str()));
                let ran = Ran {
                    command: None,
                    code: out.code,
                    output: tail(&out.output, LOG_OUTPUT_BYTES),
                };
                let (kind, detail) = match out.code {
                    Some(0) => (EventKind::FlashDone, Detail::Ran(ran)),
                    Some(_) => (EventKind::FlashFailed, Detail::Flash(FlashOutcome::Ran(ran))),
                    None => (EventKind::FlashUnknown, Detail::Flash(FlashOutcome::Ran(ran))),
                };
                self.append(EXECUTOR, kind, Some(w), Some(&node.name), Some(&u.nic), detail)?;
                if !out.ok() {
                    unknown |= out.code.is_none();
                    failures.push(Failure {
                        node: node.name.clone(),
                        gate: "flash".into(),
                        summary: format!(
                            "{}: the flash command {}",
                            u.nic,
                            match out.code {
                                Some(c) => format!("exited with {c}"),
                                None => "gave no exit status (timed out, killed or not started): its effect is unknown".into(),
                            }
                        ),
                        evidence: vec![tail(out.output.trim(), 500)],
                        ..Failure::default()
                    });
                }
            }
            if !failures.is_empty() {
                let kind = if unknown {
                    HaltKind::FlashUnknown
                } else {
                    HaltKind::FlashFailed
                };
                let reason = format!("wave {w}: {}/{}", failures[0].node, failures[0].summary);
                return self.halt(kind, w, reason, failures).map(Some);
            }
        }
    }

    fn evaluate_gates(&mut self, w: usize, wave: &Wave) -> Result<Progress, RolloutError> {
        let policy = self.meta.policy.clone();
        let mut before: BTreeMap<String, Result<Reading, String>> = BTreeMap::new();
        for n in &wave.nodes {
            before.insert(n.name.clone(), self.driver.read(&n.name));
        }
        let soak_from_ms = self.driver.now_ms();
        if policy.gates.soak_s > 0.0
            && let Some(h) = self.soak(w, policy.gates.soak_s)?
        {
            return Ok(Progress::Halted(h));
        }
        // The live window is the soak: it ends before the benchmarks run on the wave's
        // nodes (their traffic is not the applications', and the control has none).
        let soak_until_ms = self.driver.now_ms();
        let st = self.state()?;
        let mut failures = Vec::new();
        for n in &wave.nodes {
            let results = self.node_gates(w, n, &before[&n.name], &st, &policy)?;
            self.record_node_gates(w, n, results, &mut failures)?;
        }
        if let Some(l) = &policy.gates.live
            && failures.is_empty()
        {
            let results =
                match self.live_results(w, wave, l, policy.gates.soak_s, soak_from_ms, soak_until_ms)? {
                    Ok(results) => results,
                    Err(h) => return Ok(Progress::Halted(h)),
                };
            self.record_live_gates(w, wave, results, &mut failures)?;
        }
        self.gates_verdict(w, failures)
    }

    /// A node's own gates after its flash, from its reading before the soak and one now:
    /// its firmware, the audit, the soak's error counters, and the benchmark.
    fn node_gates(
        &mut self,
        w: usize,
        n: &PlannedNode,
        before: &Result<Reading, String>,
        st: &State,
        policy: &crate::policy::Policy,
    ) -> Result<Vec<GateResult>, RolloutError> {
        let mut results = Vec::new();
        let after = self.driver.read(&n.name);
        match (before, &after) {
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
            self.benchmark_gate(w, n, b, st, &mut results)?;
        }
        Ok(results)
    }

    /// The benchmark gate of a node: its command run and recorded, when the policy has
    /// one (a failed command is the gate's failure); otherwise the result file against
    /// the baseline.
    fn benchmark_gate(
        &mut self,
        w: usize,
        n: &PlannedNode,
        b: &crate::policy::BenchmarkGate,
        st: &State,
        results: &mut Vec<GateResult>,
    ) -> Result<(), RolloutError> {
        if let Some(c) = &b.command {
            let cmd = command_for(c, &node_values(&n.name))?;
            let out = self.run_one(Job {
                node: n.name.clone(),
                nic: None,
                purpose: Purpose::Benchmark,
                command: cmd.clone(),
                intent: 0,
            });
            self.append(
                EXECUTOR,
                EventKind::BenchmarkRun,
                Some(w),
                Some(&n.name),
                None,
                Detail::Ran(Ran {
                    command: Some(cmd.clone()),
                    code: out.code,
                    output: tail(&out.output, LOG_OUTPUT_BYTES),
                }),
            )?;
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
            let since_ms = st.nodes.get(&n.name).and_then(|p| p.flashed_at_ms);
            let base = self.driver.bench(&n.name, Phase::Before, None);
            let res = self.driver.bench(&n.name, Phase::After, since_ms);
            results.push(gates::benchmark(base, res, b.min_ratio));
        }
        Ok(())
    }

    /// Says and records each of a node's gate results; the failed ones join `failures`.
    fn record_node_gates(
        &mut self,
        w: usize,
        n: &PlannedNode,
        results: Vec<GateResult>,
        failures: &mut Vec<Failure>,
    ) -> Result<(), RolloutError> {
        for r in results {
            if !r.passed {
                failures.push(Failure {
                    node: n.name.clone(),
                    gate: r.gate.clone(),
                    summary: r.summary.clone(),
                    evidence: r.evidence.clone(),
                    rollback: vec![],
                });
            }
            (self.say)(&format!(
                "{}: gate {} {}: {}",
                n.name,
                r.gate,
                if r.passed { "passed" } else { "FAILED" },
                r.summary
            ));
            self.append(
                EXECUTOR,
                EventKind::Gate,
                Some(w),
                Some(&n.name),
                None,
                Detail::Gate(r),
            )?;
        }
        Ok(())
    }

    /// The wave's live gates over the soak window, soaking again (and widening the
    /// window) while they cannot tell yet and the policy allows more extensions. The
    /// inner `Err` is an operator's halt during such a soak.
    fn live_results(
        &mut self,
        w: usize,
        wave: &Wave,
        l: &LiveGates,
        soak_s: f64,
        soak_from_ms: i64,
        mut soak_until_ms: i64,
    ) -> Result<Result<Vec<GateResult>, Halt>, RolloutError> {
        let mut extensions = 0;
        loop {
            let (results, longer) = self.live_gates(l, wave, soak_from_ms, soak_until_ms);
            if longer && extensions < l.max_extensions {
                extensions += 1;
                (self.say)(&format!(
                    "wave {w}: live gates cannot tell yet; soaking again ({extensions} of {})",
                    l.max_extensions
                ));
                if let Some(h) = self.soak(w, soak_s)? {
                    return Ok(Err(h));
                }
                // The window grows by the new soak: samples add up.
                soak_until_ms = self.driver.now_ms();
                continue;
            }
            return Ok(Ok(results));
        }
    }

    /// Says and records the live gates' results. The result is the group's: it is
    /// recorded on each of the wave's nodes, as their own gates are, and a failure lists
    /// each, with how to undo it.
    fn record_live_gates(
        &mut self,
        w: usize,
        wave: &Wave,
        results: Vec<GateResult>,
        failures: &mut Vec<Failure>,
    ) -> Result<(), RolloutError> {
        for r in results {
            (self.say)(&format!(
                "wave {w}: gate {} {}: {}",
                r.gate,
                if r.passed { "passed" } else { "FAILED" },
                r.summary
            ));
            for n in &wave.nodes {
                if !r.passed {
                    failures.push(Failure {
                        node: n.name.clone(),
                        gate: r.gate.clone(),
                        summary: r.summary.clone(),
                        evidence: r.evidence.clone(),
                        rollback: vec![],
                    });
                }
                self.append(
                    EXECUTOR,
                    EventKind::Gate,
                    Some(w),
                    Some(&n.name),
                    None,
                    Detail::Gate(r.clone()),
                )?;
            }
        }
        Ok(())
    }

    /// The wave's outcome once its gates are recorded: a halt on the first failure,
    /// else the wave passed (and the rollout is complete after the last wave).
    fn gates_verdict(&mut self, w: usize, failures: Vec<Failure>) -> Result<Progress, RolloutError> {
        if !failures.is_empty() {
            let first = &failures[0];
            let reason = format!(
                "wave {w}: {} failed the {} gate: {}{}",
                first.node,
                first.gate,
                first.summary,
                if failures.len() > 1 {
                    format!(" (and {} more failure(s))", failures.len() - 1)
                } else {
                    String::new()
                }
            );
            return self.halt(HaltKind::Gate, w, reason, failures);
        }
        (self.say)(&format!("wave {w}: every gate passed"));
        self.append(
            EXECUTOR,
            EventKind::WavePassed,
            Some(w),
            None,
            None,
            Detail::None(event::Nothing {}),
        )?;
        if w == self.meta.plan.waves.len() {
            return self.complete();
        }
        Ok(Progress::WavePassed { wave: w })
    }

    /// Soaks `soak_s`, looking for an operator's halt between steps.
    fn soak(&mut self, w: usize, soak_s: f64) -> Result<Option<Halt>, RolloutError> {
        (self.say)(&format!("wave {w}: soaking {soak_s} s"));
        self.append(
            EXECUTOR,
            EventKind::SoakStarted,
            Some(w),
            None,
            None,
            Detail::Soak(event::Soak { soak_s }),
        )?;
        let mut left = soak_s;
        while left > 0.0 {
            let dt = left.min(SOAK_CHECK_S);
            self.driver.sleep_s(dt);
            left -= dt;
            if let Some(h) = self.operator_halt()? {
                (self.say)(&format!("halted by the operator during the soak: {}", h.reason));
                return Ok(Some(h));
            }
        }
        Ok(None)
    }

    /// The live gates of a wave over `[since_ms, until_ms]`, and whether any metric asks
    /// for a longer soak (its result then says "inconclusive" and fails: the caller soaks
    /// again while it may).
    fn live_gates(
        &mut self,
        l: &LiveGates,
        wave: &Wave,
        since_ms: i64,
        until_ms: i64,
    ) -> (Vec<GateResult>, bool) {
        let canaries: Vec<String> = wave.nodes.iter().map(|n| n.name.clone()).collect();
        let mut out = Vec::new();
        let mut longer = false;
        let mut failed = false;
        let scope = wave_scope(wave);
        for m in l.metrics.iter().filter(|m| m.scope == scope) {
            let gate = format!("live {}", m.name);
            if wave.control.is_empty() {
                out.push(GateResult {
                    gate,
                    passed: true,
                    summary: "not compared: no unchanged node shares a rack, switch or job with this wave (the last wave has none left)".into(),
                    evidence: vec![],
                });
                continue;
            }
            let (qa, a) = self.driver.live_samples(l, m, &canaries, since_ms, until_ms);
            let (qb, b) = self.driver.live_samples(l, m, &wave.control, since_ms, until_ms);
            let window = format!(
                "{} .. {} every {} s",
                xirang_telemetry::time::utc(since_ms),
                xirang_telemetry::time::utc(until_ms),
                l.step_s
            );
            let (a, b) = match (a, b) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => {
                    failed = true;
                    out.push(GateResult {
                        gate,
                        passed: false,
                        summary: format!("{e}"),
                        evidence: vec![
                            format!("prometheus {} canaries: {qa} ({window})", l.prometheus),
                            format!("prometheus {} control: {qb} ({window})", l.prometheus),
                        ],
                    });
                    continue;
                }
            };
            let r = live::compare_with(
                m.better,
                m.tolerance,
                m.absolute_tolerance,
                &a,
                &b,
                l.alpha,
                l.min_samples,
            );
            let evidence = vec![
                format!(
                    "prometheus {} canaries {}: {qa} ({window}): {} samples, median {}",
                    l.prometheus,
                    canaries.join(","),
                    a.len(),
                    sig(r.as_ref().map_or(f64::NAN, |c| c.canary_median))
                ),
                format!(
                    "prometheus {} control {}: {qb} ({window}): {} samples, median {}",
                    l.prometheus,
                    wave.control.join(","),
                    b.len(),
                    sig(r.as_ref().map_or(f64::NAN, |c| c.control_median))
                ),
            ];
            let sign = if m.better == live::Better::Lower { "+" } else { "-" };
            let margin = if m.absolute_tolerance > 0.0 {
                format!(
                    "{sign}{:.1} % {sign}{}",
                    m.tolerance * 100.0,
                    sig(m.absolute_tolerance)
                )
            } else {
                format!("{sign}{:.1} %", m.tolerance * 100.0)
            };
            let (passed, summary) = match r {
                Err(e) => {
                    failed = true;
                    (false, format!("{e}: the gate fails closed"))
                }
                Ok(c) => {
                    let medians = format!(
                        "canaries median {} ({} samples) against control {} ({})",
                        sig(c.canary_median),
                        c.canary_n,
                        sig(c.control_median),
                        c.control_n
                    );
                    match c.verdict {
                        live::Verdict::Pass => (
                            true,
                            format!(
                                "{medians}: no worse than the control {margin} (one-sided Mann-Whitney p = {} < {})",
                                sig(c.p_no_worse),
                                l.alpha
                            ),
                        ),
                        live::Verdict::Fail => {
                            failed = true;
                            (
                                false,
                                format!(
                                    "{medians}: worse than the control {margin} (one-sided Mann-Whitney p = {} < {})",
                                    sig(c.p_worse),
                                    l.alpha
                                ),
                            )
                        }
                        live::Verdict::Longer => {
                            longer = true;
                            (
                                false,
                                format!(
                                    "{medians}: inconclusive (p worse {}, p no worse {}, alpha {}{}): soak longer, or resume with --recheck",
                                    sig(c.p_worse),
                                    sig(c.p_no_worse),
                                    l.alpha,
                                    if c.canary_n.min(c.control_n) < l.min_samples {
                                        format!("; at least {} samples per group needed", l.min_samples)
                                    } else {
                                        String::new()
                                    }
                                ),
                            )
                        }
                    }
                }
            };
            out.push(GateResult {
                gate,
                passed,
                summary,
                evidence,
            });
        }
        // A metric that failed outright is not waited on for the others.
        (out, longer && !failed)
    }

    /// An operator's halt (needs no lock: the executor sees it between rounds).
    pub fn halt_now(&mut self, reason: &str) -> Result<(), RolloutError> {
        let st = self.state()?;
        Self::refuse_state(&st)?;
        if st.completed {
            return Err(RolloutError::Refused("the rollout is already completed".into()));
        }
        if let Some(h) = &st.halt {
            return Err(RolloutError::Refused(format!(
                "the rollout is already halted ({}): {}",
                h.kind, h.reason
            )));
        }
        self.append(
            OPERATOR,
            EventKind::Halted,
            st.current,
            None,
            None,
            Detail::Halted(event::Halted {
                kind: HaltKind::Operator,
                reason: reason.into(),
                evidence: vec![],
            }),
        )?;
        Ok(())
    }

    /// Resumes: lifts an operator's halt (or, with `recheck` / `reflash`, a failure
    /// halt) and continues the wave in progress.
    pub fn resume(&mut self, recheck: bool, reflash: &[String]) -> Result<Progress, RolloutError> {
        let st = self.state()?;
        Self::refuse_state(&st)?;
        let Some(h) = st.halt.clone() else {
            if st.current.is_some() {
                return self.advance();
            }
            return Err(RolloutError::Refused(
                "nothing to resume: the rollout is not halted and no wave was interrupted; `advance` runs the next wave".into(),
            ));
        };
        let w = h.wave.or(st.current);
        if h.kind != HaltKind::Operator && !recheck && reflash.is_empty() {
            return Err(Self::refuse_halted(&h));
        }
        // Validate every --reflash first, then record them together.
        let mut resets: Vec<(String, String, Option<String>)> = Vec::new();
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
                if !matches!(st.nic(node, &u.nic), NicPhase::Failed | NicPhase::Unknown) {
                    continue;
                }
                let shown = reading.fw_of(u).flatten();
                if shown.as_deref() == Some(u.to.as_str()) {
                    return Err(RolloutError::Refused(format!(
                        "--reflash {node}: {} already shows the target {}; use --recheck",
                        u.nic, u.to
                    )));
                }
                any = true;
                resets.push((node.clone(), u.nic.clone(), shown));
            }
            if !any {
                return Err(RolloutError::Refused(format!(
                    "--reflash {node}: no NIC of it has a failed or interrupted flash"
                )));
            }
        }
        let mut events: Vec<NewEvent<'_>> = resets
            .iter()
            .map(|(node, nic, shown)| NewEvent {
                actor: OPERATOR,
                kind: EventKind::FlashReset,
                wave: w,
                node: Some(node),
                nic: Some(nic),
                detail: Detail::Shown(Shown {
                    fw_ver: shown.clone(),
                    reason: Some("operator asked for another flash attempt".into()),
                    ..Shown::default()
                }),
            })
            .collect();
        events.push(NewEvent {
            actor: OPERATOR,
            kind: EventKind::Resumed,
            wave: w,
            node: None,
            nic: None,
            detail: Detail::Resumed(event::Resumed {
                after: h.kind,
                recheck: recheck || !reflash.is_empty(),
            }),
        });
        self.append_all(&events)?;
        let st = self.state()?;
        match st.current {
            Some(w) => {
                (self.say)(&format!("wave {w}: resuming"));
                self.run_wave(w, st)
            }
            None => self.advance(),
        }
    }

    /// Puts the NICs this rollout may have changed back on their previous firmware (all,
    /// or those of `only`), latest wave first. Recorded before the first command; the
    /// rollout never advances afterwards. Returns the NICs back on their previous
    /// version; NICs it could not settle are an error listing them.
    pub fn rollback(&mut self, only: &[String]) -> Result<usize, RolloutError> {
        let st = self.state()?;
        if !st.started {
            return Err(RolloutError::Refused("the rollout is not started".into()));
        }
        let targets = rollback_targets(&self.meta, &st, only)?;
        if targets.is_empty() {
            return Err(RolloutError::Refused(
                "nothing to roll back: no NIC was flashed by this rollout, or all are back".into(),
            ));
        }
        let nodes: BTreeSet<&str> = targets.iter().map(|t| t.node.as_str()).collect();
        self.append(
            OPERATOR,
            EventKind::RollbackStarted,
            st.current,
            None,
            None,
            Detail::RollbackStarted(event::RollbackStarted {
                nodes: nodes.iter().map(|n| n.to_string()).collect(),
                nics: targets.len(),
            }),
        )?;
        let mut back = 0;
        let mut problems = Vec::new();
        let mut readings: BTreeMap<String, Result<Reading, String>> = BTreeMap::new();
        for t in &targets {
            match self.roll_back_nic(t, &st, &mut readings)? {
                None => back += 1,
                Some(problem) => problems.push(problem),
            }
        }
        if problems.is_empty() {
            Ok(back)
        } else {
            Err(RolloutError::Refused(format!(
                "{back} NIC(s) back; not settled: {}; run `rollback --execute` again after checking them",
                problems.join("; ")
            )))
        }
    }

    /// One NIC of a rollback, judged by what its node reads (once per node, in
    /// `readings`): already on its previous version, an interrupted rollback settled or
    /// left for the operator, or on the target and run back. `None` when the NIC is back
    /// on its previous version, else the problem that leaves it unsettled.
    fn roll_back_nic(
        &mut self,
        t: &RollbackTarget,
        st: &State,
        readings: &mut BTreeMap<String, Result<Reading, String>>,
    ) -> Result<Option<String>, RolloutError> {
        let name = t.node.as_str();
        let u = &t.nic;
        if !readings.contains_key(name) {
            let r = self.driver.read(name);
            readings.insert(name.to_string(), r);
        }
        let shown = match &readings[name] {
            Ok(r) => r.fw_of(u).flatten(),
            Err(e) => {
                return Ok(Some(format!("{name}/{}: cannot read the node: {e}", u.nic)));
            }
        };
        let ev = Detail::Shown(Shown {
            fw_ver: shown.clone(),
            previous: Some(u.from.clone()),
            ..Shown::default()
        });
        if shown.as_deref() == Some(u.from.as_str()) {
            // Never changed, or an interrupted rollback that took effect.
            let kind = if t.phase == NicPhase::RollbackIntent {
                EventKind::RollbackRecovered
            } else {
                EventKind::RollbackNotNeeded
            };
            self.append(EXECUTOR, kind, Some(t.wave), Some(name), Some(&u.nic), ev)?;
            return Ok(None);
        }
        let never_started = st
            .intent(name, &u.nic)
            .is_some_and(|q| self.driver.started(q) == Some(false));
        if t.phase == NicPhase::RollbackIntent && never_started {
            self.append(
                EXECUTOR,
                EventKind::RollbackNotStarted,
                Some(t.wave),
                Some(name),
                Some(&u.nic),
                ev.clone(),
            )?;
        } else if t.phase == NicPhase::RollbackIntent {
            self.append(
                EXECUTOR,
                EventKind::RollbackUnknown,
                Some(t.wave),
                Some(name),
                Some(&u.nic),
                ev,
            )?;
            return Ok(Some(format!(
                "{name}/{}: an interrupted rollback left it on {}; check it with the vendor tool",
                u.nic,
                shown.as_deref().unwrap_or("no version")
            )));
        }
        if shown.as_deref() != Some(u.to.as_str()) {
            return Ok(Some(format!(
                "{name}/{}: shows {}, neither the target {} nor the previous {}; not touching it",
                u.nic,
                shown.as_deref().unwrap_or("no version"),
                u.to,
                u.from
            )));
        }
        self.run_rollback(t, readings)
    }

    /// Runs a NIC's rollback command, recorded first as an intent, and records its
    /// outcome: done only when the unit reads its previous version again. `None` when
    /// it does, else the problem.
    fn run_rollback(
        &mut self,
        t: &RollbackTarget,
        readings: &mut BTreeMap<String, Result<Reading, String>>,
    ) -> Result<Option<String>, RolloutError> {
        let name = t.node.as_str();
        let u = &t.nic;
        (self.say)(&format!("{name}/{}: back to {}: {}", u.nic, u.from, t.command));
        let seq = self.append(
            OPERATOR,
            EventKind::RollbackIntent,
            Some(t.wave),
            Some(name),
            Some(&u.nic),
            Detail::Intent(event::Intent {
                command: t.command.clone(),
                from: None,
                to: None,
            }),
        )?;
        self.step();
        let out = self.run_one(Job {
            node: name.into(),
            nic: Some(u.nic.clone()),
            purpose: Purpose::Rollback,
            command: t.command.clone(),
            intent: seq,
        });
        let detail = Detail::Ran(Ran {
            command: None,
            code: out.code,
            output: tail(&out.output, LOG_OUTPUT_BYTES),
        });
        // A rollback that exited 0 is done only when the unit reads its previous
        // version again (the knobs, the config_db, the firmware).
        let (now, check) = if out.ok() {
            let r = self.driver.read(name);
            let now = r.as_ref().ok().and_then(|r| r.fw_of(u).flatten());
            let check = match &r {
                Ok(_) => format!("reads {}", now.as_deref().unwrap_or("no version")),
                Err(e) => format!("cannot be read: {e}"),
            };
            // A failed read leaves the earlier one for the node's other units.
            if r.is_ok() {
                readings.insert(name.to_string(), r);
            }
            (now, check)
        } else {
            (None, String::new())
        };
        if out.ok() && now.as_deref() == Some(u.from.as_str()) {
            self.append(
                EXECUTOR,
                EventKind::RollbackDone,
                Some(t.wave),
                Some(name),
                Some(&u.nic),
                detail,
            )?;
            Ok(None)
        } else if out.ok() {
            self.append(
                EXECUTOR,
                EventKind::RollbackFailed,
                Some(t.wave),
                Some(name),
                Some(&u.nic),
                Detail::Ran(Ran {
                    command: None,
                    code: out.code,
                    output: tail(
                        &format!(
                            "{}\n[the command exited 0, but the unit {check}, not {}]",
                            out.output, u.from
                        ),
                        LOG_OUTPUT_BYTES,
                    ),
                }),
            )?;
            Ok(Some(format!(
                "{name}/{}: the rollback command exited 0, but the unit {check}, not the previous {}",
                u.nic, u.from
            )))
        } else {
            self.append(
                EXECUTOR,
                EventKind::RollbackFailed,
                Some(t.wave),
                Some(name),
                Some(&u.nic),
                detail,
            )?;
            Ok(Some(format!(
                "{name}/{}: the rollback command failed ({:?})",
                u.nic, out.code
            )))
        }
    }
}

/// What `advance` (or `resume`) would do now, without doing it: one line per step.
pub fn preview(meta: &Meta, st: &State) -> Vec<String> {
    let mut out = Vec::new();
    if st.rolled_back {
        out.push("this rollout was rolled back: `advance` refuses; plan and start a new one".into());
        return out;
    }
    if st.completed {
        out.push("the rollout is completed: nothing to do".into());
        return out;
    }
    if let Some(h) = &st.halt {
        out.push(format!(
            "halted ({}, log #{}): {}; `advance` refuses until it is resumed",
            h.kind, h.seq, h.reason
        ));
        return out;
    }
    if !st.failure_recorded.is_empty() {
        out.push("a failed check is recorded for the wave in progress: `advance` would halt".into());
        return out;
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
                    shown_command(apply_template(&meta.policy, u), &values(&n.name, u))
                )),
                NicPhase::Flashed => out.push(format!("  {}/{}: already flashed", n.name, u.nic)),
                NicPhase::Preexisting => out.push(format!("  {}/{}: was on target already", n.name, u.nic)),
                other => out.push(format!(
                    "  {}/{}: {other:?}: its firmware is read before anything else",
                    n.name, u.nic
                )),
            }
        }
    }
    let g = &meta.policy.gates;
    // A configuration's "firmware" gate is every knob reading its recommended value.
    let mut gates = vec![if meta.policy.configuration.is_some() {
        "configuration"
    } else {
        "firmware"
    }];
    if g.audit {
        gates.push("audit");
    }
    if g.soak_s > 0.0 {
        gates.push("soak");
    }
    if g.benchmark.is_some() {
        gates.push("benchmark");
    }
    let live;
    if let Some(l) = &g.live {
        live = format!(
            "live ({} against the control group: {})",
            l.metrics
                .iter()
                .filter(|m| m.scope == wave_scope(wave))
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if wave.control.is_empty() {
                "none left, not compared".to_string()
            } else {
                wave.control.join(", ")
            }
        );
        gates.push(&live);
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
            e.seq,
            e.actor,
            e.kind,
            e.detail.to_value()
        ));
    }
    s
}

pub use xirang_telemetry::time::utc;
