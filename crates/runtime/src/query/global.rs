//! Queries of a global table's store: every instance holds the whole table, so the instance
//! asked answers from its own copy, whatever the key, with how far behind the topic's end
//! that copy was at its last fetch.

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::query::engine::Engine;
use crate::query::format::hex;
use crate::query::lookup::{key_bytes_as, KeyArg, QueryError, QueryResult};

impl Engine {
    /// One key of global table `store`; `None` when `store` is not a global table's.
    pub async fn global_key(&self, store: &str, key: KeyArg<'_>) -> Option<QueryResult<Value>> {
        let format = self.ctx.topology.global_format(store)?;
        let g = self.ctx.globals.iter().find(|g| g.name == store)?.clone();
        let key = match key_bytes_as(format, key) {
            Ok(k) => k,
            Err(e) => return Some(Err(e)),
        };
        let (k, lag) = (key.clone(), g.lag.clone());
        let read = tokio::task::spawn_blocking(move || g.store.get(&k)).await;
        let value = match read {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                return Some(Err(QueryError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("global table {store}: {e}"),
                )))
            }
            Err(e) => {
                return Some(Err(QueryError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    e.to_string(),
                )))
            }
        };
        let lag = lag.load(std::sync::atomic::Ordering::Relaxed);
        Some(Ok(json!({
            "store": store,
            "key": format.key.to_json(&key),
            "found": value.is_some(),
            "value": value.as_deref().map(|v| format.value.to_json(v)),
            "value_hex": value.as_deref().map(hex),
            "position": -1,
            "partition": 0,
            "task": "global",
            "served_by": self.ctx.cfg.user_endpoint,
            "role": "global",
            "lag_offsets": lag,
            "lag_ms": Value::Null,
            "forwarded": false,
        })))
    }
}
