//! Collective schedules expanded as they run: a rank's next transfer is created when the
//! transfers it waits for have arrived, so a running collective holds state in proportion to
//! its ranks and channels and to the transfers in flight, never to the whole schedule.
//!
//! An [`Expansion`] yields exactly the transfers of the explicit [`Schedule`] that
//! [`crate::schedule::build`] returns, each under its position in that schedule
//! ([`Step::index`]), at the moment its last dependency arrived (property tests compare the
//! two for every algorithm). Ring AllReduce, ring all-gather and reduce-scatter, ring
//! broadcast, the double binary tree and the hierarchical AllReduce have native generators
//! whose state is a few counters per rank and channel; halving-doubling and all-to-all go
//! through [`DagExpansion`], which keeps the explicit schedule (their transfer count is
//! small next to the ring's, or, for all-to-all, all in flight at once anyway).

use std::ops::Range;

use crate::schedule::{self, CollectiveAlgorithm, CollectiveOp, Schedule, Shape, btree_parent};

/// One transfer, as the simulator starts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Position in the explicit schedule's transfers.
    pub index: u64,
    /// Sending rank.
    pub src: u32,
    /// Receiving rank.
    pub dst: u32,
    /// Bytes it carries.
    pub bytes: u64,
    /// Channel.
    pub channel: u32,
    /// It waited for other transfers (so the per-step kernel time applies).
    pub has_deps: bool,
}

/// A collective schedule expanded as it runs.
pub trait Expansion: Send {
    /// Transfers per iteration (the explicit schedule's length).
    fn len(&self) -> u64;

    /// True for a schedule without transfers.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of transfers no other transfer waits for: the iteration is over when they
    /// have all arrived.
    fn terminals(&self) -> u64;

    /// Whether nothing waits for this transfer.
    fn is_terminal(&self, index: u64) -> bool;

    /// Starts an iteration: appends the transfers that wait for nothing, in index order.
    fn begin(&mut self, out: &mut Vec<Step>);

    /// Transfer `index` of the current iteration arrived: appends the transfers that
    /// became ready, in index order, and says whether it was terminal.
    fn arrived(&mut self, index: u64, out: &mut Vec<Step>) -> bool;

    /// Calls `f` with every transfer of one iteration, in index order, without keeping
    /// them (time in proportion to the schedule, memory constant).
    fn for_each_transfer(&self, f: &mut dyn FnMut(Step));

    /// Calls `f` with each (channel, source, destination) some transfer uses, once.
    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32));

    /// Entries of state held between calls (counters, tables): what the expansion costs
    /// in memory, for tests of the bound.
    fn state_entries(&self) -> usize;
}

/// The expansion of `op` with `algorithm`, as [`schedule::build`] would schedule it.
pub fn build(
    op: CollectiveOp,
    algorithm: CollectiveAlgorithm,
    shape: Shape,
) -> Result<Box<dyn Expansion>, String> {
    use CollectiveAlgorithm as A;
    use CollectiveOp as O;
    if shape.ranks < 2 {
        return Err(format!(
            "a collective needs at least 2 ranks, found {}",
            shape.ranks
        ));
    }
    if shape.channels == 0 || shape.chunks == 0 {
        return Err("channels and chunks must be at least 1".to_string());
    }
    Ok(match (op, algorithm) {
        (O::AllReduce, A::Ring) => Box::new(Ring::new(shape, RingKind::AllReduce)),
        (O::AllGather, A::Ring) => Box::new(Ring::new(shape, RingKind::Gather { reduce: false })),
        (O::ReduceScatter, A::Ring) => Box::new(Ring::new(shape, RingKind::Gather { reduce: true })),
        (O::Broadcast, A::Ring) => Box::new(Ring::new(shape, RingKind::Broadcast)),
        (O::AllReduce, A::Tree) => Box::new(Tree::new(shape)),
        (O::AllReduce, A::Hierarchical) => Box::new(Hierarchical::new(shape)?),
        _ => Box::new(DagExpansion::new(schedule::build(op, algorithm, shape)?)),
    })
}

/// Division by a divisor fixed when the expansion is built, as a multiplication: the
/// expansions decode every transfer's index on the hot path, and a 64-bit division costs
/// tens of cycles. Exact for every `x` with `x * d < 2^64` (indices are below 2^40 and
/// divisors below 2^24 here): with `m = ceil(2^64 / d)`, `x * m / 2^64` exceeds `x / d`
/// by less than `x * d / 2^64 / d`, which cannot carry it past the next integer.
#[derive(Debug, Clone, Copy)]
struct FastDiv {
    d: u64,
    m: u64,
}

impl FastDiv {
    fn new(d: u64) -> Self {
        assert!(d >= 1, "invariant: divisors are at least 1");
        FastDiv {
            d,
            m: if d == 1 { 0 } else { u64::MAX / d + 1 },
        }
    }

    /// (x / d, x % d).
    #[inline]
    fn divmod(self, x: u64) -> (u64, u64) {
        if self.d == 1 {
            return (x, 0);
        }
        debug_assert!(
            u128::from(x) * u128::from(self.d) < 1 << 64,
            "invariant: FastDiv's range"
        );
        let q = ((u128::from(x) * u128::from(self.m)) >> 64) as u64;
        (q, x - q * self.d)
    }
}

/// Bytes of pieces `range` when `total` bytes are split into `n` pieces as
/// [`schedule::split`] splits them (the first `total % n` pieces one byte larger).
fn split_sum(total: u64, n: u64, range: Range<u64>) -> u64 {
    let (q, r) = (total / n, total % n);
    let len = range.end - range.start;
    q * len + r.min(range.end).saturating_sub(range.start.min(r))
}

/// The ring schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RingKind {
    /// Reduce-scatter then all-gather: 2(n-1) steps.
    AllReduce,
    /// Ring all-gather (`reduce` false) or reduce-scatter: n-1 steps.
    Gather { reduce: bool },
    /// Pipelined broadcast from rank 0 along the ring: n-1 transfers per chunk.
    Broadcast,
}

/// Ring schedules: each (channel, chunk) is its own ring; a transfer waits only for the one
/// that delivered into its sender at the step before, so its arrival readies exactly one
/// transfer. No state beyond the shape.
#[derive(Debug)]
struct Ring {
    shape: Shape,
    kind: RingKind,
    /// Transfers of one (channel, chunk) ring per step, and steps.
    per_step: u64,
    steps: u64,
    pieces: u64,
    div_per_step: FastDiv,
    div_steps: FastDiv,
    div_chunks: FastDiv,
}

impl Ring {
    fn new(shape: Shape, kind: RingKind) -> Self {
        let n = u64::from(shape.ranks);
        let (ch, k) = (u64::from(shape.channels), u64::from(shape.chunks));
        let (per_step, steps, pieces) = match kind {
            RingKind::AllReduce => (n, 2 * (n - 1), ch * n * k),
            RingKind::Gather { .. } => (n, n - 1, n * ch * k),
            RingKind::Broadcast => (1, n - 1, ch * k),
        };
        Ring {
            shape,
            kind,
            per_step,
            steps,
            pieces,
            div_per_step: FastDiv::new(per_step),
            div_steps: FastDiv::new(steps),
            div_chunks: FastDiv::new(k),
        }
    }

    /// (channel, chunk, step, position) of an index.
    #[inline]
    fn decode(&self, index: u64) -> (u64, u64, u64, u64) {
        let (rest, i) = self.div_per_step.divmod(index);
        let (rest, s) = self.div_steps.divmod(rest);
        let (c, kk) = self.div_chunks.divmod(rest);
        (c, kk, s, i)
    }

    fn encode(&self, c: u64, kk: u64, s: u64, i: u64) -> u64 {
        ((c * u64::from(self.shape.chunks) + kk) * self.steps + s) * self.per_step + i
    }

    fn step(&self, index: u64) -> Step {
        let (c, kk, s, i) = self.decode(index);
        self.step_at(index, c, kk, s, i)
    }

    #[inline]
    fn step_at(&self, index: u64, c: u64, kk: u64, s: u64, i: u64) -> Step {
        let n = u64::from(self.shape.ranks);
        let (ch, k) = (u64::from(self.shape.channels), u64::from(self.shape.chunks));
        let (src, dst, piece) = match self.kind {
            RingKind::AllReduce => {
                let blk = if s < n - 1 {
                    (i + 2 * n - s - 1) % n
                } else {
                    (i + n - (s - (n - 1))) % n
                };
                (i, (i + 1) % n, (c * n + blk) * k + kk)
            }
            RingKind::Gather { reduce } => {
                let blk = if reduce {
                    (i + 2 * n - s - 1) % n
                } else {
                    (i + n - s) % n
                };
                (i, (i + 1) % n, (blk * ch + c) * k + kk)
            }
            // Broadcast: the step is the sender's position.
            RingKind::Broadcast => (s, s + 1, c * k + kk),
        };
        Step {
            index,
            src: src as u32,
            dst: dst as u32,
            bytes: split_sum(self.shape.bytes, self.pieces, piece..piece + 1),
            channel: c as u32,
            has_deps: s > 0,
        }
    }
}

impl Expansion for Ring {
    fn len(&self) -> u64 {
        u64::from(self.shape.channels) * u64::from(self.shape.chunks) * self.steps * self.per_step
    }

    fn terminals(&self) -> u64 {
        u64::from(self.shape.channels) * u64::from(self.shape.chunks) * self.per_step
    }

    fn is_terminal(&self, index: u64) -> bool {
        self.decode(index).2 + 1 == self.steps
    }

    fn begin(&mut self, out: &mut Vec<Step>) {
        for c in 0..u64::from(self.shape.channels) {
            for kk in 0..u64::from(self.shape.chunks) {
                for i in 0..self.per_step {
                    out.push(self.step(self.encode(c, kk, 0, i)));
                }
            }
        }
    }

    fn arrived(&mut self, index: u64, out: &mut Vec<Step>) -> bool {
        let (c, kk, s, i) = self.decode(index);
        if s + 1 < self.steps {
            let next = if self.kind == RingKind::Broadcast || i + 1 == self.per_step {
                0
            } else {
                i + 1
            };
            out.push(self.step_at(self.encode(c, kk, s + 1, next), c, kk, s + 1, next));
            false
        } else {
            true
        }
    }

    fn for_each_transfer(&self, f: &mut dyn FnMut(Step)) {
        for index in 0..self.len() {
            f(self.step(index));
        }
    }

    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32)) {
        let n = self.shape.ranks;
        for c in 0..self.shape.channels {
            match self.kind {
                RingKind::Broadcast => (0..n - 1).for_each(|i| f(c, i, i + 1)),
                _ => (0..n).for_each(|i| f(c, i, (i + 1) % n)),
            }
        }
    }

    fn state_entries(&self) -> usize {
        0
    }
}

/// NCCL's double binary tree: per (channel, tree, chunk) block, every node sends up once
/// all its children's data arrived, the root sends down once all of its own children's did,
/// and a node forwards down what it received from its parent. State: a count of children
/// still to arrive per node and block.
#[derive(Debug)]
struct Tree {
    shape: Shape,
    /// parent[v] (None for the root, 0).
    parent: Vec<Option<u32>>,
    /// children of each node, ascending, as CSR.
    child_start: Vec<u32>,
    children: Vec<u32>,
    /// Position of each non-root node's up transfer in its block (its post-order rank).
    up_pos: Vec<u32>,
    /// Node of each up position.
    up_node: Vec<u32>,
    /// First down position of each node's children (down transfers follow the ups).
    down_first: Vec<u32>,
    /// (parent, child) of each down position, after the n-1 ups.
    down_edge: Vec<(u32, u32)>,
    /// Children still to arrive, per block and node.
    pending: Vec<u8>,
    div_block: FastDiv,
}

impl Tree {
    fn new(shape: Shape) -> Self {
        let n = shape.ranks;
        let parent: Vec<Option<u32>> = (0..n).map(|v| btree_parent(n, v)).collect();
        let mut kids: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
        for v in 0..n {
            if let Some(p) = parent[v as usize] {
                kids[p as usize].push(v);
            }
        }
        // Post-order from the root, iteratively (the builder's recursion, unrolled).
        let mut post = Vec::with_capacity(n as usize);
        let mut stack = vec![(0u32, 0usize)];
        while let Some((v, next)) = stack.pop() {
            if let Some(&c) = kids[v as usize].get(next) {
                stack.push((v, next + 1));
                stack.push((c, 0));
            } else {
                post.push(v);
            }
        }
        let mut up_pos = vec![u32::MAX; n as usize];
        let up_node: Vec<u32> = post.iter().copied().filter(|&v| v != 0).collect();
        for (i, &v) in up_node.iter().enumerate() {
            up_pos[v as usize] = i as u32;
        }
        let mut down_first = vec![0u32; n as usize];
        let mut down_edge = Vec::with_capacity(n as usize);
        for &v in post.iter().rev() {
            down_first[v as usize] = (n - 1) + down_edge.len() as u32;
            down_edge.extend(kids[v as usize].iter().map(|&c| (v, c)));
        }
        let mut child_start = Vec::with_capacity(n as usize + 1);
        let mut children = Vec::with_capacity(n as usize);
        for k in &kids {
            child_start.push(children.len() as u32);
            children.extend(k);
        }
        child_start.push(children.len() as u32);
        let blocks = shape.channels as usize * 2 * shape.chunks as usize;
        let mut t = Tree {
            shape,
            parent,
            child_start,
            children,
            up_pos,
            up_node,
            down_first,
            down_edge,
            pending: vec![0; blocks * n as usize],
            div_block: FastDiv::new(2 * u64::from(n - 1)),
        };
        t.reset();
        t
    }

    fn kids(&self, v: u32) -> &[u32] {
        &self.children[self.child_start[v as usize] as usize..self.child_start[v as usize + 1] as usize]
    }

    fn block_len(&self) -> u64 {
        2 * u64::from(self.shape.ranks - 1)
    }

    fn reset(&mut self) {
        let n = self.shape.ranks as usize;
        let counts: Vec<u8> = (0..n).map(|v| self.kids_len(v)).collect();
        for (i, p) in self.pending.iter_mut().enumerate() {
            *p = counts[i % n];
        }
    }

    fn kids_len(&self, v: usize) -> u8 {
        (self.child_start[v + 1] - self.child_start[v]) as u8
    }

    /// The step at `pos` of block `b`.
    fn step(&self, b: u64, pos: u32) -> Step {
        let n = self.shape.ranks;
        let (k, ch) = (u64::from(self.shape.chunks), self.shape.channels);
        let (c, tree, kk) = (b / (2 * k), (b / k) % 2, b % k);
        let map = |v: u32| if tree == 0 { v } else { (v + 1) % n };
        let (src, dst, has_deps) = if pos < n - 1 {
            let v = self.up_node[pos as usize];
            let p = self.parent[v as usize].expect("invariant: up transfers leave non-root nodes");
            (v, p, !self.kids(v).is_empty())
        } else {
            let (v, c) = self.down_edge[(pos - (n - 1)) as usize];
            (v, c, true)
        };
        // Pieces: channel c, block `tree`, chunk kk of a (channels x 2 x chunks) layout.
        let piece = (c * 2 + tree) * k + kk;
        Step {
            index: b * self.block_len() + u64::from(pos),
            src: map(src),
            dst: map(dst),
            bytes: split_sum(self.shape.bytes, u64::from(ch) * 2 * k, piece..piece + 1),
            channel: c as u32,
            has_deps,
        }
    }

    fn push_downs(&self, b: u64, v: u32, out: &mut Vec<Step>) {
        let first = self.down_first[v as usize];
        for j in 0..self.kids(v).len() as u32 {
            out.push(self.step(b, first + j));
        }
    }
}

impl Expansion for Tree {
    fn len(&self) -> u64 {
        u64::from(self.shape.channels) * 2 * u64::from(self.shape.chunks) * self.block_len()
    }

    fn terminals(&self) -> u64 {
        let leaves = (0..self.shape.ranks).filter(|&v| self.kids(v).is_empty()).count() as u64;
        u64::from(self.shape.channels) * 2 * u64::from(self.shape.chunks) * leaves
    }

    fn is_terminal(&self, index: u64) -> bool {
        let n = self.shape.ranks;
        let pos = (index % self.block_len()) as u32;
        pos >= n - 1 && self.kids(self.down_edge[(pos - (n - 1)) as usize].1).is_empty()
    }

    fn begin(&mut self, out: &mut Vec<Step>) {
        self.reset();
        let blocks = self.pending.len() as u64 / u64::from(self.shape.ranks);
        for b in 0..blocks {
            for (pos, &v) in self.up_node.iter().enumerate() {
                if self.kids(v).is_empty() {
                    out.push(self.step(b, pos as u32));
                }
            }
        }
    }

    fn arrived(&mut self, index: u64, out: &mut Vec<Step>) -> bool {
        let n = self.shape.ranks;
        let (b, pos) = self.div_block.divmod(index);
        let pos = pos as u32;
        if pos < n - 1 {
            let v = self.up_node[pos as usize];
            let p = self.parent[v as usize].expect("invariant: up transfers leave non-root nodes");
            let slot = &mut self.pending[(b * u64::from(n) + u64::from(p)) as usize];
            *slot -= 1;
            if *slot == 0 {
                if p == 0 {
                    self.push_downs(b, 0, out);
                } else {
                    out.push(self.step(b, self.up_pos[p as usize]));
                }
            }
            false
        } else {
            let (_, w) = self.down_edge[(pos - (n - 1)) as usize];
            self.push_downs(b, w, out);
            self.kids(w).is_empty()
        }
    }

    fn for_each_transfer(&self, f: &mut dyn FnMut(Step)) {
        let blocks = self.pending.len() as u64 / u64::from(self.shape.ranks);
        for b in 0..blocks {
            for pos in 0..self.block_len() as u32 {
                f(self.step(b, pos));
            }
        }
    }

    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32)) {
        let n = self.shape.ranks;
        let mut seen = std::collections::BTreeSet::new();
        for c in 0..self.shape.channels {
            seen.clear();
            for tree in 0..2 {
                let map = |v: u32| if tree == 0 { v } else { (v + 1) % n };
                for v in 1..n {
                    let p = self.parent[v as usize].expect("non-root");
                    for (a, z) in [(map(v), map(p)), (map(p), map(v))] {
                        if seen.insert((a, z)) {
                            f(c, a, z);
                        }
                    }
                }
            }
        }
    }

    fn state_entries(&self) -> usize {
        self.pending.len() + self.parent.len() * 5 + self.down_edge.len()
    }
}

/// The hierarchical AllReduce on hosts of `g` ranks: ring reduce-scatter inside each host,
/// ring AllReduce across hosts among the ranks of one local index (one rail each), ring
/// all-gather inside each host. The all-gather's first step from a rank waits for the
/// rank's last delivery of the first phase and for every transfer the second phase brought
/// it; a counter per rank and channel stands for that list.
#[derive(Debug)]
struct Hierarchical {
    shape: Shape,
    g: u32,
    h: u32,
    p1: u64,
    p2: u64,
    p3: u64,
    /// Deliveries still to arrive before each (channel, rank)'s first all-gather send.
    pending: Vec<u32>,
    div_channel: FastDiv,
    div_g: FastDiv,
    div_h: FastDiv,
    div_h1: FastDiv,
    div_k: FastDiv,
}

/// Where a hierarchical transfer sits: phase, then its coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HStep {
    /// Intra-host reduce-scatter: (step, host, local).
    Scatter(u32, u32, u32),
    /// Inter-host ring: (local, chunk, phase, step, host).
    Across(u32, u32, u32, u32, u32),
    /// Intra-host all-gather: (step, host, local).
    Gather(u32, u32, u32),
}

impl Hierarchical {
    fn new(shape: Shape) -> Result<Self, String> {
        let n = shape.ranks;
        let g = shape.ranks_per_host.max(1);
        if !n.is_multiple_of(g) {
            return Err(format!("{n} ranks do not split into hosts of {g}"));
        }
        let h = n / g;
        let (gu, hu, k) = (u64::from(g), u64::from(h), u64::from(shape.chunks));
        let p1 = (gu - 1) * hu * gu;
        let p2 = gu * k * 2 * (hu - 1) * hu;
        let mut x = Hierarchical {
            shape,
            g,
            h,
            p1,
            p2,
            p3: p1,
            pending: vec![0; shape.channels as usize * n as usize],
            div_channel: FastDiv::new((p1 + p2 + p1).max(1)),
            div_g: FastDiv::new(gu),
            div_h: FastDiv::new(hu),
            div_h1: FastDiv::new((hu - 1).max(1)),
            div_k: FastDiv::new(k),
        };
        x.reset();
        Ok(x)
    }

    fn per_channel(&self) -> u64 {
        self.p1 + self.p2 + self.p3
    }

    fn rank(&self, host: u32, local: u32) -> u32 {
        host * self.g + local
    }

    fn reset(&mut self) {
        let first = u32::from(self.g >= 2)
            + if self.h >= 2 {
                self.shape.chunks * 2 * (self.h - 1)
            } else {
                0
            };
        self.pending.iter_mut().for_each(|p| *p = first);
    }

    fn decode(&self, index: u64) -> (u32, HStep) {
        let (c, mut r) = self.div_channel.divmod(index);
        let c = c as u32;
        if r < self.p1 {
            let (rest, l) = self.div_g.divmod(r);
            let (step, host) = self.div_h.divmod(rest);
            return (c, HStep::Scatter(step as u32, host as u32, l as u32));
        }
        r -= self.p1;
        if r < self.p2 {
            let (rest, host) = self.div_h.divmod(r);
            let (rest, step) = self.div_h1.divmod(rest);
            let (phase, rest) = (rest % 2, rest / 2);
            let (l, kk) = self.div_k.divmod(rest);
            return (
                c,
                HStep::Across(l as u32, kk as u32, phase as u32, step as u32, host as u32),
            );
        }
        r -= self.p2;
        let (rest, l) = self.div_g.divmod(r);
        let (step, host) = self.div_h.divmod(rest);
        (c, HStep::Gather(step as u32, host as u32, l as u32))
    }

    fn encode(&self, c: u32, s: HStep) -> u64 {
        let (g, h, k) = (u64::from(self.g), u64::from(self.h), u64::from(self.shape.chunks));
        let base = u64::from(c) * self.per_channel();
        match s {
            HStep::Scatter(step, host, l) => {
                base + (u64::from(step) * h + u64::from(host)) * g + u64::from(l)
            }
            HStep::Across(l, kk, phase, step, host) => {
                base + self.p1
                    + (((u64::from(l) * k + u64::from(kk)) * 2 + u64::from(phase)) * (h - 1)
                        + u64::from(step))
                        * h
                    + u64::from(host)
            }
            HStep::Gather(step, host, l) => {
                base + self.p1 + self.p2 + (u64::from(step) * h + u64::from(host)) * g + u64::from(l)
            }
        }
    }

    fn step(&self, c: u32, s: HStep) -> Step {
        let (g, h, k) = (self.g, self.h, self.shape.chunks);
        let total = u64::from(self.shape.channels) * u64::from(g) * u64::from(h) * u64::from(k);
        let shard = |i: u32| u64::from((c * g + i) * h) * u64::from(k);
        let shard_bytes = |i: u32| split_sum(self.shape.bytes, total, shard(i)..shard(i) + u64::from(h * k));
        let (src, dst, bytes, has_deps) = match s {
            HStep::Scatter(step, host, l) => (
                self.rank(host, l),
                self.rank(host, (l + 1) % g),
                shard_bytes((l + 2 * g - step - 1) % g),
                step > 0,
            ),
            HStep::Across(l, kk, phase, step, host) => {
                let j = if phase == 0 {
                    (host + 2 * h - step - 1) % h
                } else {
                    (host + h - step) % h
                };
                let p = u64::from(((c * g + l) * h + j) * k + kk);
                (
                    self.rank(host, l),
                    self.rank((host + 1) % h, l),
                    split_sum(self.shape.bytes, total, p..p + 1),
                    g >= 2 || phase > 0 || step > 0,
                )
            }
            HStep::Gather(step, host, l) => (
                self.rank(host, l),
                self.rank(host, (l + 1) % g),
                shard_bytes((l + g - step) % g),
                true,
            ),
        };
        Step {
            index: self.encode(c, s),
            src,
            dst,
            bytes,
            channel: c,
            has_deps,
        }
    }

    fn is_terminal_step(&self, s: HStep) -> bool {
        match s {
            HStep::Scatter(..) => false,
            HStep::Across(_, _, phase, step, _) => self.g == 1 && phase == 1 && step + 2 == self.h,
            HStep::Gather(step, _, _) => step + 2 == self.g,
        }
    }

    /// A delivery into (channel, rank) that the rank's first all-gather send waits for.
    fn count_down(&mut self, c: u32, host: u32, l: u32, out: &mut Vec<Step>) {
        let at = (c * self.shape.ranks + self.rank(host, l)) as usize;
        let slot = &mut self.pending[at];
        *slot -= 1;
        if *slot == 0 && self.g >= 2 {
            out.push(self.step(c, HStep::Gather(0, host, l)));
        }
    }
}

impl Expansion for Hierarchical {
    fn len(&self) -> u64 {
        u64::from(self.shape.channels) * self.per_channel()
    }

    fn terminals(&self) -> u64 {
        let per_channel = if self.g >= 2 {
            u64::from(self.h) * u64::from(self.g)
        } else {
            u64::from(self.shape.chunks) * u64::from(self.h)
        };
        u64::from(self.shape.channels) * per_channel
    }

    fn is_terminal(&self, index: u64) -> bool {
        self.is_terminal_step(self.decode(index).1)
    }

    fn begin(&mut self, out: &mut Vec<Step>) {
        self.reset();
        for c in 0..self.shape.channels {
            if self.g >= 2 {
                for host in 0..self.h {
                    for l in 0..self.g {
                        out.push(self.step(c, HStep::Scatter(0, host, l)));
                    }
                }
            } else {
                for kk in 0..self.shape.chunks {
                    for host in 0..self.h {
                        out.push(self.step(c, HStep::Across(0, kk, 0, 0, host)));
                    }
                }
            }
        }
    }

    fn arrived(&mut self, index: u64, out: &mut Vec<Step>) -> bool {
        let (g, h) = (self.g, self.h);
        let (c, s) = self.decode(index);
        let terminal = self.is_terminal_step(s);
        match s {
            HStep::Scatter(step, host, l) => {
                let d = (l + 1) % g;
                if step + 2 < g {
                    out.push(self.step(c, HStep::Scatter(step + 1, host, d)));
                } else {
                    // The last delivery of the first phase into (host, d): its ring steps
                    // across hosts, chunk by chunk, may start.
                    if h >= 2 {
                        for kk in 0..self.shape.chunks {
                            out.push(self.step(c, HStep::Across(d, kk, 0, 0, host)));
                        }
                    }
                    self.count_down(c, host, d, out);
                }
            }
            HStep::Across(l, kk, phase, step, host) => {
                let d = (host + 1) % h;
                let next = if step + 2 < h {
                    Some((phase, step + 1))
                } else if phase == 0 {
                    Some((1, 0))
                } else {
                    None
                };
                if let Some((p, st)) = next {
                    out.push(self.step(c, HStep::Across(l, kk, p, st, d)));
                }
                if g >= 2 {
                    self.count_down(c, d, l, out);
                }
            }
            HStep::Gather(step, host, l) => {
                if step + 2 < g {
                    out.push(self.step(c, HStep::Gather(step + 1, host, (l + 1) % g)));
                }
            }
        }
        terminal
    }

    fn for_each_transfer(&self, f: &mut dyn FnMut(Step)) {
        for index in 0..self.len() {
            f(self.step(self.decode(index).0, self.decode(index).1));
        }
    }

    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32)) {
        let (g, h) = (self.g, self.h);
        for c in 0..self.shape.channels {
            for host in 0..h {
                for l in 0..g {
                    if g >= 2 {
                        f(c, self.rank(host, l), self.rank(host, (l + 1) % g));
                    }
                    if h >= 2 {
                        f(c, self.rank(host, l), self.rank((host + 1) % h, l));
                    }
                }
            }
        }
    }

    fn state_entries(&self) -> usize {
        self.pending.len()
    }
}

/// Any explicit schedule, expanded by counting each transfer's dependencies down. It keeps
/// the whole schedule: for the algorithms without a native generator.
#[derive(Debug)]
pub struct DagExpansion {
    schedule: Schedule,
    /// Dependents of each transfer, as CSR (ascending).
    dep_start: Vec<u32>,
    dependents: Vec<u32>,
    pending: Vec<u32>,
}

impl DagExpansion {
    /// Wraps an explicit schedule.
    pub fn new(schedule: Schedule) -> Self {
        let n = schedule.transfers.len();
        let mut counts = vec![0u32; n + 1];
        for t in &schedule.transfers {
            for &d in &t.deps {
                counts[d as usize + 1] += 1;
            }
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let mut fill = counts.clone();
        let mut dependents = vec![0u32; counts[n] as usize];
        for (i, t) in schedule.transfers.iter().enumerate() {
            for &d in &t.deps {
                dependents[fill[d as usize] as usize] = i as u32;
                fill[d as usize] += 1;
            }
        }
        let pending = schedule.transfers.iter().map(|t| t.deps.len() as u32).collect();
        DagExpansion {
            schedule,
            dep_start: counts,
            dependents,
            pending,
        }
    }

    fn step(&self, i: usize) -> Step {
        let t = &self.schedule.transfers[i];
        Step {
            index: i as u64,
            src: t.src,
            dst: t.dst,
            bytes: self.schedule.transfer_bytes(t),
            channel: t.channel,
            has_deps: !t.deps.is_empty(),
        }
    }
}

impl Expansion for DagExpansion {
    fn len(&self) -> u64 {
        self.schedule.transfers.len() as u64
    }

    fn terminals(&self) -> u64 {
        (0..self.schedule.transfers.len())
            .filter(|&i| self.dep_start[i] == self.dep_start[i + 1])
            .count() as u64
    }

    fn is_terminal(&self, index: u64) -> bool {
        let i = index as usize;
        self.dep_start[i] == self.dep_start[i + 1]
    }

    fn begin(&mut self, out: &mut Vec<Step>) {
        for (i, t) in self.schedule.transfers.iter().enumerate() {
            self.pending[i] = t.deps.len() as u32;
        }
        for i in 0..self.schedule.transfers.len() {
            if self.pending[i] == 0 {
                out.push(self.step(i));
            }
        }
    }

    fn arrived(&mut self, index: u64, out: &mut Vec<Step>) -> bool {
        let i = index as usize;
        for j in self.dep_start[i]..self.dep_start[i + 1] {
            let d = self.dependents[j as usize] as usize;
            self.pending[d] -= 1;
            if self.pending[d] == 0 {
                out.push(self.step(d));
            }
        }
        self.dep_start[i] == self.dep_start[i + 1]
    }

    fn for_each_transfer(&self, f: &mut dyn FnMut(Step)) {
        for i in 0..self.schedule.transfers.len() {
            f(self.step(i));
        }
    }

    fn connections(&self, f: &mut dyn FnMut(u32, u32, u32)) {
        let set: std::collections::BTreeSet<(u32, u32, u32)> = self
            .schedule
            .transfers
            .iter()
            .map(|t| (t.channel, t.src, t.dst))
            .collect();
        for (c, s, d) in set {
            f(c, s, d);
        }
    }

    fn state_entries(&self) -> usize {
        self.schedule.transfers.len() * 2 + self.dependents.len()
    }
}

#[cfg(test)]
mod tests {
    use super::FastDiv;
    use proptest::prelude::*;

    proptest! {
        /// The multiplication that stands for division gives division's quotient and
        /// remainder over the range the expansions use, divisors 1 and powers of two
        /// included.
        #[test]
        fn fast_division_is_exact(d in 1u64..(1 << 24), x in 0u64..(1 << 40), shift in 0u32..24) {
            for d in [d, 1 << shift, 1] {
                prop_assert_eq!(FastDiv::new(d).divmod(x), (x / d, x % d));
            }
        }
    }
}
