//! Batches of several tasks side by side (`--batch-cores 2`) on the real broker: word count
//! over a backlog on four partitions, through its repartition topic, with the record cache on
//! and with it off. The first fetch brings input for every task, so their records run on two
//! cores at once (the instance's `/metrics` counts them); every word's count is exact, as with
//! one batch at a time.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use baton_kafka::records::KeyValue;
use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 4;
const INPUT: &str = "sbs-lines";
const OUTPUT: &str = "sbs-counts";
const LINES_PER_PARTITION: usize = 3_000;
const WORDS: [&str; 7] = ["relay", "baton", "warm", "state", "store", "hand", "over"];

fn topology(app: &str, output: &str) -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(app);
    builder
        .stream(INPUT, Consumed::with(Str, Str))
        .flat_map_values(|l: &String| l.split(' ').map(str::to_owned).collect::<Vec<_>>())
        .group_by(|_, w: &String| w.clone(), Grouped::with(Str, Str))
        .count(Materialized::named("counts"))
        .to_stream()
        .to(output, Produced::with(Str, Long));
    builder.build().unwrap()
}

fn line(i: usize) -> String {
    (0..5)
        .map(|j| WORDS[(i * 3 + j * 5) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each word's latest count in `topic`.
fn counted(setup: &Setup, topic: &str) -> BTreeMap<String, i64> {
    let mut latest = BTreeMap::new();
    for r in setup.read(topic).into_values().flatten() {
        let (Some(k), Some(v)) = (r.key, r.value) else {
            continue;
        };
        let n = i64::from_be_bytes(v.as_ref().try_into().unwrap());
        latest.insert(String::from_utf8(k.to_vec()).unwrap(), n);
    }
    latest
}

fn metrics(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    page
}

/// The instance's `baton_batches_side_by_side_total`.
fn side_by_side(page: &str) -> u64 {
    page.lines()
        .find(|l| l.starts_with("baton_batches_side_by_side_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no baton_batches_side_by_side_total in:\n{page}"))
}

#[test]
fn tasks_batches_side_by_side_count_every_word_exactly() {
    // Each app writes its own output; both exist before they start.
    let (cached, uncached) = (format!("{OUTPUT}-10485760"), format!("{OUTPUT}-0"));
    let (broker, dir, setup) =
        common::start("side-by-side", &[INPUT, &uncached], &cached, PARTITIONS);
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let lines: Vec<String> = (0..LINES_PER_PARTITION)
            .map(|i| line(i * PARTITIONS as usize + p as usize))
            .collect();
        for w in lines.iter().flat_map(|l| l.split(' ')) {
            *want.entry(w.to_owned()).or_default() += 1;
        }
        let records: Vec<KeyValue> = lines
            .into_iter()
            .map(|l| (None, Some(Bytes::from(l))))
            .collect();
        setup.produce_to(INPUT, p, &records);
    }
    for (app, cache) in [("sbs-cached", "10485760"), ("sbs-uncached", "0")] {
        let output = format!("{OUTPUT}-{cache}");
        let addr = format!("127.0.0.1:{}", common::free_port());
        let flags = [
            "--batch-cores",
            "2",
            "--cache-max-bytes",
            cache,
            "--metrics-addr",
            &addr,
        ];
        let cfg = common::runtime_config(&broker.addr, &dir, app, "a", &flags);
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let a = setup.rt.spawn(baton_runtime::instance::run(
            cfg,
            topology(app, &output),
            shutdown,
        ));
        setup.await_equal(&want, &format!("{app}: words counted"), |s| {
            counted(s, &output)
        });
        let ran = side_by_side(&metrics(&addr));
        assert!(
            ran >= 2,
            "{app}: the backlog's first batches ran side by side: {ran}"
        );
        eprintln!(
            "{app}: {} lines, every word exact; {ran} batches side by side",
            LINES_PER_PARTITION * PARTITIONS as usize
        );
        stop.send(true).unwrap();
        common::await_shutdown(&setup, app, a);
    }
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
