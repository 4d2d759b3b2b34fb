//! The product's exec against real ClickHouse 18.16 servers behind the
//! sandbox API: the rendered command, statements on stdin only, exit codes
//! and ClickHouse's own error text. One sandbox for the binary, on whichever
//! instance is free (another test run may hold any fixed one).

mod common;

use std::time::Duration;

use clickhouse_schema_core::transport::{Executor, PodLister};
use clickhouse_schema_sandbox::{Sandbox, SandboxOptions};
use common::*;

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_run_on_real_clickhouse_through_stdin() {
    let sb = Sandbox::start(SandboxOptions::default())
        .await
        .expect("sandbox with ClickHouse starts");
    let result = scenarios(&sb).await;
    sb.shutdown().await.expect("shutdown");
    result.unwrap_or_else(|e| panic!("{e}"));
}

/// Steps run in order against one sandbox; the first failure is returned so
/// the sandbox is always shut down before the test reports it.
async fn scenarios(sb: &Sandbox) -> Result<(), String> {
    let t = minimal_transport(sb).await?;

    let mut pods = t
        .list_pods(NAMESPACE, &selector())
        .await
        .map_err(|e| format!("list: {e}"))?;
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    check(pods.len() == 3, format!("3 pods: {pods:?}"))?;
    for p in &pods {
        check(
            p.ready && p.phase.as_deref() == Some("Running") && p.uid.is_some() && p.has_container(CONTAINER),
            format!("pod state: {p:?}"),
        )?;
    }

    sb.clear_exec_log();
    for p in &pods {
        let out = t
            .exec(statement_exec(&p.name, "SELECT 1", TIMEOUT))
            .await
            .map_err(|e| format!("SELECT 1 on {}: {e}", p.name))?;
        check(
            out.stdout == "1\n" && out.exit_code == 0,
            format!("SELECT 1 on {}: {out:?}", p.name),
        )?;
    }

    // DDL and a read-back, with a literal that must only travel on stdin.
    let pod = &pods[0].name;
    let ddl = "CREATE TABLE IF NOT EXISTS default.kube_probe (s String) ENGINE = Memory";
    let out = t
        .exec(statement_exec(pod, ddl, TIMEOUT))
        .await
        .map_err(|e| format!("create: {e}"))?;
    check(out.exit_code == 0, format!("create: {out:?}"))?;
    let insert = "INSERT INTO default.kube_probe VALUES ('s3cr3t-literal ''quoted'' ü')";
    let out = t
        .exec(statement_exec(pod, insert, TIMEOUT))
        .await
        .map_err(|e| format!("insert: {e}"))?;
    check(out.exit_code == 0, format!("insert: {out:?}"))?;
    let out = t
        .exec(statement_exec(pod, "SELECT s FROM default.kube_probe", TIMEOUT))
        .await
        .map_err(|e| format!("select: {e}"))?;
    check(
        out.stdout == "s3cr3t-literal \\'quoted\\' ü\n" && out.exit_code == 0,
        format!("select: {out:?}"),
    )?;

    expect_syntax_error(&t, pod, TIMEOUT).await?;

    // Every statement reached the pod on stdin, byte for byte, and never in argv.
    let log = sb.exec_log();
    check(log.len() == 7, format!("7 execs logged: {log:?}"))?;
    for r in &log {
        check(
            r.protocol == "v5.channel.k8s.io" && r.outcome == "completed" && r.user == "sandbox-minimal",
            format!("exec record: {r:?}"),
        )?;
        check_framed_on_stdin(r, &["SELECT", "s3cr3t", "SELEC"])?;
    }
    let stdins: Vec<String> = log.iter().map(|r| r.stdin_text()).collect();
    check(
        stdins[3..] == [ddl, insert, "SELECT s FROM default.kube_probe", "SELEC 1"],
        format!("stdin as sent: {stdins:?}"),
    )?;
    check(log[6].exit_code == Some(62), format!("logged exit: {:?}", log[6]))?;
    Ok(())
}
