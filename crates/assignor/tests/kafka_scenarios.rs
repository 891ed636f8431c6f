//! Kafka's HighAvailabilityTaskAssignorTest scenarios (facts §3), with Kafka's results, for `kafka`.
//! "assigned" below is Kafka's `assignedTaskCount`: actives plus standbys, warm-ups included.

mod common;

use baton_assignor::{Assignment, KafkaAssignor, TaskAssignor};
use common::*;

fn run(c: &baton_assignor::Cluster) -> Assignment {
    KafkaAssignor.assign(c)
}

fn assigned(a: &Assignment, client: &str) -> usize {
    let c = &a.clients[&client.into()];
    c.active.len() + c.standby.len() + c.warmup.len()
}

fn active(a: &Assignment, client: &str) -> Vec<String> {
    a.clients[&client.into()]
        .active
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn standby_and_warmup(a: &Assignment, client: &str) -> Vec<String> {
    let c = &a.clients[&client.into()];
    let mut v: Vec<String> = c
        .standby
        .iter()
        .chain(&c.warmup)
        .map(ToString::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn s01_sticky_while_warming_up() {
    let all = uniform_lags(&NINE, 0);
    let ten = uniform_lags(&NINE, 10);
    let c = cluster(
        config(11, 2, 1),
        stateful(&NINE, MAX as u64),
        vec![
            client("c1", 1, &NINE, &[], &all),
            client("c2", 1, &[], &NINE, &ten),
            client("c3", 1, &[], &[], &[]),
        ],
    );
    let a = run(&c);
    assert_eq!(
        (assigned(&a, "c1"), assigned(&a, "c2"), assigned(&a, "c3")),
        (9, 9, 2)
    );
    assert_eq!(a.clients[&"c3".into()].warmup.len(), 2);
    assert!(a.followup_rebalance);
}

#[test]
fn s02_skip_warmups_when_acceptable_lag_is_max() {
    let all = uniform_lags(&NINE, 0);
    let c = cluster(
        config(i64::MAX as u64, 1, 1),
        stateful(&NINE, MAX as u64),
        vec![
            client("c1", 1, &NINE, &[], &all),
            client("c2", 1, &[], &[], &[]),
            client("c3", 1, &[], &[], &[]),
        ],
    );
    let a = run(&c);
    assert_eq!(
        (assigned(&a, "c1"), assigned(&a, "c2"), assigned(&a, "c3")),
        (6, 6, 6)
    );
    assert!(!a.followup_rebalance);
}

fn subtopology_skew(a: &Assignment) -> u32 {
    let mut per: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    let n = a.clients.len();
    for (i, c) in a.clients.values().enumerate() {
        for task in &c.active {
            per.entry(task.subtopology).or_insert_with(|| vec![0; n])[i] += 1;
        }
    }
    per.values()
        .map(|v| (v.iter().max().unwrap() - v.iter().min().unwrap()) as u32)
        .max()
        .unwrap_or(0)
}

#[test]
fn s03_evenly_over_clients() {
    let ten = uniform_lags(&NINE, 10);
    let c = cluster(
        config(0, 2, 0),
        stateful(&NINE, MAX as u64),
        vec![
            client("c1", 1, &[], &[], &ten),
            client("c2", 1, &[], &[], &ten),
            client("c3", 1, &[], &[], &ten),
        ],
    );
    let a = run(&c);
    for id in ["c1", "c2", "c3"] {
        assert_eq!(active(&a, id).len(), 3);
    }
    assert!(!a.followup_rebalance);
    assert!(subtopology_skew(&a) <= 1);
}

#[test]
fn s04_uneven_threads() {
    let six = ["0_0", "0_1", "0_2", "1_0", "1_1", "1_2"];
    let ten = uniform_lags(&six, 10);
    let c = cluster(
        config(0, 2, 0),
        stateful(&six, MAX as u64),
        vec![
            client("c1", 1, &[], &[], &ten),
            client("c2", 2, &[], &[], &ten),
            client("c3", 3, &[], &[], &ten),
        ],
    );
    let a = run(&c);
    assert_eq!(
        (
            active(&a, "c1").len(),
            active(&a, "c2").len(),
            active(&a, "c3").len()
        ),
        (1, 2, 3)
    );
    assert!(!a.followup_rebalance);
    assert!(
        subtopology_skew(&a) > 1,
        "Kafka's test asserts the subtopology skew exceeds 1"
    );
}

#[test]
fn s05_best_effort_over_clients() {
    let ten = uniform_lags(&NINE, 10);
    let c = cluster(
        config(0, 2, 0),
        stateful(&NINE, MAX as u64),
        vec![
            client("c1", 6, &[], &[], &ten),
            client("c2", 3, &[], &[], &ten),
        ],
    );
    let a = run(&c);
    assert_eq!((active(&a, "c1").len(), active(&a, "c2").len()), (6, 3));
}

const FOUR: [&str; 4] = ["0_0", "0_1", "1_0", "1_1"];

#[test]
fn s06_warm_ups_if_balanced_over_threads_not_clients() {
    let zero = uniform_lags(&FOUR, 0);
    let c = cluster(
        config(0, 2, 0),
        stateful(&FOUR, MAX as u64),
        vec![
            client("c1", 5, &FOUR, &[], &zero),
            client("c2", 5, &[], &[], &[]),
            client("c3", 5, &[], &[], &[]),
        ],
    );
    let a = run(&c);
    assert_eq!(active(&a, "c1"), FOUR);
    assert_eq!(standby_and_warmup(&a, "c2"), ["0_1"]);
    assert_eq!(standby_and_warmup(&a, "c3"), ["1_0"]);
    assert!(a.followup_rebalance);
}

#[test]
fn s07_warmed_up_clients_balance() {
    let zero = uniform_lags(&FOUR, 0);
    let c = cluster(
        config(0, 2, 0),
        stateful(&FOUR, MAX as u64),
        vec![
            client("c1", 5, &FOUR, &[], &zero),
            client("c2", 5, &[], &["0_1"], &[("0_1", 0)]),
            client("c3", 5, &[], &["1_0"], &[("1_0", 0)]),
        ],
    );
    let a = run(&c);
    assert_eq!(active(&a, "c1"), ["0_0", "1_1"]);
    assert_eq!(active(&a, "c2"), ["0_1"]);
    assert_eq!(active(&a, "c3"), ["1_0"]);
    assert!(!a.followup_rebalance);
}

#[test]
fn s08_active_not_on_caught_up_client() {
    let mut tasks = stateful(&["0_0"], MAX as u64);
    tasks.extend(stateless(&["0_1"]));
    let c = cluster(
        config(100, 2, 0),
        tasks,
        vec![
            client("c1", 1, &["0_0"], &[], &[("0_0", 500)]),
            client("c2", 1, &["0_1"], &[], &[("0_0", 0)]),
        ],
    );
    let a = run(&c);
    assert_eq!(active(&a, "c1"), ["0_1"]);
    assert_eq!(active(&a, "c2"), ["0_0"]);
    assert_eq!(
        a.clients[&"c1".into()]
            .warmup
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["0_0"]
    );
    assert!(a.followup_rebalance);
}

#[test]
fn s09_most_caught_up() {
    let c = most_caught_up();
    let a = run(&c);
    assert_eq!(active(&a, "c3"), ["0_0"]);
    assert_eq!(standby_and_warmup(&a, "c1"), ["0_0"]);
    assert_eq!(standby_and_warmup(&a, "c2"), ["0_0"]);
    assert!(a.followup_rebalance);
}

#[test]
fn s10_standbys_for_stateful() {
    let c = cluster(
        config(100, 2, 1),
        stateful(&["0_0", "0_1"], MAX as u64),
        vec![mock("c1", &["0_0"]), mock("c2", &["0_1"])],
    );
    let a = run(&c);
    assert_eq!(active(&a, "c1"), ["0_0"]);
    assert_eq!(standby_and_warmup(&a, "c1"), ["0_1"]);
    assert_eq!(active(&a, "c2"), ["0_1"]);
    assert_eq!(standby_and_warmup(&a, "c2"), ["0_0"]);
    assert!(!a.followup_rebalance);
}

#[test]
fn s11_max_warmups() {
    let c = cluster(
        config(100, 1, 0),
        stateful(&FOUR, MAX as u64),
        vec![mock("c1", &FOUR), mock("c2", &[])],
    );
    let a = run(&c);
    assert_eq!(active(&a, "c1"), FOUR);
    assert_eq!(standby_and_warmup(&a, "c2").len(), 1);
    assert!(a.followup_rebalance);
}

#[test]
fn s12_warmup_and_standby_not_same_client() {
    let c = cluster(
        config(100, 1, 1),
        stateful(&FOUR, MAX as u64),
        vec![mock("c1", &FOUR), mock("c2", &[])],
    );
    let a = run(&c);
    assert_eq!(active(&a, "c1"), FOUR);
    assert_eq!(standby_and_warmup(&a, "c2"), FOUR);
    assert!(a.followup_rebalance);
}

#[test]
fn s13_stateless_balance_total_load() {
    let st = ["0_0", "0_1", "0_2", "0_3"];
    let mut tasks = stateful(&st, MAX as u64);
    tasks.extend(stateless(&["1_0", "1_1", "1_2"]));
    let c = cluster(
        config(100, 2, 1),
        tasks,
        vec![mock("c1", &st), mock("c2", &[])],
    );
    let a = run(&c);
    assert_eq!(active(&a, "c1"), st);
    assert_eq!(active(&a, "c2"), ["1_0", "1_1", "1_2"]);
    assert_eq!(standby_and_warmup(&a, "c2"), st);
    assert!(a.followup_rebalance);
}

#[test]
fn s14_previous_assignment_reused() {
    let c = cluster(
        config(100, 2, 0),
        stateful(&["0_0", "0_1", "0_2", "0_3"], MAX as u64),
        vec![mock("c1", &["0_0", "0_2"]), mock("c2", &["0_1", "0_3"])],
    );
    let a = run(&c);
    assert_eq!(active(&a, "c1"), ["0_0", "0_2"]);
    assert_eq!(active(&a, "c2"), ["0_1", "0_3"]);
    assert!(!a.followup_rebalance);
}

#[test]
fn s15_edge_cases() {
    // A single client cannot hold standbys.
    let c = cluster(
        config(100, 2, 1),
        stateful(&["0_0"], MAX as u64),
        vec![mock("c1", &["0_0"])],
    );
    let a = run(&c);
    assert!(standby_and_warmup(&a, "c1").is_empty());
    assert!(!a.followup_rebalance);
    assert!(!a.warnings.is_empty());

    // One client whose lags are all MAX: both actives, no standbys.
    let c = cluster(
        config(100, 2, 1),
        stateful(&["0_0", "0_1"], MAX as u64),
        vec![client("c1", 1, &[], &[], &[])],
    );
    let a = run(&c);
    assert_eq!(active(&a, "c1"), ["0_0", "0_1"]);
    assert!(standby_and_warmup(&a, "c1").is_empty());
    assert!(!a.followup_rebalance);

    // Capacities 100/50/1, all lags 0: everyone gets an active.
    let zero = uniform_lags(&NINE, 0);
    let c = cluster(
        config(100, 2, 0),
        stateful(&NINE, MAX as u64),
        vec![
            client("c1", 100, &[], &[], &zero),
            client("c2", 50, &[], &[], &zero),
            client("c3", 1, &[], &[], &zero),
        ],
    );
    let a = run(&c);
    for id in ["c1", "c2", "c3"] {
        assert!(!active(&a, id).is_empty(), "{id} got no active");
    }
    assert!(!a.followup_rebalance);
}
