//! A wave's gates once it is applied: each node read before the soak, the soak (an
//! operator's halt looked for every second), each node's own gates from its readings
//! before and after (firmware, audit, the soak's error counters, the benchmark, its
//! command run and recorded when the policy has one), the live gates (`live_gates`), and
//! the verdict: a halt on the first failure, else the wave passed, and the rollout
//! completed after the last wave. It must not change a unit: no flash or rollback runs
//! here.

use std::collections::BTreeMap;

use crate::RolloutError;
use crate::event::{self, Detail, EventKind, HaltKind, Ran};
use crate::gates::{self, GateResult, Reading};
use crate::waves::{PlannedNode, Wave};

use super::commands::{command_for, node_values};
use super::driver::{Driver, Job, Phase, Purpose};
use super::executor::{Executor, Progress};
use super::record::{EXECUTOR, LOG_OUTPUT_BYTES, tail};
use super::state::{Failure, Halt, State};

/// How often the soak looks for an operator's halt, s.
const SOAK_CHECK_S: f64 = 1.0;

impl<'a, D: Driver> Executor<'a, D> {
    pub(super) fn evaluate_gates(&mut self, w: usize, wave: &Wave) -> Result<Progress, RolloutError> {
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
            (self.say)(&format!(
                "{}: gate {} {}: {}",
                n.name,
                r.gate,
                if r.passed { "passed" } else { "FAILED" },
                r.summary
            ));
            self.record_gate(w, &n.name, r, failures)?;
        }
        Ok(())
    }

    /// Records gate result `r` on node `node` of wave `w`; a failure joins `failures`.
    pub(super) fn record_gate(
        &mut self,
        w: usize,
        node: &str,
        r: GateResult,
        failures: &mut Vec<Failure>,
    ) -> Result<(), RolloutError> {
        if !r.passed {
            failures.push(Failure {
                node: node.to_string(),
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
            Some(node),
            None,
            Detail::Gate(r),
        )?;
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
    pub(super) fn soak(&mut self, w: usize, soak_s: f64) -> Result<Option<Halt>, RolloutError> {
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
}
