//! The store ends up holding exactly what replaying its changelog into a map gives, however the
//! records are split into chunks and whichever way (batch, bulk load, or bulk load of sorted
//! runs) each chunk goes in.

use std::collections::BTreeMap;

use baton_assignor::TaskId;
use baton_runtime::store::{Runs, Write, LONGEST_NATIVE_KEY};
use baton_runtime::TaskStore;
use proptest::prelude::*;

/// One of a few keys: short ones, the empty key, and keys past fjall's 65,535 bytes.
fn key(k: u8) -> Vec<u8> {
    match k {
        8 => Vec::new(),
        9 => vec![b'k'; LONGEST_NATIVE_KEY + 1],
        10 => vec![b'k'; LONGEST_NATIVE_KEY + 3],
        k => vec![b'k', k],
    }
}

const KEYS: u8 = 11;

/// A changelog record: one of a few keys, and a value or a tombstone.
fn record() -> impl Strategy<Value = Write> {
    (
        0u8..KEYS,
        prop::option::weighted(0.8, prop::collection::vec(any::<u8>(), 0..4)),
    )
        .prop_map(|(k, v)| (key(k), v))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_mix_of_batches_and_bulk_loads_replays_the_changelog(
        records in prop::collection::vec(record(), 0..60),
        cuts in prop::collection::vec((1usize..12, 0u8..3), 1..12),
        run_lens in prop::collection::vec(1usize..5, 1..8),
    ) {
        let dir = tempdir();
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut offset = 0usize;
        let mut chunks = cuts.iter().cycle();
        while offset < records.len() {
            let &(len, mode) = chunks.next().unwrap();
            let chunk = &records[offset..(offset + len).min(records.len())];
            offset += chunk.len();
            for (k, v) in chunk {
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }
            match mode {
                0 => store.apply_lazily(chunk, Some(offset as i64)).unwrap(),
                1 => store.ingest(&mut chunk.to_vec(), offset as i64).unwrap(),
                _ => {
                    // As a restore gathers fetched chunks: runs in changelog order.
                    let mut runs = Runs::default();
                    let mut at = 0;
                    for &n in run_lens.iter().cycle() {
                        if at >= chunk.len() {
                            break;
                        }
                        let end = (at + n).min(chunk.len());
                        runs.push_run(chunk[at..end].iter().cloned());
                        at = end;
                    }
                    store.ingest_runs(&mut runs, offset as i64).unwrap();
                    prop_assert!(runs.is_empty());
                }
            }
        }
        for k in 0u8..KEYS {
            let key = key(k);
            prop_assert_eq!(store.get(&key).unwrap(), model.get(&key).cloned(), "key {}", k);
        }
        prop_assert_eq!(store.len().unwrap(), model.len() as u64);
        if !records.is_empty() {
            prop_assert_eq!(store.checkpoint().unwrap(), Some(records.len() as i64));
        }
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "baton-store-prop-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
