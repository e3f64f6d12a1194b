//! Model checks of the free list's lock-free stack with loom: every interleaving of
//! concurrent pops and pushes (within loom's bounds) hands each index to one owner at a
//! time and loses none. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p xirang-memreg --test loom --target-dir target/loom`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use xirang_memreg::freelist::FreeList;

#[test]
fn two_threads_pop_and_push_without_sharing_or_losing() {
    loom::model(|| {
        let f = Arc::new(FreeList::full(2));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let f = f.clone();
                thread::spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..2 {
                        if let Some(i) = f.pop() {
                            got.push(i);
                        }
                    }
                    // Give one back, keep the rest.
                    if let Some(i) = got.pop() {
                        f.push(i);
                    }
                    got
                })
            })
            .collect();
        let kept: Vec<u32> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let mut rest: Vec<u32> = std::iter::from_fn(|| f.pop()).collect();
        rest.extend(&kept);
        rest.sort();
        assert_eq!(rest, vec![0, 1], "each index exactly once");
    });
}

#[test]
fn aba_pop_push_pop_against_a_stalled_pop() {
    // Thread A pops; thread B pops twice and pushes back the first: the head index A
    // read may be back on top with a different link, and the tag must make A retry.
    loom::model(|| {
        let f = Arc::new(FreeList::full(3));
        let a = {
            let f = f.clone();
            thread::spawn(move || f.pop())
        };
        let b = {
            let f = f.clone();
            thread::spawn(move || {
                let x = f.pop();
                let y = f.pop();
                if let Some(x) = x {
                    f.push(x);
                }
                y
            })
        };
        let mut all: Vec<u32> = [a.join().unwrap(), b.join().unwrap()]
            .into_iter()
            .flatten()
            .collect();
        all.extend(std::iter::from_fn(|| f.pop()));
        all.sort();
        assert_eq!(all, vec![0, 1, 2]);
    });
}
