//! Applying the change to a wave: its pending NICs (or switches) flashed in rounds of at
//! most `commands.parallel` commands run together, each node's NICs one after another, an
//! operator's halt looked for between rounds. A round's intents are committed together
//! before its commands run, and each outcome after; a failed or unknown outcome halts the
//! wave. It must not run a command whose intent is not recorded, nor touch a NIC that is
//! not pending.

use std::collections::BTreeSet;

use crate::RolloutError;
use crate::event::{self, Detail, EventKind, FlashOutcome, HaltKind, Ran};
use crate::store::NewEvent;
use crate::waves::{NicUpgrade, PlannedNode, Wave};

use super::commands::{apply_template, command_for, values};
use super::driver::{Driver, Job, Purpose};
use super::executor::{Executor, Progress};
use super::record::{EXECUTOR, LOG_OUTPUT_BYTES, tail};
use super::state::{Failure, NicPhase};

impl<'a, D: Driver> Executor<'a, D> {
    /// Flashes every pending NIC of the wave: in rounds of at most `commands.parallel`
    /// commands run together, each node's NICs one after another (one per round).
    pub(super) fn flash_rounds(&mut self, w: usize, wave: &Wave) -> Result<Option<Progress>, RolloutError> {
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
}
