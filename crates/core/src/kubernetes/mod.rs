//! The Kubernetes knowledge: a connection the caller resolves per call, the
//! credential-free identity of a cluster, which proxy reaches the API server,
//! and the scrubbing of credentials from Kubernetes-side text.
//!
//! Pure rules over plain values: nothing here reaches `transport`, ClickHouse
//! (`sql`) or the features that use it.

pub mod cluster_id;
pub mod connection;
pub mod proxy;
pub mod redact;
