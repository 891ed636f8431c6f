//! One input record through the application's code, contained: its store writes and outputs
//! are kept apart until it finishes, and a panic in the application's code ends the record,
//! not the stream thread. A record that fails leaves nothing behind, so skipping it, or
//! stopping its task, never leaves half of its effect in a store or a sink.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;
use std::time::Duration;

use baton_assignor::TaskId;

use crate::store::StoreError;
use crate::topology::{Output, Stores, StreamRecord, Topology};

/// How one record went.
#[derive(Debug)]
pub enum RecordOutcome {
    Done,
    /// A store read failed: nothing of the record was kept.
    Store(StoreError),
    /// The application's code panicked with this message: nothing of the record was kept.
    Panicked(String),
    /// The record's bytes could not be read by its serdes ([`undecodable`]): nothing of the
    /// record was kept.
    Undecodable(String),
}

/// Why a record's bytes could not be read: the panic payload of [`undecodable`].
#[derive(Debug)]
pub struct Undecodable(pub String);

/// Ends the record being processed as one whose bytes cannot be read (`why`): it then follows
/// `on-deserialization-error`, not `on-processing-error`. For serdes in the application's steps.
pub fn undecodable(why: String) -> ! {
    panic::panic_any(Undecodable(why))
}

/// Runs `record` of task `task`, read from `topic`, through `topology` at `stream_time`: on success its writes
/// go to `stores`, its outputs and late-record count to `out`; on failure none of them does.
pub fn run_record(
    topology: &Topology,
    (task, topic): (TaskId, &str),
    record: StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
) -> RecordOutcome {
    contained(stores, out, |stores, out| {
        topology.process_from(task, topic, record, stream_time, stores, out)
    })
}

/// Runs the wall-clock punctuations of task `task` that are due at `now_ms`
/// ([`Topology::punctuate`]), contained as [`run_record`] contains a record.
pub fn run_punctuation(
    topology: &Topology,
    task: TaskId,
    now_ms: i64,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
) -> RecordOutcome {
    contained(stores, out, |stores, out| {
        topology.punctuate(task, now_ms, stream_time, stores, out)
    })
}

/// Runs `f` with a scope of `stores`: its writes and outputs reach `stores` and `out` only if
/// it returns without a panic or a store error.
fn contained(
    stores: &mut dyn Stores,
    out: &mut Output,
    f: impl FnOnce(&mut dyn Stores, &mut Output) -> Result<(), crate::store::StoreError>,
) -> RecordOutcome {
    quiet_contained_panics();
    // The last record's lists, emptied: a record then allocates none of its own.
    let mut scratch = SCRATCH.take();
    let mut produced = std::mem::take(&mut scratch.produced);
    let mut scope = Scope {
        stores,
        scratch: &mut scratch,
    };
    CONTAINED.set(true);
    let ran = panic::catch_unwind(AssertUnwindSafe(|| f(&mut scope, &mut produced)));
    CONTAINED.set(false);
    let outcome = match ran {
        Ok(Ok(())) => {
            let Scratch { names, writes, .. } = &mut *scope.scratch;
            for (store, key, value) in writes.drain(..) {
                scope.stores.write_owned(&names[store as usize], key, value);
            }
            out.records.append(&mut produced.records);
            out.late += produced.late;
            RecordOutcome::Done
        }
        Ok(Err(e)) => RecordOutcome::Store(e),
        Err(payload) => match payload.downcast::<Undecodable>() {
            Ok(u) => RecordOutcome::Undecodable(u.0),
            Err(payload) => RecordOutcome::Panicked(panic_message(payload.as_ref())),
        },
    };
    scratch.writes.clear();
    produced.records.clear();
    produced.late = 0;
    scratch.produced = produced;
    SCRATCH.set(scratch);
    outcome
}

/// A record's writes, read back by the record itself before they reach the batch.
struct Scope<'s> {
    stores: &'s mut dyn Stores,
    scratch: &'s mut Scratch,
}

/// A write a record made: store (its index in [`Scratch::names`]), key, value (`None`
/// deletes).
type ScopeWrite = (u16, Vec<u8>, Option<Vec<u8>>);

/// A record's lists, kept empty between records by the thread that runs them, so a record
/// allocates no store name, write list or output list of its own.
#[derive(Default)]
struct Scratch {
    /// The store names the writes name (the topology's few, learnt as they come).
    names: Vec<String>,
    writes: Vec<ScopeWrite>,
    produced: Output,
}

impl Scratch {
    fn index(&self, store: &str) -> Option<u16> {
        self.names.iter().position(|n| n == store).map(|i| i as u16)
    }

    fn intern(&mut self, store: &str) -> u16 {
        match self.index(store) {
            Some(i) => i,
            None => {
                self.names.push(store.to_owned());
                (self.names.len() - 1) as u16
            }
        }
    }

    /// `store`'s writes, in the order made.
    fn writes_to<'w>(&'w self, store: &str) -> impl Iterator<Item = &'w ScopeWrite> + 'w {
        let idx = self.index(store);
        self.writes.iter().filter(move |(s, _, _)| Some(*s) == idx)
    }
}

impl Stores for Scope<'_> {
    fn get(&mut self, store: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let mine = self
            .scratch
            .writes_to(store)
            .filter(|(_, k, _)| k == key)
            .last();
        match mine {
            Some((_, _, v)) => Ok(v.clone()),
            None => self.stores.get(store, key),
        }
    }

    fn range(
        &mut self,
        store: &str,
        from: &[u8],
        to: &[u8],
    ) -> Result<crate::topology::Entries, StoreError> {
        let base = self.stores.range(store, from, to)?;
        let mine = self
            .scratch
            .writes_to(store)
            .map(|(_, k, v)| (k.as_slice(), v.as_deref()));
        Ok(crate::topology::overlay_range(base, mine, from, to))
    }

    fn buffer_head(
        &mut self,
        store: &str,
        skip: &dyn Fn(&[u8]) -> bool,
    ) -> Result<crate::topology::BufferHead, StoreError> {
        let mine = latest_writes(self.scratch.writes_to(store));
        let base = self
            .stores
            .buffer_head(store, &|k| skip(k) || mine.contains_key(k))?;
        Ok(crate::topology::overlay_head(
            base,
            mine.iter().map(|(k, v)| (*k, *v)),
            skip,
        ))
    }

    fn buffer_totals(&mut self, store: &str) -> Result<(u64, u64), StoreError> {
        let mine = latest_writes(self.scratch.writes_to(store));
        let base = self.stores.buffer_totals(store)?;
        let mut writes = Vec::with_capacity(mine.len());
        for (k, v) in mine {
            let before = self.stores.get(store, k)?;
            writes.push((k, v, before.map(|b| (k.len() + b.len()) as u64)));
        }
        Ok(crate::topology::overlay_totals(base, writes))
    }

    fn write(&mut self, store: &str, key: &[u8], value: Option<Vec<u8>>) {
        let store = self.scratch.intern(store);
        self.scratch.writes.push((store, key.to_vec(), value));
    }

    fn write_owned(&mut self, store: &str, key: Vec<u8>, value: Option<Vec<u8>>) {
        let store = self.scratch.intern(store);
        self.scratch.writes.push((store, key, value));
    }
}

/// Each key's last write among `writes` (one store's).
fn latest_writes<'w>(
    writes: impl Iterator<Item = &'w ScopeWrite>,
) -> BTreeMap<&'w [u8], Option<&'w [u8]>> {
    writes
        .map(|(_, k, v)| (k.as_slice(), v.as_deref()))
        .collect()
}

/// Skipped records are logged at most once a second per task: the first at once, the
/// rest as a count with the next line.
#[derive(Debug, Default)]
pub struct SkipLog {
    by_task: BTreeMap<TaskId, (Duration, u64)>,
}

impl SkipLog {
    const EVERY: Duration = Duration::from_secs(1);

    /// `task`'s part of the log, taken out (for a batch that runs on another thread).
    pub fn take_task(&mut self, task: TaskId) -> SkipLog {
        let by_task = self.by_task.remove(&task).map(|e| (task, e));
        SkipLog {
            by_task: by_task.into_iter().collect(),
        }
    }

    /// Takes back a part [`SkipLog::take_task`] took out.
    pub fn absorb(&mut self, part: SkipLog) {
        self.by_task.extend(part.by_task);
    }

    /// `Some(n)`: log this skip now, saying that `n` skips since the last line were not
    /// logged. `None`: count it for the next line.
    pub fn admit(&mut self, task: TaskId, now: Duration) -> Option<u64> {
        match self.by_task.get_mut(&task) {
            Some((last, unlogged)) if now < *last + Self::EVERY => {
                *unlogged += 1;
                None
            }
            Some((last, unlogged)) => {
                *last = now;
                Some(std::mem::take(unlogged))
            }
            None => {
                self.by_task.insert(task, (now, 0));
                Some(0)
            }
        }
    }
}

thread_local! {
    /// Set while the application's code runs for a record: its panics are reported by the
    /// record's outcome (once, with topic, partition and offset), not by the panic hook.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
    /// The thread's record lists ([`Scratch`]).
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Installs, once, a panic hook that stays silent for contained panics and hands every other
/// panic to the hook there was before. Without it, a stream of bad records would print a
/// panic message for each.
fn quiet_contained_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !CONTAINED.get() {
                previous(info);
            }
        }));
    });
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{MemStores as Map, Stream};

    /// Counts into `a`, then panics on the key "bad" before aggregating into `b`.
    fn two_counts() -> Topology {
        Topology::new(
            "app",
            vec![Stream::from(&["in"])
                .count("a")
                .map_values(|_, v| v.to_vec())
                .aggregate("b", |_, k, v| {
                    assert_ne!(k, b"bad".as_slice(), "boom");
                    v.to_vec()
                })
                .to("out")],
        )
        .unwrap()
    }

    #[test]
    fn skips_are_logged_once_a_second_per_task_with_a_count() {
        let mut log = SkipLog::default();
        let (a, b) = (TaskId::new(0, 0), TaskId::new(0, 1));
        let ms = Duration::from_millis;
        assert_eq!(log.admit(a, ms(0)), Some(0));
        assert_eq!(log.admit(b, ms(10)), Some(0), "tasks apart");
        let quiet: Vec<_> = (1..=9).map(|i| log.admit(a, ms(100 * i))).collect();
        assert!(quiet.iter().all(Option::is_none));
        assert_eq!(log.admit(a, ms(1000)), Some(9));
        assert_eq!(log.admit(a, ms(1500)), None);
        assert_eq!(log.admit(a, ms(2500)), Some(1));
    }

    #[test]
    fn a_record_that_panics_leaves_no_write_and_no_output() {
        let topology = two_counts();
        let (mut stores, mut out) = (Map::default(), Output::default());
        let task = TaskId::new(0, 0);
        let run = |stores: &mut Map, out: &mut Output, key: &'static str| {
            run_record(
                &topology,
                (task, "in"),
                StreamRecord::new(key, "v", 0),
                0,
                stores,
                out,
            )
        };
        let outcome = run(&mut stores, &mut out, "bad");
        assert!(
            matches!(&outcome, RecordOutcome::Panicked(m) if m.contains("boom")),
            "{outcome:?}"
        );
        assert!(stores.0.is_empty(), "the first step's write is gone too");
        assert!(out.records.is_empty());
        // The thread goes on, and the next record is whole.
        assert!(matches!(
            run(&mut stores, &mut out, "k"),
            RecordOutcome::Done
        ));
        assert_eq!(stores.0.len(), 2);
        assert_eq!(out.records.len(), 1);
    }
}
