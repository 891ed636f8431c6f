//! Final results on the real broker, through a scale-out and a drain: a tumbling-window count
//! of clicks per user, suppressed until each window closes. Every window's count comes out
//! once, with all its clicks, whichever instance held the window's buffer when it closed; the
//! windows still open when a task moves (the drain moves every task of the drained instance)
//! travel in the buffer's changelog.
//!
//! Stream time is per task: after each phase's clicks, a tick per partition, far enough ahead
//! to close the phase's windows, and before the next phase's clicks.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use baton_streams::serdes::{Long, Serde, Str, TimeWindowed};
use baton_streams::{
    BufferConfig, Consumed, Grouped, Materialized, Produced, StreamsBuilder, Suppressed,
    TimeWindows,
};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 2;
const APP: &str = "final-clicks";
const INPUT: &str = "fr-clicks";
const OUTPUT: &str = "fr-clicks-per-window";
const USERS: u64 = 10;
const WINDOW_MS: i64 = 10_000;
/// Each phase's clicks fall in its first 50 s; its tick at 90 s closes their windows.
const PHASE_MS: i64 = 100_000;

fn window_serde() -> TimeWindowed<String> {
    TimeWindowed::new(Str, Duration::from_millis(WINDOW_MS as u64))
}

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    builder
        .stream(INPUT, Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(TimeWindows::of_size_and_grace(
            Duration::from_millis(WINDOW_MS as u64),
            Duration::from_secs(2),
        ))
        .count(Materialized::named("clicks-per-window"))
        .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()).with_name("finals"))
        .to_stream()
        .to(OUTPUT, Produced::with(window_serde(), Long));
    builder.build().unwrap()
}

/// A key of partition `p`, for its tick.
fn tick_key(p: i32) -> String {
    (0..)
        .map(|i| format!("tick-{i}"))
        .find(|k| partition_for(k.as_bytes(), PARTITIONS as u32) as i32 == p)
        .unwrap()
}

/// Sends phase `phase`'s clicks (user u clicks 1 + (u + phase + w) % 4 times in each of
/// windows w = 0..5 of the phase, out of order within a window), then a tick per partition;
/// what the output must then hold: per (user, window start), its count.
fn send(setup: &Setup, phase: i64) -> BTreeMap<(String, i64), i64> {
    let want = send_without_ticks(setup, phase);
    send_ticks(setup, phase);
    want
}

/// Every user's window count in the output, as many times as it came out.
fn finals(setup: &Setup) -> BTreeMap<(String, i64), Vec<i64>> {
    let serde = window_serde();
    let mut out: BTreeMap<(String, i64), Vec<i64>> = BTreeMap::new();
    for r in setup.read(OUTPUT).into_values().flatten() {
        let w = serde.deserialize(&r.key.unwrap()).unwrap();
        if w.key.starts_with("tick") {
            continue;
        }
        let n = Long
            .deserialize(&r.value.expect("final results carry no deletes"))
            .unwrap();
        out.entry((w.key, w.window.start_ms)).or_default().push(n);
    }
    out
}

fn once(want: &BTreeMap<(String, i64), i64>) -> BTreeMap<(String, i64), Vec<i64>> {
    want.iter().map(|(k, &n)| (k.clone(), vec![n])).collect()
}

#[test]
fn each_window_comes_out_once_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("suppress", &[INPUT], OUTPUT, PARTITIONS);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| {
        let at = (broker.addr.as_str(), dir.as_path());
        common::spawn_instance(&setup, at, (APP, name), topology(), &shutdown)
    };
    let a = run("a");
    let mut want = send(&setup, 0);
    setup.await_equal(&once(&want), "final counts, one instance", finals);
    // Phase 1's clicks wait in a's buffers, without their tick, while b joins: the windows
    // still open move with their tasks.
    let b = run("b");
    let clicks_only = send_without_ticks(&setup, 1);
    std::thread::sleep(Duration::from_secs(3));
    send_ticks(&setup, 1);
    want.extend(clicks_only);
    setup.await_equal(&once(&want), "final counts, after the scale-out", finals);
    // Phase 2's clicks wait in the buffers (a's tasks' among them) while a drains: b takes
    // a's tasks with their open windows restored from the buffers' changelogs, and sends
    // them once the ticks close them.
    let clicks_only = send_without_ticks(&setup, 2);
    std::thread::sleep(Duration::from_secs(3));
    common::drain_and_await(&setup, (APP, "a"), a);
    send_ticks(&setup, 2);
    want.extend(clicks_only);
    setup.await_equal(&once(&want), "final counts, after the drain", finals);
    let clicks: i64 = want.values().sum();
    eprintln!(
        "suppress: {} window counts of {clicks} clicks, each out once, through a scale-out and a drain",
        want.len()
    );
    stop.send(true).unwrap();
    common::await_shutdown(&setup, "b", b);
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Phase `phase`'s clicks, without the ticks ([`send`]).
fn send_without_ticks(setup: &Setup, phase: i64) -> BTreeMap<(String, i64), i64> {
    let mut want = BTreeMap::new();
    for w in 0..5 {
        let start = phase * PHASE_MS + w * WINDOW_MS;
        for user in 0..USERS {
            let name = format!("user{user}");
            let n = 1 + (user as i64 + phase + w) % 4;
            want.insert((name.clone(), start), n);
            let p = partition_for(name.as_bytes(), PARTITIONS as u32) as i32;
            let records: Vec<KeyValue> = (0..n)
                .map(|_| {
                    (
                        Some(Bytes::from(name.clone())),
                        Some(Bytes::from_static(b"/")),
                    )
                })
                .collect();
            let stamps: Vec<i64> = (0..n).rev().map(|j| start + 100 + j * 1_000).collect();
            setup.produce_stamped(INPUT, p, &records, &stamps);
        }
    }
    want
}

fn send_ticks(setup: &Setup, phase: i64) {
    for p in 0..PARTITIONS {
        let tick = (
            Some(Bytes::from(tick_key(p))),
            Some(Bytes::from_static(b"/")),
        );
        setup.produce_stamped(INPUT, p, &[tick], &[phase * PHASE_MS + 90_000]);
    }
}
