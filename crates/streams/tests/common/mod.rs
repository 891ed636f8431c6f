//! What the examples' end-to-end tests share: the broker, the example programs `cargo test`
//! builds, and reading topics back.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_kafka::client::NewTopic;
use baton_kafka::records::{KeyValue, Record};
use baton_kafka::testing::Broker;
use baton_kafka::Client;
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    run: baton_streams::RunArgs,
}

/// Waits (at most 30 s) for an in-process instance to end, and checks it shut down cleanly.
pub fn await_shutdown(
    setup: &Setup,
    name: &str,
    handle: tokio::task::JoinHandle<baton_runtime::Result<baton_runtime::Exit>>,
) {
    let exit = setup
        .rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), handle).await });
    match exit {
        Ok(Ok(Ok(baton_runtime::Exit::Shutdown))) => {}
        other => panic!("{name} shuts down cleanly: {other:?}"),
    }
}

/// Drains in-process instance `name` of `app` and waits (at most 60 s) for it to exit as
/// drained.
pub fn drain_and_await(
    setup: &Setup,
    (app, name): (&str, &str),
    handle: tokio::task::JoinHandle<baton_runtime::Result<baton_runtime::Exit>>,
) {
    setup.drain(app, name);
    let drained = setup
        .rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), handle).await });
    assert!(
        matches!(drained, Ok(Ok(Ok(baton_runtime::Exit::Drained)))),
        "{name} exits once drained: {drained:?}"
    );
}

/// An in-process instance `name` of `app` (state under `dir`) running `topology` until
/// `shutdown` turns true.
pub fn spawn_instance(
    setup: &Setup,
    (broker, dir): (&str, &Path),
    (app, name): (&str, &str),
    topology: baton_runtime::Topology,
    shutdown: &tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<baton_runtime::Result<baton_runtime::Exit>> {
    let cfg = runtime_config(broker, dir, app, name, &[]);
    setup.rt.spawn(baton_runtime::instance::run(
        cfg,
        topology,
        shutdown.clone(),
    ))
}

/// The e2e tests' scenario: instance a of `app` runs `topology()`, then b joins it (a
/// scale-out), then a is drained. Before each step `phase(setup, n)` (n = 0, 1, 2) sends
/// input and says what `read` must give after it, which is awaited ("`what`, one instance",
/// "…, after the scale-out", "…, after the drain"). Stops b; the last result wanted.
pub fn scale_out_and_drain<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
    setup: &Setup,
    (broker, dir): (&str, &Path),
    (app, topology): (&str, impl Fn() -> baton_runtime::Topology),
    (what, mut phase): (&str, impl FnMut(&Setup, u32) -> BTreeMap<K, V>),
    read: impl Fn(&Setup) -> BTreeMap<K, V>,
) -> BTreeMap<K, V> {
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| spawn_instance(setup, (broker, dir), (app, name), topology(), &shutdown);
    let a = run("a");
    setup.await_equal(&phase(setup, 0), &format!("{what}, one instance"), &read);
    let b = run("b");
    let step = format!("{what}, after the scale-out");
    setup.await_equal(&phase(setup, 1), &step, &read);
    drain_and_await(setup, (app, "a"), a);
    let want = phase(setup, 2);
    setup.await_equal(&want, &format!("{what}, after the drain"), &read);
    stop.send(true).unwrap();
    await_shutdown(setup, "b", b);
    want
}

/// A loopback port free now, for an instance's query server.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// As [`runtime_config`], serving interactive queries on a free loopback port.
pub fn serving_config(
    broker: &str,
    dir: &Path,
    app: &str,
    name: &str,
) -> baton_runtime::RuntimeConfig {
    let server = format!("127.0.0.1:{}", free_port());
    runtime_config(broker, dir, app, name, &["--application-server", &server])
}

/// Instance `name` of `app`, configured as its command line would give it: state under `dir`,
/// heartbeats, sessions and commits short for a test, then `extra` flags.
pub fn runtime_config(
    broker: &str,
    dir: &Path,
    app: &str,
    name: &str,
    extra: &[&str],
) -> baton_runtime::RuntimeConfig {
    let state = dir.join(name);
    let mut argv = vec![
        "test",
        "--bootstrap",
        broker,
        "--app-id",
        app,
        "--instance-id",
        name,
        "--state-dir",
        state.to_str().unwrap(),
        "--heartbeat-interval-ms",
        "300",
        "--session-timeout-ms",
        "6000",
        "--commit-interval-ms",
        "300",
    ];
    argv.extend_from_slice(extra);
    baton_streams::run::config(Args::parse_from(argv).run).unwrap()
}

/// The example binary `cargo test` builds beside this test.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds it (or: cargo build --example {name})",
        path.display()
    );
    path
}

/// One running instance of an example.
pub struct Instance {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Instance {
    /// Runs `example` as instance `name` of `app`, its state and log under `dir`, with the
    /// example's own `args`; heartbeats, sessions and commits short, for a test.
    pub fn spawn(
        example_name: &str,
        broker: &str,
        dir: &Path,
        name: &str,
        app: &str,
        args: &[&str],
    ) -> Instance {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(example(example_name))
            .args([
                "--bootstrap",
                broker,
                "--app-id",
                app,
                "--instance-id",
                name,
            ])
            .args(["--state-dir", dir.join(name).to_str().unwrap()])
            .args(args)
            .args([
                "--heartbeat-interval-ms",
                "300",
                "--session-timeout-ms",
                "6000",
            ])
            .args(["--commit-interval-ms", "500"])
            .env("RUST_LOG", "info,fjall=warn,lsm_tree=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Instance {
            name: name.into(),
            child,
            log,
        }
    }

    pub fn exited_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// A test that fails leaves no instance running.
impl Drop for Instance {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

/// A client of the test's broker, with a runtime to call it from plain tests.
pub struct Setup {
    pub rt: tokio::runtime::Runtime,
    pub client: Arc<Client>,
    pub partitions: i32,
}

/// Outputs carry their input's timestamps; the broker's append time says when each was
/// written, which the stall figures measure.
pub const LOG_APPEND_TIME: (&str, &str) = ("message.timestamp.type", "LogAppendTime");

/// A broker with `inputs` (each of `partitions` partitions) and `output` (stamped at
/// append), and a fresh directory for the instances' state and logs.
pub fn start(
    name: &str,
    inputs: &[&str],
    output: &str,
    partitions: i32,
) -> (Broker, PathBuf, Setup) {
    let broker = Broker::start();
    let dir = std::env::temp_dir().join(format!("baton-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let setup = Setup {
        rt: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
        client: Client::new(&[&broker.addr], name),
        partitions,
    };
    let topic = |name: &str| NewTopic {
        name: name.into(),
        partitions,
        compacted: false,
    };
    let inputs: Vec<NewTopic> = inputs.iter().map(|t| topic(t)).collect();
    setup
        .rt
        .block_on(setup.client.create_topics(&inputs))
        .unwrap();
    setup
        .rt
        .block_on(
            setup
                .client
                .create_topics_with(&[topic(output)], &[LOG_APPEND_TIME]),
        )
        .unwrap();
    (broker, dir, setup)
}

impl Setup {
    /// Appends `records` to partition `p` of `topic`; the first one's offset.
    pub fn produce_to(&self, topic: &str, p: i32, records: &[KeyValue]) -> i64 {
        self.rt.block_on(async {
            let leader = self.client.leader(topic, p).await.unwrap();
            self.client
                .produce(&leader, topic, p, records)
                .await
                .unwrap()
        })
    }

    /// Appends `records` to partition `p` of `topic`, record `i` stamped `stamps[i]`.
    pub fn produce_stamped(&self, topic: &str, p: i32, records: &[KeyValue], stamps: &[i64]) {
        self.rt.block_on(async {
            let leader = self.client.leader(topic, p).await.unwrap();
            self.client
                .produce_stamped(&leader, topic, p, records, stamps)
                .await
                .unwrap();
        });
    }

    /// How many times each (key, value) of text stands in `topic`.
    pub fn counted(&self, topic: &str) -> BTreeMap<(String, String), usize> {
        let mut out = BTreeMap::new();
        for r in self.read(topic).into_values().flatten() {
            let text = |b: Option<bytes::Bytes>, what: &str| {
                String::from_utf8(b.unwrap_or_else(|| panic!("{topic}: no {what}")).to_vec())
                    .unwrap()
            };
            *out.entry((text(r.key, "key"), text(r.value, "value")))
                .or_default() += 1;
        }
        out
    }

    /// Every record of `topic`, per partition.
    pub fn read(&self, topic: &str) -> BTreeMap<i32, Vec<Record>> {
        self.rt.block_on(async {
            let mut out = BTreeMap::new();
            for p in 0..self.partitions {
                // Not made yet (the instance creates its output at start): nothing to read.
                let Ok(leader) = self.client.leader(topic, p).await else {
                    continue;
                };
                let (mut offset, mut rows) = (0, Vec::new());
                loop {
                    let f = self
                        .client
                        .fetch(&leader, topic, p, offset, 4 << 20, 200)
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

    /// `topic` read as a table of text keys and values: each key's last record, a record
    /// without a value removing it.
    pub fn latest_text(&self, topic: &str) -> BTreeMap<String, String> {
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        let mut out = BTreeMap::new();
        for r in self.read(topic).into_values().flatten() {
            let key = text(&r.key.unwrap_or_default());
            match r.value {
                Some(v) => out.insert(key, text(&v)),
                None => out.remove(&key),
            };
        }
        out
    }

    /// How many partitions each of `topics` has (0 for one the broker does not have).
    pub fn partition_counts(&self, topics: &[String]) -> Vec<usize> {
        let meta = self
            .rt
            .block_on(self.client.metadata(Some(topics)))
            .unwrap();
        topics
            .iter()
            .map(|name| {
                let t = meta
                    .topics
                    .iter()
                    .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == name));
                t.map_or(0, |t| t.partitions.len())
            })
            .collect()
    }

    /// Every record of a one-partition topic.
    pub fn read_all(&self, topic: &str) -> Vec<Record> {
        self.rt.block_on(async {
            let leader = self.client.leader(topic, 0).await.unwrap();
            let f = self
                .client
                .fetch(&leader, topic, 0, 0, 1 << 20, 200)
                .await
                .unwrap();
            f.records
        })
    }

    /// Waits up to 90 s for `latest()` to equal `want`; fails naming every difference.
    pub fn await_equal<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
        &self,
        want: &BTreeMap<K, V>,
        what: &str,
        latest: impl Fn(&Setup) -> BTreeMap<K, V>,
    ) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let got = latest(self);
            if &got == want {
                return;
            }
            if Instant::now() >= deadline {
                let mut diff: Vec<String> = want
                    .iter()
                    .filter(|(k, v)| got.get(*k) != Some(v))
                    .map(|(k, v)| format!("  {k:?}: want {v:?}, got {:?}", got.get(k)))
                    .collect();
                diff.extend(
                    got.iter()
                        .filter(|(k, _)| !want.contains_key(*k))
                        .map(|(k, v)| format!("  {k:?}: not wanted, got {v:?}")),
                );
                panic!(
                    "{what}: results differ from the input's:\n{}",
                    diff.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The longest stretch each partition of `topic` went without a record between `from`
    /// and `to` (milliseconds since the epoch), in seconds.
    pub fn longest_gaps(&self, topic: &str, from: i64, to: i64) -> BTreeMap<i32, f64> {
        self.read(topic)
            .into_iter()
            .map(|(p, rows)| {
                let (mut last, mut gap) = (from, 0);
                for r in rows
                    .iter()
                    .filter(|r| r.timestamp >= from && r.timestamp <= to)
                {
                    gap = gap.max(r.timestamp - last);
                    last = r.timestamp;
                }
                (p, gap.max(to - last) as f64 / 1000.0)
            })
            .collect()
    }

    /// Asks instance `name` of `app` to drain.
    pub fn drain(&self, app: &str, name: &str) {
        self.rt.block_on(async {
            baton_runtime::control::request_drain(&self.client, app, name)
                .await
                .unwrap()
        });
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
