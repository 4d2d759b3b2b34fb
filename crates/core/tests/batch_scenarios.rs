//! A pod's statement list in one exec (`execMode: 'perPod'`, the default), on scripted pods whose
//! client runs a script as both real clients do (see `reconcile_support`): what a converge costs in
//! execs, which statement a failure names, what a dropped script re-runs, and the progress events.

mod reconcile_support;

use std::future::Future;
use std::sync::Mutex;

use clickhouse_schema_core::ErrorKind;
use clickhouse_schema_core::command;
use clickhouse_schema_core::lifecycle::{apply, plan};
use clickhouse_schema_core::state::SchemaState;
use clickhouse_schema_core::transport::{
    Cluster, Event, Events, ExecOutput, NeverCancelled, TransportError, TransportErrorKind,
};
use reconcile_support::{FakeClock, FakeCluster, Flag, OUTPUT_CUT, block_on, config, pod};
use serde_json::json;

/// Twelve statements, the list a failure is tried at every position of.
fn twelve() -> Vec<String> {
    let mut list = vec!["CREATE DATABASE IF NOT EXISTS orders".to_owned()];
    list.extend((1..12).map(|i| {
        format!("CREATE TABLE IF NOT EXISTS orders.t{i} (id UInt64, note String DEFAULT 'n{i}') ENGINE = MergeTree ORDER BY id")
    }));
    list
}

fn props(statements: &[String]) -> serde_json::Value {
    json!({
        "target": { "namespace": "ns", "podSelector": { "app": "ch" } },
        "statements": statements,
        // Counts the statements' execs only: the check and the ledger have their own tests.
        "verify": "off",
        "retry": { "maxAttempts": 3, "backoffMs": 10 },
    })
}

fn three_pods() -> Vec<clickhouse_schema_core::transport::PodInfo> {
    vec![pod("chi-0", "u0"), pod("chi-1", "u1"), pod("chi-2", "u2")]
}

#[derive(Default)]
struct Recorded(Mutex<Vec<Event>>);

impl Events for Recorded {
    fn emit(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

fn run(
    props: serde_json::Value,
    previous: Option<&SchemaState>,
    cluster: &FakeCluster,
    events: &Recorded,
) -> Result<SchemaState, clickhouse_schema_core::ClickHouseSchemaError> {
    let clock = FakeClock::default();
    let c = Cluster {
        transport: cluster,
        clock: &clock,
        cluster_id: None,
        cancel: &NeverCancelled,
        events,
    };
    block_on(apply("orders-schema", &config(props), previous, &c)).map(|(state, _)| state)
}

fn is_stop(stdin: &str) -> bool {
    stdin.contains("KILL QUERY WHERE")
}

/// What a stop prints in a pod whose processes it can read and where nothing of the exec is left.
fn nothing_left() -> ExecOutput {
    ExecOutput {
        stdout: "clickhouse-schema-pod-ended\t0\nclickhouse-schema-pod-left\t0\nclickhouse-schema-still-running\t0\n"
            .to_owned(),
        ..ExecOutput::default()
    }
}

/// The distinct execs (by attempt number) that carried statements to `pod`.
fn statement_execs(cluster: &FakeCluster, pod: &str) -> Vec<usize> {
    let mut execs: Vec<usize> = cluster
        .execs()
        .iter()
        .filter(|c| c.pod == pod && !is_stop(&c.stdin))
        .map(|c| c.exec)
        .collect();
    execs.dedup();
    execs
}

#[test]
fn a_converge_costs_one_exec_per_pod_and_an_unchanged_one_none() {
    let list = twelve();
    let cluster = FakeCluster::new(three_pods());
    let state = run(props(&list), None, &cluster, &Recorded::default()).expect("applies");
    assert_eq!(cluster.exec_attempts(), 3, "one exec per pod for 12 statements");
    for (name, uid) in [("chi-0", "u0"), ("chi-1", "u1"), ("chi-2", "u2")] {
        assert_eq!(
            cluster.statements_on(name, uid),
            list,
            "every statement, in order, on {name}"
        );
        assert_eq!(statement_execs(&cluster, name).len(), 1);
    }
    let call = &cluster.execs()[0];
    let argv = call.command.join(" ");
    assert!(
        argv.contains(" --multiquery --query_id='clickhouse-schema-"),
        "{argv}"
    );
    for statement in &list {
        assert!(!argv.contains(statement.as_str()), "no statement in argv: {argv}");
    }
    // Each statement bounded on the server by statementTimeoutMs (300 s), the script in the pod by
    // their sum and one grace.
    assert!(argv.contains("--max_execution_time=300 "), "{argv}");
    assert!(argv.contains(&format!("timeout -k 2 {}", 12 * 300 + 3)), "{argv}");

    let again = FakeCluster::new(three_pods());
    run(props(&list), Some(&state), &again, &Recorded::default()).expect("unchanged");
    assert_eq!(
        (again.lists(), again.exec_attempts()),
        (1, 0),
        "one pod list and no exec"
    );
}

#[test]
fn per_statement_mode_and_an_insert_of_inline_data_keep_an_exec_per_statement() {
    let list = twelve();
    let mut per_statement = props(&list);
    per_statement["execMode"] = json!("perStatement");
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    run(per_statement, None, &cluster, &Recorded::default()).expect("applies");
    assert_eq!(cluster.exec_attempts(), 12);

    // 18.16's client ends inline data at a newline in a script: such a list is not batched.
    let with_insert = vec![
        list[0].clone(),
        list[1].clone(),
        "INSERT INTO orders.t1 (id) VALUES\n(1),\n(2)".to_owned(),
    ];
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    run(props(&with_insert), None, &cluster, &Recorded::default()).expect("applies");
    assert_eq!(cluster.exec_attempts(), 3);
    assert_eq!(cluster.statements_on("chi-0", "u0"), with_insert);
}

#[test]
fn a_failure_at_each_position_names_that_statement_and_runs_none_after_it() {
    let list = twelve();
    for failing in 0..list.len() {
        let bad = list[failing].clone();
        let cluster = FakeCluster::new(three_pods()).on_exec(move |req, _| {
            (req.pod == "chi-1" && req.stdin == bad).then(|| {
                Ok(ExecOutput {
                    stdout: String::new(),
                    stderr: format!(
                        "Received exception from server (version 18.16.1):\nCode: 57. DB::Exception: Received from \
                         localhost:9000. DB::Exception: Table orders.t{failing} already exists with note 'n{failing}'.\n"
                    ),
                    exit_code: 57,
                })
            })
        });
        let err = run(props(&list), None, &cluster, &Recorded::default()).expect_err("fails");
        assert_eq!(err.kind, ErrorKind::StatementFailed);
        assert_eq!(err.statement_index, Some(failing), "{}", err.message);
        assert_eq!(err.pod.as_deref(), Some("chi-1"));
        assert_eq!((err.clickhouse_code, err.exit_code), (Some(57), Some(57)));
        assert!(
            err.message.starts_with(&format!(
                "ClickHouseSchema 'orders-schema': statement {failing} failed on pod chi-1\n"
            )),
            "{}",
            err.message
        );
        // Redacted against that statement's own literals.
        if failing > 0 {
            assert!(!err.message.contains(&format!("'n{failing}'")), "{}", err.message);
        }
        assert_eq!(
            cluster.statements_on("chi-1", "u1"),
            list[..=failing],
            "nothing after statement {failing} ran"
        );
        assert_eq!(
            statement_execs(&cluster, "chi-1").len(),
            1,
            "a statement's error is not retried"
        );
    }
}

#[test]
fn output_that_imitates_a_marker_moves_no_attribution() {
    let list = twelve();
    let bad = list[7].clone();
    let imitating = list[3].clone();
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |req, _| {
        if req.stdin == imitating {
            // Lines shaped like markers, of another nonce and of none.
            return Some(Ok(ExecOutput {
                stdout: (4..12)
                    .map(|i| format!("0123456789abcdef01234567:{i}\n:{i}\n"))
                    .chain(["0123456789abcdef01234567:end\nend\n".to_owned()])
                    .collect(),
                ..ExecOutput::default()
            }));
        }
        (req.stdin == bad).then(|| {
            Ok(ExecOutput {
                stderr: "Code: 60. DB::Exception: Table orders.x doesn't exist.\n".to_owned(),
                exit_code: 60,
                ..ExecOutput::default()
            })
        })
    });
    let err = run(props(&list), None, &cluster, &Recorded::default()).expect_err("fails");
    assert_eq!(err.statement_index, Some(7), "{}", err.message);
}

#[test]
fn a_script_whose_output_ends_without_its_end_marker_is_not_success() {
    let list = twelve();
    let cut = list[5].clone();
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |req, _| {
        (req.stdin == cut).then(|| {
            Ok(ExecOutput {
                stdout: format!("some output{OUTPUT_CUT}"),
                ..ExecOutput::default()
            })
        })
    });
    let err = run(props(&list), None, &cluster, &Recorded::default()).expect_err("not success");
    assert_eq!(err.statement_index, Some(5));
    assert!(
        err.message
            .contains("exited 0, but its output ended without the marker")
            && err.message.contains("statements 5 to 11 may or may not have run"),
        "{}",
        err.message
    );
}

#[test]
fn a_dropped_script_is_stopped_then_run_again_whole_and_reported() {
    let list: Vec<String> = twelve().into_iter().take(3).collect();
    let second = list[1].clone();
    let mut dropped = false;
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |req, _| {
        if is_stop(&req.stdin) {
            return Some(Ok(nothing_left()));
        }
        // The connection drops while statement 1 runs, the first time only.
        (req.stdin == second && !dropped).then(|| {
            dropped = true;
            Err(TransportError::new(
                TransportErrorKind::Transient,
                "websocket closed mid-exec",
            ))
        })
    });
    let events = Recorded::default();
    run(props(&list), None, &cluster, &events).expect("the retry succeeds");
    // Statement 0 ran in the dropped attempt and again in the retry; the stop ran between them.
    let sent: Vec<String> = cluster
        .execs()
        .iter()
        .map(|c| {
            if is_stop(&c.stdin) {
                "stop".to_owned()
            } else {
                c.stdin[..24].to_owned()
            }
        })
        .collect();
    assert_eq!(
        sent,
        [
            &list[0][..24],
            "stop",
            "stop",
            &list[0][..24],
            &list[1][..24],
            &list[2][..24]
        ],
        "the whole list again, after the stop (it looks twice: the attempt had just been sent)"
    );
    let retry: Vec<String> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Retry { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        retry,
        ["the script of statements 0 to 2 on chi-0: attempt 1 failed in transport; trying again in 10 ms"]
    );
}

#[test]
fn a_drop_that_persists_says_which_statements_may_have_run() {
    let list: Vec<String> = twelve().into_iter().take(4).collect();
    let third = list[2].clone();
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |req, _| {
        if is_stop(&req.stdin) {
            return Some(Ok(nothing_left()));
        }
        (req.stdin == third).then(|| {
            Err(TransportError::new(
                TransportErrorKind::Transient,
                "connection reset",
            ))
        })
    });
    let err = run(props(&list), None, &cluster, &Recorded::default()).expect_err("fails");
    assert_eq!(err.kind, ErrorKind::Transport);
    assert_eq!(err.pod.as_deref(), Some("chi-0"));
    assert!(
        err.message.contains("after 3 attempt(s)")
            && err
                .message
                .contains("3 attempt(s) of it ended without a known outcome: statements 0 to 3 may have run"),
        "{}",
        err.message
    );
}

#[test]
fn a_retry_refused_because_the_dropped_script_still_runs_says_what_may_have_run() {
    let list: Vec<String> = twelve().into_iter().take(2).collect();
    let mut attempts = 0;
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |req, _| {
        if is_stop(&req.stdin) {
            return Some(Ok(nothing_left()));
        }
        if req.stdin != list[0] {
            return None;
        }
        attempts += 1;
        Some(if attempts == 1 {
            Err(TransportError::new(
                TransportErrorKind::Transient,
                "connection reset",
            ))
        } else {
            Ok(ExecOutput {
                stderr: "Code: 216. DB::Exception: Query with id = x is already running.\n".to_owned(),
                exit_code: 216,
                ..ExecOutput::default()
            })
        })
    });
    let err = run(props(&twelve()[..2]), None, &cluster, &Recorded::default()).expect_err("fails");
    assert_eq!(err.kind, ErrorKind::Transport);
    assert!(
        err.message
            .contains("an earlier attempt still runs on the server under the same query id")
            && err.message.contains("statements 0 to 1 may have run"),
        "{}",
        err.message
    );
}

#[test]
fn each_statement_is_reported_as_its_marker_arrives() {
    let list: Vec<String> = twelve().into_iter().take(3).collect();
    let bad = list[2].clone();
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |req, _| {
        (req.stdin == bad).then(|| {
            Ok(ExecOutput {
                stderr: "Code: 62. DB::Exception: Syntax error.\n".to_owned(),
                exit_code: 62,
                ..ExecOutput::default()
            })
        })
    });
    let events = Recorded::default();
    run(props(&list), None, &cluster, &events).expect_err("fails");
    let shown: Vec<String> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::StatementStarted { index, .. } => Some(format!("started {index}")),
            Event::StatementFinished { index, exit_code, .. } => {
                Some(format!("finished {index} ({exit_code})"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        shown,
        [
            "started 0",
            "finished 0 (0)",
            "started 1",
            "finished 1 (0)",
            "started 2",
            "finished 2 (62)"
        ]
    );
}

#[test]
fn plan_lists_the_same_statements_whatever_the_exec_mode() {
    let list = twelve();
    let cluster = FakeCluster::new(three_pods());
    let clock = FakeClock::default();
    let c = Cluster {
        transport: &cluster,
        clock: &clock,
        cluster_id: None,
        cancel: &NeverCancelled,
        events: &Recorded::default(),
    };
    let batched = block_on(plan("orders-schema", &config(props(&list)), None, &c)).expect("plans");
    let mut per_statement = props(&list);
    per_statement["execMode"] = json!("perStatement");
    let each = block_on(plan("orders-schema", &config(per_statement), None, &c)).expect("plans");
    assert_eq!(
        serde_json::to_value(&batched).unwrap(),
        serde_json::to_value(&each).unwrap()
    );
    assert_eq!(cluster.exec_attempts(), 0, "a plan runs nothing");
}

#[test]
fn a_script_the_pods_timeout_stopped_names_the_statement_it_was_at_and_is_not_retried() {
    let list: Vec<String> = twelve().into_iter().take(5).collect();
    let slow = list[3].clone();
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |req, _| {
        if is_stop(&req.stdin) {
            return Some(Ok(nothing_left()));
        }
        (req.stdin == slow).then(|| {
            Ok(ExecOutput {
                stderr: "Terminated\n".to_owned(),
                exit_code: 124,
                ..ExecOutput::default()
            })
        })
    });
    let err = run(props(&list), None, &cluster, &Recorded::default()).expect_err("fails");
    assert_eq!(err.kind, ErrorKind::StatementFailed);
    assert_eq!(err.statement_index, Some(3));
    assert!(
        err.message
            .contains("statement 3 on pod chi-0 was stopped in the pod")
            && err
                .message
                .contains("bounds the script of statements 0 to 4 by 5 x statementTimeoutMs")
            && err.message.contains("whether statements 3 to 4 ran is unknown"),
        "{}",
        err.message
    );
    assert_eq!(statement_execs(&cluster, "chi-0").len(), 1, "not retried");
}

#[test]
fn a_syntax_error_quoting_the_next_statements_carries_none_of_their_literals() {
    let list = vec![
        "CREATE DATABASE IF NOT EXISTS orders".to_owned(),
        "CREATE TABLE orders.t (id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS broken =".to_owned(),
        "CREATE USER IF NOT EXISTS writer IDENTIFIED BY 'hunter2-next-statement'".to_owned(),
    ];
    let (bad, next) = (list[1].clone(), list[2].clone());
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |req, _| {
        // 18.16 quotes the text after the failing position, which runs on into the script.
        (req.stdin == bad).then(|| {
            Ok(ExecOutput {
                stderr: format!(
                    "Code: 62. DB::Exception: Syntax error: failed at position 80 (end of query): \n;\nSELECT \
                     '0123456789abcdef01234567:2' FORMAT TabSeparated;\n{next}\n. Expected one of: literal\n"
                ),
                exit_code: 62,
                ..ExecOutput::default()
            })
        })
    });
    let err = run(props(&list), None, &cluster, &Recorded::default()).expect_err("fails");
    assert_eq!(err.statement_index, Some(1));
    assert_eq!(err.clickhouse_code, Some(62));
    assert!(!err.message.contains("hunter2-next-statement"), "{}", err.message);
}

#[test]
fn output_past_the_transports_cap_names_no_statement_it_cannot_see() {
    let list = twelve();
    let (loud, bad) = (list[2].clone(), list[5].clone());
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |req, _| {
        if req.stdin == loud {
            return Some(Ok(ExecOutput {
                stdout: "x".repeat(clickhouse_schema_core::transport::OUTPUT_CAP + 10),
                ..ExecOutput::default()
            }));
        }
        (req.stdin == bad).then(|| {
            Ok(ExecOutput {
                stderr: "Code: 60. DB::Exception: Table orders.x doesn't exist.\n".to_owned(),
                exit_code: 60,
                ..ExecOutput::default()
            })
        })
    });
    let err = run(props(&list), None, &cluster, &Recorded::default()).expect_err("fails");
    assert_eq!(err.statement_index, Some(2), "the last statement seen starting");
    assert!(
        err.message
            .contains("reached the transport's cap (1024 KiB) after statement 2 was the last seen starting")
            && err.message.contains("statement 2 or a later one")
            && err.message.contains("execMode 'perStatement'"),
        "{}",
        err.message
    );
}

#[test]
fn a_statement_that_changes_the_session_keeps_an_exec_per_statement() {
    // In one client `USE` would move every later statement to another database.
    let list = vec![
        "CREATE DATABASE IF NOT EXISTS shop".to_owned(),
        "USE shop".to_owned(),
        "CREATE TABLE IF NOT EXISTS events (id UInt64) ENGINE = Memory".to_owned(),
    ];
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    run(props(&list), None, &cluster, &Recorded::default()).expect("applies");
    assert_eq!(cluster.exec_attempts(), 3);
}

/// The fake cluster, handing a script's stdout over line by line while its exec is under way, as
/// kube-rs's exec does, and counting the statement events already emitted at each line.
struct Streaming<'a> {
    inner: &'a FakeCluster,
    events: &'a Recorded,
    started_at_each_line: Mutex<Vec<usize>>,
    /// Set once the shell's label between the statements and the check arrived, and the exec then
    /// never ends: a deploy cancelled while the check runs.
    cancel_at_label: Option<&'a Flag>,
    /// How many times an exec drops once the label arrived (the check part's connection lost).
    drops_at_label: Mutex<usize>,
    /// How many times an exec drops once the end marker arrived (before what follows it).
    drops_at_end: Mutex<usize>,
}

impl<'a> Streaming<'a> {
    /// `inner` handed over line by line, with no drop and no cancellation.
    fn new(inner: &'a FakeCluster, events: &'a Recorded) -> Self {
        Self {
            inner,
            events,
            started_at_each_line: Mutex::new(Vec::new()),
            cancel_at_label: None,
            drops_at_label: Mutex::new(0),
            drops_at_end: Mutex::new(0),
        }
    }

    /// Applies `props` through this view, cancellable through `cancel`.
    fn apply(
        &self,
        props: serde_json::Value,
        cancel: &dyn clickhouse_schema_core::transport::Cancel,
    ) -> Result<SchemaState, clickhouse_schema_core::ClickHouseSchemaError> {
        let clock = FakeClock::default();
        let c = Cluster {
            transport: self,
            clock: &clock,
            cluster_id: None,
            cancel,
            events: self.events,
        };
        block_on(apply("orders-schema", &config(props), None, &c)).map(|(state, _)| state)
    }
}

impl clickhouse_schema_core::transport::PodLister for Streaming<'_> {
    fn list_pods(
        &self,
        namespace: &str,
        selector: &std::collections::BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<clickhouse_schema_core::transport::PodInfo>, TransportError>> + Send
    {
        self.inner.list_pods(namespace, selector)
    }
}

impl clickhouse_schema_core::transport::LeaseApi for Streaming<'_> {
    fn get_lease(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<clickhouse_schema_core::transport::LeaseRecord>, TransportError>> + Send
    {
        self.inner.get_lease(namespace, name)
    }

    fn create_lease(
        &self,
        namespace: &str,
        name: &str,
        spec: &clickhouse_schema_core::transport::LeaseSpec,
    ) -> impl Future<Output = Result<clickhouse_schema_core::transport::LeaseRecord, TransportError>> + Send
    {
        self.inner.create_lease(namespace, name, spec)
    }

    fn replace_lease(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
        spec: &clickhouse_schema_core::transport::LeaseSpec,
    ) -> impl Future<Output = Result<clickhouse_schema_core::transport::LeaseRecord, TransportError>> + Send
    {
        self.inner.replace_lease(namespace, name, resource_version, spec)
    }
}

impl clickhouse_schema_core::transport::Executor for Streaming<'_> {
    fn exec(
        &self,
        request: clickhouse_schema_core::transport::ExecRequest,
    ) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        self.inner.exec(request)
    }

    async fn exec_seeing(
        &self,
        request: clickhouse_schema_core::transport::ExecRequest,
        seen: &(dyn Fn(&[u8]) + Send + Sync),
    ) -> Result<ExecOutput, TransportError> {
        let output = self.inner.exec(request).await?;
        for line in output.stdout.split_inclusive('\n') {
            seen(line.as_bytes());
            let started = self
                .events
                .0
                .lock()
                .unwrap()
                .iter()
                .filter(|e| matches!(e, Event::StatementStarted { .. }))
                .count();
            self.started_at_each_line.lock().unwrap().push(started);
            if let Some(flag) = self.cancel_at_label
                && line.starts_with(command::STATEMENTS_ENDED_LABEL)
            {
                flag.0.store(true, std::sync::atomic::Ordering::SeqCst);
                std::future::pending::<()>().await;
            }
            let end = line.trim_end().ends_with(":end") && line.len() == 29;
            let (at, drops) = if end {
                (true, &self.drops_at_end)
            } else {
                (
                    line.starts_with(command::STATEMENTS_ENDED_LABEL),
                    &self.drops_at_label,
                )
            };
            if at {
                let mut drops = drops.lock().unwrap();
                if *drops > 0 {
                    *drops -= 1;
                    return Err(TransportError::new(
                        TransportErrorKind::Transient,
                        "websocket closed mid-exec",
                    ));
                }
            }
        }
        Ok(output)
    }
}

#[test]
fn statement_events_come_as_the_markers_stream_in_not_at_the_end() {
    let list: Vec<String> = twelve().into_iter().take(3).collect();
    let inner = FakeCluster::new(vec![pod("chi-0", "u0")]);
    let events = Recorded::default();
    let streaming = Streaming::new(&inner, &events);
    streaming.apply(props(&list), &NeverCancelled).expect("applies");
    // The script's output is its three markers and the end marker: each statement's start was
    // reported as its marker's line arrived, before the exec had returned.
    assert_eq!(*streaming.started_at_each_line.lock().unwrap(), vec![1, 2, 3, 3]);
}

/// Two databases, so that the live-schema check compares existence only.
fn two_databases() -> Vec<String> {
    vec![
        "CREATE DATABASE IF NOT EXISTS orders".to_owned(),
        "CREATE DATABASE IF NOT EXISTS audit".to_owned(),
    ]
}

fn is_check(stdin: &str) -> bool {
    stdin.starts_with("CREATE DATABASE _clickhouse_schema_verify_")
}

/// What the check's client prints on a pod that has `databases`: the scratch database its script
/// creates, those of `databases` it asks for, and the end line.
fn check_answer(script: &str, databases: &[&str]) -> ExecOutput {
    let scratch = script
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("CREATE DATABASE "))
        .and_then(|l| l.strip_suffix(';'))
        .expect("the check creates its scratch database first");
    let mut stdout = format!("database\t{scratch}\t\t\n");
    for d in databases {
        if script.contains(&format!("'{d}'")) {
            stdout.push_str(&format!("database\t{d}\t\t\n"));
        }
    }
    stdout.push_str("end\t\t\t\n");
    ExecOutput {
        stdout,
        ..ExecOutput::default()
    }
}

fn verified(statements: &[String]) -> serde_json::Value {
    let mut p = props(statements);
    p["verify"] = json!("fail");
    p
}

#[test]
fn the_live_schema_check_runs_in_the_exec_of_a_pods_statements() {
    let list = two_databases();
    let cluster = FakeCluster::new(three_pods())
        .on_exec(|r, _| is_check(&r.stdin).then(|| Ok(check_answer(&r.stdin, &["orders", "audit"]))));
    let events = Recorded::default();
    run(verified(&list), None, &cluster, &events).expect("applies and verifies");
    assert_eq!(
        cluster.exec_attempts(),
        3,
        "one exec per pod for its statements and its check"
    );
    for name in ["chi-0", "chi-1", "chi-2"] {
        let calls: Vec<_> = cluster.execs().into_iter().filter(|c| c.pod == name).collect();
        let kinds: Vec<bool> = calls.iter().map(|c| is_check(&c.stdin)).collect();
        assert_eq!(
            kinds,
            [false, false, true],
            "the statements, then the check, on {name}"
        );
        assert!(
            calls.iter().all(|c| c.exec == calls[0].exec),
            "one exec on {name}"
        );
        // The check's own client: it runs on past an error of its own (`--ignore-error`), without
        // the statements' query id (it changes only its scratch database).
        let argv = calls[0].command.join(" ");
        assert!(
            argv.contains(" --multiquery --ignore-error --max_execution_time=300 "),
            "{argv}"
        );
        assert_eq!(argv.matches("--query_id=").count(), 1, "{argv}");
    }
    let verified = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Event::Verified { ok: true, .. }))
        .count();
    assert_eq!(verified, 3);
}

#[test]
fn a_mismatch_the_check_finds_in_the_statements_exec_fails_the_apply() {
    let list = two_databases();
    // chi-1 lost `audit` (something dropped it at once): the check after the statements sees that.
    let cluster = FakeCluster::new(three_pods()).on_exec(|r, _| {
        is_check(&r.stdin).then(|| {
            let on = if r.pod == "chi-1" {
                &["orders"][..]
            } else {
                &["orders", "audit"][..]
            };
            Ok(check_answer(&r.stdin, on))
        })
    });
    let err = run(verified(&list), None, &cluster, &Recorded::default()).expect_err("a mismatch fails");
    assert_eq!(err.kind, ErrorKind::SchemaMismatch, "{}", err.message);
    assert_eq!(err.pod.as_deref(), Some("chi-1"));
    assert!(err.message.contains("audit"), "{}", err.message);
    let checks = cluster.execs().into_iter().filter(|c| is_check(&c.stdin)).count();
    assert_eq!(checks, cluster.exec_attempts(), "no check in an exec of its own");
}

#[test]
fn a_check_whose_output_cannot_be_read_in_the_statements_exec_runs_again_in_its_own() {
    let list = two_databases();
    // In the statements' exec the check's output is cut before its end line (as the transport's
    // cap cuts an output); in an exec of its own it prints everything.
    let cluster = FakeCluster::new(three_pods()).on_exec(|r, _| {
        is_check(&r.stdin).then(|| {
            let mut answer = check_answer(&r.stdin, &["orders", "audit"]);
            if r.command.join(" ").contains(command::STATEMENTS_ENDED_LABEL) {
                answer.stdout.truncate(answer.stdout.find("end\t").unwrap_or(0));
            }
            Ok(answer)
        })
    });
    run(verified(&list), None, &cluster, &Recorded::default()).expect("the check of its own decides");
    assert_eq!(
        cluster.exec_attempts(),
        6,
        "the statements' exec and a check's on each pod"
    );
    for name in ["chi-0", "chi-1", "chi-2"] {
        let checks: Vec<_> = cluster
            .execs()
            .into_iter()
            .filter(|c| c.pod == name && is_check(&c.stdin))
            .collect();
        assert_eq!(checks.len(), 2, "{name}");
        assert_ne!(checks[0].exec, checks[1].exec);
        // A new scratch database for the second: the first may still be on the server.
        assert_ne!(checks[0].stdin.lines().next(), checks[1].stdin.lines().next());
    }
}

#[test]
fn a_statement_that_fails_leaves_the_check_unrun() {
    let list = two_databases();
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(|r, _| {
        if is_check(&r.stdin) {
            return Some(Ok(check_answer(&r.stdin, &["orders", "audit"])));
        }
        r.stdin.contains("audit").then(|| {
            Ok(ExecOutput {
                stderr: "Code: 497. DB::Exception: default: Not enough privileges.".to_owned(),
                exit_code: 241,
                ..ExecOutput::default()
            })
        })
    });
    let err = run(verified(&list), None, &cluster, &Recorded::default()).expect_err("statement 1 fails");
    assert_eq!(err.statement_index, Some(1), "{}", err.message);
    assert_eq!(err.clickhouse_code, Some(497));
    assert_eq!(cluster.exec_attempts(), 1);
    assert!(
        cluster.execs().iter().all(|c| !is_check(&c.stdin)),
        "no check ran"
    );
}

#[test]
fn a_deploy_cancelled_while_the_check_runs_says_every_statement_had_ended() {
    let list = two_databases();
    let inner = FakeCluster::new(vec![pod("chi-0", "u0")])
        .on_exec(|r, _| is_check(&r.stdin).then(|| Ok(check_answer(&r.stdin, &["orders", "audit"]))));
    let events = Recorded::default();
    let flag = Flag::default();
    let streaming = Streaming {
        cancel_at_label: Some(&flag),
        ..Streaming::new(&inner, &events)
    };
    let err = streaming.apply(verified(&list), &flag).expect_err("cancelled");
    assert_eq!(err.kind, ErrorKind::Cancelled, "{}", err.message);
    assert!(
        err.message.contains(
            "while pod chi-0 ran statements 0 to 1 as one script; its exec was closed, and every statement of it \
             had ended (the marker after the last one arrived)"
        ),
        "{}",
        err.message
    );
}

/// Applies `props` through a [`Streaming`] view of `inner` whose execs drop `drops` times once the
/// shell's label arrived.
fn run_streaming_with_drops(
    props: serde_json::Value,
    inner: &FakeCluster,
    events: &Recorded,
    drops: usize,
) -> Result<SchemaState, clickhouse_schema_core::ClickHouseSchemaError> {
    let streaming = Streaming {
        drops_at_label: Mutex::new(drops),
        ..Streaming::new(inner, events)
    };
    streaming.apply(props, &NeverCancelled)
}

#[test]
fn a_drop_after_every_statement_ended_runs_none_of_them_again_only_the_check() {
    for verify in ["fail", "warn"] {
        let list = two_databases();
        let inner = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(|r, _| {
            if is_stop(&r.stdin) {
                return Some(Ok(nothing_left()));
            }
            is_check(&r.stdin).then(|| Ok(check_answer(&r.stdin, &["orders", "audit"])))
        });
        let events = Recorded::default();
        let mut p = verified(&list);
        p["verify"] = json!(verify);
        run_streaming_with_drops(p, &inner, &events, 1).unwrap_or_else(|e| panic!("{verify}: {}", e.message));
        assert_eq!(
            inner
                .statements_on("chi-0", "u0")
                .iter()
                .filter(|s| !is_check(s) && !is_stop(s))
                .count(),
            2,
            "{verify}: each statement ran once"
        );
        let kinds: Vec<&str> = inner
            .execs()
            .iter()
            .map(|c| {
                if is_stop(&c.stdin) {
                    "stop"
                } else if is_check(&c.stdin) {
                    "check"
                } else {
                    "statement"
                }
            })
            .collect();
        // The dropped exec (its statements and the start of its check), the check in an exec of
        // its own, and the stop of the dropped exec before the run ends (it looks twice: the
        // attempt had just been sent).
        assert_eq!(
            kinds,
            ["statement", "statement", "check", "check", "stop", "stop"],
            "{verify}"
        );
        let verified_ok = events
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Event::Verified { ok: true, .. }));
        assert!(verified_ok, "{verify}: the check of its own verified the pod");
    }
}

#[test]
fn an_executor_that_answers_the_statements_only_gets_the_check_in_an_exec_of_its_own() {
    // A user's executor written before the check shared the exec: markers and exit 0, no label.
    let list = two_databases();
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(|r, _| {
        if is_check(&r.stdin) {
            if r.command.join(" ").contains(command::STATEMENTS_ENDED_LABEL) {
                // What such an executor prints for the script: nothing past the end marker.
                return Some(Ok(ExecOutput::default()));
            }
            return Some(Ok(check_answer(&r.stdin, &["orders", "audit"])));
        }
        None
    });
    run(verified(&list), None, &cluster, &Recorded::default()).expect("applies, checked on its own");
    assert_eq!(
        cluster.exec_attempts(),
        2,
        "the statements' exec, then the check's"
    );
}

#[test]
fn a_single_checked_statement_shares_its_exec_with_the_check_and_is_retried_as_a_script_is() {
    // A script of one statement is still a script: its client sends the statement after its
    // marker, each a query of its own, so a stop that cannot read the pod's processes cannot say
    // it is gone (the server may show no query between the two).
    let list = vec!["CREATE DATABASE IF NOT EXISTS orders".to_owned()];
    for readable in [true, false] {
        let mut dropped = false;
        let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |r, _| {
            if is_stop(&r.stdin) {
                return Some(Ok(if readable {
                    nothing_left()
                } else {
                    ExecOutput {
                        stdout: "clickhouse-schema-still-running\t0\n".to_owned(),
                        ..ExecOutput::default()
                    }
                }));
            }
            if is_check(&r.stdin) {
                return Some(Ok(check_answer(&r.stdin, &["orders"])));
            }
            (!dropped).then(|| {
                dropped = true;
                Err(TransportError::new(
                    TransportErrorKind::Transient,
                    "websocket closed mid-exec",
                ))
            })
        });
        let result = run(verified(&list), None, &cluster, &Recorded::default());
        if readable {
            result.expect("retried once the stop saw it gone");
            let batched: Vec<usize> = cluster
                .execs()
                .iter()
                .filter(|c| !is_stop(&c.stdin))
                .map(|c| c.exec)
                .collect();
            assert_eq!(batched.len(), 2, "the statement, then its check");
            assert_eq!(batched[0], batched[1], "in one exec");
        } else {
            let err = result.expect_err("not retried");
            assert!(
                err.message
                    .contains("It was not retried: that attempt could not be confirmed stopped"),
                "{}",
                err.message
            );
        }
    }
}

#[test]
fn a_drop_after_the_end_marker_writes_the_ledgers_closing_row_in_an_exec_of_its_own() {
    // Unchecked, with a ledger: the closing row follows the end marker in the script, and the
    // exec drops right after that marker, so whether the row landed is unknown. No statement runs
    // again; the row is written in an exec of its own (a second `applied` row changes nothing).
    let list = two_databases();
    let inner = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(|r, _| {
        if is_stop(&r.stdin) {
            return Some(Ok(nothing_left()));
        }
        // A first apply reads the ledger: there is none.
        r.stdin.starts_with("SELECT resource_id").then(|| {
            Ok(ExecOutput {
                stdout: "__clickhouse_schema_ledger_end__\n".to_owned(),
                ..ExecOutput::default()
            })
        })
    });
    let events = Recorded::default();
    let mut p = props(&list);
    p["ledger"] = json!({ "database": "ops" });
    dropping_at_end(&inner, &events)
        .apply(p, &NeverCancelled)
        .expect("applies");
    let sent: Vec<(usize, String)> = inner
        .execs()
        .iter()
        .filter(|e| !e.stdin.starts_with("SELECT resource_id"))
        .map(|e| {
            let what = if is_stop(&e.stdin) {
                "stop".to_owned()
            } else if e.stdin.contains("'started';") {
                "started".to_owned()
            } else if e.stdin.contains("'applied';") {
                "applied".to_owned()
            } else {
                e.stdin.clone()
            };
            (e.exec, what)
        })
        .collect();
    let script = sent[0].0;
    let kinds: Vec<&str> = sent.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "started",
            list[0].as_str(),
            list[1].as_str(),
            "applied",
            "applied",
            "stop",
            "stop"
        ],
        "{sent:?}"
    );
    assert!(
        sent[..4].iter().all(|(e, _)| *e == script),
        "the script's: {sent:?}"
    );
    assert_ne!(sent[4].0, script, "the closing row again, in an exec of its own");
}

/// `inner` seen through a [`Streaming`] view whose first exec drops right after its end marker.
fn dropping_at_end<'a>(inner: &'a FakeCluster, events: &'a Recorded) -> Streaming<'a> {
    Streaming {
        drops_at_end: Mutex::new(1),
        ..Streaming::new(inner, events)
    }
}

/// What a first apply's ledger read prints where there is no ledger yet, or `None` for another exec.
fn no_ledger_yet(
    r: &clickhouse_schema_core::transport::ExecRequest,
) -> Option<Result<ExecOutput, TransportError>> {
    r.stdin.starts_with("SELECT resource_id").then(|| {
        Ok(ExecOutput {
            stdout: "__clickhouse_schema_ledger_end__\n".to_owned(),
            ..ExecOutput::default()
        })
    })
}

#[test]
fn a_drop_after_the_end_marker_still_reads_what_the_statements_printed() {
    // Statement 1 ends well but prints a replica not done (a Replicated database under
    // `never_throw`): the pod fails whether or not the exec then drops after its end marker.
    for (ledger, verify) in [(true, "off"), (false, "fail")] {
        let list = two_databases();
        let inner = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(|r, _| {
            if is_stop(&r.stdin) {
                return Some(Ok(nothing_left()));
            }
            if is_check(&r.stdin) {
                return Some(Ok(check_answer(&r.stdin, &["orders", "audit"])));
            }
            if let Some(answer) = no_ledger_yet(r) {
                return Some(answer);
            }
            (r.stdin == "CREATE DATABASE IF NOT EXISTS audit").then(|| {
                Ok(ExecOutput {
                    stdout: "01\tr2\tIN_PROGRESS\t1\t2\n".to_owned(),
                    ..ExecOutput::default()
                })
            })
        });
        let events = Recorded::default();
        let mut p = props(&list);
        p["verify"] = json!(verify);
        p["settings"] = json!({ "distributed_ddl_output_mode": "never_throw" });
        if ledger {
            p["ledger"] = json!({ "database": "ops" });
        }
        let err = dropping_at_end(&inner, &events)
            .apply(p, &NeverCancelled)
            .expect_err("a replica not done");
        assert_eq!(err.statement_index, Some(1), "{}", err.message);
        assert!(err.message.contains("r2"), "{}", err.message);
        if ledger {
            // Whether the script's closing row landed is unknown: the opening row again, after it.
            let rows: Vec<String> = inner
                .execs()
                .iter()
                .filter(|e| e.stdin.contains("INSERT INTO"))
                .map(|e| {
                    if e.stdin.contains("'started';") {
                        "started"
                    } else {
                        "applied"
                    }
                    .to_owned()
                })
                .collect();
            assert_eq!(rows, ["started", "applied", "started"]);
        }
    }
}

#[test]
fn a_drop_after_the_end_marker_with_nothing_after_the_statements_is_success() {
    // Neither check nor ledger: the end marker says every statement ended well, and nothing is
    // sent again.
    let list = two_databases();
    let inner = FakeCluster::new(vec![pod("chi-0", "u0")])
        .on_exec(|r, _| is_stop(&r.stdin).then(|| Ok(nothing_left())));
    let events = Recorded::default();
    dropping_at_end(&inner, &events)
        .apply(props(&list), &NeverCancelled)
        .expect("applies");
    assert_eq!(
        inner
            .statements_on("chi-0", "u0")
            .iter()
            .filter(|s| !is_stop(s))
            .count(),
        2
    );
}
