//! Redaction behaviour on hand-written outputs, one rule per test.

use clickhouse_schema_core::sql::redact::{MAX_TEXT_BYTES, redact_clickhouse_output};

const S3_STATEMENT: &str = "CREATE TABLE t (x String) ENGINE = S3('https://bucket.example.com/data/*.csv', \
                            'AKIAIOSFODNN7EXAMPLE', 'wJalr''XUtn\\'FEMI\\\\K7MDENG', 'CSV')";

fn assert_hidden(text: &str, fragments: &[&str]) {
    for fragment in fragments {
        assert!(!text.contains(fragment), "{fragment:?} survived in {text:?}");
    }
}

#[test]
fn old_form_gives_code_and_class() {
    let out = "Received exception from server (version 18.16.1):\nCode: 57. DB::Exception: Received from \
               localhost:9000, 127.0.0.1. DB::Exception: Table app.events already exists.. ";
    let r = redact_clickhouse_output(out, "CREATE TABLE app.events (x UInt8) ENGINE = Memory");
    assert_eq!(r.clickhouse_code, Some(57));
    assert_eq!(r.clickhouse_exception.as_deref(), Some("DB::Exception"));
    assert!(r.text.contains("Table app.events already exists"), "{}", r.text);
}

#[test]
fn per_host_form_gives_code_and_class() {
    let out = "host-1\t9000\t57\tCode: 57, e.displayText() = DB::Exception: Table app.events already exists., \
               e.what() = DB::Exception\t1\t0";
    let r = redact_clickhouse_output(
        out,
        "CREATE TABLE app.events ON CLUSTER c (x UInt8) ENGINE = Memory",
    );
    assert_eq!(r.clickhouse_code, Some(57));
    assert_eq!(r.clickhouse_exception.as_deref(), Some("DB::Exception"));
}

#[test]
fn the_client_level_code_wins_over_per_host_rows() {
    let out = "h1\t9000\t57\tCode: 57, e.displayText() = DB::Exception: exists\n\
               Received exception from server (version 18.16.1):\n\
               Code: 159. DB::Exception: Received from localhost:9000. DB::Exception: Watching task is executing \
               longer than distributed_ddl_task_timeout.";
    let r = redact_clickhouse_output(out, "DROP TABLE t ON CLUSTER c");
    assert_eq!(r.clickhouse_code, Some(159));
}

#[test]
fn modern_form_gives_the_exception_name() {
    let out = "Code: 57. DB::Exception: Table app.events already exists. (TABLE_ALREADY_EXISTS)\n";
    let r = redact_clickhouse_output(out, "CREATE TABLE app.events (x UInt8) ENGINE = Memory");
    assert_eq!(r.clickhouse_code, Some(57));
    assert_eq!(r.clickhouse_exception.as_deref(), Some("TABLE_ALREADY_EXISTS"));
}

#[test]
fn an_echoed_value_in_parentheses_is_never_taken_for_the_exception_name() {
    let statement = "SELECT f('(AKIAIOSFODNN7EXAMPLE)')";
    let out = "Code: 46. DB::Exception: Unknown function f: while parsing (AKIAIOSFODNN7EXAMPLE)\n";
    let r = redact_clickhouse_output(out, statement);
    assert_eq!(r.clickhouse_code, Some(46));
    assert_eq!(r.clickhouse_exception.as_deref(), Some("DB::Exception"));
    assert_hidden(&r.text, &["AKIAIOSFODNN7EXAMPLE", "OSFODN"]);
}

#[test]
fn no_code_means_none() {
    let r = redact_clickhouse_output("Connection refused", "SELECT 1");
    assert_eq!((r.clickhouse_code, r.clickhouse_exception), (None, None));
    assert_eq!(r.text, "Connection refused");
}

#[test]
fn a_statement_echo_is_replaced() {
    let statement = "  SELECT count() FROM app.events  ";
    let out = "Code: 60. DB::Exception: Table doesn't exist. (query: SELECT count() FROM app.events)";
    let r = redact_clickhouse_output(out, statement);
    assert!(r.text.contains("(query: <statement>)"), "{}", r.text);
}

#[test]
fn every_spelling_of_every_literal_is_redacted() {
    let echoes = [
        "'wJalr''XUtn\\'FEMI\\\\K7MDENG'",        // source
        "'wJalr\\'XUtn\\'FEMI\\\\K7MDENG'",       // C-style re-escape
        "'wJalr''XUtn''FEMI\\\\K7MDENG'",         // doubled re-escape
        "wJalr'XUtn'FEMI\\K7MDENG",               // decoded
        "wJalr\\\\'XUtn\\\\'FEMI\\\\\\\\K7MDENG", // re-escaped twice
        "wJalrXUtnFEMIK7MDENG",                   // every backslash and quote dropped
        "'wJalr\\'XUtn\\",                        // cut in the middle of an escape
    ];
    for echo in echoes {
        let out = format!("Code: 62. DB::Exception: Syntax error: failed at position 40: {echo}, 'CSV')");
        let r = redact_clickhouse_output(&out, S3_STATEMENT);
        assert_eq!(r.clickhouse_code, Some(62));
        assert_hidden(&r.text, &["wJalr", "XUtn", "FEMI", "K7MDENG", "AKIA", "'CSV'"]);
        assert!(r.text.contains("<redacted>"), "{}", r.text);
    }
}

#[test]
fn credential_keywords_make_bare_words_values() {
    let cases = [
        ("CREATE USER u IDENTIFIED BY hunter2secret", "hunter2secret"),
        (
            "CREATE USER u IDENTIFIED WITH sha256_password BY hunter2secret",
            "hunter2secret",
        ),
        ("CREATE USER u PASSWORD = hunter2secret", "hunter2secret"),
        (
            "SELECT * FROM s3(url, access_key_id = AKIAIOSFODNN7EXAMPLE)",
            "AKIAIOSFODNN7EXAMPLE",
        ),
        ("SELECT * FROM t SETTINGS token = 1234567890123", "1234567890123"),
        (
            "SELECT * FROM t SETTINGS aws_secret_access_key: `backticked_secret`",
            "backticked_secret",
        ),
    ];
    for (statement, secret) in cases {
        let out = format!("Code: 62. DB::Exception: Syntax error: failed at position 10: {statement}x");
        let r = redact_clickhouse_output(&out, statement);
        assert_hidden(&r.text, &[secret]);
        assert_eq!(r.clickhouse_code, Some(62));
    }
}

#[test]
fn short_literals_are_redacted_as_whole_tokens_only() {
    let statement = "SELECT * FROM t WHERE k = 'abc' AND c = 'a'";
    let out = "Code: 47. DB::Exception: Missing columns: 'abc' while processing abcdef and 'a' in a query";
    let r = redact_clickhouse_output(out, statement);
    assert!(r.text.contains("Missing columns: '<redacted>'"), "{}", r.text);
    assert!(r.text.contains("abcdef"), "{}", r.text);
    assert!(r.text.contains("'<redacted>' in a query"), "{}", r.text);
}

#[test]
fn heredoc_bodies_are_values() {
    let statement = "SELECT $tag$heredoc-secret-value$tag$";
    let out = "Code: 62. DB::Exception: Syntax error: failed at position 8: $tag$heredoc-secret-value$tag$";
    let r = redact_clickhouse_output(out, statement);
    assert_hidden(&r.text, &["heredoc", "secret-value"]);
}

#[test]
fn control_characters_match_in_decoded_and_escaped_form() {
    let statement = "SELECT toDate('line1\\nline2\\ttab-secret')";
    for echo in [
        "line1\nline2\ttab-secret",
        "line1\\nline2\\ttab-secret",
        "line1\\\\nline2",
    ] {
        let out = format!("Code: 6. DB::Exception: Cannot parse string '{echo}' as Date");
        let r = redact_clickhouse_output(&out, statement);
        assert_hidden(&r.text, &["line1", "line2", "tab-secret"]);
    }
}

#[test]
fn non_ascii_values_are_redacted_on_char_boundaries() {
    let statement = "SELECT toDate('pässwörd-ключ-密码')";
    let out =
        "Code: 6. DB::Exception: Cannot parse string 'pässwörd-ключ-密码' as Date (parsed just 'pässwö')";
    let r = redact_clickhouse_output(out, statement);
    assert_hidden(&r.text, &["pässw", "ключ", "密码"]);
}

#[test]
fn the_line_filter_keeps_the_code_and_cuts_after_the_keyword() {
    let out = "Code: 516. DB::Exception: default: Authentication failed: password is incorrect, or there is no \
               user with such name. (AUTHENTICATION_FAILED)";
    let r = redact_clickhouse_output(out, "SELECT 1");
    assert_eq!(r.clickhouse_code, Some(516));
    assert_eq!(r.clickhouse_exception.as_deref(), Some("AUTHENTICATION_FAILED"));
    assert_eq!(
        r.text,
        "Code: 516. DB::Exception: default: Authentication failed: password [redacted]"
    );
}

#[test]
fn the_line_filter_keeps_the_servers_list_of_expected_tokens() {
    // What 18.16 printed (captured from the sandbox) for a column definition
    // with a stray word: its list of what may follow ends with the keyword
    // `token`, which is no credential.
    let statement = "CREATE TABLE IF NOT EXISTS orders.broken (id UInt64 NOT)";
    let out = "Code: 62. DB::Exception: Syntax error: failed at position 53: NOT)\n. Expected one of: COMMENT, \
               DEFAULT, MATERIALIZED, ALIAS, ClosingRoundBracket, Comma, token\n";
    let r = redact_clickhouse_output(out, statement);
    assert_eq!(r.clickhouse_code, Some(62));
    assert!(
        r.text.ends_with(
            ". Expected one of: COMMENT, DEFAULT, MATERIALIZED, ALIAS, ClosingRoundBracket, Comma, token\n"
        ),
        "{}",
        r.text
    );
    assert!(!r.text.contains("[redacted]"), "{}", r.text);
    // The same word holding a value on a line is still cut.
    let r = redact_clickhouse_output(
        "Code: 36. DB::Exception: bad header: token = tok_live_0123456789",
        "SELECT 1",
    );
    assert_eq!(r.text, "Code: 36. DB::Exception: bad header: token [redacted]");
}

#[test]
fn long_output_is_capped_with_a_marker() {
    let out = format!("Code: 62. DB::Exception: {}", "é".repeat(5000));
    let r = redact_clickhouse_output(&out, "SELECT 1");
    assert!(r.text.len() <= MAX_TEXT_BYTES);
    assert!(r.text.starts_with("Code: 62."));
    assert!(r.text.contains("[truncated "), "{}", &r.text[r.text.len() - 40..]);
    assert_eq!(r.clickhouse_code, Some(62));
}

#[test]
fn a_value_past_the_cap_still_counts_for_the_code() {
    let out = format!("{}\nCode: 60. DB::Exception: x", "noise ".repeat(1000));
    assert_eq!(
        redact_clickhouse_output(&out, "SELECT 1").clickhouse_code,
        Some(60)
    );
}

#[test]
fn empty_inputs_are_fine() {
    assert_eq!(redact_clickhouse_output("", "").text, "");
    assert_eq!(redact_clickhouse_output("x", "''").text, "x");
    assert_eq!(
        redact_clickhouse_output("Code: 99999999999. x", "").clickhouse_code,
        None
    );
}
