//! `SubscriptionInfo`: what each member tells the group leader when it joins.
//!
//! Byte layout (big-endian), as Kafka Streams' generated `SubscriptionInfoData`:
//!
//! | field | versions |
//! |---|---|
//! | `int32 version` | 1+ |
//! | `int32 latestSupportedVersion` | 3+ |
//! | `uuid processId` (16 bytes) | 1+ |
//! | `prevTasks`, `standbyTasks`: `int32 n` x (`int32 subtopology`, `int32 partition`) | 1-6 |
//! | `bytes userEndPoint` (`int32` length + UTF-8 `host:port`) | 2+ |
//! | `taskOffsetSums`, v7-9: `int32 n` x (`int32 subtopology`, `int32 m` x (`int32 partition`, `int64 sum`)) | 7-9 |
//! | `taskOffsetSums`, v10+: `int32 n` x (`int32 subtopology`, `int32 partition`, `int64 sum`, `string namedTopology`) | 10+ |
//! | `int8 uniqueField` | 8+ |
//! | `int32 errorCode` | 9+ |
//! | `clientTags`: `int32 n` x (`bytes key`, `bytes value`) | 11+ |
//!
//! Version 12 is Baton's: the same bytes as 11. Announcing it lets a Baton leader answer with
//! an assignment v12 (which names warm-ups); a Kafka Streams leader sees a version it does not
//! know and negotiates every member down to 11 by version probing.

use baton_assignor::TaskId;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::codec::{Blob, DecodeError, EncodeError, Reader, Unwritable, Writer};
use crate::{BATON_VERSION, UNKNOWN_VERSION};

/// Offset sum of a running, caught-up active (Kafka's `Task.LATEST_OFFSET`).
pub const RUNNING: i64 = -2;
/// Offset sum that is not known (Kafka's `UNKNOWN_OFFSET_SUM`).
pub const UNKNOWN: i64 = -3;

/// A task's summed changelog offsets as the member reports them (-2: running active).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskOffsetSum {
    pub task: TaskId,
    pub offset_sum: i64,
}

/// A client tag (`client.tag.<key>` in Kafka Streams).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientTag {
    pub key: String,
    pub value: String,
}

/// One member's subscription metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionInfo {
    pub version: i32,
    /// -1 before version 3.
    #[serde(default = "unknown")]
    pub latest_supported_version: i32,
    pub process_id: Uuid,
    #[serde(default)]
    pub prev_tasks: Vec<TaskId>,
    #[serde(default)]
    pub standby_tasks: Vec<TaskId>,
    /// `host:port`, empty when unset.
    #[serde(default)]
    pub user_endpoint: String,
    #[serde(default)]
    pub task_offset_sums: Vec<TaskOffsetSum>,
    #[serde(default)]
    pub unique_field: i8,
    #[serde(default)]
    pub error_code: i32,
    #[serde(default)]
    pub client_tags: Vec<ClientTag>,
}

fn unknown() -> i32 {
    UNKNOWN_VERSION
}

impl SubscriptionInfo {
    /// An empty subscription at `version` (latest supported: Baton's).
    pub fn new(version: i32, process_id: Uuid) -> Self {
        Self {
            version,
            latest_supported_version: if version >= 3 {
                BATON_VERSION
            } else {
                UNKNOWN_VERSION
            },
            process_id,
            prev_tasks: Vec::new(),
            standby_tasks: Vec::new(),
            user_endpoint: String::new(),
            task_offset_sums: Vec::new(),
            unique_field: 0,
            error_code: 0,
            client_tags: Vec::new(),
        }
    }

    /// Kafka Streams' constructor: everything a member knows, written as `version` can carry it.
    /// Before version 7, tasks with offset sum -2 (running actives) become `prev_tasks` and the
    /// others `standby_tasks`; before version 2 the endpoint is dropped.
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        version: i32,
        latest_supported_version: i32,
        process_id: Uuid,
        user_endpoint: &str,
        offset_sums: &[TaskOffsetSum],
        unique_field: i8,
        error_code: i32,
    ) -> Self {
        let mut s = SubscriptionInfo::new(version, process_id);
        if version >= 3 {
            s.latest_supported_version = latest_supported_version;
        }
        if version >= 2 {
            s.user_endpoint = user_endpoint.to_owned();
        }
        if version >= 7 {
            s.task_offset_sums = offset_sums.to_vec();
        } else {
            for e in offset_sums {
                if e.offset_sum == RUNNING {
                    s.prev_tasks.push(e.task);
                } else {
                    s.standby_tasks.push(e.task);
                }
            }
        }
        if version >= 8 {
            s.unique_field = unique_field;
        }
        if version >= 9 {
            s.error_code = error_code;
        }
        s
    }

    /// The task offset sums, whatever the version: before version 7, previous actives count
    /// as running (-2) and standbys as unknown (-3), as Kafka converts them.
    pub fn offset_sums(&self) -> Vec<TaskOffsetSum> {
        if self.version >= 7 {
            return self.task_offset_sums.clone();
        }
        let mut out: Vec<TaskOffsetSum> = self
            .prev_tasks
            .iter()
            .map(|&task| TaskOffsetSum {
                task,
                offset_sum: RUNNING,
            })
            .collect();
        out.extend(
            self.standby_tasks
                .iter()
                .filter(|t| !self.prev_tasks.contains(t))
                .map(|&task| TaskOffsetSum {
                    task,
                    offset_sum: UNKNOWN,
                }),
        );
        out
    }

    /// Whether this was a newer member's subscription of which only the version header was read.
    pub fn is_future_version(&self) -> bool {
        self.version > BATON_VERSION
    }

    /// The value of client tag `key`.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.client_tags
            .iter()
            .find(|t| t.key == key)
            .map(|t| t.value.as_str())
    }

    /// The user's `client.tag.<key>` values: every tag but Baton's own `baton.` flags.
    pub fn user_tags(&self) -> std::collections::BTreeMap<String, String> {
        self.client_tags
            .iter()
            .filter(|t| !t.key.starts_with("baton."))
            .map(|t| (t.key.clone(), t.value.clone()))
            .collect()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes, Blob::Subscription);
        let version = r.i32("version")?;
        r.set_version(version);
        if version < 1 {
            return Err(r.error("version", 0, format!("{version} is not a protocol version")));
        }
        let latest = if version >= 3 {
            r.i32("latest supported version")?
        } else {
            UNKNOWN_VERSION
        };
        let mut s = SubscriptionInfo::new(version, Uuid::nil());
        s.latest_supported_version = latest;
        if version > BATON_VERSION {
            // Version probing: a newer member; only the header is understood.
            return Ok(s);
        }
        s.process_id = r.uuid("process id")?;
        if version <= 6 {
            for field in ["previous task list", "standby task list"] {
                let n = r.count(field, 8)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(r.task_id(field, version)?);
                }
                if field == "previous task list" {
                    s.prev_tasks = v;
                } else {
                    s.standby_tasks = v;
                }
            }
        }
        if version >= 2 {
            s.user_endpoint = r.utf8_bytes("user endpoint")?;
        }
        s.task_offset_sums = read_offset_sums(&mut r, version)?;
        if version >= 8 {
            s.unique_field = r.i8("unique field")?;
        }
        if version >= 9 {
            s.error_code = r.i32("error code")?;
        }
        if version >= 11 {
            let n = r.count("client tags", 8)?;
            for _ in 0..n {
                let key = r.utf8_bytes("client tag key")?;
                let value = r.utf8_bytes("client tag value")?;
                s.client_tags.push(ClientTag { key, value });
            }
        }
        r.finish()?;
        Ok(s)
    }

    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let v = self.version;
        let max = BATON_VERSION;
        EncodeError::check(
            Blob::Subscription,
            v,
            &[
                (
                    3..=max,
                    self.latest_supported_version != UNKNOWN_VERSION,
                    "latest_supported_version (other than -1)",
                ),
                (
                    1..=6,
                    !(self.prev_tasks.is_empty() && self.standby_tasks.is_empty()),
                    "prev_tasks and standby_tasks (use task_offset_sums)",
                ),
                (2..=max, !self.user_endpoint.is_empty(), "user_endpoint"),
                (
                    7..=max,
                    !self.task_offset_sums.is_empty(),
                    "task_offset_sums",
                ),
                (8..=max, self.unique_field != 0, "unique_field"),
                (9..=max, self.error_code != 0, "error_code"),
                (11..=max, !self.client_tags.is_empty(), "client_tags"),
            ],
        )?;
        let fail = |problem: Unwritable| EncodeError {
            blob: Blob::Subscription,
            version: v,
            problem,
        };
        let mut w = Writer::default();
        let wr = |r: Result<(), Unwritable>| r.map_err(fail);
        w.i32(v);
        if v >= 3 {
            w.i32(self.latest_supported_version);
        }
        w.uuid(&self.process_id);
        if v <= 6 {
            for list in [&self.prev_tasks, &self.standby_tasks] {
                wr(w.len(list.len()))?;
                for &t in list {
                    wr(w.task_id(t, v))?;
                }
            }
        }
        if v >= 2 {
            wr(w.bytes(self.user_endpoint.as_bytes()))?;
        }
        if (7..=9).contains(&v) {
            // Consecutive entries of one subtopology share a group.
            let mut groups: Vec<(u32, Vec<(u32, i64)>)> = Vec::new();
            for e in &self.task_offset_sums {
                match groups.last_mut() {
                    Some((sub, parts)) if *sub == e.task.subtopology => {
                        parts.push((e.task.partition, e.offset_sum))
                    }
                    _ => groups.push((e.task.subtopology, vec![(e.task.partition, e.offset_sum)])),
                }
            }
            wr(w.len(groups.len()))?;
            for (sub, parts) in groups {
                wr(w.id(sub))?;
                wr(w.len(parts.len()))?;
                for (p, sum) in parts {
                    wr(w.id(p))?;
                    w.i64(sum);
                }
            }
        } else if v >= 10 {
            wr(w.len(self.task_offset_sums.len()))?;
            for e in &self.task_offset_sums {
                wr(w.id(e.task.subtopology))?;
                wr(w.id(e.task.partition))?;
                w.i64(e.offset_sum);
                wr(w.nullable_string(None))?;
            }
        }
        if v >= 8 {
            w.i8(self.unique_field);
        }
        if v >= 9 {
            w.i32(self.error_code);
        }
        if v >= 11 {
            wr(w.len(self.client_tags.len()))?;
            for t in &self.client_tags {
                wr(w.bytes(t.key.as_bytes()))?;
                wr(w.bytes(t.value.as_bytes()))?;
            }
        }
        Ok(w.buf)
    }
}

/// The task offset sums of a subscription of `version`: grouped by subtopology (7 to 9), or
/// one entry a task (10 and later); none before 7.
fn read_offset_sums(r: &mut Reader, version: i32) -> Result<Vec<TaskOffsetSum>, DecodeError> {
    let mut sums = Vec::new();
    if (7..=9).contains(&version) {
        let groups = r.count("task offset sums", 8)?;
        for _ in 0..groups {
            let at = r.position();
            let sub = r.i32("task offset sums")?;
            if sub < 0 {
                return Err(r.error(
                    "task offset sums",
                    at,
                    format!("subtopology {sub} is negative"),
                ));
            }
            let m = r.count("partition offset sums", 12)?;
            for _ in 0..m {
                let at = r.position();
                let part = r.i32("partition offset sums")?;
                if part < 0 {
                    return Err(r.error(
                        "partition offset sums",
                        at,
                        format!("partition {part} is negative"),
                    ));
                }
                let offset_sum = r.i64("partition offset sums")?;
                sums.push(TaskOffsetSum {
                    task: TaskId::new(sub as u32, part as u32),
                    offset_sum,
                });
            }
        }
    } else if version >= 10 {
        let n = r.count("task offset sums", 18)?;
        sums.reserve(n);
        for _ in 0..n {
            let at = r.position();
            let sub = r.i32("task offset sums")?;
            let part = r.i32("task offset sums")?;
            let offset_sum = r.i64("task offset sums")?;
            if sub < 0 || part < 0 {
                return Err(r.error(
                    "task offset sums",
                    at,
                    format!("task {sub}_{part} has a negative number"),
                ));
            }
            let name_at = r.position();
            if let Some(name) = r.nullable_string("named topology")? {
                return Err(r.error(
                    "named topology",
                    name_at,
                    format!("{name:?}: named topologies are not supported"),
                ));
            }
            sums.push(TaskOffsetSum {
                task: TaskId::new(sub as u32, part as u32),
                offset_sum,
            });
        }
    }
    Ok(sums)
}
