//! A scripted cluster and a fake clock for the reconcile and lifecycle tests.
//!
//! The cluster is a mutable list of pods. Scripts (closures) run before each
//! list call and around each exec, so a test can make pods appear, vanish,
//! become Ready or be replaced at exactly the point a real rollout would.
//! Every call is recorded so tests assert on what reached the "cluster".
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use clickhouse_schema_core::command::STATEMENTS_ENDED_LABEL;
use clickhouse_schema_core::config::ResolvedConfig;
use clickhouse_schema_core::config::validate::validate;
use clickhouse_schema_core::transport::{
    Clock, ExecOutput, ExecRequest, Executor, LeaseApi, LeaseRecord, LeaseSpec, PodInfo, PodLister,
    TransportError, TransportErrorKind,
};

/// Drives a future whose I/O is all fake and therefore never pending.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
    }
    panic!("the future stayed pending although every fake completes at once");
}

pub(crate) fn config(props: serde_json::Value) -> ResolvedConfig {
    validate("orders-schema", &props).expect("test props are valid")
}

pub(crate) fn pod(name: &str, uid: &str) -> PodInfo {
    PodInfo {
        name: name.into(),
        uid: Some(uid.into()),
        ready: true,
        phase: Some("Running".into()),
        terminating: false,
        containers: vec!["clickhouse".into()],
    }
}

pub(crate) fn pending(name: &str, uid: &str) -> PodInfo {
    PodInfo {
        ready: false,
        phase: Some("Pending".into()),
        ..pod(name, uid)
    }
}

/// Cancellation as an AbortSignal gives it: a flag the caller sets.
#[derive(Default)]
pub(crate) struct Flag(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

impl clickhouse_schema_core::transport::Cancel for Flag {
    fn is_cancelled(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn cancelled(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::poll_fn(move |_| {
            if self.is_cancelled() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        }))
    }
}

/// Monotonic time that only moves when the code under test sleeps.
#[derive(Default)]
pub(crate) struct FakeClock {
    now: Mutex<Duration>,
    pub sleeps: Mutex<Vec<Duration>>,
}

impl FakeClock {
    pub(crate) fn elapsed(&self) -> Duration {
        *self.now.lock().unwrap()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Duration {
        *self.now.lock().unwrap()
    }

    fn now_counting_suspend(&self) -> Duration {
        self.now()
    }

    fn now_iso8601(&self) -> String {
        format!("2026-01-01T00:00:{:06.3}Z", self.now().as_secs_f64())
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        *self.now.lock().unwrap() += duration;
        self.sleeps.lock().unwrap().push(duration);
        std::future::ready(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecCall {
    pub pod: String,
    /// uid of the pod object that was live under that name when it ran.
    pub uid: Option<String>,
    pub command: Vec<String>,
    pub stdin: String,
    /// Which exec attempt (from 1) carried it: the statements of one pod's batch share it.
    pub exec: usize,
}

/// A statement's output ending with this ends a batch's output there, with exit 0 and no end
/// marker: what an output the transport's cap cut (or a client ended without an error) looks like.
pub(crate) const OUTPUT_CUT: &str = "<the output was cut here>";

/// A pod's batch script (see `reconcile::batch` in the core), when `stdin` is one: a
/// `SELECT '<24 hex>:<n>' FORMAT TabSeparated;` line before each statement, `:end` after the last;
/// the ledger's opening row before the first marker and its closing row after the end marker
/// (followed by `:closed`) when the script writes them, and the live-schema check's script last
/// when the batch runs it.
pub(crate) struct BatchScript {
    pub nonce: String,
    pub statements: Vec<String>,
    /// The ledger's opening row's script (empty without one).
    pub opening: String,
    /// The ledger's closing row's script (empty without one).
    pub closing: String,
    /// The check's script (empty without one).
    pub check: String,
}

/// See [`BatchScript`].
pub(crate) fn batch_statements(stdin: &str) -> Option<BatchScript> {
    fn marker(line: &str) -> Option<(&str, &str)> {
        let inner = line
            .strip_prefix("SELECT '")?
            .strip_suffix("' FORMAT TabSeparated;")?;
        let (nonce, what) = inner.split_once(':')?;
        (nonce.len() == 24 && nonce.bytes().all(|b| b.is_ascii_hexdigit())).then_some((nonce, what))
    }
    let lines: Vec<&str> = stdin.split_inclusive('\n').collect();
    let first = lines
        .iter()
        .position(|l| marker(l.trim_end_matches('\n')).is_some_and(|(_, what)| what == "0"))?;
    let (nonce, _) = marker(lines[first].trim_end_matches('\n'))?;
    let opening = lines[..first].concat();
    let mut statements = Vec::new();
    let mut current = String::new();
    // What comes after the end marker: the closing row up to its marker, then the check.
    let mut after: Option<String> = None;
    let mut closing = String::new();
    for line in &lines[first + 1..] {
        let mark = marker(line.trim_end_matches('\n')).filter(|(n, _)| *n == nonce);
        if let Some(rest) = after.as_mut() {
            if mark.is_some_and(|(_, what)| what == "closed") {
                closing = std::mem::take(rest);
            } else {
                rest.push_str(line);
            }
            continue;
        }
        match mark {
            Some((_, what)) => {
                let text = current
                    .strip_suffix("\n;\n")
                    .or_else(|| current.strip_suffix('\n'))
                    .unwrap_or(&current);
                statements.push(text.to_owned());
                current.clear();
                if what == "end" {
                    after = Some(String::new());
                }
            }
            None => current.push_str(line),
        }
    }
    Some(BatchScript {
        nonce: nonce.to_owned(),
        statements,
        opening,
        closing,
        check: after.unwrap_or_default(),
    })
}

type ListScript = Box<dyn FnMut(usize, &mut Vec<PodInfo>) + Send>;
type ExecScript =
    Box<dyn FnMut(&ExecRequest, &mut Vec<PodInfo>) -> Option<Result<ExecOutput, TransportError>> + Send>;

pub(crate) struct World {
    pub pods: Vec<PodInfo>,
    pub lists: usize,
    pub execs: Vec<ExecCall>,
    /// Attempts including failed ones.
    pub exec_attempts: usize,
    list_script: Option<ListScript>,
    exec_script: Option<ExecScript>,
    list_failures: Vec<TransportError>,
    pub lease: FakeLease,
}

/// An in-memory Lease with the API's optimistic concurrency: every write
/// bumps the resourceVersion, a stale one is 409.
#[derive(Default)]
pub(crate) struct FakeLease {
    pub record: Option<LeaseRecord>,
    version: u64,
    /// What the next Lease calls do, in order: `Some` fails the call, `None` lets it through.
    pub failures: Vec<Option<TransportError>>,
    /// Every call, as `get`, `create` or `replace:<holder or ->`.
    pub calls: Vec<String>,
}

impl FakeLease {
    fn next_failure(&mut self) -> Option<TransportError> {
        if self.failures.is_empty() {
            None
        } else {
            self.failures.remove(0)
        }
    }

    fn write(&mut self, spec: &LeaseSpec) -> LeaseRecord {
        self.version += 1;
        let record = LeaseRecord {
            resource_version: self.version.to_string(),
            holder: spec.holder.clone(),
            duration_seconds: Some(spec.duration_seconds),
            acquire_time: spec.acquire_time.clone(),
            renew_time: spec.renew_time.clone(),
            transitions: Some(spec.transitions),
        };
        self.record = Some(record.clone());
        record
    }
}

fn conflict() -> TransportError {
    TransportError::new(TransportErrorKind::Refused, "Operation cannot be fulfilled").with_http_status(409)
}

impl LeaseApi for FakeCluster {
    fn process_identity(&self) -> String {
        "test-host/1".to_owned()
    }

    fn get_lease(
        &self,
        _namespace: &str,
        _name: &str,
    ) -> impl Future<Output = Result<Option<LeaseRecord>, TransportError>> + Send {
        let mut world = self.world.lock().unwrap();
        let lease = &mut world.lease;
        lease.calls.push("get".to_owned());
        let result = match lease.next_failure() {
            None => Ok(lease.record.clone()),
            Some(e) => Err(e),
        };
        std::future::ready(result)
    }

    fn create_lease(
        &self,
        _namespace: &str,
        _name: &str,
        spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        let mut world = self.world.lock().unwrap();
        let lease = &mut world.lease;
        lease.calls.push("create".to_owned());
        let result = if let Some(e) = lease.next_failure() {
            Err(e)
        } else if lease.record.is_some() {
            Err(conflict())
        } else {
            Ok(lease.write(spec))
        };
        std::future::ready(result)
    }

    fn replace_lease(
        &self,
        _namespace: &str,
        _name: &str,
        resource_version: &str,
        spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        let mut world = self.world.lock().unwrap();
        let lease = &mut world.lease;
        lease
            .calls
            .push(format!("replace:{}", spec.holder.as_deref().unwrap_or("-")));
        let current = lease.record.as_ref().map(|r| r.resource_version.clone());
        let result = if let Some(e) = lease.next_failure() {
            Err(e)
        } else if current.as_deref() != Some(resource_version) {
            Err(conflict())
        } else {
            Ok(lease.write(spec))
        };
        std::future::ready(result)
    }
}

pub(crate) struct FakeCluster {
    pub world: Mutex<World>,
}

impl FakeCluster {
    pub(crate) fn new(pods: Vec<PodInfo>) -> Self {
        Self {
            world: Mutex::new(World {
                pods,
                lists: 0,
                execs: Vec::new(),
                exec_attempts: 0,
                list_script: None,
                exec_script: None,
                list_failures: Vec::new(),
                lease: FakeLease::default(),
            }),
        }
    }

    /// Runs before every list call with the 0-based call number.
    pub(crate) fn on_list(self, script: impl FnMut(usize, &mut Vec<PodInfo>) + Send + 'static) -> Self {
        self.world.lock().unwrap().list_script = Some(Box::new(script));
        self
    }

    /// Runs before every exec attempt; returning `Some` replaces the default
    /// outcome (success with empty output; for a stop, nothing left running).
    pub(crate) fn on_exec(
        self,
        script: impl FnMut(&ExecRequest, &mut Vec<PodInfo>) -> Option<Result<ExecOutput, TransportError>>
        + Send
        + 'static,
    ) -> Self {
        self.world.lock().unwrap().exec_script = Some(Box::new(script));
        self
    }

    /// The next list calls fail with these errors, in order.
    pub(crate) fn fail_lists(self, errors: Vec<TransportError>) -> Self {
        self.world.lock().unwrap().list_failures = errors;
        self
    }

    pub(crate) fn lists(&self) -> usize {
        self.world.lock().unwrap().lists
    }

    pub(crate) fn execs(&self) -> Vec<ExecCall> {
        self.world.lock().unwrap().execs.clone()
    }

    pub(crate) fn exec_attempts(&self) -> usize {
        self.world.lock().unwrap().exec_attempts
    }

    pub(crate) fn set_pods(&self, pods: Vec<PodInfo>) {
        self.world.lock().unwrap().pods = pods;
    }

    /// Statements that ran on the pod object `name`/`uid`, in order.
    pub(crate) fn statements_on(&self, name: &str, uid: &str) -> Vec<String> {
        self.execs()
            .into_iter()
            .filter(|c| c.pod == name && c.uid.as_deref() == Some(uid))
            .map(|c| c.stdin)
            .collect()
    }
}

impl PodLister for FakeCluster {
    fn list_pods(
        &self,
        _namespace: &str,
        _selector: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<PodInfo>, TransportError>> + Send {
        let mut world = self.world.lock().unwrap();
        let call = world.lists;
        world.lists += 1;
        let result = if world.list_failures.is_empty() {
            let mut script = world.list_script.take();
            if let Some(script) = script.as_mut() {
                script(call, &mut world.pods);
            }
            world.list_script = script;
            Ok(world.pods.clone())
        } else {
            Err(world.list_failures.remove(0))
        };
        std::future::ready(result)
    }
}

impl Executor for FakeCluster {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let mut world = self.world.lock().unwrap();
        world.exec_attempts += 1;
        // The pod object the exec reaches is the one live when it starts; an
        // exec into a pod that no longer exists is answered 404, as the API does.
        let Some(uid) = world
            .pods
            .iter()
            .find(|p| p.name == request.pod)
            .map(|p| p.uid.clone())
        else {
            let gone = format!("pods \"{}\" not found", request.pod);
            return std::future::ready(Err(
                TransportError::new(TransportErrorKind::Refused, gone).with_http_status(404)
            ));
        };
        let exec = world.exec_attempts;
        if let Some(batch) = batch_statements(&request.stdin) {
            return std::future::ready(world.run_batch(&request, uid, exec, &batch));
        }
        let mut script = world.exec_script.take();
        let scripted = script.as_mut().and_then(|s| s(&request, &mut world.pods));
        world.exec_script = script;
        let result = scripted.unwrap_or_else(|| {
            // Every exec here completes, so a stop finds nothing left running.
            Ok(if request.stdin.contains("KILL QUERY WHERE") {
                ExecOutput {
                    stdout: "clickhouse-schema-still-running\t0\n".to_owned(),
                    ..ExecOutput::default()
                }
            } else {
                ExecOutput::default()
            })
        });
        if result.is_ok() {
            world.execs.push(ExecCall {
                pod: request.pod.clone(),
                uid,
                command: request.command.clone(),
                stdin: request.stdin.clone(),
                exec,
            });
        }
        std::future::ready(result)
    }
}

impl World {
    /// A batch as both clients run it: the ledger's opening row when it has one, each statement's
    /// marker, then the statement (the exec script sees each as a request of its own, with the
    /// batch's command), stopping at the first that fails, the end marker after the last, and
    /// the ledger's closing row and its marker when it has one; the stdout kept up to the transports' cap.
    /// A transport failure the script gives for a statement is the whole exec's, after the
    /// statements before it ran. A check after them runs as the shell runs it: after every
    /// statement succeeded, behind the shell's label (on stdout and stderr), as a request of its
    /// own (with the batch's command), the exec's status 0 whatever its client's.
    fn run_batch(
        &mut self,
        request: &ExecRequest,
        uid: Option<String>,
        exec: usize,
        batch: &BatchScript,
    ) -> Result<ExecOutput, TransportError> {
        let nonce = &batch.nonce;
        let mut stdout = String::new();
        let run_one = |world: &mut Self, stdin: &str| -> Result<ExecOutput, TransportError> {
            let one = ExecRequest {
                stdin: stdin.to_owned(),
                ..request.clone()
            };
            let mut script = world.exec_script.take();
            let scripted = script.as_mut().and_then(|s| s(&one, &mut world.pods));
            world.exec_script = script;
            let output = scripted.unwrap_or_else(|| Ok(ExecOutput::default()))?;
            world.execs.push(ExecCall {
                pod: request.pod.clone(),
                uid: uid.clone(),
                command: request.command.clone(),
                stdin: stdin.to_owned(),
                exec,
            });
            Ok(output)
        };
        // The ledger's rows run as the statements do: a failure ends the script there.
        if !batch.opening.is_empty() {
            let output = run_one(self, &batch.opening)?;
            if output.exit_code != 0 {
                return Ok(output);
            }
        }
        for (index, statement) in batch.statements.iter().enumerate() {
            stdout.push_str(&format!("{nonce}:{index}\n"));
            let output = run_one(self, statement)?;
            if let Some(before) = output.stdout.strip_suffix(OUTPUT_CUT) {
                stdout.push_str(before);
                return Ok(ExecOutput {
                    stdout,
                    ..ExecOutput::default()
                });
            }
            stdout.push_str(&output.stdout);
            if output.exit_code != 0 {
                return Ok(ExecOutput {
                    stdout: capped(stdout),
                    ..output
                });
            }
        }
        stdout.push_str(&format!("{nonce}:end\n"));
        if !batch.closing.is_empty() {
            let output = run_one(self, &batch.closing)?;
            if output.exit_code != 0 {
                return Ok(ExecOutput {
                    stdout: capped(stdout),
                    ..output
                });
            }
            stdout.push_str(&format!("{nonce}:closed\n"));
        }
        if batch.check.is_empty() {
            return Ok(ExecOutput {
                stdout: capped(stdout),
                ..ExecOutput::default()
            });
        }
        stdout.push_str(&format!("{STATEMENTS_ENDED_LABEL}\n"));
        let output = run_one(self, &batch.check)?;
        stdout.push_str(&output.stdout);
        Ok(ExecOutput {
            stdout: capped(stdout),
            stderr: format!("{STATEMENTS_ENDED_LABEL}\n{}", output.stderr),
            exit_code: 0,
        })
    }
}

/// What a transport keeps of an output: its first `OUTPUT_CAP` bytes.
fn capped(mut output: String) -> String {
    let mut at = output.len().min(clickhouse_schema_core::transport::OUTPUT_CAP);
    while !output.is_char_boundary(at) {
        at -= 1;
    }
    output.truncate(at);
    output
}
