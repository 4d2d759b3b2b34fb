//! The ambient configuration: `KUBECONFIG`, `~/.kube/config`, in-cluster.
//!
//! These steps change the process environment, so they live alone in this
//! binary, in one test, on one current-thread runtime: the environment is
//! changed only between `block_on` calls, when no task runs and no other
//! thread of this test could read it.

mod common;

use std::path::Path;

use clickhouse_schema_core::config::KubeConfigOptions;
use clickhouse_schema_core::kubernetes::cluster_id::{ClusterEndpoint, cluster_id};
use clickhouse_schema_core::transport::PodLister;
use clickhouse_schema_kube::{KubeTransport, connect, resolve_endpoint};
use clickhouse_schema_sandbox::{Sandbox, SandboxOptions};
use common::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Sets (or with `None` removes) an environment variable.
fn env(name: &str, value: Option<&Path>) {
    // SAFETY: called between `block_on`s of a current-thread runtime in this
    // binary's only test, so no other thread reads the environment meanwhile.
    unsafe {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
}

#[test]
fn ambient_kubeconfig_then_home_then_in_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox_dir = dir.path().join("sandbox");
    let kubeconfig = sandbox_dir.join("kubeconfig");
    let empty_home = dir.path().join("home-empty");
    std::fs::create_dir_all(&empty_home).expect("home");
    env("KUBERNETES_SERVICE_HOST", None);
    env("KUBERNETES_SERVICE_PORT", None);

    // Phase 1: KUBECONFIG names the sandbox's kubeconfig (written when the sandbox starts).
    env("KUBECONFIG", Some(&kubeconfig));
    env("HOME", Some(&empty_home));
    let rt = runtime();
    let sb = rt.block_on(async {
        Sandbox::start(SandboxOptions {
            dir: Some(sandbox_dir.clone()),
            ..SandboxOptions::local(3)
        })
        .await
        .expect("sandbox starts")
    });
    let expected = expected_endpoint(&kubeconfig, None).expect("current context");
    rt.block_on(async {
        let conn = connect(None).await.expect("ambient KUBECONFIG");
        assert_eq!(conn.endpoint.as_ref(), Some(&expected));
        assert_eq!(conn.cluster_id(), Some(cluster_id(&expected)));
        let pods = KubeTransport::from(&conn)
            .list_pods(NAMESPACE, &selector())
            .await
            .expect("lists");
        assert_eq!(pods.len(), 3);
        // Options without a source still use the ambient file, with overrides applied.
        let o = KubeConfigOptions {
            context: Some("sandbox-insecure".into()),
            ..Default::default()
        };
        let conn = connect(Some(&o)).await.expect("ambient + context");
        assert_eq!(
            conn.endpoint,
            expected_endpoint(&kubeconfig, Some("sandbox-insecure"))
        );
        // loadFromDefault: true is the same thing said explicitly.
        let o = KubeConfigOptions {
            load_from_default: Some(true),
            ..Default::default()
        };
        assert_eq!(
            resolve_endpoint(Some(&o)).expect("resolves"),
            Some(expected.clone())
        );
    });

    // Phase 2: KUBECONFIG unset, ~/.kube/config holds the same file.
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".kube")).expect("home");
    std::fs::copy(&kubeconfig, home.join(".kube/config")).expect("copied");
    env("KUBECONFIG", None);
    env("HOME", Some(&home));
    rt.block_on(async {
        let conn = connect(None).await.expect("~/.kube/config");
        assert_eq!(conn.endpoint.as_ref(), Some(&expected));
        let pods = KubeTransport::from(&conn)
            .list_pods(NAMESPACE, &selector())
            .await
            .expect("lists");
        assert_eq!(pods.len(), 3);
    });

    // Phase 3: a KUBECONFIG that does not exist is an error, not a silent fallback.
    let missing = dir.path().join("missing-kubeconfig");
    env("KUBECONFIG", Some(&missing));
    rt.block_on(async {
        let err = connect(None).await.expect_err("missing file");
        assert!(
            err.message.contains(&missing.display().to_string()),
            "{}",
            err.message
        );
    });

    // Phase 4: no kubeconfig anywhere and not in a pod.
    env("KUBECONFIG", None);
    env("HOME", Some(&empty_home));
    rt.block_on(async {
        let err = connect(None).await.expect_err("nothing");
        assert!(
            err.message.contains("no Kubernetes configuration found"),
            "{}",
            err.message
        );
    });

    // Phase 5: in a pod. The identity needs only the environment; connecting
    // needs the service account files, which this machine does not have.
    env("KUBERNETES_SERVICE_HOST", Some(Path::new("10.96.0.1")));
    env("KUBERNETES_SERVICE_PORT", Some(Path::new("443")));
    rt.block_on(async {
        assert_eq!(
            resolve_endpoint(None).expect("in-cluster"),
            Some(ClusterEndpoint {
                cluster_name: "inCluster".into(),
                server: "https://10.96.0.1:443".into(),
                ca_data: None,
                ca_file: Some("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt".into()),
                skip_tls_verify: false,
            })
        );
        if !Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").exists() {
            let err = connect(None).await.expect_err("no service account here");
            assert!(
                err.message.contains("in-cluster configuration"),
                "{}",
                err.message
            );
        }
        let o = KubeConfigOptions {
            context: Some("x".into()),
            ..Default::default()
        };
        let err = resolve_endpoint(Some(&o)).expect_err("no contexts in-cluster");
        assert!(err.message.contains("kubeConfig.context 'x'"), "{}", err.message);
    });
    env("KUBERNETES_SERVICE_HOST", None);
    env("KUBERNETES_SERVICE_PORT", None);

    rt.block_on(async { sb.shutdown().await.expect("shutdown") });
}
