//! Changelog records in Kafka Streams' own layout, on the real broker, checked against records
//! written from Kafka's rules (the golden records below), not against Baton's own:
//!
//! - A timestamped key-value or window store (every DSL aggregation) logs the plain value and
//!   puts the value's timestamp in the record's timestamp:
//!   `ChangeLoggingTimestampedKeyValueBytesStore.log(key, rawValue(v), timestamp(v))`, and
//!   `ChangeLoggingTimestampedWindowBytesStore` the same. The aggregate's timestamp is the
//!   newest of the records folded in (`KStreamAggregate`, `KStreamWindowAggregate`:
//!   `max(record.timestamp(), oldAgg.timestamp())`).
//! - A window store's changelog key is the record key, the window start (8 bytes, big-endian)
//!   and a sequence number (4 bytes, 0): `WindowKeySchema.toStoreKeyBinary`.
//! - A plain store (the Processor API's `Stores.keyValueStoreBuilder`) logs its bytes as they
//!   are, stamped with the timestamp of the record that wrote them (`context.timestamp()`); a
//!   delete is a tombstone stamped the same way (`ChangeLoggingKeyValueBytesStore`).
//! - Restoring a timestamped store puts the record's timestamp back before its value
//!   (`RecordConverters.rawValueToTimestampedValue`); a tombstone deletes.
//!
//! Kafka Streams adds no headers to changelog records unless IQv2's consistency vectors are on
//! (`ChangelogRecordDeserializationHelper`), and Baton's producer writes none.
//!
//! The test runs one instance on input of known timestamps and compares each changelog's
//! latest record per key with the golden one, field by field. Then it appends records to the
//! changelogs as a Kafka Streams instance would have written them (a new key for each store and
//! a tombstone), starts a second instance with no local state, which restores everything, and
//! feeds it one more record per key: each output is the restored value folded with the new
//! record, stamped with the restored timestamp where that is the newer.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton_kafka::client::NewTopic;
use baton_kafka::records::{KeyValue, Record};
use baton_runtime::Exit;
use baton_streams::serdes::{Json, Long, Str, TimeWindowed};
use baton_streams::{
    Consumed, Grouped, KeyValueStore, Materialized, Processor, ProcessorContext, Produced,
    Record as Rec, StreamsBuilder, TimeWindows,
};
use bytes::Bytes;
use common::Setup;
use serde::{Deserialize, Serialize};

const APP: &str = "layout";
const WINDOW: Duration = Duration::from_secs(10);

/// (input topic, output topic, store) of each stream.
const COUNT: (&str, &str, &str) = ("cl-count-in", "cl-count-out", "counts");
const REDUCE: (&str, &str, &str) = ("cl-reduce-in", "cl-reduce-out", "joined");
const AGGREGATE: (&str, &str, &str) = ("cl-agg-in", "cl-agg-out", "totals");
const TUMBLING: (&str, &str, &str) = ("cl-tumbling-in", "cl-tumbling-out", "tumbling");
const HOPPING: (&str, &str, &str) = ("cl-hopping-in", "cl-hopping-out", "hopping");
const PLAIN: (&str, &str, &str) = ("cl-plain-in", "cl-plain-out", "latest");
const ALL: [(&str, &str, &str); 6] = [COUNT, REDUCE, AGGREGATE, TUMBLING, HOPPING, PLAIN];

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Totals {
    count: i64,
    sum: i64,
}

/// Keeps each key's latest value; the value "delete" deletes the key instead.
struct Latest(KeyValueStore<Str, Str>);

impl Processor<String, String, String, String> for Latest {
    fn process(&self, r: Rec<String, String>, ctx: &mut ProcessorContext<'_, String, String>) {
        if r.value == "delete" {
            ctx.delete(&self.0, &r.key);
        } else {
            ctx.put(&self.0, &r.key, &r.value);
        }
        ctx.forward(r.key, r.value);
    }
}

fn topology() -> baton_runtime::Topology {
    let b = StreamsBuilder::new(APP);
    let grouped = || Grouped::with(Str, Str);
    b.stream(COUNT.0, Consumed::with(Str, Str))
        .group_by_key(grouped())
        .count(Materialized::named(COUNT.2))
        .to_stream()
        .to(COUNT.1, Produced::with(Str, Long));
    b.stream(REDUCE.0, Consumed::with(Str, Str))
        .group_by_key(grouped())
        .reduce(|a, v| format!("{a},{v}"), Materialized::named(REDUCE.2))
        .to_stream()
        .to(REDUCE.1, Produced::with(Str, Str));
    b.stream(AGGREGATE.0, Consumed::with(Str, Long))
        .group_by_key(Grouped::with(Str, Long))
        .aggregate(
            || Totals { count: 0, sum: 0 },
            |_, v, t| Totals {
                count: t.count + 1,
                sum: t.sum + v,
            },
            Json::<Totals>::new(),
            Materialized::named(AGGREGATE.2),
        )
        .to_stream()
        .to(AGGREGATE.1, Produced::with(Str, Json::<Totals>::new()));
    let day = Duration::from_secs(86_400);
    b.stream(TUMBLING.0, Consumed::with(Str, Str))
        .group_by_key(grouped())
        .windowed_by(TimeWindows::of_size_and_grace(WINDOW, day))
        .count(Materialized::named(TUMBLING.2))
        .to_stream()
        .to(
            TUMBLING.1,
            Produced::with(TimeWindowed::new(Str, WINDOW), Long),
        );
    b.stream(HOPPING.0, Consumed::with(Str, Str))
        .group_by_key(grouped())
        .windowed_by(TimeWindows::of_size_and_grace(WINDOW, day).advance_by(WINDOW / 2))
        .count(Materialized::named(HOPPING.2))
        .to_stream()
        .to(
            HOPPING.1,
            Produced::with(TimeWindowed::new(Str, WINDOW), Long),
        );
    b.stream(PLAIN.0, Consumed::with(Str, Str))
        .process(
            Latest(KeyValueStore::new(PLAIN.2, Str, Str)),
            &[PLAIN.2],
            Str,
            Str,
        )
        .to(PLAIN.1, Produced::with(Str, Str));
    b.build().unwrap()
}

fn config(broker: &str, dir: &std::path::Path, name: &str) -> baton_runtime::RuntimeConfig {
    common::runtime_config(broker, dir, APP, name, &[])
}

fn changelog(store: &str) -> String {
    format!("{APP}-{store}-changelog")
}

/// A record as it sits in a topic: key, value (`None`: a tombstone), timestamp.
type Golden = (Vec<u8>, Option<Vec<u8>>, i64);

fn long(n: i64) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

/// A window store's changelog key: `WindowKeySchema.toStoreKeyBinary(key, start, 0)`.
fn window_key(key: &str, start: i64) -> Vec<u8> {
    [key.as_bytes(), &start.to_be_bytes(), &0i32.to_be_bytes()].concat()
}

/// A windowed key on an output topic: `TimeWindowedSerializer` (key, then the start).
fn windowed(key: &str, start: i64) -> Vec<u8> {
    [key.as_bytes(), &start.to_be_bytes()].concat()
}

fn json(count: i64, sum: i64) -> Vec<u8> {
    format!(r#"{{"count":{count},"sum":{sum}}}"#).into_bytes()
}

/// Writes `records` (key, value, timestamp) to partition 0 of `topic`.
fn write(setup: &Setup, topic: &str, records: &[Golden]) {
    let (kv, stamps): (Vec<KeyValue>, Vec<i64>) = records
        .iter()
        .map(|(k, v, ts)| {
            (
                (
                    Some(Bytes::copy_from_slice(k)),
                    v.as_ref().map(|v| Bytes::copy_from_slice(v)),
                ),
                *ts,
            )
        })
        .unzip();
    setup.rt.block_on(async {
        let leader = setup.client.leader(topic, 0).await.unwrap();
        setup
            .client
            .produce_stamped(&leader, topic, 0, &kv, &stamps)
            .await
            .unwrap();
    });
}

fn text(topic: &str, records: &[(&str, &str, i64)]) -> (String, Vec<Golden>) {
    let rows = records
        .iter()
        .map(|(k, v, ts)| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec()), *ts))
        .collect();
    (topic.to_owned(), rows)
}

/// The latest record of each key of `topic`.
fn latest(setup: &Setup, topic: &str) -> BTreeMap<Vec<u8>, (Option<Vec<u8>>, i64)> {
    let rows: Vec<Record> = setup.read(topic).remove(&0).unwrap_or_default();
    rows.into_iter()
        .filter_map(|r| Some((r.key?.to_vec(), (r.value.map(|v| v.to_vec()), r.timestamp))))
        .collect()
}

/// Waits until every golden record is the latest of its key in `topic`, or fails naming what
/// differs, field by field.
fn expect_latest(setup: &Setup, topic: &str, golden: &[Golden], deadline: Instant) {
    loop {
        let have = latest(setup, topic);
        let wrong: Vec<String> = golden
            .iter()
            .filter(|(k, v, ts)| have.get(k) != Some(&(v.clone(), *ts)))
            .map(|(k, v, ts)| {
                format!(
                    "key {:?}: kafka writes value {:?} at {ts}, baton's latest is {:?}",
                    String::from_utf8_lossy(k),
                    v,
                    have.get(k)
                )
            })
            .collect();
        if wrong.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: {} record(s) not as Kafka writes them:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn run_instance(
    setup: &Setup,
    broker: &str,
    dir: &std::path::Path,
    name: &str,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<baton_runtime::Result<Exit>>,
) {
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let cfg = config(broker, dir, name);
    let handle = setup
        .rt
        .spawn(baton_runtime::instance::run(cfg, topology(), shutdown));
    (stop, handle)
}

fn stop_instance(
    setup: &Setup,
    name: &str,
    (stop, handle): (
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<baton_runtime::Result<Exit>>,
    ),
) {
    stop.send(true).unwrap();
    common::await_shutdown(setup, name, handle);
}

#[test]
fn changelogs_hold_and_restore_kafka_streams_records() {
    let inputs: Vec<&str> = ALL.iter().map(|s| s.0).collect();
    let (broker, dir, setup) = common::start("changelog-layout", &inputs, "cl-unused", 1);
    let outputs: Vec<NewTopic> = ALL
        .iter()
        .map(|s| NewTopic {
            name: s.1.into(),
            partitions: 1,
            compacted: false,
        })
        .collect();
    setup
        .rt
        .block_on(setup.client.create_topics(&outputs))
        .unwrap();
    // Recent timestamps (the broker's retention goes by them), on a window boundary.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let t0 = (now - 3_600_000) / 10_000 * 10_000;
    let at = |ms: i64| t0 + ms;

    // Phase 1: Baton's own changelog records, against Kafka's.
    let input = [
        text(
            COUNT.0,
            &[
                ("a", "x", at(1_000)),
                ("b", "x", at(2_000)),
                ("a", "x", at(3_000)),
                ("c", "x", at(5_000)),
                ("c", "x", at(4_000)),
            ],
        ),
        text(REDUCE.0, &[("a", "x", at(1_000)), ("a", "y", at(2_000))]),
        text(
            TUMBLING.0,
            &[
                ("a", "x", at(1_000)),
                ("a", "x", at(9_000)),
                ("a", "x", at(12_000)),
            ],
        ),
        text(HOPPING.0, &[("a", "x", at(7_000)), ("a", "x", at(12_000))]),
        text(
            PLAIN.0,
            &[
                ("d", "first", at(1_000)),
                ("e", "kept", at(2_000)),
                ("d", "delete", at(6_000)),
            ],
        ),
    ];
    for (topic, rows) in &input {
        write(&setup, topic, rows);
    }
    write(
        &setup,
        AGGREGATE.0,
        &[
            (b"a".to_vec(), Some(long(10)), at(1_000)),
            (b"a".to_vec(), Some(long(20)), at(4_000)),
        ],
    );
    let a = run_instance(&setup, &broker.addr, &dir, "a");
    let deadline = Instant::now() + Duration::from_secs(60);
    let golden: [(&str, Vec<Golden>); 6] = [
        (
            COUNT.2,
            vec![
                (b"a".to_vec(), Some(long(2)), at(3_000)),
                (b"b".to_vec(), Some(long(1)), at(2_000)),
                // Out of order: the newer timestamp stays.
                (b"c".to_vec(), Some(long(2)), at(5_000)),
            ],
        ),
        (
            REDUCE.2,
            vec![(b"a".to_vec(), Some(b"x,y".to_vec()), at(2_000))],
        ),
        (
            AGGREGATE.2,
            vec![(b"a".to_vec(), Some(json(2, 30)), at(4_000))],
        ),
        (
            TUMBLING.2,
            vec![
                (window_key("a", at(0)), Some(long(2)), at(9_000)),
                (window_key("a", at(10_000)), Some(long(1)), at(12_000)),
            ],
        ),
        (
            HOPPING.2,
            vec![
                (window_key("a", at(0)), Some(long(1)), at(7_000)),
                (window_key("a", at(5_000)), Some(long(2)), at(12_000)),
                (window_key("a", at(10_000)), Some(long(1)), at(12_000)),
            ],
        ),
        (
            PLAIN.2,
            vec![
                (b"d".to_vec(), None, at(6_000)),
                (b"e".to_vec(), Some(b"kept".to_vec()), at(2_000)),
            ],
        ),
    ];
    for (store, records) in &golden {
        expect_latest(&setup, &changelog(store), records, deadline);
    }
    stop_instance(&setup, "a", a);

    // Phase 2: records a Kafka Streams instance wrote, restored by an instance with no state.
    let written: [(&str, Vec<Golden>); 5] = [
        (
            COUNT.2,
            vec![
                (b"z".to_vec(), Some(long(41)), at(50_000)),
                (b"b".to_vec(), None, at(60_000)),
            ],
        ),
        (
            REDUCE.2,
            vec![(b"z".to_vec(), Some(b"k".to_vec()), at(50_000))],
        ),
        (
            AGGREGATE.2,
            vec![(b"z".to_vec(), Some(json(5, 100)), at(50_000))],
        ),
        (
            TUMBLING.2,
            vec![(window_key("z", at(0)), Some(long(7)), at(5_000))],
        ),
        (
            HOPPING.2,
            vec![(window_key("z", at(5_000)), Some(long(3)), at(9_000))],
        ),
    ];
    for (store, records) in &written {
        write(&setup, &changelog(store), records);
    }
    let more = [
        text(COUNT.0, &[("z", "x", at(100)), ("b", "x", at(100))]),
        text(REDUCE.0, &[("z", "m", at(100))]),
        text(TUMBLING.0, &[("z", "x", at(4_000))]),
        text(HOPPING.0, &[("z", "x", at(8_000))]),
    ];
    for (topic, rows) in &more {
        write(&setup, topic, rows);
    }
    write(
        &setup,
        AGGREGATE.0,
        &[(b"z".to_vec(), Some(long(1)), at(100))],
    );
    let b = run_instance(&setup, &broker.addr, &dir, "b");
    let deadline = Instant::now() + Duration::from_secs(60);
    let outputs: [(&str, Vec<Golden>); 5] = [
        (
            COUNT.1,
            vec![
                // 41 restored, plus one; stamped with the restored timestamp, the newer.
                (b"z".to_vec(), Some(long(42)), at(50_000)),
                // The tombstone deleted b's count of 1: counting starts again.
                (b"b".to_vec(), Some(long(1)), at(100)),
            ],
        ),
        (
            REDUCE.1,
            vec![(b"z".to_vec(), Some(b"k,m".to_vec()), at(50_000))],
        ),
        (
            AGGREGATE.1,
            vec![(b"z".to_vec(), Some(json(6, 101)), at(50_000))],
        ),
        (
            TUMBLING.1,
            vec![(windowed("z", at(0)), Some(long(8)), at(5_000))],
        ),
        (
            HOPPING.1,
            vec![
                (windowed("z", at(0)), Some(long(1)), at(8_000)),
                (windowed("z", at(5_000)), Some(long(4)), at(9_000)),
            ],
        ),
    ];
    for (topic, records) in &outputs {
        expect_latest(&setup, topic, records, deadline);
    }
    // And what b logged for them is Kafka's layout again.
    expect_latest(
        &setup,
        &changelog(COUNT.2),
        &[(b"z".to_vec(), Some(long(42)), at(50_000))],
        deadline,
    );
    stop_instance(&setup, "b", b);
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
