//! Node-API binding of alchemy-clickhouse-schema.
//!
//! This crate converts JavaScript values into core types and core errors into
//! JavaScript errors. No rule lives here: anything a user can observe is decided
//! by `clickhouse-schema-core` and `clickhouse-schema-kube`, so the same
//! behaviour is testable from Rust without Node.

// napi-derive registers exports with Node only outside `cfg(test)`, so in the
// test build (clippy --all-targets) every export looks unused.
#![cfg_attr(test, allow(dead_code))]

mod js_error;
mod js_executor;
mod lifecycle;

use clickhouse_schema_core::{fingerprint as fp, redact, validate};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::js_error::throw;

/// Resource id used when a caller asks for a fingerprint without naming the resource.
const ANONYMOUS_ID: &str = "<anonymous>";

/// Validates `props` for the resource `id` and returns the resolved
/// configuration (every default applied). Throws a `ClickHouseSchemaError`
/// (`code: 'E_INVALID_CONFIG'`, `issues: [{ path, reason }]`) listing every problem.
#[napi(ts_return_type = "unknown")]
pub fn validate_config(
    env: &Env,
    id: String,
    #[napi(ts_arg_type = "unknown")] props: Option<serde_json::Value>,
) -> Result<serde_json::Value> {
    let resolved = validate::validate(&id, &props_or_null(props)).map_err(|e| throw(env, &e))?;
    serde_json::to_value(&resolved).map_err(|e| Error::from_reason(format!("internal: {e}")))
}

/// The fingerprint of `props`: a sha256 hex string over what is applied
/// (statements, settings, resolved client, execution model). Validates first,
/// so an invalid config throws exactly as `validateConfig` does.
#[napi]
pub fn fingerprint(
    env: &Env,
    #[napi(ts_arg_type = "unknown")] props: Option<serde_json::Value>,
    id: Option<String>,
) -> Result<String> {
    let id = id.as_deref().unwrap_or(ANONYMOUS_ID);
    let resolved = validate::validate(id, &props_or_null(props)).map_err(|e| throw(env, &e))?;
    Ok(fp::fingerprint(&resolved))
}

/// `undefined` props arrive as `None`; validation reports them like `null`
/// instead of napi failing the conversion with an error of its own.
pub(crate) fn props_or_null(props: Option<serde_json::Value>) -> serde_json::Value {
    props.unwrap_or(serde_json::Value::Null)
}

/// What survives redaction of a ClickHouse output: the redacted text and the
/// code and exception class parsed from the raw output before redaction.
#[napi(object)]
pub struct RedactedOutput {
    pub text: String,
    pub click_house_code: Option<u32>,
    pub click_house_exception: Option<String>,
}

/// Redacts `output` (clickhouse-client's stdout/stderr) as if `statement` had
/// produced it: the statement and every literal in it are removed in every
/// spelling, keyword lines are filtered, and the result is capped at 2 KiB.
#[napi]
pub fn redact_click_house_output(output: String, statement: String) -> RedactedOutput {
    let redacted = redact::redact_clickhouse_output(&output, &statement);
    RedactedOutput {
        text: redacted.text,
        click_house_code: redacted.clickhouse_code,
        click_house_exception: redacted.clickhouse_exception,
    }
}
