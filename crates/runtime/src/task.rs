//! One task held by a stream thread: its stores with their changelog positions, its source
//! positions, and one step of work at a time (a restore chunk, a tail chunk, or a batch of
//! input), so a thread can interleave its tasks with heartbeats.
//!
//! At-least-once: a batch's changelog and sink writes are acknowledged before the store applies
//! them and before the positions it advanced can be committed.
//! Each thread passes its own `Client` (its own broker connections), so one thread's fetch
//! never waits behind another's. The store's checkpoint is the
//! changelog offset after the batch, written with the data.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton_assignor::TaskId;
use baton_kafka::records::{FetchWant, Fetched, KeyValue};
use baton_kafka::Client;
use bytes::Bytes;

use crate::catchup::{next_position, Catchup};
use crate::context::Context;
use crate::error::{kafka, Result};
use crate::partitioner::partition_for;
use crate::status::{Phase, Role, TaskStatus};
use crate::store::{StoreError, TaskStore, Write};
use crate::topology::Stores;

/// Most input bytes one processing batch fetches per partition.
const INPUT_FETCH_BYTES: i32 = 1 << 20;
/// How often restore progress is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// The file in a task directory that says when the task was last held.
pub const LAST_USED_FILE: &str = "last-used";

struct StoreSlot {
    name: String,
    changelog: String,
    store: TaskStore,
    /// Where the store stands in its changelog.
    catchup: Catchup,
    /// The changelog's end as last seen.
    end: i64,
}

struct SourceSlot {
    topic: String,
    position: i64,
}

struct Restore {
    started: Instant,
    from_sum: i64,
    records: u64,
    last_log: Instant,
}

/// What a thread's fetch returned, by (topic, partition).
pub type Fetches = BTreeMap<(String, i32), Fetched>;

/// What one step achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    pub records: u64,
    /// A warm-up came within `acceptable.recovery.lag` for the first time since the last
    /// subscription: a follow-up rebalance should start now.
    pub caught_up: bool,
}

pub struct Task {
    pub id: TaskId,
    pub role: Role,
    pub phase: Phase,
    stores: Vec<StoreSlot>,
    sources: Vec<SourceSlot>,
    restore: Option<Restore>,
    /// The last subscription reported this task within the acceptable lag.
    pub reported_caught_up: bool,
    /// Positions advanced since the last commit.
    dirty: bool,
}

impl Task {
    /// Opens the task's stores. `StoreError::Busy` means another thread of this process still
    /// holds them; try again shortly.
    pub fn open(ctx: &Context, id: TaskId, role: Role) -> std::result::Result<Task, StoreError> {
        let mut stores = Vec::new();
        for name in ctx.topology.stores_of(id.subtopology) {
            let store = TaskStore::open(&ctx.cfg.state_dir, id, name)?;
            let position = store.checkpoint()?.unwrap_or(0);
            stores.push(StoreSlot {
                name: name.to_owned(),
                changelog: ctx.topology.changelog_topic(name),
                store,
                catchup: Catchup::new(position),
                end: position,
            });
        }
        if !stores.is_empty() {
            touch_last_used(&ctx.cfg.state_dir, id);
        }
        let sources = ctx
            .topology
            .sources_of(id.subtopology)
            .iter()
            .map(|t| SourceSlot {
                topic: t.clone(),
                position: -1,
            })
            .collect();
        let mut task = Task {
            id,
            role,
            phase: Phase::Opening,
            stores,
            sources,
            restore: None,
            reported_caught_up: false,
            dirty: false,
        };
        task.enter(ctx, role);
        ctx.status.hold(
            id,
            TaskStatus {
                role,
                phase: task.phase,
                lag: 0,
                processed: 0,
                restored: 0,
            },
        );
        ctx.status.set_checkpoint(id, task.offset_sum());
        Ok(task)
    }

    /// Takes on `role`: an active restores first (only the tail if its state is warm), a
    /// standby or warm-up follows its changelog.
    pub fn enter(&mut self, ctx: &Context, role: Role) {
        let from = self.phase;
        self.role = role;
        self.phase = match role {
            Role::Active => Phase::Restoring,
            Role::Standby | Role::Warmup => Phase::Tailing,
        };
        {
            let now = Instant::now();
            self.restore = Some(Restore {
                started: now,
                from_sum: self.offset_sum(),
                records: 0,
                last_log: now,
            });
        }
        self.reported_caught_up = false;
        ctx.status.update(self.id, |s| {
            s.role = role;
            s.phase = self.phase;
        });
        tracing::info!(task = %self.id, role = role.as_str(), from = from.as_str(), to = self.phase.as_str(), "task state");
    }

    fn offset_sum(&self) -> i64 {
        self.stores.iter().map(|s| s.catchup.position()).sum()
    }

    /// Changelog records behind the last seen end.
    pub fn lag(&self) -> u64 {
        self.stores
            .iter()
            .map(|s| (s.end - s.catchup.position()).max(0) as u64)
            .sum()
    }

    /// The partitions this task reads next: its changelogs while restoring or tailing, its
    /// sources while running.
    pub fn wants(&self, ctx: &Context) -> Vec<FetchWant> {
        let partition = self.id.partition as i32;
        match self.phase {
            Phase::Opening => Vec::new(),
            Phase::Restoring | Phase::Tailing => self
                .stores
                .iter()
                .map(|s| FetchWant {
                    topic: s.changelog.clone(),
                    partition,
                    offset: s.catchup.fetch_from(),
                    max_bytes: ctx.cfg.restore_fetch_bytes,
                })
                .collect(),
            Phase::Running => self
                .sources
                .iter()
                .map(|s| FetchWant {
                    topic: s.topic.clone(),
                    partition,
                    offset: s.position,
                    max_bytes: INPUT_FETCH_BYTES,
                })
                .collect(),
        }
    }

    /// One unit of work on what the thread fetched for [`Task::wants`]; takes its partitions
    /// out of `fetched`.
    pub async fn step(
        &mut self,
        ctx: &Context,
        io: &Client,
        fetched: &mut Fetches,
    ) -> Result<Progress> {
        match self.phase {
            Phase::Opening => Ok(Progress::default()),
            Phase::Restoring | Phase::Tailing => self.catch_up(ctx, io, fetched).await,
            Phase::Running => self.process(ctx, io, fetched).await,
        }
    }

    /// Applies one chunk of each store's changelog.
    async fn catch_up(
        &mut self,
        ctx: &Context,
        io: &Client,
        fetched: &mut Fetches,
    ) -> Result<Progress> {
        let mut records = 0u64;
        let partition = self.id.partition as i32;
        for slot in &mut self.stores {
            let Some(fetched) = fetched.remove(&(slot.changelog.clone(), partition)) else {
                continue;
            };
            if fetched.high_watermark < 0 {
                continue; // the broker left this partition out of its answer
            }
            slot.end = fetched.high_watermark;
            let absorbed = slot.catchup.absorb(&slot.store, fetched, slot.end)?;
            records += absorbed.applied;
            if absorbed.skipped > 0 {
                tracing::warn!(task = %self.id, changelog = %slot.changelog, records = absorbed.skipped, "skipped changelog records without a key");
            }
        }
        let lag = self.lag();
        ctx.status.update(self.id, |s| {
            s.lag = lag;
            s.restored += records;
        });
        ctx.status.set_checkpoint(self.id, self.offset_sum());
        let mut progress = Progress {
            records,
            caught_up: false,
        };
        match self.phase {
            Phase::Restoring => {
                if let Some(r) = &mut self.restore {
                    r.records += records;
                    if lag > 0 && r.last_log.elapsed() >= PROGRESS_EVERY {
                        r.last_log = Instant::now();
                        tracing::info!(task = %self.id, restored = r.records, remaining = lag, "restoring");
                    }
                }
                if lag == 0 {
                    self.finish_restore(ctx, io).await?;
                }
            }
            Phase::Tailing => {
                let within = lag <= ctx.cfg.assignment.acceptable_recovery_lag;
                if let Some(r) = &mut self.restore {
                    r.records += records;
                    if !within && r.last_log.elapsed() >= PROGRESS_EVERY {
                        r.last_log = Instant::now();
                        tracing::info!(task = %self.id, role = self.role.as_str(), restored = r.records, remaining = lag, "catching up");
                    }
                }
                if self.role == Role::Warmup && within && !self.reported_caught_up {
                    tracing::info!(task = %self.id, lag, "warm-up caught up: asking for a follow-up rebalance");
                    self.reported_caught_up = true;
                    progress.caught_up = true;
                }
            }
            _ => {}
        }
        Ok(progress)
    }

    async fn finish_restore(&mut self, ctx: &Context, io: &Client) -> Result<()> {
        for slot in &self.stores {
            slot.store.persist(true)?;
        }
        if let Some(r) = self.restore.take() {
            let changelog: i64 = self.stores.iter().map(|s| s.end).sum();
            let secs = r.started.elapsed().as_secs_f64();
            tracing::info!(
                task = %self.id,
                records = r.records,
                changelog_records = changelog,
                from_offset_sum = r.from_sum,
                seconds = format!("{secs:.3}"),
                records_per_sec = format!("{:.0}", r.records as f64 / secs.max(1e-9)),
                "restore done"
            );
        }
        let partition = self.id.partition as i32;
        let wanted: Vec<(String, i32)> = self
            .sources
            .iter()
            .map(|s| (s.topic.clone(), partition))
            .collect();
        let committed = io
            .committed_offsets(ctx.group(), &wanted)
            .await
            .map_err(kafka(format!("committed offsets of task {}", self.id)))?;
        for s in &mut self.sources {
            // No commit yet: start at the beginning (`auto.offset.reset=earliest`).
            s.position = committed
                .get(&(s.topic.clone(), partition))
                .copied()
                .unwrap_or(-1)
                .max(0);
        }
        self.phase = Phase::Running;
        ctx.status.update(self.id, |s| s.phase = Phase::Running);
        tracing::info!(task = %self.id, role = "active", from = "restoring", to = "running", "task state");
        Ok(())
    }

    /// Processes one batch of input.
    async fn process(
        &mut self,
        ctx: &Context,
        io: &Client,
        fetched: &mut Fetches,
    ) -> Result<Progress> {
        let partition = self.id.partition as i32;
        let mut pending = Pending {
            stores: &self.stores,
            writes: BTreeMap::new(),
        };
        let mut out: Vec<(Bytes, Bytes)> = Vec::new();
        let mut advanced: Vec<(usize, i64)> = Vec::new();
        let mut records = 0u64;
        for (i, source) in self.sources.iter().enumerate() {
            let Some(fetched) = fetched.remove(&(source.topic.clone(), partition)) else {
                continue;
            };
            let next = next_position(&fetched, source.position, i64::MAX);
            if next <= source.position {
                continue;
            }
            advanced.push((i, next));
            for r in &fetched.records {
                records += 1;
                let (Some(k), Some(v)) = (&r.key, &r.value) else {
                    continue; // a keyed step cannot place a record without key or value
                };
                ctx.topology
                    .process(self.id, k.clone(), v.clone(), &mut pending, &mut out)?;
            }
        }
        if advanced.is_empty() {
            return Ok(Progress::default());
        }
        // Changelog first, then sink; the store takes the batch only once both are
        // acknowledged. A write that fails leaves the store as it was, so the retried batch
        // computes the same values again instead of counting twice.
        let mut applied: Vec<(usize, Vec<Write>, i64)> = Vec::new();
        for (idx, batch) in pending.writes {
            let slot = &self.stores[idx];
            let wire: Vec<KeyValue> = batch
                .iter()
                .map(|(k, v)| (Some(Bytes::from(k.clone())), Some(Bytes::from(v.clone()))))
                .collect();
            let what = format!("changelog {}-{partition}", slot.changelog);
            let leader = ctx
                .leader(&slot.changelog, partition)
                .await
                .map_err(kafka(what.clone()))?;
            let base = io
                .produce(&leader, &slot.changelog, partition, &wire)
                .await
                .map_err(|e| {
                    ctx.forget_leader(&slot.changelog, partition);
                    kafka(what)(e)
                })?;
            let next = base + wire.len() as i64;
            let writes = batch.into_iter().map(|(k, v)| (k, Some(v))).collect();
            applied.push((idx, writes, next));
        }
        if let Some(sink) = ctx.topology.sink_of(self.id.subtopology) {
            let partitions = ctx.sink_partitions.get(sink).copied().unwrap_or(1);
            let mut by_partition: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
            for (k, v) in out {
                let p = partition_for(&k, partitions) as i32;
                by_partition.entry(p).or_default().push((Some(k), Some(v)));
            }
            for (p, batch) in by_partition {
                let what = format!("sink {sink}-{p}");
                let leader = ctx.leader(sink, p).await.map_err(kafka(what.clone()))?;
                io.produce(&leader, sink, p, &batch).await.map_err(|e| {
                    ctx.forget_leader(sink, p);
                    kafka(what)(e)
                })?;
            }
        }
        for (idx, writes, next) in applied {
            let slot = &mut self.stores[idx];
            slot.store.apply_lazily(&writes, Some(next))?;
            slot.catchup.advance_to(next);
            slot.end = next;
        }
        // Only now, with changelog and sink acknowledged, may the positions be committed.
        for (i, next) in advanced {
            self.sources[i].position = next;
        }
        self.dirty = true;
        ctx.status.add_processed(self.id, records);
        ctx.status.set_checkpoint(self.id, self.offset_sum());
        Ok(Progress {
            records,
            caught_up: false,
        })
    }

    /// The input positions to commit, if any advanced since the last commit.
    pub fn pending_commit(&self) -> Vec<(String, i32, i64)> {
        if !self.dirty || self.phase != Phase::Running {
            return Vec::new();
        }
        self.sources
            .iter()
            .map(|s| (s.topic.clone(), self.id.partition as i32, s.position))
            .collect()
    }

    /// The positions [`Task::pending_commit`] gave are committed.
    pub fn mark_committed(&mut self) {
        self.dirty = false;
    }

    /// Makes the stores' batches survive a crash of this process.
    pub fn flush(&self) -> Result<()> {
        for s in &self.stores {
            s.store.persist(false)?;
        }
        Ok(())
    }

    /// Lets the task go; its state stays on disk for a later return.
    pub fn close(self, ctx: &Context) {
        for s in &self.stores {
            if let Err(e) = s.store.persist(true) {
                tracing::warn!(task = %self.id, store = %s.name, error = %e, "persisting a released store");
            }
        }
        if !self.stores.is_empty() {
            touch_last_used(&ctx.cfg.state_dir, self.id);
        }
        ctx.status.release(self.id);
        tracing::info!(task = %self.id, role = self.role.as_str(), from = self.phase.as_str(), to = "released", "task state");
    }
}

/// A processing batch's store writes, read back by later records of the same batch.
struct Pending<'a> {
    stores: &'a [StoreSlot],
    writes: BTreeMap<usize, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Stores for Pending<'_> {
    fn get(&mut self, store: &str, key: &[u8]) -> std::result::Result<Option<Vec<u8>>, StoreError> {
        let Some(idx) = self.stores.iter().position(|s| s.name == store) else {
            return Ok(None);
        };
        if let Some(v) = self.writes.get(&idx).and_then(|w| w.get(key)) {
            return Ok(Some(v.clone()));
        }
        self.stores[idx].store.get(key)
    }

    fn put(&mut self, store: &str, key: &[u8], value: Vec<u8>) {
        if let Some(idx) = self.stores.iter().position(|s| s.name == store) {
            self.writes
                .entry(idx)
                .or_default()
                .insert(key.to_vec(), value);
        }
    }
}

fn touch_last_used(state_dir: &Path, task: TaskId) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let path = state_dir.join(task.to_string()).join(LAST_USED_FILE);
    if let Err(e) = std::fs::write(&path, now.to_string()) {
        tracing::warn!(path = %path.display(), error = %e, "cannot record when a task was last used");
    }
}
