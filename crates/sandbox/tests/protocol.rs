//! The API and exec protocol against kubectl, kube-rs and a raw v4 client, with pods whose
//! processes run on this machine (no ClickHouse needed).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use clickhouse_schema_sandbox::{
    AddPod, Container, DropPoint, ExecProtocol, Fault, PodState, Sandbox, SandboxOptions, Userland,
};
use common::*;
use futures_util::StreamExt;
use kube::api::ListParams;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

async fn local() -> Sandbox {
    Sandbox::start(SandboxOptions::local(3))
        .await
        .expect("sandbox starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_exec_streams_stdin_and_reports_exit_codes() {
    let sb = local().await;
    let c = client(&sb, "sandbox-minimal").await;
    let ok = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-0-0",
        "clickhouse",
        &["sh", "-c", "cat; echo err >&2"],
        b"SELECT 1\n",
    )
    .await
    .unwrap();
    assert_eq!(ok.stdout, "SELECT 1\n");
    assert_eq!(ok.stderr, "err\n");
    assert_eq!(ok.exit_code(), Some(0));
    assert!(ok.joined.is_ok(), "{:?}", ok.joined);

    let failed = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-1-0",
        "clickhouse",
        &["sh", "-c", "cat >/dev/null; exit 62"],
        b"x",
    )
    .await
    .unwrap();
    let st = failed.status.as_ref().unwrap();
    assert_eq!(st.status.as_deref(), Some("Failure"));
    assert_eq!(st.reason.as_deref(), Some("NonZeroExitCode"));
    assert_eq!(failed.exit_code(), Some(62));

    // The container env reaches the process, and only it (plus the image's PATH/HOME/HOSTNAME).
    let env = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-0-0",
        "clickhouse",
        &["sh", "-c", "env | sort"],
        b"",
    )
    .await
    .unwrap();
    assert!(
        env.stdout
            .contains(&format!("CLICKHOUSE_PASSWORD={}", sb.passwords().default)),
        "{}",
        env.stdout
    );
    assert!(env.stdout.contains("HOSTNAME=chi-sandbox-sandbox-0-0-0"));
    assert!(
        !env.stdout.contains("CARGO"),
        "host environment leaked: {}",
        env.stdout
    );

    let log = sb.exec_log();
    assert_eq!(log.len(), 3);
    assert_eq!(log[0].argv, vec!["sh", "-c", "cat; echo err >&2"]);
    assert_eq!(log[0].stdin_text(), "SELECT 1\n");
    assert_eq!(log[0].protocol, "v5.channel.k8s.io");
    assert_eq!(log[0].user, "sandbox-minimal");
    assert_eq!(log[1].exit_code, Some(62));
    assert!(log.iter().all(|r| r.outcome == "completed"), "{log:?}");
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_tokens_mirror_the_products_role() {
    let sb = local().await;
    let minimal = client(&sb, "sandbox-minimal").await;
    assert_eq!(
        pods(&minimal)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        3
    );
    match pods(&minimal).get("chi-sandbox-sandbox-0-0-0").await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message.contains("cannot get resource \"pods\""),
                "{}",
                s.message
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    let no_exec = client(&sb, "sandbox-no-exec").await;
    match kube_exec(
        &no_exec,
        "chi-sandbox-sandbox-0-0-0",
        "clickhouse",
        &["true"],
        b"",
    )
    .await
    {
        Err(e) => assert!(e.to_string().contains("403"), "{e}"),
        Ok(o) => panic!("exec allowed without pods/exec: {o:?}"),
    }
    let anonymous = client(&sb, "sandbox-anonymous").await;
    match pods(&anonymous).list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 401),
        other => panic!("expected 401, got {other:?}"),
    }
    let admin = client(&sb, "sandbox").await;
    let p = pods(&admin).get("chi-sandbox-sandbox-0-2-0").await.unwrap();
    assert_eq!(
        p.metadata.labels.unwrap()["clickhouse.altinity.com/chi"],
        "sandbox"
    );
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    match pods(&admin).get("nope").await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (404, "NotFound")),
        other => panic!("expected 404, got {other:?}"),
    }
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_is_refused_like_kubernetes() {
    let sb = local().await;
    let c = client(&sb, "sandbox").await;
    let err = kube_exec(&c, "chi-sandbox-sandbox-0-0-0", "nope", &["true"], b"")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("400"), "{err}");
    let err = kube_exec(&c, "missing", "clickhouse", &["true"], b"")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
    sb.set_pod_state("chi-sandbox-sandbox-0-1-0", PodState::Pending)
        .unwrap();
    let err = kube_exec(&c, "chi-sandbox-sandbox-0-1-0", "clickhouse", &["true"], b"")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("400"), "{err}");
    // Terminating and not-Ready pods still run commands, as in Kubernetes.
    sb.set_pod_state("chi-sandbox-sandbox-0-2-0", PodState::Terminating)
        .unwrap();
    let out = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-2-0",
        "clickhouse",
        &["echo", "hi"],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(out.stdout, "hi\n");
    // A renamed container is what a changed operator template looks like.
    sb.set_containers(
        "chi-sandbox-sandbox-0-0-0",
        vec![Container {
            name: "server".into(),
            image: "clickhouse/clickhouse-server:24.8".into(),
            env: vec![],
            userland: Default::default(),
        }],
    )
    .unwrap();
    let err = kube_exec(&c, "chi-sandbox-sandbox-0-0-0", "clickhouse", &["true"], b"")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("400"), "{err}");
    let p = pods(&c).get("chi-sandbox-sandbox-0-2-0").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_images_userland_decides_what_an_exec_can_start() {
    let sb = local().await;
    let c = client(&sb, "sandbox-minimal").await;
    let with = |userland| {
        vec![Container {
            name: "clickhouse".into(),
            image: "clickhouse/clickhouse-server:25.8-distroless".into(),
            env: vec![],
            userland,
        }]
    };
    // No shell: kubelet's InternalError with runc's words on the error channel, nothing ran.
    sb.set_containers("chi-sandbox-sandbox-0-0-0", with(Userland::Distroless))
        .unwrap();
    let no_shell = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-0-0",
        "clickhouse",
        &["sh", "-c", "true"],
        b"",
    )
    .await
    .unwrap();
    let st = no_shell.status.as_ref().expect("a status frame");
    assert_eq!(st.reason.as_deref(), Some("InternalError"), "{st:?}");
    assert_eq!(st.code, Some(500), "{st:?}");
    let message = st.message.as_deref().unwrap_or_default();
    assert!(
        message.starts_with("Internal error occurred: error executing command in container:")
            && message.ends_with("exec: \"sh\": executable file not found in $PATH: unknown"),
        "{message}"
    );
    assert_eq!(
        sb.exec_log().last().map(|r| r.outcome.as_str()),
        Some("spawn_failed")
    );

    // BusyBox 1.34: `timeout -k` is refused with its usage; `timeout SECS PROG` runs PROG.
    sb.set_containers("chi-sandbox-sandbox-0-1-0", with(Userland::Busybox134))
        .unwrap();
    let script = "timeout -k 2 1 true; echo \"k:$?\"; timeout 5 echo ran";
    let busybox = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-1-0",
        "clickhouse",
        &["sh", "-c", script],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(busybox.stdout, "k:1\nran\n", "{}", busybox.stderr);
    assert!(
        busybox.stderr.contains("timeout: invalid option -- 'k'"),
        "{}",
        busybox.stderr
    );
    let standard = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-2-0",
        "clickhouse",
        &["sh", "-c", script],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(standard.stdout, "k:0\nran\n", "{}", standard.stderr);
    sb.shutdown().await.unwrap();
}

/// A TLS connection to the sandbox's API port, for WebSocket clients kube-rs cannot imitate.
async fn tls_to(sb: &Sandbox) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(sb.ca_pem().as_bytes()).unwrap())
        .unwrap();
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", sb.port()))
        .await
        .unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_only_client_gets_v4_with_stdout_and_status() {
    let sb = local().await;
    let tls = tls_to(&sb).await;
    let req = exec_request(
        &sb,
        "command=sh&command=-c&command=echo+out%3B+exit+5&container=clickhouse&stdout=true&stderr=true",
        "v4.channel.k8s.io",
    );
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tls).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "v4.channel.k8s.io");
    let mut stdout = Vec::new();
    let mut status = None;
    let mut close = None;
    while let Some(m) = ws.next().await {
        match m.unwrap() {
            Message::Binary(b) if b[0] == 1 => stdout.extend_from_slice(&b[1..]),
            Message::Binary(b) if b[0] == 3 => {
                status = Some(serde_json::from_slice::<serde_json::Value>(&b[1..]).unwrap())
            }
            Message::Close(f) => close = f,
            _ => {}
        }
    }
    assert_eq!(stdout, b"out\n");
    let status = status.expect("status frame");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "5");
    assert_eq!(u16::from(close.expect("close frame").code), 1000);
    assert_eq!(sb.exec_log()[0].protocol, "v4.channel.k8s.io");
    sb.shutdown().await.unwrap();
}

/// The product's framing over any protocol: `head -c <N>` ends the input, stdin is written and
/// left open (v4 has no EOF frame), output is read concurrently and the status frame ends it.
async fn kube_exec_framed(c: &kube::Client, pod: &str, script: &str, stdin: &[u8]) -> ExecOutput {
    let params = kube::api::AttachParams::default()
        .container("clickhouse")
        .stdin(true)
        .stdout(true)
        .stderr(true);
    let argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("head -c {} | {{ {script}; }}", stdin.len()),
    ];
    let mut p = pods(c).exec(pod, argv, &params).await.expect("upgraded");
    let (mut w, out, err) = (p.stdin().unwrap(), p.stdout().unwrap(), p.stderr().unwrap());
    let status = p.take_status().unwrap();
    let read = |mut r: Box<dyn tokio::io::AsyncRead + Send + Unpin>| async move {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v).await;
        String::from_utf8_lossy(&v).into_owned()
    };
    let exchange = async {
        let writing = async {
            w.write_all(stdin).await.unwrap();
            w.flush().await.unwrap();
        };
        // kube-rs shuts the output pipes once the status frame came, so the reads end with it.
        let ((), stdout, stderr, status) =
            tokio::join!(writing, read(Box::new(out)), read(Box::new(err)), status);
        (stdout, stderr, status)
    };
    let (stdout, stderr, status) = tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("the exec ends on its status frame");
    drop(w);
    let joined = p.join().await.map_err(|e| e.to_string());
    ExecOutput {
        stdout,
        stderr,
        status,
        joined,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_only_server_serves_kube_rs_over_v4_and_refuses_v5_alone() {
    let sb = Sandbox::start(SandboxOptions {
        exec_protocols: vec![ExecProtocol::V4],
        ..SandboxOptions::local(2)
    })
    .await
    .expect("sandbox starts");
    assert_eq!(sb.info().exec_protocols, vec![ExecProtocol::V4]);
    let c = client(&sb, "sandbox-minimal").await;

    // kube-rs offers v5 then v4 and gets v4; stdout, stderr and the exit status all come back.
    let out = kube_exec_framed(
        &c,
        "chi-sandbox-sandbox-0-0-0",
        "cat; echo err >&2; exit 3",
        b"SELECT 1\n",
    )
    .await;
    assert_eq!(out.stdout, "SELECT 1\n");
    assert_eq!(out.stderr, "err\n");
    assert_eq!(out.exit_code(), Some(3), "{out:?}");
    assert!(out.joined.is_ok(), "{:?}", out.joined);
    let ok = kube_exec_framed(&c, "chi-sandbox-sandbox-0-1-0", "cat", b"").await;
    assert_eq!((ok.stdout.as_str(), ok.exit_code()), ("", Some(0)), "{ok:?}");

    // Why the product never closes stdin: on v4 kube-rs closes the whole WebSocket instead, the
    // server ends the process and the status is lost. (The process outlives its stdin, so only
    // the server's reaction to the close can end it: a bare `cat` could see EOF and exit on its
    // own first, a race the log below would then record as `completed`.)
    let closed = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-0-0",
        "clickhouse",
        &["sh", "-c", "cat >/dev/null; sleep 30"],
        b"x",
    )
    .await
    .unwrap();
    assert!(closed.status.is_none(), "{closed:?}");

    // The server notices the close a moment after the client is done; on a loaded machine
    // (the test command builds other targets meanwhile) that moment has taken over 5 s, so the
    // wait is bounded at 30 s and ends as soon as the outcome is settled.
    let mut log = sb.exec_log();
    for _ in 0..600 {
        if log[2].outcome != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        log = sb.exec_log();
    }
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(log.iter().all(|r| r.protocol == "v4.channel.k8s.io"), "{log:?}");
    assert_eq!(log[0].stdin_text(), "SELECT 1\n");
    assert_eq!(
        (log[0].exit_code, log[0].outcome.as_str()),
        (Some(3), "completed")
    );
    assert_eq!(log[2].outcome, "client_disconnected");

    // A client offering only v5 meets what an old kubelet's wsstream handshake answers: a bare
    // 403, no Status body, and nothing runs.
    let req = exec_request(
        &sb,
        "command=true&container=clickhouse&stdout=true",
        "v5.channel.k8s.io",
    );
    match tokio_tungstenite::client_async(req, tls_to(&sb).await).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 403);
            assert!(resp.body().as_ref().is_none_or(|b| b.is_empty()), "{resp:?}");
        }
        Err(e) => panic!("expected a 403 answer, got {e}"),
        Ok((_, resp)) => panic!("upgraded with {:?}", resp.headers().get("sec-websocket-protocol")),
    }
    assert_eq!(sb.exec_log().len(), 3, "the refused exec ran nothing");
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_faults_reach_the_client() {
    let sb = local().await;
    let c = client(&sb, "sandbox-minimal").await;

    sb.inject(Fault::DropExec {
        argv_contains: None,
        pod: Some("chi-sandbox-sandbox-0-1-0".into()),
        count: 1,
        after: DropPoint::AfterStdout,
        delay_ms: 0,
    });
    // Scoped: another pod is unaffected.
    let ok = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-0-0",
        "clickhouse",
        &["echo", "fine"],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(ok.exit_code(), Some(0));
    let dropped = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-1-0",
        "clickhouse",
        &["sh", "-c", "echo first; sleep 5; echo never"],
        b"",
    )
    .await
    .unwrap();
    assert!(dropped.status.is_none(), "{dropped:?}");
    assert!(
        dropped.joined.is_err(),
        "a dropped connection must surface as an error: {dropped:?}"
    );
    assert!(!dropped.stdout.contains("never"));
    assert_eq!(sb.exec_log().last().unwrap().outcome, "fault_drop");
    // Used up: the next exec on that pod works.
    let again = kube_exec(
        &c,
        "chi-sandbox-sandbox-0-1-0",
        "clickhouse",
        &["echo", "back"],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(again.stdout, "back\n");

    sb.inject(Fault::StallExec {
        argv_contains: None,
        pod: None,
        count: 1,
        seconds: 30,
    });
    let stalled = tokio::time::timeout(
        Duration::from_secs(2),
        kube_exec(&c, "chi-sandbox-sandbox-0-0-0", "clickhouse", &["true"], b""),
    )
    .await;
    assert!(stalled.is_err(), "a stalled exec must hit the client's timeout");

    sb.inject(Fault::ListError {
        namespace: None,
        count: 1,
        status: 500,
        retry_after_seconds: None,
    });
    match pods(&c).list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (500, "InternalError")),
        Err(e) => panic!("expected 500, got {e}"),
        Ok(_) => panic!("expected 500, got a list"),
    }
    // kube 5 retries 429 (and 503/504) by itself, honouring Retry-After: one 429 is invisible to
    // the caller but was served.
    sb.inject(Fault::ListError {
        namespace: None,
        count: 1,
        status: 429,
        retry_after_seconds: Some(1),
    });
    assert_eq!(
        pods(&c).list(&ListParams::default()).await.unwrap().items.len(),
        3
    );
    assert!(
        sb.armed_faults().is_empty(),
        "the 429 was not served: {:?}",
        sb.armed_faults()
    );
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnecting_client_kills_the_process() {
    let sb = local().await;
    let c = client(&sb, "sandbox").await;
    let api = pods(&c);
    let params = kube::api::AttachParams::default()
        .container("clickhouse")
        .stdout(true)
        .stderr(false);
    // The shell and a child of its own, both of which must die with the connection. They print
    // their pids once running, so the test waits on that, not on a delay a busy machine outlasts.
    let mut p = api
        .exec(
            "chi-sandbox-sandbox-0-0-0",
            vec!["sh", "-c", "sleep 60 & echo $$ $!; wait"],
            &params,
        )
        .await
        .unwrap();
    let mut stdout = p.stdout().expect("stdout");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte).await.expect("read the pids") == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let pids: Vec<u32> = String::from_utf8(line)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().expect("a pid"))
        .collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    p.abort();
    drop(p);
    // Gone (or a zombie awaiting its reaper) within 30 s of the disconnect.
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the process group survived the disconnect: {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut outcome = sb.exec_log()[0].outcome.clone();
    while outcome == "running" && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        outcome = sb.exec_log()[0].outcome.clone();
    }
    assert_eq!(outcome, "client_disconnected");
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_both_versions_exec_list_and_select() {
    let sb = local().await;
    let mut labels = BTreeMap::new();
    labels.insert("app".to_string(), "other".to_string());
    sb.add_pod(AddPod {
        name: Some("other-0".into()),
        labels: Some(labels),
        clickhouse: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let kc = sb.kubeconfig_path().to_path_buf();
    for bin in [KUBECTL_133, KUBECTL_132] {
        let out = kubectl(
            bin,
            &kc,
            &[
                "exec",
                "-i",
                "chi-sandbox-sandbox-0-0-0",
                "-c",
                "clickhouse",
                "--",
                "sh",
                "-c",
                "cat; exit 3",
            ],
            "hello\n",
        )
        .await;
        assert_eq!(text(&out.stdout), "hello\n", "{bin}: {}", text(&out.stderr));
        assert_eq!(
            out.status.code(),
            Some(3),
            "{bin}: kubectl's exit code is the remote one"
        );

        let list = |sel: &'static str| {
            let kc = kc.clone();
            async move { names(&kubectl(bin, &kc, &["get", "pods", "-l", sel, "-o", "name"], "").await) }
        };
        let all3 = vec![
            "pod/chi-sandbox-sandbox-0-0-0",
            "pod/chi-sandbox-sandbox-0-1-0",
            "pod/chi-sandbox-sandbox-0-2-0",
        ];
        assert_eq!(list("clickhouse.altinity.com/chi=sandbox").await, all3);
        assert_eq!(
            list("clickhouse.altinity.com/replica in (0, 2)").await,
            vec!["pod/chi-sandbox-sandbox-0-0-0", "pod/chi-sandbox-sandbox-0-2-0"]
        );
        assert_eq!(
            list("clickhouse.altinity.com/replica!=1").await.len(),
            3,
            "!= matches pods without the key"
        );
        assert_eq!(list("!clickhouse.altinity.com/chi").await, vec!["pod/other-0"]);
        assert_eq!(list("app notin (other)").await, all3);
        let bad = kubectl(bin, &kc, &["get", "pods", "-l", "a in ("], "").await;
        assert!(!bad.status.success());

        let table = kubectl(bin, &kc, &["get", "pods"], "").await;
        assert!(
            text(&table.stdout).contains("chi-sandbox-sandbox-0-1-0   1/1     Running"),
            "{}",
            text(&table.stdout)
        );

        let wrong = kubectl(
            bin,
            &kc,
            &["exec", "chi-sandbox-sandbox-0-0-0", "-c", "nope", "--", "true"],
            "",
        )
        .await;
        assert!(!wrong.status.success());
        assert!(
            text(&wrong.stderr).contains("container nope is not valid for pod chi-sandbox-sandbox-0-0-0")
        );

        let forbidden = kubectl(
            bin,
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
            text(&forbidden.stderr).contains("Forbidden"),
            "{}",
            text(&forbidden.stderr)
        );
        let no_exec = kubectl(
            bin,
            &kc,
            &[
                "--context",
                "sandbox-no-exec",
                "exec",
                "chi-sandbox-sandbox-0-0-0",
                "--",
                "true",
            ],
            "",
        )
        .await;
        assert!(
            text(&no_exec.stderr).contains("cannot create resource \"pods/exec\""),
            "{}",
            text(&no_exec.stderr)
        );

        sb.inject(Fault::ListError {
            namespace: None,
            count: 1,
            status: 500,
            retry_after_seconds: None,
        });
        let failed = kubectl(bin, &kc, &["get", "pods", "-o", "name"], "").await;
        assert!(!failed.status.success(), "{bin} must report the 500");
        assert!(
            text(&failed.stderr).contains("InternalError") || text(&failed.stderr).contains("Internal error")
        );
    }
    let deleted = kubectl(KUBECTL_133, &kc, &["delete", "pod", "other-0"], "").await;
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    assert!(sb.pod("other-0").is_none());
    let log = sb.exec_log();
    assert!(
        log.iter()
            .any(|r| r.protocol == "v5.channel.k8s.io" && r.stdin_text() == "hello\n")
    );
    sb.shutdown().await.unwrap();
}

async fn control(
    c: &kube::Client,
    method: &str,
    path: &str,
    body: serde_json::Value,
) -> Result<String, kube::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        })
        .unwrap();
    c.request_text(req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_http_api_needs_admin_and_drives_the_sandbox() {
    let sb = local().await;
    let admin = client(&sb, "sandbox").await;
    let minimal = client(&sb, "sandbox-minimal").await;
    match control(&minimal, "GET", "/sandbox/info", serde_json::Value::Null).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403),
        other => panic!("control API must need the admin token: {other:?}"),
    }
    let info: serde_json::Value = serde_json::from_str(
        &control(&admin, "GET", "/sandbox/info", serde_json::Value::Null)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(info["passwords"]["default"], sb.passwords().default);

    let added: serde_json::Value = serde_json::from_str(
        &control(
            &admin,
            "POST",
            "/sandbox/pods",
            serde_json::json!({"clickhouse": false}),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(added["name"], "chi-sandbox-sandbox-0-3-0");
    control(
        &admin,
        "PUT",
        "/sandbox/pods/chi-sandbox-sandbox-0-3-0/state",
        serde_json::json!({"state": "not_ready"}),
    )
    .await
    .unwrap();
    let p = pods(&admin).get("chi-sandbox-sandbox-0-3-0").await.unwrap();
    let ready = p
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "False");
    let uid = p.metadata.uid;
    control(
        &admin,
        "POST",
        "/sandbox/pods/chi-sandbox-sandbox-0-3-0/replace",
        serde_json::Value::Null,
    )
    .await
    .unwrap();
    let replaced_uid = pods(&admin)
        .get("chi-sandbox-sandbox-0-3-0")
        .await
        .unwrap()
        .metadata
        .uid;
    assert_ne!(replaced_uid, uid);
    // Wiped: the same pod (uid) restarted on an empty disk.
    let wiped: serde_json::Value = serde_json::from_str(
        &control(
            &admin,
            "POST",
            "/sandbox/pods/chi-sandbox-sandbox-0-3-0/wipe",
            serde_json::Value::Null,
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(wiped["uid"].as_str(), replaced_uid.as_deref());
    assert_eq!(wiped["restart_count"], 1);
    // A pod of another shard gets that shard's first free name and labels.
    let shard1: serde_json::Value = serde_json::from_str(
        &control(
            &admin,
            "POST",
            "/sandbox/pods",
            serde_json::json!({"clickhouse": false, "shard": 1}),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(shard1["name"], "chi-sandbox-sandbox-1-0-0");
    assert_eq!(shard1["labels"]["clickhouse.altinity.com/shard"], "1");
    assert_eq!(shard1["labels"]["clickhouse.altinity.com/replica"], "0");
    // The local runtime has no ZooKeeper to pause, and says so.
    match control(
        &admin,
        "POST",
        "/sandbox/zookeeper/pause",
        serde_json::Value::Null,
    )
    .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 500);
            assert!(s.message.contains("no ZooKeeper"), "{}", s.message);
        }
        other => panic!("pausing ZooKeeper of the local runtime: {other:?}"),
    }

    control(
        &admin,
        "POST",
        "/sandbox/faults",
        serde_json::json!({"kind": "list_error", "status": 500}),
    )
    .await
    .unwrap();
    assert!(pods(&minimal).list(&ListParams::default()).await.is_err());

    kube_exec(
        &minimal,
        "chi-sandbox-sandbox-0-0-0",
        "clickhouse",
        &["cat"],
        b"SELECT 42",
    )
    .await
    .unwrap();
    let log: serde_json::Value = serde_json::from_str(
        &control(&admin, "GET", "/sandbox/exec-log", serde_json::Value::Null)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(log[0]["stdin"], "SELECT 42");
    assert_eq!(log[0]["argv"], serde_json::json!(["cat"]));
    assert_eq!(log[0]["exit_code"], 0);
    control(&admin, "DELETE", "/sandbox/exec-log", serde_json::Value::Null)
        .await
        .unwrap();
    assert!(sb.exec_log().is_empty());
    for added in ["chi-sandbox-sandbox-0-3-0", "chi-sandbox-sandbox-1-0-0"] {
        control(
            &admin,
            "DELETE",
            &format!("/sandbox/pods/{added}"),
            serde_json::Value::Null,
        )
        .await
        .unwrap();
    }
    assert_eq!(sb.pod_names().len(), 3);
    sb.shutdown().await.unwrap();
}

/// A raw WebSocket exec request to pod chi-sandbox-sandbox-0-0-0 as the admin token,
/// offering exactly `protocol`; `query` is the exec query string.
fn exec_request(
    sb: &Sandbox,
    query: &str,
    protocol: &str,
) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let url = format!(
        "wss://127.0.0.1:{}/api/v1/namespaces/sandbox/pods/chi-sandbox-sandbox-0-0-0/exec?{query}",
        sb.port()
    );
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert(
        "Authorization",
        format!("Bearer {}", sb.tokens().admin).parse().unwrap(),
    );
    req.headers_mut()
        .insert("Sec-WebSocket-Protocol", protocol.parse().unwrap());
    req
}
