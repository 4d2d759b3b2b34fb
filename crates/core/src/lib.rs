//! Pure core of alchemy-clickhouse-schema.
//!
//! No I/O lives here: no network, no filesystem, no clock. Everything that
//! touches Kubernetes or ClickHouse is reached through traits implemented by
//! other crates, so every rule in this crate is unit-testable on plain values.
//!
//! What to import from here: the crate root re-exports what a binding needs
//! to drive a resource: [`validate()`] turns props into a [`ResolvedConfig`];
//! [`plan`], [`apply`], [`verify`] and [`destroy`] run the lifecycle against a
//! [`Cluster`] built from the transport traits ([`PodLister`], [`Executor`],
//! [`Clock`], [`Cancel`]); [`SchemaState`] is what apply returns and the next
//! call reads back; every failure is a [`ClickHouseSchemaError`]. The modules
//! stay public for the narrower pieces (command rendering, redaction, the
//! lexer, cluster identity), which hosts and tests reach by module path.
//!
//! Layout: the ClickHouse language is `sql`, the Kubernetes knowledge
//! `kubernetes`, the props and their model `config`. The features
//! (`live_schema`, `rebuild`, and the lease and ledger of `coordination`) keep
//! their pure part in `mod.rs`, which imports nothing from `transport`, and
//! their driver, steps of a `reconcile` run over the transport, in `run.rs`.
//! `lifecycle`, `state`, `transport`, `command` and `error` are the top. No
//! module imports another in a circle (`scripts/lib/module-graph.mjs`).

pub mod command;
pub mod config;
pub mod converge;
pub mod coordination;
pub(crate) mod error;
pub mod kubernetes;
pub mod lifecycle;
pub mod live_schema;
pub mod rebuild;
pub(crate) mod reconcile;
pub mod sql;
pub mod state;
pub mod transport;

pub use config::ResolvedConfig;
pub use config::fingerprint::fingerprint;
pub use config::validate::validate;
pub use error::{ClickHouseSchemaError, ConfigIssue, ErrorKind};
pub use kubernetes::cluster_id::{ClusterEndpoint, cluster_id};
pub use lifecycle::{ApplyOutcome, VerifyOutcome, apply, destroy, destroy_reaches_cluster, plan, verify};
pub use state::{PodRef, SchemaState};
pub use transport::{
    Cancel, Clock, Cluster, Event, Events, ExecOutput, ExecRequest, Executor, LeaseApi, LeaseRecord,
    LeaseSpec, NeverCancelled, NoEvents, PodInfo, PodLister, TransportError, TransportErrorKind,
};
