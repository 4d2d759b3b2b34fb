#!/bin/sh
# Installs the sandbox's second ClickHouse engine: chdb-core, ClickHouse 26.9 as a Python extension
# (PyPI), into a venv under ~/.cache/alchemy-clickhouse-schema/. Pods started with `--engine modern`
# run their SQL on it through the stand-in client crates/sandbox-hosts/modern/clickhouse-client.py.
# No modern ClickHouse server or client package reaches this machine; chdb-core is the one modern
# engine that does (a wheel with the engine inside, no server process).
#
# Pinned, and reused when present: the venv is complete only once its marker file exists, so an
# interrupted install is redone. Prints the venv's python on stdout. Runs under the machine-wide
# setup lock (two test runs must not run apt-get or pip into one venv at once).
set -eu

VERSION=26.9.0
VENV="${CHSBX_MODERN_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/alchemy-clickhouse-schema/chdb-core-$VERSION}"
MARKER="$VENV/.installed"

if [ ! -e "$MARKER" ]; then
    . "$(dirname "$0")/lib/setup-lock.sh"
    setup_lock
fi
if [ ! -e "$MARKER" ]; then
    # Debian's python3 has no venv module without python3-venv.
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        echo "install-modern-engine: installing python3-venv" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    fi
    echo "install-modern-engine: chdb-core $VERSION into $VENV (about 560 MB)" >&2
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
    # --no-deps: the engine needs none of the dataframe packages chdb declares (pandas, pyarrow).
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps "chdb-core==$VERSION"
    "$VENV/bin/python" -c 'import chdb._chdb' >/dev/null
    touch "$MARKER"
fi
echo "$VENV/bin/python"
