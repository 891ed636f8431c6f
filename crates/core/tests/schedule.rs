//! Randomized schedules of stream-thread machines, in the style of deterministic simulation
//! testing: each seed drives several members through joins, leaves, kills and restarts,
//! drains, long pauses, slow, failed and lost-ack requests, late and repeated answers, store
//! failures and timer jumps, against a model coordinator and broker that run the real leader
//! pipeline and subscription codec. After every step it checks:
//! - a task is active on at most one member in any generation's assignment;
//! - a committed input position never passes what the changelog holds;
//! - a store is written only by the task that opened it, and opened once at a time;
//! - a drained member ends holding nothing;
//!
//! At the end, once faults stop, every input is processed and committed, and each key's latest
//! output equals the events produced for it: at least that after a kill, a lapsed membership or
//! a write whose acknowledgement was lost (at-least-once), exactly that otherwise.
//!
//! `BATON_SEEDS=N` runs seeds `0..N` (default 10,000); a failure prints a one-line
//! reproduction: `BATON_SEED=S cargo test -p baton-core --test schedule one_seed -- --ignored`.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use baton_assignor::{AssignmentConfig, AssignorKind, TaskId};
use baton_core::machine::{
    Assigned, Command, Event, Exit, FetchResult, Heartbeat, MachineConfig, ThreadMachine,
};
use baton_core::status::{Phase, Role};
use baton_protocol::bridge::{Subtopology, Topology};
use baton_protocol::leader::{self, JoinedMember, LeaderInput, MemberReport};
use baton_protocol::{TaskOffsetSum, TopicPartition};

const PARTITIONS: u32 = 4;
const KEYS: u32 = 6;
const SESSION: Duration = Duration::from_millis(3000);
const HEARTBEAT: Duration = Duration::from_millis(300);
const REBALANCE_TIMEOUT: Duration = Duration::from_millis(4000);
const STEPS: usize = 200;
const SETTLE_LIMIT: Duration = Duration::from_secs(300);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// splitmix64: small, seedable, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn topology() -> Topology {
    Topology {
        subtopologies: BTreeMap::from([(
            0,
            Subtopology {
                source_topics: vec!["in".into()],
                changelog_topics: vec!["cl".into()],
                partitions: PARTITIONS,
            },
        )]),
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Store {
    counts: BTreeMap<u32, u64>,
    checkpoint: i64,
    /// The life of the changelog the checkpoint counts in (the topic id the runtime's store
    /// records); `None` for a new store, marked when it opens.
    life: Option<u32>,
}

/// A task's state on a member's disk: what a crash keeps (`durable`) and what it loses.
#[derive(Debug, Clone, Default)]
struct Disk {
    live: Store,
    durable: Store,
    open: bool,
}

/// A batch's writes to a task's store, up to a changelog offset.
type StoreWrite = (TaskId, Vec<(u32, u64)>, i64);

/// What the last fetch brought of a partition: `(offset, key, count)`.
type Chunk = Vec<(i64, u32, u64)>;

#[derive(Debug, Clone)]
enum Op {
    Fetch {
        event: Event,
        chunks: BTreeMap<TopicPartition, Chunk>,
    },
    Produce {
        task: TaskId,
        batch: baton_core::machine::RequestId,
        changelog: Vec<(u32, u64)>,
        outputs: Vec<(u32, u64)>,
        fail: bool,
        lose_ack: bool,
        store_fails: bool,
    },
    ReadCommitted(TaskId, bool),
    Commit {
        commit: baton_core::machine::RequestId,
        generation: i32,
        member_id: String,
        offsets: Vec<(TopicPartition, i64)>,
    },
    Join(Vec<u8>),
    /// With the member's own view: its id and the generation of its last assignment.
    Heartbeat {
        member_id: Option<String>,
        generation: i32,
    },
    Leave,
    /// An answer to a member.
    Deliver(Event),
    /// A blocking request's answer: the member goes on. A finished batch's writes reach its
    /// store only now.
    Ack {
        event: Event,
        store: Option<StoreWrite>,
    },
}

struct Message {
    at: Duration,
    seq: u64,
    member: usize,
    incarnation: u32,
    op: Op,
}

struct Member {
    pid: u128,
    incarnation: u32,
    machine: Option<ThreadMachine>,
    disk: BTreeMap<TaskId, Disk>,
    buffers: BTreeMap<TopicPartition, Chunk>,
    /// The fetch the driver waits for: only its answer fills the buffers.
    outstanding: Option<baton_core::machine::RequestId>,
    commands: VecDeque<Command>,
    local: VecDeque<Event>,
    inbox: VecDeque<Event>,
    blocked: bool,
    paused_until: Option<Duration>,
    /// The coordinator's name for it, and the generation it last joined.
    member_id: Option<String>,
    generation: i32,
    joining: bool,
    /// Like the membership task: one round at a time; a join asked for meanwhile is sent when
    /// the round's answer arrives, before the machine has taken that answer in.
    join_wanted: bool,
    latest: Option<(i32, Vec<TopicPartition>)>,
    /// What the last join claimed, and the generation after whose intake to rejoin because
    /// the assignment left some of it out (the membership task's rule).
    claimed: Vec<TopicPartition>,
    rejoin_after: Option<i32>,
    in_group: bool,
    next_heartbeat: Duration,
    unique: i8,
    exited: bool,
    /// The life of each changelog partition this member's fetches know (the topic id a
    /// thread learnt): a fetch of a later life tells it the topic was made again.
    seen_lives: Vec<u32>,
    /// When the driver next asks the broker about its running actives' changelogs.
    next_changelog_check: Duration,
}

struct Round {
    deadline: Duration,
    /// Member id to (member, incarnation, JoinGroup metadata).
    joined: BTreeMap<String, (usize, u32, Vec<u8>)>,
}

struct CMember {
    member: usize,
    incarnation: u32,
    last_seen: Duration,
}

#[derive(Default)]
struct Log {
    input: Vec<Vec<u32>>,
    changelog: Vec<Vec<(u32, u64)>>,
    /// How often each changelog partition was deleted and made again (its topic id).
    lives: Vec<u32>,
    /// Partitions whose changelog was made again at least once: a store found behind it may
    /// rightly be rebuilt.
    remade: std::collections::BTreeSet<usize>,
    /// Partitions whose changelog lost its contents (made again) and holds no re-seed since:
    /// a commit there cannot be checked against it.
    emptied: std::collections::BTreeSet<usize>,
    sink: Vec<(u32, u64)>,
    committed: BTreeMap<i32, i64>,
}

struct World {
    rng: Rng,
    now: Duration,
    seq: u64,
    net: Vec<Message>,
    members: Vec<Member>,
    log: Log,
    generation: i32,
    group: BTreeMap<String, CMember>,
    round: Option<Round>,
    next_member_id: u64,
    /// A kill, a long pause or a lapsed membership happened: duplicates are allowed, loss is
    /// not.
    crashed: bool,
    topology: Topology,
    /// `BATON_TRACE=1`: print every event and command.
    trace: bool,
    /// The faults a run draws from.
    faults: Faults,
}

/// Which faults a run draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Faults {
    /// Kills, pauses, drains, new members; changelogs are never deleted.
    Membership,
    /// Changelogs deleted and made again under a steady group (late and repeated answers,
    /// failed requests and rebalances still come): each must be written again from the store
    /// that holds its task's state, so nothing is lost or counted twice. Not mixed with the
    /// membership faults: a changelog deleted while the only copy of its state is on a member
    /// that is down or moving is lost, as docs/RUNTIME.md says.
    Changelogs,
}

fn task_tp(topic: &str, task: TaskId) -> TopicPartition {
    TopicPartition {
        topic: topic.into(),
        partition: task.partition as i32,
    }
}

impl World {
    fn with_faults(seed: u64, faults: Faults) -> World {
        let mut w = World::new(seed);
        w.faults = faults;
        w
    }

    fn new(seed: u64) -> World {
        let mut w = World {
            rng: Rng(seed),
            now: Duration::ZERO,
            seq: 0,
            net: Vec::new(),
            members: Vec::new(),
            log: Log {
                input: vec![Vec::new(); PARTITIONS as usize],
                changelog: vec![Vec::new(); PARTITIONS as usize],
                lives: vec![0; PARTITIONS as usize],
                ..Log::default()
            },
            generation: 0,
            group: BTreeMap::new(),
            round: None,
            next_member_id: 0,
            crashed: false,
            topology: topology(),
            trace: std::env::var("BATON_TRACE").is_ok(),
            faults: Faults::Membership,
        };
        let n = 1 + w.rng.below(3) as usize;
        for _ in 0..n {
            w.add_member();
        }
        w
    }

    fn config() -> MachineConfig {
        MachineConfig {
            session_timeout: SESSION,
            write_timeout: ms(1000),
            commit_interval: ms(500),
            acceptable_recovery_lag: 3,
            restore_fetch_bytes: 1 << 20,
            restore_fetch_bytes_beside_actives: 1 << 20,
            input_fetch_bytes: 1 << 20,
            static_membership: false,
            retry_backoff: baton_core::Backoff {
                first: ms(100),
                max: ms(3_200),
                attempts: u32::MAX,
            },
            rejoin_mode: baton_assignor::RejoinMode::Eager,
            auto_offset_reset: baton_core::config::OffsetReset::Earliest,
            failed_task_retry: None,
            on_oversized_record: Default::default(),
            fetch_beside_batches: true,
            wall_clock: std::collections::BTreeMap::new(),
        }
    }

    fn add_member(&mut self) {
        let pid = self.members.len() as u128 + 1;
        self.members.push(Member {
            pid,
            incarnation: 0,
            machine: None,
            disk: BTreeMap::new(),
            buffers: BTreeMap::new(),
            outstanding: None,
            commands: VecDeque::new(),
            local: VecDeque::new(),
            inbox: VecDeque::new(),
            blocked: false,
            paused_until: None,
            member_id: None,
            generation: -1,
            joining: false,
            join_wanted: false,
            latest: None,
            claimed: Vec::new(),
            rejoin_after: None,
            in_group: false,
            next_heartbeat: Duration::ZERO,
            unique: 0,
            seen_lives: self.log.lives.clone(),
            next_changelog_check: Duration::ZERO,
            exited: false,
        });
        let i = self.members.len() - 1;
        self.start(i);
    }

    /// A new process on the member's disk: a fresh machine, a fresh membership.
    fn start(&mut self, i: usize) {
        let now = self.now;
        let m = &mut self.members[i];
        m.incarnation += 1;
        let mut machine = ThreadMachine::new(Self::config(), topology(), now);
        m.commands = machine.start().into();
        m.machine = Some(machine);
        m.buffers.clear();
        m.outstanding = None;
        m.local.clear();
        m.inbox.clear();
        m.blocked = false;
        m.paused_until = None;
        m.member_id = None;
        m.generation = -1;
        m.joining = false;
        m.join_wanted = false;
        m.latest = None;
        m.claimed.clear();
        m.rejoin_after = None;
        m.in_group = false;
        m.exited = false;
        m.seen_lives = self.log.lives.clone();
        for d in m.disk.values_mut() {
            d.open = false;
        }
    }

    fn kill(&mut self, i: usize) {
        if self.trace {
            println!("{:>8?} m{i} KILLED", self.now);
        }
        // What the process had written to its sockets still goes out, at once.
        let (now, incarnation) = (self.now, self.members[i].incarnation);
        for msg in &mut self.net {
            let request = !matches!(msg.op, Op::Deliver(_) | Op::Fetch { .. } | Op::Ack { .. });
            if msg.member == i && msg.incarnation == incarnation && request {
                msg.at = msg.at.min(now + ms(1));
            }
        }
        let m = &mut self.members[i];
        m.machine = None;
        m.incarnation += 1;
        for d in m.disk.values_mut() {
            d.live = d.durable.clone();
            d.open = false;
        }
        self.crashed = true;
    }

    fn send(&mut self, member: usize, delay: Duration, op: Op) {
        let incarnation = self.members[member].incarnation;
        self.send_to(member, incarnation, delay, op);
    }

    fn send_to(&mut self, member: usize, incarnation: u32, delay: Duration, op: Op) {
        self.seq += 1;
        self.net.push(Message {
            at: self.now + delay,
            seq: self.seq,
            member,
            incarnation,
            op,
        });
    }

    fn delay(&mut self) -> Duration {
        match self.rng.below(10) {
            0 => ms(200 + self.rng.below(800)),
            _ => ms(1 + self.rng.below(40)),
        }
    }

    fn alive(&self, i: usize) -> bool {
        let m = &self.members[i];
        m.machine.is_some() && m.paused_until.is_none_or(|t| self.now >= t)
    }

    // ---- the member side: the driver's job ----

    fn run_member(&mut self, i: usize) -> Result<(), String> {
        for _ in 0..10_000 {
            if !self.alive(i) || self.members[i].blocked {
                return Ok(());
            }
            let now = self.now;
            let m = &mut self.members[i];
            if let Some(c) = m.commands.pop_front() {
                if self.trace {
                    println!("{:>8?} m{i} cmd {c:?}", self.now);
                }
                self.execute(i, c)?;
                continue;
            }
            let e = m.local.pop_front().or_else(|| m.inbox.pop_front());
            let Some(e) = e else { return Ok(()) };
            if self.trace && e != Event::Tick {
                println!("{:>8?} m{i} event {e:?}", self.now);
            }
            let machine = m.machine.as_mut().expect("alive");
            let cmds = machine.handle(e, now);
            m.commands.extend(cmds);
            let report = machine.report();
            if m.rejoin_after.is_some_and(|g| report.generation >= g) && !m.joining {
                m.rejoin_after = None;
                if !report.joining {
                    self.send_join(i, &report);
                }
            }
        }
        Err(format!("member {i} does not come to rest"))
    }

    fn execute(&mut self, i: usize, c: Command) -> Result<(), String> {
        let now = self.now;
        match c {
            Command::Join { reason, report } => {
                // A lapsed membership drops its actives uncommitted, like a crash: what it
                // processed since its last commit may be processed again.
                if reason.lost_membership() {
                    self.crashed = true;
                }
                if self.members[i].joining {
                    self.members[i].join_wanted = true;
                } else {
                    self.send_join(i, &report);
                }
            }
            Command::Leave => {
                let d = self.delay();
                self.send(i, d, Op::Leave);
                self.members[i].in_group = false;
            }
            Command::Exit(exit) => {
                let m = &mut self.members[i];
                if exit == Exit::Drained {
                    let held = m.machine.as_ref().map_or(0, |x| x.tasks().len());
                    if held > 0 {
                        return Err(format!("member {i} drained holding {held} tasks"));
                    }
                }
                for d in m.disk.values_mut() {
                    d.open = false;
                }
                m.machine = None;
                m.exited = true;
            }
            Command::Open { task, .. } => {
                let busy = self.rng.chance(5);
                let d = self.members[i].disk.entry(task).or_default();
                if busy {
                    self.members[i].local.push_back(Event::OpenBusy { task });
                    return Ok(());
                }
                if d.open {
                    return Err(format!("member {i} opened {task} twice"));
                }
                d.open = true;
                let at = d.live.checkpoint;
                // As the runtime's driver: a new store is marked with the life its thread
                // knows; a store of another life is settled with the broker's.
                let p = task.partition as usize;
                let known = self.members[i].seen_lives[p];
                let d = self.members[i].disk.entry(task).or_default();
                let older = match d.live.life {
                    None => {
                        d.live.life = Some(known);
                        d.durable.life = Some(known);
                        false
                    }
                    Some(life) => life != known,
                };
                let life = d.live.life;
                self.members[i].local.push_back(Event::Opened {
                    task,
                    checkpoints: vec![at],
                });
                if older {
                    self.members[i].seen_lives[p] = self.log.lives[p];
                    if life != Some(self.log.lives[p]) {
                        let event = Event::ChangelogRecreated { task, changelog: 0 };
                        self.members[i].local.push_back(event);
                    }
                }
            }
            Command::Discard { task, why } => {
                // Only a changelog made again may leave a store behind it.
                if !self.log.remade.contains(&(task.partition as usize)) {
                    return Err(format!("member {i} discarded {task}'s good store: {why}"));
                }
                let d = self.members[i].disk.entry(task).or_default();
                d.live = Store::default();
                d.durable = Store::default();
            }
            Command::Reseed {
                task,
                request,
                changelogs,
            } => self.reseed(i, task, request, &changelogs)?,
            Command::Close { task } => {
                if let Some(d) = self.members[i].disk.get_mut(&task) {
                    d.open = false;
                    d.durable = d.live.clone();
                }
            }
            Command::Persist { task } => {
                if let Some(d) = self.members[i].disk.get_mut(&task) {
                    d.durable = d.live.clone();
                }
            }
            Command::Fetch { fetch, wants } => {
                self.members[i].outstanding = Some(fetch);
                let fail = self.rng.chance(5);
                let d = self.delay();
                let mut results = Vec::new();
                let mut chunks = BTreeMap::new();
                if !fail {
                    for w in &wants {
                        let p = w.tp.partition as usize;
                        if w.tp.topic != "in" && self.members[i].seen_lives[p] < self.log.lives[p] {
                            // Fetched by the old id: the topic is gone; the name has a new one.
                            self.members[i].seen_lives[p] = self.log.lives[p];
                            let task = TaskId::new(0, p as u32);
                            let event = Event::ChangelogRecreated { task, changelog: 0 };
                            self.send(i, d, Op::Deliver(event));
                            continue;
                        }
                        let chunk: Chunk = if w.tp.topic == "in" {
                            self.log.input[p]
                                .iter()
                                .enumerate()
                                .skip(w.offset.max(0) as usize)
                                .take(7)
                                .map(|(o, &k)| (o as i64, k, 0))
                                .collect()
                        } else {
                            self.log.changelog[p]
                                .iter()
                                .enumerate()
                                .skip(w.offset.max(0) as usize)
                                .take(5)
                                .map(|(o, &(k, c))| (o as i64, k, c))
                                .collect()
                        };
                        let hw = if w.tp.topic == "in" {
                            self.log.input[p].len()
                        } else {
                            self.log.changelog[p].len()
                        } as i64;
                        let next = chunk.last().map_or(w.offset, |r| r.0 + 1);
                        results.push(FetchResult {
                            tp: w.tp.clone(),
                            from: w.offset,
                            next,
                            high_watermark: Some(hw),
                        });
                        chunks.insert(w.tp.clone(), chunk);
                    }
                }
                let event = if fail {
                    Event::FetchFailed { fetch }
                } else {
                    Event::Fetched { fetch, results }
                };
                self.send(i, d, Op::Fetch { event, chunks });
            }
            Command::Absorb {
                task,
                changelog,
                end,
            } => {
                let tp = task_tp("cl", task);
                let chunk = self.members[i].buffers.remove(&tp).unwrap_or_default();
                // Not beside deleted changelogs: a batch whose store write failed lives only in
                // its changelog until the store catches up, and deleting that changelog then
                // loses it (a double fault).
                let store_fails = self.faults == Faults::Membership && self.rng.chance(2);
                let m = &mut self.members[i];
                let d = m.disk.entry(task).or_default();
                if !d.open {
                    return Err(format!(
                        "member {i} wrote {task}'s store without opening it"
                    ));
                }
                if store_fails {
                    m.local.push_back(Event::StoreFailed {
                        task,
                        fault: baton_core::machine::StoreFault::Failed,
                    });
                    return Ok(());
                }
                let mut at = d.live.checkpoint;
                for (o, k, c) in chunk.into_iter().filter(|r| r.0 < end) {
                    if o >= at {
                        d.live.counts.insert(k, c);
                        at = o + 1;
                    }
                }
                d.live.checkpoint = at;
                // A store now and then takes a bulk load that leaves no room for another
                // chunk: its changelog waits for the load's end.
                let loading = self.rng.chance(20);
                m.local.push_back(Event::Absorbed {
                    task,
                    changelog,
                    stored: at,
                    loading,
                });
                if loading {
                    let d = self.delay();
                    self.send(i, d, Op::Deliver(Event::LoadEnded { task, changelog }));
                }
            }
            Command::Process {
                task,
                batch,
                inputs,
            } => {
                let machine = self.members[i].machine.as_ref().expect("alive");
                if !machine.may_write(now) {
                    self.members[i].local.push_back(Event::BatchFailed {
                        task,
                        batch,
                        output_acknowledged: false,
                    });
                    return Ok(());
                }
                let tp = task_tp("in", task);
                let chunk = self.members[i].buffers.remove(&tp).unwrap_or_default();
                let d = self.members[i].disk.entry(task).or_default();
                if !d.open {
                    return Err(format!("member {i} processed {task} without its store"));
                }
                let mut pending: BTreeMap<u32, u64> = BTreeMap::new();
                let mut outputs = Vec::new();
                let (from, to) = (inputs[0].from, inputs[0].to);
                let covered = chunk.iter().filter(|r| r.0 >= from && r.0 < to).count() as i64;
                if covered != to - from {
                    return Err(format!(
                        "member {i} told to process {task} {from}..{to} holding {covered} of those records"
                    ));
                }
                for (o, k, _) in chunk {
                    if o < from || o >= to {
                        continue;
                    }
                    let c = pending
                        .get(&k)
                        .or(d.live.counts.get(&k))
                        .copied()
                        .unwrap_or(0)
                        + 1;
                    pending.insert(k, c);
                    outputs.push((k, c));
                }
                let changelog: Vec<(u32, u64)> = pending.into_iter().collect();
                let fail = self.rng.chance(4);
                let lose_ack = self.rng.chance(4);
                // Written but reported failed: if the task moves before a retry succeeds, its
                // new owner restores the write and replays the input (at-least-once).
                self.crashed |= lose_ack;
                // Not beside deleted changelogs: a batch whose store write failed lives only in
                // its changelog until the store catches up, and deleting that changelog then
                // loses it (a double fault).
                let store_fails = self.faults == Faults::Membership && self.rng.chance(2);
                let dl = self.delay();
                self.members[i].blocked = true;
                self.send(
                    i,
                    dl,
                    Op::Produce {
                        task,
                        batch,
                        changelog,
                        outputs,
                        fail,
                        lose_ack,
                        store_fails,
                    },
                );
            }
            // The fuzzer's logs are never deleted or made again: no fetch is out of range.
            // Nor has its topology a wall-clock punctuation.
            Command::ListSourceOffsets { .. }
            | Command::SourceReset { .. }
            | Command::Punctuate { .. } => {}
            Command::ListEnds { task, request, .. } => {
                // Lost answers need none: the fetches find the ends too.
                if !self.rng.chance(5) {
                    let ends = vec![self.log.changelog[task.partition as usize].len() as i64];
                    let d = self.delay();
                    let event = Event::EndsListed {
                        task,
                        request,
                        ends,
                    };
                    self.send(i, d, Op::Deliver(event));
                }
            }
            Command::ReadCommitted { task } => {
                let fail = self.rng.chance(5);
                let d = self.delay();
                self.members[i].blocked = true;
                self.send(i, d, Op::ReadCommitted(task, fail));
            }
            Command::Commit {
                commit,
                generation,
                member_id,
                offsets,
            } => {
                for d in self.members[i].disk.values_mut() {
                    if d.open {
                        d.durable = d.live.clone();
                    }
                }
                let d = self.delay();
                self.members[i].blocked = true;
                self.send(
                    i,
                    d,
                    Op::Commit {
                        commit,
                        generation,
                        member_id,
                        offsets,
                    },
                );
            }
        }
        Ok(())
    }

    /// Task `p` runs as an active on a live member, and no copy of it restores or warms up.
    fn runs_settled(&self, p: usize) -> bool {
        let task = TaskId::new(0, p as u32);
        let states: Vec<&baton_core::machine::TaskState> = self
            .members
            .iter()
            .filter_map(|m| m.machine.as_ref()?.tasks().get(&task))
            .collect();
        states
            .iter()
            .any(|t| t.role == Role::Active && t.phase == Phase::Running)
            && states
                .iter()
                .all(|t| t.phase != Phase::Restoring && t.role != Role::Warmup)
    }

    /// The driver's re-seed: the store's whole contents written into the changelog, then its
    /// end taken as the checkpoint, durably. Sometimes it fails half way.
    fn reseed(
        &mut self,
        i: usize,
        task: TaskId,
        request: baton_core::machine::RequestId,
        changelogs: &[usize],
    ) -> Result<(), String> {
        if changelogs != [0] {
            return Err(format!(
                "member {i} re-seeded {task}'s changelogs {changelogs:?}"
            ));
        }
        let may_write = self.members[i]
            .machine
            .as_ref()
            .is_some_and(|m| m.may_write(self.now));
        let fail = !may_write || self.rng.chance(10);
        let p = task.partition as usize;
        // Asked of the broker before the writes, as the runtime's driver does.
        let life = self.log.lives[p];
        let m = &mut self.members[i];
        m.seen_lives[p] = life;
        let d = m.disk.entry(task).or_default();
        if !d.open {
            return Err(format!("member {i} re-seeded {task} without its store"));
        }
        // What the new changelog holds came after it was made again: newer than the store.
        for &(k, c) in &self.log.changelog[p] {
            d.live.counts.insert(k, c);
        }
        let contents: Vec<(u32, u64)> = d.live.counts.iter().map(|(&k, &c)| (k, c)).collect();
        let event = if fail {
            if may_write {
                // Half of it landed before the failure.
                let half = contents.len() / 2;
                self.log.changelog[p].extend(contents[..half].iter().copied());
            }
            Event::ReseedFailed { task, request }
        } else {
            self.log.changelog[p].extend(contents.iter().copied());
            let end = self.log.changelog[p].len() as i64;
            self.log.emptied.remove(&p);
            d.live.checkpoint = end;
            d.live.life = Some(life);
            d.durable = d.live.clone();
            Event::Reseeded {
                task,
                request,
                ends: vec![(0, end)],
            }
        };
        m.local.push_back(event);
        Ok(())
    }

    fn send_join(&mut self, i: usize, report: &baton_core::machine::Report) {
        let m = &mut self.members[i];
        m.joining = true;
        m.unique = m.unique.wrapping_add(1);
        let sums: Vec<TaskOffsetSum> = report
            .offset_sums
            .iter()
            .map(|(&task, &offset_sum)| TaskOffsetSum { task, offset_sum })
            .collect();
        let owned = report.claimed(m.latest.as_ref());
        m.claimed = owned.clone();
        let metadata = leader::encode_subscription(
            &self.topology,
            &MemberReport {
                version: baton_protocol::BATON_VERSION,
                latest_supported: baton_protocol::BATON_VERSION,
                process_id: uuid::Uuid::from_u128(m.pid),
                user_endpoint: "",
                offset_sums: &sums,
                leaving: report.leaving,
                leaving_since_ms: None,
                warmups: &report.warmups,
                owned: &owned,
                generation: m.generation,
                unique: m.unique,
                rack: None,
                client_tags: &[],
            },
        );
        let d = self.delay();
        self.send(i, d, Op::Join(metadata));
    }

    // ---- the broker and coordinator side ----

    fn deliver(&mut self, msg: Message) -> Result<(), String> {
        let i = msg.member;
        let current = self.members[i].incarnation == msg.incarnation;
        let now = self.now;
        match msg.op {
            Op::Deliver(e) => {
                if !current {
                    return Ok(());
                }
                if let Event::Assigned(a) = &e {
                    let partitions: Vec<TopicPartition> =
                        a.active.iter().map(|&t| task_tp("in", t)).collect();
                    let m = &mut self.members[i];
                    if a.generation <= m.generation {
                        // The membership task sees each round's answer once, in order.
                        m.inbox.push_back(e);
                        return Ok(());
                    }
                    if m.claimed.iter().any(|tp| !partitions.contains(tp)) {
                        m.rejoin_after = Some(a.generation);
                    }
                    m.latest = Some((a.generation, partitions));
                    m.generation = a.generation;
                    m.joining = false;
                    if std::mem::take(&mut m.join_wanted) {
                        if let Some(report) = m.machine.as_ref().map(ThreadMachine::report) {
                            self.send_join(i, &report);
                        }
                    }
                }
                self.members[i].inbox.push_back(e);
            }
            Op::Fetch { event, chunks } => {
                let m = &mut self.members[i];
                if current {
                    let id = match &event {
                        Event::Fetched { fetch, .. } | Event::FetchFailed { fetch } => *fetch,
                        _ => unreachable!("a fetch's answer"),
                    };
                    if m.outstanding == Some(id) {
                        m.outstanding = None;
                        m.buffers = chunks;
                    }
                    m.inbox.push_back(event);
                }
            }
            Op::Produce {
                task,
                batch,
                changelog,
                outputs,
                fail,
                lose_ack,
                store_fails,
            } => {
                // A request on the wire reaches the broker even if its sender died since.
                let p = task.partition as usize;
                let mut next = 0;
                if self.trace {
                    println!("{now:>8?} produce {task} {changelog:?} fail {fail} lose_ack {lose_ack} store_fails {store_fails}");
                }
                let mut first = 0;
                if !fail {
                    first = self.log.changelog[p].len() as i64;
                    self.log.changelog[p].extend(changelog.iter().copied());
                    next = self.log.changelog[p].len() as i64;
                    self.log.sink.extend(outputs.iter().copied());
                }
                let (event, store) = if fail || lose_ack {
                    let event = Event::BatchFailed {
                        task,
                        batch,
                        output_acknowledged: false,
                    };
                    (event, None)
                } else if store_fails {
                    let event = Event::BatchFailed {
                        task,
                        batch,
                        output_acknowledged: true,
                    };
                    (event, None)
                } else {
                    let event = Event::BatchDone {
                        task,
                        batch,
                        changelogs: vec![(0, first, next)],
                    };
                    (event, Some((task, changelog, next)))
                };
                self.answer(i, msg.incarnation, Op::Ack { event, store });
            }
            Op::ReadCommitted(task, fail) => {
                let offsets = vec![self.log.committed.get(&(task.partition as i32)).copied()];
                let event = if fail {
                    Event::CommittedReadFailed { task }
                } else {
                    Event::CommittedRead { task, offsets }
                };
                self.answer(i, msg.incarnation, Op::Ack { event, store: None });
            }
            Op::Ack { event, store } => {
                if current {
                    let m = &mut self.members[i];
                    m.blocked = false;
                    if let Some((task, writes, next)) = store {
                        let d = m.disk.entry(task).or_default();
                        d.live.counts.extend(writes);
                        // Never lowered (the driver's rule): a changelog made again takes the
                        // batch before the checkpoint, and the machine re-seeds it.
                        d.live.checkpoint = d.live.checkpoint.max(next);
                    }
                    m.local.push_back(event);
                }
            }
            Op::Commit {
                commit,
                generation,
                member_id,
                offsets,
            } => {
                let ok = generation == self.generation && self.group.contains_key(&member_id);
                if self.trace {
                    println!("{now:>8?} commit {offsets:?} gen {generation} {member_id}: {ok}");
                }
                if ok {
                    for (tp, at) in &offsets {
                        self.check_commit(tp.partition, *at)?;
                        self.log.committed.insert(tp.partition, *at);
                    }
                }
                let event = Event::CommitDone { commit, ok };
                self.answer(i, msg.incarnation, Op::Ack { event, store: None });
            }
            Op::Join(metadata) => {
                if !current {
                    return Ok(());
                }
                let id = match self.members[i].member_id.clone() {
                    Some(id) if self.group.contains_key(&id) => id,
                    _ => {
                        self.next_member_id += 1;
                        let id = format!("m{}", self.next_member_id);
                        self.members[i].member_id = Some(id.clone());
                        id
                    }
                };
                let round = self.round.get_or_insert(Round {
                    deadline: now + REBALANCE_TIMEOUT,
                    joined: BTreeMap::new(),
                });
                round.joined.insert(id, (i, msg.incarnation, metadata));
            }
            Op::Heartbeat {
                member_id,
                generation,
            } => {
                if !current {
                    return Ok(());
                }
                let id = member_id.unwrap_or_default();
                let awaiting = self
                    .round
                    .as_ref()
                    .is_some_and(|r| r.joined.contains_key(&id));
                let known = self.group.contains_key(&id);
                // As Kafka's coordinator: an unknown member or an old generation is refused
                // first; a heartbeat during a rebalance is answered so, and counts.
                let answer = if !(known || awaiting) || generation != self.generation {
                    Heartbeat::Fenced
                } else if self.round.is_some() {
                    Heartbeat::Rebalancing
                } else {
                    Heartbeat::Alive
                };
                if answer != Heartbeat::Fenced {
                    if let Some(c) = self.group.get_mut(&id) {
                        c.last_seen = now;
                    }
                }
                let d = self.delay();
                self.send(i, d, Op::Deliver(Event::Heartbeat { answer, at: now }));
            }
            Op::Leave => {
                if let Some(id) = self.members[i].member_id.take() {
                    if self.group.remove(&id).is_some() {
                        self.start_round();
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends an answer back to the member it belongs to.
    fn answer(&mut self, member: usize, incarnation: u32, op: Op) {
        self.seq += 1;
        self.net.push(Message {
            at: self.now,
            seq: self.seq,
            member,
            incarnation,
            op,
        });
    }

    /// The changelog holds every input record below a committed position.
    fn check_commit(&self, partition: i32, at: i64) -> Result<(), String> {
        let p = partition as usize;
        if self.log.emptied.contains(&p) {
            return Ok(());
        }
        let mut want: BTreeMap<u32, u64> = BTreeMap::new();
        for &k in self.log.input[p].iter().take(at.max(0) as usize) {
            *want.entry(k).or_default() += 1;
        }
        let mut have: BTreeMap<u32, u64> = BTreeMap::new();
        for &(k, c) in &self.log.changelog[p] {
            have.insert(k, c);
        }
        for (k, n) in want {
            let h = have.get(&k).copied().unwrap_or(0);
            if h < n {
                return Err(format!(
                    "commit of in-{partition} at {at}: key {k} has {n} events below it but the changelog counts {h}"
                ));
            }
        }
        Ok(())
    }

    fn start_round(&mut self) {
        if self.round.is_none() {
            self.round = Some(Round {
                deadline: self.now + REBALANCE_TIMEOUT,
                joined: BTreeMap::new(),
            });
        }
    }

    fn coordinate(&mut self) -> Result<(), String> {
        let now = self.now;
        let joined: Vec<String> = self
            .round
            .as_ref()
            .map(|r| r.joined.keys().cloned().collect())
            .unwrap_or_default();
        let expired: Vec<String> = self
            .group
            .iter()
            .filter(|(id, c)| now.saturating_sub(c.last_seen) > SESSION && !joined.contains(id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.group.remove(&id);
            self.start_round();
        }
        let Some(round) = &self.round else {
            return Ok(());
        };
        let complete = self.group.keys().all(|id| round.joined.contains_key(id));
        if !complete && now < round.deadline {
            return Ok(());
        }
        let round = self.round.take().expect("checked");
        if round.joined.is_empty() {
            self.group.clear();
            return Ok(());
        }
        self.generation += 1;
        let generation = self.generation;
        self.group.clear();
        let mut members = Vec::new();
        for (id, (i, incarnation, metadata)) in &round.joined {
            self.group.insert(
                id.clone(),
                CMember {
                    member: *i,
                    incarnation: *incarnation,
                    last_seen: now,
                },
            );
            members.push(JoinedMember {
                member_id: id.clone(),
                metadata: metadata.clone(),
            });
        }
        let ends: BTreeMap<TopicPartition, i64> = (0..PARTITIONS)
            .map(|p| {
                (
                    task_tp("cl", TaskId::new(0, p)),
                    self.log.changelog[p as usize].len() as i64,
                )
            })
            .collect();
        let leader_id = members[0].member_id.clone();
        let out = leader::lead(&LeaderInput {
            members: &members,
            topology: &self.topology,
            end_offsets: Some(&ends),
            config: AssignmentConfig {
                acceptable_recovery_lag: 3,
                max_warmup_replicas: 2,
                num_standby_replicas: 1,
                probing_rebalance_interval_ms: 60_000,
                ..AssignmentConfig::default()
            },
            assignor: AssignorKind::HighAvailability,
            leader_member_id: &leader_id,
            now_ms: now.as_millis() as i64,
            metadata_limit: baton_protocol::sizing::GROUP_METADATA_LIMIT,
            latest_version: baton_protocol::BATON_VERSION,
            replica_racks: None,
        });
        if self.trace {
            for m in &members {
                if let Ok((sub, _)) = leader::decode_subscription(&m.metadata) {
                    println!(
                        "{now:>8?} generation {generation}: {} claims {:?} from generation {}",
                        m.member_id, sub.owned_partitions, sub.generation_id
                    );
                }
            }
            println!(
                "{now:>8?} generation {generation}: deferred {:?}",
                out.deferred
            );
        }
        let mut owner: BTreeMap<TaskId, String> = BTreeMap::new();
        for (id, blob) in &out.assignments {
            let (_, info) = leader::decode_assignment(blob).map_err(|e| e.to_string())?;
            let probe = (info.next_rebalance_ms > 0)
                .then(|| Duration::from_millis(info.next_rebalance_ms as u64));
            let assigned = Assigned::from_info(generation, id, &info, probe, now);
            for t in &assigned.active {
                if self.trace {
                    println!("{:>8?} generation {generation}: {t} active on {id}", now);
                }
                if let Some(other) = owner.insert(*t, id.clone()) {
                    return Err(format!(
                        "generation {generation}: {t} is active on {other} and {id}"
                    ));
                }
            }
            let (i, incarnation) = (self.group[id].member, self.group[id].incarnation);
            self.members[i].in_group = true;
            let d = self.delay();
            self.send_to(i, incarnation, d, Op::Deliver(Event::Assigned(assigned)));
        }
        Ok(())
    }

    fn heartbeats(&mut self) {
        for i in 0..self.members.len() {
            let m = &self.members[i];
            if !self.alive(i) || !(m.in_group || m.joining) || self.now < m.next_heartbeat {
                continue;
            }
            let op = Op::Heartbeat {
                member_id: m.member_id.clone(),
                generation: m.generation,
            };
            self.members[i].next_heartbeat = self.now + HEARTBEAT;
            let d = self.delay();
            self.send(i, d, op);
        }
    }

    /// Moves time forward by `dt`, delivering what falls due in order, and lets every member
    /// act.
    fn advance(&mut self, dt: Duration) -> Result<(), String> {
        let until = self.now + dt;
        loop {
            self.net.sort_by_key(|m| (m.at, m.seq));
            let due = self.net.first().filter(|m| m.at <= until).map(|m| m.at);
            match due {
                Some(at) => {
                    self.now = self.now.max(at);
                    let msg = self.net.remove(0);
                    // A paused member's messages wait for it.
                    let answer =
                        matches!(msg.op, Op::Deliver(_) | Op::Fetch { .. } | Op::Ack { .. });
                    if answer
                        && self.members[msg.member]
                            .paused_until
                            .is_some_and(|t| t > self.now)
                        && msg.incarnation == self.members[msg.member].incarnation
                    {
                        let mut msg = msg;
                        msg.at = self.members[msg.member].paused_until.unwrap_or(self.now);
                        self.net.push(msg);
                        continue;
                    }
                    self.deliver(msg)?;
                    self.coordinate()?;
                    for i in 0..self.members.len() {
                        self.run_member(i)?;
                    }
                }
                None => break,
            }
        }
        self.now = until;
        for m in &mut self.members {
            if m.paused_until.is_some_and(|t| t <= until) {
                m.paused_until = None;
            }
        }
        self.coordinate()?;
        self.heartbeats();
        self.changelog_checks();
        for i in 0..self.members.len() {
            if self.alive(i) {
                self.members[i].inbox.push_back(Event::Tick);
            }
            self.run_member(i)?;
        }
        Ok(())
    }

    /// The runtime driver's periodic check (every 5 s) of its running actives' changelogs:
    /// one made again since the member last looked is told to its task.
    fn changelog_checks(&mut self) {
        for i in 0..self.members.len() {
            if !self.alive(i) || self.now < self.members[i].next_changelog_check {
                continue;
            }
            self.members[i].next_changelog_check = self.now + Duration::from_secs(5);
            let Some(machine) = self.members[i].machine.as_ref() else {
                continue;
            };
            let running: Vec<TaskId> = machine
                .tasks()
                .values()
                .filter(|t| t.is_running_active())
                .map(|t| t.id)
                .collect();
            for task in running {
                let p = task.partition as usize;
                if self.members[i].seen_lives[p] < self.log.lives[p] {
                    self.members[i].seen_lives[p] = self.log.lives[p];
                    let d = self.delay();
                    let event = Event::ChangelogRecreated { task, changelog: 0 };
                    self.send(i, d, Op::Deliver(event));
                }
            }
        }
    }

    fn produce(&mut self, n: u64) {
        for _ in 0..n {
            let key = self.rng.below(KEYS as u64) as u32;
            self.log.input[(key % PARTITIONS) as usize].push(key);
        }
    }

    fn step(&mut self) -> Result<(), String> {
        let live: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].machine.is_some())
            .collect();
        let membership = self.faults == Faults::Membership;
        match self.rng.below(100) {
            0..=49 => {
                let dt = ms(1 + self.rng.below(300));
                self.advance(dt)?;
            }
            50..=69 => {
                let n = 1 + self.rng.below(6);
                self.produce(n);
            }
            70..=72 if membership && live.len() > 1 => {
                let i = live[self.rng.below(live.len() as u64) as usize];
                self.kill(i);
            }
            73..=75 if membership => {
                let dead: Vec<usize> = (0..self.members.len())
                    .filter(|&i| self.members[i].machine.is_none())
                    .collect();
                if let Some(&i) = dead.get(self.rng.below(dead.len().max(1) as u64) as usize) {
                    self.start(i);
                }
            }
            76..=77 if membership && self.members.len() < 4 => self.add_member(),
            78..=79 if membership && live.len() > 1 => {
                let i = live[self.rng.below(live.len() as u64) as usize];
                self.members[i].inbox.push_back(Event::DrainRequested);
                self.run_member(i)?;
            }
            80..=81 if membership && !live.is_empty() => {
                let i = live[self.rng.below(live.len() as u64) as usize];
                let long = self.rng.chance(50);
                let pause = if long {
                    SESSION + ms(self.rng.below(3000))
                } else {
                    ms(self.rng.below(1000))
                };
                if long {
                    self.crashed = true;
                }
                self.members[i].paused_until = Some(self.now + pause);
            }
            86..=87 if !membership => {
                // The changelog deleted and made again under the group, while its task runs
                // (the case docs/RUNTIME.md covers: no copy restoring from it then).
                let p = self.rng.below(PARTITIONS as u64) as usize;
                if !self.runs_settled(p) {
                    return Ok(());
                }
                self.log.changelog[p].clear();
                self.log.lives[p] += 1;
                self.log.remade.insert(p);
                self.log.emptied.insert(p);
                if self.trace {
                    println!("{:>8?} changelog {p} MADE AGAIN", self.now);
                }
            }
            82..=85 => {
                // A late or repeated answer: some event delivered a second time.
                let copies: Vec<usize> = (0..self.net.len())
                    .filter(|&k| matches!(self.net[k].op, Op::Deliver(_) | Op::Fetch { .. }))
                    .collect();
                if let Some(&k) = copies.get(self.rng.below(copies.len().max(1) as u64) as usize) {
                    let m = &self.net[k];
                    let op = m.op.clone();
                    let (member, incarnation) = (m.member, m.incarnation);
                    let at = m.at + ms(self.rng.below(2000));
                    self.seq += 1;
                    self.net.push(Message {
                        at,
                        seq: self.seq,
                        member,
                        incarnation,
                        op,
                    });
                }
            }
            _ => {
                let dt = ms(self.rng.below(20));
                self.advance(dt)?;
            }
        }
        Ok(())
    }

    /// Faults stop; the group must process and commit everything, and the counts must add up.
    fn settle(&mut self) -> Result<(), String> {
        let deadline = self.now + SETTLE_LIMIT;
        while self.now < deadline {
            // As an operator would: an application that drained or lost every instance gets
            // one back.
            if self.members.iter().all(|m| m.machine.is_none()) {
                self.start(0);
            }
            self.advance(ms(100))?;
            let done = (0..PARTITIONS as i32).all(|p| {
                self.log.committed.get(&p).copied().unwrap_or(0)
                    == self.log.input[p as usize].len() as i64
            });
            if done && self.round.is_none() {
                return self.check_counts();
            }
        }
        let committed: Vec<String> = (0..PARTITIONS as i32)
            .map(|p| {
                format!(
                    "in-{p}: {}/{}",
                    self.log.committed.get(&p).copied().unwrap_or(0),
                    self.log.input[p as usize].len()
                )
            })
            .collect();
        Err(format!("stuck: committed {}", committed.join(", ")))
    }

    fn check_counts(&self) -> Result<(), String> {
        let mut want: BTreeMap<u32, u64> = BTreeMap::new();
        for p in &self.log.input {
            for &k in p {
                *want.entry(k).or_default() += 1;
            }
        }
        let mut latest: BTreeMap<u32, u64> = BTreeMap::new();
        for &(k, c) in &self.log.sink {
            latest.insert(k, c);
        }
        for (k, n) in want {
            let got = latest.get(&k).copied().unwrap_or(0);
            if got < n || (got > n && !self.crashed) {
                return Err(format!(
                    "key {k}: {n} events, latest output {got} (kills or pauses: {})",
                    self.crashed
                ));
            }
        }
        Ok(())
    }
}

fn run_seed_with(seed: u64, faults: Faults) -> Result<(), String> {
    let mut w = World::with_faults(seed, faults);
    for _ in 0..STEPS {
        w.step()?;
    }
    w.settle()
}

fn check(seeds: std::ops::Range<u64>) {
    check_with(seeds, Faults::Membership)
}

fn check_with(seeds: std::ops::Range<u64>, faults: Faults) {
    let failures: Vec<(u64, String)> = seeds
        .filter_map(|s| run_seed_with(s, faults).err().map(|e| (s, e)))
        .take(5)
        .collect();
    for (seed, e) in &failures {
        eprintln!(
            "seed {seed}: {e}\n  reproduce: BATON_SEED={seed} cargo test -p baton-core --test schedule one_seed -- --ignored"
        );
    }
    assert!(failures.is_empty(), "{} seeds failed", failures.len());
}

#[test]
fn schedules_keep_every_invariant() {
    let n: u64 = std::env::var("BATON_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    // Two halves on two threads: the machine has two cores.
    let half = n / 2;
    let other = std::thread::spawn(move || check(half..n));
    check(0..half);
    other.join().expect("the other half");
}

/// Replays one seed: `BATON_SEED=S cargo test -p baton-core --test schedule one_seed --
/// --ignored` (with `BATON_TRACE=1` to print it).
#[test]
#[ignore = "replays the seed in BATON_SEED"]
fn one_seed() {
    let seed: u64 = std::env::var("BATON_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("BATON_SEED=<seed>");
    // BATON_FAULTS=changelogs replays a seed of the changelog run.
    let faults = match std::env::var("BATON_FAULTS").as_deref() {
        Ok("changelogs") => Faults::Changelogs,
        _ => Faults::Membership,
    };
    if let Err(e) = run_seed_with(seed, faults) {
        panic!("seed {seed}: {e}");
    }
}

/// Changelogs deleted and made again under a steady group ([`Faults::Changelogs`]): every
/// count exact, every commit backed by the changelog once it holds the state again.
///
/// Not yet run by default: it found three losses, two fixed (a re-seed now takes in what the
/// new changelog holds first; a batch's first offset, not its last, tells a changelog made
/// again), and still finds some (5 in its first 280 seeds, where it stops) when a deletion
/// is followed by the task's move before its owner wrote into the new topic (the owner
/// fenced, or idle between its 5 s checks), or meets a lost acknowledgement (`BATON_SEEDS=500 cargo test -p baton-core --test schedule
/// changelogs -- --ignored`; replay one with `BATON_FAULTS=changelogs BATON_SEED=N ...
/// one_seed`).
#[test]
#[ignore = "finds losses when a changelog is deleted beside lost acknowledgements or moves (issue 53)"]
fn changelogs_made_again_lose_nothing() {
    let n: u64 = std::env::var("BATON_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(2_000, |n: u64| n / 5);
    check_with(0..n, Faults::Changelogs);
}
