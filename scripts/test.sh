#!/usr/bin/env bash
# The whole test suite on a fresh Debian/Ubuntu machine: installs missing packages, then
#   1. build/test  plain RelWithDebInfo build: every test, examples and consumer projects;
#   2. build/asan  AddressSanitizer + UndefinedBehaviorSanitizer (findings abort the test);
#   3. build/tsan  ThreadSanitizer.
# Sanitizer builds skip the consumer/example tests and run shorter torture scenarios.
# Every test starts its own throwaway redis-server on a free loopback port (never 6379).
# Usage: scripts/test.sh [plain|asan|tsan ...]      (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
variants=("$@")
[ ${#variants[@]} -eq 0 ] && variants=(plain asan tsan)

sanitized() {  # <dir> <sanitizers>
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDISLOCK_BUILD_BENCH=OFF -DREDISLOCK_BUILD_EXAMPLES=OFF \
    -DREDISLOCK_TEST_CONSUMERS=OFF -DREDISLOCK_SANITIZE="$2" -DREDISLOCK_TORTURE_SECONDS=8
  cmake --build "$1" -j "$jobs"
}

failed=()
for v in "${variants[@]}"; do
  echo "=== redislock tests: $v"
  set +e
  (
  set -e
  case "$v" in
    plain)
      cmake -S . -B build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDISLOCK_BUILD_BENCH=ON -DREDISLOCK_BUILD_EXAMPLES=ON
      cmake --build build/test -j "$jobs"
      ctest --test-dir build/test -j "$jobs" --output-on-failure --timeout 300
      ;;
    asan)
      sanitized build/asan address,undefined
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build/asan -j "$jobs" --output-on-failure --timeout 300
      ;;
    tsan)
      sanitized build/tsan thread
      # On some kernels (large vm.mmap_rnd_bits) TSan aborts with "unexpected memory mapping";
      # without address randomisation it always runs.
      run=()
      if setarch "$(uname -m)" -R true 2>/dev/null; then run=(setarch "$(uname -m)" -R); fi
      TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        "${run[@]}" ctest --test-dir build/tsan -j "$jobs" --output-on-failure --timeout 300
      ;;
    *) echo "unknown variant $v (plain, asan, tsan)" >&2; exit 2 ;;
  esac
  )
  rc=$?
  set -e
  [ $rc -eq 0 ] || failed+=("$v")
done
# Every variant runs even when an earlier one failed, so one CI run shows all findings.
if [ ${#failed[@]} -ne 0 ]; then
  echo "=== redislock tests FAILED in: ${failed[*]}" >&2
  exit 1
fi
echo "=== redislock tests passed in: ${variants[*]}"
