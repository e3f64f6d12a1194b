//! A set of 802.1p priorities (0..7) as one byte: which of a port's queues hold packets,
//! may be paused, or were told to pause. The bit layout lives here and nowhere else.

use crate::counters::N_PRIO;

/// A set of priorities, bit p for priority p.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Prios(u8);

const _: () = assert!(N_PRIO <= 8, "a priority set is one byte");

impl Prios {
    /// No priority.
    pub const NONE: Prios = Prios(0);

    /// The set holding only `prio`.
    #[inline(always)]
    pub fn only(prio: usize) -> Prios {
        debug_assert!(prio < N_PRIO);
        Prios(1 << prio)
    }

    /// True when `prio` is in the set.
    #[inline(always)]
    pub fn contains(self, prio: usize) -> bool {
        self.0 & (1 << prio) != 0
    }

    /// Adds `prio`.
    #[inline(always)]
    pub fn insert(&mut self, prio: usize) {
        self.0 |= 1 << prio;
    }

    /// Removes `prio`.
    #[inline(always)]
    pub fn remove(&mut self, prio: usize) {
        self.0 &= !(1 << prio);
    }

    /// The set without `prio`.
    #[inline(always)]
    pub fn without(self, prio: usize) -> Prios {
        Prios(self.0 & !(1 << prio))
    }

    /// The priorities in both sets.
    #[inline(always)]
    pub fn and(self, other: Prios) -> Prios {
        Prios(self.0 & other.0)
    }

    /// True when the set is empty.
    #[inline(always)]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The highest priority in the set.
    #[inline(always)]
    pub fn highest(self) -> Option<usize> {
        (self.0 != 0).then(|| 7 - self.0.leading_zeros() as usize)
    }

    /// The first priority in the set at or after `from`, going round past 7 to 0
    /// (DWRR's next turn), or None when the set is empty.
    #[inline(always)]
    pub fn next_from(self, from: usize) -> Option<usize> {
        let r = from as u32;
        (self.0 != 0).then(|| ((r + self.0.rotate_right(r).trailing_zeros()) % N_PRIO as u32) as usize)
    }

    /// The priorities in the set, lowest first.
    #[inline(always)]
    pub fn iter(self) -> impl Iterator<Item = usize> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            (bits != 0).then(|| {
                let p = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                p
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The set behaves as a set of 0..7 does.
        #[test]
        fn prios_are_a_set(ops in proptest::collection::vec((0usize..8, any::<bool>()), 0..40), from in 0usize..8) {
            let mut s = Prios::NONE;
            let mut model = std::collections::BTreeSet::new();
            for (p, add) in ops {
                if add { s.insert(p); model.insert(p); } else { s.remove(p); model.remove(&p); }
                prop_assert_eq!(s.contains(p), add);
            }
            prop_assert_eq!(s.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(s.highest(), model.iter().next_back().copied());
            prop_assert_eq!(s.is_empty(), model.is_empty());
            let next = model.range(from..).next().or_else(|| model.iter().next()).copied();
            prop_assert_eq!(s.next_from(from), next);
            if let Some(&p) = model.iter().next() {
                prop_assert!(!s.without(p).contains(p));
                prop_assert_eq!(s.and(Prios::only(p)), Prios::only(p));
            }
        }
    }
}
