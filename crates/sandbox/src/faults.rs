//! One-shot failures a test arms before it runs the product: each fault fires on the next matching
//! calls and is used up, so a retry after it sees a healthy server.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DropPoint {
    /// Right after the process started, before any output.
    #[default]
    AfterStart,
    /// After the first stdout chunk was sent to the client.
    AfterStdout,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Cut the connection (no close frame, no status) in the middle of the exec; the process is killed.
    DropExec {
        #[serde(default)]
        pod: Option<String>,
        #[serde(default = "one")]
        count: u32,
        #[serde(default)]
        after: DropPoint,
    },
    /// Accept the upgrade, then send nothing and start nothing until the client gives up
    /// (or `seconds` pass).
    StallExec {
        #[serde(default)]
        pod: Option<String>,
        #[serde(default = "one")]
        count: u32,
        #[serde(default = "stall_default")]
        seconds: u64,
    },
    /// Answer pod list calls with this HTTP status (500 or 429); 429 carries Retry-After.
    ListError {
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default = "one")]
        count: u32,
        #[serde(default = "status_500")]
        status: u16,
        #[serde(default)]
        retry_after_seconds: Option<u64>,
    },
}

fn one() -> u32 {
    1
}
fn stall_default() -> u64 {
    3600
}
fn status_500() -> u16 {
    500
}

/// What an exec must suffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecFault {
    Drop(DropPoint),
    Stall(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFault {
    pub status: u16,
    pub retry_after_seconds: Option<u64>,
}

#[derive(Default)]
pub struct Faults {
    armed: Vec<Fault>,
}

fn scoped(scope: &Option<String>, value: &str) -> bool {
    scope.as_deref().is_none_or(|s| s == value)
}

impl Faults {
    pub fn arm(&mut self, fault: Fault) {
        self.armed.push(fault);
    }
    pub fn clear(&mut self) {
        self.armed.clear();
    }
    pub fn armed(&self) -> Vec<Fault> {
        self.armed.clone()
    }

    pub fn take_exec(&mut self, pod: &str) -> Option<ExecFault> {
        let idx = self.armed.iter().position(|f| match f {
            Fault::DropExec { pod: p, count, .. } | Fault::StallExec { pod: p, count, .. } => {
                *count > 0 && scoped(p, pod)
            }
            Fault::ListError { .. } => false,
        })?;
        let out = match &mut self.armed[idx] {
            Fault::DropExec { count, after, .. } => {
                *count -= 1;
                ExecFault::Drop(*after)
            }
            Fault::StallExec { count, seconds, .. } => {
                *count -= 1;
                ExecFault::Stall(*seconds)
            }
            Fault::ListError { .. } => unreachable!(),
        };
        self.armed.retain(|f| {
            !matches!(
                f,
                Fault::DropExec { count: 0, .. } | Fault::StallExec { count: 0, .. }
            )
        });
        Some(out)
    }

    pub fn take_list(&mut self, namespace: &str) -> Option<ListFault> {
        let idx = self.armed.iter().position(
            |f| matches!(f, Fault::ListError { namespace: n, count, .. } if *count > 0 && scoped(n, namespace)),
        )?;
        let Fault::ListError {
            count,
            status,
            retry_after_seconds,
            ..
        } = &mut self.armed[idx]
        else {
            unreachable!()
        };
        *count -= 1;
        let out = ListFault {
            status: *status,
            retry_after_seconds: *retry_after_seconds,
        };
        self.armed
            .retain(|f| !matches!(f, Fault::ListError { count: 0, .. }));
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_used_up_and_scoped() {
        let mut f = Faults::default();
        f.arm(Fault::DropExec {
            pod: Some("a".into()),
            count: 2,
            after: DropPoint::AfterStart,
        });
        f.arm(Fault::ListError {
            namespace: None,
            count: 1,
            status: 429,
            retry_after_seconds: Some(1),
        });
        assert_eq!(f.take_exec("b"), None);
        assert_eq!(f.take_exec("a"), Some(ExecFault::Drop(DropPoint::AfterStart)));
        assert_eq!(f.take_exec("a"), Some(ExecFault::Drop(DropPoint::AfterStart)));
        assert_eq!(f.take_exec("a"), None);
        assert_eq!(f.take_list("x").map(|l| l.status), Some(429));
        assert_eq!(f.take_list("x"), None);
        assert!(f.armed().is_empty());
    }
}
