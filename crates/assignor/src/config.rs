//! Assignment settings, with Kafka Streams' names and defaults.

use serde::{Deserialize, Serialize};

/// The knobs of KIP-441. Field names on the wire are Kafka's config names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AssignmentConfig {
    /// A client whose lag is at most this is caught up: it may take the task over at once.
    #[serde(rename = "acceptable.recovery.lag")]
    pub acceptable_recovery_lag: u64,
    /// Warm-up replicas allowed in the whole group at once.
    #[serde(rename = "max.warmup.replicas")]
    pub max_warmup_replicas: u32,
    /// Standby replicas per stateful task.
    #[serde(rename = "num.standby.replicas")]
    pub num_standby_replicas: u32,
    /// How long to wait before the next probing rebalance while moves are pending.
    #[serde(rename = "probing.rebalance.interval.ms")]
    pub probing_rebalance_interval_ms: u64,
    /// How long a leaving client's tasks wait for warm-ups before they are handed to the most
    /// caught-up staying clients anyway (forced moves, which may restore before running).
    #[serde(rename = "scale.down.timeout.ms")]
    pub scale_down_timeout_ms: u64,
}

/// Thirty minutes: long enough for warm-ups of large state, short enough for a host swap.
pub const DEFAULT_SCALE_DOWN_TIMEOUT_MS: u64 = 30 * 60 * 1000;

impl Default for AssignmentConfig {
    fn default() -> Self {
        Self {
            acceptable_recovery_lag: 10_000,
            max_warmup_replicas: 2,
            num_standby_replicas: 0,
            probing_rebalance_interval_ms: 600_000,
            scale_down_timeout_ms: DEFAULT_SCALE_DOWN_TIMEOUT_MS,
        }
    }
}

impl AssignmentConfig {
    /// Kafka's validators: at least one warm-up, and probing no more often than once a minute.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.max_warmup_replicas < 1 {
            return Err(("max.warmup.replicas", "must be at least 1".into()));
        }
        if self.probing_rebalance_interval_ms < 60_000 {
            return Err((
                "probing.rebalance.interval.ms",
                format!(
                    "{} is below the minimum of 60000",
                    self.probing_rebalance_interval_ms
                ),
            ));
        }
        Ok(())
    }
}
