//! The one mapping from `ClickHouseSchemaError` to a JavaScript `Error`.
//!
//! A plain `napi::Error` only carries a message and a status, so the error is
//! built as a real JS `Error` object on the JS thread and every field of the
//! core error is copied onto it. JS callers then read `err.code`,
//! `err.resourceId`, `err.statementIndex`, ... exactly as TypeScript declares
//! them, and `err instanceof Error` holds.

use clickhouse_schema_core::ClickHouseSchemaError;
use napi::bindgen_prelude::*;

/// `name` of every error the addon throws, so JS code can tell ours apart
/// from programming errors without importing a class across the boundary.
pub const ERROR_NAME: &str = "ClickHouseSchemaError";

/// Converts `err` into a thrown JS error; returned as `napi::Error` so callers
/// use it with `?` / `map_err`.
pub fn throw(env: &Env, err: &ClickHouseSchemaError) -> Error {
    match build(env, err) {
        Ok(value) => Error::from(value),
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
    obj.set_named_property("code", err.code())?;
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
