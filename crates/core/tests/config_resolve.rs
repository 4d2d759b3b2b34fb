//! The resolved form: defaults filled in one place, every prop carried over,
//! and a serialized shape the TypeScript layer and state can rely on.

use std::collections::BTreeMap;

use clickhouse_schema_core::config::validate::{PROPS_SCHEMA, validate};
use clickhouse_schema_core::config::*;
use serde_json::{Value, json};

fn quick_start() -> Value {
    json!({
        "target": { "namespace": "example-observability", "podSelector": { "clickhouse.altinity.com/chi": "orders" } },
        "statements": [
            "CREATE DATABASE IF NOT EXISTS orders",
            "CREATE TABLE IF NOT EXISTS orders.events (id UUID, at DateTime, payload String) ENGINE = MergeTree ORDER BY at",
        ],
    })
}

#[test]
fn quick_start_gets_every_default() {
    let config = validate("orders-schema", &quick_start()).expect("quick start is valid");
    let expected = ResolvedConfig {
        target: Target {
            namespace: "example-observability".into(),
            pod_selector: BTreeMap::from([("clickhouse.altinity.com/chi".into(), "orders".into())]),
            container: "clickhouse".into(),
        },
        client: ClientConfig {
            user: "default".into(),
            database: "default".into(),
            password_env: "CLICKHOUSE_PASSWORD".into(),
            port: 9000,
        },
        statements: vec![
            "CREATE DATABASE IF NOT EXISTS orders".into(),
            "CREATE TABLE IF NOT EXISTS orders.events (id UUID, at DateTime, payload String) ENGINE = MergeTree ORDER BY at".into(),
        ],
        execution: Execution::Fanout,
        settings: BTreeMap::new(),
        on_delete: OnDelete::Retain,
        delete_statements: vec![],
        verify: VerifyMode::Fail,
        wait_for_pod: WaitForPod { timeout_ms: 120_000 },
        max_reconcile_passes: 3,
        parallelism: 8,
        exec_mode: ExecMode::PerPod,
        statement_timeout_ms: 300_000,
        max_statement_bytes: 16 << 20,
        retry: Retry { max_attempts: 3, backoff_ms: 1_000 },
        lease: None,
        ledger: None,
        rebuild: Default::default(),
        converge: Default::default(),
        allow_type_change: Vec::new(),
        kube_config: None,
        ready_barrier: None,
    };
    assert_eq!(config, expected);
}

#[test]
fn lease_and_ledger_resolve_with_their_defaults() {
    let with = |lease: serde_json::Value, ledger: serde_json::Value| {
        let mut props = quick_start();
        props["lease"] = lease;
        props["ledger"] = ledger;
        validate("orders-schema", &props).expect("valid")
    };
    let c = with(json!(true), json!({ "database": "ops" }));
    assert_eq!(c.lease, Some(LeaseConfig { ttl_seconds: 60 }));
    assert_eq!(
        c.ledger,
        Some(LedgerConfig {
            database: "ops".into(),
            table: "clickhouse_schema_ledger".into()
        })
    );
    let c = with(
        json!({ "ttlSeconds": 15 }),
        json!({ "database": "ops", "table": "applied" }),
    );
    assert_eq!(c.lease, Some(LeaseConfig { ttl_seconds: 15 }));
    assert_eq!(c.ledger.unwrap().table, "applied");
    assert_eq!(with(json!(false), json!({ "database": "ops" })).lease, None);
    assert_eq!(
        with(json!({}), json!({ "database": "ops" })).lease,
        Some(LeaseConfig { ttl_seconds: 60 })
    );
}

#[test]
fn every_prop_is_carried_over() {
    let props = json!({
        "target": { "namespace": "ns", "podSelector": { "app": "ch", "tier": "" }, "container": "server" },
        "client": { "user": "writer", "database": "orders", "passwordEnv": "CH_PASS", "port": 9440 },
        "statements": ["CREATE DATABASE IF NOT EXISTS orders ON CLUSTER 'main'"],
        "execution": { "mode": "onCluster", "cluster": "main" },
        "settings": { "distributed_ddl_task_timeout": 300, "insert_quorum": "auto", "ratio": 0.25 },
        "onDelete": "run",
        "deleteStatements": ["DROP DATABASE IF EXISTS orders ON CLUSTER 'main'"],
        "waitForPod": { "timeoutMs": 5000 },
        "maxReconcilePasses": 7,
        "statementTimeoutMs": 60000,
        "retry": { "maxAttempts": 5, "backoffMs": 0 },
        "kubeConfig": {
            "context": "prod",
            "skipTLSVerify": false,
            "cluster": { "name": "c", "server": "https://k8s.example:6443", "caFile": "/tmp/ca.pem" },
            "user": { "name": "u", "certFile": "/tmp/u.crt", "keyFile": "/tmp/u.key" }
        },
        "readyBarrier": true,
    });
    let c = validate("x", &props).expect("valid");
    assert_eq!(c.target.container, "server");
    assert_eq!(c.target.pod_selector.get("tier").map(String::as_str), Some(""));
    assert_eq!(
        c.client,
        ClientConfig {
            user: "writer".into(),
            database: "orders".into(),
            password_env: "CH_PASS".into(),
            port: 9440
        }
    );
    assert_eq!(
        c.execution,
        Execution::OnCluster {
            cluster: "main".into()
        }
    );
    assert_eq!(c.execution.mode(), "onCluster");
    assert_eq!(c.execution.cluster(), Some("main"));
    assert_eq!(c.settings["distributed_ddl_task_timeout"].render(), "300");
    assert_eq!(c.settings["insert_quorum"], SettingValue::String("auto".into()));
    assert_eq!(c.settings["ratio"].render(), "0.25");
    assert_eq!(c.on_delete, OnDelete::Run);
    assert_eq!(
        c.delete_statements,
        ["DROP DATABASE IF EXISTS orders ON CLUSTER 'main'"]
    );
    assert_eq!(c.wait_for_pod.timeout_ms, 5000);
    assert_eq!(c.max_reconcile_passes, 7);
    assert_eq!(c.statement_timeout_ms, 60000);
    assert_eq!(
        c.retry,
        Retry {
            max_attempts: 5,
            backoff_ms: 0
        }
    );
    let kube = c
        .kube_config
        .as_ref()
        .and_then(|k| k.options())
        .expect("kubeConfig options");
    // kubeconfigPath cannot join an inline cluster and user (see validate_messages).
    assert_eq!(kube.kubeconfig_path, None);
    assert_eq!(kube.context.as_deref(), Some("prod"));
    assert_eq!(kube.skip_tls_verify, Some(false));
    assert_eq!(
        kube.cluster.as_ref().and_then(|c| c.ca_file.as_deref()),
        Some("/tmp/ca.pem")
    );
    assert_eq!(
        kube.user.as_ref().and_then(|u| u.key_file.as_deref()),
        Some("/tmp/u.key")
    );
    assert_eq!(c.ready_barrier, Some(true));
}

#[test]
fn integral_floats_are_accepted_for_integers() {
    // JS has one number type; the bridge may hand over 9000 as 9000.0.
    let props = json!({
        "target": { "namespace": "ns", "podSelector": { "a": "b" } },
        "statements": ["SELECT 1"],
        "client": { "port": 9000.0 },
        "waitForPod": { "timeoutMs": 1000.0 },
        "retry": { "maxAttempts": 2.0, "backoffMs": 0.0 },
    });
    let c = validate("x", &props).expect("valid");
    assert_eq!(c.client.port, 9000);
    assert_eq!(c.wait_for_pod.timeout_ms, 1000);
    assert_eq!(
        c.retry,
        Retry {
            max_attempts: 2,
            backoff_ms: 0
        }
    );
}

#[test]
fn serialized_shape_is_camel_case_with_tagged_execution() {
    let mut props = quick_start();
    props["execution"] = json!({ "mode": "fanout" });
    props["settings"] = json!({ "max_threads": 4, "log_comment": "schema" });
    let value = serde_json::to_value(validate("x", &props).unwrap()).unwrap();
    assert_eq!(
        value["target"]["podSelector"],
        json!({ "clickhouse.altinity.com/chi": "orders" })
    );
    assert_eq!(value["client"]["passwordEnv"], "CLICKHOUSE_PASSWORD");
    assert_eq!(value["execution"], json!({ "mode": "fanout" }));
    assert_eq!(
        value["settings"],
        json!({ "log_comment": "schema", "max_threads": 4 })
    );
    assert_eq!(value["onDelete"], "retain");
    assert_eq!(value["deleteStatements"], json!([]));
    assert_eq!(value["waitForPod"], json!({ "timeoutMs": 120000 }));
    assert_eq!(value["maxReconcilePasses"], 3);
    assert_eq!(value["statementTimeoutMs"], 300000);
    assert_eq!(value["retry"], json!({ "maxAttempts": 3, "backoffMs": 1000 }));
    assert_eq!(value["kubeConfig"], Value::Null);
    assert_eq!(value["readyBarrier"], Value::Null);

    let on_cluster = serde_json::to_value(Execution::OnCluster { cluster: "c".into() }).unwrap();
    assert_eq!(on_cluster, json!({ "mode": "onCluster", "cluster": "c" }));
}

#[test]
fn serialization_round_trips() {
    let mut props = quick_start();
    props["settings"] = json!({ "max_threads": 1, "log_comment": "1", "ratio_x": 1.5, "priority_y": -3 });
    props["kubeConfig"] = json!({ "context": "x", "skipTLSVerify": true });
    let config = validate("x", &props).unwrap();
    let text = serde_json::to_string(&config).unwrap();
    let back: ResolvedConfig = serde_json::from_str(&text).unwrap();
    assert_eq!(back, config);
    assert!(text.contains("\"skipTLSVerify\":true"), "{text}");
}

#[test]
fn canonical_number_rendering() {
    let render = |v: Value| match v {
        Value::Number(n) => canonical_number(&n),
        _ => unreachable!(),
    };
    assert_eq!(render(json!(300)), "300");
    assert_eq!(render(json!(300.0)), "300");
    assert_eq!(render(json!(-0.0)), "0");
    assert_eq!(render(json!(-7)), "-7");
    assert_eq!(render(json!(0.1)), "0.1");
    assert_eq!(render(json!(1e21)), "1000000000000000000000");
    assert_eq!(render(json!(1e-7)), "0.0000001");
    assert_eq!(render(json!(u64::MAX)), "18446744073709551615");
}

#[test]
fn schema_defaults_match_the_rust_defaults() {
    let schema: Value = serde_json::from_str(PROPS_SCHEMA).unwrap();
    let default = |pointer: &str| {
        schema
            .pointer(&format!("/properties/{pointer}/default"))
            .cloned()
            .unwrap_or_else(|| panic!("{pointer}"))
    };
    assert_eq!(default("target/properties/container"), json!(DEFAULT_CONTAINER));
    assert_eq!(default("client/properties/user"), json!(DEFAULT_USER));
    assert_eq!(default("client/properties/database"), json!(DEFAULT_DATABASE));
    assert_eq!(
        default("client/properties/passwordEnv"),
        json!(DEFAULT_PASSWORD_ENV)
    );
    assert_eq!(default("client/properties/port"), json!(DEFAULT_PORT));
    assert_eq!(default("execution"), json!({ "mode": "fanout" }));
    assert_eq!(default("onDelete"), json!("retain"));
    assert_eq!(
        default("waitForPod/properties/timeoutMs"),
        json!(DEFAULT_WAIT_FOR_POD_TIMEOUT_MS)
    );
    assert_eq!(default("maxReconcilePasses"), json!(DEFAULT_MAX_RECONCILE_PASSES));
    assert_eq!(default("statementTimeoutMs"), json!(DEFAULT_STATEMENT_TIMEOUT_MS));
    assert_eq!(default("maxStatementBytes"), json!(DEFAULT_MAX_STATEMENT_BYTES));
    assert_eq!(
        default("retry/properties/maxAttempts"),
        json!(DEFAULT_RETRY_MAX_ATTEMPTS)
    );
    assert_eq!(
        default("retry/properties/backoffMs"),
        json!(DEFAULT_RETRY_BACKOFF_MS)
    );
}

#[test]
fn schema_is_generator_friendly() {
    // Every object node closes its keys and every prop is described, so the
    // generated TypeScript types are exact and documented. The exception is
    // what Alchemy builds (titles `Alchemy...`): a connection's auth carries
    // fields per adapter kind, and a cluster resource's attributes are its
    // own, so those nodes must stay open to accept them.
    fn walk(node: &Value, at: &str) {
        let Some(obj) = node.as_object() else { return };
        let alchemy = obj
            .get("title")
            .and_then(Value::as_str)
            .is_some_and(|t| t.starts_with("Alchemy"));
        if alchemy {
            assert_eq!(
                obj.get("additionalProperties"),
                Some(&json!(true)),
                "{at} must stay open"
            );
        } else if obj.get("type") == Some(&json!("object")) {
            assert_eq!(
                obj.get("additionalProperties"),
                Some(&json!(false)),
                "{at} must close its keys"
            );
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                walk(child, &format!("{at}.{name}"));
            }
        }
        for key in ["oneOf", "anyOf", "allOf"] {
            for (i, child) in obj
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                walk(child, &format!("{at}/{key}/{i}"));
            }
        }
        if let Some(pattern) = obj.get("patternProperties").and_then(Value::as_object) {
            for child in pattern.values() {
                walk(child, &format!("{at}[*]"));
            }
        }
    }
    let schema: Value = serde_json::from_str(PROPS_SCHEMA).unwrap();
    walk(&schema, "props");
    for (name, def) in schema["$defs"].as_object().unwrap() {
        walk(def, &format!("$defs.{name}"));
    }
    for (name, prop) in schema["properties"].as_object().unwrap() {
        assert!(prop.get("description").is_some(), "{name} lacks a description");
        // Named types (objects, unions, enums, arrays) carry a prefixed title so
        // the generated declarations cannot collide with a user's own names;
        // scalars carry none, so they inline as plain `string` / `number`.
        let named = prop
            .get("type")
            .and_then(Value::as_str)
            .is_none_or(|t| matches!(t, "object" | "array"))
            || prop.get("enum").is_some();
        match prop.get("title").and_then(Value::as_str) {
            Some(title) => assert!(
                named && title.starts_with("ClickHouseSchema") || title.starts_with("Serializable"),
                "{name}: {title}"
            ),
            None => assert!(!named, "{name} lacks a title"),
        }
    }
}
