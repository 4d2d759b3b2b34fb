//! Declaration-time rules on one statement's shape that a current server would otherwise break at
//! apply time, or silently.
//!
//! - One entry, one statement. A statement runs as one clickhouse-client call; 18.16 refused a
//!   second statement in it (code 62), a current client (multi-statement input is its default
//!   since 2024) runs both, so `CREATE ...; DROP ...` in one entry would run a statement the
//!   ledger, the live-schema check and the fingerprint's reading never see as one. A `;` inside a
//!   literal, a quoted name or a comment is no separator, and one trailing `;` is allowed.
//! - A `Replicated*` table engine without arguments takes the server's default path
//!   `/clickhouse/tables/{uuid}/{shard}`, and a `{uuid}` path needs the table's UUID, which only an
//!   ON CLUSTER statement (its initiator sends one), an explicit `UUID '…'` or a Replicated
//!   database provides: a fanout statement that creates such a table in an Atomic or Ordinary
//!   database is refused by the server (code 36, BAD_ARGUMENTS) on every pod. Refused here when the
//!   statements themselves say what the database's engine is (a `CREATE DATABASE` among them);
//!   otherwise the server's own error stands.
//! - `ON CLUSTER` on an object of a `Replicated` database is refused by the server (code 80): such
//!   a database replicates its DDL by itself. Refused here when the statements create it so.
//! - For the same reason a fanout statement on an object of a `Replicated` database is refused
//!   when the statements create it so: every pod's server would put the statement in the
//!   database's DDL log once more (before it checks `IF NOT EXISTS`), and each pod's answer is a
//!   table of every replica's status. Running such statements once per database is not built
//!   (neither engine the tests run can create a Replicated database: 18.16 has no such engine,
//!   chdb has no interserver address), so it is refused rather than guessed at.
//!
//! Like the onCluster check, these read tokens, never raw text.

use crate::sql::declared::{ObjectKind, StatementClass, classify};
use crate::sql::definition::{self, path_argument_count};
use crate::sql::lexer::{Token, significant};

/// `Err(reason)` when `sql` holds more than one statement. The reason follows the field's path
/// (`statements[2] holds ...`).
pub fn single_statement(sql: &str) -> Result<(), String> {
    let tokens: Vec<Token> = significant(sql).collect();
    let Some(at) = tokens.iter().position(|t| t.is_punct(sql, ";")) else {
        return Ok(());
    };
    let Some(next) = tokens.get(at + 1) else {
        return Ok(());
    };
    let (line, column) = line_column(sql, next.start);
    Err(format!(
        "holds more than one statement: SQL at line {line}, column {column} follows the ';' at byte {}; \
         a current clickhouse-client runs every statement of the text (18.16 refused them), so each \
         must be an entry of its own: split it at that ';'",
        tokens[at].start
    ))
}

fn line_column(sql: &str, at: usize) -> (usize, usize) {
    let before = &sql[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// What the statements say about the engine of the database `name`: `Some(engine)` (its name,
/// or empty when written without one, which a current server makes Atomic) when one of them
/// creates it, `None` when none does.
pub fn database_engine(statements: &[&str], name: &str, default_database: &str) -> Option<String> {
    statements.iter().find_map(|sql| {
        let StatementClass::Declares(d) = classify(sql, default_database) else {
            return None;
        };
        if d.kind != ObjectKind::Database || d.database != name {
            return None;
        }
        let tokens: Vec<Token> = significant(sql).collect();
        let engine = tokens
            .iter()
            .position(|t| t.is_keyword(sql, "ENGINE"))
            .and_then(|i| {
                let at = if tokens.get(i + 1).is_some_and(|t| t.is_punct(sql, "=")) {
                    i + 2
                } else {
                    i + 1
                };
                tokens.get(at).map(|t| t.text(sql).to_string())
            });
        Some(engine.unwrap_or_default())
    })
}

/// `Err(reason)` when `sql`, run on every pod without `ON CLUSTER`, creates a table whose
/// `Replicated*` engine needs the table's UUID (no arguments, or `{uuid}` in its path) in a
/// database the statements create with another engine than `Replicated`.
pub fn replicated_path_without_uuid(
    sql: &str,
    statements: &[&str],
    default_database: &str,
) -> Result<(), String> {
    let StatementClass::Declares(d) = classify(sql, default_database) else {
        return Ok(());
    };
    if d.kind != ObjectKind::Table {
        return Ok(());
    }
    let tokens: Vec<Token> = significant(sql).collect();
    // The UUID clause and ON CLUSTER come before the body: `after_name` skips both.
    let body_at = definition::after_name(sql, &tokens);
    let head = &tokens[..body_at.min(tokens.len())];
    if head
        .iter()
        .any(|t| t.is_keyword(sql, "UUID") || t.is_keyword(sql, "CLUSTER"))
    {
        return Ok(());
    }
    let Some(engine) = definition::parse(sql).clause("ENGINE").cloned() else {
        return Ok(());
    };
    let Some((name, args)) = definition::engine_parts(&engine.text) else {
        return Ok(());
    };
    if !definition::is_replicated(&name) {
        return Ok(());
    }
    let why = if path_argument_count(&args) == 0 {
        format!("{name} without a path takes the server's default '/clickhouse/tables/{{uuid}}/{{shard}}'")
    } else if args[0].key.contains("{uuid}") {
        format!("{name}'s path {} holds {{uuid}}", args[0].text)
    } else {
        return Ok(());
    };
    let database_engine = match database_engine(statements, &d.database, default_database) {
        Some(e) if e.starts_with("Replicated") => return Ok(()),
        Some(e) if e.is_empty() => "Atomic, the default".to_string(),
        Some(e) => e,
        None => return Ok(()),
    };
    Err(format!(
        "creates {} with {why}, and a server refuses {{uuid}} (code 36, BAD_ARGUMENTS) in a statement run on \
         each pod without ON CLUSTER in a database that is not Replicated ({} is {database_engine}): write \
         the path out, e.g. ENGINE = {name}('/clickhouse/tables/{{shard}}/{{database}}/{{table}}', '{{replica}}'{}), \
         or use execution.mode 'onCluster' with ON CLUSTER",
        d.qualified_name(),
        d.database,
        if args.len() > path_argument_count(&args) {
            format!(
                ", {}",
                args[path_argument_count(&args)..]
                    .iter()
                    .map(|a| a.text.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            String::new()
        }
    ))
}

/// `Err(reason)` when `sql` runs `ON CLUSTER` on an object of a database the statements create
/// with the `Replicated` engine: such a database replicates its DDL by itself, and the server
/// refuses `ON CLUSTER` there (code 80, INCORRECT_QUERY). Creating the database itself `ON CLUSTER`
/// is allowed.
pub fn on_cluster_in_replicated_database(
    sql: &str,
    statements: &[&str],
    default_database: &str,
) -> Result<(), String> {
    let tokens: Vec<Token> = significant(sql).collect();
    let on_cluster = tokens
        .windows(2)
        .any(|w| w[0].is_keyword(sql, "ON") && w[1].is_keyword(sql, "CLUSTER"));
    if !on_cluster {
        return Ok(());
    }
    let StatementClass::Declares(d) = classify(sql, default_database) else {
        return Ok(());
    };
    if d.kind == ObjectKind::Database {
        return Ok(());
    }
    match database_engine(statements, &d.database, default_database) {
        Some(engine) if engine == "Replicated" => Err(format!(
            "creates {} ON CLUSTER in database {}, which the statements create with ENGINE = Replicated: \
             such a database replicates every DDL to its replicas by itself, and the server refuses ON \
             CLUSTER there (code 80, INCORRECT_QUERY); remove ON CLUSTER from this statement",
            d.qualified_name(),
            d.database
        )),
        _ => Ok(()),
    }
}

/// The database of the object a DDL statement acts on (`CREATE`/`ATTACH` of a table, view or
/// dictionary; `ALTER TABLE`, `DROP TABLE|VIEW|DICTIONARY`, `TRUNCATE TABLE`, `RENAME TABLE` and
/// `EXCHANGE TABLES` of their first name), `None` for any other statement, databases included.
fn object_database(sql: &str, default_database: &str) -> Option<String> {
    if let StatementClass::Declares(d) = classify(sql, default_database) {
        return (d.kind != ObjectKind::Database).then_some(d.database);
    }
    let tokens: Vec<Token> = significant(sql).collect();
    let kw = |i: usize, word: &str| tokens.get(i).is_some_and(|t| t.is_keyword(sql, word));
    let dropped = kw(0, "DROP") && (kw(1, "TABLE") || kw(1, "VIEW") || kw(1, "DICTIONARY"));
    let renamed = (kw(0, "RENAME") && kw(1, "TABLE")) || (kw(0, "EXCHANGE") && kw(1, "TABLES"));
    let mut at = if kw(0, "ALTER") || kw(0, "TRUNCATE") {
        usize::from(kw(1, "TABLE")) + 1
    } else if dropped || renamed {
        2
    } else {
        return None;
    };
    if kw(at, "TEMPORARY") {
        return None;
    }
    if kw(at, "IF") && kw(at + 1, "EXISTS") {
        at += 2;
    }
    let name = |t: &Token| {
        let text = t.text(sql);
        text.strip_prefix('`')
            .and_then(|s| s.strip_suffix('`'))
            .or_else(|| text.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
            .unwrap_or(text)
            .to_string()
    };
    let first = tokens.get(at)?;
    if tokens.get(at + 1).is_some_and(|t| t.is_punct(sql, ".")) {
        Some(name(first))
    } else {
        Some(default_database.to_string())
    }
}

/// `Err(reason)` when `sql`, run on every pod without `ON CLUSTER`, acts on an object of a
/// database the statements create with the `Replicated` engine (see the module header).
pub fn fanout_in_replicated_database(
    sql: &str,
    statements: &[&str],
    default_database: &str,
) -> Result<(), String> {
    let tokens: Vec<Token> = significant(sql).collect();
    if tokens
        .windows(2)
        .any(|w| w[0].is_keyword(sql, "ON") && w[1].is_keyword(sql, "CLUSTER"))
    {
        return Ok(()); // on_cluster_in_replicated_database speaks for it
    }
    let Some(database) = object_database(sql, default_database) else {
        return Ok(());
    };
    match database_engine(statements, &database, default_database) {
        Some(engine) if engine == "Replicated" => Err(format!(
            "acts on an object of database {database}, which the statements create with ENGINE = \
             Replicated: such a database replicates every DDL to all its replicas by itself, so running \
             this statement on every pod (execution.mode 'fanout') would put it in the database's DDL \
             log once per pod; this resource does not run statements once per Replicated database: \
             create the database's objects outside this resource, or use a database of another engine \
             with Replicated tables"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fanout_ddl_in_a_replicated_database_is_refused_naming_the_database() {
        let db = "CREATE DATABASE IF NOT EXISTS rdb ENGINE = Replicated('/db/rdb', '{shard}', '{replica}')";
        let all = |sql| [db, sql];
        for sql in [
            "CREATE TABLE IF NOT EXISTS rdb.t (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id",
            "CREATE VIEW `rdb`.v AS SELECT 1",
            "ALTER TABLE rdb.t ADD COLUMN IF NOT EXISTS x UInt8",
            "DROP TABLE IF EXISTS rdb.t",
            "RENAME TABLE rdb.t TO rdb.u",
            "TRUNCATE TABLE rdb.t",
        ] {
            let err = fanout_in_replicated_database(sql, &all(sql), "default").unwrap_err();
            assert!(err.contains("object of database rdb"), "{sql}: {err}");
            assert!(err.contains("DDL log once per pod"), "{sql}: {err}");
        }
        // A table in the default database, when `client.database` is the Replicated one.
        let bare = "CREATE TABLE t (id UInt64) ENGINE = Memory";
        assert!(fanout_in_replicated_database(bare, &all(bare), "rdb").is_err());
        // The database itself, ON CLUSTER (the other rule's), other databases, other statements: fine.
        for sql in [
            db,
            "CREATE TABLE rdb.t ON CLUSTER main (id UInt64) ENGINE = Memory",
            "CREATE TABLE app.t (id UInt64) ENGINE = Memory",
            "ALTER TABLE t ADD COLUMN x UInt8",
            "INSERT INTO rdb.t VALUES (1)",
            "DROP DATABASE IF EXISTS rdb",
        ] {
            assert_eq!(
                fanout_in_replicated_database(sql, &all(sql), "default"),
                Ok(()),
                "{sql}"
            );
        }
        // An Atomic database of the same name, or none declared: the server decides.
        let atomic = "CREATE DATABASE rdb ENGINE = Atomic";
        let t = "CREATE TABLE rdb.t (id UInt64) ENGINE = Memory";
        assert_eq!(fanout_in_replicated_database(t, &[atomic, t], "default"), Ok(()));
        assert_eq!(fanout_in_replicated_database(t, &[t], "default"), Ok(()));
    }

    #[test]
    fn on_cluster_in_a_replicated_database_is_refused_naming_the_object() {
        let db = "CREATE DATABASE IF NOT EXISTS rdb ON CLUSTER main ENGINE = Replicated('/db/rdb', '{shard}', '{replica}')";
        let t = "CREATE TABLE IF NOT EXISTS rdb.t ON CLUSTER main (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id";
        let err = on_cluster_in_replicated_database(t, &[db, t], "default").unwrap_err();
        assert!(err.contains("creates rdb.t ON CLUSTER in database rdb"), "{err}");
        assert!(err.contains("code 80"), "{err}");
        // The database itself, a table without ON CLUSTER, another database: fine.
        assert_eq!(on_cluster_in_replicated_database(db, &[db, t], "default"), Ok(()));
        let plain = "CREATE TABLE IF NOT EXISTS rdb.t (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id";
        assert_eq!(
            on_cluster_in_replicated_database(plain, &[db, plain], "default"),
            Ok(())
        );
        let other = "CREATE TABLE IF NOT EXISTS app.t ON CLUSTER main (id UInt64) ENGINE = Memory";
        assert_eq!(
            on_cluster_in_replicated_database(
                other,
                &[db, "CREATE DATABASE app ON CLUSTER main", other],
                "default"
            ),
            Ok(())
        );
    }

    #[test]
    fn one_statement_with_or_without_a_trailing_semicolon_is_one() {
        for sql in [
            "CREATE TABLE t (id UInt64) ENGINE = Memory",
            "CREATE TABLE t (id UInt64) ENGINE = Memory;",
            "CREATE TABLE t (id UInt64) ENGINE = Memory ;  -- done; really\n",
            "CREATE TABLE t (s String DEFAULT 'a;b') ENGINE = Memory",
            "CREATE TABLE `a;b` (id UInt64) ENGINE = Memory /* x; y */",
            "SELECT $$a;b$$",
        ] {
            assert_eq!(single_statement(sql), Ok(()), "{sql}");
        }
    }

    #[test]
    fn a_second_statement_is_refused_where_it_starts() {
        let err = single_statement("CREATE TABLE t (id UInt64) ENGINE = Memory;\nDROP TABLE u").unwrap_err();
        assert!(err.contains("holds more than one statement"), "{err}");
        assert!(
            err.contains("SQL at line 2, column 1 follows the ';' at byte 42"),
            "{err}"
        );
        assert!(single_statement("SELECT 1;;").is_err());
        assert!(single_statement("SELECT 1; SELECT 2;").is_err());
    }

    fn check(sql: &str, statements: &[&str]) -> Result<(), String> {
        replicated_path_without_uuid(sql, statements, "default")
    }

    #[test]
    fn an_argument_less_or_uuid_path_in_an_atomic_database_is_refused() {
        let db = "CREATE DATABASE IF NOT EXISTS app";
        let t =
            "CREATE TABLE IF NOT EXISTS app.t (id UInt64, v UInt64) ENGINE = ReplicatedMergeTree ORDER BY id";
        let err = check(t, &[db, t]).unwrap_err();
        assert!(
            err.contains("creates app.t with ReplicatedMergeTree without a path"),
            "{err}"
        );
        assert!(err.contains("(app is Atomic, the default)"), "{err}");
        assert!(
            err.contains(
                "ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')"
            ),
            "{err}"
        );
        let u = "CREATE TABLE app.u (id UInt64) ENGINE = ReplicatedMergeTree('/t/{uuid}/{shard}', '{replica}') ORDER BY id";
        let err = check(u, &[db, u]).unwrap_err();
        assert!(err.contains("path '/t/{uuid}/{shard}' holds {uuid}"), "{err}");
        let r =
            "CREATE TABLE app.r (id UInt64, v UInt64) ENGINE = ReplicatedReplacingMergeTree(v) ORDER BY id";
        let err = check(r, &["CREATE DATABASE app ENGINE = Atomic", r]).unwrap_err();
        assert!(err.contains("'{replica}', v)"), "{err}");
        assert!(err.contains("(app is Atomic)"), "{err}");
    }

    #[test]
    fn what_the_server_accepts_or_the_lexer_cannot_tell_passes() {
        let db = "CREATE DATABASE IF NOT EXISTS app";
        for t in [
            "CREATE TABLE app.t ON CLUSTER main (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id",
            "CREATE TABLE app.t UUID '11111111-2222-3333-4444-555555555555' (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id",
            "CREATE TABLE app.t (id UInt64) ENGINE = ReplicatedMergeTree('/t/{database}/{table}', '{replica}') ORDER BY id",
            "CREATE TABLE app.t (id UInt64) ENGINE = MergeTree ORDER BY id",
            "CREATE TABLE app.t (id UInt64, s String DEFAULT '{uuid}') ENGINE = ReplicatedMergeTree('/t/{table}', '{replica}') ORDER BY id",
            "CREATE MATERIALIZED VIEW app.mv ENGINE = ReplicatedMergeTree ORDER BY id AS SELECT id FROM app.src",
        ] {
            assert_eq!(check(t, &[db, t]), Ok(()), "{t}");
        }
        let t = "CREATE TABLE app.t (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id";
        // A Replicated database supplies the UUID.
        assert_eq!(
            check(
                t,
                &[
                    "CREATE DATABASE app ENGINE = Replicated('/db/app', '{shard}', '{replica}')",
                    t
                ]
            ),
            Ok(())
        );
        // A database the statements do not create: its engine is unknown here.
        assert_eq!(check(t, &[t]), Ok(()));
        let unqualified = "CREATE TABLE t (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id";
        assert!(
            check(
                unqualified,
                &["CREATE DATABASE IF NOT EXISTS default", unqualified]
            )
            .is_err()
        );
    }
}
