//! A stream-stream join of two streams keyed anew, on the real broker through a scale-out and
//! a drain: orders (keyed by order id, 2 partitions) and payments (keyed by payment id, 3
//! partitions) both keyed by customer, each through its repartition topic (both made with 3
//! partitions, the larger of their writers', so they are co-partitioned), joined within 5 s.
//! Every order meets its customer's payment exactly once.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::client::NewTopic;
use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use baton_streams::serdes::Str;
use baton_streams::{Consumed, JoinWindows, Produced, StreamJoined, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const APP: &str = "paid-orders";
const ORDERS: &str = "rj-orders";
const PAYMENTS: &str = "rj-payments";
const OUTPUT: &str = "rj-paid";

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    let customer = |_: &String, v: &String| v.split(':').next().unwrap_or_default().to_owned();
    let orders = builder
        .stream(ORDERS, Consumed::with(Str, Str))
        .select_key(customer);
    let payments = builder
        .stream(PAYMENTS, Consumed::with(Str, Str))
        .select_key(customer);
    orders
        .join_stream(
            payments,
            |o: &String, p: &String| format!("{o}+{p}"),
            JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(5)),
            StreamJoined::with(Str, Str, Str).with_name("paid"),
        )
        .to(OUTPUT, Produced::with(Str, Str));
    builder.build().unwrap()
}

/// Phase `phase`: customer c orders at a time of its own and pays 1 s later; what the output
/// must then hold: (customer, "order+payment") once each.
fn send(setup: &Setup, phase: u64) -> BTreeMap<(String, String), usize> {
    let mut want = BTreeMap::new();
    for c in 0..10u64 {
        let customer = format!("c{c}");
        let t = 1_000_000 + phase as i64 * 100_000 + c as i64 * 10;
        let order = (
            format!("o{phase}-{c}"),
            format!("{customer}:item{phase}-{c}"),
        );
        let payment = (
            format!("p{phase}-{c}"),
            format!("{customer}:{}", phase * 100 + c),
        );
        for (topic, partitions, (k, v), ts) in
            [(ORDERS, 2, &order, t), (PAYMENTS, 3, &payment, t + 1_000)]
        {
            let p = partition_for(k.as_bytes(), partitions) as i32;
            let record: KeyValue = (Some(Bytes::from(k.clone())), Some(Bytes::from(v.clone())));
            setup.produce_stamped(topic, p, &[record], &[ts]);
        }
        want.insert((customer, format!("{}+{}", order.1, payment.1)), 1);
    }
    want
}

#[test]
fn rekeyed_streams_join_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("rekeyed-join", &[ORDERS], OUTPUT, 2);
    let payments = NewTopic {
        name: PAYMENTS.into(),
        partitions: 3,
        compacted: false,
    };
    setup
        .rt
        .block_on(setup.client.create_topics(std::slice::from_ref(&payments)))
        .unwrap();
    let mut paid = BTreeMap::new();
    let want = common::scale_out_and_drain(
        &setup,
        (broker.addr.as_str(), dir.as_path()),
        (APP, topology),
        ("paid orders", |s: &Setup, n| {
            paid.extend(send(s, u64::from(n)));
            paid.clone()
        }),
        |s| s.counted(OUTPUT),
    );
    let counts = setup.partition_counts(&[
        "paid-orders-paid-left-repartition".to_owned(),
        "paid-orders-paid-right-repartition".to_owned(),
    ]);
    assert_eq!(
        counts,
        [3, 3],
        "both repartition topics take the larger count"
    );
    eprintln!(
        "rekeyed join: {} orders paid exactly once through a scale-out and a drain",
        want.len()
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
