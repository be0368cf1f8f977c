#!/usr/bin/env bash
# Debian's headless browser and its WebDriver for the approval page's browser test
# (layers/web/tests/browser.rs): installs `chromium` and `chromium-driver` with apt-get when
# `chromium` or `chromedriver` is missing. Under CI=true the browser test fails without them.
set -euo pipefail

say() { printf 'chromium.sh: %s\n' "$*" >&2; }

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  say "found $(chromium --version 2>/dev/null | head -n 1)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { say "error: not root and no sudo; install chromium and chromium-driver"; exit 1; }
  SUDO="sudo"
fi
say "installing chromium and chromium-driver (apt-get)"
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >&2
command -v chromedriver >/dev/null 2>&1 || { say "error: chromedriver is still missing"; exit 1; }
say "installed $(chromium --version 2>/dev/null | head -n 1)"
