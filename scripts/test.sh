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

step "cargo clippy -D warnings, the binding as built for WebAssembly"
# The WASM-only code of crates/napi. The napi CLI sets EMNAPI_LINK_DIR for its
# builds (napi-build's build script needs it); a plain cargo call names it.
rustup target add wasm32-wasip1-threads >/dev/null
EMNAPI_LINK_DIR="$PWD/node_modules/emnapi/lib/wasm32-wasip1-threads" \
  cargo clippy --locked -p clickhouse-schema-napi --target wasm32-wasip1-threads -- -D warnings

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

step "WebAssembly addon (release, wasm32-wasip1-threads)"
# Its type declarations go to target/ (a WASI build declares only what it
# exports, not index.d.ts), and it leaves the loader index.js alone (--no-js):
# both stay the native build's, as checked above.
npm run --silent build:wasm
git diff --exit-code -- index.d.ts index.js

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

step "Node tests (native addon)"
node --test --test-reporter=spec tests/*.test.mjs

step "Node tests (WebAssembly addon)"
# NAPI_RS_FORCE_WASI=error makes the loader take the WASI build or fail; each
# test file also asserts which build it got.
# install.test.mjs is left out: it deploys on both builds itself, from packed tarballs.
NAPI_RS_FORCE_WASI=error node --test --test-reporter=spec $(ls tests/*.test.mjs | grep -v tests/install.test.mjs)
