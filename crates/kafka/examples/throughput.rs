//! Produce and fetch throughput of Baton's client against a fresh broker, beside librdkafka
//! (through Python's confluent-kafka, when installed) on the same broker in the same run.
//!
//! `cargo run --release -p baton-kafka --example throughput [RECORDS] [RECORD_BYTES]`

use std::process::Command;
use std::time::Instant;

use baton_kafka::client::NewTopic;
use baton_kafka::testing::Broker;
use baton_kafka::Client;
use bytes::Bytes;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let size: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "throughput");
    client
        .create_topics(&[
            NewTopic {
                name: "baton".into(),
                partitions: 1,
                compacted: false,
            },
            NewTopic {
                name: "librdkafka".into(),
                partitions: 1,
                compacted: false,
            },
        ])
        .await
        .unwrap();
    let leader = client.leader("baton", 0).await.unwrap();
    let value = Bytes::from(vec![b'x'; size]);
    let per_request = (512 * 1024 / size).max(1);
    let mb = (n * size) as f64 / 1e6;

    let start = Instant::now();
    let mut sent = 0;
    while sent < n {
        let k = per_request.min(n - sent);
        let batch: Vec<(Option<Bytes>, Option<Bytes>)> =
            (0..k).map(|_| (None, Some(value.clone()))).collect();
        client.produce(&leader, "baton", 0, &batch).await.unwrap();
        sent += k;
    }
    let produce = mb / start.elapsed().as_secs_f64();

    let start = Instant::now();
    let mut next = 0i64;
    while (next as usize) < n {
        let f = client
            .fetch(&leader, "baton", 0, next, 1024 * 1024, 500)
            .await
            .unwrap();
        next = f.records.last().map(|r| r.offset + 1).unwrap_or(next);
    }
    let fetch = mb / start.elapsed().as_secs_f64();
    println!("baton:      produce {produce:.1} MB/s, fetch {fetch:.1} MB/s ({n} records of {size} bytes)");

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/librdkafka_throughput.py"
    );
    match Command::new("python3")
        .args([
            script,
            &broker.addr,
            "librdkafka",
            &n.to_string(),
            &size.to_string(),
        ])
        .output()
    {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let get = |key: &str| -> Option<f64> {
                text.lines()
                    .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
            };
            if let (Some(p), Some(f)) = (get("produce"), get("fetch")) {
                println!("librdkafka: produce {p:.1} MB/s, fetch {f:.1} MB/s");
                println!(
                    "ratio:      produce {:.0}%, fetch {:.0}%",
                    100.0 * produce / p,
                    100.0 * fetch / f
                );
            }
        }
        Ok(out) => eprintln!(
            "librdkafka baseline failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("librdkafka baseline not run (python3: {e})"),
    }
}
