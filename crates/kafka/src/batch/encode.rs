//! Writing v2 record batches straight from the records to send.
//!
//! `kafka-protocol`'s encoder takes owned records: each key and value cloned into one (two
//! reference-count updates on the fetch buffer they were read from, and two more when it is
//! dropped) and the headers map cloned per record. On a stream thread that was the largest
//! cost of producing outputs (measured: docs/BENCHMARKS.md). The bytes written here are the
//! same as that encoder's for the same records (uncompressed, no producer id, base sequence
//! -1, base timestamp the smallest), which the tests check.

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::error::{Error, Result};
use crate::records::KeyValue;

/// Base offset, batch length, leader epoch, magic: the part before the CRC.
const CRC_AT: usize = 17;
/// Where the CRC-covered part starts (the attributes).
const CRC_START: usize = 21;
/// Where the records start, after the header.
const HEADER_BYTES: usize = 61;

/// One v2 record batch of `records`, uncompressed, record `i` stamped `ts(i)` and at offset
/// delta `i`; records with a value carry `value_headers`. No records: no bytes.
pub fn encode_v2(
    records: &[KeyValue],
    ts: impl Fn(usize) -> i64,
    value_headers: &[(&str, &[u8])],
) -> Result<Bytes> {
    if records.is_empty() {
        return Ok(Bytes::new());
    }
    let count = i32::try_from(records.len())
        .map_err(|_| codec(format!("{} records in one batch", records.len())))?;
    let (min_ts, max_ts) = (0..records.len())
        .map(&ts)
        .fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
    let headers = encoded_headers(value_headers)?;
    let size: usize = records
        .iter()
        .map(|(k, v)| k.as_ref().map_or(0, Bytes::len) + v.as_ref().map_or(0, Bytes::len))
        .sum::<usize>()
        + records.len() * (26 + headers.len());
    let mut buf = Vec::with_capacity(HEADER_BYTES + size);
    buf.extend_from_slice(&0i64.to_be_bytes()); // base offset
    buf.extend_from_slice(&0i32.to_be_bytes()); // batch length, filled below
    buf.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    buf.push(2); // magic
    buf.extend_from_slice(&0u32.to_be_bytes()); // CRC, filled below
    buf.extend_from_slice(&0i16.to_be_bytes()); // attributes
    buf.extend_from_slice(&(count - 1).to_be_bytes()); // last offset delta
    buf.extend_from_slice(&min_ts.to_be_bytes());
    buf.extend_from_slice(&max_ts.to_be_bytes());
    buf.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    buf.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    buf.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    buf.extend_from_slice(&count.to_be_bytes());
    for (i, (key, value)) in records.iter().enumerate() {
        let headers: &[u8] = match value {
            Some(_) => &headers,
            None => &[0],
        };
        put_record(
            &mut buf,
            ts(i).wrapping_sub(min_ts),
            i as i32,
            key,
            value,
            headers,
        )?;
    }
    let length = i32::try_from(buf.len() - 12)
        .map_err(|_| codec(format!("a batch of {} bytes", buf.len())))?;
    buf[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&buf[CRC_START..]);
    buf[CRC_AT..CRC_START].copy_from_slice(&crc.to_be_bytes());
    Ok(Bytes::from(buf))
}

/// One record: its length, then attributes, deltas, key, value and `headers` (already
/// encoded, their count first).
fn put_record(
    buf: &mut Vec<u8>,
    ts_delta: i64,
    offset_delta: i32,
    key: &Option<Bytes>,
    value: &Option<Bytes>,
    headers: &[u8],
) -> Result<()> {
    let key_len = length_of(key.as_deref(), "key")?;
    let value_len = length_of(value.as_deref(), "value")?;
    let body = 1
        + varlong_len(ts_delta)
        + varint_len(offset_delta)
        + varint_len(key_len)
        + key.as_ref().map_or(0, Bytes::len)
        + varint_len(value_len)
        + value.as_ref().map_or(0, Bytes::len)
        + headers.len();
    let body = i32::try_from(body).map_err(|_| codec(format!("a record of {body} bytes")))?;
    put_varint(buf, body);
    buf.push(0); // attributes
    put_varlong(buf, ts_delta);
    put_varint(buf, offset_delta);
    put_varint(buf, key_len);
    if let Some(k) = key {
        buf.extend_from_slice(k);
    }
    put_varint(buf, value_len);
    if let Some(v) = value {
        buf.extend_from_slice(v);
    }
    buf.extend_from_slice(headers);
    Ok(())
}

/// The headers every record with a value carries, encoded once: their count, then each.
fn encoded_headers(headers: &[(&str, &[u8])]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let count =
        i32::try_from(headers.len()).map_err(|_| codec(format!("{} headers", headers.len())))?;
    put_varint(&mut out, count);
    for (k, v) in headers {
        put_varint(&mut out, length_of(Some(k.as_bytes()), "header key")?);
        out.extend_from_slice(k.as_bytes());
        put_varint(&mut out, length_of(Some(v), "header value")?);
        out.extend_from_slice(v);
    }
    Ok(out)
}

/// A nullable byte string's length on the wire: -1 for null.
fn length_of(bytes: Option<&[u8]>, what: &str) -> Result<i32> {
    match bytes {
        None => Ok(-1),
        Some(b) => i32::try_from(b.len())
            .map_err(|_| codec(format!("a record {what} of {} bytes", b.len()))),
    }
}

fn codec(message: String) -> Error {
    Error::Codec {
        api: ApiKey::Produce,
        message,
    }
}

fn put_varint(buf: &mut Vec<u8>, n: i32) {
    put_unsigned(buf, ((n << 1) ^ (n >> 31)) as u32 as u64);
}

fn put_varlong(buf: &mut Vec<u8>, n: i64) {
    put_unsigned(buf, ((n << 1) ^ (n >> 63)) as u64);
}

fn put_unsigned(buf: &mut Vec<u8>, mut z: u64) {
    while z >= 0x80 {
        buf.push((z as u8) | 0x80);
        z >>= 7;
    }
    buf.push(z as u8);
}

fn varint_len(n: i32) -> usize {
    unsigned_len(((n << 1) ^ (n >> 31)) as u32 as u64)
}

fn varlong_len(n: i64) -> usize {
    unsigned_len(((n << 1) ^ (n >> 63)) as u64)
}

fn unsigned_len(z: u64) -> usize {
    (64 - (z | 1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use proptest::prelude::*;

    /// The same batch as kafka-protocol's encoder writes.
    fn theirs(records: &[KeyValue], ts: &[i64], headers: &[(&str, &[u8])]) -> Bytes {
        let map: kafka_protocol::indexmap::IndexMap<StrBytes, Option<Bytes>> = headers
            .iter()
            .map(|(k, v)| {
                (
                    StrBytes::from_string((*k).to_owned()),
                    Some(Bytes::copy_from_slice(v)),
                )
            })
            .collect();
        let wire: Vec<Record> = records
            .iter()
            .enumerate()
            .map(|(i, (key, value))| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32 - 1,
                timestamp: ts[i],
                key: key.clone(),
                value: value.clone(),
                headers: match value {
                    Some(_) => map.clone(),
                    None => Default::default(),
                },
            })
            .collect();
        let mut buf = bytes::BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &wire,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .unwrap();
        buf.freeze()
    }

    fn ours(records: &[KeyValue], ts: &[i64], headers: &[(&str, &[u8])]) -> Bytes {
        encode_v2(records, |i| ts[i], headers).unwrap()
    }

    #[test]
    fn writes_the_bytes_kafka_protocol_writes() {
        let records: Vec<KeyValue> = vec![
            (
                Some(Bytes::from_static(b"k1")),
                Some(Bytes::from_static(b"v1")),
            ),
            (None, Some(Bytes::from(vec![7u8; 300]))),
            (Some(Bytes::from_static(b"gone")), None),
            (Some(Bytes::new()), Some(Bytes::new())),
        ];
        let ts = [1_700_000_000_123, 5, -3, 1_700_000_999_000];
        for headers in [&[][..], &[("v", &[3u8][..]), ("empty", &[][..])][..]] {
            assert_eq!(ours(&records, &ts, headers), theirs(&records, &ts, headers));
        }
        assert!(ours(&[], &[], &[]).is_empty());
        assert_eq!(ours(&[], &[], &[]), theirs(&[], &[], &[]));
    }

    #[test]
    fn varint_lengths_match_what_is_written() {
        for n in [0, 1, -1, 63, 64, -64, -65, 8191, 8192, i32::MAX, i32::MIN] {
            let mut buf = Vec::new();
            put_varint(&mut buf, n);
            assert_eq!(buf.len(), varint_len(n), "{n}");
        }
        for n in [0, 1, -1, i64::MAX, i64::MIN, 1 << 40, -(1 << 40)] {
            let mut buf = Vec::new();
            put_varlong(&mut buf, n);
            assert_eq!(buf.len(), varlong_len(n), "{n}");
        }
    }

    fn record() -> impl Strategy<Value = (KeyValue, i64)> {
        let bytes = || proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200));
        (bytes(), bytes(), -(1i64 << 42)..(1i64 << 42))
            .prop_map(|(k, v, t)| ((k.map(Bytes::from), v.map(Bytes::from)), t))
    }

    proptest! {
        #[test]
        fn any_records_encode_as_kafka_protocol_encodes_them(
            rs in proptest::collection::vec(record(), 0..40),
            with_headers in any::<bool>(),
        ) {
            let (records, ts): (Vec<KeyValue>, Vec<i64>) = rs.into_iter().unzip();
            let headers: &[(&str, &[u8])] = if with_headers { &[("v", b"\x03")] } else { &[] };
            prop_assert_eq!(ours(&records, &ts, headers), theirs(&records, &ts, headers));
        }
    }
}
