//! Every malformed prop is reported at its path with a reason that says what
//! is wrong, and all problems are reported together.

use clickhouse_schema_core::config::validate::validate;
use clickhouse_schema_core::{ClickHouseSchemaError, ConfigIssue};
use serde_json::{Value, json};

fn base() -> Value {
    json!({
        "target": { "namespace": "example-observability", "podSelector": { "clickhouse.altinity.com/chi": "orders" } },
        "statements": ["CREATE DATABASE IF NOT EXISTS orders"],
    })
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

fn without(mut props: Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    props
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .expect("parent object")
        .remove(key);
    props
}

fn rejected(props: &Value) -> ClickHouseSchemaError {
    match validate("orders-schema", props) {
        Ok(_) => panic!("expected rejection of {props}"),
        Err(e) => e,
    }
}

/// Asserts an issue at exactly `path` whose reason contains `phrase`, and
/// that the message carries it too.
#[track_caller]
fn assert_issue(props: Value, path: &str, phrase: &str) -> ClickHouseSchemaError {
    let err = rejected(&props);
    assert_eq!(err.code(), "E_INVALID_CONFIG");
    assert!(
        err.issues
            .iter()
            .any(|i| i.path == path && i.reason.contains(phrase)),
        "no issue at {path:?} containing {phrase:?}; got:\n{err}"
    );
    let line = if path.is_empty() {
        String::new()
    } else {
        format!("  - {path}: ")
    };
    assert!(err.message.contains(&line), "message lacks {line:?}:\n{err}");
    assert!(
        err.message
            .starts_with("Invalid ClickHouseSchema configuration for 'orders-schema':"),
        "{err}"
    );
    // jsonschema's own wording must never surface.
    for raw in [
        "is not valid under any of the given schemas",
        "oneOf",
        "anyOf",
        "additionalProperties",
        "is a required property",
    ] {
        assert!(
            !err.message.contains(raw),
            "raw jsonschema wording {raw:?} leaked:\n{err}"
        );
    }
    err
}

#[track_caller]
fn assert_single_issue(props: Value, path: &str, phrase: &str) {
    let err = assert_issue(props, path, phrase);
    assert_eq!(err.issues.len(), 1, "expected exactly one issue:\n{err}");
}

// --- whole props ----------------------------------------------------------

#[test]
fn props_must_be_an_object() {
    for props in [json!(null), json!([]), json!("x"), json!(3), json!(true)] {
        assert_single_issue(props, "", "props must be an object");
    }
}

#[test]
fn required_top_level_props() {
    assert_single_issue(without(base(), "/target"), "target", "is required");
    assert_single_issue(without(base(), "/statements"), "statements", "is required");
}

#[test]
fn unknown_top_level_key_is_named() {
    let err = assert_issue(
        with(base(), "/statment", json!(["x"])),
        "statment",
        "not a recognised option",
    );
    assert!(
        err.issues[0].reason.contains("statements"),
        "should list the accepted keys: {err}"
    );
}

#[test]
fn executor_in_props_says_where_it_goes() {
    assert_single_issue(
        with(base(), "/executor", json!({})),
        "executor",
        "goes in the options argument, apply(id, props, previousState, { executor })",
    );
}

// --- target ---------------------------------------------------------------

#[test]
fn target_must_be_an_object() {
    assert_single_issue(
        with(base(), "/target", json!("ns")),
        "target",
        "must be an object",
    );
}

#[test]
fn target_namespace() {
    assert_single_issue(
        without(base(), "/target/namespace"),
        "target.namespace",
        "is required",
    );
    assert_single_issue(
        with(base(), "/target/namespace", json!("")),
        "target.namespace",
        "must not be empty",
    );
    assert_single_issue(
        with(base(), "/target/namespace", json!(7)),
        "target.namespace",
        "must be a string",
    );
    for bad in ["Orders", "orders_ns", "-orders", "orders-", "a.b"] {
        assert_single_issue(
            with(base(), "/target/namespace", json!(bad)),
            "target.namespace",
            "not a valid namespace",
        );
    }
    assert_issue(
        with(base(), "/target/namespace", json!("a".repeat(64))),
        "target.namespace",
        "longer than 63",
    );
}

#[test]
fn target_pod_selector_shape() {
    assert_single_issue(
        without(base(), "/target/podSelector"),
        "target.podSelector",
        "is required",
    );
    assert_single_issue(
        with(base(), "/target/podSelector", json!({})),
        "target.podSelector",
        "at least one label",
    );
    assert_single_issue(
        with(base(), "/target/podSelector", json!("app=x")),
        "target.podSelector",
        "must be an object",
    );
}

#[test]
fn target_pod_selector_keys() {
    let cases = [
        ("app/x/y", "at most one '/'"),
        ("/x", "prefix before '/' must not be empty"),
        ("Example.com/x", "DNS subdomain"),
        ("example..com/x", "DNS subdomain"),
        ("example.com/", "name must not be empty"),
        ("-app", "must use letters, digits"),
        ("app-", "must use letters, digits"),
        ("ap p", "must use letters, digits"),
        ("", "name must not be empty"),
    ];
    for (key, phrase) in cases {
        let props = with(base(), "/target/podSelector", json!({ key: "v" }));
        let path = format!("target.podSelector[{}]", serde_json::to_string(key).unwrap());
        assert_single_issue(props, &path, phrase);
    }
    let long_name = "a".repeat(64);
    let props = with(base(), "/target/podSelector", json!({ long_name.clone(): "v" }));
    assert_single_issue(
        props,
        &format!("target.podSelector[\"{long_name}\"]"),
        "longer than 63",
    );
    let long_prefix = format!("{}/app", "a".repeat(254));
    let props = with(base(), "/target/podSelector", json!({ long_prefix.clone(): "v" }));
    assert_single_issue(
        props,
        &format!("target.podSelector[\"{long_prefix}\"]"),
        "longer than 253",
    );
}

#[test]
fn target_pod_selector_accepts_real_label_keys_and_values() {
    let ok = [
        ("clickhouse.altinity.com/chi", "orders"),
        ("app.kubernetes.io/name", "clickhouse"),
        ("app", ""),
        ("A_b.C-9", "x.Y_z-1"),
    ];
    for (key, value) in ok {
        let props = with(base(), "/target/podSelector", json!({ key: value }));
        assert!(validate("ok", &props).is_ok(), "{key}={value} should be accepted");
    }
    let max = format!("{}/{}", "a".repeat(253), "b".repeat(63));
    assert!(
        validate(
            "ok",
            &with(base(), "/target/podSelector", json!({ max: "v".repeat(63) }))
        )
        .is_ok()
    );
}

#[test]
fn target_pod_selector_values() {
    let at = |key: &str| format!("target.podSelector[\"{key}\"]");
    assert_single_issue(
        with(base(), "/target/podSelector", json!({ "app": 5 })),
        &at("app"),
        "must be strings",
    );
    assert_single_issue(
        with(base(), "/target/podSelector", json!({ "app": "a b" })),
        &at("app"),
        "not a valid label value",
    );
    assert_single_issue(
        with(base(), "/target/podSelector", json!({ "app": "-a" })),
        &at("app"),
        "not a valid label value",
    );
    assert_single_issue(
        with(base(), "/target/podSelector", json!({ "app": "a".repeat(64) })),
        &at("app"),
        "longer than 63",
    );
}

#[test]
fn target_container() {
    assert_single_issue(
        with(base(), "/target/container", json!("")),
        "target.container",
        "must not be empty",
    );
    assert_single_issue(
        with(base(), "/target/container", json!("Click_House")),
        "target.container",
        "not a valid container name",
    );
    assert_single_issue(
        with(base(), "/target/container", json!(false)),
        "target.container",
        "must be a string",
    );
}

#[test]
fn target_unknown_key() {
    assert_single_issue(
        with(base(), "/target/selector", json!({})),
        "target.selector",
        "not a recognised option",
    );
}

// --- client ---------------------------------------------------------------

#[test]
fn client_must_be_an_object() {
    assert_single_issue(
        with(base(), "/client", json!("default")),
        "client",
        "must be an object",
    );
}

#[test]
fn client_password_is_refused_with_guidance() {
    for key in ["password", "PASSWORD", "Password", "clickhousePassword"] {
        let err = assert_issue(
            with(base(), &format!("/client/{key}"), json!("hunter2")),
            &format!("client.{key}"),
            "no password prop",
        );
        assert!(err.issues[0].reason.contains("passwordEnv"), "{err}");
        assert!(
            !err.message.contains("hunter2"),
            "the value must never be echoed: {err}"
        );
    }
}

#[test]
fn client_unknown_key() {
    let err = assert_issue(
        with(base(), "/client/host", json!("h")),
        "client.host",
        "not a recognised option",
    );
    assert!(err.issues[0].reason.contains("passwordEnv"), "{err}");
}

#[test]
fn client_user_and_database() {
    for field in ["user", "database"] {
        let path = format!("client.{field}");
        let pointer = format!("/client/{field}");
        assert_single_issue(with(base(), &pointer, json!("")), &path, "must not be empty");
        assert_single_issue(with(base(), &pointer, json!(1)), &path, "must be a string");
        for bad in ["a\nb", "a\u{0}b", "a\tb", "\r", "x\u{7f}"] {
            assert_single_issue(with(base(), &pointer, json!(bad)), &path, "control characters");
        }
    }
}

#[test]
fn client_password_env() {
    for bad in ["1PASS", "MY-PASS", "${X}", "a b", "PASS;rm"] {
        assert_single_issue(
            with(base(), "/client/passwordEnv", json!(bad)),
            "client.passwordEnv",
            "not a valid environment variable name",
        );
    }
    assert_single_issue(
        with(base(), "/client/passwordEnv", json!("")),
        "client.passwordEnv",
        "must not be empty",
    );
    for ok in ["_X", "CH_PASS_2", "p"] {
        assert!(
            validate("ok", &with(base(), "/client/passwordEnv", json!(ok))).is_ok(),
            "{ok}"
        );
    }
}

#[test]
fn client_port() {
    for bad in [json!(0), json!(65536), json!(-1)] {
        assert_single_issue(
            with(base(), "/client/port", bad),
            "client.port",
            "between 1 and 65535",
        );
    }
    for bad in [json!(9000.5), json!("9000"), json!(null)] {
        assert_single_issue(
            with(base(), "/client/port", bad),
            "client.port",
            "must be an integer port",
        );
    }
}

// --- statements -----------------------------------------------------------

#[test]
fn statements_shape() {
    assert_single_issue(
        with(base(), "/statements", json!([])),
        "statements",
        "at least one statement",
    );
    assert_single_issue(
        with(base(), "/statements", json!("CREATE DATABASE x")),
        "statements",
        "must be an array",
    );
    assert_single_issue(
        with(base(), "/statements", json!(["SELECT 1", 2])),
        "statements[1]",
        "must be a string",
    );
}

#[test]
fn blank_statements_are_named_by_index() {
    let err = rejected(&with(
        base(),
        "/statements",
        json!(["SELECT 1", "", "  \n\t ", "SELECT 2"]),
    ));
    let paths: Vec<&str> = err.issues.iter().map(|i| i.path.as_str()).collect();
    assert_eq!(paths, ["statements[1]", "statements[2]"], "{err}");
    assert!(err.issues.iter().all(|i| i.reason.contains("blank")), "{err}");
}

// --- execution ------------------------------------------------------------

#[test]
fn execution_unknown_mode() {
    assert_single_issue(
        with(base(), "/execution", json!({ "mode": "replicated" })),
        "execution.mode",
        "not an execution mode",
    );
    assert_single_issue(
        with(base(), "/execution", json!({ "mode": 1 })),
        "execution.mode",
        "'fanout' or 'onCluster'",
    );
    assert_single_issue(
        with(base(), "/execution", json!({})),
        "execution.mode",
        "is required",
    );
}

#[test]
fn execution_not_an_object_says_what_is_expected() {
    for bad in [json!("fanout"), json!(null), json!([])] {
        assert_single_issue(
            with(base(), "/execution", bad),
            "execution",
            "{ mode: 'onCluster', cluster:",
        );
    }
}

#[test]
fn execution_on_cluster_needs_a_cluster() {
    assert_single_issue(
        with(base(), "/execution", json!({ "mode": "onCluster" })),
        "execution.cluster",
        "is required",
    );
    assert_single_issue(
        with(
            base(),
            "/execution",
            json!({ "mode": "onCluster", "cluster": "" }),
        ),
        "execution.cluster",
        "must not be empty",
    );
    assert_single_issue(
        with(base(), "/execution", json!({ "mode": "onCluster", "cluster": 3 })),
        "execution.cluster",
        "must be a string",
    );
    assert_single_issue(
        with(
            base(),
            "/execution",
            json!({ "mode": "onCluster", "cluster": "a\nb" }),
        ),
        "execution.cluster",
        "control characters",
    );
}

#[test]
fn execution_cluster_not_allowed_under_fanout() {
    assert_single_issue(
        with(base(), "/execution", json!({ "mode": "fanout", "cluster": "c" })),
        "execution.cluster",
        "only used with mode 'onCluster'",
    );
}

#[test]
fn execution_unknown_key() {
    assert_single_issue(
        with(base(), "/execution", json!({ "mode": "fanout", "replicas": 3 })),
        "execution.replicas",
        "only mode and cluster",
    );
}

// --- settings -------------------------------------------------------------

#[test]
fn settings_names() {
    for bad in ["Max_threads", "max-threads", "1x", "", "max threads"] {
        let props = with(base(), "/settings", json!({ bad: 1 }));
        let path = format!("settings[{}]", serde_json::to_string(bad).unwrap());
        assert_single_issue(props, &path, "not a valid setting name");
    }
}

#[test]
fn settings_cannot_be_client_options() {
    // Each of these would make clickhouse-client connect elsewhere (with the
    // pod's password), replace the statement, or write a file in the pod.
    for (name, phrase) in [
        ("host", "is a clickhouse-client option, not a ClickHouse setting"),
        ("port", "is a clickhouse-client option"),
        ("query", "is a clickhouse-client option"),
        ("server_logs_file", "is a clickhouse-client option"),
        ("history_file", "is a clickhouse-client option"),
        ("config_file", "is a clickhouse-client option"),
        ("format", "is a clickhouse-client option"),
        ("query_id", "is a clickhouse-client option"),
        ("hos", "abbreviation of its own options --host, --hosts"),
        ("quer", "abbreviation of its own options --queries_file, --query"),
        ("param_tenant", "query parameter"),
    ] {
        let props = with(base(), &format!("/settings/{name}"), json!("127.0.0.2"));
        assert_single_issue(props, &format!("settings[\"{name}\"]"), phrase);
    }
}

#[test]
fn real_settings_that_look_like_options_are_accepted() {
    let props = with(
        base(),
        "/settings",
        json!({ "max_memory_usage": 1, "max_execution_time": 5, "interactive_delay": 100000, "log_comment": "x" }),
    );
    validate("orders-schema", &props).expect("settings, not options");
}

#[test]
fn settings_that_cut_results_short_are_refused_with_a_rebuild() {
    let rebuild = |settings: Value| {
        let mut props = with(
            base(),
            "/statements",
            json!([
                "CREATE DATABASE IF NOT EXISTS orders",
                "CREATE TABLE IF NOT EXISTS orders.events (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id",
            ]),
        );
        props["rebuild"] = json!({ "orders.events": { "cutoverColumn": "at" } });
        props["settings"] = settings;
        props
    };
    assert_single_issue(
        rebuild(json!({ "limit": 2 })),
        "settings[\"limit\"]",
        "cuts query results short",
    );
    assert_single_issue(
        rebuild(json!({ "result_overflow_mode": "break", "max_result_rows": 10 })),
        "settings[\"result_overflow_mode\"]",
        "remove it while `rebuild` is set",
    );
    // Throwing on overflow is an error, not a cut: allowed; and without a rebuild, all of them.
    validate(
        "orders-schema",
        &rebuild(json!({ "result_overflow_mode": "throw", "max_result_rows": 10 })),
    )
    .expect("an overflow that throws");
    validate("orders-schema", &with(base(), "/settings", json!({ "limit": 2 }))).expect("no rebuild");
}

#[test]
fn crlf_line_ends_in_tab_separated_output_are_refused() {
    for value in [json!(1), json!("1")] {
        assert_single_issue(
            with(
                base(),
                "/settings",
                json!({ "output_format_tsv_crlf_end_of_line": value }),
            ),
            "settings[\"output_format_tsv_crlf_end_of_line\"]",
            "end its lines with CRLF",
        );
    }
    validate(
        "orders-schema",
        &with(
            base(),
            "/settings",
            json!({ "output_format_tsv_crlf_end_of_line": 0 }),
        ),
    )
    .expect("the default, spelled out");
}

#[test]
fn a_nul_byte_in_a_statement_is_refused_by_index() {
    // The pod's shell drops NUL bytes from the statement it reads, so it could never arrive whole.
    let props = with(base(), "/statements", json!(["SELECT 1", "SELECT 'a\u{0}b'"]));
    assert_single_issue(props, "statements[1]", "holds a NUL byte (U+0000)");

    let mut props = with(base(), "/onDelete", json!("run"));
    props["deleteStatements"] = json!(["DROP DATABASE orders\u{0}"]);
    assert_single_issue(props, "deleteStatements[0]", "write it as the escape '\\0'");

    // The escape itself is plain text and passes.
    let props = with(base(), "/statements", json!(["SELECT 'a\\0b'"]));
    validate("orders-schema", &props).expect("the escape is not a NUL byte");
}

#[test]
fn statements_over_max_statement_bytes_are_refused_by_index() {
    let big = format!("SELECT '{}'", "x".repeat(16 << 20));
    let props = with(base(), "/statements", json!(["SELECT 1", big]));
    assert_single_issue(props, "statements[1]", "over maxStatementBytes (16777216)");

    let props = with(
        with(base(), "/maxStatementBytes", json!(20)),
        "/statements",
        json!(["SELECT 1", "SELECT 'twenty-one bytes'"]),
    );
    assert_single_issue(props, "statements[1]", "is 25 bytes, over maxStatementBytes (20)");

    let mut props = with(base(), "/maxStatementBytes", json!(36));
    props["onDelete"] = json!("run");
    props["deleteStatements"] = json!(["DROP DATABASE IF EXISTS orders SYNC -- and a comment"]);
    assert_single_issue(props, "deleteStatements[0]", "over maxStatementBytes (36)");

    let raised = with(
        with(base(), "/maxStatementBytes", json!(32 << 20)),
        "/statements",
        json!([format!("SELECT '{}'", "x".repeat(17 << 20))]),
    );
    validate("orders-schema", &raised).expect("a raised limit admits it");
}

#[test]
fn max_statement_bytes_range() {
    assert_single_issue(
        with(base(), "/maxStatementBytes", json!(0)),
        "maxStatementBytes",
        "positive number of bytes",
    );
    assert_single_issue(
        with(base(), "/maxStatementBytes", json!(2_000_000_000u64)),
        "maxStatementBytes",
        "at most 1073741824",
    );
}

#[test]
fn kube_config_combinations_fail_at_declaration() {
    let cluster = json!({ "name": "c", "server": "https://c.example" });
    let user = json!({ "name": "u", "certFile": "/u.crt", "keyFile": "/u.key" });
    for (kube_config, path, phrase) in [
        (
            json!({ "cluster": cluster }),
            "kubeConfig.user",
            "is required with kubeConfig.cluster",
        ),
        (
            json!({ "user": user }),
            "kubeConfig.cluster",
            "is required with kubeConfig.user",
        ),
        (
            json!({ "cluster": cluster, "user": user, "kubeconfigPath": "/k" }),
            "kubeConfig.kubeconfigPath",
            "cannot be combined with an inline cluster and user",
        ),
        (
            json!({ "cluster": cluster, "user": user, "loadFromDefault": true }),
            "kubeConfig.loadFromDefault",
            "cannot be true together with an inline cluster and user",
        ),
        (
            json!({ "loadFromDefault": false }),
            "kubeConfig.loadFromDefault",
            "there is no configuration to load",
        ),
    ] {
        assert_single_issue(with(base(), "/kubeConfig", kube_config), path, phrase);
    }
    for fine in [
        json!({ "cluster": cluster, "user": user }),
        json!({ "kubeconfigPath": "/k", "loadFromDefault": false }),
        json!({ "context": "prod" }),
    ] {
        if let Err(e) = validate("orders-schema", &with(base(), "/kubeConfig", fine.clone())) {
            panic!("{fine} was refused: {e}");
        }
    }
}

#[test]
fn settings_values_are_scalars() {
    for bad in [json!({ "a": 1 }), json!([1]), json!(null), json!(true)] {
        assert_single_issue(
            with(base(), "/settings/max_threads", bad),
            "settings[\"max_threads\"]",
            "must be a string or a number",
        );
    }
    assert_single_issue(
        with(base(), "/settings/log_comment", json!("a\nb")),
        "settings[\"log_comment\"]",
        "control characters",
    );
    assert_single_issue(
        with(base(), "/settings", json!([])),
        "settings",
        "must be an object",
    );
}

// --- onDelete / deleteStatements -------------------------------------------

#[test]
fn on_delete_values() {
    assert_single_issue(with(base(), "/onDelete", json!("drop")), "onDelete", "'retain'");
    assert_single_issue(
        with(base(), "/onDelete", json!(true)),
        "onDelete",
        "'retain' or 'run'",
    );
}

#[test]
fn on_delete_run_requires_delete_statements() {
    let err = assert_issue(
        with(base(), "/onDelete", json!("run")),
        "deleteStatements",
        "is required when onDelete is 'run'",
    );
    assert_eq!(err.issues.len(), 1);
    assert_single_issue(
        with(
            with(base(), "/onDelete", json!("run")),
            "/deleteStatements",
            json!([]),
        ),
        "deleteStatements",
        "at least one statement",
    );
    assert_single_issue(
        with(
            with(base(), "/onDelete", json!("run")),
            "/deleteStatements",
            json!(["DROP DATABASE IF EXISTS x", " "]),
        ),
        "deleteStatements[1]",
        "blank",
    );
}

#[test]
fn delete_statements_rejected_under_retain() {
    for on_delete in [None, Some("retain")] {
        let mut props = with(
            base(),
            "/deleteStatements",
            json!(["DROP DATABASE IF EXISTS orders"]),
        );
        if let Some(v) = on_delete {
            props = with(props, "/onDelete", json!(v));
        }
        let err = rejected(&props);
        assert_eq!(err.issues.len(), 1, "{err}");
        assert_eq!(err.issues[0].path, "deleteStatements");
        assert!(err.issues[0].reason.contains("would never run"), "{err}");
        assert!(
            err.issues[0].reason.contains("onDelete: 'run'"),
            "should say what to do: {err}"
        );
    }
    // Even a malformed list is reported once: the fix is to remove it.
    assert_single_issue(
        with(base(), "/deleteStatements", json!([])),
        "deleteStatements",
        "would never run",
    );
}

// --- tuning knobs ----------------------------------------------------------

#[test]
fn wait_for_pod() {
    assert_single_issue(
        with(base(), "/waitForPod/timeoutMs", json!(0)),
        "waitForPod.timeoutMs",
        "positive",
    );
    assert_single_issue(
        with(base(), "/waitForPod/timeoutMs", json!(86_400_001)),
        "waitForPod.timeoutMs",
        "24 hours",
    );
    assert_single_issue(
        with(base(), "/waitForPod/timeoutMs", json!(1.5)),
        "waitForPod.timeoutMs",
        "whole number",
    );
    assert_single_issue(
        with(base(), "/waitForPod", json!(1000)),
        "waitForPod",
        "must be an object",
    );
    assert_single_issue(
        with(base(), "/waitForPod/timeout", json!(1000)),
        "waitForPod.timeout",
        "not a recognised option",
    );
}

#[test]
fn statement_timeout() {
    assert_single_issue(
        with(base(), "/statementTimeoutMs", json!(0)),
        "statementTimeoutMs",
        "positive",
    );
    assert_single_issue(
        with(base(), "/statementTimeoutMs", json!(1e12)),
        "statementTimeoutMs",
        "24 hours",
    );
    assert_single_issue(
        with(base(), "/statementTimeoutMs", json!("300s")),
        "statementTimeoutMs",
        "whole number",
    );
}

#[test]
fn max_reconcile_passes() {
    assert_single_issue(
        with(base(), "/maxReconcilePasses", json!(0)),
        "maxReconcilePasses",
        "at least 1",
    );
    assert_single_issue(
        with(base(), "/maxReconcilePasses", json!(101)),
        "maxReconcilePasses",
        "at most 100",
    );
    assert_single_issue(
        with(base(), "/maxReconcilePasses", json!(2.5)),
        "maxReconcilePasses",
        "whole number",
    );
}

#[test]
fn retry() {
    assert_single_issue(
        with(base(), "/retry/maxAttempts", json!(0)),
        "retry.maxAttempts",
        "at least 1",
    );
    assert_single_issue(
        with(base(), "/retry/maxAttempts", json!(21)),
        "retry.maxAttempts",
        "at most 20",
    );
    assert_single_issue(
        with(base(), "/retry/backoffMs", json!(-1)),
        "retry.backoffMs",
        "must not be negative",
    );
    assert_single_issue(
        with(base(), "/retry/backoffMs", json!(600_001)),
        "retry.backoffMs",
        "at most 600000",
    );
    assert_single_issue(with(base(), "/retry", json!(3)), "retry", "must be an object");
    assert_single_issue(
        with(base(), "/retry/attempts", json!(3)),
        "retry.attempts",
        "not a recognised option",
    );
}

// --- kubeConfig / readyBarrier ----------------------------------------------

#[test]
fn kube_config() {
    assert_single_issue(
        with(base(), "/kubeConfig", json!("~/.kube/config")),
        "kubeConfig",
        "must be an object",
    );
    assert_single_issue(
        with(base(), "/kubeConfig/path", json!("x")),
        "kubeConfig.path",
        "kubeconfigPath",
    );
    assert_single_issue(
        with(base(), "/kubeConfig/skipTLSVerify", json!("yes")),
        "kubeConfig.skipTLSVerify",
        "boolean",
    );
    assert_single_issue(
        with(base(), "/kubeConfig/cluster", json!({ "name": "c" })),
        "kubeConfig.cluster.server",
        "is required",
    );
    for credential in ["token", "certData", "keyData"] {
        let props = with(
            base(),
            "/kubeConfig/user",
            json!({ "name": "u", credential: "secret" }),
        );
        let err = assert_issue(
            props,
            &format!("kubeConfig.user.{credential}"),
            "inline credential",
        );
        assert!(!err.message.contains("secret\""), "{err}");
    }
}

#[test]
fn kube_config_as_an_alchemy_connection() {
    // Kubernetes.KubeConfig(...), a raw Connection, and a cluster resource's
    // attributes carrying one (other attributes included) are accepted as written.
    for fine in [
        json!({ "auth": { "kind": "kubeconfig", "path": "/k", "context": "prod" } }),
        json!({ "endpoint": "https://10.0.0.1", "certificateAuthorityData": "Q0E=", "auth": { "kind": "aws-eks", "clusterName": "prod", "region": "eu-west-1" } }),
        json!({ "clusterName": "prod", "arn": "arn:aws:eks:x", "connection": { "auth": { "kind": "exec", "command": "aws", "args": ["eks", "get-token"] } } }),
    ] {
        let config = validate("orders-schema", &with(base(), "/kubeConfig", fine.clone()))
            .unwrap_or_else(|e| panic!("{fine} was refused: {e}"));
        // Kept verbatim: Alchemy's adapter reads it back at call time.
        assert_eq!(serde_json::to_value(&config).unwrap()["kubeConfig"], fine);
    }
    assert_single_issue(
        with(base(), "/kubeConfig", json!({ "auth": {} })),
        "kubeConfig.auth.kind",
        "is required",
    );
    assert_single_issue(
        with(base(), "/kubeConfig", json!({ "auth": { "kind": "" } })),
        "kubeConfig.auth.kind",
        "empty",
    );
    assert_single_issue(
        with(
            base(),
            "/kubeConfig",
            json!({ "endpoint": 443, "auth": { "kind": "aws-eks" } }),
        ),
        "kubeConfig.endpoint",
        "must be a string",
    );
    assert_single_issue(
        with(
            base(),
            "/kubeConfig",
            json!({ "connection": { "endpoint": "https://x" } }),
        ),
        "kubeConfig.connection.auth",
        "is required",
    );
    // The kinds that hold the credential itself would put it in Alchemy's state.
    for (kube_config, path) in [
        (
            json!({ "endpoint": "https://x", "auth": { "kind": "token", "token": "s3cr3t" } }),
            "kubeConfig.auth.kind",
        ),
        (
            json!({ "connection": { "endpoint": "https://x", "auth": { "kind": "client-cert", "certificate": "C", "key": "s3cr3t" } } }),
            "kubeConfig.connection.auth.kind",
        ),
    ] {
        let err = assert_issue(
            with(base(), "/kubeConfig", kube_config),
            path,
            "stores verbatim in its state",
        );
        assert_eq!(err.issues.len(), 1, "{err}");
        assert!(!err.message.contains("s3cr3t"), "{err}");
    }
}

#[test]
fn lease_and_ledger() {
    assert_single_issue(
        with(base(), "/lease", json!("yes")),
        "lease",
        "must be true, false or { ttlSeconds }",
    );
    assert_single_issue(
        with(base(), "/lease", json!({ "ttlSeconds": 1 })),
        "lease.ttlSeconds",
        "must be at least 5",
    );
    assert_single_issue(
        with(base(), "/lease", json!({ "ttlSeconds": 1.5 })),
        "lease.ttlSeconds",
        "whole number",
    );
    assert_single_issue(with(base(), "/lease", json!({ "ttl": 30 })), "lease.ttl", "");
    assert_single_issue(
        with(base(), "/ledger", json!({})),
        "ledger.database",
        "is required",
    );
    assert_single_issue(
        with(base(), "/ledger", json!(true)),
        "ledger",
        "must be an object: { database, table? }",
    );
    assert_single_issue(
        with(base(), "/ledger", json!({ "database": "ops-db" })),
        "ledger.database",
        "plain ClickHouse identifier",
    );
    assert_single_issue(
        with(
            base(),
            "/ledger",
            json!({ "database": "ops", "table": "t`; DROP" }),
        ),
        "ledger.table",
        "plain ClickHouse identifier",
    );
    for fine in [
        json!(true),
        json!(false),
        json!({}),
        json!({ "ttlSeconds": 3600 }),
    ] {
        validate("orders-schema", &with(base(), "/lease", fine.clone()))
            .unwrap_or_else(|e| panic!("{fine}: {e}"));
    }
}

#[test]
fn ready_barrier() {
    assert_single_issue(
        with(base(), "/readyBarrier", json!("true")),
        "readyBarrier",
        "must be a boolean",
    );
}

// --- all at once ------------------------------------------------------------

#[test]
fn every_problem_is_listed_in_one_error() {
    let props = json!({
        "target": { "namespace": "Bad_NS", "podSelector": { "bad key": "v" }, "container": "" },
        "client": { "password": "x", "port": 0, "user": "a\nb", "passwordEnv": "1X" },
        "statements": ["CREATE DATABASE IF NOT EXISTS x", "   "],
        "execution": { "mode": "sideways" },
        "settings": { "Bad": 1, "ok": [1] },
        "onDelete": "run",
        "waitForPod": { "timeoutMs": 0 },
        "statementTimeoutMs": -5,
        "maxReconcilePasses": 0,
        "retry": { "maxAttempts": 99, "backoffMs": -1 },
        "kubeConfig": { "bogus": true },
        "readyBarrier": "yes",
        "executor": {},
        "extra": 1,
    });
    let err = rejected(&props);
    let expected = [
        "target.namespace",
        "target.podSelector[\"bad key\"]",
        "target.container",
        "client.password",
        "client.port",
        "client.user",
        "client.passwordEnv",
        "statements[1]",
        "execution.mode",
        "settings[\"Bad\"]",
        "settings[\"ok\"]",
        "deleteStatements",
        "waitForPod.timeoutMs",
        "statementTimeoutMs",
        "maxReconcilePasses",
        "retry.maxAttempts",
        "retry.backoffMs",
        "kubeConfig.bogus",
        "readyBarrier",
        "executor",
        "extra",
    ];
    for path in expected {
        assert!(
            err.issues.iter().any(|i| i.path == path),
            "missing issue at {path}:\n{err}"
        );
        assert!(
            err.message.contains(&format!("\n  - {path}: ")),
            "message lacks {path}:\n{err}"
        );
    }
    assert_eq!(
        err.issues.len(),
        expected.len(),
        "one issue per problem, none duplicated:\n{err}"
    );
    // Issues follow the Props table order, unknown keys last.
    let first = |p: &str| err.issues.iter().position(|i: &ConfigIssue| i.path == p).unwrap();
    assert!(first("target.namespace") < first("client.port"));
    assert!(first("client.port") < first("statements[1]"));
    assert!(first("retry.backoffMs") < first("kubeConfig.bogus"));
    assert_eq!(err.issues.last().map(|i| i.path.as_str()), Some("extra"));
}

#[test]
fn resource_id_is_carried() {
    let err = validate("billing-schema", &json!({})).unwrap_err();
    assert_eq!(err.resource_id.as_deref(), Some("billing-schema"));
    assert!(
        err.message
            .starts_with("Invalid ClickHouseSchema configuration for 'billing-schema':")
    );
}

// --- ON CLUSTER under onCluster ------------------------------------------------

fn on_cluster(statements: Value) -> Value {
    with(
        with(
            base(),
            "/execution",
            json!({ "mode": "onCluster", "cluster": "cluster" }),
        ),
        "/statements",
        statements,
    )
}

#[test]
fn on_cluster_statements_must_carry_the_clause() {
    let props = on_cluster(json!([
        "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER 'cluster'",
        "CREATE TABLE IF NOT EXISTS orders.t (a UInt8) ENGINE = MergeTree ORDER BY a",
    ]));
    let err = assert_issue(
        props,
        "statements[1]",
        "must be cluster-wide under execution.mode 'onCluster' (",
    );
    assert_eq!(err.issues.len(), 1, "statement 0 carries the clause:\n{err}");
    let reason = &err.issues[0].reason;
    assert!(
        reason.contains("statements 1"),
        "the reason names the statement: {reason}"
    );
    assert!(reason.ends_with(')'), "{reason}");
}

#[test]
fn on_cluster_names_every_offending_statement() {
    let props = on_cluster(json!([
        "USE orders",
        "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER other",
        "SELECT 'ON CLUSTER cluster'",
        "CREATE DATABASE IF NOT EXISTS x ON CLUSTER `cluster`",
    ]));
    let err = rejected(&props);
    let paths: Vec<&str> = err.issues.iter().map(|i| i.path.as_str()).collect();
    assert_eq!(
        paths,
        ["statements[0]", "statements[1]", "statements[2]"],
        "{err}"
    );
}

#[test]
fn on_cluster_checks_delete_statements_under_run() {
    let props = with(
        with(
            on_cluster(json!(["CREATE DATABASE IF NOT EXISTS orders ON CLUSTER cluster"])),
            "/onDelete",
            json!("run"),
        ),
        "/deleteStatements",
        json!(["DROP DATABASE IF EXISTS orders"]),
    );
    assert_single_issue(props, "deleteStatements[0]", "must be cluster-wide");
}

#[test]
fn fanout_does_not_check_on_cluster() {
    let props = with(
        base(),
        "/statements",
        json!(["USE orders", "SET max_threads = 1", "INSERT INTO t VALUES (1)"]),
    );
    assert!(validate("x", &props).is_ok());
}

#[test]
fn a_broken_execution_block_is_not_compounded_by_statement_checks() {
    let props = with(
        with(base(), "/execution", json!({ "mode": "onCluster" })),
        "/statements",
        json!(["CREATE DATABASE IF NOT EXISTS orders"]),
    );
    assert_single_issue(props, "execution.cluster", "is required");
}

#[test]
fn an_entry_holding_two_statements_is_refused_at_its_index() {
    let props = with(
        base(),
        "/statements",
        json!([
            "CREATE DATABASE IF NOT EXISTS orders;",
            "CREATE TABLE IF NOT EXISTS orders.t (s String DEFAULT 'a;b') ENGINE = Memory; -- one; statement",
            "CREATE TABLE IF NOT EXISTS orders.u (id UInt64) ENGINE = Memory; DROP TABLE orders.t",
        ]),
    );
    let err = assert_issue(props, "statements[2]", "holds more than one statement");
    assert_eq!(err.issues.len(), 1, "only entry 2: {err}");
    assert!(
        err.to_string()
            .contains("line 1, column 66 follows the ';' at byte 63"),
        "{err}"
    );
    // deleteStatements too, when they run.
    let props = with(
        with(base(), "/onDelete", json!("run")),
        "/deleteStatements",
        json!(["DROP TABLE IF EXISTS orders.t; DROP DATABASE orders"]),
    );
    assert_issue(props, "deleteStatements[0]", "holds more than one statement");
}

#[test]
fn a_fanout_replicated_table_needing_a_uuid_is_refused_with_what_to_write() {
    let argless = "CREATE TABLE IF NOT EXISTS orders.t (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id";
    let props = with(
        base(),
        "/statements",
        json!(["CREATE DATABASE IF NOT EXISTS orders", argless]),
    );
    let err = assert_issue(
        props,
        "statements[1]",
        "write the path out, e.g. ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')",
    );
    assert!(err.to_string().contains("code 36"), "{err}");
    let uuid = "CREATE TABLE orders.u (id UInt64) ENGINE = ReplicatedMergeTree('/t/{uuid}', '{replica}') ORDER BY id";
    assert_issue(
        with(
            base(),
            "/statements",
            json!(["CREATE DATABASE orders ENGINE = Atomic", uuid]),
        ),
        "statements[1]",
        "holds {uuid}",
    );
    // Under onCluster the statement carries ON CLUSTER, whose initiator sends the UUID.
    let on_cluster = with(
        with(
            base(),
            "/statements",
            json!([
                "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER main",
                "CREATE TABLE IF NOT EXISTS orders.t ON CLUSTER main (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id",
            ]),
        ),
        "/execution",
        json!({ "mode": "onCluster", "cluster": "main" }),
    );
    assert!(validate("orders-schema", &on_cluster).is_ok());
    // In a Replicated database the server supplies it, but a fanout there is refused for another
    // reason: the database replicates the statement by itself (see the next test).
    let replicated_db = with(
        base(),
        "/statements",
        json!([
            "CREATE DATABASE IF NOT EXISTS orders ENGINE = Replicated('/db/orders', '{shard}', '{replica}')",
            argless
        ]),
    );
    let err = assert_issue(replicated_db, "statements[1]", "object of database orders");
    assert!(!err.to_string().contains("{uuid}"), "{err}");
}

#[test]
fn a_fanout_into_a_replicated_database_is_refused_at_its_index_saying_why() {
    let props = with(
        base(),
        "/statements",
        json!([
            "CREATE DATABASE IF NOT EXISTS orders ENGINE = Replicated('/db/orders', '{shard}', '{replica}')",
            "CREATE TABLE IF NOT EXISTS orders.t (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id",
            "ALTER TABLE orders.t ADD COLUMN IF NOT EXISTS note String",
        ]),
    );
    let err = assert_issue(
        props,
        "statements[1]",
        "which the statements create with ENGINE = Replicated",
    );
    let text = err.to_string();
    assert!(text.contains("statements[2]"), "{text}");
    assert!(text.contains("DDL log once per pod"), "{text}");
    assert!(
        !text.contains("statements[0]"),
        "the database itself runs on every pod: {text}"
    );
}

#[test]
fn on_cluster_in_a_replicated_database_is_refused_at_its_index() {
    let props = with(
        with(
            base(),
            "/statements",
            json!([
                "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER main ENGINE = Replicated('/db/orders', '{shard}', '{replica}')",
                "CREATE TABLE IF NOT EXISTS orders.t ON CLUSTER main (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id",
            ]),
        ),
        "/execution",
        json!({ "mode": "onCluster", "cluster": "main" }),
    );
    let err = assert_issue(
        props,
        "statements[1]",
        "creates orders.t ON CLUSTER in database orders",
    );
    assert!(err.to_string().contains("code 80"), "{err}");
}
