//! The consumer protocol envelope around Streams' metadata (`ConsumerProtocolSubscription` and
//! `ConsumerProtocolAssignment`, versions 0 to 3), decoded with every length checked: these
//! bytes come from other group members and may be garbage.
//!
//! Layout: `int16 version`, then
//! - subscription: `topics` (`int32 n` x `string`), `userData` (nullable `bytes`),
//!   v1+ `ownedPartitions` (`int32 n` x (`string topic`, `int32 k` x `int32`)),
//!   v2+ `int32 generationId`, v3+ `rackId` (nullable `string`);
//! - assignment: `assignedPartitions` (as ownedPartitions), `userData` (nullable `bytes`).
//!
//! Newer versions only append fields, so a newer blob is read as version 3 and the rest ignored.

use crate::codec::{Blob, DecodeError, Reader, Unwritable, Writer};
use crate::TopicPartition;

/// The newest consumer protocol version this module writes and fully reads.
pub const CONSUMER_PROTOCOL_VERSION: i16 = 3;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerSubscription {
    pub topics: Vec<String>,
    pub user_data: Option<Vec<u8>>,
    pub owned_partitions: Vec<TopicPartition>,
    pub generation_id: i32,
    pub rack_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerAssignment {
    pub partitions: Vec<TopicPartition>,
    pub user_data: Option<Vec<u8>>,
}

fn read_string(r: &mut Reader, field: &'static str) -> Result<String, DecodeError> {
    let at = r.position();
    r.nullable_string(field)?
        .ok_or_else(|| r.error(field, at, "is null"))
}

fn read_nullable_bytes(
    r: &mut Reader,
    field: &'static str,
) -> Result<Option<Vec<u8>>, DecodeError> {
    Ok(r.nullable_bytes(field)?.map(<[u8]>::to_vec))
}

fn read_partitions(
    r: &mut Reader,
    field: &'static str,
) -> Result<Vec<TopicPartition>, DecodeError> {
    let n = r.count(field, 6)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let topic = read_string(r, field)?;
        let k = r.count(field, 4)?;
        for _ in 0..k {
            out.push(TopicPartition {
                topic: topic.clone(),
                partition: r.i32(field)?,
            });
        }
    }
    Ok(out)
}

fn write_partitions(w: &mut Writer, ps: &[TopicPartition]) -> Result<(), Unwritable> {
    let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
    for p in ps {
        by_topic.entry(&p.topic).or_default().push(p.partition);
    }
    w.len(by_topic.len())?;
    for (topic, parts) in by_topic {
        w.nullable_string(Some(topic))?;
        w.len(parts.len())?;
        for p in parts {
            w.i32(p);
        }
    }
    Ok(())
}

fn write_nullable_bytes(w: &mut Writer, b: Option<&[u8]>) -> Result<(), Unwritable> {
    match b {
        None => {
            w.i32(-1);
            Ok(())
        }
        Some(b) => w.bytes(b),
    }
}

impl ConsumerSubscription {
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes, Blob::Subscription);
        let version = r.i16("consumer protocol version")?;
        if version < 0 {
            return Err(r.error(
                "consumer protocol version",
                0,
                format!("{version} is negative"),
            ));
        }
        // Before version 2 the generation is unknown: -1, as in Kafka.
        let mut s = ConsumerSubscription {
            generation_id: -1,
            ..Default::default()
        };
        let n = r.count("subscribed topics", 2)?;
        for _ in 0..n {
            s.topics.push(read_string(&mut r, "subscribed topics")?);
        }
        s.user_data = read_nullable_bytes(&mut r, "user data")?;
        if version >= 1 {
            s.owned_partitions = read_partitions(&mut r, "owned partitions")?;
        }
        if version >= 2 {
            s.generation_id = r.i32("generation id")?;
        }
        if version >= 3 {
            s.rack_id = r.nullable_string("rack id")?;
        }
        Ok(s)
    }

    pub fn encode(&self) -> Result<Vec<u8>, Unwritable> {
        let mut w = Writer::default();
        w.i16(CONSUMER_PROTOCOL_VERSION);
        w.len(self.topics.len())?;
        for t in &self.topics {
            w.nullable_string(Some(t))?;
        }
        write_nullable_bytes(&mut w, self.user_data.as_deref())?;
        write_partitions(&mut w, &self.owned_partitions)?;
        w.i32(self.generation_id);
        w.nullable_string(self.rack_id.as_deref())?;
        Ok(w.buf)
    }
}

impl ConsumerAssignment {
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes, Blob::Assignment);
        let version = r.i16("consumer protocol version")?;
        if version < 0 {
            return Err(r.error(
                "consumer protocol version",
                0,
                format!("{version} is negative"),
            ));
        }
        let partitions = read_partitions(&mut r, "assigned partitions")?;
        let user_data = read_nullable_bytes(&mut r, "user data")?;
        Ok(ConsumerAssignment {
            partitions,
            user_data,
        })
    }

    pub fn encode(&self) -> Result<Vec<u8>, Unwritable> {
        let mut w = Writer::default();
        w.i16(CONSUMER_PROTOCOL_VERSION);
        write_partitions(&mut w, &self.partitions)?;
        write_nullable_bytes(&mut w, self.user_data.as_deref())?;
        Ok(w.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_huge_lengths() {
        let s = ConsumerSubscription {
            topics: vec!["a".into(), "b".into()],
            user_data: Some(vec![1, 2, 3]),
            owned_partitions: vec![TopicPartition {
                topic: "a".into(),
                partition: 0,
            }],
            generation_id: 7,
            rack_id: Some("r1".into()),
        };
        assert_eq!(
            ConsumerSubscription::decode(&s.encode().unwrap()).unwrap(),
            s
        );
        let a = ConsumerAssignment {
            partitions: s.owned_partitions.clone(),
            user_data: None,
        };
        assert_eq!(ConsumerAssignment::decode(&a.encode().unwrap()).unwrap(), a);
        // "\0\3garbage!!": version 3, then a topic count of 0x67617262 ("garb").
        let e = ConsumerSubscription::decode(b"\x00\x03garbage!!")
            .unwrap_err()
            .to_string();
        assert!(e.contains("exceeds"), "{e}");
    }
}
