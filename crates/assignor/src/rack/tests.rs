use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::cluster::{ClientSpec, ClusterState, SourcePartition, TaskSpec};
use crate::config::AssignmentConfig;
use crate::high_availability::flow::Network;
use crate::model::{TaskId, TopicPartition};

const RACKS: [&str; 4] = ["ra", "rb", "rc", "rd"];

/// `replicas[t]` = the racks of task t's partitions (one partition per entry).
fn cluster(
    replicas: &[Vec<Vec<usize>>],
    client_racks: &[usize],
    strategy: RackStrategy,
    costs: (i64, i64),
) -> Cluster {
    let tasks = replicas
        .iter()
        .enumerate()
        .map(|(t, parts)| TaskSpec {
            id: TaskId::new(t as u32 % 2, t as u32),
            stateful: false,
            end_offset_sum: 0,
            partitions: parts
                .iter()
                .enumerate()
                .map(|(p, racks)| SourcePartition {
                    partition: TopicPartition::new(format!("in{t}"), p as i32),
                    racks: racks.iter().map(|&r| RACKS[r].to_owned()).collect(),
                })
                .collect(),
        })
        .collect();
    let clients = client_racks
        .iter()
        .enumerate()
        .map(|(i, &r)| ClientSpec {
            id: format!("c{i:03}").as_str().into(),
            capacity: 1,
            rack: Some(RACKS[r].to_owned()),
            ..Default::default()
        })
        .collect();
    Cluster::new(ClusterState {
        config: AssignmentConfig {
            rack_aware_strategy: strategy,
            rack_aware_traffic_cost: Some(costs.0),
            rack_aware_non_overlap_cost: Some(costs.1),
            ..Default::default()
        },
        tasks,
        clients,
    })
    .unwrap()
}

fn total(costs: &RackCosts, items: &[Item], placed: &[ClientIx]) -> i64 {
    items
        .iter()
        .zip(placed)
        .map(|(it, &c)| {
            costs.traffic_on(it.task, costs.rack_of(c))
                + if c == it.client { 0 } else { costs.non_overlap }
        })
        .sum()
}

/// The textbook flow: source -> every task -> every client (cost per pair) -> sink, a client's
/// capacity its count in the group. Solved per group.
fn reference(costs: &RackCosts, items: &[Item], clients: usize) -> i64 {
    let mut groups: BTreeMap<u32, Vec<Item>> = BTreeMap::new();
    for it in items {
        groups.entry(it.group).or_default().push(it.clone());
    }
    let mut sum = 0;
    for group in groups.values() {
        let n = group.len();
        let (source, sink) = (n + clients, n + clients + 1);
        let mut net = Network::new(n + clients + 2);
        let mut count = vec![0; clients];
        let mut pairs = Vec::new();
        for (i, it) in group.iter().enumerate() {
            net.add(source, i, 1, 0);
            count[it.client] += 1;
            for c in 0..clients {
                let cost = costs.traffic_on(it.task, costs.rack_of(ClientIx::new(c)))
                    + if ClientIx::new(c) == it.client {
                        0
                    } else {
                        costs.non_overlap
                    };
                pairs.push((net.add(i, n + c, 1, cost), cost));
            }
        }
        for (c, &k) in count.iter().enumerate() {
            net.add(n + c, sink, k, 0);
        }
        assert_eq!(net.min_cost_max_flow(source, sink), n as i64);
        sum += pairs
            .iter()
            .filter(|&&(e, _)| net.flow_on(e) == 1)
            .map(|&(_, c)| c)
            .sum::<i64>();
    }
    sum
}

fn counts(items: &[Item], placed: &[ClientIx]) -> BTreeMap<(u32, ClientIx), u32> {
    let mut m = BTreeMap::new();
    for (it, &c) in items.iter().zip(placed) {
        *m.entry((it.group, c)).or_default() += 1;
    }
    m
}

/// Two one-thread clients on racks ra and rb; task 0 reads from rb, task 1 from ra.
fn crossed(traffic: i64, non_overlap: i64) -> RackCosts {
    let c = cluster(
        &[vec![vec![1]], vec![vec![0]]],
        &[0, 1],
        RackStrategy::MinTraffic,
        (traffic, non_overlap),
    );
    RackCosts::new(&c).unwrap().unwrap()
}

#[test]
fn a_task_on_the_wrong_rack_swaps_with_one_that_reads_nothing_locally() {
    // Each task runs on the other one's rack.
    let item = |i| Item {
        task: TaskIx(i),
        client: ClientIx(i),
        group: 0,
        blocked: Vec::new(),
    };
    let items = [item(0), item(1)];
    let costs = crossed(10, 1);
    let (c0, c1) = (ClientIx(0), ClientIx(1));
    assert_eq!(total(&costs, &items, &[c0, c1]), 20);
    let placed = exchange(&costs, &items);
    assert_eq!(placed, vec![c1, c0]);
    assert_eq!(total(&costs, &items, &placed), 2);
    // When moving costs more than it saves, nothing moves.
    assert_eq!(exchange(&crossed(1, 5), &items), vec![c0, c1]);
    // A blocked rack (a standby is there) is never taken, however much it would save.
    let mut blocked = items.clone();
    blocked[0].blocked = vec![1];
    assert_eq!(exchange(&costs, &blocked), vec![c0, c1]);
}

#[test]
fn racks_are_skipped_with_a_reason_when_the_input_lacks_them() {
    let mut c = cluster(&[vec![vec![0]]], &[0, 1], RackStrategy::MinTraffic, (10, 1));
    c.clients[1].rack = None;
    let why = RackCosts::new(&c).unwrap_err().to_string();
    assert!(
        why.contains("client c001 (clients[1]) has no rack"),
        "{why}"
    );
    let mut c = cluster(&[vec![vec![]]], &[0, 1], RackStrategy::MinTraffic, (10, 1));
    let why = RackCosts::new(&c).unwrap_err().to_string();
    assert!(
        why.contains("partition in0-0 of task 0_0 has no replica rack"),
        "{why}"
    );
    c.tasks[0].partitions.clear();
    let why = RackCosts::new(&c).unwrap_err().to_string();
    assert!(why.contains("no task lists its input partitions"), "{why}");
    c.config.rack_aware_strategy = RackStrategy::None;
    assert!(RackCosts::new(&c).unwrap().is_none());
}

/// `(replica racks per task and partition, rack per client, start client per task, per
/// subtopology, traffic cost, non-overlap cost)`.
type Case = (Vec<Vec<Vec<usize>>>, Vec<usize>, Vec<u32>, bool, i64, i64);

fn case() -> impl Strategy<Value = Case> {
    (1usize..=4, 1usize..=7).prop_flat_map(|(racks, clients)| {
        (
            prop::collection::vec(
                prop::collection::vec(prop::collection::vec(0..racks, 0..=2), 1..=3),
                1..=14,
            ),
            prop::collection::vec(0..racks, clients),
            prop::collection::vec(0..clients as u32, 14),
            any::<bool>(),
            0i64..=12,
            0i64..=12,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// The rack-level exchange reaches the same total as the full tasks x clients min-cost
    /// flow, and every client keeps its number of actives (per subtopology when asked).
    #[test]
    fn the_exchange_is_a_min_cost_flow((replicas, racks, start, per_sub, traffic, non_overlap) in case()) {
        // A partition with no replica anywhere still costs a cross-rack read everywhere.
        let replicas: Vec<Vec<Vec<usize>>> = replicas
            .into_iter()
            .map(|t| t.into_iter().map(|p| if p.is_empty() { vec![3] } else { p }).collect())
            .collect();
        let strategy = if per_sub { RackStrategy::BalanceSubtopology } else { RackStrategy::MinTraffic };
        let c = cluster(&replicas, &racks, strategy, (traffic, non_overlap));
        let costs = RackCosts::new(&c).unwrap().unwrap();
        let items: Vec<Item> = (0..replicas.len())
            .map(|t| Item {
                task: TaskIx::new(t),
                client: ClientIx(start[t]),
                group: if per_sub { c.tasks[t].id.subtopology } else { 0 },
                blocked: Vec::new(),
            })
            .collect();
        let placed = exchange(&costs, &items);
        prop_assert_eq!(counts(&items, &placed), counts(&items, &items.iter().map(|i| i.client).collect::<Vec<_>>()));
        prop_assert_eq!(total(&costs, &items, &placed), reference(&costs, &items, racks.len()));
        prop_assert_eq!(exchange(&costs, &items), placed, "deterministic");
    }
}
