//! Kafka's SubscriptionInfoTest and AssignmentInfoTest cases, re-expressed for Baton's codec.

use std::collections::BTreeSet;

use baton_assignor::TaskId;
use baton_protocol::subscription::{RUNNING, UNKNOWN};
use baton_protocol::*;
use uuid::Uuid;

fn t(s: &str) -> TaskId {
    s.parse().unwrap()
}

const UUID_1: u128 = 1;

fn offset_sums() -> Vec<TaskOffsetSum> {
    [
        ("0_0", RUNNING),
        ("0_1", RUNNING),
        ("1_0", RUNNING),
        ("1_1", 0),
        ("2_0", 10),
    ]
    .iter()
    .map(|&(task, offset_sum)| TaskOffsetSum {
        task: t(task),
        offset_sum,
    })
    .collect()
}

fn active() -> BTreeSet<TaskId> {
    ["0_0", "0_1", "1_0"].iter().map(|s| t(s)).collect()
}

fn standby() -> BTreeSet<TaskId> {
    ["1_1", "2_0"].iter().map(|s| t(s)).collect()
}

fn info(version: i32, latest: i32, endpoint: &str) -> SubscriptionInfo {
    SubscriptionInfo::build(
        version,
        latest,
        Uuid::from_u128(UUID_1),
        endpoint,
        &offset_sums(),
        0,
        0,
    )
}

fn round_trip(s: &SubscriptionInfo) -> SubscriptionInfo {
    SubscriptionInfo::decode(&s.encode().unwrap()).unwrap()
}

#[test]
fn should_throw_for_unknown_versions() {
    assert!(info(0, BATON_VERSION, "localhost:80").encode().is_err());
    assert!(info(BATON_VERSION + 1, BATON_VERSION, "localhost:80")
        .encode()
        .is_err());
}

#[test]
fn should_encode_and_decode_version_1_and_2() {
    let d = round_trip(&info(1, BATON_VERSION, "ignoredUserEndpoint:80"));
    assert_eq!(d.version, 1);
    assert_eq!(d.latest_supported_version, UNKNOWN_VERSION);
    assert_eq!(d.process_id, Uuid::from_u128(UUID_1));
    assert_eq!(
        d.prev_tasks.iter().copied().collect::<BTreeSet<_>>(),
        active()
    );
    assert_eq!(
        d.standby_tasks.iter().copied().collect::<BTreeSet<_>>(),
        standby()
    );
    assert_eq!(d.user_endpoint, "", "version 1 has no endpoint");

    let d = round_trip(&info(2, BATON_VERSION, "localhost:80"));
    assert_eq!(
        (d.version, d.latest_supported_version),
        (2, UNKNOWN_VERSION)
    );
    assert_eq!(d.user_endpoint, "localhost:80");
}

#[test]
fn should_encode_and_decode_version_3_to_6() {
    for version in 3..=6 {
        let d = round_trip(&info(version, BATON_VERSION, "localhost:80"));
        assert_eq!(d.version, version);
        assert_eq!(d.latest_supported_version, BATON_VERSION);
        assert_eq!(
            d.prev_tasks.iter().copied().collect::<BTreeSet<_>>(),
            active()
        );
        assert_eq!(
            d.standby_tasks.iter().copied().collect::<BTreeSet<_>>(),
            standby()
        );
        assert_eq!(d.user_endpoint, "localhost:80");
    }
}

#[test]
fn should_encode_and_decode_versions_5_and_up() {
    for version in 5..=BATON_VERSION {
        let i = info(version, BATON_VERSION, "localhost:80");
        assert_eq!(round_trip(&i), i, "v{version}");
    }
}

#[test]
fn should_allow_to_decode_future_supported_version() {
    let mut bytes = (BATON_VERSION + 1).to_be_bytes().to_vec();
    bytes.extend((BATON_VERSION + 1).to_be_bytes());
    bytes.extend([1, 2, 3]);
    let i = SubscriptionInfo::decode(&bytes).unwrap();
    assert_eq!(i.version, BATON_VERSION + 1);
    assert_eq!(i.latest_supported_version, BATON_VERSION + 1);
}

#[test]
fn should_encode_and_decode_smaller_latest_supported_version() {
    let i = info(
        KAFKA_LATEST_VERSION - 1,
        KAFKA_LATEST_VERSION - 1,
        "localhost:80",
    );
    assert_eq!(round_trip(&i), i);
}

#[test]
fn should_convert_task_offset_sums_to_task_sets_and_back() {
    // Version 7+: previous actives are the running (-2) entries.
    let i = round_trip(&info(7, BATON_VERSION, "localhost:80"));
    let sums = i.offset_sums();
    let running: BTreeSet<TaskId> = sums
        .iter()
        .filter(|e| e.offset_sum == RUNNING)
        .map(|e| e.task)
        .collect();
    let others: BTreeSet<TaskId> = sums
        .iter()
        .filter(|e| e.offset_sum != RUNNING)
        .map(|e| e.task)
        .collect();
    assert_eq!(running, active());
    assert_eq!(others, standby());
    assert_eq!(sums, offset_sums());

    // Older versions: previous actives become -2, standbys the unknown -3.
    let i = round_trip(&info(6, BATON_VERSION, "localhost:80"));
    let mut got: Vec<(TaskId, i64)> = i
        .offset_sums()
        .iter()
        .map(|e| (e.task, e.offset_sum))
        .collect();
    got.sort();
    let want = vec![
        (t("0_0"), RUNNING),
        (t("0_1"), RUNNING),
        (t("1_0"), RUNNING),
        (t("1_1"), UNKNOWN),
        (t("2_0"), UNKNOWN),
    ];
    assert_eq!(got, want);
}

#[test]
fn should_encode_and_decode_unique_field_error_code_and_tags() {
    let mut i = SubscriptionInfo::build(
        11,
        11,
        Uuid::from_u128(UUID_1),
        "localhost:80",
        &offset_sums(),
        42,
        3,
    );
    i.client_tags = vec![ClientTag {
        key: "rack".into(),
        value: "eu-1".into(),
    }];
    let d = round_trip(&i);
    assert_eq!((d.unique_field, d.error_code), (42, 3));
    assert_eq!(d.tag("rack"), Some("eu-1"));
    // Fields older versions cannot carry are refused rather than dropped.
    let mut old = i.clone();
    old.version = 8;
    assert!(old.encode().unwrap_err().to_string().contains("error_code"));
}

#[test]
fn assignment_next_rebalance_time_defaults_to_never_and_round_trips() {
    let a = AssignmentInfo::new(7, 7);
    assert_eq!(a.next_rebalance_ms, i64::MAX);
    let mut a = AssignmentInfo::new(KAFKA_LATEST_VERSION, KAFKA_LATEST_VERSION);
    a.next_rebalance_ms = 1_700_000_000_000;
    assert_eq!(
        AssignmentInfo::decode(&a.encode().unwrap())
            .unwrap()
            .next_rebalance_ms,
        1_700_000_000_000
    );
    let mut old = AssignmentInfo::new(6, 6);
    old.next_rebalance_ms = 5;
    assert!(
        old.encode().is_err(),
        "version 6 has no next rebalance time"
    );
}

#[test]
fn assignment_rejects_named_topologies_with_a_clear_error() {
    // v10: one active task 0_0 with a 1-char topology name "x".
    let bytes = [
        &10i32.to_be_bytes()[..],
        &10i32.to_be_bytes(),
        &1i32.to_be_bytes(),
        &0i32.to_be_bytes(),
        &0i32.to_be_bytes(),
        &1i32.to_be_bytes(),
        &[0, b'x'],
    ]
    .concat();
    let e = AssignmentInfo::decode(&bytes).unwrap_err().to_string();
    assert_eq!(e, "assignment v10: active task list at byte 20: named topology of 1 chars: named topologies are not supported");
}

#[test]
fn assignment_errors_say_field_and_offset() {
    // v7, commonly 7, 0 actives, 1 standby claiming 2^31-1 partitions.
    let bytes = [
        &7i32.to_be_bytes()[..],
        &7i32.to_be_bytes(),
        &0i32.to_be_bytes(),
        &1i32.to_be_bytes(),
        &0i32.to_be_bytes(),
        &0i32.to_be_bytes(),
        &i32::MAX.to_be_bytes(),
    ]
    .concat();
    let e = AssignmentInfo::decode(&bytes).unwrap_err().to_string();
    assert_eq!(e, "assignment v7: standby partitions at byte 24: length 2147483647 exceeds the 0 bytes that remain");
    assert!(AssignmentInfo::decode(&[0, 0, 0, 0])
        .unwrap_err()
        .to_string()
        .contains("0 is not a protocol version"));
}
