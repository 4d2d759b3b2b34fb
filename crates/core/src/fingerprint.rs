//! Fingerprint. OWNER: config helper. Stub so the crate compiles.

use crate::config::ResolvedConfig;

pub fn fingerprint(_config: &ResolvedConfig) -> String {
    String::new()
}
