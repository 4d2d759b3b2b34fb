//! A rebuild that its verification abandoned, applied again, against the sandbox's real API server
//! and ClickHouse 18.16: it starts over and finishes. Its receipts are keyed by the cut-over's
//! value, and an integer cut-over is the column's largest value plus one: on a table nobody wrote to
//! since, the next attempt took the abandoned one's value again, counted that attempt's copies as
//! done, skipped the backfill, failed verification and abandoned again, on every apply.
//!
//! And a rebuild on a pod whose ledger says it is covered while its table differs (someone
//! re-created it by hand): the rebuild writes the pod's opening row before it touches it, so when
//! it stops half way the pod is due for a deploy that lost its state, not covered.
//!
//! And a table a `Merge` table reads by pattern: after the swap the pattern would match the old
//! table too and read every row twice, so the rebuild refuses, naming it, before it changes anything.
//!
//! And a swap whose script stopped right after its RENAME (a cancel's `KILL QUERY` or a killed
//! process lands between two statements): the old table may hold rows nothing else has, and no
//! `swapped` receipt says the swap happened. The next apply must still find it, copy those rows
//! and drop the old table; before, it left `t__old` there with the rows, for good.
//!
//! And a row dated ahead copied into the new table a second time while writers keep adding rows
//! to its partition: verification compared counts that never stood still, took the extra row for
//! one written between its reads, and the rebuilt table held it twice. It now compares the rows
//! themselves, fails, and the next apply starts over and finishes with every row once.
//!
//! And the copy after the swap: a row only the old table holds (late, or written between the
//! view's drop and the RENAME) and an equal one written after the swap, on 18.16 and 26.9: the old
//! table was compared with the table, where the equal row hid it; it is compared with a snapshot of
//! the new table now. And with several sources (a local table on each of two pods into one
//! `Replicated` table), a row written between a pod's view drop and its RENAME: the old tables
//! must stay, since whose rows are missing cannot be told; `keepOld: false` dropped them.
//!
//! And a late row with a row of its partition deleted after verification (as a TTL would): the
//! counts after the swap stood still or fell, so the late row was dropped with the old table, on
//! one source and on two; rows and their hashes are compared with the snapshot now, a converted
//! column as converted, and the old table is read again before it is dropped. A mutation still
//! going on in the old table keeps it.
//!
//! The product's transport is wrapped only to play "another client wrote into the new table" once,
//! just before the first verification reads it, to stop the swap's script after its RENAME, and to
//! copy a row dated ahead twice.
//! One sandbox for the binary.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clickhouse_schema_core::config::validate::validate;
use clickhouse_schema_core::lifecycle::apply;
use clickhouse_schema_core::transport::{
    Cluster, Event, Events, ExecOutput, ExecRequest, Executor, LeaseApi, NeverCancelled, NoEvents, PodInfo,
    PodLister, TransportError, TransportErrorKind,
};
use clickhouse_schema_core::{ErrorKind, ResolvedConfig, SchemaState};
use clickhouse_schema_kube::KubeTransport;
use clickhouse_schema_sandbox::{Engine, Layout, Sandbox, SandboxOptions};
use common::*;
use serde_json::json;

/// The product's transport; before the first exec that counts the new table's rows, a row is
/// inserted into that table.
struct Meddling<'a> {
    inner: &'a KubeTransport,
    /// The new table, qualified and quoted as the rebuild's scripts spell it.
    new_table: &'static str,
    done: AtomicBool,
    stdins: Mutex<Vec<String>>,
}

impl<'a> Meddling<'a> {
    fn new(inner: &'a KubeTransport, new_table: &'static str) -> Self {
        Self {
            inner,
            new_table,
            done: AtomicBool::new(false),
            stdins: Mutex::new(Vec::new()),
        }
    }
}

impl Executor for Meddling<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        self.stdins.lock().unwrap().push(request.stdin.clone());
        // A read of the new table's counts (one that waits for no replication queue first).
        let counts_new = request.stdin.starts_with("SELECT ")
            && request.stdin.contains(" AS p, countIf(")
            && request
                .stdin
                .contains(&format!("FROM {} GROUP BY p", self.new_table));
        let meddle = counts_new && !self.done.swap(true, Ordering::SeqCst);
        let (inner, pod, new_table) = (self.inner, request.pod.clone(), self.new_table);
        async move {
            if meddle {
                let out = inner
                    .exec(statement_exec(
                        &pod,
                        &format!("INSERT INTO {new_table} (id, kind) VALUES (0, 'extra')"),
                        Duration::from_secs(30),
                    ))
                    .await?;
                assert_eq!(out.exit_code, 0, "the extra row: {out:?}");
            }
            inner.exec(request).await
        }
    }
}

// The transports of these tests wrap the product's: pods are listed, and leases taken, through
// the wrapped one.
macro_rules! through_inner {
    ($($wrapper:ident),*) => {$(
        impl PodLister for $wrapper<'_> {
            fn list_pods(
                &self,
                namespace: &str,
                selector: &BTreeMap<String, String>,
            ) -> impl Future<Output = Result<Vec<PodInfo>, TransportError>> + Send {
                self.inner.list_pods(namespace, selector)
            }
        }

        impl LeaseApi for $wrapper<'_> {}
    )*};
}

through_inner!(
    Meddling,
    CutAfterRename,
    CopiedTwice,
    EqualRowsAfterSwap,
    RowAfterADrop,
    BadRowThenNoBackfill,
    CheckOverALimit,
    WriterIntoTheNewTable,
    FoldDuringSnapshot,
    LateRowAtEachRead,
    CutFinish,
    BeforeFinalVerification,
    Stragglers,
    AtTheViewDrop
);

/// The product's transport on `sb`, with the sandbox's admin identity.
async fn transport_of(sb: &Sandbox) -> Result<KubeTransport, String> {
    let conn = clickhouse_schema_kube::connect(Some(&with_path(sb.kubeconfig_path(), None)))
        .await
        .map_err(|e| e.to_string())?;
    Ok(KubeTransport::from(&conn))
}

/// A deploy's view of the sandbox through `transport`, never cancelled.
fn cluster<'c, T>(
    transport: &'c T,
    clock: &'c RealClock,
    events: &'c dyn Events,
) -> Cluster<'c, T, RealClock> {
    Cluster {
        transport,
        clock,
        cluster_id: Some("sandbox".to_owned()),
        cancel: &NeverCancelled,
        events,
    }
}

/// The props of a scenario: `db` and its table `t` made by `create` (what follows the name:
/// columns and engine clauses), which the apply may rebuild with the options `cutover` names
/// (its `rebuild` entry also says `keepOld: false`).
fn rebuild_props(db: &str, create: &str, cutover: serde_json::Value) -> serde_json::Value {
    let mut entry = json!({ "keepOld": false });
    if let (Some(entry), Some(cutover)) = (entry.as_object_mut(), cutover.as_object()) {
        entry.extend(cutover.clone());
    }
    json!({
        "target": { "namespace": NAMESPACE, "podSelector": { "clickhouse.altinity.com/chi": "sandbox" } },
        "statements": [format!("CREATE DATABASE IF NOT EXISTS {db}"), format!("CREATE TABLE IF NOT EXISTS {db}.t {create}")],
        "retry": { "maxAttempts": 3, "backoffMs": 100 },
        "waitForPod": { "timeoutMs": 30_000 },
        "rebuild": { format!("{db}.t"): entry },
    })
}

/// `sql` on `pod`, by hand; its output, or what went wrong.
async fn sql_on(t: &KubeTransport, pod: &str, sql: String) -> Result<String, String> {
    let out = t
        .exec(statement_exec(pod, &sql, Duration::from_secs(30)))
        .await
        .map_err(|e| e.to_string())?;
    check(out.exit_code == 0, format!("{sql}: {out:?}"))?;
    Ok(out.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_its_verification_abandoned_finishes_on_the_next_apply() {
    let sb = Sandbox::start(SandboxOptions {
        layout: Layout::replicas(1),
        ..SandboxOptions::default()
    })
    .await
    .expect("sandbox with ClickHouse starts");
    let mut failures = Vec::new();
    if let Err(e) = Box::pin(scenario(&sb)).await {
        failures.push(format!("abandoned, then applied again: {e}"));
    }
    if let Err(e) = Box::pin(covered_pod_with_a_differing_table(&sb)).await {
        failures.push(format!("a covered pod whose table differs: {e}"));
    }
    if let Err(e) = Box::pin(a_merge_table_over_it_is_refused(&sb)).await {
        failures.push(format!("a Merge table over the table: {e}"));
    }
    if let Err(e) = Box::pin(a_swap_stopped_after_its_rename(&sb)).await {
        failures.push(format!("a swap stopped after its RENAME: {e}"));
    }
    if let Err(e) = Box::pin(a_row_copied_twice_under_writes(&sb)).await {
        failures.push(format!("a row copied twice while writers write: {e}"));
    }
    if let Err(e) = Box::pin(rows_only_the_old_table_holds_and_equal_ones_after_the_swap(&sb)).await {
        failures.push(format!(
            "rows only the old table holds, equal ones written after the swap: {e}"
        ));
    }
    if let Err(e) = Box::pin(rows_that_do_not_convert_are_refused_before_the_view(&sb)).await {
        failures.push(format!("rows that do not convert to a declared type: {e}"));
    }
    if let Err(e) = Box::pin(a_row_that_does_not_convert_during_the_dual_write(
        &sb,
        "MergeTree",
    ))
    .await
    {
        failures.push(format!(
            "a row that does not convert, written through the view: {e}"
        ));
    }
    if let Err(e) = Box::pin(a_row_that_does_not_convert_during_the_dual_write(
        &sb,
        "SummingMergeTree",
    ))
    .await
    {
        failures.push(format!(
            "a row that does not convert, written through the view, an engine that folds rows: {e}"
        ));
    }
    if let Err(e) = Box::pin(a_finish_cut_after_the_stage_was_emptied(&sb)).await {
        failures.push(format!("a finish cut after the stage was emptied: {e}"));
    }
    if let Err(e) = Box::pin(a_declaration_changed_back_while_a_rebuild_was_unfinished(&sb)).await {
        failures.push(format!(
            "a declaration changed back while a rebuild was unfinished: {e}"
        ));
    }
    if let Err(e) = Box::pin(a_check_over_a_limit_is_not_a_refusal(&sb)).await {
        failures.push(format!("a conversion check over a server limit: {e}"));
    }
    if let Err(e) = Box::pin(a_snapshot_unlike_the_new_table_stops_the_swap(&sb)).await {
        failures.push(format!("a snapshot unlike the new table: {e}"));
    }
    if let Err(e) = Box::pin(a_merge_that_folds_during_the_snapshot(&sb)).await {
        failures.push(format!("a merge that folds rows during the snapshot: {e}"));
    }
    if let Err(e) = Box::pin(a_late_row_before_each_read_of_verification(&sb)).await {
        failures.push(format!("a late row before each read of the live table: {e}"));
    }
    if let Err(e) = Box::pin(tables_partitioned_by_a_date_and_by_a_string(&sb)).await {
        failures.push(format!("tables partitioned by a Date and by a String: {e}"));
    }
    if let Err(e) = Box::pin(a_late_row_and_removed_ones_after_verification(&sb, true, &[3])).await {
        failures.push(format!("a late row and a removed one after verification: {e}"));
    }
    if let Err(e) = Box::pin(a_late_row_and_removed_ones_after_verification(
        &sb,
        false,
        &[3, 6],
    ))
    .await
    {
        failures.push(format!("two rows removed after verification: {e}"));
    }
    if let Err(e) = Box::pin(a_row_corrected_in_a_converted_column(&sb)).await {
        failures.push(format!(
            "a row corrected in a converted column after verification: {e}"
        ));
    }
    if let Err(e) = Box::pin(rows_into_the_old_table_after_it_was_compared(&sb)).await {
        failures.push(format!("rows into the old table after it was compared: {e}"));
    }
    if let Err(e) = Box::pin(a_mutation_unfinished_at_the_swap(&sb)).await {
        failures.push(format!("a mutation unfinished at the swap: {e}"));
    }
    if let Err(e) = Box::pin(a_folding_table_and_a_row_between_a_drop_and_its_rename(&sb)).await {
        failures.push(format!(
            "an engine that folds rows, a row between the view's drop and the RENAME: {e}"
        ));
    }
    sb.shutdown().await.expect("shutdown");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Several sources (a local table on each of two pods) rebuilt into one `ReplicatedMergeTree`:
/// a row written on a pod between its view's drop and its RENAME is in its old table only, and
/// whose rows are missing cannot be told with several sources, so the old tables must stay.
/// Before, the counts compared only the rows before the cut-over, and `keepOld: false` dropped
/// the old tables with the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_sources_keep_their_old_tables_when_a_row_reached_one_only() {
    let sb = Sandbox::start(SandboxOptions {
        layout: Layout::replicas(2),
        ..SandboxOptions::default()
    })
    .await
    .expect("sandbox with ClickHouse starts");
    let mut failures = Vec::new();
    if let Err(e) = Box::pin(a_row_between_a_drop_and_its_rename(&sb, false)).await {
        failures.push(format!(
            "a row between a view's drop and its RENAME, several sources: {e}"
        ));
    }
    if let Err(e) = Box::pin(a_row_between_a_drop_and_its_rename(&sb, true)).await {
        failures.push(format!("a late row on the second source after verification: {e}"));
    }
    if let Err(e) = Box::pin(a_late_row_and_a_removed_one_on_two_sources(&sb)).await {
        failures.push(format!(
            "a late row on one source and a removed one on the other before the last verification: {e}"
        ));
    }
    // Last: it restarts the servers with a limit on drops.
    if let Err(e) = Box::pin(a_table_over_the_drop_limit(&sb)).await {
        failures.push(format!("a table larger than max_table_size_to_drop: {e}"));
    }
    if let Err(e) = Box::pin(an_abandon_over_the_drop_limit(&sb)).await {
        failures.push(format!(
            "an abandon whose new table is over max_table_size_to_drop: {e}"
        ));
    }
    sb.shutdown().await.expect("shutdown");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The row comparisons read what the server prints, so they run on the 26.9 engine too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_copied_twice_under_writes_on_the_modern_engine() {
    let sb = Sandbox::start(SandboxOptions {
        layout: Layout::replicas(1),
        engine: Engine::Modern,
        ..SandboxOptions::default()
    })
    .await
    .expect("sandbox with the 26.9 engine starts");
    let mut failures = Vec::new();
    if let Err(e) = Box::pin(a_row_copied_twice_under_writes(&sb)).await {
        failures.push(format!("a row copied twice while writers write [26.9]: {e}"));
    }
    if let Err(e) = Box::pin(rows_only_the_old_table_holds_and_equal_ones_after_the_swap(&sb)).await {
        failures.push(format!(
            "rows only the old table holds, equal ones written after the swap [26.9]: {e}"
        ));
    }
    if let Err(e) = Box::pin(rows_that_do_not_convert_are_refused_before_the_view(&sb)).await {
        failures.push(format!("rows that do not convert to a declared type [26.9]: {e}"));
    }
    if let Err(e) = Box::pin(a_row_that_does_not_convert_during_the_dual_write(
        &sb,
        "MergeTree",
    ))
    .await
    {
        failures.push(format!(
            "a row that does not convert, written through the view [26.9]: {e}"
        ));
    }
    if let Err(e) = Box::pin(a_check_over_a_limit_is_not_a_refusal(&sb)).await {
        failures.push(format!("a conversion check over a server limit [26.9]: {e}"));
    }
    if let Err(e) = Box::pin(a_late_row_and_removed_ones_after_verification(&sb, true, &[3])).await {
        failures.push(format!(
            "a late row and a removed one after verification [26.9]: {e}"
        ));
    }
    if let Err(e) = Box::pin(a_late_row_and_removed_ones_after_verification(
        &sb,
        false,
        &[3, 6],
    ))
    .await
    {
        failures.push(format!("two rows removed after verification [26.9]: {e}"));
    }
    if let Err(e) = Box::pin(a_late_row_in_the_null_partition(&sb)).await {
        failures.push(format!("a late row in the NULL partition [26.9]: {e}"));
    }
    if let Err(e) = Box::pin(tables_partitioned_by_a_date_and_by_a_string(&sb)).await {
        failures.push(format!(
            "tables partitioned by a Date and by a String [26.9]: {e}"
        ));
    }
    sb.shutdown().await.expect("shutdown");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn props(order: &str, rebuild: bool) -> serde_json::Value {
    let mut props = json!({
        "target": { "namespace": NAMESPACE, "podSelector": { "clickhouse.altinity.com/chi": "sandbox" } },
        "statements": [
            "CREATE DATABASE IF NOT EXISTS rb_again",
            format!(
                "CREATE TABLE IF NOT EXISTS rb_again.t (id UInt64, kind String) ENGINE = MergeTree \
                 PARTITION BY id % 3 ORDER BY {order}"
            ),
        ],
        "retry": { "maxAttempts": 3, "backoffMs": 100 },
        "waitForPod": { "timeoutMs": 30_000 },
    });
    if rebuild {
        props["rebuild"] = json!({ "rb_again.t": { "cutoverColumn": "id" } });
    }
    props
}

async fn scenario(sb: &Sandbox) -> Result<(), String> {
    let conn = clickhouse_schema_kube::connect(Some(&with_path(sb.kubeconfig_path(), None)))
        .await
        .map_err(|e| e.to_string())?;
    let t = KubeTransport::from(&conn);
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let plain = Cluster {
        transport: &t,
        clock: &clock,
        cluster_id: Some("sandbox".to_owned()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    let v1 = validate("rb-again", &props("id", false)).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply("rb-again", &v1, None, &plain)
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    let rows = "INSERT INTO rb_again.t SELECT number + 1, concat('k', toString(number % 5)) FROM system.numbers \
                LIMIT 300";
    let out = t
        .exec(statement_exec(&pod, rows, Duration::from_secs(30)))
        .await
        .map_err(|e| e.to_string())?;
    check(out.exit_code == 0, format!("rows: {out:?}"))?;

    let v2 = validate("rb-again", &props("(kind, id)", true)).map_err(|e| format!("{e:?}"))?;
    let meddling = Meddling::new(&t, "`rb_again`.`t__new`");
    let disturbed = Cluster {
        transport: &meddling,
        clock: &clock,
        cluster_id: Some("sandbox".to_owned()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    let err = match apply("rb-again", &v2, Some(&state), &disturbed).await {
        Ok(outcome) => return Err(format!("the disturbed rebuild went through: {outcome:?}")),
        Err(err) => err,
    };
    check(
        meddling.done.load(Ordering::SeqCst) && err.message.contains("another client wrote into"),
        format!("verification failed on the extra row: {err}"),
    )?;
    // Nobody writes to the table from here on: its largest id stays 300.
    let (state, _) = apply("rb-again", &v2, Some(&state), &plain)
        .await
        .map_err(|e| format!("the apply after the abandon: {e}"))?;
    let sorting = t
        .exec(statement_exec(
            &pod,
            "SELECT sorting_key FROM system.tables WHERE database = 'rb_again' AND name = 't'",
            Duration::from_secs(30),
        ))
        .await
        .map_err(|e| e.to_string())?;
    check(
        sorting.stdout.trim() == "kind, id",
        format!("rebuilt: {sorting:?}"),
    )?;
    let counted = t
        .exec(statement_exec(
            &pod,
            "SELECT count(), uniqExact(id) FROM rb_again.t",
            Duration::from_secs(30),
        ))
        .await
        .map_err(|e| e.to_string())?;
    check(
        counted.stdout == "300\t300\n",
        format!("every row exactly once: {counted:?}"),
    )?;
    let _ = state;
    Ok(())
}

/// By hand on `pod`: `first`, then `rb_ledger.t` dropped and made again by `create`, with 300 rows.
async fn made_again_by_hand(
    t: &KubeTransport,
    pod: &str,
    first: &[&str],
    create: &str,
) -> Result<(), String> {
    let rows = "INSERT INTO rb_ledger.t SELECT number + 1, concat('k', toString(number % 5)) FROM system.numbers \
                LIMIT 300";
    for sql in first
        .iter()
        .copied()
        .chain(["DROP TABLE rb_ledger.t", create, rows])
    {
        let out = t
            .exec(statement_exec(pod, sql, Duration::from_secs(30)))
            .await
            .map_err(|e| e.to_string())?;
        check(out.exit_code == 0, format!("{sql}: {out:?}"))?;
    }
    Ok(())
}

/// The ledger's newest row for `resource` naming `pod`: its event.
async fn newest_event(t: &KubeTransport, pod: &str, resource: &str) -> Result<String, String> {
    let out = t
        .exec(statement_exec(
            pod,
            &format!(
                "SELECT event FROM ops.clickhouse_schema_ledger WHERE resource_id = '{resource}' AND pod = '{pod}' \
                 ORDER BY seq DESC LIMIT 1"
            ),
            Duration::from_secs(30),
        ))
        .await
        .map_err(|e| e.to_string())?;
    check(out.exit_code == 0, format!("the ledger read: {out:?}"))?;
    Ok(out.stdout.trim().to_owned())
}

async fn covered_pod_with_a_differing_table(sb: &Sandbox) -> Result<(), String> {
    let conn = clickhouse_schema_kube::connect(Some(&with_path(sb.kubeconfig_path(), None)))
        .await
        .map_err(|e| e.to_string())?;
    let t = KubeTransport::from(&conn);
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let plain = Cluster {
        transport: &t,
        clock: &clock,
        cluster_id: Some("sandbox".to_owned()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    let table = |order: &str| {
        format!(
            "CREATE TABLE IF NOT EXISTS rb_ledger.t (id UInt64, kind String) ENGINE = MergeTree \
             PARTITION BY id % 3 ORDER BY {order}"
        )
    };
    let declared = json!({
        "target": { "namespace": NAMESPACE, "podSelector": { "clickhouse.altinity.com/chi": "sandbox" } },
        "statements": ["CREATE DATABASE IF NOT EXISTS rb_ledger", table("(kind, id)")],
        "retry": { "maxAttempts": 3, "backoffMs": 100 },
        "waitForPod": { "timeoutMs": 30_000 },
        "ledger": { "database": "ops" },
        "rebuild": { "rb_ledger.t": { "cutoverColumn": "id" } },
    });
    let id = "rb-ledger";
    let config = validate(id, &declared).map_err(|e| format!("{e:?}"))?;
    apply(id, &config, None, &plain)
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    check(
        newest_event(&t, &pod, id).await? == "applied",
        "the first apply's closing row".to_owned(),
    )?;
    // By hand, the table is made again as it was before the change, with rows; the ledger still
    // says this pod holds the declaration.
    made_again_by_hand(&t, &pod, &[], &table("id")).await?;
    // A deploy that lost its state: the ledger covers the pod, its table differs, so the rebuild
    // runs there, and stops at its verification.
    let meddling = Meddling::new(&t, "`rb_ledger`.`t__new`");
    let disturbed = Cluster {
        transport: &meddling,
        clock: &clock,
        cluster_id: Some("sandbox".to_owned()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    let err = match apply(id, &config, None, &disturbed).await {
        Ok(outcome) => return Err(format!("the disturbed rebuild went through: {outcome:?}")),
        Err(err) => err,
    };
    check(
        meddling.done.load(Ordering::SeqCst) && err.message.contains("another client wrote into"),
        format!("verification failed on the extra row: {err}"),
    )?;
    // Before, the pod's newest row was still the first apply's `applied`.
    let newest = newest_event(&t, &pod, id).await?;
    check(
        newest == "started",
        format!("the pod's newest ledger row after the stopped rebuild: {newest}"),
    )?;
    // The next deploy without state finishes it: rebuilt, every row once, the pod applied.
    apply(id, &config, None, &plain)
        .await
        .map_err(|e| format!("the apply after the stopped rebuild: {e}"))?;
    let counted = t
        .exec(statement_exec(
            &pod,
            "SELECT count(), uniqExact(id), (SELECT sorting_key FROM system.tables WHERE database = 'rb_ledger' \
             AND name = 't') FROM rb_ledger.t",
            Duration::from_secs(30),
        ))
        .await
        .map_err(|e| e.to_string())?;
    check(
        counted.stdout == "300\t300\tkind, id\n",
        format!("rebuilt with every row once: {counted:?}"),
    )?;
    check(
        newest_event(&t, &pod, id).await? == "applied",
        "closed again".to_owned(),
    )?;
    // Made again by hand once more (the last rebuild's old table dropped), and this time the
    // rebuild goes through: the pod it opened is due, so the list runs there and closes the row.
    // Before, the covered pod was skipped after its rebuild and its newest row stayed `started`.
    made_again_by_hand(&t, &pod, &["DROP TABLE rb_ledger.t__old"], &table("id")).await?;
    apply(id, &config, None, &plain)
        .await
        .map_err(|e| format!("the rebuild of a covered pod: {e}"))?;
    let newest = newest_event(&t, &pod, id).await?;
    check(
        newest == "applied",
        format!("the pod's newest ledger row after its rebuild went through: {newest}"),
    )
}

async fn a_merge_table_over_it_is_refused(sb: &Sandbox) -> Result<(), String> {
    let conn = clickhouse_schema_kube::connect(Some(&with_path(sb.kubeconfig_path(), None)))
        .await
        .map_err(|e| e.to_string())?;
    let t = KubeTransport::from(&conn);
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let plain = Cluster {
        transport: &t,
        clock: &clock,
        cluster_id: Some("sandbox".to_owned()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    let table = |order: &str| {
        format!(
            "CREATE TABLE IF NOT EXISTS rb_merge.t (id UInt64, kind String) ENGINE = MergeTree ORDER BY {order}"
        )
    };
    let props = |order: &str| {
        json!({
            "target": { "namespace": NAMESPACE, "podSelector": { "clickhouse.altinity.com/chi": "sandbox" } },
            "statements": ["CREATE DATABASE IF NOT EXISTS rb_merge", table(order)],
            "waitForPod": { "timeoutMs": 30_000 },
            "rebuild": { "rb_merge.t": { "cutoverColumn": "id" } },
        })
    };
    let id = "rb-merge";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &plain)
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    for sql in [
        "INSERT INTO rb_merge.t SELECT number + 1, 'k' FROM system.numbers LIMIT 30",
        // Not declared: someone's union over the database's tables whose names start with t.
        "CREATE TABLE rb_merge.everything (id UInt64, kind String) ENGINE = Merge('rb_merge', '^t')",
    ] {
        let out = t
            .exec(statement_exec(&pod, sql, Duration::from_secs(30)))
            .await
            .map_err(|e| e.to_string())?;
        check(out.exit_code == 0, format!("{sql}: {out:?}"))?;
    }
    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let err = match apply(id, &v2, Some(&state), &plain).await {
        Ok(outcome) => return Err(format!("rebuilt under a Merge table: {outcome:?}")),
        Err(err) => err,
    };
    check(
        err.kind == ErrorKind::RebuildRefused && err.message.contains("rb_merge.everything"),
        format!("{err:?}"),
    )?;
    // Nothing changed: the Merge table reads the 30 rows once, and no rebuild table exists.
    let out = t
        .exec(statement_exec(
            &pod,
            "SELECT (SELECT count() FROM rb_merge.everything), (SELECT count() FROM system.tables \
             WHERE database = 'rb_merge' AND name LIKE 't\\_\\_%')",
            Duration::from_secs(30),
        ))
        .await
        .map_err(|e| e.to_string())?;
    check(out.stdout == "30\t0\n", format!("untouched: {out:?}"))
}

/// The product's transport, but the swap's script runs only up to its RENAME, statement by
/// statement as the client would, and then a row reaches the old table (an insert that was under
/// way at the RENAME); the exec then fails as one whose process was killed does.
struct CutAfterRename<'a> {
    inner: &'a KubeTransport,
    late_row: &'static str,
    cut: AtomicBool,
}

impl Executor for CutAfterRename<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let swap = request.stdin.contains("RENAME TABLE") && !self.cut.swap(true, Ordering::SeqCst);
        let (inner, late_row) = (self.inner, self.late_row);
        async move {
            if !swap {
                return inner.exec(request).await;
            }
            let through_rename = request
                .stdin
                .lines()
                .scan(false, |past, line| {
                    let this = (!*past).then_some(line);
                    *past |= line.starts_with("RENAME TABLE");
                    this
                })
                .chain([late_row])
                .map(|line| line.trim_end_matches(';').to_owned())
                .collect::<Vec<_>>();
            for sql in &through_rename {
                let out = inner
                    .exec(statement_exec(&request.pod, sql, Duration::from_secs(30)))
                    .await?;
                assert_eq!(out.exit_code, 0, "{sql}: {out:?}");
            }
            Err(TransportError::new(
                TransportErrorKind::Transient,
                "the exec's connection closed before its exit status (its process was killed)",
            ))
        }
    }
}

async fn a_swap_stopped_after_its_rename(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |order: &str| {
        rebuild_props(
            "rb_cut",
            &format!("(id UInt64, kind String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = "rb-cut";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    query("INSERT INTO rb_cut.t SELECT number + 1, 'k' FROM system.numbers LIMIT 300".to_owned()).await?;

    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let cutting = CutAfterRename {
        inner: &t,
        late_row: "INSERT INTO rb_cut.t__old VALUES (5000, 'late')",
        cut: AtomicBool::new(false),
    };
    let err = match apply(id, &v2, Some(&state), &cluster(&cutting, &clock, &NoEvents)).await {
        Ok(outcome) => return Err(format!("the cut swap went through: {outcome:?}")),
        Err(err) => err,
    };
    check(
        cutting.cut.load(Ordering::SeqCst)
            && err.kind == ErrorKind::RebuildFailed
            && err.message.contains("step swap")
            && err.message.contains("rb_cut.t__old"),
        format!("the swap's failure names the step and the old table: {err:?}"),
    )?;
    // The new table serves, and the late row is only in the old one.
    let sorting = "SELECT sorting_key FROM system.tables WHERE database = 'rb_cut' AND name = 't'";
    check(
        query(sorting.to_owned()).await? == "kind, id\n",
        "the RENAME went through".to_owned(),
    )?;

    let (state, _) = apply(id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the apply after the cut swap: {e}"))?;
    let counted =
        query("SELECT count(), uniqExact(id), countIf(kind = 'late') FROM rb_cut.t".to_owned()).await?;
    check(
        counted == "301\t301\t1\n",
        format!("every row once, the late one included: {counted:?}"),
    )?;
    let left = query(
        "SELECT name FROM system.tables WHERE database = 'rb_cut' AND name LIKE 't\\_\\_%' ORDER BY name"
            .to_owned(),
    )
    .await?;
    check(
        left.is_empty(),
        format!("nothing of the rebuild is left: {left:?}"),
    )?;
    // A third apply has nothing to do.
    let (_, outcome) = apply(id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the third apply: {e}"))?;
    check(
        query("SELECT count() FROM rb_cut.t".to_owned()).await? == "301\n",
        format!("the third apply copied nothing: {outcome:?}"),
    )
}

/// The product's transport, but right after the first dual-write script (its view exists) one row
/// dated ahead that the script copied is copied into the new table once more, as a copy that ran
/// twice would.
struct CopiedTwice<'a> {
    inner: &'a KubeTransport,
    again: &'static str,
    done: AtomicBool,
}

impl Executor for CopiedTwice<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let dual_write =
            request.stdin.contains("CREATE MATERIALIZED VIEW") && !self.done.swap(true, Ordering::SeqCst);
        let (inner, again, pod) = (self.inner, self.again, request.pod.clone());
        async move {
            let out = inner.exec(request).await?;
            if dual_write {
                let copied = inner
                    .exec(statement_exec(&pod, again, Duration::from_secs(30)))
                    .await?;
                assert_eq!(copied.exit_code, 0, "{again}: {copied:?}");
            }
            Ok(out)
        }
    }
}

async fn a_row_copied_twice_under_writes(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |order: &str| {
        rebuild_props(
            "rb_twice",
            &format!(
                "(id UInt64, kind String, at DateTime, note Nullable(String)) ENGINE = MergeTree \
                 PARTITION BY toYYYYMMDD(at) ORDER BY {order}"
            ),
            json!({ "cutoverColumn": "at", "cutoverDelaySeconds": 2 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let plain = cluster(&t, &clock, &NoEvents);
    let id = "rb-twice";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &plain)
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    // A week of rows, and 20 scheduled three days ahead (noon, so one partition whatever the hour);
    // notes NULL or not, as the row comparison must hash a row with a NULL too.
    query(
        "INSERT INTO rb_twice.t SELECT number + 1, 'old', toDateTime(toUnixTimestamp(now()) - 7 * 86400 + number * 600), \
         NULL \
         FROM system.numbers LIMIT 1000"
            .to_owned(),
    )
    .await?;
    const AHEAD: &str = "toDateTime(toDate(now()) + 3) + 43200";
    query(format!(
        "INSERT INTO rb_twice.t SELECT 100000 + number, 'ahead', {AHEAD}, if(number % 2 = 0, NULL, 'n') FROM \
         system.numbers LIMIT 20"
    ))
    .await?;

    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let twice = CopiedTwice {
        inner: &t,
        again: "INSERT INTO rb_twice.t__new SELECT * FROM rb_twice.t WHERE kind = 'ahead' LIMIT 1",
        done: AtomicBool::new(false),
    };
    let doubled = cluster(&twice, &clock, &NoEvents);
    // Four writers adding rows to the partition dated ahead for the whole apply, so that its
    // counts never stand still.
    let stop = AtomicBool::new(false);
    let written = std::sync::atomic::AtomicU64::new(0);
    let writer = |k: u64| {
        let (stop, written, query) = (&stop, &written, &query);
        async move {
            let mut next = 200_000 + k * 100_000;
            while !stop.load(Ordering::SeqCst) {
                next += 1;
                if query(format!(
                    "INSERT INTO rb_twice.t VALUES ({next}, 'writer', {AHEAD}, NULL)"
                ))
                .await
                .is_ok()
                {
                    written.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    };
    let deploy = async {
        let result = apply(id, &v2, Some(&state), &doubled).await;
        stop.store(true, Ordering::SeqCst);
        result
    };
    let (_, _, _, _, result) = tokio::join!(writer(0), writer(1), writer(2), writer(3), deploy);
    let written = written.load(Ordering::SeqCst);
    let err = match result {
        Ok(outcome) => {
            let counted = query("SELECT count(), uniqExact(id) FROM rb_twice.t".to_owned()).await?;
            return Err(format!(
                "the rebuild went through with {counted:?} (rows, ids) where {} rows were written: {outcome:?}",
                1020 + written
            ));
        }
        Err(err) => err,
    };
    check(
        twice.done.load(Ordering::SeqCst)
            && err.kind == ErrorKind::RebuildFailed
            && err.message.contains("step verify")
            && err.message.contains("starts the rebuild over"),
        format!("the apply fails on the row copied twice, and says what comes next: {err}"),
    )?;
    check(
        written >= 3,
        format!("the writer wrote during the apply: {written}"),
    )?;
    // The live table serves, and nothing of the rebuild is left.
    check(
        query("SELECT sorting_key FROM system.tables WHERE database = 'rb_twice' AND name = 't'".to_owned())
            .await?
            == "id\n",
        "the live table was not swapped".to_owned(),
    )?;
    let left = query(
        "SELECT name FROM system.tables WHERE database = 'rb_twice' AND name LIKE 't\\_\\_%'".to_owned(),
    )
    .await?;
    check(
        left.is_empty(),
        format!("the rebuild's tables are dropped: {left:?}"),
    )?;

    // The next apply starts over, and every row written is in the rebuilt table once.
    apply(id, &v2, Some(&state), &plain)
        .await
        .map_err(|e| format!("the apply after the abandon: {e}"))?;
    let counted = query("SELECT count(), uniqExact(id) FROM rb_twice.t".to_owned()).await?;
    let expected = 1020 + written;
    check(
        counted == format!("{expected}\t{expected}\n"),
        format!("every row once ({expected} written): {counted:?}"),
    )?;
    check(
        query("SELECT sorting_key FROM system.tables WHERE database = 'rb_twice' AND name = 't'".to_owned())
            .await?
            == "kind, id\n",
        "rebuilt".to_owned(),
    )
}

/// The product's transport, but a late row (dated before the cut-over) reaches the live table
/// just before the swap drops the view, and a row dated at or after the cut-over right after it
/// (an insert that began between the drop and the RENAME); once the RENAME is done, a row equal
/// to each is inserted into the table, which the new one serves then.
struct EqualRowsAfterSwap<'a> {
    inner: &'a KubeTransport,
    late_row: &'static str,
    window_row: &'static str,
    dropped: AtomicBool,
    done: AtomicBool,
}

impl Executor for EqualRowsAfterSwap<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let drop_view = request.stdin.contains("'swapping'") && !self.dropped.swap(true, Ordering::SeqCst);
        let rename = request.stdin.contains("RENAME TABLE") && !self.done.swap(true, Ordering::SeqCst);
        let (inner, late_row, window_row) = (self.inner, self.late_row, self.window_row);
        let pod = request.pod.clone();
        async move {
            let run = |sql: &'static str| {
                let pod = pod.clone();
                async move {
                    let out = inner
                        .exec(statement_exec(&pod, sql, Duration::from_secs(30)))
                        .await?;
                    assert_eq!(out.exit_code, 0, "{sql}: {out:?}");
                    Ok::<_, TransportError>(())
                }
            };
            if drop_view {
                run(late_row).await?;
            }
            let out = inner.exec(request).await?;
            if drop_view {
                run(window_row).await?;
            }
            if rename {
                check(out.exit_code == 0, format!("the RENAME on {pod}: {out:?}")).expect("the swap renames");
                run(late_row).await?;
                run(window_row).await?;
            }
            Ok(out)
        }
    }
}

/// The identical-row limit of the copy after the swap: a row only the old table holds (written
/// between the view's drop and the RENAME, or late) was compared with the table after the
/// swap, where an equal row written since hid it, and it was dropped with the old table.
async fn rows_only_the_old_table_holds_and_equal_ones_after_the_swap(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |order: &str| {
        rebuild_props(
            "rb_equal",
            &format!("(id UInt64, kind String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = "rb-equal";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    query("INSERT INTO rb_equal.t SELECT number + 1, 'k' FROM system.numbers LIMIT 300".to_owned()).await?;

    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let equal = EqualRowsAfterSwap {
        inner: &t,
        // The cut-over is 301: the largest id plus one.
        late_row: "INSERT INTO rb_equal.t VALUES (7, 'late')",
        window_row: "INSERT INTO rb_equal.t VALUES (9000, 'window')",
        dropped: AtomicBool::new(false),
        done: AtomicBool::new(false),
    };
    let (state, _) = apply(id, &v2, Some(&state), &cluster(&equal, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    check(equal.done.load(Ordering::SeqCst), "the swap ran".to_owned())?;
    let counted =
        query("SELECT count(), countIf(kind = 'late'), countIf(kind = 'window') FROM rb_equal.t".to_owned())
            .await?;
    check(
        counted == "304\t2\t2\n",
        format!("every row written is there as often as it was written, (rows, late, window): {counted:?}"),
    )?;
    let sorting = "SELECT sorting_key FROM system.tables WHERE database = 'rb_equal' AND name = 't'";
    check(
        query(sorting.to_owned()).await? == "kind, id\n",
        "rebuilt".to_owned(),
    )?;
    let left = query(
        "SELECT name FROM system.tables WHERE database = 'rb_equal' AND name LIKE 't\\_\\_%'".to_owned(),
    )
    .await?;
    check(
        left.is_empty(),
        format!("nothing of the rebuild is left: {left:?}"),
    )?;
    // Merges of the table run again once the swap is finished.
    query("OPTIMIZE TABLE rb_equal.t FINAL".to_owned()).await?;
    let (_, outcome) = apply(id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the third apply: {e}"))?;
    check(
        query("SELECT count() FROM rb_equal.t".to_owned()).await? == "304\n",
        format!("the next apply copied nothing: {outcome:?}"),
    )
}

/// The product's transport, but right after a view is dropped (the `at_drop`th, from 1) a row is
/// inserted into `into`'s live table: dated after the cut-over into the pod whose view was just
/// dropped, an insert between its drop and its RENAME; dated before, into another pod, a late
/// row after verification. Not on the first pod: its old table then holds no such row, and the
/// check must still read the other source's (review N1 of rebuild-snapshot.md).
struct RowAfterADrop<'a> {
    inner: &'a KubeTransport,
    row: String,
    at_drop: usize,
    /// The pod that takes the row: `None` for the pod whose view was dropped.
    into: Option<String>,
    /// A statement run at the same moment on another pod (a DELETE, waited for).
    also: Option<(String, String)>,
    drops: Mutex<Vec<String>>,
    on: Mutex<Option<String>>,
}

impl Executor for RowAfterADrop<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let insert_now = request.stdin.contains("'swapping'") && {
            let mut drops = self.drops.lock().unwrap();
            drops.push(request.pod.clone());
            let into = self.into.clone().unwrap_or_else(|| request.pod.clone());
            drops.len() == self.at_drop && self.on.lock().unwrap().replace(into).is_none()
        };
        let (inner, row, also) = (self.inner, self.row.clone(), self.also.clone());
        let pod = self.on.lock().unwrap().clone().unwrap_or_default();
        async move {
            let out = inner.exec(request).await?;
            if insert_now {
                let written = inner
                    .exec(statement_exec(&pod, &row, Duration::from_secs(30)))
                    .await?;
                assert_eq!(written.exit_code, 0, "{row}: {written:?}");
                if let Some((other, sql)) = also {
                    let done = inner
                        .exec(statement_exec(&other, &sql, Duration::from_secs(30)))
                        .await?;
                    assert_eq!(done.exit_code, 0, "{sql}: {done:?}");
                    let mut waiting = String::new();
                    for _ in 0..100 {
                        let left = inner
                            .exec(statement_exec(
                                &other,
                                "SELECT count() FROM system.mutations WHERE is_done = 0",
                                Duration::from_secs(30),
                            ))
                            .await?;
                        waiting = left.stdout;
                        if waiting == "0\n" {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    assert_eq!(waiting, "0\n", "the mutation of {sql} ends");
                }
            }
            Ok(out)
        }
    }
}

/// A local `MergeTree` table `db.t (id UInt64, kind String)`, partitioned by `id % 3`, applied on
/// each of `pods` as resource `id`, with ids 1-100 on the first pod and 101-200 on the second (the
/// cut-over is then 201); and the declaration that rebuilds them into one `ReplicatedMergeTree`
/// ordered by `(kind, id)` (`keepOld: false`). Returns the first apply's state and that declaration.
async fn two_local_sources(
    t: &KubeTransport,
    pods: &[String],
    db: &str,
    id: &str,
    clock: &RealClock,
) -> Result<(SchemaState, ResolvedConfig), String> {
    let props = |engine: &str, order: &str| {
        rebuild_props(
            db,
            &format!("(id UInt64, kind String) ENGINE = {engine} PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let v1 = validate(id, &props("MergeTree", "id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(t, clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    for (i, pod) in pods.iter().enumerate() {
        sql_on(
            t,
            pod,
            format!(
                "INSERT INTO {db}.t SELECT number + 1 + {}, 'k' FROM system.numbers LIMIT 100",
                i * 100
            ),
        )
        .await?;
    }
    let v2 = validate(
        id,
        &props(
            &format!("ReplicatedMergeTree('/clickhouse/tables/{{shard}}/{db}/t_v2', '{{replica}}')"),
            "(kind, id)",
        ),
    )
    .map_err(|e| format!("{e:?}"))?;
    Ok((state, v2))
}

async fn a_row_between_a_drop_and_its_rename(sb: &Sandbox, late: bool) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pods = sb.pod_names();
    let db = if late { "rb_late" } else { "rb_many" };
    let clock = RealClock(Instant::now());
    let id = "rb-many";
    let (state, v2) = two_local_sources(&t, &pods, db, id, &clock).await?;
    // The cut-over is 201: the largest id plus one. A late row (dated before it) goes into the
    // second pod at the first drop, after verification; a row from the cut-over on into the
    // second pod right after its own drop.
    let row = format!(
        "INSERT INTO {db}.t VALUES ({}, 'window')",
        if late { 150 } else { 9000 }
    );
    let late = RowAfterADrop {
        inner: &t,
        row,
        at_drop: if late { 1 } else { 2 },
        into: late.then(|| pods[1].clone()),
        // With the late row on the second pod, a row of the same partition deleted on the first:
        // the sum of the two old tables' counts is then what verification found, and only each
        // source's own count shows the late row (review K7 of rebuild-session-42.md).
        also: late.then(|| (pods[0].clone(), format!("ALTER TABLE {db}.t DELETE WHERE id = 3"))),
        drops: Mutex::new(Vec::new()),
        on: Mutex::new(None),
    };
    let (_, outcome) = apply(id, &v2, Some(&state), &cluster(&late, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    let on = late.on.lock().unwrap().clone().ok_or("no view was dropped")?;
    // The new table serves on both pods, with every row from before; the row written between the
    // drop and the RENAME is in that pod's old table, which is kept (keepOld: false or not).
    for pod in &pods {
        let engine = sql_on(
            &t,
            pod,
            format!("SELECT engine FROM system.tables WHERE database = '{db}' AND name = 't'"),
        )
        .await?;
        check(
            engine == "ReplicatedMergeTree\n",
            format!("{pod} rebuilt: {engine:?}"),
        )?;
        let counted = sql_on(&t, pod, format!("SELECT count() FROM {db}.t WHERE kind = 'k'")).await?;
        check(
            counted == "200\n",
            format!("{pod}: every row from before ({counted:?})"),
        )?;
    }
    let kept = sql_on(
        &t,
        &on,
        format!("SELECT count() FROM {db}.t__old WHERE kind = 'window'"),
    )
    .await
    .map_err(|e| format!("the old table on {on} is kept with the row ({e}); the apply: {outcome:?}"))?;
    check(
        kept == "1\n",
        format!("the row is in the kept old table on {on}: {kept:?}"),
    )
}

/// A declared column type the live rows do not all convert to: the rebuild is refused before any
/// view exists (a view would fail every production insert of such a value), naming the column,
/// with no row's value in the message; the table keeps taking inserts.
async fn rows_that_do_not_convert_are_refused_before_the_view(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |code: &str, order: &str| {
        rebuild_props(
            "rb_conv",
            &format!("(id UInt64, code {code}) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = "rb-conv";
    let v1 = validate(id, &props("String", "id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    query(
        "INSERT INTO rb_conv.t SELECT number + 1, toString(number) FROM system.numbers LIMIT 100".to_owned(),
    )
    .await?;
    query("INSERT INTO rb_conv.t VALUES (500, 'alice-row-value-123')".to_owned()).await?;
    let v2 = validate(id, &props("UInt32", "(code, id)")).map_err(|e| format!("{e:?}"))?;
    let err = match apply(id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents)).await {
        Ok(outcome) => return Err(format!("the rebuild went through: {outcome:?}")),
        Err(err) => err,
    };
    check(
        err.kind == ErrorKind::RebuildRefused
            && err.message.contains("code (UInt32)")
            && err.message.contains("no view was created")
            && err.clickhouse_code.is_some(),
        format!("refused, naming the column and the type: {err:?}"),
    )?;
    check(
        !format!("{err:?}").contains("alice-row-value"),
        format!("no row value in the error: {err:?}"),
    )?;
    let views = query(
        "SELECT count() FROM system.tables WHERE database = 'rb_conv' AND name = 't__rebuild_view'"
            .to_owned(),
    )
    .await?;
    check(views == "0\n", format!("no view: {views:?}"))?;
    // Inserts go on as before, a value the new type could not hold included.
    query("INSERT INTO rb_conv.t VALUES (501, 'another-text')".to_owned()).await?;
    let counted = query("SELECT count() FROM rb_conv.t".to_owned()).await?;
    check(
        counted == "102\n",
        format!("the live table took the insert: {counted:?}"),
    )
}

/// The product's transport, but before the backfill's first copy a row whose value the declared
/// type cannot hold is inserted through the view (dated after the cut-over); and every copy is
/// lost on the way (the API server drops the exec): the apply fails with the view in place.
struct BadRowThenNoBackfill<'a> {
    inner: &'a KubeTransport,
    row: &'static str,
    inserted: AtomicBool,
    /// The bad row's insert: the view fails it.
    insert: Mutex<Option<ExecOutput>>,
}

impl Executor for BadRowThenNoBackfill<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let copy = request.stdin.contains("TRUNCATE TABLE") && request.stdin.contains("__rebuild_stage`");
        let insert = copy && !self.inserted.swap(true, Ordering::SeqCst);
        let (inner, row, pod) = (self.inner, self.row, request.pod.clone());
        async move {
            if insert {
                let out = inner
                    .exec(statement_exec(&pod, row, Duration::from_secs(30)))
                    .await?;
                *self.insert.lock().unwrap() = Some(out);
            }
            if copy {
                return Err(TransportError::new(
                    TransportErrorKind::Refused,
                    "the API server refused the exec (the test drops every copy)",
                ));
            }
            inner.exec(request).await
        }
    }
}

/// A row that does not convert, written through the view of a rebuild an earlier apply left
/// unfinished: the next apply refuses, and drops that rebuild's view and new table (the view fails
/// every insert of such a value), saying so; the live table keeps its rows and its inserts.
async fn a_row_that_does_not_convert_during_the_dual_write(sb: &Sandbox, engine: &str) -> Result<(), String> {
    // A plain engine keeps its copies; one that folds rows is abandoned (it cannot go on after a
    // pause in the dual write).
    let plain = engine == "MergeTree";
    let db: &'static str = if plain { "rb_conv_view" } else { "rb_conv_fold" };
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |code: &str, order: &str| {
        rebuild_props(
            db,
            &format!("(id UInt64, code {code}) ENGINE = {engine} PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = db;
    let v1 = validate(id, &props("String", "id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    query(format!(
        "INSERT INTO {db}.t SELECT number + 1, toString(number) FROM system.numbers LIMIT 100"
    ))
    .await?;
    let v2 = validate(id, &props("UInt32", "(code, id)")).map_err(|e| format!("{e:?}"))?;
    let cut = BadRowThenNoBackfill {
        inner: &t,
        // The cut-over is 101: the largest id plus one.
        row: Box::leak(format!("INSERT INTO {db}.t VALUES (500, 'alice-row-value-123')").into_boxed_str()),
        inserted: AtomicBool::new(false),
        insert: Mutex::new(None),
    };
    if let Ok(outcome) = apply(id, &v2, Some(&state), &cluster(&cut, &clock, &NoEvents)).await {
        return Err(format!("the rebuild went through with no copy: {outcome:?}"));
    }
    let insert = cut
        .insert
        .lock()
        .unwrap()
        .clone()
        .ok_or("the backfill never began")?;
    check(
        insert.exit_code != 0,
        format!("the view fails the insert of a value it cannot convert: {insert:?}"),
    )?;
    let held = query(format!("SELECT count() FROM {db}.t WHERE id = 500")).await?;
    check(
        held == "1\n",
        format!("the live table took the block before the view failed: {held:?}"),
    )?;
    let err = match apply(id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents)).await {
        Ok(outcome) => return Err(format!("the rebuild went through: {outcome:?}")),
        Err(err) => err,
    };
    check(
        err.kind == ErrorKind::RebuildRefused
            && err.message.contains("code (UInt32)")
            && err.message.contains("was dropped")
            && err.message.contains(if plain {
                "copies are kept"
            } else {
                "the rebuild abandoned"
            })
            && !err.message.contains("no view was created"),
        format!("refused, saying the view was dropped: {err:?}"),
    )?;
    check(
        !format!("{err:?}").contains("alice-row-value"),
        format!("no row value in the error: {err:?}"),
    )?;
    let made = query(format!(
        "SELECT groupArray(name) FROM (SELECT name FROM system.tables WHERE database = '{db}' \
             AND name != 't' AND name NOT LIKE '%receipts%' ORDER BY name)"
    ))
    .await?;
    check(
        made == if plain {
            "['t__new','t__rebuild_stage']\n"
        } else {
            "[]\n"
        },
        format!("the view is gone (and the new table, for an engine that folds rows): {made:?}"),
    )?;
    // With no view, an insert the new type could not hold goes into the live table as before,
    // and one dated after the cut-over that it can hold too.
    query(format!("INSERT INTO {db}.t VALUES (501, 'another-text')")).await?;
    query(format!("INSERT INTO {db}.t VALUES (502, '502')")).await?;
    let counted = query(format!("SELECT count() FROM {db}.t")).await?;
    check(
        counted == "103\n",
        format!("the live table kept its rows and takes inserts: {counted:?}"),
    )?;
    // The rows corrected, the next deploy goes on from the kept copies, and the row the live
    // table took with no view is in the rebuilt table once.
    query(format!(
        "ALTER TABLE {db}.t DELETE WHERE code IN ('alice-row-value-123', 'another-text')"
    ))
    .await?;
    for _ in 0..100 {
        if query(format!("SELECT count() FROM {db}.t")).await? == "101\n" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    apply(id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the deploy after the rows were corrected: {e}"))?;
    let rows = query(format!(
        "SELECT count(), uniqExact(id), sum(code), toTypeName(any(code)) FROM {db}.t"
    ))
    .await?;
    check(
        rows == "101\t101\t5452\tUInt32\n",
        format!("rebuilt, every row once: {rows:?}"),
    )
}

/// The product's transport, but the conversion check runs into a limit of the server's (a real
/// error of the real server: too many rows to read) instead of a value that does not convert.
struct CheckOverALimit<'a> {
    inner: &'a KubeTransport,
}

impl Executor for CheckOverALimit<'_> {
    fn exec(
        &self,
        mut request: ExecRequest,
    ) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        // The check's line, and only it.
        if request.stdin.contains("sum(cityHash64(CAST(") {
            request.stdin = request
                .stdin
                .lines()
                .map(|line| {
                    if line.contains("sum(cityHash64(CAST(") {
                        // As long as the line it replaces: the pod reads as many bytes as the
                        // command says.
                        format!(
                            "{:<1$}",
                            "SELECT count() FROM system.numbers SETTINGS max_rows_to_read = 10;",
                            line.len()
                        )
                    } else {
                        line.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
                + "\n";
        }
        self.inner.exec(request)
    }
}

/// A conversion check that fails for a reason of its own (here a limit on the rows a query reads;
/// in production a timeout, memory, too many queries) is not a refusal, which would tell the user
/// to correct rows that are fine: the step fails with the server's error, and nothing changed.
async fn a_check_over_a_limit_is_not_a_refusal(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |code: &str, order: &str| {
        rebuild_props(
            "rb_conv_limit",
            &format!("(id UInt64, code {code}) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let id = "rb-conv-limit";
    let v1 = validate(id, &props("String", "id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    sql_on(
        &t,
        &pod,
        "INSERT INTO rb_conv_limit.t SELECT number + 1, toString(number) FROM system.numbers LIMIT 100"
            .to_owned(),
    )
    .await?;
    let v2 = validate(id, &props("UInt32", "(code, id)")).map_err(|e| format!("{e:?}"))?;
    let limited = CheckOverALimit { inner: &t };
    let err = match apply(id, &v2, Some(&state), &cluster(&limited, &clock, &NoEvents)).await {
        Ok(outcome) => return Err(format!("the rebuild went through: {outcome:?}")),
        Err(err) => err,
    };
    check(
        err.kind == ErrorKind::RebuildFailed
            && err.clickhouse_code == Some(158)
            && !err.message.contains("do not all convert"),
        format!("a failed step with the server's error, not a refusal: {err:?}"),
    )?;
    let views = sql_on(
        &t,
        &pod,
        "SELECT count() FROM system.tables WHERE database = 'rb_conv_limit' AND name = 't__rebuild_view'"
            .to_owned(),
    )
    .await?;
    check(views == "0\n", format!("no view: {views:?}"))?;
    // The limit gone, the same rebuild goes through.
    apply(id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the next apply: {e}"))?;
    let rows = sql_on(
        &t,
        &pod,
        "SELECT count(), sum(code) FROM rb_conv_limit.t".to_owned(),
    )
    .await?;
    check(rows == "100\t4950\n", format!("rebuilt with every row: {rows:?}"))
}

/// The product's transport, but once the swap has read the new table's partitions, a row is
/// written straight into the new table in a partition that list does not have (a foreign writer,
/// say a migration script that knows the name).
struct WriterIntoTheNewTable<'a> {
    inner: &'a KubeTransport,
    row: &'static str,
    done: AtomicBool,
}

impl Executor for WriterIntoTheNewTable<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        // The new table's partitions (the staging table's are listed too, before the views go).
        let listed = request.stdin.contains("SELECT DISTINCT 'p', partition_id")
            && request.stdin.contains("t__new'")
            && !self.done.swap(true, Ordering::SeqCst);
        let (inner, row, pod) = (self.inner, self.row, request.pod.clone());
        async move {
            let out = inner.exec(request).await?;
            if listed {
                let written = inner
                    .exec(statement_exec(&pod, row, Duration::from_secs(30)))
                    .await?;
                assert_eq!(written.exit_code, 0, "{row}: {written:?}");
            }
            Ok(out)
        }
    }
}

/// A snapshot that does not hold what the new table holds at the swap (here a row written into
/// it by someone else after its partitions were read) stops the swap before any RENAME, saying
/// so: the comparison after the swap would take that row's absence for a missing row. The live
/// table serves as before, and later deploys finish the rebuild with every row once.
async fn a_snapshot_unlike_the_new_table_stops_the_swap(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |order: &str| {
        rebuild_props(
            "rb_snap",
            &format!("(id UInt64, kind String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = "rb-snap";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    // Ids 3, 6, .. 99 only: partition 0. The foreign row goes to partition 1.
    query("INSERT INTO rb_snap.t SELECT (number + 1) * 3, 'k' FROM system.numbers LIMIT 33".to_owned())
        .await?;
    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let meddling = WriterIntoTheNewTable {
        inner: &t,
        row: "INSERT INTO rb_snap.t__new VALUES (1, 'foreign')",
        done: AtomicBool::new(false),
    };
    let err = match apply(id, &v2, Some(&state), &cluster(&meddling, &clock, &NoEvents)).await {
        Ok(outcome) => return Err(format!("the swap went through: {outcome:?}")),
        Err(err) => err,
    };
    check(
        err.kind == ErrorKind::RebuildFailed
            && err.message.contains("t__new holds 34 row(s) and its snapshot 33")
            && err.message.contains("No pod of"),
        format!("the swap stopped, saying why: {err:?}"),
    )?;
    let live = query(
        "SELECT sorting_key, (SELECT count() FROM system.tables WHERE database = 'rb_snap' AND name = 't__old') \
         FROM system.tables WHERE database = 'rb_snap' AND name = 't'"
            .to_owned(),
    )
    .await?;
    check(
        live == "id\t0\n",
        format!("the live table is as it was: {live:?}"),
    )?;
    // The next deploys: the foreign row makes the new table differ, so the rebuild starts over
    // (an abandon), and the one after finishes.
    let mut last = String::new();
    for _ in 0..3 {
        match apply(id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents)).await {
            Ok(_) => {
                last.clear();
                break;
            }
            Err(e) => last = e.to_string(),
        }
    }
    check(
        last.is_empty(),
        format!("later deploys finish the rebuild: {last}"),
    )?;
    let rows =
        query("SELECT count(), uniqExact(id), countIf(kind = 'foreign') FROM rb_snap.t".to_owned()).await?;
    check(rows == "33\t33\t0\n", format!("every row once: {rows:?}"))
}

/// A table larger than the server's `max_table_size_to_drop` (50 GB by default; here set between
/// one partition's size and the table's, and the servers restarted): the backfill's stage holds
/// one partition at a time, but after the swap it holds a snapshot of the whole table, and the
/// old table is the whole table. The rebuild finishes: the stage is emptied by detaching its
/// partitions (its rows are the table's), and the old table, which the server refuses to drop,
/// is kept with an event, every row in the table.
async fn a_table_over_the_drop_limit(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pods = sb.pod_names();
    let pod = pods[0].clone();
    let clock = RealClock(Instant::now());
    let props = |order: &str| {
        rebuild_props(
            "rb_big",
            &format!("(id UInt64, payload String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = "rb-big";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    // Rows that compress badly, so that each partition has a size of its own.
    query(
        "INSERT INTO rb_big.t SELECT number + 1, concat(toString(cityHash64(number)), toString(cityHash64(number, 1)), \
         toString(cityHash64(number, 2))) FROM system.numbers LIMIT 6000"
            .to_owned(),
    )
    .await?;
    query("OPTIMIZE TABLE rb_big.t FINAL".to_owned()).await?;
    let sizes = query(
        "SELECT max(b), sum(b) FROM (SELECT partition_id, sum(bytes_on_disk) AS b FROM system.parts \
         WHERE database = 'rb_big' AND table = 't' AND active GROUP BY partition_id)"
            .to_owned(),
    )
    .await?;
    let (largest, total) = sizes
        .trim()
        .split_once('\t')
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .ok_or(format!("partition sizes: {sizes:?}"))?;
    // Between two partitions and the whole table (three of about the same size).
    let limit = largest * 2;
    check(
        limit < total,
        format!("a limit below the table's size: {sizes:?}"),
    )?;
    let mut written = 0;
    for entry in walk(sb.dir())? {
        if entry.ends_with("config.d") {
            std::fs::write(
                entry.join("drop_limit.xml"),
                format!(
                    "<?xml version=\"1.0\"?>\n<yandex>\n    <max_table_size_to_drop>{limit}</max_table_size_to_drop>\n</yandex>\n"
                ),
            )
            .map_err(|e| e.to_string())?;
            written += 1;
        }
    }
    check(written == pods.len(), format!("a config.d per pod: {written}"))?;
    for p in &pods {
        sb.stop_server(p).await.map_err(|e| e.to_string())?;
        sb.start_server(p).await.map_err(|e| e.to_string())?;
    }
    let refused = t
        .exec(statement_exec(
            &pod,
            "CREATE TABLE rb_big.probe AS rb_big.t",
            Duration::from_secs(30),
        ))
        .await
        .map_err(|e| e.to_string())?;
    check(refused.exit_code == 0, format!("probe: {refused:?}"))?;
    query("INSERT INTO rb_big.probe SELECT * FROM rb_big.t".to_owned()).await?;
    let drop = t
        .exec(statement_exec(
            &pod,
            "DROP TABLE rb_big.probe",
            Duration::from_secs(30),
        ))
        .await
        .map_err(|e| e.to_string())?;
    check(
        drop.exit_code != 0 && drop.stderr.contains("Code: 359"),
        format!("the limit holds after the restart: {drop:?}"),
    )?;
    let v2 = validate(id, &props("(payload, id)")).map_err(|e| format!("{e:?}"))?;
    let events = Recorded::default();
    apply(id, &v2, Some(&state), &cluster(&t, &clock, &events))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    let left = query(
        "SELECT groupArray(name) FROM (SELECT name FROM system.tables WHERE database = 'rb_big' \
         AND name LIKE 't\\_\\_%' ORDER BY name)"
            .to_owned(),
    )
    .await?;
    check(
        left == "['t__old']\n",
        format!("only the old table is left: {left:?}"),
    )?;
    let rows = query(
        "SELECT count(), uniqExact(id), (SELECT sorting_key FROM system.tables WHERE database = 'rb_big' \
         AND name = 't') FROM rb_big.t"
            .to_owned(),
    )
    .await?;
    check(
        rows == "6000\t6000\tpayload, id\n",
        format!("rebuilt with every row once: {rows:?}"),
    )?;
    let said = events.messages();
    check(
        said.iter().any(|m| m.contains("max_table_size_to_drop")),
        format!("an event says why the old table is kept: {said:?}"),
    )
}

/// The rebuild events' messages an apply emitted.
#[derive(Default)]
struct Recorded(Mutex<Vec<String>>);

impl Recorded {
    fn messages(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl Events for Recorded {
    fn emit(&self, event: Event) {
        if let Event::Rebuild { message, .. } = event {
            self.0.lock().unwrap().push(message);
        }
    }
}

/// The directories under `dir`, at any depth.
fn walk(dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>, String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() && !path.is_symlink() {
                out.push(path.clone());
                todo.push(path);
            }
        }
    }
    Ok(out)
}

/// The product's transport, but right before the swap reads the new table's partitions a row
/// equal in key to one it holds is written into it, and in the snapshot's script a merge of the
/// new table that folds the two (`OPTIMIZE .. FINAL`, in place of the stage's STOP MERGES, as long
/// as it, after the REPLACEs): the new table then holds fewer rows than its snapshot, as a
/// background merge of a folding engine leaves it.
struct FoldDuringSnapshot<'a> {
    inner: &'a KubeTransport,
    twin: &'static str,
    optimize: &'static str,
    done: AtomicBool,
}

impl Executor for FoldDuringSnapshot<'_> {
    fn exec(
        &self,
        mut request: ExecRequest,
    ) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let listing = request.stdin.contains("SELECT DISTINCT 'p', partition_id")
            && request.stdin.contains("t__new'")
            && !self.done.swap(true, Ordering::SeqCst);
        if request.stdin.contains("REPLACE PARTITION ID") {
            let lines: Vec<&str> = request.stdin.lines().collect();
            let stop = lines
                .iter()
                .position(|l| l.starts_with("SYSTEM STOP MERGES"))
                .expect("the snapshot stops the stage's merges");
            let last_replace = lines
                .iter()
                .rposition(|l| l.contains("REPLACE PARTITION ID"))
                .expect("a REPLACE");
            let optimize = format!("{:<1$}", self.optimize, lines[stop].len());
            let mut out: Vec<String> = Vec::new();
            for (i, line) in lines.iter().enumerate() {
                if i != stop {
                    out.push((*line).to_owned());
                }
                if i == last_replace {
                    out.push(optimize.clone());
                }
            }
            request.stdin = out.join("\n") + "\n";
        }
        let (inner, twin, pod) = (self.inner, self.twin, request.pod.clone());
        async move {
            if listing {
                let written = inner
                    .exec(statement_exec(&pod, twin, Duration::from_secs(30)))
                    .await?;
                assert_eq!(written.exit_code, 0, "{twin}: {written:?}");
            }
            inner.exec(request).await
        }
    }
}

/// A folding engine's merge of the new table between its snapshot and the count (here forced,
/// see `FoldDuringSnapshot`) leaves the table with fewer rows than the snapshot: that is no
/// row from elsewhere, so the swap goes on (it stopped on any difference, and the next deploy
/// met the same odds).
async fn a_merge_that_folds_during_the_snapshot(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |engine: &str| {
        rebuild_props(
            "rb_fold",
            &format!("(id UInt64, kind String) ENGINE = {engine} PARTITION BY id % 3 ORDER BY id"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = "rb-fold";
    let v1 = validate(id, &props("MergeTree")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    query("INSERT INTO rb_fold.t SELECT number + 1, 'k' FROM system.numbers LIMIT 30".to_owned()).await?;
    let v2 = validate(id, &props("ReplacingMergeTree")).map_err(|e| format!("{e:?}"))?;
    let folding = FoldDuringSnapshot {
        inner: &t,
        twin: "INSERT INTO rb_fold.t__new VALUES (3, 'k')",
        optimize: "OPTIMIZE TABLE `rb_fold`.`t__new` FINAL;",
        done: AtomicBool::new(false),
    };
    apply(id, &v2, Some(&state), &cluster(&folding, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    check(
        folding.done.load(Ordering::SeqCst),
        "the swap listed the partitions".to_owned(),
    )?;
    let rows = query(
        "SELECT count(), uniqExact(id), (SELECT engine FROM system.tables WHERE database = 'rb_fold' AND name = 't') \
         FROM rb_fold.t FINAL"
            .to_owned(),
    )
    .await?;
    check(
        rows == "30\t30\tReplacingMergeTree\n",
        format!("swapped, every row once: {rows:?}"),
    )
}

/// A rebuild abandoned (its verification found a row it did not copy) whose new tables are over
/// the drop limit `a_table_over_the_drop_limit` left on the servers: every pod's view is dropped
/// first (before, the abandon stopped at the first pod's refused DROP, and the other pod's view
/// kept writing into a new table no apply would resume), the `abandoned` receipts are written,
/// and an event says which tables to drop by hand.
async fn an_abandon_over_the_drop_limit(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pods = sb.pod_names();
    let clock = RealClock(Instant::now());
    let props = |order: &str| {
        rebuild_props(
            "rb_abandon",
            &format!("(id UInt64, kind String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let id = "rb-abandon";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    // Half as many rows again per partition as `rb_big`: each partition under the limit (twice
    // one of rb_big's), the table over it.
    for pod in &pods {
        sql_on(
            &t,
            pod,
            "INSERT INTO rb_abandon.t SELECT number + 1, concat(toString(cityHash64(number)), \
             toString(cityHash64(number, 1)), toString(cityHash64(number, 2))) FROM system.numbers LIMIT 9000"
                .to_owned(),
        )
        .await?;
    }
    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let meddling = Meddling::new(&t, "`rb_abandon`.`t__new`");
    let events = Recorded::default();
    let err = match apply(id, &v2, Some(&state), &cluster(&meddling, &clock, &events)).await {
        Ok(outcome) => return Err(format!("the rebuild went through: {outcome:?}")),
        Err(err) => err,
    };
    check(
        err.kind == ErrorKind::RebuildFailed && err.clickhouse_code.is_none(),
        format!("verification's mismatch, not the refused DROP: {err:?}"),
    )?;
    for pod in &pods {
        let left = sql_on(
            &t,
            pod,
            "SELECT groupArray(name) FROM (SELECT name FROM system.tables WHERE database = 'rb_abandon' \
             AND name LIKE 't\\_\\_%' ORDER BY name)"
                .to_owned(),
        )
        .await?;
        check(
            !left.contains("t__rebuild_view"),
            format!("no view left on {pod}: {left:?}"),
        )?;
        let abandoned = sql_on(
            &t,
            pod,
            "SELECT count() FROM rb_abandon.clickhouse_schema_rebuild_receipts WHERE step = 'abandoned'"
                .to_owned(),
        )
        .await?;
        check(abandoned == "1\n", format!("abandoned on {pod}: {abandoned:?}"))?;
    }
    let said = events.messages();
    check(
        said.iter()
            .any(|m| m.contains("refused to drop t__new or t__rebuild_stage")),
        format!("an event names what to drop by hand: {said:?}"),
    )
}

/// The product's transport, but before each read of the live table's counts (verification's) a
/// late row (dated before the cut-over) is inserted into it: every read finds the live table
/// ahead of the new one, the last one too.
struct LateRowAtEachRead<'a> {
    inner: &'a KubeTransport,
    live_counts: &'static str,
    db: &'static str,
    written: Mutex<u32>,
}

impl Executor for LateRowAtEachRead<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let late = request.stdin.contains(self.live_counts).then(|| {
            let mut n = self.written.lock().unwrap();
            *n += 1;
            format!("INSERT INTO {}.t VALUES ({n}, 'late{n}')", self.db)
        });
        let (inner, pod) = (self.inner, request.pod.clone());
        async move {
            if let Some(row) = late {
                let out = inner
                    .exec(statement_exec(&pod, &row, Duration::from_secs(30)))
                    .await?;
                assert_eq!(out.exit_code, 0, "{row}: {out:?}");
            }
            inner.exec(request).await
        }
    }
}

/// Late rows keep arriving while verification reads: its reads copy those it finds, and its
/// last read leaves the live table ahead of the new one (verification does not start over for
/// rows that merely arrive late). The swap must copy those from the old table, comparing it with
/// what the new table held at verification, not with what the live table held then; with
/// `keepOld: false` the old table is dropped after.
async fn a_late_row_before_each_read_of_verification(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |order: &str| {
        rebuild_props(
            "rb_ahead",
            &format!("(id UInt64, kind String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = "rb-ahead";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    query("INSERT INTO rb_ahead.t SELECT number + 1, 'k' FROM system.numbers LIMIT 100".to_owned()).await?;
    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let late = LateRowAtEachRead {
        inner: &t,
        live_counts: "FROM `rb_ahead`.`t` GROUP BY p",
        db: "rb_ahead",
        written: Mutex::new(0),
    };
    apply(id, &v2, Some(&state), &cluster(&late, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    let written = *late.written.lock().unwrap();
    check(
        written >= 3,
        format!("verification read the live table {written} time(s)"),
    )?;
    let rows = query(
        "SELECT count(), countIf(kind != 'k'), uniqExact(id, kind), (SELECT sorting_key FROM system.tables \
         WHERE database = 'rb_ahead' AND name = 't') FROM rb_ahead.t"
            .to_owned(),
    )
    .await?;
    check(
        rows == format!("{}\t{written}\t{}\tkind, id\n", 100 + written, 100 + written),
        format!("every row once, each late one too ({written} written): {rows:?}"),
    )
}

/// Tables partitioned by a `Date` column, by a `String` one and by both: the server prints a
/// one-column key's partition unquoted (`2026-11-01`, `b'c`), which the backfill used as a
/// literal (`(d) = 2026-11-01` is a Date against a number: code 43, and `(k) = b'c` no SQL), so
/// no such table could be rebuilt. Every row is in the rebuilt table once.
async fn tables_partitioned_by_a_date_and_by_a_string(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    for (db, key) in [("rb_pdate", "d"), ("rb_pstring", "k"), ("rb_pboth", "(d, k)")] {
        let props = |order: &str| {
            rebuild_props(
                db,
                &format!(
                    "(id UInt64, d Date, k String) ENGINE = MergeTree PARTITION BY {key} ORDER BY {order}"
                ),
                json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
            )
        };
        let id = format!("{db}-rebuild");
        let v1 = validate(&id, &props("id")).map_err(|e| format!("{e:?}"))?;
        let (state, _) = apply(&id, &v1, None, &cluster(&t, &clock, &NoEvents))
            .await
            .map_err(|e| format!("{db}: first apply: {e}"))?;
        sql_on(
            &t,
            &pod,
            format!(
                "INSERT INTO {db}.t SELECT number + 1, toDate('2026-11-01') + number % 3, \
                 arrayElement(['a', 'b''c', 'N'], number % 3 + 1) FROM system.numbers LIMIT 60"
            ),
        )
        .await?;
        let v2 = validate(&id, &props("(k, id)")).map_err(|e| format!("{e:?}"))?;
        apply(&id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents))
            .await
            .map_err(|e| format!("{db}: the rebuild: {e}"))?;
        let rows = sql_on(
            &t,
            &pod,
            format!(
                "SELECT count(), uniqExact(id), countIf(k = 'b''c'), (SELECT sorting_key FROM system.tables \
                 WHERE database = '{db}' AND name = 't') FROM {db}.t"
            ),
        )
        .await?;
        check(
            rows == "60\t60\t20\tk, id\n",
            format!("{db}: rebuilt, every row once: {rows:?}"),
        )?;
    }
    Ok(())
}

/// The product's transport, but the first exec of a swap's finish script (its `finished`
/// receipt, the stage's and the old table's drops) is refused before it runs, after the finish
/// has emptied the stage.
struct CutFinish<'a> {
    inner: &'a KubeTransport,
    done: AtomicBool,
}

impl Executor for CutFinish<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let cut = request.stdin.contains("'finished'") && !self.done.swap(true, Ordering::SeqCst);
        let inner = self.inner;
        async move {
            if cut {
                return Err(TransportError::new(
                    TransportErrorKind::Refused,
                    "the API server refused the exec (the test cuts the finish)",
                ));
            }
            inner.exec(request).await
        }
    }
}

/// A swap whose finish stopped after it emptied the stage (the snapshot) and before its
/// `finished` receipt: the next apply finishes the swap comparing the old table with the whole
/// table, not with the empty stage, against which every row of the old table would read as
/// missing and be copied a second time (review M1 of rebuild-session-42-fixes.md).
async fn a_finish_cut_after_the_stage_was_emptied(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |order: &str| {
        rebuild_props(
            "rb_cutfin",
            &format!("(id UInt64, kind String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = "rb-cutfin";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    query("INSERT INTO rb_cutfin.t SELECT number + 1, 'k' FROM system.numbers LIMIT 100".to_owned()).await?;
    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let cut = CutFinish {
        inner: &t,
        done: AtomicBool::new(false),
    };
    if let Ok(outcome) = apply(id, &v2, Some(&state), &cluster(&cut, &clock, &NoEvents)).await {
        return Err(format!("the apply went through with its finish cut: {outcome:?}"));
    }
    check(cut.done.load(Ordering::SeqCst), "the finish was cut".to_owned())?;
    apply(id, &v2, Some(&state), &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the apply after: {e}"))?;
    let rows = query(
        "SELECT count(), uniqExact(id), (SELECT count() FROM system.tables WHERE database = 'rb_cutfin' AND \
         name LIKE 't\\_\\_%') FROM rb_cutfin.t"
            .to_owned(),
    )
    .await?;
    check(
        rows == "100\t100\t0\n",
        format!("every row once, nothing left: {rows:?}"),
    )
}

/// A rebuild left unfinished (its backfill failed, its view in place), then the declaration
/// changed back to what the table is, with another change beside it (so the apply runs): the
/// view is dropped, with an event naming the new and staging tables left for the user, and the
/// table takes inserts as before. Before, the view kept writing every insert into a new table that no apply
/// would resume, for good.
async fn a_declaration_changed_back_while_a_rebuild_was_unfinished(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let clock = RealClock(Instant::now());
    let props = |order: &str| {
        rebuild_props(
            "rb_back",
            &format!("(id UInt64, kind String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let query = |sql: String| sql_on(&t, &pod, sql);
    let id = "rb-back";
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    query("INSERT INTO rb_back.t SELECT number + 1, 'k' FROM system.numbers LIMIT 100".to_owned()).await?;
    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let cut = BadRowThenNoBackfill {
        inner: &t,
        // A row the view carries (the cut-over is 101).
        row: "INSERT INTO rb_back.t VALUES (600, 'k')",
        inserted: AtomicBool::new(false),
        insert: Mutex::new(None),
    };
    if let Ok(outcome) = apply(id, &v2, Some(&state), &cluster(&cut, &clock, &NoEvents)).await {
        return Err(format!("the rebuild went through with no copy: {outcome:?}"));
    }
    let objects = || {
        query(
            "SELECT groupArray(name) FROM (SELECT name FROM system.tables WHERE database = 'rb_back' \
             AND name LIKE 't\\_\\_%' ORDER BY name)"
                .to_owned(),
        )
    };
    let before = objects().await?;
    check(
        before == "['t__new','t__rebuild_stage','t__rebuild_view']\n",
        format!("the unfinished rebuild's objects: {before:?}"),
    )?;
    // Back to the table's definition, with a new table beside it.
    let mut v3_props = props("id");
    v3_props["statements"]
        .as_array_mut()
        .ok_or("statements")?
        .push(json!(
            "CREATE TABLE IF NOT EXISTS rb_back.other (id UInt64) ENGINE = MergeTree ORDER BY id"
        ));
    let v3 = validate(id, &v3_props).map_err(|e| format!("{e:?}"))?;
    let events = Recorded::default();
    apply(id, &v3, Some(&state), &cluster(&t, &clock, &events))
        .await
        .map_err(|e| format!("the apply of the declaration changed back: {e}"))?;
    let after = objects().await?;
    check(
        after == "['t__new','t__rebuild_stage']\n",
        format!("the view is gone, the tables stay: {after:?}"),
    )?;
    let said = events.messages();
    check(
        said.iter().any(|m| {
            m.contains("the view of an unfinished rebuild towards another declaration is dropped")
                && m.contains("t__new, t__rebuild_stage stay")
        }),
        format!("an event says so, naming what stays: {said:?}"),
    )?;
    query("INSERT INTO rb_back.t VALUES (601, 'k')".to_owned()).await?;
    let rows = query(
        "SELECT count(), uniqExact(id), (SELECT sorting_key FROM system.tables WHERE database = 'rb_back' AND \
         name = 't') FROM rb_back.t"
            .to_owned(),
    )
    .await?;
    check(
        rows == "102\t102\tid\n",
        format!("the table as it was, with its rows: {rows:?}"),
    )
}

/// `db.t` as `definition(order)` declares it (the columns and engine, `{order}` its ORDER BY), with
/// a `rebuild` entry of `entry`, applied as resource `id` ordered by `id`, then filled on `pod` by
/// `fill`; and the declaration ordered by `(kind, id)`. Returns the first apply's state and that
/// declaration.
#[allow(clippy::too_many_arguments)]
async fn filled_then_reordered(
    t: &KubeTransport,
    pod: &str,
    db: &str,
    id: &str,
    clock: &RealClock,
    definition: impl Fn(&str) -> String,
    entry: serde_json::Value,
    fill: String,
) -> Result<(SchemaState, ResolvedConfig), String> {
    let props = |order: &str| rebuild_props(db, &definition(order), entry.clone());
    let v1 = validate(id, &props("id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(t, clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    sql_on(t, pod, fill).await?;
    let v2 = validate(id, &props("(kind, id)")).map_err(|e| format!("{e:?}"))?;
    Ok((state, v2))
}

/// One source (a local table), and between verification and the swap a late row (dated before
/// the cut-over, when `late`) and the removal of `removed` other rows of its partition (a DELETE,
/// as a TTL would): counts alone saw no partition with more rows than verification found, and
/// `keepOld: false` dropped the old table with the late row (review M5 of
/// rebuild-session-42-fixes.md). The rows and their hashes are compared with the snapshot now:
/// the late row is copied, once; the removed rows stay in the table as they were copied, and an
/// event says so; where both happened in one partition (which an UPDATE also looks like), the old
/// table is kept to compare with. The table's columns hold NULLs and types 18.16's `cityHash64`
/// rejects (`Decimal`, `UUID`, an array of `Nullable`), which the hashes must take.
async fn a_late_row_and_removed_ones_after_verification(
    sb: &Sandbox,
    late: bool,
    removed: &[u64],
) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let db = format!("rb_hidden_{}_{}", u8::from(late), removed.len());
    // Verification by checksums on one of the runs: a NULL made the sum NULL, which the counts'
    // reader failed on.
    let verify = if late { "count" } else { "checksum" };
    let clock = RealClock(Instant::now());
    let id = "rb-hidden";
    let (state, v2) = filled_then_reordered(
        &t,
        &pod,
        &db,
        id,
        &clock,
        |order| {
            format!(
                "(id UInt64, kind String, note Nullable(String), price Decimal(10, 2), ref UUID, flags \
                 Array(Nullable(UInt8))) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"
            )
        },
        json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1, "verify": verify }),
        format!(
            "INSERT INTO {db}.t SELECT number + 1, 'k', if(number % 2 = 0, NULL, 'n'), number / 4, \
             generateUUIDv4(), [1, NULL] FROM system.numbers LIMIT 100"
        ),
    )
    .await?;
    // The cut-over is 101. Row 0 and the removed rows are all in partition 0.
    let gone = removed.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    let meddling = RowAfterADrop {
        inner: &t,
        row: if late {
            format!(
                "INSERT INTO {db}.t VALUES (0, 'late', NULL, 0.5, '61f0c404-5cb3-11e7-907b-a6006ad3dba0', [NULL])"
            )
        } else {
            "SELECT 1".to_owned()
        },
        at_drop: 1,
        into: None,
        also: Some((
            pod.clone(),
            format!("ALTER TABLE {db}.t DELETE WHERE id IN ({gone})"),
        )),
        drops: Mutex::new(Vec::new()),
        on: Mutex::new(None),
    };
    let events = Recorded::default();
    let (_, outcome) = apply(id, &v2, Some(&state), &cluster(&meddling, &clock, &events))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    check(
        meddling.on.lock().unwrap().is_some(),
        "the rows were changed at the view's drop".to_owned(),
    )?;
    let query = |sql: String| sql_on(&t, &pod, sql);
    let sorted = query(format!(
        "SELECT sorting_key FROM system.tables WHERE database = '{db}' AND name = 't'"
    ))
    .await?;
    check(sorted == "kind, id\n", format!("rebuilt: {sorted:?}"))?;
    let late_rows = query(format!("SELECT count() FROM {db}.t WHERE kind = 'late'")).await?;
    check(
        late_rows == format!("{}\n", u8::from(late)),
        format!("the late row is in the rebuilt table once: {late_rows:?}; the apply: {outcome:?}"),
    )?;
    // The removed rows were copied before their DELETE; the old table alone lost them.
    let rows = query(format!("SELECT count(), uniqExact(id) FROM {db}.t")).await?;
    let expected = 100 + u64::from(late);
    check(
        rows == format!("{expected}\t{expected}\n"),
        format!("every row once: {rows:?}"),
    )?;
    let said = events.messages();
    check(
        said.iter().any(|m| {
            m.contains(&format!(
                "{} row(s) of 1 partition(s) were removed or changed in the old table",
                removed.len()
            ))
        }),
        format!("an event says rows were removed after they were copied: {said:#?}"),
    )?;
    let left = query(format!(
        "SELECT name FROM system.tables WHERE database = '{db}' AND name LIKE 't\\_\\_%' ORDER BY name"
    ))
    .await?;
    if late {
        // A late row and removed ones in one partition: the old table stays, with the late row.
        check(left == "t__old\n", format!("only the old table stays: {left:?}"))?;
        let kept = query(format!("SELECT count() FROM {db}.t__old WHERE kind = 'late'")).await?;
        check(
            kept == "1\n",
            format!("the kept old table holds the late row: {kept:?}"),
        )
    } else {
        check(
            left.is_empty(),
            format!("no old table or rebuild object stays: {left:?}"),
        )
    }
}

/// Runs `statements` (pod, SQL) once, just before the first read of the live table's counts that
/// follows a backfill's copy: the last verification's first read.
struct BeforeFinalVerification<'a> {
    inner: &'a KubeTransport,
    live_counts: String,
    statements: Vec<(String, String)>,
    copied: AtomicBool,
    done: AtomicBool,
}

impl Executor for BeforeFinalVerification<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        if request.stdin.contains("'copied'") {
            self.copied.store(true, Ordering::SeqCst);
        }
        let now = self.copied.load(Ordering::SeqCst)
            && request.stdin.contains(&self.live_counts)
            && !self.done.swap(true, Ordering::SeqCst);
        let (inner, statements) = (self.inner, now.then(|| self.statements.clone()));
        async move {
            for (pod, sql) in statements.unwrap_or_default() {
                let out = inner
                    .exec(statement_exec(&pod, &sql, Duration::from_secs(30)))
                    .await?;
                assert_eq!(out.exit_code, 0, "{sql}: {out:?}");
                // A mutation is waited for (18.16 has no `mutations_sync`).
                let mut waiting = String::new();
                for _ in 0..100 {
                    waiting = inner
                        .exec(statement_exec(
                            &pod,
                            "SELECT count() FROM system.mutations WHERE is_done = 0",
                            Duration::from_secs(30),
                        ))
                        .await?
                        .stdout;
                    if waiting == "0\n" {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                assert_eq!(waiting, "0\n", "the mutation of {sql} ends");
            }
            inner.exec(request).await
        }
    }
}

/// Several sources (a local table on each of two pods into one `ReplicatedMergeTree`), and before
/// the last verification a late row on the second pod and a row of the same partition deleted on
/// the first: the sum of the counts is what the new table holds, verification passed, and each
/// source's count then included the late row, so `keepOld: false` dropped both old tables with it
/// (review M4 of rebuild-session-42-fixes.md). The old tables are compared with the snapshot row
/// hashes and all, and are kept now.
async fn a_late_row_and_a_removed_one_on_two_sources(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pods = sb.pod_names();
    let db = "rb_two_sums";
    let clock = RealClock(Instant::now());
    let id = "rb-two-sums";
    let (state, v2) = two_local_sources(&t, &pods, db, id, &clock).await?;
    // The cut-over is 201; rows 150 and 3 are both in partition 0.
    let meddling = BeforeFinalVerification {
        inner: &t,
        live_counts: format!("FROM `{db}`.`t` GROUP BY p"),
        statements: vec![
            (
                pods[1].clone(),
                format!("INSERT INTO {db}.t VALUES (150, 'late')"),
            ),
            (pods[0].clone(), format!("ALTER TABLE {db}.t DELETE WHERE id = 3")),
        ],
        copied: AtomicBool::new(false),
        done: AtomicBool::new(false),
    };
    let (_, outcome) = apply(id, &v2, Some(&state), &cluster(&meddling, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    check(
        meddling.done.load(Ordering::SeqCst),
        "the late row was written before the last verification".to_owned(),
    )?;
    let in_table = sql_on(
        &t,
        &pods[0],
        format!("SELECT count() FROM {db}.t WHERE kind = 'late'"),
    )
    .await?;
    let kept = sql_on(
        &t,
        &pods[1],
        format!("SELECT count() FROM system.tables WHERE database = '{db}' AND name = 't__old'"),
    )
    .await?;
    let kept_row = if kept == "1\n" {
        sql_on(
            &t,
            &pods[1],
            format!("SELECT count() FROM {db}.t__old WHERE kind = 'late'"),
        )
        .await?
    } else {
        "0\n".to_owned()
    };
    check(
        in_table == "1\n" || kept_row == "1\n",
        format!(
            "the late row is in the table ({in_table:?}) or in the second pod's kept old table ({kept_row:?}); the \
             apply: {outcome:?}"
        ),
    )
}

/// A column whose type the rebuild changes (`Enum8` to `String`), and after verification a row
/// corrected by a DELETE and an INSERT of it with another value there: only that column tells
/// the two apart, and it was left out of the hashes (its types differ), so the corrected row was
/// dropped with the old table. Its values are converted before they are hashed now: the
/// corrected row is copied, and the old table kept, since an earlier version is in the table too
/// (review H1 of rebuild-after-swap-hashes.md).
async fn a_row_corrected_in_a_converted_column(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let db = "rb_converted";
    let clock = RealClock(Instant::now());
    let props = |kind: &str, order: &str| {
        rebuild_props(
            db,
            &format!("(id UInt64, kind {kind}) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
            json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        )
    };
    let id = "rb-converted";
    let v1 = validate(id, &props("Enum8('a' = 1, 'b' = 2)", "id")).map_err(|e| format!("{e:?}"))?;
    let (state, _) = apply(id, &v1, None, &cluster(&t, &clock, &NoEvents))
        .await
        .map_err(|e| format!("first apply: {e}"))?;
    sql_on(
        &t,
        &pod,
        format!("INSERT INTO {db}.t SELECT number + 1, 'a' FROM system.numbers LIMIT 100"),
    )
    .await?;
    let v2 = validate(id, &props("String", "(kind, id)")).map_err(|e| format!("{e:?}"))?;
    let meddling = RowAfterADrop {
        inner: &t,
        row: format!("INSERT INTO {db}.t VALUES (3, 'b')"),
        at_drop: 1,
        into: None,
        also: Some((
            pod.clone(),
            format!("ALTER TABLE {db}.t DELETE WHERE id = 3 AND kind = 'a'"),
        )),
        drops: Mutex::new(Vec::new()),
        on: Mutex::new(None),
    };
    let (_, outcome) = apply(id, &v2, Some(&state), &cluster(&meddling, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    let query = |sql: String| sql_on(&t, &pod, sql);
    let kinds = query(format!(
        "SELECT arraySort(groupArray(kind)) FROM {db}.t WHERE id = 3"
    ))
    .await?;
    check(
        kinds == "['a','b']\n",
        format!("the corrected row is in the table beside the copied one: {kinds:?}; the apply: {outcome:?}"),
    )?;
    let kept = query(format!("SELECT kind FROM {db}.t__old WHERE id = 3"))
        .await
        .map_err(|e| format!("the old table is kept ({e})"))?;
    check(
        kept == "b\n",
        format!("the kept old table holds the corrected row: {kept:?}"),
    )
}

/// Writes a row into the live table just before the backfill's first copy (a part made during
/// the dual write, so its partition's rows are hashed after the swap), and one dated before the
/// cut-over into the old table right after the snapshot's hashes were read, as an insert still
/// running at the RENAME would.
struct Stragglers<'a> {
    inner: &'a KubeTransport,
    db: &'static str,
    early: AtomicBool,
    straggler: AtomicBool,
}

impl Executor for Stragglers<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let early = (request.stdin.contains("'copied'") && !self.early.swap(true, Ordering::SeqCst))
            .then(|| format!("INSERT INTO {}.t VALUES (2, 'early')", self.db));
        let straggler = (request
            .stdin
            .contains(&format!("FROM `{}`.`t__rebuild_stage` WHERE", self.db))
            && request.stdin.contains("sumWithOverflowIf")
            && !self.straggler.swap(true, Ordering::SeqCst))
        .then(|| format!("INSERT INTO {}.t__old VALUES (1001, 'straggler')", self.db));
        let (inner, pod) = (self.inner, request.pod.clone());
        async move {
            if let Some(row) = early {
                write_row(inner, &pod, &row).await?;
            }
            let out = inner.exec(request).await?;
            if let Some(row) = straggler {
                write_row(inner, &pod, &row).await?;
            }
            Ok(out)
        }
    }
}

/// Runs one INSERT on `pod`, which must succeed.
async fn write_row(inner: &KubeTransport, pod: &str, row: &str) -> Result<(), TransportError> {
    let written = inner
        .exec(statement_exec(pod, row, Duration::from_secs(30)))
        .await?;
    assert_eq!(written.exit_code, 0, "{row}: {written:?}");
    Ok(())
}

/// Rows that reach the old table after it was compared with the table (an insert still running
/// at the RENAME in an Atomic database writes into the old table, which it holds): the old table
/// is read again before it is dropped, and one that got rows is kept, with an event; before,
/// `keepOld: false` dropped it with them (review H8 of rebuild-after-swap-hashes.md). The row
/// is dated before the cut-over (id 1001, which the table does not hold): a late row the table
/// lacks.
async fn rows_into_the_old_table_after_it_was_compared(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let db = "rb_straggler";
    let clock = RealClock(Instant::now());
    let id = "rb-straggler";
    // Ids up to 5000: the cut-over is 5001, above every straggler.
    let (state, v2) = filled_then_reordered(
        &t,
        &pod,
        db,
        id,
        &clock,
        |order| format!("(id UInt64, kind String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
        json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        format!("INSERT INTO {db}.t SELECT (number + 1) * 10, 'k' FROM system.numbers LIMIT 500"),
    )
    .await?;
    let stragglers = Stragglers {
        inner: &t,
        db,
        early: AtomicBool::new(false),
        straggler: AtomicBool::new(false),
    };
    let events = Recorded::default();
    let (_, outcome) = apply(id, &v2, Some(&state), &cluster(&stragglers, &clock, &events))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    check(
        stragglers.early.load(Ordering::SeqCst) && stragglers.straggler.load(Ordering::SeqCst),
        "both rows were written".to_owned(),
    )?;
    let query = |sql: String| sql_on(&t, &pod, sql);
    let early = query(format!("SELECT count() FROM {db}.t WHERE kind = 'early'")).await?;
    check(
        early == "1\n",
        format!("the row written during the dual write is in the table once: {early:?}"),
    )?;
    let in_table = query(format!("SELECT count() FROM {db}.t WHERE kind = 'straggler'")).await?;
    let old = query(format!(
        "SELECT count() FROM system.tables WHERE database = '{db}' AND name = 't__old'"
    ))
    .await?;
    let in_old = if old == "1\n" {
        query(format!(
            "SELECT count() FROM {db}.t__old WHERE kind = 'straggler'"
        ))
        .await?
    } else {
        "0\n".to_owned()
    };
    check(
        in_table == "1\n" || in_old == "1\n",
        format!(
            "the row is in the table ({in_table:?}) or in the kept old table ({in_old:?}); the apply: {outcome:?}; \
             events: {:#?}",
            events.messages()
        ),
    )?;
    let said = events.messages();
    check(
        in_table == "1\n"
            || said
                .iter()
                .any(|m| m.contains("got rows after it was compared with the table")),
        format!("an event says why the old table is kept: {said:#?}"),
    )
}

/// One source whose engine folds rows (`SummingMergeTree`), and a row from the cut-over on written
/// between the view's drop and the RENAME: it reached only the old table, and with one source
/// nothing compared the old table's rows from the cut-over on, so `keepOld: false` dropped it.
/// More such rows in the old table than in the snapshot keep it now, with an event.
async fn a_folding_table_and_a_row_between_a_drop_and_its_rename(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let db = "rb_fold_window";
    let clock = RealClock(Instant::now());
    let id = "rb-fold-window";
    let (state, v2) = filled_then_reordered(
        &t,
        &pod,
        db,
        id,
        &clock,
        |order| {
            format!(
                "(id UInt64, kind String, v UInt64) ENGINE = SummingMergeTree(v) PARTITION BY id % 3 ORDER BY {order}"
            )
        },
        json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        format!("INSERT INTO {db}.t SELECT number + 1, 'k', 1 FROM system.numbers LIMIT 100"),
    )
    .await?;
    // The cut-over is 101; row 9000 is from it on.
    let meddling = RowAfterADrop {
        inner: &t,
        row: format!("INSERT INTO {db}.t VALUES (9000, 'window', 1)"),
        at_drop: 1,
        into: None,
        also: None,
        drops: Mutex::new(Vec::new()),
        on: Mutex::new(None),
    };
    let events = Recorded::default();
    let (_, outcome) = apply(id, &v2, Some(&state), &cluster(&meddling, &clock, &events))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    let query = |sql: String| sql_on(&t, &pod, sql);
    let in_table = query(format!("SELECT count() FROM {db}.t WHERE id = 9000")).await?;
    let old = query(format!(
        "SELECT count() FROM system.tables WHERE database = '{db}' AND name = 't__old'"
    ))
    .await?;
    let in_old = if old == "1\n" {
        query(format!("SELECT count() FROM {db}.t__old WHERE id = 9000")).await?
    } else {
        "0\n".to_owned()
    };
    check(
        in_table == "1\n" || in_old == "1\n",
        format!(
            "the row is in the table ({in_table:?}) or in the kept old table ({in_old:?}); the apply: {outcome:?}; \
             events: {:#?}",
            events.messages()
        ),
    )
}

/// Runs `statements` on the pod right after the first exec that drops a view, without waiting
/// for anything they start.
struct AtTheViewDrop<'a> {
    inner: &'a KubeTransport,
    statements: Vec<String>,
    done: AtomicBool,
}

impl Executor for AtTheViewDrop<'_> {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let now = request.stdin.contains("'swapping'") && !self.done.swap(true, Ordering::SeqCst);
        let (inner, pod, statements) = (
            self.inner,
            request.pod.clone(),
            now.then(|| self.statements.clone()),
        );
        async move {
            let out = inner.exec(request).await?;
            for sql in statements.unwrap_or_default() {
                write_row(inner, &pod, &sql).await?;
            }
            Ok(out)
        }
    }
}

/// A mutation issued on the live table just before the RENAME that has not finished when the old
/// table is compared (merges stopped, as a busy server leaves it queued): it goes on in the old
/// table, which its counts and hashes do not show yet, and the table keeps the rows it deletes.
/// Before, `keepOld: false` dropped the old table with the mutation and said nothing; now it is
/// kept, with an event saying to run it again (review G1 of rebuild-after-swap-second.md).
async fn a_mutation_unfinished_at_the_swap(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let db = "rb_mutating";
    let clock = RealClock(Instant::now());
    let id = "rb-mutating";
    let (state, v2) = filled_then_reordered(
        &t,
        &pod,
        db,
        id,
        &clock,
        |order| format!("(id UInt64, kind String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY {order}"),
        json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        format!("INSERT INTO {db}.t SELECT number + 1, 'k' FROM system.numbers LIMIT 100"),
    )
    .await?;
    let meddling = AtTheViewDrop {
        inner: &t,
        statements: vec![
            format!("SYSTEM STOP MERGES {db}.t"),
            format!("ALTER TABLE {db}.t DELETE WHERE id = 30"),
        ],
        done: AtomicBool::new(false),
    };
    let events = Recorded::default();
    let applied = apply(id, &v2, Some(&state), &cluster(&meddling, &clock, &events)).await;
    let query = |sql: String| sql_on(&t, &pod, sql);
    let pending = query(format!(
        "SELECT count() FROM system.mutations WHERE database = '{db}' AND table = 't__old' AND NOT is_done"
    ))
    .await?;
    // Let the old table's mutation end, whatever the outcome.
    let _ = query(format!("SYSTEM START MERGES {db}.t__old")).await;
    let (_, outcome) = applied.map_err(|e| format!("the rebuild: {e}"))?;
    check(
        meddling.done.load(Ordering::SeqCst) && pending == "1\n",
        format!("the mutation was still going on in the old table after the apply: {pending:?}"),
    )?;
    let old = query(format!(
        "SELECT count() FROM system.tables WHERE database = '{db}' AND name = 't__old'"
    ))
    .await?;
    let said = events.messages();
    check(
        old == "1\n"
            && said
                .iter()
                .any(|m| m.contains("1 mutation(s) (ALTER TABLE ... UPDATE or DELETE) had not finished")),
        format!(
            "the old table is kept ({old:?}) and an event says why; the apply: {outcome:?}; events: {said:#?}"
        ),
    )
}

/// A `Nullable` partition key (26.x, `allow_nullable_key`), and a late row in the NULL
/// partition after verification: the counts printed that partition as NULL, the copy's filter
/// (`toString(key) = ...`) matched none of its rows, and `keepOld: false` dropped the row with
/// the old table (review G3 of rebuild-after-swap-second.md, item 7 of the issue). The NULL
/// partition has a text of its own now; a partition whose key is the text `N` stays apart.
async fn a_late_row_in_the_null_partition(sb: &Sandbox) -> Result<(), String> {
    let t = transport_of(sb).await?;
    let pod = sb.pod_names()[0].clone();
    let db = "rb_null_key";
    let clock = RealClock(Instant::now());
    let id = "rb-null-key";
    let (state, v2) = filled_then_reordered(
        &t,
        &pod,
        db,
        id,
        &clock,
        |order| {
            format!(
                "(id UInt64, kind String, k Nullable(String)) ENGINE = MergeTree PARTITION BY k ORDER BY {order} \
                 SETTINGS allow_nullable_key = 1"
            )
        },
        json!({ "cutoverColumn": "id", "cutoverDelaySeconds": 1 }),
        format!("INSERT INTO {db}.t SELECT number + 1, 'k', if(number % 2 = 0, NULL, 'N') FROM system.numbers LIMIT 100"),
    )
    .await?;
    let meddling = RowAfterADrop {
        inner: &t,
        row: format!("INSERT INTO {db}.t VALUES (0, 'late', NULL)"),
        at_drop: 1,
        into: None,
        also: None,
        drops: Mutex::new(Vec::new()),
        on: Mutex::new(None),
    };
    let (_, outcome) = apply(id, &v2, Some(&state), &cluster(&meddling, &clock, &NoEvents))
        .await
        .map_err(|e| format!("the rebuild: {e}"))?;
    let rows = sql_on(
        &t,
        &pod,
        format!("SELECT countIf(kind = 'late'), countIf(k IS NULL), countIf(k = 'N'), count() FROM {db}.t"),
    )
    .await?;
    check(
        rows == "1\t51\t50\t101\n",
        format!(
            "the late row in the NULL partition is in the table once, every other row too: {rows:?}; the apply: {outcome:?}"
        ),
    )
}
