//! `options.connection`: the cluster of one call, resolved by the caller at
//! call time (the Alchemy provider asks the cluster adapter of the
//! `kubeConfig` connection's auth kind for an endpoint, CA and short-lived
//! token).
//!
//! A function rather than a value so the credential is minted when, and
//! only when, a call reaches the cluster (a destroy with `onDelete: 'retain'`
//! never calls it), and so a failing adapter rejects through the one error
//! mapping, redacted like every Kubernetes-side message. What it resolves to
//! lives as long as the call and is never recorded.

use clickhouse_schema_core::kubernetes::connection::{ClientCertificate, ResolvedConnection};
use clickhouse_schema_core::kubernetes::redact::redact;
use clickhouse_schema_core::{ClickHouseSchemaError, ErrorKind};
use napi::Status;
use napi::bindgen_prelude::Promise;
use napi::threadsafe_function::ThreadsafeFunction;
use napi_derive::napi;

/// What `options.connection` resolves to: where the API server is and how to
/// authenticate, for this call only.
#[napi(object, object_to_js = false)]
pub(crate) struct ResolvedClusterConnection {
    /// API server URL (`https://...`; credentials are never sent over plain HTTP).
    pub endpoint: String,
    /// Base64-encoded PEM CA bundle of the endpoint.
    pub certificate_authority_data: Option<String>,
    /// Skip TLS verification of the endpoint (development clusters only).
    pub insecure_skip_tls_verify: Option<bool>,
    /// Bearer token sent with every request of the call.
    pub token: Option<String>,
    /// PEM client certificate and key for mutual TLS.
    pub client_cert: Option<ResolvedClientCert>,
}

/// A PEM client certificate and its key.
#[napi(object, object_to_js = false)]
pub(crate) struct ResolvedClientCert {
    pub certificate: String,
    pub key: String,
}

pub(crate) type ConnectionFn = ThreadsafeFunction<(), Promise<ResolvedClusterConnection>, (), Status, false>;

/// Resolves the connection for this call. A throw or rejection is an
/// `E_KUBERNETES_API` error saying the connection could not be resolved.
pub(crate) async fn resolve(connection: &ConnectionFn) -> Result<ResolvedConnection, ClickHouseSchemaError> {
    let failed = |reason: &str| {
        ClickHouseSchemaError::new(
            ErrorKind::KubernetesApi,
            redact(&format!(
                "kubeConfig: the Alchemy Kubernetes connection could not be resolved (options.connection failed): \
                 {reason}"
            )),
        )
    };
    let promise = connection
        .call_async_catch(())
        .await
        .map_err(|e| failed(&e.reason))?;
    let js = promise.await.map_err(|e| failed(&e.reason))?;
    if js.endpoint.trim().is_empty() {
        return Err(failed("it gave no endpoint"));
    }
    Ok(ResolvedConnection {
        endpoint: js.endpoint,
        certificate_authority_data: js.certificate_authority_data.filter(|ca| !ca.is_empty()),
        insecure_skip_tls_verify: js.insecure_skip_tls_verify.unwrap_or(false),
        token: js.token.filter(|t| !t.is_empty()),
        client_certificate: js.client_cert.map(|c| ClientCertificate {
            certificate: c.certificate,
            key: c.key,
        }),
    })
}
