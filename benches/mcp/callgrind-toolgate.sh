#!/bin/sh
# `toolgate` under callgrind, for the stdio A/B drivers (benches/README.md, issue 26):
#   TOOLGATE=benches/mcp/callgrind-toolgate.sh STDIO_AB_ONLY=governed STDIO_AB_CALLS=500 \
#     cargo bench -p toolgate-mcp --bench stdio_ab
# Writes callgrind.out.<pid> into $CALLGRIND_DIR (default /tmp); the children (server-everything)
# are not traced.
here="$(cd "$(dirname "$0")/../.." && pwd)"
exec valgrind --tool=callgrind --trace-children=no \
  --callgrind-out-file="${CALLGRIND_DIR:-/tmp}/callgrind.out.%p" \
  "${TOOLGATE_BIN:-$here/target/release/toolgate}" "$@"
