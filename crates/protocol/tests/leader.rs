//! The leader's pipeline as one function: JoinGroup metadata in, SyncGroup blobs out.

use std::collections::BTreeMap;

use baton_assignor::{AssignmentConfig, AssignorKind, TaskId};
use baton_protocol::bridge::{Subtopology, Topology};
use baton_protocol::consumer::ConsumerSubscription;
use baton_protocol::leader::{decode_assignment, lead, JoinedMember, LeaderInput};
use baton_protocol::sizing::GROUP_METADATA_LIMIT;
use baton_protocol::{SubscriptionInfo, TaskOffsetSum, TopicPartition, BATON_VERSION};
use uuid::Uuid;

fn topology(partitions: u32) -> Topology {
    Topology {
        subtopologies: BTreeMap::from([(
            0,
            Subtopology {
                source_topics: vec!["in".into()],
                changelog_topics: vec!["app-counts-changelog".into()],
                partitions,
            },
        )]),
    }
}

fn ends(partitions: u32, end: i64) -> BTreeMap<TopicPartition, i64> {
    (0..partitions as i32)
        .map(|p| {
            (
                TopicPartition {
                    topic: "app-counts-changelog".into(),
                    partition: p,
                },
                end,
            )
        })
        .collect()
}

fn tp(p: i32) -> TopicPartition {
    TopicPartition {
        topic: "in".into(),
        partition: p,
    }
}

/// A member's JoinGroup metadata: offset sums, owned partitions, and its generation.
fn joined(
    id: &str,
    pid: u128,
    sums: &[(u32, i64)],
    owned: &[i32],
    generation: i32,
) -> JoinedMember {
    joined_at(
        BATON_VERSION,
        BATON_VERSION,
        id,
        pid,
        sums,
        owned,
        generation,
    )
}

/// As [`joined`], subscribing at `version` and reading at most `latest`.
fn joined_at(
    version: i32,
    latest: i32,
    id: &str,
    pid: u128,
    sums: &[(u32, i64)],
    owned: &[i32],
    generation: i32,
) -> JoinedMember {
    let sums: Vec<TaskOffsetSum> = sums
        .iter()
        .map(|&(p, offset_sum)| TaskOffsetSum {
            task: TaskId::new(0, p),
            offset_sum,
        })
        .collect();
    let info = SubscriptionInfo::build(
        version,
        latest,
        Uuid::from_u128(pid),
        &format!("host-{pid}.example.com:8080"),
        &sums,
        0,
        0,
    );
    let sub = ConsumerSubscription {
        topics: vec!["in".into()],
        user_data: Some(info.encode().unwrap()),
        owned_partitions: owned.iter().map(|&p| tp(p)).collect(),
        generation_id: generation,
        rack_id: None,
    };
    JoinedMember {
        member_id: id.into(),
        metadata: sub.encode().unwrap(),
    }
}

fn input<'a>(
    members: &'a [JoinedMember],
    topology: &'a Topology,
    ends: &'a BTreeMap<TopicPartition, i64>,
) -> LeaderInput<'a> {
    LeaderInput {
        members,
        topology,
        end_offsets: Some(ends),
        config: AssignmentConfig::default(),
        assignor: AssignorKind::HighAvailability,
        leader_member_id: "a",
        now_ms: 1_000,
        metadata_limit: GROUP_METADATA_LIMIT,
        latest_version: BATON_VERSION,
        replica_racks: None,
    }
}

fn actives(blob: &[u8]) -> Vec<TaskId> {
    decode_assignment(blob).unwrap().1.active_tasks
}

#[test]
fn a_member_with_invalid_metadata_gets_nothing_and_the_rest_a_full_assignment() {
    let topology = topology(4);
    let ends = ends(4, 1000);
    let members = vec![
        joined("a", 1, &[(0, -2), (1, -2)], &[0, 1], 3),
        joined("b", 2, &[(2, -35)], &[], 3),
        JoinedMember {
            member_id: "c".into(),
            metadata: b"\x00\x03garbage!!".to_vec(),
        },
        joined("d", 4, &[(2, -2), (3, -2)], &[2, 3], 3),
    ];
    let out = lead(&input(&members, &topology, &ends));
    let rejected: Vec<&str> = out.rejected.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(rejected, ["c", "b"]);
    assert!(
        out.rejected[1].1.contains("task 0_2"),
        "names the field: {:?}",
        out.rejected[1]
    );
    assert!(out.assignments["b"].is_empty());
    assert!(out.assignments["c"].is_empty());
    let mut all: Vec<TaskId> = [
        actives(&out.assignments["a"]),
        actives(&out.assignments["d"]),
    ]
    .concat();
    all.sort();
    assert_eq!(all, (0..4).map(|p| TaskId::new(0, p)).collect::<Vec<_>>());
}

/// A moving active goes to its new owner only once the old owner has released it: this round
/// it is a standby there, and the old owner's next subscription no longer claims it.
#[test]
fn a_moving_active_waits_for_its_owner_to_release_it() {
    let topology = topology(4);
    let ends = ends(4, 1000);
    // `a` runs all four; `b` has caught-up copies of 2 and 3: balance moves two of them.
    let round1 = vec![
        joined(
            "a",
            1,
            &[(0, -2), (1, -2), (2, -2), (3, -2)],
            &[0, 1, 2, 3],
            5,
        ),
        joined("b", 2, &[(2, 1000), (3, 1000)], &[], 5),
    ];
    let out = lead(&input(&round1, &topology, &ends));
    let moved = out.deferred.clone();
    assert_eq!(moved.len(), 2, "two actives move: {moved:?}");
    let b = decode_assignment(&out.assignments["b"]).unwrap().1;
    assert!(b.active_tasks.is_empty(), "held back: {:?}", b.active_tasks);
    for t in &moved {
        assert!(
            b.standby_tasks.iter().any(|s| s.task == *t),
            "{t} tails on b meanwhile"
        );
    }
    let a = actives(&out.assignments["a"]);
    assert_eq!(a.len(), 2);
    for id in ["a", "b"] {
        let info = decode_assignment(&out.assignments[id]).unwrap().1;
        assert_eq!(
            info.next_rebalance_ms, 1_000,
            "{id} rejoins at once for the hand-over"
        );
    }
    assert!(moved.iter().all(|t| !a.contains(t)), "revoked from a");

    // a released them and rejoined: the next round hands them over.
    let kept: Vec<i32> = a.iter().map(|t| t.partition as i32).collect();
    let mut sums: Vec<(u32, i64)> = a.iter().map(|t| (t.partition, -2)).collect();
    sums.extend(moved.iter().map(|t| (t.partition, 1000)));
    let round2 = vec![
        joined("a", 1, &sums, &kept, 6),
        joined("b", 2, &[(2, 1000), (3, 1000)], &[], 6),
    ];
    let out = lead(&input(&round2, &topology, &ends));
    assert!(out.deferred.is_empty());
    let mut b = actives(&out.assignments["b"]);
    b.sort();
    assert_eq!(b, moved, "the same tasks, now active on b");
}

#[test]
fn a_leader_pinned_to_v11_reads_a_v12_member_by_its_header_only() {
    // As Kafka Streams 3.x leads: it cannot read version 12, so that member is a client without
    // state (its offset sums unread), answered at version 11 so it probes down.
    let topology = topology(4);
    let ends = ends(4, 100_000);
    let members = |c_owns: &[i32]| {
        [
            // a also holds a caught-up copy of 0_3: it runs 0_3 while c restores.
            joined_at(
                11,
                11,
                "a",
                1,
                &[(0, 100_000), (1, 100_000), (3, 100_000)],
                &[],
                1,
            ),
            joined_at(11, BATON_VERSION, "b", 2, &[(2, 100_000)], &[], 1),
            joined_at(
                BATON_VERSION,
                BATON_VERSION,
                "c",
                3,
                &[(3, 100_000)],
                c_owns,
                1,
            ),
        ]
    };
    let pinned = |members: &[JoinedMember]| {
        let out = lead(&LeaderInput {
            latest_version: 11,
            ..input(members, &topology, &ends)
        });
        let info = |m: &str| decode_assignment(&out.assignments[m]).unwrap().1;
        for m in ["a", "b", "c"] {
            let i = info(m);
            assert_eq!((i.version, i.commonly_supported_version), (11, 11), "{m}");
        }
        let runs_0_3 = ["a", "b"]
            .into_iter()
            .filter(|m| info(m).active_tasks.contains(&TaskId::new(0, 3)))
            .count();
        (info("c"), runs_0_3, out.deferred)
    };
    let (c, _, _) = pinned(&members(&[]));
    assert!(c.active_tasks.is_empty(), "c's state is unread: {c:?}");
    assert!(
        !c.standby_tasks.is_empty(),
        "c warms up as a client without state"
    );
    // What it owns (consumer protocol, readable) is held back from the others until it has
    // released it: 0_3 never runs on two members at once.
    let (_, others, deferred) = pinned(&members(&[3]));
    assert_eq!(others, 0);
    assert_eq!(deferred, vec![TaskId::new(0, 3)]);

    // Under a leader that reads 12, c's offset sums count: it is caught up on 0_3.
    let unpinned = members(&[]);
    let out = lead(&input(&unpinned, &topology, &ends));
    let (_, c) = decode_assignment(&out.assignments["c"]).unwrap();
    assert_eq!((c.version, c.commonly_supported_version), (11, 11));
    assert!(c.active_tasks.contains(&TaskId::new(0, 3)), "{c:?}");
}

#[test]
fn ownership_claimed_from_an_older_generation_does_not_count() {
    let topology = topology(2);
    let ends = ends(2, 0);
    // `z` was fenced at generation 3 and still claims both partitions; `y` is current.
    // Balance gives `y` one of them: a claim that counted would hold it back.
    let members = vec![joined("y", 1, &[], &[], 4), joined("z", 2, &[], &[0, 1], 3)];
    let out = lead(&input(&members, &topology, &ends));
    assert!(out.deferred.is_empty(), "a stale claim holds nothing back");
    assert_eq!(actives(&out.assignments["y"]).len(), 1);
}

#[test]
fn a_group_over_the_metadata_limit_is_trimmed_before_it_is_sent() {
    let partitions = 4000;
    let topology = topology(partitions);
    let ends = ends(partitions, 10);
    let members: Vec<JoinedMember> = (0..60)
        .map(|i| joined(&format!("m{i:02}"), i as u128 + 1, &[], &[], 1))
        .collect();
    let out = lead(&input(&members, &topology, &ends));
    let total: usize = members.iter().map(|m| m.metadata.len()).sum::<usize>()
        + out.assignments.values().map(Vec::len).sum::<usize>();
    assert!(total <= GROUP_METADATA_LIMIT, "{total} bytes");
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("exceeds the 1048576-byte limit")),
        "{:?}",
        out.warnings
    );
    let info = decode_assignment(&out.assignments["m00"]).unwrap().1;
    assert!(info.partitions_by_host.is_empty(), "host maps dropped");
    let assigned: usize = out.assignments.values().map(|b| actives(b).len()).sum();
    assert_eq!(assigned, partitions as usize, "every task still assigned");

    let small: Vec<JoinedMember> = members[..2].to_vec();
    let (eight, eight_ends) = (self::topology(8), self::ends(8, 10));
    let out = lead(&input(&small, &eight, &eight_ends));
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    assert!(!decode_assignment(&out.assignments["m00"])
        .unwrap()
        .1
        .partitions_by_host
        .is_empty());
}

#[test]
fn without_end_offsets_actives_stay_where_they_run() {
    let topology = topology(2);
    let members = vec![
        joined("a", 1, &[(0, -2)], &[0], 2),
        joined("b", 2, &[(1, -2)], &[1], 2),
    ];
    let none = BTreeMap::new();
    let mut i = input(&members, &topology, &none);
    i.end_offsets = None;
    let out = lead(&i);
    assert_eq!(actives(&out.assignments["a"]), vec![TaskId::new(0, 0)]);
    assert_eq!(actives(&out.assignments["b"]), vec![TaskId::new(0, 1)]);
    assert!(out.warnings[0].contains("end offsets unavailable"));
}

/// `client.rack` travels in the consumer subscription and client tags in Streams' (v11): the
/// leader gives the assignor each client's rack, so a task's standby lands on another rack.
#[test]
fn racks_reach_the_assignor_and_standbys_go_to_another_rack() {
    use baton_protocol::ClientTag;
    let topology = topology(4);
    let tags = [ClientTag {
        key: "zone".into(),
        value: "z1".into(),
    }];
    let member = |id: &str, pid: u128, rack: &str| reporting(&topology, id, pid, rack, &tags);
    // Two clients on each rack, four tasks, one standby each: every task's standby must sit
    // on the other rack than its active.
    let members = vec![
        member("m1", 1, "a"),
        member("m2", 2, "a"),
        member("m3", 3, "b"),
        member("m4", 4, "b"),
    ];
    let (sub, info) = baton_protocol::leader::decode_subscription(&members[0].metadata).unwrap();
    assert_eq!(sub.rack_id.as_deref(), Some("a"));
    assert_eq!(info.tag("zone"), Some("z1"));
    let ends = ends(4, 100);
    let config = AssignmentConfig {
        num_standby_replicas: 1,
        ..AssignmentConfig::default()
    };
    let out = lead(&LeaderInput {
        members: &members,
        topology: &topology,
        end_offsets: Some(&ends),
        assignor: AssignorKind::HighAvailability,
        config,
        leader_member_id: "m1",
        now_ms: 0,
        metadata_limit: GROUP_METADATA_LIMIT,
        latest_version: BATON_VERSION,
        replica_racks: None,
    });
    let rack_of = |m: &str| if m == "m1" || m == "m2" { "a" } else { "b" };
    assert_apart(&out, 4, rack_of);
}

/// A Baton member's JoinGroup metadata with nothing held: its rack and client tags only.
fn reporting(
    topology: &Topology,
    id: &str,
    pid: u128,
    rack: &str,
    tags: &[baton_protocol::ClientTag],
) -> JoinedMember {
    use baton_protocol::leader::{encode_subscription, MemberReport};
    JoinedMember {
        member_id: id.into(),
        metadata: encode_subscription(
            topology,
            &MemberReport {
                version: BATON_VERSION,
                latest_supported: BATON_VERSION,
                process_id: Uuid::from_u128(pid),
                user_endpoint: "",
                offset_sums: &[],
                leaving: false,
                leaving_since_ms: None,
                warmups: &[],
                owned: &[],
                generation: -1,
                unique: 0,
                rack: Some(rack),
                client_tags: tags,
            },
        ),
    }
}

/// Every task has one active and one standby, on different sides (`side_of` a member).
fn assert_apart(
    out: &baton_protocol::leader::LeaderOutput,
    tasks: usize,
    side_of: impl Fn(&str) -> &'static str,
) {
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let mut sides: BTreeMap<TaskId, (Vec<&str>, Vec<&str>)> = BTreeMap::new();
    for (member, bytes) in &out.assignments {
        let (_, info) = decode_assignment(bytes).unwrap();
        for t in &info.active_tasks {
            sides.entry(*t).or_default().0.push(side_of(member));
        }
        for s in &info.standby_tasks {
            sides.entry(s.task).or_default().1.push(side_of(member));
        }
    }
    assert_eq!(sides.len(), tasks);
    for (task, (active, standby)) in &sides {
        assert_eq!((active.len(), standby.len()), (1, 1), "{task}: {sides:?}");
        assert_ne!(
            active[0], standby[0],
            "{task}: active and standby on one side: {sides:?}"
        );
    }
}

/// Client tags reach the assignor: with `rack.aware.assignment.tags = zone`, on one rack, every
/// standby is in another zone than its active. Without the tags every member looks alike.
#[test]
fn client_tags_reach_the_assignor_and_standbys_go_to_another_zone() {
    use baton_protocol::ClientTag;
    let topology = topology(8);
    let zone_of = |m: &str| if m == "m1" || m == "m2" { "z1" } else { "z2" };
    let tags = |zone: &str| {
        [ClientTag {
            key: "zone".into(),
            value: zone.into(),
        }]
    };
    let member = |id: &str, pid: u128| reporting(&topology, id, pid, "a", &tags(zone_of(id)));
    let members: Vec<JoinedMember> = (1..=4).map(|i| member(&format!("m{i}"), i)).collect();
    let ends = ends(8, 100);
    let out = lead(&LeaderInput {
        config: AssignmentConfig {
            num_standby_replicas: 1,
            rack_aware_assignment_tags: vec!["zone".into()],
            ..AssignmentConfig::default()
        },
        ..input(&members, &topology, &ends)
    });
    assert_apart(&out, 8, zone_of);
}

/// The leader tells a warm-up that falls behind from one that catches up, across rounds.
#[test]
fn a_warm_up_that_falls_behind_is_reported() {
    use baton_protocol::leader::{stalled_warmups, WarmupSeen};
    let t = baton_assignor::TaskId::new(0, 3);
    let round = |lag| vec![("p1".to_owned(), t, lag)];
    let (w, seen) = stalled_warmups(&WarmupSeen::new(), &round(5_000), 1_000);
    assert!(w.is_empty(), "a first sample says nothing");
    let (w, seen) = stalled_warmups(&seen, &round(3_000), 61_000);
    assert!(w.is_empty(), "catching up");
    let (w, seen) = stalled_warmups(&seen, &round(4_000), 121_000);
    assert_eq!(w.len(), 1);
    assert!(
        w[0].contains("3000 -> 4000 records behind over 60 s"),
        "{}",
        w[0]
    );
    let (w, _) = stalled_warmups(&seen, &round(9_000), 181_000);
    assert!(
        w[0].contains("3000 -> 9000 records behind over 120 s"),
        "measured from the older sample: {}",
        w[0]
    );
    let (w, seen) = stalled_warmups(&seen, &[], 181_000);
    assert!(
        w.is_empty() && seen.is_empty(),
        "a finished warm-up is forgotten"
    );
}

/// With `rack.aware.assignment.strategy`, the leader lists each task's source partitions with
/// the racks of their replicas (from the broker's Metadata), and a new task runs where its
/// partition has a replica.
#[test]
fn replica_racks_reach_the_assignor_and_actives_read_locally() {
    let topology = topology(4);
    let member = |id: &str, pid: u128, rack: &str| reporting(&topology, id, pid, rack, &[]);
    let members = vec![member("m1", 1, "a"), member("m2", 2, "b")];
    // Partitions 0 and 1 live on rack b, 2 and 3 on rack a.
    let racks: baton_protocol::bridge::ReplicaRacks = (0..4)
        .map(|p| {
            let rack = if p < 2 { "b" } else { "a" };
            (TopicPartition::new("in", p), [rack.to_owned()].into())
        })
        .collect();
    let ends = ends(4, 100);
    let mut i = input(&members, &topology, &ends);
    i.config.rack_aware_strategy = baton_assignor::RackStrategy::MinTraffic;
    let without = lead(&i);
    i.replica_racks = Some(&racks);
    let out = lead(&i);
    assert_eq!(
        actives(&out.assignments["m1"]),
        vec![TaskId::new(0, 2), TaskId::new(0, 3)]
    );
    assert_eq!(
        actives(&out.assignments["m2"]),
        vec![TaskId::new(0, 0), TaskId::new(0, 1)]
    );
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    assert_ne!(
        actives(&without.assignments["m1"]),
        actives(&out.assignments["m1"]),
        "the racks decided it"
    );
    // Without the racks of the replicas the leader says why racks were not weighed.
    assert!(
        without
            .warnings
            .iter()
            .any(|w| w.contains("no task lists its input partitions")),
        "{:?}",
        without.warnings
    );
}
