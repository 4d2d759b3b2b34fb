//! Helpers shared by the sandbox tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use clickhouse_schema_core::cluster_id::ClusterEndpoint;
use clickhouse_schema_core::config::{ClientConfig, KubeConfigOptions};
use clickhouse_schema_core::transport::ExecRequest;
use serde_json::Value;

pub const NAMESPACE: &str = "sandbox";
pub const CONTAINER: &str = "clickhouse";

/// The selector the sandbox's ClickHouse pods carry.
pub fn selector() -> BTreeMap<String, String> {
    let mut s = BTreeMap::new();
    s.insert("clickhouse.altinity.com/chi".to_owned(), "sandbox".to_owned());
    s
}

pub fn with_path(path: &Path, context: Option<&str>) -> KubeConfigOptions {
    KubeConfigOptions {
        kubeconfig_path: Some(path.display().to_string()),
        context: context.map(str::to_owned),
        ..Default::default()
    }
}

/// The endpoint a kubeconfig names, read straight from its YAML with a plain
/// YAML parser: an oracle independent of the crate's own resolution.
pub fn expected_endpoint(kubeconfig: &Path, context: Option<&str>) -> Option<ClusterEndpoint> {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig readable");
    let doc: Value = serde_saphyr::from_str(&text).expect("kubeconfig is YAML");
    let context = match context {
        Some(c) => c.to_owned(),
        None => doc.get("current-context")?.as_str()?.to_owned(),
    };
    let find = |list: &str, name: &str| -> Option<Value> {
        doc.get(list)?
            .as_array()?
            .iter()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
            .cloned()
    };
    let cluster_name = find("contexts", &context)?["context"]["cluster"]
        .as_str()?
        .to_owned();
    let cluster = find("clusters", &cluster_name)?["cluster"].clone();
    let text = |k: &str| cluster.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(ClusterEndpoint {
        cluster_name,
        server: text("server").unwrap_or_default(),
        ca_data: text("certificate-authority-data"),
        ca_file: text("certificate-authority"),
        skip_tls_verify: cluster
            .get("insecure-skip-tls-verify")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// An exec of the product's own rendered command with `statement` on stdin.
pub fn statement_exec(pod: &str, statement: &str, timeout: Duration) -> ExecRequest {
    let client = ClientConfig {
        user: "default".into(),
        database: "default".into(),
        password_env: "CLICKHOUSE_PASSWORD".into(),
        port: 9000,
    };
    ExecRequest {
        namespace: NAMESPACE.into(),
        pod: pod.into(),
        container: CONTAINER.into(),
        command: clickhouse_schema_core::command::render(&client, &BTreeMap::new(), statement.len(), timeout),
        stdin: statement.into(),
        timeout,
    }
}

/// A shell command on a pod of a local sandbox, stdin framed like the product does.
pub fn shell_exec(pod: &str, script: &str, timeout: Duration) -> ExecRequest {
    ExecRequest {
        namespace: NAMESPACE.into(),
        pod: pod.into(),
        container: CONTAINER.into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        stdin: String::new(),
        timeout,
    }
}
