//! Per-thread buffer caches: a thread that takes and returns buffers all the time keeps a
//! small stack of free ids per class (a "magazine", as in Bonwick's slab magazines and
//! DPDK's per-core mempool caches), so that a get+put pair touches no shared cache line.
//! The cache refills from the pool's lock-free free list, and flushes back to it, half a
//! magazine at a time; it flushes everything when dropped.
//!
//! The price is slack: free buffers sit in each thread's cache, where other threads
//! cannot take them, so a class can look exhausted to one thread (or make it wait) while
//! another's cache holds free buffers (`Cache::flush` hands them back). The slack is
//! bounded per cache and per pool, in terms of the class's first region: a magazine asks
//! for an eighth of it (at least 1, at most [`MAGAZINE`]; DPDK bounds its per-core caches by
//! the pool's size the same way), and the magazines of all caches together get at most a
//! quarter of it (none for a class of under 4 buffers). A cache leases its magazines'
//! capacity from the class when it is made and gives it back when dropped; a cache made
//! when no capacity is left takes and returns that class's buffers straight through the
//! shared free list for its whole life. So a class looks empty only when at least three
//! quarters of it is really out. The pool's `in_use` and `high_water`
//! count buffers out of its free lists, parked ones included; [`CacheStats`] says how many
//! the cache's thread really holds.
//!
//! A cache and its buffers stay on one thread: a [`CachedBuf`] cannot be sent to another
//! thread, and a cache cannot be shared between threads:
//!
//! ```compile_fail
//! fn send<T: Send>(_: T) {}
//! let pool = xirang_memreg::Pool::new(
//!     xirang_memreg::PoolConfig::new(vec![xirang_memreg::ClassSpec { size_bytes: 64, count: 8 }]),
//!     std::sync::Arc::new(xirang_memreg::HostBackend::default()),
//! ).unwrap();
//! let cache = pool.cache();
//! send(cache.get(1).unwrap());
//! ```
//!
//! ```compile_fail
//! fn share<T: Sync>(_: &T) {}
//! let pool = xirang_memreg::Pool::new(
//!     xirang_memreg::PoolConfig::new(vec![xirang_memreg::ClassSpec { size_bytes: 64, count: 8 }]),
//!     std::sync::Arc::new(xirang_memreg::HostBackend::default()),
//! ).unwrap();
//! share(&pool.cache());
//! ```

use std::cell::Cell;

use crate::region::Keys;
use crate::{MemregError, Pool};

/// Free ids a cache keeps per class at most.
pub const MAGAZINE: usize = 32;
/// A magazine holds at most 1/8 of its class's buffers (see the module's comment).
const SLACK_DIVISOR: usize = 8;
/// All magazines of a class together hold at most 1/4 of it.
pub(crate) const PARKED_DIVISOR: usize = 4;
/// Ids moved per refill or flush: half a full magazine (at least one), so that
/// alternating gets and puts at a boundary do not move ids back and forth every time.
fn batch(cap: usize) -> usize {
    (cap / 2).max(1)
}

#[derive(Debug)]
struct Magazine {
    len: Cell<usize>,
    cap: usize,
    ids: [Cell<u32>; MAGAZINE],
}

impl Magazine {
    /// A magazine of `cap` ids (0: none, every get and put goes to the pool).
    fn new(cap: usize) -> Magazine {
        Magazine {
            len: Cell::new(0),
            cap,
            ids: std::array::from_fn(|_| Cell::new(0)),
        }
    }
}

/// A cache's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Gets served from the magazine.
    pub hits: u64,
    /// Gets that went to the pool (refills).
    pub refills: u64,
    /// Times buffers went back to the pool in a batch (half of a full magazine, a
    /// `flush`, or the cache's drop).
    pub flushes: u64,
    /// Buffers out of this cache now.
    pub in_use: usize,
}

/// One thread's cache of a pool's buffers. Not `Sync`: one thread uses it at a time (it
/// may move to another thread while no buffer is out), and its [`CachedBuf`]s stay on
/// the thread that has it.
#[derive(Debug)]
pub struct Cache<'p> {
    pool: &'p Pool,
    mags: Box<[Magazine]>,
    hits: Cell<u64>,
    refills: Cell<u64>,
    flushes: Cell<u64>,
    in_use: Cell<usize>,
}

impl Pool {
    /// A cache for the calling thread (see [`crate::cache`]).
    pub fn cache(&self) -> Cache<'_> {
        Cache {
            pool: self,
            mags: (0..self.class_count())
                .map(|c| {
                    let want = (self.class_buffers(c) / SLACK_DIVISOR).clamp(1, MAGAZINE);
                    Magazine::new(self.lease(c, want))
                })
                .collect(),
            hits: Cell::new(0),
            refills: Cell::new(0),
            flushes: Cell::new(0),
            in_use: Cell::new(0),
        }
    }
}

impl<'p> Cache<'p> {
    /// A buffer of at least `len` bytes from the smallest class that holds it.
    pub fn get(&self, len: usize) -> Result<CachedBuf<'_, 'p>, MemregError> {
        self.get_class(self.pool.class_holding(len)?)
    }

    /// A buffer of class `class`: from the magazine, else refilled from the pool (whose
    /// exhaustion policy applies when its free list is empty too).
    pub fn get_class(&self, class: usize) -> Result<CachedBuf<'_, 'p>, MemregError> {
        let m = &self.mags[class];
        let n = m.len.get();
        let id = if n > 0 {
            m.len.set(n - 1);
            self.hits.set(self.hits.get() + 1);
            m.ids[n - 1].get()
        } else {
            self.refill(class)?
        };
        self.in_use.set(self.in_use.get() + 1);
        let (ptr, len, keys) = self.pool.locate(class, id);
        Ok(CachedBuf {
            cache: self,
            class: class as u8,
            id,
            ptr,
            len,
            keys,
        })
    }

    #[cold]
    fn refill(&self, class: usize) -> Result<u32, MemregError> {
        self.refills.set(self.refills.get() + 1);
        let m = &self.mags[class];
        let mut more = [0u32; MAGAZINE];
        let got = self.pool.take_free(class, &mut more[..batch(m.cap)]);
        let id = if got > 0 {
            more[got - 1]
        } else {
            // Nothing free: the pool's policy (fail, wait, grow) decides.
            return self.pool.take(class);
        };
        for (slot, &i) in m.ids.iter().zip(&more[..got - 1]) {
            slot.set(i);
        }
        m.len.set(got - 1);
        Ok(id)
    }

    fn put(&self, class: usize, id: u32) {
        self.in_use.set(self.in_use.get() - 1);
        let m = &self.mags[class];
        let n = m.len.get();
        if n < m.cap {
            m.ids[n].set(id);
            m.len.set(n + 1);
        } else {
            self.put_full(class, id);
        }
    }

    /// A put into a full magazine (or into none): half of it goes back to the pool first.
    #[cold]
    fn put_full(&self, class: usize, id: u32) {
        let m = &self.mags[class];
        if m.cap == 0 {
            self.pool.put_many(class, &[id]);
            return;
        }
        self.flush_some(class, batch(m.cap));
        let n = m.len.get();
        m.ids[n].set(id);
        m.len.set(n + 1);
    }

    #[cold]
    fn flush_some(&self, class: usize, count: usize) {
        self.flushes.set(self.flushes.get() + 1);
        let m = &self.mags[class];
        let n = m.len.get();
        let keep = n - count.min(n);
        // On the stack: a flush allocates nothing.
        let mut ids = [0u32; MAGAZINE];
        for (to, from) in ids.iter_mut().zip(&m.ids[keep..n]) {
            *to = from.get();
        }
        m.len.set(keep);
        self.pool.put_many(class, &ids[..n - keep]);
    }

    /// Hands every cached free buffer back to the pool.
    pub fn flush(&self) {
        for class in 0..self.mags.len() {
            if self.mags[class].len.get() > 0 {
                self.flush_some(class, MAGAZINE);
            }
        }
    }

    /// Free buffers parked in this cache, all classes.
    pub fn cached(&self) -> usize {
        self.mags.iter().map(|m| m.len.get()).sum()
    }

    /// The cache's counters.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.get(),
            refills: self.refills.get(),
            flushes: self.flushes.get(),
            in_use: self.in_use.get(),
        }
    }
}

impl Drop for Cache<'_> {
    fn drop(&mut self) {
        // Every CachedBuf borrows the cache, so none is out: all its buffers are here.
        self.flush();
        for (class, m) in self.mags.iter().enumerate() {
            self.pool.release(class, m.cap);
        }
    }
}

/// A buffer from a [`Cache`]: its address, length and keys; back to the cache when
/// dropped. Stays on the cache's thread.
#[derive(Debug)]
pub struct CachedBuf<'c, 'p> {
    cache: &'c Cache<'p>,
    class: u8,
    id: u32,
    ptr: *mut u8,
    len: usize,
    keys: Keys,
}

crate::pool::buffer_accessors!(CachedBuf<'_, '_>);

impl Drop for CachedBuf<'_, '_> {
    fn drop(&mut self) {
        self.cache.put(usize::from(self.class), self.id);
    }
}
