//! `baton produce`: test events at a steady rate. Event `i` has key `<prefix><i % keys>` and
//! value `i`, and goes to the key's partition under Kafka's default partitioner, so the counts
//! every key must reach are known in advance.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use baton_kafka::client::NewTopic;
use baton_kafka::records::{fitting, KeyValue, DEFAULT_BATCH_LIMIT};
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
    /// The topic to write to (created with --partitions if missing).
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
    /// Keys are this prefix and a number below --keys.
    #[arg(long, default_value = "key-")]
    key_prefix: String,
    /// Partitions of the topic if it has to be created.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// The first event number (to continue an earlier run).
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Give up (exit 1) when nothing could be written for this long: the broker is down or
    /// silent. Shorter outages (a broker restart) are ridden out: the events are sent again
    /// (a batch whose answer was lost may then be written twice).
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
}

pub fn run(args: ProduceArgs) -> Result<(), Failure> {
    if args.rate == 0 || args.keys == 0 || args.partitions < 1 {
        return Err(Failure::bad_input(
            "--rate, --keys and --partitions must be positive",
        ));
    }
    let runtime = tokio_runtime()?;
    let limit = Duration::from_millis(args.timeout_ms);
    runtime.block_on(async {
        let client = Client::new(&[&args.bootstrap], "baton-produce");
        client.set_request_timeout(limit.min(Duration::from_secs(10)));
        let (partitions, mut leaders) =
            crate::within(limit, &args.bootstrap, prepare(&client, &args)).await?;
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
                let target = Target {
                    client: &client,
                    topic: &args.topic,
                    partition: p,
                };
                // After an outage a tick's events can be many: batches the broker takes.
                let mut rest = &batch[..];
                while !rest.is_empty() {
                    let n = fitting(rest, DEFAULT_BATCH_LIMIT);
                    target.send(&rest[..n], &mut leaders, limit, &bar).await?;
                    rest = &rest[n..];
                }
            }
            bar.set_position(due);
            sent = due;
            tokio::time::sleep(TICK).await;
        }
        bar.finish_and_clear();
        let secs = started.elapsed().as_secs_f64();
        crate::emit(&format!(
            "produced {sent} events over {} keys to {} in {secs:.1} s ({:.0}/s)\n",
            args.keys,
            args.topic,
            sent as f64 / secs.max(1e-9)
        ))
    })
}

fn failed(what: &str) -> impl FnOnce(baton_kafka::Error) -> Failure + '_ {
    move |e| Failure {
        message: format!("{what}: {e}"),
        status: 1,
    }
}

/// Creates the topic if missing; its partition count and each partition's leader.
async fn prepare(
    client: &Client,
    args: &ProduceArgs,
) -> Result<(u32, BTreeMap<i32, String>), Failure> {
    client
        .create_topics(&[NewTopic {
            name: args.topic.clone(),
            partitions: args.partitions,
            compacted: false,
        }])
        .await
        .map_err(failed("creating the topic"))?;
    let meta = client
        .metadata(Some(std::slice::from_ref(&args.topic)))
        .await
        .map_err(failed("reading metadata"))?;
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
            .map_err(failed("finding leaders"))?;
        leaders.insert(p, l);
    }
    Ok((partitions, leaders))
}

/// One partition to write to.
struct Target<'a> {
    client: &'a Client,
    topic: &'a str,
    partition: i32,
}

impl Target<'_> {
    /// Writes one batch, riding out failures (a restarting broker, a moved leader) with
    /// backoff for up to `limit` without success.
    async fn send(
        &self,
        batch: &[KeyValue],
        leaders: &mut BTreeMap<i32, String>,
        limit: Duration,
        bar: &ProgressBar,
    ) -> Result<(), Failure> {
        let (topic, partition) = (self.topic, self.partition);
        let started = Instant::now();
        let backoff = baton_kafka::Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_secs(2),
            attempts: u32::MAX,
        };
        let mut failures = 0;
        loop {
            let leader = match leaders.get(&partition) {
                Some(l) => Ok(l.clone()),
                None => self.client.leader(topic, partition).await,
            };
            let result = match leader {
                Ok(l) => {
                    leaders.insert(partition, l.clone());
                    self.client
                        .produce(&l, topic, partition, batch)
                        .await
                        .map(|_| ())
                }
                Err(e) => Err(e),
            };
            let e = match result {
                Ok(()) => {
                    if failures > 0 {
                        bar.suspend(|| {
                            eprintln!("baton: writing to {topic}-{partition} works again")
                        });
                    }
                    return Ok(());
                }
                Err(e) => e,
            };
            failures += 1;
            if started.elapsed() >= limit {
                return Err(Failure {
                    message: format!(
                        "producing to {topic}-{partition}: nothing written for {:.0} s (--timeout-ms); last error: {e}",
                        limit.as_secs_f64()
                    ),
                    status: 1,
                });
            }
            if failures == 1 {
                bar.suspend(|| {
                    eprintln!(
                        "baton: producing to {topic}-{partition} failed ({e}); retrying for up to {:.0} s",
                        limit.as_secs_f64()
                    )
                });
            }
            leaders.remove(&partition);
            tokio::time::sleep(backoff.delay(failures)).await;
        }
    }
}
