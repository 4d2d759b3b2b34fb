//! The ledger: what this resource did on each pod, kept on the pod itself.
//!
//! Alchemy's state says which pods a schema reached, but that state can be
//! lost (a deleted state file, a new CI workspace), and two deploys running
//! at once do not see each other's state at all. The ledger is the record
//! that travels with the data: a small MergeTree table on each pod. A deploy
//! without a state (or one that waited for the lease) reads it and records
//! the pods that already hold the current fingerprint instead of running the
//! statements again; a retried destroy skips the pods it already emptied;
//! `read` adopts such a schema; `status` shows which pods are behind. The
//! rows live with the tables: a pod that lost its data lost its ledger too,
//! and gets the statements again.
//!
//! Each run writes two rows on a pod: one before its first statement (and
//! before a rebuild of the pod's tables), one after its last statement and
//! the check ([`LedgerEvent`]). So a run killed half way leaves its
//! `started` (or `destroying`) row as the pod's newest, and the next deploy
//! runs the list there again (statements are idempotent by contract) instead
//! of taking a half-done pod as covered.
//!
//! Order: the newest row of a pod is the one that counts, so it is decided
//! by neither the deployer's clock (a machine whose clock is behind would
//! sort a destroy under the apply it undid) nor the server's (18.16's `now()`
//! has whole seconds, and a `started` and an `applied` row often share one).
//! Each row carries `seq`, one more than the highest `seq` among the rows
//! naming that pod, computed by the pod's server inside the INSERT: rows
//! written one after the other on a pod get strictly increasing numbers.
//! Only writes racing each other on one pod (two deploys without a lease)
//! can share a number; [`order_key`] breaks such a tie the same way every
//! time, a run's opening row (`started`, `destroying`) above its closing row,
//! so a race never makes a pod look covered. `applied_at` is the server's
//! time, for people; rows without `seq` (written before it existed) come
//! first, in their `applied_at` order.
//!
//! A pod's rows are the rows naming it: reads and sequence numbers are
//! filtered by pod, so a ledger table that is Replicated (every pod holds
//! every pod's rows) or a data volume another pod used before never makes
//! one pod look covered because another pod is.
//!
//! The SQL is rendered here only ([`started_script`], [`finished_script`],
//! [`read_script`]), so any caller that batches a pod's work reuses it. The
//! values are quoted (`literal`), never interpolated raw: a resource id may
//! hold any character. Every construct works on ClickHouse 18.16 (no
//! DateTime64, `formatDateTime`'s `%M` is the minute there and the month's
//! name on modern servers, so neither is used) and on modern servers.

mod run;

use std::cmp::Ordering;

use crate::config::LedgerConfig;
use crate::sql::clickhouse_text::{literal, unescape};

/// What a run writes into the ledger on each pod it works on.
#[derive(Clone, Copy)]
pub(crate) struct LedgerWrite<'a> {
    pub config: &'a LedgerConfig,
    /// The fingerprint applied, or (a destroy) the one being deleted.
    pub fingerprint: &'a str,
    pub statement_count: u32,
    /// Whether the run applies the statements or runs the delete statements.
    pub destroy: bool,
}

impl LedgerWrite<'_> {
    /// The row written before the pod's first statement (or its rebuild).
    pub(crate) fn opening(&self) -> LedgerEvent {
        if self.destroy {
            LedgerEvent::Destroying
        } else {
            LedgerEvent::Started
        }
    }

    /// The row written after the pod's last statement and its check.
    pub(crate) fn closing(&self) -> LedgerEvent {
        if self.destroy {
            LedgerEvent::Destroyed
        } else {
            LedgerEvent::Applied
        }
    }
}

/// What a row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LedgerEvent {
    /// An apply of the row's fingerprint began on the pod: nothing says it finished.
    Started,
    /// Every statement of the row's fingerprint, and the check, succeeded on the pod.
    Applied,
    /// A destroy began running the delete statements on the pod.
    Destroying,
    /// Every delete statement succeeded on the pod.
    Destroyed,
}

impl LedgerEvent {
    /// Its text in the `event` column.
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerEvent::Started => "started",
            LedgerEvent::Applied => "applied",
            LedgerEvent::Destroying => "destroying",
            LedgerEvent::Destroyed => "destroyed",
        }
    }

    /// The event of a row as read; an empty one is a row written before the
    /// column existed, when only finished runs were written (an empty
    /// fingerprint for a destroy).
    fn parse(text: &str, fingerprint: &str) -> Option<Self> {
        Some(match text {
            "started" => LedgerEvent::Started,
            "applied" => LedgerEvent::Applied,
            "destroying" => LedgerEvent::Destroying,
            "destroyed" => LedgerEvent::Destroyed,
            "" if fingerprint.is_empty() => LedgerEvent::Destroyed,
            "" => LedgerEvent::Applied,
            _ => return None,
        })
    }

    /// Whether it opens a run (nothing says that run finished).
    fn opens(self) -> bool {
        matches!(self, LedgerEvent::Started | LedgerEvent::Destroying)
    }
}

/// One ledger row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerRow {
    /// The resource that wrote it.
    pub resource_id: String,
    /// The fingerprint applied, or deleted (a destroy; empty in rows of earlier versions).
    pub fingerprint: String,
    /// How many statements (delete statements for a destroy) the run had.
    pub statement_count: u32,
    /// The pod's name.
    pub pod: String,
    /// The pod's uid when written.
    pub pod_uid: String,
    /// When, by the pod's server, RFC 3339 UTC (for people: the order is `seq`).
    pub applied_at: String,
    /// The version of this package that wrote it.
    pub package_version: String,
    /// Its place among the rows naming its pod (0: written before the column existed).
    pub seq: u64,
    /// What it records.
    pub event: LedgerEvent,
}

/// This package's version, written into every row.
pub const PACKAGE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The marker the read script prints last, so a cut-off output is never read as a short ledger.
const END: &str = "__clickhouse_schema_ledger_end__";

/// The columns, in the order the scripts write and read them.
const COLUMNS: &str =
    "resource_id, fingerprint, statement_count, pod, pod_uid, applied_at, package_version, seq, event";

/// The table, qualified and back-quoted (both parts are plain identifiers by validation).
fn table(config: &LedgerConfig) -> String {
    format!("`{}`.`{}`", config.database, config.table)
}

/// The script that writes the row opening `write`'s run on `pod` (uid
/// `pod_uid`): `started` before an apply's first statement or rebuild,
/// `destroying` before a destroy's first delete statement.
pub(crate) fn started_script(write: &LedgerWrite<'_>, resource_id: &str, pod: &str, pod_uid: &str) -> String {
    write_script(write, resource_id, pod, pod_uid, write.opening())
}

/// The script that writes the row closing the run on `pod`: `applied` after
/// an apply's statements and check, `destroyed` after a destroy's delete
/// statements.
pub(crate) fn finished_script(
    write: &LedgerWrite<'_>,
    resource_id: &str,
    pod: &str,
    pod_uid: &str,
) -> String {
    write_script(write, resource_id, pod, pod_uid, write.closing())
}

/// The database and table if missing, then the row: its time the server's,
/// its `seq` one more than the highest among the rows naming the pod (see
/// the module's header).
fn write_script(
    write: &LedgerWrite<'_>,
    resource_id: &str,
    pod: &str,
    pod_uid: &str,
    event: LedgerEvent,
) -> String {
    let table = table(write.config);
    let pod = literal(pod);
    format!(
        "CREATE DATABASE IF NOT EXISTS `{database}`;\n\
         CREATE TABLE IF NOT EXISTS {table} (resource_id String, fingerprint String, statement_count UInt32, \
         pod String, pod_uid String, applied_at String, package_version String, seq UInt64, event String) \
         ENGINE = MergeTree ORDER BY (pod, seq);\n\
         INSERT INTO {table} ({COLUMNS}) \
         SELECT {}, {}, {}, {pod}, {}, concat(replaceOne(toString(now(), 'UTC'), ' ', 'T'), 'Z'), {}, \
         (SELECT max(seq) FROM {table} WHERE pod = {pod}) + 1, {};\n",
        literal(resource_id),
        literal(write.fingerprint),
        write.statement_count,
        literal(pod_uid),
        literal(PACKAGE_VERSION),
        literal(event.as_str()),
        database = write.config.database,
    )
}

/// The script that reads the rows naming `pod` that concern this resource
/// (its own rows, and those of any resource with `fingerprint`: who else
/// applied the same schema), highest `seq` first, then the end marker.
/// Without the table it prints only the marker.
pub fn read_script(config: &LedgerConfig, resource_id: &str, fingerprint: &str, pod: &str) -> String {
    format!(
        "SELECT {COLUMNS} FROM {table} WHERE pod = {} AND (resource_id = {} OR fingerprint = {}) \
         ORDER BY seq DESC LIMIT 1000 FORMAT TabSeparated;\n\
         SELECT {} FORMAT TabSeparated;\n",
        literal(pod),
        literal(resource_id),
        literal(fingerprint),
        literal(END),
        table = table(config),
    )
}

/// The rows of a read script's output; `Err` says why it cannot be read (no
/// end marker: the script did not finish).
pub fn parse(stdout: &str) -> Result<Vec<LedgerRow>, String> {
    let mut rows = Vec::new();
    let mut ended = false;
    for line in stdout.lines() {
        if line == END {
            ended = true;
            break;
        }
        let fields: Vec<String> = line.split('\t').map(unescape).collect();
        let [
            resource_id,
            fingerprint,
            count,
            pod,
            pod_uid,
            applied_at,
            package_version,
            seq,
            event,
        ] = fields.as_slice()
        else {
            return Err(format!(
                "a ledger line has {} fields, not 9",
                line.split('\t').count()
            ));
        };
        rows.push(LedgerRow {
            resource_id: resource_id.clone(),
            fingerprint: fingerprint.clone(),
            statement_count: count
                .parse()
                .map_err(|_| "a ledger statement count is not a number".to_owned())?,
            pod: pod.clone(),
            pod_uid: pod_uid.clone(),
            applied_at: applied_at.clone(),
            package_version: package_version.clone(),
            seq: seq
                .parse()
                .map_err(|_| "a ledger seq is not a number".to_owned())?,
            event: LedgerEvent::parse(event, fingerprint)
                .ok_or_else(|| format!("a ledger row records an unknown event '{event}'"))?,
        });
    }
    if ended {
        Ok(rows)
    } else {
        Err("the ledger read did not finish (no end marker)".to_owned())
    }
}

/// The order of a pod's rows, oldest first: by `seq`; rows of racing writes
/// that share it put an opening row (`started`, `destroying`) above a closing
/// one whatever their times, so a race never takes a pod as covered; then by
/// time (rows of an earlier version all have `seq` 0 and no opening rows),
/// then by their text, so the order is total.
pub fn order_key(a: &LedgerRow, b: &LedgerRow) -> Ordering {
    fn key(r: &LedgerRow) -> (u64, bool, &str, &str, &str, &str) {
        (
            r.seq,
            r.event.opens(),
            &r.applied_at,
            &r.fingerprint,
            &r.resource_id,
            &r.pod_uid,
        )
    }
    key(a).cmp(&key(b))
}

/// The newest row `resource_id` wrote on `pod` among `rows` (rows naming
/// another pod are not that pod's, whatever table they came from).
pub fn newest_on<'r>(rows: &'r [LedgerRow], resource_id: &str, pod: &str) -> Option<&'r LedgerRow> {
    rows.iter()
        .filter(|r| r.resource_id == resource_id && r.pod == pod)
        .max_by(|a, b| order_key(a, b))
}

/// [`newest_on`], unless another row of the resource on the pod shares its
/// `seq` and says something else: two closing rows of racing writes (two
/// deploys of one resource without a lease, each taking the pod's newest
/// `seq` plus one at once). Which of their lists ran last on the pod is not
/// known, so neither covers it. Rows of an earlier version all have `seq` 0
/// and are ordered by time.
///
/// Nor does a row of an earlier version (`seq` 0) written in the second of
/// the newest numbered row or after it: an older package still deploying
/// the resource into a migrated table (its INSERT names no `seq`, so the
/// server gives it 0). Its row sorts below every numbered one whatever it
/// records, a destroy included, so which came last is not known. Versions
/// from cc98143 on stamp rows with the server's clock, so a row they wrote
/// before the migration is older, except within its second (which makes the
/// pod due: the safe side). Earlier ones used the deployer's clock: a row of
/// theirs dated ahead leaves the pod due until that time, one dated behind
/// can go unseen, so those must be retired before the migration (README).
fn settled_newest<'r>(rows: &'r [LedgerRow], resource_id: &str, pod: &str) -> Option<&'r LedgerRow> {
    let newest = newest_on(rows, resource_id, pod)?;
    let theirs = |r: &&LedgerRow| r.resource_id == resource_id && r.pod == pod;
    let contested = newest.seq > 0
        && rows
            .iter()
            .filter(theirs)
            .any(|r| r.seq == newest.seq && (r.event != newest.event || r.fingerprint != newest.fingerprint));
    let second = |r: &LedgerRow| r.applied_at.get(..19).unwrap_or(&r.applied_at).to_owned();
    let unordered = newest.seq > 0
        && rows
            .iter()
            .filter(theirs)
            .any(|r| r.seq == 0 && second(r) >= second(newest));
    (!contested && !unordered).then_some(newest)
}

/// Whether `pod` (uid `pod_uid`, empty when unknown) holds `fingerprint` by
/// `resource_id`'s hand: its newest row there is a finished apply of it (a
/// `started` row means a run may have stopped half way, so the pod is due),
/// written on this very pod. A pod re-created under the same name is another
/// pod, as it is to the state: a row naming the old one can come back with a
/// replicated ledger table or a restored volume while the tables did not.
pub fn applied_on(
    rows: &[LedgerRow],
    resource_id: &str,
    fingerprint: &str,
    pod: &str,
    pod_uid: &str,
) -> bool {
    settled_newest(rows, resource_id, pod).is_some_and(|r| {
        r.event == LedgerEvent::Applied && r.fingerprint == fingerprint && r.pod_uid == pod_uid
    })
}

/// Whether `resource_id`'s delete statements all ran on `pod` (uid
/// `pod_uid`) since its last apply there (a retried destroy skips it).
pub fn destroyed_on(rows: &[LedgerRow], resource_id: &str, pod: &str, pod_uid: &str) -> bool {
    settled_newest(rows, resource_id, pod)
        .is_some_and(|r| r.event == LedgerEvent::Destroyed && r.pod_uid == pod_uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LedgerConfig {
        LedgerConfig {
            database: "ops".to_owned(),
            table: "ledger".to_owned(),
        }
    }

    fn write(config: &LedgerConfig, destroy: bool) -> LedgerWrite<'_> {
        LedgerWrite {
            config,
            fingerprint: "f1",
            statement_count: 3,
            destroy,
        }
    }

    fn row(id: &str, pod: &str, seq: u64, event: LedgerEvent) -> LedgerRow {
        LedgerRow {
            resource_id: id.to_owned(),
            fingerprint: "f1".to_owned(),
            statement_count: 3,
            pod: pod.to_owned(),
            pod_uid: "uid-0".to_owned(),
            // One server second for all of them: the order is not the time.
            applied_at: "2026-12-01T10:00:00Z".to_owned(),
            package_version: PACKAGE_VERSION.to_owned(),
            seq,
            event,
        }
    }

    #[test]
    fn the_writes_quote_every_value_and_number_the_row_after_the_pods_newest() {
        let config = config();
        let apply = write(&config, false);
        let script = started_script(&apply, "it's\\a\ttab\nid", "chi-0", "uid-0");
        assert!(
            script.contains("CREATE DATABASE IF NOT EXISTS `ops`;"),
            "{script}"
        );
        assert!(
            script.contains("CREATE TABLE IF NOT EXISTS `ops`.`ledger`"),
            "{script}"
        );
        assert!(
            script.contains("SELECT 'it\\'s\\\\a\\ttab\\nid', 'f1', 3, 'chi-0', 'uid-0', "),
            "{script}"
        );
        // The number is the pod's own: rows naming other pods do not count.
        assert!(
            script.contains("(SELECT max(seq) FROM `ops`.`ledger` WHERE pod = 'chi-0') + 1, 'started';"),
            "{script}"
        );
        // The server's time, never the caller's, and no `%M` (the month's name on modern servers).
        assert!(
            script.contains("toString(now(), 'UTC')") && !script.contains("%M"),
            "{script}"
        );
        assert_eq!(script.matches(";\n").count(), 3, "{script}");
        assert!(finished_script(&apply, "id", "chi-0", "u").ends_with(", 'applied';\n"));
        let destroy = write(&config, true);
        assert!(
            started_script(&destroy, "id", "chi-0", "u").contains("SELECT 'id', 'f1', 3, 'chi-0', 'u', ")
        );
        assert!(started_script(&destroy, "id", "chi-0", "u").ends_with(", 'destroying';\n"));
        assert!(finished_script(&destroy, "id", "chi-0", "u").ends_with(", 'destroyed';\n"));
    }

    #[test]
    fn the_read_is_the_pods_rows_of_this_id_or_this_fingerprint_and_ends_with_a_marker() {
        let script = read_script(&config(), "orders-schema", "f00d", "chi-1");
        assert!(
            script.contains("WHERE pod = 'chi-1' AND (resource_id = 'orders-schema' OR fingerprint = 'f00d') ORDER BY seq DESC"),
            "{script}"
        );
        assert!(
            script
                .trim_end()
                .ends_with(&format!("SELECT '{END}' FORMAT TabSeparated;")),
            "{script}"
        );
    }

    #[test]
    fn parse_reads_rows_until_the_marker_and_undoes_escapes() {
        let out = format!(
            "it\\'s\\ta\\\\b\tf1\t2\tchi-0\tu0\t2026-12-01T10:00:00Z\t0.1.0\t7\tapplied\n\
             other\t\t2\tchi-1\tu1\t2026-12-01T09:00:00.000Z\t0.1.0\t0\t\n{END}\n"
        );
        let rows = parse(&out).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].resource_id, "it's\ta\\b");
        assert_eq!(
            (rows[0].statement_count, rows[0].seq, rows[0].event),
            (2, 7, LedgerEvent::Applied)
        );
        // A row of an earlier version: no seq, no event (an empty fingerprint was a destroy).
        assert_eq!((rows[1].seq, rows[1].event), (0, LedgerEvent::Destroyed));
        assert_eq!(parse(&format!("{END}\n")).unwrap(), vec![]);
        assert!(parse("a\tb\n").unwrap_err().contains("fields"));
        assert!(parse("").unwrap_err().contains("did not finish"));
        let unknown = format!("a\tf\t1\tp\tu\tt\tv\t1\tmerged\n{END}\n");
        assert!(parse(&unknown).unwrap_err().contains("'merged'"));
    }

    #[test]
    fn rows_written_in_one_server_tick_keep_the_order_they_were_written_in() {
        // An apply, then a destroy, within one second of the server's clock,
        // read back in any order: the destroy is the newest.
        let rows = vec![
            row("r", "chi-0", 4, LedgerEvent::Destroyed),
            row("r", "chi-0", 1, LedgerEvent::Started),
            row("r", "chi-0", 3, LedgerEvent::Destroying),
            row("r", "chi-0", 2, LedgerEvent::Applied),
        ];
        for rotation in 0..rows.len() {
            let mut rows = rows.clone();
            rows.rotate_left(rotation);
            assert_eq!(
                newest_on(&rows, "r", "chi-0").unwrap().event,
                LedgerEvent::Destroyed
            );
            assert!(!applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
            assert!(destroyed_on(&rows, "r", "chi-0", "uid-0"));
        }
        // Rows of an earlier version (seq 0) written before the numbered ones sort below them (one
        // written later covers nothing: see the test below).
        let mut old = row("r", "chi-0", 0, LedgerEvent::Destroyed);
        old.applied_at = "2026-11-30T00:00:00.000Z".to_owned();
        let rows = vec![old, row("r", "chi-0", 2, LedgerEvent::Applied)];
        assert!(applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
    }

    #[test]
    fn a_tie_of_racing_writes_is_broken_the_same_way_and_never_covers() {
        let rows = vec![
            row("r", "chi-0", 5, LedgerEvent::Applied),
            row("r", "chi-0", 5, LedgerEvent::Started),
        ];
        let reversed: Vec<LedgerRow> = rows.iter().rev().cloned().collect();
        assert_eq!(newest_on(&rows, "r", "chi-0"), newest_on(&reversed, "r", "chi-0"));
        assert!(!applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
        assert!(!applied_on(&reversed, "r", "f1", "chi-0", "uid-0"));
        // Whatever the servers' clocks said of the two.
        let mut later = row("r", "chi-0", 5, LedgerEvent::Applied);
        later.applied_at = "2026-12-01T10:00:01Z".to_owned();
        let rows = vec![later, row("r", "chi-0", 5, LedgerEvent::Started)];
        assert!(!applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
    }

    #[test]
    fn two_closing_rows_racing_for_one_seq_cover_the_pod_for_neither() {
        // Two deploys of one resource without a lease, F1 and F2, both numbering their row 6.
        let mut f2 = row("r", "chi-0", 6, LedgerEvent::Applied);
        f2.fingerprint = "f2".to_owned();
        let rows = vec![
            row("r", "chi-0", 5, LedgerEvent::Started),
            row("r", "chi-0", 6, LedgerEvent::Applied),
            f2,
        ];
        assert!(!applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
        assert!(!applied_on(&rows, "r", "f2", "chi-0", "uid-0"));
        // An apply and a destroy racing: neither covered nor destroyed.
        let rows = vec![
            row("r", "chi-0", 6, LedgerEvent::Applied),
            row("r", "chi-0", 6, LedgerEvent::Destroyed),
        ];
        assert!(!applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
        assert!(!destroyed_on(&rows, "r", "chi-0", "uid-0"));
        // The same row twice (a retried insert) is no race.
        let rows = vec![
            row("r", "chi-0", 6, LedgerEvent::Applied),
            row("r", "chi-0", 6, LedgerEvent::Applied),
        ];
        assert!(applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
        // Another resource's row at that seq is not this one's race.
        let rows = vec![
            row("r", "chi-0", 6, LedgerEvent::Applied),
            row("other", "chi-0", 6, LedgerEvent::Destroyed),
        ];
        assert!(applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
    }

    #[test]
    fn a_row_of_an_earlier_version_written_after_a_numbered_one_covers_nothing() {
        // A migrated table: the new version applied F1 (seq 2), then an older package, still
        // deploying the resource, destroyed it. Its row has seq 0 (its INSERT names no seq) and
        // the old format: empty event and fingerprint, the server's time with milliseconds.
        let old_destroy = |at: &str| LedgerRow {
            fingerprint: String::new(),
            applied_at: at.to_owned(),
            package_version: "0.0.9".to_owned(),
            ..row("r", "chi-0", 0, LedgerEvent::Destroyed)
        };
        let applied = |at: &str| LedgerRow {
            applied_at: at.to_owned(),
            ..row("r", "chi-0", 2, LedgerEvent::Applied)
        };
        let rows = vec![
            row("r", "chi-0", 1, LedgerEvent::Started),
            applied("2026-12-01T10:00:00Z"),
            old_destroy("2026-12-01T10:05:00.120Z"),
        ];
        assert!(
            !applied_on(&rows, "r", "f1", "chi-0", "uid-0"),
            "the old destroy may be the newest"
        );
        assert!(!destroyed_on(&rows, "r", "chi-0", "uid-0"));
        // In the same second: not known to be older either.
        let rows = vec![
            applied("2026-12-01T10:00:00Z"),
            old_destroy("2026-12-01T10:00:00.900Z"),
        ];
        assert!(!applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
        // Written before the migration (an earlier second): the numbered row is the newest.
        let rows = vec![
            old_destroy("2026-12-01T09:59:59.999Z"),
            applied("2026-12-01T10:00:00Z"),
        ];
        assert!(applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
        // Only old rows (nothing numbered yet): ordered by time, as before.
        let mut old_apply = old_destroy("2026-12-01T10:06:00.000Z");
        old_apply.fingerprint = "f1".to_owned();
        old_apply.event = LedgerEvent::Applied;
        let rows = vec![old_destroy("2026-12-01T10:05:00.120Z"), old_apply];
        assert!(applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
    }

    #[test]
    fn a_started_run_is_not_covered_until_its_applied_row() {
        let started = vec![row("r", "chi-0", 1, LedgerEvent::Started)];
        assert!(!applied_on(&started, "r", "f1", "chi-0", "uid-0"));
        let done = vec![started[0].clone(), row("r", "chi-0", 2, LedgerEvent::Applied)];
        assert!(applied_on(&done, "r", "f1", "chi-0", "uid-0"));
        assert!(!applied_on(&done, "r", "f2", "chi-0", "uid-0"));
        assert!(!applied_on(&done, "other", "f1", "chi-0", "uid-0"));
        // Applied again after a destroy.
        let again = vec![
            row("r", "chi-0", 3, LedgerEvent::Destroyed),
            row("r", "chi-0", 5, LedgerEvent::Applied),
            row("r", "chi-0", 4, LedgerEvent::Started),
        ];
        assert!(applied_on(&again, "r", "f1", "chi-0", "uid-0"));
        assert!(!destroyed_on(&again, "r", "chi-0", "uid-0"));
    }

    #[test]
    fn a_pods_rows_are_the_rows_naming_it() {
        // chi-1's rows (a Replicated ledger table, or a volume chi-1 used before) say nothing of chi-0.
        let rows = vec![
            row("r", "chi-1", 9, LedgerEvent::Applied),
            row("r", "chi-0", 1, LedgerEvent::Started),
        ];
        assert!(applied_on(&rows, "r", "f1", "chi-1", "uid-0"));
        assert!(!applied_on(&rows, "r", "f1", "chi-0", "uid-0"));
        assert!(newest_on(&rows, "r", "chi-2").is_none());
    }
}
