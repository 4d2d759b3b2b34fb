//! Convergence: the ALTERs that bring a live object to its declaration, or why none can.
//!
//! Without it, a user who adds a column to `CREATE TABLE IF NOT EXISTS` gets a schema mismatch and
//! writes the `ALTER TABLE ... ADD COLUMN` by hand, in the right order, for ever after. With the
//! `converge: 'additive'` prop the declaration is the schema: after the statements ran on a pod, the
//! live-schema check (`crate::live_schema`) names what differs, this module turns each difference
//! into the ALTER that makes it, and the check then verifies the result.
//!
//! The planner is pure: it reads two definitions as the server prints them (the scratch copy of the
//! declaration and the live object, parsed by [`crate::sql::definition`]) and the differences the
//! check found in them, and returns the statements for the object, or the reasons it leaves the
//! object alone. What it does per difference:
//! - a declared column the table lacks: `ADD COLUMN` at its declared place (`AFTER x`, or `FIRST`
//!   where the server has it); a live column the declaration lacks is kept, never dropped, and
//!   reported;
//! - a column's DEFAULT, COMMENT or CODEC, or a TTL it no longer has: the matching
//!   `MODIFY COLUMN` / `COMMENT COLUMN`; its type: refused (a mutation that rewrites the column in
//!   every part), naming the ALTER it would take, unless the column is in the allow list;
//! - skip indexes, projections and constraints: added (an index or projection then materialized,
//!   so existing parts have it too), dropped when undeclared, replaced when changed;
//! - the table's SETTINGS and COMMENT, and a TTL it no longer has: `MODIFY SETTING` /
//!   `RESET SETTING`, `MODIFY COMMENT`, `REMOVE TTL`;
//! - a new or changed TTL (the table's or a column's): refused, naming the ALTER it would take,
//!   because the server applies it to the rows already there and deletes what it expires;
//! - an ORDER BY that only appends columns the table lacks: those `ADD COLUMN`s and
//!   `MODIFY ORDER BY` (the server then keeps the old key as `PRIMARY KEY`, which the check
//!   accepts);
//! - a plain view whose definition changed: replaced, with `CREATE OR REPLACE VIEW` where the
//!   server has it, otherwise `DROP TABLE` and `CREATE VIEW` in one script;
//! - anything else (the engine, PARTITION BY, PRIMARY KEY, SAMPLE BY, another ORDER BY, the
//!   column order, a materialized view's query, a dictionary): no ALTER makes it; the object is
//!   left alone and the check reports it as it does without convergence (a `rebuild` entry
//!   handles the table changes before the statements run).
//!
//! An object with any refused difference is not altered at all: a half-converged table is harder
//! to reason about than one that fails by name. The ALTERs of one table are one statement (the
//! server applies its commands in order), except that a command taking a list (`MODIFY SETTING`,
//! `RESET SETTING`) must end its statement, or it would read the next command as an
//! element: the first of them ends the table's ALTER, each other one is an ALTER of its own.
//! A second `MODIFY COLUMN` of one column that restates its type is an ALTER of its own too: in
//! one ALTER, a 24.x/25.x server drops the default the first one set.
//!
//! What the server accepts was tried on ClickHouse 18.16 and on 26.9 (chdb-core): 18.16 has
//! `ADD COLUMN ... AFTER`, `MODIFY COLUMN` (type, default), `COMMENT COLUMN` and `MODIFY ORDER BY`
//! (with added columns that have no default), and none of `FIRST`, `IF NOT EXISTS`, codecs, skip
//! indexes, projections, `MODIFY TTL`/`SETTING`/`COMMENT`, `REMOVE`, `RESET SETTING` or `CREATE OR
//! REPLACE VIEW`; 26.9 has all of them. Servers from 22.1 on are treated as 26.9, older ones as
//! 18.16 (refusing more than they could do, never less).

mod run;
#[cfg(test)]
mod tests;

use serde::Serialize;

use crate::live_schema::{DifferenceReport, ObjectStatus, PodReport, VerifyPlan};
use crate::sql::clickhouse_text::{ident, literal};
use crate::sql::definition::{Definition, Part};
use crate::sql::lexer::{Token, significant};

/// What a server can ALTER, from its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    /// 22.1 and later: `FIRST`, `IF NOT EXISTS`, codecs, column TTLs, skip indexes, projections,
    /// constraints, `MODIFY TTL`/`SETTING`/`COMMENT`, `REMOVE ...`, `RESET SETTING`,
    /// `CREATE OR REPLACE VIEW`.
    pub modern: bool,
}

impl Server {
    /// The server that printed `version()` (`18.16.1`, `26.9.2.1`); an unreadable version is
    /// treated as the oldest.
    pub fn from_version(version: &str) -> Self {
        let major: u32 = version
            .trim()
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        Server { modern: major >= 22 }
    }
}

/// One declared object and what the check found on one pod.
#[derive(Debug, Clone, Copy)]
pub struct ObjectInput<'a> {
    /// `database.name`, as reports name it.
    pub database: &'a str,
    /// The object's name in its database.
    pub name: &'a str,
    /// `TABLE`, `VIEW`, `MATERIALIZED VIEW`, ...
    pub kind: &'a str,
    /// The declaration as the server prints it (its scratch copy), or as written when it was
    /// compared as text.
    pub declared: &'a Definition,
    /// `declared` is the server's print: without it nothing is altered (see [`plan_object`]).
    pub printed: bool,
    /// The live object as the server prints it.
    pub live: &'a Definition,
    /// The check's differences for the object.
    pub differences: &'a [DifferenceReport],
    /// The declaring statement's body after the object's name (its columns, clauses, `AS` query):
    /// what a replaced view is created from.
    pub declared_body: &'a str,
}

/// What convergence may do, from the props.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// Columns whose type may change, as `database.table.column`.
    pub allow_type_change: &'a [String],
    /// `ON CLUSTER <name>` on every statement, under onCluster.
    pub on_cluster: Option<&'a str>,
}

/// Why one difference is left as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct Refusal {
    /// The part, as the check names it (`column v`, `ENGINE`, ...).
    pub clause: String,
    /// Why, in words.
    pub why: String,
    /// The ALTER that would make it, when one exists but is not allowed (a type change).
    pub alter: Option<String>,
}

/// The plan for one object on one pod.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct ObjectPlan {
    /// `database.name`.
    pub object: String,
    /// Index of the statement that declares it.
    #[cfg_attr(feature = "napi", napi(ts_type = "number"))]
    pub statement_index: usize,
    /// For a `Replicated` table, its ZooKeeper path with the pod's macros expanded: the replica
    /// set it belongs to. Its ALTERs run on one replica of the set, and replicate.
    pub replica_path: Option<String>,
    /// The statements that bring it to the declaration, in order (one ALTER for a table; the
    /// replacement of a view). Empty when anything is refused, and in a plan on a replica that
    /// gets them by replication (see `replicated_from`).
    pub statements: Vec<String>,
    /// In a plan, for a replica of a set whose ALTERs another pod's plan runs: that pod. The
    /// changes then arrive by replication. (The apply lets the first replica that finds the
    /// difference run them, which may be another one.)
    pub replicated_from: Option<String>,
    /// Each change in words (`add column x after id`), in order.
    pub changes: Vec<String>,
    /// Live columns the declaration lacks: kept with their data, and reported.
    pub kept_columns: Vec<String>,
    /// What no ALTER this resource runs can make, or what it may not.
    pub refused: Vec<Refusal>,
    /// Parts (as the check names them) that still differ after the statements by design: kept
    /// columns, the `PRIMARY KEY` the server keeps after `MODIFY ORDER BY`.
    pub accepted: Vec<String>,
}

impl ObjectPlan {
    /// Whether the object is left as it is (nothing to run).
    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }
}

/// What convergence would do on one pod.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct PodPlan {
    /// The pod's name.
    pub pod: String,
    /// The server's `version()`, when the check printed it.
    pub server_version: Option<String>,
    /// Every object that differs, in statement order.
    pub objects: Vec<ObjectPlan>,
}

impl PodPlan {
    /// The statements to run on the pod, in order: each object's, objects in statement order.
    pub fn statements(&self) -> impl Iterator<Item = (&ObjectPlan, &String)> {
        self.objects
            .iter()
            .flat_map(|o| o.statements.iter().map(move |s| (o, s)))
    }
}

/// What the props allow convergence to do (`converge: 'additive'`).
#[derive(Clone, Copy)]
pub(crate) struct Converge<'a> {
    /// Columns whose type may change, as `database.table.column`.
    pub allow_type_change: &'a [String],
    /// `ON CLUSTER` for every statement, under onCluster.
    pub on_cluster: Option<&'a str>,
}

impl Converge<'_> {
    pub(crate) fn options(&self) -> Options<'_> {
        Options {
            allow_type_change: self.allow_type_change,
            on_cluster: self.on_cluster,
        }
    }
}

/// The plan for every object `report` (the check's findings on a pod, from `stdout`, the output
/// of `plan`'s script with scratch database `scratch`) finds different.
pub fn plan_pod(
    plan: &VerifyPlan,
    report: &PodReport,
    scratch: &str,
    stdout: &str,
    options: Options<'_>,
) -> PodPlan {
    let server_version = VerifyPlan::server_version(stdout);
    let server = Server::from_version(server_version.as_deref().unwrap_or_default());
    let definitions = plan.definitions(scratch, stdout);
    let objects = report
        .objects
        .iter()
        .filter(|o| o.status == ObjectStatus::Differs)
        .filter_map(|o| {
            let d = definitions
                .iter()
                .find(|d| d.statement_index == o.statement_index)?;
            let mut planned = plan_object(
                ObjectInput {
                    database: &d.database,
                    name: &d.name,
                    kind: &o.kind,
                    declared: &d.declared,
                    printed: d.printed,
                    live: &d.live,
                    differences: &o.differences,
                    declared_body: &d.declared_body,
                },
                server,
                options,
            );
            planned.statement_index = o.statement_index;
            let uuid = declared_uuid(&d.declared_body)
                .unwrap_or_else(|| format!("{{uuid of {}.{} on {}}}", d.database, d.name, report.pod));
            planned.replica_path = replica_path(&d.live, &d.database, &d.name, &uuid, stdout);
            Some(planned)
        })
        .collect();
    PodPlan {
        pod: report.pod.clone(),
        server_version,
        objects,
    }
}

/// The UUID a declaration gives its table (`CREATE TABLE t UUID '...' (...)`), from `body`, the
/// text after the table's name.
fn declared_uuid(body: &str) -> Option<String> {
    let tokens: Vec<Token> = significant(body).take_while(|t| !t.is_punct(body, "(")).collect();
    tokens.windows(2).find_map(|pair| {
        (pair[0].is_keyword(body, "UUID") && pair[1].quote(body) == Some(b'\''))
            .then(|| String::from_utf8_lossy(&pair[1].value(body)).into_owned())
    })
}

/// A `Replicated` table's ZooKeeper path (its first engine argument) with `{database}`,
/// `{table}`, `{uuid}` (as `uuid`) and the pod's macros (the check's `macro` rows) expanded.
fn replica_path(live: &Definition, database: &str, name: &str, uuid: &str, stdout: &str) -> Option<String> {
    let (engine, args) = crate::sql::definition::engine_parts(&live.clause("ENGINE")?.text)?;
    if !crate::sql::definition::is_replicated(&engine) {
        return None;
    }
    let first = args.first().map(|a| a.text.trim().to_owned()).unwrap_or_default();
    let mut path = first.trim_matches('\'').to_owned();
    if path.is_empty() {
        // The server's default path: one set per table.
        path = format!("{{default}}/{database}/{name}");
    }
    // `{uuid}` is the table's own UUID, which the check does not read. A declaration that gives
    // one gives it on every pod; otherwise each pod's CREATE drew its own, and the pod's table is a
    // replica set of its own (replicas made ON CLUSTER share a UUID, but then one pod converges).
    path = path
        .replace("{database}", database)
        .replace("{table}", name)
        .replace("{uuid}", uuid);
    for line in stdout.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        if let ["macro", macro_name, value, ..] = fields.as_slice() {
            path = path.replace(&format!("{{{macro_name}}}"), value);
        }
    }
    Some(path)
}

/// One line per refusal of `pod_plan`, for messages.
pub(crate) fn refusal_lines(pod_plan: &PodPlan) -> Vec<String> {
    pod_plan
        .objects
        .iter()
        .flat_map(|o| {
            o.refused.iter().map(move |r| {
                let mut line = format!("{} on {}: {}: {}", o.object, pod_plan.pod, r.clause, r.why);
                if let Some(alter) = &r.alter {
                    line.push_str(&format!(" (it would take: {alter})"));
                }
                line
            })
        })
        .collect()
}

/// The statements that bring `input`'s live object to its declaration on `server`, or why not.
pub fn plan_object(input: ObjectInput<'_>, server: Server, options: Options<'_>) -> ObjectPlan {
    let mut plan = ObjectPlan {
        object: format!("{}.{}", input.database, input.name),
        ..ObjectPlan::default()
    };
    let target = format!("{}.{}", ident(input.database), ident(input.name));
    let on_cluster = options
        .on_cluster
        .map(|c| format!(" ON CLUSTER {}", ident(c)))
        .unwrap_or_default();
    // Compared as text (no scratch copy could be made: a view over a table function that
    // connects, a table created AS SELECT, ...): a difference may be only how the server prints
    // what the statement wrote (`INTERVAL 1 DAY` as `toIntervalDay(1)`), and acting on it would
    // alter or replace the object on every deploy.
    if !input.printed {
        for d in input.differences {
            plan.refused.push(Refusal {
                clause: d.clause.clone(),
                why:
                    "it was compared as text (the server could not make a scratch copy of the declaration to \
                      print it), so the difference may be only how the text is written; convergence changes \
                      only what the server printed on both sides. Change it with statements of your own"
                        .to_owned(),
                alter: None,
            });
        }
        return plan;
    }
    match input.kind {
        "TABLE" => plan_table(input, server, options, &target, &on_cluster, &mut plan),
        "VIEW" => {
            let replace = input
                .differences
                .iter()
                .all(|d| d.clause == "AS" || d.clause.starts_with("column "));
            if replace && !input.declared_body.trim().is_empty() {
                if server.modern {
                    // The kind word is not compared (a LIVE VIEW prints like a view): only a plain
                    // view is replaced.
                    plan.statements.push(view_guard(input.database, input.name));
                    plan.statements.push(format!(
                        "CREATE OR REPLACE VIEW {target}{on_cluster} {}",
                        input.declared_body
                    ));
                } else if options.on_cluster.is_some() {
                    // The DROP would reach every host, but only this one was seen to hold a
                    // view by that name: on another, a table of that name would go with its rows.
                    plan.refused.push(Refusal {
                        clause: "AS".to_owned(),
                        why: "this server replaces a view by DROP and CREATE, and ON CLUSTER would send the DROP \
                              to every host of the cluster, where only one was checked (a table of that name \
                              elsewhere would be dropped with its rows); replace it on each host, or with \
                              statements of your own"
                            .to_owned(),
                        alter: None,
                    });
                } else {
                    plan.statements.extend(replace_view_statements(
                        input.database,
                        input.name,
                        input.declared_body,
                    ));
                }
                plan.changes.push("replace the view".to_owned());
            } else {
                for d in input
                    .differences
                    .iter()
                    .filter(|d| d.clause != "AS" && !d.clause.starts_with("column "))
                {
                    plan.refused.push(refusal(
                        &d.clause,
                        "no statement this resource runs changes it on a view",
                    ));
                }
            }
        }
        kind => {
            for d in input.differences {
                plan.refused.push(refusal(
                    &d.clause,
                    &format!("a {kind} is not altered by convergence"),
                ));
            }
        }
    }
    if !plan.refused.is_empty() {
        plan.statements.clear();
        plan.changes.clear();
    }
    plan
}

fn refusal(clause: &str, why: &str) -> Refusal {
    Refusal {
        clause: clause.to_owned(),
        why: why.to_owned(),
        alter: None,
    }
}

/// One entry of a column list, split into the parts an ALTER changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ColumnParts {
    /// The type as written, and its comparison key.
    ty: (String, String),
    /// `DEFAULT`/`MATERIALIZED`/`ALIAS`/`EPHEMERAL` and the expression.
    default: Option<(String, String, String)>,
    comment: Option<(String, String)>,
    codec: Option<(String, String)>,
    ttl: Option<(String, String)>,
    /// `STATISTICS` and `SETTINGS`, which convergence does not change: compared only.
    unchanged: Vec<(String, String)>,
}

const COLUMN_WORDS: &[&str] = &[
    "DEFAULT",
    "MATERIALIZED",
    "ALIAS",
    "EPHEMERAL",
    "COMMENT",
    "CODEC",
    "TTL",
    "STATISTICS",
    "SETTINGS",
];

/// Splits a column entry (`` `v` String DEFAULT 'a' COMMENT 'c' ``) into its parts.
fn column_parts(text: &str) -> ColumnParts {
    let tokens: Vec<Token> = significant(text).collect();
    let mut sections: Vec<(String, usize, usize)> = vec![("TYPE".to_owned(), 1, tokens.len())];
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(1) {
        if t.is_punct(text, "(") || t.is_punct(text, "[") {
            depth += 1;
        } else if t.is_punct(text, ")") || t.is_punct(text, "]") {
            depth = depth.saturating_sub(1);
        } else if depth == 0
            && let Some(word) = COLUMN_WORDS.iter().find(|w| t.is_keyword(text, w))
        {
            if let Some(last) = sections.last_mut() {
                last.2 = i;
            }
            sections.push(((*word).to_owned(), i + 1, tokens.len()));
        }
    }
    let source = |from: usize, to: usize| -> (String, String) {
        match (tokens.get(from), to.checked_sub(1).and_then(|l| tokens.get(l))) {
            (Some(first), Some(last)) if to > from => (
                text[first.start..last.end].to_owned(),
                tokens[from..to]
                    .iter()
                    .map(|t| t.text(text))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            _ => (String::new(), String::new()),
        }
    };
    let mut parts = ColumnParts::default();
    for (word, from, to) in sections {
        let value = source(from, to);
        match word.as_str() {
            "TYPE" => parts.ty = value,
            "DEFAULT" | "MATERIALIZED" | "ALIAS" | "EPHEMERAL" => {
                parts.default = Some((word, value.0, value.1));
            }
            "COMMENT" => parts.comment = Some(value),
            "CODEC" => parts.codec = Some(value),
            "TTL" => parts.ttl = Some(value),
            _ => parts.unchanged.push((word, value.1)),
        }
    }
    parts
}

/// The column (not an index, projection or constraint) names of `d`, in order.
fn plain_columns(d: &Definition) -> Vec<&str> {
    d.columns
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| entry_kind(n).is_none())
        .collect()
}

/// `INDEX`, `PROJECTION` or `CONSTRAINT` for such an entry's name.
fn entry_kind(name: &str) -> Option<(&'static str, &str)> {
    ["INDEX", "PROJECTION", "CONSTRAINT"].into_iter().find_map(|k| {
        name.strip_prefix(k)
            .and_then(|r| r.strip_prefix(' '))
            .map(|r| (k, r))
    })
}

fn entry<'d>(d: &'d Definition, name: &str) -> Option<&'d Part> {
    d.columns.iter().find(|c| c.name == name).map(|c| &c.part)
}

fn plan_table(
    input: ObjectInput<'_>,
    server: Server,
    options: Options<'_>,
    target: &str,
    on_cluster: &str,
    plan: &mut ObjectPlan,
) {
    let mut commands: Vec<String> = Vec::new();
    let mut last: Vec<String> = Vec::new();
    // Commands that need an ALTER of their own (see the second `MODIFY COLUMN` of a column).
    let mut own: Vec<String> = Vec::new();
    // Engines whose columns a server ALTERs (tried on 18.16 and 26.9): others (Log, TinyLog,
    // StripeLog, Set, Join, File, Kafka, ...; Memory on 18.16) answer every column ALTER with an
    // error (code 48), so their column differences are refused, saying why.
    let engine = input
        .live
        .clause("ENGINE")
        .and_then(|e| crate::sql::definition::engine_parts(&e.text))
        .map(|(name, _)| name)
        .unwrap_or_default();
    let alters_columns = engine.ends_with("MergeTree")
        || ["Merge", "Distributed", "Buffer", "Null"].contains(&engine.as_str())
        || (server.modern && engine == "Memory");
    let declared_columns = plain_columns(input.declared);
    let live_columns = plain_columns(input.live);
    // The check names "column order" only when nothing else differs; convergence moves no column,
    // so columns both sides hold in another order refuse the object whatever else differs (an
    // ADD COLUMN would run, and the check would still fail on the order).
    let in_declared_order: Vec<&str> = declared_columns
        .iter()
        .filter(|c| live_columns.contains(c))
        .copied()
        .collect();
    let in_live_order: Vec<&str> = live_columns
        .iter()
        .filter(|c| declared_columns.contains(c))
        .copied()
        .collect();
    if in_declared_order != in_live_order && !input.differences.iter().any(|d| d.clause == "column order") {
        plan.refused.push(refusal(
            "column order",
            &format!(
                "the columns are in another order (declared {}; live {}) and convergence moves no column",
                in_declared_order.join(", "),
                in_live_order.join(", ")
            ),
        ));
    }
    for d in input.differences {
        let Some(name) = d.clause.strip_prefix("column ") else {
            continue;
        };
        if !alters_columns {
            plan.refused.push(refusal(
                &d.clause,
                &format!("the table's engine ({engine}) has no ALTER of its columns on this server"),
            ));
            continue;
        }
        if let Some((kind, entry_name)) = entry_kind(name) {
            plan_entry(input, server, kind, entry_name, name, &mut commands, plan);
            continue;
        }
        let declared = entry(input.declared, name);
        let live = entry(input.live, name);
        match (declared, live) {
            (Some(declared), None) => {
                let at = declared_columns.iter().position(|c| *c == name).unwrap_or(0);
                if let Some(renamed) =
                    renamed_from(input, &declared_columns, &live_columns, at, &declared.text)
                {
                    let rename = format!(
                        "ALTER TABLE {target}{on_cluster} RENAME COLUMN {} TO {}",
                        ident(renamed),
                        ident(name)
                    );
                    plan.refused.push(Refusal {
                        clause: d.clause.clone(),
                        why: format!(
                            "the table holds {renamed}, of the same type, where {name} is declared, and the \
                             declaration lacks {renamed}: if {renamed} was renamed, adding {name} would leave its \
                             values in {renamed} and {name} empty on every row. Rename it with a statement of \
                             your own{}, or declare {renamed} too to keep both",
                            if server.modern { "" } else { " (this server has no RENAME COLUMN: copy the values)" }
                        ),
                        alter: server.modern.then_some(rename),
                    });
                    continue;
                }
                let place = match at.checked_sub(1) {
                    Some(before) => format!(" AFTER {}", ident(declared_columns[before])),
                    None if server.modern => " FIRST".to_owned(),
                    None => {
                        plan.refused.push(refusal(
                            &d.clause,
                            "it is declared first, and this server has no ADD COLUMN ... FIRST",
                        ));
                        continue;
                    }
                };
                // ALIAS and EPHEMERAL are never stored: nothing is computed for old rows.
                if column_parts(&declared.text)
                    .default
                    .is_some_and(|(kind, text, _)| {
                        matches!(kind.as_str(), "DEFAULT" | "MATERIALIZED") && varying_default(&text)
                    })
                {
                    plan.statements.push(guard_statement(
                        NO_ROWS,
                        &format!("{}.{}", ident(input.database), ident(input.name)),
                    ));
                }
                let if_not_exists = if server.modern { "IF NOT EXISTS " } else { "" };
                commands.push(format!("ADD COLUMN {if_not_exists}{}{place}", declared.text));
                plan.changes.push(format!(
                    "add column {name}{}",
                    place.to_ascii_lowercase().replace("`", "")
                ));
            }
            (None, Some(_)) => {
                plan.kept_columns.push(name.to_owned());
                plan.accepted.push(d.clause.clone());
            }
            (Some(declared), Some(live)) => {
                let from = commands.len();
                plan_column(input, server, options, name, declared, live, &mut commands, plan);
                // Two `MODIFY COLUMN`s of one column in one ALTER: a 24.x/25.x server lets a
                // later one that restates the type wipe the default an earlier one set, or undo
                // its REMOVE (ClickHouse PR 114807), and inserts then store the type's zero. Such
                // a later one runs as an ALTER of its own, after this one.
                let restating = format!("MODIFY COLUMN {} ", ident(name));
                let mut modified = false;
                let mut i = from;
                while i < commands.len() {
                    if let Some(rest) = commands[i].strip_prefix(&restating) {
                        if modified && !rest.starts_with("REMOVE ") {
                            own.push(commands.remove(i));
                            continue;
                        }
                        modified = true;
                    }
                    i += 1;
                }
            }
            (None, None) => plan
                .refused
                .push(refusal(&d.clause, "it is in neither definition")),
        }
    }
    let merge_tree = input
        .declared
        .clause("ENGINE")
        .and_then(|e| crate::sql::definition::engine_parts(&e.text))
        .is_some_and(|(name, _)| name.ends_with("MergeTree"));
    let declared_order = input.declared.clause("ORDER BY").map(|p| p.text.as_str());
    let rebuild_reasons = crate::rebuild::rebuild_clauses(input.differences, declared_order);
    for d in input.differences {
        // The texts as the server printed them (a report's may have literals hidden).
        let text = |def: &Definition| def.clause(&d.clause).map(|p| p.text.clone()).unwrap_or_default();
        let (declared_text, live_text) = (text(input.declared), text(input.live));
        match d.clause.as_str() {
            c if c.starts_with("column ") => {}
            "ORDER BY" | "TTL" | "SETTINGS" if !merge_tree => plan.refused.push(refusal(
                &d.clause,
                "convergence changes it on MergeTree tables only",
            )),
            "column order" => plan.refused.push(refusal(
                &d.clause,
                &format!(
                    "the columns are in another order (declared {}; live {}) and convergence moves no column",
                    d.declared, d.live
                ),
            )),
            "ORDER BY" if !rebuild_reasons.contains(&"ORDER BY") => {
                // Only columns the table lacks are appended: they are added above, in this ALTER.
                // A server (18.16 and current ones alike) refuses a sorting key that uses a column
                // added with a default expression in the same ALTER.
                let appended = crate::rebuild::key_items(&declared_text);
                let live_items = crate::rebuild::key_items(&live_text).len();
                let defaulted: Vec<&String> = appended
                    .iter()
                    .skip(live_items)
                    .filter(|item| {
                        entry(input.declared, item).is_some_and(|c| column_parts(&c.text).default.is_some())
                    })
                    .collect();
                if !defaulted.is_empty() {
                    let names: Vec<&str> = defaulted.iter().map(|n| n.as_str()).collect();
                    plan.refused.push(refusal(
                        &d.clause,
                        &format!(
                            "it appends {} to the sorting key, declared with a default expression, and the server \
                             refuses a sorting key over a column the same ALTER adds with a default; declare the \
                             column without one, or let a `rebuild` entry for the table make the new key",
                            names.join(", ")
                        ),
                    ));
                    continue;
                }
                commands.push(format!("MODIFY ORDER BY {}", declared_text));
                plan.changes.push(format!("order by {}", declared_text));
                if input.declared.clause("PRIMARY KEY").is_none() {
                    plan.accepted.push("PRIMARY KEY".to_owned());
                }
            }
            "TTL" if server.modern => {
                if declared_text.is_empty() {
                    commands.push("REMOVE TTL".to_owned());
                    plan.changes.push("remove the table TTL".to_owned());
                } else {
                    plan.refused.push(Refusal {
                        clause: d.clause.clone(),
                        why: ttl_refusal("the table's TTL", &declared_text),
                        alter: Some(format!(
                            "ALTER TABLE {target}{on_cluster} MODIFY TTL {declared_text}"
                        )),
                    });
                }
            }
            "SETTINGS" if server.modern => {
                let declared = settings(&declared_text);
                let live = settings(&live_text);
                let changed: Vec<&(String, String)> = declared
                    .iter()
                    .filter(|(n, v)| !live.iter().any(|(ln, lv)| ln == n && lv == v))
                    .collect();
                let removed: Vec<&String> = live
                    .iter()
                    .filter(|(n, v)| {
                        let server_added = n == "index_granularity" && v == "8192";
                        !declared.iter().any(|(dn, _)| dn == n) && !server_added
                    })
                    .map(|(n, _)| n)
                    .collect();
                if !changed.is_empty() {
                    last.push(format!(
                        "MODIFY SETTING {}",
                        changed
                            .iter()
                            .map(|(n, v)| format!("{n} = {v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    plan.changes
                        .extend(changed.iter().map(|(n, v)| format!("setting {n} = {v}")));
                }
                if !removed.is_empty() {
                    let names: Vec<&str> = removed.iter().map(|n| n.as_str()).collect();
                    last.push(format!("RESET SETTING {}", names.join(", ")));
                    plan.changes
                        .extend(names.iter().map(|n| format!("reset setting {n}")));
                }
            }
            "COMMENT" if server.modern => {
                commands.push(format!("MODIFY COMMENT {}", or_empty_literal(&declared_text)));
                plan.changes.push("table comment".to_owned());
            }
            "PRIMARY KEY" if !rebuild_reasons.contains(&"PRIMARY KEY") => {
                // The key a `MODIFY ORDER BY` that appended columns leaves; see `accepted`.
                plan.accepted.push("PRIMARY KEY".to_owned());
            }
            "TTL" | "SETTINGS" | "COMMENT" => plan.refused.push(refusal(
                &d.clause,
                &format!("this server has no ALTER that changes a table's {}", d.clause),
            )),
            other => plan.refused.push(refusal(
                other,
                "no ALTER changes it (a `rebuild` entry for the table can, before the statements run)",
            )),
        }
    }
    // A command that takes a list (`MODIFY SETTING`, `RESET SETTING`) would read
    // a following `, COMMAND` as its next element: it ends its statement, and the next one starts
    // a statement of its own.
    let mut last = last.into_iter();
    if let Some(first_list) = last.next() {
        commands.push(first_list);
    }
    let alter = |commands: &[String]| format!("ALTER TABLE {target}{on_cluster} {}", commands.join(", "));
    if !commands.is_empty() {
        plan.statements.push(alter(&commands));
    }
    for command in own.into_iter().chain(last) {
        plan.statements.push(alter(&[command]));
    }
}

/// The live column a declared column that the table lacks (`at` in `declared_columns`, declared
/// as `declared_text`) may have been renamed from: a live column the declaration lacks, at the
/// same place (after the same column, or both first) and of the same type.
fn renamed_from<'l>(
    input: ObjectInput<'l>,
    declared_columns: &[&str],
    live_columns: &[&'l str],
    at: usize,
    declared_text: &str,
) -> Option<&'l str> {
    let before = at.checked_sub(1).map(|b| declared_columns[b]);
    let place = match before {
        Some(before) => live_columns.iter().position(|c| *c == before)? + 1,
        None => 0,
    };
    let candidate = *live_columns.get(place)?;
    if declared_columns.contains(&candidate) {
        return None;
    }
    let live = entry(input.live, candidate)?;
    (column_parts(&live.text).ty.1 == column_parts(declared_text).ty.1).then_some(candidate)
}

/// `'text'` as given (a printed literal), or `''` when absent.
fn or_empty_literal(text: &str) -> String {
    if text.trim().is_empty() {
        "''".to_owned()
    } else {
        text.to_owned()
    }
}

/// A `SETTINGS` clause's `name = value` entries, as written.
fn settings(text: &str) -> Vec<(String, String)> {
    let tokens: Vec<Token> = significant(text).collect();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    let mut push = |from: usize, to: usize| {
        if to <= from {
            return;
        }
        let entry = &text[tokens[from].start..tokens[to - 1].end];
        if let Some((n, v)) = entry.split_once('=') {
            out.push((n.trim().to_owned(), v.trim().to_owned()));
        }
    };
    for (i, t) in tokens.iter().enumerate() {
        if t.is_punct(text, "(") || t.is_punct(text, "[") {
            depth += 1;
        } else if t.is_punct(text, ")") || t.is_punct(text, "]") {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t.is_punct(text, ",") {
            push(start, i);
            start = i + 1;
        }
    }
    push(start, tokens.len());
    out
}

#[allow(clippy::too_many_arguments)]
fn plan_column(
    input: ObjectInput<'_>,
    server: Server,
    options: Options<'_>,
    name: &str,
    declared: &Part,
    live: &Part,
    commands: &mut Vec<String>,
    plan: &mut ObjectPlan,
) {
    let clause = format!("column {name}");
    let d = column_parts(&declared.text);
    let l = column_parts(&live.text);
    let column = ident(name);
    if d.unchanged != l.unchanged {
        plan.refused.push(refusal(
            &clause,
            "its STATISTICS or SETTINGS differ, and convergence does not change them",
        ));
        return;
    }
    if d.ty.1 != l.ty.1 {
        let qualified = format!("{}.{}.{name}", input.database, input.name);
        let alter = format!(
            "ALTER TABLE {}.{} MODIFY COLUMN {column} {}",
            ident(input.database),
            ident(input.name),
            d.ty.0
        );
        let replicated = input
            .live
            .clause("ENGINE")
            .and_then(|e| crate::sql::definition::engine_parts(&e.text))
            .is_some_and(|(engine, _)| crate::sql::definition::is_replicated(&engine));
        if options.allow_type_change.contains(&qualified) && !server.modern && replicated {
            // 18.16 changes a replicated table's definition first and converts its parts after,
            // one by one, retrying a value that does not convert for ever (merges held while it
            // tries); and it has no function that checks every value first.
            plan.refused.push(Refusal {
                clause: clause.clone(),
                why: format!(
                    "its type changes from {} to {} on a replicated table, which this server converts after it \
                     changed the definition, part by part, retrying for ever a value that does not convert; \
                     convergence cannot check the values first here. Check them, then run the ALTER as a \
                     statement of your own",
                    l.ty.0, d.ty.0
                ),
                alter: Some(alter),
            });
            return;
        }
        if options.allow_type_change.contains(&qualified) {
            if server.modern
                && let Some(guard) = conversion_guard(input, name, &l.ty.0, &d.ty.0)
            {
                plan.statements.push(guard);
                plan.changes.push(format!(
                    "check that every value of {name} converts to {} exactly",
                    d.ty.0
                ));
            }
            commands.push(format!("MODIFY COLUMN {column} {}", d.ty.0));
            plan.changes.push(format!(
                "change the type of {name} from {} to {} (a mutation: every part of the table is rewritten)",
                l.ty.0, d.ty.0
            ));
        } else {
            plan.refused.push(Refusal {
                clause: clause.clone(),
                why: format!(
                    "its type changes from {} to {}: a mutation that rewrites the column in every part of the \
                     table; name '{qualified}' in allowTypeChange to let convergence run it",
                    l.ty.0, d.ty.0
                ),
                alter: Some(alter),
            });
            return;
        }
    }
    let key = |p: &Option<(String, String)>| p.as_ref().map(|p| p.1.clone());
    let default_key = |p: &Option<(String, String, String)>| p.as_ref().map(|p| (p.0.clone(), p.2.clone()));
    if default_key(&d.default) != default_key(&l.default) {
        fn kinds(p: &Option<(String, String, String)>) -> Option<&str> {
            p.as_ref().map(|p| p.0.as_str())
        }
        let plain = |k: Option<&str>| matches!(k, None | Some("DEFAULT") | Some("MATERIALIZED"));
        match &d.default {
            _ if !plain(kinds(&d.default)) || !plain(kinds(&l.default)) => {
                plan.refused.push(refusal(
                    &clause,
                    "an ALIAS or EPHEMERAL expression is not changed by convergence",
                ));
                return;
            }
            Some((kind, text, _)) => {
                plan.statements.push(stored_guard(input, name));
                commands.push(format!("MODIFY COLUMN {column} {} {kind} {text}", d.ty.0));
                plan.changes
                    .push(format!("{} of {name}: {text}", kind.to_ascii_lowercase()));
            }
            None if server.modern => {
                plan.statements.push(stored_guard(input, name));
                commands.push(format!(
                    "MODIFY COLUMN {column} REMOVE {}",
                    l.default.as_ref().map_or("DEFAULT", |p| p.0.as_str())
                ));
                plan.changes.push(format!("remove the default of {name}"));
            }
            None => {
                plan.refused
                    .push(refusal(&clause, "this server cannot remove a column's default"));
                return;
            }
        }
    }
    if key(&d.comment) != key(&l.comment) {
        match &d.comment {
            Some((text, _)) => {
                commands.push(format!("COMMENT COLUMN {column} {text}"));
                plan.changes.push(format!("comment of {name}"));
            }
            None if server.modern => {
                commands.push(format!("MODIFY COLUMN {column} REMOVE COMMENT"));
                plan.changes.push(format!("remove the comment of {name}"));
            }
            None => {
                plan.refused
                    .push(refusal(&clause, "this server cannot remove a column's comment"));
                return;
            }
        }
    }
    for (word, declared, live) in [("CODEC", &d.codec, &l.codec), ("TTL", &d.ttl, &l.ttl)] {
        if key(declared) == key(live) {
            continue;
        }
        if !server.modern {
            plan.refused.push(refusal(
                &clause,
                &format!("this server cannot change a column's {word}"),
            ));
            return;
        }
        match declared {
            Some((text, _)) if word == "TTL" => {
                plan.refused.push(Refusal {
                    clause: clause.clone(),
                    why: ttl_refusal(&format!("the TTL of column {name}"), text),
                    alter: Some(format!(
                        "ALTER TABLE {}.{} MODIFY COLUMN {column} {} TTL {text}",
                        ident(input.database),
                        ident(input.name),
                        d.ty.0
                    )),
                });
                return;
            }
            Some((text, _)) => {
                commands.push(format!("MODIFY COLUMN {column} {} {word}{text}", d.ty.0));
                plan.changes
                    .push(format!("{} of {name}", word.to_ascii_lowercase()));
            }
            None => {
                commands.push(format!("MODIFY COLUMN {column} REMOVE {word}"));
                plan.changes
                    .push(format!("remove the {} of {name}", word.to_ascii_lowercase()));
            }
        }
    }
}

/// How a statement that checks the table before an ALTER starts (see [`GUARDS`]).
pub(crate) const GUARD_START: &str = "SELECT throwIf(count() > 0) AS ";

/// A check that runs before an ALTER, in the same script, and fails the script (`throwIf`,
/// ClickHouse code 395) where the ALTER would change or lose data: the name of its result (`says`:
/// the failure is told by it, since 18.16's `throwIf` takes no message) and what the failure
/// message explains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Guard {
    pub(crate) says: &'static str,
    pub(crate) explains: &'static str,
}

/// Before a type change on a modern server (see [`conversion_guard`]).
pub(crate) const VALUES_CONVERT: Guard = Guard {
    says: "values_that_do_not_convert",
    explains: "found values of the column whose type changes that do not convert to the declared type exactly \
               (they would fail the conversion, which leaves the table unreadable, or change value); the type \
               was not changed. Convert or remove those values (accurateCastOrNull finds them), or declare a type \
               that holds them",
};

/// Before a column's default expression changes or goes (see [`stored_guard`]).
pub(crate) const COLUMN_STORED: Guard = Guard {
    says: "parts_without_the_column",
    explains: "found parts of the table that do not store the column whose default changes (parts written \
               before the column was added): their rows read the column's current default, so changing it \
               would change those rows' values; the default was not changed. OPTIMIZE TABLE ... FINAL, or \
               ALTER TABLE ... MATERIALIZE COLUMN where the server has it, stores the column in every part; \
               then deploy again",
};

/// Before a column whose default changes at every read is added (see [`varying_default`]).
pub(crate) const NO_ROWS: Guard = Guard {
    says: "rows_without_the_column",
    explains: "found rows in the table, and the column it adds has a default that gives another value at each \
               call (now(), rand(), ...): the server computes it for those rows at every read until a merge \
               stores it, so each read, and each replica or pod, can see another value; the column was not \
               added. Add it with a statement of your own and store its values (ALTER TABLE ... MATERIALIZE \
               COLUMN), or declare a default that does not change",
};

/// Before a view is replaced on a server without `CREATE OR REPLACE VIEW` (see
/// [`replace_view_statements`]).
pub(crate) const IS_A_VIEW: Guard = Guard {
    says: "view_to_replace",
    explains: "found that the object of that name is not a plain view on this pod (it changed since the check, \
               or is another kind of object); nothing was replaced",
};

/// Before the names a view's replacement uses are dropped (see [`replace_view_statements`]).
pub(crate) const NAMES_FREE: Guard = Guard {
    says: "replacement_names_taken",
    explains: "found an object that is not a view under a name the replacement of a view uses (the view's name \
               followed by __clickhouse_schema_new or __clickhouse_schema_old); nothing was replaced. Rename \
               that object",
};

/// Before ALTERs ON CLUSTER (see [`hosts_guard`]).
pub(crate) const HOSTS_COMPARED: Guard = Guard {
    says: "cluster_hosts_not_compared",
    explains: "found more hosts in the cluster than the pods compared before the ALTERs ON CLUSTER (hosts \
               the pod selector does not match, or pods that are not Ready): what those hosts hold is not known, \
               and the ALTERs would reach them too; nothing was changed. Match every host of the cluster with \
               the selector, and deploy when they are Ready",
};

/// Every guard, for reading a failure.
pub(crate) const GUARDS: [Guard; 6] = [
    VALUES_CONVERT,
    COLUMN_STORED,
    NO_ROWS,
    IS_A_VIEW,
    NAMES_FREE,
    HOSTS_COMPARED,
];

/// The guard before ALTERs ON CLUSTER `cluster` planned from `compared` pods: the cluster has no
/// host beyond them (an ALTER ON CLUSTER reaches every host of `system.clusters`, compared or not:
/// a table there under a replaced view's name would be dropped).
pub(crate) fn hosts_guard(cluster: &str, compared: usize) -> String {
    guard_statement(
        HOSTS_COMPARED,
        &format!(
            "(SELECT count() AS hosts FROM system.clusters WHERE cluster = {}) WHERE hosts > {compared}",
            literal(cluster)
        ),
    )
}

/// `pod_plan` with [`hosts_guard`] before its first statement, under onCluster.
pub(crate) fn with_hosts_guard(pod_plan: &mut PodPlan, cluster: &str, compared: usize) {
    if let Some(first) = pod_plan.objects.iter_mut().find(|o| !o.statements.is_empty()) {
        first.statements.insert(0, hosts_guard(cluster, compared));
    }
}

/// The guard that `database.name` is a plain view (`View`, not a live, window or materialized
/// one, nor a table).
fn view_guard(database: &str, name: &str) -> String {
    guard_statement(
        IS_A_VIEW,
        &format!(
            "(SELECT count() AS views FROM system.tables WHERE database = {} AND name = {} AND engine = 'View') \
             WHERE views != 1",
            literal(database),
            literal(name)
        ),
    )
}

/// The statements that replace view `database.name` with one created from `body` on a server
/// without `CREATE OR REPLACE VIEW` (18.16). The new view is created beside the old one under a
/// name of its own and swapped in with one `RENAME`, so a failure before the swap leaves the old
/// view serving, and queries never meet a missing view; the old one is dropped after. Only views
/// (which hold no data) are dropped: the checks first make sure the object is a view, and that
/// the two names the replacement uses hold no table; a view left under them by a replacement that
/// stopped half way is dropped.
fn replace_view_statements(database: &str, name: &str, body: &str) -> Vec<String> {
    let (new, old) = (
        format!("{name}__clickhouse_schema_new"),
        format!("{name}__clickhouse_schema_old"),
    );
    let qualified = |n: &str| format!("{}.{}", ident(database), ident(n));
    let db = literal(database);
    vec![
        view_guard(database, name),
        guard_statement(
            NAMES_FREE,
            &format!(
                "system.tables WHERE database = {db} AND name IN ({}, {}) AND engine != 'View'",
                literal(&new),
                literal(&old)
            ),
        ),
        format!("DROP TABLE IF EXISTS {}", qualified(&new)),
        format!("DROP TABLE IF EXISTS {}", qualified(&old)),
        format!("CREATE VIEW {} {body}", qualified(&new)),
        format!(
            "RENAME TABLE {} TO {}, {} TO {}",
            qualified(name),
            qualified(&old),
            qualified(&new),
            qualified(name)
        ),
        format!("DROP TABLE {}", qualified(&old)),
    ]
}

/// A guard's statement: fails with `guard.says` where `from` (a `FROM ... WHERE ...` tail) counts
/// any row.
fn guard_statement(guard: Guard, from: &str) -> String {
    format!(
        "{GUARD_START}{} FROM {from} SETTINGS {GUARD_SETTINGS}",
        guard.says
    )
}

/// Settings of every check: a read or a time limit that ends it early must fail it, not let it
/// count only part of the table (`*_overflow_mode = 'break'` in the props' settings or a server
/// profile would). Both servers take a `SETTINGS` clause on a `SELECT`.
pub(crate) const GUARD_SETTINGS: &str = "read_overflow_mode = 'throw', timeout_overflow_mode = 'throw', \
                                         result_overflow_mode = 'throw', max_rows_to_read = 0, max_bytes_to_read = 0";

/// Functions whose result changes from call to call, or with the host or over time (lower case;
/// a name that starts with one of [`VARYING_PREFIXES`] is one too): a default calling one is
/// computed anew at every read of a part that does not store the column.
const VARYING_FUNCTIONS: &[&str] = &[
    "today",
    "yesterday",
    "uptime",
    "hostname",
    "fqdn",
    "getmacro",
    "serveruuid",
    "fakedata",
    "currentuser",
];

/// Beginnings of such functions' names: `now`, `now64`, `nowInBlock`; `rand`, `randUniform`,
/// `randomString`, ...; `generateUUIDv4`, `generateULID`, ...; `dictGet*` and `joinGet*` (their
/// value follows the dictionary or table).
const VARYING_PREFIXES: &[&str] = &["now", "rand", "generate", "dictget", "joinget"];

/// Whether default expression `text` calls a function whose value varies (see
/// [`VARYING_FUNCTIONS`]).
fn varying_default(text: &str) -> bool {
    let tokens: Vec<Token> = significant(text).collect();
    tokens.windows(2).any(|pair| {
        let name = pair[0].text(text).to_ascii_lowercase();
        pair[1].is_punct(text, "(")
            && (VARYING_FUNCTIONS.contains(&name.as_str())
                || VARYING_PREFIXES.iter().any(|p| name.starts_with(p)))
    })
}

/// The guard before changing or removing column `name`'s default: no active part of the table
/// lacks the column.
fn stored_guard(input: ObjectInput<'_>, name: &str) -> String {
    let (database, table) = (literal(input.database), literal(input.name));
    guard_statement(
        COLUMN_STORED,
        &format!(
            "system.parts WHERE database = {database} AND table = {table} AND active AND rows > 0 AND name NOT IN (SELECT name \
             FROM system.parts_columns WHERE database = {database} AND table = {table} AND active AND column = {})",
            literal(name)
        ),
    )
}

/// Base types (their name without its trailing digits: `IPv` for `IPv4`) whose conversion
/// `accurateCastOrNull` checks value by value: others (arrays, tuples, maps, ...) change with no
/// check before.
const CHECKED_TYPES: &[&str] = &[
    "Int",
    "UInt",
    "Float",
    "Decimal",
    "String",
    "FixedString",
    "Date",
    "DateTime",
    "UUID",
    "Bool",
    "IPv",
    "Enum",
];

/// A `SELECT` that fails when a value of column `name` does not convert to `ty` exactly, to run
/// before the `MODIFY COLUMN` that changes the type on a modern server. There the ALTER changes
/// the table's metadata at once and converts the parts in a mutation; a value that does not convert
/// fails the mutation, which is retried for ever and leaves the table unreadable, and a value out
/// of the new range would wrap. (18.16 converts inside the ALTER and changes nothing when a value
/// fails.) `None` for a type the check cannot cast to.
fn conversion_guard(input: ObjectInput<'_>, name: &str, from: &str, ty: &str) -> Option<String> {
    let unwrap = |t: &str, wrapper: &str| -> Option<String> {
        t.trim()
            .strip_prefix(wrapper)
            .and_then(|r| r.strip_suffix(')'))
            .map(|inner| inner.trim().to_owned())
    };
    // `LowCardinality(Nullable(T))` and the like: whether NULL is held, and the base type.
    let base = |t: &str| -> (bool, String) {
        let inner = unwrap(t, "LowCardinality(").unwrap_or_else(|| t.trim().to_owned());
        match unwrap(&inner, "Nullable(") {
            Some(base) => (true, base),
            None => (false, inner),
        }
    };
    let (nullable, to) = base(ty);
    let word: String = to.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
    let word = word.trim_end_matches(|c: char| c.is_ascii_digit());
    if !CHECKED_TYPES.contains(&word) {
        return None;
    }
    let column = ident(name);
    let cast = format!("accurateCastOrNull({column}, {})", literal(&to));
    let mut condition = format!("{cast} IS NULL");
    if nullable {
        condition = format!("({condition} AND {column} IS NOT NULL)");
    }
    // A value that converts but not back to itself changes (a Decimal's scale, a DateTime64's
    // fraction, a DateTime's time of day): unless it comes from text, which is parsed.
    let (_, from) = base(from);
    if !from.starts_with("String") && !from.starts_with("FixedString") {
        condition.push_str(&format!(
            " OR CAST({cast}, {}) != {column}",
            literal(&format!("Nullable({from})"))
        ));
    }
    Some(guard_statement(
        VALUES_CONVERT,
        &format!(
            "{}.{} WHERE {condition}",
            ident(input.database),
            ident(input.name)
        ),
    ))
}

/// Why a new or changed TTL is left to the user: on a modern server the ALTER materializes it on
/// every existing part (`materialize_ttl_after_modify`), and merges apply it anyway, so a TTL that
/// is new or shorter deletes rows (a column TTL resets values) already in the table. Removing a
/// TTL deletes nothing, and convergence does that by itself.
fn ttl_refusal(what: &str, declared: &str) -> String {
    format!(
        "{what} would become {declared}: the server applies a new TTL to the rows already in the table, so rows \
         (or a column's values) older than it are deleted. Convergence deletes no data; once you have checked what \
         it expires, run the ALTER as a statement of your own"
    )
}

/// An index, projection or constraint the declaration and the table hold differently.
fn plan_entry(
    input: ObjectInput<'_>,
    server: Server,
    kind: &str,
    entry_name: &str,
    name: &str,
    commands: &mut Vec<String>,
    plan: &mut ObjectPlan,
) {
    if !server.modern {
        plan.refused.push(refusal(
            &format!("column {name}"),
            &format!("this server has no ALTER for a {}", kind.to_ascii_lowercase()),
        ));
        return;
    }
    let id = ident(entry_name);
    let declared = entry(input.declared, name);
    let live = entry(input.live, name);
    if live.is_some() {
        commands.push(format!("DROP {kind} {id}"));
        if declared.is_none() {
            plan.changes.push(format!("drop {}", name.to_ascii_lowercase()));
        }
    }
    if let Some(declared) = declared {
        // The entry's text after its kind word: `ix id TYPE minmax GRANULARITY 1`.
        let body = declared
            .text
            .split_once(char::is_whitespace)
            .map_or("", |(_, rest)| rest.trim());
        commands.push(format!("ADD {kind} {body}"));
        if kind != "CONSTRAINT" {
            commands.push(format!("MATERIALIZE {kind} {id}"));
        }
        plan.changes.push(format!(
            "{} {}",
            if live.is_some() { "replace" } else { "add" },
            name.to_ascii_lowercase()
        ));
    }
}
