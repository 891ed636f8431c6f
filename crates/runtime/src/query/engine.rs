//! A resolved query's course: the plan's copies tried in order, this instance's own or one
//! hop away, until one answers or the deadline passes. The HTTP endpoints and the in-process
//! API both run it, so both count in the same metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use baton_assignor::TaskId;
use baton_core::{Backoff, Retrying};
use baton_protocol::HostInfo;
use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::context::Context;
use crate::query::format::hex;
use crate::query::forward::{forward, Forwarded};
use crate::query::lookup::{Lookup, Op, QueryError};
use crate::query::metrics::{Outcome, Route};
use crate::query::plan::{plan, Bound, Held, Step};
use crate::query::routing::endpoint;

/// Between two attempts at a query no copy could answer (the assignment may have moved on),
/// until the query's deadline.
const RETRY: Backoff = Backoff::forever(Duration::from_millis(50), Duration::from_millis(200));

/// What this instance needs to answer a query: its state, and its own endpoint (so it never
/// forwards to itself).
#[derive(Clone)]
pub struct Engine {
    pub(crate) ctx: Arc<Context>,
    pub(crate) me: Option<HostInfo>,
}

/// How a query ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// 200: the answer, read here or one hop away.
    Ok { body: Value, route: Route },
    /// A 4xx another instance gave for the query forwarded to it.
    Refused { status: StatusCode, body: Value },
    /// 503: no copy answered within its bound by the deadline; the copies and their lags.
    Unavailable(Value),
}

impl Engine {
    pub fn new(ctx: Arc<Context>) -> Engine {
        let me = crate::query::routing::parse_endpoint(&ctx.cfg.user_endpoint);
        Engine { ctx, me }
    }

    /// This instance's copy of `task`, as its status board shows it now.
    pub(crate) fn held(&self, task: TaskId) -> Option<Held> {
        let s = self.ctx.status.get(task)?;
        Some(Held {
            role: s.role,
            phase: s.phase,
            lag: s.lag,
            lag_ms: self.ctx.status.lag_ms(task, Instant::now()),
        })
    }

    /// Counts a query refused for what it asked.
    pub fn refused(&self, store: &str, e: &QueryError, started: Instant) {
        self.record(store, "", Route::None, e.outcome(), started);
    }

    pub(crate) fn record(
        &self,
        store: &str,
        role: &str,
        route: Route,
        outcome: Outcome,
        started: Instant,
    ) {
        self.ctx
            .queries
            .record(store, role, route, outcome, started.elapsed().as_secs_f64());
    }

    /// Tries the plan's copies until one answers or the deadline passes; counted.
    pub async fn answer(&self, q: &Lookup, started: Instant) -> Answer {
        let answer = self.course(q).await;
        let (role, route, outcome) = match &answer {
            Answer::Ok { body, route } => (
                body["role"].as_str().unwrap_or(""),
                *route,
                Outcome::Answered,
            ),
            Answer::Refused { .. } => ("", Route::Forwarded, Outcome::BadRequest),
            Answer::Unavailable(_) => ("", Route::None, Outcome::Unavailable),
        };
        self.record(&q.store, role, route, outcome, started);
        answer
    }

    async fn course(&self, q: &Lookup) -> Answer {
        let resolved = match self.resolve_upstream(q).await {
            Ok(resolved) => resolved,
            Err(answer) => return answer,
        };
        let q = resolved.as_ref().unwrap_or(q);
        let mut tried: Vec<Value> = Vec::new();
        let mut retrying = Retrying::default();
        loop {
            let held = self.held(q.task);
            let copies = self.ctx.routing().copies(&q.source);
            let steps = plan(
                held,
                &copies,
                self.me.as_ref(),
                q.ask,
                self.ctx.cfg.assignment.acceptable_recovery_lag,
            );
            for step in steps {
                match step {
                    Step::Local => {
                        if let Some(body) = self.local(q).await {
                            return Answer::Ok {
                                body,
                                route: Route::Local,
                            };
                        }
                        tried.push(json!({ "served_by": self.ctx.cfg.user_endpoint, "outcome": "not ready" }));
                    }
                    Step::Forward { to, bound } => {
                        let path = forward_path(q, bound);
                        match forward(&to, &path, hop_deadline(q.deadline)).await {
                            Forwarded::Answer(status, mut body) if status == StatusCode::OK => {
                                body["forwarded"] = Value::Bool(true);
                                return Answer::Ok {
                                    body,
                                    route: Route::Forwarded,
                                };
                            }
                            Forwarded::Answer(status, body) if status.is_client_error() => {
                                return Answer::Refused { status, body };
                            }
                            Forwarded::Answer(status, body) => tried.push(json!({
                                "served_by": endpoint(&to),
                                "outcome": status.as_u16(),
                                "there": body["here"],
                            })),
                            Forwarded::Failed(why) => tried.push(
                                json!({ "served_by": endpoint(&to), "outcome": why.to_string() }),
                            ),
                        }
                    }
                }
            }
            let left = q.deadline.saturating_duration_since(Instant::now());
            if q.ask.forwarded || left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(retrying.wait(&RETRY))).await;
            // The latest attempts say most about why.
            let excess = tried.len().saturating_sub(16);
            tried.drain(..excess);
        }
        let held = self.held(q.task);
        let copies = self.ctx.routing().copies(&q.source);
        Answer::Unavailable(json!({
            "error": format!("no copy of task {} answered within its bound by the deadline", q.task),
            "store": q.store,
            "partition": q.task.partition,
            "here": held.map(|h| json!({
                "role": h.role.as_str(),
                "phase": h.phase.as_str(),
                "lag_offsets": h.lag_offsets(),
                "lag_ms": h.lag_ms(),
            })),
            "active": copies.active.as_ref().map(endpoint),
            "standbys": copies.standbys.iter().map(endpoint).collect::<Vec<_>>(),
            "tried": tried,
        }))
    }

    /// Where the lookup's key lives: the active's and every standby's (and warm-up's)
    /// endpoint with its lag, each other instance's as it reports it within `within`.
    pub async fn metadata(&self, q: &Lookup, within: Duration) -> Value {
        let copies = self.ctx.routing().copies(&q.source);
        let deadline = Instant::now() + within;
        let describe = |h: HostInfo| async move {
            let at = endpoint(&h);
            let lags = if Some(&h) == self.me.as_ref() {
                self.held(q.task).map(|held| copy_json(&held))
            } else {
                self.remote_lags(&h, q, deadline).await
            };
            match lags {
                Some(mut v) => {
                    v["endpoint"] = json!(at);
                    v
                }
                None => json!({ "endpoint": at, "lag_offsets": null, "lag_ms": null }),
            }
        };
        let active = match copies.active.clone() {
            Some(a) => Some(describe(a).await),
            None => None,
        };
        let standbys = join_all(copies.standbys.iter().cloned().map(describe)).await;
        json!({
            "store": q.store,
            "partition": q.task.partition,
            "task": q.task.to_string(),
            "active": active,
            "standbys": standbys,
            "generation": self.ctx.routing().generation,
        })
    }

    /// The copy of `q`'s task at `h`, as that instance's `/v1/stores` lists it.
    async fn remote_lags(&self, h: &HostInfo, q: &Lookup, deadline: Instant) -> Option<Value> {
        let Forwarded::Answer(StatusCode::OK, body) = forward(h, "/v1/stores", deadline).await
        else {
            return None;
        };
        let store = body["stores"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == q.store.as_str())?;
        let copy = store["partitions"]
            .as_array()?
            .iter()
            .find(|p| p["partition"] == q.task.partition)?;
        Some(json!({
            "role": copy["role"],
            "phase": copy["phase"],
            "lag_offsets": copy["lag_offsets"],
            "lag_ms": copy["lag_ms"],
        }))
    }
}

/// A held copy as `/v1/stores` and the metadata show it.
pub(crate) fn copy_json(held: &Held) -> Value {
    json!({
        "role": held.role.as_str(),
        "phase": held.phase.as_str(),
        "lag_offsets": held.lag_offsets(),
        "lag_ms": held.lag_ms(),
    })
}

/// How long one hop may take: half of what is left (at least 250 ms), so that a copy that
/// accepts the connection and never answers (a paused process) leaves time for the next.
fn hop_deadline(deadline: Instant) -> Instant {
    let left = deadline.saturating_duration_since(Instant::now());
    Instant::now() + left.min((left / 2).max(Duration::from_millis(250)))
}

/// The query as another instance receives it: the key by hex, the bound it must meet.
fn forward_path(q: &Lookup, bound: Bound) -> String {
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
    if let Some(m) = bound.offsets {
        path += &format!("&max_lag_offsets={m}");
    }
    if let Some(m) = bound.ms {
        path += &format!("&max_lag_ms={m}");
    }
    if let Some(o) = q.at_least {
        path += &format!("&at_least={}:{}:{o}", q.source.topic, q.source.partition);
    }
    path
}
