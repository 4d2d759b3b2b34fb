//! Validation cost of realistic props. Target: under 50 µs per call, so
//! validating on every converge (and on every `alchemy plan`) is free.

// `criterion_group!` generates a public, undocumented `benches` function.
#![allow(missing_docs)]

use std::hint::black_box;

use clickhouse_schema_core::config::fingerprint::fingerprint;
use clickhouse_schema_core::config::validate::validate;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

fn quick_start() -> Value {
    json!({
        "target": {
            "namespace": "example-observability",
            "podSelector": { "clickhouse.altinity.com/chi": "orders" },
        },
        "statements": [
            "CREATE DATABASE IF NOT EXISTS orders",
            "CREATE TABLE IF NOT EXISTS orders.events (\n  id UUID, at DateTime, payload String\n) ENGINE = MergeTree ORDER BY at",
        ],
    })
}

/// The spec's full example: fanout, client overrides, settings, readyBarrier.
fn full_example() -> Value {
    json!({
        "readyBarrier": true,
        "target": {
            "namespace": "example-observability",
            "podSelector": { "clickhouse.altinity.com/chi": "orders" },
        },
        "client": { "user": "writer", "database": "orders" },
        "statements": [
            "CREATE DATABASE IF NOT EXISTS orders",
            "CREATE TABLE IF NOT EXISTS orders.events (\n  id UUID, at DateTime, customer String, amount Decimal(18, 2)\n) ENGINE = MergeTree\nPARTITION BY toYYYYMM(at)\nORDER BY (customer, at)\nTTL at + INTERVAL 90 DAY DELETE",
            "CREATE TABLE IF NOT EXISTS orders.events_queue (\n  id UUID, at DateTime, customer String, amount Decimal(18, 2)\n) ENGINE = S3Queue('https://storage.example.com/telemetry/orders/*.json.gz', 'JSONEachRow', 'gzip')\nSETTINGS mode = 'ordered', keeper_path = '/clickhouse/s3queue/orders-events'",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS orders.events_mv\nTO orders.events\nAS SELECT id, at, customer, amount FROM orders.events_queue",
        ],
        "settings": { "distributed_ddl_task_timeout": 300 },
        "onDelete": "retain",
    })
}

/// The full example under onCluster with teardown: every statement and delete
/// statement also goes through the ON CLUSTER lexer check.
fn full_on_cluster() -> Value {
    json!({
        "readyBarrier": true,
        "target": {
            "namespace": "example-observability",
            "podSelector": { "clickhouse.altinity.com/chi": "orders", "app.kubernetes.io/component": "server" },
            "container": "clickhouse",
        },
        "client": { "user": "writer", "database": "orders", "passwordEnv": "CLICKHOUSE_PASSWORD", "port": 9000 },
        "execution": { "mode": "onCluster", "cluster": "cluster" },
        "statements": [
            "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER 'cluster'",
            "CREATE TABLE IF NOT EXISTS orders.events ON CLUSTER 'cluster' (\n  id UUID, at DateTime, customer String, amount Decimal(18, 2)\n) ENGINE = ReplicatedMergeTree\nPARTITION BY toYYYYMM(at)\nORDER BY (customer, at)\nTTL at + INTERVAL 90 DAY DELETE",
            "CREATE TABLE IF NOT EXISTS orders.events_queue ON CLUSTER 'cluster' (\n  id UUID, at DateTime, customer String, amount Decimal(18, 2)\n) ENGINE = S3Queue('https://storage.example.com/telemetry/orders/*.json.gz', 'JSONEachRow', 'gzip')\nSETTINGS mode = 'ordered', keeper_path = '/clickhouse/s3queue/orders-events'",
            "CREATE MATERIALIZED VIEW IF NOT EXISTS orders.events_mv ON CLUSTER 'cluster'\nTO orders.events\nAS SELECT id, at, customer, amount FROM orders.events_queue",
        ],
        "settings": { "distributed_ddl_task_timeout": 300, "insert_quorum": "auto" },
        "onDelete": "run",
        "deleteStatements": [
            "DROP TABLE IF EXISTS orders.events_mv ON CLUSTER 'cluster'",
            "DROP TABLE IF EXISTS orders.events_queue ON CLUSTER 'cluster'",
            "DROP TABLE IF EXISTS orders.events ON CLUSTER 'cluster'",
            "DROP DATABASE IF EXISTS orders ON CLUSTER 'cluster'",
        ],
        "waitForPod": { "timeoutMs": 120000 },
        "maxReconcilePasses": 3,
        "statementTimeoutMs": 300000,
        "retry": { "maxAttempts": 3, "backoffMs": 1000 },
        "kubeConfig": { "context": "prod", "skipTLSVerify": false },
    })
}

fn many_problems() -> Value {
    json!({
        "target": { "namespace": "Bad_NS", "podSelector": { "bad key": "v" } },
        "client": { "password": "x", "port": 0 },
        "statements": ["SELECT 1", " "],
        "execution": { "mode": "sideways" },
        "onDelete": "run",
        "extra": 1,
    })
}

fn bench(c: &mut Criterion) {
    let quick = quick_start();
    let example = full_example();
    let full = full_on_cluster();
    let bad = many_problems();
    // Pay the one-off schema compilation outside the measurement, and make
    // sure the fixtures are what they claim to be.
    assert!(validate("bench", &quick).is_ok());
    assert!(
        validate("bench", &full).is_ok(),
        "{:?}",
        validate("bench", &full).err()
    );
    assert!(validate("bench", &bad).is_err());

    c.bench_function("validate/quick_start", |b| {
        b.iter(|| validate(black_box("orders-schema"), black_box(&quick)).is_ok())
    });
    c.bench_function("validate/full_example", |b| {
        b.iter(|| validate(black_box("orders-schema"), black_box(&example)).is_ok())
    });
    c.bench_function("validate/full_on_cluster", |b| {
        b.iter(|| validate(black_box("orders-schema"), black_box(&full)).is_ok())
    });
    c.bench_function("validate/invalid_many_problems", |b| {
        b.iter(|| validate(black_box("orders-schema"), black_box(&bad)).is_ok())
    });
    let resolved = validate("bench", &full).expect("valid");
    c.bench_function("fingerprint/full_on_cluster", |b| {
        b.iter(|| fingerprint(black_box(&resolved)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
