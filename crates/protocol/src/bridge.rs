//! From decoded subscriptions to the assignor's input, and from its output to one
//! `AssignmentInfo` (plus the consumer's partitions) per member.
//!
//! A Kafka Streams process runs one consumer per stream thread; all of them subscribe with the
//! same process id. The assignor sees one client per process, with one unit of capacity per
//! consumer; its tasks are then dealt over that process's consumers.

use std::collections::{BTreeMap, BTreeSet};

use baton_assignor::{
    Assignment, AssignmentConfig, ClientId, ClientSpec, ClusterState, Lag, SourcePartition, TaskId,
    TaskSpec,
};
use uuid::Uuid;

use crate::{
    AssignmentInfo, HostInfo, HostPartitions, StandbyTask, SubscriptionInfo, TopicPartition,
    BATON_VERSION, TAG_LEAVING, TAG_LEAVING_SINCE, TAG_WARMUPS,
};

/// The topics of one subtopology. Its tasks are its partitions `0..partitions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subtopology {
    pub source_topics: Vec<String>,
    /// Empty for a stateless subtopology.
    pub changelog_topics: Vec<String>,
    pub partitions: u32,
}

/// What the leader knows of the application.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub subtopologies: BTreeMap<u32, Subtopology>,
}

impl Topology {
    /// The source partitions a task reads.
    pub fn source_partitions(&self, task: TaskId) -> Vec<TopicPartition> {
        self.partitions_of(task, |s| &s.source_topics)
    }

    /// The changelog partitions holding a task's state.
    pub fn changelog_partitions(&self, task: TaskId) -> Vec<TopicPartition> {
        self.partitions_of(task, |s| &s.changelog_topics)
    }

    /// A task's partition of each of the topics `pick` chooses from its subtopology.
    fn partitions_of(
        &self,
        task: TaskId,
        pick: impl Fn(&Subtopology) -> &Vec<String>,
    ) -> Vec<TopicPartition> {
        self.subtopologies
            .get(&task.subtopology)
            .map(|s| {
                pick(s)
                    .iter()
                    .map(|topic| TopicPartition {
                        topic: topic.clone(),
                        partition: task.partition as i32,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn task_of(&self, tp: &TopicPartition) -> Option<TaskId> {
        self.subtopologies.iter().find_map(|(&sub, s)| {
            (s.source_topics.contains(&tp.topic)
                && tp.partition >= 0
                && (tp.partition as u32) < s.partitions)
                .then(|| TaskId::new(sub, tp.partition as u32))
        })
    }
}

/// One group member: its consumer-protocol member id, decoded subscription and owned partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    pub subscription: SubscriptionInfo,
    pub owned_partitions: Vec<TopicPartition>,
    /// The consumer's `client.rack` (consumer subscription v3+): the client's rack or zone.
    pub rack: Option<String>,
}

/// Why the leader cannot build the assignor's input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    #[error("no end offset for changelog partition {0}")]
    MissingEndOffset(TopicPartition),
    #[error("member {0}: {1}")]
    BadMember(String, String),
}

/// The versions the leader answers with: the lowest used and the lowest supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    pub used: i32,
    pub commonly_supported: i32,
}

/// Kafka's negotiation: answer at the oldest version any member used, and tell everyone the
/// newest version all of them support, so they can upgrade.
pub fn negotiate(members: &[Member]) -> Versions {
    let used = members
        .iter()
        .map(|m| m.subscription.version.min(BATON_VERSION))
        .min()
        .unwrap_or(BATON_VERSION);
    let commonly_supported = members
        .iter()
        .map(|m| {
            let s = &m.subscription;
            // Before version 3 a member cannot say; it supports what it used.
            if s.latest_supported_version < 0 {
                s.version
            } else {
                s.latest_supported_version
            }
        })
        .min()
        .unwrap_or(BATON_VERSION)
        .min(BATON_VERSION);
    Versions {
        used,
        commonly_supported,
    }
}

/// The racks of each partition's replicas, as the broker's Metadata gives them.
pub type ReplicaRacks = BTreeMap<TopicPartition, BTreeSet<String>>;

/// Lists each task's source partitions with their replica racks, for
/// `rack.aware.assignment.strategy`. A partition the broker did not describe gets no racks
/// (the assignor then says why it cannot weigh racks).
pub fn add_replica_racks(state: &mut ClusterState, topology: &Topology, racks: &ReplicaRacks) {
    for task in &mut state.tasks {
        task.partitions = topology
            .source_partitions(task.id)
            .into_iter()
            .map(|tp| SourcePartition {
                racks: racks.get(&tp).cloned().unwrap_or_default(),
                partition: tp,
            })
            .collect();
    }
}

/// Builds the assignor's input. Members of a future version (only their header was
/// understood) take no tasks this round; they will rejoin at the negotiated version.
pub fn cluster_state(
    members: &[Member],
    topology: &Topology,
    end_offsets: &BTreeMap<TopicPartition, i64>,
    config: AssignmentConfig,
) -> Result<ClusterState, BridgeError> {
    cluster_state_at(members, topology, end_offsets, config, None)
}

/// As [`cluster_state`], at `now_ms` (epoch): a leaving member's `baton.leaving.since` tag then
/// says how long it has been leaving, for the scale-down timeout.
pub fn cluster_state_at(
    members: &[Member],
    topology: &Topology,
    end_offsets: &BTreeMap<TopicPartition, i64>,
    config: AssignmentConfig,
    now_ms: Option<i64>,
) -> Result<ClusterState, BridgeError> {
    let tasks = task_specs(topology, end_offsets)?;
    let ends: BTreeMap<TaskId, (bool, u64)> = tasks
        .iter()
        .map(|t| (t.id, (t.stateful, t.end_offset_sum)))
        .collect();

    let mut by_process: BTreeMap<Uuid, ClientSpec> = BTreeMap::new();
    for m in members
        .iter()
        .filter(|m| !m.subscription.is_future_version())
    {
        let s = &m.subscription;
        let client = by_process
            .entry(s.process_id)
            .or_insert_with(|| ClientSpec {
                id: ClientId(s.process_id.to_string()),
                capacity: 0,
                ..Default::default()
            });
        client.capacity += 1;
        if client.rack.is_none() {
            client.rack = m.rack.clone().filter(|r| !r.is_empty());
        }
        if client.tags.is_empty() {
            client.tags = s.user_tags();
        }
        if s.tag(TAG_LEAVING) == Some("true") {
            client.leaving = true;
            let since = s.tag(TAG_LEAVING_SINCE).and_then(|v| v.parse::<i64>().ok());
            if let (Some(since), Some(now)) = (since, now_ms) {
                // Another host's clock: a start "in the future" counts as now.
                let for_ms = now.saturating_sub(since).max(0) as u64;
                client.leaving_for_ms =
                    Some(client.leaving_for_ms.map_or(for_ms, |f| f.max(for_ms)));
            }
        }
        if let Some(list) = s.tag(TAG_WARMUPS) {
            for item in list.split(',').filter(|x| !x.is_empty()) {
                let task: TaskId = item.parse().map_err(|e| {
                    BridgeError::BadMember(m.member_id.clone(), format!("tag {TAG_WARMUPS}: {e}"))
                })?;
                if ends.get(&task).is_some_and(|&(stateful, _)| stateful) {
                    client.owned_warmup.insert(task);
                }
            }
        }
        for e in s.offset_sums() {
            let Some(&(stateful, end)) = ends.get(&e.task) else {
                continue; // a task of an older topology
            };
            if !stateful {
                continue;
            }
            let lag = Lag::from_offset_sum(e.offset_sum, end).map_err(|err| {
                BridgeError::BadMember(m.member_id.clone(), format!("task {}: {err}", e.task))
            })?;
            if lag == Lag::Running {
                client.owned_active.insert(e.task);
            }
            client.lags.insert(e.task, lag);
        }
        for tp in &m.owned_partitions {
            if let Some(task) = topology.task_of(tp) {
                client.owned_active.insert(task);
            }
        }
    }
    for c in by_process.values_mut() {
        // A task is held in one role: an active that was also being warmed up is an active.
        let actives = c.owned_active.clone();
        c.owned_warmup.retain(|t| !actives.contains(t));
    }
    Ok(ClusterState {
        config,
        tasks,
        clients: by_process.into_values().collect(),
    })
}

/// Every task of the topology, stateful or not, with the sum of its changelogs' ends.
fn task_specs(
    topology: &Topology,
    end_offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<Vec<TaskSpec>, BridgeError> {
    let mut tasks = Vec::new();
    for (&sub, s) in &topology.subtopologies {
        for p in 0..s.partitions {
            let task = TaskId::new(sub, p);
            let mut end: u64 = 0;
            for tp in topology.changelog_partitions(task) {
                let e = *end_offsets
                    .get(&tp)
                    .ok_or_else(|| BridgeError::MissingEndOffset(tp.clone()))?;
                end = end.saturating_add(e.max(0) as u64);
            }
            tasks.push(TaskSpec {
                id: task,
                stateful: !s.changelog_topics.is_empty(),
                end_offset_sum: end,
                partitions: Vec::new(),
            });
        }
    }
    Ok(tasks)
}

/// What one member is told: its partitions and its `AssignmentInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberAssignment {
    pub partitions: Vec<TopicPartition>,
    pub info: AssignmentInfo,
}

/// Deals each process's tasks over its consumers and writes one `AssignmentInfo` per member.
///
/// `probe_member` receives the next rebalance time (`now_ms + probe_after_ms`) when a follow-up
/// is due, as Kafka gives it to one consumer of the leader's process.
pub fn member_assignments(
    members: &[Member],
    topology: &Topology,
    assignment: &Assignment,
    probe_member: &str,
    now_ms: i64,
) -> BTreeMap<String, MemberAssignment> {
    let versions = negotiate(members);
    let mut consumers: BTreeMap<Uuid, Vec<&Member>> = BTreeMap::new();
    for m in members
        .iter()
        .filter(|m| !m.subscription.is_future_version())
    {
        consumers
            .entry(m.subscription.process_id)
            .or_default()
            .push(m);
    }
    for list in consumers.values_mut() {
        list.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    }

    let (by_host, standby_by_host) = host_maps(&consumers, topology, assignment, versions.used);

    let mut out = BTreeMap::new();
    for (pid, list) in &consumers {
        let empty = Default::default();
        let a = assignment
            .clients
            .get(&ClientId(pid.to_string()))
            .unwrap_or(&empty);
        let (actives, standbys, warmups) = deal(assignment, pid, a, list.len());
        for (k, m) in list.iter().enumerate() {
            let mut partitions: Vec<(TopicPartition, TaskId)> = actives[k]
                .iter()
                .flat_map(|&t| {
                    topology
                        .source_partitions(t)
                        .into_iter()
                        .map(move |tp| (tp, t))
                })
                .collect();
            partitions.sort();
            let mut info = AssignmentInfo::new(versions.used, versions.commonly_supported);
            info.active_tasks = partitions.iter().map(|(_, t)| *t).collect();
            info.standby_tasks = standbys[k]
                .iter()
                .map(|&task| StandbyTask {
                    task,
                    partitions: topology.source_partitions(task),
                })
                .collect();
            info.partitions_by_host = by_host.clone();
            info.standby_partitions_by_host = standby_by_host.clone();
            if versions.used >= 12 {
                info.warmup_tasks = warmups[k].clone();
            }
            if versions.used >= 7 && assignment.followup_rebalance && m.member_id == probe_member {
                let after = assignment.probe_after_ms.unwrap_or(0) as i64;
                info.next_rebalance_ms = now_ms.saturating_add(after);
            }
            out.insert(
                m.member_id.clone(),
                MemberAssignment {
                    partitions: partitions.into_iter().map(|(tp, _)| tp).collect(),
                    info,
                },
            );
        }
    }
    // Members of a future version get an empty assignment at the negotiated version.
    for m in members
        .iter()
        .filter(|m| m.subscription.is_future_version())
    {
        out.insert(
            m.member_id.clone(),
            MemberAssignment {
                partitions: Vec::new(),
                info: AssignmentInfo::new(versions.used, versions.commonly_supported),
            },
        );
    }
    out
}

/// The host maps every member receives: each process's actives, and its standbys and
/// warm-ups, by its endpoint (Kafka Streams' `partitionsByHost` from version 2,
/// `standbyPartitionsByHost` from 6).
fn host_maps(
    consumers: &BTreeMap<Uuid, Vec<&Member>>,
    topology: &Topology,
    assignment: &Assignment,
    version: i32,
) -> (Vec<HostPartitions>, Vec<HostPartitions>) {
    let mut by_host: BTreeMap<HostInfo, BTreeSet<TopicPartition>> = BTreeMap::new();
    let mut standby_by_host: BTreeMap<HostInfo, BTreeSet<TopicPartition>> = BTreeMap::new();
    for (pid, list) in consumers {
        let Some(host) = parse_endpoint(&list[0].subscription.user_endpoint) else {
            continue;
        };
        if let Some(a) = assignment.clients.get(&ClientId(pid.to_string())) {
            let e = by_host.entry(host.clone()).or_default();
            a.active
                .iter()
                .for_each(|&t| e.extend(topology.source_partitions(t)));
            let e = standby_by_host.entry(host).or_default();
            a.standby
                .iter()
                .chain(&a.warmup)
                .for_each(|&t| e.extend(topology.source_partitions(t)));
        }
    }
    let host_list = |m: &BTreeMap<HostInfo, BTreeSet<TopicPartition>>| -> Vec<HostPartitions> {
        m.iter()
            .filter(|(_, ps)| !ps.is_empty())
            .map(|(host, ps)| HostPartitions {
                host: host.clone(),
                partitions: ps.iter().cloned().collect(),
            })
            .collect()
    };
    let by_host = if version >= 2 {
        host_list(&by_host)
    } else {
        Vec::new()
    };
    let standby_by_host = if version >= 6 {
        host_list(&standby_by_host)
    } else {
        Vec::new()
    };
    (by_host, standby_by_host)
}

/// Tasks per consumer of a process, in the order its consumers' member ids sort.
type PerConsumer = Vec<Vec<TaskId>>;

/// One process's tasks dealt over its `n` consumers: actives round robin, then standbys
/// continuing where the actives stopped (so they even out the threads), the copies that
/// hand a task over last; each consumer's (actives, standbys, warm-ups).
fn deal(
    assignment: &Assignment,
    pid: &Uuid,
    a: &baton_assignor::ClientAssignment,
    n: usize,
) -> (PerConsumer, PerConsumer, PerConsumer) {
    let mut actives = vec![Vec::new(); n];
    let mut standbys = vec![Vec::new(); n];
    let mut warmups = vec![Vec::new(); n];
    for (i, &t) in a.active.iter().enumerate() {
        actives[i % n].push(t);
    }
    // Baton's warm-up list (v12) names every copy whose catching up hands a task over:
    // the budgeted warm-ups and the standbys that are a pending move's target.
    let (plain, catching_up) = catching_up(assignment, pid, a);
    let start = a.active.len();
    for (i, &t) in plain.iter().chain(&catching_up).enumerate() {
        let k = (start + i) % n;
        standbys[k].push(t);
        if i >= plain.len() {
            warmups[k].push(t);
        }
    }
    (actives, standbys, warmups)
}

/// `host:port` (the last colon splits, so IPv6 literals in brackets work).
fn parse_endpoint(s: &str) -> Option<HostInfo> {
    let (host, port) = s.rsplit_once(':')?;
    Some(HostInfo {
        host: host.to_owned(),
        port: port.parse().ok()?,
    })
}

/// A client's copies: its standbys that no pending move waits on, then (sorted) the copies
/// whose catching up hands a task over: its warm-ups and the standbys that are the target of a
/// pending move of an active or a standby.
fn catching_up(
    assignment: &Assignment,
    pid: &uuid::Uuid,
    a: &baton_assignor::ClientAssignment,
) -> (Vec<TaskId>, Vec<TaskId>) {
    let me = pid.to_string();
    let targets: BTreeSet<TaskId> = assignment
        .pending
        .iter()
        .chain(&assignment.standby_moves)
        .filter(|m| m.to.0 == me)
        .map(|m| m.task)
        .collect();
    let (targeted, plain): (Vec<TaskId>, Vec<TaskId>) =
        a.standby.iter().partition(|t| targets.contains(t));
    let mut catching_up: Vec<TaskId> = a.warmup.iter().copied().chain(targeted).collect();
    catching_up.sort();
    catching_up.dedup();
    (plain, catching_up)
}
