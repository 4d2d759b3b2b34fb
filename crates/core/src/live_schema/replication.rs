//! Comparing a `Replicated*` engine's ZooKeeper path and replica name, declared against live.
//!
//! The scratch copy of a replicated table is created with its plain engine (no ZooKeeper path is
//! ever made), so its path and replica name are compared here, as text. That text is not what the
//! user wrote once the server has rewritten it:
//! - ClickHouse 20.x and later expand `{database}` and `{table}` into the table's metadata at
//!   CREATE (so the table can be renamed without moving its path): `'/t/{shard}/{database}/{table}'`
//!   is printed as `'/t/{shard}/app/events'`. 18.16 keeps the macros as written.
//! - Some versions between also expanded `{uuid}` into the table's UUID; current ones keep it.
//! - An argument-less `ReplicatedMergeTree` (22.x+) gets the server's `default_replica_path` and
//!   `default_replica_name` written in (`'/clickhouse/tables/{uuid}/{shard}'`, `'{replica}'` by
//!   default), then expanded as above.
//! - A server may be configured to expand other macros; the pod's `system.macros` says which.
//!
//! So both sides are expanded the server's way before they are compared, and a declared `{uuid}`
//! matches a live UUID. A real change of path or replica name still differs: a rebuild onto a new
//! path relies on it.

use std::collections::BTreeMap;

pub(crate) use crate::sql::definition::is_replicated;
use crate::sql::definition::{self, Part, path_argument_count};

/// The server's default path and replica name for an argument-less `Replicated` engine when the
/// pod's `system.server_settings` could not say (ClickHouse's own defaults).
pub(super) const DEFAULT_REPLICA_PATH: &str = "/clickhouse/tables/{uuid}/{shard}";
pub(super) const DEFAULT_REPLICA_NAME: &str = "{replica}";

/// What the pod says about how it expands engine arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ServerFacts {
    /// `system.macros`: macro name to substitution.
    pub macros: BTreeMap<String, String>,
    /// `default_replica_path` and `default_replica_name` from `system.server_settings`.
    pub default_path: Option<String>,
    pub default_replica: Option<String>,
}

/// The path and replica arguments of a `Replicated*` engine clause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReplicaArgs {
    /// `ReplicatedX('/path', 'replica', ...)`: the two literals' contents.
    Explicit(String, String),
    /// Written as keys (not both string literals): compared as written.
    Other(Vec<String>),
    /// `ReplicatedX` or `ReplicatedX(engine args)`: the server's defaults.
    Default,
}

/// The engine's path and replica arguments, or `None` when it is not replicated.
pub(super) fn replica_args(engine: &Part) -> Option<ReplicaArgs> {
    let (name, args) = definition::engine_parts(&engine.text)?;
    if !is_replicated(&name) {
        return None;
    }
    let count = path_argument_count(&args);
    if count == 0 {
        return Some(ReplicaArgs::Default);
    }
    let literal = |p: &Part| {
        let k = &p.key;
        (k.len() >= 2 && k.starts_with('\'') && k.ends_with('\'') && !k[1..k.len() - 1].contains('\''))
            .then(|| k[1..k.len() - 1].to_string())
    };
    match (args.first().and_then(literal), args.get(1).and_then(literal)) {
        (Some(path), Some(replica)) if count == 2 => Some(ReplicaArgs::Explicit(path, replica)),
        _ => Some(ReplicaArgs::Other(
            args.iter().take(count).map(|a| a.key.clone()).collect(),
        )),
    }
}

/// Whether the declared and the live engine name the same path and replica, on the table
/// `database.table`, as the server behind `facts` stores them.
pub(super) fn same_replication(
    declared: &Part,
    live: &Part,
    database: &str,
    table: &str,
    facts: &ServerFacts,
) -> bool {
    let (Some(d), Some(l)) = (replica_args(declared), replica_args(live)) else {
        return replica_args(declared).is_none() && replica_args(live).is_none();
    };
    let explicit = |args: ReplicaArgs| match args {
        ReplicaArgs::Explicit(p, r) => Some((p, r)),
        ReplicaArgs::Default => Some((
            facts
                .default_path
                .clone()
                .unwrap_or_else(|| DEFAULT_REPLICA_PATH.to_string()),
            facts
                .default_replica
                .clone()
                .unwrap_or_else(|| DEFAULT_REPLICA_NAME.to_string()),
        )),
        ReplicaArgs::Other(_) => None,
    };
    match (explicit(d.clone()), explicit(l.clone())) {
        (Some((dp, dr)), Some((lp, lr))) => {
            same_argument(&dp, &lp, database, table, facts) && same_argument(&dr, &lr, database, table, facts)
        }
        _ => d == l,
    }
}

/// One argument (path or replica name), declared against live.
fn same_argument(declared: &str, live: &str, database: &str, table: &str, facts: &ServerFacts) -> bool {
    let special = |s: &str| expand(s, database, table, None);
    let all = |s: &str| expand(s, database, table, Some(&facts.macros));
    [(special(declared), special(live)), (all(declared), all(live))]
        .iter()
        .any(|(d, l)| matches_with_uuid(d, l))
}

/// `text` with `{database}` and `{table}` replaced (and every macro of `macros`, when given), as the
/// server expands them at CREATE. `{uuid}` is left: it is matched by [`matches_with_uuid`].
fn expand(text: &str, database: &str, table: &str, macros: Option<&BTreeMap<String, String>>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            rest = &rest[open..];
            break;
        };
        let name = &rest[open + 1..open + close];
        let value = match name {
            "database" => Some(database),
            "table" => Some(table),
            "uuid" => None,
            _ => macros.and_then(|m| m.get(name)).map(String::as_str),
        };
        match value {
            Some(v) => out.push_str(v),
            None => out.push_str(&rest[open..=open + close]),
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Equal, or equal with each `{uuid}` of `declared` standing for a UUID in `live` (a version that
/// expanded it) or for `{uuid}` itself.
fn matches_with_uuid(declared: &str, live: &str) -> bool {
    if declared == live {
        return true;
    }
    let Some((head, tail)) = declared.split_once("{uuid}") else {
        return false;
    };
    let Some(after) = live.strip_prefix(head) else {
        return false;
    };
    let rest = if let Some(r) = after.strip_prefix("{uuid}") {
        r
    } else if after.len() >= 36 && after.is_char_boundary(36) && is_uuid(&after[..36]) {
        &after[36..]
    } else {
        return false;
    };
    matches_with_uuid(tail, rest)
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(text: &str) -> Part {
        Part {
            key: String::new(),
            text: text.to_string(),
        }
    }

    fn same(declared: &str, live: &str, facts: &ServerFacts) -> bool {
        same_replication(&engine(declared), &engine(live), "app", "events", facts)
    }

    #[test]
    fn database_and_table_macros_expanded_by_the_server_are_the_declared_ones() {
        let f = ServerFacts::default();
        assert!(same(
            "ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')",
            "ReplicatedMergeTree('/clickhouse/tables/{shard}/app/events', '{replica}')",
            &f
        ));
        assert!(same(
            "ReplicatedMergeTree('/t/{table}', '{replica}_{table}')",
            "ReplicatedMergeTree('/t/events', '{replica}_events')",
            &f
        ));
        // As 18.16 keeps them.
        assert!(same(
            "ReplicatedMergeTree('/t/{database}/{table}', '{replica}')",
            "ReplicatedMergeTree('/t/{database}/{table}', '{replica}')",
            &f
        ));
    }

    #[test]
    fn a_changed_path_or_replica_name_still_differs() {
        let f = ServerFacts::default();
        assert!(!same(
            "ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}_v2', '{replica}')",
            "ReplicatedMergeTree('/clickhouse/tables/{shard}/app/events', '{replica}')",
            &f
        ));
        // Another table's name is not this table's macro.
        assert!(!same(
            "ReplicatedMergeTree('/t/{database}/{table}', '{replica}')",
            "ReplicatedMergeTree('/t/app/other', '{replica}')",
            &f
        ));
        assert!(!same(
            "ReplicatedMergeTree('/t/{table}', '{replica}')",
            "ReplicatedMergeTree('/t/events', 'r2')",
            &f
        ));
        assert!(!same(
            "ReplicatedMergeTree('/t/{table}', '{replica}')",
            "MergeTree",
            &f
        ));
    }

    #[test]
    fn an_argument_less_engine_takes_the_server_defaults() {
        let mut f = ServerFacts::default();
        assert!(same(
            "ReplicatedMergeTree",
            "ReplicatedMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}')",
            &f
        ));
        assert!(same(
            "ReplicatedReplacingMergeTree(ver)",
            "ReplicatedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', ver)",
            &f
        ));
        assert!(!same(
            "ReplicatedMergeTree",
            "ReplicatedMergeTree('/clickhouse/tables/{shard}/app/events', '{replica}')",
            &f
        ));
        f.default_path = Some("/ch/{shard}/{database}/{table}".into());
        f.default_replica = Some("{replica}".into());
        assert!(same(
            "ReplicatedMergeTree()",
            "ReplicatedMergeTree('/ch/{shard}/app/events', '{replica}')",
            &f
        ));
    }

    #[test]
    fn a_declared_uuid_matches_a_uuid_the_server_expanded() {
        let f = ServerFacts::default();
        assert!(same(
            "ReplicatedMergeTree('/t/{uuid}/{shard}', '{replica}')",
            "ReplicatedMergeTree('/t/{uuid}/{shard}', '{replica}')",
            &f
        ));
        assert!(same(
            "ReplicatedMergeTree('/t/{uuid}/{shard}', '{replica}')",
            "ReplicatedMergeTree('/t/95b3d450-7c15-4135-8606-b2c274381314/{shard}', '{replica}')",
            &f
        ));
        assert!(!same(
            "ReplicatedMergeTree('/t/{uuid}/{shard}', '{replica}')",
            "ReplicatedMergeTree('/t/not-a-uuid/{shard}', '{replica}')",
            &f
        ));
    }

    #[test]
    fn macros_of_the_pod_count_when_the_server_expanded_them() {
        let mut f = ServerFacts::default();
        assert!(!same(
            "ReplicatedMergeTree('/t/{shard}/{table}', '{replica}')",
            "ReplicatedMergeTree('/t/s1/events', 'r-a')",
            &f
        ));
        f.macros.insert("shard".into(), "s1".into());
        f.macros.insert("replica".into(), "r-a".into());
        assert!(same(
            "ReplicatedMergeTree('/t/{shard}/{table}', '{replica}')",
            "ReplicatedMergeTree('/t/s1/events', 'r-a')",
            &f
        ));
        assert!(!same(
            "ReplicatedMergeTree('/t/{shard}/{table}', '{replica}')",
            "ReplicatedMergeTree('/t/s2/events', 'r-a')",
            &f
        ));
    }
}
