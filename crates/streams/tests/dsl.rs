//! The typed DSL compiled to Baton's topology, run record by record over an in-memory store:
//! what each sub-topology writes, byte for byte as Kafka Streams writes it.

use std::collections::BTreeMap;

use baton_assignor::TaskId;
use std::time::Duration;

use baton_runtime::topology::{MemStores as Mem, Output, Stores, StreamRecord, Topology};
use baton_streams::serdes::{Integer, Json, Long, Serde, Str, TimeWindowed};
use baton_streams::{
    Branched, Consumed, Grouped, Materialized, Produced, StreamsBuilder, TimeWindows, Window,
    Windowed,
};

/// Runs `records` through sub-topology `sub`, all stamped 0; its outputs.
fn run(
    t: &Topology,
    sub: u32,
    stores: &mut Mem,
    records: &[(Vec<u8>, Vec<u8>)],
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let stamped: Vec<_> = records
        .iter()
        .map(|(k, v)| (k.clone(), v.clone(), 0))
        .collect();
    run_at(t, sub, stores, &stamped)
        .0
        .into_iter()
        .map(|r| (r.key.to_vec(), r.value.unwrap().to_vec()))
        .collect()
}

/// Runs timestamped `records` through sub-topology `sub` as one task does, stream time
/// advancing with them; its outputs and the late drops.
fn run_at(
    t: &Topology,
    sub: u32,
    stores: &mut Mem,
    records: &[(Vec<u8>, Vec<u8>, i64)],
) -> (Vec<StreamRecord>, u64) {
    let mut out = Output::default();
    let mut stream_time = -1;
    for (k, v, ts) in records {
        stream_time = stream_time.max(*ts);
        t.process(
            TaskId::new(sub, 0),
            StreamRecord::new(k.clone(), v.clone(), *ts),
            stream_time,
            stores,
            &mut out,
        )
        .unwrap();
    }
    (
        out.records.into_iter().map(|e| e.record).collect(),
        out.late,
    )
}

/// Runs `records` (stamped 0) through sub-topology `sub`: each output with its sink topic,
/// key and value as text.
fn run_to_sinks(t: &Topology, sub: u32, records: &[(&str, &str)]) -> Vec<(String, String, String)> {
    run_to_sinks_in(t, sub, &mut Mem::default(), records)
}

fn owned(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    v.iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

#[test]
fn split_sends_each_record_to_its_first_matching_branch_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let builder = StreamsBuilder::new("sp");
    let mut branches = builder
        .stream("in", Consumed::with(Str, Str))
        .peek(move |_, _| {
            counter.fetch_add(1, Ordering::Relaxed);
        })
        .split_named("route-")
        .branch(|_, v: &String| v.starts_with('a'), Branched::named("a"))
        .branch(|_, v: &String| v.len() > 3, Branched::generated())
        .default_branch(Branched::named("rest"));
    assert_eq!(
        branches.keys().collect::<Vec<_>>(),
        ["route-2", "route-a", "route-rest"]
    );
    branches
        .remove("route-a")
        .unwrap()
        .to("out-a", Produced::with(Str, Str));
    branches
        .remove("route-2")
        .unwrap()
        .map_values(|v: &String| v.to_uppercase())
        .to("out-long", Produced::with(Str, Str));
    branches
        .remove("route-rest")
        .unwrap()
        .to("out-rest", Produced::with(Str, Str));
    let t = builder.build().unwrap();
    assert_eq!(t.sinks_of(0), ["out-a", "out-long", "out-rest"]);
    let out = run_to_sinks(
        &t,
        0,
        &[("1", "apple"), ("2", "banana"), ("3", "kiwi"), ("4", "fig")],
    );
    assert_eq!(
        out,
        owned(&[
            ("out-a", "1", "apple"),
            ("out-long", "2", "BANANA"),
            ("out-long", "3", "KIWI"),
            ("out-rest", "4", "fig"),
        ])
    );
    // The steps before the split ran once per record, not once per branch.
    assert_eq!(seen.load(Ordering::Relaxed), 4);
    let described = builder_describe_split();
    assert!(
        described.contains(
            "Processor: route- (stores: [])
      --> route-a, route-0"
        ),
        "{described}"
    );
}

fn builder_describe_split() -> String {
    let builder = StreamsBuilder::new("sp");
    let mut b = builder
        .stream("in", Consumed::with(Str, Str))
        .split_named("route-")
        .branch(|_, v: &String| v.is_empty(), Branched::named("a"))
        .default_branch(Branched::generated());
    b.remove("route-a")
        .unwrap()
        .to("x", Produced::with(Str, Str));
    b.remove("route-0")
        .unwrap()
        .to("y", Produced::with(Str, Str));
    builder.describe()
}

#[test]
fn branches_merge_back_and_a_stream_of_two_topics_reads_both() {
    let builder = StreamsBuilder::new("mg");
    let mut parts = builder
        .stream_of(&["in", "more"], Consumed::with(Str, Str))
        .split()
        .branch(|_, w: &String| w.len() > 3, Branched::named("long"))
        .no_default_branch();
    let long = parts.remove("KSTREAM-BRANCH-0000000001long").unwrap();
    // A nested split, then both parts merged back and counted.
    let mut halves = long
        .split_named("half-")
        .branch(|k: &String, _| k.as_str() < "m", Branched::named("low"))
        .default_branch(Branched::named("high"));
    let low = halves
        .remove("half-low")
        .unwrap()
        .map_values(|w: &String| format!("low {w}"));
    let high = halves.remove("half-high").unwrap();
    low.merge(high).to("out", Produced::with(Str, Str));
    let described = builder.describe();
    let t = builder.build().unwrap();
    assert_eq!(t.sources_of(0), ["in", "more"]);
    let out = run_to_sinks(
        &t,
        0,
        &[("a", "tiny"), ("z", "large"), ("b", "no"), ("c", "words")],
    );
    assert_eq!(
        out,
        owned(&[
            ("out", "a", "low tiny"),
            ("out", "z", "large"),
            ("out", "c", "low words"),
        ])
    );
    assert!(described.contains("topics: [in, more]"), "{described}");
    assert!(
        // Kafka's numbers: each branch takes one (`BranchedKStreamImpl.createBranch`).
        described.contains("<-- KSTREAM-MAPVALUES-0000000005, half-high"),
        "{described}"
    );
    // A stream of another sub-topology that other steps read too (a split here) brings its
    // sub-topology along, as Kafka merges the node groups a merge connects.
    let builder = StreamsBuilder::new("mg");
    let a = builder.stream("a", Consumed::with(Str, Str));
    let mut parts = builder
        .stream("b", Consumed::with(Str, Str))
        .split_named("b-")
        .branch(|_, v: &String| v.is_empty(), Branched::named("empty"))
        .default_branch(Branched::named("rest"));
    a.merge(parts.remove("b-rest").unwrap())
        .to("out", Produced::with(Str, Str));
    let t = builder.build().unwrap();
    assert_eq!(t.sources_of(0), ["a", "b"], "{}", t.describe());
    let records = [
        ("a", "k", Some("x"), 1),
        ("b", "k", Some(""), 1),
        ("b", "k", Some("y"), 1),
    ];
    let out = feed_topics(&t, &mut Mem::default(), &records);
    let merged: Vec<&[u8]> = out
        .records
        .iter()
        .map(|e| e.record.value.as_deref().unwrap())
        .collect();
    assert_eq!(
        merged,
        [b"x".as_slice(), b"y"],
        "b's empty value took the other branch"
    );
}

#[test]
fn a_record_failing_in_a_branch_leaves_nothing_for_the_next_record() {
    let builder = StreamsBuilder::new("fb");
    let mut parts = builder
        .stream("in", Consumed::with(Str, Str))
        .split_named("p-")
        .branch(|_, v: &String| v.starts_with('a'), Branched::named("a"))
        .default_branch(Branched::named("b"));
    parts
        .remove("p-a")
        .unwrap()
        .peek(|_, v: &String| assert!(v != "a-boom", "boom"))
        .to("a", Produced::with(Str, Str));
    parts
        .remove("p-b")
        .unwrap()
        .to("b", Produced::with(Str, Str));
    let t = builder.build().unwrap();
    let (mut stores, mut out) = (Mem::default(), Output::default());
    let mut run = |k: &str, v: &str, out: &mut Output| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            t.process(
                TaskId::new(0, 0),
                StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), 0),
                0,
                &mut stores,
                out,
            )
            .unwrap()
        }))
        .is_ok()
    };
    assert!(run("1", "a-ok", &mut out));
    assert!(!run("2", "a-boom", &mut Output::default()));
    assert!(run("3", "b-ok", &mut out));
    assert!(run("4", "a-two", &mut out));
    let got: Vec<(u16, String)> = out
        .records
        .iter()
        .map(|e| {
            (
                e.sink,
                Str.deserialize(e.record.value.as_deref().unwrap()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![(0, "a-ok".into()), (1, "b-ok".into()), (0, "a-two".into())]
    );
}

#[test]
fn a_branch_counted_and_a_branch_written_share_the_sub_topology() {
    let builder = StreamsBuilder::new("bc");
    let mut parts = builder
        .stream("in", Consumed::with(Str, Str))
        .split_named("p-")
        .branch(|_, v: &String| v == "count", Branched::named("count"))
        .default_branch(Branched::named("pass"));
    parts
        .remove("p-count")
        .unwrap()
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("counted"))
        .to_stream()
        .map_values(|n: &i64| n.to_string())
        .to("counts", Produced::with(Str, Str));
    parts
        .remove("p-pass")
        .unwrap()
        .to("passed", Produced::with(Str, Str));
    let t = builder.build().unwrap();
    assert!(t.repartition_topics().is_empty());
    assert_eq!(t.stores_of(0), ["counted"]);
    let out = run_to_sinks(&t, 0, &[("k", "count"), ("k", "other"), ("k", "count")]);
    assert_eq!(
        out,
        owned(&[
            ("counts", "k", "1"),
            ("passed", "k", "other"),
            ("counts", "k", "2"),
        ])
    );
    assert!(t.sink_is_table(0, 0));
    assert!(!t.sink_is_table(0, 1));
}

/// A value as Kafka Streams' timestamped key-value stores hold it.
fn stamped(ts: i64, value: &[u8]) -> Vec<u8> {
    [&ts.to_be_bytes()[..], value].concat()
}

fn wordcount() -> Topology {
    let builder = StreamsBuilder::new("wc");
    builder
        .stream("lines", Consumed::with(Str, Str))
        .flat_map_values(|line: &String| {
            line.to_lowercase()
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .group_by(
            |_, w: &String| w.clone(),
            Grouped::with(Str, Str).named("words"),
        )
        .count(Materialized::named("counts"))
        .to_stream()
        .to("out", Produced::with(Str, Long));
    builder.build().unwrap()
}

#[test]
fn word_count_repartitions_by_word_and_writes_longs() {
    let t = wordcount();
    assert_eq!(t.repartition_topics(), vec![("wc-words-repartition", 0)]);
    assert!(!t.sink_is_table(0, 0), "words are not a table's updates");
    assert!(
        t.sink_is_table(1, 0),
        "counts are: the record cache applies"
    );
    let mut stores = Mem::default();
    let line = |s: &str| (Vec::new(), s.as_bytes().to_vec());
    let words = run(&t, 0, &mut stores, &[line("Hello hello"), line("world")]);
    let as_words: Vec<(String, String)> = words
        .iter()
        .map(|(k, v)| (Str.deserialize(k).unwrap(), Str.deserialize(v).unwrap()))
        .collect();
    assert_eq!(
        as_words,
        [("hello", "hello"), ("hello", "hello"), ("world", "world")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    assert!(stores.0.is_empty(), "sub-topology 0 keeps no state");
    let counts = run(&t, 1, &mut stores, &words);
    let as_counts: Vec<(String, i64)> = counts
        .iter()
        .map(|(k, v)| (Str.deserialize(k).unwrap(), Long.deserialize(v).unwrap()))
        .collect();
    assert_eq!(
        as_counts,
        vec![
            ("hello".into(), 1),
            ("hello".into(), 2),
            ("world".into(), 1)
        ]
    );
    assert_eq!(
        counts[1].1,
        2i64.to_be_bytes(),
        "a Long: 8 bytes big-endian"
    );
    assert_eq!(
        stores.0.get(&("counts".to_owned(), b"hello".to_vec())),
        Some(&stamped(0, &2i64.to_be_bytes())),
        "a timestamped key-value store's layout: timestamp, then the Long"
    );
}

#[test]
fn describe_shows_both_sub_topologies_and_the_repartition_topic() {
    let builder = StreamsBuilder::new("wc");
    builder
        .stream("lines", Consumed::with(Str, Str))
        .flat_map_values(|l: &String| vec![l.clone()])
        .group_by(
            |_, w: &String| w.clone(),
            Grouped::with(Str, Str).named("words"),
        )
        .count(Materialized::named("counts"))
        .to_stream()
        .to("out", Produced::with(Str, Long));
    let text = builder.describe();
    assert!(
        text.starts_with("Topologies:\n   Sub-topology: 0\n"),
        "{text}"
    );
    assert!(
        text.contains("Source: KSTREAM-SOURCE-0000000000 (topics: [lines])"),
        "{text}"
    );
    assert!(text.contains("(topic: wc-words-repartition)"), "{text}");
    assert!(text.contains("   Sub-topology: 1\n"), "{text}");
    assert!(text.contains("(stores: [counts])"), "{text}");
    assert_eq!(builder.build().unwrap().describe(), text);
}

#[test]
fn grouping_by_key_repartitions_only_after_a_key_change() {
    // No key change: one sub-topology, the store beside the source.
    let builder = StreamsBuilder::new("app");
    builder
        .stream("in", Consumed::with(Str, Integer))
        .filter(|_, v: &i32| *v > 0)
        .group_by_key(Grouped::with(Str, Integer))
        .reduce(|a, b| a + b, Materialized::named("sums"))
        .to_stream()
        .to("out", Produced::with(Str, Integer));
    let t = builder.build().unwrap();
    assert!(t.repartition_topics().is_empty());
    let mut stores = Mem::default();
    let rec = |k: &str, v: i32| (k.as_bytes().to_vec(), v.to_be_bytes().to_vec());
    let out = run(
        &t,
        0,
        &mut stores,
        &[rec("a", 2), rec("a", -1), rec("a", 5)],
    );
    let sums: Vec<i32> = out
        .iter()
        .map(|(_, v)| Integer.deserialize(v).unwrap())
        .collect();
    assert_eq!(sums, [2, 7]);

    // A key change first: a repartition topic named after the store.
    let builder = StreamsBuilder::new("app");
    builder
        .stream("in", Consumed::with(Str, Integer))
        .select_key(|k: &String, _| k.to_uppercase())
        .group_by_key(Grouped::with(Str, Integer))
        .count(Materialized::named("per-upper"))
        .to_stream()
        .to("out", Produced::with(Str, Long));
    let t = builder.build().unwrap();
    assert_eq!(
        t.repartition_topics(),
        vec![("app-per-upper-repartition", 0)]
    );
}

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Total {
    n: u32,
    sum: i64,
}

#[test]
fn aggregate_folds_into_a_json_value_and_map_changes_types() {
    let builder = StreamsBuilder::new("app");
    builder
        .stream("in", Consumed::with(Str, Long))
        .map(|k: &String, v: &i64| (k.clone(), *v * 10))
        .peek(|_, _| {})
        .group_by_key(Grouped::with(Str, Long).named("tens"))
        .aggregate(
            || Total { n: 0, sum: 0 },
            |_k, v, t| Total {
                n: t.n + 1,
                sum: t.sum + v,
            },
            Json::<Total>::new(),
            Materialized::named("totals"),
        )
        .to_stream()
        .map_values(|t: &Total| format!("{}/{}", t.sum, t.n))
        .to("out", Produced::with(Str, Str));
    let t = builder.build().unwrap();
    let mut stores = Mem::default();
    let rec = |v: i64| (b"k".to_vec(), v.to_be_bytes().to_vec());
    let keyed = run(&t, 0, &mut stores, &[rec(1), rec(2)]);
    let out = run(&t, 1, &mut stores, &keyed);
    let texts: Vec<String> = out
        .iter()
        .map(|(_, v)| Str.deserialize(v).unwrap())
        .collect();
    assert_eq!(texts, ["10/1", "30/2"]);
    assert_eq!(
        stores.0.get(&("totals".to_owned(), b"k".to_vec())),
        Some(&stamped(0, br#"{"n":2,"sum":30}"#))
    );
}

#[test]
fn a_stream_without_a_sink_builds_and_a_store_named_twice_is_refused() {
    let builder = StreamsBuilder::new("app");
    let _dangling = builder.stream("in", Consumed::with(Str, Str));
    // The stream's steps are kept, but nothing ends it: it still builds (a source with no
    // sink is allowed, as in Kafka Streams).
    assert!(builder.build().is_ok());
    let builder = StreamsBuilder::new("app");
    for topic in ["a", "b"] {
        builder
            .stream(topic, Consumed::with(Str, Str))
            .group_by_key(Grouped::with(Str, Str))
            .count(Materialized::named("same"))
            .to_stream()
            .to(&format!("{topic}-out"), Produced::with(Str, Long));
    }
    let e = builder.build().err().unwrap().to_string();
    assert!(e.contains("store \"same\" is already used"), "{e}");
}

fn windowed_views(windows: TimeWindows) -> Topology {
    let builder = StreamsBuilder::new("views");
    builder
        .stream("page-views", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(windows)
        .count(Materialized::named("per-minute"))
        .to_stream()
        .to(
            "out",
            Produced::with(TimeWindowed::new(Str, windows.size()), Long),
        );
    builder.build().unwrap()
}

#[test]
fn tumbling_windows_count_by_record_time_and_drop_what_comes_after_the_grace() {
    let minute = Duration::from_secs(60);
    let t = windowed_views(TimeWindows::of_size_and_grace(
        minute,
        Duration::from_secs(10),
    ));
    assert!(t.repartition_topics().is_empty());
    assert_eq!(
        t.changelog_retention_ms("per-minute"),
        Some(70_000 + 86_400_000),
        "size + grace, plus Kafka Streams' extra day"
    );
    let view = |user: &str, ts: i64| (user.as_bytes().to_vec(), b"/".to_vec(), ts);
    let mut stores = Mem::default();
    let (out, late) = run_at(
        &t,
        0,
        &mut stores,
        &[
            view("alice", 1_000),
            view("alice", 59_999),
            view("bob", 61_000),
            view("alice", 65_000),
            // Out of order, within the grace: stream time 65 s < 60 s + 10 s.
            view("alice", 30_000),
            view("bob", 71_000),
            // Stream time 71 s: the first minute closed at 70 s.
            view("alice", 2_000),
        ],
    );
    assert_eq!(late, 1);
    let serde = TimeWindowed::new(Str, minute);
    let got: Vec<(String, i64, i64, i64)> = out
        .iter()
        .map(|r| {
            let Windowed { key, window } = serde.deserialize(&r.key).unwrap();
            assert_eq!(window.end_ms, window.start_ms + 60_000);
            (
                key,
                window.start_ms,
                Long.deserialize(r.value.as_deref().unwrap()).unwrap(),
                r.timestamp,
            )
        })
        .collect();
    let want: Vec<(String, i64, i64, i64)> = [
        ("alice", 0, 1, 1_000),
        ("alice", 0, 2, 59_999),
        ("bob", 60_000, 1, 61_000),
        ("alice", 60_000, 1, 65_000),
        // The result keeps the newest timestamp folded in, as Kafka Streams stamps it.
        ("alice", 0, 3, 59_999),
        ("bob", 60_000, 2, 71_000),
    ]
    .iter()
    .map(|&(k, s, n, ts)| (k.to_owned(), s, n, ts))
    .collect();
    assert_eq!(got, want);
    // The window store's key: key, window start (8 bytes), sequence number 0 (4 bytes); its
    // value: timestamp, then the Long.
    let key = [
        b"alice".as_slice(),
        &0i64.to_be_bytes(),
        &0i32.to_be_bytes(),
    ]
    .concat();
    assert_eq!(
        stores.0.get(&("per-minute".to_owned(), key)),
        Some(&stamped(59_999, &3i64.to_be_bytes()))
    );
    let _ = Window {
        start_ms: 0,
        end_ms: 0,
    };
}

#[test]
fn hopping_windows_update_every_window_a_record_falls_in() {
    let t = windowed_views(
        TimeWindows::of_size_with_no_grace(Duration::from_millis(10))
            .advance_by(Duration::from_millis(5)),
    );
    let mut stores = Mem::default();
    let (out, late) = run_at(
        &t,
        0,
        &mut stores,
        &[
            (b"u".to_vec(), Vec::new(), 12),
            (b"u".to_vec(), Vec::new(), 8),
        ],
    );
    // 12 falls in [5, 15) and [10, 20); 8 in [0, 10), closed at stream time 12 (no grace),
    // and [5, 15), still open.
    let starts: Vec<i64> = out
        .iter()
        .map(|r| i64::from_be_bytes(r.key[1..].try_into().unwrap()))
        .collect();
    assert_eq!(starts, [5, 10, 5]);
    assert_eq!(late, 1, "one window of one record");
}

#[test]
fn windows_that_cannot_work_are_refused_when_built() {
    let builder = StreamsBuilder::new("app");
    builder
        .stream("in", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(
            TimeWindows::of_size_with_no_grace(Duration::from_secs(1))
                .advance_by(Duration::from_secs(2)),
        )
        .count(Materialized::named("w"));
    let e = builder.build().err().unwrap().to_string();
    assert!(
        e.contains("store \"w\": windows of 1000 ms advancing by 2000 ms"),
        "{e}"
    );
}

#[path = "../examples/enrich-orders/enrich.rs"]
mod enrich;

/// Puts a table record into its store as a task does with a record of a table's topic.
fn table_put(t: &Topology, sub: u32, topic: &str, stores: &mut Mem, key: &[u8], value: &[u8]) {
    let store = t.table_store(sub, topic).expect("a table topic");
    stores.put(store, key, value.to_vec());
}

#[test]
fn enrich_orders_rekeys_through_a_repartition_topic_and_left_joins_the_table() {
    use enrich::{Customer, EnrichedOrder, Order};
    let t = enrich::topology("shop", "orders", "customers", "enriched").unwrap();
    // Kafka's numbering: the table was read first, so its sub-topology (the join's) is 0 and
    // the orders' re-keying is 1.
    assert_eq!(
        t.repartition_topics(),
        vec![("shop-orders-by-customer-repartition", 1)]
    );
    // The table's topic is its changelog: no `shop-customers-changelog`.
    assert_eq!(t.changelog_topic("customers"), "customers");
    let mut partitions = BTreeMap::new();
    for topic in ["orders", "customers", "shop-orders-by-customer-repartition"] {
        partitions.insert(topic.to_owned(), 4);
    }
    let wire = t.wire(&partitions).unwrap();
    assert_eq!(
        wire.subtopologies[&0].source_topics,
        vec!["shop-orders-by-customer-repartition", "customers"]
    );
    assert_eq!(wire.subtopologies[&0].changelog_topics, vec!["customers"]);
    assert!(wire.subtopologies[&1].changelog_topics.is_empty());

    let json = |v: &dyn erased::Ser| v.bytes();
    let mut stores = Mem::default();
    let order = Order {
        customer: "c1".into(),
        item: "book".into(),
        quantity: 2,
    };
    let hop = run(
        &t,
        1,
        &mut stores,
        &[
            (b"o1".to_vec(), json(&order)),
            (
                b"o2".to_vec(),
                json(&Order {
                    customer: "c9".into(),
                    ..order.clone()
                }),
            ),
        ],
    );
    assert_eq!(hop[0].0, b"c1");
    assert_eq!(hop[1].0, b"c9");
    let alice = Customer {
        name: "Alice".into(),
        tier: "gold".into(),
    };
    table_put(&t, 0, "customers", &mut stores, b"c1", &json(&alice));
    let out = run(&t, 0, &mut stores, &hop);
    let enriched: Vec<(String, EnrichedOrder)> = out
        .iter()
        .map(|(k, v)| {
            (
                String::from_utf8(k.clone()).unwrap(),
                serde_json::from_slice(v).unwrap(),
            )
        })
        .collect();
    assert_eq!(enriched[0].0, "o1");
    assert_eq!(enriched[0].1.customer_name.as_deref(), Some("Alice"));
    assert_eq!(enriched[0].1.tier.as_deref(), Some("gold"));
    assert_eq!(enriched[1].0, "o2");
    assert_eq!(
        enriched[1].1.customer_name, None,
        "unknown customers are kept"
    );
}

#[test]
fn an_inner_join_drops_keys_the_table_lacks_and_refuses_a_table_joined_twice() {
    use baton_streams::Joined;
    let builder = StreamsBuilder::new("app");
    let names = builder.table(
        "names",
        Consumed::with(Str, Str),
        Materialized::named("names"),
    );
    builder
        .stream("visits", Consumed::with(Str, Str))
        .join(
            &names,
            |page: &String, name: &String| format!("{name}:{page}"),
            Joined::with(Str, Str),
        )
        .to("out", Produced::with(Str, Str));
    let t = builder.build().unwrap();
    let mut stores = Mem::default();
    table_put(&t, 0, "names", &mut stores, b"u1", b"Ann");
    let out = run(
        &t,
        0,
        &mut stores,
        &[
            (b"u1".to_vec(), b"home".to_vec()),
            (b"u2".to_vec(), b"faq".to_vec()),
        ],
    );
    assert_eq!(out, vec![(b"u1".to_vec(), b"Ann:home".to_vec())]);

    let builder = StreamsBuilder::new("app");
    let names = builder.table(
        "names",
        Consumed::with(Str, Str),
        Materialized::named("names"),
    );
    for input in ["a", "b"] {
        builder
            .stream(input, Consumed::with(Str, Str))
            .join(
                &names,
                |v: &String, _: &String| v.clone(),
                Joined::with(Str, Str),
            )
            .to("out", Produced::with(Str, Str));
    }
    let e = builder.build().err().expect("refused").to_string();
    assert!(e.contains("joined twice"), "{e}");
}

mod erased {
    pub trait Ser {
        fn bytes(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Ser for T {
        fn bytes(&self) -> Vec<u8> {
            serde_json::to_vec(self).unwrap()
        }
    }
}

/// Counts per key in its store and forwards each count; every 100 ms of stream time it
/// forwards a `tick` record stamped with the stream time.
struct CountAndTick(baton_streams::KeyValueStore<Str, Long>);

impl baton_streams::Processor<String, String, String, String> for CountAndTick {
    fn process(
        &self,
        r: baton_streams::Record<String, String>,
        ctx: &mut baton_streams::ProcessorContext<'_, String, String>,
    ) {
        if r.value == "reset" {
            ctx.delete(&self.0, &r.key);
            return;
        }
        let n = ctx.get(&self.0, &r.key).unwrap_or(0) + 1;
        ctx.put(&self.0, &r.key, &n);
        ctx.forward(r.key, n.to_string());
    }

    fn punctuate_every(&self) -> Option<Duration> {
        Some(Duration::from_millis(100))
    }

    fn punctuate(
        &self,
        stream_time: i64,
        ctx: &mut baton_streams::ProcessorContext<'_, String, String>,
    ) {
        ctx.forward("tick".into(), stream_time.to_string());
    }
}

#[test]
fn a_processor_keeps_its_store_forwards_and_punctuates_on_stream_time() {
    let builder = StreamsBuilder::new("pr");
    builder
        .stream("in", Consumed::with(Str, Str))
        .process(
            CountAndTick(baton_streams::KeyValueStore::new("seen", Str, Long)),
            &["seen"],
            Str,
            Str,
        )
        .to("out", Produced::with(Str, Str));
    let t = builder.build().unwrap();
    assert_eq!(t.stores_of(0), ["seen"]);
    assert_eq!(t.changelog_topic("seen"), "pr-seen-changelog");
    let mut stores = Mem::default();
    let at = |k: &str, ts| (k.as_bytes().to_vec(), b"v".to_vec(), ts);
    let (out, _) = run_at(
        &t,
        0,
        &mut stores,
        &[
            at("a", 1000),
            at("b", 1050),
            at("a", 1099),
            at("a", 1100),
            at("b", 1350),
        ],
    );
    let got: Vec<(String, String, i64)> = out
        .iter()
        .map(|r| {
            (
                Str.deserialize(&r.key).unwrap(),
                Str.deserialize(r.value.as_deref().unwrap()).unwrap(),
                r.timestamp,
            )
        })
        .collect();
    let want: Vec<(String, String, i64)> = [
        ("a", "1", 1000),
        ("tick", "1000", 1000),
        ("b", "1", 1050),
        ("a", "2", 1099),
        ("a", "3", 1100),
        ("tick", "1100", 1100),
        ("b", "2", 1350),
        ("tick", "1350", 1350),
    ]
    .iter()
    .map(|(k, v, ts)| (k.to_string(), v.to_string(), *ts))
    .collect();
    assert_eq!(got, want);
    // The store holds Kafka's plain key-value layout: the key's and the value's serde bytes.
    let a = stores.0.get(&("seen".to_owned(), b"a".to_vec())).cloned();
    assert_eq!(a, Some(3i64.to_be_bytes().to_vec()));
    // A delete, then the key counts from 1 again.
    let reset = |k: &str, ts| (k.as_bytes().to_vec(), b"reset".to_vec(), ts);
    let (out, _) = run_at(&t, 0, &mut stores, &[reset("a", 1360), at("a", 1370)]);
    let values: Vec<String> = out
        .iter()
        .map(|r| Str.deserialize(r.value.as_deref().unwrap()).unwrap())
        .collect();
    assert_eq!(values, ["1"]);
}

/// Every second of wall-clock time, forwards how many keys its store holds counts for; a
/// second processor's 3 s schedule runs on its own beside the first's 1 s.
struct Report(baton_streams::KeyValueStore<Str, Long>, u64);

impl baton_streams::Processor<String, String, String, String> for Report {
    fn process(
        &self,
        r: baton_streams::Record<String, String>,
        ctx: &mut baton_streams::ProcessorContext<'_, String, String>,
    ) {
        let n = ctx.get(&self.0, &r.key).unwrap_or(0) + 1;
        ctx.put(&self.0, &r.key, &n);
    }

    fn punctuate_wall_every(&self) -> Option<Duration> {
        Some(Duration::from_secs(self.1))
    }

    fn punctuate_wall(
        &self,
        now_ms: i64,
        ctx: &mut baton_streams::ProcessorContext<'_, String, String>,
    ) {
        let a = ctx.get(&self.0, &"a".to_owned()).unwrap_or(0);
        ctx.forward(format!("every {} s", self.1), format!("{a} at {now_ms}"));
    }
}

#[test]
fn wall_clock_punctuations_forward_to_the_sinks_on_their_own_schedules() {
    let builder = StreamsBuilder::new("wall");
    let mut parts = builder
        .stream("in", Consumed::with(Str, Str))
        .split_named("p-")
        .branch(|_, _| true, Branched::named("fast"))
        .no_default_branch();
    let fast = parts.remove("p-fast").unwrap();
    let mut parts = fast
        .split_named("q-")
        .branch(|_, v: &String| v == "slow", Branched::named("slow"))
        .default_branch(Branched::named("fast"));
    parts
        .remove("q-fast")
        .unwrap()
        .process(
            Report(baton_streams::KeyValueStore::new("fast", Str, Long), 1),
            &["fast"],
            Str,
            Str,
        )
        .to("out", Produced::with(Str, Str));
    parts
        .remove("q-slow")
        .unwrap()
        .process(
            Report(baton_streams::KeyValueStore::new("slow", Str, Long), 3),
            &["slow"],
            Str,
            Str,
        )
        .to("out", Produced::with(Str, Str));
    let t = builder.build().unwrap();
    assert_eq!(t.wall_clock_every(0), Some(Duration::from_secs(1)));
    let mut stores = Mem::default();
    let rec = |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec(), 5);
    run_at(
        &t,
        0,
        &mut stores,
        &[rec("a", "x"), rec("a", "y"), rec("a", "slow")],
    );
    let mut seen = Vec::new();
    // The runtime calls at the shortest interval (1 s), with a little jitter.
    for now in [1_000, 2_004, 3_001, 4_002, 5_000, 6_003] {
        let mut out = Output::default();
        t.punctuate(TaskId::new(0, 0), now, 5, &mut stores, &mut out)
            .unwrap();
        seen.extend(out.records.into_iter().map(|e| {
            (
                Str.deserialize(&e.record.key).unwrap(),
                Str.deserialize(e.record.value.as_deref().unwrap()).unwrap(),
                e.record.timestamp,
            )
        }));
    }
    let fast: Vec<i64> = seen
        .iter()
        .filter(|(k, _, _)| k == "every 1 s")
        .map(|(_, _, ts)| *ts)
        .collect();
    let slow: Vec<&str> = seen
        .iter()
        .filter(|(k, _, _)| k == "every 3 s")
        .map(|(_, v, _)| v.as_str())
        .collect();
    assert_eq!(fast, [1_000, 2_004, 3_001, 4_002, 5_000, 6_003]);
    assert_eq!(slow, ["1 at 1000", "1 at 4002"]);
    assert!(seen.contains(&("every 1 s".into(), "2 at 1000".into(), 1_000)));
}

#[test]
fn stores_carry_their_serdes_for_queries() {
    use baton_runtime::layout::Layout;
    use baton_runtime::query::format::{Format, StoreFormat};
    let builder = StreamsBuilder::new("q");
    builder
        .stream("lines", Consumed::with(Str, Str))
        .group_by(
            |_, w: &String| w.clone(),
            Grouped::with(Str, Str).named("words"),
        )
        .count(Materialized::named("counts"))
        .to_stream()
        .to("out", Produced::with(Str, Long));
    let t = builder.build().unwrap();
    let counts = t.store_info("counts").unwrap();
    assert_eq!(
        counts.format,
        StoreFormat {
            key: Format::String,
            value: Format::Long
        }
    );
    assert_eq!(
        counts.layout,
        Layout::Timestamped,
        "the DSL's stores are timestamped"
    );
    assert_eq!(t.store_info("nope"), None);
}

/// `repartition` writes the records with the given serdes to its own topic, keyed as the
/// step before keyed them, and the next sub-topology reads them back unchanged; a partition
/// count below one is refused at build, naming the topic.
#[test]
fn repartition_writes_its_topic_and_reads_it_back() {
    let builder = StreamsBuilder::new("rp");
    builder
        .stream("clicks", Consumed::with(Str, Str))
        .select_key(|_, user: &String| user.to_uppercase())
        .repartition(baton_streams::Repartitioned::with(Str, Str).named("by-user"))
        .map_values(|user: &String| format!("{user}!"))
        .to("out", Produced::with(Str, Str));
    let t = builder.build().unwrap();
    assert_eq!(t.repartition_topics(), vec![("rp-by-user-repartition", 0)]);
    assert_eq!(t.repartition_partitions("rp-by-user-repartition"), None);
    let mut stores = Mem::default();
    let written = run(&t, 0, &mut stores, &[(Vec::new(), b"ann".to_vec())]);
    assert_eq!(written, vec![(b"ANN".to_vec(), b"ann".to_vec())]);
    let read = run(&t, 1, &mut stores, &written);
    assert_eq!(read, vec![(b"ANN".to_vec(), b"ann!".to_vec())]);

    let builder = StreamsBuilder::new("rp");
    builder
        .stream("clicks", Consumed::with(Str, Str))
        .repartition(baton_streams::Repartitioned::with(Str, Str).with_partitions(0))
        .to("out", Produced::with(Str, Str));
    let Err(e) = builder.build() else {
        panic!("0 partitions is refused");
    };
    let e = e.to_string();
    assert!(
        e.contains("rp-KSTREAM-REPARTITION-0000000001-repartition") && e.contains("at least 1"),
        "{e}"
    );
}

/// Runs `records` (`None`: a delete) through sub-topology `sub`, stamped by position; each
/// output's key and value as text, `None` for a tombstone.
fn run_updates(
    t: &Topology,
    sub: u32,
    stores: &mut Mem,
    records: &[(&str, Option<&str>)],
) -> Vec<(String, Option<String>)> {
    let mut out = Output::default();
    for (i, (k, v)) in records.iter().enumerate() {
        let r = match v {
            Some(v) => StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), i as i64),
            None => StreamRecord::delete(k.as_bytes().to_vec(), i as i64),
        };
        t.process(TaskId::new(sub, 0), r, i as i64, stores, &mut out)
            .unwrap();
    }
    out.records
        .into_iter()
        .map(|e| {
            let key = Str.deserialize(&e.record.key).unwrap();
            let value = e.record.value.map(|v| {
                // The sinks of these tests write strings or longs.
                Str.deserialize(&v)
                    .ok()
                    .filter(|s| s.chars().all(|c| !c.is_control()))
                    .unwrap_or_else(|| Long.deserialize(&v).unwrap().to_string())
            });
            (key, value)
        })
        .collect()
}

#[test]
fn a_filtered_aggregation_writes_a_tombstone_for_each_update_it_rejects() {
    let b = StreamsBuilder::new("busy");
    b.stream("clicks", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("clicks"))
        .filter(|_, n: &i64| *n >= 2)
        .map_values(|n: &i64| format!("{n} clicks"))
        .to_stream()
        .to("busy-users", Produced::with(Str, Str));
    let t = b.build().unwrap();
    let got = run_updates(
        &t,
        0,
        &mut Mem::default(),
        &[
            ("a", Some("/")),
            ("a", Some("/")),
            ("b", Some("/")),
            ("a", Some("/")),
        ],
    );
    let want = [
        ("a", None),
        ("a", Some("2 clicks")),
        ("b", None),
        ("a", Some("3 clicks")),
    ];
    let want: Vec<(String, Option<String>)> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.map(str::to_owned)))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_table_read_from_a_topic_passes_its_deletes_through_filter_and_to_stream() {
    let b = StreamsBuilder::new("names");
    b.table("names", Consumed::with(Str, Str), Materialized::generated())
        .filter_not(|_, name: &String| name.starts_with('x'))
        .to_stream()
        .to("kept-names", Produced::with(Str, Str));
    let t = b.build().unwrap();
    let got = run_updates(
        &t,
        0,
        &mut Mem::default(),
        &[("1", Some("ann")), ("2", Some("xavier")), ("1", None)],
    );
    let want = vec![
        ("1".to_owned(), Some("ann".to_owned())),
        ("2".to_owned(), None),
        ("1".to_owned(), None),
    ];
    assert_eq!(
        got, want,
        "a rejected value and a read delete are both tombstones"
    );
}

#[test]
fn a_stream_made_a_table_keeps_each_keys_latest_value_in_its_store() {
    let b = StreamsBuilder::new("profiles");
    b.stream("updates", Consumed::with(Str, Str))
        .to_table(Str, Str, Materialized::named("profiles"))
        .map_values(|p: &String| p.len() as i64)
        .to_stream()
        .to("sizes", Produced::with(Str, Long));
    let t = b.build().unwrap();
    let mut stores = Mem::default();
    let got = run_updates(
        &t,
        0,
        &mut stores,
        &[("a", Some("x")), ("b", Some("yy")), ("a", Some("zzz"))],
    );
    let want = vec![
        ("a".to_owned(), Some("1".to_owned())),
        ("b".to_owned(), Some("2".to_owned())),
        ("a".to_owned(), Some("3".to_owned())),
    ];
    assert_eq!(got, want);
    // Kafka's timestamped layout: the record's timestamp (its position here), then the value.
    let a = stores.get("profiles", b"a").unwrap().unwrap();
    assert_eq!(a[..8], 2i64.to_be_bytes());
    assert_eq!(&a[8..], b"zzz");
    assert!(t.store_names().contains(&"profiles"));
}

/// Runs `records` (`None`: a delete) through sub-topology 0, then what it writes to its
/// repartition topic through sub-topology 1, as two tasks would; sub-topology 1's outputs.
fn run_regrouped(
    t: &Topology,
    stores: &mut Mem,
    records: &[(&str, Option<&str>)],
) -> Vec<(String, Option<String>)> {
    let mut first = Output::default();
    for (i, (k, v)) in records.iter().enumerate() {
        let r = match v {
            Some(v) => StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), i as i64),
            None => StreamRecord::delete(k.as_bytes().to_vec(), i as i64),
        };
        t.process(TaskId::new(0, 0), r, i as i64, stores, &mut first)
            .unwrap();
    }
    let mut out = Output::default();
    for e in first.records {
        let ts = e.record.timestamp;
        t.process(TaskId::new(1, 0), e.record, ts, stores, &mut out)
            .unwrap();
    }
    out.records
        .into_iter()
        .map(|e| {
            let key = Str.deserialize(&e.record.key).unwrap();
            (
                key,
                e.record
                    .value
                    .map(|v| String::from_utf8(v.to_vec()).unwrap()),
            )
        })
        .collect()
}

#[test]
fn a_grouped_table_subtracts_a_rows_old_value_and_adds_its_new_one() {
    let b = StreamsBuilder::new("cities");
    b.table(
        "user-cities",
        Consumed::with(Str, Str),
        Materialized::generated(),
    )
    .group_by(
        |u: &String, c: &String| (c.clone(), u.clone()),
        Grouped::with(Str, Str),
    )
    .count(Materialized::named("users-per-city"))
    .map_values(|n: &i64| n.to_string())
    .to_stream()
    .to("users-per-city", Produced::with(Str, Str));
    let t = b.build().unwrap();
    let got = run_regrouped(
        &t,
        &mut Mem::default(),
        &[
            ("u1", Some("A")),
            ("u2", Some("A")),
            ("u1", Some("B")),
            ("u2", None),
            ("u3", Some("B")),
            ("u3", Some("B")),
        ],
    );
    let want: Vec<(String, Option<String>)> = [
        ("A", "1"),
        ("A", "2"),
        // u1 moves: out of A first, then into B, as Kafka sends them.
        ("A", "1"),
        ("B", "1"),
        // u2 deleted.
        ("A", "0"),
        ("B", "2"),
        // The same city again: one record with both, subtracted and added.
        ("B", "2"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), Some(v.to_string())))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn a_grouped_table_aggregates_and_reduces_with_adder_and_subtractor() {
    let b = StreamsBuilder::new("members");
    let members = b.stream("joins", Consumed::with(Str, Str)).to_table(
        Str,
        Str,
        Materialized::named("member-team"),
    );
    members
        .group_by(
            |u: &String, team: &String| (team.clone(), u.clone()),
            Grouped::with(Str, Str),
        )
        .aggregate(
            String::new,
            |_, user: String, list: String| {
                let mut all: Vec<&str> = list.split(',').filter(|s| !s.is_empty()).collect();
                all.push(&user);
                all.sort_unstable();
                all.join(",")
            },
            |_, user: String, list: String| {
                list.split(',')
                    .filter(|s| !s.is_empty() && *s != user)
                    .collect::<Vec<_>>()
                    .join(",")
            },
            Str,
            Materialized::named("team-members"),
        )
        .to_stream()
        .to("team-members", Produced::with(Str, Str));
    let t = b.build().unwrap();
    let got = run_regrouped(
        &t,
        &mut Mem::default(),
        &[
            ("ann", Some("red")),
            ("bob", Some("red")),
            ("ann", Some("blue")),
        ],
    );
    let want: Vec<(String, Option<String>)> = [
        ("red", "ann"),
        ("red", "ann,bob"),
        ("red", "bob"),
        ("blue", "ann"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), Some(v.to_string())))
    .collect();
    assert_eq!(got, want);

    let b = StreamsBuilder::new("totals");
    b.stream("prices", Consumed::with(Str, Long))
        .to_table(Str, Long, Materialized::named("price"))
        .group_by(
            |_, p: &i64| ("all".to_owned(), *p),
            Grouped::with(Str, Long),
        )
        .reduce(|a, b| a + b, |a, b| a - b, Materialized::named("total"))
        .map_values(|n: &i64| n.to_string())
        .to_stream()
        .to("total", Produced::with(Str, Str));
    let t = b.build().unwrap();
    let mut stores = Mem::default();
    let mut first = Output::default();
    for (i, (k, p)) in [("x", 5i64), ("y", 7), ("x", 1)].into_iter().enumerate() {
        let r = StreamRecord::new(k.as_bytes().to_vec(), Long.serialize(&p), i as i64);
        t.process(TaskId::new(0, 0), r, i as i64, &mut stores, &mut first)
            .unwrap();
    }
    let mut out = Output::default();
    for e in first.records {
        t.process(TaskId::new(1, 0), e.record, 0, &mut stores, &mut out)
            .unwrap();
    }
    let totals: Vec<String> = out
        .records
        .iter()
        .map(|e| Str.deserialize(e.record.value.as_deref().unwrap()).unwrap())
        .collect();
    // x moves from 5 to 1 under one key: one change, 12 - 5 + 1.
    assert_eq!(totals, ["5", "12", "8"]);
}

#[test]
fn a_session_windowed_count_merges_sessions_and_writes_their_tombstones() {
    use baton_streams::serdes::SessionWindowed;
    use baton_streams::SessionWindows;
    let gap = Duration::from_millis(10);
    let b = StreamsBuilder::new("visits");
    b.stream("clicks", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(SessionWindows::of_inactivity_gap_with_no_grace(gap))
        .count(Materialized::named("clicks-per-visit"))
        .to_stream()
        .to("visits", Produced::with(SessionWindowed::new(Str), Long));
    let t = b.build().unwrap();
    assert_eq!(
        t.changelog_retention_ms("clicks-per-visit"),
        Some(10 + 86_400_000),
        "gap + grace, plus Kafka Streams' extra day"
    );
    let click = |user: &str, ts: i64| (user.as_bytes().to_vec(), b"/".to_vec(), ts);
    let (out, late) = run_at(
        &t,
        0,
        &mut Mem::default(),
        &[
            click("ann", 0),
            click("bob", 3),
            click("ann", 8),
            click("ann", 25),
            // Within 10 of 8 and of 25: bridges [0,8] and [25,25] into one session.
            click("ann", 17),
            // Stream time 100: ann's [0,25] closed at 35 (end + gap), so 35 is late.
            click("bob", 100),
            click("ann", 35),
        ],
    );
    assert_eq!(late, 1);
    let serde = SessionWindowed::new(Str);
    let got: Vec<(String, i64, i64, Option<i64>, i64)> = out
        .iter()
        .map(|r| {
            let Windowed { key, window } = serde.deserialize(&r.key).unwrap();
            let n = r.value.as_deref().map(|v| Long.deserialize(v).unwrap());
            (key, window.start_ms, window.end_ms, n, r.timestamp)
        })
        .collect();
    let want: Vec<(String, i64, i64, Option<i64>, i64)> = [
        ("ann", 0, 0, Some(1), 0),
        ("bob", 3, 3, Some(1), 3),
        ("ann", 0, 0, None, 0),
        ("ann", 0, 8, Some(2), 8),
        ("ann", 25, 25, Some(1), 25),
        ("ann", 0, 8, None, 8),
        ("ann", 25, 25, None, 25),
        ("ann", 0, 25, Some(4), 25),
        ("bob", 100, 100, Some(1), 100),
    ]
    .iter()
    .map(|&(k, s, e, n, ts)| (k.to_owned(), s, e, n, ts))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn streams_of_two_topics_merge_each_with_its_own_steps() {
    let b = StreamsBuilder::new("merged");
    let shouts = b
        .stream("shouts", Consumed::with(Str, Str))
        .map_values(|s: &String| s.to_uppercase());
    let whispers = b
        .stream("whispers", Consumed::with(Str, Str))
        .filter(|_, s: &String| s.len() > 2)
        .map_values(|s: &String| s.to_lowercase());
    shouts
        .merge(whispers)
        .map_values(|s: &String| format!("<{s}>"))
        .to("voices", Produced::with(Str, Str));
    let t = b.build().unwrap();
    assert_eq!(t.sources_of(0), ["shouts", "whispers"], "one sub-topology");
    let (mut stores, mut out) = (Mem::default(), Output::default());
    for (topic, k, v) in [
        ("shouts", "a", "hey"),
        ("whispers", "b", "PSST"),
        ("whispers", "c", "SH"),
        ("shouts", "d", "yo"),
    ] {
        let r = StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), 0);
        t.process_from(TaskId::new(0, 0), topic, r, 0, &mut stores, &mut out)
            .unwrap();
    }
    let got: Vec<(String, String)> = out
        .records
        .iter()
        .map(|e| {
            (
                Str.deserialize(&e.record.key).unwrap(),
                Str.deserialize(e.record.value.as_deref().unwrap()).unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [("a", "<HEY>"), ("b", "<psst>"), ("d", "<YO>")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_stream_stream_join_pairs_records_of_either_side_within_the_window() {
    use baton_streams::{JoinWindows, StreamJoined};
    let b = StreamsBuilder::new("pay");
    let orders = b.stream("orders", Consumed::with(Str, Str));
    let payments = b.stream("payments", Consumed::with(Str, Str));
    orders
        .join_stream(
            payments,
            |o: &String, p: &String| format!("{o}/{p}"),
            JoinWindows::of_time_difference_with_no_grace(Duration::from_millis(10)),
            StreamJoined::with(Str, Str, Str),
        )
        .to("paid", Produced::with(Str, Str));
    let t = b.build().unwrap();
    assert_eq!(t.sources_of(0), ["orders", "payments"]);
    assert_eq!(
        t.changelog_retention_ms("KSTREAM-JOINTHIS-0000000004-store"),
        Some(20 + 86_400_000),
        "before + after + grace, plus Kafka Streams' extra day"
    );
    let (mut stores, mut out, mut time) = (Mem::default(), Output::default(), 0);
    let input = [
        ("orders", "a", "o1", 0),
        ("payments", "a", "p1", 5),
        // 20 is 20 after o1: no pair.
        ("payments", "a", "p2", 20),
        ("orders", "b", "o2", 21),
        // Pairs with p2 (5 earlier) and p1 is 20 earlier: one pair.
        ("orders", "a", "o3", 25),
        // A second payment at the same time: both kept.
        ("payments", "a", "p3", 20),
    ];
    for (topic, k, v, ts) in input {
        time = time.max(ts);
        let r = StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), ts);
        t.process_from(TaskId::new(0, 0), topic, r, time, &mut stores, &mut out)
            .unwrap();
    }
    let got: Vec<(String, String, i64)> = out
        .records
        .iter()
        .map(|e| {
            (
                Str.deserialize(&e.record.key).unwrap(),
                Str.deserialize(e.record.value.as_deref().unwrap()).unwrap(),
                e.record.timestamp,
            )
        })
        .collect();
    let want: Vec<(String, String, i64)> =
        [("a", "o1/p1", 5), ("a", "o3/p2", 25), ("a", "o3/p3", 25)]
            .iter()
            .map(|(k, v, ts)| (k.to_string(), v.to_string(), *ts))
            .collect();
    assert_eq!(got, want);
}

#[test]
fn tables_join_on_either_sides_updates_and_deletes() {
    let (mut inner, mut left, mut outer) = (Vec::new(), Vec::new(), Vec::new());
    for (kind, got) in [(0, &mut inner), (1, &mut left), (2, &mut outer)] {
        let b = StreamsBuilder::new("profiles");
        let names = b.table(
            "names",
            Consumed::with(Str, Str),
            Materialized::named("names"),
        );
        let cities = b.table(
            "cities",
            Consumed::with(Str, Str),
            Materialized::named("cities"),
        );
        let or_unknown = |s: Option<&String>| s.map_or("?".to_owned(), String::clone);
        let joined = match kind {
            0 => names.join(cities, |n: &String, c: &String| format!("{n}@{c}")),
            1 => names.left_join(cities, move |n: &String, c: Option<&String>| {
                format!("{n}@{}", or_unknown(c))
            }),
            _ => names.outer_join(cities, move |n: Option<&String>, c: Option<&String>| {
                format!("{}@{}", or_unknown(n), or_unknown(c))
            }),
        };
        joined.to_stream().to("profiles", Produced::with(Str, Str));
        let t = b.build().unwrap();
        assert_eq!(t.sources_of(0), ["names", "cities"]);
        let (mut stores, mut out) = (Mem::default(), Output::default());
        let input = [
            ("names", "1", Some("ann"), 1),
            ("cities", "1", Some("oslo"), 2),
            ("cities", "2", Some("rome"), 3),
            ("names", "2", Some("bob"), 4),
            ("cities", "1", None, 5),
            ("names", "2", None, 6),
        ];
        for (topic, k, v, ts) in input {
            let r = match v {
                Some(v) => StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), ts),
                None => StreamRecord::delete(k.as_bytes().to_vec(), ts),
            };
            t.process_from(TaskId::new(0, 0), topic, r, ts, &mut stores, &mut out)
                .unwrap();
        }
        *got = out
            .records
            .iter()
            .map(|e| {
                let v = e
                    .record
                    .value
                    .as_deref()
                    .map(|v| Str.deserialize(v).unwrap());
                (Str.deserialize(&e.record.key).unwrap(), v)
            })
            .collect::<Vec<_>>();
    }
    let owned = |v: &[(&str, Option<&str>)]| -> Vec<(String, Option<String>)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_owned)))
            .collect()
    };
    assert_eq!(
        inner,
        owned(&[
            ("1", Some("ann@oslo")),
            ("2", Some("bob@rome")),
            ("1", None),
            ("2", None),
        ])
    );
    assert_eq!(
        left,
        owned(&[
            ("1", Some("ann@?")),
            ("1", Some("ann@oslo")),
            ("2", Some("bob@rome")),
            ("1", Some("ann@?")),
            ("2", None),
        ])
    );
    // Kafka's `KTableKTableOuterJoin`: every key of either side; a side's delete keeps the
    // other's row.
    assert_eq!(
        outer,
        owned(&[
            ("1", Some("ann@?")),
            ("1", Some("ann@oslo")),
            ("2", Some("?@rome")),
            ("2", Some("bob@rome")),
            ("1", Some("ann@?")),
            ("2", Some("?@rome")),
        ])
    );
}

#[test]
fn a_filtered_table_kept_in_a_store_holds_exactly_its_rows() {
    let b = StreamsBuilder::new("kept");
    b.table("names", Consumed::with(Str, Str), Materialized::generated())
        .filter_as(
            |_, n: &String| n.len() > 2,
            Materialized::named("long-names"),
        )
        .to_stream()
        .to("long-names", Produced::with(Str, Str));
    let t = b.build().unwrap();
    assert!(t.store_names().contains(&"long-names"));
    let mut stores = Mem::default();
    let got = run_updates(
        &t,
        0,
        &mut stores,
        &[
            ("1", Some("ann")),
            ("2", Some("bo")),
            ("3", Some("cyd")),
            ("3", None),
        ],
    );
    assert_eq!(
        got,
        vec![
            ("1".to_owned(), Some("ann".to_owned())),
            ("2".to_owned(), None),
            ("3".to_owned(), Some("cyd".to_owned())),
            ("3".to_owned(), None),
        ]
    );
    let kept: Vec<String> = stores
        .0
        .iter()
        .filter(|((s, _), _)| s == "long-names")
        .map(|((_, k), v)| {
            format!(
                "{}={}",
                String::from_utf8_lossy(k),
                String::from_utf8_lossy(&v[8..])
            )
        })
        .collect();
    assert_eq!(
        kept,
        ["1=ann"],
        "timestamped rows, the rejected and deleted ones gone"
    );
}

/// Which stream-stream join [`run_stream_join`] builds.
#[derive(Clone, Copy)]
enum StreamJoin {
    Left,
    Outer,
}

/// `topic1` joined with `topic2` (both `Str`) by `kind` within `windows`, Kafka's
/// `MockValueJoiner.TOSTRING_JOINER` ("left+right", "null" for a missing side); `input` as
/// `(topic, key, value, timestamp)` through one task; its outputs as `(key, value, ts)`.
fn run_stream_join(
    kind: StreamJoin,
    windows: baton_streams::JoinWindows,
    input: &[(&str, &str, &str, i64)],
) -> Vec<(String, String, i64)> {
    use baton_streams::StreamJoined;
    let b = StreamsBuilder::new("joins");
    let s1 = b.stream("topic1", Consumed::with(Str, Str));
    let s2 = b.stream("topic2", Consumed::with(Str, Str));
    let show = |v: Option<&String>| v.map_or("null".to_owned(), String::clone);
    let joined = match kind {
        StreamJoin::Left => s1.left_join_stream(
            s2,
            move |a: &String, o: Option<&String>| format!("{a}+{}", show(o)),
            windows,
            StreamJoined::with(Str, Str, Str),
        ),
        StreamJoin::Outer => s1.outer_join_stream(
            s2,
            move |a: Option<&String>, o: Option<&String>| format!("{}+{}", show(a), show(o)),
            windows,
            StreamJoined::with(Str, Str, Str),
        ),
    };
    joined.to("joined", Produced::with(Str, Str));
    let t = b.build().unwrap();
    let (mut stores, mut out, mut time) = (Mem::default(), Output::default(), -1);
    for &(topic, k, v, ts) in input {
        time = time.max(ts);
        let r = StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), ts);
        t.process_from(TaskId::new(0, 0), topic, r, time, &mut stores, &mut out)
            .unwrap();
    }
    out.records
        .iter()
        .map(|e| {
            (
                Str.deserialize(&e.record.key).unwrap(),
                Str.deserialize(e.record.value.as_deref().unwrap()).unwrap(),
                e.record.timestamp,
            )
        })
        .collect()
}

fn kvt(v: &[(&str, &str, i64)]) -> Vec<(String, String, i64)> {
    v.iter()
        .map(|(k, v, ts)| (k.to_string(), v.to_string(), *ts))
        .collect()
}

/// `KStreamKStreamLeftJoinTest.testLeftJoinDuplicates`: unmatched duplicates come out once
/// their window (100 ms, grace 10) has closed; matched ones only paired, never again.
#[test]
fn a_left_join_sends_unmatched_records_once_their_window_closes() {
    use baton_streams::JoinWindows;
    let windows = JoinWindows::of_time_difference_and_grace(
        Duration::from_millis(100),
        Duration::from_millis(10),
    );
    let got = run_stream_join(
        StreamJoin::Left,
        windows,
        &[
            ("topic1", "0", "A0", 0),
            ("topic1", "0", "A0-0", 0),
            ("topic2", "1", "a0", 111),
            ("topic2", "2", "dummy", 500),
            ("topic1", "2", "A2", 1000),
            ("topic1", "2", "A2-0", 1000),
            ("topic2", "2", "a2", 1001),
            ("topic2", "3", "a3", 315),
        ],
    );
    assert_eq!(
        got,
        kvt(&[
            ("0", "A0+null", 0),
            ("0", "A0-0+null", 0),
            ("2", "A2+a2", 1001),
            ("2", "A2-0+a2", 1001),
        ])
    );
}

/// `KStreamKStreamLeftJoinTest.testGracePeriod`: records of the other side after the window
/// ended do not join; the unmatched left records come out when stream time passes the grace.
#[test]
fn a_left_join_waits_out_the_grace_before_sending_unmatched_records() {
    use baton_streams::JoinWindows;
    let windows = JoinWindows::of_time_difference_and_grace(
        Duration::from_millis(100),
        Duration::from_millis(10),
    );
    let mut input = vec![("topic1", "0", "A0", 0), ("topic1", "1", "A1", 0)];
    for (k, v) in [("0", "a0"), ("1", "a1"), ("2", "a2"), ("3", "a3")] {
        input.push(("topic2", k, v, 101));
    }
    let before = run_stream_join(StreamJoin::Left, windows, &input);
    assert_eq!(before, kvt(&[]), "window ended, not closed");
    input.push(("topic2", "0", "dummy", 1201));
    let after = run_stream_join(StreamJoin::Left, windows, &input);
    assert_eq!(after, kvt(&[("0", "A0+null", 0), ("1", "A1+null", 0)]));
}

/// `KStreamKStreamOuterJoinTest.testOuterJoinDuplicates`: unmatched records of either side
/// come out in Kafka's order (time, then right before left, then key); paired duplicates
/// come out paired only.
#[test]
fn an_outer_join_sends_either_sides_unmatched_records_in_kafkas_order() {
    use baton_streams::JoinWindows;
    let windows = JoinWindows::of_time_difference_and_grace(
        Duration::from_millis(100),
        Duration::from_millis(10),
    );
    let got = run_stream_join(
        StreamJoin::Outer,
        windows,
        &[
            ("topic1", "0", "A0", 0),
            ("topic1", "0", "A0-0", 0),
            ("topic2", "1", "11", 0),
            ("topic2", "1", "12", 0),
            ("topic2", "1", "10", 111),
            ("topic2", "3", "100", 211),
            ("topic1", "2", "A2", 200),
            ("topic1", "2", "A2-0", 200),
            ("topic2", "2", "13", 201),
            ("topic2", "2", "14", 201),
            ("topic2", "3", "100", 1500),
        ],
    );
    assert_eq!(
        got,
        kvt(&[
            ("1", "null+11", 0),
            ("1", "null+12", 0),
            ("0", "A0+null", 0),
            ("0", "A0-0+null", 0),
            ("2", "A2+13", 201),
            ("2", "A2-0+13", 201),
            ("2", "A2+14", 201),
            ("2", "A2-0+14", 201),
            ("1", "null+10", 111),
            ("3", "null+100", 211),
        ])
    );
}

/// `KStreamKStreamOuterJoinTest.testEmitAllNonJoinedResultsForAsymmetricWindow`: with
/// `before` 5 and `after` 20, a right record's window closes 5 after it, a left one's 20.
#[test]
fn an_asymmetric_outer_join_closes_each_sides_window_on_its_own() {
    use baton_streams::JoinWindows;
    let windows = JoinWindows::of_time_difference_with_no_grace(Duration::from_millis(5))
        .after(Duration::from_millis(20));
    let input = [
        ("topic1", "0", "A0", 29),
        ("topic1", "1", "A1", 30),
        ("topic2", "2", "12", 31),
        ("topic2", "3", "13", 36),
        ("topic2", "4", "14", 37),
    ];
    assert_eq!(
        run_stream_join(StreamJoin::Outer, windows, &input),
        kvt(&[("2", "null+12", 31)])
    );
    let mut input = input.to_vec();
    input.push(("topic2", "5", "15", 50));
    assert_eq!(
        run_stream_join(StreamJoin::Outer, windows, &input),
        kvt(&[
            ("2", "null+12", 31),
            ("0", "A0+null", 29),
            ("3", "null+13", 36),
            ("4", "null+14", 37),
        ])
    );
}

/// A stream joining an aggregation's table reads the aggregate as it stands when each record
/// comes, in the aggregation's task: a count of clicks per user, purchases joined with it.
#[test]
fn a_stream_joins_an_aggregations_table_as_it_stands() {
    use baton_streams::Joined;
    for inner in [true, false] {
        let b = StreamsBuilder::new("shop");
        let clicks = b
            .stream("clicks", Consumed::with(Str, Str))
            .group_by_key(Grouped::with(Str, Str))
            .count(Materialized::named("clicks-per-user"));
        let purchases = b.stream("purchases", Consumed::with(Str, Str));
        let joined = if inner {
            purchases.join(
                &clicks,
                |p: &String, n: &i64| format!("{p} after {n}"),
                Joined::with(Str, Str),
            )
        } else {
            purchases.left_join(
                &clicks,
                |p: &String, n: Option<&i64>| format!("{p} after {}", n.copied().unwrap_or(0)),
                Joined::with(Str, Str),
            )
        };
        joined.to("purchases-with-clicks", Produced::with(Str, Str));
        let t = b.build().unwrap();
        assert_eq!(t.sources_of(0), ["clicks", "purchases"], "one sub-topology");
        let (mut stores, mut out) = (Mem::default(), Output::default());
        for (topic, k, v) in [
            ("clicks", "ann", "home"),
            ("purchases", "bob", "hat"),
            ("clicks", "ann", "shop"),
            ("purchases", "ann", "shoe"),
            ("clicks", "bob", "home"),
            ("purchases", "bob", "cap"),
        ] {
            let r = StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), 0);
            t.process_from(TaskId::new(0, 0), topic, r, 0, &mut stores, &mut out)
                .unwrap();
        }
        let sinks = t.sinks_of(0);
        let got: Vec<String> = out
            .records
            .iter()
            .filter(|e| sinks[e.sink as usize] == "purchases-with-clicks")
            .map(|e| {
                format!(
                    "{}: {}",
                    Str.deserialize(&e.record.key).unwrap(),
                    Str.deserialize(e.record.value.as_deref().unwrap()).unwrap()
                )
            })
            .collect();
        let mut want = vec!["ann: shoe after 2", "bob: cap after 1"];
        if !inner {
            want.insert(0, "bob: hat after 0");
        }
        assert_eq!(got, want, "inner: {inner}");
    }
}

/// A stream joining an aggregation's table after a key change goes through a repartition
/// topic read in the aggregation's sub-topology; one that came through a stateful step
/// cannot be moved there and is refused at build, naming why.
#[test]
fn a_rekeyed_stream_joins_an_aggregation_through_a_repartition_topic() {
    use baton_streams::Joined;
    let b = StreamsBuilder::new("shop");
    let clicks = b
        .stream("clicks", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("clicks-per-user"));
    b.stream("purchases", Consumed::with(Str, Str))
        .select_key(|_, user: &String| user.clone())
        .join(
            &clicks,
            |_: &String, n: &i64| *n,
            Joined::with(Str, Str).named("by-user"),
        )
        .to("clicks-at-purchase", Produced::with(Str, Long));
    let t = b.build().unwrap();
    assert_eq!(
        t.sources_of(0),
        ["clicks", "shop-by-user-repartition"],
        "the repartition topic is read beside the count"
    );
    let (mut stores, mut out) = (Mem::default(), Output::default());
    for (topic, k, v) in [
        ("clicks", "ann", "home"),
        ("clicks", "ann", "shop"),
        ("shop-by-user-repartition", "ann", "shoe"),
    ] {
        let r = StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), 0);
        t.process_from(TaskId::new(0, 0), topic, r, 0, &mut stores, &mut out)
            .unwrap();
    }
    let joined: Vec<i64> = out
        .records
        .iter()
        .map(|e| {
            Long.deserialize(e.record.value.as_deref().unwrap())
                .unwrap()
        })
        .collect();
    assert_eq!(joined, [2]);

    let b = StreamsBuilder::new("shop");
    let clicks = b
        .stream("clicks", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("clicks-per-user"));
    let views = b
        .stream("views", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("views-per-user"));
    views
        .to_stream()
        .join(&clicks, |v: &i64, c: &i64| v + c, Joined::with(Str, Long))
        .to("engagement", Produced::with(Str, Long));
    // The views' sub-topology joins the clicks' (Kafka merges the two node groups).
    let t = b.build().unwrap();
    assert_eq!(t.sources_of(0), ["clicks", "views"], "{}", t.describe());
    let records = [
        ("clicks", "u1", Some("x"), 1),
        ("views", "u1", Some("x"), 1),
        ("views", "u2", Some("x"), 1),
        ("views", "u1", Some("x"), 1),
    ];
    let out = feed_topics(&t, &mut Mem::default(), &records);
    let engagement: Vec<i64> = out
        .records
        .iter()
        .map(|e| {
            Long.deserialize(e.record.value.as_deref().unwrap())
                .unwrap()
        })
        .collect();
    assert_eq!(
        engagement,
        [2, 3],
        "views plus clicks of u1; u2 has no clicks"
    );
}

/// `(window key as Kafka prints it "[k@start/end]", count, timestamp)` of a windowed count's
/// outputs; `sessions`: keys are session keys.
fn windowed_counts(out: &[StreamRecord], sessions: bool) -> Vec<(String, Option<i64>, i64)> {
    use baton_streams::serdes::SessionWindowed;
    out.iter()
        .map(|r| {
            let Windowed { key, window } = if sessions {
                SessionWindowed::new(Str).deserialize(&r.key).unwrap()
            } else {
                TimeWindowed::new(Str, Duration::from_millis(2))
                    .deserialize(&r.key)
                    .unwrap()
            };
            let n = r.value.as_deref().map(|v| Long.deserialize(v).unwrap());
            let shown = format!("[{key}@{}/{}]", window.start_ms, window.end_ms);
            (shown, n, r.timestamp)
        })
        .collect()
}

fn counts_of(want: &[(&str, i64, i64)]) -> Vec<(String, Option<i64>, i64)> {
    want.iter()
        .map(|&(k, n, ts)| (k.to_owned(), Some(n), ts))
        .collect()
}

/// A windowed count of "input" by key, its final results only, written to "output".
fn final_counts(
    windows: impl baton_streams::WindowedBy<String, String, Str, Str, Windowed = impl FinalCount>,
) -> Topology {
    let b = StreamsBuilder::new("finals");
    let grouped = b
        .stream("input", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str));
    grouped.windowed_by(windows).final_count();
    b.build().unwrap()
}

trait FinalCount {
    fn final_count(self);
}

impl FinalCount for baton_streams::TimeWindowedKStream<String, String, Str, Str> {
    fn final_count(self) {
        use baton_streams::{BufferConfig, Suppressed};
        self.count(Materialized::named("counts"))
            .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
            .to_stream()
            .to(
                "output",
                Produced::with(TimeWindowed::new(Str, Duration::from_millis(2)), Long),
            );
    }
}

impl FinalCount for baton_streams::SessionWindowedKStream<String, String, Str, Str> {
    fn final_count(self) {
        use baton_streams::serdes::SessionWindowed;
        use baton_streams::{BufferConfig, Suppressed};
        self.count(Materialized::named("counts"))
            .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
            .to_stream()
            .to("output", Produced::with(SessionWindowed::new(Str), Long));
    }
}

fn k1(ts: &[i64]) -> Vec<(Vec<u8>, Vec<u8>, i64)> {
    ts.iter()
        .map(|&t| (b"k1".to_vec(), b"v1".to_vec(), t))
        .collect()
}

/// `SuppressScenarioTest.shouldSupportFinalResultsForTimeWindows` and
/// `...WithLargeJump`: each window's last count once, when stream time passes its end plus
/// the grace; a record for a closed window changes nothing.
#[test]
fn final_results_of_time_windows_are_kafkas() {
    let ms = Duration::from_millis;
    let t = final_counts(TimeWindows::of_size_and_grace(ms(2), ms(1)));
    let (out, late) = run_at(&t, 0, &mut Mem::default(), &k1(&[0, 1, 2, 1, 0, 5, 0]));
    assert_eq!(late, 1);
    let want = counts_of(&[("[k1@0/2]", 4, 1), ("[k1@2/4]", 1, 2)]);
    assert_eq!(windowed_counts(&out, false), want);

    let t = final_counts(TimeWindows::of_size_and_grace(ms(2), ms(2)));
    let (out, _) = run_at(
        &t,
        0,
        &mut Mem::default(),
        &k1(&[0, 1, 2, 0, 3, 0, 4, 0, 30]),
    );
    let want = counts_of(&[("[k1@0/2]", 4, 1), ("[k1@2/4]", 2, 3), ("[k1@4/6]", 1, 4)]);
    assert_eq!(windowed_counts(&out, false), want);
}

/// `SuppressScenarioTest.shouldSupportFinalResultsForSessionWindows`: a session's last count
/// once it closes (end plus gap plus grace); the deletes of merged sessions are not sent.
#[test]
fn final_results_of_sessions_are_kafkas() {
    let t = final_counts(
        baton_streams::SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_millis(5)),
    );
    let mut records = k1(&[0, 5, 1]);
    records.push((b"k2".to_vec(), b"v1".to_vec(), 11));
    records.extend(k1(&[5, 30]));
    let (out, _) = run_at(&t, 0, &mut Mem::default(), &records);
    let want = counts_of(&[("[k1@0/5]", 3, 5), ("[k2@11/11]", 1, 11)]);
    assert_eq!(windowed_counts(&out, true), want);
}

/// A table of "input" regrouped by value and counted (two sub-topologies), suppressed as
/// `suppressed` says; each input's (key, value, timestamp) run through sub-topology 0, then
/// what it wrote through sub-topology 1, as two tasks would: sub-topology 1's outputs per input.
fn regrouped_and_suppressed(
    suppressed: baton_streams::Suppressed,
    inputs: &[(&str, &str, i64)],
) -> Vec<Vec<(String, i64, i64)>> {
    let b = StreamsBuilder::new("suppressed");
    b.table("input", Consumed::with(Str, Str), Materialized::generated())
        .group_by(
            |k: &String, v: &String| (v.clone(), k.clone()),
            Grouped::with(Str, Str),
        )
        .count(Materialized::generated())
        .suppress(suppressed)
        .to_stream()
        .to("output-suppressed", Produced::with(Str, Long));
    let t = b.build().unwrap();
    let mut stores = Mem::default();
    let (mut time0, mut time1) = (-1, -1);
    let mut per_input = Vec::new();
    for (k, v, ts) in inputs {
        let mut first = Output::default();
        time0 = time0.max(*ts);
        let r = StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), *ts);
        t.process(TaskId::new(0, 0), r, time0, &mut stores, &mut first)
            .unwrap();
        let mut out = Output::default();
        for e in first.records {
            time1 = time1.max(e.record.timestamp);
            t.process(TaskId::new(1, 0), e.record, time1, &mut stores, &mut out)
                .unwrap();
        }
        per_input.push(
            out.records
                .iter()
                .map(|e| {
                    let key = Str.deserialize(&e.record.key).unwrap();
                    let n = Long
                        .deserialize(e.record.value.as_deref().unwrap())
                        .unwrap();
                    (key, n, e.record.timestamp)
                })
                .collect(),
        );
    }
    per_input
}

fn owned_counts(v: &[(&str, i64, i64)]) -> Vec<(String, i64, i64)> {
    v.iter().map(|&(k, n, ts)| (k.to_owned(), n, ts)).collect()
}

/// `SuppressScenarioTest.shouldSuppressIntermediateEventsWithTimeLimit`: each key's latest
/// count once stream time passes its first held update's time plus the limit.
#[test]
fn a_time_limit_sends_each_keys_latest_update_as_kafkas() {
    use baton_streams::{BufferConfig, Suppressed};
    let s = Suppressed::until_time_limit(Duration::from_millis(2), BufferConfig::unbounded());
    let out = regrouped_and_suppressed(
        s,
        &[
            ("k1", "v1", 0),
            ("k1", "v2", 1),
            ("k2", "v1", 2),
            ("tick", "tick", 3),
            ("tick", "tock", 4),
        ],
    );
    let out: Vec<_> = out.into_iter().collect();
    assert_eq!(out[..3].concat(), owned_counts(&[("v1", 1, 2)]));
    assert_eq!(out[3], owned_counts(&[("v2", 1, 1)]));
    assert_eq!(out[4], vec![], "tick is held from time 3 until 5");
}

/// `SuppressScenarioTest.shouldSuppressIntermediateEventsWithRecordLimit`: a buffer of one key
/// sends its oldest early.
#[test]
fn a_record_limit_sends_the_oldest_early_as_kafkas() {
    use baton_streams::{BufferConfig, Suppressed};
    let forever = Duration::from_millis(i64::MAX as u64);
    let s =
        Suppressed::until_time_limit(forever, BufferConfig::max_records(1).emit_early_when_full());
    let out = regrouped_and_suppressed(
        s,
        &[
            ("k1", "v1", 0),
            ("k1", "v2", 1),
            ("k2", "v1", 2),
            ("x", "x", 3),
        ],
    );
    assert_eq!(
        out[..3].concat(),
        owned_counts(&[("v1", 0, 1), ("v2", 1, 1)])
    );
    assert_eq!(out[3], owned_counts(&[("v1", 1, 2)]));
}

/// Final results need windows: a plain table's are refused at build.
#[test]
fn until_window_closes_refuses_a_table_without_windows() {
    use baton_streams::{BufferConfig, Suppressed};
    let b = StreamsBuilder::new("refused");
    b.stream("input", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::generated())
        .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
        .to_stream()
        .to("output", Produced::with(Str, Long));
    let err = b.build().err().expect("refused").to_string();
    assert!(
        err.contains("window close time is only defined for windowed computations"),
        "{err}"
    );
}

/// A windowed table through a filter keeps its windows' close: its final results are the
/// filter's, a window the filter rejects at its close sending nothing.
#[test]
fn final_results_follow_a_filter_of_the_windowed_table() {
    use baton_streams::{BufferConfig, Suppressed};
    let ms = Duration::from_millis;
    let b = StreamsBuilder::new("busy-windows");
    b.stream("input", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(TimeWindows::of_size_and_grace(ms(2), ms(1)))
        .count(Materialized::named("counts"))
        .filter(|_, n: &i64| *n > 1)
        .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
        .to_stream()
        .to(
            "output",
            Produced::with(TimeWindowed::new(Str, ms(2)), Long),
        );
    let t = b.build().unwrap();
    let (out, _) = run_at(&t, 0, &mut Mem::default(), &k1(&[0, 1, 2, 1, 0, 5, 0]));
    assert_eq!(
        windowed_counts(&out, false),
        counts_of(&[("[k1@0/2]", 4, 1)])
    );
}

/// A stream joins a global table by a key mapped from each record, inner or left, in its own
/// sub-topology (the global table's number taken, no task of its own); the row is read as the
/// global store holds it.
#[test]
fn a_stream_joins_a_global_table_by_a_mapped_key() {
    use baton_streams::Joined;
    for inner in [true, false] {
        let b = StreamsBuilder::new("priced");
        let products = b.global_table(
            "products",
            Consumed::with(Str, Long),
            Materialized::named("prices"),
        );
        let orders = b.stream("orders", Consumed::with(Str, Str));
        let product_of = |_: &String, line: &String| line.split(' ').next().unwrap().to_owned();
        let priced = if inner {
            orders.join_global(
                &products,
                product_of,
                |line: &String, price: &i64| format!("{line} at {price}"),
                Joined::with(Str, Str),
            )
        } else {
            orders.left_join_global(
                &products,
                product_of,
                |line: &String, price: Option<&i64>| format!("{line} at {price:?}"),
                Joined::with(Str, Str),
            )
        };
        priced.to("priced", Produced::with(Str, Str));
        let t = b.build().unwrap();
        assert_eq!(t.globals()[0].subtopology, 0);
        assert_eq!(t.sources_of(1), ["orders"]);
        let mut stores = Mem::default();
        stores.put("prices", b"apple", Long.serialize(&3));
        let got = run_to_sinks_in(&t, 1, &mut stores, &[("o1", "apple x2"), ("o2", "pear x1")]);
        let want: Vec<(String, String, String)> = if inner {
            owned(&[("priced", "o1", "apple x2 at 3")])
        } else {
            owned(&[
                ("priced", "o1", "apple x2 at Some(3)"),
                ("priced", "o2", "pear x1 at None"),
            ])
        };
        assert_eq!(got, want);
    }
}

/// As [`run_to_sinks`], over `stores`.
fn run_to_sinks_in(
    t: &Topology,
    sub: u32,
    stores: &mut Mem,
    records: &[(&str, &str)],
) -> Vec<(String, String, String)> {
    let mut out = Output::default();
    for (k, v) in records {
        let r = StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), 0);
        t.process(TaskId::new(sub, 0), r, 0, stores, &mut out)
            .unwrap();
    }
    let sinks = t.sinks_of(sub);
    out.records
        .into_iter()
        .map(|e| {
            (
                sinks[e.sink as usize].to_owned(),
                Str.deserialize(&e.record.key).unwrap(),
                Str.deserialize(e.record.value.as_deref().unwrap()).unwrap(),
            )
        })
        .collect()
}

/// `windowed_by(SlidingWindows)`: Kafka's sliding-window count, its windows keyed as time
/// windows of the difference's size, named as a time-windowed count, and suppressed to each
/// window's final count.
#[test]
fn a_sliding_window_count_is_kafkas_and_suppresses_to_final_counts() {
    use baton_streams::{BufferConfig, SlidingWindows, Suppressed};
    let ms = Duration::from_millis;
    let build = |suppress: bool| {
        let b = StreamsBuilder::new("sliding");
        let counts = b
            .stream("input", Consumed::with(Str, Str))
            .group_by_key(Grouped::with(Str, Str))
            .windowed_by(SlidingWindows::of_time_difference_and_grace(ms(10), ms(5)))
            .count(Materialized::generated());
        let counts = match suppress {
            true => counts.suppress(Suppressed::until_window_closes(BufferConfig::unbounded())),
            false => counts,
        };
        counts.to_stream().to(
            "output",
            Produced::with(TimeWindowed::new(Str, ms(10)), Long),
        );
        b
    };
    assert!(build(false)
        .describe()
        .contains("Processor: KSTREAM-AGGREGATE-0000000002 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000001])"));
    let t = build(false).build().unwrap();
    assert_eq!(
        t.changelog_retention_ms("KSTREAM-AGGREGATE-STATE-STORE-0000000001"),
        Some(2 * 10 + 5 + 86_400_000)
    );
    let input = k1(&[10, 10, 14, 15, 20, 22, 30]);
    let (out, _) = run_at(&t, 0, &mut Mem::default(), &input);
    // Kafka's testAggregateSmallInput windows, counted: the last count of each.
    let mut last = BTreeMap::new();
    for (k, n, _) in windowed_counts_of(&out, 10) {
        last.insert(k, n);
    }
    let want: BTreeMap<String, Option<i64>> = [
        ("[k1@0/10]", 2),
        ("[k1@4/14]", 3),
        ("[k1@5/15]", 4),
        ("[k1@10/20]", 5),
        ("[k1@11/21]", 3),
        ("[k1@12/22]", 4),
        ("[k1@15/25]", 3),
        ("[k1@16/26]", 2),
        ("[k1@20/30]", 3),
        ("[k1@21/31]", 2),
        ("[k1@23/33]", 1),
    ]
    .iter()
    .map(|(k, n)| ((*k).to_owned(), Some(*n)))
    .collect();
    assert_eq!(last, want);
    // Final counts: a window leaves the buffer once its end is at most stream time (30) less
    // the grace: up to [15, 25], as Kafka's suppress lets it (its end counts as closed there,
    // though the sliding window still takes a record at 25).
    let t = build(true).build().unwrap();
    let (out, _) = run_at(&t, 0, &mut Mem::default(), &input);
    let finals: Vec<_> = windowed_counts_of(&out, 10)
        .into_iter()
        .map(|(k, n, _)| (k, n.unwrap()))
        .collect();
    let want: Vec<(String, i64)> = [
        ("[k1@0/10]", 2),
        ("[k1@4/14]", 3),
        ("[k1@5/15]", 4),
        ("[k1@10/20]", 5),
        ("[k1@11/21]", 3),
        ("[k1@12/22]", 4),
        ("[k1@15/25]", 3),
    ]
    .iter()
    .map(|(k, n)| ((*k).to_owned(), *n))
    .collect();
    assert_eq!(finals, want);
}

/// As [`windowed_counts`], for time windows of `size` milliseconds.
fn windowed_counts_of(out: &[StreamRecord], size: u64) -> Vec<(String, Option<i64>, i64)> {
    out.iter()
        .map(|r| {
            let Windowed { key, window } = TimeWindowed::new(Str, Duration::from_millis(size))
                .deserialize(&r.key)
                .unwrap();
            let n = r.value.as_deref().map(|v| Long.deserialize(v).unwrap());
            (
                format!("[{key}@{}/{}]", window.start_ms, window.end_ms),
                n,
                r.timestamp,
            )
        })
        .collect()
}

/// A count joined with a table read from a topic, either way round: the table is read in the
/// count's sub-topology (its deletes too), and an update of either side joins the other's row.
#[test]
fn an_aggregation_joins_a_table_read_from_a_topic() {
    for count_left in [true, false] {
        let b = StreamsBuilder::new("named-clicks");
        let names = b.table(
            "names",
            Consumed::with(Str, Str),
            Materialized::named("names"),
        );
        let counts = b
            .stream("clicks", Consumed::with(Str, Str))
            .group_by_key(Grouped::with(Str, Str))
            .count(Materialized::named("clicks"));
        let joined = if count_left {
            counts.join(names, |n: &i64, name: &String| format!("{name}:{n}"))
        } else {
            names.join(counts, |name: &String, n: &i64| format!("{name}:{n}"))
        };
        joined.to_stream().to("named", Produced::with(Str, Str));
        let t = b.build().unwrap();
        assert_eq!(t.sources_of(0), ["clicks", "names"], "one sub-topology");
        let described = b_describe_has_join(&t);
        assert!(described, "{}", t.describe());
        let (mut stores, mut out) = (Mem::default(), Output::default());
        let mut feed = |topic: &str, k: &str, v: Option<&str>, ts: i64| {
            let r = match v {
                Some(v) => StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), ts),
                None => StreamRecord::delete(k.as_bytes().to_vec(), ts),
            };
            t.process_from(TaskId::new(0, 0), topic, r, ts, &mut stores, &mut out)
                .unwrap();
        };
        feed("clicks", "u1", Some("/a"), 1);
        feed("names", "u1", Some("ann"), 2);
        feed("clicks", "u1", Some("/b"), 3);
        feed("names", "u2", Some("bob"), 4);
        feed("names", "u1", None, 5);
        let got: Vec<(String, Option<String>)> = out
            .records
            .iter()
            .map(|e| {
                let v = e
                    .record
                    .value
                    .as_deref()
                    .map(|v| Str.deserialize(v).unwrap());
                (Str.deserialize(&e.record.key).unwrap(), v)
            })
            .collect();
        // Kafka's inner join: an update whose key the other side lacks gives nothing; a
        // delete of a joined key deletes it.
        let want: Vec<(String, Option<String>)> = vec![
            ("u1".into(), Some("ann:1".into())),
            ("u1".into(), Some("ann:2".into())),
            ("u1".into(), None),
        ];
        assert_eq!(got, want, "count on the left: {count_left}");
    }
}

fn b_describe_has_join(t: &Topology) -> bool {
    let d = t.describe();
    d.contains("KTABLE-MERGE-") && d.contains("KTABLE-JOINTHIS-") && d.contains("KTABLE-JOINOTHER-")
}

/// Orders and payments both keyed anew by customer, then joined: each side goes through its
/// repartition topic into the join's sub-topology, and every order meets the payments of its
/// customer within the window.
#[test]
fn a_join_of_rekeyed_streams_reads_both_repartition_topics() {
    use baton_streams::{JoinWindows, StreamJoined};
    let b = StreamsBuilder::new("paid");
    let customer = |_: &String, v: &String| v.split(':').next().unwrap().to_owned();
    let orders = b
        .stream("orders", Consumed::with(Str, Str))
        .select_key(customer);
    let payments = b
        .stream("payments", Consumed::with(Str, Str))
        .select_key(customer);
    orders
        .join_stream(
            payments,
            |o: &String, p: &String| format!("{o}+{p}"),
            JoinWindows::of_time_difference_with_no_grace(Duration::from_millis(100)),
            StreamJoined::with(Str, Str, Str),
        )
        .to("paid", Produced::with(Str, Str));
    let t = b.build().unwrap();
    assert_eq!(t.sources_of(2).len(), 2, "{}", t.describe());
    let mut stores = Mem::default();
    let mut joined = Vec::new();
    let inputs = [
        (0, "o1", "ann:book", 10),
        (1, "p1", "ann:5", 20),
        (1, "p2", "bob:7", 30),
        (0, "o2", "bob:pen", 40),
        (0, "o3", "ann:cup", 500),
    ];
    let mut stream_time = -1;
    for (sub, k, v, ts) in inputs {
        let mut first = Output::default();
        let r = StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), ts);
        t.process(TaskId::new(sub, 0), r, ts, &mut stores, &mut first)
            .unwrap();
        let sinks = t.sinks_of(sub);
        let mut out = Output::default();
        for e in first.records {
            stream_time = stream_time.max(e.record.timestamp);
            let topic = &sinks[e.sink as usize];
            t.process_from(
                TaskId::new(2, 0),
                topic,
                e.record,
                stream_time,
                &mut stores,
                &mut out,
            )
            .unwrap();
        }
        for e in out.records {
            let k = Str.deserialize(&e.record.key).unwrap();
            joined.push((
                k,
                Str.deserialize(e.record.value.as_deref().unwrap()).unwrap(),
            ));
        }
    }
    let want: Vec<(String, String)> = vec![
        ("ann".into(), "ann:book+ann:5".into()),
        ("bob".into(), "bob:pen+bob:7".into()),
    ];
    assert_eq!(joined, want);
}

/// A table-table join kept in a named store (`join_as`): the merge lists the store, which
/// holds each joined row (timestamped) and loses a key the join deletes.
#[test]
fn a_joined_table_is_kept_in_its_named_store() {
    let b = StreamsBuilder::new("profiles");
    let names = b.table(
        "names",
        Consumed::with(Str, Str),
        Materialized::named("names"),
    );
    let cities = b.table(
        "cities",
        Consumed::with(Str, Str),
        Materialized::named("cities"),
    );
    names
        .join_as(
            cities,
            |n: &String, c: &String| format!("{n} in {c}"),
            Str,
            Materialized::named("profiles"),
        )
        .to_stream()
        .to("out", Produced::with(Str, Str));
    assert!(
        b.describe().contains("(stores: [profiles])"),
        "{}",
        b.describe()
    );
    let t = b.build().unwrap();
    assert!(t.store_names().contains(&"profiles"));
    let mut stores = Mem::default();
    let mut out = Output::default();
    let mut feed = |topic: &str, k: &str, v: Option<&str>| {
        let r = match v {
            Some(v) => StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), 1),
            None => StreamRecord::delete(k.as_bytes().to_vec(), 1),
        };
        t.process_from(TaskId::new(0, 0), topic, r, 1, &mut stores, &mut out)
            .unwrap();
    };
    feed("names", "u1", Some("ann"));
    feed("cities", "u1", Some("oslo"));
    feed("names", "u2", Some("bob"));
    feed("cities", "u2", Some("rome"));
    feed("cities", "u2", None);
    let row = stores.get("profiles", b"u1").unwrap().unwrap();
    assert_eq!(
        &row[8..],
        b"ann in oslo",
        "timestamped: 8 bytes, then the value"
    );
    assert_eq!(stores.get("profiles", b"u2").unwrap(), None);
}

/// Counts each key's records per 10 ms window in a window store, forwarding the key's counts
/// over the last three windows.
struct Recent(baton_streams::WindowStore<Str, Long>);

impl baton_streams::Processor<String, String, String, String> for Recent {
    fn process(
        &self,
        r: baton_streams::Record<String, String>,
        ctx: &mut baton_streams::ProcessorContext<'_, String, String>,
    ) {
        let start = r.timestamp - r.timestamp % 10;
        let n = ctx
            .fetch_windows(&self.0, &r.key, start, start)
            .first()
            .map_or(0, |(_, n)| *n);
        ctx.put_window(&self.0, &r.key, &(n + 1), start);
        let recent = ctx.fetch_windows(&self.0, &r.key, start - 20, start);
        let shown: Vec<String> = recent.iter().map(|(s, n)| format!("{s}:{n}")).collect();
        ctx.forward(r.key, shown.join(","));
    }
}

/// A window store in `process`: values by key and window start, in Kafka's window store key
/// layout, its changelog kept for the retention plus a day.
#[test]
fn a_processor_keeps_values_per_window_in_a_window_store() {
    use baton_streams::WindowStore;
    let b = StreamsBuilder::new("recent");
    let store = WindowStore::new("per-window", Str, Long, Duration::from_millis(60));
    b.add_window_store(&store);
    b.stream("events", Consumed::with(Str, Str))
        .process(Recent(store), &["per-window"], Str, Str)
        .to("recent", Produced::with(Str, Str));
    let t = b.build().unwrap();
    assert_eq!(
        t.changelog_retention_ms("per-window"),
        Some(60 + 86_400_000)
    );
    let mut stores = Mem::default();
    let input: Vec<(Vec<u8>, Vec<u8>, i64)> = [("a", 1), ("a", 5), ("b", 7), ("a", 12), ("a", 31)]
        .iter()
        .map(|(k, ts)| (k.as_bytes().to_vec(), b"x".to_vec(), *ts))
        .collect();
    let (out, _) = run_at(&t, 0, &mut stores, &input);
    let got: Vec<String> = out
        .iter()
        .map(|r| Str.deserialize(r.value.as_deref().unwrap()).unwrap())
        .collect();
    assert_eq!(got, ["0:1", "0:2", "0:1", "0:2,10:1", "10:1,30:1"]);
    let mut key = b"a".to_vec();
    key.extend_from_slice(&10i64.to_be_bytes());
    key.extend_from_slice(&0i32.to_be_bytes());
    assert_eq!(
        stores.get("per-window", &key).unwrap(),
        Some(Long.serialize(&1))
    );
}

/// Two aggregations of streams of two topics joined: their sub-topologies become one (as
/// Kafka merges the node groups a join connects), reading both topics, and an update of
/// either count joins the other's.
#[test]
fn two_aggregations_of_two_topics_join_in_one_sub_topology() {
    let b = StreamsBuilder::new("activity");
    let count = |topic: &str, store: &str| {
        b.stream(topic, Consumed::with(Str, Str))
            .group_by_key(Grouped::with(Str, Str))
            .count(Materialized::named(store))
    };
    let clicks = count("clicks", "clicks");
    let buys = count("buys", "buys");
    clicks
        .outer_join(buys, |c: Option<&i64>, b: Option<&i64>| {
            format!("{}/{}", c.copied().unwrap_or(0), b.copied().unwrap_or(0))
        })
        .to_stream()
        .to("activity", Produced::with(Str, Str));
    let t = b.build().unwrap();
    let d = t.describe();
    assert_eq!(t.sources_of(0), ["clicks", "buys"], "{d}");
    assert!(!d.contains("Sub-topology: 1"), "{d}");
    let records = [
        ("clicks", "u1", Some("x"), 1),
        ("buys", "u1", Some("x"), 2),
        ("clicks", "u1", Some("x"), 3),
        ("buys", "u2", Some("x"), 4),
    ];
    let out = feed_topics(&t, &mut Mem::default(), &records);
    let got: Vec<(String, String)> = out
        .records
        .iter()
        .map(|e| {
            (
                Str.deserialize(&e.record.key).unwrap(),
                Str.deserialize(e.record.value.as_deref().unwrap()).unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [("u1", "1/0"), ("u1", "1/1"), ("u1", "2/1"), ("u2", "0/1")]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(got, want);
}

/// A stream merged with (or joined with) a stream past an aggregation of another topic: the
/// aggregation's sub-topology comes along, one sub-topology reading both topics.
#[test]
fn merging_a_stream_past_an_aggregation_brings_its_sub_topology() {
    use baton_streams::{JoinWindows, StreamJoined};
    let counted = |b: &StreamsBuilder| {
        b.stream("clicks", Consumed::with(Str, Str))
            .group_by_key(Grouped::with(Str, Str))
            .count(Materialized::named("clicks"))
            .to_stream()
            .map_values(|n: &i64| format!("clicks={n}"))
    };
    let b = StreamsBuilder::new("merged");
    b.stream("notes", Consumed::with(Str, Str))
        .merge(counted(&b))
        .to("feed", Produced::with(Str, Str));
    let t = b.build().unwrap();
    assert_eq!(t.sources_of(0), ["notes", "clicks"], "{}", t.describe());
    let records = [
        ("clicks", "u1", Some("/"), 1),
        ("notes", "u1", Some("hi"), 1),
        ("clicks", "u1", Some("/"), 1),
    ];
    let out = feed_topics(&t, &mut Mem::default(), &records);
    let got: Vec<String> = out
        .records
        .iter()
        .map(|e| Str.deserialize(e.record.value.as_deref().unwrap()).unwrap())
        .collect();
    assert_eq!(got, ["clicks=1", "hi", "clicks=2"]);

    let b = StreamsBuilder::new("joined");
    b.stream("notes", Consumed::with(Str, Str))
        .join_stream(
            counted(&b),
            |n: &String, c: &String| format!("{n} {c}"),
            JoinWindows::of_time_difference_with_no_grace(Duration::from_millis(10)),
            StreamJoined::with(Str, Str, Str),
        )
        .to("noted", Produced::with(Str, Str));
    let t = b.build().unwrap();
    assert_eq!(t.sources_of(0), ["notes", "clicks"], "{}", t.describe());
}

/// Runs `(topic, key, value or None for a delete, timestamp)` records through task 0_0, each
/// as a record of its topic (stream time its timestamp); what came out.
fn feed_topics(
    t: &Topology,
    stores: &mut Mem,
    records: &[(&str, &str, Option<&str>, i64)],
) -> Output {
    let mut out = Output::default();
    for (topic, k, v, ts) in records {
        let r = match v {
            Some(v) => StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), *ts),
            None => StreamRecord::delete(k.as_bytes().to_vec(), *ts),
        };
        t.process_from(TaskId::new(0, 0), topic, r, *ts, stores, &mut out)
            .unwrap();
    }
    out
}

/// Runs `(topic, key, value or None, timestamp)` records through the whole application in
/// one place, as its tasks of partition 0 would, each record to the end before the next: it
/// goes to the sub-topology that reads its topic, and what a sink writes to a topic the
/// application reads goes on there in turn. The records written to the other topics, with
/// their topic, in order.
fn run_app(
    t: &Topology,
    stores: &mut Mem,
    records: &[(&str, &str, Option<&str>, i64)],
) -> Vec<(String, String, Option<String>)> {
    // Sub-topologies past the last have no sources.
    let reader = |topic: &str| (0..64).find(|&s| t.sources_of(s).iter().any(|x| x == topic));
    let mut written = Vec::new();
    for (topic, k, v, ts) in records {
        let r = match v {
            Some(v) => StreamRecord::new(k.as_bytes().to_vec(), v.as_bytes().to_vec(), *ts),
            None => StreamRecord::delete(k.as_bytes().to_vec(), *ts),
        };
        let mut queue = std::collections::VecDeque::from([((*topic).to_owned(), r)]);
        while let Some((topic, r)) = queue.pop_front() {
            let Some(sub) = reader(&topic) else {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                written.push((topic, text(&r.key), r.value.as_deref().map(text)));
                continue;
            };
            let mut out = Output::default();
            let ts = r.timestamp;
            t.process_from(TaskId::new(sub, 0), &topic, r, ts, stores, &mut out)
                .unwrap();
            let sinks = t.sinks_of(sub);
            for e in out.records {
                assert!(
                    e.record.partition.is_none_or(|p| p == 0),
                    "only partition 0 asked"
                );
                queue.push_back((sinks[e.sink as usize].to_owned(), e.record));
            }
        }
    }
    written
}

/// Kafka's `KTableKTableForeignKeyJoinIntegrationTest` shapes: orders `"<product>|<n>"` join
/// their product's name through the subscription and response topics, on updates of either
/// side, a foreign key that changes, and deletes; the left join keeps rows without a match.
#[test]
fn a_foreign_key_join_follows_both_tables_through_its_topics() {
    // `kept`: the orders are a stream made a table (kept in a store, not a source table).
    let build = |left: bool, kept: bool| {
        let b = StreamsBuilder::new("fk");
        let orders = match kept {
            false => b.table(
                "orders",
                Consumed::with(Str, Str),
                Materialized::named("orders"),
            ),
            true => b.stream("orders", Consumed::with(Str, Str)).to_table(
                Str,
                Str,
                Materialized::named("orders"),
            ),
        };
        let products = b.table(
            "products",
            Consumed::with(Str, Str),
            Materialized::named("products"),
        );
        let fk = |o: &String| {
            o.split_once('|')
                .map(|(p, _)| p.to_owned())
                .filter(|p| !p.is_empty())
        };
        let joined = match left {
            false => orders
                .join_on_foreign_key(products, fk, |o: &String, p: &String| format!("{o} {p}")),
            true => {
                orders.left_join_on_foreign_key(products, fk, |o: &String, p: Option<&String>| {
                    format!("{o} {}", p.map_or("?", String::as_str))
                })
            }
        };
        joined.to_stream().to("out", Produced::with(Str, Str));
        b.build().unwrap()
    };
    let t = build(false, false);
    let mut stores = Mem::default();
    let out = |v: &[(&str, Option<&str>)]| -> Vec<(String, String, Option<String>)> {
        v.iter()
            .map(|(k, v)| ("out".to_owned(), (*k).to_owned(), v.map(str::to_owned)))
            .collect()
    };
    let got = run_app(
        &t,
        &mut stores,
        &[
            ("products", "p1", Some("apple"), 1),
            ("orders", "o1", Some("p1|2"), 2),
            ("orders", "o2", Some("p2|1"), 3),
            ("products", "p2", Some("pear"), 4),
            ("products", "p1", Some("green apple"), 5),
            ("orders", "o1", Some("p2|3"), 6),
            ("orders", "o2", None, 7),
            ("products", "p2", None, 8),
            ("orders", "o3", Some("|5"), 9),
        ],
    );
    assert_eq!(
        got,
        out(&[
            ("o1", Some("p1|2 apple")),
            ("o2", Some("p2|1 pear")),
            ("o1", Some("p1|2 green apple")),
            ("o1", Some("p2|3 pear")),
            ("o2", None),
            ("o1", None),
        ])
    );
    // Baton writes Kafka's topics and keeps the subscriptions in Kafka's store.
    let topics: Vec<&str> = t.repartition_topics().into_iter().map(|(t, _)| t).collect();
    assert_eq!(
        topics,
        [
            "fk-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000004-topic",
            "fk-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000012-topic"
        ]
    );
    let subs = "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000008";
    let kept: Vec<&[u8]> = stores
        .0
        .keys()
        .filter(|(s, _)| s == subs)
        .map(|(_, k)| k.as_slice())
        .collect();
    assert_eq!(
        kept,
        [b"\0\0\0\x02p2o1".as_slice()],
        "o1 subscribes to p2; o2 left"
    );

    let t = build(true, false);
    let got = run_app(
        &t,
        &mut Mem::default(),
        &[
            ("orders", "o1", Some("p1|2"), 1),
            ("orders", "o2", Some("|1"), 2),
            ("products", "p1", Some("apple"), 3),
            ("products", "p1", None, 4),
            ("orders", "o1", None, 5),
        ],
    );
    assert_eq!(
        got,
        out(&[
            ("o1", Some("p1|2 ?")),
            ("o2", Some("|1 ?")),
            ("o1", Some("p1|2 apple")),
            ("o1", Some("p1|2 ?")),
            ("o1", None),
            ("o1", None),
        ])
    );
}

/// A foreign-key join of a stream made a table, named and kept: the same joins as of a table
/// read from a topic.
#[test]
fn a_foreign_key_join_of_a_kept_table_follows_it() {
    let b = StreamsBuilder::new("fk");
    let orders = b.stream("orders", Consumed::with(Str, Str)).to_table(
        Str,
        Str,
        Materialized::named("orders"),
    );
    let products = b.table(
        "products",
        Consumed::with(Str, Str),
        Materialized::named("products"),
    );
    orders
        .join_on_foreign_key_as(
            products,
            |o: &String| o.split_once('|').map(|(p, _)| p.to_owned()),
            |o: &String, p: &String| format!("{o} {p}"),
            baton_streams::TableJoined::named("op"),
            Str,
            Materialized::named("named-orders"),
        )
        .to_stream()
        .to("out", Produced::with(Str, Str));
    let t = b.build().unwrap();
    let mut stores = Mem::default();
    let got = run_app(
        &t,
        &mut stores,
        &[
            ("products", "p1", Some("apple"), 1),
            ("orders", "o1", Some("p1|2"), 2),
            ("orders", "o1", Some("p2|2"), 3),
            ("products", "p2", Some("pear"), 4),
        ],
    );
    let want: Vec<(String, String, Option<String>)> =
        // p2 has no row when o1 moves to it: o1 joins nothing until it comes.
        [("o1", Some("p1|2 apple")), ("o1", None), ("o1", Some("p2|2 pear"))]
            .iter()
            .map(|(k, v)| ("out".to_owned(), (*k).to_owned(), v.map(str::to_owned)))
            .collect();
    assert_eq!(got, want);
    // Named: the subscriptions are kept in `op-subscription-store`.
    assert!(
        t.store_names().contains(&"op-subscription-store"),
        "{:?}",
        t.store_names()
    );
    // The result is kept in its store, timestamped (the answer's time, 4).
    let kept = stores.get("named-orders", b"o1").unwrap().unwrap();
    assert_eq!(kept, [&4i64.to_be_bytes()[..], b"p2|2 pear"].concat());
}

/// A foreign-key join needs both tables' rows: a table that cannot be kept (its values have no
/// serde) is refused, saying so.
#[test]
fn a_foreign_key_join_of_a_table_not_kept_is_refused() {
    let b = StreamsBuilder::new("fk");
    // A table's values mapped without a serde: nothing to keep them with.
    let orders = b
        .table(
            "orders",
            Consumed::with(Str, Str),
            Materialized::named("orders"),
        )
        .map_values(|o: &String| o.to_uppercase());
    let products = b.table(
        "products",
        Consumed::with(Str, Str),
        Materialized::named("products"),
    );
    orders
        .join_on_foreign_key(
            products,
            |o: &String| Some(o.clone()),
            |o: &String, p: &String| format!("{o}{p}"),
        )
        .to_stream()
        .to("out", Produced::with(Str, Str));
    let err = b.build().err().expect("refused").to_string();
    assert!(err.contains("both tables must be kept in stores"), "{err}");
}

/// A record without a value in a stream's topic is Kafka's null value: `to_table` deletes
/// its key, a sink writes it as a tombstone through the steps that keep keys, and the steps
/// that need a value (a count, a `map`) pass over it.
#[test]
fn a_streams_records_without_a_value_delete_in_to_table_and_pass_as_tombstones() {
    let b = StreamsBuilder::new("nulls");
    b.stream("in", Consumed::with(Str, Str))
        .to_table(Str, Str, Materialized::named("latest"))
        .to_stream()
        .to("tables", Produced::with(Str, Str));
    b.stream("in2", Consumed::with(Str, Str))
        .filter(|_, v: &String| !v.is_empty())
        .map_values(|v: &String| v.to_uppercase())
        .to("passed", Produced::with(Str, Str));
    b.stream("in3", Consumed::with(Str, Str))
        .map(|k: &String, v: &String| (k.clone(), v.clone()))
        .to("mapped", Produced::with(Str, Str));
    b.stream("in4", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("counts"))
        .to_stream()
        .to("counted", Produced::with(Str, Long));
    let t = b.build().unwrap();
    let mut stores = Mem::default();
    let mut records = Vec::new();
    for topic in ["in", "in2", "in3", "in4"] {
        records.extend([(topic, "k", Some("v"), 1), (topic, "k", None, 2)]);
    }
    let got = run_app(&t, &mut stores, &records);
    let counted = |n: i64| Some(String::from_utf8_lossy(&n.to_be_bytes()).into_owned());
    let want: Vec<(String, String, Option<String>)> = [
        ("tables", Some("v".to_owned())),
        ("tables", None),
        ("passed", Some("V".to_owned())),
        ("passed", None),
        ("mapped", Some("v".to_owned())),
        ("counted", counted(1)),
    ]
    .into_iter()
    .map(|(t, v)| (t.to_owned(), "k".to_owned(), v))
    .collect();
    assert_eq!(got, want);
    assert_eq!(stores.get("latest", b"k").unwrap(), None, "the key deleted");
}

/// A stream made a table without a store name, then regrouped: a row that changes is taken
/// out of its old group, as Kafka's `toTable()` is kept in a store of the name it takes
/// (`KSTREAM-TOTABLE-STATE-STORE-<n>`) when a grouping or a join needs its old values.
#[test]
fn an_unnamed_to_table_is_kept_when_a_grouping_needs_its_old_values() {
    let b = StreamsBuilder::new("cities");
    b.stream("user-cities", Consumed::with(Str, Str))
        .to_table(Str, Str, Materialized::generated())
        .group_by(
            |_, city: &String| (city.clone(), 1i64),
            Grouped::with(Str, Long),
        )
        .count(Materialized::named("users-per-city"))
        .to_stream()
        .to("users-per-city", Produced::with(Str, Long));
    let t = b.build().unwrap();
    assert!(
        t.store_names()
            .contains(&"KSTREAM-TOTABLE-STATE-STORE-0000000002"),
        "{:?}",
        t.store_names()
    );
    let mut stores = Mem::default();
    run_app(
        &t,
        &mut stores,
        &[
            ("user-cities", "ann", Some("oslo"), 1),
            ("user-cities", "bob", Some("oslo"), 2),
            ("user-cities", "ann", Some("rome"), 3),
        ],
    );
    let mut count = |city: &str| {
        let v = stores.get("users-per-city", city.as_bytes()).unwrap();
        v.map(|v| i64::from_be_bytes(v[v.len() - 8..].try_into().unwrap()))
    };
    assert_eq!((count("oslo"), count("rome")), (Some(1), Some(1)));
}
