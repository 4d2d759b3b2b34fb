//! Taking, renewing and releasing the resource's Lease (see `crate::coordination::lease`).
//!
//! Kubernetes' optimistic concurrency is the lock: every write carries the
//! resourceVersion it read, so of two deploys writing at once one gets 409
//! Conflict, reads again and finds the lease taken. A lease is free when it
//! has no holder or has expired. Expired is judged by observation, as
//! client-go's leader election does: this call has watched the record not
//! change for a whole duration on its own monotonic clock. The times the
//! holder writes come from the holder's clock, which may be hours off this
//! one's, so they are never compared with this machine's time.
//!
//! The holder's side of the same rule: a taker starts its watch no earlier
//! than the holder's last successful write was sent, so the holder may work
//! only until a renew deadline, two thirds of the duration after that
//! moment, unless a renewal succeeds first. Each renewal attempt is bounded
//! by what is left of the deadline (a stalled API call, or the retry loop's
//! backoff, cannot stretch it), and at the deadline no further statement
//! starts and the call fails with `E_LEASE_LOST`. The last third is the
//! margin for a statement in flight and for the two machines' clock rates.
//! The holder measures that deadline on a clock that counts while its
//! machine is suspended (`Clock::now_counting_suspend`): a monotonic clock
//! that stopped while a laptop's lid was closed would let the holder wake up
//! believing it still had time, when the lease had long expired for every
//! other deployer. A taker's watch stays on the monotonic clock: a taker
//! suspended mid-watch only waits longer.
//! Transient failures (5xx, resets) are retried with the `retry` policy
//! within that bound; a refusal (RBAC) fails at once, naming the verbs.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use crate::config::LeaseConfig;
use crate::coordination::lease::{holder_identity, lease_name, micro_time, unix_micros};
use crate::error::{ClickHouseSchemaError, ErrorKind};
use crate::reconcile::{Call, Run};
use crate::transport::{
    Clock, Event, Executor, LeaseApi, LeaseRecord, LeaseSpec, PodLister, TransportError, TransportErrorKind,
};

/// How often a waiting deploy looks at the lease again.
const WAIT_POLL: Duration = Duration::from_secs(1);
const CONFLICT: u16 = 409;
/// How long to pause before reading the lease again after a write conflicted.
const CONFLICT_PAUSE: Duration = Duration::from_millis(100);

/// After a failed renewal, how soon the next attempt (at most a third of the duration).
const RENEW_RETRY: Duration = Duration::from_secs(1);

/// The longest a release may take (at most a third of the duration).
const RELEASE_BOUND: Duration = Duration::from_secs(5);

/// A lease this call holds.
pub(crate) struct Held {
    name: String,
    holder: String,
    ttl: Duration,
    acquire_time: String,
    transitions: u32,
    /// When (`now_counting_suspend`) the write that took the lease was
    /// sent: no taker's watch of that write started earlier.
    taken_at: Duration,
}

impl Held {
    /// How long after a successful write was sent the holder may still work
    /// without another: two thirds of the duration.
    fn renew_deadline(&self) -> Duration {
        self.ttl * 2 / 3
    }
}

/// What ended the renewals: the lease is no longer this call's.
struct Lost(String);

impl<T: PodLister + Executor + LeaseApi, C: Clock> Run<'_, T, C> {
    /// Runs `work` holding the resource's lease: taken first (waiting within
    /// the `waitForPod` budget while another deploy holds it), renewed every
    /// third of its duration while `work` runs, released afterwards whatever
    /// `work` returned. When a renewal finds the lease gone, or the renew
    /// deadline passes without one, `work` is dropped (no further statement
    /// starts; an exec in flight is closed) and the call fails with
    /// `E_LEASE_LOST`, after what it left running is stopped (not waited out).
    /// `work` receives whether this call waited for another holder (so it may
    /// look at what that one did). A statement a cancellation left running in
    /// its pod is stopped before the release, or waited out while the lease is
    /// still renewed (`settle_abandoned`).
    pub(crate) async fn with_lease<R, F, W>(
        &self,
        config: LeaseConfig,
        work: W,
    ) -> Result<R, ClickHouseSchemaError>
    where
        W: FnOnce(bool) -> F,
        F: Future<Output = Result<R, ClickHouseSchemaError>>,
    {
        let (held, waited) = self.take_lease(config).await?;
        // Until when (`now_counting_suspend`, in ms) the work may go on: moved on by each renewal.
        let valid_until = AtomicU64::new(millis(held.taken_at + held.renew_deadline()));
        let outcome = {
            let mut work = pin!(async { self.settle_abandoned(work(waited).await, true).await });
            let mut renewals = pin!(self.keep_renewed(&held, &valid_until));
            poll_fn(|cx| {
                // Past the renew deadline the work is not polled again, so nothing more starts,
                // even when the renewals have not been polled since.
                if millis(self.clock.now_counting_suspend()) >= valid_until.load(Ordering::SeqCst) {
                    return Poll::Ready(Err(self.lease_lost(&held, &self.not_renewed(&held))));
                }
                if let Poll::Ready(result) = work.as_mut().poll(cx) {
                    return Poll::Ready(result);
                }
                renewals
                    .as_mut()
                    .poll(cx)
                    .map(|Lost(why)| Err(self.lease_lost(&held, &why)))
            })
            .await
        };
        // A lost lease dropped the work where it was: what it had sent and not seen end may still
        // run in its pod, and another deploy may take the lease soon. Stop it now, without waiting
        // out what cannot be confirmed (the lease is not ours to hold any more). After work that
        // ended by itself nothing is left, and this returns at once.
        let lost = outcome
            .as_ref()
            .is_err_and(|e| e.kind == crate::error::ErrorKind::LeaseLost);
        let (outcome, settled) = self.settle_tracked(outcome, false).await;
        if lost && !settled {
            // Something may still run, and releasing would let a waiting deploy in at once: left
            // to lapse, a taker must first see the lease unchanged for its whole duration.
            return outcome.map_err(|mut err| {
                err.message.push_str(&format!(
                    " The lease was not released, so that it lapses: another deploy takes it only once it \
                     has seen it unchanged for {} s.",
                    held.ttl.as_secs()
                ));
                err
            });
        }
        self.release_lease(&held).await;
        outcome
    }

    async fn take_lease(&self, config: LeaseConfig) -> Result<(Held, bool), ClickHouseSchemaError> {
        let name = lease_name(self.resource_id);
        let holder = holder_identity(
            &self.transport.process_identity(),
            &format!(
                "{}|{}|{:?}",
                self.resource_id,
                self.clock.now_iso8601(),
                self.clock.now()
            ),
        );
        let ttl = Duration::from_secs(u64::from(config.ttl_seconds));
        let started = self.clock.now();
        let deadline = started + self.wait_budget;
        let mut waited = false;
        // The resourceVersion last seen held by someone else, and since when (monotonic).
        let mut watching: Option<(String, Duration)> = None;
        loop {
            let now = self.clock.now_iso8601();
            let current = self
                .lease_call(|| self.transport.get_lease(&self.target.namespace, &name))
                .await;
            let current = current.map_err(|e| self.lease_failed(&name, "read", &e))?;
            let free = match &current {
                None => true,
                Some(record) => {
                    let holder_now = record.holder.as_deref().unwrap_or("");
                    let unchanged_for = match &watching {
                        Some((version, since)) if *version == record.resource_version => {
                            self.clock.now().saturating_sub(*since)
                        }
                        _ => {
                            watching = Some((record.resource_version.clone(), self.clock.now()));
                            Duration::ZERO
                        }
                    };
                    holder_now.is_empty() || holder_now == holder || expired(record, ttl, unchanged_for)
                }
            };
            if free {
                let sent = self.clock.now_counting_suspend();
                let now = micro_time(&now);
                let spec = LeaseSpec {
                    holder: Some(holder.clone()),
                    duration_seconds: config.ttl_seconds,
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now.clone()),
                    transitions: current.as_ref().map_or(0, |r| {
                        let had = r.holder.as_deref().is_some_and(|h| !h.is_empty() && h != holder);
                        r.transitions.unwrap_or(0) + u32::from(had)
                    }),
                };
                let write = match &current {
                    None => {
                        self.lease_call(|| self.transport.create_lease(&self.target.namespace, &name, &spec))
                            .await
                    }
                    Some(record) => {
                        self.lease_call(|| {
                            self.transport.replace_lease(
                                &self.target.namespace,
                                &name,
                                &record.resource_version,
                                &spec,
                            )
                        })
                        .await
                    }
                };
                match write {
                    Ok(_) => {
                        let waited_ms = millis(self.clock.now().saturating_sub(started));
                        self.events.emit(Event::LeaseTaken {
                            lease: name.clone(),
                            waited_ms,
                            message: if waited {
                                format!("took the lease {name} after waiting {waited_ms} ms")
                            } else {
                                format!("took the lease {name}")
                            },
                        });
                        let held = Held {
                            name,
                            holder,
                            ttl,
                            acquire_time: now,
                            transitions: spec.transitions,
                            taken_at: sent,
                        };
                        return Ok((held, waited));
                    }
                    // Another deploy wrote first: look again, after a short pause, within
                    // the same budget as a wait (a server that always conflicts must not
                    // keep this loop busy forever).
                    Err(e) if e.http_status == Some(CONFLICT) => {
                        let remaining = deadline.saturating_sub(self.clock.now());
                        if remaining.is_zero() {
                            return Err(self.lease_contended(&name));
                        }
                        if self
                            .unless_cancelled(self.clock.sleep(remaining.min(CONFLICT_PAUSE)))
                            .await
                            .is_none()
                        {
                            return Err(self.cancelled(&format!("while taking the lease {name}")));
                        }
                    }
                    Err(e) => return Err(self.lease_failed(&name, "write", &e)),
                }
            } else if let Some(record) = &current {
                let holder_then = record.holder.clone().unwrap_or_default();
                let remaining = deadline.saturating_sub(self.clock.now());
                if remaining.is_zero() {
                    return Err(self.lease_held(&name, record));
                }
                waited = true;
                self.events.emit(Event::LeaseWaiting {
                    lease: name.clone(),
                    holder: holder_then.clone(),
                    remaining_ms: millis(remaining),
                    message: format!(
                        "waiting for the lease {name}, held by {holder_then} ({} s of waitForPod left)",
                        remaining.as_secs()
                    ),
                });
                if self
                    .unless_cancelled(self.clock.sleep(remaining.min(WAIT_POLL)))
                    .await
                    .is_none()
                {
                    return Err(self.cancelled(&format!("while waiting for the lease {name}")));
                }
            }
            if self.cancel.is_cancelled() {
                return Err(self.cancelled(&format!("while taking the lease {name}")));
            }
        }
    }

    /// Renews every third of the duration, each attempt bounded by the renew
    /// deadline of the last successful write (a failed one is tried again
    /// after a second); moves `valid_until` on with each success. Ends only
    /// when the lease is lost: another holder took it, or the deadline passed.
    /// All on the clock that counts suspend: after a resume past the deadline
    /// no renewal is sent (the lease may be another's by then).
    async fn keep_renewed(&self, held: &Held, valid_until: &AtomicU64) -> Lost {
        let period = held.ttl / 3;
        let now = || self.clock.now_counting_suspend();
        let mut renewed_at = held.taken_at;
        let mut next = renewed_at + period;
        loop {
            self.clock.sleep(next.saturating_sub(now())).await;
            let left = (renewed_at + held.renew_deadline()).saturating_sub(now());
            if left.is_zero() {
                return Lost(self.not_renewed(held));
            }
            let sent = now();
            match first_of(self.renew(held), self.clock.sleep(left)).await {
                Some(Ok(())) => {
                    renewed_at = sent;
                    valid_until.store(millis(sent + held.renew_deadline()), Ordering::SeqCst);
                    next = sent + period;
                }
                Some(Err(Some(lost))) => return lost,
                Some(Err(None)) => next = now() + RENEW_RETRY.min(period),
                None => return Lost(self.not_renewed(held)),
            }
        }
    }

    /// Why the lease is lost at the renew deadline.
    fn not_renewed(&self, held: &Held) -> String {
        format!(
            "no renewal succeeded within {} ms of the last one (two thirds of its {} s), after which another \
             deploy may take it",
            millis(held.renew_deadline()),
            held.ttl.as_secs()
        )
    }

    /// One renewal: `Err(Some)` when the lease is another's, `Err(None)` when
    /// the API could not be reached (tried again at the next tick).
    async fn renew(&self, held: &Held) -> Result<(), Option<Lost>> {
        let spec = LeaseSpec {
            renew_time: Some(micro_time(&self.clock.now_iso8601())),
            ..self.spec_of(held)
        };
        match self.rewrite_if_held(held, &spec).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Some(Lost("another deploy took it over".to_owned()))),
            Err(()) => Err(None),
        }
    }

    /// Clears the holder, so a waiting deploy goes on at once. A failure is
    /// reported as an event only: the work is done, and the lease lapses at
    /// its expiry anyway.
    async fn release_lease(&self, held: &Held) {
        let spec = LeaseSpec {
            holder: None,
            acquire_time: None,
            renew_time: None,
            ..self.spec_of(held)
        };
        // Not ours any more (gone, or taken over): nothing of ours to release. Bounded: a
        // stalled API must not hold the call (the lease lapses anyway).
        let bound = RELEASE_BOUND.min(held.ttl / 3);
        if let Some(Ok(_)) = first_of(self.rewrite_if_held(held, &spec), self.clock.sleep(bound)).await {
            return;
        }
        self.events.emit(Event::Retry {
            pod: None,
            index: None,
            attempt: 1,
            delay_ms: millis(held.ttl),
            message: format!(
                "the lease {} could not be released; it lapses within {} s",
                held.name,
                held.ttl.as_secs()
            ),
        });
    }

    /// The spec of `held` as taken.
    fn spec_of(&self, held: &Held) -> LeaseSpec {
        LeaseSpec {
            holder: Some(held.holder.clone()),
            duration_seconds: u32::try_from(held.ttl.as_secs()).unwrap_or(u32::MAX),
            acquire_time: Some(held.acquire_time.clone()),
            renew_time: None,
            transitions: held.transitions,
        }
    }

    /// Writes `spec` if `held` still holds the lease: reads it, replaces it
    /// with the resourceVersion read, and reads again after a 409, three
    /// times at most. `Ok(false)`: it is no longer ours (or gone); `Err`:
    /// the API could not be reached, or kept conflicting.
    async fn rewrite_if_held(&self, held: &Held, spec: &LeaseSpec) -> Result<bool, ()> {
        for _ in 0..3 {
            let current = self
                .lease_call(|| self.transport.get_lease(&self.target.namespace, &held.name))
                .await;
            let record = match current {
                Ok(Some(record)) if record.holder.as_deref() == Some(held.holder.as_str()) => record,
                Ok(_) => return Ok(false),
                Err(_) => return Err(()),
            };
            let written = self
                .lease_call(|| {
                    self.transport.replace_lease(
                        &self.target.namespace,
                        &held.name,
                        &record.resource_version,
                        spec,
                    )
                })
                .await;
            match written {
                Ok(_) => return Ok(true),
                Err(e) if e.http_status == Some(CONFLICT) => {}
                Err(_) => return Err(()),
            }
        }
        Err(())
    }

    /// A Lease API call with the `retry` policy for transient failures.
    async fn lease_call<F, Fut, V>(&self, op: F) -> Result<V, TransportError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<V, TransportError>>,
    {
        self.with_retry(Call::Lease, op).await.map_err(|(err, _)| err)
    }

    fn lease_failed(&self, name: &str, what: &str, e: &TransportError) -> ClickHouseSchemaError {
        let grant = if e.kind == TransportErrorKind::Refused && matches!(e.http_status, Some(401 | 403)) {
            format!(
                " The lease prop needs get, create and update on leases (API group coordination.k8s.io) in \
                 namespace '{}': grant them to the deploying identity, or remove the lease prop.",
                self.target.namespace
            )
        } else {
            String::new()
        };
        self.error(
            ErrorKind::KubernetesApi,
            format!(
                "{}: the lease {name} could not be {what}: {}.{grant} Nothing ran.",
                self.prefix(),
                e.message
            ),
        )
    }

    fn lease_held(&self, name: &str, record: &LeaseRecord) -> ClickHouseSchemaError {
        let holder = record.holder.as_deref().unwrap_or("?");
        let renewed = record
            .renew_time
            .as_deref()
            .and_then(unix_micros)
            .map(|t| format!(", last renewed at {} by its holder's clock", rfc3339_of(t)))
            .unwrap_or_default();
        let duration = record
            .duration_seconds
            .map(|d| format!(" ({d} s)"))
            .unwrap_or_default();
        self.error(
            ErrorKind::LeaseHeld,
            format!(
                "{}: the lease {name} is held by {holder} (another deploy of this resource){renewed}. It did not \
                 come free within waitForPod.timeoutMs ({} s): a holder that stops renewing loses it once a deploy \
                 has watched it unchanged for its duration{duration}; nothing ran. Deploy again once that one is \
                 done.",
                self.prefix(),
                self.wait_budget.as_secs()
            ),
        )
    }

    fn lease_contended(&self, name: &str) -> ClickHouseSchemaError {
        self.error(
            ErrorKind::LeaseHeld,
            format!(
                "{}: the lease {name} could not be taken within waitForPod.timeoutMs ({} s): every write conflicted \
                 with another one (HTTP 409), so other deploys keep taking it; nothing ran. Deploy again once they \
                 are done.",
                self.prefix(),
                self.wait_budget.as_secs()
            ),
        )
    }

    fn lease_lost(&self, held: &Held, why: &str) -> ClickHouseSchemaError {
        self.error(
            ErrorKind::LeaseLost,
            format!(
                "{}: the lease {} was lost while this deploy held it: {why}. No further statement was started, and \
                 nothing is recorded; the next deploy looks again.",
                self.prefix(),
                held.name
            ),
        )
    }
}

/// Whether `record` (held by someone else) is stale: this call has watched
/// it unchanged for its whole duration (`ttl`, this call's own, for a record
/// that states none). Its times are the holder's clock and never count.
fn expired(record: &LeaseRecord, ttl: Duration, unchanged_for: Duration) -> bool {
    let duration = record
        .duration_seconds
        .filter(|d| *d > 0)
        .map_or(ttl, |d| Duration::from_secs(u64::from(d)));
    unchanged_for >= duration
}

/// The output of `a`, or `None` when `b` finishes first.
async fn first_of<A: Future, B: Future>(a: A, b: B) -> Option<A::Output> {
    let (mut a, mut b) = (pin!(a), pin!(b));
    poll_fn(|cx| {
        if let Poll::Ready(output) = a.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        b.as_mut().poll(cx).map(|_| None)
    })
    .await
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// RFC 3339 UTC (seconds) of microseconds since the epoch.
fn rfc3339_of(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: &str, renew: &str, duration: u32) -> LeaseRecord {
        LeaseRecord {
            resource_version: "1".into(),
            holder: Some(holder.into()),
            duration_seconds: Some(duration),
            acquire_time: Some(renew.into()),
            renew_time: Some(renew.into()),
            transitions: Some(0),
        }
    }

    #[test]
    fn a_lease_expires_only_by_watching_it_unchanged_for_its_duration() {
        let ttl = Duration::from_secs(5);
        // Renewed long ago by the holder's clock (or by one far behind): not stale until watched.
        let r = record("other", "2020-01-01T00:00:00.000000Z", 60);
        assert!(!expired(&r, ttl, Duration::ZERO));
        assert!(!expired(&r, ttl, Duration::from_secs(59)));
        assert!(expired(&r, ttl, Duration::from_secs(60)));
        // No duration stated: this call's own.
        let none = LeaseRecord {
            duration_seconds: None,
            ..record("other", "2020-01-01T00:00:00.000000Z", 0)
        };
        assert!(!expired(&none, ttl, Duration::from_secs(4)));
        assert!(expired(&none, ttl, Duration::from_secs(5)));
    }

    #[test]
    fn rfc3339_round_trips() {
        for t in [
            "2026-12-01T10:00:00Z",
            "2000-02-29T23:59:59Z",
            "1970-01-01T00:00:00Z",
        ] {
            assert_eq!(rfc3339_of(unix_micros(t).unwrap()), t);
        }
    }
}
