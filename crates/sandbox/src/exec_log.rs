//! Every exec the server ran, so a test can assert what reached a pod and how (for instance that
//! SQL travelled on stdin and never in argv, where `ps` and audit logs would show it).

use std::time::SystemTime;

use serde::{Serialize, Serializer};

#[derive(Debug, Clone, Serialize)]
pub struct ExecRecord {
    pub id: u64,
    #[serde(serialize_with = "rfc3339")]
    pub time: SystemTime,
    pub user: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub argv: Vec<String>,
    /// Raw bytes the client sent on stdin (JSON: UTF-8, lossy).
    #[serde(serialize_with = "lossy")]
    pub stdin: Vec<u8>,
    /// `None` when the process never finished (killed, dropped, stalled).
    pub exit_code: Option<i32>,
    /// `v5.channel.k8s.io` or `v4.channel.k8s.io`.
    pub protocol: String,
    /// `completed`, `client_disconnected`, `fault_drop`, `fault_stall`, `spawn_failed`.
    pub outcome: String,
}

fn rfc3339<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_rfc3339_millis(*t).to_string())
}

fn lossy<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(b))
}

impl ExecRecord {
    pub fn stdin_text(&self) -> String {
        String::from_utf8_lossy(&self.stdin).into_owned()
    }
}
