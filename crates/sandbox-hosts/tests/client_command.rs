//! The product's exec command, as `clickhouse_schema_core::command::render`
//! writes it, run the way a pod runs it (`sh -c` in the host's network
//! namespace, the container's environment, the statement on stdin) against a
//! real clickhouse-server and clickhouse-client 18.16. Needs root, iproute2,
//! clickhouse and zookeeper (scripts/install-deps.sh).
//!
//! What a user checks: the password works (a wrong one is refused), no
//! process's command line ever holds it while a statement runs, and a
//! statement is stopped by ClickHouse and by the pod, not only by the caller.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use clickhouse_schema_core::command::render;
use clickhouse_schema_core::config::{ClientConfig, SettingValue};
use clickhouse_schema_sandbox_hosts::{Engine, HostSpec, Hosts, HostsOptions};

const HOST: &str = "ch-0";
/// Starts with `-` and holds XML and shell metacharacters; the marker makes
/// it unmistakable in /proc.
const WRITER_PW: &str = "-Zq9marker'\"<&>$HOME `id` \\ pw";
const PASSWORD_ENV: &str = "CLICKHOUSE_WRITER_PASSWORD";

fn writer() -> ClientConfig {
    ClientConfig {
        user: "writer".into(),
        database: "default".into(),
        password_env: PASSWORD_ENV.into(),
        port: 9000,
    }
}

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

fn spawn(hosts: &Hosts, argv: &[String], env: &[(String, String)], statement: &str) -> Child {
    let mut child = hosts
        .command(HOST, argv, env)
        .expect("command")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Stdin stays open after the statement, as over pods/exec: `head -c` frames it.
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(statement.as_bytes()).expect("write statement");
    std::mem::forget(stdin);
    child
}

fn finish(child: Child, started: Instant) -> Ran {
    let out = child.wait_with_output().expect("wait");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: started.elapsed(),
    }
}

fn run(
    hosts: &Hosts,
    settings: &BTreeMap<String, SettingValue>,
    password: Option<&str>,
    statement: &str,
    timeout: Duration,
) -> Ran {
    let argv = render(&writer(), settings, statement.len(), timeout);
    let env: Vec<(String, String)> = password
        .map(|p| vec![(PASSWORD_ENV.to_owned(), p.to_owned())])
        .unwrap_or_default();
    let started = Instant::now();
    finish(spawn(hosts, &argv, &env, statement), started)
}

/// Every process's command line, as `ps` and `/proc/<pid>/cmdline` show it.
fn command_lines() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .collect()
}

#[test]
fn the_rendered_command_against_a_real_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hosts = Hosts::start(
        HostsOptions {
            // Whichever instance is free: another test run may hold any fixed one.
            instance: None,
            run_dir: dir.path().to_path_buf(),
            cluster_name: "sandbox".into(),
            default_password: "default-pw".into(),
            writer_password: WRITER_PW.into(),
            engine: Engine::default(),
        },
        &[HostSpec::named(HOST)],
    )
    .expect("a ClickHouse host starts");
    let no_settings = BTreeMap::new();
    let five_minutes = Duration::from_secs(300);

    // 1. The password works, and no command line holds it while the
    //    statement runs (sleep keeps the client alive long enough to look).
    let statement = "SELECT sleep(2), currentDatabase()";
    let argv = render(&writer(), &no_settings, statement.len(), five_minutes);
    assert!(!argv.concat().contains("Zq9marker"));
    let env = vec![(PASSWORD_ENV.to_owned(), WRITER_PW.to_owned())];
    let started = Instant::now();
    let mut child = spawn(&hosts, &argv, &env, statement);
    let mut saw_client = false;
    let mut leaks = Vec::new();
    // Scanned for as long as the command runs, however late a busy machine starts the client.
    while child.try_wait().expect("try_wait").is_none() {
        for line in command_lines() {
            if line.contains("clickhouse-client --config-file=/dev/fd/4 --host=localhost --user=writer") {
                saw_client = true;
            }
            if line.contains("Zq9marker") {
                leaks.push(line);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ran = finish(child, started);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.stdout, "0\tdefault\n");
    assert!(saw_client, "the scan ran while clickhouse-client was running");
    assert!(leaks.is_empty(), "a command line held the password: {leaks:?}");

    // 2. It is the password that lets the client in: a wrong or missing one is refused.
    for wrong in [Some("-Zq9marker wrong"), None] {
        let ran = run(&hosts, &no_settings, wrong, "SELECT 1", five_minutes);
        assert_ne!(ran.code, 0, "{wrong:?} was accepted");
        // 193: wrong password; 194: password required (the empty one).
        assert!(
            ran.stderr.contains("Code: 193") || ran.stderr.contains("Code: 194"),
            "{wrong:?}: {}",
            ran.stderr
        );
        assert!(!ran.stderr.contains("Zq9marker"), "{}", ran.stderr);
    }

    // 3. ClickHouse stops a statement at max_execution_time, which follows
    //    statementTimeoutMs (1 s here).
    let ran = run(
        &hosts,
        &no_settings,
        Some(WRITER_PW),
        "SELECT count() FROM system.numbers",
        Duration::from_millis(1000),
    );
    assert!(
        ran.stderr.contains("Code: 159"),
        "exit {}: {}",
        ran.code,
        ran.stderr
    );
    assert_eq!(ran.code, 159);
    assert!(ran.elapsed < Duration::from_secs(10), "{:?}", ran.elapsed);

    // 4. When the server would not stop it (the user raised
    //    max_execution_time), `timeout` in the pod does.
    let mut raised = BTreeMap::new();
    raised.insert("max_execution_time".to_owned(), SettingValue::Number(100.into()));
    let ran = run(
        &hosts,
        &raised,
        Some(WRITER_PW),
        "SELECT count() FROM system.numbers",
        Duration::from_millis(1000),
    );
    assert!(
        clickhouse_schema_core::command::POD_TIMEOUT_EXIT_CODES.contains(&ran.code),
        "exit {}: {}",
        ran.code,
        ran.stderr
    );
    assert!(ran.elapsed < Duration::from_secs(10), "{:?}", ran.elapsed);

    hosts.shutdown().expect("shutdown");
}
