#!/usr/bin/env bash
# Installs the official MCP Python SDK (PyPI `mcp`), at an exact version checked to work, into
# a virtual environment under <repo>/.tmp/python-sdk (git-ignored; override with
# TOOLGATE_PYTHON_SDK), for the client tests of `toolgate mcp serve`
# (cli/tests/mcp_serve.rs). Needs python3 with venv; uses PyPI only.
#
#   layers/mcp/scripts/install-python-sdk.sh
#
# Tests skip (with a printed reason) when the SDK is missing and `CI` is unset; in CI a
# missing SDK fails the test.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
prefix="${TOOLGATE_PYTHON_SDK:-$repo/.tmp/python-sdk}"
if [ ! -x "$prefix/bin/python" ]; then
  python3 -m venv "$prefix"
fi
"$prefix/bin/python" -m pip install --quiet --disable-pip-version-check mcp==2.3.0
"$prefix/bin/python" -c 'import mcp, mcp_types; from mcp import Client' >/dev/null
echo "MCP Python SDK installed in $prefix"
