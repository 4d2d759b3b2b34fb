//! Property: whatever spelling a server echoes a statement's literal in, no
//! stretch of it carrying 6 or more significant bytes survives redaction,
//! and the parsed code always does.

use clickhouse_schema_core::sql::lexer::escape;
use clickhouse_schema_core::sql::redact::{MAX_TEXT_BYTES, MIN_FRAGMENT, redact_clickhouse_output};
use proptest::prelude::*;

/// Characters of a literal value: plenty of the ones escaping varies on.
fn value_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => prop::char::range('a', 'z'),
        2 => prop::char::range('0', '9'),
        1 => prop::sample::select(vec!['\'', '\\', '"', '`', '\n', '\t', '\u{1}', '\u{7f}', ' ', '-', '/', '=']),
        1 => prop::sample::select(vec!['é', 'ß', 'к', '密', '码', '😀']),
    ]
}

fn value() -> impl Strategy<Value = String> {
    prop::collection::vec(value_char(), 1..40).prop_map(|chars| chars.into_iter().collect())
}

#[derive(Debug, Clone, Copy)]
enum Spelling {
    Decoded,
    Source,
    CStyle,
    Doubled,
    BackslashesDoubled,
    BackslashesDropped,
    /// The source spelling cut after this many bytes (maybe mid-escape).
    CutSource(usize),
}

fn spelling() -> impl Strategy<Value = Spelling> {
    prop_oneof![
        Just(Spelling::Decoded),
        Just(Spelling::Source),
        Just(Spelling::CStyle),
        Just(Spelling::Doubled),
        Just(Spelling::BackslashesDoubled),
        Just(Spelling::BackslashesDropped),
        (0usize..60).prop_map(Spelling::CutSource),
    ]
}

fn noise() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            " ",
            ", ",
            "(",
            ")",
            "'",
            "\n",
            ": ",
            "Syntax error: failed at position 12",
            "Expected one of: ",
            "DB::Exception: ",
            "In scope SELECT ",
            "(parsed just ",
            ". ",
        ]),
        0..6,
    )
    .prop_map(|parts| parts.concat())
}

fn skeleton_len(s: &str) -> usize {
    s.bytes()
        .filter(|b| !matches!(b, b'\\' | b'\'' | b'"' | b'`'))
        .count()
}

/// How a server could echo `value`, written in the statement as `source`.
fn echo(value: &str, source: &str, spelling: Spelling) -> String {
    let c_style = escape::escape_c_style(value.as_bytes(), b'\'');
    let bytes: Vec<u8> = match spelling {
        Spelling::Decoded => value.as_bytes().to_vec(),
        Spelling::Source => source.as_bytes().to_vec(),
        Spelling::CStyle => c_style,
        Spelling::Doubled => escape::escape_doubled(value.as_bytes(), b'\''),
        Spelling::BackslashesDoubled => c_style
            .iter()
            .flat_map(|&b| if b == b'\\' { vec![b'\\', b'\\'] } else { vec![b] })
            .collect(),
        Spelling::BackslashesDropped => value.bytes().filter(|&b| b != b'\\').collect(),
        Spelling::CutSource(at) => {
            let mut at = at.min(source.len());
            while !source.is_char_boundary(at) {
                at -= 1;
            }
            source.as_bytes()[..at].to_vec()
        }
    };
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn no_echoed_spelling_survives(
        values in prop::collection::vec((value(), any::<bool>()), 1..6),
        echoes in prop::collection::vec((any::<prop::sample::Index>(), spelling(), noise()), 1..8),
        code in 1u32..1000,
        lead in noise(),
    ) {
        // The statement writes each value with one of the two re-escapes.
        let sources: Vec<String> = values
            .iter()
            .map(|(v, doubled)| {
                let bytes = if *doubled {
                    escape::escape_doubled(v.as_bytes(), b'\'')
                } else {
                    escape::escape_c_style(v.as_bytes(), b'\'')
                };
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .collect();
        let statement = format!(
            "SELECT f({})",
            sources.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(", ")
        );

        let mut output = format!("Code: {code}. DB::Exception: {lead}");
        let mut fragments = Vec::new();
        for (which, spelling, noise) in &echoes {
            let i = which.index(values.len());
            let fragment = echo(&values[i].0, &sources[i], *spelling);
            output.push_str(&fragment);
            output.push_str(noise);
            fragments.push(fragment);
        }

        let r = redact_clickhouse_output(&output, &statement);
        prop_assert_eq!(r.clickhouse_code, Some(code));
        prop_assert!(r.text.len() <= MAX_TEXT_BYTES);

        for fragment in &fragments {
            // Every piece of the fragment carrying MIN_FRAGMENT significant bytes.
            let starts: Vec<usize> = fragment.char_indices().map(|(i, _)| i).collect();
            for &start in &starts {
                let end = fragment[start..]
                    .char_indices()
                    .map(|(i, c)| start + i + c.len_utf8())
                    .find(|&end| skeleton_len(&fragment[start..end]) >= MIN_FRAGMENT);
                if let Some(end) = end {
                    let piece = &fragment[start..end];
                    prop_assert!(
                        !r.text.contains(piece),
                        "{:?} of {:?} survived\nstatement: {:?}\noutput: {:?}\ntext: {:?}",
                        piece, fragment, statement, output, r.text
                    );
                }
            }
        }
    }
}
