//! The Kubernetes API reached through JavaScript, for the WASM build.
//!
//! kube-rs does not build for WebAssembly, so the WASM build cannot open
//! sockets itself. The package's entry point hands it a `KubernetesApi` (the
//! TypeScript transport over `@kubernetes/client-node`) that does the I/O and
//! reports raw facts: the kubeconfig's endpoint fields, pods, the exec's output
//! and its status frame, HTTP statuses. Every decision stays the core's, the
//! same functions the kube-rs transport uses: the label selector, the exit
//! code read from the status frame, which failures are retried, the list and
//! output bounds, refusing credentials over plain HTTP, the cluster identity,
//! and the redaction of every Kubernetes-side message.
//!
//! The natively built addon declares these types too (they are generated into
//! `index.d.ts` from the native build) but never calls them: it has kube-rs.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use clickhouse_schema_core::kubernetes::cluster_id::ClusterEndpoint;
use clickhouse_schema_core::kubernetes::redact::redact;
use clickhouse_schema_core::transport::{
    ExecOutput, ExecRequest, ExecStatus, LIST_TIMEOUT, LeaseRecord, LeaseSpec, OUTPUT_CAP, PodInfo,
    TransportError, TransportErrorKind, exec_without_status, label_selector,
};
use napi::Status;
use napi::bindgen_prelude::{Error, FnArgs, Promise};
use napi::threadsafe_function::ThreadsafeFunction;
use napi_derive::napi;

use crate::js_executor::JsPod;
use crate::timers::Timers;

/// The endpoint fields of the selected cluster, as the kubeconfig writes them
/// (after the `kubeConfig` overrides): what the cluster identity is computed
/// from, never a credential.
#[napi(object, js_name = "KubernetesEndpoint")]
pub(crate) struct JsEndpoint {
    /// Name of the selected cluster entry (`inCluster` in a pod).
    pub cluster_name: String,
    /// API server URL.
    pub server: String,
    /// `certificate-authority-data` exactly as written (base64).
    pub ca_data: Option<String>,
    /// `certificate-authority`, made absolute against the kubeconfig's directory.
    pub ca_file: Option<String>,
    /// `insecure-skip-tls-verify`.
    pub skip_tls_verify: bool,
}

/// What `KubernetesApi.resolve` found for a `kubeConfig` prop.
#[napi(object, js_name = "KubernetesResolution")]
pub(crate) struct JsResolution {
    /// `null` when nothing names a context (a kubeconfig without
    /// current-context and no `kubeConfig.context`).
    pub endpoint: Option<JsEndpoint>,
    /// Where the configuration came from, for messages (`kubeconfig /path`,
    /// `KUBECONFIG (...)`, `in-cluster`, ...).
    pub origin: String,
    /// What set the server URL, for messages (`kubeConfig.server`, or the cluster it came from).
    pub server_source: String,
    /// The kinds of credential the selected user has, in words ("a bearer
    /// token", "an exec credential plugin", ...); never their values.
    pub credentials: Vec<String>,
    /// The selected cluster's `proxy-url`.
    pub proxy_url: Option<String>,
    /// `HTTPS_PROXY`, `https_proxy`, `HTTP_PROXY`, `http_proxy`, `NO_PROXY` and
    /// `no_proxy`, those that are set: the addon chooses the proxy from them
    /// as the native transport does.
    pub proxy_environment: HashMap<String, String>,
}

/// A call the API server (or the socket under it) failed.
#[napi(object, js_name = "KubernetesFailure")]
pub(crate) struct JsFailure {
    /// What failed: the API's `Status.message`, or the socket's error. Redacted before use.
    pub message: String,
    /// The HTTP status the API server (or a proxy) answered with, when one did.
    pub http_status: Option<u16>,
}

/// The answer to `KubernetesApi.listPods`: the pods, or why there are none.
#[napi(object, js_name = "KubernetesPodList")]
pub(crate) struct JsPodList {
    pub pods: Option<Vec<JsPod>>,
    pub failure: Option<JsFailure>,
}

/// One exec for `KubernetesApi.exec`: the command and stdin exactly as the
/// native transport sends them, and the bounds it applies.
#[napi(object, js_name = "KubernetesExecRequest")]
pub(crate) struct JsKubernetesExecRequest {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// argv, rendered by the core; never contains the statement.
    pub command: Vec<String>,
    /// Written to the exec's stdin and never closed: the command frames it
    /// with `head -c N`, and closing stdin loses the exit status under the v4
    /// channel protocol.
    pub stdin: String,
    /// Close the WebSocket after this long; the addon has given up by then.
    pub timeout_ms: u32,
    /// Keep at most this many bytes of each stream (go on reading past it).
    pub max_output_bytes: u32,
}

/// The answer to `KubernetesApi.exec`.
#[napi(object, js_name = "KubernetesExecOutcome")]
pub(crate) struct JsExecOutcome {
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    /// The status frame (channel 3) as JSON, when it arrived; the addon reads
    /// the exit code from it. Absent when the connection ended first.
    #[napi(ts_type = "unknown")]
    pub status: Option<serde_json::Value>,
    /// Set when the exec could not be started or the connection failed.
    pub failure: Option<JsFailure>,
}

type LeaseFn = ThreadsafeFunction<JsLeaseRequest, Promise<JsLeaseOutcome>, JsLeaseRequest, Status, false>;
type ConnectFn = ThreadsafeFunction<Option<String>, Promise<()>, Option<String>, Status, false>;
type ResolveFn =
    ThreadsafeFunction<serde_json::Value, Promise<JsResolution>, serde_json::Value, Status, false>;
type ListArgs = FnArgs<(String, String)>;
type ListFn = ThreadsafeFunction<ListArgs, Promise<JsPodList>, ListArgs, Status, false>;
type ExecFn = ThreadsafeFunction<
    JsKubernetesExecRequest,
    Promise<JsExecOutcome>,
    JsKubernetesExecRequest,
    Status,
    false,
>;

/// The Kubernetes API for a binding without a transport of its own (the WASM
/// build). Supplied by the package's entry point; the natively built addon
/// ignores it.
#[napi(object, object_to_js = false)]
pub(crate) struct KubernetesApi {
    /// Resolves the validated `kubeConfig` prop (`null`: none given) the way
    /// the native transport does, without connecting. Rejects when no
    /// configuration can be loaded.
    #[napi(ts_type = "(kubeConfig: unknown) => Promise<KubernetesResolution>")]
    pub resolve: ResolveFn,
    /// Uses `proxyUrl` (chosen by the addon; `null`: none) for every request
    /// after it, with the configuration `resolve` selected.
    #[napi(ts_type = "(proxyUrl: string | null) => Promise<void>")]
    pub connect: ConnectFn,
    /// Lists the pods of `namespace` matching `labelSelector` (`k=v,k2=v2`)
    /// with the configuration the last `resolve` selected.
    #[napi(ts_type = "(namespace: string, labelSelector: string) => Promise<KubernetesPodList>")]
    pub list_pods: ListFn,
    /// Runs one exec over a WebSocket (`v5.channel.k8s.io`, else `v4`).
    #[napi(ts_type = "(request: KubernetesExecRequest) => Promise<KubernetesExecOutcome>")]
    pub exec: ExecFn,
    /// One `coordination.k8s.io/v1` Lease call: `get` (resolves without `lease`
    /// when there is none), `create`, or `replace` conditional on
    /// `resourceVersion`. A write that conflicts resolves with the API's 409
    /// as its `failure`.
    #[napi(ts_type = "(request: KubernetesLeaseRequest) => Promise<KubernetesLeaseOutcome>")]
    pub lease: LeaseFn,
    /// `<host>/<pid>` of this process, for the lease holder identity.
    pub identity: String,
}

/// What `KubernetesApi.lease` receives.
#[allow(dead_code)]
#[napi(object, js_name = "KubernetesLeaseRequest", object_from_js = false)]
pub(crate) struct JsLeaseRequest {
    #[napi(ts_type = "'get' | 'create' | 'replace'")]
    pub verb: String,
    pub namespace: String,
    pub name: String,
    pub resource_version: Option<String>,
    pub spec: Option<JsLease>,
}

/// A Lease's spec as the lease logic reads and writes it (times are RFC 3339
/// with microseconds).
#[napi(object, js_name = "KubernetesLease")]
pub(crate) struct JsLease {
    /// `metadata.resourceVersion` (absent in a request's spec).
    pub resource_version: Option<String>,
    pub holder: Option<String>,
    pub duration_seconds: Option<u32>,
    pub acquire_time: Option<String>,
    pub renew_time: Option<String>,
    pub transitions: Option<u32>,
}

/// The answer to `KubernetesApi.lease`.
#[napi(object, js_name = "KubernetesLeaseOutcome")]
pub(crate) struct JsLeaseOutcome {
    /// The lease after the call; absent for a `get` of none.
    pub lease: Option<JsLease>,
    /// Set when the call failed (a 409 conflict included).
    pub failure: Option<JsFailure>,
}

impl From<JsEndpoint> for ClusterEndpoint {
    fn from(e: JsEndpoint) -> Self {
        ClusterEndpoint {
            cluster_name: e.cluster_name,
            server: e.server,
            ca_data: e.ca_data,
            ca_file: e.ca_file,
            skip_tls_verify: e.skip_tls_verify,
        }
    }
}

/// A failure the JavaScript transport reported: the kind follows the HTTP
/// status (none: the socket failed, worth a retry), the text is redacted.
fn reported(failure: JsFailure) -> TransportError {
    let kind = failure
        .http_status
        .map_or(TransportErrorKind::Transient, TransportErrorKind::for_http_status);
    let e = TransportError::new(kind, redact(&failure.message));
    match failure.http_status {
        Some(status) => e.with_http_status(status),
        None => e,
    }
}

/// The transport itself threw or rejected (a bug or an unexpected client
/// error): transient, and redacted like everything else from that side.
fn rejected(what: &str, err: Error) -> TransportError {
    TransportError::new(
        TransportErrorKind::Transient,
        redact(&format!(
            "the Kubernetes transport's {what} failed: {}",
            err.reason
        )),
    )
}

impl KubernetesApi {
    /// `resolve` for `kube_config` (serialized as the prop is written).
    pub(crate) async fn resolve(
        &self,
        kube_config: Option<&clickhouse_schema_core::config::KubeConfigOptions>,
    ) -> Result<JsResolution, String> {
        let arg = match kube_config {
            Some(options) => serde_json::to_value(options).map_err(|e| format!("internal: {e}"))?,
            None => serde_json::Value::Null,
        };
        let promise = self
            .resolve
            .call_async_catch(arg)
            .await
            .map_err(|e| redact(&e.reason))?;
        promise.await.map_err(|e| redact(&e.reason))
    }

    /// `resolve` for a connection the caller resolved (see `js_connection`):
    /// the argument is `{ resolvedConnection }`, which no kubeConfig prop can
    /// be, and the JavaScript side builds its client from it in memory.
    pub(crate) async fn resolve_connection(
        &self,
        resolved: &clickhouse_schema_core::kubernetes::connection::ResolvedConnection,
    ) -> Result<JsResolution, String> {
        let arg = serde_json::json!({
            "resolvedConnection": {
                "endpoint": resolved.endpoint,
                "certificateAuthorityData": resolved.certificate_authority_data,
                "insecureSkipTlsVerify": resolved.insecure_skip_tls_verify,
                "token": resolved.token,
                "clientCert": resolved.client_certificate.as_ref().map(|c| serde_json::json!({
                    "certificate": c.certificate,
                    "key": c.key,
                })),
            }
        });
        let promise = self
            .resolve
            .call_async_catch(arg)
            .await
            .map_err(|e| redact(&resolved.scrub(&e.reason)))?;
        promise.await.map_err(|e| redact(&resolved.scrub(&e.reason)))
    }

    /// `connect` through `proxy` (a URL, or none).
    pub(crate) async fn connect(&self, proxy: Option<String>) -> Result<(), String> {
        let promise = self
            .connect
            .call_async_catch(proxy)
            .await
            .map_err(|e| redact(&e.reason))?;
        promise.await.map_err(|e| redact(&e.reason))
    }

    /// The pods of `namespace` matching `selector`, bounded by [`LIST_TIMEOUT`] on `timers`.
    pub(crate) fn list_pods_within(
        &self,
        timers: &Timers,
        namespace: &str,
        selector: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<PodInfo>, TransportError>> + Send {
        let timers = timers.clone();
        let args: ListArgs = (namespace.to_owned(), label_selector(selector)).into();
        async move {
            let call = async {
                let promise = self
                    .list_pods
                    .call_async_catch(args)
                    .await
                    .map_err(|e| rejected("listPods", e))?;
                promise.await.map_err(|e| rejected("listPods", e))
            };
            let list = timers.timeout(LIST_TIMEOUT, call).await.ok_or_else(|| {
                TransportError::new(
                    TransportErrorKind::Timeout,
                    format!(
                        "the API server did not answer the pod list within {} s",
                        LIST_TIMEOUT.as_secs()
                    ),
                )
            })??;
            if let Some(failure) = list.failure {
                return Err(reported(failure));
            }
            Ok(list
                .pods
                .unwrap_or_default()
                .into_iter()
                .map(JsPod::into_pod_info)
                .collect())
        }
    }

    /// Runs `request` as one exec, abandoned after the request's timeout on `timers`.
    /// One Lease call, bounded like a pod list.
    pub(crate) async fn lease_within(
        &self,
        timers: &Timers,
        verb: &str,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        spec: Option<&LeaseSpec>,
    ) -> Result<Option<LeaseRecord>, TransportError> {
        let request = JsLeaseRequest {
            verb: verb.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            resource_version: resource_version.map(str::to_owned),
            spec: spec.map(|s| JsLease {
                resource_version: None,
                holder: s.holder.clone(),
                duration_seconds: Some(s.duration_seconds),
                acquire_time: s.acquire_time.clone(),
                renew_time: s.renew_time.clone(),
                transitions: Some(s.transitions),
            }),
        };
        let call = async {
            let promise = self
                .lease
                .call_async_catch(request)
                .await
                .map_err(|e| rejected("lease", e))?;
            promise.await.map_err(|e| rejected("lease", e))
        };
        let outcome = timers.timeout(LIST_TIMEOUT, call).await.ok_or_else(|| {
            TransportError::new(
                TransportErrorKind::Timeout,
                format!(
                    "the API server did not answer the lease {verb} within {} s",
                    LIST_TIMEOUT.as_secs()
                ),
            )
        })??;
        if let Some(failure) = outcome.failure {
            return Err(reported(failure));
        }
        Ok(outcome.lease.map(|l| LeaseRecord {
            resource_version: l.resource_version.unwrap_or_default(),
            holder: l.holder,
            duration_seconds: l.duration_seconds,
            acquire_time: l.acquire_time,
            renew_time: l.renew_time,
            transitions: l.transitions,
        }))
    }

    pub(crate) fn exec_within(
        &self,
        timers: &Timers,
        request: ExecRequest,
    ) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let timers = timers.clone();
        let timeout: Duration = request.timeout;
        let js_request = JsKubernetesExecRequest {
            namespace: request.namespace,
            pod: request.pod,
            container: request.container,
            command: request.command,
            stdin: request.stdin,
            timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            max_output_bytes: OUTPUT_CAP as u32,
        };
        async move {
            let run = async {
                let promise = self
                    .exec
                    .call_async_catch(js_request)
                    .await
                    .map_err(|e| rejected("exec", e))?;
                promise.await.map_err(|e| rejected("exec", e))
            };
            // The transport closes its socket at the same bound; this one
            // holds even if it does not.
            let outcome = timers.timeout(timeout, run).await.ok_or_else(|| {
                TransportError::new(
                    TransportErrorKind::Timeout,
                    format!("the exec did not finish within {} ms", timeout.as_millis()),
                )
            })??;
            if let Some(failure) = outcome.failure {
                return Err(reported(failure));
            }
            let Some(status) = outcome.status else {
                return Err(exec_without_status(None));
            };
            let status: ExecStatus = serde_json::from_value(status).map_err(|e| {
                TransportError::new(
                    TransportErrorKind::InvalidResponse,
                    format!("the exec's status frame could not be read: {e}"),
                )
            })?;
            Ok(ExecOutput {
                exit_code: status.exit_code()?,
                stdout: outcome.stdout.unwrap_or_default(),
                stderr: outcome.stderr.unwrap_or_default(),
            })
        }
    }
}
