//! The modern engine's pod (ClickHouse 26.9 from chdb-core, `Engine::Modern`): its stand-in
//! `clickhouse-client` must answer as the modern client does, since the product's commands and
//! error parsing are checked against it. Run the way a pod exec runs (`sh -c` in the host's
//! namespaces, the container's environment). Needs root, iproute2, zookeeper and the engine
//! (scripts/install-deps.sh, scripts/install-modern-engine.sh).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use clickhouse_schema_core::command::{render, render_script};
use clickhouse_schema_core::config::{ClientConfig, SettingValue};
use clickhouse_schema_sandbox_hosts::{Engine, HostSpec, Hosts, HostsOptions};

const HOST: &str = "ch-m0";
const WRITER_PW: &str = "-modern'\"<&>$HOME pw";
const PASSWORD_ENV: &str = "CLICKHOUSE_WRITER_PASSWORD";

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

fn start(dir: &std::path::Path) -> Hosts {
    Hosts::start(
        HostsOptions {
            instance: None,
            run_dir: dir.to_path_buf(),
            cluster_name: "sandbox".into(),
            default_password: "default-pw".into(),
            writer_password: WRITER_PW.into(),
            engine: Engine::Modern,
        },
        &[HostSpec::named(HOST)],
    )
    .expect("a modern host starts (scripts/install-modern-engine.sh installs its engine)")
}

/// `sh -c script` in the pod with `env`, `stdin` on its stdin (closed after).
fn sh(hosts: &Hosts, script: &str, env: &[(&str, &str)], stdin: &str) -> Ran {
    let argv = vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    exec(hosts, &argv, &env, stdin)
}

fn exec(hosts: &Hosts, argv: &[String], env: &[(String, String)], stdin: &str) -> Ran {
    let mut child = hosts
        .command(HOST, argv, env)
        .expect("command")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn writer() -> ClientConfig {
    ClientConfig {
        user: "writer".into(),
        database: "default".into(),
        password_env: PASSWORD_ENV.into(),
        port: 9000,
    }
}

/// The product's own command (crates/core's renderer) with `password` in the container's env.
fn product(
    hosts: &Hosts,
    script: bool,
    settings: &BTreeMap<String, SettingValue>,
    password: &str,
    sql: &str,
) -> Ran {
    let timeout = Duration::from_secs(60);
    let argv = if script {
        render_script(&writer(), settings, sql.len(), timeout)
    } else {
        render(&writer(), settings, sql.len(), timeout)
    };
    exec(
        hosts,
        &argv,
        &[(PASSWORD_ENV.to_owned(), password.to_owned())],
        sql,
    )
}

#[test]
fn the_stand_in_client_answers_as_the_modern_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut hosts = start(dir.path());
    let none = BTreeMap::new();

    // The product's command: the password from the config on a pipe, TabSeparated on stdout.
    let ok = product(
        &hosts,
        false,
        &none,
        WRITER_PW,
        "SELECT version(), hostName(), getMacro('replica')",
    );
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let fields: Vec<&str> = ok.stdout.trim_end().split('\t').collect();
    assert!(fields[0].starts_with("26.9."), "{}", ok.stdout);
    assert_eq!(fields[1..], [HOST, HOST], "hostname and {{replica}} macro");

    // A wrong password fails as a server refuses it.
    let wrong = product(&hosts, false, &none, "not-it", "SELECT 1");
    assert_eq!(wrong.code, 516 % 256, "{}", wrong.stderr);
    assert!(
        wrong.stderr.contains("Code: 516. DB::Exception: ")
            && wrong.stderr.contains("writer: Authentication failed")
            && wrong.stderr.trim_end().ends_with("(AUTHENTICATION_FAILED)"),
        "{}",
        wrong.stderr
    );
    assert!(
        !wrong.stderr.contains("not-it"),
        "the password is not echoed: {}",
        wrong.stderr
    );

    // An unknown option is refused before anything runs; so is an unknown setting.
    let pw = [("CLICKHOUSE_PASSWORD", "default-pw")];
    let unknown = sh(
        &hosts,
        "clickhouse-client --password \"$CLICKHOUSE_PASSWORD\" --bogus-option",
        &pw,
        "SELECT 1",
    );
    assert_eq!(unknown.code, 552 % 256);
    assert_eq!(
        unknown.stderr.trim_end(),
        "Code: 552. DB::Exception: Unrecognized option '--bogus-option'. (UNRECOGNIZED_ARGUMENTS)"
    );
    let setting = sh(
        &hosts,
        "clickhouse-client --password \"$CLICKHOUSE_PASSWORD\" --no_such_setting=1",
        &pw,
        "SELECT 1",
    );
    assert_eq!(setting.code, 552 % 256, "{}", setting.stderr);
    assert!(
        setting
            .stderr
            .contains("Unrecognized option '--no_such_setting=1'"),
        "{}",
        setting.stderr
    );

    // Settings as --name=value reach the session.
    let mut settings = BTreeMap::new();
    settings.insert("max_threads".to_owned(), SettingValue::String("3".into()));
    let set = product(
        &hosts,
        false,
        &settings,
        WRITER_PW,
        "SELECT getSetting('max_threads'), getSetting('max_execution_time')",
    );
    assert_eq!(set.code, 0, "{}", set.stderr);
    assert_eq!(set.stdout, "3\t60\n");

    // Several statements run one by one by default; the first failure ends the run with its code.
    let multi = product(
        &hosts,
        false,
        &none,
        WRITER_PW,
        "SELECT 1; SELECT * FROM nowhere.t; SELECT 3",
    );
    assert_eq!(multi.code, 81, "UNKNOWN_DATABASE: {}", multi.stderr);
    assert_eq!(multi.stdout, "1\n");
    assert!(
        multi.stderr.contains("Code: 81. DB::Exception: Received from localhost:9000. DB::Exception: Database nowhere does not exist. (UNKNOWN_DATABASE)")
            && multi.stderr.contains("(query: SELECT * FROM nowhere.t)"),
        "{}",
        multi.stderr
    );
    // With --ignore-error (the product's script command) every statement runs.
    let script = product(
        &hosts,
        true,
        &none,
        WRITER_PW,
        "SELECT 1; SELECT * FROM nowhere.t; SELECT 'a;b' -- c;\n; SELECT 3",
    );
    assert_eq!(script.stdout, "1\na;b\n3\n", "{}", script.stderr);
    assert!(script.stderr.contains("(UNKNOWN_DATABASE)"), "{}", script.stderr);

    // A config file on a pipe that is not XML fails as the client fails to read it.
    let bad = sh(
        &hosts,
        "echo 'not <xml' | clickhouse-client --config-file=/dev/stdin",
        &[],
        "",
    );
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr.starts_with("Code: 36. DB::Exception: "),
        "{}",
        bad.stderr
    );

    // Data lives in the pod's directory, across calls; Replicated tables take the pod's macros
    // ({database} and {table} are written into the metadata at CREATE, {shard} stays a macro).
    let ddl = product(
        &hosts,
        false,
        &none,
        WRITER_PW,
        "CREATE DATABASE app; CREATE TABLE app.r (id UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') ORDER BY id",
    );
    assert_eq!(ddl.code, 0, "{}", ddl.stderr);
    let engine = product(
        &hosts,
        false,
        &none,
        WRITER_PW,
        "SELECT engine_full FROM system.tables WHERE database = 'app'",
    );
    assert!(
        engine
            .stdout
            .contains("ReplicatedMergeTree(\\'/clickhouse/tables/{shard}/app/r\\'"),
        "{}",
        engine.stdout
    );

    // Stopped merges stay stopped from one call to the next, as a server keeps them while it
    // runs, also under the table's new name; merges started again, an OPTIMIZE merges.
    let stop = product(
        &hosts,
        false,
        &none,
        WRITER_PW,
        "CREATE TABLE app.m (id UInt64) ENGINE = MergeTree ORDER BY id; INSERT INTO app.m VALUES (1); \
         INSERT INTO app.m VALUES (2); SYSTEM STOP MERGES `app`.`m`; RENAME TABLE app.m TO app.m2",
    );
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    let held = product(&hosts, false, &none, WRITER_PW, "OPTIMIZE TABLE app.m2 FINAL");
    assert_eq!(held.code, 236, "merges stay stopped: {}", held.stderr);
    assert!(held.stderr.contains("(ABORTED)"), "{}", held.stderr);
    let started = product(
        &hosts,
        false,
        &none,
        WRITER_PW,
        "SYSTEM START MERGES app.m2; OPTIMIZE TABLE app.m2 FINAL; SELECT count() FROM system.parts WHERE \
         database = 'app' AND table = 'm2' AND active",
    );
    assert_eq!(
        (started.code, started.stdout.as_str()),
        (0, "1\n"),
        "{}",
        started.stderr
    );
    let stop = product(&hosts, false, &none, WRITER_PW, "SYSTEM STOP MERGES app.m2");
    assert_eq!(stop.code, 0, "{}", stop.stderr);

    // A stopped server refuses connections; started again, it has its data, and has forgotten
    // which merges were stopped.
    hosts.stop_server(HOST).expect("stop");
    let down = product(&hosts, false, &none, WRITER_PW, "SELECT 1");
    assert_eq!(down.code, 210, "{}", down.stderr);
    assert!(down.stderr.contains("(NETWORK_ERROR)"), "{}", down.stderr);
    hosts.start_server(HOST).expect("start");
    let back = product(&hosts, false, &none, WRITER_PW, "EXISTS TABLE app.r");
    assert_eq!(back.stdout, "1\n", "{}", back.stderr);
    let merges = product(
        &hosts,
        false,
        &none,
        WRITER_PW,
        "INSERT INTO app.m2 VALUES (3); OPTIMIZE TABLE app.m2 FINAL",
    );
    assert_eq!(merges.code, 0, "merges run after a restart: {}", merges.stderr);
    hosts.shutdown().expect("shutdown");
}
