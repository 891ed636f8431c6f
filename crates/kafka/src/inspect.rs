//! What `baton inspect` shows: a live group's members, their decoded subscriptions and
//! assignments, and lags computed from the changelogs' current end offsets.
//!
//! Some brokers (nisshi 0.8.1) answer DescribeGroups without member metadata or assignments.
//! Baton members therefore also publish their own (the subscription bytes they sent and the
//! assignment bytes they received) to a reports topic after every join ([`publish_member`]),
//! and `inspect` reads those back for members whose metadata came back empty. Same bytes,
//! same decoder: the view does not depend on which source it came from.

use std::collections::BTreeMap;
use std::sync::Arc;

use baton_assignor::{Lag, TaskId};
use baton_protocol::consumer::{ConsumerAssignment, ConsumerSubscription};
use baton_protocol::{AssignmentInfo, SubscriptionInfo, TopicPartition, TAG_LEAVING, TAG_WARMUPS};
use serde::Serialize;

use crate::client::Client;
use crate::error::Result;
use crate::records::KeyValue;

/// Reports are keyed `member:<member id>`; the latest per key wins.
const REPORT_KEY_PREFIX: &str = "member:";
/// How far back in the reports topic `inspect` reads.
const REPORTS_READ: i64 = 5_000;

/// One task a member reported state for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskState {
    pub task: TaskId,
    pub offset_sum: i64,
    /// Computed with Kafka's rules from the changelogs' end offsets; `None` without a changelog map.
    pub lag: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemberView {
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    pub group_instance_id: Option<String>,
    /// The Baton instance (`--instance-id`) this member is a thread of, when known: from its
    /// client id or `group.instance.id` (`<instance>-<thread>`), or its own report.
    pub instance: Option<String>,
    /// Set when the metadata could not be decoded.
    pub error: Option<String>,
    /// Where the metadata came from: `broker` (DescribeGroups) or `report` (the member's own,
    /// from the reports topic, when the broker returned none).
    pub source: String,
    pub process_id: Option<String>,
    pub subscription_version: Option<i32>,
    pub generation: Option<i32>,
    pub endpoint: Option<String>,
    /// `client.rack` from the consumer subscription.
    pub rack: Option<String>,
    /// `client.tag.<key>` values, Baton's own flags left out.
    pub client_tags: BTreeMap<String, String>,
    pub leaving: bool,
    pub reported: Vec<TaskState>,
    pub active: Vec<TaskId>,
    pub standby: Vec<TaskId>,
    pub warmup: Vec<TaskId>,
    /// Epoch milliseconds of the next probing rebalance, if one is scheduled.
    pub next_rebalance_ms: Option<i64>,
}

/// A copy catching up, as its instance reports it to the control topic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CopyProgress {
    pub task: TaskId,
    pub role: String,
    pub lag: u64,
    /// Records per second the lag falls by (negative: it grows); `None` until measured.
    pub rate: Option<f64>,
}

/// The key prefix of progress records in the control topic (`progress:<instance>`).
pub const PROGRESS_KEY_PREFIX: &str = "progress:";

/// One line per copy: `task role lag rate` (`-` for a rate not measured yet).
pub fn encode_progress(copies: &[CopyProgress]) -> Vec<u8> {
    let mut out = String::new();
    for c in copies {
        let rate = c.rate.map_or("-".to_owned(), |r| format!("{r:.1}"));
        out.push_str(&format!("{} {} {} {rate}\n", c.task, c.role, c.lag));
    }
    out.into_bytes()
}

/// The copies of a progress record; `None` for a value that is not one.
fn parse_progress(v: &[u8]) -> Option<Vec<CopyProgress>> {
    let text = std::str::from_utf8(v).ok()?;
    text.lines()
        .map(|line| {
            let mut f = line.split(' ');
            let task = f.next()?.parse().ok()?;
            let role = f.next()?.to_owned();
            let lag = f.next()?.parse().ok()?;
            let rate = match f.next()? {
                "-" => None,
                r => Some(r.parse::<f64>().ok().filter(|r| r.is_finite())?),
            };
            f.next().is_none().then_some(CopyProgress {
                task,
                role,
                lag,
                rate,
            })
        })
        .collect()
}

/// A task moving to a member that warms it up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingView {
    pub task: TaskId,
    /// The instance (or process) running it now, if any member does.
    pub from: Option<String>,
    pub to: String,
    /// From the destination's latest progress report, if it published one.
    pub lag: Option<u64>,
    pub rate: Option<f64>,
    /// Seconds until caught up at that rate; `None` when unknown or when it does not catch up.
    pub eta_s: Option<f64>,
    /// `Some(false)`: the warm-up falls behind (its changelog grows faster than it restores);
    /// it ends only by the scale-down timeout.
    pub catching_up: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupView {
    pub group: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    /// The group's generation: the newest a member's own report says it was assigned in, or
    /// the round after the newest generation a member's join claimed partitions from
    /// (DescribeGroups gives none).
    pub generation: Option<i32>,
    pub members: Vec<MemberView>,
    /// Every warm-up under way, with its progress.
    pub pending: Vec<PendingView>,
    /// Seconds until the warm-ups under way have all caught up, when every one of them has a
    /// finite estimate (more moves may wait for warm-up slots).
    pub balanced_in_s: Option<f64>,
    /// Tasks stopped by what they cannot process, as their instances (members now) report
    /// them; they hold their partitions until retried, moved or restarted.
    pub failed: Vec<FailedTask>,
}

/// A task that stopped on its instance (a record or batch it cannot process, a panic).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedTask {
    pub task: TaskId,
    pub role: String,
    pub instance: String,
}

/// The key prefix of failed-task records in the control topic (`failed:<instance>`).
pub const FAILED_KEY_PREFIX: &str = "failed:";

/// One line per failed task: `task role`. An instance with none left writes an empty value.
pub fn encode_failed(tasks: &[(TaskId, String)]) -> Vec<u8> {
    let mut out = String::new();
    for (task, role) in tasks {
        out.push_str(&format!("{task} {role}\n"));
    }
    out.into_bytes()
}

/// The tasks of a failed-task record; `None` for a value that is not one.
fn parse_failed(v: &[u8]) -> Option<Vec<(TaskId, String)>> {
    let text = std::str::from_utf8(v).ok()?;
    text.lines()
        .map(|line| {
            let (task, role) = line.split_once(' ')?;
            Some((task.parse().ok()?, role.to_owned()))
        })
        .collect()
}

/// Describes `group`. `changelogs` maps a subtopology to its changelog topics, for lags;
/// `reports` names the topic members publish their own metadata to, read for members the
/// broker returns none for.
pub async fn inspect(
    client: &Arc<Client>,
    group: &str,
    changelogs: &BTreeMap<u32, Vec<String>>,
    reports: Option<&str>,
) -> Result<GroupView> {
    let g = client.describe_group(group).await?;
    let ControlRecords {
        reports: reported,
        progress,
        failed,
    } = match reports {
        Some(topic) => read_reports(client, topic).await?,
        None => ControlRecords::default(),
    };
    let mut members = Vec::new();
    let mut wanted: Vec<TopicPartition> = Vec::new();
    for m in &g.members {
        let view = member_view(m, &reported, changelogs, &mut wanted);
        members.push(view);
    }
    wanted.sort();
    wanted.dedup();
    if !wanted.is_empty() {
        let ends = client.end_offsets(&wanted).await?;
        fill_lags(&mut members, changelogs, &ends);
    }
    let generation = members.iter().filter_map(|m| m.generation).max();
    // Reports come from Baton members, which join with Kafka Streams' protocol: where the
    // broker leaves the group's protocol out, it is that one.
    let from_reports = members.iter().any(|m| m.source == "report");
    let or_reported = |broker: String, reported: &str| {
        if broker.is_empty() && from_reports {
            reported.to_owned()
        } else {
            broker
        }
    };
    let pending = pending_moves(&members, &progress);
    let balanced_in_s = (!pending.is_empty())
        .then(|| {
            pending
                .iter()
                .map(|p| p.eta_s)
                .collect::<Option<Vec<f64>>>()
                .map(|etas| etas.into_iter().fold(0.0, f64::max))
        })
        .flatten();
    let present: Vec<&str> = members
        .iter()
        .filter_map(|m| m.instance.as_deref())
        .collect();
    let failed = failed
        .into_iter()
        .filter(|(instance, _)| present.contains(&instance.as_str()))
        .flat_map(|(instance, tasks)| {
            tasks.into_iter().map(move |(task, role)| FailedTask {
                task,
                role,
                instance: instance.clone(),
            })
        })
        .collect();
    Ok(GroupView {
        pending,
        balanced_in_s,
        failed,
        group: group.to_owned(),
        state: g.group_state.to_string(),
        protocol_type: or_reported(g.protocol_type.to_string(), crate::member::PROTOCOL_TYPE),
        protocol: or_reported(g.protocol_data.to_string(), crate::member::PROTOCOL_NAME),
        generation,
        members,
    })
}

/// One member as the broker (or, where it gives none, the member's own report) describes it;
/// the changelog partitions its reported tasks' lags need go to `wanted`.
fn member_view(
    m: &kafka_protocol::messages::describe_groups_response::DescribedGroupMember,
    reported: &BTreeMap<String, Report>,
    changelogs: &BTreeMap<u32, Vec<String>>,
    wanted: &mut Vec<TopicPartition>,
) -> MemberView {
    let mut view = MemberView {
        member_id: m.member_id.to_string(),
        client_id: m.client_id.to_string(),
        client_host: m.client_host.to_string(),
        group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
        instance: [Some(m.client_id.as_str()), m.group_instance_id.as_deref()]
            .into_iter()
            .flatten()
            .find_map(instance_of)
            .map(str::to_owned),
        source: "broker".into(),
        ..MemberView::default()
    };
    let (metadata, assignment, assigned_in) = match reported.get(m.member_id.as_str()) {
        Some(r) if m.member_metadata.is_empty() => {
            view.source = "report".into();
            view.instance = r.instance.clone();
            (r.metadata.clone(), r.assignment.clone(), r.generation)
        }
        _ => (m.member_metadata.clone(), m.member_assignment.clone(), None),
    };
    match decode_member(&metadata, &assignment) {
        Ok((sub, claimed, rack, assignment)) => {
            // A join claims the partitions of the member's last generation: the round it
            // joined is the one after (or later, for a member that was away).
            let generation = assigned_in.or((claimed >= 0).then(|| claimed + 1));
            view.rack = rack;
            view.client_tags = sub.user_tags();
            view.process_id = Some(sub.process_id.to_string());
            view.subscription_version = Some(sub.version);
            view.generation = generation;
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
        Err(e) => view.error = Some(e.to_string()),
    }
    view
}

/// Each reported task's lag: its changelogs' ends against the offset sum it reported.
fn fill_lags(
    members: &mut [MemberView],
    changelogs: &BTreeMap<u32, Vec<String>>,
    ends: &BTreeMap<TopicPartition, i64>,
) {
    for m in members.iter_mut() {
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

/// Publishes a member's own view of its membership (the subscription it sent, the assignment
/// it received) to `topic`, for [`inspect`] on brokers that do not return them.
pub async fn publish_member(
    client: &Client,
    topic: &str,
    member_id: &str,
    instance: &str,
    metadata: &[u8],
    assignment: &[u8],
    generation: i32,
) -> Result<()> {
    let leader = client.leader(topic, 0).await?;
    client
        .produce(
            &leader,
            topic,
            0,
            &[report(
                member_id, instance, metadata, assignment, generation,
            )],
        )
        .await
        .map(|_| ())
}

/// A member's own report: what it sent and received in its last join, and its instance.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Report {
    metadata: bytes::Bytes,
    assignment: bytes::Bytes,
    /// Absent from reports written before instances named themselves.
    instance: Option<String>,
    /// The generation the assignment is from. Absent from older reports.
    generation: Option<i32>,
}

/// The record: key `member:<id>`, value `int32 n, n bytes of metadata, int32 m, m bytes of
/// assignment, int32 k, k bytes of the instance id (UTF-8), int32 4, the generation (int32)`.
fn report(
    member_id: &str,
    instance: &str,
    metadata: &[u8],
    assignment: &[u8],
    generation: i32,
) -> KeyValue {
    let mut v = Vec::with_capacity(20 + metadata.len() + assignment.len() + instance.len());
    let generation = generation.to_be_bytes();
    for part in [metadata, assignment, instance.as_bytes(), &generation] {
        v.extend((part.len() as u32).to_be_bytes());
        v.extend(part);
    }
    (
        Some(bytes::Bytes::from(format!(
            "{REPORT_KEY_PREFIX}{member_id}"
        ))),
        Some(bytes::Bytes::from(v)),
    )
}

/// A report's two blobs; `None` for a value that is not one (each length is checked
/// against the bytes that remain).
fn parse_report(mut v: &[u8]) -> Option<Report> {
    let mut part = || {
        let len = u32::from_be_bytes(v.get(..4)?.try_into().ok()?) as usize;
        let body = v.get(4..4usize.checked_add(len)?)?;
        let out = bytes::Bytes::copy_from_slice(body);
        v = &v[4 + len..];
        Some(out)
    };
    let metadata = part()?;
    let assignment = part()?;
    let instance = match part() {
        Some(name) => Some(String::from_utf8(name.to_vec()).ok()?),
        None => None,
    };
    let generation = match part() {
        Some(g) => Some(i32::from_be_bytes(g.as_ref().try_into().ok()?)),
        None => None,
    };
    Some(Report {
        metadata,
        assignment,
        instance,
        generation,
    })
}

/// The instance of a stream thread's client id or `group.instance.id`, `<instance>-<thread>`.
pub fn instance_of(id: &str) -> Option<&str> {
    let (instance, thread) = id.rsplit_once('-')?;
    (!instance.is_empty() && !thread.is_empty() && thread.bytes().all(|b| b.is_ascii_digit()))
        .then_some(instance)
}

/// The latest report of each member among the last records of `topic`.
/// Member reports by member id, and the latest progress of each instance.
/// What members publish to the control topic, the latest of each per member or instance.
#[derive(Default)]
struct ControlRecords {
    reports: BTreeMap<String, Report>,
    progress: BTreeMap<String, Vec<CopyProgress>>,
    failed: BTreeMap<String, Vec<(TaskId, String)>>,
}

/// Each warm-up under way, with its destination's latest progress for it.
fn pending_moves(
    members: &[MemberView],
    progress: &BTreeMap<String, Vec<CopyProgress>>,
) -> Vec<PendingView> {
    let name = |m: &MemberView| {
        m.instance
            .clone()
            .or_else(|| m.process_id.clone())
            .unwrap_or_else(|| m.member_id.clone())
    };
    let mut out = Vec::new();
    for m in members {
        for &task in &m.warmup {
            let from = members.iter().find(|o| o.active.contains(&task)).map(name);
            let copy = m
                .instance
                .as_ref()
                .and_then(|i| progress.get(i))
                .and_then(|copies| copies.iter().find(|c| c.task == task));
            let (lag, rate) = (copy.map(|c| c.lag), copy.and_then(|c| c.rate));
            let eta_s = match (lag, rate) {
                (Some(lag), Some(r)) if r > 0.0 => Some(lag as f64 / r),
                _ => None,
            };
            out.push(PendingView {
                task,
                from,
                to: name(m),
                lag,
                rate,
                eta_s,
                catching_up: rate.map(|r| r > 0.0),
            });
        }
    }
    out.sort_by(|a, b| (a.task, &a.to).cmp(&(b.task, &b.to)));
    out
}

/// The last `n` records of partition 0 of `topic` (the control topic has one), oldest first;
/// none when the topic does not exist (a group that never ran Baton).
pub async fn read_tail(
    client: &Client,
    topic: &str,
    n: i64,
) -> Result<Vec<crate::records::Record>> {
    let meta = client.metadata(Some(&[topic.to_owned()])).await?;
    let exists = meta.topics.iter().any(|t| {
        t.error_code == 0
            && !t.partitions.is_empty()
            && t.name.as_ref().is_some_and(|name| name.0.as_str() == topic)
    });
    if !exists {
        return Ok(Vec::new());
    }
    let tp = TopicPartition::new(topic, 0);
    let end = client
        .end_offsets(std::slice::from_ref(&tp))
        .await?
        .get(&tp)
        .copied()
        .unwrap_or(0);
    let leader = client.leader(topic, 0).await?;
    let mut out = Vec::new();
    let mut offset = (end - n).max(0);
    while offset < end {
        let f = client
            .fetch(&leader, topic, 0, offset, 1 << 20, 100)
            .await?;
        let Some(next) = f.next_offset.filter(|&x| x > offset) else {
            break;
        };
        out.extend(f.records);
        offset = next;
    }
    Ok(out)
}

/// The newest assignment any member reported on `topic`, with its generation: what a member
/// that has not joined yet can know of where the group's tasks are (its host maps). `None`
/// when no member reported one.
pub async fn latest_assignment(client: &Client, topic: &str) -> Result<Option<(i32, Vec<u8>)>> {
    let reports = read_reports(client, topic).await?.reports;
    Ok(reports
        .into_values()
        .filter(|r| !r.assignment.is_empty())
        .filter_map(|r| Some((r.generation?, r.assignment.to_vec())))
        .max_by_key(|(generation, _)| *generation))
}

async fn read_reports(client: &Client, topic: &str) -> Result<ControlRecords> {
    let mut out = ControlRecords::default();
    for r in &read_tail(client, topic, REPORTS_READ).await? {
        let (Some(k), Some(v)) = (&r.key, &r.value) else {
            continue;
        };
        let Ok(key) = std::str::from_utf8(k) else {
            continue;
        };
        if let Some(instance) = key.strip_prefix(PROGRESS_KEY_PREFIX) {
            if let Some(copies) = parse_progress(v) {
                out.progress.insert(instance.to_owned(), copies);
            }
        } else if let Some(instance) = key.strip_prefix(FAILED_KEY_PREFIX) {
            if let Some(tasks) = parse_failed(v) {
                out.failed.insert(instance.to_owned(), tasks);
            }
        } else if let Some(member) = key.strip_prefix(REPORT_KEY_PREFIX) {
            if let Some(report) = parse_report(v) {
                out.reports.insert(member.to_owned(), report);
            }
        }
    }
    Ok(out)
}

type Decoded = (
    SubscriptionInfo,
    i32,
    Option<String>,
    Option<AssignmentInfo>,
);

/// Why a member's metadata or assignment could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemberUnreadable {
    #[error("the broker returned no metadata for this member (see docs/BROKERS.md)")]
    NoMetadata,
    #[error(transparent)]
    Decode(#[from] baton_protocol::DecodeError),
}

fn decode_member(
    metadata: &[u8],
    assignment: &[u8],
) -> std::result::Result<Decoded, MemberUnreadable> {
    if metadata.is_empty() {
        return Err(MemberUnreadable::NoMetadata);
    }
    let sub = ConsumerSubscription::decode(metadata)?;
    let info = SubscriptionInfo::decode(sub.user_data.as_deref().unwrap_or_default())?;
    let assignment = if assignment.is_empty() {
        None
    } else {
        let a = ConsumerAssignment::decode(assignment)?;
        match a.user_data {
            Some(d) => Some(AssignmentInfo::decode(&d)?),
            None => None,
        }
    };
    Ok((info, sub.generation_id, sub.rack_id, assignment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_round_trips_and_garbage_is_refused() {
        let copies = vec![
            CopyProgress {
                task: TaskId::new(0, 3),
                role: "warmup".into(),
                lag: 1200,
                rate: Some(400.0),
            },
            CopyProgress {
                task: TaskId::new(1, 0),
                role: "standby".into(),
                lag: 5,
                rate: None,
            },
        ];
        assert_eq!(parse_progress(&encode_progress(&copies)), Some(copies));
        assert_eq!(parse_progress(b""), Some(vec![]));
        for bad in [
            &b"0_x warmup 1 -"[..],
            b"0_1 warmup -3 -",
            b"0_1 warmup 1 NaN",
            b"0_1 w 1 - x",
            b"\xff",
        ] {
            assert_eq!(
                parse_progress(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn pending_moves_carry_eta_or_say_they_do_not_catch_up() {
        let member = |instance: &str, active: Vec<TaskId>, warmup: Vec<TaskId>| MemberView {
            member_id: format!("{instance}-m"),
            instance: Some(instance.into()),
            source: "report".into(),
            active,
            warmup,
            ..MemberView::default()
        };
        let (t1, t2) = (TaskId::new(0, 1), TaskId::new(0, 2));
        let members = vec![
            member("a", vec![t1, t2], vec![]),
            member("b", vec![], vec![t1, t2]),
        ];
        let copy = |task, lag, rate| CopyProgress {
            task,
            role: "warmup".into(),
            lag,
            rate,
        };
        let progress = BTreeMap::from([(
            "b".to_owned(),
            vec![copy(t1, 1000, Some(500.0)), copy(t2, 9000, Some(-20.0))],
        )]);
        let p = pending_moves(&members, &progress);
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].from.as_deref(), p[0].to.as_str()), (Some("a"), "b"));
        assert_eq!(p[0].eta_s, Some(2.0));
        assert_eq!(p[1].catching_up, Some(false));
        assert_eq!(p[1].eta_s, None);
    }

    #[test]
    fn thread_ids_name_their_instance() {
        assert_eq!(instance_of("web-7-0"), Some("web-7"));
        assert_eq!(instance_of("a-12"), Some("a"));
        assert_eq!(instance_of("a-12-member"), None);
        assert_eq!(instance_of("a"), None);
        assert_eq!(instance_of("-1"), None);
    }

    #[test]
    fn a_report_round_trips_and_a_bad_one_is_refused() {
        let (k, v) = report("m-1", "web-3", b"meta", b"assign", 7);
        assert_eq!(k.as_deref(), Some(&b"member:m-1"[..]));
        let r = parse_report(v.as_deref().unwrap()).unwrap();
        assert_eq!(
            (&r.metadata[..], &r.assignment[..]),
            (&b"meta"[..], &b"assign"[..])
        );
        assert_eq!(r.instance.as_deref(), Some("web-3"));
        assert_eq!(r.generation, Some(7));
        // A report from before instances named themselves: two parts.
        let old = [&[0, 0, 0, 1][..], b"m", &[0, 0, 0, 0]].concat();
        assert_eq!(parse_report(&old).unwrap().instance, None);
        assert_eq!(parse_report(&old).unwrap().generation, None);
        // A generation that is not four bytes: not a report.
        let odd = [&old[..], &[0, 0, 0, 1, b'i'], &[0, 0, 0, 2, 0, 7]].concat();
        assert!(parse_report(&odd).is_none());
        // A declared length past the end, a truncated header: not a report.
        assert!(parse_report(&[0, 0, 0, 9, 1, 2]).is_none());
        assert!(parse_report(&[0, 0]).is_none());
        assert!(parse_report(&[0xff, 0xff, 0xff, 0xff]).is_none());
    }
}
