//! One run of the demo's script with one assignor: topics and preloaded state, a steady
//! producer, instances `a` and `b`, then `c` joins, then `a` is drained; at the end every
//! key's count is checked against the input.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_assignor::AssignorKind;
use baton_kafka::client::NewTopic;
use baton_kafka::records::{KeyValue, Record};
use baton_kafka::Client;
use baton_protocol::TopicPartition;
use bytes::Bytes;
use tokio::process::{Child, Command};

use super::board::Board;
use super::scrape::{scrape, InstanceView};
use crate::Failure;

/// How often the demo looks at the instances and the output.
const TICK: Duration = Duration::from_millis(200);

/// What one run does.
pub struct Plan {
    pub bootstrap: String,
    pub dir: PathBuf,
    pub assignor: AssignorKind,
    pub partitions: u32,
    pub state_records: u64,
    pub rate: u64,
    pub keys: u64,
    pub pause: Duration,
    pub step_timeout: Duration,
    pub tty: bool,
}

/// What one run measured.
pub struct Outcome {
    pub assignor: AssignorKind,
    /// The longest time any task's output stood still, from `c` joining to the producer's
    /// stop, and the task.
    pub longest_gap: Gap,
    pub balanced_after_s: f64,
    pub drained_after_s: f64,
    pub events: u64,
    pub keys: usize,
    /// Keys whose final count differs from the events produced for them.
    pub wrong: Vec<String>,
    pub warmups: usize,
    pub handovers: usize,
    pub rebalances: u64,
}

pub(crate) struct Instance {
    pub name: &'static str,
    pub child: Child,
    pub metrics: SocketAddr,
    /// Its query server (`--application-server`).
    pub queries: SocketAddr,
}

pub(crate) fn failed(what: impl std::fmt::Display) -> Failure {
    Failure {
        message: what.to_string(),
        status: 1,
    }
}

fn free_port() -> Result<SocketAddr, Failure> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| failed(format!("finding a free port: {e}")))
}

pub async fn run(plan: &Plan) -> Result<Outcome, Failure> {
    let app = format!("baton-demo-{}", plan.assignor.name());
    let [input, output, changelog] =
        ["events", "counts", "counts-changelog"].map(|t| format!("{app}-{t}"));
    let dir = plan.dir.join(&app);
    std::fs::create_dir_all(&dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
    let client = Client::new(&[&plan.bootstrap], "baton-demo");
    let mut board = Board::new(plan.assignor.name(), plan.partitions, plan.tty);

    prepare(plan, &client, &mut board, [&input, &output, &changelog]).await?;

    let exe = std::env::current_exe().map_err(|e| failed(format!("finding baton: {e}")))?;
    let mut producer = spawn_producer(&exe, &plan.bootstrap, &input, plan.rate, plan.keys)?;

    let spawn = |name: &'static str| {
        spawn_instance(&Launch {
            exe: &exe,
            bootstrap: &plan.bootstrap,
            app: &app,
            input: &input,
            output: &output,
            assignor: plan.assignor,
            dir: &dir,
            name,
        })
    };

    let mut watch = Watch {
        plan,
        client: &client,
        output: &output,
        dir: &dir,
    };
    board.step("starting instances a and b; they restore the state from the changelog");
    let mut instances = vec![spawn("a")?, spawn("b")?];
    let took = watch
        .until(
            &mut board,
            &mut instances,
            &mut producer,
            "a and b processing every task",
            |v| processing(v, plan.partitions, &["a", "b"]),
        )
        .await?;
    board.log(&format!("a and b process every task ({took:.1} s)"));
    let hint = "query the counts while it scales, from another terminal: baton query --server";
    board.log(&format!("{hint} {} counts key-7", instances[0].queries));
    tokio::time::sleep(plan.pause).await;

    board.start_measuring();
    let measured_from = baton_kafka::member::epoch_ms();
    board.step("instance c joins (scale-out)");
    instances.push(spawn("c")?);
    let balanced_after_s = watch
        .until(
            &mut board,
            &mut instances,
            &mut producer,
            "balance after c joined",
            |v| processing(v, plan.partitions, &["a", "b", "c"]),
        )
        .await?;
    board.log(&format!(
        "balanced: a, b and c each process their share ({balanced_after_s:.1} s after c joined)"
    ));
    tokio::time::sleep(plan.pause).await;

    remove_a(plan, &exe, &app, &mut board, &instances).await?;
    let drained_after_s = watch
        .until(
            &mut board,
            &mut instances,
            &mut producer,
            "a to leave",
            |v| !v.contains_key("a") && processing(v, plan.partitions, &["b", "c"]),
        )
        .await?;
    board.log(&format!(
        "a has left; b and c process every task ({drained_after_s:.1} s after the drain)"
    ));
    tokio::time::sleep(plan.pause).await;

    board.step("stopping the producer; checking every key's count");
    let measured_to = baton_kafka::member::epoch_ms();
    let _ = producer.start_kill();
    let _ = producer.wait().await;
    board.stop_measuring();
    let (events, keys, wrong) = settle(&client, &input, &output, plan).await?;
    let span = (measured_from, measured_to);
    let gaps = longest_gaps(&client, &output, plan.partitions, span.0, span.1).await?;
    stop(&mut instances).await;
    board.finish();
    outcome(
        plan,
        board,
        gaps,
        (balanced_after_s, drained_after_s),
        (events, keys, wrong),
    )
}

/// The input, output and changelog topics, and `state_records` of state per task in the
/// changelog for the instances to restore.
async fn prepare(
    plan: &Plan,
    client: &Client,
    board: &mut Board,
    [input, output, changelog]: [&String; 3],
) -> Result<(), Failure> {
    board.step(&format!(
        "creating {input} and {output} ({} partitions), and {} records of state per task",
        plan.partitions, plan.state_records
    ));
    create_topics(client, [input, output, changelog], plan.partitions).await?;
    let every: Vec<i32> = (0..plan.partitions as i32).collect();
    preload(client, changelog, &every, plan.state_records, plan.tty).await
}

/// What one stage measured.
fn outcome(
    plan: &Plan,
    board: Board,
    longest_gap: Gap,
    (balanced_after_s, drained_after_s): (f64, f64),
    (events, keys, wrong): (u64, usize, Vec<String>),
) -> Result<Outcome, Failure> {
    Ok(Outcome {
        assignor: plan.assignor,
        longest_gap,
        balanced_after_s,
        drained_after_s,
        events,
        keys,
        wrong,
        warmups: board.warmups_seen,
        handovers: board.handovers,
        rebalances: board.rebalances(),
    })
}

/// Instance a leaves: drained (`baton drain`, its tasks moving off through warm-ups), or
/// under an assignor without drains (before KIP-441) stopped with SIGTERM, its tasks
/// restarting wherever the assignor puts them.
async fn remove_a(
    plan: &Plan,
    exe: &std::path::Path,
    app: &str,
    board: &mut Board,
    instances: &[Instance],
) -> Result<(), Failure> {
    if !plan.assignor.drains() {
        board.step(&format!(
            "stopping a (SIGTERM): {} has no drain, its tasks move at once",
            plan.assignor.name()
        ));
        if let Some(a) = instances.iter().find(|i| i.name == "a") {
            terminate(&a.child);
        }
        return Ok(());
    }
    board.step("draining a: its tasks move off through warm-ups, then it exits");
    run_drain(exe, &plan.bootstrap, app, "a").await
}

/// `baton drain` of `instance` of group `app`, as an operator runs it.
pub(crate) async fn run_drain(
    exe: &std::path::Path,
    bootstrap: &str,
    app: &str,
    instance: &str,
) -> Result<(), Failure> {
    let args = [
        "drain",
        "--bootstrap",
        bootstrap,
        "--group",
        app,
        "--instance",
        instance,
    ];
    let drain = Command::new(exe)
        .args(args)
        .output()
        .await
        .map_err(|e| failed(format!("running baton drain: {e}")))?;
    if !drain.status.success() {
        return Err(failed(format!(
            "baton drain failed: {}",
            String::from_utf8_lossy(&drain.stderr).trim()
        )));
    }
    Ok(())
}

/// What starting one `baton run` instance needs.
pub(crate) struct Launch<'a> {
    pub exe: &'a std::path::Path,
    pub bootstrap: &'a str,
    pub app: &'a str,
    pub input: &'a str,
    pub output: &'a str,
    pub assignor: AssignorKind,
    /// Logs and state directories go here, by instance name.
    pub dir: &'a std::path::Path,
    pub name: &'static str,
}

/// Starts a `baton run` instance of the count-per-key application with the demo's short
/// timeouts, its log in `<dir>/<name>.log` and its metrics on a free port.
pub(crate) fn spawn_instance(l: &Launch) -> Result<Instance, Failure> {
    let metrics = free_port()?;
    let queries = free_port()?;
    let log = l.dir.join(format!("{}.log", l.name));
    let child = Command::new(l.exe)
        .args(["run", "--bootstrap", l.bootstrap, "--app-id", l.app])
        .args([
            "--input",
            l.input,
            "--output",
            l.output,
            "--instance-id",
            l.name,
        ])
        .arg("--state-dir")
        .arg(l.dir.join(l.name))
        .args(["--metrics-addr", &metrics.to_string()])
        .args(["--application-server", &queries.to_string()])
        .args(["--assignor", l.assignor.name()])
        .args([
            "--heartbeat-interval-ms",
            "300",
            "--session-timeout-ms",
            "6000",
        ])
        .env("RUST_LOG", "info,fjall=warn,lsm_tree=warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).map_err(|e| failed(format!("{}: {e}", log.display())))?)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("starting instance {}: {e}", l.name)))?;
    Ok(Instance {
        name: l.name,
        child,
        metrics,
        queries,
    })
}

pub(crate) fn terminate(child: &Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// Every task has a running active on one of `on`, each of them holds at least its share,
/// and no warm-up is left.
fn processing(views: &BTreeMap<String, InstanceView>, partitions: u32, on: &[&str]) -> bool {
    let share = partitions as usize / on.len();
    let mut covered = 0;
    for name in on {
        let Some(v) = views.get(*name) else {
            return false;
        };
        if v.held.values().any(|h| h.role == "warmup") {
            return false;
        }
        let running = v
            .held
            .values()
            .filter(|h| h.role == "active" && h.phase == "running")
            .count();
        if running < share {
            return false;
        }
        covered += running;
    }
    covered == partitions as usize
}

/// Watching the instances and the output until a condition holds.
struct Watch<'a> {
    plan: &'a Plan,
    client: &'a Arc<Client>,
    output: &'a str,
    dir: &'a std::path::Path,
}

impl Watch<'_> {
    /// Seconds until `done` holds for the live instances' views. An instance or the producer
    /// exiting on its own, or the step's timeout, ends the demo with the logs' place.
    async fn until(
        &mut self,
        board: &mut Board,
        instances: &mut Vec<Instance>,
        producer: &mut Child,
        what: &str,
        done: impl Fn(&BTreeMap<String, InstanceView>) -> bool,
    ) -> Result<f64, Failure> {
        let started = Instant::now();
        let parts: Vec<TopicPartition> = (0..self.plan.partitions as i32)
            .map(|p| TopicPartition::new(self.output, p))
            .collect();
        loop {
            if let Ok(Some(status)) = producer.try_wait() {
                return Err(failed(format!("the producer stopped ({status})")));
            }
            let mut views = BTreeMap::new();
            let mut gone = Vec::new();
            for (i, instance) in instances.iter_mut().enumerate() {
                match instance.child.try_wait() {
                    Ok(Some(status)) if status.success() => gone.push(i),
                    Ok(Some(status)) => {
                        return Err(failed(format!(
                            "instance {} stopped ({status}); its log: {}",
                            instance.name,
                            self.dir.join(format!("{}.log", instance.name)).display()
                        )))
                    }
                    _ => {
                        if let Some(v) = scrape(instance.metrics).await {
                            views.insert(instance.name.to_owned(), v);
                        }
                    }
                }
            }
            for i in gone.into_iter().rev() {
                let left = instances.remove(i);
                board.log(&format!("instance {} exited", left.name));
            }
            let ends: BTreeMap<i32, i64> = self
                .client
                .end_offsets(&parts)
                .await
                .map(|m| m.into_iter().map(|(tp, o)| (tp.partition, o)).collect())
                .unwrap_or_default();
            board.update(&views, &ends);
            if done(&views) {
                return Ok(started.elapsed().as_secs_f64());
            }
            if started.elapsed() > self.plan.step_timeout {
                return Err(failed(format!(
                    "waited {:.0} s for {what} (--step-timeout-ms); logs in {}",
                    self.plan.step_timeout.as_secs_f64(),
                    self.dir.display()
                )));
            }
            tokio::time::sleep(TICK).await;
        }
    }
}

/// Writes `state_records` changelog records per task, as if the application had built up
/// that much state: a new owner restoring from scratch replays all of it.
pub(crate) async fn preload(
    client: &Client,
    changelog: &str,
    partitions: &[i32],
    records: u64,
    tty: bool,
) -> Result<(), Failure> {
    const BATCH: u64 = 20_000;
    let total = records * partitions.len() as u64;
    let bar = if tty {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template("  state {bar:40} {pos}/{len} records")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    for &p in partitions {
        let leader = client
            .leader(changelog, p)
            .await
            .map_err(|e| failed(format!("finding {changelog}-{p}: {e}")))?;
        let mut i = 0;
        while i < records {
            let n = (records - i).min(BATCH);
            let batch: Vec<KeyValue> = (i..i + n)
                .map(|k| {
                    (
                        Some(Bytes::from(format!("state-{p}-{k:010}"))),
                        Some(Bytes::copy_from_slice(&(k as i64).to_be_bytes())),
                    )
                })
                .collect();
            client
                .produce(&leader, changelog, p, &batch)
                .await
                .map_err(|e| failed(format!("writing state to {changelog}-{p}: {e}")))?;
            i += n;
            bar.inc(n);
        }
    }
    bar.finish_and_clear();
    Ok(())
}

pub(crate) async fn read_topic(
    client: &Client,
    topic: &str,
    partitions: u32,
) -> Result<BTreeMap<i32, Vec<Record>>, Failure> {
    let mut out = BTreeMap::new();
    for p in 0..partitions as i32 {
        let leader = client
            .leader(topic, p)
            .await
            .map_err(|e| failed(format!("finding {topic}-{p}: {e}")))?;
        let mut rows = Vec::new();
        let mut offset = 0;
        loop {
            let f = client
                .fetch(&leader, topic, p, offset, 4 << 20, 500)
                .await
                .map_err(|e| failed(format!("reading {topic}-{p}: {e}")))?;
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
    Ok(out)
}

pub(crate) fn text(b: &Option<Bytes>) -> String {
    b.as_deref()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

/// Waits until every key's latest count equals the events the input holds for it; returns
/// (events, keys, keys still wrong at the deadline).
async fn settle(
    client: &Client,
    input: &str,
    output: &str,
    plan: &Plan,
) -> Result<(u64, usize, Vec<String>), Failure> {
    let deadline = Instant::now() + plan.step_timeout;
    let mut events = 0;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for r in read_topic(client, input, plan.partitions)
        .await?
        .into_values()
        .flatten()
    {
        *expected.entry(text(&r.key)).or_insert(0) += 1;
        events += 1;
    }
    loop {
        let mut latest: BTreeMap<String, i64> = BTreeMap::new();
        for r in read_topic(client, output, plan.partitions)
            .await?
            .into_values()
            .flatten()
        {
            latest.insert(text(&r.key), text(&r.value).parse().unwrap_or(-1));
        }
        let wrong: Vec<String> = expected
            .iter()
            .filter(|(k, n)| latest.get(*k) != Some(n))
            .map(|(k, _)| k.clone())
            .collect();
        if wrong.is_empty() || Instant::now() > deadline {
            return Ok((events, expected.len(), wrong));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The longest stretch in `[from_ms, to_ms]` during which a task wrote no output (the
/// window's edges count as output): its length, the task, and when it began (seconds after
/// `from_ms`).
async fn longest_gaps(
    client: &Client,
    output: &str,
    partitions: u32,
    from_ms: i64,
    to_ms: i64,
) -> Result<Gap, Failure> {
    let mut worst = Gap {
        seconds: 0.0,
        task: "-".into(),
        at_s: 0.0,
    };
    for (p, rows) in read_topic(client, output, partitions).await? {
        let (gap_ms, began) = longest_silence(&rows, from_ms, to_ms);
        let gap = gap_ms as f64 / 1000.0;
        if gap > worst.seconds {
            worst = Gap {
                seconds: gap,
                task: format!("0_{p}"),
                at_s: (began - from_ms) as f64 / 1000.0,
            };
        }
    }
    Ok(worst)
}

/// The longest stretch in `[from_ms, to_ms]` without a record of `rows` (the window's edges
/// count as records): its length and when it began, in milliseconds.
pub(crate) fn longest_silence(rows: &[Record], from_ms: i64, to_ms: i64) -> (i64, i64) {
    let mut last = from_ms;
    let mut worst = (0, from_ms);
    let stamps = rows
        .iter()
        .map(|r| r.timestamp)
        .filter(|&t| t >= from_ms && t <= to_ms)
        .chain(std::iter::once(to_ms));
    for t in stamps {
        if t - last > worst.0 {
            worst = (t - last, last);
        }
        last = last.max(t);
    }
    worst
}

/// Creates an application's input, output (stamped at append) and (compacted) changelog
/// topics.
pub(crate) async fn create_topics(
    client: &Client,
    [input, output, changelog]: [&str; 3],
    partitions: u32,
) -> Result<(), Failure> {
    let topic = |name: &str, compacted| NewTopic {
        name: name.to_owned(),
        partitions: partitions as i32,
        compacted,
    };
    client
        .create_topics(&[topic(input, false), topic(changelog, true)])
        .await
        .map_err(|e| failed(format!("creating topics: {e}")))?;
    // Outputs carry their input's timestamp (event time); the broker's append time is when
    // each was written, which the gaps and latencies measure.
    client
        .create_topics_with(
            &[topic(output, false)],
            &[("message.timestamp.type", "LogAppendTime")],
        )
        .await
        .map_err(|e| failed(format!("creating topics: {e}")))
}

/// Starts `baton produce`: `rate` events per second over `keys` keys until it is killed.
pub(crate) fn spawn_producer(
    exe: &std::path::Path,
    bootstrap: &str,
    input: &str,
    rate: u64,
    keys: u64,
) -> Result<Child, Failure> {
    Command::new(exe)
        .args(["produce", "--bootstrap", bootstrap, "--topic", input])
        .args(["--rate", &rate.to_string(), "--keys", &keys.to_string()])
        .args(["--count", "1000000000000", "--timeout-ms", "60000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("starting the producer: {e}")))
}

/// SIGTERM to every instance; one still running 10 s later is killed.
pub(crate) async fn stop(instances: &mut [Instance]) {
    for i in instances {
        terminate(&i.child);
        if tokio::time::timeout(Duration::from_secs(10), i.child.wait())
            .await
            .is_err()
        {
            let _ = i.child.start_kill();
            let _ = i.child.wait().await;
        }
    }
}

/// A task's longest stretch without output.
pub struct Gap {
    pub seconds: f64,
    pub task: String,
    /// When it began, in seconds after the newcomer started.
    pub at_s: f64,
}
