//! Redaction of a 64 KiB output against a statement holding 100 literals.
//! Target: under 1 ms.

// `criterion_group!` generates a public, undocumented `benches` function.
#![allow(missing_docs)]

use std::hint::black_box;

use clickhouse_schema_core::sql::redact::redact_clickhouse_output;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn literal(i: usize) -> String {
    format!(
        "s3cr3t-{i:03}-wJalr\\'XUtn''FEMI\\\\K7MDENG-{}",
        "x".repeat(i % 17)
    )
}

fn statement() -> String {
    let args: Vec<String> = (0..100).map(|i| format!("'{}'", literal(i))).collect();
    format!("INSERT INTO app.t VALUES ({})", args.join(", "))
}

/// Parser-trace-like noise with an echo of some literal every ~600 bytes.
fn output() -> String {
    let mut out = String::from("Code: 62. DB::Exception: Syntax error: failed at position 1234: ");
    let mut i = 0;
    while out.len() < 64 * 1024 {
        out.push_str("Expected one of: function, identifier, nested table, compound identifier, ");
        out.push_str("string literal, number, parenthesized expression, SELECT subquery, asterisk; ");
        out.push_str(&format!("near '{}' ", literal(i * 7 % 100)));
        i += 1;
    }
    out
}

fn bench(c: &mut Criterion) {
    let statement = statement();
    let output = output();
    let mut group = c.benchmark_group("redact");
    group.throughput(Throughput::Bytes(output.len() as u64));
    group.bench_function("64KiB_output_100_literals", |b| {
        b.iter(|| redact_clickhouse_output(black_box(&output), black_box(&statement)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
