#!/usr/bin/env bash
# The long run of the model checker (tests/model/model.cpp): seeds from a start on, per topology,
# until a time budget is spent. Prints each run's summary line (ops, faults by type, findings),
# every finding with the shrunk history and the command that replays it, and a total per
# topology. Exit 0 when no run found anything.
# Usage: scripts/model.sh [seconds per topology] [first seed] [topologies] [extra options...]
#   topologies: single, redlock, sentinel, cluster (default: all four)
#   e.g. scripts/model.sh 1800 1000 single,redlock --threads 6 --ops 60
#        scripts/model.sh 1800 8000 single --mixed-kinds --names 1 --processes 2
# Replay a finding: build/test/tests/model/redislock_model <its options> --seed N --replay [--keep ...]
# (ctest runs the short version: ctest --test-dir build/test -L model)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
first=${2:-1}
topologies=${3:-single,redlock,sentinel,cluster}
shift 3 2>/dev/null || shift $#
if [ -z "${REDISLOCK_MODEL_BIN:-}" ]; then
  scripts/deps.sh
  cmake -S . -B build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build/test -j "$(nproc 2>/dev/null || echo 2)" --target redislock_model
fi
bin=${REDISLOCK_MODEL_BIN:-build/test/tests/model/redislock_model}
status=0
for t in ${topologies//,/ }; do
  echo "=== model: topology $t, seeds from $first, $seconds s"
  "$bin" --topology "$t" --seed "$first" --runs 100000000 --seconds "$seconds" --shrink-seconds 300 "$@" || status=1
done
exit $status
