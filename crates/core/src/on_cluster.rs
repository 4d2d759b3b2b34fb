//! onCluster validation. OWNER: lexer helper. Stub so the crate compiles.

/// `Err(reason)` when `sql` (found at `field index`, e.g. `statements 1`)
/// cannot keep the onCluster promise for `cluster`. The reason is a complete
/// sentence fragment naming the field and index; the caller prefixes nothing.
pub fn check_statement(_field: &str, _index: usize, _sql: &str, _cluster: &str) -> Result<(), String> {
    Ok(())
}
