#!/usr/bin/env bash
# Installs what redislock's build, tests, benches and examples need, with apt-get, but only
# the packages that are missing. Safe to run again. Debian 12 / Ubuntu 22.04 or newer.
set -euo pipefail

packages=(g++ cmake make pkg-config git libhiredis-dev libasio-dev redis-server redis-sentinel libgtest-dev libbenchmark-dev libssl-dev openssl clang-format libcap2-bin clang help2man dpkg-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "redislock: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# Keep the redis-server package from starting a system-wide server on 6379: the tests start
# their own. (policy-rc.d exit 101 = "action forbidden"; only added if none exists.)
if [ ! -e /usr/sbin/policy-rc.d ] && [ -w /usr/sbin ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
