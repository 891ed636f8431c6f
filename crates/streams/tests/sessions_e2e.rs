//! Session windows on the real broker, through a scale-out and a drain: each user clicks in
//! bursts (clicks 1 s apart, bursts 100 s apart, inactivity gap 1.5 s), each burst's clicks
//! sent out of order so that sessions start apart and merge when a later click bridges them.
//! Read as a table (the last record per session key), the output holds exactly one live
//! session per burst, spanning its first to its last click and counting them all; every
//! session merged away ends in a tombstone.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use baton_streams::serdes::{Long, SessionWindowed, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, SessionWindows, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 2;
const APP: &str = "visits";
const INPUT: &str = "ss-clicks";
const OUTPUT: &str = "ss-clicks-per-visit";
const USERS: u64 = 12;
const BURST_EVERY: i64 = 100_000;
const CLICK_EVERY: i64 = 1_000;

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    builder
        .stream(INPUT, Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(SessionWindows::of_inactivity_gap_and_grace(
            Duration::from_millis(1_500),
            Duration::from_secs(60),
        ))
        .count(Materialized::named("clicks-per-visit"))
        .to_stream()
        .to(OUTPUT, Produced::with(SessionWindowed::new(Str), Long));
    builder.build().unwrap()
}

/// Burst `b` of `user`: its clicks' timestamps in the order sent. Sent as 0, 2, 1, 4, 3, ...
/// (in seconds from the burst's start), each odd one bridges the two sessions before it.
fn burst(user: u64, b: i64) -> Vec<i64> {
    let n = 1 + (user as i64 + b) % 5;
    let base = b * BURST_EVERY + user as i64 * 10;
    let mut order = vec![0];
    let mut j = 1;
    while j < n {
        if j + 1 < n {
            order.extend([j + 1, j]);
        } else {
            order.push(j);
        }
        j += 2;
    }
    order.into_iter().map(|j| base + j * CLICK_EVERY).collect()
}

/// Sends bursts `bursts` of every user, burst by burst, each click to its user's partition
/// with its own timestamp; what the output must then hold: per burst, `(user, start, end)`
/// and its click count.
fn send(setup: &Setup, bursts: std::ops::Range<i64>) -> BTreeMap<(String, i64, i64), i64> {
    let mut want = BTreeMap::new();
    for b in bursts {
        let mut by_partition: BTreeMap<i32, (Vec<KeyValue>, Vec<i64>)> = BTreeMap::new();
        for user in 0..USERS {
            let name = format!("user{user}");
            let clicks = burst(user, b);
            let (start, end) = (*clicks.iter().min().unwrap(), *clicks.iter().max().unwrap());
            want.insert((name.clone(), start, end), clicks.len() as i64);
            let p = partition_for(name.as_bytes(), PARTITIONS as u32) as i32;
            let (records, stamps) = by_partition.entry(p).or_default();
            for ts in clicks {
                records.push((
                    Some(Bytes::from(name.clone())),
                    Some(Bytes::from_static(b"/")),
                ));
                stamps.push(ts);
            }
        }
        for (p, (records, stamps)) in by_partition {
            setup.produce_stamped(INPUT, p, &records, &stamps);
        }
    }
    want
}

/// The output read as a table: each session key's last record, live sessions only; and how
/// many session keys ended in a tombstone.
fn sessions(setup: &Setup) -> (BTreeMap<(String, i64, i64), i64>, usize) {
    let serde = SessionWindowed::new(Str);
    let mut last: BTreeMap<(String, i64, i64), Option<i64>> = BTreeMap::new();
    for r in setup.read(OUTPUT).into_values().flatten() {
        use baton_streams::serdes::Serde;
        let w = serde.deserialize(&r.key.unwrap()).unwrap();
        let count = r.value.map(|v| Long.deserialize(&v).unwrap());
        last.insert((w.key, w.window.start_ms, w.window.end_ms), count);
    }
    let closed = last.values().filter(|c| c.is_none()).count();
    let live = last
        .into_iter()
        .filter_map(|(k, c)| Some((k, c?)))
        .collect();
    (live, closed)
}

#[test]
fn sessions_merge_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("sessions", &[INPUT], OUTPUT, PARTITIONS);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| {
        let at = (broker.addr.as_str(), dir.as_path());
        common::spawn_instance(&setup, at, (APP, name), topology(), &shutdown)
    };
    let a = run("a");
    let mut want = send(&setup, 0..3);
    setup.await_equal(&want, "sessions, one instance", |s| sessions(s).0);
    // b serves queries: a session store is refused as a key-value store and read by its
    // sessions.
    let queries = baton_streams::queries::Queries::new();
    let b = {
        let cfg = common::serving_config(&broker.addr, &dir, APP, "b");
        setup.rt.spawn(baton_runtime::instance::run_with_queries(
            cfg,
            topology(),
            shutdown.clone(),
            queries.clone(),
        ))
    };
    want.extend(send(&setup, 3..6));
    common::drain_and_await(&setup, (APP, "a"), a);
    want.extend(send(&setup, 6..9));
    setup.await_equal(&want, "sessions, after the drain", |s| sessions(s).0);
    let (_, closed) = sessions(&setup);
    let clicks: i64 = want.values().sum();
    let bridged = want.values().filter(|&&n| n >= 3).count();
    assert!(
        closed >= bridged,
        "every bridged burst left tombstones: {closed} < {bridged}"
    );
    eprintln!(
        "sessions: {clicks} clicks in {} sessions exact through a scale-out and a drain, \
         {closed} merged sessions ended in tombstones",
        want.len()
    );
    let store = baton_streams::queries::StoreQuery::new(&queries, "clicks-per-visit", Str, Long);
    let options = baton_streams::queries::QueryOptions::default();
    let refused = setup.rt.block_on(store.get(&"user0".to_owned(), &options));
    let why = refused.expect_err("a session store is not read as a key-value store");
    assert!(why.to_string().contains("is a session store"), "{why}");
    // Its sessions are read as windows: every session of a user, with its count.
    for user in ["user0", "user7"] {
        let got = setup
            .rt
            .block_on(store.windows(&user.to_owned(), 0, i64::MAX, &options))
            .unwrap();
        let got: BTreeMap<(String, i64, i64), i64> = got
            .value
            .into_iter()
            .map(|(w, n)| ((user.to_owned(), w.start_ms, w.end_ms), n))
            .collect();
        let mine: BTreeMap<(String, i64, i64), i64> = want
            .iter()
            .filter(|((u, _, _), _)| u == user)
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        assert_eq!(got, mine, "{user}'s sessions as b's store holds them");
    }
    stop.send(true).unwrap();
    common::await_shutdown(&setup, "b", b);
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
