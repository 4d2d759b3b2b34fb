//! Scrubbing of credentials from Kubernetes-side error text.
//!
//! Why this exists: the Kubernetes transport turns errors of a client library
//! (kube-rs), of an exec credential plugin, of a proxy and of the API server
//! into messages that end up in JS errors and logs. Some of those errors
//! carry secrets in their text: a plugin's command printed with its
//! environment (`VAULT_TOKEN="..."`), a proxy URL with `user:password@`, a
//! header value, a token echoed by a server. The transport avoids printing
//! such errors in the first place; [`redact`] is the defense in depth applied
//! to every message it still builds, so one overlooked source cannot leak.
//!
//! Unlike [`crate::sql::redact`], there is no statement to learn the secret values
//! from, so the rules are by shape. Everything that looks like a credential
//! becomes `REDACTED`:
//!
//! 1. PEM blocks (`-----BEGIN ...-----` to the matching `-----END ...-----`).
//! 2. URL userinfo: `scheme://user:password@host` and a bare `user:password@host`.
//! 3. The credential after an authorization scheme: `Bearer <token>`, `Basic <b64>`.
//! 4. The value of a credential-sounding key (`token`, `password`, `secret`,
//!    `credential`, `auth...`, `...key`, plugin `stdout`/`stderr`) in
//!    `key=value`, `key: value` or `"key": "value"` form.
//! 5. Environment assignments: `NAME=value` with an upper-case name, and any
//!    `name="quoted value"` (how `std::process::Command` prints its env).
//! 6. JWT-shaped tokens (`eyJ...`), wherever they stand.
//!
//! Over-redaction is the accepted cost: a harmless `FOO=bar` loses its value,
//! the text around it stays.
//!
//! Pure: no I/O, no allocation beyond the result.

/// What a scrubbed credential is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// `text` with everything credential-shaped replaced by `REDACTED` (see the module docs).
pub fn redact(text: &str) -> String {
    let text = pem_blocks(text);
    let text = url_userinfo(&text);
    let text = auth_schemes(&text);
    let text = assignments(&text);
    jwts(&text)
}

/// Keys whose value is a credential. Matched case-insensitively as a
/// substring of the key, or (for `key`) as its ending.
const SECRET_KEY_PARTS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "secret",
    "credential",
    "auth",
    "cookie",
    "private",
    "stdout",
    "stderr",
];

fn is_secret_key(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    let trimmed = lower.trim_end_matches("-data").trim_end_matches("_data");
    SECRET_KEY_PARTS.iter().any(|p| lower.contains(p))
        || trimmed.ends_with("key")
        || lower == "pwd"
        || lower.ends_with("_pwd")
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// End of a bare (unquoted) value starting at `from`.
fn bare_value_end(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < bytes.len()
        && !matches!(
            bytes[i],
            b' ' | b'\t' | b'\r' | b'\n' | b',' | b';' | b'&' | b'"' | b'\'' | b')' | b'}' | b'>' | b'`'
        )
    {
        i += 1;
    }
    i
}

/// End (exclusive, after the closing quote) of a quoted value whose opening
/// quote is at `from`; backslash escapes are skipped. An unterminated value
/// runs to the end of the line.
fn quoted_value_end(bytes: &[u8], from: usize) -> usize {
    let quote = bytes[from];
    let mut i = from + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' => return i,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// End of a bracketed value (a byte dump like `[104, 105]`) opening at `from`.
fn bracketed_value_end(bytes: &[u8], from: usize) -> usize {
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(from) {
        match b {
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    bytes.len()
}

/// Copies a text through, replacing chosen ranges with [`REDACTED`]; the
/// ranges come in increasing order, each starting at or after the end of the
/// previous one.
struct Rewrite<'a> {
    text: &'a str,
    out: String,
    /// Where the next copy starts: the end of the last replaced range.
    copied: usize,
}

impl<'a> Rewrite<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            out: String::with_capacity(text.len()),
            copied: 0,
        }
    }

    fn replace(&mut self, start: usize, end: usize) {
        self.out.push_str(&self.text[self.copied..start]);
        self.out.push_str(REDACTED);
        self.copied = end;
    }

    fn finish(mut self) -> String {
        self.out.push_str(&self.text[self.copied..]);
        self.out
    }
}

fn pem_blocks(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN") {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let end = after
            .find("-----END")
            .map(|e| {
                // The END line's closing dashes, after its label.
                let label = e + "-----END".len();
                after[label..]
                    .find("-----")
                    .map_or(after.len(), |d| label + d + "-----".len())
            })
            .unwrap_or(after.len());
        out.push_str(REDACTED);
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn url_userinfo(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut rw = Rewrite::new(text);
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'@' {
            i += 1;
            continue;
        }
        // Walk back over what could be userinfo: to a scheme's `//`, a space, a quote or a bracket.
        let mut start = i;
        while start > rw.copied && !is_userinfo_stop(bytes[start - 1]) {
            start -= 1;
        }
        let userinfo = &text[start..i];
        let after_scheme = start >= 2 && &bytes[start - 2..start] == b"//";
        // After `scheme://` any userinfo is a credential (a token can be the user name);
        // elsewhere only `user:password@` is, so `ops@example.com` stays.
        if !userinfo.is_empty() && userinfo != REDACTED && (after_scheme || userinfo.contains(':')) {
            rw.replace(start, i);
        }
        i += 1;
    }
    rw.finish()
}

fn is_userinfo_stop(b: u8) -> bool {
    matches!(
        b,
        b'/' | b' '
            | b'\t'
            | b'\r'
            | b'\n'
            | b'"'
            | b'\''
            | b'<'
            | b'>'
            | b'('
            | b'['
            | b'{'
            | b','
            | b'`'
            | b'='
    )
}

fn auth_schemes(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut rw = Rewrite::new(text);
    let mut i = 0;
    while i < bytes.len() {
        let word_start = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        let scheme_len = ["bearer", "basic"].iter().find_map(|s| {
            let end = i + s.len();
            (word_start
                && end < bytes.len()
                && bytes[i..end].eq_ignore_ascii_case(s.as_bytes())
                && matches!(bytes[end], b' ' | b'\t'))
            .then_some(s.len())
        });
        let Some(len) = scheme_len else {
            i += 1;
            continue;
        };
        let mut value = i + len;
        while value < bytes.len() && matches!(bytes[value], b' ' | b'\t') {
            value += 1;
        }
        let end = bare_value_end(bytes, value);
        // "bearer token", "basic auth": prose about a credential, not one.
        let word = text[value..end].trim_end_matches([':', '.']);
        let prose = ["token", "tokens", "auth", "authentication"]
            .iter()
            .any(|w| word.eq_ignore_ascii_case(w));
        if end > value && !prose && &text[value..end] != REDACTED {
            rw.replace(value, end);
        }
        i = end.max(i + 1);
    }
    rw.finish()
}

/// Rules 4 and 5: `key=value`, `key: value`, `"key": "value"`.
fn assignments(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut rw = Rewrite::new(text);
    let mut i = 0;
    while i < bytes.len() {
        let sep = bytes[i];
        if sep != b'=' && sep != b':' {
            i += 1;
            continue;
        }
        // The key, possibly quoted: `"token": ...`.
        let mut key_end = i;
        while key_end > rw.copied && matches!(bytes[key_end - 1], b' ' | b'\t') {
            key_end -= 1;
        }
        let key_quoted = key_end > rw.copied && matches!(bytes[key_end - 1], b'"' | b'\'');
        if key_quoted {
            key_end -= 1;
        }
        let mut key_start = key_end;
        while key_start > rw.copied && is_key_byte(bytes[key_start - 1]) {
            key_start -= 1;
        }
        let key = &text[key_start..key_end];
        let mut value = i + 1;
        // `::` and `://` are paths and URLs, not assignments.
        if key.is_empty() || (sep == b':' && matches!(bytes.get(value), Some(b':' | b'/'))) {
            i += 1;
            continue;
        }
        while value < bytes.len() && matches!(bytes[value], b' ' | b'\t') {
            value += 1;
        }
        let quoted = matches!(bytes.get(value), Some(b'"' | b'\''));
        let env_name = sep == b'='
            && !key_quoted
            && key
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && key.bytes().next().is_some_and(|b| !b.is_ascii_digit());
        let quoted_assignment =
            sep == b'=' && quoted && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !(is_secret_key(key) || env_name || quoted_assignment) {
            i += 1;
            continue;
        }
        let end = match bytes.get(value) {
            Some(b'"' | b'\'') => quoted_value_end(bytes, value),
            Some(b'[') => bracketed_value_end(bytes, value),
            _ => bare_value_end(bytes, value),
        };
        let shown = text[value..end].trim_matches(|c| c == '"' || c == '\'');
        if end > value && shown != REDACTED {
            rw.replace(value, end);
        }
        i = end.max(i + 1);
    }
    rw.finish()
}

fn jwts(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut rw = Rewrite::new(text);
    let mut i = 0;
    let is_b64url = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    while let Some(found) = text[i..].find("eyJ") {
        let start = i + found;
        let mut end = start;
        let mut dots = 0;
        while end < bytes.len() && (is_b64url(bytes[end]) || (bytes[end] == b'.' && dots < 2)) {
            dots += usize::from(bytes[end] == b'.');
            end += 1;
        }
        let standalone = start == 0 || !is_b64url(bytes[start - 1]);
        if standalone && dots >= 1 && end - start >= 16 {
            rw.replace(start, end);
        }
        i = end.max(start + 3);
    }
    rw.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_gone(input: &str, secrets: &[&str]) -> String {
        let out = redact(input);
        for s in secrets {
            assert!(!out.contains(s), "{s:?} survived in {out:?} (from {input:?})");
        }
        assert!(out.contains(REDACTED), "{out:?}");
        out
    }

    #[test]
    fn url_userinfo_is_removed_and_the_host_kept() {
        let out = assert_gone(
            "connect to proxy http://alice:pa55w0rd@proxy.corp:3128/ failed",
            &["alice", "pa55w0rd"],
        );
        assert_eq!(out, "connect to proxy http://[redacted]@proxy.corp:3128/ failed");
        // A token as the user name, and the Debug of an http::Uri.
        let out = assert_gone("Uri(https://tok3n@k8s.example:6443)", &["tok3n"]);
        assert!(out.contains("k8s.example:6443"), "{out}");
        // Without a scheme, user:password@ is still credentials.
        assert_gone("proxy alice:pa55w0rd@proxy.corp:3128 refused", &["pa55w0rd"]);
        // A password with an encoded @ and other punctuation.
        assert_gone("socks5://bob:p%40ss;w!rd@10.0.0.1:1080", &["p%40ss", "w!rd"]);
    }

    #[test]
    fn an_email_address_is_not_userinfo() {
        assert_eq!(
            redact("User \"ops@example.com\" cannot list pods"),
            "User \"ops@example.com\" cannot list pods"
        );
    }

    #[test]
    fn authorization_scheme_values_are_removed() {
        let out = assert_gone(
            "header Authorization: Bearer abc.DEF-123_~+/= was refused",
            &["abc.DEF-123"],
        );
        assert!(out.contains("was refused"), "{out}");
        assert_gone("Proxy-Authorization: Basic YWxpY2U6cGFzcw==", &["YWxpY2U6cGFzcw"]);
        assert_gone("bearer   s3cr3t", &["s3cr3t"]);
        // A word that only starts like a scheme is left alone, and so is prose about one.
        assert_eq!(redact("basically fine"), "basically fine");
        assert_eq!(
            redact("an invalid bearer token; no basic auth."),
            "an invalid bearer token; no basic auth."
        );
    }

    #[test]
    fn env_assignments_lose_their_values() {
        // How std::process::Command's Debug prints a plugin with its env (kube-rs puts it in AuthExecRun).
        let input = r#"auth exec command 'VAULT_TOKEN="hvs.S3CRET" KUBERNETES_EXEC_INFO="{\"kind\":\"ExecCredential\"}" "/opt/plugin" "--role" "deploy"' failed"#;
        let out = assert_gone(input, &["hvs.S3CRET", "ExecCredential"]);
        assert!(out.contains("VAULT_TOKEN="), "the name stays: {out}");
        assert_gone("MY_VAR=plainvalue next", &["plainvalue"]);
        assert_gone("lower=\"quoted value\"", &["quoted value"]);
    }

    #[test]
    fn credential_keys_lose_their_values_in_any_spelling() {
        for (input, secret) in [
            ("token=abc123", "abc123"),
            ("password: hunter2, user: bob", "hunter2"),
            (r#"{"client-key-data": "LS0tS0VZ", "name": "x"}"#, "LS0tS0VZ"),
            ("client_secret = xyz789", "xyz789"),
            ("access-token:'qwe rty'", "qwe rty"),
            ("x-api-key=k-111", "k-111"),
            ("stdout: [104, 118, 115, 46]", "104, 118"),
            ("stderr: \"leaked s3cr3t\"", "leaked s3cr3t"),
        ] {
            assert_gone(input, &[secret]);
        }
        let out = redact("password: hunter2, user: bob");
        assert!(out.contains("user: bob"), "non-credential keys stay: {out}");
    }

    #[test]
    fn pem_blocks_and_jwts_are_removed() {
        let input = "key -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY----- end";
        let out = assert_gone(input, &["MIIEvQIBADANBg"]);
        assert_eq!(out, "key [redacted] end");
        assert_gone(
            "got eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl here",
            &["eyJhbGciOiJSUzI1NiJ9", "c2lnbmF0dXJl"],
        );
    }

    #[test]
    fn ordinary_messages_pass_unchanged() {
        for text in [
            r#"pods "chi-0" is forbidden: User "system:serviceaccount:ns:sa" cannot create resource "pods/exec" in API group "" in the namespace "ns""#,
            "connection to the API server failed: client error (Connect): tcp connect error: Connection refused (os error 111)",
            "kubeconfig /home/u/.kube/config: context 'qa' (kubeConfig.context) not found; it defines contexts 'prod'",
            "the API server answered HTTP 503 (ServiceUnavailable)",
            "https://10.0.0.1:6443/api/v1/namespaces/ns/pods?labelSelector=app%3Dch",
            "exec ended without reporting an exit status",
            "Code: 57. DB::Exception: Table app.events already exists.",
            "",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn redaction_is_idempotent_and_keeps_utf8() {
        let input = "échec: http://ü:ß@hôte/ token=ünïcode Bearer ✓✓ VAR=€";
        let once = redact(input);
        assert_eq!(redact(&once), once);
        for s in ["ß", "ünïcode", "✓✓", "€"] {
            assert!(!once.contains(s), "{s} in {once}");
        }
        assert!(once.starts_with("échec: http://[redacted]@hôte/"), "{once}");
        // An unterminated quoted value ending in a multi-byte character.
        assert_eq!(redact("password=\"sécrét"), "password=[redacted]");
    }
}
