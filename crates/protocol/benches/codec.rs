//! Encode and decode speed of the large payloads measured in docs/PROTOCOL.md, in bytes/s.

use std::hint::black_box;

use baton_assignor::TaskId;
use baton_protocol::*;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use uuid::Uuid;

fn subscription() -> SubscriptionInfo {
    let sums: Vec<TaskOffsetSum> = (0..10_000)
        .map(|p| TaskOffsetSum {
            task: TaskId::new(0, p),
            offset_sum: 1_000_000 + p as i64,
        })
        .collect();
    SubscriptionInfo::build(
        11,
        11,
        Uuid::from_u128(7),
        "host-07.example.com:8080",
        &sums,
        3,
        0,
    )
}

/// One member's assignment in a 100-member, 10,000-task group with endpoints and 1 standby.
fn assignment() -> AssignmentInfo {
    let tp = |p: u32| TopicPartition {
        topic: "events".into(),
        partition: p as i32,
    };
    let mut a = AssignmentInfo::new(12, 12);
    a.active_tasks = (0..100).map(|i| TaskId::new(0, i * 100)).collect();
    a.standby_tasks = (0..100)
        .map(|i| StandbyTask {
            task: TaskId::new(0, i * 100 + 1),
            partitions: vec![tp(i * 100 + 1)],
        })
        .collect();
    let hosts = |offset: u32| -> Vec<HostPartitions> {
        (0..100)
            .map(|h| HostPartitions {
                host: HostInfo {
                    host: format!("host-{h:03}.example.com"),
                    port: 8080,
                },
                partitions: (0..100).map(|i| tp(i * 100 + (h + offset) % 100)).collect(),
            })
            .collect()
    };
    a.partitions_by_host = hosts(0);
    a.standby_partitions_by_host = hosts(1);
    a.next_rebalance_ms = 1_700_000_600_000;
    a
}

fn bench(c: &mut Criterion) {
    let s = subscription();
    let bytes = s.encode().unwrap();
    let mut g = c.benchmark_group(format!(
        "subscription v11, 10000 offset sums ({} bytes)",
        bytes.len()
    ));
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("encode", |b| b.iter(|| black_box(&s).encode().unwrap()));
    g.bench_function("decode", |b| {
        b.iter(|| SubscriptionInfo::decode(black_box(&bytes)).unwrap())
    });
    g.finish();

    let a = assignment();
    let bytes = a.encode().unwrap();
    let mut g = c.benchmark_group(format!(
        "assignment v12, 1 of 100 members ({} bytes)",
        bytes.len()
    ));
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("encode", |b| b.iter(|| black_box(&a).encode().unwrap()));
    g.bench_function("decode", |b| {
        b.iter(|| AssignmentInfo::decode(black_box(&bytes)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
