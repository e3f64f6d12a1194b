//! Collective communication for Xirang: how collectives move bytes ([`schedule`]), what
//! they should cost ([`cost`], NCCL's own tuning model), what real runs measured
//! ([`nccl_tests`]), and the advice built on them. [`program`] is what NCCL's kernels
//! run, rank by rank and slice by slice, for simulations of collectives over thousands of
//! ranks.
//!
//! ```
//! use xirang_collective::schedule::{build, CollectiveAlgorithm, CollectiveOp, Shape};
//!
//! let shape = Shape { ranks: 8, bytes: 1 << 20, channels: 2, chunks: 2, ranks_per_host: 1 };
//! let s = build(CollectiveOp::AllReduce, CollectiveAlgorithm::Ring, shape).unwrap();
//! s.verify().unwrap();
//! // Ring AllReduce sends 2(n-1)/n of the buffer from every rank.
//! assert!(s.bytes_sent_per_rank().iter().all(|b| *b == 2 * 7 * (1 << 20) / 8));
//! ```

pub mod advise;
pub mod batching;
pub mod check;
pub mod cost;
pub mod input;
pub mod nccl_tests;
pub mod overlap;
pub mod program;
pub mod schedule;
pub mod tuner_csv;
