//! Baton's assignor: cluster state in, assignment out. Pure and deterministic, no I/O.
//!
//! ```
//! use baton_assignor::{input::parse_cluster_json, AssignorKind};
//!
//! let cluster = parse_cluster_json(r#"{
//!   "tasks": [{"id": "0_0", "stateful": true, "end_offset_sum": 100}],
//!   "clients": [{"id": "a"}, {"id": "b"}]
//! }"#).unwrap();
//! let assignment = AssignorKind::HighAvailability.assignor().assign(&cluster);
//! assert!(!assignment.followup_rebalance);
//! ```

pub mod assignment;
mod client_state;
pub mod cluster;
pub mod config;
pub mod high_availability;
pub mod index;
pub mod input;
pub mod kafka;
mod kind;
mod load;
pub mod model;
pub mod output;
pub mod rack;
pub mod sticky;

pub use assignment::{Assignment, ClientAssignment, PendingMove};
pub use cluster::{ClientSpec, Cluster, ClusterState, InputError, SourcePartition, TaskSpec};
pub use config::{AssignmentConfig, RackStrategy, RejoinMode, UnknownChoice};
pub use high_availability::HighAvailabilityAssignor;
pub use kafka::KafkaAssignor;
pub use kind::{AssignorKind, UnknownAssignor};
pub use model::{ClientId, Lag, Role, TaskId, TopicPartition};
pub use sticky::StickyAssignor;

/// A task assignor: a pure function from cluster state to assignment.
pub trait TaskAssignor: Send + Sync {
    /// The name used by `--assignor`.
    fn name(&self) -> &'static str;
    /// Assigns every task. The same cluster gives the same assignment, always.
    fn assign(&self, cluster: &Cluster) -> Assignment;
}
