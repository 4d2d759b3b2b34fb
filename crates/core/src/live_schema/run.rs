//! Checking the live schema on a pod (see the pure part, `live_schema`): after
//! an apply's statements ran there, and for `verify()`. One exec each;
//! transport failures are retried like a statement's. After a pod's statements
//! sent as one script (`reconcile::batch`) the check is part of that script's
//! exec, and has one of its own only when what it printed there cannot be read
//! (its output cut by the transport's cap, its client ended early): a check in
//! an exec of its own is what decides then, as it did before.

use super::{ObjectStatus, PodReport, VerifyPlan, scratch_database};
use crate::command;
use crate::config::VerifyMode;
use crate::error::ErrorKind;
use crate::reconcile::{Call, CheckRan, Failure, Run, Verification};
use crate::sql::redact::redact_clickhouse_output;
use crate::transport::{Clock, Event, ExecRequest, Executor, PodLister, TransportErrorKind};

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// The live-schema check after the statements ran on `pod`: a mismatch fails the pod (and
    /// so the apply) under `verify: 'fail'`, and is reported as an event under `'warn'`.
    /// `ran` is what the check printed in the statements' exec, if it ran there; `stop` is the
    /// fanout pass's, set when another pod failed (convergence stops waiting for replication).
    pub(crate) async fn verify_after_apply(
        &self,
        verification: Verification<'_>,
        pod: &str,
        ran: Option<CheckRan>,
        stop: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<(), Failure> {
        let read = ran.and_then(|ran| {
            let report = verification.plan.read(pod, &ran.scratch, &ran.stdout).ok()?;
            Some((report, ran.scratch, ran.stdout))
        });
        let output = match read {
            Some(read) => Ok(read),
            None => self.verify_pod_output(verification.plan, pod).await,
        };
        let checked = match (self.converge, output) {
            // Convergence: what differs is brought to the declaration where an ALTER can, and
            // checked again; what it leaves is reported below as without it.
            (Some(converge), Ok((report, scratch, stdout))) if !report.is_ok() => self
                .converge_pod(verification.plan, converge, report, &scratch, &stdout, stop)
                .await
                .map(|(report, pod_plan)| (report, Some(pod_plan))),
            (_, result) => result.map(|(report, ..)| (report, None)),
        };
        let refusals = checked
            .as_ref()
            .ok()
            .and_then(|(_, pod_plan)| pod_plan.as_ref())
            .map(crate::converge::refusal_lines)
            .unwrap_or_default();
        let outcome = match checked.map(|(report, _)| report) {
            Ok(report) if report.is_ok() => {
                self.events.emit(Event::Verified {
                    pod: pod.to_owned(),
                    object_count: report.objects.len(),
                    ok: true,
                    message: format!(
                        "live schema on {pod}: {} object(s) as declared",
                        report.objects.len()
                    ),
                });
                return Ok(());
            }
            Ok(report) => Err(report),
            Err(Failure::Error(err)) if err.kind == ErrorKind::VerificationFailed => Ok(err),
            Err(other) => return Err(other),
        };
        match (verification.mode, outcome) {
            (VerifyMode::Fail, Err(report)) => {
                let mut err = self.schema_mismatch(verification.plan, &report);
                for line in &refusals {
                    err.message.push_str("\nConvergence left it: ");
                    err.message.push_str(line);
                }
                Err(Failure::Error(err))
            }
            (VerifyMode::Fail, Ok(err)) => Err(Failure::Error(err)),
            (_, Err(report)) => {
                let message = self.mismatch_lines(verification.plan, &report).join("\n");
                self.events.emit(Event::SchemaMismatch {
                    pod: pod.to_owned(),
                    objects: report
                        .objects
                        .into_iter()
                        .filter(|o| o.status != ObjectStatus::Ok)
                        .collect(),
                    message,
                });
                Ok(())
            }
            (_, Ok(err)) => {
                self.events.emit(Event::VerificationFailed {
                    pod: pod.to_owned(),
                    message: err.message,
                });
                Ok(())
            }
        }
    }

    /// The name of a new scratch database for a check of `plan` on `pod`, and the check's script.
    /// `place` tells a check in a batch's exec from one in its own: the second follows the first
    /// when that one's output could not be read, and its scratch database may still be there.
    pub(crate) fn check_script(&self, plan: &VerifyPlan, pod: &str, place: &str) -> (String, String) {
        let scratch = scratch_database(&format!(
            "{}/{}/{place}/{}/{}",
            self.resource_id,
            pod,
            self.clock.now_iso8601(),
            self.clock.now().as_nanos()
        ));
        let script = plan.script(&scratch);
        (scratch, script)
    }

    /// Looks up every object of `plan` on `pod` in one exec (see [`crate::live_schema`]).
    pub(crate) async fn verify_pod(&self, plan: &VerifyPlan, pod: &str) -> Result<PodReport, Failure> {
        self.verify_pod_output(plan, pod).await.map(|(report, ..)| report)
    }

    /// [`Self::verify_pod`], with the scratch database's name and the script's output (what
    /// convergence plans from).
    pub(crate) async fn verify_pod_output(
        &self,
        plan: &VerifyPlan,
        pod: &str,
    ) -> Result<(PodReport, String, String), Failure> {
        let (scratch, script) = self.check_script(plan, pod, "own");
        let request = ExecRequest {
            namespace: self.target.namespace.clone(),
            pod: pod.to_owned(),
            container: self.target.container.clone(),
            command: command::render_script(self.client, self.settings, script.len(), self.statement_timeout),
            stdin: script,
            timeout: command::exec_timeout(self.statement_timeout),
        };
        if self.cancel.is_cancelled() {
            return Err(Failure::Error(
                self.cancelled(&format!("before the live-schema check on pod {pod}"))
                    .with_pod(pod),
            ));
        }
        let attempt = self.with_retry(Call::Check { pod }, || self.transport.exec(request.clone()));
        let output = match self.unless_cancelled(attempt).await {
            None => {
                return Err(Failure::Error(
                    self.cancelled(&format!("during the live-schema check on pod {pod}"))
                        .with_pod(pod),
                ));
            }
            Some(Err((err, _)))
                if err.kind == TransportErrorKind::Refused && err.http_status == Some(404) =>
            {
                return Err(Failure::Vanished);
            }
            Some(Err((err, _))) if err.kind == TransportErrorKind::ProgramMissing => {
                return Err(Failure::Error(self.image_unsupported(
                    "the live-schema check",
                    pod,
                    &err.message,
                )));
            }
            Some(Err((err, attempts))) => {
                return Err(Failure::Error(self.verification_failed(
                    pod,
                    &format!("its exec failed after {attempts} attempt(s): {}", err.message),
                )));
            }
            Some(Ok(output)) => output,
        };
        match plan.read(pod, &scratch, &output.stdout) {
            Ok(report) => Ok((report, scratch, output.stdout)),
            Err(why) => {
                let stderr = redact_clickhouse_output(&output.stderr, &request.stdin).text;
                Err(Failure::Error(self.verification_failed(
                    pod,
                    &self.unreadable_text(why, output.exit_code, &stderr),
                )))
            }
        }
    }
}
