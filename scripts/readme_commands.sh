#!/usr/bin/env bash
# Prints the README's set-up commands, one per line, in the README's order: the lines of its
# ```sh blocks that start with scripts/demo.sh or scripts/test.sh (a trailing # comment is
# dropped). .ci/run runs exactly these, so the README cannot name a command CI never ran.
# Usage: scripts/readme_commands.sh [README.md]
set -euo pipefail
readme=${1:-"$(dirname "$0")/../README.md"}
awk '
  /^```/ { in_sh = !in_sh && ($0 ~ /^```(sh|bash|shell)[[:space:]]*$/); next }
  in_sh && /^scripts\/(demo|test)\.sh([[:space:]]|$)/ {
    line = $0
    sub(/[[:space:]]+#.*$/, "", line)
    sub(/[[:space:]]+$/, "", line)
    print line
  }
' "$readme"
