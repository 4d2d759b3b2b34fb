//! What the fingerprint covers and what it deliberately ignores (see the
//! module docs of `config/fingerprint.rs` for the reasons).

use clickhouse_schema_core::config::Execution;
use clickhouse_schema_core::config::fingerprint::fingerprint;
use clickhouse_schema_core::config::validate::validate;
use serde_json::{Value, json};

fn base() -> Value {
    json!({
        "target": { "namespace": "example-observability", "podSelector": { "clickhouse.altinity.com/chi": "orders" } },
        "statements": ["CREATE DATABASE IF NOT EXISTS orders", "CREATE TABLE IF NOT EXISTS orders.t (a UInt8) ENGINE = Memory"],
        "settings": { "distributed_ddl_task_timeout": 300, "insert_quorum": "auto" },
    })
}

fn fp(props: &Value) -> String {
    fingerprint(&validate("fp", props).unwrap_or_else(|e| panic!("props should be valid: {e}")))
}

/// `props` with the JSON pointer `pointer` set to `value` (parents created).
fn with(mut props: Value, pointer: &str, value: Value) -> Value {
    let mut node = &mut props;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            node[*part] = value;
            break;
        }
        if node.get(*part).is_none() {
            node[*part] = json!({});
        }
        node = node.get_mut(*part).expect("just inserted");
    }
    props
}

#[test]
fn is_lowercase_sha256_hex() {
    let digest = fp(&base());
    assert_eq!(digest.len(), 64);
    assert!(
        digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
}

#[test]
fn excluded_fields_do_not_change_it() {
    let reference = fp(&base());
    let variations = [
        ("/target/namespace", json!("elsewhere")),
        ("/target/podSelector", json!({ "app": "other" })),
        ("/target/container", json!("server")),
        ("/waitForPod/timeoutMs", json!(5000)),
        ("/statementTimeoutMs", json!(1000)),
        ("/maxStatementBytes", json!(1 << 30)),
        ("/maxReconcilePasses", json!(9)),
        ("/retry/maxAttempts", json!(10)),
        ("/retry/backoffMs", json!(0)),
        ("/kubeConfig", json!({ "context": "prod", "skipTLSVerify": true })),
        ("/readyBarrier", json!(true)),
        ("/onDelete", json!("retain")),
    ];
    for (pointer, value) in variations {
        assert_eq!(
            fp(&with(base(), pointer, value.clone())),
            reference,
            "{pointer} = {value} changed it"
        );
    }
    let teardown = with(
        with(base(), "/onDelete", json!("run")),
        "/deleteStatements",
        json!(["DROP DATABASE IF EXISTS orders"]),
    );
    assert_eq!(fp(&teardown), reference, "onDelete/deleteStatements changed it");
}

#[test]
fn included_fields_change_it() {
    let reference = fp(&base());
    let variations = [
        ("/statements", json!(["CREATE DATABASE IF NOT EXISTS orders"])),
        (
            "/statements",
            json!([
                "CREATE DATABASE IF NOT EXISTS orders",
                "CREATE TABLE IF NOT EXISTS orders.t (a UInt16) ENGINE = Memory"
            ]),
        ),
        ("/settings/distributed_ddl_task_timeout", json!(301)),
        ("/settings/distributed_ddl_task_timeout", json!("300")),
        ("/settings/max_threads", json!(4)),
        ("/settings", json!({})),
        ("/client/user", json!("writer")),
        ("/client/database", json!("orders")),
        ("/client/passwordEnv", json!("OTHER_PASSWORD")),
        ("/client/port", json!(9001)),
    ];
    for (pointer, value) in variations {
        assert_ne!(
            fp(&with(base(), pointer, value.clone())),
            reference,
            "{pointer} = {value} did not change it"
        );
    }
}

#[test]
fn execution_model_is_part_of_it() {
    // Statements valid under both modes, so only the execution block differs.
    let statements = json!(["CREATE DATABASE IF NOT EXISTS orders ON CLUSTER c"]);
    let fanout = with(base(), "/statements", statements.clone());
    let on_cluster = with(
        fanout.clone(),
        "/execution",
        json!({ "mode": "onCluster", "cluster": "c" }),
    );
    assert_ne!(fp(&fanout), fp(&on_cluster));

    // Only the cluster name differs: mutate the resolved form directly, since
    // no statement list can pass the ON CLUSTER check for two clusters.
    let mut other = validate("fp", &on_cluster).expect("valid");
    other.execution = Execution::OnCluster { cluster: "d".into() };
    assert_ne!(fp(&on_cluster), fingerprint(&other));
}

#[test]
fn statement_order_matters() {
    let forward = with(base(), "/statements", json!(["SELECT 1", "SELECT 2"]));
    let reversed = with(base(), "/statements", json!(["SELECT 2", "SELECT 1"]));
    assert_ne!(fp(&forward), fp(&reversed));
}

#[test]
fn statement_boundaries_matter() {
    let a = with(base(), "/statements", json!(["SELECT 1", "2"]));
    let b = with(base(), "/statements", json!(["SELECT 12"]));
    let c = with(base(), "/statements", json!(["SELECT ", "12"]));
    assert_ne!(fp(&a), fp(&b));
    assert_ne!(fp(&b), fp(&c));
}

#[test]
fn settings_input_order_does_not_matter() {
    // serde_json without preserve_order sorts anyway; build both orders from
    // text so the test stays meaningful if preserve_order is ever enabled.
    let target = r#""target":{"namespace":"ns","podSelector":{"a":"b"}},"statements":["SELECT 1"]"#;
    let one: Value =
        serde_json::from_str(&format!(r#"{{{target},"settings":{{"b_x":1,"a_x":"2"}}}}"#)).unwrap();
    let two: Value =
        serde_json::from_str(&format!(r#"{{{target},"settings":{{"a_x":"2","b_x":1}}}}"#)).unwrap();
    assert_eq!(fp(&one), fp(&two));
}

#[test]
fn integral_float_and_integer_settings_agree() {
    let int = with(base(), "/settings/distributed_ddl_task_timeout", json!(300));
    let float = with(base(), "/settings/distributed_ddl_task_timeout", json!(300.0));
    assert_eq!(fp(&int), fp(&float));
}

#[test]
fn defaults_and_explicit_defaults_agree() {
    let explicit = with(
        with(
            base(),
            "/client",
            json!({ "user": "default", "database": "default", "passwordEnv": "CLICKHOUSE_PASSWORD", "port": 9000 }),
        ),
        "/execution",
        json!({ "mode": "fanout" }),
    );
    assert_eq!(fp(&base()), fp(&explicit));
    let no_settings = base().as_object().map(|o| {
        let mut o = o.clone();
        o.remove("settings");
        Value::Object(o)
    });
    let empty_settings = with(base(), "/settings", json!({}));
    assert_eq!(fp(&no_settings.unwrap()), fp(&empty_settings));
}

#[test]
fn a_float_port_is_the_same_port() {
    let float = with(base(), "/client/port", json!(9000.0));
    assert_eq!(fp(&base()), fp(&float));
}
