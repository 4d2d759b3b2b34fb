//! Create/update and delete of a schema resource, over the reconcile runs.
//!
//! `apply` decides whether anything has to run at all, runs it, and returns
//! the state to record. Every path that does not finish cleanly returns an
//! error and no state, so a failed or partial apply is never recorded and the
//! next converge starts over with the whole list.

use crate::config::fingerprint::fingerprint;
use crate::config::{ConvergeMode, Execution, OnDelete, ResolvedConfig};
use crate::converge::Converge;
use crate::coordination::ledger::LedgerWrite;
use crate::coordination::ownership::{ledger_covered, ledger_destroyed};
use crate::error::{ClickHouseSchemaError, ErrorKind};
use crate::live_schema::{PodReport, VerifyPlan};
use crate::reconcile::{Failure, FanoutStart, Run, Verification, bounded};
use crate::state::{PodRef, SchemaState, record, statement_count};
use crate::transport::{Clock, Cluster, Executor, LeaseApi, PodInfo, PodLister};

/// What `apply` did, for logs and tests; the state is what gets recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// Nothing changed: the previous state is returned as it was.
    Unchanged,
    /// Statements ran; `pods` are the pods they ran on in this apply.
    Applied {
        /// Names of those pods.
        pods: Vec<String>,
    },
}

/// Why an apply has to run, or that it does not.
#[derive(Debug, Clone)]
enum Decision {
    /// Same content, place, cluster and (fanout) live pod set.
    Unchanged,
    /// Run the whole list on every selected pod.
    ApplyAll { reason: String, why: PlanWhy },
    /// Only the pod set changed: the live observation, and the pods the
    /// previous state proves are covered (same name and uid).
    NewPodsOnly {
        reason: String,
        live: Vec<PodInfo>,
        covered: Vec<PodRef>,
    },
}

/// The no-op rules, in one place for `apply` and `plan`: with the same
/// fingerprint, target and cluster identity, an onCluster resource is
/// unchanged without any call, and a fanout resource lists pods once and is
/// unchanged when the live set equals the recorded one (by name and uid).
async fn decide<T: PodLister + Executor, C: Clock>(
    run: &Run<'_, T, C>,
    config: &ResolvedConfig,
    fingerprint: &str,
    previous: Option<&SchemaState>,
    cluster_id: Option<&str>,
) -> Result<Decision, ClickHouseSchemaError> {
    let Some(prev) = previous else {
        return Ok(Decision::ApplyAll {
            reason: "nothing has been applied yet".to_owned(),
            why: PlanWhy::FirstApply,
        });
    };
    if prev.fingerprint != fingerprint {
        return Ok(Decision::ApplyAll {
            reason: "the statements, settings, client or execution model changed".to_owned(),
            why: PlanWhy::StatementsChanged,
        });
    }
    if !prev.target.matches(&config.target) {
        return Ok(Decision::ApplyAll {
            reason: "the target (namespace, selector or container) changed".to_owned(),
            why: PlanWhy::TargetChanged,
        });
    }
    if prev.cluster_id.as_deref() != cluster_id {
        return Ok(Decision::ApplyAll {
            reason: "the kubeconfig points at another cluster".to_owned(),
            why: PlanWhy::ClusterChanged,
        });
    }
    if let Execution::OnCluster { .. } = config.execution {
        return Ok(Decision::Unchanged);
    }
    let live = run.list_matching().await?;
    let live_refs: Vec<PodRef> = live.iter().map(PodRef::of).collect();
    if prev.pod_set_matches(&live_refs) {
        return Ok(Decision::Unchanged);
    }
    let reason = pod_set_change(prev, &live_refs);
    Ok(Decision::NewPodsOnly {
        reason,
        live,
        covered: prev.covered_pods(),
    })
}

/// `pods added: a; replaced: b; removed: c`, for plans and logs.
fn pod_set_change(prev: &SchemaState, live: &[PodRef]) -> String {
    let recorded = &prev.pods;
    let by_name = |pods: &[PodRef], name: &str| pods.iter().find(|p| p.name == name).cloned();
    let mut added = Vec::new();
    let mut replaced = Vec::new();
    for pod in live {
        match by_name(recorded, &pod.name) {
            None => added.push(pod.name.as_str()),
            Some(old) if old.uid != pod.uid => replaced.push(pod.name.as_str()),
            Some(_) => {}
        }
    }
    let removed: Vec<&str> = recorded
        .iter()
        .filter(|p| by_name(live, &p.name).is_none())
        .map(|p| p.name.as_str())
        .collect();
    let mut parts = Vec::new();
    for (what, names) in [("added", added), ("replaced", replaced), ("removed", removed)] {
        if !names.is_empty() {
            parts.push(format!("{what}: {}", names.join(", ")));
        }
    }
    format!("the pod set changed ({})", parts.join("; "))
}

/// Why an apply would run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PlanWhy {
    /// Nothing was recorded: every statement on every selected pod.
    FirstApply,
    /// The statements, settings, client or execution model changed: every statement on every
    /// selected pod.
    StatementsChanged,
    /// The target (namespace, selector, container) changed: every statement on every pod it selects.
    TargetChanged,
    /// The kubeconfig points at another cluster: every statement on every selected pod there.
    ClusterChanged,
    /// Only the pod set changed: every statement on the pods in `pods` (new or replaced).
    PodSetChanged,
}

/// Why a pod is in a plan of only some pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PodWhy {
    /// No pod of that name is recorded.
    NewPod,
    /// A pod of that name is recorded with another uid: its disk may be new.
    ReplacedPod,
}

/// One pod an apply would run the statements on, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct PlannedPod {
    /// The pod's name.
    pub pod: String,
    /// Why it is in the plan: no pod of that name is recorded (`newPod`), or one is, with
    /// another uid (`replacedPod`: its disk may be new).
    #[cfg_attr(feature = "napi", napi(ts_type = "'newPod' | 'replacedPod'"))]
    pub why: PodWhy,
}

/// One statement of the list, as an apply would run it: what it declares, if anything.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct PlannedStatement {
    /// Its index in `statements`.
    #[cfg_attr(feature = "napi", napi(ts_type = "number"))]
    pub index: usize,
    /// Its leading keywords as the statement's kind: `CREATE TABLE IF NOT EXISTS`, `ALTER`, ...
    pub verb: String,
    /// The object it declares (`database.name`, or a database), when it declares one.
    pub object: Option<String>,
}

/// What [`plan`] found: whether an apply would run anything, where, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false, js_name = "PlanResult")
)]
pub struct PlanOutcome {
    /// Whether an apply would run any statement.
    pub changed: bool,
    /// Why an apply would run, in words; absent when it would not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why an apply would run; absent when it would not. `firstApply`, `statementsChanged`,
    /// `targetChanged` and `clusterChanged` run every statement on every selected pod;
    /// `podSetChanged` runs them on `pods` only.
    #[cfg_attr(
        feature = "napi",
        napi(
            ts_type = "'firstApply' | 'statementsChanged' | 'targetChanged' | 'clusterChanged' | 'podSetChanged'"
        )
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<PlanWhy>,
    /// The apply would run on every pod the execution model selects (under onCluster: once,
    /// on the first Ready pod); `pods` is then empty, since which pods those are is only known
    /// when the apply lists them.
    pub every_pod: bool,
    /// The pods an apply would run the statements on, when only some would (`PodSetChanged`).
    pub pods: Vec<PlannedPod>,
    /// Every statement an apply would run, in order (every one of them runs on each pod);
    /// empty when it would not run.
    pub statements: Vec<PlannedStatement>,
    /// Under `converge: 'additive'`, when an apply would run: per pod, what convergence would
    /// do to the objects that differ today (the ALTERs and replacements, the columns it keeps,
    /// what it refuses), from one live-schema check per pod. Empty otherwise.
    pub converge: Vec<crate::converge::PodPlan>,
    /// With a `rebuild` prop, when an apply would run every statement: each allowed table that
    /// differs in a way only a rebuild changes, the pods it would be rebuilt on, and the refusal
    /// the apply would fail with, if any; from one live-schema check per pod and one inspection
    /// per pod that holds such a table, which only reads. Empty otherwise.
    pub rebuild: Vec<crate::rebuild::PlannedRebuild>,
}

/// Would an apply run anything, where, and why? Makes exactly the calls the no-op check of
/// `apply` makes (one pod list under fanout with an unchanged fingerprint, none otherwise)
/// and runs no statement.
pub async fn plan<T: PodLister + Executor, C: Clock>(
    resource_id: &str,
    config: &ResolvedConfig,
    previous: Option<&SchemaState>,
    cluster: &Cluster<'_, T, C>,
) -> Result<PlanOutcome, ClickHouseSchemaError> {
    let run = Run::new(
        resource_id,
        config,
        &config.target,
        cluster.transport,
        cluster.clock,
    )
    .with_cancel(cluster.cancel)
    .with_events(cluster.events)
    // What the rebuild's survey reads as a reason to rebuild depends on it.
    .with_converge((config.converge == ConvergeMode::Additive).then(|| converge_options(config)));
    let fingerprint = fingerprint(config);
    let decision = decide(
        &run,
        config,
        &fingerprint,
        previous,
        cluster.cluster_id.as_deref(),
    )
    .await?;
    let statements = || planned_statements(config);
    // Convergence's plan: one check per pod, only when an apply would run (an unchanged
    // resource costs what it did: a pod list under fanout, no exec).
    let converge = match (&decision, config.converge) {
        (Decision::Unchanged, _) | (_, ConvergeMode::Off) => Vec::new(),
        (_, ConvergeMode::Additive) => {
            let verify_plan =
                VerifyPlan::new(&config.statements, &config.client.database).with_server_version();
            // The pods the apply would run on: under NewPodsOnly, those the state does not cover.
            let pods: Vec<PodInfo> = match &decision {
                Decision::NewPodsOnly { live, covered, .. } => live
                    .iter()
                    .filter(|p| !covered.iter().any(|c| c.name == p.name && c.uid == p.uid))
                    .cloned()
                    .collect(),
                _ => run.list_matching().await?,
            };
            // Under onCluster the first is where the apply converges, the others are compared.
            let ready: Vec<PodInfo> = pods
                .into_iter()
                .filter(|p| p.ready && p.has_container(&config.target.container))
                .collect();
            if verify_plan.is_empty() {
                Vec::new()
            } else {
                run.plan_converge(&verify_plan, converge_options(config), &ready)
                    .await?
            }
        }
    };
    // The rebuild's plan: only where the apply rebuilds (every statement runs; new pods alone
    // get the table from its CREATE), with the same checks, changing no table.
    let rebuild = match &decision {
        Decision::ApplyAll { .. } if !config.rebuild.is_empty() => {
            run.plan_rebuilds(
                &rebuild_plans(config)?,
                &config.statements,
                &config.client.database,
            )
            .await?
        }
        _ => Vec::new(),
    };
    Ok(match decision {
        Decision::Unchanged => PlanOutcome {
            changed: false,
            reason: None,
            why: None,
            every_pod: false,
            pods: Vec::new(),
            statements: Vec::new(),
            converge,
            rebuild,
        },
        Decision::ApplyAll { reason, why } => PlanOutcome {
            changed: true,
            reason: Some(reason),
            why: Some(why),
            every_pod: true,
            pods: Vec::new(),
            statements: statements(),
            converge,
            rebuild,
        },
        Decision::NewPodsOnly {
            reason,
            live,
            covered,
        } => PlanOutcome {
            changed: true,
            reason: Some(reason),
            why: Some(PlanWhy::PodSetChanged),
            every_pod: false,
            pods: live
                .iter()
                .filter(|p| !covered.iter().any(|c| c.name == p.name && c.uid == p.uid))
                .map(|p| PlannedPod {
                    pod: p.name.clone(),
                    why: if covered.iter().any(|c| c.name == p.name) {
                        PodWhy::ReplacedPod
                    } else {
                        PodWhy::NewPod
                    },
                })
                .collect(),
            statements: statements(),
            converge,
            rebuild,
        },
    })
}

/// The rebuild prop's plans (validation has checked that each one plans).
fn rebuild_plans(config: &ResolvedConfig) -> Result<Vec<crate::rebuild::RebuildPlan>, ClickHouseSchemaError> {
    crate::rebuild::plans(config).map_err(|why| {
        ClickHouseSchemaError::new(
            ErrorKind::Internal,
            format!("a validated rebuild prop did not plan: {why}"),
        )
    })
}

/// Convergence's options from the props.
fn converge_options(config: &ResolvedConfig) -> Converge<'_> {
    Converge {
        allow_type_change: &config.allow_type_change,
        on_cluster: match &config.execution {
            Execution::OnCluster { cluster } => Some(cluster.as_str()),
            Execution::Fanout => None,
        },
    }
}

/// Each statement with what it declares (see [`crate::sql::declared`]).
fn planned_statements(config: &ResolvedConfig) -> Vec<PlannedStatement> {
    use crate::sql::declared::{DeclarationForm, StatementClass, classify};
    config
        .statements
        .iter()
        .enumerate()
        .map(|(index, sql)| match classify(sql, &config.client.database) {
            StatementClass::Declares(d) => {
                let (lead, tail) = match d.form {
                    DeclarationForm::Create => ("CREATE", ""),
                    DeclarationForm::CreateIfNotExists => ("CREATE", " IF NOT EXISTS"),
                    DeclarationForm::CreateOrReplace => ("CREATE OR REPLACE", ""),
                    DeclarationForm::Attach => ("ATTACH", ""),
                    DeclarationForm::AttachIfNotExists => ("ATTACH", " IF NOT EXISTS"),
                };
                PlannedStatement {
                    index,
                    verb: format!("{lead} {}{tail}", d.kind.as_sql()),
                    object: Some(d.qualified_name()),
                }
            }
            StatementClass::Other { verb } => PlannedStatement {
                index,
                verb,
                object: None,
            },
        })
        .collect()
}

/// Brings the cluster to `config` and returns the state to record.
///
/// Nothing runs when [`plan`] would say so (the previous state is returned
/// as it was). When only the pod set changed, pods recorded with the same
/// name and uid are not re-run. Any other change re-runs the whole list on
/// every selected pod.
pub async fn apply<T: PodLister + Executor + LeaseApi, C: Clock>(
    resource_id: &str,
    config: &ResolvedConfig,
    previous: Option<&SchemaState>,
    cluster: &Cluster<'_, T, C>,
) -> Result<(SchemaState, ApplyOutcome), ClickHouseSchemaError> {
    let fingerprint = fingerprint(config);
    let converging = config.converge == ConvergeMode::Additive;
    let mut verify_plan = VerifyPlan::new(&config.statements, &config.client.database);
    if converging {
        verify_plan = verify_plan.with_server_version();
    }
    let run = Run::new(
        resource_id,
        config,
        &config.target,
        cluster.transport,
        cluster.clock,
    )
    .with_cancel(cluster.cancel)
    .with_events(cluster.events)
    .with_verification(Verification {
        plan: &verify_plan,
        mode: config.verify,
    })
    .with_converge(converging.then(|| converge_options(config)))
    .with_ledger(config.ledger.as_ref().map(|ledger| LedgerWrite {
        config: ledger,
        fingerprint: &fingerprint,
        statement_count: statement_count(config),
        destroy: false,
    }));
    let decision = decide(
        &run,
        config,
        &fingerprint,
        previous,
        cluster.cluster_id.as_deref(),
    )
    .await?;

    if let Decision::Unchanged = decision {
        let prev = previous.cloned().ok_or_else(|| {
            ClickHouseSchemaError::new(
                ErrorKind::Internal,
                "an unchanged decision without a previous state",
            )
        })?;
        return Ok((prev, ApplyOutcome::Unchanged));
    }
    // Something has to run: under the lease when there is one (never taken for
    // an unchanged deploy). `waited`: another deploy held it first, so what that
    // one did is in the ledger.
    let work = |waited: bool| run_decision(&run, config, &fingerprint, previous, decision, waited);
    let (pods, skipped) = match config.lease {
        Some(lease) => run.with_lease(lease, work).await?,
        None => run.settle_abandoned(work(false).await, false).await?,
    };
    let ran_on = pods
        .iter()
        .filter(|p| !skipped.contains(p))
        .map(|p| p.name.clone())
        .collect();
    Ok((
        record(config, fingerprint, pods, cluster),
        ApplyOutcome::Applied { pods: ran_on },
    ))
}

/// Runs what `decision` says, and returns the pods to record and those of
/// them that ran nothing. With a ledger, when there is no state (it was lost,
/// or this is the first apply) or this call waited for another deploy's
/// lease, the pods whose ledger already holds this fingerprint are recorded
/// without running anything.
async fn run_decision<T: PodLister + Executor, C: Clock>(
    run: &Run<'_, T, C>,
    config: &ResolvedConfig,
    fingerprint: &str,
    previous: Option<&SchemaState>,
    decision: Decision,
    waited: bool,
) -> Result<(Vec<PodRef>, Vec<PodRef>), ClickHouseSchemaError> {
    let ledger = config.ledger.as_ref().filter(|_| previous.is_none() || waited);
    let new_pods_only = matches!(decision, Decision::NewPodsOnly { .. });
    let (first_observation, mut covered) = match decision {
        Decision::NewPodsOnly { live, covered, .. } => (Some(live), covered),
        _ => (None, Vec::new()),
    };
    let first_observation = match ledger {
        Some(ledger) => {
            let live = match first_observation {
                Some(live) if !waited => live,
                _ => run.list_matching().await?,
            };
            for pod in ledger_covered(run, ledger, fingerprint, &live).await? {
                if !covered.contains(&pod) {
                    covered.push(pod);
                }
            }
            Some(live)
        }
        None => first_observation,
    };
    // A table the statements change in a way no ALTER can is rebuilt first (when the props allow
    // it), so the statements then find it as declared. Not for new pods alone: the others hold
    // this fingerprint already, and a new pod gets the table from its CREATE.
    if !config.rebuild.is_empty() && !new_pods_only {
        let plans = rebuild_plans(config)?;
        // The rebuild is part of the change: each pod it may touch records
        // that the change started before it does, so a rebuild stopped half
        // way is not taken as covered by a later deploy that lost its state.
        let opened = run.open_ledger_before_rebuild(&covered).await?;
        // Boxed: a rebuild's future is large, and a caller may poll it on a small stack.
        let reopened =
            Box::pin(run.rebuild_tables(&plans, &config.statements, &config.client.database, &opened))
                .await?;
        // A covered pod the rebuild touched has its opening row now: it is due, so the list runs
        // there (idempotent) and closes that row, rather than leave it open for good.
        covered.retain(|p| !reopened.contains(p));
    }
    match &config.execution {
        Execution::OnCluster { .. } => {
            // Covered only when every matching pod's ledger says so: one pod's
            // row (a Replicated ledger, a pod that ran an earlier list) says
            // nothing of the others, and ON CLUSTER reaches them all.
            let live = first_observation.as_deref().unwrap_or_default();
            let all_covered =
                ledger.is_some() && !live.is_empty() && live.iter().all(|p| covered.contains(&PodRef::of(p)));
            match live.first() {
                Some(pod) if all_covered => Ok((vec![PodRef::of(pod)], vec![PodRef::of(pod)])),
                _ => Ok((vec![run.on_cluster(&config.statements).await?], Vec::new())),
            }
        }
        Execution::Fanout => {
            let start = FanoutStart {
                covered: covered.clone(),
                first_observation,
            };
            Ok((run.fanout(&config.statements, start).await?, covered))
        }
    }
}

/// What `verify` found: `drifted` when any pod lacks an object or holds another definition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(
        object,
        object_to_js = false,
        object_from_js = false,
        js_name = "VerifyResult"
    )
)]
pub struct VerifyOutcome {
    /// Whether any object on any pod is not as declared.
    pub drifted: bool,
    /// Every pod looked at, by name, with every declared object.
    pub pods: Vec<PodReport>,
}

/// Looks up the objects the statements declare on the pods where `state` says they were
/// applied and that are still there (same name, Ready), one exec per pod, running no statement.
/// Under onCluster that is the one pod the statements ran on. For `verify()` and Alchemy's drift.
pub async fn verify<T: PodLister + Executor, C: Clock>(
    resource_id: &str,
    config: &ResolvedConfig,
    state: Option<&SchemaState>,
    cluster: &Cluster<'_, T, C>,
) -> Result<VerifyOutcome, ClickHouseSchemaError> {
    let Some(state) = state.filter(|s| !s.fingerprint.is_empty()) else {
        return Err(ClickHouseSchemaError::new(
            ErrorKind::NothingApplied,
            format!(
                "ClickHouseSchema '{resource_id}': no apply was ever recorded for this resource, so there is no \
                 pod to verify. Deploy it first."
            ),
        )
        .with_resource_id(resource_id));
    };
    if state.cluster_id != cluster.cluster_id {
        return Err(ClickHouseSchemaError::new(
            ErrorKind::ClusterMismatch,
            format!(
                "ClickHouseSchema '{resource_id}': the schema was applied to cluster {} and the current kubeconfig \
                 points at cluster {}, so its objects were not looked up. Point the kubeconfig back at the cluster \
                 the schema was applied to.",
                id_text(state.cluster_id.as_deref()),
                id_text(cluster.cluster_id.as_deref())
            ),
        )
        .with_resource_id(resource_id));
    }
    let plan = VerifyPlan::new(&config.statements, &config.client.database);
    let run = Run::new(
        resource_id,
        config,
        &config.target,
        cluster.transport,
        cluster.clock,
    )
    .with_cancel(cluster.cancel)
    .with_events(cluster.events);
    let live = run.list_matching().await?;
    let targets: Vec<&PodInfo> = state
        .pods
        .iter()
        .filter_map(|recorded| live.iter().find(|p| p.name == recorded.name && p.ready))
        .collect();
    // Pods are looked at concurrently, up to `parallelism` at once, as an apply runs them.
    let (results, _) = bounded(
        &targets,
        run.parallelism,
        || true,
        |pod| {
            let plan = &plan;
            let run = &run;
            async move {
                if plan.is_empty() {
                    return Ok(PodReport {
                        pod: pod.name.clone(),
                        objects: Vec::new(),
                    });
                }
                run.verify_pod(plan, &pod.name).await
            }
        },
    )
    .await;
    let mut results = results;
    // In pod order, so that of several failures the first pod's is reported, whatever finished first.
    results.sort_by_key(|(at, _)| *at);
    let mut pods = Vec::new();
    for (_, result) in results {
        match result {
            Ok(report) => pods.push(report),
            Err(Failure::Vanished | Failure::Stopped) => {}
            Err(Failure::Error(err)) => return Err(err),
        }
    }
    Ok(VerifyOutcome {
        drifted: pods.iter().any(|p| !p.is_ok()),
        pods,
    })
}

/// Whether [`destroy`] with `config` reaches the cluster at all. `retain`
/// never does, so a caller need not even load a kubeconfig for it: a schema
/// whose cluster is gone can still be removed.
pub fn destroy_reaches_cluster(config: &ResolvedConfig) -> bool {
    config.on_delete == OnDelete::Run
}

/// Deletes the resource per `onDelete`. `retain` never reaches the cluster.
/// `run` executes `deleteStatements` where the state says the schema landed,
/// and refuses before any call when nothing was ever applied or the current
/// cluster is not the one recorded.
pub async fn destroy<T: PodLister + Executor + LeaseApi, C: Clock>(
    resource_id: &str,
    config: &ResolvedConfig,
    state: Option<&SchemaState>,
    cluster: &Cluster<'_, T, C>,
) -> Result<(), ClickHouseSchemaError> {
    if config.on_delete == OnDelete::Retain {
        return Ok(());
    }
    let Some(state) = state.filter(|s| !s.fingerprint.is_empty()) else {
        return Err(ClickHouseSchemaError::new(
            ErrorKind::NothingApplied,
            format!(
                "ClickHouseSchema '{resource_id}': onDelete is 'run', but no apply was ever recorded for this \
                 resource, so there is nothing known to delete and deleteStatements were not run. If the objects \
                 exist, drop them by hand, or remove the resource with onDelete 'retain'."
            ),
        )
        .with_resource_id(resource_id));
    };
    if state.cluster_id != cluster.cluster_id {
        return Err(ClickHouseSchemaError::new(
            ErrorKind::ClusterMismatch,
            format!(
                "ClickHouseSchema '{resource_id}': onDelete is 'run', but the schema was applied to cluster {} and \
                 the current kubeconfig points at cluster {}. deleteStatements were not run, so nothing was dropped \
                 on the wrong cluster. Point the kubeconfig back at the cluster the schema was applied to, or set \
                 onDelete to 'retain'.",
                id_text(state.cluster_id.as_deref()),
                id_text(cluster.cluster_id.as_deref())
            ),
        )
        .with_resource_id(resource_id));
    }
    // The state decides where deleteStatements run, so it is held to the
    // props' rules and must name the props' own target: a hand-edited or
    // foreign state with an empty selector would otherwise select every pod
    // of its namespace.
    let issues = state.target_issues(resource_id, &config.target);
    if !issues.is_empty() {
        return Err(ClickHouseSchemaError::invalid_state(resource_id, issues));
    }
    let target = state.target.to_target();
    // With a ledger, each pod gets a `destroying` row before its first delete
    // statement and a `destroyed` row after its last, so a later deploy without
    // state never adopts what was dropped, and a destroy retried after a
    // failure half way skips the pods already done (and only those).
    let delete_count = u32::try_from(config.delete_statements.len()).unwrap_or(u32::MAX);
    let run = Run::new(resource_id, config, &target, cluster.transport, cluster.clock)
        .with_cancel(cluster.cancel)
        .with_events(cluster.events)
        .with_ledger(config.ledger.as_ref().map(|ledger| LedgerWrite {
            config: ledger,
            // What is being deleted: so a read for that fingerprint (adoption's look at
            // who else applied it) also finds that it was deleted.
            fingerprint: &state.fingerprint,
            statement_count: delete_count,
            destroy: true,
        }));
    let work = |_waited: bool| async {
        let (live, done) = match &config.ledger {
            Some(ledger) => {
                let live = run.list_matching().await?;
                let done = ledger_destroyed(&run, ledger, &state.fingerprint, &live).await?;
                (Some(live), done)
            }
            None => (None, Vec::new()),
        };
        match &config.execution {
            Execution::OnCluster { .. } => {
                let live = live.unwrap_or_default();
                if !live.is_empty() && live.iter().all(|p| done.contains(&PodRef::of(p))) {
                    return Ok(());
                }
                run.on_cluster(&config.delete_statements).await.map(|_| ())
            }
            Execution::Fanout => run
                .fanout(
                    &config.delete_statements,
                    FanoutStart {
                        covered: done,
                        first_observation: live,
                    },
                )
                .await
                .map(|_| ()),
        }
    };
    match config.lease {
        Some(lease) => run.with_lease(lease, work).await,
        None => run.settle_abandoned(work(false).await, false).await,
    }
}

fn id_text(id: Option<&str>) -> String {
    match id {
        Some(id) => format!("'{id}'"),
        None => "(unknown)".to_owned(),
    }
}
