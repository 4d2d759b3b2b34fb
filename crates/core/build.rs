//! Lets the napi CLI regenerate `index.d.ts`: with the `napi` feature, the
//! `#[napi(object)]` declarations of the recorded state are written out while
//! this crate compiles, so the CLI must be able to force a recompile (it sets
//! `NAPI_FORCE_BUILD_CLICKHOUSE_SCHEMA_CORE`) and a new type-definition folder
//! must recompile it too.
fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=NAPI_FORCE_BUILD_CLICKHOUSE_SCHEMA_CORE");
    println!("cargo::rerun-if-env-changed=NAPI_TYPE_DEF_TMP_FOLDER");
}
