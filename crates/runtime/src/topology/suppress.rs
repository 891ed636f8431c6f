//! Kafka Streams' `KTable.suppress`: a table's updates held in a buffer store, one entry per
//! key (a later update replaces the earlier one in its place), and sent on in (buffer time,
//! key) order once stream time passes an entry's buffer time plus the wait: the window's end
//! and grace for `untilWindowCloses`, the record's time and the limit for `untilTimeLimit`.
//!
//! The buffer's entries are Kafka's `InMemoryTimeOrderedKeyValueChangeBuffer` changelog
//! records, byte for byte: the key as the table writes it, and as value the record context,
//! the prior, old and new values (`BufferValue`), then the 8-byte buffer time; records with
//! a value carry the header `v` = 3 ([`SUPPRESS_HEADERS`]). Baton keeps them in a persistent
//! store, Kafka in memory restored from that changelog.

use std::sync::Arc;

use baton_assignor::TaskId;
use bytes::Bytes;

use super::{Stores, StreamRecord};
use crate::store::StoreError;

/// The headers of a suppression buffer's changelog records with a value: the layout version.
pub const SUPPRESS_HEADERS: &[(&str, &[u8])] = &[("v", &[3])];

/// A length written for a null value.
const NULL: i32 = -1;
/// The old value's length when it is the prior value (written once).
const SAME_AS_PRIOR: i32 = -2;
/// What an entry's serialized bytes count beyond Kafka's estimate of its memory
/// (`BufferValue.residentMemorySizeEstimate` plus key and time): the length fields and the
/// header count, for an entry without headers.
const SERIAL_OVERHEAD: u64 = 20;

/// A table update's (new value, old value) as the buffer keeps them: the table's own bytes.
pub type PrepareFn = Arc<
    dyn Fn(&[u8], Option<&[u8]>, Option<&[u8]>) -> (Option<Vec<u8>>, Option<Vec<u8>>) + Send + Sync,
>;

/// What an entry's buffer time is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferTime {
    /// The update's timestamp (`untilTimeLimit`).
    Record,
    /// The end of the window in the key (`untilWindowCloses`).
    WindowEnd(WindowEnd),
}

/// How a windowed key gives its window's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowEnd {
    /// A time window's key (key, start): the start plus the size.
    Time { size_ms: i64 },
    /// A session's key (key, end, start).
    Session,
}

/// What a full buffer does (Kafka's `BufferFullStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Sends its oldest entries early until it fits.
    EmitEarly,
    /// Stops the task (Kafka stops the application).
    ShutDown,
}

/// A [`super::Stream::suppress`] step.
#[derive(Clone)]
pub struct Suppression {
    /// The processor's name, for messages.
    pub name: String,
    pub store: String,
    pub time: BufferTime,
    /// How long past its buffer time an entry waits: the grace, or the time limit.
    pub wait_ms: i64,
    pub max_records: Option<u64>,
    pub max_bytes: Option<u64>,
    pub when_full: WhenFull,
    /// A delete leaving the buffer is not sent on (final results: a window's delete is news
    /// to no one).
    pub drop_deletes: bool,
    /// The update as the buffer keeps it; `None`: as it comes.
    pub prepare: Option<PrepareFn>,
}

/// One buffer entry's value, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffered<'a> {
    /// The timestamp of the update it holds (its record context's).
    pub timestamp: i64,
    pub partition: i32,
    /// The key's value before its first update in the buffer: what the table showed.
    pub prior: Option<&'a [u8]>,
    pub old: Option<&'a [u8]>,
    pub new: Option<&'a [u8]>,
    pub time: i64,
}

/// An entry's value in Kafka's layout (`BufferValue.serialize` then the buffer time), with a
/// record context of the timestamp and `partition`, no topic, offset -1, no headers: Baton's
/// steps do not carry the input's topic and offset.
pub fn encode_buffered(b: &Buffered<'_>) -> Vec<u8> {
    let len = |v: Option<&[u8]>| v.map_or(0, <[u8]>::len);
    let mut out = Vec::with_capacity(52 + len(b.prior) + len(b.old) + len(b.new));
    out.extend_from_slice(&b.timestamp.to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&b.partition.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    put_nullable(&mut out, b.prior);
    match b.old {
        Some(_) if b.old == b.prior => out.extend_from_slice(&SAME_AS_PRIOR.to_be_bytes()),
        old => put_nullable(&mut out, old),
    }
    put_nullable(&mut out, b.new);
    out.extend_from_slice(&b.time.to_be_bytes());
    out
}

fn put_nullable(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        Some(v) => {
            out.extend_from_slice(&(v.len() as i32).to_be_bytes());
            out.extend_from_slice(v);
        }
        None => out.extend_from_slice(&NULL.to_be_bytes()),
    }
}

/// Reads an entry's value as Kafka writes it (layout version 3); `None` when it does not
/// parse.
pub fn decode_buffered(value: &[u8]) -> Option<Buffered<'_>> {
    let mut r = Reader(value);
    let timestamp = r.i64()?;
    let _offset = r.i64()?;
    let topic = r.i32()?;
    r.bytes(topic)?;
    let partition = r.i32()?;
    let headers = r.i32()?;
    for _ in 0..headers.max(0) {
        let key = r.i32()?;
        r.bytes(key)?;
        let n = r.i32()?;
        if n >= 0 {
            r.bytes(n)?;
        }
    }
    let prior = r.nullable()?;
    let old = match r.i32()? {
        SAME_AS_PRIOR => prior,
        NULL => None,
        n => Some(r.bytes(n)?),
    };
    let new = r.nullable()?;
    let time = r.i64()?;
    r.0.is_empty().then_some(Buffered {
        timestamp,
        partition,
        prior,
        old,
        new,
        time,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self, n: i32) -> Option<&'a [u8]> {
        self.take(usize::try_from(n).ok()?)
    }
    fn nullable(&mut self) -> Option<Option<&'a [u8]>> {
        match self.i32()? {
            NULL => Some(None),
            n => self.bytes(n).map(Some),
        }
    }
}

/// An entry's buffer time: its value's last 8 bytes. A value too short to have one reads as
/// the earliest time, so it leaves first and fails there, loudly.
pub fn buffer_time(value: &[u8]) -> i64 {
    value
        .len()
        .checked_sub(8)
        .and_then(|at| value[at..].try_into().ok())
        .map_or(i64::MIN, i64::from_be_bytes)
}

/// Kafka's estimate of a buffer's memory (`computeRecordSize`, summed) from its `entries`
/// and their key and value bytes.
pub fn buffer_bytes(entries: u64, key_and_value_bytes: u64) -> u64 {
    key_and_value_bytes.saturating_sub(SERIAL_OVERHEAD * entries)
}

/// The window end of a windowed key, as Kafka's `Windowed.window().end()`.
fn window_end(end: WindowEnd, key: &[u8]) -> Option<i64> {
    let at = |from_end: usize| -> Option<i64> {
        let i = key.len().checked_sub(from_end)?;
        Some(i64::from_be_bytes(key.get(i..i + 8)?.try_into().ok()?))
    };
    match end {
        // Kafka caps an overflowing end at the largest time.
        WindowEnd::Time { size_ms } => {
            let start = at(8)?;
            Some(start.checked_add(size_ms).unwrap_or(i64::MAX))
        }
        WindowEnd::Session => at(16),
    }
}

/// [`super::Step::Suppress`] for one update (a delete too): buffered under its key, then the
/// entries whose time has come, and while the buffer is over its bounds the oldest, go on.
pub(super) fn suppress(
    s: &Suppression,
    task: TaskId,
    r: StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let (new, old) = match &s.prepare {
        Some(f) => f(&r.key, r.value.as_deref(), r.old.as_deref()),
        None => (r.value.map(Vec::from), r.old.map(Vec::from)),
    };
    let time = match s.time {
        BufferTime::Record => r.timestamp,
        BufferTime::WindowEnd(end) => window_end(end, &r.key).unwrap_or_else(|| {
            panic!(
                "{}: a key of {} bytes is no windowed key; suppress(until_window_closes) takes a windowed table",
                s.name,
                r.key.len()
            )
        }),
    };
    let current = stores.get(&s.store, &r.key)?;
    let earlier = current.as_deref().map(|v| read_entry(s, v));
    // Kafka's non-resetting rule: an updated key keeps its place and its prior value.
    let (prior, time) = match &earlier {
        Some(e) => (e.prior, e.time),
        None => (old.as_deref(), time),
    };
    let entry = encode_buffered(&Buffered {
        timestamp: r.timestamp,
        partition: task.partition as i32,
        prior,
        old: old.as_deref(),
        new: new.as_deref(),
        time,
    });
    stores.put(&s.store, &r.key, entry);
    evict(s, stream_time, stores, next)
}

fn read_entry<'a>(s: &Suppression, value: &'a [u8]) -> Buffered<'a> {
    decode_buffered(value).unwrap_or_else(|| {
        panic!(
            "{}: an entry of {} bytes in store {} is not in Kafka Streams' suppression buffer layout (version 3)",
            s.name,
            value.len(),
            s.store
        )
    })
}

/// Sends on the entries whose time has come, then, while the buffer is over its bounds, the
/// oldest ones (or stops the task, as configured).
fn evict(
    s: &Suppression,
    stream_time: i64,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let expiry = stream_time.saturating_sub(s.wait_ms);
    while let Some((time, key)) = stores.buffer_head(&s.store, &|_| false)? {
        if time > expiry {
            break;
        }
        emit(s, key, stores, next)?;
    }
    if s.max_records.is_none() && s.max_bytes.is_none() {
        return Ok(());
    }
    loop {
        let (entries, bytes) = stores.buffer_totals(&s.store)?;
        let bytes = buffer_bytes(entries, bytes);
        let over =
            s.max_records.is_some_and(|m| entries > m) || s.max_bytes.is_some_and(|m| bytes > m);
        if !over {
            return Ok(());
        }
        if s.when_full == WhenFull::ShutDown {
            panic!(
                "{} buffer exceeded its max capacity. Currently [{entries}/{}] records and [{bytes}/{}] bytes.",
                s.name,
                s.max_records.map_or(i64::MAX, |m| m as i64),
                s.max_bytes.map_or(i64::MAX, |m| m as i64),
            );
        }
        match stores.buffer_head(&s.store, &|_| false)? {
            Some((_, key)) => emit(s, key, stores, next)?,
            None => return Ok(()),
        }
    }
}

/// Removes `key`'s entry and sends its update on, stamped with the update's timestamp.
fn emit(
    s: &Suppression,
    key: Vec<u8>,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let Some(value) = stores.get(&s.store, &key)? else {
        return Ok(());
    };
    let b = read_entry(s, &value);
    let record = StreamRecord {
        key: Bytes::from(key.clone()),
        value: b.new.map(Bytes::copy_from_slice),
        timestamp: b.timestamp,
        old: b.old.map(Bytes::copy_from_slice),
        partition: None,
    };
    stores.delete(&s.store, &key);
    if record.value.is_some() || !s.drop_deletes {
        next.push(record);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Kafka's `KTableSuppressProcessorTest` cases, replayed on the step with its inputs and
    //! expected outputs (`Change(new, old)` there is `(value, old)` here).
    use super::*;
    use crate::layout::{session_key, windowed_key};
    use crate::topology::MemStores;

    /// (key, value, old value, timestamp): a table update.
    type Update = (Vec<u8>, Option<i64>, Option<i64>, i64);

    const LONG: i64 = 2_387_348_740_120_984_198; // any value: Kafka's ARBITRARY_LONG role

    fn limit(wait_ms: i64) -> Suppression {
        Suppression {
            name: "KTABLE-SUPPRESS-0000000001".into(),
            store: "buffer".into(),
            time: BufferTime::Record,
            wait_ms,
            max_records: None,
            max_bytes: None,
            when_full: WhenFull::EmitEarly,
            drop_deletes: false,
            prepare: None,
        }
    }

    fn final_results(grace_ms: i64, end: WindowEnd) -> Suppression {
        Suppression {
            time: BufferTime::WindowEnd(end),
            drop_deletes: true,
            ..limit(grace_ms)
        }
    }

    /// Runs the step over `(key, value, old, timestamp)` updates, stream time the largest
    /// timestamp so far; what came out.
    fn run(s: &Suppression, updates: &[Update]) -> Vec<StreamRecord> {
        let mut stores = MemStores::default();
        run_on(s, &mut stores, updates)
    }

    fn run_on(s: &Suppression, stores: &mut MemStores, updates: &[Update]) -> Vec<StreamRecord> {
        let (mut out, mut stream_time) = (Vec::new(), i64::MIN);
        let long = |v: Option<i64>| v.map(|v| Bytes::copy_from_slice(&v.to_be_bytes()));
        for (key, value, old, ts) in updates {
            stream_time = stream_time.max(*ts);
            let r = StreamRecord {
                key: Bytes::from(key.clone()),
                value: long(*value),
                timestamp: *ts,
                old: long(*old),
                partition: None,
            };
            suppress(s, TaskId::new(0, 0), r, stream_time, stores, &mut out).unwrap();
        }
        out
    }

    fn record(key: &[u8], value: Option<i64>, old: Option<i64>, ts: i64) -> StreamRecord {
        let long = |v: Option<i64>| v.map(|v| Bytes::copy_from_slice(&v.to_be_bytes()));
        StreamRecord {
            key: Bytes::copy_from_slice(key),
            value: long(value),
            timestamp: ts,
            old: long(old),
            partition: None,
        }
    }

    fn window(key: &str, start: i64) -> Vec<u8> {
        windowed_key(key.as_bytes(), start)
    }

    #[test]
    fn zero_time_limit_emits_at_once() {
        let out = run(&limit(0), &[(b"hey".to_vec(), Some(LONG), Some(-LONG), 5)]);
        assert_eq!(out, vec![record(b"hey", Some(LONG), Some(-LONG), 5)]);
        // A windowed key alike.
        let k = window("hey", 0);
        let out = run(&limit(0), &[(k.clone(), Some(LONG), None, 5)]);
        assert_eq!(out, vec![record(&k, Some(LONG), None, 5)]);
    }

    #[test]
    fn a_time_limit_buffers_then_emits() {
        let out = run(
            &limit(1),
            &[
                (b"hey".to_vec(), None, Some(1), 0),
                (b"tick".to_vec(), None, None, 1),
            ],
        );
        assert_eq!(out, vec![record(b"hey", None, Some(1), 0)]);
    }

    #[test]
    fn final_results_wait_for_the_grace_after_the_window_end() {
        let s = final_results(1, WindowEnd::Time { size_ms: 1 });
        let hey = (window("hey", 99), Some(LONG), None, 99);
        let dummy1 = (window("dummyKey1", 100), Some(LONG), None, 100);
        assert_eq!(run(&s, &[hey.clone(), dummy1.clone()]), vec![]);
        let dummy2 = (window("dummyKey2", 101), Some(LONG), None, 101);
        let out = run(&s, &[hey, dummy1, dummy2]);
        assert_eq!(out, vec![record(&window("hey", 99), Some(LONG), None, 99)]);
    }

    #[test]
    fn final_results_with_zero_grace_wait_for_the_window_end() {
        let s = final_results(0, WindowEnd::Time { size_ms: 100 });
        let hey = (window("hey", 0), Some(LONG), None, 5);
        assert_eq!(run(&s, std::slice::from_ref(&hey)), vec![]);
        let out = run(&s, &[hey, (window("dummyKey", 100), Some(LONG), None, 100)]);
        assert_eq!(out, vec![record(&window("hey", 0), Some(LONG), None, 5)]);
        // At the window's end, at once.
        let out = run(&s, &[(window("hey", 0), Some(LONG), None, 100)]);
        assert_eq!(out, vec![record(&window("hey", 0), Some(LONG), None, 100)]);
    }

    #[test]
    fn final_results_drop_deletes_and_time_limits_keep_them() {
        let time = WindowEnd::Time { size_ms: 100 };
        let session = session_key(b"hey", 0, 0);
        let delete = |k: &[u8]| (k.to_vec(), None, Some(LONG), 100);
        assert_eq!(
            run(&final_results(0, time), &[delete(&window("hey", 0))]),
            vec![]
        );
        assert_eq!(
            run(&final_results(0, WindowEnd::Session), &[delete(&session)]),
            vec![]
        );
        let limited = Suppression {
            max_records: Some(0),
            ..limit(0)
        };
        for k in [window("hey", 0), session, b"hey".to_vec()] {
            let out = run(&limited, &[delete(&k)]);
            assert_eq!(out, vec![record(&k, None, Some(LONG), 100)]);
        }
    }

    #[test]
    fn a_full_buffer_emits_its_oldest_early() {
        let two = [
            (b"hey".to_vec(), None, Some(LONG), 100),
            (b"dummyKey".to_vec(), None, Some(LONG), 101),
        ];
        let by_records = Suppression {
            max_records: Some(1),
            ..limit(100 * 86_400_000)
        };
        let by_bytes = Suppression {
            max_bytes: Some(60),
            ..limit(100 * 86_400_000)
        };
        for s in [by_records, by_bytes] {
            assert_eq!(run(&s, &two), vec![record(b"hey", None, Some(LONG), 100)]);
        }
    }

    #[test]
    fn kafka_counts_the_bytes_of_an_entry_so() {
        // "hey" with a delete of a Long: Kafka's computeRecordSize is 8 (time) + 3 (key) +
        // 8 (prior, the old value counted once) + 20 (record context without topic or
        // headers) = 39.
        let mut stores = MemStores::default();
        run_on(
            &limit(i64::MAX),
            &mut stores,
            &[(b"hey".to_vec(), None, Some(LONG), 100)],
        );
        let (n, bytes) = stores.buffer_totals("buffer").unwrap();
        assert_eq!((n, buffer_bytes(n, bytes)), (1, 39));
    }

    #[test]
    #[should_panic(expected = "buffer exceeded its max capacity. Currently [2/1] records")]
    fn a_full_buffer_that_shuts_down_stops() {
        let s = Suppression {
            max_records: Some(1),
            when_full: WhenFull::ShutDown,
            ..limit(100 * 86_400_000)
        };
        run(
            &s,
            &[
                (b"hey".to_vec(), None, Some(LONG), 100),
                (b"dummyKey".to_vec(), None, Some(LONG), 100),
            ],
        );
    }

    #[test]
    fn an_updated_key_keeps_its_place_and_prior_value() {
        let mut stores = MemStores::default();
        let out = run_on(
            &limit(10),
            &mut stores,
            &[
                (b"a".to_vec(), Some(1), Some(0), 0),
                (b"b".to_vec(), Some(1), None, 1),
                (b"a".to_vec(), Some(2), Some(1), 9),
            ],
        );
        assert_eq!(out, vec![]);
        let a = stores.get("buffer", b"a").unwrap().unwrap();
        let a = decode_buffered(&a).unwrap();
        assert_eq!((a.time, a.timestamp), (0, 9));
        assert_eq!(a.prior, Some(&0i64.to_be_bytes()[..]));
        // Stream time 10: "a" (buffered at 0) goes, with its latest update; "b" (at 1) stays.
        let out = run_on(
            &limit(10),
            &mut stores,
            &[(b"c".to_vec(), Some(1), None, 10)],
        );
        assert_eq!(out, vec![record(b"a", Some(2), Some(1), 9)]);
    }

    #[test]
    fn entries_are_kafkas_buffer_value_bytes() {
        // BufferValue.serialize then the buffer time, as Kafka's InMemoryTimeOrderedKeyValue-
        // ChangeBuffer.logValue writes them, for prior = old = [1], new = [2, 3].
        let b = Buffered {
            timestamp: 7,
            partition: 3,
            prior: Some(&[1]),
            old: Some(&[1]),
            new: Some(&[2, 3]),
            time: 9,
        };
        let mut want = Vec::new();
        want.extend_from_slice(&7i64.to_be_bytes()); // context: timestamp
        want.extend_from_slice(&(-1i64).to_be_bytes()); // offset
        want.extend_from_slice(&0i32.to_be_bytes()); // topic: ""
        want.extend_from_slice(&3i32.to_be_bytes()); // partition
        want.extend_from_slice(&0i32.to_be_bytes()); // no headers
        want.extend_from_slice(&[0, 0, 0, 1, 1]); // prior
        want.extend_from_slice(&(-2i32).to_be_bytes()); // old: the prior's bytes
        want.extend_from_slice(&[0, 0, 0, 2, 2, 3]); // new
        want.extend_from_slice(&9i64.to_be_bytes()); // buffer time
        let bytes = encode_buffered(&b);
        assert_eq!(bytes, want);
        assert_eq!(decode_buffered(&bytes), Some(b));
        assert_eq!(buffer_time(&bytes), 9);
    }

    #[test]
    fn reads_an_entry_kafka_wrote_with_topic_and_headers() {
        let mut v = Vec::new();
        v.extend_from_slice(&5i64.to_be_bytes());
        v.extend_from_slice(&42i64.to_be_bytes());
        v.extend_from_slice(&[0, 0, 0, 5]);
        v.extend_from_slice(b"input");
        v.extend_from_slice(&1i32.to_be_bytes());
        v.extend_from_slice(&2i32.to_be_bytes()); // two headers
        v.extend_from_slice(&[0, 0, 0, 1, b'k', 0, 0, 0, 1, b'v']);
        v.extend_from_slice(&[0, 0, 0, 1, b'n', 0xff, 0xff, 0xff, 0xff]); // null value
        v.extend_from_slice(&(-1i32).to_be_bytes()); // no prior
        v.extend_from_slice(&[0, 0, 0, 1, 4]); // old
        v.extend_from_slice(&(-1i32).to_be_bytes()); // no new: a delete
        v.extend_from_slice(&11i64.to_be_bytes());
        let b = decode_buffered(&v).unwrap();
        assert_eq!(
            (b.timestamp, b.partition, b.prior, b.old, b.new, b.time),
            (5, 1, None, Some(&[4u8][..]), None, 11)
        );
        // Cut anywhere, it does not read.
        for n in 0..v.len() {
            assert_eq!(decode_buffered(&v[..n]), None, "{n} bytes");
        }
    }
}
