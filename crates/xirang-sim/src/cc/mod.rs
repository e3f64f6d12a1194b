//! Congestion control reaction points: DCQCN, TIMELY, HPCC and DCTCP, as pure state
//! machines that the engine drives with events (CNP arrivals, timers, bytes sent, ACKs
//! with RTT samples, INT records or ECN echoes).
//!
//! Each follows docs/reference/congestion-control.md (one module per algorithm; HPCC's INT
//! records live with HPCC); where the reference leaves a choice
//! open, the HPCC ns-3 simulator's choice is taken (it is the simulator Xirang is validated
//! against) and the comment says so.

mod dcqcn;
mod dctcp;
mod hpcc;
mod timely;

pub use dcqcn::{Dcqcn, DcqcnState, Increase};
pub use dctcp::{Dctcp, DctcpState};
pub use hpcc::{Hpcc, HpccState, int};
pub use timely::{Timely, TimelyState};

/// Bytes a window-limited QP may have in flight at `rate_bps`: the line-rate window
/// scaled by the rate (the simulator's VAR_WIN), at least one byte.
pub fn var_window(win_bytes: u64, rate_bps: f64, max_bps: f64) -> u64 {
    ((win_bytes as f64 * rate_bps / max_bps) as u64).max(1)
}
