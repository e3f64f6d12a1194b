//! Validation gates: what a node must show after its firmware is changed before its
//! wave can complete. Each gate is a pure function of readings, and its result carries
//! the evidence it looked at, so a halt can show why.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use xirang_telemetry::rate::change_since;
use xirang_telemetry::spec::spec;

use crate::waves::{NicUpgrade, PlannedNode};

/// Link error counters a soak watches (docs/reference/linux-rdma-sysfs.md §1.2:
/// rising values mean signal-integrity trouble, flaps or overruns).
pub const SOAK_COUNTERS: &[&str] = &[
    "symbol_error",
    "port_rcv_errors",
    "link_error_recovery",
    "link_downed",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_rcv_remote_physical_errors",
];

/// What is read from a node at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// Firmware per RDMA device present (`None` when unreadable).
    pub fw: BTreeMap<String, Option<String>>,
    /// PCI address → RDMA device name (devices can be renamed after a reset; the PCI
    /// address stays).
    #[serde(default)]
    pub pci: BTreeMap<String, String>,
    /// Error counters, `dev/port/counter` → raw value.
    pub errors: BTreeMap<String, u64>,
    /// Error findings of the audit on this node (`RULE entity: message`).
    pub audit_errors: Vec<String>,
    /// Where the reading came from (`hosts/h3`).
    pub source: String,
    /// Time of the reading, ns (any clock, the same for a pair of readings).
    pub ts_ns: u64,
}

impl Reading {
    /// The device a planned NIC is now: by PCI address when known, else by name.
    pub fn device_of<'a>(&'a self, u: &'a NicUpgrade) -> Option<&'a str> {
        if let Some(name) = u.pci.as_ref().and_then(|p| self.pci.get(p)) {
            return Some(name);
        }
        self.fw.contains_key(&u.nic).then_some(u.nic.as_str())
    }

    /// A planned NIC's firmware now: `None` when the device is absent,
    /// `Some(None)` when its version is unreadable.
    pub fn fw_of(&self, u: &NicUpgrade) -> Option<Option<String>> {
        self.device_of(u).and_then(|d| self.fw.get(d).cloned())
    }

    /// The version shown for a planned NIC, for messages.
    pub fn shown(&self, u: &NicUpgrade) -> String {
        match self.fw_of(u) {
            None => "absent".into(),
            Some(None) => "unreadable".into(),
            Some(Some(v)) => v,
        }
    }
}

/// A gate's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    /// Gate name: `firmware`, `audit`, `benchmark`, `soak`.
    pub gate: String,
    /// Passed?
    pub passed: bool,
    /// One line.
    pub summary: String,
    /// What was looked at.
    pub evidence: Vec<String>,
}

impl GateResult {
    fn new(gate: &str, passed: bool, summary: String, evidence: Vec<String>) -> GateResult {
        GateResult {
            gate: gate.into(),
            passed,
            summary,
            evidence,
        }
    }
}

/// Every planned NIC shows its target version.
pub fn firmware(node: &PlannedNode, after: &Reading) -> GateResult {
    let mut bad = Vec::new();
    let mut ev = Vec::new();
    for u in &node.nics {
        let v = after.fw_of(u);
        let shown = after.shown(u);
        ev.push(format!(
            "{}: {} fw_ver = {shown} (target {})",
            after.source, u.nic, u.to
        ));
        if v.flatten().as_deref() != Some(u.to.as_str()) {
            bad.push(format!("{} shows {shown}", u.nic));
        }
    }
    if bad.is_empty() {
        GateResult::new("firmware", true, "every NIC on target".into(), ev)
    } else {
        GateResult::new(
            "firmware",
            false,
            format!("not on target: {}", bad.join(", ")),
            ev,
        )
    }
}

/// No error finding from the audit.
pub fn audit(after: &Reading) -> GateResult {
    if after.audit_errors.is_empty() {
        GateResult::new("audit", true, "no error finding".into(), vec![])
    } else {
        GateResult::new(
            "audit",
            false,
            format!("{} error finding(s)", after.audit_errors.len()),
            after.audit_errors.clone(),
        )
    }
}

/// Error counters did not rise by more than `max_increase` between two readings
/// (wraps told from resets by each counter's width, as the monitor does).
pub fn soak(before: &Reading, after: &Reading, max_increase: u64, soak_s: f64) -> GateResult {
    if before.errors.is_empty() {
        return GateResult::new(
            "soak",
            false,
            "no link error counter could be read: the soak cannot tell whether errors rise".into(),
            vec![format!(
                "{}: no PMA error counters (ports/*/counters)",
                before.source
            )],
        );
    }
    let mut rising = Vec::new();
    let mut ev = Vec::new();
    for (key, &now) in &after.errors {
        let name = key.rsplit('/').next().unwrap_or(key);
        let Some(&was) = before.errors.get(key) else {
            continue;
        };
        let inc = change_since(
            Some((before.ts_ns, was)),
            after.ts_ns.max(before.ts_ns + 1),
            now,
            spec(name).width,
        )
        .increase();
        if inc > 0 {
            ev.push(format!("{}: {key} {was} → {now} (+{inc})", after.source));
        }
        if inc > max_increase {
            rising.push(format!("{key} +{inc}"));
        }
    }
    let missing: Vec<&String> = before
        .errors
        .keys()
        .filter(|k| !after.errors.contains_key(*k))
        .collect();
    for k in &missing {
        ev.push(format!("{}: {k} no longer readable", after.source));
    }
    if rising.is_empty() && missing.is_empty() {
        GateResult::new(
            "soak",
            true,
            format!("{} error counter(s) steady over {soak_s} s", after.errors.len()),
            ev,
        )
    } else {
        let mut what = rising;
        what.extend(missing.iter().map(|k| format!("{k} vanished")));
        GateResult::new(
            "soak",
            false,
            format!(
                "error counters rose over {soak_s} s (allowed +{max_increase}): {}",
                what.join(", ")
            ),
            ev,
        )
    }
}

/// A benchmark figure read from a result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchFigure {
    /// The value compared (higher is better).
    pub value: f64,
    /// What it is (`nccl-tests all_reduce busbw GB/s at 8589934592 B`).
    pub what: String,
    /// 1-based line it was read from.
    pub line: usize,
}

/// The figure a benchmark file stands for: nccl-tests → out-of-place busbw at the
/// largest size; perftest → `BW average` at the largest message size.
pub fn bench_figure(text: &str) -> Result<BenchFigure, String> {
    if let Ok(rep) = xirang_collective::nccl_tests::parse(text) {
        let best = rep
            .tests
            .iter()
            .filter_map(|t| t.largest().map(|r| (t, r)))
            .max_by_key(|(_, r)| r.size_bytes);
        if let Some((t, r)) = best {
            if let Some((l, f)) = t.failures.first() {
                return Err(format!("line {l}: the benchmark failed: {f}"));
            }
            return Ok(BenchFigure {
                value: r.out_of_place.busbw_gbs,
                what: format!(
                    "nccl-tests {} busbw GB/s at {} B",
                    t.name.as_deref().unwrap_or("test"),
                    r.size_bytes
                ),
                line: r.line,
            });
        }
        if let Some(t) = rep.tests.iter().find(|t| !t.failures.is_empty()) {
            let (l, f) = &t.failures[0];
            return Err(format!("line {l}: the benchmark failed: {f}"));
        }
    }
    match crate::perftest::parse(text) {
        Ok(rows) => {
            let r = rows
                .iter()
                .max_by_key(|r| r.bytes)
                .expect("parse returns at least one row");
            Ok(BenchFigure {
                value: r.bw_average,
                what: format!("perftest BW average {} at {} B", r.unit, r.bytes),
                line: r.line,
            })
        }
        Err(e) => Err(format!(
            "neither an nccl-tests log with result rows nor a perftest report ({e})"
        )),
    }
}

/// Result against baseline.
pub fn benchmark(
    baseline: Result<(String, BenchFigure), String>,
    result: Result<(String, BenchFigure), String>,
    min_ratio: f64,
) -> GateResult {
    let (b_src, b) = match baseline {
        Ok(x) => x,
        Err(e) => {
            return GateResult::new("benchmark", false, format!("no baseline: {e}"), vec![]);
        }
    };
    let (r_src, r) = match result {
        Ok(x) => x,
        Err(e) => return GateResult::new("benchmark", false, format!("no result: {e}"), vec![]),
    };
    let ev = vec![
        format!("{b_src}:{}: baseline {} = {}", b.line, b.what, b.value),
        format!("{r_src}:{}: result {} = {}", r.line, r.what, r.value),
    ];
    if b.what != r.what {
        return GateResult::new(
            "benchmark",
            false,
            format!(
                "result ({}) is not the same measure as the baseline ({})",
                r.what, b.what
            ),
            ev,
        );
    }
    let ratio = if b.value > 0.0 { r.value / b.value } else { 0.0 };
    let passed = ratio >= min_ratio;
    GateResult::new(
        "benchmark",
        passed,
        format!(
            "{:.1}% of baseline ({} vs {}; at least {:.0}% required)",
            ratio * 100.0,
            r.value,
            b.value,
            min_ratio * 100.0
        ),
        ev,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(errors: &[(&str, u64)], ts_ns: u64) -> Reading {
        Reading {
            errors: errors.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            source: "hosts/h1".into(),
            ts_ns,
            ..Reading::default()
        }
    }

    #[test]
    fn soak_passes_steady_and_fails_rising_or_vanished() {
        let a = reading(&[("mlx5_0/1/symbol_error", 5)], 0);
        let b = reading(&[("mlx5_0/1/symbol_error", 5)], 1_000_000_000);
        assert!(soak(&a, &b, 0, 1.0).passed);
        let c = reading(&[("mlx5_0/1/symbol_error", 9)], 1_000_000_000);
        let g = soak(&a, &c, 0, 1.0);
        assert!(!g.passed);
        assert!(g.summary.contains("symbol_error +4"), "{}", g.summary);
        assert!(soak(&a, &c, 4, 1.0).passed);
        let d = reading(&[], 1_000_000_000);
        assert!(!soak(&a, &d, 0, 1.0).passed);
        let g = soak(&d, &d, 0, 1.0);
        assert!(
            !g.passed && g.summary.starts_with("no link error counter"),
            "{}",
            g.summary
        );
    }

    #[test]
    fn benchmark_ratio_and_mismatch() {
        let f = |v: f64, what: &str| {
            Ok((
                "bench/h1".to_string(),
                BenchFigure {
                    value: v,
                    what: what.into(),
                    line: 3,
                },
            ))
        };
        assert!(benchmark(f(100.0, "x"), f(96.0, "x"), 0.95).passed);
        let g = benchmark(f(100.0, "x"), f(90.0, "x"), 0.95);
        assert!(!g.passed && g.summary.starts_with("90.0%"), "{}", g.summary);
        assert!(!benchmark(f(100.0, "x"), f(100.0, "y"), 0.95).passed);
        assert!(!benchmark(Err("missing".into()), f(100.0, "x"), 0.95).passed);
    }
}
