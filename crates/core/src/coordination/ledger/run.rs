//! The ledger on a pod (see `crate::coordination::ledger`): a row written
//! before a pod's first statement and one after its statements (and their
//! check) succeeded, read where a run has to know what an earlier deploy did.
//! One exec each, unless a pod's script of statements writes them
//! (`reconcile::batch`); transport failures are retried like a statement's, and
//! a write runs under a query id and is tracked like one (`reconcile::abandoned`).

use crate::command;
use crate::config::LedgerConfig;
use crate::coordination::ledger::{self, LedgerRow, LedgerWrite};
use crate::error::{ClickHouseSchemaError, ErrorKind};
use crate::reconcile::{Call, Failure, Run, Tracked, bounded};
use crate::sql::redact::redact_clickhouse_output;
use crate::state::PodRef;
use crate::transport::{Clock, ExecRequest, Executor, PodInfo, PodLister, TransportErrorKind};

/// ClickHouse's codes for a table or database that does not exist: a ledger never written.
const UNKNOWN_TABLE: u32 = 60;
const UNKNOWN_DATABASE: u32 = 81;
/// ClickHouse's codes for a column the table lacks (in an INSERT, in a SELECT): a ledger table
/// made by an earlier version of this package, before `seq` and `event`.
const NO_SUCH_COLUMN: u32 = 16;
const UNKNOWN_IDENTIFIER: u32 = 47;

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// Writes the row opening this run on `pod` (`started`, `destroying`),
    /// before its first statement or rebuild step. A failure fails the pod
    /// before anything ran there.
    pub(crate) async fn write_ledger_opening(
        &self,
        write: LedgerWrite<'_>,
        pod: &PodInfo,
    ) -> Result<(), Failure> {
        let script = ledger::started_script(
            &write,
            self.resource_id,
            &pod.name,
            pod.uid.as_deref().unwrap_or(""),
        );
        self.write_ledger(write.config, script, pod, false).await
    }

    /// Writes the row closing this run on `pod` (`applied`, `destroyed`). A
    /// failure fails the pod: the statements ran, but a deploy that lost its
    /// state could not know it.
    pub(crate) async fn write_ledger_closing(
        &self,
        write: LedgerWrite<'_>,
        pod: &PodInfo,
    ) -> Result<(), Failure> {
        let script = ledger::finished_script(
            &write,
            self.resource_id,
            &pod.name,
            pod.uid.as_deref().unwrap_or(""),
        );
        self.write_ledger(write.config, script, pod, true).await
    }

    async fn write_ledger(
        &self,
        config: &LedgerConfig,
        script: String,
        pod: &PodInfo,
        after_statements: bool,
    ) -> Result<(), Failure> {
        // Under a query id of its own and tracked, as a statement is: a dropped write may still
        // land, so it is stopped and confirmed gone before its retry and before the lease goes. An
        // orphaned `applied` row landing after a later run's `started` row would cover the pod.
        let (request, query_id) = self.script_request("lg", &pod.name, script);
        let failed = |detail: &str, code: Option<u32>| {
            Failure::Error(self.ledger_failed(
                config,
                &pod.name,
                Ledger::Write { after_statements },
                detail,
                code,
            ))
        };
        let output = match self
            .exec_tracked(
                &request,
                "the ledger write",
                &query_id,
                Some(Call::Ledger { pod: &pod.name }),
            )
            .await
        {
            Tracked::CancelledBefore => {
                return Err(Failure::Error(
                    self.cancelled(&format!("before the ledger write on pod {}", pod.name))
                        .with_pod(&pod.name),
                ));
            }
            Tracked::CancelledDuring => {
                return Err(Failure::Error(
                    self.cancelled(&format!("during the ledger write on pod {}", pod.name))
                        .with_pod(&pod.name),
                ));
            }
            Tracked::Failed { err, .. }
                if err.kind == TransportErrorKind::Refused && err.http_status == Some(404) =>
            {
                return Err(Failure::Vanished);
            }
            Tracked::Failed { err, .. } if err.kind == TransportErrorKind::ProgramMissing => {
                return Err(Failure::Error(self.image_unsupported(
                    "the ledger write",
                    &pod.name,
                    &err.message,
                )));
            }
            Tracked::Failed {
                err,
                attempts,
                not_retried,
            } => {
                let not_retried = not_retried
                    .map(|why| format!(" (not retried: the attempt could not be confirmed stopped, {why})"))
                    .unwrap_or_default();
                return Err(failed(
                    &format!(
                        "its exec failed after {attempts} attempt(s): {}{not_retried}",
                        err.message
                    ),
                    None,
                ));
            }
            // Nothing was refused for want of a grant: the earlier attempt may still write its row.
            Tracked::EarlierRunning { attempt } => {
                let row = if after_statements {
                    "The statements ran there; whether the row saying so is recorded is unknown, so a deploy \
                     that lost its state may run them on that pod again."
                } else {
                    "No statement ran on that pod."
                };
                return Err(Failure::Error(
                    self.error(
                        ErrorKind::LedgerFailed,
                        format!(
                            "{}: the ledger `{}`.`{}` write on pod {}: attempt {attempt} was refused because an \
                             earlier attempt still runs on the server under the same query id ({query_id}; \
                             ClickHouse code 216, QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING), after its exec ended \
                             without an outcome; it may still write its row. {row}",
                            self.prefix(),
                            config.database,
                            config.table,
                            pod.name,
                        ),
                    )
                    .with_pod(&pod.name),
                ));
            }
            Tracked::Output { output, .. } => output,
        };
        if output.exit_code != 0 {
            return Err(Failure::Error(self.ledger_write_failed(
                config,
                &pod.name,
                after_statements,
                &output.stderr,
                output.exit_code,
                &request.stdin,
            )));
        }
        Ok(())
    }

    /// A ledger write whose client exited `exit_code`, saying `stderr` (redacted against the
    /// exec's `stdin`): in an exec of its own, or in a pod's script (`reconcile::batch`).
    pub(crate) fn ledger_write_failed(
        &self,
        config: &LedgerConfig,
        pod: &str,
        after_statements: bool,
        stderr: &str,
        exit_code: i32,
        stdin: &str,
    ) -> ClickHouseSchemaError {
        let said = redact_clickhouse_output(stderr, stdin);
        self.ledger_failed(
            config,
            pod,
            Ledger::Write { after_statements },
            &format!("clickhouse-client exited with {exit_code}: {}", said.text),
            said.clickhouse_code,
        )
    }

    /// Before a rebuild that is part of this run's change: the opening row on
    /// every Ready matching pod not in `covered` (a rebuild needs them all
    /// Ready, and refuses otherwise), so a rebuild stopped half way leaves
    /// the pod due. The fanout writes the opening row again before the
    /// statements; a second `started` row changes nothing. The pods written
    /// on; the rebuild opens the others it touches itself
    /// ([`Self::open_ledger_on`]).
    pub(crate) async fn open_ledger_before_rebuild(
        &self,
        covered: &[PodRef],
    ) -> Result<Vec<PodRef>, ClickHouseSchemaError> {
        if self.ledger.is_none() {
            return Ok(Vec::new());
        }
        let live = self.list_matching().await?;
        let due: Vec<&PodInfo> = live
            .iter()
            .filter(|p| {
                p.ready && p.has_container(&self.target.container) && !covered.contains(&PodRef::of(p))
            })
            .collect();
        self.open_ledger_on(&due).await?;
        Ok(due.into_iter().map(PodRef::of).collect())
    }

    /// The opening row on each of `pods`, up to `parallelism` at once; the
    /// first failure, by pod name. A pod gone since its list is left to
    /// whoever lists it next.
    pub(crate) async fn open_ledger_on(&self, pods: &[&PodInfo]) -> Result<(), ClickHouseSchemaError> {
        let Some(write) = self.ledger else {
            return Ok(());
        };
        let (results, _) = bounded(
            pods,
            self.parallelism,
            || true,
            |pod| self.write_ledger_opening(write, pod),
        )
        .await;
        let mut failures: Vec<ClickHouseSchemaError> = results
            .into_iter()
            .filter_map(|(_, r)| match r {
                Err(Failure::Error(err)) => Some(err),
                _ => None,
            })
            .collect();
        failures.sort_by(|a, b| a.pod.cmp(&b.pod));
        match failures.into_iter().next() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// The ledger rows naming each of `pods` that concern this resource (its
    /// own rows, and any with `fingerprint`), up to `parallelism` pods at once.
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
        let script = ledger::read_script(config, self.resource_id, fingerprint, pod);
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
                    Ledger::Read,
                    &format!("its exec failed after {attempts} attempt(s): {}", err.message),
                    None,
                ));
            }
            Some(Ok(output)) => output,
        };
        let said = redact_clickhouse_output(&output.stderr, &request.stdin);
        let never_written = matches!(said.clickhouse_code, Some(UNKNOWN_TABLE | UNKNOWN_DATABASE));
        if said.clickhouse_code.is_some() && !never_written {
            return Err(self.ledger_failed(config, pod, Ledger::Read, &said.text, said.clickhouse_code));
        }
        ledger::parse(&output.stdout).map_err(|why| self.ledger_failed(config, pod, Ledger::Read, &why, None))
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
        what: Ledger,
        why: &str,
        clickhouse_code: Option<u32>,
    ) -> ClickHouseSchemaError {
        let (done, consequence) = match what {
            Ledger::Write {
                after_statements: true,
            } => (
                "written",
                "The statements ran there, but nothing is recorded, so the next deploy runs them on that pod again. ",
            ),
            Ledger::Write {
                after_statements: false,
            } => ("written before the statements", "No statement ran on that pod. "),
            Ledger::Read => ("read", ""),
        };
        let mut remedy = format!(
            "The ledger needs CREATE DATABASE, CREATE TABLE, INSERT and SELECT on `{}` for the client user; grant \
             them, or remove the ledger prop.",
            config.database
        );
        if matches!(clickhouse_code, Some(NO_SUCH_COLUMN | UNKNOWN_IDENTIFIER)) {
            remedy.push_str(&format!(
                " The table lacks the ledger's columns: name another table, or, when an earlier version of this \
                 package made it (before `seq` and `event`), add them (ALTER TABLE `{db}`.`{table}` ADD COLUMN seq \
                 UInt64, ADD COLUMN event String): its rows are kept, and read as older than every later row.",
                db = config.database,
                table = config.table,
            ));
        }
        self.error(
            ErrorKind::LedgerFailed,
            format!(
                "{}: the ledger `{}`.`{}` could not be {done} on pod {pod}: {why}. {consequence}{remedy}",
                self.prefix(),
                config.database,
                config.table,
            ),
        )
        .with_pod(pod)
    }
}

/// What was being done to a pod's ledger, for its error.
#[derive(Clone, Copy)]
enum Ledger {
    Write { after_statements: bool },
    Read,
}
