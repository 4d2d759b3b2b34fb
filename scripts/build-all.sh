#!/usr/bin/env bash
# Builds the native addon for every target in package.json's `napi.targets` (wasm32 excepted: that
# binary is built elsewhere) with the `release-lto` Cargo profile, from this one Linux x86_64 machine,
# and puts each binary into its per-platform package: npm/<platform>/<binaryName>.<platform>.node.
# Prints each binary's size and build time at the end.
#
#   npm run build:all                               every native target
#   npm run build:all -- linux-arm64-gnu darwin-x64  only these (npm/ directory names or triples)
#   BUILD_ALL_PROFILE=cross-check npm run build:all  the test command's quick build (Cargo.toml)
#
# Installs what the cross builds need first, and only what is missing (so a second run installs
# nothing): the Rust std of each target (rustup), zig (PyPI `ziglang`) and cargo-zigbuild
# (crates.io) for the Linux and macOS targets, mingw-w64 (Debian) for Windows. Needs root or sudo
# for apt-get only when mingw-w64 is missing.
#
# How each target is built (the napi CLI picks the cargo subcommand):
#   linux gnu     cargo-zigbuild, linked against glibc 2.17 symbols (runs on any glibc >= 2.17)
#   linux musl    cargo-zigbuild (napi adds -C target-feature=-crt-static: a musl cdylib)
#   macOS         cargo-zigbuild, with stub .tbd files for the Security and CoreFoundation
#                 frameworks (zig ships libSystem but no frameworks; see write_framework_stubs)
#   windows gnu   plain cargo with Debian's mingw-w64 gcc as linker (see build_windows_gnu)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

ZIGLANG_VERSION="0.17.1"
CARGO_ZIGBUILD_VERSION="0.24.1"
GLIBC_VERSION="2.17"
MAX_SIZE=$((6 * 1024 * 1024))
# release-lto for anything published; the test command uses cross-check (see Cargo.toml).
PROFILE="${BUILD_ALL_PROFILE:-release-lto}"

TOOLS="$CARGO_TARGET_DIR/cross-tools"
STAGE="$CARGO_TARGET_DIR/napi-stage"
NAPI="$ROOT/node_modules/.bin/napi"

step() { printf '\n==> %s\n' "$*" >&2; }
die() { echo "build-all: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root to run: $*"
    fi
}

# ---- which targets ---------------------------------------------------------------------------------

[ -x "$NAPI" ] || { step "npm packages (napi CLI)"; npm ci --no-audit --no-fund --loglevel=error; }

# "triple platformArchABI binaryName" for each native target of package.json, in its order.
mapfile -t ALL_TARGETS < <(node --input-type=module -e '
  import { readFileSync } from "node:fs"
  import { parseTriple } from "@napi-rs/cli"
  const { napi } = JSON.parse(readFileSync("package.json", "utf8"))
  for (const triple of napi.targets) {
    const t = parseTriple(triple)
    if (t.arch !== "wasm32") console.log(`${t.triple} ${t.platformArchABI} ${napi.binaryName}`)
  }')

TARGETS=()
if [ "$#" -eq 0 ]; then
    TARGETS=("${ALL_TARGETS[@]}")
else
    for want in "$@"; do
        found=""
        for line in "${ALL_TARGETS[@]}"; do
            read -r triple platform _ <<<"$line"
            if [ "$want" = "$triple" ] || [ "$want" = "$platform" ]; then TARGETS+=("$line"); found=1; fi
        done
        [ -n "$found" ] || die "'$want' is not a native target of package.json napi.targets"
    done
fi

needs() { # needs <substring of a triple>: is a target with it selected?
    local line
    for line in "${TARGETS[@]}"; do case "$line" in *"$1"*) return 0 ;; esac; done
    return 1
}

# ---- toolchains (idempotent) -----------------------------------------------------------------------

# shellcheck source=lib/setup-lock.sh
. scripts/lib/setup-lock.sh
setup_lock

step "Rust targets (rustup)"
installed="$(rustup target list --installed)"
missing=()
for line in "${TARGETS[@]}"; do
    read -r triple _ <<<"$line"
    grep -qx "$triple" <<<"$installed" || missing+=("$triple")
done
if [ "${#missing[@]}" -gt 0 ]; then rustup target add "${missing[@]}"; else echo "all present" >&2; fi

if needs linux || needs apple; then
    step "zig $ZIGLANG_VERSION (PyPI ziglang) and cargo-zigbuild $CARGO_ZIGBUILD_VERSION"
    if [ "$(python3 -m ziglang version 2>/dev/null)" != "$ZIGLANG_VERSION" ]; then
        python3 -m pip install --quiet --disable-pip-version-check "ziglang==$ZIGLANG_VERSION"
    fi
    # The napi CLI wants `zig` on PATH; the PyPI package provides `python3 -m ziglang`.
    mkdir -p "$TOOLS/bin"
    printf '#!/bin/sh\nexec python3 -m ziglang "$@"\n' >"$TOOLS/bin/zig"
    chmod +x "$TOOLS/bin/zig"
    export PATH="$TOOLS/bin:$PATH"
    if ! cargo zigbuild --help >/dev/null 2>&1 \
        || ! cargo install --list | grep -q "^cargo-zigbuild v$CARGO_ZIGBUILD_VERSION:"; then
        cargo install --locked --quiet cargo-zigbuild --version "$CARGO_ZIGBUILD_VERSION"
    fi
    echo "zig $(zig version), $(cargo install --list | grep '^cargo-zigbuild ')" >&2
fi

if needs windows-gnu; then
    step "mingw-w64 (Debian gcc-mingw-w64-x86-64)"
    if ! command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            gcc-mingw-w64-x86-64 >/dev/null
    fi
    x86_64-w64-mingw32-gcc --version | head -n1 >&2
fi

setup_unlock

# ---- macOS framework stubs -------------------------------------------------------------------------

# rustls-native-certs and rustls-platform-verifier (kube's TLS) link Apple's Security and
# CoreFoundation frameworks through security-framework-sys and core-foundation-sys. zig carries the
# macOS libc (libSystem) but no framework, and Apple's SDK cannot be fetched here, so the linker gets
# text stubs (.tbd, the format the SDK's own frameworks come in): each names the framework's install
# path on macOS and exports every function and static the -sys crate declares. The binary then loads
# the real framework from the system at run time, as one linked against the SDK does.
write_framework_stubs() {
    local dir="$TOOLS/macos-frameworks"
    node scripts/lib/macos-framework-stubs.mjs "$dir"
    echo "$dir"
}

# ---- windows-gnu: libnode.dll stub -----------------------------------------------------------------

# napi-build links every windows-gnu addon with `-lnode` and panics unless it finds a libnode.dll
# (LIBNODE_PATH): it expects a MinGW-built Node. napi-sys resolves every Node-API function at run
# time from the process that loads it (its default `dyn-symbols` feature), so nothing is imported
# from that library: an empty DLL satisfies the link and the binary imports no libnode.dll.
libnode_stub() {
    local dir="$TOOLS/libnode-stub"
    if [ ! -f "$dir/libnode.dll" ]; then
        mkdir -p "$dir"
        printf 'int clickhouse_schema_libnode_stub;\n' >"$dir/stub.c"
        x86_64-w64-mingw32-gcc -shared -o "$dir/libnode.dll" "$dir/stub.c"
    fi
    echo "$dir"
}

# ---- build -----------------------------------------------------------------------------------------

RESULTS=()
FAILED=()
for line in "${TARGETS[@]}"; do
    read -r triple platform binary <<<"$line"
    file="$binary.$platform.node"
    step "$triple -> npm/$platform/$file"
    args=(build --platform --profile "$PROFILE" --manifest-path crates/napi/Cargo.toml
        --package-json-path package.json --output-dir "$STAGE/$platform" --js index.js --esm --dts index.d.ts)
    envs=()
    case "$triple" in
        *-linux-gnu) args+=(--target "$triple.$GLIBC_VERSION" --cross-compile) ;;
        *-linux-musl) args+=(--target "$triple" --cross-compile) ;;
        *-apple-darwin)
            frameworks="$(write_framework_stubs)"
            args+=(--target "$triple" --cross-compile)
            # Read by crates/napi/build.rs (not RUSTFLAGS, which would rebuild every dependency
            # whenever this directory moves, as it does from one clone to the next).
            envs+=("CLICKHOUSE_SCHEMA_MACOS_FRAMEWORKS=$frameworks")
            # Without it zig records its own newest macOS (15.0) as the minimum; these are rustc's
            # defaults, what a build on a Mac gives.
            case "$triple" in
                x86_64-*) envs+=("MACOSX_DEPLOYMENT_TARGET=${MACOSX_DEPLOYMENT_TARGET:-10.12}") ;;
                *) envs+=("MACOSX_DEPLOYMENT_TARGET=${MACOSX_DEPLOYMENT_TARGET:-11.0}") ;;
            esac
            ;;
        *-windows-gnu)
            args+=(--target "$triple")
            envs+=("LIBNODE_PATH=$(libnode_stub)")
            ;;
        *) die "no recipe for $triple" ;;
    esac
    rm -rf "${STAGE:?}/$platform"
    start=$(date +%s)
    if ! env "${envs[@]}" "$NAPI" "${args[@]}" || [ ! -f "$STAGE/$platform/$file" ]; then
        echo "build-all: $triple FAILED" >&2
        FAILED+=("$platform")
        continue
    fi
    seconds=$(($(date +%s) - start))
    mkdir -p "npm/$platform"
    rm -f "npm/$platform"/*.node
    cp "$STAGE/$platform/$file" "npm/$platform/$file"
    RESULTS+=("$platform $file $seconds")
done

# ---- summary ---------------------------------------------------------------------------------------

step "binaries"
over=0
printf '%-18s %10s %8s  %s\n' platform bytes MiB "build s" >&2
for r in "${RESULTS[@]}"; do
    read -r platform file seconds <<<"$r"
    size=$(stat -c %s "npm/$platform/$file")
    mark=""
    # The size target is for published builds; a cross-check build is unoptimised.
    if [ "$PROFILE" = release-lto ] && [ "$size" -gt "$MAX_SIZE" ]; then mark="  over 6 MiB"; over=1; fi
    printf '%-18s %10d %8s %8d%s\n' "$platform" "$size" \
        "$(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1048576 }')" "$seconds" "$mark" >&2
done
[ "$over" -eq 0 ] || echo "build-all: warning: a binary is over 6 MiB" >&2
if [ "${#FAILED[@]}" -gt 0 ]; then die "failed: ${FAILED[*]}"; fi
