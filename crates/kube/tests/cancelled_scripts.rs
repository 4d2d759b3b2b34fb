//! A deploy cancelled while a convergence script or a rebuild step runs, against the sandbox's real
//! API server, Lease API and ClickHouse 18.16. Closing an exec does not stop its process in a real
//! pod, so such a script must run under a query id of its own, and the cancelled deploy must stop
//! it by that id (`KILL QUERY ... SYNC`, in an exec of its own) before it releases its lease.
//! Before, these scripts had no query id and nothing stopped them: the lease was released at once,
//! and the next deploy could run its own ALTERs or its own copy beside them.
//!
//! The product's transport is wrapped only to see what it sends, and to cancel the deploy once the
//! script under test has been running for a moment. One sandbox for the binary; the steps run in
//! order.

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clickhouse_schema_core::config::validate::validate;
use clickhouse_schema_core::lifecycle::apply;
use clickhouse_schema_core::transport::{
    Cluster, ExecOutput, ExecRequest, Executor, LeaseApi, LeaseRecord, LeaseSpec, NoEvents, PodInfo,
    PodLister, TransportError,
};
use clickhouse_schema_core::{ClickHouseSchemaError, ErrorKind};
use clickhouse_schema_kube::KubeTransport;
use clickhouse_schema_sandbox::{Layout, Sandbox, SandboxOptions};
use common::*;
use serde_json::json;

/// What the deploy sent, in order.
#[derive(Debug, Clone)]
enum Sent {
    Exec {
        pod: String,
        stdin: String,
        argv: String,
    },
    /// A lease write that names no holder.
    Release,
}

/// The product's transport, seen; the first exec whose stdin `trigger` picks is let run for up
/// to half a second, then the deploy is cancelled while that exec is still in flight for it.
struct Watched<'a> {
    inner: &'a KubeTransport,
    trigger: fn(&str) -> bool,
    fired: AtomicBool,
    cancel: Arc<AtomicBool>,
    sent: Mutex<Vec<Sent>>,
}

impl<'a> Watched<'a> {
    /// `inner` seen, and the cancellation it sets once `trigger` picks an exec.
    fn new(inner: &'a KubeTransport, trigger: fn(&str) -> bool) -> (Self, Flag) {
        let cancel = Arc::new(AtomicBool::new(false));
        let watched = Self {
            inner,
            trigger,
            fired: AtomicBool::new(false),
            cancel: cancel.clone(),
            sent: Mutex::new(Vec::new()),
        };
        (watched, Flag(cancel))
    }

    /// A deploy's view of the sandbox through this transport, cancelled by `flag`.
    fn cluster<'c>(&'c self, clock: &'c RealClock, flag: &'c Flag) -> Cluster<'c, Self, RealClock> {
        Cluster {
            transport: self,
            clock,
            cluster_id: Some("sandbox".to_owned()),
            cancel: flag,
            events: &NoEvents,
        }
    }

    fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap().clone()
    }
}

impl PodLister for Watched<'_> {
    fn list_pods(
        &self,
        namespace: &str,
        selector: &std::collections::BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<PodInfo>, TransportError>> + Send {
        self.inner.list_pods(namespace, selector)
    }
}

impl Executor for Watched<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        self.sent.lock().unwrap().push(Sent::Exec {
            pod: request.pod.clone(),
            stdin: request.stdin.clone(),
            argv: request.command.join(" "),
        });
        let fire = (self.trigger)(&request.stdin) && !self.fired.swap(true, Ordering::SeqCst);
        let cancel = self.cancel.clone();
        let work = self.inner.exec(request);
        async move {
            if !fire {
                return work.await;
            }
            let mut work = std::pin::pin!(work);
            let out = tokio::select! {
                out = &mut work => Some(out),
                () = tokio::time::sleep(Duration::from_millis(500)) => None,
            };
            // The deploy sees the cancellation while this exec is in flight for it, however
            // soon the script itself ended.
            cancel.store(true, Ordering::SeqCst);
            let out = match out {
                Some(out) => out,
                None => work.await,
            };
            tokio::time::sleep(Duration::from_secs(30)).await;
            out
        }
    }
}

impl LeaseApi for Watched<'_> {
    fn process_identity(&self) -> String {
        self.inner.process_identity()
    }

    fn get_lease(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<LeaseRecord>, TransportError>> + Send {
        self.inner.get_lease(namespace, name)
    }

    fn create_lease(
        &self,
        namespace: &str,
        name: &str,
        spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        self.inner.create_lease(namespace, name, spec)
    }

    fn replace_lease(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
        spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        if spec.holder.is_none() {
            self.sent.lock().unwrap().push(Sent::Release);
        }
        self.inner.replace_lease(namespace, name, resource_version, spec)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_convergence_or_rebuild_step_is_stopped_before_the_lease_is_released() {
    let sb = Sandbox::start(SandboxOptions {
        layout: Layout::replicas(1),
        ..SandboxOptions::default()
    })
    .await
    .expect("sandbox with ClickHouse starts");
    let result = scenarios(&sb).await;
    sb.shutdown().await.expect("shutdown");
    result.unwrap_or_else(|e| panic!("{e}"));
}

async fn scenarios(sb: &Sandbox) -> Result<(), String> {
    let conn = clickhouse_schema_kube::connect(Some(&with_path(sb.kubeconfig_path(), Some("sandbox-lease"))))
        .await
        .map_err(|e| e.to_string())?;
    let t = KubeTransport::from(&conn);
    let pod = sb.pod_names()[0].clone();
    let mut failures = Vec::new();
    // Each on the heap: a deploy's future is large, and four of them overflowed the test's stack.
    if let Err(e) = Box::pin(one_id_for_a_script(&t, &pod)).await {
        failures.push(format!("one id for a script: {e}"));
    }
    for per_pod in [false, true] {
        if let Err(e) = Box::pin(a_process_carrying_the_id_is_ended_in_the_pod(&t, &pod, per_pod)).await {
            failures.push(format!("process in the pod (per pod: {per_pod}): {e}"));
        }
    }
    if let Err(e) = Box::pin(convergence(&t, &pod)).await {
        failures.push(format!("convergence: {e}"));
    }
    if let Err(e) = Box::pin(rebuild(&t, &pod)).await {
        failures.push(format!("rebuild: {e}"));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

fn props(statements: &[String], extra: serde_json::Value) -> serde_json::Value {
    let mut props = json!({
        "target": { "namespace": NAMESPACE, "podSelector": { "clickhouse.altinity.com/chi": "sandbox" } },
        "statements": statements,
        "lease": { "ttlSeconds": 30 },
        "retry": { "maxAttempts": 3, "backoffMs": 100 },
        "waitForPod": { "timeoutMs": 30_000 },
        "statementTimeoutMs": 60_000,
    });
    if let (Some(props), Some(extra)) = (props.as_object_mut(), extra.as_object()) {
        props.extend(extra.clone());
    }
    props
}

/// Applies `first` as is, then `second` through a transport that cancels the deploy while the
/// exec `trigger` picks runs; returns the error and what the second deploy sent.
async fn cancelled_while(
    t: &KubeTransport,
    id: &str,
    first: serde_json::Value,
    setup: &[String],
    pod: &str,
    second: serde_json::Value,
    trigger: fn(&str) -> bool,
) -> Result<(ClickHouseSchemaError, Vec<Sent>), String> {
    let clock = RealClock(Instant::now());
    let never = clickhouse_schema_core::transport::NeverCancelled;
    let plain = Cluster {
        transport: t,
        clock: &clock,
        cluster_id: Some("sandbox".to_owned()),
        cancel: &never,
        events: &NoEvents,
    };
    let config = validate(id, &first).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &config, None, &plain)
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    for sql in setup {
        let out = t
            .exec(statement_exec(pod, sql, Duration::from_secs(60)))
            .await
            .map_err(|e| format!("{sql}: {e}"))?;
        check(out.exit_code == 0, format!("{sql}: {out:?}"))?;
    }
    let (watched, flag) = Watched::new(t, trigger);
    let cluster = watched.cluster(&clock, &flag);
    let config = validate(id, &second).map_err(|e| format!("{e:?}"))?;
    let err = match apply(id, &config, Some(&state), &cluster).await {
        Ok(outcome) => return Err(format!("not cancelled: {outcome:?}")),
        Err(err) => err,
    };
    check(
        watched.fired.load(Ordering::SeqCst),
        format!("the script under test never ran: {err}"),
    )?;
    Ok((err, watched.sent()))
}

/// The script `picked` ran under a query id; an exec after it stopped that id with KILL QUERY,
/// and the lease was released only after that; the error says so, naming `what`.
fn stopped_before_the_release(
    err: &ClickHouseSchemaError,
    sent: &[Sent],
    picked: fn(&str) -> bool,
    id_part: &str,
    what: &str,
) -> Result<(), String> {
    check(err.kind == ErrorKind::Cancelled, format!("{err:?}"))?;
    let log = || format!("{sent:#?}");
    let at = sent
        .iter()
        .position(|s| matches!(s, Sent::Exec { stdin, .. } if picked(stdin)))
        .ok_or_else(|| format!("the script: {}", log()))?;
    let Sent::Exec { pod, argv, .. } = &sent[at] else {
        unreachable!()
    };
    let query_id = argv
        .split_whitespace()
        .find_map(|w| w.strip_prefix("--query_id='")?.strip_suffix('\''))
        .ok_or_else(|| format!("the script runs under no query id: {argv}"))?
        .to_owned();
    check(
        query_id.starts_with("clickhouse-schema-")
            && query_id.contains(&format!("-{id_part}"))
            && query_id.ends_with(pod.as_str()),
        format!("query id {query_id}"),
    )?;
    let kill = format!("KILL QUERY WHERE query_id IN ('{query_id}') SYNC FORMAT Null;");
    let stop = sent
        .iter()
        .position(|s| matches!(s, Sent::Exec { pod: p, stdin, .. } if p == pod && stdin.contains(&kill)))
        .ok_or_else(|| format!("no stop of {query_id}: {}", log()))?;
    let release = sent
        .iter()
        .rposition(|s| matches!(s, Sent::Release))
        .ok_or_else(|| format!("never released: {}", log()))?;
    check(
        at < stop && stop < release,
        format!("script {at}, stop {stop}, release {release}: {}", log()),
    )?;
    // These scripts usually end within the half second the deploy lets them run, and the stop
    // then finds nothing: the note says so rather than claim it stopped them. On a loaded machine
    // the script may still run, and the stop ends it. Either way it is confirmed gone.
    let gone = "(not in system.processes, and no process of it left in the pod)";
    let said = |how: &str| format!("{what} on pod {pod} (query id {query_id}) {how} {gone}");
    check(
        (err.message
            .contains(&said("was not running when the stop looked"))
            || err
                .message
                .contains(&said("was stopped with KILL QUERY and is not running any more")))
            && err.message.contains("The lease was released after that."),
        format!("message: {}", err.message),
    )
}

fn is_convergence(stdin: &str) -> bool {
    stdin.starts_with("SELECT 'clickhouse_schema_converge'")
}

async fn convergence(t: &KubeTransport, pod: &str) -> Result<(), String> {
    let v1 = [
        "CREATE DATABASE IF NOT EXISTS cancel_cv".to_owned(),
        "CREATE TABLE IF NOT EXISTS cancel_cv.t (id UInt64) ENGINE = MergeTree ORDER BY id".to_owned(),
    ];
    let v2 = [
        v1[0].clone(),
        "CREATE TABLE IF NOT EXISTS cancel_cv.t (id UInt64, n UInt8 DEFAULT 7) ENGINE = MergeTree ORDER BY id"
            .to_owned(),
    ];
    let (err, sent) = cancelled_while(
        t,
        "cancel-cv",
        props(&v1, json!({})),
        &["INSERT INTO cancel_cv.t SELECT number FROM system.numbers LIMIT 1000".to_owned()],
        pod,
        props(&v2, json!({ "converge": "additive" })),
        is_convergence,
    )
    .await?;
    stopped_before_the_release(&err, &sent, is_convergence, "cv", "the convergence script")
}

fn is_copy(stdin: &str) -> bool {
    stdin.starts_with("TRUNCATE TABLE `cancel_rb`.`t__rebuild_stage`")
}

async fn rebuild(t: &KubeTransport, pod: &str) -> Result<(), String> {
    let table = |order: &str| {
        format!(
            "CREATE TABLE IF NOT EXISTS cancel_rb.t (id UInt64, kind String, at DateTime) ENGINE = MergeTree \
             PARTITION BY toYYYYMMDD(at) ORDER BY {order}"
        )
    };
    let db = "CREATE DATABASE IF NOT EXISTS cancel_rb".to_owned();
    let (err, sent) = cancelled_while(
        t,
        "cancel-rb",
        props(&[db.clone(), table("id")], json!({})),
        &[
            "INSERT INTO cancel_rb.t SELECT number, concat('k', toString(number % 7)), \
           toDateTime('2026-11-01 00:00:00') + number * 60 FROM system.numbers LIMIT 3000"
                .to_owned(),
        ],
        pod,
        props(
            &[db, table("(kind, id)")],
            json!({ "rebuild": { "cancel_rb.t": { "cutoverColumn": "at" } } }),
        ),
        is_copy,
    )
    .await?;
    stopped_before_the_release(
        &err,
        &sent,
        is_copy,
        "rb",
        "step backfill of rebuilding cancel_rb.t",
    )
}

/// What the stop relies on, on the server: each statement of a script rendered with a query id
/// runs under that id in turn (the second is not refused as a duplicate of the first), so the
/// running one can be found by it.
async fn one_id_for_a_script(t: &KubeTransport, pod: &str) -> Result<(), String> {
    let query_id = "clickhouse-schema-0123456789abcdef-cv0-test";
    let script = "SELECT 1;\nSELECT sleep(2);\nSELECT 3;\n";
    let client = clickhouse_schema_core::config::ClientConfig {
        user: "default".into(),
        database: "default".into(),
        password_env: "CLICKHOUSE_PASSWORD".into(),
        port: 9000,
    };
    let timeout = Duration::from_secs(30);
    let request = ExecRequest {
        namespace: NAMESPACE.into(),
        pod: pod.into(),
        container: CONTAINER.into(),
        command: clickhouse_schema_core::command::render_multiquery_as(
            &client,
            &std::collections::BTreeMap::new(),
            script.len(),
            timeout,
            query_id,
        ),
        stdin: script.into(),
        timeout,
    };
    let running = async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        t.exec(statement_exec(
            pod,
            &format!("SELECT query FROM system.processes WHERE query_id = '{query_id}'"),
            timeout,
        ))
        .await
    };
    let (script_out, seen) = tokio::join!(t.exec(request), running);
    let script_out = script_out.map_err(|e| e.to_string())?;
    check(
        script_out.exit_code == 0 && script_out.stdout == "1\n0\n3\n",
        format!("the script: {script_out:?}"),
    )?;
    let seen = seen.map_err(|e| e.to_string())?;
    check(
        seen.stdout.trim() == "SELECT sleep(2)",
        format!("system.processes under the id, 1 s in: {seen:?}"),
    )
}

/// On a real cluster the closed exec's `sh`, `timeout` and client go on in the pod, and a script's
/// client would send its next statement after `KILL QUERY` found nothing between two of them. The
/// stop therefore kills, in the pod, every process that carries the id. Here a stand-in process
/// carrying the cancelled statement's id runs in the pod beside it (a sandbox pod ends a closed
/// exec's own processes itself): the stop must end it before the lease is released. `per_pod`: the
/// statements go in the pod's one script (execMode 'perPod'), which then carries the id; else the
/// sleep's own exec does.
async fn a_process_carrying_the_id_is_ended_in_the_pod(
    t: &KubeTransport,
    pod: &str,
    per_pod: bool,
) -> Result<(), String> {
    fn is_sleep(stdin: &str) -> bool {
        stdin.starts_with("SELECT sleep(2)")
    }
    fn is_script_with_sleep(stdin: &str) -> bool {
        stdin.starts_with("SELECT '") && stdin.contains("\nSELECT sleep(2)\n")
    }
    let picked: fn(&str) -> bool = if per_pod { is_script_with_sleep } else { is_sleep };
    let statements = [
        "CREATE DATABASE IF NOT EXISTS cancel_pod".to_owned(),
        "SELECT sleep(2)".to_owned(),
    ];
    let mode = if per_pod { "perPod" } else { "perStatement" };
    let clock = RealClock(Instant::now());
    let (watched, flag) = Watched::new(t, picked);
    let cluster = watched.cluster(&clock, &flag);
    let config = validate("cancel-pod", &props(&statements, json!({ "execMode": mode })))
        .map_err(|e| format!("{e:?}"))?;
    let deploying = apply("cancel-pod", &config, None, &cluster);
    // Once the statement is sent: a process carrying its id, as its client's would.
    let stand_in = async {
        let query_id = loop {
            let seen = watched.sent().into_iter().find_map(|s| match s {
                Sent::Exec { stdin, argv, .. } if picked(&stdin) => argv
                    .split_whitespace()
                    .find_map(|w| Some(w.strip_prefix("--query_id='")?.strip_suffix('\'')?.to_owned())),
                _ => None,
            });
            if let Some(id) = seen {
                break id;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let started = Instant::now();
        let out = t
            .exec(shell_exec(
                pod,
                // The sleep holds none of the exec's streams, so the exec ends with the `sh`.
                &format!("sleep 60 </dev/null >/dev/null 2>&1; : --query_id={query_id}"),
                Duration::from_secs(90),
            ))
            .await;
        (out, started.elapsed(), query_id)
    };
    let (result, (stand_in, lasted, query_id)) = tokio::join!(deploying, stand_in);
    let err = match result {
        Ok(outcome) => return Err(format!("not cancelled: {outcome:?}")),
        Err(err) => err,
    };
    let stand_in = stand_in.map_err(|e| format!("the stand-in's exec: {e}"))?;
    check(
        stand_in.exit_code == 137 && lasted < Duration::from_secs(30),
        format!("the stand-in was killed (exit 137) well before its 60 s: {stand_in:?} after {lasted:?}"),
    )?;
    let what = if per_pod {
        "statements 0 to 1 (one script)"
    } else {
        "statement 1"
    };
    check(
        err.kind == ErrorKind::Cancelled
            && err.message.contains(&format!(
                "{what} on pod {pod} (query id {query_id}) was stopped with KILL QUERY and is not running any \
                 more (not in system.processes, and no process of it left in the pod)"
            )),
        format!("{err:?}"),
    )
}
