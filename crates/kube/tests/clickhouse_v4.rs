//! The product's exec against real ClickHouse behind an API server that only
//! speaks `v4.channel.k8s.io` (clusters before Kubernetes 1.30): v4 has no
//! stdin EOF frame, so this proves the `head -c <N>` framing and the status
//! frame end every exec without closing stdin. One sandbox, on whichever
//! instance is free.

mod common;

use std::time::Duration;

use clickhouse_schema_core::transport::Executor;
use clickhouse_schema_sandbox::{ExecProtocol, Layout, Sandbox, SandboxOptions};
use common::*;

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_run_on_real_clickhouse_over_v4() {
    let sb = Sandbox::start(SandboxOptions {
        layout: Layout::replicas(1),
        exec_protocols: vec![ExecProtocol::V4],
        ..SandboxOptions::default()
    })
    .await
    .expect("sandbox with ClickHouse starts");
    let result = scenarios(&sb).await;
    sb.shutdown().await.expect("shutdown");
    result.unwrap_or_else(|e| panic!("{e}"));
}

async fn scenarios(sb: &Sandbox) -> Result<(), String> {
    let t = minimal_transport(sb).await?;
    let pod = &sb.pod_names()[0];

    let out = t
        .exec(statement_exec(pod, "SELECT 1", TIMEOUT))
        .await
        .map_err(|e| format!("SELECT 1: {e}"))?;
    check(
        out.stdout == "1\n" && out.exit_code == 0,
        format!("SELECT 1: {out:?}"),
    )?;

    // ClickHouse's code as the exit status and its text on stderr: the status
    // frame arrived although stdin stayed open.
    expect_syntax_error(&t, pod, TIMEOUT).await?;

    let log = sb.exec_log();
    check(log.len() == 2, format!("2 execs logged: {log:?}"))?;
    for (r, statement) in log.iter().zip(["SELECT 1", "SELEC 1"]) {
        check(
            r.protocol == "v4.channel.k8s.io" && r.outcome == "completed",
            format!("exec record: {r:?}"),
        )?;
        check(r.stdin_text() == statement, format!("stdin as sent: {r:?}"))?;
        check_framed_on_stdin(r, &["SELEC"])?;
    }
    check(log[1].exit_code == Some(62), format!("logged exit: {:?}", log[1]))?;
    Ok(())
}
