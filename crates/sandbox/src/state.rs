//! Shared server state and the control operations on it; the control HTTP routes and the Rust
//! `Sandbox` API are thin wrappers over these methods so both behave identically.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use clickhouse_schema_sandbox_hosts::HostSpec;
use serde::{Deserialize, Serialize};

use crate::api_log::ApiRequest;
use crate::auth::Authorizer;
use crate::exec_log::ExecRecord;
use crate::exec_protocol::ExecProtocol;
use crate::faults::{Fault, Faults};
use crate::images::Images;
use crate::leases::store::Leases;
use crate::pods::{Backing, Container, Phase, Pod};
use crate::runtime::{PodRuntime, RuntimeError};
use crate::topology;

pub(crate) const CLICKHOUSE_CONTAINER: &str = "clickhouse";
pub(crate) const CLICKHOUSE_IMAGE: &str = "clickhouse/clickhouse-server:18.16.1";

/// Why a control operation on a pod was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("pod \"{0}\" not found")]
    NotFound(String),
    #[error("pod \"{0}\" already exists")]
    AlreadyExists(String),
    #[error("pod runtime: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// Passwords of the ClickHouse users, random per sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Passwords {
    /// User `default`; default containers have it as `CLICKHOUSE_PASSWORD`.
    pub default: String,
    /// User `writer`; default containers have it as `CLICKHOUSE_WRITER_PASSWORD`.
    pub writer: String,
}

/// What `add_pod` creates; every field has a ClickHouse-replica default.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AddPod {
    /// Default: the next free replica of the shard, `chi-sandbox-<cluster>-<shard>-<n>-0`.
    #[serde(default)]
    pub name: Option<String>,
    /// The shard (0-based) a ClickHouse pod joins; default 0. A new shard number starts a new shard.
    #[serde(default)]
    pub shard: Option<u32>,
    /// Default: the sandbox's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Default: the ClickHouse operator's labels for a replica of the `sandbox` installation.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Default: one `clickhouse` container with the password env vars.
    #[serde(default)]
    pub containers: Option<Vec<Container>>,
    /// `false`: no ClickHouse server behind it; exec runs on this machine.
    #[serde(default = "yes")]
    pub clickhouse: bool,
}

fn yes() -> bool {
    true
}

impl AddPod {
    /// A ClickHouse replica with every default. Not the same as `AddPod::default()`, whose
    /// `clickhouse` is false (no server).
    pub fn clickhouse() -> Self {
        Self {
            clickhouse: true,
            ..Default::default()
        }
    }
}

/// Lifecycle states a test can put a pod in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PodState {
    /// Running and Ready, not terminating.
    Running,
    /// Running, Ready=False.
    NotReady,
    /// Phase Pending, not Ready: exec fails with "container not found".
    Pending,
    /// deletionTimestamp set, still listed and still running.
    Terminating,
    /// Phase Succeeded: the containers exited 0; exec is refused.
    Succeeded,
    /// Phase Failed: a container exited with an error; exec is refused.
    Failed,
}

pub(crate) struct Store {
    pub(crate) pods: BTreeMap<String, Pod>,
    pub(crate) resource_version: u64,
}

impl Store {
    /// The next resourceVersion: one counter for pods and leases alike, as etcd's revision is one
    /// for the whole cluster.
    pub(crate) fn bump(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }
}

pub(crate) struct State {
    pub(crate) auth: Authorizer,
    pub(crate) runtime: Arc<dyn PodRuntime>,
    pub(crate) namespace: String,
    pub(crate) cluster_name: String,
    pub(crate) passwords: Passwords,
    pub(crate) store: Mutex<Store>,
    /// The `coordination.k8s.io` Lease objects; their resourceVersions come from `store`'s counter.
    pub(crate) leases: Leases,
    pub(crate) faults: Mutex<Faults>,
    /// Exec subprotocols the server accepts, in its order of preference.
    pub(crate) exec_protocols: Vec<ExecProtocol>,
    /// Whether the process of an exec whose connection dropped keeps running, as under a real
    /// kubelet (`SandboxOptions::keep_dropped_execs`); otherwise it is killed.
    keep_dropped_execs: std::sync::atomic::AtomicBool,
    /// How long each exec waits before its process starts, as a kubelet and a container runtime
    /// take to set one up: everywhere, and per pod (`SandboxOptions::exec_setup_ms`).
    exec_setup: Mutex<ExecSetup>,
    /// The shims of the images' userlands (`images.rs`).
    pub(crate) images: Images,
    exec_log: Mutex<Vec<ExecRecord>>,
    api_log: Mutex<Vec<ApiRequest>>,
    next_exec: AtomicU64,
    next_local_ip: AtomicU8,
}

/// What `State::exec_setup_for` reads.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ExecSetup {
    /// Every pod's, unless `pods` names it.
    pub(crate) all_ms: u64,
    pub(crate) pods: BTreeMap<String, u64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    pub(crate) fn new(
        auth: Authorizer,
        runtime: Arc<dyn PodRuntime>,
        namespace: String,
        cluster_name: String,
        passwords: Passwords,
        images: Images,
    ) -> Self {
        Self {
            auth,
            runtime,
            namespace,
            cluster_name,
            passwords,
            store: Mutex::new(Store {
                pods: BTreeMap::new(),
                resource_version: 1000,
            }),
            leases: Leases::default(),
            faults: Mutex::new(Faults::default()),
            exec_protocols: ExecProtocol::ALL.to_vec(),
            keep_dropped_execs: std::sync::atomic::AtomicBool::new(false),
            exec_setup: Mutex::new(ExecSetup::default()),
            images,
            exec_log: Mutex::new(Vec::new()),
            api_log: Mutex::new(Vec::new()),
            next_exec: AtomicU64::new(1),
            next_local_ip: AtomicU8::new(100),
        }
    }

    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    /// The operator's labels for a pod of `shard`; the replica label only when the name says which.
    pub(crate) fn default_labels(&self, name: &str, shard: u32) -> BTreeMap<String, String> {
        let replica = topology::place_of(&self.cluster_name, name).map(|(_, r)| r);
        topology::labels(&self.namespace, &self.cluster_name, shard, replica)
    }

    pub(crate) fn default_containers(&self) -> Vec<Container> {
        vec![Container {
            name: CLICKHOUSE_CONTAINER.to_string(),
            image: CLICKHOUSE_IMAGE.to_string(),
            env: vec![
                ("CLICKHOUSE_PASSWORD".to_string(), self.passwords.default.clone()),
                (
                    "CLICKHOUSE_WRITER_PASSWORD".to_string(),
                    self.passwords.writer.clone(),
                ),
            ],
            userland: Default::default(),
        }]
    }

    /// Puts a pod object in the store; the backing host must already exist.
    pub(crate) fn insert_pod(&self, req: &AddPod, name: String, ip: Ipv4Addr) -> Result<Pod, ControlError> {
        let shard = req.shard.unwrap_or(0);
        let labels = req
            .labels
            .clone()
            .unwrap_or_else(|| self.default_labels(&name, shard));
        let mut store = self.store();
        if store.pods.contains_key(&name) {
            return Err(ControlError::AlreadyExists(name));
        }
        let pod = Pod {
            name: name.clone(),
            namespace: req.namespace.clone().unwrap_or_else(|| self.namespace.clone()),
            uid: uuid::Uuid::new_v4().to_string(),
            resource_version: store.bump(),
            created: SystemTime::now(),
            labels,
            shard: req.clickhouse.then_some(shard),
            deletion: None,
            phase: Phase::Running,
            ready: true,
            containers: req
                .containers
                .clone()
                .unwrap_or_else(|| self.default_containers()),
            ip: Some(ip),
            backing: if req.clickhouse {
                Backing::Host
            } else {
                Backing::Local
            },
            restart_count: 0,
        };
        store.pods.insert(name, pod.clone());
        Ok(pod)
    }

    /// The first replica name of `shard` no pod has.
    pub(crate) fn next_pod_name(&self, shard: u32) -> String {
        let store = self.store();
        (0..)
            .map(|replica| topology::pod_name(&self.cluster_name, shard, replica))
            .find(|n| !store.pods.contains_key(n))
            .expect("unbounded")
    }

    pub(crate) fn pod(&self, name: &str) -> Option<Pod> {
        self.store().pods.get(name).cloned()
    }

    pub(crate) fn pods(&self) -> Vec<Pod> {
        self.store().pods.values().cloned().collect()
    }

    fn update(&self, name: &str, f: impl FnOnce(&mut Pod)) -> Result<Pod, ControlError> {
        let mut store = self.store();
        let rv = store.bump();
        let pod = store
            .pods
            .get_mut(name)
            .ok_or_else(|| ControlError::NotFound(name.to_string()))?;
        f(pod);
        pod.resource_version = rv;
        Ok(pod.clone())
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn PodRuntime) -> Result<T, RuntimeError> + Send + 'static,
    ) -> Result<T, ControlError> {
        let rt = self.runtime.clone();
        tokio::task::spawn_blocking(move || f(rt.as_ref()))
            .await
            .map_err(|e| ControlError::Runtime(RuntimeError(e.to_string())))?
            .map_err(ControlError::from)
    }

    pub(crate) async fn add_pod(&self, req: AddPod) -> Result<Pod, ControlError> {
        let name = req
            .name
            .clone()
            .unwrap_or_else(|| self.next_pod_name(req.shard.unwrap_or(0)));
        if self.pod(&name).is_some() {
            return Err(ControlError::AlreadyExists(name));
        }
        let ip = if req.clickhouse {
            let spec = HostSpec {
                service: topology::service_of(&name),
                name: name.clone(),
                shard: req.shard.unwrap_or(0),
            };
            self.blocking(move |rt| rt.add(&spec)).await?
        } else {
            Ipv4Addr::new(10, 244, 1, self.next_local_ip.fetch_add(1, Ordering::Relaxed))
        };
        self.insert_pod(&req, name, ip)
    }

    /// Removes the pod object at once and its host (if any) before returning.
    pub(crate) async fn remove_pod(&self, name: &str) -> Result<Pod, ControlError> {
        let pod = self
            .store()
            .pods
            .remove(name)
            .ok_or_else(|| ControlError::NotFound(name.to_string()))?;
        self.store().bump();
        if pod.backing == Backing::Host {
            let n = name.to_string();
            self.blocking(move |rt| rt.remove(&n)).await?;
        }
        Ok(pod)
    }

    /// A new pod object under the same name (new uid) whose server starts with empty data, as
    /// when Kubernetes replaces a pod whose volume was lost.
    pub(crate) async fn replace_pod(&self, name: &str) -> Result<Pod, ControlError> {
        let backing = self.update(name, |p| {
            p.uid = uuid::Uuid::new_v4().to_string();
            p.created = SystemTime::now();
            p.deletion = None;
            p.phase = Phase::Pending;
            p.ready = false;
            p.restart_count = 0;
        })?;
        if backing.backing == Backing::Host {
            let n = name.to_string();
            self.blocking(move |rt| rt.wipe_and_restart(&n)).await?;
        }
        self.update(name, |p| {
            p.phase = Phase::Running;
            p.ready = true;
        })
    }

    /// The same pod (same uid) whose disk was lost: its server restarts with empty data, as when a
    /// node's local volume is wiped under a pod that keeps running. Its restart count goes up.
    pub(crate) async fn wipe_pod(&self, name: &str) -> Result<Pod, ControlError> {
        let pod = self.update(name, |p| p.ready = false)?;
        if pod.backing == Backing::Host {
            let n = name.to_string();
            self.blocking(move |rt| rt.wipe_and_restart(&n)).await?;
        }
        self.update(name, |p| {
            p.ready = true;
            p.restart_count += 1;
        })
    }

    /// Freezes (or lets go of) the runtime's ZooKeeper; see `Hosts::pause_zookeeper`.
    pub(crate) async fn pause_zookeeper(&self, paused: bool) -> Result<(), ControlError> {
        self.blocking(move |rt| rt.pause_zookeeper(paused)).await
    }

    pub(crate) fn set_pod_state(&self, name: &str, state: PodState) -> Result<Pod, ControlError> {
        self.update(name, |p| {
            let (phase, ready, terminating) = match state {
                PodState::Running => (Phase::Running, true, false),
                PodState::NotReady => (Phase::Running, false, false),
                PodState::Pending => (Phase::Pending, false, false),
                PodState::Terminating => (p.phase, p.ready, true),
                PodState::Succeeded => (Phase::Succeeded, false, false),
                PodState::Failed => (Phase::Failed, false, false),
            };
            p.phase = phase;
            p.ready = ready;
            p.deletion = if terminating {
                Some(p.deletion.unwrap_or_else(SystemTime::now))
            } else {
                None
            };
        })
    }

    pub(crate) fn set_containers(&self, name: &str, containers: Vec<Container>) -> Result<Pod, ControlError> {
        if containers.is_empty() {
            return Err(ControlError::Invalid("a pod needs at least one container".into()));
        }
        self.update(name, |p| p.containers = containers)
    }

    pub(crate) fn set_labels(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
    ) -> Result<Pod, ControlError> {
        self.update(name, |p| p.labels = labels)
    }

    /// The pod stays Running but not Ready while its server is down, as a failing readiness
    /// probe would show it.
    pub(crate) async fn stop_server(&self, name: &str) -> Result<Pod, ControlError> {
        self.server(name, false).await
    }

    pub(crate) async fn start_server(&self, name: &str) -> Result<Pod, ControlError> {
        self.server(name, true).await
    }

    async fn server(&self, name: &str, start: bool) -> Result<Pod, ControlError> {
        let pod = self
            .pod(name)
            .ok_or_else(|| ControlError::NotFound(name.to_string()))?;
        if pod.backing == Backing::Host {
            let n = name.to_string();
            self.blocking(move |rt| {
                if start {
                    rt.start_server(&n)
                } else {
                    rt.stop_server(&n)
                }
            })
            .await?;
        }
        self.update(name, |p| {
            p.ready = start;
            if start {
                p.restart_count += 1;
            }
        })
    }

    pub(crate) fn api_log(&self) -> Vec<ApiRequest> {
        lock(&self.api_log).clone()
    }

    pub(crate) fn clear_api_log(&self) {
        lock(&self.api_log).clear();
    }

    pub(crate) fn log_api(&self, request: ApiRequest) {
        lock(&self.api_log).push(request);
    }

    pub(crate) fn exec_log(&self) -> Vec<ExecRecord> {
        lock(&self.exec_log).clone()
    }

    pub(crate) fn clear_exec_log(&self) {
        lock(&self.exec_log).clear();
    }

    pub(crate) fn log_exec(&self, mut record: ExecRecord) -> u64 {
        record.id = self.next_exec.fetch_add(1, Ordering::Relaxed);
        let id = record.id;
        lock(&self.exec_log).push(record);
        id
    }

    pub(crate) fn keeps_dropped_execs(&self) -> bool {
        self.keep_dropped_execs.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn set_keep_dropped_execs(&self, keep: bool) {
        self.keep_dropped_execs
            .store(keep, std::sync::atomic::Ordering::SeqCst);
    }

    /// The exec setup delays (`PUT /sandbox/exec-setup`).
    pub(crate) fn exec_setup(&self) -> ExecSetup {
        lock(&self.exec_setup).clone()
    }

    /// Sets the delay of every pod's execs (`pod` `None`), or of one pod's, which then wins.
    pub(crate) fn set_exec_setup(&self, pod: Option<String>, ms: u64) {
        let mut setup = lock(&self.exec_setup);
        match pod {
            None => setup.all_ms = ms,
            Some(pod) => {
                setup.pods.insert(pod, ms);
            }
        }
    }

    /// How long an exec into `pod` waits before its process starts.
    pub(crate) fn exec_setup_for(&self, pod: &str) -> Duration {
        let setup = lock(&self.exec_setup);
        Duration::from_millis(setup.pods.get(pod).copied().unwrap_or(setup.all_ms))
    }

    pub(crate) fn update_exec(&self, id: u64, f: impl FnOnce(&mut ExecRecord)) {
        if let Some(r) = lock(&self.exec_log).iter_mut().find(|r| r.id == id) {
            f(r);
        }
    }

    pub(crate) fn arm_fault(&self, fault: Fault) {
        lock(&self.faults).arm(fault);
    }

    pub(crate) fn clear_faults(&self) {
        lock(&self.faults).clear();
    }

    pub(crate) fn faults(&self) -> MutexGuard<'_, Faults> {
        lock(&self.faults)
    }
}
