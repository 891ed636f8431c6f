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

/// What becomes of a record that no record batch can carry (larger than the broker's
/// `message.max.bytes` or the topic's `max.message.bytes`) when a batch writes its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OversizedRecord {
    /// Stop the task that wrote it (it holds its partitions and processes nothing more until
    /// it moves or the instance restarts) with an error naming the task, partition and input
    /// offset; the instance and its other tasks go on. Kafka Streams' default production
    /// exception handler stops the whole stream thread.
    #[default]
    Fail,
    /// Drop the record, log it (task, partition, input offset) and count it in
    /// `baton_records_skipped_total`.
    Skip,
}

impl std::str::FromStr for OversizedRecord {
    type Err = baton_assignor::UnknownChoice;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail" => Ok(OversizedRecord::Fail),
            "skip" => Ok(OversizedRecord::Skip),
            other => Err(baton_assignor::UnknownChoice {
                given: other.to_owned(),
                what: "an oversized-record policy",
                choices: "fail or skip",
            }),
        }
    }
}
