//! The `windowed-views` example on the real broker, as its docs run it: page views with
//! their own timestamps (some out of order within the grace period, some later than it),
//! counted per user per minute while one instance runs, then while two more join and the
//! first is drained. Every (user, window) count in the output equals what Kafka Streams'
//! rules give for the input (stream time per partition, windows closing at end plus grace),
//! views that came too late are in no count, and the longest stall of each output partition
//! is reported. The broker comes from `scripts/install-broker.sh`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use bytes::Bytes;
use common::{now_ms, Instance, Setup};

const PARTITIONS: i32 = 4;
const APP: &str = "views-e2e";
const INPUT: &str = "page-views";
const OUTPUT: &str = "views-per-minute";
const MINUTE: i64 = 60_000;
const GRACE: i64 = 10_000;
/// Event time starts at a whole minute an hour ago: recent, so no retention by time removes
/// the input.
fn base() -> i64 {
    static BASE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| now_ms() / MINUTE * MINUTE - 60 * MINUTE)
}

/// View `i`: a user, and when the view happened. Event time moves 200 ms a view; every 17th
/// view comes 4 s behind (within the grace), every 41st 90 s behind (past it, once stream
/// time has moved on).
fn view(i: u64) -> (String, i64) {
    let user = format!("user-{}", (i * 7) % 30);
    let mut ts = base() + i as i64 * 200;
    if i.is_multiple_of(17) {
        ts -= 4_000;
    }
    if i.is_multiple_of(41) {
        ts -= 90_000;
    }
    (user, ts)
}

fn partition(user: &str) -> i32 {
    partition_for(user.as_bytes(), PARTITIONS as u32) as i32
}

/// What Kafka Streams counts for `views`: per partition, in the order written, stream time
/// the largest timestamp so far; a view counts in its minute unless that window's end plus
/// the grace is at or behind stream time. Also how many were dropped as late.
fn expected(views: &[(String, i64)]) -> (BTreeMap<(String, i64), i64>, u64) {
    let mut stream_time: BTreeMap<i32, i64> = BTreeMap::new();
    let (mut counts, mut late) = (BTreeMap::new(), 0);
    for (user, ts) in views {
        let time = stream_time.entry(partition(user)).or_insert(-1);
        *time = (*time).max(*ts);
        let start = ts / MINUTE * MINUTE;
        if start + MINUTE <= *time - GRACE {
            late += 1;
            continue;
        }
        *counts.entry((user.clone(), start)).or_insert(0) += 1;
    }
    (counts, late)
}

trait Views {
    fn send(&self, views: &[(String, i64)]);
    fn latest(&self) -> BTreeMap<(String, i64), i64>;
}

impl Views for Setup {
    /// Writes `views`, each to its user's partition with its own timestamp.
    fn send(&self, views: &[(String, i64)]) {
        let mut by_partition: BTreeMap<i32, (Vec<KeyValue>, Vec<i64>)> = BTreeMap::new();
        for (user, ts) in views {
            let (records, stamps) = by_partition.entry(partition(user)).or_default();
            records.push((
                Some(Bytes::from(user.clone())),
                Some(Bytes::from_static(b"/page")),
            ));
            stamps.push(*ts);
        }
        self.rt.block_on(async {
            for (p, (records, stamps)) in by_partition {
                let leader = self.client.leader(INPUT, p).await.unwrap();
                self.client
                    .produce_stamped(&leader, INPUT, p, &records, &stamps)
                    .await
                    .unwrap();
            }
        });
    }

    /// Each (user, window start)'s latest count in the output.
    fn latest(&self) -> BTreeMap<(String, i64), i64> {
        let mut out = BTreeMap::new();
        for r in self.read(OUTPUT).into_values().flatten() {
            let key = r.key.unwrap();
            let (user, start) = key.split_at(key.len() - 8);
            let start = i64::from_be_bytes(start.try_into().unwrap());
            let count: [u8; 8] = r.value.unwrap().as_ref().try_into().expect("a Long");
            out.insert(
                (String::from_utf8(user.to_vec()).unwrap(), start),
                i64::from_be_bytes(count),
            );
        }
        out
    }
}

/// Every view written so far, in order, and how many of them came from [`view`].
#[derive(Default)]
struct Feed {
    views: Vec<(String, i64)>,
    regular: u64,
}

impl Feed {
    /// Writes `more`; what the output must then hold, and how many views were late.
    fn send(
        &mut self,
        setup: &Setup,
        more: Vec<(String, i64)>,
    ) -> (BTreeMap<(String, i64), i64>, u64) {
        setup.send(&more);
        self.views.extend(more);
        expected(&self.views)
    }

    /// Writes the next `n` views of [`view`].
    fn regular(&mut self, setup: &Setup, n: u64) -> (BTreeMap<(String, i64), i64>, u64) {
        let more = (self.regular..self.regular + n).map(view).collect();
        self.regular += n;
        self.send(setup, more)
    }
}

fn spawn(broker: &str, dir: &std::path::Path, name: &str) -> Instance {
    spawn_with(broker, dir, name, &[])
}

fn spawn_with(broker: &str, dir: &std::path::Path, name: &str, extra: &[&str]) -> Instance {
    let mut args = vec!["--input", INPUT, "--output", OUTPUT];
    args.extend_from_slice(extra);
    Instance::spawn("windowed-views", broker, dir, name, APP, &args)
}

/// Every user's windows as the query server at `server` answers them: (user, start) -> count.
fn queried_windows(setup: &Setup, server: &str) -> BTreeMap<(String, i64), i64> {
    let mut out = BTreeMap::new();
    for u in 0..30 {
        let user = format!("user-{u}");
        let path = format!("/v1/stores/views-per-minute/keys/{user}/windows");
        let (status, body) = setup
            .rt
            .block_on(baton_runtime::query::forward::get(
                server,
                &path,
                Duration::from_secs(10),
            ))
            .unwrap();
        assert_eq!(status.as_u16(), 200, "{body}");
        for w in body["windows"].as_array().unwrap() {
            assert_eq!(
                w["end"].as_i64().unwrap() - w["start"].as_i64().unwrap(),
                MINUTE
            );
            out.insert(
                (user.clone(), w["start"].as_i64().unwrap()),
                w["value"].as_i64().unwrap(),
            );
        }
    }
    out
}

#[test]
fn windowed_views_count_every_window_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("windowed-views-e2e", &[INPUT], OUTPUT, PARTITIONS);
    let server = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let mut a = spawn_with(&broker.addr, &dir, "a", &["--application-server", &server]);
    let mut feed = Feed::default();
    let (want, late) = feed.regular(&setup, 3_000);
    assert!(late > 0, "the input has views past the grace");
    setup.await_equal(&want, "one instance", Views::latest);
    // The window store answers queries with the same counts (its last writes may land just
    // after their output).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut queried = queried_windows(&setup, &server);
    while queried != want && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        queried = queried_windows(&setup, &server);
    }
    assert_eq!(queried, want, "the window store's queried counts");
    eprintln!(
        "windowed-views: one instance counted 3,000 views into {} windows exactly, {late} late",
        want.len()
    );

    // Scale out to three and drain the first, with views flowing all along.
    let from = now_ms();
    let mut b = spawn(&broker.addr, &dir, "b");
    let mut c = spawn(&broker.addr, &dir, "c");
    for _ in 0..20 {
        feed.regular(&setup, 100);
        std::thread::sleep(Duration::from_millis(250));
    }
    setup.drain(APP, "a");
    for _ in 0..20 {
        feed.regular(&setup, 100);
        std::thread::sleep(Duration::from_millis(250));
    }
    let (want, late) = feed.regular(&setup, 1);
    let status = a.exited_within(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "a exits once drained: {status:?}\n{}",
        a.log_text()
    );
    setup.await_equal(&want, "after the scale-out and the drain", Views::latest);
    let to = now_ms();
    let gaps = setup.longest_gaps(OUTPUT, from, to);
    eprintln!(
        "windowed-views: {} views into {} windows, all counted exactly, {late} dropped as \
         late; longest gap per output partition {gaps:?}",
        feed.views.len(),
        want.len()
    );

    // b leaves; c takes its tasks over. The first views c reads for them are two minutes
    // behind: late for the tasks' stream time, which c must know before it reads anything.
    b.stop();
    std::thread::sleep(Duration::from_secs(8));
    let newest = feed.views.iter().map(|v| v.1).max().unwrap();
    let behind: Vec<(String, i64)> = (0..30)
        .map(|u| (format!("user-{u}"), newest - 2 * MINUTE))
        .collect();
    let (_, late_before) = expected(&feed.views);
    let (_, late) = feed.send(&setup, behind);
    assert_eq!(
        late - late_before,
        30,
        "every view two minutes behind is late"
    );
    let (want, _) = feed.regular(&setup, 400);
    setup.await_equal(&want, "after b left", Views::latest);

    // Every view is committed, with the stream time beside it where the broker keeps offset
    // metadata (Kafka does; a broker that does not returns none, and the time comes from the
    // window stores, as above).
    let mut wanted: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    for (user, ts) in &feed.views {
        let (n, time) = wanted.entry(partition(user)).or_insert((0, -1));
        *n += 1;
        *time = (*time).max(*ts);
    }
    let committed = || {
        let tps: Vec<_> = (0..PARTITIONS)
            .map(|p| baton_protocol::TopicPartition::new(INPUT, p))
            .collect();
        let c = setup
            .rt
            .block_on(setup.client.committed(APP, &tps))
            .unwrap();
        c.into_iter()
            .map(|(tp, c)| {
                let time = baton_runtime::stream_time::decode(c.metadata.as_deref());
                (tp.partition, (c.offset, time))
            })
            .collect::<BTreeMap<i32, (i64, i64)>>()
    };
    let keeps_metadata = committed().values().any(|&(_, t)| t != -1);
    if !keeps_metadata {
        for w in wanted.values_mut() {
            w.1 = -1;
        }
    }
    setup.await_equal(&wanted, "committed offsets and stream times", |_| {
        committed()
    });
    eprintln!("windowed-views: the broker keeps offset metadata: {keeps_metadata}");
    let worst = gaps.values().copied().fold(0.0, f64::max);
    assert!(worst < 10.0, "an output partition stalled {worst:.2} s");
    assert!(c.exited_within(Duration::ZERO).is_none(), "c runs on");
    c.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
