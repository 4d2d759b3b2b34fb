//! `metav1.Status` bodies: clients (kubectl, kube-rs) parse these to print errors, so the shape
//! and the reasons must be the apiserver's.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub(crate) fn status_body(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut v = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(d) = details {
        v["details"] = d;
    }
    v
}

pub(crate) fn failure(code: u16, reason: &str, message: &str, details: Option<Value>) -> Response {
    json_response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &status_body(code, reason, message, details),
    )
}

pub(crate) fn json_response(code: StatusCode, body: &Value) -> Response {
    let mut r = (code, body.to_string()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(crate) fn not_found(resource: &str, name: &str) -> Response {
    failure(
        404,
        "NotFound",
        &format!("{resource} \"{name}\" not found"),
        Some(json!({"name": name, "kind": resource})),
    )
}

pub(crate) fn bad_request(message: &str) -> Response {
    failure(400, "BadRequest", message, None)
}

pub(crate) fn unauthorized() -> Response {
    failure(401, "Unauthorized", "Unauthorized", None)
}
