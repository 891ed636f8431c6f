//! Which assignor runs: parsed once at the edge (CLI flag, scenario file, config), then passed
//! around as this enum rather than as a name.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{HighAvailabilityAssignor, KafkaAssignor, StickyAssignor, TaskAssignor};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum AssignorKind {
    /// Baton's own: available, balanced, minimal movement, warm-ups, drains.
    #[default]
    HighAvailability,
    /// Kafka Streams' HighAvailabilityTaskAssignor, reproduced for comparison.
    Kafka,
    /// The pre-KIP-441 StickyTaskAssignor: lag-blind, no warm-ups.
    Sticky,
}

impl AssignorKind {
    /// Every kind, default first.
    pub const ALL: [AssignorKind; 3] = [
        AssignorKind::HighAvailability,
        AssignorKind::Kafka,
        AssignorKind::Sticky,
    ];

    /// The name used by `--assignor` and in files.
    pub fn name(self) -> &'static str {
        match self {
            AssignorKind::HighAvailability => "high-availability",
            AssignorKind::Kafka => "kafka",
            AssignorKind::Sticky => "sticky",
        }
    }

    pub fn assignor(self) -> Box<dyn TaskAssignor> {
        match self {
            AssignorKind::HighAvailability => Box::new(HighAvailabilityAssignor),
            AssignorKind::Kafka => Box::new(KafkaAssignor),
            AssignorKind::Sticky => Box::new(StickyAssignor),
        }
    }

    /// Whether leaving clients hand their tasks over through warm-ups (a drain).
    pub fn drains(self) -> bool {
        self == AssignorKind::HighAvailability
    }
}

impl fmt::Display for AssignorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown assignor name; the message lists the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown assignor {0:?} (known: high-availability, kafka, sticky)")]
pub struct UnknownAssignor(pub String);

impl FromStr for AssignorKind {
    type Err = UnknownAssignor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AssignorKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownAssignor(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known_ones() {
        for k in AssignorKind::ALL {
            assert_eq!(k.name().parse::<AssignorKind>(), Ok(k));
            assert_eq!(k.assignor().name(), k.name());
        }
        let err = "fast".parse::<AssignorKind>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown assignor \"fast\" (known: high-availability, kafka, sticky)"
        );
        assert_eq!(
            serde_json::to_string(&AssignorKind::HighAvailability).unwrap(),
            "\"high-availability\""
        );
    }
}
