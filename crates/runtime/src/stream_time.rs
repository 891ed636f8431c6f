//! A task's stream time, kept across owners the way Kafka Streams keeps it: committed beside
//! each input offset as the offset's metadata (`TopicPartitionMetadata`: Base64 of a version
//! byte and the partition time, 8 bytes big-endian). A new owner starts from it, so a record
//! late for its window is dropped whichever instance reads it, and Java and Baton members of
//! one application read each other's.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// Stream time before any record: Kafka Streams' `RecordQueue.UNKNOWN`.
pub const UNKNOWN: i64 = -1;

/// Version 1 of Kafka Streams' offset metadata: the partition time alone. Every Kafka
/// Streams release since 2.4 reads it.
const VERSION: u8 = 1;

/// The metadata to commit beside an offset for a task at `stream_time`.
pub fn encode(stream_time: i64) -> String {
    let mut bytes = [0u8; 9];
    bytes[0] = VERSION;
    bytes[1..].copy_from_slice(&stream_time.to_be_bytes());
    STANDARD.encode(bytes)
}

/// The stream time in committed metadata; [`UNKNOWN`] when there is none or it cannot be
/// read (as Kafka Streams reads it: a warning there, a fresh start here).
pub fn decode(metadata: Option<&str>) -> i64 {
    let Some(bytes) = metadata.and_then(|m| STANDARD.decode(m).ok()) else {
        return UNKNOWN;
    };
    match bytes.split_first() {
        // Version 2 appends processor metadata after the time; the time is read alike.
        Some((1 | 2, rest)) => rest
            .get(..8)
            .and_then(|t| t.try_into().ok())
            .map_or(UNKNOWN, i64::from_be_bytes),
        _ => UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_what_kafka_streams_writes() {
        for t in [UNKNOWN, 0, 1_700_000_000_123, i64::MAX] {
            assert_eq!(decode(Some(&encode(t))), t);
        }
        // Kafka Streams 3.x writes version 2: magic 2, the time, then processor metadata.
        let mut v2 = vec![2u8];
        v2.extend_from_slice(&42i64.to_be_bytes());
        v2.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(decode(Some(&STANDARD.encode(v2))), 42);
        assert_eq!(encode(42), "AQAAAAAAAAAq");
    }

    #[test]
    fn anything_else_is_unknown() {
        for m in [
            None,
            Some(""),
            Some("not base64!"),
            Some("AQAA"),
            Some("CQAAAAAAAAAq"),
        ] {
            assert_eq!(decode(m), UNKNOWN, "{m:?}");
        }
    }
}
