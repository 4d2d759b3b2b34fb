//! Taking, renewing and releasing the resource's Lease (see `crate::coordination::lease`).
//!
//! Kubernetes' optimistic concurrency is the lock: every write carries the
//! resourceVersion it read, so of two deploys writing at once one gets 409
//! Conflict, reads again and finds the lease taken. A lease is free when it
//! has no holder or has expired. Expired means both clocks agree it is
//! stale: the holder's `renewTime` plus the duration is past on this
//! machine's wall clock, or this call has watched the record not change for
//! a whole duration on its own monotonic clock (which holds whatever the
//! other machine's clock says). Transient failures (5xx, resets) are retried
//! with the `retry` policy; a refusal (RBAC) fails at once, naming the verbs.

use std::future::poll_fn;
use std::pin::pin;
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

/// A lease this call holds.
pub(crate) struct Held {
    name: String,
    holder: String,
    ttl: Duration,
    acquire_time: String,
    transitions: u32,
}

/// What ended the renewals: the lease is no longer this call's.
struct Lost(String);

impl<T: PodLister + Executor + LeaseApi, C: Clock> Run<'_, T, C> {
    /// Runs `work` holding the resource's lease: taken first (waiting within
    /// the `waitForPod` budget while another deploy holds it), renewed every
    /// third of its duration while `work` runs, released afterwards whatever
    /// `work` returned. When a renewal finds the lease gone, `work` is dropped
    /// (no further statement starts; an exec in flight is closed) and the call
    /// fails with `E_LEASE_LOST`. `work` receives whether this call waited
    /// for another holder (so it may look at what that one did).
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
        let outcome = {
            let mut work = pin!(work(waited));
            let mut renewals = pin!(self.keep_renewed(&held));
            poll_fn(|cx| {
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
                    holder_now.is_empty() || holder_now == holder || expired(record, &now, unchanged_for)
                }
            };
            if free {
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

    /// Renews every third of the duration; ends only when the lease is lost
    /// (another holder took it, or no renewal succeeded for a whole duration).
    async fn keep_renewed(&self, held: &Held) -> Lost {
        let mut last_renewed = self.clock.now();
        loop {
            self.clock.sleep(held.ttl / 3).await;
            match self.renew(held).await {
                Ok(()) => last_renewed = self.clock.now(),
                Err(Some(lost)) => return lost,
                Err(None) if self.clock.now().saturating_sub(last_renewed) >= held.ttl => {
                    return Lost(format!(
                        "no renewal succeeded for {} s, so another deploy may have taken it",
                        held.ttl.as_secs()
                    ));
                }
                Err(None) => {}
            }
        }
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
        // Not ours any more (gone, or taken over): nothing of ours to release.
        if self.rewrite_if_held(held, &spec).await.is_ok() {
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
        let expiry = match (
            record.renew_time.as_deref().and_then(unix_micros),
            record.duration_seconds,
        ) {
            (Some(renewed), Some(duration)) => {
                format!(
                    ", and expires at {} unless renewed",
                    rfc3339_of(renewed + i64::from(duration) * 1_000_000)
                )
            }
            _ => String::new(),
        };
        self.error(
            ErrorKind::LeaseHeld,
            format!(
                "{}: the lease {name} is held by {holder} (another deploy of this resource){expiry}. It did not \
                 come free within waitForPod.timeoutMs ({} s); nothing ran. Deploy again once that one is done.",
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

/// Whether `record` (held by someone else) is stale: by the wall clock (its
/// renewal plus its duration is past), or by this call's own watch (unchanged
/// for a whole duration).
fn expired(record: &LeaseRecord, now: &str, unchanged_for: Duration) -> bool {
    let duration = u64::from(record.duration_seconds.unwrap_or(0));
    if unchanged_for >= Duration::from_secs(duration) && duration > 0 {
        return true;
    }
    let renewed = record
        .renew_time
        .as_deref()
        .or(record.acquire_time.as_deref())
        .and_then(unix_micros);
    match (renewed, unix_micros(now)) {
        (Some(renewed), Some(now)) => {
            renewed + i64::try_from(duration).unwrap_or(i64::MAX / 2) * 1_000_000 < now
        }
        // A holder with no times at all cannot be judged by the clock; only the watch frees it.
        _ => false,
    }
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
    fn a_lease_expires_by_the_wall_clock_or_by_watching_it() {
        let r = record("other", "2026-12-01T10:00:00.000000Z", 60);
        assert!(!expired(&r, "2026-12-01T10:00:59.000Z", Duration::ZERO));
        assert!(expired(&r, "2026-12-01T10:01:01.000Z", Duration::ZERO));
        // A holder whose clock runs ahead: the watch frees it after a duration unchanged.
        let ahead = record("other", "2026-12-01T11:00:00.000000Z", 60);
        assert!(!expired(
            &ahead,
            "2026-12-01T10:05:00.000Z",
            Duration::from_secs(59)
        ));
        assert!(expired(
            &ahead,
            "2026-12-01T10:05:00.000Z",
            Duration::from_secs(60)
        ));
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
