#!/usr/bin/env bash
# Builds the other servers the suite runs against, once per machine, from the source tarballs
# beside the project (../shared/deps/, or $REDISLOCK_SERVER_TARBALLS):
#   redis6   redis_6.0.16.orig.tar.gz   Redis 6.0.16, the oldest supported server
#   redis8   redis_8.6.3.orig.tar.gz    Redis 8.6.3
#   valkey9  valkey_9.1.2.orig.tar.gz   Valkey 9.1.2
#   valkey9-nolua  the same tarball built with BUILD_LUA=no: Valkey 9.1.2 without Lua (EVAL
#            answers "ERR Could not find scripting engine 'lua'"), for the Lua-free path
# Each is built into a cache outside the clone keyed by the tarball's sha256,
#   ${REDISLOCK_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redislock/servers}/<name>-<sha256[0:16]>/bin/
# holding redis-server, redis-sentinel and redis-cli (Valkey's valkey-* binaries under these
# names too), so a fresh machine builds once and a warm one reuses. A build happens in a
# temporary directory renamed into place at the end: an interrupted build is never taken as done.
# No TLS (the server variants test the lock protocols over TCP; TLS is tested on Debian's server)
# and libc malloc (no jemalloc to compile): about half the build time.
# Usage: scripts/servers.sh [redis6|redis8|valkey9|valkey9-nolua ...]   (default: all four)
#   prints "<name> <bin directory>" for each server built or found; a server whose tarball is
#   absent is skipped, saying so on stderr (a user's clone has no ../shared).
#   scripts/servers.sh --bin <name> prints only that server's bin directory (building it if
#   needed), or nothing with status 3 when its tarball is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

tarballs="${REDISLOCK_SERVER_TARBALLS:-$PWD/../shared/deps}"
cache="${REDISLOCK_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redislock/servers}"
jobs=$(nproc 2>/dev/null || echo 2)

declare -A tarball_of=(
  [redis6]=redis_6.0.16.orig.tar.gz
  [redis8]=redis_8.6.3.orig.tar.gz
  [valkey9]=valkey_9.1.2.orig.tar.gz
  [valkey9-nolua]=valkey_9.1.2.orig.tar.gz
)
# The checksums ../shared/deps/README.md publishes: a tarball that differs is refused.
declare -A sha256_of=(
  [redis6]=8bea58a468bb67bedc92d8c2e44c170e42e6ea02527cbc5d233e92e8d78d1b99
  [redis8]=58d0d1eb49a1ea6c2179659707fec171b1e2e2b8d5157ed2ec59d1d66ad5a654
  [valkey9]=8e8557da7426a51b4e0fb514a65ef6241dc7c85cb408243af389070abf379cec
  [valkey9-nolua]=8e8557da7426a51b4e0fb514a65ef6241dc7c85cb408243af389070abf379cec
)
# Extra make options per server (the cache key includes the name, so each build has its own).
declare -A make_options_of=(
  [valkey9-nolua]=BUILD_LUA=no
)

# Builds <name> unless cached; prints its bin directory on stdout. Status 3: tarball absent.
server_bin() {
  local name="$1" tarball="$tarballs/${tarball_of[$1]}" sha dir tmp src prog started
  if [ ! -f "$tarball" ]; then
    echo "=== servers: $name skipped: $tarball not found (set REDISLOCK_SERVER_TARBALLS to the directory holding ${tarball_of[$name]})" >&2
    return 3
  fi
  sha="${sha256_of[$name]}"
  dir="$cache/$name-${sha:0:16}"
  if [ -x "$dir/bin/redis-server" ]; then
    echo "$dir/bin"
    return 0
  fi
  if [ "$(sha256sum "$tarball" | cut -d' ' -f1)" != "$sha" ]; then
    echo "=== servers: $tarball does not have the sha256 ../shared/deps/README.md gives ($sha); refusing it" >&2
    return 1
  fi
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.$name.XXXXXX")
  trap 'rm -rf "$tmp"' RETURN
  started=$(date +%s)
  echo "=== servers: building $name from $tarball (a few minutes, once per machine)" >&2
  tar xzf "$tarball" -C "$tmp"
  src=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -n 1)
  # shellcheck disable=SC2086 # the options are words
  make -C "$src" -j "$jobs" MALLOC=libc BUILD_TLS=no ${make_options_of[$name]:-} > "$tmp/build.log" 2>&1 || {
    tail -n 40 "$tmp/build.log" >&2
    echo "=== servers: building $name failed" >&2
    return 1
  }
  mkdir -p "$tmp/out/bin"
  prog=redis
  [ -x "$src/src/valkey-server" ] && prog=valkey
  install -m 755 "$src/src/$prog-server" "$src/src/$prog-cli" "$tmp/out/bin/"
  if [ "$prog" = valkey ]; then
    ln -s valkey-server "$tmp/out/bin/redis-server"
    ln -s valkey-cli "$tmp/out/bin/redis-cli"
  fi
  # The sentinel is the server binary started as *-sentinel (or with --sentinel).
  ln -s "$prog-server" "$tmp/out/bin/$prog-sentinel"
  [ "$prog" = valkey ] && ln -s valkey-server "$tmp/out/bin/redis-sentinel"
  "$tmp/out/bin/redis-server" --version > "$tmp/out/VERSION"
  echo "$(($(date +%s) - started)) s on $jobs jobs, $(date -u +%FT%TZ)" > "$tmp/out/BUILD_TIME"
  # Atomic: another run that finished the same build first keeps its copy (mv -T refuses to
  # replace a non-empty directory).
  mv -T "$tmp/out" "$dir" 2> /dev/null || [ -x "$dir/bin/redis-server" ]
  echo "=== servers: $name built in $(cat "$dir/BUILD_TIME"): $(cat "$dir/VERSION")" >&2
  echo "$dir/bin"
}

if [ "${1:-}" = --bin ]; then
  [ $# -eq 2 ] && [ -n "${tarball_of[$2]:-}" ] || { echo "usage: scripts/servers.sh --bin redis6|redis8|valkey9|valkey9-nolua" >&2; exit 2; }
  server_bin "$2"
  exit
fi
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(redis6 redis8 valkey9 valkey9-nolua)
for name in "${names[@]}"; do
  [ -n "${tarball_of[$name]:-}" ] || { echo "unknown server $name (redis6, redis8, valkey9, valkey9-nolua)" >&2; exit 2; }
  rc=0
  bin=$(server_bin "$name") || rc=$?
  case $rc in
    0) echo "$name $bin" ;;
    3) ;;
    *) exit "$rc" ;;
  esac
done
