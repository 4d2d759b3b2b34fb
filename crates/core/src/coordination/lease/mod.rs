//! The pure parts of the Lease that serializes applies and destroys of one
//! resource (`lease` prop): its name, the holder identity, and time as the
//! Lease API writes it. Its driver over the transport (take, renew,
//! release) is `run`.
//!
//! The Lease lives in the target namespace and is named from the resource id,
//! so every deploy of the same resource (a laptop, CI, five jobs at once)
//! contends for the same object, and two resources never do. Its holder is
//! the process (host and pid, from the transport) plus a per-call suffix: two
//! calls in one process are two holders, so they serialize too.

mod run;

use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// `clickhouse-schema-<the id, as a DNS label>-<8 hex of its sha256>`: a
/// valid object name for any id, distinct for distinct ids.
pub fn lease_name(resource_id: &str) -> String {
    let mut label = String::new();
    for c in resource_id.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            label.push(c);
        } else if !label.ends_with('-') {
            label.push('-');
        }
    }
    let label: String = label.trim_matches('-').chars().take(40).collect();
    let label = label.trim_end_matches('-');
    let hash = hex::encode(&Sha256::digest(resource_id.as_bytes())[..4]);
    if label.is_empty() {
        format!("clickhouse-schema-{hash}")
    } else {
        format!("clickhouse-schema-{label}-{hash}")
    }
}

/// `<process>/<12 hex>`: unique per call, from the process identity and what
/// only this call has (its seed and a counter of the process).
pub fn holder_identity(process: &str, seed: &str) -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let digest = Sha256::digest(format!("{process}|{seed}|{call}").as_bytes());
    format!("{process}/{}", &hex::encode(digest)[..12])
}

/// The Lease API's MicroTime (`2026-12-01T10:00:00.123456Z`) of an RFC 3339
/// UTC time as the clock gives it (`...T10:00:00.123Z`).
pub fn micro_time(rfc3339: &str) -> String {
    let Some(base) = rfc3339.strip_suffix('Z') else {
        return rfc3339.to_owned();
    };
    let (seconds, fraction) = base.split_once('.').unwrap_or((base, ""));
    let mut micros: String = fraction.chars().take(6).collect();
    while micros.len() < 6 {
        micros.push('0');
    }
    format!("{seconds}.{micros}Z")
}

/// Microseconds since the Unix epoch of an RFC 3339 time (`Z` or a numeric
/// offset, any fraction); `None` when it is not one.
pub fn unix_micros(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, rest) = text.split_once(['T', 't', ' '])?;
    let mut date_parts = date.split('-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: i64 = date_parts.next()?.parse().ok()?;
    let day: i64 = date_parts.next()?.parse().ok()?;
    let (time, offset_secs) = if let Some(time) = rest.strip_suffix(['Z', 'z']) {
        (time, 0)
    } else {
        let at = rest.rfind(['+', '-'])?;
        let (time, offset) = rest.split_at(at);
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let (h, m) = offset[1..].split_once(':')?;
        (
            time,
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60),
        )
    };
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock_parts = clock.split(':');
    let hour: i64 = clock_parts.next()?.parse().ok()?;
    let minute: i64 = clock_parts.next()?.parse().ok()?;
    let second: i64 = clock_parts.next()?.parse().ok()?;
    let mut micros_text: String = fraction.chars().take(6).collect();
    if !micros_text.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    while micros_text.len() < 6 {
        micros_text.push('0');
    }
    let micros: i64 = micros_text.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(seconds * 1_000_000 + micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_and_distinct() {
        assert_eq!(
            lease_name("orders-schema"),
            format!(
                "clickhouse-schema-orders-schema-{}",
                hex::encode(&Sha256::digest(b"orders-schema")[..4])
            )
        );
        let odd = lease_name("Orders Schema/v2!!");
        assert!(odd.starts_with("clickhouse-schema-orders-schema-v2-"), "{odd}");
        assert_ne!(
            lease_name("a.b"),
            lease_name("a_b"),
            "the hash keeps ids apart that read alike"
        );
        for id in ["", "---", "ß", &"x".repeat(300)] {
            let name = lease_name(id);
            assert!(
                name.len() <= 253
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
            assert!(!name.ends_with('-') && !name.contains("--"), "{name}");
        }
    }

    #[test]
    fn holders_differ_per_call() {
        let a = holder_identity("host/1", "seed");
        let b = holder_identity("host/1", "seed");
        assert_ne!(a, b);
        assert!(a.starts_with("host/1/"), "{a}");
    }

    #[test]
    fn times() {
        assert_eq!(
            micro_time("2026-12-01T10:00:00.123Z"),
            "2026-12-01T10:00:00.123000Z"
        );
        assert_eq!(micro_time("2026-12-01T10:00:00Z"), "2026-12-01T10:00:00.000000Z");
        assert_eq!(unix_micros("1970-01-01T00:00:01Z"), Some(1_000_000));
        assert_eq!(
            unix_micros("2026-12-01T10:00:00.123456Z"),
            Some(1_796_119_200_123_456)
        );
        assert_eq!(
            unix_micros("2026-12-01T11:00:00.123456+01:00"),
            unix_micros("2026-12-01T10:00:00.123456Z")
        );
        assert_eq!(unix_micros("2000-02-29T00:00:00Z"), Some(951_782_400_000_000));
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-12-01T10:00Z",
            "2026-12-01T10:00:00.x1Z",
        ] {
            assert_eq!(unix_micros(bad), None, "{bad}");
        }
    }
}
