#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: installs what the
# tests need, checks formatting and lints, builds the addon, and runs the Rust and
# Node tests (the sandbox tests start their own ClickHouse servers). Exits non-zero
# on the first failure, and ends with a table of its steps and their times.
#
# The order is the critical path of a 2-core machine: the compilers keep both
# cores busy while the test suites that mostly wait (on ClickHouse, leases and
# retries) run beside them in the background. Every test waits on conditions,
# not on fixed delays, so this load is also the proof that they hold on a busy
# machine. Dependencies come from the build cache of an earlier run on this
# machine (scripts/lib/build-cache.sh); the workspace's crates always build.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=lib/steps.sh
. scripts/lib/steps.sh
# shellcheck source=lib/build-cache.sh
. scripts/lib/build-cache.sh

# Every crate is built once per profile here, so cargo's incremental caches only
# cost disk (and copying time in the build cache). A developer's own cargo calls
# keep their default.
export CARGO_INCREMENTAL=0

# Each Node pass runs its sandboxes from directories of its own
# (tests/lib/sandbox-dir.mjs), so the passes can run side by side; all of them
# are stopped on exit, even if a test process died before its own teardown.
SANDBOXES="$PWD/.test-sandboxes"
# A copy of the dev build's binary: the Rust test build below may link it again
# (with the workspace's dev-dependency features) while the Node tests run it.
export SANDBOX_BIN="$SANDBOXES/bin/sandbox"
stop_sandboxes() {
  local info
  [ -x "$SANDBOX_BIN" ] || return 0
  for info in "$SANDBOXES"/*/.sandbox-*/sandbox.json; do
    [ -e "$info" ] || continue
    "$SANDBOX_BIN" stop --dir "$(dirname "$info")" >/dev/null 2>&1 || true
  done
}
on_exit() {
  local status=$?
  steps_stop_all
  stop_sandboxes
  steps_table
  exit "$status"
}
trap on_exit EXIT

# The second ClickHouse engine (26.9, chdb-core from PyPI) for the sandbox's modern pods: a pinned
# venv under ~/.cache/alchemy-clickhouse-schema, reused when present (scripts/install-modern-engine.sh).
step "system packages (ClickHouse 18.16, ZooKeeper, iproute2), the 26.9 engine (chdb-core) and npm packages, side by side" \
  bash -c 'set -e
           bash scripts/install-deps.sh & deps=$!
           bash scripts/install-modern-engine.sh >/dev/null & modern=$!
           npm ci --no-audit --no-fund --loglevel=error
           wait "$deps"
           wait "$modern"'

step "cargo fmt --check" cargo fmt --all --check

# The layering of each crate's modules (see the checker's header): fails on an import circle.
step "no import circles between modules (scripts/lib/module-graph.mjs)" \
  node scripts/lib/module-graph.mjs crates/core/src crates/kube/src crates/napi/src crates/sandbox/src crates/sandbox-hosts/src

step "build cache: restore the dependencies" build_cache_restore

# Lints without a build of their own: every compile of a workspace crate below
# (the addons for every platform, the sandbox, the Rust test build with its
# benches and examples) goes through clippy-driver, which is rustc plus
# clippy's lints, and fails on any warning. This is what `cargo clippy` does,
# with `cargo check`; here the real builds carry it, so the dependencies are
# compiled once per target instead of once more for checking (the registry
# crates are built by plain rustc: cargo applies the wrapper to workspace
# members only). Every platform's cfg-gated code is linted this way, the
# WebAssembly binding's included.
RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver)"
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

# The cross builds get their own target directory: cargo locks a target
# directory's profile for a whole build, and the other platforms' builds run in
# the background while the steps below build too.
CROSS_TARGET_DIR="$PWD/target/cross"
build_all() { CARGO_TARGET_DIR="$CROSS_TARGET_DIR" BUILD_ALL_PROFILE=cross-check bash scripts/build-all.sh "$@"; }

# Built the way a release builds it (glibc 2.17, see scripts/build-all.sh) but
# unoptimised (Cargo.toml's cross-check profile); it is the addon every Node
# test loads, from next to index.js. The napi CLI regenerates index.d.ts (the
# JavaScript API's reference) from the Rust declarations, and index.js from
# package.json's targets, on every build: both must be committed as generated.
native_addon() {
  build_all linux-x64-gnu
  local f
  for f in index.d.ts index.js; do
    if ! diff -u "$f" "$CROSS_TARGET_DIR/napi-stage/linux-x64-gnu/$f"; then
      cp "$CROSS_TARGET_DIR/napi-stage/linux-x64-gnu/$f" "$f"
      echo "$f is out of date with the Rust declarations or package.json: it has now been regenerated; commit it." >&2
      return 1
    fi
  done
  cp npm/linux-x64-gnu/clickhouse-schema.linux-x64-gnu.node .
}
step "the linux-x64-gnu addon (npm run build:all, cross-check profile); index.d.ts and index.js as committed" native_addon

# Every other native target of package.json's napi.targets, the same way, for
# tests/binaries.test.mjs, scripts/check-arm64.sh and tests/install.test.mjs at
# the end (linux-x64-gnu is built already: build-all finds it fresh). Niced: it
# is not on the critical path, the steps below are.
step_bg cross "the other platforms' addons (cross-check profile)" \
  env CARGO_TARGET_DIR="$CROSS_TARGET_DIR" BUILD_ALL_PROFILE=cross-check nice -n 10 bash scripts/build-all.sh

# Runs `npm run <script>` and fails if it changed any of `files` (generated
# files must be committed as generated). Usage: regenerated <source> <script> <files...>
regenerated() {
  local source="$1" script="$2" before f
  shift 2
  before="$(mktemp -d)"
  for f in "$@"; do cp "$f" "$before/$(basename "$f")"; done
  npm run --silent "$script"
  for f in "$@"; do
    if ! diff -u "$before/$(basename "$f")" "$f"; then
      echo "$f is out of date with $source: it has now been regenerated; commit it." >&2
      rm -rf "$before"
      return 1
    fi
  done
  rm -rf "$before"
}
step "generated prop types match schema/props.schema.json (npm run generate:types)" \
  regenerated schema/props.schema.json generate:types src/generated/props.ts

step "tsc --noEmit (strict; src/ and examples/)" npm run --silent typecheck

step "TypeScript build (src/ to dist/, examples/ to dist/examples/)" npm run --silent build:ts

# The Rust test build, which also builds the sandbox binary the Node tests use
# (found through SANDBOX_BIN, scripts/lib/sandbox-client.mjs). One build for
# both: `cargo build -p clickhouse-schema-sandbox` alone resolves the
# dependencies' features without the workspace's dev-dependencies, so the test
# build after it compiled some 130 registry crates a second time.
# --all-targets: the benches and examples are built (and linted) too; only the
# tests run, further below.
rust_test_build() {
  cargo test --workspace --all-targets --locked --no-run
  mkdir -p "$(dirname "$SANDBOX_BIN")"
  cp target/debug/sandbox "$SANDBOX_BIN"
}
step "Rust tests: build (and lint), with the sandbox binary for the Node tests" rust_test_build

# The Node test files of one build; binaries.test.mjs and install.test.mjs need
# every platform's build, and run last.
node_tests() {
  ls tests/*.test.mjs | grep -v -e tests/install.test.mjs -e tests/binaries.test.mjs
}
# The files whose tests talk to ClickHouse through the sandbox: run once more on
# the 26.9 engine (SANDBOX_ENGINE=modern; tests/lib/engine.mjs names each test's
# engine). Native addon only: the WebAssembly pass proves that build, and the
# engine pass proves the product against a modern server's behaviour; the two
# are independent, and a third full pass would not fit the 2-core budget.
engine_tests() {
  ls tests/{live-schema,rebuild,rebuild-traffic,rebuild-faults,converge,coordination,alchemy,fanout,sandbox,images}.test.mjs
}
# Usage: node_pass <name> <files-function> [env...]: those test files, two at a
# time (node --test runs one at a time on 2 cores), sandboxes under its own root.
node_pass() {
  local name="$1" files="$2"
  shift 2
  rm -rf "${SANDBOXES:?}/$name"
  mkdir -p "$SANDBOXES/$name"
  # shellcheck disable=SC2046 # one argument per test file
  env TEST_SANDBOX_ROOT="$SANDBOXES/$name" "$@" \
    node --test --test-concurrency=2 --test-reporter=spec $("$files")
}
export SANDBOXES
export -f node_tests engine_tests node_pass
step_bg node-native "Node tests (native addon, ClickHouse 18.16)" node_pass native node_tests

# Twenty seeds of the rebuild's fault harness (ten on local tables on two pods, ten on a replica
# set of two): each injects one fault at a seeded point of a rebuild under traffic and checks every
# row once after the deploy again. A step of its own beside the passes, since most of its time is
# waiting (cut-over delays, the writer's pauses); native addon and 18.16 only: the WebAssembly pass
# runs the same product code, and the 26.9 engine has no replication (the file's focused tests run
# in every pass).
seed_pass() {
  rm -rf "${SANDBOXES:?}/seeds"
  mkdir -p "$SANDBOXES/seeds"
  env TEST_SANDBOX_ROOT="$SANDBOXES/seeds" REBUILD_FAULT_SEEDS=1-10 REBUILD_FAULT_REPLICATED_SEEDS=31-40 \
    node --test --test-reporter=spec --test-name-pattern='^(starts|seed \d+:)' tests/rebuild-faults.test.mjs
}
export -f seed_pass
step_bg node-seeds "Node tests: 20 seeds of the rebuild's fault harness (native addon, ClickHouse 18.16)" seed_pass

step_bg node-modern "Node tests of the ClickHouse suites on the 26.9 engine (native addon)" \
  node_pass modern engine_tests SANDBOX_ENGINE=modern

# The test build's WebAssembly addon: the cross-check profile like the native
# one (the release profile is for publishing: scripts/build-all.sh and
# npm run build:wasm). Its type declarations go to target/ (a WASI build
# declares only what it exports, not index.d.ts), and it leaves the loader
# index.js alone (--no-js): both stay the native build's, as checked above.
wasm_addon() {
  # shellcheck source=lib/setup-lock.sh
  (. scripts/lib/setup-lock.sh && setup_lock && rustup target add wasm32-wasip1-threads >/dev/null)
  WASM_PROFILE=cross-check npm run --silent build:wasm
  git diff --exit-code -- index.d.ts index.js
}
step "WebAssembly addon (cross-check profile, wasm32-wasip1-threads)" wasm_addon

# NAPI_RS_FORCE_WASI=error makes the loader take the WASI build or fail; each
# test file also asserts which build it got. binaries.test.mjs loads no addon,
# and install.test.mjs deploys on both builds itself.
step_bg node-wasm "Node tests (WebAssembly addon, ClickHouse 18.16)" node_pass wasm node_tests NAPI_RS_FORCE_WASI=error

step "Rust tests" cargo test --workspace --locked

step_wait cross

step "the linux-arm64-gnu addon, loaded by an arm64 Node.js under qemu" bash scripts/check-arm64.sh

step "the win32-x64-gnu addon, loaded by the official node.exe under Wine" bash scripts/check-windows.sh

# Nothing of this run writes to target/ any more (the checks above keep their
# Node.js and Wine prefix in it): its dependencies go to the cache for the next
# run, while the tests below run.
export BUILD_CACHE_DIR BUILD_CACHE_MAX_GB
export -f build_cache_save _build_cache_forget_workspace _build_cache_workspace_packages
step_bg cache "build cache: save" build_cache_save

step "Node tests of the packages: every platform's binary, and the release installed by name" \
  env TEST_SANDBOX_ROOT="$SANDBOXES/packages" \
  node --test --test-concurrency=2 --test-reporter=spec tests/binaries.test.mjs tests/install.test.mjs

step_wait node-native
step_wait node-seeds
step_wait node-modern
step_wait node-wasm
step_wait cache
