//! The pod objects the API serves. Only what clients and the product read is modelled, but every
//! field that is there has the apiserver's shape (uid, resourceVersion, conditions, ...).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `status.phase`, the apiserver's five values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Accepted, containers not running yet; exec fails with "container not found".
    Pending,
    /// Containers running: the only phase exec works in.
    Running,
    /// Every container exited 0 and stays down; exec is refused.
    Succeeded,
    /// A container exited with an error and stays down; exec is refused.
    Failed,
    /// The node lost contact. Never set by the sandbox; kept so the enum has the apiserver's values.
    Unknown,
}

impl Phase {
    /// The API's spelling, which kubectl also shows as STATUS.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
        }
    }
}

/// A container of the pod spec; only what exec and the product look at is modelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// What exec's `container` parameter names; `clickhouse` also gets the tcp/http ports in the spec.
    pub name: String,
    /// Shown in spec and status only: exec runs on the pod's host whatever the image says.
    pub image: String,
    /// The container's `env` in the pod spec; exec processes get exactly these (plus the image's
    /// PATH/HOME/HOSTNAME, which a real container also has but the spec does not show).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// What the image has besides ClickHouse, which decides what an exec in it can start.
    #[serde(default)]
    pub userland: Userland,
}

/// The programs a container's image has besides ClickHouse's own (`exec.rs` acts on it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Userland {
    /// A shell and GNU tools (`sh`, `timeout -k`, `head`, `sed`): the Ubuntu-based images.
    #[default]
    #[serde(rename = "standard")]
    Standard,
    /// Only ClickHouse's programs, no shell: the `-distroless` tags (25.8 and later). An exec of
    /// any other program fails as the container runtime fails it (`executable file not found`).
    #[serde(rename = "distroless")]
    Distroless,
    /// BusyBox before 1.35 (Alpine images before 3.16): its `timeout` refuses `-k`.
    #[serde(rename = "busybox-1.34")]
    Busybox134,
}

/// How a pod's exec processes run: on a ClickHouse host of the runtime, or on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backing {
    /// A host of the runtime: its own network namespace and ClickHouse server.
    Host,
    /// No server: exec runs as a process on this machine.
    Local,
}

/// A pod as the sandbox keeps it; `to_json` renders the apiserver's object from it.
#[derive(Debug, Clone, Serialize)]
pub struct Pod {
    /// `metadata.name`; also its host's name and the HOSTNAME its exec processes see.
    pub name: String,
    /// `metadata.namespace`: requests for another namespace do not see the pod.
    pub namespace: String,
    /// `metadata.uid`, new on every add and replace: how a client tells a replaced pod from the old one.
    pub uid: String,
    /// `metadata.resourceVersion`, from one counter shared by all pods and bumped on every change.
    pub resource_version: u64,
    /// `creationTimestamp`, also the containers' start time.
    #[serde(skip)]
    pub created: SystemTime,
    /// `metadata.labels`, what label selectors match.
    pub labels: BTreeMap<String, String>,
    /// The ClickHouse shard its server belongs to (0-based); `None` for a pod without a server. Kept
    /// apart from the labels, which a test may change.
    pub shard: Option<u32>,
    /// `deletionTimestamp`: set while the pod is Terminating.
    #[serde(skip)]
    pub deletion: Option<SystemTime>,
    /// `status.phase`.
    pub phase: Phase,
    /// The Ready and ContainersReady conditions, which only hold while the phase is Running.
    pub ready: bool,
    /// `spec.containers`; exec runs in the one the request names, or in the only one.
    pub containers: Vec<Container>,
    /// `status.podIP`: the host's address, or a decorative 10.244.x.x one for pods without a host.
    pub ip: Option<Ipv4Addr>,
    /// Where its exec processes run.
    pub backing: Backing,
    /// Every container's `restartCount`: one more each time its server is started again.
    pub restart_count: u32,
}

/// A `metav1.Time` as the apiserver writes it: RFC 3339, whole seconds, UTC.
pub(crate) fn ts(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl Pod {
    /// Whether a deletionTimestamp is set (state `terminating`); the pod is still listed and running.
    pub fn is_terminating(&self) -> bool {
        self.deletion.is_some()
    }

    /// The `v1` Pod object the apiserver would return, with conditions and container statuses.
    pub fn to_json(&self) -> Value {
        let created = ts(self.created);
        let ready = if self.ready && self.phase == Phase::Running {
            "True"
        } else {
            "False"
        };
        let mut metadata = json!({
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "resourceVersion": self.resource_version.to_string(),
            "creationTimestamp": created,
            "labels": self.labels,
        });
        if let Some(d) = self.deletion {
            metadata["deletionTimestamp"] = json!(ts(d));
            metadata["deletionGracePeriodSeconds"] = json!(30);
        }
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "image": c.image,
                    "env": c.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
                    "ports": if c.name == "clickhouse" {
                        json!([{"name": "tcp", "containerPort": 9000, "protocol": "TCP"},
                               {"name": "http", "containerPort": 8123, "protocol": "TCP"}])
                    } else { json!([]) },
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                })
            })
            .collect();
        let container_statuses: Vec<Value> = self
            .containers
            .iter()
            .map(|c| {
                let state = match self.phase {
                    Phase::Running => json!({"running": {"startedAt": created}}),
                    Phase::Pending => json!({"waiting": {"reason": "ContainerCreating"}}),
                    Phase::Succeeded | Phase::Failed => json!({"terminated": {
                        "exitCode": if self.phase == Phase::Succeeded { 0 } else { 1 },
                        "reason": if self.phase == Phase::Succeeded { "Completed" } else { "Error" },
                        "startedAt": created, "finishedAt": created}}),
                    Phase::Unknown => json!({}),
                };
                json!({
                    "name": c.name,
                    "image": c.image,
                    "imageID": format!("docker-pullable://{}", c.image),
                    "containerID": format!("containerd://{}", self.uid.replace('-', "")),
                    "ready": ready == "True",
                    "started": self.phase == Phase::Running,
                    "restartCount": self.restart_count,
                    "state": state,
                    "lastState": {},
                })
            })
            .collect();
        let condition = |t: &str, s: &str| json!({"type": t, "status": s, "lastProbeTime": null, "lastTransitionTime": created});
        let scheduled = if self.phase == Phase::Pending && self.ip.is_none() {
            "False"
        } else {
            "True"
        };
        let mut status = json!({
            "phase": self.phase.as_str(),
            "conditions": [
                condition("PodScheduled", scheduled),
                condition("Initialized", "True"),
                condition("ContainersReady", ready),
                condition("Ready", ready),
            ],
            "hostIP": "10.250.0.1",
            "startTime": created,
            "containerStatuses": container_statuses,
            "qosClass": "BestEffort",
        });
        if let Some(ip) = self.ip {
            status["podIP"] = json!(ip.to_string());
            status["podIPs"] = json!([{"ip": ip.to_string()}]);
        }
        json!({
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": metadata,
            "spec": {
                "containers": containers,
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30,
                "dnsPolicy": "ClusterFirst",
                "nodeName": "sandbox-node",
                "hostname": self.name,
                "schedulerName": "default-scheduler",
            },
            "status": status,
        })
    }

    /// Field values for field selectors.
    pub fn field(&self, field: &str) -> String {
        match field {
            "metadata.name" => self.name.clone(),
            "metadata.namespace" => self.namespace.clone(),
            "status.phase" => self.phase.as_str().to_string(),
            "status.podIP" => self.ip.map(|i| i.to_string()).unwrap_or_default(),
            "spec.nodeName" => "sandbox-node".to_string(),
            _ => String::new(),
        }
    }

    /// The STATUS column kubectl shows.
    pub fn display_status(&self) -> &'static str {
        if self.is_terminating() {
            "Terminating"
        } else {
            self.phase.as_str()
        }
    }
}

pub(crate) fn pod_list(items: &[Pod], resource_version: u64) -> Value {
    json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "items": items.iter().map(Pod::to_json).collect::<Vec<_>>(),
    })
}

/// The AGE column of server-side printing.
pub(crate) fn age(created: SystemTime) -> String {
    let secs = SystemTime::now()
        .duration_since(created)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h", s / 3600),
    }
}

/// The server-side printing kubectl asks for with `Accept: application/json;as=Table;...`.
pub(crate) fn pod_table(items: &[Pod], resource_version: u64, include_object: &str) -> Value {
    use crate::table::{AGE, Column, NAME, render, row};
    let rows: Vec<Value> = items
        .iter()
        .map(|p| {
            let ready = usize::from(p.ready && p.phase == Phase::Running) * p.containers.len();
            let cells = json!([
                p.name,
                format!("{ready}/{}", p.containers.len()),
                p.display_status(),
                p.restart_count,
                age(p.created)
            ]);
            row(cells, &p.to_json(), include_object)
        })
        .collect();
    let column = |name, description| Column {
        name,
        format: "",
        description,
    };
    render(
        &[
            NAME,
            column(
                "Ready",
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            column("Status", "The aggregate status of the containers in this pod."),
            column(
                "Restarts",
                "The number of times the containers in this pod have been restarted.",
            ),
            AGE,
        ],
        rows,
        resource_version,
    )
}
