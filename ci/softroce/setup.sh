#!/usr/bin/env bash
# Host side of the Soft-RoCE test bed (docs/reference/softroce-testbed.md): installs the
# Debian packages it needs (idempotent; never removes a package: qemu comes from
# bookworm-backports to match the machine's qemu-utils) and fetches Debian's kernel
# package without installing it. Everything it writes goes under $WORK.
set -euo pipefail
WORK=${WORK:-"$(cd "$(dirname "$0")/../.." && pwd)/target/softroce"}
mkdir -p "$WORK/apt/lists/partial" "$WORK/kernel"

# A private source list: bookworm and bookworm-backports, without touching /etc/apt.
cat > "$WORK/apt/sources.list" <<'LIST'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-backports main
LIST
APT=(apt-get -q -o "Dir::Etc::sourcelist=$WORK/apt/sources.list" -o "Dir::Etc::sourceparts=-"
     -o "Dir::State::lists=$WORK/apt/lists" -o APT::Get::List-Cleanup=0)

need=()
for p in busybox-static kmod cpio iproute2 binutils ibverbs-utils rdmacm-utils perftest libibverbs1 \
         ibverbs-providers librdmacm1 qemu-system-x86; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ! -f "$WORK/apt/updated" ] || [ ${#need[@]} -gt 0 ]; then
    timeout 300 "${APT[@]}" update
    touch "$WORK/apt/updated"
fi
base=()
qemu=()
for p in "${need[@]}"; do
    if [ "$p" = qemu-system-x86 ]; then qemu+=("$p"); else base+=("$p"); fi
done
export DEBIAN_FRONTEND=noninteractive
if [ ${#base[@]} -gt 0 ]; then
    echo "softroce: installing ${base[*]}" >&2
    timeout 600 "${APT[@]}" install -y --no-install-recommends --no-remove "${base[@]}"
fi
if [ ${#qemu[@]} -gt 0 ]; then
    # qemu from bookworm-backports with its dependencies, matching the machine's
    # backports qemu-utils: a bookworm qemu would make apt remove it (testbed pitfall 1).
    echo "softroce: installing qemu-system-x86 from bookworm-backports" >&2
    timeout 600 "${APT[@]}" install -y --no-install-recommends --no-remove -t bookworm-backports qemu-system-x86
fi

# The kernel package, fetched and unpacked (never installed): the guest's kernel and
# the modules Soft-RoCE needs.
resolve() { apt-cache "${APT[@]:1}" depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
kpkg=$(resolve)
[ -n "$kpkg" ] || { echo "softroce: cannot resolve linux-image-amd64" >&2; exit 1; }
if [ ! -f "$WORK/kernel/$kpkg.done" ]; then
    rm -rf "$WORK/kernel/root"
    # A stale list may name a kernel the mirror has dropped: refresh once and retry.
    if ! (cd "$WORK/kernel" && timeout 300 "${APT[@]}" download "$kpkg"); then
        timeout 300 "${APT[@]}" update
        kpkg=$(resolve)
        (cd "$WORK/kernel" && timeout 300 "${APT[@]}" download "$kpkg")
    fi
    deb=$(ls "$WORK/kernel/${kpkg}"_*.deb | head -1)
    mkdir -p "$WORK/kernel/root"
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$WORK/kernel/root" \
        --wildcards './boot/vmlinuz-*' './lib/modules/*/kernel/drivers/infiniband' \
        './lib/modules/*/kernel/drivers/net' './lib/modules/*/kernel/net' \
        './lib/modules/*/kernel/crypto' './lib/modules/*/kernel/fs/configfs' \
        './lib/modules/*/kernel/lib' './lib/modules/*/modules.*'
    touch "$WORK/kernel/$kpkg.done"
fi
echo "$kpkg" > "$WORK/kernel/current"
