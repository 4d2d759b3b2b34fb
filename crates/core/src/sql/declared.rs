//! What a statement declares: the schema object (database, table, view, materialized view,
//! dictionary) a `CREATE`, `CREATE OR REPLACE`, `REPLACE` or `ATTACH` statement names, and how it
//! declares it.
//!
//! Verification of the live schema starts here: after an apply, every object the statements declare
//! is looked up on the pod and compared with its declaration. How the statement declares the object
//! decides what the pod may hold afterwards: `CREATE ... IF NOT EXISTS` leaves an existing object as
//! it was, which is exactly the case verification exists for. Statements that declare no object
//! (ALTER, INSERT, DROP, GRANT, SYSTEM, CREATE USER, a temporary table, ...) are classified too, so a
//! caller can say why it skips them.
//!
//! Like the onCluster check it reads tokens, never raw text, so a keyword inside a literal, a quoted
//! identifier or a comment is never taken for one; comments between keywords are skipped as the
//! server skips them. Names are decoded as the server reads them (quotes and escapes removed), and a
//! name without a database gets `client.database`, the database the statement runs in.

use crate::sql::lexer::{Token, TokenKind, significant};

/// The kind of schema object a statement declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    /// `DATABASE`.
    Database,
    /// `TABLE`.
    Table,
    /// `VIEW`.
    View,
    /// `MATERIALIZED VIEW`.
    MaterializedView,
    /// `LIVE VIEW` (experimental in ClickHouse).
    LiveView,
    /// `WINDOW VIEW` (experimental in ClickHouse).
    WindowView,
    /// `DICTIONARY`.
    Dictionary,
}

impl ObjectKind {
    /// The kind as the statement spells it, upper case.
    pub fn as_sql(self) -> &'static str {
        match self {
            ObjectKind::Database => "DATABASE",
            ObjectKind::Table => "TABLE",
            ObjectKind::View => "VIEW",
            ObjectKind::MaterializedView => "MATERIALIZED VIEW",
            ObjectKind::LiveView => "LIVE VIEW",
            ObjectKind::WindowView => "WINDOW VIEW",
            ObjectKind::Dictionary => "DICTIONARY",
        }
    }
}

/// How a statement declares its object; it decides what the pod may hold after the statement ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeclarationForm {
    /// `CREATE`: fails when the object exists, so after it ran the object is the declared one.
    Create,
    /// `CREATE ... IF NOT EXISTS`: an existing object is left as it was, whatever its definition.
    CreateIfNotExists,
    /// `CREATE OR REPLACE` or `REPLACE`: afterwards the object is the declared one.
    CreateOrReplace,
    /// `ATTACH`: the object is (re)attached from its stored metadata or the statement's definition.
    Attach,
    /// `ATTACH ... IF NOT EXISTS`.
    AttachIfNotExists,
}

/// The object one statement declares.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Declaration {
    /// What it is.
    pub kind: ObjectKind,
    /// How the statement declares it.
    pub form: DeclarationForm,
    /// Its database: the one the statement names, else `client.database`. For a database, its name.
    pub database: String,
    /// Its name in the database; `None` for a database.
    pub name: Option<String>,
}

impl Declaration {
    /// `database.name`, or the database's name, as messages show it.
    pub fn qualified_name(&self) -> String {
        match &self.name {
            Some(name) => format!("{}.{name}", self.database),
            None => self.database.clone(),
        }
    }
}

/// What a statement is, as far as the live schema is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatementClass {
    /// It declares a schema object that verification can look up.
    Declares(Declaration),
    /// It declares none: `verb` is its leading keywords, upper case (`ALTER`, `INSERT`,
    /// `CREATE USER`, `CREATE TEMPORARY TABLE`, ...), or empty for a statement without a word.
    Other {
        /// The statement's leading keywords, upper case.
        verb: String,
    },
}

/// The kinds as their leading keywords spell them, two-word kinds first.
const KINDS: &[(&[&str], ObjectKind)] = &[
    (&["MATERIALIZED", "VIEW"], ObjectKind::MaterializedView),
    (&["LIVE", "VIEW"], ObjectKind::LiveView),
    (&["WINDOW", "VIEW"], ObjectKind::WindowView),
    (&["DATABASE"], ObjectKind::Database),
    (&["TABLE"], ObjectKind::Table),
    (&["VIEW"], ObjectKind::View),
    (&["DICTIONARY"], ObjectKind::Dictionary),
];

/// Classifies `sql`; a name without a database is in `default_database`.
pub fn classify(sql: &str, default_database: &str) -> StatementClass {
    let tokens: Vec<Token> = significant(sql).collect();
    let mut at = Cursor {
        sql,
        tokens: &tokens,
        pos: 0,
    };
    let mut verb: Vec<String> = Vec::new();
    let form = if at.keyword("CREATE") {
        verb.push("CREATE".into());
        if at.keywords(&["OR", "REPLACE"]) {
            verb.extend(["OR".into(), "REPLACE".into()]);
            DeclarationForm::CreateOrReplace
        } else {
            DeclarationForm::Create
        }
    } else if at.keyword("REPLACE") {
        verb.push("REPLACE".into());
        DeclarationForm::CreateOrReplace
    } else if at.keyword("ATTACH") {
        verb.push("ATTACH".into());
        DeclarationForm::Attach
    } else {
        return StatementClass::Other {
            verb: at.word_upper().unwrap_or_default(),
        };
    };
    // A temporary table lives in one session: nothing on the pod to verify afterwards.
    if at.keyword("TEMPORARY") {
        return other(verb, "TEMPORARY", at.word_upper());
    }
    let Some(kind) = KINDS
        .iter()
        .find_map(|(words, kind)| at.keywords(words).then_some(*kind))
    else {
        return other(verb, "", at.word_upper());
    };
    verb.push(kind.as_sql().into());
    let form = if at.keywords(&["IF", "NOT", "EXISTS"]) {
        match form {
            DeclarationForm::Create => DeclarationForm::CreateIfNotExists,
            DeclarationForm::Attach => DeclarationForm::AttachIfNotExists,
            other => other,
        }
    } else {
        form
    };
    let Some(first) = at.name() else {
        // No readable name: the server refuses the statement; there is nothing to look up.
        return StatementClass::Other { verb: verb.join(" ") };
    };
    let (database, name) = if kind == ObjectKind::Database {
        (first, None)
    } else if at.punct(".") {
        match at.name() {
            Some(second) => (first, Some(second)),
            None => return StatementClass::Other { verb: verb.join(" ") },
        }
    } else {
        (default_database.to_string(), Some(first))
    };
    StatementClass::Declares(Declaration {
        kind,
        form,
        database,
        name,
    })
}

fn other(mut verb: Vec<String>, word: &str, next: Option<String>) -> StatementClass {
    if !word.is_empty() {
        verb.push(word.into());
    }
    verb.extend(next);
    StatementClass::Other { verb: verb.join(" ") }
}

/// A position in a statement's significant tokens.
struct Cursor<'a> {
    sql: &'a str,
    tokens: &'a [Token],
    pos: usize,
}

impl Cursor<'_> {
    /// Takes `keyword` (any case) if it comes next.
    fn keyword(&mut self, keyword: &str) -> bool {
        self.keywords(&[keyword])
    }

    /// Takes all of `keywords` if they come next, in order; otherwise takes nothing.
    fn keywords(&mut self, keywords: &[&str]) -> bool {
        let hit = keywords.iter().enumerate().all(|(i, k)| {
            self.tokens
                .get(self.pos + i)
                .is_some_and(|t| t.is_keyword(self.sql, k))
        });
        if hit {
            self.pos += keywords.len();
        }
        hit
    }

    fn punct(&mut self, punct: &str) -> bool {
        let hit = self
            .tokens
            .get(self.pos)
            .is_some_and(|t| t.is_punct(self.sql, punct));
        if hit {
            self.pos += 1;
        }
        hit
    }

    /// The next word, upper case, without taking it (for an `Other` statement's verb).
    fn word_upper(&self) -> Option<String> {
        self.tokens
            .get(self.pos)
            .filter(|t| t.kind == TokenKind::Word)
            .map(|t| t.text(self.sql).to_ascii_uppercase())
    }

    /// Takes an identifier, bare or quoted, and returns it as the server reads it.
    fn name(&mut self) -> Option<String> {
        let token = self.tokens.get(self.pos)?;
        if token.unterminated || !matches!(token.kind, TokenKind::Word | TokenKind::QuotedIdentifier) {
            return None;
        }
        self.pos += 1;
        Some(String::from_utf8_lossy(&token.value(self.sql)).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declares(sql: &str) -> Declaration {
        match classify(sql, "shop") {
            StatementClass::Declares(d) => d,
            other => panic!("{sql}: {other:?}"),
        }
    }

    fn verb(sql: &str) -> String {
        match classify(sql, "shop") {
            StatementClass::Other { verb } => verb,
            other => panic!("{sql}: {other:?}"),
        }
    }

    fn table(form: DeclarationForm, database: &str, name: &str) -> Declaration {
        Declaration {
            kind: ObjectKind::Table,
            form,
            database: database.into(),
            name: Some(name.into()),
        }
    }

    #[test]
    fn tables_in_every_form() {
        use DeclarationForm::*;
        assert_eq!(
            declares("CREATE TABLE orders (id UInt64) ENGINE = MergeTree ORDER BY id"),
            table(Create, "shop", "orders")
        );
        assert_eq!(
            declares("create table if not exists sales.orders (id UInt64) ENGINE = Log"),
            table(CreateIfNotExists, "sales", "orders")
        );
        assert_eq!(
            declares("CREATE OR REPLACE TABLE sales.orders (id UInt64) ENGINE = Log"),
            table(CreateOrReplace, "sales", "orders")
        );
        assert_eq!(
            declares("REPLACE TABLE orders (id UInt64) ENGINE = Log"),
            table(CreateOrReplace, "shop", "orders")
        );
        assert_eq!(declares("ATTACH TABLE orders"), table(Attach, "shop", "orders"));
        assert_eq!(
            declares("ATTACH TABLE IF NOT EXISTS sales.orders"),
            table(AttachIfNotExists, "sales", "orders")
        );
        assert_eq!(
            declares("CREATE TABLE sales.orders ON CLUSTER main AS sales.orders_local"),
            table(Create, "sales", "orders")
        );
    }

    #[test]
    fn names_are_read_as_the_server_reads_them() {
        use DeclarationForm::*;
        assert_eq!(
            declares("CREATE TABLE `my db`.\"my table\" (x UInt8) ENGINE = Log"),
            table(Create, "my db", "my table")
        );
        assert_eq!(
            declares("CREATE TABLE `we\\`ird` (x UInt8) ENGINE = Log"),
            table(Create, "shop", "we`ird")
        );
        assert_eq!(
            declares(
                "CREATE /* c */ TABLE -- c\n IF /* c */ NOT EXISTS sales /* c */ . orders (x UInt8) ENGINE = Log"
            ),
            table(CreateIfNotExists, "sales", "orders")
        );
        // A keyword in a literal or a quoted identifier is not one.
        assert_eq!(verb("SELECT 'CREATE TABLE t'"), "SELECT");
        assert_eq!(verb("`CREATE` TABLE t"), "");
    }

    #[test]
    fn every_kind() {
        let cases = [
            (
                "CREATE DATABASE IF NOT EXISTS sales",
                ObjectKind::Database,
                "sales",
                None,
            ),
            (
                "CREATE DATABASE sales ENGINE = Atomic",
                ObjectKind::Database,
                "sales",
                None,
            ),
            ("CREATE VIEW v AS SELECT 1", ObjectKind::View, "shop", Some("v")),
            (
                "CREATE MATERIALIZED VIEW IF NOT EXISTS sales.mv TO sales.t AS SELECT 1",
                ObjectKind::MaterializedView,
                "sales",
                Some("mv"),
            ),
            (
                "CREATE LIVE VIEW lv AS SELECT 1",
                ObjectKind::LiveView,
                "shop",
                Some("lv"),
            ),
            (
                "CREATE WINDOW VIEW wv TO t AS SELECT 1",
                ObjectKind::WindowView,
                "shop",
                Some("wv"),
            ),
            (
                "CREATE OR REPLACE DICTIONARY sales.d (id UInt64) PRIMARY KEY id SOURCE(NULL()) LAYOUT(FLAT()) LIFETIME(0)",
                ObjectKind::Dictionary,
                "sales",
                Some("d"),
            ),
            ("ATTACH DATABASE sales", ObjectKind::Database, "sales", None),
            (
                "ATTACH MATERIALIZED VIEW mv",
                ObjectKind::MaterializedView,
                "shop",
                Some("mv"),
            ),
            ("ATTACH DICTIONARY d", ObjectKind::Dictionary, "shop", Some("d")),
        ];
        for (sql, kind, database, name) in cases {
            let d = declares(sql);
            assert_eq!(d.kind, kind, "{sql}");
            assert_eq!(d.database, database, "{sql}");
            assert_eq!(d.name.as_deref(), name, "{sql}");
        }
        assert_eq!(declares("CREATE DATABASE sales").qualified_name(), "sales");
        assert_eq!(declares("CREATE VIEW v AS SELECT 1").qualified_name(), "shop.v");
    }

    #[test]
    fn statements_that_declare_nothing() {
        let cases = [
            ("ALTER TABLE t ADD COLUMN x UInt8", "ALTER"),
            ("INSERT INTO t VALUES (1)", "INSERT"),
            ("DROP TABLE t", "DROP"),
            ("GRANT SELECT ON *.* TO u", "GRANT"),
            ("SYSTEM RELOAD DICTIONARIES", "SYSTEM"),
            ("OPTIMIZE TABLE t FINAL", "OPTIMIZE"),
            ("CREATE USER u IDENTIFIED WITH sha256_hash BY 'x'", "CREATE USER"),
            ("CREATE ROLE r", "CREATE ROLE"),
            ("CREATE FUNCTION f AS x -> x", "CREATE FUNCTION"),
            ("CREATE TEMPORARY TABLE t (x UInt8)", "CREATE TEMPORARY TABLE"),
            ("ATTACH PARTITION 1 FROM t", "ATTACH PARTITION"),
            ("CREATE TABLE", "CREATE TABLE"),
            ("CREATE TABLE shop.", "CREATE TABLE"),
            ("CREATE TABLE 'orders' (x UInt8) ENGINE = Log", "CREATE TABLE"),
            ("", ""),
            ("-- only a comment", ""),
            ("(SELECT 1)", ""),
        ];
        for (sql, expected) in cases {
            assert_eq!(verb(sql), expected, "{sql}");
        }
    }
}
