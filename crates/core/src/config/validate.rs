//! Props validation.
//!
//! Two layers, one report:
//!
//! 1. `schema/props.schema.json` — the same file the npm package ships to
//!    editors and the TypeScript layer — checks shapes, types, ranges and
//!    patterns. Its raw errors are rewritten into plain language with user
//!    paths; the wording comes from each schema node's `errorMessage` map
//!    (ajv-errors layout) so the text lives next to the rule it explains.
//! 2. Rules the schema leaves to code: the onDelete/deleteStatements pairing,
//!    the ON CLUSTER check under `execution.mode: 'onCluster'`, and the
//!    explanation of the execution union (a `oneOf` failure by itself only
//!    says "neither branch matched").
//!
//! Every problem goes into one [`ClickHouseSchemaError`] so a user fixes them
//! all in one round instead of one per deploy.

use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{JsonType, ValidationError, Validator};
use serde_json::{Map, Value};

use crate::config::{DEFAULT_MAX_STATEMENT_BYTES, KubeConfigOptions, ResolvedConfig, resolve};
use crate::config::{RebuildTable, RebuildVerify};
use crate::error::{ClickHouseSchemaError, ConfigIssue, ErrorKind};
use crate::rebuild::RebuildPlan;
use crate::sql::on_cluster;
use crate::sql::{client_options, statement_rules};
use serde::Deserialize;

/// The props schema, verbatim as shipped in the npm package.
pub const PROPS_SCHEMA: &str = include_str!("../../../../schema/props.schema.json");

struct Compiled {
    schema: Value,
    validator: Validator,
}

/// Compiled once per process: compiling costs far more than validating.
fn compiled() -> Result<&'static Compiled, &'static str> {
    static COMPILED: OnceLock<Result<Compiled, String>> = OnceLock::new();
    COMPILED
        .get_or_init(|| {
            let schema: Value =
                serde_json::from_str(PROPS_SCHEMA).map_err(|e| format!("props schema is not JSON: {e}"))?;
            let validator = jsonschema::validator_for(&schema)
                .map_err(|e| format!("props schema does not compile: {e}"))?;
            Ok(Compiled { schema, validator })
        })
        .as_ref()
        .map_err(String::as_str)
}

/// Validates `props` for the resource named `resource_id` and returns them
/// with every default applied.
pub fn validate(resource_id: &str, props: &Value) -> Result<ResolvedConfig, ClickHouseSchemaError> {
    let Some(object) = props.as_object() else {
        let issue = ConfigIssue {
            path: String::new(),
            reason: format!("props must be an object, not {}", describe_type(props)),
        };
        return Err(ClickHouseSchemaError::invalid_config(resource_id, vec![issue]));
    };
    let compiled = compiled().map_err(|e| internal(resource_id, e))?;

    let mut issues = Vec::new();
    // Valid props are the common case; `is_valid` short-circuits and skips
    // building error values, which keeps a passing validation cheap.
    if !compiled.validator.is_valid(props) {
        let mut execution_explained = false;
        let mut translated: Vec<(ConfigIssue, bool)> = Vec::new();
        for error in compiled.validator.iter_errors(props) {
            let is_type = matches!(error.kind(), ValidationErrorKind::Type { .. });
            let mut fresh = Vec::new();
            translate(
                &error,
                &compiled.schema,
                object,
                &mut execution_explained,
                &mut fresh,
            );
            translated.extend(fresh.into_iter().map(|i| (i, is_type)));
        }
        // A value of the wrong type also fails the other rules at its path (an
        // enum, say); the type is the one problem worth stating.
        let wrong_type: std::collections::HashSet<String> = translated
            .iter()
            .filter(|(_, is_type)| *is_type)
            .map(|(i, _)| i.path.clone())
            .collect();
        issues.extend(
            translated
                .into_iter()
                .filter(|(i, is_type)| *is_type || !wrong_type.contains(&i.path))
                .map(|(i, _)| i),
        );
    }
    cross_field_rules(object, &mut issues);

    if !issues.is_empty() {
        dedup(&mut issues);
        // Schema order is an implementation detail; the Props table order is what users read.
        issues.sort_by_key(|i| prop_rank(&i.path));
        return Err(ClickHouseSchemaError::invalid_config(resource_id, issues));
    }
    resolve(props).map_err(|e| {
        internal(
            resource_id,
            &format!("props passed the schema but could not be resolved ({e})"),
        )
    })
}

fn internal(resource_id: &str, detail: &str) -> ClickHouseSchemaError {
    ClickHouseSchemaError::new(
        ErrorKind::Internal,
        format!("ClickHouseSchema '{resource_id}': internal error while validating props: {detail}"),
    )
    .with_resource_id(resource_id)
}

fn issue(path: impl Into<String>, reason: impl Into<String>) -> ConfigIssue {
    ConfigIssue {
        path: path.into(),
        reason: reason.into(),
    }
}

const PROP_ORDER: &[&str] = &[
    "target",
    "client",
    "statements",
    "execution",
    "settings",
    "onDelete",
    "deleteStatements",
    "verify",
    "waitForPod",
    "maxReconcilePasses",
    "parallelism",
    "execMode",
    "statementTimeoutMs",
    "maxStatementBytes",
    "retry",
    "lease",
    "ledger",
    "rebuild",
    "converge",
    "allowTypeChange",
    "kubeConfig",
    "executor",
    "readyBarrier",
];

/// Position of the issue's top-level prop in [`PROP_ORDER`]; the whole-props
/// issue first, unknown props last.
fn prop_rank(path: &str) -> usize {
    if path.is_empty() {
        return 0;
    }
    let top = path.split(['.', '[']).next().unwrap_or(path);
    PROP_ORDER
        .iter()
        .position(|p| *p == top)
        .map_or(PROP_ORDER.len() + 1, |i| i + 1)
}

fn dedup(issues: &mut Vec<ConfigIssue>) {
    let mut seen = std::collections::HashSet::new();
    issues.retain(|i| seen.insert((i.path.clone(), i.reason.clone())));
}

// ---------------------------------------------------------------------------
// Schema errors -> issues
// ---------------------------------------------------------------------------

/// Objects whose keys are user data (labels, setting names) rather than prop
/// names; their keys are rendered in brackets so any character reads unambiguously.
const MAP_PATHS: &[&[&str]] = &[&["target", "podSelector"], &["settings"], &["rebuild"]];

fn translate(
    error: &ValidationError<'_>,
    schema: &Value,
    props: &Map<String, Value>,
    execution_explained: &mut bool,
    issues: &mut Vec<ConfigIssue>,
) {
    let segments: Vec<Segment> = error
        .instance_path()
        .segments()
        .map(|s| match s {
            LocationSegment::Property(p) => Segment::Key(p.into_owned()),
            LocationSegment::Index(i) => Segment::Index(i),
        })
        .collect();

    // The execution union gets one explanation written from the value itself:
    // jsonschema can only report that neither branch matched.
    if matches!(segments.first(), Some(Segment::Key(k)) if k == "execution") {
        if !*execution_explained {
            *execution_explained = true;
            explain_execution(props.get("execution"), issues);
        }
        return;
    }

    // The kubeConfig union: jsonschema reports that no form matched, with each
    // form's own errors; the form the value is meant as (an Alchemy connection
    // has `auth`, a cluster resource `connection`) gives the ones worth saying.
    if let (ValidationErrorKind::AnyOf { context }, [Segment::Key(k)]) = (error.kind(), segments.as_slice())
        && k == "kubeConfig"
    {
        match props.get("kubeConfig") {
            Some(Value::Object(value)) => {
                let form = if value.contains_key("auth") {
                    KUBE_CONFIG_CONNECTION
                } else if value.contains_key("connection") {
                    KUBE_CONFIG_CLUSTER
                } else {
                    KUBE_CONFIG_OPTIONS
                };
                for inner in context.get(form).into_iter().flatten() {
                    translate(inner, schema, props, execution_explained, issues);
                }
            }
            _ => issues.push(issue(
                "kubeConfig",
                "must be an object: kubeconfig options, or an Alchemy Kubernetes connection",
            )),
        }
        return;
    }

    let schema_path = error.schema_path().as_str();
    let (node_pointer, _) = schema_path.rsplit_once('/').unwrap_or(("", schema_path));
    let node = schema.pointer(node_pointer);
    let keyword = error.kind().keyword();
    let custom = node
        .and_then(|n| n.get("errorMessage"))
        .and_then(|m| m.get(keyword))
        .and_then(Value::as_str);
    let path = render_path(&segments);

    match error.kind() {
        // An empty string fails both minLength and the pattern; one message is enough.
        ValidationErrorKind::Pattern { .. }
            if error.instance().as_str() == Some("")
                && node.is_some_and(|n| n.get("minLength").is_some()) => {}
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            for key in unexpected {
                let mut child = segments.clone();
                child.push(Segment::Key(key.clone()));
                issues.push(issue(
                    render_path(&child),
                    unexpected_key_reason(&segments, key, node),
                ));
            }
        }
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            let mut child = segments.clone();
            child.push(Segment::Key(name.to_owned()));
            let reason = node
                .and_then(|n| n.pointer("/errorMessage/required"))
                .and_then(|m| m.get(name))
                .and_then(Value::as_str)
                .unwrap_or("is required");
            issues.push(issue(render_path(&child), reason));
        }
        kind => {
            let reason = custom.map_or_else(|| generic_reason(kind), str::to_owned);
            issues.push(issue(path, reason));
        }
    }
}

/// The forms of `kubeConfig`, in the order of its `anyOf`.
const KUBE_CONFIG_OPTIONS: usize = 0;
const KUBE_CONFIG_CONNECTION: usize = 1;
const KUBE_CONFIG_CLUSTER: usize = 2;

#[derive(Debug, Clone)]
enum Segment {
    Key(String),
    Index(usize),
}

/// Renders an instance location the way a user writes it in TypeScript:
/// `client.port`, `statements[1]`, `target.podSelector["app/x"]`.
fn render_path(segments: &[Segment]) -> String {
    let mut out = String::new();
    for (i, segment) in segments.iter().enumerate() {
        match segment {
            Segment::Index(n) => {
                out.push('[');
                out.push_str(&n.to_string());
                out.push(']');
            }
            Segment::Key(k) => {
                if !is_map(&segments[..i]) && is_identifier(k) {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                } else {
                    out.push('[');
                    out.push_str(&quote(k));
                    out.push(']');
                }
            }
        }
    }
    out
}

fn is_map(parent: &[Segment]) -> bool {
    MAP_PATHS.iter().any(|map| {
        map.len() == parent.len()
            && map
                .iter()
                .zip(parent)
                .all(|(want, got)| matches!(got, Segment::Key(k) if k == want))
    })
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// A double-quoted string literal; JSON escaping keeps control characters and
/// quotes in a key from garbling the message.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

fn unexpected_key_reason(parent: &[Segment], key: &str, node: Option<&Value>) -> String {
    let parent_path: Vec<&str> = parent
        .iter()
        .map(|s| match s {
            Segment::Key(k) => k.as_str(),
            Segment::Index(_) => "",
        })
        .collect();
    match parent_path.as_slice() {
        ["target", "podSelector"] => match label_key_problem(key) {
            Some(problem) => format!("is not a valid Kubernetes label key: {problem}"),
            None => "is not a valid Kubernetes label key".to_owned(),
        },
        ["settings"] => "is not a valid setting name: use lowercase letters, digits and '_', not starting \
                         with a digit (e.g. distributed_ddl_task_timeout)"
            .to_owned(),
        ["client"] if key.to_ascii_lowercase().contains("password") => {
            "is not accepted: there is no password prop, so a plaintext credential can never reach props or \
             state. Keep the password in an environment variable of the server container and name that \
             variable with client.passwordEnv (default CLICKHOUSE_PASSWORD)"
                .to_owned()
        }
        [] if key == "executor" => "is not a prop: the executor is runtime-only and goes in the options \
                                    argument, apply(id, props, previousState, { executor }) (likewise plan \
                                    and destroy); the Alchemy provider takes it from a Layer"
            .to_owned(),
        ["kubeConfig", "user"] if matches!(key, "token" | "certData" | "keyData") => {
            "is an inline credential and is not accepted in props; reference files with certFile/keyFile, \
             or point kubeConfig.kubeconfigPath/context at a kubeconfig that holds the credentials"
                .to_owned()
        }
        _ => {
            let allowed: Vec<&str> = node
                .and_then(|n| n.get("properties"))
                .and_then(Value::as_object)
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            if allowed.is_empty() {
                "is not a recognised option".to_owned()
            } else {
                format!(
                    "is not a recognised option; expected one of: {}",
                    allowed.join(", ")
                )
            }
        }
    }
}

fn generic_reason(kind: &ValidationErrorKind) -> String {
    match kind {
        ValidationErrorKind::Type { kind } => format!("must be {}", expected_types(kind)),
        ValidationErrorKind::MinLength { limit: 1 } => "must not be empty".to_owned(),
        ValidationErrorKind::MinLength { limit } => format!("must be at least {limit} characters long"),
        ValidationErrorKind::MaxLength { limit } => format!("must be at most {limit} characters long"),
        ValidationErrorKind::Minimum { limit } => format!("must be at least {limit}"),
        ValidationErrorKind::Maximum { limit } => format!("must be at most {limit}"),
        ValidationErrorKind::MinItems { .. } | ValidationErrorKind::MinProperties { .. } => {
            "must not be empty".to_owned()
        }
        ValidationErrorKind::Enum { options } => match options.as_array() {
            Some(options) => format!(
                "must be one of: {}",
                options
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "is not one of the accepted values".to_owned(),
        },
        ValidationErrorKind::Constant { expected_value } => format!("must be {expected_value}"),
        ValidationErrorKind::Pattern { .. } => "is not in the accepted format".to_owned(),
        ValidationErrorKind::FalseSchema => "is not allowed here".to_owned(),
        other => format!(
            "is not valid (fails the props schema's '{}' rule)",
            other.keyword()
        ),
    }
}

fn expected_types(kind: &TypeKind) -> String {
    let names: Vec<&str> = match kind {
        TypeKind::Single(t) => vec![type_name(*t)],
        TypeKind::Multiple(set) => set.iter().map(type_name).collect(),
    };
    names.join(" or ")
}

fn type_name(t: JsonType) -> &'static str {
    match t {
        JsonType::Array => "an array",
        JsonType::Boolean => "a boolean (true or false)",
        JsonType::Integer => "a whole number",
        JsonType::Null => "null",
        JsonType::Number => "a number",
        JsonType::Object => "an object",
        JsonType::String => "a string",
    }
}

fn describe_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------
// Explanations written in code
// ---------------------------------------------------------------------------

const EXECUTION_SHAPES: &str =
    "{ mode: 'fanout' } (the default) or { mode: 'onCluster', cluster: '<cluster name>' }";

/// Says exactly what is wrong with `execution`. Called only after the schema
/// rejected it, so it always adds at least one issue.
fn explain_execution(value: Option<&Value>, issues: &mut Vec<ConfigIssue>) {
    let before = issues.len();
    match value {
        Some(Value::Object(exec)) => {
            match exec.get("mode") {
                None => issues.push(issue(
                    "execution.mode",
                    format!("is required; execution must be {EXECUTION_SHAPES}"),
                )),
                Some(Value::String(mode)) if mode == "fanout" => {
                    if exec.contains_key("cluster") {
                        issues.push(issue(
                            "execution.cluster",
                            "is only used with mode 'onCluster'; remove it, or set mode: 'onCluster' and \
                             add ON CLUSTER to every statement",
                        ));
                    }
                }
                Some(Value::String(mode)) if mode == "onCluster" => match exec.get("cluster") {
                    None => issues.push(issue(
                        "execution.cluster",
                        "is required when mode is 'onCluster': name the cluster (from the server's \
                         remote_servers) that every statement's ON CLUSTER clause targets",
                    )),
                    Some(Value::String(c)) if c.is_empty() => issues.push(issue(
                        "execution.cluster",
                        "must not be empty: name the cluster every statement's ON CLUSTER clause targets",
                    )),
                    Some(Value::String(c)) if c.chars().any(char::is_control) => issues.push(issue(
                        "execution.cluster",
                        "must not contain control characters (newlines, tabs, NUL, ...)",
                    )),
                    Some(Value::String(_)) => {}
                    Some(other) => issues.push(issue(
                        "execution.cluster",
                        format!(
                            "must be a string naming the cluster, not {}",
                            describe_type(other)
                        ),
                    )),
                },
                Some(Value::String(mode)) => issues.push(issue(
                    "execution.mode",
                    format!(
                        "{} is not an execution mode; use 'fanout' or 'onCluster'",
                        quote(mode)
                    ),
                )),
                Some(other) => issues.push(issue(
                    "execution.mode",
                    format!(
                        "must be the string 'fanout' or 'onCluster', not {}",
                        describe_type(other)
                    ),
                )),
            }
            for key in exec.keys().filter(|k| *k != "mode" && *k != "cluster") {
                issues.push(issue(
                    render_path(&[Segment::Key("execution".into()), Segment::Key(key.clone())]),
                    "is not a recognised option; execution accepts only mode and cluster",
                ));
            }
        }
        Some(other) => issues.push(issue(
            "execution",
            format!("must be {EXECUTION_SHAPES}, not {}", describe_type(other)),
        )),
        None => {}
    }
    if issues.len() == before {
        issues.push(issue("execution", format!("must be {EXECUTION_SHAPES}")));
    }
}

/// Why `key` is not a Kubernetes label key, or `None` if it is one.
///
/// Mirrors the podSelector key pattern in the schema (a test holds the two
/// together); the schema decides validity, this only chooses the words.
pub(crate) fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((_, rest)) if rest.contains('/') => {
            return Some("it may contain at most one '/' (between the optional prefix and the name)".into());
        }
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("the prefix before '/' must not be empty".into());
        }
        if prefix.len() > 253 {
            return Some("the prefix before '/' is longer than 253 characters".into());
        }
        if !is_dns_subdomain(prefix) {
            return Some(
                "the prefix before '/' must be a DNS subdomain: lowercase letters, digits, '-' and '.', each \
                 dot-separated part starting and ending with a letter or digit"
                    .into(),
            );
        }
    }
    if name.is_empty() {
        return Some("the name must not be empty".into());
    }
    if name.len() > 63 {
        return Some("the name is longer than 63 characters".into());
    }
    if !is_label_token(name) {
        return Some(
            "the name must use letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
                .into(),
        );
    }
    None
}

fn is_dns_subdomain(s: &str) -> bool {
    s.split('.').all(|part| {
        let bytes = part.as_bytes();
        !bytes.is_empty()
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            && bytes[0] != b'-'
            && bytes[bytes.len() - 1] != b'-'
    })
}

fn is_label_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

// ---------------------------------------------------------------------------
// Cross-field rules
// ---------------------------------------------------------------------------

fn cross_field_rules(props: &Map<String, Value>, issues: &mut Vec<ConfigIssue>) {
    #[derive(PartialEq)]
    enum Teardown {
        Retain,
        Run,
    }
    // An invalid onDelete was already reported; guessing its intent here would
    // only add a second, speculative issue.
    let teardown = match props.get("onDelete") {
        None => Some(Teardown::Retain),
        Some(Value::String(s)) if s == "retain" => Some(Teardown::Retain),
        Some(Value::String(s)) if s == "run" => Some(Teardown::Run),
        Some(_) => None,
    };
    let has_delete = props.contains_key("deleteStatements");
    match teardown {
        Some(Teardown::Retain) if has_delete => {
            // Whatever else is wrong inside deleteStatements is moot: the fix is to remove it.
            issues.retain(|i| !i.path.starts_with("deleteStatements"));
            issues.push(issue(
                "deleteStatements",
                "would never run: onDelete is 'retain' (the default), which leaves the schema in place on \
                 destroy. Set onDelete: 'run' to execute these statements on destroy, or remove \
                 deleteStatements",
            ));
        }
        Some(Teardown::Run) if !has_delete => issues.push(issue(
            "deleteStatements",
            "is required when onDelete is 'run': list the statements that tear the schema down (e.g. \
             DROP TABLE IF EXISTS ...), or use onDelete: 'retain' to leave the data in place",
        )),
        _ => {}
    }

    if let Some(Value::Object(settings)) = props.get("settings") {
        // Malformed names were reported by the schema already.
        let well_formed = |name: &&String| {
            let mut chars = name.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
                && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        for name in settings.keys().filter(well_formed) {
            if let Some(reason) = client_options::conflict(name) {
                issues.push(issue(format!("settings[{}]", quote(name)), reason));
            }
        }
        // Every output this package reads (the ledger, the checks, the rebuild's reads, the
        // stop's counts) is TabSeparated with LF line ends; CRLF would fail each read as garbled.
        let crlf = "output_format_tsv_crlf_end_of_line";
        // The schema admits strings and numbers only.
        let on = |v: &Value| match v {
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(t) => !matches!(t.trim(), "0" | "false" | "False" | "FALSE" | ""),
            _ => false,
        };
        if settings.get(crlf).is_some_and(on) {
            issues.push(issue(
                format!("settings[{}]", quote(crlf)),
                "makes TabSeparated output end its lines with CRLF, which the package reads (ledger, checks, \
                 rebuilds, stops) with LF line ends; remove it",
            ));
        }
    }

    // Only a kubeConfig of the right shape: a malformed one was reported by the schema.
    if let Some(options) = props
        .get("kubeConfig")
        .and_then(|v| KubeConfigOptions::deserialize(v).ok())
    {
        issues.extend(options.combination_issues());
    }
    if let Some(issue) = props.get("kubeConfig").and_then(credential_in_connection) {
        issues.push(issue);
    }

    let max_bytes = max_statement_bytes(props);
    check_bytes(props, "statements", max_bytes, issues);
    if teardown == Some(Teardown::Run) {
        check_bytes(props, "deleteStatements", max_bytes, issues);
    }

    check_rebuild(props, issues);
    check_converge(props, issues);

    let fanout = on_cluster_name(props).is_none();
    check_statement_rules(props, "statements", max_bytes, fanout, issues);
    if teardown == Some(Teardown::Run) {
        check_statement_rules(props, "deleteStatements", max_bytes, fanout, issues);
    }

    if let Some(cluster) = on_cluster_name(props) {
        check_on_cluster(props, "statements", cluster, max_bytes, issues);
        if teardown == Some(Teardown::Run) {
            check_on_cluster(props, "deleteStatements", cluster, max_bytes, issues);
        }
    }
}

/// Each `rebuild` entry names a table the statements create with a MergeTree engine, and its
/// cut-over column is a DateTime or integer column of that declaration (see [`RebuildPlan::new`]).
/// Entries of the wrong shape were reported by the schema.
fn check_rebuild(props: &Map<String, Value>, issues: &mut Vec<ConfigIssue>) {
    // Every setting reaches the rebuild's reads too. One that cuts a result short without an
    // error would make the partitions, counts and receipts it reads incomplete on both sides
    // alike: verification would pass, and the swap would leave the other partitions behind.
    if let (Some(Value::Object(entries)), Some(Value::Object(settings))) =
        (props.get("rebuild"), props.get("settings"))
        && !entries.is_empty()
    {
        for (name, value) in settings {
            let cuts = matches!(name.as_str(), "limit" | "offset")
                || (name.ends_with("_overflow_mode") && value.as_str() == Some("break"));
            if cuts {
                issues.push(issue(
                    format!("settings[{}]", quote(name)),
                    "cuts query results short without an error, which would make the rebuild read only part \
                     of the table's partitions and counts (and swap without the rest); remove it while \
                     `rebuild` is set",
                ));
            }
        }
    }
    let (Some(Value::Object(entries)), Some(Value::Array(statements))) =
        (props.get("rebuild"), props.get("statements"))
    else {
        return;
    };
    let statements: Vec<String> = statements
        .iter()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect();
    let database = props
        .get("client")
        .and_then(|c| c.get("database"))
        .and_then(Value::as_str)
        .unwrap_or(crate::config::DEFAULT_DATABASE);
    for (key, entry) in entries {
        let Some(column) = entry.get("cutoverColumn").and_then(Value::as_str) else {
            continue;
        };
        let config = RebuildTable {
            cutover_column: column.to_owned(),
            keep_old: true,
            verify: RebuildVerify::Count,
            cutover_delay_seconds: crate::config::DEFAULT_CUTOVER_DELAY_SECONDS,
        };
        if let Err(found) = RebuildPlan::new(key, &config, &statements, database) {
            for (sub, reason) in found {
                issues.push(issue(format!("rebuild[{}]{sub}", quote(key)), reason));
            }
        }
    }
}

/// Convergence plans from the live-schema check, so it needs one; an allow list means nothing
/// without it.
fn check_converge(props: &Map<String, Value>, issues: &mut Vec<ConfigIssue>) {
    let additive = props.get("converge").and_then(Value::as_str) == Some("additive");
    if additive && props.get("verify").and_then(Value::as_str) == Some("off") {
        issues.push(issue(
            "converge",
            "'additive' plans from the live-schema check and verifies with it: set verify to 'fail' or 'warn'",
        ));
    }
    let allows = props
        .get("allowTypeChange")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if allows && !additive {
        issues.push(issue(
            "allowTypeChange",
            "only applies with converge: 'additive' (without it no column is altered)",
        ));
    }
}

/// An Alchemy connection whose auth kind carries the credential itself:
/// `token` (a bearer token) or `client-cert` (a private key). Props are
/// stored verbatim in Alchemy's state, so the credential would be too.
fn credential_in_connection(kube_config: &Value) -> Option<ConfigIssue> {
    let (connection, prefix) = match kube_config.get("connection") {
        Some(inner) if kube_config.get("auth").is_none() => (inner, "kubeConfig.connection"),
        _ => (kube_config, "kubeConfig"),
    };
    let what = match connection.pointer("/auth/kind").and_then(Value::as_str)? {
        "token" => "a bearer token",
        "client-cert" => "a client private key",
        _ => return None,
    };
    Some(issue(
        format!("{prefix}.auth.kind"),
        format!(
            "carries {what} in props, which Alchemy stores verbatim in its state; use Kubernetes.KubeConfig(...) \
             (a kubeconfig whose credentials, exec plugins included, stay in the file), an 'exec' connection, or \
             your cloud's cluster resource, whose adapter mints a short-lived token at each deploy"
        ),
    ))
}

/// `maxStatementBytes` when it is valid (the schema reports it otherwise), else the default.
fn max_statement_bytes(props: &Map<String, Value>) -> u64 {
    props
        .get("maxStatementBytes")
        .and_then(Value::as_u64)
        .filter(|n| *n >= 1)
        .unwrap_or(DEFAULT_MAX_STATEMENT_BYTES)
}

/// Each statement's size, and no NUL byte: the pod reads a statement into a shell variable before
/// the client starts (so that an input cut short runs nothing, see `command`), and shells drop NUL
/// bytes there, so a statement holding one could never arrive whole. ClickHouse's own parser has no
/// use for one outside a literal, where `'\0'` spells it.
fn check_bytes(props: &Map<String, Value>, field: &str, max_bytes: u64, issues: &mut Vec<ConfigIssue>) {
    let Some(Value::Array(statements)) = props.get(field) else {
        return;
    };
    for (index, statement) in statements.iter().enumerate() {
        let Some(sql) = statement.as_str() else {
            continue;
        };
        if sql.contains('\0') {
            issues.push(issue(
                format!("{field}[{index}]"),
                "holds a NUL byte (U+0000), which cannot reach the server through the pod's shell; \
                 write it as the escape '\\0' inside a string literal",
            ));
        }
        if sql.len() as u64 > max_bytes {
            issues.push(issue(
                format!("{field}[{index}]"),
                format!(
                    "is {} bytes, over maxStatementBytes ({max_bytes}); split it, or raise maxStatementBytes \
                     if a statement this large is intended",
                    sql.len()
                ),
            ));
        }
    }
}

/// One statement an entry, and (under fanout) no `Replicated` table whose path needs a UUID the
/// statement cannot give (see [`statement_rules`]).
fn check_statement_rules(
    props: &Map<String, Value>,
    field: &str,
    max_bytes: u64,
    fanout: bool,
    issues: &mut Vec<ConfigIssue>,
) {
    let Some(Value::Array(entries)) = props.get(field) else {
        return;
    };
    // Oversized and blank statements were reported already: lexing them gives no better message.
    fn lexable(v: &Value, max_bytes: u64) -> Option<&str> {
        v.as_str()
            .filter(|s| !s.trim().is_empty() && s.len() as u64 <= max_bytes)
    }
    let database = props
        .get("client")
        .and_then(|c| c.get("database"))
        .and_then(Value::as_str)
        .unwrap_or(crate::config::DEFAULT_DATABASE);
    // Databases are created by `statements` (deleteStatements tear them down).
    let declared: Vec<&str> = match props.get("statements") {
        Some(Value::Array(s)) => s.iter().filter_map(|v| lexable(v, max_bytes)).collect(),
        _ => Vec::new(),
    };
    for (index, sql) in entries.iter().enumerate() {
        let Some(sql) = lexable(sql, max_bytes) else {
            continue;
        };
        let path = format!("{field}[{index}]");
        if let Err(reason) = statement_rules::single_statement(sql) {
            issues.push(issue(path.clone(), reason));
        }
        if let Err(reason) = statement_rules::on_cluster_in_replicated_database(sql, &declared, database) {
            issues.push(issue(path.clone(), reason));
        }
        if fanout
            && let Err(reason) = statement_rules::fanout_in_replicated_database(sql, &declared, database)
        {
            issues.push(issue(path.clone(), reason));
        }
        if fanout && let Err(reason) = statement_rules::replicated_path_without_uuid(sql, &declared, database)
        {
            issues.push(issue(path, reason));
        }
    }
}

/// The configured cluster, only when `execution` is a well-formed onCluster
/// block; otherwise the execution issue already stands on its own.
fn on_cluster_name(props: &Map<String, Value>) -> Option<&str> {
    let exec = props.get("execution")?.as_object()?;
    if exec.get("mode")?.as_str()? != "onCluster" || exec.keys().any(|k| k != "mode" && k != "cluster") {
        return None;
    }
    let cluster = exec.get("cluster")?.as_str()?;
    (!cluster.is_empty() && !cluster.chars().any(char::is_control)).then_some(cluster)
}

fn check_on_cluster(
    props: &Map<String, Value>,
    field: &str,
    cluster: &str,
    max_bytes: u64,
    issues: &mut Vec<ConfigIssue>,
) {
    let Some(Value::Array(statements)) = props.get(field) else {
        return;
    };
    for (index, statement) in statements.iter().enumerate() {
        // Non-strings and blank statements were reported by the schema
        // already, oversized ones by `check_sizes`: lexing those costs time
        // and memory for no better message.
        let Some(sql) = statement
            .as_str()
            .filter(|s| !s.trim().is_empty() && s.len() as u64 <= max_bytes)
        else {
            continue;
        };
        if let Err(reason) = on_cluster::check_statement(field, index, sql, cluster) {
            issues.push(issue(
                format!("{field}[{index}]"),
                format!("must be cluster-wide under execution.mode 'onCluster' ({reason})"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn key_accepted_by_schema(key: &str) -> bool {
        let props = json!({
            "target": { "namespace": "ns", "podSelector": { key: "v" } },
            "statements": ["SELECT 1"],
        });
        validate("keys", &props).is_ok()
    }

    proptest! {
        // The schema's label-key pattern decides; label_key_problem only words
        // the rejection. They must agree, or a rejected key would be explained
        // as fine (or the other way round).
        #[test]
        fn label_key_explanation_agrees_with_the_schema(
            key in prop_oneof![
                "[a-zA-Z0-9._/ -]{0,12}",
                "[a-z0-9.-]{0,10}/[a-zA-Z0-9._-]{0,10}",
                ("[a-z]{250,256}", "[a-z]{1,3}").prop_map(|(p, n)| format!("{p}/{n}")),
                "[a-zA-Z0-9]{60,66}",
            ]
        ) {
            prop_assert_eq!(key_accepted_by_schema(&key), label_key_problem(&key).is_none(), "key {:?}", key);
        }
    }

    #[test]
    fn paths_render_like_typescript() {
        let seg = |s: &str| Segment::Key(s.into());
        assert_eq!(render_path(&[seg("client"), seg("port")]), "client.port");
        assert_eq!(
            render_path(&[seg("statements"), Segment::Index(1)]),
            "statements[1]"
        );
        assert_eq!(
            render_path(&[seg("target"), seg("podSelector"), seg("app")]),
            "target.podSelector[\"app\"]"
        );
        assert_eq!(
            render_path(&[seg("settings"), seg("max_threads")]),
            "settings[\"max_threads\"]"
        );
        assert_eq!(render_path(&[seg("weird key")]), "[\"weird key\"]");
        assert_eq!(render_path(&[seg("client"), seg("a\"b")]), "client[\"a\\\"b\"]");
    }

    #[test]
    fn the_schema_compiles() {
        assert!(compiled().is_ok());
    }
}
