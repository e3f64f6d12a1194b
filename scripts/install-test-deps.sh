#!/usr/bin/env bash
# Installs what the tests need that Cargo does not: Debian's chromium (renders the tune
# report in a headless test), prometheus (scrapes the monitoring agent in an integration
# test), openssl and curl (make a test CA and certificate, and probe the agent's TLS and
# basic auth) and libibverbs-dev (its verbs.h is what crates/xirang-memreg/tests/verbs_abi.rs
# checks the hand-written verbs layouts against). Skips what is already there; never removes anything.
set -euo pipefail
missing=()
command -v chromium > /dev/null 2>&1 || missing+=(chromium)
command -v prometheus > /dev/null 2>&1 || missing+=(prometheus)
command -v openssl > /dev/null 2>&1 || missing+=(openssl)
command -v curl > /dev/null 2>&1 || missing+=(curl)
[ -f /usr/include/infiniband/verbs.h ] || missing+=(libibverbs-dev)
[ "${#missing[@]}" -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo > /dev/null 2>&1 || { echo "error: ${missing[*]} missing and installing needs root (apt-get install -y ${missing[*]})" >&2; exit 1; }
    SUDO=sudo
fi
echo "installing ${missing[*]} (Debian packages) for the tests..."
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" > /dev/null || {
    $SUDO apt-get update > /dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" > /dev/null
}
