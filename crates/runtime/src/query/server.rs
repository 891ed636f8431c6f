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
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::context::Context;
use crate::error::{Result, RuntimeError};
use crate::query::copies::RangeBounds;
use crate::query::engine::{copy_json, Answer, Engine};
use crate::query::format::parse_hex;
use crate::query::lookup::{Hop, KeyArg, Lookup, QueryError, QueryResult, DEFAULT_LIMIT};
use crate::query::metrics::{Outcome, Route};
use crate::query::plan::{Bound, Held};

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
/// How long the metadata endpoint waits for other instances to report their copies' lags.
const METADATA_WITHIN: Duration = Duration::from_millis(500);

#[derive(Clone)]
struct Server {
    engine: Engine,
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
    let server = Server {
        engine: Engine::new(ctx),
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
        .route("/v1/progress/{topic}/{partition}", get(progress))
        .fallback(|| async {
            QueryError::new(
                StatusCode::NOT_FOUND,
                "no such endpoint: see docs/QUERIES.md",
            )
            .into_response()
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

impl IntoResponse for QueryError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

fn unavailable(body: Value) -> Response {
    let mut r = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    r.headers_mut()
        .insert("retry-after", HeaderValue::from_static("1"));
    r
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        match self {
            Answer::Ok { body, .. } => Json(body).into_response(),
            Answer::Refused { status, body } => (status, Json(body)).into_response(),
            Answer::Unavailable(body) => unavailable(body),
        }
    }
}

/// Query parameters of a key lookup; an unknown one is a 400 naming it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyParams {
    key_hex: Option<String>,
    max_lag_offsets: Option<u64>,
    max_lag_ms: Option<u64>,
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
    max_lag_ms: Option<u64>,
    timeout_ms: Option<u64>,
}

/// Query parameters of a key's windows.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowParams {
    key_hex: Option<String>,
    from: Option<i64>,
    to: Option<i64>,
    max_lag_offsets: Option<u64>,
    max_lag_ms: Option<u64>,
    timeout_ms: Option<u64>,
}

fn key_arg<'a>(text: &'a str, hex: &'a Option<String>) -> KeyArg<'a> {
    match hex {
        Some(h) => KeyArg::Hex(h),
        None => KeyArg::Text(text),
    }
}

/// Whether the query was forwarded here, and its deadline: what the forwarder had left, or
/// `timeout_ms`.
fn hop(headers: &HeaderMap, timeout_ms: Option<u64>) -> Hop {
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
    Hop {
        forwarded,
        deadline: Instant::now() + timeout,
    }
}

/// A range scan's bounds from its parameters, each key as text or hex.
fn range_bounds(engine: &Engine, store: &str, p: &RangeParams) -> QueryResult<RangeBounds> {
    let (info, _) = engine.store(store, false)?;
    let key = |name: &str, text: &Option<String>, hex: &Option<String>| match (text, hex) {
        (Some(_), Some(_)) => Err(QueryError::bad(format!("{name} and {name}_hex: give one"))),
        (Some(t), None) => info
            .format
            .key
            .parse_key(t)
            .map(Some)
            .map_err(|e| QueryError::bad(format!("{name}: {e}"))),
        (None, Some(h)) => parse_hex(h)
            .map(Some)
            .map_err(|e| QueryError::bad(format!("{name}_hex: {e}"))),
        (None, None) => Ok(None),
    };
    Ok(RangeBounds {
        from: key("from", &p.from, &p.from_hex)?,
        to: key("to", &p.to, &p.to_hex)?,
        after: key("after", &p.after, &p.after_hex)?,
        limit: p.limit.unwrap_or(DEFAULT_LIMIT),
    })
}

async fn stores(State(s): State<Server>) -> Response {
    let engine = &s.engine;
    let ctx = &engine.ctx;
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
                    let held: Held = engine.held(task)?;
                    let mut copy = copy_json(&held);
                    copy["partition"] = json!(task.partition);
                    copy["task"] = json!(task.to_string());
                    Some(copy)
                })
                .collect();
            Some(json!({
                "name": name,
                "kind": info.kind().name(),
                "key_serde": info.format.key.name(),
                "value_serde": info.format.value.name(),
                "partitions": partitions,
            }))
        })
        .collect();
    Json(json!({ "served_by": ctx.cfg.user_endpoint, "stores": list })).into_response()
}

/// One query's whole course: its parameters, a permit, its resolution by `resolve`, then the
/// engine. Every endpoint that reads a store goes through here.
async fn handle<P>(
    s: Server,
    store: String,
    params: std::result::Result<Query<P>, QueryRejection>,
    resolve: impl FnOnce(&Engine, &str, &P) -> QueryResult<Lookup>,
) -> Response {
    let started = Instant::now();
    let refuse = |e: QueryError| {
        s.engine.refused(&store, &e, started);
        e.into_response()
    };
    let params = match params {
        Ok(Query(p)) => p,
        Err(e) => return refuse(QueryError::bad(e.body_text())),
    };
    let Ok(_permit) = s.permits.clone().try_acquire_owned() else {
        s.engine
            .record(&store, "", Route::None, Outcome::Unavailable, started);
        return unavailable(json!({
            "error": format!("{CONCURRENT_QUERIES} queries under way: try again")
        }));
    };
    match resolve(&s.engine, &store, &params) {
        Ok(q) => s.engine.answer(&q, started).await.into_response(),
        Err(e) => refuse(e),
    }
}

async fn key(
    State(s): State<Server>,
    Path((store, key_text)): Path<(String, String)>,
    params: std::result::Result<Query<KeyParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    if let Ok(Query(p)) = &params {
        let key = key_arg(&key_text, &p.key_hex);
        if let Some(answer) = s.engine.global_key(&store, key).await {
            return match answer {
                Ok(body) => Json(body).into_response(),
                Err(e) => e.into_response(),
            };
        }
    }
    handle(s, store, params, |e, store, p| {
        let bound = Bound {
            offsets: p.max_lag_offsets,
            ms: p.max_lag_ms,
        };
        let key = key_arg(&key_text, &p.key_hex);
        e.key_lookup(
            store,
            key,
            bound,
            p.at_least.as_deref(),
            hop(&headers, p.timeout_ms),
        )
    })
    .await
}

async fn windows(
    State(s): State<Server>,
    Path((store, key_text)): Path<(String, String)>,
    params: std::result::Result<Query<WindowParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    handle(s, store, params, |e, store, p| {
        let bound = Bound {
            offsets: p.max_lag_offsets,
            ms: p.max_lag_ms,
        };
        let span = (p.from.unwrap_or(0), p.to.unwrap_or(i64::MAX));
        let key = key_arg(&key_text, &p.key_hex);
        e.windows_lookup(store, key, span, bound, hop(&headers, p.timeout_ms))
    })
    .await
}

async fn range(
    State(s): State<Server>,
    Path((store, partition)): Path<(String, String)>,
    params: std::result::Result<Query<RangeParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    handle(s, store, params, |e, store, p| {
        let bound = Bound {
            offsets: p.max_lag_offsets,
            ms: p.max_lag_ms,
        };
        let partition: u32 = partition.parse().map_err(|_| {
            QueryError::bad(format!("partition {partition:?} is not a partition number"))
        })?;
        let bounds = range_bounds(e, store, p)?;
        e.range_lookup(store, partition, bounds, bound, hop(&headers, p.timeout_ms))
    })
    .await
}

async fn metadata(
    State(s): State<Server>,
    Path((store, key_text)): Path<(String, String)>,
    params: std::result::Result<Query<KeyParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let params = match params {
        Ok(Query(p)) => p,
        Err(e) => return QueryError::bad(e.body_text()).into_response(),
    };
    let key = key_arg(&key_text, &params.key_hex);
    let q = s.engine.key_lookup(
        &store,
        key,
        Bound::default(),
        None,
        hop(&headers, params.timeout_ms),
    );
    match q {
        Ok(q) => Json(s.engine.metadata(&q, METADATA_WITHIN).await).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Query parameters of a progress wait.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProgressParams {
    at_least: i64,
    timeout_ms: Option<u64>,
}

/// Whether this instance's active of the task reading `topic`'s `partition` has processed
/// past `at_least` (waiting for it until the deadline): a step of resolving an `at_least` on
/// an input upstream of a store ([`crate::query::upstream`]). Never forwarded.
async fn progress(
    State(s): State<Server>,
    Path((topic, partition)): Path<(String, String)>,
    params: std::result::Result<Query<ProgressParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let params = match params {
        Ok(Query(p)) => p,
        Err(e) => return QueryError::bad(e.body_text()).into_response(),
    };
    let Ok(partition) = partition.parse::<i32>() else {
        return QueryError::bad(format!("partition {partition:?} is not a partition number"))
            .into_response();
    };
    let deadline = hop(&headers, params.timeout_ms).deadline;
    let tp = baton_protocol::TopicPartition::new(topic, partition);
    s.engine
        .progress(&tp, params.at_least, deadline)
        .await
        .into_response()
}
