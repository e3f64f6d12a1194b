//! Fleet simulation: the real planner and executor over a synthetic fleet whose nodes
//! answer like hosts would, some of which degrade once upgraded (injected). It shows
//! where the rollout halts and how many nodes were exposed to the bad firmware.

use std::collections::BTreeMap;

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::RolloutError;
use crate::exec::{Driver, ExecOptions, Executor, Job, Outcome, Phase, Progress, Purpose};
use crate::fleet::{Fleet, SyntheticSpec};
use crate::gates::{BenchFigure, Reading};
use crate::policy::{BenchmarkGate, Policy};
use crate::store::{Event, Meta, Store};
use crate::waves::{NicUpgrade, Plan, plan};

/// How an injected bad node shows itself once upgraded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Degradation {
    /// Benchmark bandwidth drops to this share of the baseline.
    Bandwidth {
        /// Share kept (0.7 = 30 % lost).
        factor: f64,
    },
    /// `symbol_error` rises on its first NIC at this rate.
    LinkErrors {
        /// Errors per second.
        per_s: f64,
    },
    /// Its first NIC no longer shows the new firmware (a failed burn reverting).
    StaysOld,
    /// Its application latency (the synthetic `request_p99_seconds` the live gates
    /// read) is multiplied by this factor; only a live gate sees it.
    Latency {
        /// 1.3 = 30 % slower.
        factor: f64,
    },
}

/// The synthetic fleet's request p99 on a healthy node, s (the default scenario's
/// inference p99 is of this order, VALIDATION.md).
const NOMINAL_P99_S: f64 = 1.2e-4;

/// What to simulate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimSpec {
    /// The fleet's shape.
    pub fleet: SyntheticSpec,
    /// Seed of the fleet, of which nodes degrade and of the benchmark noise.
    pub seed: u64,
    /// Share of nodes that degrade once upgraded.
    pub degrade_share: f64,
    /// Named nodes that degrade (added to the drawn ones).
    pub degraded_nodes: Vec<String>,
    /// How they degrade.
    pub degradation: Degradation,
    /// Benchmark noise on healthy nodes, as a relative standard deviation.
    pub bench_noise: f64,
}

impl Default for SimSpec {
    fn default() -> Self {
        SimSpec {
            fleet: SyntheticSpec::default(),
            seed: 1,
            degrade_share: 0.02,
            degraded_nodes: Vec::new(),
            degradation: Degradation::Bandwidth { factor: 0.7 },
            // nccl-tests averages on a healthy pair vary by ~1 % run to run
            // (crates/xirang-collective/test_data/nccl-tests repeated sizes).
            bench_noise: 0.01,
        }
    }
}

/// The default policy of the simulation: the synthetic fleet's two models go from
/// their current versions to a new one; gates audit, soak 10 minutes, benchmark 95 %.
pub fn default_policy(spec: &SimSpec) -> Policy {
    let mut versions: Vec<String> = spec.fleet.versions.iter().map(|v| v.0.clone()).collect();
    versions.sort();
    let firmware = spec
        .fleet
        .models
        .iter()
        .map(|(h, b, _)| crate::policy::FirmwareTarget {
            hca_type: Some(h.clone()),
            board_id: Some(b.clone()),
            target: "99.99.9999".into(),
            allowed_from: versions.clone(),
            image: format!("/srv/firmware/{b}-99.99.9999.bin"),
        })
        .collect();
    Policy {
        firmware,
        configuration: None,
        stages: Default::default(),
        limits: Default::default(),
        gates: crate::policy::Gates {
            audit: true,
            soak_s: crate::policy::DEFAULT_SOAK_S,
            max_error_increase: 0,
            benchmark: Some(BenchmarkGate {
                baseline: "{node}.before".into(),
                result: "{node}.after".into(),
                command: None,
                min_ratio: 0.95,
            }),
            live: matches!(spec.degradation, Degradation::Latency { .. }).then(|| crate::policy::LiveGates {
                prometheus: "http://prometheus.invalid:9090".into(),
                step_s: 30.0,
                alpha: 0.05,
                min_samples: 8,
                max_extensions: 2,
                metrics: vec![crate::policy::LiveMetric {
                    name: "request p99".into(),
                    query: "histogram_quantile(0.99, sum by (le) (rate(request_duration_seconds_bucket{node=~\"{nodes}\"}[1m])))".into(),
                    better: crate::live::Better::Lower,
                    tolerance: 0.02,
                    absolute_tolerance: 0.0,
                    scope: crate::policy::Scope::Hosts,
                }],
            }),
        },
        commands: crate::policy::Commands::ssh_mlxfwmanager(),
        base_dir: Default::default(),
    }
}

struct SimNode {
    fw: BTreeMap<String, String>,
    errors: BTreeMap<String, u64>,
    baseline_gbs: f64,
    upgraded_at_s: Option<f64>,
    /// Flash commands run per NIC.
    flashes: BTreeMap<String, u32>,
    /// The planned upgrades of its NICs.
    planned: BTreeMap<String, NicUpgrade>,
}

/// The synthetic fleet as a driver.
pub struct SimDriver {
    nodes: BTreeMap<String, SimNode>,
    degraded: BTreeMap<String, Degradation>,
    clock_s: f64,
    rng: Xoshiro256PlusPlus,
    noise: f64,
}

/// Start of simulated time: 2026-01-01T00:00:00Z, Unix ms.
const SIM_EPOCH_MS: i64 = 1_767_225_600_000;
/// Nominal AllReduce busbw of a healthy node pair in the synthetic fleet, GB/s (the
/// 400G RoCE fixture `h100-2node-8gpu-roce-oci` peaks near this).
const NOMINAL_BUSBW_GBS: f64 = 48.0;
/// Simulated time a flash takes (burn + reset), s.
const FLASH_S: f64 = 120.0;

fn unit(rng: &mut Xoshiro256PlusPlus) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

impl SimDriver {
    fn new(fleet: &Fleet, plan: &Plan, spec: &SimSpec) -> SimDriver {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(spec.seed ^ 0x5eed_de9a);
        let mut planned: BTreeMap<String, BTreeMap<String, NicUpgrade>> = BTreeMap::new();
        for n in plan.waves.iter().flat_map(|w| &w.nodes) {
            planned.insert(
                n.name.clone(),
                n.nics.iter().map(|u| (u.nic.clone(), u.clone())).collect(),
            );
        }
        let mut nodes = BTreeMap::new();
        let mut degraded = BTreeMap::new();
        for n in &fleet.nodes {
            let mut errors = BTreeMap::new();
            for nic in &n.nics {
                for c in crate::gates::SOAK_COUNTERS {
                    errors.insert(format!("{}/1/{c}", nic.name), 0);
                }
            }
            nodes.insert(
                n.name.clone(),
                SimNode {
                    fw: n
                        .nics
                        .iter()
                        .map(|c| (c.name.clone(), c.fw.clone().unwrap_or_default()))
                        .collect(),
                    errors,
                    baseline_gbs: NOMINAL_BUSBW_GBS * (1.0 + spec.bench_noise * (2.0 * unit(&mut rng) - 1.0)),
                    upgraded_at_s: None,
                    flashes: BTreeMap::new(),
                    planned: planned.remove(&n.name).unwrap_or_default(),
                },
            );
            if unit(&mut rng) < spec.degrade_share || spec.degraded_nodes.contains(&n.name) {
                degraded.insert(n.name.clone(), spec.degradation);
            }
        }
        // A configuration's switches answer with their config_db's state and one
        // healthy link; none degrades (the draws above stay the hosts', so a seed's
        // hosts are the same with or without switches).
        for (name, units) in planned {
            let mut errors = BTreeMap::new();
            for c in crate::gates::SOAK_COUNTERS {
                errors.insert(format!("links/1/{c}"), 0);
            }
            nodes.insert(
                name,
                SimNode {
                    fw: units.values().map(|u| (u.nic.clone(), u.from.clone())).collect(),
                    errors,
                    baseline_gbs: NOMINAL_BUSBW_GBS,
                    upgraded_at_s: None,
                    flashes: BTreeMap::new(),
                    planned: units,
                },
            );
        }
        SimDriver {
            nodes,
            degraded,
            clock_s: 0.0,
            rng,
            noise: spec.bench_noise,
        }
    }

    /// Nodes that degrade once upgraded.
    pub fn degraded(&self) -> &BTreeMap<String, Degradation> {
        &self.degraded
    }

    /// Flash commands run per `node/nic` that ran any.
    pub fn flashes(&self) -> BTreeMap<String, u32> {
        self.nodes
            .iter()
            .flat_map(|(k, v)| v.flashes.iter().map(move |(nic, c)| (format!("{k}/{nic}"), *c)))
            .collect()
    }
}

impl SimDriver {
    /// What a command does to the synthetic node (time is advanced by the caller).
    fn apply(&mut self, node: &str, nic: Option<&str>, purpose: Purpose) -> Outcome {
        let Some(n) = self.nodes.get_mut(node) else {
            return Outcome {
                code: Some(1),
                output: "no such node".into(),
            };
        };
        let up = nic.and_then(|c| n.planned.get(c)).cloned();
        match (purpose, up) {
            (Purpose::Flash, Some(u)) => {
                n.fw.insert(u.nic.clone(), u.to.clone());
                *n.flashes.entry(u.nic.clone()).or_insert(0) += 1;
                n.upgraded_at_s = Some(self.clock_s + FLASH_S);
                Outcome {
                    code: Some(0),
                    output: format!("{}: burned {} ({})", u.nic, u.to, u.image),
                }
            }
            (Purpose::Rollback, Some(u)) => {
                n.fw.insert(u.nic.clone(), u.from.clone());
                Outcome {
                    code: Some(0),
                    output: format!("{}: burned {}", u.nic, u.from),
                }
            }
            (Purpose::Benchmark, _) => Outcome {
                code: Some(0),
                output: String::new(),
            },
            _ => Outcome {
                code: Some(1),
                output: "nothing planned for this NIC".into(),
            },
        }
    }
}

impl Driver for SimDriver {
    fn read(&mut self, node: &str) -> Result<Reading, String> {
        let n = self.nodes.get_mut(node).ok_or("no such node")?;
        let deg = self.degraded.get(node).copied();
        let mut fw: BTreeMap<String, Option<String>> =
            n.fw.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
        if let Some(t0) = n.upgraded_at_s {
            match deg {
                Some(Degradation::LinkErrors { per_s }) => {
                    if let Some(v) = n
                        .errors
                        .iter_mut()
                        .find_map(|(k, v)| k.ends_with("/symbol_error").then_some(v))
                    {
                        *v = ((self.clock_s - t0).max(0.0) * per_s) as u64;
                    }
                }
                Some(Degradation::StaysOld) => {
                    if let Some((nic, v)) = fw.iter_mut().next() {
                        *v = n.planned.get(nic).map(|u| u.from.clone());
                    }
                }
                _ => {}
            }
        }
        Ok(Reading {
            pci: BTreeMap::new(),
            fw,
            errors: n.errors.clone(),
            audit_errors: Vec::new(),
            source: format!("sim:{node}"),
            ts_ns: (self.clock_s * 1e9) as u64,
        })
    }

    fn run_many(&mut self, jobs: &[Job]) -> Vec<Outcome> {
        let outs = jobs
            .iter()
            .map(|j| self.apply(&j.node, j.nic.as_deref(), j.purpose))
            .collect();
        // A round's commands run side by side; benchmarks take no simulated time.
        if jobs.iter().any(|j| j.purpose != Purpose::Benchmark) {
            self.clock_s += FLASH_S;
        }
        outs
    }

    fn bench(
        &mut self,
        node: &str,
        phase: Phase,
        _since_ms: Option<i64>,
    ) -> Result<(String, BenchFigure), String> {
        let noise = self.noise * (2.0 * unit(&mut self.rng) - 1.0);
        let n = self.nodes.get(node).ok_or("no such node")?;
        let value = match phase {
            Phase::Before => n.baseline_gbs,
            Phase::After => {
                let f = match self.degraded.get(node) {
                    Some(Degradation::Bandwidth { factor }) if n.upgraded_at_s.is_some() => *factor,
                    _ => 1.0,
                };
                n.baseline_gbs * f * (1.0 + noise)
            }
        };
        let what = "nccl-tests all_reduce_perf busbw GB/s at 8589934592 B".to_string();
        let src = match phase {
            Phase::Before => format!("sim:{node}.before"),
            Phase::After => format!("sim:{node}.after"),
        };
        Ok((
            src,
            BenchFigure {
                value: (value * 100.0).round() / 100.0,
                what,
                line: 1,
            },
        ))
    }

    /// Each interval's sample is the group's mean of its nodes' request p99: nominal,
    /// with the benchmark's noise, times a latency degradation's factor on a degraded
    /// node from its upgrade on. The query names the synthetic series.
    fn live_samples(
        &mut self,
        gate: &crate::policy::LiveGates,
        metric: &crate::policy::LiveMetric,
        nodes: &[String],
        since_ms: i64,
        until_ms: i64,
    ) -> (String, Result<Vec<f64>, crate::live::SeriesError>) {
        let q = crate::live::fill_nodes(&metric.query, nodes);
        let step_ms = (gate.step_s * 1000.0) as i64;
        let mut out = Vec::new();
        let mut t = since_ms + step_ms;
        while t <= until_ms {
            let t_s = (t - SIM_EPOCH_MS) as f64 / 1000.0;
            let mut sum = 0.0;
            for n in nodes {
                let noise = 1.0 + self.noise * (2.0 * unit(&mut self.rng) - 1.0);
                let f = match (
                    self.degraded.get(n),
                    self.nodes.get(n).and_then(|x| x.upgraded_at_s),
                ) {
                    (Some(Degradation::Latency { factor }), Some(t0)) if t_s >= t0 => *factor,
                    _ => 1.0,
                };
                sum += NOMINAL_P99_S * noise * f;
            }
            out.push(sum / nodes.len().max(1) as f64);
            t += step_ms;
        }
        (q, Ok(out))
    }

    fn sleep_s(&mut self, s: f64) {
        self.clock_s += s;
    }

    fn now_ms(&mut self) -> i64 {
        SIM_EPOCH_MS + (self.clock_s * 1000.0) as i64
    }
}

/// A failing node in the report.
#[derive(Debug, Clone, Serialize)]
pub struct FailedNode {
    /// Node.
    pub node: String,
    /// Gate.
    pub gate: String,
    /// Summary.
    pub summary: String,
    /// Evidence.
    pub evidence: Vec<String>,
    /// Whether it was an injected bad node.
    pub injected: bool,
}

/// What the simulation found.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    /// Nodes in the fleet.
    pub nodes: usize,
    /// Waves planned.
    pub waves: usize,
    /// Injected bad nodes, with their wave.
    pub degraded: Vec<(String, Option<usize>)>,
    /// First wave holding an injected bad node.
    pub first_bad_wave: Option<usize>,
    /// Wave the rollout halted at (None: completed).
    pub halted_wave: Option<usize>,
    /// Halt reason.
    pub halt_reason: Option<String>,
    /// Nodes that failed a gate, with evidence.
    pub failed: Vec<FailedNode>,
    /// Nodes running the new firmware when the rollout stopped.
    pub exposed_nodes: usize,
    /// Of which injected bad ones.
    pub exposed_bad: usize,
    /// Simulated time, s.
    pub elapsed_s: f64,
    /// Flash commands run per node above one (must be empty).
    pub flashed_twice: Vec<String>,
    /// The audit log.
    #[serde(skip)]
    pub log: Vec<Event>,
}

/// Plans and runs a rollout on a synthetic fleet, until it completes or halts.
pub fn simulate(spec: &SimSpec, policy: &Policy) -> Result<(Plan, SimReport), RolloutError> {
    if policy.configuration.is_some() {
        return Err(RolloutError::Refused(
            "a configuration rollout is simulated over an inventory (--inventory): the synthetic fleet's NICs have no DCQCN knobs to configure".into(),
        ));
    }
    let fleet = Fleet::synthetic(&spec.fleet, spec.seed);
    simulate_fleet(&fleet, &format!("synthetic:{}", spec.seed), spec, policy)
}

/// Every node named `--degraded` is one of the fleet's: a name that matches nothing
/// would run as if the flag were absent and report a clean rollout.
fn check_degraded(fleet: &Fleet, names: &[String]) -> Result<(), RolloutError> {
    for name in names {
        if fleet.nodes.iter().any(|n| &n.name == name) {
            continue;
        }
        let known = || fleet.nodes.iter().map(|n| n.name.as_str());
        let hint = match xirang_fabric::diag::closest(name, known()) {
            Some(c) => format!("; did you mean `{c}`?"),
            None => match (fleet.nodes.first(), fleet.nodes.last()) {
                (Some(a), Some(b)) => format!(
                    "; the fleet's {} nodes are {} to {}",
                    fleet.nodes.len(),
                    a.name,
                    b.name
                ),
                _ => "; the fleet has no nodes".into(),
            },
        };
        return Err(RolloutError::Refused(format!(
            "--degraded {name}: no such node in the fleet{hint}"
        )));
    }
    Ok(())
}

/// Plans and runs a rollout on a given fleet (a real inventory's), its nodes answering
/// as synthetic ones; `spec.fleet` is not used.
pub fn simulate_fleet(
    fleet: &Fleet,
    label: &str,
    spec: &SimSpec,
    policy: &Policy,
) -> Result<(Plan, SimReport), RolloutError> {
    // For a configuration, a NIC's "version" is its knobs' state: the synthetic nodes
    // answer with it.
    let configured;
    let fleet = match &policy.configuration {
        Some(c) => {
            let mut f = fleet.clone();
            for nic in f.nodes.iter_mut().flat_map(|n| n.nics.iter_mut()) {
                nic.fw = crate::config::state(&c.knobs, &nic.ecn);
            }
            configured = f;
            &configured
        }
        None => fleet,
    };
    check_degraded(fleet, &spec.degraded_nodes)?;
    let plan = plan(fleet, policy);
    let store = Store::in_memory()?;
    store.init(
        &Meta {
            id: format!("sim-{}", spec.seed),
            plan: plan.clone(),
            policy: policy.clone(),
            inventory: label.to_string(),
            policy_file: "built-in".into(),
        },
        SIM_EPOCH_MS,
    )?;
    let driver = SimDriver::new(fleet, &plan, spec);
    let mut ex = Executor::new(&store, driver, ExecOptions::default(), |_| {})?;
    let mut halted = None;
    loop {
        match ex.advance()? {
            Progress::WavePassed { .. } => continue,
            Progress::Completed => break,
            Progress::Halted(h) => {
                halted = Some(h);
                break;
            }
        }
    }
    let st = ex.state()?;
    let d = ex.driver();
    let degraded: Vec<(String, Option<usize>)> = d
        .degraded()
        .keys()
        .map(|n| (n.clone(), plan.wave_of(n)))
        .collect();
    let first_bad_wave = degraded.iter().filter_map(|x| x.1).min();
    let mut failed = Vec::new();
    for (name, p) in &st.nodes {
        for g in p.gates.iter().filter(|g| !g.passed) {
            failed.push(FailedNode {
                node: name.clone(),
                gate: g.gate.clone(),
                summary: g.summary.clone(),
                evidence: g.evidence.clone(),
                injected: d.degraded().contains_key(name),
            });
        }
    }
    let exposed: Vec<&String> = st
        .nodes
        .iter()
        .filter(|(_, p)| p.nics.values().any(|ph| *ph == crate::exec::NicPhase::Flashed))
        .map(|(n, _)| n)
        .collect();
    let exposed_bad = exposed.iter().filter(|n| d.degraded().contains_key(**n)).count();
    let flashed_twice = d
        .flashes()
        .into_iter()
        .filter(|(_, c)| *c > 1)
        .map(|(n, _)| n)
        .collect();
    let log = store.events()?;
    let elapsed_s = log
        .last()
        .map(|e| (e.ts_ms - SIM_EPOCH_MS) as f64 / 1000.0)
        .unwrap_or(0.0);
    let report = SimReport {
        nodes: fleet.nodes.len(),
        waves: plan.waves.len(),
        degraded,
        first_bad_wave,
        halted_wave: halted.as_ref().and_then(|h| h.wave),
        halt_reason: halted.map(|h| h.reason),
        failed,
        exposed_nodes: exposed.len(),
        exposed_bad,
        elapsed_s,
        flashed_twice,
        log,
    };
    Ok((plan, report))
}

impl SimReport {
    /// The report as text.
    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Fleet simulation: {} nodes, {} waves planned, {} injected bad node(s) (first in wave {})",
            self.nodes,
            self.waves,
            self.degraded.len(),
            self.first_bad_wave
                .map(|w| w.to_string())
                .unwrap_or_else(|| "-".into())
        );
        match (&self.halted_wave, &self.halt_reason) {
            (Some(w), Some(r)) => {
                let _ = writeln!(s, "Halted at wave {w}: {r}");
            }
            _ => {
                let _ = writeln!(s, "Completed: every wave passed its gates");
            }
        }
        let _ = writeln!(
            s,
            "Exposed: {} node(s) run the new firmware, {} of them bad; {:.1} h simulated",
            self.exposed_nodes,
            self.exposed_bad,
            self.elapsed_s / 3600.0
        );
        for f in &self.failed {
            let _ = writeln!(
                s,
                "  {} {} gate: {}{}",
                f.node,
                f.gate,
                f.summary,
                if f.injected {
                    " [injected]"
                } else {
                    " [NOT injected]"
                }
            );
            for e in &f.evidence {
                let _ = writeln!(s, "      {e}");
            }
        }
        if !self.flashed_twice.is_empty() {
            let _ = writeln!(s, "FLASHED TWICE: {}", self.flashed_twice.join(", "));
        }
        s
    }

    /// The report as JSON (log left out).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
