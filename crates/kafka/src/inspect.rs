//! What `baton inspect` shows: a live group's members, their decoded subscriptions and
//! assignments, and lags computed from the changelogs' current end offsets.

use std::collections::BTreeMap;
use std::sync::Arc;

use baton_assignor::{Lag, TaskId};
use baton_protocol::consumer::{ConsumerAssignment, ConsumerSubscription};
use baton_protocol::{AssignmentInfo, SubscriptionInfo, TopicPartition, TAG_LEAVING, TAG_WARMUPS};
use serde::Serialize;

use crate::client::Client;
use crate::error::Result;

/// One task a member reported state for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskState {
    pub task: TaskId,
    pub offset_sum: i64,
    /// Computed with Kafka's rules from the changelogs' end offsets; `None` without a changelog map.
    pub lag: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberView {
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    pub group_instance_id: Option<String>,
    /// Set when the metadata could not be decoded.
    pub error: Option<String>,
    pub process_id: Option<String>,
    pub subscription_version: Option<i32>,
    pub generation: Option<i32>,
    pub endpoint: Option<String>,
    pub leaving: bool,
    pub reported: Vec<TaskState>,
    pub active: Vec<TaskId>,
    pub standby: Vec<TaskId>,
    pub warmup: Vec<TaskId>,
    /// Epoch milliseconds of the next probing rebalance, if one is scheduled.
    pub next_rebalance_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupView {
    pub group: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    /// The newest generation members report owning partitions from (DescribeGroups has none).
    pub generation: Option<i32>,
    pub members: Vec<MemberView>,
}

/// Describes `group`. `changelogs` maps a subtopology to its changelog topics, for lags.
pub async fn inspect(
    client: &Arc<Client>,
    group: &str,
    changelogs: &BTreeMap<u32, Vec<String>>,
) -> Result<GroupView> {
    let g = client.describe_group(group).await?;
    let mut members = Vec::new();
    let mut wanted: Vec<TopicPartition> = Vec::new();
    for m in &g.members {
        let mut view = MemberView {
            member_id: m.member_id.to_string(),
            client_id: m.client_id.to_string(),
            client_host: m.client_host.to_string(),
            group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
            error: None,
            process_id: None,
            subscription_version: None,
            generation: None,
            endpoint: None,
            leaving: false,
            reported: Vec::new(),
            active: Vec::new(),
            standby: Vec::new(),
            warmup: Vec::new(),
            next_rebalance_ms: None,
        };
        match decode_member(&m.member_metadata, &m.member_assignment) {
            Ok((sub, generation, assignment)) => {
                view.process_id = Some(sub.process_id.to_string());
                view.subscription_version = Some(sub.version);
                view.generation = Some(generation);
                view.endpoint = Some(sub.user_endpoint.clone()).filter(|e| !e.is_empty());
                view.leaving = sub.tag(TAG_LEAVING) == Some("true");
                for e in sub.offset_sums() {
                    for topic in changelogs.get(&e.task.subtopology).into_iter().flatten() {
                        wanted.push(TopicPartition::new(topic, e.task.partition as i32));
                    }
                    view.reported.push(TaskState {
                        task: e.task,
                        offset_sum: e.offset_sum,
                        lag: None,
                    });
                }
                if let Some(a) = assignment {
                    let standby: Vec<TaskId> = a.standby_tasks.iter().map(|s| s.task).collect();
                    view.active = a.active_tasks.clone();
                    view.active.sort();
                    view.active.dedup();
                    view.warmup = a.warmup_tasks.clone();
                    view.standby = standby
                        .into_iter()
                        .filter(|t| !a.warmup_tasks.contains(t))
                        .collect();
                    view.next_rebalance_ms =
                        (a.next_rebalance_ms != i64::MAX).then_some(a.next_rebalance_ms);
                }
                if let Some(w) = sub.tag(TAG_WARMUPS) {
                    if view.warmup.is_empty() {
                        view.warmup = w.split(',').filter_map(|t| t.parse().ok()).collect();
                    }
                }
            }
            Err(e) => view.error = Some(e),
        }
        members.push(view);
    }
    wanted.sort();
    wanted.dedup();
    if !wanted.is_empty() {
        let ends = client.end_offsets(&wanted).await?;
        for m in &mut members {
            for r in &mut m.reported {
                let Some(topics) = changelogs.get(&r.task.subtopology) else {
                    continue;
                };
                let end: i64 = topics
                    .iter()
                    .map(|t| {
                        ends.get(&TopicPartition::new(t, r.task.partition as i32))
                            .copied()
                            .unwrap_or(0)
                            .max(0)
                    })
                    .sum();
                r.lag = Some(match Lag::from_offset_sum(r.offset_sum, end as u64) {
                    Ok(Lag::Running) => "running".into(),
                    Ok(Lag::Unknown) => "unknown".into(),
                    Ok(Lag::Behind(n)) => n.to_string(),
                    Err(e) => e.to_string(),
                });
            }
        }
    }
    let generation = members.iter().filter_map(|m| m.generation).max();
    Ok(GroupView {
        group: group.to_owned(),
        state: g.group_state.to_string(),
        protocol_type: g.protocol_type.to_string(),
        protocol: g.protocol_data.to_string(),
        generation,
        members,
    })
}

type Decoded = (SubscriptionInfo, i32, Option<AssignmentInfo>);

fn decode_member(metadata: &[u8], assignment: &[u8]) -> std::result::Result<Decoded, String> {
    if metadata.is_empty() {
        return Err("the broker returned no metadata for this member (see docs/BROKERS.md)".into());
    }
    let sub = ConsumerSubscription::decode(metadata).map_err(|e| e.to_string())?;
    let info = SubscriptionInfo::decode(sub.user_data.as_deref().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let assignment = if assignment.is_empty() {
        None
    } else {
        let a = ConsumerAssignment::decode(assignment).map_err(|e| e.to_string())?;
        match a.user_data {
            Some(d) => Some(AssignmentInfo::decode(&d).map_err(|e| e.to_string())?),
            None => None,
        }
    };
    Ok((info, sub.generation_id, assignment))
}
