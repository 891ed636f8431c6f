//! Reading this instance's own copy: the key, window or range a lookup names, from one
//! consistent snapshot of the store, on the blocking pool, never waiting on a stream thread.
//! Answers carry each value in its serde's JSON form and as hex (`value_hex`), so a caller
//! with any serde, and the in-process API, reads the stored bytes.

use baton_assignor::TaskId;
use serde_json::{json, Value};

use crate::layout::{session_key, split_session_key, split_timestamped, Layout};
use crate::query::copies::{LocalCopies, RangeBounds};
use crate::query::engine::Engine;
use crate::query::format::hex;
use crate::query::lookup::{Lookup, Op, LARGEST_LIMIT};
use crate::store::StoreError;

impl Engine {
    /// Reads the lookup from this instance's copy, once it has processed `at_least` (if
    /// asked); `None` when the copy is gone, not consistent now, or the wait ran out.
    pub(crate) async fn local(&self, q: &Lookup) -> Option<Value> {
        if let Some(offset) = q.at_least {
            let processed = self.processed_here(q.task, &q.source, offset, q.deadline);
            if processed.await != Some(true) {
                return None;
            }
        }
        let held = self.held(q.task)?;
        let mut answer = match &q.op {
            Op::Key(key) => self.read_key(q, key).await?,
            Op::Range(bounds) => self.read_range(q, bounds).await?,
            Op::Windows { key, from, to } => self.read_windows(q, key, *from, *to).await?,
        };
        for (field, value) in [
            ("store", json!(q.store)),
            ("partition", json!(q.task.partition)),
            ("task", json!(q.task.to_string())),
            ("served_by", json!(self.ctx.cfg.user_endpoint)),
            ("role", json!(held.role.as_str())),
            ("lag_offsets", json!(held.lag_offsets())),
            ("lag_ms", json!(held.lag_ms())),
            ("forwarded", json!(false)),
        ] {
            answer[field] = value;
        }
        Some(answer)
    }

    /// A stored value without its timestamp (if the layout has one).
    fn value_bytes<'a>(&self, q: &Lookup, stored: &'a [u8]) -> &'a [u8] {
        match q.info.layout {
            Layout::Plain => stored,
            Layout::Timestamped => split_timestamped(stored).map_or(stored, |(_, v)| v),
        }
    }

    fn value_json(&self, q: &Lookup, stored: &[u8]) -> Value {
        q.info.format.value.to_json(self.value_bytes(q, stored))
    }

    /// Runs `read` on this instance's copy of `q`'s store on the blocking pool (a store read
    /// may go to disk); `None` when the copy is gone or not consistent now, or the read
    /// failed (logged).
    async fn blocking<T: Send + 'static>(
        &self,
        q: &Lookup,
        read: impl FnOnce(&LocalCopies, &str, TaskId) -> Result<Option<T>, StoreError> + Send + 'static,
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
        let value = read.value.as_deref();
        Some(json!({
            "key": q.info.format.key.to_json(key),
            "found": value.is_some(),
            "value": value.map(|v| self.value_json(q, v)),
            "value_hex": value.map(|v| hex(self.value_bytes(q, v))),
            "position": read.position,
        }))
    }

    /// A window store keeps `key, start (8 bytes), sequence (4 bytes)`: one scan from the
    /// first start to the last, keeping the entries of exactly this key.
    async fn read_windows(&self, q: &Lookup, key: &[u8], from: i64, to: i64) -> Option<Value> {
        if q.info.sessions.is_some() {
            return self.read_sessions(q, key, from, to).await;
        }
        let size = q.info.windows.map_or(0, |w| w.size_ms);
        let mut upper = crate::layout::window_store_key(key, to);
        upper.truncate(key.len() + 8);
        upper.extend_from_slice(&[0xff; 4]);
        let from = crate::layout::window_store_key(key, from);
        let read = self.read_between(q, from, upper).await?;
        let windows: Vec<Value> = read
            .entries
            .iter()
            .filter_map(|(k, v)| {
                let start = crate::layout::window_store_start(key, k)?;
                Some(self.window_json(q, (start, start.saturating_add(size)), v))
            })
            .collect();
        Some(self.windows_json(q, key, windows, (read.more, read.position)))
    }

    /// The entries of `q`'s store from `from` to `to` (at most [`LARGEST_LIMIT`]), from one
    /// snapshot of this instance's copy.
    async fn read_between(
        &self,
        q: &Lookup,
        from: Vec<u8>,
        to: Vec<u8>,
    ) -> Option<crate::query::copies::RangeRead> {
        let bounds = RangeBounds {
            from: Some(from),
            to: Some(to),
            after: None,
            limit: LARGEST_LIMIT,
        };
        self.blocking(q, move |copies, store, task| {
            copies.read_range(store, task, &bounds)
        })
        .await
    }

    fn window_json(&self, q: &Lookup, (start, end): (i64, i64), stored: &[u8]) -> Value {
        json!({
            "start": start,
            "end": end,
            "value": self.value_json(q, stored),
            "value_hex": hex(self.value_bytes(q, stored)),
        })
    }

    fn windows_json(
        &self,
        q: &Lookup,
        key: &[u8],
        windows: Vec<Value>,
        (more, position): (bool, i64),
    ) -> Value {
        json!({
            "key": q.info.format.key.to_json(key),
            "windows": windows,
            "more": more,
            "position": position,
        })
    }

    /// A session store keeps `key, end, start` (8 bytes each): one scan of the key's sessions
    /// ending at `from` or later, keeping those that start by `to`.
    async fn read_sessions(&self, q: &Lookup, key: &[u8], from: i64, to: i64) -> Option<Value> {
        let (first, last) = (
            session_key(key, 0, from.max(0)),
            session_key(key, i64::MAX, i64::MAX),
        );
        let read = self.read_between(q, first, last).await?;
        let sessions: Vec<Value> = read
            .entries
            .iter()
            .filter_map(|(k, v)| {
                let (of, start, end) = split_session_key(k)?;
                (of == key && start <= to).then(|| self.window_json(q, (start, end), v))
            })
            .collect();
        Some(self.windows_json(q, key, sessions, (read.more, read.position)))
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
            .map(|(k, v)| {
                json!({
                    "key": q.info.format.key.to_json(k),
                    "value": self.value_json(q, v),
                    "key_hex": hex(k),
                    "value_hex": hex(self.value_bytes(q, v)),
                })
            })
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
