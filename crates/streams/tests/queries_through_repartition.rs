//! Read-your-writes on a store behind a repartition topic, on the real broker: word count
//! (lines split into words, grouped by word through a repartition topic, counted) runs as two
//! instances in this process. A line is written to the input, and the count of its word is
//! asked at once with `at_least` on the *input* partition and offset the write got: the answer
//! waits until the line's words went through the repartition topic into the store, so it
//! counts the line, every time, whichever instance is asked and wherever the word lives.

mod common;

use std::time::{Duration, Instant};

use baton_kafka::records::KeyValue;
use baton_protocol::TopicPartition;
use baton_streams::queries::{Queries, QueryFailure, QueryOptions, StoreQuery};
use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 4;
const APP: &str = "iq-through-repartition";
const INPUT: &str = "iq-lines";
const OUTPUT: &str = "iq-word-counts";
const STORE: &str = "counts";

/// The wordcount example's topology.
fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    builder
        .stream(INPUT, Consumed::with(Str, Str))
        .flat_map_values(|line: &String| {
            line.split(' ')
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .group_by(
            |_, word: &String| word.clone(),
            Grouped::with(Str, Str).named("words"),
        )
        .count(Materialized::named(STORE))
        .to_stream()
        .to(OUTPUT, Produced::with(Str, Long));
    builder.build().unwrap()
}

/// Writes `line` (no key) to input partition `p`; its offset.
fn produce(setup: &Setup, p: i32, line: &str) -> i64 {
    let record: KeyValue = (None, Some(Bytes::copy_from_slice(line.as_bytes())));
    setup.produce_to(INPUT, p, &[record])
}

#[test]
fn at_least_on_the_input_reads_a_count_behind_a_repartition_topic() {
    let (broker, dir, setup) = common::start("iq-repartition", &[INPUT], OUTPUT, PARTITIONS);
    let (qa, qb) = (Queries::new(), Queries::new());
    let handles = [
        StoreQuery::new(&qa, STORE, Str, Long),
        StoreQuery::new(&qb, STORE, Str, Long),
    ];
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str, q: &Queries| {
        let cfg = common::serving_config(&broker.addr, &dir, APP, name);
        let (q, shutdown) = (q.clone(), shutdown.clone());
        setup.rt.spawn(baton_runtime::instance::run_with_queries(
            cfg,
            topology(),
            shutdown,
            q,
        ))
    };
    let a = run("a", &qa);
    let b = run("b", &qb);

    // Words spread over the store's partitions; each written with another, on every input
    // partition in turn, and read back through both instances in turn.
    let words: Vec<String> = (0..8).map(|i| format!("word{i}")).collect();
    let mut counts = vec![0i64; words.len()];
    let (mut answered, mut forwarded, mut waited) = (0, 0, Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut round = 0usize;
    while answered < 48 {
        assert!(
            Instant::now() < deadline,
            "{answered} read-your-writes answered by the deadline"
        );
        let w = round % words.len();
        let p = (round % PARTITIONS as usize) as i32;
        let offset = produce(&setup, p, &format!("{} filler{round}", words[w]));
        let options = QueryOptions {
            at_least: Some((TopicPartition::new(INPUT, p), offset)),
            timeout: Duration::from_secs(20),
            ..QueryOptions::default()
        };
        let asked = Instant::now();
        let handle = &handles[round % 2];
        round += 1;
        match setup.rt.block_on(handle.get(&words[w], &options)) {
            Ok(answer) => {
                counts[w] += 1;
                assert_eq!(
                    answer.value,
                    Some(counts[w]),
                    "{}: the line written at {INPUT}:{p}:{offset} is counted ({answer:?})",
                    words[w]
                );
                answered += 1;
                forwarded += usize::from(answer.served.forwarded);
                waited = waited.max(asked.elapsed());
            }
            // Before both instances run and the group forms, a query may find no copy (the
            // line is counted all the same, and read with the next one).
            Err(QueryFailure::NotStarted | QueryFailure::Unavailable(_)) if answered == 0 => {
                counts[w] += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{}: {e}", words[w]),
        }
    }
    assert!(forwarded > 0, "some answers came from the other instance");

    // A topic that does not feed the store is refused, saying which do.
    let options = QueryOptions {
        at_least: Some((TopicPartition::new(OUTPUT, 0), 0)),
        ..QueryOptions::default()
    };
    match setup.rt.block_on(handles[0].get(&words[0], &options)) {
        Err(QueryFailure::Refused(e)) => {
            assert_eq!(e.status.as_u16(), 400, "{e}");
            assert!(e.to_string().contains(INPUT), "{e}");
        }
        other => panic!("at_least on the output: {other:?}"),
    }
    eprintln!(
        "read-your-writes through a repartition topic: {answered} answers, each counting its \
         line; {forwarded} forwarded; the slowest waited {} ms",
        waited.as_millis()
    );

    stop.send(true).unwrap();
    for (name, handle) in [("a", a), ("b", b)] {
        common::await_shutdown(&setup, name, handle);
    }
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
