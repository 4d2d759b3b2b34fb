//! Test bed only: a Kubernetes API subset (discovery, pods, pods/exec over WebSocket v5/v4,
//! bearer tokens with RBAC-like rules) whose pods are real ClickHouse servers from
//! `clickhouse-schema-sandbox-hosts`. kubectl and kube-rs talk to it unchanged through the kubeconfig it writes.

pub mod api;
pub mod api_log;
pub mod auth;
pub mod cli;
pub mod control;
pub mod exec;
pub mod exec_log;
pub mod faults;
pub mod kubeconfig;
pub mod pods;
pub mod runtime;
pub mod sandbox;
pub mod selector;
pub mod server;
pub mod state;
pub mod status;
pub mod tls;

pub use api_log::ApiRequest;
pub use auth::Tokens;
pub use exec::ExecProtocol;
pub use exec_log::ExecRecord;
pub use faults::{DropPoint, Fault};
pub use pods::{Container, Phase, Pod};
pub use runtime::{LocalProcess, PodRuntime};
pub use sandbox::{RuntimeKind, Sandbox, SandboxError, SandboxInfo, SandboxOptions};
pub use state::{AddPod, Passwords, PodState};
