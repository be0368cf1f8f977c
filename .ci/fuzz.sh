#!/usr/bin/env bash
# CI: run every cargo-fuzz target in fuzz/ for a fixed time (fuzz/README.md). Any crash,
# oracle disagreement, timeout or build failure makes this script exit non-zero.
#
# It installs cargo-fuzz from crates.io when that version is not already installed, builds
# every target once, then runs each for FUZZ_SECONDS (default 60) with its corpus in the
# git-ignored fuzz/corpus/<target>/. The corpus is seeded with the conformance cases'
# configurations and calls when ../shared/conformance exists, and with examples/*.json.
# A summary line per target gives the executions libFuzzer reports.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION="0.13.2"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"

if [ "$(cargo fuzz --version 2>/dev/null || true)" != "cargo-fuzz ${CARGO_FUZZ_VERSION}" ]; then
  echo "fuzz: installing cargo-fuzz ${CARGO_FUZZ_VERSION}"
  cargo install cargo-fuzz --version "${CARGO_FUZZ_VERSION}" --locked
fi

# cargo-fuzz passes nightly-only flags; the stable toolchain accepts them with this.
export RUSTC_BOOTSTRAP=1
cd fuzz

mapfile -t targets < <(cargo fuzz list)
if [ "${#targets[@]}" -eq 0 ]; then
  echo "fuzz: no targets found" >&2
  exit 1
fi

# Seed corpora (only adds files; libFuzzer keeps what it finds there).
# Run logs go beside the build (cargo-fuzz reports the newest file in artifacts/ as the
# failing input, so they stay out of there).
logs="target/fuzz-logs"
mkdir -p "$logs"
for t in "${targets[@]}"; do mkdir -p "corpus/$t" "artifacts/$t"; done
python3 - "../../shared/conformance/cases" <<'EOF'
import hashlib, json, os, sys
cases, out = sys.argv[1], "corpus"
def put(target, value):
    if not os.path.isdir(os.path.join(out, target)):
        return
    text = json.dumps(value, indent=1)
    name = "seed-" + hashlib.sha256(text.encode()).hexdigest()[:16]
    with open(os.path.join(out, target, name), "w") as f:
        f.write(text)
files = [os.path.join(cases, f) for f in sorted(os.listdir(cases))] if os.path.isdir(cases) else []
files += [os.path.join("../examples", f) for f in sorted(os.listdir("../examples")) if f.endswith(".json")]
for path in files:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        continue
    config = doc.get("config", doc) if isinstance(doc, dict) else None
    if isinstance(config, dict):
        put("config_parser", config)
        if isinstance(config.get("policy"), dict):
            put("policy_parser", config["policy"])
    if isinstance(doc, dict):
        for step in doc.get("steps", []):
            if isinstance(step, dict) and isinstance(step.get("grants"), list):
                put("grants_parser", step["grants"])
            if isinstance(step, dict) and isinstance(step.get("decide"), dict):
                put("call_parser", step["decide"])
                put("call_input_depth", step["decide"].get("input", {}))
EOF

echo "fuzz: building ${#targets[@]} targets: ${targets[*]}"
cargo fuzz build

failed=()
summary=()
for t in "${targets[@]}"; do
  log="$logs/$t.log"
  echo "fuzz: running $t for ${FUZZ_SECONDS}s"
  # -timeout: one input running this long is a hang, reported as a failure.
  if cargo fuzz run "$t" "corpus/$t" -- \
      -max_total_time="${FUZZ_SECONDS}" -timeout=30 -print_final_stats=1 >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
    # The panic, libFuzzer's verdict and the failing input's path, then the end of the log.
    grep -E -A3 "panicked at|ERROR: libFuzzer|SUMMARY:|Failing input:|==ERROR" "$log" >&2 || true
    tail -n 20 "$log" >&2
  fi
  runs="$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n1 | grep -Eo '[0-9]+ runs' || true)"
  corpus="$(find "corpus/$t" -type f | wc -l)"
  summary+=("$(printf '%-18s %-7s %s, corpus %s files' "$t" "$status" "${runs:-no run count}" "$corpus")")
done

echo "fuzz: summary (${FUZZ_SECONDS}s each)"
printf '  %s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]} (inputs in fuzz/artifacts/<target>/, logs in fuzz/$logs/)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} passed, 0 failed"
