//! A cluster connection the caller resolves at call time, and which source of
//! cluster a call uses.
//!
//! Alchemy describes a cluster as plain data (`Kubernetes.Connection`: an
//! auth kind plus locators), and only the cluster adapter registered for that
//! kind can turn it into an endpoint and a credential: an EKS adapter
//! describes the cluster and presigns a token that lives fifteen minutes, the
//! kubeconfig adapter runs the file's exec plugin. Those adapters live in the
//! caller's JavaScript runtime, so the caller resolves the connection for each
//! call and hands over a [`ResolvedConnection`]. The credential in it is used
//! for that call only: it never enters props, state, the fingerprint, an
//! event or a message. The recorded cluster identity takes from it only what
//! locates the cluster (the server address, the CA and the TLS switch), so a
//! fresh token does not make an unchanged schema look re-pointed.
//!
//! The rules for combining the two sources live here, in one place: an
//! Alchemy connection in `kubeConfig` needs a resolved connection, and a
//! resolved connection cannot be combined with kubeconfig options (one of the
//! two would be silently ignored).

use std::fmt;

use crate::config::{KubeConfig, KubeConfigOptions, ResolvedConfig};
use crate::error::{ClickHouseSchemaError, ConfigIssue};
use crate::kubernetes::cluster_id::ClusterEndpoint;

/// What a cluster adapter yields for one call: where the API server is and
/// how to authenticate. `Debug` never prints the credential.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolvedConnection {
    /// API server URL.
    pub endpoint: String,
    /// Base64-encoded PEM CA bundle of the endpoint.
    pub certificate_authority_data: Option<String>,
    /// Skip TLS verification of the endpoint.
    pub insecure_skip_tls_verify: bool,
    /// Bearer token sent with every request.
    pub token: Option<String>,
    /// Client certificate for mutual TLS.
    pub client_certificate: Option<ClientCertificate>,
}

/// A PEM client certificate and its key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// PEM certificate.
    pub certificate: String,
    /// PEM private key.
    pub key: String,
}

impl fmt::Debug for ResolvedConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedConnection")
            .field("endpoint", &self.endpoint)
            .field(
                "certificate_authority_data",
                &self.certificate_authority_data.is_some(),
            )
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field(
                "client_certificate",
                &self.client_certificate.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Where a resolved connection comes from, in messages.
pub const RESOLVED_ORIGIN: &str = "the Alchemy Kubernetes connection";

impl ResolvedConnection {
    /// The identity facts: server, CA and TLS switch. No cluster name (the
    /// adapter gives none) and no credential.
    pub fn cluster_endpoint(&self) -> ClusterEndpoint {
        ClusterEndpoint {
            cluster_name: String::new(),
            server: self.endpoint.clone(),
            ca_data: self.certificate_authority_data.clone(),
            ca_file: None,
            skip_tls_verify: self.insecure_skip_tls_verify,
        }
    }

    /// The kinds of credential it carries, as the plain-HTTP refusal names them.
    pub fn credential_kinds(&self) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        if self.token.is_some() {
            kinds.push("a bearer token");
        }
        if self.client_certificate.is_some() {
            kinds.push("a client certificate");
        }
        kinds
    }

    /// `text` with every secret it holds replaced, for messages from code
    /// that saw the credential (a client library's error).
    pub fn scrub(&self, text: &str) -> String {
        self.secrets()
            .into_iter()
            .fold(text.to_owned(), |text, secret| text.replace(secret, "<redacted>"))
    }

    /// Every secret it holds, for scrubbing text that might echo one back.
    pub fn secrets(&self) -> Vec<&str> {
        let mut secrets: Vec<&str> = Vec::new();
        secrets.extend(self.token.as_deref());
        if let Some(cert) = &self.client_certificate {
            secrets.push(&cert.key);
        }
        secrets.retain(|s| !s.is_empty());
        secrets
    }
}

/// Which cluster a call reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterSource<'a> {
    /// The kubeconfig options of the prop (`None`: the ambient configuration).
    KubeConfig(Option<&'a KubeConfigOptions>),
    /// The connection the caller resolved for this call.
    Resolved,
}

/// Decides the source of a call's cluster from the `kubeConfig` prop and
/// whether the caller passed a resolved connection (`options.connection`).
pub fn source<'a>(
    config: &'a ResolvedConfig,
    resource_id: &str,
    resolved: bool,
) -> Result<ClusterSource<'a>, ClickHouseSchemaError> {
    let refuse = |reason: String| {
        Err(ClickHouseSchemaError::invalid_config(
            resource_id,
            vec![ConfigIssue {
                path: "kubeConfig".to_owned(),
                reason,
            }],
        ))
    };
    match (&config.kube_config, resolved) {
        (Some(KubeConfig::Alchemy(_)), true) | (None, true) => Ok(ClusterSource::Resolved),
        (Some(prop @ KubeConfig::Alchemy(_)), false) => {
            let kind = prop.alchemy_auth_kind().unwrap_or("?");
            refuse(format!(
                "is an Alchemy Kubernetes connection (auth kind '{kind}'), which only the cluster adapter \
                 registered for '{kind}' can resolve: deploy it through clickHouseSchemaProvider in a stack whose \
                 providers register that adapter, or resolve it yourself and pass options.connection"
            ))
        }
        (Some(KubeConfig::Options(_)), true) => refuse(
            "names a kubeconfig while options.connection also names a cluster: pass one of the two (the other \
             would be silently ignored)"
                .to_owned(),
        ),
        (Some(KubeConfig::Options(options)), false) => Ok(ClusterSource::KubeConfig(Some(options))),
        (None, false) => Ok(ClusterSource::KubeConfig(None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::cluster_id::cluster_id;
    use serde_json::json;

    fn config(kube_config: serde_json::Value) -> ResolvedConfig {
        let mut props = json!({
            "target": { "namespace": "ns", "podSelector": { "app": "ch" } },
            "statements": ["CREATE DATABASE a"],
        });
        if !kube_config.is_null() {
            props["kubeConfig"] = kube_config;
        }
        crate::validate("r", &props).expect("valid props")
    }

    fn resolved(token: &str) -> ResolvedConnection {
        ResolvedConnection {
            endpoint: "https://10.0.0.1:6443".to_owned(),
            certificate_authority_data: Some("Q0E=".to_owned()),
            insecure_skip_tls_verify: false,
            token: Some(token.to_owned()),
            client_certificate: None,
        }
    }

    #[test]
    fn an_alchemy_connection_needs_the_resolved_one() {
        let c = config(json!({ "auth": { "kind": "aws-eks", "clusterName": "prod" } }));
        assert_eq!(source(&c, "r", true).unwrap(), ClusterSource::Resolved);
        let err = source(&c, "r", false).unwrap_err();
        assert_eq!(err.issues[0].path, "kubeConfig");
        assert!(err.message.contains("auth kind 'aws-eks'"), "{}", err.message);
        assert!(err.message.contains("options.connection"), "{}", err.message);
    }

    #[test]
    fn a_cluster_resource_carrying_a_connection_reads_the_same() {
        let c = config(
            json!({ "name": "prod", "arn": "x", "connection": { "auth": { "kind": "exec", "command": "aws" } } }),
        );
        assert_eq!(c.kube_config.as_ref().unwrap().alchemy_auth_kind(), Some("exec"));
        assert_eq!(source(&c, "r", true).unwrap(), ClusterSource::Resolved);
    }

    #[test]
    fn kubeconfig_options_and_a_resolved_connection_are_refused_together() {
        let c = config(json!({ "context": "prod" }));
        let err = source(&c, "r", true).unwrap_err();
        assert!(err.message.contains("pass one of the two"), "{}", err.message);
        assert!(
            matches!(source(&c, "r", false).unwrap(), ClusterSource::KubeConfig(Some(o)) if o.context.as_deref() == Some("prod"))
        );
    }

    #[test]
    fn without_a_prop_the_resolved_connection_or_the_ambient_configuration() {
        let c = config(serde_json::Value::Null);
        assert_eq!(source(&c, "r", true).unwrap(), ClusterSource::Resolved);
        assert_eq!(source(&c, "r", false).unwrap(), ClusterSource::KubeConfig(None));
    }

    #[test]
    fn the_identity_ignores_the_credential() {
        let a = resolved("token-one");
        let b = resolved("token-two");
        assert_eq!(
            cluster_id(&a.cluster_endpoint()),
            cluster_id(&b.cluster_endpoint())
        );
        // Pinned: the encoding of the cluster identity with an empty cluster name.
        assert_eq!(
            a.cluster_endpoint(),
            ClusterEndpoint {
                cluster_name: String::new(),
                server: "https://10.0.0.1:6443".to_owned(),
                ca_data: Some("Q0E=".to_owned()),
                ca_file: None,
                skip_tls_verify: false,
            }
        );
        let moved = ResolvedConnection {
            endpoint: "https://10.0.0.2:6443".to_owned(),
            ..a.clone()
        };
        assert_ne!(
            cluster_id(&a.cluster_endpoint()),
            cluster_id(&moved.cluster_endpoint())
        );
    }

    #[test]
    fn debug_hides_the_credential() {
        let mut c = resolved("s3cr3t-token");
        c.client_certificate = Some(ClientCertificate {
            certificate: "CERT".to_owned(),
            key: "PRIVATE-KEY".to_owned(),
        });
        let text = format!("{c:?}");
        assert!(
            !text.contains("s3cr3t-token") && !text.contains("PRIVATE-KEY"),
            "{text}"
        );
        assert_eq!(c.secrets(), vec!["s3cr3t-token", "PRIVATE-KEY"]);
        assert_eq!(
            c.scrub("got s3cr3t-token and PRIVATE-KEY"),
            "got <redacted> and <redacted>"
        );
        assert_eq!(
            c.credential_kinds(),
            vec!["a bearer token", "a client certificate"]
        );
    }
}
