#!/bin/sh
# Xirang tune recommendation for scenario `default`: DCQCN settings for mlx5 NICs (sysfs of the MLNX_OFED driver)
# 1 setting(s) of candidate 49, each significantly worse to revert; +16.0 % [+11.4, +20.4] better than the vendor defaults on 16 held-out seeds (95 % interval), every guardrail kept
#
# What it changes, on each interface given: /sys/class/net/IF/ecn/roce_rp/* and roce_np/*
# (the DCQCN parameters of class `inference`; mlx5 keeps one set per port), and
# roce_rp/enable/P, roce_np/enable/P = 1 for the DCQCN classes' priorities: 4 (inference), 3 (training).
#
# Usage:  mlx5-congestion.sh IF...            dry run: prints every change, writes nothing
#         mlx5-congestion.sh --apply IF...    writes; saves the previous values first
#         mlx5-congestion.sh --rollback FILE  writes back the values saved in FILE
# Roll back: --apply saves every value it replaces to mlx5-congestion.rollback (or
# $XIRANG_ROLLBACK) before writing; run --rollback with that file. It refuses to overwrite
# an existing rollback file, and refuses an interface without ecn/roce_rp and ecn/roce_np
# (not an mlx5 physical function under MLNX_OFED).
# The values take effect at once and last until reboot; mlxconfig makes them permanent.

set -eu
SYSFS="${XIRANG_SYSFS:-/sys}"
ROLLBACK="${XIRANG_ROLLBACK:-mlx5-congestion.rollback}"
if [ "${1:-}" != "--rollback" ]; then
LC_ALL=C
export LC_ALL
valid_if() {
    case $1 in
        ''|-*|.*|*[!A-Za-z0-9_.@+-]*) return 1 ;;
    esac
    [ "${#1}" -le 15 ]
}
first=${1:-}
for IF in "$@"; do
    if [ "$first" = --apply ]; then first=; continue; fi
    first=
    valid_if "$IF" || { printf 'error: %s is not an interface name (expected 1-15 letters, digits or _ . - @ +, not starting with - or .)\n' "$IF" | tr -c '[:print:]\n' '?' >&2; exit 2; }
done
fi

# knob directory, file, value
KNOBS='
roce_rp rpg_time_reset 300
roce_rp rpg_byte_reset 32767
roce_rp rpg_threshold 1
roce_rp rpg_max_rate 0
roce_rp rpg_ai_rate 1
roce_rp rpg_hai_rate 50
roce_rp rpg_gd 11
roce_rp rpg_min_dec_fac 50
roce_rp rpg_min_rate 1
roce_rp rate_to_set_on_first_cnp 0
roce_rp dce_tcp_g 1019
roce_rp dce_tcp_rtt 1
roce_rp rate_reduce_monitor_period 4
roce_rp initial_alpha_value 1023
roce_rp clamp_tgt_rate 0
roce_rp clamp_tgt_rate_after_time_inc 1
roce_np min_time_between_cnps 0
roce_np cnp_dscp 48
roce_np cnp_802p_prio 6
roce_rp enable/4 1
roce_np enable/4 1
roce_rp enable/3 1
roce_np enable/3 1
'

usage() {
    echo "usage: $0 [--apply] IF... | --rollback FILE" >&2
    exit 2
}

if [ "${1:-}" = "--rollback" ]; then
    [ $# -eq 2 ] || usage
    [ -r "$2" ] || { echo "error: cannot read rollback file $2" >&2; exit 2; }
    while IFS='	' read -r path value; do
        [ -n "$path" ] || continue
        # Only the knob files this script writes: a rollback file is data, not a list of
        # paths to overwrite anywhere.
        case $path in
            *..*) echo "error: $2: $path is not a knob path" >&2; exit 2 ;;
            "$SYSFS"/class/net/*/ecn/roce_rp/*|"$SYSFS"/class/net/*/ecn/roce_np/*) ;;
            *) echo "error: $2: $path is not under $SYSFS/class/net/IF/ecn" >&2; exit 2 ;;
        esac
        [ -w "$path" ] || { echo "error: $path is not writable" >&2; exit 1; }
        printf '%s\n' "$value" > "$path"
        echo "restored $path = $value"
    done < "$2"
    exit 0
fi

APPLY=0
if [ "${1:-}" = "--apply" ]; then
    APPLY=1
    shift
fi
[ $# -ge 1 ] || usage

# Check every interface and file before touching any.
for IF in "$@"; do
    for d in roce_rp roce_np; do
        [ -d "$SYSFS/class/net/$IF/ecn/$d" ] || {
            echo "error: $SYSFS/class/net/$IF/ecn/$d does not exist: $IF is not an mlx5 PF under MLNX_OFED" >&2
            exit 2
        }
    done
    while read -r dir file value; do
        [ -n "$dir" ] || continue
        [ -e "$SYSFS/class/net/$IF/ecn/$dir/$file" ] || {
            echo "error: $SYSFS/class/net/$IF/ecn/$dir/$file does not exist (older driver?)" >&2
            exit 2
        }
    done <<EOF
$KNOBS
EOF
done

if [ "$APPLY" = 1 ]; then
    [ ! -e "$ROLLBACK" ] || { echo "error: $ROLLBACK exists; move it away first (it may be the only copy of older values)" >&2; exit 2; }
    : > "$ROLLBACK"
fi
for IF in "$@"; do
    while read -r dir file value; do
        [ -n "$dir" ] || continue
        path="$SYSFS/class/net/$IF/ecn/$dir/$file"
        old=$(cat "$path")
        if [ "$APPLY" = 1 ]; then
            printf '%s\t%s\n' "$path" "$old" >> "$ROLLBACK"
            printf '%s\n' "$value" > "$path"
            echo "$IF $dir/$file: $old -> $value"
        else
            echo "$IF $dir/$file: $old -> $value (dry run)"
        fi
    done <<EOF
$KNOBS
EOF
done
[ "$APPLY" = 1 ] && echo "previous values saved to $ROLLBACK" || echo "dry run: nothing written; pass --apply to write"
