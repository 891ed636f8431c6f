//! A stream thread: one group member and the tasks the assignor gave it. Its loop interleaves
//! one step of each task with heartbeats, commits and rebalances; a rebalance starts when the
//! group asks, when a warm-up catches up (event-driven probing), when the probing timer fires,
//! or when the instance is drained.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton_assignor::TaskId;
use baton_kafka::member::Membership;
use baton_kafka::records::FetchWant;
use baton_kafka::{Client, GroupMember, MemberConfig};
use baton_protocol::assignment::error_code;
use tokio::sync::watch;

use crate::context::Context;
use crate::error::{kafka, Result};
use crate::status::Role;
use crate::store::StoreError;
use crate::task::{Fetches, Task};

/// How long an idle loop sleeps before fetching again (a fetch itself waits for data).
const IDLE: Duration = Duration::from_millis(5);
/// How long the broker may hold a fetch while none of its partitions has data. Short enough
/// for heartbeats and commits to keep their pace; a fetch with data returns at once. (A very
/// short wait is no good: nisshi then answers with whatever it has read so far, often nothing;
/// docs/BROKERS.md.)
const FETCH_WAIT_MS: i32 = 100;
/// The pause after a failed step, so a broker hiccup does not become a busy loop.
const BACKOFF: Duration = Duration::from_millis(200);

/// Why a thread stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Shutdown,
    /// Drained: the instance was leaving and this thread holds nothing.
    Drained,
}

pub struct StreamThread {
    ctx: Arc<Context>,
    name: String,
    /// This thread's own connections for fetch and produce.
    io: Arc<Client>,
    member: GroupMember,
    tasks: BTreeMap<TaskId, Task>,
    /// Tasks whose stores another thread of this process has not released yet.
    opening: BTreeMap<TaskId, Role>,
    probe_at: Option<Instant>,
    last_heartbeat: Instant,
    last_commit: Instant,
    reported_leaving: bool,
}

impl StreamThread {
    pub fn new(ctx: Arc<Context>, index: u32) -> StreamThread {
        let cfg = &ctx.cfg;
        let name = format!("{}-{index}", cfg.instance_id);
        let bootstrap: Vec<&str> = cfg.bootstrap.iter().map(String::as_str).collect();
        let io = Client::new(&bootstrap, &name);
        let member = GroupMember::new(
            io.clone(),
            MemberConfig {
                group_id: ctx.group().to_owned(),
                client_id: name.clone(),
                group_instance_id: cfg.static_membership.then(|| name.clone()),
                session_timeout_ms: cfg.session_timeout.as_millis() as i32,
                rebalance_timeout_ms: (cfg.session_timeout.as_millis() as i32).max(30_000),
                process_id: ctx.process_id,
                user_endpoint: cfg.user_endpoint.clone(),
                topology: ctx.wire.clone(),
                assignor: cfg.assignor.clone(),
                assignment_config: cfg.assignment.clone(),
            },
        );
        StreamThread {
            ctx,
            name,
            io,
            member,
            tasks: BTreeMap::new(),
            opening: BTreeMap::new(),
            probe_at: None,
            last_heartbeat: Instant::now(),
            last_commit: Instant::now(),
            reported_leaving: false,
        }
    }

    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<Exit> {
        self.rebalance("startup").await?;
        loop {
            if *shutdown.borrow() {
                self.stop().await;
                return Ok(Exit::Shutdown);
            }
            if self.reported_leaving && self.tasks.is_empty() && self.opening.is_empty() {
                tracing::info!(thread = %self.name, "drained: holding nothing, leaving the group");
                if let Err(e) = self.member.leave().await {
                    tracing::warn!(thread = %self.name, error = %e, "leaving the group");
                }
                return Ok(Exit::Drained);
            }
            let mut reason = None;
            if self.ctx.is_leaving() && !self.reported_leaving {
                reason = Some("drain requested");
            }
            if self.last_heartbeat.elapsed() >= self.ctx.cfg.heartbeat_interval {
                self.last_heartbeat = Instant::now();
                match self.member.heartbeat().await {
                    Ok(true) => reason = Some("the group is rebalancing"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(thread = %self.name, error = %e, "heartbeat failed");
                        reason = Some("heartbeat failed");
                    }
                }
            }
            if self.probe_at.is_some_and(|t| Instant::now() >= t) {
                reason = Some("probing rebalance");
            }
            self.open_pending();
            let (mut fetched, mut failed) = self.fetch().await;
            let mut worked = false;
            for task in self.tasks.values_mut() {
                match task.step(&self.ctx, &self.io, &mut fetched).await {
                    Ok(p) => {
                        worked |= p.records > 0;
                        if p.caught_up {
                            reason = Some("a warm-up caught up");
                        }
                    }
                    Err(e) => {
                        failed = true;
                        tracing::warn!(thread = %self.name, task = %task.id, error = %e, "task step failed; retrying");
                    }
                }
            }
            if reason.is_some() || self.last_commit.elapsed() >= self.ctx.cfg.commit_interval {
                self.commit().await;
            }
            if let Some(reason) = reason {
                self.rebalance(reason).await?;
                continue;
            }
            if failed {
                tokio::time::sleep(BACKOFF).await;
            } else if !worked {
                tokio::select! {
                    _ = tokio::time::sleep(IDLE) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }

    /// One fetch per leader for every partition the tasks want; the broker answers as soon as
    /// any has data. Returns what came back and whether anything failed.
    async fn fetch(&mut self) -> (Fetches, bool) {
        let mut by_leader: BTreeMap<String, Vec<FetchWant>> = BTreeMap::new();
        let mut failed = false;
        for task in self.tasks.values() {
            for want in task.wants(&self.ctx) {
                match self.ctx.leader(&want.topic, want.partition).await {
                    Ok(l) => by_leader.entry(l).or_default().push(want),
                    Err(e) => {
                        failed = true;
                        tracing::warn!(topic = %want.topic, partition = want.partition, error = %e, "no leader");
                    }
                }
            }
        }
        let mut fetched = Fetches::new();
        for (leader, wants) in by_leader {
            match self.io.fetch_many(&leader, &wants, FETCH_WAIT_MS).await {
                Ok(results) => {
                    for (want, result) in wants.into_iter().zip(results) {
                        match result {
                            Ok(f) => {
                                fetched.insert((want.topic, want.partition), f);
                            }
                            Err(e) => {
                                failed = true;
                                self.ctx.forget_leader(&want.topic, want.partition);
                                tracing::warn!(topic = %want.topic, partition = want.partition, error = %e, "fetch failed");
                            }
                        }
                    }
                }
                Err(e) => {
                    failed = true;
                    for w in &wants {
                        self.ctx.forget_leader(&w.topic, w.partition);
                    }
                    tracing::warn!(leader = %leader, error = %e, "fetch failed");
                }
            }
        }
        (fetched, failed)
    }

    /// Commits every running active's advanced input positions in one request.
    async fn commit(&mut self) {
        self.last_commit = Instant::now();
        let offsets: Vec<(String, i32, i64)> =
            self.tasks.values().flat_map(Task::pending_commit).collect();
        if offsets.is_empty() {
            return;
        }
        for t in self.tasks.values() {
            if let Err(e) = t.flush() {
                tracing::warn!(task = %t.id, error = %e, "flushing a store");
            }
        }
        let Some(m) = self.member.membership() else {
            return;
        };
        let (generation, member_id) = (m.generation, m.member_id.clone());
        match self
            .io
            .commit_offsets(self.ctx.group(), generation, &member_id, &offsets)
            .await
        {
            Ok(()) => self.tasks.values_mut().for_each(Task::mark_committed),
            Err(e) => {
                tracing::warn!(thread = %self.name, error = %e, "committing input offsets failed; will retry")
            }
        }
    }

    async fn rebalance(&mut self, reason: &str) -> Result<()> {
        tracing::info!(thread = %self.name, reason, "rebalance");
        let ctx = self.ctx.clone();
        self.member.set_offset_sums(ctx.status.offset_sums());
        self.reported_leaving = ctx.is_leaving();
        self.member.set_leaving(self.reported_leaving);
        let acceptable = ctx.cfg.assignment.acceptable_recovery_lag;
        let mut warmups = Vec::new();
        for t in self.tasks.values_mut() {
            if t.role == Role::Warmup {
                warmups.push(t.id);
                t.reported_caught_up = t.lag() <= acceptable;
            }
        }
        self.member.set_warmups(warmups);
        let started = Instant::now();
        let m: Membership = self
            .member
            .join()
            .await
            .map_err(kafka(format!(
                "{}: joining group {}",
                self.name,
                ctx.group()
            )))?
            .clone();
        ctx.status.count_rebalance();
        tracing::info!(
            thread = %self.name,
            generation = m.generation,
            leader = m.leader,
            active = m.info.active_tasks.len(),
            standby = m.info.standby_tasks.len() - m.info.warmup_tasks.len().min(m.info.standby_tasks.len()),
            warmup = m.info.warmup_tasks.len(),
            seconds = format!("{:.3}", started.elapsed().as_secs_f64()),
            "assigned"
        );
        self.reconcile(&m);
        self.probe_at = None;
        if m.info.error_code == error_code::VERSION_PROBING {
            self.probe_at = Some(Instant::now());
        } else if m.info.next_rebalance_ms > 0 {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            let wait = (m.info.next_rebalance_ms - now_ms).max(0) as u64;
            self.probe_at = Some(Instant::now() + Duration::from_millis(wait));
        }
        self.last_heartbeat = Instant::now();
        Ok(())
    }

    /// Brings the held tasks in line with a new assignment.
    fn reconcile(&mut self, m: &Membership) {
        let mut want: BTreeMap<TaskId, Role> = BTreeMap::new();
        for s in &m.info.standby_tasks {
            let role = if m.info.warmup_tasks.contains(&s.task) {
                Role::Warmup
            } else {
                Role::Standby
            };
            want.insert(s.task, role);
        }
        for &t in &m.info.active_tasks {
            want.insert(t, Role::Active);
        }
        let gone: Vec<TaskId> = self
            .tasks
            .keys()
            .filter(|t| !want.contains_key(t))
            .copied()
            .collect();
        for t in gone {
            if let Some(task) = self.tasks.remove(&t) {
                task.close(&self.ctx);
            }
        }
        self.opening.retain(|t, _| want.contains_key(t));
        for (id, role) in want {
            match self.tasks.get_mut(&id) {
                Some(task) if task.role != role => task.enter(&self.ctx, role),
                Some(_) => {}
                None => {
                    self.opening.insert(id, role);
                }
            }
        }
        self.open_pending();
    }

    fn open_pending(&mut self) {
        let pending: Vec<(TaskId, Role)> = self.opening.iter().map(|(t, r)| (*t, *r)).collect();
        for (id, role) in pending {
            match Task::open(&self.ctx, id, role) {
                Ok(task) => {
                    self.opening.remove(&id);
                    self.tasks.insert(id, task);
                }
                Err(StoreError::Busy { .. }) => {} // another thread is releasing it
                Err(e) => {
                    tracing::error!(thread = %self.name, task = %id, error = %e, "cannot open the task's stores");
                }
            }
        }
    }

    async fn stop(&mut self) {
        self.commit().await;
        for (_, task) in std::mem::take(&mut self.tasks) {
            task.close(&self.ctx);
        }
        // A static member keeps its place for a session timeout, so a restart moves nothing.
        if !self.ctx.cfg.static_membership {
            if let Err(e) = self.member.leave().await {
                tracing::warn!(thread = %self.name, error = %e, "leaving the group");
            }
        }
    }
}
