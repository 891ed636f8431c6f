//! Restore throughput (records/s into the store from the changelog) beside the client's raw
//! fetch throughput over the same records, and the store's own bulk-load speed on those records
//! with no fetching (the ceiling a restore cannot pass on two cores), all in the same run.
//!
//! `cargo run --release -p baton-runtime --example restore_throughput [RECORDS] [VALUE_BYTES]`

use std::time::Instant;

use baton_assignor::TaskId;
use baton_kafka::client::NewTopic;
use baton_kafka::testing::Broker;
use baton_kafka::Client;
use baton_runtime::catchup::{load_limits, INGEST_BYTES, INGEST_RECORDS};
use baton_runtime::{restore, TaskStore};
use bytes::Bytes;

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let size: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "restore-bench");
    client
        .create_topics(&[NewTopic {
            name: "changelog".into(),
            partitions: 1,
            compacted: true,
        }])
        .await
        .unwrap();
    let leader = client.leader("changelog", 0).await.unwrap();
    let value = Bytes::from(vec![b'v'; size]);
    let mut sent = 0;
    while sent < n {
        let k = (512 * 1024 / (size + 16)).max(1).min(n - sent);
        let batch: Vec<(Option<Bytes>, Option<Bytes>)> = (sent..sent + k)
            .map(|i| {
                (
                    Some(Bytes::from(format!("key-{i:09}"))),
                    Some(value.clone()),
                )
            })
            .collect();
        client
            .produce(&leader, "changelog", 0, &batch)
            .await
            .unwrap();
        sent += k;
    }
    let end = n as i64;
    // The runtime's own fetch size for restores and tailing, for the raw fetch too.
    let fetch_bytes = baton_runtime::config::RuntimeConfig::default().restore_fetch_bytes;

    let start = Instant::now();
    let mut next = 0i64;
    while next < end {
        let f = client
            .fetch(&leader, "changelog", 0, next, fetch_bytes, 500)
            .await
            .unwrap();
        next = f.records.last().map(|r| r.offset + 1).unwrap_or(next);
    }
    let fetch_rate = n as f64 / start.elapsed().as_secs_f64();

    let dir = std::env::temp_dir().join(format!("baton-restore-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = TaskStore::open(&dir, TaskId::new(0, 0), "store").unwrap();
    let stats = restore(&client, &leader, "changelog", 0, &store, end, fetch_bytes)
        .await
        .unwrap();
    let restore_rate = stats.records as f64 / stats.seconds;

    // The store alone: the same records, already in memory, bulk-loaded as a restore does.
    let mut records = Vec::with_capacity(n);
    let mut next = 0i64;
    while next < end {
        let f = client
            .fetch(&leader, "changelog", 0, next, 1024 * 1024, 500)
            .await
            .unwrap();
        next = f.records.last().map(|r| r.offset + 1).unwrap_or(next);
        records.extend(f.records.into_iter().map(|r| (r.key.unwrap(), r.value)));
    }
    // Twice: in the restore's own load sizes (growing), and in full-size loads from the
    // start, the store's best; the restore is judged against the faster of the two.
    let full = |_: u32| (INGEST_RECORDS, INGEST_BYTES);
    let same_rate = load_alone(&dir, "alone-same", records.clone(), &load_limits, end);
    let full_rate = load_alone(&dir, "alone-full", records, &full, end);
    let store_rate = same_rate.max(full_rate);
    println!(
        "{n} records, {size}-byte values: raw fetch {fetch_rate:.0}/s; restore {restore_rate:.0}/s ({:.0}% of raw fetch, {:.0}% of the store alone); store alone, no fetching {store_rate:.0}/s ({:.0}% of raw fetch; {same_rate:.0}/s in the restore's load sizes, {full_rate:.0}/s in full loads)",
        100.0 * restore_rate / fetch_rate,
        100.0 * restore_rate / store_rate,
        100.0 * store_rate / fetch_rate
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bulk-loads `records` into a fresh store in loads of `limits(n)` for load `n`; records/s.
fn load_alone(
    dir: &std::path::Path,
    name: &str,
    mut records: Vec<(Bytes, Option<Bytes>)>,
    limits: &dyn Fn(u32) -> (usize, usize),
    end: i64,
) -> f64 {
    let n = records.len();
    let store = TaskStore::open(dir, TaskId::new(0, 0), name).unwrap();
    let start = Instant::now();
    let mut loaded = 0;
    let mut loads = 0;
    while !records.is_empty() {
        let (limit_records, limit_bytes) = limits(loads);
        loads += 1;
        let mut take = 0;
        let mut bytes = 0;
        while take < records.len() && take < limit_records && bytes < limit_bytes {
            bytes += records[take].0.len() + records[take].1.as_ref().map_or(0, |v| v.len());
            take += 1;
        }
        let rest = records.split_off(take);
        loaded += records.len();
        store
            .ingest(std::mem::replace(&mut records, rest), loaded as i64)
            .unwrap();
    }
    store.apply(&[], Some(end)).unwrap();
    n as f64 / start.elapsed().as_secs_f64()
}
