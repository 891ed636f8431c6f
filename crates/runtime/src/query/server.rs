//! The query server on `--application-server HOST:PORT`: HTTP/1.1 and JSON, versioned under
//! `/v1`. Any instance answers for any key: it reads its own copy or forwards the query, one
//! hop, to the copy that fits (docs/QUERIES.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use baton_assignor::TaskId;
use baton_protocol::{HostInfo, TopicPartition};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::context::Context;
use crate::error::{Result, RuntimeError};
use crate::layout::{split_timestamped, Layout};
use crate::query::copies::{LocalCopies, RangeBounds};
use crate::query::format::{hex, parse_hex};
use crate::query::forward::{forward, Forwarded};
use crate::query::metrics::{Outcome, Route};
use crate::query::plan::{plan, Ask, Held, Step};
use crate::query::routing::endpoint;
use crate::store::StoreError;
use crate::topology::StoreInfo;

/// Marks a forwarded query: the instance it reaches answers or refuses, never forwards again.
pub const HOP_HEADER: &str = "x-baton-hop";
/// What is left of the caller's deadline, in milliseconds, on a forwarded query.
pub const DEADLINE_HEADER: &str = "x-baton-deadline-ms";
/// A query's deadline unless `timeout_ms` says otherwise, and the longest it may say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
pub const LONGEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an instance that stops waits for the queries under way.
pub const DRAIN_QUERIES: Duration = Duration::from_secs(2);
/// Queries served at once; more are refused with 503 rather than queued without bound.
pub const CONCURRENT_QUERIES: usize = 256;
/// Between two attempts at a query no copy could answer (the assignment may have moved on).
const RETRY_EVERY: Duration = Duration::from_millis(100);

#[derive(Clone)]
struct Server {
    ctx: Arc<Context>,
    me: Option<HostInfo>,
    permits: Arc<Semaphore>,
}

pub async fn bind(endpoint: &str) -> Result<TcpListener> {
    TcpListener::bind(endpoint)
        .await
        .map_err(|source| RuntimeError::Io {
            what: format!("queries: binding application.server {endpoint}"),
            source,
        })
}

/// Until this instance's first assignment, where the group's copies were when a member last
/// reported (the control topic): a restarted instance forwards at once rather than answering
/// 503 until it has joined, which can take a session timeout.
pub async fn seed_routing(ctx: Arc<Context>) {
    let topic = crate::control::control_topic(ctx.group());
    match baton_kafka::inspect::latest_assignment(&ctx.client, &topic).await {
        Ok(Some((generation, blob))) => match baton_protocol::leader::decode_assignment(&blob) {
            Ok((_, info)) => {
                // An older generation than any real assignment: the first one replaces it.
                ctx.set_routing(generation.saturating_sub(1), &info);
                tracing::info!(
                    generation,
                    "query routing seeded from the latest member report"
                );
            }
            Err(e) => tracing::debug!(error = %e, "a member report's assignment does not decode"),
        },
        Ok(None) => {}
        Err(e) => tracing::debug!(error = %e, "reading member reports to seed query routing"),
    }
}

/// Serves until `done` turns true, then lets the queries under way finish (the caller bounds
/// how long it waits for them).
pub async fn serve(
    listener: TcpListener,
    ctx: Arc<Context>,
    mut done: tokio::sync::watch::Receiver<bool>,
) {
    let me = crate::query::routing::parse_endpoint(&ctx.cfg.user_endpoint);
    let server = Server {
        ctx,
        me,
        permits: Arc::new(Semaphore::new(CONCURRENT_QUERIES)),
    };
    let app = Router::new()
        .route("/v1/stores", get(stores))
        .route("/v1/stores/{store}/keys/{key}", get(key))
        .route("/v1/stores/{store}/keys/{key}/windows", get(windows))
        .route(
            "/v1/stores/{store}/partitions/{partition}/range",
            get(range),
        )
        .route("/v1/metadata/{store}/keys/{key}", get(metadata))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "no such endpoint: see docs/QUERIES.md",
            )
        })
        .with_state(server);
    let stopped = async move {
        let _ = done.wait_for(|d| *d).await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stopped)
        .await
    {
        tracing::error!(error = %e, "the query server stopped");
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    QueryError::new(status, message).into_response()
}

/// A query refused for what it asked: 400 (a malformed key or parameter) or 404 (no store).
#[derive(Debug)]
struct QueryError {
    status: StatusCode,
    message: String,
}

impl QueryError {
    fn new(status: StatusCode, message: impl Into<String>) -> QueryError {
        QueryError {
            status,
            message: message.into(),
        }
    }

    fn outcome(&self) -> Outcome {
        if self.status == StatusCode::NOT_FOUND {
            Outcome::NotFound
        } else {
            Outcome::BadRequest
        }
    }
}

impl IntoResponse for QueryError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// Query parameters of a key lookup; an unknown one is a 400 naming it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyParams {
    key_hex: Option<String>,
    max_lag_offsets: Option<u64>,
    at_least: Option<String>,
    timeout_ms: Option<u64>,
}

/// Query parameters of a range scan; keys in the key serde's text form, or hex.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeParams {
    from: Option<String>,
    to: Option<String>,
    after: Option<String>,
    from_hex: Option<String>,
    to_hex: Option<String>,
    after_hex: Option<String>,
    limit: Option<usize>,
    max_lag_offsets: Option<u64>,
    timeout_ms: Option<u64>,
}

/// A range scan's page size unless `limit` says otherwise, and the largest it may say.
pub const DEFAULT_LIMIT: usize = 100;
pub const LARGEST_LIMIT: usize = 1000;

/// What a query reads.
enum Op {
    Key(Vec<u8>),
    Range(RangeBounds),
    /// The windows of one key that start in `from..=to` (milliseconds).
    Windows {
        key: Vec<u8>,
        from: i64,
        to: i64,
    },
}

/// Query parameters of a key's windows.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowParams {
    key_hex: Option<String>,
    from: Option<i64>,
    to: Option<i64>,
    max_lag_offsets: Option<u64>,
    timeout_ms: Option<u64>,
}

/// A query, checked and resolved to its task.
struct Lookup {
    store: String,
    info: StoreInfo,
    op: Op,
    task: TaskId,
    source: TopicPartition,
    /// `at_least=`: the input offset the answer must have processed.
    at_least: Option<i64>,
    ask: Ask,
    deadline: Instant,
}

impl Server {
    /// The store, checked: known, and a window store exactly when `windows` asks for one.
    fn store(
        &self,
        store: &str,
        windows: bool,
    ) -> std::result::Result<(StoreInfo, u32), QueryError> {
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
        match (info.windows.is_some(), windows) {
            (true, false) => {
                return Err(QueryError::new(
                    StatusCode::BAD_REQUEST,
                    format!("store {store:?} is a window store: ask /v1/stores/{store}/keys/{{key}}/windows"),
                ))
            }
            (false, true) => {
                return Err(QueryError::new(
                    StatusCode::BAD_REQUEST,
                    format!("store {store:?} is a key-value store: it has no windows"),
                ))
            }
            _ => {}
        }
        let Some(sub) = ctx.wire.subtopologies.get(&info.subtopology) else {
            return Err(QueryError::new(
                StatusCode::NOT_FOUND,
                format!("store {store:?} has no tasks"),
            ));
        };
        Ok((info, sub.partitions.max(1)))
    }

    fn lookup(
        &self,
        store: &str,
        key_text: &str,
        params: &KeyParams,
        headers: &HeaderMap,
    ) -> std::result::Result<Lookup, QueryError> {
        let (info, partitions) = self.store(store, false)?;
        let key = key_bytes(&info, key_text, params.key_hex.as_deref())?;
        let partition = crate::partitioner::partition_for(&key, partitions);
        let task = TaskId::new(info.subtopology, partition);
        let source = self.source(store, task)?;
        let at_least =
            match &params.at_least {
                None => None,
                Some(a) => Some(parse_at_least(a, &source).map_err(|e| {
                    QueryError::new(StatusCode::BAD_REQUEST, format!("at_least: {e}"))
                })?),
            };
        let (forwarded, deadline) = deadline(headers, params.timeout_ms);
        Ok(Lookup {
            store: store.to_owned(),
            info,
            op: Op::Key(key),
            task,
            source,
            at_least,
            ask: Ask {
                max_lag: params.max_lag_offsets,
                forwarded,
                read_your_writes: at_least.is_some(),
            },
            deadline,
        })
    }

    fn range_lookup(
        &self,
        store: &str,
        partition: &str,
        params: &RangeParams,
        headers: &HeaderMap,
    ) -> std::result::Result<Lookup, QueryError> {
        let (info, partitions) = self.store(store, false)?;
        let bad = |e: String| QueryError::new(StatusCode::BAD_REQUEST, e);
        let partition: u32 = partition
            .parse()
            .ok()
            .filter(|&p| p < partitions)
            .ok_or_else(|| {
                bad(format!(
                    "partition {partition:?}: store {store:?} has partitions 0 to {}",
                    partitions - 1
                ))
            })?;
        let key = |name: &str, text: &Option<String>, hex: &Option<String>| match (text, hex) {
            (Some(_), Some(_)) => Err(bad(format!("{name} and {name}_hex: give one"))),
            (Some(t), None) => info
                .format
                .key
                .parse_key(t)
                .map(Some)
                .map_err(|e| bad(format!("{name}: {e}"))),
            (None, Some(h)) => parse_hex(h)
                .map(Some)
                .map_err(|e| bad(format!("{name}_hex: {e}"))),
            (None, None) => Ok(None),
        };
        let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 || limit > LARGEST_LIMIT {
            return Err(bad(format!(
                "limit: {limit} is not between 1 and {LARGEST_LIMIT}"
            )));
        }
        let bounds = RangeBounds {
            from: key("from", &params.from, &params.from_hex)?,
            to: key("to", &params.to, &params.to_hex)?,
            after: key("after", &params.after, &params.after_hex)?,
            limit,
        };
        let task = TaskId::new(info.subtopology, partition);
        let source = self.source(store, task)?;
        let (forwarded, deadline) = deadline(headers, params.timeout_ms);
        Ok(Lookup {
            store: store.to_owned(),
            info,
            op: Op::Range(bounds),
            task,
            source,
            at_least: None,
            ask: Ask {
                max_lag: params.max_lag_offsets,
                forwarded,
                read_your_writes: false,
            },
            deadline,
        })
    }

    fn windows_lookup(
        &self,
        store: &str,
        key_text: &str,
        params: &WindowParams,
        headers: &HeaderMap,
    ) -> std::result::Result<Lookup, QueryError> {
        let (info, partitions) = self.store(store, true)?;
        let bad = |e: String| QueryError::new(StatusCode::BAD_REQUEST, e);
        let key = key_bytes(&info, key_text, params.key_hex.as_deref())?;
        let (from, to) = (params.from.unwrap_or(0), params.to.unwrap_or(i64::MAX));
        if from < 0 || to < from {
            return Err(bad(format!(
                "from={from}, to={to}: window starts run from 0, and to must not be below from"
            )));
        }
        let partition = crate::partitioner::partition_for(&key, partitions);
        let task = TaskId::new(info.subtopology, partition);
        let source = self.source(store, task)?;
        let (forwarded, deadline) = deadline(headers, params.timeout_ms);
        Ok(Lookup {
            store: store.to_owned(),
            info,
            op: Op::Windows { key, from, to },
            task,
            source,
            at_least: None,
            ask: Ask {
                max_lag: params.max_lag_offsets,
                forwarded,
                read_your_writes: false,
            },
            deadline,
        })
    }

    /// The first source partition of `task`: where the assignment's host maps list it.
    fn source(&self, store: &str, task: TaskId) -> std::result::Result<TopicPartition, QueryError> {
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

    fn held(&self, task: TaskId) -> Option<Held> {
        self.ctx.status.get(task).map(|s| Held {
            role: s.role,
            phase: s.phase,
            lag: s.lag,
        })
    }

    /// Reads the key from this instance's copy, once it has processed `at_least` (if asked);
    /// `None` when the copy is gone, not consistent now, or the wait ran out.
    async fn local(&self, q: &Lookup) -> Option<Value> {
        if let Some(offset) = q.at_least {
            loop {
                let advanced = self.ctx.copies.advanced();
                let done = self
                    .ctx
                    .copies
                    .processed_to(q.task, &q.source)
                    .is_some_and(|next| next > offset);
                if done {
                    break;
                }
                let left = q.deadline.checked_duration_since(Instant::now())?;
                // Woken when any active moves; bounded so a missed wake costs 50 ms at most.
                let _ = tokio::time::timeout(left.min(Duration::from_millis(50)), advanced).await;
            }
        }
        let held = self.held(q.task)?;
        let answer = match &q.op {
            Op::Key(key) => self.read_key(q, key).await?,
            Op::Range(bounds) => self.read_range(q, bounds).await?,
            Op::Windows { key, from, to } => self.read_windows(q, key, *from, *to).await?,
        };
        let mut answer = answer;
        for (field, value) in [
            ("store", json!(q.store)),
            ("partition", json!(q.task.partition)),
            ("task", json!(q.task.to_string())),
            ("served_by", json!(self.ctx.cfg.user_endpoint)),
            ("role", json!(held.role.as_str())),
            ("lag_offsets", json!(held.lag_offsets())),
            ("forwarded", json!(false)),
        ] {
            answer[field] = value;
        }
        Some(answer)
    }

    /// A stored value as the store's value serde reads it, its timestamp (if any) dropped.
    fn value_json(&self, q: &Lookup, stored: &[u8]) -> Value {
        let value = match q.info.layout {
            Layout::Plain => stored,
            Layout::Timestamped => split_timestamped(stored).map_or(stored, |(_, v)| v),
        };
        q.info.format.value.to_json(value)
    }

    /// Runs `read` on this instance's copy of `q`'s store on the blocking pool (a store read
    /// may go to disk); `None` when the copy is gone or not consistent now, or the read
    /// failed (logged).
    async fn blocking<T: Send + 'static>(
        &self,
        q: &Lookup,
        read: impl FnOnce(&LocalCopies, &str, TaskId) -> std::result::Result<Option<T>, StoreError>
            + Send
            + 'static,
    ) -> Option<T> {
        let ctx = self.ctx.clone();
        let (store, task) = (q.store.clone(), q.task);
        let read = tokio::task::spawn_blocking(move || read(&ctx.copies, &store, task))
            .await
            .ok()?;
        read.unwrap_or_else(|e| {
            tracing::warn!(store = %q.store, task = %q.task, error = %e, "a query could not read its store");
            None
        })
    }

    async fn read_key(&self, q: &Lookup, key: &[u8]) -> Option<Value> {
        let k = key.to_vec();
        let read = self
            .blocking(q, move |copies, store, task| copies.read(store, task, &k))
            .await?;
        Some(json!({
            "key": q.info.format.key.to_json(key),
            "found": read.value.is_some(),
            "value": read.value.as_deref().map(|v| self.value_json(q, v)),
            "position": read.position,
        }))
    }

    /// A window store keeps `key, start (8 bytes), sequence (4 bytes)`: one scan from the
    /// first start to the last, keeping the entries of exactly this key.
    async fn read_windows(&self, q: &Lookup, key: &[u8], from: i64, to: i64) -> Option<Value> {
        let size = q.info.windows.map_or(0, |w| w.size_ms);
        let mut upper = crate::layout::window_store_key(key, to);
        upper.truncate(key.len() + 8);
        upper.extend_from_slice(&[0xff; 4]);
        let bounds = RangeBounds {
            from: Some(crate::layout::window_store_key(key, from)),
            to: Some(upper),
            after: None,
            limit: LARGEST_LIMIT,
        };
        let read = self
            .blocking(q, move |copies, store, task| {
                copies.read_range(store, task, &bounds)
            })
            .await?;
        let windows: Vec<Value> = read
            .entries
            .iter()
            .filter(|(k, _)| k.len() == key.len() + 12 && k.starts_with(key))
            .filter_map(|(k, v)| {
                let start = i64::from_be_bytes(k[key.len()..key.len() + 8].try_into().ok()?);
                Some(json!({
                    "start": start,
                    "end": start.saturating_add(size),
                    "value": self.value_json(q, v),
                }))
            })
            .collect();
        Some(json!({
            "key": q.info.format.key.to_json(key),
            "windows": windows,
            "more": read.more,
            "position": read.position,
        }))
    }

    async fn read_range(&self, q: &Lookup, bounds: &RangeBounds) -> Option<Value> {
        let b = bounds.clone();
        let read = self
            .blocking(q, move |copies, store, task| {
                copies.read_range(store, task, &b)
            })
            .await?;
        let entries: Vec<Value> = read
            .entries
            .iter()
            .map(|(k, v)| json!({ "key": q.info.format.key.to_json(k), "value": self.value_json(q, v) }))
            .collect();
        // The next page starts after the last key: hex, which every key serde has.
        let next_after_hex = read
            .more
            .then(|| read.entries.last().map(|(k, _)| hex(k)))
            .flatten();
        Some(json!({
            "entries": entries,
            "more": read.more,
            "next_after_hex": next_after_hex,
            "position": read.position,
        }))
    }
}

/// A key as the path gives it in the key serde's text form, or as `key_hex`.
fn key_bytes(
    info: &StoreInfo,
    text: &str,
    hex: Option<&str>,
) -> std::result::Result<Vec<u8>, QueryError> {
    match hex {
        Some(h) => parse_hex(h).map_err(|e| format!("key_hex: {e}")),
        None => info
            .format
            .key
            .parse_key(text)
            .map_err(|e| format!("key: {e}")),
    }
    .map_err(|e| QueryError::new(StatusCode::BAD_REQUEST, e))
}

/// Whether the query was forwarded here, and its deadline: what the forwarder had left, or
/// `timeout_ms`.
fn deadline(headers: &HeaderMap, timeout_ms: Option<u64>) -> (bool, Instant) {
    let forwarded = headers.contains_key(HOP_HEADER);
    let timeout = match (forwarded, headers.get(DEADLINE_HEADER)) {
        (true, Some(v)) => v
            .to_str()
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_TIMEOUT),
        _ => timeout_ms.map_or(DEFAULT_TIMEOUT, Duration::from_millis),
    }
    .min(LONGEST_TIMEOUT);
    (forwarded, Instant::now() + timeout)
}

/// `TOPIC:PARTITION:OFFSET`, naming the key's own source partition.
fn parse_at_least(text: &str, source: &TopicPartition) -> std::result::Result<i64, String> {
    let mut parts = text.rsplitn(3, ':');
    let (offset, partition, topic) = (parts.next(), parts.next(), parts.next());
    let (Some(offset), Some(partition), Some(topic)) = (offset, partition, topic) else {
        return Err(format!("{text:?} is not TOPIC:PARTITION:OFFSET"));
    };
    let offset: i64 = offset
        .parse()
        .map_err(|_| format!("offset {offset:?} is not a number"))?;
    let partition: i32 = partition
        .parse()
        .map_err(|_| format!("partition {partition:?} is not a number"))?;
    if topic != source.topic || partition != source.partition {
        return Err(format!(
            "{topic}:{partition} is not where this key lives ({}:{})",
            source.topic, source.partition
        ));
    }
    Ok(offset)
}

async fn stores(State(s): State<Server>) -> Response {
    let ctx = &s.ctx;
    let list: Vec<Value> = ctx
        .topology
        .store_names()
        .into_iter()
        .filter_map(|name| {
            let info = ctx.topology.store_info(name)?;
            let partitions: Vec<Value> = ctx
                .copies
                .tasks_of(name)
                .into_iter()
                .filter_map(|task| {
                    let st = ctx.status.get(task)?;
                    let held = Held {
                        role: st.role,
                        phase: st.phase,
                        lag: st.lag,
                    };
                    Some(json!({
                        "partition": task.partition,
                        "task": task.to_string(),
                        "role": st.role.as_str(),
                        "phase": st.phase.as_str(),
                        "lag_offsets": held.lag_offsets(),
                    }))
                })
                .collect();
            Some(json!({
                "name": name,
                "kind": if info.windows.is_some() { "window" } else { "key-value" },
                "key_serde": info.format.key.name(),
                "value_serde": info.format.value.name(),
                "partitions": partitions,
            }))
        })
        .collect();
    Json(json!({ "served_by": ctx.cfg.user_endpoint, "stores": list })).into_response()
}

/// Records the query's outcome and latency, and passes its response on.
fn done(
    s: &Server,
    started: Instant,
    store: &str,
    role: &str,
    route: Route,
    outcome: Outcome,
    response: Response,
) -> Response {
    s.ctx
        .queries
        .record(store, role, route, outcome, started.elapsed().as_secs_f64());
    response
}

fn busy(s: &Server, started: Instant, store: &str) -> Response {
    let mut r = error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{CONCURRENT_QUERIES} queries under way: try again"),
    );
    r.headers_mut()
        .insert("retry-after", HeaderValue::from_static("1"));
    done(s, started, store, "", Route::None, Outcome::Unavailable, r)
}

fn refused(s: &Server, started: Instant, store: &str, e: QueryError) -> Response {
    let outcome = e.outcome();
    done(
        s,
        started,
        store,
        "",
        Route::None,
        outcome,
        e.into_response(),
    )
}

/// One query's whole course: its parameters, a permit, its resolution by `resolve`, then the
/// plan's copies. Every endpoint that reads a store goes through here.
async fn handle<P>(
    s: Server,
    store: String,
    params: std::result::Result<Query<P>, QueryRejection>,
    resolve: impl FnOnce(&Server, &str, &P) -> std::result::Result<Lookup, QueryError>,
) -> Response {
    let started = Instant::now();
    let params = match params {
        Ok(Query(p)) => p,
        Err(e) => {
            let e = QueryError::new(StatusCode::BAD_REQUEST, e.body_text());
            return refused(&s, started, &store, e);
        }
    };
    let Ok(_permit) = s.permits.clone().try_acquire_owned() else {
        return busy(&s, started, &store);
    };
    match resolve(&s, &store, &params) {
        Ok(q) => answer(&s, q, started).await,
        Err(e) => refused(&s, started, &store, e),
    }
}

async fn key(
    State(s): State<Server>,
    Path((store, key_text)): Path<(String, String)>,
    params: std::result::Result<Query<KeyParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    handle(s, store, params, |s, store, p| {
        s.lookup(store, &key_text, p, &headers)
    })
    .await
}

async fn windows(
    State(s): State<Server>,
    Path((store, key_text)): Path<(String, String)>,
    params: std::result::Result<Query<WindowParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    handle(s, store, params, |s, store, p| {
        s.windows_lookup(store, &key_text, p, &headers)
    })
    .await
}

async fn range(
    State(s): State<Server>,
    Path((store, partition)): Path<(String, String)>,
    params: std::result::Result<Query<RangeParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    handle(s, store, params, |s, store, p| {
        s.range_lookup(store, &partition, p, &headers)
    })
    .await
}

/// Tries the plan's copies until one answers or the deadline passes.
async fn answer(s: &Server, q: Lookup, started: Instant) -> Response {
    let done = |store: &str, role: &str, route, outcome, response| {
        done(s, started, store, role, route, outcome, response)
    };
    let mut tried: Vec<Value> = Vec::new();
    loop {
        let held = s.held(q.task);
        let copies = s.ctx.routing().copies(&q.source);
        let steps = plan(
            held,
            &copies,
            s.me.as_ref(),
            q.ask,
            s.ctx.cfg.assignment.acceptable_recovery_lag,
        );
        for step in steps {
            match step {
                Step::Local => {
                    if let Some(answer) = s.local(&q).await {
                        let role = answer["role"].as_str().unwrap_or("").to_owned();
                        return done(
                            &q.store,
                            &role,
                            Route::Local,
                            Outcome::Answered,
                            Json(answer).into_response(),
                        );
                    }
                    tried.push(
                        json!({ "served_by": s.ctx.cfg.user_endpoint, "outcome": "not ready" }),
                    );
                }
                Step::Forward { to, max_lag } => {
                    let path = forward_path(&q, max_lag);
                    match forward(&to, &path, hop_deadline(q.deadline)).await {
                        Forwarded::Answer(status, mut body) if status == StatusCode::OK => {
                            body["forwarded"] = Value::Bool(true);
                            let role = body["role"].as_str().unwrap_or("").to_owned();
                            return done(
                                &q.store,
                                &role,
                                Route::Forwarded,
                                Outcome::Answered,
                                Json(body).into_response(),
                            );
                        }
                        Forwarded::Answer(status, body) if status.is_client_error() => {
                            return done(
                                &q.store,
                                "",
                                Route::Forwarded,
                                Outcome::BadRequest,
                                (status, Json(body)).into_response(),
                            );
                        }
                        Forwarded::Answer(status, body) => tried.push(json!({
                            "served_by": endpoint(&to),
                            "outcome": status.as_u16(),
                            "there": body["here"],
                        })),
                        Forwarded::Failed(why) => {
                            tried.push(json!({ "served_by": endpoint(&to), "outcome": why }))
                        }
                    }
                }
            }
        }
        let left = q.deadline.saturating_duration_since(Instant::now());
        if q.ask.forwarded || left.is_zero() {
            break;
        }
        tokio::time::sleep(left.min(RETRY_EVERY)).await;
        // The latest attempts say most about why.
        let excess = tried.len().saturating_sub(16);
        tried.drain(..excess);
    }
    let held = s.held(q.task);
    let copies = s.ctx.routing().copies(&q.source);
    let mut r = (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({
            "error": format!("no copy of task {} answered within its bound by the deadline", q.task),
            "store": q.store,
            "partition": q.task.partition,
            "here": held.map(|h| json!({ "role": h.role.as_str(), "phase": h.phase.as_str(), "lag_offsets": h.lag_offsets() })),
            "active": copies.active.as_ref().map(endpoint),
            "standbys": copies.standbys.iter().map(endpoint).collect::<Vec<_>>(),
            "tried": tried,
        })),
    )
        .into_response();
    r.headers_mut()
        .insert("retry-after", HeaderValue::from_static("1"));
    done(&q.store, "", Route::None, Outcome::Unavailable, r)
}

/// How long one hop may take: half of what is left (at least 250 ms), so that a copy that
/// accepts the connection and never answers (a paused process) leaves time for the next.
fn hop_deadline(deadline: Instant) -> Instant {
    let left = deadline.saturating_duration_since(Instant::now());
    Instant::now() + left.min((left / 2).max(Duration::from_millis(250)))
}

/// The query as another instance receives it: the key by hex, the bound it must meet.
fn forward_path(q: &Lookup, max_lag: Option<u64>) -> String {
    let mut path = match &q.op {
        Op::Key(key) => format!("/v1/stores/{}/keys/_?key_hex={}", q.store, hex(key)),
        Op::Windows { key, from, to } => format!(
            "/v1/stores/{}/keys/_/windows?key_hex={}&from={from}&to={to}",
            q.store,
            hex(key)
        ),
        Op::Range(b) => {
            let mut path = format!(
                "/v1/stores/{}/partitions/{}/range?limit={}",
                q.store, q.task.partition, b.limit
            );
            for (name, key) in [("from", &b.from), ("to", &b.to), ("after", &b.after)] {
                if let Some(k) = key {
                    path += &format!("&{name}_hex={}", hex(k));
                }
            }
            path
        }
    };
    if let Some(m) = max_lag {
        path += &format!("&max_lag_offsets={m}");
    }
    if let Some(o) = q.at_least {
        path += &format!("&at_least={}:{}:{o}", q.source.topic, q.source.partition);
    }
    path
}

async fn metadata(
    State(s): State<Server>,
    Path((store, key_text)): Path<(String, String)>,
    params: std::result::Result<Query<KeyParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let params = match params {
        Ok(Query(p)) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let q = match s.lookup(&store, &key_text, &params, &headers) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let copies = s.ctx.routing().copies(&q.source);
    let here = s.held(q.task);
    // Lags are known for the copy held here; the others report theirs when asked.
    let lag_of = |h: &HostInfo| -> Value {
        match (Some(h) == s.me.as_ref(), here) {
            (true, Some(held)) => json!(held.lag_offsets()),
            _ => Value::Null,
        }
    };
    Json(json!({
        "store": q.store,
        "partition": q.task.partition,
        "task": q.task.to_string(),
        "active": copies.active.as_ref().map(|a| json!({ "endpoint": endpoint(a), "lag_offsets": lag_of(a) })),
        "standbys": copies.standbys.iter().map(|h| json!({ "endpoint": endpoint(h), "lag_offsets": lag_of(h) })).collect::<Vec<_>>(),
        "generation": s.ctx.routing().generation,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_least_names_the_keys_partition() {
        let tp = TopicPartition::new("ev:ents", 2);
        assert_eq!(parse_at_least("ev:ents:2:41", &tp), Ok(41));
        assert!(parse_at_least("ev:ents:1:41", &tp)
            .unwrap_err()
            .contains("not where this key lives"));
        assert!(parse_at_least("41", &tp)
            .unwrap_err()
            .contains("TOPIC:PARTITION:OFFSET"));
        assert!(parse_at_least("ev:ents:2:x", &tp)
            .unwrap_err()
            .contains("offset"));
    }
}
