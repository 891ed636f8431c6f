//! Invariants every assignor keeps, over thousands of random clusters.

mod common;

use std::collections::BTreeMap;

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
        if task.stateful {
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
    prop_assert!(
        warmups <= cfg.max_warmup_replicas as usize,
        "{}: {} warm-ups",
        name,
        warmups
    );
    if name == AssignorKind::Sticky {
        prop_assert_eq!(warmups, 0);
        prop_assert!(!a.followup_rebalance);
    }
    prop_assert_eq!(a.probe_after_ms.is_some(), a.followup_rebalance);

    if name == AssignorKind::HighAvailability {
        prop_assert_eq!(a.followup_rebalance, !a.pending.is_empty());
        // Available: a stateful active runs on a caught-up client whenever one exists.
        for (ti, task) in cluster.tasks.iter().enumerate() {
            if !task.stateful {
                continue;
            }
            // Leaving clients count only for tasks they run now: they take nothing new.
            let any_caught_up = cluster.client_ixs().any(|c| {
                cluster.is_caught_up(c, ti as u32)
                    && (!cluster.is_leaving(c)
                        || all_leaving
                        || cluster.owned_role(c, ti as u32) == Some(Role::Active))
            });
            let (runner, _) = a
                .holders(task.id)
                .into_iter()
                .find(|(_, r)| *r == Role::Active)
                .unwrap();
            let ci = cluster
                .clients
                .iter()
                .position(|c| &c.id == runner)
                .unwrap() as u32;
            if any_caught_up {
                prop_assert!(
                    cluster.is_caught_up(ci, ti as u32),
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
