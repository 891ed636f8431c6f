//! A task's persistent key-value store: a fjall (pure-Rust LSM) database per task and store
//! under the state directory. An LSM takes the bulk writes of a restore into its memtable and
//! journal without rewriting pages, which is what restore throughput needs (docs/RUNTIME.md).
//! The changelog offset the store has absorbed lives in a second keyspace, written in the same
//! atomic batch as the data, so after a crash the store and its checkpoint always agree.
//!
//! fjall takes keys of 1 to 65,535 bytes. A record may carry any key the broker delivers (an
//! empty one, or one of megabytes), so keys outside that range live in a third keyspace, under
//! the SHA-256 digest of the key, with the whole key kept beside the value and checked on every
//! read. Keys inside the range take the usual path, untouched and uncopied.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use baton_assignor::TaskId;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Slice};
use sha2::{Digest, Sha256};

use crate::buffer_index::BufferIndex;
use crate::topology::BufferHead;

/// The next changelog offset to apply.
const NEXT_OFFSET: &str = "next_changelog_offset";

/// The id (16 bytes) of the changelog topic the checkpoint counts in: a changelog deleted and
/// made again under the same name starts its offsets again, so a checkpoint is only an offset
/// of the topic it was taken in.
const CHANGELOG_ID: &str = "changelog_topic_id";

/// The longest key fjall holds as it is (its key lengths are 16-bit).
pub const LONGEST_NATIVE_KEY: usize = u16::MAX as usize;

/// Whether fjall holds `key` as it is; the others go to the digest keyspace.
pub fn is_native_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= LONGEST_NATIVE_KEY
}

/// Where a key fjall cannot hold is kept: its SHA-256 digest.
fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

/// A digest-keyed entry's value: the key's length (u32, big-endian), the key, the value.
fn wrap(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len() + value.len());
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// The (key, value) of a digest-keyed entry, or `None` when it does not parse.
fn unwrap(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(entry.get(..4)?.try_into().ok()?) as usize;
    let rest = &entry[4..];
    (len <= rest.len()).then(|| rest.split_at(len))
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store failed for a reason outside its files (a full disk, a poisoned handle after
    /// a failed write, no permission): reopening it later may succeed, and its data is good.
    #[error("store {path}: {message}")]
    Store { path: String, message: String },
    /// The store's files are damaged or unreadable: only a rebuild from the changelog helps.
    #[error("store {path} is corrupt: {message}")]
    Corrupt { path: String, message: String },
    /// Another `TaskStore` (another stream thread) holds it open.
    #[error("store {path}: in use by another thread of this process")]
    Busy { path: String },
    #[error("creating {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// A key and its value as the store holds them.
pub type Entry = (Vec<u8>, Vec<u8>);

/// One write: `None` deletes the key (a changelog tombstone).
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// A handle to the store; clones share it (a bulk load runs on a thread of its own).
#[derive(Clone)]
pub struct TaskStore {
    db: Database,
    data: Keyspace,
    /// Keys fjall cannot hold, by digest ([`is_native_key`]).
    long_keys: Keyspace,
    checkpoint: Keyspace,
    path: PathBuf,
    /// Bulk loads started and ended: a load writes its table before it moves the checkpoint,
    /// so a reader sees a consistent (value, checkpoint) pair only with none between them
    /// ([`TaskStore::read_consistent`]).
    loads: Arc<LoadCount>,
    /// A suppression buffer's time order, built when first asked ([`TaskStore::buffer_head`]):
    /// kept with each batch applied, dropped by a bulk load.
    index: Arc<Mutex<Option<BufferIndex>>>,
}

/// A key's value with the store's checkpoint, as one snapshot saw them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsistentRead {
    pub value: Option<Vec<u8>>,
    /// The next changelog offset to apply (`None`: the store never absorbed any).
    pub next_offset: Option<i64>,
}

/// A key range as one snapshot saw it ([`TaskStore::range_consistent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsistentRange {
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// Entries past the limit remain.
    pub more: bool,
    pub next_offset: Option<i64>,
}

#[derive(Debug, Default)]
struct LoadCount {
    started: AtomicU64,
    ended: AtomicU64,
}

impl TaskStore {
    /// Opens (or creates) `state_dir/<task>/<store>/`.
    pub fn open(state_dir: &Path, task: TaskId, store: &str) -> Result<TaskStore> {
        TaskStore::open_at(crate::state_dir::store_dir(state_dir, task, store))
    }

    /// Opens (or creates) a store at `path`: a global table's, which no task owns.
    pub fn open_at(path: PathBuf) -> Result<TaskStore> {
        let fresh = !path.exists();
        std::fs::create_dir_all(&path).map_err(|source| StoreError::Io {
            path: path.display().to_string(),
            source,
        })?;
        if fresh {
            // Before any data: a store without the mark was made by an earlier Baton.
            crate::state_dir::mark_kafka_layout(&path).map_err(|source| StoreError::Io {
                path: path.display().to_string(),
                source,
            })?;
        }
        // The store's flush and compaction workers start with the database, at background
        // priority: a restore's bulk loads cause compactions that would otherwise take the
        // CPU from the actives beside it (measured: two workers at 74% and 65% of a core beside a stream thread at 100%, on 2 cores).
        let db = crate::priority::in_background(|| Database::builder(&path).open()).map_err(
            |e| match e {
                fjall::Error::Locked => StoreError::Busy {
                    path: path.display().to_string(),
                },
                e => err(&path, e),
            },
        )?;
        let data = db
            .keyspace("data", KeyspaceCreateOptions::default)
            .map_err(|e| err(&path, e))?;
        let long_keys = db
            .keyspace("long_keys", KeyspaceCreateOptions::default)
            .map_err(|e| err(&path, e))?;
        let checkpoint = db
            .keyspace("checkpoint", KeyspaceCreateOptions::default)
            .map_err(|e| err(&path, e))?;
        Ok(TaskStore {
            db,
            data,
            long_keys,
            checkpoint,
            path,
            loads: Arc::default(),
            index: Arc::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if is_native_key(key) {
            return Ok(self
                .data
                .get(key)
                .map_err(|e| err(&self.path, e))?
                .map(|v| v.to_vec()));
        }
        let Some(entry) = self
            .long_keys
            .get(digest(key))
            .map_err(|e| err(&self.path, e))?
        else {
            return Ok(None);
        };
        match unwrap(&entry) {
            Some((stored, value)) if stored == key => Ok(Some(value.to_vec())),
            found => Err(StoreError::Corrupt {
                path: self.path.display().to_string(),
                message: match found {
                    Some((stored, _)) => format!(
                        "a key of {} bytes found where one of {} bytes was stored by digest",
                        stored.len(),
                        key.len()
                    ),
                    None => format!("an unreadable entry of {} bytes", entry.len()),
                },
            }),
        }
    }

    /// `key`'s value and the store's checkpoint as one snapshot sees them: the value is the
    /// one every changelog record below the checkpoint left, never a batch half applied.
    /// Reads take no lock a writer waits on (interactive queries, beside the stream thread).
    /// `None` while a bulk load is between its table and its checkpoint (try again).
    pub fn read_consistent(&self, key: &[u8]) -> Result<Option<ConsistentRead>> {
        use fjall::Readable;
        let Some(snap) = self.consistent_snapshot() else {
            return Ok(None);
        };
        let value = if is_native_key(key) {
            snap.get(&self.data, key)
                .map_err(|e| err(&self.path, e))?
                .map(|v| v.to_vec())
        } else {
            match snap
                .get(&self.long_keys, digest(key))
                .map_err(|e| err(&self.path, e))?
            {
                None => None,
                Some(entry) => match unwrap(&entry) {
                    Some((stored, value)) if stored == key => Some(value.to_vec()),
                    // A digest collision, or damage: the key is not there either way.
                    _ => None,
                },
            }
        };
        let checkpoint = self.checkpoint_in(&snap)?;
        Ok(Some(ConsistentRead {
            value,
            next_offset: checkpoint,
        }))
    }

    /// A snapshot with no bulk load between its table and its checkpoint (a seqlock over
    /// [`LoadCount`]): `None` while one is, or when one started meanwhile.
    fn consistent_snapshot(&self) -> Option<fjall::Snapshot> {
        let started = self.loads.started.load(Ordering::SeqCst);
        if self.loads.ended.load(Ordering::SeqCst) != started {
            return None;
        }
        let snap = self.db.snapshot();
        (self.loads.started.load(Ordering::SeqCst) == started).then_some(snap)
    }

    /// The checkpoint as `snap` sees it, read as [`TaskStore::checkpoint`] reads it.
    fn checkpoint_in(&self, snap: &fjall::Snapshot) -> Result<Option<i64>> {
        use fjall::Readable;
        let v = snap
            .get(&self.checkpoint, NEXT_OFFSET)
            .map_err(|e| err(&self.path, e))?;
        self.parse_checkpoint(v)
    }

    /// Up to `limit` entries with keys in `from..=to` (either end open when `None`) and after
    /// `after`, in key order, with the store's checkpoint, from one snapshot; and whether more
    /// follow. Keys fjall cannot hold as they are (empty, or over 64 KiB) live by digest and
    /// are not in key order: scans skip them. `None` while a bulk load is between its table
    /// and its checkpoint.
    pub fn range_consistent(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Option<ConsistentRange>> {
        use fjall::Readable;
        use std::ops::Bound;
        let Some(snap) = self.consistent_snapshot() else {
            return Ok(None);
        };
        let lower = match (from, after) {
            (Some(f), Some(a)) if a < f => Bound::Included(f.to_vec()),
            (_, Some(a)) => Bound::Excluded(a.to_vec()),
            (Some(f), None) => Bound::Included(f.to_vec()),
            (None, None) => Bound::Unbounded,
        };
        let upper = to.map_or(Bound::Unbounded, |t| Bound::Included(t.to_vec()));
        let mut entries = Vec::new();
        let mut more = false;
        for entry in snap.range(&self.data, (lower, upper)) {
            let (k, v) = entry.into_inner().map_err(|e| err(&self.path, e))?;
            if entries.len() == limit {
                more = true;
                break;
            }
            entries.push((k.to_vec(), v.to_vec()));
        }
        let next_offset = self.checkpoint_in(&snap)?;
        Ok(Some(ConsistentRange {
            entries,
            more,
            next_offset,
        }))
    }

    /// The entries with keys in `from..=to`, in key order. Keys held by digest (empty, or
    /// over 64 KiB) are not in key order and are not among them.
    pub fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>> {
        let mut entries = Vec::new();
        if from > to {
            return Ok(entries);
        }
        for entry in self.data.range(from.to_vec()..=to.to_vec()) {
            let (k, v) = entry.into_inner().map_err(|e| err(&self.path, e))?;
            entries.push((k.to_vec(), v.to_vec()));
        }
        Ok(entries)
    }

    /// Entries in key order after `after`, until their bytes reach `max_bytes` (at least one),
    /// and the key to go on after (`None`: no more). Keys held by digest are not among them
    /// ([`TaskStore::long_entries`]). For writing a store's whole contents into its changelog
    /// while nothing else writes it.
    pub fn page(
        &self,
        after: Option<&[u8]>,
        max_bytes: usize,
    ) -> Result<(Vec<Entry>, Option<Vec<u8>>)> {
        use std::ops::Bound;
        let lower = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_vec()));
        let mut entries = Vec::new();
        let mut bytes = 0;
        for entry in self.data.range((lower, Bound::<Vec<u8>>::Unbounded)) {
            if bytes >= max_bytes {
                let next = entries.last().map(|(k, _): &Entry| k.clone());
                return Ok((entries, next));
            }
            let (k, v) = entry.into_inner().map_err(|e| err(&self.path, e))?;
            bytes += k.len() + v.len();
            entries.push((k.to_vec(), v.to_vec()));
        }
        Ok((entries, None))
    }

    /// The entries of keys fjall cannot hold as they are, with their whole keys.
    pub fn long_entries(&self) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        for entry in self.long_keys.iter() {
            let wrapped = entry.value().map_err(|e| err(&self.path, e))?;
            let (k, v) = unwrap(&wrapped).ok_or_else(|| StoreError::Corrupt {
                path: self.path.display().to_string(),
                message: format!("an unreadable entry of {} bytes", wrapped.len()),
            })?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// The newest timestamp among the values of a store laid out
    /// [`Layout::Timestamped`](crate::layout::Layout) (a full scan, done once when a window
    /// task starts on an owner that learnt no stream time with its offsets). `None` when empty.
    pub fn newest_timestamp(&self) -> Result<Option<i64>> {
        let mut newest: Option<i64> = None;
        let mut see = |value: &[u8]| {
            if let Some((ts, _)) = crate::layout::split_timestamped(value) {
                newest = Some(newest.map_or(ts, |n| n.max(ts)));
            }
        };
        for entry in self.data.iter() {
            see(&entry.value().map_err(|e| err(&self.path, e))?);
        }
        for entry in self.long_keys.iter() {
            let wrapped = entry.value().map_err(|e| err(&self.path, e))?;
            if let Some((_, value)) = unwrap(&wrapped) {
                see(value);
            }
        }
        Ok(newest)
    }

    /// Number of keys (a full scan: for tests and tools, not the hot path).
    pub fn len(&self) -> Result<u64> {
        let native = self.data.len().map_err(|e| err(&self.path, e))?;
        let long = self.long_keys.len().map_err(|e| err(&self.path, e))?;
        Ok((native + long) as u64)
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.data.is_empty().map_err(|e| err(&self.path, e))?
            && self.long_keys.is_empty().map_err(|e| err(&self.path, e))?)
    }

    /// Applies `writes` and, in the same atomic batch, records that changelog offsets below
    /// `next_changelog_offset` are in the store. Durable when this returns.
    pub fn apply(&self, writes: &[Write], next_changelog_offset: Option<i64>) -> Result<()> {
        self.apply_with(writes, next_changelog_offset, Some(PersistMode::SyncAll))
    }

    /// As [`TaskStore::apply`], but left in the journal's buffer until a later durable write.
    /// A crash loses such batches whole, data and checkpoint together, so the store stays
    /// consistent: restoring uses this for every chunk but the last.
    pub fn apply_lazily(&self, writes: &[Write], next_changelog_offset: Option<i64>) -> Result<()> {
        self.apply_with(writes, next_changelog_offset, None)
    }

    /// As [`TaskStore::apply`], for a store filled from each partition of a topic (a global
    /// table's): offsets below `next` of `partition` are in the store ([`TaskStore::offsets`]).
    pub fn apply_from(&self, writes: &[Write], partition: i32, next: i64) -> Result<()> {
        let key = format!("{NEXT_OFFSET}/{partition}");
        self.apply_keyed(writes, Some((&key, next)), Some(PersistMode::SyncAll))
    }

    /// The next offset of each partition a store filled by [`TaskStore::apply_from`] has
    /// taken in.
    pub fn offsets(&self) -> Result<BTreeMap<i32, i64>> {
        let prefix = format!("{NEXT_OFFSET}/");
        let mut out = BTreeMap::new();
        for entry in self.checkpoint.prefix(prefix.as_bytes()) {
            let (k, v) = entry.into_inner().map_err(|e| err(&self.path, e))?;
            let p = std::str::from_utf8(&k[prefix.len()..])
                .ok()
                .and_then(|p| p.parse().ok());
            match (p, self.parse_checkpoint(Some(v))?) {
                (Some(p), Some(next)) => out.insert(p, next),
                _ => {
                    return Err(StoreError::Corrupt {
                        path: self.path.display().to_string(),
                        message: format!(
                            "a partition checkpoint under {:?}",
                            String::from_utf8_lossy(&k)
                        ),
                    })
                }
            };
        }
        Ok(out)
    }

    fn apply_with(
        &self,
        writes: &[Write],
        next: Option<i64>,
        durability: Option<PersistMode>,
    ) -> Result<()> {
        self.apply_keyed(writes, next.map(|n| (NEXT_OFFSET, n)), durability)
    }

    fn apply_keyed(
        &self,
        writes: &[Write],
        next: Option<(&str, i64)>,
        durability: Option<PersistMode>,
    ) -> Result<()> {
        let mut batch = self.db.batch().durability(durability);
        for (k, v) in writes {
            match (is_native_key(k), v) {
                (true, Some(v)) => batch.insert(&self.data, k.as_slice(), v.as_slice()),
                (true, None) => batch.remove(&self.data, k.as_slice()),
                (false, Some(v)) => batch.insert(&self.long_keys, digest(k), wrap(k, v)),
                (false, None) => batch.remove(&self.long_keys, digest(k)),
            }
        }
        if let Some((key, next)) = next {
            batch.insert(&self.checkpoint, key, next.to_be_bytes().as_slice());
        }
        let mut index = self.index_lock();
        let committed = batch.commit().map_err(|e| err(&self.path, e));
        match (&committed, index.as_mut()) {
            (Ok(()), Some(ix)) => writes.iter().for_each(|(k, v)| ix.write(k, v.as_deref())),
            _ => *index = None,
        }
        committed
    }

    fn index_lock(&self) -> MutexGuard<'_, Option<BufferIndex>> {
        self.index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The store's entries as a suppression buffer's, indexed by time (built by a full scan
    /// when first asked).
    fn buffer_index(&self) -> Result<MutexGuard<'_, Option<BufferIndex>>> {
        let mut index = self.index_lock();
        if index.is_none() {
            let mut ix = BufferIndex::default();
            for entry in self.data.iter() {
                let (k, v) = entry.into_inner().map_err(|e| err(&self.path, e))?;
                ix.write(&k, Some(&v));
            }
            for (k, v) in self.long_entries()? {
                ix.write(&k, Some(&v));
            }
            *index = Some(ix);
        }
        Ok(index)
    }

    /// As a suppression buffer: its first entry by (buffer time, key) among keys `skip`
    /// passes over.
    pub fn buffer_head(&self, skip: &dyn Fn(&[u8]) -> bool) -> Result<BufferHead> {
        Ok(self.buffer_index()?.as_ref().and_then(|ix| ix.head(skip)))
    }

    /// As a suppression buffer: its entries and their keys' and values' bytes.
    pub fn buffer_totals(&self) -> Result<(u64, u64)> {
        Ok(self
            .buffer_index()?
            .as_ref()
            .map_or((0, 0), BufferIndex::totals))
    }

    /// As a suppression buffer: `key`'s entry's key and value bytes.
    pub fn buffer_size(&self, key: &[u8]) -> Result<Option<u64>> {
        Ok(self.buffer_index()?.as_ref().and_then(|ix| ix.size_of(key)))
    }

    /// Bulk-loads changelog records, given in changelog order, then records the checkpoint
    /// (lazily). The records are sorted by key, the last write of each key kept, and written
    /// straight to a table: no journal, no memtable. That is how a restore reaches fetch speed;
    /// the per-record path pays journal and memtable costs on every record.
    ///
    /// A crash between the table and the checkpoint leaves the checkpoint behind the data;
    /// replaying the changelog from there rewrites the same values, so it is harmless.
    ///
    /// `writes` is left empty with its allocation kept, for the next load to reuse; after an
    /// error its contents are unspecified (the caller restores from the checkpoint).
    pub fn ingest<K: AsRef<[u8]> + Into<Slice>, V: Into<Slice>>(
        &self,
        writes: &mut Vec<(K, Option<V>)>,
        next_changelog_offset: i64,
    ) -> Result<()> {
        sort_run(writes, 0);
        self.write_sorted(writes, next_changelog_offset, || Ok(()))
    }

    /// As [`TaskStore::ingest`], for writes gathered as [`Runs`]. Runs that follow one
    /// another in key order (a changelog written in key order, or each run a key range of its
    /// own) are written as they are; otherwise they are merged, which costs less than sorting
    /// them afresh. A restore sorts each fetched chunk while the previous load runs, so its
    /// load does only this. `runs` is left empty with its allocation kept, after an error too.
    pub fn ingest_runs<K: AsRef<[u8]> + Into<Slice>, V: Into<Slice>>(
        &self,
        runs: &mut Runs<K, V>,
        next_changelog_offset: i64,
    ) -> Result<()> {
        self.ingest_runs_after(runs, next_changelog_offset, || Ok(()))
    }

    /// As [`TaskStore::ingest_runs`], but the table is registered, and the checkpoint moved,
    /// only after `earlier` returns: it waits for a load of earlier writes, which must come
    /// first (a key's later write shadows its earlier one). The table is written meanwhile, so
    /// the two loads use two cores. `earlier` runs even when writing the table fails.
    pub fn ingest_runs_after<K: AsRef<[u8]> + Into<Slice>, V: Into<Slice>>(
        &self,
        runs: &mut Runs<K, V>,
        next_changelog_offset: i64,
        earlier: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let writes = &mut runs.writes;
        let ordered = runs.starts.iter().all(|&at| {
            at == 0 || at >= writes.len() || writes[at - 1].0.as_ref() < writes[at].0.as_ref()
        });
        if !ordered {
            // Each run ascends without repeats: reversed, each descends strictly, which the
            // standard sort takes as a run of its own; it merges them stably, so each key's
            // latest write (from the latest run) comes first, and the dedup keeps it.
            sort_run(writes, 0);
        }
        runs.starts.clear();
        let written = self.write_sorted(writes, next_changelog_offset, earlier);
        if written.is_err() {
            // What a failed load left would not be runs any more.
            writes.clear();
        }
        written
    }

    /// Writes `writes`, sorted by key with no key twice, as one table, then (once `earlier`
    /// returns) registers it and the checkpoint.
    fn write_sorted<K: AsRef<[u8]> + Into<Slice>, V: Into<Slice>>(
        &self,
        writes: &mut Vec<(K, Option<V>)>,
        next_changelog_offset: i64,
        earlier: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.loads.started.fetch_add(1, Ordering::SeqCst);
        *self.index_lock() = None;
        let written = self.write_sorted_counted(writes, next_changelog_offset, earlier);
        // A buffer index built while the load ran may have missed it.
        *self.index_lock() = None;
        self.loads.ended.fetch_add(1, Ordering::SeqCst);
        written
    }

    fn write_sorted_counted<K: AsRef<[u8]> + Into<Slice>, V: Into<Slice>>(
        &self,
        writes: &mut Vec<(K, Option<V>)>,
        next_changelog_offset: i64,
        earlier: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        debug_assert!(writes.windows(2).all(|w| w[0].0.as_ref() < w[1].0.as_ref()));
        let mut ingestion = None;
        // Keys fjall cannot hold as they are go in with the checkpoint, by digest.
        let mut long: Vec<Write> = Vec::new();
        let written = (|| {
            // `Bytes` become slices without a copy (fjall's `bytes_1`): a restore's records go
            // from the fetch buffers to the table writer as they are.
            for (k, v) in writes.drain(..) {
                if !is_native_key(k.as_ref()) {
                    let v: Option<Slice> = v.map(Into::into);
                    long.push((k.as_ref().to_vec(), v.map(|v| v.to_vec())));
                    continue;
                }
                let table = match &mut ingestion {
                    Some(table) => table,
                    None => ingestion.insert(
                        self.data
                            .start_ingestion()
                            .map_err(|e| err(&self.path, e))?,
                    ),
                };
                match v {
                    Some(v) => table.write(k, v),
                    None => table.write_tombstone(k),
                }
                .map_err(|e| err(&self.path, e))?;
            }
            Ok(())
        })();
        let earlier = earlier();
        written?;
        earlier?;
        if let Some(table) = ingestion {
            table.finish().map_err(|e| err(&self.path, e))?;
        }
        self.apply_lazily(&long, Some(next_changelog_offset))
    }

    /// Makes every batch so far survive a crash of this process (`durable`: of the machine).
    pub fn persist(&self, durable: bool) -> Result<()> {
        let mode = if durable {
            PersistMode::SyncAll
        } else {
            PersistMode::Buffer
        };
        self.db.persist(mode).map_err(|e| err(&self.path, e))
    }

    /// The id of the changelog topic the checkpoint belongs to, where one was recorded (a
    /// store from before Baton recorded them, or from Kafka Streams, has none).
    pub fn changelog_id(&self) -> Result<Option<uuid::Uuid>> {
        let v = self
            .checkpoint
            .get(CHANGELOG_ID)
            .map_err(|e| err(&self.path, e))?;
        Ok(self
            .fixed::<16>(v, "changelog topic id")?
            .map(uuid::Uuid::from_bytes))
    }

    /// Records, durably and in one batch, that the store holds changelog `id` below `next`.
    pub fn mark_changelog(&self, id: uuid::Uuid, next: Option<i64>) -> Result<()> {
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        batch.insert(&self.checkpoint, CHANGELOG_ID, id.as_bytes().as_slice());
        if let Some(next) = next {
            batch.insert(&self.checkpoint, NEXT_OFFSET, next.to_be_bytes().as_slice());
        }
        batch.commit().map_err(|e| err(&self.path, e))
    }

    /// The next changelog offset to apply, or `None` for a store that never absorbed any.
    pub fn checkpoint(&self) -> Result<Option<i64>> {
        let v = self
            .checkpoint
            .get(NEXT_OFFSET)
            .map_err(|e| err(&self.path, e))?;
        self.parse_checkpoint(v)
    }

    fn parse_checkpoint(&self, v: Option<Slice>) -> Result<Option<i64>> {
        Ok(self.fixed::<8>(v, "checkpoint")?.map(i64::from_be_bytes))
    }

    /// A value of the checkpoint keyspace, which is `N` bytes when there is one: another
    /// length is a corrupt store.
    fn fixed<const N: usize>(&self, v: Option<Slice>, what: &str) -> Result<Option<[u8; N]>> {
        v.map(|b| {
            b.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                path: self.path.display().to_string(),
                message: format!("a {what} of {} bytes", b.len()),
            })
        })
        .transpose()
    }
}

/// Writes gathered for one bulk load ([`TaskStore::ingest_runs`]) as runs, one per
/// [`Runs::push_run`], each sorted by key as it comes with only each key's last write kept.
/// Only this type builds runs, so a load can trust them.
#[derive(Debug)]
pub struct Runs<K, V> {
    writes: Vec<(K, Option<V>)>,
    /// Where each run starts in `writes`.
    starts: Vec<usize>,
}

impl<K, V> Default for Runs<K, V> {
    fn default() -> Self {
        Runs {
            writes: Vec::new(),
            starts: Vec::new(),
        }
    }
}

impl<K: AsRef<[u8]>, V> Runs<K, V> {
    /// Writes kept: each run's repeats of a key are gone.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.writes.capacity()
    }

    /// Adds `writes`, in changelog order and later than every run before, as a run.
    pub fn push_run(&mut self, writes: impl IntoIterator<Item = (K, Option<V>)>) {
        let start = self.writes.len();
        self.writes.extend(writes);
        sort_run(&mut self.writes, start);
        self.starts.push(start);
    }
}

/// Sorts `writes[from..]`, writes in changelog order, by key and keeps only each key's last
/// write.
fn sort_run<K: AsRef<[u8]>, V>(writes: &mut Vec<(K, Option<V>)>, from: usize) {
    let from = from.min(writes.len());
    let run = &mut writes[from..];
    // Reversed, a stable sort puts each key's latest write first; the dedup below keeps it.
    run.reverse();
    run.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
    let mut kept = from;
    for i in from..writes.len() {
        if kept == from || writes[i].0.as_ref() != writes[kept - 1].0.as_ref() {
            writes.swap(kept, i);
            kept += 1;
        }
    }
    writes.truncate(kept);
}

fn err(path: &Path, e: fjall::Error) -> StoreError {
    let path = path.display().to_string();
    let message = e.to_string();
    if is_corruption(&e) {
        StoreError::Corrupt { path, message }
    } else {
        StoreError::Store { path, message }
    }
}

/// Whether a store error says its files are bad, rather than its surroundings (space,
/// permissions, descriptors) or a handle poisoned by an earlier failed write. A resource
/// error must never get a store thrown away: rebuilding it needs more of the same resource.
fn is_corruption(e: &fjall::Error) -> bool {
    match e {
        fjall::Error::Io(io) | fjall::Error::Storage(fjall::LsmError::Io(io)) => {
            !is_resource_error(io)
        }
        fjall::Error::Poisoned | fjall::Error::Locked | fjall::Error::KeyspaceDeleted => false,
        _ => true,
    }
}

/// Errors of the machine, not of the files: out of space or quota, read-only, no access,
/// out of descriptors or memory.
pub fn is_resource_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        StorageFull | QuotaExceeded | ReadOnlyFilesystem | PermissionDenied | OutOfMemory
    ) || matches!(e.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE
}

impl StoreError {
    /// The store's files cannot be trusted: move them aside and rebuild from the changelog.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(k: &str, v: Option<&str>) -> Write {
        (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))
    }

    /// A store filled from several partitions keeps each one's next offset with its writes.
    #[test]
    fn partition_offsets_are_kept_with_their_writes() {
        let dir = std::env::temp_dir().join(format!("baton-store-global-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open_at(dir.join("global").join("g")).unwrap();
        assert!(store.offsets().unwrap().is_empty());
        store.apply_from(&[w("a", Some("1"))], 0, 5).unwrap();
        store.apply_from(&[w("b", Some("2"))], 1, 3).unwrap();
        store.apply_from(&[w("a", None)], 0, 6).unwrap();
        drop(store);
        let store = TaskStore::open_at(dir.join("global").join("g")).unwrap();
        assert_eq!(store.offsets().unwrap(), BTreeMap::from([(0, 6), (1, 3)]));
        assert_eq!(store.get(b"a").unwrap(), None);
        assert_eq!(store.get(b"b").unwrap(), Some(b"2".to_vec()));
        assert_eq!(
            store.checkpoint().unwrap(),
            None,
            "a task's checkpoint is apart"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A suppression buffer's time order follows the batches applied, a bulk load's writes
    /// too, and sees entries written before it was first asked for.
    #[test]
    fn the_buffer_index_follows_every_write() {
        let dir = std::env::temp_dir().join(format!("baton-store-index-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        let entry = |time: i64| time.to_be_bytes().to_vec();
        let long_key = vec![7u8; LONGEST_NATIVE_KEY + 1];
        let writes = [
            (b"b".to_vec(), Some(entry(20))),
            (long_key.clone(), Some(entry(5))),
        ];
        store.apply(&writes, Some(1)).unwrap();
        assert_eq!(
            store.buffer_head(&|_| false).unwrap(),
            Some((5, long_key.clone()))
        );
        assert_eq!(
            store.buffer_totals().unwrap(),
            (2, 1 + 8 + long_key.len() as u64 + 8)
        );
        store
            .apply(
                &[(long_key.clone(), None), (b"a".to_vec(), Some(entry(30)))],
                Some(2),
            )
            .unwrap();
        assert_eq!(
            store.buffer_head(&|_| false).unwrap(),
            Some((20, b"b".to_vec()))
        );
        assert_eq!(
            store.buffer_head(&|k| k == b"b").unwrap(),
            Some((30, b"a".to_vec()))
        );
        assert_eq!(store.buffer_size(b"a").unwrap(), Some(9));
        let mut load = vec![(b"c".to_vec(), Some(entry(1))), (b"b".to_vec(), None)];
        store.ingest(&mut load, 3).unwrap();
        assert_eq!(
            store.buffer_head(&|_| false).unwrap(),
            Some((1, b"c".to_vec()))
        );
        assert_eq!(store.buffer_totals().unwrap(), (2, 18));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Runs in key order go in as they are; overlapping runs are merged, the later run's write
    /// of a key winning, its tombstone too.
    #[test]
    fn ingest_runs_writes_ordered_runs_as_they_are_and_merges_the_rest() {
        let dir = std::env::temp_dir().join(format!("baton-store-runs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        let mut runs = Runs::default();
        runs.push_run([w("b", Some("1")), w("a", Some("0")), w("a", Some("2"))]);
        assert_eq!(runs.len(), 2, "a run keeps a key's last write");
        runs.push_run([w("c", Some("3")), w("d", Some("4"))]);
        assert!(runs.starts.len() == 2 && runs.writes[1].0 < runs.writes[2].0);
        store.ingest_runs(&mut runs, 4).unwrap();
        assert!(runs.is_empty() && runs.starts.is_empty());
        runs.push_run([w("d", Some("5")), w("a", Some("6"))]);
        runs.push_run([w("a", None), w("b", Some("7"))]);
        runs.push_run([w("d", Some("8"))]);
        store.ingest_runs(&mut runs, 9).unwrap();
        let got: Vec<Option<Vec<u8>>> = ["a", "b", "c", "d"]
            .iter()
            .map(|k| store.get(k.as_bytes()).unwrap())
            .collect();
        assert_eq!(
            got,
            vec![
                None,
                Some(b"7".to_vec()),
                Some(b"3".to_vec()),
                Some(b"8".to_vec())
            ]
        );
        assert_eq!(store.checkpoint().unwrap(), Some(9));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The newest timestamp of a timestamped store, long keys' values included.
    #[test]
    fn the_newest_timestamp_is_found_in_every_keyspace() {
        let dir = std::env::temp_dir().join(format!("baton-store-newest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        assert_eq!(store.newest_timestamp().unwrap(), None);
        let stamped = |ts: i64| Some(crate::layout::timestamped(ts, b"v"));
        store
            .apply(
                &[
                    (b"a".to_vec(), stamped(5)),
                    (vec![b'x'; LONGEST_NATIVE_KEY + 1], stamped(9)),
                ],
                Some(2),
            )
            .unwrap();
        store
            .apply_lazily(&[(b"b".to_vec(), stamped(7))], Some(3))
            .unwrap();
        assert_eq!(store.newest_timestamp().unwrap(), Some(9));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An empty key and keys past fjall's 65,535 bytes are kept like any other, through both
    /// write paths, over a reopen; a native key equal to a long key's digest does not meet it.
    #[test]
    fn keys_fjall_cannot_hold_are_kept_by_digest() {
        let dir = std::env::temp_dir().join(format!("baton-store-long-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        let long = vec![b'x'; LONGEST_NATIVE_KEY + 1];
        let longer = vec![b'x'; 1 << 20];
        let edge = vec![b'y'; LONGEST_NATIVE_KEY];
        store
            .apply(
                &[
                    (Vec::new(), Some(b"empty".to_vec())),
                    (long.clone(), Some(b"long".to_vec())),
                    (edge.clone(), Some(b"edge".to_vec())),
                    (digest(&long).to_vec(), Some(b"digest".to_vec())),
                ],
                Some(4),
            )
            .unwrap();
        let mut load = vec![
            (longer.clone(), Some(b"longer".to_vec())),
            (long.clone(), None),
            (b"k".to_vec(), Some(b"v".to_vec())),
        ];
        store.ingest(&mut load, 7).unwrap();
        drop(store);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        let get = |k: &[u8]| store.get(k).unwrap();
        assert_eq!(get(b""), Some(b"empty".to_vec()));
        assert_eq!(
            get(&long),
            None,
            "the bulk load's tombstone reached the long key"
        );
        assert_eq!(get(&longer), Some(b"longer".to_vec()));
        assert_eq!(get(&edge), Some(b"edge".to_vec()));
        assert_eq!(get(&digest(&long)), Some(b"digest".to_vec()));
        assert_eq!(get(b"k"), Some(b"v".to_vec()));
        assert_eq!(store.len().unwrap(), 5);
        assert_eq!(store.checkpoint().unwrap(), Some(7));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ingest_keeps_each_keys_last_write_and_orders_after_earlier_writes() {
        let dir = std::env::temp_dir().join(format!("baton-store-ingest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        store
            .apply(&[w("a", Some("old")), w("gone", Some("x"))], Some(2))
            .unwrap();
        store
            .ingest(
                &mut vec![
                    w("b", Some("1")),
                    w("a", Some("2")),
                    w("b", Some("3")),
                    w("gone", None),
                    w("c", Some("4")),
                    w("c", None),
                ],
                8,
            )
            .unwrap();
        assert_eq!(store.get(b"a").unwrap(), Some(b"2".to_vec()));
        assert_eq!(store.get(b"b").unwrap(), Some(b"3".to_vec()));
        assert_eq!(store.get(b"c").unwrap(), None);
        assert_eq!(store.get(b"gone").unwrap(), None);
        assert_eq!(store.checkpoint().unwrap(), Some(8));
        // A second load, and a write after it, each win over what came before.
        let mut load = vec![w("a", Some("5"))];
        store.ingest(&mut load, 9).unwrap();
        assert!(load.is_empty(), "the load takes every write");
        store.apply(&[w("b", Some("6"))], Some(10)).unwrap();
        assert_eq!(store.get(b"a").unwrap(), Some(b"5".to_vec()));
        assert_eq!(store.get(b"b").unwrap(), Some(b"6".to_vec()));
        drop(store);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        assert_eq!(store.get(b"a").unwrap(), Some(b"5".to_vec()));
        assert_eq!(store.len().unwrap(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The changelog's id survives a reopen, is replaced whole with the checkpoint, and a
    /// damaged one is reported as corruption rather than read as some other id.
    #[test]
    fn the_changelog_id_is_kept_beside_the_checkpoint() {
        let dir = std::env::temp_dir().join(format!("baton-store-id-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (old, new) = (uuid::Uuid::from_u128(7), uuid::Uuid::from_u128(9));
        {
            let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
            assert_eq!(store.changelog_id().unwrap(), None, "a new store has none");
            store.apply(&[w("a", Some("1"))], Some(40)).unwrap();
            store.mark_changelog(old, None).unwrap();
        }
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        assert_eq!(store.changelog_id().unwrap(), Some(old));
        assert_eq!(store.checkpoint().unwrap(), Some(40), "left as it was");
        store.mark_changelog(new, Some(3)).unwrap();
        assert_eq!(store.changelog_id().unwrap(), Some(new));
        assert_eq!(store.checkpoint().unwrap(), Some(3));
        store
            .checkpoint
            .insert(CHANGELOG_ID, b"short".as_slice())
            .unwrap();
        assert!(store.changelog_id().unwrap_err().is_corrupt());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn consistent_reads_pair_a_value_with_its_checkpoint() {
        let dir = std::env::temp_dir().join(format!("baton-store-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        let read = |k: &[u8]| {
            store
                .read_consistent(k)
                .unwrap()
                .map(|r| (r.value, r.next_offset))
        };
        assert_eq!(read(b"a"), Some((None, None)));
        store.apply(&[w("a", Some("1"))], Some(3)).unwrap();
        let long = vec![b'x'; LONGEST_NATIVE_KEY + 1];
        store
            .apply(&[(long.clone(), Some(b"L".to_vec()))], Some(4))
            .unwrap();
        assert_eq!(read(b"a"), Some((Some(b"1".to_vec()), Some(4))));
        assert_eq!(read(&long), Some((Some(b"L".to_vec()), Some(4))));
        // A load between its table and its checkpoint: no answer rather than a torn one.
        store.loads.started.fetch_add(1, Ordering::SeqCst);
        assert_eq!(read(b"a"), None);
        store.loads.ended.fetch_add(1, Ordering::SeqCst);
        store.ingest(&mut vec![w("a", Some("2"))], 9).unwrap();
        assert_eq!(read(b"a"), Some((Some(b"2".to_vec()), Some(9))));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ranges_page_in_key_order_within_their_bounds() {
        let dir = std::env::temp_dir().join(format!("baton-store-range-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        let writes: Vec<Write> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|k| w(k, Some(k)))
            .chain([(Vec::new(), Some(b"empty".to_vec()))])
            .collect();
        store.apply(&writes, Some(6)).unwrap();
        let keys = |r: &ConsistentRange| -> Vec<String> {
            r.entries
                .iter()
                .map(|(k, _)| String::from_utf8(k.clone()).unwrap())
                .collect()
        };
        let all = store
            .range_consistent(None, None, None, 10)
            .unwrap()
            .unwrap();
        assert_eq!(
            keys(&all),
            ["a", "b", "c", "d", "e"],
            "the empty key lives by digest"
        );
        assert!(!all.more);
        assert_eq!(all.next_offset, Some(6));
        let page = store
            .range_consistent(Some(b"b"), Some(b"d"), None, 2)
            .unwrap()
            .unwrap();
        assert_eq!(
            (keys(&page), page.more),
            (vec!["b".into(), "c".into()], true)
        );
        let next = store
            .range_consistent(Some(b"b"), Some(b"d"), Some(b"c"), 2)
            .unwrap()
            .unwrap();
        assert_eq!((keys(&next), next.more), (vec!["d".into()], false));
        // `after` before `from` does not widen the range.
        let early = store
            .range_consistent(Some(b"c"), None, Some(b"a"), 10)
            .unwrap()
            .unwrap();
        assert_eq!(keys(&early), ["c", "d", "e"]);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
