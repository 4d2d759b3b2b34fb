//! Declaration-time check of the onCluster promise.
//!
//! Under `execution.mode 'onCluster'` a statement runs once, on one server, and
//! only an `ON CLUSTER <name>` clause hands it to the distributed DDL queue.
//! So each statement must carry that clause, naming the configured cluster.
//! The check reads tokens, never raw text: a clause inside a string literal, a
//! quoted identifier or a comment does not count. Comments *between* the
//! keywords do not break a clause (`ON /* x */ CLUSTER c` counts), because the
//! server's parser skips them there too.
//!
//! Nothing is inferred from the statement's shape and nothing is rewritten:
//! the check refuses, it never repairs.

use crate::sql::lexer::{Token, TokenKind, significant};

/// Longest cluster name quoted back in a message; a longer one is cut so a
/// pasted blob cannot flood the error.
const MAX_NAME_IN_MESSAGE: usize = 64;

/// `Err(reason)` when `sql` (found at `field index`, e.g. `statements 1`)
/// cannot keep the onCluster promise for `cluster`. The reason is a complete
/// sentence fragment naming the field and index and what to do; the caller
/// lists it without adding to it.
pub fn check_statement(field: &str, index: usize, sql: &str, cluster: &str) -> Result<(), String> {
    let tokens: Vec<Token> = significant(sql).collect();
    let place = format!("{field} {index}");
    let wanted = shown(cluster.as_bytes());

    let Some(first) = tokens.first() else {
        return Err(format!(
            "{place} is empty, so it cannot carry the ON CLUSTER {wanted} clause execution.mode \
             'onCluster' requires; remove it or write the statement out"
        ));
    };
    for verb in ["USE", "SET"] {
        if first.is_keyword(sql, verb) {
            return Err(format!(
                "{place} is a {verb} statement, which only affects the session of the one server it runs on \
                 and has no ON CLUSTER form, so it cannot run cluster-wide; move it to a resource with \
                 execution.mode 'fanout', which runs every statement on every server"
            ));
        }
    }

    let mut names_this_cluster = false;
    let mut other: Option<Vec<u8>> = None;
    for window in tokens.windows(3) {
        let [on, kw, name] = window else { continue };
        if !(on.is_keyword(sql, "ON") && kw.is_keyword(sql, "CLUSTER")) {
            continue;
        }
        let Some(name) = cluster_name(name, sql) else {
            continue;
        };
        if name == cluster.as_bytes() {
            names_this_cluster = true;
        } else if other.is_none() {
            other = Some(name);
        }
    }

    match (other, names_this_cluster) {
        (Some(other), _) => Err(format!(
            "{place} runs ON CLUSTER {}, but execution.mode 'onCluster' is configured for cluster {wanted}; \
             a statement may only name the configured cluster, so change the clause to ON CLUSTER {wanted} \
             or configure that cluster instead",
            shown(&other)
        )),
        (None, true) => Ok(()),
        (None, false) => Err(format!(
            "{place} has no ON CLUSTER {wanted} clause, so executing it once would change only the one server \
             it lands on; add the clause to the statement (it is never added for you), or use \
             execution.mode 'fanout'"
        )),
    }
}

/// The name a clause gives, decoded; `None` when the token cannot be a
/// cluster name (punctuation, an unterminated quote, a number, a heredoc).
fn cluster_name(token: &Token, sql: &str) -> Option<Vec<u8>> {
    if token.unterminated {
        return None;
    }
    match token.kind {
        TokenKind::Word | TokenKind::StringLiteral | TokenKind::QuotedIdentifier => Some(token.value(sql)),
        _ => None,
    }
}

/// A name as a message shows it: single-quoted, control characters escaped,
/// cut at [`MAX_NAME_IN_MESSAGE`] characters.
fn shown(name: &[u8]) -> String {
    let text = String::from_utf8_lossy(name);
    let mut out = String::from("'");
    for (count, c) in text.chars().enumerate() {
        if count == MAX_NAME_IN_MESSAGE {
            out.push('…');
            break;
        }
        if c.is_control() || c == '\'' || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_quotes_escapes_and_cuts() {
        assert_eq!(shown(b"c"), "'c'");
        assert_eq!(shown(b"a'b\n"), r"'a\'b\n'");
        let long = "x".repeat(100);
        assert_eq!(shown(long.as_bytes()).chars().count(), MAX_NAME_IN_MESSAGE + 3);
    }
}
