#!/usr/bin/env bash
# The README's first code, as a new user copies it (issue 36): a crate of its own outside the
# workspace, beside a clone of this repository (`../toolgate`, a link to this checkout), with
# exactly the README's first ```toml block as its dependencies and its first ```rust block as
# src/main.rs; built and run, and its output checked. It builds into the workspace's target
# directory and starts from the workspace's Cargo.lock, so the dependencies the workspace
# already built are reused.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

# The n-th fenced block (1-based) whose info string is exactly `lang`, from README.md.
block() {
  awk -v lang="$1" -v want="$2" '
    /^```/ {
      if (inside) { inside = 0; if (n == want) exit; next }
      if (substr($0, 4) == lang) { n++; if (n == want) { inside = 1; next } }
      next
    }
    inside { print }
  ' README.md
}

deps="$(block toml 1)"
main="$(block rust 1)"
if [ -z "$deps" ] || [ -z "$main" ]; then
  echo "README.md has no toml or rust block" >&2
  exit 1
fi
case "$deps" in
  "[dependencies]"*) ;;
  *) echo "README.md's first toml block is not a [dependencies] block" >&2; exit 1 ;;
esac

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
ln -s "$repo" "$tmp/toolgate"
mkdir -p "$tmp/app/src"
{
  printf '[package]\nname = "readme-crate"\nversion = "0.1.0"\nedition = "2024"\npublish = false\n\n'
  printf '%s\n' "$deps"
} > "$tmp/app/Cargo.toml"
printf '%s\n' "$main" > "$tmp/app/src/main.rs"
cp Cargo.lock "$tmp/app/Cargo.lock"

echo "--- $tmp/app/Cargo.toml"
cat "$tmp/app/Cargo.toml"
out="$(cd "$tmp/app" && CARGO_TARGET_DIR="$repo/target" cargo run --quiet)"
echo "--- its output"
echo "$out"

first="$(printf '%s\n' "$out" | sed -n 1p)"
second="$(printf '%s\n' "$out" | sed -n 2p)"
if [ "$first" != '{"id":7}' ]; then
  echo "the README's example did not run the allowed call: $first" >&2
  exit 1
fi
case "$second" in
  "The call was refused (not_allowed):"*) ;;
  *) echo "the README's example did not refuse the call it should: $second" >&2; exit 1 ;;
esac
echo "the README's first example builds and runs as a crate of its own"
