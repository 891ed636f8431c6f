//! An instance's configuration. Names follow Kafka Streams' where one exists.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use baton_assignor::{AssignmentConfig, AssignorKind};

#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// `bootstrap.servers`.
    pub bootstrap: Vec<String>,
    /// `state.dir`: one directory per task under it, kept when a task moves away.
    pub state_dir: PathBuf,
    /// This instance's name: the target of `baton drain`, and the base of each stream
    /// thread's `group.instance.id` when `static_membership` is on.
    pub instance_id: String,
    /// `num.stream.threads`: the instance's capacity.
    pub threads: u32,
    /// How many cores one stream thread may run its tasks' batches on at once (each task's
    /// batches still one after another, in order): 0, the machine's cores shared among the
    /// stream threads; 1, one batch at a time, as a Kafka Streams thread runs its tasks.
    pub batch_cores: u32,
    /// The assignor the group leader runs.
    pub assignor: AssignorKind,
    /// `acceptable.recovery.lag`, `max.warmup.replicas`, `num.standby.replicas`,
    /// `probing.rebalance.interval.ms`.
    pub assignment: AssignmentConfig,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `commit.interval.ms`: input offsets are committed at least this often (and before
    /// every rebalance).
    pub commit_interval: Duration,
    /// Most bytes one changelog fetch returns while restoring or tailing.
    pub restore_fetch_bytes: i32,
    /// The same while the thread runs an active beside the restore (restore yields: smaller
    /// chunks, so each round of the thread loop gets back to the input sooner).
    pub restore_fetch_bytes_beside_actives: i32,
    /// `state.cleanup.delay.ms`: a task directory unused this long is deleted.
    pub state_cleanup_delay: Duration,
    /// Where `/metrics` is served, if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    /// Use `group.instance.id` (`<instance_id>-<thread>`), so a restart within the session
    /// timeout causes no rebalance.
    pub static_membership: bool,
    /// `application.server`: `host:port` for interactive queries, or empty.
    pub user_endpoint: String,
    /// `statestore.cache.max.bytes`: above 0, the record cache from one commit to the next
    /// ([`crate::cache`]); 0 writes every update with its batch.
    pub cache_max_bytes: u64,
    /// What to do with an output record larger than any batch the broker takes.
    pub on_oversized_record: OversizedRecord,
    /// `auto.offset.reset`: where to read a source partition whose position is gone.
    pub auto_offset_reset: OffsetReset,
    /// An output topic found deleted while running is made again (with the partitions it had
    /// at start) rather than waited for.
    pub create_missing_outputs: bool,
    /// `task.retry.ms`: a task stopped by a record it cannot process is tried again after
    /// this long, doubling after each failure; `None`: never (until it moves or a restart).
    pub task_retry: Option<std::time::Duration>,
    /// What to do with an input record the application's code fails on (it panics).
    pub on_processing_error: ProcessingErrorPolicy,
    /// What to do with an input record whose bytes its serdes cannot read.
    pub on_deserialization_error: ProcessingErrorPolicy,
    /// How long startup (topic metadata, creating changelog and sink topics) may wait for the
    /// broker before the instance gives up with an error.
    pub startup_timeout: Duration,
    /// `client.rack`: where this instance runs (a rack, a zone). Standbys go to other racks.
    pub rack: Option<String>,
    /// `client.tag.<key>` = value (KIP-708), at most 5 keys; keys starting `baton.` are Baton's.
    pub client_tags: Vec<(String, String)>,
    /// The newest rebalance metadata version this instance subscribes and leads at: Baton's
    /// own (12), or 11 to speak exactly as Kafka Streams 3.x does (no warm-up list in
    /// assignments) beside older Kafka Streams members.
    pub max_protocol_version: i32,
}

/// The oldest version `max_protocol_version` takes: from 7 subscriptions carry offset sums,
/// which warm-ups and the caught-up check need.
pub const MIN_PROTOCOL_VERSION: i32 = 7;

/// `statestore.cache.max.bytes` unless set: Kafka Streams' default, 10 MiB.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 10 * 1024 * 1024;

pub use baton_core::config::{OffsetReset, OversizedRecord};

/// A setting the types allow but the runtime cannot use: which, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct ConfigError {
    pub field: String,
    pub problem: String,
}

impl ConfigError {
    fn new(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// A policy flag's value that names no policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{0:?} is not a policy: {1}")]
    Unknown(String, &'static str),
    #[error("dead-letter= needs a topic: dead-letter=TOPIC")]
    NoDeadLetterTopic,
}

/// What a task does with an input record its application code fails on (a panic in a step),
/// as Kafka Streams' `processing.exception.handler` (KIP-1033) and its dead-letter queue
/// (KIP-1034). Whatever the policy, a failed record leaves no store write and no output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ProcessingErrorPolicy {
    /// Stop that task only, naming topic, partition and offset; every other task goes on. The
    /// task keeps its partitions and commits nothing past the record.
    #[default]
    Fail,
    /// Drop the record, log it (rate-limited) and count it in `baton_records_skipped_total`.
    Skip,
    /// Write the record, key and value as they came, to this topic, then go on as `skip`.
    DeadLetter(String),
}

impl std::str::FromStr for ProcessingErrorPolicy {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, PolicyError> {
        match s {
            "fail" => Ok(ProcessingErrorPolicy::Fail),
            "skip" => Ok(ProcessingErrorPolicy::Skip),
            other => match other.strip_prefix("dead-letter=") {
                Some("") => Err(PolicyError::NoDeadLetterTopic),
                Some(topic) => Ok(ProcessingErrorPolicy::DeadLetter(topic.to_owned())),
                None => Err(PolicyError::Unknown(
                    other.to_owned(),
                    "fail, skip or dead-letter=TOPIC",
                )),
            },
        }
    }
}

impl ProcessingErrorPolicy {
    /// The dead-letter topic, if records go to one.
    pub fn dead_letter_topic(&self) -> Option<&str> {
        match self {
            ProcessingErrorPolicy::DeadLetter(topic) => Some(topic),
            _ => None,
        }
    }
}

impl RuntimeConfig {
    /// The dead-letter topics of both policies, each once.
    pub fn dead_letter_topics(&self) -> Vec<&str> {
        let mut topics: Vec<&str> = [&self.on_processing_error, &self.on_deserialization_error]
            .into_iter()
            .filter_map(ProcessingErrorPolicy::dead_letter_topic)
            .collect();
        topics.dedup();
        topics
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            bootstrap: vec!["127.0.0.1:9092".into()],
            state_dir: PathBuf::from("/tmp/baton"),
            instance_id: String::new(),
            threads: 1,
            batch_cores: 0,
            assignor: AssignorKind::HighAvailability,
            assignment: AssignmentConfig::default(),
            session_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_millis(500),
            commit_interval: Duration::from_secs(1),
            restore_fetch_bytes: 4 << 20,
            // Measured with `baton bench warmup` (docs/BENCHMARKS.md).
            restore_fetch_bytes_beside_actives: 1 << 20,
            state_cleanup_delay: Duration::from_secs(600),
            metrics_addr: None,
            static_membership: false,
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            on_oversized_record: OversizedRecord::Fail,
            auto_offset_reset: OffsetReset::Earliest,
            task_retry: None,
            create_missing_outputs: false,
            on_processing_error: ProcessingErrorPolicy::Fail,
            on_deserialization_error: ProcessingErrorPolicy::Fail,
            startup_timeout: Duration::from_secs(60),
            rack: None,
            client_tags: Vec::new(),
            user_endpoint: String::new(),
            max_protocol_version: baton_protocol::BATON_VERSION,
        }
    }
}

impl RuntimeConfig {
    /// `rebalance.timeout.ms`: how long the coordinator waits for members to rejoin (Kafka
    /// Streams uses `max.poll.interval.ms`; a thread here rejoins without waiting for work).
    pub fn rebalance_timeout(&self) -> Duration {
        self.session_timeout.max(Duration::from_secs(30))
    }

    /// Each data request's deadline: a third of the session timeout, so a write that hangs
    /// fails, and a thread stops writing, well before the coordinator could give up on it.
    pub fn request_timeout(&self) -> Duration {
        (self.session_timeout / 3).clamp(Duration::from_millis(500), Duration::from_secs(30))
    }

    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.bootstrap.is_empty() {
            return Err(ConfigError::new("bootstrap", "at least one broker address"));
        }
        if !self.user_endpoint.is_empty()
            && crate::query::routing::parse_endpoint(&self.user_endpoint).is_none()
        {
            return Err(ConfigError::new(
                "application_server",
                format!("{:?} is not HOST:PORT", self.user_endpoint),
            ));
        }
        let versions = MIN_PROTOCOL_VERSION..=baton_protocol::BATON_VERSION;
        if !versions.contains(&self.max_protocol_version) {
            return Err(ConfigError::new(
                "max_protocol_version",
                format!(
                    "{} is not between {} and {}",
                    self.max_protocol_version,
                    versions.start(),
                    versions.end()
                ),
            ));
        }
        if self.instance_id.is_empty() {
            return Err(ConfigError::new("instance_id", "must not be empty"));
        }
        if !(1..=64).contains(&self.threads) {
            return Err(ConfigError::new(
                "threads",
                format!("{} is not in 1..=64", self.threads),
            ));
        }
        if self.heartbeat_interval >= self.session_timeout {
            return Err(ConfigError::new(
                "heartbeat_interval",
                "must be shorter than session_timeout",
            ));
        }
        if self.restore_fetch_bytes < 1024 || self.restore_fetch_bytes_beside_actives < 1024 {
            return Err(ConfigError::new(
                "restore_fetch_bytes and restore_fetch_bytes_beside_actives",
                "at least 1024",
            ));
        }
        if self.rack.as_deref() == Some("") {
            return Err(ConfigError::new(
                "client.rack",
                "must not be empty when given",
            ));
        }
        // Kafka Streams' limits (StreamsConfig): at most 5 tags, keys of at most 20 characters
        // and values of at most 30; `baton.` keys carry Baton's own flags.
        if self.client_tags.len() > 5 {
            return Err(ConfigError::new(
                "client.tag",
                format!("{} tags, at most 5", self.client_tags.len()),
            ));
        }
        let mut keys = std::collections::BTreeSet::new();
        for (i, (k, v)) in self.client_tags.iter().enumerate() {
            let at = format!("client.tag[{i}]");
            if k.is_empty() || k.chars().count() > 20 || v.chars().count() > 30 {
                return Err(ConfigError::new(
                    at,
                    format!(
                        "the key must be 1 to 20 characters and the value at most 30 ({k:?}={v:?})"
                    ),
                ));
            }
            if k.starts_with("baton.") {
                return Err(ConfigError::new(
                    at,
                    format!("key {k:?}: keys starting with \"baton.\" are reserved"),
                ));
            }
            if !keys.insert(k.as_str()) {
                return Err(ConfigError::new(at, format!("key {k:?} given twice")));
            }
        }
        self.assignment
            .validate()
            .map_err(|(field, e)| ConfigError::new(format!("assignment.{field}"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processing_error_policies_parse_and_bad_ones_say_why() {
        let p = |s: &str| s.parse::<ProcessingErrorPolicy>();
        assert_eq!(p("fail"), Ok(ProcessingErrorPolicy::Fail));
        assert_eq!(p("skip"), Ok(ProcessingErrorPolicy::Skip));
        assert_eq!(
            p("dead-letter=dlq"),
            Ok(ProcessingErrorPolicy::DeadLetter("dlq".into()))
        );
        assert!(p("dead-letter=")
            .unwrap_err()
            .to_string()
            .contains("needs a topic"));
        assert!(p("ignore")
            .unwrap_err()
            .to_string()
            .contains("\"ignore\" is not a policy"));
    }
}
