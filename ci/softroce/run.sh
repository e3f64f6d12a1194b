#!/usr/bin/env bash
# The Soft-RoCE test bed in one command: installs what it needs (setup.sh), builds the
# project's binary (unless XIRANG_BIN names one) and the guest image
# (build-initramfs.sh), boots a qemu guest
# under software emulation (TCG: no KVM, no network device; docs/reference/softroce-testbed.md),
# runs the guest's tests and returns their exit code. The guest's
# console is in target/softroce/out/console.txt, its data (test logs, counter snapshots
# after each test) in target/softroce/out/guest-data.txt. A guest that hangs or dies
# without its result marker fails the run (99).
#
# Usage: run.sh [TEST...]   (no names: every test; setup always runs first; an unknown
# name fails the run, listing the known ones)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
export WORK="$top/target/softroce"
VM_TIMEOUT_S=${VM_TIMEOUT_S:-300}
for t in "$@"; do
    case $t in *[!a-z0-9_]*) echo "softroce: bad test name '$t' (expected [a-z0-9_])" >&2; exit 2 ;; esac
done
tests=$(IFS=,; echo "$*")

"$here/setup.sh"
# XIRANG_BIN: a binary already built (the test command passes the one
# `cargo test --workspace` has just built); otherwise build it.
bin=${XIRANG_BIN:-}
if [ -z "$bin" ]; then
    (cd "$top" && cargo build -q -p xirang)
    bin="$top/target/debug/xirang"
fi
[ -x "$bin" ] || { echo "softroce: no xirang binary at $bin" >&2; exit 1; }
"$here/build-initramfs.sh" "$bin"
out="$WORK/out"
rm -rf "$out"
mkdir -p "$out"
echo "softroce: booting the guest (TCG, timeout ${VM_TIMEOUT_S} s)" >&2
set +e
timeout --kill-after=10 "$VM_TIMEOUT_S" qemu-system-x86_64 -machine q35 -accel tcg -cpu max -m 2G -smp 2 \
    -display none -monitor none -no-reboot -nodefaults \
    -serial "file:$out/console.txt" -serial "file:$out/guest-data.txt" \
    -kernel "$WORK/vmlinuz" -initrd "$WORK/initramfs.cpio.gz" \
    -append "console=ttyS0 quiet loglevel=4 panic=-1 oops=panic xirang.tests=$tests"
vm=$?
set -e
touch "$out/console.txt"
grep '^softroce:' "$out/console.txt" >&2 || true
rc=$(sed -n 's/^SOFTROCE-EXIT \([0-9]*\).*/\1/p' "$out/console.txt" | tail -1)
if [ -z "$rc" ]; then
    if [ "$vm" -eq 124 ] || [ "$vm" -eq 137 ]; then
        echo "softroce: the guest did not finish within ${VM_TIMEOUT_S} s (hung); console: $out/console.txt" >&2
    else
        echo "softroce: the guest stopped (qemu exit $vm) without a result; console: $out/console.txt" >&2
    fi
    exit 99
fi
exit "$rc"
