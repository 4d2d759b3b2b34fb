//! A sandbox of two shards of two replicas, seen as the product and an operator see a production
//! installation of the ClickHouse operator: pod names and labels, each pod's own hostname, pods that
//! reach each other by name, replication within a shard and a Distributed table across shards; then
//! adding, replacing and wiping a pod keep that layout, and the faults of the new parts (a replica's
//! server down, ZooKeeper paused) behave as they would there. Witnesses: kubectl and kube-rs. Needs
//! root and the packages clickhouse-server, clickhouse-client and zookeeper.

mod common;

use std::time::{Duration, Instant};

use clickhouse_schema_sandbox::{AddPod, Layout, Sandbox, SandboxOptions};
use common::*;
use kube::api::ListParams;

/// The product's command: SQL on stdin, never in argv.
const CLIENT: &str = r#"clickhouse-client --port 9000 --password "${CLICKHOUSE_PASSWORD:-}""#;

fn pod(shard: u32, replica: u32) -> String {
    format!("chi-sandbox-sandbox-{shard}-{replica}-0")
}

async fn sql(c: &kube::Client, pod: &str, statement: &str) -> String {
    let out = kube_exec(c, pod, "clickhouse", &["sh", "-c", CLIENT], statement.as_bytes())
        .await
        .expect("exec");
    assert_eq!(out.exit_code(), Some(0), "{statement} on {pod}: {}", out.stderr);
    out.stdout
}

async fn shell(c: &kube::Client, pod: &str, script: &str) -> String {
    let out = kube_exec(c, pod, "clickhouse", &["sh", "-c", script], b"")
        .await
        .expect("exec");
    assert_eq!(out.exit_code(), Some(0), "{script} on {pod}: {}", out.stderr);
    out.stdout
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_of_two_replicas() {
    let started = Instant::now();
    // A number of its own, so that no other sandbox takes it once this one stops and its namespaces
    // read as this one's leftovers (see `assert_nothing_left`).
    let _reserved = clickhouse_schema_sandbox_hosts::reserve_instance(189).unwrap();
    let sb = Sandbox::start(SandboxOptions {
        layout: Layout::grid(2, 2),
        instance: Some(189),
        ..SandboxOptions::default()
    })
    .await
    .expect("a 2x2 sandbox starts");
    eprintln!("2x2 sandbox ready in {:.2?}", started.elapsed());
    let kc = sb.kubeconfig_path().to_path_buf();
    let c = client(&sb, "sandbox").await;

    // Names and labels as the operator sets them; a label selector picks a shard.
    let shard1 = kubectl(
        KUBECTL_133,
        &kc,
        &[
            "get",
            "pods",
            "-l",
            "clickhouse.altinity.com/shard=1",
            "-o",
            "name",
        ],
        "",
    )
    .await;
    assert_eq!(
        names(&shard1),
        [format!("pod/{}", pod(1, 0)), format!("pod/{}", pod(1, 1))]
    );
    let listed = pods(&c).list(&ListParams::default()).await.unwrap();
    for p in &listed.items {
        let name = p.metadata.name.clone().unwrap();
        let labels = p.metadata.labels.clone().unwrap();
        let (shard, replica) = (&name[20..21], &name[22..23]);
        assert_eq!(labels["clickhouse.altinity.com/chi"], "sandbox", "{name}");
        assert_eq!(labels["clickhouse.altinity.com/cluster"], "sandbox", "{name}");
        assert_eq!(labels["clickhouse.altinity.com/shard"], shard, "{name}");
        assert_eq!(labels["clickhouse.altinity.com/replica"], replica, "{name}");
    }
    assert_eq!(listed.items.len(), 4);

    // Each pod is its own host: hostname, hostName(), and the others by pod and service name.
    for (s, r) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        assert_eq!(shell(&c, &pod(s, r), "hostname").await.trim(), pod(s, r));
        assert_eq!(sql(&c, &pod(s, r), "SELECT hostName()").await.trim(), pod(s, r));
    }
    let kubectl_hostname = kubectl(KUBECTL_132, &kc, &["exec", &pod(1, 1), "--", "hostname"], "").await;
    assert_eq!(text(&kubectl_hostname.stdout).trim(), pod(1, 1));
    let other_ip = sb.pod(&pod(1, 1)).unwrap().ip.unwrap().to_string();
    let resolved = shell(
        &c,
        &pod(0, 0),
        "getent hosts chi-sandbox-sandbox-1-1-0 chi-sandbox-sandbox-1-1",
    )
    .await;
    assert_eq!(
        resolved
            .lines()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect::<Vec<_>>(),
        [other_ip.as_str(), other_ip.as_str()]
    );
    assert_eq!(
        sql(&c, &pod(0, 0), "SELECT shard_num, host_name FROM system.clusters WHERE cluster = 'sandbox' ORDER BY shard_num, replica_num").await,
        "1\tchi-sandbox-sandbox-0-0\n1\tchi-sandbox-sandbox-0-1\n2\tchi-sandbox-sandbox-1-0\n2\tchi-sandbox-sandbox-1-1\n"
    );

    // Replication within a shard through ZooKeeper; a Distributed table over both shards.
    sql(&c, &pod(0, 0), "CREATE DATABASE shop ON CLUSTER sandbox").await;
    sql(
        &c,
        &pod(0, 0),
        "CREATE TABLE shop.orders ON CLUSTER sandbox (id UInt64) \
         ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/shop/orders', '{replica}') ORDER BY id",
    )
    .await;
    sql(
        &c,
        &pod(0, 0),
        "CREATE TABLE shop.orders_all ON CLUSTER sandbox AS shop.orders \
         ENGINE = Distributed(sandbox, shop, orders, id)",
    )
    .await;
    sql(&c, &pod(0, 0), "INSERT INTO shop.orders VALUES (1), (2)").await;
    sql(&c, &pod(1, 1), "INSERT INTO shop.orders VALUES (3)").await;
    eventually("the shard 0 rows on its other replica", async || {
        sql(&c, &pod(0, 1), "SELECT count() FROM shop.orders")
            .await
            .trim()
            == "2"
    })
    .await;
    eventually("the shard 1 row on its other replica", async || {
        sql(&c, &pod(1, 0), "SELECT count() FROM shop.orders")
            .await
            .trim()
            == "1"
    })
    .await;
    assert_eq!(
        sql(&c, &pod(1, 0), "SELECT count() FROM shop.orders_all")
            .await
            .trim(),
        "3"
    );

    // A replica added to shard 1 is named, labelled and wired as its third replica.
    let added = sb
        .add_pod(AddPod {
            shard: Some(1),
            ..AddPod::clickhouse()
        })
        .await
        .unwrap();
    assert_eq!(added.name, pod(1, 2));
    assert_eq!(added.labels["clickhouse.altinity.com/shard"], "1");
    assert_eq!(added.labels["clickhouse.altinity.com/replica"], "2");
    assert_eq!(
        sql(
            &c,
            &pod(0, 0),
            "SELECT count() FROM system.clusters WHERE cluster = 'sandbox' AND shard_num = 2"
        )
        .await
        .trim(),
        "3"
    );
    assert_eq!(
        sql(
            &c,
            &pod(0, 0),
            // The sandbox's passwords are hex: no quoting needed.
            &format!(
                "SELECT hostName() FROM remote('chi-sandbox-sandbox-1-2', system.one, 'default', '{}')",
                sb.passwords().default
            )
        )
        .await
        .trim(),
        pod(1, 2)
    );
    assert_eq!(
        sql(
            &c,
            &pod(1, 2),
            "SELECT count() FROM system.databases WHERE name = 'shop'"
        )
        .await
        .trim(),
        "0"
    );

    // Replaced: new uid, empty disk, same place. Wiped: same uid, empty disk, same place.
    let before = sb.pod(&pod(0, 1)).unwrap();
    let replaced = sb.replace_pod(&pod(0, 1)).await.unwrap();
    assert_ne!(replaced.uid, before.uid);
    let wiped = sb.wipe_pod(&pod(1, 0)).await.unwrap();
    assert_eq!(wiped.uid, sb.pod(&pod(1, 0)).unwrap().uid);
    assert_eq!(wiped.restart_count, 1);
    for (s, r) in [(0, 1), (1, 0)] {
        assert_eq!(
            sql(
                &c,
                &pod(s, r),
                "SELECT count() FROM system.databases WHERE name = 'shop'"
            )
            .await
            .trim(),
            "0"
        );
        assert_eq!(
            sql(
                &c,
                &pod(s, r),
                "SELECT substitution FROM system.macros WHERE macro = 'shard'"
            )
            .await
            .trim(),
            s.to_string()
        );
        assert_eq!(shell(&c, &pod(s, r), "hostname").await.trim(), pod(s, r));
    }

    // One replica's server down while the others serve.
    sb.stop_server(&pod(1, 1)).await.unwrap();
    let down = kube_exec(&c, &pod(1, 1), "clickhouse", &["sh", "-c", CLIENT], b"SELECT 1")
        .await
        .unwrap();
    assert_eq!(down.exit_code(), Some(210), "{}", down.stderr);
    assert_eq!(sql(&c, &pod(1, 2), "SELECT 1").await.trim(), "1");
    sb.start_server(&pod(1, 1)).await.unwrap();

    // ZooKeeper paused: ON CLUSTER cannot queue its task and fails when the ZooKeeper operation times
    // out (10 s in 18.16); resumed, it goes through again (after the server's new session).
    sb.pause_zookeeper().await.unwrap();
    let paused_at = Instant::now();
    let stalled = kube_exec(
        &c,
        &pod(0, 0),
        "clickhouse",
        &["sh", "-c", CLIENT],
        b"CREATE DATABASE stalled ON CLUSTER sandbox",
    )
    .await
    .unwrap();
    let waited = paused_at.elapsed();
    sb.resume_zookeeper().await.unwrap();
    assert_ne!(
        stalled.exit_code(),
        Some(0),
        "ON CLUSTER went through a paused ZooKeeper"
    );
    assert!(
        waited >= Duration::from_secs(2),
        "it failed at once ({waited:?}) instead of waiting"
    );
    eprintln!(
        "ON CLUSTER, ZooKeeper paused: {waited:.1?}, {}",
        stalled.stderr.trim()
    );
    eventually("ON CLUSTER after ZooKeeper resumed", async || {
        let out = kube_exec(
            &c,
            &pod(0, 0),
            "clickhouse",
            &["sh", "-c", CLIENT],
            b"CREATE DATABASE IF NOT EXISTS resumed ON CLUSTER sandbox",
        )
        .await
        .unwrap();
        out.exit_code() == Some(0)
    })
    .await;

    let dir = sb.dir().to_path_buf();
    let instance = sb.info().instance.expect("hosts on an instance");
    sb.shutdown().await.unwrap();
    assert_nothing_left(instance, &dir);
}
