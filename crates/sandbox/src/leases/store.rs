//! The Lease objects the sandbox keeps, and kube-apiserver's semantics for them (see the
//! module above for the list): decoding and validation, resourceVersion preconditions, merge
//! patches, and the writes. The routes that serve them are the module above's.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::auth::COORDINATION;
use crate::pods::ts;
use crate::selector::is_dns_subdomain;
use crate::status;

pub(super) const API_VERSION: &str = "coordination.k8s.io/v1";
pub(super) const RESOURCE: &str = "leases";
/// How Status messages name the resource: `leases.coordination.k8s.io "x" not found`.
pub(super) const QUALIFIED: &str = "leases.coordination.k8s.io";
/// What follows `Operation cannot be fulfilled on ...:` when a resourceVersion is stale.
pub(super) const OPTIMISTIC_LOCK: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// The Lease objects by (namespace, name), each kept as the JSON the API returns.
#[derive(Default)]
pub(crate) struct Leases {
    objects: Mutex<BTreeMap<(String, String), Value>>,
}

/// One field error of a 422, as `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    field: String,
    reason: &'static str,
    /// Without the field: `Invalid value: 0: must be greater than 0`.
    message: String,
}

impl Cause {
    fn required(field: &str, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueRequired",
            message: format!("Required value: {detail}"),
        }
    }
    /// `value` as Go's field errors print it: strings quoted, numbers bare.
    fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {value}: {detail}"),
        }
    }
    fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
        }
    }
}

/// Why a lease request was refused; rendered as the apiserver's Status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    BadRequest(String),
    NotFound(String),
    AlreadyExists(String),
    /// `Operation cannot be fulfilled on leases.coordination.k8s.io "<name>": <why>`.
    Conflict {
        name: String,
        why: String,
    },
    /// A 422, where `kind` is how the apiserver names the kind there: `Lease` when validation fails,
    /// `leases` when the resourceVersion check does.
    Invalid {
        kind: &'static str,
        name: String,
        causes: Vec<Cause>,
    },
    UnsupportedMediaType(String),
}

fn details(name: &str) -> Value {
    json!({"name": name, "group": COORDINATION, "kind": RESOURCE})
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::BadRequest(m) => status::bad_request(&m),
            Refusal::NotFound(name) => status::failure(
                404,
                "NotFound",
                &format!("{QUALIFIED} \"{name}\" not found"),
                Some(details(&name)),
            ),
            Refusal::AlreadyExists(name) => status::failure(
                409,
                "AlreadyExists",
                &format!("{QUALIFIED} \"{name}\" already exists"),
                Some(details(&name)),
            ),
            Refusal::Conflict { name, why } => status::failure(
                409,
                "Conflict",
                &format!("Operation cannot be fulfilled on {QUALIFIED} \"{name}\": {why}"),
                Some(details(&name)),
            ),
            Refusal::Invalid { kind, name, causes } => {
                let errors: Vec<String> = causes
                    .iter()
                    .map(|c| format!("{}: {}", c.field, c.message))
                    .collect();
                // Go's aggregate error: one error bare, several in brackets.
                let joined = match errors.as_slice() {
                    [one] => one.clone(),
                    many => format!("[{}]", many.join(", ")),
                };
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                status::failure(
                    422,
                    "Invalid",
                    &format!("{kind}.{COORDINATION} \"{name}\" is invalid: {joined}"),
                    Some(json!({"name": name, "group": COORDINATION, "kind": kind, "causes": causes})),
                )
            }
            Refusal::UnsupportedMediaType(m) => status::failure(415, "UnsupportedMediaType", &m, None),
        }
    }
}

/// What the request's `fieldValidation` asks for unknown fields; the apiserver's default is Warn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

const TOP_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec"];
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];
const META_STRINGS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "creationTimestamp",
];
const SPEC_STRINGS: &[&str] = &[
    "holderIdentity",
    "preferredHolder",
    "strategy",
    "acquireTime",
    "renewTime",
];
const SPEC_INT32S: &[&str] = &["leaseDurationSeconds", "leaseTransitions"];

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The decoder's refusal of a wrongly typed field: a 400, before any validation.
fn type_error(value: &str, field: &str, go_type: &str) -> Refusal {
    Refusal::BadRequest(format!(
        "Lease in version \"v1\" cannot be handled as a Lease: json: cannot unmarshal {value} into Go struct field {field} of type {go_type}"
    ))
}

fn expect_string(v: &Value, field: &str) -> Result<(), Refusal> {
    match v {
        Value::Null | Value::String(_) => Ok(()),
        other => Err(type_error(json_type(other), field, "string")),
    }
}

fn expect_string_map(v: &Value, field: &str) -> Result<(), Refusal> {
    match v {
        Value::Null => Ok(()),
        Value::Object(m) => m.values().try_for_each(|x| match x {
            Value::String(_) => Ok(()),
            other => Err(type_error(json_type(other), field, "string")),
        }),
        other => Err(type_error(json_type(other), field, "map[string]string")),
    }
}

/// A body (or a patched object) as the apiserver's decoder sees it: a wrongly typed field is a 400
/// before validation; unknown fields are dropped and returned (`spec.foo`) for `fieldValidation`;
/// nulls mean absent.
pub(crate) fn decode(body: &Value) -> Result<(Value, Vec<String>), Refusal> {
    let Value::Object(top) = body else {
        return Err(Refusal::BadRequest(format!(
            "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            json_type(body)
        )));
    };
    let mut unknown = Vec::new();
    for key in top.keys().filter(|k| !TOP_FIELDS.contains(&k.as_str())) {
        unknown.push(key.clone());
    }
    for key in ["apiVersion", "kind"] {
        expect_string(
            &top.get(key).cloned().unwrap_or(Value::Null),
            &format!("Lease.{key}"),
        )?;
    }
    if let Some(v) = top
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty() && *v != API_VERSION)
    {
        return Err(Refusal::BadRequest(format!(
            "the API version in the data ({v}) does not match the expected API version ({API_VERSION})"
        )));
    }
    if let Some(k) = top
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty() && *k != "Lease")
    {
        return Err(Refusal::BadRequest(format!(
            "the object provided is unrecognized (must be of type Lease): kind \"{k}\""
        )));
    }
    let mut metadata = Map::new();
    match top.get("metadata").unwrap_or(&Value::Null) {
        Value::Null => {}
        Value::Object(m) => {
            for (k, v) in m {
                if !OBJECT_META_FIELDS.contains(&k.as_str()) {
                    unknown.push(format!("metadata.{k}"));
                    continue;
                }
                let field = format!("ObjectMeta.metadata.{k}");
                if META_STRINGS.contains(&k.as_str()) {
                    expect_string(v, &field)?;
                } else if k == "labels" || k == "annotations" {
                    expect_string_map(v, &field)?;
                }
                if !v.is_null() {
                    metadata.insert(k.clone(), v.clone());
                }
            }
        }
        other => return Err(type_error(json_type(other), "Lease.metadata", "v1.ObjectMeta")),
    }
    let mut spec = Map::new();
    match top.get("spec").unwrap_or(&Value::Null) {
        Value::Null => {}
        Value::Object(s) => {
            for (k, v) in s {
                let field = format!("LeaseSpec.spec.{k}");
                if SPEC_STRINGS.contains(&k.as_str()) {
                    expect_string(v, &field)?;
                } else if SPEC_INT32S.contains(&k.as_str()) {
                    match v {
                        Value::Null => {}
                        Value::Number(n) => {
                            if n.as_i64().and_then(|i| i32::try_from(i).ok()).is_none() {
                                return Err(type_error(&format!("number {n}"), &field, "int32"));
                            }
                        }
                        other => return Err(type_error(json_type(other), &field, "int32")),
                    }
                } else {
                    unknown.push(format!("spec.{k}"));
                    continue;
                }
                if !v.is_null() {
                    spec.insert(k.clone(), v.clone());
                }
            }
        }
        other => return Err(type_error(json_type(other), "Lease.spec", "v1.LeaseSpec")),
    }
    let decoded = json!({
        "apiVersion": API_VERSION,
        "kind": "Lease",
        "metadata": metadata,
        "spec": spec,
    });
    Ok((decoded, unknown))
}

/// Unknown fields under the request's `fieldValidation`: refused (Strict) or warnings (Warn).
pub(super) fn unknown_fields(unknown: Vec<String>, mode: FieldValidation) -> Result<Vec<String>, Refusal> {
    let each = || unknown.iter().map(|f| format!("unknown field \"{f}\""));
    match mode {
        _ if unknown.is_empty() => Ok(Vec::new()),
        FieldValidation::Strict => Err(Refusal::BadRequest(format!(
            "Lease in version \"v1\" cannot be handled as a Lease: strict decoding error: {}",
            each().collect::<Vec<_>>().join(", ")
        ))),
        FieldValidation::Warn => Ok(each().collect()),
        FieldValidation::Ignore => Ok(Vec::new()),
    }
}

pub(super) fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj["metadata"][key].as_str().unwrap_or("")
}

/// `ValidateLease`: the name (a DNS subdomain) and the spec's bounds.
fn validate(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = meta_str(obj, "name");
    if name.is_empty() {
        causes.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if !is_dns_subdomain(name) {
        causes.push(Cause::invalid(
            "metadata.name",
            &format!("{name:?}"),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ));
    }
    let spec = &obj["spec"];
    if let Some(d) = spec["leaseDurationSeconds"].as_i64().filter(|d| *d <= 0) {
        causes.push(Cause::invalid(
            "spec.leaseDurationSeconds",
            &d.to_string(),
            "must be greater than 0",
        ));
    }
    if let Some(t) = spec["leaseTransitions"].as_i64().filter(|t| *t < 0) {
        causes.push(Cause::invalid(
            "spec.leaseTransitions",
            &t.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    let set = |k: &str| spec[k].as_str().is_some_and(|s| !s.is_empty());
    if set("preferredHolder") && !set("strategy") {
        causes.push(Cause::forbidden(
            "spec.preferredHolder",
            "may only be specified if `strategy` is defined",
        ));
    }
    causes
}

/// The optimistic-concurrency check of an update, for a kind without unconditional updates: the
/// given resourceVersion must be there (422) and be the stored one (409).
pub(crate) fn check_resource_version(name: &str, given: &str, stored: &str) -> Result<(), Refusal> {
    let invalid = |field: &str, value: &str, detail: &str| Refusal::Invalid {
        kind: RESOURCE,
        name: name.to_string(),
        causes: vec![Cause::invalid(field, value, detail)],
    };
    let parsed = if given.is_empty() {
        0
    } else {
        given.parse::<u64>().map_err(|_| {
            invalid(
                "resourceVersion",
                &format!("{given:?}"),
                &format!("strconv.ParseUint: parsing {given:?}: invalid syntax"),
            )
        })?
    };
    if parsed == 0 {
        return Err(invalid(
            "metadata.resourceVersion",
            "0x0",
            "must be specified for an update",
        ));
    }
    if stored.parse::<u64>().ok() != Some(parsed) {
        return Err(Refusal::Conflict {
            name: name.to_string(),
            why: OPTIMISTIC_LOCK.to_string(),
        });
    }
    Ok(())
}

/// A failed storage precondition (DeleteOptions, or a uid in an update), in etcd3's words.
fn precondition_failed(ns: &str, name: &str, what: &str, wanted: &str, actual: &str) -> Refusal {
    Refusal::Conflict {
        name: name.to_string(),
        why: format!(
            "StorageError: invalid object, Code: 4, Key: /registry/leases/{ns}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {actual}"
        ),
    }
}

/// RFC 7386 JSON merge patch. With `strategic`, the strategic-merge-patch directives a Lease can
/// meet are honoured (`$patch: delete|replace` on a map; `$retainKeys`, `$setElementOrder/...` and
/// other `$` keys dropped); lists are replaced either way, as a Lease has none merged by key.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value, strategic: bool) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { unreachable!() };
    for (k, v) in p {
        if strategic && k.starts_with('$') {
            continue;
        }
        let directive = v.get("$patch").and_then(Value::as_str).filter(|_| strategic);
        match (v, directive) {
            (Value::Null, _) | (_, Some("delete")) => {
                t.remove(k);
            }
            (Value::Object(o), Some("replace")) => {
                let mut o = o.clone();
                o.remove("$patch");
                let mut fresh = Value::Object(Map::new());
                merge_patch(&mut fresh, &Value::Object(o), strategic);
                t.insert(k.clone(), fresh);
            }
            _ => merge_patch(t.entry(k.clone()).or_insert(Value::Null), v, strategic),
        }
    }
}

/// `generateName` plus five characters from the apiserver's alphabet (no vowels, no look-alikes).
fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let random = uuid::Uuid::new_v4();
    let suffix: String = random.as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// The stored form of a decoded object: system fields set, the rest (labels, annotations, owner
/// references, spec) as given; empty maps dropped as Go's `omitempty` does.
fn stored_object(decoded: &Value, ns: &str, name: &str, uid: &str, rv: u64, created: &str) -> Value {
    let mut meta = decoded["metadata"].as_object().cloned().unwrap_or_default();
    for k in [
        "selfLink",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
    ] {
        meta.remove(k);
    }
    for k in ["labels", "annotations", "ownerReferences", "finalizers"] {
        let empty = match meta.get(k) {
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            _ => false,
        };
        if empty {
            meta.remove(k);
        }
    }
    meta.insert("name".into(), json!(name));
    meta.insert("namespace".into(), json!(ns));
    meta.insert("uid".into(), json!(uid));
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    meta.insert("creationTimestamp".into(), json!(created));
    json!({
        "apiVersion": API_VERSION,
        "kind": "Lease",
        "metadata": meta,
        "spec": decoded["spec"].clone(),
    })
}

/// Two objects the same but for their resourceVersion: the write would change nothing.
fn unchanged(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

type Key = (String, String);

fn key(ns: &str, name: &str) -> Key {
    (ns.to_string(), name.to_string())
}

/// What a write did, for the status code: 201 when it created the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    Created,
    Updated,
}

/// The common end of update and patch: preconditions, validation, then the write (or none).
fn write_over(
    objects: &mut BTreeMap<Key, Value>,
    ns: &str,
    name: &str,
    stored: &Value,
    decoded: Value,
    rv: impl FnOnce() -> u64,
) -> Result<Value, Refusal> {
    let stored_uid = meta_str(stored, "uid");
    let uid = meta_str(&decoded, "uid");
    if !uid.is_empty() && uid != stored_uid {
        return Err(precondition_failed(ns, name, "UID", uid, stored_uid));
    }
    check_resource_version(
        name,
        meta_str(&decoded, "resourceVersion"),
        meta_str(stored, "resourceVersion"),
    )?;
    let causes = validate(&decoded);
    if !causes.is_empty() {
        return Err(Refusal::Invalid {
            kind: "Lease",
            name: name.to_string(),
            causes,
        });
    }
    let same_rv = meta_str(stored, "resourceVersion").parse::<u64>().unwrap_or(0);
    let created = meta_str(stored, "creationTimestamp");
    let candidate = stored_object(&decoded, ns, name, stored_uid, same_rv, created);
    if unchanged(&candidate, stored) {
        return Ok(stored.clone());
    }
    let obj = stored_object(&decoded, ns, name, stored_uid, rv(), created);
    objects.insert(key(ns, name), obj.clone());
    Ok(obj)
}

impl Leases {
    pub(crate) fn get(&self, ns: &str, name: &str) -> Option<Value> {
        lock(&self.objects).get(&key(ns, name)).cloned()
    }

    /// Every lease of `ns` (all namespaces with `None`), by namespace then name.
    pub(crate) fn list(&self, ns: Option<&str>) -> Vec<Value> {
        lock(&self.objects)
            .iter()
            .filter(|((n, _), _)| ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// POST: `decoded` is the body through `decode`; `rv` gives the next resourceVersion, called
    /// only when something is written.
    pub(crate) fn create(
        &self,
        ns: &str,
        mut decoded: Value,
        rv: impl FnOnce() -> u64,
    ) -> Result<Value, Refusal> {
        let given_ns = meta_str(&decoded, "namespace");
        if !given_ns.is_empty() && given_ns != ns {
            return Err(Refusal::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
                    .into(),
            ));
        }
        let generate = meta_str(&decoded, "generateName");
        if meta_str(&decoded, "name").is_empty() && !generate.is_empty() {
            decoded["metadata"]["name"] = json!(generate_name(generate));
        }
        let name = meta_str(&decoded, "name").to_string();
        let causes = validate(&decoded);
        if !causes.is_empty() {
            return Err(Refusal::Invalid {
                kind: "Lease",
                name,
                causes,
            });
        }
        let mut objects = lock(&self.objects);
        if objects.contains_key(&key(ns, &name)) {
            return Err(Refusal::AlreadyExists(name));
        }
        let uid = uuid::Uuid::new_v4().to_string();
        let obj = stored_object(&decoded, ns, &name, &uid, rv(), &ts(SystemTime::now()));
        objects.insert(key(ns, &name), obj.clone());
        Ok(obj)
    }

    /// PUT of `name`: the body's name and namespace must be the URL's; a missing lease is created.
    pub(crate) fn update(
        &self,
        ns: &str,
        name: &str,
        decoded: Value,
        rv: impl FnOnce() -> u64,
    ) -> Result<(Value, Written), Refusal> {
        let given = meta_str(&decoded, "name");
        if given != name {
            return Err(Refusal::BadRequest(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        let given_ns = meta_str(&decoded, "namespace");
        if !given_ns.is_empty() && given_ns != ns {
            return Err(Refusal::BadRequest(format!(
                "the namespace of the provided object ({given_ns}) does not match the namespace sent on the request ({ns})"
            )));
        }
        let mut objects = lock(&self.objects);
        let Some(stored) = objects.get(&key(ns, name)).cloned() else {
            drop(objects);
            let mut decoded = decoded;
            if let Some(m) = decoded["metadata"].as_object_mut() {
                m.remove("resourceVersion");
                m.remove("uid");
            }
            return self.create(ns, decoded, rv).map(|o| (o, Written::Created));
        };
        write_over(&mut objects, ns, name, &stored, decoded, rv).map(|o| (o, Written::Updated))
    }

    /// PATCH: `patch` merged into the stored object, which then goes through the decoder (so
    /// unknown fields it brings are returned) and the update checks.
    pub(crate) fn patch(
        &self,
        ns: &str,
        name: &str,
        patch: &Value,
        strategic: bool,
        mode: FieldValidation,
        rv: impl FnOnce() -> u64,
    ) -> Result<(Value, Vec<String>), Refusal> {
        if !patch.is_object() {
            return Err(Refusal::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_type(patch)
            )));
        }
        let mut objects = lock(&self.objects);
        let stored = objects
            .get(&key(ns, name))
            .cloned()
            .ok_or_else(|| Refusal::NotFound(name.to_string()))?;
        let mut merged = stored.clone();
        merge_patch(&mut merged, patch, strategic);
        let (decoded, unknown) = decode(&merged)?;
        let warnings = unknown_fields(unknown, mode)?;
        let given = meta_str(&decoded, "name");
        if given != name {
            return Err(Refusal::BadRequest(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        let given_ns = meta_str(&decoded, "namespace");
        if given_ns != ns {
            return Err(Refusal::BadRequest(format!(
                "the namespace of the provided object ({given_ns}) does not match the namespace sent on the request ({ns})"
            )));
        }
        let obj = write_over(&mut objects, ns, name, &stored, decoded, rv)?;
        Ok((obj, warnings))
    }

    /// DELETE with DeleteOptions' preconditions (uid first, then resourceVersion, as etcd3 checks).
    pub(crate) fn delete(
        &self,
        ns: &str,
        name: &str,
        uid: Option<&str>,
        resource_version: Option<&str>,
        rv: impl FnOnce() -> u64,
    ) -> Result<Value, Refusal> {
        let mut objects = lock(&self.objects);
        let stored = objects
            .get(&key(ns, name))
            .ok_or_else(|| Refusal::NotFound(name.to_string()))?;
        let stored_uid = meta_str(stored, "uid").to_string();
        if let Some(u) = uid.filter(|u| *u != stored_uid) {
            return Err(precondition_failed(ns, name, "UID", u, &stored_uid));
        }
        let stored_rv = meta_str(stored, "resourceVersion");
        if let Some(r) = resource_version.filter(|r| *r != stored_rv) {
            return Err(precondition_failed(ns, name, "ResourceVersion", r, stored_rv));
        }
        objects.remove(&key(ns, name));
        rv();
        Ok(json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": COORDINATION, "kind": RESOURCE, "uid": stored_uid},
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> impl FnMut() -> u64 {
        let mut n = 100;
        move || {
            n += 1;
            n
        }
    }

    fn lease(name: &str, holder: &str) -> Value {
        decode(&json!({
            "apiVersion": API_VERSION, "kind": "Lease",
            "metadata": {"name": name, "labels": {"app": "deploy"}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        }))
        .unwrap()
        .0
    }

    #[test]
    fn resource_versions_are_required_and_compared_as_numbers() {
        assert_eq!(check_resource_version("x", "7", "7"), Ok(()));
        assert_eq!(check_resource_version("x", "007", "7"), Ok(()));
        match check_resource_version("x", "6", "7") {
            Err(Refusal::Conflict { name, why }) => {
                assert_eq!(name, "x");
                assert_eq!(why, OPTIMISTIC_LOCK);
            }
            other => panic!("{other:?}"),
        }
        for missing in ["", "0"] {
            match check_resource_version("x", missing, "7") {
                Err(Refusal::Invalid { kind, causes, .. }) => {
                    assert_eq!(kind, "leases");
                    assert_eq!(causes[0].field, "metadata.resourceVersion");
                    assert_eq!(
                        causes[0].message,
                        "Invalid value: 0x0: must be specified for an update"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            check_resource_version("x", "abc", "7"),
            Err(Refusal::Invalid { .. })
        ));
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(
            &mut doc,
            &json!({"a": "z", "c": {"f": null, "h": 1}, "l": [3], "n": {"m": 1}}),
            false,
        );
        assert_eq!(
            doc,
            json!({"a": "z", "c": {"d": "e", "h": 1}, "l": [3], "n": {"m": 1}})
        );
        let mut scalar = json!({"a": 1});
        merge_patch(&mut scalar, &json!({"a": {"b": null, "c": 2}}), false);
        assert_eq!(scalar, json!({"a": {"c": 2}}));
    }

    #[test]
    fn strategic_directives_a_lease_can_meet() {
        let mut doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}});
        merge_patch(
            &mut doc,
            &json!({
                "$setElementOrder/items": [],
                "metadata": {"labels": {"$patch": "replace", "c": "3"}, "annotations": {"$patch": "delete"}},
            }),
            true,
        );
        assert_eq!(doc, json!({"metadata": {"labels": {"c": "3"}}}));
        // Without `strategic` the keys are plain data.
        let mut plain = json!({});
        merge_patch(&mut plain, &json!({"$k": 1}), false);
        assert_eq!(plain, json!({"$k": 1}));
    }

    #[test]
    fn decoding_drops_and_names_unknown_fields_and_refuses_wrong_types() {
        let (obj, unknown) = decode(&json!({
            "metadata": {"name": "x", "bogus": 1},
            "spec": {"holderIdentity": "a", "holder": "typo"},
            "status": {},
        }))
        .unwrap();
        assert_eq!(unknown, vec!["status", "metadata.bogus", "spec.holder"]);
        assert_eq!(obj["spec"], json!({"holderIdentity": "a"}));
        assert_eq!(
            unknown_fields(vec!["spec.holder".into()], FieldValidation::Strict),
            Err(Refusal::BadRequest(
                "Lease in version \"v1\" cannot be handled as a Lease: strict decoding error: unknown field \"spec.holder\"".into()
            ))
        );
        let bad = |body: Value| match decode(&body) {
            Err(Refusal::BadRequest(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(bad(json!({"spec": "x"})).ends_with("into Go struct field Lease.spec of type v1.LeaseSpec"));
        assert!(bad(json!({"spec": {"leaseDurationSeconds": "15"}})).contains(
            "cannot unmarshal string into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"
        ));
        assert!(bad(json!({"spec": {"holderIdentity": 3}})).contains("of type string"));
        assert!(bad(json!({"apiVersion": "v1"})).contains("does not match the expected API version"));
    }

    #[test]
    fn writes_follow_the_apiservers_rules() {
        let leases = Leases::default();
        let mut rv = counter();
        let created = leases.create("ns", lease("x", "a"), &mut rv).unwrap();
        assert_eq!(created["metadata"]["resourceVersion"], "101");
        assert_eq!(created["metadata"]["labels"]["app"], "deploy");
        assert_eq!(
            leases.create("ns", lease("x", "a"), &mut rv),
            Err(Refusal::AlreadyExists("x".into()))
        );
        let mut stale = lease("x", "b");
        stale["metadata"]["resourceVersion"] = json!("100");
        assert!(matches!(
            leases.update("ns", "x", stale, &mut rv),
            Err(Refusal::Conflict { .. })
        ));
        let mut current = lease("x", "b");
        current["metadata"]["resourceVersion"] = json!("101");
        let (updated, written) = leases.update("ns", "x", current.clone(), &mut rv).unwrap();
        assert_eq!(written, Written::Updated);
        assert_eq!(updated["metadata"]["resourceVersion"], "102");
        assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
        assert_eq!(updated["spec"]["holderIdentity"], "b");
        // The same content again is no write: the resourceVersion stays.
        current["metadata"]["resourceVersion"] = json!("102");
        let (again, _) = leases.update("ns", "x", current, &mut rv).unwrap();
        assert_eq!(again["metadata"]["resourceVersion"], "102");
        // A PUT of a missing lease creates it.
        let (made, written) = leases.update("ns", "y", lease("y", "c"), &mut rv).unwrap();
        assert_eq!(written, Written::Created);
        assert_eq!(made["metadata"]["resourceVersion"], "103");

        let (patched, _) = leases
            .patch(
                "ns",
                "x",
                &json!({"spec": {"holderIdentity": "c"}}),
                true,
                FieldValidation::Strict,
                &mut rv,
            )
            .unwrap();
        assert_eq!(patched["metadata"]["resourceVersion"], "104");
        assert!(matches!(
            leases.patch(
                "ns",
                "x",
                &json!({"metadata": {"resourceVersion": "101"}, "spec": {"holderIdentity": "d"}}),
                false,
                FieldValidation::Strict,
                &mut rv,
            ),
            Err(Refusal::Conflict { .. })
        ));

        match leases.delete("ns", "x", None, Some("101"), &mut rv) {
            Err(Refusal::Conflict { why, .. }) => assert!(
                why.ends_with("Precondition failed: ResourceVersion in precondition: 101, ResourceVersion in object meta: 104"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        let status = leases.delete("ns", "x", None, Some("104"), &mut rv).unwrap();
        assert_eq!(status["status"], "Success");
        assert_eq!(
            leases.delete("ns", "x", None, None, &mut rv),
            Err(Refusal::NotFound("x".into()))
        );
    }

    #[test]
    fn invalid_leases_are_422_with_causes() {
        let leases = Leases::default();
        let mut rv = counter();
        let mut body = lease("", "a");
        body["spec"]["leaseDurationSeconds"] = json!(0);
        match leases.create("ns", body, &mut rv) {
            Err(Refusal::Invalid { kind, causes, .. }) => {
                assert_eq!(kind, "Lease");
                let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
                assert_eq!(fields, ["metadata.name", "spec.leaseDurationSeconds"]);
            }
            other => panic!("{other:?}"),
        }
        let mut other_ns = lease("x", "a");
        other_ns["metadata"]["namespace"] = json!("elsewhere");
        assert!(matches!(
            leases.create("ns", other_ns, &mut rv),
            Err(Refusal::BadRequest(_))
        ));
        let mut generated = lease("", "a");
        generated["metadata"]["generateName"] = json!("deploy-");
        let made = leases.create("ns", generated, &mut rv).unwrap();
        assert_eq!(meta_str(&made, "name").len(), "deploy-".len() + 5);
    }
}
