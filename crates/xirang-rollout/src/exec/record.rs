//! Recording to the audit log: every append goes through here (a step counted for the
//! crash tests' hook, the driver's time, the last sequence number this executor has
//! seen), a round's intents in one transaction, a halt with its failures' rollback
//! commands, the completion, and an operator's halt appended by another process. The
//! actors' names and the end of a command's output kept in the log are here too. It
//! decides nothing: its callers say what to record, before they act on it.

use crate::RolloutError;
use crate::event::{self, Detail, EventKind, HaltKind};
use crate::store::NewEvent;

use super::commands::rollback_commands;
use super::driver::Driver;
use super::executor::{Executor, Progress};
use super::state::{Failure, Halt};

pub(super) const EXECUTOR: &str = "executor";
pub(super) const OPERATOR: &str = "operator";
/// Output kept in the log per command.
pub(super) const LOG_OUTPUT_BYTES: usize = 2000;

pub(super) fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut i = s.len() - max;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    format!("...{}", &s[i..])
}

impl<'a, D: Driver> Executor<'a, D> {
    /// Counts a step; the crash tests' hook aborts here.
    pub(super) fn step(&mut self) {
        self.steps += 1;
        if self.opts.crash_before_step == Some(self.steps) {
            std::process::abort();
        }
    }

    pub(super) fn append(
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
    pub(super) fn complete(&mut self) -> Result<Progress, RolloutError> {
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
    pub(super) fn append_all(&mut self, events: &[NewEvent<'_>]) -> Result<Vec<i64>, RolloutError> {
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

    pub(super) fn halt(
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
    pub(super) fn operator_halt(&mut self) -> Result<Option<Halt>, RolloutError> {
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
}
