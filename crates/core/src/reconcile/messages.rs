//! The errors a run reports. Each names the resource, the selector and
//! namespace, the pods involved, what happened to the statements (ran, did
//! not, unknown), and what to do; the message is the whole user interface of
//! a failed converge, so it is kept apart from the control flow that raises it.

use super::{Run, readiness_text};
use crate::command;
use crate::error::{ClickHouseSchemaError, ErrorKind};
use crate::kubernetes::selector::selector_text;
use crate::live_schema::{
    DifferenceReport, ObjectStatus, PodReport, SCRATCH_DATABASE_PREFIX, Unreadable, VerifyPlan,
};
use crate::sql::ddl_status::{HostOutcome, HostStatus};
use crate::sql::declared::DeclarationForm;
use crate::sql::redact::redact_clickhouse_output;
use crate::transport::{ExecOutput, PodInfo, TransportError, TransportErrorKind};

/// ClickHouse's INCORRECT_QUERY, what a Replicated database answers ON CLUSTER with.
const INCORRECT_QUERY: u32 = 80;

impl<T, C> Run<'_, T, C> {
    pub(crate) fn prefix(&self) -> String {
        format!("ClickHouseSchema '{}'", self.resource_id)
    }

    pub(super) fn fanout_scope(&self) -> String {
        format!(
            "{}: execution.mode 'fanout' applies the statements to EVERY pod matching {} in namespace '{}'",
            self.prefix(),
            selector_text(&self.target.pod_selector),
            self.target.namespace
        )
    }

    pub(crate) fn error(&self, kind: ErrorKind, message: String) -> ClickHouseSchemaError {
        ClickHouseSchemaError::new(kind, message).with_resource_id(self.resource_id)
    }

    pub(crate) fn cancelled(&self, when: &str) -> ClickHouseSchemaError {
        self.error(
            ErrorKind::Cancelled,
            format!(
                "{}: cancelled {when}. Nothing is recorded, so the next converge applies the whole list again \
                 (statements that completed before the cancellation stay applied).",
                self.prefix()
            ),
        )
    }

    pub(super) fn container_missing(&self, pod: &PodInfo) -> ClickHouseSchemaError {
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

    pub(super) fn empty_set(&self, applied: usize) -> ClickHouseSchemaError {
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

    pub(super) fn not_ready(&self, pods: &[&PodInfo]) -> ClickHouseSchemaError {
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

    pub(super) fn unsettled(&self, passes: u32, uncovered: &[&PodInfo]) -> ClickHouseSchemaError {
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

    pub(super) fn no_server_for_on_cluster(
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

    pub(super) fn statement_failed(
        &self,
        index: usize,
        statement: &str,
        pod: &str,
        output: &ExecOutput,
        unknown_attempts: u32,
    ) -> ClickHouseSchemaError {
        self.statement_failed_among(index, statement, &[], pod, output, unknown_attempts)
    }

    /// [`Self::statement_failed`] for a statement that ran in one client beside `others` (a pod's
    /// script): their text and values are redacted from the output too.
    pub(super) fn statement_failed_among(
        &self,
        index: usize,
        statement: &str,
        others: &[String],
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
        let redacted = crate::sql::redact::redact_clickhouse_output_among(&raw, statement, others);
        let what = match (redacted.clickhouse_code, redacted.clickhouse_exception.as_deref()) {
            (Some(code), Some(class)) => format!("with ClickHouse code {code} ({class}) "),
            (Some(code), None) => format!("with ClickHouse code {code} "),
            _ => "with no ClickHouse code ".to_string(),
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
            // Two lines, as the contract prints it: Alchemy's CLI shows an
            // error's first line in the resource's row of its live view, and
            // who failed where (id, statement, pod) fits a terminal's width
            // there; the code and the server's words follow below.
            format!(
                "{}: statement {index} failed on pod {pod}\n{what}(exit {}).",
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
        if redacted.clickhouse_code == Some(INCORRECT_QUERY) && redacted.text.contains("Replicated database")
        {
            message.push_str(&format!(
                "\nstatement {index}'s database is a Replicated database: it replicates every DDL to its \
                 replicas by itself and refuses ON CLUSTER. Remove ON CLUSTER from statement {index}; a \
                 fanout runs statements there once per pod, which this resource refuses too, so create \
                 that database's objects outside this resource."
            ));
        }
        self.error(ErrorKind::StatementFailed, message)
            .with_statement_index(index)
            .with_pod(pod)
            .with_exit_code(output.exit_code)
            .with_clickhouse(redacted.clickhouse_code, redacted.clickhouse_exception)
    }

    /// What a distributed DDL status table says of `hosts` (the rows of `statement` that did not
    /// succeed), as a phrase after "says", and the first failed host's ClickHouse code.
    pub(crate) fn host_outcomes(&self, statement: &str, hosts: &[HostStatus]) -> (String, Option<u32>) {
        let mut failed = Vec::new();
        let mut unfinished = Vec::new();
        let mut first_code = None;
        for h in hosts {
            match &h.outcome {
                HostOutcome::Failed { code, error } => {
                    first_code.get_or_insert(*code);
                    let error = redact_clickhouse_output(error, statement).text;
                    failed.push(format!("{} (code {code}: {})", h.host, error.trim()));
                }
                HostOutcome::Unfinished => unfinished.push(h.host.clone()),
            }
        }
        let mut text = String::new();
        if !failed.is_empty() {
            text.push_str(&format!(" it failed on {}", failed.join(", ")));
        }
        if !unfinished.is_empty() {
            text.push_str(&format!(
                "{} {} had not finished it when the wait ran out (distributed_ddl_task_timeout): their \
                 outcome is unknown, they may still run it in the background (a host that is down shows \
                 the same: under distributed_ddl_output_mode 'throw_only_active', set it in settings so \
                 such a host is not read as a failure)",
                if failed.is_empty() { "" } else { ";" },
                unfinished.join(", ")
            ));
        }
        (text, first_code.and_then(|c| u32::try_from(c).ok()))
    }

    /// A statement that exited 0 while its distributed DDL status table says some host did not
    /// run it (see [`crate::sql::ddl_status`]).
    pub(super) fn hosts_failed(
        &self,
        index: usize,
        statement: &str,
        pod: &str,
        hosts: &[HostStatus],
    ) -> ClickHouseSchemaError {
        let (hosts_text, code) = self.host_outcomes(statement, hosts);
        let mut message = format!(
            "{}: statement {index}, run from pod {pod}, exited 0 but its distributed DDL status table says{hosts_text}",
            self.prefix()
        );
        message.push_str(
            ". A distributed_ddl_output_mode of 'never_throw' or 'null_status_on_timeout' reports such hosts \
             only in that table; 'throw_only_active' (recommended) or 'throw' makes the statement fail. \
             Nothing is recorded; the next converge re-runs the list.",
        );
        self.error(ErrorKind::StatementFailed, message)
            .with_statement_index(index)
            .with_pod(pod)
            .with_exit_code(0)
            .with_clickhouse(code, None)
    }

    /// Attempt `attempt` of statement `index` was refused because an earlier
    /// attempt still runs under `query_id` (code 216).
    pub(super) fn earlier_attempt_running(
        &self,
        index: usize,
        pod: &str,
        query_id: &str,
        attempt: u32,
    ) -> ClickHouseSchemaError {
        self.error(
            ErrorKind::Transport,
            format!(
                "{}: statement {index} on pod {pod}: attempt {attempt} was refused because an earlier attempt \
                 still runs on the server under the same query id ({query_id}; ClickHouse code 216, \
                 QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING), after its exec ended without an outcome. Whether the \
                 statement completes is unknown. Nothing is recorded; the next converge re-runs the list.",
                self.prefix()
            ),
        )
        .with_statement_index(index)
        .with_pod(pod)
    }

    pub(super) fn exec_transport_failed(
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
        if err.kind == TransportErrorKind::ProgramMissing {
            return self
                .image_unsupported(&format!("statement {index}"), pod, &detail)
                .with_statement_index(index);
        }
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
            TransportErrorKind::Transient | TransportErrorKind::ProgramMissing => format!(
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

    /// An exec the pod's image cannot start (its runtime found no `sh`): one error whatever the
    /// step (`what`: a statement, the live-schema check, the ledger, a rebuild step), since every
    /// step runs the same command and every attempt meets the same image. `detail` is the
    /// transport's redacted text, which names the missing program.
    pub(crate) fn image_unsupported(&self, what: &str, pod: &str, detail: &str) -> ClickHouseSchemaError {
        self.error(
            ErrorKind::ImageUnsupported,
            format!(
                "{}: {what} could not run on pod {pod}: {detail}. Nothing ran there and nothing is recorded; \
                 it was not retried, as every attempt meets the same image. Every exec runs `sh -c` with \
                 `head`, `sed` and `clickhouse-client` in container '{}': use an image that has a shell (the \
                 same ClickHouse version's tag without `-distroless`).",
                self.prefix(),
                self.target.container
            ),
        )
        .with_pod(pod)
    }

    pub(super) fn list_failed(&self, err: &TransportError, attempts: u32) -> ClickHouseSchemaError {
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

/// The live-schema check's messages (see [`crate::live_schema`]).
impl<T, C> Run<'_, T, C> {
    /// The apply's failure under `verify: 'fail'`: every object of `report` that is not as
    /// declared, one line each; the error's `object` and `differences` are the first one's.
    pub(crate) fn schema_mismatch(&self, plan: &VerifyPlan, report: &PodReport) -> ClickHouseSchemaError {
        let lines = self.mismatch_lines(plan, report);
        let mut message = format!(
            "{}: the statements ran on pod {}, but the pod does not hold what they declare:",
            self.prefix(),
            report.pod
        );
        for line in &lines {
            message.push_str("\n  - ");
            message.push_str(line);
        }
        message.push_str(
            "\nNothing is recorded, so the next deploy runs the statements again. Set verify: 'warn' to record \
             the apply anyway, or 'off' to skip the check.",
        );
        let first = report.objects.iter().find(|o| o.status != ObjectStatus::Ok);
        let mut err = self
            .error(ErrorKind::SchemaMismatch, message)
            .with_pod(&report.pod);
        if let Some(object) = first {
            err = err
                .with_statement_index(object.statement_index)
                .with_object(&object.name, object.differences.clone());
        }
        err
    }

    /// One line per object of `report` that is not as declared: what differs, why, what to do.
    pub(crate) fn mismatch_lines(&self, plan: &VerifyPlan, report: &PodReport) -> Vec<String> {
        report
            .objects
            .iter()
            .filter(|o| o.status != ObjectStatus::Ok)
            .map(|object| {
                let statement = format!("statement {}", object.statement_index);
                let form = plan.declaration_of(object).map(|d| d.form);
                match object.status {
                    ObjectStatus::Missing => format!(
                        "{} ({}) is missing on {}: {statement} ran without an error, yet the pod does not hold \
                         it. Another client dropped it, or the statement created it on another server; make \
                         the statement create it on this server",
                        object.name,
                        object.kind,
                        report.pod
                    ),
                    _ => {
                        let parts: Vec<String> = object.differences.iter().map(difference_text).collect();
                        let only_rebuild = crate::rebuild::rebuild_clauses(&object.differences, None);
                        let left_as_it_was =
                            matches!(form, Some(DeclarationForm::CreateIfNotExists | DeclarationForm::AttachIfNotExists));
                        let why = match form {
                            // What no ALTER can change: the statement left the table (or something changed
                            // it), and the way forward is a rebuild, which the props can allow.
                            _ if object.kind == "TABLE" && !only_rebuild.is_empty() => format!(
                                "{}no ALTER can change {} of a table; to rebuild it with nothing lost (a new \
                                 table, a dual write from a cut-over, a copy partition by partition, a verified \
                                 swap), allow it in the props: rebuild: {{ '{}': {{ cutoverColumn: '<a DateTime \
                                 or integer column>' }} }}",
                                if left_as_it_was {
                                    format!(
                                        "{statement} ({} ... IF NOT EXISTS) left the existing table as it was, and ",
                                        verb(form)
                                    )
                                } else {
                                    String::new()
                                },
                                only_rebuild.join(", "),
                                object.name
                            ),
                            Some(DeclarationForm::CreateIfNotExists | DeclarationForm::AttachIfNotExists) => {
                                format!(
                                    "{statement} ({} ... IF NOT EXISTS) left the existing {} as it was; change \
                                     the statement back, write an ALTER, or rebuild the {}",
                                    verb(form),
                                    object.kind.to_lowercase(),
                                    object.kind.to_lowercase()
                                )
                            }
                            _ => format!(
                                "{statement} declares it otherwise, so something changed it afterwards (another \
                                 client, or a later statement this check cannot follow); compare SHOW CREATE on \
                                 the pod with the statement and make them agree"
                            ),
                        };
                        format!("{} on {}: {}: {why}", object.name, report.pod, parts.join("; "))
                    }
                }
            })
            .collect()
    }

    pub(crate) fn verification_failed(&self, pod: &str, why: &str) -> ClickHouseSchemaError {
        self.error(
            ErrorKind::VerificationFailed,
            format!(
                "{}: the statements ran on pod {pod}, but the live-schema check could not run there: {why}. \
                 Nothing is recorded. Fix the cause, or set verify: 'warn' (report and record) or 'off'.",
                self.prefix()
            ),
        )
        .with_pod(pod)
    }

    pub(crate) fn unreadable_text(&self, why: Unreadable, exit_code: i32, stderr: &str) -> String {
        let said = if stderr.trim().is_empty() {
            String::new()
        } else {
            format!(" ClickHouse said: {}", stderr.trim().trim_end_matches('.'))
        };
        match why {
            Unreadable::NoScratchDatabase => format!(
                "it could not create its scratch database (CREATE DATABASE {SCRATCH_DATABASE_PREFIX}...), where \
                 it copies each declared object to read it back as the server prints it; grant the user CREATE \
                 DATABASE, CREATE TABLE, CREATE VIEW and DROP DATABASE on databases named \
                 {SCRATCH_DATABASE_PREFIX}*{said}"
            ),
            Unreadable::Incomplete => {
                format!(
                    "clickhouse-client stopped before the end of the check (exit code {exit_code}).{said}"
                )
            }
        }
    }
}

fn verb(form: Option<DeclarationForm>) -> &'static str {
    match form {
        Some(DeclarationForm::AttachIfNotExists | DeclarationForm::Attach) => "ATTACH",
        _ => "CREATE",
    }
}

/// `ORDER BY is `at`, declared `(id, at)``, and the like for columns.
fn difference_text(d: &DifferenceReport) -> String {
    match (d.declared.is_empty(), d.live.is_empty()) {
        (_, _) if d.clause == "column order" => {
            format!("the column order is `{}`, declared `{}`", d.live, d.declared)
        }
        (false, true) => format!("{} is absent, declared `{}`", d.clause, d.declared),
        (true, false) => format!("{} is `{}`, not declared", d.clause, d.live),
        _ => format!("{} is `{}`, declared `{}`", d.clause, d.live, d.declared),
    }
}
