//! The in-process test harness: `Sandbox::start` brings up hosts + API server and returns handles
//! to drive it; dropping it (or `shutdown`) tears everything down.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::auth::{Authorizer, Tokens, default_users};
use crate::exec_log::ExecRecord;
use crate::exec_protocol::ExecProtocol;
use crate::faults::Fault;
use crate::images::Images;
use crate::kubeconfig::{self, KubeconfigInput};
use crate::pods::{Container, Pod};
use crate::runtime::{HostsConfig, HostsRuntime, LocalProcess, PodRuntime, RuntimeError};
use crate::server::Server;
use crate::state::{AddPod, ControlError, Passwords, PodState, State};
use crate::topology::{self, Layout};
use crate::{api, control, tls};
use clickhouse_schema_sandbox_hosts::{Engine, HostSpec};

/// What backs the pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    /// Real ClickHouse servers in network namespaces (needs root and the installed packages).
    Hosts,
    /// Exec runs on this machine; for protocol tests that need no ClickHouse.
    Local,
}

/// How `Sandbox::start` sets the sandbox up; the default is one shard of three ClickHouse replicas
/// on real hosts.
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// The ClickHouse pods at start: replicas per shard, each pod `chi-sandbox-<cluster>-<shard>-<replica>-0`.
    pub layout: Layout,
    /// Where the kubeconfig, `sandbox.json` and the hosts' run directory go. `None`: a fresh
    /// temporary directory, removed on shutdown.
    pub dir: Option<PathBuf>,
    /// Hosts instance (subnet 10.250.<instance>.0/24). `None`: the first one no other running
    /// sandbox on this machine holds. What a crashed sandbox left on it is removed first.
    pub instance: Option<u8>,
    /// 0: ephemeral.
    pub port: u16,
    /// Namespace of the pods, and the one every kubeconfig context selects.
    pub namespace: String,
    /// The remote_servers cluster covering every pod, also in the pods' `clickhouse.altinity.com/cluster` label.
    pub cluster_name: String,
    /// Real ClickHouse hosts (root needed) or processes on this machine.
    pub runtime: RuntimeKind,
    /// Exec subprotocols the API server accepts, most preferred first. Default: v5 then v4, as
    /// Kubernetes 1.30+; `[V4]` is an older cluster (see `exec::unsupported_protocol` for what a
    /// client offering only v5 gets).
    pub exec_protocols: Vec<ExecProtocol>,
    /// Which ClickHouse the pods run (real hosts only): 18.16 servers, or the 26.9 engine whose
    /// pods have a stand-in client and no server (crates/sandbox-hosts, `modern.rs`).
    pub engine: Engine,
    /// What becomes of the process of an exec whose connection drops (the client closed it, or a
    /// `drop_exec` fault cut it): `false` (the default) kills it; `true` leaves it running to its
    /// end with its stdin closed and its output discarded, as a real kubelet does. Also set on a
    /// running sandbox with `PUT /sandbox/dropped-execs`.
    pub keep_dropped_execs: bool,
    /// Milliseconds each exec waits before its process starts, as the API server, the kubelet and
    /// the container runtime take on a real cluster (commonly 100 to 300): what benchmarks of exec
    /// counts measure against. Also set on a running sandbox, for every pod or one, with
    /// `PUT /sandbox/exec-setup`.
    pub exec_setup_ms: u64,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        Self {
            layout: Layout::replicas(3),
            dir: None,
            instance: None,
            port: 0,
            namespace: "sandbox".into(),
            cluster_name: "sandbox".into(),
            runtime: RuntimeKind::Hosts,
            exec_protocols: ExecProtocol::ALL.to_vec(),
            engine: Engine::default(),
            keep_dropped_execs: false,
            exec_setup_ms: 0,
        }
    }
}

impl SandboxOptions {
    /// No ClickHouse: `pods` pods (one shard) exec on this machine.
    pub fn local(pods: u32) -> Self {
        Self {
            layout: Layout::replicas(pods),
            runtime: RuntimeKind::Local,
            ..Self::default()
        }
    }
}

/// Why a sandbox did not start, or an operation on it failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The directory, the listening port, the kubeconfig or sandbox.json.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The throwaway CA or server certificate could not be made.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The pod runtime failed: hosts that did not come up, a server that did not answer, ...
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A pod operation was refused (unknown or existing pod, invalid request) or its runtime call failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// `SandboxOptions::exec_protocols` was empty.
    #[error("exec_protocols is empty: the server would refuse every exec")]
    NoExecProtocol,
}

/// What `sandbox.json` holds: everything a client of the sandbox needs.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SandboxInfo {
    /// API server port on 127.0.0.1.
    pub port: u16,
    /// API server URL, `https://127.0.0.1:<port>`.
    pub server: String,
    /// Namespace of the pods.
    pub namespace: String,
    /// The ClickHouse cluster (remote_servers) covering every pod.
    pub cluster: String,
    /// The kubeconfig for kubectl and kube-rs, one context per token.
    pub kubeconfig: PathBuf,
    /// Bearer tokens of the four users.
    pub tokens: Tokens,
    /// Passwords of the ClickHouse users.
    pub passwords: Passwords,
    /// Pod names when this was taken (for sandbox.json: at start).
    pub pods: Vec<String>,
    /// The layout it started with (replicas per shard).
    pub layout: Layout,
    /// Hosts instance (subnet 10.250.<instance>.0/24); `None` with the local runtime.
    pub instance: Option<u8>,
    /// The serving process: `sandbox start` waits for a sandbox.json naming the child it launched.
    pub pid: u32,
    /// Exec subprotocols the server accepts, most preferred first.
    #[serde(default)]
    pub exec_protocols: Vec<ExecProtocol>,
    /// The pods' ClickHouse version: `18.16`, or `26.9` for the modern engine.
    #[serde(default)]
    pub engine: String,
}

/// A running sandbox: pod runtime, HTTPS API server and the state both share. Dropping it tears
/// everything down; `shutdown` does the same and reports failures.
pub struct Sandbox {
    layout: Layout,
    state: Arc<State>,
    server: Server,
    dir: PathBuf,
    temp_dir: bool,
    kubeconfig: PathBuf,
    ca_pem: String,
    instance: Option<u8>,
    reclaimed: Vec<String>,
    down: bool,
    engine: Engine,
}

fn random_secret() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl Sandbox {
    /// Starts the runtime with `opts.pods` pods, then the API server, and writes the kubeconfig
    /// and sandbox.json; with real hosts, returns once every server answers.
    pub async fn start(opts: SandboxOptions) -> Result<Sandbox, SandboxError> {
        if opts.exec_protocols.is_empty() {
            return Err(SandboxError::NoExecProtocol);
        }
        let (dir, temp_dir) = match &opts.dir {
            Some(d) => (d.clone(), false),
            None => {
                let d = std::env::temp_dir().join(format!(
                    "sandbox-{}-{}",
                    std::process::id(),
                    uuid::Uuid::new_v4().simple()
                ));
                (d, true)
            }
        };
        std::fs::create_dir_all(&dir)?;
        let dir = std::fs::canonicalize(&dir)?;
        let passwords = Passwords {
            default: random_secret(),
            writer: random_secret(),
        };
        let specs: Vec<HostSpec> = opts
            .layout
            .places()
            .into_iter()
            .map(|(shard, replica)| HostSpec {
                name: topology::pod_name(&opts.cluster_name, shard, replica),
                service: topology::service_name(&opts.cluster_name, shard, replica),
                shard,
            })
            .collect();

        let (runtime, instance, reclaimed): (Arc<dyn PodRuntime>, _, _) = match opts.runtime {
            RuntimeKind::Local => (Arc::new(LocalProcess::new()), None, Vec::new()),
            RuntimeKind::Hosts => {
                let config = HostsConfig {
                    instance: opts.instance,
                    run_dir: dir.join("run"),
                    cluster_name: opts.cluster_name.clone(),
                    default_password: passwords.default.clone(),
                    writer_password: passwords.writer.clone(),
                    engine: opts.engine,
                };
                let hosts_specs = specs.clone();
                let rt = tokio::task::spawn_blocking(move || HostsRuntime::start(config, &hosts_specs))
                    .await
                    .map_err(|e| RuntimeError(e.to_string()))??;
                let (instance, reclaimed) = (rt.instance(), rt.reclaimed().to_vec());
                (Arc::new(rt), Some(instance), reclaimed)
            }
        };

        let mut state = State::new(
            Authorizer {
                users: default_users(),
            },
            runtime.clone(),
            opts.namespace.clone(),
            opts.cluster_name.clone(),
            passwords,
            Images::install(&dir)?,
        );
        state.exec_protocols = opts.exec_protocols.clone();
        state.set_keep_dropped_execs(opts.keep_dropped_execs);
        state.set_exec_setup(None, opts.exec_setup_ms);
        let state = Arc::new(state);
        for spec in &specs {
            let name = &spec.name;
            let ip = match opts.runtime {
                RuntimeKind::Hosts => runtime
                    .ip(name)
                    .ok_or_else(|| RuntimeError(format!("host {name} has no IP")))?,
                RuntimeKind::Local => runtime.add(spec)?,
            };
            let req = AddPod {
                shard: Some(spec.shard),
                ..AddPod::clickhouse()
            };
            state.insert_pod(&req, name.clone(), ip)?;
        }

        let tls = tls::generate()?;
        let listener = TcpListener::bind(("127.0.0.1", opts.port)).await?;
        let app = api::routes()
            .route_layer(axum::middleware::from_fn_with_state(state.clone(), api::record))
            .merge(control::routes())
            .fallback(api::not_found_route)
            .with_state(state.clone());
        let server = Server::start(listener, tls.server_config.clone(), app)?;
        let kubeconfig = dir.join("kubeconfig");
        let tokens = state.auth.tokens();
        std::fs::write(
            &kubeconfig,
            kubeconfig::render(&KubeconfigInput {
                port: server.addr.port(),
                ca_pem: &tls.ca_pem,
                tokens: &tokens,
                namespace: &opts.namespace,
            }),
        )?;
        let sandbox = Sandbox {
            layout: opts.layout.clone(),
            state,
            server,
            dir,
            temp_dir,
            kubeconfig,
            ca_pem: tls.ca_pem,
            instance,
            reclaimed,
            down: false,
            engine: opts.engine,
        };
        std::fs::write(
            sandbox.dir.join("sandbox.json"),
            serde_json::to_string_pretty(&sandbox.info()).map_err(std::io::Error::other)?,
        )?;
        Ok(sandbox)
    }

    /// What sandbox.json holds, as of now.
    pub fn info(&self) -> SandboxInfo {
        SandboxInfo {
            port: self.port(),
            server: self.server_url(),
            namespace: self.state.namespace.clone(),
            cluster: self.state.cluster_name.clone(),
            kubeconfig: self.kubeconfig.clone(),
            tokens: self.tokens(),
            passwords: self.passwords(),
            pods: self.pod_names(),
            layout: self.layout.clone(),
            instance: self.instance,
            pid: std::process::id(),
            exec_protocols: self.state.exec_protocols.clone(),
            engine: self.engine.version().to_string(),
        }
    }

    /// The kubeconfig to hand to kubectl or kube-rs; its current context is the admin's.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }
    /// The sandbox directory (canonical): kubeconfig, sandbox.json and the hosts' `run/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The API server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.server.addr.port()
    }
    /// `https://127.0.0.1:<port>`, the server the kubeconfig names.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port())
    }
    /// PEM of the CA that signed the server certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
    /// Bearer tokens of the admin, minimal, no-exec and lease users.
    pub fn tokens(&self) -> Tokens {
        self.state.auth.tokens()
    }
    /// Passwords of the ClickHouse users, random per sandbox.
    pub fn passwords(&self) -> Passwords {
        self.state.passwords.clone()
    }
    /// Namespace new pods go to unless `AddPod::namespace` says otherwise.
    pub fn namespace(&self) -> &str {
        &self.state.namespace
    }
    /// What a crashed sandbox had left on this sandbox's instance (its processes, namespaces and
    /// interfaces) and the start removed, one line each; empty when the instance was clean.
    pub fn reclaimed(&self) -> &[String] {
        &self.reclaimed
    }

    /// Hosts instance this sandbox holds; `None` with the local runtime.
    pub fn instance(&self) -> Option<u8> {
        self.instance
    }
    /// Names of the current pods, sorted.
    pub fn pod_names(&self) -> Vec<String> {
        self.state.pods().into_iter().map(|p| p.name).collect()
    }
    /// The pod as it is now; `None` if there is no pod of that name.
    pub fn pod(&self, name: &str) -> Option<Pod> {
        self.state.pod(name)
    }
    /// Every pod, sorted by name.
    pub fn pods(&self) -> Vec<Pod> {
        self.state.pods()
    }

    /// Adds a pod; with `AddPod::clickhouse()` a new empty server that joins its shard (`AddPod::shard`).
    pub async fn add_pod(&self, req: AddPod) -> Result<Pod, SandboxError> {
        Ok(self.state.add_pod(req).await?)
    }
    /// Deletes the pod object and its host (server, data) before returning; returns the pod as it was.
    pub async fn remove_pod(&self, name: &str) -> Result<Pod, SandboxError> {
        Ok(self.state.remove_pod(name).await?)
    }
    /// Same name, new uid, empty server.
    pub async fn replace_pod(&self, name: &str) -> Result<Pod, SandboxError> {
        Ok(self.state.replace_pod(name).await?)
    }
    /// Same pod (same uid), data gone: the server restarts on an empty disk.
    pub async fn wipe_pod(&self, name: &str) -> Result<Pod, SandboxError> {
        Ok(self.state.wipe_pod(name).await?)
    }
    /// Freezes ZooKeeper until [`Sandbox::resume_zookeeper`]: ON CLUSTER DDL and replication wait.
    pub async fn pause_zookeeper(&self) -> Result<(), SandboxError> {
        Ok(self.state.pause_zookeeper(true).await?)
    }
    /// Lets a paused ZooKeeper run again.
    pub async fn resume_zookeeper(&self) -> Result<(), SandboxError> {
        Ok(self.state.pause_zookeeper(false).await?)
    }
    /// Changes what the API reports (phase, readiness, deletionTimestamp); the server is left alone.
    pub fn set_pod_state(&self, name: &str, state: PodState) -> Result<Pod, SandboxError> {
        Ok(self.state.set_pod_state(name, state)?)
    }
    /// Replaces the pod's containers (at least one); later execs get the new names and env.
    pub fn set_containers(&self, name: &str, containers: Vec<Container>) -> Result<Pod, SandboxError> {
        Ok(self.state.set_containers(name, containers)?)
    }
    /// Replaces the pod's labels, which label selectors match.
    pub fn set_labels(&self, name: &str, labels: BTreeMap<String, String>) -> Result<Pod, SandboxError> {
        Ok(self.state.set_labels(name, labels)?)
    }
    /// Stops the pod's ClickHouse server; the pod stays Running, Ready=False.
    pub async fn stop_server(&self, name: &str) -> Result<Pod, SandboxError> {
        Ok(self.state.stop_server(name).await?)
    }
    /// Starts the pod's server again (data kept); the pod is Ready again and its restart count goes up.
    pub async fn start_server(&self, name: &str) -> Result<Pod, SandboxError> {
        Ok(self.state.start_server(name).await?)
    }
    /// Every exec served so far, oldest first.
    pub fn exec_log(&self) -> Vec<ExecRecord> {
        self.state.exec_log()
    }
    /// Every Kubernetes API request served so far (control calls excluded).
    pub fn api_log(&self) -> Vec<crate::api_log::ApiRequest> {
        self.state.api_log()
    }
    /// Empties the API request log, so a test can count what one step costs.
    pub fn clear_api_log(&self) {
        self.state.clear_api_log();
    }
    /// Empties the exec log, so a test sees only the execs of the step that follows.
    pub fn clear_exec_log(&self) {
        self.state.clear_exec_log()
    }
    /// Arms a fault; it fires on the next matching calls and is then used up.
    pub fn inject(&self, fault: Fault) {
        self.state.arm_fault(fault)
    }
    /// Faults armed and not used up yet, with their remaining counts.
    pub fn armed_faults(&self) -> Vec<Fault> {
        self.state.faults().armed()
    }
    /// Disarms every fault.
    pub fn clear_faults(&self) {
        self.state.clear_faults()
    }

    /// Stops the API server and the runtime and removes a temporary directory; unlike Drop, reports
    /// what failed.
    pub async fn shutdown(mut self) -> Result<(), SandboxError> {
        self.server.stop();
        let rt = self.state.runtime.clone();
        self.down = true;
        let r = tokio::task::spawn_blocking(move || rt.shutdown())
            .await
            .map_err(|e| RuntimeError(e.to_string()))?;
        self.remove_temp_dir();
        Ok(r?)
    }

    fn remove_temp_dir(&self) {
        if self.temp_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !self.down {
            self.server.stop();
            if let Err(e) = self.state.runtime.shutdown() {
                eprintln!("sandbox: shutting down hosts: {e}");
            }
            self.remove_temp_dir();
        }
    }
}
