//! Restoring a store from its changelog: from the store's checkpoint to the end of the log,
//! one atomic batch per fetched chunk, so an interrupted restore resumes where it stopped.

use std::sync::Arc;
use std::time::Instant;

use baton_kafka::Client;

use bytes::Bytes;

use crate::store::{StoreError, TaskStore};

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("changelog {topic}-{partition}: {source}")]
    Kafka {
        topic: String,
        partition: i32,
        source: baton_kafka::Error,
    },
    #[error(
        "changelog {topic}-{partition}: no records from offset {offset} though the end is {end}"
    )]
    Stuck {
        topic: String,
        partition: i32,
        offset: i64,
        end: i64,
    },
    #[error("changelog {topic}-{partition}: record at offset {offset} has no key")]
    NoKey {
        topic: String,
        partition: i32,
        offset: i64,
    },
}

/// Fetches in a row that may return nothing below the end before the restore gives up.
const MAX_IDLE_ROUNDS: u32 = 20;

/// What one restore did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestoreStats {
    pub from_offset: i64,
    pub to_offset: i64,
    pub records: u64,
    pub seconds: f64,
}

/// Records gathered before one bulk load into the store. Larger loads mean fewer tables for
/// the LSM to compact later; this many small records is about 30 MB.
pub const INGEST_RECORDS: usize = 500_000;

/// Applies the changelog `topic`-`partition` to `store` from its checkpoint up to `end`
/// (exclusive), fetching at most `max_bytes` at a time. The next fetch is in flight while a
/// chunk is loaded into the store, and chunks are bulk-loaded ([`TaskStore::ingest`]).
pub async fn restore(
    client: &Arc<Client>,
    leader: &str,
    topic: &str,
    partition: i32,
    store: &TaskStore,
    end: i64,
    max_bytes: i32,
) -> Result<RestoreStats, RestoreError> {
    let start = Instant::now();
    let from = store.checkpoint()?.unwrap_or(0);
    let mut next = from;
    let mut records = 0u64;
    let kafka = |source| RestoreError::Kafka {
        topic: topic.to_owned(),
        partition,
        source,
    };
    let spawn_fetch = |offset: i64| {
        let (client, leader, topic) = (client.clone(), leader.to_owned(), topic.to_owned());
        tokio::spawn(async move {
            client
                .fetch(&leader, &topic, partition, offset, max_bytes, 500)
                .await
        })
    };
    let mut buffer: Vec<(Bytes, Option<Bytes>)> = Vec::new();
    let mut idle_rounds = 0;
    let mut inflight = (next < end).then(|| spawn_fetch(next));
    while let Some(handle) = inflight.take() {
        let fetched = handle
            .await
            .map_err(|e| kafka(baton_kafka::Error::Protocol(format!("fetch task: {e}"))))?
            .map_err(kafka)?;
        let mut reached = next;
        let before = buffer.len();
        for r in fetched.records.iter().take_while(|r| r.offset < end) {
            let key = r.key.as_ref().ok_or(RestoreError::NoKey {
                topic: topic.to_owned(),
                partition,
                offset: r.offset,
            })?;
            buffer.push((key.clone(), r.value.clone()));
            reached = r.offset + 1;
        }
        // Batches whose records were compacted away or are control records still end somewhere.
        reached = reached.max(fetched.next_offset.unwrap_or(next).min(end));
        if reached <= next {
            idle_rounds += 1;
            if idle_rounds > MAX_IDLE_ROUNDS {
                return Err(RestoreError::Stuck {
                    topic: topic.to_owned(),
                    partition,
                    offset: next,
                    end,
                });
            }
            inflight = Some(spawn_fetch(next));
            continue;
        }
        idle_rounds = 0;
        records += (buffer.len() - before) as u64;
        next = reached;
        if next < end {
            inflight = Some(spawn_fetch(next));
        }
        if buffer.len() >= INGEST_RECORDS || next >= end {
            store.ingest(std::mem::take(&mut buffer), next)?;
        }
    }
    // Records up to `end` may have been compacted away: the store has everything there is.
    // This last commit is durable, and makes every lazy one before it durable too.
    next = next.max(end);
    store.apply(&[], Some(next))?;
    Ok(RestoreStats {
        from_offset: from,
        to_offset: next,
        records,
        seconds: start.elapsed().as_secs_f64(),
    })
}
