//! Text in ClickHouse's own formats, written and read one way: string
//! literals in the scripts this crate sends (the live-schema check, the
//! ledger), and the TabSeparated fields they print back.

/// `value` as a ClickHouse string literal.
pub(crate) fn literal(value: &str) -> String {
    let mut out = String::from("'");
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            _ => out.push(ch),
        }
    }
    out.push('\'');
    out
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
}
