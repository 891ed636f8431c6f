//! The same queries from Rust, for applications that embed Baton: the lookups, the plan, the
//! forwarding and the staleness bounds of the HTTP endpoints, with the stored bytes and every
//! field of the answer typed. A [`Queries`] handle is made before the instance starts and
//! answers once it runs (`instance::run_with_queries`); typed keys and values come from the
//! streams crate's serdes on top of it.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use baton_protocol::TopicPartition;
use serde_json::Value;

use crate::context::Context;
use crate::query::copies::RangeBounds;
use crate::query::engine::{Answer, Engine};
use crate::query::format::parse_hex;
use crate::query::lookup::{Hop, KeyArg, Lookup, QueryError};
use crate::query::plan::Bound;
use crate::query::server::{DEFAULT_TIMEOUT, LONGEST_TIMEOUT};
use crate::status::Role;

/// What a caller accepts, as the HTTP query parameters say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryOptions {
    /// `max_lag_offsets`: a copy at most this many changelog records behind may answer.
    pub max_lag_offsets: Option<u64>,
    /// `max_lag_ms`: a copy at most this many milliseconds behind may answer.
    pub max_lag_ms: Option<u64>,
    /// `at_least`: answer once the store holds everything derived from input up to this
    /// offset (read your own writes): of the key's own source partition, or of any input
    /// upstream of the store, through repartition topics ([`crate::query::upstream`]). Key
    /// lookups only.
    pub at_least: Option<(TopicPartition, i64)>,
    /// How long to look for a copy that fits (at most 60 s).
    pub timeout: Duration,
}

impl Default for QueryOptions {
    fn default() -> QueryOptions {
        QueryOptions {
            max_lag_offsets: None,
            max_lag_ms: None,
            at_least: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// Which copy answered, and how stale it was: the fields every answer carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub partition: u32,
    pub task: String,
    /// The answering instance's `application.server`.
    pub served_by: String,
    pub role: Role,
    pub lag_offsets: u64,
    /// `None` when the copy's staleness in time is not known.
    pub lag_ms: Option<u64>,
    /// The last changelog offset the answer reflects (-1: none yet).
    pub position: i64,
    /// Answered by another instance, one hop away.
    pub forwarded: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyAnswer {
    /// The stored value (without a timestamped layout's timestamp); `None`: not found.
    pub value: Option<Vec<u8>>,
    pub served: Served,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowAnswer {
    /// (window start, window end, stored value), by start.
    pub windows: Vec<(i64, i64, Vec<u8>)>,
    pub more: bool,
    pub served: Served,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeAnswer {
    /// (key, value), in key order.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// More keys follow the last one: ask again with it as `after`.
    pub more: bool,
    pub served: Served,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryFailure {
    #[error("the instance has not started yet")]
    NotStarted,
    /// A malformed key or parameter, or no such store.
    #[error(transparent)]
    Refused(#[from] QueryError),
    /// No copy answered within the bound by the deadline: the copies and their lags, as the
    /// HTTP 503 lists them.
    #[error("no copy answered within its bound by the deadline: {0}")]
    Unavailable(Value),
    /// Another instance's answer did not read as an answer.
    #[error("an answer from another instance does not read: {0}")]
    Malformed(String),
}

/// A handle on an instance's queries; clone it freely.
#[derive(Clone, Default)]
pub struct Queries {
    engine: Arc<OnceLock<Engine>>,
}

impl Queries {
    pub fn new() -> Queries {
        Queries::default()
    }

    /// The instance runs: queries answer from now on.
    pub(crate) fn bind(&self, ctx: Arc<Context>) {
        let _ = self.engine.set(Engine::new(ctx));
    }

    fn engine(&self) -> Result<&Engine, QueryFailure> {
        self.engine.get().ok_or(QueryFailure::NotStarted)
    }

    /// One key of a key-value store, by its serialized bytes.
    pub async fn get(
        &self,
        store: &str,
        key: &[u8],
        options: &QueryOptions,
    ) -> Result<KeyAnswer, QueryFailure> {
        let e = self.engine()?;
        if let Some(answer) = e.global_key(store, KeyArg::Bytes(key)).await {
            let body = answer?;
            return Ok(KeyAnswer {
                value: match &body["value_hex"] {
                    Value::Null => None,
                    v => Some(bytes(v)?),
                },
                served: served(&body)?,
            });
        }
        let started = Instant::now();
        let at_least = options
            .at_least
            .as_ref()
            .map(|(tp, o)| format!("{}:{}:{o}", tp.topic, tp.partition));
        let q = e.key_lookup(
            store,
            KeyArg::Bytes(key),
            bound(options),
            at_least.as_deref(),
            hop(options),
        );
        let body = run(e, q, started).await?;
        Ok(KeyAnswer {
            value: match &body["value_hex"] {
                Value::Null => None,
                v => Some(bytes(v)?),
            },
            served: served(&body)?,
        })
    }

    /// The windows of one key of a window store that start in `from..=to` (milliseconds).
    pub async fn windows(
        &self,
        store: &str,
        key: &[u8],
        from: i64,
        to: i64,
        options: &QueryOptions,
    ) -> Result<WindowAnswer, QueryFailure> {
        let e = self.engine()?;
        let started = Instant::now();
        let q = e.windows_lookup(
            store,
            KeyArg::Bytes(key),
            (from, to),
            bound(options),
            hop(options),
        );
        let body = run(e, q, started).await?;
        let windows = array(&body["windows"])?
            .iter()
            .map(|w| Ok((int(&w["start"])?, int(&w["end"])?, bytes(&w["value_hex"])?)))
            .collect::<Result<_, QueryFailure>>()?;
        Ok(WindowAnswer {
            windows,
            more: body["more"] == true,
            served: served(&body)?,
        })
    }

    /// Keys of one partition of a key-value store in order (see [`RangeBounds`]).
    pub async fn range(
        &self,
        store: &str,
        partition: u32,
        bounds: RangeBounds,
        options: &QueryOptions,
    ) -> Result<RangeAnswer, QueryFailure> {
        let e = self.engine()?;
        let started = Instant::now();
        let q = e.range_lookup(store, partition, bounds, bound(options), hop(options));
        let body = run(e, q, started).await?;
        let entries = array(&body["entries"])?
            .iter()
            .map(|x| Ok((bytes(&x["key_hex"])?, bytes(&x["value_hex"])?)))
            .collect::<Result<_, QueryFailure>>()?;
        Ok(RangeAnswer {
            entries,
            more: body["more"] == true,
            served: served(&body)?,
        })
    }
}

fn bound(o: &QueryOptions) -> Bound {
    Bound {
        offsets: o.max_lag_offsets,
        ms: o.max_lag_ms,
    }
}

fn hop(o: &QueryOptions) -> Hop {
    Hop {
        forwarded: false,
        deadline: Instant::now() + o.timeout.min(LONGEST_TIMEOUT),
    }
}

async fn run(
    e: &Engine,
    q: Result<Lookup, QueryError>,
    started: Instant,
) -> Result<Value, QueryFailure> {
    let q = match q {
        Ok(q) => q,
        Err(err) => {
            e.refused("", &err, started);
            return Err(err.into());
        }
    };
    match e.answer(&q, started).await {
        Answer::Ok { body, .. } => Ok(body),
        Answer::Refused { status, body } => Err(QueryError::new(
            status,
            body["error"].as_str().unwrap_or("refused").to_owned(),
        )
        .into()),
        Answer::Unavailable(body) => Err(QueryFailure::Unavailable(body)),
    }
}

fn malformed(what: &str, v: &Value) -> QueryFailure {
    QueryFailure::Malformed(format!("{what}: {v}"))
}

fn bytes(v: &Value) -> Result<Vec<u8>, QueryFailure> {
    v.as_str()
        .and_then(|h| parse_hex(h).ok())
        .ok_or_else(|| malformed("not hex", v))
}

fn int(v: &Value) -> Result<i64, QueryFailure> {
    v.as_i64().ok_or_else(|| malformed("not a number", v))
}

fn array(v: &Value) -> Result<&Vec<Value>, QueryFailure> {
    v.as_array().ok_or_else(|| malformed("not a list", v))
}

fn served(body: &Value) -> Result<Served, QueryFailure> {
    let role = match body["role"].as_str() {
        // A global table's own copy on the instance asked (task "global").
        Some("active") | Some("global") => Role::Active,
        Some("standby") => Role::Standby,
        Some("warmup") => Role::Warmup,
        _ => return Err(malformed("role", &body["role"])),
    };
    Ok(Served {
        partition: body["partition"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(|| malformed("partition", &body["partition"]))?,
        task: body["task"].as_str().unwrap_or_default().to_owned(),
        served_by: body["served_by"].as_str().unwrap_or_default().to_owned(),
        role,
        lag_offsets: body["lag_offsets"]
            .as_u64()
            .ok_or_else(|| malformed("lag_offsets", &body["lag_offsets"]))?,
        lag_ms: body["lag_ms"].as_u64(),
        position: int(&body["position"])?,
        forwarded: body["forwarded"] == true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_reads_back_with_every_field() {
        let body = json!({
            "partition": 3, "task": "0_3", "served_by": "h:1", "role": "warmup",
            "lag_offsets": 4, "lag_ms": null, "position": 17, "forwarded": true,
        });
        let s = served(&body).unwrap();
        assert_eq!(s.role, Role::Warmup);
        assert_eq!(
            (s.partition, s.lag_offsets, s.lag_ms, s.position),
            (3, 4, None, 17)
        );
        assert!(s.forwarded);
        let bad = json!({ "role": "boss" });
        assert!(matches!(served(&bad), Err(QueryFailure::Malformed(_))));
    }

    #[tokio::test]
    async fn a_handle_answers_only_once_its_instance_runs() {
        let q = Queries::new();
        let r = q.get("counts", b"k", &QueryOptions::default()).await;
        assert_eq!(r, Err(QueryFailure::NotStarted));
    }
}
