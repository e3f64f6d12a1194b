//! Xirang diagnosis: says whether a communication slowdown is a NIC, a link, a switch or
//! the application's configuration, with the root cause, the impact scope, repair advice
//! and the evidence (shared/reference/diagnosis.md).
//!
//! Today: [`nccl`], diagnosis from nccl-tests logs alone (aborts, socket transport,
//! GPUDirect RDMA off, GPUs sharing a NIC, slow or failing node pairs), and [`counters`],
//! link rules over a telemetry window read by [`source`] from the monitor's history or a
//! Prometheus server. More counter rules, the simulator's fault injection and the
//! confusion matrix are the rest of issue 9.

pub mod bundle;
pub mod counters;
pub mod finding;
pub mod nccl;
pub mod rules;
pub mod source;
pub mod suite;

pub use finding::{Class, Evidence, Finding, Severity};
