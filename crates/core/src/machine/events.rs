//! The thread machine's answers to events, one method each, called from
//! [`ThreadMachine::handle`](super::ThreadMachine::handle).

use std::time::Duration;

use baton_assignor::TaskId;

use super::*;

impl ThreadMachine {
    /// The coordinator's answer to a heartbeat.
    pub(super) fn on_heartbeat(&mut self, answer: Heartbeat, at: Duration, out: &mut Vec<Command>) {
        match answer {
            Heartbeat::Alive => self.alive_at = self.alive_at.max(at),
            Heartbeat::Rebalancing => {
                self.alive_at = self.alive_at.max(at);
                // Sent before the current assignment was taken in, the answer may be about
                // the round that produced it: rejoining would start another round, whose
                // heartbeats would start another (a storm seen live, at one round per
                // heartbeat interval). If a new round did start, the next heartbeat says so.
                if !self.is_joining() && at >= self.assigned_at {
                    if self.unreleased.is_empty() {
                        out.push(self.join(JoinReason::GroupRebalancing));
                    } else {
                        // As a Kafka consumer finishes revoking before it sends JoinGroup:
                        // joining now would claim the revoked actives again, and the round
                        // would hold them back from their new owner for one more round.
                        // The round waits for this member; the commit has a deadline.
                        self.rejoin_when_released = true;
                    }
                }
            }
            // During a round this only says the round ended; its answer is on the way.
            Heartbeat::Fenced if self.is_joining() || at < self.assigned_at => {}
            Heartbeat::Fenced => self.fenced(JoinReason::Fenced, out),
            Heartbeat::Failed => {}
        }
    }

    /// `baton drain` for this instance: commit, then leave through a rebalance.
    pub(super) fn on_drain_requested(&mut self, out: &mut Vec<Command>) {
        if !self.leaving {
            self.leaving = true;
            self.commit_now(out);
            out.push(self.join(JoinReason::DrainRequested));
        }
    }

    /// A drain taken back before it ended.
    pub(super) fn on_drain_cancelled(&mut self, out: &mut Vec<Command>) {
        // Once drained the thread has left; nothing is taken back then.
        if self.leaving && !self.stopped {
            self.leaving = false;
            if !self.is_joining() {
                out.push(self.join(JoinReason::DrainCancelled));
            }
        }
    }

    /// Writing a changelog again from the store failed: due again after a wait.
    pub(super) fn on_reseed_failed(&mut self, task: TaskId, request: RequestId, now: Duration) {
        if let Some(t) = self.tasks.get_mut(&task) {
            if let Some(Reseed::Writing {
                request: r,
                changelogs,
            }) = &t.reseed
            {
                if *r == request {
                    t.reseed = Some(Reseed::Due {
                        changelogs: changelogs.clone(),
                    });
                    t.failures += 1;
                    t.retry_at = Some(now + self.cfg.retry_backoff.delay(t.failures));
                }
            }
        }
    }

    /// A restored active learns where its input starts: it runs.
    pub(super) fn on_committed_read(&mut self, task: TaskId, offsets: Vec<Option<i64>>) {
        if let Some(t) = self.tasks.get_mut(&task) {
            if t.phase == Phase::Restoring && t.reading_committed {
                for (s, o) in t.sources.iter_mut().zip(offsets) {
                    // Nothing committed yet: from the start (`auto.offset.reset=earliest`).
                    let committed = o.unwrap_or(0).max(0);
                    // A position of our own beyond it was processed into the changelog
                    // already (its commit failed): going back would repeat output.
                    let at = s.position.map_or(committed, |p| p.max(committed));
                    s.position = Some(at);
                    s.committed = Some(committed);
                }
                t.reading_committed = false;
                t.phase = Phase::Running;
                t.commit_when_caught_up = true;
            }
        }
    }

    /// A running source's position is not in its partition: its start and end are asked.
    pub(super) fn on_source_out_of_range(
        &mut self,
        task: TaskId,
        source: usize,
        offset: i64,
        out: &mut Vec<Command>,
    ) {
        if let Some(s) = self.running_source(task, source, offset) {
            if !s.resetting {
                s.resetting = true;
                out.push(Command::ListSourceOffsets {
                    task,
                    source,
                    offset,
                });
            }
        }
    }

    /// A source's start and end: the position moves as `auto.offset.reset` says, or the task
    /// stops when it says none.
    pub(super) fn on_source_offsets_listed(
        &mut self,
        task: TaskId,
        source: usize,
        offset: i64,
        (earliest, latest): (i64, i64),
        out: &mut Vec<Command>,
    ) {
        let reset = self.cfg.auto_offset_reset;
        if let Some(s) = self.running_source(task, source, offset) {
            s.resetting = false;
            let made_again = std::mem::take(&mut s.made_again);
            // Within the partition after all: the topic grew since the fetch. Unless
            // it is another topic of the same name, where the position means nothing.
            if made_again || !(earliest..=latest).contains(&offset) {
                let to = reset.position(earliest, latest);
                match to {
                    Some(to) => s.position = Some(to),
                    None => {
                        if let Some(t) = self.tasks.get_mut(&task) {
                            t.phase = Phase::Failed;
                        }
                    }
                }
                out.push(Command::SourceReset {
                    task,
                    source,
                    from: offset,
                    to,
                    made_again,
                });
            }
        }
    }

    /// Reading the committed offsets failed: the task tries again after a wait.
    pub(super) fn on_committed_read_failed(&mut self, task: TaskId, now: Duration) {
        if let Some(t) = self.tasks.get_mut(&task) {
            if matches!(t.reseed, Some(Reseed::Checking { .. })) {
                // The next fetch finds the changelog behind again, after the wait.
                t.reseed = None;
            }
            t.reading_committed = false;
            t.failures += 1;
            t.retry_at = Some(now + self.cfg.retry_backoff.delay(t.failures));
        }
    }

    /// A batch failed: `false` when it is not the task's batch under way (nothing more to do
    /// for this event, not even the poll).
    pub(super) fn on_batch_failed(
        &mut self,
        task: TaskId,
        batch: RequestId,
        output_acknowledged: bool,
        now: Duration,
        out: &mut Vec<Command>,
    ) -> bool {
        let Some(t) = self.tasks.get_mut(&task) else {
            return false;
        };
        let Some(b) = t.batch.take_if(|b| b.id == batch) else {
            return false;
        };
        if output_acknowledged {
            // The changelog and the sink hold the batch; running it again would
            // repeat acknowledged output. The input is done; the store is rebuilt.
            for (i, next) in b.inputs {
                t.sources[i].position = Some(next);
            }
            let uncommitted = t.uncommitted();
            self.commit_offsets(task, uncommitted, out);
            self.reopen(task, now, out);
        } else {
            t.failures += 1;
            t.retry_at = Some(now + self.cfg.retry_backoff.delay(t.failures));
        }
        true
    }

    /// `baton retry`: every failed task is opened again.
    pub(super) fn on_retry_failed(&mut self, now: Duration, out: &mut Vec<Command>) {
        let failed: Vec<TaskId> = self
            .tasks
            .values()
            .filter(|t| t.phase == Phase::Failed)
            .map(|t| t.id)
            .collect();
        for task in failed {
            if let Some(t) = self.tasks.get_mut(&task) {
                // Asked for: at the first backoff step, not after the failures so far.
                t.failures = 0;
            }
            // Closed and opened again: restored, then its input from where it stopped.
            self.reopen(task, now, out);
        }
    }

    /// A commit ended: on success the committed positions move and revoked actives whose
    /// offsets are in are released.
    pub(super) fn on_commit_done(&mut self, commit: RequestId, ok: bool, out: &mut Vec<Command>) {
        if let Some((id, offsets)) = self.commit.take() {
            if id != commit {
                self.commit = Some((id, offsets));
            } else if ok {
                for (task, tp, at) in offsets {
                    if let Some(s) = self
                        .tasks
                        .get_mut(&task)
                        .and_then(|t| t.sources.iter_mut().find(|s| s.tp == tp))
                    {
                        s.committed = Some(at);
                    }
                    if let Some(left) = self.unreleased.get_mut(&task) {
                        left.retain(|(p, o)| !(*p == tp && *o <= at));
                        if left.is_empty() {
                            self.unreleased.remove(&task);
                        }
                    }
                }
            }
            if self.rejoin_when_released && (self.unreleased.is_empty() || !ok) {
                // Released, or refused (a newer generation is under way): either way
                // the next round hands over, or lets the commit be retried.
                self.rejoin_when_released = false;
                if !self.is_joining() {
                    out.push(self.join(JoinReason::ReleasedRevokedActives));
                }
            }
        }
    }

    /// An event about one task: `false` when nothing more is to be done for it, not even
    /// the poll. Its stores and changelogs here; its input and batches in
    /// [`Self::on_input_event`].
    pub(super) fn on_task_event(
        &mut self,
        event: Event,
        now: Duration,
        out: &mut Vec<Command>,
    ) -> bool {
        match event {
            Event::Opened { task, checkpoints } => {
                let fresh = self.fresh();
                if let Some(t) = self.tasks.get_mut(&task) {
                    if t.phase == Phase::Opening {
                        t.opened(&checkpoints, fresh);
                    }
                }
            }
            Event::OpenBusy { task } => self.retry_later(task, now, Duration::from_millis(20)),
            Event::OpenFailed { task, .. } => {
                let after = self.failed(task);
                self.retry_later(task, now, after)
            }
            Event::EndsListed {
                task,
                request,
                ends,
            } => self.ends_listed(task, request, &ends),
            Event::Absorbed {
                task,
                changelog,
                stored,
                loading,
            } => self.absorbed(task, changelog, (stored, loading), out),
            Event::LoadEnded { task, changelog } => self.load_ended(task, changelog),
            Event::StoreFailed { task, fault } => {
                if let StoreFault::Corrupt(why) = fault {
                    out.push(Command::Discard { task, why });
                }
                self.reopen(task, now, out)
            }
            Event::ChangelogOutOfRange {
                task,
                changelog,
                offset,
            } if self.reading_changelog(task, changelog) == Some(offset) => {
                let why = format!("its checkpoint {offset} is past its changelog's end");
                self.changelog_behind(task, changelog, why, now, out);
            }
            Event::Reseeded {
                task,
                request,
                ends,
            } => self.reseeded(task, request, &ends),
            Event::ReseedFailed { task, request } => self.on_reseed_failed(task, request, now),
            Event::ChangelogRecreated { task, changelog } => {
                self.changelog_recreated(task, changelog, now, out)
            }
            event => return self.on_input_event(event, now, out),
        }
        true
    }

    /// An event about a task's input, offsets or batches: as [`Self::on_task_event`].
    fn on_input_event(&mut self, event: Event, now: Duration, out: &mut Vec<Command>) -> bool {
        match event {
            Event::CommittedRead { task, offsets }
                if self
                    .tasks
                    .get(&task)
                    .is_some_and(|t| matches!(t.reseed, Some(Reseed::Checking { .. }))) =>
            {
                self.reseed_or_rebuild(task, &offsets, now, out)
            }
            Event::CommittedRead { task, offsets } => self.on_committed_read(task, offsets),
            Event::SourceOutOfRange {
                task,
                source,
                offset,
            } => self.on_source_out_of_range(task, source, offset, out),
            Event::SourceOffsetsListed {
                task,
                source,
                offset,
                earliest,
                latest,
            } => self.on_source_offsets_listed(task, source, offset, (earliest, latest), out),
            Event::SourceOffsetsListFailed { task, source } => {
                if let Some(s) = self.source_mut(task, source) {
                    s.resetting = false;
                }
            }
            Event::CommittedReadFailed { task } => self.on_committed_read_failed(task, now),
            Event::BatchDone {
                task,
                batch,
                changelogs,
            } => self.batch_done(task, batch, changelogs),
            Event::BatchFailed {
                task,
                batch,
                output_acknowledged,
            } => return self.on_batch_failed(task, batch, output_acknowledged, now, out),
            Event::CacheFlushed { task, changelogs } => {
                if let Some(t) = self.tasks.get_mut(&task) {
                    t.changelogs_written(changelogs);
                }
            }
            Event::CacheDropped { task, from, why } => self.cache_dropped(task, &from, why, now),
            Event::RecordFailed { task, batch } => {
                if let Some(t) = self.tasks.get_mut(&task) {
                    if t.batch.take_if(|b| b.id == batch).is_some() {
                        self.stop_task(task, now);
                    }
                }
            }
            Event::Unreadable { task } => {
                let held = self.tasks.get(&task).is_some_and(|t| {
                    matches!(t.phase, Phase::Running | Phase::Restoring | Phase::Tailing)
                        && t.batch.is_none()
                });
                if held {
                    self.stop_task(task, now);
                }
            }
            Event::SourceRecreated { task, source } => {
                if let Some(s) = self.source_mut(task, source) {
                    s.made_again = true;
                }
            }
            Event::InputSkipped {
                task,
                source,
                from,
                to,
            } => {
                if let Some(s) = self.running_source(task, source, from) {
                    s.position = Some(to.max(from));
                }
            }
            _ => {}
        }
        true
    }

    /// Source `source` of `task`, whatever the task's phase.
    fn source_mut(&mut self, task: TaskId, source: usize) -> Option<&mut SourceCursor> {
        self.tasks.get_mut(&task)?.sources.get_mut(source)
    }
}
