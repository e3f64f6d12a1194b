#!/usr/bin/env bash
# Compares every output of two xirang binaries on the shipped scenarios: a structural
# change must leave the simulator's results byte-identical (issue 41's target).
#
#   scripts/compare-outputs.sh OLD_XIRANG NEW_XIRANG [--large] [--threads N] [--only TEXT]
#
# For each scenarios/**/*.toml: `xirang sim SCENARIO --out DIR` with each binary (and
# with `--threads N` too when given), every file of DIR compared byte for byte except
# the wall-clock fields of engine.json (wall_seconds and the two rates derived from it)
# and the wall-clock line of the run's report. Then `xirang diagnose suite --json` and
# `xirang nccl sweep` (8 B to 64 MiB, AllReduce, AllGather, ReduceScatter, Broadcast) on each nccl-tests scenario.
# The 8,192- and 16,384-GPU scenarios take 7 and 44 minutes each per binary: only with
# --large. Exits 1 at the end if anything differs, listing what.
set -euo pipefail

usage() {
    echo "usage: $0 OLD_XIRANG NEW_XIRANG [--large] [--threads N] [--only TEXT]" >&2
    exit 2
}
[ $# -ge 2 ] || usage
old=$(realpath "$1")
new=$(realpath "$2")
shift 2
large=0
threads=""
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --large) large=1 ;;
        --threads) threads="${2:?--threads needs a number}"; shift ;;
        --only) only="${2:?--only needs a text}"; shift ;;
        *) usage ;;
    esac
    shift
done
for b in "$old" "$new"; do
    [ -x "$b" ] || { echo "error: $b is not an executable" >&2; exit 2; }
done

cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"; rm -f scenarios/nccl-tests/.exact-*.toml' EXIT
differ=()

# Wall-clock figures are not results.
normalise_dir() {
    local d="$1"
    if [ -f "$d/engine.json" ]; then
        grep -vE '"(wall_seconds|events_per_second|packet_hops_per_second)"' "$d/engine.json" \
            > "$d/engine.json.norm" || true
        rm "$d/engine.json"
    fi
}
normalise_log() {
    grep -vE '^(simulated .* wall:|results in )' "$1" || true
}

run_sim() {
    local name="$1" scenario="$2"; shift 2
    local t0 t1
    for side in old new; do
        local bin="$old"
        [ "$side" = new ] && bin="$new"
        local out="$work/$name.$side"
        # Exact mode on both sides where the binary has it: fast-forward is on by
        # default for some runs since it was built, and its outputs are not the exact
        # run's by design (`xirang bench --fast-forward` compares those).
        local exact=()
        "$bin" sim --help 2>/dev/null | grep -q -- '--exact' && exact=(--exact)
        t0=$(date +%s.%N)
        if ! "$bin" sim "$scenario" --out "$out" "${exact[@]}" "$@" > "$out.log" 2>&1; then
            echo "  $side binary failed on $scenario $*: $(tail -1 "$out.log")" >&2
        fi
        t1=$(date +%s.%N)
        printf '  %s %s: %.1f s\n' "$side" "$name" "$(echo "$t1 - $t0" | bc)"
        [ -d "$out" ] && normalise_dir "$out"
        normalise_log "$out.log" > "$out.log.norm"
    done
    if ! diff -r "$work/$name.old" "$work/$name.new" > "$work/$name.diff" 2>&1 \
        || ! diff "$work/$name.old.log.norm" "$work/$name.new.log.norm" >> "$work/$name.diff" 2>&1; then
        differ+=("$name")
        head -20 "$work/$name.diff" >&2
    fi
}

while IFS= read -r scenario; do
    case "$scenario" in
        *rail-8192gpu*|*rail-16384gpu*) [ "$large" = 1 ] || { echo "skipped $scenario (--large)"; continue; } ;;
    esac
    [ -z "$only" ] || [[ "$scenario" == *"$only"* ]] || continue
    name=$(echo "${scenario#scenarios/}" | tr '/' '_')
    name="${name%.toml}"
    echo "$scenario"
    run_sim "$name" "$scenario"
    if [ -n "$threads" ]; then
        run_sim "$name.threads$threads" "$scenario" --threads "$threads"
    fi
done < <(find scenarios -name '*.toml' | sort)

if [ -z "$only" ] || [[ "diagnose-suite" == *"$only"* ]]; then
    echo "diagnose suite"
    "$old" diagnose suite --json > "$work/suite.old" 2>&1 || true
    "$new" diagnose suite --json > "$work/suite.new" 2>&1 || true
    cmp -s "$work/suite.old" "$work/suite.new" || { differ+=("diagnose suite"); diff "$work/suite.old" "$work/suite.new" | head -20 >&2 || true; }
fi

# The sweeps run exactly where both binaries know `[run] fast_forward` (those with
# `sim --exact`): a copy of the scenario with `fast_forward = false` in its `[run]`.
exact_copy() {
    local scenario="$1" copy="$2"
    if grep -q '^\[run\]' "$scenario"; then
        sed '/^\[run\]/a fast_forward = false' "$scenario" > "$copy"
    else
        { cat "$scenario"; printf '\n[run]\nfast_forward = false\n'; } > "$copy"
    fi
}
sweep_exact=0
"$old" sim --help 2>/dev/null | grep -q -- '--exact' && "$new" sim --help 2>/dev/null | grep -q -- '--exact' && sweep_exact=1

while IFS= read -r scenario; do
    [ -z "$only" ] || [[ "$scenario" == *"$only"* ]] || continue
    swept="$scenario"
    if [ "$sweep_exact" = 1 ]; then
        # Next to the original, so that the paths it names resolve alike.
        swept="$(dirname "$scenario")/.exact-$(basename "$scenario")"
        exact_copy "$scenario" "$swept"
    fi
    for op in all-reduce all-gather reduce-scatter broadcast; do
        echo "nccl sweep --op $op $scenario"
        name="sweep_$(basename "$scenario" .toml)_$op"
        for side in old new; do
            bin="$old"
            [ "$side" = new ] && bin="$new"
            "$bin" nccl sweep "$swept" -b 8 -e 64M -f 8 --op "$op" --json > "$work/$name.$side" 2>&1 || true
        done
        cmp -s "$work/$name.old" "$work/$name.new" || { differ+=("$name"); diff "$work/$name.old" "$work/$name.new" | head -20 >&2 || true; }
    done
    [ "$swept" = "$scenario" ] || rm -f "$swept"
done < <(find scenarios/nccl-tests -name '*.toml' | sort)

if [ ${#differ[@]} -gt 0 ]; then
    echo "DIFFERENT: ${differ[*]}"
    exit 1
fi
echo "identical: every output of both binaries"
