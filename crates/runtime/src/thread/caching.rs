//! The record cache on the stream thread ([`crate::cache`]): what of a batch waits in it,
//! taking a done batch in, flushing every task's before a commit or when the thread's share
//! is full, and dropping one unwritten (the machine then reads its input again).

use std::collections::HashSet;

use super::*;
use crate::cache::{Hasher, KeyWrites, TaskCache};
use crate::machine::CacheLoss;
use crate::topology::Topology;

/// What of a batch waits in its task's cache: the writes to cached stores and the table
/// sinks' updates, each with the input record it came from.
pub(super) struct CachedPart {
    writes: BTreeMap<usize, KeyWrites>,
    outputs: Vec<(Emitted, (usize, i64))>,
}

impl CachedPart {
    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.outputs.is_empty()
    }
}

/// Takes out of a batch of `task` what waits in its cache: the writes to cached stores, and
/// each table sink's last update per key, in the order of those last updates (the cache keeps
/// no earlier one). Run beside other tasks' batches ([`super::batches`]), so that the thread
/// merges a few updates per key, not every output. Only the kept outputs are copied, into
/// lists sized once: a batch has tens of thousands, and lists grown by doubling were fresh
/// pages the kernel zeroed (a tenth of count per key's samples under `perf`).
pub(super) fn cached_part(
    topology: &Topology,
    (task, cache): (TaskId, &TaskCache),
    done: &mut Done,
) -> CachedPart {
    let (writes, rest) = std::mem::take(&mut done.writes)
        .into_iter()
        .partition(|(i, _)| cache.caches_store(*i));
    done.writes = rest;
    let is_table = |sink| topology.sink_is_table(task.subtopology, sink);
    // Most batches' outputs go to no table (a stream's, a repartition topic's): kept as
    // they are, with no pass over them.
    if !done.out.records.iter().any(|e| is_table(e.sink)) {
        let outputs = Vec::new();
        return CachedPart { writes, outputs };
    }
    let records = std::mem::take(&mut done.out.records);
    let last = last_updates(&records, &is_table);
    let streamed = records.iter().filter(|e| !is_table(e.sink)).count();
    let mut outputs = Vec::with_capacity(last.iter().filter(|&&l| l).count());
    let mut kept = Vec::with_capacity(streamed);
    let mut origins = Vec::with_capacity(streamed);
    for (i, (e, last)) in records.into_iter().zip(last).enumerate() {
        let table = is_table(e.sink);
        if table && !last {
            continue;
        }
        let at = done.origins.partition_point(|o| o.2 <= i);
        let origin = done.origins.get(at).map_or((0, -1), |o| (o.0, o.1));
        if table {
            outputs.push((e, origin));
        } else {
            kept.push(e);
            origins.push((origin.0, origin.1, kept.len()));
        }
    }
    done.out.records = kept;
    done.origins = origins;
    CachedPart { writes, outputs }
}

/// Per output, whether it is a table sink's last update of its key in `records`.
fn last_updates(records: &[Emitted], is_table: &dyn Fn(u16) -> bool) -> Vec<bool> {
    let mut seen: HashSet<(u16, &[u8]), Hasher> =
        HashSet::with_capacity_and_hasher(records.len().min(1 << 16), Hasher::default());
    let mut last: Vec<bool> = records
        .iter()
        .rev()
        .map(|e| is_table(e.sink) && seen.insert((e.sink, &e.record.key[..])))
        .collect();
    last.reverse();
    last
}

impl Driver {
    /// The thread's share of `statestore.cache.max.bytes` (Kafka Streams divides it among
    /// the threads too); 0: no cache.
    pub(super) fn cache_budget(&self) -> u64 {
        self.ctx.cfg.cache_max_bytes / u64::from(self.ctx.cfg.threads.max(1))
    }

    /// `task`'s cache, made at its first batch: every store but the suppression buffers.
    pub(super) fn cache_for(&mut self, task: TaskId) {
        if self.cache_budget() == 0 || self.caches.contains_key(&task) {
            return;
        }
        let Some(t) = self.tasks.get(&task) else {
            return;
        };
        let topology = &self.ctx.topology;
        let cached = t
            .stores
            .iter()
            .enumerate()
            .filter(|(_, s)| !topology.is_suppression_buffer(&s.name))
            .map(|(i, _)| i);
        let cache = TaskCache::new(cached);
        self.caches.insert(task, cache);
    }

    /// A done batch's cached part goes into its task's cache. `true`: its input is in the
    /// stores only once the cache is flushed (it, or a batch before it, left updates there).
    pub(super) fn merge_cached(
        &mut self,
        task: TaskId,
        part: CachedPart,
        inputs: &[Input],
    ) -> bool {
        let Some(cache) = self.caches.get_mut(&task) else {
            return false;
        };
        if part.is_empty() && cache.is_empty() {
            return false;
        }
        let input = inputs.iter().map(|i| (i.source, i.from, i.to));
        cache.merge(part.writes, part.outputs, input);
        true
    }

    /// The thread's caches hold more than its share.
    pub(super) fn caches_full(&self) -> bool {
        let budget = self.cache_budget();
        budget > 0 && self.caches.values().map(TaskCache::bytes).sum::<u64>() > budget
    }

    /// A commit interval and a half has passed since the last flush and a cache holds updates: they are
    /// written even when no commit can be sent (a rebalance round under way), so the output
    /// keeps its pace through a round as it does without the cache.
    /// So is a read-your-writes query waiting ([`crate::query::copies::LocalCopies::request_flush`]):
    /// the store it reads takes the cache only at a flush.
    pub(super) fn flush_due(&self) -> bool {
        let asked = self.ctx.copies.flush_requests() != self.flushes_seen;
        // Half an interval late: while commits come, each flushes first, and this never fires.
        let interval = self.ctx.cfg.commit_interval;
        (asked || self.flushed_at.elapsed() >= interval + interval / 2)
            && self.caches.values().any(|c| !c.is_empty())
    }

    /// Drops `task`'s cache unwritten, telling the machine where its input starts again.
    pub(super) fn drop_cache(&mut self, task: TaskId, why: CacheLoss) {
        let Some(cache) = self.caches.get_mut(&task) else {
            return;
        };
        if cache.is_empty() {
            return;
        }
        let from = cache.clear();
        if why != CacheLoss::Closed {
            tracing::warn!(thread = %self.name, task = %task, ?why, "the record cache could not be written; its input is read again");
        }
        self.local
            .push_back(Event::CacheDropped { task, from, why });
    }

    /// Writes every task's cache as a batch's writes go (outputs, then changelogs) and then
    /// into its stores; each task's outcome goes to `self.local`. `false`: some cache could
    /// not be written and was dropped.
    pub(super) async fn flush_caches(&mut self, m: &ThreadMachine) -> bool {
        self.flushed_at = Instant::now();
        self.flushes_seen = self.ctx.copies.flush_requests();
        let mut flights = Vec::new();
        let mut all = true;
        let tasks: Vec<TaskId> = self
            .caches
            .iter()
            .filter(|(_, c)| !c.is_empty())
            .map(|(&t, _)| t)
            .collect();
        for task in tasks {
            if flush_fails() {
                self.drop_cache(task, CacheLoss::FlushFailed);
                all = false;
                continue;
            }
            let Some(cache) = self.caches.get_mut(&task) else {
                continue;
            };
            let flush = cache.flush();
            let sources = self.ctx.wire.source_partitions(task);
            let inputs = flush
                .input
                .iter()
                .map(|&(source, from, to)| Input { source, from, to })
                .collect();
            let writes = BatchWrites {
                writes: flush.writes,
                tables: BTreeMap::new(),
                outputs: flush.outputs,
                origins: flush.origins,
                dead_letters: Vec::new(),
                sources,
                inputs,
                logs: self.logs_of(task),
            };
            let lane = (task.subtopology as usize).wrapping_add(task.partition as usize);
            let writer = self.writer(lane);
            let allowed = Allowed::for_flush(m);
            let written = tokio::spawn(writer.write_batch(allowed, task, RequestId(0), writes));
            flights.push((task, flush.input, written));
        }
        for (task, input, written) in flights {
            all &= self.flushed(task, &input, written.await);
        }
        all
    }

    /// One task's flush ended: into its stores, or dropped. `false`: dropped.
    fn flushed(
        &mut self,
        task: TaskId,
        input: &[(usize, i64, i64)],
        written: std::result::Result<writes::Written, tokio::task::JoinError>,
    ) -> bool {
        match written {
            Ok(Ok(applied)) => {
                // Into the stores before out of the cache: a query between reads it in one.
                let event = match self.apply_batch(task, applied) {
                    Some(changelogs) => Event::CacheFlushed { task, changelogs },
                    // The changelog holds it: the store catches up from there once reopened.
                    None => Event::StoreFailed {
                        task,
                        fault: StoreFault::Failed,
                    },
                };
                if let Some(cache) = self.caches.get_mut(&task) {
                    cache.clear();
                }
                // Interactive queries read the stores: what they may promise moves now.
                let sources = self.ctx.wire.source_partitions(task);
                for &(source, _, to) in input {
                    if let Some(tp) = sources.get(source) {
                        self.ctx.copies.processed(task, tp, to);
                    }
                }
                self.local.push_back(event);
                true
            }
            Ok(Err(Event::RecordFailed { .. })) => {
                self.drop_cache(task, CacheLoss::FlushStopsTask);
                false
            }
            Ok(Err(_)) | Err(_) => {
                self.drop_cache(task, CacheLoss::FlushFailed);
                false
            }
        }
    }
}

/// The fault suite's failed flush: a fail point (nothing without the `failpoints` feature)
/// that makes one task's flush fail as a broker refusing it would.
fn flush_fails() -> bool {
    fail::fail_point!("baton-flush", |_| true);
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::StreamRecord;

    fn out(sink: u16, key: &str) -> Emitted {
        Emitted {
            sink,
            record: StreamRecord::new(key.as_bytes().to_vec(), b"v".to_vec(), 0),
        }
    }

    #[test]
    fn only_each_table_sinks_last_update_of_a_key_is_last() {
        // Sink 1 is a table's, sink 0 a stream's: a stream's outputs are never "last".
        let records = [
            out(1, "a"),
            out(0, "a"),
            out(1, "b"),
            out(1, "a"),
            out(2, "a"),
            out(0, "a"),
        ];
        let is_table = |sink: u16| sink != 0;
        let last = last_updates(&records, &is_table);
        assert_eq!(last, [false, false, true, true, true, false]);
        assert!(last_updates(&[], &is_table).is_empty());
    }
}
