//! The `coordination.k8s.io/v1` Lease API. A deploy takes a Lease so that two deploys never run at
//! once, and that guarantee rests on the apiserver's optimistic concurrency: a write carrying a
//! stale `metadata.resourceVersion` is refused with 409 Conflict. So the semantics and the words
//! are kube-apiserver's (the generic registry with the Lease strategy), not an approximation:
//!
//! - create (POST): 201 with the object; an existing name is 409 AlreadyExists, no name 422 Invalid.
//! - update (PUT): the body's resourceVersion must be the stored one (409 Conflict) and must be
//!   there at all (the Lease strategy refuses unconditional updates: 422 Invalid). A PUT of a
//!   missing Lease creates it (the Lease strategy allows create-on-update), whatever its
//!   resourceVersion says.
//! - patch: JSON merge patch, and strategic merge patch applied as one (a Lease has no list to merge
//!   by key), on the stored object; a resourceVersion in the patch is a precondition.
//! - delete: 200 with a Success Status; DeleteOptions `preconditions` (uid, resourceVersion).
//! - a write that changes nothing writes nothing: the resourceVersion stays (etcd skips identical
//!   data), so a no-op replace answers the stored object.
//! - unknown fields are dropped with a `Warning` header, or refused under `fieldValidation=Strict`
//!   (what kubectl create/apply/replace send).
//!
//! Not modelled: dryRun (refused with a 400 rather than written for real), managedFields,
//! finalizers holding a deletion, `resourceVersion`/`limit` on lists, and JSON patch or server-side
//! apply (415).

pub(crate) mod store;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::api::request::{param, query_pairs, wants_table, watch_events};
use crate::auth::{Attributes, COORDINATION};
use crate::pods::age;
use crate::selector::{FieldSelector, LabelSelector, METADATA_FIELDS};
use crate::state::State;
use crate::status;

use store::{
    API_VERSION, FieldValidation, OPTIMISTIC_LOCK, RESOURCE, Refusal, Written, decode, meta_str,
    unknown_fields,
};

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

type S = AxState<Arc<State>>;

pub(crate) fn routes() -> Router<Arc<State>> {
    Router::new()
        .route("/apis/coordination.k8s.io/v1/leases", get(list_all))
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            get(list_namespace).post(create),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
            get(get_one).put(replace).patch(patch).delete(delete),
        )
}

/// The group's entry in `/apis` (an `APIGroup`), v1 being its only and preferred version.
pub(crate) fn api_group() -> Value {
    let v1 = json!({"groupVersion": API_VERSION, "version": "v1"});
    json!({"name": COORDINATION, "versions": [v1], "preferredVersion": v1})
}

/// `/apis/coordination.k8s.io/v1`: what kubectl's discovery learns `leases` from.
pub(crate) fn api_resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [
            {"name": RESOURCE, "singularName": "lease", "namespaced": true, "kind": "Lease",
             "verbs": VERBS},
        ],
    })
}

impl FieldValidation {
    fn from_query(pairs: &[(String, String)]) -> Result<Self, Refusal> {
        match param(pairs, "fieldValidation").unwrap_or("") {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(Refusal::BadRequest(format!(
                "fieldValidation parameter unsupported: \"{other}\""
            ))),
        }
    }
}

fn lease_list(items: Vec<Value>, resource_version: u64) -> Value {
    json!({
        "kind": "LeaseList",
        "apiVersion": API_VERSION,
        "metadata": {"resourceVersion": resource_version.to_string()},
        "items": items,
    })
}

/// Server-side printing as kubectl shows leases: NAME, HOLDER, AGE.
fn lease_table(items: &[Value], resource_version: u64, include_object: &str) -> Value {
    use crate::table::{AGE, Column, NAME, render, row};
    let rows: Vec<Value> = items
        .iter()
        .map(|l| {
            let created = humantime::parse_rfc3339_weak(meta_str(l, "creationTimestamp"))
                .unwrap_or_else(|_| SystemTime::now());
            let cells = json!([
                meta_str(l, "name"),
                l["spec"]["holderIdentity"].as_str().unwrap_or(""),
                age(created)
            ]);
            row(cells, l, include_object)
        })
        .collect();
    let holder = Column {
        name: "Holder",
        format: "",
        description: "holderIdentity contains the identity of the holder of a current lease.",
    };
    render(&[NAME, holder, AGE], rows, resource_version)
}

/// Authorization, for every lease route.
fn authorize(
    state: &State,
    headers: &HeaderMap,
    verb: &str,
    ns: Option<&str>,
    name: Option<&str>,
) -> Result<(), Response> {
    state
        .auth
        .authorize(
            headers,
            Attributes {
                verb,
                group: COORDINATION,
                resource: RESOURCE,
                namespace: ns,
                name,
            },
        )
        .map(|_| ())
        .map_err(IntoResponse::into_response)
}

/// An armed `LeaseError` fault answers instead of the request: 409 as a lost race, else an
/// InternalError with its code.
fn injected(state: &State, ns: Option<&str>, name: Option<&str>, verb: &str) -> Result<(), Response> {
    match state.faults().take_lease(ns.unwrap_or(""), name, verb) {
        None => Ok(()),
        Some(409) => Err(Refusal::Conflict {
            name: name.unwrap_or("").to_string(),
            why: OPTIMISTIC_LOCK.to_string(),
        }
        .into_response()),
        Some(code) => Err(status::failure(
            code,
            "InternalError",
            "Internal error occurred: injected by the sandbox",
            Some(json!({"causes": [{"message": "injected by the sandbox"}]})),
        )),
    }
}

fn accept(headers: &HeaderMap) -> &str {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The object with the given status, and one `Warning` header per dropped unknown field.
fn answer(code: StatusCode, body: &Value, warnings: &[String]) -> Response {
    let mut r = status::json_response(code, body);
    for w in warnings {
        let value = format!("299 - \"{}\"", w.replace('"', "\\\""));
        if let Ok(v) = HeaderValue::from_str(&value) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

/// A dry run (query, or a DeleteOptions body) is refused: done as a real write it would mislead.
fn no_dry_run(pairs: &[(String, String)], options: Option<&Value>) -> Result<(), Refusal> {
    let in_body = options.is_some_and(|o| !o["dryRun"].is_null());
    if param(pairs, "dryRun").is_some() || in_body {
        return Err(Refusal::BadRequest(
            "dryRun is not supported by the sandbox's lease API".into(),
        ));
    }
    Ok(())
}

/// A request body as JSON; what is not JSON is the decoder's 400.
fn parse_body(body: &[u8]) -> Result<Value, Refusal> {
    serde_json::from_slice(body)
        .map_err(|e| Refusal::BadRequest(format!("couldn't get version/kind; json parse error: {e}")))
}

macro_rules! attempt {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(r) => return r.into_response(),
        }
    };
}

async fn list_all(state: S, headers: HeaderMap, q: RawQuery) -> Response {
    list(state, headers, q, None).await
}

async fn list_namespace(state: S, Path(ns): Path<String>, headers: HeaderMap, q: RawQuery) -> Response {
    list(state, headers, q, Some(ns)).await
}

async fn list(AxState(state): S, headers: HeaderMap, RawQuery(q): RawQuery, ns: Option<String>) -> Response {
    let pairs = query_pairs(&q);
    let watch = param(&pairs, "watch").is_some_and(|w| w == "true" || w == "1");
    let verb = if watch { "watch" } else { "list" };
    attempt!(authorize(&state, &headers, verb, ns.as_deref(), None));
    attempt!(injected(&state, ns.as_deref(), None, verb));
    let labels = match LabelSelector::parse(param(&pairs, "labelSelector").unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return status::bad_request(&format!("unable to parse requirement: {e}")),
    };
    let fields = match FieldSelector::parse_for(param(&pairs, "fieldSelector").unwrap_or(""), METADATA_FIELDS)
    {
        Ok(s) => s,
        Err(e) => return status::bad_request(&e.0),
    };
    let items: Vec<Value> = state
        .leases
        .list(ns.as_deref())
        .into_iter()
        .filter(|l| {
            let labels_of: BTreeMap<String, String> =
                serde_json::from_value(l["metadata"]["labels"].clone()).unwrap_or_default();
            labels.matches(&labels_of) && fields.matches(|f| meta_str(l, &f["metadata.".len()..]).to_string())
        })
        .collect();
    // Read after the items, so the list's resourceVersion is never older than one of them.
    let rv = state.store().resource_version;
    if watch {
        return watch_events(items);
    }
    if wants_table(accept(&headers)) {
        let include = param(&pairs, "includeObject").unwrap_or("Metadata");
        return status::json_response(StatusCode::OK, &lease_table(&items, rv, include));
    }
    status::json_response(StatusCode::OK, &lease_list(items, rv))
}

async fn get_one(
    AxState(state): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    attempt!(authorize(&state, &headers, "get", Some(&ns), Some(&name)));
    attempt!(injected(&state, Some(&ns), Some(&name), "get"));
    let lease = attempt!(
        state
            .leases
            .get(&ns, &name)
            .ok_or(Refusal::NotFound(name.clone()))
    );
    if wants_table(accept(&headers)) {
        let rv = meta_str(&lease, "resourceVersion").parse().unwrap_or(0);
        return status::json_response(StatusCode::OK, &lease_table(&[lease], rv, "Metadata"));
    }
    status::json_response(StatusCode::OK, &lease)
}

async fn create(
    AxState(state): S,
    Path(ns): Path<String>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    attempt!(authorize(&state, &headers, "create", Some(&ns), None));
    let pairs = query_pairs(&q);
    attempt!(no_dry_run(&pairs, None));
    let mode = attempt!(FieldValidation::from_query(&pairs));
    let body = attempt!(parse_body(&body));
    let named = body["metadata"]["name"].as_str().filter(|n| !n.is_empty());
    attempt!(injected(&state, Some(&ns), named, "create"));
    let (decoded, unknown) = attempt!(decode(&body));
    let warnings = attempt!(unknown_fields(unknown, mode));
    let obj = attempt!(state.leases.create(&ns, decoded, || state.store().bump()));
    answer(StatusCode::CREATED, &obj, &warnings)
}

async fn replace(
    AxState(state): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    attempt!(authorize(&state, &headers, "update", Some(&ns), Some(&name)));
    attempt!(injected(&state, Some(&ns), Some(&name), "update"));
    let pairs = query_pairs(&q);
    attempt!(no_dry_run(&pairs, None));
    let mode = attempt!(FieldValidation::from_query(&pairs));
    let (decoded, unknown) = attempt!(parse_body(&body).and_then(|b| decode(&b)));
    let warnings = attempt!(unknown_fields(unknown, mode));
    let (obj, written) = attempt!(state.leases.update(&ns, &name, decoded, || state.store().bump()));
    let code = match written {
        Written::Created => StatusCode::CREATED,
        Written::Updated => StatusCode::OK,
    };
    answer(code, &obj, &warnings)
}

async fn patch(
    AxState(state): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    attempt!(authorize(&state, &headers, "patch", Some(&ns), Some(&name)));
    attempt!(injected(&state, Some(&ns), Some(&name), "patch"));
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let strategic = match content_type.split(';').next().unwrap_or("").trim() {
        "application/merge-patch+json" => false,
        "application/strategic-merge-patch+json" => true,
        // The apiserver also takes JSON patch and server-side apply; the sandbox lists only what
        // it really applies, so a client relying on the others fails here and not later.
        _ => {
            return Refusal::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json".into(),
            )
            .into_response();
        }
    };
    let pairs = query_pairs(&q);
    attempt!(no_dry_run(&pairs, None));
    let mode = attempt!(FieldValidation::from_query(&pairs));
    let patch: Value =
        attempt!(serde_json::from_slice(&body).map_err(|e| Refusal::BadRequest(e.to_string())));
    let (obj, warnings) = attempt!(
        state
            .leases
            .patch(&ns, &name, &patch, strategic, mode, || { state.store().bump() })
    );
    answer(StatusCode::OK, &obj, &warnings)
}

async fn delete(
    AxState(state): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    attempt!(authorize(&state, &headers, "delete", Some(&ns), Some(&name)));
    attempt!(injected(&state, Some(&ns), Some(&name), "delete"));
    // DeleteOptions; kubectl sends `{"propagationPolicy":"Background"}`, kube-rs `{}` or more.
    let options: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        attempt!(parse_body(&body))
    };
    attempt!(no_dry_run(&query_pairs(&q), Some(&options)));
    let pre = &options["preconditions"];
    let success = attempt!(state.leases.delete(
        &ns,
        &name,
        pre["uid"].as_str(),
        pre["resourceVersion"].as_str(),
        || state.store().bump(),
    ));
    status::json_response(StatusCode::OK, &success)
}
