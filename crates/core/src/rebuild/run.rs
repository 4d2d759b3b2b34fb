//! Running a rebuild (see `crate::rebuild` for the procedure and why each step is safe) across the
//! pods that hold the table: before the statements run, under the lease when there is one.
//!
//! Which pod does what:
//! - every pod whose table differs in a way only a rebuild changes gets the new table, the staging
//!   table, the view and, at the end, the swap (for a `Replicated` table that is every replica);
//! - the backfill reads each *source* once: a local table is its own source on every pod; the
//!   replicas of a `Replicated` table share one (its ZooKeeper path), copied from the first of them
//!   by name, and `ATTACH PARTITION` replicates what it moves;
//! - verification compares each *target* (the new table's replica set, or the pod for a local one)
//!   with the sum of the sources inside it.
//!
//! Receipts are read from every pod inspected and keyed by source, so a rerun after a failure on
//! one replica does not copy again what another replica's receipts record.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::error::{ClickHouseSchemaError, ErrorKind};
use crate::live_schema::{ObjectStatus, VerifyPlan};
use crate::rebuild::{
    self, BATCH_PARTITIONS, BATCH_ROWS, Cutover, CutoverKind, Inspection, NEW_SUFFIX, OLD_SUFFIX,
    PlannedRebuild, RECEIPTS_TABLE, RebuildPlan, STAGE_SUFFIX, VERIFY_READS, VIEW_SUFFIX,
};
use crate::reconcile::{Call, Run, Tracked};
use crate::sql::declared::{StatementClass, classify};
use crate::sql::redact::{redact_clickhouse_output, redact_row_values};
use crate::state::PodRef;
use crate::transport::{Clock, Event, ExecOutput, Executor, PodInfo, PodLister, TransportErrorKind};

/// At most this many partitions are named in the read of the rows' hashes after the swap; more
/// are read as the whole table (a statement's text has a size limit on the server).
const CHANGED_PARTITIONS_LISTED: usize = 1000;

/// Which pods hold each allowed table (`database.table`), which of them need it rebuilt (with
/// the parts that differ), and the objects the statements declare.
struct Survey {
    holding: BTreeMap<String, Vec<PodInfo>>,
    due: BTreeMap<String, Vec<(PodInfo, Vec<String>)>>,
    declared: BTreeSet<String>,
}

impl Survey {
    /// The pods that hold `plan`'s table.
    fn holders(&self, plan: &RebuildPlan) -> Vec<&PodInfo> {
        self.holding
            .get(&plan.key())
            .map(|pods| pods.iter().collect())
            .unwrap_or_default()
    }
}

/// Which inspection the check step runs: the apply's (which creates the receipts table and reads
/// the receipts) or the plan's (reads only).
#[derive(Clone, Copy)]
enum Inspect {
    Apply,
    Plan,
}

/// Where a rebuild step runs, for its messages.
#[derive(Clone, Copy)]
struct At<'a> {
    plan: &'a RebuildPlan,
    step: &'static str,
    pod: &'a str,
    partition: Option<&'a str>,
}

impl<'a> At<'a> {
    /// `step` of `plan` on `pod`, not about one partition.
    fn new(plan: &'a RebuildPlan, step: &'static str, pod: &'a str) -> Self {
        Self {
            plan,
            step,
            pod,
            partition: None,
        }
    }
}

impl<T: PodLister + Executor, C: Clock> Run<'_, T, C> {
    /// Rebuilds each table of `plans` on the pods whose live table needs it, before the statements
    /// run. A table that is missing (the statements create it) or already as declared is left alone.
    /// A pod it touches that got no opening ledger row yet (not in `opened`: its ledger said it
    /// was covered while its table differs, or it turned Ready since) gets one first, so a
    /// rebuild stopped there leaves it due, not covered. Returns those pods: the run is theirs
    /// now, so the caller runs the list there too (it closes their row).
    pub(crate) async fn rebuild_tables(
        &self,
        plans: &[RebuildPlan],
        statements: &[String],
        default_database: &str,
        opened: &[PodRef],
    ) -> Result<Vec<PodRef>, ClickHouseSchemaError> {
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        // Boxed, as the other large steps here: a caller may poll this on a small stack.
        let mut survey = Box::pin(self.survey(plans, statements, default_database)).await?;
        let mut reopened: Vec<PodRef> = Vec::new();
        self.open_due(&survey, opened, &mut reopened).await?;
        // Swaps an earlier apply cut short first: a replica set half swapped is swapped on the
        // rest, and old tables' late rows are copied. A pod swapped now is as declared, so the
        // survey is taken again.
        let mut resumed = false;
        for plan in plans {
            resumed |= Box::pin(self.finish_interrupted_swaps(plan, &survey.holders(plan))).await?;
        }
        if resumed {
            survey = Box::pin(self.survey(plans, statements, default_database)).await?;
            self.open_due(&survey, opened, &mut reopened).await?;
        }
        for plan in plans {
            let Some(due) = survey.due.get(&plan.key()) else {
                Box::pin(self.discard_undue(plan, &survey.holders(plan))).await?;
                continue;
            };
            let due: Vec<&PodInfo> = due.iter().map(|(pod, _)| pod).collect();
            let holders = survey.holders(plan);
            // Boxed: a rebuild's future is large, and a caller may poll it on a small stack.
            Box::pin(self.rebuild_table(plan, &due, &holders, &survey.declared)).await?;
        }
        Ok(reopened)
    }

    /// Drops the view of an unfinished rebuild of a table that is now as declared (the user changed
    /// the declaration back while the rebuild was unfinished): it would otherwise write every
    /// insert into a new table no apply resumes, for good. Only the view, which holds no row: the
    /// new and staging tables stay (a deploy of that declaration goes on from them, and a receipt
    /// left open by hand could otherwise vouch for someone's own table by that name), with an
    /// event that names them. Only where this tool's `made` receipt is open, and not on a pod whose
    /// swap is under way (an old table: `finish_interrupted_swaps` has its say there).
    async fn discard_undue(
        &self,
        plan: &RebuildPlan,
        holders: &[&PodInfo],
    ) -> Result<(), ClickHouseSchemaError> {
        let view = format!("{}{VIEW_SUFFIX}", plan.table);
        for pod in holders {
            let at = At::new(plan, "check", &pod.name);
            let out = Box::pin(self.rebuild_exec(&at, plan.made_objects_query(), true)).await?;
            let found = rebuild::parse_tagged(&out, "left")
                .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?;
            if !found.contains(&view) {
                continue;
            }
            let inspection = Box::pin(self.inspect(&at)).await?;
            let ours = inspection.made.as_ref().is_some_and(|made| !made.is_empty());
            if !ours
                || inspection
                    .tables
                    .contains_key(&format!("{}{OLD_SUFFIX}", plan.table))
            {
                continue;
            }
            let at = At::new(plan, "abandon", &pod.name);
            self.rebuild_exec(&at, plan.stop_dual_write_script(inspection.drops_lazily()), true)
                .await?;
            let kept: Vec<&String> = found.iter().filter(|name| **name != view).collect();
            self.rebuild_event(
                plan,
                "abandon",
                Some(&pod.name),
                None,
                None,
                format!(
                    "{} on {}: the table is as declared, so the view of an unfinished rebuild towards another \
                     declaration is dropped{}",
                    plan.key(),
                    pod.name,
                    if kept.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; {} stay (a deploy of that declaration goes on from them): drop them by hand once \
                             you no longer need them",
                            kept.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
                        )
                    }
                ),
            );
        }
        Ok(())
    }

    /// Opens a ledger row on each pod due in `survey` that has none yet (not in `opened`, nor in
    /// `reopened`, which it extends).
    async fn open_due(
        &self,
        survey: &Survey,
        opened: &[PodRef],
        reopened: &mut Vec<PodRef>,
    ) -> Result<(), ClickHouseSchemaError> {
        let mut unopened: Vec<&PodInfo> = Vec::new();
        for (pod, _) in survey.due.values().flatten() {
            let known = opened.contains(&PodRef::of(pod))
                || reopened.contains(&PodRef::of(pod))
                || unopened.iter().any(|p| p.name == pod.name);
            if !known {
                unopened.push(pod);
            }
        }
        self.open_ledger_on(&unopened).await?;
        reopened.extend(unopened.iter().map(|p| PodRef::of(p)));
        Ok(())
    }

    /// What an apply would rebuild: the survey (the live-schema check, with its scratch copy) and
    /// the check step's refusals from inspections that only read (no receipts table is created).
    pub(crate) async fn plan_rebuilds(
        &self,
        plans: &[RebuildPlan],
        statements: &[String],
        default_database: &str,
    ) -> Result<Vec<PlannedRebuild>, ClickHouseSchemaError> {
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        let survey = self.survey(plans, statements, default_database).await?;
        let mut out = Vec::new();
        for plan in plans {
            let Some(due) = survey.due.get(&plan.key()) else {
                continue;
            };
            let due_pods: Vec<&PodInfo> = due.iter().map(|(pod, _)| pod).collect();
            let refused = match self
                .check(
                    plan,
                    &due_pods,
                    &survey.holders(plan),
                    &survey.declared,
                    Inspect::Plan,
                )
                .await
            {
                Ok(_) => None,
                Err(err) if err.kind == ErrorKind::RebuildRefused => Some(err.message),
                Err(err) => return Err(err),
            };
            out.push(PlannedRebuild {
                table: plan.key(),
                statement_index: plan.statement_index,
                pods: due_pods.iter().map(|p| p.name.clone()).collect(),
                differences: due[0].1.clone(),
                refused,
            });
        }
        Ok(out)
    }

    /// One live-schema check of the allowed tables per pod: which pods hold each table, and which
    /// of them need it rebuilt. Every pod must be Ready: a rebuild needs every pod that may hold
    /// the table.
    async fn survey(
        &self,
        plans: &[RebuildPlan],
        statements: &[String],
        default_database: &str,
    ) -> Result<Survey, ClickHouseSchemaError> {
        let pods = self.list_matching().await?;
        let declared: BTreeSet<String> = statements
            .iter()
            .filter_map(|s| match classify(s, default_database) {
                StatementClass::Declares(d) => Some(d.qualified_name()),
                StatementClass::Other { .. } => None,
            })
            .collect();
        let check_statements: Vec<String> = plans
            .iter()
            .map(|p| statements[p.statement_index].clone())
            .collect();
        let check = VerifyPlan::new(&check_statements, default_database);
        let mut survey = Survey {
            holding: BTreeMap::new(),
            due: BTreeMap::new(),
            declared,
        };
        for pod in &pods {
            if !pod.ready || !pod.has_container(&self.target.container) {
                return Err(self.rebuild_error(
                    ErrorKind::RebuildFailed,
                    &At::new(&plans[0], "check", &pod.name),
                    "the pod is not Ready (or lacks the container); a rebuild needs every pod that may hold the \
                     table, so wait for the rollout to finish and deploy again",
                ));
            }
            let (report, scratch, stdout) = self
                .verify_pod_output(&check, &pod.name)
                .await
                .map_err(|f| self.failure_error(f, &pod.name))?;
            let definitions = check.definitions(&scratch, &stdout);
            for object in &report.objects {
                // Under convergence, the declared `ORDER BY` as the server prints it: what tells the
                // primary key a converged `MODIFY ORDER BY` leaves (which convergence accepts) from
                // one only a rebuild changes. Without convergence that key is a difference the
                // check reports, with a rebuild entry as the way out, and the rebuild makes it.
                let declared_order = definitions
                    .iter()
                    .find(|d| d.statement_index == object.statement_index)
                    .filter(|_| self.converge.is_some())
                    .and_then(|d| d.declared.clause("ORDER BY"))
                    .map(|p| p.text.as_str());
                if object.status != ObjectStatus::Missing {
                    survey
                        .holding
                        .entry(object.name.clone())
                        .or_default()
                        .push(pod.clone());
                }
                if rebuild::needs_rebuild(object, declared_order) {
                    let clauses = rebuild::rebuild_clauses(&object.differences, declared_order)
                        .into_iter()
                        .map(str::to_owned)
                        .collect();
                    survey
                        .due
                        .entry(object.name.clone())
                        .or_default()
                        .push((pod.clone(), clauses));
                }
            }
        }
        Ok(survey)
    }

    /// The check step: every pod that holds the table inspected, and the rebuild refused where
    /// it would lose or break something on a pod that needs it. Returns the receipts found, and
    /// each holder's inspection by pod name.
    async fn check(
        &self,
        plan: &RebuildPlan,
        due: &[&PodInfo],
        holders: &[&PodInfo],
        declared: &BTreeSet<String>,
        inspect: Inspect,
    ) -> Result<(Vec<rebuild::Receipt>, BTreeMap<String, Inspection>), ClickHouseSchemaError> {
        let mut receipts = Vec::new();
        let mut before: BTreeMap<String, Inspection> = BTreeMap::new();
        for pod in holders {
            let at = At::new(plan, "check", &pod.name);
            let inspection = match inspect {
                Inspect::Apply => self.inspect(&at).await?,
                Inspect::Plan => self.inspect_with(&at, plan.plan_inspect_script()).await?,
            };
            receipts.extend(inspection.receipts.iter().cloned());
            before.insert(pod.name.clone(), inspection);
        }
        for pod in due {
            self.refuse(plan, &pod.name, &before[&pod.name], declared)?;
        }
        Ok((receipts, before))
    }

    async fn rebuild_table(
        &self,
        plan: &RebuildPlan,
        due: &[&PodInfo],
        holders: &[&PodInfo],
        declared: &BTreeSet<String>,
    ) -> Result<(), ClickHouseSchemaError> {
        let key = plan.key();
        let table = plan.table.as_str();
        let new_name = format!("{table}{NEW_SUFFIX}");
        self.rebuild_event(
            plan,
            "check",
            None,
            None,
            None,
            format!(
                "{key} differs from its declaration in a way no ALTER can change on {} pod(s): rebuilding it",
                due.len()
            ),
        );

        // Inspect, refuse what would lose or break something, then prepare.
        let (receipts, before) = self.check(plan, due, holders, declared, Inspect::Apply).await?;
        // Boxed: a caller may poll this on a small stack (see `rebuild_exec`).
        let inspected = Box::pin(self.prepare(plan, due, &before)).await?;
        self.rebuild_event(
            plan,
            "prepare",
            None,
            None,
            None,
            format!(
                "{key}: {}{NEW_SUFFIX} and the staging table exist on {} pod(s)",
                table,
                due.len()
            ),
        );

        // The cut-over: the one recorded (a resumed rebuild), else a new one.
        let first = due[0];
        let live_type = inspected[&first.name]
            .columns_of(table)
            .find(|c| c.1 == plan.config.cutover_column)
            .map(|c| c.2.clone())
            .unwrap_or_default();
        let kind = rebuild::cutover_type(&live_type).map_err(|why| {
            self.rebuild_error(
                ErrorKind::RebuildRefused,
                &At::new(plan, "check", &first.name),
                &format!(
                    "the live table's cut-over column {} {why}",
                    plan.config.cutover_column
                ),
            )
        })?;
        let abandoned: BTreeSet<&str> = receipts
            .iter()
            .filter(|r| r.step == "abandoned")
            .map(|r| r.value.as_str())
            .collect();
        // Finished: swapped on every pod due now. A pod whose table was made again by hand since
        // needs a new attempt, not that one's receipts (it would skip the backfill).
        let finished = |value: &str| {
            due.iter().all(|pod| {
                receipts
                    .iter()
                    .any(|r| r.step == "swapped" && r.cutover == value && r.source == pod.name)
            })
        };
        let recorded = receipts
            .iter()
            .filter(|r| r.step == "cutover" && !abandoned.contains(r.value.as_str()) && !finished(&r.value))
            .find_map(|r| Cutover::parse(kind, &r.value));
        let cutover = match recorded {
            Some(cutover) => cutover,
            None => self.new_cutover(plan, kind, due, &receipts).await?,
        };
        // Which source each pod reads, and the pod that copies for each source.
        let source_of = |pod: &PodInfo| -> String {
            inspected[&pod.name]
                .replicas
                .get(table)
                .cloned()
                .unwrap_or_else(|| pod.name.clone())
        };
        let mut sources: BTreeMap<String, &PodInfo> = BTreeMap::new();
        for pod in due {
            sources.entry(source_of(pod)).or_insert(pod);
        }
        let copiers: BTreeSet<&str> = sources.values().map(|p| p.name.as_str()).collect();
        // Several sources into one new table are local tables becoming one `Replicated` table.
        // Two replica sets into one are the same rows twice over: a replica set half swapped
        // (one replica serves the declared path, another the old one) reads as that.
        let mut per_target: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for pod in due {
            let into = inspected[&pod.name]
                .replicas
                .get(&new_name)
                .cloned()
                .unwrap_or_else(|| pod.name.clone());
            per_target.entry(into).or_default().insert(source_of(pod));
        }
        if let Some((into, from)) = per_target.iter().find(|(_, from)| {
            from.len() > 1
                && due.iter().any(|p| {
                    inspected[&p.name]
                        .replicas
                        .get(table)
                        .is_some_and(|path| from.contains(path))
                })
        }) {
            return Err(self.rebuild_error(
                ErrorKind::RebuildRefused,
                &At::new(plan, "prepare", &first.name),
                &format!(
                    "the new table '{into}' would be filled from {} replica sets ({}): they hold the same rows \
                     (a replica set whose swap went through on some replicas only), which a rebuild would copy twice. \
                     Make {}.{table} as declared by hand on the replicas that still serve the old path (drop it and \
                     run the declared CREATE: it joins the set and fetches its rows), then deploy again",
                    from.len(),
                    from.iter().cloned().collect::<Vec<_>>().join(", "),
                    plan.database,
                ),
            ));
        }
        // The live rows must convert to the new table's column types before any view exists: a
        // view converts each production insert the same way, and one it cannot convert would
        // fail that insert (after the live table took the block, on a plain MergeTree, so that
        // a client's retry doubles it). Checked on each source, only where a type changes; on a
        // resumed rebuild too, as rows written since its view was made may not convert (their
        // inserts failed): its views are then dropped before refusing.
        for pod in sources.values() {
            let converted: Vec<(String, String)> = rebuild::copy_columns(&inspected[&pod.name], table)
                .into_iter()
                .filter_map(|(name, to)| Some((name, to?)))
                .collect();
            if converted.is_empty() {
                continue;
            }
            let at = At::new(plan, "prepare", &pod.name);
            let script = plan.convert_check_script(&converted);
            let (output, script) = Box::pin(self.rebuild_run(&at, script, true)).await?;
            if output.exit_code == 0 {
                continue;
            }
            let said = redact_clickhouse_output(&output.stderr, &script);
            let columns = converted
                .iter()
                .map(|(name, to)| format!("{name} ({to})"))
                .collect::<Vec<_>>()
                .join(", ");
            if !rebuild::conversion_failed(said.clickhouse_code, &said.text) {
                return Err(self
                    .rebuild_error(
                        ErrorKind::RebuildFailed,
                        &at,
                        &format!(
                            "the check that the rows of {} convert to the declared types of {columns} failed before \
                             the dual write (nothing changed): {}",
                            plan.key(),
                            redact_row_values(&said.text)
                        ),
                    )
                    .with_clickhouse(said.clickhouse_code, said.clickhouse_exception));
            }
            let view = format!("{table}{VIEW_SUFFIX}");
            let viewed: Vec<&PodInfo> = due
                .iter()
                .copied()
                .filter(|p| inspected[&p.name].tables.contains_key(&view))
                .collect();
            // Only the views: the new table and the copies stay for when the rows convert (the
            // next dual write copies what reached the live table alone meanwhile, as after any
            // view-less pause), and a view is cheap to drop where a table may be over the
            // server's drop limit. Every view of a target is dropped before any of its RENAMEs,
            // so a pod with a view belongs to a target whose swap has not begun.
            let live_engine = inspected[&pod.name]
                .tables
                .get(table)
                .map(|(e, _)| e.as_str())
                .unwrap_or("");
            let keeps_copies = plan.copies_differences(live_engine);
            if keeps_copies {
                for p in &viewed {
                    let at = At::new(plan, "prepare", &p.name);
                    let lazy = inspected[&p.name].drops_lazily();
                    self.rebuild_exec(&at, plan.stop_dual_write_script(lazy), true)
                        .await?;
                }
            } else if !viewed.is_empty() {
                // An engine that folds rows gets no copy of what the live table alone took during
                // the pause (a difference of folded rows is no set of missing rows): its rebuild
                // is abandoned, on every pod of each target that has a view (and so no RENAME).
                let target_of = |p: &PodInfo| {
                    inspected[&p.name]
                        .replicas
                        .get(&new_name)
                        .cloned()
                        .unwrap_or_else(|| p.name.clone())
                };
                let hit: BTreeSet<String> = viewed.iter().map(|p| target_of(p)).collect();
                let pods: Vec<&PodInfo> = due
                    .iter()
                    .copied()
                    .filter(|p| hit.contains(&target_of(p)))
                    .collect();
                Box::pin(self.abandon(plan, &pods, &inspected, &cutover)).await?;
            }
            return Err(self
                .rebuild_error(
                    ErrorKind::RebuildRefused,
                    &at,
                    &format!(
                        "the rows of {} do not all convert to the declared types of {columns} ({}): {}. Correct \
                         those rows, or declare types they convert to",
                        plan.key(),
                        if viewed.is_empty() {
                            "no view was created, so no insert fails on them".to_owned()
                        } else if !keeps_copies {
                            format!(
                                "the view of this unfinished rebuild, which fails each insert of such a value, was \
                                 dropped on {} pod(s), and the rebuild abandoned: its engine folds rows, so it cannot \
                                 go on from its copies after a pause; it starts over once the rows convert; the live \
                                 table serves as before",
                                viewed.len()
                            )
                        } else {
                            format!(
                                "the view of this unfinished rebuild, which fails each insert of such a value, was \
                                 dropped on {} pod(s); its new table and copies are kept, and the rebuild goes on \
                                 from them once the rows convert; the live table serves as before",
                                viewed.len()
                            )
                        },
                        redact_row_values(&said.text)
                    ),
                )
                .with_clickhouse(said.clickhouse_code, said.clickhouse_exception));
        }
        // The other replicas' views first, then each copier's copy of the rows dated ahead and its
        // view: a row written on another replica before its view is then in the copier's live
        // table (after its replication queue is done) when the copier reads it, and one written
        // after is carried by that replica's view.
        let (others, copying): (Vec<&PodInfo>, Vec<&PodInfo>) =
            due.iter().partition(|pod| !copiers.contains(pod.name.as_str()));
        for pod in others.into_iter().chain(copying) {
            let at = At::new(plan, "dualWrite", &pod.name);
            let inspection = &inspected[&pod.name];
            let columns = rebuild::shared_columns(inspection, table);
            let live_engine = inspection
                .tables
                .get(table)
                .map(|(e, _)| e.as_str())
                .unwrap_or("");
            let ahead = (copiers.contains(pod.name.as_str()) && plan.copies_differences(live_engine))
                .then(|| rebuild::copy_columns(inspection, table));
            let sync = ahead.is_some() && inspection.replicas.contains_key(table);
            self.rebuild_exec(
                &at,
                plan.dual_write_script(&cutover, &columns, ahead.as_deref(), sync),
                true,
            )
            .await?;
        }
        self.rebuild_event(
            plan,
            "dualWrite",
            None,
            None,
            None,
            format!(
                "{key}: rows with {} >= {} are written to both tables from now on, and those the table held \
                 already are copied",
                plan.config.cutover_column,
                cutover.sql()
            ),
        );

        // Verification, target by target (the new table's replica set, or the pod).
        let mut targets: BTreeMap<String, Vec<&PodInfo>> = BTreeMap::new();
        for pod in due {
            let target = inspected[&pod.name]
                .replicas
                .get(&new_name)
                .cloned()
                .unwrap_or_else(|| pod.name.clone())
                .clone();
            targets.entry(target).or_default().push(pod);
        }
        // Each target's rows before the cut-over in the new table, as its verification left them.
        let verify_all = |phase: Phase| {
            let targets = &targets;
            let inspected = &inspected;
            let cutover = &cutover;
            let source_of = &source_of;
            async move {
                let mut copied: BTreeMap<String, VerifiedCounts> = BTreeMap::new();
                for (target, pods) in targets {
                    // Each source read on its first pod, as the backfill copied it: a catch-up must
                    // run where the new table already holds what the backfill attached (another
                    // replica may not have fetched it yet, and would copy those rows again).
                    let mut in_target: BTreeMap<String, &PodInfo> = BTreeMap::new();
                    for pod in pods {
                        in_target.entry(source_of(pod)).or_insert(pod);
                    }
                    match Box::pin(self.verify_target(plan, pods[0], &in_target, inspected, cutover, phase))
                        .await?
                    {
                        Verified::Matches {
                            copied: counts,
                            sources,
                        } => {
                            copied.insert(target.clone(), (counts, sources));
                        }
                        Verified::Differs(mismatch) => {
                            Box::pin(self.abandon(plan, due, inspected, cutover)).await?;
                            return Err(mismatch);
                        }
                    }
                }
                Ok::<_, ClickHouseSchemaError>(copied)
            }
        };
        if kind == CutoverKind::Time {
            // Before the clock reaches the cut-over only rows dated ahead reach the view's range:
            // those the table held are in the new table now, or a row written while the copy ran
            // was missed, which this finds while the rebuild can still start over.
            Box::pin(verify_all(Phase::Ahead)).await?;
        }
        if kind == CutoverKind::Time {
            self.wait_for_cutover(plan, &cutover, first).await?;
        }

        // The backfill, source by source.
        // Only this cut-over's: an abandoned rebuild's copies are not in the new table.
        let copied: BTreeSet<(&str, &str)> = rebuild::of_cutover(&receipts, &cutover)
            .filter(|r| r.step == "copied")
            .map(|r| (r.source.as_str(), r.partition.as_str()))
            .collect();
        for (source, pod) in &sources {
            self.backfill(
                plan,
                source,
                pod,
                &inspected[&pod.name],
                &cutover,
                &copied,
                &receipts,
            )
            .await?;
        }

        let copied_before = Box::pin(verify_all(Phase::Final)).await?;

        // The swap, target by target: every pod of a replica set drops its view before any
        // renames, so the new table stands still while its snapshot is taken on the pod that
        // compares the old table with it afterwards (see `RebuildPlan::snapshot_script`).
        for (target, pods) in &targets {
            let first = pods[0];
            let at = At::new(plan, "swap", &first.name);
            let sync = inspected[&first.name].replicas.contains_key(&new_name);
            // The staging table emptied while the views still write: it holds the backfill's last
            // partition (or an earlier attempt's snapshot), and a server refuses to TRUNCATE it
            // over its size limits; a DETACH that fails here leaves every view in place.
            self.empty_stage(&at).await?;
            for pod in pods {
                let at = At::new(plan, "swap", &pod.name);
                let lazy = inspected[&pod.name].drops_lazily();
                self.rebuild_exec(&at, plan.drop_view_script(&cutover.value, &pod.name, lazy), false)
                    .await?;
            }
            let out = self
                .rebuild_exec(&at, plan.snapshot_partitions_query(sync), true)
                .await?;
            let partitions = rebuild::parse_tagged(&out, "p")
                .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?;
            let out = self
                .rebuild_exec(
                    &at,
                    plan.snapshot_script(&partitions, &cutover.value, &first.name),
                    true,
                )
                .await?;
            let rows = rebuild::parse_tagged(&out, "n")
                .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?;
            let [snapshot, new] = rows.as_slice() else {
                return Err(self.rebuild_error(
                    ErrorKind::RebuildFailed,
                    &at,
                    &format!("the snapshot's row counts could not be read: {rows:?}"),
                ));
            };
            // More rows in the table than in its snapshot: rows came in since its partitions were
            // listed (not from this rebuild: its views are gone). Fewer is a merge that folded rows
            // (a Replacing or Summing engine, a TTL) after the snapshot's REPLACE, which changes
            // nothing the snapshot holds.
            let count = |text: &str| text.parse::<u64>().ok();
            let (Some(snapshot), Some(new)) = (count(snapshot), count(new)) else {
                return Err(self.rebuild_error(
                    ErrorKind::RebuildFailed,
                    &at,
                    &format!("the snapshot's row counts are not numbers: {rows:?}"),
                ));
            };
            if new > snapshot {
                return Err(self.rebuild_error(
                    ErrorKind::RebuildFailed,
                    &at,
                    &format!(
                        "{table}{NEW_SUFFIX} holds {new} row(s) and its snapshot {snapshot}: something other than \
                         this rebuild wrote into it after the views were dropped, so what the old table lacks after \
                         the swap could not be told. No pod of {target} was renamed: its live table serves, and the \
                         next deploy takes the snapshot again"
                    ),
                ));
            }
            self.rebuild_event(
                plan,
                "swap",
                Some(&first.name),
                None,
                None,
                format!(
                    "{key} on {target}: the view{} dropped and the new table's {} partition(s) snapshotted; inserts \
                     reach the old table only until the RENAME, and the rows they bring are copied after it",
                    if pods.len() > 1 { "s of every replica are" } else { " is" },
                    partitions.len()
                ),
            );
            for pod in pods {
                let at = At::new(plan, "swap", &pod.name);
                self.rebuild_exec(&at, plan.rename_script(&cutover.value, &pod.name), false)
                    .await?;
                self.rebuild_event(
                    plan,
                    "swap",
                    Some(&pod.name),
                    None,
                    None,
                    format!("{key} on {}: swapped; the new table serves", pod.name),
                );
            }
        }
        Box::pin(self.after_swap(
            plan,
            due,
            &targets,
            &copied_before,
            &source_of,
            &inspected,
            &cutover,
        ))
        .await
    }

    /// The prepare step on the due pods: an earlier declaration's objects dropped (see below),
    /// then the new and staging tables made; returns each due pod's inspection after it.
    async fn prepare(
        &self,
        plan: &RebuildPlan,
        due: &[&PodInfo],
        before: &BTreeMap<String, Inspection>,
    ) -> Result<BTreeMap<String, Inspection>, ClickHouseSchemaError> {
        let key = plan.key();
        let table = plan.table.as_str();
        // The ZooKeeper path each holder's live table serves (expanded, as the server lists it).
        let serving: Vec<(&str, &str)> = before
            .iter()
            .filter_map(|(pod, inspection)| Some((pod.as_str(), inspection.replicas.get(table)?.as_str())))
            .collect();
        // This tool's objects of a rebuild towards another declaration (the user changed it while
        // that rebuild was unfinished): the new table has the other definition, so they are dropped
        // and this rebuild starts from nothing (`refuse` let only this tool's through). Not when
        // that new table replicates a table another pod serves (its swap went through there): its
        // rows are that table's, and a rebuild from both would copy them twice.
        let stale = |pod: &PodInfo| {
            let inspection = &before[&pod.name];
            !leftovers(plan, inspection).is_empty()
                && inspection
                    .made
                    .as_ref()
                    .is_some_and(|made| made.iter().any(|target| *target != plan.target))
        };
        for pod in due.iter().filter(|p| stale(p)) {
            let inspection = &before[&pod.name];
            self.refuse_joining_a_serving_set(plan, pod, inspection, inspection, &serving)
                .await?;
        }
        // Every pod's before any prepare: a `Replicated` new table of the other declaration on one
        // pod would otherwise clash with this one's, created on another with the same path.
        for pod in due.iter().filter(|p| stale(p)) {
            let at = At::new(plan, "prepare", &pod.name);
            self.rebuild_exec(&at, plan.discard_script(), true).await?;
            self.rebuild_event(
                plan,
                "prepare",
                Some(&pod.name),
                None,
                None,
                format!(
                    "{key} on {}: dropped {} that an unfinished rebuild towards an earlier declaration of the \
                     table made; this one starts over",
                    pod.name,
                    leftovers(plan, &before[&pod.name]).join(", ")
                ),
            );
        }
        let mut inspected: BTreeMap<String, Inspection> = BTreeMap::new();
        for pod in due {
            let at = At::new(plan, "prepare", &pod.name);
            let inspection = &before[&pod.name];
            let made = if leftovers(plan, inspection).is_empty() || stale(pod) {
                rebuild::Made::Fresh
            } else if inspection.made.as_ref().is_some_and(BTreeSet::is_empty) {
                // `refuse` let them through as an earlier version's unfinished rebuild.
                rebuild::Made::Adopt
            } else {
                rebuild::Made::Recorded
            };
            self.rebuild_exec(&at, plan.prepare_script(made), true).await?;
            let inspection = self.inspect(&at).await?;
            self.refuse_joining_a_serving_set(plan, pod, &before[&pod.name], &inspection, &serving)
                .await?;
            inspected.insert(pod.name.clone(), inspection);
        }
        Ok(inspected)
    }

    /// Refuses a rebuild on `pod` that would lose or break something.
    fn refuse(
        &self,
        plan: &RebuildPlan,
        pod: &str,
        inspection: &Inspection,
        declared: &BTreeSet<String>,
    ) -> Result<(), ClickHouseSchemaError> {
        let table = plan.table.as_str();
        let at = At::new(plan, "check", pod);
        let refused = |why: String| self.rebuild_error(ErrorKind::RebuildRefused, &at, &why);
        if let Some(why) = inspection.database_refusal() {
            return Err(refused(why));
        }
        let found = leftovers(plan, inspection);
        if !found.is_empty()
            && inspection.made.as_ref().is_some_and(BTreeSet::is_empty)
            && !resumable_without_made(inspection, pod)
        {
            return Err(refused(format!(
                "{} exist(s) on the pod, and this tool did not make {} (no open receipt of a rebuild of {} in \
                 {}.{RECEIPTS_TABLE} there): it may be someone's migration, which the rebuild would write into and \
                 drop. Rename it, or drop it once its rows are no longer needed, and deploy again",
                found
                    .iter()
                    .map(|name| format!("{}.{name}", plan.database))
                    .collect::<Vec<_>>()
                    .join(", "),
                if found.len() == 1 { "it" } else { "them" },
                plan.key(),
                plan.database,
            )));
        }
        if inspection.tables.contains_key(&format!("{table}{OLD_SUFFIX}")) {
            return Err(refused(format!(
                "{}.{table}{OLD_SUFFIX} exists (an earlier rebuild's old table): the swap would need its name. \
                 Drop it, or rename it, once its rows are no longer needed",
                plan.database
            )));
        }
        let engine = inspection
            .tables
            .get(table)
            .map(|(e, _)| e.clone())
            .unwrap_or_default();
        if !engine.ends_with("MergeTree") {
            return Err(refused(format!(
                "the live table's engine is {engine}: a rebuild moves partitions, which only the MergeTree family has"
            )));
        }
        let declared_engine = plan_engine(plan);
        if inspection.replicas.contains_key(table) && !declared_engine.starts_with("Replicated") {
            return Err(refused(format!(
                "the live table is {engine} and the declaration {declared_engine}: rows written during the rebuild \
                 on one replica would reach only that replica's new table (a materialized view does not see \
                 replicated parts)"
            )));
        }
        if let (Some(live_path), Some(declared_path)) = (
            inspection.create.as_deref().and_then(replication_path),
            replication_path(plan.engine_text()),
        ) && live_path == declared_path
        {
            return Err(refused(format!(
                "the declaration keeps the live table's ZooKeeper path '{live_path}': the new table is created \
                 beside the live one, so it needs a path of its own (append a version, say '{live_path}_v2')"
            )));
        }
        let dependents = rebuild::dependents(plan, inspection, declared);
        if !dependents.is_empty() {
            return Err(refused(format!(
                "{} read(s) or write(s) the table by name and would follow it to {table}{OLD_SUFFIX} or break at the \
                 swap: {}. Drop them before the deploy and declare them in the statements, so that the apply \
                 creates them again after the swap, reading the new table; or drop them for good",
                dependents.len(),
                dependents.join(", ")
            )));
        }
        Ok(())
    }

    /// Refuses when `pod`'s new table (`after` its prepare) has the ZooKeeper path another pod's
    /// live table serves: that pod serves the declared table already (its swap went through,
    /// and this pod's table was made again by hand with the old definition, or this pod's swap
    /// was cut short). The dual write and the backfill into this new table would replicate
    /// this pod's rows into the serving table, and an abandon could not take them back. A new
    /// table this prepare just created is dropped again (a replica's DROP leaves the others'
    /// data alone); one that was there before is left for the user to look at.
    async fn refuse_joining_a_serving_set(
        &self,
        plan: &RebuildPlan,
        pod: &PodInfo,
        before: &Inspection,
        after: &Inspection,
        serving: &[(&str, &str)],
    ) -> Result<(), ClickHouseSchemaError> {
        let table = plan.table.as_str();
        let new_name = format!("{table}{NEW_SUFFIX}");
        let Some(new_path) = after.replicas.get(&new_name) else {
            return Ok(());
        };
        let Some((other, _)) = serving
            .iter()
            .find(|(other, path)| *other != pod.name && path == new_path)
        else {
            return Ok(());
        };
        let at = At::new(plan, "prepare", &pod.name);
        let created_now = !before.tables.contains_key(&new_name);
        if created_now {
            self.rebuild_exec(&at, plan.discard_script(), true).await?;
        }
        Err(self.rebuild_error(
            ErrorKind::RebuildRefused,
            &at,
            &format!(
                "pod {other}'s live {db}.{table} already serves the declared ZooKeeper path '{new_path}' (its \
                 rebuild went through; this pod's table was made again with the old definition since, or its \
                 swap was cut short), so {table}{NEW_SUFFIX} here would replicate this pod's rows into it. \
                 {}Make {db}.{table} on pod {pod} as declared by hand (drop it and run the declared CREATE: it \
                 joins the replica set and fetches its rows), keeping any rows only it holds, then deploy again",
                if created_now {
                    format!("The {table}{NEW_SUFFIX} this step created was dropped again. ")
                } else {
                    format!("{table}{NEW_SUFFIX} was there before this run and is left as it is. ")
                },
                db = plan.database,
                pod = pod.name,
            ),
        ))
    }

    /// A cut-over no earlier attempt used: receipts are keyed by the cut-over's value, so one that
    /// repeated an abandoned attempt's (an integer column whose largest value has not moved since)
    /// would take that attempt's copies as done and skip the backfill, fail verification and
    /// abandon again, on every apply.
    async fn new_cutover(
        &self,
        plan: &RebuildPlan,
        kind: CutoverKind,
        due: &[&PodInfo],
        receipts: &[rebuild::Receipt],
    ) -> Result<Cutover, ClickHouseSchemaError> {
        let mut best = self
            .largest(
                plan,
                "dualWrite",
                kind,
                due,
                plan.cutover_query(kind),
                "the cut-over query",
            )
            .await?;
        if kind == CutoverKind::Number {
            // Past the values used, not above all of them (see `unused_from`): a finished attempt far
            // above the live rows (ids that restarted, a table made again) would put the cut-over
            // above every row written meanwhile, so the view would carry none of them.
            let used: BTreeSet<i128> = receipts
                .iter()
                .filter(|r| r.step == "cutover" || r.step == "abandoned")
                .filter_map(|r| r.value.parse::<i128>().ok())
                .collect();
            best = best.map(|v| rebuild::unused_from(v, &used));
        }
        Ok(Cutover {
            kind,
            value: best.unwrap_or(0).to_string(),
        })
    }

    /// The number `query` prints: for a time the first pod's clock, for an integer the largest
    /// over `pods`. An answer that is no number is an error naming `what`.
    async fn largest(
        &self,
        plan: &RebuildPlan,
        step: &'static str,
        kind: CutoverKind,
        pods: &[&PodInfo],
        query: String,
        what: &str,
    ) -> Result<Option<i128>, ClickHouseSchemaError> {
        let pods = match kind {
            CutoverKind::Time => &pods[..pods.len().min(1)],
            CutoverKind::Number => pods,
        };
        let mut best: Option<i128> = None;
        for pod in pods {
            let at = At::new(plan, step, &pod.name);
            let out = self.rebuild_exec(&at, query.clone(), true).await?;
            let value: i128 = out.trim().parse().map_err(|_| {
                self.rebuild_error(
                    ErrorKind::RebuildFailed,
                    &at,
                    &format!("{what} printed {:?}, not a number", out.trim()),
                )
            })?;
            best = Some(best.map_or(value, |b| b.max(value)));
        }
        Ok(best)
    }

    async fn wait_for_cutover(
        &self,
        plan: &RebuildPlan,
        cutover: &Cutover,
        pod: &PodInfo,
    ) -> Result<(), ClickHouseSchemaError> {
        let target: i128 = cutover.value.parse().unwrap_or(0);
        loop {
            let at = At::new(plan, "dualWrite", &pod.name);
            let out = self
                .rebuild_exec(
                    &at,
                    "SELECT toUnixTimestamp(now()) FORMAT TSV;\n".to_owned(),
                    true,
                )
                .await?;
            // An answer that is no time must not read as "the cut-over has passed": the backfill
            // would start before rows written just before it had reached the live table.
            let now: i128 = out.trim().parse().map_err(|_| {
                self.rebuild_error(
                    ErrorKind::RebuildFailed,
                    &at,
                    &format!("the server's time printed {:?}, not a number", out.trim()),
                )
            })?;
            if now >= target {
                return Ok(());
            }
            let wait = u64::try_from(target - now).unwrap_or(1).min(3600);
            self.rebuild_event(
                plan,
                "dualWrite",
                Some(&pod.name),
                None,
                None,
                format!(
                    "{}: waiting {wait} s for the cut-over, so that every row before it is in the live table",
                    plan.key()
                ),
            );
            if self
                .unless_cancelled(self.clock.sleep(Duration::from_secs(wait)))
                .await
                .is_none()
            {
                return Err(self
                    .cancelled(&format!("while {} waited for its cut-over", plan.key()))
                    .with_pod(&pod.name));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn backfill(
        &self,
        plan: &RebuildPlan,
        source: &str,
        pod: &PodInfo,
        inspection: &Inspection,
        cutover: &Cutover,
        copied: &BTreeSet<(&str, &str)>,
        receipts: &[rebuild::Receipt],
    ) -> Result<(), ClickHouseSchemaError> {
        let key = plan.key();
        let table = plan.table.as_str();
        let live_key = inspection
            .tables
            .get(table)
            .map(|(_, k)| k.clone())
            .unwrap_or_default();
        let columns = rebuild::shared_columns(inspection, table);
        let same_partitioning = inspection
            .tables
            .get(&format!("{table}{NEW_SUFFIX}"))
            .is_some_and(|(_, new_key)| *new_key == live_key);
        let at = At::new(plan, "backfill", &pod.name);
        // Each copy empties the stage with a TRUNCATE, which a server refuses over its
        // max_table_size_to_drop: a swap that stopped after its snapshot left the whole table there.
        self.empty_stage(&at).await?;
        let out = self
            .rebuild_exec(
                &at,
                plan.backfill_partitions_script(&live_key, inspection.replicas.contains_key(table)),
                true,
            )
            .await?;
        let partitions = rebuild::parse_partitions(&out)
            .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?;
        let total = partitions.len();
        let listed: u64 = partitions.iter().map(|p| p.rows).sum();
        self.rebuild_event(
            plan,
            "backfill",
            Some(&pod.name),
            None,
            None,
            format!(
                "{key}: copying the rows before the cut-over from {} ({total} partition(s), {listed} row(s) in all)",
                pod.name
            ),
        );
        // Partitions copied the one-exec way go in batches, so that an exec's start is paid once
        // per batch rather than per partition; each keeps its own receipts inside the script.
        let mut batch: Vec<(usize, &rebuild::LivePartition)> = Vec::new();
        for (n, partition) in partitions.iter().enumerate() {
            if copied.contains(&(source, partition.id.as_str())) {
                self.rebuild_event(
                    plan,
                    "backfill",
                    Some(&pod.name),
                    Some(&partition.id),
                    None,
                    format!(
                        "{key} on {}: partition {} ({}/{total}) was copied by an earlier run (its receipt); skipped",
                        pod.name,
                        partition.id,
                        n + 1
                    ),
                );
                continue;
            }
            let done: BTreeSet<String> = rebuild::of_cutover(receipts, cutover)
                .filter(|r| r.step == "attached" && r.source == source && r.partition == partition.id)
                .map(|r| r.value.clone())
                .collect();
            if same_partitioning && done.is_empty() {
                batch.push((n, partition));
                let rows: u64 = batch.iter().map(|(_, p)| p.rows).sum();
                if rows >= BATCH_ROWS || batch.len() >= BATCH_PARTITIONS {
                    let full = std::mem::take(&mut batch);
                    self.copy_batch(plan, source, pod, &full, &live_key, cutover, &columns, total)
                        .await?;
                }
                continue;
            }
            let full = std::mem::take(&mut batch);
            self.copy_batch(plan, source, pod, &full, &live_key, cutover, &columns, total)
                .await?;
            // A partition the new table splits differently: staged, then each of its new
            // partitions moved that was not moved before. Not retried: a transport failure may
            // have moved a partition whose receipt is lost.
            let at = At {
                plan,
                step: "backfill",
                pod: &pod.name,
                partition: Some(&partition.id),
            };
            let out = self
                .rebuild_exec(
                    &at,
                    plan.stage_script(partition, &live_key, cutover, &columns),
                    true,
                )
                .await?;
            let staged = rebuild::parse_staged(&out)
                .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?;
            self.rebuild_exec(
                &at,
                plan.attach_script(source, cutover, partition, &staged, &done),
                false,
            )
            .await?;
            let rows: u64 = staged.iter().map(|(_, r)| r).sum();
            self.copied_event(plan, pod, partition, n, total, rows);
        }
        self.copy_batch(plan, source, pod, &batch, &live_key, cutover, &columns, total)
            .await?;
        Ok(())
    }

    /// Copies `batch` (partitions partitioned alike in both tables) in one exec, and reports each
    /// partition the script got through. Not retried: a transport failure may have moved a
    /// partition whose receipt is lost.
    #[allow(clippy::too_many_arguments)]
    async fn copy_batch(
        &self,
        plan: &RebuildPlan,
        source: &str,
        pod: &PodInfo,
        batch: &[(usize, &rebuild::LivePartition)],
        live_key: &str,
        cutover: &Cutover,
        columns: &[String],
        total: usize,
    ) -> Result<(), ClickHouseSchemaError> {
        let Some((_, first)) = batch.first() else {
            return Ok(());
        };
        let script: String = batch
            .iter()
            .map(|(_, p)| plan.copy_script(source, p, live_key, cutover, columns))
            .collect();
        let at = At {
            plan,
            step: "backfill",
            pod: &pod.name,
            partition: Some(&first.id),
        };
        // One statement's bound per partition, as each partition's copy in an exec of its own
        // had (see `BATCH_PARTITIONS`).
        let statements = batch.len();
        let (output, script) = self.rebuild_run_bounded(&at, script, false, statements).await?;
        let finished = rebuild::parse_copied(&output.stdout).unwrap_or_default();
        for (n, partition) in batch {
            match finished.iter().find(|(id, _)| *id == partition.id) {
                Some((_, rows)) => self.copied_event(plan, pod, partition, *n, total, *rows),
                None => {
                    // The script stopped at this partition: the error names it.
                    let at = At {
                        partition: Some(&partition.id),
                        ..at
                    };
                    self.exit_checked(&at, output, &script)?;
                    return Err(self.rebuild_error(
                        ErrorKind::RebuildFailed,
                        &at,
                        "the copy printed no row count for the partition",
                    ));
                }
            }
        }
        Ok(())
    }

    fn copied_event(
        &self,
        plan: &RebuildPlan,
        pod: &PodInfo,
        partition: &rebuild::LivePartition,
        n: usize,
        total: usize,
        rows: u64,
    ) {
        self.rebuild_event(
            plan,
            "backfill",
            Some(&pod.name),
            Some(&partition.id),
            Some(rows),
            format!(
                "{} on {}: partition {} ({}/{total}): {rows} row(s) before the cut-over copied",
                plan.key(),
                pod.name,
                partition.id,
                n + 1
            ),
        );
    }

    /// Compares one target (the new table on `verifier`, or its replica set) with the sum of its
    /// sources, per live partition, in the ranges `phase` says (see [`Phase`]). The rows before
    /// the cut-over change in the new table only by this rebuild's copies, so they are compared
    /// exactly, and rows a source holds there that the new table lacks (written after their
    /// partition was copied) are copied now, where the target has one source. The rows the view
    /// carries keep arriving while they are read, so the new table is read before and after its
    /// sources: a quiet read (the same both times) must match exactly, and under writes the
    /// sources' rows must lie between the two. `Some`: they differ, and the error says how.
    async fn verify_target(
        &self,
        plan: &RebuildPlan,
        verifier: &PodInfo,
        sources: &BTreeMap<String, &PodInfo>,
        inspected: &BTreeMap<String, Inspection>,
        cutover: &Cutover,
        phase: Phase,
    ) -> Result<Verified, ClickHouseSchemaError> {
        let key = plan.key();
        let table = plan.table.as_str();
        let inspection = &inspected[&verifier.name];
        let live_key = inspection
            .tables
            .get(table)
            .map(|(_, k)| k.clone())
            .unwrap_or_default();
        // Rows are hashed only when `verify` asks (a scan of every column costs), and a column
        // the new table converts is left out here: the live table may hold a value that does
        // not convert, which the backfill reports by its partition, while a hash of the converted
        // value would fail verification's whole-table read first (the comparison after the swap
        // hashes it, where every row before the cut-over was converted once already).
        let columns: Vec<rebuild::HashedColumn> = match plan.config.verify {
            crate::config::RebuildVerify::Checksum => rebuild::checksum_columns(inspection, table)
                .into_iter()
                .filter(|c| !c.converted)
                .collect(),
            _ => Vec::new(),
        };
        let copied_columns = rebuild::copy_columns(inspection, table);
        let live_engine = inspection
            .tables
            .get(table)
            .map(|(e, _)| e.clone())
            .unwrap_or_default();
        let replicated = inspection.replicas.contains_key(&format!("{table}{NEW_SUFFIX}"));
        let at = At::new(plan, "verify", &verifier.name);
        let mut caught_up: u64 = 0;
        let mut attempt = 0;
        loop {
            attempt += 1;
            // The bound up to which the view's rows are compared: none before the backfill (only
            // rows dated ahead are in its range then).
            let bound = match phase {
                Phase::Ahead => None,
                Phase::Final => Some(self.bound(plan, cutover, sources).await?),
            };
            let read_new = || async {
                let out = self
                    .rebuild_exec(
                        &at,
                        plan.counts_script(
                            NEW_SUFFIX,
                            &live_key,
                            &columns,
                            replicated,
                            cutover,
                            bound.as_ref(),
                            None,
                        ),
                        true,
                    )
                    .await?;
                rebuild::parse_counts(&out)
                    .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))
            };
            let early = read_new().await?;
            let mut expected = rebuild::SplitCounts::default();
            let mut per_source: BTreeMap<String, rebuild::Counts> = BTreeMap::new();
            for (source, pod) in sources {
                let at = At::new(plan, "verify", &pod.name);
                // A Replicated live table's queue done first: a row the new table got through another
                // replica's view is then in this replica's live table too, never read as extra.
                let sync = inspected[&pod.name].replicas.contains_key(table);
                let out = self
                    .rebuild_exec(
                        &at,
                        plan.counts_script("", &live_key, &columns, sync, cutover, bound.as_ref(), None),
                        true,
                    )
                    .await?;
                let counts = rebuild::parse_counts(&out)
                    .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?;
                rebuild::add_counts(&mut expected.before, &counts.before);
                rebuild::add_counts(&mut expected.after, &counts.after);
                per_source.insert(source.clone(), counts.before);
            }
            let late = read_new().await?;

            // Before the cut-over (the final phase only): exact.
            let before = match phase {
                Phase::Ahead => Vec::new(),
                Phase::Final => rebuild::count_differences(&expected.before, &late.before),
            };
            if let Some((p, e, f)) = before.iter().find(|(_, e, f)| f.0 > e.0) {
                return Ok(Verified::Differs(self.mismatch(
                    plan,
                    &at,
                    p,
                    &format!(
                        "{table}{NEW_SUFFIX} holds {} row(s) dated before the cut-over where the live table holds {} \
                         (another client wrote into {table}{NEW_SUFFIX}, or rows were deleted from {table})",
                        f.0, e.0
                    ),
                )));
            }
            // Rows a source holds that the new table lacks arrived after their partition was
            // copied: copied now (the difference, so never twice), then everything is read again.
            // They may keep arriving; what arrives after the last read is copied after the swap.
            if let Some((p, e, f)) = before
                .iter()
                .find(|(_, e, f)| e.0 == f.0 && attempt >= VERIFY_READS)
            {
                return Ok(Verified::Differs(self.mismatch(
                    plan,
                    &at,
                    p,
                    &format!(
                        "the checksums of the {} row(s) dated before the cut-over differ after {attempt} reads: the \
                         copies hold other values than the live table ({} against {})",
                        e.0, f.1, e.1
                    ),
                )));
            }
            let behind: Vec<&String> = before
                .iter()
                .filter(|(_, e, f)| e.0 > f.0)
                .map(|(p, _, _)| p)
                .collect();
            if !behind.is_empty() && (sources.len() != 1 || !plan.copies_differences(&live_engine)) {
                let (p, e, f) = &before[0];
                return Ok(Verified::Differs(self.mismatch(
                    plan,
                    &at,
                    p,
                    &format!(
                        "{} partition(s) differ before the cut-over ({p}: rows {} expected, {} found): rows dated \
                         before it arrived after their partition was copied, and they cannot be copied as a \
                         difference: {}",
                        before.len(),
                        e.0,
                        f.0,
                        if sources.len() != 1 {
                            "a target of several sources cannot tell whose rows are missing".to_owned()
                        } else {
                            format!("{live_engine} folds rows when parts merge, so a missing count is no missing row")
                        },
                    ),
                )));
            }
            if !behind.is_empty() && attempt < VERIFY_READS {
                let (_, source) = sources.iter().next().expect("one source");
                for p in behind {
                    let at = At {
                        partition: Some(p),
                        ..At::new(plan, "verify", &source.name)
                    };
                    let script = plan.catch_up_script(
                        "",
                        NEW_SUFFIX,
                        p,
                        &live_key,
                        &plan.before(cutover),
                        &copied_columns,
                        false,
                        false,
                        None,
                    );
                    caught_up += self
                        .catch_up(
                            &at,
                            script,
                            "dated before the cut-over arrived after it was copied; copied now",
                            true,
                        )
                        .await?;
                }
                continue;
            }
            if behind.is_empty() && !before.is_empty() {
                // The same rows with other checksums: read again, then it is a difference.
                let _ = self
                    .unless_cancelled(self.clock.sleep(Duration::from_secs(1)))
                    .await;
                continue;
            }

            // From the cut-over up to the bound: the sources' rows between the two reads of the
            // new table, and equal to them when those two agree.
            let judged = judge_view_range(&early.after, &expected.after, &late.after);
            // Counts that never stood still only bracket the rows: a row copied twice hides behind
            // one more written between the reads. With one source of plain rows, the rows
            // themselves are compared instead, twice a moment apart. A row the view missed (an
            // insert in the instant between the copy of the rows dated ahead and the view's
            // creation) is no reason to start over: it is in the old table, and the swap copies
            // the rows from the cut-over on that only the old table holds (`after_swap`).
            let mut rows_compared = None;
            if judged == (ViewRange::Matches { quiet: false })
                && attempt >= VERIFY_READS
                && sources.len() == 1
                && plan.copies_differences(&live_engine)
            {
                let (_, source) = sources.iter().next().expect("one source");
                let at = At::new(plan, "verify", &source.name);
                let script = plan.row_differences_script(
                    &copied_columns,
                    cutover,
                    bound.as_ref(),
                    inspected[&source.name].replicas.contains_key(table),
                    replicated,
                );
                let first = self.row_differences(&at, script.clone()).await?;
                let (lasting, every_extra_listed) = if first.rows.is_empty() && !first.cut {
                    (BTreeMap::new(), true)
                } else {
                    let _ = self
                        .unless_cancelled(self.clock.sleep(Duration::from_secs(1)))
                        .await;
                    let second = self.row_differences(&at, script).await?;
                    (
                        rebuild::lasting_differences(&first.rows, &second.rows),
                        first.lists_every_extra() && second.lists_every_extra(),
                    )
                };
                let missed: i64 = lasting.values().filter(|n| **n > 0).sum();
                let extra: i64 = -lasting.values().filter(|n| **n < 0).sum::<i64>();
                // A list cut short before the rows held too rarely may leave out rows held too
                // often: read again, and after a few more reads give up.
                if extra == 0 && !every_extra_listed && attempt < VERIFY_READS + 3 {
                    let _ = self
                        .unless_cancelled(self.clock.sleep(Duration::from_secs(1)))
                        .await;
                    continue;
                }
                let compared =
                    "comparing the rows from the cut-over on one by one (their counts never stood still)";
                if extra > 0 || !every_extra_listed {
                    return Ok(Verified::Differs(self.mismatch(
                        plan,
                        &at,
                        "",
                        &if extra > 0 {
                            format!(
                                "{compared}, {extra} row(s) are in {table}{NEW_SUFFIX} more often than in the live \
                                 table, in two reads a second apart: rows were copied twice, or another client wrote \
                                 into {table}{NEW_SUFFIX}"
                            )
                        } else {
                            format!(
                                "{compared}, more than {} row(s) differed between the live table and \
                                 {table}{NEW_SUFFIX} in every read, too many to tell the rows still on their way from \
                                 rows copied twice",
                                rebuild::ROW_DIFFERENCES_SHOWN
                            )
                        },
                    )));
                }
                rows_compared = Some(missed);
            }
            match judged {
                ViewRange::Matches { quiet } if quiet || attempt >= VERIFY_READS => {
                    let rows: u64 = match phase {
                        Phase::Ahead => expected.after.values().map(|(r, _)| r).sum(),
                        Phase::Final => expected
                            .before
                            .values()
                            .chain(expected.after.values())
                            .map(|(r, _)| r)
                            .sum(),
                    };
                    self.rebuild_event(
                        plan,
                        match phase {
                            Phase::Ahead => "dualWrite",
                            Phase::Final => "verify",
                        },
                        Some(&verifier.name),
                        None,
                        Some(rows),
                        format!(
                            "{key} on {}: {}{} row(s) match{}{}",
                            verifier.name,
                            match phase {
                                Phase::Ahead => "the rows dated at or after the cut-over: ",
                                Phase::Final => "",
                            },
                            rows,
                            match (plan.config.verify, rows_compared) {
                                (_, Some(0)) => {
                                    " (the rows the view carries compared one by one: writes never paused)".to_owned()
                                }
                                (_, Some(missed)) => format!(
                                    " (the rows the view carries compared one by one: writes never paused; {missed} \
                                     row(s) written while the view was being created are only in the live table, and \
                                     are copied from the old table after the swap)"
                                ),
                                (crate::config::RebuildVerify::Checksum, None) if quiet => {
                                    ", checksums included".to_owned()
                                }
                                (crate::config::RebuildVerify::Checksum, None) => {
                                    " (checksums of the rows the view carries were not compared: writes never paused)"
                                        .to_owned()
                                }
                                (crate::config::RebuildVerify::Count, None) => String::new(),
                            },
                            if caught_up > 0 {
                                format!(", {caught_up} of them copied late")
                            } else {
                                String::new()
                            }
                        ),
                    );
                    return Ok(Verified::Matches {
                        copied: late.before,
                        sources: per_source,
                    });
                }
                ViewRange::Extra(p, e, f) if attempt >= VERIFY_READS => {
                    return Ok(Verified::Differs(self.mismatch(
                        plan,
                        &at,
                        &p,
                        &format!(
                            "{table}{NEW_SUFFIX} held {} row(s) from the cut-over on before the live table held {} \
                             (another client wrote into {table}{NEW_SUFFIX}, or rows were copied twice)",
                            f.0, e.0
                        ),
                    )));
                }
                ViewRange::Missing(p, e, f) if attempt >= VERIFY_READS => {
                    return Ok(Verified::Differs(self.mismatch(
                        plan,
                        &at,
                        &p,
                        &if e.0 == f.0 {
                            format!(
                                "the checksums of the {} row(s) from the cut-over on differ after {attempt} reads: the \
                                 view wrote other values than the live table holds",
                                e.0
                            )
                        } else {
                            format!(
                                "rows {} expected, {} found from the cut-over on after {attempt} reads: rows the view \
                                 should carry are missing (written while the view was being created, or dated ahead \
                                 and written while the rows the table held were copied)",
                                e.0, f.0
                            )
                        },
                    )));
                }
                _ => {}
            }
            let _ = self
                .unless_cancelled(self.clock.sleep(Duration::from_secs(1)))
                .await;
        }
    }

    /// Runs a catch-up script (see [`RebuildPlan::catch_up_script`]) for `at`'s partition and
    /// reports the rows it copied, `what` saying which; returns them. `retry`: run again after a
    /// transport failure, only for a copy of the difference with the table it copies into (which
    /// copies nothing more the second time).
    /// Abandons the rebuild on the `due` pods: every view dropped first (a view is cheap to drop,
    /// and one left would keep writing into a new table no apply resumes), then each pod's
    /// objects (`RebuildPlan::abandon_script`). A new table or stage the server refuses to drop
    /// for its size (`max_table_size_to_drop`) is left, with the `abandoned` receipt written all
    /// the same and an event: the next apply refuses on it, as on any object no open receipt
    /// vouches for, until it is dropped by hand.
    async fn abandon(
        &self,
        plan: &RebuildPlan,
        due: &[&PodInfo],
        inspected: &BTreeMap<String, Inspection>,
        cutover: &Cutover,
    ) -> Result<(), ClickHouseSchemaError> {
        for pod in due {
            let at = At::new(plan, "abandon", &pod.name);
            let lazy = inspected.get(&pod.name).is_some_and(Inspection::drops_lazily);
            self.rebuild_exec(&at, plan.stop_dual_write_script(lazy), true)
                .await?;
        }
        for pod in due {
            let at = At::new(plan, "abandon", &pod.name);
            match self.rebuild_exec(&at, plan.abandon_script(cutover), true).await {
                Ok(_) => {}
                Err(err) if err.clickhouse_code == Some(rebuild::DROP_SIZE_LIMIT) => {
                    self.rebuild_exec(&at, plan.abandoned_receipt(cutover), true)
                        .await?;
                    self.rebuild_event(
                        plan,
                        "abandon",
                        Some(&pod.name),
                        None,
                        None,
                        format!(
                            "{} on {}: the rebuild is abandoned, but the server refused to drop {t}{NEW_SUFFIX} or \
                             {t}{STAGE_SUFFIX} (larger than its max_table_size_to_drop); drop them by hand (create \
                             the server's flags/force_drop_table file first, or raise the limit): until then a \
                             rebuild of the table is refused",
                            plan.key(),
                            pod.name,
                            t = plan.table
                        ),
                    );
                }
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// How many mutations of the old table on `at`'s pod have not finished
    /// ([`RebuildPlan::pending_mutations_query`]).
    async fn pending_mutations(&self, at: &At<'_>) -> Result<u64, ClickHouseSchemaError> {
        let out = self
            .rebuild_exec(at, at.plan.pending_mutations_query(), true)
            .await?;
        let counts = rebuild::parse_tagged(&out, "m")
            .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, at, &why))?;
        counts
            .iter()
            .map(|n| {
                n.parse::<u64>().map_err(|_| {
                    self.rebuild_error(ErrorKind::RebuildFailed, at, &format!("not a count: {n}"))
                })
            })
            .sum()
    }

    /// Runs a [`RebuildPlan::counts_script`] and reads its counts.
    async fn read_counts(
        &self,
        at: At<'_>,
        script: String,
    ) -> Result<rebuild::SplitCounts, ClickHouseSchemaError> {
        let out = self.rebuild_exec(&at, script, true).await?;
        rebuild::parse_counts(&out).map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))
    }

    async fn catch_up(
        &self,
        at: &At<'_>,
        script: String,
        what: &str,
        retry: bool,
    ) -> Result<u64, ClickHouseSchemaError> {
        let out = self.rebuild_exec(at, script, retry).await?;
        let rows = out.trim().parse::<u64>().unwrap_or(0);
        let partition = at
            .partition
            .map(|p| format!("partition {p}: "))
            .unwrap_or_default();
        self.rebuild_event(
            at.plan,
            at.step,
            Some(at.pod),
            at.partition,
            Some(rows),
            format!("{} on {}: {partition}{rows} row(s) {what}", at.plan.key(), at.pod),
        );
        Ok(rows)
    }

    /// The error of a verification that found a difference.
    /// Runs a [`RebuildPlan::row_differences_script`] and reads its rows.
    async fn row_differences(
        &self,
        at: &At<'_>,
        script: String,
    ) -> Result<rebuild::RowDifferences, ClickHouseSchemaError> {
        let out = self.rebuild_exec(at, script, true).await?;
        rebuild::parse_row_differences(&out)
            .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, at, &why))
    }

    fn mismatch(&self, plan: &RebuildPlan, at: &At<'_>, partition: &str, why: &str) -> ClickHouseSchemaError {
        self.rebuild_error(
            ErrorKind::RebuildFailed,
            &At {
                // Empty when the difference is not one partition's.
                partition: (!partition.is_empty()).then_some(partition),
                ..At::new(plan, at.step, at.pod)
            },
            &format!(
                "{why}. The new table, its view and staging table are dropped, so the next apply starts the \
                 rebuild over with a new cut-over"
            ),
        )
    }

    /// Reads the bound of the view's range (see [`RebuildPlan::bound_query`]): for an integer
    /// column the largest over the sources.
    async fn bound(
        &self,
        plan: &RebuildPlan,
        cutover: &Cutover,
        sources: &BTreeMap<String, &PodInfo>,
    ) -> Result<Cutover, ClickHouseSchemaError> {
        let pods: Vec<&PodInfo> = sources.values().copied().collect();
        let best = self
            .largest(
                plan,
                "verify",
                cutover.kind,
                &pods,
                plan.bound_query(cutover.kind),
                "the verification's bound",
            )
            .await?;
        Ok(Cutover {
            kind: cutover.kind,
            value: best.unwrap_or(0).to_string(),
        })
    }

    /// After every pod's swap: the rows dated before the cut-over that reached the old table
    /// after their partition was verified (up to the RENAME, and inserts under way then) are
    /// copied into the new one, where a target has one source; then the old table is dropped
    /// unless kept. The rows are the difference of the two tables below the cut-over, read once
    /// the inserts under way at the RENAME had the cut-over delay to land.
    #[allow(clippy::too_many_arguments)]
    async fn after_swap(
        &self,
        plan: &RebuildPlan,
        due: &[&PodInfo],
        targets: &BTreeMap<String, Vec<&PodInfo>>,
        copied_before: &BTreeMap<String, VerifiedCounts>,
        source_of: &(dyn Fn(&PodInfo) -> String + Sync),
        inspected: &BTreeMap<String, Inspection>,
        cutover: &Cutover,
    ) -> Result<(), ClickHouseSchemaError> {
        let key = plan.key();
        let table = plan.table.as_str();
        if self
            .unless_cancelled(
                self.clock
                    .sleep(Duration::from_secs(u64::from(plan.config.cutover_delay_seconds))),
            )
            .await
            .is_none()
        {
            return Err(self
                .cancelled(&format!(
                    "after the swap of {key}, before its old table was compared"
                ))
                .with_pod(&due[0].name));
        }
        let mut keep: BTreeSet<String> = BTreeSet::new();
        // Each old table's first read: its target, its pod, the counts' script and what it read.
        let mut first_reads: Vec<(&String, &PodInfo, String, rebuild::SplitCounts)> = Vec::new();
        for (target, pods) in targets {
            let pod = pods[0];
            let inspection = &inspected[&pod.name];
            let live_key = inspection
                .tables
                .get(table)
                .map(|(_, k)| k.clone())
                .unwrap_or_default();
            let live_engine = inspection
                .tables
                .get(table)
                .map(|(e, _)| e.clone())
                .unwrap_or_default();
            // Whether merges keep rows as written (no fold, no TTL that rewrites them), so that
            // the old tables' rows can be compared with the snapshot's one by one.
            let plain = plan.compares_rows(&live_engine, inspection.create.as_deref());
            // Rows are hashed here whatever `verify` says, where merges change no row: a late row
            // and a row removed since (a TTL, a DELETE) in one partition leave its count as it
            // was, and only the rows' hashes tell.
            let columns = if plain {
                rebuild::checksum_columns(inspection, table)
            } else {
                Vec::new()
            };
            let replicated = inspection.replicas.contains_key(table);
            let at = At::new(plan, "swap", &pod.name);
            // Counts alone, or with hashes of the rows of `hashed` partitions (all of them with
            // an empty list).
            let counts_of = |suffix: &'static str, replicated: bool, hashed: Option<&[String]>| match hashed {
                None => plan.counts_script(suffix, &live_key, &[], replicated, cutover, None, None),
                Some(partitions) => plan.counts_script(
                    suffix,
                    &live_key,
                    &columns,
                    replicated,
                    cutover,
                    None,
                    (!partitions.is_empty()).then_some(partitions),
                ),
            };
            // Each source's old table is read on one of its pods: several sources are local
            // tables becoming one `Replicated` table.
            let mut per_source: BTreeMap<String, &PodInfo> = BTreeMap::new();
            for p in pods {
                per_source.entry(source_of(p)).or_insert(p);
            }
            let verified = copied_before.get(target).cloned().unwrap_or_default();
            let mut old_before = rebuild::Counts::new();
            let mut old_after = rebuild::Counts::new();
            let mut grew: BTreeSet<String> = BTreeSet::new();
            let mut changed: BTreeSet<String> = BTreeSet::new();
            let mut pending: u64 = 0;
            for (source, p) in &per_source {
                let at = At::new(plan, "swap", &p.name);
                let counts = self
                    .read_counts(at, counts_of(OLD_SUFFIX, replicated, None))
                    .await?;
                first_reads.push((
                    target,
                    *p,
                    counts_of(OLD_SUFFIX, replicated, None),
                    counts.clone(),
                ));
                pending += self.pending_mutations(&at).await?;
                if plain && !columns.is_empty() {
                    let out = self
                        .rebuild_exec(&at, plan.changed_partitions_query(&live_key, cutover), true)
                        .await?;
                    changed.extend(
                        rebuild::parse_tagged(&out, "p")
                            .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?,
                    );
                }
                // Where merges fold rows (counts fall as they do), a partition an old table holds
                // more rows of than verification found in it got rows since. One source: what
                // verification left in the new table; several: each source against its own
                // counts (a sum would let a fold on one hide a late row on another).
                let own = if per_source.len() == 1 {
                    verified.0.clone()
                } else {
                    verified.1.get(source).cloned().unwrap_or_default()
                };
                grew.extend(
                    rebuild::count_differences(&counts.before, &own)
                        .into_iter()
                        .filter(|(_, o, v)| o.0 > v.0)
                        .map(|(p, _, _)| p),
                );
                rebuild::add_counts(&mut old_before, &counts.before);
                rebuild::add_counts(&mut old_after, &counts.after);
            }
            // Otherwise the new table's rows before the cut-over came from the old tables alone
            // until the RENAME, and its snapshot holds them as they were then (rows written to
            // the table since do not hide any): a partition whose rows or hash differ between
            // the old tables and the snapshot either got a row after it was verified or lost one
            // (a TTL, a DELETE), and the comparison row by row below tells which.
            let snapshot = self.read_counts(at, counts_of(STAGE_SUFFIX, false, None)).await?;
            // The rows' hashes, read only in the partitions of the old tables that changed since
            // the dual write began (see `changed_partitions_query`): every other one is as the
            // backfill copied it, and reading every column of a large table after the RENAME
            // could outlast the step's bound. A long list is left out (every partition read).
            let mut old_hashed = rebuild::SplitCounts::default();
            let mut snapshot_hashed = rebuild::SplitCounts::default();
            if !changed.is_empty() {
                let changed: Vec<String> = if changed.len() > CHANGED_PARTITIONS_LISTED {
                    Vec::new()
                } else {
                    changed.into_iter().collect()
                };
                for p in per_source.values() {
                    let counts = self
                        .read_counts(
                            At::new(plan, "swap", &p.name),
                            counts_of(OLD_SUFFIX, replicated, Some(&changed)),
                        )
                        .await?;
                    rebuild::add_counts(&mut old_hashed.before, &counts.before);
                    rebuild::add_counts(&mut old_hashed.after, &counts.after);
                }
                snapshot_hashed = self
                    .read_counts(at, counts_of(STAGE_SUFFIX, false, Some(&changed)))
                    .await?;
            }
            let differ = |snapshot: &rebuild::Counts,
                          old: &rebuild::Counts,
                          hashed_snapshot: &rebuild::Counts,
                          hashed_old: &rebuild::Counts| {
                rebuild::count_differences(snapshot, old)
                    .into_iter()
                    .chain(rebuild::count_differences(hashed_snapshot, hashed_old))
                    .map(|(p, _, _)| p)
                    .collect::<BTreeSet<_>>()
            };
            let behind: Vec<String> = if plain {
                differ(
                    &snapshot.before,
                    &old_before,
                    &snapshot_hashed.before,
                    &old_hashed.before,
                )
                .into_iter()
                .chain(grew)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
            } else {
                grew.into_iter().collect()
            };
            // A mutation issued on the live table before the RENAME goes on in the old table, and
            // neither its counts nor its hashes show it yet: the table keeps the rows as they were
            // copied, and the old table stays, for the user to run it again.
            if pending > 0 {
                keep.extend(pods.iter().map(|p| p.name.clone()));
                self.rebuild_event(
                    plan,
                    "swap",
                    Some(&pod.name),
                    None,
                    None,
                    format!(
                        "{key}: {pending} mutation(s) (ALTER TABLE ... UPDATE or DELETE) had not finished when the \
                         table was swapped; they go on in {table}{OLD_SUFFIX}, so {table} holds those rows as they \
                         were before them: run them again on {table}; {table}{OLD_SUFFIX} is kept on {} pod(s) to \
                         compare with, then drop it",
                        pods.len()
                    ),
                );
            }
            // Rows from the cut-over on that reached the old table only: an insert that began
            // between the view's drop and the RENAME (on servers whose inserts outlive a dropped
            // view). The view carried every other such row, so the difference is what it missed.
            let after: Vec<&String> = old_after.keys().collect();
            if behind.is_empty() && after.is_empty() {
                continue;
            }
            if per_source.len() != 1 || !plain {
                // Several sources: every row from the cut-over on reached the new table through
                // a view (or the copy of rows dated ahead), so the old tables together hold them
                // as the snapshot does; a row written between a view's drop and its RENAME
                // makes them differ (a plain table on the pod: no queue to wait for). Where
                // merges change rows, one source too, only more such rows in the old tables than
                // in the snapshot tell.
                let missed: Vec<String> = if plain {
                    differ(
                        &snapshot.after,
                        &old_after,
                        &snapshot_hashed.after,
                        &old_hashed.after,
                    )
                    .into_iter()
                    .collect()
                } else {
                    old_after
                        .iter()
                        .filter(|(p, (n, _))| snapshot.after.get(*p).map_or(0, |s| s.0) < *n)
                        .map(|(p, _)| p.clone())
                        .collect()
                };
                if behind.is_empty() && missed.is_empty() {
                    // Only rows the view carried, as far as counts can tell.
                    continue;
                }
                // Several sources' old tables against one new table, or rows that merges change:
                // which rows are missing cannot be told, so every old table stays for the user to
                // look at.
                keep.extend(pods.iter().map(|p| p.name.clone()));
                let why = if per_source.len() != 1 {
                    "several old tables fed the one new table"
                } else if plan.copies_differences(&live_engine) {
                    "a TTL of the table rewrites rows when parts merge"
                } else {
                    "its engine folds rows when parts merge"
                };
                self.rebuild_event(
                    plan,
                    "swap",
                    Some(&pod.name),
                    None,
                    None,
                    format!(
                        "{key}: {} partition(s) of the old tables differ from the rows the new table got from them \
                         (dated before the cut-over, a row arrived after its partition was verified, or one was \
                         removed since; or from the cut-over on, a row was written between a view's drop and its \
                         RENAME) and {why}, so the missing rows cannot be told; {table}{OLD_SUFFIX} is kept on {} \
                         pod(s) so that nothing is lost: compare it with the table, copy what is missing by hand, then \
                         drop it",
                        behind.iter().chain(&missed).collect::<BTreeSet<_>>().len(),
                        pods.len()
                    ),
                );
                continue;
            }
            let copied_columns = rebuild::copy_columns(inspection, table);
            let ranges = behind
                .iter()
                .map(|p| {
                    (
                        p,
                        plan.before(cutover),
                        "dated before the cut-over reached the old table after it was verified",
                        true,
                    )
                })
                .chain(after.into_iter().map(|p| {
                    (
                        p,
                        plan.from(cutover),
                        "from the cut-over on reached the old table after its view was dropped",
                        false,
                    )
                }));
            // Rows the snapshot holds and the old table no longer does, per partition: the rows
            // copied less what the old table gained.
            let mut removed: BTreeMap<&String, (u64, u64)> = BTreeMap::new();
            // The old table's rows against the new table's snapshot (see `snapshot_script`). A
            // receipt says the copies begin: an apply that finishes this swap after them compares
            // with the whole table, which holds the copies. A copy whose outcome is unknown is
            // not run again (it would copy its rows twice): the apply fails, and the next one
            // finishes the swap that way.
            self.rebuild_exec(&at, plan.copying_receipt(&cutover.value, &pod.name), true)
                .await?;
            for (p, range, what, before) in ranges {
                let at = At {
                    partition: Some(p),
                    ..At::new(plan, "swap", &pod.name)
                };
                let script = plan.catch_up_script(
                    OLD_SUFFIX,
                    "",
                    p,
                    &live_key,
                    &range,
                    &copied_columns,
                    false,
                    false,
                    Some(STAGE_SUFFIX),
                );
                let copied = self
                    .catch_up(&at, script, &format!("{what}; copied after the swap"), false)
                    .await?;
                // old = snapshot - removed + copied, in each range: from the cut-over on, the
                // view carried every row, so one the old table no longer holds as carried was
                // changed or removed there too.
                let (old, snapshot) = if before {
                    (&old_before, &snapshot.before)
                } else {
                    (&old_after, &snapshot.after)
                };
                let rows = |counts: &rebuild::Counts| counts.get(p).map_or(0, |c| c.0);
                let gone = (copied + rows(snapshot)).saturating_sub(rows(old));
                if gone > 0 {
                    let entry = removed.entry(p).or_insert((0, 0));
                    entry.0 += gone;
                    entry.1 += copied;
                }
            }
            if !removed.is_empty() {
                // Rows changed or removed in the old table after they were copied (a TTL, an
                // ALTER ... DELETE or UPDATE): the table holds them as they were copied. Where
                // rows were copied into such a partition too, an UPDATE may have put a changed
                // row beside its earlier version, so the old table stays to compare with.
                let gone: u64 = removed.values().map(|(g, _)| g).sum();
                let mixed = removed.values().any(|(_, c)| *c > 0);
                if mixed {
                    keep.extend(pods.iter().map(|p| p.name.clone()));
                }
                self.rebuild_event(
                    plan,
                    "swap",
                    Some(&pod.name),
                    None,
                    None,
                    format!(
                        "{key}: {gone} row(s) of {} partition(s) were removed or changed in the old table after they \
                         were copied (a TTL, an ALTER TABLE ... DELETE or UPDATE): {table} holds them as they were \
                         copied, so run such a mutation again on it{}",
                        removed.len(),
                        if mixed {
                            format!(
                                "; rows were also copied into those partitions after the swap, so {table}{OLD_SUFFIX} \
                                 is kept on {} pod(s) to compare with (a row an UPDATE changed would be there in both \
                                 versions): drop it once you have",
                                pods.len()
                            )
                        } else {
                            String::new()
                        }
                    ),
                );
            }
        }
        // The old tables read again just before they are dropped: rows that an insert still
        // running at the RENAME (it holds the old table, in an Atomic database) wrote after the
        // first read, in a partition found alike, would go with them. Fewer rows (a TTL, a merge
        // that folds) lose nothing; more keep every old table of the target, whatever `keepOld`.
        for (target, p, script, first) in &first_reads {
            if targets[*target].iter().all(|p| keep.contains(&p.name)) {
                continue;
            }
            let again = self
                .read_counts(At::new(plan, "swap", &p.name), script.clone())
                .await?;
            let more = |now: &rebuild::Counts, then: &rebuild::Counts| {
                now.iter()
                    .any(|(partition, (n, _))| then.get(partition).map_or(0, |c| c.0) < *n)
            };
            if more(&again.before, &first.before) || more(&again.after, &first.after) {
                keep.extend(targets[*target].iter().map(|p| p.name.clone()));
                self.rebuild_event(
                    plan,
                    "swap",
                    Some(&p.name),
                    None,
                    None,
                    format!(
                        "{key}: {table}{OLD_SUFFIX} on {} got rows after it was compared with the table (an insert \
                         still running at the swap wrote them), so it is kept on {} pod(s) so that nothing is lost: \
                         compare it with the table, copy what is missing by hand, then drop it",
                        p.name,
                        targets[*target].len()
                    ),
                );
            }
        }
        for pod in due {
            let at = At::new(plan, "swap", &pod.name);
            let kept =
                Box::pin(self.finish(&at, &cutover.value, &pod.name, keep.contains(&pod.name))).await?;
            self.rebuild_event(
                plan,
                "swap",
                Some(&pod.name),
                None,
                None,
                format!(
                    "{key} on {}: {}",
                    pod.name,
                    if kept {
                        format!("the old table is kept as {table}{OLD_SUFFIX}")
                    } else {
                        "the old table is dropped".to_owned()
                    }
                ),
            );
        }
        Ok(())
    }

    /// Ends the swap on `pod` (`RebuildPlan::finish_script`), the staging table emptied first
    /// (see `RebuildPlan::empty_stage_script`). Returns whether the old table is there still:
    /// kept (`keep`, `keepOld`), or because the server refused to drop it for its size
    /// (`max_table_size_to_drop`): the swap is done and recorded as finished then, and the old
    /// table, a copy of rows the table holds, is left for the user to drop, as its limit asks.
    async fn finish(
        &self,
        at: &At<'_>,
        cutover: &str,
        pod: &str,
        keep: bool,
    ) -> Result<bool, ClickHouseSchemaError> {
        let plan = at.plan;
        // The `copying` receipt first: an apply that finishes this swap after the stage is
        // emptied and before the `finished` receipt (a cut exec, a killed process) must not take
        // the emptied stage for the snapshot, against which every row of the old table would
        // read as missing and be copied again; it compares with the whole table.
        self.rebuild_exec(at, plan.copying_receipt(cutover, pod), true)
            .await?;
        // A partition over the server's max_partition_size_to_drop stays in the stage, whose DROP
        // then meets the same refusal as an old table's.
        let emptied = match self.empty_stage(at).await {
            Err(err) if err.clickhouse_code == Some(rebuild::DROP_SIZE_LIMIT) => false,
            other => other.map(|()| true)?,
        };
        let kept = keep || plan.config.keep_old;
        match self
            .rebuild_exec(at, plan.finish_script(cutover, pod, keep), true)
            .await
        {
            Ok(_) => Ok(kept),
            // Only the DROPs of the stage and the old table can meet the limit, after the receipts
            // that say the swap is finished.
            Err(err) if err.clickhouse_code == Some(rebuild::DROP_SIZE_LIMIT) => {
                let left = if emptied && !kept {
                    format!("{}{OLD_SUFFIX}", plan.table)
                } else if kept {
                    format!("{}{STAGE_SUFFIX}", plan.table)
                } else {
                    format!("{t}{STAGE_SUFFIX} and {t}{OLD_SUFFIX}", t = plan.table)
                };
                self.rebuild_event(
                    plan,
                    "swap",
                    Some(pod),
                    None,
                    None,
                    format!(
                        "{} on {pod}: the swap is finished, but the server refused to drop {left} (larger than its \
                         max_table_size_to_drop or max_partition_size_to_drop); the table holds every row there, so \
                         drop {left} by hand (create the server's flags/force_drop_table file first, or raise the \
                         limits)",
                        plan.key(),
                    ),
                );
                // The old table's DROP comes after the stage's: it is there either way.
                Ok(true)
            }
            Err(err) => Err(err),
        }
    }

    /// Empties the staging table on `at`'s pod by detaching its partitions (see
    /// `RebuildPlan::empty_stage_script`).
    async fn empty_stage(&self, at: &At<'_>) -> Result<(), ClickHouseSchemaError> {
        let plan = at.plan;
        let out = self.rebuild_exec(at, plan.stage_partitions_query(), true).await?;
        let partitions = rebuild::parse_tagged(&out, "p")
            .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, at, &why))?;
        if !partitions.is_empty() {
            self.rebuild_exec(at, plan.empty_stage_script(&partitions), true)
                .await?;
        }
        Ok(())
    }

    /// Finishes the swaps an earlier apply cut short after their RENAME (a dropped exec, a cancel,
    /// a lost lease, a killed process) on the pods that hold the table. Such a pod has
    /// `<table>__old`, this tool's `made` receipt still open, a `swapped` receipt no `finished` one
    /// closed, and no `__new`. After the cut-over delay (inserts under way at the RENAME land),
    /// the rows the old table holds and the table lacks are copied, partition by partition of
    /// the old table, as the multiset difference of the two; then the swap ends as it would have
    /// (`finish_script`). Where `after_swap` would not copy (an engine that folds rows, several
    /// sources into one table) the old table is kept, with an event. A replica whose old replica
    /// set another pod still serves is left until that pod has swapped: rows it writes reach the
    /// new set through its view and the old one directly, and a difference taken in between would
    /// copy them twice. For a `Replicated` table both replication queues are done on the pod
    /// first, so a replica that finishes after another copies nothing twice.
    async fn finish_interrupted_swaps(
        &self,
        plan: &RebuildPlan,
        holders: &[&PodInfo],
    ) -> Result<bool, ClickHouseSchemaError> {
        let table = plan.table.as_str();
        let old_name = format!("{table}{OLD_SUFFIX}");
        let new_name = format!("{table}{NEW_SUFFIX}");
        let mut any = false;
        for pod in holders {
            let at = At::new(plan, "swap", &pod.name);
            let out = Box::pin(self.rebuild_exec(&at, plan.leftovers_query(), true)).await?;
            any |= !rebuild::parse_leftovers(&out)
                .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?
                .is_empty();
        }
        if !any {
            return Ok(false);
        }
        let mut inspections: BTreeMap<&str, Inspection> = BTreeMap::new();
        for pod in holders {
            let at = At::new(plan, "swap", &pod.name);
            let inspection = Box::pin(self.inspect(&at)).await?;
            // Before any DROP or RENAME of a finish, as before a rebuild (see `refuse`).
            if let Some(why) = inspection.database_refusal() {
                return Err(self.rebuild_error(ErrorKind::RebuildRefused, &at, &why));
            }
            inspections.insert(pod.name.as_str(), inspection);
        }
        // A replica set half swapped: this pod's new table replicates the table another pod
        // serves, and both belong to one rebuild (this pod recorded the cut-over the other
        // swapped at). Its swap is the one missing; its old table's late rows are copied below.
        let mut resumed = false;
        for pod in holders {
            let inspection = &inspections[pod.name.as_str()];
            let Some(new_path) = inspection.replicas.get(&new_name) else {
                continue;
            };
            if !inspection
                .made
                .as_ref()
                .is_some_and(|made| made.contains(&plan.target))
            {
                continue;
            }
            let Some(other) = holders.iter().find(|other| {
                other.name != pod.name
                    && inspections[other.name.as_str()].replicas.get(table) == Some(new_path)
            }) else {
                continue;
            };
            // `swapping` is enough on the pod that serves the new path (its RENAME happened, the
            // script may have stopped before `swapped`); on this pod, `swapped` says it did.
            let swapped_on = |receipts: &[rebuild::Receipt], value: &str, on: &str, begun: bool| {
                receipts.iter().any(|r| {
                    (r.step == "swapped" || (begun && r.step == "swapping"))
                        && r.cutover == value
                        && r.source == on
                })
            };
            let Some(cutover) = inspection
                .receipts
                .iter()
                .filter(|r| r.step == "cutover")
                .filter(|r| {
                    !inspection
                        .receipts
                        .iter()
                        .any(|a| a.step == "abandoned" && a.value == r.value)
                })
                .filter(|r| !swapped_on(&inspection.receipts, &r.value, &pod.name, false))
                .find(|r| {
                    swapped_on(
                        &inspections[other.name.as_str()].receipts,
                        &r.value,
                        &other.name,
                        true,
                    )
                })
                .map(|r| r.value.clone())
            else {
                continue;
            };
            let at = At::new(plan, "swap", &pod.name);
            Box::pin(self.rebuild_exec(
                &at,
                plan.swap_script(&cutover, &pod.name, inspection.drops_lazily()),
                false,
            ))
            .await?;
            self.rebuild_event(
                plan,
                "swap",
                Some(&pod.name),
                None,
                None,
                format!(
                    "{} on {}: swapped, resuming a swap an earlier apply cut short after pod {} (both replicas now \
                     serve '{new_path}')",
                    plan.key(),
                    pod.name,
                    other.name
                ),
            );
            inspections.insert(pod.name.as_str(), Box::pin(self.inspect(&at)).await?);
            resumed = true;
        }
        let with_old: Vec<&PodInfo> = holders
            .iter()
            .copied()
            .filter(|pod| inspections[pod.name.as_str()].tables.contains_key(&old_name))
            .collect();
        let mut waited = false;
        for pod in with_old {
            let at = At::new(plan, "swap", &pod.name);
            let inspection = &inspections[pod.name.as_str()];
            let ours = inspection.made.as_ref().is_some_and(|made| !made.is_empty());
            if !ours || inspection.tables.contains_key(&format!("{table}{NEW_SUFFIX}")) {
                // A kept old table of a finished rebuild, or someone's: the check step refuses on
                // it where a rebuild is due, naming it.
                continue;
            }
            let out = self
                .rebuild_exec(&at, plan.open_swaps_query(&pod.name), true)
                .await?;
            let swaps = rebuild::parse_tagged(&out, "swap")
                .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?;
            let Some(cutover) = swaps.into_iter().next() else {
                continue;
            };
            if let Some(old_path) = inspection.replicas.get(&old_name)
                && let Some(other) = holders.iter().find(|other| {
                    other.name != pod.name
                        && inspections[other.name.as_str()].replicas.get(table) == Some(old_path)
                })
            {
                self.rebuild_event(
                    plan,
                    "swap",
                    Some(&pod.name),
                    None,
                    None,
                    format!(
                        "{} on {}: the swap an earlier apply cut short is not finished yet: pod {} still serves the old \
                         table's ZooKeeper path '{old_path}', so {table}{OLD_SUFFIX} stays until it has swapped",
                        plan.key(),
                        pod.name,
                        other.name
                    ),
                );
                continue;
            }
            let (old_engine, old_key) = inspection.tables.get(&old_name).cloned().unwrap_or_default();
            let replicated = |name: &str| inspection.replicas.contains_key(name);
            // Local old tables into one `Replicated` table: several sources, whose missing rows
            // cannot be told apart (as after_swap keeps them).
            let several = !replicated(&old_name) && replicated(table);
            // A mutation still going on in the old table (issued on the live table before the
            // RENAME) changes rows no comparison sees yet.
            let pending = self.pending_mutations(&at).await?;
            let compares = plan.compares_rows(&old_engine, inspection.create.as_deref());
            if several || !compares || pending > 0 {
                Box::pin(self.finish(&at, &cutover, &pod.name, true)).await?;
                self.rebuild_event(
                    plan,
                    "swap",
                    Some(&pod.name),
                    None,
                    None,
                    format!(
                        "{} on {}: the swap an earlier apply cut short is finished, but {table}{OLD_SUFFIX} is kept: {}, \
                         so rows that reached it after verification cannot be told apart; compare it with the table \
                         and copy what is missing by hand, then drop it",
                        plan.key(),
                        pod.name,
                        if several {
                            "several old tables fed the one new table".to_owned()
                        } else if pending > 0 {
                            format!(
                                "{pending} mutation(s) (ALTER TABLE ... UPDATE or DELETE) go on in it, which the \
                                 table does not have (run them again on it)"
                            )
                        } else if plan.copies_differences(&old_engine) {
                            "a TTL of the table rewrites rows when parts merge".to_owned()
                        } else {
                            "its engine folds rows when parts merge".to_owned()
                        }
                    ),
                );
                continue;
            }
            if !waited {
                waited = true;
                if self
                    .unless_cancelled(
                        self.clock
                            .sleep(Duration::from_secs(u64::from(plan.config.cutover_delay_seconds))),
                    )
                    .await
                    .is_none()
                {
                    return Err(self
                        .cancelled(&format!(
                            "before finishing the swap of {} that an earlier apply cut short",
                            plan.key()
                        ))
                        .with_pod(&pod.name));
                }
            }
            let columns = rebuild::copy_columns_between(inspection, &old_name, table);
            let sync_old = if replicated(&old_name) {
                format!("SYSTEM SYNC REPLICA {};\n", plan.name(OLD_SUFFIX))
            } else {
                String::new()
            };
            let out = self
                .rebuild_exec(
                    &at,
                    format!("{sync_old}{}", plan.old_partitions_query(&old_key)),
                    true,
                )
                .await?;
            let partitions = rebuild::parse_tagged(&out, "p")
                .map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, &at, &why))?;
            // The old table is compared with the swap's snapshot of the new one where that is all
            // the rows it must be compared with: a local table, a snapshot taken on this pod, and
            // no copy after the swap begun (a copy's rows are in the table, not in the snapshot).
            // A replica set's pods each finish here, and a later one must count an earlier one's
            // copies, so it compares with the whole table.
            let snapshot = (!replicated(table)
                && inspection.tables.contains_key(&format!("{table}{STAGE_SUFFIX}"))
                && inspection
                    .receipts
                    .iter()
                    .any(|r| r.step == "snapshot" && r.cutover == cutover && r.source == pod.name)
                && !inspection
                    .receipts
                    .iter()
                    .any(|r| r.step == "copying" && r.cutover == cutover && r.source == pod.name))
            .then_some(STAGE_SUFFIX);
            if snapshot.is_some() {
                Box::pin(self.rebuild_exec(&at, plan.copying_receipt(&cutover, &pod.name), true)).await?;
            }
            for partition in &partitions {
                let at = At {
                    partition: Some(partition),
                    ..At::new(plan, "swap", &pod.name)
                };
                let script = plan.catch_up_script(
                    OLD_SUFFIX,
                    "",
                    partition,
                    &old_key,
                    "1",
                    &columns,
                    false,
                    replicated(table),
                    snapshot,
                );
                Box::pin(self.catch_up(
                    &at,
                    script,
                    "that reached the old table and not the table were copied, finishing a swap an earlier apply cut short",
                    snapshot.is_none(),
                ))
                .await?;
            }
            let kept = Box::pin(self.finish(&at, &cutover, &pod.name, false)).await?;
            self.rebuild_event(
                plan,
                "swap",
                Some(&pod.name),
                None,
                None,
                format!(
                    "{} on {}: the swap an earlier apply cut short is finished; {}",
                    plan.key(),
                    pod.name,
                    if kept {
                        format!("the old table is kept as {table}{OLD_SUFFIX}")
                    } else {
                        "the old table is dropped".to_owned()
                    }
                ),
            );
        }
        Ok(resumed)
    }

    async fn inspect(&self, at: &At<'_>) -> Result<Inspection, ClickHouseSchemaError> {
        self.inspect_with(at, at.plan.inspect_script()).await
    }

    /// Runs an inspection `script` (see [`RebuildPlan::inspect_script`]) and reads its output.
    async fn inspect_with(&self, at: &At<'_>, script: String) -> Result<Inspection, ClickHouseSchemaError> {
        let out = self.rebuild_exec(at, script, true).await?;
        Inspection::parse(&out).map_err(|why| self.rebuild_error(ErrorKind::RebuildFailed, at, &why))
    }

    /// Runs one script of a rebuild step on a pod and returns what it printed. `retry`: whether
    /// a transport failure may run it again (only for scripts that can run twice).
    async fn rebuild_exec(
        &self,
        at: &At<'_>,
        script: String,
        retry: bool,
    ) -> Result<String, ClickHouseSchemaError> {
        // Boxed: every step awaits this, and the exec's future inline in each of them would make
        // the rebuild's futures too large for a small stack (a debug build's test thread).
        let (output, script) = Box::pin(self.rebuild_run(at, script, retry)).await?;
        self.exit_checked(at, output, &script)
    }

    /// A script's output whatever its exit code (transport failures are errors), with the script.
    async fn rebuild_run(
        &self,
        at: &At<'_>,
        script: String,
        retry: bool,
    ) -> Result<(ExecOutput, String), ClickHouseSchemaError> {
        self.rebuild_run_bounded(at, script, retry, 1).await
    }

    /// [`Self::rebuild_run`] of a script of `statements` statements that may each take as long
    /// as a statement alone (the copies of a backfill batch): each is bounded as a statement is,
    /// and the exec by their sum, so a batch is never cut short where single copies would end.
    async fn rebuild_run_bounded(
        &self,
        at: &At<'_>,
        script: String,
        retry: bool,
        statements: usize,
    ) -> Result<(ExecOutput, String), ClickHouseSchemaError> {
        // Under a query id of its own, so that a cancellation, a lost lease or a dropped exec can
        // stop it where it runs: a copy can take minutes (see `reconcile::abandoned`).
        let (mut request, query_id) = self.script_request("rb", at.pod, script);
        if statements > 1 {
            request.command = crate::command::render_batch(
                self.client,
                self.settings,
                request.stdin.len(),
                self.statement_timeout,
                statements,
                &query_id,
                None,
            );
            request.timeout = crate::command::batch_exec_timeout(self.statement_timeout, statements, false);
        }
        let what = format!("step {} of rebuilding {}", at.step, at.plan.key());
        let call = retry.then_some(Call::Rebuild { pod: at.pod });
        let output = match self.exec_tracked(&request, &what, &query_id, call).await {
            Tracked::CancelledBefore => {
                return Err(self
                    .cancelled(&format!(
                        "before step {} of rebuilding {}",
                        at.step,
                        at.plan.key()
                    ))
                    .with_pod(at.pod));
            }
            Tracked::CancelledDuring => {
                return Err(self
                    .cancelled(&format!(
                        "during step {} of rebuilding {}",
                        at.step,
                        at.plan.key()
                    ))
                    .with_pod(at.pod));
            }
            Tracked::EarlierRunning { attempt } => {
                return Err(self.rebuild_error(
                    ErrorKind::RebuildFailed,
                    at,
                    &format!(
                        "attempt {attempt} was refused because an earlier attempt still runs under the same query \
                         id ({query_id}; ClickHouse code 216) after its exec ended without an outcome"
                    ),
                ));
            }
            Tracked::Failed { err, .. } if err.kind == TransportErrorKind::ProgramMissing => {
                return Err(self.image_unsupported(
                    &format!("step {} of rebuilding {}", at.step, at.plan.key()),
                    at.pod,
                    &err.message,
                ));
            }
            Tracked::Failed {
                err,
                attempts,
                not_retried,
            } => {
                let gone = err.kind == TransportErrorKind::Refused && err.http_status == Some(404);
                let not_retried = not_retried.map_or(String::new(), |why| {
                    format!(
                        "; it was not retried: that attempt could not be confirmed stopped ({why}), and a retry \
                         would run beside it"
                    )
                });
                return Err(self.rebuild_error(
                    ErrorKind::RebuildFailed,
                    at,
                    &if gone {
                        "the pod is gone (its exec answered 404)".to_owned()
                    } else {
                        format!(
                            "its exec failed after {attempts} attempt(s): {}{not_retried}",
                            err.message
                        )
                    },
                ));
            }
            Tracked::Output { output, .. } => output,
        };
        Ok((output, request.stdin))
    }

    /// The script's stdout when it exited 0; otherwise the error, with ClickHouse's redacted words.
    fn exit_checked(
        &self,
        at: &At<'_>,
        output: ExecOutput,
        script: &str,
    ) -> Result<String, ClickHouseSchemaError> {
        if output.exit_code != 0 {
            // The rebuild's scripts read the table's rows: a value of one may be in the error.
            let mut said = redact_clickhouse_output(&output.stderr, script);
            said.text = redact_row_values(&said.text);
            return Err(self
                .rebuild_error(
                    ErrorKind::RebuildFailed,
                    at,
                    &format!(
                        "clickhouse-client exited with {}: {}",
                        output.exit_code, said.text
                    ),
                )
                .with_exit_code(output.exit_code)
                .with_clickhouse(said.clickhouse_code, said.clickhouse_exception));
        }
        Ok(output.stdout)
    }

    fn rebuild_error(&self, kind: ErrorKind, at: &At<'_>, why: &str) -> ClickHouseSchemaError {
        let partition = at
            .partition
            .map(|p| format!(", partition {p}"))
            .unwrap_or_default();
        let consequence = match kind {
            // The refusals after the prepare: what it made stays, this tool's, for the next apply.
            ErrorKind::RebuildRefused if at.step == "prepare" => {
                "The live tables are untouched and still serve reads and writes.".to_owned()
            }
            ErrorKind::RebuildRefused => {
                "Nothing was changed on the pods, and nothing is recorded.".to_owned()
            }
            // From the swap on the new table may serve already; the old table, which may hold the
            // last rows written, stays until an apply finishes the swap (finish_interrupted_swap).
            _ if at.step == "swap" => format!(
                "The swap may have gone through on this pod (the new table then serves); rows that reached the old \
                 table after verification may be only in {}.{}{OLD_SUFFIX}, which is kept until the next apply \
                 finishes the swap: it copies the rows the old table holds and the table lacks, then drops it \
                 (unless keepOld)",
                at.plan.database, at.plan.table
            ),
            // A failed verification says itself what the next apply does.
            _ if at.step == "verify" => {
                "The live table still serves reads and writes, and nothing is recorded.".to_owned()
            }
            _ => format!(
                "The live table still serves reads and writes, nothing is recorded, and the next apply resumes from \
                 the receipts in {}.{RECEIPTS_TABLE}.",
                at.plan.database
            ),
        };
        self.error(
            kind,
            format!(
                "{}: rebuilding {} (allowed by rebuild['{}']) on pod {}, step {}{partition}: {why}. {consequence}",
                self.prefix(),
                at.plan.key(),
                at.plan.key(),
                at.pod,
                at.step
            ),
        )
        .with_pod(at.pod)
        .with_statement_index(at.plan.statement_index)
        .with_object(at.plan.key(), Vec::new())
    }

    fn failure_error(&self, failure: crate::reconcile::Failure, pod: &str) -> ClickHouseSchemaError {
        match failure {
            crate::reconcile::Failure::Error(err) => err,
            crate::reconcile::Failure::Vanished | crate::reconcile::Failure::Stopped => self
                .error(
                    ErrorKind::RebuildFailed,
                    format!(
                        "{}: pod {pod} went away while a rebuild checked it; deploy again once the pods are stable",
                        self.prefix()
                    ),
                )
                .with_pod(pod),
        }
    }

    fn rebuild_event(
        &self,
        plan: &RebuildPlan,
        step: &str,
        pod: Option<&str>,
        partition: Option<&str>,
        rows: Option<u64>,
        message: String,
    ) {
        self.events.emit(Event::Rebuild {
            table: plan.key(),
            step: step.to_owned(),
            pod: pod.map(str::to_owned),
            partition: partition.map(str::to_owned),
            rows,
            message,
        });
    }
}

/// What a target's verification found.
/// What Final verification left of a target: the new table's rows before the cut-over per
/// partition, and each source's own.
type VerifiedCounts = (rebuild::Counts, BTreeMap<String, rebuild::Counts>);

enum Verified {
    /// The tables match; `copied` holds the new table's rows before the cut-over per partition,
    /// `sources` each source's own (by source, as `verify_target` was given them).
    Matches {
        copied: rebuild::Counts,
        sources: BTreeMap<String, rebuild::Counts>,
    },
    /// They differ: the error says how (the rebuild is abandoned).
    Differs(ClickHouseSchemaError),
}

/// Which rows a verification compares.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Right after the view, before the clock reaches a time cut-over: every row from the cut-over
    /// on (only rows dated ahead are there yet).
    Ahead,
    /// After the backfill: the rows before the cut-over, and the view's up to a bound in the past.
    Final,
}

/// What the reads of the view's range say: the new table read `early`, the sources, then the new
/// table `late`.
#[derive(Debug, PartialEq, Eq)]
enum ViewRange {
    /// Every partition lies between the two reads; `quiet` when they agree (and so match exactly,
    /// checksums included).
    Matches { quiet: bool },
    /// Not yet: a partition's rows are above the later read (missing, or a view still writing).
    Missing(String, (u64, u64), (u64, u64)),
    /// The new table held more before the sources were read than the sources hold.
    Extra(String, (u64, u64), (u64, u64)),
}

/// Judges the view's range: rows only grow, and the view writes a row after the live table got
/// it, so a correct new table read before its sources holds at most their rows, and read after them
/// at least.
fn judge_view_range(
    early: &rebuild::Counts,
    expected: &rebuild::Counts,
    late: &rebuild::Counts,
) -> ViewRange {
    let keys: BTreeSet<&String> = early.keys().chain(expected.keys()).chain(late.keys()).collect();
    let get = |m: &rebuild::Counts, p: &String| m.get(p).copied().unwrap_or((0, 0));
    let mut quiet = true;
    let mut missing = None;
    for p in keys {
        let (e0, x, e1) = (get(early, p), get(expected, p), get(late, p));
        if e0 == e1 {
            if x.0 < e0.0 {
                return ViewRange::Extra(p.clone(), x, e0);
            }
            if x != e0 {
                missing.get_or_insert((p.clone(), x, e1));
            }
            continue;
        }
        quiet = false;
        if x.0 < e0.0 {
            return ViewRange::Extra(p.clone(), x, e0);
        }
        if x.0 > e1.0 {
            missing.get_or_insert((p.clone(), x, e1));
        }
    }
    match missing {
        Some((p, x, f)) => ViewRange::Missing(p, x, f),
        None => ViewRange::Matches { quiet },
    }
}

/// The declared engine's name.
/// Which of the objects a rebuild makes ([`rebuild::MADE_SUFFIXES`]) exist on a pod, by name.
fn leftovers(plan: &RebuildPlan, inspection: &Inspection) -> Vec<String> {
    rebuild::MADE_SUFFIXES
        .iter()
        .map(|suffix| format!("{}{suffix}", plan.table))
        .filter(|name| inspection.tables.contains_key(name))
        .collect()
}

/// Whether a rebuild begun by a version that wrote no `made` receipt is unfinished on `pod`: a
/// cut-over of this declaration recorded there, neither abandoned nor swapped on the pod. Its
/// objects are this tool's, and the rebuild resumes them.
fn resumable_without_made(inspection: &Inspection, pod: &str) -> bool {
    inspection.receipts.iter().any(|cutover| {
        cutover.step == "cutover"
            && !inspection.receipts.iter().any(|r| {
                (r.step == "abandoned" && r.value == cutover.value)
                    || (r.step == "swapped" && r.cutover == cutover.value && r.source == pod)
            })
    })
}

fn plan_engine(plan: &RebuildPlan) -> String {
    crate::sql::definition::engine_parts(plan.engine_text())
        .map(|(name, _)| name)
        .unwrap_or_default()
}

/// The first argument of a `Replicated*` engine (its ZooKeeper path, macros unexpanded) in a
/// CREATE or an ENGINE clause.
fn replication_path(sql: &str) -> Option<String> {
    let engine = crate::sql::definition::parse(sql)
        .clause("ENGINE")
        .map(|e| e.text.clone())
        .unwrap_or_else(|| sql.to_owned());
    let (name, args) = crate::sql::definition::engine_parts(&engine)?;
    if !name.starts_with("Replicated") {
        return None;
    }
    args.first().map(|a| a.text.trim_matches('\'').to_owned())
}

#[cfg(test)]
mod tests {
    use super::{ViewRange, judge_view_range};
    use crate::rebuild::Counts;

    fn counts(list: &[(&str, u64, u64)]) -> Counts {
        list.iter().map(|(p, r, c)| ((*p).to_owned(), (*r, *c))).collect()
    }

    #[test]
    fn a_quiet_read_of_the_view_range_must_match_exactly() {
        let new = counts(&[("a", 5, 9)]);
        assert_eq!(
            judge_view_range(&new, &counts(&[("a", 5, 9)]), &new),
            ViewRange::Matches { quiet: true }
        );
        // The same rows with other values: not a match, whatever the order of the reads.
        assert!(matches!(
            judge_view_range(&new, &counts(&[("a", 5, 8)]), &new),
            ViewRange::Missing(..)
        ));
        // The live table holds rows the new one never got.
        assert!(matches!(
            judge_view_range(&new, &counts(&[("a", 6, 9)]), &new),
            ViewRange::Missing(..)
        ));
        // The new table holds rows the live table does not (written twice, or by someone else).
        assert!(matches!(
            judge_view_range(&new, &counts(&[("a", 4, 9)]), &new),
            ViewRange::Extra(..)
        ));
        assert!(matches!(
            judge_view_range(&new, &counts(&[]), &new),
            ViewRange::Extra(..)
        ));
    }

    #[test]
    fn under_writes_the_sources_must_lie_between_the_two_reads_of_the_new_table() {
        let early = counts(&[("a", 5, 1), ("b", 2, 2)]);
        let late = counts(&[("a", 8, 3), ("b", 2, 2)]);
        // Rows written between the reads, on either side of the sources' read.
        for rows in [5, 6, 8] {
            assert_eq!(
                judge_view_range(&early, &counts(&[("a", rows, 0), ("b", 2, 2)]), &late),
                ViewRange::Matches { quiet: false },
                "{rows}"
            );
        }
        // Fewer than the new table held before: extra rows in the new table.
        assert!(matches!(
            judge_view_range(&early, &counts(&[("a", 4, 0), ("b", 2, 2)]), &late),
            ViewRange::Extra(p, ..) if p == "a"
        ));
        // More than it held after: missing there (or a view still writing: read again).
        assert!(matches!(
            judge_view_range(&early, &counts(&[("a", 9, 0), ("b", 2, 2)]), &late),
            ViewRange::Missing(p, ..) if p == "a"
        ));
        // A partition only the sources have.
        assert!(matches!(
            judge_view_range(&early, &counts(&[("a", 6, 0), ("b", 2, 2), ("c", 1, 0)]), &late),
            ViewRange::Missing(p, ..) if p == "c"
        ));
    }
}
