#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: installs what the
# tests need, checks formatting and lints, builds the addon, and runs the Rust and
# Node tests (the sandbox tests start their own ClickHouse servers). Exits non-zero
# on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step shows the seconds since the start, so a slow step shows in CI's log.
step() { printf '\n==> [%ss] %s\n' "$SECONDS" "$*"; }

# Every crate is built once per profile here, so cargo's incremental caches only
# cost disk: without them a fresh clone's target/ ends at about 12 GB, against
# about 14 GB with them, and a landing run on a machine short of disk failed
# with ENOSPC. A developer's own cargo calls keep their default.
export CARGO_INCREMENTAL=0

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

# The cross builds get their own target directory: cargo locks a target
# directory for a whole build, and the other platforms' builds run in the
# background while the tests below run.
CROSS_TARGET_DIR="$PWD/target/cross"
build_all() { CARGO_TARGET_DIR="$CROSS_TARGET_DIR" BUILD_ALL_PROFILE=cross-check bash scripts/build-all.sh "$@"; }

step "the linux-x64-gnu addon (npm run build:all, cross-check profile); index.d.ts and index.js as committed"
# Built the way a release builds it (glibc 2.17, see scripts/build-all.sh) but
# unoptimised (Cargo.toml's cross-check profile); it is the addon every Node
# test loads, from next to index.js.
build_all linux-x64-gnu
# The napi CLI regenerates index.d.ts (the JavaScript API's reference) from the
# Rust declarations, and index.js from package.json's targets, on every build.
for f in index.d.ts index.js; do
  if ! diff -u "$f" "$CROSS_TARGET_DIR/napi-stage/linux-x64-gnu/$f"; then
    cp "$CROSS_TARGET_DIR/napi-stage/linux-x64-gnu/$f" "$f"
    echo "$f is out of date with the Rust declarations or package.json: it has now been regenerated; commit it." >&2
    exit 1
  fi
done
cp npm/linux-x64-gnu/clickhouse-schema.linux-x64-gnu.node .

step "the other platforms' addons: started in the background (log: target/cross/build-all.log)"
# Every other native target of package.json's napi.targets, the same way, for
# tests/binaries.test.mjs, scripts/check-arm64.sh and tests/install.test.mjs at
# the end. (linux-x64-gnu is built already: build-all finds it fresh.)
# In a session of its own, so that stopping it stops cargo and the linkers too.
CARGO_TARGET_DIR="$CROSS_TARGET_DIR" BUILD_ALL_PROFILE=cross-check \
  setsid bash scripts/build-all.sh >"$CROSS_TARGET_DIR/build-all.log" 2>&1 &
cross_pid=$!
trap 'kill -- -"$cross_pid" 2>/dev/null || true' EXIT

step "WebAssembly addon (release, wasm32-wasip1-threads)"
# Its type declarations go to target/ (a WASI build declares only what it
# exports, not index.d.ts), and it leaves the loader index.js alone (--no-js):
# both stay the native build's, as checked above.
npm run --silent build:wasm
git diff --exit-code -- index.d.ts index.js

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

step "generated prop types match schema/props.schema.json (npm run generate:types)"
regenerated schema/props.schema.json generate:types src/generated/props.ts

step "tsc --noEmit (strict; src/ and examples/)"
npm run --silent typecheck

step "TypeScript build (src/ to dist/, examples/ to dist/examples/)"
npm run --silent build:ts

step "sandbox binary (for the Node tests against real ClickHouse)"
# The dev build, which the Rust tests below share; the Node tests find it
# through SANDBOX_BIN (scripts/lib/sandbox-client.mjs).
cargo build --locked -p clickhouse-schema-sandbox
export SANDBOX_BIN="$PWD/target/debug/sandbox"
# The Node sandbox tests run their sandboxes from fixed directories
# (.sandbox-test, .sandbox-alchemy for the Alchemy end-to-end tests,
# .sandbox-install for the install-from-tarballs test), so they are
# stopped here even if the test process dies before its own teardown.
trap 'kill -- -"$cross_pid" 2>/dev/null || true
      for d in .sandbox-test .sandbox-alchemy .sandbox-install .sandbox-live-schema .sandbox-fanout .sandbox-coordination .sandbox-rebuild; do "$SANDBOX_BIN" stop --dir "$d" >/dev/null 2>&1 || true; done' EXIT

step "Rust tests"
cargo test --workspace --locked

step "Node tests (native addon)"
# binaries.test.mjs and install.test.mjs need every platform's build: they run
# last.
node --test --test-reporter=spec $(ls tests/*.test.mjs | grep -v -e tests/install.test.mjs -e tests/binaries.test.mjs)

step "Node tests (WebAssembly addon)"
# NAPI_RS_FORCE_WASI=error makes the loader take the WASI build or fail; each
# test file also asserts which build it got. binaries.test.mjs loads no addon,
# and install.test.mjs deploys on both builds itself.
NAPI_RS_FORCE_WASI=error node --test --test-reporter=spec \
  $(ls tests/*.test.mjs | grep -v -e tests/install.test.mjs -e tests/binaries.test.mjs)

step "the other platforms' addons: waiting for the background build"
if ! wait "$cross_pid"; then
  cat "$CROSS_TARGET_DIR/build-all.log" >&2
  echo "the cross builds failed (log above)" >&2
  exit 1
fi
sed -n '/==> binaries/,$p' "$CROSS_TARGET_DIR/build-all.log"

step "the linux-arm64-gnu addon, loaded by an arm64 Node.js under qemu"
bash scripts/check-arm64.sh

step "the win32-x64-gnu addon, loaded by the official node.exe under Wine"
bash scripts/check-windows.sh

step "Node tests of the packages: every platform's binary, and the release installed by name"
node --test --test-reporter=spec tests/binaries.test.mjs tests/install.test.mjs
