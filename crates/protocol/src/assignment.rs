//! `AssignmentInfo`: what the leader tells each member it runs.
//!
//! Byte layout (big-endian), as Kafka Streams' hand-written `AssignmentInfo`:
//!
//! | field | versions |
//! |---|---|
//! | `int32 usedVersion` | 1+ |
//! | `int32 commonlySupportedVersion` | 3+ |
//! | actives: `int32 n` x TaskId | 1+ |
//! | standbys: `int32 n` x (TaskId, `int32 k` x (`utf topic`, `int32 partition`)) | 1+ |
//! | partitionsByHost: `int32 h` x (`utf host`, `int32 port`, `int32 k` x (`utf topic`, `int32 partition`)) | 2-4 |
//! | topic dictionary: `int32 d` x (`int32 index`, `utf topic`) | 5+ |
//! | partitionsByHost: `int32 h` x (`utf host`, `int32 port`, `int32 k` x (`int32 topic index`, `int32 partition`)) | 5+ |
//! | standbyPartitionsByHost: as partitionsByHost | 6+ |
//! | `int32 errCode` | 4+ |
//! | `int64 nextRebalanceMs` | 7+ |
//! | Baton: warm-ups, `int32 n` x TaskId | 12 |
//!
//! TaskId is `int32 subtopology`, `int32 partition`, and from v10 `int32` named-topology chars
//! (always 0 here). `utf` is Java's `writeUTF`: `uint16` length plus modified UTF-8.
//!
//! Version 12 is Baton's: version 11 plus the list of the member's standbys that are warm-ups.
//! A Baton leader writes it only when every member announced version 12.

use std::collections::{BTreeMap, BTreeSet};

use baton_assignor::TaskId;
pub use baton_assignor::TopicPartition;
use serde::{Deserialize, Serialize};

use crate::codec::{Blob, DecodeError, EncodeError, Reader, Unwritable, Writer};
use crate::{BATON_VERSION, UNKNOWN_VERSION};

/// A member's interactive-query endpoint.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostInfo {
    pub host: String,
    pub port: i32,
}

/// A standby task and the changelog partitions it restores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandbyTask {
    pub task: TaskId,
    pub partitions: Vec<TopicPartition>,
}

/// Partitions served by one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPartitions {
    pub host: HostInfo,
    pub partitions: Vec<TopicPartition>,
}

/// Kafka Streams' assignment error codes (`AssignorError`); any non-zero code stops the client.
pub mod error_code {
    pub const NONE: i32 = 0;
    pub const INCOMPLETE_SOURCE_TOPIC_METADATA: i32 = 1;
    pub const VERSION_PROBING: i32 = 2;
    pub const ASSIGNMENT_ERROR: i32 = 3;
    pub const SHUTDOWN_REQUESTED: i32 = 4;
}

/// One member's assignment metadata. Equality is of meaning: the topic dictionary's wire
/// numbering is left out (two encodings of one assignment are equal).
#[derive(Debug, Clone, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssignmentInfo {
    pub version: i32,
    /// -1 before version 3.
    #[serde(default = "unknown")]
    pub commonly_supported_version: i32,
    /// One entry per assigned partition, in the order of the member's sorted partition list.
    #[serde(default)]
    pub active_tasks: Vec<TaskId>,
    #[serde(default)]
    pub standby_tasks: Vec<StandbyTask>,
    #[serde(default)]
    pub partitions_by_host: Vec<HostPartitions>,
    #[serde(default)]
    pub standby_partitions_by_host: Vec<HostPartitions>,
    #[serde(default)]
    pub error_code: i32,
    /// When to rebalance again; `i64::MAX` for never.
    #[serde(default = "never")]
    pub next_rebalance_ms: i64,
    /// Baton (v12): which of `standby_tasks` are warm-ups.
    #[serde(default)]
    pub warmup_tasks: Vec<TaskId>,
    /// Baton (v12): which of `standby_tasks` (not warm-ups) a pending move waits for. Leaders
    /// since the standby-move change write it empty (a move's target that holds a copy is
    /// listed as a warm-up instead, so its caught-up signal triggers the hand-over); it stays
    /// in the layout so assignments from and to members of the earlier build still decode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handover_standbys: Vec<TaskId>,
    /// Versions 5+: the topic dictionary as it was on the wire, in order, with its numbering.
    /// Kafka writes it in hash-map order (and its indexes need not run in order), so bytes
    /// re-encode exactly only with it. Empty: the encoder numbers topics in sorted order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topic_dictionary: Vec<TopicIndex>,
}

impl PartialEq for AssignmentInfo {
    fn eq(&self, other: &Self) -> bool {
        self.version == other.version
            && self.commonly_supported_version == other.commonly_supported_version
            && self.active_tasks == other.active_tasks
            && self.standby_tasks == other.standby_tasks
            && self.partitions_by_host == other.partitions_by_host
            && self.standby_partitions_by_host == other.standby_partitions_by_host
            && self.error_code == other.error_code
            && self.next_rebalance_ms == other.next_rebalance_ms
            && self.warmup_tasks == other.warmup_tasks
            && self.handover_standbys == other.handover_standbys
    }
}

/// One entry of a host map's topic dictionary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicIndex {
    pub index: i32,
    pub topic: String,
}

fn unknown() -> i32 {
    UNKNOWN_VERSION
}

fn never() -> i64 {
    i64::MAX
}

impl AssignmentInfo {
    pub fn new(version: i32, commonly_supported_version: i32) -> Self {
        Self {
            version,
            commonly_supported_version: if version >= 3 {
                commonly_supported_version
            } else {
                UNKNOWN_VERSION
            },
            active_tasks: Vec::new(),
            standby_tasks: Vec::new(),
            partitions_by_host: Vec::new(),
            standby_partitions_by_host: Vec::new(),
            error_code: 0,
            next_rebalance_ms: i64::MAX,
            warmup_tasks: Vec::new(),
            handover_standbys: Vec::new(),
            topic_dictionary: Vec::new(),
        }
    }

    pub fn is_future_version(&self) -> bool {
        self.version > BATON_VERSION
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes, Blob::Assignment);
        let version = r.i32("version")?;
        r.set_version(version);
        if version < 1 {
            return Err(r.error("version", 0, format!("{version} is not a protocol version")));
        }
        let common = if version >= 3 {
            r.i32("commonly supported version")?
        } else {
            UNKNOWN_VERSION
        };
        let mut a = AssignmentInfo::new(version, common);
        a.commonly_supported_version = common;
        if version > BATON_VERSION {
            return Ok(a);
        }
        let task_bytes = if version >= 10 { 12 } else { 8 };
        let n = r.count("active task list", task_bytes)?;
        a.active_tasks.reserve(n);
        for _ in 0..n {
            a.active_tasks.push(r.task_id("active task list", version)?);
        }
        let n = r.count("standby task list", task_bytes + 4)?;
        for _ in 0..n {
            let task = r.task_id("standby task list", version)?;
            let partitions = read_named_partitions(&mut r, "standby partitions")?;
            a.standby_tasks.push(StandbyTask { task, partitions });
        }
        if (2..=4).contains(&version) {
            let h = r.count("partitions by host", 10)?;
            for _ in 0..h {
                let host = read_host(&mut r)?;
                let partitions = read_named_partitions(&mut r, "host partitions")?;
                a.partitions_by_host
                    .push(HostPartitions { host, partitions });
            }
        } else if version >= 5 {
            let d = r.count("topic dictionary", 6)?;
            let mut dict: BTreeMap<i32, String> = BTreeMap::new();
            for _ in 0..d {
                let at = r.position();
                let index = r.i32("topic dictionary")?;
                let topic = r.java_utf("topic dictionary")?;
                if dict.insert(index, topic.clone()).is_some() {
                    return Err(r.error(
                        "topic dictionary",
                        at,
                        format!("index {index} appears twice"),
                    ));
                }
                a.topic_dictionary.push(TopicIndex { index, topic });
            }
            a.partitions_by_host = read_host_map(&mut r, &dict, "partitions by host")?;
            if version >= 6 {
                a.standby_partitions_by_host =
                    read_host_map(&mut r, &dict, "standby partitions by host")?;
            }
        }
        if version >= 4 {
            a.error_code = r.i32("error code")?;
        }
        if version >= 7 {
            a.next_rebalance_ms = r.i64("next rebalance time")?;
        }
        if version >= 12 {
            let n = r.count("warm-up task list", task_bytes)?;
            for _ in 0..n {
                a.warmup_tasks
                    .push(r.task_id("warm-up task list", version)?);
            }
            let n = r.count("hand-over standby list", task_bytes)?;
            for _ in 0..n {
                a.handover_standbys
                    .push(r.task_id("hand-over standby list", version)?);
            }
        }
        r.finish()?;
        Ok(a)
    }

    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let v = self.version;
        self.check_fields()?;
        let fail = |problem: Unwritable| EncodeError {
            blob: Blob::Assignment,
            version: v,
            problem,
        };
        let mut w = Writer::default();
        let wr = |r: Result<(), Unwritable>| r.map_err(fail);
        w.i32(v);
        if v >= 3 {
            w.i32(self.commonly_supported_version);
        }
        wr(w.len(self.active_tasks.len()))?;
        for &t in &self.active_tasks {
            wr(w.task_id(t, v))?;
        }
        wr(w.len(self.standby_tasks.len()))?;
        for s in &self.standby_tasks {
            wr(w.task_id(s.task, v))?;
            wr(write_named_partitions(&mut w, &s.partitions))?;
        }
        wr(self.write_host_maps(&mut w, v))?;
        if v >= 4 {
            w.i32(self.error_code);
        }
        if v >= 7 {
            w.i64(self.next_rebalance_ms);
        }
        if v >= 12 {
            wr(w.len(self.warmup_tasks.len()))?;
            for &t in &self.warmup_tasks {
                wr(w.task_id(t, v))?;
            }
            wr(w.len(self.handover_standbys.len()))?;
            for &t in &self.handover_standbys {
                wr(w.task_id(t, v))?;
            }
        }
        Ok(w.buf)
    }
}

impl AssignmentInfo {
    /// Every field set is one this version carries.
    fn check_fields(&self) -> Result<(), EncodeError> {
        let (v, max) = (self.version, BATON_VERSION);
        EncodeError::check(
            Blob::Assignment,
            v,
            &[
                (
                    3..=max,
                    self.commonly_supported_version != UNKNOWN_VERSION,
                    "commonly_supported_version (other than -1)",
                ),
                (
                    2..=max,
                    !self.partitions_by_host.is_empty(),
                    "partitions_by_host",
                ),
                (
                    6..=max,
                    !self.standby_partitions_by_host.is_empty(),
                    "standby_partitions_by_host",
                ),
                (4..=max, self.error_code != 0, "error_code"),
                (
                    7..=max,
                    self.next_rebalance_ms != i64::MAX,
                    "next_rebalance_ms",
                ),
                (
                    12..=max,
                    !self.warmup_tasks.is_empty(),
                    "warmup_tasks (Baton's version 12 only)",
                ),
                (
                    12..=max,
                    !self.handover_standbys.is_empty(),
                    "handover_standbys (Baton's version 12 only)",
                ),
            ],
        )
    }

    /// The host maps: by topic name (versions 2 to 4), or through a topic dictionary (5 and
    /// later, the standby map from 6).
    fn write_host_maps(&self, w: &mut Writer, v: i32) -> Result<(), Unwritable> {
        if (2..=4).contains(&v) {
            w.len(self.partitions_by_host.len())?;
            for hp in &self.partitions_by_host {
                write_host(w, &hp.host)?;
                write_named_partitions(w, &hp.partitions)?;
            }
        } else if v >= 5 {
            let dict = self.dictionary()?;
            w.len(dict.len())?;
            for (index, topic) in &dict {
                w.i32(*index);
                w.java_utf(topic)?;
            }
            let index_of: BTreeMap<&str, i32> =
                dict.iter().map(|(i, t)| (t.as_str(), *i)).collect();
            let mut maps = vec![&self.partitions_by_host];
            if v >= 6 {
                maps.push(&self.standby_partitions_by_host);
            }
            for map in maps {
                w.len(map.len())?;
                for hp in map {
                    write_host(w, &hp.host)?;
                    w.len(hp.partitions.len())?;
                    for p in &hp.partitions {
                        w.i32(index_of[p.topic.as_str()]);
                        w.i32(p.partition);
                    }
                }
            }
        }
        Ok(())
    }

    /// The topic dictionary to write, in order: the one decoded (checked to name every topic
    /// of the host maps once), or every such topic in sorted order, numbered from 0, so the
    /// same assignment always gives the same bytes.
    fn dictionary(&self) -> Result<Vec<(i32, String)>, Unwritable> {
        let used: BTreeSet<&str> = self
            .partitions_by_host
            .iter()
            .chain(&self.standby_partitions_by_host)
            .flat_map(|hp| hp.partitions.iter().map(|p| p.topic.as_str()))
            .collect();
        if self.topic_dictionary.is_empty() {
            return Ok(used
                .into_iter()
                .enumerate()
                .map(|(i, t)| (i as i32, t.to_owned()))
                .collect());
        }
        let mut indexes = BTreeSet::new();
        let mut topics = BTreeSet::new();
        for e in &self.topic_dictionary {
            if !indexes.insert(e.index) {
                return Err(Unwritable::DictionaryIndexTwice(e.index));
            }
            if !topics.insert(e.topic.as_str()) {
                return Err(Unwritable::DictionaryTopicTwice(e.topic.clone()));
            }
        }
        if let Some(missing) = used.iter().find(|t| !topics.contains(*t)) {
            return Err(Unwritable::NotInDictionary((*missing).to_owned()));
        }
        Ok(self
            .topic_dictionary
            .iter()
            .map(|e| (e.index, e.topic.clone()))
            .collect())
    }
}

fn read_host(r: &mut Reader) -> Result<HostInfo, DecodeError> {
    let host = r.java_utf("host")?;
    let port = r.i32("port")?;
    Ok(HostInfo { host, port })
}

fn write_host(w: &mut Writer, h: &HostInfo) -> Result<(), Unwritable> {
    w.java_utf(&h.host)?;
    w.i32(h.port);
    Ok(())
}

fn read_named_partitions(
    r: &mut Reader,
    field: &'static str,
) -> Result<Vec<TopicPartition>, DecodeError> {
    let k = r.count(field, 6)?;
    let mut out = Vec::with_capacity(k);
    for _ in 0..k {
        let topic = r.java_utf(field)?;
        let partition = r.i32(field)?;
        out.push(TopicPartition { topic, partition });
    }
    Ok(out)
}

fn write_named_partitions(w: &mut Writer, ps: &[TopicPartition]) -> Result<(), Unwritable> {
    w.len(ps.len())?;
    for p in ps {
        w.java_utf(&p.topic)?;
        w.i32(p.partition);
    }
    Ok(())
}

fn read_host_map(
    r: &mut Reader,
    dict: &BTreeMap<i32, String>,
    field: &'static str,
) -> Result<Vec<HostPartitions>, DecodeError> {
    let h = r.count(field, 10)?;
    let mut out = Vec::with_capacity(h);
    for _ in 0..h {
        let host = read_host(r)?;
        let k = r.count(field, 8)?;
        let mut partitions = Vec::with_capacity(k);
        for _ in 0..k {
            let at = r.position();
            let index = r.i32(field)?;
            let topic = dict.get(&index).ok_or_else(|| {
                r.error(
                    field,
                    at,
                    format!("topic index {index} is not in the dictionary"),
                )
            })?;
            let partition = r.i32(field)?;
            partitions.push(TopicPartition {
                topic: topic.clone(),
                partition,
            });
        }
        out.push(HostPartitions { host, partitions });
    }
    Ok(out)
}
