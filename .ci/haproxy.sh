#!/usr/bin/env bash
# Debian's HAProxy for the replica test (cli/tests/replicas_cli.rs): two `toolgate mcp serve
# --http` and two `toolgate serve` processes behind one balancer, sharing one PostgreSQL.
# Installs `haproxy` with apt-get when it is missing; prints the binary's path on standard
# output. The test starts its own haproxy process with its own configuration on loopback (the
# package's system service is not used). Under CI=true the replica test fails without it.
set -euo pipefail

say() { printf 'haproxy.sh: %s\n' "$*" >&2; }

if ! command -v haproxy >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { say "error: not root and no sudo; install haproxy"; exit 1; }
    SUDO="sudo"
  fi
  say "installing haproxy (apt-get)"
  $SUDO apt-get update -qq >&2
  # The package would start its own service; policy-rc.d keeps it from starting.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -qq --no-install-recommends haproxy >&2
  command -v haproxy >/dev/null 2>&1 || { say "error: haproxy is still missing"; exit 1; }
  # The package's own service is not needed (each test starts its own haproxy).
  if command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl stop haproxy >/dev/null 2>&1 || true
  fi
  if command -v service >/dev/null 2>&1; then
    $SUDO service haproxy stop >/dev/null 2>&1 || true
  fi
fi
say "found $(haproxy -v 2>/dev/null | head -n 1)"
command -v haproxy
