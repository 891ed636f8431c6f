//! The store's own write ceiling: applying 100,000 in-memory records in chunks of 1,000, as a
//! restore does, with no fetching. Restore throughput cannot exceed this.
//!
//! `cargo run --release -p baton-runtime --example apply_only [VALUE_BYTES]`

use std::time::Instant;

use baton_assignor::TaskId;
use baton_runtime::TaskStore;

fn main() {
    let size: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let dir = std::env::temp_dir().join(format!("baton-apply-only-{}", std::process::id()));
    let store = TaskStore::open(&dir, TaskId::new(0, 0), "store").unwrap();
    let n = 100_000;
    let writes: Vec<_> = (0..n)
        .map(|i| (format!("key-{i:09}").into_bytes(), Some(vec![b'v'; size])))
        .collect();
    let start = Instant::now();
    for (i, chunk) in writes.chunks(1000).enumerate() {
        store
            .apply_lazily(chunk, Some(((i + 1) * 1000) as i64))
            .unwrap();
    }
    store.apply(&[], Some(n as i64)).unwrap();
    println!(
        "apply only: {:.0} records/s ({size}-byte values)",
        n as f64 / start.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
