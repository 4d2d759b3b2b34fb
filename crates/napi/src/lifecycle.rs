//! The lifecycle exports for JavaScript (`apply`, `plan`, `verify`, `status`,
//! `adopt`, `destroy`): picks the transport (kube-rs, or under
//! WASM the package's JavaScript Kubernetes transport, or an injected
//! executor), runs the core lifecycle on napi's tokio runtime, and maps the
//! outcome. Every decision is the core's.

use clickhouse_schema_core::ClickHouseSchemaError;
use clickhouse_schema_core::config::ResolvedConfig;
use clickhouse_schema_core::config::validate::validate;
use clickhouse_schema_core::coordination::ownership;
use clickhouse_schema_core::kubernetes::cluster_id;
use clickhouse_schema_core::kubernetes::connection::{self, ClusterSource};
use clickhouse_schema_core::lifecycle::{self, ApplyOutcome};
use clickhouse_schema_core::state::SchemaState;
use clickhouse_schema_core::transport::Cluster;
use clickhouse_schema_core::transport::{
    Executor, LeaseApi, LeaseRecord, LeaseSpec, PodLister, TransportError,
};
#[cfg(not(target_family = "wasm"))]
use clickhouse_schema_kube::{KubeTransport, connect, connect_resolved, kubeconfig::resolve_endpoint};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::clock::SystemClock;
use crate::js_connection;
use crate::js_error::throw;
use crate::js_executor::ClickHouseExecutor;
#[cfg(target_family = "wasm")]
use crate::js_kubernetes::KubernetesApi;
use crate::js_options::{self, JsEvents, Options, SignalCancel};
use crate::timers::Timers;
use crate::{props_json, state_json};

/// The result of an apply: the state to record, and what happened.
#[napi(object)]
pub(crate) struct ApplyResult {
    /// The resource's outputs. Equal to the previous state when nothing ran.
    #[napi(ts_type = "SchemaState")]
    pub state: serde_json::Value,
    /// False when the apply was a no-op and `state` is the previous state.
    pub changed: bool,
    /// Pods the statements ran on in this apply, sorted by name.
    pub applied_to: Vec<String>,
}

/// Brings the cluster to `props` for resource `id` and resolves to the state
/// to record. `previousState` is the last recorded state (omit on create);
/// `options` may inject an executor and carry an `AbortSignal`. Rejects with
/// a `ClickHouseSchemaError`; nothing is to be recorded then.
#[napi(
    ts_args_type = "id: string, props: unknown, previousState?: SchemaState | null, options?: LifecycleOptions | null",
    ts_return_type = "Promise<ApplyResult>"
)]
pub(crate) fn apply<'env>(
    env: &'env Env,
    id: String,
    props: Unknown<'env>,
    previous_state: Unknown<'env>,
    options: Option<Object<'env>>,
) -> Result<PromiseRaw<'env, ApplyResult>> {
    let options = js_options::read(env, &id, options)?;
    let inputs = inputs(&id, props, previous_state, "previousState");
    let work = async move {
        let options = options?;
        let (config, previous) = inputs?;
        let session = Session::open(&id, &config, options).await?;
        lifecycle::apply(&id, &config, previous.as_ref(), &session.cluster()).await
    };
    settle(env, work, |(state, outcome)| {
        let state = serde_json::to_value(&state).map_err(|e| Error::from_reason(format!("internal: {e}")))?;
        Ok(match outcome {
            ApplyOutcome::Unchanged => ApplyResult {
                state,
                changed: false,
                applied_to: Vec::new(),
            },
            ApplyOutcome::Applied { pods } => ApplyResult {
                state,
                changed: true,
                applied_to: pods,
            },
        })
    })
}

/// Would `apply` with these arguments run anything, where, and why? Resolves
/// to `{ changed, reason?, why?, everyPod, pods, statements }`: every
/// statement with what it declares, and either every selected pod or the
/// pods that are new or replaced. Makes exactly the calls apply's no-op check
/// makes (one pod list under fanout with an unchanged fingerprint, none
/// otherwise) and never runs a statement. For plans and Alchemy's `diff`.
#[napi(
    ts_args_type = "id: string, props: unknown, previousState?: SchemaState | null, options?: LifecycleOptions | null",
    ts_return_type = "Promise<PlanResult>"
)]
pub(crate) fn plan<'env>(
    env: &'env Env,
    id: String,
    props: Unknown<'env>,
    previous_state: Unknown<'env>,
    options: Option<Object<'env>>,
) -> Result<PromiseRaw<'env, serde_json::Value>> {
    let options = js_options::read(env, &id, options)?;
    let inputs = inputs(&id, props, previous_state, "previousState");
    let work = async move {
        let options = options?;
        let (config, previous) = inputs?;
        let session = Session::open(&id, &config, options).await?;
        lifecycle::plan(&id, &config, previous.as_ref(), &session.cluster()).await
    };
    settle(env, work, |outcome| {
        serde_json::to_value(&outcome).map_err(|e| Error::from_reason(format!("internal: {e}")))
    })
}

/// Looks up the objects the statements declare on every pod where `state` says they were
/// applied (and that is still there), one exec per pod, and compares each with its declaration
/// as the server prints both; runs no statement. Resolves to `{ drifted, pods }`; see
/// `VerifyResult`. Rejects with `E_NOTHING_APPLIED` without a state, `E_CLUSTER_MISMATCH` when
/// the kubeconfig points at another cluster, and `E_VERIFICATION_FAILED` when the check cannot
/// run on a pod.
#[napi(
    ts_args_type = "id: string, props: unknown, state?: SchemaState | null, options?: LifecycleOptions | null",
    ts_return_type = "Promise<VerifyResult>"
)]
pub(crate) fn verify<'env>(
    env: &'env Env,
    id: String,
    props: Unknown<'env>,
    state: Unknown<'env>,
    options: Option<Object<'env>>,
) -> Result<PromiseRaw<'env, serde_json::Value>> {
    let options = js_options::read(env, &id, options)?;
    let inputs = inputs(&id, props, state, "state");
    let work = async move {
        let options = options?;
        let (config, state) = inputs?;
        let session = Session::open(&id, &config, options).await?;
        lifecycle::verify(&id, &config, state.as_ref(), &session.cluster()).await
    };
    settle(env, work, |outcome| {
        serde_json::to_value(&outcome).map_err(|e| Error::from_reason(format!("internal: {e}")))
    })
}

/// Each matching pod's ledger entry for resource `id`: the fingerprint its
/// newest row holds, when, and whether that is the props' current one, so an
/// operator sees which pods are behind. One pod list and one exec per Ready
/// pod; runs no statement. Rejects with `E_INVALID_CONFIG` without the
/// `ledger` prop, `E_LEDGER_FAILED` when a pod's ledger cannot be read.
#[napi(
    ts_args_type = "id: string, props: unknown, options?: LifecycleOptions | null",
    ts_return_type = "Promise<StatusResult>"
)]
pub(crate) fn status<'env>(
    env: &'env Env,
    id: String,
    props: Unknown<'env>,
    options: Option<Object<'env>>,
) -> Result<PromiseRaw<'env, serde_json::Value>> {
    let options = js_options::read(env, &id, options)?;
    let config = props_json(&id, props).and_then(|props| validate(&id, &props));
    let work = async move {
        let options = options?;
        let config = config?;
        let session = Session::open(&id, &config, options).await?;
        ownership::status(&id, &config, &session.cluster()).await
    };
    settle(env, work, |outcome| {
        serde_json::to_value(&outcome).map_err(|e| Error::from_reason(format!("internal: {e}")))
    })
}

/// What `adopt` found for a resource without a recorded state.
#[allow(dead_code)]
#[napi(object, object_to_js = false, object_from_js = false)]
pub(crate) struct AdoptResult {
    /// `owned`: this resource applied the current fingerprint (adopt silently);
    /// `unowned`: another resource id did, or the objects exist with no ledger
    /// entry (adopt only when asked); `absent`: nothing to adopt.
    #[napi(ts_type = "'owned' | 'unowned' | 'absent'")]
    pub ownership: String,
    /// The state to adopt (owned or unowned).
    #[napi(ts_type = "SchemaState")]
    pub state: Option<serde_json::Value>,
    /// Why, in one sentence.
    pub reason: String,
}

/// Alchemy's adoption contract for resource `id` with no recorded state: reads
/// the ledger of the Ready matching pods (and, when no ledger mentions the
/// schema, looks the declared objects up). Without the `ledger` prop resolves
/// `absent` without any call. Runs no statement.
#[napi(
    ts_args_type = "id: string, props: unknown, options?: LifecycleOptions | null",
    ts_return_type = "Promise<AdoptResult>"
)]
pub(crate) fn adopt<'env>(
    env: &'env Env,
    id: String,
    props: Unknown<'env>,
    options: Option<Object<'env>>,
) -> Result<PromiseRaw<'env, serde_json::Value>> {
    let options = js_options::read(env, &id, options)?;
    let config = props_json(&id, props).and_then(|props| validate(&id, &props));
    let work = async move {
        let options = options?;
        let config = config?;
        // No session (and no token minted) when the answer needs no cluster.
        if let Some(outcome) = ownership::adopt_without_cluster(&config) {
            return Ok(outcome);
        }
        let session = Session::open(&id, &config, options).await?;
        ownership::adopt(&id, &config, &session.cluster()).await
    };
    settle(env, work, |outcome| {
        serde_json::to_value(&outcome).map_err(|e| Error::from_reason(format!("internal: {e}")))
    })
}

/// Deletes resource `id` per its `onDelete`: `retain` resolves without
/// reaching the cluster; `run` executes `deleteStatements` where `state` says
/// the schema landed, refusing when that is another cluster or `state` is absent.
#[napi(
    ts_args_type = "id: string, props: unknown, state?: SchemaState | null, options?: LifecycleOptions | null",
    ts_return_type = "Promise<void>"
)]
pub(crate) fn destroy<'env>(
    env: &'env Env,
    id: String,
    props: Unknown<'env>,
    state: Unknown<'env>,
    options: Option<Object<'env>>,
) -> Result<PromiseRaw<'env, ()>> {
    let options = js_options::read(env, &id, options)?;
    let inputs = inputs(&id, props, state, "state");
    let work = async move {
        let options = options?;
        let (config, state) = inputs?;
        if !lifecycle::destroy_reaches_cluster(&config) {
            return Ok(());
        }
        let session = Session::open(&id, &config, options).await?;
        lifecycle::destroy(&id, &config, state.as_ref(), &session.cluster()).await
    };
    settle(env, work, Ok)
}

/// The validated config and the parsed recorded state (`what` names the
/// argument in errors): what every lifecycle export starts from. Read on the
/// JS thread, before any work is spawned; a failure rejects the promise.
fn inputs(
    id: &str,
    props: Unknown<'_>,
    state: Unknown<'_>,
    what: &str,
) -> std::result::Result<(ResolvedConfig, Option<SchemaState>), ClickHouseSchemaError> {
    let config = validate(id, &props_json(id, props)?)?;
    let state = state_json(id, what, state)?
        .map(|v| parse_state(id, what, v))
        .transpose()?;
    Ok((config, state))
}

/// Runs `work` on napi's tokio runtime and settles the returned promise:
/// resolved with `map` of the value, or rejected with the one JS mapping of a
/// `ClickHouseSchemaError` (built on the JS thread, where it must be).
fn settle<'env, T, V, W, M>(env: &'env Env, work: W, map: M) -> Result<PromiseRaw<'env, V>>
where
    T: Send + 'static,
    V: ToNapiValue,
    W: Future<Output = std::result::Result<T, ClickHouseSchemaError>> + Send + 'static,
    M: FnOnce(T) -> Result<V> + 'static,
{
    env.spawn_future_with_callback(async move { Ok(work.await) }, move |env, result| match result {
        Ok(value) => map(value),
        Err(err) => Err(throw(env, &err)),
    })
}

/// What a lifecycle call runs against: the transport, the clock and the
/// identity of the cluster the transport reaches.
struct Session {
    transport: Transport,
    clock: SystemClock,
    cluster_id: Option<String>,
    cancel: SignalCancel,
    events: JsEvents,
}

impl Session {
    /// The injected executor, or the Kubernetes API configured by the
    /// `kubeConfig` prop (else the ambient kubeconfig, else in-cluster config):
    /// kube-rs natively, the package's JavaScript transport under WASM.
    async fn open(
        id: &str,
        config: &ResolvedConfig,
        options: Options,
    ) -> std::result::Result<Self, ClickHouseSchemaError> {
        let source = connection::source(config, id, options.connection.is_some())?;
        let resolved = match (source, &options.connection) {
            (ClusterSource::Resolved, Some(connect)) => Some(js_connection::resolve(connect).await?),
            _ => None,
        };
        let kube_config = match source {
            ClusterSource::KubeConfig(options) => options,
            ClusterSource::Resolved => None,
        };
        let timers = Timers::new(options.timers).ok_or_else(|| wasm_host_missing("options.timers"))?;
        let (transport, cluster_id) = match options.executor {
            Some(js) => {
                let id = match &resolved {
                    Some(resolved) => Some(cluster_id::cluster_id(&resolved.cluster_endpoint())),
                    None => executor_cluster_id(kube_config, options.kubernetes.as_ref()).await?,
                };
                (Transport::Js(js, timers.clone()), id)
            }
            #[cfg(not(target_family = "wasm"))]
            None => {
                let connection = match &resolved {
                    Some(resolved) => connect_resolved(resolved).await?,
                    None => connect(kube_config).await?,
                };
                let id = connection.cluster_id();
                (Transport::Kube(KubeTransport::from(&connection)), id)
            }
            #[cfg(target_family = "wasm")]
            None => {
                let api = wasm_kubernetes(options.kubernetes)?;
                // Whatever the JavaScript side says is scrubbed of the connection's secrets too.
                let scrub = |message: String| match &resolved {
                    Some(resolved) => resolved.scrub(&message),
                    None => message,
                };
                let resolution = match &resolved {
                    Some(resolved) => api.resolve_connection(resolved).await,
                    None => api.resolve(kube_config).await,
                }
                .map_err(|m| kubernetes_error(scrub(m)))?;
                let endpoint = match &resolved {
                    Some(resolved) => resolved.cluster_endpoint(),
                    None => match resolution.endpoint {
                        Some(endpoint) => endpoint.into(),
                        None => return Err(kubernetes_error(cluster_id::no_context(&resolution.origin))),
                    },
                };
                let credentials: Vec<&str> = resolution.credentials.iter().map(String::as_str).collect();
                if let Some(refusal) = clickhouse_schema_core::transport::credentials_over_plain_http(
                    &endpoint.server,
                    &resolution.server_source,
                    &credentials,
                ) {
                    return Err(kubernetes_error(refusal));
                }
                let proxy = clickhouse_schema_core::kubernetes::proxy::select_for_server(
                    &endpoint.server,
                    resolution.proxy_url.as_deref(),
                    |name| resolution.proxy_environment.get(name).cloned(),
                )
                .map_err(kubernetes_error)?;
                api.connect(proxy).await.map_err(|m| kubernetes_error(scrub(m)))?;
                let id = cluster_id::cluster_id(&endpoint);
                (Transport::Kubernetes(api, timers.clone()), Some(id))
            }
        };
        Ok(Self {
            transport,
            clock: SystemClock::new(timers),
            cluster_id,
            cancel: options.cancel,
            events: options.events,
        })
    }

    fn cluster(&self) -> Cluster<'_, Transport, SystemClock> {
        Cluster {
            transport: &self.transport,
            clock: &self.clock,
            cluster_id: self.cluster_id.clone(),
            cancel: &self.cancel,
            events: &self.events,
        }
    }
}

/// The identity recorded for an injected executor: what the `kubeConfig`
/// options name (resolved by kube-rs natively, by the JavaScript transport
/// under WASM), none without them.
#[cfg_attr(not(target_family = "wasm"), allow(unused_variables))]
async fn executor_cluster_id(
    kube_config: Option<&clickhouse_schema_core::config::KubeConfigOptions>,
    kubernetes: Option<&crate::js_kubernetes::KubernetesApi>,
) -> std::result::Result<Option<String>, ClickHouseSchemaError> {
    #[cfg(not(target_family = "wasm"))]
    return cluster_id::of_injected_executor(kube_config, |options| {
        std::future::ready(resolve_endpoint(Some(options)).map_err(ClickHouseSchemaError::from))
    })
    .await;
    #[cfg(target_family = "wasm")]
    return cluster_id::of_injected_executor(kube_config, |prop| async move {
        let api = wasm_kubernetes(kubernetes)?;
        let resolution = api.resolve(Some(prop)).await.map_err(kubernetes_error)?;
        Ok::<_, ClickHouseSchemaError>(resolution.endpoint.map(Into::into))
    })
    .await;
}

/// A Kubernetes configuration problem found by the JavaScript transport
/// (already redacted): the error the native transport gives for the same.
#[cfg(target_family = "wasm")]
fn kubernetes_error(message: String) -> ClickHouseSchemaError {
    ClickHouseSchemaError::new(clickhouse_schema_core::ErrorKind::KubernetesApi, message)
}

/// The JavaScript Kubernetes transport, which the WASM build cannot do without.
#[cfg(target_family = "wasm")]
fn wasm_kubernetes<T>(api: Option<T>) -> std::result::Result<T, ClickHouseSchemaError> {
    api.ok_or_else(|| wasm_host_missing("options.kubernetes"))
}

/// The WASM build called without what the package's entry point supplies.
#[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
fn wasm_host_missing(what: &str) -> ClickHouseSchemaError {
    ClickHouseSchemaError::new(
        clickhouse_schema_core::ErrorKind::Internal,
        format!(
            "this is the WebAssembly build, which reaches Kubernetes and its timers through JavaScript: call it \
             through the package's entry point, which supplies {what}"
        ),
    )
}

/// Every transport, so the lifecycle is instantiated once.
pub(crate) enum Transport {
    #[cfg(not(target_family = "wasm"))]
    Kube(KubeTransport),
    #[cfg(target_family = "wasm")]
    Kubernetes(KubernetesApi, Timers),
    Js(ClickHouseExecutor, Timers),
}

impl PodLister for Transport {
    async fn list_pods(
        &self,
        namespace: &str,
        selector: &std::collections::BTreeMap<String, String>,
    ) -> std::result::Result<
        Vec<clickhouse_schema_core::transport::PodInfo>,
        clickhouse_schema_core::transport::TransportError,
    > {
        match self {
            #[cfg(not(target_family = "wasm"))]
            Transport::Kube(t) => t.list_pods(namespace, selector).await,
            #[cfg(target_family = "wasm")]
            Transport::Kubernetes(t, timers) => t.list_pods_within(timers, namespace, selector).await,
            Transport::Js(t, _) => t.list_pods(namespace, selector).await,
        }
    }
}

impl Executor for Transport {
    async fn exec(
        &self,
        request: clickhouse_schema_core::transport::ExecRequest,
    ) -> std::result::Result<
        clickhouse_schema_core::transport::ExecOutput,
        clickhouse_schema_core::transport::TransportError,
    > {
        match self {
            #[cfg(not(target_family = "wasm"))]
            Transport::Kube(t) => t.exec(request).await,
            #[cfg(target_family = "wasm")]
            Transport::Kubernetes(t, timers) => t.exec_within(timers, request).await,
            Transport::Js(t, timers) => t.exec_within(timers, request).await,
        }
    }

    async fn exec_seeing(
        &self,
        request: clickhouse_schema_core::transport::ExecRequest,
        seen: &(dyn Fn(&[u8]) + Send + Sync),
    ) -> std::result::Result<
        clickhouse_schema_core::transport::ExecOutput,
        clickhouse_schema_core::transport::TransportError,
    > {
        // Only kube-rs's exec streams; the others hand the whole stdout over at the end.
        #[cfg(not(target_family = "wasm"))]
        if let Transport::Kube(t) = self {
            return t.exec_seeing(request, seen).await;
        }
        let output = self.exec(request).await;
        if let Ok(output) = &output {
            seen(output.stdout.as_bytes());
        }
        output
    }
}

impl LeaseApi for Transport {
    fn process_identity(&self) -> String {
        match self {
            #[cfg(not(target_family = "wasm"))]
            Transport::Kube(t) => t.process_identity(),
            #[cfg(target_family = "wasm")]
            Transport::Kubernetes(t, _) => t.identity.clone(),
            Transport::Js(..) => "unknown-host".to_owned(),
        }
    }

    async fn get_lease(
        &self,
        namespace: &str,
        name: &str,
    ) -> std::result::Result<Option<LeaseRecord>, TransportError> {
        match self {
            #[cfg(not(target_family = "wasm"))]
            Transport::Kube(t) => t.get_lease(namespace, name).await,
            #[cfg(target_family = "wasm")]
            Transport::Kubernetes(t, timers) => {
                t.lease_within(timers, "get", namespace, name, None, None).await
            }
            Transport::Js(t, _) => t.get_lease(namespace, name).await,
        }
    }

    async fn create_lease(
        &self,
        namespace: &str,
        name: &str,
        spec: &LeaseSpec,
    ) -> std::result::Result<LeaseRecord, TransportError> {
        match self {
            #[cfg(not(target_family = "wasm"))]
            Transport::Kube(t) => t.create_lease(namespace, name, spec).await,
            #[cfg(target_family = "wasm")]
            Transport::Kubernetes(t, timers) => written(
                t.lease_within(timers, "create", namespace, name, None, Some(spec))
                    .await?,
            ),
            Transport::Js(t, _) => t.create_lease(namespace, name, spec).await,
        }
    }

    async fn replace_lease(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
        spec: &LeaseSpec,
    ) -> std::result::Result<LeaseRecord, TransportError> {
        match self {
            #[cfg(not(target_family = "wasm"))]
            Transport::Kube(t) => t.replace_lease(namespace, name, resource_version, spec).await,
            #[cfg(target_family = "wasm")]
            Transport::Kubernetes(t, timers) => written(
                t.lease_within(
                    timers,
                    "replace",
                    namespace,
                    name,
                    Some(resource_version),
                    Some(spec),
                )
                .await?,
            ),
            Transport::Js(t, _) => t.replace_lease(namespace, name, resource_version, spec).await,
        }
    }
}

/// The lease a write answered with; a transport that answered none broke the protocol.
#[cfg(target_family = "wasm")]
fn written(lease: Option<LeaseRecord>) -> std::result::Result<LeaseRecord, TransportError> {
    lease.ok_or_else(|| {
        TransportError::new(
            clickhouse_schema_core::transport::TransportErrorKind::InvalidResponse,
            "the Kubernetes transport answered a lease write with no lease",
        )
    })
}

fn parse_state(
    id: &str,
    what: &str,
    value: serde_json::Value,
) -> std::result::Result<SchemaState, ClickHouseSchemaError> {
    SchemaState::from_json(value).map_err(|reason| {
        ClickHouseSchemaError::invalid_state(
            id,
            vec![clickhouse_schema_core::ConfigIssue {
                path: what.to_owned(),
                reason,
            }],
        )
    })
}
