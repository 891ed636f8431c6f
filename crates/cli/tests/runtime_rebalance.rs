//! Processing goes on through rebalances, measured on the real broker with the output's record
//! timestamps per partition:
//!
//! 1. `kill -9` of one of three instances, restarted by a "supervisor" a second later without
//!    static membership (its new member's join starts a round that waits out the dead member's
//!    session): the survivors' partitions keep a longest gap of at most 0.5 s, and the dead
//!    member's partitions resume within the session timeout plus 2 s.
//!    With the record cache on (the default), whose output comes at each flush, the same with
//!    limits of 2.5 s and 9.5 s.
//! 2. Kafka's default timeouts (`heartbeat.interval.ms` 3000, `session.timeout.ms` 45000)
//!    through a scale-out 2 → 3 and a drain: a partition that does not move keeps a gap of at
//!    most 0.5 s, one that moves at most 1.5 s. Nothing crashes, so nothing may count twice.
//!
//! `BATON_BASELINE_BIN=path/to/baton` also runs both on that binary (an earlier build) and
//! reports its figures beside, without checking them.

mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use harness::{now_ms, Cluster, Instance, Producer, PARTITIONS, SETTLE};

const RATE: u64 = 300;
const KEYS: u64 = 60;

/// Who runs each partition now.
fn owners(instances: &[&Instance]) -> BTreeMap<i32, String> {
    let mut out = BTreeMap::new();
    for i in instances {
        for p in i.running() {
            out.insert(p, i.name.clone());
        }
    }
    out
}

/// Checks the figures, or only reports them (a baseline build).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Check,
    Report,
}

/// The gaps below are between output records, which the record cache (on by default) would
/// hold until each commit: these scenarios measure processing, record by record, without it.
const NO_CACHE: &[&str] = &["--cache-max-bytes", "0"];

/// How a kill scenario runs: its name (and the prefix of its keys), the instances' arguments,
/// and the longest output gap (seconds) allowed to a survivor's partition and to the killed
/// instance's.
struct KillRun {
    what: &'static str,
    args: &'static [&'static str],
    survivor: f64,
    killed: f64,
}

/// Without the cache: record by record.
const KILL: KillRun = KillRun {
    what: "kill -9 and restart",
    args: NO_CACHE,
    survivor: 0.5,
    killed: 6.0 + 2.0,
};

/// With the record cache (the default), whose output comes at each flush: every commit
/// (1 s) and, while a round holds commits back, every commit interval and a half.
const KILL_CACHED: KillRun = KillRun {
    what: "kill -9 and restart, cached",
    args: &[],
    survivor: 2.5,
    killed: 6.0 + 2.0 + 1.5,
};

fn kill_and_supervised_restart(cluster: &Cluster, mode: Mode, run: &KillRun) {
    let what = run.what;
    let mut a = cluster.spawn("a", run.args);
    let mut b = cluster.spawn("b", run.args);
    let mut c = cluster.spawn("c", run.args);
    let prefix = format!("{}-", what.replace(' ', "_"));
    let mut producer = Producer::start(&cluster.broker.addr, &prefix, RATE, KEYS);
    cluster.await_all_processing(now_ms(), what);
    std::thread::sleep(Duration::from_secs(4));
    let before = owners(&[&a, &b, &c]);
    let dead: BTreeSet<i32> = c.running();
    assert!(!dead.is_empty(), "{what}: c runs nothing: {before:?}");
    let from = now_ms();
    c.kill9();
    std::thread::sleep(Duration::from_secs(1));
    let mut c = cluster.spawn("c", run.args);
    // The round waits out the dead member's 6 s session; leave room after it.
    std::thread::sleep(Duration::from_secs(14));
    cluster.await_all_processing(from + 13_000, what);
    let to = now_ms();
    let gaps = cluster.longest_gaps(from, to);
    let rebalances: Vec<f64> = [&a, &b]
        .iter()
        .flat_map(|i| i.rebalance_seconds())
        .collect();
    eprintln!(
        "{what}: owners before {before:?}, killed c ran {dead:?}; longest gap per partition {gaps:?}; \
         survivors' rebalances took up to {:.2} s",
        rebalances.iter().copied().fold(0.0, f64::max)
    );
    for (p, gap) in gaps.iter().filter(|_| mode == Mode::Check) {
        if dead.contains(p) {
            assert!(
                *gap <= run.killed,
                "{what}: partition {p} of the killed instance resumed after {gap} s"
            );
        } else {
            assert!(
                *gap <= run.survivor,
                "{what}: partition {p} of a survivor stopped for {gap} s"
            );
        }
    }
    cluster.check_counts(&mut producer, what);
    for i in [&mut a, &mut b, &mut c] {
        i.stop();
    }
}

fn kafka_defaults_scale_out_and_drain(cluster: &Cluster, mode: Mode) {
    let what = "Kafka's timeouts";
    let timeouts = (3000, 45_000);
    let mut a = cluster.spawn_timed("d", "d", timeouts, NO_CACHE);
    let mut b = cluster.spawn_timed("e", "e", timeouts, NO_CACHE);
    let mut producer = Producer::start(&cluster.broker.addr, "defaults-", RATE, KEYS);
    cluster.await_all_processing(now_ms(), what);
    std::thread::sleep(Duration::from_secs(4));
    let mut history = vec![owners(&[&a, &b])];
    let from = now_ms();
    let mut c = cluster.spawn_timed("f", "f", timeouts, NO_CACHE);
    assert!(
        c.await_log(&["task state", "role=\"active\"", "to=\"running\""], SETTLE),
        "{what}: f never ran a task"
    );
    std::thread::sleep(Duration::from_secs(8));
    history.push(owners(&[&a, &b, &c]));
    cluster.drain("d");
    assert!(
        a.await_exit(SETTLE),
        "{what}: d did not exit after the drain"
    );
    std::thread::sleep(Duration::from_secs(8));
    history.push(owners(&[&b, &c]));
    let to = now_ms();
    let gaps = cluster.longest_gaps(from, to);
    let moved: BTreeSet<i32> = (0..PARTITIONS as i32)
        .filter(|p| history.windows(2).any(|w| w[0].get(p) != w[1].get(p)))
        .collect();
    eprintln!("{what}: owners {history:?}; moved {moved:?}; longest gap per partition {gaps:?}");
    assert!(!moved.is_empty(), "{what}: nothing moved");
    for (p, gap) in gaps.iter().filter(|_| mode == Mode::Check) {
        let limit = if moved.contains(p) { 1.5 } else { 0.5 };
        assert!(
            *gap <= limit,
            "{what}: partition {p} (moved: {}) stopped for {gap} s",
            moved.contains(p)
        );
    }
    let duplicates = cluster.check_counts(&mut producer, what);
    if mode == Mode::Check {
        assert_eq!(
            duplicates, 0,
            "{what}: nothing crashed, so nothing may count twice"
        );
    }
    for i in [&mut b, &mut c] {
        i.stop();
    }
}

#[test]
fn processing_goes_on_through_rebalances() {
    let cluster = Cluster::new("gaps");
    kill_and_supervised_restart(&cluster, Mode::Check, &KILL);
    kafka_defaults_scale_out_and_drain(&cluster, Mode::Check);
    drop(cluster);
    let cluster = Cluster::new("gaps-cached");
    kill_and_supervised_restart(&cluster, Mode::Check, &KILL_CACHED);
    drop(cluster);
    if let Ok(bin) = std::env::var("BATON_BASELINE_BIN") {
        eprintln!("baseline: {bin}");
        let mut baseline = Cluster::new("baseline");
        baseline.bin = bin.into();
        kill_and_supervised_restart(&baseline, Mode::Report, &KILL);
        kafka_defaults_scale_out_and_drain(&baseline, Mode::Report);
    }
}
