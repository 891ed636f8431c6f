//! Restoring a store from its changelog: from the store's checkpoint to the end of the log,
//! one atomic batch per fetched chunk, so an interrupted restore resumes where it stopped.

use std::time::Instant;

use baton_kafka::Client;

use crate::store::{StoreError, TaskStore, Write};

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
    #[error("changelog {topic}-{partition}: record at offset {offset} has no key")]
    NoKey {
        topic: String,
        partition: i32,
        offset: i64,
    },
}

/// What one restore did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestoreStats {
    pub from_offset: i64,
    pub to_offset: i64,
    pub records: u64,
    pub seconds: f64,
}

/// Applies the changelog `topic`-`partition` to `store` from its checkpoint up to `end`
/// (exclusive), fetching at most `max_bytes` at a time.
pub async fn restore(
    client: &Client,
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
    while next < end {
        let fetched = client
            .fetch(leader, topic, partition, next, max_bytes, 500)
            .await
            .map_err(kafka)?;
        let mut writes: Vec<Write> = Vec::with_capacity(fetched.records.len());
        let mut last = None;
        for r in fetched.records.iter().take_while(|r| r.offset < end) {
            let key = r.key.as_ref().ok_or(RestoreError::NoKey {
                topic: topic.to_owned(),
                partition,
                offset: r.offset,
            })?;
            writes.push((key.to_vec(), r.value.as_ref().map(|v| v.to_vec())));
            last = Some(r.offset);
        }
        let Some(last) = last else {
            // Nothing left below `end` (compaction can leave gaps up to it).
            break;
        };
        records += writes.len() as u64;
        next = last + 1;
        store.apply_lazily(&writes, Some(next))?;
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
