//! One standalone ZooKeeper per sandbox, run straight from the Debian jars (the `zookeeper` package has no
//! service of its own), bound to the bridge address so instances never share a port.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::error::{HostsError, IoContext};

pub(crate) const CLIENT_PORT: u16 = 2181;

pub(crate) struct ZooKeeperPaths {
    pub(crate) dir: PathBuf,
    pub(crate) config: PathBuf,
    pub(crate) data: PathBuf,
    pub(crate) log4j: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) console: PathBuf,
}

impl ZooKeeperPaths {
    pub(crate) fn new(run_dir: &Path) -> ZooKeeperPaths {
        let dir = run_dir.join("zookeeper");
        ZooKeeperPaths {
            config: dir.join("zoo.cfg"),
            data: dir.join("data"),
            log4j: dir.join("log4j.properties"),
            log: dir.join("zookeeper.log"),
            console: dir.join("console.log"),
            dir,
        }
    }
}

fn write_config(paths: &ZooKeeperPaths, addr: SocketAddr) -> Result<(), HostsError> {
    std::fs::create_dir_all(&paths.data).context(|| format!("creating {}", paths.data.display()))?;
    let config = format!(
        "tickTime=2000\n\
         dataDir={data}\n\
         clientPort={port}\n\
         clientPortAddress={ip}\n\
         maxClientCnxns=0\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,ruok,mntr\n\
         autopurge.snapRetainCount=3\n\
         autopurge.purgeInterval=1\n",
        data = paths.data.display(),
        port = addr.port(),
        ip = addr.ip(),
    );
    std::fs::write(&paths.config, config).context(|| format!("writing {}", paths.config.display()))?;
    let log4j = format!(
        "log4j.rootLogger=INFO, FILE\n\
         log4j.appender.FILE=org.apache.log4j.RollingFileAppender\n\
         log4j.appender.FILE.File={log}\n\
         log4j.appender.FILE.MaxFileSize=5MB\n\
         log4j.appender.FILE.MaxBackupIndex=1\n\
         log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n\
         log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} %-5p [%t] %c{{1}}: %m%n\n",
        log = paths.log.display()
    );
    std::fs::write(&paths.log4j, log4j).context(|| format!("writing {}", paths.log4j.display()))
}

/// zookeeper.jar names its dependencies in its manifest; only the log4j binding is missing, without it
/// slf4j drops every log line and a failed start would leave nothing to read.
fn classpath() -> String {
    let mut jars = vec!["/usr/share/java/zookeeper.jar"];
    for optional in [
        "/usr/share/java/slf4j-log4j12.jar",
        "/usr/share/java/log4j-1.2.jar",
    ] {
        if Path::new(optional).exists() {
            jars.push(optional);
        }
    }
    jars.join(":")
}

pub(crate) fn spawn(paths: &ZooKeeperPaths, addr: SocketAddr) -> Result<Child, HostsError> {
    if !Path::new("/usr/share/java/zookeeper.jar").exists() {
        return Err(HostsError::ZooKeeper {
            problem:
                "is not installed: /usr/share/java/zookeeper.jar is missing (run scripts/install-deps.sh)"
                    .into(),
            log: paths.log.display().to_string(),
            log_tail: String::new(),
        });
    }
    write_config(paths, addr)?;
    let console =
        std::fs::File::create(&paths.console).context(|| format!("creating {}", paths.console.display()))?;
    let console_err = console
        .try_clone()
        .context(|| "duplicating a file handle".into())?;
    Command::new("java")
        // Small heap, serial GC and C1 only: a test ZooKeeper holds a few hundred znodes and must boot fast.
        .args([
            "-Xms16m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
        ])
        .arg("-Djava.net.preferIPv4Stack=true")
        .arg("-Dzookeeper.jmx.log4j.disable=true")
        .arg(format!("-Dlog4j.configuration=file:{}", paths.log4j.display()))
        .arg("-cp")
        .arg(classpath())
        .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
        .arg(&paths.config)
        .current_dir(&paths.dir)
        .stdin(Stdio::null())
        .stdout(console)
        .stderr(console_err)
        .spawn()
        .context(|| "starting java for ZooKeeper (is a JRE installed?)".into())
}

/// `srvr` answers with `Mode: standalone` only once the server serves clients; an open port alone is not
/// enough, which is what lets a clickhouse-server that connects too early crash later.
pub(crate) fn is_serving(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    // Short: while ZooKeeper is still initialising it accepts but stays silent, and a fresh attempt
    // answers sooner than a long wait on this one.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    if stream.write_all(b"srvr").is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply.contains("Mode:")
}
