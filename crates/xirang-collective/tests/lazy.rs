//! The lazy expansions against the explicit schedules: every algorithm, through one
//! checker that drives an expansion in a random arrival order and compares each transfer
//! it yields, and the moment it yields it, with the explicit schedule.

use std::collections::BTreeSet;

use proptest::prelude::*;
use xirang_collective::lazy::{self, Expansion, Step};
use xirang_collective::schedule::{self, CollectiveAlgorithm as A, CollectiveOp as O, Schedule, Shape};

/// A small deterministic generator for the arrival order.
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

/// Runs one iteration of `x` with arrivals in an order drawn from `seed`, checking each
/// yielded transfer against `s`. Returns the most transfers in flight at once.
fn drive(x: &mut dyn Expansion, s: &Schedule, seed: u64) -> Result<usize, String> {
    let n = s.transfers.len();
    if x.len() != n as u64 {
        return Err(format!("length {} against {n}", x.len()));
    }
    let mut emitted = vec![false; n];
    let mut arrived = vec![false; n];
    let mut in_flight: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    let check =
        |st: &Step, just: Option<usize>, arrived: &[bool], emitted: &mut [bool]| -> Result<(), String> {
            let i = st.index as usize;
            let t = s
                .transfers
                .get(i)
                .ok_or_else(|| format!("index {i} out of range"))?;
            if std::mem::replace(&mut emitted[i], true) {
                return Err(format!("transfer {i} yielded twice"));
            }
            let want = (t.src, t.dst, s.transfer_bytes(t), t.channel, !t.deps.is_empty());
            let got = (st.src, st.dst, st.bytes, st.channel, st.has_deps);
            if want != got {
                return Err(format!(
                    "transfer {i}: yielded {got:?}, the schedule has {want:?}"
                ));
            }
            if let Some(d) = t.deps.iter().find(|d| !arrived[**d as usize]) {
                return Err(format!("transfer {i} yielded before its dependency {d} arrived"));
            }
            match just {
                None if !t.deps.is_empty() => Err(format!(
                    "transfer {i} yielded at the start but waits for {:?}",
                    t.deps
                )),
                Some(a) if !t.deps.contains(&(a as u32)) => Err(format!(
                    "transfer {i} yielded when {a} arrived, which it does not wait for"
                )),
                _ => Ok(()),
            }
        };
    x.begin(&mut out);
    if out.windows(2).any(|w| w[0].index >= w[1].index) {
        return Err("initial transfers out of index order".into());
    }
    for st in out.drain(..) {
        check(&st, None, &arrived, &mut emitted)?;
        in_flight.push(st.index);
    }
    let mut rng = Lcg(seed);
    let mut peak = in_flight.len();
    while !in_flight.is_empty() {
        let a = in_flight.swap_remove(rng.below(in_flight.len()));
        arrived[a as usize] = true;
        let terminal = x.arrived(a, &mut out);
        if terminal != x.is_terminal(a) {
            return Err(format!(
                "arrived({a}) says terminal {terminal}, is_terminal says otherwise"
            ));
        }
        if out.windows(2).any(|w| w[0].index >= w[1].index) {
            return Err(format!("transfers readied by {a} out of index order"));
        }
        for st in out.drain(..) {
            check(&st, Some(a as usize), &arrived, &mut emitted)?;
            in_flight.push(st.index);
        }
        peak = peak.max(in_flight.len());
    }
    if let Some(i) = emitted.iter().position(|e| !e) {
        return Err(format!("transfer {i} never yielded"));
    }
    Ok(peak)
}

/// Everything an expansion says about its schedule besides the run: terminals, the
/// enumeration, the connections.
fn check_static(x: &dyn Expansion, s: &Schedule) -> Result<(), String> {
    let mut has_dependent = vec![false; s.transfers.len()];
    for t in &s.transfers {
        for d in &t.deps {
            has_dependent[*d as usize] = true;
        }
    }
    let terminals = has_dependent.iter().filter(|h| !**h).count() as u64;
    if x.terminals() != terminals {
        return Err(format!(
            "{} terminals, the schedule has {terminals}",
            x.terminals()
        ));
    }
    for (i, h) in has_dependent.iter().enumerate() {
        if x.is_terminal(i as u64) == *h {
            return Err(format!("transfer {i}: is_terminal {}", !*h));
        }
    }
    let mut all = Vec::new();
    x.for_each_transfer(&mut |st| all.push(st));
    let want: Vec<(u64, u32, u32, u64, u32, bool)> = s
        .transfers
        .iter()
        .enumerate()
        .map(|(i, t)| {
            (
                i as u64,
                t.src,
                t.dst,
                s.transfer_bytes(t),
                t.channel,
                !t.deps.is_empty(),
            )
        })
        .collect();
    let got: Vec<_> = all
        .iter()
        .map(|st| (st.index, st.src, st.dst, st.bytes, st.channel, st.has_deps))
        .collect();
    if got != want {
        return Err("for_each_transfer differs from the schedule".into());
    }
    let mut conns = BTreeSet::new();
    let mut twice = false;
    x.connections(&mut |c, a, b| twice |= !conns.insert((c, a, b)));
    let want: BTreeSet<_> = s.transfers.iter().map(|t| (t.channel, t.src, t.dst)).collect();
    if twice || conns != want {
        return Err(format!("connections {conns:?}, the schedule uses {want:?}"));
    }
    Ok(())
}

fn cases() -> Vec<(O, A)> {
    vec![
        (O::AllReduce, A::Ring),
        (O::AllReduce, A::Tree),
        (O::AllReduce, A::Hierarchical),
        (O::AllReduce, A::HalvingDoubling),
        (O::AllGather, A::Ring),
        (O::ReduceScatter, A::Ring),
        (O::Broadcast, A::Ring),
        (O::AllToAll, A::Ring),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// Every expansion yields exactly the explicit schedule's transfers, each the moment
    /// its last dependency arrived, whatever order transfers arrive in, and starts over
    /// cleanly for a second iteration.
    #[test]
    fn expansions_replay_the_explicit_schedules(
        case in 0usize..8,
        hosts in 1u32..7,
        per_host in 1u32..5,
        channels in 1u32..4,
        chunks in 1u32..4,
        bytes in 1u64..5_000_000,
        seed in any::<u64>(),
    ) {
        let (op, alg) = cases()[case];
        let ranks = hosts * per_host;
        prop_assume!(ranks >= 2);
        let shape = Shape { ranks, bytes, channels, chunks, ranks_per_host: per_host };
        let s = schedule::build(op, alg, shape).map_err(TestCaseError::fail)?;
        let mut x = lazy::build(op, alg, shape).map_err(TestCaseError::fail)?;
        check_static(x.as_ref(), &s).map_err(TestCaseError::fail)?;
        drive(x.as_mut(), &s, seed).map_err(TestCaseError::fail)?;
        drive(x.as_mut(), &s, seed ^ 0x5555).map_err(|e| TestCaseError::fail(format!("second iteration: {e}")))?;
    }
}

/// The native generators hold a few counters per rank and channel, and what they have in
/// flight is bounded by the ranks, channels and chunks, never by the schedule's length.
#[test]
fn native_expansions_hold_state_in_proportion_to_ranks_and_channels() {
    let shape = Shape {
        ranks: 256,
        bytes: 256 << 20,
        channels: 4,
        chunks: 2,
        ranks_per_host: 8,
    };
    let bound = (shape.ranks * shape.channels * shape.chunks) as usize;
    // The tree's schedule is itself linear in the ranks; the others grow faster, and the
    // expansion must not.
    for (op, alg, in_flight_factor, superlinear) in [
        (O::AllReduce, A::Ring, 1, true),
        (O::AllGather, A::Ring, 1, true),
        (O::Broadcast, A::Ring, 1, true),
        (O::AllReduce, A::Tree, 2, false),
        (O::AllReduce, A::Hierarchical, 2, true),
    ] {
        let s = schedule::build(op, alg, shape).unwrap();
        let mut x = lazy::build(op, alg, shape).unwrap();
        assert!(
            x.state_entries() <= 8 * bound,
            "{op:?} {alg:?}: {} entries",
            x.state_entries()
        );
        let peak = drive(x.as_mut(), &s, 7).unwrap();
        assert!(
            peak <= in_flight_factor * bound,
            "{op:?} {alg:?}: {peak} in flight, bound {}",
            in_flight_factor * bound
        );
        if superlinear {
            assert!(
                s.transfers.len() > 20 * peak.max(x.state_entries()),
                "{op:?} {alg:?}: in flight and state must be far below the schedule's {}",
                s.transfers.len()
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every transfer waits only for transfers its own sending rank received: what a
    /// parallel simulation relies on to give a host's ranks to one partition and never
    /// look at another's arrivals (`xirang_sim::parallel::plan`).
    #[test]
    fn transfers_wait_only_for_what_their_sender_received(
        case in 0usize..8,
        hosts in 1u32..7,
        per_host in 1u32..5,
        channels in 1u32..4,
        chunks in 1u32..4,
    ) {
        let (op, alg) = cases()[case];
        let ranks = hosts * per_host;
        prop_assume!(ranks >= 2);
        let shape = Shape { ranks, bytes: 1 << 20, channels, chunks, ranks_per_host: per_host };
        let s = schedule::build(op, alg, shape).map_err(TestCaseError::fail)?;
        for (i, t) in s.transfers.iter().enumerate() {
            for &d in &t.deps {
                let dep = &s.transfers[d as usize];
                prop_assert_eq!(
                    dep.dst, t.src,
                    "{:?}/{:?}: transfer {} from rank {} waits for transfer {} to rank {}",
                    op, alg, i, t.src, d, dep.dst
                );
            }
        }
    }
}
