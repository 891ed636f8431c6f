use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::topology::MemStores;

/// Kafka's `Murmur3Test.testMurmur3_128` (seed 123).
#[test]
fn hashes_as_kafkas_murmur3_test() {
    let cases: &[(&[u8], [i64; 2])] = &[
        (b"21", [5857341059704281894, -5288187638297930763]),
        (b"foobar", [-351361463397418609, 8959716011862540668]),
        (
            b"a-little-bit-long-string",
            [8836256500583638442, -198172363548498523],
        ),
        (
            b"a-little-bit-longer-string",
            [1838346159335108511, 8794688210320490705],
        ),
        (
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            [-4024021876037397259, -1482317706335141238],
        ),
        (b"abc", [1489494923063836066, -5440978547625122829]),
    ];
    for (data, want) in cases {
        assert_eq!(
            hash128_seeded(data, 123),
            *want,
            "{:?}",
            String::from_utf8_lossy(data)
        );
    }
}

/// `Murmur3.hash128(bytes)` with Kafka's default seed, as Kafka's class computed them (run
/// alone under Java 17 for these inputs).
#[test]
fn hashes_with_kafkas_default_seed() {
    let cases: &[(&[u8], [i64; 2])] = &[
        (b"", [-7122613646888064702, -8341524471658347240]),
        (b"21", [-1045175892060202657, -6196245913608550939]),
        (b"foobar", [-1926091222759195742, 2201308245896195406]),
        (b"lhsValue1|1", [8590612346232770178, -4937209874999635593]),
        (
            b"a-little-bit-longer-string",
            [-9104688182850110877, 769208487401143056],
        ),
        (
            &[0xFF, 0xAA, 0x00, 0x19],
            [-3955359579171119721, -1701350710745563829],
        ),
    ];
    for (data, want) in cases {
        assert_eq!(murmur3_hash128(data), *want, "{data:?}");
    }
}

#[test]
fn subscription_bytes_are_kafkas_v1_layout() {
    let hash = [1i64, -2];
    let bytes = subscription_bytes(Some(hash), Instruction::PropagateOnlyIfFkVal, b"pk", 7);
    let mut want = vec![1u8, 3];
    want.extend_from_slice(&1i64.to_be_bytes());
    want.extend_from_slice(&(-2i64).to_be_bytes());
    want.extend_from_slice(b"pk");
    want.extend_from_slice(&7i32.to_be_bytes());
    assert_eq!(bytes, want);
    let read = read_subscription(&bytes).unwrap();
    assert_eq!(
        read,
        Subscription {
            hash: Some(hash),
            instruction: Instruction::PropagateOnlyIfFkVal,
            primary_key: b"pk",
            primary_partition: Some(7),
        }
    );
    // Without a hash: the version's top bit, and no 16 bytes.
    let bytes = subscription_bytes(None, Instruction::DeleteKeyAndPropagate, b"pk", 0);
    assert_eq!(bytes, [0x81, 1, b'p', b'k', 0, 0, 0, 0]);
    assert_eq!(read_subscription(&bytes).unwrap().hash, None);
}

#[test]
fn reads_version_0_subscriptions_without_a_partition() {
    // `serializeV0`: no partition after the primary key.
    let bytes = [0x80, 2, b'k', b'1'];
    let read = read_subscription(&bytes).unwrap();
    assert_eq!(read.primary_key, b"k1");
    assert_eq!(read.primary_partition, None);
    assert_eq!(read.instruction, Instruction::PropagateNullIfNoFkVal);
}

#[test]
fn bad_subscriptions_and_responses_say_what_is_wrong() {
    let why = |b: &[u8]| read_subscription(b).unwrap_err();
    assert!(why(&[]).contains("empty"), "{}", why(&[]));
    assert!(why(&[1]).contains("no instruction"));
    assert!(why(&[1, 9]).contains("unknown instruction 9"));
    assert!(why(&[1, 0, 1, 2]).contains("hash cut short"));
    assert!(why(&[0x81, 0, 1]).contains("no partition"));
    assert!(why(&[0x82, 0, 1, 2, 3, 4]).contains("version 2"));
    assert!(read_response(&[]).unwrap_err().contains("empty"));
    assert!(read_response(&[0, 1]).unwrap_err().contains("cut short"));
    assert!(read_response(&[0x81]).unwrap_err().contains("version 1"));
}

#[test]
fn responses_are_kafkas_layout_and_an_empty_value_is_none() {
    let bytes = response_bytes(Some([3, 4]), Some(b"v"));
    let mut want = vec![0u8];
    want.extend_from_slice(&3i64.to_be_bytes());
    want.extend_from_slice(&4i64.to_be_bytes());
    want.push(b'v');
    assert_eq!(bytes, want);
    assert_eq!(
        read_response(&bytes).unwrap(),
        (Some([3, 4]), Some(&b"v"[..]))
    );
    assert_eq!(response_bytes(None, None), [0x80]);
    assert_eq!(read_response(&[0x80]).unwrap(), (None, None));
    // Kafka reads a value of no bytes as null.
    assert_eq!(
        read_response(&response_bytes(None, Some(b""))).unwrap(),
        (None, None)
    );
}

#[test]
fn combined_keys_are_kafkas_and_split_back() {
    let key = combined_key(b"fk", b"pk1");
    assert_eq!(key, [0, 0, 0, 2, b'f', b'k', b'p', b'k', b'1']);
    assert_eq!(split_combined_key(&key), Some((&b"fk"[..], &b"pk1"[..])));
    assert_eq!(split_combined_key(&[0, 0, 0, 9, 1]), None);
    assert_eq!(prefix_end(&[0, 1, 0xFF]), [0, 2]);
}

proptest! {
    /// Any bytes read as a subscription or a response give an answer or an error, never a
    /// panic, and what was written reads back.
    #[test]
    fn wrappers_read_any_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..40),
        pk in proptest::collection::vec(any::<u8>(), 0..10),
        hash in proptest::option::of(any::<[i64; 2]>()),
        partition in any::<i32>(),
    ) {
        let _ = read_subscription(&bytes);
        let _ = read_response(&bytes);
        let _ = split_combined_key(&bytes);
        let written = subscription_bytes(hash, Instruction::PropagateNullIfNoFkVal, &pk, partition);
        let read = read_subscription(&written).unwrap();
        prop_assert_eq!(read.hash, hash);
        prop_assert_eq!(read.primary_key, &pk[..]);
        prop_assert_eq!(read.primary_partition, Some(partition));
    }
}

/// A left value `"<name>:<foreign key>"`; no foreign key after the colon is Kafka's null.
fn fk_of(v: &[u8]) -> Option<Vec<u8>> {
    let v = std::str::from_utf8(v).unwrap();
    let fk = v.split_once(':').unwrap().1;
    (!fk.is_empty()).then(|| fk.as_bytes().to_vec())
}

const TASK: TaskId = TaskId {
    subtopology: 0,
    partition: 3,
};

/// What the subscribe step sends for an update `(new, old)`: `(foreign key, instruction,
/// whether a hash came along)`.
fn sent(left: bool, new: Option<&str>, old: Option<&str>) -> Vec<(String, Instruction, bool)> {
    let step = ForeignKeyStep::Subscribe {
        foreign_key: Arc::new(fk_of),
        left,
    };
    let r = StreamRecord {
        key: Bytes::from_static(b"pk"),
        value: new.map(|v| Bytes::from(v.to_owned())),
        timestamp: 5,
        old: old.map(|v| Bytes::from(v.to_owned())),
        partition: None,
    };
    let mut next = Vec::new();
    run(&step, TASK, r, &mut MemStores::default(), &mut next).unwrap();
    next.iter()
        .map(|r| {
            let s = read_subscription(r.value.as_deref().unwrap()).unwrap();
            assert_eq!((s.primary_key, s.primary_partition), (&b"pk"[..], Some(3)));
            assert_eq!(s.hash, new.map(|v| murmur3_hash128(v.as_bytes())));
            assert_eq!(r.timestamp, 5);
            let fk = String::from_utf8(r.key.to_vec()).unwrap();
            (fk, s.instruction, s.hash.is_some())
        })
        .collect()
}

/// Kafka's `SubscriptionSendProcessorSupplierTest`, case for case (a null foreign key goes
/// with an empty key).
#[test]
fn subscribes_as_kafkas_send_processor() {
    use Instruction::*;
    let one = |fk: &str, i| vec![(fk.to_owned(), i, true)];
    // leftJoinShouldPropagateNewPrimaryKeyWithNonNullFK, ...WithNullFK
    assert_eq!(
        sent(true, Some("a:fk1"), None),
        one("fk1", PropagateNullIfNoFkVal)
    );
    assert_eq!(
        sent(true, Some("a:"), None),
        one("", PropagateNullIfNoFkVal)
    );
    // leftJoinShouldPropagateChangeOfFKFromNonNullToNonNullValue
    assert_eq!(
        sent(true, Some("a:fk2"), Some("a:fk1")),
        [
            ("fk1".to_owned(), DeleteKeyAndPropagate, true),
            ("fk2".to_owned(), PropagateNullIfNoFkVal, true)
        ]
    );
    // leftJoinShouldPropagateNewRecordOfUnchangedFK
    assert_eq!(
        sent(true, Some("a:fk1"), Some("a:fk1")),
        one("fk1", PropagateNullIfNoFkVal)
    );
    // leftJoinShouldPropagateChangeOfFKFromNonNullToNullValue
    assert_eq!(
        sent(true, Some("a:"), Some("a:fk1")),
        [
            ("fk1".to_owned(), DeleteKeyAndPropagate, true),
            ("".to_owned(), PropagateNullIfNoFkVal, true)
        ]
    );
    // leftJoinShouldPropagateChangeFromNullFKToNonNullFKValue, ...NullFKToNullFKValue
    assert_eq!(
        sent(true, Some("a:fk1"), Some("a:")),
        one("fk1", PropagateNullIfNoFkVal)
    );
    assert_eq!(
        sent(true, Some("a:"), Some("b:")),
        one("", PropagateNullIfNoFkVal)
    );
    // leftJoinShouldPropagateDeletionOfAPrimaryKey, ...ThatHadNullFK
    assert_eq!(
        sent(true, None, Some("a:fk1")),
        [
            ("fk1".to_owned(), DeleteKeyAndPropagate, false),
            ("".to_owned(), PropagateNullIfNoFkVal, false)
        ]
    );
    assert_eq!(
        sent(true, None, Some("a:")),
        [("".to_owned(), PropagateNullIfNoFkVal, false)]
    );
    // leftJoinShouldPropagateNothingWhenOldAndNewLeftValueIsNull
    assert_eq!(sent(true, None, None), []);
    // innerJoinShouldPropagateNewPrimaryKey, ...NotPropagateNewPrimaryKeyWithNullFK
    assert_eq!(
        sent(false, Some("a:fk1"), None),
        one("fk1", PropagateOnlyIfFkVal)
    );
    assert_eq!(sent(false, Some("a:"), None), []);
    // innerJoinShouldDeleteOldAndPropagateNewFK
    assert_eq!(
        sent(false, Some("a:fk2"), Some("a:fk1")),
        [
            ("fk1".to_owned(), DeleteKeyNoPropagate, true),
            ("fk2".to_owned(), PropagateNullIfNoFkVal, true)
        ]
    );
    // innerJoinShouldPropagateNothingWhenOldAndNewFKIsNull
    assert_eq!(sent(false, Some("a:"), Some("b:")), []);
    // innerJoinShouldPropagateDeletionOfPrimaryKey, ...NothingWhenOldAndNewLeftValueIsNull
    assert_eq!(
        sent(false, None, Some("a:fk1")),
        [("fk1".to_owned(), DeleteKeyAndPropagate, false)]
    );
    assert_eq!(sent(false, None, None), []);
}

/// Both tables and the join's steps in one place: records go from step to step as they
/// would through the two topics, in order.
struct Join {
    stores: MemStores,
    left: bool,
    /// The result table as its updates left it.
    result: BTreeMap<String, String>,
    updates: usize,
}

impl Join {
    fn new(left: bool) -> Join {
        Join {
            stores: MemStores::default(),
            left,
            result: BTreeMap::new(),
            updates: 0,
        }
    }

    fn step(&mut self, step: ForeignKeyStep, r: StreamRecord) -> Vec<StreamRecord> {
        let mut next = Vec::new();
        run(&step, TASK, r, &mut self.stores, &mut next).unwrap();
        next
    }

    /// Sets a row of a table kept in `store`: the record its update passes on.
    fn upsert(&mut self, store: &str, key: &str, value: Option<&str>, ts: i64) -> StreamRecord {
        let old = stored_value(store, self.stores.get(store, key.as_bytes()).unwrap());
        match value {
            Some(v) => self
                .stores
                .put(store, key.as_bytes(), timestamped(ts, v.as_bytes())),
            None => self.stores.delete(store, key.as_bytes()),
        }
        StreamRecord {
            key: Bytes::from(key.to_owned()),
            value: value.map(|v| Bytes::from(v.to_owned())),
            timestamp: ts,
            old,
            partition: None,
        }
    }

    fn left_row(&mut self, key: &str, value: Option<&str>, ts: i64) {
        let r = self.upsert("left", key, value, ts);
        let subscribe = ForeignKeyStep::Subscribe {
            foreign_key: Arc::new(fk_of),
            left: self.left,
        };
        for sub in self.step(subscribe, r) {
            let receive = ForeignKeyStep::Receive {
                subscriptions: "subs".into(),
                foreign: "right".into(),
            };
            let answers = self.step(receive, sub);
            self.resolve(answers);
        }
    }

    fn right_row(&mut self, key: &str, value: Option<&str>, ts: i64) {
        let r = self.upsert("right", key, value, ts);
        let update = ForeignKeyStep::ForeignUpdate {
            subscriptions: "subs".into(),
        };
        let answers = self.step(update, r);
        self.resolve(answers);
    }

    fn resolve(&mut self, answers: Vec<StreamRecord>) {
        for a in answers {
            assert_eq!(
                a.partition,
                Some(3),
                "answers go back to the asking row's partition"
            );
            let step = ForeignKeyStep::Resolve {
                primary: "left".into(),
                left: self.left,
            };
            for r in self.step(step, a) {
                self.updates += 1;
                let key = String::from_utf8(r.key.to_vec()).unwrap();
                let text = |v: Option<&[u8]>| {
                    v.map_or("null".into(), |v| String::from_utf8_lossy(v).into_owned())
                };
                match r.value {
                    Some(v) => {
                        let pair = crate::topology::split_row_pair(&v).unwrap();
                        let joined = format!("({},{})", text(pair.left), text(pair.right));
                        self.result.insert(key, joined)
                    }
                    None => self.result.remove(&key),
                };
            }
        }
    }

    fn rows(&self) -> Vec<(&str, &str)> {
        self.result
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

/// The steps of Kafka's `KTableKTableForeignKeyJoinIntegrationTest` (`doJoinFromLeftThenDeleteLeftEntity`,
/// `doJoinFromRightThenDeleteRightEntity`), inner and left.
#[test]
fn joins_as_kafkas_integration_test() {
    let mut j = Join::new(false);
    j.right_row("rhs1", Some("rhsValue1"), 1);
    j.right_row("rhs2", Some("rhsValue2"), 2);
    assert_eq!(j.rows(), []);
    j.left_row("lhs1", Some("lhsValue1:rhs1"), 3);
    assert_eq!(j.rows(), [("lhs1", "(lhsValue1:rhs1,rhsValue1)")]);
    j.left_row("lhs2", Some("lhsValue2:rhs2"), 4);
    j.left_row("lhs3", Some("lhsValue3:rhs1"), 5);
    // The right row changes: both its subscribers join again.
    j.right_row("rhs1", Some("rhsValue1b"), 6);
    assert_eq!(
        j.rows(),
        [
            ("lhs1", "(lhsValue1:rhs1,rhsValue1b)"),
            ("lhs2", "(lhsValue2:rhs2,rhsValue2)"),
            ("lhs3", "(lhsValue3:rhs1,rhsValue1b)")
        ]
    );
    // A left row moves to another foreign key; one is deleted; a right row is deleted.
    j.left_row("lhs1", Some("lhsValue1:rhs2"), 7);
    j.left_row("lhs3", None, 8);
    j.right_row("rhs2", None, 9);
    assert_eq!(j.rows(), []);
    // A row with no right row is joined once one comes; one without a foreign key never.
    j.left_row("lhs4", Some("x:rhs9"), 10);
    j.left_row("lhs5", Some("y:"), 11);
    assert_eq!(j.rows(), []);
    j.right_row("rhs9", Some("nine"), 12);
    assert_eq!(j.rows(), [("lhs4", "(x:rhs9,nine)")]);
    // The subscriptions kept: lhs1 to rhs2, lhs2 to rhs2 (deleted rows keep theirs), lhs4 to rhs9.
    let subs: Vec<_> = j
        .stores
        .0
        .keys()
        .filter(|(s, _)| s == "subs")
        .map(|(_, k)| {
            split_combined_key(k)
                .map(|(f, p)| (f.to_vec(), p.to_vec()))
                .unwrap()
        })
        .collect();
    assert_eq!(
        subs,
        [
            (b"rhs2".to_vec(), b"lhs1".to_vec()),
            (b"rhs2".to_vec(), b"lhs2".to_vec()),
            (b"rhs9".to_vec(), b"lhs4".to_vec())
        ]
    );

    let mut j = Join::new(true);
    j.left_row("lhs1", Some("lhsValue1:rhs1"), 1);
    j.left_row("lhs2", Some("lhsValue2:"), 2);
    assert_eq!(
        j.rows(),
        [
            ("lhs1", "(lhsValue1:rhs1,null)"),
            ("lhs2", "(lhsValue2:,null)")
        ]
    );
    j.right_row("rhs1", Some("rhsValue1"), 3);
    assert_eq!(j.rows()[0], ("lhs1", "(lhsValue1:rhs1,rhsValue1)"));
    j.right_row("rhs1", None, 4);
    assert_eq!(j.rows()[0], ("lhs1", "(lhsValue1:rhs1,null)"));
    j.left_row("lhs1", None, 5);
    j.left_row("lhs2", None, 6);
    assert_eq!(j.rows(), []);
}

/// An answer to a row that changed since it asked is dropped: only the current one joins.
#[test]
fn stale_answers_are_dropped() {
    let mut j = Join::new(false);
    j.right_row("rhs1", Some("one"), 1);
    j.right_row("rhs2", Some("two"), 1);
    // lhs1 asks rhs1, then moves to rhs2 before the first answer comes back.
    let first = j.upsert("left", "lhs1", Some("a:rhs1"), 2);
    let subscribe = || ForeignKeyStep::Subscribe {
        foreign_key: Arc::new(fk_of),
        left: false,
    };
    let receive = || ForeignKeyStep::Receive {
        subscriptions: "subs".into(),
        foreign: "right".into(),
    };
    let asked = j.step(subscribe(), first);
    let stale: Vec<_> = asked
        .into_iter()
        .flat_map(|s| j.step(receive(), s))
        .collect();
    j.left_row("lhs1", Some("b:rhs2"), 3);
    assert_eq!(j.rows(), [("lhs1", "(b:rhs2,two)")]);
    let updates = j.updates;
    j.resolve(stale);
    assert_eq!(j.updates, updates, "the stale answer joined");
    assert_eq!(j.rows(), [("lhs1", "(b:rhs2,two)")]);
}
