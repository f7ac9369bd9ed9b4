#!/usr/bin/env bash
# The Debian packages (docs/building.md, "Debian packages"): in a build tree whose targets are
# built, cpack -G DEB makes redislock-dev and redislock-tools; both are installed with apt-get,
# the find_package and pkg-config consumers are built against the installed files only and run
# against a throwaway server, `redislock --version` runs from /usr/bin, and the packages are
# removed again (also when a step fails). Needs root or sudo, and skips (saying so) without,
# or when a redislock package is installed already (it is not ours to remove).
# Usage: scripts/deb_check.sh [build-dir]   (default: build/test, the plain build of scripts/test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build/test}" && pwd)
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2> /dev/null; then SUDO=sudo; else
    echo "=== packages: skipped (apt-get install needs root or sudo)"
    exit 0
  fi
fi
for p in redislock-dev redislock-tools; do
  if dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed"; then
    echo "=== packages: skipped ($p is installed on this machine already)"
    exit 0
  fi
done
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
rm -f "$build"/redislock-dev_*.deb "$build"/redislock-tools_*.deb
(cd "$build" && cpack -G DEB > cpack.log 2>&1) || { cat "$build/cpack.log"; exit 1; }
debs=("$build"/redislock-dev_"$version"_*.deb "$build"/redislock-tools_"$version"_*.deb)
ls -l "${debs[@]}"

work=$(mktemp -d)
apt=($SUDO env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=120)
cleanup() {
  "${apt[@]}" remove redislock-dev redislock-tools > "$work/remove.log" 2>&1 || cat "$work/remove.log"
  rm -rf "$work"
}
trap cleanup EXIT
"${apt[@]}" install --no-install-recommends "${debs[@]}" > "$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
dpkg-query -W redislock-dev redislock-tools

with_server=${REDISLOCK_WITH_SERVER:-$build/tests/redislock_test_with_server}
# find_package: nothing but the installed package to find (no CMAKE_PREFIX_PATH).
env -u CMAKE_PREFIX_PATH cmake -S tests/consumers/find_package -B "$work/find_package" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
grep -qx "redislock_DIR:PATH=/usr/lib/cmake/redislock" "$work/find_package/CMakeCache.txt"
cmake --build "$work/find_package" > /dev/null
"$with_server" "$work/find_package/consumer"
# pkg-config, from /usr/share/pkgconfig.
env -u PKG_CONFIG_PATH c++ -std=c++17 -o "$work/pkg_config_consumer" tests/consumers/consumer.cpp \
  $(env -u PKG_CONFIG_PATH pkg-config --cflags --libs redislock)
"$with_server" "$work/pkg_config_consumer"
# The tool and its man page.
[ "$(command -v redislock)" = /usr/bin/redislock ]
[ "$(redislock --version)" = "redislock $version" ]
man -w redislock > /dev/null 2>&1 || [ -f /usr/share/man/man1/redislock.1.gz ] || [ -f /usr/share/man/man1/redislock.1 ]
echo "=== packages: redislock-dev and redislock-tools $version built, installed, used and removed"
