//! Restore throughput (records/s into the store from the changelog) beside the client's raw
//! fetch throughput over the same records, the store's own bulk-load speed on those records
//! with no fetching, one table at a time (the baseline the restore is held to), and the
//! restore's catch-up fed from memory (its load schedule, with its overlapped loads, and no
//! fetching), all in the same run.
//!
//! This machine is noisy (two cores, the broker on them too), so each is measured `REPS` times,
//! interleaved, each into a fresh store, and the best and the median of each are compared.
//!
//! `cargo run --release -p baton-runtime --example restore_throughput [RECORDS] [VALUE_BYTES] [REPS]`
//! (`BATON_BENCH_ONLY=restore`: the restores alone, for a profiler.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use baton_assignor::TaskId;
use baton_kafka::client::NewTopic;
use baton_kafka::records::Fetched;
use baton_kafka::testing::Broker;
use baton_kafka::Client;
use baton_runtime::catchup::{load_limits, Catchup, INGEST_BYTES, INGEST_RECORDS};
use baton_runtime::layout::Layout;
use baton_runtime::restore::Target;
use baton_runtime::{restore, TaskStore};
use bytes::Bytes;

type Records = Vec<(Bytes, Option<Bytes>)>;

#[tokio::main]
async fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (n, size, reps) = (arg(1, 200_000), arg(2, 100), arg(3, 5).max(1));
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

    // The store alone loads the same records, already in memory; the catch-up from memory
    // takes the same fetched chunks.
    // BATON_BENCH_ONLY=restore: restores alone, for profiling them (`perf record`).
    let only_restore = std::env::var("BATON_BENCH_ONLY").is_ok_and(|v| v == "restore");
    let mut chunks: Vec<Fetched> = Vec::new();
    let mut next = 0i64;
    while next < end && !only_restore {
        let f = client
            .fetch(&leader, "changelog", 0, next, fetch_bytes, 500)
            .await
            .unwrap();
        next = f.records.last().map(|r| r.offset + 1).unwrap_or(next);
        chunks.push(f);
    }
    let records: Records = chunks
        .iter()
        .flat_map(|f| &f.records)
        .map(|r| (r.key.clone().unwrap(), r.value.clone()))
        .collect();

    // BATON_BENCH_DIR: where the stores go (default: the temp dir; /dev/shm takes the disk
    // out of the figures).
    let base = std::env::var_os("BATON_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("baton-restore-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut fetch, mut restored, mut alone, mut from_memory) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let full = |_: u32| (INGEST_RECORDS, INGEST_BYTES);
    settle(&client, &leader, fetch_bytes).await;
    for rep in 0..reps {
        if only_restore {
            let store =
                TaskStore::open(&dir, TaskId::new(0, 0), &format!("restore-{rep}")).unwrap();
            let stats = restore(
                &client,
                &leader,
                "changelog",
                0,
                Target {
                    store: &store,
                    layout: Layout::Plain,
                },
                end,
                fetch_bytes,
            )
            .await
            .unwrap();
            drop(store);
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!(
                "rep {rep}: restore {:.0}/s",
                stats.records as f64 / stats.seconds
            );
            // No warming fetches: the profile is of restores only.
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let start = Instant::now();
        let cpu = Cpu::start(broker.pid());
        let mut next = 0i64;
        while next < end {
            let f = client
                .fetch(&leader, "changelog", 0, next, fetch_bytes, 500)
                .await
                .unwrap();
            next = f.records.last().map(|r| r.offset + 1).unwrap_or(next);
        }
        let fetch_cpu = cpu.stop();
        fetch.push(n as f64 / start.elapsed().as_secs_f64());
        settle(&client, &leader, fetch_bytes).await;

        let store = TaskStore::open(&dir, TaskId::new(0, 0), &format!("restore-{rep}")).unwrap();
        let cpu = Cpu::start(broker.pid());
        let stats = restore(
            &client,
            &leader,
            "changelog",
            0,
            Target {
                store: &store,
                layout: Layout::Plain,
            },
            end,
            fetch_bytes,
        )
        .await
        .unwrap();
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
        let restore_cpu = cpu.stop();
        restored.push(stats.records as f64 / stats.seconds);
        settle(&client, &leader, fetch_bytes).await;

        // The store's best: full-size loads from the start, or the restore's first load
        // sizes (which grow), whichever is faster this time.
        let (full_rate, _) = load_alone(
            &dir,
            &format!("full-{rep}"),
            records.clone(),
            &full,
            end,
            broker.pid(),
        );
        settle(&client, &leader, fetch_bytes).await;
        let (grow_rate, alone_cpu) = load_alone(
            &dir,
            &format!("grow-{rep}"),
            records.clone(),
            &load_limits,
            end,
            broker.pid(),
        );
        settle(&client, &leader, fetch_bytes).await;
        alone.push(full_rate.max(grow_rate));
        from_memory.push(catchup_from_memory(
            &dir,
            &format!("memory-{rep}"),
            chunks.clone(),
            end,
        ));
        settle(&client, &leader, fetch_bytes).await;
        eprintln!(
            "rep {rep}: raw fetch {:.0}/s ({fetch_cpu}), restore {:.0}/s ({restore_cpu}), store alone {:.0}/s (full loads {full_rate:.0}/s, growing {grow_rate:.0}/s: {alone_cpu}), catch-up from memory {:.0}/s",
            fetch[rep], restored[rep], alone[rep], from_memory[rep]
        );
    }
    if only_restore {
        return;
    }
    let (best, median) = (
        |v: &[f64]| v.iter().copied().fold(0.0, f64::max),
        |v: &[f64]| {
            let mut s = v.to_vec();
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        },
    );
    println!(
        "{n} records, {size}-byte values, {reps} runs each: restore {:.0}/s best, {:.0}/s median; store alone {:.0}/s best, {:.0}/s median; raw fetch {:.0}/s best. Restore / store alone: {:.0}% best to best, {:.0}% median to median. Catch-up from memory / store alone: {:.0}% best to best",
        best(&restored),
        median(&restored),
        best(&alone),
        median(&alone),
        best(&fetch),
        100.0 * best(&restored) / best(&alone),
        100.0 * median(&restored) / median(&alone),
        100.0 * best(&from_memory) / best(&alone),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Lets the last store's background work (compaction, writeback) finish, then warms up for
/// the next measurement, the same way before each of the three: on this VM a fetch after half a
/// second idle took 35 to 42 ms against 8 ms warm (after 2 s idle: 80 ms), and the next few
/// were slow too, which charged the cold start to whichever measurement came next.
async fn settle(client: &Client, leader: &str, fetch_bytes: i32) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(100) {
        client
            .fetch(leader, "changelog", 0, 0, fetch_bytes, 500)
            .await
            .unwrap();
    }
}

/// The restore's own catch-up ([`Catchup`]) fed with already fetched chunks, its loads on
/// their own thread as in a restore: what the load schedule costs or gains with no fetching
/// beside it; records/s.
fn catchup_from_memory(dir: &std::path::Path, name: &str, chunks: Vec<Fetched>, end: i64) -> f64 {
    let store = TaskStore::open(dir, TaskId::new(0, 0), name).unwrap();
    let start = Instant::now();
    let mut catchup = Catchup::new(0, Layout::Plain);
    for chunk in chunks {
        catchup.absorb(&store, chunk, end).unwrap();
    }
    store.apply(&[], Some(end)).unwrap();
    let rate = end as f64 / start.elapsed().as_secs_f64();
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
    rate
}

/// Bulk-loads `records` into a fresh store in loads of `limits(n)` for load `n`; records/s,
/// and the CPU the loading used (after the cutting, like the clock).
/// The records are cut into loads before the clock starts: cutting is the bench's work, not
/// the store's (cutting inside the timed loop once cost the "store alone" figure a quarter).
fn load_alone(
    dir: &std::path::Path,
    name: &str,
    mut records: Records,
    limits: &dyn Fn(u32) -> (usize, usize),
    end: i64,
    broker: u32,
) -> (f64, String) {
    let n = records.len();
    let mut loads: Vec<(Records, i64)> = Vec::new();
    let mut loaded = 0;
    while !records.is_empty() {
        let (limit_records, limit_bytes) = limits(loads.len() as u32);
        let mut take = 0;
        let mut bytes = 0;
        while take < records.len() && take < limit_records && bytes < limit_bytes {
            bytes += records[take].0.len() + records[take].1.as_ref().map_or(0, |v| v.len());
            take += 1;
        }
        loaded += take;
        loads.push((records.drain(..take).collect(), loaded as i64));
    }
    let store = TaskStore::open(dir, TaskId::new(0, 0), name).unwrap();
    let cpu = Cpu::start(broker);
    let start = Instant::now();
    for (mut load, next) in loads {
        store.ingest(&mut load, next).unwrap();
    }
    store.apply(&[], Some(end)).unwrap();
    let rate = n as f64 / start.elapsed().as_secs_f64();
    let used = cpu.stop();
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
    (rate, used)
}

/// CPU time used by this process and by the broker over one measurement, from
/// `/proc/<pid>/stat` (Linux; in USER_HZ ticks, 10 ms): where the two cores went. This
/// process's time is also split by thread name (`fjall:worker` is the store's flushing and
/// compaction); threads that ended meanwhile (the bulk loads) count as "ended".
struct Cpu {
    broker: u32,
    at: Option<(f64, f64)>,
    threads: BTreeMap<u32, (String, f64)>,
}

impl Cpu {
    fn start(broker: u32) -> Cpu {
        let at = cpu_seconds(&format!("/proc/{}/stat", std::process::id()))
            .zip(cpu_seconds(&format!("/proc/{broker}/stat")));
        Cpu {
            broker,
            at,
            threads: threads(),
        }
    }

    fn stop(self) -> String {
        let now = cpu_seconds(&format!("/proc/{}/stat", std::process::id()))
            .zip(cpu_seconds(&format!("/proc/{}/stat", self.broker)));
        let (Some((p0, b0)), Some((p1, b1))) = (self.at, now) else {
            return "CPU: not known".into();
        };
        let mut by_name: BTreeMap<String, f64> = BTreeMap::new();
        let mut live = 0.0;
        for (tid, (name, t1)) in threads() {
            let t0 = self.threads.get(&tid).map_or(0.0, |(_, t)| *t);
            live += t1 - t0;
            *by_name.entry(name).or_default() += t1 - t0;
        }
        let mut split: Vec<String> = by_name
            .into_iter()
            .filter(|(_, t)| *t > 0.0)
            .map(|(name, t)| format!("{name} {t:.2}"))
            .collect();
        split.push(format!("ended {:.2}", (p1 - p0 - live).max(0.0)));
        format!(
            "CPU: {:.2} s here ({}), {:.2} s broker",
            p1 - p0,
            split.join(", "),
            b1 - b0
        )
    }
}

/// This process's threads: id to name and CPU seconds so far.
fn threads() -> BTreeMap<u32, (String, f64)> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let path = entry.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if let Some(t) = cpu_seconds(&path.join("stat").display().to_string()) {
            out.insert(tid, (name.trim().to_owned(), t));
        }
    }
    out
}

fn cpu_seconds(stat: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(stat).ok()?;
    // Fields after the command name, which may hold spaces: utime and stime are 12 and 13.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
