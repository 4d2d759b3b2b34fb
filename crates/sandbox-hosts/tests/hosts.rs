//! Integration tests: they need root, iproute2, clickhouse-server/-client 18.16 and zookeeper
//! (scripts/install-deps.sh). They run in parallel with each other and with other sandboxes on the
//! same machine (the Node suites start theirs while these run). A test that checks that nothing of its
//! instance is left after a stop reserves a number of its own (`reserve_instance`) and asks for it:
//! freed by the stop, a number taken from the free ones could be claimed at once by another sandbox,
//! whose namespaces would then read as leftovers.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use clickhouse_schema_sandbox_hosts::{
    Engine, HostSpec, Hosts, HostsError, HostsOptions, cleanup_stale, reserve_instance,
};

const DEFAULT_PW: &str = "def'ault&<pw>";
const WRITER_PW: &str = "writer-pw";

fn options(instance: Option<u8>, run_dir: &Path) -> HostsOptions {
    HostsOptions {
        instance,
        run_dir: run_dir.to_path_buf(),
        cluster_name: "sandbox".into(),
        default_password: DEFAULT_PW.into(),
        writer_password: WRITER_PW.into(),
        engine: Engine::default(),
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Hosts of shard 0 known by their own names.
fn specs(list: &[&str]) -> Vec<HostSpec> {
    list.iter().map(|s| HostSpec::named(s)).collect()
}

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs a statement the way the product does over pods/exec: `sh -c` with the password in the
/// environment and the SQL on stdin.
fn client(hosts: &Hosts, host: &str, user: &str, password: &str, sql: &str) -> Output {
    let script = format!(
        r#"exec clickhouse-client --port 9000 --user {user} --password "${{CLICKHOUSE_PASSWORD:-}}""#
    );
    let mut cmd = hosts
        .command(
            host,
            &names(&["sh", "-c", &script]),
            &[("CLICKHOUSE_PASSWORD".into(), password.into())],
        )
        .unwrap();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn ok(hosts: &Hosts, host: &str, sql: &str) -> String {
    let out = client(hosts, host, "default", DEFAULT_PW, sql);
    assert_eq!(out.code, 0, "{sql} on {host} failed: {}", out.stderr);
    out.stdout
}

fn databases(hosts: &Hosts, host: &str) -> Vec<String> {
    ok(
        hosts,
        host,
        "SELECT name FROM system.databases WHERE name NOT IN ('system', 'default') ORDER BY name",
    )
    .lines()
    .map(str::to_string)
    .collect()
}

/// ClickHouse's exit status is the code mod 256; the real code is in the text.
fn error_code(stderr: &str) -> Option<u32> {
    let rest = &stderr[stderr.find("Code: ")? + 6..];
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

fn recorded_pids(run_dir: &Path) -> Vec<i32> {
    std::fs::read_dir(run_dir.join("pids"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn netns_list() -> String {
    String::from_utf8(
        Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
}

fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", "dev", name])
        .output()
        .unwrap()
        .status
        .success()
}

fn assert_nothing_left(instance: u8, pids: &[i32]) {
    let prefix = format!("chsbx{instance}-");
    assert!(
        !netns_list().lines().any(|l| l.starts_with(&prefix)),
        "netns left: {}",
        netns_list()
    );
    assert!(!link_exists(&format!("chsbx{instance}")), "bridge left");
    let links = String::from_utf8(Command::new("ip").args(["-o", "link"]).output().unwrap().stdout).unwrap();
    let veth = format!(" chsbx{instance}h");
    assert!(!links.lines().any(|l| l.contains(&veth)), "veth left: {links}");
    // The hosts' identities: UTS namespace files, their bind mounts, hosts files.
    let ours = |dir: &str| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&prefix))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        ours("/run/chsbx-uts"),
        Vec::<String>::new(),
        "UTS namespace files left"
    );
    assert_eq!(ours("/etc/netns"), Vec::<String>::new(), "hosts files left");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.lines().any(|l| l.contains(&format!("/{prefix}"))),
        "mounts left: {mounts}"
    );
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .map(|(_, s)| s.chars().next().unwrap_or('?'));
        assert!(
            stat.is_empty() || state == Some('Z'),
            "process {pid} still running: {stat}"
        );
    }
}

#[test]
fn cluster_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let _reserved = reserve_instance(190).unwrap();
    let mut hosts = Hosts::start(options(Some(190), dir.path()), &specs(&["ch-0", "ch-1", "ch-2"])).unwrap();
    let instance = hosts.instance();
    eprintln!("3 hosts ready in {:?}", started.elapsed());

    let infos = hosts.hosts();
    assert_eq!(infos.len(), 3);
    assert_eq!(infos[0].ip.to_string(), format!("10.250.{instance}.10"));
    assert_eq!(infos[2].netns, format!("chsbx{instance}-ch-2"));
    assert!(infos.iter().all(|h| h.server_running));
    assert_eq!(
        hosts.zookeeper_address().to_string(),
        format!("10.250.{instance}.1:2181")
    );

    // Each netns reaches its own server on localhost:9000.
    for info in &infos {
        let replica = ok(
            &hosts,
            &info.name,
            "SELECT substitution FROM system.macros WHERE macro = 'replica'",
        );
        assert_eq!(replica.trim(), info.name);
        assert_eq!(ok(&hosts, &info.name, "SELECT 1").trim(), "1");
    }

    let wrong = client(&hosts, "ch-0", "default", "not-the-password", "SELECT 1");
    assert_ne!(wrong.code, 0);
    let code = error_code(&wrong.stderr);
    assert!(
        matches!(code, Some(193) | Some(516) | Some(192)),
        "wrong password: {}",
        wrong.stderr
    );
    eprintln!("wrong password -> code {code:?}, exit {}", wrong.code);

    let writer = client(
        &hosts,
        "ch-1",
        "writer",
        WRITER_PW,
        "CREATE DATABASE IF NOT EXISTS w ON CLUSTER sandbox",
    );
    assert_eq!(writer.code, 0, "writer DDL: {}", writer.stderr);

    ok(
        &hosts,
        "ch-0",
        "CREATE DATABASE IF NOT EXISTS d ON CLUSTER sandbox",
    );
    for info in &infos {
        assert_eq!(databases(&hosts, &info.name), ["d", "w"], "on {}", info.name);
    }

    // One shard holding every host: ReplicatedMergeTree with an explicit path replicates to all of them.
    ok(
        &hosts,
        "ch-0",
        "CREATE TABLE d.r ON CLUSTER sandbox (x UInt8) \
         ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/d/r', '{replica}') ORDER BY x",
    );
    ok(&hosts, "ch-0", "INSERT INTO d.r VALUES (7)");
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    while ok(&hosts, "ch-2", "SELECT count() FROM d.r").trim() != "1" {
        assert!(Instant::now() < deadline, "the row never replicated to ch-2");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    let added = hosts.add(&HostSpec::named("ch-3")).unwrap();
    assert_eq!(added.ip.to_string(), format!("10.250.{instance}.13"));
    assert!(databases(&hosts, "ch-3").is_empty(), "a new host starts empty");
    let clusters = ok(
        &hosts,
        "ch-0",
        "SELECT count() FROM system.clusters WHERE cluster = 'sandbox'",
    );
    assert_eq!(
        clusters.trim(),
        "4",
        "cluster config of an existing host includes the new one"
    );
    ok(
        &hosts,
        "ch-0",
        "CREATE DATABASE IF NOT EXISTS e ON CLUSTER sandbox",
    );
    for name in ["ch-0", "ch-1", "ch-2", "ch-3"] {
        assert!(
            databases(&hosts, name).contains(&"e".to_string()),
            "e missing on {name}"
        );
    }

    hosts.wipe_and_restart("ch-1").unwrap();
    assert!(
        databases(&hosts, "ch-1").is_empty(),
        "wiped host has {:?}",
        databases(&hosts, "ch-1")
    );
    assert_eq!(hosts.hosts()[1].ip.to_string(), format!("10.250.{instance}.11"));

    hosts.stop_server("ch-2").unwrap();
    assert!(!hosts.hosts()[2].server_running);
    let down = client(&hosts, "ch-2", "default", DEFAULT_PW, "SELECT 1");
    assert_eq!(down.code, 210, "server down: {}", down.stderr);
    hosts.start_server("ch-2").unwrap();
    assert!(hosts.hosts()[2].server_running);
    assert_eq!(
        databases(&hosts, "ch-2"),
        ["d", "e", "w"],
        "data kept across stop/start"
    );

    let pids = recorded_pids(hosts.run_dir());
    assert_eq!(pids.len(), 5, "ZooKeeper and four servers are recorded");
    hosts.shutdown().unwrap();
    assert_nothing_left(instance, &pids);
    // Logs survive a shutdown for post-mortems.
    assert!(dir.path().join("hosts/ch-0/log/clickhouse-server.log").exists());
}

#[test]
fn remove_takes_host_out_of_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let _reserved = reserve_instance(191).unwrap();
    let mut hosts = Hosts::start(options(Some(191), dir.path()), &specs(&["a", "b"])).unwrap();
    let instance = hosts.instance();
    hosts.remove("b").unwrap();
    assert!(!netns_list().contains(&format!("chsbx{instance}-b")));
    assert!(!dir.path().join("hosts/b").exists());
    assert_eq!(
        ok(
            &hosts,
            "a",
            "SELECT count() FROM system.clusters WHERE cluster = 'sandbox'"
        )
        .trim(),
        "1"
    );
    // With b gone, ON CLUSTER does not wait for it.
    ok(&hosts, "a", "CREATE DATABASE x ON CLUSTER sandbox");
    assert!(matches!(hosts.remove("b"), Err(HostsError::UnknownHost(_))));
    // Addresses are never reused: a host added after a removal gets a fresh one.
    let c = hosts.add(&HostSpec::named("c")).unwrap();
    assert_eq!(c.ip.to_string(), format!("10.250.{instance}.12"));
    assert!(matches!(
        hosts.add(&HostSpec::named("c")),
        Err(HostsError::DuplicateHost(_))
    ));
    hosts.shutdown().unwrap();
    assert_nothing_left(instance, &[]);
}

/// Set in the copy of this test binary that plays a serving process which crashes.
const CRASH_CHILD: &str = "SANDBOX_HOSTS_CRASH_CHILD";

/// Starts hosts on `INSTANCE` in `dir` from another process (this test binary, running
/// `cleanup_stale_after_a_crash` as the child), then kills that process outright: no destructor runs,
/// its servers and ZooKeeper are orphaned, and the kernel releases its instance lock. Returns the PIDs
/// it had recorded.
fn crash_a_sandbox(dir: &Path) -> Vec<i32> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "cleanup_stale_after_a_crash", "--nocapture"])
        .env(CRASH_CHILD, dir)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let started = dir.join("started");
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while !started.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the crashing sandbox exited early"
        );
        assert!(Instant::now() < deadline, "the crashing sandbox did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pids = recorded_pids(dir);
    assert_eq!(pids.len(), 2, "a server and ZooKeeper");
    child.kill().unwrap();
    child.wait().unwrap();
    pids
}

#[test]
fn cleanup_stale_after_a_crash() {
    const INSTANCE: u8 = 183;
    if let Some(dir) = std::env::var_os(CRASH_CHILD) {
        let dir = Path::new(&dir);
        let _hosts = Hosts::start(options(Some(INSTANCE), dir), &specs(&["a"])).unwrap();
        std::fs::write(dir.join("started"), "").unwrap();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    }
    let _reserved = reserve_instance(INSTANCE).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pids = crash_a_sandbox(dir.path());
    assert!(
        link_exists(&format!("chsbx{INSTANCE}")),
        "the crash left its bridge"
    );
    cleanup_stale(dir.path()).unwrap();
    assert_nothing_left(INSTANCE, &pids);
    assert!(recorded_pids(dir.path()).is_empty());
    cleanup_stale(dir.path()).unwrap();
    cleanup_stale(&dir.path().join("never-created")).unwrap();

    // Crashed again, but this time a new sandbox takes the instance before anyone cleans up: it
    // removes what the crash left, and a late cleanup of the crashed directory must not delete the
    // running sandbox's names, which are the same ones.
    let crashed = tempfile::tempdir().unwrap();
    let orphans = crash_a_sandbox(crashed.path());
    let running = tempfile::tempdir().unwrap();
    let hosts = Hosts::start(options(Some(INSTANCE), running.path()), &specs(&["a"])).unwrap();
    assert!(
        hosts
            .reclaimed()
            .iter()
            .any(|l| l == &format!("bridge chsbx{INSTANCE}")),
        "{:?}",
        hosts.reclaimed()
    );
    for pid in &orphans {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists() || zombie(*pid),
            "{pid} runs"
        );
    }
    cleanup_stale(crashed.path()).unwrap();
    assert!(
        link_exists(&format!("chsbx{INSTANCE}")),
        "the running sandbox's bridge was deleted"
    );
    // Over the bridge: the server still reaches ZooKeeper.
    assert_eq!(
        ok(
            &hosts,
            "a",
            "SELECT count() > 0 FROM system.zookeeper WHERE path = '/'"
        )
        .trim(),
        "1"
    );
    hosts.shutdown().unwrap();
    assert_nothing_left(INSTANCE, &orphans);
}

fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z"))
}

#[test]
fn bad_options_are_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let err = Hosts::start(options(Some(0), dir.path()), &specs(&["a"]))
        .err()
        .unwrap();
    assert!(err.to_string().contains("instance 0"), "{err}");
    let err = Hosts::start(options(Some(184), dir.path()), &specs(&["Bad_Name"]))
        .err()
        .unwrap();
    assert!(matches!(err, HostsError::InvalidHostName { .. }), "{err}");
    let err = Hosts::start(options(Some(184), dir.path()), &specs(&["a", "a"]))
        .err()
        .unwrap();
    assert!(matches!(err, HostsError::DuplicateHost(_)), "{err}");
    assert!(!link_exists("chsbx184"));
}

#[test]
fn failed_server_start_reports_its_log_and_second_sandbox_on_same_instance_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _reserved = reserve_instance(192).unwrap();
    let mut hosts = Hosts::start(options(Some(192), dir.path()), &specs(&["a"])).unwrap();
    let instance = hosts.instance();

    // A second sandbox on the same instance must fail without touching the first one's network.
    let other = tempfile::tempdir().unwrap();
    let err = Hosts::start(options(Some(instance), other.path()), &specs(&["a"]))
        .err()
        .unwrap();
    assert!(
        matches!(err, HostsError::InstanceBusy(i) if i == instance),
        "{err}"
    );
    assert!(
        link_exists(&format!("chsbx{instance}")),
        "the first sandbox's bridge was deleted"
    );
    assert_eq!(ok(&hosts, "a", "SELECT 1").trim(), "1");

    hosts.stop_server("a").unwrap();
    let broken = dir.path().join("hosts/a/config.d/broken.xml");
    std::fs::write(&broken, "<yandex><unclosed></yandex>").unwrap();
    let err = hosts
        .start_server("a")
        .expect_err("a server with a broken config must not start");
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, HostsError::Server { .. }), "{text}");
    assert!(
        text.contains("stderr.log") && text.contains("broken.xml"),
        "no log tail in: {text}"
    );
    assert!(!hosts.hosts()[0].server_running);

    std::fs::remove_file(&broken).unwrap();
    hosts.start_server("a").unwrap();
    hosts.shutdown().unwrap();
    assert_nothing_left(instance, &[]);
}

/// The sandbox moves `Hosts` into `spawn_blocking` and shares it behind a mutex.
#[test]
fn hosts_can_move_between_threads() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Hosts>();
    assert_send_sync::<HostsError>();
}

/// Runs a shell command in a host as an exec would; returns its stdout.
fn shell(hosts: &Hosts, host: &str, script: &str) -> String {
    let out = hosts
        .command(host, &names(&["sh", "-c", script]), &[])
        .unwrap()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} on {host}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A ClickHouse string literal.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn spec(name: &str, service: &str, shard: u32) -> HostSpec {
    HostSpec {
        name: name.into(),
        service: service.into(),
        shard,
    }
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Two shards of two replicas, named and wired as the ClickHouse operator does it: each host has its
/// pod name as hostname, resolves every other by pod and service name, replicates within its shard, and
/// a Distributed table spans both shards. A pod added to shard 1 joins it; a paused ZooKeeper stalls
/// ON CLUSTER until it resumes.
#[test]
fn shards_and_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let layout = [
        spec("chi-x-c-0-0-0", "chi-x-c-0-0", 0),
        spec("chi-x-c-0-1-0", "chi-x-c-0-1", 0),
        spec("chi-x-c-1-0-0", "chi-x-c-1-0", 1),
        spec("chi-x-c-1-1-0", "chi-x-c-1-1", 1),
    ];
    let started = Instant::now();
    let _reserved = reserve_instance(193).unwrap();
    let mut hosts = Hosts::start(options(Some(193), dir.path()), &layout).unwrap();
    let instance = hosts.instance();
    eprintln!("2x2 hosts ready in {:?}", started.elapsed());

    for host in &layout {
        assert_eq!(shell(&hosts, &host.name, "hostname").trim(), host.name);
        assert_eq!(ok(&hosts, &host.name, "SELECT hostName()").trim(), host.name);
        let macros = ok(
            &hosts,
            &host.name,
            "SELECT macro, substitution FROM system.macros ORDER BY macro",
        );
        assert_eq!(
            macros,
            format!(
                "cluster\tsandbox\nreplica\t{}\nshard\t{}\n",
                host.service, host.shard
            ),
            "macros of {}",
            host.name
        );
    }
    // Every host resolves every other by both names, and reaches its server by them.
    let resolved = shell(&hosts, "chi-x-c-0-0-0", "getent hosts chi-x-c-1-1-0 chi-x-c-1-1");
    let ip = hosts.hosts()[3].ip.to_string();
    assert_eq!(
        resolved
            .lines()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect::<Vec<_>>(),
        [ip.as_str(), ip.as_str()]
    );
    assert_eq!(
        ok(
            &hosts,
            "chi-x-c-0-0-0",
            &format!(
                "SELECT hostName() FROM remote('chi-x-c-1-1', system.one, 'default', {})",
                quoted(DEFAULT_PW)
            )
        )
        .trim(),
        "chi-x-c-1-1-0"
    );
    assert_eq!(
        ok(
            &hosts,
            "chi-x-c-0-0-0",
            "SELECT shard_num, host_name FROM system.clusters WHERE cluster = 'sandbox' ORDER BY shard_num, replica_num"
        ),
        "1\tchi-x-c-0-0\n1\tchi-x-c-0-1\n2\tchi-x-c-1-0\n2\tchi-x-c-1-1\n"
    );

    // Replicated within a shard, distributed across shards.
    ok(&hosts, "chi-x-c-0-0-0", "CREATE DATABASE d ON CLUSTER sandbox");
    ok(
        &hosts,
        "chi-x-c-0-0-0",
        "CREATE TABLE d.t ON CLUSTER sandbox (x UInt32) \
         ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/d/t', '{replica}') ORDER BY x",
    );
    ok(
        &hosts,
        "chi-x-c-0-0-0",
        "CREATE TABLE d.all ON CLUSTER sandbox AS d.t ENGINE = Distributed(sandbox, d, t, x)",
    );
    ok(&hosts, "chi-x-c-0-0-0", "INSERT INTO d.t VALUES (1), (2)");
    ok(&hosts, "chi-x-c-1-0-0", "INSERT INTO d.t VALUES (3)");
    let count = |host: &str, table: &str| {
        ok(&hosts, host, &format!("SELECT count() FROM d.{table}"))
            .trim()
            .to_string()
    };
    eventually("rows replicate within shard 0", || {
        count("chi-x-c-0-1-0", "t") == "2"
    });
    eventually("rows replicate within shard 1", || {
        count("chi-x-c-1-1-0", "t") == "1"
    });
    for host in &layout {
        assert_eq!(
            count(&host.name, "all"),
            "3",
            "the Distributed table on {}",
            host.name
        );
    }

    // A replica added to shard 1 joins the cluster there and resolves from the others.
    let added = hosts.add(&spec("chi-x-c-1-2-0", "chi-x-c-1-2", 1)).unwrap();
    assert_eq!(added.shard, 1);
    assert_eq!(shell(&hosts, "chi-x-c-1-2-0", "hostname").trim(), "chi-x-c-1-2-0");
    assert_eq!(
        ok(
            &hosts,
            "chi-x-c-0-0-0",
            &format!(
                "SELECT hostName() FROM remote('chi-x-c-1-2', system.one, 'default', {})",
                quoted(DEFAULT_PW)
            )
        )
        .trim(),
        "chi-x-c-1-2-0",
        "an existing host resolves the new one (its hosts file was rewritten in place)"
    );
    assert_eq!(
        ok(
            &hosts,
            "chi-x-c-0-0-0",
            "SELECT count() FROM system.clusters WHERE cluster = 'sandbox' AND shard_num = 2"
        )
        .trim(),
        "3"
    );
    assert!(matches!(
        hosts.add(&spec("chi-x-c-9-9-0", "chi-x-c-1-2", 1)),
        Err(HostsError::DuplicateHost(n)) if n == "chi-x-c-1-2"
    ));

    // ZooKeeper paused: ON CLUSTER cannot queue its task and fails once the ZooKeeper operation times
    // out (10 s in 18.16); resumed, it works again once the server has a new session.
    hosts.pause_zookeeper().unwrap();
    assert!(hosts.zookeeper_paused());
    let paused_at = Instant::now();
    let waiting = client(
        &hosts,
        "chi-x-c-0-0-0",
        "default",
        DEFAULT_PW,
        "CREATE DATABASE stalled ON CLUSTER sandbox",
    );
    let waited = paused_at.elapsed();
    hosts.resume_zookeeper().unwrap();
    assert_ne!(
        waiting.code, 0,
        "ON CLUSTER went through a paused ZooKeeper: {}",
        waiting.stdout
    );
    assert!(
        waited >= std::time::Duration::from_secs(2),
        "it failed at once ({waited:?})"
    );
    eprintln!(
        "ON CLUSTER with ZooKeeper paused: {waited:.1?}, {}",
        waiting.stderr.trim()
    );
    eventually("ON CLUSTER after ZooKeeper resumed", || {
        client(
            &hosts,
            "chi-x-c-0-0-0",
            "default",
            DEFAULT_PW,
            "CREATE DATABASE IF NOT EXISTS resumed ON CLUSTER sandbox",
        )
        .code
            == 0
    });

    let pids = recorded_pids(hosts.run_dir());
    hosts.shutdown().unwrap();
    assert_nothing_left(instance, &pids);
}
