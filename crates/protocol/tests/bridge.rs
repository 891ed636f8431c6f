//! The bridge: subscriptions and end offsets in, assignor input out; assignor output in, one
//! `AssignmentInfo` per member out.

use std::collections::{BTreeMap, BTreeSet};

use baton_assignor::{
    AssignmentConfig, Cluster, HighAvailabilityAssignor, Lag, TaskAssignor, TaskId,
};
use baton_protocol::bridge::*;
use baton_protocol::*;
use uuid::Uuid;

fn t(s: &str) -> TaskId {
    s.parse().unwrap()
}

fn topology() -> Topology {
    let mut subtopologies = BTreeMap::new();
    subtopologies.insert(
        0,
        Subtopology {
            source_topics: vec!["in".into()],
            changelog_topics: vec!["app-counts-changelog".into()],
            partitions: 4,
        },
    );
    subtopologies.insert(
        1,
        Subtopology {
            source_topics: vec!["other".into()],
            changelog_topics: vec![],
            partitions: 2,
        },
    );
    Topology { subtopologies }
}

fn ends() -> BTreeMap<TopicPartition, i64> {
    (0..4)
        .map(|p| {
            (
                TopicPartition {
                    topic: "app-counts-changelog".into(),
                    partition: p,
                },
                1000,
            )
        })
        .collect()
}

fn member(
    id: &str,
    pid: u128,
    version: i32,
    sums: &[(&str, i64)],
    tags: &[(&str, &str)],
) -> Member {
    let sums: Vec<TaskOffsetSum> = sums
        .iter()
        .map(|&(task, offset_sum)| TaskOffsetSum {
            task: t(task),
            offset_sum,
        })
        .collect();
    let mut s = SubscriptionInfo::build(
        version,
        BATON_VERSION.min(version.max(3)),
        Uuid::from_u128(pid),
        &format!("host{pid}:80"),
        &sums,
        0,
        0,
    );
    if version >= 11 {
        s.client_tags = tags
            .iter()
            .map(|&(k, v)| ClientTag {
                key: k.into(),
                value: v.into(),
            })
            .collect();
    }
    Member {
        member_id: id.into(),
        subscription: s,
        owned_partitions: vec![],
        rack: None,
    }
}

#[test]
fn subscriptions_become_clients_with_kafka_lags() {
    let members = vec![
        member(
            "m1",
            1,
            12,
            &[("0_0", -2), ("0_1", 990), ("0_2", 5000)],
            &[],
        ),
        member(
            "m2",
            1,
            12,
            &[("0_0", -2), ("0_1", 990), ("0_2", 5000)],
            &[],
        ),
        member(
            "m3",
            2,
            12,
            &[("0_3", 10)],
            &[(TAG_LEAVING, "true"), (TAG_WARMUPS, "0_3")],
        ),
    ];
    let state = cluster_state(&members, &topology(), &ends(), AssignmentConfig::default()).unwrap();
    assert_eq!(state.tasks.len(), 6);
    assert_eq!(state.tasks.iter().filter(|t| t.stateful).count(), 4);
    let c1 = &state.clients[0];
    assert_eq!(c1.capacity, 2, "two consumers of one process");
    assert_eq!(c1.lags[&t("0_0")], Lag::Running);
    assert_eq!(c1.lags[&t("0_1")], Lag::Behind(10));
    assert_eq!(
        c1.lags[&t("0_2")],
        Lag::Behind(1000),
        "a sum above the end means corrupt state"
    );
    assert_eq!(c1.owned_active, BTreeSet::from([t("0_0")]));
    let c2 = &state.clients[1];
    assert!(c2.leaving);
    assert_eq!(c2.owned_warmup, BTreeSet::from([t("0_3")]));
    assert_eq!(c2.lags[&t("0_3")], Lag::Behind(990));

    let mut missing = ends();
    missing.remove(&TopicPartition {
        topic: "app-counts-changelog".into(),
        partition: 2,
    });
    let e =
        cluster_state(&members, &topology(), &missing, AssignmentConfig::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no end offset for changelog partition app-counts-changelog-2"
    );
}

/// A member of process `pid` running all four tasks.
fn running_all(id: &str, pid: u128) -> Member {
    member(
        id,
        pid,
        12,
        &[("0_0", -2), ("0_1", -2), ("0_2", -2), ("0_3", -2)],
        &[],
    )
}

fn assign(members: &[Member]) -> BTreeMap<String, MemberAssignment> {
    // Changelogs of 1000 records: a client with no state is not caught up.
    assign_with(
        members,
        AssignmentConfig {
            acceptable_recovery_lag: 100,
            ..AssignmentConfig::default()
        },
    )
}

fn assign_with(members: &[Member], config: AssignmentConfig) -> BTreeMap<String, MemberAssignment> {
    let state = cluster_state(members, &topology(), &ends(), config).unwrap();
    let a = HighAvailabilityAssignor.assign(&Cluster::new(state).unwrap());
    member_assignments(members, &topology(), &a, "m1", 1_000)
}

#[test]
fn every_task_reaches_exactly_one_consumer_with_aligned_partitions() {
    let members = vec![
        member("m1", 1, 12, &[("0_0", -2), ("0_1", -2)], &[]),
        member("m2", 1, 12, &[("0_0", -2), ("0_1", -2)], &[]),
        member("m3", 2, 12, &[("0_2", -2), ("0_3", -2)], &[]),
    ];
    let out = assign(&members);
    let mut seen = BTreeMap::new();
    for (id, m) in &out {
        assert_eq!(
            m.info.active_tasks.len(),
            m.partitions.len(),
            "{id}: one task entry per partition"
        );
        for (task, tp) in m.info.active_tasks.iter().zip(&m.partitions) {
            assert_eq!(tp.partition as u32, task.partition);
            *seen.entry(*task).or_insert(0) += 1;
        }
        let mut sorted = m.partitions.clone();
        sorted.sort();
        assert_eq!(
            sorted, m.partitions,
            "{id}: partitions sorted by (topic, partition)"
        );
        assert_eq!(m.info.version, 12);
        // The bytes go out and come back intact.
        assert_eq!(
            AssignmentInfo::decode(&m.info.encode().unwrap()).unwrap(),
            m.info
        );
    }
    assert_eq!(seen.len(), 6);
    assert!(seen.values().all(|&n| n == 1));
    assert!(!out["m1"].info.partitions_by_host.is_empty());
}

#[test]
fn warm_ups_travel_in_v12_and_the_probe_goes_to_one_member() {
    // Process 2 joins with nothing: it warms up tasks of process 1.
    let members = vec![running_all("m1", 1), member("m3", 2, 12, &[], &[])];
    let out = assign(&members);
    let warm: Vec<TaskId> = out["m3"].info.warmup_tasks.clone();
    assert_eq!(warm.len(), 2, "max.warmup.replicas = 2");
    let standbys: Vec<TaskId> = out["m3"]
        .info
        .standby_tasks
        .iter()
        .map(|s| s.task)
        .collect();
    assert!(
        warm.iter().all(|w| standbys.contains(w)),
        "warm-ups are standbys on the wire"
    );
    assert_eq!(out["m1"].info.next_rebalance_ms, 1_000 + 600_000);
    assert_eq!(out["m3"].info.next_rebalance_ms, i64::MAX);

    // With a Kafka Streams (v11) member in the group, nobody gets v12: warm-ups are plain standbys.
    let mut members = members;
    members.push(member("k1", 3, 11, &[], &[]));
    let out = assign(&members);
    for m in out.values() {
        assert_eq!(m.info.version, 11);
        assert!(m.info.warmup_tasks.is_empty());
        assert!(m.info.encode().is_ok());
    }
}

#[test]
fn a_move_to_a_standby_holder_warms_it_up_without_budget() {
    // Process 2 holds standbys of 0_2 and 0_3, half restored: balance wants the actives there
    // once caught up. Both are listed as warm-ups, so the member's caught-up signal hands them
    // over, though the budget is one warm-up; none is a hand-over standby any more.
    let members = vec![
        running_all("m1", 1),
        member("m3", 2, 12, &[("0_2", 500), ("0_3", 500)], &[]),
    ];
    let out = assign_with(
        &members,
        AssignmentConfig {
            acceptable_recovery_lag: 100,
            num_standby_replicas: 1,
            max_warmup_replicas: 1,
            ..AssignmentConfig::default()
        },
    );
    let m3 = &out["m3"].info;
    assert_eq!(m3.warmup_tasks, vec![t("0_2"), t("0_3")]);
    assert!(m3.handover_standbys.is_empty(), "{m3:?}");
    assert_eq!(AssignmentInfo::decode(&m3.encode().unwrap()).unwrap(), *m3);
}

#[test]
fn version_negotiation_follows_kafka() {
    let members = vec![member("a", 1, 12, &[], &[]), member("b", 2, 7, &[], &[])];
    assert_eq!(
        negotiate(&members),
        Versions {
            used: 7,
            commonly_supported: 7
        }
    );
    let mut future = member("c", 3, 12, &[], &[]);
    future.subscription.version = 14;
    future.subscription.latest_supported_version = 14;
    let members = vec![member("a", 1, 12, &[], &[]), future];
    assert_eq!(
        negotiate(&members),
        Versions {
            used: 12,
            commonly_supported: 12
        }
    );
    let out = assign(&members);
    assert!(
        out["c"].partitions.is_empty(),
        "a future member waits for the next round"
    );
}

/// A leaving member's `baton.leaving.since` tag becomes how long it has been leaving, by the
/// leader's clock; a start ahead of that clock counts as now.
#[test]
fn the_leaving_since_tag_becomes_time_spent_leaving() {
    let members = vec![
        member("m1", 1, 12, &[], &[]),
        member(
            "m2",
            2,
            12,
            &[],
            &[(TAG_LEAVING, "true"), (TAG_LEAVING_SINCE, "1000")],
        ),
        member(
            "m3",
            3,
            12,
            &[],
            &[(TAG_LEAVING, "true"), (TAG_LEAVING_SINCE, "9000")],
        ),
    ];
    let cfg = AssignmentConfig::default();
    let state = cluster_state_at(&members, &topology(), &ends(), cfg.clone(), Some(5000)).unwrap();
    assert_eq!(state.clients[0].leaving_for_ms, None);
    assert_eq!(state.clients[1].leaving_for_ms, Some(4000));
    assert_eq!(state.clients[2].leaving_for_ms, Some(0));
    let without_clock = cluster_state(&members, &topology(), &ends(), cfg).unwrap();
    assert_eq!(without_clock.clients[1].leaving_for_ms, None);
}
