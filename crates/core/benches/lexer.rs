//! Lexing and the onCluster check over a ~1 MiB statement.
//! Target: at least 100 MiB/s for both.

// `criterion_group!` generates a public, undocumented `benches` function.
#![allow(missing_docs)]

use std::hint::black_box;

use clickhouse_schema_core::sql::lexer::tokenize;
use clickhouse_schema_core::sql::on_cluster::check_statement;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// A large but realistic statement: many columns with defaults, comments and
/// escaped literals, ending with the ON CLUSTER clause so the check reads all.
fn big_statement() -> String {
    let mut sql = String::from("CREATE TABLE IF NOT EXISTS orders.events\n(\n");
    let mut i = 0;
    while sql.len() < (1 << 20) {
        sql.push_str(&format!(
            "    col_{i} String DEFAULT 'value ''{i}'' with \\n escapes and ключ', -- column {i}\n    \
             `quoted col {i}` Decimal(18, 2) DEFAULT 1.5e3 /* block {i} */,\n"
        ));
        i += 1;
    }
    sql.push_str("    last UInt8\n) ENGINE = ReplicatedMergeTree ORDER BY tuple() ON CLUSTER 'cluster'");
    sql
}

fn bench(c: &mut Criterion) {
    let sql = big_statement();
    let mut group = c.benchmark_group("lexer");
    group.throughput(Throughput::Bytes(sql.len() as u64));
    group.bench_function("tokenize_1MiB", |b| b.iter(|| tokenize(black_box(&sql)).len()));
    group.bench_function("on_cluster_check_1MiB", |b| {
        b.iter(|| check_statement("statements", 0, black_box(&sql), "cluster").is_ok())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
