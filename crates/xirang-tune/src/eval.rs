//! Judging a configuration: run the scenario in the simulator, read the application
//! metrics of every traffic class, check the constraints, and score it against the
//! vendor baseline run on the same seed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use xirang_fabric::Loaded;
use xirang_fabric::built::Model;
use xirang_fabric::config::FabricConfig;
use xirang_fabric::workload::Workload;
use xirang_sim::time::{PS_PER_US, us};
use xirang_sim::{RunResult, simulate_model};

/// Application metrics of one traffic class in one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassMetrics {
    /// Mean completion time of the class's collectives, µs.
    pub collective_us: Option<f64>,
    /// p99 request latency of the class's inference workloads, µs.
    pub p99_us: Option<f64>,
    /// p99.9 request latency, µs.
    pub p999_us: Option<f64>,
    /// p99 FCT slowdown of the class's other flows.
    pub slowdown_p99: Option<f64>,
    /// Time to first token of the class's KV-transfer workloads (queueing, prefill and
    /// KV transfer), median and p99 over requests, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p50_us: Option<f64>,
    /// p99 time to first token, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p99_us: Option<f64>,
    /// Time per output token of the class's MoE workloads (a decode step: compute and its
    /// all-to-alls), median over (step, GPU), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p50_us: Option<f64>,
    /// p99 time per output token, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p99_us: Option<f64>,
}

/// What one simulation says about a configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    /// Per traffic class.
    pub classes: BTreeMap<String, ClassMetrics>,
    /// Every flow, collective and request finished before the time cap.
    pub finished: bool,
    /// Packets dropped in lossless (PFC) priorities.
    pub lossless_drops: u64,
    /// Paused transmitter time over (run time x ports).
    pub pause_ratio: f64,
    /// PFC frames sent.
    pub pfc_frames: u64,
    /// ECN marks.
    pub ecn_marks: u64,
    /// Simulated time, µs.
    pub sim_us: f64,
}

/// A score relative to the vendor baseline on the same seed: 1.0 is the vendor's, lower
/// is better.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// What the search ranks by: the relative objective, plus [`INFEASIBLE`] and the size
    /// of the violation when a constraint is broken.
    pub objective: f64,
    /// The weighted metric ratio alone (what a report shows next to the violations).
    pub relative: f64,
    /// Per class: its metric relative to the vendor's.
    pub classes: BTreeMap<String, f64>,
    /// Why the run breaks a constraint, if it does.
    pub violation: Option<String>,
}

/// Score of an infeasible configuration: far above any feasible one, so that the search
/// moves away, and still ordered by how badly it fails.
pub const INFEASIBLE: f64 = 1000.0;

/// Weights of the two latency percentiles in an inference class's metric: p99 is the SLO,
/// p99.9 the tail behind it (MISSION 4.2; our split).
const P99_WEIGHT: f64 = 0.7;
const P999_WEIGHT: f64 = 0.3;
/// Weights of the two percentiles in a serving class's TTFT or TPOT metric: serving SLOs
/// are set at the median and a tail percentile (DistServe's 90/99 % attainment,
/// Splitwise's p50/p90/p99; docs/reference/llm-inference-traffic.md §3), the tail weighing
/// more as for request latency.
const SERVING_P99_WEIGHT: f64 = 0.7;
const SERVING_P50_WEIGHT: f64 = 0.3;

/// Which metrics a class has, from the workloads that use it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ClassKinds {
    /// Has a collective workload.
    pub collective: bool,
    /// Has an inference workload.
    pub inference: bool,
    /// Has plain flows (flows, incast, permutation, all-to-all, HPCC flows).
    pub flows: bool,
    /// Has a MoE all-to-all workload (its metric: time per output token).
    pub moe: bool,
    /// Has a KV-transfer workload (its metric: time to first token).
    pub kv: bool,
}

/// Judges configurations of one scenario.
#[derive(Debug)]
pub struct Evaluator<'a> {
    base: &'a Loaded,
    /// Metrics each class contributes.
    pub kinds: BTreeMap<String, ClassKinds>,
    /// Weight per class (the scenario's, or 1 for every class with a workload).
    pub weights: BTreeMap<String, f64>,
    max_pause_ratio: f64,
    ports: usize,
}

impl<'a> Evaluator<'a> {
    /// An evaluator for `base`.
    pub fn new(base: &'a Loaded) -> Evaluator<'a> {
        let mut kinds: BTreeMap<String, ClassKinds> = BTreeMap::new();
        for w in base.scenario.workloads.values() {
            let k = kinds.entry(w.class().to_string()).or_default();
            match w {
                Workload::Collective(_) => k.collective = true,
                Workload::Inference(_) => k.inference = true,
                Workload::Moe(_) => k.moe = true,
                Workload::KvTransfer(_) => k.kv = true,
                _ => k.flows = true,
            }
        }
        let spec = &base.scenario.tune;
        let weights = if spec.weights.is_empty() {
            kinds.keys().map(|c| (c.clone(), 1.0)).collect()
        } else {
            spec.weights.clone()
        };
        Evaluator {
            base,
            kinds,
            weights,
            max_pause_ratio: spec.max_pause_ratio,
            ports: 2 * base.fabric.links.len(),
        }
    }

    /// The scenario being tuned.
    pub fn loaded(&self) -> &Loaded {
        self.base
    }

    /// Runs `config` on run seed `seed`, stopping at `cap_us` of simulated time if given.
    pub fn run(&self, config: &FabricConfig, seed: u64, cap_us: Option<f64>) -> RunMetrics {
        let mut opts = xirang_sim::options(self.base);
        opts.seed = seed;
        opts.end = cap_us.map(us);
        opts.sample_interval = None;
        let r = simulate_model(self.variant(config), &opts, &mut |_| {});
        self.metrics(self.base, &r)
    }

    /// Runs `config` as [`Evaluator::run`] does and returns the whole result, sampled every
    /// `sample_us` (for the report's time series).
    pub fn run_full(&self, config: &FabricConfig, seed: u64, sample_us: f64) -> RunResult {
        let mut opts = xirang_sim::options(self.base);
        opts.seed = seed;
        opts.sample_interval = Some(us(sample_us));
        simulate_model(self.variant(config), &opts, &mut |_| {})
    }

    /// The scenario with `config`, borrowed: a candidate changes only the configuration,
    /// so a run copies neither the fabric nor the workloads.
    ///
    /// Runs are never shortened: shrinking the collectives (and the inference traffic with
    /// them) to a quarter ranked candidates poorly against full runs on the default
    /// scenario (Spearman 0.28 over 24 random candidates, 0.15 at half size, against 0.60
    /// for a single full run), because shorter flows never reach the congestion-control
    /// steady state that full runs are judged on. The search's cheap rounds therefore use
    /// fewer seeds, not shorter runs.
    fn variant<'c>(&'c self, config: &'c FabricConfig) -> Model<'c> {
        Model {
            config,
            ..self.base.model()
        }
    }

    fn metrics(&self, loaded: &Loaded, r: &RunResult) -> RunMetrics {
        let s = r.summary();
        let mut classes: BTreeMap<String, ClassMetrics> = BTreeMap::new();
        let mut finished = r.flows.iter().all(|f| f.fct_ps.is_some());
        // Collectives: mean time per class.
        let mut coll: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for c in &s.collectives {
            finished &= c.finished;
            let class = loaded
                .scenario
                .workloads
                .get(&c.workload)
                .map_or("", |w| w.class())
                .to_string();
            if let Some(t) = c.time_ps {
                coll.entry(class).or_default().push(t as f64 / PS_PER_US as f64);
            }
        }
        for (class, ts) in coll {
            classes.entry(class).or_default().collective_us = Some(ts.iter().sum::<f64>() / ts.len() as f64);
        }
        for l in &s.latency {
            finished &= l.answered == l.requests;
            let m = classes.entry(l.class.clone()).or_default();
            m.p99_us = max_opt(m.p99_us, l.p99_us);
            m.p999_us = max_opt(m.p999_us, l.p999_us);
        }
        for m in &s.moe {
            finished &= m.finished;
            let c = classes.entry(m.class.clone()).or_default();
            c.tpot_p50_us = max_opt(c.tpot_p50_us, m.step.p50_us);
            c.tpot_p99_us = max_opt(c.tpot_p99_us, m.step.p99_us);
        }
        for k in &s.kv {
            finished &= k.transferred == k.requests;
            let c = classes.entry(k.class.clone()).or_default();
            c.ttft_p50_us = max_opt(c.ttft_p50_us, k.ttft.p50_us);
            c.ttft_p99_us = max_opt(c.ttft_p99_us, k.ttft.p99_us);
        }
        for c in &s.classes {
            if self.kinds.get(&c.class).is_some_and(|k| k.flows) {
                classes.entry(c.class.clone()).or_default().slowdown_p99 = c.slowdown_p99;
            }
        }
        let lossless: Vec<u8> = r.priorities_with_pfc.clone();
        let lossless_drops = r
            .counters
            .iter()
            .filter(|c| c.name == "SAI_QUEUE_STAT_DROPPED_PACKETS")
            .filter(|c| {
                c.entity
                    .rsplit_once("/q")
                    .and_then(|(_, q)| q.parse::<u8>().ok())
                    .is_some_and(|q| lossless.contains(&q))
            })
            .map(|c| c.value)
            .sum();
        let sim_us = r.stats.sim_time_ps as f64 / PS_PER_US as f64;
        RunMetrics {
            classes,
            finished,
            lossless_drops,
            pause_ratio: s.pfc_pause_us / (sim_us.max(1e-9) * self.ports.max(1) as f64),
            pfc_frames: s.pfc_frames,
            ecn_marks: s.ecn_marks,
            sim_us,
        }
    }

    /// Scores `m` against the vendor baseline's run `reference` on the same seed.
    pub fn score(&self, m: &RunMetrics, reference: &RunMetrics) -> Score {
        let mut violation = None;
        let mut penalty = 0.0;
        if !m.finished {
            violation = Some("did not finish before the time cap (PFC deadlock or starvation)".to_string());
            penalty += 3.0;
        }
        if m.lossless_drops > 0 {
            violation.get_or_insert_with(|| {
                format!("{} packets dropped in lossless priorities", m.lossless_drops)
            });
            penalty += 2.0;
        }
        if m.pause_ratio > self.max_pause_ratio {
            violation.get_or_insert_with(|| {
                format!(
                    "PFC pause ratio {:.3} above the budget {:.3}",
                    m.pause_ratio, self.max_pause_ratio
                )
            });
            penalty += 1.0 + m.pause_ratio;
        }
        let mut classes = BTreeMap::new();
        let (mut total, mut weight) = (0.0, 0.0);
        for (class, w) in &self.weights {
            let (Some(a), Some(b)) = (m.classes.get(class), reference.classes.get(class)) else {
                continue;
            };
            let Some(r) = class_ratio(a, b) else { continue };
            classes.insert(class.clone(), r);
            total += w * r;
            weight += w;
        }
        let relative = if weight > 0.0 { total / weight } else { 1.0 };
        let objective = if violation.is_some() {
            INFEASIBLE + penalty + relative
        } else {
            relative
        };
        Score {
            objective,
            relative,
            classes,
            violation,
        }
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// A class's metric relative to the reference's: the mean of the ratios it has.
fn class_ratio(a: &ClassMetrics, b: &ClassMetrics) -> Option<f64> {
    let ratio = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    };
    let mut parts = Vec::new();
    if let Some(r) = ratio(a.collective_us, b.collective_us) {
        parts.push(r);
    }
    match (ratio(a.p99_us, b.p99_us), ratio(a.p999_us, b.p999_us)) {
        (Some(p), Some(q)) => parts.push(P99_WEIGHT * p + P999_WEIGHT * q),
        (Some(p), None) => parts.push(p),
        _ => {}
    }
    if let Some(r) = ratio(a.slowdown_p99, b.slowdown_p99) {
        parts.push(r);
    }
    for (p50, p99) in [
        (
            ratio(a.ttft_p50_us, b.ttft_p50_us),
            ratio(a.ttft_p99_us, b.ttft_p99_us),
        ),
        (
            ratio(a.tpot_p50_us, b.tpot_p50_us),
            ratio(a.tpot_p99_us, b.tpot_p99_us),
        ),
    ] {
        match (p50, p99) {
            (Some(m), Some(t)) => parts.push(SERVING_P50_WEIGHT * m + SERVING_P99_WEIGHT * t),
            (Some(x), None) | (None, Some(x)) => parts.push(x),
            (None, None) => {}
        }
    }
    (!parts.is_empty()).then(|| parts.iter().sum::<f64>() / parts.len() as f64)
}
