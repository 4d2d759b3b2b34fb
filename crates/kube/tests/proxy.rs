//! Connecting through an HTTP CONNECT proxy named by `HTTPS_PROXY`, with
//! `user:password@`, to the sandbox API server: listing and exec work through
//! it, the proxy sees the CONNECTs, `NO_PROXY` naming the server bypasses it,
//! and a failing proxy (wrong password: 407; nothing listening) gives an error
//! that does not hold the password.
//!
//! The proxy variables are process environment, so this binary has one test
//! on one current-thread runtime and changes the environment only between
//! `block_on` calls (as `ambient.rs` does).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clickhouse_schema_core::transport::{Executor, PodLister, TransportError, TransportErrorKind};
use clickhouse_schema_kube::{KubeTransport, connect};
use clickhouse_schema_sandbox::{Sandbox, SandboxOptions};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const USER: &str = "proxy-user";
const PASSWORD: &str = "pr0xy-s3cret";
/// `Basic base64("proxy-user:pr0xy-s3cret")`.
const AUTHORIZATION: &str = "Basic cHJveHktdXNlcjpwcjB4eS1zM2NyZXQ=";
const POD: &str = "chi-sandbox-sandbox-0-0-0";

/// A CONNECT proxy that requires [`AUTHORIZATION`] and counts what it saw.
#[derive(Clone, Default)]
struct Proxy {
    port: u16,
    /// Tunnels opened, by target.
    tunnels: Arc<Mutex<Vec<String>>>,
    /// CONNECTs answered with 407.
    rejected: Arc<AtomicUsize>,
}

impl Proxy {
    async fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy binds");
        let proxy = Proxy {
            port: listener.local_addr().expect("addr").port(),
            ..Default::default()
        };
        let serving = proxy.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serving.clone().serve(client));
            }
        });
        proxy
    }

    fn tunnels(&self) -> Vec<String> {
        self.tunnels.lock().expect("lock").clone()
    }

    async fn serve(self, mut client: TcpStream) {
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        };
        let early = head.split_off(end);
        let head = String::from_utf8_lossy(&head).into_owned();
        let mut lines = head.split("\r\n");
        let request: Vec<&str> = lines.next().unwrap_or_default().split(' ').collect();
        let authorization = lines.find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("proxy-authorization")
                .then(|| value.trim().to_owned())
        });
        let (["CONNECT", target, _], Some(AUTHORIZATION)) = (request.as_slice(), authorization.as_deref())
        else {
            self.rejected.fetch_add(1, Ordering::SeqCst);
            let _ = client
                .write_all(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n\
                      Proxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\n\r\n",
                )
                .await;
            return;
        };
        let Ok(mut upstream) = TcpStream::connect(*target).await else {
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
            return;
        };
        self.tunnels.lock().expect("lock").push((*target).to_owned());
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
            || upstream.write_all(&early).await.is_err()
        {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Sets (or with `None` removes) an environment variable.
fn env(name: &str, value: Option<&str>) {
    // SAFETY: called between `block_on`s of a current-thread runtime in this
    // binary's only test, so no other thread of it reads the environment meanwhile.
    unsafe {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
}

fn assert_no_credentials(e: &TransportError) {
    for text in [e.message.clone(), e.to_string(), format!("{e:?}")] {
        assert!(!text.contains(PASSWORD), "{text}");
        assert!(!text.contains("wr0ng"), "{text}");
        assert!(!text.contains(USER), "{text}");
    }
}

#[test]
fn https_proxy_with_credentials_and_no_proxy() {
    for name in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
        "KUBECONFIG",
    ] {
        env(name, None);
    }
    let rt = runtime();
    let sb = rt.block_on(async {
        Sandbox::start(SandboxOptions::local(3))
            .await
            .expect("sandbox starts")
    });
    let proxy = rt.block_on(Proxy::start());
    let options = with_path(sb.kubeconfig_path(), None);
    let server = format!("127.0.0.1:{}", sb.port());
    let list_and_exec = |label: &'static str| {
        rt.block_on(async {
            let conn = connect(Some(&options)).await.expect(label);
            let transport = KubeTransport::from(&conn);
            let pods = transport.list_pods(NAMESPACE, &selector()).await.expect(label);
            assert_eq!(pods.len(), 3, "{label}");
            let out = transport
                .exec(shell_exec(POD, "echo exec-ok", Duration::from_secs(20)))
                .await
                .expect(label);
            assert_eq!((out.stdout.as_str(), out.exit_code), ("exec-ok\n", 0), "{label}");
        })
    };

    // (a) + (b): through the proxy, which saw the CONNECTs to the API server.
    let through = format!("http://{USER}:{PASSWORD}@127.0.0.1:{}", proxy.port);
    env("HTTPS_PROXY", Some(&through));
    list_and_exec("through the proxy");
    let tunnels = proxy.tunnels();
    assert!(!tunnels.is_empty(), "the proxy saw no CONNECT");
    assert!(tunnels.iter().all(|t| *t == server), "{tunnels:?}");
    assert_eq!(proxy.rejected.load(Ordering::SeqCst), 0);

    // NO_PROXY naming something else changes nothing.
    env("NO_PROXY", Some("example.com,10.0.0.0/8"));
    let before = proxy.tunnels().len();
    list_and_exec("NO_PROXY naming another host");
    assert!(proxy.tunnels().len() > before, "still through the proxy");

    // (c) NO_PROXY naming the server (IP, CIDR, or host with its port; either spelling) bypasses it.
    for (name, value) in [
        ("NO_PROXY", "example.com, 127.0.0.1".to_owned()),
        ("NO_PROXY", "127.0.0.0/8".to_owned()),
        ("no_proxy", server.clone()),
    ] {
        env("NO_PROXY", None);
        env(name, Some(&value));
        let before = proxy.tunnels().len();
        list_and_exec("NO_PROXY names the server");
        assert_eq!(proxy.tunnels().len(), before, "{name}={value} bypasses the proxy");
        env(name, None);
    }

    // (d) A wrong password: the proxy answers 407, and the error holds no credential.
    env(
        "HTTPS_PROXY",
        Some(&format!("http://{USER}:wr0ng-s3cret@127.0.0.1:{}", proxy.port)),
    );
    rt.block_on(async {
        let conn = connect(Some(&options)).await.expect("connects lazily");
        let transport = KubeTransport::from(&conn);
        let e = transport
            .list_pods(NAMESPACE, &selector())
            .await
            .expect_err("407");
        assert!(
            e.message.contains("proxy authorization required"),
            "{}",
            e.message
        );
        assert_no_credentials(&e);
        let e = transport
            .exec(shell_exec(POD, "echo no", Duration::from_secs(20)))
            .await
            .expect_err("407");
        assert_no_credentials(&e);
    });
    assert!(
        proxy.rejected.load(Ordering::SeqCst) >= 2,
        "the proxy refused both"
    );

    // (d) Nothing listening at the proxy's address.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_port = dead.local_addr().expect("addr").port();
    drop(dead);
    env(
        "HTTPS_PROXY",
        Some(&format!("http://{USER}:{PASSWORD}@127.0.0.1:{dead_port}")),
    );
    rt.block_on(async {
        let conn = connect(Some(&options)).await.expect("connects lazily");
        let e = KubeTransport::from(&conn)
            .list_pods(NAMESPACE, &selector())
            .await
            .expect_err("no proxy there");
        assert_eq!(e.kind, TransportErrorKind::Transient, "{}", e.message);
        assert_no_credentials(&e);
    });

    // A proxy scheme that cannot work is refused at connect, without printing the URL.
    env(
        "HTTPS_PROXY",
        Some(&format!("ftp://{USER}:{PASSWORD}@127.0.0.1:{}", proxy.port)),
    );
    rt.block_on(async {
        let e = connect(Some(&options)).await.expect_err("ftp proxy");
        assert!(e.message.contains("HTTPS_PROXY"), "{}", e.message);
        assert!(
            !e.message.contains(PASSWORD) && !format!("{e:?}").contains(PASSWORD),
            "{}",
            e.message
        );
    });

    env("HTTPS_PROXY", None);
    rt.block_on(async { sb.shutdown().await.expect("shutdown") });
}
