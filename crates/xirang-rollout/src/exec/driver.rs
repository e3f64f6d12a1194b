//! The world the executor acts on: the `Driver` trait (read a node, run a round of
//! commands, whether an intent's command started, benchmark figures, live samples, sleep,
//! time), the commands it is given (`Job`, `Purpose`, `Phase`) and how they ended
//! (`Outcome`), and `NoDriver` for the operations that run nothing. It owns no rollout
//! state and must not touch the log: a driver acts and reports, the executor decides and
//! records.

use serde::Serialize;

use crate::gates::{BenchFigure, Reading};
use crate::live;
use crate::policy::{LiveGates, LiveMetric};

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
