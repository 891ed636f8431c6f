//! A stream thread's decisions, with no I/O: events in, commands out, time as an input.
//!
//! The machine owns the task lifecycle (opening, restoring, running, tailing, released), the
//! rebalance triggers (the group, a caught-up warm-up, the probing timer, a drain, revoked
//! actives, a lapsed membership), what may be written and committed, and the report a
//! subscription carries. The async driver (`baton_runtime::thread`) performs its commands; the tests
//! and the schedule fuzzer drive it with simulated time and a simulated broker.
//!
//! Rebalances are cooperative: while a join round is in flight every task goes on as before.
//! Only the assignment that ends the round takes tasks away; a revoked active is committed and
//! closed, then the thread rejoins at once so the leader can hand it to its new owner.

mod events;
mod join_reason;
mod task;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_assignor::RejoinMode;
use baton_assignor::TaskId;
use baton_protocol::bridge::Topology as WireTopology;
use baton_protocol::TopicPartition;

pub use join_reason::JoinReason;
pub use task::{Batch, ChangelogCursor, Reseed, SourceCursor, TaskState};

use crate::backoff::Backoff;
use crate::status::{Phase, Role};

/// Names one fetch, batch or commit, so a late or repeated answer is recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// A task's position in one of its source partitions.
type Position = (TaskId, TopicPartition, i64);

/// Why a thread stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Shutdown,
    /// Drained: the instance was leaving and this thread holds nothing.
    Drained,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineConfig {
    /// `session.timeout.ms`: past this without a heartbeat answer the membership has lapsed.
    pub session_timeout: Duration,
    /// The longest a write may take to land (the request timeout): writing stops this long
    /// before the session could lapse, so no write lands after the coordinator gave up on us.
    pub write_timeout: Duration,
    pub commit_interval: Duration,
    pub acceptable_recovery_lag: u64,
    pub restore_fetch_bytes: i32,
    /// The same while an active of this thread runs: each round of the loop then absorbs at
    /// most this much restore work before it processes input again (restore yields).
    pub restore_fetch_bytes_beside_actives: i32,
    pub input_fetch_bytes: i32,
    /// A static member keeps its place on shutdown: it does not leave the group.
    pub static_membership: bool,
    /// The pause before retrying a failed open or batch.
    pub retry_backoff: Backoff,
    /// Rejoin for the hand-over when one warm-up has caught up (`Eager`) or all of this
    /// thread's have (`Stable`: fewer rebalances, later hand-overs).
    pub rejoin_mode: RejoinMode,
    /// `auto.offset.reset`: where a source position that is gone moves to.
    pub auto_offset_reset: crate::config::OffsetReset,
    /// Per sub-topology, how often its processors' wall-clock punctuations are due
    /// ([`Command::Punctuate`]); none for most.
    pub wall_clock: BTreeMap<u32, Duration>,
    /// A task stopped by a record it cannot process is tried again after this long, then twice
    /// as long after each failure (at most [`FAILED_TASK_RETRY_MAX`]); `None` (the default): it
    /// stays stopped until it moves or the process restarts.
    pub failed_task_retry: Option<Duration>,
    /// What becomes of an output record no batch the broker takes can carry.
    pub on_oversized_record: crate::config::OversizedRecord,
    /// Send the next fetch of input while batches run, each source asked from its batch's
    /// end (the runtime: its next input is on its way while the records run). Off, a fetch
    /// goes only when no batch runs (the simulator's model of a stream thread).
    pub fetch_beside_batches: bool,
}

/// The longest wait before a failed task is tried again.
pub const FAILED_TASK_RETRY_MAX: Duration = Duration::from_secs(3600);

/// The wait before trying a failed task again after its `failures`th failure (from 1): the
/// retry policy's doubling, from `first` up to [`FAILED_TASK_RETRY_MAX`].
pub fn failed_task_delay(first: Duration, failures: u32) -> Duration {
    Backoff {
        first,
        max: FAILED_TASK_RETRY_MAX,
        attempts: u32::MAX,
    }
    .delay(failures)
}

/// The pause before fetching again after a fetch that failed whole: short at first (a
/// leader moving), growing to a second (a topic gone for good).
pub const FETCH_BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(20),
    max: Duration::from_secs(1),
    attempts: u32::MAX,
};

/// The least time between two commits when one is made early, before the commit interval.
pub const EARLY_COMMIT_GAP: Duration = Duration::from_secs(1);

/// What one join round gave this member.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assigned {
    pub generation: i32,
    pub member_id: String,
    pub active: Vec<TaskId>,
    pub standby: Vec<TaskId>,
    pub warmup: Vec<TaskId>,
    /// When the leader wants the next (probing) rebalance.
    pub probe_at: Option<Duration>,
    /// The leader speaks an older version: rejoin at once with it.
    pub version_probing: bool,
    /// When the request that got this answer was sent: the coordinator's session for this
    /// member runs from no earlier than that.
    pub confirmed_at: Duration,
}

impl Assigned {
    /// From the `AssignmentInfo` a join round gave: warm-ups travel in the standby list, and
    /// an active reads several partitions, so it may be listed once for each.
    pub fn from_info(
        generation: i32,
        member_id: &str,
        info: &baton_protocol::AssignmentInfo,
        probe_at: Option<Duration>,
        confirmed_at: Duration,
    ) -> Assigned {
        let warmup = info.warmup_tasks.clone();
        let standby = info
            .standby_tasks
            .iter()
            .map(|s| s.task)
            .filter(|t| !warmup.contains(t))
            .collect();
        let mut active = info.active_tasks.clone();
        active.sort();
        active.dedup();
        Assigned {
            generation,
            member_id: member_id.to_owned(),
            active,
            standby,
            warmup,
            probe_at,
            version_probing: info.error_code
                == baton_protocol::assignment::error_code::VERSION_PROBING,
            confirmed_at,
        }
    }
}

/// A heartbeat's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    Alive,
    /// A rebalance started: a join round is under way.
    Rebalancing,
    /// The coordinator no longer knows this member or its generation.
    Fenced,
    /// No answer (network, timeout).
    Failed,
}

/// One partition of a fetch's answer. The driver keeps the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResult {
    pub tp: TopicPartition,
    /// The offset the fetch asked from.
    pub from: i64,
    /// Where the reader stands after it (`baton_runtime::catchup::next_position`).
    pub next: i64,
    /// `None`: the broker left the partition out of its answer.
    pub high_watermark: Option<i64>,
}

/// Why a task's record cache was dropped unwritten ([`Event::CacheDropped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheLoss {
    /// The task closed (released, fenced, reopened) with no commit to flush it first.
    Closed,
    /// Writing it failed (the broker did not take it): counted as a failure of the task,
    /// whose next batch waits for the retry backoff.
    FlushFailed,
    /// A record in it can never be written (larger than any batch the broker takes), and
    /// the policy says fail: the task stops, as for a record it cannot process.
    FlushStopsTask,
}

/// How a store failed, as far as what to do next depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreFault {
    /// Its files are damaged (why): its state cannot be trusted and is rebuilt from the
    /// changelog.
    Corrupt(String),
    /// Anything else (a full disk, an I/O error, a panic in the engine): the same store is
    /// opened again.
    Failed,
}

/// Where a batch met a record no record batch the broker takes can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OversizedWrite {
    /// An output: a sink or a repartition topic. (A store's changelog is not asked about: a
    /// store value no batch can carry cannot be made durable, so its task always stops.)
    Output,
    /// The dead-letter topic, for a record the application failed on.
    DeadLetter,
}

/// The machine's answer to an [`OversizedWrite`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OversizedAnswer {
    /// Drop the record (logged and counted) and write on after it.
    Skip,
    /// Stop the task: the batch ends as [`Event::RecordFailed`], its input unprocessed.
    StopTask,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Assigned(Assigned),
    /// `at`: when the heartbeat was sent (its answer can arrive late, or queue behind data
    /// work; the coordinator's session timer ran from no earlier than this).
    Heartbeat {
        answer: Heartbeat,
        at: Duration,
    },
    Tick,
    DrainRequested,
    /// The operator took the drain back (`baton drain --cancel`): the instance stays.
    DrainCancelled,
    Shutdown,
    Opened {
        task: TaskId,
        /// One checkpoint per changelog, in the topology's order.
        checkpoints: Vec<i64>,
    },
    /// Another thread of this process still holds the stores.
    OpenBusy {
        task: TaskId,
    },
    /// The stores did not open (a full disk, permissions; the driver logged why): tried
    /// again after a wait. A corrupt store is set aside inside the open, never reported here.
    OpenFailed {
        task: TaskId,
    },
    Fetched {
        fetch: RequestId,
        results: Vec<FetchResult>,
    },
    FetchFailed {
        fetch: RequestId,
    },
    /// The store took what the driver held of a changelog; it now holds up to `stored`.
    /// `loading`: it is taking a bulk load and could not take another chunk before the load
    /// ends ([`Event::LoadEnded`]), so the changelog is left out of fetches until then.
    Absorbed {
        task: TaskId,
        changelog: usize,
        stored: i64,
        loading: bool,
    },
    /// The bulk load that kept a changelog's store from taking more ended: it is fetched again.
    LoadEnded {
        task: TaskId,
        changelog: usize,
    },
    /// An open store failed (the driver logged how): the task is closed and opened again.
    StoreFailed {
        task: TaskId,
        fault: StoreFault,
    },
    /// A fetch of changelog `changelog` of `task` from `offset`, its store's checkpoint, found
    /// no such offset: the changelog was deleted and made again, or its broker lost its data.
    ChangelogOutOfRange {
        task: TaskId,
        changelog: usize,
        offset: i64,
    },
    /// The answer to [`Command::Reseed`]: (changelog index, its end after the writes, which
    /// the store now holds up to).
    Reseeded {
        task: TaskId,
        request: RequestId,
        ends: Vec<(usize, i64)>,
    },
    /// [`Command::Reseed`] did not finish: it is tried again, whole.
    ReseedFailed {
        task: TaskId,
        request: RequestId,
    },
    CommittedRead {
        task: TaskId,
        /// One per source; `None`: nothing committed yet.
        offsets: Vec<Option<i64>>,
    },
    CommittedReadFailed {
        task: TaskId,
    },
    /// A fetch of source `source` of `task` at `offset` found no such offset in the partition:
    /// the topic was deleted and made again, or its records were deleted.
    SourceOutOfRange {
        task: TaskId,
        source: usize,
        offset: i64,
    },
    /// The answer to [`Command::ListSourceOffsets`]: the partition's start and end.
    SourceOffsetsListed {
        task: TaskId,
        source: usize,
        offset: i64,
        earliest: i64,
        latest: i64,
    },
    /// [`Command::ListSourceOffsets`] failed: the next fetch finds out again.
    SourceOffsetsListFailed {
        task: TaskId,
        source: usize,
    },
    /// The answer to [`Command::ListEnds`]: one end per changelog, in its order.
    EndsListed {
        task: TaskId,
        request: RequestId,
        ends: Vec<i64>,
    },
    /// Changelog and sink acknowledged the batch and the store took it.
    BatchDone {
        task: TaskId,
        batch: RequestId,
        /// (changelog index, the first offset the batch's writes took, the offset after them).
        changelogs: Vec<(usize, i64, i64)>,
    },
    BatchFailed {
        task: TaskId,
        batch: RequestId,
        /// The changelog and sink hold the batch already: only the store failed.
        output_acknowledged: bool,
    },
    /// The record cache's writes since its last flush (`statestore.cache.max.bytes`: the
    /// batches done since, whose stores and table sinks wait in it) are in the changelogs,
    /// the sinks and the stores: as for [`Event::BatchDone`], per changelog.
    CacheFlushed {
        task: TaskId,
        changelogs: Vec<(usize, i64, i64)>,
    },
    /// The record cache of `task` was dropped unwritten: the batches done since its last
    /// flush are in no changelog and no sink, so their input is read again from `from`
    /// (source index, the first offset of the first such batch).
    CacheDropped {
        task: TaskId,
        from: Vec<(usize, i64)>,
        why: CacheLoss,
    },
    /// An input record of the batch failed in the application's code, under
    /// `on-processing-error=fail`: nothing of the batch was written. The task stops.
    RecordFailed {
        task: TaskId,
        batch: RequestId,
    },
    CommitDone {
        commit: RequestId,
        ok: bool,
    },
    /// An operator asked for the failed tasks to be tried again (`baton retry`).
    RetryFailed,
    /// The topic of source `source` of `task` was deleted and made again (its id changed):
    /// the task's position in it belongs to the old topic.
    SourceRecreated {
        task: TaskId,
        source: usize,
    },
    /// The topic of changelog `changelog` of `task` was deleted and made again: the store's
    /// checkpoint belongs to the old topic (see [`Reseed`]).
    ChangelogRecreated {
        task: TaskId,
        changelog: usize,
    },
    /// Source `source` of `task` holds a record batch at `from` that cannot be read, and the
    /// input's error policy skips it: the task goes on at `to`, the offset after it.
    InputSkipped {
        task: TaskId,
        source: usize,
        from: i64,
        to: i64,
    },
    /// A batch of `task`'s input or changelog cannot be read and cannot be skipped (the
    /// policy says fail, its end is unknown, or it holds state): the task stops, as for a
    /// record it cannot process.
    Unreadable {
        task: TaskId,
    },
}

/// The records of one source partition a batch processes: offsets `from..to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input {
    pub source: usize,
    pub from: i64,
    pub to: i64,
}

/// A partition to read and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchWant {
    pub tp: TopicPartition,
    pub offset: i64,
    pub max_bytes: i32,
}

/// What the next subscription says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    pub leaving: bool,
    pub warmups: Vec<TaskId>,
    /// Source partitions of the actives this member holds: the leader gives them to no one
    /// else until they are released.
    pub owned: Vec<TopicPartition>,
    /// Held tasks: `RUNNING` (-2) for a running active, else the stores' checkpoint sum.
    pub offset_sums: BTreeMap<TaskId, i64>,
    /// The newest generation whose assignment the machine had taken in when it wrote this.
    pub generation: i32,
    /// The machine has asked to join, or will once its revoked actives are released: a rejoin
    /// for claims not given back is served by that join, and a second would be a round more.
    pub joining: bool,
}

impl Report {
    /// The partitions a join claims. A join can leave before the machine has taken in the
    /// round that just ended (the membership task answers first): until it has, that round's
    /// actives are claimed too. Claiming too much delays a hand-over by one round; claiming
    /// too little would let the leader give away a task this member still runs.
    pub fn claimed(&self, latest: Option<&(i32, Vec<TopicPartition>)>) -> Vec<TopicPartition> {
        let mut owned = self.owned.clone();
        if let Some((generation, partitions)) = latest {
            if *generation > self.generation {
                owned.extend(partitions.iter().cloned());
                owned.sort();
                owned.dedup();
            }
        }
        owned
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Make sure a join round is under way, subscribing with `report`.
    Join {
        reason: JoinReason,
        report: Report,
    },
    Leave,
    Open {
        task: TaskId,
        role: Role,
    },
    /// Persist and release the task's stores; its state stays on disk.
    Close {
        task: TaskId,
    },
    /// The task's stores cannot be trusted (`why`): set them aside at the next open, so the
    /// task restores from an empty store. Comes with a close.
    Discard {
        task: TaskId,
        why: String,
    },
    Fetch {
        fetch: RequestId,
        wants: Vec<FetchWant>,
    },
    /// Hand what the last fetch brought of `changelog` to the store.
    Absorb {
        task: TaskId,
        changelog: usize,
        end: i64,
    },
    /// Process the fetched input: changelog and sink first, then the store.
    Process {
        task: TaskId,
        batch: RequestId,
        inputs: Vec<Input>,
    },
    /// Run the task's wall-clock punctuations as a batch without input (changelog and sink
    /// first, then the store), answered as [`Command::Process`] is.
    Punctuate {
        task: TaskId,
        batch: RequestId,
    },
    /// Write the whole contents of the stores of `changelogs` into them (in Kafka's layout),
    /// then record their new ends as the stores' checkpoints; answered by [`Event::Reseeded`]
    /// or [`Event::ReseedFailed`]. See [`Reseed`].
    Reseed {
        task: TaskId,
        request: RequestId,
        changelogs: Vec<usize>,
    },
    /// Make the stores durable (a restore is done).
    Persist {
        task: TaskId,
    },
    /// Ask the broker where `changelogs` end (ListOffsets), answered by
    /// [`Event::EndsListed`]. A restoring active that already holds everything learns so in one
    /// round trip, instead of waiting out fetches that find nothing (`fetch.max.wait.ms`, and
    /// the one in flight when it was promoted). A failure needs no answer: fetches find the
    /// ends too.
    ListEnds {
        task: TaskId,
        request: RequestId,
        changelogs: Vec<TopicPartition>,
    },
    ReadCommitted {
        task: TaskId,
    },
    /// List the start and end of source `source` of `task`, whose position `offset` is not in
    /// it; answered by [`Event::SourceOffsetsListed`].
    ListSourceOffsets {
        task: TaskId,
        source: usize,
        offset: i64,
    },
    /// The task's position in a source was gone and `auto.offset.reset` placed it anew (or,
    /// with `to: None`, stopped the task): the driver says so, once.
    SourceReset {
        task: TaskId,
        source: usize,
        from: i64,
        to: Option<i64>,
        /// Why: the topic was made again (its id changed), rather than the position missing.
        made_again: bool,
    },
    Commit {
        commit: RequestId,
        generation: i32,
        member_id: String,
        offsets: Vec<(TopicPartition, i64)>,
    },
    Exit(Exit),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Group {
    /// A join round is in flight (or about to be).
    Joining,
    Member {
        generation: i32,
        member_id: String,
    },
}

/// Per task, source positions processed but not committed yet.
type Carried = BTreeMap<TaskId, Vec<(TopicPartition, i64)>>;

pub struct ThreadMachine {
    cfg: MachineConfig,
    topology: WireTopology,
    group: Group,
    /// The last time the coordinator confirmed this membership.
    alive_at: Duration,
    /// When the current assignment was taken in. A heartbeat sent before it carried the old
    /// generation: its "fenced" answer is about a generation already left behind.
    assigned_at: Duration,
    tasks: BTreeMap<TaskId, TaskState>,
    fetch: Option<RequestId>,
    commit: Option<(RequestId, Vec<Position>)>,
    last_commit: Duration,
    /// A task caught up with its input since the last commit: commit before the interval.
    commit_early: bool,
    /// Fetches failed in a row, and when the next may go ([`FETCH_BACKOFF`]).
    fetch_failures: u32,
    fetch_retry_at: Option<Duration>,
    probe_at: Option<Duration>,
    /// The newest generation assigned so far, and the member id it came with.
    last_generation: i32,
    last_member_id: Option<String>,
    /// Revoked actives whose last positions are not committed yet. They stay claimed, so no
    /// one else gets them, and their commit is retried with each new generation; only then
    /// are they released (Kafka's cooperative consumers do the same).
    unreleased: Carried,
    /// Rejoin once `unreleased` is committed.
    rejoin_when_released: bool,
    leaving: bool,
    /// The last subscription said so.
    reported_leaving: bool,
    stopped: bool,
    next_id: u64,
}

impl ThreadMachine {
    /// A thread about to join for the first time: the first command is the join.
    pub fn new(cfg: MachineConfig, topology: WireTopology, now: Duration) -> ThreadMachine {
        ThreadMachine {
            cfg,
            topology,
            group: Group::Joining,
            alive_at: now,
            assigned_at: now,
            tasks: BTreeMap::new(),
            fetch: None,
            commit: None,
            last_commit: now,
            commit_early: false,
            fetch_failures: 0,
            fetch_retry_at: None,
            probe_at: None,
            last_generation: -1,
            last_member_id: None,
            unreleased: BTreeMap::new(),
            rejoin_when_released: false,
            leaving: false,
            reported_leaving: false,
            stopped: false,
            next_id: 0,
        }
    }

    /// The first commands: join the group.
    pub fn start(&mut self) -> Vec<Command> {
        vec![self.join(JoinReason::Startup)]
    }

    pub fn tasks(&self) -> &BTreeMap<TaskId, TaskState> {
        &self.tasks
    }

    pub fn generation(&self) -> Option<i32> {
        match &self.group {
            Group::Member { generation, .. } => Some(*generation),
            Group::Joining => None,
        }
    }

    pub fn is_joining(&self) -> bool {
        self.group == Group::Joining
    }

    /// Whether the thread may write (produce or commit) at `now`: the coordinator confirmed
    /// its membership recently enough that a write sent now lands within the session. That
    /// holds through a join round too, whose heartbeats the coordinator answers "rebalancing"
    /// and counts. A paused process wakes up fenced.
    /// What a batch's writes do with a record no batch the broker takes can carry.
    pub fn oversized(&self, write: OversizedWrite) -> OversizedAnswer {
        match write {
            // Already the record of a failure: all that is left is the log.
            OversizedWrite::DeadLetter => OversizedAnswer::Skip,
            OversizedWrite::Output => match self.cfg.on_oversized_record {
                crate::config::OversizedRecord::Fail => OversizedAnswer::StopTask,
                crate::config::OversizedRecord::Skip => OversizedAnswer::Skip,
            },
        }
    }

    pub fn may_write(&self, now: Duration) -> bool {
        self.write_deadline().is_some_and(|until| now <= until)
    }

    /// The last moment a write may start: one started later could still be unanswered when
    /// the session, last known alive at `alive_at`, runs out (and a zombie's write is what
    /// fencing is for). `None`: no write may start. Fixed when a batch's writes are handed
    /// over to run beside the machine; being known alive since only moves it later.
    pub fn write_deadline(&self) -> Option<Duration> {
        self.flush_deadline().filter(|_| !self.stopped)
    }

    /// The last moment a commit's flush of the record cache may start: as
    /// [`Self::write_deadline`], and also once the thread stops, whose last commit (sent as it
    /// stops) must write what the commit covers first.
    pub fn flush_deadline(&self) -> Option<Duration> {
        let margin = self
            .cfg
            .session_timeout
            .checked_sub(self.cfg.write_timeout)?;
        Some(self.alive_at + margin)
    }

    fn id(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId(self.next_id)
    }

    /// The first request id not yet issued.
    fn fresh(&self) -> RequestId {
        RequestId(self.next_id + 1)
    }

    /// The subscription's content as of now.
    pub fn report(&self) -> Report {
        let mut r = Report {
            leaving: self.leaving,
            generation: self.last_generation,
            joining: self.is_joining() || self.rejoin_when_released,
            ..Report::default()
        };
        for (id, t) in &self.tasks {
            if t.role == Role::Warmup {
                r.warmups.push(*id);
            }
            if t.role == Role::Active {
                r.owned.extend(t.sources.iter().map(|s| s.tp.clone()));
            }
            if t.phase == Phase::Opening {
                continue;
            }
            // A failed active still holds the task: moving it would only fail it elsewhere.
            let sum = if t.is_running_active() || t.phase == Phase::Failed {
                baton_protocol::subscription::RUNNING
            } else {
                t.offset_sum()
            };
            if !t.changelogs.is_empty() {
                r.offset_sums.insert(*id, sum);
            }
        }
        for positions in self.unreleased.values() {
            r.owned.extend(positions.iter().map(|(tp, _)| tp.clone()));
        }
        r.owned.sort();
        r.owned.dedup();
        r
    }

    pub fn handle(&mut self, event: Event, now: Duration) -> Vec<Command> {
        let mut out = Vec::new();
        if self.stopped {
            return out;
        }
        // Before anything else: a member that wakes after its session lapsed is fenced first,
        // whatever woke it; unless the event itself is the coordinator's word that it is not.
        match &event {
            Event::Heartbeat {
                answer: Heartbeat::Alive | Heartbeat::Rebalancing,
                at,
            } => self.alive_at = self.alive_at.max(*at),
            Event::Assigned(a) if a.generation > self.last_generation => {
                self.alive_at = self.alive_at.max(a.confirmed_at)
            }
            _ => {}
        }
        self.check_lapse(now, &mut out);
        match event {
            Event::Assigned(a) => {
                if a.generation > self.last_generation {
                    self.assigned_at = now;
                }
                self.assigned(a, &mut out)
            }
            Event::Heartbeat { answer, at } => self.on_heartbeat(answer, at, &mut out),
            Event::Tick => {}
            Event::DrainRequested => self.on_drain_requested(&mut out),
            Event::DrainCancelled => self.on_drain_cancelled(&mut out),
            Event::Shutdown => {
                self.shutdown(now, &mut out);
                return out;
            }
            Event::Fetched { fetch, results } => {
                if self.fetch == Some(fetch) {
                    self.fetch = None;
                    self.fetch_failures = 0;
                    self.fetch_retry_at = None;
                    self.fetched(fetch, results, now, &mut out);
                }
            }
            Event::FetchFailed { fetch } => {
                if self.fetch == Some(fetch) {
                    self.fetch = None;
                    // A broker that answers at once (a topic gone, no leader) is not asked
                    // again at once: hundreds of fetches a second helped no one.
                    self.fetch_failures = self.fetch_failures.saturating_add(1);
                    self.fetch_retry_at = Some(now + FETCH_BACKOFF.delay(self.fetch_failures));
                }
            }
            Event::RetryFailed => self.on_retry_failed(now, &mut out),
            Event::CommitDone { commit, ok } => self.on_commit_done(commit, ok, &mut out),
            event => {
                if !self.on_task_event(event, now, &mut out) {
                    return out;
                }
            }
        }
        self.poll(now, &mut out);
        self.check_invariants();
        out
    }

    /// What must hold between events, whatever came (checked in debug builds: every machine
    /// test, the schedule fuzzer and the simulator).
    fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        for t in self.tasks.values() {
            let active = t.role == Role::Active;
            debug_assert!(
                active || !matches!(t.phase, Phase::Running | Phase::Restoring),
                "{}: a {:?} copy is {:?}",
                t.id,
                t.role,
                t.phase
            );
            debug_assert!(
                !active || t.phase != Phase::Tailing,
                "{}: an active is tailing",
                t.id
            );
            debug_assert!(
                t.batch.is_none() || (active && t.phase == Phase::Running),
                "{}: a batch runs on a {:?} {:?} task",
                t.id,
                t.role,
                t.phase
            );
            debug_assert!(
                !t.reading_committed || t.phase == Phase::Restoring,
                "{}: reading committed offsets while {:?}",
                t.id,
                t.phase
            );
            debug_assert!(
                active || t.sources.iter().all(|s| s.position.is_none()),
                "{}: a {:?} copy holds source positions (it could commit them)",
                t.id,
                t.role
            );
            // A punctuation (a batch without input) may run beside a fetch; input may not,
            // unless fetches ask from batches' ends.
            debug_assert!(
                self.cfg.fetch_beside_batches
                    || self.fetch.is_none()
                    || t.batch.as_ref().is_none_or(|b| b.inputs.is_empty()),
                "{}: a batch of input runs beside a fetch in flight",
                t.id
            );
        }
        for id in self.unreleased.keys() {
            debug_assert!(
                self.tasks.get(id).is_none_or(|t| t.role != Role::Active),
                "{id}: revoked and still releasing, yet active"
            );
        }
    }

    /// Wall-clock punctuations: each running active of a sub-topology with any, a first time
    /// one interval after it started running, then every interval (from when the last was
    /// asked for: a slow punctuation delays the next, it is never run twice to catch up).
    fn punctuations_due(&mut self, now: Duration, out: &mut Vec<Command>) {
        let mut due = Vec::new();
        for t in self.tasks.values_mut() {
            let Some(&every) = self.cfg.wall_clock.get(&t.id.subtopology) else {
                continue;
            };
            if !t.is_running_active()
                || t.batch.is_some()
                || t.reseed.is_some()
                || t.retry_at.is_some_and(|r| now < r)
            {
                continue;
            }
            let next = t.next_punctuation.get_or_insert(now + every);
            if now >= *next {
                *next = now + every;
                due.push(t.id);
            }
        }
        for task in due {
            let batch = self.id();
            if let Some(t) = self.tasks.get_mut(&task) {
                t.batch = Some(Batch {
                    id: batch,
                    inputs: Vec::new(),
                    caught_up: true,
                });
            }
            out.push(Command::Punctuate { task, batch });
        }
    }

    /// Source `source` of `task`, if the task is a running active and the source still stands
    /// at `offset` (an answer about an older position is stale).
    fn running_source(
        &mut self,
        task: TaskId,
        source: usize,
        offset: i64,
    ) -> Option<&mut SourceCursor> {
        let t = self.tasks.get_mut(&task)?;
        if !t.is_running_active() {
            return None;
        }
        t.sources
            .get_mut(source)
            .filter(|s| s.position == Some(offset))
    }

    /// What is due at `now` whatever the event: fencing, timers, opens, restores, the next fetch.
    fn poll(&mut self, now: Duration, out: &mut Vec<Command>) {
        if self.stopped {
            return;
        }
        self.check_lapse(now, out);
        // A member still releasing revoked actives joins once they are released (see the
        // heartbeat's "rebalancing" answer above), not on the leader's probe.
        if self.probe_at.is_some_and(|t| now >= t)
            && !self.is_joining()
            && self.unreleased.is_empty()
        {
            self.probe_at = None;
            out.push(self.join(JoinReason::ProbingRebalance));
        }
        let since = now.saturating_sub(self.last_commit);
        // An early commit (a task caught up, [`TaskState::commit_when_caught_up`]) waits at
        // least EARLY_COMMIT_GAP after the last one, so bursty input cannot make commits
        // back to back.
        let early = self.commit_early && since >= EARLY_COMMIT_GAP.min(self.cfg.commit_interval);
        if since >= self.cfg.commit_interval || early {
            self.last_commit = now;
            self.commit_early = false;
            self.commit_now(out);
        }
        self.task_steps_due(now, out);
        // Beside a fetch in flight too (an idle input's fetch waits out its long poll): what it
        // brings for a task that is punctuating is fetched again after.
        if self.may_write(now) {
            self.punctuations_due(now, out);
        }
        self.fetch_due(now, out);
    }

    /// Each task's next step that waits on nothing in flight: opening its stores, a retry
    /// after a failure, asking where its changelogs end, reading its committed offsets.
    fn task_steps_due(&mut self, now: Duration, out: &mut Vec<Command>) {
        let due = |t: &TaskState| t.retry_at.is_none_or(|r| now >= r);
        let mut retries = Vec::new();
        let mut opens = Vec::new();
        let mut reads = Vec::new();
        let mut ends = Vec::new();
        for t in self.tasks.values_mut() {
            if !due(t) {
                continue;
            }
            match t.phase {
                Phase::Opening => {
                    t.retry_at = Some(now + Duration::from_secs(3600)); // until it answers
                    opens.push((t.id, t.role));
                }
                // Only a failed task given a retry time has one: `failed_task_retry`.
                Phase::Failed if t.retry_at.is_some() => retries.push(t.id),
                Phase::Restoring if !t.reading_committed && t.restored() => {
                    t.reading_committed = true;
                    t.retry_at = None;
                    reads.push(t.id);
                }
                Phase::Restoring if !t.reading_committed && !t.ends_asked => {
                    t.ends_asked = true;
                    if !t.changelogs.is_empty() {
                        ends.push(t.id);
                    }
                }
                _ => {}
            }
        }
        if self.may_write(now) {
            self.reseeds_due(now, out);
        }
        self.resets_due(out);
        for task in ends {
            let request = self.id();
            let changelogs = self.tasks[&task]
                .changelogs
                .iter()
                .map(|c| c.tp.clone())
                .collect();
            out.push(Command::ListEnds {
                task,
                request,
                changelogs,
            });
        }
        for task in retries {
            // Closed and opened again: restored, then its input from where it stopped.
            self.reopen(task, now, out);
        }
        for (task, role) in opens {
            out.push(Command::Open { task, role });
        }
        for task in reads {
            if !self.tasks[&task].changelogs.is_empty() {
                out.push(Command::Persist { task });
            }
            out.push(Command::ReadCommitted { task });
        }
    }

    /// One fetch at a time. With [`MachineConfig::fetch_beside_batches`] it may be sent while
    /// batches run: a task with a batch of input asks from that batch's end
    /// ([`ThreadMachine::wants`]), so the next input is on its way while this one is
    /// processed, and every source is covered. Without, none goes while a batch runs.
    fn fetch_due(&mut self, now: Duration, out: &mut Vec<Command>) {
        let batches_allow =
            || self.cfg.fetch_beside_batches || self.tasks.values().all(|t| t.batch.is_none());
        if self.fetch.is_none() && self.fetch_retry_at.is_none_or(|t| now >= t) && batches_allow() {
            let wants = self.wants(now);
            if !wants.is_empty() {
                let fetch = self.id();
                self.fetch = Some(fetch);
                out.push(Command::Fetch { fetch, wants });
            }
        }
    }

    fn check_lapse(&mut self, now: Duration, out: &mut Vec<Command>) {
        if !self.may_write(now) && self.tasks.values().any(|t| t.role == Role::Active) {
            self.fenced(JoinReason::SessionLapsed, out);
        }
    }

    fn beside_actives(&self) -> bool {
        self.tasks
            .values()
            .any(|t| t.role == Role::Active && t.phase == Phase::Running)
    }

    /// Changelogs of restoring and tailing tasks; sources of running actives without a batch
    /// in flight, while this member may write.
    fn wants(&self, now: Duration) -> Vec<FetchWant> {
        let may_write = self.may_write(now);
        let restore_bytes = if self.beside_actives() {
            self.cfg
                .restore_fetch_bytes_beside_actives
                .min(self.cfg.restore_fetch_bytes)
        } else {
            self.cfg.restore_fetch_bytes
        };
        // Sources first: a broker fills a fetch's answer in the order asked and stops at its
        // size limit, after at least one whole batch, however large; a changelog batch bigger
        // than the restore chunk, asked first, would leave the actives' input out of every answer.
        let mut wants = Vec::new();
        let mut restores = Vec::new();
        for t in self.tasks.values() {
            match t.phase {
                Phase::Restoring | Phase::Tailing
                    if !t.reading_committed
                        && t.reseed.is_none()
                        && t.retry_at.is_none_or(|r| now >= r) =>
                {
                    // Waiting for a store's bulk load would stall every active of this thread
                    // (seen live as a 2.6 s gap while a warm-up of the same thread restored).
                    restores.extend(
                        t.changelogs
                            .iter()
                            .filter(|c| !c.loading)
                            .map(|c| FetchWant {
                                tp: c.tp.clone(),
                                offset: c.fetch_position,
                                max_bytes: restore_bytes,
                            }),
                    )
                }
                Phase::Running
                    if may_write
                        && t.reseed.is_none()
                        && t.retry_at.is_none_or(|r| now >= r)
                        && (t.batch.is_none() || self.cfg.fetch_beside_batches) =>
                {
                    // A source a batch in flight reads is asked from the batch's end: what
                    // comes after it. Should the batch fail, the answer no longer starts at
                    // the source's position and is not used ([`inputs_fetched`]).
                    let after_batch = |i: usize| {
                        let b = t.batch.as_ref()?;
                        b.inputs
                            .iter()
                            .find(|(s, _)| *s == i)
                            .map(|&(_, next)| next)
                    };
                    wants.extend(
                        t.sources
                            .iter()
                            .enumerate()
                            .filter(|(_, s)| !s.resetting)
                            .filter_map(|(i, s)| {
                                Some(FetchWant {
                                    tp: s.tp.clone(),
                                    offset: after_batch(i).or(s.position)?,
                                    max_bytes: self.cfg.input_fetch_bytes,
                                })
                            }),
                    )
                }
                _ => {}
            }
        }
        wants.extend(restores);
        wants
    }

    fn fetched(
        &mut self,
        fetch: RequestId,
        results: Vec<FetchResult>,
        now: Duration,
        out: &mut Vec<Command>,
    ) {
        let may_write = self.may_write(now);
        let mut by_tp: ByPartition<'_> = BTreeMap::new();
        for r in &results {
            by_tp.insert(&r.tp, r);
        }
        let mut batches = Vec::new();
        let mut behind = Vec::new();
        for t in self.tasks.values_mut() {
            if fetch < t.fresh_from {
                continue;
            }
            match t.phase {
                Phase::Restoring | Phase::Tailing if !t.reading_committed && t.reseed.is_none() => {
                    absorb_fetched(t, &by_tp, &mut behind, out)
                }
                // A task whose batch still runs leaves the answer (its next fetch asks
                // again; the runtime's driver settles batches before it reads an answer),
                // and so does one waiting to retry a failed batch (the answer was asked
                // for before it failed).
                Phase::Running
                    if may_write
                        && t.batch.is_none()
                        && t.reseed.is_none()
                        && t.retry_at.is_none_or(|r| now >= r) =>
                {
                    if let Some(batch) = inputs_fetched(t, &by_tp, out) {
                        batches.push(batch);
                    }
                }
                _ => {}
            }
        }
        for (task, changelog, why) in behind {
            self.changelog_behind(task, changelog, why, now, out);
        }
        for (task, inputs, caught_up) in batches {
            let batch = self.id();
            if let Some(t) = self.tasks.get_mut(&task) {
                t.batch = Some(Batch {
                    id: batch,
                    inputs: inputs.iter().map(|i| (i.source, i.to)).collect(),
                    caught_up,
                });
            }
            out.push(Command::Process {
                task,
                batch,
                inputs,
            });
        }
    }

    /// Where `task` reads changelog `changelog` from, while it reads it (restoring or tailing,
    /// not deciding a re-seed): a changelog found behind is decided only then.
    fn reading_changelog(&self, task: TaskId, changelog: usize) -> Option<i64> {
        let t = self.tasks.get(&task)?;
        let reading = matches!(t.phase, Phase::Restoring | Phase::Tailing)
            && !t.reading_committed
            && t.reseed.is_none();
        reading.then(|| t.changelogs.get(changelog).map(|c| c.fetch_position))?
    }

    /// Changelog `changelog` of `task` ends before its store's checkpoint (`why`). A copy that
    /// does not run (standby, warm-up) and a table read from its own source topic rebuild from
    /// it, as before: the active is the one to write it, and a user's topic is never written.
    /// An active asks for the group's committed positions, which decide (see [`Reseed`]).
    fn changelog_behind(
        &mut self,
        task: TaskId,
        changelog: usize,
        why: String,
        now: Duration,
        out: &mut Vec<Command>,
    ) {
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        let own_topic = t
            .changelogs
            .get(changelog)
            .is_some_and(|c| !t.sources.iter().any(|s| s.tp == c.tp));
        if t.role == Role::Active && own_topic {
            t.reseed = Some(Reseed::Checking {
                changelogs: vec![changelog],
            });
            out.push(Command::ReadCommitted { task });
        } else {
            out.push(Command::Discard { task, why });
            self.reopen(task, now, out);
        }
    }

    /// Changelog `changelog` of `task` was deleted and made again: its store's checkpoint
    /// counts in the old topic. A store that took nothing from it starts again from the new
    /// one; one with a re-seed pending has this changelog written too; the others are behind
    /// (`changelog_behind`).
    fn changelog_recreated(
        &mut self,
        task: TaskId,
        changelog: usize,
        now: Duration,
        out: &mut Vec<Command>,
    ) {
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        match &mut t.reseed {
            Some(Reseed::Checking { changelogs } | Reseed::Due { changelogs }) => {
                if !changelogs.contains(&changelog) {
                    changelogs.push(changelog);
                }
                return;
            }
            // Being written: into the new topic, whose id the driver asked for first.
            Some(Reseed::Writing { .. }) => return,
            None => {}
        }
        if t.is_running_active() {
            // Found by the driver's check rather than by a batch (an idle task): written now,
            // while its instance holds the state, not when input comes, perhaps elsewhere.
            let own_topic = t
                .changelogs
                .get(changelog)
                .is_some_and(|c| c.stored > 0 && !t.sources.iter().any(|s| s.tp == c.tp));
            if own_topic {
                t.reseed = Some(Reseed::Due {
                    changelogs: vec![changelog],
                });
            }
            return;
        }
        if self.reading_changelog(task, changelog).is_none() {
            return;
        }
        let why = "its changelog was deleted and made again".to_owned();
        let took_nothing = self.tasks[&task]
            .changelogs
            .get(changelog)
            .is_some_and(|c| c.stored == 0);
        if took_nothing {
            // Nothing to keep or write back; reopened, it forgets what it read of the old one.
            out.push(Command::Discard { task, why });
            self.reopen(task, now, out);
        } else {
            self.changelog_behind(task, changelog, why, now, out);
        }
    }

    /// The committed positions of a task whose changelog was found behind its store arrived.
    fn reseed_or_rebuild(
        &mut self,
        task: TaskId,
        offsets: &[Option<i64>],
        now: Duration,
        out: &mut Vec<Command>,
    ) {
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        let Some(reseed) = t.reseed.take() else {
            return;
        };
        if offsets.iter().any(|o| o.is_some_and(|o| o >= 0)) {
            t.reseed = Some(Reseed::Due {
                changelogs: reseed.changelogs().to_vec(),
            });
        } else {
            let why = "its checkpoint is past its changelog's end and the group holds no \
                       committed positions for its input (the broker lost its data): the \
                       input is read again from its start, so the store is rebuilt"
                .to_owned();
            out.push(Command::Discard { task, why });
            self.reopen(task, now, out);
        }
    }

    /// Running sources whose topic was made again: their positions are placed anew, after the
    /// new topic's start and end are listed.
    fn resets_due(&mut self, out: &mut Vec<Command>) {
        for t in self.tasks.values_mut() {
            // After a batch in flight: its end is the position to replace.
            if !t.is_running_active() || t.batch.is_some() {
                continue;
            }
            for (source, s) in t.sources.iter_mut().enumerate() {
                if let (true, false, Some(offset)) = (s.made_again, s.resetting, s.position) {
                    s.resetting = true;
                    out.push(Command::ListSourceOffsets {
                        task: t.id,
                        source,
                        offset,
                    });
                }
            }
        }
    }

    /// Tasks whose changelogs are due to be written from their stores, and may be now.
    fn reseeds_due(&mut self, now: Duration, out: &mut Vec<Command>) {
        let mut due = Vec::new();
        for t in self.tasks.values() {
            if let Some(Reseed::Due { changelogs }) = &t.reseed {
                if t.batch.is_none() && t.retry_at.is_none_or(|r| now >= r) {
                    due.push((t.id, changelogs.clone()));
                }
            }
        }
        for (task, changelogs) in due {
            let request = self.id();
            if let Some(t) = self.tasks.get_mut(&task) {
                t.reseed = Some(Reseed::Writing {
                    request,
                    changelogs: changelogs.clone(),
                });
            }
            out.push(Command::Reseed {
                task,
                request,
                changelogs,
            });
        }
    }

    /// The stores were written into their changelogs, which now end at `ends`.
    fn reseeded(&mut self, task: TaskId, request: RequestId, ends: &[(usize, i64)]) {
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        if !matches!(t.reseed, Some(Reseed::Writing { request: r, .. }) if r == request) {
            return;
        }
        t.reseed = None;
        t.failures = 0;
        t.retry_at = None;
        for &(i, end) in ends {
            if let Some(c) = t.changelogs.get_mut(i) {
                c.stored = end;
                c.fetch_position = end;
                c.end = Some(end);
            }
        }
    }

    /// A restoring active learns its changelogs' ends. An end before what the store holds is
    /// left to the fetch, which rebuilds the store (see [`Self::fetched`]).
    fn ends_listed(&mut self, task: TaskId, request: RequestId, ends: &[i64]) {
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        if request < t.fresh_from
            || t.phase != Phase::Restoring
            || t.reading_committed
            || t.reseed.is_some()
        {
            return;
        }
        for (c, &end) in t.changelogs.iter_mut().zip(ends) {
            if end >= c.fetch_position {
                c.end = Some(c.end.map_or(end, |e| e.max(end)));
            }
        }
    }

    fn absorbed(
        &mut self,
        task: TaskId,
        changelog: usize,
        (stored, loading): (i64, bool),
        out: &mut Vec<Command>,
    ) {
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        if !matches!(t.phase, Phase::Restoring | Phase::Tailing) {
            return;
        }
        let Some(c) = t.changelogs.get_mut(changelog) else {
            return;
        };
        if stored > c.stored {
            t.failures = 0;
        }
        c.stored = c.stored.max(stored);
        c.loading = loading;
        self.signal_caught_up_warmups(out);
    }

    fn load_ended(&mut self, task: TaskId, changelog: usize) {
        if let Some(c) = self
            .tasks
            .get_mut(&task)
            .and_then(|t| t.changelogs.get_mut(changelog))
        {
            c.loading = false;
        }
    }

    /// Asks for the follow-up rebalance once a warm-up has caught up. Not during a join: the
    /// join under way carries the subscription from when it was sent, which said behind, so
    /// the warm-up is signalled once that round has ended (the leader hears of it only then).
    fn signal_caught_up_warmups(&mut self, out: &mut Vec<Command>) {
        if self.is_joining() {
            return;
        }
        let acceptable = self.cfg.acceptable_recovery_lag;
        let mut newly = false;
        for t in self.tasks.values_mut() {
            if t.role == Role::Warmup
                && !t.reported_caught_up
                && t.lag() <= acceptable
                && t.restored_end_known()
            {
                t.reported_caught_up = true;
                newly = true;
            }
        }
        if !newly {
            return;
        }
        let all = self
            .tasks
            .values()
            .all(|w| w.role != Role::Warmup || w.reported_caught_up);
        let due = match self.cfg.rejoin_mode {
            RejoinMode::Eager => true,
            RejoinMode::Stable => all,
            RejoinMode::Probing => false,
        };
        if due {
            out.push(
                self.join(if all && self.cfg.rejoin_mode == RejoinMode::Stable {
                    JoinReason::EveryWarmupCaughtUp
                } else {
                    JoinReason::WarmupCaughtUp
                }),
            );
        }
    }

    fn batch_done(&mut self, task: TaskId, batch: RequestId, changelogs: Vec<(usize, i64, i64)>) {
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        let Some(b) = t.batch.take_if(|b| b.id == batch) else {
            return;
        };
        t.failures = 0;
        let punctuation = b.inputs.is_empty();
        for (i, next) in b.inputs {
            t.sources[i].position = Some(next);
        }
        if punctuation {
            // A punctuation read no input: it says nothing of catching up.
        } else if !b.caught_up {
            t.commit_when_caught_up = true;
        } else if t.commit_when_caught_up {
            t.commit_when_caught_up = false;
            self.commit_early = true;
        }
        t.changelogs_written(changelogs);
    }

    /// The record cache of `task` was dropped unwritten: its input goes back to where the
    /// cache's first batch started, in the task and in any revocation commit still to land.
    fn cache_dropped(
        &mut self,
        task: TaskId,
        from: &[(usize, i64)],
        why: CacheLoss,
        now: Duration,
    ) {
        let sources = self.topology.source_partitions(task);
        if let Some(left) = self.unreleased.get_mut(&task) {
            for &(i, at) in from {
                if let Some(tp) = sources.get(i) {
                    for (p, o) in left.iter_mut() {
                        if p == tp {
                            *o = (*o).min(at);
                        }
                    }
                }
            }
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        for &(i, at) in from {
            if let Some(p) = t.sources.get_mut(i).and_then(|s| s.position.as_mut()) {
                *p = (*p).min(at);
            }
        }
        match why {
            CacheLoss::Closed => {}
            CacheLoss::FlushFailed => {
                t.failures += 1;
                t.retry_at = Some(now + self.cfg.retry_backoff.delay(t.failures));
            }
            CacheLoss::FlushStopsTask => self.stop_task(task, now),
        }
    }

    /// Commits every running active's processed positions, if any moved and this member may.
    fn commit_now(&mut self, out: &mut Vec<Command>) {
        let offsets: Vec<Position> = self
            .tasks
            .values()
            .flat_map(|t| {
                t.uncommitted()
                    .into_iter()
                    .map(move |(tp, at)| (t.id, tp, at))
            })
            .collect();
        self.send_commit(offsets, out);
    }

    fn commit_offsets(
        &mut self,
        task: TaskId,
        offsets: Vec<(TopicPartition, i64)>,
        out: &mut Vec<Command>,
    ) {
        let offsets = offsets.into_iter().map(|(tp, at)| (task, tp, at)).collect();
        self.send_commit(offsets, out);
    }

    fn send_commit(&mut self, offsets: Vec<Position>, out: &mut Vec<Command>) {
        let Group::Member {
            generation,
            member_id,
        } = &self.group
        else {
            return;
        };
        if offsets.is_empty() || self.commit.is_some() {
            return;
        }
        let (generation, member_id) = (*generation, member_id.clone());
        let commit = self.id();
        out.push(Command::Commit {
            commit,
            generation,
            member_id,
            offsets: offsets
                .iter()
                .map(|(_, tp, at)| (tp.clone(), *at))
                .collect(),
        });
        self.commit = Some((commit, offsets));
    }

    fn join(&mut self, reason: JoinReason) -> Command {
        self.group = Group::Joining;
        self.reported_leaving = self.leaving;
        let acceptable = self.cfg.acceptable_recovery_lag;
        for t in self.tasks.values_mut() {
            if t.role == Role::Warmup {
                t.reported_caught_up = t.lag() <= acceptable && t.restored_end_known();
            }
        }
        Command::Join {
            reason,
            report: self.report(),
        }
    }

    /// The membership lapsed: another member may own these actives now. Drop them without
    /// committing (their in-flight output is the zombie window, docs/RUNTIME.md), then rejoin.
    fn fenced(&mut self, reason: JoinReason, out: &mut Vec<Command>) {
        self.drop_unprotected(out);
        out.push(self.join(reason));
    }

    /// Drops the actives and the unreleased positions without committing them: the group went
    /// on without this member, so another may run them by now, and a late commit could move
    /// its position back.
    fn drop_unprotected(&mut self, out: &mut Vec<Command>) {
        let actives: Vec<TaskId> = self
            .tasks
            .values()
            .filter(|t| t.role == Role::Active)
            .map(|t| t.id)
            .collect();
        for task in actives {
            self.tasks.remove(&task);
            out.push(Command::Close { task });
        }
        self.commit = None;
        self.unreleased.clear();
        self.rejoin_when_released = false;
    }

    fn assigned(&mut self, a: Assigned, out: &mut Vec<Command>) {
        // A late copy of an older round's answer would roll the tasks back.
        if a.generation < 0 || a.generation <= self.last_generation {
            return;
        }
        self.last_generation = a.generation;
        // A new member id: the coordinator had forgotten us, and generations passed in which
        // our claims protected nothing. What we held is as good as fenced.
        if self
            .last_member_id
            .replace(a.member_id.clone())
            .is_some_and(|id| id != a.member_id)
        {
            self.drop_unprotected(out);
        }
        self.group = Group::Member {
            generation: a.generation,
            member_id: a.member_id.clone(),
        };
        self.alive_at = self.alive_at.max(a.confirmed_at);
        self.probe_at = a.probe_at;
        let mut want: BTreeMap<TaskId, Role> = BTreeMap::new();
        for &t in &a.standby {
            want.insert(t, Role::Standby);
        }
        for &t in &a.warmup {
            want.insert(t, Role::Warmup);
        }
        for &t in &a.active {
            want.insert(t, Role::Active);
        }
        let (revoked, carried) = self.let_go(&want, out);
        self.take_roles(want, carried);
        if self.leaving
            && self.reported_leaving
            && self.tasks.is_empty()
            && self.unreleased.is_empty()
        {
            out.push(Command::Leave);
            out.push(Command::Exit(Exit::Drained));
            self.stopped = true;
            return;
        }
        if a.version_probing {
            out.push(self.join(JoinReason::VersionProbing));
        } else if !self.unreleased.is_empty() {
            // Released once their commit lands (or is refused: then retried next round).
            self.rejoin_when_released = true;
        } else if !revoked.is_empty() {
            out.push(self.join(JoinReason::ReleasedRevokedActives));
        } else if self.leaving && !self.reported_leaving {
            out.push(self.join(JoinReason::DrainRequested));
        }
        // A warm-up that caught up during the round (its join said behind) asks now.
        self.signal_caught_up_warmups(out);
    }

    /// Before taking the new roles: revoked actives commit what they processed (and are
    /// released once that lands), tasks no longer wanted close. Returns the revoked actives,
    /// and the positions of revoked actives given back before their commit landed.
    fn let_go(
        &mut self,
        want: &BTreeMap<TaskId, Role>,
        out: &mut Vec<Command>,
    ) -> (Vec<TaskId>, Carried) {
        // Revoked actives: commit what they processed, then release them.
        let mut revoked = Vec::new();
        let mut released = Vec::new();
        for (id, t) in &self.tasks {
            let role = want.get(id).copied();
            if t.role == Role::Active && role != Some(Role::Active) {
                revoked.push(*id);
            }
            if role.is_none() {
                released.push(*id);
            }
        }
        for id in &revoked {
            let left = self.tasks[id].uncommitted();
            if !left.is_empty() {
                self.unreleased.insert(*id, left);
            }
        }
        // A task given back to us keeps the positions it reached.
        let back: Vec<TaskId> = self
            .unreleased
            .keys()
            .filter(|t| want.get(t) == Some(&Role::Active))
            .copied()
            .collect();
        let mut carried = BTreeMap::new();
        for t in back {
            if let Some(p) = self.unreleased.remove(&t) {
                carried.insert(t, p);
            }
        }
        let offsets: Vec<Position> = self
            .unreleased
            .iter()
            .flat_map(|(id, left)| left.iter().map(move |(tp, at)| (*id, tp.clone(), *at)))
            .collect();
        // Whatever commit was in flight belonged to the old generation.
        self.commit = None;
        self.send_commit(offsets, out);
        for id in released {
            self.tasks.remove(&id);
            out.push(Command::Close { task: id });
        }
        (revoked, carried)
    }

    /// Each wanted task takes its role: a new task starts opening, a held one changes role.
    fn take_roles(&mut self, want: BTreeMap<TaskId, Role>, mut carried: Carried) {
        let fresh = self.fresh();
        for (id, role) in want {
            let t = match self.tasks.entry(id) {
                std::collections::btree_map::Entry::Occupied(e) => {
                    let t = e.into_mut();
                    if t.role != role {
                        if t.phase == Phase::Opening {
                            // Opened, it enters the role; until then it holds no positions
                            // of the role it had (a revoked active's are being committed).
                            t.role = role;
                            if role != Role::Active {
                                t.forget_positions();
                            }
                        } else {
                            t.enter(role, fresh);
                        }
                    }
                    t
                }
                std::collections::btree_map::Entry::Vacant(e) => {
                    let changelogs = self.topology.changelog_partitions(id);
                    let sources = self.topology.source_partitions(id);
                    e.insert(TaskState::new(id, role, changelogs, sources))
                }
            };
            // Given back before its revocation commit landed: it resumes where it was, whether
            // it stayed on as a copy (a standby in between) or is opened anew. Resuming from
            // the committed offset would repeat output already acknowledged.
            for (tp, at) in carried.remove(&id).unwrap_or_default() {
                if let Some(s) = t.sources.iter_mut().find(|s| s.tp == tp) {
                    s.position = Some(at);
                }
            }
        }
    }

    /// `task` cannot go on: its input stays where it was (no fetch, no batch, nothing
    /// committed past it) until it is reassigned, the process restarts, or (when configured)
    /// its retry is due. An active keeps its partitions (see [`Self::report`]).
    fn stop_task(&mut self, task: TaskId, now: Duration) {
        if let Some(t) = self.tasks.get_mut(&task) {
            t.phase = Phase::Failed;
            t.retry_at = self.cfg.failed_task_retry.map(|first| {
                t.failures += 1;
                now + failed_task_delay(first, t.failures)
            });
        }
    }

    /// Counts a failure of `task`; the wait before its retry.
    fn failed(&mut self, task: TaskId) -> Duration {
        match self.tasks.get_mut(&task) {
            Some(t) => {
                t.failures += 1;
                self.cfg.retry_backoff.delay(t.failures)
            }
            None => self.cfg.retry_backoff.first,
        }
    }

    fn retry_later(&mut self, task: TaskId, now: Duration, after: Duration) {
        if let Some(t) = self.tasks.get_mut(&task) {
            if t.phase == Phase::Opening {
                t.retry_at = Some(now + after);
            }
        }
    }

    /// The store failed: release it and open it again, so it restores from its checkpoint.
    fn reopen(&mut self, task: TaskId, now: Duration, out: &mut Vec<Command>) {
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        out.push(Command::Close { task });
        let failures = t.failures + 1;
        let mut fresh = TaskState::new(
            task,
            t.role,
            t.changelogs.iter().map(|c| c.tp.clone()).collect(),
            t.sources.iter().map(|s| s.tp.clone()).collect(),
        );
        fresh.failures = failures;
        fresh.retry_at = Some(now + self.cfg.retry_backoff.delay(failures));
        fresh.sources = t.sources.clone();
        *t = fresh;
    }

    fn shutdown(&mut self, _now: Duration, out: &mut Vec<Command>) {
        self.commit = None;
        self.commit_now(out);
        for id in self.tasks.keys().copied().collect::<Vec<_>>() {
            out.push(Command::Close { task: id });
        }
        self.tasks.clear();
        if !self.cfg.static_membership {
            out.push(Command::Leave);
        }
        out.push(Command::Exit(Exit::Shutdown));
        self.stopped = true;
    }
}

type ByPartition<'a> = BTreeMap<&'a TopicPartition, &'a FetchResult>;

/// A restoring or tailing copy takes what a fetch brought of its changelogs; a changelog
/// found to end before its store is added to `behind`.
fn absorb_fetched(
    t: &mut TaskState,
    by_tp: &ByPartition<'_>,
    behind: &mut Vec<(TaskId, usize, String)>,
    out: &mut Vec<Command>,
) {
    for (i, c) in t.changelogs.iter_mut().enumerate() {
        let Some(r) = by_tp.get(&c.tp) else { continue };
        // An answer for another position is stale (the task was reopened).
        let (Some(hw), true) = (r.high_watermark, r.from == c.fetch_position) else {
            continue;
        };
        if hw < c.fetch_position {
            // The changelog ends before what the store holds: the topic was
            // made again, or the broker lost its data (see [`Reseed`]).
            behind.push((
                t.id,
                i,
                format!(
                    "its checkpoint {} is past its changelog's end {hw} ({})",
                    c.fetch_position, c.tp
                ),
            ));
            break;
        }
        c.end = Some(hw);
        if r.next > c.fetch_position {
            c.fetch_position = r.next;
        }
        out.push(Command::Absorb {
            task: t.id,
            changelog: i,
            end: hw,
        });
    }
}

/// A running active's input in a fetch: the batch to process (task, inputs, whether it
/// reaches the end of every source it read), if any. A position past a partition's end has
/// its partition's offsets asked.
fn inputs_fetched(
    t: &mut TaskState,
    by_tp: &ByPartition<'_>,
    out: &mut Vec<Command>,
) -> Option<(TaskId, Vec<Input>, bool)> {
    // Kafka answers a fetch past the end with OFFSET_OUT_OF_RANGE
    // ([`Event::SourceOutOfRange`]); a broker that answers with nothing
    // (nisshi) says the same by a high watermark below the position. A source
    // position is never past what a fetch showed unless the topic was made
    // again.
    for (i, s) in t.sources.iter_mut().enumerate() {
        let (Some(r), Some(at)) = (by_tp.get(&s.tp), s.position) else {
            continue;
        };
        if r.from == at && r.high_watermark.is_some_and(|hw| at > hw) && !s.resetting {
            s.resetting = true;
            out.push(Command::ListSourceOffsets {
                task: t.id,
                source: i,
                offset: at,
            });
        }
    }
    let inputs: Vec<Input> = t
        .sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let r = by_tp.get(&s.tp)?;
            let from = s.position?;
            (r.from == from && r.next > from).then_some(Input {
                source: i,
                from,
                to: r.next,
            })
        })
        .collect();
    let caught_up = inputs.iter().all(|i| {
        let end = by_tp
            .get(&t.sources[i.source].tp)
            .and_then(|r| r.high_watermark);
        end.is_some_and(|end| i.to >= end)
    });
    (!inputs.is_empty()).then_some((t.id, inputs, caught_up))
}

impl TaskState {
    /// The changelog end has been seen for every store.
    fn restored_end_known(&self) -> bool {
        self.changelogs.iter().all(|c| c.end.is_some())
    }
}
