//! The record cache (`statestore.cache.max.bytes` above 0), as Kafka Streams' lasts: from one
//! commit to the next. A task's batches write their stores' updates into it, not into the
//! changelogs, and the updates its table sinks carry ([`crate::topology::Topology::sink_is_table`])
//! wait in it too; a later update of a key replaces the earlier one. Records read through it.
//! Before each commit, and when the thread's share of the bytes is full, the driver flushes it:
//! each sink's newest update per key, in the order of those last updates (the order in which
//! Kafka Streams' cache flushes its dirty keys), then each store's newest value per key to its
//! changelog, then into the store. Read as a table (the last value per key) the output says
//! what it would without the cache; only updates that a later one replaced are not written.
//!
//! Suppression buffers are not cached (as in Kafka Streams): their updates are written with
//! their batch. Neither are tables read from a topic, whose topic is their changelog.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use crate::topology::{Emitted, StreamRecord};

/// The hasher of the maps every record reads and writes: SipHash cost a tenth of a count per
/// key's instructions per record; foldhash is seeded per map too.
pub type Hasher = foldhash::fast::RandomState;

/// A store's writes by key (`None` deletes), each with the timestamp of the record that
/// wrote it last.
pub type KeyWrites = HashMap<Vec<u8>, (Option<Vec<u8>>, i64), Hasher>;

/// What a cached entry costs beyond its key and value (Kafka's cache counts an overhead per
/// entry too): the map's slot, the timestamp, the allocations' headers.
const ENTRY_OVERHEAD: u64 = 48;

/// A table sink's update waiting in the cache, with the input record it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedOutput {
    /// When it was last replaced: the flush writes in this order.
    seq: u64,
    sink: u16,
    record: StreamRecord,
    /// (source index, offset) of the input record that made it.
    origin: (usize, i64),
}

/// One task's record cache.
#[derive(Default)]
pub struct TaskCache {
    /// Per store index (cached stores only).
    stores: BTreeMap<usize, KeyWrites>,
    /// Per sink, by key: keys and values are copies of their own, never slices of the input
    /// (a slice would keep its whole fetch buffer alive until the flush).
    outputs: BTreeMap<u16, HashMap<Bytes, CachedOutput, Hasher>>,
    next_seq: u64,
    bytes: u64,
    /// Per source index, the input since the last flush: (first offset, offset after).
    input: BTreeMap<usize, (i64, i64)>,
}

/// What a flush writes: per store its writes, the sinks' updates in order with the input each
/// came from, and the input they cover.
pub struct Flush {
    pub writes: BTreeMap<usize, KeyWrites>,
    pub outputs: Vec<Emitted>,
    /// (source index, offset, outputs up to and with it), as a batch's origins.
    pub origins: Vec<(usize, i64, usize)>,
    /// Per source index: (first offset, offset after).
    pub input: Vec<(usize, i64, i64)>,
}

fn size(key: &[u8], value: Option<&[u8]>) -> u64 {
    (key.len() + value.map_or(0, <[u8]>::len)) as u64 + ENTRY_OVERHEAD
}

/// `b`, or a copy when it shares its buffer (a slice of the fetch it came in).
fn owned(b: Bytes) -> Bytes {
    if b.is_unique() {
        b
    } else {
        Bytes::copy_from_slice(&b)
    }
}

impl TaskCache {
    /// A cache for the stores at `stores` (indices into the task's stores).
    pub fn new(stores: impl IntoIterator<Item = usize>) -> TaskCache {
        TaskCache {
            stores: stores
                .into_iter()
                .map(|i| (i, KeyWrites::default()))
                .collect(),
            ..TaskCache::default()
        }
    }

    pub fn caches_store(&self, idx: usize) -> bool {
        self.stores.contains_key(&idx)
    }

    /// Store `idx`'s cached writes, for a batch's reads; `None`: it is not cached.
    pub fn writes(&self, idx: usize) -> Option<&KeyWrites> {
        self.stores.get(&idx)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.input.is_empty() && self.outputs.is_empty()
    }

    /// Takes in a batch that is done: its writes to cached stores, its table sinks' updates
    /// (each with the input record it came from) and the input it read, `(source, from, to)`.
    pub fn merge(
        &mut self,
        writes: BTreeMap<usize, KeyWrites>,
        outputs: Vec<(Emitted, (usize, i64))>,
        input: impl IntoIterator<Item = (usize, i64, i64)>,
    ) {
        for (idx, batch) in writes {
            let Some(cached) = self.stores.get_mut(&idx) else {
                continue;
            };
            for (k, v) in batch {
                let added = size(&k, v.0.as_deref());
                if let Some(old) = cached.get(&k) {
                    self.bytes -= size(&k, old.0.as_deref());
                }
                self.bytes += added;
                cached.insert(k, v);
            }
        }
        for (Emitted { sink, record }, origin) in outputs {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.bytes += size(&record.key, record.value.as_deref());
            let by_key = self.outputs.entry(sink).or_default();
            let record = StreamRecord {
                value: record.value.map(owned),
                old: record.old.map(owned),
                ..record
            };
            match by_key.get_mut(&record.key) {
                Some(cached) => {
                    let was = &cached.record;
                    self.bytes -= size(&was.key, was.value.as_deref());
                    let key = was.key.clone();
                    *cached = CachedOutput {
                        seq,
                        sink,
                        record: StreamRecord { key, ..record },
                        origin,
                    };
                }
                None => {
                    let key = owned(record.key.clone());
                    let record = StreamRecord {
                        key: key.clone(),
                        ..record
                    };
                    let entry = CachedOutput {
                        seq,
                        sink,
                        record,
                        origin,
                    };
                    by_key.insert(key, entry);
                }
            }
        }
        for (source, from, to) in input {
            let range = self.input.entry(source).or_insert((from, to));
            range.1 = range.1.max(to);
        }
    }

    /// Takes out what a flush writes. Nothing reads the cache while its flush is written (the
    /// thread waits for it); its input stays until [`TaskCache::clear`], for a flush that fails.
    pub fn flush(&mut self) -> Flush {
        let writes = self
            .stores
            .iter_mut()
            .map(|(&i, w)| (i, std::mem::take(w)))
            .filter(|(_, w)| !w.is_empty())
            .collect();
        let mut outputs: Vec<CachedOutput> = std::mem::take(&mut self.outputs)
            .into_values()
            .flat_map(HashMap::into_values)
            .collect();
        outputs.sort_unstable_by_key(|o| o.seq);
        let origins = outputs
            .iter()
            .enumerate()
            .map(|(j, o)| (o.origin.0, o.origin.1, j + 1))
            .collect();
        let outputs = outputs
            .into_iter()
            .map(|o| Emitted {
                sink: o.sink,
                record: o.record,
            })
            .collect();
        let input = self
            .input
            .iter()
            .map(|(&s, &(from, to))| (s, from, to))
            .collect();
        Flush {
            writes,
            outputs,
            origins,
            input,
        }
    }

    /// Empties the cache: flushed into the stores, or dropped. Returns the input it covered,
    /// `(source, first offset)`, which a dropped cache's task reads again.
    pub fn clear(&mut self) -> Vec<(usize, i64)> {
        for w in self.stores.values_mut() {
            w.clear();
        }
        self.outputs.clear();
        self.bytes = 0;
        std::mem::take(&mut self.input)
            .into_iter()
            .map(|(s, (from, _))| (s, from))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(sink: u16, key: &str, value: &str) -> (Emitted, (usize, i64)) {
        let record = StreamRecord::new(key.as_bytes().to_vec(), value.as_bytes().to_vec(), 0);
        (Emitted { sink, record }, (0, 0))
    }

    fn writes(pairs: &[(&str, &str)]) -> BTreeMap<usize, KeyWrites> {
        let w: KeyWrites = pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), (Some(v.as_bytes().to_vec()), 1)))
            .collect();
        BTreeMap::from([(0, w)])
    }

    #[test]
    fn the_last_update_of_each_key_is_flushed_in_the_order_of_last_updates() {
        let mut cache = TaskCache::new([0]);
        cache.merge(
            writes(&[("a", "1"), ("b", "1")]),
            vec![out(0, "a", "1"), out(0, "b", "1"), out(0, "a", "2")],
            [(0, 0, 3)],
        );
        cache.merge(
            writes(&[("c", "1"), ("b", "2")]),
            vec![out(0, "c", "1"), out(0, "b", "2")],
            [(0, 3, 5)],
        );
        let flush = cache.flush();
        let got: Vec<(&[u8], &[u8])> = flush
            .outputs
            .iter()
            .map(|e| (e.record.key.as_ref(), e.record.value.as_deref().unwrap()))
            .collect();
        assert_eq!(
            got,
            [(&b"a"[..], &b"2"[..]), (b"c", b"1"), (b"b", b"2")],
            "a's last update came before c's and b's"
        );
        assert_eq!(flush.writes[&0].len(), 3);
        assert_eq!(
            flush.writes[&0][&b"b".to_vec()].0.as_deref(),
            Some(&b"2"[..])
        );
        assert_eq!(flush.input, vec![(0, 0, 5)]);
        assert!(!cache.is_empty(), "a flush leaves its input until cleared");
        assert_eq!(cache.clear(), vec![(0, 0)]);
        assert!(cache.is_empty());
        assert_eq!(cache.bytes(), 0);
        assert!(cache.writes(0).unwrap().is_empty());
    }

    #[test]
    fn another_sinks_update_of_the_same_key_is_its_own() {
        let mut cache = TaskCache::new([]);
        cache.merge(
            BTreeMap::new(),
            vec![out(0, "a", "1"), out(1, "a", "x")],
            [(0, 0, 1)],
        );
        let flush = cache.flush();
        let sinks: Vec<u16> = flush.outputs.iter().map(|e| e.sink).collect();
        assert_eq!(sinks, [0, 1]);
    }

    #[test]
    fn writes_to_a_store_it_does_not_cache_are_not_kept() {
        let mut cache = TaskCache::new([1]);
        cache.merge(writes(&[("a", "1")]), Vec::new(), [(0, 0, 1)]);
        assert!(cache.flush().writes.is_empty());
        assert_eq!(cache.bytes(), 0);
    }

    proptest::proptest! {
        /// Bytes count every entry once, whatever replaced what; one output per (sink, key)
        /// remains and it is the last; the writes hold each key's last value.
        #[test]
        fn holds_the_last_of_each_key_and_counts_its_bytes(
            batches in proptest::collection::vec(
                proptest::collection::vec((0u16..2, 0u8..8, 0u8..200), 0..20), 0..6)
        ) {
            let mut cache = TaskCache::new([0]);
            let mut last: BTreeMap<(u16, u8), u8> = BTreeMap::new();
            let mut stored: BTreeMap<u8, u8> = BTreeMap::new();
            for (b, batch) in batches.iter().enumerate() {
                let mut w = KeyWrites::default();
                let mut outs = Vec::new();
                for &(sink, k, len) in batch {
                    let value = vec![7u8; len as usize];
                    w.insert(vec![k], (Some(value.clone()), 0));
                    let record = StreamRecord::new(vec![k], value, 0);
                    outs.push((Emitted { sink, record }, (0, b as i64)));
                    last.insert((sink, k), len);
                    stored.insert(k, len);
                }
                cache.merge(BTreeMap::from([(0, w)]), outs, [(0, b as i64, b as i64 + 1)]);
            }
            let expected: u64 = last.keys().map(|_| 1 + ENTRY_OVERHEAD).sum::<u64>()
                + last.values().map(|&l| u64::from(l)).sum::<u64>()
                + stored.values().map(|&l| 1 + u64::from(l) + ENTRY_OVERHEAD).sum::<u64>();
            proptest::prop_assert_eq!(cache.bytes(), expected);
            let flush = cache.flush();
            proptest::prop_assert_eq!(flush.outputs.len(), last.len());
            for e in &flush.outputs {
                let len = e.record.value.as_ref().map_or(0, |v| v.len());
                proptest::prop_assert_eq!(Some(&(len as u8)), last.get(&(e.sink, e.record.key[0])));
            }
            let w = flush.writes.get(&0).cloned().unwrap_or_default();
            proptest::prop_assert_eq!(w.len(), stored.len());
        }
    }
}
