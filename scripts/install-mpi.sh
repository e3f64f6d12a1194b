#!/usr/bin/env bash
# Installs what `--features mpi` needs (Debian packages): OpenMPI's headers and library
# (libopenmpi-dev), mpirun (openmpi-bin), libclang for the bindings' generator
# (libclang-dev) and pkg-config, which finds OpenMPI. Skips what is already there; never
# removes anything.
set -euo pipefail
missing=()
command -v mpirun > /dev/null 2>&1 || missing+=(openmpi-bin)
[ -f /usr/lib/x86_64-linux-gnu/pkgconfig/ompi.pc ] || [ -n "$(find /usr/lib -name 'ompi*.pc' -print -quit 2> /dev/null)" ] || missing+=(libopenmpi-dev)
# libclang itself: libclang-cpp (the C++ interface, which other packages pull in) and
# libclang_rt are not what the bindings' generator loads.
[ -n "$(find /usr/lib \( -name 'libclang.so*' -o -name 'libclang-[0-9]*.so*' \) -print -quit 2> /dev/null)" ] || missing+=(libclang-dev)
command -v pkg-config > /dev/null 2>&1 || missing+=(pkg-config)
"$(dirname "$0")/apt-install.sh" "MPI" "${missing[@]}"
