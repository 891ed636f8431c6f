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
    /// Balance tolerance in percent: while every client's tasks are within this much of its
    /// capacity share (and nothing else needs doing), nothing moves. 0 is strict balance.
    #[serde(rename = "stream.imbalance.percentage")]
    pub imbalance_percentage: u32,
    /// When a member with warm-ups rejoins for the hand-over: `eager` as soon as one of them
    /// has caught up, `stable` once all of a thread's have, `probing` never (the hand-over
    /// waits for the probing rebalance, as in Kafka Streams). Used by members and the
    /// simulator; the assignment itself does not depend on it.
    #[serde(rename = "warmup.rejoin.mode")]
    pub rejoin_mode: RejoinMode,
    /// Client tag keys (`client.tag.<key>`) whose values a task's copies should not share
    /// (KIP-708): every standby on a value of each key that its other copies are not on, where
    /// the key has enough values. Empty: copies prefer other racks (`client.rack`).
    #[serde(rename = "rack.aware.assignment.tags")]
    pub rack_aware_assignment_tags: Vec<String>,
    /// Whether actives are placed to cut cross-rack reads of their input partitions (KIP-925).
    #[serde(rename = "rack.aware.assignment.strategy")]
    pub rack_aware_strategy: RackStrategy,
    /// Cost of one input partition read from another rack; default 10 (Kafka's for its
    /// high-availability assignor).
    #[serde(rename = "rack.aware.assignment.traffic_cost")]
    pub rack_aware_traffic_cost: Option<i64>,
    /// Cost of running a task elsewhere than the balanced, sticky assignment puts it; default 1.
    #[serde(rename = "rack.aware.assignment.non_overlap_cost")]
    pub rack_aware_non_overlap_cost: Option<i64>,
}

/// `rack.aware.assignment.strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RackStrategy {
    /// Racks play no part in where actives run.
    #[default]
    None,
    /// Least total traffic cost, keeping every client's number of actives.
    MinTraffic,
    /// Least total traffic cost, keeping every client's number of actives of each subtopology.
    BalanceSubtopology,
}

impl RackStrategy {
    pub const ALL: [RackStrategy; 3] = [
        RackStrategy::None,
        RackStrategy::MinTraffic,
        RackStrategy::BalanceSubtopology,
    ];

    /// Kafka's name for it, as in the config.
    pub fn name(self) -> &'static str {
        match self {
            RackStrategy::None => "none",
            RackStrategy::MinTraffic => "min_traffic",
            RackStrategy::BalanceSubtopology => "balance_subtopology",
        }
    }
}

/// A name that is not one of the listed choices of a setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not {what} ({choices})")]
pub struct UnknownChoice {
    pub given: String,
    /// What the setting names, e.g. "a rejoin mode".
    pub what: &'static str,
    /// The choices, e.g. "eager, stable or probing".
    pub choices: &'static str,
}

impl std::str::FromStr for RackStrategy {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        RackStrategy::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownChoice {
                given: s.to_owned(),
                what: "a rack-aware strategy",
                choices: "none, min_traffic or balance_subtopology",
            })
    }
}

/// Kafka's defaults for its high-availability assignor.
pub const DEFAULT_TRAFFIC_COST: i64 = 10;
pub const DEFAULT_NON_OVERLAP_COST: i64 = 1;
/// Costs above this could overflow a sum over 50,000 tasks with many partitions each.
pub const MAX_RACK_COST: i64 = 1_000_000;

/// Kafka Streams' limits on client tags (StreamsConfig).
pub const MAX_TAGS: usize = 5;
pub const MAX_TAG_KEY_CHARS: usize = 20;
pub const MAX_TAG_VALUE_CHARS: usize = 30;

/// See [`AssignmentConfig::rejoin_mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejoinMode {
    #[default]
    Eager,
    Stable,
    Probing,
}

impl std::str::FromStr for RejoinMode {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        match s {
            "eager" => Ok(RejoinMode::Eager),
            "stable" => Ok(RejoinMode::Stable),
            "probing" => Ok(RejoinMode::Probing),
            other => Err(UnknownChoice {
                given: other.to_owned(),
                what: "a rejoin mode",
                choices: "eager, stable or probing",
            }),
        }
    }
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
            imbalance_percentage: 0,
            rejoin_mode: RejoinMode::Eager,
            rack_aware_assignment_tags: Vec::new(),
            rack_aware_strategy: RackStrategy::None,
            rack_aware_traffic_cost: None,
            rack_aware_non_overlap_cost: None,
        }
    }
}

impl AssignmentConfig {
    /// Kafka's validators: at least one warm-up, and probing no more often than once a minute.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.max_warmup_replicas < 1 {
            return Err(("max.warmup.replicas", "must be at least 1".into()));
        }
        if self.imbalance_percentage > 100 {
            return Err((
                "stream.imbalance.percentage",
                format!("{} is not 0 to 100", self.imbalance_percentage),
            ));
        }
        let tags = &self.rack_aware_assignment_tags;
        if tags.len() > MAX_TAGS {
            return Err((
                "rack.aware.assignment.tags",
                format!("{} keys, at most {MAX_TAGS}", tags.len()),
            ));
        }
        for (i, key) in tags.iter().enumerate() {
            if key.is_empty() || key.chars().count() > MAX_TAG_KEY_CHARS {
                return Err((
                    "rack.aware.assignment.tags",
                    format!("key {key:?} must be 1 to {MAX_TAG_KEY_CHARS} characters"),
                ));
            }
            if tags[..i].contains(key) {
                return Err((
                    "rack.aware.assignment.tags",
                    format!("key {key:?} given twice"),
                ));
            }
        }
        for (key, cost) in [
            (
                "rack.aware.assignment.traffic_cost",
                self.rack_aware_traffic_cost,
            ),
            (
                "rack.aware.assignment.non_overlap_cost",
                self.rack_aware_non_overlap_cost,
            ),
        ] {
            if let Some(c) = cost.filter(|c| !(0..=MAX_RACK_COST).contains(c)) {
                return Err((key, format!("{c} is not 0 to {MAX_RACK_COST}")));
            }
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

impl AssignmentConfig {
    /// `(traffic cost, non-overlap cost)`, defaults filled in.
    pub fn rack_costs(&self) -> (i64, i64) {
        (
            self.rack_aware_traffic_cost.unwrap_or(DEFAULT_TRAFFIC_COST),
            self.rack_aware_non_overlap_cost
                .unwrap_or(DEFAULT_NON_OVERLAP_COST),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rack_strategy_names_are_the_config_names() {
        for k in RackStrategy::ALL {
            assert_eq!(k.name().parse::<RackStrategy>(), Ok(k));
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.name())
            );
        }
        assert!("fastest"
            .parse::<RackStrategy>()
            .unwrap_err()
            .to_string()
            .contains("none, min_traffic or balance_subtopology"));
    }
}
