//! Committed input offsets: OffsetCommit and OffsetFetch at the group coordinator.

use std::collections::BTreeMap;

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use baton_protocol::TopicPartition;

use crate::client::Client;
use crate::error::{check, Result};

/// OffsetCommit v9 and OffsetFetch v8 change shape (topic ids, batched groups); this client
/// uses the name-based forms every broker supports.
const OFFSET_COMMIT_MAX_VERSION: i16 = 8;
const OFFSET_FETCH_MAX_VERSION: i16 = 7;

/// A group's committed position in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub partition: TopicPartition,
    /// The next offset to read; `-1` where none is committed.
    pub offset: i64,
    /// What the committer stored beside it (Kafka Streams: the partition's stream time).
    pub metadata: Option<String>,
}

impl Client {
    /// Commits offsets for `group` as member `member_id` of `generation` (`-1` and `""` commit
    /// outside a generation, which only an empty group accepts).
    pub async fn commit_offsets(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<()> {
        let offsets: Vec<Committed> = offsets
            .iter()
            .map(|(tp, offset)| Committed {
                partition: tp.clone(),
                offset: *offset,
                metadata: None,
            })
            .collect();
        self.commit(group, generation, member_id, &offsets).await
    }

    /// As [`Client::commit_offsets`], each offset with its metadata string.
    pub async fn commit(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        offsets: &[Committed],
    ) -> Result<()> {
        let mut by_topic: BTreeMap<&str, Vec<&Committed>> = BTreeMap::new();
        for c in offsets {
            by_topic.entry(&c.partition.topic).or_default().push(c);
        }
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(StrBytes::from_string(member_id.to_owned()))
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                            .with_partitions(
                                ps.into_iter()
                                    .map(|c| {
                                        OffsetCommitRequestPartition::default()
                                            .with_partition_index(c.partition.partition)
                                            .with_committed_offset(c.offset)
                                            .with_committed_leader_epoch(-1)
                                            .with_committed_metadata(
                                                c.metadata.clone().map(StrBytes::from_string),
                                            )
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        self.retry(|| async {
            let coordinator = self.find_coordinator(group).await?;
            let resp = self
                .send_capped_to(&coordinator, &req, OFFSET_COMMIT_MAX_VERSION)
                .await?;
            for t in &resp.topics {
                for p in &t.partitions {
                    check(ApiKey::OffsetCommit, p.error_code)?;
                }
            }
            Ok(())
        })
        .await
    }

    /// Committed offsets of `group` for the given partitions; `-1` where none is committed.
    pub async fn committed_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        Ok(self
            .committed(group, partitions)
            .await?
            .into_iter()
            .map(|(tp, c)| (tp, c.offset))
            .collect())
    }

    /// As [`Client::committed_offsets`], with each offset's metadata string.
    pub async fn committed(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Committed>> {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            by_topic.entry(&tp.topic).or_default().push(tp.partition);
        }
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_topics(Some(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetFetchRequestTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                            .with_partition_indexes(ps)
                    })
                    .collect(),
            ));
        self.retry(|| async {
            let coordinator = self.find_coordinator(group).await?;
            let resp = self
                .send_capped_to(&coordinator, &req, OFFSET_FETCH_MAX_VERSION)
                .await?;
            check(ApiKey::OffsetFetch, resp.error_code)?;
            let mut out = BTreeMap::new();
            for t in &resp.topics {
                for p in &t.partitions {
                    check(ApiKey::OffsetFetch, p.error_code)?;
                    let partition = TopicPartition::new(t.name.0.as_str(), p.partition_index);
                    out.insert(
                        partition.clone(),
                        Committed {
                            partition,
                            offset: p.committed_offset,
                            metadata: p.metadata.as_ref().map(|m| m.to_string()),
                        },
                    );
                }
            }
            Ok(out)
        })
        .await
    }
}
