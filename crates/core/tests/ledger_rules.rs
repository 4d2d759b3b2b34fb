//! The ledger's rules against scripted pods: which pods a deploy with a lost
//! state takes as covered, what a retried destroy skips, and where the rows
//! go. The pods' ledgers are an in-memory table answering the ledger's own
//! scripts the way ClickHouse does, with two liberties that make the rules
//! visible: every row has the same time (one server second), and a read
//! returns the matching rows in the order they were written (a MergeTree
//! scan promises no order) and without its pod filter (as a table holding
//! other pods' rows would, were the filter missing).

mod reconcile_support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use clickhouse_schema_core::coordination::ownership::{Ownership, adopt};
use clickhouse_schema_core::lifecycle::{ApplyOutcome, apply, destroy};
use clickhouse_schema_core::state::SchemaState;
use clickhouse_schema_core::transport::{
    Cluster, ExecOutput, ExecRequest, NoEvents, PodInfo, TransportError, TransportErrorKind,
};
use reconcile_support::{FakeClock, FakeCluster, Flag, block_on, config, pod};
use serde_json::json;

const LEDGER: &str = "`ops`.`clickhouse_schema_ledger`";
const END: &str = "__clickhouse_schema_ledger_end__";

/// One row as the fake table keeps it.
#[derive(Debug, Clone)]
struct Row {
    resource_id: String,
    fingerprint: String,
    count: String,
    pod: String,
    uid: String,
    seq: u64,
    /// Empty when the script writing it names no event.
    event: String,
}

/// The ledger tables: one per pod, or one all pods share (a Replicated table).
#[derive(Default)]
struct Ledgers {
    shared: bool,
    tables: std::collections::BTreeMap<String, Vec<Row>>,
}

impl Ledgers {
    fn table(&mut self, pod: &str) -> &mut Vec<Row> {
        let key = if self.shared { "shared" } else { pod };
        self.tables.entry(key.to_owned()).or_default()
    }

    /// The rows naming `pod` with `event`, wherever they are.
    fn events_on(&self, pod: &str) -> Vec<String> {
        let mut rows: Vec<&Row> = self.tables.values().flatten().filter(|r| r.pod == pod).collect();
        rows.sort_by_key(|r| r.seq);
        rows.iter().map(|r| r.event.clone()).collect()
    }

    /// Writes a row on `on`'s table naming `(pod, uid)`.
    fn put(
        &mut self,
        on: &str,
        resource_id: &str,
        fingerprint: &str,
        (named_pod, uid): (&str, &str),
        event: &str,
    ) {
        let table = self.table(on);
        let seq = table
            .iter()
            .filter(|r| r.pod == named_pod)
            .map(|r| r.seq)
            .max()
            .unwrap_or(0)
            + 1;
        table.push(Row {
            resource_id: resource_id.to_owned(),
            fingerprint: fingerprint.to_owned(),
            count: "2".to_owned(),
            pod: named_pod.to_owned(),
            uid: uid.to_owned(),
            seq,
            event: event.to_owned(),
        });
    }

    /// Answers a ledger script, or `None` when `request` is no ledger script.
    fn answer(&mut self, request: &ExecRequest) -> Option<ExecOutput> {
        let script = &request.stdin;
        if !script.contains(LEDGER) {
            return None;
        }
        if let Some(insert) = script.split("INSERT INTO ").nth(1) {
            // `SELECT 'id', 'fingerprint', count, 'pod', 'uid', <time>, ...[, 'event'];`
            let values = insert.split(" SELECT ").nth(1)?;
            let fields: Vec<&str> = values.split(", ").take(5).collect();
            let unquote = |s: &str| s.trim_matches('\'').to_owned();
            let event = values
                .trim_end()
                .trim_end_matches(';')
                .rsplit(", ")
                .next()
                .filter(|last| last.starts_with('\''))
                .map(unquote)
                .unwrap_or_default();
            let pod = unquote(fields[3]);
            self.put(
                &request.pod,
                &unquote(fields[0]),
                &unquote(fields[1]),
                (&pod, &unquote(fields[4])),
                &event,
            );
            return Some(ExecOutput::default());
        }
        // `SELECT <columns> FROM ... WHERE ... (resource_id = 'id' OR fingerprint = 'f') ...`
        let columns: Vec<&str> = script
            .strip_prefix("SELECT ")?
            .split(" FROM ")
            .next()?
            .split(", ")
            .collect();
        let wanted = |name: &str| {
            script
                .split(&format!("{name} = '"))
                .nth(1)
                .and_then(|rest| rest.split('\'').next())
                .unwrap_or_default()
                .to_owned()
        };
        let (id, fingerprint) = (wanted("resource_id"), wanted("fingerprint"));
        let mut out = String::new();
        for row in self.table(&request.pod).iter() {
            if row.resource_id != id && row.fingerprint != fingerprint {
                continue;
            }
            let line: Vec<String> = columns
                .iter()
                .map(|c| match *c {
                    "resource_id" => row.resource_id.clone(),
                    "fingerprint" => row.fingerprint.clone(),
                    "statement_count" => row.count.clone(),
                    "pod" => row.pod.clone(),
                    "pod_uid" => row.uid.clone(),
                    // One server second for every row.
                    "applied_at" => "2026-12-02T10:00:00.000Z".to_owned(),
                    "package_version" => "0.1.0".to_owned(),
                    "seq" => row.seq.to_string(),
                    "event" => row.event.clone(),
                    other => panic!("the read asks for an unknown column {other}"),
                })
                .collect();
            out.push_str(&line.join("\t"));
            out.push('\n');
        }
        out.push_str(END);
        out.push('\n');
        Some(ExecOutput {
            stdout: out,
            ..ExecOutput::default()
        })
    }
}

const ID: &str = "orders-schema";
const S0: &str = "CREATE DATABASE IF NOT EXISTS orders";
const S1: &str =
    "CREATE TABLE IF NOT EXISTS orders.events (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id";
const DROP: &str = "DROP TABLE IF EXISTS orders.events";

fn props(extra: serde_json::Value) -> serde_json::Value {
    let mut props = json!({
        "target": { "namespace": "ns", "podSelector": { "clickhouse.altinity.com/chi": "orders" } },
        "statements": [S0, S1],
        "onDelete": "run",
        "deleteStatements": [DROP],
        "ledger": { "database": "ops" },
        "verify": "off",
        "parallelism": 1,
    });
    for (k, v) in extra.as_object().unwrap() {
        props[k] = v.clone();
    }
    props
}

fn pods() -> Vec<PodInfo> {
    vec![pod("chi-0", "u0"), pod("chi-1", "u1"), pod("chi-2", "u2")]
}

/// The uid the cluster gives `pod` (`chi-N` has `uN`).
fn uid_of(pod: &str) -> String {
    format!("u{}", pod.trim_start_matches("chi-"))
}

/// Scripted pods whose ledgers are `ledgers`; `also` may answer any other exec.
fn cluster(
    ledgers: &Arc<Mutex<Ledgers>>,
    mut also: impl FnMut(&ExecRequest) -> Option<ExecOutput> + Send + 'static,
) -> FakeCluster {
    let ledgers = ledgers.clone();
    FakeCluster::new(pods()).on_exec(move |request, _| {
        if let Some(out) = ledgers.lock().unwrap().answer(request) {
            return Some(Ok(out));
        }
        also(request).map(Ok)
    })
}

fn on<'a>(
    cluster: &'a FakeCluster,
    clock: &'a FakeClock,
    cancel: &'a Flag,
) -> Cluster<'a, FakeCluster, FakeClock> {
    Cluster {
        transport: cluster,
        clock,
        cluster_id: Some("cluster-a".into()),
        cancel,
        events: &NoEvents,
    }
}

fn run_apply(
    cluster: &FakeCluster,
    props: serde_json::Value,
    previous: Option<&SchemaState>,
) -> Result<(SchemaState, ApplyOutcome), String> {
    let config = config(props);
    let clock = FakeClock::default();
    block_on(apply(
        ID,
        &config,
        previous,
        &on(cluster, &clock, &Flag::default()),
    ))
    .map_err(|e| e.to_string())
}

fn run_destroy(
    cluster: &FakeCluster,
    props: serde_json::Value,
    state: &SchemaState,
) -> Result<(), clickhouse_schema_core::ClickHouseSchemaError> {
    let config = config(props);
    let clock = FakeClock::default();
    block_on(destroy(
        ID,
        &config,
        Some(state),
        &on(cluster, &clock, &Flag::default()),
    ))
}

/// The statements (not ledger scripts) that reached `pod`, in order.
fn statements_on(cluster: &FakeCluster, pod: &str) -> Vec<String> {
    cluster
        .execs()
        .into_iter()
        .filter(|e| e.pod == pod && !e.stdin.contains(LEDGER))
        .map(|e| e.stdin)
        .collect()
}

fn ran_on(outcome: &ApplyOutcome) -> Vec<String> {
    match outcome {
        ApplyOutcome::Applied { pods } => pods.clone(),
        ApplyOutcome::Unchanged => Vec::new(),
    }
}

#[test]
fn an_apply_then_a_destroy_in_one_server_second_leave_the_destroy_newest() {
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let c = cluster(&ledgers, |_| None);
    let (state, _) = run_apply(&c, props(json!({})), None).unwrap();
    run_destroy(&c, props(json!({})), &state).unwrap();
    // The state is lost: every pod's newest row is the destroy, so the list runs everywhere again.
    let c2 = cluster(&ledgers, |_| None);
    let (_, outcome) = run_apply(&c2, props(json!({})), None).unwrap();
    assert_eq!(ran_on(&outcome), vec!["chi-0", "chi-1", "chi-2"]);
    for p in ["chi-0", "chi-1", "chi-2"] {
        assert_eq!(statements_on(&c2, p), vec![S0, S1], "{p}");
    }
}

#[test]
fn a_run_stopped_between_statements_leaves_the_pod_due_for_a_deploy_with_lost_state() {
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let c = cluster(&ledgers, |_| None);
    run_apply(&c, props(json!({})), None).unwrap();
    // The next version drops the table first; it is stopped on chi-0 right after that statement
    // (each statement an exec of its own, so the stop falls between two of them).
    let v2 = props(json!({
        "statements": [S0, DROP, "CREATE TABLE IF NOT EXISTS orders.other (id UInt64) ENGINE = Memory"],
        "execMode": "perStatement",
    }));
    let cancel = Flag::default();
    let flag = cancel.0.clone();
    let c2 = cluster(&ledgers, move |request| {
        if request.stdin == DROP {
            flag.store(true, Ordering::SeqCst);
        }
        None
    });
    let clock = FakeClock::default();
    let stopped = block_on(apply(ID, &config(v2.clone()), None, &on(&c2, &clock, &cancel))).unwrap_err();
    assert_eq!(stopped.pod.as_deref(), Some("chi-0"), "{stopped}");
    assert_eq!(
        ledgers.lock().unwrap().events_on("chi-0"),
        vec!["started", "applied", "started"]
    );
    // Rolled back to the first version, the state lost: chi-0's newest row is the stopped
    // change's start, so the first version's list runs there again; the others hold it.
    let c3 = cluster(&ledgers, |_| None);
    let (_, outcome) = run_apply(&c3, props(json!({})), None).unwrap();
    assert_eq!(ran_on(&outcome), vec!["chi-0"]);
    assert_eq!(statements_on(&c3, "chi-0"), vec![S0, S1]);
    assert_eq!(
        ledgers.lock().unwrap().events_on("chi-0"),
        vec!["started", "applied", "started", "started", "applied"]
    );
}

#[test]
fn adopt_does_not_take_a_half_done_change_as_this_resources() {
    // Statements that declare no object, so adoption's only evidence is the ledger.
    let p = props(json!({ "statements": ["SYSTEM FLUSH LOGS"] }));
    let fingerprint = clickhouse_schema_core::config::fingerprint::fingerprint(&config(p.clone()));
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    {
        let mut l = ledgers.lock().unwrap();
        for pod in ["chi-0", "chi-1", "chi-2"] {
            // Applied once, then started again (after a pod lost its state, say) and stopped.
            l.put(pod, ID, &fingerprint, (pod, &uid_of(pod)), "applied");
            l.put(pod, ID, &fingerprint, (pod, &uid_of(pod)), "started");
        }
    }
    let c = cluster(&ledgers, |_| None);
    let clock = FakeClock::default();
    let adopted = block_on(adopt(ID, &config(p), &on(&c, &clock, &Flag::default()))).unwrap();
    assert_eq!(adopted.ownership, Ownership::Absent, "{adopted:?}");
}

#[test]
fn another_pods_rows_in_a_pods_ledger_do_not_cover_it() {
    // A Replicated ledger table: every pod holds every pod's rows.
    let ledgers = Arc::new(Mutex::new(Ledgers {
        shared: true,
        ..Ledgers::default()
    }));
    let fingerprint = clickhouse_schema_core::config::fingerprint::fingerprint(&config(props(json!({}))));
    ledgers
        .lock()
        .unwrap()
        .put("chi-0", ID, &fingerprint, ("chi-0", "u0"), "applied");
    let c = cluster(&ledgers, |_| None);
    let (state, outcome) = run_apply(&c, props(json!({})), None).unwrap();
    assert_eq!(ran_on(&outcome), vec!["chi-1", "chi-2"]);
    assert!(statements_on(&c, "chi-0").is_empty());
    assert_eq!(state.pod_names, vec!["chi-0", "chi-1", "chi-2"]);
}

#[test]
fn a_row_naming_a_pod_of_that_name_before_it_was_re_created_does_not_cover_it() {
    // A Replicated ledger table (or a restored volume) brings back the rows chi-0 wrote before
    // it was re-created, under its old uid; the new pod's own tables need not be there. As to
    // the state, it is another pod: the list runs there. chi-1's row, its own, covers it.
    let ledgers = Arc::new(Mutex::new(Ledgers {
        shared: true,
        ..Ledgers::default()
    }));
    let fingerprint = clickhouse_schema_core::config::fingerprint::fingerprint(&config(props(json!({}))));
    {
        let mut l = ledgers.lock().unwrap();
        l.put("chi-0", ID, &fingerprint, ("chi-0", "u0-before"), "applied");
        l.put("chi-1", ID, &fingerprint, ("chi-1", "u1"), "applied");
    }
    let c = cluster(&ledgers, |_| None);
    let (state, outcome) = run_apply(&c, props(json!({})), None).unwrap();
    assert_eq!(ran_on(&outcome), vec!["chi-0", "chi-2"]);
    assert!(statements_on(&c, "chi-1").is_empty());
    assert_eq!(state.pod_names, vec!["chi-0", "chi-1", "chi-2"]);
}

fn on_cluster_props() -> serde_json::Value {
    props(json!({
        "execution": { "mode": "onCluster", "cluster": "orders" },
        "statements": [
            "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER orders",
            "CREATE TABLE IF NOT EXISTS orders.events ON CLUSTER orders (id UInt64) ENGINE = Memory",
        ],
        "deleteStatements": ["DROP TABLE IF EXISTS orders.events ON CLUSTER orders"],
    }))
}

#[test]
fn on_cluster_is_covered_only_when_every_pods_ledger_says_so() {
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let fingerprint = clickhouse_schema_core::config::fingerprint::fingerprint(&config(on_cluster_props()));
    // One pod's row only (the pod an earlier onCluster apply ran from).
    ledgers
        .lock()
        .unwrap()
        .put("chi-0", ID, &fingerprint, ("chi-0", "u0"), "applied");
    let c = cluster(&ledgers, |_| None);
    let (_, outcome) = run_apply(&c, on_cluster_props(), None).unwrap();
    assert_eq!(ran_on(&outcome), vec!["chi-0"], "the list ran once, ON CLUSTER");
    assert_eq!(statements_on(&c, "chi-0").len(), 2);
    // It ran from chi-0 and reached every host: every pod has its closing row now.
    for p in ["chi-1", "chi-2"] {
        assert_eq!(ledgers.lock().unwrap().events_on(p), vec!["applied"], "{p}");
    }
    // So the next deploy with a lost state runs nothing.
    let c2 = cluster(&ledgers, |_| None);
    let (_, outcome) = run_apply(&c2, on_cluster_props(), None).unwrap();
    assert_eq!(ran_on(&outcome), Vec::<String>::new());
    assert!(statements_on(&c2, "chi-0").is_empty());
}

#[test]
fn on_cluster_with_a_host_down_and_left_queued_covers_no_other_pod() {
    // Under throw_only_active a host that is down gets a NULL status and runs the statement from
    // the queue when it is back: the list succeeds, but that host does not hold it yet. Which pod
    // it is cannot be told from its name there, so no other pod's ledger says the list ran.
    let mut p = on_cluster_props();
    p["settings"] = json!({ "distributed_ddl_output_mode": "throw_only_active" });
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let c = cluster(&ledgers, |request| {
        request.stdin.contains("ON CLUSTER orders").then(|| ExecOutput {
            stdout: "chi-orders-0-0\t9000\t0\t\\N\t1\t2\nchi-orders-0-1\t9000\t\\N\t\\N\t0\t2\n".to_owned(),
            ..ExecOutput::default()
        })
    });
    let (_, outcome) = run_apply(&c, p.clone(), None).unwrap();
    assert_eq!(ran_on(&outcome), vec!["chi-0"]);
    assert_eq!(
        ledgers.lock().unwrap().events_on("chi-0"),
        vec!["started", "applied"]
    );
    for pod in ["chi-1", "chi-2"] {
        assert!(ledgers.lock().unwrap().events_on(pod).is_empty(), "{pod}");
    }
    // A deploy with a lost state runs the list again (ON CLUSTER, once).
    let c2 = cluster(&ledgers, |_| None);
    let (_, outcome) = run_apply(&c2, p, None).unwrap();
    assert_eq!(ran_on(&outcome), vec!["chi-0"]);
    assert_eq!(statements_on(&c2, "chi-0").len(), 2);
    // Every host answered this time: every pod holds its closing row.
    for pod in ["chi-1", "chi-2"] {
        assert_eq!(ledgers.lock().unwrap().events_on(pod), vec!["applied"], "{pod}");
    }
}

/// The query id a command runs under (`--query_id='<id>'` in its script).
fn query_id_in(command: &[String]) -> Option<String> {
    let script = command.last()?;
    let at = script.find("--query_id='")? + "--query_id='".len();
    script[at..].split('\'').next().map(str::to_owned)
}

#[test]
fn a_dropped_ledger_write_is_stopped_before_its_retry() {
    // The closing write on chi-0 drops mid-way (no status): its client may still run in the pod
    // and land the row later, after another run's opening row. It runs under a query id, and that
    // id is stopped before the retry runs under it. (A write in an exec of its own: execMode
    // 'perStatement'; in a pod's script it is the script's, see batch_scenarios.)
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let dropped: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let seen = dropped.clone();
    let table = ledgers.clone();
    let c = FakeCluster::new(pods()).on_exec(move |request, _| {
        let closing =
            request.pod == "chi-0" && request.stdin.contains(LEDGER) && request.stdin.contains("'applied';");
        if closing && seen.lock().unwrap().is_empty() {
            seen.lock().unwrap().push(request.command.clone());
            return Some(Err(TransportError::new(
                TransportErrorKind::Transient,
                "websocket closed mid-exec",
            )));
        }
        if request.stdin.contains("KILL QUERY WHERE") {
            // The dropped attempt's client was still in the pod: killed there, gone from the server.
            return Some(Ok(ExecOutput {
                stdout: "clickhouse-schema-pod-ended\t1\nclickhouse-schema-pod-left\t0\n\
                         clickhouse-schema-found-running\t0\nclickhouse-schema-still-running\t0\n"
                    .to_owned(),
                ..ExecOutput::default()
            }));
        }
        table.lock().unwrap().answer(request).map(Ok)
    });
    run_apply(&c, props(json!({ "execMode": "perStatement" })), None).unwrap();
    let first = dropped.lock().unwrap()[0].clone();
    let id = query_id_in(&first).expect("the ledger write runs under a query id");
    assert!(
        id.starts_with("clickhouse-schema-") && id.contains("-lg") && id.ends_with("-chi-0"),
        "{id}"
    );
    let execs = c.execs();
    let stop = execs.iter().position(|e| {
        e.pod == "chi-0"
            && e.stdin
                .contains(&format!("KILL QUERY WHERE query_id IN ('{id}')"))
    });
    let retry = execs
        .iter()
        .position(|e| e.pod == "chi-0" && e.stdin.contains("'applied';"));
    assert!(
        stop.is_some() && stop < retry,
        "stop {stop:?}, retry {retry:?}: {execs:?}"
    );
    assert_eq!(query_id_in(&execs[retry.unwrap()].command), Some(id));
    assert_eq!(
        ledgers.lock().unwrap().events_on("chi-0"),
        vec!["started", "applied"]
    );
}

#[test]
fn a_retried_ledger_write_refused_because_the_first_still_runs_says_so() {
    // The closing write drops; the stop finds it gone (its client had not registered yet), and the
    // retry is refused with 216: the first attempt may still land its row. Not a grants problem.
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let mut attempt = 0;
    let c = FakeCluster::new(pods()).on_exec(move |request, _| {
        if request.stdin.contains("KILL QUERY WHERE") {
            return Some(Ok(ExecOutput {
                stdout: "clickhouse-schema-pod-ended\t0\nclickhouse-schema-pod-left\t0\n\
                         clickhouse-schema-found-running\t0\nclickhouse-schema-still-running\t0\n"
                    .to_owned(),
                ..ExecOutput::default()
            }));
        }
        let closing =
            request.pod == "chi-0" && request.stdin.contains(LEDGER) && request.stdin.contains("'applied';");
        if closing {
            attempt += 1;
            return Some(if attempt == 1 {
                Err(TransportError::new(
                    TransportErrorKind::Transient,
                    "websocket closed mid-exec",
                ))
            } else {
                Ok(ExecOutput {
                    stderr:
                        "Code: 216. DB::Exception: Query with id = clickhouse-schema-x is already running. \
                             (QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING)"
                            .to_owned(),
                    exit_code: 216,
                    ..ExecOutput::default()
                })
            });
        }
        ledgers.lock().unwrap().answer(request).map(Ok)
    });
    let err = run_apply(
        &c,
        props(json!({ "parallelism": 1, "execMode": "perStatement" })),
        None,
    )
    .unwrap_err();
    assert!(
        err.contains("write on pod chi-0: attempt 2 was refused because an earlier attempt still runs")
            && err.contains("it may still write its row")
            && err.contains("whether the row saying so is recorded is unknown")
            && !err.contains("grant"),
        "{err}"
    );
}

#[test]
fn a_rebuild_that_is_part_of_a_change_comes_after_the_started_row() {
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let c = cluster(&ledgers, |_| None);
    let rebuild = props(json!({ "rebuild": { "orders.events": { "cutoverColumn": "at" } } }));
    // Whatever the rebuild's check then makes of the fake's empty answers.
    let _ = run_apply(&c, rebuild, None);
    let execs: Vec<(String, String)> = c.execs().into_iter().map(|e| (e.pod, e.stdin)).collect();
    let first_other = execs.iter().position(|(_, s)| !s.contains(LEDGER));
    assert!(first_other.is_some(), "the rebuild's check ran: {execs:?}");
    for p in ["chi-0", "chi-1", "chi-2"] {
        let started = execs
            .iter()
            .position(|(pod, s)| pod == p && s.contains("INSERT INTO") && s.contains("'started';"));
        assert!(
            started.is_some() && started < first_other,
            "{p}: its started row came before the rebuild: {execs:?}"
        );
    }
}

#[test]
fn a_destroy_retried_after_failing_half_way_runs_on_the_pods_it_did_not_finish() {
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let c = cluster(&ledgers, |_| None);
    let (state, _) = run_apply(&c, props(json!({})), None).unwrap();
    // The delete statement fails on chi-2, after chi-0 and chi-1 finished.
    let failing = cluster(&ledgers, |request| {
        (request.pod == "chi-2" && request.stdin == DROP).then(|| ExecOutput {
            exit_code: 1,
            stderr: "Code: 999. DB::Exception: boom".to_owned(),
            ..ExecOutput::default()
        })
    });
    let err = run_destroy(&failing, props(json!({})), &state).unwrap_err();
    assert_eq!(err.pod.as_deref(), Some("chi-2"), "{err}");
    let retry = cluster(&ledgers, |_| None);
    run_destroy(&retry, props(json!({})), &state).unwrap();
    assert!(statements_on(&retry, "chi-0").is_empty());
    assert!(statements_on(&retry, "chi-1").is_empty());
    assert_eq!(statements_on(&retry, "chi-2"), vec![DROP]);
    // No row of the destroys looks like an apply.
    let ledgers = ledgers.lock().unwrap();
    assert_eq!(
        ledgers.events_on("chi-0"),
        vec!["started", "applied", "destroying", "destroyed"]
    );
    assert_eq!(
        ledgers.events_on("chi-2"),
        vec!["started", "applied", "destroying", "destroying", "destroyed"]
    );
}

/// The execs other than the ledger's reads (by attempt number).
fn script_execs(cluster: &FakeCluster) -> std::collections::BTreeSet<usize> {
    cluster
        .execs()
        .iter()
        .filter(|e| !e.stdin.starts_with("SELECT resource_id"))
        .map(|e| e.exec)
        .collect()
}

/// The ledger's writes that reached `pod` in the exec of its statements (a pod's script), and in
/// execs of their own, as the events they write.
fn ledger_writes(cluster: &FakeCluster, pod: &str) -> (Vec<String>, Vec<String>) {
    let execs: Vec<_> = cluster.execs().into_iter().filter(|e| e.pod == pod).collect();
    let script_execs: Vec<usize> = execs
        .iter()
        .filter(|e| !e.stdin.contains(LEDGER))
        .map(|e| e.exec)
        .collect();
    let event = |stdin: &str| {
        ["started", "applied", "destroying", "destroyed"]
            .into_iter()
            .find(|e| stdin.contains(&format!("'{e}';")))
            .map(str::to_owned)
    };
    let (mut inside, mut own) = (Vec::new(), Vec::new());
    for e in execs.iter().filter(|e| e.stdin.contains("INSERT INTO")) {
        let Some(event) = event(&e.stdin) else { continue };
        if script_execs.contains(&e.exec) {
            inside.push(event);
        } else {
            own.push(event);
        }
    }
    (inside, own)
}

#[test]
fn a_pods_script_writes_the_ledgers_rows_around_its_statements() {
    // Unchecked (verify 'off'): nothing after the statements can fail the pod, so both rows are
    // in the script, and a converge or a destroy costs one exec per pod.
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let c = cluster(&ledgers, |_| None);
    let (state, _) = run_apply(&c, props(json!({})), None).unwrap();
    assert_eq!(
        script_execs(&c).len(),
        3,
        "one exec per pod, besides the reads of a first apply"
    );
    for p in ["chi-0", "chi-1", "chi-2"] {
        assert_eq!(statements_on(&c, p), vec![S0, S1], "{p}");
        assert_eq!(
            ledger_writes(&c, p),
            (vec!["started".into(), "applied".into()], vec![]),
            "{p}"
        );
        assert_eq!(
            ledgers.lock().unwrap().events_on(p),
            vec!["started", "applied"],
            "{p}"
        );
    }

    // The destroy's single delete statement too goes in a script, with its rows.
    let d = cluster(&ledgers, |_| None);
    run_destroy(&d, props(json!({})), &state).unwrap();
    assert_eq!(
        script_execs(&d).len(),
        3,
        "one exec per pod, besides the reads of its rows"
    );
    for p in ["chi-0", "chi-1", "chi-2"] {
        assert_eq!(statements_on(&d, p), vec![DROP], "{p}");
        assert_eq!(
            ledger_writes(&d, p),
            (vec!["destroying".into(), "destroyed".into()], vec![]),
            "{p}"
        );
    }
}

#[test]
fn a_check_that_can_fail_the_pod_leaves_the_closing_row_to_an_exec_after_it() {
    // The scripted pods answer the live-schema check with nothing: it cannot be read, in the
    // script or in an exec of its own. Under 'fail' that fails the pod, which must then hold no
    // closing row; under 'warn' it is an event, and the closing row was written in the script.
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let c = cluster(&ledgers, |_| None);
    let err = run_apply(&c, props(json!({ "verify": "fail" })), None).unwrap_err();
    assert!(
        err.contains("E_VERIFICATION_FAILED") || err.contains("live-schema check"),
        "{err}"
    );
    assert_eq!(ledger_writes(&c, "chi-0"), (vec!["started".into()], vec![]));
    assert_eq!(ledgers.lock().unwrap().events_on("chi-0"), vec!["started"]);

    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let c = cluster(&ledgers, |_| None);
    run_apply(&c, props(json!({ "verify": "warn" })), None).unwrap();
    for p in ["chi-0", "chi-1", "chi-2"] {
        assert_eq!(
            ledger_writes(&c, p),
            (vec!["started".into(), "applied".into()], vec![]),
            "{p}"
        );
    }
}

#[test]
fn a_failing_ledger_write_in_a_pods_script_names_the_row_and_what_ran() {
    let refused = || ExecOutput {
        stderr:
            "Code: 497. DB::Exception: default: Not enough privileges. To execute this query it's necessary \
                 to have grant INSERT ON ops.clickhouse_schema_ledger."
                .to_owned(),
        exit_code: 241,
        ..ExecOutput::default()
    };
    // The opening row: the script ends there, before its first statement.
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let table = ledgers.clone();
    let c = FakeCluster::new(pods()).on_exec(move |request, _| {
        if request.stdin.contains(LEDGER) && request.stdin.contains("'started';") {
            return Some(Ok(refused()));
        }
        table.lock().unwrap().answer(request).map(Ok)
    });
    let err = run_apply(&c, props(json!({})), None).unwrap_err();
    assert!(
        err.contains("could not be written before the statements on pod chi-0")
            && err.contains("No statement ran on that pod")
            && err.contains("grant"),
        "{err}"
    );
    assert!(statements_on(&c, "chi-0").is_empty(), "no statement ran");

    // The closing row: every statement ran, once.
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let table = ledgers.clone();
    let c = FakeCluster::new(pods()).on_exec(move |request, _| {
        if request.stdin.contains(LEDGER) && request.stdin.contains("'applied';") {
            return Some(Ok(refused()));
        }
        table.lock().unwrap().answer(request).map(Ok)
    });
    let err = run_apply(&c, props(json!({})), None).unwrap_err();
    assert!(
        err.contains("could not be written on pod chi-0")
            && err.contains("The statements ran there, but nothing is recorded"),
        "{err}"
    );
    assert_eq!(statements_on(&c, "chi-0"), vec![S0, S1]);
    assert_eq!(ledgers.lock().unwrap().events_on("chi-0"), vec!["started"]);
}

/// A Replicated database's status table with a replica not done, as a statement prints it under
/// `distributed_ddl_output_mode` `never_throw`: the statement exits 0, and this package fails the pod.
const IN_PROGRESS: &str = "01\tr2\tIN_PROGRESS\t1\t2\n";

#[test]
fn a_pod_failed_after_its_script_wrote_the_closing_row_is_due_again() {
    // The script writes `applied` once its client saw every statement end well; this package then
    // fails the pod (a replica had not finished statement 1, or the output passed the cap). The
    // opening row again makes the pod due: a deploy that lost its state (here: the failed first
    // apply, retried) runs the list there again.
    let never_throw = json!({ "settings": { "distributed_ddl_output_mode": "never_throw" } });
    let huge = "x".repeat(1100 * 1024) + "\n";
    for (what, answer, extra) in [
        (
            "a replica not done",
            (S1, IN_PROGRESS.to_owned()),
            never_throw.clone(),
        ),
        ("an output past the cap", (S0, huge), json!({})),
    ] {
        let ledgers = Arc::new(Mutex::new(Ledgers::default()));
        let (statement, stdout) = answer.clone();
        let c = cluster(&ledgers, move |r| {
            (r.stdin == statement).then(|| ExecOutput {
                stdout: stdout.clone(),
                ..ExecOutput::default()
            })
        });
        run_apply(&c, props(extra.clone()), None).expect_err(what);
        let events = ledgers.lock().unwrap().events_on("chi-0");
        assert_eq!(events, vec!["started", "applied", "started"], "{what}");
        let again = cluster(&ledgers, |_| None);
        run_apply(&again, props(extra), None).expect(what);
        assert_eq!(
            statements_on(&again, "chi-0"),
            vec![S0, S1],
            "{what}: the list runs there again"
        );
    }

    // A destroy: `destroyed`, then `destroying` again.
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let p = props(never_throw);
    let (state, _) = run_apply(&cluster(&ledgers, |_| None), p.clone(), None).unwrap();
    let d = cluster(&ledgers, |r| {
        (r.stdin == DROP).then(|| ExecOutput {
            stdout: IN_PROGRESS.to_owned(),
            ..ExecOutput::default()
        })
    });
    run_destroy(&d, p, &state).expect_err("a replica not done");
    let events = ledgers.lock().unwrap().events_on("chi-0");
    assert_eq!(
        events.last().map(String::as_str),
        Some("destroying"),
        "{events:?}"
    );
}

#[test]
fn under_a_lease_the_closing_row_takes_an_exec_of_its_own() {
    // A script left running by a run that lost its lease would write its closing row when it
    // ends, possibly after the next holder's opening row: under a lease the script writes only
    // the opening row.
    let ledgers = Arc::new(Mutex::new(Ledgers::default()));
    let c = cluster(&ledgers, |_| None);
    run_apply(&c, props(json!({ "lease": true })), None).unwrap();
    for p in ["chi-0", "chi-1", "chi-2"] {
        assert_eq!(
            ledger_writes(&c, p),
            (vec!["started".into()], vec!["applied".into()]),
            "{p}"
        );
    }
}

#[test]
fn a_client_that_ends_before_its_first_marker_is_blamed_on_the_opening_row_only_when_it_failed() {
    // A cut input ran nothing and says so, as without a ledger; a client that failed there
    // failed at the row (or before it: no statement ran either way).
    for (exit_code, stderr, ledger_failed) in [
        (
            75,
            "clickhouse-schema: the exec's input ended after 10 of 400 bytes; nothing was run",
            false,
        ),
        (
            210,
            "Code: 210. DB::NetException: Connection refused (localhost:9000)",
            true,
        ),
    ] {
        let ledgers = Arc::new(Mutex::new(Ledgers::default()));
        let table = ledgers.clone();
        let c = FakeCluster::new(pods()).on_exec(move |request, _| {
            if request.stdin.contains(LEDGER) && request.stdin.contains("'started';") {
                return Some(Ok(ExecOutput {
                    stderr: stderr.to_owned(),
                    exit_code,
                    ..ExecOutput::default()
                }));
            }
            table.lock().unwrap().answer(request).map(Ok)
        });
        let err = run_apply(
            &c,
            props(json!({ "retry": { "maxAttempts": 1, "backoffMs": 0 } })),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.contains("could not be written before the statements"),
            ledger_failed,
            "exit {exit_code}: {err}"
        );
    }
}
