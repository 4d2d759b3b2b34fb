//! Every exec the server ran, so a test can assert what reached a pod and how (for instance that
//! SQL travelled on stdin and never in argv, where `ps` and audit logs would show it).

use std::time::SystemTime;

use serde::{Serialize, Serializer};

/// One exec the server accepted (authorized, pod and container found, WebSocket offered), logged
/// when the request arrives and completed when the process ends.
#[derive(Debug, Clone, Serialize)]
pub struct ExecRecord {
    /// 1, 2, ... in the order the requests arrived.
    pub id: u64,
    /// When the request arrived.
    #[serde(serialize_with = "rfc3339")]
    pub time: SystemTime,
    /// The user whose token it carried: `sandbox-admin`, `sandbox-minimal`, ...
    pub user: String,
    /// Namespace from the request path.
    pub namespace: String,
    /// Pod name from the request path.
    pub pod: String,
    /// The container it ran in: the one the request named, or the pod's only one.
    pub container: String,
    /// The `command` parameters in order: what `ps` on the pod would show.
    pub argv: Vec<String>,
    /// Raw bytes the client sent on stdin (JSON: UTF-8, lossy).
    #[serde(serialize_with = "lossy")]
    pub stdin: Vec<u8>,
    /// `None` when the process never finished (killed, dropped, stalled), or is still running.
    pub exit_code: Option<i32>,
    /// `v5.channel.k8s.io` or `v4.channel.k8s.io`.
    pub protocol: String,
    /// `completed`, `client_disconnected`, `fault_drop`, `fault_stall`, `spawn_failed`; with
    /// `keep_dropped_execs`, a dropped exec's process is `left_running`, then `left_running_exited`
    /// (with its exit code) once it ended.
    pub outcome: String,
}

fn rfc3339<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_rfc3339_millis(*t).to_string())
}

fn lossy<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(b))
}

impl ExecRecord {
    /// `stdin` as text (invalid UTF-8 replaced), for assertions on the SQL a client sent.
    pub fn stdin_text(&self) -> String {
        String::from_utf8_lossy(&self.stdin).into_owned()
    }
}
