//! The live-schema comparison on output captured from real engines: ClickHouse 18.16 (a server)
//! and 26.9 (chdb-core), see `fixtures/clickhouse/live-schema/README.md`.
//!
//! Each case is a pod's state (`cases/NAME.live.sql`, run on the engine first) and what the
//! statements declare (`cases/NAME.declared.sql`, one statement a line). The verification script
//! for the declaration (`cases/NAME.script.sql`, rendered by the scripts test below with
//! `RENDER_CAPTURE_SCRIPTS=1`) ran on each engine after the pod's state; its stdout is `ENGINE/NAME.out`.
//! The outcome each test expects was written by hand from what the engine holds, never by running
//! the comparison.

use std::fs;
use std::path::{Path, PathBuf};

use clickhouse_schema_core::live_schema::{ObjectStatus, PodReport, VerifyPlan};

/// The scratch database every captured script used.
const SCRATCH: &str = "_clickhouse_schema_verify_000000000000f1f0";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clickhouse/live-schema")
}

fn plan(case: &str) -> VerifyPlan {
    let path = root().join("cases").join(format!("{case}.declared.sql"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let statements: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    VerifyPlan::new(&statements, "app")
}

/// The report of `case` on `engine` (`18.16` or `chdb-26.9`).
fn report(engine: &str, case: &str) -> PodReport {
    let path = root().join(engine).join(format!("{case}.out"));
    let stdout = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    plan(case)
        .read("pod-0", SCRATCH, &stdout)
        .unwrap_or_else(|e| panic!("{engine}/{case}: unreadable ({e:?})"))
}

/// Each object's status and the clauses that differ (sorted).
fn outcome(engine: &str, case: &str) -> Vec<(ObjectStatus, Vec<String>)> {
    report(engine, case)
        .objects
        .into_iter()
        .map(|o| {
            let mut clauses: Vec<String> = o.differences.into_iter().map(|d| d.clause).collect();
            clauses.sort();
            (o.status, clauses)
        })
        .collect()
}

fn ok() -> Vec<(ObjectStatus, Vec<String>)> {
    vec![(ObjectStatus::Ok, vec![])]
}

fn differs(clauses: &[&str]) -> Vec<(ObjectStatus, Vec<String>)> {
    vec![(
        ObjectStatus::Differs,
        clauses.iter().map(|c| c.to_string()).collect(),
    )]
}

const BOTH: &[&str] = &["18.16", "chdb-26.9"];
const MODERN: &[&str] = &["chdb-26.9"];

#[test]
fn the_captured_scripts_are_the_ones_the_plan_renders_today() {
    // A fixture whose script changed since its capture would test output of another script.
    // With RENDER_CAPTURE_SCRIPTS=1 (by hand, before a capture) it writes the scripts instead.
    let render = std::env::var_os("RENDER_CAPTURE_SCRIPTS").is_some_and(|v| v == "1");
    for entry in fs::read_dir(root().join("cases")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(case) = name.strip_suffix(".declared.sql") {
            let file = root().join("cases").join(format!("{case}.script.sql"));
            if render {
                fs::write(&file, plan(case).script(SCRATCH)).unwrap();
                continue;
            }
            let captured = fs::read_to_string(&file).unwrap();
            assert_eq!(captured, plan(case).script(SCRATCH), "{case}: capture again");
        }
    }
}

#[test]
fn macros_the_server_expanded_into_a_replicated_path_are_no_difference() {
    for engine in BOTH {
        assert_eq!(outcome(engine, "replicated_macros"), ok(), "{engine}");
    }
}

#[test]
fn a_changed_replicated_path_or_replica_name_is_an_engine_difference() {
    for engine in BOTH {
        assert_eq!(
            outcome(engine, "replicated_path_changed"),
            differs(&["ENGINE"]),
            "{engine}"
        );
        assert_eq!(
            outcome(engine, "replicated_replica_changed"),
            differs(&["ENGINE"]),
            "{engine}"
        );
    }
}

#[test]
fn an_argument_less_replicated_engine_matches_the_servers_defaults() {
    for engine in MODERN {
        assert_eq!(outcome(engine, "replicated_argless"), ok(), "{engine}");
        assert_eq!(outcome(engine, "replicated_replacing_argless"), ok(), "{engine}");
        assert_eq!(outcome(engine, "replicated_uuid_path"), ok(), "{engine}");
        // The defaults are another path than the one now declared: a rebuild moves the table.
        assert_eq!(
            outcome(engine, "replicated_argless_declared_explicit_path"),
            differs(&["ENGINE"]),
            "{engine}"
        );
    }
}

#[test]
fn the_script_reads_macros_and_the_default_path_only_when_a_replicated_engine_needs_them() {
    let argless = fs::read_to_string(root().join("cases/replicated_argless.script.sql")).unwrap();
    assert!(argless.contains("FROM system.macros"));
    assert!(argless.contains("FROM system.server_settings"));
    let explicit = fs::read_to_string(root().join("cases/replicated_macros.script.sql")).unwrap();
    assert!(explicit.contains("FROM system.macros"));
    assert!(
        !explicit.contains("system.server_settings"),
        "18.16 has no such table"
    );
    let plain = fs::read_to_string(root().join("cases/order_by_parens.script.sql")).unwrap();
    assert!(!plain.contains("system.macros"));
}

#[test]
fn redundant_parentheses_are_no_difference_and_a_tuple_is() {
    for engine in BOTH {
        assert_eq!(outcome(engine, "order_by_parens"), ok(), "{engine}");
        assert_eq!(
            outcome(engine, "order_by_tuple"),
            differs(&["ORDER BY"]),
            "{engine}"
        );
        assert_eq!(outcome(engine, "view_where_parens"), ok(), "{engine}");
        assert_eq!(
            outcome(engine, "view_where_changed"),
            differs(&["AS"]),
            "{engine}"
        );
    }
}

#[test]
fn a_refreshable_materialized_view_as_the_server_prints_it_is_no_difference() {
    // The server adds the target's database, the column list and `DEFINER = default SQL
    // SECURITY DEFINER`; the declaration says `TO t` and neither.
    for engine in MODERN {
        assert_eq!(outcome(engine, "refreshable_mv"), ok(), "{engine}");
    }
}

#[test]
fn a_refreshable_materialized_views_schedule_target_and_security_are_differences() {
    for engine in MODERN {
        assert_eq!(
            outcome(engine, "refreshable_mv_schedule_changed"),
            differs(&["REFRESH"]),
            "{engine}"
        );
        assert_eq!(
            outcome(engine, "refreshable_mv_target_changed"),
            differs(&["TO"]),
            "{engine}"
        );
        assert_eq!(
            outcome(engine, "refreshable_mv_security_changed"),
            differs(&["SQL SECURITY"]),
            "{engine}"
        );
    }
}

#[test]
fn a_materialized_views_target_without_a_database_is_in_the_client_database() {
    for engine in BOTH {
        assert_eq!(outcome(engine, "mv_to_without_database"), ok(), "{engine}");
        assert_eq!(
            outcome(engine, "mv_to_other_database"),
            differs(&["TO"]),
            "{engine}"
        );
    }
}

#[test]
fn the_settings_the_server_adds_to_an_inner_engine_are_no_difference() {
    for engine in BOTH {
        assert_eq!(outcome(engine, "mv_inner_engine"), ok(), "{engine}");
        assert_eq!(
            outcome(engine, "mv_inner_engine_settings_changed"),
            differs(&["SETTINGS"]),
            "{engine}"
        );
    }
}

#[test]
fn a_views_definer_and_security_are_compared() {
    for engine in MODERN {
        assert_eq!(outcome(engine, "view_definer"), ok(), "{engine}");
        assert_eq!(
            outcome(engine, "view_security_changed"),
            differs(&["DEFINER", "SQL SECURITY"]),
            "{engine}"
        );
    }
}

#[test]
fn a_hidden_credential_matches_the_declared_literal_and_other_changes_still_show() {
    for engine in MODERN {
        assert_eq!(outcome(engine, "dictionary_hidden_lifetime"), ok(), "{engine}");
        assert_eq!(
            outcome(engine, "dictionary_host_changed"),
            differs(&["SOURCE"]),
            "{engine}"
        );
        assert_eq!(
            outcome(engine, "dictionary_lifetime_changed"),
            differs(&["LIFETIME"]),
            "{engine}"
        );
    }
    for engine in BOTH {
        assert_eq!(outcome(engine, "mysql_engine_hidden"), ok(), "{engine}");
        assert_eq!(
            outcome(engine, "mysql_engine_changed"),
            differs(&["ENGINE"]),
            "{engine}"
        );
    }
    // Neither the password nor the table name reaches a message.
    let report = report("chdb-26.9", "mysql_engine_changed");
    let shown = format!("{:?}", report.objects[0].differences);
    assert!(!shown.contains("pw123") && !shown.contains("'other'"), "{shown}");
}
