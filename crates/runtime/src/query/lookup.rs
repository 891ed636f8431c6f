//! A query checked and resolved to the task that holds its key: the store exists and is of
//! the kind asked, the key parses in its serde, every parameter is in range. Shared by the
//! HTTP endpoints and the in-process API.

use std::time::Instant;

use axum::http::StatusCode;
use baton_assignor::TaskId;
use baton_protocol::TopicPartition;
use serde_json::json;

use crate::query::copies::RangeBounds;
use crate::query::engine::Engine;
use crate::query::format::{parse_hex, StoreFormat};
use crate::query::metrics::Outcome;
use crate::query::plan::{Ask, Bound};
use crate::topology::{StoreInfo, StoreKind};

/// A range scan's page size unless `limit` says otherwise, and the largest it may say.
pub const DEFAULT_LIMIT: usize = 100;
pub const LARGEST_LIMIT: usize = 1000;

/// A query refused for what it asked: 400 (a malformed key or parameter) or 404 (no store),
/// with what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QueryError {
    pub status: StatusCode,
    pub message: String,
}

impl QueryError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> QueryError {
        QueryError {
            status,
            message: message.into(),
        }
    }

    pub fn bad(message: impl Into<String>) -> QueryError {
        QueryError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn outcome(&self) -> Outcome {
        if self.status == StatusCode::NOT_FOUND {
            Outcome::NotFound
        } else {
            Outcome::BadRequest
        }
    }

    pub fn body(&self) -> serde_json::Value {
        json!({ "error": self.message })
    }
}

pub type QueryResult<T> = std::result::Result<T, QueryError>;

/// A key as the caller gives it.
#[derive(Debug, Clone, Copy)]
pub enum KeyArg<'a> {
    /// The key serde's text form (the string, or a decimal number).
    Text(&'a str),
    /// `key_hex=`.
    Hex(&'a str),
    /// The serialized key (in-process callers).
    Bytes(&'a [u8]),
}

/// Whether the query came from another instance, and when it must be answered by.
#[derive(Debug, Clone, Copy)]
pub struct Hop {
    pub forwarded: bool,
    pub deadline: Instant,
}

/// What a query reads.
#[derive(Debug, Clone)]
pub enum Op {
    Key(Vec<u8>),
    Range(RangeBounds),
    /// The windows of one key that start in `from..=to` (milliseconds).
    Windows {
        key: Vec<u8>,
        from: i64,
        to: i64,
    },
}

/// A position on an input upstream of the store (word count's lines, before the repartition
/// topic its counts read): the answer waits for every record derived from input up to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub input: TopicPartition,
    pub offset: i64,
    /// The sub-topologies from the one reading `input` to the store's, each with the topic it
    /// reads there ([`crate::topology::Topology::path_from`]).
    pub path: Vec<(u32, String)>,
}

/// A query, checked and resolved to its task.
#[derive(Debug, Clone)]
pub struct Lookup {
    pub store: String,
    pub info: StoreInfo,
    pub op: Op,
    pub task: TaskId,
    pub source: TopicPartition,
    /// `at_least=`: the offset of `source` the answer must have processed.
    pub at_least: Option<i64>,
    /// `at_least=` on an input upstream of the store, until it is resolved to `at_least`.
    pub upstream: Option<Upstream>,
    pub ask: Ask,
    pub deadline: Instant,
}

impl Engine {
    /// The store, checked: known, and a window store exactly when `windows` asks for one;
    /// with its partition count.
    pub fn store(&self, store: &str, windows: bool) -> QueryResult<(StoreInfo, u32)> {
        let ctx = &self.ctx;
        let Some(info) = ctx.topology.store_info(store) else {
            return Err(QueryError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "no store {store:?}; this application has {:?}",
                    ctx.topology.store_names()
                ),
            ));
        };
        let wrong = match (info.kind(), windows) {
            (StoreKind::Session, false) => Some(format!(
                "store {store:?} is a session store: ask /v1/stores/{store}/keys/{{key}}/windows for its sessions"
            )),
            (StoreKind::Window, false) => Some(format!(
                "store {store:?} is a window store: ask /v1/stores/{store}/keys/{{key}}/windows"
            )),
            (StoreKind::KeyValue, true) => Some(format!(
                "store {store:?} is a key-value store: it has no windows"
            )),
            _ => None,
        };
        if let Some(why) = wrong {
            return Err(QueryError::bad(why));
        }
        let Some(sub) = ctx.wire.subtopologies.get(&info.subtopology) else {
            return Err(QueryError::new(
                StatusCode::NOT_FOUND,
                format!("store {store:?} has no tasks"),
            ));
        };
        Ok((info, sub.partitions.max(1)))
    }

    /// One key of a key-value store; `at_least` is `TOPIC:PARTITION:OFFSET`.
    pub fn key_lookup(
        &self,
        store: &str,
        key: KeyArg<'_>,
        bound: Bound,
        at_least: Option<&str>,
        hop: Hop,
    ) -> QueryResult<Lookup> {
        let (info, partitions) = self.store(store, false)?;
        let key = key_bytes(&info, key)?;
        let task = TaskId::new(
            info.subtopology,
            crate::partitioner::partition_for(&key, partitions),
        );
        let source = self.source(store, task)?;
        let (at_least, upstream) = match at_least {
            None => (None, None),
            Some(a) => self.at_least(a, &source, info.subtopology)?,
        };
        Ok(Lookup {
            store: store.to_owned(),
            info,
            op: Op::Key(key),
            task,
            source,
            at_least,
            upstream: upstream.clone(),
            ask: Ask {
                bound,
                forwarded: hop.forwarded,
                read_your_writes: at_least.is_some() || upstream.is_some(),
            },
            deadline: hop.deadline,
        })
    }

    /// An ordered scan of one partition of a key-value store.
    pub fn range_lookup(
        &self,
        store: &str,
        partition: u32,
        bounds: RangeBounds,
        bound: Bound,
        hop: Hop,
    ) -> QueryResult<Lookup> {
        let (info, partitions) = self.store(store, false)?;
        if partition >= partitions {
            return Err(QueryError::bad(format!(
                "partition {partition}: store {store:?} has partitions 0 to {}",
                partitions - 1
            )));
        }
        if bounds.limit == 0 || bounds.limit > LARGEST_LIMIT {
            return Err(QueryError::bad(format!(
                "limit: {} is not between 1 and {LARGEST_LIMIT}",
                bounds.limit
            )));
        }
        let task = TaskId::new(info.subtopology, partition);
        let source = self.source(store, task)?;
        Ok(Lookup {
            store: store.to_owned(),
            info,
            op: Op::Range(bounds),
            task,
            source,
            at_least: None,
            upstream: None,
            ask: Ask {
                bound,
                forwarded: hop.forwarded,
                read_your_writes: false,
            },
            deadline: hop.deadline,
        })
    }

    /// The windows of one key of a window store that start in `from..=to`.
    pub fn windows_lookup(
        &self,
        store: &str,
        key: KeyArg<'_>,
        (from, to): (i64, i64),
        bound: Bound,
        hop: Hop,
    ) -> QueryResult<Lookup> {
        let (info, partitions) = self.store(store, true)?;
        let key = key_bytes(&info, key)?;
        if from < 0 || to < from {
            return Err(QueryError::bad(format!(
                "from={from}, to={to}: window starts run from 0, and to must not be below from"
            )));
        }
        let task = TaskId::new(
            info.subtopology,
            crate::partitioner::partition_for(&key, partitions),
        );
        let source = self.source(store, task)?;
        Ok(Lookup {
            store: store.to_owned(),
            info,
            op: Op::Windows { key, from, to },
            task,
            source,
            at_least: None,
            upstream: None,
            ask: Ask {
                bound,
                forwarded: hop.forwarded,
                read_your_writes: false,
            },
            deadline: hop.deadline,
        })
    }

    /// `TOPIC:PARTITION:OFFSET` on the store's own source partition (`source`), or on an
    /// input upstream of the store's sub-topology `sub` (to be resolved before the read).
    fn at_least(
        &self,
        text: &str,
        source: &TopicPartition,
        sub: u32,
    ) -> QueryResult<(Option<i64>, Option<Upstream>)> {
        let bad = |e: String| QueryError::bad(format!("at_least: {e}"));
        let (input, offset) = parse_position(text)?;
        if input.topic == source.topic {
            if input.partition != source.partition {
                return Err(bad(format!(
                    "{}:{} is not where this key lives ({}:{})",
                    input.topic, input.partition, source.topic, source.partition
                )));
            }
            return Ok((Some(offset), None));
        }
        let topology = &self.ctx.topology;
        let Some(path) = topology.path_from(&input.topic, sub) else {
            let inputs: Vec<&str> = topology
                .source_topics()
                .into_iter()
                .filter(|t| topology.path_from(t, sub).is_some())
                .collect();
            return Err(bad(format!(
                "topic {:?} does not feed this store; these do: {inputs:?}",
                input.topic
            )));
        };
        if path.last().is_none_or(|(_, t)| *t != source.topic) {
            return Err(bad(format!(
                "topic {:?} reaches this store through {:?}, not its source {:?}: not supported",
                input.topic,
                path.last().map(|(_, t)| t),
                source.topic
            )));
        }
        let partitions = self
            .ctx
            .wire
            .subtopologies
            .get(&path[0].0)
            .map_or(0, |s| s.partitions);
        if input.partition < 0 || input.partition as u32 >= partitions {
            return Err(bad(format!(
                "partition {} of {:?}: it has partitions 0 to {}",
                input.partition,
                input.topic,
                partitions.saturating_sub(1)
            )));
        }
        Ok((
            None,
            Some(Upstream {
                input,
                offset,
                path,
            }),
        ))
    }

    /// The first source partition of `task`: where the assignment's host maps list it.
    fn source(&self, store: &str, task: TaskId) -> QueryResult<TopicPartition> {
        self.ctx
            .wire
            .source_partitions(task)
            .into_iter()
            .next()
            .ok_or_else(|| {
                QueryError::new(
                    StatusCode::NOT_FOUND,
                    format!("store {store:?} has no source"),
                )
            })
    }
}

/// A key in the store's key serde.
fn key_bytes(info: &StoreInfo, key: KeyArg<'_>) -> QueryResult<Vec<u8>> {
    key_bytes_as(info.format, key)
}

/// A query's key as the bytes a store of `format` holds it under.
pub(crate) fn key_bytes_as(format: StoreFormat, key: KeyArg<'_>) -> QueryResult<Vec<u8>> {
    match key {
        KeyArg::Hex(h) => parse_hex(h).map_err(|e| format!("key_hex: {e}")),
        KeyArg::Text(t) => format.key.parse_key(t).map_err(|e| format!("key: {e}")),
        KeyArg::Bytes(b) => Ok(b.to_vec()),
    }
    .map_err(QueryError::bad)
}

/// `TOPIC:PARTITION:OFFSET` (a topic's name may hold colons), as `at_least=` gives it.
fn parse_position(text: &str) -> QueryResult<(TopicPartition, i64)> {
    let bad = |e: String| QueryError::bad(format!("at_least: {e}"));
    let mut parts = text.rsplitn(3, ':');
    let (offset, partition, topic) = (parts.next(), parts.next(), parts.next());
    let (Some(offset), Some(partition), Some(topic)) = (offset, partition, topic) else {
        return Err(bad(format!("{text:?} is not TOPIC:PARTITION:OFFSET")));
    };
    let offset: i64 = offset
        .parse()
        .map_err(|_| bad(format!("offset {offset:?} is not a number")))?;
    let partition: i32 = partition
        .parse()
        .map_err(|_| bad(format!("partition {partition:?} is not a number")))?;
    Ok((TopicPartition::new(topic, partition), offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_topic_partition_offset() {
        assert_eq!(
            parse_position("ev:ents:2:41"),
            Ok((TopicPartition::new("ev:ents", 2), 41))
        );
        let refused = |text: &str| parse_position(text).unwrap_err().message;
        assert!(refused("41").contains("TOPIC:PARTITION:OFFSET"));
        assert!(refused("ev:ents:2:x").contains("offset"));
        assert!(refused("ev:x:41").starts_with("at_least: partition \"x\""));
    }
}
