#!/usr/bin/env bash
# Runs the cargo-fuzz targets (fuzz/targets.rs: every parser of outside input and the
# scenario loader, with the simulator behind it) for SECONDS each, one after the other,
# and prints a table of executions, coverage and crashes per target.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     # default: 600 s each, every target
#
# Not part of README's test command: ten minutes per target is an afternoon on two
# cores. The seeds (fuzz/seeds/TARGET) are read, never written; what the fuzzer finds
# goes to target/fuzz-corpus/TARGET (kept between runs). A crash is written to
# fuzz/artifacts/TARGET/ and the run of that target stops there: fix it, copy the input
# into fuzz/regressions/TARGET/ (the normal suite replays every file there through the
# same body, crates/xirang/tests/it/fuzz_inputs.rs) and run the target again.
#
# Installs what it needs if missing: the nightly toolchain (rustup) and cargo-fuzz
# (`cargo install cargo-fuzz --locked`, from crates.io).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
[ "$#" -gt 0 ] && shift
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "installing the nightly toolchain (rustup)..."
    rustup toolchain install nightly --profile minimal > /dev/null
fi
if ! cargo fuzz --version > /dev/null 2>&1; then
    echo "installing cargo-fuzz (cargo install cargo-fuzz --locked)..."
    cargo install cargo-fuzz --locked > /dev/null
fi
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^xirang-fuzz$')
fi
cargo +nightly fuzz build -O --fuzz-dir fuzz
mkdir -p target/fuzz-logs
summary=target/fuzz-logs/summary.md
{
    echo "| target | seconds | executions | exec/s | coverage (edges) | features | corpus | crashes |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} > "$summary"
status=0
for t in "${targets[@]}"; do
    corpus="target/fuzz-corpus/$t"
    mkdir -p "$corpus" "fuzz/artifacts/$t"
    log="target/fuzz-logs/$t.log"
    echo "fuzzing $t for ${secs}s (log: $log)"
    crashed=0
    # -timeout: a scenario may legitimately build a million-port fabric, which takes
    # seconds; an input taking longer than this is reported as a hang.
    cargo +nightly fuzz run -O --fuzz-dir fuzz "$t" "$corpus" "fuzz/seeds/$t" -- \
        -max_total_time="$secs" -timeout=60 -rss_limit_mb=6144 -print_final_stats=1 \
        -artifact_prefix="fuzz/artifacts/$t/" > "$log" 2>&1 || crashed=1
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    corp=$(echo "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
    crashes=$(find "fuzz/artifacts/$t" -type f | wc -l)
    echo "| $t | $secs | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $crashes |" >> "$summary"
    if [ "$crashed" = 1 ]; then
        echo "  $t stopped early: see $log and fuzz/artifacts/$t/" >&2
        status=1
    fi
done
cat "$summary"
exit "$status"
