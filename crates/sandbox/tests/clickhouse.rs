//! The sandbox with real ClickHouse servers (crate `clickhouse-schema-sandbox-hosts`), driven by kubectl 1.32 and
//! 1.33 and by kube-rs exactly as the product and an operator would. Needs root and the packages
//! clickhouse-server, clickhouse-client and zookeeper.

mod common;

use std::collections::BTreeMap;

use clickhouse_schema_sandbox::{AddPod, DropPoint, Fault, Sandbox, SandboxOptions};
use common::*;

/// The product's command: SQL on stdin, never in argv.
const CLIENT: &str = r#"clickhouse-client --port 9000 --password "${CLICKHOUSE_PASSWORD:-}""#;

async fn sql(c: &kube::Client, pod: &str, statement: &str) -> ExecOutput {
    kube_exec(c, pod, "clickhouse", &["sh", "-c", CLIENT], statement.as_bytes())
        .await
        .expect("exec")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_pods_via_kubectl_and_kube_rs() {
    let started = std::time::Instant::now();
    let sb = Sandbox::start(SandboxOptions::default())
        .await
        .expect("sandbox with ClickHouse hosts starts");
    eprintln!("3-pod sandbox ready in {:.2?}", started.elapsed());
    let kc = sb.kubeconfig_path().to_path_buf();

    for bin in [KUBECTL_133, KUBECTL_132] {
        let exec = [
            "exec",
            "-i",
            "chi-sandbox-sandbox-0-0-0",
            "-c",
            "clickhouse",
            "--",
            "sh",
            "-c",
            CLIENT,
        ];
        let ok = kubectl(bin, &kc, &exec, "SELECT 1\n").await;
        assert_eq!(text(&ok.stdout), "1\n", "{bin}: {}", text(&ok.stderr));
        assert_eq!(ok.status.code(), Some(0));

        let missing = kubectl(bin, &kc, &exec, "SELECT * FROM nope.t\n").await;
        assert_eq!(
            missing.status.code(),
            Some(81),
            "{bin}: {}",
            text(&missing.stderr)
        );
        assert!(text(&missing.stderr).contains("Code: 81"));
        assert!(text(&missing.stderr).contains("command terminated with exit code 81"));

        // Codes above 255 reach the shell mod 256: 395 -> 139.
        let thrown = kubectl(bin, &kc, &exec, "SELECT throwIf(1)\n").await;
        assert_eq!(thrown.status.code(), Some(139), "{bin}: {}", text(&thrown.stderr));
        assert!(text(&thrown.stderr).contains("Code: 395"));

        let wrong = kubectl(
            bin,
            &kc,
            &[
                "exec",
                "-i",
                "chi-sandbox-sandbox-0-0-0",
                "-c",
                "server",
                "--",
                "true",
            ],
            "",
        )
        .await;
        assert!(
            text(&wrong.stderr).contains("container server is not valid"),
            "{}",
            text(&wrong.stderr)
        );
    }

    // The product's client and permissions: list pods + create pods/exec only.
    let minimal = client(&sb, "sandbox-minimal").await;
    let one = sql(&minimal, "chi-sandbox-sandbox-0-1-0", "SELECT 1").await;
    assert_eq!(
        (one.stdout.as_str(), one.exit_code()),
        ("1\n", Some(0)),
        "{one:?}"
    );
    let syntax = sql(&minimal, "chi-sandbox-sandbox-0-1-0", "SELEC 1").await;
    assert_eq!(syntax.exit_code(), Some(62), "{syntax:?}");
    assert!(syntax.stderr.contains("Syntax error"));
    let cluster = sql(
        &minimal,
        "chi-sandbox-sandbox-0-2-0",
        "SELECT count() FROM system.clusters WHERE cluster = 'sandbox'",
    )
    .await;
    assert_eq!(cluster.stdout, "3\n", "{cluster:?}");
    let forbidden = kubectl(
        KUBECTL_133,
        &kc,
        &[
            "--context",
            "sandbox-minimal",
            "get",
            "pod",
            "chi-sandbox-sandbox-0-0-0",
        ],
        "",
    )
    .await;
    assert!(
        text(&forbidden.stderr).contains("(Forbidden)"),
        "{}",
        text(&forbidden.stderr)
    );
    let no_exec = client(&sb, "sandbox-no-exec").await;
    let refused = kube_exec(
        &no_exec,
        "chi-sandbox-sandbox-0-0-0",
        "clickhouse",
        &["sh", "-c", CLIENT],
        b"SELECT 1",
    )
    .await;
    assert!(refused.is_err(), "exec must be refused without pods/exec");

    // SQL travelled on stdin and never in argv.
    let log = sb.exec_log();
    let select_one: Vec<_> = log
        .iter()
        .filter(|r| r.stdin_text().contains("SELECT 1"))
        .collect();
    assert!(select_one.len() >= 3, "{log:?}");
    assert!(log.iter().all(|r| !r.argv.iter().any(|a| a.contains("SELECT"))));
    assert!(
        log.iter()
            .all(|r| r.argv == ["sh", "-c", CLIENT] || r.argv == ["true"]),
        "{log:?}"
    );

    // Label selectors see a pod that is not ClickHouse.
    let mut labels = BTreeMap::new();
    labels.insert("app".to_string(), "busybox".to_string());
    sb.add_pod(AddPod {
        name: Some("tools-0".into()),
        labels: Some(labels),
        clickhouse: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let list = |sel: &'static str| {
        let kc = kc.clone();
        async move { names(&kubectl(KUBECTL_133, &kc, &["get", "pods", "-l", sel, "-o", "name"], "").await) }
    };
    assert_eq!(list("clickhouse.altinity.com/chi=sandbox").await.len(), 3);
    assert_eq!(list("!clickhouse.altinity.com/chi").await, vec!["pod/tools-0"]);
    assert_eq!(list("clickhouse.altinity.com/replica in (1,2)").await.len(), 2);
    assert_eq!(list("clickhouse.altinity.com/replica!=0").await.len(), 3);

    // A replaced pod: same name, new uid, a server without the data the old one had.
    let admin = client(&sb, "sandbox").await;
    let created = sql(
        &admin,
        "chi-sandbox-sandbox-0-0-0",
        "CREATE DATABASE sbx_replaced",
    )
    .await;
    assert_eq!(created.exit_code(), Some(0), "{created:?}");
    let before = pods(&admin)
        .get("chi-sandbox-sandbox-0-0-0")
        .await
        .unwrap()
        .metadata
        .uid;
    sb.replace_pod("chi-sandbox-sandbox-0-0-0").await.unwrap();
    let after = pods(&admin)
        .get("chi-sandbox-sandbox-0-0-0")
        .await
        .unwrap()
        .metadata
        .uid;
    assert_ne!(before, after);
    let dbs = sql(&admin, "chi-sandbox-sandbox-0-0-0", "SHOW DATABASES").await;
    assert_eq!(dbs.exit_code(), Some(0), "{dbs:?}");
    assert!(!dbs.stdout.contains("sbx_replaced"), "{}", dbs.stdout);

    // A stopped server: the pod still execs, clickhouse-client cannot connect (210).
    sb.stop_server("chi-sandbox-sandbox-0-1-0").await.unwrap();
    let down = sql(&admin, "chi-sandbox-sandbox-0-1-0", "SELECT 1").await;
    assert_eq!(down.exit_code(), Some(210), "{down:?}");
    sb.start_server("chi-sandbox-sandbox-0-1-0").await.unwrap();
    assert_eq!(
        sql(&admin, "chi-sandbox-sandbox-0-1-0", "SELECT 1").await.stdout,
        "1\n"
    );

    // A dropped connection in the middle of a statement is an error for kube-rs, not a success.
    sb.inject(Fault::DropExec {
        argv_contains: None,
        pod: Some("chi-sandbox-sandbox-0-2-0".into()),
        count: 1,
        after: DropPoint::AfterStart,
        delay_ms: 0,
    });
    let dropped = sql(&admin, "chi-sandbox-sandbox-0-2-0", "SELECT sleep(2)").await;
    assert!(dropped.status.is_none() && dropped.joined.is_err(), "{dropped:?}");

    // A new replica joins with an empty server.
    let added = sb.add_pod(AddPod::clickhouse()).await.unwrap();
    assert_eq!(added.name, "chi-sandbox-sandbox-0-3-0");
    assert_eq!(sql(&admin, &added.name, "SELECT 1").await.stdout, "1\n");
    let deleted = kubectl(KUBECTL_133, &kc, &["delete", "pod", &added.name], "").await;
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    assert_eq!(list("clickhouse.altinity.com/chi=sandbox").await.len(), 3);

    sb.shutdown().await.unwrap();
}
