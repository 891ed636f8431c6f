//! Stores in memory: what a topology's steps run over in tests and tools that need no disk.

use std::collections::BTreeMap;

use super::{suppress::buffer_time, BufferHead, Entries, Stores};
use crate::store::StoreError;

/// Every store's entries in one ordered map, keyed by store name and key; a write lands at
/// once (no batch, no changelog).
#[derive(Debug, Default, Clone)]
pub struct MemStores(pub BTreeMap<(String, Vec<u8>), Vec<u8>>);

impl MemStores {
    fn entries<'a>(&'a self, store: &'a str) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.0
            .iter()
            .filter(move |((s, _), _)| s == store)
            .map(|((_, k), v)| (k.as_slice(), v.as_slice()))
    }
}

impl Stores for MemStores {
    fn get(&mut self, store: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.0.get(&(store.to_owned(), key.to_vec())).cloned())
    }

    fn range(&mut self, store: &str, from: &[u8], to: &[u8]) -> Result<Entries, StoreError> {
        if from > to {
            return Ok(Vec::new());
        }
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

    fn buffer_head(
        &mut self,
        store: &str,
        skip: &dyn Fn(&[u8]) -> bool,
    ) -> Result<BufferHead, StoreError> {
        Ok(self
            .entries(store)
            .filter(|(k, _)| !skip(k))
            .map(|(k, v)| (buffer_time(v), k.to_vec()))
            .min())
    }

    fn buffer_totals(&mut self, store: &str) -> Result<(u64, u64), StoreError> {
        Ok(self.entries(store).fold((0, 0), |(n, b), (k, v)| {
            (n + 1, b + (k.len() + v.len()) as u64)
        }))
    }

    fn write(&mut self, store: &str, key: &[u8], value: Option<Vec<u8>>) {
        let k = (store.to_owned(), key.to_vec());
        match value {
            Some(v) => self.0.insert(k, v),
            None => self.0.remove(&k),
        };
    }
}
