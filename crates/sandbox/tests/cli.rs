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
    let started = sandbox(&["start", "--pods", "2", "--dir", d]);
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
