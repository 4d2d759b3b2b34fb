//! One-shot failures a test arms before it runs the product: each fault fires on the next matching
//! calls and is used up, so a retry after it sees a healthy server.

use serde::{Deserialize, Serialize};

/// When a `drop_exec` fault cuts the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DropPoint {
    /// Right after the process started, before any output.
    #[default]
    AfterStart,
    /// After the first stdout chunk was sent to the client.
    AfterStdout,
}

/// A failure to inject, armed with `Sandbox::inject` or `POST /sandbox/faults` (JSON tagged by
/// `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Cut the connection (no close frame, no status) in the middle of the exec; the process is killed.
    DropExec {
        /// Only execs into this pod; `None`: any pod.
        #[serde(default)]
        pod: Option<String>,
        /// Only execs whose command (its arguments joined by spaces) contains this text; `None`:
        /// any. A test that writes through `kubectl exec` itself while the product runs scopes
        /// the fault to the product's execs.
        #[serde(default)]
        argv_contains: Option<String>,
        /// How many execs it cuts before it is used up.
        #[serde(default = "one")]
        count: u32,
        /// How far the exec gets before the cut.
        #[serde(default)]
        after: DropPoint,
        /// How long after that point the cut comes (0: at once); a process that
        /// ends first is cut before its status, as when it ends before the point.
        #[serde(default)]
        delay_ms: u64,
    },
    /// Accept the upgrade, then send nothing and start nothing until the client gives up
    /// (or `seconds` pass).
    StallExec {
        /// Only execs into this pod; `None`: any pod.
        #[serde(default)]
        pod: Option<String>,
        /// As for `DropExec`.
        #[serde(default)]
        argv_contains: Option<String>,
        /// How many execs it stalls before it is used up.
        #[serde(default = "one")]
        count: u32,
        /// Longest the stall lasts; the default, an hour, leaves it to the client's timeout.
        #[serde(default = "stall_default")]
        seconds: u64,
    },
    /// Answer pod list calls with this HTTP status (500 or 429); 429 carries Retry-After.
    ListError {
        /// Only lists in this namespace; `None`: every list, the all-namespaces one included.
        #[serde(default)]
        namespace: Option<String>,
        /// How many lists fail before it is used up.
        #[serde(default = "one")]
        count: u32,
        /// 429 answers TooManyRequests; any other status an InternalError with that code.
        #[serde(default = "status_500")]
        status: u16,
        /// The Retry-After header (and `retryAfterSeconds` of a 429); a 429 without it says 1.
        #[serde(default)]
        retry_after_seconds: Option<u64>,
    },
    /// Answer lease requests with this HTTP status: 409 is the Conflict a stale resourceVersion
    /// gets (another writer won), 500 an InternalError. Checked after authorization, before the
    /// request does anything (a create has only parsed its body, for the name).
    LeaseError {
        /// Only leases in this namespace; `None`: any, the all-namespaces list included.
        #[serde(default)]
        namespace: Option<String>,
        /// Only requests naming this lease (in the URL, or in the body of a create); `None`: any,
        /// lists included.
        #[serde(default)]
        name: Option<String>,
        /// Only this verb: `get`, `list`, `watch`, `create`, `update` (PUT), `patch` or `delete`;
        /// `None`: any.
        #[serde(default)]
        verb: Option<String>,
        /// How many requests fail before it is used up.
        #[serde(default = "one")]
        count: u32,
        /// 409 answers Conflict; any other status an InternalError with that code.
        #[serde(default = "status_409")]
        status: u16,
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
fn status_409() -> u16 {
    409
}

/// What an exec must suffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExecFault {
    /// Where, and how long after it, the connection is cut.
    Drop(DropPoint, u64),
    Stall(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListFault {
    pub(crate) status: u16,
    pub(crate) retry_after_seconds: Option<u64>,
}

#[derive(Default)]
pub(crate) struct Faults {
    armed: Vec<Fault>,
}

fn scoped(scope: &Option<String>, value: &str) -> bool {
    scope.as_deref().is_none_or(|s| s == value)
}

impl Faults {
    pub(crate) fn arm(&mut self, fault: Fault) {
        self.armed.push(fault);
    }
    pub(crate) fn clear(&mut self) {
        self.armed.clear();
    }
    pub(crate) fn armed(&self) -> Vec<Fault> {
        self.armed.clone()
    }

    pub(crate) fn take_exec(&mut self, pod: &str, argv: &[String]) -> Option<ExecFault> {
        let command = argv.join(" ");
        let idx = self.armed.iter().position(|f| match f {
            Fault::DropExec {
                pod: p,
                count,
                argv_contains,
                ..
            }
            | Fault::StallExec {
                pod: p,
                count,
                argv_contains,
                ..
            } => {
                *count > 0
                    && scoped(p, pod)
                    && argv_contains.as_deref().is_none_or(|text| command.contains(text))
            }
            Fault::ListError { .. } | Fault::LeaseError { .. } => false,
        })?;
        let out = match &mut self.armed[idx] {
            Fault::DropExec {
                count,
                after,
                delay_ms,
                ..
            } => {
                *count -= 1;
                ExecFault::Drop(*after, *delay_ms)
            }
            Fault::StallExec { count, seconds, .. } => {
                *count -= 1;
                ExecFault::Stall(*seconds)
            }
            Fault::ListError { .. } | Fault::LeaseError { .. } => unreachable!(),
        };
        self.armed.retain(|f| {
            !matches!(
                f,
                Fault::DropExec { count: 0, .. } | Fault::StallExec { count: 0, .. }
            )
        });
        Some(out)
    }

    pub(crate) fn take_list(&mut self, namespace: &str) -> Option<ListFault> {
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

    /// The status a lease request must get; `namespace` is `""` for the all-namespaces list and
    /// `name` `None` for lists and for a create whose body names none.
    pub(crate) fn take_lease(&mut self, namespace: &str, name: Option<&str>, verb: &str) -> Option<u16> {
        let idx = self.armed.iter().position(|f| {
            matches!(f, Fault::LeaseError { namespace: n, name: l, verb: v, count, .. }
                if *count > 0
                    && scoped(n, namespace)
                    && l.as_deref().is_none_or(|l| Some(l) == name)
                    && scoped(v, verb))
        })?;
        let Fault::LeaseError { count, status, .. } = &mut self.armed[idx] else {
            unreachable!()
        };
        *count -= 1;
        let out = *status;
        self.armed
            .retain(|f| !matches!(f, Fault::LeaseError { count: 0, .. }));
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
            argv_contains: None,
            count: 2,
            after: DropPoint::AfterStart,
            delay_ms: 0,
        });
        f.arm(Fault::ListError {
            namespace: None,
            count: 1,
            status: 429,
            retry_after_seconds: Some(1),
        });
        assert_eq!(f.take_exec("b", &[]), None);
        assert_eq!(
            f.take_exec("a", &[]),
            Some(ExecFault::Drop(DropPoint::AfterStart, 0))
        );
        assert_eq!(
            f.take_exec("a", &[]),
            Some(ExecFault::Drop(DropPoint::AfterStart, 0))
        );
        assert_eq!(f.take_exec("a", &[]), None);
        assert_eq!(f.take_list("x").map(|l| l.status), Some(429));
        assert_eq!(f.take_list("x"), None);
        assert!(f.armed().is_empty());
    }

    #[test]
    fn an_exec_fault_scoped_to_a_command_spares_the_others() {
        let mut f = Faults::default();
        f.arm(Fault::StallExec {
            pod: None,
            argv_contains: Some("--multiquery".into()),
            count: 1,
            seconds: 5,
        });
        let writer = ["sh".to_owned(), "-c".to_owned(), "clickhouse-client".to_owned()];
        let product = [
            "sh".to_owned(),
            "-c".to_owned(),
            "clickhouse-client --multiquery".to_owned(),
        ];
        assert_eq!(f.take_exec("a", &writer), None);
        assert_eq!(f.take_exec("a", &product), Some(ExecFault::Stall(5)));
        assert_eq!(f.take_exec("a", &product), None);
    }

    #[test]
    fn lease_faults_match_namespace_name_and_verb() {
        let mut f = Faults::default();
        f.arm(serde_json::from_str(r#"{"kind":"lease_error","name":"deploy","verb":"update"}"#).unwrap());
        f.arm(Fault::LeaseError {
            namespace: Some("a".into()),
            name: None,
            verb: None,
            count: 2,
            status: 500,
        });
        assert_eq!(f.take_lease("b", Some("deploy"), "get"), None);
        assert_eq!(f.take_lease("b", Some("other"), "update"), None);
        assert_eq!(f.take_lease("b", None, "update"), None, "a list names no lease");
        assert_eq!(f.take_lease("b", Some("deploy"), "update"), Some(409));
        assert_eq!(f.take_lease("b", Some("deploy"), "update"), None);
        assert_eq!(
            f.take_lease("", None, "list"),
            None,
            "all namespaces is not namespace a"
        );
        assert_eq!(f.take_lease("a", None, "list"), Some(500));
        assert_eq!(f.take_lease("a", Some("x"), "delete"), Some(500));
        assert!(f.armed().is_empty());
    }
}
