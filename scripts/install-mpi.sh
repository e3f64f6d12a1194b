#!/usr/bin/env bash
# Installs what `--features mpi` needs (Debian packages): OpenMPI's headers and library
# (libopenmpi-dev), mpirun (openmpi-bin), libclang for the bindings' generator
# (libclang-dev) and pkg-config, which finds OpenMPI. Skips what is already there; never
# removes anything.
set -euo pipefail
missing=()
command -v mpirun > /dev/null 2>&1 || missing+=(openmpi-bin)
[ -f /usr/lib/x86_64-linux-gnu/pkgconfig/ompi.pc ] || [ -n "$(find /usr/lib -name 'ompi*.pc' -print -quit 2> /dev/null)" ] || missing+=(libopenmpi-dev)
[ -n "$(find /usr/lib -name 'libclang*.so*' -print -quit 2> /dev/null)" ] || missing+=(libclang-dev)
command -v pkg-config > /dev/null 2>&1 || missing+=(pkg-config)
[ "${#missing[@]}" -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo > /dev/null 2>&1 || { echo "error: ${missing[*]} missing and installing needs root (apt-get install -y ${missing[*]})" >&2; exit 1; }
    SUDO=sudo
fi
echo "installing ${missing[*]} (Debian packages) for MPI..."
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" > /dev/null || {
    $SUDO apt-get update > /dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" > /dev/null
}
