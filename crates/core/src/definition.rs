//! A table's definition as clauses, so two definitions can be compared clause by clause.
//!
//! Verification compares what the statements declare with what a pod holds, both as the server
//! itself prints them (`SHOW CREATE TABLE` of the live table, and of a scratch table created from
//! the declaration). The server's printing removes most spelling differences; what is left (names,
//! the scratch database, comments, spacing, keyword case) is removed here by reading tokens:
//! whitespace and comments go, keywords are compared upper case, and the object's own name is not a
//! clause. Each clause keeps its tokens' text joined by single spaces, which is also what a
//! difference shows to the user.
//!
//! Clauses: the column list (one entry per column: name, type, default, comment, codec, as a whole),
//! `ENGINE`, `PARTITION BY`, `PRIMARY KEY`, `ORDER BY`, `SAMPLE BY`, `TTL`, `SETTINGS`, and for
//! views `AS SELECT ...` and `TO target`. Not yet used by the apply path.

use crate::lexer::{Token, TokenKind, significant};

/// The clause keywords that start a new clause after the column list, in ClickHouse's order.
const CLAUSES: &[&[&str]] = &[
    &["ENGINE"],
    &["PARTITION", "BY"],
    &["PRIMARY", "KEY"],
    &["ORDER", "BY"],
    &["SAMPLE", "BY"],
    &["TTL"],
    &["SETTINGS"],
    &["TO"],
    &["AS"],
    &["COMMENT"],
];

/// One table or view definition, clause by clause.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Definition {
    /// The columns, in order, each as `name type [DEFAULT …] [COMMENT …] [CODEC(…)]`.
    pub columns: Vec<String>,
    /// Every other clause present: its name (`ENGINE`, `ORDER BY`, ...) and its text.
    pub clauses: Vec<(String, String)>,
}

/// One clause whose text differs between two definitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// `columns`, `column <name>`, or a clause name (`ORDER BY`).
    pub clause: String,
    /// The declared text; empty when the declaration lacks the clause.
    pub declared: String,
    /// The live text; empty when the live object lacks it.
    pub live: String,
}

fn spelled(sql: &str, tokens: &[Token]) -> String {
    tokens
        .iter()
        .map(|t| {
            let text = t.text(sql);
            if t.kind == TokenKind::Word && is_keyword_like(text) {
                text.to_ascii_uppercase()
            } else {
                text.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Words whose case the server ignores. Identifiers keep their case.
fn is_keyword_like(word: &str) -> bool {
    const WORDS: &[&str] = &[
        "DEFAULT",
        "MATERIALIZED",
        "ALIAS",
        "COMMENT",
        "CODEC",
        "BY",
        "KEY",
        "AS",
        "SELECT",
        "FROM",
        "WHERE",
        "GROUP",
        "ORDER",
        "HAVING",
        "LIMIT",
        "AND",
        "OR",
        "NOT",
        "NULL",
        "ENGINE",
        "SETTINGS",
        "TTL",
        "PARTITION",
        "PRIMARY",
        "SAMPLE",
        "TO",
        "IN",
        "ASC",
        "DESC",
        "INTERVAL",
    ];
    WORDS.iter().any(|k| k.eq_ignore_ascii_case(word))
}

/// Splits a `CREATE TABLE|VIEW|MATERIALIZED VIEW ... name [(columns)] clauses...` into clauses.
/// The statement's keywords and the object's name are skipped; the name is not part of the
/// definition.
pub fn parse(sql: &str) -> Definition {
    let tokens: Vec<Token> = significant(sql).collect();
    let mut pos = 0;
    // Skip the leading keywords and the (possibly qualified) name.
    while pos < tokens.len()
        && tokens[pos].kind == TokenKind::Word
        && [
            "CREATE",
            "ATTACH",
            "OR",
            "REPLACE",
            "TABLE",
            "VIEW",
            "MATERIALIZED",
            "IF",
            "NOT",
            "EXISTS",
        ]
        .iter()
        .any(|k| tokens[pos].is_keyword(sql, k))
    {
        pos += 1;
    }
    // The name: an identifier, optionally `db.` before it.
    if pos < tokens.len() {
        pos += 1;
        if tokens.get(pos).is_some_and(|t| t.is_punct(sql, ".")) {
            pos += 2;
        }
    }
    // ON CLUSTER c is where the statement runs, not what it defines.
    if tokens.get(pos).is_some_and(|t| t.is_keyword(sql, "ON"))
        && tokens.get(pos + 1).is_some_and(|t| t.is_keyword(sql, "CLUSTER"))
    {
        pos += 3;
    }
    let mut definition = Definition::default();
    if tokens.get(pos).is_some_and(|t| t.is_punct(sql, "(")) {
        let (columns, end) = column_list(sql, &tokens, pos);
        definition.columns = columns;
        pos = end;
    }
    let mut current: Option<(String, usize)> = None;
    let mut depth = 0usize;
    let mut i = pos;
    while i < tokens.len() {
        let t = tokens[i];
        if t.is_punct(sql, "(") {
            depth += 1;
        } else if t.is_punct(sql, ")") {
            depth = depth.saturating_sub(1);
        }
        let starts = (depth == 0)
            .then(|| {
                CLAUSES.iter().find(|words| {
                    words
                        .iter()
                        .enumerate()
                        .all(|(k, w)| tokens.get(i + k).is_some_and(|t| t.is_keyword(sql, w)))
                })
            })
            .flatten();
        // `AS SELECT` of a view runs to the end: nothing after it starts a clause.
        if let Some(words) = starts
            && current.as_ref().is_none_or(|(name, _)| name != "AS")
        {
            if let Some((name, from)) = current.take() {
                definition.clauses.push((name, spelled(sql, &tokens[from..i])));
            }
            current = Some((words.join(" "), i + words.len()));
            i += words.len();
            continue;
        }
        i += 1;
    }
    if let Some((name, from)) = current {
        definition.clauses.push((name, spelled(sql, &tokens[from..])));
    }
    definition
}

/// The column list starting at the `(` at `open`: each top-level comma-separated entry, and the
/// position after the closing `)`.
fn column_list(sql: &str, tokens: &[Token], open: usize) -> (Vec<String>, usize) {
    let mut columns = Vec::new();
    let mut depth = 0usize;
    let mut start = open + 1;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        if t.is_punct(sql, "(") {
            depth += 1;
        } else if t.is_punct(sql, ")") {
            depth -= 1;
            if depth == 0 {
                if start < i {
                    columns.push(spelled(sql, &tokens[start..i]));
                }
                return (columns, i + 1);
            }
        } else if depth == 1 && t.is_punct(sql, ",") {
            columns.push(spelled(sql, &tokens[start..i]));
            start = i + 1;
        }
    }
    // Unbalanced: everything after `(` is the column list.
    if start < tokens.len() {
        columns.push(spelled(sql, &tokens[start..]));
    }
    (columns, tokens.len())
}

/// The clauses that differ between the declared and the live definition, columns first.
pub fn differences(declared: &Definition, live: &Definition) -> Vec<Difference> {
    let mut out = Vec::new();
    if declared.columns != live.columns {
        out.push(Difference {
            clause: "columns".into(),
            declared: declared.columns.join(", "),
            live: live.columns.join(", "),
        });
    }
    let text = |d: &Definition, name: &str| {
        d.clauses
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    };
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in declared.clauses.iter().chain(&live.clauses) {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    for name in names {
        let (d, l) = (text(declared, name), text(live, name));
        if d != l {
            out.push(Difference {
                clause: name.to_string(),
                declared: d,
                live: l,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clauses_of_a_table_as_18_16_prints_it() {
        let d = parse(
            "CREATE TABLE shop.orders ( id UInt64,  at DateTime DEFAULT now() COMMENT 'x') ENGINE = \
             ReplicatedMergeTree('/clickhouse/tables/{shard}/shop/orders', '{replica}') PARTITION BY toYYYYMM(at) \
             ORDER BY (id, at) SETTINGS index_granularity = 8192",
        );
        assert_eq!(
            d.columns,
            ["id UInt64", "at DateTime DEFAULT now ( ) COMMENT 'x'"]
        );
        let names: Vec<&str> = d.clauses.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ENGINE", "PARTITION BY", "ORDER BY", "SETTINGS"]);
        assert_eq!(d.clauses[2].1, "( id , at )");
    }

    #[test]
    fn spelling_is_not_a_difference() {
        let a = parse("CREATE TABLE IF NOT EXISTS a.t (id UInt64) ENGINE = MergeTree ORDER BY id");
        let b = parse(
            "create   table other.t2 on cluster main -- the same table\n ( id   UInt64 ) engine=MergeTree order /* x */ by id",
        );
        assert_eq!(differences(&a, &b), []);
    }

    #[test]
    fn a_changed_order_by_and_a_missing_column_are() {
        let declared = parse("CREATE TABLE t (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY (id, at)");
        let live = parse("CREATE TABLE t (id UInt64) ENGINE = MergeTree ORDER BY at");
        assert_eq!(
            differences(&declared, &live),
            [
                Difference {
                    clause: "columns".into(),
                    declared: "id UInt64, at DateTime".into(),
                    live: "id UInt64".into(),
                },
                Difference {
                    clause: "ORDER BY".into(),
                    declared: "( id , at )".into(),
                    live: "at".into(),
                },
            ]
        );
    }

    #[test]
    fn a_view_query_runs_to_the_end() {
        let d = parse("CREATE MATERIALIZED VIEW s.mv TO s.t AS SELECT id FROM s.src ORDER BY id");
        assert_eq!(
            d.clauses,
            [
                ("TO".to_string(), "s . t".to_string()),
                ("AS".to_string(), "SELECT id FROM s . src ORDER BY id".to_string())
            ]
        );
    }
}
