//! What the ledgers on the pods say about who applied what: the pods an apply
//! without a state may record instead of running the statements again,
//! `status` (each pod's entry), and `adopt` (Alchemy's adoption contract for
//! a resource with no state).
//!
//! A pod counts for this resource when the newest row naming it that this
//! resource id wrote is a finished apply of the current fingerprint (a
//! `started` row, an apply that may have stopped half way, does not count).
//! Only Ready pods with the container are read (one exec each); the others
//! are reported as not read.

use crate::config::fingerprint::fingerprint;
use crate::config::{LedgerConfig, ResolvedConfig};
use crate::coordination::ledger::{LedgerEvent, LedgerRow, applied_on, destroyed_on, newest_on};
use crate::error::{ClickHouseSchemaError, ConfigIssue};
use crate::live_schema::{ObjectStatus, VerifyPlan};
use crate::reconcile::{Failure, Run, bounded};
use crate::sql::declared::ObjectKind;
use crate::state::{PodRef, SchemaState, record};
use crate::transport::{Clock, Cluster, Executor, PodInfo, PodLister};

/// The pods of `live` whose ledger holds `fingerprint` for this resource.
pub(crate) async fn ledger_covered<T: PodLister + Executor, C: Clock>(
    run: &Run<'_, T, C>,
    ledger: &LedgerConfig,
    fingerprint: &str,
    live: &[PodInfo],
) -> Result<Vec<PodRef>, ClickHouseSchemaError> {
    let readable = readable(run, live);
    let read = run.read_ledgers(ledger, fingerprint, &readable).await?;
    Ok(read
        .into_iter()
        .filter(|(pod, rows)| applied_on(rows, run.resource_id, fingerprint, &pod.name, uid(pod)))
        .map(|(pod, _)| PodRef::of(pod))
        .collect())
}

/// The pods of `live` whose ledger says this resource's delete statements
/// all ran there since its last apply (a retried destroy skips them).
pub(crate) async fn ledger_destroyed<T: PodLister + Executor, C: Clock>(
    run: &Run<'_, T, C>,
    ledger: &LedgerConfig,
    applied: &str,
    live: &[PodInfo],
) -> Result<Vec<PodRef>, ClickHouseSchemaError> {
    let readable = readable(run, live);
    // `applied`, the fingerprint the state records, only narrows the read: this resource's own
    // rows are read whatever their fingerprint.
    let read = run.read_ledgers(ledger, applied, &readable).await?;
    Ok(read
        .into_iter()
        .filter(|(pod, rows)| destroyed_on(rows, run.resource_id, &pod.name, uid(pod)))
        .map(|(pod, _)| PodRef::of(pod))
        .collect())
}

/// The pod's uid as the ledger writes it (empty when the executor could not tell).
fn uid(pod: &PodInfo) -> &str {
    pod.uid.as_deref().unwrap_or("")
}

fn readable<'p, T, C>(run: &Run<'_, T, C>, live: &'p [PodInfo]) -> Vec<&'p PodInfo> {
    live.iter()
        .filter(|p| p.ready && p.has_container(&run.target.container))
        .collect()
}

/// One pod's ledger entry for this resource.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(
        object,
        object_to_js = false,
        object_from_js = false,
        js_name = "PodLedgerStatus"
    )
)]
pub struct PodLedgerStatus {
    /// The pod's name.
    pub pod: String,
    /// Whether the pod was Ready with the container, so its ledger was read.
    pub read: bool,
    /// The fingerprint its newest row for this resource holds (for a destroy,
    /// the one deleted); absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// When that row was written (RFC 3339 UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<String>,
    /// What that row records: an apply begun (`started`: it may have stopped half way) or
    /// finished (`applied`), a destroy begun (`destroying`) or finished (`destroyed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "napi",
        napi(ts_type = "'started' | 'applied' | 'destroying' | 'destroyed'")
    )]
    pub event: Option<LedgerEvent>,
    /// How many statements that run had.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement_count: Option<u32>,
    /// The package version that wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package_version: Option<String>,
    /// Whether that row is a finished apply of the current fingerprint (false for a pod behind,
    /// one whose apply did not finish, or not read).
    pub current: bool,
}

/// What `status` found: the current fingerprint and every matching pod's entry, by name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(
        object,
        object_to_js = false,
        object_from_js = false,
        js_name = "StatusResult"
    )
)]
pub struct StatusOutcome {
    /// The fingerprint of the props.
    pub fingerprint: String,
    /// Every pod matching the target.
    pub pods: Vec<PodLedgerStatus>,
}

/// Each matching pod's ledger entry for this resource. Needs the `ledger` prop.
pub async fn status<T: PodLister + Executor, C: Clock>(
    resource_id: &str,
    config: &ResolvedConfig,
    cluster: &Cluster<'_, T, C>,
) -> Result<StatusOutcome, ClickHouseSchemaError> {
    let ledger = needs_ledger(resource_id, config, "status")?;
    let fingerprint = fingerprint(config);
    let run = run_for(resource_id, config, cluster);
    let live = run.list_matching().await?;
    let read = run
        .read_ledgers(ledger, &fingerprint, &readable(&run, &live))
        .await?;
    let mut pods: Vec<PodLedgerStatus> = live
        .iter()
        .map(|pod| {
            let rows = read
                .iter()
                .find(|(p, _)| p.name == pod.name)
                .map(|(_, rows)| rows);
            let latest = rows.and_then(|rows| newest_on(rows, resource_id, &pod.name));
            PodLedgerStatus {
                pod: pod.name.clone(),
                read: rows.is_some(),
                fingerprint: latest.map(|r| r.fingerprint.clone()),
                applied_at: latest.map(|r| r.applied_at.clone()),
                statement_count: latest.map(|r| r.statement_count),
                package_version: latest.map(|r| r.package_version.clone()),
                event: latest.map(|r| r.event),
                current: rows
                    .is_some_and(|rows| applied_on(rows, resource_id, &fingerprint, &pod.name, uid(pod))),
            }
        })
        .collect();
    pods.sort_by(|a, b| a.pod.cmp(&b.pod));
    Ok(StatusOutcome { fingerprint, pods })
}

/// Whose schema the pods hold, for a resource without a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Ownership {
    /// This resource applied the current fingerprint there: adopt silently.
    Owned,
    /// Someone else did (another resource id), or the objects exist with no ledger entry.
    Unowned,
    /// Nothing of it is there (or there is no ledger to tell): create.
    Absent,
}

/// What `adopt` found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdoptOutcome {
    /// Whose schema it is.
    pub ownership: Ownership,
    /// The state to adopt (owned or unowned): the pods that hold the current
    /// fingerprint (for objects present without a ledger entry, none, so an
    /// adopting apply runs the statements on every pod).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<SchemaState>,
    /// Why, in one sentence.
    pub reason: String,
}

/// Alchemy's adoption contract for a resource with no recorded state: reads
/// the ledger of the Ready matching pods. Owned when this resource id applied
/// the current fingerprint on at least one pod and no other id did; unowned
/// when another resource id applied it, or when no ledger mentions it but a
/// declared table, view or dictionary already exists on a pod (one
/// live-schema read per pod; a database alone is often shared, so it does not count);
/// absent otherwise, and always without the `ledger` prop (no call at all).
pub async fn adopt<T: PodLister + Executor, C: Clock>(
    resource_id: &str,
    config: &ResolvedConfig,
    cluster: &Cluster<'_, T, C>,
) -> Result<AdoptOutcome, ClickHouseSchemaError> {
    let Some(ledger) = &config.ledger else {
        return Ok(adopt_without_cluster(config).unwrap_or_else(absent));
    };
    let fingerprint = fingerprint(config);
    let run = run_for(resource_id, config, cluster);
    let live = run.list_matching().await?;
    let readable = readable(&run, &live);
    let read = run.read_ledgers(ledger, &fingerprint, &readable).await?;
    let ours: Vec<PodRef> = read
        .iter()
        .filter(|(pod, rows)| applied_on(rows, resource_id, &fingerprint, &pod.name, uid(pod)))
        .map(|(pod, _)| PodRef::of(pod))
        .collect();
    // Another resource id whose newest row on the pod is a finished apply of this schema.
    let foreign: Vec<(&PodInfo, &LedgerRow)> = read
        .iter()
        .filter_map(|(pod, rows)| {
            rows.iter()
                .filter(|r| r.resource_id != resource_id)
                .find(|r| applied_on(rows, &r.resource_id, &fingerprint, &pod.name, uid(pod)))
                .map(|r| (*pod, r))
        })
        .collect();
    if let Some((_, row)) = foreign.first() {
        let pods = foreign.iter().map(|(pod, _)| PodRef::of(pod)).collect();
        return Ok(AdoptOutcome {
            ownership: Ownership::Unowned,
            state: Some(record(config, fingerprint.clone(), pods, cluster)),
            reason: format!(
                "the ledger shows this schema applied by resource '{}' on {} pod(s), not by '{resource_id}'",
                row.resource_id,
                foreign.len()
            ),
        });
    }
    if !ours.is_empty() {
        let count = ours.len();
        return Ok(AdoptOutcome {
            ownership: Ownership::Owned,
            state: Some(record(config, fingerprint, ours, cluster)),
            reason: format!(
                "the ledger shows this resource applied the current fingerprint on {count} pod(s)"
            ),
        });
    }
    let plan = VerifyPlan::new(&config.statements, &config.client.database);
    if plan.is_empty() {
        return Ok(absent());
    }
    let (reports, _) = bounded(
        &readable,
        run.parallelism,
        || true,
        |pod| {
            let plan = &plan;
            let run = &run;
            async move { run.verify_pod(plan, &pod.name).await }
        },
    )
    .await;
    for (_, report) in reports {
        let report = match report {
            Ok(report) => report,
            Err(Failure::Error(err)) => return Err(err),
            Err(_) => continue,
        };
        // A database is commonly shared (`CREATE DATABASE IF NOT EXISTS` in many
        // schemas), so only the objects inside it say the schema is there.
        if let Some(object) = report
            .objects
            .iter()
            .find(|o| o.status != ObjectStatus::Missing && o.kind != ObjectKind::Database.as_sql())
        {
            return Ok(AdoptOutcome {
                ownership: Ownership::Unowned,
                state: Some(record(config, fingerprint, Vec::new(), cluster)),
                reason: format!(
                    "{} already exists on pod {} and no ledger entry says who applied it",
                    object.name, report.pod
                ),
            });
        }
    }
    Ok(absent())
}

/// The answer of [`adopt`] when it needs no cluster call (no ledger prop: no
/// record of an earlier apply), so a binding need not even connect.
pub fn adopt_without_cluster(config: &ResolvedConfig) -> Option<AdoptOutcome> {
    config.ledger.is_none().then(|| AdoptOutcome {
        ownership: Ownership::Absent,
        state: None,
        reason: "without the ledger prop there is no record of an earlier apply to adopt".to_owned(),
    })
}

fn absent() -> AdoptOutcome {
    AdoptOutcome {
        ownership: Ownership::Absent,
        state: None,
        reason: "no pod holds this schema".to_owned(),
    }
}

fn needs_ledger<'c>(
    resource_id: &str,
    config: &'c ResolvedConfig,
    what: &str,
) -> Result<&'c LedgerConfig, ClickHouseSchemaError> {
    config.ledger.as_ref().ok_or_else(|| {
        ClickHouseSchemaError::invalid_config(
            resource_id,
            vec![ConfigIssue {
                path: "ledger".to_owned(),
                reason: format!(
                    "is required by {what}, which reads the ledger: add ledger: {{ database }} (each apply then \
                     writes it on every pod)"
                ),
            }],
        )
    })
}

fn run_for<'a, T: PodLister + Executor, C: Clock>(
    resource_id: &'a str,
    config: &'a ResolvedConfig,
    cluster: &'a Cluster<'_, T, C>,
) -> Run<'a, T, C> {
    Run::new(
        resource_id,
        config,
        &config.target,
        cluster.transport,
        cluster.clock,
    )
    .with_cancel(cluster.cancel)
    .with_events(cluster.events)
}
