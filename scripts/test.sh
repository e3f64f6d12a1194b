#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs the Debian packages the tests
# need (scripts/install-test-deps.sh), then `cargo test --workspace`, then the MPI runs of
# the real binary (scripts/install-mpi.sh, then the `mpi` test target built with
# `--features mpi`: `mpirun -np 2` and `-np 4` against the serial run), then the memory
# pool's lock-free free list model-checked with loom (its own target directory:
# `--cfg loom` changes every crate's flags), then the pool's unsafe code under Miri
# (scripts/miri.sh), then the Soft-RoCE test bed: real verbs on rxe devices in a qemu guest, the project's host
# reader and its registered buffer pool on them (ci/softroce/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-test-deps.sh
cargo test --workspace "$@"
./scripts/install-mpi.sh
cargo test -p xirang --features mpi --test mpi "$@"
RUSTFLAGS="--cfg loom" cargo test -p xirang-memreg --test loom --target-dir target/loom
./scripts/miri.sh
XIRANG_BIN=target/debug/xirang ./ci/softroce/run.sh
