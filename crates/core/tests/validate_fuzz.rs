//! No input makes validation panic: arbitrary JSON, and valid props with one
//! field replaced by arbitrary JSON (which reaches much deeper into the rules).

use clickhouse_schema_core::config::validate::validate;
use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("fanout"),
            Just("onCluster"),
            Just("run"),
            Just("retain"),
            Just(""),
            Just(" ")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    ".{0,8}",
                    Just("mode".to_owned()),
                    Just("cluster".to_owned()),
                    Just("password".to_owned()),
                    Just("timeoutMs".to_owned()),
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn valid() -> Value {
    json!({
        "target": { "namespace": "ns", "podSelector": { "app": "ch" }, "container": "clickhouse" },
        "client": { "user": "u", "database": "d", "passwordEnv": "P", "port": 9000 },
        "statements": ["CREATE DATABASE IF NOT EXISTS x ON CLUSTER c"],
        "execution": { "mode": "onCluster", "cluster": "c" },
        "settings": { "max_threads": 1 },
        "onDelete": "run",
        "deleteStatements": ["DROP DATABASE IF EXISTS x ON CLUSTER c"],
        "waitForPod": { "timeoutMs": 1 },
        "maxReconcilePasses": 1,
        "statementTimeoutMs": 1,
        "maxStatementBytes": 1024,
        "retry": { "maxAttempts": 1, "backoffMs": 0 },
        "kubeConfig": { "context": "x" },
        "readyBarrier": true,
    })
}

const POINTERS: &[&str] = &[
    "",
    "/target",
    "/target/namespace",
    "/target/podSelector",
    "/target/container",
    "/client",
    "/client/user",
    "/client/port",
    "/statements",
    "/statements/0",
    "/execution",
    "/execution/mode",
    "/execution/cluster",
    "/settings",
    "/settings/max_threads",
    "/maxStatementBytes",
    "/onDelete",
    "/deleteStatements",
    "/waitForPod",
    "/maxReconcilePasses",
    "/retry",
    "/kubeConfig",
    "/readyBarrier",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_props_never_panic(props in arb_json()) {
        match validate("fuzz", &props) {
            Ok(_) => {}
            Err(e) => prop_assert!(!e.issues.is_empty()),
        }
    }

    #[test]
    fn valid_props_with_one_field_replaced_never_panic(
        pointer in prop::sample::select(POINTERS),
        replacement in arb_json(),
    ) {
        let mut props = valid();
        if pointer.is_empty() {
            props = replacement;
        } else if let Some(slot) = props.pointer_mut(pointer) {
            *slot = replacement;
        }
        match validate("fuzz", &props) {
            Ok(config) => {
                // Whatever was accepted fingerprints and serializes.
                let _ = clickhouse_schema_core::config::fingerprint::fingerprint(&config);
                prop_assert!(serde_json::to_string(&config).is_ok());
            }
            Err(e) => {
                prop_assert_eq!(e.code(), "E_INVALID_CONFIG");
                prop_assert!(!e.issues.is_empty());
            }
        }
    }
}

#[test]
fn the_fuzz_baseline_is_valid() {
    validate("fuzz", &valid()).expect("baseline must pass, or the mutation test explores nothing");
}
