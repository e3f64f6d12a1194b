//! Xirang diagnosis: says whether a communication slowdown is a NIC, a link, a switch or
//! the application's configuration, with the root cause, the impact scope, repair advice
//! and the evidence (docs/reference/diagnosis.md).
//!
//! [`nccl`] diagnoses from nccl-tests logs alone (aborts, socket transport, GPUDirect
//! RDMA off, GPUs sharing a NIC, slow or failing node pairs); [`ras`] from NCCL RAS
//! reports (dead, unreachable and behind ranks, communicators whose ranks disagree).
//! [`window`] (links),
//! [`port_rules`] (ports, queues, NICs) and [`balance`] (ECMP spread, hosts that cannot feed
//! their NICs) read a telemetry window that [`source`] takes from the monitor's history,
//! a Prometheus server or a simulator's output. The fault-injection suite that proves every
//! rule on faults injected in the simulator is the `xirang-suite` crate: this one does
//! not depend on the simulator.

pub mod balance;
pub mod bundle;
pub mod finding;
pub mod impact;
pub mod inventory_join;
pub mod nccl;
pub mod paths;
pub mod port_rules;
pub mod ras;
mod ras_json;
pub mod request;
pub mod source;
pub mod window;

pub use finding::{Class, Evidence, Finding, Severity};
