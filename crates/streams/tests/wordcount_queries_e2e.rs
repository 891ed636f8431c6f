//! Interactive queries on the `wordcount` example (counts behind a repartition topic) through a
//! scale-out, a drain and a `kill -9` with a restart, on the real broker, checked against the
//! input rather than against Baton's own changelog.
//!
//! Lines flow all along. An open-loop reader asks at a steady rate, whatever the answers take:
//! each query is its own task, sent on schedule, to a random live instance. Most ask a word's
//! count; every 10th first writes a line holding only `probe<P>` to input partition P and asks
//! for that word's count with `at_least` on the offset the write got (read-your-writes through
//! the repartition topic). Every query must be answered within its deadline. Every answer is
//! checked against the input: a count is never above the lines written with that word before
//! the answer came (until the kill: after it, at-least-once may count a line twice), and a
//! read-your-writes answer counts at least every probe line of its partition at or below its
//! offset. At the end every word's count is at least what was written.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_kafka::records::KeyValue;
use baton_runtime::query::forward::get;
use bytes::Bytes;
use common::{Instance, Setup};

const PARTITIONS: i32 = 4;
const APP: &str = "wc-queries";
const INPUT: &str = "wcq-lines";
const OUTPUT: &str = "wcq-counts";
const WORDS: [&str; 10] = [
    "kafka", "baton", "relay", "warm", "hand", "over", "state", "store", "no", "stall",
];
/// Queries a second, sent on schedule.
const RATE: u64 = 250;
/// Deadlines: a plain query, and a read-your-writes one (it waits for the active of the
/// line's partition and of the word's, each of which a kill -9 leaves unknown for a session).
const PLAIN_MS: u64 = 5_000;
const AT_LEAST_MS: u64 = 20_000;

/// Lines written so far with each word (counted before the write is sent, so never below
/// what the application may have counted), and each partition's probe offsets.
struct Written {
    words: BTreeMap<String, AtomicU64>,
    probes: Mutex<BTreeMap<i32, Vec<i64>>>,
}

impl Written {
    fn new() -> Written {
        let mut words: BTreeMap<String, AtomicU64> = WORDS
            .iter()
            .map(|w| (w.to_string(), AtomicU64::new(0)))
            .collect();
        for p in 0..PARTITIONS {
            words.insert(format!("probe{p}"), AtomicU64::new(0));
        }
        Written {
            words,
            probes: Mutex::default(),
        }
    }

    fn so_far(&self, word: &str) -> u64 {
        self.words[word].load(Ordering::SeqCst)
    }
}

/// One query and what came back.
struct Asked {
    word: String,
    /// The probe's partition and offset, for a read-your-writes query.
    at_least: Option<(i32, i64)>,
    /// Lines with the word written when the answer came.
    written: u64,
    /// The answer came after the kill -9.
    after_kill: bool,
    status: u16,
    body: serde_json::Value,
    seconds: f64,
    deadline_ms: u64,
}

struct Run {
    setup: Setup,
    written: Arc<Written>,
    /// Ports of the instances a caller may ask.
    live: Arc<Mutex<Vec<u16>>>,
    killed: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

/// Writes `line` to partition `p` (no key), counting its words first; its offset.
async fn write(setup_client: &baton_kafka::Client, written: &Written, p: i32, line: &str) -> i64 {
    for w in line.split(' ') {
        written.words[w].fetch_add(1, Ordering::SeqCst);
    }
    let leader = setup_client.leader(INPUT, p).await.unwrap();
    let record: KeyValue = (None, Some(Bytes::copy_from_slice(line.as_bytes())));
    setup_client
        .produce(&leader, INPUT, p, &[record])
        .await
        .unwrap()
}

/// Asks `path` of a live instance; one that is gone (killed, or exited after its drain) is
/// not a failed query: the caller asks another, as a client with several addresses does.
async fn ask(
    live: &Mutex<Vec<u16>>,
    path: &str,
    timeout: Duration,
    pick: usize,
) -> (u16, serde_json::Value) {
    let mut last = String::new();
    for attempt in 0..40 {
        let ports = live.lock().unwrap().clone();
        let port = ports[(pick + attempt) % ports.len()];
        match get(&format!("127.0.0.1:{port}"), path, timeout).await {
            Ok((status, body)) => return (status.as_u16(), body),
            Err(why) if why.server_gone() => {
                last = why.to_string();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(why) => return (0, serde_json::Value::String(why.to_string())),
        }
    }
    (0, serde_json::Value::String(last))
}

impl Run {
    /// Lines of random words at about 100 a second, round robin over the partitions.
    fn lines(&self) -> std::thread::JoinHandle<()> {
        let (client, written, stop) = (
            self.setup.client.clone(),
            self.written.clone(),
            self.stop.clone(),
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let n = 1 + (i % 4) as usize;
                    let line: Vec<&str> = (0..n)
                        .map(|j| WORDS[((i * 7 + j as u64 * 3) % 10) as usize])
                        .collect();
                    write(
                        &client,
                        &written,
                        (i % PARTITIONS as u64) as i32,
                        &line.join(" "),
                    )
                    .await;
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        })
    }

    /// The open-loop reader: a query every 1/RATE s, each its own task.
    fn reader(&self) -> std::thread::JoinHandle<Vec<Asked>> {
        let (client, written, stop) = (
            self.setup.client.clone(),
            self.written.clone(),
            self.stop.clone(),
        );
        let (live, killed) = (self.live.clone(), self.killed.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let asked = Arc::new(Mutex::new(Vec::new()));
                let mut tasks = Vec::new();
                let mut every = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut n = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    every.tick().await;
                    n += 1;
                    let (client, written, live, killed, asked) = (
                        client.clone(),
                        written.clone(),
                        live.clone(),
                        killed.clone(),
                        asked.clone(),
                    );
                    tasks.push(tokio::spawn(async move {
                        let started = Instant::now();
                        let (word, at_least, deadline_ms) = if n.is_multiple_of(10) {
                            let p = ((n / 10) % PARTITIONS as usize) as i32;
                            let word = format!("probe{p}");
                            let offset = write(&client, &written, p, &word).await;
                            written
                                .probes
                                .lock()
                                .unwrap()
                                .entry(p)
                                .or_default()
                                .push(offset);
                            (word, Some((p, offset)), AT_LEAST_MS)
                        } else {
                            (WORDS[n * 7 % WORDS.len()].to_owned(), None, PLAIN_MS)
                        };
                        let mut path =
                            format!("/v1/stores/counts/keys/{word}?timeout_ms={deadline_ms}");
                        if let Some((p, o)) = at_least {
                            path += &format!("&at_least={INPUT}:{p}:{o}");
                        }
                        let timeout = Duration::from_millis(deadline_ms + 2_000);
                        let (status, body) = ask(&live, &path, timeout, n).await;
                        let after_kill = killed.load(Ordering::SeqCst);
                        asked.lock().unwrap().push(Asked {
                            written: written.so_far(&word),
                            word,
                            at_least,
                            after_kill,
                            status,
                            body,
                            seconds: started.elapsed().as_secs_f64(),
                            deadline_ms,
                        });
                    }));
                }
                for t in tasks {
                    let _ = t.await;
                }
                let all = std::mem::take(&mut *asked.lock().unwrap());
                all
            })
        })
    }
}

fn spawn(broker: &str, dir: &std::path::Path, name: &str, state: &str, port: u16) -> Instance {
    let server = format!("127.0.0.1:{port}");
    let args = [
        "--input",
        INPUT,
        "--output",
        OUTPUT,
        "--application-server",
        &server,
        "--num-standby-replicas",
        "1",
    ];
    // The state directory follows the name: a restart passes the killed instance's name.
    let i = Instance::spawn("wordcount", broker, dir, state, APP, &args);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !i.log_text().contains("serving interactive queries") {
        assert!(
            Instant::now() < deadline,
            "{name} did not start its query server:\n{}",
            i.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    i
}

#[test]
fn queries_on_wordcount_answer_through_scale_out_drain_and_kill_checked_against_the_input() {
    let (broker, dir, setup) = common::start("wc-queries", &[INPUT], OUTPUT, PARTITIONS);
    let (pa, pb, pc) = (
        common::free_port(),
        common::free_port(),
        common::free_port(),
    );
    let run = Run {
        setup,
        written: Arc::new(Written::new()),
        live: Arc::new(Mutex::new(Vec::new())),
        killed: Arc::default(),
        stop: Arc::default(),
    };
    let lines = run.lines();
    let mut a = spawn(&broker.addr, &dir, "a", "a", pa);
    let mut b = spawn(&broker.addr, &dir, "b", "b", pb);
    run.live.lock().unwrap().extend([pa, pb]);
    std::thread::sleep(Duration::from_secs(3));
    let reader = run.reader();

    std::thread::sleep(Duration::from_secs(6));
    eprintln!("scale out: c");
    let mut c = spawn(&broker.addr, &dir, "c", "c", pc);
    run.live.lock().unwrap().push(pc);
    std::thread::sleep(Duration::from_secs(8));
    eprintln!("draining b");
    run.setup.drain(APP, "b");
    assert!(
        b.exited_within(Duration::from_secs(120)).is_some(),
        "b did not drain"
    );
    run.live.lock().unwrap().retain(|&p| p != pb);
    std::thread::sleep(Duration::from_secs(6));
    eprintln!("kill -9 a");
    run.killed.store(true, Ordering::SeqCst);
    let _ = a.child.kill();
    let _ = a.child.wait();
    run.live.lock().unwrap().retain(|&p| p != pa);
    std::thread::sleep(Duration::from_secs(3));
    let mut a = spawn(&broker.addr, &dir, "a-again", "a", pa);
    run.live.lock().unwrap().push(pa);
    std::thread::sleep(Duration::from_secs(12));

    run.stop.store(true, Ordering::SeqCst);
    lines.join().unwrap();
    let asked = reader.join().unwrap();
    check(&run, &asked);
    a.stop();
    c.stop();
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}

fn check(run: &Run, asked: &[Asked]) {
    let probes = run.written.probes.lock().unwrap().clone();
    let (mut failed, mut late, mut ryw, mut forwarded, mut standby) = (Vec::new(), 0, 0, 0, 0);
    let (mut largest_lag_ms, mut latencies) = (0u64, Vec::new());
    for q in asked {
        latencies.push(q.seconds);
        if q.status != 200 {
            failed.push(format!("{} -> {} {}", q.word, q.status, q.body));
            continue;
        }
        if q.seconds > (q.deadline_ms as f64 / 1000.0) + 2.0 {
            late += 1;
        }
        let count = q.body["value"].as_i64().unwrap_or(0);
        forwarded += usize::from(q.body["forwarded"] == true);
        standby += usize::from(q.body["role"] != "active");
        largest_lag_ms = largest_lag_ms.max(q.body["lag_ms"].as_u64().unwrap_or(0));
        if !q.after_kill {
            assert!(
                count as u64 <= q.written,
                "{}: counted {count} of {} lines written when it answered: counted twice \
                 without a crash ({})",
                q.word,
                q.written,
                q.body
            );
        }
        if let Some((p, offset)) = q.at_least {
            ryw += 1;
            let below = probes[&p].iter().filter(|&&o| o <= offset).count() as i64;
            assert!(
                count >= below,
                "{}: at_least {INPUT}:{p}:{offset} answered {count}, but {below} probe lines \
                 are at or below it ({})",
                q.word,
                q.body
            );
        }
    }
    latencies.sort_by(f64::total_cmp);
    let p99 = latencies[latencies.len() * 99 / 100];
    eprintln!(
        "wordcount queries: {} asked at {RATE}/s, {} answered, {} failed, {late} past their \
         deadline; {ryw} read-your-writes through the repartition topic; {forwarded} forwarded; \
         {standby} from a standby or warm-up; largest lag_ms served {largest_lag_ms}; p99 {:.1} ms",
        asked.len(),
        asked.len() - failed.len(),
        failed.len(),
        p99 * 1000.0
    );
    assert!(
        failed.is_empty(),
        "failed queries: {:?}",
        &failed[..failed.len().min(10)]
    );
    assert_eq!(late, 0, "answers past their deadline");
    assert!(ryw > 50 && forwarded > 0, "the run exercised both paths");
    // Every line is counted in the end (at least once: the kill may repeat some).
    let written: BTreeMap<String, i64> = run
        .written
        .words
        .iter()
        .map(|(w, n)| (w.clone(), n.load(Ordering::SeqCst) as i64))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let counts: BTreeMap<String, i64> = run
            .setup
            .read(OUTPUT)
            .into_values()
            .flatten()
            .filter_map(|r| {
                let word = String::from_utf8(r.key.as_ref()?.to_vec()).ok()?;
                let count = i64::from_be_bytes(r.value.as_ref()?.as_ref().try_into().ok()?);
                Some((word, count))
            })
            .collect();
        let short: Vec<(&String, i64, i64)> = written
            .iter()
            .map(|(w, n)| (w, *n, counts.get(w).copied().unwrap_or(0)))
            .filter(|(_, n, c)| c < n)
            .collect();
        if short.is_empty() {
            let twice: i64 = written.iter().map(|(w, n)| counts[w] - n).sum();
            eprintln!("wordcount queries: every line counted in the end; {twice} counted twice (after the kill)");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "(word, written, counted) short: {short:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
