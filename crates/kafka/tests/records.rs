//! Produce, fetch and end offsets against a real broker.

mod common;

use baton_kafka::client::NewTopic;
use baton_kafka::Client;
use bytes::Bytes;
use common::Broker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_then_fetch_from_the_start_and_mid_batch() {
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    client
        .create_topics(&[NewTopic {
            name: "t".into(),
            partitions: 2,
            compacted: false,
        }])
        .await
        .unwrap();
    let leader = client.leader("t", 1).await.unwrap();
    let batch: Vec<(Option<Bytes>, Option<Bytes>)> = (0..500)
        .map(|i| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(format!("v{i}"))),
            )
        })
        .collect();
    assert_eq!(client.produce(&leader, "t", 1, &batch).await.unwrap(), 0);
    assert_eq!(client.produce(&leader, "t", 1, &batch).await.unwrap(), 500);
    let ends = client.end_offsets(&[tp("t", 0), tp("t", 1)]).await.unwrap();
    assert_eq!(ends[&tp("t", 0)], 0);
    assert_eq!(ends[&tp("t", 1)], 1000);

    let mut next = 0;
    let mut seen = 0;
    while next < 1000 {
        let f = client
            .fetch(&leader, "t", 1, next, 64 * 1024, 500)
            .await
            .unwrap();
        assert_eq!(f.high_watermark, 1000);
        for r in &f.records {
            assert_eq!(r.offset, next);
            assert_eq!(
                r.value.as_deref(),
                Some(format!("v{}", next % 500).as_bytes())
            );
            next += 1;
            seen += 1;
        }
    }
    assert_eq!(seen, 1000);
    // Starting in the middle of a batch returns the rest of it.
    let f = client
        .fetch(&leader, "t", 1, 750, 1024 * 1024, 500)
        .await
        .unwrap();
    assert_eq!(f.records.first().map(|r| r.offset), Some(750));
    assert_eq!(f.records.last().map(|r| r.offset), Some(999));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_commit_and_fetch_back() {
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    client
        .create_topics(&[NewTopic {
            name: "in".into(),
            partitions: 2,
            compacted: false,
        }])
        .await
        .unwrap();
    let none = client
        .committed_offsets("app", &[tp("in", 0), tp("in", 1)])
        .await
        .unwrap();
    assert!(
        none.values().all(|&o| o < 0),
        "nothing committed yet: {none:?}"
    );
    client
        .commit_offsets("app", -1, "", &[(tp("in", 0), 42), (tp("in", 1), 7)])
        .await
        .unwrap();
    let got = client
        .committed_offsets("app", &[tp("in", 0), tp("in", 1)])
        .await
        .unwrap();
    assert_eq!(got[&tp("in", 0)], 42);
    assert_eq!(got[&tp("in", 1)], 7);
}

fn tp(topic: &str, partition: i32) -> baton_protocol::TopicPartition {
    baton_protocol::TopicPartition::new(topic, partition)
}

/// The broker refuses a record batch over its limit (1 MiB by default) with MessageTooLarge;
/// batches cut by `fitting` at the default limit go through. This is what lets the runtime
/// write a backlog's output at all (issue: a 60,000-event backlog stalled a partition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_batch_is_refused_and_fitted_batches_pass() {
    use baton_kafka::records::{fitting, DEFAULT_BATCH_LIMIT};
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    client
        .create_topics(&[NewTopic {
            name: "big".into(),
            partitions: 1,
            compacted: false,
        }])
        .await
        .unwrap();
    let leader = client.leader("big", 0).await.unwrap();
    let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..3_000)
        .map(|i| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(vec![b'v'; 1_000])),
            )
        })
        .collect();
    let err = client
        .produce(&leader, "big", 0, &records)
        .await
        .unwrap_err();
    assert!(err.is_message_too_large(), "{err}");
    let mut start = 0;
    while start < records.len() {
        let n = fitting(&records[start..], DEFAULT_BATCH_LIMIT);
        let base = client
            .produce(&leader, "big", 0, &records[start..start + n])
            .await
            .unwrap();
        assert_eq!(base, start as i64);
        start += n;
    }
}

/// A topic deleted and made again under the same name has another id. A fetch by the old id
/// fails (UNKNOWN_TOPIC_ID from Kafka) instead of reading the new topic from the old
/// position; by the new id it reads the new topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_by_id_tells_a_topic_made_again_from_the_old_one() {
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    let topic = NewTopic {
        name: "t".into(),
        partitions: 1,
        compacted: false,
    };
    client
        .create_topics(std::slice::from_ref(&topic))
        .await
        .unwrap();
    let old = client.topic_ids(&["t".into()]).await.unwrap()["t"];
    let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..10)
        .map(|i| (None, Some(Bytes::from(format!("old{i}")))))
        .collect();
    let leader = client.leader("t", 0).await.unwrap();
    client.produce(&leader, "t", 0, &records).await.unwrap();
    let want = |id, offset| baton_kafka::records::FetchWant {
        topic: "t".into(),
        topic_id: Some(id),
        partition: 0,
        offset,
        max_bytes: 1 << 20,
    };
    let read = client
        .fetch_many(&leader, &[want(old, 0)], 100)
        .await
        .unwrap();
    assert_eq!(read[0].as_ref().unwrap().records.len(), 10, "by id");

    client.delete_topics(&["t".into()]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    client
        .create_topics(std::slice::from_ref(&topic))
        .await
        .unwrap();
    let new = client.topic_ids(&["t".into()]).await.unwrap()["t"];
    assert_ne!(new, old, "a new id");
    let leader = client.leader("t", 0).await.unwrap();
    let more: Vec<(Option<Bytes>, Option<Bytes>)> = (0..20)
        .map(|i| (None, Some(Bytes::from(format!("new{i}")))))
        .collect();
    client.produce(&leader, "t", 0, &more).await.unwrap();
    let read = client.fetch_many(&leader, &[want(old, 5)], 100).await;
    let e = match read {
        Ok(mut r) => r.pop().unwrap().unwrap_err(),
        Err(e) => e,
    };
    // Kafka answers UNKNOWN_TOPIC_ID; nisshi 0.8.1 UNKNOWN_TOPIC_OR_PARTITION.
    assert!(e.is_unknown_topic_id() || e.is_unknown_topic(), "{e}");
    let read = client
        .fetch_many(&leader, &[want(new, 5)], 100)
        .await
        .unwrap();
    let f = read[0].as_ref().unwrap();
    assert_eq!(f.records[0].value.as_deref(), Some(&b"new5"[..]));
}

/// One request writes to partitions of two topics; each partition gets its own answer: a
/// batch too large for the broker fails alone, and the others are written where asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_produce_writes_several_partitions_each_answered_alone() {
    use baton_kafka::records::{encode_records, PartitionBatch};
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    let topics = ["a", "b"].map(|name| NewTopic {
        name: name.into(),
        partitions: 2,
        compacted: false,
    });
    client.create_topics(&topics).await.unwrap();
    let leader = client.leader("a", 0).await.unwrap();
    let records = |n: usize, size: usize| -> Vec<(Option<Bytes>, Option<Bytes>)> {
        (0..n)
            .map(|i| {
                (
                    Some(Bytes::from(format!("k{i}"))),
                    Some(Bytes::from(vec![b'v'; size])),
                )
            })
            .collect()
    };
    let batch = |topic: &str, partition, records: &[(Option<Bytes>, Option<Bytes>)]| {
        let stamps: Vec<i64> = (0..records.len() as i64).map(|i| 1_000 + i).collect();
        PartitionBatch {
            topic: topic.into(),
            partition,
            batch: encode_records(records, Some(&stamps), &[]).unwrap(),
        }
    };
    client
        .produce(&leader, "b", 1, &records(7, 10))
        .await
        .unwrap();
    let writes = vec![
        batch("a", 0, &records(3, 10)),
        batch("b", 1, &records(5, 10)),
        batch("a", 1, &records(3_000, 1_000)),
        batch("b", 0, &records(2, 10)),
    ];
    let answers = client.produce_batches(&leader, writes).await.unwrap();
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[0].as_ref().unwrap(), &0);
    assert_eq!(
        answers[1].as_ref().unwrap(),
        &7,
        "after the 7 written before"
    );
    assert!(answers[2].as_ref().unwrap_err().is_message_too_large());
    assert_eq!(answers[3].as_ref().unwrap(), &0);
    let ends = client
        .end_offsets(&[tp("a", 0), tp("a", 1), tp("b", 0), tp("b", 1)])
        .await
        .unwrap();
    assert_eq!(
        [
            ends[&tp("a", 0)],
            ends[&tp("a", 1)],
            ends[&tp("b", 0)],
            ends[&tp("b", 1)]
        ],
        [3, 0, 2, 12]
    );
    let f = client
        .fetch(&leader, "b", 1, 7, 1 << 20, 500)
        .await
        .unwrap();
    let stamps: Vec<i64> = f.records.iter().map(|r| r.timestamp).collect();
    assert_eq!(stamps, [1_000, 1_001, 1_002, 1_003, 1_004]);
}
