//! A lock-free stack of buffer indices (a Treiber stack): the pool's fast path.
//!
//! The head packs a 32-bit tag above the 32-bit index of the top entry; every successful
//! push or pop bumps the tag, so a head that was popped and pushed back between a
//! thread's load and its compare-and-swap no longer matches (no ABA). Each entry's link
//! to the one below lives in `next`, indexed like the entries; a stale link read by a
//! thread that then loses the race is harmless, because its compare-and-swap fails.
//! There is no allocation and no lock on either path.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The index that means "none" (an empty stack, the bottom entry's link).
pub const NIL: u32 = u32::MAX;

/// The stack's head. The links live with the caller (one per index, passed as `link`),
/// so that a pool can keep them per region and grow without moving them.
#[derive(Debug)]
pub struct Stack {
    head: AtomicU64,
}

fn pack(tag: u64, index: u32) -> u64 {
    (tag << 32) | u64::from(index)
}

impl Default for Stack {
    fn default() -> Self {
        Stack::new()
    }
}

impl Stack {
    /// An empty stack.
    pub fn new() -> Stack {
        Stack {
            head: AtomicU64::new(pack(0, NIL)),
        }
    }

    /// Takes the top index, or None when the stack is empty. `link(i)` is the link
    /// stored for index `i`.
    pub fn pop<'a>(&self, link: impl Fn(u32) -> &'a AtomicU32) -> Option<u32> {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let top = head as u32;
            if top == NIL {
                return None;
            }
            // Acquire on the head made the pusher's link store visible.
            let below = link(top).load(Ordering::Relaxed);
            match self.head.compare_exchange_weak(
                head,
                pack((head >> 32) + 1, below),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(top),
                Err(now) => head = now,
            }
        }
    }

    /// Puts `index` back on top. The caller owns it (took it from this stack, or it was
    /// never on it): an index on the stack twice would be handed out twice.
    pub fn push<'a>(&self, index: u32, link: impl Fn(u32) -> &'a AtomicU32) {
        let mut head = self.head.load(Ordering::Relaxed);
        let slot = link(index);
        loop {
            slot.store(head as u32, Ordering::Relaxed);
            // Release: a popper that sees this head also sees the link above.
            match self.head.compare_exchange_weak(
                head,
                pack((head >> 32) + 1, index),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }
}

/// A stack of indices below `capacity` with its own links.
#[derive(Debug)]
pub struct FreeList {
    stack: Stack,
    next: Box<[AtomicU32]>,
}

impl FreeList {
    /// A stack holding every index in `0..capacity` (0 on top).
    pub fn full(capacity: u32) -> FreeList {
        let f = FreeList::empty(capacity);
        for i in (0..capacity).rev() {
            f.push(i);
        }
        f
    }

    /// An empty stack for indices below `capacity`.
    pub fn empty(capacity: u32) -> FreeList {
        assert!(capacity < NIL, "invariant: capacity below the NIL index");
        FreeList {
            stack: Stack::new(),
            next: (0..capacity).map(|_| AtomicU32::new(NIL)).collect(),
        }
    }

    /// Takes the top index, or None when empty.
    pub fn pop(&self) -> Option<u32> {
        self.stack.pop(|i| &self.next[i as usize])
    }

    /// Puts `index` (below the capacity, owned by the caller) back on top.
    pub fn push(&self, index: u32) {
        self.stack.push(index, |i| &self.next[i as usize]);
    }

    /// Indices it can hold.
    pub fn capacity(&self) -> usize {
        self.next.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pops_every_index_once_then_nothing() {
        let f = FreeList::full(5);
        let mut got: Vec<u32> = std::iter::from_fn(|| f.pop()).collect();
        got.sort();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        assert_eq!(f.pop(), None);
        f.push(3);
        f.push(1);
        assert_eq!((f.pop(), f.pop(), f.pop()), (Some(1), Some(3), None));
        assert_eq!(FreeList::full(0).pop(), None);
        assert_eq!(FreeList::empty(4).pop(), None);
    }
}
