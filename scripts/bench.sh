#!/usr/bin/env bash
# Benchmarks: installs missing packages, builds bench_mutex (Release), runs it with JSON
# output and draws an SVG of the results for the README.
# Each benchmark starts its own throwaway redis-server on a free loopback port.
# Usage: scripts/bench.sh [build-dir] [seconds-per-contended-run]   (default: build/bench 2)
# Output: <build-dir>/bench.json (bench_mutex), <build-dir>/cost.json (bench_cost: CPU and
# commands per operation) and <build-dir>/bench.svg (both)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh  # includes libbenchmark-dev
if ! command -v python3 >/dev/null; then  # the plot script; only the standard library is used
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get install -y -q --no-install-recommends python3
fi

build=${1:-build/bench}
export REDISLOCK_BENCH_SECONDS=${2:-2}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DREDISLOCK_BUILD_BENCH=ON -DREDISLOCK_BUILD_TESTS=OFF \
  -DREDISLOCK_BUILD_EXAMPLES=OFF
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target bench_mutex bench_cost
"$build/bench/bench_mutex" --benchmark_min_time=0.5 --benchmark_out="$build/bench.json" \
  --benchmark_out_format=json --benchmark_counters_tabular=true
"$build/bench/bench_cost" --benchmark_out="$build/cost.json" --benchmark_out_format=json \
  --benchmark_counters_tabular=true
python3 scripts/bench_plot.py "$build/bench.json" "$build/cost.json" "$build/bench.svg"
echo "results: $build/bench.json, $build/cost.json, plot: $build/bench.svg"
