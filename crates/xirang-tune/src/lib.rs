//! Xirang's tuner: find the congestion-control, ECN and transport settings that make a
//! scenario fastest by its application metrics (collective completion time, inference
//! tail latency, FCT slowdown), judged in the packet simulator against vendor defaults.
//!
//! - [`space`]: what is searched (built-in ranges with their sources, or the scenario's
//!   `[tune]` section) and the baselines;
//! - [`eval`]: one simulation → metrics → a score relative to the vendor on the same seed,
//!   with the constraints (no lossless drops, a PFC pause budget, no deadlock);
//! - [`search`]: TPE proposals with successive halving, parallel and deterministic;
//! - [`store`]: the SQLite trial log that makes a killed tune resumable.

pub mod eval;
pub mod layout;
pub mod render;
pub mod report;
pub mod search;
pub mod space;
pub mod stats;
pub mod store;
