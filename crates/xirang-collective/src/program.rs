//! What NCCL's kernels do, rank by rank: a collective as the programs its GPU threads run.
//!
//! NCCL runs a collective as one thread block per channel on every GPU. A block walks a
//! fixed sequence of *primitives* (`send`, `recvReduceSend`, `recvCopySend`, `recv`, ...),
//! each on one chunk of the channel's data, and every primitive moves its chunk in
//! *slices*: one message per slice on each connection it sends on, one slot of the
//! receiver's buffer per slice. Connections are FIFOs: the k-th slice a rank sends to a
//! peer on a channel is the k-th slice that peer receives from it there, so a program needs
//! no dependency graph (docs/reference/nccl-transport.md §1-§2,
//! docs/reference/nccl-transport-details.md §1, §4-§6).
//!
//! [`build`] returns a collective's [`Program`]: per (channel, rank) its threads (*roles*:
//! one for a ring, reduce-up and broadcast-down for a tree node, a sender and a receiver per
//! peer for point-to-point), each a sequence of [`Prim`]s computed on demand from the
//! index, so a program over thousands of ranks holds a few numbers per channel and never
//! its schedule. The chunking is NCCL 2.30's: the per-channel split in 32 KiB-traffic
//! cells, the chunk and slice sizes per algorithm and protocol, the last loop's
//! rebalancing, the slice floor and the empty slices it leaves (details §1, §3).
//!
//! [`verify`] runs a program symbolically under NCCL's credits (at most
//! [`Program::slots`] slices outstanding per connection): it fails on a deadlock, on a
//! slice whose place in the buffer differs between its sender and its receiver, and
//! on a final buffer that is not what the operation promises.
//!
//! Simplifications, each said where it is made: elements are 4 bytes (nccl-tests'
//! default `float`); the tree's chain inside a host follows local rank order from the
//! channel's head; the hierarchical AllReduce and halving-doubling are not NCCL
//! algorithms and are given NCCL's machinery (slices, credits) without NCCL's
//! scheduling.

use std::collections::BTreeMap;

use crate::cost::Proto;
use crate::schedule::{self, CollectiveAlgorithm, CollectiveOp, Shape, btree_parent};

/// Slots of a connection's buffer (`NCCL_STEPS`, docs/reference/nccl-transport.md §1).
pub const NCCL_STEPS: u32 = 8;
/// LL's buffer per connection: 8 lines x 512 threads x 8 steps x 16 bytes
/// (docs/reference/nccl-transport-details.md §1).
pub const LL_BUFFER_BYTES: u64 = 524_288;
/// LL128's buffer per connection: 120 x 640 x 8 x 8 bytes (same section).
pub const LL128_BUFFER_BYTES: u64 = 4_915_200;
/// Data elements are `float`, nccl-tests' default type.
pub const ELEM_BYTES: u64 = 4;
/// NCCL cuts a channel's share in cells worth 32 KiB of traffic
/// (docs/reference/nccl-transport-details.md §1, "Per-channel split").
const CELL_TRAFFIC_BYTES: u64 = 32 * 1024;
/// Sizes NCCL aligns chunks and cells to.
const ALIGN_BYTES: u64 = 16;
/// A Simple slice is at least 1/32 of the buffer's slots it spans (details §1, "Slice
/// formula"), in 16-element units.
const SLICE_FLOOR_DIV: u64 = 32;
/// LL128's grain: 1,920 data bytes in 2,048 on the wire (details §1-§2).
const LL128_GRAIN_BYTES: u64 = 1920;
const LL128_GRAIN_WIRE_BYTES: u64 = 2048;
/// Threads NCCL's channel count formula assumes per protocol, LL / LL128 / Simple
/// (`maxThreads`, the same for Ring and Tree: docs/reference/nccl-transport-details.md §3).
const MAX_THREADS: [u64; 3] = [512, 640, 512];
/// `NCCL_THREAD_THRESHOLDS` defaults, LL / LL128 / Simple; Ring LL's is times the ranks.
const THREAD_THRESHOLDS: [u64; 3] = [8, 8, 64];
/// Network peers of a point-to-point operation each get this many channels
/// (the HDR fixture's `2 p2p channels per peer`; details §7).
pub const P2P_CHANNELS_PER_PEER: u32 = 2;

/// Buffer sizes and chunks a program is cut by (NCCL's environment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffers {
    /// `NCCL_BUFFSIZE`: Simple's buffer per connection.
    pub simple_bytes: u64,
    /// `NCCL_LL_BUFFSIZE`.
    pub ll_bytes: u64,
    /// `NCCL_LL128_BUFFSIZE`.
    pub ll128_bytes: u64,
    /// `NCCL_P2P_NET_CHUNKSIZE`: a point-to-point chunk between hosts.
    pub p2p_net_chunk_bytes: u64,
    /// A point-to-point chunk over NVLink (NCCL's 512 KiB,
    /// docs/reference/collectives-and-nccl.md §1).
    pub p2p_nvl_chunk_bytes: u64,
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers {
            simple_bytes: 4 * 1024 * 1024,
            ll_bytes: LL_BUFFER_BYTES,
            ll128_bytes: LL128_BUFFER_BYTES,
            p2p_net_chunk_bytes: 128 * 1024,
            p2p_nvl_chunk_bytes: 512 * 1024,
        }
    }
}

impl Buffers {
    /// Wire bytes of one slot (`stepSize`) of `proto`'s buffer.
    pub fn step_bytes(&self, proto: Proto) -> u64 {
        match proto {
            Proto::Ll => self.ll_bytes / u64::from(NCCL_STEPS),
            Proto::Ll128 => self.ll128_bytes / u64::from(NCCL_STEPS),
            Proto::Simple => self.simple_bytes / u64::from(NCCL_STEPS),
        }
    }

    /// Data bytes one slot carries: LL half of it (4-byte flags), LL128 120 of every 128.
    pub fn step_data_bytes(&self, proto: Proto) -> u64 {
        let step = self.step_bytes(proto);
        match proto {
            Proto::Ll => step / 2,
            Proto::Ll128 => step / 128 * 120,
            Proto::Simple => step,
        }
    }
}

impl Proto {
    /// Bytes on the wire for `data` bytes: LL lines of 8 data bytes in 16, LL128 units
    /// of 1,920 in 2,048, Simple as is (docs/reference/nccl-transport-details.md §2).
    pub fn wire_bytes(self, data: u64) -> u64 {
        match self {
            Proto::Ll => data.div_ceil(8) * 16,
            Proto::Ll128 => data.div_ceil(LL128_GRAIN_BYTES) * LL128_GRAIN_WIRE_BYTES,
            Proto::Simple => data,
        }
    }

    /// The index of NCCL's per-protocol tables (LL, LL128, Simple).
    pub fn table_index(self) -> usize {
        match self {
            Proto::Ll => 0,
            Proto::Ll128 => 1,
            Proto::Simple => 2,
        }
    }
}

/// Up to three peer ranks (a tree node's parent or children).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Peers {
    n: u8,
    r: [u32; 3],
}

impl Peers {
    /// No peer.
    pub const NONE: Peers = Peers { n: 0, r: [0; 3] };

    /// One peer.
    pub fn one(r: u32) -> Peers {
        Peers { n: 1, r: [r, 0, 0] }
    }

    /// The peers in `it` (at most three).
    pub fn of(it: impl IntoIterator<Item = u32>) -> Peers {
        let mut p = Peers::NONE;
        for r in it {
            p.push(r);
        }
        p
    }

    fn push(&mut self, r: u32) {
        assert!(
            self.n < 3,
            "invariant: at most three peers (a tree node's two children and its chain)"
        );
        self.r[self.n as usize] = r;
        self.n += 1;
    }

    /// The peers, in order.
    pub fn as_slice(&self) -> &[u32] {
        &self.r[..self.n as usize]
    }

    /// No peer.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Number of peers.
    pub fn len(&self) -> usize {
        self.n as usize
    }
}

/// One primitive of a thread: receive a chunk from `recv` (reducing it into the rank's
/// copy, or copying it), and send the result to `send`, slice by slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prim {
    /// Ranks it receives the chunk from (each slice waits for every one of them).
    pub recv: Peers,
    /// Ranks it sends the chunk to.
    pub send: Peers,
    /// Where the chunk sits in the operation's buffer (for checks; nccl-tests' layout).
    pub offset: u64,
    /// Data bytes of the chunk.
    pub bytes: u64,
    /// Slices it moves, every one a message on each connection, even an empty one.
    pub slices: u32,
    /// Data bytes of a full slice.
    pub slice_bytes: u64,
    /// Received data is reduced into the rank's copy (else it replaces it).
    pub reduce: bool,
    /// Before starting, wait until the rank's thread `.0` on this channel has finished
    /// `.1` primitives of the same iteration (programs built from a dependency graph).
    pub after: Option<(u32, u64)>,
}

impl Prim {
    /// Moves on the same connections in the same number of slices with the same waits
    /// as `o` (what the engine's counts of slices and transfers depend on; the engine
    /// times a reduction and a copy alike, so `reduce` is not part of it).
    pub fn same_moves(&self, o: &Prim) -> bool {
        (self.recv, self.send, self.slices, self.after) == (o.recv, o.send, o.slices, o.after)
    }

    /// (offset, data bytes) of slice `j`.
    pub fn slice(&self, j: u32) -> (u64, u64) {
        let start = (u64::from(j) * self.slice_bytes).min(self.bytes);
        let end = (start + self.slice_bytes).min(self.bytes);
        (self.offset + start, end - start)
    }
}

/// A collective as per-(channel, rank) threads of primitives.
pub trait Program: Send + Sync + std::fmt::Debug {
    /// The protocol its slices use.
    fn proto(&self) -> Proto;
    /// Channels that carry data (NCCL uses fewer than it has for small sizes).
    fn channels(&self) -> u32;
    /// Ranks.
    fn ranks(&self) -> u32;
    /// Slices outstanding per connection: `NCCL_STEPS` / steps per slice.
    fn slots(&self) -> u32;
    /// Threads of (channel, rank).
    fn roles(&self, channel: u32, rank: u32) -> u32;
    /// Primitives thread `role` of (channel, rank) runs per iteration.
    fn len(&self, channel: u32, rank: u32, role: u32) -> u64;
    /// Primitive `index` of a thread.
    fn prim(&self, channel: u32, rank: u32, role: u32, index: u64) -> Prim;
    /// Calls `f(channel, src, dst, transfers, slices)` for each connection, once, with
    /// the primitives per iteration that send on it and the slices they send, in
    /// (channel, src, dst) order.
    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32, u64, u64));
    /// The threads (roles) at `src` and at `dst` that send and receive on connection
    /// (channel, src, dst).
    fn conn_roles(&self, channel: u32, src: u32, dst: u32) -> (u32, u32);
    /// Entries of state it holds (for tests of the memory bound).
    fn state_entries(&self) -> usize;
    /// How many primitives from `index` on (itself included, at least 1) move on the same
    /// connections as primitive `index`, in the same number of slices, with the same
    /// waits ([`Prim::same_moves`]); their chunks' bytes may differ (a rebalanced loop's
    /// last chunks are short). Inside such a run a fast-forward may move a thread on
    /// without changing which connections it uses or how its slices are numbered; the
    /// time the chunks take it takes from what it measured. The default knows nothing of
    /// the program's structure and says 1 (no move).
    fn uniform_run(&self, channel: u32, rank: u32, role: u32, index: u64) -> u64 {
        let _ = (channel, rank, role, index);
        1
    }
    /// The whole repeats of a thread's sequence from `index` on: primitive
    /// `index + k * prims` is primitive `index` but for its chunk's place for every
    /// `k <= count`, and each repeat receives `recv` and sends `send` primitives. Only
    /// for programs whose threads receive from one peer and send to one peer throughout
    /// (a ring), so that the counts are those of its two connections. None: no repeat
    /// known (the default).
    fn repeats(&self, channel: u32, rank: u32, role: u32, index: u64) -> Option<Repeat> {
        let _ = (channel, rank, role, index);
        None
    }
    /// Whether any thread may have a uniform run longer than one primitive or whole
    /// repeats: false (the default) promises `uniform_run` is 1 and `repeats` None
    /// everywhere, so a fast-forward can tell at the start that it will never move the
    /// program's threads.
    fn may_skip(&self) -> bool {
        false
    }
}

/// Whole repeats of a thread's primitives (`Program::repeats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Repeat {
    /// Primitives per repeat.
    pub prims: u64,
    /// Repeats a thread may move on by.
    pub count: u64,
    /// Primitives per repeat that receive, and that send.
    pub recv: u64,
    /// See `recv`.
    pub send: u64,
}

/// What a program is built from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spec {
    /// The operation.
    pub op: CollectiveOp,
    /// The algorithm.
    pub algorithm: CollectiveAlgorithm,
    /// The protocol (point-to-point operations always use Simple).
    pub proto: Proto,
    /// Ranks (GPUs), host by host.
    pub ranks: u32,
    /// GPUs per host (hosts hold consecutive ranks).
    pub ranks_per_host: u32,
    /// Buffer bytes as nccl-tests defines them for the operation.
    pub bytes: u64,
    /// The communicator's channels (`nChannels`); NCCL may use fewer for small sizes.
    pub channels: u32,
    /// Buffers and chunks.
    pub buffers: Buffers,
}

/// Channels NCCL runs a collective of `bytes` on: the communicator's `channels`, reduced
/// while the size is below channels x threads x the per-thread threshold
/// (docs/reference/nccl-transport-details.md §3).
pub fn nccl_channels(
    algorithm: CollectiveAlgorithm,
    proto: Proto,
    ranks: u32,
    bytes: u64,
    channels: u32,
) -> u32 {
    let p = proto.table_index();
    let ring_ll = algorithm != CollectiveAlgorithm::Tree && proto == Proto::Ll;
    let threshold = THREAD_THRESHOLDS[p] * if ring_ll { u64::from(ranks) } else { 1 };
    let threads = MAX_THREADS[p];
    let mut nc = u64::from(channels.max(1));
    while nc >= 2 && bytes < nc * threads * threshold {
        nc -= 1;
    }
    nc as u32
}

/// The operation's data per channel: NCCL cuts the data (the whole buffer, or each rank's
/// block for all-gather and reduce-scatter) in cells worth 32 KiB of traffic and gives
/// each channel whole cells, so a small operation uses fewer channels
/// (docs/reference/nccl-transport-details.md §1). Returns (offset, bytes) per channel used.
pub fn channel_split(
    op: CollectiveOp,
    proto: Proto,
    ranks: u32,
    bytes: u64,
    channels: u32,
) -> Vec<(u64, u64)> {
    let n = u64::from(ranks);
    let count = count_bytes(op, ranks, bytes);
    let per_byte = match op {
        CollectiveOp::AllReduce => 2,
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter => n,
        _ => 1,
    } * if proto == Proto::Ll { 4 } else { 1 };
    let cell = CELL_TRAFFIC_BYTES
        .div_ceil(per_byte)
        .next_multiple_of(ALIGN_BYTES)
        .max(ALIGN_BYTES);
    let cells = count.div_ceil(cell).max(1);
    let nch = u64::from(channels.max(1));
    let traffic_per_channel = (CELL_TRAFFIC_BYTES.max(count * per_byte))
        .div_ceil(nch)
        .next_multiple_of(ALIGN_BYTES);
    let cells_per_channel = cells.min(traffic_per_channel.div_ceil(cell * per_byte)).max(1);
    let used = cells.div_ceil(cells_per_channel);
    (0..used)
        .map(|c| {
            let off = (c * cells_per_channel * cell).min(count);
            let end = ((c + 1) * cells_per_channel * cell).min(count);
            (off, end - off)
        })
        .collect()
}

/// The bytes an operation's channels divide: each rank's block for all-gather and
/// reduce-scatter (nccl-tests' size is all ranks' blocks), the buffer otherwise.
fn count_bytes(op: CollectiveOp, ranks: u32, bytes: u64) -> u64 {
    match op {
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => {
            bytes / u64::from(ranks.max(1))
        }
        _ => bytes,
    }
}

/// The program of a collective.
pub fn build(spec: &Spec) -> Result<Box<dyn Program>, String> {
    use CollectiveAlgorithm as A;
    use CollectiveOp as O;
    if spec.ranks < 2 {
        return Err(format!(
            "a collective needs at least 2 ranks, found {}",
            spec.ranks
        ));
    }
    if spec.channels == 0 {
        return Err("a collective needs at least 1 channel".to_string());
    }
    let g = spec.ranks_per_host.max(1);
    if !spec.ranks.is_multiple_of(g) {
        return Err(format!("{} ranks do not split into hosts of {g}", spec.ranks));
    }
    Ok(match (spec.op, spec.algorithm) {
        (O::AllToAll, _) | (O::SendRecv, _) => Box::new(P2p::new(spec)),
        (O::AllReduce | O::AllGather | O::ReduceScatter | O::Broadcast, A::Ring) => {
            Box::new(RingProgram::new(spec))
        }
        (O::AllReduce, A::Tree) => Box::new(TreeProgram::new(spec)),
        (O::AllReduce, A::Hierarchical) => Box::new(Hierarchical::new(spec)),
        (op, algorithm) => Box::new(DagProgram::new(spec, op, algorithm)?),
    })
}

/// Steps per chunk and per slice: Ring AllReduce, all-gather and reduce-scatter on Simple
/// take 4 and 2 (so a chunk is two slices), everything else 1 and 1
/// (docs/reference/nccl-transport-details.md §1).
fn steps(op: CollectiveOp, algorithm: CollectiveAlgorithm, proto: Proto) -> (u64, u64) {
    let ring_like = matches!(
        algorithm,
        CollectiveAlgorithm::Ring | CollectiveAlgorithm::Hierarchical
    );
    let rs_ag_ar = matches!(
        op,
        CollectiveOp::AllReduce | CollectiveOp::AllGather | CollectiveOp::ReduceScatter
    );
    if ring_like && rs_ag_ar && proto == Proto::Simple {
        (u64::from(NCCL_STEPS) / 2, u64::from(NCCL_STEPS) / 4)
    } else {
        (1, 1)
    }
}

/// Chunk data bytes and slicing of a ring-like program.
#[derive(Debug, Clone, Copy)]
struct Chunking {
    chunk: u64,
    slices: u32,
    /// Smallest full slice (Simple), or 0 (one slice per chunk).
    slice_floor: u64,
}

impl Chunking {
    fn of(spec: &Spec, op: CollectiveOp, algorithm: CollectiveAlgorithm) -> Chunking {
        let (chunk_steps, slice_steps) = steps(op, algorithm, spec.proto);
        let chunk = spec.buffers.step_data_bytes(spec.proto) * chunk_steps;
        let slices = (chunk_steps / slice_steps) as u32;
        let slice_floor = if spec.proto == Proto::Simple {
            spec.buffers.step_bytes(Proto::Simple) * slice_steps / SLICE_FLOOR_DIV
        } else {
            0
        };
        Chunking {
            chunk: chunk.max(ALIGN_BYTES),
            slices,
            slice_floor,
        }
    }

    /// A primitive on `bytes` at `offset`.
    fn prim(&self, recv: Peers, send: Peers, offset: u64, bytes: u64, reduce: bool) -> Prim {
        let slice_bytes = if self.slices <= 1 {
            bytes.max(1)
        } else {
            // ⌈nelem / (16 x slices)⌉ x 16 elements, at least the floor.
            let unit = 16 * ELEM_BYTES;
            (bytes.div_ceil(unit * u64::from(self.slices)) * unit).max(self.slice_floor)
        };
        Prim {
            recv,
            send,
            offset,
            bytes,
            slices: self.slices,
            slice_bytes,
            reduce,
            after: None,
        }
    }
}

/// Division by a divisor fixed at build time, as a multiplication: prim indices are decoded
/// on the engine's hot path, and a 64-bit division costs tens of cycles. With
/// `m = ceil(2^64 / d)`, `x * m / 2^64` is `x / d` for every `x` with `x * d < 2^64`
/// (indices stay far below that).
#[derive(Debug, Clone, Copy)]
struct Div {
    d: u64,
    m: u64,
}

impl Div {
    fn new(d: u64) -> Div {
        let d = d.max(1);
        Div {
            d,
            m: if d == 1 { 0 } else { u64::MAX / d + 1 },
        }
    }

    #[inline]
    fn divmod(self, x: u64) -> (u64, u64) {
        if self.d == 1 {
            return (x, 0);
        }
        let q = ((u128::from(x) * u128::from(self.m)) >> 64) as u64;
        // Exact while x * d < 2^64 (indices stay far below that); checked in debug builds.
        debug_assert_eq!(q, x / self.d);
        (q, x - q * self.d)
    }
}

/// The ring kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RingOp {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
}

/// One ring operation on one range of data: prims per loop and their chunks.
#[derive(Debug, Clone, Copy)]
struct RingRun {
    op: RingOp,
    n: u64,
    /// Channel data: offset and bytes (the whole range for AllReduce and broadcast; the
    /// range inside each rank's block for all-gather and reduce-scatter).
    offset: u64,
    bytes: u64,
    /// Bytes of one rank's block in the buffer (all-gather, reduce-scatter).
    block: u64,
    ck: Chunking,
    loops: u64,
    per_loop: u64,
    div_loop: Div,
}

impl RingRun {
    fn new(op: RingOp, n: u32, offset: u64, bytes: u64, block: u64, ck: Chunking) -> RingRun {
        let n64 = u64::from(n);
        let (loop_bytes, per_loop) = match op {
            RingOp::AllReduce => (n64 * ck.chunk, 2 * n64 - 1),
            RingOp::AllGather | RingOp::ReduceScatter => (ck.chunk, n64),
            RingOp::Broadcast => (ck.chunk, 1),
        };
        let loops = bytes.div_ceil(loop_bytes).max(1);
        RingRun {
            op,
            n: n64,
            offset,
            bytes,
            block,
            ck,
            loops,
            per_loop,
            div_loop: Div::new(per_loop),
        }
    }

    /// Prims a ring position runs.
    fn len(&self, pos: u64) -> u64 {
        match self.op {
            RingOp::Broadcast => self.loops,
            _ => {
                let _ = pos;
                self.loops * self.per_loop
            }
        }
    }

    /// Sends on the connection from each position to the next, per run.
    fn sends_per_conn(&self) -> u64 {
        match self.op {
            RingOp::AllReduce => self.loops * 2 * (self.n - 1),
            RingOp::AllGather | RingOp::ReduceScatter => self.loops * (self.n - 1),
            RingOp::Broadcast => self.loops,
        }
    }

    /// Prims from `index` on that move like prim `index` (`Program::uniform_run`), up to
    /// the end of the phase: the middle of a loop's reduce-scatter (`recvReduceSend`) or
    /// all-gather (`recvCopySend`). The step between the phases, `recvReduceCopySend`,
    /// moves like them but ends a run all the same: a phase change is where a
    /// fast-forward measures again (docs/fast-forward.md, a skip's interrupts; on
    /// `scenarios/rail-1024gpu.toml` one skip across both phases was 0.48 % off the exact
    /// collective time, one skip per phase 0.09 %).
    fn uniform_run(&self, pos: u64, index: u64) -> u64 {
        let n = self.n;
        let (_, p) = self.div_loop.divmod(index);
        let _ = pos;
        // One past the last prim of the phase holding `p`.
        let end = match self.op {
            RingOp::AllReduce if p >= 1 && p + 1 < n => n - 1,
            RingOp::AllReduce if p >= n && p + 2 < 2 * n => 2 * n - 2,
            RingOp::AllGather | RingOp::ReduceScatter if p >= 1 && p + 1 < n => n - 1,
            _ => return 1,
        };
        end - p
    }

    /// Whole loops from `index` on (`Program::repeats`): every loop but a rebalanced last
    /// one is the same, chunk for chunk.
    fn repeats(&self, index: u64) -> Option<Repeat> {
        let n = self.n;
        let (per_loop, full, recv) = match self.op {
            RingOp::AllReduce => (2 * n - 1, self.bytes / (n * self.ck.chunk), 2 * n - 2),
            RingOp::AllGather | RingOp::ReduceScatter => (n, self.bytes / self.ck.chunk, n - 1),
            RingOp::Broadcast => return None,
        };
        let (l, _) = self.div_loop.divmod(index);
        // Loops `l..full` are full ones; a thread moves to the same place of a later one.
        let count = full.saturating_sub(l + 1);
        (count > 0).then_some(Repeat {
            prims: per_loop,
            count,
            recv,
            send: recv,
        })
    }

    /// Prim `index` at ring position `pos`, with `prev` and `next` the neighbours' ranks.
    fn prim(&self, pos: u64, index: u64, prev: u32, next: u32) -> Prim {
        let n = self.n;
        let ck = &self.ck;
        match self.op {
            RingOp::AllReduce => {
                let (l, p) = self.div_loop.divmod(index);
                let loop_bytes = n * ck.chunk;
                let loop_off = l * loop_bytes;
                let remaining = self.bytes - loop_off.min(self.bytes);
                // The last loop spreads what remains evenly over the ranks' chunks.
                let chunk = if remaining < loop_bytes {
                    remaining.div_ceil(n).next_multiple_of(ALIGN_BYTES)
                } else {
                    ck.chunk
                };
                let chunk_at = |j: u64| {
                    let start = (j * chunk).min(remaining);
                    let end = ((j + 1) * chunk).min(remaining);
                    (self.offset + loop_off + start, end - start)
                };
                let (recv, send, j, reduce) = if p == 0 {
                    (Peers::NONE, Peers::one(next), (pos + n - 1) % n, false)
                } else if p < n - 1 {
                    (Peers::one(prev), Peers::one(next), (pos + n - (p + 1)) % n, true)
                } else if p == n - 1 {
                    (Peers::one(prev), Peers::one(next), pos, true)
                } else if p < 2 * n - 2 {
                    (
                        Peers::one(prev),
                        Peers::one(next),
                        (pos + n - (p - n + 1)) % n,
                        false,
                    )
                } else {
                    (Peers::one(prev), Peers::NONE, (pos + 1) % n, false)
                };
                let (off, bytes) = chunk_at(j);
                ck.prim(recv, send, off, bytes, reduce)
            }
            RingOp::AllGather | RingOp::ReduceScatter => {
                let (l, p) = self.div_loop.divmod(index);
                let start = (l * ck.chunk).min(self.bytes);
                let bytes = ck.chunk.min(self.bytes - start);
                let reduce = self.op == RingOp::ReduceScatter;
                let (recv, send, blk) = match self.op {
                    RingOp::AllGather => {
                        if p == 0 {
                            (Peers::NONE, Peers::one(next), pos)
                        } else if p < n - 1 {
                            (Peers::one(prev), Peers::one(next), (pos + n - p) % n)
                        } else {
                            (Peers::one(prev), Peers::NONE, (pos + 1) % n)
                        }
                    }
                    _ => {
                        if p == 0 {
                            (Peers::NONE, Peers::one(next), (pos + n - 1) % n)
                        } else if p < n - 1 {
                            (Peers::one(prev), Peers::one(next), (pos + n - 1 - p) % n)
                        } else {
                            (Peers::one(prev), Peers::NONE, pos)
                        }
                    }
                };
                ck.prim(
                    recv,
                    send,
                    blk * self.block + self.offset + start,
                    bytes,
                    reduce && p > 0,
                )
            }
            RingOp::Broadcast => {
                let start = (index * ck.chunk).min(self.bytes);
                let bytes = ck.chunk.min(self.bytes - start);
                let recv = if pos == 0 { Peers::NONE } else { Peers::one(prev) };
                let send = if pos + 1 == n {
                    Peers::NONE
                } else {
                    Peers::one(next)
                };
                ck.prim(recv, send, self.offset + start, bytes, false)
            }
        }
    }
}

/// Ring AllReduce, all-gather, reduce-scatter and broadcast (from rank 0), each channel
/// one ring in rank order (NCCL rotates each channel's ring so that the GPU at a host
/// boundary is the one under that channel's NIC; the simulator places a channel's
/// traffic on its rail either way).
#[derive(Debug)]
struct RingProgram {
    proto: Proto,
    ranks: u32,
    slots: u32,
    runs: Vec<RingRun>,
}

impl RingProgram {
    fn new(spec: &Spec) -> RingProgram {
        let op = match spec.op {
            CollectiveOp::AllReduce => RingOp::AllReduce,
            CollectiveOp::AllGather => RingOp::AllGather,
            CollectiveOp::ReduceScatter => RingOp::ReduceScatter,
            _ => RingOp::Broadcast,
        };
        let ck = Chunking::of(spec, spec.op, CollectiveAlgorithm::Ring);
        let block = count_bytes(spec.op, spec.ranks, spec.bytes);
        let runs = channel_split(spec.op, spec.proto, spec.ranks, spec.bytes, spec.channels)
            .into_iter()
            .map(|(off, bytes)| RingRun::new(op, spec.ranks, off, bytes, block, ck))
            .collect();
        let (_, slice_steps) = steps(spec.op, CollectiveAlgorithm::Ring, spec.proto);
        RingProgram {
            proto: spec.proto,
            ranks: spec.ranks,
            slots: NCCL_STEPS / slice_steps as u32,
            runs,
        }
    }
}

impl Program for RingProgram {
    fn proto(&self) -> Proto {
        self.proto
    }
    fn channels(&self) -> u32 {
        self.runs.len() as u32
    }
    fn ranks(&self) -> u32 {
        self.ranks
    }
    fn slots(&self) -> u32 {
        self.slots
    }
    fn roles(&self, _channel: u32, _rank: u32) -> u32 {
        1
    }
    fn len(&self, channel: u32, rank: u32, _role: u32) -> u64 {
        self.runs[channel as usize].len(u64::from(rank))
    }
    fn prim(&self, channel: u32, rank: u32, _role: u32, index: u64) -> Prim {
        let n = self.ranks;
        self.runs[channel as usize].prim(u64::from(rank), index, (rank + n - 1) % n, (rank + 1) % n)
    }
    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32, u64, u64)) {
        let n = self.ranks;
        for (c, run) in self.runs.iter().enumerate() {
            let last = if run.op == RingOp::Broadcast { n - 1 } else { n };
            let k = run.sends_per_conn();
            let mut conns: Vec<(u32, u32)> = (0..last).map(|r| (r, (r + 1) % n)).collect();
            conns.sort_unstable();
            for (a, b) in conns {
                f(c as u32, a, b, k, k * u64::from(run.ck.slices));
            }
        }
    }
    fn conn_roles(&self, _c: u32, _src: u32, _dst: u32) -> (u32, u32) {
        (0, 0)
    }
    fn state_entries(&self) -> usize {
        self.runs.len()
    }
    fn uniform_run(&self, channel: u32, rank: u32, _role: u32, index: u64) -> u64 {
        self.runs[channel as usize].uniform_run(u64::from(rank), index)
    }
    fn repeats(&self, channel: u32, _rank: u32, _role: u32, index: u64) -> Option<Repeat> {
        self.runs[channel as usize].repeats(index)
    }
    fn may_skip(&self) -> bool {
        // A ring Broadcast has neither: it is one pass down the chain.
        self.runs.iter().any(|r| r.op != RingOp::Broadcast)
    }
}

/// NCCL's tree AllReduce: per channel one of the two trees of the double binary tree
/// over hosts, a chain of the host's GPUs below each host's head; reduce-up and
/// broadcast-down run at once, as two threads of every non-root rank (`runTreeSplit`,
/// docs/reference/nccl-transport-details.md §5).
#[derive(Debug)]
struct TreeProgram {
    proto: Proto,
    ranks: u32,
    g: u32,
    hosts: u32,
    /// Channels that get the first tree before the mirror (NCCL's searched channels).
    half: u32,
    /// (offset, bytes) per channel and the chunk.
    split: Vec<(u64, u64)>,
    chunk: Vec<u64>,
}

impl TreeProgram {
    fn new(spec: &Spec) -> TreeProgram {
        let g = spec.ranks_per_host.max(1);
        let hosts = spec.ranks / g;
        let split = channel_split(spec.op, spec.proto, spec.ranks, spec.bytes, spec.channels);
        let base = spec.buffers.step_data_bytes(spec.proto);
        let chunk = split
            .iter()
            .map(|&(_, b)| {
                if spec.proto == Proto::Ll128 {
                    ll128_tree_chunk(base, b, hosts, g)
                } else {
                    base
                }
            })
            .collect();
        TreeProgram {
            proto: spec.proto,
            ranks: spec.ranks,
            g,
            hosts,
            half: (spec.channels / 2).max(1),
            split,
            chunk,
        }
    }

    fn tree_of(&self, channel: u32) -> u32 {
        (channel / self.half) % 2
    }

    /// Parent and children of `rank` on `channel`.
    fn links(&self, channel: u32, rank: u32) -> (Option<u32>, Peers) {
        let g = self.g;
        let host = rank / g;
        let local = rank % g;
        let head = channel % g;
        // Position in the host's chain, from the head.
        let at = (local + g - head) % g;
        let rank_at = |h: u32, k: u32| h * g + (head + k) % g;
        let mut children = Peers::NONE;
        if at + 1 < g {
            children.push(rank_at(host, at + 1));
        }
        let parent = if at > 0 {
            Some(rank_at(host, at - 1))
        } else {
            let (p, kids) = self.host_links(channel, host);
            for k in kids {
                children.push(rank_at(k, 0));
            }
            p.map(|p| rank_at(p, 0))
        };
        (parent, children)
    }

    /// Parent and children of a host in the channel's tree over hosts (the second tree
    /// is the first shifted by one host, as the schedule builds it).
    fn host_links(&self, channel: u32, host: u32) -> (Option<u32>, Vec<u32>) {
        let h = self.hosts;
        if h < 2 {
            return (None, Vec::new());
        }
        let shift = self.tree_of(channel);
        let to_label = |x: u32| (x + h - shift) % h;
        let to_host = |v: u32| (v + shift) % h;
        let v = to_label(host);
        let parent = btree_parent(h, v).map(to_host);
        let kids = (0..h)
            .filter(|&u| btree_parent(h, u) == Some(v))
            .map(to_host)
            .collect();
        (parent, kids)
    }

    fn chunks(&self, channel: u32) -> u64 {
        let (_, b) = self.split[channel as usize];
        b.div_ceil(self.chunk[channel as usize]).max(1)
    }
}

/// Tree LL128's chunk, halved for small channel shares
/// (docs/reference/nccl-transport-details.md §1).
fn ll128_tree_chunk(base: u64, bytes: u64, hosts: u32, g: u32) -> u64 {
    let ppn = f64::from(g.max(1));
    let s = 1.0 + f64::from(hosts.max(1)).log2() + 0.1 * ppn;
    let mut chunk = base;
    let ratio = |c: u64| bytes as f64 / c as f64;
    while ratio(chunk) < 64.0 * s / ppn && chunk > 131_072 {
        chunk = (chunk / 2) / LL128_GRAIN_BYTES * LL128_GRAIN_BYTES;
    }
    while ratio(chunk) < 16.0 * s / ppn && chunk > 32_768 {
        chunk = (chunk / 2) / LL128_GRAIN_BYTES * LL128_GRAIN_BYTES;
    }
    chunk.max(LL128_GRAIN_BYTES)
}

impl Program for TreeProgram {
    fn proto(&self) -> Proto {
        self.proto
    }
    fn channels(&self) -> u32 {
        self.split.len() as u32
    }
    fn ranks(&self) -> u32 {
        self.ranks
    }
    fn slots(&self) -> u32 {
        NCCL_STEPS
    }
    fn roles(&self, channel: u32, rank: u32) -> u32 {
        if self.links(channel, rank).0.is_none() {
            1
        } else {
            2
        }
    }
    fn len(&self, channel: u32, _rank: u32, _role: u32) -> u64 {
        self.chunks(channel)
    }
    fn prim(&self, channel: u32, rank: u32, role: u32, index: u64) -> Prim {
        let (off, bytes) = self.split[channel as usize];
        let chunk = self.chunk[channel as usize];
        let start = (index * chunk).min(bytes);
        let size = chunk.min(bytes - start);
        let ck = Chunking {
            chunk,
            slices: 1,
            slice_floor: 0,
        };
        let (parent, children) = self.links(channel, rank);
        match (parent, role) {
            // The root reduces what its children send and sends them the result.
            (None, _) => ck.prim(children, children, off + start, size, true),
            (Some(p), 0) => ck.prim(children, Peers::one(p), off + start, size, true),
            (Some(p), _) => ck.prim(Peers::one(p), children, off + start, size, false),
        }
    }
    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32, u64, u64)) {
        for c in 0..self.channels() {
            let k = self.chunks(c);
            let mut pairs = Vec::new();
            for r in 0..self.ranks {
                if let (Some(p), _) = self.links(c, r) {
                    pairs.push((r, p));
                    pairs.push((p, r));
                }
            }
            pairs.sort_unstable();
            for (a, b) in pairs {
                f(c, a, b, k, k);
            }
        }
    }
    fn conn_roles(&self, c: u32, src: u32, dst: u32) -> (u32, u32) {
        // Up (child to parent) is a non-root's role 0; down its role 1; the root has one.
        let up = self.links(c, src).0 == Some(dst);
        let role = |r: u32, down_role: bool| {
            if self.links(c, r).0.is_none() {
                0
            } else if down_role {
                1
            } else {
                0
            }
        };
        if up {
            (role(src, false), role(dst, false))
        } else {
            (role(src, true), role(dst, true))
        }
    }
    fn state_entries(&self) -> usize {
        self.split.len() * 2
    }
}

/// The hierarchical AllReduce: ring reduce-scatter inside each host, ring AllReduce of
/// each shard across hosts among the GPUs of one local index (one rail), ring all-gather
/// inside each host; one thread per (channel, rank) running the three in turn. Not an
/// NCCL algorithm: each phase is cut as NCCL cuts a ring.
#[derive(Debug)]
struct Hierarchical {
    proto: Proto,
    ranks: u32,
    g: u32,
    hosts: u32,
    slots: u32,
    /// Per channel: its range's offset, the shard of each local rank, and the three
    /// phases (absent when a host has one GPU, or there is one host).
    phases: Vec<(u64, u64, [Option<RingRun>; 3])>,
}

impl Hierarchical {
    fn new(spec: &Spec) -> Hierarchical {
        let g = spec.ranks_per_host.max(1);
        let hosts = spec.ranks / g;
        let ck = Chunking::of(spec, CollectiveOp::AllReduce, CollectiveAlgorithm::Ring);
        // Each channel's range is cut in g equal shards, one per local rank, rounded up:
        // a channel moves at most g - 1 bytes more than its share (a simplification), and
        // the ranges are laid end to end.
        let mut next_off = 0;
        let phases = channel_split(
            CollectiveOp::AllReduce,
            spec.proto,
            spec.ranks,
            spec.bytes,
            spec.channels,
        )
        .into_iter()
        .map(|(_, bytes)| {
            let shard = bytes.div_ceil(u64::from(g));
            let off = next_off;
            next_off += shard * u64::from(g);
            let rs = (g >= 2).then(|| RingRun::new(RingOp::ReduceScatter, g, off, shard, shard, ck));
            let ar = (hosts >= 2).then(|| RingRun::new(RingOp::AllReduce, hosts, 0, shard, 0, ck));
            let ag = (g >= 2).then(|| RingRun::new(RingOp::AllGather, g, off, shard, shard, ck));
            (off, shard, [rs, ar, ag])
        })
        .collect();
        let (_, slice_steps) = steps(CollectiveOp::AllReduce, CollectiveAlgorithm::Ring, spec.proto);
        Hierarchical {
            proto: spec.proto,
            ranks: spec.ranks,
            g,
            hosts,
            slots: NCCL_STEPS / slice_steps as u32,
            phases,
        }
    }
}

impl Program for Hierarchical {
    fn proto(&self) -> Proto {
        self.proto
    }
    fn channels(&self) -> u32 {
        self.phases.len() as u32
    }
    fn ranks(&self) -> u32 {
        self.ranks
    }
    fn slots(&self) -> u32 {
        self.slots
    }
    fn roles(&self, _c: u32, _r: u32) -> u32 {
        1
    }
    fn len(&self, channel: u32, _rank: u32, _role: u32) -> u64 {
        self.phases[channel as usize]
            .2
            .iter()
            .flatten()
            .map(|r| r.len(0))
            .sum()
    }
    fn prim(&self, channel: u32, rank: u32, _role: u32, mut index: u64) -> Prim {
        let (g, h) = (self.g, self.hosts);
        let (host, local) = (rank / g, rank % g);
        let (off, shard, phases) = &self.phases[channel as usize];
        for (k, run) in phases.iter().enumerate() {
            let Some(run) = run else { continue };
            let len = run.len(0);
            if index >= len {
                index -= len;
                continue;
            }
            return if k == 1 {
                // Across hosts, on the local rank's shard of the channel's range.
                let prev = ((host + h - 1) % h) * g + local;
                let next = ((host + 1) % h) * g + local;
                let mut p = run.prim(u64::from(host), index, prev, next);
                p.offset += off + u64::from(local) * shard;
                p
            } else {
                let prev = host * g + (local + g - 1) % g;
                let next = host * g + (local + 1) % g;
                run.prim(u64::from(local), index, prev, next)
            };
        }
        unreachable!("invariant: a prim index below the thread's length")
    }
    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32, u64, u64)) {
        let (g, h) = (self.g, self.hosts);
        for (c, (_, _, phases)) in self.phases.iter().enumerate() {
            let mut conns: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
            for (k, run) in phases.iter().enumerate() {
                let Some(run) = run else { continue };
                for host in 0..h {
                    for l in 0..g {
                        let (a, b) = if k == 1 {
                            (host * g + l, ((host + 1) % h) * g + l)
                        } else {
                            (host * g + l, host * g + (l + 1) % g)
                        };
                        let e = conns.entry((a, b)).or_default();
                        e.0 += run.sends_per_conn();
                        e.1 += run.sends_per_conn() * u64::from(run.ck.slices);
                    }
                }
            }
            for ((a, b), (k, sl)) in conns {
                f(c as u32, a, b, k, sl);
            }
        }
    }
    fn conn_roles(&self, _c: u32, _src: u32, _dst: u32) -> (u32, u32) {
        (0, 0)
    }
    fn state_entries(&self) -> usize {
        self.phases.len() * 3
    }
}

/// Point-to-point operations (nccl-tests' `alltoall` and `sendrecv`): every pair a rank
/// sends to has a sending thread at the rank and a receiving thread at the peer, on each
/// of the peer's channels, cut in NCCL's point-to-point chunks (128 KiB between hosts,
/// 512 KiB over NVLink), 8 outstanding per connection. NCCL schedules peers in rounds
/// over its point-to-point channels; here every pair runs at once (a simplification).
#[derive(Debug)]
struct P2p {
    ranks: u32,
    g: u32,
    all_to_all: bool,
    /// Bytes each (rank, peer) pair moves, and the channels they are split over.
    pair_bytes: u64,
    channels: u32,
    buffers: Buffers,
}

impl P2p {
    fn new(spec: &Spec) -> P2p {
        let n = u64::from(spec.ranks);
        let all_to_all = spec.op == CollectiveOp::AllToAll;
        P2p {
            ranks: spec.ranks,
            g: spec.ranks_per_host.max(1),
            all_to_all,
            // nccl-tests' all-to-all size is each rank's whole send buffer, n blocks.
            pair_bytes: if all_to_all { spec.bytes / n } else { spec.bytes },
            channels: P2P_CHANNELS_PER_PEER,
            buffers: spec.buffers,
        }
    }

    fn peers(&self) -> u32 {
        if self.all_to_all { self.ranks - 1 } else { 1 }
    }

    /// (sending rank's peer, receiving rank's peer) of role `role` at `rank`.
    fn role_peer(&self, rank: u32, role: u32) -> (bool, u32) {
        let n = self.ranks;
        let k = self.peers();
        if role < k {
            (true, (rank + 1 + role) % n)
        } else {
            (false, (rank + n - 1 - (role - k)) % n)
        }
    }

    fn chunk(&self, a: u32, b: u32) -> u64 {
        if a / self.g == b / self.g {
            self.buffers.p2p_nvl_chunk_bytes
        } else {
            self.buffers.p2p_net_chunk_bytes
        }
    }

    /// (offset inside the pair's bytes, bytes) of channel `c`'s share.
    fn share(&self, c: u32) -> (u64, u64) {
        let per = self.pair_bytes.div_ceil(u64::from(self.channels));
        let start = (u64::from(c) * per).min(self.pair_bytes);
        (start, per.min(self.pair_bytes - start))
    }

    fn chunks(&self, c: u32, a: u32, b: u32) -> u64 {
        self.share(c).1.div_ceil(self.chunk(a, b)).max(1)
    }
}

impl Program for P2p {
    fn proto(&self) -> Proto {
        Proto::Simple
    }
    fn channels(&self) -> u32 {
        self.channels
    }
    fn ranks(&self) -> u32 {
        self.ranks
    }
    fn slots(&self) -> u32 {
        NCCL_STEPS
    }
    fn roles(&self, _c: u32, _r: u32) -> u32 {
        2 * self.peers()
    }
    fn len(&self, channel: u32, rank: u32, role: u32) -> u64 {
        let (sending, peer) = self.role_peer(rank, role);
        let (a, b) = if sending { (rank, peer) } else { (peer, rank) };
        self.chunks(channel, a, b)
    }
    fn prim(&self, channel: u32, rank: u32, role: u32, index: u64) -> Prim {
        let (sending, peer) = self.role_peer(rank, role);
        let (a, b) = if sending { (rank, peer) } else { (peer, rank) };
        let chunk = self.chunk(a, b);
        let (start, bytes) = self.share(channel);
        let off = (index * chunk).min(bytes);
        let size = chunk.min(bytes - off);
        // The pair's block in nccl-tests' layout: (sender, receiver) of n x n.
        let block = if self.all_to_all {
            (u64::from(a) * u64::from(self.ranks) + u64::from(b)) * self.pair_bytes
        } else {
            u64::from(a) * self.pair_bytes
        };
        let (recv, send) = if sending {
            (Peers::NONE, Peers::one(peer))
        } else {
            (Peers::one(peer), Peers::NONE)
        };
        Prim {
            recv,
            send,
            offset: block + start + off,
            bytes: size,
            slices: 1,
            slice_bytes: size.max(1),
            reduce: false,
            after: None,
        }
    }
    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32, u64, u64)) {
        for c in 0..self.channels {
            for a in 0..self.ranks {
                let mut dsts: Vec<u32> = (0..self.peers()).map(|k| (a + 1 + k) % self.ranks).collect();
                dsts.sort_unstable();
                dsts.dedup();
                for b in dsts {
                    let k = self.chunks(c, a, b);
                    f(c, a, b, k, k);
                }
            }
        }
    }
    fn conn_roles(&self, _c: u32, src: u32, dst: u32) -> (u32, u32) {
        let n = self.ranks;
        let i = (dst + n - src - 1) % n;
        (i, self.peers() + i)
    }
    fn state_entries(&self) -> usize {
        1
    }
}

/// Any explicit schedule ([`schedule::build`]) as programs: per (channel, rank) a
/// receiving thread that takes the rank's incoming transfers in schedule order and a
/// sending thread that sends its outgoing ones in schedule order, each once the
/// receiving thread has taken every transfer it depends on. Used for the algorithms NCCL
/// does not have (halving-doubling); whole transfers wait for their dependencies, so
/// slices pipeline only within a transfer. It keeps the schedule.
#[derive(Debug)]
struct DagProgram {
    proto: Proto,
    ranks: u32,
    channels: u32,
    ck: Chunking,
    /// Per (channel, rank): incoming transfers, outgoing transfers (with how many
    /// incoming ones each waits for), in schedule order.
    incoming: Vec<Vec<u32>>,
    outgoing: Vec<Vec<(u32, u64)>>,
    transfers: Vec<(u32, u32, u64, u64, bool)>,
}

impl DagProgram {
    fn new(spec: &Spec, op: CollectiveOp, algorithm: CollectiveAlgorithm) -> Result<DagProgram, String> {
        let shape = Shape {
            ranks: spec.ranks,
            bytes: spec.bytes,
            channels: spec.channels,
            chunks: 1,
            ranks_per_host: spec.ranks_per_host,
        };
        let s = schedule::build(op, algorithm, shape)?;
        let mut piece_off = Vec::with_capacity(s.piece_bytes.len() + 1);
        let mut acc = 0;
        for b in &s.piece_bytes {
            piece_off.push(acc);
            acc += b;
        }
        piece_off.push(acc);
        let (n, nch) = (spec.ranks as usize, spec.channels as usize);
        let mut incoming = vec![Vec::new(); n * nch];
        let mut outgoing = vec![Vec::new(); n * nch];
        let mut pos_in = vec![0u64; s.transfers.len()];
        let mut transfers = Vec::with_capacity(s.transfers.len());
        for (i, t) in s.transfers.iter().enumerate() {
            let at = |r: u32| t.channel as usize * n + r as usize;
            let need = t.deps.iter().map(|d| pos_in[*d as usize] + 1).max().unwrap_or(0);
            pos_in[i] = incoming[at(t.dst)].len() as u64;
            incoming[at(t.dst)].push(i as u32);
            outgoing[at(t.src)].push((i as u32, need));
            let off = piece_off[t.pieces.start as usize];
            let bytes = piece_off[t.pieces.end as usize] - off;
            transfers.push((t.src, t.dst, off, bytes, t.reduce));
        }
        let ck = Chunking {
            chunk: spec.buffers.step_data_bytes(spec.proto),
            slices: 1,
            slice_floor: 0,
        };
        Ok(DagProgram {
            proto: spec.proto,
            ranks: spec.ranks,
            channels: spec.channels,
            ck,
            incoming,
            outgoing,
            transfers,
        })
    }

    fn slices_of(&self, bytes: u64) -> u32 {
        bytes.div_ceil(self.ck.chunk).max(1) as u32
    }
}

impl Program for DagProgram {
    fn proto(&self) -> Proto {
        self.proto
    }
    fn channels(&self) -> u32 {
        self.channels
    }
    fn ranks(&self) -> u32 {
        self.ranks
    }
    fn slots(&self) -> u32 {
        NCCL_STEPS
    }
    fn roles(&self, _c: u32, _r: u32) -> u32 {
        2
    }
    fn len(&self, channel: u32, rank: u32, role: u32) -> u64 {
        let at = channel as usize * self.ranks as usize + rank as usize;
        if role == 0 {
            self.incoming[at].len() as u64
        } else {
            self.outgoing[at].len() as u64
        }
    }
    fn prim(&self, channel: u32, rank: u32, role: u32, index: u64) -> Prim {
        let at = channel as usize * self.ranks as usize + rank as usize;
        let (t, after) = if role == 0 {
            (self.incoming[at][index as usize], None)
        } else {
            let (t, need) = self.outgoing[at][index as usize];
            (t, (need > 0).then_some((0, need)))
        };
        let (src, dst, off, bytes, reduce) = self.transfers[t as usize];
        let (recv, send) = if role == 0 {
            (Peers::one(src), Peers::NONE)
        } else {
            (Peers::NONE, Peers::one(dst))
        };
        Prim {
            recv,
            send,
            offset: off,
            bytes,
            slices: self.slices_of(bytes),
            slice_bytes: self.ck.chunk,
            reduce,
            after,
        }
    }
    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32, u64, u64)) {
        let n = self.ranks as usize;
        let mut conns: BTreeMap<(u32, u32, u32), (u64, u64)> = BTreeMap::new();
        for (at, out) in self.outgoing.iter().enumerate() {
            let (c, src) = ((at / n) as u32, (at % n) as u32);
            for &(t, _) in out {
                let (_, dst, _, bytes, _) = self.transfers[t as usize];
                let e = conns.entry((c, src, dst)).or_default();
                e.0 += 1;
                e.1 += u64::from(self.slices_of(bytes));
            }
        }
        for ((c, a, b), (k, sl)) in conns {
            f(c, a, b, k, sl);
        }
    }
    fn conn_roles(&self, _c: u32, _src: u32, _dst: u32) -> (u32, u32) {
        (1, 0)
    }
    fn state_entries(&self) -> usize {
        self.transfers.len() * 3
    }
}

/// A piece of the buffer as symbolic execution sees it: the ranks whose data it holds.
type Holding = std::collections::BTreeSet<u32>;

/// A rank's buffer in symbolic execution: disjoint byte ranges, each with what it holds;
/// a range never written holds the operation's initial data.
#[derive(Debug, Default, Clone)]
struct Held(BTreeMap<u64, (u64, Holding)>);

impl Held {
    /// What `[start, end)` holds: one value, or an error when its parts differ (a
    /// program that sends a mix of partial results).
    fn get(&self, start: u64, end: u64, initial: &dyn Fn(u64) -> Holding) -> Result<Holding, String> {
        let mut at = start;
        let mut value: Option<Holding> = None;
        let mut agree = |v: Holding| -> Result<(), String> {
            match &value {
                Some(x) if *x != v => Err(format!("bytes {start}..{end} hold different data")),
                Some(_) => Ok(()),
                None => {
                    value = Some(v);
                    Ok(())
                }
            }
        };
        let first = self.0.range(..=start).next_back().map_or(start, |(k, _)| *k);
        for (&s, (e, h)) in self.0.range(first..end) {
            if *e <= at {
                continue;
            }
            if s > at {
                agree(initial(at))?;
            }
            agree(h.clone())?;
            at = *e;
            if at >= end {
                break;
            }
        }
        if at < end {
            agree(initial(at))?;
        }
        Ok(value.unwrap_or_else(|| initial(start)))
    }

    /// `[start, end)` now holds `h`.
    fn set(&mut self, start: u64, end: u64, h: Holding) {
        if start >= end {
            return;
        }
        let first = self
            .0
            .range(..start)
            .next_back()
            .map(|(k, (e, v))| (*k, *e, v.clone()));
        if let Some((k, e, v)) = first
            && e > start
        {
            self.0.insert(k, (start, v.clone()));
            if e > end {
                self.0.insert(end, (e, v));
            }
        }
        let inside: Vec<u64> = self.0.range(start..end).map(|(k, _)| *k).collect();
        for k in inside {
            let (e, v) = self.0.remove(&k).expect("listed");
            if e > end {
                self.0.insert(end, (e, v));
            }
        }
        self.0.insert(start, (end, h));
    }
}

/// Runs `p` symbolically for `op` (see the module docs): every thread in turn takes its
/// next slice when its inputs are there and its connections have a free slot. Errors
/// name the first problem found.
pub fn verify(p: &dyn Program, op: CollectiveOp, bytes: u64) -> Result<(), String> {
    let mut run = Run::new(p);
    let n = run.n;
    let n64 = u64::from(n);
    let block = (bytes / n64).max(1);
    let initial = |r: u32| {
        move |off: u64| -> Holding {
            let has = match op {
                CollectiveOp::AllReduce | CollectiveOp::ReduceScatter => Some(r),
                CollectiveOp::AllGather => (off / block == u64::from(r)).then_some(r),
                CollectiveOp::Broadcast => (r == 0).then_some(0),
                // Each rank's send blocks are its own data.
                CollectiveOp::AllToAll => (off / block / n64 == u64::from(r)).then_some(r),
                CollectiveOp::SendRecv => (off / bytes.max(1) == u64::from(r)).then_some(r),
            };
            has.into_iter().collect()
        }
    };
    while run.round(&initial)? {}
    run.check_drained()?;
    check_final(&run.buf, op, n, bytes, &initial)
}

/// A connection: (channel, src, dst).
type Conn = (u32, u32, u32);
/// A thread: (channel, rank, role).
type Thread = (u32, u32, u32);
/// A connection's slices in flight: (offset, bytes, value).
type Fifo = std::collections::VecDeque<(u64, u64, Holding)>;

/// The symbolic run of a program: its connections' FIFOs and what they carried, each
/// rank's buffer, and each thread's place in its primitives.
struct Run<'p> {
    p: &'p dyn Program,
    n: u32,
    slots: u64,
    /// Connection FIFOs: slices in flight.
    fifo: BTreeMap<Conn, Fifo>,
    /// Transfers per iteration each connection carries, as the program says.
    expected_sends: BTreeMap<Conn, u64>,
    /// Slices per iteration each connection carries, as the program says, and what it did.
    expected_slices: BTreeMap<Conn, u64>,
    slices_sent: BTreeMap<Conn, u64>,
    /// The (sending, receiving) thread of each connection, as the program names them.
    roles: BTreeMap<Conn, (u32, u32)>,
    /// Which thread sent and received on each connection.
    senders: BTreeMap<Conn, u32>,
    receivers: BTreeMap<Conn, u32>,
    /// Transfers each connection carried.
    sent: BTreeMap<Conn, u64>,
    buf: Vec<Held>,
    /// Thread cursors: (primitive, slice).
    cur: BTreeMap<Thread, (u64, u32)>,
}

impl<'p> Run<'p> {
    /// The run before any step: the program's connections empty, every thread at its
    /// first primitive.
    fn new(p: &'p dyn Program) -> Self {
        let n = p.ranks();
        let nch = p.channels();
        let slots = u64::from(p.slots());
        let mut fifo: BTreeMap<Conn, Fifo> = BTreeMap::new();
        let mut expected_sends: BTreeMap<Conn, u64> = BTreeMap::new();
        let mut expected_slices: BTreeMap<Conn, u64> = BTreeMap::new();
        let mut roles: BTreeMap<Conn, (u32, u32)> = BTreeMap::new();
        p.connections(&mut |c, a, b, k, sl| {
            fifo.insert((c, a, b), Fifo::new());
            expected_sends.insert((c, a, b), k);
            expected_slices.insert((c, a, b), sl);
        });
        for &(c, a, b) in fifo.keys() {
            roles.insert((c, a, b), p.conn_roles(c, a, b));
        }
        let mut cur: BTreeMap<Thread, (u64, u32)> = BTreeMap::new();
        for c in 0..nch {
            for r in 0..n {
                for role in 0..p.roles(c, r) {
                    cur.insert((c, r, role), (0, 0));
                }
            }
        }
        Run {
            p,
            n,
            slots,
            fifo,
            expected_sends,
            expected_slices,
            slices_sent: BTreeMap::new(),
            roles,
            senders: BTreeMap::new(),
            receivers: BTreeMap::new(),
            sent: BTreeMap::new(),
            buf: vec![Held::default(); n as usize],
            cur,
        }
    }

    /// Every thread in turn takes a step if it can; whether any did.
    fn round<F: Fn(u64) -> Holding>(&mut self, initial: &dyn Fn(u32) -> F) -> Result<bool, String> {
        let mut progressed = false;
        let keys: Vec<_> = self.cur.keys().copied().collect();
        for key in keys {
            if self.step(key, initial)? {
                progressed = true;
            }
        }
        Ok(progressed)
    }

    /// Thread `key` takes its next slice when its primitive's turn has come, its
    /// inputs are there and every outgoing connection has a free slot; whether it did.
    fn step<F: Fn(u64) -> Holding>(
        &mut self,
        key: Thread,
        initial: &dyn Fn(u32) -> F,
    ) -> Result<bool, String> {
        let (c, r, role) = key;
        let (pi, sl) = self.cur[&key];
        if pi >= self.p.len(c, r, role) {
            return Ok(false);
        }
        let prim = self.p.prim(c, r, role, pi);
        if let Some((other, need)) = prim.after
            && self.cur.get(&(c, r, other)).is_none_or(|x| x.0 < need)
        {
            return Ok(false);
        }
        let (off, len) = prim.slice(sl);
        // Inputs there, and a free slot on every outgoing connection.
        let ready = prim
            .recv
            .as_slice()
            .iter()
            .all(|&s| self.fifo.get(&(c, s, r)).is_some_and(|q| !q.is_empty()))
            && prim.send.as_slice().iter().all(|&d| {
                self.fifo
                    .get(&(c, r, d))
                    .is_some_and(|q| (q.len() as u64) < self.slots)
            });
        if !ready {
            return Ok(false);
        }
        let value = self.receive(key, &prim, off, len, initial)?;
        if len > 0 {
            self.buf[r as usize].set(off, off + len, value.clone());
        }
        self.send(key, &prim, sl, (off, len), &value)?;
        let next = if sl + 1 < prim.slices.max(1) {
            (pi, sl + 1)
        } else {
            (pi + 1, 0)
        };
        self.cur.insert(key, next);
        Ok(true)
    }

    /// The slice `[off, off + len)` thread `key` holds after taking one from each of
    /// the primitive's sources: reduced into its copy, or replacing it. Each must be the
    /// slice expected, from one thread of the rank, and a reduction never adds data twice.
    fn receive<F: Fn(u64) -> Holding>(
        &mut self,
        key: Thread,
        prim: &Prim,
        off: u64,
        len: u64,
        initial: &dyn Fn(u32) -> F,
    ) -> Result<Holding, String> {
        let (c, r, role) = key;
        let mut value = if len > 0 {
            self.buf[r as usize].get(off, off + len, &initial(r))?
        } else {
            Holding::new()
        };
        for &s in prim.recv.as_slice() {
            let (o, b, v) = self
                .fifo
                .get_mut(&(c, s, r))
                .and_then(|q| q.pop_front())
                .expect("checked above");
            if (o, b) != (off, len) {
                return Err(format!(
                    "channel {c}: rank {r} expects slice ({off}, {len} B) from {s}, got ({o}, {b} B)"
                ));
            }
            if *self.receivers.entry((c, s, r)).or_insert(role) != role {
                return Err(format!("channel {c}: two threads of rank {r} receive from {s}"));
            }
            if len == 0 {
                continue;
            }
            if prim.reduce {
                if !value.is_disjoint(&v) {
                    return Err(format!(
                        "channel {c}: rank {r} reduces data twice at offset {off}"
                    ));
                }
                value.extend(v);
            } else {
                value = v;
            }
        }
        Ok(value)
    }

    /// Slice `sl` (`(offset, bytes)`) of thread `key`'s primitive, holding `value`, onto
    /// each outgoing connection, counted; one thread of the rank sends on a connection.
    fn send(
        &mut self,
        key: Thread,
        prim: &Prim,
        sl: u32,
        (off, len): (u64, u64),
        value: &Holding,
    ) -> Result<(), String> {
        let (c, r, role) = key;
        for &d in prim.send.as_slice() {
            let q = self
                .fifo
                .get_mut(&(c, r, d))
                .ok_or_else(|| format!("channel {c}: rank {r} sends to {d} without a connection"))?;
            q.push_back((off, len, value.clone()));
            if sl == 0 {
                *self.sent.entry((c, r, d)).or_default() += 1;
            }
            *self.slices_sent.entry((c, r, d)).or_default() += 1;
            if *self.senders.entry((c, r, d)).or_insert(role) != role {
                return Err(format!("channel {c}: two threads of rank {r} send to {d}"));
            }
        }
        Ok(())
    }

    /// When no thread can move: every thread finished (else a deadlock), every
    /// connection empty, and each carried the transfers the program says.
    fn check_drained(&self) -> Result<(), String> {
        for (&(c, r, role), &(pi, _)) in &self.cur {
            let len = self.p.len(c, r, role);
            if pi < len {
                return Err(format!(
                    "deadlock: channel {c} rank {r} thread {role} stuck at primitive {pi} of {len}"
                ));
            }
        }
        for (k, q) in &self.fifo {
            if !q.is_empty() {
                return Err(format!(
                    "connection {k:?} ends with {} slices unconsumed",
                    q.len()
                ));
            }
        }
        for (k, want) in &self.expected_sends {
            let got = self.sent.get(k).copied().unwrap_or(0);
            if got != *want {
                return Err(format!(
                    "connection {k:?} carried {got} transfers, the program says {want}"
                ));
            }
        }
        for (k, want) in &self.expected_slices {
            let got = self.slices_sent.get(k).copied().unwrap_or(0);
            if got != *want {
                return Err(format!(
                    "connection {k:?} carried {got} slices, the program says {want}"
                ));
            }
        }
        for (k, &(send, recv)) in &self.roles {
            let (got_send, got_recv) = (self.senders.get(k), self.receivers.get(k));
            if got_send.is_some_and(|&t| t != send) || got_recv.is_some_and(|&t| t != recv) {
                return Err(format!(
                    "connection {k:?} was used by threads {got_send:?} -> {got_recv:?}, the program names {send} -> {recv}"
                ));
            }
        }
        Ok(())
    }
}

/// Every rank's buffer holds what `op` promises, over every byte it promises.
fn check_final<F: Fn(u64) -> Holding>(
    buf: &[Held],
    op: CollectiveOp,
    n: u32,
    bytes: u64,
    initial: &dyn Fn(u32) -> F,
) -> Result<(), String> {
    let all: Holding = (0..n).collect();
    let n64 = u64::from(n);
    let block = (bytes / n64).max(1);
    let one = |r: u32| -> Holding { std::iter::once(r).collect() };
    for (r, b) in buf.iter().enumerate() {
        let r = r as u32;
        // (range, what it must hold) the operation promises at this rank.
        let promised: Vec<(u64, u64, Holding)> = match op {
            CollectiveOp::AllReduce => vec![(0, bytes, all.clone())],
            CollectiveOp::Broadcast => vec![(0, bytes, one(0))],
            CollectiveOp::ReduceScatter => {
                vec![(u64::from(r) * block, u64::from(r + 1) * block, all.clone())]
            }
            CollectiveOp::AllGather => (0..n)
                .map(|k| (u64::from(k) * block, u64::from(k + 1) * block, one(k)))
                .collect(),
            CollectiveOp::AllToAll => {
                let pair = block;
                (0..n)
                    .filter(|&s| s != r)
                    .map(|s| {
                        let at = (u64::from(s) * n64 + u64::from(r)) * pair;
                        (at, at + pair, one(s))
                    })
                    .collect()
            }
            CollectiveOp::SendRecv => {
                let s = (r + n - 1) % n;
                vec![(u64::from(s) * bytes, u64::from(s + 1) * bytes, one(s))]
            }
        };
        let init = initial(r);
        for (start, end, want) in promised {
            if start >= end {
                continue;
            }
            // Every written range inside, and the gaps between them, hold `want`.
            let mut at = start;
            let check = |s: u64, e: u64| -> Result<(), String> {
                let got = b.get(s, e, &init)?;
                if got != want {
                    return Err(format!(
                        "rank {r} ends with bytes {s}..{e} holding {} ranks' data, expected {}",
                        got.len(),
                        want.len()
                    ));
                }
                Ok(())
            };
            let keys: Vec<(u64, u64)> =
                b.0.range(..end)
                    .filter(|(_, (e, _))| *e > start)
                    .map(|(k, (e, _))| (*k.max(&start), *e.min(&end)))
                    .collect();
            for (s, e) in keys {
                if s > at {
                    check(at, s)?;
                }
                check(s, e)?;
                at = e;
            }
            if at < end {
                check(at, end)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Div;
    use proptest::prelude::*;

    proptest! {
        /// The multiplication that stands for division gives division's quotient and
        /// remainder over the range programs use, divisors 1 and powers of two included.
        #[test]
        fn fast_division_is_exact(d in 1u64..(1 << 24), x in 0u64..(1 << 40), shift in 0u32..24) {
            for d in [d, 1 << shift, 1] {
                prop_assert_eq!(Div::new(d).divmod(x), (x / d, x % d));
            }
        }
    }
}
