//! An executor injected from JavaScript, adapted to the core's transport traits.
//!
//! The spec's runtime-only `executor` prop lets a caller list pods and run
//! execs itself (tests, embedding). Its two functions are turned into
//! threadsafe functions so the reconcile logic, which runs on the tokio
//! runtime, can call them and await the promises they return. A rejected
//! promise (or a throw) is a transport failure, which the core retries.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use clickhouse_schema_core::transport::{
    ExecOutput, ExecRequest, PodInfo, PodLister, TransportError, TransportErrorKind,
};
use napi::Status;
use napi::bindgen_prelude::{Error, FnArgs, Promise};
use napi::threadsafe_function::ThreadsafeFunction;
use napi_derive::napi;

use crate::timers::Timers;

/// A pod as the injected `listPods` reports it.
#[napi(object, js_name = "ExecutorPod")]
pub(crate) struct JsPod {
    pub name: String,
    pub uid: Option<String>,
    pub ready: bool,
    pub phase: Option<String>,
    pub terminating: Option<bool>,
    pub containers: Vec<String>,
}

impl JsPod {
    /// The core's view of the pod (an unknown `terminating` is false).
    pub(crate) fn into_pod_info(self) -> PodInfo {
        PodInfo {
            name: self.name,
            uid: self.uid,
            ready: self.ready,
            phase: self.phase,
            terminating: self.terminating.unwrap_or(false),
            containers: self.containers,
        }
    }
}

/// What the injected `exec` receives. The statement is `stdin`; `command`
/// never contains it.
#[napi(object, js_name = "ExecutorExecRequest")]
pub(crate) struct JsExecRequest {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub command: Vec<String>,
    pub stdin: String,
}

/// What the injected `exec` resolves to once the command has run.
#[napi(object, js_name = "ExecutorExecResult")]
pub(crate) struct JsExecResult {
    pub stdout: String,
    pub stderr: String,
    /// The command's exit status: an integer from 0 to 255. Anything else is
    /// an unusable result (never read as success, never retried).
    pub exit_code: f64,
}

type ListArgs = FnArgs<(String, HashMap<String, String>)>;
type ListFn = ThreadsafeFunction<ListArgs, Promise<Vec<JsPod>>, ListArgs, Status, false>;
type ExecFn = ThreadsafeFunction<JsExecRequest, Promise<JsExecResult>, JsExecRequest, Status, false>;

/// The runtime-only `executor` prop: lists pods and runs execs in place of the
/// Kubernetes API. Both functions are called without `this`.
#[napi(object, object_to_js = false)]
pub(crate) struct ClickHouseExecutor {
    #[napi(ts_type = "(namespace: string, selector: Record<string, string>) => Promise<Array<ExecutorPod>>")]
    pub list_pods: ListFn,
    /// A rejected promise is a transport failure (retried); a command that
    /// ran and failed resolves with its non-zero `exitCode`.
    #[napi(ts_type = "(request: ExecutorExecRequest) => Promise<ExecutorExecResult>")]
    pub exec: ExecFn,
}

fn js_failure(what: &str, err: Error) -> TransportError {
    TransportError::new(
        TransportErrorKind::Transient,
        format!(
            "the injected executor's {what} failed: {}",
            rejection_text(&err.reason)
        ),
    )
}

/// A rejection's text: an `Error`'s message, a string as it is. Node-API
/// gives a native addon no text for any other rejection value (the package's
/// TypeScript entry point describes those before they get here).
fn rejection_text(reason: &str) -> String {
    if reason.is_empty() {
        "it rejected without a message; reject with an Error that says what failed".to_owned()
    } else {
        reason.to_owned()
    }
}

/// The exit code an injected executor reported, when it is one: an integer
/// from 0 to 255 (a process's exit status).
fn exit_code(reported: f64) -> Result<i32, TransportError> {
    if reported.fract() == 0.0 && (0.0..=255.0).contains(&reported) {
        Ok(reported as i32)
    } else {
        Err(TransportError::new(
            TransportErrorKind::InvalidResponse,
            format!(
                "the injected executor's exec resolved with exitCode {reported}, which is not an exit status \
                 (an integer from 0 to 255)"
            ),
        ))
    }
}

/// No Lease API: the lease prop needs the Kubernetes API (the core says so).
impl clickhouse_schema_core::transport::LeaseApi for ClickHouseExecutor {}

impl PodLister for ClickHouseExecutor {
    fn list_pods(
        &self,
        namespace: &str,
        selector: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<PodInfo>, TransportError>> + Send {
        let args: ListArgs = (namespace.to_owned(), selector.clone().into_iter().collect()).into();
        async move {
            let promise = self
                .list_pods
                .call_async_catch(args)
                .await
                .map_err(|e| js_failure("listPods", e))?;
            let pods = promise.await.map_err(|e| js_failure("listPods", e))?;
            Ok(pods.into_iter().map(JsPod::into_pod_info).collect())
        }
    }
}

impl ClickHouseExecutor {
    /// Runs `request` through the injected `exec`, abandoning it after the
    /// request's timeout on `timers`.
    pub(crate) fn exec_within(
        &self,
        timers: &Timers,
        request: ExecRequest,
    ) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let timers = timers.clone();
        let timeout: Duration = request.timeout;
        let js_request = JsExecRequest {
            namespace: request.namespace,
            pod: request.pod,
            container: request.container,
            command: request.command,
            stdin: request.stdin,
        };
        async move {
            let run = async {
                let promise = self
                    .exec
                    .call_async_catch(js_request)
                    .await
                    .map_err(|e| js_failure("exec", e))?;
                promise.await.map_err(|e| js_failure("exec", e))
            };
            match timers.timeout(timeout, run).await {
                Some(Ok(result)) => Ok(ExecOutput {
                    exit_code: exit_code(result.exit_code)?,
                    stdout: result.stdout,
                    stderr: result.stderr,
                }),
                Some(Err(err)) => Err(err),
                None => Err(TransportError::new(
                    TransportErrorKind::Timeout,
                    format!(
                        "the injected executor's exec did not settle within {}ms",
                        timeout.as_millis()
                    ),
                )),
            }
        }
    }
}
