//! `KStream::merge` of streams of two topics on the real broker: clicks from the web and from
//! the app, each cleaned by steps of its own, merged and counted per user (no key change, so
//! in the merged sub-topology itself) by two instances in this process. Every user's count
//! equals the clicks of both topics together.

mod common;

use std::collections::BTreeMap;

use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 2;
const APP: &str = "all-clicks";
const WEB: &str = "mg-web";
const APP_CLICKS: &str = "mg-app";
const OUTPUT: &str = "mg-clicks-per-user";

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    let web = builder
        .stream(WEB, Consumed::with(Str, Str))
        .filter(|_, page: &String| !page.is_empty());
    let app = builder
        .stream(APP_CLICKS, Consumed::with(Str, Str))
        .map_values(|screen: &String| format!("app:{screen}"));
    web.merge(app)
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("clicks"))
        .to_stream()
        .to(OUTPUT, Produced::with(Str, Long));
    builder.build().unwrap()
}

/// `clicks` of `(user, page)` to `topic`, each to its user's partition.
fn produce(setup: &Setup, topic: &str, clicks: &[(String, String)]) {
    let mut by_partition: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
    for (user, page) in clicks {
        let p = partition_for(user.as_bytes(), PARTITIONS as u32) as i32;
        by_partition.entry(p).or_default().push((
            Some(Bytes::from(user.clone())),
            Some(Bytes::from(page.clone())),
        ));
    }
    for (p, records) in by_partition {
        setup.produce_to(topic, p, &records);
    }
}

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

#[test]
fn streams_of_two_topics_merge_and_count_exactly() {
    let (broker, dir, setup) = common::start("merge", &[WEB, APP_CLICKS], OUTPUT, PARTITIONS);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| {
        let cfg = common::runtime_config(&broker.addr, &dir, APP, name, &[]);
        setup.rt.spawn(baton_runtime::instance::run(
            cfg,
            topology(),
            shutdown.clone(),
        ))
    };
    let (a, b) = (run("a"), run("b"));
    // Every 7th web click has no page: filtered out before the merge.
    let web: Vec<(String, String)> = (0..900)
        .map(|i| {
            let page = if i % 7 == 0 {
                String::new()
            } else {
                format!("/p{i}")
            };
            (format!("user{}", i % 11), page)
        })
        .collect();
    let app: Vec<(String, String)> = (0..600)
        .map(|i| (format!("user{}", i * 3 % 13), format!("s{i}")))
        .collect();
    produce(&setup, WEB, &web);
    produce(&setup, APP_CLICKS, &app);
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for (user, page) in web.iter().chain(&app) {
        if !page.is_empty() {
            *want.entry(user.clone()).or_default() += 1;
        }
    }
    setup.await_equal(&want, "clicks of both topics per user", counted);
    eprintln!(
        "merge: {} clicks of two topics counted exactly for {} users",
        want.values().sum::<i64>(),
        want.len()
    );
    stop.send(true).unwrap();
    for (name, handle) in [("a", a), ("b", b)] {
        common::await_shutdown(&setup, name, handle);
    }
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
