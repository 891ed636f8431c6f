//! Interactive queries from Rust, typed: the same answers as the HTTP endpoints
//! (docs/QUERIES.md), for an application that embeds Baton. Make a [`Queries`] handle, give a
//! clone to [`run_with_queries`](crate::run_with_queries), and read any store of the
//! application through it from any tokio task, on any instance: a key held elsewhere is
//! forwarded one hop, as over HTTP.
//!
//! ```no_run
//! use baton_streams::queries::{Queries, QueryOptions, StoreQuery};
//! use baton_streams::serdes::{Long, Str};
//!
//! async fn show(queries: &Queries) {
//!     let counts = StoreQuery::new(queries, "counts", Str, Long);
//!     let options = QueryOptions { max_lag_ms: Some(1_000), ..QueryOptions::default() };
//!     match counts.get(&"kafka".to_owned(), &options).await {
//!         Ok(a) => println!("{:?} from the {:?}, {:?} ms behind", a.value, a.served.role, a.served.lag_ms),
//!         Err(e) => eprintln!("{e}"),
//!     }
//! }
//! ```

pub use baton_runtime::query::api::{Queries, QueryFailure, QueryOptions, Served};
pub use baton_runtime::query::copies::RangeBounds;

use crate::serdes::{Serde, Window};

/// An answer, its value typed, with which copy gave it and how stale it was.
#[derive(Debug, Clone, PartialEq)]
pub struct Typed<T> {
    pub value: T,
    pub served: Served,
}

/// A range scan's page: entries in key order, and whether more follow the last.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<K, V> {
    pub entries: Vec<(K, V)>,
    pub more: bool,
}

/// One store of the application, read with its key and value serdes.
pub struct StoreQuery<KS: Serde, VS: Serde> {
    queries: Queries,
    store: String,
    key: KS,
    value: VS,
}

impl<KS: Serde, VS: Serde> StoreQuery<KS, VS> {
    pub fn new(queries: &Queries, store: &str, key: KS, value: VS) -> StoreQuery<KS, VS> {
        StoreQuery {
            queries: queries.clone(),
            store: store.to_owned(),
            key,
            value,
        }
    }

    fn decode(&self, bytes: &[u8]) -> Result<VS::Value, QueryFailure> {
        self.value
            .deserialize(bytes)
            .map_err(|e| QueryFailure::Malformed(format!("store {:?}: a value: {e}", self.store)))
    }

    /// One key of a key-value store: `None` when it has no value.
    pub async fn get(
        &self,
        key: &KS::Value,
        options: &QueryOptions,
    ) -> Result<Typed<Option<VS::Value>>, QueryFailure> {
        let a = self
            .queries
            .get(&self.store, &self.key.serialize(key), options)
            .await?;
        let value = match a.value {
            Some(v) => Some(self.decode(&v)?),
            None => None,
        };
        Ok(Typed {
            value,
            served: a.served,
        })
    }

    /// The windows of one key of a window store that start in `from..=to` (milliseconds).
    pub async fn windows(
        &self,
        key: &KS::Value,
        from: i64,
        to: i64,
        options: &QueryOptions,
    ) -> Result<Typed<Vec<(Window, VS::Value)>>, QueryFailure> {
        let a = self
            .queries
            .windows(&self.store, &self.key.serialize(key), from, to, options)
            .await?;
        let windows = a
            .windows
            .iter()
            .map(|(start, end, v)| {
                Ok((
                    Window {
                        start_ms: *start,
                        end_ms: *end,
                    },
                    self.decode(v)?,
                ))
            })
            .collect::<Result<_, QueryFailure>>()?;
        Ok(Typed {
            value: windows,
            served: a.served,
        })
    }

    /// Up to `limit` keys of `partition` in `from..=to` (open ends when `None`), after
    /// `after` (the last key of the previous page), in the order of their serialized bytes.
    pub async fn range(
        &self,
        partition: u32,
        (from, to): (Option<&KS::Value>, Option<&KS::Value>),
        after: Option<&KS::Value>,
        limit: usize,
        options: &QueryOptions,
    ) -> Result<Typed<Page<KS::Value, VS::Value>>, QueryFailure> {
        let bounds = RangeBounds {
            from: from.map(|k| self.key.serialize(k)),
            to: to.map(|k| self.key.serialize(k)),
            after: after.map(|k| self.key.serialize(k)),
            limit,
        };
        let a = self
            .queries
            .range(&self.store, partition, bounds, options)
            .await?;
        let entries = a
            .entries
            .iter()
            .map(|(k, v)| {
                let key = self.key.deserialize(k).map_err(|e| {
                    QueryFailure::Malformed(format!("store {:?}: a key: {e}", self.store))
                })?;
                Ok((key, self.decode(v)?))
            })
            .collect::<Result<_, QueryFailure>>()?;
        Ok(Typed {
            value: Page {
                entries,
                more: a.more,
            },
            served: a.served,
        })
    }
}
