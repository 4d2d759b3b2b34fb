//! A pod selector as text, the way kubectl users write it, for messages (the
//! run's, and the state's comparison of a recorded target with the props).

use std::collections::BTreeMap;

/// `k1=v1,k2=v2`, the selector as kubectl users write it.
pub(crate) fn selector_text(selector: &BTreeMap<String, String>) -> String {
    selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}
