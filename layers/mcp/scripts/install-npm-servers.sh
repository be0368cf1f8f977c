#!/usr/bin/env bash
# Installs the reference MCP servers that toolgate-mcp's tests, example and bench run
# against, at exact versions checked to work, into <repo>/.tmp/mcp-servers (git-ignored;
# override with TOOLGATE_MCP_SERVERS). Needs Node 20+ and npm; uses the npm registry only.
#
#   layers/mcp/scripts/install-npm-servers.sh
#
# Tests skip (with a printed reason) when the servers are missing and `CI` is unset; in CI
# a missing server fails the test.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
prefix="${TOOLGATE_MCP_SERVERS:-$repo/.tmp/mcp-servers}"
mkdir -p "$prefix"

npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error \
  @modelcontextprotocol/server-everything@2026.8.31 \
  @modelcontextprotocol/server-filesystem@2026.8.31 \
  @modelcontextprotocol/server-memory@2026.8.31

for pkg in server-everything server-filesystem server-memory; do
  entry="$prefix/node_modules/@modelcontextprotocol/$pkg/dist/index.js"
  if [ ! -f "$entry" ]; then
    echo "install-npm-servers: $entry is missing after npm install" >&2
    exit 1
  fi
done
echo "MCP reference servers installed in $prefix"
