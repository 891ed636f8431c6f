//! `baton bench throughput`: how fast one instance gets through a backlog, against how fast a
//! plain consumer reads the same topic (the ceiling), both measured in the same run.
//!
//! The whole bench runs `--runs` times (two by default), each run on topics of its own. For
//! each application (count per key, and word count with its repartition hop), without the
//! record cache and with it (`-cached`, statestore.cache.max.bytes above 0), a fresh
//! input topic is filled first. The ceiling is one client fetching every partition from the
//! start to the end, as a consumer with nothing to do would (the faster of two such reads).
//! The application then runs in this process on one instance with one stream thread; its
//! rate is the input its commits covered between the first commit and the one that reached
//! the end (for word count, the one that also reached the end of its repartition topic), over
//! that time (so the group join before the first batch is not counted). Then every key's last
//! output must be the count its input implies, or the run fails. Each row also says the CPU
//! seconds a million input records cost: the plain reader's, the application's (this process
//! over the same span) and the broker's (when the bench started it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton_kafka::client::NewTopic;
use baton_kafka::records::{FetchWant, KeyValue};
use baton_kafka::Client;
use baton_protocol::TopicPartition;
use baton_runtime::config::RuntimeConfig;
use baton_runtime::topology::{count_per_key, Topology};
use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use bytes::Bytes;
use clap::Args;

use super::cpu::CpuAt;
use crate::demo::stage::failed;
use crate::Failure;

const PARTITIONS: i32 = 4;
const BATCH: usize = 5_000;

#[derive(Args)]
pub struct ThroughputArgs {
    /// Input records for count per key (keys `k0`..`k9999`). A rate runs from the first
    /// commit to the one that covers the input, commits every 200 ms: the run must last well
    /// over that (a million records took 0.4-0.5 s, and read 0.17 of the ceiling where four
    /// million read 0.22-0.25).
    #[arg(long, default_value_t = 4_000_000)]
    count_records: u64,
    /// Input lines for word count (five words each).
    #[arg(long, default_value_t = 400_000)]
    wordcount_lines: u64,
    /// Give up (exit 1) when an application has not finished within this long.
    #[arg(long, default_value_t = 600_000)]
    step_timeout_ms: u64,
    /// Keep state here (default: a temporary directory, removed at the end).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// statestore.cache.max.bytes of the `-cached` rows (the others run with 0).
    #[arg(long, default_value_t = 10 << 20)]
    cache_max_bytes: u64,
    /// Use this broker (HOST:PORT) instead of starting nisshi on a free loopback port.
    #[arg(long)]
    bootstrap: Option<String>,
    /// Cores a stream thread may run its tasks' batches on at once (`--batch-cores` of `baton
    /// run`): 0, the machine's; 1, one batch at a time.
    #[arg(long, default_value_t = 0)]
    batch_cores: u32,
    /// Run the whole bench this many times, each run on topics of its own, and report every
    /// row of every run: one run's figures alone cannot tell a change from this machine's noise.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=10))]
    runs: u32,
    /// Run only this row (`count-per-key`, `count-cached`, `wordcount`, `wordcount-cached`):
    /// for a profiler, which then sees one application alone.
    #[arg(long)]
    only: Option<String>,
}

struct Row {
    app: &'static str,
    run: u32,
    cache_max_bytes: u64,
    records: u64,
    /// Records the application wrote to its output (fewer with the cache).
    outputs: u64,
    ceiling_per_s: f64,
    app_per_s: f64,
    /// CPU seconds per million input records: the plain reader's (this process), the
    /// application's (this process: its instance, and the bench's polling) and the broker's
    /// over the same span.
    ceiling_cpu: Option<f64>,
    app_cpu: Option<f64>,
    broker_cpu: Option<f64>,
}

pub fn run(args: ThroughputArgs) -> Result<(), Failure> {
    if args.count_records == 0 || args.wordcount_lines == 0 {
        return Err(Failure::bad_input(
            "--count-records and --wordcount-lines must be positive",
        ));
    }
    let apps: [Bench; 2] = [
        Bench {
            names: ["count-per-key", "count-cached"],
            records: args.count_records,
            record: count_record,
            build: |app, input| count_per_key(app, input, &format!("{app}-out")),
            expected: |records| {
                let mut counts = BTreeMap::new();
                for i in 0..records.min(10_000) {
                    let n = records / 10_000 + u64::from(i < records % 10_000);
                    counts.insert(format!("k{i}"), n as i64);
                }
                counts
            },
            decode: |v| std::str::from_utf8(v).ok()?.parse().ok(),
            hop: None,
        },
        Bench {
            names: ["wordcount", "wordcount-cached"],
            records: args.wordcount_lines,
            record: |i| (None, Some(Bytes::from(line(i)))),
            build: wordcount,
            expected: |lines| {
                let mut counts = BTreeMap::new();
                for i in 0..lines {
                    for w in line(i).split_whitespace() {
                        *counts.entry(w.to_owned()).or_insert(0) += 1;
                    }
                }
                counts
            },
            decode: |v| Some(i64::from_be_bytes(v.try_into().ok()?)),
            hop: Some("words-repartition"),
        },
    ];
    let rows: Vec<&str> = apps.iter().flat_map(|a| a.names).collect();
    if let Some(only) = args.only.as_deref().filter(|o| !rows.contains(o)) {
        return Err(Failure::bad_input(format!(
            "--only {only:?}: not a row; the rows are {}",
            rows.join(", ")
        )));
    }
    let (dir, temporary) = crate::demo::workspace(&args.dir, "baton-bench-throughput")?;
    let (broker, bootstrap) = crate::demo::broker(&args.bootstrap, true)?;
    let broker_pid = broker.as_ref().map(|b| b.pid());
    let runtime = crate::tokio_runtime()?;
    let timeout = Duration::from_millis(args.step_timeout_ms);
    let result = runtime.block_on(async {
        let client = Client::new(&[bootstrap.as_str()], "baton-bench-throughput");
        let mut rows = Vec::new();
        for run in 1..=args.runs {
            for a in &apps {
                for (name, cache) in a.names.into_iter().zip([0, args.cache_max_bytes]) {
                    if args.only.as_deref().is_some_and(|o| o != name) {
                        continue;
                    }
                    let how = (name, cache, args.batch_cores, run);
                    let at = (bootstrap.as_str(), broker_pid, dir.as_path());
                    let row = one(&client, at, how, a, timeout).await?;
                    rows.push(row);
                }
            }
        }
        Ok::<_, Failure>(rows)
    });
    drop(runtime);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    crate::emit(&table(&result?))
}

/// One application of the bench: its rows without the cache and with it, its input and its
/// topology, and the count per key its output must end with.
struct Bench {
    names: [&'static str; 2],
    records: u64,
    record: fn(u64) -> KeyValue,
    build: fn(&str, &str) -> Result<Topology, baton_runtime::topology::TopologyError>,
    expected: fn(u64) -> BTreeMap<String, i64>,
    /// An output value as a count.
    decode: fn(&[u8]) -> Option<i64>,
    /// The repartition topic (its name after the application id) whose records count as
    /// done once the group has committed them too.
    hop: Option<&'static str>,
}

pub(crate) fn count_record(i: u64) -> KeyValue {
    (
        Some(Bytes::from(format!("k{}", i % 10_000))),
        Some(Bytes::from_static(b"event")),
    )
}

fn line(i: u64) -> String {
    const WORDS: [&str; 8] = [
        "kafka", "streams", "baton", "relay", "warm", "state", "store", "stall",
    ];
    (0..5)
        .map(|j| WORDS[((i * 3 + j * 5) % 8) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

/// Word count as the `wordcount` example builds it (a simpler split).
fn wordcount(app: &str, input: &str) -> Result<Topology, baton_runtime::topology::TopologyError> {
    let builder = StreamsBuilder::new(app);
    builder
        .stream(input, Consumed::with(Str, Str))
        .flat_map_values(|l: &String| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .group_by(
            |_, w: &String| w.clone(),
            Grouped::with(Str, Str).named("words"),
        )
        .count(Materialized::named("counts"))
        .to_stream()
        .to(&format!("{app}-out"), Produced::with(Str, Long));
    builder.build()
}

async fn one(
    client: &Client,
    (bootstrap, broker, dir): (&str, Option<u32>, &Path),
    (app, cache_max_bytes, batch_cores, run): (&'static str, u64, u32, u32),
    bench: &Bench,
    timeout: Duration,
) -> Result<Row, Failure> {
    let records = bench.records;
    let app_id = format!("bench-{app}-{run}");
    let input = format!("{app_id}-input");
    fill(client, &input, records, &bench.record).await?;
    // The faster of two reads: the first after the fill may pay for the allocator's first
    // pages (seen with mimalloc), which would flatter the ratio.
    let cpu = CpuAt::now(broker);
    let first = read_all(client, &input).await?;
    let second = read_all(client, &input).await?;
    let ceiling_cpu = cpu.per_million(&CpuAt::now(broker), 2 * records).0;
    let ceiling_per_s = records as f64 / first.min(second).as_secs_f64();
    let topology = (bench.build)(&app_id, &input).map_err(failed)?;
    let cfg = RuntimeConfig {
        bootstrap: vec![bootstrap.to_owned()],
        state_dir: dir.join(&app_id),
        instance_id: "bench".into(),
        commit_interval: Duration::from_millis(200),
        cache_max_bytes,
        batch_cores,
        ..RuntimeConfig::default()
    };
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let instance = tokio::spawn(baton_runtime::instance::run(cfg, topology, shutdown));
    let deadline = Instant::now() + timeout;
    let measured = async {
        let span = committed_span(client, (&app_id, broker), &input, records, timeout).await?;
        let end = match bench.hop {
            Some(hop) => hop_settled(client, &app_id, &format!("{app_id}-{hop}"), deadline).await?,
            None => span.end,
        };
        let cpu = span.cpu.per_million(&CpuAt::now(broker), records - span.n0);
        let rate = rate(records, &span, end);
        rate.map(|r| (r, cpu))
            .map_err(|e| failed(format!("{app_id}: {}", e.message)))
    }
    .await;
    let _ = stop.send(true);
    let _ = instance.await;
    let (app_per_s, (app_cpu, broker_cpu)) = measured?;
    // Every input offset is committed, so every count is in the output (a cache is flushed
    // before its commit): the last value of each key must be exact.
    let (last, outputs) = read_output(client, &format!("{app_id}-out")).await?;
    check_counts(app, &(bench.expected)(records), &last, bench.decode)?;
    eprintln!(
        "{app}, run {run}: {records} records; ceiling {ceiling_per_s:.0}/s, application {app_per_s:.0}/s"
    );
    Ok(Row {
        app,
        run,
        cache_max_bytes,
        records,
        outputs,
        ceiling_per_s,
        app_per_s,
        ceiling_cpu,
        app_cpu,
        broker_cpu,
    })
}

/// Writes `records` records over the partitions, in batches.
pub(crate) async fn fill(
    client: &Client,
    topic: &str,
    records: u64,
    record: &impl Fn(u64) -> KeyValue,
) -> Result<(), Failure> {
    client
        .create_topics(&[NewTopic {
            name: topic.to_owned(),
            partitions: PARTITIONS,
            compacted: false,
        }])
        .await
        .map_err(|e| failed(format!("creating {topic}: {e}")))?;
    let mut by_partition: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
    for i in 0..records {
        let p = (i % PARTITIONS as u64) as i32;
        let batch = by_partition.entry(p).or_default();
        batch.push(record(i));
        if batch.len() == BATCH || i + PARTITIONS as u64 >= records {
            let batch = std::mem::take(batch);
            let leader = client
                .leader(topic, p)
                .await
                .map_err(|e| failed(format!("{topic}-{p}: {e}")))?;
            client
                .produce(&leader, topic, p, &batch)
                .await
                .map_err(|e| failed(format!("writing {topic}-{p}: {e}")))?;
        }
    }
    Ok(())
}

/// How long one client takes to read `topic` from the start to its end, every partition in
/// each fetch, as a consumer does.
async fn read_all(client: &Client, topic: &str) -> Result<Duration, Failure> {
    let leader = client
        .leader(topic, 0)
        .await
        .map_err(|e| failed(format!("{topic}: {e}")))?;
    let mut next: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let mut done: BTreeMap<i32, bool> = BTreeMap::new();
    let started = Instant::now();
    while done.len() < PARTITIONS as usize {
        let wants: Vec<FetchWant> = next
            .iter()
            .filter(|(p, _)| !done.contains_key(p))
            .map(|(&partition, &offset)| FetchWant {
                topic: topic.to_owned(),
                topic_id: None,
                partition,
                offset,
                max_bytes: 1 << 20,
            })
            .collect();
        let answers = client
            .fetch_many(&leader, &wants, 100)
            .await
            .map_err(|e| failed(format!("reading {topic}: {e}")))?;
        for (want, answer) in wants.iter().zip(answers) {
            let f = answer.map_err(|e| failed(format!("reading {topic}: {e}")))?;
            let at = next.entry(want.partition).or_default();
            if let Some(last) = f.records.last() {
                *at = last.offset + 1;
            }
            if let Some(n) = f.next_offset {
                *at = (*at).max(n);
            }
            if f.high_watermark >= 0 && *at >= f.high_watermark {
                done.insert(want.partition, true);
            }
        }
    }
    Ok(started.elapsed())
}

/// When the group's commits in `topic` (a repartition topic, written by the group itself)
/// reached its end, once the input is all in.
async fn hop_settled(
    client: &Client,
    group: &str,
    topic: &str,
    deadline: Instant,
) -> Result<Instant, Failure> {
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    let ends = client
        .end_offsets(&tps)
        .await
        .map_err(|e| failed(format!("{topic}: {e}")))?;
    loop {
        let committed = client
            .committed_offsets(group, &tps)
            .await
            .unwrap_or_default();
        let behind: Vec<String> = ends
            .iter()
            .filter_map(|(tp, &end)| {
                let at = committed.get(tp).copied().unwrap_or(0).max(0);
                (at < end).then(|| format!("{tp} at {at} of {end}"))
            })
            .collect();
        let now = Instant::now();
        if behind.is_empty() {
            return Ok(now);
        }
        if now > deadline {
            return Err(failed(format!(
                "{group}: not committed to the end of {topic} in time: {}",
                behind.join(", ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The last value of each key in `topic` (its every partition, start to end), and how many
/// records it holds.
async fn read_output(
    client: &Client,
    topic: &str,
) -> Result<(BTreeMap<String, Vec<u8>>, u64), Failure> {
    let leader = client
        .leader(topic, 0)
        .await
        .map_err(|e| failed(format!("{topic}: {e}")))?;
    let mut last = BTreeMap::new();
    let mut records = 0;
    for partition in 0..PARTITIONS {
        let mut at = 0;
        loop {
            let want = FetchWant {
                topic: topic.to_owned(),
                topic_id: None,
                partition,
                offset: at,
                max_bytes: 1 << 20,
            };
            let answers = client.fetch_many(&leader, &[want], 100).await;
            let f = answers
                .ok()
                .and_then(|a| a.into_iter().next())
                .and_then(|a| a.ok())
                .ok_or_else(|| failed(format!("reading {topic}-{partition} at {at}")))?;
            for r in &f.records {
                records += 1;
                let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default());
                last.insert(
                    key.into_owned(),
                    r.value.as_deref().unwrap_or_default().to_vec(),
                );
                at = r.offset + 1;
            }
            if let Some(n) = f.next_offset {
                at = at.max(n);
            }
            if f.high_watermark < 0 || at >= f.high_watermark {
                break;
            }
        }
    }
    Ok((last, records))
}

/// Every key's last output is its expected count, and no other key is there.
fn check_counts(
    app: &str,
    expected: &BTreeMap<String, i64>,
    last: &BTreeMap<String, Vec<u8>>,
    decode: fn(&[u8]) -> Option<i64>,
) -> Result<(), Failure> {
    let got: BTreeMap<&String, Option<i64>> = last.iter().map(|(k, v)| (k, decode(v))).collect();
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(k, &n)| got.get(k).copied().flatten() != Some(n))
        .map(|(k, n)| format!("{k}: {:?}, expected {n}", got.get(k).copied().flatten()))
        .chain(
            got.keys()
                .filter(|k| !expected.contains_key(**k))
                .map(|k| format!("{k}: not an input key")),
        )
        .collect();
    if wrong.is_empty() {
        return Ok(());
    }
    Err(failed(format!(
        "{app}: {} keys counted wrong in the output (first: {})",
        wrong.len(),
        wrong[0]
    )))
}

/// Input records per second the group's commits covered, from its first commit to the one
/// that reached `records`.
pub(crate) async fn committed_rate(
    client: &Client,
    group: &str,
    input: &str,
    records: u64,
    timeout: Duration,
) -> Result<f64, Failure> {
    let span = committed_span(client, (group, None), input, records, timeout).await?;
    rate(records, &span, span.end).map_err(|e| failed(format!("{group}: {}", e.message)))
}

/// Records per second from the span's first commit to `end`.
fn rate(records: u64, span: &Span, end: Instant) -> Result<f64, Failure> {
    let secs = end.duration_since(span.t0).as_secs_f64();
    if secs <= 0.0 {
        return Err(failed(
            "the whole input was committed at once; use more records",
        ));
    }
    Ok((records - span.n0) as f64 / secs)
}

/// A group's commits over its input: the first (at `t0`, covering `n0` records, with the CPU
/// used so far then) and the one that reached the input's end.
struct Span {
    t0: Instant,
    n0: u64,
    cpu: CpuAt,
    end: Instant,
}

/// When the group first committed (how many input records that covered, and the CPU used so
/// far here and by `broker`), and when its commits reached `records`.
async fn committed_span(
    client: &Client,
    (group, broker): (&str, Option<u32>),
    input: &str,
    records: u64,
    timeout: Duration,
) -> Result<Span, Failure> {
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(input, p))
        .collect();
    let deadline = Instant::now() + timeout;
    let mut first: Option<(Instant, u64, CpuAt)> = None;
    loop {
        let committed: u64 = client
            .committed_offsets(group, &tps)
            .await
            .map(|c| c.values().map(|&o| o.max(0) as u64).sum())
            .unwrap_or(0);
        let now = Instant::now();
        if committed > 0 && first.is_none() {
            first = Some((now, committed, CpuAt::now(broker)));
        }
        if committed >= records {
            let (t0, n0, cpu) = first.unwrap_or_else(|| (now, 0, CpuAt::now(broker)));
            return Ok(Span {
                t0,
                n0,
                cpu,
                end: now,
            });
        }
        if now > deadline {
            return Err(failed(format!(
                "{group}: {committed} of {records} input records committed within {:.0} s",
                timeout.as_secs_f64()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "application        run   cache (bytes)    records    outputs   ceiling (records/s)   application (records/s)   ratio   CPU s per M records: ceiling   application   broker\n",
    );
    let cpu = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |s| format!("{s:.2}"));
    for r in rows {
        out += &format!(
            "{:<18} {:>3}   {:>13} {:>10} {:>10}   {:>19.0}   {:>23.0}   {:>5.3}   {:>28}   {:>11}   {:>6}\n",
            r.app,
            r.run,
            r.cache_max_bytes,
            r.records,
            r.outputs,
            r.ceiling_per_s,
            r.app_per_s,
            r.app_per_s / r.ceiling_per_s,
            cpu(r.ceiling_cpu),
            cpu(r.app_cpu),
            cpu(r.broker_cpu),
        );
    }
    out
}
