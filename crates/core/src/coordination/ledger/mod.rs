//! The ledger: what this resource applied on each pod, kept on the pod itself.
//!
//! Alchemy's state says which pods a schema reached, but that state can be
//! lost (a deleted state file, a new CI workspace), and two deploys running
//! at once do not see each other's state at all. The ledger is the record
//! that travels with the data: after a pod's statements succeed, the apply
//! writes a row into a small MergeTree table on that pod. A deploy without a
//! state (or one that waited for the lease) reads it and records the pods
//! that already hold the current fingerprint instead of running the
//! statements again; `read` adopts such a schema; `status` shows which pods
//! are behind. The rows live with the tables: a pod that lost its data lost
//! its ledger too, and gets the statements again.
//!
//! Shape, chosen to work on every server this project supports (18.16 has
//! no DateTime64): every column a String or UInt32, `applied_at` an RFC 3339
//! UTC string with milliseconds (sorts by time), `ORDER BY (resource_id,
//! applied_at)`. A destroy that runs its delete statements writes a row with
//! an empty fingerprint, so a later deploy never adopts what was dropped.
//!
//! Order: the newest row is the one that counts, so `applied_at` is not the
//! deployer's clock (a destroy written by a machine whose clock is behind
//! would sort under the apply it undid, and a deploy with a lost state would
//! take the pod as covered). The pod's server stamps each row: its own `now()`,
//! but always at least a millisecond after the newest row already there
//! (whoever wrote it, and whatever clock it came from). So rows sort in the
//! order they were written on that pod, and the column and the table are as
//! earlier versions made them: a ledger they wrote keeps working, with no
//! migration.
//!
//! The values are quoted here (`quote`), never interpolated raw: a resource
//! id may hold any character.

mod run;

use crate::config::LedgerConfig;
use crate::sql::clickhouse_text::{literal, unescape};

/// What an apply writes into the ledger after each pod.
#[derive(Clone, Copy)]
pub(crate) struct LedgerWrite<'a> {
    pub config: &'a LedgerConfig,
    /// The fingerprint applied (empty for a destroy that ran its delete statements).
    pub fingerprint: &'a str,
    pub statement_count: u32,
}

/// One ledger row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerRow {
    /// The resource that wrote it.
    pub resource_id: String,
    /// The fingerprint applied; empty for a destroy that ran its delete statements.
    pub fingerprint: String,
    /// How many statements that was.
    pub statement_count: u32,
    /// The pod's name.
    pub pod: String,
    /// The pod's uid when written.
    pub pod_uid: String,
    /// When, RFC 3339 UTC.
    pub applied_at: String,
    /// The version of this package that wrote it.
    pub package_version: String,
}

/// This package's version, written into every row.
pub const PACKAGE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The marker the read script prints last, so a cut-off output is never read as a short ledger.
const END: &str = "__clickhouse_schema_ledger_end__";

/// The table, qualified and back-quoted (both parts are plain identifiers by validation).
fn table(config: &LedgerConfig) -> String {
    format!("`{}`.`{}`", config.database, config.table)
}

/// The script that writes `row`: the database and table if missing, then the
/// row. Its `applied_at` is the server's (see the module's header), so
/// `row.applied_at` is not written.
pub fn write_script(config: &LedgerConfig, row: &LedgerRow) -> String {
    let table = table(config);
    format!(
        "CREATE DATABASE IF NOT EXISTS `{database}`;\n\
         CREATE TABLE IF NOT EXISTS {table} (resource_id String, fingerprint String, statement_count UInt32, \
         pod String, pod_uid String, applied_at String, package_version String) \
         ENGINE = MergeTree ORDER BY (resource_id, applied_at);\n\
         INSERT INTO {table} (resource_id, fingerprint, statement_count, pod, pod_uid, applied_at, package_version) \
         SELECT {}, {}, {}, {}, {}, {applied_at}, {} FROM ({stamp});\n",
        literal(&row.resource_id),
        literal(&row.fingerprint),
        row.statement_count,
        literal(&row.pod),
        literal(&row.pod_uid),
        literal(&row.package_version),
        database = config.database,
        applied_at = APPLIED_AT,
        stamp = stamp(&table),
    )
}

/// `at_ms` (milliseconds since the epoch) as the ledger writes times: `2026-12-01T10:00:00.123Z`.
const APPLIED_AT: &str = "concat(formatDateTime(toDateTime(intDiv(at_ms, 1000), 'UTC'), '%Y-%m-%dT%H:%M:%S', 'UTC'), \
     '.', substring(toString(1000 + at_ms % 1000), 2, 3), 'Z')";

/// The row giving `at_ms`, the time of a new row: the server's `now()`, or a
/// millisecond after the newest `applied_at` of `table` when that is not
/// earlier (18.16's `now()` has whole seconds, and an earlier row may come
/// from a clock ahead). An empty table has no newest row.
fn stamp(table: &str) -> String {
    format!(
        "SELECT (SELECT max(applied_at) FROM {table}) AS last, \
         if(length(last) >= 23, toUInt64(toDateTime(replaceOne(substring(if(length(last) >= 23, last, \
         '1970-01-01T00:00:00'), 1, 19), 'T', ' '), 'UTC')) * 1000 + toUInt64(toUInt32OrZero(substring(last, 21, 3))), \
         toUInt64(0)) AS last_ms, toUInt64(now()) * 1000 AS now_ms, if(now_ms > last_ms, now_ms, last_ms + 1) AS at_ms"
    )
}

/// The script that reads the rows of `resource_id`, and those of any resource
/// with `fingerprint` (who else applied the same schema), newest first, then
/// the end marker. Without the table it prints only the marker.
pub fn read_script(config: &LedgerConfig, resource_id: &str, fingerprint: &str) -> String {
    format!(
        "SELECT resource_id, fingerprint, statement_count, pod, pod_uid, applied_at, package_version FROM {table} \
         WHERE resource_id = {} OR fingerprint = {} ORDER BY applied_at DESC LIMIT 1000 FORMAT TabSeparated;\n\
         SELECT {} FORMAT TabSeparated;\n",
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
        ] = fields.as_slice()
        else {
            return Err(format!(
                "a ledger line has {} fields, not 7",
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
        });
    }
    if ended {
        Ok(rows)
    } else {
        Err("the ledger read did not finish (no end marker)".to_owned())
    }
}

/// The newest row of `resource_id` among `rows` (they come newest first).
pub fn latest_of<'r>(rows: &'r [LedgerRow], resource_id: &str) -> Option<&'r LedgerRow> {
    rows.iter().find(|r| r.resource_id == resource_id)
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

    fn row(id: &str) -> LedgerRow {
        LedgerRow {
            resource_id: id.to_owned(),
            fingerprint: "ab".repeat(32),
            statement_count: 3,
            pod: "chi-0".to_owned(),
            pod_uid: "uid-0".to_owned(),
            applied_at: "2026-12-01T10:00:00.000Z".to_owned(),
            package_version: PACKAGE_VERSION.to_owned(),
        }
    }

    #[test]
    fn the_write_quotes_every_value() {
        let script = write_script(&config(), &row("it's\\a\ttab\nid"));
        assert!(
            script.contains("CREATE DATABASE IF NOT EXISTS `ops`;"),
            "{script}"
        );
        assert!(
            script.contains("CREATE TABLE IF NOT EXISTS `ops`.`ledger`"),
            "{script}"
        );
        assert!(script.contains("SELECT 'it\\'s\\\\a\\ttab\\nid', "), "{script}");
        // The time is the server's: the caller's never reaches the script.
        assert!(!script.contains("2026-12-01"), "{script}");
        assert!(script.contains("toUInt64(now())"), "{script}");
        assert_eq!(script.matches(";\n").count(), 3, "{script}");
    }

    #[test]
    fn the_read_finds_this_id_or_this_fingerprint_and_ends_with_a_marker() {
        let script = read_script(&config(), "orders-schema", "f00d");
        assert!(
            script.contains("WHERE resource_id = 'orders-schema' OR fingerprint = 'f00d'"),
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
            "it\\'s\\ta\\\\b\tf1\t2\tchi-0\tu0\t2026-12-01T10:00:00.000Z\t0.1.0\n\
             other\tf1\t2\tchi-1\tu1\t2026-12-01T09:00:00.000Z\t0.1.0\n{END}\n"
        );
        let rows = parse(&out).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].resource_id, "it's\ta\\b");
        assert_eq!(rows[0].statement_count, 2);
        assert_eq!(latest_of(&rows, "other").unwrap().pod, "chi-1");
        assert!(latest_of(&rows, "none").is_none());
        assert_eq!(parse(&format!("{END}\n")).unwrap(), vec![]);
        assert!(parse("a\tb\n").unwrap_err().contains("fields"));
        assert!(parse("").unwrap_err().contains("did not finish"));
    }
}
