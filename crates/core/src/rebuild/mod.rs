//! Rebuilds: the table changes ClickHouse has no ALTER for, carried out without losing a row.
//!
//! A new `ORDER BY` (beyond trailing columns added in the same ALTER), `PARTITION BY`,
//! `PRIMARY KEY`, `SAMPLE BY` or engine (`MergeTree` to `ReplicatedMergeTree`, say) needs a new
//! table. The user edits the table's `CREATE` and names the table in the `rebuild` prop; the
//! live-schema check finds the difference, and the apply rebuilds the table on the pods that hold
//! its rows before it runs the statements (which then find the table as declared):
//!
//! 1. `<table>__new` from the declaration, on every pod that holds the table (every replica);
//! 2. a cut-over: for a DateTime column the server's time plus a delay, for an integer column one
//!    more than its largest value; a materialized view `<table>__rebuild_view` copies every row
//!    written at or after it into the new table (the dual write);
//! 3. the backfill: the rows before the cut-over, one live partition at a time, from each source
//!    (every pod for a local table; one replica per replica set for a `Replicated` one). A
//!    partition is copied into a staging table (`<table>__rebuild_stage`, the new table's plain
//!    engine), emptied before each copy so a half copy never counts, then moved into the new table
//!    with `ATTACH PARTITION ... FROM`, which is atomic per partition and replicates. A receipt
//!    row per moved partition, and one per copied live partition, goes into
//!    `<database>.clickhouse_schema_rebuild_receipts` on the pod, so the next apply skips them;
//! 4. verification per live partition: the new table's row count (and, when asked, a checksum of
//!    every shared column) against the sum of its sources', read again a few times while the dual
//!    write catches up;
//! 5. the swap: on each pod a `swapping` receipt and the view dropped (on every replica of a set
//!    before any renames), a snapshot of the new table taken into the emptied staging table (hard
//!    links), then `RENAME TABLE t TO t__old, t__new TO t` and a `swapped` receipt. After the
//!    cut-over delay the rows only `t__old` holds (compared with the snapshot, not with `t`, where
//!    rows written since would hide equal ones) are copied into `t`, and `t__old` and the
//!    snapshot are dropped (`t__old` kept with `keepOld`).
//!
//! A failure at any step leaves `t` serving reads and writes as before; the next apply continues
//! from the receipts. This module renders the scripts and reads their output; its driver (`run`)
//! runs them over the transport, as steps of a reconcile run. Nothing here does I/O, and nothing
//! here imports from `transport`.
//!
//! Two limits of the servers, 18.16 included, that the design accepts and the README states: a row
//! before the cut-over that arrives after its partition was copied is not in the new table (the
//! verification then fails, and the next apply starts the rebuild over); and between the view's drop
//! and the RENAME an insert lands in the old table only (the copy after the swap brings it).

mod run;

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use crate::config::RebuildTable;
use crate::live_schema::{
    DifferenceReport, ObjectReport, ObjectStatus, changes_later, plain_table_body, statement_body,
};
use crate::sql::clickhouse_text::{ident, literal, unescape};
use crate::sql::declared::{DeclarationForm, ObjectKind, StatementClass, classify};
use crate::sql::definition;
use crate::sql::lexer::{Token, TokenKind, significant};

/// Suffix of the table a rebuild builds.
pub const NEW_SUFFIX: &str = "__new";

/// The last line every script whose output is read prints: the transport keeps at most 1 MiB of
/// an exec's output, and an output cut there (or a script stopped early) must not read as a
/// shorter, complete list of partitions, receipts, dependents or counts.
const END: &str = "__clickhouse_schema_rebuild_end__";

/// The statement that prints [`END`].
fn end_statement() -> String {
    format!("SELECT '{END}' FORMAT TSV;\n")
}

/// `stdout` before its end marker; `Err` when it has none as its last line.
fn complete(stdout: &str) -> Result<&str, String> {
    let body = stdout.trim_end_matches('\n');
    match body.strip_suffix(END) {
        Some(before) if before.is_empty() || before.ends_with('\n') => Ok(before),
        _ => Err(format!(
            "its output ended before its end marker ({} bytes read): it was cut short (the transport keeps \
             1 MiB of an exec's output) or the script stopped early, so what it lists may be incomplete",
            stdout.len()
        )),
    }
}
/// Suffix the live table gets at the swap.
pub const OLD_SUFFIX: &str = "__old";
/// Suffix of the materialized view that carries rows written from the cut-over on.
pub const VIEW_SUFFIX: &str = "__rebuild_view";
/// Suffix of the staging table each partition is copied into first.
pub const STAGE_SUFFIX: &str = "__rebuild_stage";
/// The objects a rebuild makes beside the live table. `__new` is a name people use for their own
/// migrations, so a rebuild resumes, writes into or drops one of these only when its own `made`
/// receipt on the pod says it made them (see [`RebuildPlan::prepare_script`]).
pub const MADE_SUFFIXES: [&str; 3] = [VIEW_SUFFIX, NEW_SUFFIX, STAGE_SUFFIX];

/// The code a server answers a DROP, TRUNCATE or DETACH with when the table (or partition) is
/// larger than its `max_table_size_to_drop` (`max_partition_size_to_drop`):
/// `TABLE_SIZE_EXCEEDS_MAX_DROP_SIZE_LIMIT`. The rebuild then leaves the object, with an event.
pub const DROP_SIZE_LIMIT: u32 = 359;
/// The table, in the rebuilt table's database, that holds a rebuild's receipts.
pub const RECEIPTS_TABLE: &str = "clickhouse_schema_rebuild_receipts";
/// A backfill batch (partitions copied in one exec) closes at this many rows...
pub const BATCH_ROWS: u64 = 4_000_000;
/// ...or this many partitions: an exec's start costs about as much as copying 100,000 rows. Each
/// statement is bounded as a statement alone is, and the exec by one statement's bound per
/// partition, as each partition's copy in an exec of its own was (its one long statement is the
/// copy), so the size of a batch changes only how often progress is reported (an event per
/// partition once its batch ends), what a cut batch leaves to the next apply (the partitions
/// without receipts), and how long a stop that cannot be confirmed holds the lease.
pub const BATCH_PARTITIONS: usize = 16;
/// At most this many differing rows are listed by [`RebuildPlan::row_differences_script`].
pub const ROW_DIFFERENCES_SHOWN: usize = 10_000;
/// How many times verification reads both tables before it calls a difference one: an insert
/// writes the live table before its view writes the new one.
pub const VERIFY_READS: u32 = 3;

/// Clauses whose difference no ALTER can change.
const REBUILD_CLAUSES: &[&str] = &["ENGINE", "ORDER BY", "PARTITION BY", "PRIMARY KEY", "SAMPLE BY"];

/// The parts of an object's differences that only a rebuild can change, in report order, for a
/// table declared with `declared_order` as its `ORDER BY` (when known). A new `ORDER BY` that only
/// appends columns the live table lacks is not one of them: ClickHouse changes it with
/// `ALTER TABLE ... ADD COLUMN ..., MODIFY ORDER BY ...`. Nor is the `PRIMARY KEY` such an ALTER
/// leaves behind (the old sorting key, a strict prefix of the declared `ORDER BY`, where the
/// declaration names no primary key): the rows are sorted as declared and only the primary index
/// is shorter, so a rebuild for it would copy the whole table to change nothing a query sees.
pub fn rebuild_clauses<'d>(
    differences: &'d [DifferenceReport],
    declared_order: Option<&str>,
) -> Vec<&'d str> {
    let missing: BTreeSet<String> = differences
        .iter()
        .filter(|d| d.live.is_empty())
        .filter_map(|d| d.clause.strip_prefix("column "))
        .map(normalized)
        .collect();
    let order_by = differences.iter().find(|d| d.clause == "ORDER BY");
    let order_is_alter = order_by.is_none_or(|d| appends_only(&d.declared, &d.live, &missing));
    let declared_order = order_by.map(|d| d.declared.as_str()).or(declared_order);
    differences
        .iter()
        .filter(|d| REBUILD_CLAUSES.contains(&d.clause.as_str()))
        .filter(|d| !(d.clause == "ORDER BY" && order_is_alter))
        .filter(|d| {
            !(d.clause == "PRIMARY KEY"
                && d.declared.is_empty()
                && order_is_alter
                && declared_order.is_some_and(|order| strict_prefix(&d.live, order)))
        })
        .map(|d| d.clause.as_str())
        .collect()
}

/// Whether `object` (a verification report of a table declared with `declared_order` as its
/// `ORDER BY`, when known) differs from its declaration in a way only a rebuild changes.
pub fn needs_rebuild(object: &ObjectReport, declared_order: Option<&str>) -> bool {
    object.status == ObjectStatus::Differs
        && object.kind == "TABLE"
        && !rebuild_clauses(&object.differences, declared_order).is_empty()
}

/// Whether key `key`'s items are the first items of key `of`, and fewer.
pub(crate) fn strict_prefix(key: &str, of: &str) -> bool {
    let key = key_items(key);
    let of = key_items(of);
    !key.is_empty() && key.len() < of.len() && of[..key.len()] == key[..]
}

fn appends_only(declared: &str, live: &str, missing: &BTreeSet<String>) -> bool {
    let declared = key_items(declared);
    let live = key_items(live);
    declared.len() > live.len()
        && declared[..live.len()] == live[..]
        && declared[live.len()..].iter().all(|item| missing.contains(item))
}

/// A key expression's top-level items: `(a, b)`, `tuple(a, b)` and `a, b` are the same two.
pub(crate) fn key_items(text: &str) -> Vec<String> {
    let tokens: Vec<Token> = significant(text).collect();
    let mut inner: &[Token] = &tokens;
    if let [first, second, .., last] = inner
        && first.is_keyword(text, "tuple")
        && second.is_punct(text, "(")
        && last.is_punct(text, ")")
    {
        inner = &inner[2..inner.len() - 1];
    } else if let [first, .., last] = inner
        && first.is_punct(text, "(")
        && last.is_punct(text, ")")
        && closes_at_end(text, inner)
    {
        inner = &inner[1..inner.len() - 1];
    }
    let mut items = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for t in inner {
        if t.is_punct(text, "(") || t.is_punct(text, "[") {
            depth += 1;
        } else if t.is_punct(text, ")") || t.is_punct(text, "]") {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t.is_punct(text, ",") {
            items.push(std::mem::take(&mut current));
            continue;
        }
        current.push_str(&String::from_utf8_lossy(&t.value(text)));
    }
    if !current.is_empty() {
        items.push(current);
    }
    items
}

/// Whether the parenthesis opening `tokens` closes at its last token (not `(a) + (b)`).
fn closes_at_end(text: &str, tokens: &[Token]) -> bool {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        if t.is_punct(text, "(") {
            depth += 1;
        } else if t.is_punct(text, ")") {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return i == tokens.len() - 1;
            }
        }
    }
    false
}

fn normalized(name: &str) -> String {
    name.trim_matches('`').to_owned()
}

/// The plans of every `rebuild` entry of a validated config.
pub fn plans(config: &crate::config::ResolvedConfig) -> Result<Vec<RebuildPlan>, String> {
    config
        .rebuild
        .iter()
        .map(|(key, table)| {
            RebuildPlan::new(key, table, &config.statements, &config.client.database).map_err(|issues| {
                issues
                    .into_iter()
                    .map(|(path, why)| format!("rebuild['{key}']{path} {why}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            })
        })
        .collect()
}

/// Whether a column type (as `system.columns` prints it, or as declared) can carry a cut-over:
/// `Err` says why not.
pub fn cutover_type(column_type: &str) -> Result<CutoverKind, String> {
    let base = column_type.split('(').next().unwrap_or("").trim();
    match base {
        "DateTime" | "DateTime64" => Ok(CutoverKind::Time),
        "Int8" | "Int16" | "Int32" | "Int64" | "Int128" | "Int256" | "UInt8" | "UInt16" | "UInt32"
        | "UInt64" | "UInt128" | "UInt256" => Ok(CutoverKind::Number),
        "Date" | "Date32" => Err(format!(
            "is a {base} column: a cut-over on a day would hold the dual write until midnight; name a DateTime \
             column"
        )),
        _ => Err(format!(
            "has type {column_type}: a cut-over needs a DateTime or integer column (rows at or after it are \
             written to both tables, rows before it are copied)"
        )),
    }
}

/// How the cut-over is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutoverKind {
    /// A DateTime column: the server's time plus the delay.
    Time,
    /// An integer column: one more than the largest value.
    Number,
}

/// What an apply would rebuild, as `plan` reports it: a table allowed by the `rebuild` prop that
/// differs on some pods in a way only a rebuild changes, and whether the check step would refuse.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct PlannedRebuild {
    /// `database.table`, as the prop names it.
    pub table: String,
    /// Index of the statement that declares it.
    #[cfg_attr(feature = "napi", napi(ts_type = "number"))]
    pub statement_index: usize,
    /// The pods whose table would be rebuilt, in pod-list order.
    pub pods: Vec<String>,
    /// The parts that differ (as the check names them: `ORDER BY`, `ENGINE`, ...), from the
    /// first of those pods.
    pub differences: Vec<String>,
    /// The `E_REBUILD_REFUSED` message the apply would fail with, when its check step refuses
    /// (dependents, an old table in the way, ...); absent when the rebuild would go ahead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// What the `rebuild` prop allows for one table, with the statement that declares it.
#[derive(Debug, Clone)]
pub struct RebuildPlan {
    /// The table's database.
    pub database: String,
    /// The table's name.
    pub table: String,
    /// How the prop asks for it.
    pub config: RebuildTable,
    /// The declaring statement's index.
    pub statement_index: usize,
    /// `(columns) ENGINE ...` as declared, without the name and `ON CLUSTER`.
    body: String,
    /// The same with a `Replicated` engine reduced to its plain one (for the staging table).
    plain_body: String,
    /// The declared ENGINE clause.
    engine: String,
    /// Identifies what is rebuilt towards: receipts of another declaration are not this rebuild's.
    pub target: String,
}

/// What the validation of the `rebuild` prop found wrong with one entry, by its sub-path.
pub type PlanIssue = (String, String);

impl RebuildPlan {
    /// The plan for `key` (`database.table`) from the statements, or what is wrong with the entry.
    pub fn new(
        key: &str,
        config: &RebuildTable,
        statements: &[String],
        default_database: &str,
    ) -> Result<Self, Vec<PlanIssue>> {
        let mut declared: Option<(usize, &String)> = None;
        let mut later: Option<String> = None;
        for (index, sql) in statements.iter().enumerate() {
            match classify(sql, default_database) {
                StatementClass::Declares(d) if d.qualified_name() == key => {
                    if d.kind == ObjectKind::Table
                        && matches!(
                            d.form,
                            DeclarationForm::Create
                                | DeclarationForm::CreateIfNotExists
                                | DeclarationForm::CreateOrReplace
                        )
                    {
                        declared = Some((index, sql));
                        later = None;
                    } else {
                        declared = None;
                    }
                }
                StatementClass::Other { verb }
                    if declared.is_some() && changes_later(sql, default_database, &verb, key) =>
                {
                    later = Some(format!("statements[{index}] ({verb})"));
                }
                _ => {}
            }
        }
        let Some((statement_index, sql)) = declared else {
            return Err(vec![(
                String::new(),
                "names no table the statements create: a rebuild needs the table's CREATE TABLE statement"
                    .into(),
            )]);
        };
        if let Some(later) = later {
            return Err(vec![(
                String::new(),
                format!(
                    "is changed after its CREATE by {later}: a rebuild builds the table from its CREATE, so declare \
                     the table as it should end up there"
                ),
            )]);
        }
        let tokens: Vec<Token> = significant(sql).collect();
        let at = definition::after_name(sql, &tokens);
        let parsed = definition::parse(sql);
        let mut issues = Vec::new();
        let engine = parsed
            .clause("ENGINE")
            .map(|e| e.text.clone())
            .unwrap_or_default();
        match definition::engine_parts(&engine) {
            Some((engine, _)) if engine.ends_with("MergeTree") => {}
            other => issues.push((
                String::new(),
                format!(
                    "is declared with {}: a rebuild moves partitions, which only the MergeTree family has",
                    other.map_or_else(|| "no engine".to_owned(), |(e, _)| format!("ENGINE = {e}"))
                ),
            )),
        }
        match parsed
            .columns
            .iter()
            .find(|c| normalized(&c.name) == config.cutover_column)
        {
            None => issues.push((
                ".cutoverColumn".into(),
                format!(
                    "names no column of the declared table {key}: name a DateTime or integer column it declares"
                ),
            )),
            Some(column) => {
                let column_type = declared_type(&column.part.text);
                if let Err(why) = cutover_type(&column_type) {
                    issues.push((".cutoverColumn".into(), why));
                }
            }
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        let (database, table) = key.split_once('.').unwrap_or((default_database, key));
        let body = statement_body(sql, &tokens, at);
        let plain_body = plain_table_body(sql, &tokens, at);
        let mut hasher = Sha256::new();
        hasher.update(key.as_bytes());
        hasher.update([0]);
        hasher.update(body.as_bytes());
        let target = hex::encode(&hasher.finalize()[..8]);
        Ok(Self {
            database: database.to_owned(),
            table: table.to_owned(),
            config: config.clone(),
            statement_index,
            body,
            plain_body,
            engine,
            target,
        })
    }

    /// `database.table`, as messages name it.
    pub fn key(&self) -> String {
        format!("{}.{}", self.database, self.table)
    }

    /// The quoted name of the table with `suffix` (empty: the table itself).
    pub fn name(&self, suffix: &str) -> String {
        format!(
            "{}.{}",
            ident(&self.database),
            ident(&format!("{}{suffix}", self.table))
        )
    }

    fn names_literal(&self) -> String {
        ["", NEW_SUFFIX, OLD_SUFFIX, VIEW_SUFFIX, STAGE_SUFFIX]
            .iter()
            .map(|s| literal(&format!("{}{s}", self.table)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn receipts(&self) -> String {
        format!("{}.{}", ident(&self.database), ident(RECEIPTS_TABLE))
    }

    /// What a pod holds for this rebuild: its tables, replicas, columns, the objects that may read
    /// or write the table, and the receipts. Creates the receipts table, so it may only run where
    /// a rebuild is due. The copies of abandoned attempts are left out (no later attempt counts
    /// them, and a table restarted many times would fill the output's 1 MiB with them).
    pub fn inspect_script(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {receipts} (table_name String, target String, step String, source String, \
             partition String, rows UInt64, checksum UInt64, value String, cutover String, at DateTime DEFAULT now()) \
             ENGINE = MergeTree ORDER BY (table_name, target, step);\n\
             {reads}\
             SELECT 'receipt', step, source, partition, rows, checksum, value, cutover FROM {receipts} \
             WHERE table_name = {key} AND target = {target} AND NOT (step IN ('copied', 'attached') AND cutover IN \
             (SELECT value FROM {receipts} WHERE table_name = {key} AND target = {target} AND step = 'abandoned')) \
             FORMAT TSV;\n\
             SELECT 'made', '' FORMAT TSV;\n\
             SELECT DISTINCT 'made', target FROM {receipts} WHERE table_name = {key} AND step = 'made' AND value NOT IN \
             (SELECT value FROM {receipts} WHERE table_name = {key} AND step = 'released') FORMAT TSV;\n{end}",
            receipts = self.receipts(),
            reads = self.inspect_reads(),
            key = literal(&self.key()),
            target = literal(&self.target),
            end = end_statement(),
        )
    }

    /// The inspection without the receipts: only reads, for `plan`, which changes nothing on a
    /// pod (not even the receipts table) and needs what the check step refuses on, not where a
    /// resumed rebuild would start.
    pub fn plan_inspect_script(&self) -> String {
        format!("{}{}", self.inspect_reads(), end_statement())
    }

    /// The reads both inspections make.
    fn inspect_reads(&self) -> String {
        let db = literal(&self.database);
        let t = literal(&self.table);
        let new = literal(&format!("{}{NEW_SUFFIX}", self.table));
        let old = literal(&format!("{}{OLD_SUFFIX}", self.table));
        let ours = self.names_literal();
        format!(
            "SELECT 'table', name, engine, partition_key FROM system.tables WHERE database = {db} AND name IN ({ours}) FORMAT TSV;\n\
             SELECT 'replica', table, zookeeper_path FROM system.replicas WHERE database = {db} AND table IN ({t}, {new}, {old}) FORMAT TSV;\n\
             SELECT 'column', table, name, type, default_kind FROM system.columns WHERE database = {db} AND table IN ({t}, {new}, {old}) FORMAT TSV;\n\
             SELECT 'create', create_table_query FROM system.tables WHERE database = {db} AND name = {t} FORMAT TSV;\n\
             SELECT 'object', database, name, create_table_query FROM system.tables \
             WHERE database != 'system' AND NOT (database = {db} AND name IN ({ours})) \
             AND position(create_table_query, {t}) > 0 FORMAT TSV;\n\
             SELECT 'dictionary', name, source FROM system.dictionaries WHERE position(source, {t}) > 0 FORMAT TSV;\n\
             SELECT 'database', engine FROM system.databases WHERE name = {db} FORMAT TSV;\n"
        )
    }

    /// Creates the new table and the staging table on a pod (`IF NOT EXISTS`: a resumed rebuild
    /// finds them). `made` says which `made` receipt it writes first: with [`Made::Fresh`] (none
    /// of [`MADE_SUFFIXES`] exists on the pod) one with a value of its own, open until the
    /// swap's finish or an abandon releases it, after releasing the receipts an interrupted run
    /// left open, so that a table someone makes by those names later is never taken for this
    /// tool's; with [`Made::Adopt`] (objects an earlier version made, which wrote no such receipt)
    /// one for them.
    pub fn prepare_script(&self, made: Made) -> String {
        let insert = format!(
            "INSERT INTO {} (table_name, target, step, value) SELECT {}, {}, 'made', toString(rand64());\n",
            self.receipts(),
            literal(&self.key()),
            literal(&self.target),
        );
        let made = match made {
            Made::Recorded => String::new(),
            Made::Fresh => format!("{}{insert}", self.release_statement()),
            Made::Adopt => insert,
        };
        format!(
            "{made}CREATE TABLE IF NOT EXISTS {} {};\nCREATE TABLE IF NOT EXISTS {} {};\n",
            self.name(NEW_SUFFIX),
            self.body,
            self.name(STAGE_SUFFIX),
            self.plain_body,
        )
    }

    /// Releases every open `made` receipt of the table on a pod: what it named is gone (swapped
    /// in, dropped) or about to be.
    fn release_statement(&self) -> String {
        let key = literal(&self.key());
        format!(
            "INSERT INTO {receipts} (table_name, target, step, value) SELECT table_name, target, 'released', value \
             FROM {receipts} WHERE table_name = {key} AND step = 'made' AND value NOT IN \
             (SELECT value FROM {receipts} WHERE table_name = {key} AND step = 'released');\n",
            receipts = self.receipts(),
        )
    }

    /// Drops what this tool made for a rebuild towards another declaration of the table (its
    /// `made` receipt names another target): the view first, then the new and staging tables,
    /// and releases the receipt. That attempt's other receipts are keyed by its own target, so
    /// nothing of it is counted again.
    pub fn discard_script(&self) -> String {
        // Released before the drops: a script cut between them leaves objects with no receipt,
        // which the next apply refuses on, rather than a receipt that would vouch for whatever
        // someone makes by those names later.
        format!(
            "{}DROP TABLE IF EXISTS {};\nDROP TABLE IF EXISTS {};\nDROP TABLE IF EXISTS {};\n",
            self.release_statement(),
            self.name(VIEW_SUFFIX),
            self.name(NEW_SUFFIX),
            self.name(STAGE_SUFFIX),
        )
    }

    /// Records the cut-over on a pod and creates the view that writes every row at or after it
    /// into the new table.
    ///
    /// With `ahead` (the copied columns, on the pod that copies for its source), the rows at or
    /// after the cut-over that the live table holds already are copied first: the view carries
    /// only rows written after it exists, and the backfill only rows before the cut-over, so rows
    /// dated ahead (scheduled events, a skewed producer) would be in neither. The copy is the
    /// difference of the two tables and runs only while the view does not exist, so the script
    /// can run again (a retry, a resumed rebuild) without copying a row twice. With `sync` (a
    /// `Replicated` live table), the pod's replication queue of the live table is done first, so
    /// that rows written on the other replicas before their views are there.
    pub fn dual_write_script(
        &self,
        cutover: &Cutover,
        columns: &[String],
        ahead: Option<&[(String, Option<String>)]>,
        sync: bool,
    ) -> String {
        let list = column_list(columns);
        let ahead = ahead.map_or_else(String::new, |copied| {
            format!(
                "{}{}",
                if sync {
                    format!("SYSTEM SYNC REPLICA {};\n", self.name(""))
                } else {
                    String::new()
                },
                self.catch_up_script(
                    "",
                    NEW_SUFFIX,
                    "",
                    "",
                    &self.from(cutover),
                    copied,
                    true,
                    sync,
                    None
                )
            )
        });
        format!(
            "{receipt}{ahead}\
             CREATE MATERIALIZED VIEW IF NOT EXISTS {view} TO {new} AS SELECT {list} FROM {live} WHERE {column} >= {value};\n",
            receipt = self.receipt_insert("cutover", "", "", 0, 0, &cutover.value, &cutover.value),
            view = self.name(VIEW_SUFFIX),
            new = self.name(NEW_SUFFIX),
            live = self.name(""),
            column = ident(&self.config.cutover_column),
            value = cutover.sql(),
        )
    }

    /// Ends the dual write on a pod and nothing else: the view dropped (`SYNC` where the database
    /// drops lazily, see [`Self::drop_view_script`]), the new table and the receipts kept.
    pub fn stop_dual_write_script(&self, lazy_drop: bool) -> String {
        format!(
            "DROP TABLE IF EXISTS {}{};\n",
            self.name(VIEW_SUFFIX),
            if lazy_drop { " SYNC" } else { "" }
        )
    }

    /// Converts every live row's `columns` (name, declared type) as the view and the backfill
    /// will, and prints how many rows did; fails as the conversion fails on the first row that
    /// does not convert (see the dual write in the driver).
    pub fn convert_check_script(&self, columns: &[(String, String)]) -> String {
        // The converted values are used (hashed and summed): a modern server drops a column of a
        // subquery nothing reads, and with it the conversion.
        format!(
            "SELECT toString(count()), toString(sum(cityHash64({}))) FROM {} FORMAT TSV;\n",
            columns
                .iter()
                .map(|(name, to)| format!("CAST({} AS {to})", ident(name)))
                .collect::<Vec<_>>()
                .join(", "),
            self.name(""),
        )
    }

    /// The query that reads a cut-over for this table on a pod: the server's time plus the delay,
    /// or one more than the largest value (0 on an empty table).
    pub fn cutover_query(&self, kind: CutoverKind) -> String {
        match kind {
            CutoverKind::Time => format!(
                "SELECT toString(toUInt64(toUnixTimestamp(now())) + {}) FORMAT TSV;\n",
                self.config.cutover_delay_seconds
            ),
            CutoverKind::Number => format!(
                "SELECT toString(if(count() = 0, toInt64(0), toInt64(max({column})) + 1)) FROM {live} FORMAT TSV;\n",
                column = ident(&self.config.cutover_column),
                live = self.name(""),
            ),
        }
    }

    /// [`Self::partitions_query`] for the backfill of one source: for a `Replicated` live table
    /// (`sync`) the pod's replication queue is done first, so that parts another replica wrote
    /// and this one has not fetched yet are listed and copied, not left to verification.
    pub fn backfill_partitions_script(&self, live_key: &str, sync: bool) -> String {
        let sync = if sync {
            format!("SYSTEM SYNC REPLICA {};\n", self.name(""))
        } else {
            String::new()
        };
        format!("{sync}{}", self.partitions_query(live_key))
    }

    /// The live partitions on a source pod, with their rows, each with a literal of its value
    /// that the server reads back (the backfill selects a partition's rows with it, see
    /// `partition_filter`). `system.parts` prints a one-column key's value unquoted (`2026-11-01`,
    /// `a`, on 18.16 and 26.x alike), which as SQL is arithmetic or a name; so the literal is
    /// the key's value quoted by the server (`toString(tuple(..))`, one scan of the key's
    /// columns), matched to the partition by the printed text, which `toString` prints alike.
    pub fn partitions_query(&self, live_key: &str) -> String {
        let parts = format!(
            "SELECT partition_id, any(partition) AS text, sum(rows) AS rows FROM system.parts WHERE database = {} \
             AND table = {} AND active GROUP BY partition_id",
            literal(&self.database),
            literal(&self.table),
        );
        if live_key.trim().is_empty() {
            return format!(
                "SELECT partition_id, text, rows FROM ({parts}) ORDER BY partition_id FORMAT TSV;\n{}",
                end_statement()
            );
        }
        format!(
            "SELECT partition_id, if(lit = '', text, lit), rows FROM ({parts}) AS parts ANY LEFT JOIN (SELECT \
             toString(({live_key})) AS text, any(toString(tuple(({live_key})))) AS lit FROM {live} GROUP BY text) AS lits \
             USING text ORDER BY partition_id FORMAT TSV;\n{}",
            end_statement(),
            live = self.name(""),
        )
    }

    /// Copies one live partition's rows before the cut-over into the emptied staging table, and
    /// prints the staging table's partitions (the new table's) with their rows.
    pub fn stage_script(
        &self,
        partition: &LivePartition,
        live_key: &str,
        cutover: &Cutover,
        columns: &[String],
    ) -> String {
        format!(
            "{}SELECT partition_id, sum(rows) FROM system.parts WHERE database = {} AND table = {} \
             AND active GROUP BY partition_id ORDER BY partition_id FORMAT TSV;\n{}",
            self.staged_copy(partition, live_key, cutover, columns),
            literal(&self.database),
            literal(&format!("{}{STAGE_SUFFIX}", self.table)),
            end_statement(),
        )
    }

    /// Empties the staging table, then copies into it one live partition's rows before the
    /// cut-over.
    fn staged_copy(
        &self,
        partition: &LivePartition,
        live_key: &str,
        cutover: &Cutover,
        columns: &[String],
    ) -> String {
        let list = column_list(columns);
        format!(
            "TRUNCATE TABLE {stage};\n\
             INSERT INTO {stage} ({list}) SELECT {list} FROM {live} WHERE {filter} AND {column} < {value};\n",
            stage = self.name(STAGE_SUFFIX),
            live = self.name(""),
            filter = partition_filter(live_key, &partition.value),
            column = ident(&self.config.cutover_column),
            value = cutover.sql(),
        )
    }

    /// When the new table is partitioned like the live one (the common case), the whole copy of one
    /// live partition in one exec: staged, moved under the same partition id, and its two receipts
    /// written in one insert; prints the rows copied. (Otherwise [`Self::stage_script`] and
    /// [`Self::attach_script`], since one live partition may become several.)
    pub fn copy_script(
        &self,
        source: &str,
        partition: &LivePartition,
        live_key: &str,
        cutover: &Cutover,
        columns: &[String],
    ) -> String {
        let id = literal(&partition.id);
        format!(
            "{copy}ALTER TABLE {new} ATTACH PARTITION ID {id} FROM {stage};\n\
             INSERT INTO {receipts} (table_name, target, step, source, partition, rows, checksum, value, cutover) \
             SELECT {key}, {target}, s, {source}, {id}, n, 0, if(s = 'attached', {id}, ''), {cut} \
             FROM (SELECT count() AS n FROM {stage}) ARRAY JOIN ['attached', 'copied'] AS s;\n\
             SELECT {id}, count() FROM {stage} FORMAT TSV;\n",
            copy = self.staged_copy(partition, live_key, cutover, columns),
            stage = self.name(STAGE_SUFFIX),
            new = self.name(NEW_SUFFIX),
            receipts = self.receipts(),
            key = literal(&self.key()),
            target = literal(&self.target),
            source = literal(source),
            cut = literal(&cutover.value),
        )
    }

    /// Moves the staged partitions not moved before into the new table, a receipt after each, and
    /// the receipt of the whole live partition last.
    pub fn attach_script(
        &self,
        source: &str,
        cutover: &Cutover,
        partition: &LivePartition,
        staged: &[(String, u64)],
        done: &BTreeSet<String>,
    ) -> String {
        let mut script = String::new();
        for (id, rows) in staged.iter().filter(|(id, _)| !done.contains(id)) {
            script.push_str(&format!(
                "ALTER TABLE {} ATTACH PARTITION ID {} FROM {};\n",
                self.name(NEW_SUFFIX),
                literal(id),
                self.name(STAGE_SUFFIX)
            ));
            script.push_str(&self.receipt_insert(
                "attached",
                source,
                &partition.id,
                *rows,
                0,
                id,
                &cutover.value,
            ));
        }
        let rows: u64 = staged.iter().map(|(_, r)| r).sum();
        script.push_str(&self.receipt_insert("copied", source, &partition.id, rows, 0, "", &cutover.value));
        script
    }

    /// Per live partition of `table_suffix` (the live table or the new one), in two ranges: the
    /// rows before the cut-over (the backfill's) and those from the cut-over up to `bound` (the
    /// view's; every row from the cut-over on when `None`), each as rows and a checksum of
    /// `columns` (none: 0; the live or old table's values converted to the new table's types,
    /// so both sides hash alike). Under a `Replicated` table (`sync`), waits for its replication
    /// queue first. With `partitions` (their text, as this script prints them), only those are
    /// read: a filter on the partition key, which the server checks before it reads the other
    /// columns.
    #[allow(clippy::too_many_arguments)]
    pub fn counts_script(
        &self,
        table_suffix: &str,
        live_key: &str,
        columns: &[HashedColumn],
        sync: bool,
        cutover: &Cutover,
        bound: Option<&Cutover>,
        partitions: Option<&[String]>,
    ) -> String {
        let before = self.before(cutover);
        // The live (or old) table's values of a converted column are converted first.
        let old_side = table_suffix.is_empty() || table_suffix == OLD_SUFFIX;
        let values: Vec<String> = columns
            .iter()
            .map(|c| {
                let value = if old_side && c.converted {
                    format!("CAST({} AS {})", ident(&c.name), c.ty)
                } else {
                    ident(&c.name)
                };
                if hashes_directly(&c.ty) {
                    value
                } else {
                    format!("toString({value})")
                }
            })
            .collect();
        let after = match bound {
            Some(bound) => format!("{} AND {}", self.from(cutover), self.before(bound)),
            None => self.from(cutover),
        };
        let checksum = |condition: &str| {
            if columns.is_empty() {
                "toUInt64(0)".to_owned()
            } else {
                format!("sumWithOverflowIf({}, {condition})", row_hash(&values))
            }
        };
        let key = partition_text(live_key);
        let sync = if sync {
            format!("SYSTEM SYNC REPLICA {};\n", self.name(table_suffix))
        } else {
            String::new()
        };
        let only = partitions.map_or_else(String::new, |partitions| {
            format!(
                " WHERE {key} IN ({})",
                partitions
                    .iter()
                    .map(|p| literal(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
        format!(
            "{sync}SELECT {key} AS p, countIf({before}), {}, countIf({after}), {} FROM {table}{only} GROUP BY p ORDER \
             BY p FORMAT TSV;\n{end}",
            checksum(&before),
            checksum(&after),
            table = self.name(table_suffix),
            end = end_statement(),
        )
    }

    /// How many mutations of the old table have not finished (an `ALTER TABLE ... UPDATE` or
    /// `DELETE` issued on the live table before the RENAME goes on in the old one): one `m` line.
    /// Their rows read as they were before it, so the table holds them so too.
    pub fn pending_mutations_query(&self) -> String {
        format!(
            "SELECT 'm', toString(count()) FROM system.mutations WHERE database = {} AND table = {} AND NOT is_done \
             FORMAT TSV;\n{}",
            literal(&self.database),
            literal(&format!("{}{OLD_SUFFIX}", self.table)),
            end_statement(),
        )
    }

    /// The partitions of the old table (their text, as [`Self::counts_script`] prints them, one
    /// `p` line each) holding a part made since the dual write at `cutover` began on the pod (its
    /// `cutover` receipt; every partition when there is none): an insert, a merge, a mutation or
    /// a TTL. Every other partition is as it was before the backfill copied it, so only these
    /// need their rows hashed after the swap. Parts made within 5 s before the receipt count too
    /// (a part's time is its directory's, in whole seconds).
    ///
    /// A partition counts whole, by its id: a part that changes rows without holding them (a
    /// lightweight update's patch part on 25.7 and later) marks the rows of its partition. Parts
    /// merged away since are read too (a merge leaves a newer part in the partition anyway).
    pub fn changed_partitions_query(&self, live_key: &str, cutover: &Cutover) -> String {
        format!(
            "SELECT DISTINCT 'p', {key} FROM {old} WHERE _part IN (SELECT name FROM system.parts WHERE database = {db} \
             AND table = {old_name} AND partition_id IN (SELECT partition_id FROM system.parts WHERE database = {db} \
             AND table = {old_name} AND modification_time + 5 >= (SELECT min(at) FROM {receipts} WHERE table_name = \
             {table_key} AND step = 'cutover' AND cutover = {cut}))) FORMAT TSV;\n{end}",
            key = partition_text(live_key),
            old = self.name(OLD_SUFFIX),
            db = literal(&self.database),
            old_name = literal(&format!("{}{OLD_SUFFIX}", self.table)),
            receipts = self.receipts(),
            table_key = literal(&self.key()),
            cut = literal(&cutover.value),
            end = end_statement(),
        )
    }

    /// The query that reads the bound up to which verification compares the rows the view
    /// carries: the server's time less the delay (a row dated earlier is taken to have been
    /// written), or the live table's largest integer plus one. Rows from it on may still be on
    /// their way to either table.
    pub fn bound_query(&self, kind: CutoverKind) -> String {
        match kind {
            CutoverKind::Time => format!(
                "SELECT toString(toInt64(toUnixTimestamp(now())) - {}) FORMAT TSV;\n",
                self.config.cutover_delay_seconds
            ),
            CutoverKind::Number => self.cutover_query(kind),
        }
    }

    /// Copies into `into` (a table suffix) the rows of one live partition of `from` in `range`
    /// (a condition on the cut-over column) that `into` lacks, each as many times as `from` holds
    /// it more often: the difference of the two as multisets, so running it again copies nothing
    /// more, and two equal rows stay two. `columns` are the copied columns, each with the type to
    /// convert `from`'s values to when the two tables' types differ. Deduplication of inserts is
    /// off for it: a `Replicated` table would drop a copy equal to an earlier block.
    #[allow(clippy::too_many_arguments)]
    pub fn catch_up_script(
        &self,
        from: &str,
        into: &str,
        partition: &str,
        live_key: &str,
        range: &str,
        columns: &[(String, Option<String>)],
        only_without_view: bool,
        sync_into: bool,
        against: Option<&str>,
    ) -> String {
        let filter = key_filter(live_key, partition);
        let no_view = only_without_view.then(|| {
            format!(
                "(SELECT count() FROM system.tables WHERE database = {} AND name = {}) = 0",
                literal(&self.database),
                literal(&format!("{}{VIEW_SUFFIX}", self.table)),
            )
        });
        // The difference is taken against `against` when given (a snapshot of `into`, see
        // [`Self::snapshot_script`]): rows written to `into` since would hide equal ones `from`
        // alone holds.
        let (grouped, names) = self.difference(from, against.unwrap_or(into), &filter, range, columns);
        let list = names.join(", ");
        let difference = format!("{grouped} HAVING __clickhouse_schema_n > 0");
        // How many rows it copies, first (a catch-up reports them; the rows dated ahead do not).
        let count = if only_without_view {
            String::new()
        } else {
            format!("SELECT toString(sum(__clickhouse_schema_n)) FROM ({difference}) FORMAT TSV;\n")
        };
        // A `Replicated` table written on other replicas too: what they wrote is fetched first, or
        // the difference would copy their rows again.
        let sync = if sync_into {
            format!("SYSTEM SYNC REPLICA {};\n", self.name(into))
        } else {
            String::new()
        };
        let guard = no_view.map_or_else(String::new, |no_view| format!(" WHERE {no_view}"));
        format!(
            "{sync}{count}SET insert_deduplicate = 0;\nINSERT INTO {into} ({columns}) SELECT {list} FROM ({difference}) \
             ARRAY JOIN range(toUInt64(__clickhouse_schema_n)) AS __clickhouse_schema_i{guard};\n",
            into = self.name(into),
            columns = columns
                .iter()
                .map(|(n, _)| ident(n))
                .collect::<Vec<_>>()
                .join(", "),
        )
    }

    /// The rows of `from` and `into` (table suffixes) matching `filter` and `range`, grouped by
    /// every copied column with how many more times `from` holds each (`__clickhouse_schema_n`,
    /// negative where `into` holds it more often); and the aliases of the columns. `columns` as
    /// [`Self::catch_up_script`] takes them.
    fn difference(
        &self,
        from: &str,
        into: &str,
        filter: &str,
        range: &str,
        columns: &[(String, Option<String>)],
    ) -> (String, Vec<String>) {
        let names: Vec<String> = (0..columns.len())
            .map(|i| format!("__clickhouse_schema_c{i}"))
            .collect();
        let aliased = |cast: bool| {
            columns
                .iter()
                .zip(&names)
                .map(|((name, to), alias)| match to {
                    Some(to) if cast => format!("CAST({} AS {to}) AS {alias}", ident(name)),
                    _ => format!("{} AS {alias}", ident(name)),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let list = names.join(", ");
        let grouped = format!(
            "SELECT {list}, sum(__clickhouse_schema_side) AS __clickhouse_schema_n FROM (SELECT {from_cols}, \
             toInt64(1) AS __clickhouse_schema_side FROM {from} WHERE {filter} AND {range} UNION ALL SELECT \
             {into_cols}, toInt64(-1) AS __clickhouse_schema_side FROM {into} WHERE {filter} AND {range}) GROUP BY \
             {list}",
            into = self.name(into),
            from = self.name(from),
            from_cols = aliased(true),
            into_cols = aliased(false),
        );
        (grouped, names)
    }

    /// The rows from the cut-over up to `bound` (every row from it on when `None`) that the live
    /// table and the new one do not hold equally often, on a pod that holds both (the one
    /// source of a target): one `d` line each, `<hash of the row>:<live less new>`, at most
    /// [`ROW_DIFFERENCES_SHOWN`]. Verification reads it twice a moment apart when writes never
    /// paused: the view writes a row within the insert that writes the live table, so a row
    /// that differs in both reads is one the view missed or wrote twice, where counts read
    /// while rows keep coming could not tell (a missing row hidden by one more written
    /// between the reads). The queue of each `Replicated` one (`sync_live`, `sync_new`) is done
    /// first.
    pub fn row_differences_script(
        &self,
        columns: &[(String, Option<String>)],
        cutover: &Cutover,
        bound: Option<&Cutover>,
        sync_live: bool,
        sync_new: bool,
    ) -> String {
        let range = match bound {
            Some(bound) => format!("{} AND {}", self.from(cutover), self.before(bound)),
            None => self.from(cutover),
        };
        let (grouped, names) = self.difference("", NEW_SUFFIX, "1", &range, columns);
        let sync = [(sync_live, ""), (sync_new, NEW_SUFFIX)]
            .into_iter()
            .filter(|(sync, _)| *sync)
            .map(|(_, suffix)| format!("SYSTEM SYNC REPLICA {};\n", self.name(suffix)))
            .collect::<String>();
        // As text: the aliases' types are not known here, and `cityHash64` takes text of any.
        let hash = row_hash(&names.iter().map(|n| format!("toString({n})")).collect::<Vec<_>>());
        // The rows the new table holds more often first (they fail verification), one more than
        // are shown, so that a list cut short says so.
        format!(
            "{sync}SELECT 'd', concat(toString({hash} AS __clickhouse_schema_h), ':', toString(__clickhouse_schema_n)) \
             FROM ({grouped}) WHERE __clickhouse_schema_n != 0 ORDER BY __clickhouse_schema_n, __clickhouse_schema_h \
             LIMIT {} FORMAT TSV;\n{end}",
            ROW_DIFFERENCES_SHOWN + 1,
            end = end_statement(),
        )
    }

    /// Whether the rows of the old table and of the new one can be compared one by one after the
    /// swap: [`Self::copies_differences`], and no TTL of either rewrites rows
    /// ([`ttl_rewrites_rows`]; `live_create` is the live table's CREATE as the server prints it).
    pub fn compares_rows(&self, live_engine: &str, live_create: Option<&str>) -> bool {
        self.copies_differences(live_engine)
            && !ttl_rewrites_rows(&self.body)
            && !live_create.is_some_and(ttl_rewrites_rows)
    }

    /// Whether the rows of the two tables can be copied as their difference (see
    /// [`Self::catch_up_script`]): only when both engines keep every row as written. A
    /// `SummingMergeTree`, `ReplacingMergeTree`, `CollapsingMergeTree` or `AggregatingMergeTree`
    /// folds rows when parts merge (and on insert), so its counts fall, and rows copied as "missing"
    /// would be folded in twice (sums doubled, a replaced version back).
    pub fn copies_differences(&self, live_engine: &str) -> bool {
        let plain = |engine: &str| matches!(engine, "MergeTree" | "ReplicatedMergeTree");
        plain(&plan_engine_name(&self.engine)) && plain(live_engine)
    }

    /// The condition on the cut-over column of the rows before the cut-over.
    pub fn before(&self, cutover: &Cutover) -> String {
        format!("{} < {}", ident(&self.config.cutover_column), cutover.sql())
    }

    /// The condition on the cut-over column of the rows at or after the cut-over.
    pub fn from(&self, cutover: &Cutover) -> String {
        format!("{} >= {}", ident(&self.config.cutover_column), cutover.sql())
    }

    /// The swap on one pod with no snapshot: [`Self::drop_view_script`] then
    /// [`Self::rename_script`] (the rest of a replica set's swap an earlier apply cut short, whose
    /// old table is compared with the whole table).
    pub fn swap_script(&self, cutover: &str, pod: &str, lazy_drop: bool) -> String {
        format!(
            "{}{}",
            self.drop_view_script(cutover, pod, lazy_drop),
            self.rename_script(cutover, pod)
        )
    }

    /// The first part of the swap on one pod: the view goes (after the rename it would write into
    /// the missing `__new`). From then on the pod's inserts reach the live table only, until its
    /// RENAME; the copy after the swap brings them. On a replica set every pod drops its view
    /// before any renames, so the new table stands still for [`Self::snapshot_script`].
    ///
    /// A `swapping` receipt goes first: a script stopped between its RENAME and its last
    /// statement (a cancel's `KILL QUERY`, a killed process) leaves `t__old` with rows only it
    /// holds and no `swapped` receipt, and the next apply must still know it for a swap of this
    /// pod to finish (see [`Self::open_swaps_query`]).
    ///
    /// With `lazy_drop` (see [`Inspection::drops_lazily`]) the drop waits (`SYNC`) for the
    /// inserts under way through the view: an `Atomic` database drops a table once no query uses
    /// it, and returns at once, so such an insert could still write into the new table after
    /// its snapshot. (An `Ordinary` one, 18.16's, drops under an exclusive lock, which waits.)
    pub fn drop_view_script(&self, cutover: &str, pod: &str, lazy_drop: bool) -> String {
        format!(
            "{}DROP TABLE IF EXISTS {}{};\n",
            self.receipt_insert("swapping", pod, "", 0, 0, "", cutover),
            self.name(VIEW_SUFFIX),
            if lazy_drop { " SYNC" } else { "" },
        )
    }

    /// The pod's replication queue of a `Replicated` new table, done.
    pub fn sync_new_script(&self) -> String {
        format!("SYSTEM SYNC REPLICA {};\n", self.name(NEW_SUFFIX))
    }

    /// The new table's partitions on the pod that takes its snapshot, one `p` line each; a
    /// `Replicated` new table's queue done first (`sync`), so that the pod holds what the other
    /// replicas wrote before their views were dropped.
    pub fn snapshot_partitions_query(&self, sync: bool) -> String {
        let sync = if sync {
            self.sync_new_script()
        } else {
            String::new()
        };
        format!(
            "{sync}SELECT DISTINCT 'p', partition_id FROM system.parts WHERE database = {} AND table = {} AND active \
             FORMAT TSV;\n{}",
            literal(&self.database),
            literal(&format!("{}{NEW_SUFFIX}", self.table)),
            end_statement(),
        )
    }

    /// The new table's rows as they stand before the RENAME, into the emptied staging table (its
    /// `partitions`, as [`Self::snapshot_partitions_query`] read them, by hard links: no row is
    /// copied), and a `snapshot` receipt. After the swap the old table is compared with this
    /// snapshot, not with the table, where a row written since, equal in every column to one the
    /// old table alone holds, would hide it. Nothing of the rebuild's writes the new table between
    /// the views' drop and the RENAME; the script prints both tables' rows (`n` lines: the
    /// snapshot's, then the new table's) so that the driver swaps only when they are equal (a
    /// partition made or dropped since the list was read, a foreign writer, would change what
    /// the comparison takes for missing).
    ///
    /// The staging table's merges stop first: the snapshot's parts are hard links to the new
    /// table's, and a merge would write them again (more disk until the finish drops the stage)
    /// or apply the declaration's TTL to them (rows it deletes or rolls up would read as missing
    /// and be copied). A server restart lets them merge again, which costs only the disk.
    pub fn snapshot_script(&self, partitions: &[String], cutover: &str, pod: &str) -> String {
        let stage = self.name(STAGE_SUFFIX);
        let new = self.name(NEW_SUFFIX);
        let mut script = format!("TRUNCATE TABLE {stage};\nSYSTEM STOP MERGES {stage};\n");
        for id in partitions {
            script.push_str(&format!(
                "ALTER TABLE {stage} REPLACE PARTITION ID {} FROM {new};\n",
                literal(id)
            ));
        }
        script.push_str(&format!(
            "SELECT 'n', toString(count()) FROM {stage} FORMAT TSV;\nSELECT 'n', toString(count()) FROM {new} FORMAT TSV;\n"
        ));
        script.push_str(&self.receipt_insert("snapshot", pod, "", 0, 0, "", cutover));
        script.push_str(&end_statement());
        script
    }

    /// The last part of the swap on one pod: one RENAME and the `swapped` receipt. The old table
    /// stays until the rows that reached it after their partition was verified are copied (see
    /// [`Self::catch_up_script`] and [`Self::finish_script`]), and the staging table (the
    /// snapshot) with it; the `made` receipt stays open until then, so that a later apply finds a
    /// swap cut short after its RENAME and finishes it. The `swapped` receipt names the pod and the
    /// cut-over, so a later rebuild of the same declaration (the table made again by hand since)
    /// does not take that finished attempt for one to resume. It stays the one that says the
    /// RENAME happened: a script stopped before it leaves the pod due, and the rebuild resumes
    /// there.
    pub fn rename_script(&self, cutover: &str, pod: &str) -> String {
        format!(
            "RENAME TABLE {live} TO {old}, {new} TO {live};\n{swapped}",
            live = self.name(""),
            old = self.name(OLD_SUFFIX),
            new = self.name(NEW_SUFFIX),
            swapped = self.receipt_insert("swapped", pod, "", 0, 0, "", cutover),
        )
    }

    /// The receipt that the copies after the swap on `pod` begin: an apply that finishes the
    /// swap after it compares with the whole table, since the copies are not in the snapshot
    /// (see `finish_interrupted_swaps` in the driver).
    pub fn copying_receipt(&self, cutover: &str, pod: &str) -> String {
        self.receipt_insert("copying", pod, "", 0, 0, "", cutover)
    }

    /// The staging table's partitions on the pod, one `p` line each (none when it is gone).
    pub fn stage_partitions_query(&self) -> String {
        format!(
            "SELECT DISTINCT 'p', partition_id FROM system.parts WHERE database = {} AND table = {} AND active \
             FORMAT TSV;\n{}",
            literal(&self.database),
            literal(&format!("{}{STAGE_SUFFIX}", self.table)),
            end_statement(),
        )
    }

    /// Empties the staging table by detaching its `partitions` (a server refuses to DROP or
    /// TRUNCATE a table larger than its `max_table_size_to_drop`, 50 GB by default, and after the
    /// swap the stage holds a snapshot of the whole table; a DETACH is limited only per
    /// partition, by `max_partition_size_to_drop`, and the DROP of [`Self::finish_script`] then
    /// removes the detached parts with the table). Its rows are the table's, by hard links, so
    /// none is lost. Detaching a partition already gone does nothing, so the script can run
    /// again.
    pub fn empty_stage_script(&self, partitions: &[String]) -> String {
        partitions
            .iter()
            .map(|id| {
                format!(
                    "ALTER TABLE {} DETACH PARTITION ID {};\n",
                    self.name(STAGE_SUFFIX),
                    literal(id)
                )
            })
            .collect()
    }

    /// Ends the swap on a pod once the old table's late rows are copied: drops the old table
    /// unless it is kept (`keepOld`, or `keep`: rows nobody can place are left in it), and records
    /// a `finished` receipt, so that a later apply does not take a kept old table for one whose
    /// rows still wait (see [`Self::leftovers_query`]).
    pub fn finish_script(&self, cutover: &str, pod: &str, keep: bool) -> String {
        // The staging table too: a swap cut short after its RENAME may have left it.
        let drop = if self.config.keep_old || keep {
            format!("DROP TABLE IF EXISTS {};\n", self.name(STAGE_SUFFIX))
        } else {
            format!(
                "DROP TABLE IF EXISTS {};\nDROP TABLE IF EXISTS {};\n",
                self.name(STAGE_SUFFIX),
                self.name(OLD_SUFFIX)
            )
        };
        // The receipts first, for the reason `discard_script` gives. `swapped` too: a swap whose
        // script stopped after its RENAME wrote only `swapping`, and what reads whether an attempt
        // swapped on a pod reads `swapped`.
        format!(
            "{}{}{}{drop}",
            self.receipt_insert("swapped", pod, "", 0, 0, "", cutover),
            self.receipt_insert("finished", pod, "", 0, 0, "", cutover),
            self.release_statement()
        )
    }

    /// Which of `<table>__old` and `<table>__new` exist on a pod, one `left` line each: a swap
    /// cut short left one of them there (see `finish_interrupted_swaps` in the driver).
    pub fn leftovers_query(&self) -> String {
        format!(
            "SELECT 'left', name FROM system.tables WHERE database = {} AND name IN ({}, {}) FORMAT TSV;\n{}",
            literal(&self.database),
            literal(&format!("{}{OLD_SUFFIX}", self.table)),
            literal(&format!("{}{NEW_SUFFIX}", self.table)),
            end_statement()
        )
    }

    /// Which of the objects a rebuild makes (view, new table, staging table) exist on a pod, one
    /// `left` line each.
    pub fn made_objects_query(&self) -> String {
        format!(
            "SELECT 'left', name FROM system.tables WHERE database = {} AND name IN ({}) FORMAT TSV;\n{}",
            literal(&self.database),
            MADE_SUFFIXES
                .iter()
                .map(|suffix| literal(&format!("{}{suffix}", self.table)))
                .collect::<Vec<_>>()
                .join(", "),
            end_statement()
        )
    }

    /// The cut-overs of the swaps on `pod` that no `finished` receipt closed (of any declaration:
    /// the user may have changed it since), one `swap` line each. A `swapping` receipt counts: on a
    /// pod that holds `t__old`, its RENAME happened even when the script stopped before `swapped`.
    /// An abandoned attempt's does not: its script stopped before the RENAME, and the attempt was
    /// dropped.
    pub fn open_swaps_query(&self, pod: &str) -> String {
        format!(
            "SELECT DISTINCT 'swap', cutover FROM {receipts} WHERE table_name = {key} AND step IN ('swapping', 'swapped') AND \
             source = {pod} AND cutover NOT IN (SELECT cutover FROM {receipts} WHERE table_name = {key} AND \
             step = 'finished' AND source = {pod}) AND cutover NOT IN (SELECT value FROM {receipts} WHERE \
             table_name = {key} AND step = 'abandoned') FORMAT TSV;\n{end}",
            receipts = self.receipts(),
            key = literal(&self.key()),
            pod = literal(pod),
            end = end_statement(),
        )
    }

    /// The partitions of the old table, as the text of its partition key `old_key` (what
    /// [`Self::catch_up_script`] filters on), one `p` line each; one empty one for an
    /// unpartitioned table.
    pub fn old_partitions_query(&self, old_key: &str) -> String {
        let key = if old_key.trim().is_empty() {
            "''".to_owned()
        } else {
            partition_text(old_key)
        };
        format!(
            "SELECT DISTINCT 'p', {key} FROM {} FORMAT TSV;\n{}",
            self.name(OLD_SUFFIX),
            end_statement()
        )
    }

    /// Drops what a rebuild that must start over left: the view first, then the new and staging
    /// tables; the receipt marks `cutover` as abandoned, so the next apply takes a new one.
    pub fn abandon_script(&self, cutover: &Cutover) -> String {
        format!("{}{}", self.discard_script(), self.abandoned_receipt(cutover))
    }

    /// The `abandoned` receipt of [`Self::abandon_script`] by itself (after a DROP the server
    /// refused for the table's size).
    pub fn abandoned_receipt(&self, cutover: &Cutover) -> String {
        self.receipt_insert("abandoned", "", "", 0, 0, &cutover.value, &cutover.value)
    }

    /// The declared ENGINE clause.
    pub fn engine_text(&self) -> &str {
        &self.engine
    }

    /// One receipt row. `cutover` ties a copy's receipts to the cut-over it copied up to: after
    /// an abandoned rebuild, the next one (with a new cut-over) counts none of them.
    #[allow(clippy::too_many_arguments)]
    fn receipt_insert(
        &self,
        step: &str,
        source: &str,
        partition: &str,
        rows: u64,
        checksum: u64,
        value: &str,
        cutover: &str,
    ) -> String {
        format!(
            "INSERT INTO {} (table_name, target, step, source, partition, rows, checksum, value, cutover) VALUES ({}, {}, {}, {}, {}, {rows}, {checksum}, {}, {});\n",
            self.receipts(),
            literal(&self.key()),
            literal(&self.target),
            literal(step),
            literal(source),
            literal(partition),
            literal(value),
            literal(cutover),
        )
    }
}

/// The name of an ENGINE clause's engine (`ReplicatedMergeTree('/p', '{replica}')` ->
/// `ReplicatedMergeTree`).
fn plan_engine_name(engine: &str) -> String {
    definition::engine_parts(engine)
        .map(|(name, _)| name)
        .unwrap_or_default()
}

/// The type of a declared column entry (`at DateTime('UTC') DEFAULT now()` -> `DateTime('UTC')`).
fn declared_type(entry: &str) -> String {
    let tokens: Vec<Token> = significant(entry).collect();
    let Some(first) = tokens.get(1) else {
        return String::new();
    };
    let mut end = first.end;
    if tokens.get(2).is_some_and(|t| t.is_punct(entry, "(")) {
        let mut depth = 0usize;
        for t in &tokens[2..] {
            if t.is_punct(entry, "(") {
                depth += 1;
            } else if t.is_punct(entry, ")") {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    end = t.end;
                    break;
                }
            }
        }
    }
    entry[first.start..end].to_owned()
}

/// One hash of a row's `values` (expressions), each hashed by itself first: a NULL anywhere
/// would make `cityHash64` of them all NULL, and a sum of such hashes NULL.
fn row_hash(values: &[String]) -> String {
    format!(
        "cityHash64({})",
        values
            .iter()
            .enumerate()
            .map(|(i, value)| format!("ifNull(cityHash64({value}), {i})"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn column_list(columns: &[String]) -> String {
    columns.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ")
}

/// The partition verification names an unpartitioned table's one partition.
const UNPARTITIONED: &str = "tuple()";

/// The text the partition of a NULL key (a `Nullable` key on 26.x, `allow_nullable_key`) is
/// counted under, as TSV prints a NULL: `toString` of NULL is NULL, which no `=` matches, so its
/// late rows were counted but never copied. A key whose text is this very string shares it.
const NULL_PARTITION: &str = "\\N";

/// A row's partition as text, which the counts print and the catch-up's filter compares with
/// (`key_filter`).
fn partition_text(live_key: &str) -> String {
    if live_key.trim().is_empty() {
        format!("'{UNPARTITIONED}'")
    } else {
        format!("ifNull(toString(({live_key})), {})", literal(NULL_PARTITION))
    }
}

/// The rows of the live partition verification printed as `partition` (the key as text), or
/// every row for an unpartitioned table (or an empty `partition`: the whole table).
fn key_filter(live_key: &str, partition: &str) -> String {
    if live_key.trim().is_empty() || partition.is_empty() {
        "1".to_owned()
    } else {
        format!("{} = {}", partition_text(live_key), literal(partition))
    }
}

/// `(<partition key>) = <value>` (a literal from [`RebuildPlan::partitions_query`]), `1` for an
/// unpartitioned table, and `isNull(..)` for the partition of a `Nullable` key's NULL, which
/// `= NULL` would not match (the server prints it `(NULL)` quoted, and `\N` or `ᴺᵁᴸᴸ` when the
/// literal is missing).
fn partition_filter(live_key: &str, value: &str) -> String {
    if live_key.trim().is_empty() {
        "1".to_owned()
    } else if matches!(value, "(NULL)" | "NULL" | "\\N" | "ᴺᵁᴸᴸ") {
        format!("isNull(({live_key}))")
    } else {
        format!("({live_key}) = {value}")
    }
}

/// The `made` receipt a prepare writes (see [`RebuildPlan::prepare_script`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Made {
    /// The pod has one open for these objects already.
    Recorded,
    /// None of the objects exists: a new one, after releasing any left open.
    Fresh,
    /// Objects an earlier version made, with no receipt: one for them.
    Adopt,
}

/// The second fields of the lines of a script's output that start with `tag` (the cut-overs of
/// [`RebuildPlan::open_swaps_query`], the partitions of [`RebuildPlan::old_partitions_query`]).
pub fn parse_tagged(stdout: &str, tag: &str) -> Result<Vec<String>, String> {
    complete(stdout)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let fields: Vec<String> = line.split('\t').map(unescape).collect();
            match fields.as_slice() {
                [first, value] if first == tag => Ok(value.clone()),
                _ => Err(format!(
                    "an unexpected line: {}",
                    line.chars().take(80).collect::<String>()
                )),
            }
        })
        .collect()
}

/// What [`RebuildPlan::row_differences_script`] printed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowDifferences {
    /// Each differing row's hash, with how many more times the live table holds it (negative:
    /// the new table holds it more often).
    pub rows: BTreeMap<u64, i64>,
    /// More rows differ than are listed: the list holds the first [`ROW_DIFFERENCES_SHOWN`]
    /// (those the new table holds more often first), and says nothing of the others.
    pub cut: bool,
}

impl RowDifferences {
    /// Whether every row the new table holds more often is listed: the list is whole, or shows a
    /// row held too rarely, which it lists after all of those.
    pub fn lists_every_extra(&self) -> bool {
        !self.cut || self.rows.values().any(|n| *n > 0)
    }
}

/// Reads the output of [`RebuildPlan::row_differences_script`].
pub fn parse_row_differences(stdout: &str) -> Result<RowDifferences, String> {
    let mut rows: Vec<(u64, i64)> = parse_tagged(stdout, "d")?
        .into_iter()
        .map(|value| {
            value
                .split_once(':')
                .and_then(|(hash, n)| Some((hash.parse::<u64>().ok()?, n.parse::<i64>().ok()?)))
                .ok_or_else(|| format!("an unexpected row difference: {value}"))
        })
        .collect::<Result<_, _>>()?;
    let cut = rows.len() > ROW_DIFFERENCES_SHOWN;
    rows.truncate(ROW_DIFFERENCES_SHOWN);
    Ok(RowDifferences {
        rows: rows.into_iter().collect(),
        cut,
    })
}

/// The differences two reads of [`RebuildPlan::row_differences_script`] agree on: a row
/// missing (or extra) in both, as often as in the read where it is less so. A row of an insert
/// under way during one read differs in that read only.
pub fn lasting_differences(first: &BTreeMap<u64, i64>, second: &BTreeMap<u64, i64>) -> BTreeMap<u64, i64> {
    first
        .iter()
        .filter_map(|(hash, &a)| {
            let b = *second.get(hash)?;
            (a.signum() == b.signum()).then(|| (*hash, a.signum() * a.abs().min(b.abs())))
        })
        .collect()
}

/// The cut-over of one rebuild.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cutover {
    /// How it compares.
    pub kind: CutoverKind,
    /// Unix seconds (a time) or the integer, as text.
    pub value: String,
}

impl Cutover {
    /// The value as the view and the backfill compare with it.
    pub fn sql(&self) -> String {
        match self.kind {
            CutoverKind::Time => format!("toDateTime({})", self.value),
            CutoverKind::Number => self.value.clone(),
        }
    }

    /// Whether `value` is a whole number, as a cut-over must be (it comes from the receipts).
    pub fn parse(kind: CutoverKind, value: &str) -> Option<Self> {
        let digits = value.strip_prefix('-').unwrap_or(value);
        (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then(|| Self {
            kind,
            value: value.to_owned(),
        })
    }
}

/// The first integer cut-over from `start` (the live rows' largest value plus one) that no
/// earlier attempt used: only uniqueness matters, so not above every used one.
pub fn unused_from(start: i128, used: &BTreeSet<i128>) -> i128 {
    let mut v = start;
    while used.contains(&v) {
        v += 1;
    }
    v
}

/// One live partition of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePartition {
    /// `system.parts.partition_id`.
    pub id: String,
    /// The partition's value as the server prints it (a literal it reads back).
    pub value: String,
    /// Its rows when listed.
    pub rows: u64,
}

/// What [`RebuildPlan::inspect_script`] found on one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inspection {
    /// Which of the table, `__new`, `__old`, the view and the staging table exist, with their
    /// engine and partition key.
    pub tables: BTreeMap<String, (String, String)>,
    /// ZooKeeper paths (expanded) of the table and `__new` when `Replicated`.
    pub replicas: BTreeMap<String, String>,
    /// Columns of the table and of `__new`: (table, name, type, default kind).
    pub columns: Vec<(String, String, String, String)>,
    /// The live table's CREATE as the server prints it.
    pub create: Option<String>,
    /// Other objects whose definition may read or write the table: `database.name` and their CREATE.
    pub objects: Vec<(String, String)>,
    /// Dictionaries whose source mentions the table: name and source.
    pub dictionaries: Vec<(String, String)>,
    /// This rebuild's receipts on the pod.
    pub receipts: Vec<Receipt>,
    /// The targets of the table's open `made` receipts on the pod: whose [`MADE_SUFFIXES`] objects
    /// this tool made. `None` when the inspection did not read the receipts (a plan's).
    pub made: Option<BTreeSet<String>>,
    /// The engine of the table's database (`Ordinary` on 18.16, `Atomic` by default since 20.10).
    pub database_engine: String,
}

impl Inspection {
    /// Why the table's database cannot take a rebuild, if it cannot: in a `Replicated` database
    /// every DDL statement (DROP, RENAME, TRUNCATE, ALTER ... REPLACE PARTITION) goes to every
    /// replica through the database's log, while the rebuild runs them pod by pod and keeps
    /// receipts per pod; the swap would run twice on each replica, or fail half way.
    pub fn database_refusal(&self) -> Option<String> {
        (self.database_engine == "Replicated").then(|| {
            "the table's database has the Replicated engine, which sends each DDL statement to every replica \
             itself; a rebuild runs its DROP, RENAME and partition moves pod by pod, so it does not rebuild tables \
             there. Rebuild it by hand (create the declared table beside it, copy, then RENAME), or keep a \
             definition an ALTER can reach"
                .to_owned()
        })
    }

    /// Whether a DROP in the table's database returns before the queries that use the dropped
    /// object end (anything but `Ordinary`, which drops under an exclusive lock).
    pub fn drops_lazily(&self) -> bool {
        !matches!(self.database_engine.as_str(), "Ordinary" | "")
    }
}

/// One receipt row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// `cutover`, `attached`, `copied`, `swapped`, `finished` or `abandoned`.
    pub step: String,
    /// The source (a replica set's ZooKeeper path, or a pod's name).
    pub source: String,
    /// The live partition's id.
    pub partition: String,
    /// Rows copied.
    pub rows: u64,
    /// The cut-over (`cutover`) or the new table's partition id (`attached`).
    pub value: String,
    /// The cut-over the receipt belongs to (empty for a `swapped` one of an earlier version).
    pub cutover: String,
}

/// The tables [`RebuildPlan::leftovers_query`] found.
pub fn parse_leftovers(stdout: &str) -> Result<BTreeSet<String>, String> {
    parse_tagged(stdout, "left").map(|names| names.into_iter().collect())
}

/// The receipts of one rebuild run: those of `cutover`, the one it copies up to.
pub fn of_cutover<'r>(
    receipts: &'r [Receipt],
    cutover: &'r Cutover,
) -> impl Iterator<Item = &'r Receipt> + 'r {
    receipts.iter().filter(move |r| r.cutover == cutover.value)
}

impl Inspection {
    /// Reads the inspection script's output; `Err` names the line it could not read.
    pub fn parse(stdout: &str) -> Result<Self, String> {
        let mut out = Self::default();
        for line in complete(stdout)?.lines().filter(|l| !l.is_empty()) {
            let fields: Vec<String> = line.split('\t').map(unescape).collect();
            let f = |i: usize| fields.get(i).cloned().unwrap_or_default();
            match fields.first().map(String::as_str) {
                Some("table") => {
                    out.tables.insert(f(1), (f(2), f(3)));
                }
                Some("replica") => {
                    out.replicas.insert(f(1), f(2));
                }
                Some("column") => out.columns.push((f(1), f(2), f(3), f(4))),
                Some("create") => out.create = Some(f(1)),
                Some("object") => out.objects.push((format!("{}.{}", f(1), f(2)), f(3))),
                Some("dictionary") => out.dictionaries.push((f(1), f(2))),
                Some("database") => out.database_engine = f(1),
                // A first line with no target says the receipts were read (a constant `SELECT`
                // always prints its row, whatever the settings make of an empty aggregation);
                // then one line per target with an open `made` receipt.
                Some("made") => {
                    let made = out.made.get_or_insert_with(BTreeSet::new);
                    if !f(1).is_empty() {
                        made.insert(f(1));
                    }
                }
                Some("receipt") => out.receipts.push(Receipt {
                    step: f(1),
                    source: f(2),
                    partition: f(3),
                    rows: f(4)
                        .parse()
                        .map_err(|_| format!("a receipt's rows are not a number: {line}"))?,
                    value: f(6),
                    cutover: f(7),
                }),
                _ => {
                    return Err(format!(
                        "an unexpected line: {}",
                        line.chars().take(80).collect::<String>()
                    ));
                }
            }
        }
        Ok(out)
    }

    /// The columns of `table` (name, type, default kind).
    pub fn columns_of<'a>(
        &'a self,
        table: &'a str,
    ) -> impl Iterator<Item = &'a (String, String, String, String)> + 'a {
        self.columns.iter().filter(move |c| c.0 == table)
    }
}

/// Columns a row is copied by: those the new table has as plain or DEFAULT columns and the live
/// table has too, in the new table's order.
pub fn shared_columns(inspection: &Inspection, table: &str) -> Vec<String> {
    shared_between(inspection, table, &format!("{table}{NEW_SUFFIX}"))
}

/// [`shared_columns`] of a copy from table `from` into table `into`.
fn shared_between(inspection: &Inspection, from: &str, into: &str) -> Vec<String> {
    let live: BTreeSet<&str> = inspection.columns_of(from).map(|c| c.1.as_str()).collect();
    inspection
        .columns_of(into)
        .filter(|c| live.contains(c.1.as_str()))
        .filter(|c| c.3.is_empty() || c.3 == "DEFAULT")
        .map(|c| c.1.clone())
        .collect()
}

/// Whether a failed conversion check ([`RebuildPlan::convert_check_script`]) failed on a value
/// that does not convert, rather than for a reason of its own (a timeout, memory, too many
/// queries, a lost connection): only the first refuses the rebuild; the others fail the step with
/// the server's error, as any step does. 18.16 reports an Enum's unknown element as a
/// `LOGICAL_ERROR` (49) and later servers as `BAD_ARGUMENTS` (36) or `UNKNOWN_ELEMENT_OF_ENUM`
/// (691), so those are read by their text.
pub fn conversion_failed(code: Option<u32>, text: &str) -> bool {
    // CANNOT_PARSE_TEXT, _ESCAPE_SEQUENCE, _QUOTED_STRING, _INPUT_ASSERTION_FAILED,
    // CANNOT_PARSE_DATE, _DATETIME, TYPE_MISMATCH,
    // ARGUMENT_OUT_OF_BOUND, CANNOT_CONVERT_TYPE, CANNOT_PARSE_NUMBER, TOO_LARGE_STRING_SIZE,
    // VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE, CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN,
    // CANNOT_PARSE_UUID, DECIMAL_OVERFLOW, CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING,
    // CANNOT_PARSE_BOOL, UNKNOWN_ELEMENT_OF_ENUM.
    // Not ATTEMPT_TO_READ_AFTER_EOF (32), which the client also prints when the server goes away
    // in the middle of a query.
    const CONVERSION: [u32; 18] = [
        6, 25, 26, 27, 38, 41, 53, 69, 70, 72, 131, 321, 349, 376, 407, 441, 467, 691,
    ];
    match code {
        Some(code) if CONVERSION.contains(&code) => true,
        Some(36 | 49) => text.contains("Unknown element"),
        _ => false,
    }
}

/// The columns a catch-up copies ([`RebuildPlan::catch_up_script`]): the shared ones, each with
/// the new table's type when the live table's differs (its values are converted as the backfill's
/// insert converts them, so that both sides of the difference compare alike).
pub fn copy_columns(inspection: &Inspection, table: &str) -> Vec<(String, Option<String>)> {
    copy_columns_between(inspection, table, &format!("{table}{NEW_SUFFIX}"))
}

/// [`copy_columns`] of a copy from table `from` into table `into` (after the swap: from
/// `<table>__old` into the table).
pub fn copy_columns_between(
    inspection: &Inspection,
    from: &str,
    into: &str,
) -> Vec<(String, Option<String>)> {
    let type_in = |t: &str, name: &str| {
        inspection
            .columns_of(t)
            .find(|c| c.1 == name)
            .map(|c| c.2.clone())
    };
    shared_between(inspection, from, into)
        .into_iter()
        .map(|name| {
            let to = type_in(into, &name).filter(|to| type_in(from, &name).as_ref() != Some(to));
            (name, to)
        })
        .collect()
}

/// A column the counts hash ([`RebuildPlan::counts_script`]): its name, its type in the new table,
/// and whether the live (old) table's type differs, its values then converted to the new type
/// before they are hashed, as the backfill's insert converts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashedColumn {
    /// The column's name.
    pub name: String,
    /// Its type in the new table.
    pub ty: String,
    /// Whether the live table's type differs.
    pub converted: bool,
}

/// The columns the counts hash: every shared one (see [`HashedColumn`]).
pub fn checksum_columns(inspection: &Inspection, table: &str) -> Vec<HashedColumn> {
    copy_columns(inspection, table)
        .into_iter()
        .filter_map(|(name, to)| {
            let converted = to.is_some();
            let ty = match to {
                Some(to) => to,
                None => inspection
                    .columns_of(&format!("{table}{NEW_SUFFIX}"))
                    .find(|c| c.1 == name)
                    .map(|c| c.2.clone())?,
            };
            Some(HashedColumn { name, ty, converted })
        })
        .collect()
}

/// Whether a table's definition (a CREATE, or `(columns) ENGINE ...`) has a TTL that rewrites
/// rows instead of only deleting them: a column's TTL (its values go back to the default) or a
/// table TTL with `SET` or `GROUP BY` (rows rolled up). Merges then change rows without any insert,
/// so two tables' rows can differ with nothing written to either. A column named `ttl` counts too:
/// erring that way costs only the comparison by rows.
pub fn ttl_rewrites_rows(sql: &str) -> bool {
    let mut depth = 0usize;
    let mut columns_seen = false;
    let mut table_ttl = false;
    for token in significant(sql) {
        if token.is_punct(sql, "(") {
            depth += 1;
            continue;
        }
        if token.is_punct(sql, ")") {
            depth = depth.saturating_sub(1);
            columns_seen |= depth == 0;
            continue;
        }
        if token.kind != TokenKind::Word {
            continue;
        }
        let word = token.text(sql).to_ascii_uppercase();
        match (depth, word.as_str()) {
            (1, "TTL") if !columns_seen => return true,
            (0, "TTL") if columns_seen => table_ttl = true,
            (0, "SETTINGS") => table_ttl = false,
            (0, "SET" | "GROUP") if table_ttl => return true,
            _ => {}
        }
    }
    false
}

/// Whether `cityHash64` takes a value of type `ty` as it is on every supported server: 18.16
/// rejects `Decimal`, `UUID`, `LowCardinality`, tuples and arrays holding a NULL, and later
/// servers some of the newer types; every other value is hashed as its text (`toString`), which
/// each of them prints.
fn hashes_directly(ty: &str) -> bool {
    let ty = ty.trim();
    let inner = ty
        .strip_prefix("Nullable(")
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or(ty);
    if let Some(element) = inner.strip_prefix("Array(").and_then(|t| t.strip_suffix(')')) {
        return !element.starts_with("Nullable(") && ty == inner && hashes_directly(element);
    }
    matches!(
        inner,
        "UInt8"
            | "UInt16"
            | "UInt32"
            | "UInt64"
            | "Int8"
            | "Int16"
            | "Int32"
            | "Int64"
            | "Float32"
            | "Float64"
            | "String"
            | "Date"
            | "DateTime"
    ) || inner.starts_with("FixedString(")
        || inner.starts_with("DateTime('")
        || inner.starts_with("Enum8(")
        || inner.starts_with("Enum16(")
}

/// Whether `sql` (an object's CREATE, or any statement) reads or writes `db.table`: `db.table`
/// spelled with a dot, the two as arguments (`Distributed(c, db, table)`), or, for an object in
/// `db` itself (`own_database`), the bare name. Errs on the side of naming too many.
pub fn references(sql: &str, tokens: &[Token], own_database: &str, db: &str, table: &str) -> bool {
    let value = |t: &Token| -> Option<String> {
        matches!(
            t.kind,
            TokenKind::Word | TokenKind::QuotedIdentifier | TokenKind::StringLiteral
        )
        .then(|| String::from_utf8_lossy(&t.value(sql)).into_owned())
    };
    for (i, t) in tokens.iter().enumerate() {
        if value(t).as_deref() != Some(table) {
            continue;
        }
        let before = i.checked_sub(1).map(|j| &tokens[j]);
        let before2 = i.checked_sub(2).map(|j| &tokens[j]);
        let qualified = before.is_some_and(|b| b.is_punct(sql, ".") || b.is_punct(sql, ","))
            && before2.and_then(value).as_deref() == Some(db);
        if qualified {
            return true;
        }
        let after_dot = before.is_some_and(|b| b.is_punct(sql, "."));
        let before_dot = tokens.get(i + 1).is_some_and(|a| a.is_punct(sql, "."));
        if own_database == db && !after_dot && !before_dot && t.kind != TokenKind::StringLiteral {
            return true;
        }
    }
    false
}

/// Whether `sql` is a `Merge` table that may read `db.table`: its tables are chosen by a
/// regular expression (`Merge(db, '^events')`), which names no table, and after the swap it
/// would match `<table>__old` as well and read its rows twice. Its database argument is `db`
/// (spelled, `currentDatabase()` in `db`, or itself a `REGEXP(...)`), and a string argument
/// holds the table's name. Errs on the side of naming too many: the pattern is not evaluated.
fn merges_over(sql: &str, tokens: &[Token], own_database: &str, db: &str, table: &str) -> bool {
    let text = |t: &Token| String::from_utf8_lossy(&t.value(sql)).into_owned();
    let Some(start) = tokens
        .windows(2)
        .position(|w| w[0].kind == TokenKind::Word && text(&w[0]) == "Merge" && w[1].is_punct(sql, "("))
    else {
        return false;
    };
    let args = &tokens[start + 2..];
    let first_end = args
        .iter()
        .position(|t| t.is_punct(sql, ","))
        .unwrap_or(args.len());
    let first = &args[..first_end];
    let database_matches = match first {
        [one] => text(one) == db,
        [word, ..] if word.kind == TokenKind::Word && text(word).eq_ignore_ascii_case("currentDatabase") => {
            own_database == db
        }
        [word, ..] if word.kind == TokenKind::Word && text(word).eq_ignore_ascii_case("REGEXP") => true,
        _ => false,
    };
    database_matches
        && args[first_end..]
            .iter()
            .take_while(|t| !t.is_punct(sql, ")"))
            .any(|t| t.kind == TokenKind::StringLiteral && text(t).contains(table))
}

/// The objects on a pod that would break at the swap, by name: views and materialized views
/// reading the table, materialized views writing into it, Distributed and Merge tables over it,
/// and dictionaries reading it, except those the statements declare (`declared`, qualified names).
pub fn dependents(plan: &RebuildPlan, inspection: &Inspection, declared: &BTreeSet<String>) -> Vec<String> {
    let mut found = Vec::new();
    for (name, create) in &inspection.objects {
        if declared.contains(name) {
            continue;
        }
        let own = name.split_once('.').map_or("", |(d, _)| d);
        let tokens: Vec<Token> = significant(create).collect();
        let at = definition::after_name(create, &tokens);
        let after_name = &tokens[at.min(tokens.len())..];
        if references(create, after_name, own, &plan.database, &plan.table)
            || merges_over(create, after_name, own, &plan.database, &plan.table)
        {
            found.push(name.clone());
        }
    }
    for (name, source) in &inspection.dictionaries {
        if declared.contains(name) {
            continue;
        }
        if source.contains(&plan.key()) {
            found.push(format!("dictionary {name}"));
        }
    }
    found
}

/// Reads [`RebuildPlan::partitions_query`]'s output.
pub fn parse_partitions(stdout: &str) -> Result<Vec<LivePartition>, String> {
    complete(stdout)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let fields: Vec<String> = line.split('\t').map(unescape).collect();
            match fields.as_slice() {
                [id, value, rows] => Ok(LivePartition {
                    id: id.clone(),
                    value: value.clone(),
                    rows: rows
                        .parse()
                        .map_err(|_| format!("rows are not a number: {line}"))?,
                }),
                _ => Err(format!("an unexpected partition line: {line}")),
            }
        })
        .collect()
}

/// Reads the staged partitions at the end of [`RebuildPlan::stage_script`]'s output.
pub fn parse_staged(stdout: &str) -> Result<Vec<(String, u64)>, String> {
    parse_copied(complete(stdout)?)
}

/// Reads the lines of a batch of [`RebuildPlan::copy_script`]s (partition id and rows copied),
/// one per partition the batch finished. It has no end marker: a batch that stopped early is
/// read for the partitions it did finish, and a missing one is the batch's failure.
pub fn parse_copied(stdout: &str) -> Result<Vec<(String, u64)>, String> {
    stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| match line.split_once('\t') {
            Some((id, rows)) => rows
                .parse()
                .map(|r| (unescape(id), r))
                .map_err(|_| format!("rows are not a number: {line}")),
            None => Err(format!("an unexpected staged line: {line}")),
        })
        .collect()
}

/// Rows and checksum per live partition value.
pub type Counts = BTreeMap<String, (u64, u64)>;

/// What [`RebuildPlan::counts_script`] read of one table: per partition, the rows before the
/// cut-over and those from the cut-over up to the bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SplitCounts {
    /// Rows before the cut-over (the backfill's).
    pub before: Counts,
    /// Rows from the cut-over up to the bound (the view's).
    pub after: Counts,
}

/// Reads [`RebuildPlan::counts_script`]'s output.
pub fn parse_counts(stdout: &str) -> Result<SplitCounts, String> {
    let mut counts = SplitCounts::default();
    let number = |line: &str, text: &str| -> Result<u64, String> {
        text.parse()
            .map_err(|_| format!("a count is not a number: {line}"))
    };
    for line in complete(stdout)?.lines().filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split('\t').collect();
        let [p, rows, checksum, after_rows, after_checksum] = fields.as_slice() else {
            return Err(format!("an unexpected count line: {line}"));
        };
        let p = unescape(p);
        let before = (number(line, rows)?, number(line, checksum)?);
        let after = (number(line, after_rows)?, number(line, after_checksum)?);
        if before != (0, 0) {
            counts.before.insert(p.clone(), before);
        }
        if after != (0, 0) {
            counts.after.insert(p, after);
        }
    }
    Ok(counts)
}

/// Adds one source's counts into a sum (checksums add with wrap-around, as `sumWithOverflow`).
pub fn add_counts(sum: &mut Counts, more: &Counts) {
    for (p, (rows, checksum)) in more {
        let entry = sum.entry(p.clone()).or_insert((0, 0));
        entry.0 += rows;
        entry.1 = entry.1.wrapping_add(*checksum);
    }
}

/// One partition whose rows (or checksum) differ: value, expected, found.
pub type CountDifference = (String, (u64, u64), (u64, u64));

/// The partitions whose rows (or checksum) differ.
pub fn count_differences(expected: &Counts, found: &Counts) -> Vec<CountDifference> {
    let keys: BTreeSet<&String> = expected.keys().chain(found.keys()).collect();
    keys.into_iter()
        .filter_map(|p| {
            let e = expected.get(p).copied().unwrap_or((0, 0));
            let f = found.get(p).copied().unwrap_or((0, 0));
            (e != f).then(|| (p.clone(), e, f))
        })
        .collect()
}

#[cfg(test)]
mod tests;
