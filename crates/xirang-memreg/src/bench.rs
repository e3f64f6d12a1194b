//! `xirang memreg bench`: what a get+put pair costs against the alternatives, in one run
//! on one machine (issue 8's targets: under 20 ns single-threaded, no collapse at two
//! threads, at least 100x cheaper than registering per operation).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use crate::{ClassSpec, HostBackend, MemregError, Pool, PoolConfig};

/// One measured way of getting and putting back a buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What was measured.
    pub what: &'static str,
    /// Threads running it at once.
    pub threads: usize,
    /// Nanoseconds per get+put pair (per thread).
    pub ns_per_pair: f64,
}

/// Buffers in the benchmark's class (two threads never exhaust it).
const BENCH_BUFFERS: usize = 64;

fn per_pair(pairs: u64, f: impl Fn()) -> f64 {
    let t = Instant::now();
    for _ in 0..pairs {
        f();
    }
    t.elapsed().as_nanos() as f64 / pairs as f64
}

/// Runs `f` on `threads` threads at once, `pairs` times each; the mean per thread.
fn threaded(threads: usize, pairs: u64, f: &(dyn Fn() + Sync)) -> f64 {
    let start = std::sync::Barrier::new(threads);
    let times: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    per_pair(pairs, f)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("bench thread")).collect()
    });
    times.iter().sum::<f64>() / threads as f64
}

/// The pool's fast path: a thread's cache.
pub const POOL_CACHED: &str = "pool get+put (thread cache)";

/// Each of `threads` threads takes and returns buffers through its own cache.
fn cached(pool: &Pool, threads: usize, pairs: u64) -> f64 {
    let start = std::sync::Barrier::new(threads);
    let times: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let cache = pool.cache();
                    start.wait();
                    per_pair(pairs, || {
                        let b = cache.get_class(0).expect("a free buffer");
                        black_box(b.addr());
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("bench thread")).collect()
    });
    times.iter().sum::<f64>() / threads as f64
}

/// Measures the pool (through a thread cache and through the shared free list), malloc/free and a crossbeam `ArrayQueue` pool for buffers of
/// `size_bytes`, `pairs` pairs per thread, on 1 and 2 threads; and mlock/munlock of
/// one buffer per operation (`register_ops` times), what registering per operation
/// would cost on the host backend.
pub fn run(size_bytes: usize, pairs: u64, register_ops: u64) -> Result<Vec<Row>, MemregError> {
    let pool = Pool::new(
        PoolConfig::new(vec![ClassSpec {
            size_bytes,
            count: BENCH_BUFFERS,
        }]),
        Arc::new(HostBackend::default()),
    )?;
    let queue = crossbeam_queue::ArrayQueue::new(BENCH_BUFFERS);
    for i in 0..BENCH_BUFFERS {
        let _ = queue.push(i);
    }
    let pool_pair = || {
        let b = pool.get_class(0).expect("a free buffer");
        black_box(b.addr());
    };
    let malloc_pair = || {
        // SAFETY: malloc/free of a fresh block, freed once, never dereferenced.
        unsafe {
            let p = libc::malloc(size_bytes);
            black_box(p);
            libc::free(p);
        }
    };
    let queue_pair = || {
        let i = queue.pop().expect("a free index");
        black_box(i);
        let _ = queue.push(i);
    };
    let mut rows = Vec::new();
    for threads in [1, 2] {
        rows.push(Row {
            what: POOL_CACHED,
            threads,
            ns_per_pair: cached(&pool, threads, pairs),
        });
        rows.push(Row {
            what: "pool get+put (shared free list)",
            threads,
            ns_per_pair: threaded(threads, pairs, &pool_pair),
        });
        rows.push(Row {
            what: "malloc+free",
            threads,
            ns_per_pair: threaded(threads, pairs, &malloc_pair),
        });
        rows.push(Row {
            what: "crossbeam ArrayQueue pop+push",
            threads,
            ns_per_pair: threaded(threads, pairs, &queue_pair),
        });
    }
    // Registering per operation: pin and unpin a buffer's pages each time (an ordinary
    // allocation, so that the pool's own registration stays as it is).
    let buf = vec![1u8; size_bytes.max(1)];
    let (addr, len) = (buf.as_ptr() as usize, buf.len());
    let reg = per_pair(register_ops, || {
        // SAFETY: the range is `buf`'s, alive for the whole loop; locking and unlocking
        // it changes no contents.
        unsafe {
            black_box(libc::mlock(addr as *const libc::c_void, len));
            black_box(libc::munlock(addr as *const libc::c_void, len));
        }
    });
    drop(buf);
    rows.push(Row {
        what: "mlock+munlock per operation (host registration)",
        threads: 1,
        ns_per_pair: reg,
    });
    Ok(rows)
}
