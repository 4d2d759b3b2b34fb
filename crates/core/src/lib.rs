//! Pure core of alchemy-clickhouse-schema.
//!
//! No I/O lives here: no network, no filesystem, no clock. Everything that
//! touches Kubernetes or ClickHouse is reached through traits implemented by
//! other crates, so every rule in this crate is unit-testable on plain values.

pub(crate) mod client_options;
pub mod cluster_id;
pub mod command;
pub mod config;
pub mod credential_literals;
pub mod error;
pub mod fingerprint;
pub mod lexer;
pub mod lifecycle;
pub mod on_cluster;
pub mod reconcile;
pub mod redact;
pub mod redact_kubernetes;
pub mod state;
pub mod transport;
pub mod validate;

pub use error::{ClickHouseSchemaError, ConfigIssue, ErrorKind};
