//! The ClickHouse language: the lexer, what a statement declares, table and
//! view definitions and their comparison, quoting and reading back
//! ClickHouse's text formats, the onCluster check, the distributed DDL status table, the other statement rules (one statement an entry,
//! Replicated paths a fanout cannot create), the client option names a
//! setting may not take, the credential literal warnings, and the redaction of
//! what the server prints.
//!
//! Pure knowledge of the language: nothing here reaches `transport`,
//! `kubernetes`, the reconcile runs or the features that use it; only the
//! credential warnings read the resolved config (`config`, `error`).

pub(crate) mod clickhouse_text;
pub(crate) mod client_options;
pub mod credential_literals;
pub mod ddl_status;
pub mod declared;
pub mod definition;
pub mod lexer;
pub mod on_cluster;
pub mod redact;
pub mod statement_rules;
