//! The resolved configuration: the props after validation, with every default
//! filled in, so nothing downstream ever has to know a default or re-check a
//! type.
//!
//! The only way to obtain a [`ResolvedConfig`] from user input is
//! [`crate::validate::validate`]; defaults are applied in exactly one place,
//! [`resolve`], and the JSON Schema's `default` annotations are tested against
//! the constants below so the two cannot drift.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

/// The Altinity CHI server container.
pub const DEFAULT_CONTAINER: &str = "clickhouse";
pub const DEFAULT_USER: &str = "default";
pub const DEFAULT_DATABASE: &str = "default";
/// What every ClickHouse workload in TypeKro already sets.
pub const DEFAULT_PASSWORD_ENV: &str = "CLICKHOUSE_PASSWORD";
pub const DEFAULT_PORT: u16 = 9000;
pub const DEFAULT_WAIT_FOR_POD_TIMEOUT_MS: u64 = 120_000;
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 300_000;
/// 16 MiB: far above any DDL, low enough that a runaway generated statement
/// fails validation instead of costing memory on every path that handles it.
pub const DEFAULT_MAX_STATEMENT_BYTES: u64 = 16 << 20;
pub const DEFAULT_MAX_RECONCILE_PASSES: u32 = 3;
pub const DEFAULT_RETRY_MAX_ATTEMPTS: u32 = 3;
pub const DEFAULT_RETRY_BACKOFF_MS: u64 = 1_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedConfig {
    pub target: Target,
    pub client: ClientConfig,
    /// Non-empty, none blank, in execution order.
    pub statements: Vec<String>,
    pub execution: Execution,
    /// Sorted by name, which is also the order they are rendered and fingerprinted in.
    pub settings: BTreeMap<String, SettingValue>,
    pub on_delete: OnDelete,
    /// Non-empty exactly when `on_delete` is [`OnDelete::Run`]; empty otherwise.
    pub delete_statements: Vec<String>,
    pub wait_for_pod: WaitForPod,
    /// Only meaningful under fanout.
    pub max_reconcile_passes: u32,
    pub statement_timeout_ms: u64,
    /// Largest statement (UTF-8 bytes) validation accepts; outside the fingerprint.
    pub max_statement_bytes: u64,
    pub retry: Retry,
    /// Connection options. Carries file paths and cluster endpoints, so callers
    /// must leave it out of persisted state; it is also outside the fingerprint.
    pub kube_config: Option<KubeConfigOptions>,
    /// Ordering-only; outside the fingerprint.
    pub ready_barrier: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    pub namespace: String,
    pub pod_selector: BTreeMap<String, String>,
    pub container: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientConfig {
    pub user: String,
    pub database: String,
    /// Name (never value) of the env var inside the container holding the password.
    pub password_env: String,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "camelCase")]
pub enum Execution {
    Fanout,
    OnCluster { cluster: String },
}

impl Execution {
    /// The mode as users write it in props.
    pub fn mode(&self) -> &'static str {
        match self {
            Execution::Fanout => "fanout",
            Execution::OnCluster { .. } => "onCluster",
        }
    }

    pub fn cluster(&self) -> Option<&str> {
        match self {
            Execution::Fanout => None,
            Execution::OnCluster { cluster } => Some(cluster),
        }
    }
}

/// A setting value. String and number stay distinct because ClickHouse may
/// parse `'300'` and `300` differently for some settings, and the fingerprint
/// must not equate two configs that could behave differently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SettingValue {
    String(String),
    Number(Number),
}

impl SettingValue {
    /// The text that follows `--name=` on the command line; also the canonical
    /// form the fingerprint hashes.
    pub fn render(&self) -> String {
        match self {
            SettingValue::String(s) => s.clone(),
            SettingValue::Number(n) => canonical_number(n),
        }
    }
}

impl fmt::Display for SettingValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

/// Canonical decimal text of a JSON number.
///
/// A JavaScript caller cannot tell `300` from `300.0`, and the napi bridge may
/// hand either representation over, so both must render (and fingerprint)
/// identically. Integers print as plain decimal; other values use Rust's
/// shortest round-trip `Display`, which never emits an exponent, so the result
/// is always something clickhouse-client accepts. Negative zero renders as `0`.
pub fn canonical_number(n: &Number) -> String {
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    match n.as_f64() {
        // `-0.0 == 0.0`, so this also folds negative zero, which Display would print as "-0".
        Some(f) if f.is_finite() && f == 0.0 => "0".to_owned(),
        Some(f) if f.is_finite() => format!("{f}"),
        // serde_json never holds a non-finite number; fall back to its own text.
        _ => n.to_string(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnDelete {
    Retain,
    Run,
}

impl OnDelete {
    pub fn as_str(self) -> &'static str {
        match self {
            OnDelete::Retain => "retain",
            OnDelete::Run => "run",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitForPod {
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    /// Total attempts, the first included; 1 means no retry.
    pub max_attempts: u32,
    pub backoff_ms: u64,
}

/// The serializable subset of TypeKro's kubeconfig options.
///
/// Everything here is either a locator (file path, context name, server URL)
/// or a TLS switch. Inline credentials (`user.token`, `user.certData`,
/// `user.keyData`) are refused by validation so no secret can travel through
/// props; credentials come from the kubeconfig, or from files named here.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeConfigOptions {
    /// A kubeconfig file to load instead of the default locations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_path: Option<String>,
    /// Load the ambient kubeconfig (KUBECONFIG, ~/.kube/config, in-cluster) first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_from_default: Option<bool>,
    /// Context to select instead of the kubeconfig's current-context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// API server URL overriding the selected cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, rename = "skipTLSVerify", skip_serializing_if = "Option::is_none")]
    pub skip_tls_verify: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<KubeClusterOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<KubeUserOptions>,
}

impl KubeConfigOptions {
    /// Combinations that name no usable configuration, or two at once. The
    /// one place these rules live: validation reports them at declaration
    /// (`E_INVALID_CONFIG`, paths under `kubeConfig`), and the Kubernetes
    /// transport refuses them too when handed options that skipped validation.
    pub fn combination_issues(&self) -> Vec<crate::error::ConfigIssue> {
        let issue = |path: &str, reason: &str| crate::error::ConfigIssue {
            path: format!("kubeConfig.{path}"),
            reason: reason.to_owned(),
        };
        let mut issues = Vec::new();
        match (&self.cluster, &self.user) {
            (Some(_), Some(_)) => {
                if self.kubeconfig_path.is_some() {
                    issues.push(issue(
                        "kubeconfigPath",
                        "cannot be combined with an inline cluster and user: pass one or the other",
                    ));
                }
                if self.load_from_default == Some(true) {
                    issues.push(issue(
                        "loadFromDefault",
                        "cannot be true together with an inline cluster and user: pass one or the other",
                    ));
                }
            }
            (Some(_), None) => issues.push(issue(
                "user",
                "is required with kubeConfig.cluster: an inline cluster needs its user (or use \
                 kubeconfigPath or the ambient kubeconfig)",
            )),
            (None, Some(_)) => issues.push(issue(
                "cluster",
                "is required with kubeConfig.user: an inline user needs its cluster (or use \
                 kubeconfigPath or the ambient kubeconfig)",
            )),
            (None, None) => {
                if self.kubeconfig_path.is_none() && self.load_from_default == Some(false) {
                    issues.push(issue(
                        "loadFromDefault",
                        "is false, and neither kubeconfigPath nor an inline cluster and user is given, so \
                         there is no configuration to load",
                    ));
                }
            }
        }
        issues
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeClusterOptions {
    pub name: String,
    pub server: String,
    #[serde(default, rename = "skipTLSVerify", skip_serializing_if = "Option::is_none")]
    pub skip_tls_verify: Option<bool>,
    /// Base64-encoded PEM CA bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeUserOptions {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
}

/// Builds the resolved form of props that already passed validation.
///
/// This is where every default is applied. It still refuses to guess: a value
/// of an unexpected type is reported as an error message (naming the path)
/// rather than silently replaced by the default, so a gap between the schema
/// and this function shows up as a failing test instead of a wrong apply.
pub(crate) fn resolve(props: &Map<String, Value>) -> Result<ResolvedConfig, String> {
    let target = object(props, "target")?.ok_or("target: missing")?;
    let client = object(props, "client")?;
    let wait = object(props, "waitForPod")?;
    let retry = object(props, "retry")?;

    let execution = match object(props, "execution")? {
        None => Execution::Fanout,
        Some(exec) => match string(exec, "mode", "execution.mode")? {
            Some("fanout") => Execution::Fanout,
            Some("onCluster") => Execution::OnCluster {
                cluster: string(exec, "cluster", "execution.cluster")?
                    .ok_or("execution.cluster: missing")?
                    .to_owned(),
            },
            _ => return Err("execution.mode: not 'fanout' or 'onCluster'".to_owned()),
        },
    };

    let on_delete = match string(props, "onDelete", "onDelete")? {
        None | Some("retain") => OnDelete::Retain,
        Some("run") => OnDelete::Run,
        Some(_) => return Err("onDelete: not 'retain' or 'run'".to_owned()),
    };

    let mut settings = BTreeMap::new();
    if let Some(map) = object(props, "settings")? {
        for (name, value) in map {
            let value = match value {
                Value::String(s) => SettingValue::String(s.clone()),
                Value::Number(n) => SettingValue::Number(n.clone()),
                _ => return Err(format!("settings.{name}: not a string or number")),
            };
            settings.insert(name.clone(), value);
        }
    }

    let mut pod_selector = BTreeMap::new();
    for (key, value) in object(target, "podSelector")?.ok_or("target.podSelector: missing")? {
        let value = value
            .as_str()
            .ok_or_else(|| format!("target.podSelector[{key:?}]: not a string"))?;
        pod_selector.insert(key.clone(), value.to_owned());
    }

    let kube_config = match props.get("kubeConfig") {
        None => None,
        Some(value) => Some(KubeConfigOptions::deserialize(value).map_err(|e| format!("kubeConfig: {e}"))?),
    };

    let ready_barrier = match props.get("readyBarrier") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err("readyBarrier: not a boolean".to_owned()),
    };

    Ok(ResolvedConfig {
        target: Target {
            namespace: string(target, "namespace", "target.namespace")?
                .ok_or("target.namespace: missing")?
                .to_owned(),
            pod_selector,
            container: string(target, "container", "target.container")?
                .unwrap_or(DEFAULT_CONTAINER)
                .to_owned(),
        },
        client: ClientConfig {
            user: opt_string(client, "user", "client.user")?
                .unwrap_or(DEFAULT_USER)
                .to_owned(),
            database: opt_string(client, "database", "client.database")?
                .unwrap_or(DEFAULT_DATABASE)
                .to_owned(),
            password_env: opt_string(client, "passwordEnv", "client.passwordEnv")?
                .unwrap_or(DEFAULT_PASSWORD_ENV)
                .to_owned(),
            port: opt_int(client, "port", "client.port")?
                .unwrap_or(u64::from(DEFAULT_PORT))
                .try_into()
                .map_err(|_| "client.port: out of range".to_owned())?,
        },
        statements: strings(props, "statements")?.ok_or("statements: missing")?,
        execution,
        settings,
        on_delete,
        delete_statements: strings(props, "deleteStatements")?.unwrap_or_default(),
        wait_for_pod: WaitForPod {
            timeout_ms: opt_int(wait, "timeoutMs", "waitForPod.timeoutMs")?
                .unwrap_or(DEFAULT_WAIT_FOR_POD_TIMEOUT_MS),
        },
        max_reconcile_passes: small_int(
            int(props, "maxReconcilePasses", "maxReconcilePasses")?,
            DEFAULT_MAX_RECONCILE_PASSES,
            "maxReconcilePasses",
        )?,
        statement_timeout_ms: int(props, "statementTimeoutMs", "statementTimeoutMs")?
            .unwrap_or(DEFAULT_STATEMENT_TIMEOUT_MS),
        max_statement_bytes: int(props, "maxStatementBytes", "maxStatementBytes")?
            .unwrap_or(DEFAULT_MAX_STATEMENT_BYTES),
        retry: Retry {
            max_attempts: small_int(
                opt_int(retry, "maxAttempts", "retry.maxAttempts")?,
                DEFAULT_RETRY_MAX_ATTEMPTS,
                "retry.maxAttempts",
            )?,
            backoff_ms: opt_int(retry, "backoffMs", "retry.backoffMs")?.unwrap_or(DEFAULT_RETRY_BACKOFF_MS),
        },
        kube_config,
        ready_barrier,
    })
}

fn object<'a>(map: &'a Map<String, Value>, key: &str) -> Result<Option<&'a Map<String, Value>>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(format!("{key}: not an object")),
    }
}

fn string<'a>(map: &'a Map<String, Value>, key: &str, path: &str) -> Result<Option<&'a str>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{path}: not a string")),
    }
}

fn opt_string<'a>(
    map: Option<&'a Map<String, Value>>,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, String> {
    map.map_or(Ok(None), |m| string(m, key, path))
}

fn strings(map: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{key}[{i}]: not a string"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(format!("{key}: not an array")),
    }
}

/// A non-negative integer. JSON Schema counts `3.0` as an integer, and the
/// napi bridge may deliver JS numbers as floats, so integral floats are accepted.
fn int(map: &Map<String, Value>, key: &str, path: &str) -> Result<Option<u64>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(u) = n.as_u64() {
                return Ok(Some(u));
            }
            match n.as_f64() {
                // The bound keeps the cast exact; validation caps every field far below it.
                Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0 => Ok(Some(f as u64)),
                _ => Err(format!("{path}: not a non-negative integer")),
            }
        }
        Some(_) => Err(format!("{path}: not a number")),
    }
}

fn opt_int(map: Option<&Map<String, Value>>, key: &str, path: &str) -> Result<Option<u64>, String> {
    map.map_or(Ok(None), |m| int(m, key, path))
}

fn small_int(value: Option<u64>, default: u32, path: &str) -> Result<u32, String> {
    value.map_or(Ok(default), |v| {
        u32::try_from(v).map_err(|_| format!("{path}: out of range"))
    })
}
