//! A table's or view's definition as parts (columns and clauses), so two definitions can be compared
//! part by part and a difference can be shown the way the user wrote it.
//!
//! Verification compares what the statements declare with what a pod holds, both as the server
//! itself prints them (`system.tables.create_table_query` of the live object, and of a scratch copy
//! created from the declaration). The server's printing removes most spelling differences (`1.0`
//! becomes `1.`, quotes and line breaks go); what is left is removed here by reading tokens:
//! whitespace and comments go, keywords are compared upper case, a quoted identifier is compared by
//! its name, numbers by their value, and the object's name, `ON CLUSTER` and `UUID` are not part of
//! the definition. One level of parentheses around a whole clause, list element or query-clause
//! expression is not either: ClickHouse 26.x prints it as written (`ORDER BY (id)`), 18.16 drops it. Each part keeps two texts: a key, which is what is compared, and the source text
//! with its spacing collapsed, which is what a difference shows.
//!
//! What counts as a difference: a column (name, type, `DEFAULT`/`MATERIALIZED`/`ALIAS` expression,
//! `COMMENT`, `CODEC`, TTL: the whole entry), the order of the columns, and each clause: `ENGINE`
//! with its arguments, `PARTITION BY`, `PRIMARY KEY`, `ORDER BY`, `SAMPLE BY`, `TTL`, `SETTINGS`,
//! `COMMENT`, for views `TO` (a materialized view's target) and `AS` (the query), and for
//! dictionaries `SOURCE`, `LAYOUT`, `LIFETIME` and `RANGE`, for views `DEFINER` and `SQL SECURITY`,
//! and a refreshable materialized view's schedule, `REFRESH`. What a current server prints on
//! its own is matched as such: `'[HIDDEN]'` in place of a credential literal, `LIFETIME(MIN 0 MAX
//! n)` for `LIFETIME(n)`, and the `index_granularity = 8192` it writes into MergeTree settings. `POPULATE` is not part of a definition
//! (the server does not keep it).

use crate::sql::lexer::{Token, TokenKind, significant, tokenize};

/// The clause keywords that start a new clause after the column list, in ClickHouse's order.
const CLAUSES: &[&[&str]] = &[
    &["ENGINE"],
    &["PARTITION", "BY"],
    &["PRIMARY", "KEY"],
    &["ORDER", "BY"],
    &["SAMPLE", "BY"],
    &["TTL"],
    &["SETTINGS"],
    &["POPULATE"],
    &["EMPTY"],
    &["TO"],
    &["AS"],
    &["COMMENT"],
    // A dictionary's parts.
    &["SOURCE"],
    &["LAYOUT"],
    &["LIFETIME"],
    &["RANGE"],
    // A view's security and a refreshable materialized view's schedule (22.x+, 24.x+).
    &["REFRESH"],
    &["DEFINER"],
    &["SQL", "SECURITY"],
];

/// Words whose case the server ignores, compared upper case. Identifiers keep their case.
const KEYWORDS: &[&str] = &[
    "DEFAULT",
    "MATERIALIZED",
    "ALIAS",
    "EPHEMERAL",
    "COMMENT",
    "CODEC",
    "BY",
    "KEY",
    "AS",
    "SELECT",
    "DISTINCT",
    "FROM",
    "WHERE",
    "PREWHERE",
    "GROUP",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "UNION",
    "ALL",
    "JOIN",
    "LEFT",
    "RIGHT",
    "INNER",
    "OUTER",
    "FULL",
    "CROSS",
    "ANY",
    "ON",
    "USING",
    "WITH",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "IS",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "BETWEEN",
    "LIKE",
    "ILIKE",
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
    "INDEX",
    "TYPE",
    "GRANULARITY",
    "CONSTRAINT",
    "CHECK",
    "PROJECTION",
    "DELETE",
    "RECOMPRESS",
    "VOLUME",
    "DISK",
];

/// One part of a definition: what is compared, and what is shown.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Part {
    /// The comparison form: significant tokens, normalized, joined by single spaces.
    pub key: String,
    /// The source text with comments removed and whitespace collapsed, for messages.
    pub text: String,
}

/// One entry of the column list (a column, or an `INDEX`/`CONSTRAINT`/`PROJECTION`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The column's name as the server reads it, or `INDEX name` and the like.
    pub name: String,
    /// The whole entry.
    pub part: Part,
}

/// One clause after the column list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    /// `ENGINE`, `ORDER BY`, `AS`, ...
    pub name: String,
    /// The clause's text after its keywords.
    pub part: Part,
}

/// One table or view definition, part by part.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Definition {
    /// The column list, in order; empty when the statement has none.
    pub columns: Vec<Column>,
    /// Every other clause present, in the order written.
    pub clauses: Vec<Clause>,
}

impl Definition {
    /// The clause named `name`, if present.
    pub fn clause(&self, name: &str) -> Option<&Part> {
        self.clauses.iter().find(|c| c.name == name).map(|c| &c.part)
    }
}

/// One part whose definition differs between the declaration and the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// `column <name>`, `column order`, or a clause name (`ORDER BY`, `ENGINE`, `AS`).
    pub clause: String,
    /// The declared text; empty when the declaration lacks the part.
    pub declared: String,
    /// The live text; empty when the live object lacks it.
    pub live: String,
}

/// Splits `CREATE|ATTACH [OR REPLACE] TABLE|VIEW|MATERIALIZED VIEW|DICTIONARY [IF NOT EXISTS] name
/// [UUID '…'] [ON CLUSTER c] [TO target] [(columns)] clauses…` into parts. Also reads the form the
/// server prints.
pub fn parse(sql: &str) -> Definition {
    let tokens: Vec<Token> = significant(sql).collect();
    let mut pos = after_name(sql, &tokens);
    let mut definition = Definition::default();
    // A materialized view's target comes before its column list: `TO db.t (cols) AS SELECT`.
    if tokens.get(pos).is_some_and(|t| t.is_keyword(sql, "TO")) {
        let from = pos + 1;
        let end = name_end(sql, &tokens, from);
        definition.clauses.push(Clause {
            name: "TO".into(),
            part: part(sql, &tokens[from..end]),
        });
        pos = end;
    }
    if tokens.get(pos).is_some_and(|t| t.is_punct(sql, "(")) {
        let (columns, end) = column_list(sql, &tokens, pos);
        definition.columns = columns;
        pos = end;
    }
    let mut current: Option<(String, usize)> = None;
    let mut depth = 0usize;
    let mut i = pos;
    let close = |definition: &mut Definition, current: Option<(String, usize)>, to: usize| {
        if let Some((name, mut from)) = current
            && !matches!(name.as_str(), "POPULATE" | "EMPTY")
        {
            // `ENGINE = X` and `ENGINE X` are one engine.
            if name == "ENGINE" && tokens.get(from).is_some_and(|t| t.is_punct(sql, "=")) {
                from += 1;
            }
            definition.clauses.push(Clause {
                name,
                part: part(sql, &tokens[from..to]),
            });
        }
    };
    while i < tokens.len() {
        let t = tokens[i];
        if t.is_punct(sql, "(") {
            depth += 1;
        } else if t.is_punct(sql, ")") {
            depth = depth.saturating_sub(1);
        }
        // A query (`AS SELECT`, `AS WITH`, `AS (SELECT`) runs to the end: nothing after it starts
        // a clause. `AS other_table` (a table copying another's structure) is a clause like any.
        let in_query = current.as_ref().is_some_and(|(name, from)| {
            name == "AS"
                && tokens.get(*from).is_some_and(|t| {
                    t.is_keyword(sql, "SELECT") || t.is_keyword(sql, "WITH") || t.is_punct(sql, "(")
                })
        });
        let starts = (depth == 0 && !in_query)
            .then(|| CLAUSES.iter().find(|words| keywords_at(sql, &tokens, i, words)))
            .flatten();
        // `SQL SECURITY DEFINER` ends with the word, `DEFINER = x` is the clause.
        let starts = starts
            .filter(|words| words[0] != "DEFINER" || tokens.get(i + 1).is_some_and(|t| t.is_punct(sql, "=")));
        if let Some(words) = starts {
            let after_schedule = current.as_ref().is_some_and(|(name, _)| name == "REFRESH");
            close(&mut definition, current.take(), i);
            // A refreshable materialized view's `TO db.t (columns)` comes after its schedule: the
            // target is the name, the column list is the definition's. (`TTL ... TO DISK 'd'`
            // is a TTL's.)
            if words[0] == "TO" && after_schedule && definition.clause("TO").is_none() {
                let end = name_end(sql, &tokens, i + 1);
                definition.clauses.push(Clause {
                    name: "TO".into(),
                    part: part(sql, &tokens[i + 1..end]),
                });
                i = end;
                if tokens.get(i).is_some_and(|t| t.is_punct(sql, "(")) && definition.columns.is_empty() {
                    let (columns, after) = column_list(sql, &tokens, i);
                    definition.columns = columns;
                    i = after;
                }
                continue;
            }
            current = Some((words.join(" "), i + words.len()));
            i += words.len();
            continue;
        }
        i += 1;
    }
    close(&mut definition, current, tokens.len());
    definition
}

/// Position after the statement's leading keywords, the object's name, `UUID '…'` and
/// `ON CLUSTER c`.
pub(crate) fn after_name(sql: &str, tokens: &[Token]) -> usize {
    // In order: the verb, the kind, IF NOT EXISTS. Each word is only a keyword in its place: a
    // database may well be called `live` or `table`.
    const VERBS: &[&[&str]] = &[
        &["CREATE", "OR", "REPLACE"],
        &["CREATE"],
        &["ATTACH"],
        &["REPLACE"],
    ];
    const KINDS: &[&[&str]] = &[
        &["MATERIALIZED", "VIEW"],
        &["LIVE", "VIEW"],
        &["WINDOW", "VIEW"],
        &["TEMPORARY", "TABLE"],
        &["TABLE"],
        &["VIEW"],
        &["DICTIONARY"],
        &["DATABASE"],
    ];
    let mut pos = 0;
    for words in [VERBS, KINDS, &[&["IF", "NOT", "EXISTS"][..]][..]] {
        if let Some(found) = words.iter().find(|w| keywords_at(sql, tokens, pos, w)) {
            pos += found.len();
        }
    }
    pos = name_end(sql, tokens, pos);
    if tokens.get(pos).is_some_and(|t| t.is_keyword(sql, "UUID")) {
        pos += 2;
    }
    if keywords_at(sql, tokens, pos, &["ON", "CLUSTER"]) {
        pos += 3;
    }
    pos.min(tokens.len())
}

/// The position after a name at `pos`: `name` or `db.name`.
fn name_end(sql: &str, tokens: &[Token], pos: usize) -> usize {
    let mut end = pos + 1;
    if tokens.get(end).is_some_and(|t| t.is_punct(sql, ".")) {
        end += 2;
    }
    end.min(tokens.len())
}

pub(crate) fn keywords_at(sql: &str, tokens: &[Token], at: usize, words: &[&str]) -> bool {
    words
        .iter()
        .enumerate()
        .all(|(k, w)| tokens.get(at + k).is_some_and(|t| t.is_keyword(sql, w)))
}

/// The column list starting at the `(` at `open`: each top-level comma-separated entry, and the
/// position after the closing `)`.
fn column_list(sql: &str, tokens: &[Token], open: usize) -> (Vec<Column>, usize) {
    let mut columns = Vec::new();
    let mut depth = 0usize;
    let mut start = open + 1;
    let push = |columns: &mut Vec<Column>, entry: &[Token]| {
        if !entry.is_empty() {
            columns.push(Column {
                name: column_name(sql, entry),
                part: part(sql, entry),
            });
        }
    };
    for (i, t) in tokens.iter().enumerate().skip(open) {
        if t.is_punct(sql, "(") {
            depth += 1;
        } else if t.is_punct(sql, ")") {
            depth -= 1;
            if depth == 0 {
                push(&mut columns, &tokens[start..i]);
                return (columns, i + 1);
            }
        } else if depth == 1 && t.is_punct(sql, ",") {
            push(&mut columns, &tokens[start..i]);
            start = i + 1;
        }
    }
    // Unbalanced: everything after `(` is the column list.
    push(&mut columns, &tokens[start.min(tokens.len())..]);
    (columns, tokens.len())
}

/// A column's name as the server reads it; `INDEX i`, `CONSTRAINT c`, `PROJECTION p` for the
/// other entries of a column list.
fn column_name(sql: &str, entry: &[Token]) -> String {
    // The name itself, its escapes decoded: what `ident` quotes again for an ALTER, and what
    // `a\`b` and "a`b" both name.
    let word = |t: &Token| match t.quote(sql) {
        Some(_) => String::from_utf8_lossy(&t.value(sql)).into_owned(),
        None => t.text(sql).to_string(),
    };
    match entry {
        [first, second, ..]
            if ["INDEX", "CONSTRAINT", "PROJECTION"]
                .iter()
                .any(|k| first.is_keyword(sql, k)) =>
        {
            format!("{} {}", first.text(sql).to_ascii_uppercase(), word(second))
        }
        [first, ..] => word(first),
        [] => String::new(),
    }
}

/// The key and the display text of `tokens` (significant tokens of `sql`, in order).
fn part(sql: &str, tokens: &[Token]) -> Part {
    let keys: Vec<(bool, String)> = tokens
        .iter()
        .map(|t| (t.kind == TokenKind::Punct, key_of(sql, t)))
        .collect();
    let key = without_redundant_parentheses(keys)
        .into_iter()
        .map(|(_, k)| k)
        .collect::<Vec<_>>()
        .join(" ");
    Part {
        key,
        text: display(sql, tokens),
    }
}

/// Words after which a parenthesized expression is a whole operand: a clause's or a query
/// clause's expression (`ORDER BY (id)`, `WHERE (x > 1)`).
const OPERAND_AFTER: &[&str] = &["BY", "WHERE", "PREWHERE", "HAVING", "KEY"];

/// Words that end an expression after a parenthesized operand (`ORDER BY (id) DESC`,
/// `WHERE (x > 1) GROUP BY x`).
const OPERAND_BEFORE: &[&str] = &[
    "ASC",
    "DESC",
    "NULLS",
    "COLLATE",
    "GROUP",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "SETTINGS",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "WINDOW",
    "QUALIFY",
    "FORMAT",
    "WITH",
    "PREWHERE",
    "WHERE",
];

/// The keys (`(is punctuation, key)`) with every redundant pair of parentheses removed: one around
/// a single expression (no top-level comma, so not a tuple) that stands as a whole clause, a whole
/// list element or a whole query-clause expression. ClickHouse 26.x prints one such level as
/// written (`ORDER BY (id)`), 18.16 and an undecorated declaration do not (`ORDER BY id`): the same
/// key either way. Parentheses that group an operand of an operator (`(a + b) * c`) or call a
/// function stay, so a real change of an expression still differs.
fn without_redundant_parentheses(mut keys: Vec<(bool, String)>) -> Vec<(bool, String)> {
    let punct = |k: &(bool, String), p: &str| k.0 && k.1 == p;
    let word = |k: &(bool, String), set: &[&str]| !k.0 && set.contains(&k.1.as_str());
    loop {
        let mut removed = false;
        let mut i = 0;
        while i < keys.len() {
            if !punct(&keys[i], "(") {
                i += 1;
                continue;
            }
            // The matching `)`, and whether a top-level comma separates elements inside.
            let (mut depth, mut close, mut comma) = (0usize, None, false);
            for (j, k) in keys.iter().enumerate().skip(i) {
                if punct(k, "(") || punct(k, "[") {
                    depth += 1;
                } else if punct(k, ")") || punct(k, "]") {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(j);
                        break;
                    }
                } else if depth == 1 && punct(k, ",") {
                    comma = true;
                }
            }
            let Some(close) = close else { break };
            let opens = i == 0 || {
                let prev = &keys[i - 1];
                punct(prev, ",") || punct(prev, "(") || word(prev, OPERAND_AFTER)
            };
            let ends = keys.get(close + 1).is_none_or(|next| {
                punct(next, ",") || punct(next, ")") || punct(next, ";") || word(next, OPERAND_BEFORE)
            });
            if opens && ends && !comma && close > i + 1 {
                keys.remove(close);
                keys.remove(i);
                removed = true;
            } else {
                i += 1;
            }
        }
        if !removed {
            return keys;
        }
    }
}

fn key_of(sql: &str, t: &Token) -> String {
    let text = t.text(sql);
    match t.kind {
        TokenKind::Word if KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(text)) => text.to_ascii_uppercase(),
        // `"id"` and `` `id` `` are the identifier id.
        TokenKind::QuotedIdentifier => t.body(sql).to_string(),
        TokenKind::Number => number_key(text),
        _ => text.to_string(),
    }
}

/// `1.0`, `1.` and `1.00` are one number; `1` (an integer) is another, as it is to the server.
fn number_key(text: &str) -> String {
    let decimal = text.contains(['.', 'e', 'E']) && !text.starts_with("0x") && !text.starts_with("0X");
    match text.parse::<f64>() {
        Ok(value) if decimal && value.is_finite() => format!("{value:?}").trim_end_matches('0').to_string(),
        _ => text.to_string(),
    }
}

/// The source from the first to the last token with comments removed and every run of
/// whitespace (or comments) collapsed into one space.
fn display(sql: &str, tokens: &[Token]) -> String {
    let (Some(first), Some(last)) = (tokens.first(), tokens.last()) else {
        return String::new();
    };
    let mut out = String::new();
    let mut gap = false;
    for t in tokenize(&sql[first.start..last.end]) {
        if t.is_trivia() {
            gap = true;
            continue;
        }
        if gap && !out.is_empty() {
            out.push(' ');
        }
        gap = false;
        out.push_str(t.text(&sql[first.start..last.end]));
    }
    out
}

/// The engine clause's name and arguments (`= ReplicatedMergeTree('/p', '{replica}', ver)`):
/// the name, and each top-level argument's key and text.
pub(crate) fn engine_parts(sql: &str) -> Option<(String, Vec<Part>)> {
    let tokens: Vec<Token> = significant(sql).collect();
    let mut pos = 0;
    if tokens.first().is_some_and(|t| t.is_punct(sql, "=")) {
        pos = 1;
    }
    let name = tokens.get(pos)?.text(sql).to_string();
    let mut args = Vec::new();
    if tokens.get(pos + 1).is_some_and(|t| t.is_punct(sql, "(")) {
        let mut depth = 0usize;
        let mut start = pos + 2;
        for (i, t) in tokens.iter().enumerate().skip(pos + 1) {
            if t.is_punct(sql, "(") {
                depth += 1;
            } else if t.is_punct(sql, ")") {
                depth -= 1;
                if depth == 0 {
                    if start < i {
                        args.push(part(sql, &tokens[start..i]));
                    }
                    break;
                }
            } else if depth == 1 && t.is_punct(sql, ",") {
                args.push(part(sql, &tokens[start..i]));
                start = i + 1;
            }
        }
    }
    Some((name, args))
}

/// Whether an engine name is a replicated table engine (`ReplicatedMergeTree`; not `Replicated`
/// alone, which is a database engine).
pub(crate) fn is_replicated(name: &str) -> bool {
    name.strip_prefix("Replicated").is_some_and(|p| !p.is_empty())
}

/// How many leading arguments of a `Replicated*` engine are its ZooKeeper path and replica name:
/// two when the first is a string literal, none when the engine takes the server's defaults
/// (`ReplicatedReplacingMergeTree(ver)` keeps `ver` as its own argument).
pub(crate) fn path_argument_count(args: &[Part]) -> usize {
    match args.first() {
        Some(first) if first.key.starts_with('\'') => 2.min(args.len()),
        _ => 0,
    }
}

/// An engine's comparison key: `Name(arg, arg)`, with `Name()` the same as `Name`, and
/// `Replicated` engines reduced to their plain engine when `plain` (the path and replica name
/// are then compared on their own).
pub(crate) fn engine_key(clause: &Part, plain: bool) -> String {
    let Some((name, args)) = engine_parts(&clause.text) else {
        return clause.key.clone();
    };
    let (name, args) = match name.strip_prefix("Replicated") {
        Some(base) if plain && !base.is_empty() => {
            let skip = path_argument_count(&args);
            (base.to_string(), args[skip..].to_vec())
        }
        _ => (name, args),
    };
    if args.is_empty() {
        name
    } else {
        format!(
            "{name}({})",
            args.iter().map(|a| a.key.as_str()).collect::<Vec<_>>().join(", ")
        )
    }
}

/// What of a definition takes part in a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scope<'a> {
    /// The column list (and its order).
    pub columns: bool,
    /// Which clauses: all but these…
    pub except: &'a [&'a str],
    /// …or, when `Some`, only these.
    pub only: Option<&'a [&'a str]>,
    /// Compare `ENGINE` with a `Replicated` engine reduced to its plain engine.
    pub plain_engine: bool,
}

impl Scope<'_> {
    /// Everything.
    pub(crate) const ALL: Scope<'static> = Scope {
        columns: true,
        except: &[],
        only: None,
        plain_engine: false,
    };

    fn has(&self, clause: &str) -> bool {
        !self.except.contains(&clause) && self.only.is_none_or(|only| only.contains(&clause))
    }
}

/// The parts that differ between the declared and the live definition, columns first.
pub fn differences(declared: &Definition, live: &Definition) -> Vec<Difference> {
    differences_in(declared, live, Scope::ALL)
}

pub(crate) fn differences_in(declared: &Definition, live: &Definition, scope: Scope<'_>) -> Vec<Difference> {
    let mut out = Vec::new();
    if scope.columns {
        column_differences(declared, live, &mut out);
    }
    let mut names: Vec<&str> = Vec::new();
    for clause in declared.clauses.iter().chain(&live.clauses) {
        if !names.contains(&clause.name.as_str()) && scope.has(&clause.name) {
            names.push(&clause.name);
        }
    }
    for name in names {
        let (d, l) = (declared.clause(name), live.clause(name));
        let same = match (d, l) {
            (Some(d), Some(l)) if name == "ENGINE" => engine_keys_match(
                &engine_key(d, scope.plain_engine),
                &engine_key(l, scope.plain_engine),
            ),
            (Some(d), Some(l)) if name == "LIFETIME" => lifetime_key(&d.key) == lifetime_key(&l.key),
            (d, Some(l)) if name == "SETTINGS" => settings_match(d.map_or("", |d| &d.key), &l.key),
            (Some(d), Some(l)) => keys_match(&d.key, &l.key),
            (None, None) => true,
            _ => false,
        };
        if !same {
            out.push(Difference {
                clause: name.to_string(),
                declared: d.map(|p| p.text.clone()).unwrap_or_default(),
                live: l.map(|p| p.text.clone()).unwrap_or_default(),
            });
        }
    }
    out
}

/// Whether a declared key is the live one, where the live key may hold `'[HIDDEN]'` in place of
/// a string literal: since 22.12 the server prints credentials of engines, table functions and
/// dictionary sources that way, so any declared literal there matches (the server does not tell
/// what it holds).
fn keys_match(declared: &str, live: &str) -> bool {
    if declared == live {
        return true;
    }
    if !live.contains("'[HIDDEN]'") {
        return false;
    }
    let d: Vec<Token> = significant(declared).collect();
    let l: Vec<Token> = significant(live).collect();
    d.len() == l.len()
        && d.iter().zip(&l).all(|(d, l)| {
            d.text(declared) == l.text(live)
                || (l.kind == TokenKind::StringLiteral
                    && l.text(live) == "'[HIDDEN]'"
                    && d.kind == TokenKind::StringLiteral)
        })
}

/// Whether a declared engine key is the live one: as `keys_match`, and an engine argument
/// written as a bare name matches the same name as a string literal. Engine arguments that name
/// something (a format, a cluster, a database) may be written either way, and the 26.x printer
/// quotes them: `URL('...', CSV)` is stored and printed as `URL('...', 'CSV')`. Only in the
/// engine: elsewhere (`ORDER BY x` against `ORDER BY 'x'`) a name and a literal differ.
fn engine_keys_match(declared: &str, live: &str) -> bool {
    if keys_match(declared, live) {
        return true;
    }
    let d: Vec<Token> = significant(declared).collect();
    let l: Vec<Token> = significant(live).collect();
    let name_as_literal = |word: &str, literal: &str| {
        literal.len() >= 2
            && literal.starts_with('\'')
            && literal.ends_with('\'')
            && &literal[1..literal.len() - 1] == word
    };
    d.len() == l.len()
        && d.iter().zip(&l).all(|(d, l)| {
            let (dt, lt) = (d.text(declared), l.text(live));
            dt == lt
                || (l.kind == TokenKind::StringLiteral
                    && lt == "'[HIDDEN]'"
                    && d.kind == TokenKind::StringLiteral)
                || (d.kind == TokenKind::Word
                    && l.kind == TokenKind::StringLiteral
                    && name_as_literal(dt, lt))
                || (d.kind == TokenKind::StringLiteral
                    && l.kind == TokenKind::Word
                    && name_as_literal(lt, dt))
        })
}

/// A dictionary's `LIFETIME` key with `n` spelled as the server prints it, `MIN 0 MAX n`, and
/// `MIN`/`MAX` in upper case.
fn lifetime_key(key: &str) -> String {
    let words: Vec<String> = key
        .split(' ')
        .map(|w| match w.to_ascii_uppercase().as_str() {
            "MIN" | "MAX" => w.to_ascii_uppercase(),
            _ => w.to_string(),
        })
        .collect();
    // The clause's own parentheses are gone already (see `without_redundant_parentheses`).
    match words.as_slice() {
        [n] => format!("MIN 0 MAX {n}"),
        _ => words.join(" "),
    }
}

/// Settings the server writes into a MergeTree table's (or a materialized view's inner table's)
/// metadata when the declaration leaves them out: ClickHouse 18.16 and 26.x both add
/// `index_granularity = 8192`.
const SERVER_ADDED_SETTINGS: &[&str] = &["index_granularity = 8192"];

/// Whether the declared `SETTINGS` (empty when none) are the live ones, as a set of
/// `name = value`, once the live settings the server adds by itself are left out where the
/// declaration does not name them.
fn settings_match(declared: &str, live: &str) -> bool {
    fn entries(key: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut depth = 0usize;
        let mut current = Vec::new();
        for word in key.split(' ').filter(|w| !w.is_empty()) {
            match word {
                "(" | "[" => depth += 1,
                ")" | "]" => depth = depth.saturating_sub(1),
                "," if depth == 0 => {
                    out.push(current.join(" "));
                    current.clear();
                    continue;
                }
                _ => {}
            }
            current.push(word);
        }
        if !current.is_empty() {
            out.push(current.join(" "));
        }
        out
    }
    let name = |entry: &str| entry.split(' ').next().unwrap_or_default().to_string();
    let mut d = entries(declared);
    let declared_names: Vec<String> = d.iter().map(|e| name(e)).collect();
    let mut l: Vec<String> = entries(live)
        .into_iter()
        .filter(|e| !SERVER_ADDED_SETTINGS.contains(&e.as_str()) || declared_names.contains(&name(e)))
        .collect();
    d.sort();
    l.sort();
    d.len() == l.len() && d.iter().zip(&l).all(|(d, l)| keys_match(d, l))
}

fn column_differences(declared: &Definition, live: &Definition, out: &mut Vec<Difference>) {
    fn find<'d>(d: &'d Definition, name: &str) -> Option<&'d Part> {
        d.columns.iter().find(|c| c.name == name).map(|c| &c.part)
    }
    let before = out.len();
    for column in &declared.columns {
        match find(live, &column.name) {
            Some(l) if l.key == column.part.key => {}
            l => out.push(Difference {
                clause: format!("column {}", column.name),
                declared: column.part.text.clone(),
                live: l.map(|p| p.text.clone()).unwrap_or_default(),
            }),
        }
    }
    for column in &live.columns {
        if find(declared, &column.name).is_none() {
            out.push(Difference {
                clause: format!("column {}", column.name),
                declared: String::new(),
                live: column.part.text.clone(),
            });
        }
    }
    let names = |d: &Definition| d.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    if out.len() == before && names(declared) != names(live) {
        out.push(Difference {
            clause: "column order".into(),
            declared: names(declared).join(", "),
            live: names(live).join(", "),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_a_table_as_18_16_prints_it() {
        let d = parse(
            "CREATE TABLE shop.orders ( id UInt64,  at DateTime DEFAULT now() COMMENT \'x\') ENGINE = \
             ReplicatedMergeTree('/clickhouse/tables/{shard}/shop/orders', '{replica}') PARTITION BY toYYYYMM(at) \
             ORDER BY (id, at) SETTINGS index_granularity = 8192",
        );
        let columns: Vec<(&str, &str)> = d
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.part.text.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                ("id", "id UInt64"),
                ("at", "at DateTime DEFAULT now() COMMENT 'x'")
            ]
        );
        let names: Vec<&str> = d.clauses.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ENGINE", "PARTITION BY", "ORDER BY", "SETTINGS"]);
        assert_eq!(d.clause("ORDER BY").unwrap().text, "(id, at)");
    }

    #[test]
    fn spelling_is_not_a_difference() {
        let a = parse(
            "CREATE TABLE IF NOT EXISTS a.t (id UInt64, v Float64 DEFAULT 1.0) ENGINE = MergeTree() ORDER BY id",
        );
        let b = parse(
            "create   table other.t2 UUID 'abc' on cluster main -- the same table\n ( `id`   UInt64, \"v\" Float64 \
             default 1. ) engine=MergeTree order /* x */ by id",
        );
        assert_eq!(differences(&a, &b), []);
    }

    #[test]
    fn one_level_of_redundant_parentheses_is_not_a_difference() {
        let key = |sql: &str, clause: &str| parse(sql).clause(clause).unwrap().key.clone();
        let t = "CREATE TABLE t (id UInt64, at DateTime) ENGINE = MergeTree";
        for (a, b) in [
            ("ORDER BY (id)", "ORDER BY id"),
            ("ORDER BY ((id))", "ORDER BY id"),
            ("PARTITION BY (toYYYYMM(at))", "PARTITION BY toYYYYMM(at)"),
            ("ORDER BY ((id), at)", "ORDER BY (id, at)"),
            ("ORDER BY (id) PRIMARY KEY (id)", "ORDER BY id PRIMARY KEY id"),
        ] {
            let clause = if a.starts_with("PARTITION") {
                "PARTITION BY"
            } else {
                "ORDER BY"
            };
            assert_eq!(
                key(&format!("{t} {a}"), clause),
                key(&format!("{t} {b}"), clause),
                "{a} / {b}"
            );
        }
        let v = |q: &str| key(&format!("CREATE VIEW v AS {q}"), "AS");
        assert_eq!(
            v("SELECT id FROM t WHERE (x > 1) ORDER BY id"),
            v("SELECT id FROM t WHERE x > 1 ORDER BY id")
        );
        assert_eq!(
            v("SELECT id FROM t WHERE (x > 1)"),
            v("SELECT id FROM t WHERE x > 1")
        );
    }

    #[test]
    fn parentheses_that_change_the_structure_still_do() {
        let key = |sql: &str| parse(sql).clause("ORDER BY").unwrap().key.clone();
        let t = "CREATE TABLE t (a UInt64, b UInt64, c UInt64) ENGINE = MergeTree ORDER BY";
        // A tuple of two is not one expression.
        assert_ne!(key(&format!("{t} (a, b)")), key(&format!("{t} a")));
        assert_ne!(key(&format!("{t} (a, b)")), key(&format!("{t} (a)")));
        // Grouping an operand changes the expression.
        assert_ne!(key(&format!("{t} (a + b) * c")), key(&format!("{t} a + b * c")));
        // A real change inside them is still a change.
        assert_ne!(key(&format!("{t} (a)")), key(&format!("{t} b")));
        let v = |q: &str| {
            parse(&format!("CREATE VIEW v AS {q}"))
                .clause("AS")
                .unwrap()
                .key
                .clone()
        };
        assert_ne!(
            v("SELECT a FROM t WHERE (a > 1 OR b > 1) AND c > 1"),
            v("SELECT a FROM t WHERE a > 1 OR b > 1 AND c > 1")
        );
        assert_ne!(
            v("SELECT a FROM t WHERE (a > 1)"),
            v("SELECT a FROM t WHERE a > 2")
        );
    }

    #[test]
    fn a_refreshable_views_schedule_target_and_security_are_clauses() {
        let d = parse(
            "CREATE MATERIALIZED VIEW app.mv REFRESH EVERY 1 HOUR TO app.t (`id` UInt64) DEFINER = default \
             SQL SECURITY DEFINER AS SELECT id FROM app.events",
        );
        let clauses: Vec<(&str, &str)> = d
            .clauses
            .iter()
            .map(|c| (c.name.as_str(), c.part.text.as_str()))
            .collect();
        assert_eq!(
            clauses,
            [
                ("REFRESH", "EVERY 1 HOUR"),
                ("TO", "app.t"),
                ("DEFINER", "= default"),
                ("SQL SECURITY", "DEFINER"),
                ("AS", "SELECT id FROM app.events"),
            ]
        );
        assert_eq!(d.columns.len(), 1);
        // A TTL's `TO DISK 'cold'` is no view target: the literal stays in the comparison.
        let t = parse("CREATE TABLE t (at DateTime) ENGINE = MergeTree ORDER BY at TTL at TO DISK 'cold'");
        assert_eq!(t.clause("TO").map(|p| p.text.as_str()), Some("DISK 'cold'"));
    }

    #[test]
    fn a_hidden_literal_lifetime_and_added_settings_match_what_was_declared() {
        let d = parse(
            "CREATE TABLE t (id UInt64) ENGINE = MySQL('h:3306', 'db', 't', 'u', 'secret') SETTINGS a = 1",
        );
        let l = parse(
            "CREATE TABLE t (id UInt64) ENGINE = MySQL('h:3306', 'db', 't', 'u', '[HIDDEN]') SETTINGS a = 1, \
             index_granularity = 8192",
        );
        assert_eq!(differences(&d, &l), []);
        let other_host = parse(
            "CREATE TABLE t (id UInt64) ENGINE = MySQL('h2:3306', 'db', 't', 'u', '[HIDDEN]') SETTINGS a = 1",
        );
        assert_eq!(differences(&d, &other_host).len(), 1);
        // A declared literal only: a hidden value never matches a number or a name.
        let n =
            parse("CREATE TABLE t (id UInt64) ENGINE = MySQL('h:3306', 'db', 't', 'u', 5) SETTINGS a = 1");
        assert_eq!(differences(&n, &l).len(), 1);
        // A name as an engine argument: 26.9 stores `URL('...', CSV)` as (captured with chdb 26.9,
        // `create_table_query`) `URL('http://127.0.0.1:9/x.csv', 'CSV')`.
        let url = |format: &str| {
            parse(&format!(
                "CREATE TABLE d.u (id UInt64) ENGINE = URL('http://127.0.0.1:9/x.csv', {format})"
            ))
        };
        let url_live =
            parse("CREATE TABLE d.u (`id` UInt64) ENGINE = URL('http://127.0.0.1:9/x.csv', 'CSV')");
        assert_eq!(differences(&url("CSV"), &url_live), []);
        assert_eq!(differences(&url("'CSV'"), &url_live), []);
        assert_eq!(differences(&url("TSV"), &url_live).len(), 1);
        assert_eq!(differences(&url("'TSV'"), &url_live).len(), 1);
        // Outside the engine a name and a literal stay different.
        let ordered = |key: &str| {
            parse(&format!(
                "CREATE TABLE t (x String) ENGINE = MergeTree ORDER BY {key}"
            ))
        };
        assert_eq!(differences(&ordered("x"), &ordered("'x'")).len(), 1);
        // A declared index_granularity is compared like any setting.
        let g = parse("CREATE TABLE t (id UInt64) ENGINE = Memory SETTINGS index_granularity = 1024");
        let g_live = parse("CREATE TABLE t (id UInt64) ENGINE = Memory SETTINGS index_granularity = 8192");
        assert_eq!(differences(&g, &g_live).len(), 1);
        let dict = |lifetime: &str| {
            parse(&format!(
                "CREATE DICTIONARY d (id UInt64) PRIMARY KEY id LIFETIME({lifetime})"
            ))
        };
        assert_eq!(differences(&dict("300"), &dict("MIN 0 MAX 300")), []);
        assert_eq!(differences(&dict("min 0 max 300"), &dict("MIN 0 MAX 300")), []);
        assert_eq!(differences(&dict("600"), &dict("MIN 0 MAX 300")).len(), 1);
        assert_eq!(
            differences(&dict("MIN 1 MAX 300"), &dict("MIN 0 MAX 300")).len(),
            1
        );
    }

    #[test]
    fn an_integer_is_not_a_float() {
        let a = parse("CREATE TABLE t (v Float64 DEFAULT 1) ENGINE = Memory");
        let b = parse("CREATE TABLE t (v Float64 DEFAULT 1.) ENGINE = Memory");
        assert_eq!(differences(&a, &b).len(), 1);
    }

    #[test]
    fn a_changed_order_by_and_a_missing_column_are() {
        let declared = parse("CREATE TABLE t (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY (id, at)");
        let live = parse("CREATE TABLE t (id UInt64) ENGINE = MergeTree ORDER BY at");
        assert_eq!(
            differences(&declared, &live),
            [
                Difference {
                    clause: "column at".into(),
                    declared: "at DateTime".into(),
                    live: "".into(),
                },
                Difference {
                    clause: "ORDER BY".into(),
                    declared: "(id, at)".into(),
                    live: "at".into(),
                },
            ]
        );
    }

    #[test]
    fn an_extra_column_and_the_column_order_are() {
        let declared = parse("CREATE TABLE t (a UInt8, b UInt8) ENGINE = Memory");
        let extra = parse("CREATE TABLE t (a UInt8, b UInt8, c UInt8) ENGINE = Memory");
        assert_eq!(differences(&declared, &extra)[0].clause, "column c");
        let swapped = parse("CREATE TABLE t (b UInt8, a UInt8) ENGINE = Memory");
        assert_eq!(
            differences(&declared, &swapped),
            [Difference {
                clause: "column order".into(),
                declared: "a, b".into(),
                live: "b, a".into(),
            }]
        );
    }

    #[test]
    fn a_view_query_runs_to_the_end_and_the_target_comes_first() {
        let d = parse("CREATE MATERIALIZED VIEW s.mv TO s.t (id UInt64) AS SELECT id FROM s.src ORDER BY id");
        let names: Vec<(&str, &str)> = d
            .clauses
            .iter()
            .map(|c| (c.name.as_str(), c.part.text.as_str()))
            .collect();
        assert_eq!(names, [("TO", "s.t"), ("AS", "SELECT id FROM s.src ORDER BY id")]);
        assert_eq!(d.columns.len(), 1);
    }

    #[test]
    fn a_table_copying_another_keeps_its_engine_clause_apart() {
        let d = parse("CREATE TABLE t AS app.events ENGINE = Memory");
        let names: Vec<(&str, &str)> = d
            .clauses
            .iter()
            .map(|c| (c.name.as_str(), c.part.text.as_str()))
            .collect();
        assert_eq!(names, [("AS", "app.events"), ("ENGINE", "Memory")]);
    }

    #[test]
    fn populate_is_not_part_of_a_definition() {
        let a = parse("CREATE MATERIALIZED VIEW mv ENGINE = Memory POPULATE AS SELECT 1");
        let b = parse("CREATE MATERIALIZED VIEW mv ENGINE = Memory AS SELECT 1");
        assert_eq!(differences(&a, &b), []);
    }

    #[test]
    fn replicated_engines_compare_plain_when_asked() {
        let live = parse(
            "CREATE TABLE t (a UInt8) ENGINE = ReplicatedReplacingMergeTree('/p', '{replica}', a) ORDER BY a",
        );
        let scratch = parse("CREATE TABLE t (a UInt8) ENGINE = ReplacingMergeTree(a) ORDER BY a");
        let plain = Scope {
            plain_engine: true,
            ..Scope::ALL
        };
        assert_eq!(differences_in(&scratch, &live, plain), []);
        assert_eq!(differences(&scratch, &live)[0].clause, "ENGINE");
    }

    #[test]
    fn a_database_named_like_a_keyword_is_a_name() {
        let d = parse("CREATE MATERIALIZED VIEW IF NOT EXISTS live.mv TO live.t (id UInt64) AS SELECT 1");
        assert_eq!(d.clause("TO").map(|p| p.text.as_str()), Some("live.t"));
        let t = parse("CREATE TABLE table.view (a UInt8) ENGINE = Memory");
        assert_eq!(t.columns[0].name, "a");
    }

    #[test]
    fn index_entries_are_named_by_their_kind() {
        let d = parse(
            "CREATE TABLE t (a UInt8, INDEX ia a TYPE minmax GRANULARITY 1) ENGINE = MergeTree ORDER BY a",
        );
        assert_eq!(d.columns[1].name, "INDEX ia");
    }
}
