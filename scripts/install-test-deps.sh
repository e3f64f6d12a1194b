#!/usr/bin/env bash
# Installs what the tests need that Cargo does not: Debian's chromium (renders the tune
# report in a headless test), prometheus (scrapes the monitoring agent in an integration
# test), openssl and curl (make a test CA and certificate, and probe the agent's TLS and
# basic auth), libibverbs-dev (its verbs.h is what crates/xirang-memreg/tests/verbs_abi.rs
# checks the hand-written verbs layouts against) and redis-server (the tests start their own
# servers, loaded with SONiC's COUNTERS_DB, as the switch `monitor --sonic` reads). Skips
# what is already there; never removes anything.
set -euo pipefail
missing=()
command -v chromium > /dev/null 2>&1 || missing+=(chromium)
command -v prometheus > /dev/null 2>&1 || missing+=(prometheus)
command -v openssl > /dev/null 2>&1 || missing+=(openssl)
command -v curl > /dev/null 2>&1 || missing+=(curl)
[ -f /usr/include/infiniband/verbs.h ] || missing+=(libibverbs-dev)
command -v redis-server > /dev/null 2>&1 || missing+=(redis-server)
"$(dirname "$0")/apt-install.sh" "the tests" "${missing[@]}"
