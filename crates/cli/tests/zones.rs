//! Zones end to end, on the real broker: six `baton run` instances over three zones (client tag
//! `zone`, `rack.aware.assignment.tags = zone`) with one standby per task. Every task's standby
//! is in another zone than its active, so when both instances of one zone are killed at once,
//! every task still has a caught-up copy: the ones that ran there resume within the session
//! timeout plus 2 s, the others do not stop, and nothing is lost.
//!
//! Without the tags the layout is apart only by chance (each task's standby on one of five
//! other instances, four of them in other zones: about half the time; it failed 1 of 3 runs
//! so, 2026-12-01). The assignor's own tests prove the placement: the zone property test in
//! `crates/assignor/tests/properties.rs` and the leader test in `crates/protocol/tests/leader.rs`
//! fail without it; this one proves the runtime carries the tags and survives the outage.

mod harness;

use std::time::{Duration, Instant};

use harness::{now_ms, Cluster, Instance, Producer, PARTITIONS};

/// Session timeout of the harness's instances.
const SESSION: Duration = Duration::from_millis(6000);

/// `(zone of the active, zones of the caught-up standbys)` per partition, when every partition
/// has exactly one active.
fn layout(instances: &[(String, Instance)]) -> Option<Vec<(String, Vec<String>)>> {
    (0..PARTITIONS as i32)
        .map(|p| {
            let active: Vec<&String> = instances
                .iter()
                .filter(|(_, i)| i.running().contains(&p))
                .map(|(z, _)| z)
                .collect();
            let standbys = instances
                .iter()
                .filter(|(_, i)| i.holds("standby", "tailing").contains(&p))
                .map(|(z, _)| z.clone())
                .collect();
            (active.len() == 1).then(|| (active[0].clone(), standbys))
        })
        .collect()
}

#[test]
fn a_zone_outage_leaves_every_task_a_caught_up_copy_elsewhere() {
    let cluster = Cluster::new("zones");
    let mut producer = Producer::start(&cluster.broker.addr, "z-", 200, 30);
    let mut instances: Vec<(String, Instance)> = (0..6)
        .map(|i| {
            let zone = format!("z{}", i % 3);
            let tag = format!("zone={zone}");
            let args = [
                "--num-standby-replicas",
                "1",
                "--rack",
                &zone,
                "--client-tag",
                &tag,
                "--rack-aware-assignment-tags",
                "zone",
            ];
            let instance = cluster.spawn(&format!("i{i}"), &args);
            (zone, instance)
        })
        .collect();
    cluster.await_all_processing(now_ms(), "zones: six instances");

    // Every partition: one active, a standby tailing, and no standby in the active's zone.
    let deadline = Instant::now() + Duration::from_secs(60);
    let before = loop {
        // The layout of the group of six, stable: the first instances can run every task
        // apart before the others have joined, and a kill then lands in the join round.
        let group = cluster.inspect_json();
        let whole =
            group["state"] == "Stable" && group["members"].as_array().is_some_and(|m| m.len() == 6);
        match layout(&instances) {
            Some(l) if whole && l.iter().all(|(a, s)| !s.is_empty() && !s.contains(a)) => break l,
            l => assert!(
                Instant::now() < deadline,
                "no zone-apart layout of the six in 60 s: {l:?}\n{group}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("zones: (active zone, standby zones) per partition: {before:?}");

    // Both instances of the zone that runs partition 0, killed at once.
    let lost = before[0].0.clone();
    let killed_at = now_ms();
    for (zone, i) in &mut instances {
        if *zone == lost {
            i.kill9();
        }
    }
    cluster.await_all_processing(killed_at + 1, "zones: after the outage");
    std::thread::sleep(Duration::from_secs(3));
    let gaps = cluster.longest_gaps(killed_at, now_ms());
    eprintln!("zones: zone {lost} lost; longest gap per partition since: {gaps:?}");
    let bound = SESSION.as_secs_f64() + 2.0;
    for (p, gap) in &gaps {
        assert!(
            *gap <= bound,
            "partition {p}: {gap} s without output (bound {bound} s)"
        );
        if before[*p as usize].0 != lost {
            // Its active was elsewhere: cooperative rebalancing keeps it running.
            assert!(
                *gap <= 1.5,
                "partition {p} did not move yet stopped {gap} s"
            );
        }
    }
    let duplicates = cluster.check_counts(&mut producer, "zones");
    eprintln!("zones: {duplicates} counted twice after the kills");
}
