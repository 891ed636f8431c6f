//! The discrete-event engine. Every stream thread of every instance is the runtime's own
//! state machine ([`ThreadMachine`]), and every join round runs the group leader's own pipeline
//! ([`baton_protocol::leader::lead`]) on the subscription bytes the members send. The engine
//! plays the rest: the broker's topics, the coordinator, the network and each thread's store,
//! in simulated time. So `baton simulate` measures the policy the runtime runs, not a copy.
//!
//! Stores take changelog records at the instance's `restore_rate` per thread (one store
//! worker per thread, as in the runtime); a fetch for a changelog whose store still has a
//! chunk queued leaves it out, so fetching overlaps the store's work.

mod group;
mod logs;
mod member;
mod rounds;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use baton_assignor::{
    AssignmentConfig, AssignorKind, ClientId, ClientSpec, Cluster, ClusterState, Lag, RejoinMode,
    TaskId, TaskSpec,
};
use baton_core::machine::{Event, FetchWant, RequestId};

use crate::report::{ms, quantile, Handover, LoadSample, Report};
use crate::scenario::{InstanceSpec, Probing, Protocol, Scenario, Start};

use group::Coordinator;
use logs::Logs;
use member::Instance;

/// A fetch that finds a full chunk to restore answers after this; one that finds little waits
/// up to [`POLL`] for more (`fetch.max.wait.ms`), as the broker would.
const FETCH_LATENCY: Duration = Duration::from_millis(2);
const POLL: Duration = Duration::from_millis(100);
/// The wait of a thread with nothing to restore: the broker's default `fetch.max.wait.ms`.
/// (The runtime's 100 ms poll would only add events here: steady input is processed either
/// way, and no decision waits on it.)
const IDLE_POLL: Duration = Duration::from_millis(500);
/// A request answered by the broker at once (produce, commit, offsets): its round trip.
const REQUEST_LATENCY: Duration = Duration::from_millis(1);
/// One restore fetch brings this much of a store's work, per changelog.
const CHUNK: Duration = Duration::from_millis(100);
/// The longest a running application is given to settle before the scenario starts.
const WARM_START_LIMIT: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone)]
enum Pending {
    Scenario(usize),
    /// An event for one thread; dropped if its instance died or restarted meanwhile.
    Deliver {
        inst: usize,
        thread: usize,
        life: u32,
        event: Event,
    },
    /// A fetch the broker answers now.
    Fetch {
        inst: usize,
        thread: usize,
        life: u32,
        fetch: RequestId,
        wants: Vec<FetchWant>,
    },
    /// The store finished a chunk.
    Absorbed {
        inst: usize,
        thread: usize,
        life: u32,
        task: TaskId,
        changelog: usize,
        from: i64,
        stored: i64,
    },
    /// The leader's probing rebalance falls due on this thread.
    Probe {
        inst: usize,
        thread: usize,
        life: u32,
    },
    /// Every member's heartbeat, and a timer tick for every thread.
    Beat,
    /// A round may end now.
    RoundDue,
    /// Look for members whose session ran out.
    Sessions,
}

/// What the report accumulates.
#[derive(Default)]
struct Stats {
    rebalances: u32,
    /// Tasks the scale-down timeout forced over (a forced move held back for a round is
    /// reported again by the next; it counts once).
    forced: std::collections::BTreeSet<TaskId>,
    moves: u32,
    restored: f64,
    settled_at: Option<Duration>,
    last_event_at: Duration,
    /// Per task: seconds without a running active, and since when it has none.
    unavailable: Vec<Duration>,
    down_since: Vec<Option<Duration>>,
    /// Tasks without a running active now.
    down: u32,
    unavailable_series: Vec<(f64, u32)>,
    load: Vec<LoadSample>,
    handovers: Vec<Handover>,
}

pub struct Engine<'a> {
    sc: &'a Scenario,
    kind: AssignorKind,
    protocol: Protocol,
    probing: Probing,
    config: AssignmentConfig,
    session: Duration,
    heartbeat: Duration,
    now: Duration,
    /// Scenario time zero (after a running application's warm start).
    origin: Duration,
    queue: BTreeMap<(Duration, u64), Pending>,
    seq: u64,
    logs: Logs,
    insts: Vec<Instance>,
    group: Coordinator,
    /// Per task: threads running it as an active right now.
    holders: Vec<u32>,
    /// Per task: the instance its active was last assigned to.
    owner: Vec<Option<usize>>,
    stats: Stats,
    /// A running application's state on each instance's disk at the start.
    seeded: BTreeMap<String, BTreeMap<TaskId, i64>>,
    events_done: usize,
    /// The group was quiet at the last heartbeat.
    quiet_now: bool,
    /// Every scenario event happened and the group is quiet: the run is over.
    finished: bool,
    rng: u64,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl<'a> Engine<'a> {
    pub fn new(sc: &'a Scenario, kind: AssignorKind, protocol: Protocol) -> Self {
        let logs = Logs::new(sc);
        let n = logs.tasks.len();
        let session = Duration::from_secs_f64(sc.group.session_timeout_ms / 1000.0)
            .max(Duration::from_millis(1));
        let heartbeat = sc.group.heartbeat();
        Engine {
            sc,
            kind,
            protocol,
            probing: sc.probing_for(kind),
            config: sc.assignor.config.clone(),
            session,
            heartbeat,
            now: Duration::ZERO,
            origin: Duration::ZERO,
            queue: BTreeMap::new(),
            seq: 0,
            logs,
            insts: Vec::new(),
            group: Coordinator::default(),
            holders: vec![0; n],
            owner: vec![None; n],
            stats: Stats {
                unavailable: vec![Duration::ZERO; n],
                down_since: vec![Some(Duration::ZERO); n],
                down: n as u32,
                ..Stats::default()
            },
            seeded: BTreeMap::new(),
            events_done: 0,
            quiet_now: false,
            finished: false,
            rng: sc.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    fn schedule(&mut self, at: Duration, p: Pending) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), p);
    }

    /// When a member's warm-ups ask for the hand-over.
    fn rejoin_mode(&self) -> RejoinMode {
        match self.probing {
            Probing::Interval => RejoinMode::Probing,
            Probing::CaughtUp => self.config.rejoin_mode,
        }
    }

    /// Runs to the end and reports. `progress` gets the fraction of scenario events done.
    pub fn run(mut self, progress: &mut dyn FnMut(f64)) -> Report {
        let instances = self.sc.instances.clone();
        if self.sc.start == Start::Running {
            self.seed_disks(&instances);
        }
        for spec in &instances {
            self.add_instance(spec);
        }
        self.schedule(self.heartbeat, Pending::Beat);
        if self.sc.start == Start::Running {
            // A running application: let the group form on the state it has, then begin.
            while self.now < WARM_START_LIMIT && !self.quiet_now {
                if !self.step(WARM_START_LIMIT) {
                    break;
                }
            }
            self.quiet_now = false;
            self.begin_at_now();
        }
        for (i, e) in self.sc.events.iter().enumerate() {
            let at = self.origin + Duration::from_secs_f64(e.at_s);
            self.schedule(at, Pending::Scenario(i));
        }
        let end = self.origin + Duration::from_secs_f64(self.sc.max_duration_s);
        let events = self.sc.events.len().max(1) as f64;
        loop {
            if self.finished {
                break;
            }
            let before = self.events_done;
            if !self.step(end) {
                self.advance_to(end);
                break;
            }
            if self.events_done != before {
                progress(self.events_done as f64 / events);
            }
        }
        progress(1.0);
        self.report()
    }

    /// Handles the next pending thing, unless it falls after `end`. False when there is none.
    fn step(&mut self, end: Duration) -> bool {
        let Some((&(at, seq), _)) = self.queue.first_key_value() else {
            return false;
        };
        if at > end {
            return false;
        }
        let p = self.queue.remove(&(at, seq)).expect("just seen");
        self.advance_to(at);
        self.handle(p);
        true
    }

    fn advance_to(&mut self, at: Duration) {
        self.now = self.now.max(at);
    }

    /// Nothing left to settle: no round, every thread a member, every active running, no
    /// warm-up held, no restore under way and no probing rebalance scheduled.
    fn quiet(&self) -> bool {
        self.group.round.is_none()
            && self.insts.iter().all(|i| i.quiet(self.now))
            && self.holders.iter().all(|&h| h > 0)
    }

    /// Makes now the scenario's time zero: what happened before does not count.
    fn begin_at_now(&mut self) {
        self.origin = self.now;
        let n = self.logs.tasks.len();
        self.stats = Stats {
            unavailable: vec![Duration::ZERO; n],
            down_since: (0..n)
                .map(|t| (self.holders[t] == 0).then_some(self.now))
                .collect(),
            down: self.holders.iter().filter(|&&h| h == 0).count() as u32,
            ..Stats::default()
        };
        self.record_unavailable();
        self.load_sample();
    }

    fn handle(&mut self, p: Pending) {
        match p {
            Pending::Scenario(i) => {
                self.events_done += 1;
                self.scenario_event(i);
            }
            Pending::Deliver {
                inst,
                thread,
                life,
                event,
            } => self.deliver(inst, thread, life, event),
            Pending::Fetch {
                inst,
                thread,
                life,
                fetch,
                wants,
            } => self.answer_fetch(inst, thread, life, fetch, wants),
            Pending::Absorbed {
                inst,
                thread,
                life,
                task,
                changelog,
                from,
                stored,
            } => self.absorbed(inst, thread, life, task, changelog, from, stored),
            Pending::Probe { inst, thread, life } => self.deliver(inst, thread, life, Event::Tick),
            Pending::Beat => {
                self.beat();
                self.schedule(self.now + self.heartbeat, Pending::Beat);
                // Looked at once per heartbeat: both walk every task.
                self.quiet_now = self.quiet();
                self.finished = self.quiet_now && self.events_done == self.sc.events.len();
                if !self.finished {
                    self.fast_forward();
                }
            }
            Pending::RoundDue => self.try_finish_round(),
            Pending::Sessions => self.check_sessions(),
        }
    }

    /// While the group is steady (no round, every active running, every copy caught up, no
    /// store work) nothing decides anything until the next scenario event, probing rebalance
    /// or session check: time jumps toward it. Polls and acknowledgements due meanwhile arrive
    /// then, after a heartbeat that keeps every member's session.
    fn fast_forward(&mut self) {
        if self.group.round.is_some()
            || !self
                .insts
                .iter()
                .all(|i| i.steady(self.config.acceptable_recovery_lag))
        {
            return;
        }
        let target = self
            .queue
            .iter()
            .find(|(_, p)| {
                matches!(
                    p,
                    Pending::Scenario(_) | Pending::Probe { .. } | Pending::Sessions
                )
            })
            .map(|(&(at, _), _)| at);
        let Some(next) = target else { return };
        // Actives process the input that arrived meanwhile in one batch when time resumes,
        // and copies take that in: jump only part of the way, so they are caught up again well
        // before `next` (the slower they restore relative to the input, the shorter the jump).
        let input: f64 = self.logs.tasks.iter().map(|t| t.input_rate()).sum();
        let restore = self
            .insts
            .iter()
            .filter(|i| i.alive)
            .map(|i| i.spec.restore_rate)
            .fold(f64::INFINITY, f64::min);
        let fraction = (0.5 / (input / restore + 0.5)).min(0.75);
        let target = self.now + next.saturating_sub(self.now).mul_f64(fraction);
        if target <= self.now + 2 * self.heartbeat {
            return;
        }
        let shifted: Vec<((Duration, u64), Pending)> = self
            .queue
            .range(..(target, 0))
            .map(|(k, p)| (*k, p.clone()))
            .collect();
        for (k, _) in &shifted {
            self.queue.remove(k);
        }
        self.advance_to(target);
        self.beat();
        for (_, p) in shifted {
            if !matches!(p, Pending::Beat) {
                self.schedule(target, p);
            }
        }
        self.schedule(target + self.heartbeat, Pending::Beat);
    }

    fn scenario_event(&mut self, i: usize) {
        let e = self.sc.events[i].clone();
        self.stats.last_event_at = self.now;
        self.stats.settled_at = None;
        let drains = self.kind.drains();
        if e.swap {
            let old: Vec<usize> = (0..self.insts.len())
                .filter(|&i| self.insts[i].running())
                .collect();
            for &o in &old {
                let mut spec = self.insts[o].spec.clone();
                spec.id = format!("{}-new", spec.id);
                self.add_instance(&spec);
            }
            for &o in &old {
                self.drain(o, drains);
            }
        }
        for spec in &e.add {
            self.add_instance(spec);
        }
        for id in &e.remove {
            if let Some(ii) = self.inst_ix(id) {
                self.stop(ii);
            }
        }
        for id in &e.drain {
            if let Some(ii) = self.inst_ix(id) {
                self.drain(ii, drains);
            }
        }
        if let Some(pct) = e.drain_percent {
            let mut running: Vec<usize> = (0..self.insts.len())
                .filter(|&i| self.insts[i].running() && self.insts[i].leaving_since.is_none())
                .collect();
            let n = running.len() * pct as usize / 100;
            let actives = |i: usize| self.owner.iter().filter(|o| **o == Some(i)).count();
            running.sort_by(|&a, &b| {
                (actives(a), &self.insts[a].spec.id).cmp(&(actives(b), &self.insts[b].spec.id))
            });
            for ii in running.into_iter().take(n) {
                self.drain(ii, drains);
            }
        }
        let mut crashed: Vec<usize> = e.crash.iter().filter_map(|id| self.inst_ix(id)).collect();
        if e.crash_leader {
            crashed.extend(self.group.seat_of_leader().map(|s| s.inst));
        }
        for ii in crashed {
            self.crash(ii);
        }
    }

    fn inst_ix(&self, id: &str) -> Option<usize> {
        self.insts.iter().position(|i| i.spec.id == id)
    }

    fn rebalance_time(&mut self) -> Duration {
        let base = self.sc.group.rebalance_ms / 1000.0;
        let j = self.sc.group.rebalance_jitter;
        let s = if j == 0.0 {
            base
        } else {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let u = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
            base * (1.0 + j * (2.0 * u - 1.0))
        };
        Duration::from_secs_f64(s.max(0.0))
    }

    /// An eager group stops every task while a round is under way.
    fn paused(&self) -> bool {
        self.protocol == Protocol::Eager
            && self.group.round.as_ref().is_some_and(|r| !r.for_release)
    }

    /// Re-derives one task's availability after its holders (or the pause) changed.
    fn refresh(&mut self, t: usize) {
        let up = self.holders[t] > 0 && !self.paused();
        let since = &mut self.stats.down_since[t];
        match (up, *since) {
            (true, Some(s)) => {
                self.stats.unavailable[t] += self.now.saturating_sub(s.max(self.origin));
                *since = None;
                self.stats.down -= 1;
            }
            (false, None) => {
                *since = Some(self.now);
                self.stats.down += 1;
            }
            _ => {}
        }
    }

    fn refresh_all(&mut self) {
        for t in 0..self.holders.len() {
            self.refresh(t);
        }
        self.record_unavailable();
    }

    fn record_unavailable(&mut self) {
        let n = self.stats.down;
        let t = ms(secs(self.now.saturating_sub(self.origin)));
        match self.stats.unavailable_series.last_mut() {
            Some(last) if last.1 == n => {}
            Some(last) if last.0 == t => last.1 = n,
            _ => self.stats.unavailable_series.push((t, n)),
        }
    }

    fn load_sample(&mut self) {
        let mut actives: BTreeMap<String, u32> = BTreeMap::new();
        for inst in self.insts.iter().filter(|i| i.running()) {
            actives.insert(inst.spec.id.clone(), 0);
        }
        for o in self.owner.iter().flatten() {
            if let Some(n) = actives.get_mut(&self.insts[*o].spec.id) {
                *n += 1;
            }
        }
        self.stats.load.push(LoadSample {
            t_s: ms(secs(self.now.saturating_sub(self.origin))),
            actives,
        });
    }

    /// A running application's stores: each instance holds the state of what it runs. The
    /// holdings are a fixpoint of the assignor fed the lags those stores give (all caught up)
    /// with no ownership, as the group's first round will see them.
    fn seed_disks(&mut self, instances: &[InstanceSpec]) {
        let mut held: BTreeMap<String, BTreeSet<TaskId>> = BTreeMap::new();
        for _ in 0..100 {
            let tasks = self
                .logs
                .tasks
                .iter()
                .map(|t| TaskSpec {
                    id: t.id,
                    stateful: t.stateful,
                    end_offset_sum: t.changelog_end().max(0) as u64,
                    partitions: Vec::new(),
                })
                .collect();
            let clients = instances
                .iter()
                .map(|spec| {
                    let mut c = ClientSpec {
                        id: ClientId(spec.id.clone()),
                        capacity: spec.threads,
                        rack: spec.rack.clone(),
                        ..Default::default()
                    };
                    for &t in held.get(&spec.id).into_iter().flatten() {
                        if self.logs.tasks[self.logs.index[&t]].stateful {
                            c.lags.insert(t, Lag::Behind(0));
                        }
                    }
                    c
                })
                .collect();
            let state = ClusterState {
                config: self.config.clone(),
                tasks,
                clients,
            };
            let Ok(cluster) = Cluster::new(state) else {
                return;
            };
            let a = self.kind.assignor().assign(&cluster);
            let next: BTreeMap<String, BTreeSet<TaskId>> = a
                .clients
                .iter()
                .map(|(id, ca)| {
                    let tasks = ca.active.iter().chain(&ca.standby).chain(&ca.warmup);
                    (id.0.clone(), tasks.copied().collect())
                })
                .collect();
            if next == held {
                break;
            }
            held = next;
        }
        self.seeded = held
            .into_iter()
            .map(|(id, tasks)| {
                let disk = tasks
                    .iter()
                    .filter_map(|t| {
                        let log = &self.logs.tasks[self.logs.index[t]];
                        log.stateful.then(|| (*t, log.changelog_end()))
                    })
                    .collect();
                (id, disk)
            })
            .collect();
    }

    fn report(mut self) -> Report {
        let now = self.now;
        for t in 0..self.holders.len() {
            if let Some(s) = self.stats.down_since[t] {
                self.stats.unavailable[t] += now.saturating_sub(s.max(self.origin));
            }
        }
        let per_task: Vec<f64> = self.stats.unavailable.iter().map(|d| secs(*d)).collect();
        let unfinished_drains: Vec<String> = self
            .insts
            .iter()
            .filter(|i| i.running() && i.leaving_since.is_some())
            .map(|i| i.spec.id.clone())
            .collect();
        Report {
            scenario: self.sc.name.clone(),
            assignor: self.kind.name().to_owned(),
            protocol: format!("{:?}", self.protocol).to_lowercase(),
            probing: match self.probing {
                Probing::Interval => "interval".into(),
                Probing::CaughtUp => "caught-up".into(),
            },
            tasks: self.logs.tasks.len(),
            unavailable_total_s: ms(per_task.iter().sum()),
            unavailable_p99_s: ms(quantile(&per_task, 0.99)),
            unavailable_max_s: ms(per_task.iter().cloned().fold(0.0, f64::max)),
            rebalances: self.stats.rebalances,
            // A drain still under way is not balance, whatever the assignment says.
            time_to_balance_s: self
                .stats
                .settled_at
                .filter(|_| unfinished_drains.is_empty())
                .map(|s| ms(secs(s.saturating_sub(self.stats.last_event_at)))),
            forced_moves: self.stats.forced.len() as u32,
            active_moves: self.stats.moves,
            unfinished_drains,
            records_restored: self.stats.restored.round(),
            simulated_s: ms(secs(now.saturating_sub(self.origin))),
            unavailable_series: self.stats.unavailable_series,
            load: self.stats.load,
            handovers: self.stats.handovers,
            event_times_s: self.sc.events.iter().map(|e| e.at_s).collect(),
        }
    }
}
