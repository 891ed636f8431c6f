//! Read-your-writes through repartition topics: `at_least=TOPIC:PARTITION:OFFSET` on an input
//! upstream of the store (word count's lines, split and sent through a repartition topic to
//! the counts). Records derived from an input record reach the store by other partitions, so
//! the wait is resolved to a position on the store's own source partition, hop by hop:
//!
//! 1. The task reading the input partition has processed past the offset: its outputs were
//!    acknowledged before it counts as processed, so everything it derived from them is in
//!    the topic it writes. Asked here, or of the instance holding that task as active
//!    (`GET /v1/progress/{topic}/{partition}?at_least=O`, answered only from its own copy).
//! 2. That topic's ends are listed: every derived record is below them. On a further hop,
//!    each partition's task waits to process past its end, and the next topic's ends follow.
//! 3. The store's own source partition's end becomes the lookup's `at_least`, which the
//!    store's active waits for as for a write to its own source.
//!
//! A wait bounds the answer from below only: it may reflect later input too.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use baton_assignor::TaskId;
use baton_core::{Backoff, Retrying};
use baton_protocol::TopicPartition;
use serde_json::{json, Value};

use crate::query::engine::{Answer, Engine};
use crate::query::forward::{forward, Forwarded};
use crate::query::lookup::Lookup;
use crate::query::routing::endpoint;
use crate::status::Role;

/// Why an upstream `at_least` could not be resolved by the deadline.
#[derive(Debug, thiserror::Error)]
pub enum Unresolved {
    #[error("listing the ends of {topic}: {source}")]
    Ends {
        topic: String,
        source: baton_kafka::Error,
    },
    #[error("the broker listed no end for {0}")]
    NoEnd(TopicPartition),
    #[error("input {tp} was not processed past {offset} by the deadline ({last})")]
    NotProcessed {
        tp: TopicPartition,
        offset: i64,
        /// What the last attempt to reach the task's active said.
        last: String,
    },
}

/// Between two attempts to reach the task reading a partition (it may be moving), until the
/// query's deadline.
const RETRY: Backoff = Backoff::forever(Duration::from_millis(50), Duration::from_millis(200));

impl Engine {
    /// `q` with its upstream `at_least` resolved to a position on its own source partition
    /// (`None`: it has none); an answer when that cannot be done by the deadline.
    pub(crate) async fn resolve_upstream(&self, q: &Lookup) -> Result<Option<Lookup>, Answer> {
        let Some(up) = &q.upstream else {
            return Ok(None);
        };
        let unavailable = |why: Unresolved| {
            Answer::Unavailable(json!({
                "error": why.to_string(),
                "store": q.store,
                "partition": q.task.partition,
                "at_least": format!("{}:{}:{}", up.input.topic, up.input.partition, up.offset),
            }))
        };
        let first = up.path.first().map_or(0, |(sub, _)| *sub);
        let task = TaskId::new(first, up.input.partition as u32);
        self.await_processed(task, &up.input, up.offset, q.deadline)
            .await
            .map_err(unavailable)?;
        let mut resolved = q.clone();
        resolved.upstream = None;
        for (hop, (sub, topic)) in up.path.iter().enumerate().skip(1) {
            if hop + 1 == up.path.len() {
                // The store's own partition is the only one it waits on.
                let end = self.ends(std::slice::from_ref(&q.source)).await;
                let end = end.map_err(unavailable)?[0];
                // Nothing below the end yet: nothing to wait for.
                resolved.at_least = (end > 0).then_some(end - 1);
                return Ok(Some(resolved));
            }
            let partitions = self
                .ctx
                .wire
                .subtopologies
                .get(sub)
                .map_or(0, |s| s.partitions);
            let tps: Vec<TopicPartition> = (0..partitions as i32)
                .map(|p| TopicPartition::new(topic.as_str(), p))
                .collect();
            let ends = self.ends(&tps).await.map_err(unavailable)?;
            for (tp, end) in tps.iter().zip(ends) {
                if end > 0 {
                    let task = TaskId::new(*sub, tp.partition as u32);
                    self.await_processed(task, tp, end - 1, q.deadline)
                        .await
                        .map_err(unavailable)?;
                }
            }
        }
        Ok(Some(resolved))
    }

    /// The end of each of `tps`, in their order.
    async fn ends(&self, tps: &[TopicPartition]) -> Result<Vec<i64>, Unresolved> {
        let ends = self
            .ctx
            .client
            .end_offsets(tps)
            .await
            .map_err(|source| Unresolved::Ends {
                topic: tps.first().map_or(String::new(), |tp| tp.topic.clone()),
                source,
            })?;
        tps.iter()
            .map(|tp| {
                ends.get(tp)
                    .copied()
                    .ok_or_else(|| Unresolved::NoEnd(tp.clone()))
            })
            .collect()
    }

    /// Waits until the active of `task` (reading `tp`) has processed past `offset`, here or
    /// on the instance the assignment names; `Err` with why when the deadline passes first.
    async fn await_processed(
        &self,
        task: TaskId,
        tp: &TopicPartition,
        offset: i64,
        deadline: Instant,
    ) -> Result<(), Unresolved> {
        let mut last = String::from("no active of the task is known yet");
        let mut retrying = Retrying::default();
        loop {
            if self.processed_here(task, tp, offset, deadline).await == Some(true) {
                return Ok(());
            }
            let active = self.ctx.routing().copies(tp).active;
            match active {
                Some(to) if Some(&to) != self.me.as_ref() => {
                    let path = format!(
                        "/v1/progress/{}/{}?at_least={offset}",
                        tp.topic, tp.partition
                    );
                    match forward(&to, &path, deadline).await {
                        Forwarded::Answer(StatusCode::OK, _) => return Ok(()),
                        Forwarded::Answer(status, body) => {
                            last = format!("{}: {status} {}", endpoint(&to), body["error"])
                        }
                        Forwarded::Failed(why) => last = format!("{}: {why}", endpoint(&to)),
                    }
                }
                _ => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Unresolved::NotProcessed {
                    tp: tp.clone(),
                    offset,
                    last,
                });
            }
            tokio::time::sleep(left.min(retrying.wait(&RETRY))).await;
        }
    }

    /// Whether this instance's active of `task` has processed `tp` past `offset`, waiting
    /// for it until `deadline`; `None` when this instance holds no active of it.
    pub(crate) async fn processed_here(
        &self,
        task: TaskId,
        tp: &TopicPartition,
        offset: i64,
        deadline: Instant,
    ) -> Option<bool> {
        loop {
            let advanced = self.ctx.copies.advanced();
            if self
                .ctx
                .copies
                .processed_to(task, tp)
                .is_some_and(|next| next > offset)
            {
                return Some(true);
            }
            if self
                .ctx
                .status
                .get(task)
                .is_none_or(|s| s.role != Role::Active)
            {
                return None;
            }
            // The input may be processed already and wait in a record cache for the commit.
            self.ctx.copies.request_flush();
            let left = deadline.checked_duration_since(Instant::now())?;
            if left.is_zero() {
                return Some(false);
            }
            // Woken when any active moves; bounded so a missed wake costs 50 ms at most.
            let _ = tokio::time::timeout(left.min(Duration::from_millis(50)), advanced).await;
        }
    }

    /// `/v1/progress/{topic}/{partition}?at_least=O`: answered from this instance's own
    /// active of the task reading that partition, never forwarded.
    pub async fn progress(&self, tp: &TopicPartition, offset: i64, deadline: Instant) -> Answer {
        let Some(sub) = self
            .ctx
            .wire
            .subtopologies
            .iter()
            .find(|(_, s)| s.source_topics.contains(&tp.topic))
            .map(|(sub, _)| *sub)
        else {
            return Answer::Refused {
                status: StatusCode::NOT_FOUND,
                body: json!({ "error": format!("no task reads {}", tp.topic) }),
            };
        };
        let task = TaskId::new(sub, tp.partition.max(0) as u32);
        let body = |done: bool| -> Value {
            json!({
                "topic": tp.topic,
                "partition": tp.partition,
                "task": task.to_string(),
                "processed_to": self.ctx.copies.processed_to(task, tp),
                "error": (!done).then(|| format!("not processed past {offset} here")),
            })
        };
        match self.processed_here(task, tp, offset, deadline).await {
            Some(true) => Answer::Ok {
                body: body(true),
                route: crate::query::metrics::Route::Local,
            },
            _ => Answer::Unavailable(body(false)),
        }
    }
}
