//! Builders shared by the integration tests.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use baton_assignor::{
    AssignmentConfig, ClientId, ClientSpec, Cluster, ClusterState, Lag, TaskId, TaskSpec,
};

pub const MAX: i64 = i64::MAX;

pub fn t(s: &str) -> TaskId {
    s.parse().unwrap()
}

pub fn ts(list: &[&str]) -> BTreeSet<TaskId> {
    list.iter().map(|s| t(s)).collect()
}

pub fn stateful(ids: &[&str], end: u64) -> Vec<TaskSpec> {
    ids.iter()
        .map(|s| TaskSpec {
            id: t(s),
            stateful: true,
            end_offset_sum: end,
            partitions: Vec::new(),
        })
        .collect()
}

pub fn stateless(ids: &[&str]) -> Vec<TaskSpec> {
    ids.iter()
        .map(|s| TaskSpec {
            id: t(s),
            stateful: false,
            end_offset_sum: 0,
            partitions: Vec::new(),
        })
        .collect()
}

/// A client with explicit lags (Kafka's test constructor `ClientState(prevActive, prevStandby, lags, capacity)`).
pub fn client(
    id: &str,
    capacity: u32,
    active: &[&str],
    standby: &[&str],
    lags: &[(&str, i64)],
) -> ClientSpec {
    ClientSpec {
        id: ClientId(id.into()),
        capacity,
        owned_active: ts(active),
        owned_standby: ts(standby),
        lags: lags
            .iter()
            .map(|&(k, v)| (t(k), Lag::from_wire(v).unwrap()))
            .collect::<BTreeMap<_, _>>(),
        ..Default::default()
    }
}

/// Kafka's `mock(prevActive)`: lag 0 on the previous actives, capacity 1 (tasks' ends are MAX).
pub fn mock(id: &str, active: &[&str]) -> ClientSpec {
    let lags: Vec<(&str, i64)> = active.iter().map(|&a| (a, 0)).collect();
    client(id, 1, active, &[], &lags)
}

pub fn config(acceptable: u64, warmups: u32, standbys: u32) -> AssignmentConfig {
    AssignmentConfig {
        acceptable_recovery_lag: acceptable,
        max_warmup_replicas: warmups,
        num_standby_replicas: standbys,
        probing_rebalance_interval_ms: 60_000,
        ..AssignmentConfig::default()
    }
}

pub fn cluster(
    config: AssignmentConfig,
    tasks: Vec<TaskSpec>,
    clients: Vec<ClientSpec>,
) -> Cluster {
    Cluster::new(ClusterState {
        config,
        tasks,
        clients,
    })
    .unwrap()
}

/// The same lag for every task in `tasks`.
pub fn uniform_lags<'a>(tasks: &[&'a str], lag: i64) -> Vec<(&'a str, i64)> {
    tasks.iter().map(|&x| (x, lag)).collect()
}

/// Kafka's MostCaughtUp scenario: one task, nobody caught up, c3 least behind.
pub fn most_caught_up() -> Cluster {
    cluster(
        config(100, 2, 1),
        stateful(&["0_0"], MAX as u64),
        vec![
            client("c1", 1, &[], &[], &[]),
            client("c2", 1, &[], &[], &[("0_0", 1000)]),
            client("c3", 1, &[], &[], &[("0_0", 500)]),
        ],
    )
}

/// 12 stateful tasks dealt round robin to running clients c1..c3, then an empty c4 joins.
pub fn twelve_on_three_plus_one(config: AssignmentConfig) -> ClusterState {
    let tasks = stateful_tasks(12, 12, 150_000);
    let mut clients = vec![fresh("c1", 1), fresh("c2", 1), fresh("c3", 1)];
    for (i, t) in tasks.iter().enumerate() {
        clients[i % 3].owned_active.insert(t.id);
        clients[i % 3].lags.insert(t.id, Lag::Running);
    }
    clients.push(fresh("c4", 1));
    ClusterState {
        config,
        tasks,
        clients,
    }
}

/// The nine tasks 0_0..2_2.
pub const NINE: [&str; 9] = [
    "0_0", "0_1", "0_2", "1_0", "1_1", "1_2", "2_0", "2_1", "2_2",
];

use baton_assignor::{Assignment, TaskAssignor};

/// The next round in the style of Kafka's TaskAssignorConvergenceTest: every copy a client held
/// is fully caught up; state it did not hold is gone.
pub fn next_round(state: &ClusterState, a: &Assignment) -> ClusterState {
    let mut next = state.clone();
    for c in &mut next.clients {
        let got = &a.clients[&c.id];
        c.owned_active = got.active.iter().copied().collect();
        c.owned_standby = got.standby.iter().copied().collect();
        c.owned_warmup = got.warmup.iter().copied().collect();
        c.lags.clear();
        for task in &next.tasks {
            if !task.stateful {
                continue;
            }
            if c.owned_active.contains(&task.id) {
                c.lags.insert(task.id, Lag::Running);
            } else if c.owned_standby.contains(&task.id) || c.owned_warmup.contains(&task.id) {
                c.lags.insert(task.id, Lag::Behind(0));
            }
        }
    }
    next
}

/// What a run to convergence cost.
#[derive(Debug, Default)]
pub struct Convergence {
    /// Assignments computed, the first included.
    pub rounds: usize,
    /// Follow-up rebalances requested.
    pub followups: usize,
    /// Times a task's active changed clients.
    pub active_moves: usize,
    pub converged: bool,
    pub last: Option<Assignment>,
    /// The input of the last round.
    pub input: Option<ClusterState>,
    pub state: Option<ClusterState>,
}

pub fn active_of(a: &Assignment) -> BTreeMap<TaskId, ClientId> {
    let mut m = BTreeMap::new();
    for (id, c) in &a.clients {
        for t in &c.active {
            m.insert(*t, id.clone());
        }
    }
    m
}

/// Runs `assignor` round after round until it asks for no follow-up, at most `limit` rounds.
pub fn converge(assignor: &dyn TaskAssignor, mut state: ClusterState, limit: usize) -> Convergence {
    let mut out = Convergence::default();
    let mut before: Option<BTreeMap<TaskId, ClientId>> = None;
    for _ in 0..limit {
        let cluster = Cluster::new(state.clone()).unwrap();
        let a = assignor.assign(&cluster);
        out.rounds += 1;
        let now = active_of(&a);
        if let Some(prev) = &before {
            out.active_moves += now.iter().filter(|(t, c)| prev.get(t) != Some(c)).count();
        }
        // Moves relative to who ran each task before the first round.
        if before.is_none() {
            let mut initial = BTreeMap::new();
            for c in &state.clients {
                for t in &c.owned_active {
                    initial.insert(*t, c.id.clone());
                }
            }
            out.active_moves += now
                .iter()
                .filter(|(t, c)| initial.get(t).is_some_and(|p| p != *c))
                .count();
        }
        before = Some(now);
        let followup = a.followup_rebalance;
        out.input = Some(state.clone());
        state = next_round(&state, &a);
        out.last = Some(a);
        if !followup {
            out.converged = true;
            break;
        }
        out.followups += 1;
    }
    out.state = Some(state);
    out
}

/// Checks Kafka's convergence invariants on a converged assignment; returns the first violation.
/// `ours` adds Baton's own promises (stateful and stateless actives balanced each on their own)
/// to Kafka's checks (all actives, and stateful copies).
pub fn check_balanced(
    state: &ClusterState,
    a: &Assignment,
    check_subtopology: bool,
) -> Result<(), String> {
    check_balance(state, a, check_subtopology, true)
}

pub fn check_balance(
    state: &ClusterState,
    a: &Assignment,
    check_subtopology: bool,
    ours: bool,
) -> Result<(), String> {
    let eligible: Vec<&ClientSpec> = {
        // Kafka's assignors ignore the leaving flag.
        let e: Vec<&ClientSpec> = state
            .clients
            .iter()
            .filter(|c| !(ours && c.leaving))
            .collect();
        if e.is_empty() {
            state.clients.iter().collect()
        } else {
            e
        }
    };
    let copies = (1 + state.config.num_standby_replicas as usize).min(eligible.len());
    for task in &state.tasks {
        let holders = a.holders(task.id);
        let n_active = holders
            .iter()
            .filter(|(_, r)| *r == baton_assignor::Role::Active)
            .count();
        if n_active != 1 {
            return Err(format!("task {} has {n_active} actives", task.id));
        }
        if holders
            .iter()
            .any(|(_, r)| *r == baton_assignor::Role::Warmup)
        {
            return Err(format!("task {} still has a warm-up", task.id));
        }
        let want = if task.stateful { copies } else { 1 };
        if holders.len() != want {
            return Err(format!(
                "task {} has {} copies, want {want}",
                task.id,
                holders.len()
            ));
        }
    }
    let spread = |f: &dyn Fn(&baton_assignor::ClientAssignment, &ClientSpec) -> usize| -> f64 {
        let loads: Vec<f64> = eligible
            .iter()
            .map(|c| f(&a.clients[&c.id], c) as f64 / c.capacity as f64)
            .collect();
        loads.iter().cloned().fold(f64::MIN, f64::max)
            - loads.iter().cloned().fold(f64::MAX, f64::min)
    };
    let is_stateful = |t: &TaskId| state.tasks.iter().any(|x| x.id == *t && x.stateful);
    let stateful_active = spread(&|x, _| x.active.iter().filter(|t| is_stateful(t)).count());
    let stateless_active = spread(&|x, _| x.active.iter().filter(|t| !is_stateful(t)).count());
    // A client can hold at most one copy of each task: one that holds them all counts as balanced.
    let n_stateful = state.tasks.iter().filter(|t| t.stateful).count();
    let stateful_copies = {
        let loads: Vec<(f64, bool)> = eligible
            .iter()
            .map(|c| {
                let x = &a.clients[&c.id];
                let n = x.active.iter().filter(|t| is_stateful(t)).count() + x.standby.len();
                (n as f64 / c.capacity as f64, n == n_stateful)
            })
            .collect();
        let max = loads
            .iter()
            .filter(|l| !l.1)
            .map(|l| l.0)
            .fold(f64::MIN, f64::max);
        let min = loads
            .iter()
            .filter(|l| !l.1)
            .map(|l| l.0)
            .fold(f64::MAX, f64::min);
        if max == f64::MIN {
            0.0
        } else {
            max - min
        }
    };
    let all_active = spread(&|x, _| x.active.len());
    let equal_capacity = eligible.iter().all(|c| c.capacity == eligible[0].capacity);
    for (name, value) in [
        ("stateful actives per thread", stateful_active),
        ("stateless actives per thread", stateless_active),
        ("stateful copies per thread", stateful_copies),
        ("actives per thread", all_active),
    ] {
        if !ours && name.starts_with("state") && name != "stateful copies per thread" {
            continue;
        }
        // Stateless tasks even out all actives, as Kafka's do (high_availability/roles.rs):
        // on their own they may differ by more than one.
        if name == "stateless actives per thread" {
            continue;
        }
        if value > 1.0 + 1e-9 {
            let detail: Vec<String> = eligible
                .iter()
                .map(|c| {
                    let x = &a.clients[&c.id];
                    format!(
                        "{}(cap {}{}): {}a {}sfa {}s",
                        c.id,
                        c.capacity,
                        if c.leaving { ", leaving" } else { "" },
                        x.active.len(),
                        x.active.iter().filter(|t| is_stateful(t)).count(),
                        x.standby.len()
                    )
                })
                .collect();
            return Err(format!(
                "{name} differ by {value:.2}: {}",
                detail.join(", ")
            ));
        }
    }
    if check_subtopology && equal_capacity {
        let mut per: BTreeMap<u32, BTreeMap<&ClientId, usize>> = BTreeMap::new();
        for task in state.tasks.iter() {
            let m = per.entry(task.id.subtopology).or_default();
            for c in &eligible {
                m.entry(&c.id).or_default();
            }
        }
        for (id, x) in &a.clients {
            for t in &x.active {
                if let Some(m) = per.get_mut(&t.subtopology) {
                    if let Some(n) = m.get_mut(id) {
                        *n += 1;
                    }
                }
            }
        }
        for (sub, m) in per {
            let max = m.values().max().copied().unwrap_or(0);
            let min = m.values().min().copied().unwrap_or(0);
            if max - min > 1 {
                return Err(format!("subtopology {sub} actives differ by {}", max - min));
            }
        }
    }
    Ok(())
}

/// Each client holds `floor` or `ceil` of every subtopology's stateful tasks (as actives).
pub fn check_stateful_spread(state: &ClusterState, a: &Assignment) -> Result<(), String> {
    let eligible: Vec<&ClientId> = state
        .clients
        .iter()
        .filter(|c| !c.leaving)
        .map(|c| &c.id)
        .collect();
    let mut per: BTreeMap<u32, BTreeMap<&ClientId, usize>> = BTreeMap::new();
    for task in state.tasks.iter().filter(|t| t.stateful) {
        let m = per.entry(task.id.subtopology).or_default();
        for c in &eligible {
            m.entry(c).or_default();
        }
    }
    for c in &eligible {
        for t in &a.clients[*c].active {
            if let Some(n) = per.get_mut(&t.subtopology).and_then(|m| m.get_mut(c)) {
                *n += 1;
            }
        }
    }
    for (sub, m) in per {
        let max = m.values().max().copied().unwrap_or(0);
        let min = m.values().min().copied().unwrap_or(0);
        if max - min > 1 {
            return Err(format!(
                "subtopology {sub}: actives per client differ by {}: {m:?}",
                max - min
            ));
        }
    }
    Ok(())
}

/// `n` stateful tasks named like Kafka's convergence test: subtopologies of `per_sub` partitions.
pub fn stateful_tasks(n: usize, per_sub: usize, end: u64) -> Vec<TaskSpec> {
    (0..n)
        .map(|i| TaskSpec {
            id: TaskId::new((i / per_sub) as u32, (i % per_sub) as u32),
            stateful: true,
            end_offset_sum: end,
            partitions: Vec::new(),
        })
        .collect()
}

/// A fresh client of capacity `capacity` that holds nothing.
pub fn fresh(id: &str, capacity: u32) -> ClientSpec {
    ClientSpec {
        id: ClientId(id.into()),
        capacity,
        ..Default::default()
    }
}

use proptest::prelude::*;

/// Random cluster state: a few subtopologies, clients with random capacity, racks, leaving flags,
/// and random holdings and lags (including corrupt and unknown ones).
pub fn arb_state() -> impl Strategy<Value = ClusterState> {
    let config = (0u64..200, 1u32..4, 0u32..4).prop_map(|(acc, w, s)| config(acc, w, s));
    let subtopologies = proptest::collection::vec((1u32..8, any::<bool>()), 1..5);
    (config, subtopologies, 1usize..9, any::<u64>()).prop_map(|(config, subs, n_clients, seed)| {
        let mut rng = Rng(seed | 1);
        let mut tasks = Vec::new();
        for (s, &(parts, is_stateful)) in subs.iter().enumerate() {
            for p in 0..parts {
                tasks.push(TaskSpec {
                    id: TaskId::new(s as u32, p),
                    stateful: is_stateful,
                    end_offset_sum: if is_stateful { rng.below(1000) } else { 0 },
                    partitions: Vec::new(),
                });
            }
        }
        let mut clients = Vec::new();
        for i in 0..n_clients {
            let mut c = fresh(&format!("c{i}"), 1 + rng.below(3) as u32);
            if rng.below(2) == 0 {
                c.rack = Some(format!("r{}", rng.below(3)));
            }
            c.leaving = rng.below(6) == 0;
            clients.push(c);
        }
        for task in &tasks {
            // Usually one previous active, sometimes none or two (a zombie).
            let owners = rng.below(4);
            for k in 0..owners.min(2) {
                let c = &mut clients[rng.below(n_clients as u64) as usize];
                if c.owned_active.contains(&task.id) || c.owned_standby.contains(&task.id) {
                    continue;
                }
                if k == 0 || !task.stateful {
                    c.owned_active.insert(task.id);
                } else if rng.below(2) == 0 {
                    c.owned_standby.insert(task.id);
                } else {
                    c.owned_warmup.insert(task.id);
                }
            }
            if task.stateful {
                for c in clients.iter_mut() {
                    if rng.below(3) == 0 {
                        let lag = match rng.below(6) {
                            0 => Lag::Running,
                            1 => Lag::Unknown,
                            _ => Lag::Behind(rng.below(task.end_offset_sum + 1)),
                        };
                        c.lags.insert(task.id, lag);
                    }
                }
            }
        }
        ClusterState {
            config,
            tasks,
            clients,
        }
    })
}

/// A tiny deterministic generator, so one proptest seed expands into a whole cluster.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// The JSON input form of `state`, for reproducing a failure with `baton assign`.
pub fn to_input_json(state: &ClusterState) -> String {
    use serde_json::json;
    let lag = |l: &Lag| match l {
        Lag::Running => -2,
        Lag::Unknown => -3,
        Lag::Behind(n) => *n as i64,
    };
    let ids = |s: &BTreeSet<TaskId>| s.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    json!({
        "config": state.config,
        "tasks": state.tasks.iter().map(|t| json!({"id": t.id.to_string(), "stateful": t.stateful, "end_offset_sum": t.end_offset_sum})).collect::<Vec<_>>(),
        "clients": state.clients.iter().map(|c| json!({
            "id": c.id.0, "capacity": c.capacity, "rack": c.rack, "leaving": c.leaving,
            "owned_active": ids(&c.owned_active), "owned_standby": ids(&c.owned_standby), "owned_warmup": ids(&c.owned_warmup),
            "lags": c.lags.iter().map(|(t, l)| (t.to_string(), lag(l))).collect::<BTreeMap<_, _>>(),
        })).collect::<Vec<_>>(),
    })
    .to_string()
}

/// A rack-aware case: `tasks` tasks (one in five stateless) of 10 partitions per subtopology,
/// each reading one partition whose 1 or 2 replicas are on random racks; `clients` one-thread
/// clients spread over `racks` racks. With `history`, four in five tasks already run on a random
/// client, caught up, with their standbys caught up on others; the rest are new.
pub fn rack_case(
    tasks: usize,
    clients: usize,
    racks: usize,
    standbys: u32,
    history: bool,
    seed: u64,
) -> ClusterState {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let rack = |r: u64| format!("r{r}");
    let specs: Vec<TaskSpec> = (0..tasks)
        .map(|i| {
            let id = TaskId::new((i / 10) as u32, (i % 10) as u32);
            let first = rng.below(racks as u64);
            let mut replicas = BTreeSet::from([rack(first)]);
            if rng.below(2) == 0 {
                replicas.insert(rack(rng.below(racks as u64)));
            }
            TaskSpec {
                id,
                stateful: i % 5 != 4,
                end_offset_sum: if i % 5 != 4 { 1_000 } else { 0 },
                partitions: vec![baton_assignor::SourcePartition {
                    partition: baton_assignor::TopicPartition::new(
                        format!("in{}", id.subtopology),
                        id.partition as i32,
                    ),
                    racks: replicas,
                }],
            }
        })
        .collect();
    let mut cs: Vec<ClientSpec> = (0..clients)
        .map(|i| ClientSpec {
            id: ClientId(format!("c{i:05}")),
            capacity: 1,
            rack: Some(rack((i % racks) as u64)),
            ..Default::default()
        })
        .collect();
    if history {
        for t in &specs {
            if rng.below(5) == 0 {
                continue;
            }
            let a = rng.below(clients as u64) as usize;
            cs[a].owned_active.insert(t.id);
            if !t.stateful {
                continue;
            }
            cs[a].lags.insert(t.id, Lag::Running);
            for s in 1..=standbys as usize {
                let c = (a + s * (1 + rng.below(clients as u64 - 1) as usize)) % clients;
                if c != a && !cs[c].owned_standby.contains(&t.id) {
                    cs[c].owned_standby.insert(t.id);
                    cs[c].lags.insert(t.id, Lag::Behind(10));
                }
            }
        }
    }
    ClusterState {
        config: AssignmentConfig {
            num_standby_replicas: standbys,
            acceptable_recovery_lag: 100,
            rack_aware_strategy: baton_assignor::RackStrategy::MinTraffic,
            ..AssignmentConfig::default()
        },
        tasks: specs,
        clients: cs,
    }
}
