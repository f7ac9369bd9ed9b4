#!/usr/bin/env bash
# The redislock command-line tool from shell jobs: run a command under a lock, look at it,
# and see that a second run on the same name waits or gives up.
# Usage: cli.sh   (uses $REDISLOCK_URL for the server, or the deprecated $REDISLOCK_URI;
#                  $REDISLOCK_CLI or `redislock` on PATH for the tool)
set -euo pipefail
redislock=${REDISLOCK_CLI:-redislock}
if [ -z "${REDISLOCK_URL:-}" ] && [ -n "${REDISLOCK_URI:-}" ]; then
  echo "note: REDISLOCK_URI is deprecated and will be ignored in a later version; set REDISLOCK_URL" >&2
fi
export REDISLOCK_URL=${REDISLOCK_URL:-${REDISLOCK_URI:-redis://127.0.0.1:6379}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A job that must run once at a time: the command sees its fencing token in the environment.
"$redislock" run --lease 10s nightly-report -- sh -c 'echo "report run with fencing token $REDISLOCK_FENCING_TOKEN"'

# While one run holds the name, a second one with --no-wait gives up at once (exit 75).
mkfifo "$work/started" "$work/finish"
"$redislock" run nightly-report -- sh -c "echo started > '$work/started'; cat '$work/finish' > /dev/null" &
holder=$!
read -r _ < "$work/started"
"$redislock" status nightly-report || true
rc=0
"$redislock" run --no-wait nightly-report -- echo "must not run" || rc=$?
echo "second run while held: exit $rc (75 = lock not obtained)"
echo done > "$work/finish"
wait "$holder"
"$redislock" status nightly-report && { echo "still held after the run (BUG)"; exit 1; } || echo "free again"
[ "$rc" -eq 75 ]
