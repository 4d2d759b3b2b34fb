//! ClickHouse's quoted-text escapes, as one table read in both directions.
//!
//! Decoding a literal and re-escaping its value both go through `ESCAPES`, so
//! the spellings redaction searches for are views of one value rather than
//! separate guesses that could drift apart.
//!
//! Decoded values are bytes: `\xHH` can produce any byte, so a decoded value
//! is not necessarily UTF-8. Callers that need text convert lossily and only
//! for display or matching.

/// `(letter after the backslash, byte it decodes to)`.
///
/// The order matters for re-escaping only where two letters decode to the same
/// byte; there are none, so every decodable byte has exactly one letter.
pub(crate) const ESCAPES: [(u8, u8); 15] = [
    (b'a', 0x07),
    (b'b', 0x08),
    (b'e', 0x1b),
    (b'f', 0x0c),
    (b'n', b'\n'),
    (b'r', b'\r'),
    (b't', b'\t'),
    (b'v', 0x0b),
    (b'0', 0x00),
    (b'\\', b'\\'),
    (b'\'', b'\''),
    (b'"', b'"'),
    (b'`', b'`'),
    (b'/', b'/'),
    (b'=', b'='),
];

/// `\N` is ClickHouse's NULL marker; inside a literal it stands for nothing.
pub(crate) const NOTHING_LETTER: u8 = b'N';

/// `\xHH` introduces one byte given as two hex digits.
pub(crate) const HEX_LETTER: u8 = b'x';

const NO_ENTRY: u16 = u16::MAX;

const fn build_decode() -> [u16; 256] {
    let mut table = [NO_ENTRY; 256];
    let mut i = 0;
    while i < ESCAPES.len() {
        table[ESCAPES[i].0 as usize] = ESCAPES[i].1 as u16;
        i += 1;
    }
    table
}

const fn build_encode() -> [u16; 256] {
    let mut table = [NO_ENTRY; 256];
    let mut i = 0;
    while i < ESCAPES.len() {
        table[ESCAPES[i].1 as usize] = ESCAPES[i].0 as u16;
        i += 1;
    }
    table
}

static DECODE: [u16; 256] = build_decode();
static ENCODE: [u16; 256] = build_encode();

/// The byte `\letter` decodes to, when the table has a row for it.
pub(crate) fn decoded_byte(letter: u8) -> Option<u8> {
    let entry = DECODE[letter as usize];
    (entry != NO_ENTRY).then_some(entry as u8)
}

/// The letter that spells `byte` after a backslash, when the table has one.
pub(crate) fn escape_letter(byte: u8) -> Option<u8> {
    let entry = ENCODE[byte as usize];
    (entry != NO_ENTRY).then_some(entry as u8)
}

/// Bytes the server treats as control characters when deciding whether a
/// backslash before them survives.
fn is_control(byte: u8) -> bool {
    byte < 0x20
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Decodes the source text between the quotes of a literal (or quoted
/// identifier) delimited by `quote`.
///
/// Beyond the table: a doubled `quote` is one quote; a backslash before a raw
/// control byte yields that byte (the server keeps the backslash only before
/// printable characters it has no row for); `\x` without two hex digits and a
/// trailing lone backslash are kept as written, since the server would reject
/// them and there is no value to recover.
pub fn decode(raw: &[u8], quote: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let byte = raw[i];
        if byte == quote && raw.get(i + 1) == Some(&quote) {
            out.push(quote);
            i += 2;
            continue;
        }
        if byte != b'\\' {
            out.push(byte);
            i += 1;
            continue;
        }
        let Some(&letter) = raw.get(i + 1) else {
            out.push(b'\\');
            break;
        };
        if letter == HEX_LETTER {
            let high = raw.get(i + 2).copied().and_then(hex_value);
            let low = raw.get(i + 3).copied().and_then(hex_value);
            if let (Some(high), Some(low)) = (high, low) {
                out.push(high << 4 | low);
                i += 4;
                continue;
            }
        } else if letter == NOTHING_LETTER {
            i += 2;
            continue;
        } else if let Some(decoded) = decoded_byte(letter) {
            out.push(decoded);
            i += 2;
            continue;
        } else if is_control(letter) {
            out.push(letter);
            i += 2;
            continue;
        }
        out.push(b'\\');
        out.push(letter);
        i += 2;
    }
    out
}

/// How a re-escape writes the delimiting quote character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuoteStyle {
    /// `\'` — what ClickHouse itself writes when it quotes a value.
    Backslash,
    /// `''` — the SQL-standard spelling people type.
    Doubled,
}

/// Re-escapes `value` so that [`decode`] with the same `quote` gives it back.
///
/// Backslashes and control bytes are escaped in both styles (a bare backslash
/// would start an escape); only the quote differs. Control bytes without a
/// letter use `\xHH`. Other bytes, including non-UTF-8 ones, are copied.
pub(crate) fn escape(value: &[u8], quote: u8, style: QuoteStyle) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + value.len() / 8 + 2);
    for &byte in value {
        if byte == quote {
            match style {
                QuoteStyle::Backslash => out.extend_from_slice(&[b'\\', quote]),
                QuoteStyle::Doubled => out.extend_from_slice(&[quote, quote]),
            }
        } else if byte == b'\\' {
            out.extend_from_slice(b"\\\\");
        } else if is_control(byte) || byte == 0x7f {
            match escape_letter(byte) {
                Some(letter) => out.extend_from_slice(&[b'\\', letter]),
                None => {
                    const HEX: &[u8; 16] = b"0123456789ABCDEF";
                    out.extend_from_slice(&[
                        b'\\',
                        HEX_LETTER,
                        HEX[usize::from(byte >> 4)],
                        HEX[usize::from(byte & 0xf)],
                    ]);
                }
            }
        } else {
            out.push(byte);
        }
    }
    out
}

/// `escape` with `\'` for the quote.
pub fn escape_c_style(value: &[u8], quote: u8) -> Vec<u8> {
    escape(value, quote, QuoteStyle::Backslash)
}

/// `escape` with `''` for the quote.
pub fn escape_doubled(value: &[u8], quote: u8) -> Vec<u8> {
    escape(value, quote, QuoteStyle::Doubled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of the contract's table, plus the rows the server adds.
    const DECODE_CASES: &[(&str, &[u8])] = &[
        (r"\a", b"\x07"),
        (r"\b", b"\x08"),
        (r"\e", b"\x1b"),
        (r"\f", b"\x0c"),
        (r"\n", b"\n"),
        (r"\r", b"\r"),
        (r"\t", b"\t"),
        (r"\v", b"\x0b"),
        (r"\0", b"\x00"),
        (r"\\", b"\\"),
        (r"\'", b"'"),
        ("''", b"'"),
        (r#"\""#, b"\""),
        (r"\`", b"`"),
        (r"\/", b"/"),
        (r"\=", b"="),
        (r"\x41", b"A"),
        (r"\xff", b"\xff"),
        (r"\x0A", b"\n"),
        (r"a\Nb", b"ab"),
        (r"\z", b"\\z"),
        (r"100\%", b"100\\%"),
        (r"\_", b"\\_"),
        (r"\d+", b"\\d+"),
        ("\\\n", b"\n"),
        (r"\xZZ", b"\\xZZ"),
        (r"\x4", b"\\x4"),
        ("tail\\", b"tail\\"),
        ("pa\\'ss", b"pa'ss"),
        ("pa''ss", b"pa'ss"),
        ("", b""),
        ("plain", b"plain"),
        ("\u{e4}\\n\u{5bc6}", "\u{e4}\n\u{5bc6}".as_bytes()),
        (r"\é", "\\é".as_bytes()),
    ];

    #[test]
    fn decode_follows_every_row_of_the_table() {
        for (raw, expected) in DECODE_CASES {
            assert_eq!(decode(raw.as_bytes(), b'\''), *expected, "decoding {raw:?}");
        }
    }

    #[test]
    fn doubled_quote_is_only_the_delimiter_in_use() {
        assert_eq!(decode(b"a``b", b'`'), b"a`b");
        assert_eq!(decode(b"a''b", b'`'), b"a''b");
        assert_eq!(decode(br#"a""b"#, b'"'), b"a\"b");
    }

    const ESCAPE_CASES: &[(&[u8], &str, &str)] = &[
        (b"pa'ss", r"pa\'ss", "pa''ss"),
        (b"back\\slash", r"back\\slash", r"back\\slash"),
        (
            b"\x07\x08\x1b\x0c\n\r\t\x0b\x00",
            r"\a\b\e\f\n\r\t\v\0",
            r"\a\b\e\f\n\r\t\v\0",
        ),
        (b"\x01\x7f", r"\x01\x7F", r"\x01\x7F"),
        (b"\"`/=", "\"`/=", "\"`/="),
        (b"plain", "plain", "plain"),
    ];

    #[test]
    fn both_re_escapes_follow_the_table() {
        for (value, c_style, doubled) in ESCAPE_CASES {
            assert_eq!(escape_c_style(value, b'\''), c_style.as_bytes(), "{value:?}");
            assert_eq!(escape_doubled(value, b'\''), doubled.as_bytes(), "{value:?}");
        }
    }

    #[test]
    fn re_escapes_round_trip_through_decode() {
        let mut every_byte: Vec<u8> = (0..=255u8).collect();
        every_byte.extend_from_slice(b"''\\\\");
        for quote in [b'\'', b'"', b'`'] {
            assert_eq!(decode(&escape_c_style(&every_byte, quote), quote), every_byte);
            assert_eq!(decode(&escape_doubled(&every_byte, quote), quote), every_byte);
        }
    }

    #[test]
    fn every_table_row_has_one_letter_each_way() {
        for (letter, byte) in ESCAPES {
            assert_eq!(decoded_byte(letter), Some(byte));
            assert_eq!(escape_letter(byte), Some(letter));
        }
        assert_eq!(decoded_byte(b'z'), None);
        assert_eq!(escape_letter(b'z'), None);
    }
}
