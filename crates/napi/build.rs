//! Per-platform link arguments for the Node addon (napi-rs), and where the macOS cross builds of
//! scripts/build-all.sh find the framework stubs they link against.
fn main() {
    napi_build::setup();
    // Given here rather than in RUSTFLAGS: RUSTFLAGS is part of every crate's fingerprint, so a stub
    // directory that differs per clone would rebuild every dependency from the build cache; this
    // reaches only the addon's own link.
    println!("cargo:rerun-if-env-changed=CLICKHOUSE_SCHEMA_MACOS_FRAMEWORKS");
    if let Some(dir) = std::env::var_os("CLICKHOUSE_SCHEMA_MACOS_FRAMEWORKS")
        && std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos")
    {
        println!("cargo:rustc-link-search=framework={}", dir.to_string_lossy());
    }
}
