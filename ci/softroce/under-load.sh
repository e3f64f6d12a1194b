#!/usr/bin/env bash
# The Soft-RoCE test bed with every core of the host busy: stress-ng (Debian package,
# installed if missing) runs one CPU worker per core beside run.sh, so the guest's
# emulated CPUs get a share of a loaded machine, as on a busy CI runner. Arguments go to
# run.sh. VALIDATION.md records a run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v stress-ng > /dev/null 2>&1 || "$here/../../scripts/apt-install.sh" "the loaded test bed" stress-ng
cores=$(nproc)
stress-ng --cpu "$cores" --cpu-method matrixprod --timeout 3600s --quiet &
load=$!
trap 'kill $load 2>/dev/null; wait $load 2>/dev/null' EXIT
sleep 2
echo "softroce: $cores stress-ng CPU workers running beside the guest; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
set +e
VM_TIMEOUT_S=${VM_TIMEOUT_S:-900} "$here/run.sh" "$@"
rc=$?
set -e
echo "softroce: load at the end $(cut -d' ' -f1-3 /proc/loadavg); exit $rc" >&2
exit "$rc"
