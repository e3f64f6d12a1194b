#![cfg(not(loom))]
//! Per-thread caches over a pool: a buffer is never out twice (through caches or the
//! pool directly), every buffer returns when the caches drop, the pool's exhaustion
//! policy still decides when both the magazine and the free list are empty, and threads
//! with their own caches never share a buffer.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use xirang_memreg::cache::MAGAZINE;
use xirang_memreg::{ClassSpec, Exhaustion, HostBackend, MemregError, Pool, PoolConfig};

fn pool(count: usize, exhaustion: Exhaustion) -> Pool {
    let mut c = PoolConfig::new(vec![
        ClassSpec {
            size_bytes: 256,
            count,
        },
        ClassSpec {
            size_bytes: 8192,
            count,
        },
    ]);
    c.exhaustion = exhaustion;
    Pool::new(c, Arc::new(HostBackend::default())).unwrap()
}

fn exhausted(e: &MemregError) -> bool {
    matches!(e, MemregError::Exhausted { .. })
}

/// Property cases and thread rounds: far fewer under Miri, which interprets every step
/// (the test command runs tests/miri.rs under it; these files run under it by hand, see
/// scripts/miri.sh).
const CASES: u32 = if cfg!(miri) { 4 } else { 64 };
const ROUNDS: usize = if cfg!(miri) { 30 } else { 2000 };
const OPS: usize = if cfg!(miri) { 40 } else { 400 };
/// Up to 300 buffers a class: magazines of every capacity up to the largest (32).
const MAX_COUNT: usize = if cfg!(miri) { 40 } else { 300 };

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Random gets and drops through two caches and the pool itself: the addresses out
    /// at any time are distinct, the counters agree, and after the caches drop every
    /// buffer is back in the pool.
    #[test]
    fn caches_never_hand_out_a_buffer_twice_and_all_return(
        count in 1usize..MAX_COUNT,
        ops in prop::collection::vec((0u8..3, 0usize..2, any::<bool>(), any::<u16>()), 1..OPS),
    ) {
        let p = pool(count, Exhaustion::FailFast);
        {
            let caches = [p.cache(), p.cache()];
            let mut out_cached = Vec::new();
            let mut out_direct = Vec::new();
            for (who, class, take, pick) in ops {
                if take {
                    match who {
                        2 => match p.get_class(class) {
                            Ok(b) => out_direct.push(b),
                            Err(e) => prop_assert!(exhausted(&e), "{}", e),
                        },
                        w => match caches[w as usize].get_class(class) {
                            Ok(b) => out_cached.push(b),
                            Err(e) => prop_assert!(exhausted(&e), "{}", e),
                        },
                    }
                } else if who == 2 && !out_direct.is_empty() {
                    let i = pick as usize % out_direct.len();
                    out_direct.swap_remove(i);
                } else if !out_cached.is_empty() {
                    let i = pick as usize % out_cached.len();
                    out_cached.swap_remove(i);
                }
                let addrs: BTreeSet<usize> = out_cached.iter().map(|b| b.addr())
                    .chain(out_direct.iter().map(|b| b.addr())).collect();
                prop_assert_eq!(addrs.len(), out_cached.len() + out_direct.len(), "a buffer out twice");
                let held: usize = caches.iter().map(|c| c.stats().in_use).sum();
                prop_assert_eq!(held, out_cached.len());
                let parked: usize = caches.iter().map(|c| c.cached()).sum();
                prop_assert_eq!(p.stats().in_use, out_cached.len() + out_direct.len() + parked);
                prop_assert!(p.stats().in_use <= 2 * count);
            }
        }
        prop_assert_eq!(p.stats().in_use, 0);
        // Every buffer can be taken again, directly.
        let all: Vec<_> = (0..count).flat_map(|_| [p.get_class(0).unwrap(), p.get_class(1).unwrap()]).collect();
        prop_assert_eq!(all.len(), 2 * count);
    }
}

#[test]
fn an_empty_magazine_and_free_list_follow_the_pools_policy() {
    let p = pool(8, Exhaustion::FailFast);
    let c = p.cache();
    let held: Vec<_> = (0..8).map(|_| c.get_class(0).unwrap()).collect();
    assert!(matches!(
        c.get_class(0),
        Err(MemregError::Exhausted { class: 0, .. })
    ));
    assert_eq!(p.stats().failures, 1);
    drop(held);
    // A class of 8 lets a magazine keep 1 (an eighth): the next get is served from it.
    assert_eq!(c.cached(), 1);
    let before = c.stats();
    let again = c.get_class(0).unwrap();
    assert_eq!(c.stats().hits, before.hits + 1);
    drop(again);
    // Parked there, it is invisible to the pool until flushed.
    let direct: Vec<_> = (0..7).map(|_| p.get_class(0).unwrap()).collect();
    assert!(p.get_class(0).is_err());
    c.flush();
    assert_eq!(c.cached(), 0);
    assert!(p.get_class(0).is_ok());
    drop(direct);

    // By size: the smallest class that holds it, or an error naming the largest.
    assert_eq!(c.get(300).unwrap().class(), 1);
    assert!(matches!(
        c.get(1 << 20),
        Err(MemregError::TooLarge { largest: 8192, .. })
    ));

    // A class of under 4 buffers is never parked: all of it stays in the free list.
    let tiny = pool(3, Exhaustion::FailFast);
    let tc = tiny.cache();
    drop(tc.get_class(0).unwrap());
    assert_eq!(tc.cached(), 0);
    let all: Vec<_> = (0..3).map(|_| tiny.get_class(0).unwrap()).collect();
    drop(all);

    let g = pool(2, Exhaustion::Grow);
    let gc = g.cache();
    let held: Vec<_> = (0..3).map(|_| gc.get_class(1).unwrap()).collect();
    assert_eq!(g.stats().grows, 1, "the third buffer needed one more region");
    drop(held);

    let w = pool(1, Exhaustion::Wait(Duration::from_millis(20)));
    let wc = w.cache();
    let _b = wc.get_class(0).unwrap();
    assert!(wc.get_class(0).is_err());
    assert_eq!(w.stats().waits, 1);
}

#[test]
fn a_full_magazine_flushes_half_back_to_the_pool() {
    // 256 buffers: a magazine of 32 (an eighth), refilled 16 at a time.
    let p = pool(8 * MAGAZINE, Exhaustion::FailFast);
    let c = p.cache();
    let held: Vec<_> = (0..40).map(|_| c.get_class(0).unwrap()).collect();
    // 40 gets: 3 refills of 16 (one handed out, 15 parked each), 8 ids left parked.
    assert_eq!(c.stats().refills, 3);
    assert_eq!(c.cached(), 8);
    drop(held);
    // 24 returns fill the magazine to 32; the 25th moves half (16) back first, and the
    // last 15 fill it to 32 again.
    assert_eq!(c.stats().flushes, 1);
    assert_eq!(c.cached(), MAGAZINE);
    assert_eq!(p.stats().in_use, MAGAZINE);
    drop(c);
    assert_eq!(p.stats().in_use, 0);
}

#[test]
fn all_caches_together_park_at_most_a_quarter_of_a_class() {
    let p = pool(64, Exhaustion::FailFast);
    let caches: Vec<_> = (0..8).map(|_| p.cache()).collect();
    for c in &caches {
        let held: Vec<_> = (0..8).map(|_| c.get_class(0).unwrap()).collect();
        drop(held);
    }
    let parked: usize = caches.iter().map(|c| c.cached()).sum();
    assert!(parked <= 64 / 4, "{parked} parked");
    // The rest is in the shared free list, for anyone.
    let direct: Vec<_> = (0..64 - parked).map(|_| p.get_class(0).unwrap()).collect();
    assert_eq!(direct.len(), 64 - parked);
    drop(direct);
    // Dropped caches give their capacity back: a new one can park again.
    drop(caches);
    let c = p.cache();
    let b = c.get_class(0).unwrap();
    drop(b);
    assert!(c.cached() >= 1);
}

#[test]
fn threads_with_their_own_caches_never_share_a_buffer() {
    let p = pool(16, Exhaustion::Wait(Duration::from_secs(5)));
    std::thread::scope(|s| {
        for t in 1..=2u8 {
            let p = &p;
            s.spawn(move || {
                let c = p.cache();
                for round in 0..ROUNDS {
                    let mut bufs: Vec<_> = (0..(1 + round % 7)).map(|_| c.get_class(0).unwrap()).collect();
                    for b in &mut bufs {
                        b.as_mut_slice().fill(t);
                    }
                    std::thread::yield_now();
                    for b in &bufs {
                        assert!(
                            b.as_slice().iter().all(|&x| x == t),
                            "thread {t} saw another's bytes"
                        );
                    }
                    if round % 97 == 0 {
                        drop(bufs);
                        c.flush();
                    }
                }
            });
        }
    });
    assert_eq!(p.stats().in_use, 0);
}
