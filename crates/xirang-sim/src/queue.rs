//! The event queue: a 4-ary min-heap keyed by (time, sequence number).
//!
//! The sequence number is a global insertion counter, so events at the same time pop in
//! the order they were scheduled and every run is bit-identical on any machine.
//! A 4-ary heap is the fastest choice measured on this kind of machine for the few
//! thousand pending events a simulation keeps (shared/reference/rust-crates.md, "Event
//! queue": 4-ary with replace-top beats binary and radix heaps below ~10k pending), because
//! the engine keeps one pending event per busy port or link, not one per packet.
//!
//! Dispatch uses replace-top: while an event is being handled, the first event it schedules
//! takes the popped event's slot with one sift-down instead of a pop and a push.

use crate::time::Ps;

/// A scheduled event: when, tie-breaker, what (an encoded [`crate::engine::Ev`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    time: Ps,
    seq: u64,
    ev: u64,
}

impl Entry {
    #[inline]
    fn before(&self, other: &Entry) -> bool {
        (self.time, self.seq) < (other.time, other.seq)
    }
}

const ARITY: usize = 4;

/// The event queue.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: Vec<Entry>,
    seq: u64,
    /// The top entry has been taken by the dispatcher and may be overwritten.
    top_free: bool,
    peak: usize,
}

impl EventQueue {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue::default()
    }

    /// Number of pending events (excluding a taken top).
    pub fn len(&self) -> usize {
        self.heap.len() - usize::from(self.top_free)
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Largest number of pending events seen.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Schedules `ev` at `time`.
    #[inline]
    pub fn push(&mut self, time: Ps, ev: u64) {
        let e = Entry {
            time,
            seq: self.seq,
            ev,
        };
        self.seq += 1;
        if self.top_free {
            self.top_free = false;
            self.heap[0] = e;
            self.sift_down(0);
        } else {
            self.heap.push(e);
            let i = self.heap.len() - 1;
            self.sift_up(i);
            self.peak = self.peak.max(self.heap.len());
        }
    }

    /// Takes the earliest event for dispatch. Its slot stays reserved until the next
    /// [`push`](Self::push) reuses it or [`finish`](Self::finish) releases it.
    ///
    /// # Panics
    /// If the previous event was not finished.
    #[inline]
    pub fn take(&mut self) -> Option<(Ps, u64)> {
        assert!(!self.top_free, "invariant: finish() is called after every take()");
        let e = *self.heap.first()?;
        self.top_free = true;
        Some((e.time, e.ev))
    }

    /// Time of the earliest pending event.
    #[inline]
    pub fn peek_time(&self) -> Option<Ps> {
        debug_assert!(!self.top_free);
        self.heap.first().map(|e| e.time)
    }

    /// Ends the dispatch of the taken event: removes it if nothing replaced it.
    #[inline]
    pub fn finish(&mut self) {
        if self.top_free {
            self.top_free = false;
            let last = self.heap.pop().expect("a taken top exists");
            if !self.heap.is_empty() {
                self.heap[0] = last;
                self.sift_down(0);
            }
        }
    }

    #[inline]
    fn sift_up(&mut self, mut i: usize) {
        let e = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if e.before(&self.heap[parent]) {
                self.heap[i] = self.heap[parent];
                i = parent;
            } else {
                break;
            }
        }
        self.heap[i] = e;
    }

    #[inline]
    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        let e = self.heap[i];
        loop {
            let first = i * ARITY + 1;
            if first >= n {
                break;
            }
            let end = (first + ARITY).min(n);
            let mut best = first;
            for c in first + 1..end {
                if self.heap[c].before(&self.heap[best]) {
                    best = c;
                }
            }
            if self.heap[best].before(&e) {
                self.heap[i] = self.heap[best];
                i = best;
            } else {
                break;
            }
        }
        self.heap[i] = e;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pops come out in (time, insertion) order whatever mix of pushes happens during
        /// dispatch.
        #[test]
        fn pops_in_time_then_fifo_order(ops in proptest::collection::vec((0u64..50, 0usize..3), 1..300)) {
            let mut q = EventQueue::new();
            let mut id = 0u64;
            let mut popped = Vec::new();
            // Reference: a sorted list of (time, id).
            let mut reference: Vec<(u64, u64)> = Vec::new();
            let mut now = 0;
            for (dt, pushes) in ops {
                for _ in 0..pushes.max(1) {
                    q.push(now + dt, id);
                    reference.push((now + dt, id));
                    id += 1;
                }
                if let Some((t, ev)) = q.take() {
                    now = t;
                    // Schedule one follow-up half of the time, exercising replace-top.
                    if ev % 2 == 0 {
                        q.push(now + dt, id);
                        reference.push((now + dt, id));
                        id += 1;
                    }
                    q.finish();
                    popped.push((t, ev));
                }
            }
            while let Some((t, ev)) = q.take() {
                q.finish();
                popped.push((t, ev));
            }
            reference.sort();
            prop_assert_eq!(popped, reference);
        }
    }
}
