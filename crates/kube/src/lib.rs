//! kube-rs implementation of the core's transport traits: kubeconfig
//! resolution and the credential-free cluster identity ([`kubeconfig`]), pod listing ([`pods`]), `pods/exec` ([`exec`]),
//! and the one mapping of kube-rs errors onto transport errors ([`error`]),
//! which also keeps credentials out of every message. (The real clock is the
//! binding's: the WASM build has no kube-rs but needs the same clock.)

pub mod error;
pub mod exec;
pub mod kubeconfig;
mod leases;
pub mod pods;

use std::collections::BTreeMap;

use clickhouse_schema_core::transport::{
    ExecOutput, ExecRequest, Executor, LeaseApi, LeaseRecord, LeaseSpec, PodInfo, PodLister, TransportError,
};

pub use kubeconfig::{ConnectError, Connection, connect, connect_resolved, endpoint_of, resolve_endpoint};

/// Lists pods and runs execs through one kube-rs client.
#[derive(Clone)]
pub struct KubeTransport {
    client: kube::Client,
}

impl KubeTransport {
    /// A transport over an already configured client (tests and embedders).
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// The client the pod list and exec requests go through.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }
}

impl From<&Connection> for KubeTransport {
    fn from(connection: &Connection) -> Self {
        Self::new(connection.client.clone())
    }
}

impl std::fmt::Debug for KubeTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeTransport").finish_non_exhaustive()
    }
}

impl PodLister for KubeTransport {
    fn list_pods(
        &self,
        namespace: &str,
        selector: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<PodInfo>, TransportError>> + Send {
        pods::list(&self.client, namespace, selector)
    }
}

impl Executor for KubeTransport {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        exec::exec(&self.client, request, &|_| {})
    }

    fn exec_seeing(
        &self,
        request: ExecRequest,
        seen: &(dyn Fn(&[u8]) + Send + Sync),
    ) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        exec::exec(&self.client, request, seen)
    }
}

impl LeaseApi for KubeTransport {
    fn process_identity(&self) -> String {
        process_identity()
    }

    fn get_lease(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<LeaseRecord>, TransportError>> + Send {
        leases::get(&self.client, namespace, name)
    }

    fn create_lease(
        &self,
        namespace: &str,
        name: &str,
        spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        leases::create(&self.client, namespace, name, spec)
    }

    fn replace_lease(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
        spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        leases::replace(&self.client, namespace, name, resource_version, spec)
    }
}

/// `<host>/<pid>`: who holds a lease, as an operator reading it would look for it.
pub fn process_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .or_else(|| std::env::var("COMPUTERNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}/{}", std::process::id())
}
