//! The discrete-event engine. Between events every rate is constant, so the engine jumps from
//! one event to the next: a scheduled scenario event, the end of a rebalance, a probing
//! rebalance, a crash being noticed, or a restoring copy reaching its target.

use std::collections::{BTreeMap, BTreeSet};

use baton_assignor::{
    Assignment, AssignorKind, ClientId, ClientSpec, Cluster, ClusterState, Lag, RejoinMode, Role,
    TaskAssignor, TaskId, TaskSpec,
};

use crate::report::{ms, quantile, LoadSample, Report};
use crate::scenario::{InstanceSpec, Probing, Protocol, Scenario, Start};

/// Times closer than this (seconds) are the same instant.
const EPS: f64 = 1e-6;

/// A lag this small counts as zero: floating-point dust, relative to the log's size, must not
/// turn into an endless run of ever tinier restore steps.
fn dust(end: f64) -> f64 {
    1e-9 * end.abs().max(1.0) + 1e-6
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Status {
    /// Assigned, waiting for the second round of a cooperative move until this time.
    Waiting(f64),
    Restoring,
    Running,
}

struct Task {
    id: TaskId,
    stateful: bool,
    end: f64,
    rate: f64,
    unavailable: f64,
}

struct Instance {
    spec: InstanceSpec,
    alive: bool,
    member: bool,
    leaving: bool,
    /// When the drain began (simulated seconds), for the scale-down timeout.
    leaving_since: Option<f64>,
    /// Records restored locally per task; state stays on disk when a task leaves.
    state: BTreeMap<usize, f64>,
    roles: BTreeMap<usize, Role>,
    status: BTreeMap<usize, Status>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Scenario(usize),
    RebalanceEnd,
    Probe(u64),
    CrashNoticed(usize),
}

pub struct Engine<'a> {
    sc: &'a Scenario,
    assignor: Box<dyn TaskAssignor>,
    kind: AssignorKind,
    protocol: Protocol,
    probing: Probing,
    t: f64,
    tasks: Vec<Task>,
    insts: Vec<Instance>,
    queue: BTreeSet<(u64, u64, Kind)>,
    seq: u64,
    rebalancing: bool,
    rebalance_again: bool,
    eager_pause: bool,
    probe_token: u64,
    watch: BTreeSet<(usize, usize)>,
    rebalances: u32,
    settled_at: Option<f64>,
    last_event_t: f64,
    restored: f64,
    /// Moves the scale-down timeout forced.
    forced: u32,
    /// Times a task's active went to another instance.
    moves: u32,
    unavailable_series: Vec<(f64, u32)>,
    load: Vec<LoadSample>,
    rng: u64,
}

fn key(t: f64) -> u64 {
    t.max(0.0).to_bits()
}

impl<'a> Engine<'a> {
    pub fn new(sc: &'a Scenario, kind: AssignorKind, protocol: Protocol) -> Self {
        let mut tasks = Vec::new();
        for (s, sub) in sc.app.subtopologies.iter().enumerate() {
            for p in 0..sub.partitions {
                tasks.push(Task {
                    id: TaskId::new(s as u32, p),
                    stateful: sub.stateful,
                    end: if sub.stateful {
                        sc.state_records(sub)
                    } else {
                        0.0
                    },
                    rate: if sub.stateful {
                        sub.changelog_rate
                    } else {
                        0.0
                    },
                    unavailable: 0.0,
                });
            }
        }
        let probing = match (kind, sc.assignor.probing) {
            (_, Some(p)) => p,
            (AssignorKind::HighAvailability, None) => Probing::CaughtUp,
            _ => Probing::Interval,
        };
        Engine {
            sc,
            assignor: kind.assignor(),
            kind,
            protocol,
            probing,
            t: 0.0,
            tasks,
            insts: Vec::new(),
            queue: BTreeSet::new(),
            seq: 0,
            rebalancing: false,
            rebalance_again: false,
            eager_pause: false,
            probe_token: 0,
            watch: BTreeSet::new(),
            rebalances: 0,
            settled_at: None,
            last_event_t: 0.0,
            restored: 0.0,
            forced: 0,
            moves: 0,
            unavailable_series: Vec::new(),
            load: Vec::new(),
            rng: sc.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    fn schedule(&mut self, t: f64, kind: Kind) {
        self.seq += 1;
        self.queue.insert((key(t), self.seq, kind));
    }

    fn add_instance(&mut self, spec: &InstanceSpec) -> usize {
        self.insts.push(Instance {
            spec: spec.clone(),
            alive: true,
            member: true,
            leaving: false,
            leaving_since: None,
            state: BTreeMap::new(),
            roles: BTreeMap::new(),
            status: BTreeMap::new(),
        });
        self.insts.len() - 1
    }

    fn inst_ix(&self, id: &str) -> Option<usize> {
        self.insts.iter().position(|i| i.spec.id == id)
    }

    /// Runs to the end and reports. `progress` gets the fraction of scenario events done.
    pub fn run(mut self, progress: &mut dyn FnMut(f64)) -> Report {
        for spec in &self.sc.instances.clone() {
            self.add_instance(spec);
        }
        match self.sc.start {
            Start::Running => self.warm_start(),
            Start::Empty => self.request_rebalance(),
        }
        for (i, e) in self.sc.events.iter().enumerate() {
            self.schedule(e.at_s, Kind::Scenario(i));
        }
        self.record_unavailable();
        let events = self.sc.events.len().max(1) as f64;
        let mut done_events = 0usize;
        loop {
            let next_event = self.queue.first().map(|&(k, _, _)| f64::from_bits(k));
            let next_cross = self.next_crossing();
            let next = match (next_event, next_cross) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if next > self.sc.max_duration_s {
                self.advance(self.sc.max_duration_s - self.t);
                break;
            }
            self.advance(next - self.t);
            self.settle_crossings();
            while let Some(&(k, s, kind)) = self.queue.first() {
                if f64::from_bits(k) > self.t {
                    break;
                }
                self.queue.remove(&(k, s, kind));
                if let Kind::Scenario(_) = kind {
                    done_events += 1;
                    progress(done_events as f64 / events);
                }
                self.handle(kind);
            }
            self.record_unavailable();
            if self.finished() {
                break;
            }
        }
        progress(1.0);
        self.report()
    }

    /// Nothing left to happen: no events, no rebalance, no follow-up, nobody restoring.
    fn finished(&self) -> bool {
        self.queue.is_empty()
            && !self.rebalancing
            && self
                .insts
                .iter()
                .all(|i| !i.alive || i.status.values().all(|s| *s == Status::Running))
    }

    /// Converges the assignor with instant catch-up, as if the application had run for a while.
    fn warm_start(&mut self) {
        for _ in 0..10_000 {
            let a = self.assign();
            self.apply(&a, true);
            for inst in &mut self.insts {
                for (&t, _) in inst.roles.iter() {
                    inst.state.insert(t, self.tasks[t].end);
                }
                for s in inst.status.values_mut() {
                    *s = Status::Running;
                }
            }
            if !a.followup_rebalance {
                break;
            }
        }
        self.watch.clear();
        self.load_sample();
    }

    /// Which tasks have a running active right now, in one pass over the instances.
    fn availability(&self) -> Vec<bool> {
        let mut out = vec![false; self.tasks.len()];
        if self.eager_pause {
            return out;
        }
        for inst in self.insts.iter().filter(|i| i.alive) {
            for (&t, &status) in &inst.status {
                if status == Status::Running && inst.roles.get(&t) == Some(&Role::Active) {
                    out[t] = true;
                }
            }
        }
        out
    }

    /// Copies catching up, with their restore rate: each thread's rate is shared by the tasks it restores.
    fn shares(&self) -> Vec<(usize, usize, f64)> {
        let mut out = Vec::new();
        for (ii, inst) in self.insts.iter().enumerate() {
            if !inst.alive {
                continue;
            }
            let catching: Vec<usize> = inst
                .roles
                .iter()
                .filter(|(&t, &role)| {
                    let task = &self.tasks[t];
                    if !task.stateful {
                        return false;
                    }
                    let lag = task.end - inst.state.get(&t).copied().unwrap_or(0.0);
                    match role {
                        Role::Active => inst.status.get(&t) == Some(&Status::Restoring),
                        Role::Standby | Role::Warmup => lag > dust(task.end),
                    }
                })
                .map(|(&t, _)| t)
                .collect();
            let threads = inst.spec.threads as usize;
            let mut per_thread = vec![0usize; threads];
            for k in 0..catching.len() {
                per_thread[k % threads] += 1;
            }
            for (k, &t) in catching.iter().enumerate() {
                out.push((
                    ii,
                    t,
                    inst.spec.restore_rate / per_thread[k % threads] as f64,
                ));
            }
        }
        out
    }

    /// The earliest moment a copy finishes restoring, crosses the acceptable lag, or stops waiting.
    fn next_crossing(&self) -> Option<f64> {
        let acceptable = self.sc.assignor.config.acceptable_recovery_lag as f64;
        let available = self.availability();
        let mut best: Option<f64> = None;
        let mut consider = |x: f64| {
            if x.is_finite() && x >= 0.0 {
                best = Some(best.map_or(x, |b: f64| b.min(x)));
            }
        };
        for inst in self.insts.iter().filter(|i| i.alive) {
            for s in inst.status.values() {
                if let Status::Waiting(until) = *s {
                    consider(until.max(self.t));
                }
            }
        }
        for (ii, t, rate) in self.shares() {
            let task = &self.tasks[t];
            let inst = &self.insts[ii];
            let lag = task.end - inst.state.get(&t).copied().unwrap_or(0.0);
            let growth = if inst.roles[&t] == Role::Active || !available[t] {
                0.0
            } else {
                task.rate
            };
            let net = rate - growth;
            if net <= 0.0 {
                continue;
            }
            consider(self.t + (lag / net).max(EPS));
            if lag > acceptable + dust(task.end) {
                consider(self.t + (lag - acceptable) / net);
            }
        }
        best
    }

    fn advance(&mut self, dt: f64) {
        if dt <= 0.0 {
            return;
        }
        let shares = self.shares();
        let catching: BTreeSet<(usize, usize)> = shares.iter().map(|&(i, t, _)| (i, t)).collect();
        let available = self.availability();
        for (t, task) in self.tasks.iter_mut().enumerate() {
            if !available[t] {
                task.unavailable += dt;
            } else {
                task.end += task.rate * dt;
            }
        }
        for (ii, t, rate) in shares {
            let end = self.tasks[t].end;
            let have = self.insts[ii].state.entry(t).or_insert(0.0);
            let mut gained = (rate * dt).min((end - *have).max(0.0));
            if end - (*have + gained) <= dust(end) {
                gained = (end - *have).max(0.0);
            }
            *have += gained;
            self.restored += gained;
        }
        // Running actives, and copies that were caught up when the step began, keep pace with
        // the log. A copy still catching up gets only what it restored: one slower than the
        // changelog grows falls further behind, however long the step.
        for (ii, inst) in self.insts.iter_mut().enumerate().filter(|(_, i)| i.alive) {
            for (&t, &role) in &inst.roles {
                let end = self.tasks[t].end;
                let have = inst.state.entry(t).or_insert(0.0);
                let keeps_pace = match role {
                    Role::Active => inst.status.get(&t) == Some(&Status::Running),
                    _ => !catching.contains(&(ii, t)),
                };
                if keeps_pace && available[t] {
                    *have = end;
                }
            }
        }
        self.t += dt;
    }

    /// Applies what happened at this instant: finished restores, ended waits, warm-ups caught up.
    fn settle_crossings(&mut self) {
        let acceptable = self.sc.assignor.config.acceptable_recovery_lag as f64;
        let now = self.t;
        let mut caught_up = Vec::new();
        for (ii, inst) in self.insts.iter_mut().enumerate() {
            if !inst.alive {
                continue;
            }
            for (&t, status) in inst.status.iter_mut() {
                let task = &self.tasks[t];
                let have = inst.state.get(&t).copied().unwrap_or(0.0);
                if let Status::Waiting(until) = *status {
                    if until <= now + EPS {
                        *status = Status::Restoring;
                    }
                }
                if *status == Status::Restoring
                    && (!task.stateful || task.end - have <= dust(task.end))
                {
                    *status = Status::Running;
                    inst.state.insert(t, task.end);
                }
            }
            for &(wi, t) in &self.watch {
                if wi == ii {
                    let lag = self.tasks[t].end - inst.state.get(&t).copied().unwrap_or(0.0);
                    if lag <= acceptable + dust(self.tasks[t].end) {
                        caught_up.push((wi, t));
                    }
                }
            }
        }
        if !caught_up.is_empty() {
            for w in &caught_up {
                self.watch.remove(w);
            }
            // The KIP's event-driven probing: a warm-up that catches up asks for the hand-over
            // now (`eager`), or once its instance has no other warm-up left (`stable`).
            let due = match self.sc.assignor.config.rejoin_mode {
                RejoinMode::Eager => true,
                // Its warm-ups, not moves still waiting for a warm-up slot.
                RejoinMode::Stable => caught_up.iter().any(|&(ii, _)| {
                    !self.watch.iter().any(|&(w, t)| {
                        w == ii && self.insts[ii].roles.get(&t) == Some(&Role::Warmup)
                    })
                }),
            };
            if self.probing == Probing::CaughtUp && due {
                self.request_rebalance();
            }
        }
    }

    fn handle(&mut self, kind: Kind) {
        match kind {
            Kind::Scenario(i) => self.scenario_event(i),
            Kind::RebalanceEnd => self.finish_rebalance(),
            Kind::Probe(token) => {
                if token == self.probe_token {
                    self.request_rebalance();
                }
            }
            Kind::CrashNoticed(ii) => {
                if self.insts[ii].member {
                    self.insts[ii].member = false;
                    self.request_rebalance();
                }
            }
        }
    }

    fn cancel_probe(&mut self) {
        self.probe_token += 1;
        self.queue.retain(|&(_, _, k)| !matches!(k, Kind::Probe(_)));
    }

    fn leader(&self) -> Option<usize> {
        (0..self.insts.len())
            .filter(|&i| self.insts[i].member && self.insts[i].alive)
            .min_by(|&a, &b| self.insts[a].spec.id.cmp(&self.insts[b].spec.id))
    }

    fn scenario_event(&mut self, i: usize) {
        let e = self.sc.events[i].clone();
        self.last_event_t = self.t;
        self.settled_at = None;
        let drain_supported = self.kind.drains();
        let mut changed = false;
        if e.swap {
            let old: Vec<usize> = (0..self.insts.len())
                .filter(|&i| self.insts[i].member && self.insts[i].alive)
                .collect();
            for &o in &old {
                let mut spec = self.insts[o].spec.clone();
                spec.id = format!("{}-new", spec.id);
                self.add_instance(&spec);
            }
            for &o in &old {
                self.drain(o, drain_supported);
            }
            changed = true;
        }
        for spec in &e.add {
            self.add_instance(spec);
            changed = true;
        }
        for id in &e.remove {
            if let Some(ii) = self.inst_ix(id) {
                self.stop(ii);
                changed = true;
            }
        }
        for id in &e.drain {
            if let Some(ii) = self.inst_ix(id) {
                self.drain(ii, drain_supported);
                changed = true;
            }
        }
        if let Some(pct) = e.drain_percent {
            let mut running: Vec<usize> = (0..self.insts.len())
                .filter(|&i| self.insts[i].member && self.insts[i].alive && !self.insts[i].leaving)
                .collect();
            let n = running.len() * pct as usize / 100;
            let actives = |i: usize| {
                self.insts[i]
                    .roles
                    .values()
                    .filter(|&&r| r == Role::Active)
                    .count()
            };
            running.sort_by(|&a, &b| {
                (actives(a), &self.insts[a].spec.id).cmp(&(actives(b), &self.insts[b].spec.id))
            });
            for ii in running.into_iter().take(n) {
                self.drain(ii, drain_supported);
                changed = true;
            }
        }
        let mut crashed: Vec<usize> = e.crash.iter().filter_map(|id| self.inst_ix(id)).collect();
        if e.crash_leader {
            crashed.extend(self.leader());
            // The probing schedule lives on the leader and dies with it.
            self.cancel_probe();
        }
        for ii in crashed {
            if self.insts[ii].alive {
                self.insts[ii].alive = false;
                let at = self.t + self.sc.group.session_timeout_ms / 1000.0;
                self.schedule(at, Kind::CrashNoticed(ii));
            }
        }
        if changed {
            self.request_rebalance();
        }
    }

    fn drain(&mut self, ii: usize, supported: bool) {
        if supported {
            self.insts[ii].leaving = true;
            self.insts[ii].leaving_since.get_or_insert(self.t);
        } else {
            self.stop(ii);
        }
    }

    /// A graceful shutdown: the instance leaves the group at once.
    fn stop(&mut self, ii: usize) {
        let inst = &mut self.insts[ii];
        inst.alive = false;
        inst.member = false;
        inst.roles.clear();
        inst.status.clear();
    }

    fn rebalance_duration(&mut self) -> f64 {
        let base = self.sc.group.rebalance_ms / 1000.0;
        let j = self.sc.group.rebalance_jitter;
        if j == 0.0 {
            return base;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let u = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
        base * (1.0 + j * (2.0 * u - 1.0))
    }

    fn request_rebalance(&mut self) {
        if self.rebalancing {
            self.rebalance_again = true;
            return;
        }
        self.rebalancing = true;
        if self.protocol == Protocol::Eager {
            self.eager_pause = true;
        }
        let at = self.t + self.rebalance_duration();
        self.schedule(at, Kind::RebalanceEnd);
    }

    fn finish_rebalance(&mut self) {
        self.rebalancing = false;
        self.eager_pause = false;
        self.rebalances += 1;
        if self.members().is_empty() {
            // Every instance is gone: no group to assign to; every task waits for a newcomer.
            self.settled_at = None;
            return;
        }
        let a = self.assign();
        self.forced += a.forced.len() as u32;
        self.apply(&a, false);
        self.load_sample();
        let settled = !a.followup_rebalance && a.clients.values().all(|c| c.warmup.is_empty());
        if settled {
            self.settled_at.get_or_insert(self.t);
        } else {
            self.settled_at = None;
        }
        self.cancel_probe();
        if a.followup_rebalance {
            let interval = a.probe_after_ms.unwrap_or(0) as f64 / 1000.0;
            let token = self.probe_token;
            self.schedule(self.t + interval, Kind::Probe(token));
        }
        // Drained instances exit, which is a graceful leave.
        let drained: Vec<usize> = (0..self.insts.len())
            .filter(|&i| {
                let inst = &self.insts[i];
                inst.member
                    && inst.leaving
                    && a.clients
                        .get(&ClientId(inst.spec.id.clone()))
                        .is_some_and(|c| c.drained)
            })
            .collect();
        for &i in &drained {
            self.stop(i);
        }
        if self.rebalance_again || !drained.is_empty() {
            self.rebalance_again = false;
            self.request_rebalance();
        }
    }

    fn members(&self) -> Vec<usize> {
        let mut m: Vec<usize> = (0..self.insts.len())
            .filter(|&i| self.insts[i].member)
            .collect();
        m.sort_by(|&a, &b| self.insts[a].spec.id.cmp(&self.insts[b].spec.id));
        m
    }

    fn assign(&self) -> Assignment {
        let tasks = self
            .tasks
            .iter()
            .map(|t| TaskSpec {
                id: t.id,
                stateful: t.stateful,
                end_offset_sum: if t.stateful { t.end.round() as u64 } else { 0 },
            })
            .collect();
        let clients = self
            .members()
            .into_iter()
            .map(|ii| {
                let inst = &self.insts[ii];
                let mut c = ClientSpec {
                    id: ClientId(inst.spec.id.clone()),
                    capacity: inst.spec.threads,
                    rack: inst.spec.rack.clone(),
                    leaving: inst.leaving,
                    leaving_for_ms: inst
                        .leaving_since
                        .map(|since| ((self.t - since).max(0.0) * 1000.0).round() as u64),
                    ..Default::default()
                };
                for (&t, &role) in &inst.roles {
                    let id = self.tasks[t].id;
                    match role {
                        Role::Active => c.owned_active.insert(id),
                        Role::Standby => c.owned_standby.insert(id),
                        Role::Warmup => c.owned_warmup.insert(id),
                    };
                }
                for (&t, &have) in &inst.state {
                    let task = &self.tasks[t];
                    if !task.stateful {
                        continue;
                    }
                    let lag = if inst.roles.get(&t) == Some(&Role::Active)
                        && inst.status.get(&t) == Some(&Status::Running)
                    {
                        Lag::Running
                    } else {
                        Lag::Behind((task.end - have).max(0.0).round() as u64)
                    };
                    c.lags.insert(task.id, lag);
                }
                c
            })
            .collect();
        let state = ClusterState {
            config: self.sc.assignor.config.clone(),
            tasks,
            clients,
        };
        let cluster = Cluster::new(state).expect("the simulator builds valid cluster state");
        self.assignor.assign(&cluster)
    }

    fn apply(&mut self, a: &Assignment, instant: bool) {
        let index: BTreeMap<TaskId, usize> = self
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id, i))
            .collect();
        let before: BTreeMap<usize, usize> = self
            .insts
            .iter()
            .enumerate()
            .flat_map(|(ii, inst)| {
                inst.roles
                    .iter()
                    .filter(|(_, &r)| r == Role::Active)
                    .map(move |(&t, _)| (t, ii))
            })
            .collect();
        let mut moved_any = false;
        for ii in self.members() {
            let id = ClientId(self.insts[ii].spec.id.clone());
            let Some(ca) = a.clients.get(&id) else {
                continue;
            };
            let mut roles = BTreeMap::new();
            for (list, role) in [
                (&ca.active, Role::Active),
                (&ca.standby, Role::Standby),
                (&ca.warmup, Role::Warmup),
            ] {
                for tid in list {
                    roles.insert(index[tid], role);
                }
            }
            let mut status = BTreeMap::new();
            for (&t, &role) in &roles {
                if role != Role::Active {
                    continue;
                }
                if !instant && before.get(&t).is_some_and(|&o| o != ii) {
                    self.moves += 1;
                }
                let kept = before.get(&t) == Some(&ii)
                    && self.insts[ii].status.get(&t) == Some(&Status::Running);
                let s = if instant || (kept && self.protocol == Protocol::Cooperative) {
                    Status::Running
                } else if self.protocol == Protocol::Cooperative
                    && before
                        .get(&t)
                        .is_some_and(|&o| o != ii && self.insts[o].alive)
                {
                    // Revoked from its owner in this round, assigned in an immediate second round.
                    moved_any = true;
                    Status::Waiting(self.t + self.sc.group.rebalance_ms / 1000.0)
                } else {
                    Status::Restoring
                };
                status.insert(t, s);
            }
            let inst = &mut self.insts[ii];
            inst.roles = roles;
            inst.status = status;
        }
        if moved_any {
            // The cooperative protocol's second round.
            self.rebalances += 1;
        }
        self.watch.clear();
        for p in &a.pending {
            if let (Some(ii), Some(&t)) = (self.inst_ix(&p.to.0), index.get(&p.task)) {
                self.watch.insert((ii, t));
            }
        }
        for (id, ca) in &a.clients {
            if let Some(ii) = self.inst_ix(&id.0) {
                for tid in &ca.warmup {
                    self.watch.insert((ii, index[tid]));
                }
            }
        }
    }

    fn load_sample(&mut self) {
        let actives = self
            .members()
            .into_iter()
            .map(|ii| {
                let inst = &self.insts[ii];
                let n = inst.roles.values().filter(|&&r| r == Role::Active).count() as u32;
                (inst.spec.id.clone(), n)
            })
            .collect();
        self.load.push(LoadSample {
            t_s: ms(self.t),
            actives,
        });
    }

    fn record_unavailable(&mut self) {
        let n = self.availability().iter().filter(|&&a| !a).count() as u32;
        if self.unavailable_series.last().map(|&(_, x)| x) != Some(n) {
            self.unavailable_series.push((ms(self.t), n));
        }
    }

    fn report(self) -> Report {
        let per_task: Vec<f64> = self.tasks.iter().map(|t| t.unavailable).collect();
        let unfinished_drains: Vec<String> = self
            .insts
            .iter()
            .filter(|i| i.member && i.leaving)
            .map(|i| i.spec.id.clone())
            .collect();
        Report {
            scenario: self.sc.name.clone(),
            assignor: self.assignor.name().to_owned(),
            protocol: format!("{:?}", self.protocol).to_lowercase(),
            probing: match self.probing {
                Probing::Interval => "interval".into(),
                Probing::CaughtUp => "caught-up".into(),
            },
            tasks: self.tasks.len(),
            unavailable_total_s: ms(per_task.iter().sum()),
            unavailable_p99_s: ms(quantile(&per_task, 0.99)),
            unavailable_max_s: ms(per_task.iter().cloned().fold(0.0, f64::max)),
            rebalances: self.rebalances,
            // A drain still under way is not balance, whatever the assignment says.
            time_to_balance_s: self
                .settled_at
                .filter(|_| unfinished_drains.is_empty())
                .map(|s| ms(s - self.last_event_t)),
            forced_moves: self.forced,
            active_moves: self.moves,
            unfinished_drains,
            records_restored: self.restored.round(),
            simulated_s: ms(self.t),
            unavailable_series: self.unavailable_series,
            load: self.load,
            event_times_s: self.sc.events.iter().map(|e| e.at_s).collect(),
        }
    }
}
