//! Fixed-size buffers carved from registered regions, in size classes.
//!
//! Each class owns whole pages of a region: buffers of a class at least a page long
//! start on a page (their stride is a whole number of pages); smaller ones are rounded
//! up to the alignment (the cache line, or what the device requires). Taking and
//! returning a buffer is a pop and a push on the class's lock-free free list; only the
//! exhaustion paths (waiting, growing) take a lock.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::MemregError;
use crate::freelist::{NIL, Stack};
use crate::region::{Access, Backend, Keys, Region, page_size};

/// Cache line size on x86-64 and most arm64 parts: the default buffer alignment
/// (docs/reference/memory-registration.md §5).
pub const CACHE_LINE_BYTES: usize = 64;
/// Regions a class may grow to (the first included).
pub const MAX_SEGMENTS: usize = 16;
/// Buffers a segment may hold (the index field of a buffer id).
const SEGMENT_INDEX_BITS: u32 = 24;
/// Size classes a pool may have (a buffer keeps its class in a byte).
pub const MAX_CLASSES: usize = 256;
/// Largest buffer, 1 GiB: keeps every layout sum far from overflow.
pub const MAX_BUFFER_BYTES: usize = 1 << 30;
/// A waiter re-checks the free list at least this often: a return that raced with
/// its going to sleep costs at most this much delay (the wake-up handshake does not put
/// a fence on the get/put fast path).
const WAIT_POLL: Duration = Duration::from_millis(1);

/// One size class: `count` buffers of at least `size_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassSpec {
    /// Usable bytes per buffer.
    pub size_bytes: usize,
    /// Buffers in the first region (and in each region a growth adds).
    pub count: usize,
}

/// What `get` does when a class has no free buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhaustion {
    /// Return [`MemregError::Exhausted`] at once.
    FailFast,
    /// Wait up to this long for a buffer to come back, then fail.
    Wait(Duration),
    /// Register one more region of the class's `count` buffers (counted in
    /// [`Stats::grows`]), up to [`MAX_SEGMENTS`] regions per class; then fail.
    Grow,
}

/// How a pool is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Size classes, in any order.
    pub classes: Vec<ClassSpec>,
    /// Alignment of buffers smaller than a page (a power of two; at least the cache
    /// line is used).
    pub alignment_bytes: usize,
    /// Map regions with huge pages.
    pub huge_pages: bool,
    /// Access the registration grants.
    pub access: Access,
    /// What an empty class does.
    pub exhaustion: Exhaustion,
}

impl PoolConfig {
    /// Classes as given, cache-line alignment, normal pages, full access, fail fast.
    pub fn new(classes: Vec<ClassSpec>) -> PoolConfig {
        PoolConfig {
            classes,
            alignment_bytes: CACHE_LINE_BYTES,
            huge_pages: false,
            access: Access::ALL,
            exhaustion: Exhaustion::FailFast,
        }
    }
}

/// Counters of a pool (all classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Buffers out of the free lists: handed out and not yet returned, or parked in a
    /// thread cache's magazine (crate::cache).
    pub in_use: usize,
    /// Most buffers ever out at once (a cache's refill moves several at a time).
    pub high_water: usize,
    /// `get` calls that had to wait.
    pub waits: u64,
    /// `get` calls that failed (exhausted).
    pub failures: u64,
    /// Regions registered after the first, by growth.
    pub grows: u64,
}

/// One region's share of a class, with its buffers' free-list links.
#[derive(Debug)]
struct Segment {
    region: Arc<Region>,
    base: *mut u8,
    next: Box<[AtomicU32]>,
}

// SAFETY: `base` points into `region`, which the segment keeps alive; the pointer is
// only read to compute buffer addresses, and each buffer has one owner at a time.
unsafe impl Send for Segment {}
// SAFETY: as above; shared use only reads the pointer and the atomics.
unsafe impl Sync for Segment {}

impl Segment {
    fn new(region: Arc<Region>, base: *mut u8, count: usize) -> Segment {
        Segment {
            region,
            base,
            next: (0..count).map(|_| AtomicU32::new(NIL)).collect(),
        }
    }
}

#[derive(Debug)]
struct Class {
    size_bytes: usize,
    stride: usize,
    per_segment: usize,
    segments: [OnceLock<Segment>; MAX_SEGMENTS],
    free: Stack,
    /// Magazine capacity still free for thread caches to lease (crate::cache).
    lease_budget: AtomicUsize,
}

impl Class {
    fn id(segment: usize, index: usize) -> u32 {
        ((segment as u32) << SEGMENT_INDEX_BITS) | index as u32
    }

    /// The free-list link of buffer `id` (its segment exists: ids are made only for
    /// segments already set).
    fn link(&self, id: u32) -> &AtomicU32 {
        let (seg, index) = split(id);
        &self.segments[seg]
            .get()
            .expect("invariant: an id names a live segment")
            .next[index]
    }

    fn pop(&self) -> Option<u32> {
        self.free.pop(|id| self.link(id))
    }

    fn push(&self, id: u32) {
        self.free.push(id, |id| self.link(id));
    }
}

/// A pool of registered buffers.
#[derive(Debug)]
pub struct Pool {
    classes: Vec<Class>,
    config: PoolConfig,
    backend: Arc<dyn Backend>,
    in_use: AtomicUsize,
    high_water: AtomicUsize,
    waits: AtomicU64,
    failures: AtomicU64,
    grows: AtomicU64,
    waiters: AtomicUsize,
    slow: Mutex<()>,
    returned: Condvar,
}

/// The stride of a class: whole pages for buffers of a page or more (each starts on a
/// page), else the size rounded up to the alignment.
pub fn stride_of(size_bytes: usize, alignment_bytes: usize, page_bytes: usize) -> usize {
    let size = size_bytes.max(1);
    if size >= page_bytes {
        size.div_ceil(page_bytes) * page_bytes
    } else {
        let a = alignment_bytes.max(CACHE_LINE_BYTES).next_power_of_two();
        size.div_ceil(a) * a
    }
}

impl Pool {
    /// Maps and registers one region holding every class, through `backend`.
    pub fn new(config: PoolConfig, backend: Arc<dyn Backend>) -> Result<Pool, MemregError> {
        let page = page_size();
        if config.classes.is_empty() || config.classes.len() > MAX_CLASSES {
            return Err(MemregError::Config(format!(
                "expected 1 to {MAX_CLASSES} size classes, found {}",
                config.classes.len()
            )));
        }
        if !config.alignment_bytes.is_power_of_two() || config.alignment_bytes > page {
            return Err(MemregError::Config(format!(
                "expected an alignment that is a power of two up to the page ({page} bytes), found {}",
                config.alignment_bytes
            )));
        }
        let mut layout = Vec::new();
        let mut total = 0usize;
        for (i, c) in config.classes.iter().enumerate() {
            if c.size_bytes == 0 || c.size_bytes > MAX_BUFFER_BYTES {
                return Err(MemregError::Config(format!(
                    "class {i}: expected a buffer size of 1 to {MAX_BUFFER_BYTES} bytes, found {}",
                    c.size_bytes
                )));
            }
            if c.count == 0 || c.count >= 1 << SEGMENT_INDEX_BITS {
                return Err(MemregError::Config(format!(
                    "class {i}: expected 1 to {} buffers, found {}",
                    (1usize << SEGMENT_INDEX_BITS) - 1,
                    c.count
                )));
            }
            let stride = stride_of(c.size_bytes, config.alignment_bytes, page);
            let bytes = stride.checked_mul(c.count).ok_or_else(|| {
                MemregError::Config(format!("class {i}: {} x {stride} bytes overflows", c.count))
            })?;
            layout.push((total, stride));
            total = total
                .checked_add(bytes.div_ceil(page) * page)
                .ok_or_else(|| MemregError::Config("the classes' total size overflows".into()))?;
        }
        let region = Arc::new(Region::new(
            total,
            config.huge_pages,
            config.access,
            backend.clone(),
        )?);
        let classes = config
            .classes
            .iter()
            .zip(&layout)
            .map(|(c, (offset, stride))| {
                let class = Class {
                    size_bytes: c.size_bytes,
                    stride: *stride,
                    per_segment: c.count,
                    segments: std::array::from_fn(|_| OnceLock::new()),
                    free: Stack::new(),
                    lease_budget: AtomicUsize::new(c.count / crate::cache::PARKED_DIVISOR),
                };
                let _ = class.segments[0].set(Segment::new(
                    region.clone(),
                    region.as_ptr().wrapping_add(*offset),
                    c.count,
                ));
                for i in (0..c.count).rev() {
                    class.push(Class::id(0, i));
                }
                class
            })
            .collect();
        Ok(Pool {
            classes,
            config,
            backend,
            in_use: AtomicUsize::new(0),
            high_water: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            grows: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            slow: Mutex::new(()),
            returned: Condvar::new(),
        })
    }

    /// The smallest class holding `len` bytes, or None.
    pub fn class_for(&self, len: usize) -> Option<usize> {
        (0..self.classes.len())
            .filter(|&i| self.classes[i].size_bytes >= len)
            .min_by_key(|&i| self.classes[i].size_bytes)
    }

    /// A buffer of at least `len` bytes from the smallest class that holds it.
    pub fn get(&self, len: usize) -> Result<Buf<'_>, MemregError> {
        self.get_class(self.class_holding(len)?)
    }

    /// The smallest class holding `len` bytes, or the error saying none does (built only
    /// then: `get` is on the fast path).
    pub(crate) fn class_holding(&self, len: usize) -> Result<usize, MemregError> {
        self.class_for(len).ok_or_else(|| MemregError::TooLarge {
            len,
            largest: self.classes.iter().map(|c| c.size_bytes).max().unwrap_or(0),
        })
    }

    /// A buffer of class `class`.
    pub fn get_class(&self, class: usize) -> Result<Buf<'_>, MemregError> {
        let id = self.take(class)?;
        Ok(self.hand_out(class, id))
    }

    /// A buffer id of `class`, counted in use: the free list's, or what the exhaustion
    /// policy gives.
    pub(crate) fn take(&self, class: usize) -> Result<u32, MemregError> {
        let id = match self.classes[class].pop() {
            Some(id) => id,
            None => match self.config.exhaustion {
                Exhaustion::FailFast => return self.fail(class),
                Exhaustion::Wait(timeout) => self.wait(class, timeout)?,
                Exhaustion::Grow => self.grow(class)?,
            },
        };
        self.count_out(1);
        Ok(id)
    }

    /// Up to `out.len()` more ids of `class` from the free list only (no waiting, no
    /// growth), counted in use at once; how many.
    pub(crate) fn take_free(&self, class: usize, out: &mut [u32]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.classes[class].pop() {
                Some(id) => {
                    out[n] = id;
                    n += 1;
                }
                None => break,
            }
        }
        if n > 0 {
            self.count_out(n);
        }
        n
    }

    fn count_out(&self, n: usize) {
        let now = self.in_use.fetch_add(n, Ordering::Relaxed) + n;
        // A plain load first: the mark moves rarely, and a locked update per get costs
        // as much as the free list's own compare-and-swap.
        if now > self.high_water.load(Ordering::Relaxed) {
            self.high_water.fetch_max(now, Ordering::Relaxed);
        }
    }

    fn fail<T>(&self, class: usize) -> Result<T, MemregError> {
        self.failures.fetch_add(1, Ordering::Relaxed);
        Err(MemregError::Exhausted {
            class,
            size_bytes: self.classes[class].size_bytes,
        })
    }

    fn wait(&self, class: usize, timeout: Duration) -> Result<u32, MemregError> {
        self.waits.fetch_add(1, Ordering::Relaxed);
        // No deadline when the timeout is beyond what the clock can add.
        let deadline = Instant::now().checked_add(timeout);
        let c = &self.classes[class];
        // Registered as a waiter before the last look under the lock, so a put that
        // finds no waiter happened before that look and its buffer is seen.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.slow.lock().unwrap_or_else(|e| e.into_inner());
        let got = loop {
            if let Some(id) = c.pop() {
                break Some(id);
            }
            let now = Instant::now();
            let left = match deadline {
                Some(d) if now >= d => break None,
                Some(d) => d - now,
                None => WAIT_POLL,
            };
            guard = self
                .returned
                .wait_timeout(guard, left.min(WAIT_POLL))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        match got {
            Some(id) => Ok(id),
            None => self.fail(class),
        }
    }

    fn grow(&self, class: usize) -> Result<u32, MemregError> {
        let c = &self.classes[class];
        let _guard = self.slow.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have grown the class while this one waited for the lock.
        if let Some(id) = c.pop() {
            return Ok(id);
        }
        let Some(seg) = c.segments.iter().position(|s| s.get().is_none()) else {
            return self.fail(class);
        };
        let region = match Region::new(
            c.stride * c.per_segment,
            self.config.huge_pages,
            self.config.access,
            self.backend.clone(),
        ) {
            Ok(r) => Arc::new(r),
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        let base = region.as_ptr();
        let _ = c.segments[seg].set(Segment::new(region, base, c.per_segment));
        self.grows.fetch_add(1, Ordering::Relaxed);
        for i in (1..c.per_segment).rev() {
            c.push(Class::id(seg, i));
        }
        Ok(Class::id(seg, 0))
    }

    fn hand_out(&self, class: usize, id: u32) -> Buf<'_> {
        let (ptr, len, keys) = self.locate(class, id);
        Buf {
            pool: self,
            class: class as u8,
            id,
            ptr,
            len,
            keys,
        }
    }

    /// Address, usable length and keys of buffer `id` of `class`.
    pub(crate) fn locate(&self, class: usize, id: u32) -> (*mut u8, usize, Keys) {
        let c = &self.classes[class];
        let (seg, index) = split(id);
        let s = c.segments[seg]
            .get()
            .expect("invariant: an id names a live segment");
        // In bounds: the segment holds `per_segment` strides (checked at construction).
        (
            s.base.wrapping_add(index * c.stride),
            c.size_bytes,
            s.region.keys(),
        )
    }

    /// Number of classes.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// Leases up to `want` magazine slots of `class` for a thread cache; how many.
    pub(crate) fn lease(&self, class: usize, want: usize) -> usize {
        let budget = &self.classes[class].lease_budget;
        let mut free = budget.load(Ordering::Relaxed);
        loop {
            if free == 0 {
                return 0;
            }
            let take = want.min(free);
            match budget.compare_exchange_weak(free, free - take, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return take,
                Err(now) => free = now,
            }
        }
    }

    /// Gives back `n` leased magazine slots of `class`.
    pub(crate) fn release(&self, class: usize, n: usize) {
        self.classes[class].lease_budget.fetch_add(n, Ordering::Relaxed);
    }

    /// Buffers of `class` in its first region.
    pub(crate) fn class_buffers(&self, class: usize) -> usize {
        self.classes[class].per_segment
    }

    fn put(&self, class: usize, id: u32) {
        self.put_many(class, &[id]);
    }

    /// Returns ids of `class` to the free list.
    pub(crate) fn put_many(&self, class: usize, ids: &[u32]) {
        // Counted out before they are back, so that in-use never exceeds the buffers.
        self.in_use.fetch_sub(ids.len(), Ordering::Relaxed);
        for &id in ids {
            self.classes[class].push(id);
        }
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.slow.lock().unwrap_or_else(|e| e.into_inner());
            self.returned.notify_all();
        }
    }

    /// The pool's counters.
    pub fn stats(&self) -> Stats {
        Stats {
            in_use: self.in_use.load(Ordering::Relaxed),
            high_water: self.high_water.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            grows: self.grows.load(Ordering::Relaxed),
        }
    }

    /// Each class's (size, stride, buffers it can hold now).
    pub fn classes(&self) -> Vec<(usize, usize, usize)> {
        self.classes
            .iter()
            .map(|c| {
                let segs = c.segments.iter().filter(|s| s.get().is_some()).count();
                (c.size_bytes, c.stride, segs * c.per_segment)
            })
            .collect()
    }

    /// Bytes registered (pinned) in all regions.
    pub fn registered_bytes(&self) -> usize {
        let mut regions: Vec<(usize, usize)> = self
            .classes
            .iter()
            .flat_map(|c| c.segments.iter().filter_map(|s| s.get()))
            .map(|s| (s.region.addr(), s.region.len()))
            .collect();
        regions.sort();
        regions.dedup();
        regions.iter().map(|r| r.1).sum()
    }

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        self.backend.name()
    }
}

fn split(id: u32) -> (usize, usize) {
    (
        (id >> SEGMENT_INDEX_BITS) as usize,
        (id & ((1 << SEGMENT_INDEX_BITS) - 1)) as usize,
    )
}

/// A buffer: its address, length and keys; back to its pool when dropped.
#[derive(Debug)]
pub struct Buf<'p> {
    pool: &'p Pool,
    class: u8,
    id: u32,
    ptr: *mut u8,
    len: usize,
    keys: Keys,
}

/// The accessors of a buffer handle (`Buf` and `crate::CachedBuf`): both hold `ptr`,
/// `len`, `keys` and `class`, and both borrow what keeps the region mapped. A type that
/// uses it must guarantee what `as_slice` relies on: `ptr..ptr + len` lies in a region
/// that outlives the handle, and the handle is the only one for those bytes.
macro_rules! buffer_accessors {
    ($t:ty) => {
        impl $t {
            /// Start address (for a scatter/gather entry or a peer's RDMA).
            pub fn addr(&self) -> usize {
                self.ptr as usize
            }
            /// Usable length, bytes.
            pub fn len(&self) -> usize {
                self.len
            }
            /// Never empty.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
            /// The registration's keys.
            pub fn keys(&self) -> $crate::region::Keys {
                self.keys
            }
            /// Its size class.
            pub fn class(&self) -> usize {
                usize::from(self.class)
            }
            /// The bytes. (A NIC may write them behind the program's back once the
            /// buffer is posted; reading them then is the application's protocol, as
            /// with any RDMA buffer.)
            pub fn as_slice(&self) -> &[u8] {
                // SAFETY: [ptr, ptr + len) lies in a live mapping of the pool's (the
                // handle borrows the pool, directly or through a cache, and the pool owns
                // the region), and this handle is the only one for these bytes until it is
                // dropped.
                unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
            }
            /// The bytes, to fill.
            pub fn as_mut_slice(&mut self) -> &mut [u8] {
                // SAFETY: as in `as_slice`, and `&mut self` makes this the only borrow.
                unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
            }
        }
    };
}
pub(crate) use buffer_accessors;

buffer_accessors!(Buf<'_>);

impl Drop for Buf<'_> {
    fn drop(&mut self) {
        self.pool.put(usize::from(self.class), self.id);
    }
}

// SAFETY: a Buf is the exclusive owner of its bytes; the pool it returns to is Sync
// (atomics, a mutex and a condvar), so the handle may move to and be dropped on
// another thread.
unsafe impl Send for Buf<'_> {}
