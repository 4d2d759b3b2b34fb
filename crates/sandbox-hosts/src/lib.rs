//! Test bed only: runs real ClickHouse 18.16 servers, one per network namespace, plus one ZooKeeper,
//! so the sandbox's Kubernetes API can expose them as pods.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

pub struct HostsOptions {
    /// 1..=200: picks the subnet 10.250.<instance>.0/24 and prefixes every name (bridge `chsbx<instance>`,
    /// netns `chsbx<instance>-<host>`), so several sandboxes can run at once.
    pub instance: u8,
    /// Where configs, data, logs and pid files go; created if missing.
    pub run_dir: PathBuf,
    /// remote_servers cluster name covering every host.
    pub cluster_name: String,
    /// Password of ClickHouse user `default` and of user `writer`.
    pub default_password: String,
    pub writer_password: String,
}

#[derive(Clone, Debug)]
pub struct HostInfo {
    pub name: String,
    pub ip: Ipv4Addr,
    pub netns: String,
    pub server_running: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error("not implemented yet: {0}")]
    NotImplemented(&'static str),
}

pub struct Hosts {
    instance: u8,
}

impl Hosts {
    pub fn start(opts: HostsOptions, host_names: &[String]) -> Result<Hosts, HostsError> {
        let _ = (opts, host_names);
        Err(HostsError::NotImplemented("start"))
    }
    pub fn add(&mut self, name: &str) -> Result<HostInfo, HostsError> {
        let _ = name;
        Err(HostsError::NotImplemented("add"))
    }
    pub fn remove(&mut self, name: &str) -> Result<(), HostsError> {
        let _ = name;
        Err(HostsError::NotImplemented("remove"))
    }
    pub fn wipe_and_restart(&mut self, name: &str) -> Result<(), HostsError> {
        let _ = name;
        Err(HostsError::NotImplemented("wipe_and_restart"))
    }
    pub fn stop_server(&mut self, name: &str) -> Result<(), HostsError> {
        let _ = name;
        Err(HostsError::NotImplemented("stop_server"))
    }
    pub fn start_server(&mut self, name: &str) -> Result<(), HostsError> {
        let _ = name;
        Err(HostsError::NotImplemented("start_server"))
    }
    pub fn command(
        &self,
        name: &str,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<std::process::Command, HostsError> {
        let _ = (name, argv, env);
        Err(HostsError::NotImplemented("command"))
    }
    pub fn hosts(&self) -> Vec<HostInfo> {
        Vec::new()
    }
    pub fn zookeeper_address(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::new(10, 250, self.instance, 1), 2181))
    }
    pub fn shutdown(self) -> Result<(), HostsError> {
        Ok(())
    }
}

pub fn cleanup_stale(run_dir: &Path) -> Result<(), HostsError> {
    let _ = run_dir;
    Ok(())
}
