#!/usr/bin/env bash
# The long safety run: >= 10^6 lock acquisitions by 8 processes x 4 threads, with every fault
# in turn (kill -9 of holders, redis-server restarts, CLIENT KILL, SIGSTOP past the lease,
# latency / cuts / refusals through a loopback proxy). Prints one summary line; exit 0 = PASS.
# Usage: scripts/torture.sh [acquisitions] [extra redislock_torture options...]
#   e.g. scripts/torture.sh 1000000 --kind mutex
# Redlock: with --kind redlock the faults are the masters' (kill -9 of one and of two, stop,
# SIGSTOP past the per-instance timeout; back empty after a lease) plus kill -9 / SIGSTOP of
# holders, e.g. scripts/torture.sh 100000 --kind redlock --masters 5
# Cluster: with --cluster the lock runs on a 3-master, 3-replica Redis Cluster and the faults are
# slot migrations, CLUSTER FAILOVER, kill -9 of masters, kill -9 / SIGSTOP of holders, e.g.
#   scripts/torture.sh 1000000 --cluster --kind mutex,mutex-waiting,mutex-fair
# (ctest runs the short scenarios: ctest --test-dir build/test -L torture)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
acquisitions=${1:-1000000}
shift || true
cmake -S . -B build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/test -j "$(nproc 2>/dev/null || echo 2)" --target redislock_torture
faults=kill9,restart,client-kill,sigstop,proxy
prev=
for a in "$@"; do
  if [ "$prev" = --kind ] && [ "$a" = redlock ]; then
    faults=master-kill9,master-sigstop,master-kill9x2,kill9,master-restart,sigstop
  fi
  if [ "$a" = --cluster ]; then
    faults=migrate,failover,kill9,master-kill9,sigstop
  fi
  prev=$a
done
exec build/test/tests/torture/redislock_torture --processes 8 --threads 4 --acquisitions "$acquisitions" \
  --seconds 7200 --faults "$faults" --fault-every-ms 2000 "$@"
