//! Props validation. OWNER: config helper. Stub so the crate compiles.

use crate::config::ResolvedConfig;
use crate::error::ClickHouseSchemaError;

pub fn validate(
    _resource_id: &str,
    _props: &serde_json::Value,
) -> Result<ResolvedConfig, ClickHouseSchemaError> {
    Ok(ResolvedConfig {})
}
