//! Convergence on a pod (see the pure part, `converge`): after the statements ran and the
//! live-schema check found differences, the planned statements run in one exec, and the check
//! runs again. Nothing more is spent where the check finds the pod as declared.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Converge, PodPlan, plan_pod};
use crate::error::ClickHouseSchemaError;
use crate::error::ErrorKind;
use crate::live_schema::{ObjectStatus, PodReport, VerifyPlan};
use crate::reconcile::{Failure, Run, Tracked, bounded};
use crate::sql::clickhouse_text::literal;
use crate::sql::redact::redact_clickhouse_output;
use crate::transport::{Clock, Event, Executor, PodInfo, PodLister, TransportErrorKind};

/// A marker printed before each planned statement, so the output says how far the script got.
const MARKER: &str = "clickhouse_schema_converge";

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// Converges `pod` from the check's `report` (its script's `stdout`, scratch database
    /// `scratch`) and returns the report to decide on: the check's again after the statements
    /// ran, with what convergence keeps by design (live-only columns, the primary key a
    /// `MODIFY ORDER BY` leaves) no longer a difference. Also returns the pod's plan, whose
    /// refusals explain what still differs.
    pub(crate) async fn converge_pod(
        &self,
        plan: &VerifyPlan,
        converge: Converge<'_>,
        report: PodReport,
        scratch: &str,
        stdout: &str,
        stop: Option<&AtomicBool>,
    ) -> Result<(PodReport, PodPlan), Failure> {
        let mut pod_plan = plan_pod(plan, &report, scratch, stdout, converge.options());
        let pod = report.pod.clone();
        // Under onCluster every ALTER reaches every host, planned from this one: the other hosts
        // are checked first, and an object they would need altered otherwise is left alone.
        let hosts = match converge.on_cluster {
            Some(cluster) if pod_plan.statements().next().is_some() => {
                let hosts = self.other_hosts(plan, converge, &pod).await?;
                for (host, host_plan) in &hosts {
                    refuse_divergent(&mut pod_plan, host, host_plan);
                }
                super::with_hosts_guard(&mut pod_plan, cluster, hosts.len() + 1);
                hosts
            }
            _ => Vec::new(),
        };
        self.report_plan(&pod_plan);
        // A replicated table's ALTER runs on one replica of its set; another replica of the set
        // leaves it to replication and waits for it. A claim is held for the whole run: a
        // claimant that failed may have run its ALTERs, so no other replica runs them again.
        let mut own = pod_plan.clone();
        let mut waiting: Vec<String> = Vec::new();
        {
            let mut claims = self
                .converge_claims
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for object in own.objects.iter_mut().filter(|o| !o.statements.is_empty()) {
                if let Some(path) = &object.replica_path
                    && !claims.insert(path.clone())
                {
                    object.statements.clear();
                    waiting.push(object.object.clone());
                }
            }
        }
        for object in &waiting {
            self.report_replicated(object, &pod);
        }
        if own.statements().next().is_none() && waiting.is_empty() {
            return Ok((accept(report, &pod_plan), pod_plan));
        }
        if own.statements().next().is_some() {
            // The checks before an ALTER (see `GUARDS`) read this host's data; under onCluster
            // the ALTER changes every host's, so they run on each other host first.
            let guards = only_guards(&own);
            if guards.statements().next().is_some() {
                for (host, _) in &hosts {
                    self.run_script(&guards, host, false).await?;
                }
            }
            self.run_script(&own, &pod, true).await?;
            if let Some(report) = self.hosts_converged(plan, &own, &hosts, stop).await? {
                return Ok((report, pod_plan));
            }
        }
        let deadline = self.clock.now() + self.statement_timeout;
        loop {
            // Another pod of the pass failed: the pass stops, and nothing is left to wait for.
            if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                return Err(Failure::Stopped);
            }
            let report = accept(self.verify_pod_output(plan, &pod).await?.0, &pod_plan);
            let arrived = report
                .objects
                .iter()
                .filter(|o| waiting.contains(&o.name))
                .all(|o| o.status == ObjectStatus::Ok);
            if arrived || self.clock.now() >= deadline {
                return Ok((report, pod_plan));
            }
            self.unless_cancelled(self.clock.sleep(crate::reconcile::POLL_INTERVAL))
                .await;
        }
    }

    /// Under onCluster, after the ALTERs of `own` ran: each other host (`hosts`, with what
    /// convergence would have run there) checked until it has taken them (a replicated table's
    /// ALTER ON CLUSTER runs on one replica and reaches the others by replication). The report of
    /// the first host that differs otherwise, or has not taken them by the statement timeout, to
    /// decide on; `None` when every host is as declared (what convergence keeps by design aside).
    async fn hosts_converged(
        &self,
        plan: &VerifyPlan,
        own: &PodPlan,
        hosts: &[(String, PodPlan)],
        stop: Option<&AtomicBool>,
    ) -> Result<Option<PodReport>, Failure> {
        let deadline = self.clock.now() + self.statement_timeout;
        let altered = |name: &str| {
            own.objects
                .iter()
                .any(|o| o.object == name && !o.statements.is_empty())
        };
        for (host, host_plan) in hosts {
            loop {
                if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                    return Err(Failure::Stopped);
                }
                let checked = match self.verify_pod_output(plan, host).await {
                    // Gone since the list: it is no host of the cluster's any more.
                    Err(Failure::Vanished) => break,
                    other => other?.0,
                };
                // What that host keeps by design is its own plan's to say.
                let checked = accept(checked, host_plan);
                let differing: Vec<&str> = checked
                    .objects
                    .iter()
                    .filter(|o| o.status != ObjectStatus::Ok)
                    .map(|o| o.name.as_str())
                    .collect();
                if differing.is_empty() {
                    break;
                }
                // Only what was altered may still be on its way; anything else differs there.
                if differing.iter().any(|name| !altered(name)) || self.clock.now() >= deadline {
                    return Ok(Some(checked));
                }
                self.unless_cancelled(self.clock.sleep(crate::reconcile::POLL_INTERVAL))
                    .await;
            }
        }
        Ok(None)
    }

    /// Under onCluster: every other Ready pod with the container, and what convergence would
    /// run there (one check each).
    async fn other_hosts(
        &self,
        plan: &VerifyPlan,
        converge: Converge<'_>,
        pod: &str,
    ) -> Result<Vec<(String, PodPlan)>, Failure> {
        let pods = self.list_matching().await.map_err(Failure::Error)?;
        let mut out = Vec::new();
        for other in pods
            .iter()
            .filter(|p| p.name != pod && p.ready && p.has_container(&self.target.container))
        {
            match self.verify_pod_output(plan, &other.name).await {
                Ok((report, scratch, stdout)) => out.push((
                    other.name.clone(),
                    plan_pod(plan, &report, &scratch, &stdout, converge.options()),
                )),
                Err(Failure::Vanished) => {}
                Err(other) => return Err(other),
            }
        }
        Ok(out)
    }

    /// A `replicated` event: `object` on `pod` waits for another replica's ALTERs.
    fn report_replicated(&self, object: &str, pod: &str) {
        self.events.emit(Event::Converge {
            pod: pod.to_owned(),
            object: object.to_owned(),
            action: "replicated".to_owned(),
            changes: Vec::new(),
            column: None,
            message: format!(
                "{object} on {pod}: another replica of its set runs the ALTERs; waiting for them to replicate"
            ),
        });
    }

    /// What convergence would do on each of `pods` (each Ready and with the container), from
    /// one check per pod, running nothing: for `plan`. A pod gone since the list is left out.
    pub(crate) async fn plan_converge(
        &self,
        plan: &VerifyPlan,
        converge: Converge<'_>,
        pods: &[PodInfo],
    ) -> Result<Vec<PodPlan>, ClickHouseSchemaError> {
        let (mut results, _) = bounded(
            pods,
            self.parallelism,
            || true,
            |pod| async move {
                self.verify_pod_output(plan, &pod.name)
                    .await
                    .map(|(report, scratch, stdout)| {
                        plan_pod(plan, &report, &scratch, &stdout, converge.options())
                    })
            },
        )
        .await;
        results.sort_by_key(|(at, _)| *at);
        let mut out = Vec::new();
        for (_, result) in results {
            match result {
                Ok(pod_plan) => out.push(pod_plan),
                Err(Failure::Vanished | Failure::Stopped) => {}
                Err(Failure::Error(err)) => return Err(err),
            }
        }
        // Under onCluster the apply converges from the first host, after it compared the others.
        if let (Some(cluster), false) = (converge.on_cluster, out.is_empty()) {
            let mut first = out.remove(0);
            if first.statements().next().is_some() {
                for other in &out {
                    refuse_divergent(&mut first, &other.pod, other);
                }
                super::with_hosts_guard(&mut first, cluster, out.len() + 1);
            }
            return Ok(vec![first]);
        }
        // As the apply does: a replica set's ALTERs run on one replica, the others replicate them.
        let mut claims: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
        for pod_plan in &mut out {
            for object in pod_plan.objects.iter_mut().filter(|o| !o.statements.is_empty()) {
                let Some(path) = &object.replica_path else {
                    continue;
                };
                match claims.get(path) {
                    Some(claimant) => {
                        object.statements.clear();
                        object.replicated_from = Some(claimant.clone());
                    }
                    None => {
                        claims.insert(path.clone(), pod_plan.pod.clone());
                    }
                }
            }
        }
        Ok(out)
    }

    /// An event per change, kept column and refusal of `pod_plan`.
    fn report_plan(&self, pod_plan: &PodPlan) {
        let pod = &pod_plan.pod;
        for object in &pod_plan.objects {
            for column in &object.kept_columns {
                self.events.emit(Event::Converge {
                    pod: pod.clone(),
                    object: object.object.clone(),
                    action: "keptColumn".to_owned(),
                    changes: Vec::new(),
                    column: Some(column.clone()),
                    message: format!(
                        "{} on {pod}: column {column} is not declared; it is kept with its data (convergence \
                         drops no column)",
                        object.object
                    ),
                });
            }
            for refusal in &object.refused {
                self.events.emit(Event::Converge {
                    pod: pod.clone(),
                    object: object.object.clone(),
                    action: "refused".to_owned(),
                    changes: Vec::new(),
                    column: refusal.clause.strip_prefix("column ").map(str::to_owned),
                    message: format!(
                        "{} on {pod}: {} is left as it is: {}",
                        object.object, refusal.clause, refusal.why
                    ),
                });
            }
        }
    }

    /// Runs every planned statement of `pod_plan` in one exec on `pod`, stopping at the first
    /// failure, which names the object, the statement's position and the pod. With `alters`, an
    /// `alter` event for each object all of whose statements ran (without: only the checks before
    /// the ALTERs, on another host).
    async fn run_script(&self, pod_plan: &PodPlan, pod: &str, alters: bool) -> Result<(), Failure> {
        let statements: Vec<(&super::ObjectPlan, &String)> = pod_plan.statements().collect();
        let mut script = String::new();
        for (at, (_, statement)) in statements.iter().enumerate() {
            let _ = writeln!(script, "SELECT {}, {at} FORMAT TabSeparated;", literal(MARKER));
            let _ = writeln!(script, "{statement};");
        }
        // Under a query id of its own, so that a cancellation, a lost lease or a dropped exec can
        // stop it where it runs (see `reconcile::abandoned`).
        let (mut request, query_id) = self.script_request("cv", pod, script);
        // Each statement is bounded as a statement alone is, and the script by their sum: one
        // bound for every ALTER of a pod would cut a long list short.
        request.command = crate::command::render_batch(
            self.client,
            self.settings,
            request.stdin.len(),
            self.statement_timeout,
            statements.len(),
            &query_id,
            None,
        );
        request.timeout = crate::command::batch_exec_timeout(self.statement_timeout, statements.len(), false);
        // A transport failure is not retried: an ALTER may have run, and the check decides after
        // the next apply's statements.
        let output = match self
            .exec_tracked(&request, "the convergence script", &query_id, None)
            .await
        {
            Tracked::CancelledBefore => {
                return Err(Failure::Error(
                    self.cancelled(&format!("before convergence on pod {pod}"))
                        .with_pod(pod),
                ));
            }
            Tracked::CancelledDuring => {
                return Err(Failure::Error(
                    self.cancelled(&format!(
                        "during convergence on pod {pod}; whether its ALTERs ran is unknown"
                    ))
                    .with_pod(pod),
                ));
            }
            Tracked::Failed { err, .. }
                if err.kind == TransportErrorKind::Refused && err.http_status == Some(404) =>
            {
                return Err(Failure::Vanished);
            }
            Tracked::Failed { err, .. } => {
                return Err(Failure::Error(
                    self.error(
                        ErrorKind::Transport,
                        format!(
                            "{}: convergence on pod {pod} failed in transport: {}. Nothing is recorded; the next \
                             deploy checks the pod again.",
                            self.prefix(),
                            err.message
                        ),
                    )
                    .with_pod(pod),
                ));
            }
            // Only a retry meets this, and this script is never retried.
            Tracked::EarlierRunning { .. } => {
                return Err(Failure::Error(
                    self.error(
                        ErrorKind::Transport,
                        format!(
                            "{}: convergence on pod {pod} was refused: a query under its id ({query_id}) still \
                             runs. Nothing is recorded; the next deploy checks the pod again.",
                            self.prefix()
                        ),
                    )
                    .with_pod(pod),
                ));
            }
            Tracked::Output { output, .. } => output,
        };
        // The text each statement printed, after its marker: the status table of an ON CLUSTER
        // ALTER, and which statement the script had reached when it stopped.
        let mut printed: Vec<(usize, String)> = Vec::new();
        for line in output.stdout.lines() {
            match line
                .strip_prefix(MARKER)
                .and_then(|r| r.trim().parse::<usize>().ok())
            {
                Some(at) if at < statements.len() => printed.push((at, String::new())),
                _ => {
                    if let Some((_, text)) = printed.last_mut() {
                        text.push_str(line);
                        text.push('\n');
                    }
                }
            }
        }
        let reached = printed.last().map(|(at, _)| *at);
        if output.exit_code == 0 {
            // Under `distributed_ddl_output_mode` 'never_throw' or 'null_status_on_timeout' an
            // ALTER ... ON CLUSTER exits 0 with a host's failure only in its status table.
            for (at, text) in &printed {
                let (object, statement) = statements[*at];
                let hosts = crate::sql::ddl_status::problems(statement, text, self.null_status());
                if !hosts.is_empty() {
                    self.report_altered(&statements[..*at], pod, alters);
                    let (hosts_text, code) = self.host_outcomes(statement, &hosts);
                    let position = object.statements.iter().position(|s| s == statement).unwrap_or(0);
                    return Err(Failure::Error(
                        self.error(
                            ErrorKind::StatementFailed,
                            format!(
                                "{}: convergence of {} from pod {pod}: its statement {position} ({} in all for it) \
                                 exited 0 but its distributed DDL status table says{hosts_text}. The hosts that ran \
                                 it keep it; the next deploy checks again and plans from what it finds. \
                                 'throw_only_active' (recommended) or 'throw' as distributed_ddl_output_mode makes \
                                 such an ALTER fail at once.",
                                self.prefix(),
                                object.object,
                                object.statements.len(),
                            ),
                        )
                        .with_statement_index(object.statement_index)
                        .with_pod(pod)
                        .with_exit_code(0)
                        .with_clickhouse(code, None),
                    ));
                }
            }
            self.report_altered(&statements, pod, alters);
            return Ok(());
        }
        let redacted = redact_clickhouse_output(&output.stderr, &request.stdin);
        let status = match redacted.clickhouse_code {
            Some(code) => format!("ClickHouse code {code} (exit {})", output.exit_code),
            None => format!("exit {}", output.exit_code),
        };
        let Some(at) = reached else {
            // The client failed before the first marker: no statement was sent.
            let (object, _) = statements[0];
            let mut message = format!(
                "{}: convergence on pod {pod} failed before its first statement was sent ({status}): none of \
                 its ALTERs ran. Nothing is recorded; the next deploy checks the pod again.",
                self.prefix()
            );
            if !redacted.text.trim().is_empty() {
                message.push('\n');
                message.push_str(redacted.text.trim_end());
            }
            return Err(Failure::Error(
                self.error(ErrorKind::StatementFailed, message)
                    .with_statement_index(object.statement_index)
                    .with_pod(pod)
                    .with_exit_code(output.exit_code)
                    .with_clickhouse(redacted.clickhouse_code, redacted.clickhouse_exception),
            ));
        };
        // Statements before the one that failed ran; whole objects among them are reported as
        // altered.
        self.report_altered(&statements[..at], pod, alters);
        let (object, statement) = statements[at];
        let position = object.statements.iter().position(|s| s == statement).unwrap_or(0);
        let before = if position == 0 {
            String::new()
        } else {
            format!(
                " Its statement{} before it ran and stay{}: {}.",
                if position == 1 { "" } else { "s" },
                if position == 1 { "s" } else { "" },
                object.statements[..position].join("; ")
            )
        };
        let host_rows = crate::sql::ddl_status::has_on_cluster(statement)
            && printed
                .iter()
                .any(|(printed_at, text)| *printed_at == at && !text.trim().is_empty());
        let failed = Failed {
            code: redacted.clickhouse_code,
            exit_code: output.exit_code,
            stderr: &redacted.text,
            host_rows,
        };
        let what = match failure_kind(statement, &failed) {
            FailureKind::CheckFailed => format!(
                "its statement {position} ({} in all for it), a check before its ALTER, could not run; nothing \
                 was changed.{before} The next deploy checks the pod again.",
                object.statements.len()
            ),
            FailureKind::Refused => format!(
                "the server refused its statement {position} ({} in all for it), which did not run, nor did \
                 what follows it.{before} Nothing is recorded; fix the declaration (or the table), and the \
                 next deploy plans again.",
                object.statements.len()
            ),
            FailureKind::Guard(guard) => format!(
                "its statement {position} ({} in all for it), a check before its ALTER, {}.{before}",
                object.statements.len(),
                guard.explains
            ),
            FailureKind::MutationFailed => format!(
                "its statement {position} ({} in all for it) changed the table's definition, but the mutation \
                 that rewrites its parts failed: the table may be partly converted, or unreadable, until \
                 the mutation finishes or is killed (see system.mutations for {} where latest_fail_reason \
                 is set; KILL MUTATION stops it).{before} The next deploy checks the pod again.",
                object.statements.len(),
                object.object
            ),
            FailureKind::Unknown => format!(
                "its statement {position} ({} in all for it) ended without a known outcome: the server may \
                 have applied it, or may still be applying it (a mutation or a distributed DDL task goes on \
                 without the client).{before} The next deploy checks the pod again and plans from what it \
                 finds.",
                object.statements.len()
            ),
        };
        let mut message = format!(
            "{}: convergence of {} failed on pod {pod} ({status}): {what}",
            self.prefix(),
            object.object,
        );
        if !redacted.text.trim().is_empty() {
            message.push('\n');
            message.push_str(redacted.text.trim_end());
        }
        Err(Failure::Error(
            self.error(ErrorKind::StatementFailed, message)
                .with_statement_index(object.statement_index)
                .with_pod(pod)
                .with_exit_code(output.exit_code)
                .with_clickhouse(redacted.clickhouse_code, redacted.clickhouse_exception),
        ))
    }

    /// An `alter` event for each object all of whose statements are among `ran`, when `alters`.
    fn report_altered(&self, ran: &[(&super::ObjectPlan, &String)], pod: &str, alters: bool) {
        if !alters {
            return;
        }
        for object in pod_plan_objects(ran) {
            if object
                .statements
                .iter()
                .all(|s| ran.iter().any(|(o, r)| o.object == object.object && *r == s))
            {
                self.events.emit(Event::Converge {
                    pod: pod.to_owned(),
                    object: object.object.clone(),
                    action: "alter".to_owned(),
                    changes: object.changes.clone(),
                    column: None,
                    message: format!("{} on {pod}: {}", object.object, object.changes.join(", ")),
                });
            }
        }
    }
}

/// The objects of `statements`, each once, in order.
fn pod_plan_objects<'p>(statements: &[(&'p super::ObjectPlan, &String)]) -> Vec<&'p super::ObjectPlan> {
    let mut out: Vec<&super::ObjectPlan> = Vec::new();
    for (object, _) in statements {
        if !out.iter().any(|o| o.object == object.object) {
            out.push(object);
        }
    }
    out
}

/// What a failed convergence statement's exit says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FailureKind {
    /// The server refused it: nothing of it was applied.
    Refused,
    /// A check before an ALTER (`throwIf`'s code 395) found what the ALTER would change.
    Guard(super::Guard),
    /// The ALTER changed the table's definition and its mutation failed (`UNFINISHED`, 341).
    MutationFailed,
    /// The client stopped without the server's answer, the server's wait ran out, or some hosts
    /// of an ALTER ON CLUSTER ran it: it may have been applied, or may still be.
    Unknown,
    /// A check before an ALTER failed to run (a timeout, a cancel, an error): nothing was changed.
    CheckFailed,
}

/// ClickHouse codes after which the statement may have been applied, or still runs: a timeout
/// of the server's wait (159, `TIMEOUT_EXCEEDED`, also `distributed_ddl_task_timeout`), the
/// connection lost (209 `SOCKET_TIMEOUT`, 210 `NETWORK_ERROR`, 32 `ATTEMPT_TO_READ_AFTER_EOF`),
/// the query cancelled (394), ZooKeeper or Keeper lost mid-way (999 `KEEPER_EXCEPTION`, 242
/// is not one: a read-only replica refuses before it applies anything).
const UNKNOWN_OUTCOME_CODES: &[u32] = &[32, 159, 209, 210, 394, 999];

/// Exit statuses of a client stopped from outside: `timeout`'s 124, and killed by SIGKILL (137)
/// or SIGTERM (143).
const KILLED_EXITS: &[i32] = &[124, 137, 143];

pub(super) fn failure_kind(statement: &str, failed: &Failed<'_>) -> FailureKind {
    if statement.starts_with(super::GUARD_START) {
        // A check only reads: whatever stopped it, nothing was changed.
        return match failed.code {
            Some(395) => super::GUARDS
                .into_iter()
                .find(|g| statement.contains(g.says))
                .map_or(FailureKind::CheckFailed, FailureKind::Guard),
            _ => FailureKind::CheckFailed,
        };
    }
    match failed.code {
        // An ALTER ON CLUSTER that printed host rows before it threw: some hosts may have run it.
        _ if failed.host_rows => FailureKind::Unknown,
        // Also what a replicated table answers when it left a mutation to replicas that are
        // inactive: done asynchronously, not failed.
        Some(341) if failed.stderr.contains("inactive") => FailureKind::Unknown,
        Some(341) => FailureKind::MutationFailed,
        Some(code) if UNKNOWN_OUTCOME_CODES.contains(&code) => FailureKind::Unknown,
        _ if KILLED_EXITS.contains(&failed.exit_code) => FailureKind::Unknown,
        Some(_) => FailureKind::Refused,
        None => FailureKind::Unknown,
    }
}

/// What a failed statement of a convergence script left to read.
pub(super) struct Failed<'a> {
    /// The ClickHouse code of its exception.
    pub(super) code: Option<u32>,
    /// The client's exit status.
    pub(super) exit_code: i32,
    /// What the client printed on stderr (redacted).
    pub(super) stderr: &'a str,
    /// It printed host status rows (an ALTER ON CLUSTER) before it failed.
    pub(super) host_rows: bool,
}

/// Refuses each object of `pod_plan` whose statements another host (`host`, whose plan is
/// `host_plan`) would not run alike: under onCluster they would reach it too.
pub(super) fn refuse_divergent(pod_plan: &mut PodPlan, host: &str, host_plan: &PodPlan) {
    for object in pod_plan.objects.iter_mut().filter(|o| !o.statements.is_empty()) {
        let there = host_plan.objects.iter().find(|o| o.object == object.object);
        if there.is_some_and(|t| t.statements == object.statements && t.refused.is_empty()) {
            continue;
        }
        let needs = match there {
            None => "nothing convergence does (it is as declared there, or missing)".to_owned(),
            Some(t) if !t.refused.is_empty() => "a change convergence refuses there".to_owned(),
            Some(t) if t.changes.is_empty() || t.changes == object.changes => "other statements".to_owned(),
            Some(t) => t.changes.join(", "),
        };
        object.refused.push(super::Refusal {
            clause: "hosts".to_owned(),
            why: format!(
                "its ALTERs would run ON CLUSTER on every host, and host {host} needs {needs}, not what this one \
                 needs ({}); make the hosts alike first, or change each with statements of your own",
                object.changes.join(", ")
            ),
            alter: None,
        });
        object.statements.clear();
        object.changes.clear();
    }
}

/// `pod_plan` with only its checks before an ALTER (see `GUARDS`), to run on another host.
fn only_guards(pod_plan: &PodPlan) -> PodPlan {
    let mut guards = pod_plan.clone();
    for object in &mut guards.objects {
        object.statements.retain(|s| s.starts_with(super::GUARD_START));
    }
    guards
}

/// `report` with each object's accepted differences (see [`super::ObjectPlan::accepted`]) left
/// out, and an object with none left counted as declared.
fn accept(mut report: PodReport, pod_plan: &PodPlan) -> PodReport {
    for object in &mut report.objects {
        let Some(planned) = pod_plan.objects.iter().find(|p| p.object == object.name) else {
            continue;
        };
        object
            .differences
            .retain(|d| !planned.accepted.contains(&d.clause));
        if object.status == ObjectStatus::Differs && object.differences.is_empty() {
            object.status = ObjectStatus::Ok;
        }
    }
    report
}
