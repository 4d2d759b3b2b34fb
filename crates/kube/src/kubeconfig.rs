//! Which cluster to talk to, and with what: the `kubeConfig` prop, else the
//! ambient kubeconfig, else the in-cluster service account.
//!
//! # Resolution
//!
//! 1. `kubeConfig.cluster` + `kubeConfig.user` (both, as TypeKro requires):
//!    a one-context kubeconfig built from them alone. The user can only carry
//!    `certFile`/`keyFile` (inline credentials are refused by validation), so
//!    without those the requests are anonymous. `context` names that one
//!    context (default `clickhouse-schema`); `server` and `skipTLSVerify`
//!    override the cluster's. Giving only one of the two, or combining them
//!    with `kubeconfigPath` or `loadFromDefault: true`, is an error: each would
//!    otherwise silently ignore part of what was asked for.
//! 2. `kubeConfig.kubeconfigPath`: that file (a relative `certificate-authority`,
//!    client cert/key or token file inside it is relative to the file's directory).
//! 3. `loadFromDefault: false` with neither of the above is an error (nothing to load).
//! 4. Otherwise the ambient configuration: the files in `KUBECONFIG` (merged,
//!    first wins), else `~/.kube/config`, else the in-cluster service account
//!    (`KUBERNETES_SERVICE_HOST`/`_PORT`, token and CA under
//!    `/var/run/secrets/kubernetes.io/serviceaccount/`).
//!
//! On a kubeconfig, `context` selects a context instead of `current-context`
//! (it must exist), and `server`/`skipTLSVerify` override the *selected*
//! context's cluster. (TypeKro applies them to the cluster of the file's
//! current-context before switching context, which points a context at
//! another context's server; that is not reproduced.) In-cluster, `server` and
//! `skipTLSVerify` apply and `context` is an error.
//!
//! # Cluster identity
//!
//! The [`ClusterEndpoint`] is read from the selected context's cluster after
//! the overrides: its name, `server`, `certificate-authority-data` exactly as
//! written (base64), the `certificate-authority` path (made absolute against
//! the kubeconfig's directory, as kube-rs and `@kubernetes/client-node` both do
//! when loading a file) and `insecure-skip-tls-verify`. It is `None` when
//! nothing names a context. In-cluster it is the cluster `inCluster`, server
//! `https://<KUBERNETES_SERVICE_HOST>:<KUBERNETES_SERVICE_PORT>` and CA file
//! `/var/run/secrets/kubernetes.io/serviceaccount/ca.crt`: what
//! `@kubernetes/client-node`'s `loadFromCluster` records, so both
//! implementations derive the same id. No user field ever contributes.
//!
//! # Transport safety
//!
//! - Credentials are never sent over plain HTTP: when the resolved server is
//!   `http://` and the selected user has any credential (token, token file,
//!   exec plugin, auth provider, user name and password, client certificate or
//!   key), [`connect`] refuses before anything runs or is sent, naming the
//!   option or cluster that set the server. An `http://` server with an
//!   anonymous user is allowed.
//! - The proxy is chosen by [`clickhouse_schema_core::kubernetes::proxy`] (kubeconfig `proxy-url`, else
//!   `HTTPS_PROXY`/`HTTP_PROXY` by the server's scheme, minus `NO_PROXY`).
//!
//! # Errors
//!
//! Every failure is a [`ConnectError`] (into [`ClickHouseSchemaError`] of kind
//! [`ErrorKind::KubernetesApi`]), naming the file, context or option at fault.
//! None prints file contents: a YAML error reports its line and column only,
//! since the parser's snippet could be a token line. No message carries a
//! credential: a failing exec plugin's environment and output, a proxy's or
//! server's `user:password@` and key material are described, not printed, and
//! every message is passed through the core's `kubernetes::redact::redact`.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use clickhouse_schema_core::config::{KubeClusterOptions, KubeConfigOptions, KubeUserOptions};
use clickhouse_schema_core::kubernetes::cluster_id::{ClusterEndpoint, cluster_id};
use clickhouse_schema_core::kubernetes::connection::{RESOLVED_ORIGIN, ResolvedConnection};
use clickhouse_schema_core::kubernetes::redact::redact;
use clickhouse_schema_core::{ClickHouseSchemaError, ErrorKind};
use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions as KubeRsOptions, Kubeconfig, KubeconfigError,
    NamedAuthInfo, NamedCluster, NamedContext,
};
use secrecy::SecretString;

use crate::error::chain;
use clickhouse_schema_core::kubernetes::proxy;

/// Context name of the kubeconfig synthesized from an inline cluster and user.
/// The context name given to the kubeconfig assembled from inline `cluster`/`user` props.
pub const INLINE_CONTEXT: &str = "clickhouse-schema";
/// What `@kubernetes/client-node` calls the in-cluster cluster.
pub const IN_CLUSTER_NAME: &str = "inCluster";
/// Where a pod's service account CA is mounted (the in-cluster configuration).
pub const IN_CLUSTER_CA_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// A client for the resolved cluster and the endpoint that identifies it.
#[derive(Clone)]
pub struct Connection {
    /// The client, with kube-rs's own retries off (the core retries).
    pub client: kube::Client,
    /// `None` when no context was named (see the module docs).
    pub endpoint: Option<ClusterEndpoint>,
}

impl Connection {
    /// The credential-free cluster identity recorded as `clusterId`.
    pub fn cluster_id(&self) -> Option<String> {
        self.endpoint.as_ref().map(cluster_id)
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Resolves the configuration (see the module docs) and builds a client.
/// The client does not retry on its own; every failure reaches the caller.
pub async fn connect(options: Option<&KubeConfigOptions>) -> Result<Connection, ConnectError> {
    build(resolve(options)?).await
}

/// Builds a client for a connection the caller resolved for this call (an
/// Alchemy cluster adapter's endpoint, CA and short-lived token), through an
/// in-memory kubeconfig: nothing reaches the disk, and the rules of a
/// kubeconfig hold (no credential over plain HTTP, the proxy from the
/// environment, no retry of kube-rs's own). The identity is the server, the
/// CA and the TLS switch (see [`ResolvedConnection::cluster_endpoint`]). Any
/// message is scrubbed of the connection's secrets.
pub async fn connect_resolved(resolved: &ResolvedConnection) -> Result<Connection, ConnectError> {
    const NAME: &str = "alchemy-connection";
    let client_certificate = resolved.client_certificate.as_ref();
    let kubeconfig = one_context(
        NAME,
        Cluster {
            server: Some(resolved.endpoint.clone()),
            insecure_skip_tls_verify: Some(resolved.insecure_skip_tls_verify),
            certificate_authority_data: resolved.certificate_authority_data.clone(),
            ..Default::default()
        },
        NAME,
        AuthInfo {
            token: resolved.token.clone().map(SecretString::from),
            client_certificate_data: client_certificate.map(|c| BASE64.encode(&c.certificate)),
            client_key_data: client_certificate.map(|c| SecretString::from(BASE64.encode(&c.key))),
            ..Default::default()
        },
        NAME,
    );
    let built = build(Resolved {
        source: Source::Kubeconfig {
            kubeconfig: Box::new(kubeconfig),
            origin: RESOLVED_ORIGIN.to_owned(),
        },
        context: Some(NAME.to_owned()),
        endpoint: Some(resolved.cluster_endpoint()),
        server_source: format!("the endpoint of {RESOLVED_ORIGIN}"),
        proxy_url: None,
    })
    .await;
    built.map_err(|e| ConnectError {
        message: resolved.scrub(&e.message),
    })
}

async fn build(resolved: Resolved) -> Result<Connection, ConnectError> {
    let config = match resolved.source {
        Source::Kubeconfig { kubeconfig, origin } => {
            let Some(context) = resolved.context else {
                return Err(error(clickhouse_schema_core::kubernetes::cluster_id::no_context(
                    &origin,
                )));
            };
            let opts = KubeRsOptions {
                context: Some(context),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(*kubeconfig, &opts)
                .await
                .map_err(|e| error(format!("{origin}: {}", kubeconfig_error(&e))))?
        }
        Source::InCluster {
            server,
            skip_tls_verify,
        } => in_cluster_config(server.as_deref(), skip_tls_verify)?,
    };
    let mut config = config;
    refuse_credentials_over_http(&config, &resolved.server_source)?;
    // Replaces kube-rs's own choice, which ignores NO_PROXY for the server (see `proxy`).
    config.proxy_url = proxy::select(&config.cluster_url, resolved.proxy_url.as_deref(), |name| {
        std::env::var(name).ok()
    })
    .map_err(error)?
    .map(|(url, _)| url);
    // The core's retry (retry.maxAttempts / backoffMs) is the one retry policy:
    // kube-rs's own would silently repeat 429/503/504 underneath it.
    config.default_retry = false;
    let client = kube::Client::try_from(config)
        .map_err(|e| error(format!("cannot build a Kubernetes client: {}", chain(&e))))?;
    Ok(Connection {
        client,
        endpoint: resolved.endpoint,
    })
}

/// The endpoint [`connect`] would record, without building a client: for
/// callers that inject their own executor but still record which cluster
/// the `kubeConfig` names.
pub fn resolve_endpoint(
    options: Option<&KubeConfigOptions>,
) -> Result<Option<ClusterEndpoint>, ConnectError> {
    Ok(resolve(options)?.endpoint)
}

/// The endpoint of `context` (or the current context) in an already loaded
/// kubeconfig, `None` when no context is named or it cannot be found.
pub fn endpoint_of(kubeconfig: &Kubeconfig, context: Option<&str>) -> Option<ClusterEndpoint> {
    let name = context.or(current_context(kubeconfig))?;
    let (cluster_name, cluster) = cluster_of(kubeconfig, name).ok()?;
    Some(endpoint(&cluster_name, &cluster))
}

enum Source {
    Kubeconfig {
        kubeconfig: Box<Kubeconfig>,
        origin: String,
    },
    InCluster {
        server: Option<String>,
        skip_tls_verify: Option<bool>,
    },
}

struct Resolved {
    source: Source,
    /// The context to select; `None` only for in-cluster or a kubeconfig naming none.
    context: Option<String>,
    endpoint: Option<ClusterEndpoint>,
    /// What set the server URL, for messages: `kubeConfig.server`, or the cluster it came from.
    server_source: String,
    /// The selected cluster's `proxy-url`.
    proxy_url: Option<String>,
}

fn resolve(options: Option<&KubeConfigOptions>) -> Result<Resolved, ConnectError> {
    let default = KubeConfigOptions::default();
    let o = options.unwrap_or(&default);
    // The combination rules are core's (validation reports them at
    // declaration); options that skipped validation are refused the same way.
    if let Some(issue) = o.combination_issues().into_iter().next() {
        return Err(error(format!("{}: {}", issue.path, issue.reason)));
    }
    // With the combinations above refused, a cluster comes with its user and
    // without a path.
    let (kubeconfig, origin) = match (&o.cluster, &o.user, &o.kubeconfig_path) {
        (Some(cluster), Some(user), _) => {
            let context = o.context.as_deref().unwrap_or(INLINE_CONTEXT);
            (
                inline(cluster, user, context),
                "kubeConfig (inline cluster and user)".to_owned(),
            )
        }
        (_, _, Some(path)) => (read_file(Path::new(path))?, format!("kubeconfig {path}")),
        _ => match ambient()? {
            Some(found) => found,
            None => return in_cluster(o),
        },
    };
    from_kubeconfig(kubeconfig, origin, o)
}

fn from_kubeconfig(
    mut kubeconfig: Kubeconfig,
    origin: String,
    o: &KubeConfigOptions,
) -> Result<Resolved, ConnectError> {
    let context = match &o.context {
        Some(name) => {
            if !kubeconfig.contexts.iter().any(|c| &c.name == name) {
                let known: Vec<&str> = kubeconfig.contexts.iter().map(|c| c.name.as_str()).collect();
                return Err(error(format!(
                    "{origin}: context '{name}' (kubeConfig.context) not found; it defines {}",
                    list(&known)
                )));
            }
            Some(name.clone())
        }
        None => current_context(&kubeconfig).map(str::to_owned),
    };
    let Some(context) = context else {
        // Nothing to override and nothing to identify; `connect` reports it.
        return Ok(Resolved {
            source: Source::Kubeconfig {
                kubeconfig: Box::new(kubeconfig),
                origin,
            },
            context: None,
            endpoint: None,
            server_source: String::new(),
            proxy_url: None,
        });
    };
    let (cluster_name, _) = cluster_of(&kubeconfig, &context).map_err(|m| error(format!("{origin}: {m}")))?;
    // Overrides go into the kubeconfig itself, so the client and the identity
    // are built from the same values.
    if let Some(named) = kubeconfig.clusters.iter_mut().find(|c| c.name == cluster_name)
        && let Some(cluster) = named.cluster.as_mut()
    {
        if let Some(server) = &o.server {
            cluster.server = Some(server.clone());
        }
        if let Some(skip) = o.skip_tls_verify {
            cluster.insecure_skip_tls_verify = Some(skip);
        }
    }
    let (cluster_name, cluster) =
        cluster_of(&kubeconfig, &context).map_err(|m| error(format!("{origin}: {m}")))?;
    let server_source = if o.server.is_some() {
        "kubeConfig.server".to_owned()
    } else if o.cluster.is_some() {
        "kubeConfig.cluster.server".to_owned()
    } else {
        format!("the server of cluster '{cluster_name}' in {origin}")
    };
    Ok(Resolved {
        endpoint: Some(endpoint(&cluster_name, &cluster)),
        server_source,
        proxy_url: cluster.proxy_url.clone(),
        source: Source::Kubeconfig {
            kubeconfig: Box::new(kubeconfig),
            origin,
        },
        context: Some(context),
    })
}

fn current_context(kubeconfig: &Kubeconfig) -> Option<&str> {
    // kubectl treats an empty current-context as unset.
    kubeconfig.current_context.as_deref().filter(|c| !c.is_empty())
}

/// The cluster a context refers to, or why there is none.
fn cluster_of(kubeconfig: &Kubeconfig, context: &str) -> Result<(String, Cluster), String> {
    let ctx = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .ok_or_else(|| format!("context '{context}' not found"))?
        .context
        .as_ref()
        .ok_or_else(|| format!("context '{context}' is empty"))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .ok_or_else(|| {
            format!(
                "context '{context}' names cluster '{}', which is not defined",
                ctx.cluster
            )
        })?
        .cluster
        .clone()
        .ok_or_else(|| format!("cluster '{}' is empty", ctx.cluster))?;
    Ok((ctx.cluster.clone(), cluster))
}

fn endpoint(name: &str, cluster: &Cluster) -> ClusterEndpoint {
    ClusterEndpoint {
        cluster_name: name.to_owned(),
        server: cluster.server.clone().unwrap_or_default(),
        ca_data: cluster.certificate_authority_data.clone(),
        ca_file: cluster.certificate_authority.clone(),
        skip_tls_verify: cluster.insecure_skip_tls_verify.unwrap_or(false),
    }
}

fn inline(cluster: &KubeClusterOptions, user: &KubeUserOptions, context: &str) -> Kubeconfig {
    one_context(
        &cluster.name,
        Cluster {
            server: Some(cluster.server.clone()),
            insecure_skip_tls_verify: cluster.skip_tls_verify,
            certificate_authority: cluster.ca_file.clone(),
            certificate_authority_data: cluster.ca_data.clone(),
            ..Default::default()
        },
        &user.name,
        AuthInfo {
            client_certificate: user.cert_file.clone(),
            client_key: user.key_file.clone(),
            ..Default::default()
        },
        context,
    )
}

/// A kubeconfig of one cluster, one user and the context joining them, current.
fn one_context(
    cluster_name: &str,
    cluster: Cluster,
    user_name: &str,
    user: AuthInfo,
    context: &str,
) -> Kubeconfig {
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: cluster_name.to_owned(),
            cluster: Some(cluster),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user_name.to_owned(),
            auth_info: Some(user),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: context.to_owned(),
            context: Some(Context {
                cluster: cluster_name.to_owned(),
                user: Some(user_name.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        current_context: Some(context.to_owned()),
        ..Default::default()
    }
}

fn read_file(path: &Path) -> Result<Kubeconfig, ConnectError> {
    Kubeconfig::read_from(path)
        .map_err(|e| error(format!("kubeconfig {}: {}", path.display(), kubeconfig_error(&e))))
}

/// `KUBECONFIG`'s files, else `~/.kube/config`; `None` when neither exists.
fn ambient() -> Result<Option<(Kubeconfig, String)>, ConnectError> {
    if let Some(value) = std::env::var_os("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            let mut merged = Kubeconfig::default();
            for path in &paths {
                let next = read_file(path)?;
                merged = merged
                    .merge(next)
                    .map_err(|e| error(format!("KUBECONFIG: {}", kubeconfig_error(&e))))?;
            }
            let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            return Ok(Some((merged, format!("KUBECONFIG ({})", shown.join(", ")))));
        }
    }
    let Some(home) = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE")) else {
        return Ok(None);
    };
    let path = PathBuf::from(home).join(".kube").join("config");
    if !path.exists() {
        return Ok(None);
    }
    let origin = format!("kubeconfig {}", path.display());
    Ok(Some((read_file(&path)?, origin)))
}

fn in_cluster(o: &KubeConfigOptions) -> Result<Resolved, ConnectError> {
    let (Ok(host), Ok(port)) = (
        std::env::var("KUBERNETES_SERVICE_HOST"),
        std::env::var("KUBERNETES_SERVICE_PORT"),
    ) else {
        return Err(error(
            "no Kubernetes configuration found: KUBECONFIG is not set, ~/.kube/config does not exist, and \
             this is not a pod (KUBERNETES_SERVICE_HOST is not set); pass kubeConfig.kubeconfigPath or set \
             KUBECONFIG"
                .to_owned(),
        ));
    };
    if let Some(context) = &o.context {
        return Err(error(format!(
            "kubeConfig.context '{context}' was given, but no kubeconfig was found (running in-cluster, \
             which has no contexts)"
        )));
    }
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host
    };
    let server = o
        .server
        .clone()
        .unwrap_or_else(|| format!("https://{host}:{port}"));
    Ok(Resolved {
        source: Source::InCluster {
            server: o.server.clone(),
            skip_tls_verify: o.skip_tls_verify,
        },
        context: None,
        server_source: if o.server.is_some() {
            "kubeConfig.server".to_owned()
        } else {
            "the in-cluster server (KUBERNETES_SERVICE_HOST)".to_owned()
        },
        proxy_url: None,
        endpoint: Some(ClusterEndpoint {
            cluster_name: IN_CLUSTER_NAME.to_owned(),
            server,
            ca_data: None,
            ca_file: Some(IN_CLUSTER_CA_FILE.to_owned()),
            skip_tls_verify: o.skip_tls_verify.unwrap_or(false),
        }),
    })
}

/// The service account's configuration, read only when connecting so the
/// identity can be resolved without the token and CA files.
fn in_cluster_config(
    server: Option<&str>,
    skip_tls_verify: Option<bool>,
) -> Result<kube::Config, ConnectError> {
    let mut config =
        kube::Config::incluster().map_err(|e| error(format!("in-cluster configuration: {}", chain(&e))))?;
    if let Some(s) = server {
        config.cluster_url = s
            .parse()
            .map_err(|e| error(format!("kubeConfig.server '{s}' is not a URL: {e}")))?;
    }
    if let Some(skip) = skip_tls_verify {
        config.accept_invalid_certs = skip;
    }
    Ok(config)
}

/// Refuses an `http://` server for a user with credentials (see the module docs).
/// Checked on the final configuration, so every source (inline, file,
/// in-cluster, overrides) is covered, and before the client is built, which
/// is when kube-rs runs an exec plugin.
fn refuse_credentials_over_http(config: &kube::Config, server_source: &str) -> Result<(), ConnectError> {
    if config.cluster_url.scheme_str() != Some("http") {
        return Ok(());
    }
    let a = &config.auth_info;
    let kinds: Vec<&str> = [
        (a.token.is_some(), "a bearer token"),
        (a.token_file.is_some(), "a token file"),
        (a.exec.is_some(), "an exec credential plugin"),
        (a.auth_provider.is_some(), "an auth provider"),
        (
            a.username.is_some() || a.password.is_some(),
            "a user name and password",
        ),
        (
            a.client_certificate.is_some()
                || a.client_certificate_data.is_some()
                || a.client_key.is_some()
                || a.client_key_data.is_some(),
            "a client certificate or key",
        ),
    ]
    .into_iter()
    .filter_map(|(present, kind)| present.then_some(kind))
    .collect();
    match clickhouse_schema_core::transport::credentials_over_plain_http(
        &config.cluster_url.to_string(),
        server_source,
        &kinds,
    ) {
        Some(refusal) => Err(error(refusal)),
        None => Ok(()),
    }
}

fn kubeconfig_error(e: &KubeconfigError) -> String {
    use kube::config::LoadDataError;
    match e {
        KubeconfigError::Parse(parse) => match parse.location() {
            Some(at) => format!(
                "not a valid kubeconfig (YAML error at line {}, column {})",
                at.line(),
                at.column()
            ),
            None => "not a valid kubeconfig (YAML error)".to_owned(),
        },
        KubeconfigError::ReadConfig(io, _) => format!("cannot be read: {io}"),
        // base64's error names the offending byte of the key or certificate.
        KubeconfigError::LoadClientKey(LoadDataError::DecodeBase64(_)) => {
            "client-key-data is not valid base64".to_owned()
        }
        KubeconfigError::LoadClientCertificate(LoadDataError::DecodeBase64(_)) => {
            "client-certificate-data is not valid base64".to_owned()
        }
        // The value may hold `user:password@`; which setting it is, is what helps.
        KubeconfigError::ParseProxyUrl(_) => {
            "the cluster's proxy-url (or HTTPS_PROXY / https_proxy) is not a valid URL".to_owned()
        }
        other => chain(other),
    }
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "no contexts".to_owned()
    } else {
        format!(
            "contexts {}",
            names
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn error(message: String) -> ConnectError {
    ConnectError {
        message: redact(&message),
    }
}

/// Why no client could be built: a kubeconfig that is missing, unreadable or
/// inconsistent with the `kubeConfig` prop. Converts into the project error
/// ([`ErrorKind::KubernetesApi`]) with `?`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectError {
    /// What is wrong, already free of credentials.
    pub message: String,
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConnectError {}

impl From<ConnectError> for ClickHouseSchemaError {
    fn from(e: ConnectError) -> Self {
        ClickHouseSchemaError::new(ErrorKind::KubernetesApi, e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "\
apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443
    certificate-authority-data: Q0EK
- name: staging
  cluster:
    server: https://staging.example:6443
    certificate-authority: ca/staging.pem
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: s3cr3t-token
contexts:
- name: prod
  context: {cluster: prod, user: admin}
- name: staging
  context: {cluster: staging, user: admin}
- name: dangling
  context: {cluster: nowhere, user: admin}
current-context: prod
";

    fn write(dir: &Path, text: &str) -> String {
        let path = dir.join("config");
        std::fs::write(&path, text).expect("write kubeconfig");
        path.display().to_string()
    }

    fn with_path(path: &str) -> KubeConfigOptions {
        KubeConfigOptions {
            kubeconfig_path: Some(path.to_owned()),
            ..Default::default()
        }
    }

    #[test]
    fn current_context_cluster_is_the_endpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), YAML);
        let e = resolve_endpoint(Some(&with_path(&path))).expect("resolves");
        assert_eq!(
            e,
            Some(ClusterEndpoint {
                cluster_name: "prod".into(),
                server: "https://prod.example:6443".into(),
                ca_data: Some("Q0EK".into()),
                ca_file: None,
                skip_tls_verify: false,
            })
        );
    }

    #[test]
    fn context_option_selects_and_relative_ca_file_is_absolute() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), YAML);
        let o = KubeConfigOptions {
            context: Some("staging".into()),
            ..with_path(&path)
        };
        let e = resolve_endpoint(Some(&o)).expect("resolves").expect("named");
        assert_eq!(e.cluster_name, "staging");
        assert_eq!(
            e.ca_file,
            Some(dir.path().join("ca/staging.pem").display().to_string())
        );
        assert!(e.skip_tls_verify);
    }

    #[test]
    fn server_and_skip_tls_override_the_selected_cluster() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), YAML);
        let o = KubeConfigOptions {
            context: Some("staging".into()),
            server: Some("https://10.0.0.1:443".into()),
            skip_tls_verify: Some(false),
            ..with_path(&path)
        };
        let e = resolve_endpoint(Some(&o)).expect("resolves").expect("named");
        assert_eq!(e.cluster_name, "staging");
        assert_eq!(e.server, "https://10.0.0.1:443");
        assert!(!e.skip_tls_verify);
    }

    #[test]
    fn no_current_context_means_no_endpoint_and_no_connection() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), &YAML.replace("current-context: prod\n", ""));
        assert_eq!(resolve_endpoint(Some(&with_path(&path))).expect("resolves"), None);
        let path = write(
            dir.path(),
            &YAML.replace("current-context: prod", "current-context: \"\""),
        );
        assert_eq!(resolve_endpoint(Some(&with_path(&path))).expect("resolves"), None);
        let kc = Kubeconfig::from_yaml(&YAML.replace("current-context: prod\n", "")).expect("parses");
        assert_eq!(endpoint_of(&kc, None), None);
        assert_eq!(
            endpoint_of(&kc, Some("prod")).map(|e| e.cluster_name),
            Some("prod".into())
        );
    }

    #[tokio::test]
    async fn connect_without_a_context_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), &YAML.replace("current-context: prod\n", ""));
        let e = connect(Some(&with_path(&path))).await.expect_err("no context");
        assert_eq!(
            ClickHouseSchemaError::from(e.clone()).kind,
            ErrorKind::KubernetesApi
        );
        assert!(e.message.contains("sets no current-context"), "{}", e.message);
        assert!(e.message.contains(&path), "{}", e.message);
    }

    #[tokio::test]
    async fn credentials_are_never_sent_over_plain_http() {
        let dir = tempfile::tempdir().expect("tempdir");
        let user = "  user:\n    token: s3cr3t-token\n";
        assert!(YAML.contains(user));
        for (credential, kind) in [
            ("    token: s3cr3t-token\n", "a bearer token"),
            ("    tokenFile: /var/run/token\n", "a token file"),
            (
                "    username: bob\n    password: s3cr3t-pw\n",
                "a user name and password",
            ),
            (
                "    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n",
                "a client certificate or key",
            ),
            (
                "    auth-provider:\n      name: oidc\n      config: {id-token: s3cr3t-id}\n",
                "an auth provider",
            ),
            // The plugin does not exist: had it been run, the error would say it could not be started.
            (
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: /nonexistent/plugin\n",
                "an exec credential plugin",
            ),
        ] {
            let text = YAML.replace(user, &format!("  user:\n{credential}"));
            let path = write(dir.path(), &text);
            // Through kubeConfig.server ...
            let o = KubeConfigOptions {
                server: Some("http://prod.example:8080".into()),
                ..with_path(&path)
            };
            let e = connect(Some(&o)).await.expect_err(kind);
            assert!(
                e.message
                    .contains("kubeConfig.server is http://prod.example:8080/"),
                "{}",
                e.message
            );
            assert!(
                e.message.contains("credentials are never sent over plain HTTP"),
                "{}",
                e.message
            );
            assert!(e.message.contains(kind), "{kind}: {}", e.message);
            assert!(!e.message.contains("s3cr3t"), "{}", e.message);
            // ... or the kubeconfig's own cluster.
            let path = write(
                dir.path(),
                &text.replace("https://prod.example", "http://prod.example"),
            );
            let e = connect(Some(&with_path(&path))).await.expect_err(kind);
            assert!(
                e.message
                    .contains(&format!("the server of cluster 'prod' in kubeconfig {path}")),
                "{}",
                e.message
            );
            assert!(e.message.contains("never sent over plain HTTP"), "{}", e.message);
        }
    }

    #[tokio::test]
    async fn plain_http_without_credentials_is_allowed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = YAML
            .replace("  user:\n    token: s3cr3t-token\n", "  user: {}\n")
            .replace("https://prod.example", "http://prod.example");
        let path = write(dir.path(), &text);
        let conn = connect(Some(&with_path(&path)))
            .await
            .expect("anonymous over http");
        assert_eq!(
            conn.endpoint.map(|e| e.server),
            Some("http://prod.example:6443".to_owned())
        );
        // https with credentials is of course fine too.
        let path = write(dir.path(), YAML);
        connect(Some(&with_path(&path))).await.expect("token over https");
    }

    #[test]
    fn unknown_context_lists_the_known_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), YAML);
        let o = KubeConfigOptions {
            context: Some("qa".into()),
            ..with_path(&path)
        };
        let e = resolve_endpoint(Some(&o)).expect_err("unknown context");
        assert!(e.message.contains("context 'qa'"), "{}", e.message);
        assert!(
            e.message.contains("'prod', 'staging', 'dangling'"),
            "{}",
            e.message
        );
        let o = KubeConfigOptions {
            context: Some("dangling".into()),
            ..with_path(&path)
        };
        let e = resolve_endpoint(Some(&o)).expect_err("dangling cluster");
        assert!(e.message.contains("cluster 'nowhere'"), "{}", e.message);
    }

    #[test]
    fn missing_file_and_bad_yaml_are_clear_and_print_no_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope").display().to_string();
        let e = resolve_endpoint(Some(&with_path(&missing))).expect_err("missing");
        assert!(e.message.contains(&missing), "{}", e.message);
        assert!(e.message.contains("cannot be read"), "{}", e.message);

        let bad = YAML.replace(
            "    token: s3cr3t-token",
            "    token: s3cr3t-token\n  - [unbalanced",
        );
        let path = write(dir.path(), &bad);
        let e = resolve_endpoint(Some(&with_path(&path))).expect_err("bad yaml");
        assert!(e.message.contains("not a valid kubeconfig"), "{}", e.message);
        assert!(e.message.contains("line"), "{}", e.message);
        assert!(!e.message.contains("s3cr3t"), "{}", e.message);

        // A type error right at the token must not echo it either.
        let bad = YAML.replace("    token: s3cr3t-token", "    token: [s3cr3t-token]");
        let path = write(dir.path(), &bad);
        let e = resolve_endpoint(Some(&with_path(&path))).expect_err("bad type");
        assert!(!e.message.contains("s3cr3t"), "{}", e.message);
    }

    #[test]
    fn inline_cluster_and_user_build_their_own_context() {
        let o = KubeConfigOptions {
            cluster: Some(KubeClusterOptions {
                name: "edge".into(),
                server: "https://edge:6443".into(),
                skip_tls_verify: None,
                ca_data: None,
                ca_file: Some("/etc/edge-ca.pem".into()),
            }),
            user: Some(KubeUserOptions {
                name: "deployer".into(),
                cert_file: None,
                key_file: None,
            }),
            skip_tls_verify: Some(true),
            ..Default::default()
        };
        let e = resolve_endpoint(Some(&o)).expect("resolves").expect("named");
        assert_eq!(
            e,
            ClusterEndpoint {
                cluster_name: "edge".into(),
                server: "https://edge:6443".into(),
                ca_data: None,
                ca_file: Some("/etc/edge-ca.pem".into()),
                skip_tls_verify: true,
            }
        );
    }

    #[test]
    fn contradictory_or_partial_options_are_refused() {
        let cluster = KubeClusterOptions {
            name: "c".into(),
            server: "https://c".into(),
            skip_tls_verify: None,
            ca_data: None,
            ca_file: None,
        };
        let user = KubeUserOptions {
            name: "u".into(),
            cert_file: None,
            key_file: None,
        };
        let cases = [
            (
                KubeConfigOptions {
                    cluster: Some(cluster.clone()),
                    ..Default::default()
                },
                "kubeConfig.user: is required with kubeConfig.cluster",
            ),
            (
                KubeConfigOptions {
                    user: Some(user.clone()),
                    ..Default::default()
                },
                "kubeConfig.cluster: is required with kubeConfig.user",
            ),
            (
                KubeConfigOptions {
                    cluster: Some(cluster.clone()),
                    user: Some(user.clone()),
                    kubeconfig_path: Some("/x".into()),
                    ..Default::default()
                },
                "kubeConfig.kubeconfigPath: cannot be combined",
            ),
            (
                KubeConfigOptions {
                    cluster: Some(cluster),
                    user: Some(user),
                    load_from_default: Some(true),
                    ..Default::default()
                },
                "kubeConfig.loadFromDefault: cannot be true",
            ),
            (
                KubeConfigOptions {
                    load_from_default: Some(false),
                    ..Default::default()
                },
                "kubeConfig.loadFromDefault: is false",
            ),
        ];
        for (o, words) in cases {
            let e = resolve_endpoint(Some(&o)).expect_err("refused");
            assert!(e.message.contains(words), "{o:?}: {}", e.message);
        }
    }
}
