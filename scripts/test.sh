#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs the Debian packages the tests
# need (scripts/install-test-deps.sh), then `cargo test --workspace`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-test-deps.sh
cargo test --workspace "$@"
