//! Decoding one fetch's worth of record batches (4 MiB, the runtime's restore fetch size):
//! Baton's own v2 reader against `kafka-protocol`'s decoder on the same bytes, in one run.
//!
//! `cargo bench -p baton-kafka --bench decode`

use baton_kafka::batch::{decode_batches, through_kafka_protocol};
use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// Batches of about 512 KiB (what the runtime's producer sends) filling `total` bytes.
fn record_set(value_bytes: usize, total: usize) -> (Bytes, usize) {
    let per_batch = (512 * 1024 / (value_bytes + 20)).max(1);
    let mut buf = BytesMut::new();
    let mut offset = 0i64;
    while buf.len() < total {
        let records: Vec<Record> = (0..per_batch)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: offset + i as i64,
                sequence: i as i32 - 1,
                timestamp: 1_700_000_000_000,
                key: Some(Bytes::from(format!("key-{:09}", offset + i as i64))),
                value: Some(Bytes::from(vec![b'v'; value_bytes])),
                headers: Default::default(),
            })
            .collect();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .unwrap();
        offset += per_batch as i64;
    }
    (buf.freeze(), offset as usize)
}

fn by_kafka_protocol(mut bytes: Bytes) -> usize {
    let mut out = Vec::new();
    while bytes.len() >= 12 {
        let len = 12 + i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
        through_kafka_protocol(bytes.split_to(len), 0, &mut out).unwrap();
    }
    out.len()
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_4MiB");
    for value_bytes in [100usize, 1024] {
        let (bytes, records) = record_set(value_bytes, 4 << 20);
        group.throughput(Throughput::Elements(records as u64));
        group.bench_with_input(
            BenchmarkId::new("baton", value_bytes),
            &bytes,
            |b, bytes| b.iter(|| decode_batches(Some(bytes.clone()), 0).records.len()),
        );
        group.bench_with_input(
            BenchmarkId::new("kafka_protocol", value_bytes),
            &bytes,
            |b, bytes| b.iter(|| by_kafka_protocol(bytes.clone())),
        );
    }
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
