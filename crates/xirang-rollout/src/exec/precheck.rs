//! A wave's nodes before its first flash, in plan order: what an interrupted or failed
//! flash left is settled from what the NIC reads (recorded as flashed when it shows the
//! target, put back to pending when the driver proves its command never started, so that
//! `apply` runs it once, else a halt for the operator), then a node with NICs to flash is
//! pre-checked (it reads, shows the versions the plan expects, is audit-clean, has its
//! benchmark baseline). It must not run a flash: a NIC whose flash may have started is
//! never flashed again without an operator.

use crate::RolloutError;
use crate::event::{self, Detail, EventKind, HaltKind, Shown};
use crate::waves::{NicUpgrade, PlannedNode};

use super::driver::{Driver, Phase};
use super::executor::{Executor, Progress};
use super::record::EXECUTOR;
use super::state::{Failure, NicPhase, State};

impl<'a, D: Driver> Executor<'a, D> {
    /// Settles a node's interrupted or failed flashes (never flashing again unless the
    /// command provably never started), then pre-checks it when it has NICs to flash.
    pub(super) fn settle_and_precheck(
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
}
