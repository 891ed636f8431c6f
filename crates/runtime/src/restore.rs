//! Restoring one store from its changelog, from its checkpoint to a given end, outside any
//! instance: for tools and the restore benchmark. It runs the runtime's own catch-up
//! ([`Catchup`]), with the next fetch in flight while a chunk is loaded.

use std::sync::Arc;
use std::time::Instant;

use baton_kafka::Client;

use crate::catchup::Catchup;
use crate::layout::Layout;
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

/// The store a restore fills, and how it keeps what its changelog records hold.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub store: &'a TaskStore,
    pub layout: Layout,
}

/// Applies the changelog `topic`-`partition` to `target`'s store from its checkpoint up to
/// `end` (exclusive), fetching at most `max_bytes` at a time. The next fetch is in flight while a
/// chunk is loaded into the store, and chunks are bulk-loaded ([`TaskStore::ingest`]).
pub async fn restore(
    client: &Arc<Client>,
    leader: &str,
    topic: &str,
    partition: i32,
    target: Target<'_>,
    end: i64,
    max_bytes: i32,
) -> Result<RestoreStats, RestoreError> {
    let Target { store, layout } = target;
    let start = Instant::now();
    let from = store.checkpoint()?.unwrap_or(0);
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
    let mut catchup = Catchup::new(from, layout);
    let mut idle_rounds = 0;
    let mut inflight = (from < end).then(|| spawn_fetch(from));
    while let Some(handle) = inflight.take() {
        let fetched = handle
            .await
            .map_err(|e| kafka(baton_kafka::Error::Protocol(format!("fetch task: {e}"))))?
            .map_err(kafka)?;
        let at = catchup.fetch_from();
        let reached = catchup.reach(&fetched, end);
        if reached <= at {
            idle_rounds += 1;
            if idle_rounds > MAX_IDLE_ROUNDS {
                return Err(RestoreError::Stuck {
                    topic: topic.to_owned(),
                    partition,
                    offset: at,
                    end,
                });
            }
            inflight = Some(spawn_fetch(at));
            continue;
        }
        idle_rounds = 0;
        if reached < end {
            // In flight while the store loads this chunk.
            inflight = Some(spawn_fetch(reached));
        }
        let absorbed = catchup.absorb(store, fetched, end)?;
        records += absorbed.applied;
        if absorbed.skipped > 0 {
            tracing::warn!(
                topic,
                partition,
                records = absorbed.skipped,
                "skipped changelog records without a key"
            );
        }
    }
    catchup.finish(store)?;
    // Records up to `end` may have been compacted away: the store has everything there is.
    // This last commit is durable, and makes every lazy one before it durable too.
    let next = catchup.position().max(end);
    store.apply(&[], Some(next))?;
    Ok(RestoreStats {
        from_offset: from,
        to_offset: next,
        records,
        seconds: start.elapsed().as_secs_f64(),
    })
}
