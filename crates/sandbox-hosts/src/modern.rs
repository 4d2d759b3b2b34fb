//! The second engine: pods whose ClickHouse is 26.9 (chdb-core), for checking the product against a
//! modern server's behaviour where no modern server can be installed.
//!
//! Such a pod has the same namespaces, hostname, hosts file, users and macros as an 18.16 pod, but
//! no server process: `clickhouse-client` on its PATH is a wrapper (`hosts/<name>/bin/`) that runs
//! the stand-in client `modern/clickhouse-client.py` with the engine's Python, over the pod's own
//! data directory. A stopped "server" is a marker file the stand-in answers with a refused
//! connection. The stand-in's own header says what it mimics and what it cannot.

use std::path::{Path, PathBuf};

use crate::clickhouse::{ServerConfig, ServerPaths, xml_escape};
use crate::error::{HostsError, IoContext};

/// The stand-in client, built into the binary so a sandbox needs no checkout to run.
const CLIENT_SCRIPT: &str = include_str!("../modern/clickhouse-client.py");
/// The engine's version, as scripts/install-modern-engine.sh pins it.
pub(crate) const CHDB_VERSION: &str = "26.9.0";

/// The engine's Python: `CHSBX_MODERN_PYTHON`, else the venv scripts/install-modern-engine.sh makes.
pub(crate) fn python() -> Result<PathBuf, HostsError> {
    let path = match std::env::var_os("CHSBX_MODERN_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from("/root/.cache"));
            cache
                .join("alchemy-clickhouse-schema")
                .join(format!("chdb-core-{CHDB_VERSION}"))
                .join("bin/python")
        }
    };
    existing(path)
}

/// `path` when the engine's Python is there; else the error that says how to install it.
fn existing(path: PathBuf) -> Result<PathBuf, HostsError> {
    if path.exists() {
        Ok(path)
    } else {
        Err(HostsError::InvalidOptions(format!(
            "the modern engine needs chdb-core {CHDB_VERSION}: {} does not exist (run scripts/install-modern-engine.sh, \
             or set CHSBX_MODERN_PYTHON)",
            path.display()
        )))
    }
}

/// Writes the stand-in client under the run directory; returns its path.
pub(crate) fn install_client(run_dir: &Path) -> Result<PathBuf, HostsError> {
    let dir = run_dir.join("modern");
    std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("clickhouse-client.py");
    std::fs::write(&path, CLIENT_SCRIPT).context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The directory a modern pod's PATH starts with.
pub(crate) fn bin_dir(paths: &ServerPaths) -> PathBuf {
    paths.dir.join("bin")
}

/// The pod's `clickhouse-client`.
pub(crate) fn client(paths: &ServerPaths) -> PathBuf {
    bin_dir(paths).join("clickhouse-client")
}

fn stopped_marker(paths: &ServerPaths) -> PathBuf {
    paths.dir.join("stopped")
}

/// The tables whose merges a `SYSTEM STOP MERGES` stopped (the stand-in keeps them across its
/// calls, as a server keeps them in memory while it runs).
fn stopped_merges(paths: &ServerPaths) -> PathBuf {
    paths.dir.join("stopped-merges")
}

/// Marks the pod's "server" as down (`true`) or up. A server that stops forgets which merges were
/// stopped.
pub(crate) fn set_stopped(paths: &ServerPaths, stopped: bool) -> Result<(), HostsError> {
    let marker = stopped_marker(paths);
    if stopped {
        let merges = stopped_merges(paths);
        match std::fs::remove_file(&merges) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).context(|| format!("removing {}", merges.display()));
            }
            _ => {}
        }
        std::fs::write(&marker, b"").context(|| format!("writing {}", marker.display()))
    } else {
        match std::fs::remove_file(&marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).context(|| format!("removing {}", marker.display()))
            }
            _ => Ok(()),
        }
    }
}

/// Whether the pod's "server" runs: its directory exists and has no stop marker.
pub(crate) fn is_running(paths: &ServerPaths) -> bool {
    paths.dir.exists() && !stopped_marker(paths).exists()
}

/// Everything a modern pod needs besides what `clickhouse::write_config` writes (its users.xml is
/// the stand-in's user table): the engine's configuration (ZooKeeper and the pod's macros, so
/// Replicated tables can be created (not Replicated databases: chdb has no interserver address,
/// code 139); the cluster, so Distributed tables can: with no
/// `<distributed_ddl>`, ON CLUSTER is refused with code 392), the names its client accepts as
/// `--host`, and the wrapper that is its `clickhouse-client`. Rewritten with the cluster.
pub(crate) fn write_pod(
    paths: &ServerPaths,
    cfg: &ServerConfig<'_>,
    names: &[String],
    remote_servers: &str,
    python: &Path,
    script: &Path,
) -> Result<(), HostsError> {
    let engine_config = format!(
        r#"<?xml version="1.0"?>
<!-- Generated by sandbox-hosts: the chdb engine's configuration for this pod. -->
<clickhouse>
    <zookeeper>
        <node>
            <host>{zk_ip}</host>
            <port>{zk_port}</port>
        </node>
        <session_timeout_ms>30000</session_timeout_ms>
    </zookeeper>
    <macros>
        <cluster>{cluster}</cluster>
        <shard>{shard}</shard>
        <replica>{service}</replica>
    </macros>
{remote_servers}    <!-- A pod's namespace has its own /sys, without the cgroup files the engine looks for. -->
    <memory_worker_use_cgroup>false</memory_worker_use_cgroup>
    <max_table_size_to_drop>0</max_table_size_to_drop>
    <max_partition_size_to_drop>0</max_partition_size_to_drop>
</clickhouse>
"#,
        zk_ip = cfg.zookeeper_ip,
        zk_port = cfg.zookeeper_port,
        cluster = xml_escape(cfg.cluster),
        shard = cfg.shard,
        service = xml_escape(cfg.service),
    );
    let config_path = paths.dir.join("chdb.xml");
    std::fs::write(&config_path, engine_config).context(|| format!("writing {}", config_path.display()))?;
    let addresses = paths.dir.join("addresses");
    std::fs::write(&addresses, names.join("\n") + "\n")
        .context(|| format!("writing {}", addresses.display()))?;

    let bin = bin_dir(paths);
    std::fs::create_dir_all(&bin).context(|| format!("creating {}", bin.display()))?;
    // The pod directory reaches the stand-in in its own environment only: the exec's environment
    // stays exactly the container's, as every other pod's.
    let wrapper = format!(
        "#!/bin/sh\n# The modern pod's clickhouse-client (sandbox-hosts, modern.rs).\n\
         CHSBX_POD_DIR={dir} exec {python} {script} \"$@\"\n",
        dir = sh_quote(&paths.dir.display().to_string()),
        python = sh_quote(&python.display().to_string()),
        script = sh_quote(&script.display().to_string()),
    );
    let client = client(paths);
    std::fs::write(&client, wrapper).context(|| format!("writing {}", client.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&client, std::fs::Permissions::from_mode(0o755))
        .context(|| format!("making {} executable", client.display()))
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_engine_names_the_script_that_installs_it() {
        let err = existing(PathBuf::from("/nonexistent/chdb/bin/python"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/nonexistent/chdb/bin/python does not exist"),
            "{err}"
        );
        assert!(err.contains("scripts/install-modern-engine.sh"), "{err}");
        assert!(err.contains("CHSBX_MODERN_PYTHON"), "{err}");
    }
}
