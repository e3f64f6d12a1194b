//! A rollout's state, the fold of its log (`State::from_events`; the log is the only
//! state): where each NIC stands (`NicPhase`), each node's progress, the halt in force
//! and the failures behind it, and each wave as `rollout status` shows it. It only folds
//! and reads events: it must not append to the log, call a driver or keep anything the
//! log does not say.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::event::{Detail, EventKind, HaltKind};
use crate::gates::GateResult;
use crate::store::{Event, Meta};

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

    pub(super) fn intent(&self, node: &str, nic: &str) -> Option<i64> {
        self.nodes.get(node).and_then(|p| p.intents.get(nic)).copied()
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
