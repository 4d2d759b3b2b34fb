//! Progress events: what a fanout reports as it happens (through `Cluster.events`,
//! the binding's `options.onEvent`), and that no event carries statement text.

mod reconcile_support;

use std::sync::Mutex;

use clickhouse_schema_core::lifecycle::apply;
use clickhouse_schema_core::transport::Cluster;
use clickhouse_schema_core::transport::{Event, Events, NeverCancelled, TransportError, TransportErrorKind};
use reconcile_support::{FakeClock, FakeCluster, block_on, config, pending, pod};
use serde_json::json;

const S0: &str = "CREATE DATABASE IF NOT EXISTS orders";
const S1: &str =
    "CREATE TABLE IF NOT EXISTS orders.events (id UInt64, secret String DEFAULT 'hunter2') ENGINE = Memory";

#[derive(Default)]
struct Recorded(Mutex<Vec<Event>>);

impl Events for Recorded {
    fn emit(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

fn apply_with(cluster: &FakeCluster, extra: serde_json::Value) -> Vec<Event> {
    let mut props = json!({
        "target": { "namespace": "ns", "podSelector": { "app": "ch" } },
        "statements": [S0, S1],
        "verify": "off",
        "parallelism": 1,
        "retry": { "maxAttempts": 3, "backoffMs": 10 },
        "waitForPod": { "timeoutMs": 10000 },
    });
    for (k, v) in extra.as_object().unwrap() {
        props[k] = v.clone();
    }
    let events = Recorded::default();
    let clock = FakeClock::default();
    let c = Cluster {
        transport: cluster,
        clock: &clock,
        cluster_id: None,
        cancel: &NeverCancelled,
        events: &events,
    };
    block_on(apply("orders-schema", &config(props), None, &c)).expect("applies");
    events.0.into_inner().unwrap()
}

fn messages(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["message"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn a_fanout_reports_its_pass_each_statement_and_the_relist() {
    let cluster = FakeCluster::new(vec![pod("chi-a", "u1"), pod("chi-b", "u2")]);
    let events = apply_with(&cluster, json!({}));
    let shown = messages(&events);
    assert_eq!(
        shown[0],
        "pass 1: 2 statement(s) on 2 of 2 matching pod(s), up to 1 at once"
    );
    // Statements are numbered from 0, as errors number them (`statementIndex`).
    assert_eq!(shown[1], "statement 0 (2 in all) on chi-a (0 of 2 pods done)");
    assert!(
        shown[2].starts_with("statement 0 on chi-a done in "),
        "{}",
        shown[2]
    );
    // Each pod reports itself done, so the count moves as pods finish.
    assert_eq!(shown[5], "chi-a done (1 of 2 pods done)");
    assert_eq!(shown[6], "statement 0 (2 in all) on chi-b (1 of 2 pods done)");
    assert_eq!(shown[10], "chi-b done (2 of 2 pods done)");
    assert_eq!(
        shown[11],
        "pass 1 done: listing the pods again to see whether the set moved"
    );
    assert_eq!(shown.len(), 12, "{shown:#?}");
    let json = serde_json::to_string(&events).unwrap();
    assert!(
        !json.contains("CREATE") && !json.contains("hunter2"),
        "no statement text: {json}"
    );
}

#[test]
fn waiting_retries_and_skipped_pods_are_reported() {
    let mut gone = pod("chi-old", "u0");
    gone.terminating = true;
    let cluster = FakeCluster::new(vec![pending("chi-a", "u1"), gone])
        .on_list(|call, pods| {
            if call == 1 {
                pods[0].ready = true;
            }
        })
        .on_exec({
            let mut failed = false;
            move |_, _| {
                if failed {
                    return None;
                }
                failed = true;
                Some(Err(TransportError::new(
                    TransportErrorKind::Transient,
                    "connection reset by peer 10.0.0.1",
                )))
            }
        });
    // A statement's own exec retried (a pod's script's retry is in `batch_scenarios.rs`).
    let events = apply_with(&cluster, json!({ "execMode": "perStatement" }));
    let shown = messages(&events);
    assert_eq!(
        shown[0],
        "waiting for 1 pod(s) to become Ready (chi-a), 10000 ms of waitForPod left"
    );
    assert_eq!(
        shown[1],
        "pass 1: 2 statement(s) on 1 of 1 matching pod(s), up to 1 at once; left out: chi-old (terminating)"
    );
    assert_eq!(
        shown[3],
        "statement 0 on chi-a: attempt 1 failed in transport; trying again in 10 ms"
    );
    let json = serde_json::to_string(&events).unwrap();
    assert!(!json.contains("10.0.0.1"), "no transport text: {json}");
}
