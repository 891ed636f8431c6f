//! The instances: each stream thread is a [`ThreadMachine`], and this is its driver. It does
//! what the runtime's thread does with each command, against the simulated broker, coordinator
//! and store instead of real ones.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_assignor::TaskId;
use baton_core::machine::{
    Command, Event, FetchResult, FetchWant, JoinReason, MachineConfig, RequestId, ThreadMachine,
};
use baton_protocol::TopicPartition;

use super::logs::Partition;
use super::{Engine, Pending, CHUNK, FETCH_LATENCY, IDLE_POLL, POLL, REQUEST_LATENCY};
use crate::scenario::InstanceSpec;

pub struct Thread {
    /// `None` once the thread has exited.
    pub machine: Option<ThreadMachine>,
    pub member_id: Option<String>,
    /// Task indices this thread runs as a running active, as last seen, in order.
    running: Vec<usize>,
    /// When the leader asked this thread for the next probing rebalance.
    pub(super) probe_at: Option<std::time::Duration>,
    pub(super) unique: i8,
    /// The store worker is busy until then.
    store_free_at: Duration,
    /// Chunks handed to the store and not yet taken in, per changelog.
    queued: BTreeMap<TopicPartition, u32>,
    /// What the last fetch brought of each changelog: `(from, next)`.
    buffers: BTreeMap<TopicPartition, (i64, i64)>,
}

pub struct Instance {
    pub spec: InstanceSpec,
    pub(super) pid: u128,
    /// Bumped by a crash: answers meant for the dead process are dropped.
    pub life: u32,
    pub alive: bool,
    pub leaving_since: Option<Duration>,
    pub threads: Vec<Thread>,
    /// Each task's store checkpoint on this instance's disk.
    pub disk: BTreeMap<TaskId, i64>,
    /// Which thread holds each task's stores open.
    open: BTreeMap<TaskId, usize>,
}

impl Instance {
    /// Alive with at least one thread that has not exited.
    pub fn running(&self) -> bool {
        self.alive && self.threads.iter().any(|t| t.machine.is_some())
    }

    /// Nothing in flight on this instance: every thread a member of the group, no warm-up, no
    /// active that is not running and no probing rebalance to come.
    pub fn quiet(&self, now: Duration) -> bool {
        if !self.alive {
            return true;
        }
        self.threads.iter().all(|t| {
            let Some(m) = &t.machine else { return true };
            !m.is_joining()
                && t.probe_at.is_none_or(|p| p <= now)
                && m.tasks().values().all(|task| match task.role {
                    baton_core::status::Role::Active => task.is_running_active(),
                    baton_core::status::Role::Standby => true,
                    baton_core::status::Role::Warmup => false,
                })
        })
    }
}

impl Thread {
    /// Nothing to restore: every active running, every copy within `lag` of its changelog
    /// (a chunk may still be on its way into the store), not joining.
    fn steady(&self, lag: u64) -> bool {
        let Some(m) = &self.machine else { return true };
        !m.is_joining()
            && m.tasks().values().all(|task| match task.role {
                baton_core::status::Role::Active => task.is_running_active(),
                _ => task.phase == baton_core::status::Phase::Tailing && task.lag() <= lag,
            })
    }
}

impl Instance {
    /// Every thread steady (see [`Thread::steady`]).
    pub fn steady(&self, lag: u64) -> bool {
        !self.alive || self.threads.iter().all(|t| t.steady(lag))
    }
}

fn chunk_records(restore_rate: f64) -> i64 {
    ((restore_rate * CHUNK.as_secs_f64()).round() as i64).max(1)
}

impl Engine<'_> {
    fn machine_config(&self) -> MachineConfig {
        MachineConfig {
            session_timeout: self.session,
            write_timeout: self.session / 3,
            commit_interval: Duration::from_secs(5),
            acceptable_recovery_lag: self.config.acceptable_recovery_lag,
            restore_fetch_bytes: 1 << 20,
            restore_fetch_bytes_beside_actives: 1 << 20,
            input_fetch_bytes: 1 << 20,
            static_membership: false,
            retry_backoff: baton_core::Backoff {
                first: Duration::from_millis(100),
                max: Duration::from_millis(3_200),
                attempts: u32::MAX,
            },
            rejoin_mode: self.rejoin_mode(),
            auto_offset_reset: baton_core::config::OffsetReset::Earliest,
            failed_task_retry: None,
            on_oversized_record: Default::default(),
            fetch_beside_batches: false,
            wall_clock: std::collections::BTreeMap::new(),
        }
    }

    pub(super) fn add_instance(&mut self, spec: &InstanceSpec) {
        let cfg = self.machine_config();
        let ii = self.insts.len();
        let mut threads = Vec::new();
        let mut starts = Vec::new();
        for _ in 0..spec.threads {
            let mut machine = ThreadMachine::new(cfg.clone(), self.logs.topology.clone(), self.now);
            starts.push(machine.start());
            threads.push(Thread {
                machine: Some(machine),
                member_id: None,
                running: Vec::new(),
                probe_at: None,
                unique: 0,
                store_free_at: self.now,
                queued: BTreeMap::new(),
                buffers: BTreeMap::new(),
            });
        }
        self.insts.push(Instance {
            spec: spec.clone(),
            pid: ii as u128 + 1,
            life: 0,
            alive: true,
            leaving_since: None,
            threads,
            disk: self.seeded.remove(&spec.id).unwrap_or_default(),
            open: BTreeMap::new(),
        });
        for (ti, cmds) in starts.into_iter().enumerate() {
            self.execute_all(ii, ti, cmds);
        }
    }

    pub(super) fn drain(&mut self, ii: usize, supported: bool) {
        if !supported {
            self.stop(ii);
            return;
        }
        if !self.insts[ii].running() {
            return;
        }
        self.insts[ii].leaving_since.get_or_insert(self.now);
        for ti in 0..self.insts[ii].threads.len() {
            self.handle_now(ii, ti, Event::DrainRequested);
        }
    }

    /// A graceful shutdown: each thread commits, closes its tasks and leaves the group.
    pub(super) fn stop(&mut self, ii: usize) {
        for ti in 0..self.insts[ii].threads.len() {
            self.handle_now(ii, ti, Event::Shutdown);
        }
        self.insts[ii].alive = false;
    }

    /// `kill -9`: the coordinator notices when the members' sessions run out.
    pub(super) fn crash(&mut self, ii: usize) {
        if !self.insts[ii].alive {
            return;
        }
        let inst = &mut self.insts[ii];
        inst.alive = false;
        inst.life += 1;
        inst.open.clear();
        let mut lost = Vec::new();
        for t in &mut inst.threads {
            t.machine = None;
            lost.extend(std::mem::take(&mut t.running));
        }
        for t in lost {
            self.holders[t] -= 1;
            self.refresh(t);
        }
        self.record_unavailable();
        let expiries: Vec<Duration> = self.insts[ii]
            .threads
            .iter()
            .filter_map(|t| self.group.members.get(t.member_id.as_ref()?))
            .map(|(_, seen)| *seen + self.session)
            .collect();
        for at in expiries {
            self.schedule(at, Pending::Sessions);
        }
    }

    /// Hands `event` to a thread now and does what it says.
    pub(super) fn handle_now(&mut self, ii: usize, ti: usize, event: Event) {
        let now = self.now;
        let inst = &mut self.insts[ii];
        if !inst.alive {
            return;
        }
        let Some(m) = inst.threads[ti].machine.as_mut() else {
            return;
        };
        let cmds = m.handle(event, now);
        self.execute_all(ii, ti, cmds);
    }

    pub(super) fn deliver(&mut self, ii: usize, ti: usize, life: u32, event: Event) {
        if self.insts[ii].life == life {
            self.handle_now(ii, ti, event);
        }
    }

    pub(super) fn send(&mut self, ii: usize, ti: usize, after: Duration, event: Event) {
        let life = self.insts[ii].life;
        self.schedule(
            self.now + after,
            Pending::Deliver {
                inst: ii,
                thread: ti,
                life,
                event,
            },
        );
    }

    fn execute_all(&mut self, ii: usize, ti: usize, cmds: Vec<Command>) {
        for c in cmds {
            self.execute(ii, ti, c);
        }
        self.sync_running(ii, ti);
    }

    /// Counts the thread's running actives again.
    fn sync_running(&mut self, ii: usize, ti: usize) {
        let thread = &self.insts[ii].threads[ti];
        let mut now: Vec<usize> = Vec::with_capacity(thread.running.len() + 1);
        if let (Some(m), true) = (&thread.machine, self.insts[ii].alive) {
            // In task order, as `running` is.
            now.extend(
                m.tasks()
                    .values()
                    .filter(|t| t.is_running_active())
                    .filter_map(|t| self.logs.index.get(&t.id).copied()),
            );
        }
        if now == thread.running {
            return;
        }
        let before = std::mem::replace(&mut self.insts[ii].threads[ti].running, now.clone());
        for t in before.iter().filter(|t| now.binary_search(t).is_err()) {
            self.holders[*t] -= 1;
            self.refresh(*t);
        }
        for t in now.iter().filter(|t| before.binary_search(t).is_err()) {
            self.holders[*t] += 1;
            self.refresh(*t);
        }
        self.record_unavailable();
    }

    fn execute(&mut self, ii: usize, ti: usize, c: Command) {
        let now = self.now;
        match c {
            Command::Join { reason, report } => {
                // The join after handing back revoked actives starts the cooperative
                // protocol's second round; an eager group neither pauses nor counts it.
                let release = reason == JoinReason::ReleasedRevokedActives;
                self.send_join(ii, ti, &report, release);
            }
            Command::Leave => {
                let id = self.insts[ii].threads[ti].member_id.take();
                if id.is_some_and(|id| self.group.leave(&id)) {
                    self.start_round();
                    self.try_finish_round();
                }
            }
            Command::Exit(_) => {
                let inst = &mut self.insts[ii];
                inst.threads[ti].machine = None;
                inst.open.retain(|_, t| *t != ti);
                if inst.threads.iter().all(|t| t.machine.is_none()) {
                    inst.alive = false;
                }
            }
            Command::Open { task, .. } => self.open(ii, ti, task),
            Command::Close { task } => self.close(ii, ti, task),
            Command::Discard { task, .. } => {
                self.insts[ii].disk.remove(&task);
            }
            Command::Persist { .. } => {}
            Command::Reseed { task, request, .. } => {
                // Simulated changelogs are never deleted, so none ends before its store.
                debug_assert!(false, "{task}: a re-seed in a simulation without faults");
                let event = Event::ReseedFailed { task, request };
                self.send(ii, ti, REQUEST_LATENCY, event);
            }
            Command::ReadCommitted { task } => {
                let committed = self.logs.index.get(&task);
                let offsets = vec![committed.and_then(|&t| self.logs.tasks[t].committed)];
                let event = Event::CommittedRead { task, offsets };
                self.send(ii, ti, REQUEST_LATENCY, event);
            }
            Command::Commit {
                commit,
                generation,
                member_id,
                offsets,
            } => {
                let ok = self.commit(generation, &member_id, offsets);
                self.send(ii, ti, REQUEST_LATENCY, Event::CommitDone { commit, ok });
            }
            Command::Process {
                task,
                batch,
                inputs,
            } => self.process(ii, ti, task, batch, &inputs),
            Command::Fetch { fetch, wants } => {
                let after = self.fetch_wait(ii, ti, &wants, now);
                let life = self.insts[ii].life;
                self.schedule(
                    now + after,
                    Pending::Fetch {
                        inst: ii,
                        thread: ti,
                        life,
                        fetch,
                        wants,
                    },
                );
            }
            Command::Absorb {
                task, changelog, ..
            } => self.absorb(ii, ti, task, changelog),
            // The simulated logs are never deleted or made again: no fetch is out of range.
            // Nor has its topology a wall-clock punctuation.
            Command::ListSourceOffsets { .. }
            | Command::SourceReset { .. }
            | Command::Punctuate { .. } => {}
            Command::ListEnds {
                task,
                request,
                changelogs,
            } => {
                let ends = changelogs
                    .iter()
                    .map(|tp| match self.logs.resolve(tp) {
                        Some(Partition::Changelog(t)) => self.logs.tasks[t].changelog_end(),
                        _ => 0,
                    })
                    .collect();
                let event = Event::EndsListed {
                    task,
                    request,
                    ends,
                };
                self.send(ii, ti, REQUEST_LATENCY, event);
            }
        }
    }

    fn close(&mut self, ii: usize, ti: usize, task: TaskId) {
        let inst = &mut self.insts[ii];
        if inst.open.get(&task) == Some(&ti) {
            inst.open.remove(&task);
        }
        for tp in self.logs.topology.changelog_partitions(task) {
            inst.threads[ti].buffers.remove(&tp);
        }
    }

    /// The coordinator takes a commit from a member of the current generation only.
    fn commit(
        &mut self,
        generation: i32,
        member_id: &str,
        offsets: Vec<(TopicPartition, i64)>,
    ) -> bool {
        let ok = generation == self.group.generation && self.group.members.contains_key(member_id);
        if ok {
            for (tp, at) in offsets {
                if let Some(Partition::Input(t)) = self.logs.resolve(&tp) {
                    self.logs.tasks[t].committed = Some(at);
                }
            }
        }
        ok
    }

    /// Opens a task's (simulated) stores at the checkpoint its instance's disk holds, unless
    /// another thread of the instance holds them.
    fn open(&mut self, ii: usize, ti: usize, task: TaskId) {
        let inst = &mut self.insts[ii];
        if inst.open.get(&task).is_some_and(|&t| t != ti) {
            self.send(ii, ti, REQUEST_LATENCY, Event::OpenBusy { task });
            return;
        }
        inst.open.insert(task, ti);
        let stateful = self
            .logs
            .index
            .get(&task)
            .is_some_and(|&t| self.logs.tasks[t].stateful);
        let checkpoints = if stateful {
            vec![inst.disk.get(&task).copied().unwrap_or(0)]
        } else {
            Vec::new()
        };
        self.send(ii, ti, REQUEST_LATENCY, Event::Opened { task, checkpoints });
    }

    /// A batch: its records appended to the task's changelog (one each), the store's
    /// checkpoint with them.
    fn process(
        &mut self,
        ii: usize,
        ti: usize,
        task: TaskId,
        batch: RequestId,
        inputs: &[baton_core::machine::Input],
    ) {
        let Some(&t) = self.logs.index.get(&task) else {
            return;
        };
        let n: i64 = inputs.iter().map(|i| (i.to - i.from).max(0)).sum();
        let log = &mut self.logs.tasks[t];
        let end = log.append(n);
        let changelogs = if log.stateful {
            self.insts[ii].disk.insert(task, end);
            vec![(0, end - n, end)]
        } else {
            Vec::new()
        };
        let event = Event::BatchDone {
            task,
            batch,
            changelogs,
        };
        self.send(ii, ti, REQUEST_LATENCY, event);
    }

    /// Whether a changelog's store has enough queued that a fetch leaves it out.
    fn busy(&self, ii: usize, ti: usize, tp: &TopicPartition) -> bool {
        self.insts[ii].threads[ti]
            .queued
            .get(tp)
            .copied()
            .unwrap_or(0)
            >= 2
    }

    /// How long the broker holds a fetch: briefly when a store has a real chunk to take,
    /// until the store frees up when every changelog is busy, else the long-poll wait.
    fn fetch_wait(&self, ii: usize, ti: usize, wants: &[FetchWant], now: Duration) -> Duration {
        let rate = self.insts[ii].spec.restore_rate;
        let worth = ((rate * 0.01) as i64).max(1);
        let mut any_busy = false;
        for w in wants {
            if let Some(Partition::Changelog(t)) = self.logs.resolve(&w.tp) {
                if self.busy(ii, ti, &w.tp) {
                    any_busy = true;
                } else if self.logs.tasks[t].changelog_end() - w.offset >= worth {
                    return FETCH_LATENCY;
                }
            }
        }
        let thread = &self.insts[ii].threads[ti];
        if any_busy {
            thread
                .store_free_at
                .saturating_sub(now)
                .clamp(Duration::from_millis(1), POLL)
        } else if thread.steady(self.config.acceptable_recovery_lag) {
            IDLE_POLL
        } else {
            POLL
        }
    }

    pub(super) fn answer_fetch(
        &mut self,
        ii: usize,
        ti: usize,
        life: u32,
        fetch: RequestId,
        wants: Vec<FetchWant>,
    ) {
        if self.insts[ii].life != life || !self.insts[ii].alive {
            return;
        }
        let chunk = chunk_records(self.insts[ii].spec.restore_rate);
        let mut results = Vec::new();
        for w in wants {
            match self.logs.resolve(&w.tp) {
                Some(Partition::Changelog(t)) => {
                    if self.busy(ii, ti, &w.tp) {
                        continue;
                    }
                    let end = self.logs.tasks[t].changelog_end();
                    let next = if w.offset >= end {
                        w.offset
                    } else {
                        end.min(w.offset + chunk)
                    };
                    self.insts[ii].threads[ti]
                        .buffers
                        .insert(w.tp.clone(), (w.offset, next));
                    results.push(FetchResult {
                        tp: w.tp,
                        from: w.offset,
                        next,
                        high_watermark: Some(end),
                    });
                }
                Some(Partition::Input(t)) => {
                    let end = self.logs.tasks[t].input_end(self.now);
                    results.push(FetchResult {
                        tp: w.tp,
                        from: w.offset,
                        next: end.max(w.offset),
                        high_watermark: Some(end),
                    });
                }
                None => {}
            }
        }
        self.handle_now(ii, ti, Event::Fetched { fetch, results });
    }

    /// Hands a fetched chunk to the thread's store worker, which takes chunks one at a time.
    fn absorb(&mut self, ii: usize, ti: usize, task: TaskId, changelog: usize) {
        let Some(tp) = self
            .logs
            .topology
            .changelog_partitions(task)
            .into_iter()
            .nth(changelog)
        else {
            return;
        };
        let rate = self.insts[ii].spec.restore_rate;
        let now = self.now;
        let life = self.insts[ii].life;
        let thread = &mut self.insts[ii].threads[ti];
        let Some((from, next)) = thread.buffers.remove(&tp) else {
            return;
        };
        let done = if next > from {
            let start = thread.store_free_at.max(now);
            let done = start + Duration::from_secs_f64((next - from) as f64 / rate);
            thread.store_free_at = done;
            *thread.queued.entry(tp).or_default() += 1;
            done
        } else {
            // Nothing new: the store answers once it has taken what is queued before it.
            thread.store_free_at.max(now)
        };
        self.schedule(
            done,
            Pending::Absorbed {
                inst: ii,
                thread: ti,
                life,
                task,
                changelog,
                from,
                stored: next,
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn absorbed(
        &mut self,
        ii: usize,
        ti: usize,
        life: u32,
        task: TaskId,
        changelog: usize,
        from: i64,
        stored: i64,
    ) {
        if self.insts[ii].life != life {
            return;
        }
        if stored > from {
            if let Some(tp) = self
                .logs
                .topology
                .changelog_partitions(task)
                .into_iter()
                .nth(changelog)
            {
                if let Some(q) = self.insts[ii].threads[ti].queued.get_mut(&tp) {
                    *q = q.saturating_sub(1);
                }
            }
            self.stats.restored += (stored - from) as f64;
            let disk = self.insts[ii].disk.entry(task).or_default();
            *disk = (*disk).max(stored);
        }
        self.handle_now(
            ii,
            ti,
            Event::Absorbed {
                task,
                changelog,
                stored,
                loading: false,
            },
        );
    }
}
