//! Integration tests: they run the real `xirang` binary.
//!
//! - `util`: the harness (a temp dir, a command, readable failures).
//! - `topo`, `scenario`, `sim`: one module per command family; `report`: snapshots of
//!   the human-readable reports.

mod calibrate;
mod diagnose;
mod fuzz_inputs;
mod guides;
mod host;
mod inputs;
mod memreg;
mod monitor;
mod nccl;
mod plan;
mod probe;
mod report;
mod rollout;
mod scenario;
mod semantic;
mod sim;
mod sonic;
mod topo;
mod tune;
mod util;
