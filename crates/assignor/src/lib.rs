//! Baton's assignor: cluster state in, assignment out. Pure and deterministic, no I/O.
//!
//! ```
//! use baton_assignor::{assignor_by_name, input::parse_cluster_json};
//!
//! let cluster = parse_cluster_json(r#"{
//!   "tasks": [{"id": "0_0", "stateful": true, "end_offset_sum": 100}],
//!   "clients": [{"id": "a"}, {"id": "b"}]
//! }"#).unwrap();
//! let assignment = assignor_by_name("high-availability").unwrap().assign(&cluster);
//! assert!(!assignment.followup_rebalance);
//! ```

pub mod assignment;
mod client_state;
pub mod cluster;
pub mod config;
pub mod high_availability;
pub mod input;
pub mod kafka;
mod load;
pub mod model;
pub mod output;
pub mod sticky;

pub use assignment::{Assignment, ClientAssignment, PendingMove};
pub use cluster::{ClientSpec, Cluster, ClusterState, InputError, TaskSpec};
pub use config::AssignmentConfig;
pub use high_availability::HighAvailabilityAssignor;
pub use kafka::KafkaAssignor;
pub use model::{ClientId, Lag, Role, TaskId};
pub use sticky::StickyAssignor;

/// A task assignor: a pure function from cluster state to assignment.
pub trait TaskAssignor: Send + Sync {
    /// The name used by `--assignor`.
    fn name(&self) -> &'static str;
    /// Assigns every task. The same cluster gives the same assignment, always.
    fn assign(&self, cluster: &Cluster) -> Assignment;
}

/// The names accepted by [`assignor_by_name`], default first.
pub const ASSIGNOR_NAMES: [&str; 3] = ["high-availability", "kafka", "sticky"];

/// Looks an assignor up by its `--assignor` name.
pub fn assignor_by_name(name: &str) -> Option<Box<dyn TaskAssignor>> {
    match name {
        "high-availability" => Some(Box::new(HighAvailabilityAssignor)),
        "kafka" => Some(Box::new(KafkaAssignor)),
        "sticky" => Some(Box::new(StickyAssignor)),
        _ => None,
    }
}
