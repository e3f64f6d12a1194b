//! NCCL's device programs: NCCL's own worked figures (docs/reference/nccl-transport-details.md
//! §1 and §3), and symbolic runs of every program under NCCL's credits.

use proptest::prelude::*;
use xirang_collective::cost::Proto;
use xirang_collective::program::{self, Buffers, Program, Spec, build, channel_split, nccl_channels, verify};
use xirang_collective::schedule::{CollectiveAlgorithm as A, CollectiveOp as O};

const MIB: u64 = 1 << 20;

fn spec(op: O, algorithm: A, proto: Proto, ranks: u32, g: u32, bytes: u64, channels: u32) -> Spec {
    Spec {
        op,
        algorithm,
        proto,
        ranks,
        ranks_per_host: g,
        bytes,
        channels,
        buffers: Buffers::default(),
    }
}

/// (sends per channel on ring.next, data bytes of each send) of a ring program.
fn ring_sends(p: &dyn Program, channel: u32) -> Vec<u64> {
    let mut out = Vec::new();
    for i in 0..p.len(channel, 0, 0) {
        let prim = p.prim(channel, 0, 0, i);
        if !prim.send.is_empty() {
            for j in 0..prim.slices {
                out.push(prim.slice(j).1);
            }
        }
    }
    out
}

/// A ring AllReduce's loop is a uniform run per phase, and its full loops repeat.
#[test]
fn ring_allreduce_phases_are_uniform_runs() {
    // 16 ranks, LL, 8 channels, 8 MiB: loops of 16 even chunks per channel.
    let p = build(&spec(O::AllReduce, A::Ring, Proto::Ll, 16, 8, 8 * MIB, 8)).unwrap();
    let n = 16;
    assert!(p.len(0, 3, 0).is_multiple_of(2 * n - 1));
    assert_eq!(p.uniform_run(0, 3, 0, 0), 1, "the first send is its own");
    assert_eq!(p.uniform_run(0, 3, 0, 1), n - 2, "recvReduceSend, prims 1..n-2");
    assert_eq!(
        p.uniform_run(0, 3, 0, n - 1),
        1,
        "recvReduceCopySend, between the phases"
    );
    assert_eq!(p.uniform_run(0, 3, 0, n), n - 2, "recvCopySend, prims n..2n-3");
    assert_eq!(p.uniform_run(0, 3, 0, 2 * n - 2), 1, "the last recv");
    let loops = p.len(0, 3, 0) / (2 * n - 1);
    let rep = p.repeats(0, 3, 0, 5).expect("two loops of full chunks");
    assert_eq!(
        (rep.prims, rep.count, rep.recv, rep.send),
        (2 * n - 1, loops - 1, 2 * n - 2, 2 * n - 2)
    );
}

/// The helper table of docs/reference/nccl-transport-details.md §1: ring AllReduce,
/// Simple, 16 ranks, 8 channels.
#[test]
fn ring_allreduce_is_cut_as_nccl_cuts_it() {
    for (bytes, channels, chunk, isends, sizes) in [
        // 1 MiB: 8 channels of 128 KiB, one loop, 8 KiB chunks: 30 x (8 KiB + 0 B).
        (MIB, 8, 8 * 1024, 60, [8 * 1024, 0]),
        // 16 MiB: 2 MiB per channel, 128 KiB chunks: 60 x 64 KiB.
        (16 * MIB, 8, 128 * 1024, 60, [64 * 1024, 64 * 1024]),
        // 1 GiB: 128 MiB per channel, four loops of 2 MiB chunks: 240 x 1 MiB.
        (1024 * MIB, 8, 2 * MIB, 240, [MIB, MIB]),
    ] {
        let s = spec(O::AllReduce, A::Ring, Proto::Simple, 16, 8, bytes, 8);
        let p = build(&s).unwrap();
        assert_eq!(p.channels(), channels, "{bytes}");
        assert_eq!(p.slots(), 4, "ring Simple: 4 slices of 2 steps");
        let first = p.prim(0, 0, 0, 0);
        assert_eq!(first.bytes, chunk, "{bytes}");
        let sends = ring_sends(&*p, 0);
        assert_eq!(sends.len() / 2, isends / 2, "{bytes}: sends per channel");
        assert_eq!(sends.len(), isends, "{bytes}");
        assert_eq!(&sends[..2], &sizes, "{bytes}");
    }
}

/// §3's worked channel counts for 16 ranks and 8 channels.
#[test]
fn small_collectives_use_fewer_channels_as_nccl_does() {
    let nc = |a, p, b| nccl_channels(a, p, 16, b, 8);
    assert_eq!(nc(A::Ring, Proto::Simple, 64 * 1024), 2);
    assert_eq!(nc(A::Ring, Proto::Ll, 64 * 1024), 1);
    assert_eq!(nc(A::Ring, Proto::Ll128, 64 * 1024), 8);
    assert_eq!(nc(A::Tree, Proto::Simple, 64 * 1024), 2);
    for p in [Proto::Ll, Proto::Ll128, Proto::Simple] {
        assert_eq!(nc(A::Ring, p, MIB), 8);
        assert_eq!(nc(A::Ring, p, 16 * MIB), 8);
    }
    // LL128 at 64 KiB: four 16 KiB cells, so only 4 of the 8 channels carry data.
    assert_eq!(
        channel_split(O::AllReduce, Proto::Ll128, 16, 64 * 1024, 8).len(),
        4
    );
    // All-gather at 1 MiB per rank: 128 KiB of each block per channel, 15 x (64 + 64 KiB).
    let s = spec(O::AllGather, A::Ring, Proto::Simple, 16, 8, 16 * MIB, 8);
    let p = build(&s).unwrap();
    assert_eq!(p.channels(), 8);
    assert_eq!(ring_sends(&*p, 0), vec![64 * 1024; 30]);
}

/// LL and LL128 carry their flags on the wire; one slice per chunk, 8 in flight.
#[test]
fn ll_and_ll128_slices_and_wire_bytes() {
    assert_eq!(Proto::Ll.wire_bytes(8 * 1024), 16 * 1024);
    assert_eq!(Proto::Ll128.wire_bytes(8192), 10_240);
    assert_eq!(Proto::Simple.wire_bytes(1000), 1000);
    let b = Buffers::default();
    assert_eq!(b.step_data_bytes(Proto::Ll), 32 * 1024);
    assert_eq!(b.step_data_bytes(Proto::Ll128), 576_000);
    for proto in [Proto::Ll, Proto::Ll128] {
        let p = build(&spec(O::AllReduce, A::Ring, proto, 16, 8, MIB, 8)).unwrap();
        assert_eq!(p.slots(), program::NCCL_STEPS);
        assert_eq!(p.prim(0, 0, 0, 0).slices, 1);
    }
    // Tree Simple: 512 KiB chunks, one slice each, 8 outstanding.
    let t = build(&spec(O::AllReduce, A::Tree, Proto::Simple, 16, 8, 16 * MIB, 8)).unwrap();
    assert_eq!(t.slots(), 8);
    assert_eq!(t.len(0, 3, 0), 4, "2 MiB per channel in 512 KiB chunks");
}

fn algorithms() -> impl Strategy<Value = (O, A)> {
    prop_oneof![
        Just((O::AllReduce, A::Ring)),
        Just((O::AllReduce, A::Tree)),
        Just((O::AllReduce, A::Hierarchical)),
        Just((O::AllReduce, A::HalvingDoubling)),
        Just((O::AllGather, A::Ring)),
        Just((O::ReduceScatter, A::Ring)),
        Just((O::Broadcast, A::Ring)),
        Just((O::AllToAll, A::Ring)),
        Just((O::SendRecv, A::Ring)),
    ]
}

/// A property case's spec: `hosts` hosts of `g` ranks, about `kib` KiB sized as
/// nccl-tests sizes the operation (all-gather, reduce-scatter and all-to-all in whole
/// blocks), and buffers cut by `shrink` so that the same sizes make several loops and
/// chunks. Also its bytes.
#[allow(clippy::too_many_arguments)]
fn case(
    op: O,
    algorithm: A,
    proto: Proto,
    hosts: u32,
    g: u32,
    kib: u64,
    channels: u32,
    shrink: u32,
) -> (Spec, u64) {
    let ranks = hosts * g;
    let bytes = (kib * 1024 / 4 * 4 / u64::from(ranks) * u64::from(ranks)).max(u64::from(ranks) * 4);
    let mut s = spec(op, algorithm, proto, ranks, g, bytes, channels);
    s.buffers.simple_bytes >>= 2 * shrink;
    s.buffers.ll_bytes >>= shrink;
    s.buffers.ll128_bytes = 8 * 2048 * (300 >> shrink);
    s.buffers.p2p_net_chunk_bytes >>= shrink;
    s.buffers.p2p_nvl_chunk_bytes >>= shrink;
    (s, bytes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// Every program, run symbolically with at most `slots` slices outstanding per
    /// connection, finishes (no deadlock), matches every slice's place in the buffer at both
    /// ends, and leaves every rank with what the operation promises.
    #[test]
    fn every_program_delivers_its_operation(
        (op, algorithm) in algorithms(),
        hosts in 1u32..5,
        g in 1u32..5,
        proto in prop_oneof![Just(Proto::Simple), Just(Proto::Ll), Just(Proto::Ll128)],
        kib in 1u64..3000,
        channels in 1u32..5,
        shrink in 0u32..5,
    ) {
        let ranks = hosts * g;
        prop_assume!(ranks >= 2);
        prop_assume!(algorithm != A::Hierarchical || g >= 1);
        let (s, bytes) = case(op, algorithm, proto, hosts, g, kib, channels, shrink);
        let p = build(&s).map_err(TestCaseError::fail)?;
        verify(&*p, op, bytes).map_err(|e| TestCaseError::fail(format!("{op:?}/{algorithm:?}/{proto:?} {ranks}x{g} {bytes} B {channels} ch: {e}")))?;
    }

    /// Inside a run `uniform_run` claims, every primitive moves like the first (what lets
    /// a fast-forward move a thread there); a whole repeat on, every primitive is the
    /// same but for its chunk's place, and a repeat receives and sends what it says; a
    /// program that says it may never be skipped has neither.
    #[test]
    fn uniform_runs_hold_equal_primitives(
        (op, algorithm) in algorithms(),
        hosts in 1u32..5,
        g in 1u32..5,
        proto in prop_oneof![Just(Proto::Simple), Just(Proto::Ll), Just(Proto::Ll128)],
        kib in 1u64..3000,
        channels in 1u32..4,
        shrink in 0u32..5,
    ) {
        let ranks = hosts * g;
        prop_assume!(ranks >= 2);
        let (s, _) = case(op, algorithm, proto, hosts, g, kib, channels, shrink);
        let p = build(&s).map_err(TestCaseError::fail)?;
        for c in 0..p.channels() {
            for r in 0..ranks {
                for role in 0..p.roles(c, r) {
                    let len = p.len(c, r, role);
                    for i in 0..len {
                        let run = p.uniform_run(c, r, role, i);
                        prop_assert!(run >= 1 && i + run <= len, "run {run} at {i} of {len}");
                        // A program that says it is never skipped has no run nor repeat.
                        if !p.may_skip() {
                            prop_assert!(run == 1 && p.repeats(c, r, role, i).is_none(), "{:?} {:?} at {}", op, algorithm, i);
                        }
                        let first = program::Prim { offset: 0, ..p.prim(c, r, role, i) };
                        for j in i..i + run {
                            let other = p.prim(c, r, role, j);
                            prop_assert!(first.same_moves(&other), "{:?} {:?} ch {} rank {} prim {} run {}: {:?} against {:?}", op, algorithm, c, r, i, run, first, other);
                        }
                        // Whole repeats: the same primitive a repeat on, and the counts
                        // of what a repeat receives and sends.
                        if let Some(rep) = p.repeats(c, r, role, i) {
                            prop_assert!(i + rep.count * rep.prims < len);
                            for k in 1..=rep.count {
                                let other = program::Prim { offset: 0, ..p.prim(c, r, role, i + k * rep.prims) };
                                prop_assert_eq!(first, other, "{:?} repeat {} of {:?} at {}", op, k, rep, i);
                            }
                            let (mut recv, mut send) = (0, 0);
                            for j in i..i + rep.prims {
                                let q = p.prim(c, r, role, j);
                                recv += u64::from(!q.recv.is_empty());
                                send += u64::from(!q.send.is_empty());
                            }
                            prop_assert_eq!((recv, send), (rep.recv, rep.send), "{:?} at {}", rep, i);
                        }
                    }
                }
            }
        }
    }
}

/// A program whose connections say one slice more, or name other threads, than its
/// primitives use: what `verify` must catch.
#[derive(Debug)]
struct Misdeclared {
    inner: Box<dyn Program>,
    extra_slice: bool,
    swap_roles: bool,
}

impl Program for Misdeclared {
    fn proto(&self) -> Proto {
        self.inner.proto()
    }
    fn channels(&self) -> u32 {
        self.inner.channels()
    }
    fn ranks(&self) -> u32 {
        self.inner.ranks()
    }
    fn slots(&self) -> u32 {
        self.inner.slots()
    }
    fn roles(&self, channel: u32, rank: u32) -> u32 {
        self.inner.roles(channel, rank)
    }
    fn len(&self, channel: u32, rank: u32, role: u32) -> u64 {
        self.inner.len(channel, rank, role)
    }
    fn prim(&self, channel: u32, rank: u32, role: u32, index: u64) -> program::Prim {
        self.inner.prim(channel, rank, role, index)
    }
    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32, u64, u64)) {
        let extra = u64::from(self.extra_slice);
        self.inner
            .connections(&mut |c, a, b, k, sl| f(c, a, b, k, sl + extra));
    }
    fn conn_roles(&self, channel: u32, src: u32, dst: u32) -> (u32, u32) {
        let (s, r) = self.inner.conn_roles(channel, src, dst);
        if self.swap_roles { (s + 1, r) } else { (s, r) }
    }
    fn state_entries(&self) -> usize {
        self.inner.state_entries()
    }
}

#[test]
fn verify_refuses_a_program_whose_connections_misstate_slices_or_threads() {
    let s = spec(O::AllReduce, A::Ring, Proto::Simple, 4, 1, MIB, 2);
    verify(&*build(&s).unwrap(), O::AllReduce, MIB).expect("the real program verifies");
    let slices = Misdeclared {
        inner: build(&s).unwrap(),
        extra_slice: true,
        swap_roles: false,
    };
    let err = verify(&slices, O::AllReduce, MIB).unwrap_err();
    assert!(err.contains("slices, the program says"), "{err}");
    let roles = Misdeclared {
        inner: build(&s).unwrap(),
        extra_slice: false,
        swap_roles: true,
    };
    let err = verify(&roles, O::AllReduce, MIB).unwrap_err();
    assert!(err.contains("the program names"), "{err}");
}
