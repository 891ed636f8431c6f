//! Stores in memory: what a topology's steps run over in tests and tools that need no disk.

use std::collections::BTreeMap;

use super::{Entries, Stores};
use crate::store::StoreError;

/// Every store's entries in one ordered map, keyed by store name and key; a write lands at
/// once (no batch, no changelog).
#[derive(Debug, Default, Clone)]
pub struct MemStores(pub BTreeMap<(String, Vec<u8>), Vec<u8>>);

impl Stores for MemStores {
    fn get(&mut self, store: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.0.get(&(store.to_owned(), key.to_vec())).cloned())
    }

    fn range(&mut self, store: &str, from: &[u8], to: &[u8]) -> Result<Entries, StoreError> {
        let (from, to) = (
            (store.to_owned(), from.to_vec()),
            (store.to_owned(), to.to_vec()),
        );
        Ok(self
            .0
            .range(from..=to)
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect())
    }

    fn write(&mut self, store: &str, key: &[u8], value: Option<Vec<u8>>) {
        let k = (store.to_owned(), key.to_vec());
        match value {
            Some(v) => self.0.insert(k, v),
            None => self.0.remove(&k),
        };
    }
}
