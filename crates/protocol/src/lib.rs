//! Kafka Streams-compatible rebalance metadata.
//!
//! During a rebalance every member sends a [`SubscriptionInfo`] and receives an
//! [`AssignmentInfo`], as opaque bytes inside the Kafka consumer group protocol. Versions 1 to
//! 11 are byte-compatible with Kafka Streams; version 12 is Baton's (see docs/PROTOCOL.md).
//! Decoding never panics and never allocates more than the input can hold.

pub mod assignment;
pub mod bridge;
pub mod codec;
pub mod consumer;
mod java_utf;
pub mod leader;
pub mod sizing;
pub mod subscription;

pub use assignment::{
    error_code, AssignmentInfo, HostInfo, HostPartitions, StandbyTask, TopicIndex, TopicPartition,
};
pub use codec::{DecodeError, EncodeError, Unwritable};
pub use subscription::{ClientTag, SubscriptionInfo, TaskOffsetSum};

/// The newest version Kafka Streams speaks.
pub const KAFKA_LATEST_VERSION: i32 = 11;
/// The newest version Baton speaks: 11 plus warm-ups in the assignment.
pub const BATON_VERSION: i32 = 12;
/// The oldest version that carries `latestSupportedVersion`, so can be probed.
pub const EARLIEST_PROBEABLE_VERSION: i32 = 3;
/// Kafka's "unknown" for versions not on the wire.
pub const UNKNOWN_VERSION: i32 = -1;

/// Client tag marking a member that is leaving (being drained). Kafka Streams ignores tags
/// that `rack.aware.assignment.tags` does not name.
pub const TAG_LEAVING: &str = "baton.leaving";
/// When the member started leaving, in epoch milliseconds: the leader's clock for the
/// scale-down timeout (it survives a change of leader).
pub const TAG_LEAVING_SINCE: &str = "baton.leaving.since";
/// Client tag listing the tasks a member is warming up, comma-separated (`0_1,2_3`).
pub const TAG_WARMUPS: &str = "baton.warmups";
