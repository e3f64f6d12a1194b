//! Xirang diagnosis: says whether a communication slowdown is a NIC, a link, a switch or
//! the application's configuration, with the root cause, the impact scope, repair advice
//! and the evidence (shared/reference/diagnosis.md).
//!
//! Today: [`nccl`], diagnosis from nccl-tests logs alone (aborts, socket transport,
//! GPUDirect RDMA off, GPUs sharing a NIC, slow or failing node pairs). Telemetry-based
//! localisation and fault injection in the simulator are the rest of issue 9.

pub mod finding;
pub mod nccl;

pub use finding::{Class, Evidence, Finding, Severity};
