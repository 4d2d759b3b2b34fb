//! The exec subprotocols the server may accept (`SandboxOptions::exec_protocols`), by the names
//! they have in `Sec-WebSocket-Protocol`. The handshake that picks one is `exec`'s.

pub(crate) const V5: &str = "v5.channel.k8s.io";
pub(crate) const V4: &str = "v4.channel.k8s.io";

/// An exec subprotocol the server may accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ExecProtocol {
    /// `v5.channel.k8s.io` (Kubernetes 1.30+): adds the stdin close frame.
    #[serde(rename = "v5.channel.k8s.io")]
    V5,
    /// `v4.channel.k8s.io`: no way to signal stdin EOF short of closing the connection.
    #[serde(rename = "v4.channel.k8s.io")]
    V4,
}

impl ExecProtocol {
    /// What a current API server accepts, in its order of preference.
    pub const ALL: [ExecProtocol; 2] = [ExecProtocol::V5, ExecProtocol::V4];

    /// The subprotocol name as it appears in `Sec-WebSocket-Protocol`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecProtocol::V5 => V5,
            ExecProtocol::V4 => V4,
        }
    }
}

impl std::fmt::Display for ExecProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ExecProtocol {
    type Err = String;
    /// `v5`/`v4` for the command line, or the full subprotocol names.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "v5" | V5 => Ok(ExecProtocol::V5),
            "v4" | V4 => Ok(ExecProtocol::V4),
            other => Err(format!("unknown exec protocol {other:?} (v5 or v4)")),
        }
    }
}
