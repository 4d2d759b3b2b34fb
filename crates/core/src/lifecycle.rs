//! Create/update and delete of a schema resource, over the reconcile runs.
//!
//! `apply` decides whether anything has to run at all, runs it, and returns
//! the state to record. Every path that does not finish cleanly returns an
//! error and no state, so a failed or partial apply is never recorded and the
//! next converge starts over with the whole list.

use crate::config::{Execution, OnDelete, ResolvedConfig};
use crate::error::{ClickHouseSchemaError, ErrorKind};
use crate::fingerprint::fingerprint;
use crate::reconcile::{FanoutStart, Run};
use crate::state::{PodRef, RecordedTarget, SchemaState};
use crate::transport::{Clock, Executor, PodLister};

/// What `apply` did, for logs and tests; the state is what gets recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// Nothing changed: the previous state is returned as it was.
    Unchanged,
    /// Statements ran; `pods` are the pods they ran on in this apply.
    Applied { pods: Vec<String> },
}

/// The cluster-facing side of an apply: where pods are listed and statements
/// run, the clock, and the identity of the cluster they belong to.
pub struct Cluster<'a, T, C> {
    pub transport: &'a T,
    pub clock: &'a C,
    /// Credential-free identity of the cluster (see `cluster_id`); `None`
    /// when it cannot be known (no current cluster, injected executor).
    pub cluster_id: Option<String>,
}

/// Brings the cluster to `config` and returns the state to record.
///
/// No-op rules: with the same fingerprint, target and cluster identity, an
/// onCluster resource returns `previous` without any call, and a fanout
/// resource lists pods once and returns `previous` when the live set equals
/// the recorded one (by uid; by name for state without uids). When only the
/// pod set changed, pods recorded with the same name and uid are not re-run.
/// Any other change re-runs the whole list on every selected pod.
pub async fn apply<T: PodLister + Executor, C: Clock>(
    resource_id: &str,
    config: &ResolvedConfig,
    previous: Option<&SchemaState>,
    cluster: &Cluster<'_, T, C>,
) -> Result<(SchemaState, ApplyOutcome), ClickHouseSchemaError> {
    let fingerprint = fingerprint(config);
    let run = Run::new(
        resource_id,
        config,
        &config.target,
        cluster.transport,
        cluster.clock,
    );

    let same_place_and_content = previous.is_some_and(|prev| {
        prev.fingerprint == fingerprint
            && prev.target.matches(&config.target)
            && prev.cluster_id == cluster.cluster_id
    });

    let pods = match &config.execution {
        Execution::OnCluster { .. } => {
            if let (true, Some(prev)) = (same_place_and_content, previous) {
                return Ok((prev.clone(), ApplyOutcome::Unchanged));
            }
            vec![run.on_cluster(&config.statements).await?]
        }
        Execution::Fanout => {
            let mut start = FanoutStart::default();
            if let (true, Some(prev)) = (same_place_and_content, previous) {
                let live = run.list_matching().await?;
                let live_refs: Vec<PodRef> = live.iter().map(PodRef::of).collect();
                if prev.pod_set_matches(&live_refs) {
                    return Ok((prev.clone(), ApplyOutcome::Unchanged));
                }
                start = FanoutStart {
                    covered: prev.covered_pods(),
                    first_observation: Some(live),
                };
            }
            let skipped = start.covered.clone();
            let covered = run.fanout(&config.statements, start).await?;
            let ran_on = covered
                .iter()
                .filter(|p| !skipped.contains(p))
                .map(|p| p.name.clone())
                .collect();
            return Ok((
                record(config, fingerprint, covered, cluster),
                ApplyOutcome::Applied { pods: ran_on },
            ));
        }
    };
    let ran_on = pods.iter().map(|p| p.name.clone()).collect();
    Ok((
        record(config, fingerprint, pods, cluster),
        ApplyOutcome::Applied { pods: ran_on },
    ))
}

/// Deletes the resource per `onDelete`. `retain` never reaches the cluster.
/// `run` executes `deleteStatements` where the state says the schema landed,
/// and refuses before any call when nothing was ever applied or the current
/// cluster is not the one recorded.
pub async fn destroy<T: PodLister + Executor, C: Clock>(
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
    let target = state.target.to_target();
    let run = Run::new(resource_id, config, &target, cluster.transport, cluster.clock);
    match &config.execution {
        Execution::OnCluster { .. } => run.on_cluster(&config.delete_statements).await.map(|_| ()),
        Execution::Fanout => run
            .fanout(&config.delete_statements, FanoutStart::default())
            .await
            .map(|_| ()),
    }
}

fn record<T, C: Clock>(
    config: &ResolvedConfig,
    fingerprint: String,
    mut pods: Vec<PodRef>,
    cluster: &Cluster<'_, T, C>,
) -> SchemaState {
    pods.sort();
    SchemaState {
        fingerprint,
        applied_at: cluster.clock.now_iso8601(),
        statement_count: u32::try_from(config.statements.len()).unwrap_or(u32::MAX),
        database: config.client.database.clone(),
        target: RecordedTarget::from_target(&config.target),
        pod_names: pods.iter().map(|p| p.name.clone()).collect(),
        pods: Some(pods),
        cluster_id: cluster.cluster_id.clone(),
    }
}

fn id_text(id: Option<&str>) -> String {
    match id {
        Some(id) => format!("'{id}'"),
        None => "(unknown)".to_owned(),
    }
}
