//! Global tables: a topic read whole, every partition, into a store on every instance (Kafka
//! Streams' `GlobalKTable`), for stream-global joins that need no co-partitioning. No task
//! owns it and no changelog backs it: the topic is its changelog, and each partition's next
//! offset is kept in the store with the records it covers (`<state dir>/global/<store>`).
//!
//! The stores are read to the topic's end before the stream threads start (Kafka's global
//! thread bootstraps first), then followed for the instance's life. A failed read is logged
//! once and retried every second; the store keeps answering with what it has. An offset the
//! topic no longer has (deleted and made again, or cut by retention) empties the store and
//! reads the topic again from its start.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_kafka::records::{FetchWant, Fetched};
use baton_kafka::Client;
use baton_protocol::TopicPartition;

use crate::context::Context;
use crate::error::{Result, RuntimeError};
use crate::store::{TaskStore, Write};
use crate::topology::{Topology, TopologyError};

fn kafka(what: String) -> impl FnOnce(baton_kafka::Error) -> RuntimeError {
    move |source| RuntimeError::Kafka { what, source }
}

/// Bytes asked of one partition per fetch.
const FETCH_BYTES: i32 = 4 << 20;
/// How long a fetch of the bootstrap waits at the broker: a broker may leave a partition out
/// of an answer it gives at once, and the loop must not spin on it.
const BOOTSTRAP_WAIT_MS: i32 = 100;
/// How long a follow-up fetch waits at the broker for records.
const FOLLOW_WAIT_MS: i32 = 500;
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// One global table's store on this instance.
#[derive(Clone)]
pub struct GlobalStore {
    pub name: String,
    pub topic: String,
    pub store: TaskStore,
    /// Records the store was behind its topic's end at the last fetch (`u64::MAX` before
    /// the first): what a query answered from it says.
    pub lag: Arc<AtomicU64>,
}

/// Opens every global table's store under `state_dir`.
pub fn open(state_dir: &Path, topology: &Topology) -> Result<Vec<GlobalStore>> {
    topology
        .globals()
        .iter()
        .map(|g| {
            let path = state_dir.join("global").join(&g.store);
            let store = TaskStore::open_at(path).map_err(RuntimeError::from)?;
            Ok(GlobalStore {
                name: g.store.clone(),
                topic: g.topic.clone(),
                store,
                lag: Arc::new(AtomicU64::new(u64::MAX)),
            })
        })
        .collect()
}

/// Reads each global table's topic into its store up to the end it has now. A failure is
/// logged and the read goes on from where it stood, a second later, until it is done (the
/// caller gives up on shutdown).
pub async fn bootstrap(client: &Client, globals: &[GlobalStore]) -> Result<()> {
    for g in globals {
        let started = std::time::Instant::now();
        let mut failures = 0u64;
        let read = loop {
            match read_to_end(client, g).await {
                Ok(read) => break read,
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(store = %g.name, topic = %g.topic, failures, error = %e, "reading a global table to its end before starting; trying again every second");
                    }
                    tokio::time::sleep(RETRY_EVERY).await;
                }
            }
        };
        tracing::info!(store = %g.name, topic = %g.topic, records = read, secs = started.elapsed().as_secs_f64(), "global table read to its end");
    }
    Ok(())
}

async fn read_to_end(client: &Client, g: &GlobalStore) -> Result<u64> {
    let mut reader = Reader::new(client, g).await?;
    let ends = reader.ends().await?;
    let mut read = 0;
    while reader.behind(&ends) {
        let (n, moved) = reader.poll(BOOTSTRAP_WAIT_MS).await?;
        read += n;
        if !moved {
            // A broker may answer at once without the partition: never spin on it.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(read)
}

/// Follows each global table's topic for the instance's life: until the future is dropped
/// (the instance's background tasks are aborted when it stops).
pub async fn follow(ctx: Arc<Context>) {
    let each = ctx
        .globals
        .iter()
        .map(|g| follow_one(ctx.clone(), g.clone()));
    futures_util::future::join_all(each).await;
}

async fn follow_one(ctx: Arc<Context>, g: GlobalStore) {
    let what = format!("reading global table {} from {}", g.name, g.topic);
    loop {
        let mut reader = match Reader::new(&ctx.client, &g).await {
            Ok(r) => r,
            Err(e) => {
                ctx.failing(&what, &e);
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            }
        };
        loop {
            match reader.poll(FOLLOW_WAIT_MS).await {
                Ok((_, moved)) => {
                    ctx.recovered(|| what.clone());
                    if !moved {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                Err(e) => {
                    ctx.failing(&what, &e);
                    tokio::time::sleep(RETRY_EVERY).await;
                    // The partition count or the leaders may have changed.
                    break;
                }
            }
        }
    }
}

/// Where one global store stands in its topic.
struct Reader<'a> {
    client: &'a Client,
    g: &'a GlobalStore,
    partitions: Vec<i32>,
    next: BTreeMap<i32, i64>,
    /// The topic's id, as the broker gave it when the reader was made.
    id: Option<uuid::Uuid>,
}

impl<'a> Reader<'a> {
    async fn new(client: &'a Client, g: &'a GlobalStore) -> Result<Reader<'a>> {
        let meta = client
            .metadata(Some(std::slice::from_ref(&g.topic)))
            .await
            .map_err(kafka(format!("reading the metadata of {}", g.topic)))?;
        let count = meta
            .topics
            .iter()
            .find(|t| t.error_code == 0)
            .map_or(0, |t| t.partitions.len());
        if count == 0 {
            return Err(TopologyError::MissingTopic(g.topic.clone()).into());
        }
        let next = g.store.offsets()?;
        // Fetched by id where the broker gives one: a fetch of a topic made again under the
        // same name then fails, rather than reading the new topic from the old one's offsets.
        let id = client
            .topic_ids(std::slice::from_ref(&g.topic))
            .await
            .ok()
            .and_then(|ids| ids.get(&g.topic).copied());
        let mut reader = Reader {
            client,
            g,
            partitions: (0..count as i32).collect(),
            next,
            id,
        };
        if let Some(id) = id {
            match g.store.changelog_id()? {
                Some(was) if was != id => reader.start_again("the topic was made again").await?,
                Some(_) => return Ok(reader),
                None => {}
            }
            // Last: a crash before it reads the topic again from its start.
            g.store.mark_changelog(id, None)?;
        }
        Ok(reader)
    }

    fn tps(&self) -> Vec<TopicPartition> {
        self.partitions
            .iter()
            .map(|&p| TopicPartition::new(&self.g.topic, p))
            .collect()
    }

    async fn ends(&self) -> Result<BTreeMap<i32, i64>> {
        let ends = self
            .client
            .end_offsets(&self.tps())
            .await
            .map_err(kafka(format!("end offsets of {}", self.g.topic)))?;
        Ok(ends.into_iter().map(|(tp, o)| (tp.partition, o)).collect())
    }

    fn behind(&self, ends: &BTreeMap<i32, i64>) -> bool {
        ends.iter()
            .any(|(p, end)| self.next.get(p).copied().unwrap_or(0) < *end)
    }

    /// One fetch of every partition (one request per leader, so that a quiet topic costs
    /// one wait), its records applied: how many, and whether any partition moved on.
    async fn poll(&mut self, wait_ms: i32) -> Result<(u64, bool)> {
        let mut by_leader: BTreeMap<String, Vec<FetchWant>> = BTreeMap::new();
        for &p in &self.partitions {
            let what = format!("finding the leader of {}-{p}", self.g.topic);
            let leader = self
                .client
                .leader(&self.g.topic, p)
                .await
                .map_err(kafka(what))?;
            by_leader.entry(leader).or_default().push(FetchWant {
                topic: self.g.topic.clone(),
                topic_id: self.id,
                partition: p,
                offset: self.next.get(&p).copied().unwrap_or(0),
                max_bytes: FETCH_BYTES,
            });
        }
        let (mut applied, mut moved) = (0, false);
        let mut ends = BTreeMap::new();
        for (leader, wants) in by_leader {
            let what = format!("fetching {} from {leader}", self.g.topic);
            let answers = self
                .client
                .fetch_many(&leader, &wants, wait_ms)
                .await
                .map_err(kafka(what.clone()))?;
            for (want, answer) in wants.iter().zip(answers) {
                if let Ok(f) = &answer {
                    ends.insert(want.partition, f.high_watermark);
                }
                let f = match answer {
                    Err(e) if e.is_offset_out_of_range() => {
                        let why = format!(
                            "partition {} no longer has offset {} (cut by retention, or the topic was made again)",
                            want.partition, want.offset
                        );
                        self.start_again(&why).await?;
                        return Ok((applied, true));
                    }
                    other => other.map_err(kafka(what.clone()))?,
                };
                let n = self.apply(want.partition, want.offset, &f)?;
                applied += n.0;
                moved |= n.1;
            }
        }
        let lag = ends
            .iter()
            .map(|(p, end)| (end - self.next.get(p).copied().unwrap_or(0)).max(0) as u64)
            .sum();
        self.g.lag.store(lag, Ordering::Relaxed);
        Ok((applied, moved))
    }

    /// Applies what a fetch of `partition` from `from` returned: (records kept, moved on).
    fn apply(&mut self, partition: i32, from: i64, f: &Fetched) -> Result<(u64, bool)> {
        let next = f
            .next_offset
            .or(f.records.last().map(|r| r.offset + 1))
            .unwrap_or(from);
        // As Kafka's table source: a record without a key cannot be kept.
        let writes: Vec<Write> = f
            .records
            .iter()
            .filter_map(|r| {
                Some((
                    r.key.as_ref()?.to_vec(),
                    r.value.as_ref().map(|v| v.to_vec()),
                ))
            })
            .collect();
        if next == from {
            return Ok((0, false));
        }
        self.g.store.apply_from(&writes, partition, next)?;
        self.next.insert(partition, next);
        Ok((writes.len() as u64, true))
    }

    /// The store's records are not the topic's any more: empties the store and starts every
    /// partition again from the topic's start.
    async fn start_again(&mut self, why: &str) -> Result<()> {
        tracing::warn!(store = %self.g.name, topic = %self.g.topic, "{why}: emptying the global table's store and reading the topic again from its start");
        let starts = self
            .client
            .start_offsets(&self.tps())
            .await
            .map_err(kafka(format!("start offsets of {}", self.g.topic)))?;
        clear(&self.g.store)?;
        self.next.clear();
        for (tp, start) in starts {
            self.g.store.apply_from(&[], tp.partition, start)?;
            self.next.insert(tp.partition, start);
        }
        Ok(())
    }
}

/// Deletes every entry of `store`.
fn clear(store: &TaskStore) -> Result<()> {
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (entries, next) = store.page(after.as_deref(), 1 << 20)?;
        let deletes: Vec<Write> = entries.into_iter().map(|(k, _)| (k, None)).collect();
        store.apply(&deletes, None)?;
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let long: Vec<Write> = store
        .long_entries()?
        .into_iter()
        .map(|(k, _)| (k, None))
        .collect();
    store.apply(&long, None)?;
    Ok(())
}
