//! The one error type of the project.
//!
//! Every failure a user can see — bad configuration, a statement ClickHouse
//! rejected, a transport failure, a pod set that never settled — is a
//! [`ClickHouseSchemaError`]. The napi crate maps it to a JavaScript `Error`
//! in exactly one place, copying these fields onto it as properties.
//!
//! Invariant: `message` and every field are already redacted when the value is
//! built. Nothing downstream (logs, Alchemy state, JS) redacts again, so the
//! constructors that take server output require the redacted form.

use serde::Serialize;

/// Stable, machine-readable classification. The string form (`code()`) is part
/// of the public API: users match on it, so existing values never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ErrorKind {
    /// The props failed validation; `issues` lists every problem.
    InvalidConfig,
    /// ClickHouse rejected a statement (never retried).
    StatementFailed,
    /// The exec transport failed after all retries (WebSocket, reset, timeout).
    Transport,
    /// The Kubernetes API refused or failed a call (list, RBAC, 4xx/5xx).
    KubernetesApi,
    /// Pods did not become Ready within the budget, or no pod ever matched.
    PodsNotReady,
    /// A matching pod has no container named by `target.container`.
    ContainerMissing,
    /// The container's image cannot run the exec command: it has no shell (ClickHouse's
    /// `-distroless` images). Not retried.
    ImageUnsupported,
    /// Fanout could not reach its exit predicate (churn, empty window).
    PodSetUnstable,
    /// `onDelete: 'run'` against a cluster other than the one recorded.
    ClusterMismatch,
    /// `onDelete: 'run'` on state that never recorded an apply.
    NothingApplied,
    /// The recorded state is malformed or names another target than the
    /// props; `issues` lists every problem.
    InvalidState,
    /// The caller cancelled the call (an aborted `AbortSignal`).
    Cancelled,
    /// After the statements ran, a declared object is missing on a pod or has another definition;
    /// `object` and `differences` say which and how.
    SchemaMismatch,
    /// The live-schema check itself could not run on a pod (no scratch database, a failed query).
    VerificationFailed,
    /// The ledger could not be written or read on a pod (a missing grant, a failed query).
    LedgerFailed,
    /// The Lease is held by another deploy, and did not come free within the budget.
    LeaseHeld,
    /// The Lease was taken over by another deploy, or could not be renewed, while this one held it.
    LeaseLost,
    /// A rebuild the `rebuild` prop allows would lose or break something (dependents, an old table
    /// in the way, a replicated table towards a local one), so it did not start.
    RebuildRefused,
    /// A step of a rebuild failed; the live table still serves, and the next apply resumes.
    RebuildFailed,
    /// A bug or an impossible state; the message says what was expected.
    Internal,
}

impl ErrorKind {
    /// Every kind, for tests that check other lists against this one.
    pub const ALL: [ErrorKind; 20] = [
        ErrorKind::InvalidConfig,
        ErrorKind::StatementFailed,
        ErrorKind::Transport,
        ErrorKind::KubernetesApi,
        ErrorKind::PodsNotReady,
        ErrorKind::ContainerMissing,
        ErrorKind::ImageUnsupported,
        ErrorKind::PodSetUnstable,
        ErrorKind::ClusterMismatch,
        ErrorKind::NothingApplied,
        ErrorKind::InvalidState,
        ErrorKind::Cancelled,
        ErrorKind::SchemaMismatch,
        ErrorKind::VerificationFailed,
        ErrorKind::LedgerFailed,
        ErrorKind::LeaseHeld,
        ErrorKind::LeaseLost,
        ErrorKind::RebuildRefused,
        ErrorKind::RebuildFailed,
        ErrorKind::Internal,
    ];

    /// The stable code exposed to JavaScript as `err.code`.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidConfig => "E_INVALID_CONFIG",
            ErrorKind::StatementFailed => "E_STATEMENT_FAILED",
            ErrorKind::Transport => "E_TRANSPORT",
            ErrorKind::KubernetesApi => "E_KUBERNETES_API",
            ErrorKind::PodsNotReady => "E_PODS_NOT_READY",
            ErrorKind::ContainerMissing => "E_CONTAINER_MISSING",
            ErrorKind::ImageUnsupported => "E_IMAGE_UNSUPPORTED",
            ErrorKind::PodSetUnstable => "E_POD_SET_UNSTABLE",
            ErrorKind::ClusterMismatch => "E_CLUSTER_MISMATCH",
            ErrorKind::NothingApplied => "E_NOTHING_APPLIED",
            ErrorKind::InvalidState => "E_INVALID_STATE",
            ErrorKind::Cancelled => "E_CANCELLED",
            ErrorKind::SchemaMismatch => "E_SCHEMA_MISMATCH",
            ErrorKind::VerificationFailed => "E_VERIFICATION_FAILED",
            ErrorKind::LedgerFailed => "E_LEDGER_FAILED",
            ErrorKind::LeaseHeld => "E_LEASE_HELD",
            ErrorKind::LeaseLost => "E_LEASE_LOST",
            ErrorKind::RebuildRefused => "E_REBUILD_REFUSED",
            ErrorKind::RebuildFailed => "E_REBUILD_FAILED",
            ErrorKind::Internal => "E_INTERNAL",
        }
    }
}

/// One problem found in the props: where it is and why it is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigIssue {
    /// Field path as a user writes it: `client.port`, `statements[1]`,
    /// `target.podSelector["app"]`; empty for the top-level object.
    pub path: String,
    /// Plain-language reason, naming what to do where it is not obvious.
    pub reason: String,
}

/// Every failure a caller can see; see the module header. The optional fields
/// are context, set only where they apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("{message}")]
pub struct ClickHouseSchemaError {
    /// What went wrong; its [`ErrorKind::code`] is the stable `E_*` code.
    pub kind: ErrorKind,
    /// Complete, redacted, human-readable message.
    pub message: String,
    /// Id of the resource the failing call was for, when known.
    pub resource_id: Option<String>,
    /// Zero-based position of the failing statement in the list being run.
    pub statement_index: Option<usize>,
    /// Name of the pod the failure happened on.
    pub pod: Option<String>,
    /// ClickHouse's numeric error code (`Code: 57.`), when the server printed one.
    pub clickhouse_code: Option<u32>,
    /// ClickHouse's exception name (or class), when the server printed one.
    pub clickhouse_exception: Option<String>,
    /// Exit code of the clickhouse-client exec, when it ran to completion.
    pub exit_code: Option<i32>,
    /// Non-empty only for `InvalidConfig`.
    pub issues: Vec<ConfigIssue>,
    /// The object a `SchemaMismatch` is about: `database.table`, or a database's name.
    pub object: Option<String>,
    /// For `SchemaMismatch`: the parts of `object` that differ (empty when it is missing).
    pub differences: Vec<crate::live_schema::DifferenceReport>,
}

impl ClickHouseSchemaError {
    /// A bare error of `kind`; add context with the `with_*` builders.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            resource_id: None,
            statement_index: None,
            pod: None,
            clickhouse_code: None,
            clickhouse_exception: None,
            exit_code: None,
            issues: Vec::new(),
            object: None,
            differences: Vec::new(),
        }
    }

    /// The validation error: one message listing every issue, one per line, so
    /// a user fixes all of them in one round instead of one per deploy.
    pub fn invalid_config(resource_id: &str, issues: Vec<ConfigIssue>) -> Self {
        let mut message = format!("Invalid ClickHouseSchema configuration for '{resource_id}':");
        for issue in &issues {
            message.push_str("\n  - ");
            if !issue.path.is_empty() {
                message.push_str(&issue.path);
                message.push_str(": ");
            }
            message.push_str(&issue.reason);
        }
        Self {
            resource_id: Some(resource_id.to_owned()),
            issues,
            ..Self::new(ErrorKind::InvalidConfig, message)
        }
    }

    /// A recorded state that cannot be acted on: malformed, or written for
    /// another target than the props name. Nothing has been called yet.
    pub fn invalid_state(resource_id: &str, issues: Vec<ConfigIssue>) -> Self {
        let mut message = format!(
            "ClickHouseSchema '{resource_id}': the recorded state cannot be used, so nothing was run on the \
             cluster:"
        );
        for issue in &issues {
            message.push_str("\n  - ");
            message.push_str(&issue.path);
            message.push_str(": ");
            message.push_str(&issue.reason);
        }
        message.push_str(
            "\nRestore the state the last deploy wrote, or drop the objects by hand and remove the resource \
             with onDelete 'retain'.",
        );
        Self {
            resource_id: Some(resource_id.to_owned()),
            issues,
            ..Self::new(ErrorKind::InvalidState, message)
        }
    }

    /// The stable `E_*` code of [`Self::kind`].
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    pub(crate) fn with_resource_id(mut self, id: impl Into<String>) -> Self {
        self.resource_id = Some(id.into());
        self
    }

    pub(crate) fn with_statement_index(mut self, index: usize) -> Self {
        self.statement_index = Some(index);
        self
    }

    pub(crate) fn with_pod(mut self, pod: impl Into<String>) -> Self {
        self.pod = Some(pod.into());
        self
    }

    pub(crate) fn with_object(
        mut self,
        object: impl Into<String>,
        differences: Vec<crate::live_schema::DifferenceReport>,
    ) -> Self {
        self.object = Some(object.into());
        self.differences = differences;
        self
    }

    pub(crate) fn with_exit_code(mut self, exit_code: i32) -> Self {
        self.exit_code = Some(exit_code);
        self
    }

    pub(crate) fn with_clickhouse(mut self, code: Option<u32>, exception: Option<String>) -> Self {
        self.clickhouse_code = code;
        self.clickhouse_exception = exception;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_config_message_lists_every_issue_with_its_path() {
        let err = ClickHouseSchemaError::invalid_config(
            "orders-schema",
            vec![
                ConfigIssue {
                    path: "client.port".into(),
                    reason: "must be between 1 and 65535".into(),
                },
                ConfigIssue {
                    path: "".into(),
                    reason: "expected an object".into(),
                },
            ],
        );
        assert_eq!(err.code(), "E_INVALID_CONFIG");
        assert_eq!(err.resource_id.as_deref(), Some("orders-schema"));
        assert_eq!(
            err.to_string(),
            "Invalid ClickHouseSchema configuration for 'orders-schema':\n  - client.port: must be between 1 and 65535\n  - expected an object"
        );
        assert_eq!(err.issues.len(), 2);
    }

    #[test]
    fn codes_are_distinct() {
        use std::collections::HashSet;
        let kinds = ErrorKind::ALL;
        let codes: HashSet<_> = kinds.iter().map(|k| k.code()).collect();
        assert_eq!(codes.len(), kinds.len());
    }
}
