#!/usr/bin/env bash
# Starts or stops the local sandbox: a Kubernetes API subset served by the
# project whose pods are real ClickHouse servers (see crates/sandbox).
#   scripts/sandbox.sh start   # SANDBOX_LAYOUT=2,2 for two shards of two replicas (default 3:
#                              # one shard of three); SANDBOX_ENGINE=modern for ClickHouse 26.9
#                              # pods; writes .sandbox/kubeconfig
#   scripts/sandbox.sh stop
# SANDBOX_DIR overrides the directory (default .sandbox), so tests can run their own.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${SANDBOX_DIR:-.sandbox}"

case "${1:-}" in
  start)
    bash scripts/install-deps.sh
    # SANDBOX_ENGINE=modern: pods of the 26.9 engine (README, "The second engine").
    case "${SANDBOX_ENGINE:-}" in modern | 26.9) bash scripts/install-modern-engine.sh >/dev/null ;; esac
    cargo build --quiet --release -p clickhouse-schema-sandbox
    # SANDBOX_LAYOUT reaches `sandbox start` through its environment.
    exec target/release/sandbox start --dir "$dir"
    ;;
  stop)
    if [ -x target/release/sandbox ]; then
      exec target/release/sandbox stop --dir "$dir"
    fi
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
