//! The OpenAPI v3 kubectl reads before `create`, `apply` and `replace -f`. Its client-side
//! validation first asks the OpenAPI whether the server validates fields itself (the kind's PATCH
//! operation takes `fieldValidation`); with no OpenAPI at all it stops with "error validating data:
//! failed to download openapi". So the Lease group is described exactly as far as kubectl looks:
//!
//! - the PATCH of a Lease, with its `x-kubernetes-group-version-kind` and `fieldValidation`: kubectl
//!   then leaves validation to the server and sends `fieldValidation=Strict`;
//! - its request body types, strategic merge patch among them: `kubectl apply` then computes a
//!   strategic merge patch; with no component schema for Lease here it takes the field metadata
//!   from its built-in types (same patch as from the real schema).
//!
//! The core group (pods) is not described: `kubectl apply -f` of a pod still finds no schema to
//! validate with and needs `--validate=false`, as before this existed.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use axum::Router;
use axum::extract::State as AxState;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::api::request::authenticated;
use crate::auth::COORDINATION;
use crate::state::State;
use crate::status;

type S = AxState<Arc<State>>;

const COORDINATION_V1: &str = "/openapi/v3/apis/coordination.k8s.io/v1";

pub(crate) fn routes() -> Router<Arc<State>> {
    Router::new()
        .route("/openapi/v3", get(root))
        .route(COORDINATION_V1, get(coordination_v1))
}

fn coordination_v1_document() -> Value {
    let query = |name: &str, description: &str| {
        json!({"name": name, "in": "query", "description": description,
               "schema": {"type": "string", "uniqueItems": true}})
    };
    let path = |name: &str, description: &str| {
        json!({"name": name, "in": "path", "description": description, "required": true,
               "schema": {"type": "string", "uniqueItems": true}})
    };
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": {
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}": {
                "parameters": [
                    path("name", "name of the Lease"),
                    path("namespace", "object name and auth scope, such as for teams and projects"),
                ],
                "patch": {
                    "tags": ["coordination_v1"],
                    "description": "partially update the specified Lease",
                    "operationId": "patchCoordinationV1NamespacedLease",
                    "parameters": [
                        query("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
                        query("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict."),
                    ],
                    "requestBody": {
                        "content": {
                            "application/merge-patch+json": {},
                            "application/strategic-merge-patch+json": {},
                        },
                        "required": true,
                    },
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": {"group": COORDINATION, "version": "v1", "kind": "Lease"},
                },
            },
        },
        "components": {"schemas": {}},
    })
}

/// The `hash` query the root gives each document's URL, which clients cache by: any change of the
/// document changes it.
fn hash(doc: &Value) -> String {
    let mut h = std::hash::DefaultHasher::new();
    doc.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

async fn root(AxState(state): S, headers: HeaderMap) -> Response {
    if let Err(r) = authenticated(&state, &headers) {
        return r.into_response();
    }
    let url = format!("{COORDINATION_V1}?hash={}", hash(&coordination_v1_document()));
    status::json_response(
        StatusCode::OK,
        &json!({"paths": {"apis/coordination.k8s.io/v1": {"serverRelativeURL": url}}}),
    )
}

async fn coordination_v1(AxState(state): S, headers: HeaderMap) -> Response {
    if let Err(r) = authenticated(&state, &headers) {
        return r.into_response();
    }
    status::json_response(StatusCode::OK, &coordination_v1_document())
}
