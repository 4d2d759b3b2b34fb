//! Every fanout / onCluster scenario the contract describes, on scripted pods
//! and a fake clock: what ran where, how many calls it cost, what was recorded.

mod reconcile_support;

use std::time::Duration;

use clickhouse_schema_core::ErrorKind;
use clickhouse_schema_core::lifecycle::{ApplyOutcome, apply, destroy, plan};
use clickhouse_schema_core::state::{PodRef, SchemaState};
use clickhouse_schema_core::transport::Cluster;
use clickhouse_schema_core::transport::{
    ExecOutput, NeverCancelled, NoEvents, TransportError, TransportErrorKind,
};
use reconcile_support::{FakeClock, FakeCluster, Flag, block_on, config, pending, pod};
use serde_json::json;

const S0: &str = "CREATE DATABASE IF NOT EXISTS orders";
const S1: &str =
    "CREATE TABLE IF NOT EXISTS orders.events (id UUID, at DateTime) ENGINE = MergeTree ORDER BY at";

fn fanout_props() -> serde_json::Value {
    json!({
        "target": { "namespace": "example-observability", "podSelector": { "clickhouse.altinity.com/chi": "orders" } },
        "statements": [S0, S1],
        // These scenarios count every exec: the live-schema check has its own tests.
        "verify": "off",
    })
}

/// `props` with one exec per statement: the scenarios of a statement's own exec (its retries, its
/// stop, its bounds); `batch_scenarios.rs` has those of a pod's script.
fn per_statement(mut props: serde_json::Value) -> serde_json::Value {
    props["execMode"] = json!("perStatement");
    props
}

fn on_cluster_props() -> serde_json::Value {
    json!({
        "target": { "namespace": "example-observability", "podSelector": { "clickhouse.altinity.com/chi": "orders" } },
        "execution": { "mode": "onCluster", "cluster": "orders" },
        "statements": [
            "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER orders",
            "CREATE TABLE IF NOT EXISTS orders.events ON CLUSTER 'orders' (id UUID) ENGINE = Memory",
        ],
        "verify": "off",
    })
}

fn three_pods() -> Vec<reconcile_support_pod::PodInfo> {
    vec![
        pod("chi-orders-0-0-0", "u0"),
        pod("chi-orders-0-1-0", "u1"),
        pod("chi-orders-0-2-0", "u2"),
    ]
}

mod reconcile_support_pod {
    pub(crate) use clickhouse_schema_core::transport::PodInfo;
}

fn run_apply(
    props: serde_json::Value,
    previous: Option<&SchemaState>,
    cluster: &FakeCluster,
    clock: &FakeClock,
) -> Result<(SchemaState, ApplyOutcome), clickhouse_schema_core::ClickHouseSchemaError> {
    let cfg = config(props);
    let c = Cluster {
        transport: cluster,
        clock,
        cluster_id: Some("cluster-a".into()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    block_on(apply("orders-schema", &cfg, previous, &c))
}

/// The scripted cluster as "cluster-a", the identity `run_apply` records.
fn cluster_a<'a>(cluster: &'a FakeCluster, clock: &'a FakeClock) -> Cluster<'a, FakeCluster, FakeClock> {
    Cluster {
        transport: cluster,
        clock,
        cluster_id: Some("cluster-a".into()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    }
}

fn refs(state: &SchemaState) -> Vec<(String, String)> {
    state
        .pods
        .iter()
        .map(|p| (p.name.clone(), p.uid.clone().unwrap_or_default()))
        .collect()
}

fn ok_state(cluster_pods: Vec<reconcile_support_pod::PodInfo>) -> SchemaState {
    let cluster = FakeCluster::new(cluster_pods);
    run_apply(fanout_props(), None, &cluster, &FakeClock::default())
        .unwrap()
        .0
}

#[test]
fn a_settled_cluster_costs_one_pass_two_lists() {
    let cluster = FakeCluster::new(three_pods());
    let clock = FakeClock::default();
    let (state, outcome) = run_apply(fanout_props(), None, &cluster, &clock).unwrap();

    assert_eq!(cluster.lists(), 2, "the selection list and one re-list");
    assert_eq!(cluster.execs().len(), 6, "2 statements x 3 pods, one exec each");
    for (name, uid) in [
        ("chi-orders-0-0-0", "u0"),
        ("chi-orders-0-1-0", "u1"),
        ("chi-orders-0-2-0", "u2"),
    ] {
        assert_eq!(
            cluster.statements_on(name, uid),
            vec![S0, S1],
            "{name} got the whole list in order"
        );
    }
    assert_eq!(
        refs(&state),
        vec![
            ("chi-orders-0-0-0".into(), "u0".into()),
            ("chi-orders-0-1-0".into(), "u1".into()),
            ("chi-orders-0-2-0".into(), "u2".into())
        ]
    );
    assert_eq!(
        state.pod_names,
        vec!["chi-orders-0-0-0", "chi-orders-0-1-0", "chi-orders-0-2-0"]
    );
    assert_eq!(state.statement_count, 2);
    assert_eq!(state.database, "default");
    assert_eq!(state.cluster_id.as_deref(), Some("cluster-a"));
    assert!(matches!(outcome, ApplyOutcome::Applied { pods } if pods.len() == 3));
    assert!(clock.sleeps.lock().unwrap().is_empty(), "nothing to wait for");
}

#[test]
fn statements_travel_on_stdin_never_in_argv() {
    let cluster = FakeCluster::new(three_pods());
    run_apply(
        per_statement(fanout_props()),
        None,
        &cluster,
        &FakeClock::default(),
    )
    .unwrap();
    for call in cluster.execs() {
        assert!(
            call.command.iter().all(|arg| !arg.contains(&call.stdin)),
            "{:?}",
            call.command
        );
        assert!(call.command[2].contains(&format!("head -c {}", call.stdin.len())));
    }
}

#[test]
fn an_unchanged_converge_costs_one_list_and_no_exec() {
    let state = ok_state(three_pods());
    let cluster = FakeCluster::new(three_pods());
    let (again, outcome) = run_apply(fanout_props(), Some(&state), &cluster, &FakeClock::default()).unwrap();
    assert_eq!(outcome, ApplyOutcome::Unchanged);
    assert_eq!(again, state, "the previous state is returned unchanged");
    assert_eq!(cluster.lists(), 1);
    assert_eq!(cluster.exec_attempts(), 0);
}

#[test]
fn an_unchanged_on_cluster_converge_makes_no_call_at_all() {
    let cluster = FakeCluster::new(three_pods());
    let (state, _) = run_apply(on_cluster_props(), None, &cluster, &FakeClock::default()).unwrap();
    assert_eq!(cluster.lists(), 1);
    assert_eq!(cluster.execs().len(), 2, "one exec per statement, on one pod");
    assert!(
        cluster.execs().iter().all(|c| c.pod == "chi-orders-0-0-0"),
        "the first Ready pod by name"
    );

    let again = FakeCluster::new(three_pods());
    let (same, outcome) = run_apply(on_cluster_props(), Some(&state), &again, &FakeClock::default()).unwrap();
    assert_eq!(outcome, ApplyOutcome::Unchanged);
    assert_eq!(same, state);
    assert_eq!((again.lists(), again.exec_attempts()), (0, 0));
}

#[test]
fn on_cluster_picks_the_first_ready_pod_with_the_container() {
    let mut no_container = pod("chi-orders-0-0-0", "u0");
    no_container.containers = vec!["sidecar".into()];
    let cluster = FakeCluster::new(vec![
        no_container,
        pending("chi-orders-0-1-0", "u1"),
        pod("chi-orders-0-2-0", "u2"),
    ]);
    let (state, _) = run_apply(on_cluster_props(), None, &cluster, &FakeClock::default()).unwrap();
    assert!(cluster.execs().iter().all(|c| c.pod == "chi-orders-0-2-0"));
    assert_eq!(state.pod_names, vec!["chi-orders-0-2-0"]);
}

#[test]
fn scale_out_applies_to_the_new_pod_only() {
    let state = ok_state(three_pods());
    let mut four = three_pods();
    four.push(pod("chi-orders-0-3-0", "u3"));
    let cluster = FakeCluster::new(four);
    let (next, outcome) = run_apply(fanout_props(), Some(&state), &cluster, &FakeClock::default()).unwrap();

    let ran_on: Vec<String> = cluster.execs().into_iter().map(|c| c.pod).collect();
    assert_eq!(ran_on, vec!["chi-orders-0-3-0", "chi-orders-0-3-0"]);
    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            pods: vec!["chi-orders-0-3-0".into()]
        }
    );
    assert_eq!(next.pod_names.len(), 4);
    assert_eq!(
        cluster.lists(),
        2,
        "the no-op check's list is the first observation"
    );
}

#[test]
fn a_replaced_pod_is_recognised_by_its_uid() {
    let state = ok_state(three_pods());
    let cluster = FakeCluster::new(vec![
        pod("chi-orders-0-0-0", "u0"),
        pod("chi-orders-0-1-0", "u1-new"),
        pod("chi-orders-0-2-0", "u2"),
    ]);
    let (next, _) = run_apply(fanout_props(), Some(&state), &cluster, &FakeClock::default()).unwrap();
    assert_eq!(cluster.statements_on("chi-orders-0-1-0", "u1-new"), vec![S0, S1]);
    assert_eq!(cluster.execs().len(), 2, "only the replacement ran the list");
    assert!(refs(&next).contains(&("chi-orders-0-1-0".into(), "u1-new".into())));
}

#[test]
fn a_removed_pod_is_dropped_from_state_without_any_exec() {
    let state = ok_state(three_pods());
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0"), pod("chi-orders-0-1-0", "u1")]);
    let (next, _) = run_apply(fanout_props(), Some(&state), &cluster, &FakeClock::default()).unwrap();
    assert_eq!(cluster.exec_attempts(), 0);
    assert_eq!(next.pod_names, vec!["chi-orders-0-0-0", "chi-orders-0-1-0"]);
}

#[test]
fn a_changed_statement_list_re_runs_everything_everywhere() {
    let state = ok_state(three_pods());
    let mut props = fanout_props();
    props["statements"].as_array_mut().unwrap().push(json!(
        "CREATE TABLE IF NOT EXISTS orders.b (x UInt8) ENGINE = Memory"
    ));
    let cluster = FakeCluster::new(three_pods());
    let (next, _) = run_apply(props, Some(&state), &cluster, &FakeClock::default()).unwrap();
    assert_eq!(cluster.execs().len(), 9);
    assert_ne!(next.fingerprint, state.fingerprint);
    assert_eq!(next.statement_count, 3);
}

#[test]
fn a_changed_target_or_cluster_re_runs_everything() {
    let state = ok_state(three_pods());
    let mut props = fanout_props();
    props["target"]["namespace"] = json!("other-namespace");
    let cluster = FakeCluster::new(three_pods());
    run_apply(props, Some(&state), &cluster, &FakeClock::default()).unwrap();
    assert_eq!(cluster.execs().len(), 6, "re-pointed target");

    let cluster = FakeCluster::new(three_pods());
    let cfg = config(fanout_props());
    let clock = FakeClock::default();
    let c = Cluster {
        transport: &cluster,
        clock: &clock,
        cluster_id: Some("cluster-b".into()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    let (next, _) = block_on(apply("orders-schema", &cfg, Some(&state), &c)).unwrap();
    assert_eq!(cluster.execs().len(), 6, "another cluster");
    assert_eq!(next.cluster_id.as_deref(), Some("cluster-b"));
}

#[test]
fn pods_recorded_without_uids_are_compared_by_name_and_prove_no_coverage() {
    // An executor that cannot tell uids reports none.
    let no_uids = || {
        let mut pods = three_pods();
        for p in &mut pods {
            p.uid = None;
        }
        pods
    };
    let recorded = ok_state(no_uids());
    let cluster = FakeCluster::new(no_uids());
    let (same, outcome) =
        run_apply(fanout_props(), Some(&recorded), &cluster, &FakeClock::default()).unwrap();
    assert_eq!(outcome, ApplyOutcome::Unchanged);
    assert_eq!(same, recorded);

    let mut four = no_uids();
    four.push(pod("chi-orders-0-3-0", "u3"));
    let cluster = FakeCluster::new(four);
    run_apply(fanout_props(), Some(&recorded), &cluster, &FakeClock::default()).unwrap();
    assert_eq!(
        cluster.execs().len(),
        8,
        "without uids nothing is proven covered: all four pods re-run"
    );
}

#[test]
fn a_pod_appearing_mid_pass_gets_its_own_pass() {
    let cluster = FakeCluster::new(three_pods()).on_exec(|req, pods| {
        if req.pod == "chi-orders-0-1-0" && !pods.iter().any(|p| p.name == "chi-orders-0-3-0") {
            pods.push(pod("chi-orders-0-3-0", "u3"));
        }
        None
    });
    let (state, _) = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap();
    assert_eq!(cluster.statements_on("chi-orders-0-3-0", "u3"), vec![S0, S1]);
    assert_eq!(state.pod_names.len(), 4);
    assert_eq!(
        cluster.lists(),
        3,
        "selection, re-list seeing the new pod, re-list confirming"
    );
    assert_eq!(cluster.execs().len(), 8, "no pod ran the list twice");
}

#[test]
fn a_pod_vanishing_mid_pass_is_dropped_and_the_set_re_observed() {
    // chi-orders-0-2-0 is deleted while 0-0-0 runs; its exec answers 404.
    let cluster = FakeCluster::new(three_pods()).on_exec(|req, pods| {
        if req.pod == "chi-orders-0-0-0" {
            pods.retain(|p| p.name != "chi-orders-0-2-0");
        }
        if req.pod == "chi-orders-0-2-0" {
            return Some(Err(TransportError::new(
                TransportErrorKind::Refused,
                "pods \"chi-orders-0-2-0\" not found",
            )
            .with_http_status(404)));
        }
        None
    });
    let (state, _) = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap();
    assert_eq!(state.pod_names, vec!["chi-orders-0-0-0", "chi-orders-0-1-0"]);
    assert_eq!(
        cluster.lists(),
        3,
        "the set changed, so it had to be seen twice unchanged"
    );
}

#[test]
fn the_empty_window_is_waited_out_and_the_successor_applied() {
    // A single replica is replaced right after it ran the list: the re-list
    // sees nothing, then a Pending successor with the same name, then Ready.
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "old")])
        .on_exec(|req, pods| {
            if req.stdin == S1 && pods.iter().any(|p| p.uid.as_deref() == Some("old")) {
                // Deleted as soon as its last statement finished.
                pods.clear();
            }
            None
        })
        .on_list(|call, pods| match call {
            2 => pods.push(pending("chi-orders-0-0-0", "new")),
            3 => pods[0].ready = true,
            _ => {}
        });
    let clock = FakeClock::default();
    let (state, _) = run_apply(fanout_props(), None, &cluster, &clock).unwrap();
    assert_eq!(refs(&state), vec![("chi-orders-0-0-0".into(), "new".into())]);
    assert_eq!(
        cluster.statements_on("chi-orders-0-0-0", "new"),
        vec![S0, S1],
        "the successor got the whole list"
    );
}

#[test]
fn an_empty_set_is_never_convergence() {
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "old")]).on_exec(|req, pods| {
        if req.stdin == S1 {
            pods.clear();
        }
        None
    });
    let clock = FakeClock::default();
    let err = run_apply(fanout_props(), None, &cluster, &clock).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PodsNotReady);
    assert!(
        err.message
            .contains("after 120000ms the matching set became empty after 1 pod(s) were applied"),
        "{}",
        err.message
    );
    assert!(err.message.contains("same-named successor"));
    assert!(
        clock.elapsed() >= Duration::from_millis(120_000),
        "waited the whole budget"
    );
}

#[test]
fn a_selector_that_never_matches_says_so() {
    let cluster = FakeCluster::new(vec![]);
    let err = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap_err();
    assert!(
        err.message
            .contains("no pod matched the selector within 120000ms"),
        "{}",
        err.message
    );
    assert!(err.message.contains("clickhouse.altinity.com/chi=orders"));
    assert!(err.message.contains("'example-observability'"));
    assert_eq!(cluster.exec_attempts(), 0);
}

#[test]
fn churn_beyond_max_reconcile_passes_fails_naming_the_uncovered_pods() {
    let mut next = 3;
    let cluster = FakeCluster::new(three_pods()).on_exec(move |req, pods| {
        // Every time a pass finishes a pod, the rollout adds another one.
        if req.stdin == S1 {
            let name = format!("chi-orders-0-{next}-0");
            pods.push(pod(&name, &format!("u{next}")));
            next += 1;
        }
        None
    });
    let mut props = fanout_props();
    props["maxReconcilePasses"] = json!(2);
    let err = run_apply(props, None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PodSetUnstable);
    assert!(
        err.message
            .contains("the pod set kept changing: after 2 reconcile pass(es)"),
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains("pod(s) had still not been applied to (chi-orders-0-"),
        "{}",
        err.message
    );
    assert!(err.message.contains("raise maxReconcilePasses"));
    assert!(err.message.contains("Nothing is recorded"));
}

#[test]
fn the_wait_budget_is_shared_across_passes() {
    // Pass 1 covers 3 pods; then a Pending pod appears and never becomes
    // Ready. The budget started at the beginning of the apply, not the pass.
    let cluster = FakeCluster::new(three_pods()).on_list(|call, pods| {
        if call == 1 {
            pods.push(pending("chi-orders-0-3-0", "u3"));
        }
    });
    let mut props = fanout_props();
    props["waitForPod"] = json!({ "timeoutMs": 10_000 });
    let clock = FakeClock::default();
    let err = run_apply(props, None, &cluster, &clock).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PodsNotReady);
    assert!(
        err.message.contains("chi-orders-0-3-0 (Pending)"),
        "{}",
        err.message
    );
    assert!(clock.elapsed() >= Duration::from_millis(10_000));
    assert!(
        clock.elapsed() < Duration::from_millis(11_000),
        "one budget, not one per pass: {:?}",
        clock.elapsed()
    );
}

#[test]
fn pending_then_ready_is_waited_for_and_nothing_runs_before_all_are_ready() {
    let cluster = FakeCluster::new(vec![
        pod("chi-orders-0-0-0", "u0"),
        pending("chi-orders-0-1-0", "u1"),
    ])
    .on_list(|call, pods| {
        if call == 2 {
            pods[1].ready = true;
            pods[1].phase = Some("Running".into());
        }
    });
    let clock = FakeClock::default();
    let (state, _) = run_apply(fanout_props(), None, &cluster, &clock).unwrap();
    assert_eq!(state.pod_names.len(), 2);
    assert_eq!(cluster.execs().len(), 4);
    assert_eq!(
        clock.sleeps.lock().unwrap().len(),
        2,
        "two polls while 0-1-0 was Pending"
    );
}

#[test]
fn pods_not_ready_in_time_fail_naming_them_and_their_phases() {
    let mut not_ready = pod("chi-orders-0-2-0", "u2");
    not_ready.ready = false;
    let cluster = FakeCluster::new(vec![
        pod("chi-orders-0-0-0", "u0"),
        pending("chi-orders-0-1-0", "u1"),
        not_ready,
    ]);
    let err = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PodsNotReady);
    assert!(
        err.message.contains(
            "2 pod(s) were not Ready: chi-orders-0-1-0 (Pending), chi-orders-0-2-0 (Running, not Ready)"
        ),
        "{}",
        err.message
    );
    assert_eq!(
        cluster.exec_attempts(),
        0,
        "all or nothing: no statement ran on the Ready pod"
    );
}

#[test]
fn a_pod_without_the_container_fails_at_once() {
    let mut sidecar_only = pod("chi-orders-0-1-0", "u1");
    sidecar_only.containers = vec!["metrics".into()];
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0"), sidecar_only]);
    let clock = FakeClock::default();
    let err = run_apply(fanout_props(), None, &cluster, &clock).unwrap_err();
    assert_eq!(err.kind, ErrorKind::ContainerMissing);
    assert_eq!(err.pod.as_deref(), Some("chi-orders-0-1-0"));
    assert!(
        err.message
            .contains("pod chi-orders-0-1-0 has no container 'clickhouse' (its containers: metrics)")
    );
    assert_eq!(cluster.exec_attempts(), 0);
    assert_eq!(
        clock.elapsed(),
        Duration::ZERO,
        "no waiting for something waiting cannot fix"
    );
}

#[test]
fn terminating_and_finished_pods_are_not_part_of_the_set() {
    let mut leaving = pod("chi-orders-0-1-0", "u1");
    leaving.terminating = true;
    leaving.ready = false;
    let mut done = pod("chi-orders-0-2-0", "u2");
    done.phase = Some("Succeeded".into());
    done.ready = false;
    let mut failed = pod("chi-orders-0-3-0", "u3");
    failed.phase = Some("Failed".into());
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0"), leaving, done, failed]);
    let (state, _) = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap();
    assert_eq!(state.pod_names, vec!["chi-orders-0-0-0"]);
    assert!(cluster.execs().iter().all(|c| c.pod == "chi-orders-0-0-0"));
}

#[test]
fn an_sql_error_names_index_pod_code_and_is_never_retried() {
    let statement_with_secret =
        "CREATE TABLE s3t (x String) ENGINE = S3('https://b.example/x', 'AKIAEXAMPLE123', 'wJalrSecret99')";
    let cluster = FakeCluster::new(three_pods()).on_exec(move |req, _| {
        (req.pod == "chi-orders-0-1-0" && req.stdin.starts_with("CREATE TABLE s3t")).then(|| {
            Ok(ExecOutput {
                stdout: String::new(),
                stderr: "Code: 62. DB::Exception: Syntax error: failed at position 40: 'AKIAEXAMPLE123', 'wJalrSecret99')\n"
                    .into(),
                exit_code: 62,
            })
        })
    });
    let mut props = per_statement(fanout_props());
    props["statements"]
        .as_array_mut()
        .unwrap()
        .push(json!(statement_with_secret));
    let err = run_apply(props, None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::StatementFailed);
    assert_eq!(err.statement_index, Some(2));
    assert_eq!(err.pod.as_deref(), Some("chi-orders-0-1-0"));
    assert_eq!(err.clickhouse_code, Some(62));
    assert_eq!(err.exit_code, Some(62));
    assert!(
        err.message.starts_with("ClickHouseSchema 'orders-schema': statement 2 failed on pod chi-orders-0-1-0\nwith ClickHouse code 62"),
        "{}",
        err.message
    );
    for secret in ["AKIAEXAMPLE123", "wJalrSecret99"] {
        assert!(!err.message.contains(secret), "{}", err.message);
    }
    let runs_of_failing = cluster
        .execs()
        .iter()
        .filter(|c| c.pod == "chi-orders-0-1-0" && c.stdin == statement_with_secret)
        .count();
    assert_eq!(runs_of_failing, 1, "an SQL error is not retried");
    assert_eq!(
        cluster.exec_attempts(),
        cluster.execs().len(),
        "no attempt failed in transport"
    );
}

/// The `--query_id` a statement's command line names.
fn query_id_of(command: &[String]) -> String {
    let line = command.join(" ");
    let at = line
        .find("--query_id='")
        .expect("a statement runs under a query id")
        + "--query_id='".len();
    line[at..].split('\'').next().unwrap().to_owned()
}

const KILL: &str = "KILL QUERY";

/// Whether an exec is the stop of abandoned execs (its script counts, KILLs, counts again).
fn is_stop(stdin: &str) -> bool {
    stdin.contains("KILL QUERY WHERE")
}

#[test]
fn a_transport_failure_is_retried_with_backoff_once_the_dropped_attempt_is_stopped() {
    let mut failures = 2;
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(move |req, _| {
        (failures > 0 && !is_stop(&req.stdin)).then(|| {
            failures -= 1;
            Err(TransportError::new(
                TransportErrorKind::Transient,
                "websocket closed mid-exec",
            ))
        })
    });
    let clock = FakeClock::default();
    let (state, _) = run_apply(per_statement(fanout_props()), None, &cluster, &clock).unwrap();
    assert_eq!(state.pod_names.len(), 1);
    assert_eq!(
        cluster.exec_attempts(),
        8,
        "2 failed + a stop after each (two looks: the attempt had just been sent) + 2 statements"
    );
    let execs = cluster.execs();
    let stdins: Vec<&str> = execs
        .iter()
        .map(|c| {
            if is_stop(&c.stdin) {
                KILL
            } else {
                &c.stdin[..c.stdin.len().min(10)]
            }
        })
        .collect();
    assert_eq!(stdins, [KILL, KILL, KILL, KILL, "CREATE DAT", "CREATE TAB"]);
    // Each stop names the query id the retry then runs under, so nothing of the
    // dropped attempt runs beside it.
    let id = query_id_of(&execs[4].command);
    assert!(
        execs[0].stdin.contains(&format!(
            "KILL QUERY WHERE query_id IN ('{id}') SYNC FORMAT Null;"
        )),
        "{}",
        execs[0].stdin
    );
    assert!(execs[1..4].iter().all(|e| e.stdin == execs[0].stdin));
    // Each stop looks again once 5 s have passed since the attempt was sent (its client may not
    // have registered its query at the first look); then the backoff.
    assert_eq!(
        *clock.sleeps.lock().unwrap(),
        vec![
            Duration::from_secs(5),
            Duration::from_millis(1000),
            Duration::from_secs(5),
            Duration::from_millis(2000)
        ]
    );
}

#[test]
fn an_exec_the_api_server_refused_with_a_status_is_retried_without_a_stop() {
    // A 500 on the exec's upgrade: nothing started in the pod, so there is nothing to stop.
    let mut failures = 1;
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(move |_, _| {
        (failures > 0).then(|| {
            failures -= 1;
            Err(
                TransportError::new(TransportErrorKind::Transient, "500 Internal Server Error")
                    .with_http_status(500),
            )
        })
    });
    run_apply(
        per_statement(fanout_props()),
        None,
        &cluster,
        &FakeClock::default(),
    )
    .unwrap();
    assert_eq!(cluster.exec_attempts(), 3);
    assert!(cluster.execs().iter().all(|c| !is_stop(&c.stdin)));
}

#[test]
fn a_dropped_attempt_that_still_runs_is_not_retried_beside_itself() {
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(|req, _| {
        Some(if is_stop(&req.stdin) {
            // The server still lists it: KILL QUERY cannot stop DDL waiting on a lock.
            Ok(ExecOutput {
                stdout: "clickhouse-schema-still-running\t1\n".into(),
                ..ExecOutput::default()
            })
        } else {
            Err(TransportError::new(
                TransportErrorKind::Transient,
                "websocket closed mid-exec",
            ))
        })
    });
    let clock = FakeClock::default();
    let err = run_apply(per_statement(fanout_props()), None, &cluster, &clock).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Transport);
    assert_eq!(
        (err.statement_index, err.pod.as_deref()),
        (Some(0), Some("chi-orders-0-0-0"))
    );
    let statements = cluster.exec_attempts() - cluster.execs().len();
    assert_eq!(
        statements, 1,
        "statement 0 was sent once, never again while it may run"
    );
    assert!(
        err.message.contains(
            "It was not retried: that attempt could not be confirmed stopped (1 still in system.processes after \
             KILL QUERY), and a retry would run beside it."
        ),
        "{}",
        err.message
    );
    // The call's end looked once more, and said what it could not confirm.
    assert_eq!(cluster.execs().len(), 2, "two stops");
    assert!(
        err.message
            .contains("Of what its exec may have left running: statement 0 on pod chi-orders-0-0-0")
            && err.message.contains("could not be confirmed stopped"),
        "{}",
        err.message
    );
}

/// One pod whose first statement exec drops mid-way (no status), and whose every later statement
/// exec answers `stderr` with exit `code`; stops get the fake's default answer (nothing running).
fn dropped_then_answered(stderr: &'static str, code: i32) -> FakeCluster {
    let mut attempt = 0;
    FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(move |req, _| {
        if is_stop(&req.stdin) {
            return None;
        }
        attempt += 1;
        Some(match attempt {
            1 => Err(TransportError::new(
                TransportErrorKind::Transient,
                "websocket closed mid-exec",
            )),
            _ => Ok(ExecOutput {
                stdout: String::new(),
                stderr: stderr.into(),
                exit_code: code,
            }),
        })
    })
}

#[test]
fn a_retry_that_fails_with_a_code_whose_exit_status_is_216_is_the_statements_failure() {
    // The client exits with the code modulo 256: 472 (READONLY_SETTING) exits 216 too. Before,
    // such a retry read as "an earlier attempt still runs" and stayed tracked.
    let cluster = dropped_then_answered(
        "Code: 472. DB::Exception: Cannot modify 'max_threads' setting in readonly mode. (READONLY_SETTING)\n",
        216,
    );
    let err = run_apply(
        per_statement(fanout_props()),
        None,
        &cluster,
        &FakeClock::default(),
    )
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::StatementFailed, "{}", err.message);
    assert_eq!(err.clickhouse_code, Some(472), "{}", err.message);
    assert!(
        !err.message.contains("earlier attempt still runs"),
        "{}",
        err.message
    );
}

#[test]
fn a_retry_the_server_refuses_because_the_first_attempt_still_runs_reports_an_unknown_outcome() {
    // The stop looked before the dropped attempt's client had registered its query;
    // the retry then meets it on the server (code 216).
    let cluster = dropped_then_answered(
        "Code: 216. DB::Exception: Query with id = clickhouse-schema-x-0-chi-orders-0-0-0 is already running. \
         (QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING)\n",
        216,
    );
    let err = run_apply(
        per_statement(fanout_props()),
        None,
        &cluster,
        &FakeClock::default(),
    )
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Transport, "{}", err.message);
    assert_eq!(err.statement_index, Some(0));
    assert!(
        err.message
            .contains("attempt 2 was refused because an earlier attempt still runs on the server")
            && err.message.contains("Whether the statement completes is unknown"),
        "{}",
        err.message
    );
    // It is stopped before the call ends, like a cancelled statement.
    let stops = cluster.execs().iter().filter(|c| is_stop(&c.stdin)).count();
    assert_eq!(
        stops, 4,
        "one before the retry, one at the call's end, each looking twice"
    );
    // The stops found nothing of it (the fake's first attempt ended): no note calls that a stop.
    assert!(
        err.message.contains(
            "was not running when the stop looked (not in system.processes, and the pod's processes could not \
             be read)"
        ) && !err.message.contains("was stopped with KILL QUERY"),
        "{}",
        err.message
    );
}

#[test]
fn an_image_without_a_shell_fails_once_naming_the_pod_and_the_shell() {
    // What the kube transport makes of kubelet's status when runc finds no `sh` (transport.rs).
    let status: clickhouse_schema_core::transport::ExecStatus = serde_json::from_str(
        r#"{"status":"Failure","reason":"InternalError","code":500,"message":"Internal error occurred: error executing command in container: failed to exec in container: failed to start exec \"9c1e\": OCI runtime exec failed: exec failed: unable to start container process: exec: \"sh\": executable file not found in $PATH: unknown"}"#,
    )
    .unwrap();
    let missing = status.exit_code().unwrap_err();
    let cluster =
        FakeCluster::new(vec![pod("chi-orders-0-1-0", "u1")]).on_exec(move |_, _| Some(Err(missing.clone())));
    let clock = FakeClock::default();
    let err = run_apply(fanout_props(), None, &cluster, &clock).unwrap_err();
    assert_eq!(err.kind, ErrorKind::ImageUnsupported);
    assert_eq!(err.code(), "E_IMAGE_UNSUPPORTED");
    assert_eq!(err.pod.as_deref(), Some("chi-orders-0-1-0"));
    assert_eq!(err.statement_index, Some(0));
    assert!(
        err.message.starts_with(
            "ClickHouseSchema 'orders-schema': statement 0 could not run on pod chi-orders-0-1-0: the container has \
             no `sh`: its image has none (ClickHouse's `-distroless` images have no shell)"
        ),
        "{}",
        err.message
    );
    assert!(err.message.contains("it was not retried"), "{}", err.message);
    assert_eq!(
        cluster.exec_attempts(),
        1,
        "one attempt: the image is the same the next time"
    );
    assert!(clock.sleeps.lock().unwrap().is_empty(), "no backoff");
}

#[test]
fn on_cluster_refused_in_a_replicated_database_says_so_with_its_index() {
    // The modern server's refusal (InterpreterCreateQuery; not run here: neither engine of the
    // tests can create a Replicated database).
    let cluster = FakeCluster::new(three_pods()).on_exec(|req, _| {
        req.stdin.contains("orders.events").then(|| {
            Ok(clickhouse_schema_core::transport::ExecOutput {
                stdout: String::new(),
                stderr: "Received exception from server (version 25.8.2):\nCode: 80. DB::Exception: Received from \
                         localhost:9000. DB::Exception: ON CLUSTER is not allowed for Replicated database. \
                         (INCORRECT_QUERY)\n"
                    .into(),
                exit_code: 80,
            })
        })
    });
    let err = run_apply(on_cluster_props(), None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::StatementFailed);
    assert_eq!(err.statement_index, Some(1));
    assert_eq!(err.clickhouse_code, Some(80));
    assert!(
        err.message.contains(
            "statement 1's database is a Replicated database: it replicates every DDL to its replicas by \
             itself and refuses ON CLUSTER"
        ),
        "{}",
        err.message
    );
}

/// One pod whose every statement exec passes its deadline; stops get the fake's default answer.
fn timing_out() -> FakeCluster {
    FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(|req, _| {
        (!is_stop(&req.stdin)).then(|| {
            Err(TransportError::new(
                TransportErrorKind::Timeout,
                "exec did not finish within 303000ms",
            ))
        })
    })
}

#[test]
fn a_transport_failure_that_persists_fails_after_max_attempts() {
    let cluster = timing_out();
    let err = run_apply(
        per_statement(fanout_props()),
        None,
        &cluster,
        &FakeClock::default(),
    )
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Transport);
    assert_eq!(err.statement_index, Some(0));
    let stops = cluster.execs().len();
    assert_eq!(cluster.exec_attempts() - stops, 3, "three attempts");
    assert_eq!(
        stops, 6,
        "a stop after each: two before the retries, one at the call's end, each looking twice"
    );
    assert!(err.message.contains("3 attempt(s)"), "{}", err.message);
    // The stops found nothing of it (the fake's first attempt ended): no note calls that a stop.
    assert!(
        err.message.contains(
            "was not running when the stop looked (not in system.processes, and the pod's processes could not \
             be read)"
        ) && !err.message.contains("was stopped with KILL QUERY"),
        "{}",
        err.message
    );
}

#[test]
fn a_refused_exec_is_not_retried_and_says_what_rbac_is_needed() {
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(|_, _| {
        Some(Err(TransportError::new(
            TransportErrorKind::Refused,
            "pods \"chi-orders-0-0-0\" is forbidden: User \"ci\" cannot create resource \"pods/exec\"",
        )
        .with_http_status(403)))
    });
    let err = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::KubernetesApi);
    assert_eq!(cluster.exec_attempts(), 1);
    assert!(err.message.contains("'create' on pods/exec"), "{}", err.message);
}

#[test]
fn list_failures_are_retried_then_reported() {
    let cluster = FakeCluster::new(three_pods()).fail_lists(vec![
        TransportError::new(TransportErrorKind::Transient, "500 Internal Server Error").with_http_status(500),
        TransportError::new(TransportErrorKind::Transient, "429 Too Many Requests").with_http_status(429),
    ]);
    run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap();

    let cluster = FakeCluster::new(three_pods()).fail_lists(vec![
        TransportError::new(TransportErrorKind::Refused, "forbidden").with_http_status(403),
    ]);
    let err = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::KubernetesApi);
    assert!(err.message.contains("'list' on pods"));
}

#[test]
fn nothing_is_recorded_after_a_partial_apply() {
    // The contract: an error and no state. The caller keeps its previous state.
    let state = ok_state(three_pods());
    let mut props = fanout_props();
    props["statements"].as_array_mut().unwrap().push(json!("BROKEN"));
    let cluster = FakeCluster::new(three_pods()).on_exec(|req, _| {
        (req.stdin == "BROKEN").then(|| {
            Ok(ExecOutput {
                stdout: String::new(),
                stderr: "Code: 62. DB::Exception: Syntax error".into(),
                exit_code: 62,
            })
        })
    });
    let result = run_apply(props, Some(&state), &cluster, &FakeClock::default());
    assert!(result.is_err());
    let ran: Vec<String> = cluster
        .execs()
        .into_iter()
        .map(|c| format!("{} {}", c.pod, c.stdin))
        .collect();
    assert_eq!(
        ran,
        vec![
            format!("chi-orders-0-0-0 {S0}"),
            format!("chi-orders-0-0-0 {S1}"),
            "chi-orders-0-0-0 BROKEN".to_owned()
        ],
        "stopped at the first pod's failing statement"
    );
}

#[test]
fn delete_with_retain_never_reaches_the_cluster() {
    let state = ok_state(three_pods());
    let cluster = FakeCluster::new(three_pods());
    let clock = FakeClock::default();
    let cfg = config(fanout_props());
    let c = cluster_a(&cluster, &clock);
    block_on(destroy("orders-schema", &cfg, Some(&state), &c)).unwrap();
    assert_eq!((cluster.lists(), cluster.exec_attempts()), (0, 0));
}

fn run_props() -> serde_json::Value {
    let mut props = fanout_props();
    props["onDelete"] = json!("run");
    props["deleteStatements"] = json!([
        "DROP TABLE IF EXISTS orders.events",
        "DROP DATABASE IF EXISTS orders"
    ]);
    props
}

#[test]
fn delete_with_run_executes_the_delete_statements_on_every_pod() {
    let state = ok_state(three_pods());
    let cluster = FakeCluster::new(three_pods());
    let clock = FakeClock::default();
    let cfg = config(run_props());
    let c = cluster_a(&cluster, &clock);
    block_on(destroy("orders-schema", &cfg, Some(&state), &c)).unwrap();
    assert_eq!(cluster.execs().len(), 6);
    assert_eq!(
        cluster.statements_on("chi-orders-0-2-0", "u2"),
        vec![
            "DROP TABLE IF EXISTS orders.events",
            "DROP DATABASE IF EXISTS orders"
        ]
    );
}

#[test]
fn delete_with_run_refuses_another_cluster_or_nothing_applied_before_any_call() {
    let state = ok_state(three_pods());
    let cluster = FakeCluster::new(three_pods());
    let clock = FakeClock::default();
    let cfg = config(run_props());

    let elsewhere = Cluster {
        transport: &cluster,
        clock: &clock,
        cluster_id: Some("cluster-b".into()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    let err = block_on(destroy("orders-schema", &cfg, Some(&state), &elsewhere)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::ClusterMismatch);
    assert!(
        err.message.contains("'cluster-a'") && err.message.contains("'cluster-b'"),
        "{}",
        err.message
    );

    let here = cluster_a(&cluster, &clock);
    let err = block_on(destroy("orders-schema", &cfg, None, &here)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::NothingApplied);
    assert_eq!((cluster.lists(), cluster.exec_attempts()), (0, 0));
}

#[test]
fn recorded_pods_are_sorted_by_name() {
    let cluster = FakeCluster::new(vec![pod("b", "2"), pod("c", "3"), pod("a", "1")]);
    let (state, _) = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap();
    assert_eq!(state.pod_names, vec!["a", "b", "c"]);
    let pods: Vec<PodRef> = state.pods;
    assert_eq!(
        pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        vec!["a", "b", "c"]
    );
}

#[test]
fn on_cluster_without_a_ready_server_fails_naming_what_it_saw() {
    let mut sidecar = pod("chi-orders-0-0-0", "u0");
    sidecar.containers = vec!["metrics".into()];
    let cluster = FakeCluster::new(vec![sidecar, pending("chi-orders-0-1-0", "u1")]);
    let mut props = on_cluster_props();
    props["waitForPod"] = json!({ "timeoutMs": 3000 });
    let clock = FakeClock::default();
    let err = run_apply(props, None, &cluster, &clock).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PodsNotReady);
    assert!(
        err.message.contains(
            "execution.mode 'onCluster' needs one Ready pod matching clickhouse.altinity.com/chi=orders"
        ),
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains("chi-orders-0-0-0 (no container 'clickhouse'), chi-orders-0-1-0 (Pending)"),
        "{}",
        err.message
    );
    assert_eq!(cluster.exec_attempts(), 0);
    assert!(clock.elapsed() >= Duration::from_millis(3000));
}

#[test]
fn a_set_that_keeps_shrinking_fails_as_unsettled_without_recording() {
    // Every re-list drops one more covered pod: every pod seen is covered, but
    // no two observations agree, so the predicate never holds.
    let names: Vec<String> = (0..40).map(|i| format!("chi-orders-0-{i}-0")).collect();
    let pods = names
        .iter()
        .enumerate()
        .map(|(i, n)| pod(n, &format!("u{i}")))
        .collect();
    let cluster = FakeCluster::new(pods).on_list(|call, pods| {
        if call > 0 && pods.len() > 1 {
            pods.pop();
        }
    });
    let mut props = fanout_props();
    props["waitForPod"] = json!({ "timeoutMs": 5000 });
    let err = run_apply(props, None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PodSetUnstable);
    assert!(
        err.message
            .contains("the set was still changing between observations"),
        "{}",
        err.message
    );
    assert!(err.message.contains("Nothing is recorded"));
}

fn run_plan(
    props: serde_json::Value,
    previous: Option<&SchemaState>,
    cluster: &FakeCluster,
) -> Option<String> {
    let cfg = config(props);
    let clock = FakeClock::default();
    let c = Cluster {
        transport: cluster,
        clock: &clock,
        cluster_id: Some("cluster-a".into()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    block_on(plan("orders-schema", &cfg, previous, &c))
        .unwrap()
        .reason
}

#[test]
fn plan_makes_the_calls_of_the_no_op_check_and_never_runs_a_statement() {
    let state = ok_state(three_pods());

    let cluster = FakeCluster::new(three_pods());
    assert_eq!(run_plan(fanout_props(), Some(&state), &cluster), None);
    assert_eq!(
        (cluster.lists(), cluster.exec_attempts()),
        (1, 0),
        "fanout: one list"
    );

    let mut four = three_pods();
    four.push(pod("chi-orders-0-3-0", "u3"));
    four[1] = pod("chi-orders-0-1-0", "u1-new");
    four.remove(2);
    let cluster = FakeCluster::new(four);
    assert_eq!(
        run_plan(fanout_props(), Some(&state), &cluster).as_deref(),
        Some(
            "the pod set changed (added: chi-orders-0-3-0; replaced: chi-orders-0-1-0; removed: chi-orders-0-2-0)"
        )
    );
    assert_eq!(cluster.exec_attempts(), 0);

    let mut changed = fanout_props();
    changed["statements"]
        .as_array_mut()
        .unwrap()
        .push(json!("SELECT 1"));
    let cluster = FakeCluster::new(three_pods());
    assert!(
        run_plan(changed, Some(&state), &cluster)
            .unwrap()
            .contains("statements")
    );
    assert_eq!(
        (cluster.lists(), cluster.exec_attempts()),
        (0, 0),
        "a changed fingerprint needs no list"
    );

    let cluster = FakeCluster::new(three_pods());
    assert_eq!(
        run_plan(fanout_props(), None, &cluster).as_deref(),
        Some("nothing has been applied yet")
    );
}

#[test]
fn plan_says_which_pods_and_statements_an_apply_would_run_and_why() {
    use clickhouse_schema_core::lifecycle::{PlanWhy, PlannedPod, PlannedStatement, PodWhy};
    let state = ok_state(three_pods());
    let mut moved = three_pods();
    moved.push(pod("chi-orders-0-3-0", "u3"));
    moved[1] = pod("chi-orders-0-1-0", "u1-new");
    let cluster = FakeCluster::new(moved);
    let clock = FakeClock::default();
    let c = Cluster {
        transport: &cluster,
        clock: &clock,
        cluster_id: Some("cluster-a".into()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    let mut props = fanout_props();
    props["statements"]
        .as_array_mut()
        .unwrap()
        .push(json!("ALTER TABLE orders.events ADD COLUMN x UInt8"));
    let outcome = block_on(plan("orders-schema", &config(fanout_props()), Some(&state), &c)).unwrap();
    assert_eq!(outcome.why, Some(PlanWhy::PodSetChanged));
    assert!(!outcome.every_pod);
    assert_eq!(
        outcome.pods,
        [
            PlannedPod {
                pod: "chi-orders-0-1-0".into(),
                why: PodWhy::ReplacedPod
            },
            PlannedPod {
                pod: "chi-orders-0-3-0".into(),
                why: PodWhy::NewPod
            },
        ]
    );
    assert_eq!(
        outcome.statements,
        [
            PlannedStatement {
                index: 0,
                verb: "CREATE DATABASE IF NOT EXISTS".into(),
                object: Some("orders".into())
            },
            PlannedStatement {
                index: 1,
                verb: "CREATE TABLE IF NOT EXISTS".into(),
                object: Some("orders.events".into())
            },
        ]
    );

    let changed = block_on(plan("orders-schema", &config(props), Some(&state), &c)).unwrap();
    assert_eq!(
        (changed.why, changed.every_pod, changed.pods.len()),
        (Some(PlanWhy::StatementsChanged), true, 0)
    );
    assert_eq!(
        changed.statements[2],
        PlannedStatement {
            index: 2,
            verb: "ALTER".into(),
            object: None
        }
    );

    let unchanged = block_on(plan(
        "orders-schema",
        &config(fanout_props()),
        Some(&ok_state(three_pods())),
        &Cluster {
            transport: &FakeCluster::new(three_pods()),
            ..c
        },
    ))
    .unwrap();
    assert_eq!((unchanged.changed, unchanged.statements.len()), (false, 0));
}

#[test]
fn plan_under_on_cluster_makes_no_call() {
    let cluster = FakeCluster::new(three_pods());
    let (state, _) = run_apply(on_cluster_props(), None, &cluster, &FakeClock::default()).unwrap();
    let cluster = FakeCluster::new(three_pods());
    assert_eq!(run_plan(on_cluster_props(), Some(&state), &cluster), None);
    assert_eq!((cluster.lists(), cluster.exec_attempts()), (0, 0));
}

// --- failure bounds (security review, issue 8) -----------------------------

#[test]
fn on_cluster_with_a_ready_pod_whose_exec_answers_404_stops_at_the_budget() {
    // The pod stays listed Ready, but every exec is answered 404: the loop
    // must spend waitForPod once, pausing between lists, then fail.
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(|req, _| {
        Some(Err(TransportError::new(
            TransportErrorKind::Refused,
            format!("pods \"{}\" not found", req.pod),
        )
        .with_http_status(404)))
    });
    let mut props = on_cluster_props();
    props["waitForPod"] = json!({ "timeoutMs": 2000 });
    let clock = FakeClock::default();
    let err = run_apply(props, None, &cluster, &clock).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PodsNotReady);
    assert!(
        err.message
            .contains("pod chi-orders-0-0-0 was listed Ready, but the API server answered 404"),
        "{}",
        err.message
    );
    assert!(clock.elapsed() >= Duration::from_millis(2000));
    // One list a second (the poll interval), not one per exec round trip.
    assert!(cluster.lists() <= 3, "{} lists", cluster.lists());
    assert!(cluster.exec_attempts() <= 3, "{} execs", cluster.exec_attempts());
}

#[test]
fn fanout_paces_its_re_lists_when_a_listed_pod_answers_404() {
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(|req, _| {
        Some(Err(TransportError::new(
            TransportErrorKind::Refused,
            format!("pods \"{}\" not found", req.pod),
        )
        .with_http_status(404)))
    });
    let clock = FakeClock::default();
    let err = run_apply(fanout_props(), None, &cluster, &clock).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PodSetUnstable);
    assert!(!clock.sleeps.lock().unwrap().is_empty(), "re-lists are paced");
}

#[test]
fn a_statement_re_sent_after_an_unknown_outcome_says_so_when_it_fails() {
    // Attempt 1 times out (it may have created the table), attempt 2 then
    // finds the table: the error must not pretend the first never ran.
    let mut attempt = 0;
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(move |req, _| {
        if is_stop(&req.stdin) {
            return None;
        }
        attempt += 1;
        Some(match attempt {
            1 => Err(TransportError::new(
                TransportErrorKind::Timeout,
                "the exec did not finish within 303s",
            )),
            _ => Ok(ExecOutput {
                stdout: String::new(),
                stderr: "Code: 57. DB::Exception: Received from localhost:9000. DB::Exception: Database \
                         orders already exists.."
                    .into(),
                exit_code: 57,
            }),
        })
    });
    let err = run_apply(
        per_statement(fanout_props()),
        None,
        &cluster,
        &FakeClock::default(),
    )
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::StatementFailed);
    assert_eq!(err.clickhouse_code, Some(57));
    assert!(
        err.message.contains("attempt 2 of statement 0")
            && err
                .message
                .contains("an earlier attempt may have run the statement"),
        "{}",
        err.message
    );
}

#[test]
fn a_stopped_on_cluster_statement_says_its_queued_task_may_still_run_on_the_hosts() {
    // Every attempt times out: the statement stays tracked and is stopped at the call's end. On
    // its pod that stops the initiator only; the DDL workers run the task under ids of their own.
    let cluster = timing_out();
    let err = run_apply(
        per_statement(on_cluster_props()),
        None,
        &cluster,
        &FakeClock::default(),
    )
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Transport, "{}", err.message);
    assert!(
        err.message.contains(
            "was not running when the stop looked (not in system.processes, and the pod's processes could not \
             be read), but the distributed DDL task it queued may still run on the cluster's hosts"
        ),
        "{}",
        err.message
    );
    // A fanout statement's note says nothing of the kind.
    let fanout = timing_out();
    let err = run_apply(
        per_statement(fanout_props()),
        None,
        &fanout,
        &FakeClock::default(),
    )
    .unwrap_err();
    assert!(!err.message.contains("distributed DDL task"), "{}", err.message);
}

#[test]
fn a_statement_stopped_by_the_pods_timeout_is_reported_as_unknown_and_not_retried() {
    // GNU `timeout` exits 124 (KILL after the grace: 137); BusyBox's execs the client and TERMs
    // it, so the shell sees 143. Before, 143 read as a plain failure and nothing was stopped.
    for code in [124, 137, 143] {
        let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(move |req, _| {
            (!is_stop(&req.stdin)).then(|| {
                Ok(ExecOutput {
                    stdout: String::new(),
                    stderr: String::new(),
                    exit_code: code,
                })
            })
        });
        let err = run_apply(
            per_statement(fanout_props()),
            None,
            &cluster,
            &FakeClock::default(),
        )
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::StatementFailed);
        assert_eq!(err.exit_code, Some(code));
        // `timeout` ended the client, not necessarily the server's query: it is stopped
        // before the call ends.
        let execs = cluster.execs();
        assert_eq!(
            execs.len(),
            3,
            "exit {code}: the statement, then its stop, looking twice (the fake answers at once)"
        );
        assert!(execs[1].stdin.contains(&format!(
            "KILL QUERY WHERE query_id IN ('{}')",
            query_id_of(&execs[0].command)
        )));
        assert!(
            err.message
                .contains("was stopped in the pod after statementTimeoutMs (300000ms)")
                && err.message.contains("Its outcome is unknown"),
            "exit {code}: {}",
            err.message
        );
    }
}

#[test]
fn a_timeout_that_persists_says_the_outcome_is_unknown() {
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(|_, _| {
        Some(Err(TransportError::new(
            TransportErrorKind::Timeout,
            "the exec did not finish within 303s",
        )))
    });
    let err = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Transport);
    assert!(err.message.contains("Its outcome is unknown"), "{}", err.message);
}

#[test]
fn the_statement_is_bounded_in_the_pod_and_on_the_server_and_the_caller_waits_longer() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(move |req, _| {
        record.lock().unwrap().push((req.timeout, req.command[2].clone()));
        None
    });
    let mut props = per_statement(fanout_props());
    props["statementTimeoutMs"] = json!(1500);
    run_apply(props, None, &cluster, &FakeClock::default()).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    for (timeout, script) in seen.iter() {
        // Server bound 2 s, pod TERM at 5 s, KILL at 7 s, caller gives up at 8 s.
        assert_eq!(*timeout, Duration::from_secs(8));
        assert!(script.contains("t='timeout -k 2 5'"), "{script}");
        assert!(script.contains("--max_execution_time=2 "), "{script}");
    }
}

#[test]
fn an_unusable_transport_result_is_not_retried() {
    let cluster = FakeCluster::new(vec![pod("chi-orders-0-0-0", "u0")]).on_exec(|_, _| {
        Some(Err(TransportError::new(
            TransportErrorKind::InvalidResponse,
            "the injected executor's exec resolved with exitCode NaN",
        )))
    });
    let err = run_apply(fanout_props(), None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Transport);
    assert_eq!(cluster.exec_attempts(), 1);
    assert!(err.message.contains("not retried"), "{}", err.message);
}

#[test]
fn destroy_refuses_a_state_that_is_malformed_or_names_another_target_before_any_call() {
    let good = ok_state(three_pods());
    let cluster = FakeCluster::new(three_pods());
    let clock = FakeClock::default();
    let cfg = config(run_props());
    let here = cluster_a(&cluster, &clock);

    let mut everything = good.clone();
    everything.target.pod_selector.clear();
    let err = block_on(destroy("orders-schema", &cfg, Some(&everything), &here)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidState);
    assert_eq!(err.code(), "E_INVALID_STATE");
    assert!(
        err.issues.iter().any(|i| i.path == "state.target.podSelector"),
        "{:?}",
        err.issues
    );

    let mut elsewhere = good.clone();
    elsewhere.target.namespace = "kube-system".into();
    let err = block_on(destroy("orders-schema", &cfg, Some(&elsewhere), &here)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidState);
    assert!(
        err.message
            .contains("is 'kube-system', but the props' target.namespace is 'example-observability'"),
        "{}",
        err.message
    );

    let mut other_selector = good;
    other_selector
        .target
        .pod_selector
        .insert("app".into(), "other".into());
    let err = block_on(destroy("orders-schema", &cfg, Some(&other_selector), &here)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidState);
    assert_eq!((cluster.lists(), cluster.exec_attempts()), (0, 0));
}

#[test]
fn a_cancelled_apply_stops_before_the_next_statement_and_records_nothing() {
    let flag = Flag::default();
    let set = flag.0.clone();
    let cluster = FakeCluster::new(three_pods()).on_exec(move |_, _| {
        // The caller aborts while the first statement runs.
        set.store(true, std::sync::atomic::Ordering::SeqCst);
        None
    });
    let clock = FakeClock::default();
    let cfg = config(per_statement(fanout_props()));
    let c = Cluster {
        transport: &cluster,
        clock: &clock,
        cluster_id: Some("cluster-a".into()),
        cancel: &flag,
        events: &NoEvents,
    };
    let err = block_on(apply("orders-schema", &cfg, None, &c)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Cancelled);
    assert_eq!(err.code(), "E_CANCELLED");
    assert!(
        err.message
            .contains("cancelled before statement 1 was sent to pod chi-orders-0-0-0")
            && err.message.contains("Nothing is recorded"),
        "{}",
        err.message
    );
    // Like any error that stops at a statement, it says which one and where.
    assert_eq!(err.statement_index, Some(1));
    assert_eq!(err.pod.as_deref(), Some("chi-orders-0-0-0"));
    assert_eq!(cluster.exec_attempts(), 1, "nothing after the abort");
}

#[test]
fn a_cancellation_ends_a_wait_for_pods_at_once() {
    let flag = Flag::default();
    flag.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let cluster = FakeCluster::new(vec![pending("chi-orders-0-0-0", "u0")]);
    let clock = FakeClock::default();
    let cfg = config(fanout_props());
    let c = Cluster {
        transport: &cluster,
        clock: &clock,
        cluster_id: None,
        cancel: &flag,
        events: &NoEvents,
    };
    let err = block_on(apply("orders-schema", &cfg, None, &c)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Cancelled);
    assert_eq!(clock.elapsed(), Duration::ZERO, "no waiting after the abort");
    assert_eq!((cluster.lists(), cluster.exec_attempts()), (0, 0));
}

/// The per-host status table of an ON CLUSTER statement as a server under
/// `distributed_ddl_output_mode` 'never_throw' prints it (TabSeparated, exit 0).
fn status_table_exec(rows: &'static str) -> FakeCluster {
    FakeCluster::new(three_pods()).on_exec(move |request, _| {
        request.stdin.contains("orders.events").then(|| {
            Ok(clickhouse_schema_core::transport::ExecOutput {
                stdout: rows.to_owned(),
                stderr: String::new(),
                exit_code: 0,
            })
        })
    })
}

#[test]
fn a_host_failure_in_an_on_cluster_status_table_fails_the_apply_though_it_exited_0() {
    let mut props = on_cluster_props();
    props["statements"][1] = json!(
        "CREATE TABLE IF NOT EXISTS orders.events ON CLUSTER 'orders' (s String DEFAULT 'hunter2-secret') ENGINE = Memory"
    );
    let cluster = status_table_exec(
        "chi-orders-0-0\t9000\t0\t\t1\t2\n\
         chi-orders-0-1\t9000\t62\tCode: 62. DB::Exception: Syntax error: failed at position 1 (\\'hunter2-secret\\'). (SYNTAX_ERROR)\t0\t2\n",
    );
    let err = run_apply(props, None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::StatementFailed);
    assert_eq!(err.statement_index, Some(1));
    assert_eq!(err.clickhouse_code, Some(62));
    assert!(
        err.message
            .contains("statement 1, run from pod chi-orders-0-0-0, exited 0 but its distributed DDL status table says it failed on chi-orders-0-1:9000 (code 62: Code: 62."),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("'throw_only_active' (recommended)"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("hunter2"), "{}", err.message);
}

#[test]
fn a_host_unfinished_at_the_timeout_fails_the_apply_as_unknown() {
    let cluster =
        status_table_exec("chi-orders-0-0\t9000\t0\t\\N\t1\t1\nchi-orders-0-1\t9000\t\\N\t\\N\t1\t1\n");
    let err = run_apply(on_cluster_props(), None, &cluster, &FakeClock::default()).unwrap_err();
    assert_eq!(err.kind, ErrorKind::StatementFailed);
    assert!(
        err.message.contains(
            "chi-orders-0-1:9000 had not finished it when the wait ran out (distributed_ddl_task_timeout): their outcome is unknown"
        ),
        "{}",
        err.message
    );
}

#[test]
fn an_all_zero_status_table_is_success() {
    let cluster = status_table_exec("chi-orders-0-0\t9000\t0\t\t1\t2\nchi-orders-0-1\t9000\t0\t\t0\t2\n");
    assert!(run_apply(on_cluster_props(), None, &cluster, &FakeClock::default()).is_ok());
}

#[test]
fn under_throw_only_active_in_settings_a_host_that_is_down_is_no_failure() {
    let mut props = on_cluster_props();
    props["settings"] = json!({ "distributed_ddl_output_mode": "throw_only_active" });
    let cluster =
        status_table_exec("chi-orders-0-0\t9000\t0\t\\N\t1\t1\nchi-orders-0-1\t9000\t\\N\t\\N\t1\t1\n");
    assert!(run_apply(props, None, &cluster, &FakeClock::default()).is_ok());
}
