//! Verification of the live schema: does a pod hold the objects the statements declare, as they
//! declare them?
//!
//! An apply knows what it ran, not what is there: `CREATE TABLE IF NOT EXISTS` with a changed
//! `ORDER BY` succeeds and changes nothing, and a table dropped by hand goes unseen. So after the
//! statements ran on a pod, and on demand (`verify`, Alchemy's drift), every declared object is
//! looked up on the pod in one exec: one clickhouse-client run of a script (this module renders it
//! and reads its output; the reconcile runs it through the same transport as the statements).
//!
//! ClickHouse normalizes, we compare: the script creates a scratch copy of each declared object in
//! a scratch database of its own (`_clickhouse_schema_verify_<hex>`), reads back how the server
//! prints the copy and the live object (`system.tables.create_table_query`), and drops the scratch
//! database. Both prints come from the same printer, so spelling (case, quoting, comments,
//! numbers, line breaks) cancels out; [`crate::sql::definition`] removes the rest and names the parts
//! that differ. This works on every server version, 18.16 included, without `formatQuery`.
//!
//! A comparison never touches production data or state; what is created in scratch is limited:
//! - `Replicated*` engines are created with their plain engine (no ZooKeeper path is ever made),
//!   and the path and replica arguments are compared as text.
//! - Only local engines are created (the MergeTree family, Log family, Memory, Null, Set, Join,
//!   Buffer, Distributed, Merge, Dictionary, EmbeddedRocksDB, GenerateRandom). Any other engine
//!   (Kafka, RabbitMQ, NATS, S3Queue, MySQL, PostgreSQL, URL, S3, KeeperMap, ...) may connect or
//!   consume: its columns are created with `ENGINE = Null` and the engine and its clauses are
//!   compared as text, with every string literal in them hidden from messages.
//! - A materialized view is never created (it would receive production inserts): its query is
//!   normalized through a plain scratch view, its target and engine are compared as text.
//! - A view or table whose query calls a table function that connects (`remote`, `mysql`, `s3`,
//!   `url`, ...) and tables created `AS SELECT` are compared as text; dictionaries, live and window
//!   views too.
//! - A database is checked for existence; so is an object a later statement alters (its definition
//!   is then the ALTER's, not the CREATE's). An object a later statement drops, detaches, renames
//!   or exchanges is not looked up.
//!
//! Text comparison reads tokens (see [`crate::sql::definition`]), so it ignores case, comments, quoting
//! and spacing, but not what only the server can normalize (a type alias, `DEFAULT 1.0` against
//! `toFloat64(1)`). A scratch copy the server refuses (a Distributed table over a missing local
//! table on a newer server) falls back to text, and the report says so.
//!
//! This module writes the check's script and reads its output; its driver (`run`) runs it on a pod
//! over the transport. Nothing here imports from `transport`.

mod replication;
mod run;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::sql::clickhouse_text::{literal, unescape};
use crate::sql::declared::{Declaration, DeclarationForm, ObjectKind, StatementClass, classify};
use crate::sql::definition::{self, Definition, Difference, Scope, keywords_at};
use crate::sql::lexer::{Token, TokenKind, significant};
use crate::sql::redact::CREDENTIAL_KEYWORDS;
use replication::{ReplicaArgs, ServerFacts, is_replicated, replica_args, same_replication};

/// Prefix of every scratch database; the rest is a per-run hex id.
pub const SCRATCH_DATABASE_PREFIX: &str = "_clickhouse_schema_verify_";

/// Engines that only hold local data and connect nowhere when created: a scratch copy of a
/// table with one of these (its `Replicated` form reduced to the plain engine) is safe.
const LOCAL_ENGINES: &[&str] = &[
    "Log",
    "TinyLog",
    "StripeLog",
    "Memory",
    "Null",
    "Set",
    "Join",
    "Buffer",
    "Distributed",
    "Merge",
    "Dictionary",
    "EmbeddedRocksDB",
    "GenerateRandom",
];

/// Table functions that connect to another system when a query using them is analyzed.
const CONNECTING_FUNCTIONS: &[&str] = &[
    "remote",
    "remotesecure",
    "cluster",
    "clusterallreplicas",
    "mysql",
    "postgresql",
    "mongodb",
    "redis",
    "sqlite",
    "url",
    "urlcluster",
    "s3",
    "s3cluster",
    "gcs",
    "cosn",
    "oss",
    "azureblobstorage",
    "azureblobstoragecluster",
    "hdfs",
    "hdfscluster",
    "jdbc",
    "odbc",
    "file",
    "filecluster",
    "executable",
    "iceberg",
    "deltalake",
    "hudi",
    "input",
];

/// How an object was compared, as reports show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Compared {
    /// Both definitions as the server prints them (a scratch copy of the declaration).
    Server,
    /// Partly or wholly as parsed text (see the module header for when).
    Text,
    /// Only whether it exists.
    Existence,
}

/// What verification found for one object on one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ObjectStatus {
    /// Present, with the declared definition.
    Ok,
    /// Not on the pod.
    Missing,
    /// Present with another definition.
    Differs,
}

/// One declared object on one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct ObjectReport {
    /// `database.name`, or the database's name.
    pub name: String,
    /// `TABLE`, `VIEW`, `MATERIALIZED VIEW`, `DATABASE`, ...
    pub kind: String,
    /// Index of the statement that declares it (the last one, when several do).
    #[cfg_attr(feature = "napi", napi(ts_type = "number"))]
    pub statement_index: usize,
    /// What was found.
    #[cfg_attr(feature = "napi", napi(ts_type = "'ok' | 'missing' | 'differs'"))]
    pub status: ObjectStatus,
    /// How it was compared: `'server'` (both as the server prints them), `'text'` (partly or
    /// wholly as parsed text: engines that connect, materialized views' targets, dictionaries),
    /// `'existence'` (databases, objects a later statement alters).
    #[cfg_attr(feature = "napi", napi(ts_type = "'server' | 'text' | 'existence'"))]
    pub compared: Compared,
    /// The parts that differ (empty unless the status is `differs`), with string literals that
    /// may configure a connection and credentials hidden.
    pub differences: Vec<DifferenceReport>,
}

/// One part of an object that differs, as reports and errors carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct DifferenceReport {
    /// `column <name>`, `column order`, `ENGINE`, `ORDER BY`, `AS` (a view's query), ...
    pub clause: String,
    /// The declared text; empty when the declaration lacks it.
    pub declared: String,
    /// The text on the pod; empty when the pod lacks it.
    pub live: String,
}

/// What verification found on one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(
    feature = "napi",
    napi_derive::napi(object, object_to_js = false, object_from_js = false)
)]
pub struct PodReport {
    /// The pod's name.
    pub pod: String,
    /// Every declared object, in statement order.
    pub objects: Vec<ObjectReport>,
}

impl PodReport {
    /// Whether every object is as declared.
    pub fn is_ok(&self) -> bool {
        self.objects.iter().all(|o| o.status == ObjectStatus::Ok)
    }

    /// Whether the pod lacks any object (the statements would create it again).
    pub fn lacks_objects(&self) -> bool {
        self.objects.iter().any(|o| o.status == ObjectStatus::Missing)
    }
}

/// What the statements declare and how each object is compared: built once per call, used for
/// every pod.
#[derive(Debug, Clone, Default)]
pub struct VerifyPlan {
    checks: Vec<Check>,
    /// The script also prints the server's version (convergence needs it; see `crate::converge`).
    version: bool,
}

#[derive(Debug, Clone)]
struct Check {
    statement_index: usize,
    declaration: Declaration,
    how: How,
    /// The statement after the object's name.
    body: String,
}

#[derive(Debug, Clone)]
enum How {
    Existence,
    Compare {
        /// `CREATE <kind> <scratch>.o<i> <body>`, or none when nothing may be created.
        scratch: Option<(&'static str, String)>,
        /// The declaration as written, for the parts compared as text.
        declared: Definition,
        /// What the scratch copy is compared in.
        server: Scope<'static>,
        /// What the declared text is compared in.
        text: Scope<'static>,
        /// Compare the `Replicated` path and replica as text.
        replication: bool,
        /// Hide string literals of these clauses in messages (they may configure a connection).
        hide_literals_in: &'static [&'static str],
    },
}

const NOTHING: Scope<'static> = Scope {
    columns: false,
    except: &[],
    only: Some(&[]),
    plain_engine: false,
};
const COLUMNS_ONLY: Scope<'static> = Scope {
    columns: true,
    except: &[],
    only: Some(&[]),
    plain_engine: false,
};
const CLAUSES_ONLY: Scope<'static> = Scope {
    columns: false,
    except: &[],
    only: None,
    plain_engine: false,
};

impl VerifyPlan {
    /// The objects `statements` declare, run in `default_database`, and how each is compared.
    pub fn new(statements: &[String], default_database: &str) -> Self {
        let mut checks: Vec<Check> = Vec::new();
        for (index, sql) in statements.iter().enumerate() {
            match classify(sql, default_database) {
                StatementClass::Declares(declaration) => {
                    checks.retain(|c| c.declaration.qualified_name() != declaration.qualified_name());
                    let how = how(sql, &declaration, default_database);
                    let tokens: Vec<Token> = significant(sql).collect();
                    let body = body(sql, &tokens, definition::after_name(sql, &tokens));
                    checks.push(Check {
                        statement_index: index,
                        declaration,
                        how,
                        body,
                    });
                }
                StatementClass::Other { verb } => {
                    let (effect, names, databases) = later_effect(sql, default_database, &verb);
                    let named = |c: &Check| {
                        names.contains(&c.declaration.qualified_name())
                            || (databases && names.contains(&c.declaration.database))
                    };
                    match effect {
                        Effect::None => {}
                        Effect::Alters => {
                            for check in checks.iter_mut().filter(|c| named(c)) {
                                check.how = How::Existence;
                            }
                        }
                        Effect::Removes => checks.retain(|c| !named(c)),
                    }
                }
            }
        }
        Self {
            checks,
            version: false,
        }
    }

    /// The same plan, whose script also prints the server's `version()`: what ALTERs the server
    /// has depends on it (see [`crate::converge`]).
    pub fn with_server_version(mut self) -> Self {
        self.version = true;
        self
    }

    /// Whether there is anything to verify.
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// The number of objects verified.
    pub fn len(&self) -> usize {
        self.checks.len()
    }

    /// The script that verifies the objects on a pod, with `scratch` as the scratch database
    /// (a name from [`scratch_database`]). Run with `--multiquery --ignore-error`, so a scratch
    /// copy the server refuses does not stop the rest, and the scratch database is dropped
    /// whatever happened before.
    pub fn script(&self, scratch: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "CREATE DATABASE {scratch};");
        for (i, check) in self.checks.iter().enumerate() {
            if let How::Compare {
                scratch: Some((kind, body)),
                ..
            } = &check.how
            {
                let _ = writeln!(out, "CREATE {kind} {scratch}.o{i} {body};");
            }
        }
        let mut tables = format!("database = {}", literal(scratch));
        let mut databases = vec![literal(scratch)];
        for check in &self.checks {
            let d = &check.declaration;
            match &d.name {
                Some(name) => {
                    let _ = write!(
                        tables,
                        " OR (database = {} AND name = {})",
                        literal(&d.database),
                        literal(name)
                    );
                }
                None => databases.push(literal(&d.database)),
            }
        }
        let _ = writeln!(
            out,
            "SELECT 'table', database, name, create_table_query FROM system.tables WHERE {tables} FORMAT TabSeparated;"
        );
        let _ = writeln!(
            out,
            "SELECT 'database', name, '', '' FROM system.databases WHERE name IN ({}) FORMAT TabSeparated;",
            databases.join(", ")
        );
        // How the server expands a `Replicated` engine's path (see `replication`): its macros, and
        // for an argument-less engine its defaults (a table 18.16 lacks; it lacks such engines too).
        let engines = || {
            self.checks.iter().filter_map(|c| match &c.how {
                How::Compare {
                    replication: true,
                    declared,
                    ..
                } => declared.clause("ENGINE").and_then(replica_args),
                _ => None,
            })
        };
        if engines().next().is_some() {
            let _ = writeln!(
                out,
                "SELECT 'macro', macro, substitution, '' FROM system.macros FORMAT TabSeparated;"
            );
        }
        if engines().any(|a| a == ReplicaArgs::Default) {
            let _ = writeln!(
                out,
                "SELECT 'setting', name, value, '' FROM system.server_settings WHERE name IN ('default_replica_path', 'default_replica_name') FORMAT TabSeparated;"
            );
        }
        if self.version {
            let _ = writeln!(out, "SELECT 'version', version(), '', '' FORMAT TabSeparated;");
        }
        let _ = writeln!(out, "DROP DATABASE {scratch};");
        let _ = writeln!(out, "SELECT 'end', '', '', '' FORMAT TabSeparated;");
        out
    }

    /// Reads the script's output (stdout) for `pod`. `None` when it did not run to its end or
    /// the scratch database could not be created: then nothing can be said about the objects.
    pub fn read(&self, pod: &str, scratch: &str, stdout: &str) -> Result<PodReport, Unreadable> {
        let mut live: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut databases: Vec<String> = Vec::new();
        let mut facts = ServerFacts::default();
        let mut ended = false;
        for line in stdout.lines() {
            let fields: Vec<String> = line.split('\t').map(unescape).collect();
            match fields.first().map(String::as_str) {
                Some("table") if fields.len() == 4 => {
                    live.insert((fields[1].clone(), fields[2].clone()), fields[3].clone());
                }
                Some("database") if fields.len() >= 2 => databases.push(fields[1].clone()),
                Some("macro") if fields.len() >= 3 => {
                    facts.macros.insert(fields[1].clone(), fields[2].clone());
                }
                Some("setting") if fields.len() >= 3 => match fields[1].as_str() {
                    "default_replica_path" => facts.default_path = Some(fields[2].clone()),
                    "default_replica_name" => facts.default_replica = Some(fields[2].clone()),
                    _ => {}
                },
                Some("end") => ended = true,
                _ => {}
            }
        }
        if !ended {
            return Err(Unreadable::Incomplete);
        }
        if !databases.iter().any(|d| d == scratch) {
            return Err(Unreadable::NoScratchDatabase);
        }
        let objects = self
            .checks
            .iter()
            .enumerate()
            .map(|(i, check)| {
                let d = &check.declaration;
                let exists = match &d.name {
                    Some(name) => live.get(&(d.database.clone(), name.clone())),
                    None => databases.iter().find(|n| **n == d.database),
                };
                let scratch_copy = live.get(&(scratch.to_string(), format!("o{i}")));
                compare(check, exists, scratch_copy, &facts)
            })
            .collect();
        Ok(PodReport {
            pod: pod.to_string(),
            objects,
        })
    }

    /// For convergence: each compared object's declaration (as the server printed its scratch
    /// copy, or as written where it was compared as text) and its live definition, from the
    /// script's output; objects that are missing or only checked for existence are left out.
    pub fn definitions(&self, scratch: &str, stdout: &str) -> Vec<ObjectDefinitions> {
        let mut live: BTreeMap<(String, String), String> = BTreeMap::new();
        for line in stdout.lines() {
            let fields: Vec<String> = line.split('\t').map(unescape).collect();
            if fields.len() == 4 && fields[0] == "table" {
                live.insert((fields[1].clone(), fields[2].clone()), fields[3].clone());
            }
        }
        let mut out = Vec::new();
        for (i, check) in self.checks.iter().enumerate() {
            let d = &check.declaration;
            let (Some(name), How::Compare { declared, .. }) = (&d.name, &check.how) else {
                continue;
            };
            let Some(live_sql) = live.get(&(d.database.clone(), name.clone())) else {
                continue;
            };
            let copy = live.get(&(scratch.to_string(), format!("o{i}")));
            let printed = copy.is_some();
            let declared = match copy {
                Some(copy) => definition::parse(copy),
                None => declared.clone(),
            };
            out.push(ObjectDefinitions {
                statement_index: check.statement_index,
                database: d.database.clone(),
                name: name.clone(),
                kind: d.kind.as_sql().to_string(),
                declared,
                printed,
                live: definition::parse(live_sql),
                declared_body: check.body.clone(),
            });
        }
        out
    }

    /// The server's version the script printed, when it was asked to (see
    /// [`Self::with_server_version`]).
    pub fn server_version(stdout: &str) -> Option<String> {
        stdout.lines().find_map(|line| {
            let mut fields = line.split('\t');
            (fields.next() == Some("version"))
                .then(|| fields.next().map(unescape))
                .flatten()
        })
    }

    /// The statement that declares `object`, and how (for messages).
    pub(crate) fn declaration_of(&self, object: &ObjectReport) -> Option<&Declaration> {
        self.checks
            .iter()
            .find(|c| c.statement_index == object.statement_index)
            .map(|c| &c.declaration)
    }
}

/// One compared object's two definitions (see [`VerifyPlan::definitions`]).
#[derive(Debug, Clone)]
pub struct ObjectDefinitions {
    /// Index of the statement that declares it.
    pub statement_index: usize,
    /// Its database.
    pub database: String,
    /// Its name in the database.
    pub name: String,
    /// `TABLE`, `VIEW`, ...
    pub kind: String,
    /// The declaration: the scratch copy as the server printed it, or the statement as written.
    pub declared: Definition,
    /// `declared` is the server's print of a scratch copy (not the statement as written).
    pub printed: bool,
    /// The live object as the server printed it.
    pub live: Definition,
    /// The declaring statement after the object's name (what a replaced view is created from).
    pub declared_body: String,
}

/// Why a verification's output says nothing about the objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// The script stopped before its end (the server or the client failed).
    Incomplete,
    /// The scratch database could not be created (no `CREATE DATABASE` grant).
    NoScratchDatabase,
}

/// A scratch database name for one verification, from a seed that differs per run and pod.
pub fn scratch_database(seed: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(seed.as_bytes());
    let mut name = SCRATCH_DATABASE_PREFIX.to_string();
    for byte in &digest[..8] {
        let _ = write!(name, "{byte:02x}");
    }
    name
}

fn compare(
    check: &Check,
    live: Option<&String>,
    scratch_copy: Option<&String>,
    facts: &ServerFacts,
) -> ObjectReport {
    let d = &check.declaration;
    let report = |status, compared, differences| ObjectReport {
        name: d.qualified_name(),
        kind: d.kind.as_sql().to_string(),
        statement_index: check.statement_index,
        status,
        compared,
        differences,
    };
    let Some(live) = live else {
        let compared = match check.how {
            How::Existence => Compared::Existence,
            How::Compare { scratch: Some(_), .. } => Compared::Server,
            How::Compare { .. } => Compared::Text,
        };
        return report(ObjectStatus::Missing, compared, Vec::new());
    };
    let How::Compare {
        scratch,
        declared,
        server,
        text,
        replication,
        hide_literals_in,
    } = &check.how
    else {
        return report(ObjectStatus::Ok, Compared::Existence, Vec::new());
    };
    let live_definition = definition::parse(live);
    let mut differences = Vec::new();
    let mut compared = Compared::Server;
    match (scratch, scratch_copy) {
        (Some(_), Some(copy)) => {
            differences.extend(definition::differences_in(
                &definition::parse(copy),
                &live_definition,
                *server,
            ));
        }
        // Refused in scratch (or never created): the server's parts are compared as text too.
        (Some(_), None) => {
            compared = Compared::Text;
            differences.extend(definition::differences_in(declared, &live_definition, *server));
        }
        (None, _) => compared = Compared::Text,
    }
    if *text != NOTHING {
        if compared == Compared::Server && text.only != Some(&[]) {
            compared = Compared::Text;
        }
        for difference in definition::differences_in(declared, &live_definition, *text) {
            if !differences
                .iter()
                .any(|d: &Difference| d.clause == difference.clause)
            {
                differences.push(difference);
            }
        }
    }
    if *replication
        && let (Some(d), Some(l)) = (declared.clause("ENGINE"), live_definition.clause("ENGINE"))
        && !same_replication(
            d,
            l,
            &check.declaration.database,
            check.declaration.name.as_deref().unwrap_or_default(),
            facts,
        )
        && !differences.iter().any(|x| x.clause == "ENGINE")
    {
        differences.push(Difference {
            clause: "ENGINE".into(),
            declared: d.text.clone(),
            live: l.text.clone(),
        });
    }
    // A materialized view's definer and security are the server's when the declaration leaves
    // them out: a refreshable one is printed `DEFINER = <the creating user> SQL SECURITY DEFINER`.
    if d.kind == ObjectKind::MaterializedView {
        differences.retain(|x| {
            !(x.declared.is_empty()
                && (x.clause == "DEFINER"
                    || (x.clause == "SQL SECURITY" && x.live.eq_ignore_ascii_case("DEFINER"))))
        });
    }
    let differences: Vec<DifferenceReport> = differences
        .into_iter()
        .map(|d| {
            let hide = hide_literals_in.contains(&d.clause.as_str());
            DifferenceReport {
                declared: hidden(&d.declared, hide),
                live: hidden(&d.live, hide),
                clause: d.clause,
            }
        })
        .collect();
    let status = if differences.is_empty() {
        ObjectStatus::Ok
    } else {
        ObjectStatus::Differs
    };
    report(status, compared, differences)
}

/// How `sql`, which declares `declaration`, is compared.
fn how(sql: &str, declaration: &Declaration, default_database: &str) -> How {
    let tokens: Vec<Token> = significant(sql).collect();
    let body_at = definition::after_name(sql, &tokens);
    let mut declared = definition::parse(sql);
    // `TO t` names a table of the database the statement runs in; the server prints it `TO db.t`.
    if let Some(to) = declared.clauses.iter_mut().find(|c| c.name == "TO")
        && !to.part.key.contains(" . ")
        && !to.part.key.is_empty()
    {
        to.part.key = format!("{default_database} . {}", to.part.key);
        to.part.text = format!("{}.{}", quoted_name(default_database), to.part.text);
    }
    let query_connects = connects(sql, &tokens[body_at.min(tokens.len())..]);
    let text_all = |hide: &'static [&'static str]| How::Compare {
        scratch: None,
        declared: declared.clone(),
        server: NOTHING,
        text: Scope::ALL,
        replication: false,
        hide_literals_in: hide,
    };
    match declaration.kind {
        ObjectKind::Database => How::Existence,
        _ if matches!(
            declaration.form,
            DeclarationForm::Attach | DeclarationForm::AttachIfNotExists
        ) && declared.columns.is_empty()
            && declared.clauses.is_empty() =>
        {
            How::Existence
        }
        ObjectKind::Dictionary | ObjectKind::LiveView | ObjectKind::WindowView => {
            text_all(&["SOURCE", "AS", "ENGINE", "SETTINGS"])
        }
        ObjectKind::View if query_connects => text_all(&["AS"]),
        ObjectKind::View => How::Compare {
            scratch: Some(("VIEW", body(sql, &tokens, body_at))),
            declared,
            server: Scope::ALL,
            text: NOTHING,
            replication: false,
            hide_literals_in: &[],
        },
        ObjectKind::MaterializedView => match declared.clause("AS") {
            Some(_) if !query_connects => How::Compare {
                scratch: Some(("VIEW", format!("AS {}", query_source(sql, &tokens)))),
                declared,
                server: Scope {
                    columns: false,
                    except: &[],
                    only: Some(&["AS"]),
                    plain_engine: false,
                },
                text: Scope {
                    columns: false,
                    except: &["AS"],
                    only: None,
                    plain_engine: false,
                },
                replication: false,
                hide_literals_in: &[],
            },
            _ => text_all(&["AS"]),
        },
        ObjectKind::Table => {
            let engine = declared
                .clause("ENGINE")
                .and_then(|e| definition::engine_parts(&e.text));
            let as_select = declared.clause("AS").is_some_and(|q| {
                let first = q.key.split(' ').next().unwrap_or_default();
                first == "SELECT" || first == "WITH" || q.key.contains('(')
            });
            // Without an ENGINE clause, `AS other` copies other's engine, whatever it is: only a
            // table with neither is created in scratch with the server's default engine.
            let local = match &engine {
                Some((name, _)) => is_local_engine(name),
                None => declared.clause("AS").is_none(),
            };
            if as_select || query_connects {
                return text_all(&["AS", "ENGINE", "SETTINGS"]);
            }
            if local {
                let replicated = engine.as_ref().is_some_and(|(n, _)| is_replicated(n));
                How::Compare {
                    scratch: Some(("TABLE", table_body(sql, &tokens, body_at, replicated))),
                    declared,
                    server: Scope {
                        plain_engine: replicated,
                        ..Scope::ALL
                    },
                    text: NOTHING,
                    replication: replicated,
                    hide_literals_in: &[],
                }
            } else if !declared.columns.is_empty() {
                How::Compare {
                    scratch: Some((
                        "TABLE",
                        format!("({}) ENGINE = Null", column_source(sql, &tokens, body_at)),
                    )),
                    declared,
                    server: COLUMNS_ONLY,
                    text: CLAUSES_ONLY,
                    replication: false,
                    hide_literals_in: &["ENGINE", "SETTINGS"],
                }
            } else {
                text_all(&["ENGINE", "SETTINGS"])
            }
        }
    }
}

fn is_local_engine(name: &str) -> bool {
    let plain = name
        .strip_prefix("Replicated")
        .filter(|p| !p.is_empty())
        .unwrap_or(name);
    plain.ends_with("MergeTree") || LOCAL_ENGINES.contains(&plain)
}

/// Whether the tokens call a table function that connects to another system.
fn connects(sql: &str, tokens: &[Token]) -> bool {
    tokens.windows(2).any(|w| {
        w[0].kind == TokenKind::Word
            && w[1].is_punct(sql, "(")
            && CONNECTING_FUNCTIONS.contains(&w[0].text(sql).to_ascii_lowercase().as_str())
    })
}

/// The statement's source after the name (its columns and clauses), without a trailing `;`: what a
/// rebuild creates `<table>__new` from.
pub(crate) fn statement_body(sql: &str, tokens: &[Token], at: usize) -> String {
    body(sql, tokens, at)
}

/// [`statement_body`] with a `Replicated` engine reduced to its plain one: a rebuild's staging
/// table, which must never share the new table's ZooKeeper path.
pub(crate) fn plain_table_body(sql: &str, tokens: &[Token], at: usize) -> String {
    let replicated = definition::parse(sql)
        .clause("ENGINE")
        .and_then(|e| definition::engine_parts(&e.text))
        .is_some_and(|(n, _)| is_replicated(&n));
    table_body(sql, tokens, at, replicated)
}

/// Whether a statement that declares nothing alters, drops, detaches, renames or exchanges the
/// object `qualified` (or its database).
pub(crate) fn changes_later(sql: &str, default_database: &str, verb: &str, qualified: &str) -> bool {
    let (effect, names, databases) = later_effect(sql, default_database, verb);
    let database = qualified.split_once('.').map_or(qualified, |(d, _)| d);
    !matches!(effect, Effect::None)
        && (names.iter().any(|n| n == qualified) || (databases && names.iter().any(|n| n == database)))
}

fn body(sql: &str, tokens: &[Token], at: usize) -> String {
    match (
        tokens.get(at),
        tokens.iter().rev().find(|t| !t.is_punct(sql, ";")),
    ) {
        (Some(first), Some(last)) if last.end > first.start => sql[first.start..last.end].to_string(),
        _ => String::new(),
    }
}

/// The body of a table's scratch copy: a `Replicated` engine becomes its plain engine, without
/// the path and replica arguments, so no ZooKeeper path is ever created.
fn table_body(sql: &str, tokens: &[Token], at: usize, replicated: bool) -> String {
    let text = body(sql, tokens, at);
    if !replicated {
        return text;
    }
    let offset = tokens.get(at).map(|t| t.start).unwrap_or(0);
    // The engine's name token, at depth 0, after `ENGINE [=]`.
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(at) {
        if t.is_punct(sql, "(") {
            depth += 1;
        } else if t.is_punct(sql, ")") {
            depth = depth.saturating_sub(1);
        }
        if depth != 0 || !t.is_keyword(sql, "ENGINE") {
            continue;
        }
        let name_at = if tokens.get(i + 1).is_some_and(|t| t.is_punct(sql, "=")) {
            i + 2
        } else {
            i + 1
        };
        let Some(name) = tokens.get(name_at) else { break };
        let plain = &name.text(sql)["Replicated".len()..];
        let mut replaced = String::new();
        replaced.push_str(&sql[offset..name.start]);
        replaced.push_str(plain);
        // Arguments: drop the first two (path and replica), when written (see
        // `replication::path_argument_count`).
        if tokens.get(name_at + 1).is_some_and(|t| t.is_punct(sql, "("))
            && tokens
                .get(name_at + 2)
                .is_some_and(|t| t.kind == TokenKind::StringLiteral)
        {
            let mut depth = 0usize;
            let mut commas = Vec::new();
            let mut close = None;
            for (j, t) in tokens.iter().enumerate().skip(name_at + 1) {
                if t.is_punct(sql, "(") {
                    depth += 1;
                } else if t.is_punct(sql, ")") {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(j);
                        break;
                    }
                } else if depth == 1 && t.is_punct(sql, ",") {
                    commas.push(j);
                }
            }
            let Some(close) = close else { return text };
            let rest_from = match commas.get(1) {
                Some(&second) => {
                    replaced.push('(');
                    tokens[second + 1].start
                }
                None => tokens[close].end,
            };
            let end_of_body = tokens
                .iter()
                .rev()
                .find(|t| !t.is_punct(sql, ";"))
                .map_or(sql.len(), |t| t.end);
            replaced.push_str(&sql[rest_from..end_of_body]);
        } else {
            let end_of_body = tokens
                .iter()
                .rev()
                .find(|t| !t.is_punct(sql, ";"))
                .map_or(sql.len(), |t| t.end);
            replaced.push_str(&sql[name.end..end_of_body]);
        }
        return replaced;
    }
    text
}

/// The column list's source (inside its parentheses).
fn column_source(sql: &str, tokens: &[Token], at: usize) -> String {
    let mut at = at;
    if tokens.get(at).is_some_and(|t| t.is_keyword(sql, "TO")) {
        at += if tokens.get(at + 2).is_some_and(|t| t.is_punct(sql, ".")) {
            4
        } else {
            2
        };
    }
    let Some(open) = tokens.get(at).filter(|t| t.is_punct(sql, "(")) else {
        return String::new();
    };
    let mut depth = 0usize;
    for t in &tokens[at..] {
        if t.is_punct(sql, "(") {
            depth += 1;
        } else if t.is_punct(sql, ")") {
            depth -= 1;
            if depth == 0 {
                return sql[open.end..t.start].to_string();
            }
        }
    }
    String::new()
}

/// The source of a view's query: everything after its top-level `AS`, without a trailing `;`.
fn query_source(sql: &str, tokens: &[Token]) -> String {
    let mut depth = 0usize;
    let start = definition::after_name(sql, tokens);
    for (i, t) in tokens.iter().enumerate().skip(start) {
        if t.is_punct(sql, "(") {
            depth += 1;
        } else if t.is_punct(sql, ")") {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && keywords_at(sql, tokens, i, &["AS"]) {
            return body(sql, tokens, i + 1);
        }
    }
    String::new()
}

/// What a statement that declares nothing does to objects declared before it.
enum Effect {
    None,
    /// `ALTER`: the object's definition is now the ALTER's.
    Alters,
    /// `DROP`, `DETACH`, `RENAME`, `EXCHANGE`: the object (or database) is gone or renamed.
    Removes,
}

/// The objects an `ALTER`, `DROP`, `DETACH`, `RENAME` or `EXCHANGE` statement names.
/// The third value says the names are databases.
fn later_effect(sql: &str, default_database: &str, verb: &str) -> (Effect, Vec<String>, bool) {
    let effect = match verb {
        "ALTER" => Effect::Alters,
        "DROP" | "DETACH" | "RENAME" | "EXCHANGE" => Effect::Removes,
        _ => return (Effect::None, Vec::new(), false),
    };
    let tokens: Vec<Token> = significant(sql).collect();
    let name_of = |t: &Token| match t.quote(sql) {
        Some(b'\'') => None,
        Some(_) => Some(t.body(sql).to_string()),
        None if t.kind == TokenKind::Word => Some(t.text(sql).to_string()),
        None => None,
    };
    const SKIP: &[&str] = &[
        "ALTER",
        "DROP",
        "DETACH",
        "RENAME",
        "EXCHANGE",
        "TABLE",
        "TABLES",
        "VIEW",
        "DICTIONARY",
        "DICTIONARIES",
        "DATABASE",
        "IF",
        "EXISTS",
        "TEMPORARY",
        "MATERIALIZED",
        "TO",
        "AND",
        "ON",
        "CLUSTER",
        "PERMANENTLY",
        "SYNC",
        "NO",
        "DELAY",
    ];
    let database_statement = tokens.iter().take(3).any(|t| t.is_keyword(sql, "DATABASE"));
    let mut names = Vec::new();
    let mut i = 0;
    // ALTER names one object; the others name every object they list (a pair per RENAME).
    let only_first = matches!(effect, Effect::Alters);
    while i < tokens.len() {
        let t = &tokens[i];
        if t.kind == TokenKind::Word && SKIP.iter().any(|k| t.is_keyword(sql, k)) && names.is_empty() {
            i += 1;
            continue;
        }
        if t.is_keyword(sql, "ON") && tokens.get(i + 1).is_some_and(|n| n.is_keyword(sql, "CLUSTER")) {
            i += 3;
            continue;
        }
        let Some(first) = name_of(t) else {
            i += 1;
            continue;
        };
        if tokens.get(i + 1).is_some_and(|p| p.is_punct(sql, "."))
            && let Some(second) = tokens.get(i + 2).and_then(name_of)
        {
            names.push(format!("{first}.{second}"));
            i += 3;
        } else if database_statement {
            names.push(first);
            i += 1;
        } else {
            names.push(format!("{default_database}.{first}"));
            i += 1;
        }
        if only_first {
            break;
        }
        // Skip to the next name: `TO`, `AND` or `,` comes between names.
        while i < tokens.len()
            && !(tokens[i].is_keyword(sql, "TO")
                || tokens[i].is_keyword(sql, "AND")
                || tokens[i].is_punct(sql, ","))
        {
            i += 1;
        }
        i += 1;
    }
    (effect, names, database_statement)
}

/// `name` as an identifier in a message: backquoted unless it is a plain word.
fn quoted_name(name: &str) -> String {
    if !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
    {
        name.to_string()
    } else {
        format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
    }
}

/// `text` for a message: every string literal replaced when `all_literals`, and always the
/// value after a credential keyword (`password = '…'`).
fn hidden(text: &str, all_literals: bool) -> String {
    let tokens: Vec<Token> = significant(text).collect();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (i, t) in tokens.iter().enumerate() {
        let after_credential =
            tokens[..i].iter().rev().take(2).any(|p| {
                p.kind == TokenKind::Word && CREDENTIAL_KEYWORDS.iter().any(|k| p.is_keyword(text, k))
            });
        let secret = t.kind == TokenKind::StringLiteral && (all_literals || after_credential);
        if secret {
            out.push_str(&text[last..t.start]);
            out.push_str("'<hidden>'");
            last = t.end;
        }
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests;
