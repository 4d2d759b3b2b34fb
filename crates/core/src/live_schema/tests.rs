//! The verification script and how its output is read, on output as ClickHouse 18.16 prints it.

use super::*;

fn plan(statements: &[&str]) -> VerifyPlan {
    let statements: Vec<String> = statements.iter().map(|s| s.to_string()).collect();
    VerifyPlan::new(&statements, "app")
}

/// One `system.tables` row of the script's output, escaped as TabSeparated escapes it.
fn table_row(database: &str, name: &str, create: &str) -> String {
    format!(
        "table\t{database}\t{name}\t{}\n",
        create.replace('\\', "\\\\").replace('\'', "\\'")
    )
}

fn output(rows: &[String], databases: &[&str]) -> String {
    let mut out: String = rows.concat();
    for d in databases {
        out.push_str(&format!("database\t{d}\t\t\n"));
    }
    out.push_str("end\t\t\t\n");
    out
}

const S: &str = "_clickhouse_schema_verify_0011223344556677";

#[test]
fn the_script_copies_each_object_into_the_scratch_database_and_drops_it() {
    let p = plan(&[
        "CREATE DATABASE IF NOT EXISTS app",
        "CREATE TABLE IF NOT EXISTS events (id UInt64) ENGINE = MergeTree ORDER BY id;",
        "CREATE VIEW IF NOT EXISTS app.v AS SELECT id FROM events",
    ]);
    let script = p.script(S);
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines[0], format!("CREATE DATABASE {S};"));
    assert_eq!(
        lines[1],
        format!("CREATE TABLE {S}.o1 (id UInt64) ENGINE = MergeTree ORDER BY id;")
    );
    assert_eq!(lines[2], format!("CREATE VIEW {S}.o2 AS SELECT id FROM events;"));
    assert!(lines[3].contains("(database = 'app' AND name = 'events') OR (database = 'app' AND name = 'v')"));
    assert!(lines[4].contains(&format!("name IN ('{S}', 'app')")));
    assert_eq!(lines[5], format!("DROP DATABASE {S};"));
    assert_eq!(lines.len(), 7);
}

#[test]
fn an_unchanged_table_is_ok_and_a_changed_order_by_differs() {
    let p = plan(&[
        "CREATE TABLE IF NOT EXISTS events (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY (id, at)",
    ]);
    let scratch = table_row(
        S,
        "o0",
        &format!(
            "CREATE TABLE {S}.o0 ( id UInt64,  at DateTime) ENGINE = MergeTree ORDER BY (id, at) SETTINGS index_granularity = 8192"
        ),
    );
    let same = table_row(
        "app",
        "events",
        "CREATE TABLE app.events ( id UInt64,  at DateTime) ENGINE = MergeTree ORDER BY (id, at) SETTINGS index_granularity = 8192",
    );
    let report = p
        .read("pod-0", S, &output(&[scratch.clone(), same], &[S]))
        .unwrap();
    assert_eq!(report.objects[0].status, ObjectStatus::Ok);
    assert_eq!(report.objects[0].compared, Compared::Server);

    let changed = table_row(
        "app",
        "events",
        "CREATE TABLE app.events ( id UInt64,  at DateTime) ENGINE = MergeTree ORDER BY at SETTINGS index_granularity = 8192",
    );
    let report = p.read("pod-0", S, &output(&[scratch, changed], &[S])).unwrap();
    let object = &report.objects[0];
    assert_eq!(object.status, ObjectStatus::Differs);
    assert_eq!(
        object.differences,
        [DifferenceReport {
            clause: "ORDER BY".into(),
            declared: "(id, at)".into(),
            live: "at".into()
        }]
    );
}

#[test]
fn a_missing_object_and_a_missing_database() {
    let p = plan(&[
        "CREATE DATABASE IF NOT EXISTS shop",
        "CREATE TABLE shop.t (a UInt8) ENGINE = Memory",
    ]);
    let scratch = table_row(
        S,
        "o1",
        &format!("CREATE TABLE {S}.o1 ( a UInt8) ENGINE = Memory"),
    );
    let report = p.read("pod-0", S, &output(&[scratch], &[S])).unwrap();
    let statuses: Vec<(&str, ObjectStatus, Compared)> = report
        .objects
        .iter()
        .map(|o| (o.name.as_str(), o.status, o.compared))
        .collect();
    assert_eq!(
        statuses,
        [
            ("shop", ObjectStatus::Missing, Compared::Existence),
            ("shop.t", ObjectStatus::Missing, Compared::Server)
        ]
    );
    assert!(report.lacks_objects());
}

#[test]
fn output_without_its_end_or_without_the_scratch_database_says_nothing() {
    let p = plan(&["CREATE TABLE t (a UInt8) ENGINE = Memory"]);
    assert_eq!(
        p.read(
            "pod",
            S,
            "table\tapp\tt\tCREATE TABLE app.t ( a UInt8) ENGINE = Memory\n"
        ),
        Err(Unreadable::Incomplete)
    );
    assert_eq!(
        p.read("pod", S, &output(&[], &[])),
        Err(Unreadable::NoScratchDatabase)
    );
}

#[test]
fn a_replicated_table_is_copied_with_its_plain_engine_and_its_path_compared_as_text() {
    let p = plan(&[
        "CREATE TABLE IF NOT EXISTS t ON CLUSTER c (a UInt8, v UInt32) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/t', '{replica}', v) ORDER BY a",
    ]);
    let script = p.script(S);
    assert!(
        script.contains(&format!(
            "CREATE TABLE {S}.o0 (a UInt8, v UInt32) ENGINE = ReplacingMergeTree(v) ORDER BY a;"
        )),
        "{script}"
    );
    assert!(
        !script.contains("/clickhouse/tables"),
        "no ZooKeeper path reaches the scratch copy"
    );

    let scratch = table_row(
        S,
        "o0",
        &format!(
            "CREATE TABLE {S}.o0 ( a UInt8,  v UInt32) ENGINE = ReplacingMergeTree(v) ORDER BY a SETTINGS index_granularity = 8192"
        ),
    );
    let live = |path: &str| {
        table_row(
            "app",
            "t",
            &format!(
                "CREATE TABLE app.t ( a UInt8,  v UInt32) ENGINE = ReplicatedReplacingMergeTree('{path}', '{{replica}}', v) ORDER BY a SETTINGS index_granularity = 8192"
            ),
        )
    };
    let report = p
        .read(
            "pod",
            S,
            &output(&[scratch.clone(), live("/clickhouse/tables/{shard}/t")], &[S]),
        )
        .unwrap();
    assert_eq!(
        report.objects[0].status,
        ObjectStatus::Ok,
        "{:?}",
        report.objects[0]
    );
    let report = p
        .read("pod", S, &output(&[scratch, live("/other/path")], &[S]))
        .unwrap();
    assert_eq!(report.objects[0].differences[0].clause, "ENGINE");
}

#[test]
fn replicated_engines_without_arguments_and_old_syntax_arguments() {
    let p = plan(&[
        "CREATE TABLE a (d Date, id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id",
        "CREATE TABLE b (d Date, id UInt64) ENGINE = ReplicatedMergeTree('/p/b', '{replica}', d, (id), 8192)",
        "CREATE TABLE c (d Date) ENGINE = ReplicatedMergeTree('/p/c', '{replica}') ORDER BY d",
    ]);
    let script = p.script(S);
    assert!(
        script.contains(&format!(
            "{S}.o0 (d Date, id UInt64) ENGINE = MergeTree ORDER BY id;"
        )),
        "{script}"
    );
    assert!(
        script.contains(&format!(
            "{S}.o1 (d Date, id UInt64) ENGINE = MergeTree(d, (id), 8192);"
        )),
        "{script}"
    );
    assert!(
        script.contains(&format!("{S}.o2 (d Date) ENGINE = MergeTree ORDER BY d;")),
        "{script}"
    );
}

#[test]
fn an_engine_that_connects_is_never_created_and_its_literals_are_hidden() {
    let p = plan(&[
        "CREATE TABLE q (a String) ENGINE = Kafka('broker:9092', 'topic', 'group', 'JSONEachRow') SETTINGS kafka_max_block_size = 10",
    ]);
    let script = p.script(S);
    assert!(
        script.contains(&format!("CREATE TABLE {S}.o0 (a String) ENGINE = Null;")),
        "{script}"
    );
    assert!(!script.contains("Kafka"), "{script}");

    let scratch = table_row(S, "o0", &format!("CREATE TABLE {S}.o0 ( a String) ENGINE = Null"));
    let live = table_row(
        "app",
        "q",
        "CREATE TABLE app.q ( a String) ENGINE = Kafka('broker:9092', 'other', 'group', 'JSONEachRow') SETTINGS kafka_max_block_size = 10",
    );
    let report = p.read("pod", S, &output(&[scratch, live], &[S])).unwrap();
    let object = &report.objects[0];
    assert_eq!(object.compared, Compared::Text);
    assert_eq!(object.differences[0].clause, "ENGINE");
    assert_eq!(
        object.differences[0].live,
        "Kafka('<hidden>', '<hidden>', '<hidden>', '<hidden>')"
    );
}

#[test]
fn a_materialized_view_is_normalized_through_a_plain_view_and_never_created() {
    let p = plan(&["CREATE MATERIALIZED VIEW IF NOT EXISTS mv TO app.t AS select id from src where id > 1"]);
    let script = p.script(S);
    assert!(
        script.contains(&format!("CREATE VIEW {S}.o0 AS select id from src where id > 1;")),
        "{script}"
    );
    assert!(!script.contains("MATERIALIZED"), "{script}");

    let scratch = table_row(
        S,
        "o0",
        &format!("CREATE VIEW {S}.o0 ( id UInt64) AS SELECT id FROM app.src  WHERE id > 1"),
    );
    let live = |q: &str| {
        table_row(
            "app",
            "mv",
            &format!("CREATE MATERIALIZED VIEW app.mv TO app.t ( id UInt64) AS {q}"),
        )
    };
    let ok = p
        .read(
            "pod",
            S,
            &output(
                &[scratch.clone(), live("SELECT id FROM app.src  WHERE id > 1")],
                &[S],
            ),
        )
        .unwrap();
    assert_eq!(ok.objects[0].status, ObjectStatus::Ok, "{:?}", ok.objects[0]);
    let changed = p
        .read(
            "pod",
            S,
            &output(&[scratch, live("SELECT id FROM app.src  WHERE id > 2")], &[S]),
        )
        .unwrap();
    assert_eq!(changed.objects[0].differences[0].clause, "AS");
}

#[test]
fn views_over_connecting_table_functions_and_create_as_select_are_text() {
    let p = plan(&[
        "CREATE VIEW r AS SELECT * FROM remote('h', db.t, 'u', 'secret')",
        "CREATE TABLE c ENGINE = Memory AS SELECT 1 AS x",
        "CREATE DICTIONARY d (id UInt64) PRIMARY KEY id SOURCE(CLICKHOUSE(TABLE 't')) LAYOUT(FLAT()) LIFETIME(0)",
    ]);
    let script = p.script(S);
    assert_eq!(
        script.matches("CREATE ").count(),
        1,
        "only the scratch database: {script}"
    );
}

#[test]
fn a_later_alter_leaves_existence_and_a_later_drop_or_rename_leaves_nothing() {
    let p = plan(&[
        "CREATE TABLE a (x UInt8) ENGINE = Memory",
        "ALTER TABLE a ADD COLUMN y UInt8",
        "CREATE TABLE b (x UInt8) ENGINE = Memory",
        "DROP TABLE IF EXISTS app.b",
        "CREATE TABLE c (x UInt8) ENGINE = Memory",
        "RENAME TABLE c TO c2",
        "CREATE DATABASE gone",
        "CREATE TABLE gone.t (x UInt8) ENGINE = Memory",
        "DROP DATABASE gone",
    ]);
    let report = p
        .read(
            "pod",
            S,
            &output(
                &[table_row(
                    "app",
                    "a",
                    "CREATE TABLE app.a ( x UInt8,  y UInt8) ENGINE = Memory",
                )],
                &[S],
            ),
        )
        .unwrap();
    let objects: Vec<(&str, Compared, ObjectStatus)> = report
        .objects
        .iter()
        .map(|o| (o.name.as_str(), o.compared, o.status))
        .collect();
    assert_eq!(objects, [("app.a", Compared::Existence, ObjectStatus::Ok)]);
}

#[test]
fn a_later_declaration_of_the_same_object_replaces_the_earlier_one() {
    let p = plan(&[
        "CREATE TABLE t (a UInt8) ENGINE = Memory",
        "CREATE OR REPLACE TABLE app.t (a UInt16) ENGINE = Memory",
    ]);
    assert_eq!(p.len(), 1);
    assert!(p.script(S).contains("(a UInt16)"));
}

#[test]
fn a_scratch_copy_the_server_refused_falls_back_to_text() {
    let p = plan(&["CREATE TABLE d (a UInt8) ENGINE = Distributed(c, app, missing)"]);
    let live = table_row(
        "app",
        "d",
        "CREATE TABLE app.d ( a UInt8) ENGINE = Distributed(c, app, missing)",
    );
    let report = p.read("pod", S, &output(&[live], &[S])).unwrap();
    assert_eq!(
        (report.objects[0].status, report.objects[0].compared),
        (ObjectStatus::Ok, Compared::Text)
    );
}

#[test]
fn names_are_quoted_as_literals_and_fields_unescaped() {
    let p = plan(&["CREATE TABLE `we'ird\\\\name` (a UInt8) ENGINE = Memory"]);
    assert!(p.script(S).contains(r"name = 'we\'ird\\name'"), "{}", p.script(S));
    assert_eq!(unescape(r"a\tb\nc\\d\'e"), "a\tb\nc\\d'e");
}

#[test]
fn credentials_are_hidden_in_any_clause() {
    assert_eq!(
        hidden("SETTINGS password = 'x', other = 'y'", false),
        "SETTINGS password = '<hidden>', other = 'y'"
    );
}

#[test]
fn scratch_database_names_are_distinct_per_seed() {
    let a = scratch_database("id/pod-0/1");
    assert!(a.starts_with(SCRATCH_DATABASE_PREFIX) && a.len() == SCRATCH_DATABASE_PREFIX.len() + 16);
    assert_ne!(a, scratch_database("id/pod-0/2"));
}

#[test]
fn a_table_copying_another_tables_engine_is_never_created() {
    let copied = plan(&["CREATE TABLE c AS app.kafka_queue"]);
    assert_eq!(
        copied.script(S).matches("CREATE ").count(),
        1,
        "{}",
        copied.script(S)
    );
    let with_engine = plan(&["CREATE TABLE c AS app.events ENGINE = Memory"]);
    assert!(
        with_engine
            .script(S)
            .contains(&format!("CREATE TABLE {S}.o0 AS app.events ENGINE = Memory;"))
    );
}

#[test]
fn a_dictionary_source_is_compared_as_text_with_its_literals_hidden() {
    let p = plan(&[
        "CREATE DICTIONARY d (id UInt64) PRIMARY KEY id SOURCE(MYSQL(HOST 'db' USER 'u' PASSWORD 'p1' DB 'x' TABLE 't')) LAYOUT(FLAT()) LIFETIME(300)",
    ]);
    let live = table_row(
        "app",
        "d",
        "CREATE DICTIONARY app.d (id UInt64) PRIMARY KEY id SOURCE(MYSQL(HOST 'db' USER 'u' PASSWORD 'p2' DB 'x' TABLE 't')) LAYOUT(FLAT()) LIFETIME(300)",
    );
    let report = p.read("pod", S, &output(&[live], &[S])).unwrap();
    let object = &report.objects[0];
    assert_eq!(
        (object.status, object.compared),
        (ObjectStatus::Differs, Compared::Text)
    );
    assert_eq!(object.differences.len(), 1);
    assert_eq!(object.differences[0].clause, "SOURCE");
    let shown = format!("{:?}", object.differences);
    assert!(
        !shown.contains("p1") && !shown.contains("p2") && !shown.contains("'db'"),
        "{shown}"
    );
}

#[test]
fn no_credential_literal_of_a_statement_reaches_the_script() {
    let p = plan(&[
        "CREATE TABLE s3t (a String) ENGINE = S3('https://bucket/x.csv', 'AKIAKEYID', 'sec''ret', 'CSV')",
        "CREATE VIEW rv AS SELECT * FROM remote('host', db.t, 'user', 'pa55word')",
        "CREATE TABLE my (a String) ENGINE = MySQL('db:3306', 'd', 't', 'root', 'hunter2')",
        "CREATE DICTIONARY d (id UInt64) PRIMARY KEY id SOURCE(CLICKHOUSE(USER 'u' PASSWORD 'dictpass')) LAYOUT(FLAT()) LIFETIME(0)",
    ]);
    let script = p.script(S);
    for secret in ["AKIAKEYID", "sec", "pa55word", "hunter2", "dictpass"] {
        assert!(!script.contains(secret), "{secret} in {script}");
    }
}

#[test]
fn definitions_say_whether_the_declaration_is_the_servers_print() {
    // A view over a table function that connects gets no scratch copy: its declaration is the
    // statement as written, which convergence must not act on. A plain table gets one.
    let p = plan(&[
        "CREATE VIEW IF NOT EXISTS app.v AS SELECT id FROM cluster('main', app, t)",
        "CREATE TABLE IF NOT EXISTS app.t (id UInt64) ENGINE = MergeTree ORDER BY id",
    ]);
    let script = p.script(S);
    assert!(!script.contains(&format!("{S}.o0 ")), "{script}");
    assert!(script.contains(&format!("{S}.o1 ")), "{script}");
    let out = output(
        &[
            table_row(
                "app",
                "v",
                "CREATE VIEW app.v (`id` UInt64) AS SELECT id FROM cluster('main', app, t)",
            ),
            table_row(
                "app",
                "t",
                "CREATE TABLE app.t (`id` UInt64) ENGINE = MergeTree ORDER BY id",
            ),
            table_row(
                S,
                "o1",
                &format!("CREATE TABLE {S}.o1 (`id` UInt64) ENGINE = MergeTree ORDER BY id"),
            ),
        ],
        &[S, "app"],
    );
    let printed: Vec<(String, bool)> = p
        .definitions(S, &out)
        .into_iter()
        .map(|d| (d.name, d.printed))
        .collect();
    assert_eq!(printed, [("v".to_owned(), false), ("t".to_owned(), true)]);
}
