//! Parallel fanout: pods applied concurrently up to `parallelism`, each pod's
//! statements in order, and after the first failure no new statement
//! anywhere, with an error that does not depend on timing.
//!
//! The executor here yields once per exec (it is pending on its first poll),
//! so the pods' lists really interleave; it records the order execs start in
//! and how many are in flight at once.

mod reconcile_support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use clickhouse_schema_core::lifecycle::apply;
use clickhouse_schema_core::transport::Cluster;
use clickhouse_schema_core::transport::{
    ExecOutput, ExecRequest, Executor, NeverCancelled, NoEvents, PodInfo, PodLister, TransportError,
};
use reconcile_support::{FakeClock, block_on, config, pod};
use serde_json::json;

const STATEMENTS: [&str; 3] = [
    "CREATE DATABASE IF NOT EXISTS orders",
    "CREATE TABLE IF NOT EXISTS orders.a (id UInt64) ENGINE = Memory",
    "CREATE TABLE IF NOT EXISTS orders.b (id UInt64) ENGINE = Memory",
];

struct Interleaved {
    pods: Vec<PodInfo>,
    /// (pod, statement index) pairs that exit 1.
    failing: Vec<(String, usize)>,
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    started: Vec<(String, usize)>,
    in_flight: usize,
    max_in_flight: usize,
}

impl Interleaved {
    fn new(pods: usize, failing: &[(usize, usize)]) -> Self {
        Self {
            pods: (0..pods)
                .map(|i| pod(&format!("chi-0-{i}-0"), &format!("u{i}")))
                .collect(),
            failing: failing
                .iter()
                .map(|(p, s)| (format!("chi-0-{p}-0"), *s))
                .collect(),
            log: Mutex::default(),
        }
    }
}

impl clickhouse_schema_core::transport::LeaseApi for Interleaved {}

impl PodLister for Interleaved {
    fn list_pods(
        &self,
        _namespace: &str,
        _selector: &std::collections::BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<PodInfo>, TransportError>> + Send {
        std::future::ready(Ok(self.pods.clone()))
    }
}

/// Pending once, then done: the exec is "in flight" between the two polls.
struct Exec<'a> {
    owner: &'a Interleaved,
    index: usize,
    pod: String,
    polled: bool,
}

impl Future for Exec<'_> {
    type Output = Result<ExecOutput, TransportError>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !self.polled {
            self.polled = true;
            return Poll::Pending;
        }
        let mut log = self.owner.log.lock().unwrap();
        log.in_flight -= 1;
        let fails = self.owner.failing.contains(&(self.pod.clone(), self.index));
        Poll::Ready(Ok(ExecOutput {
            stdout: String::new(),
            stderr: if fails {
                "Code: 62. DB::Exception: Syntax error".into()
            } else {
                String::new()
            },
            exit_code: i32::from(fails),
        }))
    }
}

impl Executor for Interleaved {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let index = STATEMENTS
            .iter()
            .position(|s| *s == request.stdin)
            .expect("a statement");
        let mut log = self.log.lock().unwrap();
        log.started.push((request.pod.clone(), index));
        log.in_flight += 1;
        log.max_in_flight = log.max_in_flight.max(log.in_flight);
        Exec {
            owner: self,
            index,
            pod: request.pod,
            polled: false,
        }
    }
}

fn run(
    cluster: &Interleaved,
    parallelism: u32,
) -> Result<Vec<String>, clickhouse_schema_core::ClickHouseSchemaError> {
    let cfg = config(json!({
        "target": { "namespace": "ns", "podSelector": { "app": "ch" } },
        "statements": STATEMENTS,
        "parallelism": parallelism,
        // Counts statement execs only.
        "verify": "off",
        // Statement-level interleaving across pods: one exec per statement (a pod's script runs to
        // its end once started; `batch_scenarios.rs` has its pass).
        "execMode": "perStatement",
        "retry": { "maxAttempts": 1 },
    }));
    let clock = FakeClock::default();
    let c = Cluster {
        transport: cluster,
        clock: &clock,
        cluster_id: None,
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    block_on(apply("orders-schema", &cfg, None, &c)).map(|(state, _)| state.pod_names)
}

#[test]
fn pods_run_concurrently_up_to_parallelism_each_in_statement_order() {
    for (pods, parallelism, expected_max) in [(5, 8, 5), (5, 2, 2), (5, 1, 1)] {
        let cluster = Interleaved::new(pods, &[]);
        let names = run(&cluster, parallelism).expect("applies");
        assert_eq!(names.len(), pods);
        let log = cluster.log.lock().unwrap();
        assert_eq!(log.max_in_flight, expected_max, "parallelism {parallelism}");
        for name in &names {
            let order: Vec<usize> = log
                .started
                .iter()
                .filter(|(p, _)| p == name)
                .map(|(_, i)| *i)
                .collect();
            assert_eq!(order, [0, 1, 2], "{name} ran its list in order, once");
        }
    }
}

#[test]
fn after_the_first_failure_no_statement_starts_and_the_lowest_index_is_reported() {
    // Statement 1 fails on pod 1; statement 0 fails on pods 4 and 3 (a tie, broken by name).
    let cluster = Interleaved::new(5, &[(1, 1), (4, 0), (3, 0)]);
    let err = run(&cluster, 8).expect_err("fails");
    assert_eq!(err.code(), "E_STATEMENT_FAILED");
    assert_eq!(
        (err.statement_index, err.pod.as_deref()),
        (Some(0), Some("chi-0-3-0"))
    );
    assert!(
        err.message
            .ends_with("This pass over 5 pod(s), up to 8 at once: 0 completed, 3 failed, 2 not finished."),
        "{}",
        err.message
    );
    let log = cluster.log.lock().unwrap();
    assert!(
        !log.started.iter().any(|(_, i)| *i == 2),
        "no statement 2 anywhere: {:?}",
        log.started
    );
}

#[test]
fn parallelism_one_is_the_sequential_pass() {
    let cluster = Interleaved::new(5, &[(1, 1)]);
    let err = run(&cluster, 1).expect_err("fails");
    assert_eq!(
        (err.statement_index, err.pod.as_deref()),
        (Some(1), Some("chi-0-1-0"))
    );
    assert!(
        err.message.ends_with("1 completed, 1 failed, 3 not finished."),
        "{}",
        err.message
    );
    let log = cluster.log.lock().unwrap();
    let pods: Vec<&str> = log.started.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        pods,
        ["chi-0-0-0", "chi-0-0-0", "chi-0-0-0", "chi-0-1-0", "chi-0-1-0"]
    );
}
