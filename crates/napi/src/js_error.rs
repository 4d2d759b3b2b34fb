//! The one mapping from `ClickHouseSchemaError` to a JavaScript `Error`.
//!
//! A plain `napi::Error` only carries a message and a status, so the error is
//! built as a real JS `Error` object on the JS thread and every field of the
//! core error is copied onto it. JS callers then read `err.code`,
//! `err.resourceId`, `err.statementIndex`, ... exactly as TypeScript declares
//! them, and `err instanceof Error` holds.

use clickhouse_schema_core::{ClickHouseSchemaError, ErrorKind};
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// The stable `code` of every `ClickHouseSchemaError`. Generated into
/// `index.d.ts` from this enum, whose values are the core's
/// `ErrorKind::code()`: the match in [`ClickHouseSchemaErrorCode::of`] makes a
/// new kind fail to compile until it is listed here, and a test checks the
/// strings agree.
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
#[napi(string_enum)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClickHouseSchemaErrorCode {
    /// The props failed validation; `issues` lists every problem.
    E_INVALID_CONFIG,
    /// ClickHouse rejected a statement (never retried).
    E_STATEMENT_FAILED,
    /// The exec transport failed after all retries, or gave an unusable result.
    E_TRANSPORT,
    /// The Kubernetes API refused or failed a call.
    E_KUBERNETES_API,
    /// Pods did not become Ready within the budget, or none matched.
    E_PODS_NOT_READY,
    /// A matching pod has no container named by `target.container`.
    E_CONTAINER_MISSING,
    /// The container's image cannot run the exec command: it has no shell (ClickHouse's
    /// `-distroless` images). Not retried.
    E_IMAGE_UNSUPPORTED,
    /// Fanout could not reach its exit predicate (churn, empty window).
    E_POD_SET_UNSTABLE,
    /// `onDelete: 'run'` against another cluster than the one recorded.
    E_CLUSTER_MISMATCH,
    /// `onDelete: 'run'` with no recorded apply.
    E_NOTHING_APPLIED,
    /// The recorded state is malformed or names another target.
    E_INVALID_STATE,
    /// The caller aborted the call's `AbortSignal`.
    E_CANCELLED,
    /// After the statements ran, a declared object is missing on a pod or has another
    /// definition; `object` and `differences` say which and how.
    E_SCHEMA_MISMATCH,
    /// The live-schema check could not run on a pod.
    E_VERIFICATION_FAILED,
    /// The ledger could not be written or read on a pod.
    E_LEDGER_FAILED,
    /// Another deploy holds the resource's Lease, and it did not come free in time; the
    /// message names the holder and when it last renewed the lease (by its own clock).
    E_LEASE_HELD,
    /// Another deploy took the Lease over, or no renewal succeeded within the renew deadline
    /// (two thirds of its duration), while this call held it.
    E_LEASE_LOST,
    E_REBUILD_REFUSED,
    E_REBUILD_FAILED,
    /// A bug; the message says what was expected.
    E_INTERNAL,
}

impl ClickHouseSchemaErrorCode {
    /// The code of `kind`.
    pub fn of(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::InvalidConfig => Self::E_INVALID_CONFIG,
            ErrorKind::StatementFailed => Self::E_STATEMENT_FAILED,
            ErrorKind::Transport => Self::E_TRANSPORT,
            ErrorKind::KubernetesApi => Self::E_KUBERNETES_API,
            ErrorKind::PodsNotReady => Self::E_PODS_NOT_READY,
            ErrorKind::ContainerMissing => Self::E_CONTAINER_MISSING,
            ErrorKind::ImageUnsupported => Self::E_IMAGE_UNSUPPORTED,
            ErrorKind::PodSetUnstable => Self::E_POD_SET_UNSTABLE,
            ErrorKind::ClusterMismatch => Self::E_CLUSTER_MISMATCH,
            ErrorKind::NothingApplied => Self::E_NOTHING_APPLIED,
            ErrorKind::InvalidState => Self::E_INVALID_STATE,
            ErrorKind::Cancelled => Self::E_CANCELLED,
            ErrorKind::SchemaMismatch => Self::E_SCHEMA_MISMATCH,
            ErrorKind::VerificationFailed => Self::E_VERIFICATION_FAILED,
            ErrorKind::LedgerFailed => Self::E_LEDGER_FAILED,
            ErrorKind::LeaseHeld => Self::E_LEASE_HELD,
            ErrorKind::LeaseLost => Self::E_LEASE_LOST,
            ErrorKind::RebuildRefused => Self::E_REBUILD_REFUSED,
            ErrorKind::RebuildFailed => Self::E_REBUILD_FAILED,
            ErrorKind::Internal => Self::E_INTERNAL,
        }
    }
}

/// `name` of every error the addon throws, so JS code can tell ours apart
/// from programming errors without importing a class across the boundary.
pub(crate) const ERROR_NAME: &str = "ClickHouseSchemaError";

/// Converts `err` into a thrown JS error; returned as `napi::Error` so callers
/// use it with `?` / `map_err`.
///
/// The `napi::Error` must carry the object itself, not a copy of its message:
/// napi rebuilds a plain `Error` from `status` and `reason` whenever it has no
/// reference to the original, and that error has none of our properties.
/// `Error::from(Unknown)` keeps such a reference only in native builds (under
/// WASM it copies the message alone, so every property was lost there);
/// `from_unknown_without_coercion` keeps one on every target, and both the
/// synchronous throw and the promise rejection hand that object back.
pub(crate) fn throw(env: &Env, err: &ClickHouseSchemaError) -> Error {
    match build(env, err) {
        Ok(value) => Error::from_unknown_without_coercion(value),
        // Building the object only fails when the JS heap is exhausted; the
        // message alone is still worth surfacing.
        Err(_) => Error::new(Status::GenericFailure, format!("{}: {}", err.code(), err.message)),
    }
}

fn build<'env>(env: &'env Env, err: &ClickHouseSchemaError) -> Result<Unknown<'env>> {
    let mut obj = env.create_error(Error::new(Status::GenericFailure, err.message.clone()))?;
    obj.set_named_property("name", ERROR_NAME)?;
    // Effect's tagged-error convention: `Effect.catchTag('ClickHouseSchemaError', ...)`.
    obj.set_named_property("_tag", ERROR_NAME)?;
    obj.set_named_property("code", ClickHouseSchemaErrorCode::of(err.kind))?;
    set_optional(&mut obj, "resourceId", err.resource_id.as_deref())?;
    set_optional(&mut obj, "statementIndex", err.statement_index.map(|i| i as u32))?;
    set_optional(&mut obj, "pod", err.pod.as_deref())?;
    set_optional(&mut obj, "clickHouseCode", err.clickhouse_code)?;
    set_optional(
        &mut obj,
        "clickHouseException",
        err.clickhouse_exception.as_deref(),
    )?;
    set_optional(&mut obj, "exitCode", err.exit_code)?;
    set_optional(&mut obj, "object", err.object.as_deref())?;
    if err.kind == ErrorKind::SchemaMismatch {
        let differences = serde_json::to_value(&err.differences)
            .map_err(|e| Error::from_reason(format!("internal: differences not serializable: {e}")))?;
        obj.set_named_property("differences", differences)?;
    }
    if !err.issues.is_empty() {
        let issues = serde_json::to_value(&err.issues)
            .map_err(|e| Error::from_reason(format!("internal: issues not serializable: {e}")))?;
        obj.set_named_property("issues", issues)?;
    }
    Ok(obj.to_unknown())
}

/// Absent fields stay absent (not `undefined`-valued keys), matching the
/// optional properties declared in TypeScript.
fn set_optional<V: ToNapiValue>(obj: &mut Object, key: &str, value: Option<V>) -> Result<()> {
    match value {
        Some(v) => obj.set_named_property(key, v),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generated_code_is_the_cores() {
        for kind in ErrorKind::ALL {
            assert_eq!(format!("{:?}", ClickHouseSchemaErrorCode::of(kind)), kind.code());
        }
    }
}
