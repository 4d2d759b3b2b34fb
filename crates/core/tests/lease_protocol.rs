//! The lease protocol on an in-memory Lease API with the API server's
//! optimistic concurrency (see `reconcile_support::FakeLease`): when it is
//! taken, waited for, taken over, retried and released, and what each
//! failure says. Against the sandbox's real Lease API: tests/coordination.test.mjs.

mod reconcile_support;

use std::sync::Mutex;

use clickhouse_schema_core::ErrorKind;
use clickhouse_schema_core::coordination::lease::lease_name;
use clickhouse_schema_core::lifecycle::{apply, destroy};
use clickhouse_schema_core::state::SchemaState;
use clickhouse_schema_core::transport::Cluster;
use clickhouse_schema_core::transport::{
    Event, Events, LeaseRecord, NeverCancelled, NoEvents, TransportError, TransportErrorKind,
};
use reconcile_support::{FakeClock, FakeCluster, Flag, block_on, config, pod};
use serde_json::json;

const S0: &str = "CREATE DATABASE IF NOT EXISTS orders";

fn props(lease: serde_json::Value) -> serde_json::Value {
    json!({
        "target": { "namespace": "ns", "podSelector": { "app": "ch" } },
        "statements": [S0],
        "verify": "off",
        "lease": lease,
        "waitForPod": { "timeoutMs": 30_000 },
        "retry": { "maxAttempts": 3, "backoffMs": 10 },
    })
}

#[derive(Default)]
struct Recorded(Mutex<Vec<Event>>);

impl Events for Recorded {
    fn emit(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

fn run(
    cluster: &FakeCluster,
    clock: &FakeClock,
    lease: serde_json::Value,
    previous: Option<&SchemaState>,
    events: &dyn Events,
) -> Result<SchemaState, clickhouse_schema_core::ClickHouseSchemaError> {
    let c = Cluster {
        transport: cluster,
        clock,
        cluster_id: None,
        cancel: &NeverCancelled,
        events,
    };
    block_on(apply("orders-schema", &config(props(lease)), previous, &c)).map(|(state, _)| state)
}

fn held_by(holder: &str, renewed: &str) -> LeaseRecord {
    held_for(holder, renewed, 60)
}

fn held_for(holder: &str, renewed: &str, duration: u32) -> LeaseRecord {
    LeaseRecord {
        resource_version: "41".into(),
        holder: Some(holder.into()),
        duration_seconds: Some(duration),
        acquire_time: Some(renewed.into()),
        renew_time: Some(renewed.into()),
        transitions: Some(2),
    }
}

fn calls(cluster: &FakeCluster) -> Vec<String> {
    cluster.world.lock().unwrap().lease.calls.clone()
}

fn record(cluster: &FakeCluster) -> Option<LeaseRecord> {
    cluster.world.lock().unwrap().lease.record.clone()
}

#[test]
fn a_free_lease_is_created_held_for_the_run_and_released() {
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    let clock = FakeClock::default();
    let events = Recorded::default();
    let state = run(&cluster, &clock, json!(true), None, &events).expect("applies");
    assert_eq!(cluster.execs().len(), 1);
    // get, create; at the end get and a replace that clears the holder.
    assert_eq!(calls(&cluster), ["get", "create", "get", "replace:-"]);
    let released = record(&cluster).expect("kept");
    assert_eq!(released.holder, None);
    assert_eq!(released.duration_seconds, Some(60));
    let taken = events.0.lock().unwrap().iter().any(|e| {
        matches!(e, Event::LeaseTaken { lease, waited_ms: 0, .. } if *lease == lease_name("orders-schema"))
    });
    assert!(taken, "a leaseTaken event");

    // Unchanged: no lease call at all.
    let before = calls(&cluster).len();
    run(&cluster, &clock, json!(true), Some(&state), &NoEvents).expect("no-op");
    assert_eq!(calls(&cluster).len(), before);
    assert_eq!(cluster.execs().len(), 1);
}

#[test]
fn a_lease_held_and_renewed_elsewhere_is_waited_for_then_refused_naming_the_holder() {
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    // Renewed far in the future by the holder's clock, and a 600 s duration: the 30 s budget
    // ends before either clock could call it stale.
    cluster.world.lock().unwrap().lease.record =
        Some(held_by("ci-runner/77/abc", "2099-01-01T00:00:00.000000Z"));
    let clock = FakeClock::default();
    let events = Recorded::default();
    let err = run(&cluster, &clock, json!({ "ttlSeconds": 600 }), None, &events).expect_err("held");
    assert_eq!(err.kind, ErrorKind::LeaseHeld);
    assert!(
        err.message.contains("held by ci-runner/77/abc"),
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains("last renewed at 2099-01-01T00:00:00Z by its holder's clock"),
        "{}",
        err.message
    );
    assert!(cluster.execs().is_empty(), "nothing ran");
    assert!(
        !calls(&cluster)
            .iter()
            .any(|c| c.starts_with("replace") || c == "create")
    );
    let waits = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Event::LeaseWaiting { holder, .. } if holder == "ci-runner/77/abc"))
        .count();
    assert!(
        waits >= 25,
        "about one wait event per second of the 30 s budget, got {waits}"
    );
}

#[test]
fn an_expired_lease_is_taken_over_and_counts_a_transition() {
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    // Renewed years ago by its holder's clock: still watched for its duration first.
    cluster.world.lock().unwrap().lease.record =
        Some(held_for("crashed/1/x", "2020-01-01T00:00:00.000000Z", 10));
    let clock = FakeClock::default();
    let events = Recorded::default();
    run(&cluster, &clock, json!(true), None, &events).expect("taken over");
    assert_waited_one_duration(&events);
    assert_eq!(cluster.execs().len(), 1);
    // A get a second while it watches, then the takeover.
    let calls = calls(&cluster);
    let takeover = calls.iter().position(|c| c != "get").expect("a write");
    assert!(takeover >= 10, "{calls:?}");
    assert!(calls[takeover].starts_with("replace:test-host/1/"), "{calls:?}");
    assert_eq!(record(&cluster).unwrap().transitions, Some(3));
}

#[test]
fn a_holder_that_stops_renewing_is_taken_over_after_its_duration_whatever_its_clock_says() {
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    // Its renewTime is in the future (a clock ahead), but it never changes.
    cluster.world.lock().unwrap().lease.record =
        Some(held_for("frozen/9/y", "2099-01-01T00:00:00.000000Z", 10));
    let clock = FakeClock::default();
    let events = Recorded::default();
    run(&cluster, &clock, json!(true), None, &events).expect("taken over");
    assert_eq!(cluster.execs().len(), 1);
    assert_waited_one_duration(&events);
}

/// The lease was taken after watching it unchanged for its 10 s (and a poll at most).
fn assert_waited_one_duration(events: &Recorded) {
    let waited = events.0.lock().unwrap().iter().find_map(|e| match e {
        Event::LeaseTaken { waited_ms, .. } => Some(*waited_ms),
        _ => None,
    });
    let waited = waited.expect("a leaseTaken event");
    assert!(
        (10_000..=11_000).contains(&waited),
        "waited one duration, {waited} ms"
    );
}

#[test]
fn conflicts_and_server_errors_are_retried() {
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    let server_error =
        || TransportError::new(TransportErrorKind::Transient, "etcd leader changed").with_http_status(500);
    {
        let mut world = cluster.world.lock().unwrap();
        // The first get fails with 500; the first create finds the lease created by
        // another deploy in between (409).
        world.lease.failures = vec![
            Some(server_error()),
            None,
            Some(
                TransportError::new(TransportErrorKind::Refused, "the object has been modified")
                    .with_http_status(409),
            ),
        ];
    }
    let clock = FakeClock::default();
    run(&cluster, &clock, json!(true), None, &NoEvents).expect("applies");
    assert_eq!(cluster.execs().len(), 1);
    // get (500), get, create (409), get, create, then the release.
    assert_eq!(calls(&cluster)[..5], ["get", "get", "create", "get", "create"]);
}

#[test]
fn writes_that_always_conflict_end_within_the_budget() {
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    let conflict = || {
        Some(
            TransportError::new(TransportErrorKind::Refused, "the object has been modified")
                .with_http_status(409),
        )
    };
    // Every get answers (none), every create conflicts, for longer than the 30 s budget.
    cluster.world.lock().unwrap().lease.failures = (0..1000).flat_map(|_| [None, conflict()]).collect();
    let clock = FakeClock::default();
    let err = run(&cluster, &clock, json!(true), None, &NoEvents).expect_err("contended");
    assert_eq!(err.kind, ErrorKind::LeaseHeld);
    assert!(err.message.contains("every write conflicted"), "{}", err.message);
    assert!(cluster.execs().is_empty());
    let waited = clock.elapsed().as_secs();
    assert!((30..=31).contains(&waited), "ended with the budget, {waited} s");
}

#[test]
fn a_refusal_names_the_verbs_to_grant_and_nothing_runs() {
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    cluster.world.lock().unwrap().lease.failures = vec![Some(
        TransportError::new(
            TransportErrorKind::Refused,
            "leases.coordination.k8s.io \"x\" is forbidden: User \"deployer\" cannot get resource \"leases\"",
        )
        .with_http_status(403),
    )];
    let clock = FakeClock::default();
    let err = run(&cluster, &clock, json!(true), None, &NoEvents).expect_err("refused");
    assert_eq!(err.kind, ErrorKind::KubernetesApi);
    assert!(
        err.message.contains("get, create and update on leases"),
        "{}",
        err.message
    );
    assert!(err.message.contains("coordination.k8s.io"), "{}", err.message);
    assert!(err.message.contains("namespace 'ns'"), "{}", err.message);
    assert!(cluster.execs().is_empty());
}

#[test]
fn a_failed_apply_still_releases_the_lease() {
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(|_, _| {
        Some(Ok(clickhouse_schema_core::transport::ExecOutput {
            stdout: String::new(),
            stderr: "Code: 62. DB::Exception: Syntax error".into(),
            exit_code: 62,
        }))
    });
    let clock = FakeClock::default();
    let err = run(&cluster, &clock, json!(true), None, &NoEvents).expect_err("fails");
    assert_eq!(err.kind, ErrorKind::StatementFailed);
    assert_eq!(record(&cluster).unwrap().holder, None, "released");
}

#[test]
fn a_cancelled_apply_releases_the_lease() {
    let flag = Flag::default();
    let set = flag.0.clone();
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]).on_exec(move |_, _| {
        // The caller aborts while the first statement runs, the lease held.
        set.store(true, std::sync::atomic::Ordering::SeqCst);
        None
    });
    let clock = FakeClock::default();
    let mut p = props(json!(true));
    p["statements"] = json!([
        S0,
        "CREATE TABLE IF NOT EXISTS orders.t (x UInt8) ENGINE = Memory"
    ]);
    // Stopped between two statements' execs (a pod's one script would run both).
    p["execMode"] = json!("perStatement");
    let c = Cluster {
        transport: &cluster,
        clock: &clock,
        cluster_id: None,
        cancel: &flag,
        events: &NoEvents,
    };
    let err = block_on(apply("orders-schema", &config(p), None, &c)).expect_err("cancelled");
    assert_eq!(err.kind, ErrorKind::Cancelled);
    assert_eq!(cluster.execs().len(), 1);
    assert_eq!(record(&cluster).unwrap().holder, None, "released");
}

#[test]
fn destroy_takes_the_lease_too() {
    let cluster = FakeCluster::new(vec![pod("chi-0", "u0")]);
    let clock = FakeClock::default();
    let mut p = props(json!(true));
    p["onDelete"] = json!("run");
    p["deleteStatements"] = json!(["DROP DATABASE IF EXISTS orders"]);
    let cfg = config(p);
    let c = Cluster {
        transport: &cluster,
        clock: &clock,
        cluster_id: None,
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    let (state, _) = block_on(apply("orders-schema", &cfg, None, &c)).expect("applies");
    let before = calls(&cluster).len();
    block_on(destroy("orders-schema", &cfg, Some(&state), &c)).expect("destroys");
    let calls = &calls(&cluster)[before..];
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(
        (calls[0].as_str(), calls[2].as_str(), calls[3].as_str()),
        ("get", "get", "replace:-")
    );
    assert!(calls[1].starts_with("replace:test-host/1/"), "{calls:?}");
}
