//! Produce and fetch: writing records to a partition and reading them back.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::batch::encode_v2;
use crate::client::Client;
use crate::error::{check, Error, Result};

/// Produce v13 addresses topics by id; this client's produces use names.
const PRODUCE_MAX_VERSION: i16 = 12;
/// The newest Fetch naming topics; v13 addresses them by id (KIP-516), used when every
/// partition of a fetch comes with its topic's id.
const FETCH_BY_NAME_MAX_VERSION: i16 = 12;
const FETCH_BY_ID_VERSION: i16 = 13;

/// A record to produce: key and value, either may be null.
pub type KeyValue = (Option<Bytes>, Option<Bytes>);

/// A record read back from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    /// Milliseconds since the epoch, as the producer stamped it.
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

/// What one fetch returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub records: Vec<Record>,
    pub high_watermark: i64,
    /// The offset after the last whole batch returned, control records included: where the
    /// next fetch starts even when every record returned was a control record.
    pub next_offset: Option<i64>,
    /// A batch that could not be read, after the records returned.
    pub corrupt: Option<crate::batch::CorruptBatch>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Client {
    /// The leader of a partition.
    pub async fn leader(&self, topic: &str, partition: i32) -> Result<String> {
        let meta = self.metadata(Some(&[topic.to_owned()])).await?;
        let t = meta
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .ok_or_else(|| Error::Protocol(format!("topic {topic} is not in the metadata")))?;
        check(ApiKey::Metadata, t.error_code)?;
        let p = t
            .partitions
            .iter()
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "partition {topic}-{partition} is not in the metadata"
                ))
            })?;
        let b = meta
            .brokers
            .iter()
            .find(|b| b.node_id == p.leader_id)
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "leader {} of {topic}-{partition} is unknown",
                    p.leader_id.0
                ))
            })?;
        Ok(format!("{}:{}", b.host.as_str(), b.port))
    }

    /// Appends records (key, value) to a partition with `acks=all`; returns the first offset.
    pub async fn produce(
        &self,
        leader: &str,
        topic: &str,
        partition: i32,
        records: &[KeyValue],
    ) -> Result<i64> {
        let batch = encode_records(records, None, &[])?;
        self.send_batch(leader, topic, partition, batch).await
    }

    /// As [`Client::produce`], each record stamped with its own timestamp (milliseconds since
    /// the epoch, `timestamps[i]` for `records[i]`): event time carried from input to output.
    pub async fn produce_stamped(
        &self,
        leader: &str,
        topic: &str,
        partition: i32,
        records: &[KeyValue],
        timestamps: &[i64],
    ) -> Result<i64> {
        self.produce_with_headers(leader, topic, partition, records, timestamps, &[])
            .await
    }

    /// As [`Client::produce_stamped`], each record with a value carrying `value_headers`
    /// (a Kafka Streams suppression buffer's changelog marks its layout so: `v` = 3).
    pub async fn produce_with_headers(
        &self,
        leader: &str,
        topic: &str,
        partition: i32,
        records: &[KeyValue],
        timestamps: &[i64],
        value_headers: &[(&str, &[u8])],
    ) -> Result<i64> {
        let batch = encode_records(records, Some(timestamps), value_headers)?;
        self.send_batch(leader, topic, partition, batch).await
    }

    /// Appends encoded record batches ([`encode_records`]) to several partitions led by
    /// `leader`, in one request with `acks=all`: the first offset each batch took, or the
    /// partition's error, in the order of `writes`. `Err`: the request as a whole failed.
    pub async fn produce_batches(
        &self,
        leader: &str,
        writes: Vec<PartitionBatch>,
    ) -> Result<Vec<Result<i64>>> {
        let wanted: Vec<(String, i32)> = writes
            .iter()
            .map(|w| (w.topic.clone(), w.partition))
            .collect();
        let mut topics: Vec<TopicProduceData> = Vec::new();
        for w in writes {
            let part = PartitionProduceData::default()
                .with_index(w.partition)
                .with_records(Some(w.batch));
            match topics.iter_mut().find(|t| t.name.0.as_str() == w.topic) {
                Some(t) => t.partition_data.push(part),
                None => topics.push(
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string(w.topic)))
                        .with_partition_data(vec![part]),
                ),
            }
        }
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(topics);
        let resp = self
            .send_capped_to(leader, &req, PRODUCE_MAX_VERSION)
            .await?;
        let answer = |topic: &str, partition: i32| {
            let p = resp
                .responses
                .iter()
                .filter(|t| t.name.0.as_str() == topic)
                .flat_map(|t| &t.partition_responses)
                .find(|p| p.index == partition)
                .ok_or_else(|| {
                    Error::Protocol(format!("Produce answered nothing for {topic}-{partition}"))
                })?;
            check(ApiKey::Produce, p.error_code)?;
            Ok(p.base_offset)
        };
        Ok(wanted.iter().map(|(t, p)| answer(t, *p)).collect())
    }

    async fn send_batch(
        &self,
        leader: &str,
        topic: &str,
        partition: i32,
        batch: Bytes,
    ) -> Result<i64> {
        let write = PartitionBatch {
            topic: topic.to_owned(),
            partition,
            batch,
        };
        let mut answers = self.produce_batches(leader, vec![write]).await?;
        answers
            .pop()
            .ok_or_else(|| Error::Protocol("Produce answered no partition".into()))?
    }

    /// Reads records from `offset` (at most about `max_bytes`), waiting up to `max_wait_ms` for data.
    pub async fn fetch(
        &self,
        leader: &str,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        max_wait_ms: i32,
    ) -> Result<Fetched> {
        let want = FetchWant {
            topic: topic.to_owned(),
            topic_id: None,
            partition,
            offset,
            max_bytes,
        };
        self.fetch_many(leader, &[want], max_wait_ms)
            .await?
            .pop()
            .ok_or_else(|| Error::Protocol("Fetch answered no partition".into()))?
    }

    /// Reads several partitions led by one broker in one request. The broker answers as soon as
    /// any of them has data, or after `max_wait_ms`. Results come in the order of `wants`; a
    /// partition the broker left out of its answer is an empty result.
    pub async fn fetch_many(
        &self,
        leader: &str,
        wants: &[FetchWant],
        max_wait_ms: i32,
    ) -> Result<Vec<Result<Fetched>>> {
        self.fetch_wants(leader, wants, max_wait_ms, false).await
    }

    /// [`Client::fetch_many`], each partition's records in a buffer of their own. A record's
    /// key and value are slices of the buffer they came in, which counts its references: threads
    /// that take different partitions' records then never count on the same one, which would
    /// cost each of them more than the copy.
    pub async fn fetch_many_apart(
        &self,
        leader: &str,
        wants: &[FetchWant],
        max_wait_ms: i32,
    ) -> Result<Vec<Result<Fetched>>> {
        self.fetch_wants(leader, wants, max_wait_ms, true).await
    }

    async fn fetch_wants(
        &self,
        leader: &str,
        wants: &[FetchWant],
        max_wait_ms: i32,
        apart: bool,
    ) -> Result<Vec<Result<Fetched>>> {
        // By id, a topic deleted and made again under the same name is an error
        // (UNKNOWN_TOPIC_ID), not a partition read from where the old one stood.
        let by_id = !wants.is_empty()
            && wants.iter().all(|w| w.topic_id.is_some())
            && self.version::<FetchRequest>(leader).await? >= FETCH_BY_ID_VERSION;
        let same = |t: &FetchTopic, w: &FetchWant| match by_id {
            true => Some(t.topic_id) == w.topic_id,
            false => t.topic.0.as_str() == w.topic,
        };
        let mut by_topic: Vec<FetchTopic> = Vec::new();
        for w in wants {
            let part = FetchPartition::default()
                .with_partition(w.partition)
                .with_fetch_offset(w.offset)
                .with_partition_max_bytes(w.max_bytes);
            match by_topic.iter_mut().find(|t| same(t, w)) {
                Some(t) => t.partitions.push(part),
                None => {
                    let topic = match (by_id, w.topic_id) {
                        (true, Some(id)) => FetchTopic::default().with_topic_id(id),
                        _ => FetchTopic::default()
                            .with_topic(TopicName(StrBytes::from_string(w.topic.clone()))),
                    };
                    by_topic.push(topic.with_partitions(vec![part]))
                }
            }
        }
        let total: i64 = wants.iter().map(|w| w.max_bytes.max(0) as i64).sum();
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(total.min(i32::MAX as i64) as i32)
            .with_session_epoch(-1)
            .with_topics(by_topic);
        let cap = match by_id {
            true => FETCH_BY_ID_VERSION,
            false => FETCH_BY_NAME_MAX_VERSION,
        };
        let resp = self.send_capped_to(leader, &req, cap).await?;
        check(ApiKey::Fetch, resp.error_code)?;
        Ok(wants
            .iter()
            .map(|w| {
                let found = resp
                    .responses
                    .iter()
                    .filter(|t| match by_id {
                        true => Some(t.topic_id) == w.topic_id,
                        false => t.topic.0.as_str() == w.topic,
                    })
                    .flat_map(|t| &t.partitions)
                    .find(|p| p.partition_index == w.partition);
                match found {
                    None => Ok(Fetched {
                        records: Vec::new(),
                        high_watermark: -1,
                        next_offset: None,
                        corrupt: None,
                    }),
                    Some(p) => {
                        check(ApiKey::Fetch, p.error_code)?;
                        let records = match apart {
                            true => p.records.as_deref().map(Bytes::copy_from_slice),
                            false => p.records.clone(),
                        };
                        let d = crate::batch::decode_batches(records, w.offset);
                        Ok(Fetched {
                            records: d.records,
                            high_watermark: p.high_watermark,
                            next_offset: d.next_offset,
                            corrupt: d.corrupt,
                        })
                    }
                }
            })
            .collect())
    }
}

/// One partition's part of [`Client::produce_batches`]: a record batch made by
/// [`encode_records`].
#[derive(Debug, Clone)]
pub struct PartitionBatch {
    pub topic: String,
    pub partition: i32,
    pub batch: Bytes,
}

/// One record batch of `records`, record `i` stamped `timestamps[i]` (all now, for `None`),
/// those with a value carrying `value_headers`: a part of [`Client::produce_batches`].
pub fn encode_records(
    records: &[KeyValue],
    timestamps: Option<&[i64]>,
    value_headers: &[(&str, &[u8])],
) -> Result<Bytes> {
    match timestamps {
        Some(ts) if ts.len() != records.len() => Err(Error::Protocol(format!(
            "{} timestamps for {} records",
            ts.len(),
            records.len()
        ))),
        Some(ts) => encode_v2(records, |i| ts[i], value_headers),
        None => {
            let now = now_ms();
            encode_v2(records, |_| now, value_headers)
        }
    }
}

/// One partition of a [`Client::fetch_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchWant {
    pub topic: String,
    /// The topic's id as first seen ([`Client::topic_ids`]): the fetch then reads that topic
    /// only, and fails with UNKNOWN_TOPIC_ID once it was deleted, even if one of the same
    /// name was made since. `None`: by name.
    pub topic_id: Option<uuid::Uuid>,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

/// Kafka's default `message.max.bytes`, less room to spare: the first guess at how large a
/// record batch the broker takes. A refusal halves it ([`Error::is_message_too_large`]).
pub const DEFAULT_BATCH_LIMIT: usize = 1_000_000;

/// A record batch's header (v2), before its records.
const BATCH_HEADER_BYTES: usize = 61;

/// An upper bound on one record's size inside a v2 batch: its key and value, and at most
/// 21 bytes of varints (length, attributes, deltas, key and value lengths, header count)
/// and one more for each kind of length of 5 bytes.
pub fn record_bytes((key, value): &KeyValue) -> usize {
    key.as_ref().map_or(0, Bytes::len) + value.as_ref().map_or(0, Bytes::len) + 32
}

/// How many of `records` (at least one, if any) fit one batch of at most `limit` bytes.
pub fn fitting(records: &[KeyValue], limit: usize) -> usize {
    let mut size = BATCH_HEADER_BYTES;
    for (i, r) in records.iter().enumerate() {
        size += record_bytes(r);
        if size > limit && i > 0 {
            return i;
        }
    }
    records.len()
}

#[cfg(test)]
mod split_tests {
    use super::*;
    use proptest::prelude::*;

    fn kv(len: usize) -> KeyValue {
        (
            Some(Bytes::from_static(b"k")),
            Some(Bytes::from(vec![0u8; len])),
        )
    }

    #[test]
    fn value_headers_go_on_records_with_a_value_only() {
        let records = [kv(3), (Some(Bytes::from_static(b"gone")), None)];
        let mut batch = encode_v2(&records, |i| i as i64, &[("v", &[3])]).unwrap();
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut batch).unwrap();
        let headers: Vec<Vec<(String, Option<Bytes>)>> = set
            .records
            .iter()
            .map(|r| {
                r.headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect()
            })
            .collect();
        let v3 = vec![("v".to_owned(), Some(Bytes::from_static(&[3])))];
        assert_eq!(headers, vec![v3, vec![]]);
    }

    #[test]
    fn one_record_always_goes_even_when_too_large() {
        assert_eq!(fitting(&[kv(5_000)], 1_000), 1);
        assert_eq!(fitting(&[], 1_000), 0);
        assert_eq!(fitting(&[kv(100), kv(100), kv(100)], 61 + 2 * 133), 2);
    }

    proptest! {
        /// Batches cut by `fitting` cover every record once, in order, and each batch of two
        /// or more records stays under the limit.
        #[test]
        fn batches_cover_everything_under_the_limit(
            sizes in proptest::collection::vec(0usize..3_000, 0..200),
            limit in 100usize..20_000,
        ) {
            let records: Vec<KeyValue> = sizes.iter().map(|&s| kv(s)).collect();
            let mut start = 0;
            while start < records.len() {
                let n = fitting(&records[start..], limit);
                prop_assert!(n >= 1);
                let size: usize = BATCH_HEADER_BYTES
                    + records[start..start + n].iter().map(record_bytes).sum::<usize>();
                prop_assert!(n == 1 || size <= limit);
                let encoded = encode_v2(&records[start..start + n], |_| 1_700_000_000_000, &[]).unwrap();
                prop_assert!(encoded.len() <= size, "{} > {}", encoded.len(), size);
                start += n;
            }
            prop_assert_eq!(start, records.len());
        }
    }
}
