//! The Kubernetes knowledge: a connection the caller resolves per call, the
//! credential-free identity of a cluster, which proxy reaches the API server,
//! the scrubbing of credentials from Kubernetes-side text, and a pod selector as
//! text.
//!
//! Pure rules over plain values (and the config's kubeconfig options): nothing
//! here reaches `transport`, ClickHouse (`sql`) or the features that use it.

pub mod cluster_id;
pub mod connection;
pub mod proxy;
pub mod redact;
pub(crate) mod selector;
