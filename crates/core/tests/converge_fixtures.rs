//! Convergence planned from the live-schema check's output captured on real engines: ClickHouse
//! 18.16 (a server) and 26.9 (chdb-core); see `fixtures/clickhouse/converge/README.md`.
//!
//! Each case is a pod's state (`cases/NAME.live.sql`) and what the statements declare
//! (`cases/NAME.declared.sql`). The check's script for the declaration, with the server's version
//! (`cases/NAME.script.sql`, rendered by the first test below under `RENDER_CAPTURE_SCRIPTS=1`),
//! ran on each engine after the pod's state; its stdout is `ENGINE/NAME.out`. The statements each
//! test expects were written by hand from what the engine holds and the ALTERs it accepts.

use std::fs;
use std::path::{Path, PathBuf};

use clickhouse_schema_core::converge::{Options, PodPlan, plan_pod};
use clickhouse_schema_core::live_schema::VerifyPlan;

const SCRATCH: &str = "_clickhouse_schema_verify_000000000000f1f0";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clickhouse/converge")
}

fn verify_plan(case: &str) -> VerifyPlan {
    let path = root().join("cases").join(format!("{case}.declared.sql"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let statements: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    VerifyPlan::new(&statements, "app").with_server_version()
}

fn plan_with(engine: &str, case: &str, allow: &[String]) -> PodPlan {
    let path = root().join(engine).join(format!("{case}.out"));
    let stdout = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let plan = verify_plan(case);
    let report = plan
        .read("pod-0", SCRATCH, &stdout)
        .unwrap_or_else(|e| panic!("{engine}/{case}: unreadable ({e:?})"));
    plan_pod(
        &plan,
        &report,
        SCRATCH,
        &stdout,
        Options {
            allow_type_change: allow,
            on_cluster: None,
        },
    )
}

fn plan(engine: &str, case: &str) -> PodPlan {
    plan_with(engine, case, &[])
}

fn statements(plan: &PodPlan) -> Vec<String> {
    plan.statements().map(|(_, s)| s.clone()).collect()
}

fn refused(plan: &PodPlan) -> Vec<String> {
    plan.objects
        .iter()
        .flat_map(|o| o.refused.iter().map(|r| r.clause.clone()))
        .collect()
}

#[test]
fn the_captured_scripts_are_the_ones_the_plan_renders_today() {
    let render = std::env::var_os("RENDER_CAPTURE_SCRIPTS").is_some_and(|v| v == "1");
    for entry in fs::read_dir(root().join("cases")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(case) = name.strip_suffix(".declared.sql") {
            let file = root().join("cases").join(format!("{case}.script.sql"));
            let script = verify_plan(case).script(SCRATCH);
            if render {
                fs::write(&file, &script).unwrap();
            } else {
                assert_eq!(
                    fs::read_to_string(&file).unwrap(),
                    script,
                    "{case}: re-capture it"
                );
            }
        }
    }
}

#[test]
fn the_server_version_is_read() {
    assert_eq!(
        plan("18.16", "add_columns").server_version.as_deref(),
        Some("18.16.1")
    );
    assert!(
        plan("chdb-26.9", "add_columns")
            .server_version
            .unwrap()
            .starts_with("26.9")
    );
}

#[test]
fn columns_are_added_after_their_declared_neighbour() {
    assert_eq!(
        statements(&plan("18.16", "add_columns")),
        [
            "ALTER TABLE `app`.`t` ADD COLUMN m UInt8 DEFAULT 7 AFTER `id`, ADD COLUMN e String DEFAULT 'x' AFTER `v`"
        ]
    );
    assert_eq!(
        statements(&plan("chdb-26.9", "add_columns")),
        [
            "ALTER TABLE `app`.`t` ADD COLUMN IF NOT EXISTS `m` UInt8 DEFAULT 7 AFTER `id`, ADD COLUMN IF NOT \
             EXISTS `e` String DEFAULT 'x' AFTER `v`"
        ]
    );
}

#[test]
fn a_first_column_needs_first() {
    assert_eq!(statements(&plan("18.16", "add_first")), Vec::<String>::new());
    assert_eq!(refused(&plan("18.16", "add_first")), ["column f"]);
    assert_eq!(
        statements(&plan("chdb-26.9", "add_first")),
        ["ALTER TABLE `app`.`t` ADD COLUMN IF NOT EXISTS `f` UInt8 FIRST"]
    );
}

#[test]
fn a_default_and_a_comment_are_modified() {
    for (engine, column) in [("18.16", "`v` String"), ("chdb-26.9", "`v` String")] {
        assert_eq!(
            statements(&plan(engine, "modify_default_comment")),
            [
                // Only where every part stores the column (review C3).
                "SELECT throwIf(count() > 0) AS parts_without_the_column FROM system.parts WHERE database = 'app' \
                 AND table = 't' AND active AND rows > 0 AND name NOT IN (SELECT name FROM system.parts_columns WHERE database = \
                 'app' AND table = 't' AND active AND column = 'v') SETTINGS read_overflow_mode = 'throw', \
                 timeout_overflow_mode = 'throw', result_overflow_mode = 'throw', max_rows_to_read = 0, \
                 max_bytes_to_read = 0"
                    .to_owned(),
                format!("ALTER TABLE `app`.`t` MODIFY COLUMN {column} DEFAULT 'b', COMMENT COLUMN `v` 'new'")
            ],
            "{engine}"
        );
    }
}

#[test]
fn a_type_change_is_refused_then_allowed_and_a_live_column_kept() {
    for engine in ["18.16", "chdb-26.9"] {
        let refused_plan = plan(engine, "type_change_and_extra");
        assert_eq!(statements(&refused_plan), Vec::<String>::new(), "{engine}");
        let object = &refused_plan.objects[0];
        assert_eq!(object.refused[0].clause, "column v");
        assert_eq!(
            object.refused[0].alter.as_deref(),
            Some("ALTER TABLE `app`.`t` MODIFY COLUMN `v` UInt16")
        );
        let allowed = plan_with(engine, "type_change_and_extra", &["app.t.v".to_owned()]);
        let alter = "ALTER TABLE `app`.`t` MODIFY COLUMN `v` UInt16".to_owned();
        // A modern server changes the type in a mutation: every value is checked first.
        let expected = if engine == "18.16" {
            vec![alter]
        } else {
            vec![
                "SELECT throwIf(count() > 0) AS values_that_do_not_convert FROM `app`.`t` WHERE \
                 accurateCastOrNull(`v`, 'UInt16') IS NULL OR CAST(accurateCastOrNull(`v`, 'UInt16'), \
                 'Nullable(UInt8)') != `v` SETTINGS read_overflow_mode = 'throw', timeout_overflow_mode = 'throw', \
                 result_overflow_mode = 'throw', max_rows_to_read = 0, max_bytes_to_read = 0"
                    .to_owned(),
                alter,
            ]
        };
        assert_eq!(statements(&allowed), expected, "{engine}");
        assert_eq!(allowed.objects[0].kept_columns, ["extra"]);
    }
}

#[test]
fn an_appended_order_by_column_is_added_with_the_key() {
    assert_eq!(
        statements(&plan("18.16", "order_by_append")),
        ["ALTER TABLE `app`.`t` ADD COLUMN k UInt8 AFTER `id`, MODIFY ORDER BY (id, k)"]
    );
    assert_eq!(
        statements(&plan("chdb-26.9", "order_by_append")),
        ["ALTER TABLE `app`.`t` ADD COLUMN IF NOT EXISTS `k` UInt8 AFTER `id`, MODIFY ORDER BY (id, k)"]
    );
    // Once done, the server prints the old key as PRIMARY KEY: accepted, nothing left to run.
    for engine in ["18.16", "chdb-26.9"] {
        let after = plan(engine, "order_by_appended");
        assert_eq!(statements(&after), Vec::<String>::new(), "{engine}");
        assert_eq!(refused(&after), Vec::<String>::new(), "{engine}");
        assert_eq!(after.objects[0].accepted, ["PRIMARY KEY"], "{engine}");
    }
}

#[test]
fn a_changed_view_is_replaced() {
    assert_eq!(
        statements(&plan("18.16", "view_changed"))[4..],
        [
            // Created beside the old view and swapped in, after two checks (review C5).
            "CREATE VIEW `app`.`v__clickhouse_schema_new` AS SELECT 2 AS a",
            "RENAME TABLE `app`.`v` TO `app`.`v__clickhouse_schema_old`, `app`.`v__clickhouse_schema_new` TO `app`.`v`",
            "DROP TABLE `app`.`v__clickhouse_schema_old`"
        ]
    );
    assert_eq!(
        statements(&plan("chdb-26.9", "view_changed"))[1..],
        // After the check that it is a plain view.
        ["CREATE OR REPLACE VIEW `app`.`v` AS SELECT 2 AS a"]
    );
}

#[test]
fn table_clauses_indexes_and_projections_on_26_9() {
    // The declaration adds a table TTL, which would delete rows already in the table: the table
    // is left alone, and the refusal names the ALTER (the other clauses are planned in the unit
    // tests, `converge::tests`).
    let plan = plan("chdb-26.9", "modern_clauses");
    assert!(statements(&plan).is_empty(), "{:?}", statements(&plan));
    let ttl = plan.objects[0]
        .refused
        .iter()
        .find(|r| r.clause == "TTL")
        .expect("the TTL refused");
    assert_eq!(
        ttl.alter.as_deref(),
        Some("ALTER TABLE `app`.`t` MODIFY TTL at + toIntervalDay(30)")
    );
    assert_eq!(plan.objects[0].refused.len(), 1, "{:?}", plan.objects[0].refused);
}

#[test]
fn another_engine_is_refused() {
    for engine in ["18.16", "chdb-26.9"] {
        let p = plan(engine, "engine_changed");
        assert_eq!(statements(&p), Vec::<String>::new(), "{engine}");
        let clauses = refused(&p);
        assert!(clauses.contains(&"ENGINE".to_owned()), "{engine}: {clauses:?}");
    }
}
