//! Test bed only: runs real ClickHouse 18.16 servers, each in its own network and UTS namespace (a
//! "pod" with its own address and hostname), plus one ZooKeeper, so the sandbox's Kubernetes API can
//! expose them as pods. Hosts are laid out in shards ([`HostSpec::shard`]): `remote_servers` lists each
//! shard's replicas by name, and every server's `{shard}` and `{replica}` macros say where it is.
//!
//! Layout under `run_dir`: `zookeeper/` (zoo.cfg, data, log), `hosts/<name>/` (config.xml, users.xml,
//! config.d/remote_servers.xml, data/, tmp/, log/, stderr.log), `pids/<what>.pid` for every process
//! started, and `netns.list` naming every bridge, namespace and veth created. The last two are what
//! [`cleanup_stale`] acts on, and all it acts on. When the directory itself is gone, the next sandbox
//! on the same instance finds a crashed one's leftovers by name instead (`instance.rs`).
//!
//! Addresses: the bridge is 10.250.<instance>.1, hosts get .10, .11, ... in creation order and an address
//! is never reused within one `Hosts`: a ClickHouse DDL queue entry names hosts by address, and a new host
//! on a removed host's address would replay DDL that was meant for the old one.

mod cleanup;
mod clickhouse;
mod error;
mod identity;
mod instance;
mod modern;
mod netns;
mod pids;
mod zookeeper;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub use error::HostsError;
use error::IoContext;
pub use instance::{Reservation, reserve as reserve_instance};

use clickhouse::ServerPaths;
use zookeeper::ZooKeeperPaths;

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
const FIRST_HOST_OCTET: u16 = 10;
const LAST_HOST_OCTET: u16 = 254;
const MAX_HOST_NAME: usize = 200;
/// A Linux hostname's limit, and the length Kubernetes truncates a pod's hostname to.
const MAX_HOSTNAME: usize = 63;
const ZOOKEEPER_PID: &str = "zookeeper";

/// What `Hosts::start` needs besides the host names.
pub struct HostsOptions {
    /// 1..=200: picks the subnet 10.250.<instance>.0/24 and prefixes every name (bridge `chsbx<instance>`,
    /// netns `chsbx<instance>-<host>`), so several sandboxes can run at once (tests run their own).
    /// `None`: the lowest one no running sandbox holds. Whatever a crashed sandbox left on the instance
    /// is removed first ([`Hosts::reclaimed`] lists it).
    pub instance: Option<u8>,
    /// Where configs, data, logs and pid files go; created if missing. Data left there by an earlier run
    /// is kept (a restarted sandbox finds its tables again); use a fresh directory for a fresh sandbox.
    pub run_dir: PathBuf,
    /// remote_servers cluster name covering every host (default sandbox uses "sandbox").
    pub cluster_name: String,
    /// Password of ClickHouse user `default`.
    pub default_password: String,
    /// Password of ClickHouse user `writer`.
    pub writer_password: String,
    /// Which ClickHouse every host runs.
    pub engine: Engine,
}

/// The ClickHouse a host runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// A clickhouse-server 18.16 process (Debian's package) per host.
    #[default]
    Server1816,
    /// ClickHouse 26.9 in-process (chdb-core): no server process; the pod's `clickhouse-client` is a
    /// stand-in that runs each call on the pod's own data directory (`modern.rs`).
    Modern,
}

impl Engine {
    /// The version it is known by: `18.16` or `26.9`.
    pub fn version(self) -> &'static str {
        match self {
            Engine::Server1816 => "18.16",
            Engine::Modern => "26.9",
        }
    }
}

/// One host to start or add: the pod it backs and its place in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpec {
    /// The pod name: the host's hostname, and the name of its directory and namespaces.
    pub name: String,
    /// The name the cluster knows it by: `remote_servers` lists it, its `{replica}` macro and
    /// interserver host are it, and every host resolves it (the ClickHouse operator's per-replica
    /// Service). May equal `name`.
    pub service: String,
    /// Its shard, 0-based: the `{shard}` macro, and the `<shard>` of `remote_servers` it is listed in.
    pub shard: u32,
}

impl HostSpec {
    /// A host of shard 0 that the cluster knows by its own name.
    pub fn named(name: &str) -> HostSpec {
        HostSpec {
            name: name.to_string(),
            service: name.to_string(),
            shard: 0,
        }
    }
}

/// A snapshot of one host, as `add` and `hosts` report it.
#[derive(Clone, Debug)]
pub struct HostInfo {
    /// The name it was started or added with (the pod name).
    pub name: String,
    /// Its service name (see [`HostSpec::service`]).
    pub service: String,
    /// Its shard (see [`HostSpec::shard`]).
    pub shard: u32,
    /// Its address in 10.250.<instance>.0/24, fixed for its lifetime (also across `wipe_and_restart`).
    pub ip: Ipv4Addr,
    /// Its network namespace, `chsbx<instance>-<name>`: `ip netns exec` it to reach the server.
    pub netns: String,
    /// Whether its clickhouse-server process is alive (false after `stop_server` or a crash).
    pub server_running: bool,
}

struct Host {
    name: String,
    service: String,
    shard: u32,
    octet: u8,
    netns: String,
    veth: String,
    paths: ServerPaths,
    server: Option<Child>,
    engine: Engine,
}

impl Host {
    fn spec(&self) -> HostSpec {
        HostSpec {
            name: self.name.clone(),
            service: self.service.clone(),
            shard: self.shard,
        }
    }

    fn pid_name(&self) -> String {
        format!("server-{}", self.name)
    }

    fn is_running(&self) -> bool {
        match self.engine {
            Engine::Server1816 => self
                .server
                .as_ref()
                .is_some_and(|c| pids::is_alive(c.id() as i32)),
            Engine::Modern => modern::is_running(&self.paths),
        }
    }

    /// The pod's `clickhouse-client`, as its PATH finds it.
    fn client(&self) -> PathBuf {
        match self.engine {
            Engine::Server1816 => PathBuf::from("clickhouse-client"),
            Engine::Modern => modern::client(&self.paths),
        }
    }
}

/// One running sandbox: a bridge, ZooKeeper, and a network namespace with a clickhouse-server per
/// host. Dropping it tears everything down (best effort); `shutdown` does the same and reports errors.
pub struct Hosts {
    instance: u8,
    reclaimed: Vec<String>,
    cluster_name: String,
    default_password: String,
    writer_password: String,
    engine: Engine,
    /// The engine's Python and the stand-in client, for a modern sandbox.
    modern: Option<(PathBuf, PathBuf)>,
    records: netns::Records,
    pid_dir: pids::PidDir,
    zookeeper_paths: ZooKeeperPaths,
    run_dir: PathBuf,
    zookeeper: Option<Child>,
    zookeeper_paused: bool,
    hosts: Vec<Host>,
    next_octet: u16,
    torn_down: bool,
    // Declared last so it is released after Drop has torn everything down.
    _instance_lock: instance::InstanceLock,
}

impl Hosts {
    /// Bridge + ZooKeeper (first, wait for `srvr` to report `Mode:`) + one netns/veth/clickhouse-server per
    /// name; returns once every server answers `SELECT 1` (via clickhouse-client in its netns with the
    /// password). On failure everything already created is torn down again. Before anything is
    /// created it locks its instance and removes what a crashed sandbox left there (`instance.rs`).
    pub fn start(opts: HostsOptions, specs: &[HostSpec]) -> Result<Hosts, HostsError> {
        validate_cluster_name(&opts.cluster_name)?;
        for (i, spec) in specs.iter().enumerate() {
            validate_spec(spec)?;
            if let Some(taken) = specs[..i].iter().find_map(|other| clash(other, spec)) {
                return Err(HostsError::DuplicateHost(taken));
            }
        }
        std::fs::create_dir_all(&opts.run_dir).context(|| format!("creating {}", opts.run_dir.display()))?;
        // Canonical, because recorded PIDs are recognised by this path in their command line.
        let run_dir = opts
            .run_dir
            .canonicalize()
            .context(|| format!("resolving {}", opts.run_dir.display()))?;
        cleanup_stale(&run_dir)?;
        let modern = match opts.engine {
            Engine::Server1816 => None,
            Engine::Modern => Some((modern::python()?, modern::install_client(&run_dir)?)),
        };
        let lock = instance::claim(opts.instance)?;
        let records = netns::Records::new(&run_dir);
        let reclaimed = instance::reclaim(&lock, &records)?;

        let mut hosts = Hosts {
            instance: lock.instance,
            reclaimed,
            cluster_name: opts.cluster_name,
            default_password: opts.default_password,
            writer_password: opts.writer_password,
            engine: opts.engine,
            modern,
            records,
            pid_dir: pids::PidDir::new(&run_dir),
            zookeeper_paths: ZooKeeperPaths::new(&run_dir),
            run_dir,
            zookeeper: None,
            zookeeper_paused: false,
            hosts: Vec::new(),
            next_octet: FIRST_HOST_OCTET,
            torn_down: false,
            _instance_lock: lock,
        };
        // From here on, an early return drops `hosts`, and Drop tears down whatever was created.
        netns::create_bridge(&hosts.records, hosts.instance)?;
        let zk = zookeeper::spawn(&hosts.zookeeper_paths, hosts.zookeeper_address())?;
        hosts.pid_dir.record(ZOOKEEPER_PID, zk.id())?;
        hosts.zookeeper = Some(zk);

        // Namespaces are set up while the JVM boots.
        for spec in specs {
            hosts.create_host(spec)?;
        }
        hosts.rewrite_clusters()?;
        hosts.wait_for_zookeeper()?;
        for i in 0..hosts.hosts.len() {
            hosts.spawn_server(i)?;
        }
        hosts.wait_ready(&(0..hosts.hosts.len()).collect::<Vec<_>>())?;
        Ok(hosts)
    }

    /// New namespaces + server with EMPTY data in the spec's shard; every host's remote_servers and
    /// hosts file are rewritten to include it (and the clusters reloaded at once with `SYSTEM RELOAD
    /// CONFIG`). Returns when it answers.
    pub fn add(&mut self, spec: &HostSpec) -> Result<HostInfo, HostsError> {
        validate_spec(spec)?;
        if let Some(taken) = self.hosts.iter().find_map(|h| clash(&h.spec(), spec)) {
            return Err(HostsError::DuplicateHost(taken));
        }
        let result = self.add_inner(spec);
        if result.is_err() && self.index_of(&spec.name).is_ok() {
            let _ = self.remove(&spec.name);
        }
        result
    }

    fn add_inner(&mut self, spec: &HostSpec) -> Result<HostInfo, HostsError> {
        let name = spec.name.as_str();
        self.create_host(spec)?;
        let i = self.hosts.len() - 1;
        // A leftover data dir from an earlier host of the same name would not be an empty disk.
        wipe_data(&self.hosts[i].paths)?;
        self.rewrite_clusters()?;
        self.spawn_server(i)?;
        self.reload_clusters(Some(name));
        self.wait_ready(&[i])?;
        Ok(self.info(&self.hosts[i]))
    }

    /// Stop its server, delete its namespaces, veth, hosts file and its whole directory (data, config,
    /// logs); the cluster config and hosts files of the other hosts are rewritten without it. Its
    /// address is not handed out again.
    pub fn remove(&mut self, name: &str) -> Result<(), HostsError> {
        let i = self.index_of(name)?;
        self.stop_at(i);
        let host = self.hosts.remove(i);
        identity::delete_uts(&self.records, &host.netns)?;
        identity::delete_etc(&self.records, &host.netns)?;
        netns::delete_host(&self.records, &host.netns, &host.veth)?;
        if host.paths.dir.exists() {
            std::fs::remove_dir_all(&host.paths.dir)
                .context(|| format!("deleting {}", host.paths.dir.display()))?;
        }
        self.rewrite_clusters()?;
        self.reload_clusters(None);
        Ok(())
    }

    /// Pod replacement: stop the server, wipe its data dir (fresh empty disk), start again; same name and
    /// IP. Returns when it answers. ZooKeeper keeps whatever the old incarnation registered there, as it
    /// would in Kubernetes.
    pub fn wipe_and_restart(&mut self, name: &str) -> Result<(), HostsError> {
        let i = self.index_of(name)?;
        self.stop_at(i);
        wipe_data(&self.hosts[i].paths)?;
        self.write_server_config(i)?;
        self.spawn_server(i)?;
        self.wait_ready(&[i])
    }

    /// Stop only the server process (data kept), for "server down" tests. Idempotent.
    pub fn stop_server(&mut self, name: &str) -> Result<(), HostsError> {
        let i = self.index_of(name)?;
        self.stop_at(i);
        Ok(())
    }

    /// Start the server process again (data kept); returns when it answers. A running server is left
    /// alone.
    pub fn start_server(&mut self, name: &str) -> Result<(), HostsError> {
        let i = self.index_of(name)?;
        if !self.hosts[i].is_running() {
            self.stop_at(i); // reaps a server that died on its own
            self.write_server_config(i)?;
            self.spawn_server(i)?;
        }
        self.wait_ready(&[i])
    }

    /// A command that runs `argv` inside the host's network and UTS namespaces with EXACTLY `env` (plus
    /// a sane PATH, which `env` may override), like a container process: `ip netns exec <ns> nsenter
    /// --uts=<file> -- argv...` with that environment, working directory `/`. The caller spawns it,
    /// wires stdin/stdout/stderr and reads the exit status. argv[0] is e.g. `sh`.
    pub fn command(
        &self,
        name: &str,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<Command, HostsError> {
        let host = &self.hosts[self.index_of(name)?];
        let Some(program) = argv.first() else {
            return Err(HostsError::InvalidOptions(
                "command needs at least argv[0]".into(),
            ));
        };
        // A first word containing '=' reads as an assignment, not a program.
        if program.is_empty() || program.contains('=') {
            return Err(HostsError::InvalidOptions(format!(
                "argv[0] {program:?} is not a program name"
            )));
        }
        if let Some((key, _)) = env
            .iter()
            .find(|(k, _)| k.is_empty() || k.contains('=') || k.contains('\0'))
        {
            return Err(HostsError::InvalidOptions(format!(
                "environment variable name {key:?} is invalid"
            )));
        }
        // The environment goes in the process environment, which `ip netns
        // exec` hands on unchanged, never in argv: like a container runtime,
        // the test bed must not show an env value (a password) in any
        // process's command line, or tests that look for one there could not
        // tell the product's leaks from their own.
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &host.netns])
            .args(identity::enter_uts(&host.netns))
            .args(argv)
            .env_clear()
            .env("PATH", clickhouse::SANE_PATH)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir("/");
        if host.engine == Engine::Modern {
            // Its clickhouse-client is the stand-in, first on whatever PATH the image gives, as an
            // image whose client lives in a directory of its own.
            let path = env
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map_or(clickhouse::SANE_PATH, |(_, v)| v.as_str());
            cmd.env(
                "PATH",
                format!("{}:{path}", modern::bin_dir(&host.paths).display()),
            );
        }
        Ok(cmd)
    }

    /// Freezes ZooKeeper (SIGSTOP): its connections stay open and nothing answers, as when it stalls
    /// on a disk or a long pause, so ON CLUSTER DDL and replication wait. Sessions outlive a pause
    /// shorter than their 30 s timeout. [`Hosts::resume_zookeeper`] undoes it; shutdown resumes it
    /// first.
    pub fn pause_zookeeper(&mut self) -> Result<(), HostsError> {
        self.signal_zookeeper(libc::SIGSTOP)?;
        self.zookeeper_paused = true;
        Ok(())
    }

    /// Lets a paused ZooKeeper run again (SIGCONT); harmless when it runs.
    pub fn resume_zookeeper(&mut self) -> Result<(), HostsError> {
        self.signal_zookeeper(libc::SIGCONT)?;
        self.zookeeper_paused = false;
        Ok(())
    }

    /// Whether ZooKeeper is paused.
    pub fn zookeeper_paused(&self) -> bool {
        self.zookeeper_paused
    }

    fn signal_zookeeper(&mut self, sig: libc::c_int) -> Result<(), HostsError> {
        let zk = self
            .zookeeper
            .as_ref()
            .filter(|zk| pids::is_alive(zk.id() as i32))
            .ok_or_else(|| HostsError::InvalidOptions("ZooKeeper is not running".into()))?;
        pids::signal(zk.id() as i32, sig);
        Ok(())
    }

    /// Every host, in creation order.
    pub fn hosts(&self) -> Vec<HostInfo> {
        self.hosts.iter().map(|h| self.info(h)).collect()
    }

    /// ZooKeeper's client address: the bridge's IP, which every host reaches from its namespace.
    pub fn zookeeper_address(&self) -> SocketAddr {
        SocketAddr::from((netns::bridge_ip(self.instance), zookeeper::CLIENT_PORT))
    }

    /// The instance this sandbox holds (see [`HostsOptions::instance`]).
    pub fn instance(&self) -> u8 {
        self.instance
    }

    /// What a crashed sandbox had left on this instance and `start` removed: one line per process
    /// group or name (`bridge chsbx1`, `netns chsbx1-a`, ...). Empty when the instance was clean.
    pub fn reclaimed(&self) -> &[String] {
        &self.reclaimed
    }

    /// Where this sandbox keeps its files (canonical form of `HostsOptions::run_dir`).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Stop every server and ZooKeeper, delete every netns, veth and the bridge. Also done on Drop (best
    /// effort). Data and logs stay under run_dir.
    pub fn shutdown(mut self) -> Result<(), HostsError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), HostsError> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        if self.zookeeper_paused {
            let _ = self.resume_zookeeper();
        }
        // Servers first, while ZooKeeper still answers, so they close their sessions cleanly.
        let mut servers: Vec<&mut Child> = self.hosts.iter_mut().filter_map(|h| h.server.as_mut()).collect();
        pids::stop_children(&mut servers, pids::STOP_GRACE);
        for host in &mut self.hosts {
            host.server = None;
            self.pid_dir.forget(&host.pid_name());
        }
        if let Some(mut zk) = self.zookeeper.take() {
            pids::stop_children(&mut [&mut zk], pids::STOP_GRACE);
            self.pid_dir.forget(ZOOKEEPER_PID);
        }
        // Only what was recorded: a name that existed before (another instance's bridge) is never ours.
        cleanup::delete_recorded(&self.records)
    }

    fn info(&self, host: &Host) -> HostInfo {
        HostInfo {
            name: host.name.clone(),
            service: host.service.clone(),
            shard: host.shard,
            ip: netns::host_ip(self.instance, host.octet),
            netns: host.netns.clone(),
            server_running: host.is_running(),
        }
    }

    fn index_of(&self, name: &str) -> Result<usize, HostsError> {
        self.hosts
            .iter()
            .position(|h| h.name == name)
            .ok_or_else(|| HostsError::UnknownHost(name.to_string()))
    }

    /// Namespaces, veth, hosts file and config for a new host; its server is not started yet.
    fn create_host(&mut self, spec: &HostSpec) -> Result<(), HostsError> {
        let name = spec.name.as_str();
        if self.next_octet > LAST_HOST_OCTET {
            return Err(HostsError::AddressesExhausted {
                subnet: format!("10.250.{}.0/24", self.instance),
            });
        }
        let octet = self.next_octet as u8;
        self.next_octet += 1;
        let host = Host {
            name: name.to_string(),
            service: spec.service.clone(),
            shard: spec.shard,
            octet,
            netns: netns::netns_name(self.instance, name),
            veth: netns::veth_name(self.instance, octet),
            paths: ServerPaths::new(&self.run_dir, name),
            server: None,
            engine: self.engine,
        };
        netns::check_host_free(self.instance, &host.netns, &host.veth)?;
        identity::check_free(&host.netns)?;
        let created = netns::create_host(
            &self.records,
            self.instance,
            &host.netns,
            &host.veth,
            netns::host_ip(self.instance, octet),
        )
        .and_then(|()| identity::create_uts(&self.records, &host.netns, name));
        // Tracked even when creation failed half-way, so removal/teardown deletes the remains.
        self.hosts.push(host);
        created?;
        self.write_server_config(self.hosts.len() - 1)
    }

    fn write_server_config(&self, i: usize) -> Result<(), HostsError> {
        let host = &self.hosts[i];
        let zk = self.zookeeper_address();
        let config = clickhouse::ServerConfig {
            service: &host.service,
            shard: host.shard,
            cluster: &self.cluster_name,
            zookeeper_ip: netns::bridge_ip(self.instance),
            zookeeper_port: zk.port(),
            default_password: &self.default_password,
            writer_password: &self.writer_password,
        };
        clickhouse::write_config(&host.paths, &config)?;
        if let (Engine::Modern, Some((python, script))) = (host.engine, &self.modern) {
            let names = [
                host.name.clone(),
                host.service.clone(),
                netns::host_ip(self.instance, host.octet).to_string(),
            ];
            let remote_servers = clickhouse::remote_servers_element(
                &self.cluster_name,
                &self.shards(),
                &self.default_password,
            );
            modern::write_pod(&host.paths, &config, &names, &remote_servers, python, script)?;
        }
        Ok(())
    }

    /// The cluster's shards, in shard order, each with its replicas' service names.
    fn shards(&self) -> Vec<(u32, Vec<&str>)> {
        let mut shards: Vec<(u32, Vec<&str>)> = Vec::new();
        for host in &self.hosts {
            match shards.iter_mut().find(|(shard, _)| *shard == host.shard) {
                Some((_, replicas)) => replicas.push(&host.service),
                None => shards.push((host.shard, vec![&host.service])),
            }
        }
        shards.sort_by_key(|(shard, _)| *shard);
        shards
    }

    /// Every host's remote_servers and hosts file, for the hosts there are now.
    fn rewrite_clusters(&self) -> Result<(), HostsError> {
        let shards = self.shards();
        let entries: Vec<identity::Entry<'_>> = self
            .hosts
            .iter()
            .map(|h| identity::Entry {
                ip: netns::host_ip(self.instance, h.octet),
                names: if h.service == h.name {
                    vec![&h.name]
                } else {
                    vec![&h.name, &h.service]
                },
            })
            .collect();
        for host in &self.hosts {
            clickhouse::write_remote_servers(
                &host.paths,
                &self.cluster_name,
                &shards,
                &self.default_password,
            )?;
            identity::write_hosts(&self.records, &host.netns, &entries)?;
        }
        // A modern pod's engine reads its cluster from its own config, at every call.
        for i in 0..self.hosts.len() {
            if self.hosts[i].engine == Engine::Modern && self.hosts[i].paths.dir.exists() {
                self.write_server_config(i)?;
            }
        }
        Ok(())
    }

    /// 18.16 would notice the rewritten file by itself within a few seconds; asking makes the new cluster
    /// effective before add/remove return. Best effort: a server that does not answer reads the file
    /// when it starts.
    fn reload_clusters(&self, except: Option<&str>) {
        let queries: Vec<_> = self
            .hosts
            .iter()
            // A modern pod has no cluster to reload (no distributed DDL, see modern.rs).
            .filter(|h| Some(h.name.as_str()) != except && h.is_running() && h.engine == Engine::Server1816)
            .map(|h| {
                clickhouse::spawn_query(
                    &h.netns,
                    &h.client(),
                    &self.default_password,
                    "SYSTEM RELOAD CONFIG",
                )
            })
            .collect();
        for query in queries {
            let _ = query.and_then(clickhouse::finish_query);
        }
    }

    fn spawn_server(&mut self, i: usize) -> Result<(), HostsError> {
        if self.hosts[i].engine == Engine::Modern {
            return modern::set_stopped(&self.hosts[i].paths, false);
        }
        let child = clickhouse::spawn(
            &self.hosts[i].netns,
            &identity::enter_uts(&self.hosts[i].netns),
            &self.hosts[i].paths,
        )?;
        let pid = child.id();
        self.hosts[i].server = Some(child);
        self.pid_dir.record(&self.hosts[i].pid_name(), pid)
    }

    fn stop_at(&mut self, i: usize) {
        let host = &mut self.hosts[i];
        if host.engine == Engine::Modern && host.paths.dir.exists() {
            let _ = modern::set_stopped(&host.paths, true);
        }
        if let Some(mut child) = host.server.take() {
            pids::stop_children(&mut [&mut child], pids::STOP_GRACE);
        }
        self.pid_dir.forget(&host.pid_name());
    }

    fn wait_for_zookeeper(&mut self) -> Result<(), HostsError> {
        let addr = self.zookeeper_address();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if zookeeper::is_serving(addr) {
                return Ok(());
            }
            let exited = match self.zookeeper.as_mut() {
                Some(zk) => zk.try_wait().ok().flatten().map(|s| s.to_string()),
                None => Some("was never started".into()),
            };
            let problem = match exited {
                Some(status) => Some(format!("exited during start-up ({status})")),
                None if Instant::now() >= deadline => Some(format!(
                    "did not report `Mode:` to `srvr` on {addr} within {} s",
                    READY_TIMEOUT.as_secs()
                )),
                None => None,
            };
            if let Some(problem) = problem {
                let paths = &self.zookeeper_paths;
                let log = if error::tail(&paths.log, 1) == "(no such file)" {
                    &paths.console
                } else {
                    &paths.log
                };
                return Err(HostsError::ZooKeeper {
                    problem,
                    log: log.display().to_string(),
                    log_tail: format!(
                        "{}\n--- tail of {} ---\n{}",
                        error::tail(log, 20),
                        paths.console.display(),
                        error::tail(&paths.console, 10)
                    ),
                });
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Polls all the given servers together, so parallel start-ups cost one start-up: a cheap HTTP
    /// `/ping` first, then the real check, `SELECT 1` through clickhouse-client with the password.
    fn wait_ready(&mut self, indices: &[usize]) -> Result<(), HostsError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut pending: Vec<usize> = indices.to_vec();
        let mut last_attempt = vec![String::from("no attempt yet"); self.hosts.len()];
        while !pending.is_empty() {
            let mut still = Vec::new();
            let mut answering = Vec::new();
            for &i in &pending {
                let host = &mut self.hosts[i];
                let exited = match (host.engine, host.server.as_mut()) {
                    // No process: the stand-in's `SELECT 1` below is the whole check.
                    (Engine::Modern, _) => None,
                    (_, Some(child)) => child.try_wait().ok().flatten().map(|s| s.to_string()),
                    (_, None) => Some("not started".into()),
                };
                if let Some(status) = exited {
                    let err = HostsError::Server {
                        host: host.name.clone(),
                        problem: format!("exited during start-up ({status})"),
                        log_tail: host.paths.log_tails(),
                    };
                    self.stop_at(i);
                    return Err(err);
                }
                if host.engine == Engine::Modern {
                    answering.push(i);
                    continue;
                }
                match clickhouse::http_ping(netns::host_ip(self.instance, host.octet)) {
                    Ok(()) => answering.push(i),
                    Err(e) => {
                        last_attempt[i] = e;
                        still.push(i);
                    }
                }
            }
            let queries: Vec<_> = answering
                .iter()
                .map(|&i| {
                    (
                        i,
                        clickhouse::spawn_query(
                            &self.hosts[i].netns,
                            &self.hosts[i].client(),
                            &self.default_password,
                            "SELECT 1",
                        ),
                    )
                })
                .collect();
            for (i, query) in queries {
                match query.and_then(clickhouse::finish_query) {
                    Ok(out) if out.trim() == "1" => {}
                    Ok(out) => {
                        last_attempt[i] = format!("SELECT 1 returned {out:?}");
                        still.push(i);
                    }
                    Err(e) => {
                        last_attempt[i] = format!("SELECT 1 failed: {e}");
                        still.push(i);
                    }
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let i = pending[0];
                let err = HostsError::Server {
                    host: self.hosts[i].name.clone(),
                    problem: format!(
                        "did not answer SELECT 1 within {} s (last attempt: {})",
                        READY_TIMEOUT.as_secs(),
                        last_attempt[i]
                    ),
                    log_tail: self.hosts[i].paths.log_tails(),
                };
                for &i in &pending {
                    self.stop_at(i);
                }
                return Err(err);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        Ok(())
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

fn wipe_data(paths: &ServerPaths) -> Result<(), HostsError> {
    for dir in [&paths.data, &paths.tmp] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).context(|| format!("wiping {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    }
    Ok(())
}

fn validate_spec(spec: &HostSpec) -> Result<(), HostsError> {
    validate_host_name(&spec.name)?;
    validate_host_name(&spec.service)?;
    // It becomes the host's hostname, as a pod's name does.
    if spec.name.len() > MAX_HOSTNAME {
        return Err(HostsError::InvalidHostName {
            name: spec.name.clone(),
            reason: format!("is a hostname: at most {MAX_HOSTNAME} characters"),
        });
    }
    Ok(())
}

/// The name two hosts would share (pod or service names resolve from every host, so none may repeat).
fn clash(a: &HostSpec, b: &HostSpec) -> Option<String> {
    [&b.name, &b.service]
        .into_iter()
        .find(|n| **n == a.name || **n == a.service)
        .cloned()
}

/// Host names become netns names, hostnames, directory names, XML text and ZooKeeper path parts: keep
/// them to what a Kubernetes pod name allows.
fn validate_host_name(name: &str) -> Result<(), HostsError> {
    let bad = |reason: &str| {
        Err(HostsError::InvalidHostName {
            name: name.to_string(),
            reason: reason.into(),
        })
    };
    if name.is_empty() || name.len() > MAX_HOST_NAME {
        return bad(&format!("must be 1..={MAX_HOST_NAME} characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return bad("only lowercase letters, digits, '-' and '.' are allowed");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() || !name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
    {
        return bad("must start and end with a letter or digit");
    }
    Ok(())
}

/// The cluster name is an XML element name in remote_servers.
fn validate_cluster_name(name: &str) -> Result<(), HostsError> {
    let mut bytes = name.bytes();
    let ok = matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(HostsError::InvalidOptions(format!(
            "cluster name {name:?} must start with a letter or '_' and contain only letters, digits, '_' and '-'"
        )))
    }
}

/// Crash recovery for `sandbox stop` when the serving process died: kill every process whose PID is
/// recorded under run_dir (only those, and only if its command line still names run_dir), delete the
/// netns/veth/bridge recorded there. Idempotent, quiet when nothing is left. Data and logs are kept.
///
/// Names are deleted only under their instance's lock. When a running sandbox holds that instance it
/// has already reclaimed these names at its start and may have made the same ones since, so they are
/// only dropped from the record.
pub fn cleanup_stale(run_dir: &Path) -> Result<(), HostsError> {
    let Ok(run_dir) = run_dir.canonicalize() else {
        return Ok(()); // never created: nothing can be left
    };
    let marker = run_dir.display().to_string();
    let pid_dir = pids::PidDir::new(&run_dir);
    let recorded = pid_dir.list();
    // Servers before ZooKeeper, as in a normal shutdown.
    let (zk, servers): (Vec<_>, Vec<_>) = recorded.into_iter().partition(|(what, _)| what == ZOOKEEPER_PID);
    for group in [servers, zk] {
        let pids_only: Vec<i32> = group.iter().map(|(_, pid)| *pid).collect();
        pids::stop_foreign(&pids_only, &marker, pids::STOP_GRACE);
        for (what, _) in &group {
            pid_dir.forget(what);
        }
    }
    let records = netns::Records::new(&run_dir);
    let mut locks = Vec::new();
    for i in records.instances() {
        match instance::claim(Some(i)) {
            Ok(lock) => locks.push(lock),
            Err(HostsError::InstanceBusy(_)) => records.forget_instance(i)?,
            Err(e) => return Err(e),
        }
    }
    cleanup::delete_recorded(&records)
}
