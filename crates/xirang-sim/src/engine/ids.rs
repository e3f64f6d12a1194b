//! Typed indices of the engine's arenas, and the arena that only takes its own index.
//!
//! Every component lives in a flat arena and is named by a 32-bit index; a newtype per
//! arena means a port index can never be used where a QP index is meant.

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
        pub struct $name(pub u32);

        impl $name {
            /// The index as a `usize`.
            #[inline]
            pub fn idx(self) -> usize {
                self.0 as usize
            }
        }

        impl From<usize> for $name {
            #[inline]
            fn from(i: usize) -> Self {
                debug_assert!(i <= u32::MAX as usize, "invariant: arenas hold fewer than 2^32 items");
                $name(i as u32)
            }
        }
    )*};
}

ids! {
    /// A port of a NIC or switch, with its transmitter and the directed link leaving it.
    PortId;
    /// A queue pair: the sender's half in `Sim::qps_tx`, the receiver's in `Sim::qps_rx`.
    QpId;
    /// A flow: one message, or one transfer of a collective.
    FlowId;
    /// A route: the start of a run of egress ports in the route arena.
    RouteId;
    /// An injected fault.
    FaultId;
}

/// A `Vec` indexed by one id type.
#[derive(Debug, Clone)]
pub struct IdVec<I, T> {
    items: Vec<T>,
    _id: PhantomData<fn(I) -> I>,
}

impl<I, T> Default for IdVec<I, T> {
    fn default() -> Self {
        IdVec {
            items: Vec::new(),
            _id: PhantomData,
        }
    }
}

impl<I: From<usize> + Copy, T> IdVec<I, T> {
    /// An empty arena with room for `n` items.
    pub fn with_capacity(n: usize) -> Self {
        IdVec {
            items: Vec::with_capacity(n),
            _id: PhantomData,
        }
    }

    /// Appends an item and returns its id.
    #[inline]
    pub fn push(&mut self, x: T) -> I {
        self.items.push(x);
        I::from(self.items.len() - 1)
    }

    /// The id the next push returns.
    #[inline]
    pub fn next_id(&self) -> I {
        I::from(self.items.len())
    }

    /// Number of items.
    #[inline]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Items with their ids.
    pub fn iter_enumerated(&self) -> impl Iterator<Item = (I, &T)> {
        self.items.iter().enumerate().map(|(i, x)| (I::from(i), x))
    }

    /// The items with their ids, by value.
    pub fn into_iter_enumerated(self) -> impl Iterator<Item = (I, T)> {
        self.items.into_iter().enumerate().map(|(i, x)| (I::from(i), x))
    }

    /// The elements in id order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// Items in id order, mutably.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }

    /// The item with this id, if any.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        self.items.get(i)
    }

    /// Grows the arena to at least `n` items, the new ones made by `f`.
    pub fn grow_to(&mut self, n: usize, f: impl FnMut() -> T) {
        if self.items.len() < n {
            self.items.resize_with(n, f);
        }
    }

    /// Keeps the first `n` items.
    pub fn truncate(&mut self, n: usize) {
        self.items.truncate(n);
    }
}

impl<I, T> FromIterator<T> for IdVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(it: It) -> Self {
        IdVec {
            items: it.into_iter().collect(),
            _id: PhantomData,
        }
    }
}

macro_rules! index_by {
    ($($id:ty),*) => {$(
        impl<T> Index<$id> for IdVec<$id, T> {
            type Output = T;
            #[inline]
            fn index(&self, i: $id) -> &T {
                &self.items[i.idx()]
            }
        }
        impl<T> IndexMut<$id> for IdVec<$id, T> {
            #[inline]
            fn index_mut(&mut self, i: $id) -> &mut T {
                &mut self.items[i.idx()]
            }
        }
    )*};
}

index_by!(PortId, QpId, FlowId, FaultId);
