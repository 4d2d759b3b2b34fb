//! The transport against the sandbox API server with pods whose exec runs on
//! this machine: kubeconfig resolution, listing, the exec protocol, RBAC
//! refusals and injected faults. (ClickHouse itself: `clickhouse.rs`.)

mod common;

use std::time::{Duration, Instant};

use clickhouse_schema_core::kubernetes::cluster_id::{ClusterEndpoint, cluster_id};
use clickhouse_schema_core::kubernetes::connection::ResolvedConnection;
use clickhouse_schema_core::transport::{Executor, PodLister, TransportErrorKind};
use clickhouse_schema_kube::{KubeTransport, connect, connect_resolved, resolve_endpoint};
use clickhouse_schema_sandbox::{AddPod, Container, DropPoint, Fault, PodState, Sandbox, SandboxOptions};
use common::*;

async fn local() -> Sandbox {
    Sandbox::start(SandboxOptions::local(3))
        .await
        .expect("sandbox starts")
}

async fn transport(sb: &Sandbox, context: &str) -> KubeTransport {
    let conn = connect(Some(&with_path(sb.kubeconfig_path(), Some(context))))
        .await
        .expect("connects");
    KubeTransport::from(&conn)
}

const POD: &str = "chi-sandbox-sandbox-0-0-0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_path_identifies_the_selected_cluster() {
    let sb = local().await;
    let kc = sb.kubeconfig_path().to_path_buf();

    let conn = connect(Some(&with_path(&kc, None))).await.expect("connects");
    let expected = expected_endpoint(&kc, None).expect("current context names a cluster");
    assert_eq!(conn.endpoint.as_ref(), Some(&expected));
    assert_eq!(conn.cluster_id(), Some(cluster_id(&expected)));
    // And the oracle read what the sandbox wrote.
    assert_eq!(expected.cluster_name, "sandbox");
    assert_eq!(expected.server, sb.server_url());
    assert!(expected.ca_data.as_deref().is_some_and(|d| !d.is_empty()));
    assert!(!expected.skip_tls_verify);
    let pods = KubeTransport::from(&conn)
        .list_pods(NAMESPACE, &selector())
        .await
        .expect("lists");
    assert_eq!(pods.len(), 3);

    // Another context, another cluster entry: skip-TLS without a CA, still connects.
    let conn = connect(Some(&with_path(&kc, Some("sandbox-insecure"))))
        .await
        .expect("connects");
    let insecure = expected_endpoint(&kc, Some("sandbox-insecure")).expect("named");
    assert!(insecure.skip_tls_verify);
    assert_eq!(conn.endpoint.as_ref(), Some(&insecure));
    assert_ne!(conn.cluster_id(), Some(cluster_id(&expected)));
    let pods = KubeTransport::from(&conn)
        .list_pods(NAMESPACE, &selector())
        .await
        .expect("lists with skip-TLS");
    assert_eq!(pods.len(), 3);

    // A user-only difference (another token) is the same cluster.
    let minimal = connect(Some(&with_path(&kc, Some("sandbox-minimal"))))
        .await
        .expect("connects");
    assert_eq!(minimal.cluster_id(), Some(cluster_id(&expected)));

    // A server override changes the identity and is what the client uses.
    let mut o = with_path(&kc, None);
    o.server = Some(format!("https://localhost:{}", sb.port()));
    o.skip_tls_verify = Some(true);
    let conn = connect(Some(&o)).await.expect("connects");
    let overridden = ClusterEndpoint {
        server: format!("https://localhost:{}", sb.port()),
        skip_tls_verify: true,
        ..expected.clone()
    };
    assert_eq!(conn.endpoint.as_ref(), Some(&overridden));
    let pods = KubeTransport::from(&conn)
        .list_pods(NAMESPACE, &selector())
        .await
        .expect("lists through the overridden server");
    assert_eq!(pods.len(), 3);
    sb.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolved_connection_uses_its_token_and_is_identified_by_server_and_ca() {
    let sb = local().await;
    let kc = sb.kubeconfig_path().to_path_buf();
    let ca = expected_endpoint(&kc, None).expect("named").ca_data;
    let tokens = sb.info().tokens;
    let resolved = |token: &str| ResolvedConnection {
        endpoint: sb.server_url(),
        certificate_authority_data: ca.clone(),
        insecure_skip_tls_verify: false,
        token: Some(token.to_owned()),
        client_certificate: None,
    };

    let conn = connect_resolved(&resolved(&tokens.minimal))
        .await
        .expect("connects");
    let identity = ClusterEndpoint {
        cluster_name: String::new(),
        server: sb.server_url(),
        ca_data: ca.clone(),
        ca_file: None,
        skip_tls_verify: false,
    };
    assert_eq!(conn.endpoint.as_ref(), Some(&identity));
    let pods = KubeTransport::from(&conn)
        .list_pods(NAMESPACE, &selector())
        .await
        .expect("lists with the minimal user's token");
    assert_eq!(pods.len(), 3);
    // The token is the minimal user's: exec is allowed, leases are not its business.
    let exec = KubeTransport::from(&conn)
        .exec(shell_exec(POD, "true", Duration::from_secs(20)))
        .await
        .expect("execs");
    assert_eq!(exec.exit_code, 0);

    // Another token, the same cluster.
    let admin = connect_resolved(&resolved(&tokens.admin))
        .await
        .expect("connects");
    assert_eq!(admin.cluster_id(), conn.cluster_id());

    // A token the server refuses: the API's 401, and the token nowhere.
    let wrong = "not-a-token-0123456789abcdef";
    let conn = connect_resolved(&resolved(wrong)).await.expect("connects");
    let e = KubeTransport::from(&conn)
        .list_pods(NAMESPACE, &selector())
        .await
        .expect_err("401");
    assert_eq!((e.kind, e.http_status), (TransportErrorKind::Refused, Some(401)));
    assert!(!e.message.contains(wrong), "{}", e.message);

    // Never over plain HTTP, and the refusal does not repeat the token.
    let plain = ResolvedConnection {
        endpoint: format!("http://127.0.0.1:{}", sb.port()),
        ..resolved(&tokens.admin)
    };
    let e = connect_resolved(&plain).await.expect_err("refused");
    assert!(
        e.message.contains("plain http://") && e.message.contains("a bearer token"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("the endpoint of the Alchemy Kubernetes connection"),
        "{}",
        e.message
    );
    assert!(!e.message.contains(&tokens.admin), "{}", e.message);
    sb.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_current_context_has_no_identity() {
    let sb = local().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(sb.kubeconfig_path()).expect("readable");
    let stripped: String = text
        .lines()
        .filter(|l| !l.starts_with("current-context:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, stripped).expect("written");

    assert_eq!(
        expected_endpoint(&path, None),
        None,
        "the oracle agrees there is none"
    );
    assert_eq!(
        resolve_endpoint(Some(&with_path(&path, None))).expect("resolves"),
        None
    );
    let err = connect(Some(&with_path(&path, None)))
        .await
        .expect_err("nothing to connect to");
    assert!(err.message.contains("no current-context"), "{}", err.message);
    // Naming the context is enough.
    let conn = connect(Some(&with_path(&path, Some("sandbox"))))
        .await
        .expect("connects");
    assert_eq!(conn.endpoint, expected_endpoint(&path, Some("sandbox")));
    sb.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_pods_by_selector_with_their_state() {
    let sb = local().await;
    let mut other = std::collections::BTreeMap::new();
    other.insert("app".to_owned(), "other".to_owned());
    sb.add_pod(AddPod {
        name: Some("other-0".into()),
        labels: Some(other),
        clickhouse: false,
        ..Default::default()
    })
    .await
    .expect("added");
    let t = transport(&sb, "sandbox-minimal").await;

    let mut pods = t.list_pods(NAMESPACE, &selector()).await.expect("lists");
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "chi-sandbox-sandbox-0-0-0",
            "chi-sandbox-sandbox-0-1-0",
            "chi-sandbox-sandbox-0-2-0"
        ]
    );
    for p in &pods {
        let real = sb.pod(&p.name).expect("exists");
        assert_eq!(p.uid.as_deref(), Some(real.uid.as_str()));
        assert!(p.ready, "{p:?}");
        assert_eq!(p.phase.as_deref(), Some("Running"));
        assert!(!p.terminating);
        assert_eq!(p.containers, ["clickhouse"]);
    }

    sb.set_pod_state("chi-sandbox-sandbox-0-1-0", PodState::Pending)
        .expect("set");
    sb.set_pod_state("chi-sandbox-sandbox-0-2-0", PodState::Terminating)
        .expect("set");
    sb.set_pod_state("chi-sandbox-sandbox-0-0-0", PodState::NotReady)
        .expect("set");
    let pods = t.list_pods(NAMESPACE, &selector()).await.expect("lists");
    let get = |n: &str| pods.iter().find(|p| p.name == n).expect("listed").clone();
    let pending = get("chi-sandbox-sandbox-0-1-0");
    assert_eq!(pending.phase.as_deref(), Some("Pending"));
    assert!(!pending.ready);
    let terminating = get("chi-sandbox-sandbox-0-2-0");
    assert!(terminating.terminating);
    assert!(terminating.is_on_its_way_out());
    let not_ready = get("chi-sandbox-sandbox-0-0-0");
    assert_eq!(not_ready.phase.as_deref(), Some("Running"));
    assert!(!not_ready.ready);

    // Replacement: same name, new uid.
    let before = get("chi-sandbox-sandbox-0-1-0").uid;
    sb.replace_pod("chi-sandbox-sandbox-0-1-0")
        .await
        .expect("replaced");
    let pods = t.list_pods(NAMESPACE, &selector()).await.expect("lists");
    let after = pods
        .iter()
        .find(|p| p.name == "chi-sandbox-sandbox-0-1-0")
        .expect("listed");
    assert_ne!(after.uid, before);

    let mut other = std::collections::BTreeMap::new();
    other.insert("app".to_owned(), "other".to_owned());
    let pods = t.list_pods(NAMESPACE, &other).await.expect("lists");
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].name, "other-0");
    sb.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_frames_stdin_without_closing_it_and_reports_exit_codes() {
    let sb = local().await;
    let t = transport(&sb, "sandbox-minimal").await;

    let input = "SELECT 'it''s' -- a statement\n";
    let mut req = shell_exec(
        POD,
        &format!("head -c {} | tr a-z A-Z; echo done >&2", input.len()),
        Duration::from_secs(20),
    );
    req.stdin = input.into();
    let out = t.exec(req).await.expect("runs");
    assert_eq!(out.stdout, input.to_uppercase());
    assert_eq!(out.stderr, "done\n");
    assert_eq!(out.exit_code, 0);

    let out = t
        .exec(shell_exec(POD, "echo partial; exit 3", Duration::from_secs(20)))
        .await
        .expect("runs");
    assert_eq!((out.stdout.as_str(), out.exit_code), ("partial\n", 3));

    // Output beyond the cap is read and dropped, so the remote never blocks.
    let out = t
        .exec(shell_exec(
            POD,
            "head -c 3000000 /dev/zero | tr '\\0' x; head -c 1500000 /dev/zero | tr '\\0' y >&2",
            Duration::from_secs(30),
        ))
        .await
        .expect("runs");
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.stdout.len(), clickhouse_schema_kube::exec::OUTPUT_CAP);
    assert_eq!(out.stderr.len(), clickhouse_schema_kube::exec::OUTPUT_CAP);

    // Stdin far larger than kube-rs's pipes, consumed while output flows back.
    let big = "x".repeat(3_000_000);
    let mut req = shell_exec(
        POD,
        &format!("head -c {} | tee /dev/stderr | wc -c", big.len()),
        Duration::from_secs(60),
    );
    req.stdin = big.clone();
    let out = t.exec(req).await.expect("runs");
    assert_eq!((out.stdout.trim(), out.exit_code), ("3000000", 0));
    assert_eq!(out.stderr.len(), clickhouse_schema_kube::exec::OUTPUT_CAP);

    // A command that exits without reading its stdin: the status ends the
    // exec even though most of stdin could never be delivered.
    let mut req = shell_exec(POD, "exit 7", Duration::from_secs(30));
    req.stdin = big;
    let started = Instant::now();
    let out = t.exec(req).await.expect("runs");
    assert_eq!(out.exit_code, 7);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    let log = sb.exec_log();
    assert_eq!(log.len(), 5);
    assert_eq!(log[0].stdin_text(), input);
    assert!(log.iter().all(|r| r.protocol == "v5.channel.k8s.io"), "{log:?}");
    assert!(log.iter().all(|r| r.outcome == "completed"), "{log:?}");
    assert!(log.iter().all(|r| r.user == "sandbox-minimal"));
    sb.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_refused_with_the_apis_words() {
    let sb = local().await;
    let admin = transport(&sb, "sandbox").await;

    let no_exec = transport(&sb, "sandbox-no-exec").await;
    let e = no_exec
        .exec(shell_exec(POD, "true", Duration::from_secs(20)))
        .await
        .expect_err("no pods/exec");
    assert_eq!(e.kind, TransportErrorKind::Refused);
    assert_eq!(e.http_status, Some(403));
    assert!(
        e.message.contains(&format!("pods \"{POD}\" is forbidden"))
            && e.message.contains("cannot create resource \"pods/exec\""),
        "{}",
        e.message
    );
    // That identity may still list.
    assert_eq!(
        no_exec
            .list_pods(NAMESPACE, &selector())
            .await
            .expect("lists")
            .len(),
        3
    );

    let anonymous = transport(&sb, "sandbox-anonymous").await;
    let e = anonymous
        .list_pods(NAMESPACE, &selector())
        .await
        .expect_err("401");
    assert_eq!((e.kind, e.http_status), (TransportErrorKind::Refused, Some(401)));

    let e = admin
        .exec(shell_exec("missing-pod", "true", Duration::from_secs(20)))
        .await
        .expect_err("404");
    assert_eq!((e.kind, e.http_status), (TransportErrorKind::Refused, Some(404)));
    assert!(e.message.contains("missing-pod"), "{}", e.message);

    let mut req = shell_exec(POD, "true", Duration::from_secs(20));
    req.container = "nope".into();
    let e = admin.exec(req).await.expect_err("400");
    assert_eq!((e.kind, e.http_status), (TransportErrorKind::Refused, Some(400)));
    assert!(e.message.contains("container nope is not valid"), "{}", e.message);

    // A renamed container (changed operator template) is the same refusal.
    sb.set_containers(
        "chi-sandbox-sandbox-0-1-0",
        vec![Container {
            name: "server".into(),
            image: "clickhouse/clickhouse-server:24.8".into(),
            env: vec![],
            userland: Default::default(),
        }],
    )
    .expect("set");
    let e = admin
        .exec(shell_exec(
            "chi-sandbox-sandbox-0-1-0",
            "true",
            Duration::from_secs(20),
        ))
        .await
        .expect_err("400");
    assert_eq!(e.kind, TransportErrorKind::Refused);

    sb.set_pod_state("chi-sandbox-sandbox-0-2-0", PodState::Pending)
        .expect("set");
    let e = admin
        .exec(shell_exec(
            "chi-sandbox-sandbox-0-2-0",
            "true",
            Duration::from_secs(20),
        ))
        .await
        .expect_err("pending");
    assert_eq!((e.kind, e.http_status), (TransportErrorKind::Refused, Some(400)));
    sb.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_are_transient_or_timeouts() {
    let sb = local().await;
    let t = transport(&sb, "sandbox-minimal").await;

    for after in [DropPoint::AfterStart, DropPoint::AfterStdout] {
        sb.inject(Fault::DropExec {
            argv_contains: None,
            pod: Some(POD.into()),
            count: 1,
            after,
            delay_ms: 0,
        });
        let e = t
            .exec(shell_exec(
                POD,
                "echo first; sleep 5; echo never",
                Duration::from_secs(20),
            ))
            .await
            .expect_err("dropped");
        assert_eq!(e.kind, TransportErrorKind::Transient, "{after:?}: {e:?}");
        assert!(
            e.message.contains("without reporting an exit status"),
            "{}",
            e.message
        );
        assert_eq!(
            sb.exec_log().last().map(|r| r.outcome.clone()).as_deref(),
            Some("fault_drop")
        );
    }
    // Used up: the next exec works.
    let out = t
        .exec(shell_exec(POD, "echo back", Duration::from_secs(20)))
        .await
        .expect("runs");
    assert_eq!(out.stdout, "back\n");

    sb.inject(Fault::StallExec {
        argv_contains: None,
        pod: None,
        count: 1,
        seconds: 60,
    });
    let started = Instant::now();
    let e = t
        .exec(shell_exec(POD, "true", Duration::from_secs(2)))
        .await
        .expect_err("stalled");
    let took = started.elapsed();
    assert_eq!(e.kind, TransportErrorKind::Timeout, "{e:?}");
    assert!(e.message.contains("2 s"), "{}", e.message);
    // The stall lasts 60 s: ending well before it is the 2 s timeout, however busy the machine.
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(30),
        "{took:?}"
    );
    // The abandoned exec was closed, not left hanging on the server (which logs it a moment
    // later: waited for, up to 30 s, rather than for a fixed time a busy machine can outlast).
    let mut outcome = None;
    for _ in 0..300 {
        outcome = sb.exec_log().last().map(|r| r.outcome.clone());
        if outcome.as_deref() == Some("fault_stall") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(outcome.as_deref(), Some("fault_stall"));

    // A command that outlives its timeout is cut off too.
    let e = t
        .exec(shell_exec(POD, "sleep 30", Duration::from_secs(1)))
        .await
        .expect_err("slow");
    assert_eq!(e.kind, TransportErrorKind::Timeout);
    // Dropping the exec closed the connection, and the API server ended the process.
    let mut outcome = None;
    for _ in 0..300 {
        outcome = sb.exec_log().last().map(|r| r.outcome.clone());
        if outcome.as_deref() == Some("client_disconnected") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(outcome.as_deref(), Some("client_disconnected"));

    for status in [500, 429] {
        sb.inject(Fault::ListError {
            namespace: None,
            count: 1,
            status,
            retry_after_seconds: (status == 429).then_some(1),
        });
        let e = t.list_pods(NAMESPACE, &selector()).await.expect_err("fault");
        assert_eq!(
            (e.kind, e.http_status),
            (TransportErrorKind::Transient, Some(status))
        );
        assert!(e.is_retryable());
    }
    assert_eq!(
        t.list_pods(NAMESPACE, &selector())
            .await
            .expect("recovered")
            .len(),
        3
    );
    sb.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_transient() {
    // Bind then free a port, so nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:{port}\n    \
             insecure-skip-tls-verify: true\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: gone\n  context:\n    \
             cluster: gone\n    user: u\ncurrent-context: gone\n"
        ),
    )
    .expect("written");
    let t = KubeTransport::from(
        &connect(Some(&with_path(&path, None)))
            .await
            .expect("connects lazily"),
    );
    let e = t
        .list_pods(NAMESPACE, &selector())
        .await
        .expect_err("refused connection");
    assert_eq!(
        (e.kind, e.http_status),
        (TransportErrorKind::Transient, None),
        "{e:?}"
    );
    let e = t
        .exec(shell_exec(POD, "true", Duration::from_secs(5)))
        .await
        .expect_err("refused connection");
    assert_eq!(e.kind, TransportErrorKind::Transient, "{e:?}");
}
