//! A stream thread: the async driver of one [`ThreadMachine`]. It performs the machine's
//! commands (fetch, process, absorb, open, close, commit, join, leave) and turns their outcomes
//! into events. Decisions live in the machine; this module only does I/O: reading in `fetch.rs`,
//! topics that went away in `topics.rs`, the rest here.
//!
//! Heartbeats and join rounds run on the thread's membership task ([`crate::membership`]), so
//! they never wait behind data work, and tasks go on being processed during a rebalance. A
//! fetch runs on a task of its own while the store applies the previous one. Store work
//! (bulk loads, fsync) runs with `block_in_place`, off the executor's other tasks.

mod batches;
mod caching;
mod fetch;
mod records;
mod topics;
mod writes;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_assignor::TaskId;
use baton_kafka::offsets::Committed;
use baton_kafka::records::{FetchWant as WireWant, Fetched, KeyValue, Record};
use baton_kafka::{Backoff, Client, GroupMember, MemberConfig};
use baton_protocol::TopicPartition;
use bytes::Bytes;
use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::catchup::{next_position, Catchup};
use crate::context::Context;
use crate::error::Result;
use crate::heal::{open_stores, OpenError, OpenedStore, StoreFailures};
use crate::layout::{to_changelog, Layout};
use crate::machine::{
    CacheLoss, Command, Event, FetchResult, FetchWant, Input, MachineConfig, OversizedAnswer,
    OversizedWrite, RequestId, StoreFault, ThreadMachine,
};
use crate::membership::{MembershipTask, Request};
use crate::partitioner::partition_for;
use crate::record::SkipLog;
use crate::reseed;
use crate::status::{Phase, Role, TaskStatus};
use crate::store::{TaskStore, Write};
use crate::stream_time;
use crate::topology::{ChangelogHeaders, Emitted};
use crate::unreadable;
use fetch::restore_chunk;
use records::StoreWrites;
use topics::ChangelogCheck;
use writes::{Allowed, BatchWrites, Produced, Writer};

pub use crate::machine::Exit;

/// How long the broker may hold a fetch while none of its partitions has data. A fetch with
/// data returns at once. (A very short wait is no good: nisshi then answers with whatever it
/// has read so far, often nothing; docs/BROKERS.md.)
const FETCH_WAIT_MS: i32 = 100;
/// Timers (commit, probe, retries, the session check) are looked at this often when idle.
const TICK: Duration = Duration::from_millis(50);
/// Most input bytes one processing batch fetches per partition.
const INPUT_FETCH_BYTES: i32 = 1 << 20;
/// How often stores taking a bulk load are looked at, to tell the machine when one ended.
const BUSY_WAIT: Duration = Duration::from_millis(20);
/// How often restore progress is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// How long a leave may take before the thread exits anyway.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(5);
/// A drained member's pause between its last round and its LeaveGroup: the other members'
/// SyncGroups of that round (which hand them its tasks) reach the coordinator first. Left at
/// once, the leave starts another round that refuses them, and the tasks wait for every
/// member's next heartbeat (3 s under Kafka's defaults: seen as a 3.04 s gap in
/// runtime_rebalance.rs).
const DRAINED_LEAVE_PAUSE: Duration = Duration::from_millis(300);
/// Produce connections per stream thread.
const PRODUCERS: usize = 3;
/// How much of a store one produce of a re-seed carries.
const RESEED_PAGE_BYTES: usize = 1 << 20;

/// One store of a held task: the store and where it stands in its changelog.
struct StoreIo {
    name: String,
    store: TaskStore,
    catchup: Catchup,
}

/// A held task's I/O side.
struct TaskIo {
    stores: Vec<StoreIo>,
    restore_started: Instant,
    restored: u64,
    last_log: Instant,
}

type FetchOutcome = (
    RequestId,
    Vec<(FetchWant, std::result::Result<Fetched, Miss>)>,
);

/// Why a partition of a fetch came back without records.
enum Miss {
    /// Any failure a later fetch may not have (no leader, a dropped connection).
    Failed,
    /// The offset is past the partition's end: for a changelog, the store is from another
    /// life of the topic (deleted and recreated; the broker lost its data).
    OutOfRange,
    /// The topic the fetch asked for by id is gone, and one of the same name has this id.
    MadeAgain(uuid::Uuid),
}

pub struct StreamThread {
    ctx: Arc<Context>,
    name: String,
    /// This thread's own connections for fetches and the rest of its data requests.
    io: Arc<Client>,
    /// Its connections for produce: a batch's writes never wait behind a fetch, which the
    /// broker may hold until data comes, and the next fetch is sent while a batch runs.
    /// Several, so that batches of different tasks are written side by side.
    producers: Vec<Arc<Client>>,
    member: Option<GroupMember>,
}

impl StreamThread {
    pub fn new(ctx: Arc<Context>, index: u32) -> StreamThread {
        let cfg = &ctx.cfg;
        let name = format!("{}-{index}", cfg.instance_id);
        let bootstrap: Vec<&str> = cfg.bootstrap.iter().map(String::as_str).collect();
        let io = Client::new(&bootstrap, &name);
        io.set_request_timeout(cfg.request_timeout());
        let producers = (0..PRODUCERS)
            .map(|i| {
                let io = Client::new(&bootstrap, &format!("{name}-producer-{i}"));
                io.set_request_timeout(cfg.request_timeout());
                io
            })
            .collect();
        // Membership traffic on connections of its own: a heartbeat never waits behind a fetch.
        let membership_client = Client::new(&bootstrap, &format!("{name}-member"));
        membership_client.set_request_timeout(cfg.request_timeout());
        let mut member = GroupMember::new(
            membership_client,
            MemberConfig {
                group_id: ctx.group().to_owned(),
                client_id: name.clone(),
                group_instance_id: cfg.static_membership.then(|| name.clone()),
                session_timeout_ms: cfg.session_timeout.as_millis() as i32,
                rebalance_timeout_ms: cfg.rebalance_timeout().as_millis() as i32,
                process_id: ctx.process_id,
                user_endpoint: cfg.user_endpoint.clone(),
                topology: ctx.wire.clone(),
                assignor: cfg.assignor,
                assignment_config: cfg.assignment.clone(),
                metadata_limit: baton_protocol::sizing::GROUP_METADATA_LIMIT,
                rack: cfg.rack.clone(),
                client_tags: cfg
                    .client_tags
                    .iter()
                    .map(|(key, value)| baton_protocol::ClientTag {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
            },
        );
        member.limit_version(cfg.max_protocol_version);
        StreamThread {
            ctx,
            name,
            io,
            producers,
            member: Some(member),
        }
    }

    pub async fn run(mut self, shutdown: watch::Receiver<bool>) -> Result<Exit> {
        let epoch = Instant::now();
        let cfg = &self.ctx.cfg;
        let mut machine = ThreadMachine::new(
            MachineConfig {
                session_timeout: cfg.session_timeout,
                write_timeout: cfg.request_timeout(),
                commit_interval: cfg.commit_interval,
                acceptable_recovery_lag: cfg.assignment.acceptable_recovery_lag,
                restore_fetch_bytes: cfg.restore_fetch_bytes,
                restore_fetch_bytes_beside_actives: cfg.restore_fetch_bytes_beside_actives,
                input_fetch_bytes: INPUT_FETCH_BYTES,
                static_membership: cfg.static_membership,
                retry_backoff: Backoff {
                    first: Duration::from_millis(200),
                    max: Duration::from_secs(10),
                    attempts: u32::MAX,
                },
                rejoin_mode: cfg.assignment.rejoin_mode,
                auto_offset_reset: cfg.auto_offset_reset,
                failed_task_retry: cfg.task_retry,
                on_oversized_record: cfg.on_oversized_record,
                fetch_beside_batches: true,
                wall_clock: self
                    .ctx
                    .wire
                    .subtopologies
                    .keys()
                    .filter_map(|&sub| Some((sub, self.ctx.topology.wall_clock_every(sub)?)))
                    .collect(),
            },
            self.ctx.wire.clone(),
            epoch.elapsed(),
        );
        let (events_tx, events) = mpsc::unbounded_channel();
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let (report_tx, report_rx) = watch::channel(machine.report());
        let membership = tokio::spawn(
            MembershipTask {
                ctx: self.ctx.clone(),
                name: self.name.clone(),
                member: self.member.take().expect("run once"),
                epoch,
                requests: requests_rx,
                report: report_rx,
                events: events_tx,
                latest: None,
            }
            .run(),
        );
        let mut driver = Driver {
            ctx: self.ctx.clone(),
            name: self.name.clone(),
            io: self.io.clone(),
            epoch,
            in_flight: Vec::new(),
            producers: self.producers.clone(),
            tasks: BTreeMap::new(),
            caches: BTreeMap::new(),
            flushed_at: Instant::now(),
            flushes_seen: 0,
            stream_times: BTreeMap::new(),
            buffers: BTreeMap::new(),
            rebuild: BTreeMap::new(),
            topic_ids: self.ctx.topic_ids(),
            store_failures: StoreFailures::default(),
            skip_log: SkipLog::default(),
            batch_threads: batch_threads(&self.ctx.cfg),
            fetch: None,
            changelog_check: ChangelogCheck::default(),
            requests,
            report: report_tx,
            events,
            shutdown,
            local: VecDeque::new(),
        };
        let exit = driver.drive(&mut machine).await;
        drop(driver);
        membership.abort();
        Ok(exit)
    }
}

struct Driver {
    ctx: Arc<Context>,
    name: String,
    io: Arc<Client>,
    epoch: Instant,
    /// Batches whose writes run beside the thread, in the order they were handed over.
    in_flight: Vec<InFlight>,
    /// The thread's produce connections: each task's batches go through one of them (in
    /// order: a task has one batch at a time), and different tasks' side by side.
    producers: Vec<Arc<Client>>,
    tasks: BTreeMap<TaskId, TaskIo>,
    /// Each running task's record cache, from its first batch ([`crate::cache`]).
    caches: BTreeMap<TaskId, crate::cache::TaskCache>,
    /// When the caches were last flushed, and the queries' flush requests seen then
    /// ([`Driver::flush_due`]).
    flushed_at: Instant,
    flushes_seen: u64,
    /// Each task's stream time (the largest record timestamp it has processed, or read from
    /// the committed offsets' metadata), committed beside its offsets.
    stream_times: BTreeMap<TaskId, i64>,
    /// What the last fetch brought, until the machine says what to do with it.
    buffers: BTreeMap<TopicPartition, Fetched>,
    /// Tasks whose stores cannot be trusted (and why): set aside at the next open.
    rebuild: BTreeMap<TaskId, String>,
    /// The id of each topic this thread reads, for the positions its tasks hold in it: a
    /// fetch by id fails once the topic was deleted, even if one of the same name was made.
    topic_ids: BTreeMap<String, uuid::Uuid>,
    store_failures: StoreFailures,
    /// Records skipped after the application failed on them, for rate-limited logging.
    skip_log: SkipLog,
    /// How many tasks' batches may run at once ([`Driver::process_many`]).
    batch_threads: usize,
    fetch: Option<(RequestId, JoinHandle<FetchOutcome>)>,
    /// The broker's word on the running actives' changelogs ([`Driver::watch_changelogs`]).
    changelog_check: ChangelogCheck,
    requests: mpsc::UnboundedSender<Request>,
    report: watch::Sender<crate::machine::Report>,
    events: mpsc::UnboundedReceiver<Event>,
    shutdown: watch::Receiver<bool>,
    /// Outcomes of commands, handled before anything else.
    local: VecDeque<Event>,
}

impl Driver {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// The thread's writing side on produce connection `lane` (of [`PRODUCERS`], cycled).
    fn writer(&self, lane: usize) -> Writer {
        Writer {
            ctx: self.ctx.clone(),
            io: self.producers[lane % self.producers.len()].clone(),
            epoch: self.epoch,
        }
    }

    async fn drive(&mut self, m: &mut ThreadMachine) -> Exit {
        let mut commands: VecDeque<Command> = m.start().into();
        let mut shutting_down = false;
        let mut drain_told = false;
        // Retries asked for before this thread started are about an earlier life.
        let mut retries_told = self.ctx.retry_requests();
        loop {
            self.start_fetches(&mut commands);
            loop {
                while let Some(c) = commands.pop_front() {
                    // Batches run beside each other's writes; anything else waits for them
                    // and is decided knowing how they ended.
                    if !runs_beside_writes(&c) && !self.in_flight.is_empty() {
                        self.settle_writes().await;
                        while let Some(e) = self.local.pop_front() {
                            commands.extend(m.handle(e, self.now()));
                        }
                    }
                    match side_by_side(c, &mut commands) {
                        Ok(batches) => self.process_many(m, batches, self.batch_threads),
                        Err(c) => {
                            if let Some(exit) = self.execute(m, c).await {
                                return exit;
                            }
                        }
                    }
                    // Outcomes first, in order; then anything that arrived meanwhile.
                    while let Some(e) = self.local.pop_front() {
                        commands.extend(m.handle(e, self.now()));
                    }
                    self.start_fetches(&mut commands);
                }
                if self.in_flight.is_empty() {
                    if !self.caches_full() && !self.flush_due() {
                        break;
                    }
                    self.flush_caches(m).await;
                    while let Some(e) = self.local.pop_front() {
                        commands.extend(m.handle(e, self.now()));
                    }
                    continue;
                }
                self.settle_writes().await;
                while let Some(e) = self.local.pop_front() {
                    commands.extend(m.handle(e, self.now()));
                }
                self.start_fetches(&mut commands);
            }
            self.sync_status(m);
            self.watch_changelogs(m).await;
            self.buffers.clear();
            for e in self.loads_ended(m) {
                commands.extend(m.handle(e, self.now()));
            }
            while let Ok(e) = self.events.try_recv() {
                commands.extend(m.handle(e, self.now()));
            }
            if !shutting_down && *self.shutdown.borrow() {
                shutting_down = true;
                commands.extend(m.handle(Event::Shutdown, self.now()));
            }
            let retries = self.ctx.retry_requests();
            if retries != retries_told {
                retries_told = retries;
                commands.extend(m.handle(Event::RetryFailed, self.now()));
            }
            if drain_told != self.ctx.is_leaving() {
                drain_told = !drain_told;
                let event = if drain_told {
                    Event::DrainRequested
                } else {
                    Event::DrainCancelled
                };
                commands.extend(m.handle(event, self.now()));
            }
            if !commands.is_empty() {
                continue;
            }
            let any_loading = fetch::loading(m).next().is_some();
            let event = tokio::select! {
                outcome = async { (&mut self.fetch.as_mut().expect("guarded").1).await }, if self.fetch.is_some() => {
                    let (fetch, _) = self.fetch.take().expect("guarded");
                    match outcome {
                        Ok((_, results)) => self.fetched(fetch, results),
                        Err(_) => Event::FetchFailed { fetch },
                    }
                }
                e = self.events.recv() => e.unwrap_or(Event::Shutdown),
                _ = self.shutdown.changed(), if !shutting_down => Event::Tick,
                _ = tokio::time::sleep(BUSY_WAIT), if any_loading => Event::Tick,
                _ = tokio::time::sleep(TICK) => Event::Tick,
            };
            // What reading a fetch's answer found (a partition past its end, a batch no one
            // can read) goes first: handled after the answer, it would come too late to keep
            // the partition out of the next fetch, which would find the same again.
            while let Some(e) = self.local.pop_front() {
                commands.extend(m.handle(e, self.now()));
            }
            commands.extend(m.handle(event, self.now()));
        }
    }

    /// Performs one command; its outcome goes to `self.local`. `Some` ends the thread.
    async fn execute(&mut self, m: &ThreadMachine, c: Command) -> Option<Exit> {
        match c {
            Command::Join { reason, report } => {
                self.report.send_replace(report);
                self.sync_status(m);
                let _ = self.requests.send(Request::Join(reason));
            }
            Command::Leave => {
                if self.ctx.is_leaving() {
                    tokio::time::sleep(DRAINED_LEAVE_PAUSE).await;
                }
                let (done, wait) = oneshot::channel();
                if self.requests.send(Request::Leave(done)).is_ok() {
                    let _ = tokio::time::timeout(LEAVE_TIMEOUT, wait).await;
                }
            }
            Command::Exit(exit) => {
                if exit == Exit::Drained {
                    tracing::info!(thread = %self.name, "drained: holding nothing, left the group");
                }
                return Some(exit);
            }
            Command::Open { task, role } => self.open_task(task, role).await,
            Command::Close { task } => {
                self.drop_cache(task, CacheLoss::Closed);
                self.caches.remove(&task);
                self.close(task)
            }
            Command::Discard { task, why } => {
                tracing::warn!(thread = %self.name, task = %task, why = %why, "the task's stores cannot be trusted; rebuilding them from the changelog");
                self.rebuild.insert(task, why);
            }
            Command::Fetch { fetch, wants } => self.start_fetch(fetch, wants),
            Command::Reseed {
                task,
                request,
                changelogs,
            } => self.run_reseed(m, task, request, &changelogs).await,
            Command::Absorb {
                task,
                changelog,
                end,
            } => {
                // A copy reads its changelog into the store: a cache left from its time as an
                // active (never flushed: a revocation whose commit did not go) would hide it.
                self.drop_cache(task, CacheLoss::Closed);
                let e = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    self.absorb(task, changelog, end)
                }))
                .unwrap_or_else(|p| self.store_panicked(task, "restoring into its stores", &*p));
                self.local.push_back(e);
            }
            Command::Process {
                task,
                batch,
                inputs,
            } => self.run_batch(m, task, batch, &inputs, false),
            Command::Punctuate { task, batch } => self.run_batch(m, task, batch, &[], true),
            Command::Persist { task } => self.persist(task),
            Command::ListEnds {
                task,
                request,
                changelogs,
            } => self.list_ends(task, request, &changelogs).await,
            Command::ListSourceOffsets {
                task,
                source,
                offset,
            } => self.list_source_offsets(task, source, offset).await,
            Command::SourceReset {
                task,
                source,
                from,
                to,
                made_again,
            } => self.log_source_reset(task, source, from, to, made_again),
            Command::ReadCommitted { task } => self.read_committed(task).await,
            Command::Commit {
                commit,
                generation,
                member_id,
                offsets,
            } => {
                // A commit says the input before its offsets is in the changelogs and sinks:
                // the caches go there first, and a cache dropped fails the commit.
                if self.flush_caches(m).await {
                    self.commit(commit, generation, &member_id, offsets).await
                } else {
                    self.local
                        .push_back(Event::CommitDone { commit, ok: false });
                }
            }
        }
        None
    }

    /// Opens a task's stores, then settles any whose checkpoint counts in an older topic of
    /// its changelog's name.
    async fn open_task(&mut self, task: TaskId, role: Role) {
        let (e, older) = std::panic::catch_unwind(AssertUnwindSafe(|| self.open(task, role)))
            .unwrap_or_else(|p| {
                (
                    self.store_panicked(task, "opening its stores", &*p),
                    Vec::new(),
                )
            });
        self.local.push_back(e);
        if !older.is_empty() {
            self.checkpoints_of_older_changelogs(task, &older).await;
        }
    }

    async fn run_reseed(
        &mut self,
        m: &ThreadMachine,
        task: TaskId,
        request: RequestId,
        changelogs: &[usize],
    ) {
        let ran = AssertUnwindSafe(self.reseed(m, task, request, changelogs))
            .catch_unwind()
            .await;
        let e = ran.unwrap_or_else(|p| {
            self.store_panicked(task, "writing its stores into their changelogs", &*p)
        });
        self.local.push_back(e);
    }

    /// Runs a batch of input, or a wall-clock punctuation (`punctuate`: no input, at the
    /// time now), and hands its writes over; a panic under way is its task's failure, not
    /// the thread's.
    fn run_batch(
        &mut self,
        m: &ThreadMachine,
        task: TaskId,
        batch: RequestId,
        inputs: &[Input],
        punctuate: bool,
    ) {
        let now_ms = punctuate.then(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64)
        });
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.process(m, task, batch, inputs, now_ms)
        }));
        let retry = self.ctx.cfg.task_retry;
        let doing = if punctuate {
            "punctuating"
        } else {
            "processing"
        };
        let e = ran.unwrap_or_else(|p| Some(batch_panicked(task, batch, doing, retry, &*p)));
        self.local.extend(e);
    }

    fn persist(&mut self, task: TaskId) {
        if let Some(t) = self.tasks.get(&task) {
            let result = blocking(|| t.stores.iter().try_for_each(|s| s.store.persist(true)));
            match result {
                // Durable: whatever failed before works again.
                Ok(()) => self.store_failures.recovered(task),
                Err(e) => self.local.push_back(Event::StoreFailed {
                    task,
                    fault: fault_of(&e),
                }),
            }
        }
    }

    async fn list_ends(&mut self, task: TaskId, request: RequestId, changelogs: &[TopicPartition]) {
        match self.io.end_offsets(changelogs).await {
            Ok(ends) => {
                if let Some(ends) = changelogs.iter().map(|tp| ends.get(tp).copied()).collect() {
                    self.local.push_back(Event::EndsListed {
                        task,
                        request,
                        ends,
                    });
                }
            }
            // The fetches find the ends too; this only saves their wait.
            Err(e) => tracing::debug!(task = %task, error = %e, "listing changelog ends"),
        }
    }

    /// Lists the start and end of a source partition whose position is not in it.
    async fn list_source_offsets(&mut self, task: TaskId, source: usize, offset: i64) {
        // No such source: nothing to list, and the thread goes on.
        let Some(tp) = self.ctx.wire.source_partitions(task).get(source).cloned() else {
            return;
        };
        let tps = [tp.clone()];
        let listed = match self.io.start_offsets(&tps).await {
            Ok(start) => self.io.end_offsets(&tps).await.map(|end| (start, end)),
            Err(e) => Err(e),
        };
        let event = match listed {
            Ok((start, end)) => match (start.get(&tp), end.get(&tp)) {
                (Some(&earliest), Some(&latest)) => Event::SourceOffsetsListed {
                    task,
                    source,
                    offset,
                    earliest,
                    latest,
                },
                _ => Event::SourceOffsetsListFailed { task, source },
            },
            Err(e) => {
                tracing::debug!(task = %task, partition = %tp, error = %e, "listing a source partition's offsets");
                Event::SourceOffsetsListFailed { task, source }
            }
        };
        self.local.push_back(event);
    }

    /// Reads a task's committed offsets (and the stream time committed with them).
    async fn read_committed(&mut self, task: TaskId) {
        let wanted = self.ctx.wire.source_partitions(task);
        let e = match self.io.committed(self.ctx.group(), &wanted).await {
            Ok(c) => {
                self.ctx
                    .recovered(|| format!("reading committed offsets of {task}"));
                // Processing starts again from these offsets, at the time committed
                // with them; a broker that keeps no offset metadata leaves the time
                // to be found in the task's window stores before its first batch.
                let committed_time = c
                    .values()
                    .map(|c| stream_time::decode(c.metadata.as_deref()))
                    .max()
                    .unwrap_or(stream_time::UNKNOWN);
                // Restored, the stores hold every committed input (changelogs are
                // written before offsets are committed).
                for (tp, committed) in &c {
                    self.ctx.copies.processed(task, tp, committed.offset);
                }
                if committed_time == stream_time::UNKNOWN {
                    self.stream_times.remove(&task);
                } else {
                    self.stream_times.insert(task, committed_time);
                }
                Event::CommittedRead {
                    task,
                    // The broker says "none" as -1.
                    offsets: wanted
                        .iter()
                        .map(|w| c.get(w).map(|c| c.offset).filter(|&o| o >= 0))
                        .collect(),
                }
            }
            Err(e) => {
                self.ctx
                    .failing(&format!("reading committed offsets of {task}"), &e);
                Event::CommittedReadFailed { task }
            }
        };
        self.local.push_back(e);
    }

    /// Commits input offsets, with each task's stream time as their metadata.
    async fn commit(
        &mut self,
        commit: RequestId,
        generation: i32,
        member_id: &str,
        offsets: Vec<(TopicPartition, i64)>,
    ) {
        // The stores' batches reach the OS first, so a crashed process restores only
        // the tail; correctness does not depend on it (the changelog has them).
        blocking(|| {
            for t in self.tasks.values() {
                for s in &t.stores {
                    if let Err(e) = s.store.persist(false) {
                        tracing::warn!(store = %s.name, error = %e, "flushing a store");
                    }
                }
            }
        });
        let time_of: BTreeMap<TopicPartition, i64> = self
            .stream_times
            .iter()
            .flat_map(|(&task, &time)| {
                self.ctx
                    .wire
                    .source_partitions(task)
                    .into_iter()
                    .map(move |tp| (tp, time))
            })
            .collect();
        let offsets: Vec<Committed> = offsets
            .into_iter()
            .map(|(tp, offset)| Committed {
                metadata: time_of.get(&tp).map(|&t| stream_time::encode(t)),
                partition: tp,
                offset,
            })
            .collect();
        // On a produce connection: every write is settled before a commit, so it is free,
        // while the fetch connection may be held by a fetch the broker keeps until data comes.
        let ok = match self.producers[0]
            .commit(self.ctx.group(), generation, member_id, &offsets)
            .await
        {
            Ok(()) => {
                self.ctx
                    .recovered(|| format!("commit of input offsets ({})", self.name));
                true
            }
            Err(e) => {
                self.ctx
                    .failing(&format!("commit of input offsets ({})", self.name), &e);
                false
            }
        };
        self.local.push_back(Event::CommitDone { commit, ok });
    }

    /// Opens `task`'s stores. With the event, the stores (index, id) whose checkpoint counts
    /// in another changelog topic than the one this thread knows by that name.
    fn open(&mut self, task: TaskId, role: Role) -> (Event, Vec<(usize, uuid::Uuid)>) {
        let ctx = self.ctx.clone();
        let ctx = &ctx;
        // Held before the stores open, so the state cleaner leaves them alone.
        if ctx.status.get(task).is_none() {
            ctx.status.hold(
                task,
                TaskStatus {
                    role,
                    phase: Phase::Opening,
                    lag: 0,
                    processed: 0,
                    restored: 0,
                },
            );
        }
        let names = ctx.topology.stores_of(task.subtopology);
        let rebuild = self.rebuild.remove(&task);
        let opened = blocking(|| {
            open_stores(
                &ctx.state_dir,
                ctx.group(),
                task,
                &names,
                rebuild.as_deref(),
                &mut self.store_failures,
            )
        });
        let older;
        let stores: Vec<StoreIo> = match opened {
            Ok(stores) => {
                older = match self.changelog_ids(task, &stores) {
                    Ok(o) => o,
                    Err(e) => {
                        let error = format!("recording the changelog's id: {e}");
                        let root = ctx.cfg.state_dir.clone();
                        self.store_failures.failed(
                            task,
                            "opening the task's stores",
                            &error,
                            &root,
                        );
                        return (Event::OpenFailed { task }, Vec::new());
                    }
                };
                stores
                    .into_iter()
                    .map(|s| StoreIo {
                        catchup: Catchup::new(s.checkpoint, ctx.topology.store_layout(&s.name)),
                        name: s.name,
                        store: s.store,
                    })
                    .collect()
            }
            Err(OpenError::Busy) => {
                if let Some(why) = rebuild {
                    self.rebuild.insert(task, why);
                }
                return (Event::OpenBusy { task }, Vec::new());
            }
            // Logged by the open, once per streak.
            Err(OpenError::Failed(_)) => {
                if let Some(why) = rebuild {
                    self.rebuild.insert(task, why);
                }
                return (Event::OpenFailed { task }, Vec::new());
            }
        };
        if !stores.is_empty() {
            ctx.state_dir.touch(task);
        }
        ctx.copies.track(task);
        for s in &stores {
            ctx.copies.register(task, &s.name, s.store.clone());
        }
        let checkpoints = stores.iter().map(|s| s.catchup.position()).collect();
        let now = Instant::now();
        self.tasks.insert(
            task,
            TaskIo {
                stores,
                restore_started: now,
                restored: 0,
                last_log: now,
            },
        );
        tracing::info!(thread = %self.name, task = %task, role = role.as_str(), "task opened");
        (Event::Opened { task, checkpoints }, older)
    }

    fn close(&mut self, task: TaskId) {
        if let Some(mut t) = self.tasks.remove(&task) {
            let errors: Vec<String> = blocking(|| {
                let mut errors = Vec::new();
                for s in &mut t.stores {
                    if let Err(e) = s.catchup.wait() {
                        errors.push(format!("store {}: a bulk load failed: {e}", s.name));
                    }
                    if let Err(e) = s.store.persist(true) {
                        errors.push(format!("store {}: persisting on release: {e}", s.name));
                    }
                }
                errors
            });
            let root = self.ctx.cfg.state_dir.clone();
            for e in errors {
                self.store_failures
                    .failed(task, "closing the task's stores", &e, &root);
            }
            if !t.stores.is_empty() {
                self.ctx.state_dir.touch(task);
            }
        }
        self.ctx.copies.release(task);
        self.ctx.status.release(task);
        tracing::info!(thread = %self.name, task = %task, "task released");
    }

    /// Says, once, where a task's position in a source went ([`Command::SourceReset`]).
    fn log_source_reset(
        &self,
        task: TaskId,
        source: usize,
        from: i64,
        to: Option<i64>,
        made_again: bool,
    ) {
        let tp = self.ctx.wire.source_partitions(task).get(source).cloned();
        let tp = tp.map_or_else(|| format!("source {source}"), |tp| tp.to_string());
        let reset = self.ctx.cfg.auto_offset_reset.name();
        let why = match made_again {
            true => format!(
                "the input topic was deleted and made again (its id changed): position {from} \
                 was in the old one"
            ),
            false => format!(
                "the input partition has no offset {from} (the topic was deleted and made \
                 again, or its records were deleted)"
            ),
        };
        match to {
            Some(to) => tracing::warn!(
                task = %task,
                partition = %tp,
                position = from,
                now_from = to,
                "{why}: reading it from offset {to} (auto.offset.reset={reset})"
            ),
            None => tracing::error!(
                task = %task,
                partition = %tp,
                position = from,
                "{why}; stopping this task (auto.offset.reset=none): it holds its partitions and processes nothing until it moves or the instance restarts"
            ),
        }
    }

    /// A panic in the runtime's own code while it opened or restored one task's stores: that
    /// task's store failure (reopened later, with a growing backoff), not its thread's.
    fn store_panicked(
        &mut self,
        task: TaskId,
        doing: &str,
        payload: &(dyn std::any::Any + Send),
    ) -> Event {
        let error = format!(
            "a panic while {doing}: {}",
            crate::record::panic_message(payload)
        );
        let root = self.ctx.cfg.state_dir.clone();
        self.store_failures.failed(task, doing, &error, &root);
        Event::StoreFailed {
            task,
            fault: StoreFault::Failed,
        }
    }

    /// Hands what was fetched of a changelog to its store.
    fn absorb(&mut self, task: TaskId, changelog: usize, end: i64) -> Event {
        let tp = match self
            .ctx
            .wire
            .changelog_partitions(task)
            .into_iter()
            .nth(changelog)
        {
            Some(tp) => tp,
            None => return Event::Tick,
        };
        let (Some(t), Some(fetched)) = (self.tasks.get_mut(&task), self.buffers.remove(&tp)) else {
            return Event::Tick;
        };
        let Some(s) = t.stores.get_mut(changelog) else {
            return Event::Tick;
        };
        let result = blocking(|| s.catchup.absorb(&s.store, fetched, end));
        match result {
            Ok(a) => {
                if a.skipped > 0 {
                    tracing::warn!(task = %task, changelog = %tp.topic, records = a.skipped, "skipped changelog records without a key");
                }
                t.restored += a.applied;
                self.ctx.status.update(task, |st| st.restored += a.applied);
                let lag = (end - s.catchup.position()).max(0);
                if lag > 0 && t.last_log.elapsed() >= PROGRESS_EVERY {
                    t.last_log = Instant::now();
                    tracing::info!(task = %task, restored = t.restored, remaining = lag, "catching up");
                }
                let loading = s.catchup.busy(restore_chunk(&self.ctx));
                Event::Absorbed {
                    task,
                    changelog,
                    stored: s.catchup.position(),
                    loading,
                }
            }
            Err(e) => {
                let root = self.ctx.cfg.state_dir.clone();
                self.store_failures
                    .failed(task, "restoring into the store", &e.to_string(), &root);
                Event::StoreFailed {
                    task,
                    fault: fault_of(&e),
                }
            }
        }
    }

    /// Hands a batch's writes over to run beside the thread ([`Writer::write_batch`]);
    /// [`Driver::written`] applies them to the stores once acknowledged. `Some`: the batch
    /// ended here.
    fn hand_over(
        &mut self,
        m: &ThreadMachine,
        task: TaskId,
        batch: RequestId,
        inputs: &[Input],
        mut done: Done,
    ) -> Option<Event> {
        if !self.tasks.contains_key(&task) {
            return Some(Event::BatchFailed {
                task,
                batch,
                output_acknowledged: false,
            });
        }
        let logs = self.logs_of(task);
        let cached = done.cached.take();
        let after = AfterWrites {
            cached,
            inputs: inputs.to_vec(),
            sources: done.sources.clone(),
            records: done.records,
            late: done.out.late,
            stream_time: done.stream_time,
        };
        let writes = BatchWrites {
            writes: done.writes,
            tables: done.tables,
            outputs: done.out.records,
            origins: done.origins,
            dead_letters: done.dead_letters,
            sources: done.sources,
            inputs: inputs.to_vec(),
            logs,
        };
        let lane = (task.subtopology as usize).wrapping_add(task.partition as usize);
        let writer = self.writer(lane);
        let written = tokio::spawn(writer.write_batch(Allowed::by(m), task, batch, writes));
        self.in_flight.push(InFlight {
            task,
            batch,
            written,
            after,
        });
        None
    }

    /// Each store's changelog layout and the headers its records with a value carry.
    fn logs_of(&self, task: TaskId) -> Vec<(Layout, ChangelogHeaders)> {
        let Some(t) = self.tasks.get(&task) else {
            return Vec::new();
        };
        t.stores
            .iter()
            .map(|s| {
                let headers = self.ctx.topology.changelog_headers(&s.name);
                (s.catchup.layout(), headers)
            })
            .collect()
    }

    /// Waits for every batch's writes, in the order handed over; each outcome goes to
    /// `self.local`.
    async fn settle_writes(&mut self) {
        for flight in std::mem::take(&mut self.in_flight) {
            let e = match flight.written.await {
                Ok(Ok(applied)) => self.written(flight.task, flight.batch, applied, flight.after),
                Ok(Err(stop)) => stop,
                Err(join) => {
                    let retry = self.ctx.cfg.task_retry;
                    match join.try_into_panic() {
                        Ok(p) => batch_panicked(flight.task, flight.batch, "writing", retry, &*p),
                        // Never aborted: a runtime shutting down.
                        Err(_) => Event::BatchFailed {
                            task: flight.task,
                            batch: flight.batch,
                            output_acknowledged: false,
                        },
                    }
                }
            };
            self.local.push_back(e);
        }
    }

    /// A batch whose writes are acknowledged: the stores take them, then the batch is done.
    fn written(
        &mut self,
        task: TaskId,
        batch: RequestId,
        applied: Vec<(usize, Vec<Write>, i64)>,
        mut after: AfterWrites,
    ) -> Event {
        let Some(next_by_changelog) = self.apply_batch(task, applied) else {
            return Event::BatchFailed {
                task,
                batch,
                output_acknowledged: true,
            };
        };
        let in_cache = match after.cached.take() {
            Some(part) => self.merge_cached(task, part, &after.inputs),
            None => false,
        };
        // Queries read the stores: input whose updates wait in the cache is in them once
        // it is flushed ([`Driver::flush_caches`]).
        for input in after.inputs.iter().filter(|_| !in_cache) {
            if let Some(tp) = after.sources.get(input.source) {
                self.ctx.copies.processed(task, tp, input.to);
            }
        }
        self.ctx.status.add_processed(task, after.records);
        self.ctx.status.add_late(task, after.late);
        self.stream_times.insert(task, after.stream_time);
        self.store_failures.recovered(task);
        Event::BatchDone {
            task,
            batch,
            changelogs: next_by_changelog,
        }
    }

    /// Applies a batch whose changelogs and outputs are acknowledged to its stores: per
    /// store, (index, the first changelog offset its writes took, the offset after them).
    /// `None`: a store failed (the changelog holds the batch; the store catches up from it).
    fn apply_batch(
        &mut self,
        task: TaskId,
        applied: Vec<(usize, Vec<Write>, i64)>,
    ) -> Option<Vec<(usize, i64, i64)>> {
        let t = self.tasks.get_mut(&task)?;
        let mut next_by_changelog = Vec::new();
        for (idx, writes, next) in applied {
            // One changelog record per key written, the last at `next - 1`.
            let first = next - writes.len() as i64;
            let s = &mut t.stores[idx];
            // A changelog made again under the task takes the batch before the store's
            // checkpoint: the checkpoint stays, so a crash before the store is written into
            // the changelog again (the machine's re-seed) finds it behind on restart.
            let checkpoint = next.max(s.catchup.position());
            if let Err(e) = blocking(|| s.store.apply_lazily(&writes, Some(checkpoint))) {
                // Never run again: the changelog and the sink hold it. The store catches up
                // from the changelog once it works again.
                self.store_failures.failed(
                    task,
                    "the store cannot take a batch whose output is acknowledged; its input is done and the store catches up from the changelog",
                    &e.to_string(),
                    &self.ctx.cfg.state_dir,
                );
                return None;
            }
            s.catchup.advance_to(checkpoint);
            next_by_changelog.push((idx, first, next));
        }
        Some(next_by_changelog)
    }

    /// The stream time a task's window stores show: the newest timestamp they hold, which is
    /// the newest record that reached its windows ([`stream_time::UNKNOWN`] for a task with
    /// none, or when a store cannot be read: no record is dropped as late then).
    fn stream_time_in_stores(&self, task: TaskId, t: &TaskIo) -> i64 {
        let windows = self.ctx.topology.window_stores_of(task.subtopology);
        let mut time = stream_time::UNKNOWN;
        for s in t
            .stores
            .iter()
            .filter(|s| windows.contains(&s.name.as_str()))
        {
            match blocking(|| s.store.newest_timestamp()) {
                Ok(newest) => time = time.max(newest.unwrap_or(stream_time::UNKNOWN)),
                Err(e) => {
                    tracing::warn!(task = %task, store = %s.name, error = %e, "reading a window store's stream time; starting without one");
                }
            }
        }
        if time != stream_time::UNKNOWN {
            tracing::info!(task = %task, stream_time = time, "stream time taken from the task's window stores (the broker returned none with the offsets)");
        }
        time
    }

    /// The status board (offset sums, `/metrics`) and the membership task's report follow
    /// the machine's view. The report must move on even without a join: the membership waits
    /// for it to reach a generation before it rejoins for claims it was not given back.
    fn sync_status(&mut self, m: &ThreadMachine) {
        let report = m.report();
        self.report.send_if_modified(|current| {
            let changed = *current != report;
            if changed {
                *current = report.clone();
            }
            changed
        });
        for (id, t) in m.tasks() {
            let before = self.ctx.status.get(*id);
            let changed = before
                .as_ref()
                .is_none_or(|b| b.role != t.role || b.phase != t.phase);
            if changed {
                tracing::info!(
                    thread = %self.name,
                    task = %id,
                    role = t.role.as_str(),
                    from = before.as_ref().map_or("none", |b| b.phase.as_str()),
                    to = t.phase.as_str(),
                    "task state"
                );
                if t.phase == Phase::Running {
                    if let Some(io) = self.tasks.get(id) {
                        let secs = io.restore_started.elapsed().as_secs_f64();
                        tracing::info!(
                            task = %id,
                            records = io.restored,
                            changelog_records = t.changelogs.iter().filter_map(|c| c.end).sum::<i64>(),
                            seconds = format!("{secs:.3}"),
                            records_per_sec = format!("{:.0}", io.restored as f64 / secs.max(1e-9)),
                            "restore done"
                        );
                    }
                }
            }
            let lag = t.lag();
            match before {
                Some(_) => self.ctx.status.update(*id, |s| {
                    s.role = t.role;
                    s.phase = t.phase;
                    s.lag = lag;
                }),
                None => self.ctx.status.hold(
                    *id,
                    TaskStatus {
                        role: t.role,
                        phase: t.phase,
                        lag,
                        processed: 0,
                        restored: 0,
                    },
                ),
            }
            let ends: Option<i64> = t.changelogs.iter().map(|c| c.end).sum();
            self.ctx
                .status
                .observe_changelogs(*id, t.offset_sum(), ends, Instant::now());
            if t.phase != Phase::Opening && !t.changelogs.is_empty() {
                self.ctx.status.set_checkpoint(*id, t.offset_sum());
            }
            self.ctx
                .status
                .set_reported(*id, report.offset_sums.get(id).copied());
        }
    }
}

/// A batch whose writes run beside the thread.
struct InFlight {
    task: TaskId,
    batch: RequestId,
    written: JoinHandle<writes::Written>,
    after: AfterWrites,
}

/// What a batch leaves for when its writes are acknowledged.
struct AfterWrites {
    /// What waits in the task's record cache once the rest is written.
    cached: Option<caching::CachedPart>,
    inputs: Vec<Input>,
    sources: Vec<TopicPartition>,
    records: u64,
    late: u64,
    stream_time: i64,
}

/// The cores a stream thread's batches may use at once: `batch_cores`, or unless set the
/// machine's, shared among the instance's stream threads.
fn batch_threads(cfg: &crate::config::RuntimeConfig) -> usize {
    if cfg.batch_cores > 0 {
        return cfg.batch_cores as usize;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / cfg.threads.max(1) as usize).max(1)
}

/// `c` and the batches right after it, when `c` is a batch and another follows: their tasks'
/// records can run side by side ([`Driver::process_many`]). `Err`: `c`, to run alone.
fn side_by_side(
    c: Command,
    commands: &mut VecDeque<Command>,
) -> std::result::Result<Vec<(TaskId, RequestId, Vec<Input>)>, Command> {
    let is_batch = |c: &Command| matches!(c, Command::Process { .. });
    if !is_batch(&c) || !commands.front().is_some_and(is_batch) {
        return Err(c);
    }
    let mut batches = Vec::new();
    let mut next = Some(c);
    while let Some(Command::Process {
        task,
        batch,
        inputs,
    }) = next
    {
        batches.push((task, batch, inputs));
        next = match commands.front().is_some_and(is_batch) {
            true => commands.pop_front(),
            false => None,
        };
    }
    Ok(batches)
}

/// Commands run while batches' writes are in flight: other batches (the machine never gives
/// a task a second batch before the first is done) and fetches.
fn runs_beside_writes(c: &Command) -> bool {
    matches!(
        c,
        Command::Process { .. } | Command::Punctuate { .. } | Command::Fetch { .. }
    )
}

/// What a batch's records built, owned, for [`Driver::hand_over`].
struct Done {
    writes: BTreeMap<usize, StoreWrites>,
    tables: BTreeMap<usize, records::TableUpdates>,
    out: crate::topology::Output,
    stream_time: i64,
    origins: Vec<(usize, i64, usize)>,
    records: u64,
    dead_letters: Vec<(String, KeyValue)>,
    /// The task's source partitions, as the batch's inputs index them.
    sources: Vec<TopicPartition>,
    /// What of it waits in the task's record cache, if it has one ([`caching::cached_part`]).
    cached: Option<caching::CachedPart>,
}

/// Per source, the store its records go into when it is a table's: not through the steps
/// (the store may hold them already, restored from the topic past the committed offset).
fn table_stores(
    ctx: &Context,
    task: TaskId,
    sources: &[TopicPartition],
    stores: &[StoreIo],
) -> Vec<Option<usize>> {
    sources
        .iter()
        .map(|tp| {
            let name = ctx.topology.table_store(task.subtopology, &tp.topic)?;
            stores.iter().position(|s| s.name == name)
        })
        .collect()
}

/// The records of each of a batch's inputs, taken from what the last fetch brought; `None`
/// when a source's records are not there.
fn take_input(
    buffers: &mut BTreeMap<TopicPartition, Fetched>,
    sources: &[TopicPartition],
    inputs: &[Input],
) -> Option<Vec<(usize, Vec<Record>)>> {
    let mut fetched = Vec::with_capacity(inputs.len());
    for &Input { source, from, to } in inputs {
        let f = buffers.remove(sources.get(source)?)?;
        let records: Vec<Record> = f
            .records
            .into_iter()
            .filter(|r| r.offset >= from && r.offset < to)
            .collect();
        fetched.push((source, records));
    }
    Some(fetched)
}

/// A panic in the runtime's own code while it ran one task's batch (the application's code is
/// contained per record, [`crate::record`]): that task's failure, not its thread's. The task
/// stops as on a record it cannot process; the thread and its other tasks go on.
fn batch_panicked(
    task: TaskId,
    batch: RequestId,
    doing: &str,
    retry: Option<Duration>,
    payload: &(dyn std::any::Any + Send),
) -> Event {
    let why = crate::record::panic_message(payload);
    let fate = failed_task_fate(retry);
    tracing::error!(task = %task, error = %why, "a panic in the runtime while {doing} a batch of this task; stopping this task only: {fate}");
    Event::RecordFailed { task, batch }
}

pub(crate) fn failed_task_fate(retry: Option<Duration>) -> String {
    match retry {
        None => "it holds its partitions and processes nothing more until it moves, the \
                 instance restarts, or `baton retry` asks"
            .into(),
        Some(d) => format!(
            "it holds its partitions and is tried again after {} ms (--task-retry-ms, doubling \
             with each failure), unless it moves or the instance restarts first",
            d.as_millis()
        ),
    }
}

/// A batch's input, for an error: `topic-partition offsets from..to`, each source's.
fn input_ranges(sources: &[TopicPartition], inputs: &[Input]) -> String {
    let ranges: Vec<String> = inputs
        .iter()
        .map(|i| {
            let tp = sources
                .get(i.source)
                .map_or("an unknown partition".into(), ToString::to_string);
            format!("{tp} offsets {}..{}", i.from, i.to)
        })
        .collect();
    ranges.join(", ")
}

/// A batch's writes in key order, so that its changelog records come out the same in every run.
fn sorted<V, S>(writes: HashMap<Vec<u8>, V, S>) -> Vec<(Vec<u8>, V)> {
    let mut writes: Vec<_> = writes.into_iter().collect();
    writes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    writes
}

/// Runs store work off the executor's other tasks (`block_in_place`) on a multi-threaded
/// runtime; in place on a single-threaded one, where that is not possible.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The order in which a task takes the records of its partitions, as Kafka Streams' partition
/// group does: next from the partition whose next record has the lowest timestamp (the first
/// partition on a tie), each partition in offset order. `(partition, index)` pairs.
fn merge_by_timestamp(stamps: &[Vec<i64>]) -> Vec<(usize, usize)> {
    let mut next = vec![0usize; stamps.len()];
    let mut out = Vec::with_capacity(stamps.iter().map(Vec::len).sum());
    loop {
        let pick = (0..stamps.len())
            .filter_map(|p| Some((*stamps[p].get(next[p])?, p)))
            .min();
        let Some((_, p)) = pick else {
            return out;
        };
        out.push((p, next[p]));
        next[p] += 1;
    }
}

/// What the machine needs to know of a store's failure: whether its state can be trusted.
fn fault_of(e: &crate::store::StoreError) -> StoreFault {
    if e.is_corrupt() {
        StoreFault::Corrupt(e.to_string())
    } else {
        StoreFault::Failed
    }
}

#[cfg(test)]
mod merge_tests {
    use super::merge_by_timestamp;

    #[test]
    fn takes_the_lowest_timestamp_next_and_keeps_each_partition_in_order() {
        let order = merge_by_timestamp(&[vec![5, 1, 9], vec![3, 4], vec![]]);
        // Partition 0's 1 waits behind its 5: offsets stay in order.
        assert_eq!(order, vec![(1, 0), (1, 1), (0, 0), (0, 1), (0, 2)]);
        assert_eq!(
            merge_by_timestamp(&[vec![2], vec![2]]),
            vec![(0, 0), (1, 0)]
        );
        assert!(merge_by_timestamp(&[]).is_empty());
    }
}

#[cfg(test)]
mod side_by_side_tests {
    use super::*;

    fn batch(partition: u32, id: u64) -> Command {
        Command::Process {
            task: TaskId::new(0, partition),
            batch: RequestId(id),
            inputs: vec![Input {
                source: 0,
                from: 0,
                to: 10,
            }],
        }
    }

    #[test]
    fn batches_in_a_row_go_together_and_nothing_else_does() {
        let persist = || Command::Persist {
            task: TaskId::new(0, 9),
        };
        let mut rest: VecDeque<Command> = [batch(1, 2), batch(2, 3), persist(), batch(3, 4)].into();
        let together = side_by_side(batch(0, 1), &mut rest).expect("four batches in a row");
        let ids: Vec<u64> = together.iter().map(|(_, b, _)| b.0).collect();
        assert_eq!(
            ids,
            [1, 2, 3],
            "in the order asked, up to the first other command"
        );
        assert_eq!(rest.len(), 2, "the persist and the batch after it stay");
        assert!(matches!(rest[0], Command::Persist { .. }));
        // A batch with no batch right after it runs alone; so does anything else.
        let mut after: VecDeque<Command> = [persist()].into();
        assert!(side_by_side(batch(0, 5), &mut after).is_err());
        assert_eq!(after.len(), 1);
        let mut batches: VecDeque<Command> = [batch(1, 6)].into();
        assert!(side_by_side(persist(), &mut batches).is_err());
        assert_eq!(
            batches.len(),
            1,
            "a batch after another command is left for later"
        );
    }
}
