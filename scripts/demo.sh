#!/usr/bin/env bash
# Runs the main example on a fresh Debian/Ubuntu machine: installs missing packages, builds,
# starts a throwaway redis-server on a free loopback port, runs the stock example (several
# worker processes selling from one stock under one lock), and stops the server.
# Usage: scripts/demo.sh [build-dir]      (default: build/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

build=${1:-build/demo}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DREDISLOCK_BUILD_TESTS=ON -DREDISLOCK_BUILD_EXAMPLES=ON \
  -DREDISLOCK_BUILD_BENCH=OFF > /dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target stock redislock_test_with_server
"$build/tests/redislock_test_with_server" "$build/examples/stock" --workers 6 --orders 400
