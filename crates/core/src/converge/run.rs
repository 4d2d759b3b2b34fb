//! Convergence on a pod (see the pure part, `converge`): after the statements ran and the
//! live-schema check found differences, the planned statements run in one exec, and the check
//! runs again. Nothing more is spent where the check finds the pod as declared.

use std::fmt::Write as _;

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
    ) -> Result<(PodReport, PodPlan), Failure> {
        let pod_plan = plan_pod(plan, &report, scratch, stdout, converge.options());
        let pod = report.pod.clone();
        self.report_plan(&pod_plan);
        // A replicated table's ALTER runs on one replica of its set; another replica of the set
        // leaves it to replication and waits for it.
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
            self.events.emit(Event::Converge {
                pod: pod.clone(),
                object: object.clone(),
                action: "replicated".to_owned(),
                changes: Vec::new(),
                column: None,
                message: format!(
                    "{object} on {pod}: another replica of its set runs the ALTERs; waiting for them to replicate"
                ),
            });
        }
        if own.statements().next().is_none() && waiting.is_empty() {
            return Ok((accept(report, &pod_plan), pod_plan));
        }
        if own.statements().next().is_some() {
            self.run_converge(&own, &pod).await?;
        }
        let deadline = self.clock.now() + self.statement_timeout;
        loop {
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

    /// Runs every planned statement of `pod_plan` in one exec, stopping at the first failure,
    /// which names the object, the statement's position and the pod.
    async fn run_converge(&self, pod_plan: &PodPlan, pod: &str) -> Result<(), Failure> {
        let statements: Vec<(&super::ObjectPlan, &String)> = pod_plan.statements().collect();
        let mut script = String::new();
        for (at, (_, statement)) in statements.iter().enumerate() {
            let _ = writeln!(script, "SELECT {}, {at} FORMAT TabSeparated;", literal(MARKER));
            let _ = writeln!(script, "{statement};");
        }
        for object in pod_plan.objects.iter().filter(|o| !o.statements.is_empty()) {
            self.events.emit(Event::Converge {
                pod: pod.to_owned(),
                object: object.object.clone(),
                action: "alter".to_owned(),
                changes: object.changes.clone(),
                column: None,
                message: format!("{} on {pod}: {}", object.object, object.changes.join(", ")),
            });
        }
        // Under a query id of its own, so that a cancellation, a lost lease or a dropped exec can
        // stop it where it runs (see `reconcile::abandoned`).
        let (request, query_id) = self.script_request("cv", pod, script);
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
        if output.exit_code == 0 {
            return Ok(());
        }
        // The last marker printed names the statement that failed.
        let at: usize = output
            .stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(MARKER).and_then(|r| r.trim().parse().ok()))
            .unwrap_or(0);
        let (object, statement) = statements[at.min(statements.len() - 1)];
        let position = object.statements.iter().position(|s| s == statement).unwrap_or(0);
        let redacted = redact_clickhouse_output(&output.stderr, &request.stdin);
        let index = object.statement_index;
        let mut message = format!(
            "{}: convergence of {} failed on pod {pod}: its statement {position} ({} in all for it) did not run\n{}\
             Nothing is recorded; fix the declaration (or the table), and the next deploy plans again.",
            self.prefix(),
            object.object,
            object.statements.len(),
            match redacted.clickhouse_code {
                Some(code) => format!("ClickHouse code {code} (exit {}). ", output.exit_code),
                None => format!("exit {}. ", output.exit_code),
            }
        );
        if !redacted.text.trim().is_empty() {
            message.push('\n');
            message.push_str(redacted.text.trim_end());
        }
        Err(Failure::Error(
            self.error(ErrorKind::StatementFailed, message)
                .with_statement_index(index)
                .with_pod(pod)
                .with_exit_code(output.exit_code)
                .with_clickhouse(redacted.clickhouse_code, redacted.clickhouse_exception),
        ))
    }
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
