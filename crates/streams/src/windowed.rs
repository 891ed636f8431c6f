//! A grouped stream cut into windows ([`KGroupedStream::windowed_by`]): time windows, as
//! Kafka Streams' `TimeWindowedKStream`, or sessions, as its `SessionWindowedKStream`. Their
//! aggregations give tables keyed by [`Windowed`] keys.

use std::sync::Arc;

use crate::dsl::{
    counting, folding, reducing, KGroupedStream, Materialized, SessionMerge, Windowing,
};
use crate::serdes::{Long, Serde, SessionWindowed, TimeWindowed, Windowed};
use crate::table::KTable;
use crate::windows::{SessionWindows, SlidingWindows, TimeWindows};

/// What [`KGroupedStream::windowed_by`] takes: [`TimeWindows`] or [`SessionWindows`].
pub trait WindowedBy<K, V, KS, VS> {
    /// The grouped stream cut into these windows.
    type Windowed;
    fn cut(self, grouped: KGroupedStream<K, V, KS, VS>) -> Self::Windowed;
}

impl<K, V, KS, VS> WindowedBy<K, V, KS, VS> for TimeWindows {
    type Windowed = TimeWindowedKStream<K, V, KS, VS>;
    fn cut(self, grouped: KGroupedStream<K, V, KS, VS>) -> Self::Windowed {
        TimeWindowedKStream {
            grouped,
            windows: Cut::Time(self),
        }
    }
}

/// Kafka's `windowedBy(SlidingWindows)`, which gives a `TimeWindowedKStream` too.
impl<K, V, KS, VS> WindowedBy<K, V, KS, VS> for SlidingWindows {
    type Windowed = TimeWindowedKStream<K, V, KS, VS>;
    fn cut(self, grouped: KGroupedStream<K, V, KS, VS>) -> Self::Windowed {
        TimeWindowedKStream {
            grouped,
            windows: Cut::Sliding(self),
        }
    }
}

/// The windows of a [`TimeWindowedKStream`]: time windows or sliding windows.
#[derive(Debug, Clone, Copy)]
enum Cut {
    Time(TimeWindows),
    Sliding(SlidingWindows),
}

impl<K, V, KS, VS> WindowedBy<K, V, KS, VS> for SessionWindows {
    type Windowed = SessionWindowedKStream<K, V, KS, VS>;
    fn cut(self, grouped: KGroupedStream<K, V, KS, VS>) -> Self::Windowed {
        SessionWindowedKStream {
            grouped,
            windows: self,
        }
    }
}

/// A grouped stream cut into time windows or sliding windows: [`KGroupedStream::windowed_by`].
/// Its aggregations give a table keyed by [`Windowed`] keys, kept in a window store.
pub struct TimeWindowedKStream<K, V, KS, VS> {
    grouped: KGroupedStream<K, V, KS, VS>,
    windows: Cut,
}

impl<K, V, KS, VS> TimeWindowedKStream<K, V, KS, VS>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
    KS: Serde<Value = K>,
    VS: Serde<Value = V>,
{
    /// Counts each key's records per window (values 8-byte big-endian Longs).
    pub fn count(self, materialized: Materialized) -> KTable<Windowed<K>, i64> {
        self.aggregate_into(materialized, "COUNT", Long, counting)
    }

    /// Combines each key's values per window with `f(aggregate, value)`.
    pub fn reduce(
        self,
        f: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized,
    ) -> KTable<Windowed<K>, V>
    where
        VS: Clone,
    {
        let serde = (*self.grouped.value).clone();
        self.aggregate_into(materialized, "REDUCE", serde, reducing(f))
    }

    /// Folds each key's values per window: `init()` to start each window, then
    /// `f(key, value, aggregate)`.
    pub fn aggregate<AS: Serde>(
        self,
        init: impl Fn() -> AS::Value + Send + Sync + 'static,
        f: impl Fn(&K, V, AS::Value) -> AS::Value + Send + Sync + 'static,
        serde: AS,
        materialized: Materialized,
    ) -> KTable<Windowed<K>, AS::Value> {
        let fold = folding(self.grouped.key.clone(), init, f);
        self.aggregate_into(materialized, "AGGREGATE", serde, fold)
    }

    fn aggregate_into<AS: Serde>(
        self,
        materialized: Materialized,
        kind: &str,
        serde: AS,
        fold: impl Fn(&[u8], Option<AS::Value>, V) -> AS::Value + Send + Sync + 'static,
    ) -> KTable<Windowed<K>, AS::Value> {
        let (windowing, size) = match self.windows {
            Cut::Time(w) => (Windowing::Time(w.runtime()), w.size()),
            Cut::Sliding(w) => (Windowing::Sliding(w.runtime()), w.time_difference()),
        };
        let key: Arc<dyn Serde<Value = K>> = self.grouped.key.clone();
        let table_key: Arc<dyn Serde<Value = Windowed<K>>> =
            Arc::new(TimeWindowed::shared(key, size));
        self.grouped
            .aggregate_table(materialized, kind, serde, windowing, table_key, fold)
    }
}

/// A grouped stream cut into sessions: [`KGroupedStream::windowed_by`] with
/// [`SessionWindows`]. Its aggregations give a table keyed by [`Windowed`] keys (the session's
/// first and last record's timestamps), kept in a session store (Kafka's layout: key, end,
/// start); when a record merges sessions, the merged ones are removed and go on as deletes
/// (tombstones at a sink), then the new session goes on, stamped with its end.
///
/// ```
/// use std::time::Duration;
/// use baton_streams::serdes::{Long, SessionWindowed, Str};
/// use baton_streams::{Consumed, Grouped, Materialized, Produced, SessionWindows, StreamsBuilder};
///
/// let builder = StreamsBuilder::new("visits");
/// builder
///     .stream("clicks", Consumed::with(Str, Str))
///     .group_by_key(Grouped::with(Str, Str))
///     .windowed_by(SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_secs(300)))
///     .count(Materialized::named("clicks-per-visit"))
///     .to_stream()
///     .to("clicks-per-visit", Produced::with(SessionWindowed::new(Str), Long));
/// assert!(builder.build().is_ok());
/// ```
pub struct SessionWindowedKStream<K, V, KS, VS> {
    grouped: KGroupedStream<K, V, KS, VS>,
    windows: SessionWindows,
}

impl<K, V, KS, VS> SessionWindowedKStream<K, V, KS, VS>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
    KS: Serde<Value = K>,
    VS: Serde<Value = V>,
{
    /// Counts each key's records per session (values 8-byte big-endian Longs); merged
    /// sessions' counts add up.
    pub fn count(self, materialized: Materialized) -> KTable<Windowed<K>, i64> {
        self.aggregate_into(
            materialized,
            "COUNT",
            Long,
            counting,
            Arc::new(|_, acc: Option<i64>, session| acc.unwrap_or(0) + session),
        )
    }

    /// Combines each key's values per session with `f(aggregate, value)`; merged sessions
    /// combine with `f` too (Kafka's session `reduce`).
    pub fn reduce(
        self,
        f: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized,
    ) -> KTable<Windowed<K>, V>
    where
        VS: Clone,
    {
        let serde = (*self.grouped.value).clone();
        let f = Arc::new(f);
        let merge_f = f.clone();
        // A merged session combines as a value does.
        let merge = Arc::new(reducing(move |acc, session| merge_f(acc, session)));
        let fold = reducing(move |acc, v| f(acc, v));
        self.aggregate_into(materialized, "REDUCE", serde, fold, merge)
    }

    /// Folds each key's values per session: `init()` to start, `f(key, value, aggregate)` for
    /// each value, `merger(key, aggregate, other)` when a record joins two sessions (Kafka's
    /// session `aggregate` with its `Merger`).
    pub fn aggregate<AS: Serde>(
        self,
        init: impl Fn() -> AS::Value + Send + Sync + 'static,
        f: impl Fn(&K, V, AS::Value) -> AS::Value + Send + Sync + 'static,
        merger: impl Fn(&K, AS::Value, AS::Value) -> AS::Value + Send + Sync + 'static,
        serde: AS,
        materialized: Materialized,
    ) -> KTable<Windowed<K>, AS::Value> {
        let key = self.grouped.key.clone();
        let init = Arc::new(init);
        let merge_init = init.clone();
        // A merged session folds into the aggregate as a value does, with the merger.
        let merge: SessionMerge<AS::Value> = Arc::new(folding(
            key.clone(),
            move || merge_init(),
            move |k, session, acc| merger(k, acc, session),
        ));
        let fold = folding(key, move || init(), f);
        self.aggregate_into(materialized, "AGGREGATE", serde, fold, merge)
    }

    fn aggregate_into<AS: Serde>(
        self,
        materialized: Materialized,
        kind: &str,
        serde: AS,
        fold: impl Fn(&[u8], Option<AS::Value>, V) -> AS::Value + Send + Sync + 'static,
        merge: SessionMerge<AS::Value>,
    ) -> KTable<Windowed<K>, AS::Value> {
        let sessions = self.windows.runtime();
        let key: Arc<dyn Serde<Value = K>> = self.grouped.key.clone();
        let table_key: Arc<dyn Serde<Value = Windowed<K>>> = Arc::new(SessionWindowed::shared(key));
        let windowing = Windowing::Session(sessions, merge);
        self.grouped
            .aggregate_table(materialized, kind, serde, windowing, table_key, fold)
    }
}
