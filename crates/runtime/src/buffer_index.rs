//! A suppression buffer's entries in (buffer time, key) order, beside the store that holds
//! them by key: what finds the entries whose time has come without reading the whole store.
//! Built from the store when first asked, kept with each batch the store takes, dropped when
//! a restore loads the store in bulk.

use std::collections::{BTreeSet, HashMap};

use crate::topology::suppress::buffer_time;
use crate::topology::BufferHead;

#[derive(Debug, Default)]
pub struct BufferIndex {
    by_time: BTreeSet<(i64, Vec<u8>)>,
    /// Each key's buffer time and its key's and value's bytes.
    by_key: HashMap<Vec<u8>, (i64, u64)>,
    bytes: u64,
}

impl BufferIndex {
    /// Sets `key`'s entry to `value`, or removes it.
    pub fn write(&mut self, key: &[u8], value: Option<&[u8]>) {
        if let Some((time, size)) = self.by_key.remove(key) {
            self.by_time.remove(&(time, key.to_vec()));
            self.bytes -= size;
        }
        if let Some(v) = value {
            let (time, size) = (buffer_time(v), (key.len() + v.len()) as u64);
            self.by_time.insert((time, key.to_vec()));
            self.by_key.insert(key.to_vec(), (time, size));
            self.bytes += size;
        }
    }

    /// The first entry whose key `skip` passes over.
    pub fn head(&self, skip: &dyn Fn(&[u8]) -> bool) -> BufferHead {
        self.by_time.iter().find(|(_, k)| !skip(k)).cloned()
    }

    /// Entries, and their keys' and values' bytes.
    pub fn totals(&self) -> (u64, u64) {
        (self.by_key.len() as u64, self.bytes)
    }

    /// `key`'s entry's key and value bytes, if it has one.
    pub fn size_of(&self, key: &[u8]) -> Option<u64> {
        self.by_key.get(key).map(|&(_, size)| size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(time: i64) -> Vec<u8> {
        let mut v = vec![9; 5];
        v.extend_from_slice(&time.to_be_bytes());
        v
    }

    #[test]
    fn orders_by_time_then_key_and_keeps_totals() {
        let mut ix = BufferIndex::default();
        ix.write(b"b", Some(&entry(10)));
        ix.write(b"a", Some(&entry(10)));
        ix.write(b"c", Some(&entry(5)));
        assert_eq!(ix.head(&|_| false), Some((5, b"c".to_vec())));
        assert_eq!(ix.head(&|k| k == b"c"), Some((10, b"a".to_vec())));
        assert_eq!(ix.totals(), (3, 3 * 14));
        // A rewrite moves the key; a removal forgets it.
        ix.write(b"c", Some(&entry(20)));
        assert_eq!(ix.head(&|_| false), Some((10, b"a".to_vec())));
        ix.write(b"a", None);
        ix.write(b"a", None);
        assert_eq!(ix.totals(), (2, 2 * 14));
        assert_eq!(ix.size_of(b"a"), None);
        assert_eq!(ix.size_of(b"b"), Some(14));
        assert_eq!(ix.head(&|_| false), Some((10, b"b".to_vec())));
    }
}
