//! The fingerprint: a digest of what is applied, compared across converges to
//! decide whether anything has to run at all.
//!
//! It covers what determines the DDL's effect — the ordered statements, the
//! settings, the resolved client and the execution model — and nothing that
//! only says where or how the apply is driven. The target, the cluster
//! identity and the pod set are compared separately by the caller.
//!
//! # Canonical encoding (version 1)
//!
//! The digest is the lowercase hex SHA-256 of this byte string:
//!
//! ```text
//! "clickhouse-schema/fingerprint/v1\n"          33 ASCII bytes, no length prefix
//! field('q', statement)       for each statement, in array order
//! field('k', name)            for each setting, ascending by the UTF-8 bytes of its name,
//!   field('s', value)           followed by its value: 's' for a string value (the string),
//!   | field('n', number)        'n' for a number (its canonical decimal, see below)
//! field('u', client.user)
//! field('d', client.database)
//! field('e', client.passwordEnv)
//! field('p', client.port)     the port in decimal ASCII, e.g. "9000"
//! field('m', mode)            "fanout" or "onCluster"
//! field('c', cluster)         only when mode is "onCluster"
//!
//! field(tag, bytes) = tag (one ASCII byte)
//!                     || len(bytes) as an unsigned 64-bit big-endian integer
//!                     || bytes (UTF-8)
//! ```
//!
//! Every field is length-prefixed and tagged, and the tag sequence follows a
//! fixed grammar (`q* (k (s|n))* u d e p m c?`), so the byte string parses
//! back into exactly one config: no two different configs can collide by
//! concatenation (`["ab","c"]` vs `["a","bc"]`, a statement that looks like a
//! setting, and so on).
//!
//! Numbers use [`crate::config::canonical_number`]: integers in plain decimal,
//! other values in Rust's shortest round-trip form without exponent, negative
//! zero as `0`. So `300` and `300.0` fingerprint alike while `300` and `"300"`
//! do not.
//!
//! # Deliberately excluded
//!
//! - `target`, `kubeConfig`: where the DDL lands, compared separately;
//!   kubeConfig also carries machine-local paths.
//! - `waitForPod`, `statementTimeoutMs`, `maxReconcilePasses`, `parallelism`,
//!   `execMode`, `retry`, `verify`: how the apply is driven and checked; tuning
//!   them must not re-run DDL.
//! - `readyBarrier`: an ordering edge with no effect on the statements.
//! - `onDelete`, `deleteStatements`: they describe teardown, which never runs
//!   during a converge. Including them would make switching to
//!   `onDelete: 'run'` (or fixing a typo in a DROP) re-run the whole create list
//!   against the cluster for no reason. The delete path reads them from the
//!   current props, not from the fingerprint.
//!
//! Changing anything above requires a new version tag; the golden vectors in
//! `tests/fingerprint_golden.rs` exist to make an accidental change fail loudly.

use sha2::{Digest, Sha256};

use crate::config::{Execution, ResolvedConfig, SettingValue, canonical_number};

/// Domain separator and encoding version; bump the version on any encoding change.
pub(crate) const FINGERPRINT_MAGIC: &[u8] = b"clickhouse-schema/fingerprint/v1\n";

/// Lowercase hex SHA-256 over the canonical encoding documented on this module.
pub fn fingerprint(config: &ResolvedConfig) -> String {
    let mut hasher = Sha256::new();
    hasher.update(FINGERPRINT_MAGIC);
    for statement in &config.statements {
        field(&mut hasher, b'q', statement.as_bytes());
    }
    // BTreeMap iterates in ascending byte order of the name, which is what the
    // encoding specifies; input order therefore cannot matter.
    for (name, value) in &config.settings {
        field(&mut hasher, b'k', name.as_bytes());
        match value {
            SettingValue::String(s) => field(&mut hasher, b's', s.as_bytes()),
            SettingValue::Number(n) => field(&mut hasher, b'n', canonical_number(n).as_bytes()),
        }
    }
    let client = &config.client;
    field(&mut hasher, b'u', client.user.as_bytes());
    field(&mut hasher, b'd', client.database.as_bytes());
    field(&mut hasher, b'e', client.password_env.as_bytes());
    field(&mut hasher, b'p', client.port.to_string().as_bytes());
    field(&mut hasher, b'm', config.execution.mode().as_bytes());
    if let Execution::OnCluster { cluster } = &config.execution {
        field(&mut hasher, b'c', cluster.as_bytes());
    }
    hex::encode(hasher.finalize())
}

fn field(hasher: &mut Sha256, tag: u8, bytes: &[u8]) {
    hasher.update([tag]);
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}
