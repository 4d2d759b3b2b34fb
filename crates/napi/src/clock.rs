//! The real clock, the same in both builds: natively, and under WASM, where
//! `Instant` and the wall clock are WASI's clocks and tokio's timers run on
//! napi's runtime. It lives in the binding rather than in the kube-rs
//! transport because the WASM build has no kube-rs and still needs it.

use std::time::{Duration, Instant};

use clickhouse_schema_core::transport::Clock;

use crate::timers::Timers;

/// Monotonic time from the moment the clock was created (budgets must not
/// jump with the wall clock), the same counting suspend for the lease
/// holder's deadline, wall time for `appliedAt`, the call's timers for
/// sleeping.
#[derive(Clone)]
pub(crate) struct SystemClock {
    origin: Instant,
    suspend_origin: Duration,
    timers: Timers,
}

impl SystemClock {
    /// A clock whose `now` counts from this call.
    pub(crate) fn new(timers: Timers) -> Self {
        Self {
            origin: Instant::now(),
            suspend_origin: origin(counting_suspend()),
            timers,
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn now_counting_suspend(&self) -> Duration {
        since(self.suspend_origin, counting_suspend())
    }

    fn now_iso8601(&self) -> String {
        iso8601(jiff::Timestamp::now())
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        let timers = self.timers.clone();
        async move { timers.sleep(duration).await }
    }
}

/// A monotonic reading (from an arbitrary origin) that goes on while the
/// machine is suspended, which `Instant` does not everywhere:
///
/// - Linux and Android: `CLOCK_BOOTTIME` (`Instant` is `CLOCK_MONOTONIC`,
///   which stops during suspend).
/// - macOS and iOS: `CLOCK_MONOTONIC`, which on Darwin counts sleep
///   (`Instant` is `CLOCK_UPTIME_RAW`, which does not).
/// - Windows: `Instant` itself, QueryPerformanceCounter, which keeps counting
///   across sleep and hibernation (unlike the "unbiased" interrupt time).
/// - WebAssembly (WASI): `Instant`, the host's monotonic clock; under Node on
///   Linux that is `CLOCK_MONOTONIC`, so there a suspend is not counted. No
///   closer clock is reachable from WASI.
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
fn counting_suspend() -> Option<Duration> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
    #[cfg(target_vendor = "apple")]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is one the platform defines.
    let rc = unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    // It cannot fail for a defined clock id and a valid pointer; were it to, `since` decides.
    if rc != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    ))
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
fn counting_suspend() -> Option<Duration> {
    use std::sync::OnceLock;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    Some(ORIGIN.get_or_init(Instant::now).elapsed())
}

/// The origin of a clock from its first reading: one that could not be read
/// counts from zero, so later readings are never earlier than the truth.
fn origin(reading: Option<Duration>) -> Duration {
    reading.unwrap_or(Duration::ZERO)
}

/// The time counting suspend since `origin`, from a reading `now`. A failed
/// reading is the end of time (`END_OF_TIME`): the lease holder's deadline passes at once and
/// the call fails with E_LEASE_LOST, rather than work with no deadline (fail
/// closed, whether the failure came at the start or later).
fn since(origin: Duration, now: Option<Duration>) -> Duration {
    now.map_or(END_OF_TIME, |now| now.saturating_sub(origin))
}

/// A reading past every deadline, yet far enough below `Duration::MAX` that the core's sums of a
/// reading and a bound (`sent + timeout`) cannot overflow.
const END_OF_TIME: Duration = Duration::from_secs(u64::MAX / 4);

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
    fn a_clock_that_cannot_be_read_fails_closed() {
        // A failed reading later: the end of time, so the holder's deadline has passed.
        let end = since(Duration::from_secs(5), None);
        assert_eq!(end, END_OF_TIME);
        // Past every deadline, and a bound added to it does not overflow (it would panic).
        assert!(end > Duration::from_secs(100 * 365 * 24 * 3600));
        assert!(end.checked_add(Duration::from_secs(86_400 * 365)).is_some());
        // A failed reading at the start: the origin is zero, and later readings still advance
        // (before, the origin was the end of time and every reading was zero for good).
        assert_eq!(
            since(origin(None), Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            since(Duration::from_secs(2), Some(Duration::from_secs(7))),
            Duration::from_secs(5)
        );
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

    /// The reading counting suspend is CLOCK_BOOTTIME on Linux: never behind
    /// CLOCK_MONOTONIC (what `Instant` reads there, which stops during
    /// suspend), and the uptime the kernel reports in /proc/uptime (which is
    /// CLOCK_BOOTTIME) to within its hundredths of a second. On a machine
    /// never suspended the two clocks agree, so the test also runs itself in
    /// a time namespace whose boot clock is an hour ahead of its monotonic
    /// one, which is what an hour of suspend leaves (`unshare --time`, root):
    /// there the reading must be the hour ahead.
    #[cfg(target_os = "linux")]
    #[test]
    fn counting_suspend_is_the_boot_time_on_linux() {
        const AHEAD: &str = "CHS_CLOCK_TEST_BOOT_AHEAD_SECS";
        fn monotonic() -> Duration {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid timespec and a clock Linux defines.
            assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) }, 0);
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        }
        fn uptime() -> Duration {
            let text = std::fs::read_to_string("/proc/uptime").expect("/proc/uptime");
            let secs = text.split_whitespace().next().expect("uptime seconds");
            Duration::from_secs_f64(secs.parse().expect("a number"))
        }
        let ahead = std::env::var(AHEAD).map_or(0, |v| v.parse::<u64>().expect("seconds"));
        for _ in 0..100 {
            let mono = monotonic();
            let before = uptime();
            let boot = counting_suspend().expect("the boot clock reads");
            let after = uptime();
            assert!(
                boot >= mono + Duration::from_secs(ahead),
                "boot time {boot:?} is not {ahead} s ahead of the monotonic clock {mono:?}"
            );
            // /proc/uptime truncates to hundredths.
            assert!(
                boot >= before && boot <= after + Duration::from_millis(10),
                "boot time {boot:?} is not the uptime ({before:?} .. {after:?})"
            );
        }
        let c = SystemClock::new(native_timers());
        let (a, b) = (c.now_counting_suspend(), c.now_counting_suspend());
        assert!(b >= a);
        if ahead == 0 {
            let exe = std::env::current_exe().expect("the test binary");
            let out = std::process::Command::new("unshare")
                .args(["--time", "--boottime", "3600", "--"])
                .arg(exe)
                .args([
                    "--exact",
                    "clock::tests::counting_suspend_is_the_boot_time_on_linux",
                ])
                .env(AHEAD, "3600")
                .output()
                .expect("unshare runs (util-linux)");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "in a time namespace an hour ahead:\n{text}");
            assert!(text.contains("1 passed"), "{text}");
        }
    }

    #[tokio::test]
    async fn sleep_waits() {
        let c = SystemClock::new(native_timers());
        let before = c.now();
        c.sleep(Duration::from_millis(20)).await;
        assert!(c.now() - before >= Duration::from_millis(20));
    }
}
