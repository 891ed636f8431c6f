#!/usr/bin/env python3
"""Baseline for docs/BENCHMARKS.md: librdkafka (confluent-kafka) produce and fetch throughput.

Usage: librdkafka_throughput.py BOOTSTRAP TOPIC RECORDS RECORD_BYTES
Prints two lines: "produce MB/s" and "fetch MB/s". The topic must exist with 1 partition.
"""
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, topic, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
value = b"x" * size

p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
              "batch.size": 512 * 1024, "compression.type": "none"})
start = time.perf_counter()
for i in range(n):
    while True:
        try:
            p.produce(topic, value, partition=0)
            break
        except BufferError:
            p.poll(0.01)
p.flush()
produce_s = time.perf_counter() - start

c = Consumer({"bootstrap.servers": bootstrap, "group.id": "baseline", "enable.auto.commit": False,
              "fetch.max.bytes": 1024 * 1024, "max.partition.fetch.bytes": 1024 * 1024})
c.assign([TopicPartition(topic, 0, 0)])
start = time.perf_counter()
seen = 0
while seen < n:
    for m in c.consume(10000, 1.0):
        if m.error() is None:
            seen += 1
fetch_s = time.perf_counter() - start
c.close()
mb = n * size / 1e6
print(f"produce {mb / produce_s:.1f}")
print(f"fetch {mb / fetch_s:.1f}")
