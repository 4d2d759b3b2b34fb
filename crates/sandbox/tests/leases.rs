//! The `coordination.k8s.io/v1` Lease API against kubectl (both versions) and kube-rs: discovery,
//! apply/replace/delete, optimistic concurrency, RBAC and the LeaseError fault. One local pod, no
//! ClickHouse.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use clickhouse_schema_sandbox::{Fault, Sandbox, SandboxOptions};
use common::*;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Client, Error};

async fn local() -> Sandbox {
    Sandbox::start(SandboxOptions::local(1))
        .await
        .expect("sandbox starts")
}

fn leases(c: &Client) -> Api<Lease> {
    Api::namespaced(c.clone(), "sandbox")
}

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(30),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        }),
    }
}

fn rv(l: &Lease) -> u64 {
    l.metadata
        .resource_version
        .as_deref()
        .expect("resourceVersion")
        .parse()
        .expect("a number")
}

fn holder(l: &Lease) -> &str {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

/// The apiserver's error of a failed call; panics on success or on another kind of error.
fn api_error<T: std::fmt::Debug>(r: Result<T, Error>) -> kube::core::Status {
    match r {
        Err(Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn manifest(name: &str, holder: &str, resource_version: Option<&str>) -> String {
    let rv = resource_version
        .map(|v| format!("  resourceVersion: \"{v}\"\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: {name}\n{rv}  labels:\n    app: deploy\nspec:\n  holderIdentity: {holder}\n  leaseDurationSeconds: 30\n  renewTime: \"2026-01-01T00:00:00.000000Z\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_discovers_leases_and_finds_none_in_an_empty_namespace() {
    let sb = local().await;
    let kc = sb.kubeconfig_path().to_path_buf();
    for bin in [KUBECTL_133, KUBECTL_132] {
        let out = kubectl(bin, &kc, &["api-resources"], "").await;
        assert!(out.status.success(), "{bin}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("leases "))
            .unwrap_or_else(|| panic!("{bin}: no leases in\n{stdout}"));
        let columns: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            columns,
            ["leases", "coordination.k8s.io/v1", "true", "Lease"],
            "{bin}"
        );

        let named = kubectl(
            bin,
            &kc,
            &["api-resources", "--api-group=coordination.k8s.io", "-o", "name"],
            "",
        )
        .await;
        assert_eq!(text(&named.stdout).trim(), "leases.coordination.k8s.io", "{bin}");

        let none = kubectl(bin, &kc, &["get", "leases"], "").await;
        assert!(none.status.success(), "{bin}: {}", text(&none.stderr));
        assert_eq!(text(&none.stdout), "", "{bin}");
        assert_eq!(
            text(&none.stderr).trim(),
            "No resources found in sandbox namespace.",
            "{bin}"
        );
        // On a 404 kubectl asks whether the namespace exists, and says so when it does not.
        let missing = kubectl(bin, &kc, &["get", "lease", "deploy"], "").await;
        assert!(
            text(&missing.stderr).contains("leases.coordination.k8s.io \"deploy\" not found"),
            "{bin}: {}",
            text(&missing.stderr)
        );
        let elsewhere = kubectl(bin, &kc, &["-n", "nowhere", "get", "lease", "deploy"], "").await;
        assert!(
            text(&elsewhere.stderr).contains("namespaces \"nowhere\" not found"),
            "{bin}: {}",
            text(&elsewhere.stderr)
        );
    }
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_creates_and_updates_replace_conflicts_delete_deletes() {
    let sb = local().await;
    let kc = sb.kubeconfig_path().to_path_buf();
    for bin in [KUBECTL_133, KUBECTL_132] {
        sb.clear_api_log();
        let created = kubectl(
            bin,
            &kc,
            &["apply", "-f", "-"],
            &manifest("deploy", "deploy-a", None),
        )
        .await;
        assert!(created.status.success(), "{bin}: {}", text(&created.stderr));
        assert_eq!(
            text(&created.stdout).trim(),
            "lease.coordination.k8s.io/deploy created"
        );
        assert_eq!(text(&created.stderr), "", "{bin}: no warning");
        // Client-side apply of a new object: GET (404), then POST with server-side validation.
        let lease_calls: Vec<(String, Option<String>)> = sb
            .api_log()
            .into_iter()
            .filter(|r| r.path.contains("/leases"))
            .map(|r| (r.method, r.query))
            .collect();
        assert_eq!(
            lease_calls.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>(),
            ["GET", "POST"],
            "{bin}: {lease_calls:?}"
        );
        let post_query = lease_calls[1].1.as_deref().unwrap_or("");
        assert!(
            post_query.contains("fieldValidation=Strict"),
            "{bin}: {post_query}"
        );

        let get = |bin: &'static str| {
            let kc = kc.clone();
            async move {
                let out = kubectl(bin, &kc, &["get", "lease", "deploy", "-o", "json"], "").await;
                assert!(out.status.success(), "{bin}: {}", text(&out.stderr));
                serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
            }
        };
        let first = get(bin).await;
        let first_rv = first["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        assert_eq!(first["spec"]["holderIdentity"], "deploy-a");
        assert_eq!(first["spec"]["renewTime"], "2026-01-01T00:00:00.000000Z");
        assert!(
            first["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
                .as_str()
                .is_some_and(|a| a.contains("deploy-a")),
            "{first}"
        );

        sb.clear_api_log();
        let updated = kubectl(
            bin,
            &kc,
            &["apply", "-f", "-"],
            &manifest("deploy", "deploy-b", None),
        )
        .await;
        assert!(updated.status.success(), "{bin}: {}", text(&updated.stderr));
        assert_eq!(
            text(&updated.stdout).trim(),
            "lease.coordination.k8s.io/deploy configured"
        );
        assert!(
            sb.api_log()
                .iter()
                .any(|r| r.method == "PATCH" && r.path.ends_with("/leases/deploy")),
            "{bin}: apply of an existing object patches it"
        );
        let second = get(bin).await;
        assert_eq!(second["spec"]["holderIdentity"], "deploy-b");
        assert_eq!(second["metadata"]["uid"], first["metadata"]["uid"]);
        let second_rv: u64 = second["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(second_rv > first_rv.parse::<u64>().unwrap());

        let unchanged = kubectl(
            bin,
            &kc,
            &["apply", "-f", "-"],
            &manifest("deploy", "deploy-b", None),
        )
        .await;
        assert_eq!(
            text(&unchanged.stdout).trim(),
            "lease.coordination.k8s.io/deploy unchanged"
        );

        let table = kubectl(bin, &kc, &["get", "leases"], "").await;
        let rows: Vec<Vec<String>> = text(&table.stdout)
            .lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect();
        assert_eq!(rows[0], ["NAME", "HOLDER", "AGE"], "{bin}");
        assert_eq!(rows[1][..2], ["deploy", "deploy-b"], "{bin}");

        // A manifest carrying the resourceVersion of before the update: the write is refused.
        let stale = kubectl(
            bin,
            &kc,
            &["replace", "-f", "-"],
            &manifest("deploy", "deploy-c", Some(&first_rv)),
        )
        .await;
        assert_eq!(stale.status.code(), Some(1), "{bin}");
        assert!(
            text(&stale.stderr).contains(
                "Operation cannot be fulfilled on leases.coordination.k8s.io \"deploy\": the object has been modified; please apply your changes to the latest version and try again"
            ),
            "{bin}: {}",
            text(&stale.stderr)
        );
        assert_eq!(get(bin).await["spec"]["holderIdentity"], "deploy-b");
        // Without a resourceVersion, kubectl replace GETs the current one and the write goes through.
        let replaced = kubectl(
            bin,
            &kc,
            &["replace", "-f", "-"],
            &manifest("deploy", "deploy-c", None),
        )
        .await;
        assert!(replaced.status.success(), "{bin}: {}", text(&replaced.stderr));
        assert_eq!(get(bin).await["spec"]["holderIdentity"], "deploy-c");

        // A typo is refused by the server, as kubectl asks for strict field validation.
        let typo = manifest("typo", "x", None).replace("holderIdentity", "holder");
        let refused = kubectl(bin, &kc, &["apply", "-f", "-"], &typo).await;
        assert!(!refused.status.success(), "{bin}");
        assert!(
            text(&refused.stderr).contains("strict decoding error: unknown field \"spec.holder\""),
            "{bin}: {}",
            text(&refused.stderr)
        );

        let deleted = kubectl(bin, &kc, &["delete", "lease", "deploy"], "").await;
        assert!(deleted.status.success(), "{bin}: {}", text(&deleted.stderr));
        assert_eq!(
            text(&deleted.stdout).trim(),
            "lease.coordination.k8s.io \"deploy\" deleted"
        );
        let gone = kubectl(bin, &kc, &["get", "lease", "deploy"], "").await;
        assert_eq!(gone.status.code(), Some(1));
        assert!(
            text(&gone.stderr).contains("leases.coordination.k8s.io \"deploy\" not found"),
            "{bin}: {}",
            text(&gone.stderr)
        );
    }
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_create_get_list_replace_delete_with_resource_versions() {
    let sb = local().await;
    let admin = client(&sb, "sandbox").await;
    let api = leases(&admin);
    let created = api
        .create(&PostParams::default(), &lease("deploy", "a"))
        .await
        .unwrap();
    assert_eq!(holder(&created), "a");
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    let again = api_error(api.create(&PostParams::default(), &lease("deploy", "a")).await);
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(
        again.message,
        "leases.coordination.k8s.io \"deploy\" already exists"
    );

    let got = api.get("deploy").await.unwrap();
    assert_eq!(got, created);
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items, vec![created.clone()]);
    assert!(list.metadata.resource_version.is_some());
    let everywhere: Api<Lease> = Api::all(admin.clone());
    assert_eq!(
        everywhere.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    let mut next = got.clone();
    next.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let replaced = api
        .replace("deploy", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(holder(&replaced), "b");
    assert!(rv(&replaced) > rv(&created), "the resourceVersion grows");
    assert_eq!(replaced.metadata.uid, created.metadata.uid);

    // `next` still carries the resourceVersion the replace made stale.
    next.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let stale = api_error(api.replace("deploy", &PostParams::default(), &next).await);
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"deploy\": the object has been modified; please apply your changes to the latest version and try again"
    );
    // Lease does not allow unconditional updates: no resourceVersion is Invalid, not a blind write.
    next.metadata.resource_version = None;
    let blind = api_error(api.replace("deploy", &PostParams::default(), &next).await);
    assert_eq!(
        (blind.code, blind.reason.as_str()),
        (422, "Invalid"),
        "{}",
        blind.message
    );
    assert_eq!(holder(&api.get("deploy").await.unwrap()), "b");
    // A PUT of a missing lease creates it (the Lease strategy allows create-on-update).
    let made = api
        .replace("other", &PostParams::default(), &lease("other", "z"))
        .await
        .unwrap();
    assert!(rv(&made) > rv(&replaced));

    let precondition = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: created.metadata.resource_version.clone(),
            uid: None,
        }),
        ..Default::default()
    };
    let refused = api_error(api.delete("deploy", &precondition).await);
    assert_eq!((refused.code, refused.reason.as_str()), (409, "Conflict"));
    assert!(
        refused
            .message
            .contains("Precondition failed: ResourceVersion in precondition")
    );
    let status = api
        .delete("deploy", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("a Status");
    assert!(status.is_success(), "{status:?}");
    let gone = api_error(api.get("deploy").await);
    assert_eq!((gone.code, gone.reason.as_str()), (404, "NotFound"));
    assert_eq!(gone.message, "leases.coordination.k8s.io \"deploy\" not found");
    let details = gone.details.expect("details");
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("deploy", "coordination.k8s.io", "leases")
    );
    assert_eq!(
        api_error(api.delete("deploy", &DeleteParams::default()).await).code,
        404
    );
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_user_and_the_admin_touch_leases() {
    let sb = local().await;
    let minimal = leases(&client(&sb, "sandbox-minimal").await);
    let get = api_error(minimal.get("deploy").await);
    assert_eq!(get.code, 403);
    assert_eq!(
        get.message,
        "leases.coordination.k8s.io \"deploy\" is forbidden: User \"sandbox-minimal\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"sandbox\""
    );
    assert_eq!(
        get.details.as_ref().map(|d| (d.group.as_str(), d.kind.as_str())),
        Some(("coordination.k8s.io", "leases"))
    );
    let list = api_error(minimal.list(&ListParams::default()).await);
    assert_eq!(
        list.message,
        "leases.coordination.k8s.io is forbidden: User \"sandbox-minimal\" cannot list resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"sandbox\""
    );
    let create = api_error(
        minimal
            .create(&PostParams::default(), &lease("deploy", "a"))
            .await,
    );
    assert_eq!(create.code, 403);
    assert!(
        create.message.contains("cannot create resource \"leases\""),
        "{}",
        create.message
    );
    let no_exec = leases(&client(&sb, "sandbox-no-exec").await);
    assert_eq!(api_error(no_exec.list(&ListParams::default()).await).code, 403);

    let lease_user = client(&sb, "sandbox-lease").await;
    let api = leases(&lease_user);
    let created = api
        .create(&PostParams::default(), &lease("deploy", "a"))
        .await
        .unwrap();
    assert_eq!(api.list(&ListParams::default()).await.unwrap().items.len(), 1);
    let mut next = api.get("deploy").await.unwrap();
    next.spec.as_mut().unwrap().holder_identity = Some("b".into());
    assert!(
        rv(&api
            .replace("deploy", &PostParams::default(), &next)
            .await
            .unwrap())
            > rv(&created)
    );
    assert!(api.delete("deploy", &DeleteParams::default()).await.is_ok());
    // And no more than the product's pod rights besides: list and exec, not get.
    assert_eq!(
        pods(&lease_user)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let exec = kube_exec(
        &lease_user,
        "chi-sandbox-sandbox-0-0-0",
        "clickhouse",
        &["echo", "ok"],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(exec.stdout, "ok\n");
    assert_eq!(
        api_error(pods(&lease_user).get("chi-sandbox-sandbox-0-0-0").await).code,
        403
    );
    assert_eq!(sb.exec_log()[0].user, "sandbox-lease");

    let kc = sb.kubeconfig_path().to_path_buf();
    let refused = kubectl(
        KUBECTL_133,
        &kc,
        &["--context", "sandbox-minimal", "get", "leases"],
        "",
    )
    .await;
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr)
            .contains("cannot list resource \"leases\" in API group \"coordination.k8s.io\""),
        "{}",
        text(&refused.stderr)
    );
    let allowed = kubectl(
        KUBECTL_133,
        &kc,
        &["--context", "sandbox-lease", "get", "leases"],
        "",
    )
    .await;
    assert!(allowed.status.success(), "{}", text(&allowed.stderr));
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_error_faults_reach_kube_rs_once_each() {
    let sb = local().await;
    let c = client(&sb, "sandbox-lease").await;
    let api = leases(&c);
    let created = api
        .create(&PostParams::default(), &lease("deploy", "a"))
        .await
        .unwrap();

    sb.inject(Fault::LeaseError {
        namespace: None,
        name: Some("deploy".into()),
        verb: Some("update".into()),
        count: 1,
        status: 409,
    });
    // Scoped to updates: a read passes.
    assert_eq!(api.get("deploy").await.unwrap(), created);
    let mut next = created.clone();
    next.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let conflict = api_error(api.replace("deploy", &PostParams::default(), &next).await);
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert!(
        conflict.message.contains("the object has been modified"),
        "{}",
        conflict.message
    );
    // Used up: the same write with the same (still current) resourceVersion now goes through.
    assert_eq!(
        holder(
            &api.replace("deploy", &PostParams::default(), &next)
                .await
                .unwrap()
        ),
        "b"
    );

    sb.inject(Fault::LeaseError {
        namespace: Some("sandbox".into()),
        name: None,
        verb: None,
        count: 1,
        status: 500,
    });
    let internal = api_error(api.get("deploy").await);
    assert_eq!((internal.code, internal.reason.as_str()), (500, "InternalError"));
    assert_eq!(holder(&api.get("deploy").await.unwrap()), "b");
    assert!(sb.armed_faults().is_empty(), "{:?}", sb.armed_faults());

    // The control API's JSON form, with its defaults (count 1, status 409).
    let admin = client(&sb, "sandbox").await;
    let req = http::Request::post("/sandbox/faults")
        .header("content-type", "application/json")
        .body(br#"{"kind":"lease_error","verb":"list"}"#.to_vec())
        .unwrap();
    admin.request_text(req).await.unwrap();
    assert_eq!(api_error(api.list(&ListParams::default()).await).code, 409);
    assert_eq!(api.list(&ListParams::default()).await.unwrap().items.len(), 1);
    sb.shutdown().await.unwrap();
}

/// The guarantee the product's deploy lock rests on: concurrent read-modify-write cycles that
/// retry on 409 lose no update, whatever the interleaving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_read_modify_write_loses_no_update() {
    const WRITERS: u32 = 8;
    let sb = local().await;
    let c = client(&sb, "sandbox-lease").await;
    let api = leases(&c);
    let mut initial = lease("deploy", "nobody");
    initial.metadata.annotations = Some(BTreeMap::from([("counter".to_string(), "0".to_string())]));
    let created = api.create(&PostParams::default(), &initial).await.unwrap();

    let successes = Arc::new(AtomicU32::new(0));
    let conflicts = Arc::new(AtomicU32::new(0));
    // Every writer reads before any writes in the first round, so all but one of them conflict.
    let first_read = Arc::new(tokio::sync::Barrier::new(WRITERS as usize));
    let tasks: Vec<_> = (0..WRITERS)
        .map(|i| {
            let (api, successes, conflicts, first_read) = (
                api.clone(),
                successes.clone(),
                conflicts.clone(),
                first_read.clone(),
            );
            tokio::spawn(async move {
                let mut first = true;
                loop {
                    let mut l = api.get("deploy").await.unwrap();
                    if std::mem::take(&mut first) {
                        first_read.wait().await;
                    }
                    let annotations = l.metadata.annotations.get_or_insert_default();
                    let n: u32 = annotations["counter"].parse().unwrap();
                    annotations.insert("counter".into(), (n + 1).to_string());
                    l.spec.as_mut().unwrap().holder_identity = Some(format!("writer-{i}"));
                    match api.replace("deploy", &PostParams::default(), &l).await {
                        Ok(_) => {
                            successes.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        Err(Error::Api(s)) if s.code == 409 && s.reason == "Conflict" => {
                            conflicts.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("writer {i}: {e}"),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let last = api.get("deploy").await.unwrap();
    let counter: u32 = last.metadata.annotations.as_ref().unwrap()["counter"]
        .parse()
        .unwrap();
    assert_eq!(successes.load(Ordering::SeqCst), WRITERS);
    assert_eq!(counter, WRITERS, "every successful write counted once");
    assert!(conflicts.load(Ordering::SeqCst) >= WRITERS - 1);
    // One resourceVersion per successful write, none for refused ones.
    assert_eq!(rv(&last), rv(&created) + u64::from(WRITERS));
    let puts = sb.api_log().iter().filter(|r| r.method == "PUT").count();
    assert_eq!(
        puts as u32,
        WRITERS + conflicts.load(Ordering::SeqCst),
        "each attempt is one PUT"
    );
    sb.shutdown().await.unwrap();
}
