//! Produce and fetch: writing records to a partition and reading them back.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record as WireRecord, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType,
};

use crate::client::Client;
use crate::error::{check, Error, Result};

/// Produce v13 and Fetch v13 address topics by id; this client uses names.
const PRODUCE_MAX_VERSION: i16 = 12;
const FETCH_MAX_VERSION: i16 = 12;

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
        let ts = now_ms();
        let wire: Vec<WireRecord> = records
            .iter()
            .enumerate()
            .map(|(i, (key, value))| WireRecord {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // kafka-protocol cuts a batch where offset - sequence changes, and a producer
                // without idempotence must send base sequence -1: one batch, base -1.
                sequence: i as i32 - 1,
                timestamp: ts,
                key: key.clone(),
                value: value.clone(),
                headers: Default::default(),
            })
            .collect();
        let mut batch = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut batch,
            &wire,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .map_err(|e| Error::Codec {
            api: ApiKey::Produce,
            message: format!("{e:#}"),
        })?;
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch.freeze()))])]);
        let resp = self
            .send_capped_to(leader, &req, PRODUCE_MAX_VERSION)
            .await?;
        let p = resp
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .ok_or_else(|| Error::Protocol("Produce answered no partition".into()))?;
        check(ApiKey::Produce, p.error_code)?;
        Ok(p.base_offset)
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
        let mut by_topic: Vec<FetchTopic> = Vec::new();
        for w in wants {
            let part = FetchPartition::default()
                .with_partition(w.partition)
                .with_fetch_offset(w.offset)
                .with_partition_max_bytes(w.max_bytes);
            match by_topic.iter_mut().find(|t| t.topic.0.as_str() == w.topic) {
                Some(t) => t.partitions.push(part),
                None => by_topic.push(
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(w.topic.clone())))
                        .with_partitions(vec![part]),
                ),
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
        let resp = self.send_capped_to(leader, &req, FETCH_MAX_VERSION).await?;
        check(ApiKey::Fetch, resp.error_code)?;
        Ok(wants
            .iter()
            .map(|w| {
                let found = resp
                    .responses
                    .iter()
                    .filter(|t| t.topic.0.as_str() == w.topic)
                    .flat_map(|t| &t.partitions)
                    .find(|p| p.partition_index == w.partition);
                match found {
                    None => Ok(Fetched {
                        records: Vec::new(),
                        high_watermark: -1,
                        next_offset: None,
                    }),
                    Some(p) => {
                        check(ApiKey::Fetch, p.error_code)?;
                        let (records, next_offset) = decode_batches(p.records.clone(), w.offset)?;
                        Ok(Fetched {
                            records,
                            high_watermark: p.high_watermark,
                            next_offset,
                        })
                    }
                }
            })
            .collect())
    }
}

/// One partition of a [`Client::fetch_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchWant {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

/// The records at or after `offset` in a fetched record set, and the offset after its last
/// whole batch.
fn decode_batches(bytes: Option<Bytes>, offset: i64) -> Result<(Vec<Record>, Option<i64>)> {
    let mut records = Vec::new();
    let mut next_offset = None;
    let Some(mut bytes) = bytes else {
        return Ok((records, next_offset));
    };
    // A fetch may end inside a batch; RecordBatchDecoder needs whole batches.
    while bytes.len() >= 12 {
        let len = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if len < 0 || bytes.len() < 12 + len as usize {
            break;
        }
        let mut one = bytes.split_to(12 + len as usize);
        let set = RecordBatchDecoder::decode(&mut one).map_err(|e| Error::Codec {
            api: ApiKey::Fetch,
            message: format!("{e:#}"),
        })?;
        if let Some(last) = set.records.iter().map(|r| r.offset).max() {
            next_offset = Some(next_offset.unwrap_or(offset).max(last + 1));
        }
        // A batch that starts before `offset` is returned whole.
        records.extend(
            set.records
                .into_iter()
                .filter(|r| r.offset >= offset && !r.control)
                .map(|r| Record {
                    offset: r.offset,
                    timestamp: r.timestamp,
                    key: r.key,
                    value: r.value,
                }),
        );
    }
    Ok((records, next_offset))
}
