//! The distributed DDL status-table reader on what a real server printed (see
//! `fixtures/clickhouse/ddl-status/README.md`). Expected outcomes are written by hand from the
//! captured output.

use std::fs;
use std::path::Path;

use clickhouse_schema_core::sql::ddl_status::{HostOutcome, HostStatus, NullStatus, problems};

fn captured(name: &str) -> (String, String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clickhouse/ddl-status");
    let sql = fs::read_to_string(dir.join(format!("{name}.sql"))).unwrap();
    let out = fs::read_to_string(dir.join("18.16").join(format!("{name}.out"))).unwrap();
    (sql, out)
}

#[test]
fn a_host_at_status_0_is_success_on_18_16() {
    for name in ["1_create_database", "2_create_table"] {
        let (sql, out) = captured(name);
        assert!(!out.is_empty(), "{name}: the table is there");
        assert_eq!(problems(&sql, &out, NullStatus::Unfinished), [], "{name}");
    }
}

#[test]
fn a_host_error_row_on_18_16_is_read_as_that_hosts_failure() {
    let (sql, out) = captured("3_create_table_again");
    assert_eq!(
        problems(&sql, &out, NullStatus::Unfinished),
        [HostStatus {
            host: "127.0.0.1:19700".into(),
            outcome: HostOutcome::Failed {
                code: 57,
                error: "Code: 57, e.displayText() = DB::Exception: Table app.t already exists., e.what() = \
                        DB::Exception"
                    .into(),
            },
        }]
    );
}
