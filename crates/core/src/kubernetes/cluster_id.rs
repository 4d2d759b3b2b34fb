//! Credential-free identity of the Kubernetes cluster a schema was applied to.
//!
//! Namespace, selector and container are only strings: the same three can name
//! pods in staging and in production. Recording which cluster the statements
//! reached lets a re-pointed kubeconfig re-apply instead of silently matching
//! the old state. Only what identifies the endpoint goes in (never a token,
//! client certificate or key), so the value can sit in state and outputs.
//!
//! Encoding: lowercase sha256 hex of the five fields joined by `|`, in this
//! order: the current context's cluster name, the server URL, the CA data (as
//! written in the kubeconfig, base64), the CA file path, and `true`/`false` for
//! skip-TLS-verify. An absent field is the empty string. Golden vectors in the
//! tests pin the encoding.

use sha2::{Digest, Sha256};

/// The endpoint facts of the selected cluster, as read from a kubeconfig.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterEndpoint {
    /// Name of the selected cluster entry (the current context's, or the inline one).
    pub cluster_name: String,
    /// API server URL, after any `server` override.
    pub server: String,
    /// CA bundle exactly as written in the kubeconfig (base64); absent when none is inlined.
    pub ca_data: Option<String>,
    /// Path of the CA bundle file; absent when the kubeconfig names none.
    pub ca_file: Option<String>,
    /// Whether TLS verification of the API server is disabled.
    pub skip_tls_verify: bool,
}

/// The identity of `endpoint`: 64 lowercase hex characters, encoded as the
/// module header describes.
pub fn cluster_id(endpoint: &ClusterEndpoint) -> String {
    let text = format!(
        "{}|{}|{}|{}|{}",
        endpoint.cluster_name,
        endpoint.server,
        endpoint.ca_data.as_deref().unwrap_or(""),
        endpoint.ca_file.as_deref().unwrap_or(""),
        endpoint.skip_tls_verify,
    );
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The identity recorded when an injected executor replaces the Kubernetes
/// API. Only a `kubeConfig` prop says which cluster the executor stands for;
/// the ambient kubeconfig says nothing about it, so without the prop there is
/// none. `resolve` turns the prop into its endpoint (the transport's job:
/// kube-rs natively, JavaScript under WASM, hence a future); it is only
/// called when there is a prop.
pub async fn of_injected_executor<'a, E, F>(
    kube_config: Option<&'a crate::config::KubeConfigOptions>,
    resolve: impl FnOnce(&'a crate::config::KubeConfigOptions) -> F,
) -> Result<Option<String>, E>
where
    F: std::future::Future<Output = Result<Option<ClusterEndpoint>, E>>,
{
    match kube_config {
        Some(options) => Ok(resolve(options).await?.map(|endpoint| cluster_id(&endpoint))),
        None => Ok(None),
    }
}

/// Why nothing can be connected to when the configuration names no context:
/// `origin` (the kubeconfig's path, or `KUBECONFIG (...)`) sets no
/// current-context and no `kubeConfig.context` chose one.
pub fn no_context(origin: &str) -> String {
    format!(
        "{origin} sets no current-context, so it names no cluster to connect to; set current-context in it \
         or pass kubeConfig.context"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_vectors() {
        // Expected values computed independently:
        // printf '%s' 'sandbox|https://127.0.0.1:6443|Q0EK||false' | sha256sum
        let e = ClusterEndpoint {
            cluster_name: "sandbox".into(),
            server: "https://127.0.0.1:6443".into(),
            ca_data: Some("Q0EK".into()),
            ca_file: None,
            skip_tls_verify: false,
        };
        assert_eq!(
            cluster_id(&e),
            "542bf14a536b8032414615e17ae0e3ae68eba7ee299a9d9328b1359ac74a632e"
        );
        // printf '%s' 'prod|https://k8s.example:443||/etc/ca.pem|true' | sha256sum
        let e = ClusterEndpoint {
            cluster_name: "prod".into(),
            server: "https://k8s.example:443".into(),
            ca_data: None,
            ca_file: Some("/etc/ca.pem".into()),
            skip_tls_verify: true,
        };
        assert_eq!(
            cluster_id(&e),
            "017607752a8cf1b3355353cc93faae45050e8d9c9f8ac8d7d053f74ccdff55c7"
        );
    }

    #[test]
    fn every_field_changes_the_identity() {
        let base = ClusterEndpoint {
            cluster_name: "a".into(),
            server: "https://s".into(),
            ca_data: Some("x".into()),
            ca_file: Some("/f".into()),
            skip_tls_verify: false,
        };
        let variants = [
            ClusterEndpoint {
                cluster_name: "b".into(),
                ..base.clone()
            },
            ClusterEndpoint {
                server: "https://t".into(),
                ..base.clone()
            },
            ClusterEndpoint {
                ca_data: Some("y".into()),
                ..base.clone()
            },
            ClusterEndpoint {
                ca_file: None,
                ..base.clone()
            },
            ClusterEndpoint {
                skip_tls_verify: true,
                ..base.clone()
            },
        ];
        for v in variants {
            assert_ne!(cluster_id(&v), cluster_id(&base), "{v:?}");
        }
    }
}
