#!/usr/bin/env bash
# `scripts/apt-install.sh WHAT PACKAGE...`: installs Debian packages for WHAT (said in the
# message), as root or through sudo, refreshing the package lists once if the first try
# fails. Never removes anything. The install-* scripts decide what is missing.
set -euo pipefail
what=$1
shift
[ "$#" -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo > /dev/null 2>&1 || { echo "error: $* missing and installing needs root (apt-get install -y $*)" >&2; exit 1; }
    SUDO=sudo
fi
echo "installing $* (Debian packages) for $what..." >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" > /dev/null || {
    $SUDO apt-get update > /dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" > /dev/null
}
