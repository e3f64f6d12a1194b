//! Schedule invariants over rank counts 2..64 and sizes: every schedule is acyclic and its
//! symbolic execution leaves every rank with what the operation promises; ring AllReduce
//! sends exactly 2(n-1)/n of the buffer per rank.

use proptest::prelude::*;
use xirang_collective::schedule::{CollectiveAlgorithm as A, CollectiveOp as O, Shape, build};

fn shape(ranks: u32, bytes: u64, channels: u32, chunks: u32, ranks_per_host: u32) -> Shape {
    Shape {
        ranks,
        bytes,
        channels,
        chunks,
        ranks_per_host,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_algorithm_is_correct(ranks in 2u32..=64, kib in 1u64..4096, channels in 1u32..=3, chunks in 1u32..=2) {
        let bytes = kib * 1024;
        let s = shape(ranks, bytes, channels, chunks, 1);
        for (op, alg) in [
            (O::AllReduce, A::Ring),
            (O::AllReduce, A::Tree),
            (O::AllReduce, A::HalvingDoubling),
            (O::AllGather, A::Ring),
            (O::ReduceScatter, A::Ring),
            (O::Broadcast, A::Ring),
            (O::AllToAll, A::Ring),
        ] {
            let sched = build(op, alg, s).unwrap();
            prop_assert!(sched.verify().is_ok(), "{:?}/{:?} on {} ranks: {:?}", op, alg, ranks, sched.verify());
            // All-to-all: every rank's buffer is the full size (nccl-tests' convention).
            let total = if op == O::AllToAll { bytes * u64::from(ranks) } else { bytes };
            prop_assert_eq!(sched.piece_bytes.iter().sum::<u64>(), total);
        }
    }

    #[test]
    fn ring_all_reduce_sends_2_n_minus_1_over_n(ranks in 2u32..=64, blocks in 1u64..2000, channels in 1u32..=4, chunks in 1u32..=3) {
        // A buffer that splits evenly, so the formula is exact.
        let bytes = blocks * u64::from(ranks * channels * chunks);
        let sched = build(O::AllReduce, A::Ring, shape(ranks, bytes, channels, chunks, 1)).unwrap();
        let expect = 2 * u64::from(ranks - 1) * bytes / u64::from(ranks);
        prop_assert!(sched.bytes_sent_per_rank().iter().all(|b| *b == expect));
        prop_assert_eq!(sched.depth(), 2 * (ranks - 1));
    }

    #[test]
    fn gather_scatter_and_all_to_all_send_n_minus_1_over_n(ranks in 2u32..=64, blocks in 1u64..2000, channels in 1u32..=4) {
        let bytes = blocks * u64::from(ranks * channels);
        let expect = u64::from(ranks - 1) * bytes / u64::from(ranks);
        for op in [O::AllGather, O::ReduceScatter, O::AllToAll] {
            let sched = build(op, A::Ring, shape(ranks, bytes, channels, 1, 1)).unwrap();
            prop_assert!(sched.bytes_sent_per_rank().iter().all(|b| *b == expect), "{:?}", op);
        }
    }

    #[test]
    fn hierarchical_is_correct(hosts in 1u32..=8, per_host in 1u32..=8, kib in 1u64..1024, channels in 1u32..=2, chunks in 1u32..=2) {
        let ranks = hosts * per_host;
        prop_assume!(ranks >= 2);
        let sched = build(O::AllReduce, A::Hierarchical, shape(ranks, kib * 1024, channels, chunks, per_host)).unwrap();
        prop_assert!(sched.verify().is_ok(), "{:?}", sched.verify());
        // Inter-host transfers only join ranks with the same local index (one rail).
        for t in &sched.transfers {
            if t.src / per_host != t.dst / per_host {
                prop_assert_eq!(t.src % per_host, t.dst % per_host);
            }
        }
    }
}

#[test]
fn broken_schedules_are_caught() {
    let mut s = build(O::AllReduce, A::Ring, shape(4, 4096, 1, 1, 1)).unwrap();
    // Drop the last all-gather transfer: some rank ends without the full reduction.
    s.transfers.pop();
    assert!(s.verify().unwrap_err().contains("expected"));
    let mut s = build(O::AllReduce, A::Ring, shape(4, 4096, 1, 1, 1)).unwrap();
    // A dependency on a later transfer (a cycle in the making) is rejected.
    s.transfers[0].deps.push(5);
    assert!(s.verify().unwrap_err().contains("does not come before"));
    let mut s = build(O::AllReduce, A::Ring, shape(4, 4096, 1, 1, 1)).unwrap();
    // Reducing the same data twice is caught.
    let t = s.transfers[0].clone();
    s.transfers.insert(1, t);
    for tr in &mut s.transfers[2..] {
        for d in &mut tr.deps {
            *d += 1;
        }
    }
    assert!(s.verify().unwrap_err().contains("reduced twice"));
}
