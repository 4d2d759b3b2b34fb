//! The real clock, the same in both builds: natively, and under WASM, where
//! `Instant` and the wall clock are WASI's clocks and tokio's timers run on
//! napi's runtime. It lives in the binding rather than in the kube-rs
//! transport because the WASM build has no kube-rs and still needs it.

use std::time::{Duration, Instant};

use clickhouse_schema_core::transport::Clock;

use crate::timers::Timers;

/// Monotonic time from the moment the clock was created (budgets must not
/// jump with the wall clock), wall time for `appliedAt`, the call's timers for
/// sleeping.
#[derive(Clone)]
pub(crate) struct SystemClock {
    origin: Instant,
    timers: Timers,
}

impl SystemClock {
    /// A clock whose `now` counts from this call.
    pub(crate) fn new(timers: Timers) -> Self {
        Self {
            origin: Instant::now(),
            timers,
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn now_iso8601(&self) -> String {
        iso8601(jiff::Timestamp::now())
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        let timers = self.timers.clone();
        async move { timers.sleep(duration).await }
    }
}

/// RFC 3339 UTC with exactly three fractional digits: `2026-11-29T23:59:01.123Z`.
/// A fixed width keeps the values sortable as text.
pub(crate) fn iso8601(t: jiff::Timestamp) -> String {
    // Truncate rather than round, so a time never reads as later than it was.
    let millis = t.as_millisecond();
    let t = jiff::Timestamp::from_millisecond(millis).unwrap_or(t);
    format!("{t:.3}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native_timers() -> Timers {
        Timers::tokio()
    }

    #[test]
    fn formats_utc_with_milliseconds() {
        let t: jiff::Timestamp = "2026-11-29T23:59:01.123456789Z".parse().expect("valid");
        assert_eq!(iso8601(t), "2026-11-29T23:59:01.123Z");
        let t: jiff::Timestamp = "2026-01-02T03:04:05Z".parse().expect("valid");
        assert_eq!(iso8601(t), "2026-01-02T03:04:05.000Z");
        let t: jiff::Timestamp = "1999-12-31T23:59:59.9999Z".parse().expect("valid");
        assert_eq!(iso8601(t), "1999-12-31T23:59:59.999Z");
    }

    #[test]
    fn now_is_monotonic_and_wall_time_is_current() {
        let c = SystemClock::new(native_timers());
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        let text = c.now_iso8601();
        assert_eq!(text.len(), "2026-11-29T23:59:01.123Z".len(), "{text}");
        assert!(text.ends_with('Z'));
        let parsed: jiff::Timestamp = text.parse().expect("round-trips");
        let skew = jiff::Timestamp::now().duration_since(parsed);
        assert!(skew.as_secs() < 5, "{text}");
    }

    #[tokio::test]
    async fn sleep_waits() {
        let c = SystemClock::new(native_timers());
        let before = c.now();
        c.sleep(Duration::from_millis(20)).await;
        assert!(c.now() - before >= Duration::from_millis(20));
    }
}
