#!/usr/bin/env bash
# The memory pool's unsafe code under Miri (issue 8): crates/xirang-memreg/tests/miri.rs
# exercises every unsafe block Miri can run (regions, buffers through both handles, the
# free list and the caches on two threads), and the crate's unit tests run too; Miri's
# interpreter stops at undefined behaviour (out-of-bounds or dangling access, data
# races, misaligned or provenance-less pointers). Installs the nightly toolchain's miri
# and rust-src components with rustup if they are missing. What Miri cannot run, it
# cannot check: C library calls. mlock is skipped under cfg(miri) (the normal test run
# calls it), getrlimit and the benchmark's malloc/free are not run, and the verbs FFI
# runs against real rxe devices in the Soft-RoCE guest instead. The property tests run
# under Miri by hand (proptest looks up the working directory, which isolation forbids):
# MIRIFLAGS=-Zmiri-disable-isolation cargo +nightly miri test -p xirang-memreg --test pool --test cache
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo +nightly miri --version > /dev/null 2>&1; then
    echo "installing the nightly toolchain's miri and rust-src (rustup)..."
    rustup toolchain install nightly --profile minimal --component miri,rust-src > /dev/null ||
        { echo "error: cannot install Miri (rustup toolchain install nightly --component miri,rust-src)" >&2; exit 1; }
fi
rustup component add --toolchain nightly miri rust-src > /dev/null 2>&1 || true
cargo +nightly miri test -p xirang-memreg --lib --test miri
