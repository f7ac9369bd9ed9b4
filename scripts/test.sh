#!/usr/bin/env bash
# The whole test suite on a fresh Debian/Ubuntu machine:
#   installs missing packages, builds, runs ctest. Every test starts its own throwaway
#   redis-server on a free loopback port (never 6379) and stops it afterwards.
# Usage: scripts/test.sh [build-dir]      (default: build/test)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

build=${1:-build/test}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDISLOCK_BUILD_BENCH=ON -DREDISLOCK_BUILD_EXAMPLES=ON
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 300
