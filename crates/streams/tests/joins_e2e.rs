//! Stream-stream joins on the real broker, through a scale-out and a drain: orders and
//! payments (their own topics, keyed by order, with their own timestamps) joined within five
//! minutes. Each order is paid once, some a second time before the order was placed, some too
//! late to join. The inner join's output holds exactly the pairs within five minutes of each
//! other, each once: none lost, none repeated, none outside the window. The left join's holds
//! those pairs and each order without one, alone, once its window has closed: the orders
//! kept waiting move with their task through the scale-out and the drain.

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
/// The left join's grace: longer than the input's time span, so no order's window closes
/// before the last tick, however the task interleaves the two topics.
const GRACE_MS: i64 = 1_800_000;

fn topology(left: bool) -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    let orders = builder.stream(ORDERS, Consumed::with(Str, Str));
    let payments = builder.stream(PAYMENTS, Consumed::with(Str, Str));
    let window = Duration::from_millis(WINDOW_MS as u64);
    let joined = if left {
        orders.left_join_stream(
            payments,
            |order: &String, payment: Option<&String>| {
                format!("{order}/{}", payment.map_or("null", String::as_str))
            },
            JoinWindows::of_time_difference_and_grace(
                window,
                Duration::from_millis(GRACE_MS as u64),
            ),
            StreamJoined::with(Str, Str, Str),
        )
    } else {
        orders.join_stream(
            payments,
            |order: &String, payment: &String| format!("{order}/{payment}"),
            JoinWindows::of_time_difference_with_no_grace(window),
            StreamJoined::with(Str, Str, Str),
        )
    };
    joined.to(OUTPUT, Produced::with(Str, Str));
    builder.build().unwrap()
}

/// One record: topic, key, value, timestamp.
type Event = (&'static str, String, String, i64);

/// Orders `range` and their payments: order `i` at `1000 + i` seconds. For the inner join,
/// its payment `(i % 8) * 45` seconds later (the eighth is past the window). For the left
/// join, `(i % 7) * 40` seconds later, and every eighth order unpaid: a payment far ahead of
/// stream time would make a later order past its window when it comes, and Kafka's rule
/// sends such an order alone at once, even if its payment comes next (so the output would
/// hang on how the task interleaved the two topics). Every fifth order is paid again 30
/// seconds before it was placed.
fn events(range: std::ops::Range<i64>, left: bool) -> Vec<Event> {
    let mut out = Vec::new();
    for i in range {
        let (key, ts) = (format!("order{i}"), 1_000_000 + i * 1_000);
        out.push((ORDERS, key.clone(), format!("o{i}"), ts));
        let paid_at = match left {
            false => Some(ts + (i % 8) * 45_000),
            true => (i % 8 != 7).then_some(ts + (i % 7) * 40_000),
        };
        if let Some(paid_at) = paid_at {
            out.push((PAYMENTS, key.clone(), format!("p{i}"), paid_at));
        }
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

/// What the left join must give: the pairs, and each order without one alone.
fn pairs_or_alone(events: &[Event]) -> BTreeMap<(String, String), usize> {
    let mut want = pairs(events);
    for (_, k, v, _) in events.iter().filter(|e| e.0 == ORDERS) {
        let prefix = format!("{v}/");
        if !want
            .keys()
            .any(|(wk, wv)| wk == k && wv.starts_with(&prefix))
        {
            want.insert((k.clone(), format!("{v}/null")), 1);
        }
    }
    want
}

/// A payment far past every window on each partition: stream time moves past every order's
/// window and grace, so the orders still waiting for a payment come out alone.
fn ticks() -> Vec<Event> {
    (0..PARTITIONS)
        .map(|p| {
            let key = (0..)
                .map(|i| format!("tick{i}"))
                .find(|k| partition_for(k.as_bytes(), PARTITIONS as u32) as i32 == p)
                .unwrap();
            (PAYMENTS, key, "tick".to_owned(), 10_000_000)
        })
        .collect()
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
    setup.counted(OUTPUT)
}

/// The pairs in the output, counted; records of an order alone left out.
fn paid_only(setup: &Setup) -> BTreeMap<(String, String), usize> {
    let mut out = paid(setup);
    out.retain(|(_, v), _| !v.ends_with("/null"));
    out
}

#[test]
fn a_stream_stream_join_pairs_exactly_through_a_scale_out_and_a_drain() {
    join_through_a_scale_out_and_a_drain(false);
}

#[test]
fn a_left_join_sends_each_order_without_a_payment_once_through_a_scale_out_and_a_drain() {
    join_through_a_scale_out_and_a_drain(true);
}

fn join_through_a_scale_out_and_a_drain(left: bool) {
    let name = if left { "left-joins" } else { "joins" };
    let (broker, dir, setup) = common::start(name, &[ORDERS, PAYMENTS], OUTPUT, PARTITIONS);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| {
        let cfg = common::runtime_config(&broker.addr, &dir, APP, name, &[]);
        setup.rt.spawn(baton_runtime::instance::run(
            cfg,
            topology(left),
            shutdown.clone(),
        ))
    };
    let a = run("a");
    let mut all = events(0..200, left);
    send(&setup, &all);
    setup.await_equal(&pairs(&all), "pairs, one instance", paid_only);
    let b = run("b");
    let more = events(200..400, left);
    send(&setup, &more);
    all.extend(more);
    common::drain_and_await(&setup, (APP, "a"), a);
    let more = events(400..600, left);
    send(&setup, &more);
    all.extend(more);
    let want = pairs(&all);
    let label = "pairs, after the scale-out and the drain";
    setup.await_equal(&want, label, paid_only);
    eprintln!(
        "{name}: {} pairs of 600 orders and {} payments exact through a scale-out and a drain",
        want.values().sum::<usize>(),
        all.iter().filter(|e| e.0 == PAYMENTS).count()
    );
    if left {
        send(&setup, &ticks());
        let want = pairs_or_alone(&all);
        setup.await_equal(&want, "pairs and orders alone, after the ticks", paid);
        let alone = want.keys().filter(|(_, v)| v.ends_with("/null")).count();
        eprintln!("{name}: and {alone} orders without a payment, each alone once");
    } else {
        setup.await_equal(&want, label, paid);
    }
    stop.send(true).unwrap();
    common::await_shutdown(&setup, "b", b);
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
