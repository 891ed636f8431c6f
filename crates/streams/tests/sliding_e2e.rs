//! Sliding windows on the real broker, through a scale-out and a drain: clicks per user
//! counted over every 5 s window that Kafka's sliding windows make (a left window ending at
//! each click, a right window starting after it when a later click falls in it). Read as a
//! table (the last count per window), the output equals the windows and counts computed
//! from the clicks alone.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use baton_streams::serdes::{Long, Serde, Str, TimeWindowed};
use baton_streams::{Consumed, Grouped, Materialized, Produced, SlidingWindows, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 2;
const APP: &str = "sliding-clicks";
const INPUT: &str = "sl-clicks";
const OUTPUT: &str = "sl-clicks-per-window";
const USERS: u64 = 8;
const DIFF: i64 = 5_000;

fn serde() -> TimeWindowed<String> {
    TimeWindowed::new(Str, Duration::from_millis(DIFF as u64))
}

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    builder
        .stream(INPUT, Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(SlidingWindows::of_time_difference_and_grace(
            Duration::from_millis(DIFF as u64),
            Duration::from_secs(60),
        ))
        .count(Materialized::named("clicks-per-window"))
        .to_stream()
        .to(OUTPUT, Produced::with(serde(), Long));
    builder.build().unwrap()
}

/// User `u`'s clicks of phase `phase`, in time order: gaps of 2, 3, 7 and 4 s in turn from
/// a start of its own, so windows overlap and some stand alone.
fn clicks(u: u64, phase: i64) -> Vec<i64> {
    let gaps = [2_000, 3_000, 7_000, 4_000];
    let mut t = 1_000_000 + phase * 100_000 + u as i64 * 100;
    (0..6)
        .map(|j| {
            t += gaps[(j + u as usize) % 4];
            t
        })
        .collect()
}

/// Sends phase `phase`'s clicks, each to its user's partition.
fn send(setup: &Setup, phase: i64, sent: &mut BTreeMap<String, Vec<i64>>) {
    for u in 0..USERS {
        let name = format!("user{u}");
        let stamps = clicks(u, phase);
        let records: Vec<KeyValue> = stamps
            .iter()
            .map(|_| {
                (
                    Some(Bytes::from(name.clone())),
                    Some(Bytes::from_static(b"/")),
                )
            })
            .collect();
        let p = partition_for(name.as_bytes(), PARTITIONS as u32) as i32;
        setup.produce_stamped(INPUT, p, &records, &stamps);
        sent.entry(name).or_default().extend(stamps);
    }
}

/// The sliding windows of each user's clicks and their counts, from the definition: a
/// window `[t - diff, t]` per click, and `[t + 1, t + 1 + diff]` per click with a later one
/// in it; each counts the clicks it holds.
fn expected(sent: &BTreeMap<String, Vec<i64>>) -> BTreeMap<(String, i64), i64> {
    let mut out = BTreeMap::new();
    for (user, stamps) in sent {
        let mut starts = BTreeSet::new();
        for &t in stamps {
            starts.insert(t - DIFF);
            if stamps.iter().any(|&u| u > t && u <= t + 1 + DIFF) {
                starts.insert(t + 1);
            }
        }
        for s in starts {
            let n = stamps.iter().filter(|&&u| s <= u && u <= s + DIFF).count();
            out.insert((user.clone(), s), n as i64);
        }
    }
    out
}

/// The output read as a table: each window's last count.
fn counts(setup: &Setup) -> BTreeMap<(String, i64), i64> {
    let serde = serde();
    let mut out = BTreeMap::new();
    for r in setup.read(OUTPUT).into_values().flatten() {
        let w = serde.deserialize(&r.key.unwrap()).unwrap();
        let n = Long.deserialize(&r.value.unwrap()).unwrap();
        out.insert((w.key, w.window.start_ms), n);
    }
    out
}

#[test]
fn sliding_windows_count_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("sliding", &[INPUT], OUTPUT, PARTITIONS);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| {
        let at = (broker.addr.as_str(), dir.as_path());
        common::spawn_instance(&setup, at, (APP, name), topology(), &shutdown)
    };
    let mut sent = BTreeMap::new();
    let a = run("a");
    send(&setup, 0, &mut sent);
    setup.await_equal(&expected(&sent), "sliding counts, one instance", counts);
    let b = run("b");
    send(&setup, 1, &mut sent);
    setup.await_equal(
        &expected(&sent),
        "sliding counts, after the scale-out",
        counts,
    );
    common::drain_and_await(&setup, (APP, "a"), a);
    send(&setup, 2, &mut sent);
    let want = expected(&sent);
    setup.await_equal(&want, "sliding counts, after the drain", counts);
    eprintln!(
        "sliding windows: {} windows of {} clicks exact through a scale-out and a drain",
        want.len(),
        sent.values().map(Vec::len).sum::<usize>()
    );
    stop.send(true).unwrap();
    common::await_shutdown(&setup, "b", b);
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
