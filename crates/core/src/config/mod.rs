//! The configuration: the props checked (`validate`), the model they resolve
//! to with every default filled in (this file), and the fingerprint of what is
//! applied (`fingerprint`).
//!
//! Pure: nothing here reaches `transport` or `kubernetes`; the checks read
//! statements through `sql` and a rebuild's plan through `rebuild`.
//!
//! The resolved configuration: the props after validation, with every default
//! filled in, so nothing downstream ever has to know a default or re-check a
//! type.
//!
//! The only way to obtain a [`ResolvedConfig`] from user input is
//! [`crate::config::validate::validate`]; defaults are applied in exactly one place,
//! [`resolve`], and the JSON Schema's `default` annotations are tested against
//! the constants below so the two cannot drift.

pub mod fingerprint;
pub mod validate;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// The Altinity CHI server container.
pub const DEFAULT_CONTAINER: &str = "clickhouse";
/// ClickHouse's built-in user.
pub const DEFAULT_USER: &str = "default";
/// ClickHouse's built-in database.
pub const DEFAULT_DATABASE: &str = "default";
/// What every ClickHouse workload in TypeKro already sets.
pub const DEFAULT_PASSWORD_ENV: &str = "CLICKHOUSE_PASSWORD";
/// ClickHouse's native protocol port.
pub const DEFAULT_PORT: u16 = 9000;
/// Two minutes for the pods to become Ready.
pub const DEFAULT_WAIT_FOR_POD_TIMEOUT_MS: u64 = 120_000;
/// Five minutes per statement.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 300_000;
/// 16 MiB: far above any DDL, low enough that a runaway generated statement
/// fails validation instead of costing memory on every path that handles it.
pub const DEFAULT_MAX_STATEMENT_BYTES: u64 = 16 << 20;
/// Fanout passes allowed to chase pods that appear mid-apply.
pub const DEFAULT_MAX_RECONCILE_PASSES: u32 = 3;
/// Pods applied at once under fanout: enough to hide the exec latency of a
/// typical cluster without opening dozens of exec streams at the API server.
pub const DEFAULT_PARALLELISM: u32 = 8;
/// One attempt and two retries.
pub const DEFAULT_RETRY_MAX_ATTEMPTS: u32 = 3;
/// How long a lease holder that stops renewing keeps the lease.
pub const DEFAULT_LEASE_TTL_SECONDS: u32 = 60;
/// The ledger table's name when `ledger.table` is not given.
pub const DEFAULT_LEDGER_TABLE: &str = "clickhouse_schema_ledger";
/// Seconds between the server's time and a DateTime cut-over when `cutoverDelaySeconds` is not given.
pub const DEFAULT_CUTOVER_DELAY_SECONDS: u32 = 10;
/// One second before the first retry, doubling after each.
pub const DEFAULT_RETRY_BACKOFF_MS: u64 = 1_000;

/// The validated props with every default applied; see the module header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedConfig {
    /// Where the server pods are.
    pub target: Target,
    /// How clickhouse-client connects inside the server container.
    pub client: ClientConfig,
    /// Non-empty, none blank, in execution order.
    pub statements: Vec<String>,
    /// How the statements reach every server.
    pub execution: Execution,
    /// Sorted by name, which is also the order they are rendered and fingerprinted in.
    pub settings: BTreeMap<String, SettingValue>,
    /// What destroying the resource does.
    pub on_delete: OnDelete,
    /// Non-empty exactly when `on_delete` is [`OnDelete::Run`]; empty otherwise.
    pub delete_statements: Vec<String>,
    /// What a mismatch between the declared and the live objects does; outside the fingerprint.
    pub verify: VerifyMode,
    /// How long the pods may take to become Ready.
    pub wait_for_pod: WaitForPod,
    /// Only meaningful under fanout.
    pub max_reconcile_passes: u32,
    /// Pods applied at once under fanout; outside the fingerprint.
    pub parallelism: u32,
    /// How the statements reach a pod; outside the fingerprint.
    #[serde(default)]
    pub exec_mode: ExecMode,
    /// Per-statement exec timeout, in milliseconds.
    pub statement_timeout_ms: u64,
    /// Largest statement (UTF-8 bytes) validation accepts; outside the fingerprint.
    pub max_statement_bytes: u64,
    /// Retries of transport failures (never of a statement ClickHouse rejected).
    pub retry: Retry,
    /// The Lease that serializes applies and destroys; `None`: off. Outside the fingerprint.
    pub lease: Option<LeaseConfig>,
    /// The per-pod ledger; `None`: off. Outside the fingerprint.
    pub ledger: Option<LedgerConfig>,
    /// Tables the apply may rebuild, by `database.table`; outside the fingerprint.
    #[serde(default)]
    pub rebuild: BTreeMap<String, RebuildTable>,
    /// What a difference an ALTER can make does after the statements ran; outside the fingerprint.
    #[serde(default)]
    pub converge: ConvergeMode,
    /// Columns (`database.table.column`) whose type convergence may change; outside the fingerprint.
    #[serde(default)]
    pub allow_type_change: Vec<String>,
    /// Which cluster to reach. Carries file paths and cluster endpoints, so
    /// callers must leave it out of the outputs; it is also outside the fingerprint.
    pub kube_config: Option<KubeConfig>,
    /// Ordering-only; outside the fingerprint.
    pub ready_barrier: Option<bool>,
}

/// Where the ClickHouse server pods are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Namespace holding the server pods.
    pub namespace: String,
    /// Label selector (matchLabels semantics) for the server pods.
    pub pod_selector: BTreeMap<String, String>,
    /// Name of the ClickHouse server container inside each pod.
    pub container: String,
}

/// How clickhouse-client connects inside the server container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientConfig {
    /// ClickHouse user the statements run as.
    pub user: String,
    /// Database selected for the session (`--database`).
    pub database: String,
    /// Name (never value) of the env var inside the container holding the password.
    pub password_env: String,
    /// Native protocol port inside the pod.
    pub port: u16,
}

/// How the statements reach every server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "camelCase")]
pub enum Execution {
    /// Run the statements on every pod matching the selector, one pod after another.
    Fanout,
    /// Run the statements once, on one Ready pod; each carries `ON CLUSTER` and
    /// Keeper distributes it.
    OnCluster {
        /// Cluster name as configured in the server's `remote_servers` section.
        cluster: String,
    },
}

impl Execution {
    /// The mode as users write it in props.
    pub fn mode(&self) -> &'static str {
        match self {
            Execution::Fanout => "fanout",
            Execution::OnCluster { .. } => "onCluster",
        }
    }

    /// The `ON CLUSTER` cluster name; absent under fanout.
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
    /// A JSON string, passed as written.
    String(String),
    /// A finite JSON number, rendered by [`canonical_number`].
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

/// What destroying the resource does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnDelete {
    /// Leave every database, table and row in place.
    Retain,
    /// Run the delete statements.
    Run,
}

impl OnDelete {
    /// The value as users write it in props.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDelete::Retain => "retain",
            OnDelete::Run => "run",
        }
    }
}

/// What a mismatch between the declared objects and what a pod holds does after an apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum VerifyMode {
    /// Fail the apply with `E_SCHEMA_MISMATCH`; nothing is recorded.
    Fail,
    /// Report the mismatch as an event and record the apply.
    Warn,
    /// Do not look.
    Off,
}

impl VerifyMode {
    /// The value as users write it in props.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyMode::Fail => "fail",
            VerifyMode::Warn => "warn",
            VerifyMode::Off => "off",
        }
    }
}

/// What the apply does with a difference the live-schema check finds (see `crate::converge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ConvergeMode {
    /// Nothing: the check decides.
    #[default]
    Off,
    /// The ALTERs that make the declaration, where the server has them.
    Additive,
}

/// How a pod's statements are sent (see `reconcile::batch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ExecMode {
    /// One exec per pod runs the whole list.
    #[default]
    PerPod,
    /// One exec per statement.
    PerStatement,
}

/// The Lease against concurrent applies and destroys of the same resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseConfig {
    /// Seconds a holder keeps the lease without renewing it.
    pub ttl_seconds: u32,
}

/// Where the per-pod ledger lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerConfig {
    /// Database of the ledger table (a plain identifier).
    pub database: String,
    /// The ledger table (a plain identifier).
    pub table: String,
}

/// How one table is rebuilt when its declaration differs from the live table in a way no ALTER
/// can change (see `crate::rebuild`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RebuildTable {
    /// The DateTime or integer column that splits the backfill (before the cut-over) from the
    /// dual write (at or after it).
    pub cutover_column: String,
    /// Keep `<table>__old` after the swap.
    pub keep_old: bool,
    /// What is compared per partition before the swap.
    pub verify: RebuildVerify,
    /// For a DateTime cut-over column: seconds between the server's time and the cut-over.
    pub cutover_delay_seconds: u32,
}

/// What a rebuild compares per partition before it swaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RebuildVerify {
    /// Row counts.
    Count,
    /// Row counts and a checksum of every column both tables have.
    Checksum,
}

/// The readiness budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitForPod {
    /// Milliseconds the pods the execution model needs may take to become
    /// Ready; under fanout it also bounds the whole reconcile loop.
    pub timeout_ms: u64,
}

/// Retries of transport failures (WebSocket errors, resets, exec timeouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    /// Total attempts, the first included; 1 means no retry.
    pub max_attempts: u32,
    /// Milliseconds before the first retry; the wait doubles after each further failure.
    pub backoff_ms: u64,
}

/// The `kubeConfig` prop, in either of its forms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KubeConfig {
    /// Kubeconfig options, which the transport resolves itself. (Boxed: the
    /// two forms differ a lot in size.)
    Options(Box<KubeConfigOptions>),
    /// Alchemy's `Kubernetes.Connection`, or a value carrying one as
    /// `connection` (a cluster resource's attributes), kept as written. Only
    /// the cluster adapter registered for its auth kind can turn it into an
    /// endpoint and credentials, so the caller resolves it at call time and
    /// hands the result over as a [`crate::kubernetes::connection::ResolvedConnection`].
    Alchemy(Value),
}

impl KubeConfig {
    /// The kubeconfig options, when the prop is in that form.
    pub fn options(&self) -> Option<&KubeConfigOptions> {
        match self {
            KubeConfig::Options(options) => Some(options),
            KubeConfig::Alchemy(_) => None,
        }
    }

    /// The auth kind of an Alchemy connection (`kubeconfig`, `exec`,
    /// `aws-eks`, ...); `None` for kubeconfig options.
    pub fn alchemy_auth_kind(&self) -> Option<&str> {
        let KubeConfig::Alchemy(value) = self else {
            return None;
        };
        let connection = value.get("connection").unwrap_or(value);
        connection.pointer("/auth/kind").and_then(Value::as_str)
    }
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
    /// Disable TLS verification of the API server (development clusters only).
    #[serde(default, rename = "skipTLSVerify", skip_serializing_if = "Option::is_none")]
    pub skip_tls_verify: Option<bool>,
    /// A complete cluster entry, used instead of the kubeconfig's; needs `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<KubeClusterOptions>,
    /// A user entry whose credentials are files; needs `cluster`.
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

/// An inline kubeconfig cluster entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeClusterOptions {
    /// Name of the cluster entry.
    pub name: String,
    /// API server URL.
    pub server: String,
    /// Disable TLS verification of this server (development clusters only).
    #[serde(default, rename = "skipTLSVerify", skip_serializing_if = "Option::is_none")]
    pub skip_tls_verify: Option<bool>,
    /// Base64-encoded PEM CA bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_data: Option<String>,
    /// Path to a PEM CA bundle on the machine running the converge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
}

/// An inline kubeconfig user entry. Its credentials are files, never inline data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeUserOptions {
    /// Name of the user entry.
    pub name: String,
    /// Path to a PEM client certificate; absent when the user has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    /// Path to the PEM private key of `cert_file`; absent when the user has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
}

/// The props as they arrive, read by serde in the shape of the JSON Schema
/// (which has already accepted them). Optional props stay optional here;
/// [`resolve`] applies every default.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Props {
    target: PropsTarget,
    #[serde(default)]
    client: PropsClient,
    statements: Vec<String>,
    #[serde(default)]
    execution: Option<Execution>,
    #[serde(default)]
    settings: BTreeMap<String, SettingValue>,
    #[serde(default)]
    on_delete: Option<OnDelete>,
    #[serde(default)]
    delete_statements: Vec<String>,
    #[serde(default)]
    verify: Option<VerifyMode>,
    #[serde(default)]
    wait_for_pod: PropsWaitForPod,
    #[serde(default, deserialize_with = "integral")]
    max_reconcile_passes: Option<u32>,
    #[serde(default, deserialize_with = "integral")]
    parallelism: Option<u32>,
    #[serde(default)]
    exec_mode: Option<ExecMode>,
    #[serde(default, deserialize_with = "integral")]
    statement_timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "integral")]
    max_statement_bytes: Option<u64>,
    #[serde(default)]
    retry: PropsRetry,
    #[serde(default)]
    lease: Option<PropsLease>,
    #[serde(default)]
    ledger: Option<PropsLedger>,
    #[serde(default)]
    rebuild: BTreeMap<String, PropsRebuildTable>,
    #[serde(default)]
    converge: Option<ConvergeMode>,
    #[serde(default)]
    allow_type_change: Vec<String>,
    #[serde(default)]
    kube_config: Option<KubeConfig>,
    #[serde(default)]
    ready_barrier: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PropsLease {
    On(bool),
    Options {
        #[serde(default, rename = "ttlSeconds", deserialize_with = "integral")]
        ttl_seconds: Option<u32>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PropsLedger {
    database: String,
    #[serde(default)]
    table: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PropsRebuildTable {
    cutover_column: String,
    #[serde(default)]
    keep_old: Option<bool>,
    #[serde(default)]
    verify: Option<RebuildVerify>,
    #[serde(default, deserialize_with = "integral")]
    cutover_delay_seconds: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PropsTarget {
    namespace: String,
    pod_selector: BTreeMap<String, String>,
    #[serde(default)]
    container: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PropsClient {
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    database: Option<String>,
    #[serde(default)]
    password_env: Option<String>,
    #[serde(default, deserialize_with = "integral")]
    port: Option<u16>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PropsWaitForPod {
    #[serde(default, deserialize_with = "integral")]
    timeout_ms: Option<u64>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PropsRetry {
    #[serde(default, deserialize_with = "integral")]
    max_attempts: Option<u32>,
    #[serde(default, deserialize_with = "integral")]
    backoff_ms: Option<u64>,
}

/// A non-negative integer. JSON Schema counts `3.0` as an integer, and a
/// JavaScript caller may deliver one as a float, so integral floats are
/// accepted; anything out of the target type's range is an error.
fn integral<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<u64>,
{
    use serde::de::Error;
    let Some(n) = Option::<Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let whole = match (n.as_u64(), n.as_f64()) {
        (Some(u), _) => u,
        // The bound keeps the cast exact; validation caps every field far below it.
        (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0 => f as u64,
        _ => return Err(D::Error::custom(format!("{n} is not a non-negative integer"))),
    };
    T::try_from(whole)
        .map(Some)
        .map_err(|_| D::Error::custom(format!("{whole} is out of range")))
}

/// Builds the resolved form of props that already passed validation: the
/// one place where every default is applied. Serde still refuses to guess: a
/// value of an unexpected shape is an error naming it, not a default, so a
/// gap between the schema and these types shows up as a failing test instead
/// of a wrong apply.
pub(crate) fn resolve(props: &Value) -> Result<ResolvedConfig, String> {
    let props = Props::deserialize(props).map_err(|e| e.to_string())?;
    Ok(ResolvedConfig {
        target: Target {
            namespace: props.target.namespace,
            pod_selector: props.target.pod_selector,
            container: props
                .target
                .container
                .unwrap_or_else(|| DEFAULT_CONTAINER.to_owned()),
        },
        client: ClientConfig {
            user: props.client.user.unwrap_or_else(|| DEFAULT_USER.to_owned()),
            database: props
                .client
                .database
                .unwrap_or_else(|| DEFAULT_DATABASE.to_owned()),
            password_env: props
                .client
                .password_env
                .unwrap_or_else(|| DEFAULT_PASSWORD_ENV.to_owned()),
            port: props.client.port.unwrap_or(DEFAULT_PORT),
        },
        statements: props.statements,
        execution: props.execution.unwrap_or(Execution::Fanout),
        settings: props.settings,
        on_delete: props.on_delete.unwrap_or(OnDelete::Retain),
        delete_statements: props.delete_statements,
        verify: props.verify.unwrap_or(VerifyMode::Fail),
        wait_for_pod: WaitForPod {
            timeout_ms: props
                .wait_for_pod
                .timeout_ms
                .unwrap_or(DEFAULT_WAIT_FOR_POD_TIMEOUT_MS),
        },
        max_reconcile_passes: props.max_reconcile_passes.unwrap_or(DEFAULT_MAX_RECONCILE_PASSES),
        parallelism: props.parallelism.unwrap_or(DEFAULT_PARALLELISM),
        exec_mode: props.exec_mode.unwrap_or_default(),
        statement_timeout_ms: props.statement_timeout_ms.unwrap_or(DEFAULT_STATEMENT_TIMEOUT_MS),
        max_statement_bytes: props.max_statement_bytes.unwrap_or(DEFAULT_MAX_STATEMENT_BYTES),
        retry: Retry {
            max_attempts: props.retry.max_attempts.unwrap_or(DEFAULT_RETRY_MAX_ATTEMPTS),
            backoff_ms: props.retry.backoff_ms.unwrap_or(DEFAULT_RETRY_BACKOFF_MS),
        },
        lease: match props.lease {
            None | Some(PropsLease::On(false)) => None,
            Some(PropsLease::On(true)) => Some(LeaseConfig {
                ttl_seconds: DEFAULT_LEASE_TTL_SECONDS,
            }),
            Some(PropsLease::Options { ttl_seconds }) => Some(LeaseConfig {
                ttl_seconds: ttl_seconds.unwrap_or(DEFAULT_LEASE_TTL_SECONDS),
            }),
        },
        ledger: props.ledger.map(|l| LedgerConfig {
            database: l.database,
            table: l.table.unwrap_or_else(|| DEFAULT_LEDGER_TABLE.to_owned()),
        }),
        rebuild: props
            .rebuild
            .into_iter()
            .map(|(table, r)| {
                let resolved = RebuildTable {
                    cutover_column: r.cutover_column,
                    keep_old: r.keep_old.unwrap_or(true),
                    verify: r.verify.unwrap_or(RebuildVerify::Count),
                    cutover_delay_seconds: r.cutover_delay_seconds.unwrap_or(DEFAULT_CUTOVER_DELAY_SECONDS),
                };
                (table, resolved)
            })
            .collect(),
        converge: props.converge.unwrap_or_default(),
        allow_type_change: props.allow_type_change,
        kube_config: props.kube_config,
        ready_barrier: props.ready_barrier,
    })
}
