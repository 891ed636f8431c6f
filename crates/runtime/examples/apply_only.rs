//! The store's own write ceiling, with no fetching: 1,000,000 in-memory records applied in
//! chunks of 1,000 (the per-record path), and bulk-loaded in loads of 500,000 (the restore path).
//! Restore throughput cannot exceed these.
//!
//! `cargo run --release -p baton-runtime --example apply_only [VALUE_BYTES]`

use std::time::Instant;

use baton_assignor::TaskId;
use baton_runtime::catchup::INGEST_RECORDS;
use baton_runtime::store::Write;
use baton_runtime::TaskStore;

fn main() {
    let size: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let n = 1_000_000;
    let writes: Vec<Write> = (0..n)
        .map(|i| (format!("key-{i:09}").into_bytes(), Some(vec![b'v'; size])))
        .collect();
    let dir = std::env::temp_dir().join(format!("baton-apply-only-{}", std::process::id()));

    let store = TaskStore::open(&dir, TaskId::new(0, 0), "batches").unwrap();
    let start = Instant::now();
    for (i, chunk) in writes.chunks(1000).enumerate() {
        store
            .apply_lazily(chunk, Some(((i + 1) * 1000) as i64))
            .unwrap();
    }
    store.apply(&[], Some(n as i64)).unwrap();
    let batches = n as f64 / start.elapsed().as_secs_f64();

    let store = TaskStore::open(&dir, TaskId::new(0, 0), "bulk").unwrap();
    let start = Instant::now();
    for (i, chunk) in writes.chunks(INGEST_RECORDS).enumerate() {
        store
            .ingest(&mut chunk.to_vec(), ((i + 1) * INGEST_RECORDS) as i64)
            .unwrap();
    }
    store.apply(&[], Some(n as i64)).unwrap();
    let bulk = n as f64 / start.elapsed().as_secs_f64();
    println!(
        "store only ({size}-byte values): batches {batches:.0} records/s, bulk load {bulk:.0} records/s ({:.1}x)",
        bulk / batches
    );
    let _ = std::fs::remove_dir_all(&dir);
}
