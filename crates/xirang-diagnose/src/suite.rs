//! The fault-injection suite: every diagnosis rule proven on faults injected in the
//! simulator, which emits the counters real hardware exposes. Each case is a scenario
//! (one fabric, one workload) with zero, one or two faults at different places and
//! loads; the run's sampled counters go through the same rules as production telemetry,
//! and the top findings are scored against what was injected.
//!
//! Loss rates are chosen so that each run corrupts at least a few of the ~1000 packets a
//! port receives: a fault that corrupts nothing leaves no signature to find.
//!
//! Fault kinds covered so far: link bit errors (at NIC ports and at switch ports) and
//! link flaps. The other kinds of issue 9 (port trained down, PCIe cap, slow receiver,
//! ECN/PFC off, MTU mismatch, ECMP imbalance, application faults) are to come.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use xirang_fabric::scenario::Scenario;

use crate::counters::diagnose_window;
use crate::finding::{Class, Severity};
use crate::source::window_from_samples;

/// Simulated time of every case, µs: the healthy workload ends in under 1 ms.
const RUN_END_US: u32 = 3_000;

/// What a case injects: the class and entity diagnosis should name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Injected {
    /// `[[faults]]` TOML of the fault.
    pub toml: String,
    /// Class diagnosis should say.
    pub class: Class,
    /// Entity diagnosis should name.
    pub entity: String,
}

/// One case.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// Name.
    pub name: String,
    /// Run seed.
    pub seed: u64,
    /// Faults (empty: a healthy run).
    pub faults: Vec<Injected>,
}

/// The fabric and workload of every case: 8 hosts on a 2x2 leaf-spine at 100 Gbit/s,
/// each sending 4 MB to a host on the other leaf and back, so every NIC port and every
/// host-facing leaf port carries traffic; counters sampled every 20 µs.
const BASE: &str = r#"
[topology.leaf_spine]
leaves = 2
spines = 2
hosts_per_leaf = 4
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[workloads.perm.flows]
list = [
  { src = "h0", dst = "h4", bytes = 4_000_000 }, { src = "h1", dst = "h5", bytes = 4_000_000 },
  { src = "h2", dst = "h6", bytes = 4_000_000 }, { src = "h3", dst = "h7", bytes = 4_000_000 },
  { src = "h4", dst = "h1", bytes = 4_000_000 }, { src = "h5", dst = "h2", bytes = 4_000_000 },
  { src = "h6", dst = "h3", bytes = 4_000_000 }, { src = "h7", dst = "h0", bytes = 4_000_000 },
]
"#;

fn errors_at(target: &str, entity: &str, loss: f64) -> Injected {
    Injected {
        toml: format!("[[faults]]\nkind = \"link_errors\"\ntarget = \"{target}\"\nloss = {loss}\n"),
        class: Class::Link,
        entity: entity.into(),
    }
}

fn down_at(target: &str, entity: &str, start_us: f64, end_us: f64) -> Injected {
    Injected {
        toml: format!(
            "[[faults]]\nkind = \"link_down\"\ntarget = \"{target}\"\nstart_us = {start_us}\nend_us = {end_us}\n"
        ),
        class: Class::Link,
        entity: entity.into(),
    }
}

/// Every case of the suite.
pub fn cases() -> Vec<Case> {
    let one = |name: &str, seed: u64, f: Injected| Case {
        name: name.into(),
        seed,
        faults: vec![f],
    };
    let mut v = vec![
        one(
            "errors-nic-h1-0.2%",
            1,
            errors_at("h1/mlx5_0", "h1/mlx5_0/1", 0.002),
        ),
        one("errors-nic-h5-1%", 2, errors_at("h5/mlx5_0", "h5/mlx5_0/1", 0.01)),
        one(
            "errors-nic-h6-0.3%",
            3,
            errors_at("h6/mlx5_0", "h6/mlx5_0/1", 0.003),
        ),
        one(
            "errors-switch-leaf0:1-0.5%",
            1,
            errors_at("leaf0:1", "leaf0:1", 0.005),
        ),
        one(
            "errors-switch-leaf1:3-0.1%",
            2,
            errors_at("leaf1:3", "leaf1:3", 0.001),
        ),
        one(
            "errors-switch-leaf0:2-2%",
            3,
            errors_at("leaf0:2", "leaf0:2", 0.02),
        ),
        one(
            "flap-nic-h2",
            1,
            down_at("h2/mlx5_0", "h2/mlx5_0/1", 200.0, 400.0),
        ),
        one(
            "flap-nic-h7",
            2,
            down_at("h7/mlx5_0", "h7/mlx5_0/1", 100.0, 300.0),
        ),
        one(
            "flap-nic-h4-short",
            3,
            down_at("h4/mlx5_0", "h4/mlx5_0/1", 300.0, 350.0),
        ),
    ];
    for seed in 1..=5 {
        v.push(Case {
            name: format!("healthy-seed{seed}"),
            seed,
            faults: vec![],
        });
    }
    for (i, (a, b)) in [
        (
            errors_at("h1/mlx5_0", "h1/mlx5_0/1", 0.005),
            down_at("h6/mlx5_0", "h6/mlx5_0/1", 200.0, 300.0),
        ),
        (
            errors_at("leaf1:0", "leaf1:0", 0.01),
            errors_at("h3/mlx5_0", "h3/mlx5_0/1", 0.002),
        ),
        (
            down_at("h0/mlx5_0", "h0/mlx5_0/1", 150.0, 250.0),
            errors_at("leaf0:3", "leaf0:3", 0.003),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        v.push(Case {
            name: format!("double-{}", i + 1),
            seed: 10 + i as u64,
            faults: vec![a, b],
        });
    }
    v
}

/// How a case went.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// Injected (class, entity) pairs.
    pub injected: Vec<(Class, String)>,
    /// The findings (rule, class, entity, severity), ranked.
    pub found: Vec<(String, Class, String, Severity)>,
    /// Top-1 class and entity match an injected fault (healthy: no finding above low).
    pub correct: bool,
}

/// Runs one case through the simulator and the rules.
pub fn run_case(c: &Case) -> Result<CaseResult, String> {
    // The run stops at 3 ms: a flow whose tail was lost on a down link waits for the
    // 4.3 s ACK timeout (NCCL_IB_TIMEOUT 20), which would only lengthen the window.
    let mut text = format!(
        "{BASE}\n[run]\nseed = {}\nsample_interval_us = 20\nend_us = {RUN_END_US}\n",
        c.seed
    );
    for f in &c.faults {
        text.push('\n');
        text.push_str(&f.toml);
    }
    let path = Path::new("suite.toml");
    let loaded = Scenario::parse(&text, path)
        .and_then(|s| s.build(path, Path::new("."), Some(&text)))
        .map_err(|e| format!("{}: {e}", c.name))?;
    let r = xirang_sim::simulate(&loaded, &xirang_sim::options(&loaded), &mut |_| {});
    r.check_conservation()
        .map_err(|e| format!("{}: conservation: {e}", c.name))?;
    let samples = r
        .counter_series
        .iter()
        .map(|(t, cv)| ((*t / xirang_sim::time::PS_PER_US) as i64, cv));
    let w = window_from_samples(format!("sim {}", c.name), samples);
    let findings = diagnose_window(&w);
    let found: Vec<(String, Class, String, Severity)> = findings
        .iter()
        .map(|f| (f.rule.to_string(), f.class, f.entity.clone(), f.severity))
        .collect();
    let injected: Vec<(Class, String)> = c.faults.iter().map(|f| (f.class, f.entity.clone())).collect();
    let correct = if injected.is_empty() {
        findings.iter().all(|f| f.severity == Severity::Low)
    } else {
        // Top-1 names an injected fault, and every injected fault is among the findings.
        findings
            .first()
            .is_some_and(|f| injected.contains(&(f.class, f.entity.clone())))
            && injected
                .iter()
                .all(|i| findings.iter().any(|f| (f.class, &f.entity) == (i.0, &i.1)))
    };
    Ok(CaseResult {
        name: c.name.clone(),
        injected,
        found,
        correct,
    })
}

/// The suite's results as the markdown VALIDATION.md holds: the confusion matrix of
/// injected class against top-1 diagnosed class, accuracy, and every case.
pub fn render_markdown(results: &[CaseResult]) -> String {
    let label = |c: Option<Class>| c.map(|c| c.name()).unwrap_or("none (healthy)");
    let mut matrix: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut rows: Vec<&str> = Vec::new();
    let mut cols: Vec<&str> = Vec::new();
    for r in results {
        let injected = label(r.injected.first().map(|x| x.0));
        let got = label(r.found.first().map(|x| x.1));
        *matrix.entry((injected, got)).or_insert(0) += 1;
        if !rows.contains(&injected) {
            rows.push(injected);
        }
        if !cols.contains(&got) {
            cols.push(got);
        }
    }
    let mut s = String::new();
    let _ = writeln!(s, "| injected \\ top-1 diagnosed | {} |", cols.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(cols.len()));
    for r in &rows {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| matrix.get(&(*r, *c)).copied().unwrap_or(0).to_string())
            .collect();
        let _ = writeln!(s, "| {r} | {} |", cells.join(" | "));
    }
    let faulty: Vec<&CaseResult> = results.iter().filter(|r| !r.injected.is_empty()).collect();
    let ok = faulty.iter().filter(|r| r.correct).count();
    let healthy_ok = results
        .iter()
        .filter(|r| r.injected.is_empty() && r.correct)
        .count();
    let _ = writeln!(
        s,
        "\nTop-1 class and location correct in {ok} of {} faulty runs ({:.0}%); {healthy_ok} of {} healthy runs without a finding above low severity.\n",
        faulty.len(),
        100.0 * ok as f64 / faulty.len().max(1) as f64,
        results.len() - faulty.len()
    );
    let _ = writeln!(s, "| case | injected | top findings | correct |");
    let _ = writeln!(s, "|---|---|---|---|");
    for r in results {
        let inj: Vec<String> = r
            .injected
            .iter()
            .map(|(c, e)| format!("{} {e}", c.name()))
            .collect();
        let got: Vec<String> = r
            .found
            .iter()
            .take(3)
            .map(|(rule, _, e, sev)| format!("{rule} {e} ({sev:?})"))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            r.name,
            if inj.is_empty() {
                "-".into()
            } else {
                inj.join(", ")
            },
            if got.is_empty() {
                "-".into()
            } else {
                got.join(", ")
            },
            if r.correct { "yes" } else { "**no**" }
        );
    }
    s
}
