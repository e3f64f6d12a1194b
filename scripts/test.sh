#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what the tests need that Cargo
# does not (Debian's chromium, which renders the tune report in a headless test, and
# prometheus, which scrapes the monitoring agent in an integration test), then
# `cargo test --workspace`. Installing is skipped for what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v chromium > /dev/null 2>&1 || missing+=(chromium)
command -v prometheus > /dev/null 2>&1 || missing+=(prometheus)
if [ "${#missing[@]}" -gt 0 ]; then
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
fi
cargo test --workspace "$@"
