#!/usr/bin/env bash
# Functions over a length in crates/*/src (default 150 lines, issue 41), longest first.
#
#   scripts/long-functions.sh [MAX_LINES]
#
# A function runs from its `fn` line to the line that closes it at the same indentation
# (the code is rustfmt-formatted, so that line is the brace alone). Functions listed in
# scripts/long-functions.allow (`path::name  reason`) are data tables, not logic, and are
# printed apart. Exits 1 when a function not allowed is over the length.
set -euo pipefail
cd "$(dirname "$0")/.."
max="${1:-150}"
allow=scripts/long-functions.allow
found=$(find crates -path '*/src/*.rs' -not -path '*/target/*' | sort | xargs awk -v max="$max" '
    FNR == 1 { open_fn = "" }
    {
        line = $0
        if (open_fn == "" && match(line, /^ *((pub(\([a-z:]+\))? )?(const )?(async )?(unsafe )?(extern "C" )?)fn [A-Za-z0-9_]+/)) {
            ind = match(line, /[^ ]/) - 1
            name = line
            sub(/^.*fn /, "", name)
            sub(/[^A-Za-z0-9_].*$/, "", name)
            # A declaration without a body (trait method) ends with `;`.
            if (line ~ /;[ ]*$/) next
            open_fn = name; start = FNR; want = sprintf("%" ind "s}", "")
            if (ind == 0) want = "}"
            next
        }
        if (open_fn != "" && line == want) {
            n = FNR - start + 1
            if (n > max) printf "%d %s::%s %s:%d\n", n, FILENAME, open_fn, FILENAME, start
            open_fn = ""
        }
    }
' | sort -rn)
status=0
while read -r n key loc; do
    [ -n "${n:-}" ] || continue
    if [ -f "$allow" ] && grep -qF "$key " "$allow"; then
        printf 'allowed  %4d  %s  (%s)\n' "$n" "$loc" "$(grep -F "$key " "$allow" | cut -d' ' -f2- | sed 's/^ *//')"
    else
        printf 'TOO LONG %4d  %s  %s\n' "$n" "$loc" "${key##*::}"
        status=1
    fi
done <<< "$found"
exit $status
