//! The live gates of a wave: its canaries against its control group on each live metric
//! of the wave's scope (hosts, or switches for a switch wave) over the soak window, the
//! soak repeated (the window widened) while the test cannot tell and the policy allows,
//! each result recorded on every node of the wave. A metric that cannot be read fails
//! closed. It must not decide the wave: its results join the node gates in `evaluate`'s
//! verdict.

use crate::RolloutError;
use crate::gates::GateResult;
use crate::live;
use crate::policy::LiveGates;
use crate::waves::Wave;

use super::driver::Driver;
use super::executor::Executor;
use super::state::{Failure, Halt};

/// A number with four significant digits, as gate messages show it.
fn sig(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return format!("{v}");
    }
    let digits = 3 - v.abs().log10().floor() as i32;
    if (0..=6).contains(&digits) {
        format!("{v:.0$}", digits as usize)
    } else {
        format!("{v:.3e}")
    }
}

/// Which live metrics judge a wave: a switch wave's units are switches.
pub(super) fn wave_scope(wave: &Wave) -> crate::policy::Scope {
    if wave.nodes.iter().any(|n| n.nics.iter().any(|u| u.tier.is_some())) {
        crate::policy::Scope::Switches
    } else {
        crate::policy::Scope::Hosts
    }
}

impl<'a, D: Driver> Executor<'a, D> {
    /// The wave's live gates over the soak window, soaking again (and widening the
    /// window) while they cannot tell yet and the policy allows more extensions. The
    /// inner `Err` is an operator's halt during such a soak.
    pub(super) fn live_results(
        &mut self,
        w: usize,
        wave: &Wave,
        l: &LiveGates,
        soak_s: f64,
        soak_from_ms: i64,
        mut soak_until_ms: i64,
    ) -> Result<Result<Vec<GateResult>, Halt>, RolloutError> {
        let mut extensions = 0;
        loop {
            let (results, longer) = self.live_gates(l, wave, soak_from_ms, soak_until_ms);
            if longer && extensions < l.max_extensions {
                extensions += 1;
                (self.say)(&format!(
                    "wave {w}: live gates cannot tell yet; soaking again ({extensions} of {})",
                    l.max_extensions
                ));
                if let Some(h) = self.soak(w, soak_s)? {
                    return Ok(Err(h));
                }
                // The window grows by the new soak: samples add up.
                soak_until_ms = self.driver.now_ms();
                continue;
            }
            return Ok(Ok(results));
        }
    }

    /// Says and records the live gates' results. The result is the group's: it is
    /// recorded on each of the wave's nodes, as their own gates are, and a failure lists
    /// each, with how to undo it.
    pub(super) fn record_live_gates(
        &mut self,
        w: usize,
        wave: &Wave,
        results: Vec<GateResult>,
        failures: &mut Vec<Failure>,
    ) -> Result<(), RolloutError> {
        for r in results {
            (self.say)(&format!(
                "wave {w}: gate {} {}: {}",
                r.gate,
                if r.passed { "passed" } else { "FAILED" },
                r.summary
            ));
            for n in &wave.nodes {
                self.record_gate(w, &n.name, r.clone(), failures)?;
            }
        }
        Ok(())
    }

    /// The live gates of a wave over `[since_ms, until_ms]`, and whether any metric asks
    /// for a longer soak (its result then says "inconclusive" and fails: the caller soaks
    /// again while it may).
    fn live_gates(
        &mut self,
        l: &LiveGates,
        wave: &Wave,
        since_ms: i64,
        until_ms: i64,
    ) -> (Vec<GateResult>, bool) {
        let canaries: Vec<String> = wave.nodes.iter().map(|n| n.name.clone()).collect();
        let mut out = Vec::new();
        let mut longer = false;
        let mut failed = false;
        let scope = wave_scope(wave);
        for m in l.metrics.iter().filter(|m| m.scope == scope) {
            let gate = format!("live {}", m.name);
            if wave.control.is_empty() {
                out.push(GateResult {
                    gate,
                    passed: true,
                    summary: "not compared: no unchanged node shares a rack, switch or job with this wave (the last wave has none left)".into(),
                    evidence: vec![],
                });
                continue;
            }
            let (qa, a) = self.driver.live_samples(l, m, &canaries, since_ms, until_ms);
            let (qb, b) = self.driver.live_samples(l, m, &wave.control, since_ms, until_ms);
            let window = format!(
                "{} .. {} every {} s",
                xirang_telemetry::time::utc(since_ms),
                xirang_telemetry::time::utc(until_ms),
                l.step_s
            );
            let (a, b) = match (a, b) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => {
                    failed = true;
                    out.push(GateResult {
                        gate,
                        passed: false,
                        summary: format!("{e}"),
                        evidence: vec![
                            format!("prometheus {} canaries: {qa} ({window})", l.prometheus),
                            format!("prometheus {} control: {qb} ({window})", l.prometheus),
                        ],
                    });
                    continue;
                }
            };
            let r = live::compare_with(
                m.better,
                m.tolerance,
                m.absolute_tolerance,
                &a,
                &b,
                l.alpha,
                l.min_samples,
            );
            let evidence = vec![
                format!(
                    "prometheus {} canaries {}: {qa} ({window}): {} samples, median {}",
                    l.prometheus,
                    canaries.join(","),
                    a.len(),
                    sig(r.as_ref().map_or(f64::NAN, |c| c.canary_median))
                ),
                format!(
                    "prometheus {} control {}: {qb} ({window}): {} samples, median {}",
                    l.prometheus,
                    wave.control.join(","),
                    b.len(),
                    sig(r.as_ref().map_or(f64::NAN, |c| c.control_median))
                ),
            ];
            let sign = if m.better == live::Better::Lower { "+" } else { "-" };
            let margin = if m.absolute_tolerance > 0.0 {
                format!(
                    "{sign}{:.1} % {sign}{}",
                    m.tolerance * 100.0,
                    sig(m.absolute_tolerance)
                )
            } else {
                format!("{sign}{:.1} %", m.tolerance * 100.0)
            };
            let (passed, summary) = match r {
                Err(e) => {
                    failed = true;
                    (false, format!("{e}: the gate fails closed"))
                }
                Ok(c) => {
                    let medians = format!(
                        "canaries median {} ({} samples) against control {} ({})",
                        sig(c.canary_median),
                        c.canary_n,
                        sig(c.control_median),
                        c.control_n
                    );
                    match c.verdict {
                        live::Verdict::Pass => (
                            true,
                            format!(
                                "{medians}: no worse than the control {margin} (one-sided Mann-Whitney p = {} < {})",
                                sig(c.p_no_worse),
                                l.alpha
                            ),
                        ),
                        live::Verdict::Fail => {
                            failed = true;
                            (
                                false,
                                format!(
                                    "{medians}: worse than the control {margin} (one-sided Mann-Whitney p = {} < {})",
                                    sig(c.p_worse),
                                    l.alpha
                                ),
                            )
                        }
                        live::Verdict::Longer => {
                            longer = true;
                            (
                                false,
                                format!(
                                    "{medians}: inconclusive (p worse {}, p no worse {}, alpha {}{}): soak longer, or resume with --recheck",
                                    sig(c.p_worse),
                                    sig(c.p_no_worse),
                                    l.alpha,
                                    if c.canary_n.min(c.control_n) < l.min_samples {
                                        format!("; at least {} samples per group needed", l.min_samples)
                                    } else {
                                        String::new()
                                    }
                                ),
                            )
                        }
                    }
                }
            };
            out.push(GateResult {
                gate,
                passed,
                summary,
                evidence,
            });
        }
        // A metric that failed outright is not waited on for the others.
        (out, longer && !failed)
    }
}
