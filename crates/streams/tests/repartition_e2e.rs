//! `KStream::repartition` on the real broker: clicks keyed by nothing are keyed by user, sent
//! through a repartition topic of their own partition count (three, from a two-partition
//! input), and counted per user by two instances in this process. The topic is made with
//! three partitions, the counting runs as three tasks, and every count equals the input's.
//! Started again asking for four partitions, the application is refused, naming the topic.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::records::KeyValue;
use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, Repartitioned, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 2;
const APP: &str = "clicks-by-user";
const INPUT: &str = "rp-clicks";
const OUTPUT: &str = "rp-clicks-per-user";
const TOPIC: &str = "clicks-by-user-by-user-repartition";

fn topology(partitions: u32) -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    builder
        .stream(INPUT, Consumed::with(Str, Str))
        .select_key(|_, user: &String| user.clone())
        .repartition(
            Repartitioned::with(Str, Str)
                .named("by-user")
                .with_partitions(partitions),
        )
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("clicks"))
        .to_stream()
        .to(OUTPUT, Produced::with(Str, Long));
    builder.build().unwrap()
}

/// Clicks with no key, the user as the value, over both input partitions.
fn produce(setup: &Setup, clicks: &[String]) {
    for (i, chunk) in clicks.chunks(50).enumerate() {
        let records: Vec<KeyValue> = chunk
            .iter()
            .map(|u| (None, Some(Bytes::copy_from_slice(u.as_bytes()))))
            .collect();
        setup.produce_to(INPUT, i as i32 % PARTITIONS, &records);
    }
}

/// Each user's latest count in the output.
fn counted(setup: &Setup) -> BTreeMap<String, i64> {
    let mut latest = BTreeMap::new();
    for r in setup.read(OUTPUT).into_values().flatten() {
        let (Some(k), Some(v)) = (r.key, r.value) else {
            continue;
        };
        let n = i64::from_be_bytes(v.as_ref().try_into().unwrap());
        latest.insert(String::from_utf8(k.to_vec()).unwrap(), n);
    }
    latest
}

fn partitions_of(setup: &Setup, topic: &str) -> usize {
    let resp = setup
        .rt
        .block_on(setup.client.metadata(Some(&[topic.to_owned()])))
        .unwrap();
    resp.topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == topic))
        .map_or(0, |t| t.partitions.len())
}

#[test]
fn a_repartition_with_its_own_partition_count_counts_exactly_and_refuses_another_count() {
    let (broker, dir, setup) = common::start("repartition", &[INPUT], OUTPUT, PARTITIONS);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| {
        let cfg = common::runtime_config(&broker.addr, &dir, APP, name, &[]);
        setup.rt.spawn(baton_runtime::instance::run(
            cfg,
            topology(3),
            shutdown.clone(),
        ))
    };
    let (a, b) = (run("a"), run("b"));
    let clicks: Vec<String> = (0..1200).map(|i| format!("user{}", i * 7 % 13)).collect();
    produce(&setup, &clicks);
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for u in &clicks {
        *want.entry(u.clone()).or_default() += 1;
    }
    setup.await_equal(&want, "clicks per user", counted);
    assert_eq!(
        partitions_of(&setup, TOPIC),
        3,
        "the topic has its own count"
    );
    eprintln!(
        "repartition: {} clicks of {} users counted exactly through {TOPIC} (3 partitions)",
        clicks.len(),
        want.len()
    );
    stop.send(true).unwrap();
    for (name, handle) in [("a", a), ("b", b)] {
        common::await_shutdown(&setup, name, handle);
    }

    // The topic exists with 3 partitions: asking for 4 is refused before anything runs.
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let cfg = common::runtime_config(&broker.addr, &dir, APP, "c", &[]);
    let refused = setup.rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            baton_runtime::instance::run(cfg, topology(4), shutdown),
        )
        .await
    });
    let error = match refused {
        Ok(Err(e)) => e.to_string(),
        other => panic!("asking for another partition count is refused: {other:?}"),
    };
    assert!(
        error.contains(TOPIC) && error.contains("exists with 3 partitions"),
        "{error}"
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
