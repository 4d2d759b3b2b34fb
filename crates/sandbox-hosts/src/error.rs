use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error("invalid sandbox options: {0}")]
    InvalidOptions(String),
    #[error("invalid host name {name:?}: {reason}")]
    InvalidHostName { name: String, reason: String },
    #[error("no host named {0:?} in this sandbox")]
    UnknownHost(String),
    #[error("a host named {0:?} already exists in this sandbox")]
    DuplicateHost(String),
    #[error("no free address left in {subnet} (addresses of removed hosts are never reused)")]
    AddressesExhausted { subnet: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("ZooKeeper {problem}\n--- tail of {log} ---\n{log_tail}")]
    ZooKeeper {
        problem: String,
        log: String,
        log_tail: String,
    },
    #[error("clickhouse-server of host {host:?} {problem}\n{log_tail}")]
    Server {
        host: String,
        problem: String,
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
