//! A stream-stream join on the real broker, through a scale-out and a drain: orders and
//! payments (their own topics, keyed by order, with their own timestamps) joined within five
//! minutes. Each order is paid once, some a second time before the order was placed, some too
//! late to join. The output holds exactly the pairs within five minutes of each other, each
//! once: none lost, none repeated, none outside the window.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use baton_streams::serdes::Str;
use baton_streams::{Consumed, JoinWindows, Produced, StreamJoined, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 2;
const APP: &str = "order-payments";
const ORDERS: &str = "jn-orders";
const PAYMENTS: &str = "jn-payments";
const OUTPUT: &str = "jn-paid";
const WINDOW_MS: i64 = 300_000;

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    let orders = builder.stream(ORDERS, Consumed::with(Str, Str));
    let payments = builder.stream(PAYMENTS, Consumed::with(Str, Str));
    orders
        .join_stream(
            payments,
            |order: &String, payment: &String| format!("{order}/{payment}"),
            JoinWindows::of_time_difference_with_no_grace(Duration::from_millis(WINDOW_MS as u64)),
            StreamJoined::with(Str, Str, Str),
        )
        .to(OUTPUT, Produced::with(Str, Str));
    builder.build().unwrap()
}

/// One record: topic, key, value, timestamp.
type Event = (&'static str, String, String, i64);

/// Orders `range` and their payments: order `i` at `1000 + i` seconds; its payment `(i % 8) * 45`
/// seconds later (the eighth is past the window); every fifth order paid again 30 seconds
/// before it was placed.
fn events(range: std::ops::Range<i64>) -> Vec<Event> {
    let mut out = Vec::new();
    for i in range {
        let (key, ts) = (format!("order{i}"), 1_000_000 + i * 1_000);
        out.push((ORDERS, key.clone(), format!("o{i}"), ts));
        out.push((
            PAYMENTS,
            key.clone(),
            format!("p{i}"),
            ts + (i % 8) * 45_000,
        ));
        if i % 5 == 0 {
            out.push((PAYMENTS, key, format!("early{i}"), ts - 30_000));
        }
    }
    out
}

/// The pairs `events` must give: per key, each order with each payment within the window.
fn pairs(events: &[Event]) -> BTreeMap<(String, String), usize> {
    let mut want = BTreeMap::new();
    for (_, k1, v1, ts1) in events.iter().filter(|e| e.0 == ORDERS) {
        for (_, _, v2, ts2) in events.iter().filter(|e| e.0 == PAYMENTS && &e.1 == k1) {
            if (ts1 - ts2).abs() <= WINDOW_MS {
                *want.entry((k1.clone(), format!("{v1}/{v2}"))).or_default() += 1;
            }
        }
    }
    want
}

/// Writes `events` to their topics, each to its key's partition with its own timestamp.
fn send(setup: &Setup, events: &[Event]) {
    type Stamped = (Vec<KeyValue>, Vec<i64>);
    let mut by_target: BTreeMap<(&str, i32), Stamped> = BTreeMap::new();
    for (topic, key, value, ts) in events {
        let p = partition_for(key.as_bytes(), PARTITIONS as u32) as i32;
        let (records, stamps) = by_target.entry((topic, p)).or_default();
        records.push((
            Some(Bytes::from(key.clone())),
            Some(Bytes::from(value.clone())),
        ));
        stamps.push(*ts);
    }
    setup.rt.block_on(async {
        for ((topic, p), (records, stamps)) in by_target {
            let leader = setup.client.leader(topic, p).await.unwrap();
            setup
                .client
                .produce_stamped(&leader, topic, p, &records, &stamps)
                .await
                .unwrap();
        }
    });
}

/// Every pair in the output, counted.
fn paid(setup: &Setup) -> BTreeMap<(String, String), usize> {
    let mut out = BTreeMap::new();
    for r in setup.read(OUTPUT).into_values().flatten() {
        let k = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
        let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
        *out.entry((k, v)).or_default() += 1;
    }
    out
}

#[test]
fn a_stream_stream_join_pairs_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("joins", &[ORDERS, PAYMENTS], OUTPUT, PARTITIONS);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| {
        let cfg = common::runtime_config(&broker.addr, &dir, APP, name, &[]);
        setup.rt.spawn(baton_runtime::instance::run(
            cfg,
            topology(),
            shutdown.clone(),
        ))
    };
    let a = run("a");
    let mut all = events(0..200);
    send(&setup, &all);
    setup.await_equal(&pairs(&all), "pairs, one instance", paid);
    let b = run("b");
    let more = events(200..400);
    send(&setup, &more);
    all.extend(more);
    setup.drain(APP, "a");
    let drained = setup
        .rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), a).await });
    assert!(
        matches!(drained, Ok(Ok(Ok(baton_runtime::Exit::Drained)))),
        "a exits once drained: {drained:?}"
    );
    let more = events(400..600);
    send(&setup, &more);
    all.extend(more);
    let want = pairs(&all);
    setup.await_equal(&want, "pairs, after the scale-out and the drain", paid);
    let unpaired = (0..600).filter(|i| i % 8 == 7).count();
    eprintln!(
        "joins: {} pairs of 600 orders and {} payments exact through a scale-out and a drain \
         ({unpaired} payments past the window)",
        want.values().sum::<usize>(),
        all.iter().filter(|e| e.0 == PAYMENTS).count()
    );
    stop.send(true).unwrap();
    common::await_shutdown(&setup, "b", b);
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
