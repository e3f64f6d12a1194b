//! Xirang registered memory (MISSION 3.1 to 3.3): one large region registered with the
//! NIC at start-up, carved into fixed-size aligned buffers in size classes, taken and
//! returned without allocation or re-registration.
//!
//! - [`region`]: a mapped region registered through a [`region::Backend`] (`host`:
//!   `mlock` only, for machines without an RDMA device), with its keys.
//! - [`verbs`]: libibverbs loaded at run time: the `verbs` backend (`ibv_reg_mr`,
//!   dma-buf where offered), chosen by [`verbs::auto_backend`] when a device exists, and
//!   RC queue pairs for RDMA WRITE/READ from pool buffers.
//! - [`pool`]: size classes over regions; [`pool::Pool::get`] pops a lock-free free list
//!   ([`freelist`]) and the [`pool::Buf`] handle pushes itself back when dropped;
//!   exhaustion fails fast, waits, or grows by one more registered region (counted).
//! - [`sizing`]: the region each NIC's pool needs for a workload (QPs x WR depth x
//!   buffer size per class, plus headroom) and what it pins.
//! - [`cache`]: per-thread magazines over a pool, so that a get+put pair touches no
//!   shared cache line; refilled and flushed in batches.

// Under loom only the free list is built: its atomics are loom's, usable only inside
// a model.
#[cfg(not(loom))]
pub mod bench;
#[cfg(not(loom))]
pub mod cache;
pub mod freelist;
#[cfg(not(loom))]
pub mod loopback;
#[cfg(not(loom))]
pub mod pool;
#[cfg(not(loom))]
pub mod region;
#[cfg(not(loom))]
pub mod sizing;
#[cfg(not(loom))]
pub mod verbs;

#[cfg(not(loom))]
pub use cache::{Cache, CacheStats, CachedBuf};
#[cfg(not(loom))]
pub use pool::{Buf, ClassSpec, Exhaustion, Pool, PoolConfig, Stats};
#[cfg(not(loom))]
pub use region::{Access, Backend, HostBackend, Keys, Region};

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemregError {
    /// The pool's configuration is invalid.
    #[error("pool configuration: {0}")]
    Config(String),
    /// Remote write was asked without local write.
    #[error("access: remote write needs local write (ibv_reg_mr(3))")]
    Access,
    /// The memory could not be mapped.
    #[error("cannot map {len} bytes{}: {source}", if *huge_pages { " of huge pages (are hugepages reserved? /proc/sys/vm/nr_hugepages)" } else { "" })]
    Map {
        /// Bytes asked for.
        len: usize,
        /// With huge pages.
        huge_pages: bool,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The backend could not register (or deregister) the memory.
    #[error(
        "{backend} backend cannot register {len} bytes: {source} (pinned memory counts against RLIMIT_MEMLOCK: `ulimit -l`)"
    )]
    Register {
        /// Backend name.
        backend: &'static str,
        /// Bytes.
        len: usize,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// No buffer free in the class, under the pool's exhaustion policy.
    #[error("no free buffer of class {class} ({size_bytes} bytes)")]
    Exhausted {
        /// Class index.
        class: usize,
        /// Its buffer size.
        size_bytes: usize,
    },
    /// libibverbs is missing or a verbs call failed.
    #[error("verbs: {0}")]
    Verbs(String),
    /// No RDMA device (or not the one named).
    #[error("{0}")]
    NoDevice(String),
    /// No class is large enough.
    #[error("no class holds {len} bytes (the largest holds {largest})")]
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// The largest class's size.
        largest: usize,
    },
}
