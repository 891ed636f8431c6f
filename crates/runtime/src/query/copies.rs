//! The stores this instance holds, open for reading beside the stream threads that write them:
//! each thread registers a task's stores when it opens the task and takes them back when it
//! releases it. Also how far each active has processed its input, for read-your-writes.

use std::collections::BTreeMap;
use std::sync::Mutex;

use baton_assignor::TaskId;
use baton_protocol::TopicPartition;
use tokio::sync::Notify;

use crate::store::{StoreError, TaskStore};

#[derive(Default)]
pub struct LocalCopies {
    inner: Mutex<Inner>,
    /// Woken whenever an active's processed input moves (`at_least=` waits on it).
    advanced: Notify,
    /// Read-your-writes reads waiting for input that may sit in a record cache: each stream
    /// thread flushes its caches when this moved since it last looked ([`crate::cache`]).
    flush_requests: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Inner {
    stores: BTreeMap<(String, TaskId), TaskStore>,
    /// Per task, per source partition: every input below this offset is in the task's stores.
    processed: BTreeMap<TaskId, BTreeMap<TopicPartition, i64>>,
}

/// One key as a local copy holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub value: Option<Vec<u8>>,
    /// The last changelog offset the answer reflects (-1: none yet).
    pub position: i64,
}

/// A range scan's bounds: keys in `from..=to` (open ends when `None`), after `after` (the last
/// key of the previous page), at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeBounds {
    pub from: Option<Vec<u8>>,
    pub to: Option<Vec<u8>>,
    pub after: Option<Vec<u8>>,
    pub limit: usize,
}

/// A key range as a local copy holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRead {
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub more: bool,
    pub position: i64,
}

/// The last changelog offset a store reflects, from its next one (-1: none yet).
fn position(next_offset: Option<i64>) -> i64 {
    next_offset.map_or(-1, |n| n - 1)
}

/// Attempts at a consistent read while bulk loads keep landing between table and checkpoint.
const READ_ATTEMPTS: usize = 3;

impl LocalCopies {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn register(&self, task: TaskId, store: &str, handle: TaskStore) {
        let mut inner = self.lock();
        inner.stores.insert((store.to_owned(), task), handle);
        inner.processed.entry(task).or_default();
    }

    /// Follows how far `task` has processed its input, whether or not it has stores: an
    /// `at_least=` on an input upstream of a store waits for the task reading that input.
    pub fn track(&self, task: TaskId) {
        self.lock().processed.entry(task).or_default();
    }

    fn handle(&self, store: &str, task: TaskId) -> Option<TaskStore> {
        self.lock().stores.get(&(store.to_owned(), task)).cloned()
    }

    /// `read` of `store` of `task`, tried again while bulk loads keep landing between table
    /// and checkpoint; `Ok(None)` when this instance does not hold it or it stayed torn.
    fn read_with<T>(
        &self,
        store: &str,
        task: TaskId,
        read: impl Fn(&TaskStore) -> Result<Option<T>, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let Some(handle) = self.handle(store, task) else {
            return Ok(None);
        };
        for _ in 0..READ_ATTEMPTS {
            if let Some(r) = read(&handle)? {
                return Ok(Some(r));
            }
            std::thread::yield_now();
        }
        Ok(None)
    }

    /// The task is released: its stores are no longer read here.
    pub fn release(&self, task: TaskId) {
        let mut inner = self.lock();
        inner.stores.retain(|(_, t), _| *t != task);
        inner.processed.remove(&task);
    }

    /// The tasks holding `store` here.
    pub fn tasks_of(&self, store: &str) -> Vec<TaskId> {
        self.lock()
            .stores
            .keys()
            .filter(|(s, _)| s == store)
            .map(|(_, t)| *t)
            .collect()
    }

    /// `key` in `store` of `task`: `Ok(None)` when this instance does not hold it, or while a
    /// bulk load keeps the store between two consistent states.
    pub fn read(&self, store: &str, task: TaskId, key: &[u8]) -> Result<Option<Read>, StoreError> {
        self.read_with(store, task, |h| {
            Ok(h.read_consistent(key)?.map(|r| Read {
                value: r.value,
                position: position(r.next_offset),
            }))
        })
    }

    /// Up to `limit` entries of `store` of `task` in `from..=to` after `after`, in key order
    /// ([`TaskStore::range_consistent`]); `Ok(None)` as for [`LocalCopies::read`].
    pub fn read_range(
        &self,
        store: &str,
        task: TaskId,
        bounds: &RangeBounds,
    ) -> Result<Option<RangeRead>, StoreError> {
        self.read_with(store, task, |h| {
            let read = h.range_consistent(
                bounds.from.as_deref(),
                bounds.to.as_deref(),
                bounds.after.as_deref(),
                bounds.limit,
            )?;
            Ok(read.map(|r| RangeRead {
                entries: r.entries,
                more: r.more,
                position: position(r.next_offset),
            }))
        })
    }

    /// Every input of `task` below `next` in `source` is in its stores. Called after every
    /// batch: no scan, and no allocation once the partition is known.
    pub fn processed(&self, task: TaskId, source: &TopicPartition, next: i64) {
        let mut inner = self.lock();
        // Registered tasks only: a released task's late batch must not bring it back.
        let Some(by_source) = inner.processed.get_mut(&task) else {
            return;
        };
        match by_source.get_mut(source) {
            Some(at) => *at = (*at).max(next),
            None => {
                by_source.insert(source.clone(), next);
            }
        }
        drop(inner);
        self.advanced.notify_waiters();
    }

    /// The next input offset of `source` that `task`'s stores have not taken in, if known.
    pub fn processed_to(&self, task: TaskId, source: &TopicPartition) -> Option<i64> {
        self.lock().processed.get(&task)?.get(source).copied()
    }

    /// Asks the stream threads to flush their record caches now, for a read waiting for input
    /// that may be in one.
    pub fn request_flush(&self) {
        self.flush_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many flushes were asked for so far ([`LocalCopies::request_flush`]).
    pub fn flush_requests(&self) -> u64 {
        self.flush_requests
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Resolves once any active's processed input moves; create it before checking, so a
    /// move in between is not missed.
    pub fn advanced(&self) -> tokio::sync::futures::Notified<'_> {
        self.advanced.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_what_is_registered_and_forgets_released_tasks() {
        let dir = std::env::temp_dir().join(format!("baton-copies-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let task = TaskId::new(0, 1);
        let store = TaskStore::open(&dir, task, "counts").unwrap();
        store
            .apply(&[(b"k".to_vec(), Some(b"v".to_vec()))], Some(5))
            .unwrap();
        let copies = LocalCopies::default();
        assert_eq!(copies.read("counts", task, b"k").unwrap(), None);
        copies.register(task, "counts", store);
        let read = copies.read("counts", task, b"k").unwrap().unwrap();
        assert_eq!((read.value.as_deref(), read.position), (Some(&b"v"[..]), 4));
        assert_eq!(copies.tasks_of("counts"), vec![task]);
        let tp = TopicPartition::new("in", 1);
        copies.processed(task, &tp, 10);
        copies.processed(task, &tp, 7);
        assert_eq!(copies.processed_to(task, &tp), Some(10), "never backwards");
        copies.release(task);
        assert_eq!(copies.read("counts", task, b"k").unwrap(), None);
        assert_eq!(copies.processed_to(task, &tp), None);
        copies.processed(task, &tp, 12);
        assert_eq!(
            copies.processed_to(task, &tp),
            None,
            "not held: not recorded"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
