//! `baton produce`: test events at a steady rate. Event `i` has key `<prefix><i % keys>` and
//! value `i`, and goes to the key's partition under Kafka's default partitioner, so the counts
//! every key must reach are known in advance.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use baton_kafka::client::NewTopic;
use baton_kafka::records::KeyValue;
use baton_kafka::Client;
use baton_runtime::partitioner::partition_for;
use bytes::Bytes;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::{tokio_runtime, Failure};

/// Events are sent in batches this often.
const TICK: Duration = Duration::from_millis(10);

#[derive(Args)]
pub struct ProduceArgs {
    /// A broker to bootstrap from, HOST:PORT.
    #[arg(long)]
    bootstrap: String,
    #[arg(long, default_value = "events")]
    topic: String,
    /// Events per second.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// How many events in all.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// How many distinct keys.
    #[arg(long, default_value_t = 100)]
    keys: u64,
    #[arg(long, default_value = "key-")]
    key_prefix: String,
    /// Partitions of the topic if it has to be created.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// The first event number (to continue an earlier run).
    #[arg(long, default_value_t = 0)]
    start: u64,
}

pub fn run(args: ProduceArgs) -> Result<(), Failure> {
    if args.rate == 0 || args.keys == 0 || args.partitions < 1 {
        return Err(Failure::bad_input(
            "--rate, --keys and --partitions must be positive",
        ));
    }
    let fail = |what: &str| {
        let what = what.to_owned();
        move |e: baton_kafka::Error| Failure {
            message: format!("{what}: {e}"),
            status: 1,
        }
    };
    let runtime = tokio_runtime()?;
    runtime.block_on(async {
        let client = Client::new(&[&args.bootstrap], "baton-produce");
        client
            .create_topics(&[NewTopic {
                name: args.topic.clone(),
                partitions: args.partitions,
                compacted: false,
            }])
            .await
            .map_err(fail("creating the topic"))?;
        let meta = client
            .metadata(Some(std::slice::from_ref(&args.topic)))
            .await
            .map_err(fail("reading metadata"))?;
        let partitions = meta
            .topics
            .first()
            .map(|t| t.partitions.len() as u32)
            .filter(|&n| n > 0)
            .ok_or_else(|| Failure {
                message: format!("topic {} has no partitions", args.topic),
                status: 1,
            })?;
        let mut leaders = BTreeMap::new();
        for p in 0..partitions as i32 {
            let l = client
                .leader(&args.topic, p)
                .await
                .map_err(fail("finding leaders"))?;
            leaders.insert(p, l);
        }
        let bar = if std::io::stderr().is_terminal() {
            let b = ProgressBar::new(args.count);
            b.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} events {per_sec} eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        } else {
            ProgressBar::hidden()
        };
        let started = Instant::now();
        let mut sent = 0u64;
        while sent < args.count {
            let due = ((started.elapsed().as_secs_f64() * args.rate as f64) as u64)
                .clamp(sent + 1, args.count);
            let mut batches: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
            for i in sent..due {
                let n = args.start + i;
                let key = format!("{}{}", args.key_prefix, n % args.keys);
                let p = partition_for(key.as_bytes(), partitions) as i32;
                batches
                    .entry(p)
                    .or_default()
                    .push((Some(Bytes::from(key)), Some(Bytes::from(n.to_string()))));
            }
            for (p, batch) in batches {
                client
                    .produce(&leaders[&p], &args.topic, p, &batch)
                    .await
                    .map_err(fail("producing"))?;
            }
            bar.set_position(due);
            sent = due;
            tokio::time::sleep(TICK).await;
        }
        bar.finish_and_clear();
        let secs = started.elapsed().as_secs_f64();
        println!(
            "produced {sent} events over {} keys to {} in {secs:.1} s ({:.0}/s)",
            args.keys,
            args.topic,
            sent as f64 / secs.max(1e-9)
        );
        Ok(())
    })
}
