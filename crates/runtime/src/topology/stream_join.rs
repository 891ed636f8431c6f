//! Stream-stream joins within a time window, as Kafka Streams' `KStreamJoinWindow` and
//! `KStreamKStreamJoin` run them: each side's records in a window store of its own (keys
//! [`join_store_key`], duplicates kept), and for left and outer joins one shared store of the
//! records that found no partner yet (Kafka's `KSTREAM-OUTERSHARED-...-store`), sent on with
//! no partner once their window has closed.

use bytes::Bytes;

use super::{event_time, row_pair, Output, Stores, StreamRecord};
use crate::store::StoreError;

/// A stream-stream join store's key, as Kafka Streams' window stores that keep duplicates
/// hold it: the record key, its timestamp (8 bytes), a sequence number (4 bytes), all
/// big-endian.
pub fn join_store_key(key: &[u8], timestamp: i64, seq: i32) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 12);
    k.extend_from_slice(key);
    k.extend_from_slice(&timestamp.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The timestamp and sequence number of a [`join_store_key`] of record key `key`; `None`
/// for a key of another record key.
fn split_join_store_key(stored: &[u8], key: &[u8]) -> Option<(i64, i32)> {
    let rest = stored.strip_prefix(key).filter(|r| r.len() == 12)?;
    let ts = i64::from_be_bytes(rest[..8].try_into().ok()?);
    let seq = i32::from_be_bytes(rest[8..].try_into().ok()?);
    Some((ts, seq))
}

/// What a left or outer join keeps of the records that found no partner yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmatched {
    /// The store both sides share (Kafka's `KSTREAM-OUTERSHARED-<n>-store`): keys
    /// [`unmatched_key`], values Kafka's list of `LeftOrRightValue`s ([`unmatched_list`]).
    pub store: String,
    /// Whether this side's records without a partner are sent on alone: the left side of a
    /// left join, either side of an outer join.
    pub emits: bool,
    /// How long after a left record's timestamp, and after a right one's, a partner may
    /// still come: the windows' `after` and `before` (Kafka's look-back per side).
    pub lookback_ms: (i64, i64),
    /// How long past that a partner out of order is still taken.
    pub grace_ms: i64,
}

/// A key of the [`Unmatched`] store, as Kafka's `TimestampedKeyAndJoinSideSerializer` writes
/// it: the timestamp (8 bytes, big-endian), 1 for the left side or 0 for the right, the key.
/// Keys sort by time, then right before left, then by key, the order Kafka sends them on.
pub fn unmatched_key(timestamp: i64, left: bool, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + key.len());
    k.extend_from_slice(&timestamp.to_be_bytes());
    k.push(u8::from(left));
    k.extend_from_slice(key);
    k
}

/// An [`Unmatched`] store value, as Kafka's `ListValueStore` keeps it (`Serdes.ListSerde` of
/// byte arrays): the variable-size strategy byte (1), the count (`i32`), then each entry's
/// length (`i32`) and bytes, all big-endian; each entry a `LeftOrRightValue`: 1 for a left
/// value or 0 for a right one, then the value.
pub fn unmatched_list(entries: &[(bool, &[u8])]) -> Vec<u8> {
    let mut out = vec![1u8];
    out.extend_from_slice(&(entries.len() as i32).to_be_bytes());
    for (left, value) in entries {
        out.extend_from_slice(&((value.len() + 1) as i32).to_be_bytes());
        out.push(u8::from(*left));
        out.extend_from_slice(value);
    }
    out
}

/// The entries of an [`unmatched_list`]: whether each is a left value, and its bytes; `None`
/// if `list` is not one.
pub fn split_unmatched_list(list: &[u8]) -> Option<Vec<(bool, &[u8])>> {
    let (&strategy, rest) = list.split_first()?;
    if strategy != 1 {
        return None;
    }
    let count = i32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let mut rest = &rest[4..];
    // Each entry takes at least 5 bytes: a count beyond that is not a list.
    let mut out = Vec::with_capacity(usize::try_from(count).ok()?.min(rest.len() / 5));
    for _ in 0..count {
        let len = i32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
        let len = usize::try_from(len).ok()?;
        let entry = rest.get(4..4 + len)?;
        rest = &rest[4 + len..];
        let (&side, value) = entry.split_first()?;
        match side {
            0 | 1 => out.push((side == 1, value)),
            _ => return None,
        }
    }
    rest.is_empty().then_some(out)
}

/// [`super::Step::JoinWindow`] for one record.
pub(super) fn join_window_put(
    (store, retention_ms): (&str, i64),
    r: &StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
) -> Result<(), StoreError> {
    let ts = event_time(r, "windowed joins");
    let cutoff = stream_time.saturating_sub(retention_ms);
    if cutoff > 0 {
        let (from, to) = (
            join_store_key(&r.key, 0, 0),
            join_store_key(&r.key, cutoff - 1, i32::MAX),
        );
        for (k, _) in stores.range(store, &from, &to)? {
            if split_join_store_key(&k, &r.key).is_some() {
                stores.delete(store, &k);
            }
        }
    }
    if ts < cutoff {
        out.late += 1;
        return Ok(());
    }
    let (from, to) = (
        join_store_key(&r.key, ts, 0),
        join_store_key(&r.key, ts, i32::MAX),
    );
    let last = stores
        .range(store, &from, &to)?
        .iter()
        .filter_map(|(k, _)| split_join_store_key(k, &r.key).map(|(_, seq)| seq))
        .max()
        .unwrap_or(0);
    let value = r.value.as_deref().unwrap_or_default().to_vec();
    stores.put(
        store,
        &join_store_key(&r.key, ts, (last + 1) & i32::MAX),
        value,
    );
    Ok(())
}

/// One side of a join: the other side's store, the window seen from this side, whether this
/// is the left side, and for left and outer joins the unmatched records' store.
pub(super) struct Side<'a> {
    pub other: &'a str,
    pub before_ms: i64,
    pub after_ms: i64,
    pub left: bool,
    pub unmatched: Option<&'a Unmatched>,
}

/// [`super::Step::WindowJoin`] for one record (Kafka's `KStreamKStreamJoinProcessor.process`
/// with its spurious-result fix): first the unmatched records whose window closed are sent
/// on alone; then the record with each of the other side's records in its window (a partner
/// found takes the partner out of the unmatched store); a record of an emitting side that
/// found none is kept as unmatched, or sent on alone at once if its window is already behind
/// stream time. Pairs and lone records go on as [`row_pair`]s, left value first.
pub(super) fn window_join(
    side: Side<'_>,
    r: &StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    if let Some(u) = side.unmatched {
        send_closed(u, stream_time, stores, next)?;
    }
    let ts = r.timestamp;
    let value = r.value.as_deref().unwrap_or_default();
    let (from, to) = (
        ts.saturating_sub(side.before_ms).max(0),
        ts.saturating_add(side.after_ms).max(0),
    );
    let (lo, hi) = (
        join_store_key(&r.key, from, 0),
        join_store_key(&r.key, to, i32::MAX),
    );
    let mut partners = 0;
    for (k, v) in stores.range(side.other, &lo, &hi)? {
        let Some((other_ts, _)) = split_join_store_key(&k, &r.key) else {
            continue;
        };
        partners += 1;
        if let Some(u) = side.unmatched {
            let theirs = unmatched_key(other_ts, !side.left, &r.key);
            if stores.get(&u.store, &theirs)?.is_some() {
                stores.delete(&u.store, &theirs);
            }
        }
        let frame = pair(side.left, Some(value), Some(&v));
        next.push(StreamRecord::new(r.key.clone(), frame, ts.max(other_ts)));
    }
    match side.unmatched {
        Some(u) if partners == 0 && u.emits => {
            if to < stream_time {
                let frame = pair(side.left, Some(value), None);
                next.push(StreamRecord::new(r.key.clone(), frame, ts));
            } else {
                keep_unmatched(&u.store, (ts, side.left), r, stores)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A [`row_pair`] of this side's value and the other's, the left one first.
fn pair(left: bool, mine: Option<&[u8]>, theirs: Option<&[u8]>) -> Vec<u8> {
    if left {
        row_pair(mine, theirs)
    } else {
        row_pair(theirs, mine)
    }
}

/// Adds the record to the unmatched records of its key, side and time.
fn keep_unmatched(
    store: &str,
    (ts, left): (i64, bool),
    r: &StreamRecord,
    stores: &mut dyn Stores,
) -> Result<(), StoreError> {
    let key = unmatched_key(ts, left, &r.key);
    let value = r.value.as_deref().unwrap_or_default();
    let list = match stores.get(store, &key)? {
        Some(old) => {
            let mut entries = read_list(store, &old);
            entries.push((left, value));
            unmatched_list(&entries)
        }
        None => unmatched_list(&[(left, value)]),
    };
    stores.put(store, &key, list);
    Ok(())
}

fn read_list<'a>(store: &str, list: &'a [u8]) -> Vec<(bool, &'a [u8])> {
    split_unmatched_list(list).unwrap_or_else(|| {
        crate::record::undecodable(format!(
            "store {store:?}: a value of {} bytes is not a list of unmatched join records",
            list.len()
        ))
    })
}

/// Sends on alone, in key order, every unmatched record whose window closed (its timestamp
/// plus its side's look-back plus the grace is behind stream time), and forgets them.
fn send_closed(
    u: &Unmatched,
    stream_time: i64,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let (left_lookback, right_lookback) = u.lookback_ms;
    let closed = |ts: i64, left: bool| {
        let lookback = if left { left_lookback } else { right_lookback };
        ts.saturating_add(lookback).saturating_add(u.grace_ms) < stream_time
    };
    let newest = stream_time
        .saturating_sub(left_lookback.min(right_lookback))
        .saturating_sub(u.grace_ms)
        .saturating_sub(1);
    if newest < 0 {
        return Ok(());
    }
    let (from, mut to) = (unmatched_key(0, false, b""), newest.to_be_bytes().to_vec());
    // Past every key of that time: a side byte is 0 or 1.
    to.push(0xff);
    for (k, list) in stores.range(&u.store, &from, &to)? {
        let Some((ts, left, key)) = split_unmatched_key(&k) else {
            crate::record::undecodable(format!(
                "store {:?}: a key of {} bytes is not a timestamp, a side and a key",
                u.store,
                k.len()
            ));
        };
        if !closed(ts, left) {
            continue;
        }
        for (is_left, value) in read_list(&u.store, &list) {
            let frame = pair(is_left, Some(value), None);
            next.push(StreamRecord {
                key: Bytes::copy_from_slice(key),
                value: Some(frame.into()),
                timestamp: ts,
                old: None,
                partition: None,
            });
        }
        stores.delete(&u.store, &k);
    }
    Ok(())
}

fn split_unmatched_key(k: &[u8]) -> Option<(i64, bool, &[u8])> {
    let ts = i64::from_be_bytes(k.get(..8)?.try_into().ok()?);
    match k.get(8)? {
        0 => Some((ts, false, &k[9..])),
        1 => Some((ts, true, &k[9..])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmatched_keys_and_lists_are_kafkas_bytes() {
        // TimestampedKeyAndJoinSideSerializer: timestamp, side byte, key.
        assert_eq!(
            unmatched_key(0x0102, true, b"k"),
            [0, 0, 0, 0, 0, 0, 1, 2, 1, b'k']
        );
        assert_eq!(unmatched_key(7, false, b""), [0, 0, 0, 0, 0, 0, 0, 7, 0]);
        // ListSerializer, VARIABLE_SIZE (ordinal 1), of LeftOrRightValues.
        let list = unmatched_list(&[(true, b"ab"), (false, b"")]);
        assert_eq!(
            list,
            [1, 0, 0, 0, 2, 0, 0, 0, 3, 1, b'a', b'b', 0, 0, 0, 1, 0]
        );
        assert_eq!(
            split_unmatched_list(&list),
            Some(vec![(true, &b"ab"[..]), (false, &b""[..])])
        );
    }

    #[test]
    fn a_list_that_is_not_one_is_refused_without_allocating_its_count() {
        for bad in [
            &[][..],
            &[0, 0, 0, 0, 0][..],
            &[1, 0x7f, 0xff, 0xff, 0xff][..],
            &[1, 0, 0, 0, 1, 0, 0, 0, 1, 2][..],
            &[1, 0, 0, 0, 1, 0, 0, 0, 0][..],
            &[1, 0, 0, 0, 0, 9][..],
            &[1, 0xff, 0xff, 0xff, 0xff][..],
        ] {
            assert_eq!(split_unmatched_list(bad), None, "{bad:?}");
        }
        assert_eq!(split_unmatched_list(&[1, 0, 0, 0, 0]), Some(vec![]));
    }
}
