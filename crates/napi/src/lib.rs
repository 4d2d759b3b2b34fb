//! Node-API binding of alchemy-clickhouse-schema.
//!
//! This crate converts JavaScript values into core types and core errors into
//! JavaScript errors. No rule lives here: anything a user can observe is decided
//! by `clickhouse-schema-core` and `clickhouse-schema-kube`, so the same
//! behaviour is testable from Rust without Node.

// napi-derive registers exports with Node only outside `cfg(test)`, so in the
// test build (clippy --all-targets) every export looks unused.
#![cfg_attr(test, allow(dead_code))]

mod clock;
mod js_connection;
mod js_error;
mod js_executor;
// Declared in both builds (index.d.ts comes from the native one), driven only
// by the WASM build.
#[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
mod js_kubernetes;
mod js_options;
mod js_value;
mod lifecycle;
mod timers;

use clickhouse_schema_core::{
    ClickHouseSchemaError, ConfigIssue,
    config::{fingerprint as fp, validate},
    sql::{credential_literals, redact},
};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::js_error::throw;

/// Resource id used when a caller asks for a fingerprint without naming the resource.
const ANONYMOUS_ID: &str = "<anonymous>";

/// Validates `props` for the resource `id` and returns the resolved
/// configuration (every default applied). Throws a `ClickHouseSchemaError`
/// (`code: 'E_INVALID_CONFIG'`, `issues: [{ path, reason }]`) listing every problem.
#[napi(ts_return_type = "unknown")]
pub(crate) fn validate_config(
    env: &Env,
    id: String,
    #[napi(ts_arg_type = "unknown")] props: Unknown<'_>,
) -> Result<serde_json::Value> {
    let resolved = props_json(&id, props)
        .and_then(|props| validate::validate(&id, &props))
        .map_err(|e| throw(env, &e))?;
    serde_json::to_value(&resolved).map_err(|e| Error::from_reason(format!("internal: {e}")))
}

/// Warnings about valid props: each statement that holds a credential
/// literal, which Alchemy would store verbatim with the props. Validates
/// first and throws like `validateConfig`; an empty array when all is well.
#[napi]
pub(crate) fn config_warnings(
    env: &Env,
    id: String,
    #[napi(ts_arg_type = "unknown")] props: Unknown<'_>,
) -> Result<Vec<ConfigWarning>> {
    let resolved = props_json(&id, props)
        .and_then(|props| validate::validate(&id, &props))
        .map_err(|e| throw(env, &e))?;
    Ok(credential_literals::credential_warnings(&resolved)
        .into_iter()
        .map(|w| ConfigWarning {
            path: w.path,
            reason: w.reason,
        })
        .collect())
}

/// A warning about valid props: where, and why it matters.
#[napi(object)]
pub(crate) struct ConfigWarning {
    /// Where in the props, e.g. `settings["password"]` or `statements[2]`.
    pub path: String,
    /// What was noticed and what to do instead.
    pub reason: String,
}

/// The fingerprint of `props`: a sha256 hex string over what is applied
/// (statements, settings, resolved client, execution model). Validates first,
/// so an invalid config throws exactly as `validateConfig` does.
#[napi]
pub(crate) fn fingerprint(
    env: &Env,
    #[napi(ts_arg_type = "unknown")] props: Unknown<'_>,
    id: Option<String>,
) -> Result<String> {
    let id = id.as_deref().unwrap_or(ANONYMOUS_ID);
    let resolved = props_json(id, props)
        .and_then(|props| validate::validate(id, &props))
        .map_err(|e| throw(env, &e))?;
    Ok(fp::fingerprint(&resolved))
}

/// Props as JSON for validation; values JSON cannot hold (`NaN`, functions,
/// ...) fail as `E_INVALID_CONFIG` naming their paths. `undefined` props
/// become `null`, which validation reports like any other non-object.
pub(crate) fn props_json(
    id: &str,
    props: Unknown<'_>,
) -> std::result::Result<serde_json::Value, ClickHouseSchemaError> {
    js_value::to_json(props).map_err(|issues| ClickHouseSchemaError::invalid_config(id, issues))
}

/// A recorded state (`what` names the argument) as JSON; `None` for
/// `undefined` and `null`. Values JSON cannot hold fail as `E_INVALID_STATE`.
pub(crate) fn state_json(
    id: &str,
    what: &str,
    state: Unknown<'_>,
) -> std::result::Result<Option<serde_json::Value>, ClickHouseSchemaError> {
    match js_value::to_json(state) {
        Ok(serde_json::Value::Null) => Ok(None),
        Ok(value) => Ok(Some(value)),
        Err(issues) => Err(ClickHouseSchemaError::invalid_state(
            id,
            issues
                .into_iter()
                .map(|i| ConfigIssue {
                    path: if i.path.is_empty() {
                        what.to_owned()
                    } else {
                        format!("{what}.{}", i.path)
                    },
                    reason: i.reason,
                })
                .collect(),
        )),
    }
}

/// What survives redaction of a ClickHouse output: the redacted text and the
/// code and exception class parsed from the raw output before redaction.
#[napi(object)]
pub(crate) struct RedactedOutput {
    /// The output with the statement, its literals and credentials removed.
    pub text: String,
    /// The ClickHouse error code (`Code: N`), when the output carried one.
    pub click_house_code: Option<u32>,
    /// The ClickHouse exception class (e.g. `DB::Exception`), when present.
    pub click_house_exception: Option<String>,
}

/// Redacts `output` (clickhouse-client's stdout/stderr) as if `statement` had
/// produced it: the statement and every literal in it are removed in every
/// spelling, keyword lines are filtered, and the result is capped at 2 KiB.
#[napi]
pub(crate) fn redact_click_house_output(output: String, statement: String) -> RedactedOutput {
    let redacted = redact::redact_clickhouse_output(&output, &statement);
    RedactedOutput {
        text: redacted.text,
        click_house_code: redacted.clickhouse_code,
        click_house_exception: redacted.clickhouse_exception,
    }
}
