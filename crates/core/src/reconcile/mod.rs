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
//!
//! A [`Run`] is the steps over the transport every feature shares (list,
//! exec with retries, cancellation, messages); the features' drivers (the
//! `run.rs` of `coordination`'s lease and ledger, of `rebuild` and of
//! `live_schema`) add their steps to it. Nothing here imports a driver,
//! `lifecycle` or `ownership`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::poll_fn;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::Poll;
use std::time::Duration;

mod abandoned;
mod batch;
mod messages;

use crate::command;
use crate::config::{ClientConfig, ExecMode, ResolvedConfig, Retry, SettingValue, Target, VerifyMode};
use crate::coordination::ledger::LedgerWrite;
use crate::error::ClickHouseSchemaError;
use crate::live_schema::VerifyPlan;
use crate::state::PodRef;
use crate::transport::{
    Cancel, Clock, Event, Events, ExecOutput, ExecRequest, Executor, NeverCancelled, NoEvents, PodInfo,
    PodLister, SkippedPod, TransportError, TransportErrorKind,
};

/// How long to wait between observations while pods are not Ready or the set
/// is moving. Short enough to notice a rollout finishing, long enough not to
/// hammer the API server.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Everything a run needs besides the statements: who to talk to and how the
/// run is driven. Borrowed from the resolved config so a run cannot diverge
/// from what was validated.
pub(crate) struct Run<'a, T, C> {
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
    /// Pods applied at once in a fanout pass (at least 1).
    pub parallelism: usize,
    /// One exec per pod for its statements, or one per statement (see `batch`).
    pub exec_mode: ExecMode,
    /// The resource serializes its runs with a Lease (see `batch`: a pod's script then leaves
    /// the ledger's closing row to an exec of its own).
    pub leased: bool,
    pub cancel: &'a dyn Cancel,
    /// Checks each pod's objects after its statements ran (apply only).
    pub verification: Option<Verification<'a>>,
    /// Where progress goes (the binding's `options.onEvent`).
    pub events: &'a dyn Events,
    /// The row each pod gets in the ledger once its statements (and their check) succeeded.
    pub ledger: Option<LedgerWrite<'a>>,
    /// What names this run in its statements' query ids (made on first use).
    run_key: OnceLock<String>,
    /// Execs sent and not yet known to have ended, and those a cancellation or a
    /// transport failure left without an outcome: they may still run in the pod
    /// (see `abandoned`).
    abandoned: Mutex<Vec<Abandoned>>,
    /// Numbers the tracked execs and the query ids of scripts.
    exec_seq: AtomicU64,
    /// Brings what the check finds different to the declaration, where an ALTER can (apply only).
    pub converge: Option<crate::converge::Converge<'a>>,
    /// The replica sets (ZooKeeper paths) a pod of this run has converged: another replica of
    /// the same set waits for the ALTER to replicate instead of running it again.
    pub converge_claims: std::sync::Mutex<BTreeSet<String>>,
    /// Hosts an `ON CLUSTER` statement of this run left to run it from the queue when they are
    /// back (down, under `throw_only_active`): until then no pod's ledger may say the list ran.
    hosts_left_down: Mutex<Vec<String>>,
}

/// A statement whose exec a cancellation closed while it ran, or that ended
/// without an outcome (see `abandoned`).
#[derive(Debug, Clone)]
pub(crate) struct Abandoned {
    pub pod: String,
    /// What it is, as the notes of a stop name it ("statement 3", "the convergence script").
    pub what: String,
    pub query_id: String,
    /// When (`Clock::now_counting_suspend`) its exec was sent.
    pub sent: Duration,
    /// By when (`Clock::now_counting_suspend`) the pod-side bound has ended it
    /// for sure: when its exec was sent, plus the exec timeout (the pod's
    /// `timeout`, its KILL grace and a second).
    pub ends_by: Duration,
    /// Which tracked exec it is (see `abandoned`).
    token: u64,
    /// It is a distributed DDL statement (`ON CLUSTER`): stopping it on its pod does not stop the
    /// task it queued for the cluster's hosts.
    pub queued_for_hosts: bool,
    /// It runs several statements (`--multiquery`): until its client is gone from the pod, it
    /// may send the next one, whatever the server shows.
    pub script: bool,
}

/// What an apply checks on a pod after the statements ran, and what a mismatch does.
#[derive(Clone, Copy)]
pub(crate) struct Verification<'a> {
    pub plan: &'a VerifyPlan,
    pub mode: VerifyMode,
}

impl<'a, T, C> Run<'a, T, C> {
    /// A run against `target` with everything else from `config`.
    pub(crate) fn new(
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
            parallelism: config.parallelism.max(1) as usize,
            exec_mode: config.exec_mode,
            leased: config.lease.is_some(),
            cancel: &NeverCancelled,
            verification: None,
            events: &NoEvents,
            ledger: None,
            run_key: OnceLock::new(),
            abandoned: Mutex::new(Vec::new()),
            exec_seq: AtomicU64::new(0),
            converge: None,
            converge_claims: std::sync::Mutex::new(BTreeSet::new()),
            hosts_left_down: Mutex::new(Vec::new()),
        }
    }

    /// The same run, converging what its check finds different (see [`crate::converge`]).
    pub(crate) fn with_converge(mut self, converge: Option<crate::converge::Converge<'a>>) -> Self {
        self.converge = converge;
        self
    }

    /// The same run, writing `ledger`'s row on each pod it completes.
    pub(crate) fn with_ledger(mut self, ledger: Option<LedgerWrite<'a>>) -> Self {
        self.ledger = ledger;
        self
    }

    /// The same run, reporting its progress to `events`.
    pub(crate) fn with_events(mut self, events: &'a dyn Events) -> Self {
        self.events = events;
        self
    }

    /// The same run, checking every pod's objects after its statements ran.
    pub(crate) fn with_verification(mut self, verification: Verification<'a>) -> Self {
        if verification.mode != VerifyMode::Off && !verification.plan.is_empty() {
            self.verification = Some(verification);
        }
        self
    }

    /// The same run, stoppable through `cancel`.
    pub(crate) fn with_cancel(mut self, cancel: &'a dyn Cancel) -> Self {
        self.cancel = cancel;
        self
    }
}

/// Where a fanout starts: pods already known to hold the list (from recorded
/// state, by name and uid) and an observation already made (the no-op check's
/// list), so an apply after a topology change does not list twice.
#[derive(Debug, Default, Clone)]
pub(crate) struct FanoutStart {
    pub covered: Vec<PodRef>,
    pub first_observation: Option<Vec<PodInfo>>,
}

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// Applies `statements` to every matching pod until the exit predicate
    /// holds, and returns the covered set, sorted by name.
    pub(crate) async fn fanout(
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
            let skipped: Vec<SkippedPod> = pods
                .iter()
                .filter(|p| p.is_on_its_way_out())
                .map(|p| SkippedPod {
                    pod: p.name.clone(),
                    why: if p.terminating { "terminating" } else { "finished" }.to_owned(),
                })
                .collect();
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
                self.report_waiting(&[], deadline);
                self.pause(deadline).await;
                continue;
            }

            let not_ready: Vec<&PodInfo> = matching.iter().filter(|p| !p.ready).collect();
            if !not_ready.is_empty() {
                if self.clock.now() >= deadline {
                    return Err(self.not_ready(&not_ready));
                }
                previous = Some(set);
                self.report_waiting(&not_ready, deadline);
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
            self.events.emit(Event::PodsSelected {
                pass: passes,
                pods: uncovered.iter().map(|p| p.name.clone()).collect(),
                matching: matching.len(),
                message: format!(
                    "pass {passes}: {} statement(s) on {} of {} matching pod(s), up to {} at once{}",
                    statements.len(),
                    uncovered.len(),
                    matching.len(),
                    self.parallelism,
                    if skipped.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; left out: {}",
                            skipped
                                .iter()
                                .map(|s| format!("{} ({})", s.pod, s.why))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                ),
                skipped,
            });
            let pass = self.apply_pods(statements, &uncovered).await;
            for pod in &pass.completed {
                covered.insert(pod.name.clone(), pod.uid.clone());
                applied_this_run += 1;
            }
            if let Some(err) = pass.failure {
                return Err(err);
            }
            // A pod deleted between the observation and its exec: the re-list
            // shows whether it is gone or was replaced, and a successor is a
            // new uid that gets its own pass.
            let vanished = pass.vanished;
            previous = Some(set);
            self.events.emit(Event::Relist {
                passes,
                message: format!("pass {passes} done: listing the pods again to see whether the set moved"),
            });
            // A pod being replaced needs a moment to reappear; re-listing at
            // once would only spend a pass on the same observation.
            if vanished {
                self.pause(deadline).await;
            }
        }
    }

    /// One fanout pass: the whole list on each of `pods`, up to `parallelism`
    /// pods at once, each pod's statements strictly in order. After the first
    /// failure no statement starts on any pod (those already running finish),
    /// and the failure reported is, among the pods that failed before the pass
    /// stopped, the one with the lowest statement index, ties broken by pod
    /// name: pods failing at once give the same error every time, while a pod
    /// that had not reached its failure yet is counted as not finished. The
    /// message ends with how many pods completed, failed and were not
    /// finished. With `parallelism` 1 this is the sequential pass.
    async fn apply_pods(&self, statements: &[String], pods: &[&PodInfo]) -> Pass {
        let context = PassContext {
            stop: AtomicBool::new(false),
            done: AtomicUsize::new(0),
            total: pods.len(),
        };
        let (results, never_started) = bounded(
            pods,
            self.parallelism,
            || !context.stop.load(Ordering::SeqCst),
            |pod| {
                let context = &context;
                async move {
                    let result = self.apply_all_in(statements, pod, Some(context)).await;
                    if let Err(Failure::Error(_)) = &result {
                        // Before the next pod could start: see `bounded`.
                        context.stop.store(true, Ordering::SeqCst);
                    }
                    result
                }
            },
        )
        .await;
        let mut pass = Pass {
            completed: Vec::new(),
            vanished: false,
            failure: None,
        };
        let mut failures: Vec<(usize, &str, ClickHouseSchemaError)> = Vec::new();
        let mut stopped = 0usize;
        for (at, result) in results {
            let pod = pods[at];
            match result {
                Ok(()) => pass.completed.push(PodRef::of(pod)),
                Err(Failure::Vanished) => pass.vanished = true,
                Err(Failure::Stopped) => stopped += 1,
                Err(Failure::Error(err)) => {
                    failures.push((err.statement_index.unwrap_or(usize::MAX), &pod.name, err))
                }
            }
        }
        if failures.is_empty() {
            return pass;
        }
        let failed = failures.len();
        failures.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let (_, _, mut err) = failures.swap_remove(0);
        if pods.len() > 1 {
            err.message.push_str(&format!(
                "\nThis pass over {} pod(s), up to {} at once: {} completed, {failed} failed, {} not finished.",
                pods.len(),
                self.parallelism,
                pass.completed.len(),
                stopped + never_started
            ));
        }
        pass.failure = Some(err);
        pass
    }

    /// Runs `statements` once, on the first Ready pod (by name) that has the
    /// container, and returns that pod.
    pub(crate) async fn on_cluster(&self, statements: &[String]) -> Result<PodRef, ClickHouseSchemaError> {
        let deadline = self.clock.now() + self.wait_budget;
        // The last pod listed Ready whose exec answered 404, for the error.
        let mut vanished: Option<String> = None;
        loop {
            let matching = matching_pods(self.list().await?);
            let chosen = matching
                .iter()
                .find(|p| p.ready && p.has_container(&self.target.container));
            if let Some(pod) = chosen {
                match self.apply_all(statements, pod).await {
                    Ok(()) => {
                        self.close_on_cluster(&matching, pod).await?;
                        return Ok(PodRef::of(pod));
                    }
                    // Gone since the list: pick again from a fresh one, within
                    // the same budget and at the same pace as any other wait
                    // (a pod listed Ready whose exec keeps answering 404 must
                    // not make this loop spin).
                    Err(Failure::Vanished) => vanished = Some(pod.name.clone()),
                    Err(Failure::Error(err)) => return Err(err),
                    // Only a fanout pass stops a pod's list early.
                    Err(Failure::Stopped) => {
                        return Err(self.error(
                            crate::error::ErrorKind::Internal,
                            "an onCluster run was stopped by a fanout pass".to_owned(),
                        ));
                    }
                }
            }
            if self.clock.now() >= deadline {
                return Err(self.no_server_for_on_cluster(&matching, vanished.as_deref()));
            }
            self.pause(deadline).await;
        }
    }

    /// After an onCluster list succeeded from `ran_from` (which has its rows
    /// already): the closing ledger row on every other Ready pod of `matching`
    /// with the container, so a deploy that lost its state takes the change
    /// as covered only when every pod's ledger says so (a pod left without a
    /// row, not Ready now, makes that deploy run the list again). None when a
    /// host was down and left the list queued (`throw_only_active`): which pod
    /// that host is cannot be told from its name in the status table, so no
    /// other pod is said to hold the list, and a deploy that lost its state
    /// runs it again.
    async fn close_on_cluster(
        &self,
        matching: &[PodInfo],
        ran_from: &PodInfo,
    ) -> Result<(), ClickHouseSchemaError> {
        let Some(ledger) = self.ledger else {
            return Ok(());
        };
        if !self
            .hosts_left_down
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            return Ok(());
        }
        let others: Vec<&PodInfo> = matching
            .iter()
            .filter(|p| p.name != ran_from.name && p.ready && p.has_container(&self.target.container))
            .collect();
        let (results, _) = bounded(
            &others,
            self.parallelism,
            || true,
            |pod| self.write_ledger_closing(ledger, pod),
        )
        .await;
        let mut failures: Vec<ClickHouseSchemaError> = results
            .into_iter()
            .filter_map(|(_, r)| match r {
                Err(Failure::Error(err)) => Some(err),
                // Gone since the list: it holds no row, so a later look finds it due.
                _ => None,
            })
            .collect();
        failures.sort_by(|a, b| a.pod.cmp(&b.pod));
        match failures.into_iter().next() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// What a NULL host status means under the `distributed_ddl_output_mode` the settings give
    /// (a server profile's is not known here: it is read as the strictest).
    pub(crate) fn null_status(&self) -> crate::sql::ddl_status::NullStatus {
        match self.settings.get("distributed_ddl_output_mode") {
            Some(SettingValue::String(mode)) if mode == "throw_only_active" => {
                crate::sql::ddl_status::NullStatus::Inactive
            }
            _ => crate::sql::ddl_status::NullStatus::Unfinished,
        }
    }

    /// The whole ordered list on one pod, one exec per statement, stopping at
    /// the first failure.
    async fn apply_all(&self, statements: &[String], pod: &PodInfo) -> Result<(), Failure> {
        self.apply_all_in(statements, pod, None).await
    }

    /// [`Self::apply_all`] as part of a fanout pass: it starts no further
    /// statement (nor the check) once another pod of the pass failed, and
    /// counts itself done for progress.
    async fn apply_all_in(
        &self,
        statements: &[String],
        pod_info: &PodInfo,
        pass: Option<&PassContext>,
    ) -> Result<(), Failure> {
        let pod = pod_info.name.as_str();
        let stopped = || pass.is_some_and(|p| p.stop.load(Ordering::SeqCst));
        let count = statements.len();
        let batched = self.batches(statements);
        // Before anything runs: a run stopped half way leaves this as the pod's newest row. A
        // pod's script writes it itself (see `batch`).
        if let (Some(ledger), false) = (self.ledger, batched) {
            if stopped() {
                return Err(Failure::Stopped);
            }
            self.write_ledger_opening(ledger, pod_info).await?;
        }
        let mut ran = None;
        let mut closed = false;
        if batched {
            if stopped() {
                return Err(Failure::Stopped);
            }
            // The check and the ledger's rows in the statements' exec (see `batch`). The closing
            // row only where no check after the statements can fail the pod (none, or one that
            // only warns and brings nothing to the declaration), and not under a lease: a script
            // left running by a run that lost its lease would write it when it ends, possibly
            // after the next holder's opening row, and cover that run's half-done pod.
            let check = self.verification.map(|v| self.check_script(v.plan, pod, "batch"));
            let close = !self.leased
                && match self.verification {
                    None => true,
                    Some(v) => v.mode == VerifyMode::Warn && self.converge.is_none(),
                };
            let batch = self
                .apply_batch(statements, pod_info, pass, check, self.ledger.map(|l| (l, close)))
                .await?;
            ran = batch.check;
            closed = batch.closed;
        }
        for (index, statement) in statements.iter().enumerate().filter(|_| !batched) {
            if stopped() {
                return Err(Failure::Stopped);
            }
            self.report_started(pod, index, count, pass);
            let started = self.clock.now();
            let (output, unknown) = self.exec(index, statement, pod).await?;
            let failed = (output.exit_code != 0).then(|| format!("failed (exit code {})", output.exit_code));
            self.report_finished(pod, index, count, output.exit_code, started, failed.as_deref());
            if output.exit_code != 0 {
                return Err(Failure::Error(
                    self.statement_failed(index, statement, pod, &output, unknown),
                ));
            }
            self.read_hosts(index, statement, pod, &output.stdout)?;
        }
        if let Some(verification) = self.verification {
            if stopped() {
                return Err(Failure::Stopped);
            }
            self.verify_after_apply(verification, pod, ran, pass.map(|p| &p.stop))
                .await?;
        }
        if let (Some(ledger), false) = (self.ledger, closed) {
            if stopped() {
                return Err(Failure::Stopped);
            }
            self.write_ledger_closing(ledger, pod_info).await?;
        }
        if let Some(pass) = pass {
            let done = pass.done.fetch_add(1, Ordering::SeqCst) + 1;
            let total = pass.total;
            self.events.emit(Event::PodDone {
                pod: pod.to_owned(),
                pods_done: done,
                pods_total: total,
                message: format!("{pod} done ({done} of {total} pods done)"),
            });
        }
        Ok(())
    }

    /// Reports that statement `index` of `count` starts on `pod`.
    fn report_started(&self, pod: &str, index: usize, count: usize, pass: Option<&PassContext>) {
        let (done, total) = pass.map_or((0, 1), |p| (p.done.load(Ordering::SeqCst), p.total));
        self.events.emit(Event::StatementStarted {
            pod: pod.to_owned(),
            index,
            count,
            pods_done: done,
            pods_total: total,
            // Numbered as errors number statements (`statementIndex`, from 0), so the
            // statement a progress line shows failing is the one the error names.
            message: format!("statement {index} ({count} in all) on {pod} ({done} of {total} pods done)"),
        });
    }

    /// Reports that statement `index` of `count`, started at `started` (`Clock::now`), ended on
    /// `pod`: done, or `failed` (what ended it, as a message says it).
    fn report_finished(
        &self,
        pod: &str,
        index: usize,
        count: usize,
        exit_code: i32,
        started: Duration,
        failed: Option<&str>,
    ) {
        let duration_ms =
            u64::try_from(self.clock.now().saturating_sub(started).as_millis()).unwrap_or(u64::MAX);
        self.events.emit(Event::StatementFinished {
            pod: pod.to_owned(),
            index,
            count,
            exit_code,
            duration_ms,
            message: match failed {
                None => format!("statement {index} on {pod} done in {duration_ms} ms"),
                Some(what) => format!("statement {index} on {pod} {what} after {duration_ms} ms"),
            },
        });
    }

    /// What statement `index` printed (`stdout`) says of the hosts of a distributed DDL statement:
    /// under `distributed_ddl_output_mode` 'never_throw' or 'null_status_on_timeout' it exits 0 with
    /// a host's failure only in its status table.
    fn read_hosts(&self, index: usize, statement: &str, pod: &str, stdout: &str) -> Result<(), Failure> {
        let hosts = crate::sql::ddl_status::problems(statement, stdout, self.null_status());
        if !hosts.is_empty() {
            return Err(Failure::Error(self.hosts_failed(index, statement, pod, &hosts)));
        }
        if self.null_status() == crate::sql::ddl_status::NullStatus::Inactive {
            // What is left NULL there is a host that was down: read as unfinished, it is named.
            let down = crate::sql::ddl_status::problems(
                statement,
                stdout,
                crate::sql::ddl_status::NullStatus::Unfinished,
            );
            self.hosts_left_down
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(down.into_iter().map(|h| h.host));
        }
        Ok(())
    }

    /// Runs one statement, retrying transport failures (never a statement
    /// that ran and failed). Returns the output and how many earlier attempts
    /// ended without a known outcome: a timed-out or dropped exec may still
    /// have run the statement, so whatever is reported later says so.
    async fn exec(&self, index: usize, statement: &str, pod: &str) -> Result<(ExecOutput, u32), Failure> {
        let query_id = self.query_id(index, pod);
        let request = ExecRequest {
            namespace: self.target.namespace.clone(),
            pod: pod.to_owned(),
            container: self.target.container.clone(),
            command: command::render_statement(
                self.client,
                self.settings,
                statement.len(),
                self.statement_timeout,
                &query_id,
            ),
            stdin: statement.to_owned(),
            timeout: command::exec_timeout(self.statement_timeout),
        };
        let what = format!("statement {index}");
        let call = Call::Statement { pod, index };
        match self.exec_tracked(&request, &what, &query_id, Some(call)).await {
            Tracked::Output { output, unknown } => Ok((output, unknown)),
            // The properties name where the run stopped, as they do for a cancellation during the exec.
            Tracked::CancelledBefore => Err(Failure::Error(
                self.cancelled(&format!("before statement {index} was sent to pod {pod}"))
                    .with_statement_index(index)
                    .with_pod(pod),
            )),
            Tracked::CancelledDuring => Err(Failure::Error(
                self.cancelled(&format!(
                    "while statement {index} was running on pod {pod}; its exec was closed, and whether \
                     the statement ran is unknown"
                ))
                .with_statement_index(index)
                .with_pod(pod),
            )),
            Tracked::EarlierRunning { attempt } => Err(Failure::Error(
                self.earlier_attempt_running(index, pod, &query_id, attempt),
            )),
            Tracked::Failed { err, .. }
                if err.kind == TransportErrorKind::Refused && err.http_status == Some(404) =>
            {
                Err(Failure::Vanished)
            }
            Tracked::Failed {
                err,
                attempts,
                not_retried,
            } => {
                let mut failed = self.exec_transport_failed(index, statement, pod, &err, attempts);
                if let Some(why) = not_retried {
                    failed.message.push_str(&format!(
                        " It was not retried: that attempt could not be confirmed stopped ({why}), and a \
                         retry would run beside it."
                    ));
                }
                Err(Failure::Error(failed))
            }
        }
    }

    /// One observation of the pods that belong to the set (see [`matching_pods`]).
    pub(crate) async fn list_matching(&self) -> Result<Vec<PodInfo>, ClickHouseSchemaError> {
        Ok(matching_pods(self.list().await?))
    }

    async fn list(&self) -> Result<Vec<PodInfo>, ClickHouseSchemaError> {
        if self.cancel.is_cancelled() {
            return Err(self.cancelled("before listing pods"));
        }
        let listing = self.with_retry(Call::List, || {
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
    pub(crate) async fn unless_cancelled<F: Future>(&self, work: F) -> Option<F::Output> {
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

    /// Retries transient transport failures of `call` with exponential
    /// backoff; a refusal (RBAC, unknown pod) is returned at once since
    /// repeating it cannot help. On failure returns the last error and the
    /// attempts made.
    pub(crate) async fn with_retry<F, Fut, V>(
        &self,
        call: Call<'_>,
        mut op: F,
    ) -> Result<V, (TransportError, u32)>
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
                    self.backoff(attempt, call).await;
                    attempt += 1;
                }
                Err(err) => return Err((err, attempt)),
            }
        }
    }

    /// Exponential backoff after failed attempt number `attempt` (1-based) of `call`.
    async fn backoff(&self, attempt: u32, call: Call<'_>) {
        let factor = 1u64 << (attempt - 1).min(16);
        let delay_ms = self.retry.backoff_ms.saturating_mul(factor);
        let (what, pod, index) = match call {
            Call::Statement { pod, index } => (format!("statement {index} on {pod}"), Some(pod), Some(index)),
            Call::Check { pod } => (format!("the live-schema check on {pod}"), Some(pod), None),
            Call::Ledger { pod } => (format!("the ledger on {pod}"), Some(pod), None),
            Call::Rebuild { pod } => (format!("a rebuild step on {pod}"), Some(pod), None),
            Call::Batch { pod, count } => (
                format!(
                    "the script of statements 0 to {} on {pod}",
                    count.saturating_sub(1)
                ),
                Some(pod),
                None,
            ),
            Call::List => ("the pod list".to_owned(), None, None),
            Call::Lease => ("the lease".to_owned(), None, None),
        };
        self.events.emit(Event::Retry {
            pod: pod.map(str::to_owned),
            index,
            attempt,
            delay_ms,
            message: format!("{what}: attempt {attempt} failed in transport; trying again in {delay_ms} ms"),
        });
        let sleep = self.clock.sleep(Duration::from_millis(delay_ms));
        // A cancellation ends the wait at once; the next attempt reports it.
        self.unless_cancelled(sleep).await;
    }

    /// Reports a wait for `not_ready` (or, when empty, for any pod to match).
    fn report_waiting(&self, not_ready: &[&PodInfo], deadline: Duration) {
        let remaining_ms =
            u64::try_from(deadline.saturating_sub(self.clock.now()).as_millis()).unwrap_or(u64::MAX);
        let names: Vec<String> = not_ready.iter().map(|p| p.name.clone()).collect();
        let message = if names.is_empty() {
            format!("waiting for a pod to match, {remaining_ms} ms of waitForPod left")
        } else {
            format!(
                "waiting for {} pod(s) to become Ready ({}), {remaining_ms} ms of waitForPod left",
                names.len(),
                names.join(", ")
            )
        };
        self.events.emit(Event::Waiting {
            pods: names,
            remaining_ms,
            message,
        });
    }

    async fn pause(&self, deadline: Duration) {
        let remaining = deadline.saturating_sub(self.clock.now());
        // A cancellation ends the pause at once; the next list reports it.
        self.unless_cancelled(self.clock.sleep(remaining.min(POLL_INTERVAL)))
            .await;
    }
}

/// What [`Run::exec_tracked`] came to (see `abandoned`).
pub(crate) enum Tracked {
    /// The exec returned what the client printed and its exit code; `unknown` earlier attempts
    /// ended without an outcome (each stopped and confirmed gone before the next was sent).
    Output { output: ExecOutput, unknown: u32 },
    /// The call was cancelled before an attempt was sent.
    CancelledBefore,
    /// The call was cancelled while an attempt ran: its exec was closed, and it stays tracked.
    CancelledDuring,
    /// A retry was refused with code 216: an earlier attempt still runs under the id (the stop
    /// before the retry looked before that attempt's client had registered it). Still tracked.
    EarlierRunning { attempt: u32 },
    /// The last attempt failed in transport. `not_retried`: why an attempt that could still run
    /// was not retried (it could not be confirmed stopped).
    Failed {
        err: TransportError,
        attempts: u32,
        not_retried: Option<String>,
    },
}

/// What a transport call is, for its retry events.
#[derive(Clone, Copy)]
pub(crate) enum Call<'a> {
    List,
    Statement {
        pod: &'a str,
        index: usize,
    },
    Check {
        pod: &'a str,
    },
    Ledger {
        pod: &'a str,
    },
    Rebuild {
        pod: &'a str,
    },
    /// A pod's whole statement list in one exec (see `batch`).
    Batch {
        pod: &'a str,
        count: usize,
    },
    Lease,
}

/// Why a pod's list did not complete.
// Only ever built on the way out of a pod's run, so its size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Failure {
    /// The pod no longer exists (the exec answered 404).
    Vanished,
    /// Another pod of the pass failed first, so this one started no further statement.
    Stopped,
    Error(ClickHouseSchemaError),
}

/// Runs `work` on each of `items`, at most `limit` at once, in one task (the
/// futures are polled together, so no runtime is needed), starting none once
/// `more()` is false. Returns each started item's index and output in the
/// order they finished, and how many items never started. A `work` future
/// that wants no further start after it must clear `more()` before it
/// completes: new items start only between polls.
pub(crate) async fn bounded<'i, I, R, F, W>(
    items: &'i [I],
    limit: usize,
    more: impl Fn() -> bool,
    work: W,
) -> (Vec<(usize, R)>, usize)
where
    W: Fn(&'i I) -> F,
    F: Future<Output = R> + Send + 'i,
{
    let mut queue = items.iter().enumerate();
    type Running<'i, R> = (usize, Pin<Box<dyn Future<Output = R> + Send + 'i>>);
    let mut running: Vec<Running<'i, R>> = Vec::new();
    let mut results = Vec::with_capacity(items.len());
    loop {
        while running.len() < limit.max(1) && more() {
            let Some((at, item)) = queue.next() else { break };
            running.push((at, Box::pin(work(item))));
        }
        if running.is_empty() {
            break;
        }
        let (slot, output) = poll_fn(|cx| {
            for (slot, (_, future)) in running.iter_mut().enumerate() {
                if let Poll::Ready(output) = future.as_mut().poll(cx) {
                    return Poll::Ready((slot, output));
                }
            }
            Poll::Pending
        })
        .await;
        let (at, _) = running.swap_remove(slot);
        results.push((at, output));
    }
    (results, queue.count())
}

/// What a pod's script ran after its statements (see `batch`).
#[derive(Debug)]
pub(crate) struct BatchRan {
    /// What the live-schema check printed there, when it ran there and its output arrived.
    pub check: Option<CheckRan>,
    /// The ledger's closing row is known written there.
    pub closed: bool,
}

/// What the live-schema check printed in the exec of a pod's statements, after them (see
/// `command::render_batch`), for `Run::verify_after_apply` to read.
#[derive(Debug)]
pub(crate) struct CheckRan {
    /// The scratch database its script was made for.
    pub scratch: String,
    /// What the check's client printed.
    pub stdout: String,
}

/// What the pods of one fanout pass share: whether one failed (no statement
/// starts after that), and how many are done (for progress).
struct PassContext {
    stop: AtomicBool,
    done: AtomicUsize,
    total: usize,
}

/// What one fanout pass did.
struct Pass {
    /// The pods that ran the whole list (and passed the check).
    completed: Vec<PodRef>,
    /// Some pod's exec answered 404.
    vanished: bool,
    /// The failure to report, when any pod failed.
    failure: Option<ClickHouseSchemaError>,
}

/// Pods that belong to the set: matching and not on their way out, sorted by
/// name so runs are deterministic.
fn matching_pods(mut pods: Vec<PodInfo>) -> Vec<PodInfo> {
    pods.retain(|p| !p.is_on_its_way_out());
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    pods
}

fn readiness_text(pod: &PodInfo) -> String {
    match pod.phase.as_deref() {
        Some("Running") => "Running, not Ready".to_owned(),
        None => "not Ready".to_owned(),
        Some(phase) => phase.to_owned(),
    }
}
