//! A store catching up with its changelog, one fetched chunk at a time. Shared by a task's
//! restore and tailing and by the standalone [`crate::restore()`], so the restore benchmark
//! measures the path the runtime runs.
//!
//! A store near the end applies each chunk as a batch. A store far behind gathers chunks, each
//! sorted into a run as it comes, and bulk-loads them ([`TaskStore::ingest_runs`]), which is
//! faster; only then does its checkpoint move. A bulk load runs on a thread of its own while
//! the next chunks are fetched, sorted and gathered, so the store works while the fetching
//! does, rather than after it. The next load may start before the last one has ended (it was
//! waiting for its disk, or there is nothing left to fetch): it writes its table meanwhile and
//! registers it only after the earlier one, so a key's later write still shadows its earlier.
//!
//! The thread that calls [`Catchup::absorb`] runs actives too, so it never waits for a load
//! it need not wait for, not even for the last one of a restore, and the loads run at a lower
//! scheduling priority than the stream threads ([`crate::priority`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use baton_kafka::records::Fetched;
use bytes::Bytes;

use crate::layout::{from_changelog, Layout};
use crate::store::{Runs, StoreError, TaskStore, Write};

/// Records gathered before one bulk load into the store. Larger loads mean fewer tables for
/// the LSM to compact later; this many small records is about 30 MB.
pub const INGEST_RECORDS: usize = 500_000;
/// Bytes gathered before one bulk load, whichever limit comes first: large values reach it
/// long before the record limit, so their loads still overlap the fetching.
pub const INGEST_BYTES: usize = 32 << 20;

/// The limits of bulk load number `loads` (from 0) of one catch-up: the first is an eighth of
/// [`INGEST_RECORDS`] and [`INGEST_BYTES`], and each next one twice the last up to them. The
/// store works only while a load runs, so a large first load left it idle for that whole
/// load's fetch (measured: restores of 100-byte values at 80% of the store's own speed, with
/// two loads of 500,000); a small first load starts it almost at once. A store left idle
/// between loads takes one at half these limits ([`Catchup::absorb`]). Starting the first load
/// at half too (on the first 4 MiB fetch) gained about 2 points, within the noise, and moved a
/// warm-up's catch-up enough to add a round to the broker's hand-overs (`sim_agreement`, 7
/// rebalances in 4 of 8 runs): not kept.
pub fn load_limits(loads: u32) -> (usize, usize) {
    let shift = 3u32.saturating_sub(loads);
    (INGEST_RECORDS >> shift, INGEST_BYTES >> shift)
}

#[derive(Debug)]
pub struct Catchup {
    /// How the store keeps what its changelog records hold ([`from_changelog`]).
    layout: Layout,
    /// The next changelog offset in the store: its checkpoint.
    position: i64,
    /// The next changelog offset to fetch: ahead of `position` by what `buffer` holds.
    fetched_to: i64,
    /// Records fetched but not yet in the store, gathered for one bulk load: one run per
    /// chunk, sorted as it comes, so the load only merges them.
    buffer: Runs<Bytes, Bytes>,
    /// The last load's buffer, emptied, kept for the next one while catching up: a fresh
    /// buffer of this size costs thousands of page faults on the thread that fetches.
    spare: Runs<Bytes, Bytes>,
    /// Key and value bytes in `buffer`.
    buffered_bytes: usize,
    /// Records taken into `buffer`, the later writes of a key that a run dropped included.
    buffered_records: u64,
    /// The latest bulk load in progress. It may have started while the one before it was
    /// still running; it then registers its table only after that one, and ends with it.
    loading: Option<Load>,
    /// Bulk loads started so far: they grow (see [`load_limits`]).
    loads: u32,
    /// The most key and value bytes, and records, one chunk has brought so far. A broker
    /// returns at least one whole batch however small the fetch's limit, so a chunk can be
    /// far larger than asked for (a batch of a bulk-written changelog: 720 KB against 256 KiB).
    largest_chunk: (usize, usize),
}

/// A bulk load's outcome: its buffer, emptied.
type Loaded = Result<Runs<Bytes, Bytes>, StoreError>;

#[derive(Debug)]
struct Load {
    handle: std::thread::JoinHandle<Loaded>,
    /// The position the store reaches with this load.
    to: i64,
    /// Set while the load still waits for the one before it: two loads are then under way.
    behind: Arc<AtomicBool>,
}

impl Load {
    fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

/// What one chunk did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Absorbed {
    /// The chunk moved the fetch position (it was not empty).
    pub progressed: bool,
    /// Records that went into the store.
    pub applied: u64,
    /// Records without a key, which no store can hold: skipped.
    pub skipped: u64,
}

impl Catchup {
    /// Starting from the store's checkpoint, for a store of `layout`.
    pub fn new(position: i64, layout: Layout) -> Catchup {
        Catchup {
            layout,
            position,
            fetched_to: position,
            buffer: Runs::default(),
            spare: Runs::default(),
            buffered_bytes: 0,
            buffered_records: 0,
            loading: None,
            loads: 0,
            largest_chunk: (0, 0),
        }
    }

    pub fn position(&self) -> i64 {
        self.position
    }

    /// How the store keeps what its changelog records hold.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Whether a chunk asked for with a limit of `chunk_bytes` could fill the buffer while two
    /// bulk loads are under way, so that the next load would have to wait for them. The thread
    /// then leaves this changelog out of its next fetch: the actives it also runs are not held
    /// up behind a warm-up's load, and the buffer stays bounded.
    pub fn busy(&self, chunk_bytes: usize) -> bool {
        let Some(load) = &self.loading else {
            return false;
        };
        // Records are at least a few bytes; 16 per record over-counts a chunk's records.
        let chunk = chunk_bytes.max(self.largest_chunk.0);
        let chunk_records = (chunk_bytes / 16).max(self.largest_chunk.1);
        let (records, bytes) = load_limits(self.loads);
        load.behind.load(Ordering::Acquire)
            && !load.is_finished()
            && (self.buffered_bytes + chunk >= bytes
                || self.buffer.len() + chunk_records >= records)
    }

    /// Where the next fetch starts.
    pub fn fetch_from(&self) -> i64 {
        self.fetched_to
    }

    /// Where the fetch position moves with `fetched` (see [`next_position`]).
    pub fn reach(&self, fetched: &Fetched, end: i64) -> i64 {
        next_position(fetched, self.fetched_to, end)
    }

    /// Takes the records of `fetched` below `end` into `store`, now or in a bulk load on a
    /// thread of its own. It never waits for a load that it need not: the stream thread that
    /// calls it runs actives too, and an active must not stall behind a warm-up's restore. So
    /// even the last records go to a load in the background; a later call (the next fetch's
    /// answer, empty or not) finds the loads ended and moves the checkpoint. [`Catchup::finish`]
    /// waits for everything instead.
    pub fn absorb(
        &mut self,
        store: &TaskStore,
        fetched: Fetched,
        end: i64,
    ) -> Result<Absorbed, StoreError> {
        let mut out = Absorbed::default();
        if self.loading.as_ref().is_some_and(Load::is_finished) {
            self.wait()?;
        }
        let next = self.reach(&fetched, end);
        if next > self.fetched_to {
            out.progressed = true;
            self.fetched_to = next;
            let layout = self.layout;
            let records = fetched
                .records
                .into_iter()
                .take_while(|r| r.offset < end)
                .map(|r| (r.key, from_changelog(layout, r.timestamp, r.value)));
            if self.buffer.is_empty() && self.loading.is_none() && next >= end {
                // Caught up: a small chunk goes straight in.
                let writes: Vec<Write> = records
                    .filter_map(|(key, value)| match key {
                        Some(k) => Some((k.to_vec(), value.map(|v| v.to_vec()))),
                        None => {
                            out.skipped += 1;
                            None
                        }
                    })
                    .collect();
                out.applied = writes.len() as u64;
                store.apply_lazily(&writes, Some(next))?;
                self.position = next;
                self.release_buffers();
                return Ok(out);
            }
            out.skipped += self.gather(records);
        }
        if self.buffer.is_empty() {
            if self.loading.is_none() && self.fetched_to >= end {
                self.release_buffers();
            }
            return Ok(out);
        }
        let (load_records, load_bytes) = load_limits(self.loads);
        let full = self.buffer.len() >= load_records || self.buffered_bytes >= load_bytes;
        // Nothing left to fetch: what is gathered goes to the store now.
        let last = self.fetched_to >= end;
        // The store is idle: a half-size load now beats waiting for a full one (the store,
        // not the fetch, is the bottleneck: measured, docs/BENCHMARKS.md).
        let idle = self.loading.is_none()
            && self.loads > 0
            && (self.buffer.len() >= load_records / 2 || self.buffered_bytes >= load_bytes / 2);
        if !(full || last || idle) {
            return Ok(out);
        }
        // Two loads at most, the later registering after the earlier: memory stays bounded by
        // three buffers, and a load that waits for its disk does not hold up the fetching.
        if self
            .loading
            .as_ref()
            .is_some_and(|l| l.behind.load(Ordering::Acquire))
        {
            // A later call starts it, once a load has ended: the stream thread runs actives
            // and does not wait here. [`Catchup::busy`] stops the fetching meanwhile; only a
            // buffer twice its limits (fetched past what `busy` allowed) waits, to stay bounded.
            let over =
                self.buffer.len() >= 2 * load_records || self.buffered_bytes >= 2 * load_bytes;
            if !over {
                return Ok(out);
            }
            self.wait()?;
        }
        out.applied = self.start_load(store)?;
        Ok(out)
    }

    /// Adds a fetch's records to the buffer, sorted as one run (here, beside the load in
    /// progress, rather than by the next load). Returns the records without a key, skipped.
    fn gather(&mut self, records: impl Iterator<Item = (Option<Bytes>, Option<Bytes>)>) -> u64 {
        if self.buffer.capacity() == 0 {
            self.buffer = std::mem::take(&mut self.spare);
        }
        let mut skipped = 0;
        let (bytes_before, records_before) = (self.buffered_bytes, self.buffer.len());
        let (bytes, taken) = (&mut self.buffered_bytes, &mut self.buffered_records);
        self.buffer
            .push_run(records.filter_map(|(key, value)| match key {
                Some(key) => {
                    *bytes += key.len() + value.as_ref().map_or(0, Bytes::len);
                    *taken += 1;
                    Some((key, value))
                }
                None => {
                    skipped += 1;
                    None
                }
            }));
        let chunk = (
            self.buffered_bytes - bytes_before,
            self.buffer.len().saturating_sub(records_before),
        );
        self.largest_chunk = (
            self.largest_chunk.0.max(chunk.0),
            self.largest_chunk.1.max(chunk.1),
        );
        skipped
    }

    /// Starts a bulk load of everything gathered, beside (and registering after) the load in
    /// progress, if any. Returns the records it takes.
    fn start_load(&mut self, store: &TaskStore) -> Result<u64, StoreError> {
        let earlier = self.loading.take();
        self.loads += 1;
        let applied = std::mem::take(&mut self.buffered_records);
        self.buffered_bytes = 0;
        let spare = std::mem::take(&mut self.spare);
        let mut batch = std::mem::replace(&mut self.buffer, spare);
        let next = self.fetched_to;
        let (path, store) = (store.path().display().to_string(), store.clone());
        let behind = Arc::new(AtomicBool::new(earlier.is_some()));
        let waiting = behind.clone();
        let handle = std::thread::Builder::new()
            .name("baton-load".into())
            .spawn(move || {
                crate::priority::lower_this_thread();
                let written = store.ingest_runs_after(&mut batch, next, || {
                    let Some(load) = earlier else {
                        return Ok(());
                    };
                    let joined = join(load.handle);
                    waiting.store(false, Ordering::Release);
                    joined.map(drop)
                });
                written.map(|()| batch)
            })
            .map_err(|e| StoreError::Store {
                path,
                message: format!("cannot start a bulk load: {e}"),
            })?;
        self.loading = Some(Load {
            handle,
            to: next,
            behind,
        });
        Ok(applied)
    }

    /// Puts everything fetched into the store and waits for it: afterwards the checkpoint is
    /// where the fetching is. For a caller with nothing else to do meanwhile (a standalone
    /// restore, tests).
    pub fn finish(&mut self, store: &TaskStore) -> Result<(), StoreError> {
        if !self.buffer.is_empty() {
            self.start_load(store)?;
        }
        self.wait()?;
        self.release_buffers();
        Ok(())
    }

    /// Caught up: the buffers' memory goes back, and later chunks go straight in.
    fn release_buffers(&mut self) {
        if self.buffer.is_empty() && self.loading.is_none() {
            (self.buffer, self.spare) = (Runs::default(), Runs::default());
        }
    }

    /// Waits for the bulk load in progress, if any; the checkpoint moves with it.
    pub fn wait(&mut self) -> Result<(), StoreError> {
        if let Some(load) = self.loading.take() {
            self.spare = join(load.handle)?;
            self.position = load.to;
        }
        Ok(())
    }

    /// The store has taken writes of its own up to `next` (an active's processing).
    pub fn advance_to(&mut self, next: i64) {
        debug_assert!(
            self.buffer.is_empty() && self.loading.is_none(),
            "an active has nothing left to load"
        );
        self.position = next;
        self.fetched_to = next;
    }
}

/// The outcome of a bulk load: its buffer, emptied.
fn join(handle: std::thread::JoinHandle<Loaded>) -> Loaded {
    handle.join().map_err(|_| StoreError::Store {
        path: String::new(),
        message: "a bulk load panicked".into(),
    })?
}

/// Where a reader at `from` stands after `fetched`: past its last record below `end`, and past
/// control records and compacted-away records, which end batches but carry no data. Never
/// behind `from`.
pub fn next_position(fetched: &Fetched, from: i64, end: i64) -> i64 {
    // A partition's records come in offset order: no need to walk them all.
    let below = fetched.records.partition_point(|r| r.offset < end);
    fetched.records[..below]
        .last()
        .map_or(from, |r| r.offset + 1)
        .max(fetched.next_offset.unwrap_or(from).min(end))
        .max(from)
}

#[cfg(test)]
mod tests {
    use baton_assignor::TaskId;
    use baton_kafka::records::Record;

    use super::*;

    #[test]
    fn busy_while_two_loads_run_and_another_chunk_would_wait_for_them() {
        let mut c = Catchup::new(0, Layout::Plain);
        assert!(!c.busy(4 << 20), "no load: never busy");
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            let _ = wait.recv();
            Ok(Runs::default())
        });
        let behind = Arc::new(AtomicBool::new(false));
        c.loading = Some(Load {
            handle,
            to: 10,
            behind: behind.clone(),
        });
        c.loads = 3; // the next load may be a full one
        c.buffered_bytes = INGEST_BYTES - (1 << 20);
        assert!(
            !c.busy(1 << 20),
            "one load: the next one may start beside it"
        );
        behind.store(true, Ordering::Release);
        assert!(!c.busy(512 << 10), "room for a chunk beside the loads");
        assert!(
            c.busy(1 << 20),
            "the chunk would fill the buffer: absorb would wait"
        );
        c.buffered_bytes = 0;
        c.buffer.push_run(keys(INGEST_RECORDS - 100));
        assert!(c.busy(1 << 20), "too many records to take another chunk");
        c.buffer = Runs::default();
        c.buffered_bytes = INGEST_BYTES - (1 << 20);
        assert!(!c.busy(256 << 10), "room for a quarter-MiB chunk");
        c.largest_chunk = (720 << 10, 7_000);
        assert!(
            !c.busy(256 << 10),
            "a broker may answer with more than asked: room for the largest chunk yet"
        );
        c.largest_chunk = (2 << 20, 7_000);
        assert!(
            c.busy(256 << 10),
            "the largest chunk yet would fill the buffer, whatever the limit asked"
        );
        release.send(()).unwrap();
        while !c.loading.as_ref().unwrap().is_finished() {
            std::thread::yield_now();
        }
        assert!(
            !c.busy(1 << 20),
            "the loads are done: absorb would not wait"
        );
    }

    /// A load of `key` = `value` up to offset `to`, held until `gate` says go.
    fn gated_load(store: &TaskStore, key: &str, value: &str, to: i64) -> (Load, impl FnOnce()) {
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let (store, key, value) = (store.clone(), key.to_owned(), value.to_owned());
        let handle = std::thread::spawn(move || {
            let _ = gate.recv();
            let mut runs = Runs::default();
            runs.push_run([(Bytes::from(key), Some(Bytes::from(value)))]);
            store.ingest_runs(&mut runs, to).map(|()| runs)
        });
        let behind = Arc::new(AtomicBool::new(false));
        let release = move || {
            // Late: the load after it has long written its table by then.
            std::thread::sleep(std::time::Duration::from_millis(300));
            let _ = go.send(());
        };
        (Load { handle, to, behind }, release)
    }

    #[test]
    fn a_load_that_starts_while_the_one_before_runs_registers_after_it() {
        let (dir, store) = fresh_store("chained");
        let mut c = Catchup::new(0, Layout::Plain);
        let (earlier, release) = gated_load(&store, "k100", "old", 100);
        c.loading = Some(earlier);
        c.fetched_to = 100;
        // A full first load's worth: it starts at once, beside the earlier one.
        let (first, _) = load_limits(0);
        let offsets: Vec<i64> = (100..100 + first as i64).collect();
        c.absorb(&store, fetched(&offsets, None), i64::MAX).unwrap();
        let load = c.loading.as_ref().expect("a load started");
        assert!(
            load.behind.load(Ordering::Acquire),
            "behind the earlier one"
        );
        assert_eq!(c.position(), 0, "neither has registered");
        let releaser = std::thread::spawn(release);
        c.wait().unwrap();
        releaser.join().unwrap();
        assert_eq!(c.position(), 100 + first as i64);
        assert_eq!(
            store.get(b"k100").unwrap(),
            Some(b"v100".to_vec()),
            "the later write shadows the earlier, though its table was written first"
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_last_chunk_registers_after_the_load_before_it() {
        let (dir, store) = fresh_store("last");
        let mut c = Catchup::new(0, Layout::Plain);
        let (earlier, release) = gated_load(&store, "k100", "old", 100);
        c.loading = Some(earlier);
        c.fetched_to = 100;
        let releaser = std::thread::spawn(release);
        c.absorb(&store, fetched(&[100, 101], None), 102).unwrap();
        assert_eq!(c.position(), 0, "the caller did not wait for the loads");
        c.finish(&store).unwrap();
        releaser.join().unwrap();
        assert_eq!(c.position(), 102);
        assert_eq!(store.get(b"k100").unwrap(), Some(b"v100".to_vec()));
        assert_eq!(store.checkpoint().unwrap(), Some(102));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The last chunk goes to a load too, and the caller goes on: a later call, with an empty
    /// answer as a caught-up fetch brings, finds the loads ended and moves the checkpoint.
    #[test]
    fn the_last_chunk_never_holds_up_the_caller() {
        let (dir, store) = fresh_store("async-last");
        let mut c = Catchup::new(0, Layout::Plain);
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let earlier_store = store.clone();
        let handle = std::thread::spawn(move || {
            let _ = gate.recv();
            let mut runs = Runs::default();
            runs.push_run([(Bytes::from("k100"), Some(Bytes::from("old")))]);
            earlier_store.ingest_runs(&mut runs, 100).map(|()| runs)
        });
        c.loading = Some(Load {
            handle,
            to: 100,
            behind: Arc::new(AtomicBool::new(false)),
        });
        c.fetched_to = 100;
        let a = c.absorb(&store, fetched(&[100, 101], None), 102).unwrap();
        assert_eq!(
            (a.applied, c.position()),
            (2, 0),
            "handed to a load, not waited for"
        );
        let a = c.absorb(&store, fetched(&[], None), 102).unwrap();
        assert_eq!((a.applied, c.position()), (0, 0), "the loads still run");
        go.send(()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while c.position() < 102 && std::time::Instant::now() < deadline {
            c.absorb(&store, fetched(&[], None), 102).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(c.position(), 102);
        assert!(c.loading.is_none());
        assert_eq!(store.get(b"k100").unwrap(), Some(b"v100".to_vec()));
        assert_eq!(store.checkpoint().unwrap(), Some(102));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_earlier_load_fails_the_one_after_it() {
        let (dir, store) = fresh_store("failed");
        let mut c = Catchup::new(0, Layout::Plain);
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            let _ = gate.recv();
            Err(StoreError::Store {
                path: "p".into(),
                message: "disk full".into(),
            })
        });
        c.loading = Some(Load {
            handle,
            to: 100,
            behind: Arc::new(AtomicBool::new(false)),
        });
        c.fetched_to = 100;
        let (first, _) = load_limits(0);
        let offsets: Vec<i64> = (100..100 + first as i64).collect();
        c.absorb(&store, fetched(&offsets, None), i64::MAX).unwrap();
        go.send(()).unwrap();
        let e = c.wait().unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        assert_eq!(c.position(), 0);
        assert_eq!(
            store.get(b"k100").unwrap(),
            None,
            "nothing after a gap is registered"
        );
        assert_eq!(store.checkpoint().unwrap(), None);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `n` tombstones of distinct keys, in key order.
    fn keys(n: usize) -> Vec<(Bytes, Option<Bytes>)> {
        (0..n)
            .map(|i| (Bytes::from(format!("key-{i:09}")), None))
            .collect()
    }

    /// An empty store in a directory of its own; the test removes the directory.
    fn fresh_store(name: &str) -> (std::path::PathBuf, TaskStore) {
        let dir = std::env::temp_dir().join(format!("baton-catchup-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = TaskStore::open(&dir, TaskId::new(0, 0), "s").unwrap();
        (dir, store)
    }

    fn fetched(offsets: &[i64], next_offset: Option<i64>) -> Fetched {
        Fetched {
            records: offsets
                .iter()
                .map(|&o| Record {
                    offset: o,
                    timestamp: 0,
                    key: (o != 3).then(|| Bytes::from(format!("k{o}"))),
                    value: Some(Bytes::from(format!("v{o}"))),
                })
                .collect(),
            high_watermark: 100,
            next_offset,
            corrupt: None,
        }
    }

    #[test]
    fn positions_move_past_records_control_batches_and_stop_at_the_end() {
        let f = fetched(&[5, 6], Some(9));
        assert_eq!(
            next_position(&f, 5, i64::MAX),
            9,
            "control records end at 8"
        );
        assert_eq!(next_position(&f, 5, 6), 6, "nothing at or past the end");
        assert_eq!(
            next_position(&fetched(&[], None), 7, 100),
            7,
            "never behind"
        );
    }

    #[test]
    fn bulk_loads_start_small_and_double_up_to_the_limits() {
        let records: Vec<usize> = (0..6).map(|n| load_limits(n).0).collect();
        assert_eq!(
            records,
            [62_500, 125_000, 250_000, 500_000, 500_000, 500_000]
        );
        assert_eq!(load_limits(0).1, 4 << 20);
        assert_eq!(load_limits(u32::MAX), (INGEST_RECORDS, INGEST_BYTES));
    }

    #[test]
    fn an_idle_store_takes_a_half_size_load_at_once() {
        let (dir, store) = fresh_store("idle");
        let mut c = Catchup::new(0, Layout::Plain);
        c.loads = 1;
        let half = load_limits(1).0 / 2;
        c.buffer.push_run(keys(half - 2));
        // Two records short of half: the first chunk is gathered, the second starts a load.
        c.fetched_to = 1_000_000;
        let chunk = |o: i64| fetched(&[o], None);
        c.absorb(&store, chunk(1_000_000), i64::MAX).unwrap();
        assert!(c.loading.is_none(), "below half: no load yet");
        c.absorb(&store, chunk(1_000_001), i64::MAX).unwrap();
        assert!(
            c.loading.is_some() && c.loads == 2,
            "half, store idle: loads now"
        );
        c.wait().unwrap();
        assert_eq!(c.position(), 1_000_002);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_loads_buffer_serves_the_next_load_and_is_freed_once_caught_up() {
        let (dir, store) = fresh_store("spare");
        // From offset 10: every record has a key (see `fetched`).
        let mut c = Catchup::new(10, Layout::Plain);
        let (first, _) = load_limits(0);
        let offsets: Vec<i64> = (10..10 + first as i64).collect();
        c.absorb(&store, fetched(&offsets, None), i64::MAX).unwrap();
        assert!(c.loading.is_some(), "a full first load starts");
        c.wait().unwrap();
        let kept = c.spare.capacity();
        assert!(kept >= first, "the load hands its buffer back");
        let at = 10 + first as i64;
        c.absorb(&store, fetched(&[at], None), i64::MAX).unwrap();
        assert_eq!(c.buffer.capacity(), kept, "the next chunk goes into it");
        c.absorb(&store, fetched(&[at + 1], None), at + 2).unwrap();
        c.finish(&store).unwrap();
        assert_eq!(c.position(), at + 2);
        assert_eq!(
            (c.buffer.capacity(), c.spare.capacity()),
            (0, 0),
            "caught up: the memory goes back"
        );
        assert_eq!(store.get(b"k11").unwrap(), Some(b"v11".to_vec()));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_store_far_behind_loads_in_bulk_and_one_near_the_end_applies_at_once() {
        let (dir, store) = fresh_store("bulk");
        let mut c = Catchup::new(0, Layout::Plain);
        // Far behind: gathered, not yet in the store, checkpoint unmoved.
        let a = c.absorb(&store, fetched(&[0, 1, 2, 3], None), 10).unwrap();
        assert_eq!((a.progressed, a.applied, a.skipped), (true, 0, 1));
        assert_eq!((c.position(), c.fetch_from()), (0, 4));
        assert_eq!(store.get(b"k0").unwrap(), None);
        // Reaching the end loads everything gathered.
        let a = c
            .absorb(&store, fetched(&[4, 5, 6, 7, 8, 9], None), 10)
            .unwrap();
        assert_eq!(a.applied, 9);
        c.finish(&store).unwrap();
        assert_eq!(c.position(), 10);
        assert_eq!(store.get(b"k0").unwrap(), Some(b"v0".to_vec()));
        assert_eq!(store.checkpoint().unwrap(), Some(10));
        // At the end: each chunk goes straight in.
        let a = c.absorb(&store, fetched(&[10], None), 11).unwrap();
        assert_eq!((a.applied, c.position()), (1, 11));
        assert_eq!(store.get(b"k10").unwrap(), Some(b"v10".to_vec()));
        // An empty answer changes nothing.
        assert!(!c.absorb(&store, fetched(&[], None), 11).unwrap().progressed);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
