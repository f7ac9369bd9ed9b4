#!/usr/bin/env bash
# Builds every example and runs each against throwaway servers on free loopback ports, as the
# test suite does (one redis-server; Sentinel, Cluster and Redlock examples get their own
# servers from redislock_test_with_server --topology). Prints each example's output.
# Usage: scripts/examples.sh [build-dir]      (default: build/examples)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

build=${1:-build/examples}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DREDISLOCK_BUILD_TESTS=ON -DREDISLOCK_BUILD_EXAMPLES=ON \
  -DREDISLOCK_BUILD_BENCH=OFF -DREDISLOCK_TEST_CONSUMERS=OFF > /dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target redislock_test_with_server redislock_cli \
  quickstart stock fencing reentrant shared semaphore lease_loss with_lock cancel_wait lease_per_call latch_rounds sentinel cluster redlock observe async_server
ctest --test-dir "$build" -R '^example_' --output-on-failure --verbose | grep -vE '^(UpdateCTestConfiguration|Parse|Test project|Constructing|Checking|Updating|Added|Internal ctest)'
