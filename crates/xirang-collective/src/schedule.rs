//! Collective schedules as dependency graphs of point-to-point transfers.
//!
//! A collective's buffer of `S` bytes is cut into *pieces*; a [`Transfer`] moves a
//! contiguous range of pieces from one rank to another, either reducing into the
//! receiver's copy (reduce-scatter, tree reduce) or overwriting it (all-gather, broadcast).
//! A transfer may start once the transfers it depends on have arrived. Channels are
//! independent slices of the buffer with their own transfers (and, in a fabric, their own
//! QPs and rails).
//!
//! [`Schedule::verify`] executes a schedule symbolically: every rank's copy of every piece
//! is the set of ranks whose data it contains, and the final sets must be those the
//! operation promises (every rank holds the full reduction after an AllReduce, and so on).

use std::ops::Range;

use serde::{Deserialize, Serialize};

pub use xirang_fabric::workload::{CollectiveAlgorithm, CollectiveOp};

/// One point-to-point transfer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// Sending rank.
    pub src: u32,
    /// Receiving rank.
    pub dst: u32,
    /// Pieces moved (indices into [`Schedule::piece_bytes`]).
    pub pieces: Range<u32>,
    /// The receiver reduces into its copy (true) or overwrites it (false).
    pub reduce: bool,
    /// Transfers that must have arrived before this one starts.
    pub deps: Vec<u32>,
    /// Channel (one QP set and, on a rail-optimized fabric, one rail).
    pub channel: u32,
    /// Algorithm step (for reports and per-step kernel time).
    pub step: u32,
}

/// A collective as a DAG of transfers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The operation.
    pub op: CollectiveOp,
    /// The algorithm.
    pub algorithm: CollectiveAlgorithm,
    /// Number of ranks.
    pub ranks: u32,
    /// Root rank (broadcast).
    pub root: u32,
    /// Buffer size as nccl-tests defines it for the operation.
    pub bytes: u64,
    /// Size of each piece; they add up to the bytes each rank's buffer holds.
    pub piece_bytes: Vec<u64>,
    /// Transfers, in an order where every dependency comes first.
    pub transfers: Vec<Transfer>,
}

/// Splits `bytes` into `n` sizes that differ by at most one and add up to `bytes`.
pub fn split(bytes: u64, n: u64) -> Vec<u64> {
    let (q, r) = (bytes / n, bytes % n);
    (0..n).map(|i| q + u64::from(i < r)).collect()
}

impl Schedule {
    /// Bytes a transfer carries.
    pub fn transfer_bytes(&self, t: &Transfer) -> u64 {
        self.piece_bytes[t.pieces.start as usize..t.pieces.end as usize]
            .iter()
            .sum()
    }

    /// Bytes each rank sends, indexed by rank.
    pub fn bytes_sent_per_rank(&self) -> Vec<u64> {
        let mut v = vec![0; self.ranks as usize];
        for t in &self.transfers {
            v[t.src as usize] += self.transfer_bytes(t);
        }
        v
    }

    /// Number of sequential steps on the longest dependency chain.
    pub fn depth(&self) -> u32 {
        let mut d = vec![0u32; self.transfers.len()];
        for (i, t) in self.transfers.iter().enumerate() {
            d[i] = 1 + t.deps.iter().map(|x| d[*x as usize]).max().unwrap_or(0);
        }
        d.into_iter().max().unwrap_or(0)
    }

    /// Checks the schedule: dependencies point backwards (so the graph is acyclic),
    /// ranks and pieces are in range, no rank sends to itself, reductions never count a
    /// rank's data twice, and symbolic execution ends with what the operation promises.
    pub fn verify(&self) -> Result<(), String> {
        let n = self.ranks as usize;
        let pieces = self.piece_bytes.len();
        for (i, t) in self.transfers.iter().enumerate() {
            if t.src as usize >= n || t.dst as usize >= n || t.src == t.dst {
                return Err(format!("transfer {i}: bad ranks {} -> {}", t.src, t.dst));
            }
            if t.pieces.start >= t.pieces.end || t.pieces.end as usize > pieces {
                return Err(format!("transfer {i}: bad pieces {:?}", t.pieces));
            }
            if let Some(d) = t.deps.iter().find(|d| **d as usize >= i) {
                return Err(format!(
                    "transfer {i} depends on {d}, which does not come before it"
                ));
            }
        }
        let mut held = self.initial_holdings();
        for (i, t) in self.transfers.iter().enumerate() {
            for p in t.pieces.clone() {
                let from = held[t.src as usize][p as usize].clone();
                if from.is_empty() {
                    return Err(format!(
                        "transfer {i}: rank {} sends piece {p} it does not hold",
                        t.src
                    ));
                }
                let to = &mut held[t.dst as usize][p as usize];
                if t.reduce {
                    if to.intersects(&from) {
                        return Err(format!(
                            "transfer {i}: piece {p} reduced twice with the same data at rank {}",
                            t.dst
                        ));
                    }
                    to.union(&from);
                } else {
                    *to = from;
                }
            }
        }
        self.check_final(&held)
    }

    /// What a rank's value of a piece must be made of, for the operation's semantics:
    /// `(initial, final)` as functions of (rank, piece).
    fn initial_holdings(&self) -> Vec<Vec<RankSet>> {
        let n = self.ranks as usize;
        let pieces = self.piece_bytes.len();
        (0..n)
            .map(|r| {
                (0..pieces)
                    .map(|p| {
                        let mut s = RankSet::new(n);
                        let has = match self.op {
                            CollectiveOp::AllReduce | CollectiveOp::ReduceScatter => true,
                            CollectiveOp::AllGather | CollectiveOp::SendRecv => self.owner(p) == r,
                            CollectiveOp::Broadcast => r == self.root as usize,
                            CollectiveOp::AllToAll => self.a2a_block(p).0 == r,
                        };
                        if has {
                            s.insert(if self.op == CollectiveOp::AllToAll {
                                self.a2a_block(p).0
                            } else {
                                r
                            });
                        }
                        s
                    })
                    .collect()
            })
            .collect()
    }

    /// The rank a piece belongs to in all-gather and reduce-scatter: the buffer is laid out
    /// rank by rank, each rank's shard cut into the same number of pieces.
    fn owner(&self, piece: usize) -> usize {
        let per_rank = self.piece_bytes.len() / self.ranks as usize;
        piece / per_rank.max(1)
    }

    /// (source, destination) of an all-to-all piece: the buffer is n x n blocks, each cut
    /// into the same number of pieces.
    fn a2a_block(&self, piece: usize) -> (usize, usize) {
        let n = self.ranks as usize;
        let sub = (self.piece_bytes.len() / (n * n)).max(1);
        let b = piece / sub;
        (b / n, b % n)
    }

    fn check_final(&self, held: &[Vec<RankSet>]) -> Result<(), String> {
        let n = self.ranks as usize;
        let all = RankSet::full(n);
        for (r, pieces) in held.iter().enumerate() {
            for (p, s) in pieces.iter().enumerate() {
                let want = match self.op {
                    CollectiveOp::AllReduce => Some(all.clone()),
                    CollectiveOp::ReduceScatter => (self.owner(p) == r).then(|| all.clone()),
                    CollectiveOp::AllGather => Some(RankSet::single(n, self.owner(p))),
                    CollectiveOp::SendRecv => {
                        (self.owner(p) == (r + n - 1) % n).then(|| RankSet::single(n, self.owner(p)))
                    }
                    CollectiveOp::Broadcast => Some(RankSet::single(n, self.root as usize)),
                    CollectiveOp::AllToAll => {
                        let (src, dst) = self.a2a_block(p);
                        (dst == r).then(|| RankSet::single(n, src))
                    }
                };
                if let Some(w) = want
                    && *s != w
                {
                    return Err(format!(
                        "rank {r} ends with piece {p} holding data of {} ranks, expected {}",
                        s.len(),
                        w.len()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A set of ranks as a bitset.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RankSet(Vec<u64>);

impl RankSet {
    fn new(n: usize) -> Self {
        RankSet(vec![0; n.div_ceil(64)])
    }
    fn single(n: usize, r: usize) -> Self {
        let mut s = RankSet::new(n);
        s.insert(r);
        s
    }
    fn full(n: usize) -> Self {
        let mut s = RankSet::new(n);
        for r in 0..n {
            s.insert(r);
        }
        s
    }
    fn insert(&mut self, r: usize) {
        self.0[r / 64] |= 1 << (r % 64);
    }
    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    fn intersects(&self, o: &RankSet) -> bool {
        self.0.iter().zip(&o.0).any(|(a, b)| a & b != 0)
    }
    fn union(&mut self, o: &RankSet) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a |= b;
        }
    }
    fn len(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
}

/// Parameters of a schedule builder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Ranks.
    pub ranks: u32,
    /// Buffer bytes (as nccl-tests defines them for the operation).
    pub bytes: u64,
    /// Channels (independent buffer slices).
    pub channels: u32,
    /// Chunks per piece: pieces are cut further so that steps pipeline.
    pub chunks: u32,
    /// GPUs per host, for the hierarchical algorithm (1 = flat).
    pub ranks_per_host: u32,
}

/// Builds the schedule of `op` with `algorithm`.
pub fn build(op: CollectiveOp, algorithm: CollectiveAlgorithm, shape: Shape) -> Result<Schedule, String> {
    let s = shape;
    if s.ranks < 2 {
        return Err(format!("a collective needs at least 2 ranks, found {}", s.ranks));
    }
    if s.channels == 0 || s.chunks == 0 {
        return Err("channels and chunks must be at least 1".to_string());
    }
    use CollectiveAlgorithm as A;
    use CollectiveOp as O;
    let mut b = Builder::new(op, algorithm, s);
    match (op, algorithm) {
        (O::AllReduce, A::Ring) => b.ring_all_reduce(),
        (O::AllReduce, A::Tree) => b.double_binary_tree(),
        (O::AllReduce, A::HalvingDoubling) => b.halving_doubling(),
        (O::AllReduce, A::Hierarchical) => b.hierarchical()?,
        (O::AllGather, A::Ring) => b.ring_gather_like(false),
        (O::ReduceScatter, A::Ring) => b.ring_gather_like(true),
        (O::Broadcast, A::Ring) => b.ring_broadcast(),
        (O::AllToAll, _) => b.all_to_all(),
        (O::SendRecv, _) => b.send_recv(),
        (op, a) => return Err(format!("{a:?} is not implemented for {op:?}; use ring")),
    }
    Ok(b.done())
}

struct Builder {
    s: Schedule,
    shape: Shape,
}

impl Builder {
    fn new(op: CollectiveOp, algorithm: CollectiveAlgorithm, shape: Shape) -> Self {
        Builder {
            s: Schedule {
                op,
                algorithm,
                ranks: shape.ranks,
                root: 0,
                bytes: shape.bytes,
                piece_bytes: Vec::new(),
                transfers: Vec::new(),
            },
            shape,
        }
    }

    fn done(self) -> Schedule {
        self.s
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one argument per Transfer field keeps the fourteen call sites to one line each"
    )]
    fn push(
        &mut self,
        src: u32,
        dst: u32,
        pieces: Range<u32>,
        reduce: bool,
        deps: Vec<u32>,
        channel: u32,
        step: u32,
    ) -> u32 {
        self.s.transfers.push(Transfer {
            src,
            dst,
            pieces,
            reduce,
            deps,
            channel,
            step,
        });
        (self.s.transfers.len() - 1) as u32
    }

    /// Lays out the per-rank buffer as `channels x blocks x chunks` pieces and returns the
    /// first piece of (channel, block); chunk k of it is that plus k.
    fn layout(&mut self, per_rank_bytes: u64, blocks: u32) -> impl Fn(u32, u32) -> u32 + use<> {
        let (ch, k) = (self.shape.channels, self.shape.chunks);
        self.s.piece_bytes = split(per_rank_bytes, u64::from(ch * blocks * k));
        move |c, blk| (c * blocks + blk) * k
    }

    /// Ring AllReduce: reduce-scatter then all-gather around a ring, per channel, each
    /// block cut into chunks that pipeline (a chunk moves on as soon as it arrived).
    fn ring_all_reduce(&mut self) {
        let n = self.shape.ranks;
        let piece = self.layout(self.shape.bytes, n);
        for c in 0..self.shape.channels {
            for k in 0..self.shape.chunks {
                // into[i] = transfer that last delivered a block to ring position i.
                let mut into: Vec<Option<u32>> = vec![None; n as usize];
                // Reduce-scatter: at step s position i sends block (i - s - 1); after n-1
                // steps position j holds block j fully reduced.
                for step in 0..n - 1 {
                    let mut next = vec![None; n as usize];
                    for i in 0..n {
                        let blk = (i + 2 * n - step - 1) % n;
                        let p = piece(c, blk) + k;
                        let deps = into[i as usize].into_iter().collect();
                        let t = self.push(i, (i + 1) % n, p..p + 1, true, deps, c, step);
                        next[((i + 1) % n) as usize] = Some(t);
                    }
                    into = next;
                }
                // All-gather: at step s position i forwards block (i - s).
                for step in 0..n - 1 {
                    let mut next = vec![None; n as usize];
                    for i in 0..n {
                        let blk = (i + n - step) % n;
                        let p = piece(c, blk) + k;
                        let deps = into[i as usize].into_iter().collect();
                        let t = self.push(i, (i + 1) % n, p..p + 1, false, deps, c, n - 1 + step);
                        next[((i + 1) % n) as usize] = Some(t);
                    }
                    into = next;
                }
            }
        }
    }

    /// Ring all-gather (`reduce = false`, rank r owns block r) or reduce-scatter
    /// (`reduce = true`, rank r ends with block r reduced). nccl-tests sizes both by the
    /// whole buffer, n blocks of `bytes / n`.
    fn ring_gather_like(&mut self, reduce: bool) {
        let n = self.shape.ranks;
        // Pieces are laid out rank by rank (owner = piece / (channels x chunks)).
        let (ch, k) = (self.shape.channels, self.shape.chunks);
        self.s.piece_bytes = split(self.shape.bytes, u64::from(n * ch * k));
        let piece = |blk: u32, c: u32| (blk * ch + c) * k;
        for c in 0..ch {
            for kk in 0..k {
                let mut into: Vec<Option<u32>> = vec![None; n as usize];
                for step in 0..n - 1 {
                    let mut next = vec![None; n as usize];
                    for i in 0..n {
                        let blk = if reduce {
                            (i + 2 * n - step - 1) % n
                        } else {
                            (i + n - step) % n
                        };
                        let p = piece(blk, c) + kk;
                        let deps = into[i as usize].into_iter().collect();
                        let t = self.push(i, (i + 1) % n, p..p + 1, reduce, deps, c, step);
                        next[((i + 1) % n) as usize] = Some(t);
                    }
                    into = next;
                }
            }
        }
    }

    /// nccl-tests' `sendrecv`: every rank sends its whole buffer to the next rank. Pieces
    /// are laid out rank by rank, each rank's block its own send buffer.
    fn send_recv(&mut self) {
        let n = self.shape.ranks;
        let (ch, k) = (self.shape.channels, self.shape.chunks);
        self.s.piece_bytes = split(self.shape.bytes * u64::from(n), u64::from(n * ch * k));
        for c in 0..ch {
            for kk in 0..k {
                for i in 0..n {
                    let p = (i * ch + c) * k + kk;
                    self.push(i, (i + 1) % n, p..p + 1, false, Vec::new(), c, 0);
                }
            }
        }
    }

    /// Pipelined ring broadcast from rank 0: every chunk travels 0 -> 1 -> ... -> n-1.
    fn ring_broadcast(&mut self) {
        let n = self.shape.ranks;
        let piece = self.layout(self.shape.bytes, 1);
        for c in 0..self.shape.channels {
            for k in 0..self.shape.chunks {
                let p = piece(c, 0) + k;
                let mut prev: Option<u32> = None;
                for i in 0..n - 1 {
                    let t = self.push(i, i + 1, p..p + 1, false, prev.into_iter().collect(), c, i);
                    prev = Some(t);
                }
            }
        }
    }

    /// All-to-all: every rank sends block (src, dst) of `bytes / n` to every other rank,
    /// each block cut into one slice per channel; at step s rank r sends to r + s.
    fn all_to_all(&mut self) {
        let n = self.shape.ranks;
        let ch = self.shape.channels;
        // Piece ((src * n + dst) * ch + c). As in nccl-tests, every rank's buffer is the
        // full size and one n-th of it goes to each rank.
        self.s.piece_bytes = (0..n)
            .flat_map(|_| split(self.shape.bytes, u64::from(n)))
            .flat_map(|b| split(b, u64::from(ch)))
            .collect();
        for step in 1..n {
            for src in 0..n {
                let dst = (src + step) % n;
                for c in 0..ch {
                    let p = (src * n + dst) * ch + c;
                    self.push(src, dst, p..p + 1, false, Vec::new(), c, step);
                }
            }
        }
    }

    /// NCCL's double binary tree: two complementary binary trees each reduce half of the
    /// buffer to their root and broadcast it back down, chunk by chunk.
    fn double_binary_tree(&mut self) {
        let n = self.shape.ranks;
        let piece = self.layout(self.shape.bytes, 2);
        for c in 0..self.shape.channels {
            for tree in 0..2u32 {
                // The second tree is the first shifted by one rank, so that a rank that is
                // a leaf in one tree is an inner node in the other (NCCL `ncclGetDtree`).
                let map = |v: u32| if tree == 0 { v } else { (v + 1) % n };
                let parent: Vec<Option<u32>> = (0..n).map(|v| btree_parent(n, v)).collect();
                let children: Vec<Vec<u32>> = (0..n)
                    .map(|v| (0..n).filter(|u| parent[*u as usize] == Some(v)).collect())
                    .collect();
                let order_up = post_order(&children, 0);
                for k in 0..self.shape.chunks {
                    let p = piece(c, tree) + k;
                    // Reduce: a node sends up once all its children's data arrived.
                    let mut up: Vec<Option<u32>> = vec![None; n as usize];
                    for &v in &order_up {
                        if let Some(par) = parent[v as usize] {
                            let deps = children[v as usize]
                                .iter()
                                .filter_map(|ch| up[*ch as usize])
                                .collect();
                            let depth = tree_depth(&parent, v);
                            up[v as usize] =
                                Some(self.push(map(v), map(par), p..p + 1, true, deps, c, depth));
                        }
                    }
                    // Broadcast: the root's children get the result once the root has all.
                    let mut down: Vec<Option<u32>> = vec![None; n as usize];
                    for &v in order_up.iter().rev() {
                        for &ch in &children[v as usize] {
                            let mut deps: Vec<u32> = Vec::new();
                            if v == 0 {
                                deps.extend(children[0].iter().filter_map(|x| up[*x as usize]));
                            } else if let Some(d) = down[v as usize] {
                                deps.push(d);
                            }
                            let depth = tree_depth(&parent, ch);
                            down[ch as usize] =
                                Some(self.push(map(v), map(ch), p..p + 1, false, deps, c, 64 + depth));
                        }
                    }
                }
            }
        }
    }

    /// Recursive halving (reduce-scatter) then recursive doubling (all-gather)
    /// (Rabenseifner). With n not a power of two, the extra ranks first fold their data
    /// into a partner and get the result back at the end.
    fn halving_doubling(&mut self) {
        let n = self.shape.ranks;
        let p2 = 1u32 << (31 - n.leading_zeros());
        let extra = n - p2;
        let piece = self.layout(self.shape.bytes, p2);
        let blocks_per_channel = p2 * self.shape.chunks;
        // Active rank a (0..p2) is real rank: a < extra -> 2a, else a + extra.
        let real = |a: u32| if a < extra { 2 * a } else { a + extra };
        for c in 0..self.shape.channels {
            let all = piece(c, 0)..piece(c, 0) + blocks_per_channel;
            let mut last_into: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
            // Fold: odd extra ranks send everything to their even partner.
            for i in 0..extra {
                let t = self.push(2 * i + 1, 2 * i, all.clone(), true, Vec::new(), c, 0);
                last_into[(2 * i) as usize].push(t);
            }
            // Reduce-scatter by halving: each active rank keeps a range that halves.
            let mut range: Vec<Range<u32>> = vec![0..p2; p2 as usize];
            let mut dist = p2 / 2;
            let mut step = 1;
            while dist >= 1 {
                let mut next_into = last_into.clone();
                for a in 0..p2 {
                    let partner = a ^ dist;
                    let r = range[a as usize].clone();
                    let mid = r.start + (r.end - r.start) / 2;
                    // The lower rank of a pair keeps the lower half.
                    let (keep, give) = if a < partner {
                        (r.start..mid, mid..r.end)
                    } else {
                        (mid..r.end, r.start..mid)
                    };
                    let pieces = piece(c, give.start)
                        ..piece(c, give.start) + (give.end - give.start) * self.shape.chunks;
                    // Everything a rank received so far feeds what it sends next.
                    let deps = last_into[real(a) as usize].clone();
                    let t = self.push(real(a), real(partner), pieces, true, deps, c, step);
                    next_into[real(partner) as usize].push(t);
                    range[a as usize] = keep;
                }
                last_into = next_into;
                dist /= 2;
                step += 1;
            }
            // All-gather by doubling, in reverse.
            let mut dist = 1;
            while dist < p2 {
                let mut next_into = last_into.clone();
                let mut new_range = range.clone();
                for a in 0..p2 {
                    let partner = a ^ dist;
                    let r = range[a as usize].clone();
                    let pieces = piece(c, r.start)..piece(c, r.start) + (r.end - r.start) * self.shape.chunks;
                    let deps = last_into[real(a) as usize].clone();
                    let t = self.push(real(a), real(partner), pieces, false, deps, c, step);
                    next_into[real(partner) as usize].push(t);
                    let pr = &range[partner as usize];
                    new_range[a as usize] = r.start.min(pr.start)..r.end.max(pr.end);
                }
                last_into = next_into;
                range = new_range;
                dist *= 2;
                step += 1;
            }
            // Unfold: the even partners return the result.
            for i in 0..extra {
                let deps = last_into[(2 * i) as usize].clone();
                self.push(2 * i, 2 * i + 1, all.clone(), false, deps, c, step);
            }
        }
    }

    /// Hierarchical AllReduce on hosts of `g` ranks each (ranks host by host): ring
    /// reduce-scatter inside each host (NVLink), ring AllReduce across hosts of each shard
    /// among the ranks with the same local index (one rail each), ring all-gather inside
    /// each host.
    fn hierarchical(&mut self) -> Result<(), String> {
        let n = self.shape.ranks;
        let g = self.shape.ranks_per_host.max(1);
        if !n.is_multiple_of(g) {
            return Err(format!("{n} ranks do not split into hosts of {g}"));
        }
        let h = n / g;
        let k = self.shape.chunks;
        // Pieces: channel c, local shard i (0..g), host block j (0..h), chunk.
        self.s.piece_bytes = split(self.shape.bytes, u64::from(self.shape.channels * g * h * k));
        let shard = |c: u32, i: u32| ((c * g + i) * h) * k;
        let block = |c: u32, i: u32, j: u32| ((c * g + i) * h + j) * k;
        let rank = |host: u32, local: u32| host * g + local;
        for c in 0..self.shape.channels {
            // received[r]: every transfer delivered into rank r so far in this channel; a
            // rank's next send depends on all of them that feed it.
            let mut last: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
            // 1. Intra-host reduce-scatter: local position l ends with shard l.
            for step in 0..g.saturating_sub(1) {
                let mut next = last.clone();
                for host in 0..h {
                    for l in 0..g {
                        let i = (l + 2 * g - step - 1) % g;
                        let (src, dst) = (rank(host, l), rank(host, (l + 1) % g));
                        let pieces = shard(c, i)..shard(c, i) + h * k;
                        let t = self.push(src, dst, pieces, true, last[src as usize].clone(), c, step);
                        next[dst as usize] = vec![t];
                    }
                }
                last = next;
            }
            // 2. Inter-host ring AllReduce of shard l among ranks (*, l), chunk by chunk.
            let mut gathered: Vec<Vec<u32>> = last.clone();
            for l in 0..g {
                for kk in 0..k {
                    let mut into: Vec<Vec<u32>> =
                        (0..h).map(|host| last[rank(host, l) as usize].clone()).collect();
                    for phase in 0..2u32 {
                        for step in 0..h.saturating_sub(1) {
                            let mut next = into.clone();
                            for host in 0..h {
                                let j = if phase == 0 {
                                    (host + 2 * h - step - 1) % h
                                } else {
                                    (host + h - step) % h
                                };
                                let p = block(c, l, j) + kk;
                                let (src, dst) = (rank(host, l), rank((host + 1) % h, l));
                                let deps = into[host as usize].clone();
                                let t =
                                    self.push(src, dst, p..p + 1, phase == 0, deps, c, g + phase * h + step);
                                next[((host + 1) % h) as usize] = vec![t];
                                gathered[dst as usize].push(t);
                            }
                            into = next;
                        }
                    }
                }
            }
            // 3. Intra-host all-gather: a rank first sends its own shard once every piece of
            // it is final, then forwards what it receives.
            let mut fwd: Vec<Vec<u32>> = gathered;
            for step in 0..g.saturating_sub(1) {
                let mut next = fwd.clone();
                for host in 0..h {
                    for l in 0..g {
                        let i = (l + g - step) % g;
                        let (src, dst) = (rank(host, l), rank(host, (l + 1) % g));
                        let pieces = shard(c, i)..shard(c, i) + h * k;
                        let t = self.push(
                            src,
                            dst,
                            pieces,
                            false,
                            fwd[src as usize].clone(),
                            c,
                            g + 2 * h + step,
                        );
                        next[dst as usize] = vec![t];
                    }
                }
                fwd = next;
            }
        }
        Ok(())
    }
}

/// Parent of `v` in NCCL's binary tree over `n` ranks rooted at 0 (`ncclGetBtree`): a
/// rank's parent clears its lowest set bit and sets the next one, falling back to just
/// clearing it past the end.
pub fn btree_parent(n: u32, v: u32) -> Option<u32> {
    if v == 0 {
        return None;
    }
    let bit = v & v.wrapping_neg();
    let up = (v ^ bit) | (bit << 1);
    Some(if up >= n { v ^ bit } else { up })
}

fn tree_depth(parent: &[Option<u32>], mut v: u32) -> u32 {
    let mut d = 0;
    while let Some(p) = parent[v as usize] {
        v = p;
        d += 1;
    }
    d
}

fn post_order(children: &[Vec<u32>], root: u32) -> Vec<u32> {
    let mut out = Vec::new();
    fn go(children: &[Vec<u32>], v: u32, out: &mut Vec<u32>) {
        for &c in &children[v as usize] {
            go(children, c, out);
        }
        out.push(v);
    }
    go(children, root, &mut out);
    out
}

/// nccl-tests' bus-bandwidth factor for an operation on `n` ranks
/// (docs/reference/collectives-and-nccl.md §3).
pub fn bus_factor(op: CollectiveOp, n: u32) -> f64 {
    let n = f64::from(n);
    match op {
        CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => (n - 1.0) / n,
        CollectiveOp::Broadcast | CollectiveOp::SendRecv => 1.0,
    }
}
