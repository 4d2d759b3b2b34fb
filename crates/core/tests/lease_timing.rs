//! The lease in time: what a holder may do while its renewals stall, and what
//! a taker concludes from a lease another deploy keeps renewing, with clocks
//! skewed both ways. Runs on virtual time (`VirtualTime`): every sleep and
//! every slow call waits on one clock that jumps to the next timer when
//! nothing else can move, so minutes of protocol take microseconds and the
//! times asserted are exact. The machine can be suspended (`suspend`): its
//! monotonic clock and its timers stop while true time, the wall clock and
//! the clock counting suspend run on. Against the sandbox's real Lease API:
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
    Cancel, Clock, Cluster, ExecOutput, ExecRequest, Executor, LeaseApi, LeaseRecord, LeaseSpec,
    NeverCancelled, NoEvents, PodInfo, PodLister, TransportError, TransportErrorKind,
};
use reconcile_support::{Flag, config, pod};
use serde_json::json;

/// One virtual clock for the whole run: `sleep` registers a timer, and the
/// driver moves time to the earliest one whenever the run is stuck.
#[derive(Clone, Default)]
struct VirtualTime(Arc<Mutex<Timers>>);

#[derive(Default)]
struct Timers {
    /// True time (what the API server and every other machine live by).
    now: Duration,
    /// How long the deploying machine has been suspended in all: its
    /// monotonic clock is `now - suspended`.
    suspended: Duration,
    next_id: u64,
    /// (deadline on the machine's monotonic clock, id) of every pending sleep.
    pending: BTreeSet<(Duration, u64)>,
}

impl Timers {
    fn machine(&self) -> Duration {
        self.now - self.suspended
    }
}

impl VirtualTime {
    /// True time.
    fn now(&self) -> Duration {
        self.0.lock().unwrap().now
    }

    /// The deploying machine's monotonic clock: stopped while it was suspended.
    fn machine(&self) -> Duration {
        self.0.lock().unwrap().machine()
    }

    /// The machine sleeps for `duration` of true time (a laptop's lid closed):
    /// its monotonic clock and timers stop meanwhile.
    fn suspend(&self, duration: Duration) {
        let mut timers = self.0.lock().unwrap();
        timers.now += duration;
        timers.suspended += duration;
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let mut timers = self.0.lock().unwrap();
        let (deadline, id) = (timers.machine() + duration, timers.next_id);
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
            let suspended = timers.suspended;
            timers.now = timers.now.max(deadline + suspended);
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
        if self.time.machine() >= self.deadline {
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

/// The deployer's clock: the machine's virtual monotonic time, true time as
/// the clock counting suspend, and a wall clock `skew` off the true time
/// (which starts at 2026-01-01T00:00:00Z).
struct DeployerClock {
    time: VirtualTime,
    skew_seconds: i64,
}

impl Clock for DeployerClock {
    fn now(&self) -> Duration {
        self.time.machine()
    }

    fn now_counting_suspend(&self) -> Duration {
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
    /// Calls numbered from the first to before the second fail at once with a 500; the others
    /// answer at once (an API server that blips and comes back).
    FailsBetween(usize, usize),
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
    /// (true time, holder, renewTime) of every Lease write that succeeded.
    writes: Vec<(Duration, Option<String>, Option<String>)>,
    /// Before which exec (0-based) the machine is suspended, and for how long.
    suspend_before_exec: Option<(usize, Duration)>,
    /// argv of every exec, in the order of `execs`.
    commands: Vec<Vec<String>>,
    /// While which exec (0-based) the caller cancels, and the flag it sets.
    cancel_during_exec: Option<(usize, Arc<std::sync::atomic::AtomicBool>)>,
    /// What the pod answers to a `KILL QUERY` exec (exit code, stdout), at once.
    stop_answer: (i32, String),
    /// From this time on, the pod answers a stop with this instead (what it ran has ended).
    stop_answer_from: Option<(Duration, (i32, String))>,
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
                writes: Vec::new(),
                suspend_before_exec: None,
                commands: Vec::new(),
                cancel_during_exec: None,
                stop_answer: (0, String::new()),
                stop_answer_from: None,
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
        let result = match self.api {
            Api::FailsBetween(from, to) if (from..to).contains(&call) => Err(TransportError::new(
                TransportErrorKind::Transient,
                "the server has received too many requests",
            )
            .with_http_status(500)),
            _ => op(&mut world),
        };
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

fn write(world: &mut World, spec: &LeaseSpec, at: Duration) -> LeaseRecord {
    world
        .writes
        .push((at, spec.holder.clone(), spec.renew_time.clone()));
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
        let (spec, now) = (spec.clone(), self.time.now());
        self.lease(move |world| {
            if world.record.is_some() {
                Err(conflict())
            } else {
                Ok(write(world, &spec, now))
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
        let (spec, version, now) = (spec.clone(), resource_version.to_owned(), self.time.now());
        self.lease(move |world| {
            if world.record.as_ref().map(|r| r.resource_version.as_str()) != Some(version.as_str()) {
                Err(conflict())
            } else {
                Ok(write(world, &spec, now))
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
        let mut world = self.world.lock().unwrap();
        if let Some((at, duration)) = world.suspend_before_exec
            && at == world.execs.len()
        {
            self.time.suspend(duration);
        }
        if let Some((at, flag)) = &world.cancel_during_exec
            && *at == world.execs.len()
        {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let now = self.time.now();
        world
            .execs
            .push((request.pod.clone(), request.stdin.clone(), now));
        world.commands.push(request.command.clone());
        if request.stdin.contains("KILL QUERY WHERE") {
            let (exit_code, stdout) = match &world.stop_answer_from {
                Some((from, answer)) if now >= *from => answer.clone(),
                _ => world.stop_answer.clone(),
            };
            return Box::pin(std::future::ready(Ok(ExecOutput {
                stdout,
                stderr: String::new(),
                exit_code,
            })))
                as Pin<Box<dyn Future<Output = Result<ExecOutput, TransportError>> + Send>>;
        }
        drop(world);
        let sleep = self.time.sleep(self.statement_time);
        Box::pin(async move {
            sleep.await;
            Ok(ExecOutput::default())
        })
    }
}

fn props(statements: usize, ttl: u32, budget_ms: u64) -> serde_json::Value {
    json!({
        "target": { "namespace": "ns", "podSelector": { "app": "ch" } },
        "statements": (0..statements).map(|i| format!("CREATE DATABASE IF NOT EXISTS db{i}")).collect::<Vec<_>>(),
        "verify": "off",
        // The statements' own execs, timed one by one, drive these clocks.
        "execMode": "perStatement",
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
    run_apply_cancellable(scenario, skew_seconds, props, &NeverCancelled)
}

fn run_apply_cancellable(
    scenario: &Scenario,
    skew_seconds: i64,
    props: serde_json::Value,
    cancel: &dyn Cancel,
) -> Result<(), clickhouse_schema_core::ClickHouseSchemaError> {
    let clock = DeployerClock {
        time: scenario.time.clone(),
        skew_seconds,
    };
    let cluster = Cluster {
        transport: scenario,
        clock: &clock,
        cluster_id: None,
        cancel,
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
        let (stops, execs) = stops_and_statements(&scenario);
        // Taken at 0 s; renew deadline two thirds of 6 s: statements start at 0, 1, 2 and 3 s.
        let last = execs.last().expect("some ran").2;
        assert!(last < Duration::from_secs(4), "a statement started at {last:?}");
        assert_eq!(execs.len(), 4, "{execs:?}");
        // The one in flight at the deadline is stopped then. This pod's answer to the stop says
        // nothing, so it is not confirmed stopped, and the lease is left to lapse rather than
        // released: no release is even tried, and the call fails at the deadline.
        assert_eq!(stops, [Duration::from_secs(4)], "{execs:?}");
        assert_eq!(time.now(), Duration::from_secs(4), "failed at the deadline");
        assert!(
            err.message
                .contains("The lease was not released, so that it lapses"),
            "{}",
            err.message
        );
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
    // Lost 4 s after the renewal sent at 4 s; the statement then in flight is not confirmed
    // stopped, so no release is tried (see above).
    assert_eq!(time.now(), Duration::from_secs(8));
    let (stops, execs) = stops_and_statements(&scenario);
    assert_eq!(execs.len(), 8, "{execs:?}");
    assert_eq!(
        stops,
        [Duration::from_secs(8)],
        "the statement in flight at the deadline"
    );
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

/// The deploying machine is suspended for a minute (a laptop's lid closed
/// mid-deploy) while it holds a lease of 6 s: its monotonic clock stops,
/// everyone else's runs on, so by the time it resumes its lease has expired
/// for every other deployer, which may hold it by then. Before, the holder
/// measured its renew deadline on that monotonic clock: it woke up believing
/// it still had time, renewed the lease and ran its remaining statements. Now
/// no further statement starts, no renewal is sent, and the call fails with
/// `E_LEASE_LOST`.
#[test]
fn a_holder_suspended_past_its_renew_deadline_stops_and_does_not_renew() {
    let time = VirtualTime::default();
    let scenario = Scenario::new(&time, Api::Prompt, Duration::from_secs(1), None);
    // Suspended as statement 1 starts (1 s after the lease was taken), for a minute.
    scenario.world.lock().unwrap().suspend_before_exec = Some((1, Duration::from_secs(60)));
    // Statement 1 is stopped once the machine resumes, and is gone: so the lease is released.
    scenario.world.lock().unwrap().stop_answer = (0, "clickhouse-schema-still-running\t0\n".to_owned());
    let err = run_apply(&scenario, 0, props(20, 6, 30_000)).expect_err("the lease is lost");
    assert_eq!(err.kind, ErrorKind::LeaseLost, "{err:?}");
    assert!(
        err.message.contains("no renewal succeeded within 4000 ms"),
        "{}",
        err.message
    );
    let (stops, execs) = stops_and_statements(&scenario);
    // Statement 0 before the suspend, statement 1 as it began; nothing after the resume but the
    // stop of statement 1, which the suspend caught in flight.
    assert_eq!(execs.len(), 2, "{execs:?}");
    assert_eq!(stops.len(), 1, "{stops:?}");
    let writes = scenario.world.lock().unwrap().writes.clone();
    let resumed = Duration::from_secs(61);
    let renewals: Vec<_> = writes
        .iter()
        .filter(|(at, holder, _)| *at >= resumed && holder.is_some())
        .collect();
    assert!(renewals.is_empty(), "renewed after the resume: {renewals:?}");
    // What it still sends is the release (no holder), written only because nobody took it meanwhile.
    assert!(
        writes
            .iter()
            .any(|(at, holder, _)| *at >= resumed && holder.is_none()),
        "{writes:?}"
    );
}

/// The lease is lost at its renew deadline because the API server blipped (its renewals failed),
/// while a statement ran that the stop then cannot confirm stopped. The API is back by then, and
/// the lease is still this deploy's. Releasing it would let a waiting deploy in at once, beside the
/// statement; left alone, it lapses, and a taker waits its whole duration first. Before, it was
/// released right after the stop.
#[test]
fn a_lost_lease_is_left_to_lapse_when_what_ran_cannot_be_confirmed_stopped() {
    let time = VirtualTime::default();
    // get + create take it (calls 0 and 1); the renewal's calls until the deadline fail.
    let scenario = Scenario::new(&time, Api::FailsBetween(2, 4), Duration::from_secs(60), None);
    scenario.world.lock().unwrap().stop_answer = (0, "clickhouse-schema-still-running\t1\n".to_owned());
    let err = run_apply(&scenario, 0, props(2, 6, 30_000)).expect_err("the lease is lost");
    assert_eq!(err.kind, ErrorKind::LeaseLost, "{err:?}");
    let (stops, _) = stops_and_statements(&scenario);
    assert_eq!(stops, [Duration::from_secs(4)], "stopped at the deadline");
    let world = scenario.world.lock().unwrap();
    let released: Vec<_> = world
        .writes
        .iter()
        .filter(|(_, holder, _)| holder.is_none())
        .collect();
    assert!(released.is_empty(), "released: {:?}", world.writes);
    assert!(
        err.message.contains("could not be confirmed stopped (1 still in system.processes after KILL QUERY)")
            && err.message.contains(
                "The lease was not released, so that it lapses: another deploy takes it only once it has seen \
                 it unchanged for 6 s."
            ),
        "{}",
        err.message
    );
}

/// When each stop (`KILL QUERY`) was sent, and the other execs.
fn stops_and_statements(scenario: &Scenario) -> (Vec<Duration>, Vec<(String, String, Duration)>) {
    let (stops, statements): (Vec<_>, Vec<_>) = scenario
        .execs()
        .into_iter()
        .partition(|(_, stdin, _)| stdin.contains("KILL QUERY WHERE"));
    (stops.into_iter().map(|(.., at)| at).collect(), statements)
}

/// The query id a statement's exec ran under (from its argv).
fn query_id_in(command: &[String]) -> String {
    command[2]
        .split_whitespace()
        .find_map(|w| w.strip_prefix("--query_id='"))
        .and_then(|w| w.strip_suffix('\''))
        .expect("the statement runs under a query id")
        .to_owned()
}

/// The lease is lost (its renewals stall) while a statement runs for a minute: the work is
/// dropped where it is, but on a real cluster the statement goes on in the pod, and another deploy
/// may take the lease a third of a duration later. Before the call ends, the statement is stopped
/// on its pod by its query id, and the error says so. Before, nothing stopped it: the dropped
/// work had registered nothing, and the stop that runs after the work never ran.
#[test]
fn a_statement_running_when_the_lease_is_lost_is_stopped_before_the_call_ends() {
    let time = VirtualTime::default();
    let scenario = Scenario::new(&time, Api::HangsAfter(1), Duration::from_secs(60), None);
    // The server listed it before the KILL, and not after.
    scenario.world.lock().unwrap().stop_answer = (
        0,
        "clickhouse-schema-found-running\t1\nclickhouse-schema-still-running\t0\n".to_owned(),
    );
    let mut p = props(2, 6, 30_000);
    p["statementTimeoutMs"] = json!(20_000);
    let err = run_apply(&scenario, 0, p).expect_err("the lease is lost");
    assert_eq!(err.kind, ErrorKind::LeaseLost, "{err:?}");
    let execs = scenario.execs();
    assert_eq!(execs.len(), 3, "the statement, then its stop: {execs:?}");
    let query_id = query_id_in(&scenario.world.lock().unwrap().commands[0]);
    for (pod, stop, _) in &execs[1..] {
        assert_eq!(pod, "chi-0");
        assert!(
            stop.contains(&format!(
                "KILL QUERY WHERE query_id IN ('{query_id}') SYNC FORMAT Null;"
            )),
            "{stop}"
        );
    }
    // Lost at the renew deadline, 4 s after the lease was taken: stopped then, and looked at once
    // more 5 s after the statement was sent; not waited out.
    let looked_at: Vec<Duration> = execs[1..].iter().map(|(.., at)| *at).collect();
    assert_eq!(looked_at, [Duration::from_secs(4), Duration::from_secs(5)]);
    assert!(
        err.message.contains(&format!(
            "statement 0 on pod chi-0 (query id {query_id}) was stopped with KILL QUERY and is not running any more"
        )),
        "{}",
        err.message
    );
}

/// A deploy cancelled while its statement runs (`statement_time` a minute):
/// the exec is closed, but on a real cluster the statement goes on in the
/// pod. Returns the error, the statement's query id (from its argv) and the
/// scenario, for what each test checks.
fn cancel_mid_statement(
    stop_answer: (i32, &str),
) -> (clickhouse_schema_core::ClickHouseSchemaError, String, Scenario) {
    let time = VirtualTime::default();
    let scenario = Scenario::new(&time, Api::Prompt, Duration::from_secs(60), None);
    let flag = Flag::default();
    {
        let mut world = scenario.world.lock().unwrap();
        world.cancel_during_exec = Some((0, flag.0.clone()));
        world.stop_answer = (stop_answer.0, stop_answer.1.to_owned());
    }
    let mut p = props(2, 6, 30_000);
    // The pod-side bound: 20 s, `timeout` 3 s later, its KILL 2 s after: the exec's 26 s.
    p["statementTimeoutMs"] = json!(20_000);
    let err = run_apply_cancellable(&scenario, 0, p, &flag).expect_err("cancelled");
    assert_eq!(err.kind, ErrorKind::Cancelled, "{err:?}");
    let query_id = query_id_in(&scenario.world.lock().unwrap().commands[0]);
    (err, query_id, scenario)
}

/// The statement is still running when the deploy is cancelled: before the
/// lease is released, the deploy kills it on its pod by its query id in an
/// exec of its own, and sees it gone from system.processes. Before, the
/// lease was released at once while the statement ran on, so the next
/// deploy's statements could run beside it.
///
/// The cancel comes as the statement is sent, before its client can have
/// registered its query with the server, so the stop finding nothing then
/// proves nothing: it looks once more when the start-up allowance (5 s) has
/// passed, and only then is the lease released. Before, the first empty look
/// was taken as proof, and the lease was released at once.
#[test]
fn a_cancelled_statement_is_killed_before_the_lease_is_released() {
    let (err, query_id, scenario) = cancel_mid_statement((
        0,
        "clickhouse-schema-pod-ended\t3\nclickhouse-schema-pod-left\t0\nfinished\tq\tdefault\t\n\
             clickhouse-schema-still-running\t0\n",
    ));
    assert!(
        query_id.starts_with("clickhouse-schema-") && query_id.ends_with("-0-chi-0"),
        "{query_id}"
    );
    let execs = scenario.execs();
    assert_eq!(execs.len(), 3, "the statement, then the stop, twice: {execs:?}");
    for (pod, stop, _) in &execs[1..] {
        assert_eq!(pod, "chi-0");
        assert!(
            stop.contains(&format!(
                "KILL QUERY WHERE query_id IN ('{query_id}') SYNC FORMAT Null;"
            )) && stop.contains(&format!("FROM system.processes WHERE query_id IN ('{query_id}')")),
            "{stop}"
        );
    }
    let looked_at: Vec<Duration> = execs[1..].iter().map(|(.., at)| *at).collect();
    assert_eq!(looked_at, [Duration::ZERO, Duration::from_secs(5)], "{execs:?}");
    let stopped_at = &looked_at[1];
    // The stop's command is the product's (the password from the pod's environment, in a pipe).
    let command = scenario.world.lock().unwrap().commands[1][2].clone();
    assert!(
        command.contains("${CLICKHOUSE_PASSWORD:-}") && !command.contains("--password"),
        "{command}"
    );
    let writes = scenario.world.lock().unwrap().writes.clone();
    let (released_at, ..) = writes
        .iter()
        .find(|(_, holder, _)| holder.is_none())
        .expect("released");
    assert!(
        released_at >= stopped_at,
        "released at {released_at:?}, before the stop at {stopped_at:?}"
    );
    assert!(
        err.message.contains(&format!(
            "statement 0 on pod chi-0 (query id {query_id}) was stopped with KILL QUERY and is not running any more \
             (not in system.processes, and no process of it left in the pod)"
        )) && err.message.contains("The lease was released after that."),
        "{}",
        err.message
    );
    assert_eq!(
        (err.statement_index, err.pod.as_deref()),
        (Some(0), Some("chi-0"))
    );
}

/// When the stop cannot confirm the statement is gone (it is still listed in
/// system.processes, or the stop's exec fails), the lease stays held and
/// renewed until the statement's pod-side bound has ended its client. That
/// bound does not end what the server runs without checking for a
/// cancellation, so the stop looks again, and while it still cannot confirm,
/// the lease is held on (looking every 5 s) up to one more statementTimeoutMs;
/// then it is released, and the error says the statement may still run.
/// Before, the lease was released at the bound, and the error claimed the
/// statement had surely ended.
#[test]
fn a_cancelled_statement_not_confirmed_stopped_keeps_the_lease_until_its_bound() {
    for (answer, why) in [
        (
            (0, "clickhouse-schema-still-running\t1\n"),
            "1 still in system.processes after KILL QUERY",
        ),
        ((1, ""), "KILL QUERY exited with code 1"),
        // The server lists nothing, but a process of the exec survived its kill in the pod: its
        // client could still send the next statement of a script.
        (
            (
                0,
                "clickhouse-schema-pod-ended\t2\nclickhouse-schema-pod-left\t1\nclickhouse-schema-still-running\t0\n",
            ),
            "1 of its processes still in the pod after kill -9",
        ),
    ] {
        let (err, query_id, scenario) = cancel_mid_statement(answer);
        let writes = scenario.world.lock().unwrap().writes.clone();
        let (released_at, ..) = *writes
            .iter()
            .find(|(_, holder, _)| holder.is_none())
            .expect("released");
        // Sent at 0 s: its exec's bound (26 s) and one more statementTimeoutMs (20 s) have passed.
        assert!(
            released_at >= Duration::from_secs(46),
            "released at {released_at:?}: {writes:?}"
        );
        let renewed_meanwhile = writes
            .iter()
            .filter(|(at, holder, _)| holder.is_some() && *at > Duration::from_secs(2))
            .count();
        assert!(renewed_meanwhile >= 5, "renewed while held: {writes:?}");
        assert!(
            err.message.contains(&format!(
                "statement 0 on pod chi-0 (query id {query_id}) could not be confirmed stopped ({why})"
            )) && err.message.contains(&format!(
                "one statementTimeoutMs past that bound, and released after that, though a stop then still could \
                 not confirm it gone (on pod chi-0: {why}): it may still be running."
            )),
            "{}",
            err.message
        );
    }
}

/// The same, with a statement the server ends at 30 s, after its client's bound (26 s): the look
/// at the bound still finds it, the one 5 s later finds nothing, and the lease is released then.
#[test]
fn a_statement_that_outlives_its_bound_is_waited_for_until_a_stop_finds_it_gone() {
    let time = VirtualTime::default();
    let scenario = Scenario::new(&time, Api::Prompt, Duration::from_secs(60), None);
    let flag = Flag::default();
    {
        let mut world = scenario.world.lock().unwrap();
        world.cancel_during_exec = Some((0, flag.0.clone()));
        world.stop_answer = (0, "clickhouse-schema-still-running\t1\n".to_owned());
        world.stop_answer_from = Some((
            Duration::from_secs(30),
            (0, "clickhouse-schema-still-running\t0\n".to_owned()),
        ));
    }
    let mut p = props(2, 6, 30_000);
    p["statementTimeoutMs"] = json!(20_000);
    let err = run_apply_cancellable(&scenario, 0, p, &flag).expect_err("cancelled");
    let writes = scenario.world.lock().unwrap().writes.clone();
    let (released_at, ..) = *writes
        .iter()
        .find(|(_, holder, _)| holder.is_none())
        .expect("released");
    assert_eq!(released_at, Duration::from_secs(31), "{writes:?}");
    let (stops, _) = stops_and_statements(&scenario);
    assert_eq!(
        stops,
        [Duration::ZERO, Duration::from_secs(26), Duration::from_secs(31)],
        "the stop, at the bound, and 5 s later"
    );
    assert!(
        err.message.contains(
            "The lease was kept (renewed) 31000 ms more, until that bound had passed and a stop found nothing of \
             it left, and released after that."
        ),
        "{}",
        err.message
    );
}
