//! How stores lay out what they keep, and so what their changelogs hold: Kafka Streams' byte
//! layouts for timestamped key-value stores and window stores, so an application written
//! both ways shares its state. Every layout is listed in docs/API.md.

use bytes::Bytes;

/// How a key-value store lays out its values, and so how its changelog records read
/// ([`to_changelog`], [`from_changelog`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// The value's bytes alone (Baton's built-in count per key, tables, `process` stores).
    #[default]
    Plain,
    /// An 8-byte big-endian timestamp, then the value's bytes: Kafka Streams' timestamped
    /// key-value stores, which every DSL aggregation uses. The timestamp is the newest of the
    /// records folded in.
    Timestamped,
}

/// Time windows by record timestamp, as Kafka Streams' `TimeWindows`: each window is
/// `[start, start + size)`, starts are multiples of `advance` (tumbling when `advance == size`),
/// and a window takes records until stream time passes its end plus `grace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub size_ms: i64,
    pub advance_ms: i64,
    pub grace_ms: i64,
}

/// How long a window store keeps a window in its changelog beyond its close: Kafka Streams'
/// `windowstore.changelog.additional.retention.ms` default, one day.
pub const WINDOW_CHANGELOG_EXTRA_RETENTION_MS: i64 = 86_400_000;

impl Windows {
    /// The starts of the windows `timestamp` falls in, oldest first.
    pub fn starts_for(&self, timestamp: i64) -> impl Iterator<Item = i64> {
        let advance = self.advance_ms.max(1);
        let first = (timestamp - self.size_ms + advance).max(0) / advance * advance;
        (0..)
            .map(move |i| first + i * advance)
            .take_while(move |&start| start <= timestamp)
    }

    /// How long a window's state is kept: its size plus its grace (Kafka Streams' default
    /// retention for a windowed aggregation).
    pub fn retention_ms(&self) -> i64 {
        self.size_ms.saturating_add(self.grace_ms)
    }
}

/// Session windows (Kafka Streams' `SessionWindows`): a record joins every session of its key
/// that ended at most `gap_ms` before it or starts at most `gap_ms` after it, merging them; a
/// session takes records until stream time passes its end plus `gap_ms` plus `grace_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sessions {
    pub gap_ms: i64,
    pub grace_ms: i64,
}

impl Sessions {
    /// How long a session's state is kept: the gap plus the grace (Kafka Streams' default
    /// retention for a session store).
    pub fn retention_ms(&self) -> i64 {
        self.gap_ms.saturating_add(self.grace_ms)
    }
}

/// A session's key as Kafka Streams' session stores, their changelogs and its
/// `SessionWindowedSerializer` hold it (`SessionKeySchema`): the record key's bytes, then the
/// session's end, then its start (8 bytes each, big-endian).
pub fn session_key(key: &[u8], start: i64, end: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 16);
    k.extend_from_slice(key);
    k.extend_from_slice(&end.to_be_bytes());
    k.extend_from_slice(&start.to_be_bytes());
    k
}

/// The record key, start and end of a [`session_key`]; `None` if it is shorter than one.
pub fn split_session_key(k: &[u8]) -> Option<(&[u8], i64, i64)> {
    let at = k.len().checked_sub(16)?;
    let (key, times) = k.split_at(at);
    let end = i64::from_be_bytes(times[..8].try_into().ok()?);
    let start = i64::from_be_bytes(times[8..].try_into().ok()?);
    Some((key, start, end))
}

/// A window store's key as Kafka Streams' window stores and their changelogs hold it: the
/// record key's bytes, the window start (8 bytes, big-endian), a sequence number (4 bytes, 0:
/// one value per key and window).
pub fn window_store_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 12);
    k.extend_from_slice(key);
    k.extend_from_slice(&start.to_be_bytes());
    k.extend_from_slice(&0i32.to_be_bytes());
    k
}

/// The window start of `stored`, a [`window_store_key`] of exactly `key`; `None` for a key
/// of another (a longer key that starts with this one sorts among a range of this one's).
pub fn window_store_start(key: &[u8], stored: &[u8]) -> Option<i64> {
    if stored.len() != key.len() + 12 || !stored.starts_with(key) {
        return None;
    }
    Some(i64::from_be_bytes(
        stored[key.len()..key.len() + 8].try_into().ok()?,
    ))
}

/// A windowed key as Kafka Streams writes it to a topic (`TimeWindowedSerializer`): the record
/// key's bytes, then the window start (8 bytes, big-endian).
pub fn windowed_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 8);
    k.extend_from_slice(key);
    k.extend_from_slice(&start.to_be_bytes());
    k
}

/// A timestamped store value: 8-byte big-endian timestamp, then the value.
pub fn timestamped(timestamp: i64, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(value.len() + 8);
    v.extend_from_slice(&timestamp.to_be_bytes());
    v.extend_from_slice(value);
    v
}

/// A changelog record as Kafka Streams writes it for a store of `layout`: its value and its
/// record timestamp. A timestamped store logs the plain value and puts the value's timestamp in
/// the record's (`ChangeLoggingTimestampedKeyValueBytesStore` and
/// `ChangeLoggingTimestampedWindowBytesStore`: `log(key, rawValue(v), timestamp(v))`); a plain
/// store logs its bytes as they are. A delete, and a plain value, take `record_timestamp`, the
/// timestamp of the record (or punctuation) that wrote it, as Kafka's `context.timestamp()`.
pub fn to_changelog(
    layout: Layout,
    stored: Option<&[u8]>,
    record_timestamp: i64,
) -> (Option<&[u8]>, i64) {
    match (layout, stored) {
        (Layout::Timestamped, Some(v)) => match split_timestamped(v) {
            Some((ts, value)) => (Some(value), ts),
            // Never written by a timestamped store's own code; logged as it is.
            None => (Some(v), record_timestamp),
        },
        (_, v) => (v, record_timestamp),
    }
}

/// A changelog record's value as a store of `layout` keeps it: for a timestamped store, the
/// record's timestamp before its value, as Kafka Streams' restore does
/// (`RecordConverters.rawValueToTimestampedValue`); a delete stays a delete.
pub fn from_changelog(layout: Layout, timestamp: i64, value: Option<Bytes>) -> Option<Bytes> {
    match layout {
        Layout::Plain => value,
        Layout::Timestamped => value.map(|v| Bytes::from(timestamped(timestamp, &v))),
    }
}

/// A timestamped store value's parts; a value shorter than its timestamp cannot be read.
pub fn split_timestamped(stored: &[u8]) -> Option<(i64, &[u8])> {
    let (ts, value) = stored.split_at_checked(8)?;
    Some((i64::from_be_bytes(ts.try_into().ok()?), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(w: Windows, ts: i64) -> Vec<i64> {
        w.starts_for(ts).collect()
    }

    #[test]
    fn windows_are_those_kafka_streams_assigns() {
        let tumbling = Windows {
            size_ms: 60_000,
            advance_ms: 60_000,
            grace_ms: 10_000,
        };
        assert_eq!(starts(tumbling, 0), vec![0]);
        assert_eq!(starts(tumbling, 59_999), vec![0]);
        assert_eq!(starts(tumbling, 60_000), vec![60_000]);
        let hopping = Windows {
            size_ms: 10,
            advance_ms: 5,
            grace_ms: 0,
        };
        assert_eq!(starts(hopping, 3), vec![0], "no window starts before 0");
        assert_eq!(starts(hopping, 12), vec![5, 10]);
        assert_eq!(starts(hopping, 15), vec![10, 15]);
        assert_eq!(tumbling.retention_ms(), 70_000);
    }

    #[test]
    fn keys_and_values_are_laid_out_as_kafka_streams_lays_them_out() {
        assert_eq!(
            window_store_key(b"k", 258),
            [b"k".as_slice(), &[0, 0, 0, 0, 0, 0, 1, 2], &[0, 0, 0, 0]].concat()
        );
        assert_eq!(
            windowed_key(b"k", 258),
            [b"k".as_slice(), &[0, 0, 0, 0, 0, 0, 1, 2]].concat()
        );
        let v = timestamped(7, b"abc");
        assert_eq!(v, [&7i64.to_be_bytes()[..], b"abc"].concat());
        assert_eq!(split_timestamped(&v), Some((7, b"abc".as_slice())));
        assert_eq!(split_timestamped(b"short"), None);
    }

    /// Kafka's `ChangeLoggingTimestamped*BytesStore.log` and `rawValueToTimestampedValue`.
    #[test]
    fn timestamped_values_are_logged_plain_with_their_timestamp_in_the_record() {
        let stored = timestamped(1_700_000_000_123, &5i64.to_be_bytes());
        assert_eq!(
            to_changelog(Layout::Timestamped, Some(&stored), 9),
            (Some(&5i64.to_be_bytes()[..]), 1_700_000_000_123)
        );
        assert_eq!(to_changelog(Layout::Timestamped, None, 9), (None, 9));
        assert_eq!(
            to_changelog(Layout::Plain, Some(&stored), 9),
            (Some(&stored[..]), 9)
        );
        let back = from_changelog(
            Layout::Timestamped,
            1_700_000_000_123,
            Some(Bytes::copy_from_slice(&5i64.to_be_bytes())),
        );
        assert_eq!(back.as_deref(), Some(&stored[..]));
        assert_eq!(from_changelog(Layout::Timestamped, 4, None), None);
        assert_eq!(
            from_changelog(Layout::Plain, 4, Some(Bytes::from_static(b"v"))).as_deref(),
            Some(&b"v"[..])
        );
    }
}
