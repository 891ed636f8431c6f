//! One held task as the machine sees it: its role and phase, and cursors into its changelogs
//! and sources. Offsets only; the records and the store live in the driver.

use std::time::Duration;

use baton_assignor::TaskId;
use baton_protocol::TopicPartition;

use crate::status::{Phase, Role};

use super::RequestId;

/// Where a store stands in one changelog partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogCursor {
    pub tp: TopicPartition,
    /// The next offset to fetch: ahead of `stored` by what the driver holds for a bulk load.
    pub fetch_position: i64,
    /// The next offset the store lacks: its checkpoint.
    pub stored: i64,
    /// The changelog's end as last seen; `None` until a fetch has answered.
    pub end: Option<i64>,
    /// The store is taking a bulk load and cannot take another chunk until it ends: the
    /// changelog is left out of fetches meanwhile.
    pub loading: bool,
}

impl ChangelogCursor {
    pub fn lag(&self) -> u64 {
        self.end.map_or(0, |e| (e - self.stored).max(0) as u64)
    }

    fn caught_up(&self) -> bool {
        self.end.is_some_and(|e| self.stored >= e)
    }
}

/// Where an active stands in one source partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceCursor {
    pub tp: TopicPartition,
    /// The next offset to process; everything before it is in the changelog and the sink.
    /// `None` until the committed offset has been read.
    pub position: Option<i64>,
    /// The position the group has committed.
    pub committed: Option<i64>,
    /// The position was not in the partition, and its start and end are being listed
    /// ([`super::Command::ListSourceOffsets`]): no fetch until they are.
    pub resetting: bool,
    /// The topic was deleted and made again: the position, once known, belongs to the old
    /// one and is placed anew by `auto.offset.reset` in the new one.
    pub made_again: bool,
}

/// A changelog found shorter than its store's checkpoint (deleted and made again, or its
/// broker lost its data) while the store is intact: the task's stores are written into it
/// again, so it never rebuilds a store from a changelog younger than the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reseed {
    /// Found behind while restoring: the group's committed input positions decide. With
    /// them, the store is newer than the changelog and is written into it; without them (a
    /// broker that lost everything) the input is read again from its start, and the store is
    /// rebuilt from the changelog so nothing is counted twice.
    Checking { changelogs: Vec<usize> },
    /// To be written at the next chance ([`super::Command::Reseed`]).
    Due { changelogs: Vec<usize> },
    /// The driver is writing the stores into these changelogs.
    Writing {
        request: RequestId,
        changelogs: Vec<usize>,
    },
}

impl Reseed {
    pub fn changelogs(&self) -> &[usize] {
        match self {
            Reseed::Checking { changelogs }
            | Reseed::Due { changelogs }
            | Reseed::Writing { changelogs, .. } => changelogs,
        }
    }
}

/// A processing batch the driver is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub id: RequestId,
    /// (source index, offset after the batch).
    pub inputs: Vec<(usize, i64)>,
    /// The batch reaches the end its fetch saw in every source it reads.
    pub caught_up: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskState {
    pub id: TaskId,
    pub role: Role,
    pub phase: Phase,
    pub changelogs: Vec<ChangelogCursor>,
    pub sources: Vec<SourceCursor>,
    pub batch: Option<Batch>,
    /// Asked the driver for the committed offsets (the last step of a restore).
    pub reading_committed: bool,
    /// Not before this time: the next open attempt or batch, after a failure.
    pub retry_at: Option<Duration>,
    /// A warm-up within the acceptable lag has asked for its follow-up rebalance already.
    pub reported_caught_up: bool,
    /// Answers to fetches older than this are ignored: they may predate the role (a promoted
    /// standby must see the changelog end after its previous owner's last write).
    pub fresh_from: RequestId,
    /// Failures since the task last made progress: each retry waits longer.
    pub failures: u32,
    /// A restoring active asked for its changelogs' ends (see [`super::Command::ListEnds`]).
    pub ends_asked: bool,
    /// Commit once a batch reaches the input's end: set when the task starts running (it was
    /// taken over, or the process restarted) and when a batch is left behind (a backlog).
    /// What a crash repeats is then what came since, not a whole commit interval's backlog.
    pub commit_when_caught_up: bool,
    /// When its next wall-clock punctuation is due, once it runs (see
    /// [`super::Command::Punctuate`]).
    pub next_punctuation: Option<std::time::Duration>,
    /// Changelogs being written again from the stores: no fetch, no batch meanwhile.
    pub reseed: Option<Reseed>,
}

impl TaskState {
    pub fn new(
        id: TaskId,
        role: Role,
        changelogs: Vec<TopicPartition>,
        sources: Vec<TopicPartition>,
    ) -> TaskState {
        TaskState {
            id,
            role,
            phase: Phase::Opening,
            changelogs: changelogs
                .into_iter()
                .map(|tp| ChangelogCursor {
                    tp,
                    fetch_position: 0,
                    stored: 0,
                    end: None,
                    loading: false,
                })
                .collect(),
            sources: sources
                .into_iter()
                .map(|tp| SourceCursor {
                    tp,
                    position: None,
                    committed: None,
                    resetting: false,
                    made_again: false,
                })
                .collect(),
            batch: None,
            reading_committed: false,
            retry_at: None,
            reported_caught_up: false,
            fresh_from: RequestId(0),
            failures: 0,
            ends_asked: false,
            commit_when_caught_up: true,
            next_punctuation: None,
            reseed: None,
        }
    }

    /// The stores are open at these checkpoints (one per changelog).
    pub fn opened(&mut self, checkpoints: &[i64], fresh_from: RequestId) {
        for (c, &at) in self.changelogs.iter_mut().zip(checkpoints) {
            c.fetch_position = at;
            c.stored = at;
            c.loading = false;
        }
        self.retry_at = None;
        self.enter(self.role, fresh_from);
    }

    /// Takes on `role` with the stores open: an active restores (only what its store lacks),
    /// a standby or warm-up follows its changelogs. Ends seen before are forgotten.
    pub fn enter(&mut self, role: Role, fresh_from: RequestId) {
        self.fresh_from = fresh_from;
        for c in &mut self.changelogs {
            c.end = None;
        }
        self.role = role;
        self.phase = match role {
            Role::Active => Phase::Restoring,
            Role::Standby | Role::Warmup => Phase::Tailing,
        };
        self.reading_committed = false;
        self.reported_caught_up = false;
        self.ends_asked = false;
        self.batch = None;
        // A standby's changelog found behind is rebuilt; a promotion re-checks it.
        if role != Role::Active {
            self.reseed = None;
        }
        if role != Role::Active {
            self.forget_positions();
        }
    }

    /// Its last positions went into the revocation commit; a copy that does not run must
    /// never commit them again, when someone else may have moved on.
    pub fn forget_positions(&mut self) {
        for s in &mut self.sources {
            s.position = None;
            s.committed = None;
        }
    }

    /// Changelog records the stores lack, summed.
    pub fn lag(&self) -> u64 {
        self.changelogs.iter().map(ChangelogCursor::lag).sum()
    }

    /// Every store holds its whole changelog as last seen.
    pub fn restored(&self) -> bool {
        self.changelogs.iter().all(ChangelogCursor::caught_up)
    }

    /// The offset sum a subscription reports for a task that is not a running active.
    pub fn offset_sum(&self) -> i64 {
        self.changelogs.iter().map(|c| c.stored).sum()
    }

    /// Positions processed past the last commit, once its changelogs hold their state. A task
    /// reopened after its store failed carries its positions while it restores: they count too.
    pub fn uncommitted(&self) -> Vec<(TopicPartition, i64)> {
        // A changelog being written again from the store lacks the state of these positions
        // until it is done: committed now, a task moved meanwhile would restore without it.
        if self.role != Role::Active || self.reseed.is_some() {
            return Vec::new();
        }
        self.sources
            .iter()
            .filter_map(|s| match (s.position, s.committed) {
                (Some(p), c) if c != Some(p) => Some((s.tp.clone(), p)),
                _ => None,
            })
            .collect()
    }

    /// A batch's or a cache flush's writes landed in the changelogs: (changelog index, the
    /// first offset they took, the offset after them).
    pub(super) fn changelogs_written(&mut self, changelogs: Vec<(usize, i64, i64)>) {
        let mut behind = Vec::new();
        for (i, first, next) in changelogs {
            if let Some(c) = self.changelogs.get_mut(i) {
                if first < c.stored {
                    // The batch's writes landed before the store's checkpoint (the one writer
                    // of a changelog writes at its end): it was made again under the running
                    // task, holding only what came since, however much the batch wrote.
                    behind.push(i);
                }
                c.stored = c.stored.max(next);
                c.fetch_position = c.fetch_position.max(next);
                c.end = Some(c.end.unwrap_or(0).max(next));
            }
        }
        if !behind.is_empty() && self.reseed.is_none() {
            self.reseed = Some(Reseed::Due { changelogs: behind });
        }
    }

    pub fn is_running_active(&self) -> bool {
        self.role == Role::Active && self.phase == Phase::Running
    }
}
