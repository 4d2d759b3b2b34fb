#!/bin/sh
# Installs the system packages the sandbox test bed runs (crates/sandbox-hosts): ClickHouse 18.16 server
# and client, ZooKeeper 3.8 (jars + JRE; the sandbox runs its own instances, not a system service) and
# iproute2 (network namespaces). Debian 12, as root (or with sudo).
#
# Idempotent and silent when everything is present: `apt-get update` only runs when something is missing.
set -eu

PACKAGES="clickhouse-server clickhouse-client zookeeper iproute2"

is_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

missing_packages() {
    missing=""
    for pkg in $PACKAGES; do
        is_installed "$pkg" || missing="$missing $pkg"
    done
}

missing_packages
if [ -n "$missing" ]; then
    # Another test run on this machine may be installing them right now: wait for it, then look again.
    . "$(dirname "$0")/lib/setup-lock.sh"
    setup_lock
    missing_packages
fi

if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install-deps: need root to install:$missing" >&2
        exit 1
    fi

    # Keep the package's own clickhouse-server service from starting during the install: the sandbox
    # starts its servers itself, and a system one would only hold memory and /var/lib/clickhouse.
    # invoke-rc.d and deb-systemd-invoke both honour policy-rc.d; an existing one (containers ship one)
    # is left as it is.
    policy=/usr/sbin/policy-rc.d
    own_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod 755 "$policy"
        own_policy=1
    fi
    cleanup() {
        if [ -n "$own_policy" ]; then $SUDO rm -f "$policy"; fi
    }
    trap cleanup EXIT INT TERM

    echo "install-deps: installing$missing" >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null

    # Under systemd the unit would still start at the next boot; the sandbox never uses it.
    case "$missing" in
        *clickhouse-server*)
            if [ -d /run/systemd/system ]; then
                $SUDO systemctl disable --now clickhouse-server >/dev/null 2>&1 || true
            fi
            ;;
    esac
fi

# Each sandbox binds ZooKeeper to its own bridge address on port 2181; a wildcard listener on 2181 in the
# root namespace (a system ZooKeeper from the `zookeeperd` package, for instance) makes that bind fail.
if command -v ss >/dev/null 2>&1 && ss -Hltn 'sport = :2181' 2>/dev/null | grep -Eq '(\*|0\.0\.0\.0|\[::\]):2181'; then
    echo "install-deps: warning: something listens on *:2181 (system ZooKeeper?); sandboxes cannot start" \
        "their ZooKeeper until it stops (systemctl disable --now zookeeper)" >&2
fi

exit 0
