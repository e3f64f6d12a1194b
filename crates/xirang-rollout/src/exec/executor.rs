//! The executor and its state machine: `Executor` over a store and a driver, the refusals
//! of a rollout that is not started, was rolled back or is halted, `advance` (the next
//! wave started and recorded, or the one in progress continued) and a wave's stages in
//! their order (`run_wave`: a failure recorded before an interruption halts it, then
//! settle and pre-check, apply, gates), and the operator's `halt_now` and `resume`. The
//! stages live in their own files: this one sequences them and must not flash, judge a
//! gate or roll back itself.

use serde::Serialize;

use crate::RolloutError;
use crate::event::{self, Detail, EventKind, HaltKind, Shown};
use crate::store::{Meta, NewEvent, Store};

use super::driver::{Driver, Job, Outcome};
use super::record::{EXECUTOR, OPERATOR};
use super::state::{Halt, NicPhase, State};

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
    pub(super) store: &'a Store,
    pub(super) meta: Meta,
    pub(super) driver: D,
    pub(super) opts: ExecOptions,
    pub(super) steps: u64,
    /// The last log entry this executor knows of; anything later was appended by
    /// someone else (an operator's halt).
    pub(super) last_seen: i64,
    pub(super) say: Box<dyn FnMut(&str) + 'a>,
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
    pub(super) fn run_one(&mut self, job: Job) -> Outcome {
        self.driver.run_many(&[job]).pop().unwrap_or(Outcome {
            code: None,
            output: "the driver returned no outcome".into(),
        })
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
            // --recheck and --reflash act on a halt; without one they would be ignored
            // while the interrupted wave simply went on.
            if let Some(node) = reflash.first() {
                return Err(RolloutError::Refused(format!(
                    "--reflash {node}: the rollout is not halted, so there is no failed node to reflash; `resume` alone continues the interrupted wave"
                )));
            }
            if recheck {
                return Err(RolloutError::Refused(
                    "--recheck: the rollout is not halted, so there is no failed gate to check again; `resume` alone continues the interrupted wave".into(),
                ));
            }
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
}
