//! `pods/{name}/exec` over WebSocket with the `v5.channel.k8s.io` / `v4.channel.k8s.io`
//! subprotocols: what kube-rs and kubectl 1.31+ speak. The handshake is done by hand (not axum's
//! `WebSocketUpgrade`) because client-go may upgrade a POST and because the server, not the
//! client's header order, must decide between v5 and v4. Which of the two the server accepts is
//! an option (`SandboxOptions::exec_protocols`): with v4 only it behaves like an API server
//! before Kubernetes 1.30, whose kubelet never learned v5.

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::{Path, Request, State as AxState};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

use crate::auth::Attributes;
use crate::exec_log::ExecRecord;
use crate::exec_protocol::ExecProtocol;
use crate::faults::{DropPoint, ExecFault};
use crate::images;
use crate::pods::{Backing, Phase};
use crate::runtime::local_command;
use crate::state::State;
use crate::status;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const CLOSE: u8 = 255;

/// Stdin kept in the exec log per call; enough for any DDL batch, bounded for runaway clients.
const STDIN_LOG_LIMIT: usize = 16 << 20;

/// The environment an image gives every process but the pod spec does not list.
fn image_env(pod: &str, path: String) -> Vec<(String, String)> {
    vec![
        ("PATH".into(), path),
        ("HOSTNAME".into(), pod.into()),
        ("HOME".into(), "/root".into()),
    ]
}

#[derive(Debug, Default)]
struct ExecQuery {
    command: Vec<String>,
    container: Option<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

fn flag(v: &str) -> bool {
    matches!(v, "true" | "1" | "True" | "TRUE")
}

fn parse_query(q: &str) -> ExecQuery {
    let mut out = ExecQuery::default();
    for (k, v) in form_urlencoded::parse(q.as_bytes()) {
        match k.as_ref() {
            "command" => out.command.push(v.into_owned()),
            "container" => out.container = Some(v.into_owned()).filter(|c| !c.is_empty()),
            "stdin" => out.stdin = flag(&v),
            "stdout" => out.stdout = flag(&v),
            "stderr" => out.stderr = flag(&v),
            "tty" => out.tty = flag(&v),
            _ => {}
        }
    }
    out
}

/// The first of `accepted` (the server's preference: v5, which can signal stdin EOF, before v4)
/// the client offered, whatever order the client lists them in.
pub(crate) fn choose_protocol(accepted: &[ExecProtocol], offered: &[String]) -> Option<ExecProtocol> {
    accepted
        .iter()
        .copied()
        .find(|p| offered.iter().any(|o| o == p.as_str()))
}

/// No subprotocol in common. Both the kubelet (before 1.30) and the 1.30+ API server hand the
/// upgrade to apimachinery's `wsstream.Conn`, whose handshake runs inside golang.org/x/net's
/// `websocket.Server`: a failed handshake is a bare `403 Forbidden`, no body, connection closed
/// (the API server proxies the kubelet's answer unchanged). Clients report only the status
/// (kube-rs: "failed to switch protocol: 403 Forbidden").
fn unsupported_protocol() -> Response {
    let mut resp = StatusCode::FORBIDDEN.into_response();
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

pub(crate) async fn handle(
    AxState(state): AxState<Arc<State>>,
    Path((namespace, name)): Path<(String, String)>,
    mut req: Request,
) -> Response {
    let user = match state.auth.authorize(
        req.headers(),
        Attributes {
            verb: "create",
            group: "",
            resource: "pods/exec",
            namespace: Some(&namespace),
            name: Some(&name),
        },
    ) {
        Ok(u) => u,
        Err(r) => return r.into_response(),
    };
    let pod = match state.pod(&name).filter(|p| p.namespace == namespace) {
        Some(p) => p,
        None => return status::not_found("pods", &name),
    };
    let q = parse_query(req.uri().query().unwrap_or(""));
    let container = match &q.container {
        Some(c) => match pod.containers.iter().find(|x| &x.name == c) {
            Some(x) => x.clone(),
            None => return status::bad_request(&format!("container {c} is not valid for pod {name}")),
        },
        None if pod.containers.len() == 1 => pod.containers[0].clone(),
        None => {
            let names: Vec<_> = pod.containers.iter().map(|c| c.name.as_str()).collect();
            return status::bad_request(&format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            ));
        }
    };
    match pod.phase {
        Phase::Running => {}
        Phase::Succeeded | Phase::Failed => {
            return status::bad_request(&format!(
                "cannot exec into a container in a completed pod; current phase is {}",
                pod.phase.as_str()
            ));
        }
        _ => {
            return status::bad_request(&format!(
                "unable to upgrade connection: container not found (\"{}\")",
                container.name
            ));
        }
    }
    if q.command.is_empty() {
        return status::bad_request("you must specify at least 1 command");
    }
    if !q.stdin && !q.stdout && !q.stderr {
        return status::bad_request("you must specify at least one of stdin, stdout, stderr");
    }

    let is_websocket = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let key = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned();
    let (true, Some(key)) = (is_websocket, key) else {
        return status::bad_request("Upgrade request required: this server speaks exec over WebSocket only");
    };
    let offered: Vec<String> = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_string()))
        .collect();
    let Some(protocol) = choose_protocol(&state.exec_protocols, &offered) else {
        return unsupported_protocol();
    };
    let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return status::bad_request("connection cannot be upgraded");
    };

    let fault = state.faults().take_exec(&name, &q.command);
    let mut env = image_env(&name, state.images.path(container.userland));
    env.extend(container.env.iter().cloned());
    let stderr = q.stderr && !q.tty;
    let record = ExecRecord {
        id: 0,
        time: SystemTime::now(),
        user: user.name.clone(),
        namespace: namespace.clone(),
        pod: name.clone(),
        container: container.name.clone(),
        argv: q.command.clone(),
        stdin: Vec::new(),
        exit_code: None,
        protocol: protocol.as_str().to_string(),
        outcome: "running".to_string(),
    };
    let id = state.log_exec(record);
    // Kubelet upgrades first and reports a command the runtime cannot start on the error channel.
    let cannot_start = images::cannot_start(container.userland, &q.command[0], id);
    let session = Session {
        state: state.clone(),
        id,
        pod: name,
        backing: pod.backing,
        argv: q.command,
        env,
        stdin: q.stdin,
        stdout: q.stdout,
        stderr,
        v5: protocol == ExecProtocol::V5,
        fault,
        cannot_start,
    };
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
                session.run(ws).await;
            }
            Err(e) => session.finish(None, &format!("upgrade_failed: {e}")),
        }
    });

    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut resp = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(
        header::SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&accept).expect("base64 is a valid header"),
    );
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(protocol.as_str()),
    );
    resp
}

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

struct Session {
    state: Arc<State>,
    id: u64,
    pod: String,
    backing: Backing,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    v5: bool,
    fault: Option<ExecFault>,
    /// Why the container runtime cannot start the command (`images::cannot_start`).
    cannot_start: Option<String>,
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::binary(v)
}

/// The status document kubelet sends on the error channel when the process ends.
pub(crate) fn exit_status(code: i32) -> serde_json::Value {
    if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: command terminated with exit code {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        })
    }
}

/// Sends what the process writes on `channel` until it closes the pipe. Once the connection is
/// gone the output is read and discarded, as a container runtime does: a process left running
/// (`keep_dropped_execs`) never finds its output's reader gone.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    channel: u8,
    tx: mpsc::Sender<Message>,
    mut first: Option<oneshot::Sender<()>>,
) {
    let mut buf = vec![0u8; 32 * 1024];
    let mut connected = true;
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if connected && tx.send(frame(channel, &buf[..n])).await.is_err() {
                    connected = false;
                }
                if let Some(f) = first.take() {
                    let _ = f.send(());
                }
            }
        }
    }
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid {
        // The exec runs in its own process group so `sh -c` children die with it.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
}

impl Session {
    fn finish(&self, exit_code: Option<i32>, outcome: &str) {
        let outcome = outcome.to_string();
        self.state.update_exec(self.id, |r| {
            r.exit_code = exit_code;
            r.outcome = outcome;
        });
    }

    /// The connection dropped while the process runs, and the sandbox keeps such processes (as a
    /// kubelet does): it goes on with its stdin closed (the reader that fed it is gone) and its
    /// output discarded (`pump`), and its end is logged when it comes.
    fn leave_running(self, mut child: tokio::process::Child, log_stdin: impl FnOnce(&Session)) {
        log_stdin(&self);
        self.finish(None, "left_running");
        tokio::spawn(async move {
            let code = child.wait().await.ok().map(|exit| {
                use std::os::unix::process::ExitStatusExt;
                exit.code().unwrap_or_else(|| 128 + exit.signal().unwrap_or(0))
            });
            self.finish(code, "left_running_exited");
        });
    }

    fn command(&self) -> Result<std::process::Command, String> {
        if let Some(why) = &self.cannot_start {
            return Err(why.clone());
        }
        match self.backing {
            Backing::Host => self.state.runtime.command(&self.pod, &self.argv, &self.env),
            Backing::Local => local_command(&self.argv, &self.env),
        }
        .map_err(|e| e.to_string())
    }

    async fn run(self, ws: Ws) {
        let (mut sink, mut stream) = ws.split();
        if let Some(ExecFault::Stall(seconds)) = self.fault {
            // Hold the connection, answer nothing, until the client gives up.
            let _ = tokio::time::timeout(Duration::from_secs(seconds), async {
                while let Some(Ok(m)) = stream.next().await {
                    if m.is_close() {
                        break;
                    }
                }
            })
            .await;
            self.finish(None, "fault_stall");
            return;
        }
        // The kubelet and the container runtime set the exec up before its process starts;
        // what the client sent meanwhile waits in the connection.
        let setup = self.state.exec_setup_for(&self.pod);
        if !setup.is_zero() {
            tokio::time::sleep(setup).await;
        }

        let spawned = self.command().and_then(|mut cmd| {
            cmd.process_group(0)
                .stdin(if self.stdin { Stdio::piped() } else { Stdio::null() })
                .stdout(if self.stdout {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stderr(if self.stderr {
                    Stdio::piped()
                } else {
                    Stdio::null()
                });
            let mut cmd = tokio::process::Command::from(cmd);
            cmd.kill_on_drop(true);
            cmd.spawn().map_err(|e| format!("exec: {:?}: {e}", self.argv[0]))
        });
        let mut child = match spawned {
            Ok(c) => c,
            Err(message) => {
                // Kubelet's `apierrors.NewInternalError` of the runtime's error.
                let st = json!({"metadata": {}, "status": "Failure",
                                "message": format!("Internal error occurred: {message}"),
                                "reason": "InternalError",
                                "details": {"causes": [{"message": message}]}, "code": 500});
                // Logged before the status goes out, as for a normal end.
                self.finish(None, "spawn_failed");
                let _ = sink.send(frame(ERROR, st.to_string().as_bytes())).await;
                let _ = sink.send(close_normal()).await;
                return;
            }
        };
        let pid = child.id();

        let (tx, mut rx) = mpsc::channel::<Message>(16);
        let writer = tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                let last = m.is_close();
                if sink.send(m).await.is_err() || last {
                    break;
                }
            }
            sink
        });
        let (first_out_tx, first_out_rx) = oneshot::channel();
        let mut pumps = Vec::new();
        if let Some(out) = child.stdout.take() {
            pumps.push(tokio::spawn(pump(out, STDOUT, tx.clone(), Some(first_out_tx))));
        }
        if let Some(err) = child.stderr.take() {
            pumps.push(tokio::spawn(pump(err, STDERR, tx.clone(), None)));
        }

        let stdin_log = Arc::new(Mutex::new(Vec::new()));
        let (gone_tx, mut gone_rx) = oneshot::channel::<()>();
        let mut child_stdin = child.stdin.take();
        let v5 = self.v5;
        let log = stdin_log.clone();
        let reader = tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                let data = match msg {
                    Message::Binary(b) => b,
                    Message::Close(_) => break,
                    _ => continue,
                };
                match data.first() {
                    Some(&STDIN) => {
                        let bytes = &data[1..];
                        {
                            let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
                            let room = STDIN_LOG_LIMIT.saturating_sub(l.len());
                            l.extend_from_slice(&bytes[..bytes.len().min(room)]);
                        }
                        if let Some(s) = child_stdin.as_mut()
                            && s.write_all(bytes).await.is_err()
                        {
                            child_stdin = None;
                        }
                    }
                    // v5's "close stream" frame: [255, channel]. Dropping the pipe is the EOF.
                    Some(&CLOSE) if v5 && data.get(1) == Some(&STDIN) => child_stdin = None,
                    _ => {}
                }
            }
            let _ = gone_tx.send(());
            stream
        });

        let drop_now = async {
            let delay = match self.fault {
                Some(ExecFault::Drop(DropPoint::AfterStart, delay)) => delay,
                Some(ExecFault::Drop(DropPoint::AfterStdout, delay)) => {
                    if first_out_rx.await.is_err() {
                        std::future::pending::<()>().await;
                    }
                    delay
                }
                _ => std::future::pending::<u64>().await,
            };
            tokio::time::sleep(Duration::from_millis(delay)).await;
        };
        let sync_log = |s: &Session| {
            let bytes = stdin_log.lock().unwrap_or_else(|p| p.into_inner()).clone();
            s.state.update_exec(s.id, |r| r.stdin = bytes);
        };

        let exited = tokio::select! {
            st = child.wait() => st.ok(),
            _ = &mut gone_rx => None,
            _ = drop_now => {
                if self.state.keeps_dropped_execs() {
                    writer.abort();
                    reader.abort();
                    self.leave_running(child, sync_log);
                    return;
                }
                kill_group(pid);
                for p in &pumps { p.abort(); }
                // Logged before the connection closes, as for a normal end: a
                // client that reads the log right after its exec failed sees
                // the final record.
                sync_log(&self);
                self.finish(None, "fault_drop");
                // Abort both halves: the connection closes with no close frame and no status.
                writer.abort();
                reader.abort();
                return;
            }
        };
        let Some(exit) = exited else {
            if self.state.keeps_dropped_execs() {
                writer.abort();
                reader.abort();
                self.leave_running(child, sync_log);
                return;
            }
            kill_group(pid);
            let _ = child.wait().await;
            writer.abort();
            reader.abort();
            sync_log(&self);
            self.finish(None, "client_disconnected");
            return;
        };
        let code = exit.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + exit.signal().unwrap_or(0)
        });
        // Output the process wrote before exiting still has to reach the client.
        let drained = async {
            for p in pumps {
                let _ = p.await;
            }
        };
        tokio::select! {
            _ = drained => {}
            _ = &mut gone_rx => {
                kill_group(pid);
                writer.abort();
                sync_log(&self);
                self.finish(Some(code), "client_disconnected");
                return;
            }
        }
        if matches!(self.fault, Some(ExecFault::Drop(..))) {
            // The process finished before the drop point was reached: drop before the status
            // (logged first, as above).
            sync_log(&self);
            self.finish(Some(code), "fault_drop");
            writer.abort();
            reader.abort();
            return;
        }
        // Logged before the status goes out: a client that reads the log right after its exec
        // returned must see the final record.
        sync_log(&self);
        self.finish(Some(code), "completed");
        let _ = tx
            .send(frame(ERROR, exit_status(code).to_string().as_bytes()))
            .await;
        let _ = tx.send(close_normal()).await;
        drop(tx);
        let sink = writer.await.ok();
        // Wait for the client's close frame, then end TLS with close_notify as Go's server does;
        // strict clients report a bare TCP close as an error.
        let abort = reader.abort_handle();
        let stream = tokio::time::timeout(Duration::from_secs(2), reader).await;
        abort.abort();
        if let (Some(sink), Ok(Ok(stream))) = (sink, stream)
            && let Ok(mut ws) = sink.reunite(stream)
        {
            let _ = tokio::time::timeout(Duration::from_secs(1), ws.get_mut().shutdown()).await;
        }
    }
}

fn close_normal() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec_protocol::{V4, V5};

    #[test]
    fn prefers_v5_whatever_the_client_order() {
        let offered = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let all = ExecProtocol::ALL;
        assert_eq!(choose_protocol(&all, &offered(&[V4, V5])), Some(ExecProtocol::V5));
        assert_eq!(choose_protocol(&all, &offered(&[V4])), Some(ExecProtocol::V4));
        assert_eq!(choose_protocol(&all, &offered(&["channel.k8s.io"])), None);
    }

    #[test]
    fn a_v4_only_server_picks_v4_and_refuses_v5_alone() {
        let offered = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let v4 = [ExecProtocol::V4];
        assert_eq!(choose_protocol(&v4, &offered(&[V5, V4])), Some(ExecProtocol::V4));
        assert_eq!(choose_protocol(&v4, &offered(&[V5])), None);
        assert_eq!("v4".parse::<ExecProtocol>(), Ok(ExecProtocol::V4));
        assert_eq!(V5.parse::<ExecProtocol>(), Ok(ExecProtocol::V5));
        assert!("v3".parse::<ExecProtocol>().is_err());
    }

    #[test]
    fn query_is_parsed_like_the_apiserver() {
        let q = parse_query(
            "command=sh&command=-c&command=echo+%22hi%22&container=clickhouse&stdin=true&stdout=1",
        );
        assert_eq!(q.command, vec!["sh", "-c", "echo \"hi\""]);
        assert_eq!(q.container.as_deref(), Some("clickhouse"));
        assert!(q.stdin && q.stdout && !q.stderr && !q.tty);
    }
}
