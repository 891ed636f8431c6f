//! Interactive queries through a scale-out, a drain and a `kill -9`, on a real broker: a reader
//! asks random keys through random instances at a steady rate the whole time. Every query is
//! answered; every answer equals the key's count at the changelog position it states; every
//! read-your-writes answer has counted the record it waited for. At the end, range scans page
//! through every partition and find each key once, with its count at the stated position.

mod harness;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_kafka::Client;
use baton_runtime::partitioner::partition_for;
use baton_runtime::query::forward::get;
use bytes::Bytes;
use harness::{Cluster, Producer, INPUT, PARTITIONS};
use serde_json::Value;

const KEYS: u64 = 40;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One query and what came back.
struct Asked {
    key: String,
    /// `at_least`'s input offset, for a read-your-writes query.
    at_least: Option<(i32, i64)>,
    /// `max_lag_ms`, for a query that bounds its staleness in time.
    max_lag_ms: Option<u64>,
    status: u16,
    body: Value,
    seconds: f64,
}

/// The staleness in time the reader's bounded queries accept.
const STALE_MS: u64 = 2_000;

/// Instances the reader may ask, by port.
type Live = Arc<Mutex<Vec<u16>>>;

struct Reader {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<(Vec<Asked>, u64)>>,
}

impl Reader {
    /// Queries a random key through a random live instance every few milliseconds; every
    /// 25th query first writes one record for its key and asks to read it (`at_least`); every
    /// 10th other one accepts a copy up to 2 s stale (`max_lag_ms`).
    fn start(broker: &str, live: Live) -> Reader {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, broker) = (stop.clone(), broker.to_owned());
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let client = Client::new(&[&broker], "e2e-reader");
                let mut rng = 0x9e37_79b9_7f4a_7c15u64;
                let mut next = move || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let (mut asked, mut reconnects) = (Vec::new(), 0u64);
                while !s.load(Ordering::SeqCst) {
                    let n = asked.len();
                    let key = format!("q{}", next() % KEYS);
                    let mut path = format!("/v1/stores/counts/keys/{key}");
                    let mut at_least = None;
                    if n % 25 == 24 {
                        // Only the active knows how far it has processed its input: after a
                        // kill -9 that waits out the session timeout (6 s) and the promotion.
                        let p = partition_for(key.as_bytes(), PARTITIONS) as i32;
                        let leader = client.leader(INPUT, p).await.unwrap();
                        let record = (Some(Bytes::from(key.clone())), Some(Bytes::from("rw")));
                        let offset = client.produce(&leader, INPUT, p, &[record]).await.unwrap();
                        path += &format!("?timeout_ms=12000&at_least={INPUT}:{p}:{offset}");
                        at_least = Some((p, offset));
                    }
                    let mut max_lag_ms = None;
                    if at_least.is_none() {
                        path += "?timeout_ms=4000";
                        if n % 10 == 3 {
                            path += &format!("&max_lag_ms={STALE_MS}");
                            max_lag_ms = Some(STALE_MS);
                        }
                    }
                    let started = Instant::now();
                    // A caller whose instance is gone asks another: that is not a failed query.
                    let mut answer = Err(baton_runtime::query::forward::HopError::DeadlinePassed);
                    'asking: for _ in 0..20 {
                        let ports = live.lock().unwrap().clone();
                        let first = next() as usize;
                        for i in 0..ports.len() {
                            let port = ports[(first + i) % ports.len()];
                            answer =
                                get(&format!("127.0.0.1:{port}"), &path, Duration::from_secs(14))
                                    .await;
                            match &answer {
                                // Refused, or dropped mid-answer: the instance is gone
                                // (killed, or exited after its drain); GET is safe to repeat.
                                Err(why) if why.server_gone() => reconnects += 1,
                                _ => break 'asking,
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let (status, body) = match answer {
                        Ok((status, body)) => (status.as_u16(), body),
                        Err(why) => (0, Value::String(why.to_string())),
                    };
                    asked.push(Asked {
                        key,
                        at_least,
                        max_lag_ms,
                        status,
                        body,
                        seconds: started.elapsed().as_secs_f64(),
                    });
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (asked, reconnects)
            })
        });
        Reader {
            stop,
            handle: Some(handle),
        }
    }

    fn stop(&mut self) -> (Vec<Asked>, u64) {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.take().unwrap().join().unwrap()
    }
}

fn args(port: u16) -> Vec<String> {
    vec![
        "--application-server".into(),
        format!("127.0.0.1:{port}"),
        "--num-standby-replicas".into(),
        "1".into(),
    ]
}

fn spawn(cluster: &Cluster, name: &str, state: &str, port: u16) -> harness::Instance {
    let a = args(port);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let i = cluster.spawn_on(name, state, &a);
    assert!(
        i.await_log(&["serving interactive queries"], Duration::from_secs(60)),
        "{name} did not start its query server:\n{}",
        i.log_text()
    );
    i
}

#[test]
fn queries_keep_answering_through_scale_out_drain_and_kill() {
    let cluster = Cluster::new("queries");
    let (pa, pb, pc) = (free_port(), free_port(), free_port());
    let mut producer = Producer::start(&cluster.broker.addr, "q", 300, KEYS);
    let mut a = spawn(&cluster, "a", "a", pa);
    let mut b = spawn(&cluster, "b", "b", pb);
    let live: Live = Arc::new(Mutex::new(vec![pa, pb]));
    // Settled: both instances process.
    let deadline = Instant::now() + harness::SETTLE;
    while a.running().is_empty() || b.running().is_empty() {
        assert!(Instant::now() < deadline, "a and b never both ran tasks");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut reader = Reader::start(&cluster.broker.addr, live.clone());
    std::thread::sleep(Duration::from_secs(5));

    eprintln!("scaling out to c");
    let mut c = spawn(&cluster, "c", "c", pc);
    live.lock().unwrap().push(pc);
    let deadline = Instant::now() + harness::SETTLE;
    while c.running().is_empty() {
        assert!(Instant::now() < deadline, "c never got an active");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(4));

    eprintln!("draining b");
    cluster.drain("b");
    assert!(b.await_exit(Duration::from_secs(120)), "b did not drain");
    live.lock().unwrap().retain(|&p| p != pb);
    std::thread::sleep(Duration::from_secs(4));

    eprintln!("kill -9 a");
    a.kill9();
    live.lock().unwrap().retain(|&p| p != pa);
    std::thread::sleep(Duration::from_secs(3));
    let mut a = spawn(&cluster, "a-again", "a", pa);
    live.lock().unwrap().push(pa);
    std::thread::sleep(Duration::from_secs(10));

    let (asked, reconnects) = reader.stop();
    producer.stop();
    // Every partition, page by page through one instance: some pages are forwarded.
    let scanned = cluster.rt.block_on(async {
        let mut pages = Vec::new();
        for p in 0..PARTITIONS {
            let mut after = String::new();
            loop {
                let path = format!("/v1/stores/counts/partitions/{p}/range?limit=7{after}");
                let (status, body) =
                    get(&format!("127.0.0.1:{pc}"), &path, Duration::from_secs(10))
                        .await
                        .unwrap();
                assert_eq!(status.as_u16(), 200, "{body}");
                let next = body["next_after_hex"].as_str().map(str::to_owned);
                pages.push((p as i32, body));
                match next {
                    Some(h) => after = format!("&after_hex={h}"),
                    None => break,
                }
            }
        }
        pages
    });
    // `baton query`: a key, and a page of a partition, as an operator asks them.
    let server = format!("127.0.0.1:{pc}");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["query", "--server", &server])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "baton query {args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let one = cli(&["counts", "q1", "--timeout-ms", "10000"]);
    assert!(one.contains("from the active at"), "{one}");
    let page = cli(&["counts", "--partition", "0", "--limit", "3"]);
    // Partition 0 holds about a quarter of the 40 keys: a full page, and more after it.
    assert!(
        page.lines().filter(|l| l.contains('\t')).count() == 3
            && page.contains("(3 entries")
            && page.contains("more follow"),
        "{page}"
    );
    a.stop();
    c.stop();

    // The changelog holds each count as it was written: the count at a position is the
    // key's last record at or below it.
    let changelog = cluster.read_topic(&format!("{}-counts-changelog", cluster.app));
    for (p, records) in &changelog {
        for w in records.windows(2) {
            assert_eq!(
                w[1].offset,
                w[0].offset + 1,
                "changelog {p} has a gap: compacted under the test"
            );
        }
    }
    let count_at = |p: i32, key: &str, position: i64| -> Option<i64> {
        changelog
            .get(&p)?
            .iter()
            .rev()
            .find(|r| r.offset <= position && r.key.as_deref() == Some(key.as_bytes()))
            .and_then(|r| {
                r.value
                    .as_deref()
                    .map(|v| i64::from_be_bytes(v.try_into().unwrap()))
            })
    };
    let input = cluster.read_topic(INPUT);
    let inputs_to = |p: i32, key: &str, offset: i64| -> i64 {
        input[&p]
            .iter()
            .filter(|r| r.offset <= offset && r.key.as_deref() == Some(key.as_bytes()))
            .count() as i64
    };

    let mut failed = Vec::new();
    let mut wrong = Vec::new();
    let (mut forwarded, mut largest_lag, mut by_role) = (0, 0u64, BTreeMap::<String, u64>::new());
    let (mut largest_lag_ms, mut bounded) = (0u64, 0u64);
    for q in &asked {
        if q.status != 200 {
            failed.push(format!(
                "{} (at_least {:?}) {}: {}",
                q.key, q.at_least, q.status, q.body
            ));
            continue;
        }
        let b = &q.body;
        let (p, position) = (
            b["partition"].as_i64().unwrap() as i32,
            b["position"].as_i64().unwrap(),
        );
        let value = b["value"].as_i64();
        if b["found"] != Value::Bool(value.is_some()) || value != count_at(p, &q.key, position) {
            wrong.push(format!(
                "{}: answered {value:?} at {p}:{position}, the changelog says {:?}",
                q.key,
                count_at(p, &q.key, position)
            ));
        }
        if let Some((ip, offset)) = q.at_least {
            let least = inputs_to(ip, &q.key, offset);
            if value.unwrap_or(0) < least {
                wrong.push(format!(
                    "{}: at_least {ip}:{offset} answered {value:?}, below the {least} inputs to it",
                    q.key
                ));
            }
        }
        if let Some(bound) = q.max_lag_ms {
            bounded += 1;
            match b["lag_ms"].as_u64() {
                Some(ms) if ms <= bound => {}
                other => wrong.push(format!(
                    "{}: max_lag_ms={bound} answered by a copy {other:?} ms behind",
                    q.key
                )),
            }
        }
        largest_lag_ms = largest_lag_ms.max(b["lag_ms"].as_u64().unwrap_or(0));
        forwarded += b["forwarded"].as_bool().unwrap_or(false) as u64;
        largest_lag = largest_lag.max(b["lag_offsets"].as_u64().unwrap_or(0));
        *by_role
            .entry(b["role"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    let mut keys_scanned = std::collections::BTreeSet::new();
    for (p, page) in &scanned {
        let position = page["position"].as_i64().unwrap();
        for e in page["entries"].as_array().unwrap() {
            let key = e["key"].as_str().unwrap().to_owned();
            assert_eq!(
                partition_for(key.as_bytes(), PARTITIONS) as i32,
                *p,
                "{key} scanned in partition {p}"
            );
            assert_eq!(
                e["value"].as_i64(),
                count_at(*p, &key, position),
                "{key} at {p}:{position}"
            );
            assert!(keys_scanned.insert(key.clone()), "{key} scanned twice");
        }
    }
    assert_eq!(
        keys_scanned.len() as u64,
        KEYS,
        "range scans found {keys_scanned:?}"
    );
    let mut seconds: Vec<f64> = asked.iter().map(|q| q.seconds).collect();
    seconds.sort_by(f64::total_cmp);
    let p99 = seconds[(seconds.len() * 99 / 100).min(seconds.len() - 1)];
    let rw = asked.iter().filter(|q| q.at_least.is_some()).count();
    eprintln!(
        "queries: {} answered, {} failed, {} wrong; {forwarded} forwarded, by role {by_role:?}; {rw} read-your-writes; {reconnects} asked again elsewhere (instance gone); {bounded} bounded by max_lag_ms={STALE_MS}; largest lag served {largest_lag} records, {largest_lag_ms} ms; p99 {:.1} ms",
        asked.len() - failed.len(),
        failed.len(),
        wrong.len(),
        p99 * 1000.0
    );
    assert!(asked.len() > 1000, "the reader asked only {}", asked.len());
    assert!(
        failed.is_empty(),
        "{} queries failed, first: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(
        wrong.is_empty(),
        "{} answers were wrong, first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(forwarded > 0, "no query was forwarded");
    assert!(rw > 20, "too few read-your-writes queries: {rw}");
    assert!(bounded > 50, "too few time-bounded queries: {bounded}");
}
