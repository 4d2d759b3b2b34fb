//! Warnings about credentials written into statements.
//!
//! Alchemy records a resource's props verbatim in its state, and statements
//! are props: a statement holding `IDENTIFIED BY '...'` or an S3 secret key
//! puts that secret into `.alchemy/state` (or whatever state store the stack
//! uses). This crate cannot keep it out without losing the statement, so it
//! says so, once per statement, at declaration: a warning naming the
//! statement and what ClickHouse offers instead. A warning, not an error:
//! the deploy is the user's call, and a literal may be a placeholder.
//!
//! A credential is recognised as the redaction recognises it (the token after
//! `PASSWORD`, `IDENTIFIED ... BY`, `access_key_id`, `secret_access_key`,
//! `token`, ...), plus the positional keys of the `s3` family of functions
//! and engines, which take the key id and the secret as the second and third
//! string arguments.

use crate::config::ResolvedConfig;
use crate::error::ConfigIssue;
use crate::sql::lexer::{Token, TokenKind, significant};
use crate::sql::redact::CREDENTIAL_KEYWORDS;

/// Functions and engines whose string arguments after the URL are credentials.
const POSITIONAL_CREDENTIAL_CALLS: [&str; 6] = ["s3", "s3cluster", "s3queue", "gcs", "cosn", "oss"];

/// One warning per statement (`statements[i]`, `deleteStatements[i]`) that
/// holds a credential literal.
pub fn credential_warnings(config: &ResolvedConfig) -> Vec<ConfigIssue> {
    let mut warnings = Vec::new();
    for (field, statements) in [
        ("statements", &config.statements),
        ("deleteStatements", &config.delete_statements),
    ] {
        for (index, statement) in statements.iter().enumerate() {
            if let Some(what) = credential_in(statement) {
                warnings.push(ConfigIssue {
                    path: format!("{field}[{index}]"),
                    reason: format!(
                        "holds a credential literal ({what}). Statements are props, and Alchemy stores props \
                         verbatim in its state, so this secret is written to the state store. Prefer what \
                         ClickHouse offers instead: IDENTIFIED WITH sha256_hash BY '<hash>' for users, named \
                         collections or credentials in the server configuration for S3 and other sources"
                    ),
                });
            }
        }
    }
    warnings
}

/// What kind of credential `statement` holds, if any.
fn credential_in(statement: &str) -> Option<String> {
    let tokens: Vec<Token> = significant(statement).collect();
    for (i, token) in tokens.iter().enumerate() {
        if matches!(token.kind, TokenKind::StringLiteral | TokenKind::HereDoc) {
            if let Some(keyword) = credential_keyword_before(&tokens, i, statement) {
                return Some(format!("a string after {keyword}"));
            }
        }
        if token.kind == TokenKind::Word
            && POSITIONAL_CREDENTIAL_CALLS
                .iter()
                .any(|name| token.text(statement).eq_ignore_ascii_case(name))
            && tokens.get(i + 1).is_some_and(|t| t.is_punct(statement, "("))
            && string_arguments(&tokens[i + 2..], statement) >= 3
        {
            return Some(format!("an access key passed to {}(...)", token.text(statement)));
        }
    }
    None
}

/// The credential keyword that `tokens[i]` is the value of (past an optional
/// `=` or `:`): one of the redaction's keywords, or `IDENTIFIED [WITH m] BY`.
fn credential_keyword_before(tokens: &[Token], i: usize, statement: &str) -> Option<String> {
    let mut k = i;
    if k >= 2 && (tokens[k - 1].is_punct(statement, "=") || tokens[k - 1].is_punct(statement, ":")) {
        k -= 1;
    }
    let keyword = &tokens[k.checked_sub(1)?];
    if let Some(word) = CREDENTIAL_KEYWORDS
        .iter()
        .find(|word| keyword.is_keyword(statement, word))
    {
        return Some((*word).to_owned());
    }
    let identified = keyword.is_keyword(statement, "BY")
        && tokens[..k - 1]
            .iter()
            .rev()
            .take(3)
            .any(|t| t.is_keyword(statement, "IDENTIFIED"));
    identified.then(|| "IDENTIFIED ... BY".to_owned())
}

/// String literals among the top-level arguments of a call whose `(` was
/// just consumed.
fn string_arguments(tokens: &[Token], statement: &str) -> usize {
    let mut depth = 0usize;
    let mut count = 0usize;
    for token in tokens {
        if token.is_punct(statement, "(") {
            depth += 1;
        } else if token.is_punct(statement, ")") {
            if depth == 0 {
                break;
            }
            depth -= 1;
        } else if depth == 0 && token.kind == TokenKind::StringLiteral {
            count += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_found_where_redaction_looks_for_them() {
        for (statement, what) in [
            (
                "CREATE USER app IDENTIFIED WITH plaintext_password BY 'hunter2'",
                "IDENTIFIED ... BY",
            ),
            ("CREATE USER app IDENTIFIED BY 'hunter2'", "IDENTIFIED ... BY"),
            (
                "CREATE TABLE t (x UInt8) ENGINE = S3('https://b/k', 'AKIA123', 'sec', 'CSV')",
                "S3(...)",
            ),
            (
                "INSERT INTO t SELECT * FROM s3('https://b/k', 'AKIA123', 'sec')",
                "s3(...)",
            ),
            (
                "CREATE DICTIONARY d (k UInt64) PRIMARY KEY k SOURCE(CLICKHOUSE(HOST 'h' PASSWORD 'p')) \
                 LAYOUT(FLAT()) LIFETIME(0)",
                "password",
            ),
            (
                "CREATE NAMED COLLECTION c AS secret_access_key = 'abc'",
                "secret_access_key",
            ),
        ] {
            let found = credential_in(statement);
            assert!(
                found.as_deref().is_some_and(|f| f.contains(what)),
                "{statement}: {found:?}"
            );
        }
    }

    #[test]
    fn ordinary_ddl_and_hashed_or_configured_credentials_pass() {
        for statement in [
            "CREATE TABLE IF NOT EXISTS orders.events (id UUID, token String) ENGINE = MergeTree ORDER BY id",
            "CREATE TABLE t (x UInt8) ENGINE = S3(my_collection, filename = 'x.csv')",
            "SELECT * FROM s3('https://public/bucket/x.csv', 'CSV')",
            "ALTER TABLE t ADD COLUMN password_hash String",
            "CREATE USER app IDENTIFIED WITH ssl_certificate CN 'app'",
        ] {
            assert_eq!(credential_in(statement), None, "{statement}");
        }
    }
}
