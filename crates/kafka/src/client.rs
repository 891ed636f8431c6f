//! The client: connections per broker, metadata, the group coordinator, and the requests the
//! group member and `baton inspect` need. Retriable errors are retried with backoff.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, DeleteTopicsRequest, DescribeGroupsRequest,
    FindCoordinatorRequest, GroupId, ListOffsetsRequest, MetadataRequest, MetadataResponse,
    TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::ResponseError;
use tokio::sync::Mutex;

use baton_protocol::bridge::ReplicaRacks;
use baton_protocol::TopicPartition;

use crate::connection::Connection;
use crate::error::{check, Error, Result};

pub use baton_core::backoff::Backoff;

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    /// `cleanup.policy=compact`, for changelogs.
    pub compacted: bool,
}

/// A connection to a Kafka cluster.
pub struct Client {
    bootstrap: Vec<String>,
    client_id: String,
    backoff: Backoff,
    conns: Mutex<BTreeMap<String, Arc<Mutex<Connection>>>>,
    brokers: Mutex<BTreeMap<i32, String>>,
    /// Each request's deadline, in milliseconds.
    request_timeout_ms: std::sync::atomic::AtomicU64,
}

impl Client {
    pub fn new(bootstrap: &[&str], client_id: &str) -> Arc<Client> {
        Arc::new(Client {
            bootstrap: bootstrap.iter().map(|s| s.to_string()).collect(),
            client_id: client_id.to_owned(),
            backoff: Backoff::default(),
            conns: Mutex::new(BTreeMap::new()),
            brokers: Mutex::new(BTreeMap::new()),
            request_timeout_ms: std::sync::atomic::AtomicU64::new(
                crate::connection::DEFAULT_REQUEST_TIMEOUT.as_millis() as u64,
            ),
        })
    }

    /// The deadline of every request on connections opened from now on.
    pub fn set_request_timeout(&self, timeout: Duration) {
        self.request_timeout_ms.store(
            timeout.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(
            self.request_timeout_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    async fn conn(&self, addr: &str) -> Result<Arc<Mutex<Connection>>> {
        let mut conns = self.conns.lock().await;
        if let Some(c) = conns.get(addr) {
            return Ok(c.clone());
        }
        let mut conn = Connection::connect(addr, &self.client_id).await?;
        conn.set_timeout(self.request_timeout());
        let c = Arc::new(Mutex::new(conn));
        conns.insert(addr.to_owned(), c.clone());
        Ok(c)
    }

    /// Forgets a connection after an I/O error, so the next request reconnects.
    async fn drop_conn(&self, addr: &str) {
        self.conns.lock().await.remove(addr);
    }

    /// Sends `req` to the broker at `addr`.
    pub async fn send_to<R: Request>(&self, addr: &str, req: &R) -> Result<R::Response> {
        let conn = self.conn(addr).await?;
        let mut guard = conn.lock().await;
        let result = guard.send(req).await;
        let broken = guard.is_broken();
        drop(guard);
        if broken {
            self.drop_conn(addr).await;
        }
        result
    }

    /// The version of `R` that will be used with the broker at `addr`, for fields that exist
    /// only in some versions.
    pub async fn version<R: Request>(&self, addr: &str) -> Result<i16> {
        let conn = self.conn(addr).await?;
        let v = conn.lock().await.version_for::<R>();
        v
    }

    /// As [`Client::send_to`], at most version `cap`.
    pub async fn send_capped_to<R: Request>(
        &self,
        addr: &str,
        req: &R,
        cap: i16,
    ) -> Result<R::Response> {
        let conn = self.conn(addr).await?;
        let mut guard = conn.lock().await;
        let result = guard.send_capped(req, cap).await;
        let broken = guard.is_broken();
        drop(guard);
        if broken {
            self.drop_conn(addr).await;
        }
        result
    }

    /// Sends to any bootstrap broker that answers.
    pub async fn send_any<R: Request>(&self, req: &R) -> Result<R::Response> {
        let mut last = None;
        for addr in &self.bootstrap {
            match self.send_to(addr, req).await {
                Ok(r) => return Ok(r),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Protocol("no bootstrap servers".into())))
    }

    /// Retries `op` with exponential backoff while its error is retriable.
    pub async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut attempt = 0;
        loop {
            match op().await {
                Err(e) if e.is_retriable() && attempt + 1 < self.backoff.attempts => {
                    attempt += 1;
                    tracing::debug!(error = %e, attempt, "retrying");
                    tokio::time::sleep(self.backoff.delay(attempt)).await;
                }
                other => return other,
            }
        }
    }

    /// Cluster metadata for `topics` (all topics when `None`); remembers broker addresses.
    /// Never creates a topic: asking about a missing one must not bring it into being with
    /// the broker's default partition count (topics are created on purpose, with
    /// [`Client::create_topics`]).
    pub async fn metadata(&self, topics: Option<&[String]>) -> Result<MetadataResponse> {
        let req = MetadataRequest::default()
            .with_allow_auto_topic_creation(false)
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect()
            }));
        let resp = self.retry(|| self.send_any(&req)).await?;
        let mut brokers = self.brokers.lock().await;
        for b in &resp.brokers {
            brokers.insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
        }
        Ok(resp)
    }

    /// The ids of `topics` (Metadata v10+); a topic that is missing, or that the broker gives
    /// no id, is left out.
    pub async fn topic_ids(&self, topics: &[String]) -> Result<BTreeMap<String, uuid::Uuid>> {
        let presence = self.topic_presence(topics).await?;
        Ok(presence
            .into_iter()
            .filter_map(|(name, id)| Some((name, id?)))
            .collect())
    }

    /// What the broker says of each of `topics`: `Some(id)`, or `None` when it has no such
    /// topic (deleted). A topic answered with another error (no leader yet) or without an id
    /// is left out: nothing is known of it.
    pub async fn topic_presence(
        &self,
        topics: &[String],
    ) -> Result<BTreeMap<String, Option<uuid::Uuid>>> {
        let resp = self.metadata(Some(topics)).await?;
        let gone = kafka_protocol::ResponseError::UnknownTopicOrPartition.code();
        Ok(resp
            .topics
            .iter()
            .filter_map(|t| {
                let name = t.name.as_ref()?.to_string();
                match t.error_code {
                    0 if !t.topic_id.is_nil() => Some((name, Some(t.topic_id))),
                    code if code == gone => Some((name, None)),
                    _ => None,
                }
            })
            .collect())
    }

    /// The racks of every replica of `topics`' partitions (brokers without a rack add none).
    pub async fn replica_racks(&self, topics: &[String]) -> Result<ReplicaRacks> {
        let resp = self.metadata(Some(topics)).await?;
        let racks: BTreeMap<i32, String> = resp
            .brokers
            .iter()
            .filter_map(|b| Some((b.node_id.0, b.rack.as_ref()?.to_string())))
            .collect();
        let mut out = BTreeMap::new();
        for t in &resp.topics {
            let Some(name) = &t.name else { continue };
            for p in &t.partitions {
                let on: std::collections::BTreeSet<String> = p
                    .replica_nodes
                    .iter()
                    .filter_map(|n| racks.get(&n.0).cloned())
                    .collect();
                out.insert(
                    TopicPartition::new(name.0.to_string(), p.partition_index),
                    on,
                );
            }
        }
        Ok(out)
    }

    async fn broker_addr(&self, id: BrokerId) -> Result<String> {
        if let Some(a) = self.brokers.lock().await.get(&id.0) {
            return Ok(a.clone());
        }
        self.metadata(Some(&[])).await?;
        self.brokers
            .lock()
            .await
            .get(&id.0)
            .cloned()
            .ok_or_else(|| Error::Protocol(format!("broker {} is not in the metadata", id.0)))
    }

    /// The address of `group`'s coordinator.
    pub async fn find_coordinator(&self, group: &str) -> Result<String> {
        self.retry(|| async {
            let addr = self
                .bootstrap
                .first()
                .ok_or_else(|| Error::Protocol("no bootstrap servers".into()))?;
            let version = self.version::<FindCoordinatorRequest>(addr).await?;
            let key = StrBytes::from_string(group.to_owned());
            // v4 batched the keys; earlier versions take one.
            let req = if version >= 4 {
                FindCoordinatorRequest::default()
                    .with_key_type(0)
                    .with_coordinator_keys(vec![key])
            } else {
                FindCoordinatorRequest::default().with_key(key)
            };
            let resp = self.send_to(addr, &req).await?;
            // v4+ answers per key; older versions at the top level.
            if let Some(c) = resp.coordinators.first() {
                check(ApiKey::FindCoordinator, c.error_code)?;
                return Ok(format!("{}:{}", c.host.as_str(), c.port));
            }
            check(ApiKey::FindCoordinator, resp.error_code)?;
            Ok(format!("{}:{}", resp.host.as_str(), resp.port))
        })
        .await
    }

    /// Creates topics; ones that exist already are fine.
    pub async fn create_topics(&self, topics: &[NewTopic]) -> Result<()> {
        self.create_topics_with(topics, &[]).await
    }

    /// As [`Client::create_topics`], every topic with these extra configs (name, value).
    pub async fn create_topics_with(
        &self,
        topics: &[NewTopic],
        configs: &[(&str, &str)],
    ) -> Result<()> {
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        let mut c = CreatableTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                            .with_num_partitions(t.partitions)
                            .with_replication_factor(-1);
                        let mut all: Vec<(&str, &str)> = configs.to_vec();
                        if t.compacted {
                            all.push(("cleanup.policy", "compact"));
                        }
                        if !all.is_empty() {
                            c = c.with_configs(
                                all.iter()
                                    .map(|(k, v)| {
                                        CreatableTopicConfig::default()
                                            .with_name(StrBytes::from_string((*k).to_owned()))
                                            .with_value(Some(StrBytes::from_string(
                                                (*v).to_owned(),
                                            )))
                                    })
                                    .collect(),
                            );
                        }
                        c
                    })
                    .collect(),
            );
        let resp = self.retry(|| self.send_any(&req)).await?;
        for t in &resp.topics {
            match ResponseError::try_from_code(t.error_code) {
                None | Some(ResponseError::TopicAlreadyExists) => {}
                Some(error) => {
                    return Err(Error::Broker {
                        api: ApiKey::CreateTopics,
                        error,
                    })
                }
            }
        }
        Ok(())
    }

    /// Deletes `topics` (an operator's or a test's act: Baton never deletes a topic itself).
    /// A topic that does not exist is no error.
    pub async fn delete_topics(&self, topics: &[String]) -> Result<()> {
        use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
        let names: Vec<TopicName> = topics
            .iter()
            .map(|t| TopicName(StrBytes::from_string(t.clone())))
            .collect();
        // Versions before 6 read the names, later ones the states: both are set.
        let req = DeleteTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topic_names(names.clone())
            .with_topics(
                names
                    .into_iter()
                    .map(|n| DeleteTopicState::default().with_name(Some(n)))
                    .collect(),
            );
        let resp = self.retry(|| self.send_any(&req)).await?;
        for t in &resp.responses {
            match ResponseError::try_from_code(t.error_code) {
                None | Some(ResponseError::UnknownTopicOrPartition) => {}
                Some(error) => {
                    return Err(Error::Broker {
                        api: ApiKey::DeleteTopics,
                        error,
                    })
                }
            }
        }
        Ok(())
    }

    /// Latest (end) offsets of the given partitions.
    pub async fn end_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        self.list_offsets(partitions, -1).await
    }

    /// Earliest (log start) offsets of the given partitions: below them, records are gone.
    pub async fn start_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        self.list_offsets(partitions, -2).await
    }

    /// ListOffsets at `timestamp`: -1 for the end, -2 for the start.
    async fn list_offsets(
        &self,
        partitions: &[TopicPartition],
        timestamp: i64,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let mut topics: Vec<String> = partitions.iter().map(|tp| tp.topic.clone()).collect();
        topics.sort();
        topics.dedup();
        let meta = self.metadata(Some(&topics)).await?;
        let mut leaders: BTreeMap<TopicPartition, BrokerId> = BTreeMap::new();
        for t in &meta.topics {
            check(ApiKey::Metadata, t.error_code)?;
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            for p in &t.partitions {
                leaders.insert(TopicPartition::new(&name, p.partition_index), p.leader_id);
            }
        }
        let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
        for tp in partitions {
            let leader = leaders
                .get(tp)
                .ok_or_else(|| Error::Protocol(format!("partition {tp} is not in the metadata")))?;
            by_leader
                .entry(leader.0)
                .or_default()
                .entry(tp.topic.clone())
                .or_default()
                .push(tp.partition);
        }
        let mut out = BTreeMap::new();
        for (leader, topics) in by_leader {
            let addr = self.broker_addr(BrokerId(leader)).await?;
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(
                    topics
                        .iter()
                        .map(|(t, ps)| {
                            ListOffsetsTopic::default()
                                .with_name(TopicName(StrBytes::from_string(t.clone())))
                                .with_partitions(
                                    ps.iter()
                                        .map(|&p| {
                                            ListOffsetsPartition::default()
                                                .with_partition_index(p)
                                                .with_timestamp(timestamp)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let resp = self.retry(|| self.send_to(&addr, &req)).await?;
            for t in &resp.topics {
                for p in &t.partitions {
                    check(ApiKey::ListOffsets, p.error_code)?;
                    out.insert(
                        TopicPartition::new(t.name.0.as_str(), p.partition_index),
                        p.offset,
                    );
                }
            }
        }
        Ok(out)
    }

    /// Describes a group at its coordinator.
    pub async fn describe_group(&self, group: &str) -> Result<DescribedGroup> {
        let req = DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
        self.retry(|| async {
            let addr = self.find_coordinator(group).await?;
            let resp = self.send_to(&addr, &req).await?;
            let g = resp
                .groups
                .into_iter()
                .next()
                .ok_or_else(|| Error::Protocol("DescribeGroups answered no group".into()))?;
            check(ApiKey::DescribeGroups, g.error_code)?;
            Ok(g)
        })
        .await
    }
}
