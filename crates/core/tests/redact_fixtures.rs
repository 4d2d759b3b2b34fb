//! Redaction over outputs captured from real servers (see
//! `fixtures/clickhouse/capture.sh` and `capture_chdb.sh`).
//!
//! The expected code and exception of each fixture were written by hand from
//! reading the raw output (`NAME.expected`), not produced by the code under
//! test. The leak check builds the literal spellings itself rather than
//! asking the redactor which spellings it looked for.

use std::fs;
use std::path::{Path, PathBuf};

use clickhouse_schema_core::sql::lexer::{TokenKind, escape, significant};
use clickhouse_schema_core::sql::redact::{MAX_TEXT_BYTES, redact_clickhouse_output};

/// Windows this many characters long must not survive.
const WINDOW: usize = 6;

fn fixture_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clickhouse");
    vec![root.join("18.16"), root.join("chdb-26.9")]
}

/// Every spelling a server has been seen to echo a literal in.
fn literal_spellings(statement: &str) -> Vec<String> {
    let mut spellings = Vec::new();
    for token in significant(statement) {
        if !matches!(token.kind, TokenKind::StringLiteral | TokenKind::HereDoc) {
            continue;
        }
        let raw = token.body(statement).as_bytes().to_vec();
        let quote = token.quote(statement).unwrap_or(b'\'');
        let decoded = if token.kind == TokenKind::HereDoc {
            raw.clone()
        } else {
            escape::decode(&raw, quote)
        };
        let c_style = escape::escape_c_style(&decoded, quote);
        let doubled_backslashes: Vec<u8> = c_style
            .iter()
            .flat_map(|&b| if b == b'\\' { vec![b'\\', b'\\'] } else { vec![b] })
            .collect();
        let dropped_backslashes: Vec<u8> = decoded.iter().copied().filter(|&b| b != b'\\').collect();
        for bytes in [
            raw,
            decoded.clone(),
            c_style,
            escape::escape_doubled(&decoded, quote),
            doubled_backslashes,
            dropped_backslashes,
        ] {
            spellings.push(String::from_utf8_lossy(&bytes).into_owned());
        }
    }
    spellings
}

fn read_expected(path: &Path) -> (u32, String) {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut code = None;
    let mut exception = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("code=") {
            code = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("exception=") {
            exception = Some(v.trim().to_owned());
        }
    }
    (code.expect("code= line"), exception.expect("exception= line"))
}

#[test]
fn no_literal_survives_and_the_code_does() {
    let mut checked = 0;
    for dir in fixture_dirs() {
        let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "sql"))
            .collect();
        entries.sort();
        for sql_path in entries {
            let statement = fs::read_to_string(&sql_path).expect("statement");
            let output = fs::read_to_string(sql_path.with_extension("out")).expect("output");
            let (code, exception) = read_expected(&sql_path.with_extension("expected"));
            let name = sql_path.display();

            let r = redact_clickhouse_output(&output, &statement);
            assert_eq!(r.clickhouse_code, Some(code), "{name}");
            assert_eq!(
                r.clickhouse_exception.as_deref(),
                Some(exception.as_str()),
                "{name}"
            );
            assert!(r.text.len() <= MAX_TEXT_BYTES, "{name}");
            assert!(
                r.text.contains(&format!("Code: {code}")),
                "{name}: the code line is gone: {}",
                r.text
            );

            for spelling in literal_spellings(&statement) {
                let chars: Vec<char> = spelling.chars().collect();
                for window in chars.windows(WINDOW) {
                    let window: String = window.iter().collect();
                    assert!(
                        !r.text.contains(&window),
                        "{name}: {window:?} of {spelling:?} survived in\n{}",
                        r.text
                    );
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} fixtures found");
}
