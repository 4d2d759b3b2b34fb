//! `sandbox start` / `sandbox stop` as a developer runs them: detached, ready on return, and
//! nothing left behind after stop.

mod common;

use std::process::Command;

use common::*;

fn sandbox(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(args)
        .output()
        .expect("sandbox binary runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_and_stop_leave_nothing_running() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // A number of its own: one taken from the free ones is free again after the stop, and another
    // sandbox on this machine (the Node suites run theirs meanwhile) can claim it before the check
    // below, whose namespaces would then read as this one's leftovers.
    let _reserved = clickhouse_schema_sandbox_hosts::reserve_instance(188).unwrap();
    let started = sandbox(&["start", "--pods", "2", "--instance", "188", "--dir", d]);
    assert!(
        started.status.success(),
        "{}{}",
        text(&started.stdout),
        text(&started.stderr)
    );
    assert!(text(&started.stdout).contains("sandbox ready in"));
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sandbox.json")).unwrap()).unwrap();
    let pid = info["pid"].as_u64().unwrap();
    let again = sandbox(&["start", "--dir", d]);
    assert!(
        !again.status.success(),
        "a second start on the same dir must refuse"
    );

    let kc = dir.path().join("kubeconfig");
    let listed = kubectl(KUBECTL_133, &kc, &["get", "pods", "-o", "name"], "").await;
    assert_eq!(
        names(&listed),
        vec!["pod/chi-sandbox-sandbox-0-0-0", "pod/chi-sandbox-sandbox-0-1-0"]
    );
    let exec = [
        "exec",
        "-i",
        "chi-sandbox-sandbox-0-1-0",
        "--",
        "sh",
        "-c",
        r#"clickhouse-client --password "$CLICKHOUSE_PASSWORD""#,
    ];
    assert_eq!(
        text(&kubectl(KUBECTL_132, &kc, &exec, "SELECT 2").await.stdout),
        "2\n"
    );

    let stopped = sandbox(&["stop", "--dir", d]);
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "serve still runs"
    );
    let instance = info["instance"].as_u64().unwrap() as u8;
    assert_nothing_left(instance, dir.path());
    let quiet = sandbox(&["stop", "--dir", d]);
    assert!(
        quiet.status.success() && quiet.stdout.is_empty(),
        "stop is idempotent and quiet"
    );
}

/// PIDs of the processes whose command line names `dir` (a sandbox's servers and ZooKeeper).
fn processes_naming(dir: &std::path::Path) -> Vec<u32> {
    let marker = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|raw| String::from_utf8_lossy(&raw).contains(&marker))
        })
        .collect()
}

/// A sandbox whose serving process is killed outright leaves its servers, ZooKeeper, namespaces and
/// bridge behind, and its directory may be deleted too (a killed test run's temporary clone): nothing
/// records them any more. The next sandbox on that instance removes them, says so, and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_sandboxs_leftovers_are_removed_by_the_next_one_on_its_instance() {
    const INSTANCE: &str = "187";
    let _reserved = clickhouse_schema_sandbox_hosts::reserve_instance(187).unwrap();
    let crashed = tempfile::tempdir().unwrap();
    let started = sandbox(&[
        "start",
        "--pods",
        "1",
        "--instance",
        INSTANCE,
        "--dir",
        crashed.path().to_str().unwrap(),
    ]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(crashed.path().join("sandbox.json")).unwrap()).unwrap();
    let serve = info["pid"].as_u64().unwrap() as i32;
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(serve, libc::SIGKILL) };
    while std::path::Path::new(&format!("/proc/{serve}/cmdline")).exists()
        && !std::fs::read_to_string(format!("/proc/{serve}/stat"))
            .unwrap_or_default()
            .contains(") Z")
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let orphans: Vec<u32> = processes_naming(crashed.path())
        .into_iter()
        .filter(|&p| p as i32 != serve)
        .collect();
    assert_eq!(
        orphans.len(),
        2,
        "a server and ZooKeeper outlive serve: {orphans:?}"
    );
    assert!(std::path::Path::new("/sys/class/net/chsbx187").exists());
    drop(crashed);

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let started = sandbox(&["start", "--pods", "1", "--instance", INSTANCE, "--dir", d]);
    assert!(
        started.status.success(),
        "{}{}",
        text(&started.stdout),
        text(&started.stderr)
    );
    let log = std::fs::read_to_string(dir.path().join("sandbox.log")).unwrap();
    for left in [
        "bridge chsbx187",
        "netns chsbx187-chi-sandbox-sandbox-0-0-0",
        "processes",
    ] {
        assert!(
            log.contains(&format!(
                "removed what a crashed sandbox left on this instance: {left}"
            )),
            "{left} not reported in: {log}"
        );
    }
    for pid in &orphans {
        let alive =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z"));
        assert!(!alive, "the crashed sandbox's process {pid} still runs");
    }
    let kc = dir.path().join("kubeconfig");
    let exec = [
        "exec",
        "-i",
        "chi-sandbox-sandbox-0-0-0",
        "--",
        "sh",
        "-c",
        r#"clickhouse-client --password "$CLICKHOUSE_PASSWORD""#,
    ];
    assert_eq!(
        text(&kubectl(KUBECTL_133, &kc, &exec, "SELECT 3").await.stdout),
        "3\n"
    );

    // A second sandbox asking for the instance the first one holds is refused, and touches nothing.
    let other = tempfile::tempdir().unwrap();
    let refused_hosts = sandbox(&[
        "start",
        "--pods",
        "1",
        "--instance",
        INSTANCE,
        "--dir",
        other.path().to_str().unwrap(),
    ]);
    assert!(!refused_hosts.status.success());
    assert!(
        text(&refused_hosts.stderr)
            .contains("instance 187 is held by another sandbox running on this machine"),
        "{}",
        text(&refused_hosts.stderr)
    );
    assert_eq!(
        text(&kubectl(KUBECTL_133, &kc, &exec, "SELECT 4").await.stdout),
        "4\n"
    );

    assert!(sandbox(&["stop", "--dir", d]).status.success());
    assert_nothing_left(187, dir.path());
}

#[test]
fn a_layout_is_given_one_way_and_must_hold_a_pod() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for (args, says) in [
        (&["--layout", "2,0"][..], "every shard needs at least one replica"),
        (&["--layout", "two"][..], "\"two\" is not a number of replicas"),
        (&["--pods", "2", "--shards", "2"][..], "cannot be used with"),
        (&["--layout", "2", "--replicas", "2"][..], "cannot be used with"),
        (&["--shards", "0"][..], "has no pod"),
    ] {
        let out = sandbox(&[&["start", "--local", "--dir", d], args].concat());
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    assert!(!dir.path().join("sandbox.json").exists(), "nothing started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_flags_reach_the_served_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for (args, layout, pods) in [
        (
            &["--layout", "2,1"][..],
            "2,1",
            &[
                "chi-sandbox-sandbox-0-0-0",
                "chi-sandbox-sandbox-0-1-0",
                "chi-sandbox-sandbox-1-0-0",
            ][..],
        ),
        (
            &["--shards", "2", "--replicas", "1"][..],
            "1,1",
            &["chi-sandbox-sandbox-0-0-0", "chi-sandbox-sandbox-1-0-0"][..],
        ),
    ] {
        let started = sandbox(&[&["start", "--local", "--dir", d], args].concat());
        assert!(started.status.success(), "{}", text(&started.stderr));
        assert!(
            text(&started.stdout).contains(&format!("layout {layout} (replicas per shard)")),
            "{}",
            text(&started.stdout)
        );
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("sandbox.json")).unwrap()).unwrap();
        assert!(sandbox(&["stop", "--dir", d]).status.success());
        assert_eq!(info["pods"], serde_json::json!(pods), "{args:?}");
    }
    // SANDBOX_LAYOUT, as `npm run sandbox:start` passes it on.
    let started = Command::new(env!("CARGO_BIN_EXE_sandbox"))
        .args(["start", "--local", "--dir", d])
        .env("SANDBOX_LAYOUT", "1,2")
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", text(&started.stderr));
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sandbox.json")).unwrap()).unwrap();
    assert!(sandbox(&["stop", "--dir", d]).status.success());
    assert_eq!(info["layout"], serde_json::json!([1, 2]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_protocols_flag_reaches_the_served_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let bad = sandbox(&["start", "--local", "--dir", d, "--exec-protocols", "v3"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("unknown exec protocol"),
        "{}",
        text(&bad.stderr)
    );

    let started = sandbox(&[
        "start",
        "--local",
        "--pods",
        "1",
        "--dir",
        d,
        "--exec-protocols",
        "v4",
    ]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sandbox.json")).unwrap()).unwrap();
    let stopped = sandbox(&["stop", "--dir", d]);
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    assert_eq!(info["exec_protocols"], serde_json::json!(["v4.channel.k8s.io"]));
}
