//! The runtime end to end on a real broker, with `baton run` instances as processes (so one
//! can be killed with SIGKILL). One broker and one preloaded changelog serve four phases in
//! turn; each phase has its own instances and event keys. The first two instances of a phase
//! start on the state directories of the phase before, so only the first phase pays for their
//! restores; the instance that joins always starts empty:
//!
//! 1. scale out 2 → 3 with `high-availability`: no stall beyond the rebalance + 2 s;
//! 2. the same with `sticky` (the pre-KIP-441 baseline): a stall of at least the restore;
//! 3. nothing lost: a SIGKILL during a warm-up, then a drain;
//! 4. a restart on the same state directory restores only the tail.
//!
//! The changelog is preloaded so a restore from scratch takes well over high-availability's
//! bound (at least twice the rebalance + 2 s): 40 M records per partition by default
//! (`BATON_E2E_STATE` overrides it), which restored in from under 10 s to 22 s on the machines seen.

mod harness;

use std::collections::BTreeMap;
use std::time::Duration;

use harness::{now_ms, Cluster, Instance, Producer, PARTITIONS, SETTLE};

const APP: &str = "e2e";
/// Events per second from the steady producer.
const RATE: u64 = 300;
const KEYS: u64 = 60;

fn state_records() -> u64 {
    std::env::var("BATON_E2E_STATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40_000_000)
}

struct ScaleOut {
    /// The longest time between two heartbeats of the joining instance, which bulk-loads its
    /// copies meanwhile.
    heartbeat_gap: f64,
    max_gap: f64,
    gaps: BTreeMap<i32, f64>,
    rebalance: f64,
    /// The joining instance's catch-up: (task, records, seconds) of each restore with records.
    restores: Vec<(String, u64, f64)>,
}

/// Two instances process a steady stream; a third joins. Measures, per input partition, the
/// longest gap between processed records from the join to the end.
fn scale_out(cluster: &Cluster, assignor: &str) -> ScaleOut {
    let what = format!("scale out ({assignor})");
    let args = ["--assignor", assignor];
    let mut a = cluster.spawn_on(&format!("{assignor}-a"), "a", &args);
    let mut b = cluster.spawn_on(&format!("{assignor}-b"), "b", &args);
    let mut producer = Producer::start(&cluster.broker.addr, &format!("{assignor}-"), RATE, KEYS);
    cluster.await_all_processing(now_ms(), &format!("{what}: a and b"));
    std::thread::sleep(Duration::from_secs(3));
    let from = now_ms();
    let metrics_addr = free_addr();
    let c_args = [
        "--assignor",
        assignor,
        "--metrics-addr",
        metrics_addr.as_str(),
    ];
    let mut c = cluster.spawn(&format!("{assignor}-c"), &c_args);
    assert!(
        c.await_log(&["task state", "to=\"running\""], SETTLE),
        "{what}: c never ran a task"
    );
    std::thread::sleep(Duration::from_secs(5));
    let to = now_ms();
    let duplicates = cluster.check_counts(&mut producer, &what);
    assert_eq!(
        duplicates, 0,
        "{what}: nothing crashed, so nothing may count twice"
    );
    let gaps = cluster.longest_gaps(from, to);
    let heartbeat_gap = max_heartbeat_gap(&http_get(&metrics_addr, "/metrics"));
    let rebalance = [&a, &b, &c]
        .iter()
        .flat_map(|i| i.rebalance_seconds())
        .fold(0.0, f64::max);
    let restores = c
        .restores()
        .into_iter()
        .filter(|r| r.1 > 0)
        .map(|(t, n, _, s)| (t, n, s))
        .collect();
    for i in [&mut a, &mut b, &mut c] {
        i.stop();
    }
    ScaleOut {
        heartbeat_gap,
        max_gap: gaps.values().copied().fold(0.0, f64::max),
        gaps,
        rebalance,
        restores,
    }
}

/// SIGKILL of an active owner while a warm-up runs, then a drain: every event is counted.
fn nothing_lost(cluster: &Cluster) -> Instance {
    let what = "nothing lost";
    let mut x = cluster.spawn_on("x", "a", &[]);
    let mut y = cluster.spawn_on("y", "b", &[]);
    let mut producer = Producer::start(&cluster.broker.addr, "lost-", RATE, KEYS);
    cluster.await_all_processing(now_ms(), &format!("{what}: x and y"));
    // Static membership: its restart in the last phase takes its place back at once.
    let z = cluster.spawn("z", &["--static-membership"]);
    assert!(
        z.await_log(&["task state", "role=\"warmup\""], SETTLE),
        "{what}: z got no warm-up"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !z.log_text().contains("warm-up caught up"),
        "{what}: the warm-up finished before the kill; grow the state"
    );
    y.kill9();
    eprintln!("{what}: killed y during z's warm-up");
    let since = now_ms();
    cluster.await_all_processing(since, &format!("{what}: after the kill"));
    cluster.drain("x");
    assert!(
        x.await_exit(SETTLE),
        "{what}: x did not exit after the drain"
    );
    eprintln!("{what}: x drained and exited");
    cluster.await_all_processing(now_ms(), &format!("{what}: after the drain"));
    let duplicates = cluster.check_counts(&mut producer, what);
    eprintln!(
        "{what}: {duplicates} duplicates, from replaying what y processed after its last commit"
    );
    z
}

/// An instance killed and restarted on its state directory restores only the tail.
fn restart_restores_only_the_tail(cluster: &Cluster, mut z: Instance) {
    let what = "restart";
    let mut producer = Producer::start(&cluster.broker.addr, "restart-", RATE, KEYS);
    cluster.await_all_processing(now_ms(), what);
    z.kill9();
    std::thread::sleep(Duration::from_secs(2));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_addr = format!("127.0.0.1:{port}");
    let z = cluster.spawn_on(
        "z",
        "z",
        &["--static-membership", "--metrics-addr", &metrics_addr],
    );
    cluster.await_all_processing(now_ms(), &format!("{what}: after the restart"));
    let metrics = http_get(&metrics_addr, "/metrics");
    for task in ["0_0", "0_1", "0_2"] {
        let held = format!(
            "baton_task_held{{instance=\"z\",task=\"{task}\",role=\"active\",phase=\"running\"}} 1"
        );
        assert!(
            metrics.contains(&held),
            "{what}: /metrics lacks {held}:\n{metrics}"
        );
        assert!(
            metrics.contains(&format!(
                "baton_task_processed_records_total{{instance=\"z\",task=\"{task}\"}}"
            )),
            "{metrics}"
        );
    }
    // Progress you can watch: pending moves, and rebalance durations as a histogram by reason.
    for family in [
        "baton_pending_moves{instance=\"z\"} 0",
        "# TYPE baton_rebalance_duration_seconds histogram",
        "baton_rebalance_duration_seconds_bucket{instance=\"z\",reason=\"startup\",le=\"+Inf\"}",
        "# TYPE baton_task_eta_seconds gauge",
    ] {
        assert!(
            metrics.contains(family),
            "{what}: /metrics lacks {family}:\n{metrics}"
        );
    }
    cluster.check_counts(&mut producer, what);
    let restores = z.restores();
    let restored: u64 = restores.iter().map(|r| r.1).sum();
    let changelog: u64 = restores.iter().map(|r| r.2).sum();
    assert_eq!(restores.len(), PARTITIONS as usize, "{what}: {restores:?}");
    let share = restored as f64 / changelog as f64;
    eprintln!(
        "{what}: restored {restored} of {changelog} changelog records ({:.3}%)",
        share * 100.0
    );
    assert!(
        share < 0.05,
        "{what}: restored {:.1}% of the changelog",
        share * 100.0
    );
}

#[test]
fn runtime_end_to_end() {
    let cluster = Cluster::new(APP);
    let records = state_records();
    let secs = cluster.preload_state(records);
    eprintln!("preloaded {records} changelog records per partition in {secs:.1} s");

    let ha = scale_out(&cluster, "high-availability");
    let sticky = scale_out(&cluster, "sticky");
    let show = |name: &str, s: &ScaleOut| {
        eprintln!(
            "{name}: longest gap {:.2} s (per partition {:?}); longest rebalance {:.2} s; new instance caught up with {:?}; \
             its longest heartbeat gap {:.3} s (interval 0.3 s)",
            s.max_gap, s.gaps, s.rebalance, s.restores, s.heartbeat_gap
        )
    };
    show("high-availability", &ha);
    show("sticky", &sticky);
    let restore = sticky.restores.iter().map(|r| r.2).fold(0.0, f64::max);
    // The high-availability bound below must be one a stall for a restore would break. A fixed
    // floor did not hold across machines: 40 M records restored in 21.9 s on one and in under
    // 10 s on another.
    let ha_bound = ha.rebalance + 2.0;
    assert!(
        restore >= 2.0 * ha_bound,
        "a restore from scratch took only {restore:.1} s, under twice high-availability's bound \
         ({ha_bound:.2} s), so that bound could not tell a warm-up from a restore: grow BATON_E2E_STATE"
    );
    assert!(
        ha.max_gap <= ha_bound,
        "high-availability stalled {:.2} s (rebalance {:.2} s)",
        ha.max_gap,
        ha.rebalance
    );
    // Bulk loads run off the executor and heartbeats on their own task: a 40 M-record warm-up
    // (high-availability) or restore (sticky) never holds a heartbeat back. Before that split the
    // gap reached 4.55 s; a loaded 2-core machine adds a few hundred milliseconds of scheduling
    // noise (0.46 s seen in CI), so the bound is three intervals, far below the session timeout.
    for (name, s) in [("high-availability", &ha), ("sticky", &sticky)] {
        assert!(
            s.heartbeat_gap <= 3.0 * 0.3,
            "{name}: heartbeats {:.3} s apart during a bulk load (interval 0.3 s)",
            s.heartbeat_gap
        );
    }
    assert!(
        sticky.max_gap >= restore,
        "sticky stalled only {:.2} s for a {restore:.2} s restore",
        sticky.max_gap
    );

    let z = nothing_lost(&cluster);
    restart_restores_only_the_tail(&cluster, z);
}

/// A bare HTTP/1.1 GET; returns the body.
fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// The largest `baton_heartbeat_gap_max_seconds` sample of a `/metrics` page.
fn max_heartbeat_gap(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("baton_heartbeat_gap_max_seconds{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, f64::max)
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}
