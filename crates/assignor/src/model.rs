//! The vocabulary shared by every layer: tasks, clients and how far behind a client's state is.

use std::fmt;
use std::str::FromStr;

/// A unit of work: one partition of one subtopology, written `"0_3"` as Kafka Streams does.
///
/// Ordered by subtopology, then partition, which is Kafka's `TaskId` order and the order every
/// tie in the assignors is broken by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TaskId {
    pub subtopology: u32,
    pub partition: u32,
}

impl TaskId {
    pub const fn new(subtopology: u32, partition: u32) -> Self {
        Self {
            subtopology,
            partition,
        }
    }
}

impl serde::Serialize for TaskId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TaskId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.subtopology, self.partition)
    }
}

/// Why a string is not a [`TaskId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a task id (expected SUBTOPOLOGY_PARTITION, e.g. \"0_3\")")]
pub struct ParseTaskIdError(pub String);

impl FromStr for TaskId {
    type Err = ParseTaskIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseTaskIdError(s.to_owned());
        let (sub, part) = s.split_once('_').ok_or_else(err)?;
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
        if !digits(sub) || !digits(part) {
            return Err(err());
        }
        Ok(TaskId::new(
            sub.parse().map_err(|_| err())?,
            part.parse().map_err(|_| err())?,
        ))
    }
}

/// An application instance (a process, possibly with several stream threads).
///
/// Kafka identifies a process by a UUID; Baton accepts any non-empty string. Clients are
/// ordered as Kafka orders them where that matters (ties in its assignor): UUIDs as Java's
/// `UUID.compareTo` does, by their two 64-bit halves as *signed* numbers (so `8...` to `f...`
/// come before `0...`), before any id that is not a UUID; other ids by their text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ClientId(pub String);

impl ClientId {
    /// `(most, least)` significant halves, if the id is a UUID in its canonical text form.
    fn uuid_halves(&self) -> Option<(i64, i64)> {
        let s = self.0.as_bytes();
        if s.len() != 36 || [8, 13, 18, 23].iter().any(|&i| s[i] != b'-') {
            return None;
        }
        let hex: String = self.0.chars().filter(|&c| c != '-').collect();
        let v = u128::from_str_radix(&hex, 16).ok()?;
        Some(((v >> 64) as u64 as i64, v as u64 as i64))
    }
}

impl Ord for ClientId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self.uuid_halves(), other.uuid_halves()) {
            (Some(a), Some(b)) => a.cmp(&b).then_with(|| self.0.cmp(&other.0)),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => self.0.cmp(&other.0),
        }
    }
}

impl PartialOrd for ClientId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ClientId {
    fn from(s: &str) -> Self {
        ClientId(s.to_owned())
    }
}

/// How far a client's local copy of a task's state is behind the changelog end.
///
/// Ordered from most to least caught up: a running active, then by records behind, then unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lag {
    /// The client runs the task as an active and is processing at the head (Kafka's offset sum -2).
    Running,
    /// The client's store is this many records behind the changelog end offsets.
    Behind(u64),
    /// The lag cannot be computed (Kafka's -3, e.g. end offsets could not be fetched).
    Unknown,
}

impl Lag {
    /// Kafka's sentinel offset sum for "running active, caught up".
    pub const RUNNING_SENTINEL: i64 = -2;
    /// Kafka's sentinel offset sum for "unknown".
    pub const UNKNOWN_SENTINEL: i64 = -3;

    /// Kafka's rule from a reported offset sum and the task's changelog end-offset sum.
    ///
    /// An end below the reported sum means the local state is ahead of the log, i.e. corrupt,
    /// so it must be restored from scratch: lag = end.
    pub fn from_offset_sum(offset_sum: i64, end_offset_sum: u64) -> Result<Lag, InvalidOffsetSum> {
        match offset_sum {
            Self::RUNNING_SENTINEL => Ok(Lag::Running),
            Self::UNKNOWN_SENTINEL => Ok(Lag::Unknown),
            s if s < 0 => Err(InvalidOffsetSum(s)),
            s => {
                let s = s as u64;
                Ok(Lag::Behind(if end_offset_sum < s {
                    end_offset_sum
                } else {
                    end_offset_sum - s
                }))
            }
        }
    }

    /// A lag given directly: `-2` running, `-3` unknown, otherwise records behind.
    pub fn from_wire(value: i64) -> Result<Lag, InvalidOffsetSum> {
        match value {
            Self::RUNNING_SENTINEL => Ok(Lag::Running),
            Self::UNKNOWN_SENTINEL => Ok(Lag::Unknown),
            v if v < 0 => Err(InvalidOffsetSum(v)),
            v => Ok(Lag::Behind(v as u64)),
        }
    }

    /// Kafka's numeric view of the lag, used where Kafka's own ordering must be reproduced.
    pub fn as_kafka_long(self) -> i64 {
        match self {
            Lag::Running => Self::RUNNING_SENTINEL,
            Lag::Unknown => Self::UNKNOWN_SENTINEL,
            Lag::Behind(n) => n.min(i64::MAX as u64) as i64,
        }
    }

    /// Whether a client with this lag may take over the task without a visible restore.
    pub fn is_caught_up(self, acceptable_recovery_lag: u64) -> bool {
        match self {
            Lag::Running => true,
            Lag::Behind(n) => n <= acceptable_recovery_lag || unbounded(acceptable_recovery_lag),
            Lag::Unknown => unbounded(acceptable_recovery_lag),
        }
    }
}

/// `acceptable.recovery.lag = Long.MAX_VALUE` means "any client is caught up".
fn unbounded(acceptable_recovery_lag: u64) -> bool {
    acceptable_recovery_lag >= i64::MAX as u64
}

/// A negative offset sum or lag other than Kafka's sentinels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not a valid offset sum (use >= 0, -2 for a running active, -3 for unknown)")]
pub struct InvalidOffsetSum(pub i64);

/// What a client does with a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Processes the task's input.
    Active,
    /// Keeps a replica of the task's state by tailing its changelog.
    Standby,
    /// A temporary extra replica that catches up so the task can move here without a stall.
    Warmup,
}

/// A topic partition.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// `topic-partition`, as Kafka writes it.
impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_id_round_trips_through_text() {
        let t: TaskId = "12_345".parse().unwrap();
        assert_eq!(t, TaskId::new(12, 345));
        assert_eq!(t.to_string(), "12_345");
    }

    #[test]
    fn task_id_rejects_malformed_text() {
        for bad in [
            "",
            "0",
            "0_",
            "_1",
            "0_x",
            "a_1",
            "0_1_2",
            "-1_0",
            "0_-1",
            "99999999999_0",
        ] {
            assert!(bad.parse::<TaskId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn uuids_order_as_java_compares_them_signed() {
        let id = |s: &str| ClientId(s.into());
        let high = id("f0000000-0000-0000-0000-000000000000");
        let eight = id("80000000-0000-0000-0000-000000000000");
        let low = id("00000000-0000-0000-0000-000000000001");
        let low_neg_lsb = id("00000000-0000-0000-8000-000000000000");
        let mut v = vec![
            low.clone(),
            high.clone(),
            id("c1"),
            low_neg_lsb.clone(),
            eight.clone(),
        ];
        v.sort();
        assert_eq!(v, vec![eight, high, low_neg_lsb, low, id("c1")]);
        // Equal halves, different case: still a total order.
        assert_ne!(
            id("AB000000-0000-0000-0000-000000000000")
                .cmp(&id("ab000000-0000-0000-0000-000000000000")),
            std::cmp::Ordering::Equal
        );
    }

    #[test]
    fn task_ids_order_by_subtopology_then_partition() {
        let mut v: Vec<TaskId> = ["1_0", "0_10", "0_2"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        v.sort();
        let s: Vec<String> = v.iter().map(ToString::to_string).collect();
        assert_eq!(s, ["0_2", "0_10", "1_0"]);
    }

    #[test]
    fn lag_follows_kafka_rules() {
        assert_eq!(Lag::from_offset_sum(-2, 100), Ok(Lag::Running));
        assert_eq!(Lag::from_offset_sum(-3, 100), Ok(Lag::Unknown));
        assert_eq!(Lag::from_offset_sum(40, 100), Ok(Lag::Behind(60)));
        // Corrupt state: the store claims more than the log has.
        assert_eq!(Lag::from_offset_sum(140, 100), Ok(Lag::Behind(100)));
        assert!(Lag::from_offset_sum(-1, 100).is_err());
    }

    #[test]
    fn caught_up_respects_acceptable_lag() {
        assert!(Lag::Running.is_caught_up(0));
        assert!(Lag::Behind(10).is_caught_up(10));
        assert!(!Lag::Behind(11).is_caught_up(10));
        assert!(!Lag::Unknown.is_caught_up(10));
        assert!(Lag::Unknown.is_caught_up(i64::MAX as u64));
        assert!(Lag::Running < Lag::Behind(0) && Lag::Behind(5) < Lag::Unknown);
    }
}
