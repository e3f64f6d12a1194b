#!/usr/bin/env bash
# Builds the guest's initramfs: the Soft-RoCE kernel modules from the fetched kernel
# package, the host's own rdma-core userland and tools (with their libraries), busybox
# for the rest, the project's binary, and the guest test script as /init.
# Usage: build-initramfs.sh XIRANG_BINARY
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-"$here/../../target/softroce"}
xirang=${1:?usage: build-initramfs.sh XIRANG_BINARY}
root="$WORK/kernel/root"
kver=$(ls "$root/lib/modules" | head -1)
img="$WORK/image"
rm -rf "$img"
mkdir -p "$img"/{bin,sbin,etc,proc,sys,dev,tmp,run,lib64,usr/bin,usr/sbin,out}
depmod -b "$root" "$kver"

# Modules and what they depend on (testbed step 2).
deps="$WORK/module-deps.txt"
: > "$deps"
for m in crc32_generic configfs rdma_rxe ib_uverbs rdma_ucm ib_umad dummy veth; do
    modprobe -d "$root" -S "$kver" --show-depends "$m" > "$deps.one" ||
        { echo "softroce: module $m is not in kernel $kver" >&2; exit 1; }
    awk '$1 == "insmod" {print $2}' "$deps.one" >> "$deps"
done
sort -u "$deps" | while read -r ko; do
    rel=${ko#"$root"/}
    mkdir -p "$img/$(dirname "$rel")"
    cp "$ko" "$img/$rel"
done
cp "$root/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$img/lib/modules/$kver/" 2>/dev/null || true
depmod -b "$img" "$kver"
cp "$root"/boot/vmlinuz-* "$WORK/vmlinuz"

# A file and every library it loads, symlink chains kept.
copy() {
    local f
    for f in "$@"; do
        mkdir -p "$img/$(dirname "$f")"
        cp -aL "$f" "$img/$f"
        { ldd "$f" 2>/dev/null || true; } | awk '/=> \// {print $3} /^\t\/lib/ {print $1}' | while read -r lib; do
            [ -e "$img/$lib" ] || { mkdir -p "$img/$(dirname "$lib")"; cp -aL "$lib" "$img/$lib"; }
        done
    done
}
copy /usr/bin/dash /usr/bin/timeout /usr/sbin/ip /usr/bin/rdma /usr/bin/kmod \
     /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/ibv_ud_pingpong \
     /usr/bin/ib_write_bw /usr/bin/ib_read_bw \
     /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
mkdir -p "$img/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$img/etc/libibverbs.d/"
# The project's binary, stripped, with its libraries.
strip -o "$img/usr/bin/xirang" "$xirang"
copy_libs() {
    { ldd "$1" 2>/dev/null || true; } | awk '/=> \// {print $3} /^\t\/lib/ {print $1}' | while read -r lib; do
        [ -e "$img/$lib" ] || { mkdir -p "$img/$(dirname "$lib")"; cp -aL "$lib" "$img/$lib"; }
    done
}
copy_libs "$img/usr/bin/xirang"
# dash as /bin/sh, kmod as modprobe: busybox's applets would shadow them (pitfall 2).
ln -sf /usr/bin/dash "$img/bin/sh"
for t in modprobe lsmod insmod; do ln -sf /usr/bin/kmod "$img/sbin/$t"; done
cp /usr/bin/busybox "$img/bin/busybox"
for a in mount umount sleep cat grep sed awk ls mkdir echo poweroff sysctl head tail wc tr cut seq date wget; do
    [ -e "$img/bin/$a" ] || [ -e "$img/usr/bin/$a" ] || ln -sf busybox "$img/bin/$a"
done
cp "$here/guest/init" "$img/init"
chmod +x "$img/init"
(cd "$img" && find . | cpio -o -H newc --quiet | gzip -1) > "$WORK/initramfs.cpio.gz"
echo "initramfs: $(du -h "$WORK/initramfs.cpio.gz" | cut -f1), kernel $kver" >&2
