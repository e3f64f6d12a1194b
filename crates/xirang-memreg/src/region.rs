//! One contiguous allocation, registered once through a backend.
//!
//! Registration is page-granular and costs a system call plus per-page work
//! (docs/reference/memory-registration.md §2), so a region is mapped whole (anonymous
//! `mmap`, huge pages on request), registered at start-up and released only when dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::MemregError;

/// Access a registration grants (`IBV_ACCESS_*`, docs/reference/memory-registration.md §1). Remote
/// write needs local write; local read is always allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The NIC may write into the memory for local operations (receives, READ results).
    pub local_write: bool,
    /// Peers may RDMA WRITE into it.
    pub remote_write: bool,
    /// Peers may RDMA READ from it.
    pub remote_read: bool,
}

impl Access {
    /// What a send/receive and RDMA buffer pool needs: all three.
    pub const ALL: Access = Access {
        local_write: true,
        remote_write: true,
        remote_read: true,
    };
}

/// The keys a registration hands out: `lkey` for local scatter/gather entries, `rkey`
/// for peers' RDMA operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Keys {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// Registers and deregisters memory. `verbs` (libibverbs) registers with a NIC; `host`
/// only pins the pages, for machines without an RDMA device.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Its name, as messages print it.
    fn name(&self) -> &'static str;
    /// Registers `len` bytes at `addr` (page aligned).
    fn register(&self, addr: usize, len: usize, access: Access) -> Result<Keys, MemregError>;
    /// Releases a registration made by [`Backend::register`].
    fn deregister(&self, addr: usize, len: usize, keys: Keys) -> Result<(), MemregError>;
}

/// Pins pages with `mlock` (what registration does to them, without a NIC): the
/// fallback on hosts with no RDMA device. Its keys are only unique per registration.
#[derive(Debug, Default)]
pub struct HostBackend {
    next_key: AtomicU32,
}

/// `mlock`. Under Miri, which cannot call into the C library for it, nothing is pinned:
/// the pool's own unsafe code (mapping, buffers) is what Miri checks, and the pinning
/// calls run in the normal test run.
fn pin(addr: usize, len: usize) -> i32 {
    #[cfg(miri)]
    {
        let _ = (addr, len);
        0
    }
    // SAFETY: mlock only reads the address range; the caller maps it for as long as it
    // stays registered.
    #[cfg(not(miri))]
    unsafe {
        libc::mlock(addr as *const libc::c_void, len)
    }
}

/// `munlock` (nothing under Miri, as in [`pin`]).
fn unpin(addr: usize, len: usize) -> i32 {
    #[cfg(miri)]
    {
        let _ = (addr, len);
        0
    }
    // SAFETY: the range is mapped and was locked by `pin`.
    #[cfg(not(miri))]
    unsafe {
        libc::munlock(addr as *const libc::c_void, len)
    }
}

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn register(&self, addr: usize, len: usize, access: Access) -> Result<Keys, MemregError> {
        if access.remote_write && !access.local_write {
            return Err(MemregError::Access);
        }
        if pin(addr, len) != 0 {
            return Err(MemregError::Register {
                backend: self.name(),
                len,
                source: std::io::Error::last_os_error(),
            });
        }
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        Ok(Keys { lkey: key, rkey: key })
    }

    fn deregister(&self, addr: usize, len: usize, _keys: Keys) -> Result<(), MemregError> {
        if unpin(addr, len) != 0 {
            return Err(MemregError::Register {
                backend: self.name(),
                len,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }
}

/// This process's soft `RLIMIT_MEMLOCK`, bytes (`u64::MAX` when unlimited): what an
/// unprivileged process may pin (docs/reference/memory-registration.md §2).
pub fn memlock_limit_bytes() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return None;
    }
    Some(if r.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        r.rlim_cur
    })
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// Size of an explicit huge page (`MAP_HUGETLB` default on x86-64 Linux; a system whose
/// default huge page is 1 GiB is not supported).
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// One mapped, registered range. Unmapped and deregistered on drop.
#[derive(Debug)]
pub struct Region {
    // The mapping's pointer (not just its address), so that buffers carved from it keep
    // its provenance.
    ptr: *mut u8,
    len: usize,
    keys: Keys,
    backend: Arc<dyn Backend>,
}

impl Region {
    /// Maps `len` bytes (rounded up to the page, or to the huge page with `huge_pages`)
    /// and registers them.
    pub fn new(
        len: usize,
        huge_pages: bool,
        access: Access,
        backend: Arc<dyn Backend>,
    ) -> Result<Region, MemregError> {
        let unit = if huge_pages { HUGE_PAGE_BYTES } else { page_size() };
        let len = len
            .max(1)
            .div_ceil(unit)
            .checked_mul(unit)
            .ok_or_else(|| MemregError::Config(format!("a region of {len} bytes overflows")))?;
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if huge_pages {
            flags |= libc::MAP_HUGETLB;
        }
        // SAFETY: an anonymous private mapping at an address the kernel picks aliases
        // nothing; the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MemregError::Map {
                len,
                huge_pages,
                source: std::io::Error::last_os_error(),
            });
        }
        match backend.register(p as usize, len, access) {
            Ok(keys) => Ok(Region {
                ptr: p.cast(),
                len,
                keys,
                backend,
            }),
            Err(e) => {
                // SAFETY: the mapping made above, not shared with anyone yet.
                unsafe { libc::munmap(p, len) };
                Err(e)
            }
        }
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// Start of the mapping, as a pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length, bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty: a region is at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The registration's keys.
    pub fn keys(&self) -> Keys {
        self.keys
    }

    /// The backend that registered it.
    pub fn backend(&self) -> &str {
        self.backend.name()
    }
}

// SAFETY: the region owns its mapping; the pointer is only read (to carve buffers, each
// handed to one owner at a time by the pool) and unmapped once, in Drop.
unsafe impl Send for Region {}
// SAFETY: as above: shared access only reads the pointer and the keys.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // A failed deregistration leaves pages pinned until exit; nothing else to do.
        let _ = self.backend.deregister(self.ptr as usize, self.len, self.keys);
        // SAFETY: the mapping this region made; every buffer borrowed from it borrows the
        // pool that owns the region, so none outlives it.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
