//! A store catching up with its changelog, one fetched chunk at a time. Shared by a task's
//! restore and tailing and by the standalone [`crate::restore()`], so the restore benchmark
//! measures the path the runtime runs.
//!
//! A store near the end applies each chunk as a batch. A store far behind gathers chunks, each
//! sorted into a run as it comes, and bulk-loads them ([`TaskStore::ingest_runs`]), which is
//! faster; only then does its checkpoint move. A bulk load runs on a thread of its own while
//! the next chunks are fetched, sorted and gathered, so the store works while the fetching
//! does, rather than after it.

use baton_kafka::records::Fetched;
use bytes::Bytes;

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
    /// The bulk load in progress, and the position the store reaches with it. It hands its
    /// buffer back, empty.
    loading: Option<(std::thread::JoinHandle<Loaded>, i64)>,
    /// Bulk loads started so far: they grow (see [`load_limits`]).
    loads: u32,
}

type Loaded = Result<Runs<Bytes, Bytes>, StoreError>;

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
    /// Starting from the store's checkpoint.
    pub fn new(position: i64) -> Catchup {
        Catchup {
            position,
            fetched_to: position,
            buffer: Runs::default(),
            spare: Runs::default(),
            buffered_bytes: 0,
            buffered_records: 0,
            loading: None,
            loads: 0,
        }
    }

    pub fn position(&self) -> i64 {
        self.position
    }

    /// Whether a chunk of up to `chunk_bytes` more would make [`Catchup::absorb`] wait for the
    /// bulk load in progress. The thread then leaves this changelog out of its next fetch, so
    /// that the actives it also runs are not held up behind a warm-up's load.
    pub fn busy(&self, chunk_bytes: usize) -> bool {
        let Some((handle, _)) = &self.loading else {
            return false;
        };
        // Records are at least a few bytes; 16 per record over-counts a chunk's records.
        let (records, bytes) = load_limits(self.loads);
        !handle.is_finished()
            && (self.buffered_bytes + chunk_bytes >= bytes
                || self.buffer.len() + chunk_bytes / 16 >= records)
    }

    /// Where the next fetch starts.
    pub fn fetch_from(&self) -> i64 {
        self.fetched_to
    }

    /// Where the fetch position moves with `fetched` (see [`next_position`]).
    pub fn reach(&self, fetched: &Fetched, end: i64) -> i64 {
        next_position(fetched, self.fetched_to, end)
    }

    /// Takes the records of `fetched` below `end` into `store`, now or in a later bulk load.
    /// Everything fetched is in the store once the fetch position reaches `end`.
    pub fn absorb(
        &mut self,
        store: &TaskStore,
        fetched: Fetched,
        end: i64,
    ) -> Result<Absorbed, StoreError> {
        let mut out = Absorbed::default();
        let next = self.reach(&fetched, end);
        if next <= self.fetched_to {
            return Ok(out);
        }
        out.progressed = true;
        self.fetched_to = next;
        let records = fetched.records.into_iter().take_while(|r| r.offset < end);
        if self.loading.as_ref().is_some_and(|(h, _)| h.is_finished()) {
            self.wait()?;
        }
        if self.buffer.is_empty() && self.loading.is_none() && next >= end {
            // Caught up: a small chunk goes straight in.
            let writes: Vec<Write> = records
                .filter_map(|r| match r.key {
                    Some(k) => Some((k.to_vec(), r.value.map(|v| v.to_vec()))),
                    None => {
                        out.skipped += 1;
                        None
                    }
                })
                .collect();
            out.applied = writes.len() as u64;
            store.apply_lazily(&writes, Some(next))?;
            self.position = next;
            return Ok(out);
        }
        if self.buffer.capacity() == 0 {
            self.buffer = std::mem::take(&mut self.spare);
        }
        // Sorted as a run here, beside the load in progress, rather than by the next load.
        let (bytes, taken) = (&mut self.buffered_bytes, &mut self.buffered_records);
        self.buffer.push_run(records.filter_map(|r| match r.key {
            Some(key) => {
                *bytes += key.len() + r.value.as_ref().map_or(0, Bytes::len);
                *taken += 1;
                Some((key, r.value))
            }
            None => {
                out.skipped += 1;
                None
            }
        }));
        let (load_records, load_bytes) = load_limits(self.loads);
        if next >= end {
            // The last chunk: everything fetched is in the store when this returns.
            self.wait()?;
            out.applied = std::mem::take(&mut self.buffered_records);
            self.buffered_bytes = 0;
            store.ingest_runs(&mut self.buffer, next)?;
            self.position = next;
            // Caught up: the buffers' memory goes back, and later chunks go straight in.
            (self.buffer, self.spare) = (Runs::default(), Runs::default());
        } else if self.buffer.len() >= load_records
            || self.buffered_bytes >= load_bytes
            || (self.loading.is_none() && self.loads > 0 && {
                // The store is idle: a half-size load now beats waiting for a full one (the
                // store, not the fetch, is the bottleneck: measured, docs/BENCHMARKS.md).
                self.buffer.len() >= load_records / 2 || self.buffered_bytes >= load_bytes / 2
            })
        {
            // One load at a time: it bounds memory to two buffers.
            self.wait()?;
            self.loads += 1;
            out.applied = std::mem::take(&mut self.buffered_records);
            self.buffered_bytes = 0;
            let spare = std::mem::take(&mut self.spare);
            let mut batch = std::mem::replace(&mut self.buffer, spare);
            let (path, store) = (store.path().display().to_string(), store.clone());
            let handle = std::thread::Builder::new()
                .name("baton-load".into())
                .spawn(move || store.ingest_runs(&mut batch, next).map(|()| batch))
                .map_err(|e| StoreError::Store {
                    path,
                    message: format!("cannot start a bulk load: {e}"),
                })?;
            self.loading = Some((handle, next));
        }
        Ok(out)
    }

    /// Waits for the bulk load in progress, if any; the checkpoint moves with it.
    pub fn wait(&mut self) -> Result<(), StoreError> {
        if let Some((handle, to)) = self.loading.take() {
            self.spare = handle.join().map_err(|_| StoreError::Store {
                path: String::new(),
                message: "a bulk load panicked".into(),
            })??;
            self.position = to;
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
    fn busy_while_a_load_runs_and_another_chunk_would_wait_for_it() {
        let mut c = Catchup::new(0);
        assert!(!c.busy(4 << 20), "no load: never busy");
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            let _ = wait.recv();
            Ok(Runs::default())
        });
        c.loading = Some((handle, 10));
        c.loads = 3; // the next load may be a full one
        assert!(!c.busy(1 << 20), "room for a chunk beside the load");
        c.buffered_bytes = INGEST_BYTES - (1 << 20);
        assert!(
            c.busy(1 << 20),
            "the chunk would fill the buffer: absorb would wait"
        );
        c.buffered_bytes = 0;
        c.buffer.push_run(keys(INGEST_RECORDS - 100));
        assert!(c.busy(1 << 20), "too many records to take another chunk");
        release.send(()).unwrap();
        while !c.loading.as_ref().unwrap().0.is_finished() {
            std::thread::yield_now();
        }
        assert!(!c.busy(1 << 20), "the load is done: absorb would not wait");
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
        let mut c = Catchup::new(0);
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
        let mut c = Catchup::new(10);
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
        let mut c = Catchup::new(0);
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
