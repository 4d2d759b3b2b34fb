//! Deployers whose clocks are wrong, against the sandbox's real Lease API and
//! real ClickHouse 18.16 servers: the product's lifecycle over the product's
//! transport, with only the deployer's wall clock shifted. Neither the ledger's
//! order nor the lease may depend on a deployer's clock: a ledger row written
//! by a machine an hour behind must still be the newest, and a lease renewed
//! every second must never be taken, whatever time its holder writes into it.
//! One sandbox for the binary; the steps run in order.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clickhouse_schema_core::ErrorKind;
use clickhouse_schema_core::config::ResolvedConfig;
use clickhouse_schema_core::config::validate::validate;
use clickhouse_schema_core::coordination::lease::lease_name;
use clickhouse_schema_core::lifecycle::{ApplyOutcome, apply, destroy};
use clickhouse_schema_core::state::SchemaState;
use clickhouse_schema_core::transport::{
    Clock, Cluster, Executor, LeaseApi, LeaseSpec, NeverCancelled, NoEvents, PodLister,
};
use clickhouse_schema_kube::KubeTransport;
use clickhouse_schema_sandbox::{Layout, Sandbox, SandboxOptions};
use common::*;
use serde_json::json;

const HOUR: i64 = 3600;

/// The real monotonic clock and timers, and a wall clock `skew_seconds` off.
struct SkewedClock {
    origin: Instant,
    skew_seconds: i64,
}

impl SkewedClock {
    fn new(skew_seconds: i64) -> Self {
        Self {
            origin: Instant::now(),
            skew_seconds,
        }
    }
}

impl Clock for SkewedClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn now_counting_suspend(&self) -> Duration {
        self.origin.elapsed()
    }

    fn now_iso8601(&self) -> String {
        wall(self.skew_seconds)
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }
}

/// This machine's time `skew_seconds` off, RFC 3339 UTC with milliseconds.
fn wall(skew_seconds: i64) -> String {
    let now = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(skew_seconds);
    let t = jiff::Timestamp::from_millisecond(now.as_millisecond()).expect("in range");
    format!("{t:.3}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neither_the_ledger_nor_the_lease_trusts_a_deployers_clock() {
    let sb = Sandbox::start(SandboxOptions {
        layout: Layout::replicas(2),
        ..SandboxOptions::default()
    })
    .await
    .expect("sandbox with ClickHouse starts");
    let result = scenarios(&sb).await;
    sb.shutdown().await.expect("shutdown");
    result.unwrap_or_else(|e| panic!("{e}"));
}

async fn scenarios(sb: &Sandbox) -> Result<(), String> {
    let conn = clickhouse_schema_kube::connect(Some(&with_path(sb.kubeconfig_path(), Some("sandbox-lease"))))
        .await
        .map_err(|e| e.to_string())?;
    let t = KubeTransport::from(&conn);
    // Every step runs, and every failure is reported: they are independent.
    let mut failures = Vec::new();
    // The apply and the destroy on either side of the skew, both ways.
    // "ahead" also goes through the upgrade: its ledger holds the apply's rows as an earlier
    // version wrote them, with that deployer's time.
    for (name, apply_skew, destroy_skew) in [("behind", 0, -HOUR), ("ahead", HOUR, 0)] {
        if let Err(e) = a_destroy_stays_newest_in_the_ledger(sb, &t, name, apply_skew, destroy_skew).await {
            failures.push(e);
        }
    }
    if let Err(e) = a_lease_renewed_by_a_clock_an_hour_behind_is_never_taken(&t).await {
        failures.push(e);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

fn props(database: &str, extra: serde_json::Value) -> ResolvedConfig {
    let mut props = json!({
        "target": { "namespace": NAMESPACE, "podSelector": { "clickhouse.altinity.com/chi": "sandbox" } },
        "statements": [
            format!("CREATE DATABASE IF NOT EXISTS {database}"),
            // Not idempotent: a pod taken as covered while it lacks the table keeps lacking it.
            format!("CREATE TABLE {database}.t (id UInt64) ENGINE = MergeTree ORDER BY id"),
        ],
        "onDelete": "run",
        "deleteStatements": [format!("DROP DATABASE IF EXISTS {database}")],
        "ledger": { "database": "ops" },
        "verify": "off",
        "retry": { "maxAttempts": 3, "backoffMs": 100 },
        "waitForPod": { "timeoutMs": 30_000 },
    });
    if let (Some(props), Some(extra)) = (props.as_object_mut(), extra.as_object()) {
        props.extend(extra.clone());
    }
    validate("clock-skew", &props).expect("valid props")
}

fn cluster<'a>(t: &'a KubeTransport, clock: &'a SkewedClock) -> Cluster<'a, KubeTransport, SkewedClock> {
    Cluster {
        transport: t,
        clock,
        cluster_id: Some("sandbox".to_owned()),
        cancel: &NeverCancelled,
        events: &NoEvents,
    }
}

/// Applied by one machine, destroyed by another whose clock is `destroy_skew`
/// off the first's (`apply_skew`), then deployed again with the state lost:
/// the ledger's newest row is the destroy, so the statements run again and
/// the table is back on every pod.
async fn a_destroy_stays_newest_in_the_ledger(
    sb: &Sandbox,
    t: &KubeTransport,
    name: &str,
    apply_skew: i64,
    destroy_skew: i64,
) -> Result<(), String> {
    let database = format!("skew_{name}");
    let config = props(&database, json!({}));
    let id = format!("clock-skew-{name}");
    let pods = sb.pod_names();
    let (state, _) = apply(&id, &config, None, &cluster(t, &SkewedClock::new(apply_skew)))
        .await
        .map_err(|e| format!("{name}: first apply: {e}"))?;
    if apply_skew != 0 {
        for pod in &pods {
            written_by_an_earlier_version(t, pod, &id, &state.fingerprint, &wall(apply_skew)).await?;
        }
    }
    destroy(
        &id,
        &config,
        Some(&state),
        &cluster(t, &SkewedClock::new(destroy_skew)),
    )
    .await
    .map_err(|e| format!("{name}: destroy: {e}"))?;
    let lost: Option<&SchemaState> = None;
    let (again, outcome) = apply(&id, &config, lost, &cluster(t, &SkewedClock::new(0)))
        .await
        .map_err(|e| format!("{name}: apply after the destroy, state lost: {e}"))?;
    check(
        matches!(&outcome, ApplyOutcome::Applied { pods: ran } if *ran == pods),
        format!("{name}: the statements ran again on every pod: {outcome:?}"),
    )?;
    check(
        again.pod_names == pods,
        format!("{name}: recorded {:?}", again.pod_names),
    )?;
    for pod in &pods {
        let out = t
            .exec(statement_exec(
                pod,
                &format!("EXISTS TABLE {database}.t"),
                Duration::from_secs(30),
            ))
            .await
            .map_err(|e| format!("{name}: EXISTS on {pod}: {e}"))?;
        check(
            out.stdout == "1\n",
            format!("{name}: the table is back on {pod}: {out:?}"),
        )?;
    }
    Ok(())
}

/// The apply's ledger row on `pod` as the versions before this one wrote it
/// (their script, verbatim): the deployer's own time in `applied_at`.
async fn written_by_an_earlier_version(
    t: &KubeTransport,
    pod: &str,
    id: &str,
    fingerprint: &str,
    applied_at: &str,
) -> Result<(), String> {
    let script = format!(
        "INSERT INTO `ops`.`clickhouse_schema_ledger` (resource_id, fingerprint, statement_count, pod, pod_uid, \
         applied_at, package_version) VALUES ('{id}', '{fingerprint}', 2, '{pod}', '', '{applied_at}', '0.1.0')"
    );
    let out = t
        .exec(statement_exec(pod, &script, Duration::from_secs(30)))
        .await
        .map_err(|e| format!("the earlier version's row on {pod}: {e}"))?;
    check(
        out.exit_code == 0,
        format!("the earlier version's row on {pod}: {out:?}"),
    )
}

/// Another deploy holds the lease and renews it every second, writing a
/// `renewTime` an hour behind this machine's clock: by this machine's clock
/// it expired long ago, but it is alive, so it is waited for and never taken.
async fn a_lease_renewed_by_a_clock_an_hour_behind_is_never_taken(t: &KubeTransport) -> Result<(), String> {
    let id = "clock-skew-lease";
    let lease = lease_name(id);
    let holder = "other-host/4242/abcdef012345";
    let spec = |renewed: String| LeaseSpec {
        holder: Some(holder.to_owned()),
        duration_seconds: 5,
        // MicroTime: microseconds.
        acquire_time: Some(renewed.replace('Z', "000Z")),
        renew_time: Some(renewed.replace('Z', "000Z")),
        transitions: 0,
    };
    t.create_lease(NAMESPACE, &lease, &spec(wall(-HOUR)))
        .await
        .map_err(|e| format!("create the other holder's lease: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (t, lease, stop) = (t.clone(), lease.clone(), stop.clone());
        tokio::spawn(async move {
            let mut renewals = 0u32;
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                // Renewed only while it is still the holder's, as a real holder does.
                if let Ok(Some(current)) = t.get_lease(NAMESPACE, &lease).await
                    && current.holder.as_deref() == Some(holder)
                    && t.replace_lease(NAMESPACE, &lease, &current.resource_version, &spec(wall(-HOUR)))
                        .await
                        .is_ok()
                {
                    renewals += 1;
                }
            }
            renewals
        })
    };
    let config = props(
        "skew_lease",
        json!({ "lease": { "ttlSeconds": 5 }, "waitForPod": { "timeoutMs": 12_000 } }),
    );
    let started = Instant::now();
    let outcome = apply(id, &config, None, &cluster(t, &SkewedClock::new(0))).await;
    let waited = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let renewals = renewer.await.map_err(|e| e.to_string())?;
    let err = match outcome {
        Ok((_, outcome)) => {
            return Err(format!(
                "the lease renewed every second was taken after {waited:?} and the apply ran: {outcome:?}"
            ));
        }
        Err(e) => e,
    };
    check(
        err.kind == ErrorKind::LeaseHeld && err.message.contains(holder),
        format!("E_LEASE_HELD naming the holder: {err:?}"),
    )?;
    check(
        renewals >= 8,
        format!("the other holder kept renewing throughout ({renewals} renewals)"),
    )?;
    let record = t
        .get_lease(NAMESPACE, &lease)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the lease is gone")?;
    check(
        record.holder.as_deref() == Some(holder),
        format!("still the other holder's: {record:?}"),
    )?;
    // Nothing ran: the database the statements create is on no pod.
    for pod in t
        .list_pods(NAMESPACE, &selector())
        .await
        .map_err(|e| e.to_string())?
    {
        let out = t
            .exec(statement_exec(
                &pod.name,
                "SELECT count() FROM system.databases WHERE name = 'skew_lease'",
                Duration::from_secs(30),
            ))
            .await
            .map_err(|e| format!("EXISTS on {}: {e}", pod.name))?;
        check(
            out.stdout == "0\n",
            format!("nothing ran on {}: {out:?}", pod.name),
        )?;
    }
    Ok(())
}
