// Stub: replaced by the owning helper.
fn main() {}
