//! The vocabulary of the rollout's append-only log: every kind of event it holds, and
//! the details each kind carries, as types.
//!
//! The rollout's state is the fold of its log ([`crate::exec::State`]), and its crash
//! safety rests on that fold: an interrupted flash is found from its `flash-intent`
//! without an outcome, a halt from `halted`. So the log is read strictly. A row whose
//! kind is not one of [`EventKind`], or whose details do not have that kind's shape, is
//! refused with its sequence number; nothing in it is skipped or guessed.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::gates::GateResult;

/// What happened. The names are those stored in the log's `kind` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// The rollout was recorded (`rollout start`).
    Started,
    /// A wave's first step.
    WaveStarted,
    /// A node's pre-upgrade check.
    Precheck,
    /// A NIC already showed the target version: nothing to flash.
    AlreadyOnTarget,
    /// A flash command is about to run (appended before it starts).
    FlashIntent,
    /// The flash command exited 0.
    FlashDone,
    /// The flash command failed, or an interrupted flash left the NIC on neither version.
    FlashFailed,
    /// The flash's outcome is unknown (timeout, kill, an interrupted intent).
    FlashUnknown,
    /// An interrupted flash that took effect: the NIC shows the target.
    FlashRecovered,
    /// An interrupted flash whose command never started: it runs again.
    FlashNotStarted,
    /// An operator asked for another flash attempt (`resume --reflash`).
    FlashReset,
    /// A wave's soak began.
    SoakStarted,
    /// A benchmark command ran for the benchmark gate.
    BenchmarkRun,
    /// One gate's result for one node.
    Gate,
    /// Every gate of the wave passed.
    WavePassed,
    /// Every wave passed.
    Completed,
    /// The rollout stopped (a failure, or the operator).
    Halted,
    /// The halt was lifted.
    Resumed,
    /// An operator started a rollback: the rollout never advances again.
    RollbackStarted,
    /// A rollback command is about to run.
    RollbackIntent,
    /// The rollback command exited 0.
    RollbackDone,
    /// The rollback command failed.
    RollbackFailed,
    /// An interrupted rollback left the NIC on a version that is neither.
    RollbackUnknown,
    /// An interrupted rollback that took effect.
    RollbackRecovered,
    /// The NIC was never changed: nothing to roll back.
    RollbackNotNeeded,
    /// An interrupted rollback whose command never started.
    RollbackNotStarted,
}

impl EventKind {
    /// Every kind, in the order of the log's life.
    pub const ALL: [EventKind; 26] = [
        EventKind::Started,
        EventKind::WaveStarted,
        EventKind::Precheck,
        EventKind::AlreadyOnTarget,
        EventKind::FlashIntent,
        EventKind::FlashDone,
        EventKind::FlashFailed,
        EventKind::FlashUnknown,
        EventKind::FlashRecovered,
        EventKind::FlashNotStarted,
        EventKind::FlashReset,
        EventKind::SoakStarted,
        EventKind::BenchmarkRun,
        EventKind::Gate,
        EventKind::WavePassed,
        EventKind::Completed,
        EventKind::Halted,
        EventKind::Resumed,
        EventKind::RollbackStarted,
        EventKind::RollbackIntent,
        EventKind::RollbackDone,
        EventKind::RollbackFailed,
        EventKind::RollbackUnknown,
        EventKind::RollbackRecovered,
        EventKind::RollbackNotNeeded,
        EventKind::RollbackNotStarted,
    ];

    /// The name stored in the log.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Started => "started",
            EventKind::WaveStarted => "wave-started",
            EventKind::Precheck => "precheck",
            EventKind::AlreadyOnTarget => "already-on-target",
            EventKind::FlashIntent => "flash-intent",
            EventKind::FlashDone => "flash-done",
            EventKind::FlashFailed => "flash-failed",
            EventKind::FlashUnknown => "flash-unknown",
            EventKind::FlashRecovered => "flash-recovered",
            EventKind::FlashNotStarted => "flash-not-started",
            EventKind::FlashReset => "flash-reset",
            EventKind::SoakStarted => "soak-started",
            EventKind::BenchmarkRun => "benchmark-run",
            EventKind::Gate => "gate",
            EventKind::WavePassed => "wave-passed",
            EventKind::Completed => "completed",
            EventKind::Halted => "halted",
            EventKind::Resumed => "resumed",
            EventKind::RollbackStarted => "rollback-started",
            EventKind::RollbackIntent => "rollback-intent",
            EventKind::RollbackDone => "rollback-done",
            EventKind::RollbackFailed => "rollback-failed",
            EventKind::RollbackUnknown => "rollback-unknown",
            EventKind::RollbackRecovered => "rollback-recovered",
            EventKind::RollbackNotNeeded => "rollback-not-needed",
            EventKind::RollbackNotStarted => "rollback-not-started",
        }
    }

    /// The kind a stored name spells, if any.
    pub fn parse(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Why a rollout halted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HaltKind {
    /// `xirang rollout halt`.
    Operator,
    /// A gate failed after a wave.
    Gate,
    /// A node failed its pre-upgrade check.
    Precheck,
    /// A flash command failed.
    FlashFailed,
    /// A flash's outcome is unknown.
    FlashUnknown,
    /// A node could not be read to settle an interrupted flash.
    Unreadable,
}

impl HaltKind {
    /// The name stored in the log and printed.
    pub fn name(self) -> &'static str {
        match self {
            HaltKind::Operator => "operator",
            HaltKind::Gate => "gate",
            HaltKind::Precheck => "precheck",
            HaltKind::FlashFailed => "flash-failed",
            HaltKind::FlashUnknown => "flash-unknown",
            HaltKind::Unreadable => "unreadable",
        }
    }
}

impl fmt::Display for HaltKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// What `started` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartedDetail {
    /// The rollout's id (also in its start-marker directory).
    pub id: String,
    /// Waves planned.
    pub waves: usize,
    /// Nodes to upgrade.
    pub nodes: usize,
    /// Nodes skipped by the plan.
    pub skipped: usize,
    /// Policy file.
    pub policy: String,
    /// Inventory directory.
    pub inventory: String,
}

/// A NIC's firmware as read, when settling or rolling back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shown {
    /// The version the NIC shows (none: it shows none).
    pub fw_ver: Option<String>,
    /// The rollout's target version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The version before the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// Where the version was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Why it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A command that ran: its exit status and the tail of its output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ran {
    /// The command line (for benchmark runs; intents carry it for flashes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Exit status (none: killed, timed out or never reaped).
    pub code: Option<i32>,
    /// The end of its output.
    pub output: String,
}

/// A flash's failure or unknown outcome: from the command itself, or found when an
/// interrupted flash was settled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FlashOutcome {
    /// The command's own result.
    Ran(Ran),
    /// What the NIC showed when the interruption was settled.
    Shown(Shown),
}

/// What `wave-started` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaveStarted {
    /// The wave's stage name.
    pub stage: String,
    /// Its nodes.
    pub nodes: Vec<String>,
}

/// What `precheck` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Precheck {
    /// The node may be flashed.
    pub ok: bool,
    /// What stops it.
    pub problems: Vec<String>,
    /// What was read.
    pub evidence: Vec<String>,
}

/// What `flash-intent` and `rollback-intent` record: the command about to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Intent {
    /// The command.
    pub command: String,
    /// Version before (flashes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Version after (flashes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// What `soak-started` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Soak {
    /// The soak's length, s.
    pub soak_s: f64,
}

/// What `halted` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Halted {
    /// Why.
    pub kind: HaltKind,
    /// One line.
    pub reason: String,
    /// The failures behind it (none for an operator's halt).
    #[serde(default)]
    pub evidence: Vec<crate::exec::Failure>,
}

/// What `resumed` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resumed {
    /// The halt lifted.
    pub after: HaltKind,
    /// Failures recorded before are forgotten (`--recheck`, `--reflash`).
    pub recheck: bool,
}

/// What `rollback-started` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackStarted {
    /// Nodes to roll back.
    pub nodes: Vec<String>,
    /// NICs to roll back.
    pub nics: usize,
}

/// What `wave-passed` and `completed` record: nothing more than the kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nothing {}

/// The details of one event, typed by its kind ([`Detail::parse`] says which shape each
/// kind has). Serialized as the bare details object, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Detail {
    /// `started`.
    Started(StartedDetail),
    /// `wave-started`.
    WaveStarted(WaveStarted),
    /// `precheck`.
    Precheck(Precheck),
    /// `already-on-target`, `flash-recovered`, `flash-not-started`, `flash-reset` and
    /// the rollback's settlements.
    Shown(Shown),
    /// `flash-intent`, `rollback-intent`.
    Intent(Intent),
    /// `flash-done`, `rollback-done`, `rollback-failed`, `benchmark-run`.
    Ran(Ran),
    /// `flash-failed`, `flash-unknown`.
    Flash(FlashOutcome),
    /// `soak-started`.
    Soak(Soak),
    /// `gate`.
    Gate(GateResult),
    /// `halted`.
    Halted(Halted),
    /// `resumed`.
    Resumed(Resumed),
    /// `rollback-started`.
    RollbackStarted(RollbackStarted),
    /// `wave-passed`, `completed`.
    None(Nothing),
}

impl Detail {
    /// Reads a stored details object as the shape of `kind`; the error says what was
    /// expected.
    pub fn parse(kind: EventKind, v: &Value) -> Result<Detail, String> {
        fn shape<T: serde::de::DeserializeOwned>(kind: EventKind, v: &Value) -> Result<T, String> {
            T::deserialize(v).map_err(|e| format!("details of `{kind}` do not have its shape: {e}"))
        }
        Ok(match kind {
            EventKind::Started => Detail::Started(shape(kind, v)?),
            EventKind::WaveStarted => Detail::WaveStarted(shape(kind, v)?),
            EventKind::Precheck => Detail::Precheck(shape(kind, v)?),
            EventKind::AlreadyOnTarget
            | EventKind::FlashRecovered
            | EventKind::FlashNotStarted
            | EventKind::FlashReset
            | EventKind::RollbackUnknown
            | EventKind::RollbackRecovered
            | EventKind::RollbackNotNeeded
            | EventKind::RollbackNotStarted => Detail::Shown(shape(kind, v)?),
            EventKind::FlashIntent | EventKind::RollbackIntent => Detail::Intent(shape(kind, v)?),
            EventKind::FlashDone
            | EventKind::RollbackDone
            | EventKind::RollbackFailed
            | EventKind::BenchmarkRun => Detail::Ran(shape(kind, v)?),
            EventKind::FlashFailed | EventKind::FlashUnknown => Detail::Flash(shape(kind, v)?),
            EventKind::SoakStarted => Detail::Soak(shape(kind, v)?),
            EventKind::Gate => Detail::Gate(shape(kind, v)?),
            EventKind::Halted => Detail::Halted(shape(kind, v)?),
            EventKind::Resumed => Detail::Resumed(shape(kind, v)?),
            EventKind::RollbackStarted => Detail::RollbackStarted(shape(kind, v)?),
            EventKind::WavePassed | EventKind::Completed => Detail::None(shape(kind, v)?),
        })
    }

    /// The details as stored.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_round_trips_its_name() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.name()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.name()));
        }
        assert_eq!(EventKind::parse("flash-maybe"), None);
    }

    #[test]
    fn details_are_read_in_their_kinds_shape_and_nothing_else() {
        let d = Detail::parse(
            EventKind::Halted,
            &json!({"kind": "gate", "reason": "r", "evidence": []}),
        )
        .unwrap();
        assert!(matches!(
            d,
            Detail::Halted(Halted {
                kind: HaltKind::Gate,
                ..
            })
        ));
        // Stored again, it reads back the same.
        assert_eq!(Detail::parse(EventKind::Halted, &d.to_value()).unwrap(), d);
        let e = Detail::parse(EventKind::Halted, &json!({"reason": "r"})).unwrap_err();
        assert!(e.contains("`halted`") && e.contains("kind"), "{e}");
        let e = Detail::parse(EventKind::Halted, &json!({"kind": "coffee", "reason": "r"})).unwrap_err();
        assert!(e.contains("coffee"), "{e}");
        let e = Detail::parse(EventKind::Completed, &json!({"extra": 1})).unwrap_err();
        assert!(e.contains("extra"), "{e}");
        // A flash failure from the command, or from settling an interruption.
        assert!(matches!(
            Detail::parse(EventKind::FlashFailed, &json!({"code": 1, "output": "x"})).unwrap(),
            Detail::Flash(FlashOutcome::Ran(_))
        ));
        assert!(matches!(
            Detail::parse(
                EventKind::FlashUnknown,
                &json!({"fw_ver": null, "target": "22.39", "source": "h1"})
            )
            .unwrap(),
            Detail::Flash(FlashOutcome::Shown(_))
        ));
    }
}
