#!/usr/bin/env bash
# After `napi build --target wasm32-wasip1-threads --output-dir target/wasi` (npm run build:wasm):
# puts the WebAssembly build where it is loaded from.
#   - npm/wasm32-wasi/: every file that package's `files` lists (the .wasm, the WASI loaders and
#     workers for Node and browsers, their typings), so it is the package a release publishes
#     (tests/binaries.test.mjs checks it, tests/install.test.mjs installs it);
#   - next to index.js: the .wasm, the Node loader and its worker, which the generated index.js of
#     this working tree loads when NAPI_RS_FORCE_WASI is set (the Node tests' WebAssembly pass).
set -euo pipefail
cd "$(dirname "$0")/.."
from=target/wasi
package=npm/wasm32-wasi
mapfile -t files < <(node -p 'require("./'"$package"'/package.json").files.join("\n")')
for f in "${files[@]}"; do
    [ -f "$from/$f" ] || { echo "wasm-artifacts: $from/$f is missing (listed in $package/package.json files)" >&2; exit 1; }
    cp "$from/$f" "$package/$f"
done
binary="$(node -p 'require("./package.json").napi.binaryName')"
cp "$from/$binary.wasm32-wasi.wasm" "$from/$binary.wasi.cjs" "$from/wasi-worker.mjs" .
