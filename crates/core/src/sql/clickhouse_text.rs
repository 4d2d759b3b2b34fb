//! Text in ClickHouse's own formats, written and read one way: string
//! literals in the scripts this crate sends (the live-schema check, the
//! ledger), and the TabSeparated fields they print back.

use crate::sql::lexer::escape::escape_c_style;

/// `value` as a ClickHouse string literal, escaped by the lexer's own rule so the server (and
/// [`crate::sql::lexer::decode`]) reads back exactly `value`.
pub(crate) fn literal(value: &str) -> String {
    quoted(value, b'\'')
}

/// `name` as a back-quoted ClickHouse identifier, escaped the same way.
pub(crate) fn ident(name: &str) -> String {
    quoted(name, b'`')
}

fn quoted(value: &str, quote: u8) -> String {
    let mut out = Vec::with_capacity(value.len() + 2);
    out.push(quote);
    out.extend(escape_c_style(value.as_bytes(), quote));
    out.push(quote);
    // Escaping only replaces ASCII bytes with ASCII text, so UTF-8 stays UTF-8.
    String::from_utf8(out).expect("escaped UTF-8 is UTF-8")
}

/// One TabSeparated field, unescaped.
pub(crate) fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sql::lexer::escape::decode;
    use proptest::prelude::*;

    #[test]
    fn a_literal_reads_back_as_its_value() {
        for value in ["plain", "it's", "a\\b", "tab\there", "new\nline", "nul\0", ""] {
            let quoted = literal(value);
            assert!(quoted.starts_with('\'') && quoted.ends_with('\''), "{quoted}");
            // TabSeparated escapes the same characters the same way.
            assert_eq!(unescape(&quoted[1..quoted.len() - 1]), value);
        }
        assert_eq!(unescape("trailing\\"), "trailing\\");
        assert_eq!(unescape("\\b\\f"), "\u{8}\u{c}");
    }

    #[test]
    fn identifiers_are_back_quoted_with_escapes() {
        assert_eq!(ident("a`b\\c"), "`a\\`b\\\\c`");
        assert_eq!(ident("events"), "`events`");
    }

    proptest! {
        /// What the lexer decodes from a literal or an identifier is the value it was made from.
        #[test]
        fn literals_and_identifiers_decode_to_their_value(value in any::<String>()) {
            for (text, quote) in [(literal(&value), b'\''), (ident(&value), b'`')] {
                let inner = &text.as_bytes()[1..text.len() - 1];
                prop_assert_eq!(decode(inner, quote), value.as_bytes());
            }
        }
    }
}
