//! The configuration model: resolved props with every default applied.
//! OWNER: config helper. Stub so the crate compiles.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedConfig {}
