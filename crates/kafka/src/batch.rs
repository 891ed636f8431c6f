//! Reading v2 record batches out of a fetch response without a copy: each record's key and
//! value are slices of the response's own buffer.
//!
//! `kafka-protocol` decodes batches too, but builds a full record (headers map, producer
//! fields) per record and then a second vector of them; on a restore that was most of the
//! client's CPU, on the core the store's bulk load shares with the fetching (measured:
//! docs/BENCHMARKS.md). Uncompressed v2 batches, what changelogs hold, are read here;
//! compressed and legacy ones go to `kafka-protocol`.
//!
//! Every declared length and count is checked against the bytes that remain before it is
//! used, so a corrupt response is an error naming the batch, never a panic or a large
//! allocation.

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::records::RecordBatchDecoder;

use crate::error::{Error, Result};
use crate::records::Record;

/// Base offset and batch length: what precedes every batch, of any version.
const LOG_OVERHEAD: usize = 12;
/// A v2 batch header after [`LOG_OVERHEAD`]: epoch, magic, CRC, attributes, last offset
/// delta, two timestamps, producer id and epoch, base sequence, record count.
const V2_HEADER: usize = 49;
/// Where the CRC-covered part of a v2 batch starts (the attributes), from the batch's start.
const CRC_START: usize = 21;
/// The smallest record: length, attributes, timestamp delta, offset delta, key length,
/// value length and header count, one byte each.
const MIN_RECORD: usize = 7;

const COMPRESSION_MASK: i16 = 0x07;
const LOG_APPEND_TIME: i16 = 1 << 3;
const CONTROL: i16 = 1 << 5;

/// A record batch that cannot be read (damaged on the broker's disk, or written by a
/// producer that got its records wrong under a correct CRC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptBatch {
    pub base_offset: i64,
    /// The offset after it, when its header can be trusted (its CRC matched): where a reader
    /// that skips it goes on. `None`: no one can say where the next batch starts.
    pub end: Option<i64>,
    pub reason: String,
}

/// What a fetched record set holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decoded {
    pub records: Vec<Record>,
    /// The offset after the last whole batch read: where the next fetch starts.
    pub next_offset: Option<i64>,
    /// The first batch that could not be read; the records are those before it.
    pub corrupt: Option<CorruptBatch>,
}

/// The records at or after `offset` in a fetched record set, control records left out, and
/// the offset after its last whole batch: where the next fetch starts. A fetch may end
/// inside a batch; that part is left for the next fetch. A batch that cannot be read ends the
/// reading: the records before it are kept, and it is named.
pub fn decode_batches(bytes: Option<Bytes>, offset: i64) -> Decoded {
    let mut out = Decoded::default();
    let Some(mut rest) = bytes else {
        return out;
    };
    out.records.reserve(records_hint(&rest));
    while rest.len() >= LOG_OVERHEAD {
        let base = i64::from_be_bytes(rest[0..8].try_into().expect("8 bytes"));
        let len = i32::from_be_bytes(rest[8..12].try_into().expect("4 bytes"));
        let Ok(len) = usize::try_from(len) else {
            out.corrupt = Some(CorruptBatch {
                base_offset: base,
                end: None,
                reason: format!("a batch length of {len}"),
            });
            break;
        };
        if rest.len() - LOG_OVERHEAD < len {
            break;
        }
        let batch = rest.split_to(LOG_OVERHEAD + len);
        let kept = out.records.len();
        match read_batch(base, &batch, offset, &mut out.records) {
            Ok(Some(end)) => out.next_offset = Some(out.next_offset.unwrap_or(offset).max(end)),
            Ok(None) => {}
            Err(e) => {
                out.records.truncate(kept);
                out.corrupt = Some(CorruptBatch {
                    base_offset: base,
                    end: trusted_end(base, &batch),
                    reason: match e {
                        Error::Codec { message, .. } => message,
                        e => e.to_string(),
                    },
                });
                break;
            }
        }
    }
    out
}

/// How many records the whole v2 batches of a record set declare, each count no more than its
/// batch's bytes could hold: the list they go into is then sized once, where growing it batch
/// by batch copied a fetch's records again into fresh pages. Compressed batches count
/// nothing (their records are not in their bytes); nothing here is checked, only counted.
fn records_hint(mut rest: &[u8]) -> usize {
    let mut n = 0usize;
    while rest.len() >= LOG_OVERHEAD + V2_HEADER {
        let len = i32::from_be_bytes(rest[8..12].try_into().expect("4 bytes"));
        let Some(total) = usize::try_from(len).ok().map(|l| l + LOG_OVERHEAD) else {
            break;
        };
        if total < LOG_OVERHEAD + V2_HEADER || rest.len() < total {
            break;
        }
        let attributes = i16::from_be_bytes(rest[21..23].try_into().expect("2 bytes"));
        if rest[16] == 2 && attributes & COMPRESSION_MASK == 0 {
            let count = i32::from_be_bytes(rest[57..61].try_into().expect("4 bytes"));
            let room = (total - LOG_OVERHEAD - V2_HEADER) / MIN_RECORD;
            n += usize::try_from(count).unwrap_or(0).min(room);
        }
        rest = &rest[total..];
    }
    n
}

/// Appends one batch's records at or after `offset`; the offset after it.
fn read_batch(base: i64, batch: &Bytes, offset: i64, out: &mut Vec<Record>) -> Result<Option<i64>> {
    match Batch::parse(base, batch)? {
        Some(header) if header.control => Ok(header.end()),
        Some(header) if header.compressed => {
            through_kafka_protocol(batch.clone(), offset, out)?;
            Ok(header.end())
        }
        Some(header) => {
            header.records(batch, offset, out)?;
            Ok(header.end())
        }
        None => through_kafka_protocol(batch.clone(), offset, out),
    }
}

/// The offset after a v2 batch whose CRC matches, whatever else is wrong with it.
fn trusted_end(base: i64, batch: &[u8]) -> Option<i64> {
    if batch.len() < LOG_OVERHEAD + V2_HEADER || batch.get(16) != Some(&2) {
        return None;
    }
    let crc = u32::from_be_bytes(batch[17..21].try_into().ok()?);
    if crc != crc32c::crc32c(&batch[CRC_START..]) {
        return None;
    }
    let last_delta = i32::from_be_bytes(batch[23..27].try_into().ok()?);
    base.checked_add(i64::from(last_delta))?.checked_add(1)
}

/// The header of a v2 batch.
#[derive(Debug)]
struct Batch {
    base_offset: i64,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    log_append_time: bool,
    control: bool,
    compressed: bool,
    count: usize,
}

impl Batch {
    /// The header of `batch` (length-checked by the caller), or `None` when it is not a v2
    /// batch.
    fn parse(base_offset: i64, batch: &[u8]) -> Result<Option<Batch>> {
        let at = |i: usize, n: usize| &batch[i..i + n];
        let magic = batch.get(16).copied();
        if magic != Some(2) {
            return Ok(None);
        }
        if batch.len() < LOG_OVERHEAD + V2_HEADER {
            return Err(corrupt(
                base_offset,
                format!("{} bytes, less than a header", batch.len()),
            ));
        }
        let attributes = i16::from_be_bytes(at(21, 2).try_into().expect("2 bytes"));
        let compressed = attributes & COMPRESSION_MASK != 0;
        let crc = u32::from_be_bytes(at(17, 4).try_into().expect("4 bytes"));
        let actual = crc32c::crc32c(&batch[CRC_START..]);
        if crc != actual {
            return Err(corrupt(
                base_offset,
                format!("CRC {actual:#010x}, the header says {crc:#010x}"),
            ));
        }
        let count = i32::from_be_bytes(at(57, 4).try_into().expect("4 bytes"));
        // A compressed batch's records may take less room than the smallest record each.
        let room = match compressed {
            true => usize::MAX,
            false => (batch.len() - LOG_OVERHEAD - V2_HEADER) / MIN_RECORD,
        };
        let count = usize::try_from(count)
            .ok()
            .filter(|&c| c <= room)
            .ok_or_else(|| {
                corrupt(
                    base_offset,
                    format!("{count} records declared, room for at most {room}"),
                )
            })?;
        Ok(Some(Batch {
            base_offset,
            last_offset_delta: i32::from_be_bytes(at(23, 4).try_into().expect("4 bytes")),
            base_timestamp: i64::from_be_bytes(at(27, 8).try_into().expect("8 bytes")),
            max_timestamp: i64::from_be_bytes(at(35, 8).try_into().expect("8 bytes")),
            log_append_time: attributes & LOG_APPEND_TIME != 0,
            control: attributes & CONTROL != 0,
            compressed,
            count,
        }))
    }

    /// The offset after this batch. Compaction may remove a batch's last records but keeps
    /// its last offset delta, so this is past them too.
    fn end(&self) -> Option<i64> {
        self.base_offset
            .checked_add(i64::from(self.last_offset_delta))
            .and_then(|last| last.checked_add(1))
    }

    /// Appends the batch's records at or after `from` to `out`.
    fn records(&self, batch: &Bytes, from: i64, out: &mut Vec<Record>) -> Result<()> {
        out.reserve(self.count);
        let mut r = Reader {
            buf: batch,
            pos: LOG_OVERHEAD + V2_HEADER,
            end: batch.len(),
        };
        for i in 0..self.count {
            let fail = |what: Malformed| corrupt(self.base_offset, format!("record {i}: {what}"));
            let len = r
                .length()
                .map_err(fail)?
                .ok_or_else(|| fail(Malformed::Null))?;
            let mut rec = r.sub(len).map_err(fail)?;
            let _attributes = rec.take(1).map_err(fail)?;
            let timestamp_delta = rec.varlong().map_err(fail)?;
            let offset_delta = rec.varint().map_err(fail)?;
            let key = rec.nullable().map_err(fail)?;
            let value = rec.nullable().map_err(fail)?;
            let headers = rec.varint().map_err(fail)?;
            for _ in 0..headers.max(0) {
                let key_len = rec.length().map_err(fail)?;
                rec.skip(key_len.unwrap_or(0)).map_err(fail)?;
                let value_len = rec.length().map_err(fail)?;
                rec.skip(value_len.unwrap_or(0)).map_err(fail)?;
            }
            if headers < 0 || rec.pos != rec.end {
                return Err(fail(Malformed::LeftOver {
                    headers,
                    bytes: rec.end - rec.pos,
                }));
            }
            let offset = self.base_offset + i64::from(offset_delta);
            if offset >= from {
                out.push(Record {
                    offset,
                    timestamp: if self.log_append_time {
                        self.max_timestamp
                    } else {
                        self.base_timestamp.wrapping_add(timestamp_delta)
                    },
                    key: key.map(|k| batch.slice(k)),
                    value: value.map(|v| batch.slice(v)),
                });
            }
        }
        if r.pos != r.end {
            return Err(corrupt(
                self.base_offset,
                format!("{} bytes after its last record", r.end - r.pos),
            ));
        }
        Ok(())
    }
}

/// The records of one batch at or after `from`, control records left out, decoded by
/// `kafka-protocol` (compressed and pre-v2 batches); the offset after its last record.
pub fn through_kafka_protocol(
    mut batch: Bytes,
    from: i64,
    out: &mut Vec<Record>,
) -> Result<Option<i64>> {
    let set = RecordBatchDecoder::decode(&mut batch).map_err(|e| Error::Codec {
        api: ApiKey::Fetch,
        message: format!("{e:#}"),
    })?;
    let end = set.records.iter().map(|r| r.offset + 1).max();
    out.extend(
        set.records
            .into_iter()
            .filter(|r| r.offset >= from && !r.control)
            .map(|r| Record {
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
            }),
    );
    Ok(end)
}

fn corrupt(base_offset: i64, what: String) -> Error {
    Error::Codec {
        api: ApiKey::Fetch,
        message: format!("record batch at offset {base_offset}: {what}"),
    }
}

/// A cursor over `buf[pos..end]`.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

/// What is wrong inside a record's bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Malformed {
    #[error("{declared} bytes declared, {left} remain")]
    Short { declared: usize, left: usize },
    #[error("a varint runs past the end")]
    VarintPastEnd,
    #[error("a varint longer than 10 bytes")]
    VarintTooLong,
    #[error("a varint of {0} does not fit 32 bits")]
    VarintTooWide(i64),
    #[error("a length of {0}")]
    Length(i32),
    #[error("null")]
    Null,
    #[error("{headers} headers, {bytes} bytes left over")]
    LeftOver { headers: i32, bytes: usize },
}

type Step<T> = std::result::Result<T, Malformed>;

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Step<std::ops::Range<usize>> {
        let left = self.end - self.pos;
        if n > left {
            return Err(Malformed::Short { declared: n, left });
        }
        self.pos += n;
        Ok(self.pos - n..self.pos)
    }

    fn skip(&mut self, n: usize) -> Step<()> {
        self.take(n).map(|_| ())
    }

    /// The next `n` bytes, as a reader of their own.
    fn sub(&mut self, n: usize) -> Step<Reader<'a>> {
        let range = self.take(n)?;
        Ok(Reader {
            buf: self.buf,
            pos: range.start,
            end: range.end,
        })
    }

    /// A zigzag varlong (at most 10 bytes).
    fn varlong(&mut self) -> Step<i64> {
        let mut raw = 0u64;
        for i in 0..10 {
            if self.pos >= self.end {
                return Err(Malformed::VarintPastEnd);
            }
            let b = self.buf[self.pos];
            self.pos += 1;
            raw |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        Err(Malformed::VarintTooLong)
    }

    /// A zigzag varint that must fit 32 bits.
    fn varint(&mut self) -> Step<i32> {
        let v = self.varlong()?;
        i32::try_from(v).map_err(|_| Malformed::VarintTooWide(v))
    }

    /// A length: `None` for -1 (null), an error below that.
    fn length(&mut self) -> Step<Option<usize>> {
        match self.varint()? {
            -1 => Ok(None),
            n => usize::try_from(n)
                .map(Some)
                .map_err(|_| Malformed::Length(n)),
        }
    }

    /// A length-prefixed byte string that may be null: its place in the buffer.
    fn nullable(&mut self) -> Step<Option<std::ops::Range<usize>>> {
        match self.length()? {
            None => Ok(None),
            Some(n) => self.take(n).map(Some),
        }
    }
}

mod encode;
pub use encode::encode_v2;

#[cfg(test)]
mod tests;
