use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record as WireRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use proptest::prelude::*;

use super::*;

/// One generated record: key, value, headers, timestamp delta.
type Spec = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
    i64,
);

fn wire(base: i64, specs: &[Spec], control: bool) -> Vec<WireRecord> {
    specs
        .iter()
        .enumerate()
        .map(|(i, (key, value, headers, ts))| WireRecord {
            transactional: control,
            control,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: if control { 7 } else { -1 },
            producer_epoch: if control { 0 } else { -1 },
            timestamp_type: TimestampType::Creation,
            offset: base + i as i64,
            // kafka-protocol starts a new batch wherever offset - sequence changes: this keeps
            // each spec list in one batch.
            sequence: i as i32 - 1,
            timestamp: 1_700_000_000_000 + ts,
            key: key.clone().map(Bytes::from),
            value: value.clone().map(Bytes::from),
            headers: headers
                .iter()
                .map(|(k, v)| (StrBytes::from_string(k.clone()), v.clone().map(Bytes::from)))
                .collect(),
        })
        .collect()
}

/// Batches of `batches`, one after another from offset `base`, each encoded by
/// `kafka-protocol`.
fn encode(base: i64, batches: &[(Vec<Spec>, bool)], compression: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    let mut at = base;
    for (specs, control) in batches {
        let records = wire(at, specs, *control);
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        at += specs.len() as i64;
    }
    buf.freeze()
}

/// The reference: every whole batch through `kafka-protocol`.
fn reference(bytes: &Bytes, from: i64) -> (Vec<Record>, Option<i64>) {
    let mut rest = bytes.clone();
    let (mut out, mut next) = (Vec::new(), None);
    while rest.len() >= LOG_OVERHEAD {
        let len = i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
        if rest.len() < LOG_OVERHEAD + len {
            break;
        }
        let end = through_kafka_protocol(rest.split_to(LOG_OVERHEAD + len), from, &mut out);
        if let Some(end) = end.unwrap() {
            next = Some(next.unwrap_or(from).max(end));
        }
    }
    (out, next)
}

fn batch_count(bytes: &Bytes) -> usize {
    let (mut rest, mut n) = (bytes.clone(), 0);
    while rest.len() >= LOG_OVERHEAD {
        let len = i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
        let _ = rest.split_to(LOG_OVERHEAD + len);
        n += 1;
    }
    n
}

fn spec() -> impl Strategy<Value = Spec> {
    let bytes = || proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40));
    (
        bytes(),
        bytes(),
        proptest::collection::vec(("[a-z]{0,6}", bytes()), 0..3),
        -1_000i64..1_000_000,
    )
}

fn batches() -> impl Strategy<Value = Vec<(Vec<Spec>, bool)>> {
    proptest::collection::vec(
        (
            proptest::collection::vec(spec(), 1..12),
            prop::bool::weighted(0.1),
        ),
        1..5,
    )
}

proptest! {
    /// The same records as `kafka-protocol`'s decoder, at any starting offset, and the same
    /// place to fetch from next.
    #[test]
    fn agrees_with_kafka_protocol(base in 0i64..1_000, batches in batches(), skip in 0i64..30) {
        let bytes = encode(base, &batches, Compression::None);
        prop_assert_eq!(batch_count(&bytes), batches.len(), "one batch per spec list");
        let d = decode_batches(Some(bytes.clone()), base + skip);
        prop_assert_eq!(d.corrupt, None);
        let (records, next) = (d.records, d.next_offset);
        let (want, want_next) = reference(&bytes, base + skip);
        prop_assert_eq!(&records, &want);
        // A control batch has no data records for the reference to end on.
        let total: usize = batches.iter().map(|(s, _)| s.len()).sum();
        let last_is_data = !batches.last().unwrap().1;
        if last_is_data {
            prop_assert_eq!(next, want_next);
        }
        prop_assert_eq!(next, Some((base + total as i64).max(base + skip)));
        // The list is sized for every record the batches declare, control ones too.
        prop_assert_eq!(records_hint(&bytes), total);
    }

    /// A fetch that ends inside a batch gives the whole batches before it, and the next
    /// fetch starts at the cut batch.
    #[test]
    fn a_cut_batch_is_left_for_the_next_fetch(batches in batches(), cut in 0usize..10_000) {
        let bytes = encode(0, &batches, Compression::None);
        let cut = cut % (bytes.len() + 1);
        let d = decode_batches(Some(bytes.slice(..cut)), 0);
        prop_assert_eq!(d.corrupt, None);
        let (records, next) = (d.records, d.next_offset);
        let mut whole = 0;
        let mut offset = 0i64;
        let mut rest = bytes.clone();
        while rest.len() >= LOG_OVERHEAD {
            let len = LOG_OVERHEAD + i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
            if whole + len > cut {
                break;
            }
            whole += len;
            offset = i64::from_be_bytes(rest[..8].try_into().unwrap())
                + i64::from(i32::from_be_bytes(rest[23..27].try_into().unwrap()))
                + 1;
            let _ = rest.split_to(len);
        }
        let (want, _) = reference(&bytes.slice(..whole), 0);
        prop_assert_eq!(records, want);
        prop_assert_eq!(next, (whole > 0).then_some(offset));
    }

    /// Damaged bytes give records or an error, never a panic.
    #[test]
    fn damage_is_an_error_not_a_panic(
        batches in batches(),
        hits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        skip_crc in any::<bool>(),
    ) {
        let mut bytes = encode(0, &batches, Compression::None).to_vec();
        for (at, b) in hits {
            let at = at % bytes.len();
            bytes[at] = b;
        }
        if skip_crc {
            // Reseal every whole batch, so the damage reaches the record parser.
            let mut at = 0;
            while bytes.len() - at >= LOG_OVERHEAD + V2_HEADER {
                let len = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap());
                let Some(len) = usize::try_from(len).ok().filter(|l| at + LOG_OVERHEAD + l <= bytes.len() && *l >= V2_HEADER) else {
                    break;
                };
                let crc = crc32c::crc32c(&bytes[at + CRC_START..at + LOG_OVERHEAD + len]);
                bytes[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
                at += LOG_OVERHEAD + len;
            }
        }
        prop_assert!(records_hint(&bytes) <= bytes.len() / MIN_RECORD, "no more than the bytes hold");
        let _ = decode_batches(Some(Bytes::from(bytes)), 0);
    }

    /// Arbitrary bytes, too.
    #[test]
    fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        prop_assert!(records_hint(&bytes) <= bytes.len() / MIN_RECORD);
        let _ = decode_batches(Some(Bytes::from(bytes)), 0);
    }
}

#[test]
fn compressed_batches_go_through_kafka_protocol() {
    let specs: Vec<Spec> = (0..50)
        .map(|i| {
            (
                Some(format!("k{i}").into_bytes()),
                Some(vec![b'x'; 64]),
                vec![],
                i,
            )
        })
        .collect();
    let bytes = encode(10, &[(specs, false)], Compression::Gzip);
    assert_ne!(
        i16::from_be_bytes(bytes[21..23].try_into().unwrap()) & COMPRESSION_MASK,
        0
    );
    let d = decode_batches(Some(bytes.clone()), 12);
    let (records, next) = (d.records, d.next_offset);
    assert_eq!(records.len(), 48);
    assert_eq!(records[0].key.as_deref(), Some(&b"k2"[..]));
    assert_eq!(next, Some(60));
    assert_eq!((records, next), reference(&bytes, 12));
}

#[test]
fn a_bad_crc_names_the_batch_and_no_end() {
    let specs: Vec<Spec> = vec![(Some(b"k".to_vec()), Some(b"v".to_vec()), vec![], 0)];
    let mut bytes = encode(42, &[(specs, false)], Compression::None).to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let d = decode_batches(Some(Bytes::from(bytes)), 0);
    let c = d.corrupt.expect("named");
    assert_eq!(
        (c.base_offset, c.end),
        (42, None),
        "its header cannot be trusted"
    );
    assert!(c.reason.contains("CRC 0x"), "{c:?}");
    assert!(d.records.is_empty());
}

/// Records whose bytes do not parse under a CRC that matches (a producer's bug): the batches
/// before it are read, and its end is known, so a reader may skip it.
#[test]
fn a_batch_with_unreadable_records_ends_the_read_after_the_good_ones() {
    let good: Vec<Spec> = (0..3)
        .map(|i| {
            (
                Some(format!("k{i}").into_bytes()),
                Some(b"v".to_vec()),
                vec![],
                0,
            )
        })
        .collect();
    let mut bytes = encode(10, &[(good.clone(), false)], Compression::None).to_vec();
    let first = bytes.len();
    let mut bad = encode(13, &[(good.clone(), false)], Compression::None).to_vec();
    // The first record's length varint says 63 bytes: more than the batch holds.
    bad[LOG_OVERHEAD + V2_HEADER] = 0x7e;
    let crc = crc32c::crc32c(&bad[CRC_START..]);
    bad[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes.extend_from_slice(&bad);
    bytes.extend_from_slice(&encode(16, &[(good, false)], Compression::None));
    let d = decode_batches(Some(Bytes::from(bytes.clone())), 10);
    assert_eq!(d.records.len(), 3, "the batch before it");
    assert_eq!(
        d.next_offset,
        Some(13),
        "the next read starts at the bad batch"
    );
    let c = d.corrupt.expect("named");
    assert_eq!((c.base_offset, c.end), (13, Some(16)));
    // Read from it: nothing, and the same batch named.
    let d = decode_batches(Some(Bytes::from(bytes[first..].to_vec())), 13);
    assert!(d.records.is_empty());
    assert_eq!(d.next_offset, None);
    assert_eq!(d.corrupt.map(|c| c.end), Some(Some(16)));
}

#[test]
fn a_count_beyond_the_bytes_is_refused_before_allocating() {
    let specs: Vec<Spec> = vec![(Some(b"k".to_vec()), Some(b"v".to_vec()), vec![], 0)];
    let mut bytes = encode(0, &[(specs, false)], Compression::None).to_vec();
    bytes[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[CRC_START..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    let c = decode_batches(Some(Bytes::from(bytes)), 0).corrupt.unwrap();
    assert!(
        c.reason
            .contains("2147483647 records declared, room for at most 1"),
        "{c:?}"
    );
}

#[test]
fn keys_and_values_share_the_fetched_buffer() {
    let specs: Vec<Spec> = vec![(Some(b"key".to_vec()), Some(b"value".to_vec()), vec![], 0)];
    let bytes = encode(0, &[(specs, false)], Compression::None);
    let range = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
    let records = decode_batches(Some(bytes.clone()), 0).records;
    let key = records[0].key.as_ref().unwrap();
    assert!(range.contains(&(key.as_ptr() as usize)));
    assert_eq!(records[0].value.as_deref(), Some(&b"value"[..]));
}

#[test]
fn log_append_time_batches_take_the_brokers_timestamp() {
    let specs: Vec<Spec> = vec![(Some(b"k".to_vec()), None, vec![], 5)];
    let mut bytes = encode(0, &[(specs, false)], Compression::None).to_vec();
    let attributes = i16::from_be_bytes(bytes[21..23].try_into().unwrap()) | LOG_APPEND_TIME;
    bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
    bytes[35..43].copy_from_slice(&99i64.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[CRC_START..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    let records = decode_batches(Some(Bytes::from(bytes)), 0).records;
    assert_eq!(records[0].timestamp, 99);
    assert_eq!(records[0].value, None);
}
