//! Rack-aware active placement (`rack.aware.assignment.strategy`): quality against Kafka's on
//! the same inputs, and what it must not cost.

mod common;

use baton_assignor::cluster::{ClientIx, TaskIx};
use baton_assignor::{Assignment, AssignorKind, Cluster, ClusterState, RackStrategy, Role};
use common::rack_case;
use proptest::prelude::*;

fn cost(a: &Assignment) -> i64 {
    a.traffic.expect("the case has racks").cost
}

fn active_of(a: &Assignment, t: baton_assignor::TaskId) -> Option<&baton_assignor::ClientId> {
    a.holders(t)
        .into_iter()
        .find(|&(_, r)| r == Role::Active)
        .map(|(c, _)| c)
}

/// Stateful actives that run now on a client that was not caught up: state that moves.
fn restores(cluster: &Cluster, a: &Assignment) -> usize {
    let caught_up = |c: &baton_assignor::ClientId, t: baton_assignor::TaskId| {
        let ci = ClientIx::new(cluster.clients.iter().position(|x| &x.id == c).unwrap());
        let ti = TaskIx::new(cluster.tasks.iter().position(|x| x.id == t).unwrap());
        cluster.is_caught_up(ci, ti)
    };
    cluster
        .tasks
        .iter()
        .enumerate()
        .filter(|(i, t)| t.stateful && !cluster.reporters[*i].is_empty())
        .filter(|(_, t)| active_of(a, t.id).is_some_and(|c| !caught_up(c, t.id)))
        .count()
}

/// Stateful actives that left the client running them.
fn moved(cluster: &Cluster, a: &Assignment) -> usize {
    cluster
        .tasks
        .iter()
        .filter(|t| t.stateful)
        .filter(|t| {
            let before = cluster
                .clients
                .iter()
                .find(|c| c.owned_active.contains(&t.id));
            before.is_some_and(|b| Some(&b.id) != active_of(a, t.id))
        })
        .count()
}

fn run(state: &ClusterState, kind: AssignorKind) -> (Cluster, Assignment) {
    let cluster = Cluster::new(state.clone()).unwrap();
    let a = kind.assignor().assign(&cluster);
    (cluster, a)
}

fn without_racks(state: &ClusterState) -> ClusterState {
    let mut s = state.clone();
    s.config.rack_aware_strategy = RackStrategy::None;
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A new application (no state anywhere) without standbys: Baton's total traffic is Kafka's
    /// or less (both are exact over the same counts). Tasks divide evenly between clients here:
    /// which clients take the extras of an uneven split is decided before racks are weighed, so
    /// there Baton can read a few partitions more. With standbys Baton also keeps every active
    /// off its standbys' racks, which Kafka does not; the survey below compares them.
    #[test]
    fn new_applications_read_no_more_across_racks_than_under_kafka(
        per_client in 1usize..5, clients in 3usize..16, racks in 2usize..4, seed in any::<u64>(),
    ) {
        let standbys = 0;
        let tasks = 5 * per_client * clients;
        let state = rack_case(tasks, clients, racks, standbys, false, seed);
        let (_, ha) = run(&state, AssignorKind::HighAvailability);
        let (_, kafka) = run(&state, AssignorKind::Kafka);
        prop_assert!(cost(&ha) <= cost(&kafka), "{} > {}", cost(&ha), cost(&kafka));
    }

    /// A running application: racks never make traffic worse than without them, never move
    /// state that would not move anyway (every extra move promotes a caught-up standby), and
    /// keep actives balanced (see [`balance`]).
    #[test]
    fn racks_cost_no_state_moves(
        tasks in 20usize..120, clients in 3usize..16, racks in 2usize..4, standbys in 0u32..2,
        seed in any::<u64>(),
    ) {
        check_running(tasks, clients, racks, standbys, seed)?;
    }
}

/// Cases the property found once, run every time whatever proptest draws.
#[test]
fn racks_cost_no_state_moves_found_cases() {
    for (tasks, clients, racks, standbys, seed) in [
        (118, 11, 2, 1, 16759151444472566974u64),
        (25, 4, 2, 0, 11451139019298310266),
    ] {
        check_running(tasks, clients, racks, standbys, seed).unwrap();
    }
}

fn check_running(
    tasks: usize,
    clients: usize,
    racks: usize,
    standbys: u32,
    seed: u64,
) -> Result<(), TestCaseError> {
    let state = rack_case(tasks, clients, racks, standbys, true, seed);
    let (cluster, ha) = run(&state, AssignorKind::HighAvailability);
    let plain = without_racks(&state);
    let (plain_cluster, plain_ha) = run(&plain, AssignorKind::HighAvailability);
    let plain_cost = baton_assignor::rack::RackCosts::new(&cluster)
        .unwrap()
        .map(|c| {
            baton_assignor::rack::traffic(
                &c,
                cluster.task_ixs().filter_map(|t| {
                    let id = cluster.tasks[t].id;
                    let c = active_of(&plain_ha, id)?;
                    Some((
                        t,
                        ClientIx::new(cluster.clients.iter().position(|x| &x.id == c).unwrap()),
                    ))
                }),
            )
            .cost
        })
        .unwrap();
    prop_assert!(cost(&ha) <= plain_cost, "{} > {plain_cost}", cost(&ha));
    prop_assert_eq!(restores(&cluster, &ha), restores(&plain_cluster, &plain_ha));
    let (stateful, load) = balance(&cluster, &ha);
    let (_, plain_load) = balance(&plain_cluster, &plain_ha);
    prop_assert!(stateful <= 1, "stateful targets {stateful} apart");
    prop_assert!(
        load <= plain_load.max(1),
        "loads {load} apart, {plain_load} without racks"
    );
    Ok(())
}

/// How far apart clients are (equal capacities): the spread of stateful targets (actives once
/// pending moves' warm-ups catch up), and of loads as stateless tasks level them: the larger of
/// the stateful actives a client runs now and its target, plus its stateless tasks, among
/// clients that run one against every client (a client still running what it will hand over
/// takes no stateless task, so its load may be above the level and its target below it).
/// Owners keep stateless tasks up to an even share of all loads, so a client handing over
/// many tasks can leave the others two or more apart, with racks or without.
fn balance(cluster: &Cluster, a: &Assignment) -> (i64, i64) {
    let stateful =
        |t: &baton_assignor::TaskId| cluster.tasks.iter().any(|x| x.id == *t && x.stateful);
    let mut target = std::collections::BTreeMap::new();
    let mut load = std::collections::BTreeMap::new();
    for (id, c) in &a.clients {
        let now = c.active.iter().filter(|t| stateful(t)).count() as i64;
        let out = a.pending.iter().filter(|m| &m.from == id).count() as i64;
        let came = a.pending.iter().filter(|m| &m.to == id).count() as i64;
        let less = c.active.len() as i64 - now;
        target.insert(id, now - out + came);
        load.insert(id, (now.max(now - out + came), less));
    }
    let spread = |v: &mut dyn Iterator<Item = i64>| {
        let v: Vec<i64> = v.collect();
        v.iter().max().unwrap() - v.iter().min().unwrap()
    };
    let lowest = load.values().map(|(s, l)| s + l).min().unwrap();
    let highest = load
        .values()
        .filter(|(_, l)| *l > 0)
        .map(|(s, l)| s + l)
        .max()
        .unwrap_or(lowest);
    (spread(&mut target.values().copied()), highest - lowest)
}

/// Stateful tasks whose active shares its rack with one of its standbys.
fn same_rack(cluster: &Cluster, a: &Assignment) -> usize {
    let rack = |id: &baton_assignor::ClientId| {
        cluster
            .clients
            .iter()
            .find(|c| &c.id == id)
            .unwrap()
            .rack
            .clone()
    };
    cluster
        .tasks
        .iter()
        .filter(|t| t.stateful)
        .filter(|t| {
            let holders = a.holders(t.id);
            let active = holders
                .iter()
                .find(|(_, r)| *r == Role::Active)
                .map(|(c, _)| rack(c));
            holders
                .iter()
                .filter(|(_, r)| *r == Role::Standby)
                .any(|(c, _)| Some(rack(c)) == active)
        })
        .count()
}

/// The figures of docs/ASSIGNOR.md: `cargo test --release -p baton-assignor --test racks --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn survey() {
    println!("| tasks | history | standbys | Baton cost | Kafka cost | ratio | Baton moves | Kafka moves | Baton same-rack standbys | Kafka same-rack standbys |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for tasks in [400, 410] {
        for history in [false, true] {
            for standbys in [0, 1] {
                let (mut b, mut k, mut bm, mut km, mut bs, mut ks) = (0, 0, 0, 0, 0, 0);
                for seed in 0..20 {
                    let state = rack_case(tasks, 40, 3, standbys, history, seed);
                    let (cluster, ha) = run(&state, AssignorKind::HighAvailability);
                    let (_, kafka) = run(&state, AssignorKind::Kafka);
                    b += cost(&ha);
                    k += cost(&kafka);
                    bm += moved(&cluster, &ha);
                    km += moved(&cluster, &kafka);
                    bs += same_rack(&cluster, &ha);
                    ks += same_rack(&cluster, &kafka);
                }
                println!(
                    "| {tasks} | {history} | {standbys} | {b} | {k} | {:.2} | {bm} | {km} | {bs} | {ks} |",
                    b as f64 / k.max(1) as f64
                );
            }
        }
    }
}
