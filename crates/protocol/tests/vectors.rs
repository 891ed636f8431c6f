//! Test vectors written out field by field from the byte layouts, one per version, checked in
//! both directions: our encoder must produce exactly these bytes, and decoding them must give
//! back the same value.

use baton_assignor::TaskId;
use baton_protocol::*;
use uuid::Uuid;

/// Concatenates hex fields (spaces ignored) into bytes.
fn hex(fields: &[&str]) -> Vec<u8> {
    let s: String = fields.concat().split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn t(s: &str) -> TaskId {
    s.parse().unwrap()
}

const PID: &str = "00112233445566778899aabbccddeeff";

fn subscription(version: i32) -> SubscriptionInfo {
    let sums = [
        TaskOffsetSum {
            task: t("0_0"),
            offset_sum: -2,
        },
        TaskOffsetSum {
            task: t("0_1"),
            offset_sum: 100,
        },
        TaskOffsetSum {
            task: t("1_2"),
            offset_sum: 7,
        },
    ];
    let mut s = SubscriptionInfo::build(
        version,
        12,
        Uuid::parse_str(PID).unwrap(),
        "host:9092",
        &sums,
        5,
        0,
    );
    if version >= 11 {
        s.client_tags = vec![ClientTag {
            key: "az".into(),
            value: "a".into(),
        }];
    }
    s
}

fn subscription_bytes(version: i32) -> Vec<u8> {
    let v = format!("{version:08x}");
    let endpoint = "00000009 686f73743a39303932"; // bytes "host:9092"
    let legacy_tasks = "00000001 00000000 00000000"; // prev: [0_0]
    let legacy_standbys = "00000002 00000000 00000001 00000001 00000002"; // standby: [0_1, 1_2]
    let grouped = concat!(
        "00000002",                                                              // 2 subtopologies
        "00000000 00000002 00000000 fffffffffffffffe 00000001 0000000000000064", // 0: p0 -2, p1 100
        "00000001 00000001 00000002 0000000000000007"                            // 1: p2 7
    );
    let flat = concat!(
        "00000003",
        "00000000 00000000 fffffffffffffffe ffff", // 0_0 -2, named topology null
        "00000000 00000001 0000000000000064 ffff", // 0_1 100
        "00000001 00000002 0000000000000007 ffff"  // 1_2 7
    );
    let unique = "05";
    let error = "00000000";
    let tags = "00000001 00000002 617a 00000001 61"; // az=a
    let latest = "0000000c";
    match version {
        1 => hex(&[&v, PID, legacy_tasks, legacy_standbys]),
        2 => hex(&[&v, PID, legacy_tasks, legacy_standbys, endpoint]),
        3..=6 => hex(&[&v, latest, PID, legacy_tasks, legacy_standbys, endpoint]),
        7 => hex(&[&v, latest, PID, endpoint, grouped]),
        8 => hex(&[&v, latest, PID, endpoint, grouped, unique]),
        9 => hex(&[&v, latest, PID, endpoint, grouped, unique, error]),
        10 => hex(&[&v, latest, PID, endpoint, flat, unique, error]),
        11 | 12 => hex(&[&v, latest, PID, endpoint, flat, unique, error, tags]),
        _ => unreachable!(),
    }
}

#[test]
fn subscription_vectors_every_version() {
    for version in 1..=12 {
        let value = subscription(version);
        let bytes = subscription_bytes(version);
        assert_eq!(value.encode().unwrap(), bytes, "encode v{version}");
        assert_eq!(
            SubscriptionInfo::decode(&bytes).unwrap(),
            value,
            "decode v{version}"
        );
    }
}

fn assignment(version: i32) -> AssignmentInfo {
    let tp = |topic: &str, partition| TopicPartition {
        topic: topic.into(),
        partition,
    };
    let host = HostInfo {
        host: "h".into(),
        port: 8080,
    };
    let mut a = AssignmentInfo::new(version, 12);
    a.active_tasks = vec![t("0_0"), t("1_2")];
    a.standby_tasks = vec![StandbyTask {
        task: t("0_1"),
        partitions: vec![tp("c", 1)],
    }];
    if version >= 2 {
        a.partitions_by_host = vec![HostPartitions {
            host: host.clone(),
            partitions: vec![tp("s", 0), tp("s", 2)],
        }];
    }
    if version >= 6 {
        a.standby_partitions_by_host = vec![HostPartitions {
            host,
            partitions: vec![tp("c", 1)],
        }];
    }
    if version >= 4 {
        a.error_code = error_code::SHUTDOWN_REQUESTED;
    }
    if version >= 7 {
        a.next_rebalance_ms = 1000;
    }
    if version >= 12 {
        a.warmup_tasks = vec![t("0_1")];
        a.handover_standbys = vec![t("1_2")];
    }
    a
}

fn assignment_bytes(version: i32) -> Vec<u8> {
    let v = format!("{version:08x}");
    let common = "0000000c";
    let named = version >= 10;
    let task = |sub: u32, part: u32| {
        format!(
            "{sub:08x} {part:08x} {}",
            if named { "00000000" } else { "" }
        )
    };
    let actives = format!("00000002 {} {}", task(0, 0), task(1, 2));
    let standbys = format!("00000001 {} 00000001 0001 63 00000001", task(0, 1)); // 0_1 -> [c-1]
    let host = "0001 68 00001f90"; // "h":8080
    let by_host_named = format!("00000001 {host} 00000002 0001 73 00000000 0001 73 00000002"); // h -> s-0, s-2
    let dict_v5 = "00000001 00000000 0001 73"; // {0: s}
    let by_host_v5 = format!("00000001 {host} 00000002 00000000 00000000 00000000 00000002");
    let dict = "00000002 00000000 0001 63 00000001 0001 73"; // {0: c, 1: s}, sorted by topic
    let by_host = format!("00000001 {host} 00000002 00000001 00000000 00000001 00000002");
    let standby_by_host = format!("00000001 {host} 00000001 00000000 00000001");
    let err = "00000004";
    let next = "00000000000003e8";
    let warmups = format!("00000001 {}", task(0, 1));
    let handovers = format!("00000001 {}", task(1, 2));
    match version {
        1 => hex(&[&v, &actives, &standbys]),
        2 => hex(&[&v, &actives, &standbys, &by_host_named]),
        3 => hex(&[&v, common, &actives, &standbys, &by_host_named]),
        4 => hex(&[&v, common, &actives, &standbys, &by_host_named, err]),
        5 => hex(&[&v, common, &actives, &standbys, dict_v5, &by_host_v5, err]),
        6 => hex(&[
            &v,
            common,
            &actives,
            &standbys,
            dict,
            &by_host,
            &standby_by_host,
            err,
        ]),
        7..=11 => hex(&[
            &v,
            common,
            &actives,
            &standbys,
            dict,
            &by_host,
            &standby_by_host,
            err,
            next,
        ]),
        12 => hex(&[
            &v,
            common,
            &actives,
            &standbys,
            dict,
            &by_host,
            &standby_by_host,
            err,
            next,
            &warmups,
            &handovers,
        ]),
        _ => unreachable!(),
    }
}

#[test]
fn assignment_vectors_every_version() {
    for version in 1..=12 {
        let value = assignment(version);
        let bytes = assignment_bytes(version);
        assert_eq!(value.encode().unwrap(), bytes, "encode v{version}");
        assert_eq!(
            AssignmentInfo::decode(&bytes).unwrap(),
            value,
            "decode v{version}"
        );
    }
}

#[test]
fn future_versions_read_only_the_header() {
    let bytes = hex(&["0000000d", "0000000d", "deadbeef"]);
    let s = SubscriptionInfo::decode(&bytes).unwrap();
    assert_eq!((s.version, s.latest_supported_version), (13, 13));
    assert!(s.is_future_version());
    let a = AssignmentInfo::decode(&bytes).unwrap();
    assert_eq!((a.version, a.commonly_supported_version), (13, 13));
}
