//! kube-rs implementation of the core's transport traits: kubeconfig
//! resolution and the credential-free cluster identity ([`kubeconfig`]), pod listing ([`pods`]), `pods/exec` ([`exec`]),
//! and the one mapping of kube-rs errors onto transport errors ([`error`]),
//! which also keeps credentials out of every message. (The real clock is the
//! binding's: the WASM build has no kube-rs but needs the same clock.)

pub mod error;
pub mod exec;
pub mod kubeconfig;
pub mod pods;

use std::collections::BTreeMap;

use clickhouse_schema_core::transport::{
    ExecOutput, ExecRequest, Executor, PodInfo, PodLister, TransportError,
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
        exec::exec(&self.client, request)
    }
}
