//! The `coordination.k8s.io/v1` Lease calls of the core's lease (get, create,
//! replace with the resourceVersion read), each bounded like a pod list.

use clickhouse_schema_core::transport::{
    LIST_TIMEOUT, LeaseRecord, LeaseSpec, TransportError, TransportErrorKind,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec as KubeLeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

use crate::error::from_kube;

pub(crate) async fn get(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<LeaseRecord>, TransportError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = bounded("read", api.get_opt(name)).await?;
    Ok(lease.as_ref().map(record))
}

pub(crate) async fn create(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    spec: &LeaseSpec,
) -> Result<LeaseRecord, TransportError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = object(name, None, spec)?;
    Ok(record(
        &bounded("create", api.create(&PostParams::default(), &lease)).await?,
    ))
}

pub(crate) async fn replace(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    resource_version: &str,
    spec: &LeaseSpec,
) -> Result<LeaseRecord, TransportError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = object(name, Some(resource_version), spec)?;
    Ok(record(
        &bounded("update", api.replace(name, &PostParams::default(), &lease)).await?,
    ))
}

async fn bounded<T>(
    what: &str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, TransportError> {
    tokio::time::timeout(LIST_TIMEOUT, call)
        .await
        .map_err(|_| {
            TransportError::new(
                TransportErrorKind::Timeout,
                format!(
                    "the API server did not answer the lease {what} within {} s",
                    LIST_TIMEOUT.as_secs()
                ),
            )
        })?
        .map_err(|e| from_kube(&e))
}

fn object(name: &str, resource_version: Option<&str>, spec: &LeaseSpec) -> Result<Lease, TransportError> {
    Ok(Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            resource_version: resource_version.map(str::to_owned),
            ..Default::default()
        },
        spec: Some(KubeLeaseSpec {
            holder_identity: spec.holder.clone(),
            lease_duration_seconds: Some(i32::try_from(spec.duration_seconds).unwrap_or(i32::MAX)),
            acquire_time: spec.acquire_time.as_deref().map(micro_time).transpose()?,
            renew_time: spec.renew_time.as_deref().map(micro_time).transpose()?,
            lease_transitions: Some(i32::try_from(spec.transitions).unwrap_or(i32::MAX)),
            ..Default::default()
        }),
    })
}

fn micro_time(text: &str) -> Result<MicroTime, TransportError> {
    text.parse().map(MicroTime).map_err(|_| {
        TransportError::new(
            TransportErrorKind::InvalidResponse,
            format!("internal: '{text}' is not an RFC 3339 time"),
        )
    })
}

fn record(lease: &Lease) -> LeaseRecord {
    let spec = lease.spec.as_ref();
    LeaseRecord {
        resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
        holder: spec.and_then(|s| s.holder_identity.clone()),
        duration_seconds: spec
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|d| u32::try_from(d).ok()),
        acquire_time: spec
            .and_then(|s| s.acquire_time.as_ref())
            .map(|t| t.0.to_string()),
        renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0.to_string()),
        transitions: spec
            .and_then(|s| s.lease_transitions)
            .and_then(|d| u32::try_from(d).ok()),
    }
}
