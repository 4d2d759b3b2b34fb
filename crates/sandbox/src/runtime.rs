//! Where a pod's processes run. The API server only needs "give me a command for this pod" and
//! lifecycle hooks; the ClickHouse hosts implement it for real, `LocalProcess` for protocol tests.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use clickhouse_schema_sandbox_hosts::{Engine, HostSpec, Hosts, HostsOptions};

/// A pod runtime failure, carried as its message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RuntimeError(pub String);

/// Blocking by design (the hosts API is): callers wrap it in `spawn_blocking`.
pub trait PodRuntime: Send + Sync + 'static {
    /// A command that runs `argv` inside the pod with exactly `env`.
    fn command(&self, pod: &str, argv: &[String], env: &[(String, String)]) -> Result<Command, RuntimeError>;
    /// Creates the pod's backing machine in its place of the cluster; returns its IP.
    fn add(&self, pod: &HostSpec) -> Result<Ipv4Addr, RuntimeError>;
    /// Deletes the pod's backing machine with its data.
    fn remove(&self, pod: &str) -> Result<(), RuntimeError>;
    /// Same name and IP, empty data: what a replaced pod looks like from inside.
    fn wipe_and_restart(&self, pod: &str) -> Result<(), RuntimeError>;
    /// Stops the pod's server process; its data stays.
    fn stop_server(&self, pod: &str) -> Result<(), RuntimeError>;
    /// Starts the pod's server again; returns once it answers.
    fn start_server(&self, pod: &str) -> Result<(), RuntimeError>;
    /// Freezes (`true`) or resumes the ZooKeeper the servers share.
    fn pause_zookeeper(&self, paused: bool) -> Result<(), RuntimeError>;
    /// The IP of the pod's backing machine, if the runtime keeps track of it (`LocalProcess` does not).
    fn ip(&self, pod: &str) -> Option<Ipv4Addr>;
    /// Stops everything the runtime started; later calls do nothing.
    fn shutdown(&self) -> Result<(), RuntimeError>;
}

/// Runs exec commands on this machine. Pods get decorative IPs; nothing listens there.
#[derive(Default)]
pub struct LocalProcess {
    next_ip: AtomicU8,
}

impl LocalProcess {
    /// Hands out 10.244.0.10, .11, ... (`default()` would start at .0).
    pub fn new() -> Self {
        Self {
            next_ip: AtomicU8::new(10),
        }
    }
}

pub(crate) fn local_command(argv: &[String], env: &[(String, String)]) -> Result<Command, RuntimeError> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| RuntimeError("empty command".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(args).env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    Ok(cmd)
}

impl PodRuntime for LocalProcess {
    fn command(
        &self,
        _pod: &str,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<Command, RuntimeError> {
        local_command(argv, env)
    }
    fn add(&self, _pod: &HostSpec) -> Result<Ipv4Addr, RuntimeError> {
        Ok(Ipv4Addr::new(
            10,
            244,
            0,
            self.next_ip.fetch_add(1, Ordering::Relaxed),
        ))
    }
    fn remove(&self, _pod: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    fn wipe_and_restart(&self, _pod: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    fn stop_server(&self, _pod: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    fn start_server(&self, _pod: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    fn pause_zookeeper(&self, _paused: bool) -> Result<(), RuntimeError> {
        Err(RuntimeError("the local runtime has no ZooKeeper".into()))
    }
    fn ip(&self, _pod: &str) -> Option<Ipv4Addr> {
        None
    }
    fn shutdown(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
}

/// Real ClickHouse servers, one network namespace per pod (crate `clickhouse-schema-sandbox-hosts`).
pub(crate) struct HostsRuntime {
    hosts: Mutex<Option<Hosts>>,
    instance: u8,
    reclaimed: Vec<String>,
}

pub(crate) struct HostsConfig {
    /// `None`: the lowest instance no running sandbox holds.
    pub(crate) instance: Option<u8>,
    pub(crate) run_dir: PathBuf,
    pub(crate) cluster_name: String,
    pub(crate) default_password: String,
    pub(crate) writer_password: String,
    pub(crate) engine: Engine,
}

fn err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError(e.to_string())
}

impl HostsRuntime {
    pub(crate) fn start(config: HostsConfig, pods: &[HostSpec]) -> Result<Self, RuntimeError> {
        let hosts = Hosts::start(
            HostsOptions {
                instance: config.instance,
                run_dir: config.run_dir,
                cluster_name: config.cluster_name,
                default_password: config.default_password,
                writer_password: config.writer_password,
                engine: config.engine,
            },
            pods,
        )
        .map_err(err)?;
        Ok(Self {
            instance: hosts.instance(),
            reclaimed: hosts.reclaimed().to_vec(),
            hosts: Mutex::new(Some(hosts)),
        })
    }

    /// The instance the hosts hold.
    pub(crate) fn instance(&self) -> u8 {
        self.instance
    }

    /// What a crashed sandbox had left on the instance and the start removed.
    pub(crate) fn reclaimed(&self) -> &[String] {
        &self.reclaimed
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Hosts) -> Result<T, clickhouse_schema_sandbox_hosts::HostsError>,
    ) -> Result<T, RuntimeError> {
        let mut guard = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let hosts = guard
            .as_mut()
            .ok_or_else(|| RuntimeError("hosts are shut down".into()))?;
        f(hosts).map_err(err)
    }
}

impl PodRuntime for HostsRuntime {
    fn command(&self, pod: &str, argv: &[String], env: &[(String, String)]) -> Result<Command, RuntimeError> {
        self.with(|h| h.command(pod, argv, env))
    }
    fn add(&self, pod: &HostSpec) -> Result<Ipv4Addr, RuntimeError> {
        self.with(|h| h.add(pod)).map(|info| info.ip)
    }
    fn remove(&self, pod: &str) -> Result<(), RuntimeError> {
        self.with(|h| h.remove(pod))
    }
    fn wipe_and_restart(&self, pod: &str) -> Result<(), RuntimeError> {
        self.with(|h| h.wipe_and_restart(pod))
    }
    fn stop_server(&self, pod: &str) -> Result<(), RuntimeError> {
        self.with(|h| h.stop_server(pod))
    }
    fn start_server(&self, pod: &str) -> Result<(), RuntimeError> {
        self.with(|h| h.start_server(pod))
    }
    fn pause_zookeeper(&self, paused: bool) -> Result<(), RuntimeError> {
        self.with(|h| {
            if paused {
                h.pause_zookeeper()
            } else {
                h.resume_zookeeper()
            }
        })
    }
    fn ip(&self, pod: &str) -> Option<Ipv4Addr> {
        self.with(|h| Ok(h.hosts()))
            .ok()?
            .into_iter()
            .find(|i| i.name == pod)
            .map(|i| i.ip)
    }
    fn shutdown(&self) -> Result<(), RuntimeError> {
        let hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner()).take();
        match hosts {
            Some(h) => h.shutdown().map_err(err),
            None => Ok(()),
        }
    }
}
