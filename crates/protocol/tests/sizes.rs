//! Sizes against the group protocol's 1 MiB limit (run with `--nocapture` for the figures in
//! docs/PROTOCOL.md).

use std::collections::BTreeMap;

use baton_assignor::{AssignmentConfig, Cluster, HighAvailabilityAssignor, TaskAssignor, TaskId};
use baton_protocol::bridge::*;
use baton_protocol::sizing::*;
use baton_protocol::*;
use uuid::Uuid;

const TASKS: u32 = 10_000;
const MEMBERS: u128 = 100;

fn topology() -> Topology {
    let mut subtopologies = BTreeMap::new();
    subtopologies.insert(
        0,
        Subtopology {
            source_topics: vec!["events".into()],
            changelog_topics: vec!["app-counts-changelog".into()],
            partitions: TASKS,
        },
    );
    Topology { subtopologies }
}

/// A v11 subscription reporting offset sums for `tasks` tasks.
pub fn subscription_with(tasks: u32) -> SubscriptionInfo {
    let sums: Vec<TaskOffsetSum> = (0..tasks)
        .map(|p| TaskOffsetSum {
            task: TaskId::new(0, p),
            offset_sum: 1_000_000 + p as i64,
        })
        .collect();
    SubscriptionInfo::build(
        11,
        11,
        Uuid::from_u128(7),
        "host-07.example.com:8080",
        &sums,
        3,
        0,
    )
}

#[test]
fn sizes_against_the_one_mib_limit() {
    let big = subscription_with(TASKS).encode().unwrap().len();
    println!("v11 subscription with {TASKS} offset sums: {big} bytes");
    assert!(big < GROUP_METADATA_LIMIT);

    // 100 members, each running 100 tasks with one standby each, with endpoints (interactive queries).
    let members: Vec<Member> = (0..MEMBERS)
        .map(|i| {
            let sums: Vec<TaskOffsetSum> = (0..TASKS)
                .filter(|p| (*p as u128) % MEMBERS == i || (*p as u128 + 1) % MEMBERS == i)
                .map(|p| TaskOffsetSum {
                    task: TaskId::new(0, p),
                    offset_sum: if p as u128 % MEMBERS == i { -2 } else { 0 },
                })
                .collect();
            let s = SubscriptionInfo::build(
                12,
                12,
                Uuid::from_u128(i + 1),
                &format!("host-{i:03}.example.com:8080"),
                &sums,
                0,
                0,
            );
            Member {
                member_id: format!("member-{i:03}"),
                subscription: s,
                owned_partitions: vec![],
                rack: None,
            }
        })
        .collect();
    let subs: usize = members
        .iter()
        .map(|m| m.subscription.encode().unwrap().len())
        .sum();
    let ends: BTreeMap<TopicPartition, i64> = (0..TASKS as i32)
        .map(|p| {
            (
                TopicPartition {
                    topic: "app-counts-changelog".into(),
                    partition: p,
                },
                0,
            )
        })
        .collect();
    let config = AssignmentConfig {
        num_standby_replicas: 1,
        ..AssignmentConfig::default()
    };
    let state = cluster_state(&members, &topology(), &ends, config).unwrap();
    let assignment = HighAvailabilityAssignor.assign(&Cluster::new(state).unwrap());
    let mut out = member_assignments(&members, &topology(), &assignment, "member-000", 0);
    let one = out["member-000"].info.encode().unwrap().len();
    let all = assignment_bytes(&out);
    println!("100-member group, {TASKS} tasks, 1 standby, endpoints set:");
    println!("  subscriptions {subs} bytes in all, one assignment {one} bytes, assignments {all} bytes in all");
    println!(
        "  group metadata {} bytes = {:.1}x the 1 MiB limit",
        subs + all,
        (subs + all) as f64 / GROUP_METADATA_LIMIT as f64
    );
    assert!(
        subs + all > GROUP_METADATA_LIMIT,
        "the host maps make this group too big"
    );

    let warning = fit_to_limit(subs, &mut out, GROUP_METADATA_LIMIT).expect("over the limit");
    let after = subs + assignment_bytes(&out);
    println!("  without host maps: {after} bytes ({warning})");
    assert!(after < GROUP_METADATA_LIMIT);
    assert!(out.values().all(|m| m.info.partitions_by_host.is_empty()));
}
