//! Control endpoints for tests and demos, on the API server itself under `/sandbox/`, admin token
//! only. Same operations as the Rust `Sandbox` methods (both call `State`). JSON in and out:
//!
//! - `GET /sandbox/info`: namespace, cluster, tokens, passwords, pod names
//! - `GET|POST /sandbox/pods`: list internal pod records / add (`AddPod`; empty body = next replica of
//!   shard 0; `{"shard": 1}` = next replica of shard 1)
//! - `GET|DELETE /sandbox/pods/{name}`
//! - `POST /sandbox/pods/{name}/replace`: same name, new uid, empty server
//! - `POST /sandbox/pods/{name}/wipe`: same pod and uid, the server restarted on an empty disk
//! - `POST /sandbox/zookeeper/pause|resume`: freeze ZooKeeper (ON CLUSTER and replication wait), and thaw it
//! - `PUT /sandbox/pods/{name}/state` `{"state": "running|not_ready|pending|terminating|succeeded|failed"}`
//! - `PUT /sandbox/pods/{name}/containers` `[{"name","image","env":[[k,v]]}]`, `PUT .../labels` `{k: v}`
//! - `POST /sandbox/pods/{name}/server/stop|start`
//! - `GET|DELETE /sandbox/exec-log`
//! - `GET|DELETE /sandbox/api-log`: every Kubernetes API request served (`{method, path, query}`)
//! - `GET|POST|DELETE /sandbox/faults`: `{"kind":"drop_exec","pod":?,"argv_contains":?,"count":1,"after":"after_start|after_stdout","delay_ms":0}`,
//!   `{"kind":"stall_exec","pod":?,"argv_contains":?,"count":1,"seconds":3600}` (`argv_contains`:
//!   only execs whose command holds that text),
//!   `{"kind":"list_error","namespace":?,"count":1,"status":500|429,"retry_after_seconds":?}`,
//!   `{"kind":"lease_error","namespace":?,"name":?,"verb":?,"count":1,"status":409|500}` (verb:
//!   `get|list|watch|create|update|patch|delete`; 409 is the stale-resourceVersion Conflict)

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Value, json};

use crate::auth::Denied;
use crate::faults::Fault;
use crate::pods::{Container, Pod};
use crate::state::{AddPod, ControlError, PodState, State};
use crate::status;

type S = AxState<Arc<State>>;

pub(crate) fn routes() -> Router<Arc<State>> {
    Router::new()
        .route("/sandbox/info", get(info))
        .route("/sandbox/pods", get(list).post(add))
        .route("/sandbox/pods/{name}", get(one).delete(remove))
        .route("/sandbox/pods/{name}/replace", post(replace))
        .route("/sandbox/pods/{name}/wipe", post(wipe))
        .route("/sandbox/zookeeper/pause", post(pause_zookeeper))
        .route("/sandbox/zookeeper/resume", post(resume_zookeeper))
        .route("/sandbox/pods/{name}/state", put(set_state))
        .route("/sandbox/pods/{name}/containers", put(set_containers))
        .route("/sandbox/pods/{name}/labels", put(set_labels))
        .route("/sandbox/pods/{name}/server/stop", post(stop_server))
        .route("/sandbox/pods/{name}/server/start", post(start_server))
        .route("/sandbox/exec-log", get(exec_log).delete(clear_exec_log))
        .route(
            "/sandbox/dropped-execs",
            get(dropped_execs).put(set_dropped_execs),
        )
        .route("/sandbox/exec-setup", get(exec_setup).put(set_exec_setup))
        .route("/sandbox/api-log", get(api_log).delete(clear_api_log))
        .route(
            "/sandbox/faults",
            get(faults).post(arm_fault).delete(clear_faults),
        )
}

fn admin(state: &State, headers: &HeaderMap) -> Result<(), Denied> {
    match state.auth.authenticate(headers) {
        None => Err(Denied::Unauthorized),
        Some(u) if u.allows("*", "*", "*") => Ok(()),
        Some(u) => Err(Denied::Forbidden {
            message: format!("User \"{}\" cannot use the sandbox control API", u.name),
            details: json!({}),
        }),
    }
}

fn reply(r: Result<Value, ControlError>) -> Response {
    match r {
        Ok(v) => status::json_response(StatusCode::OK, &v),
        Err(ControlError::NotFound(n)) => status::not_found("pods", &n),
        Err(e @ ControlError::AlreadyExists(_)) => {
            status::failure(409, "AlreadyExists", &e.to_string(), None)
        }
        Err(e @ ControlError::Invalid(_)) => status::bad_request(&e.to_string()),
        Err(e) => status::failure(500, "InternalError", &e.to_string(), None),
    }
}

fn pod(r: Result<Pod, ControlError>) -> Response {
    reply(r.map(|p| json!(p)))
}

macro_rules! guard {
    ($state:expr, $headers:expr) => {
        if let Err(r) = admin(&$state, &$headers) {
            return r.into_response();
        }
    };
}

async fn info(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    reply(Ok(json!({
        "namespace": state.namespace,
        "cluster": state.cluster_name,
        "tokens": state.auth.tokens(),
        "passwords": state.passwords,
        "pods": state.pods().iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
    })))
}

async fn list(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    reply(Ok(json!(state.pods())))
}

async fn one(AxState(state): S, headers: HeaderMap, Path(name): Path<String>) -> Response {
    guard!(state, headers);
    pod(state.pod(&name).ok_or(ControlError::NotFound(name)))
}

async fn add(AxState(state): S, headers: HeaderMap, body: Option<axum::Json<AddPod>>) -> Response {
    guard!(state, headers);
    let req = body.map(|b| b.0).unwrap_or_else(AddPod::clickhouse);
    pod(state.add_pod(req).await)
}

async fn remove(AxState(state): S, headers: HeaderMap, Path(name): Path<String>) -> Response {
    guard!(state, headers);
    pod(state.remove_pod(&name).await)
}

async fn replace(AxState(state): S, headers: HeaderMap, Path(name): Path<String>) -> Response {
    guard!(state, headers);
    pod(state.replace_pod(&name).await)
}

async fn wipe(AxState(state): S, headers: HeaderMap, Path(name): Path<String>) -> Response {
    guard!(state, headers);
    pod(state.wipe_pod(&name).await)
}

async fn pause_zookeeper(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    reply(
        state
            .pause_zookeeper(true)
            .await
            .map(|()| json!({"zookeeper": "paused"})),
    )
}

async fn resume_zookeeper(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    reply(
        state
            .pause_zookeeper(false)
            .await
            .map(|()| json!({"zookeeper": "running"})),
    )
}

#[derive(serde::Deserialize)]
struct StateBody {
    state: PodState,
}

async fn set_state(
    AxState(state): S,
    headers: HeaderMap,
    Path(name): Path<String>,
    axum::Json(b): axum::Json<StateBody>,
) -> Response {
    guard!(state, headers);
    pod(state.set_pod_state(&name, b.state))
}

async fn set_containers(
    AxState(state): S,
    headers: HeaderMap,
    Path(name): Path<String>,
    axum::Json(c): axum::Json<Vec<Container>>,
) -> Response {
    guard!(state, headers);
    pod(state.set_containers(&name, c))
}

async fn set_labels(
    AxState(state): S,
    headers: HeaderMap,
    Path(name): Path<String>,
    axum::Json(l): axum::Json<BTreeMap<String, String>>,
) -> Response {
    guard!(state, headers);
    pod(state.set_labels(&name, l))
}

async fn stop_server(AxState(state): S, headers: HeaderMap, Path(name): Path<String>) -> Response {
    guard!(state, headers);
    pod(state.stop_server(&name).await)
}

async fn start_server(AxState(state): S, headers: HeaderMap, Path(name): Path<String>) -> Response {
    guard!(state, headers);
    pod(state.start_server(&name).await)
}

async fn exec_log(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    reply(Ok(json!(state.exec_log())))
}

async fn clear_exec_log(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    state.clear_exec_log();
    reply(Ok(json!({})))
}

#[derive(serde::Deserialize)]
struct DroppedExecs {
    keep_running: bool,
}

async fn dropped_execs(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    reply(Ok(json!({"keep_running": state.keeps_dropped_execs()})))
}

async fn set_dropped_execs(
    AxState(state): S,
    headers: HeaderMap,
    axum::Json(b): axum::Json<DroppedExecs>,
) -> Response {
    guard!(state, headers);
    state.set_keep_dropped_execs(b.keep_running);
    reply(Ok(json!({"keep_running": state.keeps_dropped_execs()})))
}

/// `PUT /sandbox/exec-setup` `{"ms": N}` delays every pod's execs by N ms before their process
/// starts; `{"ms": N, "pod": "<name>"}` one pod's (it wins over the first).
#[derive(serde::Deserialize)]
struct ExecSetupBody {
    ms: u64,
    #[serde(default)]
    pod: Option<String>,
}

async fn exec_setup(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    reply(Ok(json!(state.exec_setup())))
}

async fn set_exec_setup(
    AxState(state): S,
    headers: HeaderMap,
    axum::Json(b): axum::Json<ExecSetupBody>,
) -> Response {
    guard!(state, headers);
    state.set_exec_setup(b.pod, b.ms);
    reply(Ok(json!(state.exec_setup())))
}

async fn api_log(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    reply(Ok(json!(state.api_log())))
}

async fn clear_api_log(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    state.clear_api_log();
    reply(Ok(json!({})))
}

async fn faults(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    reply(Ok(json!(state.faults().armed())))
}

async fn arm_fault(AxState(state): S, headers: HeaderMap, axum::Json(f): axum::Json<Fault>) -> Response {
    guard!(state, headers);
    state.arm_fault(f);
    reply(Ok(json!(state.faults().armed())))
}

async fn clear_faults(AxState(state): S, headers: HeaderMap) -> Response {
    guard!(state, headers);
    state.clear_faults();
    reply(Ok(json!([])))
}
