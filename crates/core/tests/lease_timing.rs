//! The lease in time: what a holder may do while its renewals stall, and what
//! a taker concludes from a lease another deploy keeps renewing, with clocks
//! skewed both ways. Runs on virtual time (`VirtualTime`): every sleep and
//! every slow call waits on one clock that jumps to the next timer when
//! nothing else can move, so minutes of protocol take microseconds and the
//! times asserted are exact. Against the sandbox's real Lease API:
//! crates/kube/tests/skewed_clocks.rs.

mod reconcile_support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use clickhouse_schema_core::ErrorKind;
use clickhouse_schema_core::lifecycle::apply;
use clickhouse_schema_core::transport::{
    Clock, Cluster, ExecOutput, ExecRequest, Executor, LeaseApi, LeaseRecord, LeaseSpec, NeverCancelled,
    NoEvents, PodInfo, PodLister, TransportError, TransportErrorKind,
};
use reconcile_support::{config, pod};
use serde_json::json;

/// One virtual clock for the whole run: `sleep` registers a timer, and the
/// driver moves time to the earliest one whenever the run is stuck.
#[derive(Clone, Default)]
struct VirtualTime(Arc<Mutex<Timers>>);

#[derive(Default)]
struct Timers {
    now: Duration,
    next_id: u64,
    /// (deadline, id) of every pending sleep.
    pending: BTreeSet<(Duration, u64)>,
}

impl VirtualTime {
    fn now(&self) -> Duration {
        self.0.lock().unwrap().now
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let mut timers = self.0.lock().unwrap();
        let (deadline, id) = (timers.now + duration, timers.next_id);
        timers.next_id += 1;
        timers.pending.insert((deadline, id));
        Sleep {
            time: self.clone(),
            deadline,
            id,
        }
    }

    /// Runs `future` to completion, moving time on whenever it is pending.
    fn run<F: Future>(&self, future: F) -> F::Output {
        let mut future = pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
                return value;
            }
            let mut timers = self.0.lock().unwrap();
            let Some(&(deadline, _)) = timers.pending.iter().next() else {
                panic!(
                    "stuck: pending with no timer left (a call that never returns, and nothing bounding it)"
                );
            };
            timers.now = timers.now.max(deadline);
            assert!(
                timers.now < Duration::from_secs(24 * 3600),
                "ran for a virtual day"
            );
        }
    }
}

struct Sleep {
    time: VirtualTime,
    deadline: Duration,
    id: u64,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.time.now() >= self.deadline {
            self.time
                .0
                .lock()
                .unwrap()
                .pending
                .remove(&(self.deadline, self.id));
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.time
            .0
            .lock()
            .unwrap()
            .pending
            .remove(&(self.deadline, self.id));
    }
}

/// The deployer's clock: virtual monotonic time, and a wall clock `skew` off
/// the true time (which starts at 2026-01-01T00:00:00Z).
struct DeployerClock {
    time: VirtualTime,
    skew_seconds: i64,
}

impl Clock for DeployerClock {
    fn now(&self) -> Duration {
        self.time.now()
    }

    fn now_iso8601(&self) -> String {
        wall(self.time.now(), self.skew_seconds)
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        self.time.sleep(duration)
    }
}

/// RFC 3339 of true time `at` seen by a clock `skew_seconds` off (milliseconds).
fn wall(at: Duration, skew_seconds: i64) -> String {
    const START: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z
    let millis = (START + skew_seconds) * 1000 + i64::try_from(at.as_millis()).unwrap();
    let (secs, ms) = (millis.div_euclid(1000), millis.rem_euclid(1000));
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Days since 2026-01-01 stay within January..March for these tests.
    let day_of_2026 = days - 20_454;
    let (month, day) = match day_of_2026 {
        d if d < 31 => (1, d + 1),
        d if d < 59 => (2, d - 30),
        d => (3, d - 58),
    };
    let year = if day_of_2026 < 0 { 2025 } else { 2026 };
    let (month, day) = if day_of_2026 < 0 {
        (12, 32 + day_of_2026)
    } else {
        (month, day)
    };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// How the Lease API behaves in a scenario.
#[derive(Clone, Copy)]
enum Api {
    /// Answers at once.
    Prompt,
    /// After this call number (0-based), every Lease call hangs, for ever.
    HangsAfter(usize),
    /// After this call number, every Lease call takes ten minutes to answer.
    SlowAfter(usize),
}

/// Another deploy holding the lease: renews it every second until `until`,
/// writing its own clock's time (`skew_seconds` off the true time).
struct OtherHolder {
    until: Duration,
    skew_seconds: i64,
    duration_seconds: u32,
}

const OTHER: &str = "other-host/77/0123456789ab";

struct World {
    record: Option<LeaseRecord>,
    version: u64,
    other: Option<OtherHolder>,
    calls: usize,
    /// (pod, stdin, started at) of every exec.
    execs: Vec<(String, String, Duration)>,
}

/// One pod whose statements each take `statement_time`, and a Lease API as `api` says.
struct Scenario {
    time: VirtualTime,
    api: Api,
    statement_time: Duration,
    world: Mutex<World>,
}

impl Scenario {
    fn new(time: &VirtualTime, api: Api, statement_time: Duration, other: Option<OtherHolder>) -> Self {
        Self {
            time: time.clone(),
            api,
            statement_time,
            world: Mutex::new(World {
                record: None,
                version: 0,
                other,
                calls: 0,
                execs: Vec::new(),
            }),
        }
    }

    /// The other holder's renewals up to now, as the API server would hold them.
    fn catch_up(&self, world: &mut World) {
        let now = self.time.now();
        let Some(other) = &world.other else { return };
        if world
            .record
            .as_ref()
            .is_some_and(|r| r.holder.as_deref() != Some(OTHER))
        {
            return; // taken from it: it stops.
        }
        let last = now.min(other.until).as_secs();
        let version = 1_000 + last;
        if world
            .record
            .as_ref()
            .is_none_or(|r| r.resource_version != version.to_string())
        {
            let renewed = wall(Duration::from_secs(last), other.skew_seconds).replace('Z', "000Z");
            world.record = Some(LeaseRecord {
                resource_version: version.to_string(),
                holder: Some(OTHER.to_owned()),
                duration_seconds: Some(other.duration_seconds),
                acquire_time: Some(wall(Duration::ZERO, other.skew_seconds).replace('Z', "000Z")),
                renew_time: Some(renewed),
                transitions: Some(0),
            });
        }
    }

    /// A Lease call: `op` on the world now, answered as `api` says.
    fn lease<V: Send + 'static>(
        &self,
        op: impl FnOnce(&mut World) -> Result<V, TransportError>,
    ) -> Pin<Box<dyn Future<Output = Result<V, TransportError>> + Send>> {
        let mut world = self.world.lock().unwrap();
        self.catch_up(&mut world);
        let call = world.calls;
        world.calls += 1;
        let delay = match self.api {
            Api::HangsAfter(n) if call > n => None,
            Api::SlowAfter(n) if call > n => Some(Duration::from_secs(600)),
            _ => Some(Duration::ZERO),
        };
        let result = op(&mut world);
        let sleep = delay.map(|d| self.time.sleep(d));
        Box::pin(async move {
            match sleep {
                Some(sleep) => sleep.await,
                None => std::future::pending().await,
            }
            result
        })
    }

    fn execs(&self) -> Vec<(String, String, Duration)> {
        self.world.lock().unwrap().execs.clone()
    }
}

fn conflict() -> TransportError {
    TransportError::new(TransportErrorKind::Refused, "the object has been modified").with_http_status(409)
}

fn write(world: &mut World, spec: &LeaseSpec) -> LeaseRecord {
    world.version += 1;
    let record = LeaseRecord {
        resource_version: format!("w{}", world.version),
        holder: spec.holder.clone(),
        duration_seconds: Some(spec.duration_seconds),
        acquire_time: spec.acquire_time.clone(),
        renew_time: spec.renew_time.clone(),
        transitions: Some(spec.transitions),
    };
    world.record = Some(record.clone());
    record
}

impl LeaseApi for Scenario {
    fn process_identity(&self) -> String {
        "this-host/1".to_owned()
    }

    fn get_lease(
        &self,
        _: &str,
        _: &str,
    ) -> impl Future<Output = Result<Option<LeaseRecord>, TransportError>> + Send {
        self.lease(|world| Ok(world.record.clone()))
    }

    fn create_lease(
        &self,
        _: &str,
        _: &str,
        spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        let spec = spec.clone();
        self.lease(move |world| {
            if world.record.is_some() {
                Err(conflict())
            } else {
                Ok(write(world, &spec))
            }
        })
    }

    fn replace_lease(
        &self,
        _: &str,
        _: &str,
        resource_version: &str,
        spec: &LeaseSpec,
    ) -> impl Future<Output = Result<LeaseRecord, TransportError>> + Send {
        let (spec, version) = (spec.clone(), resource_version.to_owned());
        self.lease(move |world| {
            if world.record.as_ref().map(|r| r.resource_version.as_str()) != Some(version.as_str()) {
                Err(conflict())
            } else {
                Ok(write(world, &spec))
            }
        })
    }
}

impl PodLister for Scenario {
    fn list_pods(
        &self,
        _: &str,
        _: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<PodInfo>, TransportError>> + Send {
        std::future::ready(Ok(vec![pod("chi-0", "u0")]))
    }
}

impl Executor for Scenario {
    fn exec(&self, request: ExecRequest) -> impl Future<Output = Result<ExecOutput, TransportError>> + Send {
        let now = self.time.now();
        self.world
            .lock()
            .unwrap()
            .execs
            .push((request.pod.clone(), request.stdin.clone(), now));
        let sleep = self.time.sleep(self.statement_time);
        async move {
            sleep.await;
            Ok(ExecOutput::default())
        }
    }
}

fn props(statements: usize, ttl: u32, budget_ms: u64) -> serde_json::Value {
    json!({
        "target": { "namespace": "ns", "podSelector": { "app": "ch" } },
        "statements": (0..statements).map(|i| format!("CREATE DATABASE IF NOT EXISTS db{i}")).collect::<Vec<_>>(),
        "verify": "off",
        "lease": { "ttlSeconds": ttl },
        "waitForPod": { "timeoutMs": budget_ms },
        "retry": { "maxAttempts": 5, "backoffMs": 1000 },
    })
}

fn run_apply(
    scenario: &Scenario,
    skew_seconds: i64,
    props: serde_json::Value,
) -> Result<(), clickhouse_schema_core::ClickHouseSchemaError> {
    let clock = DeployerClock {
        time: scenario.time.clone(),
        skew_seconds,
    };
    let cluster = Cluster {
        transport: scenario,
        clock: &clock,
        cluster_id: None,
        cancel: &NeverCancelled,
        events: &NoEvents,
    };
    scenario
        .time
        .run(apply("orders-schema", &config(props), None, &cluster))
        .map(|_| ())
}

/// The holder's Lease calls stop answering right after it took the lease (a
/// partitioned API server, a stalled connection), while its statements go on:
/// a taker may take the lease one duration after the last write it saw, so
/// the holder must have stopped starting statements before then, and must
/// not wait for the stalled call to come back.
#[test]
fn a_renewal_that_hangs_stops_the_holder_at_its_renew_deadline() {
    for api in [Api::HangsAfter(1), Api::SlowAfter(1)] {
        let time = VirtualTime::default();
        // get + create take the lease (calls 0 and 1); every later call stalls.
        let scenario = Scenario::new(&time, api, Duration::from_secs(1), None);
        let err = run_apply(&scenario, 0, props(20, 6, 30_000)).expect_err("the lease is lost");
        assert_eq!(err.kind, ErrorKind::LeaseLost, "{err:?}");
        assert!(
            err.message.contains("no renewal succeeded within 4000 ms"),
            "{}",
            err.message
        );
        let execs = scenario.execs();
        // Taken at 0 s; renew deadline two thirds of 6 s: statements start at 0, 1, 2 and 3 s.
        let last = execs.last().expect("some ran").2;
        assert!(last < Duration::from_secs(4), "a statement started at {last:?}");
        assert_eq!(execs.len(), 4, "{execs:?}");
        // Lost at 4 s, then the release, bounded by a third of the duration.
        assert_eq!(time.now(), Duration::from_secs(6), "failed at the deadline");
    }
}

/// The same stall while renewals still succeed for a while: each success
/// moves the deadline on, and the holder stops two thirds of a duration after
/// the last renewal it sent, never later.
#[test]
fn the_deadline_moves_with_each_successful_renewal() {
    let time = VirtualTime::default();
    // Renewals at 2 s and 4 s (get + replace each) succeed; the one sent at 6 s stalls.
    let scenario = Scenario::new(&time, Api::HangsAfter(5), Duration::from_secs(1), None);
    let err = run_apply(&scenario, 0, props(20, 6, 30_000)).expect_err("the lease is lost");
    assert_eq!(err.kind, ErrorKind::LeaseLost);
    // Lost 4 s after the renewal sent at 4 s; the release is bounded by 2 s.
    assert_eq!(time.now(), Duration::from_secs(10));
    assert_eq!(scenario.execs().len(), 8);
}

/// A lease that its holder renews every second is alive whatever times the
/// holder writes into it: a taker whose clock is ahead by a little more than
/// the duration, or by an hour (the holder's renewTime then looks long past),
/// waits for its whole budget and takes nothing. Before, it took the lease at
/// once and ran its statements beside the holder's.
#[test]
fn a_lease_renewed_every_second_is_never_taken_whatever_the_clocks_say() {
    for (taker_skew, holder_skew) in [(6, 0), (3600, 0), (0, -3600), (-3600, 0), (0, 3600)] {
        let time = VirtualTime::default();
        let other = OtherHolder {
            until: Duration::from_secs(3600),
            skew_seconds: holder_skew,
            duration_seconds: 5,
        };
        let scenario = Scenario::new(&time, Api::Prompt, Duration::from_secs(1), Some(other));
        let err = run_apply(&scenario, taker_skew, props(2, 5, 20_000))
            .expect_err(&format!("taker {taker_skew:+} s, holder {holder_skew:+} s: held"));
        assert_eq!(err.kind, ErrorKind::LeaseHeld, "{err:?}");
        assert!(err.message.contains(OTHER), "{}", err.message);
        assert!(scenario.execs().is_empty(), "taker {taker_skew:+} s: nothing ran");
        let now = time.now().as_secs();
        assert!((20..=21).contains(&now), "waited the budget, {now} s");
    }
}

/// A holder that stops renewing (killed) is taken over one duration after
/// its last renewal was seen, on the taker's own clock, whichever way either
/// clock is off: never earlier (its renewTime may look long past) and never
/// much later (it may look far in the future).
#[test]
fn a_holder_that_stops_renewing_is_taken_over_one_duration_later_whatever_the_clocks_say() {
    for (taker_skew, holder_skew) in [(0, 0), (3600, 0), (-3600, 0), (0, 3600), (0, -3600)] {
        let time = VirtualTime::default();
        let other = OtherHolder {
            until: Duration::from_secs(3),
            skew_seconds: holder_skew,
            duration_seconds: 5,
        };
        let scenario = Scenario::new(&time, Api::Prompt, Duration::from_secs(1), Some(other));
        run_apply(&scenario, taker_skew, props(2, 5, 20_000))
            .unwrap_or_else(|e| panic!("taker {taker_skew:+} s, holder {holder_skew:+} s: {e:?}"));
        let first = scenario.execs()[0].2;
        // Last renewal at 3 s, seen by the poll at 3 s at the latest; unchanged for 5 s after.
        assert!(
            first >= Duration::from_secs(8) && first <= Duration::from_secs(9),
            "taker {taker_skew:+} s, holder {holder_skew:+} s: took it at {first:?}"
        );
    }
}
