//! The Kubernetes API subset: discovery (what kubectl reads before anything else) and pods; the
//! `coordination.k8s.io` leases (`leases/`) and the OpenAPI kubectl validates with (`openapi.rs`)
//! are merged in here. The helpers their handlers share are `request`'s, so no handler imports
//! this router.

pub(crate) mod request;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::api_log::ApiRequest;
use crate::auth::Attributes;
use crate::pods::{Pod, pod_list, pod_table};
use crate::selector::{FieldSelector, LabelSelector};
use crate::state::State;
use crate::{exec, leases, openapi, status};
use request::{authenticated, param, query_pairs, wants_table, watch_events};

type S = AxState<Arc<State>>;

pub(crate) fn routes() -> Router<Arc<State>> {
    Router::new()
        .route("/version", get(version))
        .route("/healthz", get(ok))
        .route("/readyz", get(ok))
        .route("/livez", get(ok))
        .route("/api", get(api_versions))
        .route("/apis", get(api_groups))
        .route("/api/v1", get(api_v1))
        .route("/apis/coordination.k8s.io", get(coordination_group))
        .route("/apis/coordination.k8s.io/v1", get(coordination_v1))
        .route("/api/v1/namespaces/{name}", get(get_namespace))
        .route("/api/v1/pods", get(list_all_pods))
        .route("/api/v1/namespaces/{ns}/pods", get(list_pods))
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}",
            get(get_pod).delete(delete_pod),
        )
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}/exec",
            get(exec::handle).post(exec::handle),
        )
        .merge(leases::routes())
        .merge(openapi::routes())
}

/// Logs every request of the routes it layers (see `api_log`), before their authorization.
pub(crate) async fn record(AxState(state): AxState<Arc<State>>, request: Request, next: Next) -> Response {
    state.log_api(ApiRequest {
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
        query: request.uri().query().map(str::to_owned),
    });
    next.run(request).await
}

pub(crate) async fn not_found_route() -> Response {
    status::failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    )
}

async fn ok() -> &'static str {
    "ok"
}

async fn version() -> Response {
    status::json_response(
        StatusCode::OK,
        &json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-sandbox", "gitCommit": "sandbox",
            "gitTreeState": "clean", "buildDate": "2025-04-23T00:00:00Z", "goVersion": "go1.24.2",
            "compiler": "gc", "platform": "linux/amd64",
        }),
    )
}

async fn api_versions(AxState(state): S, headers: HeaderMap) -> Response {
    if let Err(r) = authenticated(&state, &headers) {
        return r.into_response();
    }
    status::json_response(
        StatusCode::OK,
        &json!({"kind": "APIVersions", "versions": ["v1"]}),
    )
}

async fn api_groups(AxState(state): S, headers: HeaderMap) -> Response {
    if let Err(r) = authenticated(&state, &headers) {
        return r.into_response();
    }
    // Plain `application/json` whatever the Accept: kubectl 1.32/1.33 ask for the aggregated
    // `apidiscovery.k8s.io/v2` list first, see this content type and fall back to reading
    // `/apis/<group>/<version>` for each group listed here.
    status::json_response(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [leases::api_group()]}),
    )
}

async fn coordination_group(AxState(state): S, headers: HeaderMap) -> Response {
    if let Err(r) = authenticated(&state, &headers) {
        return r.into_response();
    }
    let mut group = leases::api_group();
    group["kind"] = json!("APIGroup");
    group["apiVersion"] = json!("v1");
    status::json_response(StatusCode::OK, &group)
}

async fn coordination_v1(AxState(state): S, headers: HeaderMap) -> Response {
    if let Err(r) = authenticated(&state, &headers) {
        return r.into_response();
    }
    status::json_response(StatusCode::OK, &leases::api_resource_list())
}

async fn api_v1(AxState(state): S, headers: HeaderMap) -> Response {
    if let Err(r) = authenticated(&state, &headers) {
        return r.into_response();
    }
    status::json_response(
        StatusCode::OK,
        &json!({
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                 "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                 "shortNames": ["po"], "categories": ["all"]},
                {"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions",
                 "verbs": ["create", "get"]},
                {"name": "pods/status", "singularName": "", "namespaced": true, "kind": "Pod",
                 "verbs": ["get", "patch", "update"]},
            ],
        }),
    )
}

/// Namespaces are no resource of the sandbox (not in discovery, no list), but kubectl reads one:
/// when a GET of a namespaced object is 404, cli-runtime GETs the object's namespace and, if that
/// is 404 too, reports `namespaces "x" not found` instead of the object's own NotFound. So the
/// namespaces that exist are answered: the sandbox's, Kubernetes' own four, and any holding a pod
/// or a lease.
async fn get_namespace(AxState(state): S, Path(name): Path<String>, headers: HeaderMap) -> Response {
    if let Err(r) = state.auth.authorize(
        &headers,
        Attributes {
            verb: "get",
            group: "",
            resource: "namespaces",
            namespace: None,
            name: Some(&name),
        },
    ) {
        return r.into_response();
    }
    let exists = [
        state.namespace.as_str(),
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
    ]
    .contains(&name.as_str())
        || state.pods().iter().any(|p| p.namespace == name)
        || !state.leases.list(Some(&name)).is_empty();
    if !exists {
        return status::not_found("namespaces", &name);
    }
    status::json_response(
        StatusCode::OK,
        &json!({
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }),
    )
}

async fn list_all_pods(state: S, headers: HeaderMap, q: RawQuery) -> Response {
    list(state, headers, q, None).await
}

async fn list_pods(state: S, Path(ns): Path<String>, headers: HeaderMap, q: RawQuery) -> Response {
    list(state, headers, q, Some(ns)).await
}

async fn list(AxState(state): S, headers: HeaderMap, RawQuery(q): RawQuery, ns: Option<String>) -> Response {
    let pairs = query_pairs(&q);
    let watch = param(&pairs, "watch").is_some_and(|w| w == "true" || w == "1");
    let verb = if watch { "watch" } else { "list" };
    if let Err(r) = state.auth.authorize(
        &headers,
        Attributes {
            verb,
            group: "",
            resource: "pods",
            namespace: ns.as_deref(),
            name: None,
        },
    ) {
        return r.into_response();
    }
    if let Some(fault) = state.faults().take_list(ns.as_deref().unwrap_or("")) {
        let mut r = if fault.status == 429 {
            status::failure(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                Some(json!({
                "retryAfterSeconds": fault.retry_after_seconds.unwrap_or(1)})),
            )
        } else {
            status::failure(
                fault.status,
                "InternalError",
                "Internal error occurred: injected by the sandbox",
                Some(json!({"causes": [{"message": "injected by the sandbox"}]})),
            )
        };
        if let Some(secs) = fault.retry_after_seconds.or((fault.status == 429).then_some(1)) {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        return r;
    }
    let labels = match LabelSelector::parse(param(&pairs, "labelSelector").unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return status::bad_request(&format!("unable to parse requirement: {e}")),
    };
    let fields = match FieldSelector::parse(param(&pairs, "fieldSelector").unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return status::bad_request(&e.0),
    };
    let (items, rv): (Vec<Pod>, u64) = {
        let store = state.store();
        let items = store
            .pods
            .values()
            .filter(|p| ns.as_ref().is_none_or(|n| &p.namespace == n))
            .filter(|p| labels.matches(&p.labels) && fields.matches(|f| p.field(f)))
            .cloned()
            .collect();
        (items, store.resource_version)
    };
    if watch {
        return watch_events(items.iter().map(Pod::to_json).collect());
    }
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if wants_table(accept) {
        let include = param(&pairs, "includeObject").unwrap_or("Metadata");
        return status::json_response(StatusCode::OK, &pod_table(&items, rv, include));
    }
    status::json_response(StatusCode::OK, &pod_list(&items, rv))
}

async fn get_pod(
    AxState(state): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = state.auth.authorize(
        &headers,
        Attributes {
            verb: "get",
            group: "",
            resource: "pods",
            namespace: Some(&ns),
            name: Some(&name),
        },
    ) {
        return r.into_response();
    }
    match state.pod(&name).filter(|p| p.namespace == ns) {
        Some(p) => {
            let accept = headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if wants_table(accept) {
                let rv = p.resource_version;
                return status::json_response(StatusCode::OK, &pod_table(&[p], rv, "Metadata"));
            }
            status::json_response(StatusCode::OK, &p.to_json())
        }
        None => status::not_found("pods", &name),
    }
}

/// Deletion is immediate (no grace period): the object goes away at once and its host with it,
/// so a test sees "pod gone" without waiting; use the control API's `terminating` state to test
/// a pod that lingers with a deletionTimestamp.
async fn delete_pod(
    AxState(state): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = state.auth.authorize(
        &headers,
        Attributes {
            verb: "delete",
            group: "",
            resource: "pods",
            namespace: Some(&ns),
            name: Some(&name),
        },
    ) {
        return r.into_response();
    }
    if state.pod(&name).filter(|p| p.namespace == ns).is_none() {
        return status::not_found("pods", &name);
    }
    match state.remove_pod(&name).await {
        Ok(mut pod) => {
            pod.deletion = Some(std::time::SystemTime::now());
            let body: Value = pod.to_json();
            status::json_response(StatusCode::OK, &body)
        }
        Err(e) => status::failure(500, "InternalError", &e.to_string(), None),
    }
}
