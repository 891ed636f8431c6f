//! The settings the thread machine reads.

/// Where a task reads a source partition from when its position is not there (the topic was
/// deleted and made again, or the broker deleted the records): `auto.offset.reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffsetReset {
    /// From the partition's first record (Kafka Streams' default).
    #[default]
    Earliest,
    /// From the partition's end: only records written from now on.
    Latest,
    /// Nowhere: the task stops, naming the partition and offset.
    None,
}

impl OffsetReset {
    /// The position to read from, given the partition's start and end; `None`: stop.
    pub fn position(self, earliest: i64, latest: i64) -> Option<i64> {
        match self {
            OffsetReset::Earliest => Some(earliest),
            OffsetReset::Latest => Some(latest),
            OffsetReset::None => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
            OffsetReset::None => "none",
        }
    }
}

impl std::str::FromStr for OffsetReset {
    type Err = baton_assignor::UnknownChoice;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "earliest" => Ok(OffsetReset::Earliest),
            "latest" => Ok(OffsetReset::Latest),
            "none" => Ok(OffsetReset::None),
            other => Err(baton_assignor::UnknownChoice {
                given: other.to_owned(),
                what: "an offset reset",
                choices: "earliest, latest or none",
            }),
        }
    }
}
