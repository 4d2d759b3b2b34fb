//! Redaction of what ClickHouse printed about a failed statement.
//!
//! The rule is not "filter out credentials" — nothing in server text says which
//! positional argument is a key. It is: keep what identifies the failure, and
//! treat every value the statement contained as a secret. In order:
//!
//! 1. The error code and exception name are parsed from the raw output first
//!    and returned separately, so no later step can cost them.
//! 2. Echoes of the whole statement become `<statement>`.
//! 3. Every value of the statement — each string literal and heredoc, plus the
//!    token after a credential keyword (`PASSWORD`, `IDENTIFIED … BY`,
//!    `access_key_id`, `token`, ...) even when it is a bare word — becomes
//!    `<redacted>` wherever the server echoed it, in any spelling.
//! 4. The rest of any line after a credential-sounding keyword followed by a
//!    value becomes `[redacted]`, for secrets the statement did not account
//!    for; a keyword standing bare in a list or at a line's end (ClickHouse's
//!    `Expected one of: ..., token, ...`) is the server's own word and stays.
//! 5. The text is capped at [`MAX_TEXT_BYTES`] with a visible marker.
//!
//! # Spellings and fragments (step 3)
//!
//! Servers do not echo a value the way it was written: they echo the source
//! slice, the decoded value, the value re-escaped (`\'`, doubled backslashes),
//! a syntax-error excerpt cut in the middle of an escape, or (18.16) a decoded
//! value with the backslash of an unknown escape dropped. Matching each of those
//! exactly would always miss the next variant, so matching is done on a
//! *skeleton*: the text with backslashes and quote characters removed. Every
//! spelling above has the skeleton of one of four reference spellings (decoded,
//! source, `\'`-escaped, `''`-escaped), or a piece of one.
//!
//! Any stretch of output whose skeleton shares [`MIN_FRAGMENT`] consecutive
//! bytes with the skeleton of a reference spelling is redacted, together with
//! the rest of the shared run. This is implemented as a set of all
//! [`MIN_FRAGMENT`]-byte windows of the reference skeletons, probed with every
//! window of the output's skeleton — one pass over the output, whatever the
//! number of literals.
//!
//! Values whose skeleton is shorter than [`MIN_FRAGMENT`] cannot be matched that
//! way without wiping common words, so their reference spellings are matched
//! exactly instead: anywhere when the spelling is at least [`MIN_FRAGMENT`]
//! bytes, as a whole token (not inside a longer word) when shorter, and a
//! one-byte value only when the output shows it quoted. A one-character secret
//! has no strength to protect; redacting every `a` in a message would destroy
//! it. Over-redaction is the accepted cost everywhere else: a harmless literal
//! such as `'CSV'` costs a word of the message.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use memchr::memmem;

use crate::sql::lexer::{Token, TokenKind, escape, significant};

/// Cap on the redacted text, marker included.
pub const MAX_TEXT_BYTES: usize = 2048;

/// Shortest shared skeleton run that counts as an echo of a value.
pub const MIN_FRAGMENT: usize = 6;

/// Output beyond this is dropped before redaction: only [`MAX_TEXT_BYTES`]
/// survive anyway, and it bounds the work on a runaway parser trace.
const MAX_SCANNED_BYTES: usize = 1 << 20;

const VALUE_MARKER: &str = "<redacted>";
const STATEMENT_MARKER: &str = "<statement>";
const LINE_MARKER: &str = "[redacted]";

/// Words whose following token is a credential even when it is not quoted.
pub(crate) const CREDENTIAL_KEYWORDS: [&str; 6] = [
    "password",
    "access_key_id",
    "secret_access_key",
    "aws_access_key_id",
    "aws_secret_access_key",
    "token",
];

/// Lower-case words that make the rest of an output line suspect.
const LINE_KEYWORDS: [&str; 6] = [
    "password",
    "secret",
    "aws_secret",
    "access_key",
    "credential",
    "token",
];

/// What [`redact_clickhouse_output`] keeps of server output: the text with
/// every statement value removed, and the error facts parsed from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Redacted {
    /// Server output with every statement value removed, at most
    /// [`MAX_TEXT_BYTES`] long.
    pub text: String,
    /// ClickHouse's numeric error code (`Code: 57.`).
    pub clickhouse_code: Option<u32>,
    /// The exception name of current servers (`TABLE_ALREADY_EXISTS`) when
    /// the output has one, else the exception class (`DB::Exception`).
    pub clickhouse_exception: Option<String>,
}

/// Redacts `output`, which ClickHouse printed for `statement`.
pub fn redact_clickhouse_output(output: &str, statement: &str) -> Redacted {
    let values = value_tokens(statement);
    let (clickhouse_code, clickhouse_exception) = match parse_code(output) {
        Some(found) => (Some(found.code), exception_of(output, &found, statement, &values)),
        None => (None, None),
    };

    let scanned = &output[..floor_boundary(output, MAX_SCANNED_BYTES)];
    let dropped = output.len() - scanned.len();
    let text = replace_statement(scanned, statement);
    let text = redact_values(&text, statement, &values);
    let text = filter_lines(&text);
    Redacted {
        text: cap(text, dropped),
        clickhouse_code,
        clickhouse_exception,
    }
}

/// [`redact_clickhouse_output`] of output printed while `statement` ran beside `others` in one
/// client (a pod's script, `reconcile::batch`): a syntax error quotes the text after the failing
/// position, which runs on into the next statements, and logs sent to the client
/// (`send_logs_level`) quote the earlier ones, so their text and values are removed too.
pub fn redact_clickhouse_output_among(output: &str, statement: &str, others: &[String]) -> Redacted {
    let mut redacted = redact_clickhouse_output(output, statement);
    for other in others.iter().filter(|o| o.as_str() != statement) {
        let text = replace_statement(&redacted.text, other);
        redacted.text = redact_values(&text, other, &value_tokens(other));
    }
    redacted
}

/// Removes the values of rows from redacted server text (see [`redact_clickhouse_output`]), for
/// statements that read a table's rows: a failed conversion or constraint names the row's value
/// (`Cannot parse string '<value>' as UInt32`, `Column values: x = <value>`), and production data
/// must not reach an error or a log any more than a statement's literals. Every single-quoted
/// string becomes `'<data>'`, and what follows `Column values:` up to the exception's name (or the
/// line's end) becomes `<data>`; the code and exception name are parsed before this, from the raw
/// output. Harmless quoted words in the server's own text (a type's `'UInt32'`) go too: a word
/// of the message is the accepted cost, as in the rest of the redaction.
pub fn redact_row_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let line = match line.find("Column values:") {
            Some(at) => {
                let rest = &line[at..];
                let end = rest.rfind(". (").map_or(line.len(), |e| at + e);
                format!("{}Column values: <data>{}", &line[..at], &line[end..])
            }
            None => line.to_owned(),
        };
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\'' {
                out.push(c);
                continue;
            }
            // A quoted string, backslash escapes and doubled quotes inside it; an unclosed one
            // runs to the line's end.
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '\'' if chars.peek() == Some(&'\'') => {
                        chars.next();
                    }
                    '\'' => break,
                    _ => {}
                }
            }
            out.push_str("'<data>'");
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Step 1: code and exception

#[derive(Debug, Clone, Copy)]
struct FoundCode {
    code: u32,
    /// Byte offset just after `Code: N.` / `Code: N,`.
    after: usize,
    /// The per-host form, `Code: N, e.displayText() = …`.
    per_host: bool,
}

/// The ClickHouse error code `output` (a client's stderr) reports, if any (see [`parse_code`]).
/// The exit status is only that code modulo 256, so it cannot tell 216 from 472.
pub(crate) fn clickhouse_code(output: &str) -> Option<u32> {
    parse_code(output).map(|found| found.code)
}

/// The code of the client-level exception (`Code: N.`), falling back to the
/// first per-host one (`Code: N, e.displayText() = …`) when that is all there is.
fn parse_code(output: &str) -> Option<FoundCode> {
    let bytes = output.as_bytes();
    let mut per_host = None;
    for at in memmem::find_iter(bytes, b"Code: ") {
        let digits_start = at + 6;
        let digits = bytes[digits_start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 || digits > 9 {
            continue;
        }
        let Ok(code) = output[digits_start..digits_start + digits].parse::<u32>() else {
            continue;
        };
        let after = digits_start + digits + 1;
        match bytes.get(digits_start + digits) {
            Some(b'.') => {
                return Some(FoundCode {
                    code,
                    after,
                    per_host: false,
                });
            }
            Some(b',') if per_host.is_none() => {
                per_host = Some(FoundCode {
                    code,
                    after,
                    per_host: true,
                })
            }
            _ => {}
        }
    }
    per_host
}

fn exception_of(output: &str, found: &FoundCode, statement: &str, values: &[Token]) -> Option<String> {
    exception_name(output, found.after, statement, values).or_else(|| exception_class(output, found))
}

/// `DB::Exception` in `Code: 57. DB::Exception: …`.
fn exception_class(output: &str, found: &FoundCode) -> Option<String> {
    let mut rest = output.get(found.after..)?.trim_start();
    if found.per_host {
        rest = rest.strip_prefix("e.displayText() =")?.trim_start();
    }
    let len = rest
        .bytes()
        .take_while(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
        .count();
    let class = rest[..len].trim_end_matches(':');
    let well_formed = (3..=64).contains(&class.len())
        && class.as_bytes()[0].is_ascii_alphabetic()
        && class
            .split("::")
            .all(|part| !part.is_empty() && !part.contains(':'));
    (well_formed && rest[class.len()..].starts_with(':')).then(|| class.to_owned())
}

/// `TABLE_ALREADY_EXISTS` in `… already exists. (TABLE_ALREADY_EXISTS)`: an
/// upper-case name in parentheses after a space, ending its line. A candidate
/// that the statement itself contains is skipped: an echoed `(AKIA…)` has the
/// same shape, and an exception name must never carry a value.
fn exception_name(output: &str, from: usize, statement: &str, values: &[Token]) -> Option<String> {
    let bytes = output.as_bytes();
    for open in memmem::find_iter(&bytes[from..], b" (").map(|i| from + i + 2) {
        let len = bytes[open..]
            .iter()
            .take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || **b == b'_')
            .count();
        if !(3..=64).contains(&len)
            || !bytes[open].is_ascii_uppercase()
            || bytes.get(open + len) != Some(&b')')
        {
            continue;
        }
        if !bytes.get(open + len + 1).is_none_or(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let name = &output[open..open + len];
        let echoed = statement.contains(name)
            || values.iter().any(|token| {
                spellings_of(token, statement)
                    .spellings
                    .iter()
                    .any(|s| s.contains(name))
            });
        if !echoed {
            return Some(name.to_owned());
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Steps 2 and 3: statement echoes and values

/// One value of the statement and the reference spellings it may be echoed in.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Value {
    spellings: Vec<String>,
}

/// The tokens of `statement` that are values (see the module docs). Their
/// spellings are built one value at a time when needed, so a huge literal is
/// copied a few times at most, never indexed.
fn value_tokens(statement: &str) -> Vec<Token> {
    let tokens: Vec<Token> = significant(statement).collect();
    let mut values = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let is_value = match token.kind {
            TokenKind::StringLiteral | TokenKind::HereDoc => true,
            _ => follows_credential_keyword(&tokens, i, statement),
        };
        if is_value {
            values.push(*token);
        }
    }
    values
}

/// Whether `tokens[i]` is what a credential keyword assigns: the next token
/// after it, past an optional `=` or `:`.
fn follows_credential_keyword(tokens: &[Token], i: usize, statement: &str) -> bool {
    if !matches!(
        tokens[i].kind,
        TokenKind::Word | TokenKind::Number | TokenKind::QuotedIdentifier
    ) {
        return false;
    }
    let mut k = i;
    if k >= 2 && (tokens[k - 1].is_punct(statement, "=") || tokens[k - 1].is_punct(statement, ":")) {
        k -= 1;
    }
    let Some(keyword) = k.checked_sub(1).map(|j| &tokens[j]) else {
        return false;
    };
    if CREDENTIAL_KEYWORDS
        .iter()
        .any(|word| keyword.is_keyword(statement, word))
    {
        return true;
    }
    // `IDENTIFIED BY x` and `IDENTIFIED WITH method BY x`.
    keyword.is_keyword(statement, "BY")
        && tokens[..k - 1]
            .iter()
            .rev()
            .take(3)
            .any(|t| t.is_keyword(statement, "IDENTIFIED"))
}

/// The four reference spellings of a token's value: decoded, as written, and
/// re-escaped with `\'` and with `''`. Empty values have none.
fn spellings_of(token: &Token, statement: &str) -> Value {
    let body = token.body(statement);
    let mut spellings: Vec<String> = Vec::with_capacity(4);
    let mut add = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes).into_owned();
        if !text.is_empty() && !spellings.contains(&text) {
            spellings.push(text);
        }
    };
    match token.quote(statement) {
        Some(quote) => {
            let decoded = escape::decode(body.as_bytes(), quote);
            add(&decoded);
            add(body.as_bytes());
            add(&escape::escape_c_style(&decoded, quote));
            add(&escape::escape_doubled(&decoded, quote));
        }
        None => {
            add(body.as_bytes());
            add(&escape::escape_c_style(body.as_bytes(), b'\''));
        }
    }
    Value { spellings }
}

fn replace_statement(output: &str, statement: &str) -> String {
    let mut text = output.to_owned();
    let trimmed = statement.trim();
    let echoes: &[&str] = if trimmed.len() == statement.len() {
        &[trimmed]
    } else {
        &[statement, trimmed]
    };
    for echo in echoes {
        if !echo.is_empty() && memmem::find(text.as_bytes(), echo.as_bytes()).is_some() {
            text = text.replace(echo, STATEMENT_MARKER);
        }
    }
    text
}

/// Bytes dropped from a skeleton: quoting and escaping, which servers vary.
fn is_skeleton_noise(byte: u8) -> bool {
    matches!(byte, b'\\' | b'\'' | b'"' | b'`')
}

#[cfg(test)]
fn skeleton(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    out.extend(text.bytes().filter(|&b| !is_skeleton_noise(b)));
    out
}

const WINDOW_MASK: u64 = (1u64 << (8 * MIN_FRAGMENT)) - 1;

/// Multiplicative hashing for window keys; the keys are already uniform-ish
/// bytes, so SipHash's strength would only cost time.
#[derive(Default)]
struct WindowHasher(u64);

impl Hasher for WindowHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, key: u64) {
        let mixed = (self.0 ^ key).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = mixed ^ (mixed >> 29);
    }
}

type WindowSet = HashSet<u64, BuildHasherDefault<WindowHasher>>;

/// Bits in the prefilter probed before the set; most windows miss it.
const FILTER_BITS: u32 = 18;

fn filter_slot(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FILTER_BITS)) as usize
}

/// A set of window keys with a bitmap prefilter in front of it.
struct Windows {
    keys: WindowSet,
    filter: Vec<u64>,
}

impl Windows {
    fn new() -> Self {
        Self {
            keys: WindowSet::default(),
            filter: vec![0u64; 1 << (FILTER_BITS - 6)],
        }
    }

    fn insert(&mut self, key: u64) {
        self.keys.insert(key);
        let slot = filter_slot(key);
        self.filter[slot / 64] |= 1 << (slot % 64);
    }

    fn contains(&self, key: u64) -> bool {
        let slot = filter_slot(key);
        self.filter[slot / 64] & (1 << (slot % 64)) != 0 && self.keys.contains(&key)
    }
}

/// Calls `each(key)` for every window of [`MIN_FRAGMENT`] skeleton bytes of `text`.
fn for_each_window(text: &[u8], mut each: impl FnMut(u64)) {
    let mut count = 0usize;
    let mut key = 0u64;
    for &byte in text {
        if is_skeleton_noise(byte) {
            continue;
        }
        count += 1;
        key = (key << 8 | u64::from(byte)) & WINDOW_MASK;
        if count >= MIN_FRAGMENT {
            each(key);
        }
    }
}

/// What the two matchers look for in one output: the output's windows that
/// some value's skeleton shares, and the spellings too short for that.
///
/// Its size is bounded by the output (itself capped at
/// [`MAX_SCANNED_BYTES`]) whatever the size of the statement. When the
/// values are shorter than the output, their windows are indexed directly
/// (the cheap, common case: a few literals, a long error). Otherwise the
/// output's windows are indexed, each value's skeletons are streamed past
/// them, and only the shared windows are kept.
struct ValueIndex {
    shared: Windows,
    /// Spellings too short to match by skeleton, with their match rule.
    exact: Vec<(String, ExactRule)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExactRule {
    Anywhere,
    WholeToken,
    Quoted,
}

impl ValueIndex {
    fn new(text: &str, statement: &str, values: &[Token]) -> Self {
        let value_bytes: usize = values.iter().map(|t| t.end - t.start).sum();
        let in_output = (value_bytes > text.len()).then(|| {
            let mut windows = Windows::new();
            for_each_window(text.as_bytes(), |key| windows.insert(key));
            windows
        });
        let mut shared = Windows::new();
        let mut exact = Vec::new();
        for token in values {
            let value = spellings_of(token, statement);
            let skeleton_lens: Vec<usize> = value
                .spellings
                .iter()
                .map(|s| s.bytes().filter(|&b| !is_skeleton_noise(b)).count())
                .collect();
            let by_skeleton = skeleton_lens.iter().any(|&len| len >= MIN_FRAGMENT);
            for (spelling, &skeleton_len) in value.spellings.iter().zip(&skeleton_lens) {
                if skeleton_len >= MIN_FRAGMENT {
                    for_each_window(spelling.as_bytes(), |key| {
                        if in_output.as_ref().is_none_or(|o| o.contains(key)) {
                            shared.insert(key);
                        }
                    });
                    if by_skeleton {
                        continue;
                    }
                }
                let rule = match spelling.len() {
                    0 => continue,
                    1 => ExactRule::Quoted,
                    len if len < MIN_FRAGMENT => ExactRule::WholeToken,
                    _ => ExactRule::Anywhere,
                };
                exact.push((spelling.clone(), rule));
            }
        }
        Self { shared, exact }
    }
}

fn redact_values(text: &str, statement: &str, values: &[Token]) -> String {
    if values.is_empty() {
        return text.to_owned();
    }
    let index = ValueIndex::new(text, statement, values);
    let mut spans = skeleton_spans(text, &index);
    spans.extend(exact_spans(text, &index));
    replace_spans(text, spans, VALUE_MARKER)
}

/// Output ranges whose skeleton shares a window with a value's skeleton.
fn skeleton_spans(text: &str, index: &ValueIndex) -> Vec<(usize, usize)> {
    let mut spans: Vec<(usize, usize)> = Vec::new();
    if index.shared.keys.is_empty() {
        return spans;
    }
    // Positions of the last MIN_FRAGMENT skeleton bytes, as a ring.
    let mut ring = [0usize; MIN_FRAGMENT];
    let mut count = 0usize;
    let mut key = 0u64;
    for (pos, byte) in text.bytes().enumerate() {
        if is_skeleton_noise(byte) {
            continue;
        }
        ring[count % MIN_FRAGMENT] = pos;
        count += 1;
        key = (key << 8 | u64::from(byte)) & WINDOW_MASK;
        if count >= MIN_FRAGMENT && index.shared.contains(key) {
            let start = ring[count % MIN_FRAGMENT];
            let end = pos + 1;
            match spans.last_mut() {
                Some(last) if start <= last.1 => last.1 = end,
                _ => spans.push((start, end)),
            }
        }
    }
    spans
}

/// Output ranges holding a short value in one of its exact spellings.
fn exact_spans(text: &str, index: &ValueIndex) -> Vec<(usize, usize)> {
    if index.exact.is_empty() {
        return Vec::new();
    }
    let Ok(matcher) = AhoCorasick::builder()
        .match_kind(MatchKind::Standard)
        .build(index.exact.iter().map(|(spelling, _)| spelling.as_bytes()))
    else {
        return Vec::new();
    };
    let bytes = text.as_bytes();
    let word = |at: usize| {
        bytes
            .get(at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    };
    let quote = |at: Option<usize>| {
        at.and_then(|at| bytes.get(at))
            .is_some_and(|b| matches!(b, b'\'' | b'"' | b'`'))
    };
    matcher
        .find_overlapping_iter(bytes)
        .filter(|m| {
            let (start, end) = (m.start(), m.end());
            match index.exact[m.pattern().as_usize()].1 {
                ExactRule::Anywhere => true,
                ExactRule::WholeToken => (start == 0 || !word(start - 1)) && !word(end),
                ExactRule::Quoted => quote(start.checked_sub(1)) && quote(Some(end)),
            }
        })
        .map(|m| (m.start(), m.end()))
        .collect()
}

/// Replaces the union of `spans` (byte ranges, any order, may overlap) with
/// `marker`, widening each to char boundaries.
fn replace_spans(text: &str, mut spans: Vec<(usize, usize)>, marker: &str) -> String {
    if spans.is_empty() {
        return text.to_owned();
    }
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut current: Option<(usize, usize)> = None;
    let flush = |out: &mut String, copied: &mut usize, (start, end): (usize, usize)| {
        out.push_str(&text[*copied..start]);
        out.push_str(marker);
        *copied = end;
    };
    for (start, end) in spans {
        let start = floor_boundary(text, start);
        let end = ceil_boundary(text, end);
        current = match current {
            Some((cur_start, cur_end)) if start <= cur_end => Some((cur_start, cur_end.max(end))),
            Some(done) => {
                flush(&mut out, &mut copied, done);
                Some((start.max(copied), end.max(copied)))
            }
            None => Some((start, end)),
        };
    }
    if let Some(done) = current {
        flush(&mut out, &mut copied, done);
    }
    out.push_str(&text[copied..]);
    out
}

// ---------------------------------------------------------------------------
// Step 4: keyword line filter

/// A case-insensitive matcher for [`LINE_KEYWORDS`], built once.
fn line_keywords() -> Option<&'static AhoCorasick> {
    static MATCHER: OnceLock<Option<AhoCorasick>> = OnceLock::new();
    MATCHER
        .get_or_init(|| {
            // A DFA: this runs over the whole output, and the keywords are few.
            AhoCorasick::builder()
                .kind(Some(AhoCorasickKind::DFA))
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::LeftmostLongest)
                .build(LINE_KEYWORDS)
                .ok()
        })
        .as_ref()
}

/// Whether what follows a keyword shows it as a bare word rather than a key
/// with a value: nothing, or a list separator or a sentence's end. ClickHouse
/// names the keyword `token` in its own lists (`Expected one of: COMMENT,
/// DEFAULT, ..., token, ...`) and ends `Unrecognized token` with it; cutting
/// there took the server's words and hid nothing. Anything else after the
/// keyword (`= v`, `: v`, a quoted value, further words) still counts as a
/// value, so the filter stays on the safe side of the ambiguous cases.
fn bare_word(rest: &str) -> bool {
    let rest = rest.trim_start_matches([' ', '\t']);
    let mut chars = rest.chars();
    match chars.next() {
        None | Some(',' | ')' | ']' | ';') => true,
        Some('.') => chars.next().is_none_or(|c| !c.is_alphanumeric() && c != '_'),
        Some(_) => false,
    }
}

/// Keeps each line up to and including its first credential keyword that is
/// followed by a value (see [`bare_word`]) and replaces the rest of that line.
/// The part before the keyword stays because that is where ClickHouse puts the
/// code and the kind of failure.
fn filter_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let hit = line_keywords().and_then(|matcher| {
            matcher
                .find_iter(body)
                .map(|m| m.end())
                .find(|&end| !bare_word(&body[end..]))
        });
        match hit {
            Some(keep) if !body[keep..].trim().is_empty() => {
                out.push_str(&body[..keep]);
                out.push(' ');
                out.push_str(LINE_MARKER);
            }
            _ => out.push_str(body),
        }
        out.push_str(newline);
    }
    out
}

// ---------------------------------------------------------------------------
// Step 5: cap

fn cap(text: String, already_dropped: usize) -> String {
    if text.len() <= MAX_TEXT_BYTES && already_dropped == 0 {
        return text;
    }
    // Room for the marker; its number has at most 20 digits.
    const MARKER_ROOM: usize = 48;
    let keep = if text.len() <= MAX_TEXT_BYTES - MARKER_ROOM {
        text.len()
    } else {
        floor_boundary(&text, MAX_TEXT_BYTES - MARKER_ROOM)
    };
    let dropped = text.len() - keep + already_dropped;
    format!("{}… [truncated {dropped} bytes]", &text[..keep])
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_boundary(text: &str, mut at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_values_in_real_server_errors_are_removed() {
        // Captured from ClickHouse 18.16.1 (a CAST and an Enum of a String column's row) and from
        // the 26.9 engine (chdb-core 26.9.0: the same CAST, and a CHECK constraint); the row's value
        // renamed from the captured one (`secret-...`, which the credential filter caught by itself).
        let cases = [
            (
                "Received exception from server (version 18.16.1):\nCode: 6. DB::Exception: Received from \
                 localhost:9000, 127.0.0.1. DB::Exception: Cannot parse string 'alice-row-value-123' as UInt32: \
                 syntax error at begin of string. Note: there are toUInt32OrZero and toUInt32OrNull functions, which \
                 returns zero/NULL instead of throwing exception.. \n",
                6,
                None,
            ),
            (
                "Received exception from server (version 18.16.1):\nCode: 49. DB::Exception: Received from \
                 localhost:9000, 127.0.0.1. DB::Exception: Unknown element 'alice-row-value-123' for type \
                 Enum8('a' = 1). \n",
                49,
                None,
            ),
            (
                "Code: 6. DB::Exception: Cannot parse string 'alice-row-value-123' as UInt32: syntax error at begin \
                 of string. Note: there are toUInt32OrZero and toUInt32OrNull functions, which returns zero/NULL \
                 instead of throwing exception: while executing 'FUNCTION CAST(__table1.s :: 2, 'UInt32'_String :: \
                 1) -> CAST(__table1.s, 'UInt32'_String) UInt32 : 0'. (CANNOT_PARSE_TEXT)",
                6,
                Some("CANNOT_PARSE_TEXT"),
            ),
            (
                "Code: 469. DB::Exception: Constraint `c` for table default.dst (6929b75e-7f51-4a68-a214-57a714ae88f1) \
                 is violated at row 1. Expression: (s > 5). Column values: s = 2. (VIOLATED_CONSTRAINT)",
                469,
                Some("VIOLATED_CONSTRAINT"),
            ),
        ];
        for (output, code, name) in cases {
            let said = redact_clickhouse_output(output, "INSERT INTO db.t SELECT * FROM db.src");
            let text = redact_row_values(&said.text);
            assert!(!text.contains("alice-row-value"), "{text}");
            assert!(!text.contains("s = 2"), "{text}");
            assert_eq!(said.clickhouse_code, Some(code), "{output}");
            if let Some(name) = name {
                assert_eq!(said.clickhouse_exception.as_deref(), Some(name));
                assert!(
                    text.ends_with(&format!(" ({name})")),
                    "the name stays in the text: {text}"
                );
            }
            assert!(text.contains(&format!("Code: {code}.")), "{text}");
        }
        assert_eq!(
            redact_row_values("Column values: s = 'it''s', t = 2. (X)\na 'b\\'c' d 'open"),
            "Column values: <data>. (X)\na '<data>' d '<data>'"
        );
    }

    #[test]
    fn replace_spans_merges_and_respects_char_boundaries() {
        assert_eq!(replace_spans("abcdef", vec![(3, 4), (1, 2), (2, 3)], "#"), "a#ef");
        assert_eq!(replace_spans("abcdef", vec![(0, 1), (5, 6)], "#"), "#bcde#");
        // A span starting inside `é` widens to the whole character.
        assert_eq!(replace_spans("xéy", vec![(2, 3)], "#"), "x#y");
    }

    #[test]
    fn skeleton_drops_quotes_and_backslashes_only() {
        assert_eq!(skeleton(r#"pa\'ss''"`x\\n"#), b"passxn");
    }

    #[test]
    fn cap_keeps_short_text_and_marks_long_text() {
        assert_eq!(cap("short".into(), 0), "short");
        let long = "é".repeat(3000);
        let capped = cap(long, 0);
        assert!(capped.len() <= MAX_TEXT_BYTES, "{}", capped.len());
        assert!(capped.ends_with(" bytes]"));
    }

    #[test]
    fn filter_lines_cuts_after_the_first_keyword() {
        assert_eq!(
            filter_lines("Code: 516. Authentication failed: password is incorrect\nnext"),
            "Code: 516. Authentication failed: password [redacted]\nnext"
        );
        assert_eq!(filter_lines("Unrecognized token"), "Unrecognized token");
        assert_eq!(filter_lines("x SECRET=abc"), "x SECRET [redacted]");
    }

    #[test]
    fn filter_lines_keeps_a_bare_keyword_and_cuts_one_with_a_value() {
        // ClickHouse's own list of expected tokens names the word `token`.
        let expected = "Syntax error: failed at position 40 (end of query): . Expected one of: COMMENT, \
                        DEFAULT, MATERIALIZED, ALIAS, CODEC, token, NOT, NULL";
        assert_eq!(filter_lines(expected), expected);
        assert_eq!(
            filter_lines("Expected one of: NULL, token"),
            "Expected one of: NULL, token"
        );
        assert_eq!(filter_lines("Expected one of: token."), "Expected one of: token.");
        // A bare word first does not hide a key with a value later on the line.
        assert_eq!(
            filter_lines("Expected token, got token = abc"),
            "Expected token, got token [redacted]"
        );
        for (line, kept) in [
            ("token = tok_live_1", "token"),
            ("token: tok_live_1", "token"),
            ("token=tok_live_1", "token"),
            ("auth token 'tok_live_1'", "auth token"),
            (r#"{"token":"tok_live_1"}"#, r#"{"token"#),
            ("password.tok_live_1", "password"),
            ("tokens abc", "token"),
        ] {
            assert_eq!(filter_lines(line), format!("{kept} [redacted]"), "{line}");
        }
    }
}
