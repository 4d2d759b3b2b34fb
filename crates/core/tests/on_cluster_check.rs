//! The onCluster declaration check, one behaviour per test.

use clickhouse_schema_core::sql::on_cluster::check_statement;

fn check(sql: &str) -> Result<(), String> {
    check_statement("statements", 1, sql, "cluster")
}

fn refused(sql: &str) -> String {
    match check(sql) {
        Ok(()) => panic!("accepted {sql:?}"),
        Err(reason) => reason,
    }
}

fn assert_no_clause(sql: &str) {
    let reason = refused(sql);
    assert!(
        reason.contains("has no ON CLUSTER 'cluster' clause"),
        "{sql:?}: {reason}"
    );
}

#[test]
fn every_quoting_style_of_the_name_counts() {
    for sql in [
        "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER cluster",
        "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER 'cluster'",
        "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER `cluster`",
        "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER \"cluster\"",
        "CREATE TABLE t ON CLUSTER 'clu''ster' (x UInt8) ENGINE = Memory",
    ] {
        let expected_ok = !sql.contains("''");
        assert_eq!(check(sql).is_ok(), expected_ok, "{sql}: {:?}", check(sql));
    }
}

#[test]
fn quoted_names_are_compared_after_decoding() {
    assert!(check_statement("statements", 0, "DROP TABLE t ON CLUSTER 'a\\'b'", "a'b").is_ok());
    assert!(check_statement("statements", 0, "DROP TABLE t ON CLUSTER 'a''b'", "a'b").is_ok());
    assert!(check_statement("statements", 0, "DROP TABLE t ON CLUSTER `a``b`", "a`b").is_ok());
    assert!(
        check_statement(
            "statements",
            0,
            "DROP TABLE t ON CLUSTER '{cluster}'",
            "{cluster}"
        )
        .is_ok()
    );
    assert!(check_statement("statements", 0, "DROP TABLE t ON CLUSTER '\\x63'", "c").is_ok());
}

#[test]
fn the_name_is_compared_exactly() {
    let reason = refused("DROP TABLE t ON CLUSTER Cluster");
    assert!(reason.contains("runs ON CLUSTER 'Cluster'"), "{reason}");
    assert!(check("DROP TABLE t ON CLUSTER 'cluster '").is_err());
}

#[test]
fn keywords_are_case_insensitive() {
    assert!(check("create table t on cluster cluster (x UInt8) engine = Memory").is_ok());
    assert!(check("Create Table t oN ClUsTeR 'cluster' (x UInt8) Engine = Memory").is_ok());
}

#[test]
fn a_clause_inside_a_string_literal_does_not_count() {
    assert_no_clause("INSERT INTO t VALUES ('ON CLUSTER cluster')");
    assert_no_clause("CREATE TABLE t (x String DEFAULT 'x ON CLUSTER cluster') ENGINE = Memory");
}

#[test]
fn a_clause_inside_any_comment_does_not_count() {
    assert_no_clause("CREATE TABLE t (x UInt8) ENGINE = Memory -- ON CLUSTER cluster");
    assert_no_clause("CREATE TABLE t (x UInt8) ENGINE = Memory # ON CLUSTER cluster");
    assert_no_clause("CREATE TABLE t /* ON CLUSTER cluster */ (x UInt8) ENGINE = Memory");
    assert_no_clause("CREATE TABLE t /* /* nested */ ON CLUSTER cluster */ (x UInt8) ENGINE = Memory");
    assert_no_clause("CREATE TABLE t (x UInt8) ENGINE = Memory // ON CLUSTER cluster");
}

#[test]
fn a_clause_inside_a_quoted_identifier_does_not_count() {
    assert_no_clause("CREATE TABLE `t ON CLUSTER cluster` (x UInt8) ENGINE = Memory");
    assert_no_clause("CREATE TABLE \"t ON CLUSTER cluster\" (x UInt8) ENGINE = Memory");
}

#[test]
fn a_clause_inside_an_unterminated_literal_does_not_count() {
    assert_no_clause("CREATE TABLE t (x String DEFAULT 'oops ON CLUSTER cluster");
    assert_no_clause("CREATE TABLE t /* ON CLUSTER cluster");
    assert_no_clause("DROP TABLE t ON CLUSTER 'cluster");
}

#[test]
fn a_clause_split_by_whitespace_or_comments_counts() {
    assert!(check("DROP TABLE t ON\n\tCLUSTER\n  cluster").is_ok());
    assert!(check("DROP TABLE t ON /* x */ CLUSTER /* y */ 'cluster'").is_ok());
    assert!(check("DROP TABLE t ON -- line\nCLUSTER cluster").is_ok());
}

#[test]
fn another_cluster_gets_its_own_message_naming_both() {
    let reason = refused("CREATE TABLE t ON CLUSTER 'other' (x UInt8) ENGINE = Memory");
    assert!(
        reason.starts_with("statements 1 runs ON CLUSTER 'other'"),
        "{reason}"
    );
    assert!(reason.contains("configured for cluster 'cluster'"), "{reason}");
}

#[test]
fn naming_the_cluster_once_does_not_excuse_another_clause() {
    let reason = refused("RENAME TABLE a TO b ON CLUSTER cluster, c TO d ON CLUSTER other");
    assert!(reason.contains("'other'"), "{reason}");
}

#[test]
fn use_and_set_are_refused_by_name() {
    for (sql, verb) in [
        ("USE orders", "USE"),
        ("use orders", "USE"),
        ("SET max_threads = 1", "SET"),
        ("set allow_experimental_object_type = 1", "SET"),
        ("-- pick the db\n/* really */ USE orders", "USE"),
        ("USE orders ON CLUSTER cluster", "USE"),
    ] {
        let reason = refused(sql);
        assert!(
            reason.starts_with(&format!("statements 1 is a {verb} statement")),
            "{sql}: {reason}"
        );
        assert!(reason.contains("execution.mode 'fanout'"), "{reason}");
    }
}

#[test]
fn other_statements_without_a_clause_are_refused_for_carrying_none() {
    for sql in [
        "INSERT INTO t VALUES (1)",
        "SYSTEM FLUSH LOGS",
        "CREATE TABLE t AS analytics.source",
    ] {
        assert_no_clause(sql);
    }
}

#[test]
fn the_reason_names_field_index_and_the_way_out() {
    let reason = check_statement("deleteStatements", 0, "DROP TABLE t", "cluster").unwrap_err();
    assert!(
        reason.starts_with("deleteStatements 0 has no ON CLUSTER 'cluster' clause"),
        "{reason}"
    );
    assert!(reason.contains("add the clause"), "{reason}");
    assert!(reason.contains("execution.mode 'fanout'"), "{reason}");
}

#[test]
fn empty_and_comment_only_statements_are_refused() {
    for sql in ["", "   \n\t", "-- nothing", "/* nothing */"] {
        let reason = refused(sql);
        assert!(reason.starts_with("statements 1 is empty"), "{sql:?}: {reason}");
    }
}

#[test]
fn a_clause_missing_its_name_does_not_count() {
    assert_no_clause("DROP TABLE t ON CLUSTER");
    assert_no_clause("DROP TABLE t ON CLUSTER ;");
}
