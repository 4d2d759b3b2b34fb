//! The options argument of `apply`, `plan`, `verify` and `destroy`:
//! `{ executor?, connection?, onEvent?, signal? }`.
//!
//! Read on the JS thread before any work is spawned. The `AbortSignal` is
//! turned into the core's [`Cancel`]: a watch channel set from the signal's
//! abort callback (on the JS thread) and awaited by the run (on tokio's).

use std::future::Future;
use std::pin::Pin;

use clickhouse_schema_core::transport::{Cancel, Event, Events};
use clickhouse_schema_core::{ClickHouseSchemaError, ConfigIssue};
use napi::ValueType;
use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunction;
use napi_derive::napi;
use tokio::sync::watch;

use crate::js_connection::ConnectionFn;
use crate::js_executor::ClickHouseExecutor;
use crate::js_kubernetes::KubernetesApi;
use crate::timers::HostTimers;

/// The last argument of every lifecycle call. Everything here is
/// runtime-only: none of it is fingerprinted or recorded. A key not listed
/// here, or a value of another type, fails the call with `E_INVALID_CONFIG`
/// naming it (`options.<key>`) before anything is called.
/// Declared for `index.d.ts`; the values are read field by field.
#[allow(dead_code)]
#[napi(object, object_to_js = false)]
pub(crate) struct LifecycleOptions {
    /// Lists pods and runs execs in place of the Kubernetes API (tests,
    /// embedding). Without it the `kubeConfig` prop, else `KUBECONFIG` /
    /// `~/.kube/config`, else the in-cluster service account is used.
    pub executor: Option<ClickHouseExecutor>,
    /// Resolves the cluster of this call: called once when the call first needs
    /// the cluster, never for a destroy that retains. The Alchemy provider passes
    /// it for a `kubeConfig` that is an Alchemy Kubernetes connection, asking the
    /// cluster adapter of its auth kind; a caller may also pass it without a
    /// `kubeConfig` prop. The token and key it yields are used for this call
    /// only: never recorded, logged or fingerprinted; the recorded `clusterId`
    /// comes from the endpoint, CA and TLS switch. A rejection fails the call
    /// with `E_KUBERNETES_API`.
    #[napi(ts_type = "() => Promise<ResolvedClusterConnection>")]
    pub connection: Option<ConnectionFn>,
    /// Called with what happens as it happens (see `ClickHouseSchemaEvent`): pods
    /// selected, waits, each statement started and finished, retries, re-lists, the
    /// live-schema check. Events carry no statement text and no server output.
    /// Called asynchronously on the JS thread; its return value is ignored.
    #[napi(ts_type = "(event: ClickHouseSchemaEvent) => void")]
    pub on_event: Option<EventCallback>,
    /// Aborting it cancels the call: no statement starts after the abort, an
    /// exec in flight is closed, nothing is recorded, and the promise rejects
    /// with `E_CANCELLED`.
    #[napi(ts_type = "AbortSignal")]
    pub signal: Option<AbortSignal>,
    /// The Kubernetes API for a binding without a transport of its own (the
    /// WASM build): the package's entry point supplies it; the natively built
    /// addon ignores it.
    pub kubernetes: Option<KubernetesApi>,
    /// Timers for a binding that cannot use its own (the WASM build): the
    /// package's entry point supplies them; the natively built addon ignores them.
    pub timers: Option<HostTimers>,
}

/// What `options.onEvent` receives, as things happen (declared for `index.d.ts`;
/// the values are the core's events as JSON). Every event has `kind` and
/// `message` (one line, as a progress display shows it); the other fields
/// depend on `kind`:
/// - `podsSelected`: a fanout pass starts: `pass`, `pods` (those it applies),
///   `matching`, `skipped` (`{ pod, why: 'terminating' | 'finished' }`);
/// - `waiting`: pods not Ready yet (`pods`, empty when none matches) and
///   `remainingMs` of `waitForPod`;
/// - `statementStarted`: `pod`, `index`, `count`, `podsDone`, `podsTotal`;
/// - `statementFinished`: `pod`, `index`, `count`, `exitCode`, `durationMs`;
/// - `podDone`: `pod` ran the whole list (and its check and ledger write):
///   `podsDone` (this one included), `podsTotal`;
/// - `retry`: a transport failure retried: `pod` (absent for a pod list),
///   `index` (for a statement), `attempt`, `delayMs`;
/// - `relist`: the pods are listed again after `passes` passes;
/// - `verified`: the live-schema check on `pod` found its `objectCount`
///   objects as declared (`ok`);
/// - `schemaMismatch` (under `verify: 'warn'`): `objects` on `pod` are
///   missing or differ;
/// - `verificationFailed` (under `verify: 'warn'`): the check could not run on `pod`;
/// - `leaseWaiting`: another deploy (`holder`) holds the resource's `lease`; `remainingMs`
///   of `waitForPod` are left;
/// - `leaseTaken`: this call took the `lease` after `waitedMs`;
/// - `rebuild`: a step of a `table`'s rebuild: `step` (`check`, `prepare`, `dualWrite`,
///   `backfill`, `verify`, `swap`, `abandon`), with `pod`, `partition` and `rows` where they apply;
/// - `converge` (under `converge: 'additive'`): on `pod`, the `object`'s ALTERs ran (`action`
///   `alter`, `changes` in words), its live `column` the declaration lacks is kept
///   (`keptColumn`), a difference was left as it is (`refused`), or another replica of its
///   set ran its ALTERs and this pod waits for them to replicate (`replicated`).
///
/// Events carry no statement text and no server or transport output; only
/// indices, pod names, exit codes, timings and the redacted differences of a
/// `schemaMismatch`.
#[allow(dead_code)]
#[napi(object, object_to_js = false, object_from_js = false)]
pub(crate) struct ClickHouseSchemaEvent {
    #[napi(
        ts_type = "'podsSelected' | 'waiting' | 'statementStarted' | 'statementFinished' | 'podDone' | 'retry' | 'relist' | 'verified' | 'schemaMismatch' | 'verificationFailed' | 'leaseWaiting' | 'leaseTaken' | 'rebuild' | 'converge'"
    )]
    pub kind: String,
    pub message: String,
    pub pod: Option<String>,
    pub pods: Option<Vec<String>>,
    pub pass: Option<u32>,
    pub passes: Option<u32>,
    pub matching: Option<u32>,
    pub skipped: Option<Vec<clickhouse_schema_core::transport::SkippedPod>>,
    pub remaining_ms: Option<f64>,
    pub index: Option<u32>,
    pub count: Option<u32>,
    pub pods_done: Option<u32>,
    pub pods_total: Option<u32>,
    pub exit_code: Option<i32>,
    pub duration_ms: Option<f64>,
    pub attempt: Option<u32>,
    pub delay_ms: Option<f64>,
    pub object_count: Option<u32>,
    pub ok: Option<bool>,
    pub objects: Option<Vec<clickhouse_schema_core::live_schema::ObjectReport>>,
    pub lease: Option<String>,
    pub holder: Option<String>,
    pub waited_ms: Option<f64>,
    pub table: Option<String>,
    pub step: Option<String>,
    pub partition: Option<String>,
    pub rows: Option<f64>,
    pub object: Option<String>,
    #[napi(ts_type = "'alter' | 'keptColumn' | 'refused' | 'replicated'")]
    pub action: Option<String>,
    pub changes: Option<Vec<String>>,
    pub column: Option<String>,
}

type EventCallback = ThreadsafeFunction<serde_json::Value, (), serde_json::Value, Status, false>;

/// What a lifecycle call takes from its options.
pub(crate) struct Options {
    pub executor: Option<ClickHouseExecutor>,
    pub connection: Option<ConnectionFn>,
    pub events: JsEvents,
    pub cancel: SignalCancel,
    /// Only the WASM build reaches the Kubernetes API through it.
    #[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
    pub kubernetes: Option<KubernetesApi>,
    /// Only the WASM build waits through them.
    pub timers: Option<HostTimers>,
}

/// Reads `options` (`undefined` and `null` mean none). An unknown key or a
/// value of the wrong type is the call's `E_INVALID_CONFIG` (the inner
/// `Err`), naming each, before anything is read or called: a misspelt
/// `executor` must not quietly fall back to the ambient kubeconfig, which may
/// be another cluster. A field napi then fails to read rejects like napi's
/// own argument errors, naming the field.
pub(crate) fn read(
    env: &Env,
    id: &str,
    options: Option<Object<'_>>,
) -> Result<std::result::Result<Options, ClickHouseSchemaError>> {
    if let Some(options) = &options {
        let issues = check(options);
        if !issues.is_empty() {
            return Ok(Err(ClickHouseSchemaError::invalid_config(id, issues)));
        }
    }
    read_checked(env, options).map(Ok)
}

/// Whether a given option's value has the type it must have.
type IsValid = fn(&Unknown<'_>) -> bool;

/// What each option must be: its name, and a check of its value (never
/// `undefined` or `null`, which mean "not given") with what it expects.
const KNOWN: [(&str, IsValid, &str); 6] = [
    (
        "executor",
        |v| has_methods(v, &["listPods", "exec"]),
        "an object with the functions listPods and exec",
    ),
    (
        "connection",
        is_function,
        "a function returning a promise of the cluster connection",
    ),
    ("onEvent", is_function, "a function taking an event"),
    ("signal", is_abort_signal, "an AbortSignal"),
    (
        "kubernetes",
        |v| v.get_type().is_ok_and(|t| t == ValueType::Object),
        "the package's Kubernetes API object",
    ),
    (
        "timers",
        |v| has_methods(v, &["sleep"]),
        "an object with the function sleep",
    ),
];

/// Every unknown key and every value of the wrong type in `options`, by path.
fn check(options: &Object<'_>) -> Vec<ConfigIssue> {
    let mut issues = Vec::new();
    let keys = match Object::keys(options) {
        Ok(keys) => keys,
        Err(e) => {
            return vec![ConfigIssue {
                path: "options".to_owned(),
                reason: format!("could not be read: {}", e.reason),
            }];
        }
    };
    for key in keys {
        let path = format!("options.{key}");
        let Some((_, valid, expected)) = KNOWN.iter().find(|(name, _, _)| *name == key) else {
            let known: Vec<&str> = KNOWN.iter().map(|(name, _, _)| *name).collect();
            let hint = KNOWN
                .iter()
                .find(|(name, _, _)| similar(name, &key))
                .map(|(name, _, _)| format!(" (did you mean {name}?)"))
                .unwrap_or_default();
            issues.push(ConfigIssue {
                path,
                reason: format!(
                    "is not an option{hint}; the options are {}. Nothing was called",
                    known.join(", ")
                ),
            });
            continue;
        };
        let Ok(value) = options.get_named_property::<Unknown>(&key) else {
            issues.push(ConfigIssue {
                path,
                reason: "could not be read".to_owned(),
            });
            continue;
        };
        let absent = value
            .get_type()
            .is_ok_and(|t| matches!(t, ValueType::Undefined | ValueType::Null));
        if !absent && !valid(&value) {
            issues.push(ConfigIssue {
                path,
                reason: format!("must be {expected}, not {}", kind_of(&value)),
            });
        }
    }
    issues
}

fn is_function(value: &Unknown<'_>) -> bool {
    value.get_type().is_ok_and(|t| t == ValueType::Function)
}

/// An object (or function) whose `methods` are all functions.
fn has_methods(value: &Unknown<'_>, methods: &[&str]) -> bool {
    if !value
        .get_type()
        .is_ok_and(|t| matches!(t, ValueType::Object | ValueType::Function))
    {
        return false;
    }
    // SAFETY: `get_type` just reported an object or a function.
    let Ok(object) = (unsafe { value.cast::<Object>() }) else {
        return false;
    };
    methods.iter().all(|m| {
        object
            .get_named_property::<Unknown>(m)
            .is_ok_and(|f| is_function(&f))
    })
}

/// What an `AbortSignal` has that the call uses: `aborted`, and a way to hear of the abort.
fn is_abort_signal(value: &Unknown<'_>) -> bool {
    if !value.get_type().is_ok_and(|t| t == ValueType::Object) || !has_methods(value, &["addEventListener"]) {
        return false;
    }
    // SAFETY: `get_type` just reported an object.
    unsafe { value.cast::<Object>() }.is_ok_and(|o| {
        o.get_named_property::<Unknown>("aborted")
            .is_ok_and(|a| a.get_type().is_ok_and(|t| t == ValueType::Boolean))
    })
}

/// The JavaScript type of `value`, as `typeof` says it (and `an array`).
fn kind_of(value: &Unknown<'_>) -> &'static str {
    match value.get_type() {
        Ok(ValueType::Boolean) => "a boolean",
        Ok(ValueType::Number) => "a number",
        Ok(ValueType::String) => "a string",
        Ok(ValueType::Symbol) => "a Symbol",
        Ok(ValueType::BigInt) => "a BigInt",
        Ok(ValueType::Function) => "a function without them",
        Ok(ValueType::Object) => {
            // SAFETY: `get_type` just reported an object.
            if unsafe { value.cast::<Object>() }.is_ok_and(|o| o.is_array().unwrap_or(false)) {
                "an array"
            } else {
                "an object without them"
            }
        }
        _ => "another kind of value",
    }
}

/// A likely misspelling of `name`: the same letters ignoring case, or one
/// edit (a letter added, dropped, changed, or two swapped) away.
fn similar(name: &str, key: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (
        name.to_lowercase().chars().collect(),
        key.to_lowercase().chars().collect(),
    );
    if a == b {
        return true;
    }
    let (short, long) = if a.len() <= b.len() { (&a, &b) } else { (&b, &a) };
    match long.len() - short.len() {
        0 => {
            let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
            diff.len() == 1
                || (diff.len() == 2
                    && diff[1] == diff[0] + 1
                    && a[diff[0]] == b[diff[1]]
                    && a[diff[1]] == b[diff[0]])
        }
        1 => (0..long.len()).any(|skip| {
            long.iter()
                .enumerate()
                .filter(|&(i, _)| i != skip)
                .map(|(_, c)| c)
                .eq(short.iter())
        }),
        _ => false,
    }
}

/// `read` of options that passed `check`.
fn read_checked(env: &Env, options: Option<Object<'_>>) -> Result<Options> {
    let (tx, rx) = watch::channel(false);
    let Some(options) = options else {
        return Ok(Options {
            executor: None,
            connection: None,
            events: JsEvents(None),
            cancel: SignalCancel(rx),
            kubernetes: None,
            timers: None,
        });
    };
    let executor = get::<ClickHouseExecutor>(&options, "executor")
        .map_err(|e| Error::new(e.status, format!("options.executor: {}", e.reason)))?;
    let connection = get::<ConnectionFn>(&options, "connection")
        .map_err(|e| Error::new(e.status, format!("options.connection: {}", e.reason)))?;
    let kubernetes = get::<KubernetesApi>(&options, "kubernetes")
        .map_err(|e| Error::new(e.status, format!("options.kubernetes: {}", e.reason)))?;
    let on_event = get::<EventCallback>(&options, "onEvent")
        .map_err(|e| Error::new(e.status, format!("options.onEvent: {}", e.reason)))?;
    let timers = get::<HostTimers>(&options, "timers")
        .map_err(|e| Error::new(e.status, format!("options.timers: {}", e.reason)))?;
    if let Some(signal) = get::<Object>(&options, "signal")? {
        if signal.get::<bool>("aborted")?.unwrap_or(false) {
            tx.send_replace(true);
        } else {
            // SAFETY: `signal` is a live JS object on this thread; napi
            // checks that it can hold an abort registration.
            let abort = unsafe { AbortSignal::from_napi_value(env.raw(), signal.raw()) }
                .map_err(|e| Error::new(e.status, format!("options.signal: {}", e.reason)))?;
            abort.on_abort(move || {
                tx.send_replace(true);
            });
        }
    }
    Ok(Options {
        executor,
        connection,
        events: JsEvents(on_event),
        cancel: SignalCancel(rx),
        kubernetes,
        timers,
    })
}

/// The option `key`: `None` when absent, `undefined` or `null` (napi's own
/// `Option` reading takes only `undefined` for none).
fn get<T: FromNapiValue>(options: &Object<'_>, key: &str) -> Result<Option<T>> {
    let value = options.get::<Unknown>(key)?;
    match value {
        Some(v)
            if !v
                .get_type()
                .is_ok_and(|t| matches!(t, ValueType::Undefined | ValueType::Null)) =>
        {
            // SAFETY: a live value of this call's scope.
            unsafe { T::from_napi_value(options.value().env, v.raw()) }.map(Some)
        }
        _ => Ok(None),
    }
}

/// The core's view of an `AbortSignal`.
pub(crate) struct SignalCancel(watch::Receiver<bool>);

impl Cancel for SignalCancel {
    fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    fn cancelled(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let mut rx = self.0.clone();
        Box::pin(async move {
            // The sender lives with the signal; a signal collected unaborted never cancels.
            if rx.wait_for(|aborted| *aborted).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// The core's [`Events`], delivered to `options.onEvent` on the JS thread.
pub(crate) struct JsEvents(Option<EventCallback>);

impl Events for JsEvents {
    fn emit(&self, event: Event) {
        let Some(callback) = &self.0 else { return };
        // Serializing plain data cannot fail; an event that somehow does is dropped rather
        // than failing the run it only reports on.
        if let Ok(value) = serde_json::to_value(&event) {
            let _ = callback.call(
                value,
                napi::threadsafe_function::ThreadsafeFunctionCallMode::NonBlocking,
            );
        }
    }
}
