//! Event queues keyed by (time, tie).
//!
//! The tie orders events at the same time. The engine makes it from the event itself,
//! never from when it was queued (`engine::Sim::tie`: the device the event is for, the
//! device that scheduled it, that device's own count of events it scheduled), so events
//! pop in one order however the fabric is divided among partitions, and every run is
//! bit-identical on any machine.
//!
//! [`EventQueue`] is a calendar queue (a timing wheel): near-future events go into buckets
//! of 2^10 ps, with a bitmap to find the next non-empty bucket; events
//! beyond the wheel's horizon wait in a [`Heap`]. Pushing and popping a near event costs a
//! few instructions instead of a heap's sift through several levels, which matters because
//! a packet-level simulation schedules one or two events per packet hop, almost all of them
//! within a few microseconds (serialization and link delay). [`Heap`], a 4-ary min-heap,
//! is kept as the overflow and as the reference the benchmarks compare against.

use crate::time::Ps;

/// When an event happens and its place among the events of that instant: the time in
/// the high 64 bits, the [`Tie`] in the low 64, so ordering is one 128-bit comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(u128);

impl Key {
    /// Above every key: a bound that stops nothing.
    pub const MAX: Key = Key(u128::MAX);

    /// The key of an event at `time` with `tie`.
    #[inline(always)]
    pub fn new(time: Ps, tie: Tie) -> Key {
        Key((u128::from(time) << 64) | u128::from(tie.0))
    }

    /// The event's time.
    #[inline(always)]
    pub fn time(self) -> Ps {
        (self.0 >> 64) as Ps
    }

    /// The event's tie.
    #[inline(always)]
    pub fn tie(self) -> Tie {
        Tie(self.0 as u64)
    }
}

/// Bits of a tie's device fields: 2^21 devices, above any fabric a scenario may
/// describe (`engine::MAX_DEVICES`).
pub const TIE_DEV_BITS: u32 = 21;
/// Bits of a tie's sequence field: what the two device fields leave of 64.
const TIE_SEQ_BITS: u32 = 64 - 2 * TIE_DEV_BITS;
const TIE_SEQ_MASK: u64 = (1 << TIE_SEQ_BITS) - 1;

/// The order of events at one instant, made from the event itself (`engine::Sim::tie`),
/// never from when it was queued: from the top, the device the event is for (permuted by
/// a hash of the instant, [`Tie::event`]), the device that scheduled it, and that
/// device's count of events it scheduled (wrapping). This is the only place that knows
/// the layout.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Tie(u64);

impl Tie {
    /// The tie of an event at `time` for device `target`, scheduled by device `source`
    /// as its `seq`-th event. The target's field is its index XOR a hash of the instant
    /// (still one value per device): which of two devices goes first at an instant
    /// changes from instant to instant, as it does on real hardware, instead of always
    /// favouring the lower index.
    #[inline(always)]
    pub fn event(time: Ps, target: u32, source: u32, seq: u32) -> Tie {
        Tie(
            (u64::from(target ^ instant_mask(time)) << (TIE_DEV_BITS + TIE_SEQ_BITS))
                | (u64::from(source) << TIE_SEQ_BITS)
                | (u64::from(seq) & TIE_SEQ_MASK),
        )
    }

    /// The device an event with this tie at `time` is for (the inverse of [`Tie::event`]'s
    /// first field).
    #[inline(always)]
    pub fn target(self, time: Ps) -> u32 {
        (self.0 >> (TIE_DEV_BITS + TIE_SEQ_BITS)) as u32 ^ instant_mask(time)
    }

    /// A tie from its bits (tests and the queue benchmarks order arbitrary values).
    pub const fn from_bits(bits: u64) -> Tie {
        Tie(bits)
    }

    /// The tie's bits.
    #[inline(always)]
    pub fn bits(self) -> u64 {
        self.0
    }
}

/// A per-instant permutation of device indices: the top [`TIE_DEV_BITS`] of a
/// multiplicative hash of the time (Fibonacci hashing's constant, 2^64 / golden ratio).
#[inline(always)]
fn instant_mask(t: Ps) -> u32 {
    (t.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TIE_DEV_BITS)) as u32
}

/// An event as the engine encodes it (`engine::event::Event::encode`): the queue only
/// carries it, and orders by it only should two events ever share a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventCode(pub u64);

/// A queued event: its key, then itself.
type Entry = (Key, EventCode);

/// What the engine needs of an event queue. Implementations must pop in (time, tie)
/// order; the engine never queues two events with one key.
pub trait Queue: Default + Send {
    /// An empty queue tuned for events mostly scheduled up to `horizon` ahead.
    fn with_horizon(horizon: Ps) -> Self {
        let _ = horizon;
        Self::default()
    }
    /// Schedules `ev` at `time` (never before the last popped event), ordered by `tie`
    /// among events at that time.
    fn push(&mut self, time: Ps, tie: Tie, ev: EventCode);
    /// Removes and returns the earliest event (its key and itself) if it is not after
    /// `limit`.
    fn pop_until(&mut self, limit: Ps) -> Option<Entry>;
    /// Removes and returns the earliest event if it is not after `limit` and its key (time,
    /// tie) is below `key`: how the engine merges this queue with its timer heap.
    fn pop_before(&mut self, key: Key, limit: Ps) -> Option<Entry>;
    /// Time of the earliest pending event.
    fn peek_time(&self) -> Option<Ps>;
    /// True when nothing is pending.
    fn is_empty(&self) -> bool;
    /// Largest number of pending events seen.
    fn peak(&self) -> usize;
}

impl Queue for HeapQueue {
    fn push(&mut self, time: Ps, tie: Tie, ev: EventCode) {
        HeapQueue::push(self, time, tie, ev)
    }
    fn pop_until(&mut self, limit: Ps) -> Option<Entry> {
        HeapQueue::pop_until(self, limit)
    }
    fn pop_before(&mut self, key: Key, limit: Ps) -> Option<Entry> {
        let k = self.heap.min_key()?;
        if k >= key || k.time() > limit {
            return None;
        }
        self.heap.pop()
    }
    fn peek_time(&self) -> Option<Ps> {
        self.heap.min_key().map(Key::time)
    }
    fn is_empty(&self) -> bool {
        HeapQueue::is_empty(self)
    }
    fn peak(&self) -> usize {
        HeapQueue::peak(self)
    }
}

impl Queue for EventQueue {
    fn with_horizon(horizon: Ps) -> Self {
        EventQueue::with_horizon(horizon)
    }
    #[inline]
    fn push(&mut self, time: Ps, tie: Tie, ev: EventCode) {
        EventQueue::push(self, time, tie, ev)
    }
    #[inline]
    fn pop_until(&mut self, limit: Ps) -> Option<Entry> {
        EventQueue::pop_before(self, Key::MAX, limit)
    }
    #[inline]
    fn pop_before(&mut self, key: Key, limit: Ps) -> Option<Entry> {
        EventQueue::pop_before(self, key, limit)
    }
    fn peek_time(&self) -> Option<Ps> {
        EventQueue::peek_time(self)
    }
    fn is_empty(&self) -> bool {
        EventQueue::is_empty(self)
    }
    fn peak(&self) -> usize {
        EventQueue::peak(self)
    }
}

/// A 4-ary min-heap of (key, event).
#[derive(Debug, Default)]
pub struct Heap {
    heap: Vec<Entry>,
}

const ARITY: usize = 4;

impl Heap {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Smallest key.
    #[inline]
    pub fn min_key(&self) -> Option<Key> {
        self.heap.first().map(|e| e.0)
    }

    /// Inserts.
    #[inline]
    pub fn push(&mut self, k: Key, ev: EventCode) {
        self.heap.push((k, ev));
        let mut i = self.heap.len() - 1;
        let e = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / ARITY;
            // Whole entries compare: should two events ever share a key (a tie's count
            // wrapped), the event itself decides, never where it sits.
            if e < self.heap[parent] {
                self.heap[i] = self.heap[parent];
                i = parent;
            } else {
                break;
            }
        }
        self.heap[i] = e;
    }

    /// Removes the smallest entry.
    #[inline]
    pub fn pop(&mut self) -> Option<Entry> {
        let top = *self.heap.first()?;
        let last = self.heap.pop().expect("non-empty");
        if self.heap.is_empty() {
            return Some(top);
        }
        let n = self.heap.len();
        let mut i = 0;
        loop {
            let first = i * ARITY + 1;
            if first >= n {
                break;
            }
            let end = (first + ARITY).min(n);
            let mut best = first;
            let mut best_entry = self.heap[first];
            for c in first + 1..end {
                let k = self.heap[c];
                if k < best_entry {
                    best = c;
                    best_entry = k;
                }
            }
            if best_entry < last {
                self.heap[i] = self.heap[best];
                i = best;
            } else {
                break;
            }
        }
        self.heap[i] = last;
        Some(top)
    }
}

/// A plain (time, tie)-ordered queue on a [`Heap`]: the reference implementation for
/// tests and benchmarks.
#[derive(Debug, Default)]
pub struct HeapQueue {
    heap: Heap,
    peak: usize,
}

impl HeapQueue {
    /// An empty queue.
    pub fn new() -> Self {
        HeapQueue::default()
    }

    /// Largest number of pending events seen.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Schedules `ev` at `time`, ordered by `tie` among events at that time.
    pub fn push(&mut self, time: Ps, tie: Tie, ev: EventCode) {
        self.heap.push(Key::new(time, tie), ev);
        self.peak = self.peak.max(self.heap.len());
    }

    /// Removes the earliest event (key and event) if it is not after `limit`.
    pub fn pop_until(&mut self, limit: Ps) -> Option<Entry> {
        if (self.heap.min_key()?).time() > limit {
            return None;
        }
        self.heap.pop()
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// Bucket width: 2^10 ps, about 1 ns: the gap between events in a busy fabric, so a
/// bucket holds a handful of events at most.
const BUCKET_SHIFT: u32 = 10;
/// Wheel sizes are powers of two between these bounds (in buckets).
const MIN_BUCKETS: usize = 1 << 11;
const MAX_BUCKETS: usize = 1 << 16;

/// Events a bucket holds unsorted (found by a scan, as cheap as it gets for the few events
/// most buckets hold); past that it is kept sorted. Measured: at 8 the reference
/// permutation's busier buckets paid for sorted inserts more than the scans they saved.
const SMALL_BUCKET: usize = 32;

/// Buffers of large buckets kept for reuse (a few wheels' worth of bursts at once).
const MAX_POOLED: usize = 64;

/// One calendar bucket. Most hold one or two events and are scanned. A collective's
/// ring steps run in lockstep, so thousands of packet events can share an instant: a
/// bucket past [`SMALL_BUCKET`] events becomes large, is sorted once when its first event
/// is due (pushes arrive in no particular key order: ties order by device, not by when
/// an event was queued), and takes the few events queued into it after that in a small
/// heap beside the sorted run.
#[derive(Debug)]
enum Bucket {
    Small(Vec<Entry>),
    Large {
        /// Sorted once `sorted`; `pos` entries already taken from its front.
        items: Vec<Entry>,
        pos: usize,
        sorted: bool,
        late: std::collections::BinaryHeap<std::cmp::Reverse<Entry>>,
    },
}

/// Where a bucket's smallest entry is.
#[derive(Debug, Clone, Copy)]
enum At {
    Small(usize),
    Run,
    Late,
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket::Small(Vec::new())
    }
}

impl Bucket {
    #[inline(always)]
    fn push(&mut self, k: Key, ev: EventCode, pool: &mut Vec<Vec<Entry>>) {
        match self {
            Bucket::Small(v) if v.len() < SMALL_BUCKET => v.push((k, ev)),
            _ => self.push_large(k, ev, pool),
        }
    }

    #[cold]
    #[inline(never)]
    fn push_large(&mut self, k: Key, ev: EventCode, pool: &mut Vec<Vec<Entry>>) {
        if let Bucket::Small(v) = self {
            // Large buckets come and go by the thousand in a collective: their buffers
            // are reused, not allocated each time.
            let mut items = pool.pop().unwrap_or_default();
            items.clear();
            items.extend_from_slice(v);
            v.clear();
            *self = Bucket::Large {
                items,
                pos: 0,
                sorted: false,
                late: std::collections::BinaryHeap::new(),
            };
        }
        let Bucket::Large {
            items, sorted, late, ..
        } = self
        else {
            unreachable!("invariant: a full small bucket was just made large")
        };
        if *sorted {
            late.push(std::cmp::Reverse((k, ev)));
        } else {
            items.push((k, ev));
        }
    }

    /// Sorts a large bucket's run if it is not yet: done once, when its first event is due.
    #[inline]
    fn prepare(&mut self, scratch: &mut Vec<Entry>, order: &mut Vec<u64>) {
        if let Bucket::Large { items, sorted, .. } = self
            && !*sorted
        {
            sort_bucket(items, scratch, order);
            *sorted = true;
        }
    }

    /// The smallest entry and where it is. A large bucket must be prepared.
    #[inline]
    fn min(&self) -> (At, Entry) {
        match self {
            Bucket::Small(v) => {
                let mut best = 0;
                let mut best_entry = v[0];
                for (i, e) in v.iter().enumerate().skip(1) {
                    // Keys first; the event only when keys are equal (see `prepare`).
                    if e.0 < best_entry.0 || (e.0 == best_entry.0 && e.1 < best_entry.1) {
                        best = i;
                        best_entry = *e;
                    }
                }
                (At::Small(best), best_entry)
            }
            Bucket::Large { items, pos, late, .. } => {
                let run = items.get(*pos);
                match (run, late.peek()) {
                    (Some(r), Some(l)) if l.0 < *r => (At::Late, l.0),
                    (Some(r), _) => (At::Run, *r),
                    (None, Some(l)) => (At::Late, l.0),
                    (None, None) => unreachable!("invariant: occupied buckets are non-empty"),
                }
            }
        }
    }

    /// The smallest key, without preparing (a scan of an unsorted large bucket).
    fn min_key_slow(&self) -> Key {
        match self {
            Bucket::Large {
                items,
                pos,
                sorted: false,
                late,
            } => items[*pos..]
                .iter()
                .map(|e| e.0)
                .chain(late.peek().map(|l| l.0.0))
                .min()
                .expect("invariant: occupied buckets are non-empty"),
            _ => self.min().1.0,
        }
    }

    /// Removes the entry `min` found; true when the bucket is then empty.
    #[inline]
    fn take(&mut self, at: At, pool: &mut Vec<Vec<Entry>>) -> (Entry, bool) {
        match (self, at) {
            (Bucket::Small(v), At::Small(idx)) => {
                let e = v.swap_remove(idx);
                (e, v.is_empty())
            }
            (b @ Bucket::Large { .. }, at) => {
                let Bucket::Large { items, pos, late, .. } = b else {
                    unreachable!()
                };
                let e = match at {
                    At::Run => {
                        *pos += 1;
                        items[*pos - 1]
                    }
                    _ => late.pop().expect("invariant: the late heap had the minimum").0,
                };
                let empty = *pos == items.len() && late.is_empty();
                if empty {
                    // A bucket that took a burst gives its buffer to the pool, or every
                    // bucket would keep the largest burst it ever saw.
                    if pool.len() < MAX_POOLED {
                        pool.push(std::mem::take(items));
                    }
                    *b = Bucket::default();
                }
                (e, empty)
            }
            (Bucket::Small(_), _) => unreachable!("invariant: a small bucket's minimum is in it"),
        }
    }
}

/// Sorts a bucket's entries by (key, event): the entries' order by 32 bits (the time
/// within the bucket, then the tie's top 22 bits, where the engine's ties put the device
/// an event is for) is found by sorting plain `u64`s (those bits and the entry's index),
/// the entries are moved once into that order, and each run of entries those bits do
/// not tell apart (a device's events at one instant: one to three) is finished by
/// insertion. Sorting the 24-byte entries themselves cost four times more (BENCHMARKS.md).
fn sort_bucket(items: &mut Vec<Entry>, scratch: &mut Vec<Entry>, order: &mut Vec<u64>) {
    let prefix = |e: &Entry| -> u64 {
        let time_in_bucket = e.0.time() & ((1 << BUCKET_SHIFT) - 1);
        (time_in_bucket << (32 - BUCKET_SHIFT)) | (e.0.tie().bits() >> (32 + BUCKET_SHIFT))
    };
    order.clear();
    order.extend(
        items
            .iter()
            .enumerate()
            .map(|(i, e)| (prefix(e) << 32) | i as u64),
    );
    order.sort_unstable();
    scratch.clear();
    scratch.extend(order.iter().map(|o| items[(*o & 0xFFFF_FFFF) as usize]));
    std::mem::swap(items, scratch);
    // Within a run of equal prefixes, whole entries decide: should two events ever share
    // a key (a tie's count wrapped), the event decides, never where it was queued.
    for i in 1..items.len() {
        if order[i] >> 32 != order[i - 1] >> 32 {
            continue;
        }
        let mut j = i;
        while j > 0 && order[j] >> 32 == order[j - 1] >> 32 && items[j] < items[j - 1] {
            items.swap(j, j - 1);
            order.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// The engine's event queue: a calendar queue with a heap for far events.
///
/// The wheel should cover the delays most events are scheduled with (serialization plus
/// link propagation) and no more: a larger wheel spreads the same events over more memory,
/// and on this kind of machine the cache misses cost more than the far heap saves
/// (BENCHMARKS.md, "Event queue").
#[derive(Debug)]
pub struct EventQueue {
    /// Invariant: bucket `b & mask` holds only events of absolute bucket number `b` in
    /// `[cur, cur + buckets.len())`. A bucket is scanned while small and kept sorted once
    /// large ([`Bucket`]): most hold one or two events, but the steps of a collective put
    /// thousands at one instant.
    buckets: Vec<Bucket>,
    mask: usize,
    /// Bit i set iff bucket i is non-empty.
    occupied: Vec<u64>,
    /// Absolute bucket number of the last popped event; nothing earlier is pending.
    cur: u64,
    in_wheel: usize,
    far: Heap,
    peak: usize,
    /// The bucket sort's buffers, kept between buckets.
    scratch: Vec<Entry>,
    order: Vec<u64>,
    /// Buffers of emptied large buckets.
    pool: Vec<Vec<Entry>>,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue::new()
    }
}

impl EventQueue {
    /// An empty queue with the smallest wheel (a 2 µs horizon).
    pub fn new() -> Self {
        EventQueue::with_horizon(0)
    }

    /// An empty queue whose wheel covers at least `horizon` picoseconds (within bounds).
    pub fn with_horizon(horizon: Ps) -> Self {
        let n = ((horizon >> BUCKET_SHIFT) as usize)
            .next_power_of_two()
            .clamp(MIN_BUCKETS, MAX_BUCKETS);
        EventQueue {
            buckets: (0..n).map(|_| Bucket::default()).collect(),
            mask: n - 1,
            occupied: vec![0; n / 64],
            cur: 0,
            in_wheel: 0,
            far: Heap::default(),
            peak: 0,
            scratch: Vec::new(),
            order: Vec::new(),
            pool: Vec::new(),
        }
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.in_wheel + self.far.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Largest number of pending events seen.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Schedules `ev` at `time`, which must not be before the last popped event, ordered
    /// by `tie` among events at that time.
    #[inline]
    pub fn push(&mut self, time: Ps, tie: Tie, ev: EventCode) {
        let k = Key::new(time, tie);
        let b = time >> BUCKET_SHIFT;
        debug_assert!(b >= self.cur, "invariant: events are never scheduled in the past");
        if b - self.cur <= self.mask as u64 {
            let slot = (b as usize) & self.mask;
            self.buckets[slot].push(k, ev, &mut self.pool);
            self.occupied[slot / 64] |= 1 << (slot % 64);
            self.in_wheel += 1;
        } else {
            self.far.push(k, ev);
        }
        let n = self.len();
        if n > self.peak {
            self.peak = n;
        }
    }

    /// The first non-empty wheel slot at or after the cursor, scanning one rotation.
    #[inline]
    fn next_slot(&self) -> Option<usize> {
        if self.in_wheel == 0 {
            return None;
        }
        let words = self.occupied.len();
        let start = (self.cur as usize) & self.mask;
        let (w0, bit0) = (start / 64, start % 64);
        let first = self.occupied[w0] & (!0u64 << bit0);
        if first != 0 {
            return Some(w0 * 64 + first.trailing_zeros() as usize);
        }
        for i in 1..=words {
            let w = (w0 + i) % words;
            let bits = if w == w0 {
                self.occupied[w] & !(!0u64 << bit0)
            } else {
                self.occupied[w]
            };
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
        }
        unreachable!("invariant: in_wheel counts events in occupied buckets")
    }

    /// Where the smallest entry of a non-empty bucket is, and its key.
    #[inline]
    fn bucket_min(&mut self, slot: usize) -> (At, Key) {
        let b = &mut self.buckets[slot];
        b.prepare(&mut self.scratch, &mut self.order);
        let (at, e) = b.min();
        (at, e.0)
    }

    /// Removes and returns the earliest event (key and event) if it is not after `limit`.
    #[inline]
    pub fn pop_until(&mut self, limit: Ps) -> Option<Entry> {
        self.pop_before(Key::MAX, limit)
    }

    /// Removes and returns the earliest event (key and event) if it is not after `limit`
    /// and its key is below `key`.
    #[inline]
    pub fn pop_before(&mut self, key: Key, limit: Ps) -> Option<Entry> {
        let wheel = self.next_slot().map(|s| (s, self.bucket_min(s)));
        let far = self.far.min_key();
        let take_far = match (wheel, far) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some((_, (_, wk))), Some(fk)) => fk < wk,
        };
        if take_far {
            let fk = far.expect("far has the minimum");
            if fk.time() > limit || fk >= key {
                return None;
            }
            let (k, ev) = self.far.pop().expect("non-empty");
            // Moving the cursor forward keeps every wheel event inside the window: they
            // were all at or after this (minimum) event.
            self.cur = k.time() >> BUCKET_SHIFT;
            return Some((k, ev));
        }
        let (slot, (idx, wk)) = wheel.expect("wheel has the minimum");
        if wk.time() > limit || wk >= key {
            return None;
        }
        let ((k, ev), empty) = self.buckets[slot].take(idx, &mut self.pool);
        if empty {
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        self.in_wheel -= 1;
        self.cur = k.time() >> BUCKET_SHIFT;
        Some((k, ev))
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<Ps> {
        let wheel = self.next_slot().map(|s| self.buckets[s].min_key_slow());
        match (wheel, self.far.min_key()) {
            (None, None) => None,
            (Some(w), None) => Some(w.time()),
            (None, Some(f)) => Some(f.time()),
            (Some(w), Some(f)) => Some((w.min(f)).time()),
        }
    }
}

/// Timers that are usually cancelled before they fire (a QP's ACK timeout, disarmed when
/// the QP completes): a binary min-heap of (key, slot) that knows where each slot's timer
/// sits, so arming, re-arming and cancelling cost O(log n) and the heap holds only armed
/// timers. Keys are (time, tie) with ties made as the event queue's are, so the engine
/// pops the two structures in one order.
#[derive(Debug, Default)]
pub struct TimerHeap {
    heap: Vec<(Key, u32)>,
    /// Position of each slot's timer in `heap` (`u32::MAX`: not armed).
    pos: Vec<u32>,
}

const UNARMED: u32 = u32::MAX;

impl TimerHeap {
    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The earliest timer's key and slot.
    #[inline]
    pub fn peek(&self) -> Option<(Key, u32)> {
        self.heap.first().copied()
    }

    /// Arms (or re-arms) `slot` at `time`, ordered by `tie` among equal times.
    pub fn set(&mut self, slot: u32, time: Ps, tie: Tie) {
        let k = Key::new(time, tie);
        if self.pos.len() <= slot as usize {
            self.pos.resize(slot as usize + 1, UNARMED);
        }
        match self.pos[slot as usize] {
            UNARMED => {
                self.heap.push((k, slot));
                let i = self.heap.len() - 1;
                self.pos[slot as usize] = i as u32;
                self.up(i);
            }
            i => {
                let i = i as usize;
                let old = self.heap[i].0;
                self.heap[i].0 = k;
                if k < old {
                    self.up(i);
                } else {
                    self.down(i);
                }
            }
        }
    }

    /// Disarms `slot` if armed.
    pub fn cancel(&mut self, slot: u32) {
        let Some(&i) = self.pos.get(slot as usize) else {
            return;
        };
        if i == UNARMED {
            return;
        }
        let i = i as usize;
        self.pos[slot as usize] = UNARMED;
        let last = self.heap.pop().expect("invariant: an armed timer is in the heap");
        if i < self.heap.len() {
            self.heap[i] = last;
            self.pos[last.1 as usize] = i as u32;
            self.up(i);
            self.down(i);
        }
    }

    /// Removes and returns the earliest timer.
    pub fn pop(&mut self) -> Option<(Ps, u32)> {
        let (k, slot) = self.peek()?;
        self.cancel(slot);
        Some((k.time(), slot))
    }

    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let p = (i - 1) / 2;
            if self.heap[i].0 >= self.heap[p].0 {
                break;
            }
            self.swap(i, p);
            i = p;
        }
    }

    fn down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < self.heap.len() && self.heap[l].0 < self.heap[m].0 {
                m = l;
            }
            if r < self.heap.len() && self.heap[r].0 < self.heap[m].0 {
                m = r;
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1 as usize] = a as u32;
        self.pos[self.heap[b].1 as usize] = b as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A key from a time and a tie's bits.
    fn key(time: Ps, tie: u64) -> Key {
        Key::new(time, Tie::from_bits(tie))
    }

    proptest! {
        /// A key gives back its time and tie, and orders by time, then tie.
        #[test]
        fn keys_round_trip_and_order(t1: u64, b1: u64, t2: u64, b2: u64) {
            let (a, b) = (key(t1, b1), key(t2, b2));
            prop_assert_eq!((a.time(), a.tie().bits()), (t1, b1));
            prop_assert_eq!(a.cmp(&b), (t1, b1).cmp(&(t2, b2)));
        }

        /// A tie gives back the device it was made for, at any instant; ties of one
        /// instant order by that device's permuted index, then the scheduling device,
        /// then its count.
        #[test]
        fn ties_round_trip(t: u64, target in 0u32..(1 << TIE_DEV_BITS), source in 0u32..(1 << TIE_DEV_BITS), seq: u32, seq2: u32) {
            let tie = Tie::event(t, target, source, seq);
            prop_assert_eq!(tie.target(t), target);
            prop_assert_eq!(tie.bits() & ((1 << (64 - 2 * TIE_DEV_BITS)) - 1), u64::from(seq) & TIE_SEQ_MASK);
            prop_assert_eq!((tie.bits() >> (64 - 2 * TIE_DEV_BITS)) & ((1 << TIE_DEV_BITS) - 1), u64::from(source));
            let same_device = Tie::event(t, target, source, seq2);
            prop_assert_eq!(same_device.target(t), target);
            prop_assert_eq!(tie.cmp(&same_device), (u64::from(seq) & TIE_SEQ_MASK).cmp(&(u64::from(seq2) & TIE_SEQ_MASK)));
        }
    }

    proptest! {
        /// The calendar queue pops exactly what the reference heap pops, in (time, tie)
        /// order, for any mix of near, far and equal times scheduled during dispatch, with
        /// ties in any order, bursts that turn a bucket into a heap included.
        #[test]
        fn calendar_queue_matches_the_reference(
            ops in proptest::collection::vec((0u64..5, 0u64..200_000, 0usize..24, 0u64..1000), 1..400)
        ) {
            let mut cal = EventQueue::new();
            let mut reference = HeapQueue::default();
            let mut id = 0u64;
            let mut now = 0;
            let mut got = Vec::new();
            let mut want = Vec::new();
            for (scale, dt, pushes, tie) in ops {
                // Delays from picoseconds to beyond the wheel's horizon.
                let delay = dt * 10u64.pow(scale as u32);
                for k in 0..pushes.max(1) {
                    // Ties out of queueing order; the id keeps every key distinct.
                    let t = ((tie * 7919 + k as u64 * 104_729) % 1000) << 32 | id;
                    cal.push(now + delay, Tie::from_bits(t), EventCode(id));
                    reference.push(now + delay, Tie::from_bits(t), EventCode(id));
                    id += 1;
                }
                let a = cal.pop_until(u64::MAX);
                let b = reference.pop_until(u64::MAX);
                prop_assert_eq!(a, b);
                if let Some((k, _)) = a {
                    now = k.time();
                    got.push(a);
                    want.push(b);
                }
            }
            loop {
                let (a, b) = (cal.pop_until(u64::MAX), reference.pop_until(u64::MAX));
                prop_assert_eq!(a, b);
                if a.is_none() {
                    break;
                }
            }
            prop_assert!(cal.is_empty());
            prop_assert_eq!(got, want);
        }
    }

    proptest! {
        /// The timer heap pops what a plain sorted list of the armed timers would, after
        /// any mix of arming, re-arming and cancelling.
        #[test]
        fn timer_heap_matches_a_sorted_list(ops in proptest::collection::vec((0u32..20, 0u64..1000, 0u8..3), 1..300)) {
            let mut heap = TimerHeap::default();
            let mut model: std::collections::BTreeMap<u32, Key> = Default::default();
            for (seq, (slot, time, op)) in ops.into_iter().enumerate() {
                match op {
                    0 | 1 => {
                        heap.set(slot, time, Tie::from_bits(seq as u64));
                        model.insert(slot, key(time, seq as u64));
                    }
                    _ => {
                        heap.cancel(slot);
                        model.remove(&slot);
                    }
                }
                let want = model.iter().map(|(s, k)| (*k, *s)).min();
                prop_assert_eq!(heap.peek(), want);
                prop_assert_eq!(heap.len(), model.len());
            }
            while let Some((t, slot)) = heap.pop() {
                let k = model.remove(&slot).expect("popped an armed slot");
                prop_assert_eq!(k.time(), t);
                prop_assert!(model.values().all(|o| *o > k));
            }
            prop_assert!(model.is_empty());
        }
    }

    #[test]
    fn pop_before_stops_at_the_key() {
        let mut q = EventQueue::new();
        q.push(10, Tie::from_bits(7), EventCode(2));
        q.push(10, Tie::from_bits(3), EventCode(1));
        // Events at the same time order by tie, not by when they were queued: the one
        // below the key pops, the one above it waits.
        assert_eq!(
            q.pop_before(key(10, 5), u64::MAX),
            Some((key(10, 3), EventCode(1)))
        );
        assert_eq!(q.pop_before(key(10, 5), u64::MAX), None);
        assert_eq!(q.pop_before(Key::MAX, u64::MAX), Some((key(10, 7), EventCode(2))));
        let mut h = HeapQueue::new();
        h.push(5, Tie::from_bits(1), EventCode(1));
        assert_eq!(Queue::pop_before(&mut h, key(5, 1), u64::MAX), None);
        assert_eq!(
            Queue::pop_before(&mut h, key(5, 2), u64::MAX),
            Some((key(5, 1), EventCode(1)))
        );
    }

    #[test]
    fn pop_until_respects_the_limit() {
        let mut q = EventQueue::new();
        q.push(10, Tie::from_bits(0), EventCode(1));
        q.push(1 << 40, Tie::from_bits(0), EventCode(2));
        assert_eq!(q.peek_time(), Some(10));
        assert_eq!(q.pop_until(9), None);
        assert_eq!(q.pop_until(10), Some((key(10, 0), EventCode(1))));
        assert_eq!(q.pop_until(1 << 39), None);
        assert_eq!(q.pop_until(u64::MAX), Some((key(1 << 40, 0), EventCode(2))));
        assert!(q.is_empty());
    }
}
