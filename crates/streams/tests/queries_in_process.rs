//! Interactive queries from Rust, on the real broker: two instances of a typed count run in
//! this process, each with its own `Queries` handle and `application.server`. Every key's
//! count is read typed through one handle (some answered there, some forwarded to the other);
//! every partition is paged through the other; a write is read back at once with `at_least`;
//! a missing store is refused, and a handle answers nothing before its instance runs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use baton_kafka::records::KeyValue;
use baton_protocol::TopicPartition;
use baton_runtime::partitioner::partition_for;
use baton_streams::queries::{Queries, QueryFailure, QueryOptions, StoreQuery};
use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 4;
const APP: &str = "iq-in-process";
const INPUT: &str = "iq-events";
const OUTPUT: &str = "iq-counts";
const STORE: &str = "counts";

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    builder
        .stream(INPUT, Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named(STORE))
        .to_stream()
        .to(OUTPUT, Produced::with(Str, Long));
    builder.build().unwrap()
}

fn key(i: usize) -> String {
    format!("user-{i:02}")
}

/// Writes `times` records of `key` to the partition Kafka's default partitioner picks for it
/// (where a query for it looks); returns the last one's input partition and offset.
fn produce(setup: &Setup, key: &str, times: usize) -> (i32, i64) {
    let p = partition_for(key.as_bytes(), PARTITIONS as u32) as i32;
    setup.rt.block_on(async {
        let leader = setup.client.leader(INPUT, p).await.unwrap();
        let records: Vec<KeyValue> = (0..times)
            .map(|_| {
                (
                    Some(Bytes::copy_from_slice(key.as_bytes())),
                    Some(Bytes::from_static(b"clicked")),
                )
            })
            .collect();
        let first = setup
            .client
            .produce(&leader, INPUT, p, &records)
            .await
            .unwrap();
        (p, first + times as i64 - 1)
    })
}

#[test]
fn typed_queries_answer_in_process_locally_and_forwarded() {
    let (broker, dir, setup) = common::start("queries-in-process", &[INPUT], OUTPUT, PARTITIONS);
    let (qa, qb) = (Queries::new(), Queries::new());
    let counts_a = StoreQuery::new(&qa, STORE, Str, Long);
    let counts_b = StoreQuery::new(&qb, STORE, Str, Long);
    let options = QueryOptions::default();

    let early = setup.rt.block_on(counts_a.get(&key(0), &options));
    assert_eq!(early.unwrap_err(), QueryFailure::NotStarted);

    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..40 {
        let n = i % 7 + 1;
        produce(&setup, &key(i), n);
        want.insert(key(i), n as i64);
    }

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

    // Every key through a's handle, until all agree and both paths have answered.
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut local, mut forwarded, mut rounds) = (0, 0, 0);
    loop {
        rounds += 1;
        let mut agree = 0;
        for (k, n) in &want {
            match setup.rt.block_on(counts_a.get(k, &options)) {
                Ok(answer) => {
                    if answer.value == Some(*n) {
                        agree += 1;
                    }
                    assert!(
                        answer.value.unwrap_or(0) <= *n,
                        "{k}: {answer:?} counts too many"
                    );
                    assert_eq!(
                        answer.served.partition,
                        partition_for(k.as_bytes(), PARTITIONS as u32),
                        "{k}: answered from the wrong partition"
                    );
                    if answer.served.forwarded {
                        forwarded += 1;
                    } else {
                        local += 1;
                    }
                }
                // While the instance starts and the group forms, no copy may answer yet:
                // the deadline decides.
                Err(QueryFailure::NotStarted | QueryFailure::Unavailable(_)) => {}
                Err(e) => panic!("{k}: {e}"),
            }
        }
        if agree == want.len() && local > 0 && forwarded > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after {rounds} rounds: {agree} of {} keys agree, {local} local and {forwarded} \
             forwarded answers",
            want.len()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!(
        "queries in process: {} keys agree after {rounds} rounds; {local} answered where asked, \
         {forwarded} forwarded",
        want.len()
    );

    // Every partition paged through b's handle: each key once, with its count.
    let mut scanned: BTreeMap<String, i64> = BTreeMap::new();
    let mut served_by = BTreeSet::new();
    for p in 0..PARTITIONS as u32 {
        let mut after: Option<String> = None;
        loop {
            let page = setup
                .rt
                .block_on(counts_b.range(p, (None, None), after.as_ref(), 7, &options))
                .unwrap();
            served_by.insert(page.served.served_by.clone());
            for (k, v) in &page.value.entries {
                assert_eq!(partition_for(k.as_bytes(), PARTITIONS as u32), p);
                assert!(scanned.insert(k.clone(), *v).is_none(), "{k} paged twice");
            }
            if !page.value.more {
                break;
            }
            after = page.value.entries.last().map(|(k, _)| k.clone());
        }
    }
    assert_eq!(
        scanned, want,
        "the range scans hold every key once, counted"
    );
    assert_eq!(
        served_by.len(),
        2,
        "both instances served pages: {served_by:?}"
    );

    // Read your own write: the answer waits for the active to process it.
    let k = key(3);
    let (p, offset) = produce(&setup, &k, 1);
    let ryw = QueryOptions {
        at_least: Some((TopicPartition::new(INPUT, p), offset)),
        timeout: Duration::from_secs(20),
        ..QueryOptions::default()
    };
    let answer = setup.rt.block_on(counts_b.get(&k, &ryw)).unwrap();
    assert_eq!(answer.value, Some(want[&k] + 1), "{answer:?}");
    assert!(answer.served.position >= 0);

    let missing = StoreQuery::new(&qa, "no-such-store", Str, Long);
    match setup.rt.block_on(missing.get(&k, &options)) {
        Err(QueryFailure::Refused(e)) => assert_eq!(e.status.as_u16(), 404, "{e}"),
        other => panic!("a missing store: {other:?}"),
    }

    stop.send(true).unwrap();
    for (name, handle) in [("a", a), ("b", b)] {
        common::await_shutdown(&setup, name, handle);
    }
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
