#![cfg(not(loom))]
//! The pool's invariants on the host backend (mlock): no buffer is handed out twice,
//! every buffer returns, alignment holds for any class and region sizes, and exhaustion
//! follows the configured policy.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use xirang_memreg::pool::{CACHE_LINE_BYTES, stride_of};
use xirang_memreg::region::page_size;
use xirang_memreg::{ClassSpec, Exhaustion, HostBackend, MemregError, Pool, PoolConfig};

fn pool(classes: Vec<ClassSpec>, exhaustion: Exhaustion) -> Pool {
    let mut c = PoolConfig::new(classes);
    c.exhaustion = exhaustion;
    Pool::new(c, Arc::new(HostBackend::default())).unwrap()
}

/// Property cases and thread rounds: far fewer under Miri, which interprets every step
/// (the test command runs tests/miri.rs under it; these files run under it by hand, see
/// scripts/miri.sh).
const CASES: u32 = if cfg!(miri) { 4 } else { 48 };
const ROUNDS: usize = if cfg!(miri) { 30 } else { 2000 };

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Any classes: every buffer of every class can be taken at once, no two overlap,
    /// each is aligned (a page where it is a page or more, else the cache line), all
    /// lie in registered memory, and all come back.
    #[test]
    fn buffers_are_distinct_aligned_and_all_return(
        classes in prop::collection::vec((1usize..20_000, 1usize..24), 1..4),
        order in any::<u64>(),
    ) {
        let specs: Vec<ClassSpec> = classes.iter().map(|(s, n)| ClassSpec { size_bytes: *s, count: *n }).collect();
        let p = pool(specs.clone(), Exhaustion::FailFast);
        let page = page_size();
        let mut taken = Vec::new();
        for (k, s) in specs.iter().enumerate() {
            for _ in 0..s.count {
                taken.push(p.get_class(k).unwrap());
            }
            let exhausted = matches!(p.get_class(k), Err(MemregError::Exhausted { .. }));
            prop_assert!(exhausted, "class {} should be exhausted", k);
        }
        let mut spans: Vec<(usize, usize)> = taken.iter().map(|b| (b.addr(), b.addr() + b.len())).collect();
        spans.sort();
        for w in spans.windows(2) {
            prop_assert!(w[0].1 <= w[1].0, "overlap {:?}", w);
        }
        for b in &taken {
            let align = if b.len() >= page { page } else { CACHE_LINE_BYTES };
            prop_assert_eq!(b.addr() % align, 0, "{} bytes at {:#x}", b.len(), b.addr());
            prop_assert!(b.len() >= specs[b.class()].size_bytes);
        }
        prop_assert_eq!(p.stats().in_use, taken.len());
        prop_assert_eq!(p.stats().high_water, taken.len());
        // Return them in a scrambled order; all come back and can be taken again.
        let n = taken.len();
        let mut rot = taken.split_off((order as usize) % n.max(1));
        rot.reverse();
        drop(rot);
        drop(taken);
        prop_assert_eq!(p.stats().in_use, 0);
        let again: BTreeSet<usize> = (0..specs.len())
            .flat_map(|k| (0..specs[k].count).map(move |_| k))
            .map(|k| p.get_class(k).unwrap())
            .map(|b| { let a = b.addr(); std::mem::forget(b); a })
            .collect();
        prop_assert_eq!(again.len(), n);
    }

    /// The stride rule on its own: page-sized and larger classes take whole pages,
    /// smaller ones whole alignment units, never less than asked.
    #[test]
    fn strides_round_to_the_page_or_the_alignment(size in 1usize..100_000, align_log in 0u32..13) {
        let page = 4096;
        let s = stride_of(size, 1 << align_log, page);
        prop_assert!(s >= size);
        if size >= page {
            prop_assert_eq!(s % page, 0);
        } else {
            let a = (1usize << align_log).max(CACHE_LINE_BYTES);
            prop_assert_eq!(s % a, 0);
            prop_assert!(s < size + a);
        }
    }
}

#[test]
fn the_smallest_class_that_fits_serves_a_request_and_too_large_says_so() {
    let p = pool(
        vec![
            ClassSpec {
                size_bytes: 65_536,
                count: 2,
            },
            ClassSpec {
                size_bytes: 4_096,
                count: 4,
            },
        ],
        Exhaustion::FailFast,
    );
    assert_eq!(p.get(100).unwrap().len(), 4_096);
    assert_eq!(p.get(5_000).unwrap().len(), 65_536);
    let e = p.get(1 << 20).unwrap_err().to_string();
    assert_eq!(e, "no class holds 1048576 bytes (the largest holds 65536)");
    let mut b = p.get(10).unwrap();
    b.as_mut_slice().fill(0xa5);
    assert!(b.as_slice().iter().all(|x| *x == 0xa5));
    assert_eq!(p.backend(), "host");
    assert!(p.registered_bytes() >= 2 * 65_536 + 4 * 4_096);
}

#[test]
fn fail_fast_counts_failures() {
    let p = pool(
        vec![ClassSpec {
            size_bytes: 64,
            count: 1,
        }],
        Exhaustion::FailFast,
    );
    let a = p.get(1).unwrap();
    assert!(matches!(
        p.get(1),
        Err(MemregError::Exhausted {
            class: 0,
            size_bytes: 64
        })
    ));
    assert_eq!(p.stats().failures, 1);
    drop(a);
    assert!(p.get(1).is_ok());
}

#[test]
fn wait_gets_a_buffer_another_thread_returns_or_times_out() {
    let p = pool(
        vec![ClassSpec {
            size_bytes: 64,
            count: 1,
        }],
        Exhaustion::Wait(Duration::from_secs(5)),
    );
    let held = p.get(1).unwrap();
    std::thread::scope(|s| {
        let t = s.spawn(|| p.get(1).map(|b| b.addr()));
        std::thread::sleep(Duration::from_millis(50));
        let addr = held.addr();
        drop(held);
        assert_eq!(t.join().unwrap().unwrap(), addr);
    });
    assert_eq!(p.stats().waits, 1);
    let short = pool(
        vec![ClassSpec {
            size_bytes: 64,
            count: 1,
        }],
        Exhaustion::Wait(Duration::from_millis(20)),
    );
    let _held = short.get(1).unwrap();
    let t0 = std::time::Instant::now();
    assert!(matches!(short.get(1), Err(MemregError::Exhausted { .. })));
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert_eq!((short.stats().waits, short.stats().failures), (1, 1));
    // A timeout beyond what the clock can add waits without a deadline.
    let forever = pool(
        vec![ClassSpec {
            size_bytes: 64,
            count: 1,
        }],
        Exhaustion::Wait(Duration::MAX),
    );
    let held = forever.get(1).unwrap();
    std::thread::scope(|s| {
        let t = s.spawn(|| forever.get(1).is_ok());
        std::thread::sleep(Duration::from_millis(20));
        drop(held);
        assert!(t.join().unwrap());
    });
}

#[test]
fn grow_registers_one_more_region_counted_up_to_the_limit() {
    let p = pool(
        vec![ClassSpec {
            size_bytes: 8_192,
            count: 2,
        }],
        Exhaustion::Grow,
    );
    let before = p.registered_bytes();
    let held: Vec<_> = (0..5).map(|_| p.get(1).unwrap()).collect();
    // 2 in the first region, then two growths of 2.
    assert_eq!(p.stats().grows, 2);
    assert_eq!(p.classes()[0].2, 6);
    assert_eq!(p.registered_bytes(), before + 2 * 2 * 8_192);
    let addrs: BTreeSet<usize> = held.iter().map(|b| b.addr()).collect();
    assert_eq!(addrs.len(), 5);
    drop(held);
    // Up to MAX_SEGMENTS regions, then it fails.
    let all: Vec<_> = (0..2 * xirang_memreg::pool::MAX_SEGMENTS)
        .map(|_| p.get(1).unwrap())
        .collect();
    assert!(matches!(p.get(1), Err(MemregError::Exhausted { .. })));
    assert_eq!(p.stats().grows as usize, xirang_memreg::pool::MAX_SEGMENTS - 1);
    drop(all);
}

#[test]
fn threads_never_share_a_buffer() {
    // Each thread writes its id over the whole buffer, yields, and checks nobody else
    // wrote: a buffer handed out twice would show another id.
    let p = pool(
        vec![ClassSpec {
            size_bytes: 256,
            count: 8,
        }],
        Exhaustion::Wait(Duration::from_secs(10)),
    );
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let p = &p;
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    let mut b = p.get(1).unwrap();
                    b.as_mut_slice().fill(t);
                    std::thread::yield_now();
                    assert!(b.as_slice().iter().all(|x| *x == t), "buffer shared");
                }
            });
        }
    });
    assert_eq!(p.stats().in_use, 0);
    assert!(p.stats().high_water <= 4);
}

#[test]
fn bad_configurations_say_what_is_expected() {
    let backend = Arc::new(HostBackend::default());
    let e = Pool::new(PoolConfig::new(vec![]), backend.clone())
        .unwrap_err()
        .to_string();
    assert_eq!(e, "pool configuration: expected 1 to 256 size classes, found 0");
    let many = vec![
        ClassSpec {
            size_bytes: 64,
            count: 1
        };
        257
    ];
    let e = Pool::new(PoolConfig::new(many), backend.clone())
        .unwrap_err()
        .to_string();
    assert_eq!(e, "pool configuration: expected 1 to 256 size classes, found 257");
    let e = Pool::new(
        PoolConfig::new(vec![ClassSpec {
            size_bytes: usize::MAX,
            count: 1,
        }]),
        backend.clone(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("class 0: expected a buffer size of 1 to 1073741824 bytes"),
        "{e}"
    );
    let mut odd = PoolConfig::new(vec![ClassSpec {
        size_bytes: 64,
        count: 1,
    }]);
    odd.alignment_bytes = 96;
    let e = Pool::new(odd, backend.clone()).unwrap_err().to_string();
    assert!(e.contains("expected an alignment that is a power of two"), "{e}");
    let e = Pool::new(
        PoolConfig::new(vec![ClassSpec {
            size_bytes: 64,
            count: 0,
        }]),
        backend,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("pool configuration: class 0: expected 1 to 16777215 buffers, found 0"),
        "{e}"
    );
}
