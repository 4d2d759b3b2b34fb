//! Redaction's memory follows the output it redacts, not the statement: a
//! 16 MiB literal on the failure path once cost over a gigabyte (every 6-byte
//! window of every spelling went into a hash set). A counting allocator
//! measures the peak of one redaction here. Its own binary, so no other test
//! allocates while it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use clickhouse_schema_core::sql::redact::redact_clickhouse_output;

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(now, Ordering::SeqCst);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::SeqCst);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn a_huge_literal_costs_a_few_copies_of_itself_and_is_still_redacted() {
    const LITERAL: usize = 16 << 20;
    // Not one repeated byte: distinct windows are what filled the old index.
    let secret: String = (0..LITERAL)
        .map(|i| char::from(b'a' + ((i * 7 + i / 26) % 26) as u8))
        .collect();
    let statement = format!("INSERT INTO t VALUES ('{secret}')");
    let echo = &secret[1000..1400];
    let output =
        format!("Code: 27. DB::Exception: Cannot parse input: expected ) before: '{echo}': (at row 1)\n");

    let before = CURRENT.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let redacted = redact_clickhouse_output(&output, &statement);
    let peak = PEAK.load(Ordering::SeqCst) - before;

    eprintln!(
        "redaction peak: {} MiB for a {} MiB literal",
        peak >> 20,
        LITERAL >> 20
    );
    assert!(!redacted.text.contains(&echo[..40]), "{}", redacted.text);
    assert!(redacted.text.contains("<redacted>"), "{}", redacted.text);
    assert_eq!(redacted.clickhouse_code, Some(27));
    // The spellings of one value at a time (decoded, as written, two
    // re-escaped forms) plus the lexer's tokens: a small multiple of the
    // statement, where the window index alone used to be ~40x.
    assert!(
        peak < 8 * LITERAL,
        "peak {} MiB for a {} MiB literal",
        peak >> 20,
        LITERAL >> 20
    );
}
