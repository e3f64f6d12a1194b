//! Rolling back: the NICs a rollback takes (every one this rollout may have changed,
//! latest wave first, or those of the named nodes), and the operator's `rollback`,
//! recorded (`rollback-started`) before its first command: each NIC judged by what its
//! node reads (already back, an interrupted rollback settled or left to the operator, or
//! on the target and run back), its command recorded as an intent first and done only
//! when the unit reads its previous version again. It must not advance the rollout, nor
//! touch a unit that reads neither the target nor its previous version.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::RolloutError;
use crate::event::{self, Detail, EventKind, Ran, Shown};
use crate::gates::Reading;
use crate::store::Meta;
use crate::waves::NicUpgrade;

use super::commands::{command_for, rollback_template, values};
use super::driver::{Driver, Job, Purpose};
use super::executor::Executor;
use super::record::{EXECUTOR, LOG_OUTPUT_BYTES, OPERATOR, tail};
use super::state::{NicPhase, State};

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
