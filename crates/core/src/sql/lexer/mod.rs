//! A ClickHouse-aware lexer.
//!
//! It exists so that rules about statements (the onCluster check, picking the
//! literals redaction must hide) look at tokens rather than at regex matches:
//! an `ON CLUSTER` inside a string literal or a comment is not a clause.
//!
//! The token rules follow ClickHouse's own lexer (`src/Parsers/Lexer.cpp`) where
//! that matters for the two callers. Where it does not, the lexer errs towards
//! hiding text: a construct ClickHouse would treat as a comment or a literal is
//! never read as significant here. Deliberate differences:
//!
//! * `#` starts a line comment when followed by any ASCII whitespace or `!`
//!   (ClickHouse: only a space or `!`). `#` followed by anything else is
//!   punctuation, as in ClickHouse.
//! * `//` starts a line comment, as in current ClickHouse (older servers reject
//!   it, so treating it as a comment can only make the onCluster check stricter).
//! * A heredoc tag is restricted to word characters (`$tag$`, `$$`); an opener
//!   without its closing tag is an unterminated heredoc running to the end.
//! * Non-ASCII characters other than whitespace are one [`TokenKind::Other`]
//!   token each (ClickHouse rejects them outside literals and identifiers).
//!
//! Lexing never fails: every byte of the input belongs to exactly one token,
//! and an unclosed literal, identifier, heredoc or block comment becomes one
//! token flagged [`Token::unterminated`] that runs to the end of the input.

pub mod escape;

use memchr::{memchr, memchr2, memmem};

/// What a token is. Keywords and identifiers share [`TokenKind::Word`]; use
/// `Token::is_keyword` to match one case-insensitively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// ASCII and Unicode whitespace.
    Whitespace,
    /// `-- …`, `# …`, `#!…` or `// …`, up to (not including) the newline.
    LineComment,
    /// `/* … */`, nested.
    BlockComment,
    /// `'…'`, with ClickHouse escapes.
    StringLiteral,
    /// `` `…` `` or `"…"`.
    QuotedIdentifier,
    /// `$tag$…$tag$` or `$$…$$`; the body is taken verbatim, without escapes.
    HereDoc,
    /// Integer, decimal, exponent or hex/binary number.
    Number,
    /// A bare keyword or identifier.
    Word,
    /// An operator or punctuation (`(`, `,`, `::`, `->`, `!=`, ...).
    Punct,
    /// A character ClickHouse has no token for (control bytes, non-ASCII).
    Other,
}

/// One token: its kind and where it is, as a byte range into the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token {
    /// What the token is.
    pub kind: TokenKind,
    /// Byte offset of the first byte (always on a char boundary).
    pub start: usize,
    /// Byte offset one past the last byte (always on a char boundary).
    pub end: usize,
    /// The closing delimiter is missing; the token runs to the end of input.
    pub unterminated: bool,
}

impl Token {
    /// The token's source text.
    pub(crate) fn text<'a>(&self, src: &'a str) -> &'a str {
        src.get(self.start..self.end).unwrap_or("")
    }

    /// Whitespace and comments: what a parser skips.
    pub(crate) fn is_trivia(&self) -> bool {
        matches!(
            self.kind,
            TokenKind::Whitespace | TokenKind::LineComment | TokenKind::BlockComment
        )
    }

    /// A bare word equal to `keyword`, ignoring ASCII case.
    pub(crate) fn is_keyword(&self, src: &str, keyword: &str) -> bool {
        self.kind == TokenKind::Word && self.text(src).eq_ignore_ascii_case(keyword)
    }

    /// Punctuation spelled exactly `punct`.
    pub(crate) fn is_punct(&self, src: &str, punct: &str) -> bool {
        self.kind == TokenKind::Punct && self.text(src) == punct
    }

    /// The delimiting quote of a string literal or quoted identifier.
    pub fn quote(&self, src: &str) -> Option<u8> {
        match self.kind {
            TokenKind::StringLiteral | TokenKind::QuotedIdentifier => src.as_bytes().get(self.start).copied(),
            _ => None,
        }
    }

    /// The source text inside the delimiters of a literal, quoted identifier or
    /// heredoc, escapes left as written. Other tokens give their whole text.
    pub fn body<'a>(&self, src: &'a str) -> &'a str {
        let text = self.text(src);
        match self.kind {
            TokenKind::StringLiteral | TokenKind::QuotedIdentifier => {
                let inner = text.get(1..).unwrap_or("");
                if self.unterminated {
                    inner
                } else {
                    inner.get(..inner.len().saturating_sub(1)).unwrap_or("")
                }
            }
            TokenKind::HereDoc => {
                // The tag is `$word$`: everything up to and including the second `$`.
                let tag_len = text
                    .as_bytes()
                    .iter()
                    .skip(1)
                    .position(|&b| b == b'$')
                    .map_or(text.len(), |p| p + 2);
                let after_open = text.get(tag_len..).unwrap_or("");
                if self.unterminated {
                    after_open
                } else {
                    after_open
                        .get(..after_open.len().saturating_sub(tag_len))
                        .unwrap_or("")
                }
            }
            _ => text,
        }
    }

    /// The value the server reads from this token: escapes decoded for
    /// literals and quoted identifiers, the body of a heredoc, the text of
    /// anything else.
    pub fn value(&self, src: &str) -> Vec<u8> {
        match self.quote(src) {
            Some(quote) => escape::decode(self.body(src).as_bytes(), quote),
            None => self.body(src).as_bytes().to_vec(),
        }
    }
}

/// Lexes all of `src`. The tokens cover it exactly, in order.
pub fn tokenize(src: &str) -> Vec<Token> {
    Lexer::new(src).collect()
}

/// The significant tokens of `src`: [`tokenize`] without whitespace and comments.
pub fn significant(src: &str) -> impl Iterator<Item = Token> + '_ {
    Lexer::new(src).filter(|token| !token.is_trivia())
}

/// A streaming lexer: an iterator over the tokens of one source string.
#[derive(Debug, Clone)]
pub(crate) struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    /// Kind and first byte of the last significant token. ClickHouse uses it to
    /// tell `x.1` (tuple access) from `.1` (a number).
    prev: Option<(TokenKind, u8)>,
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

fn is_ascii_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(src: &'a str) -> Self {
        Self {
            src,
            pos: 0,
            prev: None,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.src.as_bytes()
    }

    fn peek(&self, offset: usize) -> Option<u8> {
        self.bytes().get(self.pos + offset).copied()
    }

    /// Advances to the next char boundary at or after `pos`, so a token never
    /// splits a UTF-8 sequence whatever the scanning code did.
    fn to_boundary(&self, mut pos: usize) -> usize {
        let len = self.src.len();
        if pos >= len {
            return len;
        }
        while !self.src.is_char_boundary(pos) {
            pos += 1;
        }
        pos
    }

    fn whitespace(&self) -> usize {
        let bytes = self.bytes();
        let mut pos = self.pos;
        while pos < bytes.len() {
            if is_ascii_space(bytes[pos]) {
                pos += 1;
                continue;
            }
            if bytes[pos] < 0x80 {
                break;
            }
            match self.src[pos..].chars().next() {
                Some(c) if c.is_whitespace() => pos += c.len_utf8(),
                _ => break,
            }
        }
        pos
    }

    fn line_comment(&self, from: usize) -> usize {
        let rest = &self.bytes()[from..];
        memchr(b'\n', rest).map_or(self.src.len(), |i| from + i)
    }

    /// `/* … */` with nesting; returns the end and whether it was closed.
    fn block_comment(&self) -> (usize, bool) {
        let bytes = self.bytes();
        let mut depth = 1usize;
        let mut pos = self.pos + 2;
        while let Some(i) = memchr2(b'/', b'*', &bytes[pos..]) {
            let at = pos + i;
            match (bytes[at], bytes.get(at + 1)) {
                (b'/', Some(b'*')) => {
                    depth += 1;
                    pos = at + 2;
                }
                (b'*', Some(b'/')) => {
                    depth -= 1;
                    pos = at + 2;
                    if depth == 0 {
                        return (pos, true);
                    }
                }
                _ => pos = at + 1,
            }
        }
        (bytes.len(), false)
    }

    /// A quoted token delimited by `quote`; a backslash escapes the next byte
    /// and a doubled quote is part of the token.
    fn quoted(&self, quote: u8) -> (usize, bool) {
        let bytes = self.bytes();
        let mut pos = self.pos + 1;
        while let Some(i) = memchr2(quote, b'\\', &bytes[pos..]) {
            let at = pos + i;
            if bytes[at] == b'\\' {
                if at + 1 >= bytes.len() {
                    return (bytes.len(), false);
                }
                pos = at + 2;
                continue;
            }
            if bytes.get(at + 1) == Some(&quote) {
                pos = at + 2;
                continue;
            }
            return (at + 1, true);
        }
        (bytes.len(), false)
    }

    /// `$tag$…$tag$` starting at `pos`, when the opener is a heredoc tag.
    fn heredoc(&self) -> Option<(usize, bool)> {
        let bytes = self.bytes();
        let after = self.pos + 1;
        let tag_len = bytes[after..].iter().position(|&b| !is_word_byte(b))?;
        if bytes[after + tag_len] != b'$' {
            return None;
        }
        let body_start = after + tag_len + 1;
        let tag = &bytes[self.pos..body_start];
        match memmem::find(&bytes[body_start..], tag) {
            Some(i) => Some((body_start + i + tag.len(), true)),
            None => Some((bytes.len(), false)),
        }
    }

    fn digits(&self, mut pos: usize, hex: bool) -> usize {
        let bytes = self.bytes();
        while pos < bytes.len() {
            let b = bytes[pos];
            let digit = if hex {
                b.is_ascii_hexdigit()
            } else {
                b.is_ascii_digit()
            };
            // `1_000`: an underscore separates digits, it does not start a word.
            let separator = b == b'_' && bytes.get(pos + 1).is_some_and(|n| n.is_ascii_hexdigit());
            if !(digit || separator) {
                break;
            }
            pos += 1;
        }
        pos
    }

    /// A number starting with a digit; a trailing word makes it a word
    /// (`1st`), as in ClickHouse.
    fn number(&self) -> (TokenKind, usize) {
        let bytes = self.bytes();
        let start = self.pos;
        let mut pos = start;
        if matches!(self.prev, Some((TokenKind::Punct, b'.'))) {
            pos = self.digits(pos, false);
        } else {
            let mut hex = false;
            if bytes[pos] == b'0' && pos + 2 < bytes.len() {
                match bytes[pos + 1] {
                    b'x' | b'X' if bytes[pos + 2].is_ascii_hexdigit() => {
                        hex = true;
                        pos += 2;
                    }
                    b'b' | b'B' if matches!(bytes[pos + 2], b'0' | b'1') => pos += 2,
                    _ => {}
                }
            }
            pos = self.digits(pos, hex);
            if bytes.get(pos) == Some(&b'.') {
                pos = self.digits(pos + 1, hex);
            }
            pos = self.exponent(pos, if hex { b'p' } else { b'e' });
        }
        if bytes.get(pos).is_some_and(|&b| is_word_byte(b) || b == b'$') {
            while bytes.get(pos).is_some_and(|&b| is_word_byte(b) || b == b'$') {
                pos += 1;
            }
            let all_word = bytes[start..pos].iter().all(|&b| is_word_byte(b) || b == b'$');
            return (
                if all_word {
                    TokenKind::Word
                } else {
                    TokenKind::Number
                },
                pos,
            );
        }
        (TokenKind::Number, pos)
    }

    fn exponent(&self, pos: usize, marker: u8) -> usize {
        let bytes = self.bytes();
        if pos + 1 < bytes.len() && bytes[pos].eq_ignore_ascii_case(&marker) {
            let mut pos = pos + 1;
            if pos + 1 < bytes.len() && matches!(bytes[pos], b'+' | b'-') {
                pos += 1;
            }
            return self.digits(pos, false);
        }
        pos
    }

    fn word(&self) -> usize {
        let bytes = self.bytes();
        let mut pos = self.pos + 1;
        while pos < bytes.len() && (is_word_byte(bytes[pos]) || bytes[pos] == b'$') {
            pos += 1;
        }
        pos
    }

    fn punct(&self) -> usize {
        const TWO: [&[u8; 2]; 9] = [b"->", b"::", b"||", b"!=", b"<>", b"<=", b">=", b"==", b"@@"];
        let bytes = self.bytes();
        match bytes.get(self.pos..self.pos + 2) {
            Some(pair) if TWO.iter().any(|two| two.as_slice() == pair) => self.pos + 2,
            _ => self.pos + 1,
        }
    }

    fn next_token(&mut self) -> Option<Token> {
        let bytes = self.bytes();
        let start = self.pos;
        let first = *bytes.get(start)?;
        let mut unterminated = false;
        let (kind, end) = match first {
            b if is_ascii_space(b) => (TokenKind::Whitespace, self.whitespace()),
            b'-' if self.peek(1) == Some(b'-') => (TokenKind::LineComment, self.line_comment(start)),
            b'/' if self.peek(1) == Some(b'/') => (TokenKind::LineComment, self.line_comment(start)),
            b'#' if self.peek(1).is_some_and(|b| b == b'!' || is_ascii_space(b)) => {
                (TokenKind::LineComment, self.line_comment(start))
            }
            b'/' if self.peek(1) == Some(b'*') => {
                let (end, closed) = self.block_comment();
                unterminated = !closed;
                (TokenKind::BlockComment, end)
            }
            b'\'' | b'"' | b'`' => {
                let (end, closed) = self.quoted(first);
                unterminated = !closed;
                let kind = if first == b'\'' {
                    TokenKind::StringLiteral
                } else {
                    TokenKind::QuotedIdentifier
                };
                (kind, end)
            }
            b'$' => match self.heredoc() {
                Some((end, closed)) => {
                    unterminated = !closed;
                    (TokenKind::HereDoc, end)
                }
                None if self.peek(1).is_some_and(is_word_byte) => (TokenKind::Word, self.word()),
                None => (TokenKind::Punct, start + 1),
            },
            b'0'..=b'9' => self.number(),
            b'.' if self.peek(1).is_some_and(|b| b.is_ascii_digit()) && !self.dot_is_access() => {
                let end = self.digits(start + 1, false);
                (TokenKind::Number, self.exponent(end, b'e'))
            }
            b if b.is_ascii_alphabetic() || b == b'_' => (TokenKind::Word, self.word()),
            b if b.is_ascii_punctuation() => (TokenKind::Punct, self.punct()),
            b if b < 0x80 => (TokenKind::Other, start + 1),
            _ => {
                let end = self.whitespace();
                if end > start {
                    (TokenKind::Whitespace, end)
                } else {
                    let width = self.src[start..].chars().next().map_or(1, char::len_utf8);
                    (TokenKind::Other, start + width)
                }
            }
        };
        let end = self.to_boundary(end.max(start + 1));
        self.pos = end;
        let token = Token {
            kind,
            start,
            end,
            unterminated,
        };
        if !token.is_trivia() {
            self.prev = Some((kind, first));
        }
        Some(token)
    }

    /// After a name, a closing bracket or a number, `.1` is tuple access.
    fn dot_is_access(&self) -> bool {
        matches!(
            self.prev,
            Some(
                (
                    TokenKind::Word | TokenKind::QuotedIdentifier | TokenKind::Number,
                    _
                ) | (TokenKind::Punct, b')' | b']')
            )
        )
    }
}

impl Iterator for Lexer<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        self.next_token()
    }
}

#[cfg(test)]
mod tests;
