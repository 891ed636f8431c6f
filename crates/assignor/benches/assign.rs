//! Assignment speed. Each group runs Baton's assignor beside Kafka's (ported) on the same input,
//! so the ratio between them is measured in the same run on the same machine.

use std::hint::black_box;

use baton_assignor::{
    AssignmentConfig, ClientId, ClientSpec, Cluster, ClusterState, HighAvailabilityAssignor,
    KafkaAssignor, Lag, TaskAssignor, TaskId, TaskSpec,
};
use criterion::{criterion_group, criterion_main, Criterion};

#[path = "../tests/common/mod.rs"]
mod common;

/// `tasks` stateful tasks on `old` clients that hold them (1 standby each), plus `new` empty clients.
fn scale_out(tasks: usize, old: usize, new: usize, standbys: u32) -> Cluster {
    let specs: Vec<TaskSpec> = (0..tasks)
        .map(|i| TaskSpec {
            id: TaskId::new((i / 100) as u32, (i % 100) as u32),
            stateful: true,
            end_offset_sum: 150_000,
            partitions: Vec::new(),
        })
        .collect();
    let mut clients: Vec<ClientSpec> = (0..old + new)
        .map(|i| ClientSpec {
            id: ClientId(format!("c{i:05}")),
            capacity: 1,
            ..Default::default()
        })
        .collect();
    for (i, t) in specs.iter().enumerate() {
        let a = i % old;
        clients[a].owned_active.insert(t.id);
        clients[a].lags.insert(t.id, Lag::Running);
        for s in 1..=standbys as usize {
            let c = (i + s) % old;
            clients[c].owned_standby.insert(t.id);
            clients[c].lags.insert(t.id, Lag::Behind(50));
        }
    }
    let config = AssignmentConfig {
        num_standby_replicas: standbys,
        ..AssignmentConfig::default()
    };
    Cluster::new(ClusterState {
        config,
        tasks: specs,
        clients,
    })
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("1000 tasks x 100 clients (90 hold state), 1 standby");
    let cluster = scale_out(1000, 90, 10, 1);
    g.bench_function("high-availability", |b| {
        b.iter(|| HighAvailabilityAssignor.assign(black_box(&cluster)))
    });
    g.bench_function("kafka", |b| {
        b.iter(|| KafkaAssignor.assign(black_box(&cluster)))
    });
    g.finish();

    let mut g = c.benchmark_group("50000 tasks x 1000 clients (900 hold state), 1 standby");
    g.sample_size(10);
    let cluster = scale_out(50_000, 900, 100, 1);
    g.bench_function("high-availability", |b| {
        b.iter(|| HighAvailabilityAssignor.assign(black_box(&cluster)))
    });
    g.finish();
}

/// `rack.aware.assignment.strategy = min_traffic` over 3 racks: a running application (four in
/// five tasks run caught up, 1 standby), one partition per task on 1 or 2 racks.
fn bench_racks(c: &mut Criterion) {
    for (tasks, clients) in [(1000, 100), (10_000, 1000)] {
        let cluster = Cluster::new(common::rack_case(tasks, clients, 3, 1, true, 7)).unwrap();
        let mut g = c.benchmark_group(format!(
            "min_traffic, {tasks} tasks x {clients} clients over 3 racks, 1 standby"
        ));
        g.sample_size(10);
        g.bench_function("high-availability", |b| {
            b.iter(|| HighAvailabilityAssignor.assign(black_box(&cluster)))
        });
        g.bench_function("kafka", |b| {
            b.iter(|| KafkaAssignor.assign(black_box(&cluster)))
        });
        let mut plain = cluster.clone();
        plain.config.rack_aware_strategy = baton_assignor::RackStrategy::None;
        g.bench_function("high-availability, racks off", |b| {
            b.iter(|| HighAvailabilityAssignor.assign(black_box(&plain)))
        });
        g.finish();
    }
}

criterion_group!(benches, bench, bench_racks);
criterion_main!(benches);
