//! Helpers shared by the sandbox tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use clickhouse_schema_core::config::{ClientConfig, KubeConfigOptions};
use clickhouse_schema_core::kubernetes::cluster_id::ClusterEndpoint;
use clickhouse_schema_core::transport::ExecRequest;
use serde_json::Value;

pub(crate) const NAMESPACE: &str = "sandbox";
pub(crate) const CONTAINER: &str = "clickhouse";

/// The selector the sandbox's ClickHouse pods carry.
pub(crate) fn selector() -> BTreeMap<String, String> {
    let mut s = BTreeMap::new();
    s.insert("clickhouse.altinity.com/chi".to_owned(), "sandbox".to_owned());
    s
}

pub(crate) fn with_path(path: &Path, context: Option<&str>) -> KubeConfigOptions {
    KubeConfigOptions {
        kubeconfig_path: Some(path.display().to_string()),
        context: context.map(str::to_owned),
        ..Default::default()
    }
}

/// The endpoint a kubeconfig names, read straight from its YAML with a plain
/// YAML parser: an oracle independent of the crate's own resolution.
pub(crate) fn expected_endpoint(kubeconfig: &Path, context: Option<&str>) -> Option<ClusterEndpoint> {
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
pub(crate) fn statement_exec(pod: &str, statement: &str, timeout: Duration) -> ExecRequest {
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
pub(crate) fn shell_exec(pod: &str, script: &str, timeout: Duration) -> ExecRequest {
    ExecRequest {
        namespace: NAMESPACE.into(),
        pod: pod.into(),
        container: CONTAINER.into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        stdin: String::new(),
        timeout,
    }
}

/// The product's transport on `sb` with the identity its RBAC asks for:
/// list pods + create pods/exec (context `sandbox-minimal`).
pub(crate) async fn minimal_transport(
    sb: &clickhouse_schema_sandbox::Sandbox,
) -> Result<clickhouse_schema_kube::KubeTransport, String> {
    let conn =
        clickhouse_schema_kube::connect(Some(&with_path(sb.kubeconfig_path(), Some("sandbox-minimal"))))
            .await
            .map_err(|e| e.to_string())?;
    Ok(clickhouse_schema_kube::KubeTransport::from(&conn))
}

/// A syntax error through the product's exec: ClickHouse's code is the exit
/// status and its text is on stderr, nothing on stdout.
pub(crate) async fn expect_syntax_error(
    t: &clickhouse_schema_kube::KubeTransport,
    pod: &str,
    timeout: Duration,
) -> Result<(), String> {
    use clickhouse_schema_core::transport::Executor;
    let out = t
        .exec(statement_exec(pod, "SELEC 1", timeout))
        .await
        .map_err(|e| format!("SELEC 1: {e}"))?;
    check(
        out.exit_code == 62 && out.stderr.contains("Code: 62") && out.stdout.is_empty(),
        format!("SELEC 1: {out:?}"),
    )
}

/// The logged exec ran the product's command, framed for exactly its stdin,
/// with no statement text in argv (`words` are statement fragments).
pub(crate) fn check_framed_on_stdin(
    r: &clickhouse_schema_sandbox::ExecRecord,
    words: &[&str],
) -> Result<(), String> {
    let stdin = r.stdin_text();
    check(
        r.argv.len() == 3
            && r.argv[0] == "sh"
            && r.argv[2].contains(&format!("s=$($t head -c {} <&3; echo .)", stdin.len()))
            && r.argv[2].contains("printf '%s' \"$s\" 4<&- | exec $t clickhouse-client"),
        format!("argv frames stdin: {:?}", r.argv),
    )?;
    check(
        !r.argv.iter().any(|a| words.iter().any(|w| a.contains(w))),
        format!("statement in argv: {:?}", r.argv),
    )
}

/// `Ok` when `ok`, else `Err(what)`: scenario steps return their first failure
/// so the sandbox is always shut down before the test reports it.
pub(crate) fn check(ok: bool, what: String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what) }
}

/// Cancellation as an AbortSignal gives it, seen within 10 ms.
pub(crate) struct Flag(pub(crate) std::sync::Arc<std::sync::atomic::AtomicBool>);

impl clickhouse_schema_core::transport::Cancel for Flag {
    fn is_cancelled(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn cancelled(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            while !self.is_cancelled() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    }
}

/// The real clocks and timers (a suspend is not told apart).
pub(crate) struct RealClock(pub(crate) std::time::Instant);

impl clickhouse_schema_core::transport::Clock for RealClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }

    fn now_counting_suspend(&self) -> Duration {
        self.0.elapsed()
    }

    fn now_iso8601(&self) -> String {
        let t = jiff::Timestamp::now();
        format!(
            "{:.3}",
            jiff::Timestamp::from_millisecond(t.as_millisecond()).expect("in range")
        )
    }

    fn sleep(&self, duration: Duration) -> impl std::future::Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }
}
