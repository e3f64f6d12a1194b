#!/usr/bin/env bash
# The input probe, longer than CI's: every command that reads a file, on mutations of its
# fixture (tests/it/probe.rs), under a 2 GB address-space limit and a timeout. CI runs
# seed 44 with 12 mutations per fixture; this runs more seeds and more mutations.
#   scripts/probe-inputs.sh [SEEDS] [BUDGET]      (default: 5 seeds of 60 mutations)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-5}
budget=${2:-60}
cargo test -p xirang --test it --no-run
for seed in $(seq 1 "$seeds"); do
    PROBE_SEED=$seed PROBE_BUDGET=$budget cargo test -q -p xirang --test it probe:: -- --nocapture 2>&1 |
        grep -E '^probe:|accepted|exit|killed|panicked|refused|test result'
done
