//! Statements a cancellation left running in their pods, and stopping them.
//!
//! Cancelling a call closes the exec of the statement in flight, but on a
//! real cluster that does not stop the process in the container: the kubelet
//! leaves it running until it ends, the pod's `timeout` stops it, or the
//! server's `max_execution_time` does (see `command`). A cancelled deploy
//! that let go of its lease at once would let the next deploy's statements
//! run beside it. So every user statement runs under a query id naming the
//! run, the statement and the pod, and before a cancelled call ends (under a
//! lease: before it releases the lease, renewing it meanwhile) each statement
//! it abandoned is stopped where it runs: `KILL QUERY ... SYNC` by that id in
//! a fresh, bounded exec on its pod, then a look at `system.processes` to
//! confirm it is gone. One that cannot be confirmed is waited out under the
//! lease until its pod-side bound has surely ended it. The error says which.
//!
//! An exec that ended without an outcome (its connection dropped, or the
//! caller's deadline passed, with no answer from the API server) leaves its
//! client in the same state, so it is treated alike: stopped and confirmed
//! gone before a retry runs under the same id (the server would refuse the
//! retry with code 216 while it ran), and kept in this list when the call
//! fails, so the call's end stops it or waits it out as above.
//!
//! Not reached this way: the work a distributed DDL statement (`ON CLUSTER`)
//! queued for the other hosts (their DDL workers run it under ids of their
//! own), and a statement whose client had not yet registered its query with
//! the server when the stop looked (its exec was sent before the stop's, so
//! it is normally there first).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{Abandoned, Run, bounded};
use crate::command;
use crate::config::ClientConfig;
use crate::error::ClickHouseSchemaError;
use crate::transport::{Clock, ExecRequest, Executor, PodLister};

/// The longest the stop of one pod's statements may take (the kill and the look).
const STOP_BOUND: Duration = Duration::from_secs(10);

/// Starts the line of the stop's output that counts what still runs.
const STILL_RUNNING: &str = "clickhouse-schema-still-running";

/// How often a wait for a pod-side bound looks at the clock counting suspend
/// (the timers do not count a suspend).
const HOLD_TICK: Duration = Duration::from_secs(1);

impl<T, C> Run<'_, T, C> {
    pub(super) fn abandon(&self, statement: Abandoned) {
        self.abandoned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(statement);
    }

    fn take_abandoned(&self) -> Vec<Abandoned> {
        std::mem::take(
            &mut *self
                .abandoned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// The query id of statement `index` on `pod` in this run:
    /// `clickhouse-schema-<16 hex>-<index>-<pod>`. The hex is fixed for the
    /// run and differs between runs (resource, wall time, a counter of the
    /// process, and where the run lives in memory, which differs between
    /// processes); nothing in it is secret.
    pub(super) fn query_id(&self, index: usize, pod: &str) -> String {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let key = self.run_key.get_or_init(|| {
            let seed = format!(
                "{}|{}|{:?}|{}|{:p}",
                self.resource_id,
                self.clock.now_iso8601(),
                self.clock.now(),
                RUNS.fetch_add(1, Ordering::Relaxed),
                self as *const Self,
            );
            hex::encode(&Sha256::digest(seed.as_bytes())[..8])
        });
        format!("clickhouse-schema-{key}-{index}-{pod}")
    }

    /// `result` once the statements this call abandoned are stopped, its
    /// error saying what became of them. With `hold` (the caller holds the
    /// lease and keeps renewing it meanwhile) a statement that could not be
    /// confirmed stopped is waited out until its pod-side bound has passed.
    pub(crate) async fn settle_abandoned<R>(
        &self,
        result: Result<R, ClickHouseSchemaError>,
        hold: bool,
    ) -> Result<R, ClickHouseSchemaError> {
        let abandoned = self.take_abandoned();
        if abandoned.is_empty() {
            return result;
        }
        let mut by_pod: BTreeMap<&str, Vec<&Abandoned>> = BTreeMap::new();
        for statement in &abandoned {
            by_pod.entry(&statement.pod).or_default().push(statement);
        }
        let pods: Vec<(&str, Vec<&Abandoned>)> = by_pod.into_iter().collect();
        let (outcomes, _) = bounded(&pods, pods.len(), || true, |(pod, statements)| async move {
            (*pod, statements.clone(), self.stop_on(pod, statements).await)
        })
        .await;
        let mut notes = Vec::new();
        let mut hold_until: Option<Duration> = None;
        for (_, (pod, statements, outcome)) in outcomes {
            for statement in statements {
                let (index, id) = (statement.index, &statement.query_id);
                match &outcome {
                    Ok(()) => notes.push(format!(
                        "statement {index} on pod {pod} (query id {id}) was stopped with KILL QUERY and is not \
                         running any more (not in system.processes)"
                    )),
                    Err(why) => {
                        hold_until = hold_until.max(Some(statement.ends_by));
                        let bound = command::exec_timeout(self.statement_timeout).as_secs();
                        notes.push(format!(
                            "statement {index} on pod {pod} (query id {id}) could not be confirmed stopped ({why}); \
                             it ends at the latest at its pod-side bound, {bound} s after it was sent"
                        ));
                    }
                }
            }
        }
        let lease = match (hold, hold_until) {
            (false, _) => String::new(),
            (true, None) => " The lease was released after that.".to_owned(),
            (true, Some(until)) => {
                let held_from = self.clock.now_counting_suspend();
                while self.clock.now_counting_suspend() < until {
                    let left = until.saturating_sub(self.clock.now_counting_suspend());
                    self.clock.sleep(left.min(HOLD_TICK)).await;
                }
                let held = self.clock.now_counting_suspend().saturating_sub(held_from);
                format!(
                    " The lease was kept (renewed) until that bound had passed, {} ms more, and released \
                     after that.",
                    held.as_millis()
                )
            }
        };
        result.map_err(|mut err| {
            let after = if err.kind == crate::error::ErrorKind::Cancelled {
                "After the cancellation"
            } else {
                "Of what its exec may have left running"
            };
            err.message
                .push_str(&format!(" {after}: {}.{lease}", notes.join("; ")));
            err
        })
    }

    /// Stops `statements` on `pod` and confirms they no longer run: one exec,
    /// bounded, not cancellable (the call is cancelled already). `Err` says
    /// why it could not be confirmed.
    pub(super) async fn stop_on(&self, pod: &str, statements: &[&Abandoned]) -> Result<(), String> {
        let ids = statements
            .iter()
            .map(|s| format!("'{}'", s.query_id.replace('\\', "\\\\").replace('\'', "\\'")))
            .collect::<Vec<_>>()
            .join(", ");
        let script = format!(
            "KILL QUERY WHERE query_id IN ({ids}) SYNC;\n\
             SELECT '{STILL_RUNNING}', count() FROM system.processes WHERE query_id IN ({ids});\n"
        );
        // The system database: the statements' own may not exist yet (the first of them creates it).
        let client = ClientConfig {
            database: "system".to_owned(),
            ..self.client.clone()
        };
        let request = ExecRequest {
            namespace: self.target.namespace.clone(),
            pod: pod.to_owned(),
            container: self.target.container.clone(),
            command: command::render_multiquery(&client, &BTreeMap::new(), script.len(), STOP_BOUND),
            stdin: script,
            timeout: command::exec_timeout(STOP_BOUND),
        };
        let output = self
            .transport
            .exec(request)
            .await
            .map_err(|e| format!("the exec that stops it failed: {}", e.message))?;
        if output.exit_code != 0 {
            return Err(format!("KILL QUERY exited with code {}", output.exit_code));
        }
        let still = output
            .stdout
            .lines()
            .filter_map(|line| line.strip_prefix(STILL_RUNNING)?.strip_prefix('\t'))
            .next_back()
            .and_then(|n| n.trim().parse::<u64>().ok());
        match still {
            Some(0) => Ok(()),
            Some(n) => Err(format!("{n} still in system.processes after KILL QUERY")),
            None => Err("system.processes could not be read".to_owned()),
        }
    }
}
