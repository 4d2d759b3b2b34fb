//! The ledger on a pod (see `crate::coordination::ledger`): written after a pod's
//! statements (and their check) succeeded, read where a run has to know what
//! an earlier deploy did. One exec each; transport failures are retried like
//! a statement's.

use crate::command;
use crate::config::LedgerConfig;
use crate::coordination::ledger::{self, LedgerRow, LedgerWrite};
use crate::error::{ClickHouseSchemaError, ErrorKind};
use crate::reconcile::{Call, Failure, Run, bounded};
use crate::sql::redact::redact_clickhouse_output;
use crate::transport::{Clock, ExecRequest, Executor, PodInfo, PodLister, TransportErrorKind};

/// ClickHouse's codes for a table or database that does not exist: a ledger never written.
const UNKNOWN_TABLE: u32 = 60;
const UNKNOWN_DATABASE: u32 = 81;

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// Writes this run's row on `pod`. A failure fails the pod: the
    /// statements ran, but a deploy that lost its state could not know it.
    pub(crate) async fn write_ledger(&self, write: LedgerWrite<'_>, pod: &PodInfo) -> Result<(), Failure> {
        let row = LedgerRow {
            resource_id: self.resource_id.to_owned(),
            fingerprint: write.fingerprint.to_owned(),
            statement_count: write.statement_count,
            pod: pod.name.clone(),
            pod_uid: pod.uid.clone().unwrap_or_default(),
            // Stamped by the pod's server, in the order rows are written there
            // (`ledger::write_script`): this machine's clock may be off.
            applied_at: String::new(),
            package_version: ledger::PACKAGE_VERSION.to_owned(),
        };
        let script = ledger::write_script(write.config, &row);
        let request = self.ledger_request(&pod.name, script, command::render_multiquery);
        if self.cancel.is_cancelled() {
            return Err(Failure::Error(
                self.cancelled(&format!("before the ledger write on pod {}", pod.name))
                    .with_pod(&pod.name),
            ));
        }
        let attempt = self.with_retry(Call::Ledger { pod: &pod.name }, || {
            self.transport.exec(request.clone())
        });
        let output = match self.unless_cancelled(attempt).await {
            None => {
                return Err(Failure::Error(
                    self.cancelled(&format!("during the ledger write on pod {}", pod.name))
                        .with_pod(&pod.name),
                ));
            }
            Some(Err((err, _)))
                if err.kind == TransportErrorKind::Refused && err.http_status == Some(404) =>
            {
                return Err(Failure::Vanished);
            }
            Some(Err((err, _))) if err.kind == TransportErrorKind::ProgramMissing => {
                return Err(Failure::Error(self.image_unsupported(
                    "the ledger write",
                    &pod.name,
                    &err.message,
                )));
            }
            Some(Err((err, attempts))) => {
                return Err(Failure::Error(self.ledger_failed(
                    write.config,
                    &pod.name,
                    "written",
                    &format!("its exec failed after {attempts} attempt(s): {}", err.message),
                )));
            }
            Some(Ok(output)) => output,
        };
        if output.exit_code != 0 {
            let said = redact_clickhouse_output(&output.stderr, &request.stdin).text;
            return Err(Failure::Error(self.ledger_failed(
                write.config,
                &pod.name,
                "written",
                &format!("clickhouse-client exited with {}: {said}", output.exit_code),
            )));
        }
        Ok(())
    }

    /// The ledger rows of `pods` that concern this resource (its own rows, and
    /// any with `fingerprint`), newest first, up to `parallelism` pods at once.
    /// A pod without the table has none.
    pub(crate) async fn read_ledgers<'p>(
        &self,
        config: &LedgerConfig,
        fingerprint: &str,
        pods: &[&'p PodInfo],
    ) -> Result<Vec<(&'p PodInfo, Vec<LedgerRow>)>, ClickHouseSchemaError> {
        let (results, _) = bounded(
            pods,
            self.parallelism,
            || true,
            |pod| async move { (*pod, self.read_ledger(config, fingerprint, &pod.name).await) },
        )
        .await;
        let mut read = Vec::with_capacity(results.len());
        let mut failures = Vec::new();
        for (_, (pod, result)) in results {
            match result {
                Ok(rows) => read.push((pod, rows)),
                Err(err) => failures.push(err),
            }
        }
        failures.sort_by(|a, b| a.pod.cmp(&b.pod));
        if let Some(err) = failures.into_iter().next() {
            return Err(err);
        }
        read.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        Ok(read)
    }

    async fn read_ledger(
        &self,
        config: &LedgerConfig,
        fingerprint: &str,
        pod: &str,
    ) -> Result<Vec<LedgerRow>, ClickHouseSchemaError> {
        let script = ledger::read_script(config, self.resource_id, fingerprint);
        let request = self.ledger_request(pod, script, command::render_script);
        if self.cancel.is_cancelled() {
            return Err(self
                .cancelled(&format!("before the ledger read on pod {pod}"))
                .with_pod(pod));
        }
        let attempt = self.with_retry(Call::Ledger { pod }, || self.transport.exec(request.clone()));
        let output = match self.unless_cancelled(attempt).await {
            None => {
                return Err(self
                    .cancelled(&format!("during the ledger read on pod {pod}"))
                    .with_pod(pod));
            }
            Some(Err((err, _))) if err.kind == TransportErrorKind::ProgramMissing => {
                return Err(self.image_unsupported("the ledger read", pod, &err.message));
            }
            Some(Err((err, attempts))) => {
                return Err(self.ledger_failed(
                    config,
                    pod,
                    "read",
                    &format!("its exec failed after {attempts} attempt(s): {}", err.message),
                ));
            }
            Some(Ok(output)) => output,
        };
        let said = redact_clickhouse_output(&output.stderr, &request.stdin);
        let never_written = matches!(said.clickhouse_code, Some(UNKNOWN_TABLE | UNKNOWN_DATABASE));
        if said.clickhouse_code.is_some() && !never_written {
            return Err(self.ledger_failed(config, pod, "read", &said.text));
        }
        ledger::parse(&output.stdout).map_err(|why| self.ledger_failed(config, pod, "read", &why))
    }

    fn ledger_request(
        &self,
        pod: &str,
        script: String,
        render: fn(
            &crate::config::ClientConfig,
            &std::collections::BTreeMap<String, crate::config::SettingValue>,
            usize,
            std::time::Duration,
        ) -> Vec<String>,
    ) -> ExecRequest {
        ExecRequest {
            namespace: self.target.namespace.clone(),
            pod: pod.to_owned(),
            container: self.target.container.clone(),
            command: render(self.client, self.settings, script.len(), self.statement_timeout),
            stdin: script,
            timeout: command::exec_timeout(self.statement_timeout),
        }
    }

    fn ledger_failed(
        &self,
        config: &LedgerConfig,
        pod: &str,
        what: &str,
        why: &str,
    ) -> ClickHouseSchemaError {
        let consequence = if what == "written" {
            "The statements ran there, but nothing is recorded, so the next deploy runs them on that pod again. "
        } else {
            ""
        };
        self.error(
            ErrorKind::LedgerFailed,
            format!(
                "{}: the ledger `{}`.`{}` could not be {what} on pod {pod}: {why}. {consequence}The ledger needs \
                 CREATE DATABASE, CREATE TABLE, INSERT and SELECT on `{}` for the client user; grant them, or \
                 remove the ledger prop.",
                self.prefix(),
                config.database,
                config.table,
                config.database,
            ),
        )
        .with_pod(pod)
    }
}
