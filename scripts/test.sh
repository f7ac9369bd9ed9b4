#!/usr/bin/env bash
# The whole test suite on a fresh Debian/Ubuntu machine: installs missing packages, then
#   1. build/test  plain build (-O1, line tables): every test, examples, benchmark smoke runs and
#      consumer projects, then the Debian packages (scripts/deb_check.sh: cpack -G DEB,
#      installed, used, removed);
#   2. build/asan  AddressSanitizer + UndefinedBehaviorSanitizer (findings abort the test);
#   3. build/tsan  ThreadSanitizer;
#   4. build/hiredis1  plain build against hiredis 1.2.0 with TLS support (REDISLOCK_WITH_TLS),
#      built from ../shared/deps/hiredis-1.2.0.tar.gz (or $REDISLOCK_HIREDIS1_TARBALL) into a
#      prefix in the build tree: the tests that exercise hiredis itself (connections, replies,
#      scripts, pub/sub, pipelines, TLS, the CLI), the consumers, and bench_mutex's smoke run (its
#      uncontended cases include the TLS-vs-TCP cycle); not the lock protocols again. Skipped,
#      saying so, when the tarball is absent (a user's clone has none).
#   5. redis6, redis8, valkey9  the lock protocols against Redis 6.0.16, Redis 8.6.3 and Valkey
#      9.1.2 (and valkey9-nolua: the Lua-free path's tests against Valkey 9.1.2 built without
#      Lua, a few seconds), built once per machine by scripts/servers.sh into a cache outside the clone; they
#      reuse build/test's binaries (building it first when plain did not run) and only point
#      the harness at the other server (REDISLOCK_REDIS_SERVER, REDISLOCK_REDIS_CLI; the
#      sentinel is the server binary with --sentinel). Skipped, saying so, when the server's
#      tarball is absent (set REDISLOCK_SERVER_TARBALLS).
# Sanitizer builds skip the consumer/example tests and run shorter torture scenarios and
# model-checker runs; line tables (-g1) are enough for their reports. ASan+UBSan compiles -O0
# (a test program: 28.9 s of CPU, against 61.7 at -O1 and 102.6 at -O2), and its tests take as
# long as at -O1: they wait on Redis, not on the CPU. TSan compiles -O1, as it recommends (it
# slows -O0 code far more).
# The default order is plain, redis6, redis8, valkey9, valkey9-nolua, asan, tsan, hiredis1.
# The builds are the suite's CPU: while one variant's tests run, the next variants are built in
# the background at the lowest priority (build_ahead below). docs/testing.md has the minutes.
# Every test starts its own throwaway redis-server on a free loopback port (never 6379).
# Usage: scripts/test.sh [plain|asan|tsan|hiredis1|redis6|redis8|valkey9|valkey9-nolua ...]   (default: all)
#        scripts/test.sh --build-only <variant...>   (configure and build only: the suite's builds ahead)
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=""
if [ "${1:-}" = "--build-only" ]; then
  build_only=1
  shift
else
  scripts/deps.sh
  # The code follows .clang-format (scripts/format.sh --fix reformats): checked first, in seconds.
  bash scripts/format.sh --check
fi

jobs=$(nproc 2>/dev/null || echo 2)
# Tests wait on Redis far more than on the CPU (a plain run used 3.2 CPU-minutes in 3.4 minutes on
# 2 cores): twice as many at once as there are cores.
test_jobs=$((jobs * 2))
variants=("$@")

# Each phase's line carries the time since the suite started, so that a log's tail tells where
# the time went.
suite_started=$(date +%s)
since_start() {
  local s=$(($(date +%s) - suite_started))
  printf '+%d:%02d' $((s / 60)) $((s % 60))
}
phase() { echo "=== [$(since_start)] $*"; }

# ctest, bounded as a whole: every test has its own timeout, so only a process that outlived its
# test while holding ctest's output open could keep ctest waiting. Past the bound the processes
# still running are listed (the log then says what hung) and ctest is stopped.
ctest_minutes=${REDISLOCK_CTEST_MINUTES:-20}
ctest_prefix=()  # a command ctest runs under (tsan: setarch -R)
# A failed run's tests are named in the suite's closing table (failed_tests_note, per variant).
bounded_ctest() {  # <ctest arguments...>
  phase "ctest $*"
  local dir=. prev="" a
  for a in "$@"; do
    [ "$prev" != --test-dir ] || dir=$a
    prev=$a
  done
  local failed_list="$dir/Testing/Temporary/LastTestsFailed.log"
  rm -f "$failed_list"  # ctest writes it only when a test fails
  "${ctest_prefix[@]}" ctest -j "$test_jobs" --output-on-failure --timeout 300 "$@" &
  local pid=$! rc=0 waited=0
  (
    while kill -0 "$pid" 2>/dev/null; do
      sleep 5
      waited=$((waited + 5))
      if [ "$waited" -ge $((ctest_minutes * 60)) ] && kill -0 "$pid" 2>/dev/null; then
        echo "=== [$(since_start)] ctest still running after $ctest_minutes minutes; the processes left:"
        ps -eo pid,ppid,etimes,stat,args --forest | grep -v -e ' ps -eo ' -e 'sleep 5$'
        kill -TERM "$pid"
        break
      fi
    done
  ) &
  local watcher=$!
  wait "$pid" || rc=$?
  wait "$watcher" 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    if [ -s "$failed_list" ]; then
      cut -d: -f2- "$failed_list" | tr '\n' ' ' >> "$failed_tests_note"
    else
      printf '(ctest exited %s, naming no failed test) ' "$rc" >> "$failed_tests_note"
    fi
  fi
  return "$rc"
}
# The server variants come right after plain, whose build they reuse: their tests wait on Redis
# while the sanitizer and hiredis1 builds go on ahead in the background (build_ahead below).
[ ${#variants[@]} -eq 0 ] && variants=(plain redis6 redis8 valkey9 valkey9-nolua asan tsan hiredis1)

# The slowest fault scenarios (cluster and Sentinel failovers, five Redlock masters) run once, in the plain
# build: under a sanitizer they add minutes and test the same client code as the rest. So does the async
# stale-notice scenario (it waits out several leases, about 4.5 s, with proxy delays set against them).
# The model checker's self-tests (it must catch deliberately broken kinds) and replays test the
# checker, not the library's memory or threads: plain build only too, and so do the short runs of the
# semaphore, async mutex and election kinds (model_kind_*: their protocols run in the sanitizer builds'
# unit tests, and model_mixed drives them there). So do the torture harness's self-tests
# (torture_*detects_*: 3 s of a deliberately broken kind each, on servers of their own, at two
# processors' cost; the harness runs under the sanitizers in every real scenario).
slow_in_plain_only="^(torture_cluster_faults|torture_cluster_detects_a_broken_lock|torture_redlock5_faults|model_sentinel|model_cluster"
slow_in_plain_only+="|torture_detects_.*|torture_redlock_detects_a_minority_lock"
slow_in_plain_only+="|model_kind_.*|model_detects_.*|model_replay_.*|AsyncMutexTest\.AStaleHandOffNoticeMakesNoSecondHolder)$"

# -g1: line tables only (stack traces name file:line); full debug info doubles compile time.
sanitized() {  # <dir> <sanitizers> <optimisation> <jobs>
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$3 -g1 -DNDEBUG" \
    -DREDISLOCK_BUILD_BENCH=OFF -DREDISLOCK_BUILD_EXAMPLES=OFF \
    -DREDISLOCK_TEST_CONSUMERS=OFF -DREDISLOCK_SANITIZE="$2" -DREDISLOCK_TORTURE_SECONDS=8 \
    -DREDISLOCK_MODEL_SECONDS=10
  cmake --build "$1" -j "$4"
}

hiredis1_tarball="${REDISLOCK_HIREDIS1_TARBALL:-$PWD/../shared/deps/hiredis-1.2.0.tar.gz}"
hiredis1_prefix="$PWD/build/hiredis1-prefix"
# The hiredis1 variant's test files: the tests that exercise hiredis itself, and bench_mutex (its
# TLS-vs-TCP cycle); not the other benchmarks, nor the strict consumers.
hiredis_tests="test_connection;test_client;test_script;test_tls;test_mutex;test_wakeups;test_watchdog"
# test_async_cluster and test_async_sentinel close and retarget hiredis async connections from
# within its callbacks, where hiredis 1.x behaves otherwise than 0.14.
hiredis_tests+=";test_lease_loss;test_redis_down;test_deadline;test_security;test_cli;test_async_mutex;test_async_tls"
hiredis_tests+=";test_async_cluster;test_async_sentinel;bench_mutex"

# Configures and builds one variant's tree (nothing for a variant without a build of its own, or
# without its tarball). Make keeps every object an earlier, stopped build finished.
build_variant() {  # <variant> <jobs>
  case "$1" in
    plain)
      # The test builds compile -O1: 38 % less compile time than -O2 (a test program: 19.0
      # against 30.7 s of CPU), and the tests wait on Redis, not on the CPU. The benchmark figures
      # come from scripts/bench.sh's own Release build; the strict consumers compile -O2 for GCC.
      cmake -S . -B build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
        -DREDISLOCK_BUILD_BENCH=ON -DREDISLOCK_BUILD_EXAMPLES=ON
      cmake --build build/test -j "$2"
      ;;
    asan) sanitized build/asan address,undefined -O0 "$2" ;;
    tsan) sanitized build/tsan thread -O1 "$2" ;;
    hiredis1)
      [ -f "$hiredis1_tarball" ] || return 0
      local stamp="$hiredis1_prefix/.built-from"
      if [ "$(cat "$stamp" 2>/dev/null)" != "$hiredis1_tarball $(stat -c %s "$hiredis1_tarball")" ]; then
        rm -rf build/hiredis1-src build/hiredis1-build "$hiredis1_prefix" && mkdir -p build/hiredis1-src
        tar xzf "$hiredis1_tarball" -C build/hiredis1-src --strip-components=1
        cmake -S build/hiredis1-src -B build/hiredis1-build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DENABLE_SSL=ON \
          -DDISABLE_TESTS=ON -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_PREFIX="$hiredis1_prefix" \
          -DCMAKE_INSTALL_LIBDIR=lib > /dev/null
        cmake --build build/hiredis1-build -j "$2" > /dev/null
        cmake --install build/hiredis1-build > /dev/null
        echo "$hiredis1_tarball $(stat -c %s "$hiredis1_tarball")" > "$stamp"
      fi
      cmake -S . -B build/hiredis1 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
        -DCMAKE_PREFIX_PATH="$hiredis1_prefix" -DREDISLOCK_WITH_TLS=ON -DREDISLOCK_BUILD_BENCH=ON \
        -DREDISLOCK_BUILD_EXAMPLES=OFF -DREDISLOCK_TEST_ONLY="$hiredis_tests"
      cmake --build build/hiredis1 -j "$2"
      ;;
  esac
}

if [ -n "$build_only" ]; then
  for v in "$@"; do build_variant "$v" "$jobs"; done
  exit 0
fi

# Building ahead: a variant's tests wait on Redis and leave about a core idle, so while they run,
# the variants still to come are built in the background at the lowest priority (nice 19: the
# tests' processes and servers run first whenever they want the CPU; build/ahead.log). When a
# variant's turn comes, that background build is stopped and the variant's own build finishes
# what it left.
ahead_file=build/ahead.pgid
build_ahead() {  # <variants still to come...>
  local later=() w
  for w in "$@"; do
    case "$w" in asan | tsan | hiredis1) later+=("$w") ;; esac
  done
  [ ${#later[@]} -gt 0 ] || return 0
  mkdir -p build
  phase "building ${later[*]} ahead, in the background at the lowest priority (build/ahead.log)"
  # setsid: its own process group, so that stop_ahead stops the compilers too.
  setsid nice -n 19 scripts/test.sh --build-only "${later[@]}" > build/ahead.log 2>&1 < /dev/null &
  echo $! > "$ahead_file"
}
stop_ahead() {  # [stale]: a file left by a run that was itself killed
  [ -f "$ahead_file" ] || return 0
  local group
  group=$(cat "$ahead_file")
  rm -f "$ahead_file"
  # A stale file may name a process group id reused since: only a group building in this tree.
  if [ "${1:-}" = stale ]; then
    pgrep -g "$group" -f -- "--build-only|$PWD/build/" > /dev/null 2>&1 || return 0
  fi
  kill -TERM -- "-$group" 2>/dev/null || return 0
  for _ in $(seq 100); do  # make deletes the object it was writing; bounded at 10 s
    kill -0 -- "-$group" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL -- "-$group" 2>/dev/null || true
}

# What runs against the other servers: the lock protocols (contract, waiting, hand-off,
# watchdog and lease loss, fencing, reentrant, shared, semaphore, Redlock, CLI, ACL, Sentinel) and a short
# torture of every kind, the cluster's with live slot migration and failover. Not again: what
# exercises the client, hiredis or the harness rather than the server (options, members,
# connections, replies, docs, examples, consumers, process crashes, thread exit).
server_protocols="^(LockContract|QueuedHandOff|KindsTest|MutexTest|MutexRestart|WakeupTest|Subscriber|FairTest"
server_protocols+="|WatchdogTest|LeaseLoss|Fencing|FenceCounter|ReentrantTest|ReentrantServerLoss|SharedTest"
server_protocols+="|SharedServerLoss|Semaphore|Latch|Election|Redlock|RedlockN|cli_test|Security|DelayedRelease|HashTags|Eviction|AsyncMutexTest|AsyncSemaphoreTest|AsyncSharedMutexTest)[/.]"
server_protocols+="|^test_sentinel$"
# The Lua-free path (an ACL user without @scripting, Valkey's lua module unloaded) and SET IFEQ
# renewals: each test skips, saying so, where its server has no such thing.
lua_free="^Servers/LuaFree[.]|^(SetIfeqRenewal|ServerFeatures)[.]"
server_protocols+="|$lua_free"
server_protocols+="|^torture_(no_faults|waiting_all_faults|fair_all_faults|shared_mixed_all_faults|redlock3_faults"
server_protocols+="|cluster_faults)$"
# test_cluster and test_async_cluster need sharded pub/sub (Redis 7): on Redis 6 a cluster's waiters back off instead,
# and torture_cluster_faults is its cluster test. test_async_sentinel (12 s, a Sentinel set-up of
# its own) runs against Redis 6 only: it asks the sentinels and the master what test_sentinel
# asks them (SENTINEL GET-MASTER-ADDR-BY-NAME, ROLE), which runs on every server; the rest is
# client code, the same whatever the server.
server_subset() {  # <variant>
  case "$1" in
    redis6) echo "$server_protocols|^test_async_sentinel$" ;;
    valkey9-nolua) echo "$lua_free" ;;
    *) echo "$server_protocols|^test_cluster$|^test_async_cluster$" ;;
  esac
}

# The server variants' servers are built in the background, at the lowest priority, while the
# other variants run: those wait on Redis more than on the CPU, so the build takes the idle
# time (a cold cache costs 5 to 9 minutes of CPU). A server variant waits for it first.
server_build_pid=""
server_variants=()
for v in "${variants[@]}"; do
  case "$v" in redis6 | redis8 | valkey9 | valkey9-nolua) server_variants+=("$v") ;; esac
done
if [ ${#server_variants[@]} -gt 0 ] && [ ${#server_variants[@]} -lt ${#variants[@]} ]; then
  mkdir -p build
  echo "=== servers: building ${server_variants[*]} in the background if not cached (build/servers.log)"
  nice -n 19 scripts/servers.sh "${server_variants[@]}" > build/servers.log 2>&1 &
  server_build_pid=$!
fi

# A variant that cannot run here (its tarball is absent: a user's clone has no ../shared) calls
# skip with the reason: it ends the variant, and the summary says "skipped" and why, not "passed".
skip_note=$(mktemp)
failed_tests_note=$(mktemp)
stop_ahead stale  # one left running by a run that was stopped
trap 'rm -f "$skip_note" "$failed_tests_note"; stop_ahead' EXIT
# The build ahead has a process group of its own, which Ctrl-C does not reach: stopping the
# suite exits through the EXIT trap, which stops it.
trap 'exit 130' INT
trap 'exit 143' TERM
skip() {  # <reason>
  echo "=== $v variant skipped: $1"
  printf '%s' "$1" > "$skip_note"
  exit 0
}

failed=()
skipped=()
timings=()
for ((i = 0; i < ${#variants[@]}; i++)); do
  v=${variants[i]}
  later=("${variants[@]:i+1}")
  case "$v" in plain | asan | tsan | hiredis1) stop_ahead ;; esac  # a variant with a build of its own
  phase "redislock tests: $v"
  variant_started=$(date +%s)
  : > "$skip_note"
  : > "$failed_tests_note"
  case "$v" in
    redis6 | redis8 | valkey9 | valkey9-nolua)
      if [ -n "$server_build_pid" ]; then  # once: then every server is built or its failure shown
        wait "$server_build_pid" || echo "=== servers: the background build failed (build/servers.log):"
        cat build/servers.log
        server_build_pid=""
      fi
      ;;
  esac
  set +e
  (
  set -e
  case "$v" in
    plain)
      build_variant plain "$jobs"
      build_ahead "${later[@]}"
      bounded_ctest --test-dir build/test
      # The Debian packages: cpack, apt-get install, the consumers against /usr, removed (30 s).
      phase "packages (scripts/deb_check.sh)"
      scripts/deb_check.sh build/test
      ;;
    asan)
      build_variant asan "$jobs"
      build_ahead "${later[@]}"
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        bounded_ctest --test-dir build/asan -E "$slow_in_plain_only"
      ;;
    tsan)
      build_variant tsan "$jobs"
      build_ahead "${later[@]}"
      # On some kernels (large vm.mmap_rnd_bits) TSan aborts with "unexpected memory mapping";
      # without address randomisation it always runs.
      # (ctest passes the personality on to every test it starts.)
      if setarch "$(uname -m)" -R true 2>/dev/null; then ctest_prefix=(setarch "$(uname -m)" -R); fi
      # tests/tsan.supp: libstdc++'s exception_ptr reference count, which TSan cannot see.
      TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" \
        bounded_ctest --test-dir build/tsan -E "$slow_in_plain_only"
      ;;
    hiredis1)
      [ -f "$hiredis1_tarball" ] || skip "$hiredis1_tarball not found (set REDISLOCK_HIREDIS1_TARBALL to test hiredis 1.x)"
      build_variant hiredis1 "$jobs"
      build_ahead "${later[@]}"
      # The consumers must be built against hiredis 1.x too (consumer.cpp checks HIREDIS_MAJOR).
      prefix=$hiredis1_prefix
      LD_LIBRARY_PATH="$prefix/lib" PKG_CONFIG_PATH="$prefix/lib/pkgconfig" REDISLOCK_EXPECT_HIREDIS_MAJOR=1 \
        bounded_ctest --test-dir build/hiredis1
      ;;
    redis6 | redis8 | valkey9 | valkey9-nolua)
      rc=0
      servers_said=$(mktemp)
      bin=$(scripts/servers.sh --bin "$v" 2> "$servers_said") || rc=$?
      said=$(cat "$servers_said")
      rm -f "$servers_said"
      [ -z "$said" ] || [ $rc -eq 3 ] || echo "$said" >&2
      # servers.sh names the tarball it looked for.
      [ $rc -ne 3 ] || skip "${said##*"$v skipped: "}"
      [ $rc -eq 0 ]
      echo "=== $v: $("$bin/redis-server" --version)"
      if [[ " ${variants[*]} " != *" plain "* ]]; then  # run alone: build/test first (no-op when current)
        build_variant plain "$jobs"
      fi
      REDISLOCK_REDIS_SERVER="$bin/redis-server" REDISLOCK_REDIS_CLI="$bin/redis-cli" \
        bounded_ctest --test-dir build/test -R "$(server_subset "$v")"
      ;;
    *) echo "unknown variant $v (plain, asan, tsan, hiredis1, redis6, redis8, valkey9, valkey9-nolua)" >&2; exit 2 ;;
  esac
  )
  rc=$?
  set -e
  took=$(($(date +%s) - variant_started))
  if [ $rc -ne 0 ]; then
    outcome="FAILED: $(cat "$failed_tests_note")"
    [ -s "$failed_tests_note" ] || outcome+="before its tests (see its build or set-up above)"
    failed+=("$v")
  elif [ -s "$skip_note" ]; then
    outcome="skipped: $(cat "$skip_note")"
    skipped+=("$v")
  else
    outcome=passed
  fi
  timings+=("$(printf '%-14s %2d:%02d  %s' "$v" $((took / 60)) $((took % 60)) "$outcome")")
  phase "$v took $((took / 60)):$(printf '%02d' $((took % 60)))"
done
phase "the suite's variants (minutes:seconds):"
printf '    %s\n' "${timings[@]}"
# Every variant runs even when an earlier one failed, so one CI run shows all findings.
if [ ${#failed[@]} -ne 0 ]; then
  echo "=== redislock tests FAILED in: ${failed[*]}" >&2
  exit 1
fi
passed=()
for v in "${variants[@]}"; do
  [[ " ${skipped[*]} " == *" $v "* ]] || passed+=("$v")
done
echo "=== redislock tests passed in: ${passed[*]:-none}"
[ ${#skipped[@]} -eq 0 ] || echo "=== skipped (see the table above): ${skipped[*]}"
