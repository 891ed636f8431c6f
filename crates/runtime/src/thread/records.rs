//! Running one batch's records (and a wall-clock punctuation) against the task's stores,
//! before anything is written: each record through the application's steps, or into its
//! table's store; what a failed record or punctuation becomes under the error policies.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::time::Duration;

use baton_assignor::TaskId;
use baton_kafka::records::{KeyValue, Record};
use baton_protocol::TopicPartition;

use super::{failed_task_fate, StoreIo};
use crate::config::ProcessingErrorPolicy;
use crate::context::Context;
use crate::global::GlobalStore;
use crate::heal::StoreFailures;
use crate::machine::{Event, RequestId};
use crate::record::{run_record, RecordOutcome, SkipLog};
use crate::store::StoreError;
use crate::topology::{overlay_head, overlay_totals, BufferHead, Output, Stores, StreamRecord};

/// An input record the application failed on, or could not deserialize.
struct FailedRecord {
    source: usize,
    offset: i64,
    why: String,
    undecodable: bool,
}

use crate::cache::{Hasher, KeyWrites, TaskCache};

/// A store's writes taken in one batch (`None` deletes), each with the timestamp of the record
/// that wrote it last.
pub(super) type StoreWrites = KeyWrites;

/// A table's updates taken in one batch (`None` deletes) and the source offset after the last.
pub(super) type TableUpdates = (HashMap<Vec<u8>, Option<Vec<u8>>, Hasher>, i64);

/// A processing batch's store writes, read back by later records of the same batch. Hashed,
/// not ordered: every record reads and writes here, and a batch's writes are sorted once at
/// its end ([`sorted`]).
pub(super) struct Pending<'a> {
    pub stores: &'a [StoreIo],
    pub globals: &'a [GlobalStore],
    pub writes: BTreeMap<usize, StoreWrites>,
    pub tables: BTreeMap<usize, TableUpdates>,
    /// The record cache's writes since its last flush, by store index ([`crate::cache`]):
    /// read under the batch's writes, over the store.
    pub cached: Option<&'a TaskCache>,
    /// The timestamp of the record (or punctuation) running now: Kafka's `context.timestamp()`,
    /// which a changelog record takes when its value has none of its own.
    pub timestamp: i64,
}

impl Pending<'_> {
    /// The batch's writes to `store`, if the task has it.
    fn writes_of(&mut self, store: &str) -> Option<&mut StoreWrites> {
        let idx = self.stores.iter().position(|s| s.name == store)?;
        Some(self.writes.entry(idx).or_default())
    }
}

impl Stores for Pending<'_> {
    fn get(&mut self, store: &str, key: &[u8]) -> std::result::Result<Option<Vec<u8>>, StoreError> {
        let Some(idx) = self.stores.iter().position(|s| s.name == store) else {
            // A global table's, read as it stands: no task writes it.
            return match self.globals.iter().find(|g| g.name == store) {
                Some(g) => g.store.get(key),
                None => Ok(None),
            };
        };
        if let Some(v) = self.tables.get(&idx).and_then(|(w, _)| w.get(key)) {
            return Ok(v.clone());
        }
        if let Some((v, _)) = self.writes.get(&idx).and_then(|w| w.get(key)) {
            return Ok(v.clone());
        }
        if let Some((v, _)) = self.cached.and_then(|c| c.writes(idx)?.get(key)) {
            return Ok(v.clone());
        }
        self.stores[idx].store.get(key)
    }

    fn range(
        &mut self,
        store: &str,
        from: &[u8],
        to: &[u8],
    ) -> std::result::Result<crate::topology::Entries, StoreError> {
        let Some(idx) = self.stores.iter().position(|s| s.name == store) else {
            return Ok(Vec::new());
        };
        let base = self.stores[idx].store.range(from, to)?;
        // Every write of the batch to this store is looked at: a range read is rare (session
        // windows), and the writes are hashed for the reads and writes every record makes.
        let tables = self
            .tables
            .get(&idx)
            .into_iter()
            .flat_map(|(w, _)| w.iter());
        let tables = tables.map(|(k, v)| (k.as_slice(), v.as_deref()));
        let writes = self.writes.get(&idx).into_iter().flat_map(|w| w.iter());
        let writes = writes.map(|(k, (v, _))| (k.as_slice(), v.as_deref()));
        // The cache first: the batch's own writes are newer.
        let cached = self.cached.and_then(|c| c.writes(idx));
        let cached = cached.into_iter().flat_map(|w| w.iter());
        let cached = cached.map(|(k, (v, _))| (k.as_slice(), v.as_deref()));
        Ok(crate::topology::overlay_range(
            base,
            cached.chain(writes).chain(tables),
            from,
            to,
        ))
    }

    fn buffer_head(
        &mut self,
        store: &str,
        skip: &dyn Fn(&[u8]) -> bool,
    ) -> std::result::Result<BufferHead, StoreError> {
        let Some(idx) = self.stores.iter().position(|s| s.name == store) else {
            return Ok(None);
        };
        let writes = self.writes.get(&idx);
        let written = |k: &[u8]| writes.is_some_and(|w| w.contains_key(k));
        let base = self.stores[idx]
            .store
            .buffer_head(&|k| skip(k) || written(k))?;
        let writes = writes.into_iter().flatten();
        Ok(overlay_head(
            base,
            writes.map(|(k, (v, _))| (k.as_slice(), v.as_deref())),
            skip,
        ))
    }

    fn buffer_totals(&mut self, store: &str) -> std::result::Result<(u64, u64), StoreError> {
        let Some(idx) = self.stores.iter().position(|s| s.name == store) else {
            return Ok((0, 0));
        };
        let base = &self.stores[idx].store;
        let mut writes = Vec::new();
        for (k, (v, _)) in self.writes.get(&idx).into_iter().flatten() {
            writes.push((k.as_slice(), v.as_deref(), base.buffer_size(k)?));
        }
        Ok(overlay_totals(base.buffer_totals()?, writes))
    }

    fn write(&mut self, store: &str, key: &[u8], value: Option<Vec<u8>>) {
        let timestamp = self.timestamp;
        if let Some(writes) = self.writes_of(store) {
            // A key written before in the batch (most, when keys repeat) keeps its slot.
            match writes.get_mut(key) {
                Some(slot) => *slot = (value, timestamp),
                None => {
                    writes.insert(key.to_vec(), (value, timestamp));
                }
            }
        }
    }

    fn write_owned(&mut self, store: &str, key: Vec<u8>, value: Option<Vec<u8>>) {
        let timestamp = self.timestamp;
        if let Some(writes) = self.writes_of(store) {
            writes.insert(key, (value, timestamp));
        }
    }
}

/// What a batch's records built up: the store writes they read back, the outputs and where
/// each came from, and what the policies set aside.
pub(super) struct BatchRun<'a> {
    pub pending: Pending<'a>,
    pub out: Output,
    /// The task's stream time: the largest timestamp it has read, this batch's included.
    pub stream_time: i64,
    /// Which input record each output came from: (input partition, offset, outputs so far).
    pub origins: Vec<(usize, i64, usize)>,
    pub records: u64,
    /// Records the application failed on, for the dead-letter topic (as they came).
    pub dead_letters: Vec<(String, KeyValue)>,
}

impl<'a> BatchRun<'a> {
    /// A run over `records` input records: sized for one output each, so that a batch's
    /// outputs are not copied as they grow (a large batch's were, into fresh pages each time).
    pub fn new(
        (stores, cached): (&'a [StoreIo], Option<&'a TaskCache>),
        globals: &'a [GlobalStore],
        stream_time: i64,
        records: usize,
    ) -> BatchRun<'a> {
        BatchRun {
            pending: Pending {
                stores,
                globals,
                writes: BTreeMap::new(),
                tables: BTreeMap::new(),
                cached,
                timestamp: 0,
            },
            out: Output {
                records: Vec::with_capacity(records),
                late: 0,
            },
            stream_time,
            origins: Vec::with_capacity(records),
            records: 0,
            dead_letters: Vec::new(),
        }
    }
}

/// What a batch's records are run with: the task, its sources, and the driver's logs of
/// skips and store failures.
pub(super) struct RecordEnv<'a> {
    pub ctx: &'a Context,
    pub task: TaskId,
    pub batch: RequestId,
    pub sources: &'a [TopicPartition],
    /// Per source, the store it fills when it is a table's topic.
    pub table_of: &'a [Option<usize>],
    pub started: Duration,
    pub skip_log: &'a mut SkipLog,
    pub store_failures: &'a mut StoreFailures,
}

impl RecordEnv<'_> {
    /// Runs record `r` of source `source`, taking its key and value (a reference fewer to
    /// count up and down on the buffer it came in); `Break`: the event that ends the batch.
    pub fn record(
        &mut self,
        run: &mut BatchRun,
        source: usize,
        r: &mut Record,
    ) -> ControlFlow<Event> {
        run.records += 1;
        if let Some(idx) = self.table_of.get(source).copied().flatten() {
            self.table_record(run, idx, source, r);
            return ControlFlow::Continue(());
        }
        // A record without a key is read with an empty one (a stateless step may give it a
        // key, as word count's grouping does); one without a value is a delete, which only a
        // table's updates read as a stream take: elsewhere it is passed over, as Kafka
        // Streams' aggregations pass over null values.
        let topic = &self.sources[source].topic;
        if r.value.is_none()
            && !self
                .ctx
                .topology
                .takes_deletes_from(self.task.subtopology, topic)
        {
            return ControlFlow::Continue(());
        }
        // Kept only for a dead-letter topic, which takes a failed record as it came.
        let kept = self
            .dead_letters()
            .then(|| (r.key.clone().unwrap_or_default(), r.value.clone()));
        run.stream_time = run.stream_time.max(r.timestamp);
        run.pending.timestamp = r.timestamp;
        let step = run_record(
            &self.ctx.topology,
            (self.task, &self.sources[source].topic),
            StreamRecord {
                key: r.key.take().unwrap_or_default(),
                value: r.value.take(),
                timestamp: r.timestamp,
                old: None,
                partition: None,
            },
            run.stream_time,
            &mut run.pending,
            &mut run.out,
        );
        let (why, undecodable) = match step {
            RecordOutcome::Done => {
                run.origins.push((source, r.offset, run.out.records.len()));
                return ControlFlow::Continue(());
            }
            RecordOutcome::Store(e) => return ControlFlow::Break(self.store_failed(e)),
            RecordOutcome::Panicked(why) => (why, false),
            RecordOutcome::Undecodable(why) => (why, true),
        };
        let f = FailedRecord {
            source,
            offset: r.offset,
            why,
            undecodable,
        };
        if let (Some(topic), Some((k, v))) = (self.record_failed(&f)?, kept) {
            run.dead_letters.push((topic, (Some(k), v)));
        }
        ControlFlow::Continue(())
    }

    /// Whether a failed record may go to a dead-letter topic.
    fn dead_letters(&self) -> bool {
        let cfg = &self.ctx.cfg;
        [&cfg.on_processing_error, &cfg.on_deserialization_error]
            .iter()
            .any(|p| p.dead_letter_topic().is_some())
    }

    /// A table's record goes into its store (unless the store holds it already).
    fn table_record(&mut self, run: &mut BatchRun, idx: usize, source: usize, r: &Record) {
        run.stream_time = run.stream_time.max(r.timestamp);
        if r.offset < run.pending.stores[idx].catchup.position() {
            return;
        }
        let Some(k) = &r.key else {
            // Kafka Streams drops a table record without a key too.
            self.ctx.status.add_skipped(self.task);
            if let Some(unlogged) = self.skip_log.admit(self.task, self.started) {
                tracing::warn!(task = %self.task, record = %format!("{} offset {}", self.sources[source], r.offset), unlogged_since_last = unlogged, "a table record without a key; skipping it");
            }
            return;
        };
        let (writes, next) = run.pending.tables.entry(idx).or_default();
        writes.insert(k.to_vec(), r.value.as_ref().map(|v| v.to_vec()));
        *next = r.offset + 1;
    }

    /// A store failed under a record: nothing of the batch was written. A corrupt store is
    /// rebuilt, then the batch runs again.
    fn store_failed(&mut self, e: StoreError) -> Event {
        let (task, root) = (self.task, &self.ctx.cfg.state_dir);
        let what = "processing a record with the task's stores";
        self.store_failures.failed(task, what, &e.to_string(), root);
        if e.is_corrupt() {
            return Event::StoreFailed {
                task,
                fault: super::fault_of(&e),
            };
        }
        Event::BatchFailed {
            task,
            batch: self.batch,
            output_acknowledged: false,
        }
    }

    /// A record the application failed on: the task stops (`Break`), or the record is
    /// skipped, logged at most once a second, and sent to the dead-letter topic if one is set
    /// (`Some`).
    fn record_failed(&mut self, f: &FailedRecord) -> ControlFlow<Event, Option<String>> {
        let cfg = &self.ctx.cfg;
        let (policy, setting, failure) = if f.undecodable {
            (
                &cfg.on_deserialization_error,
                "on-deserialization-error",
                "cannot be deserialized",
            )
        } else {
            (
                &cfg.on_processing_error,
                "on-processing-error",
                "failed in the application's code",
            )
        };
        let at = self
            .sources
            .get(f.source)
            .map_or("an unknown partition".into(), |tp| {
                format!("{tp} offset {}", f.offset)
            });
        let task = self.task;
        if *policy == ProcessingErrorPolicy::Fail {
            let fate = failed_task_fate(cfg.task_retry);
            tracing::error!(task = %task, record = %at, error = %f.why, "an input record {failure}; stopping this task only ({setting}=fail): {fate}");
            return ControlFlow::Break(Event::RecordFailed {
                task,
                batch: self.batch,
            });
        }
        if let Some(unlogged) = self.skip_log.admit(task, self.started) {
            tracing::error!(task = %task, record = %at, error = %f.why, policy = ?policy, unlogged_since_last = unlogged, "an input record {failure}; skipping it ({setting})");
        }
        self.ctx.status.add_skipped(task);
        ControlFlow::Continue(policy.dead_letter_topic().map(str::to_owned))
    }

    /// Runs the task's wall-clock punctuations at `now_ms`; `Break`: the event that ends the
    /// batch.
    pub fn punctuate(&mut self, run: &mut BatchRun, now_ms: i64) -> ControlFlow<Event> {
        run.pending.timestamp = now_ms;
        let ran = crate::record::run_punctuation(
            &self.ctx.topology,
            self.task,
            now_ms,
            run.stream_time,
            &mut run.pending,
            &mut run.out,
        );
        let task = self.task;
        match ran {
            RecordOutcome::Done => ControlFlow::Continue(()),
            RecordOutcome::Store(e) => {
                let what = "running a wall-clock punctuation with the task's stores";
                let root = &self.ctx.cfg.state_dir;
                self.store_failures.failed(task, what, &e.to_string(), root);
                ControlFlow::Break(Event::BatchFailed {
                    task,
                    batch: self.batch,
                    output_acknowledged: false,
                })
            }
            RecordOutcome::Panicked(why) | RecordOutcome::Undecodable(why) => {
                if self.ctx.cfg.on_processing_error == ProcessingErrorPolicy::Fail {
                    tracing::error!(task = %task, error = %why, "a wall-clock punctuation failed in the application's code; stopping this task only (on-processing-error=fail)");
                    return ControlFlow::Break(Event::RecordFailed {
                        task,
                        batch: self.batch,
                    });
                }
                if let Some(unlogged) = self.skip_log.admit(task, self.started) {
                    tracing::error!(task = %task, error = %why, unlogged_since_last = unlogged, "a wall-clock punctuation failed in the application's code; skipping it (on-processing-error)");
                }
                self.ctx.status.add_skipped(task);
                ControlFlow::Continue(())
            }
        }
    }
}
