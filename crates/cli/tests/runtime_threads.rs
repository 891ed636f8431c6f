//! Instances with several stream threads: tasks dealt over threads and moved between processes,
//! then a drain. Small state, so this runs in seconds.

mod harness;

use std::time::Duration;

use harness::{now_ms, Cluster, Producer, PARTITIONS};

#[test]
fn two_threaded_instances_scale_out_and_drain_without_losing_or_repeating_events() {
    let cluster = Cluster::new("threads");
    let mut producer = Producer::start(&cluster.broker.addr, "t-", 400, 40);
    let args = ["--threads", "2"];
    let mut a = cluster.spawn("a", &args);
    assert!(
        a.await_log(&["to=\"running\""], Duration::from_secs(60)),
        "a never ran"
    );
    std::thread::sleep(Duration::from_secs(2));
    let b = cluster.spawn("b", &args);
    assert!(
        b.await_log(&["to=\"running\""], Duration::from_secs(60)),
        "b never ran"
    );
    std::thread::sleep(Duration::from_secs(2));
    cluster.drain("a");
    assert!(
        a.await_exit(Duration::from_secs(60)),
        "a did not exit after the drain"
    );
    let since = now_ms();
    std::thread::sleep(Duration::from_secs(2));
    let produced = producer.stop();
    let counts = cluster.await_counts(&produced, Duration::from_secs(60));
    assert_eq!(counts, produced, "every event counted exactly once");

    // Both threads of b hold tasks, and together all of them.
    let log = b.log_text();
    let threads_assigned = ["b-0", "b-1"].map(|t| {
        log.lines()
            .rfind(|l| l.contains(" assigned ") && l.contains(&format!("thread={t} ")))
            .map(|l| harness::field(l, "active").parse::<u32>().unwrap())
            .unwrap_or(0)
    });
    assert!(
        threads_assigned.iter().all(|&n| n > 0),
        "{threads_assigned:?}"
    );
    assert_eq!(threads_assigned.iter().sum::<u32>(), PARTITIONS);
    let out = cluster.read_output();
    assert!(out.values().all(|rows| rows.iter().any(|r| r.0 >= since)));
}
