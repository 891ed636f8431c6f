//! The group leader's work as one pure function: every member's JoinGroup metadata, the
//! changelog end offsets and the configuration in; every member's SyncGroup assignment bytes
//! and the warnings out. The group member only does the I/O around it, and the simulator and
//! the tests run the same code.
//!
//! Steps: decode each member (an undecodable or invalid one gets nothing, everyone else a full
//! assignment), drop ownership claimed from an older generation, negotiate the version, build
//! the assignor's input, assign, deal over each process's consumers, hold back actives whose
//! previous owner has not released them yet, fit under the group metadata limit, encode.

use std::collections::{BTreeMap, BTreeSet};

use baton_assignor::{AssignmentConfig, AssignorKind, Cluster, TaskId};
use uuid::Uuid;

use crate::bridge::{
    add_replica_racks, cluster_state_at, member_assignments, BridgeError, Member, MemberAssignment,
    ReplicaRacks, Topology,
};
use crate::codec::DecodeError;
use crate::consumer::{ConsumerAssignment, ConsumerSubscription};
use crate::sizing::fit_to_limit;
use crate::{AssignmentInfo, StandbyTask, SubscriptionInfo, TopicPartition, BATON_VERSION};

/// One member as JoinGroup returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    /// The consumer protocol subscription, with Streams' `SubscriptionInfo` as user data.
    pub metadata: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct LeaderInput<'a> {
    pub members: &'a [JoinedMember],
    pub topology: &'a Topology,
    /// Changelog end offsets; `None` when they could not be read: the leader then keeps actives
    /// where they are (the sticky assignor), as Kafka Streams does.
    pub end_offsets: Option<&'a BTreeMap<TopicPartition, i64>>,
    pub config: AssignmentConfig,
    pub assignor: AssignorKind,
    /// Receives the next probing rebalance time, when a follow-up is due.
    pub leader_member_id: &'a str,
    pub now_ms: i64,
    /// Subscriptions plus assignments must fit in this many bytes.
    pub metadata_limit: usize,
    /// The newest version the leader reads ([`BATON_VERSION`], or lower when it is pinned to an
    /// older one, as Kafka Streams 3.x speaks 11): a member subscribing above it is read by its
    /// header only, as one client without state, and answered at the leader's version, so it
    /// probes down and rejoins.
    pub latest_version: i32,
    /// The racks of the source partitions' replicas, from the broker's Metadata, when
    /// `rack.aware.assignment.strategy` asks for them.
    pub replica_racks: Option<&'a ReplicaRacks>,
}

/// What the leader sends: one blob per member (empty: nothing this round).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaderOutput {
    pub assignments: BTreeMap<String, Vec<u8>>,
    /// Members that got nothing, with the reason (`member id`, `field: problem`).
    pub rejected: Vec<(String, String)>,
    pub warnings: Vec<String>,
    /// Actives held back this round because another member still owns them.
    pub deferred: Vec<TaskId>,
    /// Moves the scale-down timeout forced this round (the new owner was not caught up).
    pub forced: Vec<TaskId>,
    /// Every warm-up's lag this round: `(client, task, records behind)`, for
    /// [`stalled_warmups`] across rounds.
    pub warmup_lags: Vec<(String, TaskId, u64)>,
}

/// A warm-up's lag as the leader last saw it: records behind, and when (epoch ms).
pub type WarmupSeen = BTreeMap<(String, TaskId), (u64, i64)>;

/// Warm-ups whose lag did not fall since the last round that saw them, with the rate they
/// fell behind at: their changelog grows faster than they restore, so they never catch up and
/// only the scale-down timeout ends the move. Returns the warnings and what to remember.
pub fn stalled_warmups(
    before: &WarmupSeen,
    now: &[(String, TaskId, u64)],
    now_ms: i64,
) -> (Vec<String>, WarmupSeen) {
    let mut warnings = Vec::new();
    let mut seen = WarmupSeen::new();
    for (client, task, lag) in now {
        let key = (client.clone(), *task);
        match before.get(&key) {
            Some(&(was, at)) if *lag >= was && now_ms > at => {
                let secs = (now_ms - at) as f64 / 1000.0;
                warnings.push(format!(
                    "warm-up of {task} on {client} is not catching up: {was} -> {lag} records \
                     behind over {secs:.0} s (its changelog grows faster than it restores); the \
                     move ends only by scale.down.timeout.ms if its owner is leaving"
                ));
                // Keep the older sample: the next warning measures from it.
                seen.insert(key, (was, at));
            }
            _ => {
                seen.insert(key, (*lag, now_ms));
            }
        }
    }
    (warnings, seen)
}

/// What a Baton member says of itself when it joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberReport<'a> {
    /// The subscription version to write (`used`): Baton's own, or lower after version
    /// probing against an older leader.
    pub version: i32,
    /// The newest version this member reads (`latestSupportedVersion`).
    pub latest_supported: i32,
    pub process_id: uuid::Uuid,
    /// `host:port` for interactive queries, or empty.
    pub user_endpoint: &'a str,
    pub offset_sums: &'a [crate::TaskOffsetSum],
    pub leaving: bool,
    /// When the drain began (epoch ms), sent with the leaving flag.
    pub leaving_since_ms: Option<i64>,
    pub warmups: &'a [TaskId],
    /// The source partitions of the actives it still holds.
    pub owned: &'a [TopicPartition],
    /// The generation those were owned in (-1 before the first).
    pub generation: i32,
    /// A field that changes on every rejoin, so each is a new generation (KAFKA-10455).
    pub unique: i8,
    /// `client.rack`: the standby placement keeps copies of a task on different racks.
    pub rack: Option<&'a str>,
    /// `client.tag.<key>` values (KIP-708), sent as subscription client tags (v11+).
    pub client_tags: &'a [crate::ClientTag],
}

/// A Baton member's JoinGroup metadata: the consumer protocol subscription to every source
/// topic of `topology`, with Streams' `SubscriptionInfo` (at `r.version`) inside.
pub fn encode_subscription(topology: &Topology, r: &MemberReport<'_>) -> Vec<u8> {
    let mut info = SubscriptionInfo::build(
        r.version,
        r.latest_supported,
        r.process_id,
        r.user_endpoint,
        r.offset_sums,
        r.unique,
        0,
    );
    // Client tags exist from version 11; below it (after version probing against an older
    // leader) the leaving flag and warm-up list cannot travel and are left out.
    if r.version >= 11 {
        info.client_tags.extend(r.client_tags.iter().cloned());
        if r.leaving {
            info.client_tags.push(crate::ClientTag {
                key: crate::TAG_LEAVING.into(),
                value: "true".into(),
            });
            if let Some(since) = r.leaving_since_ms {
                info.client_tags.push(crate::ClientTag {
                    key: crate::TAG_LEAVING_SINCE.into(),
                    value: since.to_string(),
                });
            }
        }
        if !r.warmups.is_empty() {
            let list: Vec<String> = r.warmups.iter().map(ToString::to_string).collect();
            info.client_tags.push(crate::ClientTag {
                key: crate::TAG_WARMUPS.into(),
                value: list.join(","),
            });
        }
    }
    let mut topics: Vec<String> = topology
        .subtopologies
        .values()
        .flat_map(|s| s.source_topics.iter().cloned())
        .collect();
    topics.sort();
    topics.dedup();
    ConsumerSubscription {
        topics,
        // A member's own fields are within every length limit but an endpoint longer than
        // 32 KiB; such a subscription is sent without Streams' part and gets nothing.
        user_data: info.encode().ok(),
        owned_partitions: r.owned.to_vec(),
        generation_id: r.generation,
        rack_id: r.rack.map(str::to_owned),
    }
    .encode()
    .unwrap_or_default()
}

/// Why a member's JoinGroup metadata was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("consumer protocol subscription: no user data")]
    NoUserData,
}

/// A member's JoinGroup metadata: the consumer protocol subscription and, inside it, Streams'.
pub fn decode_subscription(
    metadata: &[u8],
) -> Result<(ConsumerSubscription, SubscriptionInfo), MetadataError> {
    let sub = ConsumerSubscription::decode(metadata)?;
    let user_data = sub.user_data.as_deref().ok_or(MetadataError::NoUserData)?;
    let info = SubscriptionInfo::decode(user_data)?;
    Ok((sub, info))
}

/// A member's SyncGroup assignment blob.
pub fn encode_assignment(partitions: &[TopicPartition], info: &AssignmentInfo) -> Vec<u8> {
    ConsumerAssignment {
        partitions: partitions.to_vec(),
        // A member's assignment is built from valid parts; an unencodable one is sent empty.
        user_data: info.encode().ok(),
    }
    .encode()
    .unwrap_or_default()
}

/// A member's SyncGroup assignment; empty bytes mean "nothing this round".
pub fn decode_assignment(
    bytes: &[u8],
) -> Result<(Vec<TopicPartition>, AssignmentInfo), DecodeError> {
    if bytes.is_empty() {
        return Ok((
            Vec::new(),
            AssignmentInfo::new(BATON_VERSION, BATON_VERSION),
        ));
    }
    let a = ConsumerAssignment::decode(bytes)?;
    let info = match a.user_data {
        Some(d) => AssignmentInfo::decode(&d)?,
        None => AssignmentInfo::new(BATON_VERSION, BATON_VERSION),
    };
    Ok((a.partitions, info))
}

/// The leader's whole decision for one generation.
pub fn lead(input: &LeaderInput<'_>) -> LeaderOutput {
    let mut out = LeaderOutput::default();
    let mut members = read_members(input, &mut out);
    let zero_ends: BTreeMap<TopicPartition, i64>;
    let (ends, kind) = match input.end_offsets {
        Some(e) => (e, input.assignor),
        None => {
            out.warnings.push(
                "changelog end offsets unavailable: keeping actives in place (sticky assignor)"
                    .into(),
            );
            zero_ends = input
                .topology
                .subtopologies
                .keys()
                .flat_map(|&sub| {
                    let s = &input.topology.subtopologies[&sub];
                    (0..s.partitions)
                        .flat_map(move |p| input.topology.changelog_partitions(TaskId::new(sub, p)))
                })
                .map(|tp| (tp, 0))
                .collect();
            (&zero_ends, AssignorKind::Sticky)
        }
    };

    // One bad member must not stall the group: drop it and build the input again.
    let state = loop {
        match cluster_state_at(
            &members,
            input.topology,
            ends,
            input.config.clone(),
            Some(input.now_ms),
        ) {
            Ok(mut s) => {
                if let Some(racks) = input.replica_racks {
                    add_replica_racks(&mut s, input.topology, racks);
                }
                break s;
            }
            Err(BridgeError::BadMember(id, problem)) => {
                members.retain(|m| m.member_id != id);
                out.rejected.push((id, problem));
            }
            Err(e) => {
                out.warnings.push(format!(
                    "cannot build the assignor's input ({e}): every member gets nothing this round"
                ));
                return empty_for_all(input, out);
            }
        }
    };
    let cluster = match Cluster::new(state) {
        Ok(c) => c,
        Err(e) => {
            out.warnings.push(format!(
                "the assignor's input is invalid ({e}): every member gets nothing this round"
            ));
            return empty_for_all(input, out);
        }
    };
    let assignment = kind.assignor().assign(&cluster);
    out.warnings.extend(assignment.warnings.iter().cloned());
    out.forced = assignment.forced.iter().map(|m| m.task).collect();
    out.warmup_lags = warmup_lags(&cluster);
    let mut per_member = member_assignments(
        &members,
        input.topology,
        &assignment,
        input.leader_member_id,
        input.now_ms,
    );
    out.deferred = defer_unreleased(&members, input.topology, &mut per_member);
    if !out.deferred.is_empty() {
        // The hand-over needs one more round: everyone rejoins at once rather than at their
        // next heartbeat (up to `heartbeat.interval.ms` later), so the moving tasks wait only
        // for their owners to release them.
        for a in per_member.values_mut() {
            if a.info.version >= 7 {
                a.info.next_rebalance_ms = input.now_ms;
            }
        }
    }

    let subscription_bytes: usize = input.members.iter().map(|m| m.metadata.len()).sum();
    if let Some(w) = fit_to_limit(subscription_bytes, &mut per_member, input.metadata_limit) {
        out.warnings.push(w);
    }
    for m in input.members {
        let bytes = per_member
            .get(&m.member_id)
            .map(|a| encode_assignment(&a.partitions, &a.info))
            .unwrap_or_default();
        out.assignments.insert(m.member_id.clone(), bytes);
    }
    out
}

/// The members whose subscriptions read, each with the partitions it claims; a claim from
/// an older generation than the newest is dropped (a member fenced and replaced may send it:
/// Kafka's cooperative rule). The others are rejected in `out`.
fn read_members(input: &LeaderInput<'_>, out: &mut LeaderOutput) -> Vec<Member> {
    let mut members: Vec<Member> = Vec::new();
    let mut generations: BTreeMap<String, i32> = BTreeMap::new();
    for m in input.members {
        match decode_subscription(&m.metadata) {
            Ok((sub, subscription)) => {
                let subscription = if subscription.version > input.latest_version {
                    future_member(&subscription, input.latest_version)
                } else {
                    subscription
                };
                generations.insert(m.member_id.clone(), sub.generation_id);
                members.push(Member {
                    member_id: m.member_id.clone(),
                    subscription,
                    owned_partitions: sub.owned_partitions,
                    rack: sub.rack_id,
                });
            }
            Err(e) => out.rejected.push((m.member_id.clone(), e.to_string())),
        }
    }
    let newest = generations.values().copied().max().unwrap_or(-1);
    for m in &mut members {
        if generations.get(&m.member_id).copied().unwrap_or(-1) < newest {
            m.owned_partitions.clear();
        }
    }
    members
}

/// Each warm-up the cluster holds and how far behind it is: (client, task, records).
fn warmup_lags(cluster: &Cluster) -> Vec<(String, TaskId, u64)> {
    let mut lags = Vec::new();
    for c in cluster.client_ixs() {
        for &(t, role) in &cluster.views[c].owned {
            if role == baton_assignor::Role::Warmup {
                if let baton_assignor::Lag::Behind(n) = cluster.lag(c, t) {
                    lags.push((cluster.clients[c].id.0.clone(), cluster.tasks[t].id, n));
                }
            }
        }
    }
    lags
}

/// Kafka Streams' `FUTURE_ID`: every member the leader can read only the header of is one
/// client with no state.
const FUTURE_PROCESS: Uuid = Uuid::max();

/// A subscription newer than the leader reads, as Kafka Streams' leader takes it: one client
/// without state (so it restores before it runs anything stateful), answered at the leader's
/// version, which makes the member probe down and rejoin. Its owned partitions (consumer
/// protocol, readable) still hold back moves until it releases them.
fn future_member(s: &SubscriptionInfo, leader_latest: i32) -> SubscriptionInfo {
    let mut read = SubscriptionInfo::new(leader_latest, FUTURE_PROCESS);
    read.latest_supported_version = s.latest_supported_version;
    read
}

fn empty_for_all(input: &LeaderInput<'_>, mut out: LeaderOutput) -> LeaderOutput {
    for m in input.members {
        out.assignments.insert(m.member_id.clone(), Vec::new());
    }
    out
}

/// Cooperative hand-over on the classic protocol: an active whose source partitions another
/// member still owns is not given to its new owner yet (a stateful one becomes a standby there,
/// so its store keeps tailing). The owner sees it revoked, commits, closes it and rejoins at
/// once; the next round hands it over. Without this, the old owner's last batch could reach
/// the changelog after the new owner had restored it.
fn defer_unreleased(
    members: &[Member],
    topology: &Topology,
    per_member: &mut BTreeMap<String, MemberAssignment>,
) -> Vec<TaskId> {
    let mut owner: BTreeMap<&TopicPartition, &str> = BTreeMap::new();
    for m in members {
        for tp in &m.owned_partitions {
            owner.insert(tp, &m.member_id);
        }
    }
    let mut deferred = BTreeSet::new();
    for (id, a) in per_member.iter_mut() {
        let held_back: BTreeSet<TaskId> = a
            .info
            .active_tasks
            .iter()
            .copied()
            .filter(|&t| {
                topology
                    .source_partitions(t)
                    .iter()
                    .any(|tp| owner.get(tp).is_some_and(|o| *o != id.as_str()))
            })
            .collect();
        if held_back.is_empty() {
            continue;
        }
        let mut kept_partitions = Vec::new();
        let mut kept_tasks = Vec::new();
        for (tp, t) in a.partitions.iter().zip(&a.info.active_tasks) {
            if !held_back.contains(t) {
                kept_partitions.push(tp.clone());
                kept_tasks.push(*t);
            }
        }
        a.partitions = kept_partitions;
        a.info.active_tasks = kept_tasks;
        for &t in &held_back {
            let stateful = topology
                .subtopologies
                .get(&t.subtopology)
                .is_some_and(|s| !s.changelog_topics.is_empty());
            if stateful && !a.info.standby_tasks.iter().any(|s| s.task == t) {
                a.info.standby_tasks.push(StandbyTask {
                    task: t,
                    partitions: topology.source_partitions(t),
                });
            }
        }
        deferred.extend(held_back);
    }
    deferred.into_iter().collect()
}
