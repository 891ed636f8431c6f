//! Invariants every assignor keeps, over thousands of random clusters.

mod common;

use std::collections::BTreeMap;

use baton_assignor::cluster::{ClientIx, TaskIx};
use baton_assignor::{AssignorKind, Cluster, ClusterState, Role};
use common::*;
use proptest::prelude::*;

fn check(name: AssignorKind, state: &ClusterState) -> Result<(), TestCaseError> {
    let cluster = Cluster::new(state.clone()).unwrap();
    let a = name.assignor().assign(&cluster);
    let cfg = &state.config;
    let all_leaving = state.clients.iter().all(|c| c.leaving);
    let eligible = if name == AssignorKind::HighAvailability && !all_leaving {
        state.clients.iter().filter(|c| !c.leaving).count()
    } else {
        state.clients.len()
    };
    let want_standbys = (cfg.num_standby_replicas as usize).min(eligible - 1);
    let mut warmups = 0;
    for task in &state.tasks {
        let holders = a.holders(task.id);
        let count = |r: Role| holders.iter().filter(|(_, x)| *x == r).count();
        prop_assert_eq!(count(Role::Active), 1, "{}: task {} actives", name, task.id);
        let mut clients: Vec<_> = holders.iter().map(|(c, _)| *c).collect();
        clients.sort();
        clients.dedup();
        prop_assert_eq!(
            clients.len(),
            holders.len(),
            "{}: two copies of {} on one client",
            name,
            task.id
        );
        if task.stateful && name == AssignorKind::HighAvailability {
            // A standby slot filled by a move's target is a standby; the old caught-up copy a
            // moving standby keeps meanwhile is one more, listed in `standby_moves`. Copies are
            // never fewer than the standbys configured.
            let moving = a.standby_moves.iter().filter(|m| m.task == task.id).count();
            prop_assert!(
                count(Role::Standby) <= want_standbys + moving
                    && count(Role::Standby) + count(Role::Warmup) >= want_standbys,
                "{}: standbys of {}: {:?}",
                name,
                task.id,
                holders
            );
        } else if task.stateful {
            prop_assert_eq!(
                count(Role::Standby),
                want_standbys,
                "{}: standbys of {}",
                name,
                task.id
            );
        } else {
            prop_assert_eq!(
                holders.len(),
                1,
                "{}: stateless {} has copies",
                name,
                task.id
            );
        }
        warmups += count(Role::Warmup);
    }
    // The KIP's budget, as an operator reads the output: warm-ups never exceed
    // max.warmup.replicas, and every copy beyond one active and the standbys configured is
    // a warm-up or the old copy of a listed standby move.
    prop_assert!(
        warmups <= cfg.max_warmup_replicas as usize,
        "{}: {} warm-ups over max.warmup.replicas {}",
        name,
        warmups,
        cfg.max_warmup_replicas
    );
    let beyond: usize = state
        .tasks
        .iter()
        .filter(|t| t.stateful)
        .map(|t| a.holders(t.id).len().saturating_sub(1 + want_standbys))
        .sum();
    prop_assert!(
        beyond <= cfg.max_warmup_replicas as usize + a.standby_moves.len(),
        "{}: {} copies beyond the active and standbys, with {} standby moves",
        name,
        beyond,
        a.standby_moves.len()
    );
    if name == AssignorKind::Sticky {
        prop_assert_eq!(warmups, 0);
        prop_assert!(!a.followup_rebalance);
    }
    prop_assert_eq!(a.probe_after_ms.is_some(), a.followup_rebalance);

    if name == AssignorKind::HighAvailability {
        prop_assert_eq!(
            a.followup_rebalance,
            !a.pending.is_empty() || !a.standby_moves.is_empty()
        );
        // No redundancy lost: a task keeps as many caught-up standbys as it had on staying
        // clients (up to the number configured), whatever moves.
        for (ti, task) in cluster.tasks.iter().enumerate() {
            let t = TaskIx::new(ti);
            if !task.stateful {
                continue;
            }
            let caught_up_standbys = |assigned: &dyn Fn(ClientIx) -> bool| {
                cluster
                    .client_ixs()
                    .filter(|&c| assigned(c) && cluster.is_caught_up(c, t))
                    .count()
            };
            let runner = a
                .holders(task.id)
                .into_iter()
                .find(|(_, r)| *r == Role::Active)
                .unwrap()
                .0;
            let had = caught_up_standbys(&|c| {
                cluster.owned_role(c, t) == Some(Role::Standby)
                    && !cluster.is_leaving(c)
                    && &cluster.clients[c].id != runner
            });
            let has = caught_up_standbys(&|c| {
                a.clients[&cluster.clients[c].id].standby.contains(&task.id)
            });
            prop_assert!(
                has >= had.min(want_standbys),
                "{} had {} caught-up standbys, has {}: {:?}",
                task.id,
                had,
                has,
                a.holders(task.id)
            );
        }
        // A moving standby keeps its caught-up copy: the old holder stays a standby, and the
        // new one, behind, fills the slot as a standby too (not a warm-up: no budget).
        for m in &a.standby_moves {
            let from = ClientIx::new(cluster.clients.iter().position(|c| c.id == m.from).unwrap());
            let to = ClientIx::new(cluster.clients.iter().position(|c| c.id == m.to).unwrap());
            let t = TaskIx::new(cluster.tasks.iter().position(|x| x.id == m.task).unwrap());
            prop_assert!(cluster.is_caught_up(from, t) && !cluster.is_caught_up(to, t));
            prop_assert!(a.clients[&m.from].standby.contains(&m.task));
            prop_assert!(a.clients[&m.to].standby.contains(&m.task));
            prop_assert!(!a.clients[&m.to].warmup.contains(&m.task));
        }
        // Available: a stateful active runs on a caught-up client whenever one exists.
        for (ti, task) in cluster.tasks.iter().enumerate() {
            if !task.stateful {
                continue;
            }
            // Leaving clients count only for tasks they run now: they take nothing new.
            let any_caught_up = cluster.client_ixs().any(|c| {
                cluster.is_caught_up(c, TaskIx::new(ti))
                    && (!cluster.is_leaving(c)
                        || all_leaving
                        || cluster.owned_role(c, TaskIx::new(ti)) == Some(Role::Active))
            });
            let (runner, _) = a
                .holders(task.id)
                .into_iter()
                .find(|(_, r)| *r == Role::Active)
                .unwrap();
            let ci = ClientIx::new(
                cluster
                    .clients
                    .iter()
                    .position(|c| &c.id == runner)
                    .unwrap(),
            );
            if any_caught_up {
                prop_assert!(
                    cluster.is_caught_up(ci, TaskIx::new(ti)),
                    "task {} runs on a lagging client",
                    task.id
                );
            }
        }
        // Leaving clients get nothing new: no standbys or warm-ups, actives only where they had state.
        if !all_leaving {
            for c in state.clients.iter().filter(|c| c.leaving) {
                let got = &a.clients[&c.id];
                prop_assert!(
                    got.standby.is_empty() && got.warmup.is_empty(),
                    "leaving {} got copies",
                    c.id
                );
                for t in &got.active {
                    prop_assert!(
                        c.lags.contains_key(t) || c.owned_active.contains(t),
                        "leaving {} got new active {}",
                        c.id,
                        t
                    );
                }
                prop_assert_eq!(got.drained, got.active.is_empty());
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_assignor_keeps_the_invariants(state in arb_state()) {
        for name in AssignorKind::ALL {
            check(name, &state)?;
        }
    }

    #[test]
    fn output_does_not_depend_on_input_order(state in arb_state(), seed in any::<u64>()) {
        let mut shuffled = state.clone();
        let mut rng = Rng(seed | 1);
        for i in (1..shuffled.clients.len()).rev() {
            shuffled.clients.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for i in (1..shuffled.tasks.len()).rev() {
            shuffled.tasks.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for name in AssignorKind::ALL {
            let assignor = name.assignor();
            let a = assignor.assign(&Cluster::new(state.clone()).unwrap());
            let b = assignor.assign(&Cluster::new(shuffled.clone()).unwrap());
            prop_assert_eq!(
                baton_assignor::output::to_json(&a, false),
                baton_assignor::output::to_json(&b, false),
                "{} depends on input order", name
            );
        }
    }
}

#[test]
fn identical_input_gives_byte_identical_output() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/scale-out.json"
    ))
    .unwrap();
    for name in AssignorKind::ALL {
        let outputs: BTreeMap<String, ()> = (0..5)
            .map(|_| {
                let c = baton_assignor::input::parse_cluster_json(&text).unwrap();
                (
                    baton_assignor::output::to_json(&name.assignor().assign(&c), false),
                    (),
                )
            })
            .collect();
        assert_eq!(outputs.len(), 1, "{name} is not deterministic");
    }
}

/// The fewest tasks that must leave their client for every client to hold `floor` or `ceil`
/// of each subtopology's tasks and of all tasks, found by trying every way to hand out each
/// subtopology's extra tasks. `have[s][c]`: tasks of subtopology `s` that client `c` runs.
fn fewest_spreading_moves(have: &[Vec<usize>], sizes: &[usize], clients: usize) -> usize {
    let total: usize = sizes.iter().sum();
    let (lo, hi) = (total / clients, total.div_ceil(clients));
    let mut best = usize::MAX;
    // Odometer over one subset of clients per subtopology (bit masks of size `extras`).
    let choices: Vec<Vec<u32>> = sizes
        .iter()
        .map(|&n| {
            let extras = n % clients;
            (0u32..1 << clients)
                .filter(|m| m.count_ones() as usize == extras)
                .collect()
        })
        .collect();
    let mut pick = vec![0usize; sizes.len()];
    loop {
        let mut totals = vec![0usize; clients];
        let mut moves = 0;
        for (s, &n) in sizes.iter().enumerate() {
            for (c, t) in totals.iter_mut().enumerate() {
                let q = n / clients + ((choices[s][pick[s]] >> c) & 1) as usize;
                *t += q;
                moves += have[s][c].saturating_sub(q);
            }
        }
        if totals.iter().all(|&t| t >= lo && t <= hi) {
            best = best.min(moves);
        }
        let mut i = 0;
        loop {
            if i == sizes.len() {
                return best;
            }
            pick[i] += 1;
            if pick[i] < choices[i].len() {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Scale-outs without standbys, equal threads: the group converges with every client
    /// holding `floor` or `ceil` of each subtopology's tasks, and no more tasks move than the
    /// fewest any such spread needs.
    #[test]
    fn scale_outs_spread_each_subtopology_with_the_fewest_moves(
        sizes in proptest::collection::vec(1usize..6, 1..4),
        old in 1usize..4,
        new in 1usize..3,
        warmups in 1u32..4,
    ) {
        let mut tasks = Vec::new();
        for (s, &n) in sizes.iter().enumerate() {
            for p in 0..n {
                tasks.push(baton_assignor::TaskSpec {
                    id: baton_assignor::TaskId::new(s as u32, p as u32),
                    stateful: true,
                    end_offset_sum: 1_000,
                    partitions: Vec::new(),
                });
            }
        }
        let config = baton_assignor::AssignmentConfig {
            acceptable_recovery_lag: 100,
            max_warmup_replicas: warmups,
            ..Default::default()
        };
        let assignor = AssignorKind::HighAvailability.assignor();
        let first = ClusterState {
            config: config.clone(),
            tasks: tasks.clone(),
            clients: (0..old).map(|i| fresh(&format!("old{i}"), 1)).collect(),
        };
        let run = converge(assignor.as_ref(), first, 50);
        prop_assert!(run.converged);
        let mut state = run.state.unwrap();
        let have: Vec<Vec<usize>> = (0..sizes.len())
            .map(|s| {
                let mut v: Vec<usize> = state
                    .clients
                    .iter()
                    .map(|c| c.owned_active.iter().filter(|t| t.subtopology == s as u32).count())
                    .collect();
                v.extend(std::iter::repeat_n(0, new));
                v
            })
            .collect();
        state.clients.extend((0..new).map(|i| fresh(&format!("new{i}"), 1)));
        let run = converge(assignor.as_ref(), state.clone(), 100);
        prop_assert!(run.converged, "no convergence");
        let last = run.last.as_ref().unwrap();
        check_stateful_spread(&state, last).map_err(TestCaseError::fail)?;
        let fewest = fewest_spreading_moves(&have, &sizes, old + new);
        prop_assert_eq!(run.active_moves, fewest, "moves vs the fewest that spread");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A balance tolerance never moves more than strict balance, and when it stops early every
    /// client is within the tolerance of its capacity share.
    #[test]
    fn a_tolerance_moves_no_more_than_strict_balance_and_stays_within_it(
        tasks in 4usize..40,
        old in 1usize..5,
        new in 1usize..3,
        caps in proptest::collection::vec(1u32..3, 7),
        tolerance in 5u32..60,
        standbys in 0u32..2,
    ) {
        let specs: Vec<baton_assignor::TaskSpec> = (0..tasks)
            .map(|i| baton_assignor::TaskSpec {
                id: baton_assignor::TaskId::new((i % 3) as u32, (i / 3) as u32),
                stateful: true,
                end_offset_sum: 1_000,
                partitions: Vec::new(),
            })
            .collect();
        let config = baton_assignor::AssignmentConfig {
            acceptable_recovery_lag: 100,
            num_standby_replicas: standbys,
            ..Default::default()
        };
        let assignor = AssignorKind::HighAvailability.assignor();
        let first = ClusterState {
            config: config.clone(),
            tasks: specs,
            clients: (0..old).map(|i| fresh(&format!("old{i}"), caps[i])).collect(),
        };
        let run = converge(assignor.as_ref(), first, 100);
        prop_assert!(run.converged);
        let mut state = run.state.unwrap();
        state
            .clients
            .extend((0..new).map(|i| fresh(&format!("new{i}"), caps[old + i])));
        let strict = converge(assignor.as_ref(), state.clone(), 200);
        state.config.imbalance_percentage = tolerance;
        let tolerant = converge(assignor.as_ref(), state.clone(), 200);
        prop_assert!(strict.converged && tolerant.converged);
        prop_assert!(
            tolerant.active_moves <= strict.active_moves,
            "tolerant {} > strict {}",
            tolerant.active_moves,
            strict.active_moves
        );
        let (t_last, s_last) = (tolerant.last.unwrap(), strict.last.unwrap());
        if t_last != s_last {
            let capacity: u32 = state.clients.iter().map(|c| c.capacity).sum();
            for c in &state.clients {
                let n = t_last.clients[&c.id].active.len() as f64;
                let share = tasks as f64 * f64::from(c.capacity) / f64::from(capacity);
                prop_assert!(
                    (n - share).abs() <= share * f64::from(tolerance) / 100.0 + 1e-9,
                    "{}: {} actives, share {:.2}, tolerance {}%",
                    c.id, n, share, tolerance
                );
            }
        }
    }
}

/// Clients spread evenly over `zones` zones (tag `zone`), equal threads, and as many copies on
/// each client: a placement that keeps every task's copies in different zones exists whenever
/// there are at least as many zones as copies, so `high-availability` must find one. (With
/// copies that do not divide evenly, which clients take the one extra copy ignores zones, and
/// balance wins: docs/ASSIGNOR.md.)
fn zoned(zones: usize, per_zone: usize, tasks: usize, standbys: u32) -> ClusterState {
    let clients = (0..zones * per_zone)
        .map(|i| {
            let mut c = fresh(&format!("c{i:02}"), 1);
            c.tags.insert("zone".into(), format!("z{}", i % zones));
            c
        })
        .collect();
    let mut config = config(10_000, 2, standbys);
    config.rack_aware_assignment_tags = vec!["zone".into()];
    ClusterState {
        config,
        tasks: stateful_tasks(tasks, 4, 1_000),
        clients,
    }
}

/// Every task's copies (active and standbys) are in distinct zones.
fn zones_apart(state: &ClusterState, a: &baton_assignor::Assignment) -> Result<(), String> {
    let zone = |id: &baton_assignor::ClientId| {
        state.clients.iter().find(|c| &c.id == id).unwrap().tags["zone"].clone()
    };
    for task in &state.tasks {
        let zones: Vec<String> = a.holders(task.id).iter().map(|(c, _)| zone(c)).collect();
        let distinct: std::collections::BTreeSet<&String> = zones.iter().collect();
        if distinct.len() != zones.len() {
            return Err(format!("{}: copies in zones {zones:?}", task.id));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn standbys_keep_to_other_zones_when_there_are_enough(
        zones in 2usize..5,
        per_zone in 1usize..4,
        standbys in 1u32..3,
        joiners in 1usize..3,
    ) {
        // Fewer standbys than zones: every copy can have a zone of its own.
        let standbys = standbys.min(zones as u32 - 1);
        // Copies divide evenly over the clients before and after the scale-out.
        let tasks = zones * per_zone * (per_zone + joiners);
        let state = zoned(zones, per_zone, tasks, standbys);
        let run = converge(&baton_assignor::HighAvailabilityAssignor, state, 60);
        prop_assert!(run.converged);
        let settled = run.state.unwrap();
        zones_apart(&settled, run.last.as_ref().unwrap()).map_err(TestCaseError::fail)?;

        // Scale out by whole zones' worth of clients: the kept copies stay apart as well.
        let mut grown = settled.clone();
        let n = grown.clients.len();
        for j in 0..joiners * zones {
            let mut c = fresh(&format!("n{j:02}"), 1);
            c.tags.insert("zone".into(), format!("z{}", (n + j) % zones));
            grown.clients.push(c);
        }
        let run = converge(&baton_assignor::HighAvailabilityAssignor, grown, 120);
        prop_assert!(run.converged);
        zones_apart(run.state.as_ref().unwrap(), run.last.as_ref().unwrap())
            .map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The `kafka` mode with `rack.aware.assignment.tags` (Kafka's
    /// ClientTagAwareStandbyTaskAssignor): on a new cluster with more zones than standbys, no
    /// task has two copies in one zone.
    #[test]
    fn kafka_mode_standbys_keep_to_other_zones(
        zones in 2usize..5,
        per_zone in 1usize..4,
        standbys in 1u32..3,
        tasks in 1usize..40,
    ) {
        let standbys = standbys.min(zones as u32 - 1);
        let state = zoned(zones, per_zone, tasks, standbys);
        let cluster = baton_assignor::Cluster::new(state.clone()).unwrap();
        let a = AssignorKind::Kafka.assignor().assign(&cluster);
        zones_apart(&state, &a).map_err(TestCaseError::fail)?;
    }
}

/// Kafka's example (ClientTagAwareStandbyTaskAssignor): 9 clients over 3 zones x 3 clusters,
/// 2 standbys: every task's three copies are on three zones and three clusters.
#[test]
fn kafka_mode_spreads_copies_over_every_tag_key() {
    let clients = (0..9)
        .map(|i| {
            let mut c = fresh(&format!("c{i}"), 2);
            c.tags.insert("zone".into(), format!("z{}", i % 3));
            c.tags.insert("cluster".into(), format!("k{}", i / 3));
            c
        })
        .collect();
    let mut config = config(10_000, 2, 2);
    config.rack_aware_assignment_tags = vec!["zone".into(), "cluster".into()];
    let state = ClusterState {
        config,
        tasks: stateful_tasks(18, 3, 1_000),
        clients,
    };
    let cluster = baton_assignor::Cluster::new(state.clone()).unwrap();
    let a = AssignorKind::Kafka.assignor().assign(&cluster);
    for task in &state.tasks {
        let holders = a.holders(task.id);
        assert_eq!(holders.len(), 3, "{}: {holders:?}", task.id);
        for key in ["zone", "cluster"] {
            let values: std::collections::BTreeSet<&String> = holders
                .iter()
                .map(|(id, _)| &state.clients.iter().find(|c| &c.id == *id).unwrap().tags[key])
                .collect();
            assert_eq!(values.len(), 3, "{}: {key} {values:?}", task.id);
        }
    }
}
