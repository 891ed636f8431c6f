//! Drain requests travel through a control topic on the broker, `<application id>-baton-control`:
//! `baton drain` appends `(instance id, "drain")` (or `"cancel"` to take one back), and each
//! instance follows the topic from where it stood at startup, so an old request never drains a
//! restarted instance. `baton retry` appends `(instance id, "retry")`: the instance opens its
//! failed tasks again.

use std::sync::Arc;
use std::time::Duration;

use baton_core::{Backoff, Retrying};
use baton_kafka::client::NewTopic;
use baton_kafka::Client;
use baton_protocol::TopicPartition;

use crate::context::Context;
use crate::error::{kafka, Result};

pub const DRAIN: &[u8] = b"drain";
pub const CANCEL: &[u8] = b"cancel";
pub const RETRY: &[u8] = b"retry";

/// What an operator asks of an instance through the control topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Drain,
    Cancel,
    /// Open the instance's failed tasks again (not a drain request: never the "latest").
    Retry,
}

impl Request {
    fn bytes(self) -> &'static [u8] {
        match self {
            Request::Drain => DRAIN,
            Request::Cancel => CANCEL,
            Request::Retry => RETRY,
        }
    }
}

/// The control topic of an application.
pub fn control_topic(app_id: &str) -> String {
    format!("{app_id}-baton-control")
}

/// Creates the control topic if it does not exist.
pub async fn ensure_control_topic(client: &Client, app_id: &str) -> Result<()> {
    client
        .create_topics(&[NewTopic {
            name: control_topic(app_id),
            partitions: 1,
            compacted: false,
        }])
        .await
        .map_err(kafka("creating the control topic"))
}

/// Asks instance `instance` of application `app_id` to drain.
pub async fn request_drain(client: &Client, app_id: &str, instance: &str) -> Result<i64> {
    send(client, app_id, instance, Request::Drain).await
}

/// Writes `request` for `instance` to the control topic; returns the record's offset.
pub async fn send(client: &Client, app_id: &str, instance: &str, request: Request) -> Result<i64> {
    ensure_control_topic(client, app_id).await?;
    let topic = control_topic(app_id);
    let leader = client
        .leader(&topic, 0)
        .await
        .map_err(kafka(format!("control topic {topic}")))?;
    client
        .produce(
            &leader,
            &topic,
            0,
            &[(
                Some(bytes::Bytes::from(instance.to_owned())),
                Some(bytes::Bytes::from_static(request.bytes())),
            )],
        )
        .await
        .map_err(kafka(format!("control topic {topic}")))
}

/// How often an instance with copies catching up publishes their progress.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// Until the broker knows the control topic (just created, it may not for a few seconds).
const START_RETRY: Backoff =
    Backoff::forever(Duration::from_millis(100), Duration::from_millis(500));
/// Between failed reads of the control topic: a drain is seen within `max` of the broker's
/// return.
const WATCH_RETRY: Backoff = Backoff::forever(Duration::from_millis(500), Duration::from_secs(2));

/// Publishes this instance's catch-up progress to the control topic while it has any (and
/// once more when it has none left), and its failed tasks whenever they change, for `baton
/// inspect`: record keys `progress:<instance>` ([`baton_kafka::inspect::encode_progress`])
/// and `failed:<instance>` ([`baton_kafka::inspect::encode_failed`]).
pub async fn publish_progress(ctx: Arc<Context>) {
    let topic = control_topic(ctx.group());
    let instance = &ctx.cfg.instance_id;
    let progress_key = format!("{}{instance}", baton_kafka::inspect::PROGRESS_KEY_PREFIX);
    let failed_key = format!("{}{instance}", baton_kafka::inspect::FAILED_KEY_PREFIX);
    let mut had = false;
    // What the topic holds for this instance; `None` until written once (an instance that
    // restarts says "none failed" once, over what its previous life left).
    let mut failed_told: Option<Vec<(baton_assignor::TaskId, String)>> = None;
    loop {
        tokio::time::sleep(PROGRESS_EVERY).await;
        let progress: Vec<baton_kafka::inspect::CopyProgress> = ctx
            .status
            .progress()
            .into_iter()
            .map(
                |(task, role, lag, rate)| baton_kafka::inspect::CopyProgress {
                    task,
                    role: role.as_str().to_owned(),
                    lag,
                    rate,
                },
            )
            .collect();
        if !progress.is_empty() || had {
            had = !progress.is_empty();
            let value = baton_kafka::inspect::encode_progress(&progress);
            publish(&ctx, &topic, &progress_key, value, "catch-up progress").await;
        }
        let failed: Vec<_> = ctx
            .status
            .failed()
            .into_iter()
            .map(|(task, role)| (task, role.as_str().to_owned()))
            .collect();
        if failed_told.as_ref() != Some(&failed) {
            let value = baton_kafka::inspect::encode_failed(&failed);
            if publish(&ctx, &topic, &failed_key, value, "failed tasks").await {
                failed_told = Some(failed);
            }
        }
    }
}

/// Writes one record to the control topic; false when it did not land (logged at debug: the
/// next round writes again).
async fn publish(ctx: &Context, topic: &str, key: &str, value: Vec<u8>, what: &str) -> bool {
    let sent = async {
        let leader = ctx.leader(topic, 0).await?;
        let record = (
            Some(bytes::Bytes::from(key.to_owned())),
            Some(bytes::Bytes::from(value)),
        );
        ctx.client
            .produce(&leader, topic, 0, std::slice::from_ref(&record))
            .await
    };
    match sent.await {
        Ok(_) => true,
        Err(e) => {
            ctx.forget_leader(topic, 0);
            tracing::debug!(error = %e, "publishing {what}");
            false
        }
    }
}

/// How far back [`latest_requests`] reads: drains and cancels among the members' reports.
const REQUESTS_READ: i64 = 10_000;

/// The latest drain or cancel written for each instance, among the topic's recent records
/// (none when the topic does not exist).
pub async fn latest_requests(
    client: &Client,
    app_id: &str,
) -> baton_kafka::Result<std::collections::BTreeMap<String, Request>> {
    Ok(requests_in_order(client, app_id)
        .await?
        .into_iter()
        .map(|(instance, r)| (instance, r.request))
        .collect())
}

/// A request as the control topic holds it: the topic's one partition orders all requests,
/// which is what lets two `baton drain` calls that race agree on which came first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub request: Request,
    pub offset: i64,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
}

/// As [`latest_requests`], with each request's offset and time.
pub async fn requests_in_order(
    client: &Client,
    app_id: &str,
) -> baton_kafka::Result<std::collections::BTreeMap<String, Written>> {
    let topic = control_topic(app_id);
    let mut out = std::collections::BTreeMap::new();
    for r in baton_kafka::inspect::read_tail(client, &topic, REQUESTS_READ).await? {
        let (Some(k), Some(v)) = (&r.key, &r.value) else {
            continue;
        };
        let request = match &v[..] {
            DRAIN => Request::Drain,
            CANCEL => Request::Cancel,
            _ => continue,
        };
        if let Ok(instance) = std::str::from_utf8(k) {
            out.insert(
                instance.to_owned(),
                Written {
                    request,
                    offset: r.offset,
                    timestamp: r.timestamp,
                },
            );
        }
    }
    Ok(out)
}

/// The control topic's end, once the broker answers for it: a topic just created can be
/// unknown to it for a few seconds. Read at startup, before the instance joins, so that a drain
/// written any time after the start is seen ([`watch`] reads from here). The caller bounds the
/// wait (`startup.timeout.ms`).
pub async fn start_position(client: &Client, app_id: &str) -> i64 {
    let tp = TopicPartition::new(control_topic(app_id), 0);
    let mut retrying = Retrying::default();
    loop {
        match client.end_offsets(std::slice::from_ref(&tp)).await {
            Ok(ends) if ends.contains_key(&tp) => return ends[&tp],
            answer => {
                let wait = retrying.wait(&START_RETRY);
                if retrying.failures().is_multiple_of(10) {
                    tracing::info!(topic = %tp.topic, answer = ?answer.err(), "waiting for the control topic");
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Follows the control topic from `from` (its end at startup): a drain for this instance marks
/// it leaving, a cancel takes that back.
pub async fn watch(ctx: Arc<Context>, from: i64) {
    let topic = control_topic(ctx.group());
    // Its own connection: a long-polling fetch must not hold up anyone else's requests.
    let bootstrap: Vec<&str> = ctx.cfg.bootstrap.iter().map(String::as_str).collect();
    let client = Client::new(&bootstrap, &format!("{}-control", ctx.cfg.instance_id));
    let mut position = from;
    let mut retrying = Retrying::default();
    loop {
        let step = async {
            let leader = ctx.leader(&topic, 0).await?;
            let f = client
                .fetch(&leader, &topic, 0, position, 1 << 20, 500)
                .await?;
            Ok::<_, baton_kafka::Error>(f.records)
        };
        match step.await {
            Ok(records) => {
                retrying.succeeded();
                ctx.recovered(|| format!("reading the control topic {topic}"));
                for r in records {
                    position = r.offset + 1;
                    let me = r.key.as_deref() == Some(ctx.cfg.instance_id.as_bytes());
                    if !me {
                        continue;
                    }
                    match r.value.as_deref() {
                        Some(DRAIN) if !ctx.is_leaving() => {
                            tracing::info!(instance = %ctx.cfg.instance_id, "drain requested: handing every task over, then exiting");
                            ctx.set_leaving();
                        }
                        Some(CANCEL) if ctx.is_leaving() => {
                            tracing::info!(instance = %ctx.cfg.instance_id, "drain cancelled: staying in the group");
                            ctx.clear_leaving();
                        }
                        Some(RETRY) => {
                            tracing::info!(instance = %ctx.cfg.instance_id, "retry requested: failed tasks are opened again");
                            ctx.request_retry();
                        }
                        _ => {}
                    }
                }
            }
            Err(e) => {
                ctx.forget_leader(&topic, 0);
                ctx.failing(&format!("reading the control topic {topic}"), &e);
                let wait = retrying.wait(&WATCH_RETRY);
                tokio::time::sleep(wait).await;
            }
        }
    }
}
