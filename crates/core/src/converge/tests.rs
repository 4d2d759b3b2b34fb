//! The planner on definitions as the servers print them. The prints below were captured by hand
//! (2026-12-02) from `system.tables.create_table_query`: ClickHouse 18.16.1 (Debian's server, a
//! throwaway instance) and 26.9 (chdb-core 26.9.0); the fixtures of
//! `tests/converge_fixtures.rs` cover the same through the whole check's output.

use super::*;
use crate::sql::definition::{differences, parse};

const OLD: Server = Server { modern: false };
const NEW: Server = Server { modern: true };

fn options() -> Options<'static> {
    Options {
        allow_type_change: &[],
        on_cluster: None,
    }
}

/// The plan for `declared` (a scratch copy's print) against `live` (the table's print).
fn plan_with(
    kind: &str,
    declared: &str,
    live: &str,
    body: &str,
    server: Server,
    options: Options<'_>,
) -> ObjectPlan {
    plan_printed(kind, declared, live, body, server, options, true)
}

/// [`plan_with`], `printed` saying whether `declared` is the server's print of a scratch copy.
fn plan_printed(
    kind: &str,
    declared: &str,
    live: &str,
    body: &str,
    server: Server,
    options: Options<'_>,
    printed: bool,
) -> ObjectPlan {
    let declared = parse(declared);
    let live = parse(live);
    let differences: Vec<DifferenceReport> = differences(&declared, &live)
        .into_iter()
        .map(|d| DifferenceReport {
            clause: d.clause,
            declared: d.declared,
            live: d.live,
        })
        .collect();
    plan_object(
        ObjectInput {
            database: "app",
            name: "t",
            kind,
            declared: &declared,
            printed,
            live: &live,
            differences: &differences,
            declared_body: body,
        },
        server,
        options,
    )
}

/// The check that runs before a change of `column`'s default in table `app.t`: no part lacks the
/// column (review C3).
fn stored(column: &str) -> String {
    checked(&format!(
        "SELECT throwIf(count() > 0) AS parts_without_the_column FROM system.parts WHERE database = 'app' AND \
         table = 't' AND active AND rows > 0 AND name NOT IN (SELECT name FROM system.parts_columns WHERE database = 'app' AND \
         table = 't' AND active AND column = '{column}')"
    ))
}

/// A check's statement as the planner renders it: with settings that make a limit fail it
/// (review V9).
fn checked(sql: &str) -> String {
    format!("{sql} SETTINGS {GUARD_SETTINGS}")
}

fn table(declared: &str, live: &str, server: Server) -> ObjectPlan {
    plan_with("TABLE", declared, live, "", server, options())
}

#[test]
fn columns_are_added_where_they_are_declared() {
    // 18.16 prints without quotes, with a space before each column.
    let plan = table(
        "CREATE TABLE s.o0 ( id UInt64,  m UInt8 DEFAULT 7,  v String,  e String DEFAULT \'x\') ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( id UInt64,  v String) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        OLD,
    );
    assert_eq!(
        plan.statements,
        [
            "ALTER TABLE `app`.`t` ADD COLUMN m UInt8 DEFAULT 7 AFTER `id`, ADD COLUMN e String DEFAULT 'x' AFTER `v`"
        ]
    );
    assert_eq!(plan.changes, ["add column m after id", "add column e after v"]);
    assert!(plan.refused.is_empty());
    // 26.9 quotes every name and has IF NOT EXISTS and FIRST.
    let plan = table(
        "CREATE TABLE s.o0 (`f` UInt8, `id` UInt64, `v` String) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t (`id` UInt64, `v` String) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        NEW,
    );
    assert_eq!(
        plan.statements,
        ["ALTER TABLE `app`.`t` ADD COLUMN IF NOT EXISTS `f` UInt8 FIRST"]
    );
}

#[test]
fn a_name_with_an_escaped_quote_is_quoted_once() {
    // 26.9 prints a back-quote inside a name escaped with a backslash; the ALTER names the same
    // column, not one whose name holds the backslash.
    let plan = table(
        "CREATE TABLE s.o0 (`id` UInt64, `we\\`ird` String DEFAULT 'b', `n` UInt8) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t (`id` UInt64, `we\\`ird` String DEFAULT 'a') ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        NEW,
    );
    assert_eq!(
        plan.statements,
        [
            stored("we`ird"),
            "ALTER TABLE `app`.`t` MODIFY COLUMN `we\\`ird` String DEFAULT 'b', ADD COLUMN IF NOT EXISTS `n` UInt8 AFTER `we\\`ird`".to_owned()
        ]
    );
}

#[test]
fn a_first_column_is_refused_where_the_server_has_no_first() {
    let plan = table(
        "CREATE TABLE s.o0 ( f UInt8,  id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        OLD,
    );
    assert!(plan.statements.is_empty());
    assert_eq!(plan.refused[0].clause, "column f");
    assert!(plan.refused[0].why.contains("FIRST"), "{}", plan.refused[0].why);
}

#[test]
fn a_default_and_a_comment_are_modified() {
    let plan = table(
        "CREATE TABLE s.o0 ( id UInt64,  v String DEFAULT \'b\' COMMENT \'new\') ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( id UInt64,  v String DEFAULT \'a\' COMMENT \'old\') ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        OLD,
    );
    assert_eq!(
        plan.statements,
        [
            stored("v"),
            "ALTER TABLE `app`.`t` MODIFY COLUMN `v` String DEFAULT 'b', COMMENT COLUMN `v` 'new'".to_owned()
        ]
    );
}

#[test]
fn a_removed_default_or_comment_needs_a_modern_server() {
    let declared = "CREATE TABLE s.o0 (`id` UInt64, `v` String) ENGINE = MergeTree ORDER BY id";
    let live =
        "CREATE TABLE app.t (`id` UInt64, `v` String DEFAULT 'a' COMMENT 'c') ENGINE = MergeTree ORDER BY id";
    assert_eq!(
        table(declared, live, NEW).statements,
        [
            stored("v"),
            "ALTER TABLE `app`.`t` MODIFY COLUMN `v` REMOVE DEFAULT, MODIFY COLUMN `v` REMOVE COMMENT"
                .to_owned()
        ]
    );
    assert!(table(declared, live, OLD).statements.is_empty());
    assert_eq!(table(declared, live, OLD).refused.len(), 1);
}

#[test]
fn a_type_change_is_refused_unless_the_column_is_allowed() {
    let declared = "CREATE TABLE s.o0 ( id UInt64,  v UInt16 DEFAULT 1) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192";
    let live = "CREATE TABLE app.t ( id UInt64,  v UInt8 DEFAULT 1) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192";
    let refused = table(declared, live, OLD);
    assert!(refused.statements.is_empty());
    assert_eq!(
        refused.refused,
        [Refusal {
            clause: "column v".into(),
            why:
                "its type changes from UInt8 to UInt16: a mutation that rewrites the column in every part of \
                  the table; name 'app.t.v' in allowTypeChange to let convergence run it"
                    .into(),
            alter: Some("ALTER TABLE `app`.`t` MODIFY COLUMN `v` UInt16".into()),
        }]
    );
    let allowed = ["app.t.v".to_owned()];
    let plan = plan_with(
        "TABLE",
        declared,
        live,
        "",
        OLD,
        Options {
            allow_type_change: &allowed,
            on_cluster: None,
        },
    );
    assert_eq!(
        plan.statements,
        ["ALTER TABLE `app`.`t` MODIFY COLUMN `v` UInt16"]
    );
    assert!(plan.changes[0].contains("mutation"));
}

#[test]
fn a_type_change_on_a_modern_server_first_checks_that_every_value_converts() {
    // Review C4: a modern server changes the definition at once and converts the parts in a
    // mutation; a value that does not convert fails the mutation for ever and leaves the table
    // unreadable. A SELECT before the ALTER fails instead, and the ALTER does not run.
    let allowed = ["app.t.v".to_owned(), "app.t.n".to_owned(), "app.t.a".to_owned()];
    let options = Options {
        allow_type_change: &allowed,
        on_cluster: None,
    };
    let plan = plan_with(
        "TABLE",
        "CREATE TABLE s.o0 (`id` UInt64, `v` UInt32, `n` LowCardinality(Nullable(String)), `a` Array(UInt16)) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE app.t (`id` UInt64, `v` String, `n` Nullable(UInt8), `a` Array(UInt8)) ENGINE = MergeTree ORDER BY id",
        "",
        NEW,
        options,
    );
    assert_eq!(
        plan.statements,
        [
            checked("SELECT throwIf(count() > 0) AS values_that_do_not_convert FROM `app`.`t` WHERE accurateCastOrNull(`v`, 'UInt32') IS NULL"),
            // From a number: the value must also come back as itself (review V11).
            checked("SELECT throwIf(count() > 0) AS values_that_do_not_convert FROM `app`.`t` WHERE (accurateCastOrNull(`n`, 'String') IS NULL AND `n` IS NOT NULL) OR CAST(accurateCastOrNull(`n`, 'String'), 'Nullable(UInt8)') != `n`"),
            // An array's elements are not checked: accurateCastOrNull has no Nullable array.
            "ALTER TABLE `app`.`t` MODIFY COLUMN `v` UInt32, MODIFY COLUMN `n` LowCardinality(Nullable(String)), MODIFY COLUMN `a` Array(UInt16)".to_owned(),
        ]
    );
    // A smaller scale converts, and changes the value: the round trip says so.
    let scale = plan_with(
        "TABLE",
        "CREATE TABLE s.o0 (`id` UInt64, `d` Decimal(18, 2)) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE app.t (`id` UInt64, `d` Decimal(18, 4)) ENGINE = MergeTree ORDER BY id",
        "",
        NEW,
        Options {
            allow_type_change: &["app.t.d".to_owned()],
            on_cluster: None,
        },
    );
    assert_eq!(
        scale.statements[0],
        checked(
            "SELECT throwIf(count() > 0) AS values_that_do_not_convert FROM `app`.`t` WHERE accurateCastOrNull(`d`, \
             'Decimal(18, 2)') IS NULL OR CAST(accurateCastOrNull(`d`, 'Decimal(18, 2)'), 'Nullable(Decimal(18, 4))') != `d`"
        )
    );
    // 18.16 converts inside the ALTER, and a value that fails changes nothing.
    let old = plan_with(
        "TABLE",
        "CREATE TABLE s.o0 ( id UInt64,  v UInt32) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( id UInt64,  v String) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        "",
        OLD,
        options,
    );
    assert_eq!(old.statements, ["ALTER TABLE `app`.`t` MODIFY COLUMN `v` UInt32"]);
}

#[test]
fn a_column_added_with_a_default_that_varies_needs_an_empty_table() {
    // Review C3: `DEFAULT now()` is computed at every read of a part that does not store the
    // column; the check before the ALTER lets it run only on a table without rows.
    for (server, declared, live) in [
        (
            NEW,
            "CREATE TABLE s.o0 (`id` UInt64, `at` DateTime DEFAULT now(), `k` UUID DEFAULT generateUUIDv4(), `c` String DEFAULT concat('a', 'b')) ENGINE = MergeTree ORDER BY id",
            "CREATE TABLE app.t (`id` UInt64) ENGINE = MergeTree ORDER BY id",
        ),
        (
            OLD,
            "CREATE TABLE s.o0 ( id UInt64,  at DateTime DEFAULT now(),  k UUID DEFAULT generateUUIDv4(),  c String DEFAULT concat('a', 'b')) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
            "CREATE TABLE app.t ( id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        ),
    ] {
        let plan = table(declared, live, server);
        let guards: Vec<&String> = plan
            .statements
            .iter()
            .filter(|s| s.starts_with(GUARD_START))
            .collect();
        // One check per such column (`at`, `k`), none for the constant `concat`.
        assert_eq!(
            guards,
            vec![&checked("SELECT throwIf(count() > 0) AS rows_without_the_column FROM `app`.`t`"); 2],
            "{plan:?}"
        );
        assert!(
            plan.statements
                .last()
                .is_some_and(|s| s.starts_with("ALTER TABLE"))
        );
    }
    // Review V14: more of them, and not a column never stored.
    for (default, guarded) in [
        ("DEFAULT randUniform(0, 1)", true),
        ("DEFAULT dictGet('geo', 'country', id)", true),
        ("MATERIALIZED generateULID()", true),
        ("DEFAULT hostName()", true),
        ("ALIAS now()", false),
        ("DEFAULT toDate('2020-01-01')", false),
    ] {
        let plan = table(
            &format!("CREATE TABLE s.o0 (`id` UInt64, `x` String {default}) ENGINE = MergeTree ORDER BY id"),
            "CREATE TABLE app.t (`id` UInt64) ENGINE = MergeTree ORDER BY id",
            NEW,
        );
        assert_eq!(
            plan.statements.iter().any(|s| s.starts_with(GUARD_START)),
            guarded,
            "{default}"
        );
    }
}

#[test]
fn a_type_change_of_a_replicated_table_on_18_16_is_refused_even_when_allowed() {
    // Review V2: 18.16 changes a replicated table's definition first and converts its parts after,
    // retrying a value that does not convert for ever.
    let allowed = ["app.t.v".to_owned()];
    let plan = plan_with(
        "TABLE",
        "CREATE TABLE s.o0 ( id UInt64,  v UInt32) ENGINE = ReplicatedMergeTree('/t/{shard}', '{replica}') ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( id UInt64,  v String) ENGINE = ReplicatedMergeTree('/t/{shard}', '{replica}') ORDER BY id SETTINGS index_granularity = 8192",
        "",
        OLD,
        Options {
            allow_type_change: &allowed,
            on_cluster: None,
        },
    );
    assert!(plan.statements.is_empty(), "{plan:?}");
    assert!(
        plan.refused[0].why.contains("on a replicated table"),
        "{}",
        plan.refused[0].why
    );
    assert_eq!(
        plan.refused[0].alter.as_deref(),
        Some("ALTER TABLE `app`.`t` MODIFY COLUMN `v` UInt32")
    );
}

#[test]
fn a_failed_statement_says_whether_it_may_have_run() {
    use run::{Failed, FailureKind, failure_kind};
    let failed = |code: Option<u32>, exit_code: i32| Failed {
        code,
        exit_code,
        stderr: "",
        host_rows: false,
    };
    let alter = "ALTER TABLE `app`.`t` ADD COLUMN `n` UInt8";
    let guard = "SELECT throwIf(count() > 0) AS values_that_do_not_convert FROM `app`.`t` WHERE accurateCastOrNull(`v`, 'UInt32') IS NULL";
    assert_eq!(failure_kind(alter, &failed(Some(44), 44)), FailureKind::Refused);
    assert_eq!(
        failure_kind(guard, &failed(Some(395), 139)),
        FailureKind::Guard(VALUES_CONVERT)
    );
    assert_eq!(failure_kind(alter, &failed(Some(395), 139)), FailureKind::Refused);
    assert_eq!(
        failure_kind(alter, &failed(Some(341), 85)),
        FailureKind::MutationFailed
    );
    for code in [159, 209, 210, 32, 394, 999] {
        assert_eq!(
            failure_kind(alter, &failed(Some(code), 1)),
            FailureKind::Unknown,
            "{code}"
        );
    }
    // Stopped from outside (the pod's timeout, a kill), or no answer of the server at all.
    for exit in [124, 137, 143] {
        assert_eq!(
            failure_kind(alter, &failed(None, exit)),
            FailureKind::Unknown,
            "{exit}"
        );
    }
    assert_eq!(failure_kind(alter, &failed(None, 1)), FailureKind::Unknown);
    // Review V9: a check that could not run (a timeout, an error) changed nothing.
    for (code, exit) in [(Some(159), 159), (Some(43), 43), (None, 124)] {
        assert_eq!(
            failure_kind(guard, &failed(code, exit)),
            FailureKind::CheckFailed,
            "{code:?}"
        );
    }
    // Review V10: 341 is also "left to inactive replicas, done asynchronously".
    let inactive = Failed {
        stderr: "Code: 341. DB::Exception: Mutation is not finished because some replicas are inactive right now",
        ..failed(Some(341), 85)
    };
    assert_eq!(failure_kind(alter, &inactive), FailureKind::Unknown);
    // Review V6: an ALTER ON CLUSTER that printed host rows before it threw ran on some hosts.
    let on_hosts = Failed {
        host_rows: true,
        ..failed(Some(44), 44)
    };
    assert_eq!(
        failure_kind(
            "ALTER TABLE `app`.`t` ON CLUSTER `c` ADD COLUMN n UInt8",
            &on_hosts
        ),
        FailureKind::Unknown
    );
}

#[test]
fn a_column_in_the_place_of_a_live_one_of_its_type_may_be_a_rename() {
    // Review C11: `amount` renamed to `total` in the declaration; adding `total` would leave every
    // row's value in `amount`.
    let plan = table(
        "CREATE TABLE s.o0 (`id` UInt64, `total` UInt64, `n` UInt8) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE app.t (`id` UInt64, `amount` UInt64) ENGINE = MergeTree ORDER BY id",
        NEW,
    );
    assert!(plan.statements.is_empty(), "{plan:?}");
    assert_eq!(plan.refused.len(), 1, "{plan:?}");
    assert_eq!(plan.refused[0].clause, "column total");
    assert!(
        plan.refused[0]
            .why
            .contains("the table holds amount, of the same type, where total is declared")
    );
    assert_eq!(
        plan.refused[0].alter.as_deref(),
        Some("ALTER TABLE `app`.`t` RENAME COLUMN `amount` TO `total`")
    );
    // Declared first, on 18.16 (no RENAME COLUMN there).
    let first = table(
        "CREATE TABLE s.o0 ( total UInt64,  id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( amount UInt64,  id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        OLD,
    );
    assert_eq!(first.refused[0].clause, "column total");
    assert_eq!(first.refused[0].alter, None);
    assert!(first.refused[0].why.contains("no RENAME COLUMN"));
    // Another type, or another place: an added column and a kept one.
    for live in [
        "CREATE TABLE app.t (`id` UInt64, `amount` String) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE app.t (`amount` UInt64, `id` UInt64) ENGINE = MergeTree ORDER BY id",
    ] {
        let plan = table(
            "CREATE TABLE s.o0 (`id` UInt64, `total` UInt64) ENGINE = MergeTree ORDER BY id",
            live,
            NEW,
        );
        assert!(plan.refused.is_empty(), "{live}: {plan:?}");
        assert_eq!(plan.kept_columns, ["amount"], "{live}");
    }
}

#[test]
fn columns_in_another_order_refuse_the_table_whatever_else_differs() {
    // Review C16: the check names the order only when nothing else differs.
    let plan = table(
        "CREATE TABLE s.o0 (`a` UInt8, `b` UInt8, `c` String) ENGINE = MergeTree ORDER BY a",
        "CREATE TABLE app.t (`b` UInt8, `a` UInt8) ENGINE = MergeTree ORDER BY a",
        NEW,
    );
    assert!(plan.statements.is_empty(), "{plan:?}");
    assert_eq!(plan.refused[0].clause, "column order");
    assert!(
        plan.refused[0].why.contains("declared a, b; live b, a"),
        "{}",
        plan.refused[0].why
    );
}

#[test]
fn a_column_whose_statistics_or_settings_differ_is_refused() {
    // Review C16: a difference convergence has no ALTER for gets a refusal, not silence.
    let plan = table(
        "CREATE TABLE s.o0 (`id` UInt64, `v` UInt64 STATISTICS(tdigest)) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE app.t (`id` UInt64, `v` UInt64) ENGINE = MergeTree ORDER BY id",
        NEW,
    );
    assert!(plan.statements.is_empty(), "{plan:?}");
    assert_eq!(plan.refused[0].clause, "column v");
    assert!(plan.refused[0].why.contains("STATISTICS or SETTINGS"));
}

#[test]
fn columns_of_an_engine_without_column_alters_are_refused() {
    // Review C16: Log, Set, Join, ... (and Memory on 18.16) answer a column ALTER with code 48.
    for (engine, server) in [("Log", NEW), ("TinyLog", OLD), ("Memory", OLD), ("Set", NEW)] {
        let plan = table(
            &format!("CREATE TABLE s.o0 (`id` UInt64, `n` UInt8) ENGINE = {engine}"),
            &format!("CREATE TABLE app.t (`id` UInt64) ENGINE = {engine}"),
            server,
        );
        assert!(plan.statements.is_empty(), "{engine}: {plan:?}");
        assert_eq!(plan.refused.len(), 1, "{engine}: {plan:?}");
        assert_eq!(plan.refused[0].clause, "column n");
        assert!(
            plan.refused[0]
                .why
                .contains(&format!("engine ({engine}) has no ALTER of its columns"))
        );
    }
    for (engine, server) in [
        ("Memory", NEW),
        ("Null", OLD),
        ("Distributed(c, app, t_local)", OLD),
        ("Merge(app, '^t_')", NEW),
    ] {
        let plan = table(
            &format!("CREATE TABLE s.o0 (`id` UInt64, `n` UInt8) ENGINE = {engine}"),
            &format!("CREATE TABLE app.t (`id` UInt64) ENGINE = {engine}"),
            server,
        );
        assert!(plan.refused.is_empty(), "{engine}: {plan:?}");
        assert_eq!(plan.statements.len(), 1, "{engine}: {plan:?}");
    }
}

#[test]
fn under_on_cluster_an_object_another_host_needs_altered_otherwise_is_refused() {
    // Review C9: the ALTERs reach every host; planned from one, they may not fit another.
    let object = |name: &str, statements: &[&str], changes: &[&str]| ObjectPlan {
        object: name.into(),
        statements: statements.iter().map(|s| s.to_string()).collect(),
        changes: changes.iter().map(|s| s.to_string()).collect(),
        ..ObjectPlan::default()
    };
    let add = "ALTER TABLE `app`.`t` ON CLUSTER `c` ADD COLUMN n UInt8 AFTER `id`";
    let here = || PodPlan {
        pod: "p0".into(),
        server_version: None,
        objects: vec![
            object("app.t", &[add], &["add column n after id"]),
            object(
                "app.u",
                &["ALTER TABLE `app`.`u` ON CLUSTER `c` ADD COLUMN m UInt8 AFTER `id`"],
                &["add column m after id"],
            ),
        ],
    };
    // Alike there: nothing refused.
    let mut alike = here();
    run::refuse_divergent(&mut alike, "p1", &here());
    assert_eq!(alike, here());
    // p2 holds t as declared already, and needs u altered otherwise.
    let other = PodPlan {
        pod: "p2".into(),
        server_version: None,
        objects: vec![object(
            "app.u",
            &["ALTER TABLE `app`.`u` ON CLUSTER `c` ADD COLUMN k UInt8"],
            &["add column k"],
        )],
    };
    let mut differs = here();
    run::refuse_divergent(&mut differs, "p2", &other);
    for o in &differs.objects {
        assert!(o.statements.is_empty(), "{o:?}");
        assert_eq!(o.refused[0].clause, "hosts");
    }
    assert!(
        differs.objects[0].refused[0]
            .why
            .contains("host p2 needs nothing convergence does")
    );
    assert!(
        differs.objects[0].refused[0]
            .why
            .contains("not what this one needs (add column n after id)")
    );
    assert!(
        differs.objects[1].refused[0]
            .why
            .contains("host p2 needs add column k")
    );
}

#[test]
fn alters_on_cluster_first_check_that_the_cluster_has_no_host_beyond_those_compared() {
    // Review V4: an ALTER ON CLUSTER reaches every host of the cluster, compared or not.
    let mut pod_plan = PodPlan {
        pod: "p0".into(),
        server_version: None,
        objects: vec![
            ObjectPlan {
                object: "app.r".into(),
                refused: vec![refusal("ENGINE", "no")],
                ..ObjectPlan::default()
            },
            ObjectPlan {
                object: "app.t".into(),
                statements: vec!["ALTER TABLE `app`.`t` ON CLUSTER `c` ADD COLUMN n UInt8".into()],
                ..ObjectPlan::default()
            },
        ],
    };
    with_hosts_guard(&mut pod_plan, "c", 3);
    assert!(pod_plan.objects[0].statements.is_empty());
    assert_eq!(
        pod_plan.objects[1].statements,
        [
            checked(
                "SELECT throwIf(count() > 0) AS cluster_hosts_not_compared FROM (SELECT count() AS hosts FROM \
                 system.clusters WHERE cluster = 'c') WHERE hosts > 3"
            ),
            "ALTER TABLE `app`.`t` ON CLUSTER `c` ADD COLUMN n UInt8".to_owned(),
        ]
    );
}

#[test]
fn a_live_only_column_is_kept_and_reported() {
    let plan = table(
        "CREATE TABLE s.o0 ( id UInt64,  n UInt8) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( id UInt64,  extra String) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        OLD,
    );
    assert_eq!(
        plan.statements,
        ["ALTER TABLE `app`.`t` ADD COLUMN n UInt8 AFTER `id`"]
    );
    assert_eq!(plan.kept_columns, ["extra"]);
    assert_eq!(plan.accepted, ["column extra"]);
    assert!(!plan.statements[0].contains("DROP"));
}

#[test]
fn an_order_by_that_appends_new_columns_is_modified_with_them() {
    // 18.16 after the ALTER prints `PRIMARY KEY id ORDER BY (id, k)`: accepted.
    let plan = table(
        "CREATE TABLE s.o0 ( id UInt64,  k UInt8) ENGINE = MergeTree ORDER BY (id, k) SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        OLD,
    );
    assert_eq!(
        plan.statements,
        ["ALTER TABLE `app`.`t` ADD COLUMN k UInt8 AFTER `id`, MODIFY ORDER BY (id, k)"]
    );
    assert_eq!(plan.accepted, ["PRIMARY KEY"]);
    let after = table(
        "CREATE TABLE s.o0 ( id UInt64,  k UInt8) ENGINE = MergeTree ORDER BY (id, k) SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( id UInt64,  k UInt8) ENGINE = MergeTree PRIMARY KEY id ORDER BY (id, k) SETTINGS index_granularity = 8192",
        OLD,
    );
    // Once converged only the primary key the server kept differs, and nothing is left to run.
    assert!(after.statements.is_empty());
    assert!(after.refused.is_empty());
    assert_eq!(after.accepted, ["PRIMARY KEY"]);
}

#[test]
fn an_order_by_that_appends_a_column_added_with_a_default_is_refused() {
    // Review C16: 18.16 and current servers refuse `ADD COLUMN k ... DEFAULT ..., MODIFY ORDER BY
    // (id, k)` ("Newly added column k has a default expression ..."); the plan says so instead of
    // running an ALTER that fails.
    for (server, declared, live) in [
        (
            OLD,
            "CREATE TABLE s.o0 ( id UInt64,  k UInt8 DEFAULT 3) ENGINE = MergeTree ORDER BY (id, k) SETTINGS index_granularity = 8192",
            "CREATE TABLE app.t ( id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        ),
        (
            NEW,
            "CREATE TABLE s.o0\n(\n    `id` UInt64,\n    `k` UInt8 MATERIALIZED id % 3\n)\nENGINE = MergeTree\nORDER BY (id, k)\nSETTINGS index_granularity = 8192",
            "CREATE TABLE app.t\n(\n    `id` UInt64\n)\nENGINE = MergeTree\nORDER BY id\nSETTINGS index_granularity = 8192",
        ),
    ] {
        let plan = table(declared, live, server);
        assert!(plan.statements.is_empty(), "{plan:?}");
        assert_eq!(plan.refused.len(), 1, "{plan:?}");
        assert_eq!(plan.refused[0].clause, "ORDER BY");
        assert!(
            plan.refused[0].why.contains("it appends k to the sorting key"),
            "{}",
            plan.refused[0].why
        );
    }
}

#[test]
fn changes_no_alter_makes_are_refused_and_nothing_runs() {
    let plan = table(
        "CREATE TABLE s.o0 ( id UInt64,  n UInt8) ENGINE = MergeTree PARTITION BY n ORDER BY id SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t ( id UInt64) ENGINE = MergeTree ORDER BY id SETTINGS index_granularity = 8192",
        OLD,
    );
    assert!(plan.statements.is_empty());
    assert_eq!(plan.refused[0].clause, "PARTITION BY");
    let reordered = table(
        "CREATE TABLE s.o0 (`a` UInt8, `b` UInt8) ENGINE = Memory",
        "CREATE TABLE app.t (`b` UInt8, `a` UInt8) ENGINE = Memory",
        NEW,
    );
    assert_eq!(reordered.refused[0].clause, "column order");
    let other_key = table(
        "CREATE TABLE s.o0 (`a` UInt8, `b` UInt8) ENGINE = MergeTree ORDER BY b",
        "CREATE TABLE app.t (`a` UInt8, `b` UInt8) ENGINE = MergeTree ORDER BY a",
        NEW,
    );
    assert_eq!(other_key.refused[0].clause, "ORDER BY");
}

#[test]
fn table_clauses_indexes_and_projections_on_a_modern_server() {
    // As 26.9 prints them.
    let declared = "CREATE TABLE s.o0 (`id` UInt64, `at` DateTime, `v` String CODEC(ZSTD(1)), INDEX iv v TYPE \
                    bloom_filter GRANULARITY 1, PROJECTION p (SELECT id, v ORDER BY v)) ENGINE = MergeTree ORDER BY id \
                    SETTINGS index_granularity = 8192, merge_with_ttl_timeout = 3600 COMMENT 'events'";
    // The live table has a TTL the declaration dropped: removing it deletes nothing.
    let live = "CREATE TABLE app.t (`id` UInt64, `at` DateTime, `v` String, INDEX old id TYPE minmax GRANULARITY 1) \
                ENGINE = MergeTree ORDER BY id TTL at + toIntervalDay(90) SETTINGS index_granularity = 8192, \
                min_bytes_for_wide_part = 0";
    let plan = table(declared, live, NEW);
    assert!(plan.refused.is_empty(), "{:?}", plan.refused);
    assert_eq!(
        plan.statements,
        [
            "ALTER TABLE `app`.`t` MODIFY COLUMN `v` String CODEC(ZSTD(1)), ADD INDEX iv v TYPE bloom_filter \
             GRANULARITY 1, MATERIALIZE INDEX `iv`, ADD PROJECTION p (SELECT id, v ORDER BY v), MATERIALIZE \
             PROJECTION `p`, DROP INDEX `old`, MODIFY COMMENT 'events', REMOVE TTL, MODIFY SETTING \
             merge_with_ttl_timeout = 3600",
            "ALTER TABLE `app`.`t` RESET SETTING min_bytes_for_wide_part",
        ]
    );
    // 18.16 has none of these ALTERs.
    let old = table(declared, live, OLD);
    assert!(old.statements.is_empty());
    assert!(old.refused.len() >= 5, "{:?}", old.refused);
}

#[test]
fn an_object_compared_as_text_is_never_altered() {
    // A view over `cluster(...)` has no scratch copy: its declaration is the statement as
    // written, which the server prints otherwise (`INTERVAL 1 DAY` as `toIntervalDay(1)`).
    // Replacing it would happen on every deploy; the difference is refused, naming why.
    let declared =
        "CREATE VIEW app.t AS SELECT id FROM cluster('main', app, events) WHERE ts > now() - INTERVAL 1 DAY";
    let live = "CREATE VIEW app.t (`id` UInt64) AS SELECT id FROM cluster('main', app, events) WHERE ts > (now() - toIntervalDay(1))";
    let body = "AS SELECT id FROM cluster('main', app, events) WHERE ts > now() - INTERVAL 1 DAY";
    for server in [OLD, NEW] {
        let plan = plan_printed("VIEW", declared, live, body, server, options(), false);
        assert!(plan.statements.is_empty(), "{:?}", plan.statements);
        assert!(!plan.refused.is_empty());
        assert!(
            plan.refused.iter().all(|r| r.why.contains("compared as text")),
            "{:?}",
            plan.refused
        );
    }
    // The same difference, printed by the server on both sides, is replaced.
    let printed = plan_printed("VIEW", declared, live, body, NEW, options(), true);
    assert_eq!(printed.statements.len(), 2, "{:?}", printed.statements);
    assert!(printed.statements[1].starts_with("CREATE OR REPLACE VIEW"));
}

#[test]
fn a_changed_view_is_replaced() {
    let declared = "CREATE VIEW s.o0 (`a` UInt8) AS SELECT 2 AS a";
    let live = "CREATE VIEW app.t (`a` UInt8) AS SELECT 1 AS a";
    let body = "AS SELECT 2 AS a";
    // Only a plain view (review S1: a live view prints like one).
    let is_a_view = checked(
        "SELECT throwIf(count() > 0) AS view_to_replace FROM (SELECT count() AS views FROM system.tables \
         WHERE database = 'app' AND name = 't' AND engine = 'View') WHERE views != 1",
    );
    assert_eq!(
        plan_with("VIEW", declared, live, body, NEW, options()).statements,
        [
            is_a_view.clone(),
            "CREATE OR REPLACE VIEW `app`.`t` AS SELECT 2 AS a".to_owned()
        ]
    );
    assert_eq!(
        plan_with("VIEW", declared, live, body, OLD, options()).statements,
        [
            // Review C5: created beside the old one and swapped in, after checks that only views
            // are dropped.
            is_a_view.clone(),
            checked(
                "SELECT throwIf(count() > 0) AS replacement_names_taken FROM system.tables WHERE database = 'app' AND \
                 name IN ('t__clickhouse_schema_new', 't__clickhouse_schema_old') AND engine != 'View'"
            ),
            "DROP TABLE IF EXISTS `app`.`t__clickhouse_schema_new`".to_owned(),
            "DROP TABLE IF EXISTS `app`.`t__clickhouse_schema_old`".to_owned(),
            "CREATE VIEW `app`.`t__clickhouse_schema_new` AS SELECT 2 AS a".to_owned(),
            "RENAME TABLE `app`.`t` TO `app`.`t__clickhouse_schema_old`, `app`.`t__clickhouse_schema_new` TO `app`.`t`"
                .to_owned(),
            "DROP TABLE `app`.`t__clickhouse_schema_old`".to_owned(),
        ]
    );
    let on_cluster = plan_with(
        "VIEW",
        declared,
        live,
        body,
        NEW,
        Options {
            allow_type_change: &[],
            on_cluster: Some("main"),
        },
    );
    assert_eq!(
        on_cluster.statements,
        [
            is_a_view,
            "CREATE OR REPLACE VIEW `app`.`t` ON CLUSTER `main` AS SELECT 2 AS a".to_owned()
        ]
    );
    // 18.16 under onCluster: its DROP would reach hosts nobody checked; refused, nothing run.
    let old_on_cluster = plan_with(
        "VIEW",
        declared,
        live,
        body,
        OLD,
        Options {
            allow_type_change: &[],
            on_cluster: Some("main"),
        },
    );
    assert!(
        old_on_cluster.statements.is_empty(),
        "{:?}",
        old_on_cluster.statements
    );
    assert_eq!(old_on_cluster.refused.len(), 1);
    assert!(old_on_cluster.refused[0].why.contains("every host"));
}

#[test]
fn a_materialized_view_or_dictionary_is_not_altered() {
    let plan = plan_with(
        "MATERIALIZED VIEW",
        "CREATE MATERIALIZED VIEW s.o0 TO app.x AS SELECT 2 AS a",
        "CREATE MATERIALIZED VIEW app.t TO app.x AS SELECT 1 AS a",
        "TO app.x AS SELECT 2 AS a",
        NEW,
        options(),
    );
    assert!(plan.statements.is_empty());
    assert_eq!(plan.refused[0].clause, "AS");
}

#[test]
fn the_server_version_says_what_it_has() {
    assert_eq!(Server::from_version("18.16.1"), OLD);
    assert_eq!(Server::from_version("26.9.2.1"), NEW);
    assert_eq!(Server::from_version("22.1.3.7"), NEW);
    assert_eq!(Server::from_version("21.8.15.7"), OLD);
    assert_eq!(Server::from_version(""), OLD);
}

#[test]
fn on_cluster_goes_after_the_name() {
    let plan = plan_with(
        "TABLE",
        "CREATE TABLE s.o0 ( id UInt64,  n UInt8) ENGINE = MergeTree ORDER BY id",
        "CREATE TABLE app.t ( id UInt64) ENGINE = MergeTree ORDER BY id",
        "",
        OLD,
        Options {
            allow_type_change: &[],
            on_cluster: Some("main"),
        },
    );
    assert_eq!(
        plan.statements,
        ["ALTER TABLE `app`.`t` ON CLUSTER `main` ADD COLUMN n UInt8 AFTER `id`"]
    );
}

#[test]
fn a_new_or_changed_ttl_is_refused_with_its_alter_and_deletes_nothing() {
    // As 26.9 prints them. A TTL applies to the rows already in the table: a new or shorter one
    // deletes them, so convergence leaves the table alone and names the ALTER to run by hand.
    let live = "CREATE TABLE app.t (`id` UInt64, `at` DateTime, `v` String) ENGINE = MergeTree ORDER BY id \
                SETTINGS index_granularity = 8192";
    let table_ttl = table(
        "CREATE TABLE s.o0 (`id` UInt64, `at` DateTime, `v` String, `w` UInt8) ENGINE = MergeTree ORDER BY id \
         TTL at + toIntervalDay(30) SETTINGS index_granularity = 8192",
        live,
        NEW,
    );
    assert!(table_ttl.statements.is_empty(), "{:?}", table_ttl.statements);
    assert_eq!(table_ttl.refused.len(), 1, "{:?}", table_ttl.refused);
    assert_eq!(table_ttl.refused[0].clause, "TTL");
    assert!(
        table_ttl.refused[0].why.contains("deleted"),
        "{}",
        table_ttl.refused[0].why
    );
    assert_eq!(
        table_ttl.refused[0].alter.as_deref(),
        Some("ALTER TABLE `app`.`t` MODIFY TTL at + toIntervalDay(30)")
    );
    let column_ttl = table(
        "CREATE TABLE s.o0 (`id` UInt64, `at` DateTime, `v` String TTL at + toIntervalDay(7)) ENGINE = MergeTree \
         ORDER BY id SETTINGS index_granularity = 8192",
        live,
        NEW,
    );
    assert!(column_ttl.statements.is_empty(), "{:?}", column_ttl.statements);
    assert_eq!(column_ttl.refused[0].clause, "column v");
    assert_eq!(
        column_ttl.refused[0].alter.as_deref(),
        Some("ALTER TABLE `app`.`t` MODIFY COLUMN `v` String TTL at + toIntervalDay(7)")
    );
    // A column TTL the declaration no longer has is removed.
    let removed = table(
        "CREATE TABLE s.o0 (`id` UInt64, `at` DateTime, `v` String) ENGINE = MergeTree ORDER BY id \
         SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t (`id` UInt64, `at` DateTime, `v` String TTL at + toIntervalDay(7)) ENGINE = MergeTree \
         ORDER BY id SETTINGS index_granularity = 8192",
        NEW,
    );
    assert_eq!(
        removed.statements,
        ["ALTER TABLE `app`.`t` MODIFY COLUMN `v` REMOVE TTL"]
    );
}

#[test]
fn tables_whose_paths_hold_a_uuid_are_replica_sets_of_their_own() {
    // As 26.9 prints an argument-less engine's default path: the UUID is left as `{uuid}`.
    let live = parse(
        "CREATE TABLE app.a (`id` UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{uuid}/{shard}', \
         '{replica}') ORDER BY id SETTINGS index_granularity = 8192",
    );
    let macros = "macro\tshard\ts1\nmacro\treplica\tr1\n";
    let a = replica_path(&live, "app", "a", "u-a", macros).expect("replicated");
    let b = replica_path(&live, "app", "b", "u-b", macros).expect("replicated");
    assert_ne!(a, b, "two tables of one shard are not one replica set");
    assert_eq!(a, "/clickhouse/tables/u-a/s1");
    // The UUID a declaration gives is the table's on every pod; without one, each pod drew its
    // own (review V8).
    assert_eq!(
        declared_uuid("UUID '6f1e0a3c-1d2b-4c5e-9f00-0123456789ab' (`id` UInt64) ENGINE = ReplicatedMergeTree ORDER BY id")
            .as_deref(),
        Some("6f1e0a3c-1d2b-4c5e-9f00-0123456789ab")
    );
    assert_eq!(
        declared_uuid("(`id` UUID, `u` UUID DEFAULT generateUUIDv4()) ENGINE = Memory"),
        None
    );
    // A path without a UUID is as the server expands it.
    let named = parse(
        "CREATE TABLE app.a (`id` UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', \
         '{replica}') ORDER BY id",
    );
    assert_eq!(
        replica_path(&named, "app", "a", "u-a", macros).as_deref(),
        Some("/clickhouse/tables/s1/app/a")
    );
}

#[test]
fn a_column_is_modified_once_per_alter() {
    // A new MATERIALIZED expression and a new codec: two MODIFY COLUMNs of one column. In one
    // ALTER a 24.x/25.x server drops the expression (ClickHouse PR 114807); each gets its own.
    let plan = table(
        "CREATE TABLE s.o0 (`event` String, `c` UInt32 MATERIALIZED JSONExtractUInt(event, 'x') CODEC(T64, LZ4), \
         `n` UInt8) ENGINE = MergeTree ORDER BY tuple() SETTINGS index_granularity = 8192",
        "CREATE TABLE app.t (`event` String, `c` UInt32) ENGINE = MergeTree ORDER BY tuple() \
         SETTINGS index_granularity = 8192",
        NEW,
    );
    assert!(plan.refused.is_empty(), "{:?}", plan.refused);
    assert_eq!(
        plan.statements,
        [
            stored("c"),
            "ALTER TABLE `app`.`t` MODIFY COLUMN `c` UInt32 MATERIALIZED JSONExtractUInt(event, 'x'), ADD COLUMN \
             IF NOT EXISTS `n` UInt8 AFTER `c`"
                .to_owned(),
            "ALTER TABLE `app`.`t` MODIFY COLUMN `c` UInt32 CODEC(T64, LZ4)".to_owned(),
        ]
    );
}
