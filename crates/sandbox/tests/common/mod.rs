//! Clients of the sandbox as the product and operators use them: kube-rs and kubectl.
#![allow(dead_code)]

use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clickhouse_schema_sandbox::Sandbox;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// kubectl 1.32 as the distribution installs it.
pub(crate) const KUBECTL_132: &str = "/usr/bin/kubectl";
/// kubectl 1.33 from the Google Cloud SDK; the tests run both versions.
pub(crate) const KUBECTL_133: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

/// A kube-rs client for one of the sandbox kubeconfig's contexts (one per token).
pub(crate) async fn client(sb: &Sandbox, context: &str) -> Client {
    let kc = Kubeconfig::read_from(sb.kubeconfig_path()).expect("kubeconfig parses");
    let opts = KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(kc, &opts)
        .await
        .expect("kubeconfig usable");
    Client::try_from(config).expect("client")
}

/// The pods of the sandbox's default namespace.
pub(crate) fn pods(client: &Client) -> Api<Pod> {
    Api::namespaced(client.clone(), "sandbox")
}

/// Everything an exec returned, kept even when the connection failed half-way.
#[derive(Debug)]
pub(crate) struct ExecOutput {
    /// Stdout as read (lossy UTF-8).
    pub(crate) stdout: String,
    /// Stderr as read (lossy UTF-8).
    pub(crate) stderr: String,
    /// The status frame; `None` when the connection ended without one.
    pub(crate) status: Option<Status>,
    /// How kube-rs's `join()` ended: an error when the connection broke.
    pub(crate) joined: Result<(), String>,
}

impl ExecOutput {
    /// The remote exit code from the status frame: 0 on Success.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        let st = self.status.as_ref()?;
        if st.status.as_deref() == Some("Success") {
            return Some(0);
        }
        st.details
            .as_ref()?
            .causes
            .as_ref()?
            .iter()
            .find(|c| c.reason.as_deref() == Some("ExitCode"))?
            .message
            .as_ref()?
            .parse()
            .ok()
    }
}

/// The product's exec pattern: stdin written and shut down (v5 EOF) while stdout and stderr are
/// read concurrently, then the status. kube-rs leaves the stdout reader pending forever when the
/// connection fails (its pipe is never shut down on that path), so the reads are raced against
/// `join()`.
pub(crate) async fn kube_exec(
    client: &Client,
    pod: &str,
    container: &str,
    argv: &[&str],
    stdin: &[u8],
) -> Result<ExecOutput, kube::Error> {
    let api = pods(client);
    let params = AttachParams::default()
        .container(container)
        .stdin(true)
        .stdout(true)
        .stderr(true);
    let mut p = api
        .exec(
            pod,
            argv.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            &params,
        )
        .await?;
    let mut w = p.stdin().expect("stdin");
    let out = p.stdout().expect("stdout");
    let err = p.stderr().expect("stderr");
    let status = p.take_status().expect("status");
    let input = stdin.to_vec();
    let out_buf = Arc::new(Mutex::new(Vec::new()));
    let err_buf = Arc::new(Mutex::new(Vec::new()));
    let io = tokio::spawn({
        let (ob, eb) = (out_buf.clone(), err_buf.clone());
        async move {
            tokio::join!(
                async move {
                    let _ = w.write_all(&input).await;
                    let _ = w.shutdown().await;
                },
                drain(out, ob),
                drain(err, eb),
            );
        }
    });
    let joined = p.join().await.map_err(|e| e.to_string());
    let status = status.await;
    // Only on a failed connection do the pipes never reach EOF; what was read so far is kept.
    let _ = tokio::time::timeout(Duration::from_secs(2), io).await;
    let stdout = String::from_utf8_lossy(&out_buf.lock().unwrap()).into_owned();
    let stderr = String::from_utf8_lossy(&err_buf.lock().unwrap()).into_owned();
    Ok(ExecOutput {
        stdout,
        stderr,
        status,
        joined,
    })
}

async fn drain(mut r: impl tokio::io::AsyncRead + Unpin, into: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 8192];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        into.lock().unwrap().extend_from_slice(&buf[..n]);
    }
}

/// Runs kubectl `bin` against `kubeconfig` with `stdin`; fails the test after 60 s.
pub(crate) async fn kubectl(bin: &str, kubeconfig: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = tokio::process::Command::new(bin)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl runs");
    let mut w = child.stdin.take().unwrap();
    let input = stdin.as_bytes().to_vec();
    tokio::spawn(async move {
        let _ = w.write_all(&input).await;
    });
    tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl finished within 60 s")
        .expect("kubectl output")
}

/// Command output as text (lossy UTF-8).
pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The non-empty lines of `-o name` output, sorted.
pub(crate) fn names(out: &Output) -> Vec<String> {
    let mut v: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    v.sort();
    v
}

/// After a sandbox of hosts `instance` stopped: no network namespace, bridge, UTS namespace file, hosts
/// file or mount of that instance, and no process whose command line names `dir` (its servers and
/// ZooKeeper run with their config under it). The caller must have reserved `instance` and asked for it
/// (`reserve_instance`): a number taken from the free ones may be claimed by another sandbox as soon as
/// the stop frees it.
pub(crate) fn assert_nothing_left(instance: u8, dir: &Path) {
    let prefix = format!("chsbx{instance}-");
    let netns = text(
        &std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(!netns.contains(&prefix), "namespaces left: {netns}");
    assert!(
        !Path::new("/sys/class/net")
            .join(format!("chsbx{instance}"))
            .exists(),
        "bridge chsbx{instance} left"
    );
    for parent in ["/run/chsbx-uts", "/etc/netns"] {
        let left: Vec<String> = std::fs::read_dir(parent)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&prefix))
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "left in {parent}: {left:?}");
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.lines().any(|l| l.contains(&format!("/{prefix}"))),
        "mounts left: {mounts}"
    );
    let dir = dir.display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(!cmdline.contains(&dir), "process {pid} left: {cmdline}");
    }
}
