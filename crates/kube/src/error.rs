//! The one mapping from kube-rs failures to [`TransportError`].
//!
//! The kind decides whether the core retries, so it follows what a retry can
//! change: an API server that answered "no" (RBAC, unknown pod or container,
//! bad request) answers "no" again, while a dropped socket, a 5xx or a 429 may
//! well succeed on the next attempt.
//!
//! Messages are built from the API's own `Status.message` or from the socket
//! layer's error chain. Neither ever carries the request body, and exec stdin
//! is never part of a request kube-rs could echo, so no statement can leak
//! through here.

use std::error::Error as StdError;

use clickhouse_schema_core::transport::{TransportError, TransportErrorKind};
use kube::client::{AuthError, UpgradeConnectionError};

/// Kind for an HTTP status the API server (or a proxy in front of it) answered with.
pub fn kind_for_http_status(code: u16) -> TransportErrorKind {
    match code {
        // 408 and 429 say "not now"; 5xx says the server side is unwell.
        408 | 429 => TransportErrorKind::Transient,
        400..=499 => TransportErrorKind::Refused,
        // 0: kube-rs could not tell; a garbled answer is worth another try.
        _ => TransportErrorKind::Transient,
    }
}

/// Maps any kube-rs error.
pub fn from_kube(err: &kube::Error) -> TransportError {
    use TransportErrorKind::{Refused, Transient};
    match err {
        kube::Error::Api(status) => {
            let code = status.code;
            let message = if !status.message.is_empty() {
                status.message.clone()
            } else if !status.reason.is_empty() {
                format!("the API server answered HTTP {code} ({})", status.reason)
            } else {
                format!("the API server answered HTTP {code}")
            };
            let e = TransportError::new(kind_for_http_status(code), message);
            if code == 0 { e } else { e.with_http_status(code) }
        }
        kube::Error::UpgradeConnection(up) => match up {
            UpgradeConnectionError::ProtocolSwitch(status) => {
                let code = status.as_u16();
                TransportError::new(
                    kind_for_http_status(code),
                    format!("the API server refused the exec WebSocket upgrade with HTTP {status}"),
                )
                .with_http_status(code)
            }
            UpgradeConnectionError::GetPendingUpgrade(e) => TransportError::new(
                Transient,
                format!("the exec WebSocket upgrade failed: {}", chain(e)),
            ),
            // The server (or a proxy) does not speak the channel protocols; another try gets the same answer.
            other => TransportError::new(
                Refused,
                format!("the API server's exec WebSocket handshake is not usable: {other}"),
            ),
        },
        kube::Error::HyperError(e) => TransportError::new(
            Transient,
            format!("connection to the API server failed: {}", chain(e)),
        ),
        kube::Error::Service(e) => TransportError::new(
            Transient,
            format!("connection to the API server failed: {}", chain(e.as_ref())),
        ),
        kube::Error::Auth(e) => TransportError::new(Refused, auth_message(e)),
        kube::Error::SerdeError(_) | kube::Error::FromUtf8(_) | kube::Error::ReadEvents(_) => {
            TransportError::new(
                Transient,
                format!("the API server's answer could not be read: {}", chain(err)),
            )
        }
        // Client-side configuration problems (TLS material, proxy, request building): permanent.
        _ => TransportError::new(Refused, chain(err)),
    }
}

/// Auth failures, without ever printing what an exec plugin wrote: its
/// stdout is where a token would be.
fn auth_message(e: &AuthError) -> String {
    let detail = match e {
        AuthError::AuthExecRun { cmd, .. } => format!("the auth exec plugin '{cmd}' failed"),
        AuthError::AuthExecParse(_) => "the auth exec plugin's output could not be parsed".to_owned(),
        AuthError::AuthExecStart(io) => format!("the auth exec plugin could not be started: {io}"),
        AuthError::ReadTokenFile(io, path) => {
            format!("the token file {} could not be read: {io}", path.display())
        }
        AuthError::MissingCommand => "the auth exec plugin has no command".to_owned(),
        // The remaining variants name a problem without carrying credential text.
        other => other.to_string(),
    };
    format!("authenticating to the API server failed: {detail}")
}

/// `err` and its sources joined by ": ", skipping a source whose text the
/// previous level already printed (hyper and tower often repeat each other).
pub(crate) fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, message: &str, reason: &str) -> kube::Error {
        let mut s = Status::failure(message, reason);
        s.code = code;
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn api_errors_map_by_http_status() {
        let forbidden =
            r#"pods "x" is forbidden: User "u" cannot create resource "pods/exec" in API group """#;
        for (code, kind) in [
            (400, TransportErrorKind::Refused),
            (401, TransportErrorKind::Refused),
            (403, TransportErrorKind::Refused),
            (404, TransportErrorKind::Refused),
            (422, TransportErrorKind::Refused),
            (408, TransportErrorKind::Transient),
            (429, TransportErrorKind::Transient),
            (500, TransportErrorKind::Transient),
            (502, TransportErrorKind::Transient),
            (503, TransportErrorKind::Transient),
        ] {
            let e = from_kube(&api(code, forbidden, "Forbidden"));
            assert_eq!(e.kind, kind, "HTTP {code}");
            assert_eq!(e.http_status, Some(code));
            assert_eq!(e.message, forbidden, "the API's own words");
        }
    }

    #[test]
    fn api_error_without_message_still_says_something() {
        let e = from_kube(&api(503, "", "ServiceUnavailable"));
        assert_eq!(e.message, "the API server answered HTTP 503 (ServiceUnavailable)");
        let e = from_kube(&api(0, "", ""));
        assert_eq!(e.kind, TransportErrorKind::Transient);
        assert_eq!(e.http_status, None);
    }

    #[test]
    fn websocket_handshake_status_maps_like_http() {
        for (code, kind) in [
            (400, TransportErrorKind::Refused),
            (403, TransportErrorKind::Refused),
            (404, TransportErrorKind::Refused),
            (500, TransportErrorKind::Transient),
            (503, TransportErrorKind::Transient),
        ] {
            let status = http_status(code);
            let e = from_kube(&kube::Error::UpgradeConnection(
                UpgradeConnectionError::ProtocolSwitch(status),
            ));
            assert_eq!(e.kind, kind, "HTTP {code}");
            assert_eq!(e.http_status, Some(code));
            assert!(e.message.contains(&code.to_string()), "{}", e.message);
        }
        let e = from_kube(&kube::Error::UpgradeConnection(
            UpgradeConnectionError::SecWebSocketProtocolMismatch,
        ));
        assert_eq!(e.kind, TransportErrorKind::Refused);
    }

    fn http_status(code: u16) -> http::StatusCode {
        http::StatusCode::from_u16(code).expect("a valid status code")
    }

    #[test]
    fn socket_errors_are_transient_and_keep_their_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = from_kube(&kube::Error::Service(Box::new(io)));
        assert_eq!(e.kind, TransportErrorKind::Transient);
        assert!(e.message.contains("connection refused"), "{}", e.message);
        assert_eq!(e.http_status, None);
    }

    #[test]
    fn garbled_answers_are_transient() {
        let serde = serde_json_error();
        let e = from_kube(&kube::Error::SerdeError(serde));
        assert_eq!(e.kind, TransportErrorKind::Transient);
    }

    fn serde_json_error() -> serde_json::Error {
        serde_json::from_str::<u8>("not json").expect_err("invalid JSON")
    }

    #[test]
    fn chain_skips_repeated_sources() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "client error (Connect): {}", self.0)
            }
        }
        impl StdError for Outer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("tcp connect error"));
        assert_eq!(chain(&e), "client error (Connect): tcp connect error");
    }
}
