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
    /// The container runtime could not start the command because the image
    /// has no such program (no `sh` in a `-distroless` image): nothing ran,
    /// and another attempt meets the same image.
    ProgramMissing,
}

impl TransportErrorKind {
    /// The kind for an HTTP status the API server (or a proxy in front of it)
    /// answered with. It follows what a retry can change: an API server that
    /// said "no" (RBAC, unknown pod or container, bad request) says "no" again,
    /// while 408/429 ("not now") and 5xx may well succeed next time. One rule
    /// for every Kubernetes transport (kube-rs natively, JavaScript under WASM).
    pub fn for_http_status(code: u16) -> Self {
        match code {
            408 | 429 => Self::Transient,
            400..=499 => Self::Refused,
            // 0 (the client could not tell) or 5xx: a garbled or failed answer is worth another try.
            _ => Self::Transient,
        }
    }
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

/// Where a run reports what happens as it happens (the binding forwards it to
/// `options.onEvent`). Events carry no statement text and no server output.
pub trait Events: Send + Sync {
    /// Reports `event`; must not block.
    fn emit(&self, event: Event);
}

/// An [`Events`] that drops everything.
pub struct NoEvents;

impl Events for NoEvents {
    fn emit(&self, _event: Event) {}
}

/// A pod a fanout observation left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct SkippedPod {
    /// The pod's name.
    pub pod: String,
    /// `terminating` or `finished`: on its way out, never part of the set.
    #[cfg_attr(feature = "napi", napi(ts_type = "'terminating' | 'finished'"))]
    pub why: String,
}

/// What a run reports through [`Events`]. Every event has a `message`: one line
/// saying what happens, as a progress display shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Event {
    /// A fanout pass starts: the statements will run on `pods` (the matching pods the state
    /// does not cover yet) out of `matching`; `skipped` were left out.
    PodsSelected {
        /// The pass's number, from 1.
        pass: u32,
        /// Pods the pass applies the statements to, by name.
        pods: Vec<String>,
        /// How many pods match (covered ones included).
        matching: usize,
        /// Pods listed but left out, and why.
        skipped: Vec<SkippedPod>,
        /// One line.
        message: String,
    },
    /// Waiting for pods to become Ready (or for any pod to match).
    Waiting {
        /// The pods not Ready yet; empty when none matches.
        pods: Vec<String>,
        /// What is left of the `waitForPod` budget, in milliseconds.
        remaining_ms: u64,
        /// One line.
        message: String,
    },
    /// Statement `index` (of `count`) was sent to `pod`.
    StatementStarted {
        /// The pod.
        pod: String,
        /// The statement's index.
        index: usize,
        /// How many statements the list has.
        count: usize,
        /// Pods of this pass that ran the whole list so far, and the pass's pods.
        pods_done: usize,
        /// The pods of this pass.
        pods_total: usize,
        /// One line.
        message: String,
    },
    /// Statement `index` finished on `pod` (`exitCode` 0 or not), after `durationMs`.
    StatementFinished {
        /// The pod.
        pod: String,
        /// The statement's index.
        index: usize,
        /// How many statements the list has.
        count: usize,
        /// clickhouse-client's exit code.
        exit_code: i32,
        /// From sending the statement to its exit status, in milliseconds.
        duration_ms: u64,
        /// One line.
        message: String,
    },
    /// `pod` ran the whole list (and its check and ledger write, when on): one more pod of the
    /// pass is done. The one event after a pod's last statement, so a progress display's pod
    /// count moves as pods finish rather than only when another pod starts a statement.
    PodDone {
        /// The pod.
        pod: String,
        /// Pods of this pass done so far, this one included.
        pods_done: usize,
        /// The pods of this pass.
        pods_total: usize,
        /// One line.
        message: String,
    },
    /// A transport call failed and is tried again after `delayMs`.
    Retry {
        /// The pod, for an exec; absent for a pod list.
        pod: Option<String>,
        /// The statement, for a statement's exec.
        index: Option<usize>,
        /// The attempt that failed, from 1.
        attempt: u32,
        /// How long until the next attempt, in milliseconds.
        delay_ms: u64,
        /// One line, without the transport's own words.
        message: String,
    },
    /// The pods are listed again to see whether the set changed during a pass.
    Relist {
        /// Passes made so far.
        passes: u32,
        /// One line.
        message: String,
    },
    /// The live-schema check on `pod` found every object as declared (`ok`), or not.
    Verified {
        /// The pod.
        pod: String,
        /// How many objects were looked up.
        object_count: usize,
        /// Whether every one is as declared.
        ok: bool,
        /// One line.
        message: String,
    },
    /// Under `verify: 'warn'`: objects on `pod` are missing or differ after the statements ran.
    /// `message` says which and how, as the `E_SCHEMA_MISMATCH` error would.
    SchemaMismatch {
        /// The pod.
        pod: String,
        /// The objects that are not as declared.
        objects: Vec<crate::live_schema::ObjectReport>,
        /// One readable line per object.
        message: String,
    },
    /// Under `verify: 'warn'`: the check itself could not run on `pod`.
    VerificationFailed {
        /// The pod.
        pod: String,
        /// Why, redacted.
        message: String,
    },
    /// The resource's Lease is held by another deploy; this one waits.
    LeaseWaiting {
        /// The Lease's name.
        lease: String,
        /// Who holds it.
        holder: String,
        /// What is left of the `waitForPod` budget, in milliseconds.
        remaining_ms: u64,
        /// One line.
        message: String,
    },
    /// This call took the resource's Lease, after waiting `waitedMs` for it.
    LeaseTaken {
        /// The Lease's name.
        lease: String,
        /// How long it waited for another holder, in milliseconds (0: it was free).
        waited_ms: u64,
        /// One line.
        message: String,
    },
    /// Convergence (`converge: 'additive'`, see `crate::converge`) on a pod: an object's ALTERs
    /// run (`alter`, with `changes` in words), a live column the declaration lacks is kept
    /// (`keptColumn`), or a difference is left as it is (`refused`, the message says why).
    Converge {
        /// The pod.
        pod: String,
        /// `database.name`.
        object: String,
        /// `alter`, `keptColumn`, `refused` or `replicated` (another replica of the table's set
        /// runs its ALTERs).
        action: String,
        /// What the ALTERs change, in words (`add column m after id`), for `alter`.
        changes: Vec<String>,
        /// The column, for `keptColumn` and a column's refusal.
        column: Option<String>,
        /// One line.
        message: String,
    },
    /// A step of a table's rebuild (see `crate::rebuild`) started or finished.
    Rebuild {
        /// `database.table`.
        table: String,
        /// `check`, `prepare`, `dualWrite`, `backfill`, `verify`, `swap` or `abandon`.
        step: String,
        /// The pod it ran on, when one.
        pod: Option<String>,
        /// The live partition's id (backfill).
        partition: Option<String>,
        /// Rows copied (backfill), or compared (verify).
        rows: Option<u64>,
        /// One line.
        message: String,
    },
}

/// How long a pod list may take: a list is small and quick, one that does not
/// answer in this long is stuck. The clients have no read timeout of their own
/// (it would cut long execs), so every Kubernetes transport bounds it here.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// Captured exec output per stream. A DDL statement's output is a few lines; a
/// runaway one is cut here (reading goes on past the cap, so the remote side
/// never blocks on a full pipe).
pub const OUTPUT_CAP: usize = 1 << 20;

/// `k=v,k2=v2`: the equality label selector of the API's `labelSelector`
/// parameter. Keys and values are validated label syntax, which contains
/// neither `,` nor `=`, so no escaping is needed.
pub fn label_selector(selector: &BTreeMap<String, String>) -> String {
    selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The `Status` frame kubelet sends on the exec's status channel (3) when the
/// command ends, in the API's JSON layout. Only the fields the exit code is
/// read from.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct ExecStatus {
    /// `Success` or `Failure`.
    pub status: Option<String>,
    /// `NonZeroExitCode`, `InternalError`, ...
    pub reason: Option<String>,
    /// An HTTP-like status code, when the failure is the API's.
    pub code: Option<i32>,
    /// Human-readable text (kubelet's; may quote the container's environment).
    pub message: Option<String>,
    /// `details.causes`, where a non-zero exit code travels.
    pub details: Option<ExecStatusDetails>,
}

/// `Status.details` of an exec status frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct ExecStatusDetails {
    /// The causes; an `ExitCode` cause carries the exit code as its message.
    pub causes: Option<Vec<ExecStatusCause>>,
}

/// One entry of `Status.details.causes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct ExecStatusCause {
    /// `ExitCode` for the cause that carries the exit code.
    pub reason: Option<String>,
    /// The exit code, as decimal text, for an `ExitCode` cause.
    pub message: Option<String>,
}

impl ExecStatus {
    /// The exit code the frame reports: `Success` is 0; `Failure` with reason
    /// `NonZeroExitCode` carries the code as the message of its `ExitCode`
    /// cause. Any other failure means the command never ran (no shell in the
    /// image, container gone), which is not an exit code; its kind follows
    /// the reason and code. The message is passed through
    /// [`kubernetes::redact`](crate::kubernetes::redact::redact): kubelet's text
    /// could quote the container's environment.
    pub fn exit_code(&self) -> Result<i32, TransportError> {
        match self.status.as_deref() {
            Some("Success") => return Ok(0),
            Some("Failure") if self.reason.as_deref() == Some("NonZeroExitCode") => {
                let code = self
                    .details
                    .as_ref()
                    .and_then(|d| d.causes.as_ref())
                    .and_then(|causes| causes.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
                    .and_then(|c| c.message.as_deref())
                    .and_then(|m| m.trim().parse::<i32>().ok());
                if let Some(code) = code {
                    return Ok(code);
                }
            }
            _ => {}
        }
        let message = self
            .message
            .as_deref()
            .filter(|m| !m.is_empty())
            .unwrap_or("no message");
        let reason = self.reason.as_deref();
        if let Some(program) = missing_program(message) {
            return Err(TransportError::new(
                TransportErrorKind::ProgramMissing,
                crate::kubernetes::redact::redact(&format!(
                    "the container has no `{program}`: its image has none (ClickHouse's `-distroless` images \
                     have no shell), so the command could not start: {message}"
                )),
            ));
        }
        let kind = match (reason, self.code) {
            // kubelet's word for "the runtime failed", the exec analogue of a 500.
            (Some("InternalError"), _) => TransportErrorKind::Transient,
            (_, Some(code)) => {
                u16::try_from(code).map_or(TransportErrorKind::Refused, TransportErrorKind::for_http_status)
            }
            _ => TransportErrorKind::Refused,
        };
        let message = if reason == Some("NonZeroExitCode") {
            format!("the exec failed without a readable exit code: {message}")
        } else {
            format!("the command could not be run: {message}")
        };
        Err(TransportError::new(
            kind,
            crate::kubernetes::redact::redact(&message),
        ))
    }
}

/// The program a container runtime's "not found" error names, when `message` is one: runc
/// (containerd, CRI-O) says `exec: "sh": executable file not found in $PATH`, crun says
/// ``executable file `sh` not found in $PATH``. Kubelet passes either on inside its
/// `InternalError` status. `None` for any other failure.
fn missing_program(message: &str) -> Option<&str> {
    if let Some(at) = message.find("\": executable file not found") {
        let start = message[..at]
            .rfind("exec: \"")
            .map_or(0, |i| i + "exec: \"".len());
        return Some(&message[start..at]);
    }
    let rest = &message[message.find("executable file `")? + "executable file `".len()..];
    let end = rest.find("` not found")?;
    Some(&rest[..end])
}

/// The failure of an exec whose connection ended before a status frame came:
/// the command's outcome is unknown, so it is transient (the core's retry
/// rules decide what that means). `cause` says why the connection ended, when
/// the client knows (already free of credentials).
pub fn exec_without_status(cause: Option<&str>) -> TransportError {
    let cause = cause.map(|c| format!(": {c}")).unwrap_or_default();
    TransportError::new(
        TransportErrorKind::Transient,
        format!("exec ended without reporting an exit status (the connection closed early){cause}"),
    )
}

/// Why a connection must not be made: the API server is plain `http://` and
/// the selected user has credentials (`credential_kinds`, e.g. "a bearer
/// token"), which would then travel in clear text. `server_source` says what
/// set the server (`kubeConfig.server`, or the cluster it came from) so the
/// message names what to fix. `None` when the connection is allowed: https, or
/// a user without credentials.
pub fn credentials_over_plain_http(
    server: &str,
    server_source: &str,
    credential_kinds: &[&str],
) -> Option<String> {
    if !server.to_ascii_lowercase().starts_with("http://") || credential_kinds.is_empty() {
        return None;
    }
    Some(crate::kubernetes::redact::redact(&format!(
        "{server_source} is {server} (plain http://) and the selected user has credentials ({}); credentials \
         are never sent over plain HTTP, so no connection was made; use an https:// server, or a user \
         without credentials",
        credential_kinds.join(", ")
    )))
}

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

    /// [`Self::exec`], handing `seen` each piece of stdout as it arrives, before the exec ends, so
    /// the caller can report progress from it (a pod's statement script prints a marker before each
    /// statement). What it returns is what `exec` returns. An executor that cannot stream keeps
    /// this default: the whole stdout, once, at the end.
    fn exec_seeing(
        &self,
        request: ExecRequest,
        seen: &(dyn Fn(&[u8]) + Send + Sync),
    ) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        async move {
            let output = self.exec(request).await;
            if let Ok(output) = &output {
                seen(output.stdout.as_bytes());
            }
            output
        }
    }
}

/// A `coordination.k8s.io/v1` Lease as the lease logic reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// `metadata.resourceVersion`: a write must carry it (optimistic concurrency).
    pub resource_version: String,
    /// `spec.holderIdentity`; `None` or empty: free.
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub duration_seconds: Option<u32>,
    /// `spec.acquireTime` (RFC 3339 with microseconds).
    pub acquire_time: Option<String>,
    /// `spec.renewTime` (RFC 3339 with microseconds).
    pub renew_time: Option<String>,
    /// `spec.leaseTransitions`.
    pub transitions: Option<u32>,
}

/// The spec a lease write sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSpec {
    /// Who holds it; `None` releases it.
    pub holder: Option<String>,
    /// How long a holder keeps it without renewing.
    pub duration_seconds: u32,
    /// When the holder took it.
    pub acquire_time: Option<String>,
    /// When the holder last renewed it.
    pub renew_time: Option<String>,
    /// How many times it changed hands.
    pub transitions: u32,
}

/// The Lease API, for the lease that serializes applies (`lease` prop). Every
/// write is conditional: `create` fails with HTTP 409 when the lease exists,
/// `replace` when its resourceVersion moved on. The defaults answer that the
/// transport has none (an injected executor), which the lease reports.
pub trait LeaseApi: Send + Sync {
    /// Who this process is, for the holder identity: the host and a process id.
    fn process_identity(&self) -> String {
        "unknown-host".to_owned()
    }

    /// The lease, or `None` when it does not exist.
    fn get_lease(
        &self,
        _namespace: &str,
        _name: &str,
    ) -> impl Future<Output = Result<Option<LeaseRecord>, TransportError>> + Send {
        std::future::ready(Err(no_lease_api()))
    }

    /// Creates the lease; HTTP 409 when it already exists.
    fn create_lease(
        &self,
        _namespace: &str,
        _name: &str,
        _spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        std::future::ready(Err(no_lease_api()))
    }

    /// Replaces the lease's spec if its resourceVersion is still `resource_version`; HTTP 409 if not.
    fn replace_lease(
        &self,
        _namespace: &str,
        _name: &str,
        _resource_version: &str,
        _spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        std::future::ready(Err(no_lease_api()))
    }
}

fn no_lease_api() -> TransportError {
    TransportError::new(
        TransportErrorKind::Refused,
        "this transport has no Lease API (an injected executor lists pods and runs execs only); the lease prop \
         needs the Kubernetes API",
    )
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
    /// Time since an arbitrary origin that keeps counting while the machine
    /// is suspended (a laptop's lid closed). `now` may stop then (Linux's
    /// CLOCK_MONOTONIC does) while other machines' clocks, and so a lease's
    /// expiry as everyone else sees it, run on: the lease holder measures its
    /// renew deadline with this one. Never behind `now`'s progress.
    fn now_counting_suspend(&self) -> Duration;
    /// Wall-clock time as RFC 3339 / ISO-8601 UTC, for `appliedAt`.
    fn now_iso8601(&self) -> String;
    /// Resolves once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send;
}

/// The cluster-facing side of an apply: where pods are listed and statements
/// run, the clock, and the identity of the cluster they belong to.
pub struct Cluster<'a, T, C> {
    /// Lists the pods and runs the statements.
    pub transport: &'a T,
    /// Times the readiness budget, the backoff and `appliedAt`.
    pub clock: &'a C,
    /// Credential-free identity of the cluster (see `cluster_id`); `None`
    /// when it cannot be known (no current cluster, injected executor).
    pub cluster_id: Option<String>,
    /// Lets the caller stop the call: checked before every statement, list
    /// and pause, and raced against each of them.
    pub cancel: &'a dyn Cancel,
    /// Where the run reports what happens (the binding's `options.onEvent`).
    pub events: &'a dyn Events,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(json: &str) -> ExecStatus {
        serde_json::from_str(json).expect("a status frame")
    }

    #[test]
    fn http_statuses_map_to_what_a_retry_can_change() {
        for (code, kind) in [
            (400, TransportErrorKind::Refused),
            (403, TransportErrorKind::Refused),
            (404, TransportErrorKind::Refused),
            (408, TransportErrorKind::Transient),
            (429, TransportErrorKind::Transient),
            (500, TransportErrorKind::Transient),
            (503, TransportErrorKind::Transient),
            (0, TransportErrorKind::Transient),
        ] {
            assert_eq!(TransportErrorKind::for_http_status(code), kind, "HTTP {code}");
        }
    }

    #[test]
    fn the_exit_code_comes_from_the_status_frame() {
        assert_eq!(frame(r#"{"status":"Success"}"#).exit_code(), Ok(0));
        let failed = r#"{"status":"Failure","reason":"NonZeroExitCode","message":"command terminated with non-zero exit code",
            "details":{"causes":[{"reason":"Other","message":"x"},{"reason":"ExitCode","message":"62"}]}}"#;
        assert_eq!(frame(failed).exit_code(), Ok(62));
        let unreadable = r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"sixty-two"}]}}"#;
        assert_eq!(
            frame(unreadable).exit_code().expect_err("no exit code").kind,
            TransportErrorKind::Refused
        );
        let internal = r#"{"status":"Failure","reason":"InternalError","message":"Internal error occurred: failed to exec in container: task 7 not found; TOKEN=abc123"}"#;
        let e = frame(internal).exit_code().expect_err("did not run");
        assert_eq!(e.kind, TransportErrorKind::Transient);
        assert!(e.message.contains("task 7 not found"), "{}", e.message);
        assert!(!e.message.contains("abc123"), "redacted: {}", e.message);
        let forbidden = r#"{"status":"Failure","code":403,"message":"forbidden"}"#;
        assert_eq!(
            frame(forbidden).exit_code().expect_err("refused").kind,
            TransportErrorKind::Refused
        );
        assert_eq!(
            frame("{}").exit_code().expect_err("empty").kind,
            TransportErrorKind::Refused
        );
    }

    #[test]
    fn an_image_without_the_program_is_not_retried_and_names_it() {
        // What kubelet sends when containerd's runc cannot find `sh` (a `-distroless` image),
        // and crun's wording of the same; the container id stands for a real one.
        let runc = r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing command in container: failed to exec in container: failed to start exec \"2f0c9a\": OCI runtime exec failed: exec failed: unable to start container process: exec: \"sh\": executable file not found in $PATH: unknown","reason":"InternalError","details":{"causes":[{"message":"error executing command in container: failed to exec in container: failed to start exec \"2f0c9a\": OCI runtime exec failed: exec failed: unable to start container process: exec: \"sh\": executable file not found in $PATH: unknown"}]},"code":500}"#;
        let crun = r#"{"status":"Failure","reason":"InternalError","code":500,"message":"Internal error occurred: error executing command in container: executable file `sh` not found in $PATH: No such file or directory: OCI runtime attempted to invoke a command that was not found"}"#;
        for status in [runc, crun] {
            let e = frame(status).exit_code().expect_err("did not run");
            assert_eq!(e.kind, TransportErrorKind::ProgramMissing, "{}", e.message);
            assert!(!e.is_retryable());
            assert!(
                e.message
                    .starts_with("the container has no `sh`: its image has none"),
                "{}",
                e.message
            );
            assert!(e.message.contains("-distroless"), "{}", e.message);
        }
    }

    #[test]
    fn selectors_are_sorted_equality_terms() {
        let mut s = BTreeMap::new();
        s.insert("clickhouse.altinity.com/chi".to_owned(), "orders".to_owned());
        s.insert("app".to_owned(), "ch".to_owned());
        assert_eq!(label_selector(&s), "app=ch,clickhouse.altinity.com/chi=orders");
    }

    #[test]
    fn credentials_never_go_over_plain_http() {
        assert_eq!(
            credentials_over_plain_http("https://k8s", "x", &["a bearer token"]),
            None
        );
        assert_eq!(credentials_over_plain_http("http://k8s", "x", &[]), None);
        let m = credentials_over_plain_http(
            "http://bob:PW@k8s:8080/",
            "kubeConfig.server",
            &["a bearer token", "a token file"],
        )
        .expect("refused");
        assert!(m.starts_with("kubeConfig.server is http://"), "{m}");
        assert!(m.contains("(a bearer token, a token file)"), "{m}");
        assert!(m.contains("credentials are never sent over plain HTTP"), "{m}");
        assert!(!m.contains("PW"), "{m}");
    }
}
