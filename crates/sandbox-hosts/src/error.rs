//! The crate's one error type. Server and ZooKeeper failures carry the tails of their logs, so the
//! message alone says why a start-up failed.

use std::path::Path;

/// Everything `Hosts` and `cleanup_stale` can fail with.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// Options or a request the sandbox cannot honour: instance out of range, a bad cluster name,
    /// argv or environment name, or a name that exists although this sandbox holds its instance.
    #[error("invalid sandbox options: {0}")]
    InvalidOptions(String),
    /// A host name that could not be a Kubernetes pod name (it becomes netns, directory and XML text).
    #[error("invalid host name {name:?}: {reason}")]
    InvalidHostName {
        /// The name as given.
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// The instance asked for is held by a sandbox that is running on this machine.
    #[error(
        "instance {0} is held by another sandbox running on this machine: pick another instance, or stop that one"
    )]
    InstanceBusy(u8),
    /// Every instance 1..=200 is held by a running sandbox.
    #[error("no free sandbox instance (1..=200) on this machine: every one is held by a running sandbox")]
    NoFreeInstance,
    /// No host of that name (never added, or removed).
    #[error("no host named {0:?} in this sandbox")]
    UnknownHost(String),
    /// `start` listed the name twice, or `add` named a host that exists.
    #[error("a host named {0:?} already exists in this sandbox")]
    DuplicateHost(String),
    /// Every address .10 to .254 of the subnet was handed out once; removed hosts do not give theirs back.
    #[error("no free address left in {subnet} (addresses of removed hosts are never reused)")]
    AddressesExhausted {
        /// The instance's subnet, `10.250.<instance>.0/24`.
        subnet: String,
    },
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path: `creating /run/.../config.xml`.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An `ip` (iproute2) command exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line that ran.
        command: String,
        /// Its exit status, as text.
        status: String,
        /// Its trimmed stderr: iproute2's own reason.
        stderr: String,
    },
    /// ZooKeeper is not installed, exited during start-up or never reported `Mode:`.
    #[error("ZooKeeper {problem}\n--- tail of {log} ---\n{log_tail}")]
    ZooKeeper {
        /// What went wrong, worded to follow "ZooKeeper ".
        problem: String,
        /// Path of the log the tail comes from (the JVM console when the log does not exist).
        log: String,
        /// The last lines of that log, then of the console output (empty if it never started).
        log_tail: String,
    },
    /// A clickhouse-server exited during start-up or did not answer `SELECT 1` in time.
    #[error("clickhouse-server of host {host:?} {problem}\n{log_tail}")]
    Server {
        /// The host whose server failed.
        host: String,
        /// What went wrong, with the last readiness attempt when it timed out.
        problem: String,
        /// The last lines of its stderr, error log and log.
        log_tail: String,
    },
}

impl HostsError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        HostsError::Io {
            context: context.into(),
            source,
        }
    }
}

pub(crate) trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HostsError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HostsError> {
        self.map_err(|e| HostsError::io(what(), e))
    }
}

/// The last `lines` lines of a log file, read from its end so a big log costs nothing.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const WINDOW: u64 = 16 * 1024;
    let Ok(mut file) = std::fs::File::open(path) else {
        return "(no such file)".to_string();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(WINDOW);
    let mut buf = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut buf).is_err() {
        return "(unreadable)".to_string();
    }
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    let out = all[from..].join("\n");
    if out.trim().is_empty() {
        "(empty)".to_string()
    } else {
        out
    }
}
