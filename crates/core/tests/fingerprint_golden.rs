//! Golden vectors for the fingerprint encoding (v1).
//!
//! The expected digests were computed once, independently of the Rust code,
//! by building the byte encoding documented in `src/config/fingerprint.rs` by hand in
//! Python (hashlib + struct) with the script reproduced below. If one of these
//! tests fails, the encoding changed: every deployed resource would re-run its
//! DDL on the next converge. Either revert the change, or bump the version in
//! `FINGERPRINT_MAGIC` deliberately and recompute the vectors with the script.
//!
//! ```python
//! # Independent implementation of the documented fingerprint v1 encoding.
//! import hashlib, struct
//! MAGIC = b"clickhouse-schema/fingerprint/v1\n"
//! def field(tag, s):
//!     b = s.encode("utf-8")
//!     return tag.encode("ascii") + struct.pack(">Q", len(b)) + b
//! def fp(statements, settings, user="default", database="default", password_env="CLICKHOUSE_PASSWORD", port=9000, mode="fanout", cluster=None):
//!     out = MAGIC
//!     for s in statements: out += field("q", s)
//!     for name in sorted(settings, key=lambda n: n.encode("utf-8")):
//!         kind, text = settings[name]
//!         out += field("k", name) + field(kind, text)
//!     out += field("u", user) + field("d", database) + field("e", password_env) + field("p", str(port))
//!     out += field("m", mode)
//!     if cluster is not None: out += field("c", cluster)
//!     return hashlib.sha256(out).hexdigest()
//!
//! quick = ["CREATE DATABASE IF NOT EXISTS orders",
//!          "CREATE TABLE IF NOT EXISTS orders.events (id UUID, at DateTime, payload String) ENGINE = MergeTree ORDER BY at"]
//! print("1 quick", fp(quick, {}))
//! full = ["CREATE DATABASE IF NOT EXISTS orders",
//!         "CREATE TABLE IF NOT EXISTS orders.events (id UUID, at DateTime, customer String, amount Decimal(18, 2)) ENGINE = MergeTree PARTITION BY toYYYYMM(at) ORDER BY (customer, at) TTL at + INTERVAL 90 DAY DELETE",
//!         "CREATE MATERIALIZED VIEW IF NOT EXISTS orders.events_mv TO orders.events AS SELECT id, at, customer, amount FROM orders.events_queue"]
//! print("2 full", fp(full, {"distributed_ddl_task_timeout": ("n", "300")}, user="writer", database="orders"))
//! onc = ["CREATE DATABASE IF NOT EXISTS orders ON CLUSTER 'cluster'",
//!        "CREATE TABLE IF NOT EXISTS orders.events ON CLUSTER 'cluster' (id UUID, at DateTime) ENGINE = ReplicatedMergeTree ORDER BY at"]
//! print("3 oncluster", fp(onc, {"distributed_ddl_task_timeout": ("n", "300"), "insert_quorum": ("s", "auto")}, password_env="CH_PASS", port=9440, mode="onCluster", cluster="cluster"))
//! print("4 settings", fp(["SELECT 1"], {"a_string": ("s", "300"), "z_float": ("n", "0.5"), "m_negative": ("n", "-1"), "big": ("n", "10000000000")}))
//! print("5 unicode", fp(["CREATE TABLE IF NOT EXISTS t (s String DEFAULT 'é→✓')", "  SELECT\n1  "], {}, user="ü", database="db"))
//! ```

use clickhouse_schema_core::config::fingerprint::fingerprint;
use clickhouse_schema_core::config::validate::validate;
use serde_json::{Value, json};

fn fp(props: Value) -> String {
    fingerprint(&validate("golden", &props).expect("golden props are valid"))
}

fn target() -> Value {
    json!({ "namespace": "example-observability", "podSelector": { "clickhouse.altinity.com/chi": "orders" } })
}

#[test]
fn golden_quick_start_with_defaults() {
    let digest = fp(json!({
        "target": target(),
        "statements": [
            "CREATE DATABASE IF NOT EXISTS orders",
            "CREATE TABLE IF NOT EXISTS orders.events (id UUID, at DateTime, payload String) ENGINE = MergeTree ORDER BY at",
        ],
    }));
    assert_eq!(
        digest,
        "bafc8b2de13efbd7205bf8c3fd43b4d5b67c61cae9912bb9a540aaa801b5facf"
    );
}

#[test]
fn golden_full_example() {
    let digest = fp(json!({
        "readyBarrier": true,
        "target": target(),
        "client": { "user": "writer", "database": "orders" },
        "statements": [
            "CREATE DATABASE IF NOT EXISTS orders",
            "CREATE TABLE IF NOT EXISTS orders.events (id UUID, at DateTime, customer String, amount Decimal(18, 2)) ENGINE = MergeTree PARTITION BY toYYYYMM(at) ORDER BY (customer, at) TTL at + INTERVAL 90 DAY DELETE",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS orders.events_mv TO orders.events AS SELECT id, at, customer, amount FROM orders.events_queue",
        ],
        "settings": { "distributed_ddl_task_timeout": 300 },
        "onDelete": "retain",
    }));
    assert_eq!(
        digest,
        "203ee495f63c18c030c82f5074bbed36c7d1112122153dba1e667c1ed3322070"
    );
}

#[test]
fn golden_on_cluster() {
    let digest = fp(json!({
        "target": target(),
        "client": { "passwordEnv": "CH_PASS", "port": 9440 },
        "execution": { "mode": "onCluster", "cluster": "cluster" },
        "statements": [
            "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER 'cluster'",
            "CREATE TABLE IF NOT EXISTS orders.events ON CLUSTER 'cluster' (id UUID, at DateTime) ENGINE = ReplicatedMergeTree ORDER BY at",
        ],
        "settings": { "insert_quorum": "auto", "distributed_ddl_task_timeout": 300 },
    }));
    assert_eq!(
        digest,
        "8d59cfed8ca8099edef3b7a5d9825ddaa01c6035c356f77fe16bd03185c00fdb"
    );
}

#[test]
fn golden_setting_value_kinds() {
    // String vs number tags, a fraction, a negative, and an integral float
    // written with an exponent (rendered as plain decimal).
    let digest = fp(json!({
        "target": target(),
        "statements": ["SELECT 1"],
        "settings": { "z_float": 0.5, "m_negative": -1, "big": 1e10, "a_string": "300" },
    }));
    assert_eq!(
        digest,
        "17ca3cff474616131d1a11ea9acdb4452448a7e0eadb0abbd16484cffaf73209"
    );
}

#[test]
fn golden_multibyte_text_is_length_prefixed_in_bytes() {
    // Statements are hashed verbatim: surrounding whitespace is not trimmed.
    let digest = fp(json!({
        "target": target(),
        "client": { "user": "ü", "database": "db" },
        "statements": ["CREATE TABLE IF NOT EXISTS t (s String DEFAULT 'é→✓')", "  SELECT\n1  "],
    }));
    assert_eq!(
        digest,
        "821504b2592cdccb6c17609e9a08be2a6d088823d685c4f98ab358cb53e55810"
    );
}
