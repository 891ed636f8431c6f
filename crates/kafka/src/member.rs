//! A group member on the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), with
//! protocol type `consumer` and name `stream` as Kafka Streams uses. The member chosen leader
//! decodes every subscription, fetches changelog end offsets, runs the assignor and hands each
//! member its `AssignmentInfo`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use baton_assignor::{AssignmentConfig, AssignorKind, RackStrategy, TaskId};
use baton_protocol::bridge::Topology;
use baton_protocol::leader::{self, JoinedMember, LeaderInput};
use baton_protocol::{AssignmentInfo, TaskOffsetSum, TopicPartition, BATON_VERSION};

/// Kafka Streams' `EARLIEST_PROBEABLE_VERSION`: from version 3 an assignment says which version
/// the leader supports.
const EARLIEST_PROBEABLE_VERSION: i32 = 3;
use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::ResponseError;

use crate::client::Client;
use crate::connection::Connection;
use crate::error::{check, Error, Result};
use baton_core::backoff::{Backoff, Retrying};

/// Kafka Streams' protocol type and name.
pub const PROTOCOL_TYPE: &str = "consumer";
pub const PROTOCOL_NAME: &str = "stream";
/// How many join rounds before giving up.
const MAX_JOIN_ROUNDS: u32 = 50;
/// Between failed JoinGroup requests (the coordinator moving or loading).
const JOIN_RETRY: Backoff = Backoff {
    first: Duration::from_millis(100),
    max: Duration::from_millis(800),
    attempts: MAX_JOIN_ROUNDS,
};

/// How one JoinGroup went.
enum Joined {
    /// The answer, and the subscription sent with it.
    Answer(Box<kafka_protocol::messages::JoinGroupResponse>, Bytes),
    /// The coordinator named what to change (a member id to take or to forget): again now.
    Again,
    /// A retriable failure: again after a pause.
    Failed,
}

#[derive(Debug, Clone)]
pub struct MemberConfig {
    pub group_id: String,
    pub client_id: String,
    /// Static membership (`group.instance.id`).
    pub group_instance_id: Option<String>,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub process_id: uuid::Uuid,
    /// `host:port` for interactive queries, or empty.
    pub user_endpoint: String,
    pub topology: Topology,
    pub assignor: AssignorKind,
    pub assignment_config: AssignmentConfig,
    /// The group's metadata (all subscriptions and assignments) must fit in this many bytes:
    /// the broker's `message.max.bytes` for `__consumer_offsets`.
    pub metadata_limit: usize,
    /// `client.rack`, sent in the consumer subscription (v3+).
    pub rack: Option<String>,
    /// `client.tag.<key>` values, sent as subscription client tags (v11+).
    pub client_tags: Vec<baton_protocol::ClientTag>,
}

/// What one rebalance gave this member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub generation: i32,
    pub member_id: String,
    pub leader: bool,
    pub partitions: Vec<TopicPartition>,
    pub info: AssignmentInfo,
    /// The leader answered at another version than this member subscribed with: it has
    /// switched its subscription version and must rejoin (Kafka Streams' version probing).
    pub version_probing: bool,
    /// The subscription this member sent and the assignment it received, as bytes: what
    /// DescribeGroups would show (for [`crate::inspect::publish_member`]).
    pub metadata: Bytes,
    pub assignment: Bytes,
    /// When the SyncGroup that got this answer was sent: the coordinator's session for this
    /// member runs from no earlier than that.
    pub synced_at: std::time::Instant,
}

pub struct GroupMember {
    client: Arc<Client>,
    cfg: MemberConfig,
    member_id: String,
    generation: i32,
    owned: Vec<TopicPartition>,
    unique: i8,
    offset_sums: Vec<TaskOffsetSum>,
    leaving: bool,
    /// When this member started leaving (epoch ms); sent with the flag.
    leaving_since_ms: Option<i64>,
    warmups: Vec<TaskId>,
    /// The subscription version written (`used`), and the newest this member reads.
    used_version: i32,
    latest_version: i32,
    current: Option<Membership>,
    /// A connection of our own to the coordinator: a JoinGroup the broker holds must not
    /// block other members' requests on a shared connection.
    coordinator: Option<Connection>,
    /// Warm-up lags seen at earlier rounds this member led, to tell which do not catch up.
    warmups_seen: std::sync::Mutex<leader::WarmupSeen>,
}

impl GroupMember {
    pub fn new(client: Arc<Client>, cfg: MemberConfig) -> Self {
        Self {
            client,
            cfg,
            member_id: String::new(),
            generation: -1,
            owned: Vec::new(),
            unique: 0,
            offset_sums: Vec::new(),
            leaving: false,
            leaving_since_ms: None,
            warmups: Vec::new(),
            used_version: BATON_VERSION,
            latest_version: BATON_VERSION,
            current: None,
            coordinator: None,
            warmups_seen: Default::default(),
        }
    }

    async fn coordinator(&mut self) -> Result<&mut Connection> {
        if self.coordinator.is_none() {
            let addr = self.client.find_coordinator(&self.cfg.group_id).await?;
            let mut conn = Connection::connect(&addr, &self.cfg.client_id).await?;
            // The coordinator holds a JoinGroup until every member has joined, for up to the
            // rebalance timeout.
            conn.set_timeout(
                Duration::from_millis(self.cfg.rebalance_timeout_ms.max(0) as u64)
                    + Duration::from_secs(5),
            );
            self.coordinator = Some(conn);
        }
        Ok(self.coordinator.as_mut().expect("just connected"))
    }

    /// Sends to the coordinator; a failed connection is dropped so the next call finds it anew.
    async fn send<R: Request>(&mut self, req: &R) -> Result<R::Response> {
        let conn = self.coordinator().await?;
        let result = conn.send(req).await;
        let broken = conn.is_broken();
        if broken
            || result.as_ref().err().is_some_and(|e| {
                e.is_retriable() || matches!(e.broker_error(), Some(ResponseError::NotCoordinator))
            })
        {
            self.coordinator = None;
        }
        result
    }

    async fn version<R: Request>(&mut self) -> Result<i16> {
        self.coordinator().await?.version_for::<R>()
    }

    pub fn membership(&self) -> Option<&Membership> {
        self.current.as_ref()
    }

    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The offset sums the next subscription reports.
    pub fn set_offset_sums(&mut self, sums: Vec<TaskOffsetSum>) {
        self.offset_sums = sums;
    }

    /// Marks this member as leaving (drain); reported in the next subscription.
    pub fn set_leaving(&mut self, leaving: bool) {
        if leaving && !self.leaving {
            self.leaving_since_ms = Some(crate::member::epoch_ms());
        } else if !leaving {
            self.leaving_since_ms = None;
        }
        self.leaving = leaving;
    }

    /// The warm-ups this member runs; reported in the next subscription.
    pub fn set_warmups(&mut self, warmups: Vec<TaskId>) {
        self.warmups = warmups;
    }

    /// The partitions this member still owns (its running actives), reported in the next
    /// subscription so the leader holds them back from anyone else until they are released.
    pub fn set_owned(&mut self, owned: Vec<TopicPartition>) {
        self.owned = owned;
    }

    fn subscription(&mut self) -> Bytes {
        self.unique = self.unique.wrapping_add(1);
        Bytes::from(leader::encode_subscription(
            &self.cfg.topology,
            &leader::MemberReport {
                version: self.used_version,
                latest_supported: self.latest_version,
                process_id: self.cfg.process_id,
                user_endpoint: &self.cfg.user_endpoint,
                offset_sums: &self.offset_sums,
                leaving: self.leaving,
                leaving_since_ms: self.leaving_since_ms,
                warmups: &self.warmups,
                owned: &self.owned,
                generation: self.generation,
                unique: self.unique,
                rack: self.cfg.rack.as_deref(),
                client_tags: &self.cfg.client_tags,
            },
        ))
    }

    /// Joins (or rejoins) the group and waits for this member's assignment.
    pub async fn join(&mut self) -> Result<&Membership> {
        let group = GroupId(StrBytes::from_string(self.cfg.group_id.clone()));
        let mut retrying = Retrying::default();
        // Rounds the coordinator sends back at once (a member id to take, a rebalance under
        // way) count too: a group that never settles ends here rather than looping.
        for _ in 0..MAX_JOIN_ROUNDS {
            match self.join_once(&group).await? {
                Joined::Answer(resp, metadata) => {
                    if self.sync_once(&group, &resp, metadata).await? {
                        return Ok(self.current.as_ref().expect("just set"));
                    }
                }
                // The coordinator named what to change: at once.
                Joined::Again => {}
                Joined::Failed => match retrying.failed(&JOIN_RETRY) {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => break,
                },
            }
        }
        Err(Error::Protocol(format!(
            "could not join group {} in {MAX_JOIN_ROUNDS} rounds ({} failed)",
            self.cfg.group_id,
            retrying.failures()
        )))
    }

    /// One JoinGroup: the answer and the subscription sent, or what to do next.
    async fn join_once(&mut self, group: &GroupId) -> Result<Joined> {
        let join_version = match self.version::<JoinGroupRequest>().await {
            Ok(v) => v,
            Err(e) if e.is_retriable() => {
                self.coordinator = None;
                return Ok(Joined::Failed);
            }
            Err(e) => return Err(e),
        };
        let metadata = self.subscription();
        let req = JoinGroupRequest::default()
            .with_group_id(group.clone())
            .with_session_timeout_ms(self.cfg.session_timeout_ms)
            .with_rebalance_timeout_ms(self.cfg.rebalance_timeout_ms)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_group_instance_id(static_id(&self.cfg, join_version, 5))
            .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str(PROTOCOL_NAME))
                .with_metadata(metadata.clone())]);
        let resp = match self.send(&req).await {
            Ok(r) => r,
            Err(e) if e.is_retriable() => return Ok(Joined::Failed),
            Err(e) => return Err(e),
        };
        match ResponseError::try_from_code(resp.error_code) {
            None => Ok(Joined::Answer(Box::new(resp), metadata)),
            Some(ResponseError::MemberIdRequired) => {
                self.member_id = resp.member_id.to_string();
                Ok(Joined::Again)
            }
            Some(ResponseError::UnknownMemberId) => {
                self.member_id.clear();
                Ok(Joined::Again)
            }
            Some(e)
                if Error::Broker {
                    api: ApiKey::JoinGroup,
                    error: e,
                }
                .is_retriable() =>
            {
                Ok(Joined::Failed)
            }
            Some(error) => Err(Error::Broker {
                api: ApiKey::JoinGroup,
                error,
            }),
        }
    }

    /// The SyncGroup after a join (the leader's assignments with it): `true` once the member
    /// holds its assignment, `false` to join again.
    async fn sync_once(
        &mut self,
        group: &GroupId,
        resp: &kafka_protocol::messages::JoinGroupResponse,
        metadata: Bytes,
    ) -> Result<bool> {
        self.member_id = resp.member_id.to_string();
        self.generation = resp.generation_id;
        let leader = resp.leader.as_str() == self.member_id;
        let assignments = if leader {
            self.lead(&resp.members).await
        } else {
            Vec::new()
        };
        let sync_version = self.version::<SyncGroupRequest>().await?;
        let mut sync = SyncGroupRequest::default()
            .with_group_id(group.clone())
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_group_instance_id(static_id(&self.cfg, sync_version, 3))
            .with_assignments(assignments);
        if sync_version >= 5 {
            sync = sync
                .with_protocol_type(Some(StrBytes::from_static_str(PROTOCOL_TYPE)))
                .with_protocol_name(Some(StrBytes::from_static_str(PROTOCOL_NAME)));
        }
        let synced_at = std::time::Instant::now();
        let resp = match self.send(&sync).await {
            Ok(r) => r,
            Err(e) if e.is_retriable() => return Ok(false),
            Err(e) => return Err(e),
        };
        match ResponseError::try_from_code(resp.error_code) {
            None => {}
            Some(ResponseError::UnknownMemberId) => {
                self.member_id.clear();
                return Ok(false);
            }
            Some(ResponseError::RebalanceInProgress | ResponseError::IllegalGeneration) => {
                return Ok(false)
            }
            Some(error) => {
                return Err(Error::Broker {
                    api: ApiKey::SyncGroup,
                    error,
                })
            }
        }
        let (partitions, info) = decode_assignment(&resp.assignment)?;
        let version_probing = self.probe_versions(&info);
        self.owned = partitions.clone();
        self.current = Some(Membership {
            generation: self.generation,
            member_id: self.member_id.clone(),
            leader,
            partitions,
            info,
            version_probing,
            metadata,
            assignment: resp.assignment.clone(),
            synced_at,
        });
        Ok(true)
    }

    /// Kafka Streams' version probing, from the member's side: an assignment at a lower
    /// version than ours means the leader cannot read our subscription (an older Kafka
    /// Streams leads): subscribe at its version from now on. A leader that supports a newer
    /// version than we used (the old members are gone): go back up. Either way, rejoin.
    fn probe_versions(&mut self, info: &AssignmentInfo) -> bool {
        let received = info.version;
        let leader_latest = info.commonly_supported_version;
        let before = self.used_version;
        if received < self.used_version && received >= EARLIEST_PROBEABLE_VERSION {
            self.used_version = received;
        } else if leader_latest > self.used_version {
            self.used_version = leader_latest.min(self.latest_version);
        }
        if self.used_version != before {
            tracing::info!(
                group = %self.cfg.group_id,
                from = before,
                to = self.used_version,
                assignment_version = received,
                leader_supports = leader_latest,
                "version probing: subscribing at another version and rejoining"
            );
        }
        self.used_version != before
    }

    /// Subscribes at most at `version` (as an older Kafka Streams member would): for tests
    /// of mixed-version groups.
    pub fn limit_version(&mut self, version: i32) {
        self.latest_version = version.min(BATON_VERSION);
        self.used_version = self.used_version.min(self.latest_version);
    }

    /// The subscription version this member writes.
    pub fn used_version(&self) -> i32 {
        self.used_version
    }

    /// Heartbeats on the member's own coordinator connection.
    pub async fn heartbeat(&mut self) -> Result<Beat> {
        let beat = self.pulse().beat().await;
        if let Ok(Beat::Fenced) = beat {
            self.member_id.clear();
        }
        beat
    }

    /// What a heartbeat needs, detached from the member: it can beat while the member's own
    /// connection is held by a JoinGroup (Kafka's coordinator refreshes the session of a member
    /// that heartbeats during a rebalance).
    pub fn pulse(&self) -> Pulse {
        Pulse {
            client: self.client.clone(),
            group: self.cfg.group_id.clone(),
            generation: self.generation,
            member_id: self.member_id.clone(),
            group_instance_id: self.cfg.group_instance_id.clone(),
            coordinator: self.coordinator.as_ref().map(|c| c.addr().to_owned()),
        }
    }

    /// Leaves the group so the others rebalance at once instead of after a session timeout.
    pub async fn leave(&mut self) -> Result<()> {
        if self.member_id.is_empty() {
            return Ok(());
        }
        let version = self.version::<LeaveGroupRequest>().await?;
        let group = GroupId(StrBytes::from_string(self.cfg.group_id.clone()));
        let member = StrBytes::from_string(self.member_id.clone());
        // v3 leaves by a list of members (with static ids); earlier versions by one member id.
        let req = if version >= 3 {
            LeaveGroupRequest::default()
                .with_group_id(group)
                .with_members(vec![MemberIdentity::default()
                    .with_member_id(member)
                    .with_group_instance_id(
                        self.cfg
                            .group_instance_id
                            .clone()
                            .map(StrBytes::from_string),
                    )])
        } else {
            LeaveGroupRequest::default()
                .with_group_id(group)
                .with_member_id(member)
        };
        let resp = self.send(&req).await?;
        check(ApiKey::LeaveGroup, resp.error_code)?;
        self.member_id.clear();
        self.current = None;
        Ok(())
    }

    /// The leader's work: the changelog end offsets (the only I/O), then the pure
    /// [`leader::lead`] for every member's assignment.
    async fn lead(&self, joined: &[JoinGroupResponseMember]) -> Vec<SyncGroupRequestAssignment> {
        let topology = &self.cfg.topology;
        let changelogs: Vec<TopicPartition> = topology
            .subtopologies
            .iter()
            .flat_map(|(&sub, s)| {
                (0..s.partitions)
                    .flat_map(move |p| topology.changelog_partitions(TaskId::new(sub, p)))
            })
            .collect();
        let ends = match self.client.end_offsets(&changelogs).await {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::warn!(error = %e, "reading changelog end offsets");
                None
            }
        };
        let racks = if self.cfg.assignment_config.rack_aware_strategy != RackStrategy::None {
            let sources: BTreeSet<String> = topology
                .subtopologies
                .values()
                .flat_map(|s| s.source_topics.iter().cloned())
                .collect();
            let sources: Vec<String> = sources.into_iter().collect();
            match self.client.replica_racks(&sources).await {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the source partitions' replica racks");
                    None
                }
            }
        } else {
            None
        };
        let members: Vec<JoinedMember> = joined
            .iter()
            .map(|m| JoinedMember {
                member_id: m.member_id.to_string(),
                metadata: m.metadata.to_vec(),
            })
            .collect();
        let now_ms = epoch_ms();
        let out = leader::lead(&LeaderInput {
            members: &members,
            topology,
            end_offsets: ends.as_ref(),
            config: self.cfg.assignment_config.clone(),
            assignor: self.cfg.assignor,
            leader_member_id: &self.member_id,
            now_ms,
            metadata_limit: self.cfg.metadata_limit,
            latest_version: self.latest_version,
            replica_racks: racks.as_ref(),
        });
        for (member, problem) in &out.rejected {
            tracing::error!(member = %member, problem = %problem, "member gets nothing this round: its subscription is invalid");
        }
        for w in &out.warnings {
            tracing::warn!(warning = %w, "assignor");
        }
        {
            let mut seen = self.warmups_seen.lock().unwrap_or_else(|e| e.into_inner());
            let (stalled, now) = leader::stalled_warmups(&seen, &out.warmup_lags, now_ms);
            for w in stalled {
                tracing::warn!(warning = %w, "warm-up");
            }
            *seen = now;
        }
        if !out.deferred.is_empty() {
            let tasks: Vec<String> = out.deferred.iter().map(ToString::to_string).collect();
            tracing::info!(tasks = %tasks.join(","), "actives held back until their owners release them");
        }
        out.assignments
            .into_iter()
            .map(|(id, bytes)| {
                SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(id))
                    .with_assignment(Bytes::from(bytes))
            })
            .collect()
    }
}

/// A heartbeat's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// The member is in the current generation.
    Alive,
    /// A rebalance is under way (the session was refreshed): rejoin.
    Rebalancing,
    /// The coordinator does not know this member or its generation: its tasks may be elsewhere.
    Fenced,
}

/// A heartbeat for one member in one generation, sent on the client's shared connection.
#[derive(Clone)]
pub struct Pulse {
    client: Arc<Client>,
    group: String,
    generation: i32,
    member_id: String,
    group_instance_id: Option<String>,
    coordinator: Option<String>,
}

impl Pulse {
    pub async fn beat(&self) -> Result<Beat> {
        if self.member_id.is_empty() {
            return Ok(Beat::Fenced);
        }
        let addr = match &self.coordinator {
            Some(a) => a.clone(),
            None => self.client.find_coordinator(&self.group).await?,
        };
        let version = self.client.version::<HeartbeatRequest>(&addr).await?;
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_group_instance_id(if version >= 3 {
                self.group_instance_id.clone().map(StrBytes::from_string)
            } else {
                None
            });
        let resp = self.client.send_to(&addr, &req).await?;
        match ResponseError::try_from_code(resp.error_code) {
            None => Ok(Beat::Alive),
            Some(ResponseError::RebalanceInProgress) => Ok(Beat::Rebalancing),
            Some(
                ResponseError::IllegalGeneration
                | ResponseError::UnknownMemberId
                | ResponseError::FencedInstanceId,
            ) => Ok(Beat::Fenced),
            Some(error) => Err(Error::Broker {
                api: ApiKey::Heartbeat,
                error,
            }),
        }
    }
}

/// `group.instance.id` where the request version carries it (`since`), else none.
fn static_id(cfg: &MemberConfig, version: i16, since: i16) -> Option<StrBytes> {
    if version >= since {
        cfg.group_instance_id.clone().map(StrBytes::from_string)
    } else {
        None
    }
}

/// A member's SyncGroup assignment; empty bytes mean "nothing this round".
pub fn decode_assignment(bytes: &[u8]) -> Result<(Vec<TopicPartition>, AssignmentInfo)> {
    leader::decode_assignment(bytes).map_err(|e| Error::Protocol(e.to_string()))
}

/// Milliseconds since the Unix epoch, by this host's clock.
pub fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_round_trip_through_the_consumer_envelope() {
        let mut info =
            AssignmentInfo::new(baton_protocol::BATON_VERSION, baton_protocol::BATON_VERSION);
        info.active_tasks = vec![TaskId::new(0, 1)];
        let partitions = vec![TopicPartition {
            topic: "input".into(),
            partition: 1,
        }];
        let bytes = leader::encode_assignment(&partitions, &info);
        assert_eq!(decode_assignment(&bytes).unwrap(), (partitions, info));
        assert!(
            decode_assignment(&[]).unwrap().0.is_empty(),
            "no assignment this round"
        );
        assert!(
            decode_assignment(b"\x00\x03\x7f\xff\xff\xff").is_err(),
            "garbage is an error, not an allocation"
        );
        assert!(leader::decode_subscription(b"\x00\x03garbage!!").is_err());
    }
}
