//! Running an ordered statement list on the pods the execution model selects.
//!
//! Fanout applies the list to every matching pod and keeps re-listing until
//! the exit predicate holds: the last observation is non-empty, every pod in
//! it was applied to in this run (by name and uid), and it equals the
//! observation before it. Only then may a pod set be recorded; anything else
//! fails, and nothing is recorded, so the next converge starts over.
//!
//! onCluster runs the list once, on the first Ready pod by name that has the
//! container, and lets ClickHouse's distributed DDL queue reach the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::future::poll_fn;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use crate::command;
use crate::config::{ClientConfig, ResolvedConfig, Retry, SettingValue, Target};
use crate::error::{ClickHouseSchemaError, ErrorKind};
use crate::redact::redact_clickhouse_output;
use crate::state::PodRef;
use crate::transport::{
    Cancel, Clock, ExecOutput, ExecRequest, Executor, NeverCancelled, PodInfo, PodLister, TransportError,
    TransportErrorKind,
};

/// How long to wait between observations while pods are not Ready or the set
/// is moving. Short enough to notice a rollout finishing, long enough not to
/// hammer the API server.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Everything a run needs besides the statements: who to talk to and how the
/// run is driven. Borrowed from the resolved config so a run cannot diverge
/// from what was validated.
pub struct Run<'a, T, C> {
    pub resource_id: &'a str,
    pub transport: &'a T,
    pub clock: &'a C,
    pub target: &'a Target,
    pub client: &'a ClientConfig,
    pub settings: &'a BTreeMap<String, SettingValue>,
    pub retry: &'a Retry,
    pub wait_budget: Duration,
    pub statement_timeout: Duration,
    pub max_passes: u32,
    pub cancel: &'a dyn Cancel,
}

impl<'a, T, C> Run<'a, T, C> {
    /// A run against `target` with everything else from `config`.
    pub fn new(
        resource_id: &'a str,
        config: &'a ResolvedConfig,
        target: &'a Target,
        transport: &'a T,
        clock: &'a C,
    ) -> Self {
        Self {
            resource_id,
            transport,
            clock,
            target,
            client: &config.client,
            settings: &config.settings,
            retry: &config.retry,
            wait_budget: Duration::from_millis(config.wait_for_pod.timeout_ms),
            statement_timeout: Duration::from_millis(config.statement_timeout_ms),
            max_passes: config.max_reconcile_passes,
            cancel: &NeverCancelled,
        }
    }

    /// The same run, stoppable through `cancel`.
    pub fn with_cancel(mut self, cancel: &'a dyn Cancel) -> Self {
        self.cancel = cancel;
        self
    }
}

/// Where a fanout starts: pods already known to hold the list (from recorded
/// state, by name and uid) and an observation already made (the no-op check's
/// list), so an apply after a topology change does not list twice.
#[derive(Debug, Default, Clone)]
pub struct FanoutStart {
    pub covered: Vec<PodRef>,
    pub first_observation: Option<Vec<PodInfo>>,
}

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// Applies `statements` to every matching pod until the exit predicate
    /// holds, and returns the covered set, sorted by name.
    pub async fn fanout(
        &self,
        statements: &[String],
        start: FanoutStart,
    ) -> Result<Vec<PodRef>, ClickHouseSchemaError> {
        let deadline = self.clock.now() + self.wait_budget;
        // name -> uid of the pod object that holds the list.
        let mut covered: BTreeMap<String, Option<String>> =
            start.covered.into_iter().map(|p| (p.name, p.uid)).collect();
        let mut applied_this_run = 0usize;
        let mut previous: Option<BTreeSet<PodRef>> = None;
        let mut passes = 0u32;
        let mut pending = start.first_observation;

        loop {
            let pods = match pending.take() {
                Some(pods) => pods,
                None => self.list().await?,
            };
            let matching = matching_pods(pods);
            if let Some(pod) = matching.iter().find(|p| !p.has_container(&self.target.container)) {
                return Err(self.container_missing(pod));
            }
            let set: BTreeSet<PodRef> = matching.iter().map(PodRef::of).collect();

            if matching.is_empty() {
                if self.clock.now() >= deadline {
                    return Err(self.empty_set(applied_this_run));
                }
                previous = Some(set);
                self.pause(deadline).await;
                continue;
            }

            let not_ready: Vec<&PodInfo> = matching.iter().filter(|p| !p.ready).collect();
            if !not_ready.is_empty() {
                if self.clock.now() >= deadline {
                    return Err(self.not_ready(&not_ready));
                }
                previous = Some(set);
                self.pause(deadline).await;
                continue;
            }

            let uncovered: Vec<&PodInfo> = matching
                .iter()
                .filter(|p| covered.get(&p.name) != Some(&p.uid))
                .collect();
            if uncovered.is_empty() {
                if previous.as_ref() == Some(&set) {
                    return Ok(set.into_iter().collect());
                }
                // Covered but not yet seen twice: the set may still be moving
                // (a pod vanished mid-pass), so observe once more.
                let moved = previous.is_some();
                previous = Some(set);
                if moved {
                    if self.clock.now() >= deadline {
                        return Err(self.unsettled(passes, &[]));
                    }
                    self.pause(deadline).await;
                }
                continue;
            }

            if passes >= self.max_passes || self.clock.now() >= deadline {
                return Err(self.unsettled(passes, &uncovered));
            }
            passes += 1;
            let mut vanished = false;
            for pod in uncovered {
                match self.apply_all(statements, &pod.name).await {
                    Ok(()) => {
                        covered.insert(pod.name.clone(), pod.uid.clone());
                        applied_this_run += 1;
                    }
                    // Deleted between the observation and its exec: the
                    // re-list shows whether it is gone or was replaced, and a
                    // successor is a new uid that gets its own pass.
                    Err(Failure::Vanished) => vanished = true,
                    Err(Failure::Error(err)) => return Err(err),
                }
            }
            previous = Some(set);
            // A pod being replaced needs a moment to reappear; re-listing at
            // once would only spend a pass on the same observation.
            if vanished {
                self.pause(deadline).await;
            }
        }
    }

    /// Runs `statements` once, on the first Ready pod (by name) that has the
    /// container, and returns that pod.
    pub async fn on_cluster(&self, statements: &[String]) -> Result<PodRef, ClickHouseSchemaError> {
        let deadline = self.clock.now() + self.wait_budget;
        // The last pod listed Ready whose exec answered 404, for the error.
        let mut vanished: Option<String> = None;
        loop {
            let matching = matching_pods(self.list().await?);
            let chosen = matching
                .iter()
                .find(|p| p.ready && p.has_container(&self.target.container));
            if let Some(pod) = chosen {
                match self.apply_all(statements, &pod.name).await {
                    Ok(()) => return Ok(PodRef::of(pod)),
                    // Gone since the list: pick again from a fresh one, within
                    // the same budget and at the same pace as any other wait
                    // (a pod listed Ready whose exec keeps answering 404 must
                    // not make this loop spin).
                    Err(Failure::Vanished) => vanished = Some(pod.name.clone()),
                    Err(Failure::Error(err)) => return Err(err),
                }
            }
            if self.clock.now() >= deadline {
                return Err(self.no_server_for_on_cluster(&matching, vanished.as_deref()));
            }
            self.pause(deadline).await;
        }
    }

    /// The whole ordered list on one pod, one exec per statement, stopping at
    /// the first failure.
    async fn apply_all(&self, statements: &[String], pod: &str) -> Result<(), Failure> {
        for (index, statement) in statements.iter().enumerate() {
            let (output, unknown) = self.exec(index, statement, pod).await?;
            if output.exit_code != 0 {
                return Err(Failure::Error(
                    self.statement_failed(index, statement, pod, &output, unknown),
                ));
            }
        }
        Ok(())
    }

    /// Runs one statement, retrying transport failures (never a statement
    /// that ran and failed). Returns the output and how many earlier attempts
    /// ended without a known outcome: a timed-out or dropped exec may still
    /// have run the statement, so whatever is reported later says so.
    async fn exec(&self, index: usize, statement: &str, pod: &str) -> Result<(ExecOutput, u32), Failure> {
        let request = ExecRequest {
            namespace: self.target.namespace.clone(),
            pod: pod.to_owned(),
            container: self.target.container.clone(),
            command: command::render(
                self.client,
                self.settings,
                statement.len(),
                self.statement_timeout,
            ),
            stdin: statement.to_owned(),
            timeout: command::exec_timeout(self.statement_timeout),
        };
        let max_attempts = self.retry.max_attempts.max(1);
        let mut attempt = 1;
        loop {
            if self.cancel.is_cancelled() {
                return Err(Failure::Error(
                    self.cancelled(&format!("before statement {index} was sent to pod {pod}")),
                ));
            }
            let Some(result) = self.unless_cancelled(self.transport.exec(request.clone())).await else {
                return Err(Failure::Error(
                    self.cancelled(&format!(
                        "while statement {index} was running on pod {pod}; its exec was closed, and whether \
                         the statement ran is unknown"
                    ))
                    .with_statement_index(index)
                    .with_pod(pod),
                ));
            };
            match result {
                Ok(output) => return Ok((output, attempt - 1)),
                Err(err) if err.kind == TransportErrorKind::Refused && err.http_status == Some(404) => {
                    return Err(Failure::Vanished);
                }
                Err(err) if err.is_retryable() && attempt < max_attempts => {
                    self.backoff(attempt).await;
                    attempt += 1;
                }
                Err(err) => {
                    return Err(Failure::Error(
                        self.exec_transport_failed(index, statement, pod, &err, attempt),
                    ));
                }
            }
        }
    }

    /// One observation of the pods that belong to the set (see [`matching_pods`]).
    pub async fn list_matching(&self) -> Result<Vec<PodInfo>, ClickHouseSchemaError> {
        Ok(matching_pods(self.list().await?))
    }

    async fn list(&self) -> Result<Vec<PodInfo>, ClickHouseSchemaError> {
        if self.cancel.is_cancelled() {
            return Err(self.cancelled("before listing pods"));
        }
        let listing = self.with_retry(|| {
            self.transport
                .list_pods(&self.target.namespace, &self.target.pod_selector)
        });
        match self.unless_cancelled(listing).await {
            Some(result) => result.map_err(|(err, attempts)| self.list_failed(&err, attempts)),
            None => Err(self.cancelled("while listing pods")),
        }
    }

    /// `work`'s output, or `None` when the run is cancelled first (then
    /// `work` is dropped: an exec in flight is closed).
    async fn unless_cancelled<F: Future>(&self, work: F) -> Option<F::Output> {
        let mut work = pin!(work);
        let mut cancelled = self.cancel.cancelled();
        // Work that finished wins over a cancellation that came with it.
        poll_fn(|cx| {
            if let Poll::Ready(output) = work.as_mut().poll(cx) {
                return Poll::Ready(Some(output));
            }
            cancelled.as_mut().poll(cx).map(|()| None)
        })
        .await
    }

    /// Retries transient transport failures with exponential backoff; a
    /// refusal (RBAC, unknown pod) is returned at once since repeating it
    /// cannot help. On failure returns the last error and the attempts made.
    async fn with_retry<F, Fut, V>(&self, mut op: F) -> Result<V, (TransportError, u32)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<V, TransportError>>,
    {
        let max_attempts = self.retry.max_attempts.max(1);
        let mut attempt = 1;
        loop {
            match op().await {
                Ok(value) => return Ok(value),
                Err(err) if err.is_retryable() && attempt < max_attempts => {
                    self.backoff(attempt).await;
                    attempt += 1;
                }
                Err(err) => return Err((err, attempt)),
            }
        }
    }

    /// Exponential backoff after failed attempt number `attempt` (1-based).
    async fn backoff(&self, attempt: u32) {
        let factor = 1u64 << (attempt - 1).min(16);
        let sleep = self.clock.sleep(Duration::from_millis(
            self.retry.backoff_ms.saturating_mul(factor),
        ));
        // A cancellation ends the wait at once; the next attempt reports it.
        self.unless_cancelled(sleep).await;
    }

    async fn pause(&self, deadline: Duration) {
        let remaining = deadline.saturating_sub(self.clock.now());
        // A cancellation ends the pause at once; the next list reports it.
        self.unless_cancelled(self.clock.sleep(remaining.min(POLL_INTERVAL)))
            .await;
    }

    // ----- errors: each names the resource, the selector and namespace, the
    // pods involved, and what to do. -----

    fn prefix(&self) -> String {
        format!("ClickHouseSchema '{}'", self.resource_id)
    }

    fn fanout_scope(&self) -> String {
        format!(
            "{}: execution.mode 'fanout' applies the statements to EVERY pod matching {} in namespace '{}'",
            self.prefix(),
            selector_text(&self.target.pod_selector),
            self.target.namespace
        )
    }

    fn error(&self, kind: ErrorKind, message: String) -> ClickHouseSchemaError {
        ClickHouseSchemaError::new(kind, message).with_resource_id(self.resource_id)
    }

    fn cancelled(&self, when: &str) -> ClickHouseSchemaError {
        self.error(
            ErrorKind::Cancelled,
            format!(
                "{}: cancelled {when}. Nothing is recorded, so the next converge applies the whole list again \
                 (statements that completed before the cancellation stay applied).",
                self.prefix()
            ),
        )
    }

    fn container_missing(&self, pod: &PodInfo) -> ClickHouseSchemaError {
        let has = if pod.containers.is_empty() {
            "none".to_owned()
        } else {
            pod.containers.join(", ")
        };
        self.error(
            ErrorKind::ContainerMissing,
            format!(
                "{}, but pod {} has no container '{}' (its containers: {has}). Waiting cannot add a container \
                 to a running pod, so the converge stops here and records nothing. Set target.container to the \
                 ClickHouse server container, or narrow target.podSelector to the server pods.",
                self.fanout_scope(),
                pod.name,
                self.target.container
            ),
        )
        .with_pod(&pod.name)
    }

    fn empty_set(&self, applied: usize) -> ClickHouseSchemaError {
        let ms = self.wait_budget.as_millis();
        let message = if applied > 0 {
            format!(
                "{}, but after {ms}ms the matching set became empty after {applied} pod(s) were applied; a \
                 same-named successor would be unapplied. Nothing is recorded. Let the rollout finish, raise \
                 waitForPod.timeoutMs, or switch to execution.mode 'onCluster'.",
                self.fanout_scope()
            )
        } else {
            format!(
                "{}, but no pod matched the selector within {ms}ms (terminating and finished pods do not \
                 count). Nothing is recorded. Check target.namespace and target.podSelector, or raise \
                 waitForPod.timeoutMs if the pods are still being created.",
                self.fanout_scope()
            )
        };
        self.error(ErrorKind::PodsNotReady, message)
    }

    fn not_ready(&self, pods: &[&PodInfo]) -> ClickHouseSchemaError {
        let listed: Vec<String> = pods
            .iter()
            .map(|p| format!("{} ({})", p.name, readiness_text(p)))
            .collect();
        self.error(
            ErrorKind::PodsNotReady,
            format!(
                "{}, and every one must be Ready before any statement runs, but after {}ms {} pod(s) were not \
                 Ready: {}. Nothing is recorded, so the next converge applies the whole list to the whole set. \
                 Let the rollout finish, raise waitForPod.timeoutMs, or switch to execution.mode 'onCluster', \
                 which needs a single Ready server.",
                self.fanout_scope(),
                self.wait_budget.as_millis(),
                pods.len(),
                listed.join(", ")
            ),
        )
    }

    fn unsettled(&self, passes: u32, uncovered: &[&PodInfo]) -> ClickHouseSchemaError {
        let detail = if uncovered.is_empty() {
            format!(
                "after {passes} reconcile pass(es) and {}ms the set was still changing between observations",
                self.wait_budget.as_millis()
            )
        } else {
            let names: Vec<&str> = uncovered.iter().map(|p| p.name.as_str()).collect();
            format!(
                "after {passes} reconcile pass(es), {} pod(s) had still not been applied to ({})",
                names.len(),
                names.join(", ")
            )
        };
        self.error(
            ErrorKind::PodSetUnstable,
            format!(
                "{}, but the pod set kept changing: {detail}. Nothing is recorded, so the next converge \
                 re-applies the whole list. Let the rollout settle, raise maxReconcilePasses, or switch to \
                 execution.mode 'onCluster'.",
                self.fanout_scope()
            ),
        )
    }

    fn no_server_for_on_cluster(
        &self,
        matching: &[PodInfo],
        vanished: Option<&str>,
    ) -> ClickHouseSchemaError {
        let seen = if matching.is_empty() {
            "no pod matched".to_owned()
        } else {
            let listed: Vec<String> = matching
                .iter()
                .map(|p| {
                    if p.has_container(&self.target.container) {
                        format!("{} ({})", p.name, readiness_text(p))
                    } else {
                        format!("{} (no container '{}')", p.name, self.target.container)
                    }
                })
                .collect();
            format!("the matching pods were {}", listed.join(", "))
        };
        let seen = match vanished {
            Some(pod) => format!(
                "{seen}; pod {pod} was listed Ready, but the API server answered 404 (not found) to its exec"
            ),
            None => seen,
        };
        self.error(
            ErrorKind::PodsNotReady,
            format!(
                "{}: execution.mode 'onCluster' needs one Ready pod matching {} in namespace '{}' with a \
                 container '{}', but after {}ms {seen}. Nothing is recorded. Check target.podSelector and \
                 target.container, or raise waitForPod.timeoutMs.",
                self.prefix(),
                selector_text(&self.target.pod_selector),
                self.target.namespace,
                self.target.container,
                self.wait_budget.as_millis()
            ),
        )
    }

    fn statement_failed(
        &self,
        index: usize,
        statement: &str,
        pod: &str,
        output: &ExecOutput,
        unknown_attempts: u32,
    ) -> ClickHouseSchemaError {
        let raw = if output.stderr.trim().is_empty() {
            output.stdout.clone()
        } else if output.stdout.trim().is_empty() {
            output.stderr.clone()
        } else {
            format!("{}\n{}", output.stderr, output.stdout)
        };
        let redacted = redact_clickhouse_output(&raw, statement);
        let what = match (redacted.clickhouse_code, redacted.clickhouse_exception.as_deref()) {
            (Some(code), Some(class)) => format!(" with ClickHouse code {code} ({class})"),
            (Some(code), None) => format!(" with ClickHouse code {code}"),
            _ => String::new(),
        };
        let stopped_in_pod =
            redacted.clickhouse_code.is_none() && command::POD_TIMEOUT_EXIT_CODES.contains(&output.exit_code);
        let mut message = if stopped_in_pod {
            format!(
                "{}: statement {index} on pod {pod} was stopped in the pod after statementTimeoutMs ({}ms) \
                 (exit {}, from `timeout`). Its outcome is unknown: ClickHouse may still have completed it. \
                 Nothing is recorded; the next converge re-runs the list. Raise statementTimeoutMs for \
                 long-running DDL.",
                self.prefix(),
                self.statement_timeout.as_millis(),
                output.exit_code
            )
        } else {
            format!(
                "{}: statement {index} failed on pod {pod}{what} (exit {}).",
                self.prefix(),
                output.exit_code
            )
        };
        if unknown_attempts > 0 {
            message.push_str(&format!(
                " Note: this was attempt {} of statement {index} on pod {pod}; the {unknown_attempts} before it \
                 timed out or lost the connection without a known outcome, so an earlier attempt may have run \
                 the statement, and this failure may be its consequence (for example 'already exists').",
                unknown_attempts + 1
            ));
        }
        if !redacted.text.trim().is_empty() {
            message.push('\n');
            message.push_str(redacted.text.trim_end());
        }
        self.error(ErrorKind::StatementFailed, message)
            .with_statement_index(index)
            .with_pod(pod)
            .with_exit_code(output.exit_code)
            .with_clickhouse(redacted.clickhouse_code, redacted.clickhouse_exception)
    }

    fn exec_transport_failed(
        &self,
        index: usize,
        statement: &str,
        pod: &str,
        err: &TransportError,
        attempts: u32,
    ) -> ClickHouseSchemaError {
        // The transport's text comes from the API server or the socket layer;
        // redact it against the statement anyway, so nothing that might echo
        // the request can carry a literal out.
        let detail = redact_clickhouse_output(&err.message, statement).text;
        let message = match err.kind {
            TransportErrorKind::Refused => format!(
                "{}: the Kubernetes API refused to run statement {index} on pod {pod} in namespace '{}': \
                 {detail}. Nothing is recorded. The identity running the converge needs 'list' on pods and \
                 'create' on pods/exec in that namespace, and target.container must name a container of the pod.",
                self.prefix(),
                self.target.namespace
            ),
            TransportErrorKind::Timeout => format!(
                "{}: statement {index} on pod {pod} did not finish within statementTimeoutMs ({}ms), {attempts} \
                 attempt(s): {detail}. Its outcome is unknown: each attempt may have run the statement \
                 (ClickHouse's max_execution_time and the pod's `timeout` bound it to statementTimeoutMs). \
                 Nothing is recorded; the next converge re-runs the list. Raise statementTimeoutMs for \
                 long-running DDL.",
                self.prefix(),
                self.statement_timeout.as_millis()
            ),
            TransportErrorKind::InvalidResponse => format!(
                "{}: the transport gave an unusable result for statement {index} on pod {pod}: {detail}. Its \
                 outcome is unknown, so it was not retried. Nothing is recorded; the next converge re-runs the \
                 list.",
                self.prefix()
            ),
            TransportErrorKind::Transient => format!(
                "{}: statement {index} failed to complete on pod {pod} after {attempts} attempt(s): {detail}. \
                 Its outcome is unknown: an attempt whose connection dropped after the statement was sent may \
                 have run it. Nothing is recorded; the next converge re-runs the list. Check the connection \
                 to the API server, or raise retry.maxAttempts.",
                self.prefix()
            ),
        };
        let kind = match err.kind {
            TransportErrorKind::Refused => ErrorKind::KubernetesApi,
            _ => ErrorKind::Transport,
        };
        self.error(kind, message)
            .with_statement_index(index)
            .with_pod(pod)
    }

    fn list_failed(&self, err: &TransportError, attempts: u32) -> ClickHouseSchemaError {
        let hint = match err.kind {
            TransportErrorKind::Refused => {
                "The identity running the converge needs 'list' on pods in that namespace.".to_owned()
            }
            _ => format!(
                "Gave up after {attempts} attempt(s); check the API server, or raise retry.maxAttempts."
            ),
        };
        let kind = match err.kind {
            TransportErrorKind::Refused => ErrorKind::KubernetesApi,
            _ => ErrorKind::Transport,
        };
        self.error(
            kind,
            format!(
                "{}: listing pods matching {} in namespace '{}' failed: {}. Nothing is recorded. {hint}",
                self.prefix(),
                selector_text(&self.target.pod_selector),
                self.target.namespace,
                err.message
            ),
        )
    }
}

/// Why a pod's list did not complete.
enum Failure {
    /// The pod no longer exists (the exec answered 404).
    Vanished,
    Error(ClickHouseSchemaError),
}

/// Pods that belong to the set: matching and not on their way out, sorted by
/// name so runs are deterministic.
fn matching_pods(mut pods: Vec<PodInfo>) -> Vec<PodInfo> {
    pods.retain(|p| !p.is_on_its_way_out());
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    pods
}

/// `k1=v1,k2=v2`, the selector as kubectl users write it.
pub fn selector_text(selector: &BTreeMap<String, String>) -> String {
    selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn readiness_text(pod: &PodInfo) -> String {
    match pod.phase.as_deref() {
        Some("Running") => "Running, not Ready".to_owned(),
        None => "not Ready".to_owned(),
        Some(phase) => phase.to_owned(),
    }
}
