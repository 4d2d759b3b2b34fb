#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: installs what the
# tests need, checks formatting and lints, builds the addon, and runs the Rust and
# Node tests (the sandbox tests start their own ClickHouse servers). Exits non-zero
# on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "system packages (ClickHouse, ZooKeeper, iproute2)"
bash scripts/install-deps.sh

step "npm packages"
npm ci --no-audit --no-fund --loglevel=error

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

# Runs `npm run <script>` and fails if it changed any of `files` (generated
# files must be committed as generated). Usage: regenerated <source> <script> <files...>
regenerated() {
  local source="$1" script="$2"
  shift 2
  local before
  before="$(mktemp -d)"
  for f in "$@"; do cp "$f" "$before/$(basename "$f")"; done
  npm run --silent "$script"
  for f in "$@"; do
    if ! diff -u "$before/$(basename "$f")" "$f"; then
      echo "$f is out of date with $source: it has now been regenerated; commit it." >&2
      rm -rf "$before"
      exit 1
    fi
  done
  rm -rf "$before"
}

step "native addon (release); index.d.ts and index.js as committed"
# The napi CLI regenerates index.d.ts (the JavaScript API's reference) from the
# Rust declarations on every build.
regenerated "the Rust declarations" build:native index.d.ts index.js

step "generated prop types match schema/props.schema.json (npm run generate:types)"
regenerated schema/props.schema.json generate:types src/generated/props.ts

step "tsc --noEmit (strict; src/ and examples/)"
npm run --silent typecheck

step "TypeScript build (src/ to dist/, examples/ to dist/examples/)"
npm run --silent build:ts

step "sandbox binary (for the Node tests against real ClickHouse)"
cargo build --release --locked -p clickhouse-schema-sandbox
# The Node sandbox tests run their sandboxes from fixed directories
# (.sandbox-test, .sandbox-alchemy for the Alchemy end-to-end tests,
# .sandbox-install for the install-from-tarballs test), so they are
# stopped here even if the test process dies before its own teardown.
trap 'target/release/sandbox stop --dir .sandbox-test >/dev/null 2>&1 || true
      target/release/sandbox stop --dir .sandbox-alchemy >/dev/null 2>&1 || true
      target/release/sandbox stop --dir .sandbox-install >/dev/null 2>&1 || true' EXIT

step "Rust tests"
cargo test --workspace --locked

step "Node tests"
node --test --test-reporter=spec tests/*.test.mjs
