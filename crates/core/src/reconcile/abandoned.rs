//! Execs that may leave something running in their pods, and stopping them.
//!
//! Cancelling a call closes the exec in flight, but on a real cluster that
//! does not stop the process in the container: the kubelet leaves it running
//! until it ends, the pod's `timeout` stops it, or the server's
//! `max_execution_time` does (see `command`). A deploy that let go of its
//! lease at once would let the next deploy's statements run beside it. So
//! every exec that changes something (a user statement, a convergence script,
//! a rebuild step) runs under a query id naming the run and the pod, and is
//! tracked from before it is sent until it has an outcome ([`Run::exec_tracked`]).
//! What is still tracked when the call ends, or when the lease is lost, may
//! still run: each is stopped where it runs (`KILL QUERY ... SYNC` by its id
//! in a fresh, bounded exec on its pod, then a look at `system.processes` to
//! confirm it is gone). The error tells a stop that ended something (a
//! process in the pod, a query the server listed before the KILL) from one
//! that found the exec gone already; the KILL's own rows are not printed, as
//! they carry the statements' text. Under a lease still held, one that cannot be
//! confirmed is waited out until its pod-side bound has surely ended it; a
//! lost lease is not waited on (another deploy may hold it by then). The
//! error says which.
//!
//! Tracking starts before the exec is awaited, not when it is given up on,
//! because a lost lease drops the whole work future from outside: nothing in
//! it runs again, and only what was registered beforehand is known.
//!
//! An exec that ended without an outcome (its connection dropped, or the
//! caller's deadline passed, with no answer from the API server) leaves its
//! client in the same state, so it is treated alike: stopped and confirmed
//! gone before a retry runs under the same id (the server would refuse the
//! retry with code 216 while it ran), and kept tracked when the call fails,
//! so the call's end stops it or waits it out as above.
//!
//! A script of several statements (`--multiquery`) runs them one after the
//! other under its one id: both clients send the id with each statement
//! and wait for one to end before sending the next, and the server frees an
//! id when its query ends, so the id names whichever statement runs.
//!
//! Not reached this way: the work a distributed DDL statement (`ON CLUSTER`)
//! queued for the other hosts (their DDL workers run it under ids of their
//! own), and a statement whose client registers its query with the server
//! more than `STARTUP_ALLOWANCE` after its exec was sent (a stop that finds
//! nothing earlier than that looks once more when it has passed). The
//! pod-side bound a hold waits for (`exec_timeout` from the send) counts the
//! client's run; an input that trickled in for up to its own bound before the
//! client started can put the client's end later by as much. Where the pod's
//! processes can be read, the stop kills the wrapper still reading, so this
//! only matters where they cannot.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{Abandoned, Call, Run, Tracked, bounded};
use crate::command;
use crate::config::ClientConfig;
use crate::error::ClickHouseSchemaError;
use crate::transport::{Clock, ExecOutput, ExecRequest, Executor, PodLister};

/// The longest the stop of one pod's statements may take (the kill and the look).
const STOP_BOUND: Duration = Duration::from_secs(10);

/// Starts the line of the stop's output that counts what still runs.
const STILL_RUNNING: &str = "clickhouse-schema-still-running";

/// Starts the line of the stop's output that counts what ran on the server before its KILL.
const FOUND_RUNNING: &str = "clickhouse-schema-found-running";

/// How long after its exec was sent a statement's client has surely registered its query with
/// the server, if it ever will: a stop that looked earlier and found nothing looks once more then.
const STARTUP_ALLOWANCE: Duration = Duration::from_secs(5);

/// How often a statement still not confirmed gone after its pod-side bound is looked at again.
const RECHECK: Duration = Duration::from_secs(5);

/// How often a wait for a pod-side bound looks at the clock counting suspend
/// (the timers do not count a suspend).
const HOLD_TICK: Duration = Duration::from_secs(1);

/// How [`Run::exec_tracked_seeing`] lets its caller follow an exec (a pod's script).
pub(crate) struct Watch<'w> {
    /// Told when each attempt starts and handed its stdout as it arrives.
    pub seen: &'w (dyn Fn(Seen<'_>) + Send + Sync),
    /// Whether an attempt that failed in transport may be sent again, asked after it failed: not
    /// once it was seen past what a retry is for (a script whose statements all ended).
    pub may_retry: &'w (dyn Fn() -> bool + Send + Sync),
}

/// What [`Run::exec_tracked_seeing`] tells its watcher.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seen<'a> {
    /// An attempt is about to be sent: what came before belongs to an earlier one.
    Attempt,
    /// A piece of the current attempt's stdout.
    Stdout(&'a [u8]),
}

/// What a confirmed stop saw of the pod's processes.
#[derive(Debug, Clone, Copy)]
pub(super) enum PodLook {
    /// None of them carries an id of the stopped execs any more.
    Seen,
    /// `/proc` could not be read there: only the server's side was confirmed.
    Unreadable,
}

/// What a confirmed stop found: whether it ended anything (a process in the pod, a query on the
/// server) or found the execs gone already, which a note must not call a stop.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stopped {
    pub(super) pod: PodLook,
    pub(super) ended_any: bool,
}

impl<T, C> Run<'_, T, C> {
    /// Tracks `exec` (see the module header) until [`Self::untrack`] is called with what this returns.
    fn track(&self, mut exec: Abandoned) -> u64 {
        let token = self.exec_seq.fetch_add(1, Ordering::Relaxed);
        exec.token = token;
        self.abandoned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(exec);
        token
    }

    fn untrack(&self, tokens: &[u64]) {
        self.abandoned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|a| !tokens.contains(&a.token));
    }

    fn tracked(&self) -> Vec<Abandoned> {
        self.abandoned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// The query id of statement `index` on `pod` in this run:
    /// `clickhouse-schema-<16 hex>-<index>-<pod>`. The hex is fixed for the
    /// run and differs between runs (resource, wall time, a counter of the
    /// process, and where the run lives in memory, which differs between
    /// processes); nothing in it is secret.
    pub(super) fn query_id(&self, index: usize, pod: &str) -> String {
        format!("{}-{index}-{pod}", self.run_key())
    }

    /// The query id of an exec of this run that is not one of the user's statements (`what`:
    /// `cv` for convergence, `rb` for a rebuild step), numbered within the run so that no two
    /// execs share one: `clickhouse-schema-<16 hex>-<what><n>-<pod>`.
    pub(crate) fn script_query_id(&self, what: &str, pod: &str) -> String {
        let n = self.exec_seq.fetch_add(1, Ordering::Relaxed);
        format!("{}-{what}{n}-{pod}", self.run_key())
    }

    /// A script of this run that is not one of the user's statements (`what` as in
    /// [`Self::script_query_id`]) on `pod`, under a query id of its own, so that a
    /// cancellation, a lost lease or a dropped exec can stop it where it runs: the request and
    /// that id, for [`Self::exec_tracked`].
    pub(crate) fn script_request(&self, what: &str, pod: &str, script: String) -> (ExecRequest, String) {
        let query_id = self.script_query_id(what, pod);
        let request = ExecRequest {
            namespace: self.target.namespace.clone(),
            pod: pod.to_owned(),
            container: self.target.container.clone(),
            command: command::render_multiquery_as(
                self.client,
                self.settings,
                script.len(),
                self.statement_timeout,
                &query_id,
            ),
            stdin: script,
            timeout: command::exec_timeout(self.statement_timeout),
        };
        (request, query_id)
    }

    fn run_key(&self) -> String {
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
        format!("clickhouse-schema-{key}")
    }

    /// Runs `request` under `query_id` on its pod, tracked until it has an outcome (see the
    /// module header). `what` names it in the notes of a stop. With `retry` (the exec may run
    /// twice), a transport failure is retried with backoff: an attempt that may still run (no
    /// HTTP status: dropped, or past its deadline) is stopped and confirmed gone first, and not
    /// retried when that cannot be confirmed. An attempt that ends in the pod's `timeout` stays
    /// tracked: that ended the client, not necessarily the server's query.
    pub(crate) async fn exec_tracked(
        &self,
        request: &ExecRequest,
        what: &str,
        query_id: &str,
        retry: Option<Call<'_>>,
    ) -> Tracked {
        self.exec_tracked_seeing(request, what, query_id, retry, None)
            .await
    }

    /// [`Self::exec_tracked`], telling `watch` when each attempt starts and handing it the
    /// attempt's stdout as it arrives (see `Executor::exec_seeing`).
    pub(crate) async fn exec_tracked_seeing(
        &self,
        request: &ExecRequest,
        what: &str,
        query_id: &str,
        retry: Option<Call<'_>>,
        watch: Option<&Watch<'_>>,
    ) -> Tracked {
        let max_attempts = if retry.is_some() {
            self.retry.max_attempts.max(1)
        } else {
            1
        };
        let mut attempt = 1;
        loop {
            if self.cancel.is_cancelled() {
                return Tracked::CancelledBefore;
            }
            let sent = self.clock.now_counting_suspend();
            let token = self.track(Abandoned {
                pod: request.pod.clone(),
                what: what.to_owned(),
                query_id: query_id.to_owned(),
                sent,
                ends_by: sent + request.timeout,
                token: 0,
                queued_for_hosts: crate::sql::ddl_status::has_on_cluster(&request.stdin),
                // A script's client (a pod's statements among them, even one statement, which it
                // sends after its marker and the ledger's rows, each a query of its own) would
                // send a further query were it left running.
                script: request.command.iter().any(|a| a.contains(" --multiquery")),
            });
            let result = match watch {
                None => self.unless_cancelled(self.transport.exec(request.clone())).await,
                Some(watch) => {
                    (watch.seen)(Seen::Attempt);
                    let seen = |chunk: &[u8]| (watch.seen)(Seen::Stdout(chunk));
                    self.unless_cancelled(self.transport.exec_seeing(request.clone(), &seen))
                        .await
                }
            };
            let Some(result) = result else {
                return Tracked::CancelledDuring;
            };
            // The exit status is the code modulo 256 (472 READONLY_SETTING exits 216, 380
            // CANNOT_KILL 124): what the client printed decides, the status only without it.
            let code = |output: &ExecOutput| crate::sql::redact::clickhouse_code(&output.stderr);
            match result {
                Ok(output)
                    if attempt > 1
                        && match code(&output) {
                            Some(code) => code == command::QUERY_ID_IN_USE_CODE,
                            None => output.exit_code == command::QUERY_ID_IN_USE_EXIT_CODE,
                        } =>
                {
                    return Tracked::EarlierRunning { attempt };
                }
                Ok(output) => {
                    let pod_bound = code(&output).is_none()
                        && command::POD_TIMEOUT_EXIT_CODES.contains(&output.exit_code);
                    if !pod_bound {
                        self.untrack(&[token]);
                    }
                    return Tracked::Output {
                        output,
                        unknown: attempt - 1,
                    };
                }
                Err(err) => {
                    // An API server that answered with a status refused the exec before
                    // anything started in the pod. Without one the exec was dropped or timed
                    // out while it ran, and its client may still run there under this id.
                    let may_run = err.is_retryable() && err.http_status.is_none();
                    if !may_run {
                        self.untrack(&[token]);
                    }
                    let allowed = watch.is_none_or(|w| (w.may_retry)());
                    let (Some(call), true) = (retry, err.is_retryable() && attempt < max_attempts && allowed)
                    else {
                        return Tracked::Failed {
                            err,
                            attempts: attempt,
                            not_retried: None,
                        };
                    };
                    if may_run {
                        let this = self
                            .tracked()
                            .into_iter()
                            .filter(|a| a.token == token)
                            .collect::<Vec<_>>();
                        if let Err(why) = self.stop_on(&request.pod, &this.iter().collect::<Vec<_>>()).await {
                            return Tracked::Failed {
                                err,
                                attempts: attempt,
                                not_retried: Some(why),
                            };
                        }
                        self.untrack(&[token]);
                    }
                    self.backoff(attempt, call).await;
                    attempt += 1;
                }
            }
        }
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
        self.settle_tracked(result, hold).await.0
    }

    /// [`Self::settle_abandoned`], and whether every exec it stopped was
    /// confirmed stopped (or the bound of each that was not had passed).
    pub(crate) async fn settle_tracked<R>(
        &self,
        result: Result<R, ClickHouseSchemaError>,
        hold: bool,
    ) -> (Result<R, ClickHouseSchemaError>, bool) {
        // Left tracked until they are settled: a lost lease dropping this future half way
        // still finds them (see the module header).
        let abandoned = self.tracked();
        if abandoned.is_empty() {
            return (result, true);
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
        let mut unconfirmed: Vec<(&str, Vec<&Abandoned>)> = Vec::new();
        for (_, (pod, statements, outcome)) in outcomes {
            if outcome.is_err() {
                unconfirmed.push((pod, statements.clone()));
            }
            for statement in statements {
                let (what, id) = (&statement.what, &statement.query_id);
                match &outcome {
                    Ok(look) => notes.push(format!(
                        "{what} on pod {pod} (query id {id}) {} (not in system.processes, {}){}",
                        if look.ended_any {
                            "was stopped with KILL QUERY and is not running any more"
                        } else {
                            "was not running when the stop looked"
                        },
                        match look.pod {
                            PodLook::Seen => "and no process of it left in the pod",
                            PodLook::Unreadable => "and the pod's processes could not be read",
                        },
                        if statement.queued_for_hosts {
                            ", but the distributed DDL task it queued may still run on the cluster's hosts \
                             (their DDL workers run it under ids of their own, which this stop does not reach)"
                        } else {
                            ""
                        }
                    )),
                    Err(why) => {
                        hold_until = hold_until.max(Some(statement.ends_by));
                        let bound = statement.ends_by.saturating_sub(statement.sent).as_secs();
                        notes.push(format!(
                            "{what} on pod {pod} (query id {id}) could not be confirmed stopped ({why}); \
                             its client ends at the latest at its pod-side bound, {bound} s after it was sent, \
                             where the image has `timeout` (without it, only the server's max_execution_time \
                             bounds it; a statement the server runs without checking for a cancellation can \
                             outlive either)"
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
                // The bound ended the client, not necessarily what the server runs: looked at again,
                // and held on (up to one more statementTimeoutMs) while it is still there.
                let cap = until + self.statement_timeout;
                self.hold_until(until).await;
                let mut still = self.still_unconfirmed(&unconfirmed).await;
                while still.is_some() && self.clock.now_counting_suspend() < cap {
                    let next = (self.clock.now_counting_suspend() + RECHECK).min(cap);
                    self.hold_until(next).await;
                    still = self.still_unconfirmed(&unconfirmed).await;
                }
                let held = self.clock.now_counting_suspend().saturating_sub(held_from);
                match still {
                    None => format!(
                        " The lease was kept (renewed) {} ms more, until that bound had passed and a stop found \
                         nothing of it left, and released after that.",
                        held.as_millis()
                    ),
                    Some(why) => format!(
                        " The lease was kept (renewed) {} ms more, one statementTimeoutMs past that bound, and \
                         released after that, though a stop then still could not confirm it gone ({why}): it \
                         may still be running.",
                        held.as_millis()
                    ),
                }
            }
        };
        self.untrack(&abandoned.iter().map(|a| a.token).collect::<Vec<_>>());
        // Held until its bound: as good as confirmed.
        let settled = hold_until.is_none() || hold;
        let result = result.map_err(|mut err| {
            let after = if err.kind == crate::error::ErrorKind::Cancelled {
                "After the cancellation"
            } else {
                "Of what its exec may have left running"
            };
            err.message
                .push_str(&format!(" {after}: {}.{lease}", notes.join("; ")));
            err
        });
        (result, settled)
    }

    /// Sleeps until `until` on the clock counting suspend (the timers do not count one).
    async fn hold_until(&self, until: Duration) {
        while self.clock.now_counting_suspend() < until {
            let left = until.saturating_sub(self.clock.now_counting_suspend());
            self.clock.sleep(left.min(HOLD_TICK)).await;
        }
    }

    /// Stops `unconfirmed` again, pod by pod; `Some` says why one is still not confirmed gone.
    async fn still_unconfirmed(&self, unconfirmed: &[(&str, Vec<&Abandoned>)]) -> Option<String> {
        for (pod, statements) in unconfirmed {
            if let Err(why) = self.stop_on(pod, statements).await {
                return Some(format!("on pod {pod}: {why}"));
            }
        }
        None
    }

    /// Stops `statements` on `pod` and confirms they no longer run: one exec,
    /// bounded, not cancellable (the call is cancelled already), and a second
    /// one once `STARTUP_ALLOWANCE` has passed since the youngest was sent, if
    /// it had not when the first looked: an exec's client registers its query
    /// with the server only once the API server, the kubelet and the client's
    /// own start are through, and a look before that finds nothing to stop.
    /// `Err` says why it could not be confirmed.
    pub(super) async fn stop_on(&self, pod: &str, statements: &[&Abandoned]) -> Result<Stopped, String> {
        let look = self.kill_and_look(pod, statements).await?;
        let youngest = statements.iter().map(|s| s.sent).max().unwrap_or_default();
        let settled = youngest + STARTUP_ALLOWANCE;
        if self.clock.now_counting_suspend() >= settled {
            return Ok(look);
        }
        // One sleep, looked at again after: the timers do not count a suspend, which only makes
        // the wait longer.
        while self.clock.now_counting_suspend() < settled {
            self.clock
                .sleep(settled.saturating_sub(self.clock.now_counting_suspend()))
                .await;
        }
        let again = self.kill_and_look(pod, statements).await?;
        Ok(Stopped {
            ended_any: look.ended_any || again.ended_any,
            ..again
        })
    }

    /// One exec on `pod` (see `command::render_stop`): the processes in the
    /// pod that carry the statements' ids are killed and counted again, then
    /// `KILL QUERY ... SYNC` by those ids, then how many of them
    /// `system.processes` still lists. Confirmed only when neither holds one.
    /// The KILL's own rows are not printed: they hold the statements' text.
    async fn kill_and_look(&self, pod: &str, statements: &[&Abandoned]) -> Result<Stopped, String> {
        let ids = statements
            .iter()
            .map(|s| format!("'{}'", s.query_id.replace('\\', "\\\\").replace('\'', "\\'")))
            .collect::<Vec<_>>()
            .join(", ");
        let script = format!(
            "SELECT '{FOUND_RUNNING}', count() FROM system.processes WHERE query_id IN ({ids});\n\
             KILL QUERY WHERE query_id IN ({ids}) SYNC FORMAT Null;\n\
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
            command: command::render_stop(
                &client,
                &statements.iter().map(|s| s.query_id.as_str()).collect::<Vec<_>>(),
                script.len(),
                STOP_BOUND,
            ),
            stdin: script,
            timeout: command::exec_timeout(STOP_BOUND) + command::STOP_POD_PART,
        };
        let output = self
            .transport
            .exec(request)
            .await
            .map_err(|e| format!("the exec that stops it failed: {}", e.message))?;
        if output.exit_code != 0 {
            return Err(format!("KILL QUERY exited with code {}", output.exit_code));
        }
        let count = |label: &str| {
            output
                .stdout
                .lines()
                .filter_map(|line| line.strip_prefix(label)?.strip_prefix('\t'))
                .next_back()
                .and_then(|n| n.trim().parse::<u64>().ok())
        };
        let (still, pod_left) = (count(STILL_RUNNING), count(command::POD_LEFT_LABEL));
        let ended_any =
            count(FOUND_RUNNING).unwrap_or(0) > 0 || count(command::POD_ENDED_LABEL).unwrap_or(0) > 0;
        let stopped = |pod| Stopped { pod, ended_any };
        match (still, pod_left) {
            (_, Some(n)) if n > 0 => Err(format!("{n} of its processes still in the pod after kill -9")),
            (Some(0), Some(_)) => Ok(stopped(PodLook::Seen)),
            (Some(0), None) if statements.iter().any(|s| s.script) => Err(
                "the pod's processes could not be read, and a script's client still there would send its next \
                 statement"
                    .to_owned(),
            ),
            (Some(0), None) => Ok(stopped(PodLook::Unreadable)),
            (Some(n), _) => Err(format!("{n} still in system.processes after KILL QUERY")),
            (None, _) => Err("system.processes could not be read".to_owned()),
        }
    }
}
