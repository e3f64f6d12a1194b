#![cfg(not(loom))]
//! Every unsafe block of the pool that Miri can run, small enough for Miri
//! (scripts/miri.sh runs this file and the crate's unit tests under it; the normal test
//! run runs it too). Miri stops at undefined behaviour: out-of-bounds or dangling access
//! to a region after it is unmapped, pointers without provenance, data races on the
//! buffers or the free lists. The C calls are outside Miri: mlock (the host backend skips
//! it under `cfg(miri)`), getrlimit (`memlock_limit_bytes`), the benchmark's malloc/free,
//! and libibverbs, whose code runs on real devices in the Soft-RoCE guest.
//!
//! Blocks covered: `Region::new` (mmap), its unmapping when registration fails, and its
//! drop (munmap); `page_size` (sysconf); the buffers' `as_slice`/`as_mut_slice` through
//! `Buf` and `CachedBuf`; a `Buf` sent to and dropped on another thread; the
//! `Region`/`Segment` `Send`/`Sync` claims under two threads; growth (a second region);
//! waiting for a buffer another thread returns; the free list's tagged stack under two
//! threads.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use xirang_memreg::freelist::FreeList;
use xirang_memreg::{
    Access, Backend, ClassSpec, Exhaustion, HostBackend, Keys, MemregError, Pool, PoolConfig,
};

/// A backend that refuses to register: the region must unmap what it mapped.
#[derive(Debug)]
struct Refusing;

impl Backend for Refusing {
    fn name(&self) -> &'static str {
        "refusing"
    }
    fn register(&self, _: usize, len: usize, _: Access) -> Result<Keys, MemregError> {
        Err(MemregError::Register {
            backend: "refusing",
            len,
            source: std::io::Error::from_raw_os_error(12),
        })
    }
    fn deregister(&self, _: usize, _: usize, _: Keys) -> Result<(), MemregError> {
        unreachable!("nothing was registered")
    }
}

#[test]
fn a_refused_registration_unmaps_the_region() {
    let e = Pool::new(
        PoolConfig::new(vec![ClassSpec {
            size_bytes: 64,
            count: 4,
        }]),
        Arc::new(Refusing),
    )
    .unwrap_err();
    assert!(matches!(e, MemregError::Register { .. }), "{e}");
}

fn pool(exhaustion: Exhaustion) -> Pool {
    let mut c = PoolConfig::new(vec![
        ClassSpec {
            size_bytes: 100,
            count: 8,
        },
        ClassSpec {
            size_bytes: 5000,
            count: 2,
        },
    ]);
    c.exhaustion = exhaustion;
    Pool::new(c, Arc::new(HostBackend::default())).unwrap()
}

#[test]
fn buffers_are_written_and_read_whole_and_never_overlap() {
    let p = pool(Exhaustion::FailFast);
    let mut held = Vec::new();
    for class in [0, 1] {
        while let Ok(mut b) = p.get_class(class) {
            let tag = held.len() as u8;
            b.as_mut_slice().fill(tag);
            held.push((tag, b));
        }
    }
    assert_eq!(held.len(), 10);
    for (tag, b) in &held {
        assert!(b.as_slice().iter().all(|x| x == tag), "a buffer was overwritten");
    }
    let starts: BTreeSet<usize> = held.iter().map(|(_, b)| b.addr()).collect();
    assert_eq!(starts.len(), 10);
}

#[test]
fn a_buffer_moves_to_another_thread_and_returns_from_there() {
    let p = pool(Exhaustion::FailFast);
    let mut b = p.get(64).unwrap();
    b.as_mut_slice()[0] = 7;
    std::thread::scope(|s| {
        s.spawn(move || {
            assert_eq!(b.as_slice()[0], 7);
            drop(b);
        });
    });
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn growth_maps_a_second_region_and_dropping_the_pool_unmaps_both() {
    let p = pool(Exhaustion::Grow);
    let mut held: Vec<_> = (0..3).map(|_| p.get_class(1).unwrap()).collect();
    assert_eq!(p.stats().grows, 1);
    for b in &mut held {
        let n = b.len();
        b.as_mut_slice()[n - 1] = 1;
    }
    drop(held);
    drop(p);
}

#[test]
fn a_waiter_gets_the_buffer_another_thread_returns() {
    let p = pool(Exhaustion::Wait(Duration::from_secs(30)));
    let held: Vec<_> = (0..2).map(|_| p.get_class(1).unwrap()).collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut b = p.get_class(1).unwrap();
            b.as_mut_slice().fill(3);
        });
        s.spawn(move || drop(held));
    });
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn thread_caches_refill_flush_and_never_share() {
    let p = pool(Exhaustion::Wait(Duration::from_secs(30)));
    std::thread::scope(|s| {
        for t in 1..=2u8 {
            let p = &p;
            s.spawn(move || {
                let c = p.cache();
                for _ in 0..6 {
                    let mut bufs: Vec<_> = (0..3).map(|_| c.get_class(0).unwrap()).collect();
                    for b in &mut bufs {
                        b.as_mut_slice().fill(t);
                    }
                    for b in &bufs {
                        assert!(b.as_slice().iter().all(|x| *x == t));
                    }
                }
                c.flush();
            });
        }
    });
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn the_free_list_hands_each_index_to_one_thread_at_a_time() {
    let f = FreeList::full(4);
    let owned: Vec<std::sync::atomic::AtomicBool> = (0..4)
        .map(|_| std::sync::atomic::AtomicBool::new(false))
        .collect();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..20 {
                    if let Some(i) = f.pop() {
                        let was = owned[i as usize].swap(true, std::sync::atomic::Ordering::SeqCst);
                        assert!(!was, "index {i} out twice");
                        owned[i as usize].store(false, std::sync::atomic::Ordering::SeqCst);
                        f.push(i);
                    }
                }
            });
        }
    });
    let mut all: Vec<u32> = std::iter::from_fn(|| f.pop()).collect();
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3]);
}
