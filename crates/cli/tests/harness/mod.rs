//! End-to-end harness: a real broker, `baton run` instances as child processes (so they can be
//! killed with SIGKILL), a steady producer, and readers for the output topic and the logs.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton_kafka::client::NewTopic;
use baton_kafka::records::KeyValue;
use baton_kafka::testing::Broker;
use baton_kafka::Client;
use baton_runtime::partitioner::partition_for;
use bytes::Bytes;

pub const INPUT: &str = "events";
pub const OUTPUT: &str = "counts";
/// Outputs carry their input's timestamp (event time); the broker's append time on the output
/// topics is when each was written, which the stall and latency figures measure.
pub const LOG_APPEND_TIME: (&str, &str) = ("message.timestamp.type", "LogAppendTime");
/// The output of [`Cluster::new_with_output_limit`].
pub const OUTPUT_LIMITED: &str = "counts-limited";
pub const PARTITIONS: u32 = 3;
/// How long the group may take to settle after a change.
pub const SETTLE: Duration = Duration::from_secs(300);

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

pub struct Cluster {
    /// The `baton` that `baton run` instances run: this build, unless another is given.
    pub bin: PathBuf,
    pub broker: Broker,
    pub app: String,
    pub dir: PathBuf,
    pub rt: tokio::runtime::Runtime,
    pub client: Arc<Client>,
    /// The output topic instances write to.
    pub output: String,
}

impl Cluster {
    pub fn new(app: &str) -> Cluster {
        Cluster::start(app, false)
    }

    /// A cluster whose broker keeps its data in a file: it can be restarted without loss.
    pub fn new_persistent(app: &str) -> Cluster {
        Cluster::start(app, true)
    }

    /// A cluster whose changelog takes record batches of at most `bytes`.
    pub fn new_with_changelog_limit(app: &str, bytes: u32) -> Cluster {
        Cluster::start_with(app, false, Some(bytes))
    }

    /// A cluster whose output topic takes record batches of at most `bytes`.
    pub fn new_with_output_limit(app: &str, bytes: u32) -> Cluster {
        let mut cluster = Cluster::start(app, false);
        cluster.output = OUTPUT_LIMITED.into();
        let topic = NewTopic {
            name: OUTPUT_LIMITED.into(),
            partitions: PARTITIONS as i32,
            compacted: false,
        };
        let limit = bytes.to_string();
        cluster
            .rt
            .block_on(
                cluster.client.create_topics_with(
                    &[topic],
                    &[("max.message.bytes", &limit), LOG_APPEND_TIME],
                ),
            )
            .unwrap();
        cluster
    }

    fn start(app: &str, persistent: bool) -> Cluster {
        Cluster::start_with(app, persistent, None)
    }

    fn start_with(app: &str, persistent: bool, changelog_limit: Option<u32>) -> Cluster {
        let dir = std::env::temp_dir().join(format!("baton-e2e-{app}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let broker = if persistent {
            Broker::start_persistent(&dir.join("broker.db"))
        } else {
            Broker::start()
        };
        eprintln!("broker at {}", broker.addr);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = Client::new(&[&broker.addr], "e2e");
        let cluster = Cluster {
            bin: PathBuf::from(env!("CARGO_BIN_EXE_baton")),
            broker,
            app: app.into(),
            dir,
            rt,
            client,
            output: OUTPUT.into(),
        };
        cluster.create_topics_limited(changelog_limit);
        cluster
    }

    /// The input, output and changelog topics.
    pub fn create_topics(&self) {
        self.create_topics_limited(None);
    }

    /// As [`Cluster::create_topics`], the changelog taking batches of at most `limit` bytes.
    fn create_topics_limited(&self, changelog_limit: Option<u32>) {
        let topic = |name: &str, compacted| NewTopic {
            name: name.into(),
            partitions: PARTITIONS as i32,
            compacted,
        };
        self.rt
            .block_on(self.client.create_topics(&[topic(INPUT, false)]))
            .unwrap();
        let limit = changelog_limit.map(|b| b.to_string());
        let configs: Vec<(&str, &str)> = limit
            .iter()
            .map(|l| ("max.message.bytes", l.as_str()))
            .collect();
        self.rt
            .block_on(self.client.create_topics_with(
                &[topic(&format!("{}-counts-changelog", self.app), true)],
                &configs,
            ))
            .unwrap();
        self.rt
            .block_on(
                self.client
                    .create_topics_with(&[topic(OUTPUT, false)], &[LOG_APPEND_TIME]),
            )
            .unwrap();
    }

    /// Deletes `topic` on the broker.
    pub fn delete_topic(&self, topic: &str) {
        self.rt
            .block_on(self.client.delete_topics(&[topic.to_owned()]))
            .unwrap_or_else(|e| panic!("deleting {topic}: {e}"));
    }

    /// Produces `per_key` events to each key (`prefix0`, `prefix1`, ...) in large batches;
    /// returns the events per key.
    pub fn produce_backlog(&self, prefix: &str, keys: u64, per_key: u64) -> BTreeMap<String, i64> {
        let keys: Vec<String> = (0..keys).map(|k| format!("{prefix}{k}")).collect();
        self.produce_keys(&keys, per_key)
    }

    /// Produces `per_key` events to each of `keys`, as [`Cluster::produce_backlog`] does.
    pub fn produce_keys(&self, keys: &[String], per_key: u64) -> BTreeMap<String, i64> {
        self.rt.block_on(async {
            let mut sent = BTreeMap::new();
            let mut batches: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
            for key in keys {
                let key = key.clone();
                let p = partition_for(key.as_bytes(), PARTITIONS) as i32;
                for i in 0..per_key {
                    batches.entry(p).or_default().push((
                        Some(Bytes::from(key.clone())),
                        Some(Bytes::from(i.to_string())),
                    ));
                }
                sent.insert(key, per_key as i64);
            }
            for (p, records) in batches {
                let leader = self.client.leader(INPUT, p).await.unwrap();
                // Batches under the broker's 1 MB default, whatever the keys' sizes.
                let mut rest = records.as_slice();
                while !rest.is_empty() {
                    let n = baton_kafka::records::fitting(rest, 900_000).min(10_000);
                    let (chunk, after) = rest.split_at(n);
                    self.client.produce(&leader, INPUT, p, chunk).await.unwrap();
                    rest = after;
                }
            }
            sent
        })
    }

    /// Fills every changelog partition with `records` entries of keys that no event uses, so
    /// a restore from scratch has real work to do. Returns the seconds it took.
    pub fn preload_state(&self, records: u64) -> f64 {
        let started = Instant::now();
        let topic = format!("{}-counts-changelog", self.app);
        self.rt.block_on(async {
            for p in 0..PARTITIONS as i32 {
                let leader = self.client.leader(&topic, p).await.unwrap();
                let mut i = 0;
                while i < records {
                    let n = (records - i).min(20_000);
                    let batch: Vec<KeyValue> = (i..i + n)
                        .map(|k| {
                            (
                                Some(Bytes::from(format!("state-{p}-{k:010}"))),
                                Some(Bytes::copy_from_slice(&(k as i64).to_be_bytes())),
                            )
                        })
                        .collect();
                    self.client
                        .produce(&leader, &topic, p, &batch)
                        .await
                        .unwrap();
                    i += n;
                }
            }
        });
        started.elapsed().as_secs_f64()
    }

    pub fn spawn(&self, name: &str, args: &[&str]) -> Instance {
        self.spawn_on(name, name, args)
    }

    /// An instance on the state directory `state` (shared with earlier instances, in turn).
    pub fn spawn_on(&self, name: &str, state: &str, args: &[&str]) -> Instance {
        self.spawn_timed(name, state, (300, 6000), args)
    }

    /// As [`Cluster::spawn`], with these environment variables too (`FAILPOINTS`, say).
    pub fn spawn_env(&self, name: &str, env: &[(&str, &str)], args: &[&str]) -> Instance {
        self.spawn_full(name, name, (300, 6000), args, env)
    }

    /// As [`Cluster::spawn_env`], on the state directory `state`.
    pub fn spawn_full_env(
        &self,
        name: &str,
        state: &str,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Instance {
        self.spawn_full(name, state, (300, 6000), args, env)
    }

    /// As [`Cluster::spawn_on`], with `(heartbeat.interval.ms, session.timeout.ms)`.
    pub fn spawn_timed(
        &self,
        name: &str,
        state: &str,
        timing: (u64, u64),
        args: &[&str],
    ) -> Instance {
        self.spawn_full(name, state, timing, args, &[])
    }

    fn spawn_full(
        &self,
        name: &str,
        state: &str,
        (heartbeat_ms, session_ms): (u64, u64),
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Instance {
        let log = self.dir.join(format!("{name}.log"));
        let state = self.dir.join(state);
        let mut cmd = Command::new(&self.bin);
        cmd.args([
            "run",
            "--bootstrap",
            &self.broker.addr,
            "--app-id",
            &self.app,
        ])
        .args([
            "--input",
            INPUT,
            "--output",
            &self.output,
            "--instance-id",
            name,
        ])
        .arg("--state-dir")
        .arg(&state)
        .args([
            "--heartbeat-interval-ms",
            &heartbeat_ms.to_string(),
            "--session-timeout-ms",
            &session_ms.to_string(),
        ])
        .args(args)
        .env("RUST_LOG", "info,fjall=warn,lsm_tree=warn")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
        Instance {
            name: name.into(),
            child: Some(cmd.spawn().unwrap()),
            log,
        }
    }

    /// Runs `baton <args> --bootstrap <this broker>` to its end.
    pub fn baton(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.bin)
            .args(args)
            .args(["--bootstrap", &self.broker.addr])
            .output()
            .unwrap()
    }

    /// `baton inspect --json` of this cluster's group.
    pub fn inspect_json(&self) -> serde_json::Value {
        let out = self.baton(&["inspect", "--group", &self.app, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `baton drain` for an instance.
    pub fn drain(&self, name: &str) {
        let out = self.baton(&["drain", "--group", &self.app, "--instance", name]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Every record of `topic`, per partition, read from the start to the high watermark.
    pub fn read_topic(&self, topic: &str) -> BTreeMap<i32, Vec<baton_kafka::records::Record>> {
        self.rt.block_on(async {
            let mut out = BTreeMap::new();
            for p in 0..PARTITIONS as i32 {
                let leader = self.client.leader(topic, p).await.unwrap();
                let mut rows = Vec::new();
                let mut offset = 0;
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    assert!(
                        Instant::now() < deadline,
                        "reading {topic}-{p} is stuck at {offset}"
                    );
                    let f = self
                        .client
                        .fetch(&leader, topic, p, offset, 4 << 20, 500)
                        .await
                        .unwrap();
                    if let Some(last) = f.records.last() {
                        offset = last.offset + 1;
                    }
                    rows.extend(f.records);
                    if f.high_watermark >= 0 && offset >= f.high_watermark {
                        break;
                    }
                }
                out.insert(p, rows);
            }
            out
        })
    }

    /// Every output record: per partition, (timestamp ms, key, count).
    pub fn read_output(&self) -> BTreeMap<i32, Vec<(i64, String, i64)>> {
        self.read_topic(&self.output)
            .into_iter()
            .map(|(p, records)| {
                let rows = records
                    .iter()
                    .map(|r| {
                        let key = String::from_utf8(r.key.clone().unwrap().to_vec()).unwrap();
                        let v = std::str::from_utf8(r.value.as_deref().unwrap())
                            .unwrap()
                            .parse()
                            .unwrap();
                        (r.timestamp, key, v)
                    })
                    .collect();
                (p, rows)
            })
            .collect()
    }

    /// Per input partition: end offset and the group's committed offset.
    pub fn offsets_report(&self) -> String {
        self.rt.block_on(async {
            let parts: Vec<baton_protocol::TopicPartition> = (0..PARTITIONS as i32)
                .map(|p| baton_protocol::TopicPartition::new(INPUT, p))
                .collect();
            let ends = self.client.end_offsets(&parts).await;
            let committed = self.client.committed_offsets(&self.app, &parts).await;
            format!("ends {ends:?}, committed {committed:?}")
        })
    }

    /// Every input event, counted per key: what the counts must reach, whatever a producer
    /// that retried may have written twice.
    pub fn input_counts(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for r in self.read_topic(INPUT).into_values().flatten() {
            let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
            *out.entry(key).or_insert(0) += 1;
        }
        out
    }

    /// `baton produce` as a child process: `count` events at `rate` over `keys` keys.
    pub fn produce_cli(&self, count: u64, rate: u64, keys: u64) -> Child {
        Command::new(&self.bin)
            .args([
                "produce",
                "--bootstrap",
                &self.broker.addr,
                "--topic",
                INPUT,
            ])
            .args(["--partitions", &PARTITIONS.to_string()])
            .args(["--count", &count.to_string(), "--rate", &rate.to_string()])
            .args(["--keys", &keys.to_string(), "--key-prefix", "k"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("produce.log")).unwrap())
            .spawn()
            .unwrap()
    }

    /// The latest count written for each key.
    pub fn final_counts(&self) -> BTreeMap<String, i64> {
        let mut counts = BTreeMap::new();
        for rows in self.read_output().into_values() {
            for (_, k, v) in rows {
                counts.insert(k, v);
            }
        }
        counts
    }

    /// Waits until every input record is processed (the output holds at least `produced` for
    /// every key); returns the latest counts of those keys.
    pub fn await_counts(
        &self,
        produced: &BTreeMap<String, i64>,
        timeout: Duration,
    ) -> BTreeMap<String, i64> {
        let deadline = Instant::now() + timeout;
        loop {
            let counts = self.final_counts();
            let done = produced
                .iter()
                .all(|(k, n)| counts.get(k).is_some_and(|c| c >= n));
            if done || Instant::now() > deadline {
                return counts
                    .into_iter()
                    .filter(|(k, _)| produced.contains_key(k))
                    .collect();
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until every partition of the output has a record written after `since_ms`;
    /// fails after `SETTLE`.
    pub fn await_all_processing(&self, since_ms: i64, what: &str) {
        let started = Instant::now();
        loop {
            let out = self.read_output();
            let live = out
                .values()
                .filter(|rows| rows.last().is_some_and(|r| r.0 >= since_ms))
                .count();
            if live == PARTITIONS as usize {
                eprintln!(
                    "{what}: every partition processing after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                return;
            }
            assert!(
                started.elapsed() < SETTLE,
                "{what}: not every partition is processing"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops the producer, waits for the instances to count everything, and returns the
    /// duplicates (counted beyond what was produced); fails if any event was lost.
    pub fn check_counts(&self, producer: &mut Producer, what: &str) -> i64 {
        let produced = producer.stop();
        self.check_against(&produced, what)
    }

    /// Waits for the instances to count `produced` (events per key), and returns the
    /// duplicates; fails if any event was lost.
    pub fn check_against(&self, produced: &BTreeMap<String, i64>, what: &str) -> i64 {
        let counts = self.await_counts(produced, Duration::from_secs(120));
        let mut duplicates = 0;
        for (k, n) in produced {
            let c = counts.get(k).copied().unwrap_or(0);
            if c < *n {
                eprintln!(
                    "{what}: input and committed offsets: {}",
                    self.offsets_report()
                );
            }
            assert!(
                c >= *n,
                "{what}: key {k} counted {c} of {n} events: events lost"
            );
            duplicates += c - n;
        }
        let total: i64 = produced.values().sum();
        eprintln!(
            "{what}: {total} events over {} keys, all counted; {duplicates} counted twice",
            produced.len()
        );
        duplicates
    }

    /// The longest gap (seconds) between consecutive output records of each input partition,
    /// over `[from_ms, to_ms]`; the window's edges count as records.
    pub fn longest_gaps(&self, from_ms: i64, to_ms: i64) -> BTreeMap<i32, f64> {
        self.read_output()
            .into_iter()
            .map(|(p, rows)| {
                let mut last = from_ms;
                let mut gap = 0i64;
                for (ts, _, _) in rows.iter().filter(|r| r.0 >= from_ms && r.0 <= to_ms) {
                    gap = gap.max(ts - last);
                    last = *ts;
                }
                gap = gap.max(to_ms - last);
                (p, gap as f64 / 1000.0)
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // BATON_KEEP_LOGS=1 keeps a passing run's logs too, to compare with a failing one.
        if !std::thread::panicking() && std::env::var_os("BATON_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("logs kept in {}", self.dir.display());
        }
    }
}

pub struct Instance {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Instance {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for a line containing every one of `parts`.
    pub fn await_log(&self, parts: &[&str], timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self
                .log_text()
                .lines()
                .any(|l| parts.iter().all(|p| l.contains(p)))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// SIGTERM: commit, close, leave. Waits for the exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: the process freezes (a long GC pause, a VM migration, a stalled disk).
    pub fn pause(&self) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args(["-STOP", &c.id().to_string()])
                .status();
        }
    }

    /// SIGCONT: it goes on from where it froze.
    pub fn resume(&self) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
        }
    }

    /// SIGKILL: no goodbye.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for the process to exit on its own; true if it did.
    pub fn await_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(c) = &mut self.child {
                if let Ok(Some(status)) = c.try_wait() {
                    assert!(status.success(), "{} exited with {status}", self.name);
                    self.child = None;
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Waits for the process to exit; its status, or `None` if it is still running.
    pub fn await_status(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(c) = &mut self.child {
                if let Ok(Some(status)) = c.try_wait() {
                    self.child = None;
                    return Some(status);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// Log lines containing `part`.
    pub fn count_log(&self, part: &str) -> usize {
        self.log_text().lines().filter(|l| l.contains(part)).count()
    }

    /// `restore done` lines: (task, records, changelog records, seconds).
    pub fn restores(&self) -> Vec<(String, u64, u64, f64)> {
        self.log_text()
            .lines()
            .filter(|l| l.contains("restore done"))
            .map(|l| {
                (
                    field(l, "task").to_owned(),
                    field(l, "records").parse().unwrap(),
                    field(l, "changelog_records").parse().unwrap(),
                    field(l, "seconds").parse().unwrap(),
                )
            })
            .collect()
    }

    /// The partitions this instance runs as an active now, from its `task state` and
    /// `task released` log lines.
    pub fn running(&self) -> std::collections::BTreeSet<i32> {
        self.holds("active", "running")
    }

    /// The partitions whose task this instance holds in `role` and `phase` now (e.g.
    /// `"standby"`, `"tailing"`), from its `task state` and `task released` log lines.
    pub fn holds(&self, role: &str, phase: &str) -> std::collections::BTreeSet<i32> {
        let mut out = std::collections::BTreeSet::new();
        for l in self.log_text().lines() {
            let partition = || {
                field(l, "task")
                    .rsplit('_')
                    .next()
                    .and_then(|p| p.parse::<i32>().ok())
            };
            if l.contains("task state") {
                if let Some(p) = partition() {
                    if field(l, "role") == role && field(l, "to") == phase {
                        out.insert(p);
                    } else {
                        out.remove(&p);
                    }
                }
            } else if l.contains("task released") {
                if let Some(p) = partition() {
                    out.remove(&p);
                }
            }
        }
        out
    }

    /// How long each of this instance's rebalances took, in seconds.
    pub fn rebalance_seconds(&self) -> Vec<f64> {
        self.log_text()
            .lines()
            .filter(|l| l.contains(" assigned "))
            .map(|l| field(l, "seconds").parse().unwrap())
            .collect()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The value of `name=value` in a log line (quotes removed).
pub fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let pat = format!(" {name}=");
    let start = line.find(&pat).map(|i| i + pat.len()).unwrap_or(line.len());
    let rest = &line[start..];
    let end = rest.find(' ').unwrap_or(rest.len());
    rest[..end].trim_matches('"')
}

/// A producer thread writing events at a steady rate until stopped; keeps what it sent.
pub struct Producer {
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<BTreeMap<String, i64>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Producer {
    pub fn start(addr: &str, prefix: &str, rate: u64, keys: u64) -> Producer {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(BTreeMap::new()));
        let (s, counts, addr, prefix) = (
            stop.clone(),
            sent.clone(),
            addr.to_owned(),
            prefix.to_owned(),
        );
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let client = Client::new(&[&addr], "e2e-producer");
                let mut leaders = BTreeMap::new();
                for p in 0..PARTITIONS as i32 {
                    leaders.insert(p, client.leader(INPUT, p).await.unwrap());
                }
                let started = Instant::now();
                let mut n = 0u64;
                while !s.load(Ordering::SeqCst) {
                    let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
                    let mut batches: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
                    let mut keys_sent = Vec::new();
                    for i in n..due {
                        let key = format!("{prefix}{}", i % keys);
                        let p = partition_for(key.as_bytes(), PARTITIONS) as i32;
                        batches.entry(p).or_default().push((
                            Some(Bytes::from(key.clone())),
                            Some(Bytes::from(i.to_string())),
                        ));
                        keys_sent.push(key);
                    }
                    for (p, batch) in batches {
                        client
                            .produce(&leaders[&p], INPUT, p, &batch)
                            .await
                            .unwrap();
                    }
                    {
                        let mut c = counts.lock().unwrap();
                        for k in keys_sent {
                            *c.entry(k).or_insert(0) += 1;
                        }
                    }
                    n = due.max(n);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
        });
        Producer {
            stop,
            sent,
            handle: Some(handle),
        }
    }

    /// Stops and returns how many events each key got.
    pub fn stop(&mut self) -> BTreeMap<String, i64> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
        self.sent.lock().unwrap().clone()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
