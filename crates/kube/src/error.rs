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
//!
//! It is also where credentials are kept out of messages. Some kube-rs errors
//! print secrets: a failed exec credential plugin (`AuthExecRun`) prints its
//! `Command` with the environment from the kubeconfig's `exec.env` and the
//! plugin's stdout and stderr; the proxy errors print the proxy URL with its
//! `user:password@`. Those are described here instead of printed, also when
//! they appear as the source of another error ([`chain`] walks sources), and
//! every message finally goes through the core's
//! [`kubernetes::redact::redact`](clickhouse_schema_core::kubernetes::redact::redact)
//! as defense in depth.

use std::error::Error as StdError;

use clickhouse_schema_core::kubernetes::redact::redact;
use clickhouse_schema_core::transport::{TransportError, TransportErrorKind};
use kube::client::{AuthError, UpgradeConnectionError};

/// Kind for an HTTP status the API server (or a proxy in front of it)
/// answered with: the core's rule, shared with the JavaScript transport.
pub fn kind_for_http_status(code: u16) -> TransportErrorKind {
    TransportErrorKind::for_http_status(code)
}

/// Maps any kube-rs error; the message holds no credential (see the module docs).
pub fn from_kube(err: &kube::Error) -> TransportError {
    let mut e = map(err);
    e.message = redact(&e.message);
    e
}

fn map(err: &kube::Error) -> TransportError {
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
        // kube-rs's token refresh (an exec plugin re-run, a token file re-read)
        // fails inside the tower stack, so its AuthError arrives boxed here.
        kube::Error::Service(e) if e.downcast_ref::<AuthError>().is_some() => {
            let auth = e.downcast_ref::<AuthError>().expect("checked by the guard");
            TransportError::new(Refused, auth_message(auth))
        }
        kube::Error::Service(e) => TransportError::new(
            Transient,
            format!("connection to the API server failed: {}", chain(e.as_ref())),
        ),
        kube::Error::Auth(e) => TransportError::new(Refused, auth_message(e)),
        kube::Error::ProxyProtocolUnsupported { .. } | kube::Error::ProxyProtocolDisabled { .. } => {
            TransportError::new(Refused, describe(err))
        }
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

/// Auth failures, without ever printing what an exec plugin was given or
/// wrote: its environment (`exec.env`) and arguments are where a kubeconfig
/// passes secrets to it, and its stdout is where a token would be.
pub(crate) fn auth_message(e: &AuthError) -> String {
    format!("authenticating to the API server failed: {}", auth_detail(e))
}

fn auth_detail(e: &AuthError) -> String {
    match e {
        // kube-rs's text is the `Command`'s Debug (env included) and the plugin's whole output.
        AuthError::AuthExecRun { out, .. } => format!(
            "the credential plugin (the kubeconfig user's exec, or an auth-provider's cmd-path) failed \
             with {}; its output is not shown because it may hold credentials",
            out.status
        ),
        AuthError::AuthExecParse(_) | AuthError::ParseTokenKey(_) => {
            "the credential plugin's output could not be parsed (not shown: it may hold credentials)"
                .to_owned()
        }
        AuthError::AuthExecStart(io) => format!("the credential plugin could not be started: {io}"),
        AuthError::ReadTokenFile(io, path) => {
            format!("the token file {} could not be read: {io}", path.display())
        }
        AuthError::MissingCommand => "the credential plugin has no command".to_owned(),
        AuthError::InvalidBearerToken(_) => "the bearer token is not a valid HTTP header value".to_owned(),
        AuthError::InvalidBasicAuth(_) => {
            "the user name or password is not a valid HTTP header value".to_owned()
        }
        // The remaining variants name a problem without carrying credential
        // text; `redact` still runs over the result.
        other => other.to_string(),
    }
}

/// A kube-rs error's own text, except for the variants that print secrets.
fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Auth(e) => auth_message(e),
        // kube-rs prints the proxy URL, `user:password@` included.
        kube::Error::ProxyProtocolUnsupported { proxy_url } => format!(
            "the proxy's scheme '{}' is not supported; use http://, https:// or socks5://",
            proxy_url.scheme_str().unwrap_or("")
        ),
        kube::Error::ProxyProtocolDisabled {
            proxy_url,
            protocol_feature,
        } => format!(
            "the proxy's scheme '{}' needs the kube-rs feature {protocol_feature}, which this build lacks",
            proxy_url.scheme_str().unwrap_or("")
        ),
        other => other.to_string(),
    }
}

/// `err` and its sources joined by ": ", skipping a source whose text the
/// previous level already printed (hyper and tower often repeat each other),
/// with credentials kept out: a level that is a kube-rs auth or proxy error is
/// described instead of printed (and ends the walk, its sources are its own
/// details), and the result is redacted.
pub(crate) fn chain(err: &(dyn StdError + 'static)) -> String {
    let (mut out, mut more) = level(err);
    let mut source = err.source();
    while more && let Some(s) = source {
        let (text, next) = level(s);
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        more = next;
        source = s.source();
    }
    redact(&out)
}

/// One level's text, and whether its sources may be printed.
fn level(err: &(dyn StdError + 'static)) -> (String, bool) {
    if let Some(e) = err.downcast_ref::<kube::Error>()
        && matches!(
            e,
            kube::Error::Auth(_)
                | kube::Error::ProxyProtocolUnsupported { .. }
                | kube::Error::ProxyProtocolDisabled { .. }
        )
    {
        return (describe(e), false);
    }
    if let Some(e) = err.downcast_ref::<AuthError>() {
        return (auth_detail(e), false);
    }
    (err.to_string(), true)
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

    /// What kube-rs returns for a plugin that exits 1: the `Command`'s Debug
    /// (env first) and the plugin's raw output.
    fn failed_plugin() -> AuthError {
        use std::os::unix::process::ExitStatusExt;
        AuthError::AuthExecRun {
            cmd: r#"VAULT_TOKEN="hvs.PLUGIN-ENV" KUBERNETES_EXEC_INFO="{}" "/opt/get-token" "--secret=ARG-SECRET""#
                .to_owned(),
            out: Box::new(std::process::Output {
                status: std::process::ExitStatus::from_raw(1 << 8),
                stdout: b"token: STDOUT-SECRET".to_vec(),
                stderr: b"STDERR-SECRET".to_vec(),
            }),
        }
    }

    const PLUGIN_SECRETS: [&str; 4] = ["hvs.PLUGIN-ENV", "ARG-SECRET", "STDOUT-SECRET", "STDERR-SECRET"];

    fn assert_no_plugin_secret(text: &str) {
        for secret in PLUGIN_SECRETS {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        // stdout as kube-rs's Debug prints it: bytes in decimal.
        assert!(!text.contains("116, 111, 107"), "{text}");
    }

    #[test]
    fn a_failed_credential_plugin_says_so_without_its_env_args_or_output() {
        let e = from_kube(&kube::Error::Auth(failed_plugin()));
        assert_eq!(e.kind, TransportErrorKind::Refused);
        assert_no_plugin_secret(&e.message);
        assert!(e.message.contains("credential plugin"), "{}", e.message);
        assert!(e.message.contains("exit status: 1"), "{}", e.message);
        // As kube-rs's token refresh returns it: boxed in the tower stack.
        let e = from_kube(&kube::Error::Service(Box::new(failed_plugin())));
        assert_eq!(e.kind, TransportErrorKind::Refused);
        assert!(
            e.message.starts_with("authenticating to the API server failed"),
            "{}",
            e.message
        );
        assert_no_plugin_secret(&e.message);
        // Also as the source of another error, which `chain` walks.
        let wrapped = kube::Error::Service(Box::new(kube::Error::Auth(failed_plugin())));
        let e = from_kube(&wrapped);
        assert_no_plugin_secret(&e.message);
        assert!(e.message.contains("exit status: 1"), "{}", e.message);
        assert_no_plugin_secret(&chain(&failed_plugin()));
    }

    #[test]
    fn proxy_errors_never_print_the_proxy_credentials() {
        let proxy_url: http::Uri = "ftp://alice:PROXY-PASS@proxy.corp:21".parse().expect("uri");
        for err in [
            kube::Error::ProxyProtocolUnsupported {
                proxy_url: Box::new(proxy_url.clone()),
            },
            kube::Error::ProxyProtocolDisabled {
                proxy_url: Box::new(proxy_url.clone()),
                protocol_feature: "kube/socks5",
            },
        ] {
            let e = from_kube(&err);
            assert!(!e.message.contains("PROXY-PASS"), "{}", e.message);
            assert!(!e.message.contains("alice"), "{}", e.message);
            assert!(e.message.contains("'ftp'"), "{}", e.message);
            assert!(!chain(&err).contains("PROXY-PASS"), "{}", chain(&err));
        }
    }

    #[test]
    fn api_server_messages_are_redacted_too() {
        let e = from_kube(&api(
            401,
            "Unauthorized: token=eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln rejected",
            "Unauthorized",
        ));
        assert!(!e.message.contains("eyJhbGciOiJSUzI1NiJ9"), "{}", e.message);
        assert!(e.message.contains("rejected"), "{}", e.message);
        let io = std::io::Error::other("proxy http://bob:SOCKET-PASS@10.0.0.9:3128 unreachable");
        let e = from_kube(&kube::Error::Service(Box::new(io)));
        assert!(!e.message.contains("SOCKET-PASS"), "{}", e.message);
        assert!(e.message.contains("10.0.0.9:3128 unreachable"), "{}", e.message);
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
