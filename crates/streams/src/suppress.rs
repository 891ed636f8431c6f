//! `KTable::suppress`: a table's updates held back, as Kafka Streams' `suppress` holds them,
//! until their window closes (final results) or for a time limit (fewer updates per key).
//! The buffer is a store with Kafka's suppression buffer changelog, so it moves with its task
//! and survives a restart.

use std::sync::Arc;
use std::time::Duration;

use baton_runtime::topology::suppress::{BufferTime, PrepareFn, Suppression, WhenFull};

use crate::serdes::Serde;
use crate::table::KTable;

/// How much a suppression buffer may hold, and what it does when full: Kafka's
/// `Suppressed.BufferConfig`. Made with [`BufferConfig::unbounded`],
/// [`BufferConfig::max_records`] or [`BufferConfig::max_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferConfig {
    max_records: Option<u64>,
    max_bytes: Option<u64>,
    when_full: WhenFull,
}

/// A buffer that never sends an update early: unbounded, or stopping its task when full
/// (Kafka's `StrictBufferConfig`, what [`Suppressed::until_window_closes`] takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrictBufferConfig(BufferConfig);

/// A bounded buffer that sends its oldest updates early when full (Kafka's
/// `EagerBufferConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EagerBufferConfig(BufferConfig);

impl BufferConfig {
    /// No bound: the buffer holds what it must (Kafka's `unbounded()`).
    pub fn unbounded() -> StrictBufferConfig {
        StrictBufferConfig(BufferConfig {
            max_records: None,
            max_bytes: None,
            when_full: WhenFull::ShutDown,
        })
    }

    /// At most `n` keys, the oldest sent early past that (Kafka's `maxRecords(n)`).
    pub fn max_records(n: u64) -> EagerBufferConfig {
        EagerBufferConfig(BufferConfig {
            max_records: Some(n),
            max_bytes: None,
            when_full: WhenFull::EmitEarly,
        })
    }

    /// At most `n` bytes as Kafka estimates them (each entry's key, values, record context
    /// and time), the oldest sent early past that (Kafka's `maxBytes(n)`).
    pub fn max_bytes(n: u64) -> EagerBufferConfig {
        EagerBufferConfig(BufferConfig {
            max_records: None,
            max_bytes: Some(n),
            when_full: WhenFull::EmitEarly,
        })
    }
}

macro_rules! bounds {
    ($t:ident) => {
        impl $t {
            /// The same, holding at most `n` keys.
            pub fn with_max_records(mut self, n: u64) -> $t {
                self.0.max_records = Some(n);
                self
            }

            /// The same, holding at most `n` bytes.
            pub fn with_max_bytes(mut self, n: u64) -> $t {
                self.0.max_bytes = Some(n);
                self
            }

            /// No bound (Kafka's `withNoBound`).
            pub fn with_no_bound(self) -> StrictBufferConfig {
                BufferConfig::unbounded()
            }

            /// A full buffer stops its task, naming the suppression (Kafka stops the
            /// application): no update is ever sent early.
            pub fn shut_down_when_full(self) -> StrictBufferConfig {
                StrictBufferConfig(BufferConfig {
                    when_full: WhenFull::ShutDown,
                    ..self.0
                })
            }

            /// A full buffer sends its oldest updates early.
            pub fn emit_early_when_full(self) -> EagerBufferConfig {
                EagerBufferConfig(BufferConfig {
                    when_full: WhenFull::EmitEarly,
                    ..self.0
                })
            }
        }

        impl From<$t> for BufferConfig {
            fn from(c: $t) -> BufferConfig {
                c.0
            }
        }
    };
}

bounds!(StrictBufferConfig);
bounds!(EagerBufferConfig);

/// What [`KTable::suppress`] holds back, and until when: Kafka's `Suppressed`.
///
/// ```
/// use std::time::Duration;
/// use baton_streams::serdes::{Long, Str, TimeWindowed};
/// use baton_streams::{BufferConfig, Consumed, Grouped, Materialized, Produced, StreamsBuilder, Suppressed, TimeWindows};
///
/// let builder = StreamsBuilder::new("hourly-clicks");
/// let minute = Duration::from_secs(60);
/// builder
///     .stream("clicks", Consumed::with(Str, Str))
///     .group_by_key(Grouped::with(Str, Str))
///     .windowed_by(TimeWindows::of_size_and_grace(60 * minute, 5 * minute))
///     .count(Materialized::named("clicks-per-hour"))
///     .suppress(Suppressed::until_window_closes(BufferConfig::unbounded()))
///     .to_stream()
///     .to("clicks-per-hour", Produced::with(TimeWindowed::new(Str, 60 * minute), Long));
/// assert!(builder.build().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppressed {
    until: Until,
    buffer: BufferConfig,
    name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    WindowCloses,
    TimeLimit(Duration),
}

impl Suppressed {
    /// One update per window, its last, once the window has closed (its end plus the
    /// windows' grace, for sessions their gap and grace, has passed in stream time); deletes
    /// are not sent. Only for a windowed aggregation's table (refused at build otherwise).
    pub fn until_window_closes(buffer: StrictBufferConfig) -> Suppressed {
        Suppressed {
            until: Until::WindowCloses,
            buffer: buffer.0,
            name: None,
        }
    }

    /// Each key's updates held until stream time passes the first held update's timestamp
    /// plus `limit`, then its latest sent (deletes too).
    pub fn until_time_limit(limit: Duration, buffer: impl Into<BufferConfig>) -> Suppressed {
        Suppressed {
            until: Until::TimeLimit(limit),
            buffer: buffer.into(),
            name: None,
        }
    }

    /// Names the operation `name` and its buffer `<name>-store` (Kafka's `withName`).
    pub fn with_name(mut self, name: &str) -> Suppressed {
        self.name = Some(name.to_owned());
        self
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KTable<K, V> {
    /// The table with its updates held back as `suppressed` says (Kafka Streams'
    /// `KTable.suppress`): in a buffer store, `KTABLE-SUPPRESS-STATE-STORE-<n>` (or
    /// `<name>-store`), with a changelog in the layout of Kafka's, so it moves with its task
    /// and survives restarts. Stream time is the task's (every record it read), kept across
    /// owners. The table's values need a serde (after a `map_values`, use `map_values_as`).
    pub fn suppress(mut self, suppressed: Suppressed) -> KTable<K, V> {
        let (at, updates, last) = self.placed(false);
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        let node = match &suppressed.name {
            Some(n) => crate::describe::Node::named(n),
            None => g.description.next_name("KTABLE-SUPPRESS-"),
        };
        let store = match &suppressed.name {
            Some(n) => format!("{n}-store"),
            None => g
                .description
                .next_name("KTABLE-SUPPRESS-STATE-STORE-")
                .as_str()
                .to_owned(),
        };
        let (time, wait, drop_deletes) = match (suppressed.until, self.closes) {
            (Until::TimeLimit(d), _) => (BufferTime::Record, millis(d), false),
            (Until::WindowCloses, Some((end, close))) => (BufferTime::WindowEnd(end), close, true),
            (Until::WindowCloses, None) => {
                g.errors.push(format!(
                    "{}: suppress(until_window_closes) needs a windowed aggregation's table: window close time is only defined for windowed computations",
                    node.as_str()
                ));
                drop(g);
                return KTable::<K, V>::unplaced(graph, self.key);
            }
        };
        let Some(value) = self.value.clone() else {
            g.errors.push(format!(
                "{}: the table's values have no serde for the buffer (use map_values_as)",
                node.as_str()
            ));
            drop(g);
            return KTable::<K, V>::unplaced(graph, self.key);
        };
        let prepare = prepared(&self, updates, value.clone());
        let s = Suppression {
            name: node.as_str().to_owned(),
            store: store.clone(),
            time,
            wait_ms: wait,
            max_records: suppressed.buffer.max_records,
            max_bytes: suppressed.buffer.max_bytes,
            when_full: suppressed.buffer.when_full,
            drop_deletes,
            prepare: Some(prepare),
        };
        let exit = g.exit(&at);
        g.edit(&exit, move |st| st.suppress(s));
        let last = g
            .description
            .add_processor(at.sub, node, &[&last], &[&store]);
        drop(g);
        let closes = self.closes;
        KTable::of_records(graph, exit, (self.key, value), last, "a suppressed table")
            .closing(closes)
    }
}

/// The table's updates at its records' place as the bytes the buffer keeps: new and old
/// values through the table's operations so far, written with its serdes.
fn prepared<K: Send + Sync + 'static, V: Send + Sync + 'static>(
    table: &KTable<K, V>,
    updates: crate::dsl::Updates<K, V>,
    value: Arc<dyn Serde<Value = V>>,
) -> PrepareFn {
    let changes = table.changes.clone();
    Arc::new(move |k, new, old| match &changes {
        Some(changes) => match changes(k, new, old).into_iter().next() {
            Some((_, new, old)) => (
                new.map(|v| value.serialize(&v)),
                old.map(|v| value.serialize(&v)),
            ),
            None => (None, None),
        },
        None => {
            let new = updates(k, new).into_iter().next().and_then(|(_, v)| v);
            (new.map(|v| value.serialize(&v)), None)
        }
    })
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
