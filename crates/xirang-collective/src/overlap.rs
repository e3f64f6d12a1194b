//! Gradient-bucket overlap planner: how DDP-style training overlaps the AllReduce of
//! gradient buckets with the rest of the backward pass, and which bucket size is fastest.
//!
//! The model of one iteration:
//! - forward, then the backward pass layer by layer in reverse order; while a layer's
//!   backward runs, its gradients become ready evenly (autograd hooks fire tensor by tensor);
//! - gradients fill buckets in the order they become ready: the first bucket holds
//!   `first_bucket_bytes` (PyTorch DDP starts with a small one so that communication begins
//!   early), every later one `bucket_bytes`; a bucket is all-reduced as soon as it is full,
//!   the last, partial one when the backward pass ends;
//! - AllReduces run one at a time, in bucket order, on their own stream, each taking the
//!   time the cost model gives for its size; they do not slow the compute (NCCL kernels do
//!   take some SMs: not modelled);
//! - the optimizer step starts when the backward pass and the last AllReduce are both done.
//!
//! Simplification: buckets close at exactly their size, where PyTorch closes them at the
//! first tensor boundary past it; with tensors of 34-90 MB (a 7B transformer) that moves a
//! bucket's edge by at most one tensor.

use std::path::Path;

use serde::{Deserialize, Serialize};
use xirang_fabric::diag::KeyPath;

use crate::input::{self, InputError};

/// PyTorch DDP's `bucket_cap_mb` default, 25 MiB (docs/reference/collectives-and-nccl.md §6).
pub const PYTORCH_DEFAULT_BUCKET_BYTES: u64 = 25 * 1024 * 1024;
/// PyTorch DDP's first bucket, 1 MiB (`dist._DEFAULT_FIRST_BUCKET_BYTES`, same section).
pub const PYTORCH_FIRST_BUCKET_BYTES: u64 = 1024 * 1024;

/// One layer of the model, in forward order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// Name, for reports.
    pub name: String,
    /// Backward compute time, µs.
    pub backward_us: f64,
    /// Bytes of gradient the layer produces (parameters x bytes per gradient element).
    pub grad_bytes: u64,
}

/// A model's training step, as the planner needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// Model name.
    pub name: String,
    /// Where the figures come from.
    #[serde(default)]
    pub description: String,
    /// Forward pass, µs.
    pub forward_us: f64,
    /// Optimizer step after the gradients are reduced, µs.
    #[serde(default)]
    pub optimizer_us: f64,
    /// Layers in forward order (the backward pass runs them last to first).
    #[serde(rename = "layer")]
    pub layers: Vec<Layer>,
}

/// Longest time a model file may give a step of an iteration: one hour (docs/limits.md),
/// far above any layer's backward pass; `1e300` µs once passed.
const MAX_US: f64 = xirang_fabric::limits::MAX_SIM_TIME_US;
/// Shortest backward pass of a layer: 1 ps, the simulator's tick (`1e-300` once passed).
const MIN_US: f64 = xirang_fabric::limits::MIN_PERIOD_US;
use xirang_fabric::limits::Num;

impl ModelFile {
    /// Reads and checks a model file.
    pub fn load(path: &Path) -> Result<ModelFile, InputError> {
        ModelFile::parse(&input::read(path)?, path)
    }

    /// Parses and checks model file text.
    pub fn parse(text: &str, path: &Path) -> Result<ModelFile, InputError> {
        let parsed = input::parse::<ModelFile>(text, path)?;
        let m = &parsed.value;
        let root = KeyPath::root();
        for (key, v) in [("forward_us", m.forward_us), ("optimizer_us", m.optimizer_us)] {
            if !(v.is_finite() && (0.0..=MAX_US).contains(&v)) {
                return Err(parsed.error_at(
                    &root.key(key),
                    format!(
                        "{key}: expected a time of 0..={MAX_US:e} µs (one hour), found {}",
                        Num(v)
                    ),
                ));
            }
        }
        if m.layers.is_empty() {
            return Err(parsed.error_at(&root.key("layer"), "expected at least one [[layer]]".to_string()));
        }
        for (i, l) in m.layers.iter().enumerate() {
            if !(l.backward_us.is_finite() && l.backward_us >= MIN_US && l.backward_us <= MAX_US) {
                return Err(parsed.error_at(
                    &root.key("layer").index(i).key("backward_us"),
                    format!(
                        "layer[{i}].backward_us: expected a time of {MIN_US:e}..={MAX_US:e} µs (1 ps to one hour), found {}",
                        Num(l.backward_us)
                    ),
                ));
            }
        }
        // The bucket plan walks the gradient bucket by bucket: a total beyond the
        // largest transfer a scenario may have (1 TiB, docs/limits.md) is a typo, and
        // one beyond a u64 once wrapped to a single byte.
        let max = xirang_fabric::limits::MAX_TRANSFER_BYTES;
        let mut total = 0u64;
        for (i, l) in m.layers.iter().enumerate() {
            if l.grad_bytes > max {
                return Err(parsed.error_at(
                    &root.key("layer").index(i).key("grad_bytes"),
                    format!(
                        "layer[{i}].grad_bytes: expected at most {max} bytes (1 TiB, the largest collective buffer), found {}",
                        l.grad_bytes
                    ),
                ));
            }
            total = total.saturating_add(l.grad_bytes);
        }
        if total > max {
            return Err(parsed.error_at(
                &root.key("layer"),
                format!("the layers' gradients total more than {max} bytes (1 TiB, the largest collective buffer): expected a model's gradient, found {} layers summing past it", m.layers.len()),
            ));
        }
        if m.total_grad_bytes() == 0 {
            return Err(parsed.error_at(
                &root.key("layer"),
                "the layers have no gradient bytes in total".to_string(),
            ));
        }
        Ok(parsed.value)
    }

    /// Gradient bytes of the whole model.
    pub fn total_grad_bytes(&self) -> u64 {
        self.layers.iter().map(|l| l.grad_bytes).sum()
    }

    /// Backward pass, µs.
    pub fn backward_us(&self) -> f64 {
        self.layers.iter().map(|l| l.backward_us).sum()
    }
}

/// One bucket's AllReduce.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BucketRun {
    /// Bytes.
    pub bytes: u64,
    /// When its last gradient was ready, µs from the start of the backward pass.
    pub ready_us: f64,
    /// AllReduce start, µs.
    pub start_us: f64,
    /// AllReduce end, µs.
    pub end_us: f64,
}

/// One bucket size evaluated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Bucket size (after the first bucket), bytes.
    pub bucket_bytes: u64,
    /// Number of buckets.
    pub buckets: usize,
    /// Forward + backward/communication + optimizer, µs.
    pub iteration_us: f64,
    /// Communication after the backward pass ended, µs.
    pub exposed_comm_us: f64,
    /// Time all AllReduces take together, µs.
    pub comm_us: f64,
    /// Per bucket.
    #[serde(skip)]
    pub runs: Vec<BucketRun>,
}

/// Evaluates one bucket size. `allreduce_us` gives an AllReduce's time for a size.
pub fn plan(
    model: &ModelFile,
    bucket_bytes: u64,
    first_bucket_bytes: u64,
    allreduce_us: &dyn Fn(u64) -> f64,
) -> Plan {
    let bucket_bytes = bucket_bytes.max(1);
    // Gradient production: piecewise linear over the backward pass, last layer first.
    let mut segments: Vec<(f64, f64, u64)> = Vec::new(); // (start_us, duration_us, bytes)
    let mut t = 0.0;
    for l in model.layers.iter().rev() {
        segments.push((t, l.backward_us, l.grad_bytes));
        t += l.backward_us;
    }
    let backward_end = t;
    let total = model.total_grad_bytes();
    // Time at which `bytes` of gradient have been produced.
    let produced_by = |bytes: u64| -> f64 {
        let mut acc = 0u64;
        for &(start, dur, b) in &segments {
            if b > 0 && acc + b >= bytes {
                let frac = (bytes - acc) as f64 / b as f64;
                return start + dur * frac;
            }
            acc += b;
        }
        backward_end
    };
    let mut runs = Vec::new();
    let mut filled = 0u64;
    let mut comm_free = 0.0f64;
    let mut comm_us = 0.0;
    while filled < total {
        let cap = if runs.is_empty() {
            first_bucket_bytes.clamp(1, bucket_bytes)
        } else {
            bucket_bytes
        };
        let bytes = cap.min(total - filled);
        filled += bytes;
        // The last bucket waits for the end of the backward pass (DDP flushes it then).
        let ready = if filled == total {
            backward_end
        } else {
            produced_by(filled)
        };
        let d = allreduce_us(bytes);
        let start = ready.max(comm_free);
        comm_free = start + d;
        comm_us += d;
        runs.push(BucketRun {
            bytes,
            ready_us: ready,
            start_us: start,
            end_us: comm_free,
        });
    }
    let done = backward_end.max(comm_free);
    Plan {
        bucket_bytes,
        buckets: runs.len(),
        iteration_us: model.forward_us + done + model.optimizer_us,
        exposed_comm_us: done - backward_end,
        comm_us,
        runs,
    }
}

/// Bucket sizes to try: powers of the square root of 2 from 1 MiB up to the whole gradient
/// (one bucket), plus the PyTorch default.
pub fn sweep_sizes(total_grad_bytes: u64) -> Vec<u64> {
    const MIB: f64 = 1024.0 * 1024.0;
    let mut v: Vec<u64> = (0..)
        .map(|k| (MIB * 2f64.powf(f64::from(k) / 2.0)) as u64)
        .take_while(|b| *b < total_grad_bytes)
        .collect();
    v.push(total_grad_bytes.max(1));
    v.push(PYTORCH_DEFAULT_BUCKET_BYTES);
    v.sort_unstable();
    v.dedup();
    v
}

/// The sweep and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sweep {
    /// Every size tried, ascending.
    pub plans: Vec<Plan>,
    /// Index of the fastest.
    pub best: usize,
    /// Index of the PyTorch default (25 MiB).
    pub default: usize,
    /// Compute alone (no communication at all), µs.
    pub compute_only_us: f64,
}

/// Evaluates every size of [`sweep_sizes`].
pub fn sweep(model: &ModelFile, first_bucket_bytes: u64, allreduce_us: &dyn Fn(u64) -> f64) -> Sweep {
    let plans: Vec<Plan> = sweep_sizes(model.total_grad_bytes())
        .into_iter()
        .map(|b| plan(model, b, first_bucket_bytes, allreduce_us))
        .collect();
    let best = (0..plans.len())
        .min_by(|a, b| plans[*a].iteration_us.total_cmp(&plans[*b].iteration_us))
        .expect("at least one size");
    let default = plans
        .iter()
        .position(|p| p.bucket_bytes == PYTORCH_DEFAULT_BUCKET_BYTES)
        .expect("the default is always swept");
    Sweep {
        plans,
        best,
        default,
        compute_only_us: model.forward_us + model.backward_us() + model.optimizer_us,
    }
}
