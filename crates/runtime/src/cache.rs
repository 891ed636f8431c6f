//! The record cache (`statestore.cache.max.bytes` above 0): where a subtopology's sink carries
//! a table's updates ([`crate::topology::Topology::sink_is_table`]), the updates of one key
//! within one batch of input collapse to the last, as Kafka Streams' cache collapses them
//! between commits. Read as a table (the last value per key), the output says the same as
//! without the cache; only updates that a later one of the same batch replaced are not
//! written. Changelog writes collapse per batch either way.
//!
//! Baton's cache lives for one batch (at most `INPUT_FETCH_BYTES` of input per partition), not
//! until the next commit: it delays no output, and it removes only the updates that one batch
//! repeats (few when a batch holds few updates per key: 10,000 keys in `bench throughput`).

use std::collections::HashSet;

use crate::topology::Emitted;
#[cfg(test)]
use crate::topology::StreamRecord;

/// Keeps the last record of each key of each sink that `table` says carries a table, in the
/// order of those last records (the order in which Kafka Streams' cache flushes its dirty
/// keys), and every record of the other sinks. Returns the kept records' indices in the list
/// as it came, ascending.
pub fn keep_last_per_key(records: &mut Vec<Emitted>, table: impl Fn(u16) -> bool) -> Vec<usize> {
    let mut keep = vec![false; records.len()];
    {
        // Borrowed keys and a fast hasher: this runs over every output of a batch.
        let mut seen: HashSet<(u16, &[u8]), foldhash::fast::RandomState> =
            HashSet::with_capacity_and_hasher(records.len().min(1 << 16), Default::default());
        for (i, e) in records.iter().enumerate().rev() {
            keep[i] = !table(e.sink) || seen.insert((e.sink, e.record.key.as_ref()));
        }
    }
    let kept: Vec<usize> = (0..records.len()).filter(|&i| keep[i]).collect();
    let mut flags = keep.into_iter();
    records.retain(|_| flags.next().unwrap_or(false));
    kept
}

/// Which input record each output came from, as `(input, offset, outputs up to and with it)`,
/// after only the outputs at `kept` (ascending) remain.
pub fn origins_of_kept<I: Copy>(
    origins: &[(I, i64, usize)],
    kept: &[usize],
) -> Vec<(I, i64, usize)> {
    kept.iter()
        .enumerate()
        .filter_map(|(j, &i)| {
            let at = origins.partition_point(|o| o.2 <= i);
            origins
                .get(at)
                .map(|&(input, offset, _)| (input, offset, j + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, value: &str) -> Emitted {
        Emitted {
            sink: 0,
            record: StreamRecord::new(key.as_bytes().to_vec(), value.as_bytes().to_vec(), 0),
        }
    }

    #[test]
    fn the_last_update_of_each_key_stays_in_the_order_of_last_updates() {
        let mut records = vec![
            rec("a", "1"),
            rec("b", "1"),
            rec("a", "2"),
            rec("c", "1"),
            rec("b", "2"),
        ];
        let kept = keep_last_per_key(&mut records, |_| true);
        assert_eq!(kept, vec![2, 3, 4]);
        let got: Vec<(&[u8], &[u8])> = records
            .iter()
            .map(|e| (e.record.key.as_ref(), e.record.value.as_deref().unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![
                (b"a".as_ref(), b"2".as_ref()),
                (b"c".as_ref(), b"1".as_ref()),
                (b"b".as_ref(), b"2".as_ref())
            ]
        );
    }

    #[test]
    fn kept_outputs_keep_the_input_record_they_came_from() {
        // Input 10 gave outputs 0 and 1, input 11 none, input 12 gave output 2.
        let origins = vec![(0usize, 10, 2), (0, 11, 2), (1, 12, 3)];
        assert_eq!(
            origins_of_kept(&origins, &[1, 2]),
            vec![(0, 10, 1), (1, 12, 2)]
        );
        assert!(origins_of_kept(&origins, &[]).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn one_record_per_key_remains_and_it_is_the_last(keys in proptest::collection::vec(0u8..6, 0..60)) {
            // Sink 1 is not a table's: every record of it stays.
            let mut records: Vec<Emitted> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| Emitted {
                    sink: u16::from(k % 2),
                    record: StreamRecord::new(vec![*k / 2], i.to_string().into_bytes(), 0),
                })
                .collect();
            let before = records.clone();
            let kept = keep_last_per_key(&mut records, |sink| sink == 0);
            let distinct: HashSet<u8> = keys.iter().copied().filter(|k| k % 2 == 0).collect();
            let stream = keys.iter().filter(|k| *k % 2 == 1).count();
            proptest::prop_assert_eq!(records.len(), distinct.len() + stream);
            for (r, &i) in records.iter().zip(&kept) {
                proptest::prop_assert_eq!(r, &before[i]);
                if r.sink == 0 {
                    proptest::prop_assert!(before[i + 1..]
                        .iter()
                        .all(|later| later.sink != 0 || later.record.key != r.record.key));
                }
            }
        }
    }
}
