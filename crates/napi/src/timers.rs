//! Waiting: the backoff between retries and the bounds on execs and pod lists.
//!
//! Natively that is tokio's timer. The WASM build waits through JavaScript's
//! `setTimeout` instead, handed over by the package's entry point: tokio's
//! timer on wasm32-wasip1-threads parks a runtime worker (a Web Worker) with a
//! timeout, and with a timer pending the addon's calls back from the JS thread
//! deadlocked there (measured: the main thread stopped in the first exec).
//! Everything else still runs on napi's tokio runtime.

use std::future::Future;
#[cfg(target_family = "wasm")]
use std::sync::Arc;
use std::time::Duration;

use napi::Status;
use napi::bindgen_prelude::Promise;
use napi::threadsafe_function::ThreadsafeFunction;
use napi_derive::napi;

/// Timers for a binding that cannot use its own (the WASM build); the package's
/// entry point supplies them, the natively built addon ignores them.
#[napi(object, object_to_js = false)]
pub(crate) struct HostTimers {
    /// Resolves after `ms` milliseconds (`setTimeout`).
    #[napi(ts_type = "(ms: number) => Promise<void>")]
    // Weak: a lifecycle call that keeps these must not keep Node alive on its own.
    #[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
    pub sleep: ThreadsafeFunction<u32, Promise<()>, u32, Status, false, true>,
}

/// The timer a lifecycle call waits with.
#[derive(Clone)]
pub(crate) struct Timers {
    #[cfg(target_family = "wasm")]
    host: Arc<HostTimers>,
}

impl Timers {
    /// Natively: tokio's timer; `host` is ignored.
    #[cfg(not(target_family = "wasm"))]
    pub(crate) fn new(_host: Option<HostTimers>) -> Option<Self> {
        Some(Self::tokio())
    }

    /// tokio's timer. (Unit tests use this: anything touching `HostTimers`
    /// links napi's threadsafe-function symbols, which only Node provides.)
    #[cfg(not(target_family = "wasm"))]
    pub(crate) fn tokio() -> Self {
        Self {}
    }

    /// Under WASM: the host's timers, which the build cannot do without.
    #[cfg(target_family = "wasm")]
    pub(crate) fn new(host: Option<HostTimers>) -> Option<Self> {
        host.map(|host| Self { host: Arc::new(host) })
    }

    /// Resolves once `duration` has passed.
    pub(crate) async fn sleep(&self, duration: Duration) {
        #[cfg(not(target_family = "wasm"))]
        tokio::time::sleep(duration).await;
        #[cfg(target_family = "wasm")]
        {
            let ms = u32::try_from(duration.as_millis()).unwrap_or(u32::MAX);
            // A timer that cannot be set (the environment is closing) counts
            // as elapsed: every wait here is a bound, and a bound that never
            // fires would hang the call.
            if let Ok(promise) = self.host.sleep.call_async(ms).await {
                let _ = promise.await;
            }
        }
    }

    /// `work`'s output, or `None` when `duration` passed first (then `work` is dropped).
    pub(crate) async fn timeout<T>(&self, duration: Duration, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            biased;
            out = work => Some(out),
            () = self.sleep(duration) => None,
        }
    }
}
