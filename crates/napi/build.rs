//! Per-platform link arguments for the Node addon (napi-rs).
fn main() {
    napi_build::setup();
}
