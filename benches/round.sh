#!/usr/bin/env bash
# One run of every issue-26 target, one bench after another, on a quiet machine
# (benches/README.md, "Round five: one run of every target"). Everything is built first, so
# no compiler runs beside a timed bench; the load is printed before each one. Logs and the
# callgrind profiles go to $OUT (default target/round); the last step prints a summary of
# every figure the target table reads (benches/round_summary.py).
#
#   bash benches/round.sh              # all of it (about 15 minutes on 2 cores, once built)
#   ROUND_ONLY="stack cedar" bash benches/round.sh   # some steps (names as below)
#
# It needs what .ci/run installs: the npm MCP servers and the Python SDK in .tmp, HAProxy,
# and PostgreSQL (started here from .ci/postgres.sh and stopped at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_INCREMENTAL=0
OUT="${OUT:-$root/target/round}"
mkdir -p "$OUT"
CRIT=(--warm-up-time 1 --measurement-time 3)
ONLY="${ROUND_ONLY:-}"

wanted() { [[ -z "$ONLY" || " $ONLY " == *" $1 "* ]]; }
run() {
  local name="$1"
  shift
  wanted "$name" || return 0
  local t0=$SECONDS
  echo "==> $name ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$@" >"$OUT/$name.log" 2>&1 || {
    echo "!!! $name failed; its log: $OUT/$name.log"
    tail -20 "$OUT/$name.log"
    exit 1
  }
  echo "<== $name: $((SECONDS - t0)) s"
}

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with changes)'), $(nproc) cores"

# Build everything first.
build() {
  cargo build --release -p toolgate-cli
  cargo bench --no-run -p toolgate-benches
  cargo bench --no-run -p toolgate-benches --features cedar --bench cedar
  cargo bench --no-run -p toolgate-mcp --features serve
  cargo bench --no-run -p toolgate-cli --features mcp,serve --bench replicas
  cargo test --release --no-run -p toolgate-web --test measure
}
run build build

eval "$(bash .ci/postgres.sh)"
trap 'bash .ci/postgres.sh stop >/dev/null 2>&1 || true' EXIT

bench() { cargo bench -p toolgate-benches "$@"; }

# 26.1, 26.2: the stack against its floor and one decision; the engine against Cedar.
run stack bench --bench stack -- "${CRIT[@]}" stack_overhead
run cedar bench --features cedar --bench cedar -- "${CRIT[@]}"
# 26.5: the first exposure over 10,000 tools.
run exposure bench --bench exposure -- "${CRIT[@]}"
# 26.6: decide_at with 50 quotas and 50 grants; the reservation, in one process and two;
# policy simulate over 100,000 recorded calls; the pending page with 10,000 held calls;
# the replicas through HAProxy.
run over_time bench --bench over_time -- "${CRIT[@]}"
run quota_processes bench --bench quota_processes
run policy_simulate bench --bench policy_simulate -- --warm-up-time 1 --measurement-time 5
run pending_page cargo test --release -p toolgate-web --test measure -- --ignored --nocapture
run replicas cargo bench -p toolgate-cli --features mcp,serve --bench replicas
# 26.3: a governed call over stdio ÷ a direct one, from the Python SDK and from rmcp.
run stdio_python .tmp/python-sdk/bin/python benches/mcp/stdio_ab.py 10 200 legacy
run stdio_rmcp env STDIO_AB_ROUNDS=10 STDIO_AB_CALLS=200 \
  cargo bench -p toolgate-mcp --features serve --bench stdio_ab
# 26.4: `mcp serve --http` at 64 sessions, 1 and 2 worker threads.
run http_sessions env HTTP_SESSIONS_ROUNDS=3 HTTP_SESSIONS=64 HTTP_SESSIONS_SECS=3 \
  cargo bench -p toolgate-mcp --features serve --bench http_sessions
# 26.7: resident memory at 10,000 upstream tools and 1,000 sessions.
run serve_memory cargo bench -p toolgate-mcp --features serve --bench serve_memory

# Instructions (callgrind does not feel the load; run last so it cannot disturb the above).
stack_bin="$(ls -t target/release/deps/stack-* | grep -v '\.d$' | head -1)"
exposure_bin="$(ls -t target/release/deps/exposure-* | grep -v '\.d$' | head -1)"
callgrind_bench() {
  local bin="$1" name="$2"
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$name" \
    "$bin" --bench --profile-time 2 "$name\$"
}
callgrind_stack() {
  local b
  for b in f_composite_200_rules g_decide_200_rules e_gate_only_200_rules \
    d_filters_only b_full_stack_200_rules; do
    callgrind_bench "$stack_bin" "$b"
  done
}
run cg_stack callgrind_stack
run cg_exposure callgrind_bench "$exposure_bin" expose_first
# The proxy's instructions per governed call: 600 calls minus 100 calls, over 500.
callgrind_stdio() {
  local n
  for n in 100 600; do
    rm -rf "$OUT/cg-stdio-$n" && mkdir -p "$OUT/cg-stdio-$n"
    CALLGRIND_DIR="$OUT/cg-stdio-$n" TOOLGATE="$root/benches/mcp/callgrind-toolgate.sh" \
      STDIO_AB_ONLY=governed .tmp/python-sdk/bin/python benches/mcp/stdio_ab.py 1 "$n"
  done
}
run cg_stdio callgrind_stdio

python3 benches/round_summary.py "$OUT"
