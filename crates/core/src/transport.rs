//! The seams between the reconcile logic and the outside world.
//!
//! The core never talks to Kubernetes or reads a clock itself. It asks a
//! [`PodLister`] for pods, an [`Executor`] to run a command in a container and
//! a [`Clock`] for time, so every scenario (churn, replacement, timeouts) can be
//! scripted in unit tests on a fake clock, and the same logic runs over kube-rs
//! or over an executor injected from JavaScript.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// What the reconcile logic needs to know about one pod, independent of kube types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`; the identity of the pod object. Absent only for
    /// executors that cannot tell (the comparison then falls back to names).
    pub uid: Option<String>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
    pub phase: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Names of the pod's containers.
    pub containers: Vec<String>,
}

impl PodInfo {
    /// Terminating and terminal-phase pods can never become Ready again, so
    /// they are not part of the set a fanout has to cover.
    pub fn is_on_its_way_out(&self) -> bool {
        self.terminating || matches!(self.phase.as_deref(), Some("Succeeded") | Some("Failed"))
    }

    /// Whether the pod has a container named `container`.
    pub fn has_container(&self, container: &str) -> bool {
        self.containers.iter().any(|c| c == container)
    }
}

/// One command to run in one container, with its stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub pod: String,
    /// Container to run the command in.
    pub container: String,
    /// argv; never contains a statement (statements travel on stdin).
    pub command: Vec<String>,
    /// Fed to the command's stdin; this is how the statement travels.
    pub stdin: String,
    /// The executor abandons the exec after this long and reports
    /// [`TransportErrorKind::Timeout`].
    pub timeout: Duration,
}

/// The result of an exec that ran to completion (whatever its exit code).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    /// Everything the command wrote to stdout.
    pub stdout: String,
    /// Everything the command wrote to stderr.
    pub stderr: String,
    /// The command's exit code (0..=255).
    pub exit_code: i32,
}

/// Why a transport call failed, which decides whether it is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportErrorKind {
    /// The connection failed or dropped (WebSocket error, reset, 5xx, 429):
    /// worth retrying.
    Transient,
    /// The exec did not finish within its timeout: retried like a transient failure.
    Timeout,
    /// The API refused the call (401, 403, 404, 400): retrying cannot help.
    Refused,
    /// The transport answered with something that is not a result (an exit
    /// code outside 0..=255, say). The command may have run, so it is not
    /// retried; the fault is the transport's, not the statement's.
    InvalidResponse,
}

/// A failure to reach the pod or to learn the command's outcome. Distinct from
/// a command that ran and failed, which is an [`ExecOutput`] with a non-zero
/// exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportError {
    /// Why it failed.
    pub kind: TransportErrorKind,
    /// Describes the failure; must not contain request bodies (statements).
    pub message: String,
    /// HTTP status when the API server answered with one.
    pub http_status: Option<u16>,
}

impl TransportError {
    /// An error of `kind` with no HTTP status.
    pub fn new(kind: TransportErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            http_status: None,
        }
    }

    /// Records the HTTP status the API server answered with.
    pub fn with_http_status(mut self, status: u16) -> Self {
        self.http_status = Some(status);
        self
    }

    /// Whether another attempt can help: transient failures and timeouts.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            TransportErrorKind::Transient | TransportErrorKind::Timeout
        )
    }
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TransportError {}

/// Lists the pods of a namespace that match an equality label selector.
pub trait PodLister: Send + Sync {
    /// The pods of `namespace` whose labels include every pair of `selector`.
    fn list_pods(
        &self,
        namespace: &str,
        selector: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<PodInfo>, TransportError>> + Send;
}

/// Runs one command in one container (`pods/exec`).
pub trait Executor: Send + Sync {
    /// Runs `request`; an `Ok` carries the exit code, whatever it is.
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send;
}

/// Cooperative cancellation of a lifecycle call (an `AbortSignal` in
/// JavaScript). Object-safe, so a run carries it without another type
/// parameter.
pub trait Cancel: Send + Sync {
    /// Whether cancellation was requested.
    fn is_cancelled(&self) -> bool;
    /// Resolves once cancellation is requested; never, if it never is.
    fn cancelled(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// A call nobody can cancel.
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverCancelled;

impl Cancel for NeverCancelled {
    fn is_cancelled(&self) -> bool {
        false
    }

    fn cancelled(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::pending())
    }
}

/// Time, injected so budgets and backoff are testable without waiting.
pub trait Clock: Send + Sync {
    /// Monotonic time since an arbitrary origin.
    fn now(&self) -> Duration;
    /// Wall-clock time as RFC 3339 / ISO-8601 UTC, for `appliedAt`.
    fn now_iso8601(&self) -> String;
    /// Resolves once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send;
}
