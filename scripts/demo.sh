#!/usr/bin/env bash
# The demo, from a fresh clone: installs what it needs, builds the addon and the
# sandbox, starts a local 3-pod sandbox cluster whose pods are real ClickHouse
# servers, walks through a schema's lifecycle against it, and tears it down.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

say "Installing system packages (ClickHouse, ZooKeeper, iproute2) if missing..."
bash scripts/install-deps.sh
say "Installing npm packages and building the native addon and the sandbox (the first build takes a few minutes)..."
npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
cargo build --quiet --release --locked -p clickhouse-schema-sandbox

export SANDBOX_DIR=.sandbox-demo
trap 'say "Stopping the sandbox..."; target/release/sandbox stop --dir "$SANDBOX_DIR" || true' EXIT
target/release/sandbox stop --dir "$SANDBOX_DIR" >/dev/null 2>&1 || true
# Empty disks every time: the narrative (what runs where, the ledger) starts from nothing.
rm -rf "$SANDBOX_DIR"
say "Starting a 3-pod sandbox cluster (a local Kubernetes API whose pods are real ClickHouse servers)..."
target/release/sandbox start --dir "$SANDBOX_DIR" --pods 3

node scripts/demo.mjs "$SANDBOX_DIR"
