//! A record of every Kubernetes API request the sandbox served (not the
//! control API), so tests can assert what a converge cost: "an unchanged
//! converge lists pods once and execs nothing" is a claim about requests.
//! The router logs them (`api::record`) into the state.

use serde::Serialize;

/// One Kubernetes API request, logged before authorization, so refused ones count too (paths the
/// API does not serve, which get a 404, are not logged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiRequest {
    /// HTTP method; exec arrives as `GET` or `POST`, depending on the client.
    pub method: String,
    /// Path without the query, e.g. `/api/v1/namespaces/sandbox/pods`.
    pub path: String,
    /// The raw query string (label selector, exec parameters).
    pub query: Option<String>,
}

impl ApiRequest {
    /// A `list pods` call, in any namespace or across all of them.
    pub fn is_pod_list(&self) -> bool {
        self.method == "GET" && self.path.ends_with("/pods") && self.path.starts_with("/api/v1/")
    }

    /// A `pods/exec` call, whether or not it was allowed and upgraded.
    pub fn is_exec(&self) -> bool {
        self.path.ends_with("/exec")
    }
}
