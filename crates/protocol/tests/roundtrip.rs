//! Round trips for every version, and untrusted bytes that must never panic or over-allocate.
//!
//! `BATON_FUZZ_CASES=N` raises the number of random byte strings (the long fuzz run in the
//! docs used it); the default keeps the suite fast.

use baton_assignor::TaskId;
use baton_protocol::*;
use proptest::prelude::*;
use uuid::Uuid;

fn task() -> impl Strategy<Value = TaskId> {
    (0u32..50, 0u32..500).prop_map(|(s, p)| TaskId::new(s, p))
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9._-]{0,12}",
        any::<String>().prop_map(|s| s.chars().take(8).collect()),
    ]
}

fn tp() -> impl Strategy<Value = TopicPartition> {
    (text(), any::<i32>()).prop_map(|(topic, partition)| TopicPartition { topic, partition })
}

fn host_map() -> impl Strategy<Value = Vec<HostPartitions>> {
    proptest::collection::vec(
        (
            (text(), any::<i32>()),
            proptest::collection::vec(tp(), 0..4),
        )
            .prop_map(|((host, port), partitions)| HostPartitions {
                host: HostInfo { host, port },
                partitions,
            }),
        0..3,
    )
}

fn subscription() -> impl Strategy<Value = SubscriptionInfo> {
    (
        1i32..=12,
        any::<i32>(),
        any::<u128>(),
        text(),
        proptest::collection::vec((task(), any::<i64>()), 0..20),
        any::<i8>(),
        any::<i32>(),
        proptest::collection::vec((text(), text()), 0..3),
    )
        .prop_map(|(v, latest, pid, endpoint, sums, unique, error, tags)| {
            let sums: Vec<TaskOffsetSum> = sums
                .into_iter()
                .map(|(task, offset_sum)| TaskOffsetSum { task, offset_sum })
                .collect();
            let mut s = SubscriptionInfo::build(
                v,
                latest,
                Uuid::from_u128(pid),
                &endpoint,
                &sums,
                unique,
                error,
            );
            if v >= 11 {
                s.client_tags = tags
                    .into_iter()
                    .map(|(key, value)| ClientTag { key, value })
                    .collect();
            }
            // v7-9 group entries by consecutive subtopology; decoding yields the same flat list.
            s
        })
}

fn assignment() -> impl Strategy<Value = AssignmentInfo> {
    (
        1i32..=12,
        any::<i32>(),
        proptest::collection::vec(task(), 0..20),
        proptest::collection::vec((task(), proptest::collection::vec(tp(), 0..3)), 0..5),
        host_map(),
        host_map(),
        any::<i32>(),
        any::<i64>(),
        proptest::collection::vec(task(), 0..4),
    )
        .prop_map(
            |(v, common, actives, standbys, by_host, standby_by_host, err, next, warmups)| {
                let mut a = AssignmentInfo::new(v, common);
                a.active_tasks = actives;
                a.standby_tasks = standbys
                    .into_iter()
                    .map(|(task, partitions)| StandbyTask { task, partitions })
                    .collect();
                if v >= 2 {
                    a.partitions_by_host = by_host;
                }
                if v >= 6 {
                    a.standby_partitions_by_host = standby_by_host;
                }
                if v >= 4 {
                    a.error_code = err;
                }
                if v >= 7 {
                    a.next_rebalance_ms = next;
                }
                if v >= 12 {
                    a.warmup_tasks = warmups;
                }
                a
            },
        )
}

fn fuzz_cases() -> u32 {
    std::env::var("BATON_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

/// Decoding must not panic; what it accepts must re-encode to something that decodes the same.
fn check_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(s) = SubscriptionInfo::decode(bytes) {
        if !s.is_future_version() {
            let again = SubscriptionInfo::decode(&s.encode().unwrap()).unwrap();
            prop_assert_eq!(again, s);
        }
    }
    if let Ok(a) = AssignmentInfo::decode(bytes) {
        if !a.is_future_version() {
            let again = AssignmentInfo::decode(&a.encode().unwrap()).unwrap();
            prop_assert_eq!(again, a);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn subscription_round_trips(s in subscription()) {
        let bytes = s.encode().unwrap();
        let back = SubscriptionInfo::decode(&bytes).unwrap();
        // v7-9 merge consecutive entries of a subtopology into one group, which is lossless.
        prop_assert_eq!(&back, &s);
        prop_assert_eq!(back.encode().unwrap(), bytes);
    }

    #[test]
    fn assignment_round_trips(a in assignment()) {
        let bytes = a.encode().unwrap();
        let back = AssignmentInfo::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &a);
        prop_assert_eq!(back.encode().unwrap(), bytes);
    }

    #[test]
    fn truncated_encodings_are_errors(s in subscription(), a in assignment(), cut in any::<prop::sample::Index>()) {
        let bytes = s.encode().unwrap();
        let n = cut.index(bytes.len());
        prop_assert!(SubscriptionInfo::decode(&bytes[..n]).is_err());
        let bytes = a.encode().unwrap();
        let n = cut.index(bytes.len());
        prop_assert!(AssignmentInfo::decode(&bytes[..n]).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: fuzz_cases(), ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_bytes(&bytes)?;
    }

    /// Valid encodings with bytes flipped: the interesting corner of the input space.
    #[test]
    fn mutated_encodings_never_panic(
        s in subscription(),
        a in assignment(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        for mut bytes in [s.encode().unwrap(), a.encode().unwrap()] {
            if bytes.is_empty() {
                continue;
            }
            for (i, b) in &flips {
                let i = i.index(bytes.len());
                bytes[i] = *b;
            }
            check_bytes(&bytes)?;
        }
    }
}

#[test]
fn a_tiny_blob_claiming_2_pow_31_tasks_is_an_error_not_an_allocation() {
    // v7 assignment: version, commonly supported, then an active count of i32::MAX.
    let mut bytes = vec![0, 0, 0, 7, 0, 0, 0, 7, 0x7f, 0xff, 0xff, 0xff];
    bytes.extend([0u8; 8]);
    let e = AssignmentInfo::decode(&bytes).unwrap_err();
    assert_eq!(
        e.to_string(),
        "assignment v7: active task list at byte 8: length 2147483647 exceeds the 8 bytes that remain"
    );
}

/// Kafka writes the host maps' topic dictionary in hash-map order, and its indexes need not
/// run in order: here `b` is 1 and comes first, `a` is 0. The bytes must come back identical.
#[test]
fn a_dictionary_out_of_order_re_encodes_to_the_same_bytes() {
    fn utf(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u16).to_be_bytes());
        out.extend(s.as_bytes());
    }
    let mut b = Vec::new();
    b.extend(6i32.to_be_bytes()); // version
    b.extend(6i32.to_be_bytes()); // commonly supported
    b.extend(0i32.to_be_bytes()); // actives
    b.extend(0i32.to_be_bytes()); // standbys
    b.extend(2i32.to_be_bytes()); // dictionary
    b.extend(1i32.to_be_bytes());
    utf(&mut b, "b-topic");
    b.extend(0i32.to_be_bytes());
    utf(&mut b, "a-topic");
    b.extend(1i32.to_be_bytes()); // partitions by host: one host
    utf(&mut b, "host");
    b.extend(9092i32.to_be_bytes());
    b.extend(2i32.to_be_bytes());
    for (topic, partition) in [(1i32, 3i32), (0, 4)] {
        b.extend(topic.to_be_bytes());
        b.extend(partition.to_be_bytes());
    }
    b.extend(0i32.to_be_bytes()); // standby partitions by host
    b.extend(0i32.to_be_bytes()); // error code
    let a = AssignmentInfo::decode(&b).unwrap();
    assert_eq!(
        a.partitions_by_host[0].partitions,
        vec![
            TopicPartition::new("b-topic", 3),
            TopicPartition::new("a-topic", 4)
        ]
    );
    assert_eq!(a.encode().unwrap(), b, "identical bytes");
    // Through JSON too, as `baton decode` then `baton encode` do.
    let json = serde_json::to_string(&a).unwrap();
    let again: AssignmentInfo = serde_json::from_str(&json).unwrap();
    assert_eq!(again.encode().unwrap(), b);
    // A dictionary that misses a topic of the host maps is refused, not guessed.
    let mut bad = a.clone();
    bad.topic_dictionary.pop();
    assert!(bad
        .encode()
        .unwrap_err()
        .to_string()
        .contains("topic_dictionary"));
}
