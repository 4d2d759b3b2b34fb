//! Test bed only: a Kubernetes API subset (discovery, pods, pods/exec over WebSocket v5/v4,
//! `coordination.k8s.io` leases, bearer tokens with RBAC-like rules) whose pods are real ClickHouse
//! servers from `clickhouse-schema-sandbox-hosts`, laid out in shards and replicas as the ClickHouse
//! operator names them. kubectl and kube-rs talk to it unchanged through the kubeconfig it writes.

mod api;
mod api_log;
mod auth;
pub mod cli;
mod control;
mod exec;
mod exec_log;
mod exec_protocol;
mod faults;
mod images;
mod kubeconfig;
mod leases;
mod openapi;
mod pods;
mod runtime;
mod sandbox;
mod selector;
mod server;
mod state;
mod status;
mod table;
mod tls;
mod topology;

pub use api_log::ApiRequest;
pub use auth::Tokens;
pub use clickhouse_schema_sandbox_hosts::Engine;
pub use exec_log::ExecRecord;
pub use exec_protocol::ExecProtocol;
pub use faults::{DropPoint, Fault};
pub use pods::{Container, Phase, Pod, Userland};
pub use runtime::{LocalProcess, PodRuntime};
pub use sandbox::{RuntimeKind, Sandbox, SandboxError, SandboxInfo, SandboxOptions};
pub use state::{AddPod, Passwords, PodState};
pub use topology::Layout;
