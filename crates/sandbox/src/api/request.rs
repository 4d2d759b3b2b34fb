//! The request helpers the API's handlers share (authentication for discovery, query
//! parameters, watches, the table form): the router's, so that no handler imports the router.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::auth::Denied;
use crate::state::State;

/// Discovery needs a valid token (any role), as `system:discovery` grants it to authenticated users.
pub(crate) fn authenticated(state: &State, headers: &HeaderMap) -> Result<(), Denied> {
    state
        .auth
        .authenticate(headers)
        .map(|_| ())
        .ok_or(Denied::Unauthorized)
}

pub(crate) fn query_pairs(q: &Option<String>) -> Vec<(String, String)> {
    form_urlencoded::parse(q.as_deref().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

pub(crate) fn param<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Watches are not a product need; an answer with the current objects and an immediate end lets
/// clients that open one (kubectl's `--wait`) see the state and move on.
pub(crate) fn watch_events(objects: Vec<Value>) -> Response {
    let body: String = objects
        .into_iter()
        .map(|o| json!({"type": "ADDED", "object": o}).to_string() + "\n")
        .collect();
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(crate) fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}
