#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what the tests need that Cargo
# does not (Debian's chromium, which renders the tune report in a headless test), then
# `cargo test --workspace`. Installing is skipped when it is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium > /dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo > /dev/null 2>&1 || { echo "error: chromium is missing and installing it needs root (apt-get install -y chromium)" >&2; exit 1; }
        SUDO=sudo
    fi
    echo "installing chromium (Debian package) for the report test..."
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium > /dev/null || {
        $SUDO apt-get update > /dev/null
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium > /dev/null
    }
fi
cargo test --workspace "$@"
