//! Reading the per-host status table a distributed DDL statement prints, so that a host's failure
//! never reads as success.
//!
//! An `ON CLUSTER` statement waits for every host of the cluster and prints one row per host
//! (TabSeparated, as clickhouse-client prints a result read from stdin): `host`, `port`, `status`
//! (the host's error code, 0 when it ran the statement), `error`, `num_hosts_remaining`,
//! `num_hosts_active`. What happens on a failure depends on `distributed_ddl_output_mode`:
//! - `throw` (the default) and `none`: the first host error, or the timeout, is the statement's
//!   error, and the client exits non-zero: the ordinary failure path sees it.
//! - `throw_only_active`: as `throw`, but hosts that are not active (down) are not waited for.
//! - `null_status_on_timeout`: a host error still throws, but on `distributed_ddl_task_timeout`
//!   the hosts that had not finished get a row with a NULL status, and the client exits 0.
//! - `never_throw`: nothing throws: a failed host only has a non-zero `status` in its row (and
//!   unfinished ones a NULL one), and the client exits 0.
//!
//! In a `Replicated` database every DDL prints a table of `shard`, `replica`, `status` (`OK`,
//! `IN_PROGRESS`, `QUEUED`), `num_hosts_remaining`, `num_hosts_active` instead; a replica that has
//! not applied the entry by the timeout is `IN_PROGRESS` or `QUEUED` there.
//!
//! So a statement that exited 0 is read here: a row with a non-zero status, a NULL one (except
//! under `throw_only_active`, where only a host that is down is left NULL, and runs the statement
//! from the queue when it is back), or a replica not `OK` makes it a failure. Other output (a statement's own result) has another shape and is
//! left alone.

use crate::sql::lexer::{Token, significant};

/// One host whose row says it did not run the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostStatus {
    /// `host:port`, or `shard|replica` in a Replicated database.
    pub host: String,
    /// What the row says.
    pub outcome: HostOutcome,
}

/// How one host's row reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostOutcome {
    /// It ran the statement and failed: its ClickHouse code and error text (unredacted: the
    /// caller redacts it against the statement).
    Failed {
        /// Its ClickHouse error code.
        code: i64,
        /// Its error text.
        error: String,
    },
    /// It had not finished when the wait ran out (a NULL status, or a replica `IN_PROGRESS` /
    /// `QUEUED`): it may still run it in the background.
    Unfinished,
}

/// How the statement's `distributed_ddl_output_mode` reads a NULL status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NullStatus {
    /// `throw_only_active`: only a host that is not active (down) is left with a NULL status,
    /// the active ones throw on the timeout; the down host runs the statement from the queue
    /// when it is back. Not a failure.
    Inactive,
    /// Any other mode: a host that had not finished by the timeout, active or not. A failure
    /// with an unknown outcome.
    Unfinished,
}

/// The hosts of `stdout`'s status table that did not run `sql` successfully. Empty when all did,
/// or when `stdout` is no status table (a statement that is not distributed DDL).
pub fn problems(sql: &str, stdout: &str, null_status: NullStatus) -> Vec<HostStatus> {
    let on_cluster = has_on_cluster(sql);
    let mut out = Vec::new();
    for line in stdout.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let counts = |a: &str, b: &str| a.parse::<u64>().is_ok() && b.parse::<u64>().is_ok();
        match fields.as_slice() {
            // host, port, status, error, num_hosts_remaining, num_hosts_active
            [host, port, status, error, remaining, active]
                if on_cluster && port.parse::<u16>().is_ok() && counts(remaining, active) =>
            {
                let outcome = match *status {
                    "\\N" if null_status == NullStatus::Inactive => None,
                    "\\N" => Some(HostOutcome::Unfinished),
                    s => match s.parse::<i64>() {
                        Ok(0) => None,
                        Ok(code) => Some(HostOutcome::Failed {
                            code,
                            error: if *error == "\\N" {
                                String::new()
                            } else {
                                unescape(error)
                            },
                        }),
                        // Not a status table after all.
                        Err(_) => return Vec::new(),
                    },
                };
                if let Some(outcome) = outcome {
                    out.push(HostStatus {
                        host: format!("{}:{port}", unescape(host)),
                        outcome,
                    });
                }
            }
            // shard, replica, status, num_hosts_remaining, num_hosts_active
            [_, _, "OK", remaining, active] if counts(remaining, active) => {}
            [shard, replica, status, remaining, active]
                if counts(remaining, active) && matches!(*status, "IN_PROGRESS" | "QUEUED") =>
            {
                out.push(HostStatus {
                    host: format!("{}|{}", unescape(shard), unescape(replica)),
                    outcome: HostOutcome::Unfinished,
                });
            }
            _ => {}
        }
    }
    out
}

/// Whether `sql` has an `ON CLUSTER` clause (read from tokens: not inside a literal or comment).
pub(crate) fn has_on_cluster(sql: &str) -> bool {
    let tokens: Vec<Token> = significant(sql).collect();
    tokens
        .windows(2)
        .any(|w| w[0].is_keyword(sql, "ON") && w[1].is_keyword(sql, "CLUSTER"))
}

/// A TabSeparated field's text.
fn unescape(field: &str) -> String {
    crate::sql::clickhouse_text::unescape(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATE: &str = "CREATE TABLE IF NOT EXISTS app.t ON CLUSTER main (id UInt64) ENGINE = Memory";

    #[test]
    fn every_host_at_zero_is_success() {
        let stdout = "chi-0-0\t9000\t0\t\t1\t2\nchi-0-1\t9000\t0\t\t0\t2\n";
        assert_eq!(problems(CREATE, stdout, NullStatus::Unfinished), []);
    }

    #[test]
    fn a_host_error_under_never_throw_is_a_failure() {
        let stdout = "chi-0-0\t9000\t0\t\t1\t2\nchi-0-1\t9000\t57\tCode: 57. DB::Exception: Table app.t already \
                      exists. (TABLE_ALREADY_EXISTS) (version 24.8.1.1)\t0\t2\n";
        assert_eq!(
            problems(CREATE, stdout, NullStatus::Unfinished),
            [HostStatus {
                host: "chi-0-1:9000".into(),
                outcome: HostOutcome::Failed {
                    code: 57,
                    error: "Code: 57. DB::Exception: Table app.t already exists. (TABLE_ALREADY_EXISTS) \
                            (version 24.8.1.1)"
                        .into()
                },
            }]
        );
    }

    #[test]
    fn a_null_status_after_the_timeout_is_unfinished() {
        let stdout = "chi-0-0\t9000\t0\t\\N\t1\t1\nchi-0-1\t9000\t\\N\t\\N\t1\t1\n";
        assert_eq!(
            problems(CREATE, stdout, NullStatus::Unfinished),
            [HostStatus {
                host: "chi-0-1:9000".into(),
                outcome: HostOutcome::Unfinished,
            }]
        );
    }

    #[test]
    fn under_throw_only_active_a_null_status_is_a_host_that_is_down() {
        let stdout = "chi-0-0\t9000\t0\t\\N\t1\t1\nchi-0-1\t9000\t\\N\t\\N\t1\t1\n";
        assert_eq!(problems(CREATE, stdout, NullStatus::Inactive), []);
        // A host that ran it and failed is still a failure.
        let failed = "chi-0-0\t9000\t60\tCode: 60. DB::Exception: no table\t0\t1\n";
        assert_eq!(problems(CREATE, failed, NullStatus::Inactive).len(), 1);
    }

    #[test]
    fn a_replicated_database_replica_not_ok_is_unfinished() {
        let stdout = "s1\tr1\tOK\t1\t2\ns1\tr2\tIN_PROGRESS\t1\t2\n";
        let create = "CREATE TABLE IF NOT EXISTS rdb.t (id UInt64) ENGINE = ReplicatedMergeTree ORDER BY id";
        assert_eq!(
            problems(create, stdout, NullStatus::Unfinished),
            [HostStatus {
                host: "s1|r2".into(),
                outcome: HostOutcome::Unfinished,
            }]
        );
        assert_eq!(
            problems(
                create,
                "s1\tr1\tOK\t0\t2\ns1\tr2\tOK\t0\t2\n",
                NullStatus::Unfinished
            ),
            []
        );
    }

    #[test]
    fn other_output_is_no_status_table() {
        // A statement's own result with six columns, without ON CLUSTER.
        assert_eq!(
            problems(
                "SELECT 'a', 9000, 5, 'x', 1, 1",
                "a\t9000\t5\tx\t1\t1\n",
                NullStatus::Unfinished
            ),
            []
        );
        // ON CLUSTER only in a literal.
        assert_eq!(
            problems(
                "SELECT 'ON CLUSTER main', 9000, 5, 'x', 1, 1",
                "a\t9000\t5\tx\t1\t1\n",
                NullStatus::Unfinished
            ),
            []
        );
        assert_eq!(problems(CREATE, "", NullStatus::Unfinished), []);
    }
}
