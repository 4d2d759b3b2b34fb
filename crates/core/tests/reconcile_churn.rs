//! Randomized churn: pods are added, removed, replaced and flip readiness at
//! every list and exec while a fanout apply runs. Whatever happens, a returned
//! state must satisfy the exit predicate: a non-empty set, equal to the last
//! observation, every pod object in it having run the whole list in order.

mod reconcile_support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use clickhouse_schema_core::lifecycle::apply;
use clickhouse_schema_core::transport::Cluster;
use clickhouse_schema_core::transport::{NeverCancelled, NoEvents, PodInfo};
use proptest::prelude::*;
use reconcile_support::{FakeClock, FakeCluster, block_on, config, pod};
use serde_json::json;

const STATEMENTS: [&str; 3] = [
    "CREATE DATABASE IF NOT EXISTS d",
    "CREATE TABLE IF NOT EXISTS d.t (x UInt8) ENGINE = Memory",
    "CREATE TABLE IF NOT EXISTS d.u (x UInt8) ENGINE = Memory",
];

#[derive(Debug, Clone)]
enum Event {
    Nothing,
    Add(u8),
    Remove(u8),
    Replace(u8),
    Ready(u8, bool),
    Terminate(u8),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => Just(Event::Nothing),
        1 => (0u8..5).prop_map(Event::Add),
        1 => (0u8..5).prop_map(Event::Remove),
        1 => (0u8..5).prop_map(Event::Replace),
        1 => (0u8..5, any::<bool>()).prop_map(|(i, r)| Event::Ready(i, r)),
        1 => (0u8..5).prop_map(Event::Terminate),
    ]
}

struct Churn {
    events: Vec<Event>,
    next_uid: u32,
}

impl Churn {
    /// Applies the next scripted event to the live pods.
    fn step(&mut self, pods: &mut Vec<PodInfo>) {
        let Some(event) = (!self.events.is_empty()).then(|| self.events.remove(0)) else {
            return;
        };
        let name = |i: u8| format!("chi-0-{i}-0");
        self.next_uid += 1;
        let uid = format!("uid-{}", self.next_uid);
        match event {
            Event::Nothing => {}
            Event::Add(i) => {
                if !pods.iter().any(|p| p.name == name(i)) {
                    pods.push(pod(&name(i), &uid));
                }
            }
            Event::Remove(i) => pods.retain(|p| p.name != name(i)),
            Event::Replace(i) => {
                if let Some(p) = pods.iter_mut().find(|p| p.name == name(i)) {
                    *p = pod(&name(i), &uid);
                }
            }
            Event::Ready(i, ready) => {
                if let Some(p) = pods.iter_mut().find(|p| p.name == name(i)) {
                    p.ready = ready;
                }
            }
            Event::Terminate(i) => {
                if let Some(p) = pods.iter_mut().find(|p| p.name == name(i)) {
                    p.terminating = true;
                }
            }
        }
    }
}

proptest! {
    // No regression file: the minimal failing input is printed in full when it fails.
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_returned_state_always_satisfies_the_exit_predicate(
        initial in 0usize..4,
        events in proptest::collection::vec(event(), 0..40),
        passes in 1u32..5,
        // Sequential and parallel passes must satisfy the same predicate.
        parallelism in proptest::sample::select(vec![1u32, 8]),
    ) {
        let pods: Vec<PodInfo> = (0..initial).map(|i| pod(&format!("chi-0-{i}-0"), &format!("init-{i}"))).collect();
        let churn = Arc::new(Mutex::new(Churn { events, next_uid: 0 }));
        let last_observation: Arc<Mutex<Vec<PodInfo>>> = Arc::default();

        let (c1, c2, seen) = (churn.clone(), churn.clone(), last_observation.clone());
        let cluster = FakeCluster::new(pods)
            .on_list(move |_, pods| {
                c1.lock().unwrap().step(pods);
                *seen.lock().unwrap() = pods.clone();
            })
            .on_exec(move |_, pods| {
                c2.lock().unwrap().step(pods);
                None
            });
        let cfg = config(json!({
            "target": { "namespace": "ns", "podSelector": { "app": "ch" } },
            "statements": STATEMENTS,
            // The property counts statement execs; the live-schema check has its own tests.
            "verify": "off",
            "maxReconcilePasses": passes,
            "parallelism": parallelism,
            "waitForPod": { "timeoutMs": 5000 },
            "retry": { "maxAttempts": 1 },
        }));
        let clock = FakeClock::default();
        let c = Cluster { transport: &cluster, clock: &clock, cluster_id: None, cancel: &NeverCancelled, events: &NoEvents };

        if let Ok((state, _)) = block_on(apply("churn", &cfg, None, &c)) {
            let recorded = state.pods.clone();
            // (1) never an empty set
            prop_assert!(!recorded.is_empty());
            // (3) the recorded set is exactly what the last list observed
            let observed: BTreeSet<(String, Option<String>)> = last_observation
                .lock()
                .unwrap()
                .iter()
                .filter(|p| !p.is_on_its_way_out())
                .map(|p| (p.name.clone(), p.uid.clone()))
                .collect();
            let recorded_set: BTreeSet<(String, Option<String>)> =
                recorded.iter().map(|p| (p.name.clone(), p.uid.clone())).collect();
            prop_assert_eq!(&recorded_set, &observed);
            // (2) every recorded pod object ran the whole list, in order. It
            // may have run parts of it more than once: an exec addresses a pod
            // by name, so a replacement can catch the tail of its predecessor's
            // pass before its own full pass (harmless, statements are idempotent).
            for p in &recorded {
                let ran = cluster.statements_on(&p.name, p.uid.as_deref().unwrap_or_default());
                prop_assert!(
                    ran.windows(STATEMENTS.len()).any(|w| w == STATEMENTS),
                    "pod {:?} ran {:?}",
                    p,
                    ran
                );
            }
            prop_assert_eq!(state.pod_names.len(), recorded.len());
        }
    }
}
