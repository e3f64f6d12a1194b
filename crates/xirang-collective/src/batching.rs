//! Inference batching planner: the batching window and maximum batch that serve the most
//! requests per second within a p99 latency SLO, for a tensor-parallel model whose every
//! forward step runs collectives across its GPUs.
//!
//! The model of serving:
//! - requests arrive as a Poisson process (seeded, so results are reproducible);
//! - one tensor-parallel group serves batches one at a time; a batch starts when the group
//!   is free and either `max_batch` requests wait or the oldest has waited `window_us`
//!   (dynamic batching as in Triton or vLLM's scheduler, without preemption);
//! - a batch of b requests takes `compute(b)` = base + b x per-request compute, plus
//!   `collectives_per_step` collectives, aggregated one of three ways:
//!   per-request (b AllReduces of one request's payload), batched (one AllReduce of b
//!   payloads) or sharded (a reduce-scatter then an all-gather of b payloads, as sequence
//!   parallelism splits them);
//! - a request's latency is its queueing plus its batch's service time.

use std::path::Path;

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use xirang_fabric::diag::KeyPath;

use crate::cost::{Coll, Platform, choose};
use crate::input::{self, InputError};

/// The serving workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingFile {
    /// Name.
    pub name: String,
    /// Where the figures come from.
    #[serde(default)]
    pub description: String,
    /// Mean request arrival rate, per second.
    pub arrival_rate_per_s: f64,
    /// Latency objective: the 99th percentile, µs.
    pub slo_p99_us: f64,
    /// Bytes each request contributes to each tensor-parallel collective (tokens x hidden
    /// size x bytes per element).
    pub payload_bytes: u64,
    /// Collectives per forward step (two per transformer layer in Megatron-style TP).
    pub collectives_per_step: u32,
    /// GPUs in the tensor-parallel group.
    pub tp_ranks: u32,
    /// Compute of a step independent of the batch (reading the weights), µs.
    pub compute_base_us: f64,
    /// Compute added per request in the batch, µs.
    pub compute_per_request_us: f64,
}

impl ServingFile {
    /// Reads and checks a serving file.
    pub fn load(path: &Path) -> Result<ServingFile, InputError> {
        ServingFile::parse(&input::read(path)?, path)
    }

    /// Parses and checks serving file text.
    pub fn parse(text: &str, path: &Path) -> Result<ServingFile, InputError> {
        let parsed = input::parse::<ServingFile>(text, path)?;
        let f = &parsed.value;
        let at = |k: &str| KeyPath::root().key(k);
        let positive = [
            ("arrival_rate_per_s", f.arrival_rate_per_s),
            ("slo_p99_us", f.slo_p99_us),
            ("compute_base_us", f.compute_base_us),
        ];
        // Times within an hour (docs/limits.md); a rate at most a billion requests a
        // second, a thousand times the largest serving fleets' (1e300 once passed).
        for (k, v) in positive {
            let max = if k == "arrival_rate_per_s" {
                MAX_ARRIVALS_PER_S
            } else {
                xirang_fabric::limits::MAX_SIM_TIME_US
            };
            let min = if k == "arrival_rate_per_s" {
                MIN_ARRIVALS_PER_S
            } else {
                xirang_fabric::limits::MIN_PERIOD_US
            };
            if !(v.is_finite() && v >= min && v <= max) {
                return Err(parsed.error_at(
                    &at(k),
                    format!(
                        "{k}: expected a number of {}..={max:e}, found {}",
                        xirang_fabric::limits::Num(min),
                        xirang_fabric::limits::Num(v)
                    ),
                ));
            }
        }
        if !(f.compute_per_request_us.is_finite()
            && (0.0..=xirang_fabric::limits::MAX_SIM_TIME_US).contains(&f.compute_per_request_us))
        {
            return Err(parsed.error_at(
                &at("compute_per_request_us"),
                format!(
                    "compute_per_request_us: expected 0..=3.6e9 µs (one hour), found {}",
                    f.compute_per_request_us
                ),
            ));
        }
        if f.tp_ranks < 2 {
            return Err(parsed.error_at(
                &at("tp_ranks"),
                format!("tp_ranks: expected 2 or more GPUs, found {}", f.tp_ranks),
            ));
        }
        // A batch of the largest size moves `MAX_BATCHES` payloads in one collective,
        // which must stay a transfer a fabric can carry (1 TiB, docs/limits.md).
        let largest = u64::from(*MAX_BATCHES.last().expect("batches"));
        let max_payload = xirang_fabric::limits::MAX_TRANSFER_BYTES / largest;
        if !(1..=max_payload).contains(&f.payload_bytes) {
            return Err(parsed.error_at(
                &at("payload_bytes"),
                format!(
                    "payload_bytes: expected 1..={max_payload} bytes (a batch of {largest} must stay within 1 TiB), found {}",
                    f.payload_bytes
                ),
            ));
        }
        Ok(parsed.value)
    }
}

/// Fewest requests a second: one an hour, the longest a plan's time may span.
const MIN_ARRIVALS_PER_S: f64 = 1.0 / 3600.0;
/// Most requests a second a serving file may offer.
const MAX_ARRIVALS_PER_S: f64 = 1e9;

/// How the per-request collectives of a batch are aggregated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// One AllReduce per request.
    PerRequest,
    /// One AllReduce for the whole batch.
    Batched,
    /// Reduce-scatter then all-gather of the whole batch.
    Sharded,
}

impl Aggregation {
    /// All three.
    pub const ALL: [Aggregation; 3] = [
        Aggregation::PerRequest,
        Aggregation::Batched,
        Aggregation::Sharded,
    ];

    /// Name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Aggregation::PerRequest => "per-request",
            Aggregation::Batched => "batched",
            Aggregation::Sharded => "sharded",
        }
    }
}

/// A batching policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Policy {
    /// Largest batch.
    pub max_batch: u32,
    /// Longest wait of the oldest request before a partial batch starts, µs.
    pub window_us: f64,
}

/// Step time of a batch: compute plus its collectives.
pub fn step_us(f: &ServingFile, p: &Platform, agg: Aggregation, batch: u32) -> f64 {
    let b = u64::from(batch.max(1));
    let t = |coll: Coll, bytes: u64| choose(coll, bytes, p).map_or(0.0, |x| x.time_us);
    let comm = match agg {
        Aggregation::PerRequest => b as f64 * t(Coll::AllReduce, f.payload_bytes),
        Aggregation::Batched => t(Coll::AllReduce, b * f.payload_bytes),
        Aggregation::Sharded => {
            t(Coll::ReduceScatter, b * f.payload_bytes) + t(Coll::AllGather, b * f.payload_bytes)
        }
    };
    f.compute_base_us + f.compute_per_request_us * b as f64 + f64::from(f.collectives_per_step) * comm
}

/// What one policy achieves at one arrival rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outcome {
    /// Requests served per second.
    pub throughput_per_s: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th-percentile latency, µs.
    pub p99_us: f64,
    /// Mean batch size.
    pub mean_batch: f64,
}

/// Simulates `requests` Poisson arrivals at `rate_per_s` served with `policy`, each batch of
/// b taking `step(b)` µs.
pub fn simulate(
    rate_per_s: f64,
    policy: Policy,
    requests: usize,
    seed: u64,
    step: &dyn Fn(u32) -> f64,
) -> Outcome {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mean_gap_us = 1e6 / rate_per_s;
    let mut t = 0.0;
    let arrivals: Vec<f64> = (0..requests)
        .map(|_| {
            let u = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            t += -u.ln() * mean_gap_us;
            t
        })
        .collect();
    let max_batch = policy.max_batch.max(1) as usize;
    let mut latencies = Vec::with_capacity(requests);
    let (mut next, mut free_at, mut batches) = (0usize, 0.0f64, 0usize);
    while next < arrivals.len() {
        let oldest = arrivals[next];
        let earliest = free_at.max(oldest);
        // Full batch: the max_batch-th waiting request; else the window's end.
        let full_at = arrivals
            .get(next + max_batch - 1)
            .copied()
            .unwrap_or(f64::INFINITY);
        let start = earliest.max(full_at.min(oldest + policy.window_us));
        let mut b = 0;
        while b < max_batch && next + b < arrivals.len() && arrivals[next + b] <= start {
            b += 1;
        }
        let end = start + step(b as u32);
        latencies.extend(arrivals[next..next + b].iter().map(|a| end - a));
        next += b;
        free_at = end;
        batches += 1;
    }
    let span_us = free_at - arrivals.first().copied().unwrap_or(0.0);
    latencies.sort_by(f64::total_cmp);
    let pct =
        |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1];
    Outcome {
        throughput_per_s: requests as f64 / span_us * 1e6,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        mean_batch: requests as f64 / batches.max(1) as f64,
    }
}

/// Batch sizes and windows the planner tries.
pub const MAX_BATCHES: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// Windows, µs.
pub const WINDOWS_US: [f64; 7] = [0.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0];

/// One policy's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PolicyResult {
    /// The policy.
    pub policy: Policy,
    /// At the file's arrival rate.
    pub at_rate: Outcome,
    /// Highest arrival rate (per second) at which p99 stays within the SLO, and 0 when
    /// even a trickle misses it.
    pub max_rate_per_s: f64,
}

/// The best policy for one aggregation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AggregationResult {
    /// Aggregation.
    pub aggregation: Aggregation,
    /// Step time of a batch of 1 and of the largest batch tried, µs.
    pub step_us: (f64, f64),
    /// The policy with the highest SLO-compliant rate (ties: lower p99 at the file's rate).
    pub best: PolicyResult,
    /// Per policy.
    pub policies: Vec<PolicyResult>,
}

/// Policies [`plan`] evaluates in all (for progress reports).
pub fn policy_count() -> usize {
    Aggregation::ALL.len() * MAX_BATCHES.len() * WINDOWS_US.len()
}

/// Evaluates every policy for every aggregation, `requests` per simulation; `done` is
/// called after each policy.
pub fn plan(
    f: &ServingFile,
    p: &Platform,
    requests: usize,
    seed: u64,
    done: &mut dyn FnMut(),
) -> Vec<AggregationResult> {
    Aggregation::ALL
        .iter()
        .map(|&agg| {
            // Step times for every batch size, once: the simulations call them per batch.
            let largest = *MAX_BATCHES.last().expect("batches");
            let table: Vec<f64> = (0..=largest).map(|b| step_us(f, p, agg, b)).collect();
            let step = |b: u32| table[b as usize];
            let mut policies = Vec::new();
            for &max_batch in &MAX_BATCHES {
                for &window_us in &WINDOWS_US {
                    let policy = Policy { max_batch, window_us };
                    let at_rate = simulate(f.arrival_rate_per_s, policy, requests, seed, &step);
                    let max_rate_per_s = max_rate(f.slo_p99_us, policy, requests, seed, &step);
                    policies.push(PolicyResult {
                        policy,
                        at_rate,
                        max_rate_per_s,
                    });
                    done();
                }
            }
            let best = *policies
                .iter()
                .max_by(|a, b| {
                    a.max_rate_per_s
                        .total_cmp(&b.max_rate_per_s)
                        .then(b.at_rate.p99_us.total_cmp(&a.at_rate.p99_us))
                })
                .expect("policies");
            AggregationResult {
                aggregation: agg,
                step_us: (step(1), step(largest)),
                best,
                policies,
            }
        })
        .collect()
}

/// Bisection on the arrival rate for the largest one meeting the SLO, between 0 and the
/// policy's capacity (full batches back to back).
fn max_rate(slo_us: f64, policy: Policy, requests: usize, seed: u64, step: &dyn Fn(u32) -> f64) -> f64 {
    const BISECTION_STEPS: u32 = 14;
    let capacity = f64::from(policy.max_batch) / step(policy.max_batch) * 1e6;
    let meets = |rate: f64| simulate(rate, policy, requests, seed, step).p99_us <= slo_us;
    // Latency grows with the rate once queueing dominates; at a trickle a long window can
    // dominate instead, and a policy that misses the SLO there is reported as 0.
    let floor = capacity * 1e-3;
    if !meets(floor) {
        return 0.0;
    }
    let (mut lo, mut hi) = (floor, capacity);
    for _ in 0..BISECTION_STEPS {
        let mid = 0.5 * (lo + hi);
        if meets(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

impl ServingFile {
    /// Some aggregation's best policy meets the file's p99 SLO at the offered load.
    pub fn slo_met(&self, results: &[AggregationResult]) -> bool {
        results.iter().any(|r| r.best.at_rate.p99_us <= self.slo_p99_us)
    }
}
