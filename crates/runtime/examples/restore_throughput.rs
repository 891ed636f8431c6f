//! Restore throughput (records/s into the store from the changelog) beside the client's raw
//! fetch throughput over the same records, in the same run.
//!
//! `cargo run --release -p baton-runtime --example restore_throughput [RECORDS] [VALUE_BYTES]`

use std::time::Instant;

use baton_assignor::TaskId;
use baton_kafka::client::NewTopic;
use baton_kafka::testing::Broker;
use baton_kafka::Client;
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

    let start = Instant::now();
    let mut next = 0i64;
    while next < end {
        let f = client
            .fetch(&leader, "changelog", 0, next, 1024 * 1024, 500)
            .await
            .unwrap();
        next = f.records.last().map(|r| r.offset + 1).unwrap_or(next);
    }
    let fetch_rate = n as f64 / start.elapsed().as_secs_f64();

    let dir = std::env::temp_dir().join(format!("baton-restore-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = TaskStore::open(&dir, TaskId::new(0, 0), "store").unwrap();
    let stats = restore(&client, &leader, "changelog", 0, &store, end, 1024 * 1024)
        .await
        .unwrap();
    let restore_rate = stats.records as f64 / stats.seconds;
    println!(
        "raw fetch: {fetch_rate:.0} records/s; restore into the store: {restore_rate:.0} records/s ({:.0}% of raw fetch; {n} records, {size}-byte values)",
        100.0 * restore_rate / fetch_rate
    );
    let _ = std::fs::remove_dir_all(&dir);
}
