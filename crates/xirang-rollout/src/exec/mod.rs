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
//!
//! One file per stage of a wave or concern of the executor; the public items are
//! re-exported here, at the paths they always had, and this file holds nothing else.
//!
//! | file | owns |
//! |---|---|
//! | `executor` | `Executor` and its state machine: refusals, `advance`, a wave's stages in order, `halt_now`, `resume` |
//! | `state` | `State`, the fold of the log: each NIC's phase, each node's progress, the halt in force, the waves' status |
//! | `record` | appends to the log (the crash tests' step hook), halts, completion, an operator's halt |
//! | `precheck` | before a wave's first flash: interrupted flashes settled, nodes pre-checked |
//! | `apply` | the rounds of flash commands, intents recorded first |
//! | `evaluate` | the soak, each node's gates, the verdict |
//! | `live_gates` | the canaries against the control group on live metrics, soaking again while they cannot tell |
//! | `rollback` | what a rollback takes, and running it |
//! | `commands` | the policy's command templates filled for a unit |
//! | `driver` | the `Driver` trait, its jobs and outcomes, `NoDriver` |
//! | `report` | `preview` and `render_log`, which change nothing |

mod apply;
mod commands;
mod driver;
mod evaluate;
mod executor;
mod live_gates;
mod precheck;
mod record;
mod report;
mod rollback;
mod state;

pub use commands::{apply_template, rollback_commands, rollback_template, values};
pub use driver::{Driver, Job, NoDriver, Outcome, Phase, Purpose};
pub use executor::{ExecOptions, Executor, Progress};
pub use report::{preview, render_log};
pub use rollback::{RollbackTarget, rollback_targets};
pub use state::{Failure, Halt, NicPhase, NodeProgress, State, WaveStatus};
pub use xirang_telemetry::time::utc;
