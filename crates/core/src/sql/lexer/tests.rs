use super::*;

/// `(kind, text, unterminated)` for every token of `src`.
fn lex(src: &str) -> Vec<(TokenKind, &str, bool)> {
    tokenize(src)
        .into_iter()
        .map(|t| (t.kind, t.text(src), t.unterminated))
        .collect()
}

/// The single token `src` lexes to.
fn one(src: &str) -> (TokenKind, bool) {
    let tokens = tokenize(src);
    assert_eq!(tokens.len(), 1, "{src:?} lexed to {:?}", lex(src));
    (tokens[0].kind, tokens[0].unterminated)
}

use TokenKind::*;

#[test]
fn whitespace_merges_ascii_and_unicode_spaces() {
    assert_eq!(one(" \t\r\n\x0b\x0c"), (Whitespace, false));
    assert_eq!(one("\u{a0}\u{2003} \u{3000}"), (Whitespace, false));
}

#[test]
fn line_comments_stop_before_the_newline() {
    for src in [
        "-- on cluster c",
        "# on cluster c",
        "#!/usr/bin/env x",
        "// c",
        "#\tx",
        "--",
    ] {
        assert_eq!(one(src), (LineComment, false), "{src:?}");
    }
    assert_eq!(
        lex("-- a\nb"),
        vec![
            (LineComment, "-- a", false),
            (Whitespace, "\n", false),
            (Word, "b", false)
        ]
    );
}

#[test]
fn hash_without_space_is_punctuation_as_in_clickhouse() {
    assert_eq!(lex("#x"), vec![(Punct, "#", false), (Word, "x", false)]);
}

#[test]
fn block_comments_nest() {
    assert_eq!(one("/* a /* b */ c */"), (BlockComment, false));
    assert_eq!(
        lex("/* a */x"),
        vec![(BlockComment, "/* a */", false), (Word, "x", false)]
    );
    assert_eq!(one("/* a /* b */ c"), (BlockComment, true));
    assert_eq!(one("/*"), (BlockComment, true));
    assert_eq!(one("/*/"), (BlockComment, true));
}

#[test]
fn string_literals_honour_backslash_and_doubled_quotes() {
    for src in ["''", "'a'", r"'a\'b'", "'a''b'", r"'a\\'", "'ключ'", "'\n'"] {
        assert_eq!(one(src), (StringLiteral, false), "{src:?}");
    }
    for src in ["'", "'abc", r"'abc\'", r"'abc\", "'a''"] {
        assert_eq!(one(src), (StringLiteral, true), "{src:?}");
    }
    assert_eq!(lex("'a' 'b'").len(), 3);
}

#[test]
fn quoted_identifiers_use_backticks_or_double_quotes() {
    for src in ["`a b`", r#""a b""#, "`a``b`", r#""a\"b""#] {
        assert_eq!(one(src), (QuotedIdentifier, false), "{src:?}");
    }
    assert_eq!(one("`abc"), (QuotedIdentifier, true));
    assert_eq!(one("\"abc"), (QuotedIdentifier, true));
}

#[test]
fn heredocs_with_and_without_tag() {
    assert_eq!(one("$$a 'b' $c$$"), (HereDoc, false));
    assert_eq!(one("$tag$ $$ $tag$"), (HereDoc, false));
    assert_eq!(one("$tag$ never closed"), (HereDoc, true));
    assert_eq!(one("$$"), (HereDoc, true));
    assert_eq!(
        lex("$ x"),
        vec![(Punct, "$", false), (Whitespace, " ", false), (Word, "x", false)]
    );
    assert_eq!(one("$abc"), (Word, false));
}

#[test]
fn numbers_in_every_form() {
    for src in [
        "0", "42", "1_000", "3.14", "1e10", "1E-5", "2.5e+3", "0x1F", "0XaB", "0x1.8p3", "0b101", ".5", "1.",
    ] {
        assert_eq!(one(src), (Number, false), "{src:?}");
    }
    // A number running into letters is a word, as ClickHouse reads it.
    assert_eq!(one("1st"), (Word, false));
    assert_eq!(one("0xZ"), (Word, false));
}

#[test]
fn dot_after_a_name_is_tuple_access() {
    assert_eq!(
        lex("t.1.1"),
        vec![
            (Word, "t", false),
            (Punct, ".", false),
            (Number, "1", false),
            (Punct, ".", false),
            (Number, "1", false)
        ]
    );
    assert_eq!(lex("(.5)")[1], (Number, ".5", false));
}

#[test]
fn words_take_underscores_digits_and_dollars() {
    for src in ["CLUSTER", "on", "_x1", "a$b", "app_events_2024"] {
        assert_eq!(one(src), (Word, false), "{src:?}");
    }
    let tokens = tokenize("oN");
    assert!(tokens[0].is_keyword("oN", "ON"));
}

#[test]
fn operators_take_two_characters_where_clickhouse_does() {
    for src in [
        "->", "::", "||", "!=", "<>", "<=", ">=", "==", "@@", "(", ",", ";", "=", "+", "*", "\\",
    ] {
        assert_eq!(one(src), (Punct, false), "{src:?}");
    }
}

#[test]
fn other_covers_control_bytes_and_non_ascii() {
    assert_eq!(one("\x01"), (Other, false));
    assert_eq!(one("é"), (Other, false));
    assert_eq!(lex("密码"), vec![(Other, "密", false), (Other, "码", false)]);
}

#[test]
fn bodies_and_values() {
    let src = r"'pa\'ss' 'pa''ss' `we``ird` $t$ body $t$ 'open\";
    let tokens: Vec<Token> = significant(src).collect();
    let bodies: Vec<&str> = tokens.iter().map(|t| t.body(src)).collect();
    assert_eq!(bodies, vec![r"pa\'ss", "pa''ss", "we``ird", " body ", r"open\"]);
    let values: Vec<Vec<u8>> = tokens.iter().map(|t| t.value(src)).collect();
    assert_eq!(values[0], b"pa'ss");
    assert_eq!(values[1], b"pa'ss");
    assert_eq!(values[2], b"we`ird");
    assert_eq!(values[3], b" body ");
    assert_eq!(values[4], b"open\\");
    assert_eq!(tokens[0].quote(src), Some(b'\''));
    assert_eq!(tokens[2].quote(src), Some(b'`'));
    assert_eq!(tokens[3].quote(src), None);
}

#[test]
fn a_statement_lexes_into_the_expected_significant_tokens() {
    let src = "CREATE TABLE db.t ON CLUSTER 'c' -- note\n(x String DEFAULT 'a''b') ENGINE = Memory";
    let words: Vec<&str> = significant(src).map(|t| t.text(src)).collect();
    assert_eq!(
        words,
        vec![
            "CREATE", "TABLE", "db", ".", "t", "ON", "CLUSTER", "'c'", "(", "x", "String", "DEFAULT",
            "'a''b'", ")", "ENGINE", "=", "Memory"
        ]
    );
}
