//! Writing a store's whole contents into its changelog again ("re-seeding"), for a changelog
//! deleted and made again while the store was intact: the store is the newer of the two, and
//! rebuilding it from the younger changelog would lose every key written before (see
//! `baton_core::machine::Reseed`). The records are those the store's own writes would log, in
//! Kafka Streams' layout ([`crate::layout::to_changelog`]), so Kafka Streams and Baton both
//! restore them.

use bytes::Bytes;

use baton_kafka::records::KeyValue;

use crate::layout::to_changelog;
use crate::store::{StoreError, TaskStore};
use crate::topology::Layout;

/// What one read of the store gives: records to produce, their timestamps, and where to go on.
pub struct Page {
    pub records: Vec<KeyValue>,
    pub timestamps: Vec<i64>,
    pub next: Cursor,
}

/// Where a re-seed stands in its store: keys held as they are in key order, then the keys
/// held by digest, then done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    Start,
    After(Vec<u8>),
    LongKeys,
    Done,
}

/// The next page of `store`'s contents as changelog records, about `max_bytes` of them.
/// `timestamp` stamps values that carry none of their own (a plain store's, as Kafka stamps
/// them with the writing record's time, which the store does not keep).
pub fn page(
    store: &TaskStore,
    layout: Layout,
    at: &Cursor,
    max_bytes: usize,
    timestamp: i64,
) -> Result<Page, StoreError> {
    let (entries, next) = match at {
        Cursor::Start | Cursor::After(_) => {
            let after = match at {
                Cursor::After(k) => Some(k.as_slice()),
                _ => None,
            };
            let (entries, more) = store.page(after, max_bytes)?;
            (entries, more.map_or(Cursor::LongKeys, Cursor::After))
        }
        Cursor::LongKeys => (store.long_entries()?, Cursor::Done),
        Cursor::Done => (Vec::new(), Cursor::Done),
    };
    let mut records = Vec::with_capacity(entries.len());
    let mut timestamps = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let (value, ts) = to_changelog(layout, Some(&v), timestamp);
        records.push((Some(Bytes::from(k)), value.map(Bytes::copy_from_slice)));
        timestamps.push(ts);
    }
    Ok(Page {
        records,
        timestamps,
        next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_assignor::TaskId;

    #[test]
    fn every_entry_once_in_kafkas_layout() {
        let dir = std::env::temp_dir().join(format!("baton-reseed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "counts").unwrap();
        let mut writes: Vec<crate::store::Write> = (0..100u32)
            .map(|i| {
                let v = crate::layout::timestamped(1_000 + i as i64, &i.to_be_bytes());
                (format!("k{i:03}").into_bytes(), Some(v))
            })
            .collect();
        // A key fjall cannot hold as it is, kept by digest.
        writes.push((Vec::new(), Some(crate::layout::timestamped(7, b"empty"))));
        store.apply(&writes, Some(500)).unwrap();

        let mut at = Cursor::Start;
        let mut seen = Vec::new();
        let mut pages = 0;
        while at != Cursor::Done {
            let p = page(&store, Layout::Timestamped, &at, 64, 99).unwrap();
            seen.extend(p.records.into_iter().zip(p.timestamps));
            at = p.next;
            pages += 1;
        }
        assert!(pages > 10, "64-byte pages: {pages}");
        assert_eq!(seen.len(), 101, "every entry once");
        let ((k, v), ts) = &seen[3];
        assert_eq!(k.as_deref(), Some(&b"k003"[..]));
        assert_eq!(
            v.as_deref(),
            Some(&3u32.to_be_bytes()[..]),
            "the plain value"
        );
        assert_eq!(*ts, 1_003, "the value's timestamp as the record's");
        let ((k, v), ts) = seen.last().unwrap();
        assert_eq!(
            k.as_deref(),
            Some(&b""[..]),
            "the long key comes last, whole"
        );
        assert_eq!(v.as_deref(), Some(&b"empty"[..]));
        assert_eq!(*ts, 7);

        let plain = page(&store, Layout::Plain, &Cursor::Start, usize::MAX, 99).unwrap();
        assert_eq!(
            plain.timestamps[0], 99,
            "a plain store's records take the given time"
        );
        assert_eq!(
            plain.records[0].1.as_ref().unwrap().len(),
            12,
            "its bytes as they are"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
