//! The typed streams DSL: `KStream`, `KGroupedStream` and `KTable`, with the meaning Kafka
//! Streams gives them. It compiles to Baton's byte-level topology
//! ([`baton_runtime::topology`]): the stateless steps between two boundaries (a source, a
//! repartition topic, a store, a sink) run as one typed function per record, so values are
//! turned into bytes only where Kafka Streams needs a serde too.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use baton_runtime::record::undecodable;
use baton_runtime::topology::{Layout, Stream, Topology, TopologyError, Windows};

use crate::describe::{Description, Node};
use crate::serdes::{Long, Serde, TimeWindowed, Windowed};
use crate::windows::TimeWindows;

/// A segment of stateless steps: the records one input record becomes.
type Chain<K, V> = Arc<dyn Fn(&[u8], &[u8]) -> Vec<(K, V)> + Send + Sync>;

/// Builds an application. Start streams with [`StreamsBuilder::stream`], end them with
/// [`KStream::to`], then [`StreamsBuilder::build`].
///
/// ```
/// use baton_streams::serdes::{Long, Str};
/// use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
///
/// let builder = StreamsBuilder::new("wordcount");
/// builder
///     .stream("lines", Consumed::with(Str, Str))
///     .flat_map_values(|line: &String| {
///         line.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>()
///     })
///     .group_by(|_, word: &String| word.clone(), Grouped::with(Str, Str).named("words"))
///     .count(Materialized::named("counts"))
///     .to_stream()
///     .to("word-counts", Produced::with(Str, Long));
/// let topology = builder.build().unwrap();
/// assert_eq!(topology.repartition_topics(), vec![("wordcount-words-repartition", 0)]);
/// ```
pub struct StreamsBuilder {
    graph: Rc<RefCell<Graph>>,
}

struct Graph {
    app_id: String,
    /// One per subtopology, in Kafka Streams' numbering order.
    streams: Vec<Stream>,
    repartition: Vec<String>,
    description: Description,
}

impl StreamsBuilder {
    /// An application whose `application.id` is `app_id` (internal topics are named after it).
    pub fn new(app_id: &str) -> StreamsBuilder {
        StreamsBuilder {
            graph: Rc::new(RefCell::new(Graph {
                app_id: app_id.to_owned(),
                streams: Vec::new(),
                repartition: Vec::new(),
                description: Description::default(),
            })),
        }
    }

    /// A stream of the records of `topic` (it must exist), read with `consumed`'s serdes.
    pub fn stream<KS: Serde, VS: Serde>(
        &self,
        topic: &str,
        consumed: Consumed<KS, VS>,
    ) -> KStream<KS::Value, VS::Value> {
        let at = self.graph.borrow_mut().start(topic);
        KStream {
            graph: self.graph.clone(),
            at,
            chain: decoding(consumed.key, consumed.value, topic.to_owned()),
            key_changed: false,
            last: self.graph.borrow().description.last(at),
        }
    }

    /// The topology to run, or what is wrong with it.
    pub fn build(self) -> Result<Topology, TopologyError> {
        let mut g = self.graph.borrow_mut();
        let streams = std::mem::take(&mut g.streams);
        Topology::new(&g.app_id, streams)?
            .with_repartition_topics(g.repartition.clone())
            .map(|t| t.with_description(g.description.to_string()))
    }

    /// What [`StreamsBuilder::build`] would run, in the form of Kafka's `Topology.describe()`.
    pub fn describe(&self) -> String {
        self.graph.borrow().description.to_string()
    }
}

impl Graph {
    fn start(&mut self, topic: &str) -> usize {
        let at = self.streams.len();
        self.streams.push(Stream::from(&[topic]));
        self.description.source(at, topic);
        at
    }

    /// Adds steps to sub-topology `at` (a stream's builder methods take it by value).
    fn edit(&mut self, at: usize, f: impl FnOnce(Stream) -> Stream) {
        let none: &[&str] = &[];
        let s = std::mem::replace(&mut self.streams[at], Stream::from(none));
        self.streams[at] = f(s);
    }

    fn topic(&self, name: &str) -> String {
        format!("{}-{name}-repartition", self.app_id)
    }
}

/// Reads a record's key and value with the serdes; a record that does not decode fails as
/// undecodable (`--on-deserialization-error`), naming `topic`.
fn decoding<KS: Serde, VS: Serde>(
    key: KS,
    value: VS,
    topic: String,
) -> Chain<KS::Value, VS::Value> {
    Arc::new(move |k, v| {
        let k = key
            .deserialize(k)
            .unwrap_or_else(|e| undecodable(format!("{topic}: key: {e}")));
        let v = value
            .deserialize(v)
            .unwrap_or_else(|e| undecodable(format!("{topic}: value: {e}")));
        vec![(k, v)]
    })
}

/// The serdes a stream is read with: [`StreamsBuilder::stream`].
pub struct Consumed<KS, VS> {
    key: KS,
    value: VS,
}

impl<KS: Serde, VS: Serde> Consumed<KS, VS> {
    pub fn with(key: KS, value: VS) -> Self {
        Consumed { key, value }
    }
}

/// The serdes a stream is written with: [`KStream::to`].
pub struct Produced<KS, VS> {
    key: KS,
    value: VS,
}

impl<KS: Serde, VS: Serde> Produced<KS, VS> {
    pub fn with(key: KS, value: VS) -> Self {
        Produced { key, value }
    }
}

/// The serdes of a grouping, and the name of its repartition topic
/// (`<application id>-<name>-repartition`) when it needs one.
pub struct Grouped<KS, VS> {
    key: KS,
    value: VS,
    name: Option<String>,
}

impl<KS: Serde, VS: Serde> Grouped<KS, VS> {
    pub fn with(key: KS, value: VS) -> Self {
        Grouped {
            key,
            value,
            name: None,
        }
    }

    /// Names the repartition topic, as Kafka's `Grouped.as(name)`.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }
}

/// A store's name: its changelog is `<application id>-<name>-changelog`, as in Kafka Streams.
pub struct Materialized {
    name: Option<String>,
}

impl Materialized {
    /// As Kafka's `Materialized.as(name)`.
    pub fn named(name: &str) -> Self {
        Materialized {
            name: Some(name.to_owned()),
        }
    }

    /// A generated name, `KSTREAM-AGGREGATE-STATE-STORE-<n>`. Name stores whose state must
    /// survive a change of the topology.
    pub fn generated() -> Self {
        Materialized { name: None }
    }
}

/// A stream of records with keys of type `K` and values of type `V`.
pub struct KStream<K, V> {
    graph: Rc<RefCell<Graph>>,
    at: usize,
    chain: Chain<K, V>,
    /// A step may have changed keys since the last repartition: a grouping repartitions.
    key_changed: bool,
    /// The last node, for `describe`.
    last: Node,
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KStream<K, V> {
    fn then<K2, V2>(
        self,
        kind: &str,
        key_changed: bool,
        step: impl Fn(K, V, &mut Vec<(K2, V2)>) + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        let prev = self.chain;
        let last = self
            .graph
            .borrow_mut()
            .description
            .processor(self.at, kind, &self.last, &[]);
        KStream {
            graph: self.graph,
            at: self.at,
            chain: Arc::new(move |k, v| {
                let mut out = Vec::new();
                for (k, v) in prev(k, v) {
                    step(k, v, &mut out);
                }
                out
            }),
            key_changed: self.key_changed || key_changed,
            last,
        }
    }

    /// Keeps the records for which `f(key, value)` holds.
    pub fn filter(self, f: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KStream<K, V> {
        self.then("FILTER", false, move |k, v, out| {
            if f(&k, &v) {
                out.push((k, v));
            }
        })
    }

    /// Keeps the records for which `f(key, value)` does not hold.
    pub fn filter_not(self, f: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KStream<K, V> {
        self.filter(move |k, v| !f(k, v))
    }

    /// Replaces each value with `f(value)`.
    pub fn map_values<V2: Send + Sync + 'static>(
        self,
        f: impl Fn(&V) -> V2 + Send + Sync + 'static,
    ) -> KStream<K, V2> {
        self.then("MAPVALUES", false, move |k, v, out| {
            let v2 = f(&v);
            out.push((k, v2));
        })
    }

    /// Replaces each record with `f(key, value)`; keys may change.
    pub fn map<K2: Send + Sync + 'static, V2: Send + Sync + 'static>(
        self,
        f: impl Fn(&K, &V) -> (K2, V2) + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        self.then("MAP", true, move |k, v, out| out.push(f(&k, &v)))
    }

    /// Replaces each record's key with `f(key, value)`.
    pub fn select_key<K2: Send + Sync + 'static>(
        self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
    ) -> KStream<K2, V> {
        self.then("KEY-SELECT", true, move |k, v, out| {
            let k2 = f(&k, &v);
            out.push((k2, v));
        })
    }

    /// Replaces each record with the records `f(key, value)` returns; keys may change.
    pub fn flat_map<K2, V2, I>(
        self,
        f: impl Fn(&K, &V) -> I + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        K2: Send + Sync + 'static,
        V2: Send + Sync + 'static,
        I: IntoIterator<Item = (K2, V2)>,
    {
        self.then("FLATMAP", true, move |k, v, out| out.extend(f(&k, &v)))
    }

    /// Replaces each record with one record per value `f(value)` returns, same key.
    pub fn flat_map_values<V2, I>(
        self,
        f: impl Fn(&V) -> I + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        K: Clone,
        V2: Send + Sync + 'static,
        I: IntoIterator<Item = V2>,
    {
        self.then("FLATMAPVALUES", false, move |k, v, out| {
            out.extend(f(&v).into_iter().map(|v2| (k.clone(), v2)))
        })
    }

    /// Calls `f(key, value)` for each record and passes it on.
    pub fn peek(self, f: impl Fn(&K, &V) + Send + Sync + 'static) -> KStream<K, V> {
        self.then("PEEK", false, move |k, v, out| {
            f(&k, &v);
            out.push((k, v));
        })
    }

    /// Writes the stream to `topic` with `produced`'s serdes, partitioned by the key's bytes
    /// (created with this stream's partition count if missing).
    pub fn to<KS, VS>(self, topic: &str, produced: Produced<KS, VS>)
    where
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        let mut g = self.graph.borrow_mut();
        g.description.sink(self.at, topic, &self.last);
        let (chain, key, value) = (self.chain, produced.key, produced.value);
        let topic = topic.to_owned();
        g.edit(self.at, move |s| {
            s.flat_map(move |k, v| {
                chain(k, v)
                    .iter()
                    .map(|(k, v)| (key.serialize(k), value.serialize(v)))
                    .collect()
            })
            .to(&topic)
        });
    }

    /// Groups by `f(key, value)`: always through a repartition topic, as in Kafka Streams.
    pub fn group_by<K2, KS, VS>(
        self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
        grouped: Grouped<KS, VS>,
    ) -> KGroupedStream<K2, V, KS, VS>
    where
        K2: Send + Sync + 'static,
        KS: Serde<Value = K2>,
        VS: Serde<Value = V>,
    {
        self.select_key(f).grouped(grouped, true)
    }

    /// Groups by the key: through a repartition topic if a step changed keys since the
    /// stream was read (or last repartitioned), as in Kafka Streams.
    pub fn group_by_key<KS, VS>(self, grouped: Grouped<KS, VS>) -> KGroupedStream<K, V, KS, VS>
    where
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        let repartition = self.key_changed;
        self.grouped(grouped, repartition)
    }

    fn grouped<KS, VS>(
        self,
        grouped: Grouped<KS, VS>,
        repartition: bool,
    ) -> KGroupedStream<K, V, KS, VS>
    where
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        KGroupedStream {
            stream: self,
            key: Arc::new(grouped.key),
            value: Arc::new(grouped.value),
            name: grouped.name,
            repartition,
        }
    }
}

/// Records grouped by key, ready to be aggregated into a table.
pub struct KGroupedStream<K, V, KS, VS> {
    stream: KStream<K, V>,
    key: Arc<KS>,
    value: Arc<VS>,
    name: Option<String>,
    repartition: bool,
}

impl<K, V, KS, VS> KGroupedStream<K, V, KS, VS>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
    KS: Serde<Value = K>,
    VS: Serde<Value = V>,
{
    /// Counts the records of each key into a store (values 8-byte big-endian, as Kafka's
    /// `count` stores a Long).
    pub fn count(self, materialized: Materialized) -> KTable<K, i64> {
        self.aggregate_into(materialized, "COUNT", Long, |_, current, _| {
            current.unwrap_or(0) + 1
        })
    }

    /// Combines each key's values with `f(aggregate, value)`; the first value is the start.
    pub fn reduce(
        self,
        f: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized,
    ) -> KTable<K, V>
    where
        VS: Clone,
    {
        let serde = (*self.value).clone();
        self.aggregate_into(
            materialized,
            "REDUCE",
            serde,
            move |_, current, v| match current {
                Some(acc) => f(acc, v),
                None => v,
            },
        )
    }

    /// Folds each key's values into an aggregate stored with `serde`: `init()` to start, then
    /// `f(key, value, aggregate)` for each value.
    pub fn aggregate<AS: Serde>(
        self,
        init: impl Fn() -> AS::Value + Send + Sync + 'static,
        f: impl Fn(&K, V, AS::Value) -> AS::Value + Send + Sync + 'static,
        serde: AS,
        materialized: Materialized,
    ) -> KTable<K, AS::Value> {
        let key = self.key.clone();
        self.aggregate_into(materialized, "AGGREGATE", serde, move |k, current, v| {
            let k = key
                .deserialize(k)
                .unwrap_or_else(|e| undecodable(format!("grouped key: {e}")));
            f(&k, v, current.unwrap_or_else(&init))
        })
    }

    /// Aggregates per time window of the record timestamps, as Kafka Streams'
    /// `windowedBy(TimeWindows...)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_streams::serdes::{Long, Str, TimeWindowed};
    /// use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder, TimeWindows};
    ///
    /// let minute = Duration::from_secs(60);
    /// let builder = StreamsBuilder::new("views");
    /// builder
    ///     .stream("page-views", Consumed::with(Str, Str))
    ///     .group_by_key(Grouped::with(Str, Str))
    ///     .windowed_by(TimeWindows::of_size_and_grace(minute, Duration::from_secs(10)))
    ///     .count(Materialized::named("views-per-minute"))
    ///     .to_stream()
    ///     .to("views-per-user", Produced::with(TimeWindowed::new(Str, minute), Long));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn windowed_by(self, windows: TimeWindows) -> TimeWindowedKStream<K, V, KS, VS> {
        TimeWindowedKStream {
            grouped: self,
            windows,
        }
    }

    /// The shared part of the aggregations: the grouping's repartition, then one store step
    /// that folds a value into the key's current aggregate.
    fn aggregate_into<AS: Serde>(
        self,
        materialized: Materialized,
        kind: &str,
        serde: AS,
        fold: impl Fn(&[u8], Option<AS::Value>, V) -> AS::Value + Send + Sync + 'static,
    ) -> KTable<K, AS::Value> {
        let key: Arc<dyn Serde<Value = K>> = self.key.clone();
        self.aggregate_table(materialized, kind, serde, None, key, fold)
    }

    /// The aggregation's steps, then its table, keyed with `table_key` (the grouped key's
    /// serde, or its windowed form).
    fn aggregate_table<TK, AS: Serde>(
        self,
        materialized: Materialized,
        kind: &str,
        serde: AS,
        windows: Option<Windows>,
        table_key: Arc<dyn Serde<Value = TK>>,
        fold: impl Fn(&[u8], Option<AS::Value>, V) -> AS::Value + Send + Sync + 'static,
    ) -> KTable<TK, AS::Value> {
        let KGroupedStream {
            stream,
            key,
            value,
            name,
            repartition,
        } = self;
        let graph = stream.graph.clone();
        let mut g = graph.borrow_mut();
        let store = materialized
            .name
            .unwrap_or_else(|| g.description.generated_store());
        let (mut at, chain) = (stream.at, stream.chain);
        let mut last = stream.last;
        let encode = {
            let (key, value) = (key.clone(), value.clone());
            move |k: &[u8], v: &[u8]| -> Vec<(Vec<u8>, Vec<u8>)> {
                chain(k, v)
                    .iter()
                    .map(|(k, v)| (key.serialize(k), value.serialize(v)))
                    .collect()
            }
        };
        if repartition {
            let topic = g.topic(name.as_deref().unwrap_or(&store));
            g.description.sink(at, &topic, &last);
            let sink = topic.clone();
            g.edit(at, move |s| s.flat_map(encode).to(&sink));
            g.repartition.push(topic.clone());
            at = g.start(&topic);
            last = g.description.last(at);
        } else {
            // Keys as they came (decoded and encoded again): the store sits beside the source.
            g.edit(at, move |s| s.flat_map_keeping_keys(encode));
        }
        last = g.description.processor(at, kind, &last, &[store.as_str()]);
        let a_serde = Arc::new(serde);
        let (agg, v_serde) = (a_serde.clone(), value);
        let step = move |current: Option<&[u8]>, k: &[u8], v: &[u8]| {
            let current = current.map(|c| {
                agg.deserialize(c)
                    .unwrap_or_else(|e| undecodable(format!("store value: {e}")))
            });
            let v = v_serde
                .deserialize(v)
                .unwrap_or_else(|e| undecodable(format!("grouped value: {e}")));
            agg.serialize(&fold(k, current, v))
        };
        g.edit(at, move |s| match windows {
            Some(w) => s.window_aggregate(&store, w, step),
            None => s.aggregate_as(&store, Layout::Timestamped, step),
        });
        drop(g);
        KTable {
            graph,
            at,
            key: table_key,
            value: a_serde,
            last,
        }
    }
}

/// A grouped stream cut into time windows: [`KGroupedStream::windowed_by`]. Its aggregations
/// give a table keyed by [`Windowed`] keys, kept in a window store.
pub struct TimeWindowedKStream<K, V, KS, VS> {
    grouped: KGroupedStream<K, V, KS, VS>,
    windows: TimeWindows,
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
        self.aggregate_into(materialized, "COUNT", Long, |_, current, _| {
            current.unwrap_or(0) + 1
        })
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
        self.aggregate_into(
            materialized,
            "REDUCE",
            serde,
            move |_, current, v| match current {
                Some(acc) => f(acc, v),
                None => v,
            },
        )
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
        let key = self.grouped.key.clone();
        self.aggregate_into(materialized, "AGGREGATE", serde, move |k, current, v| {
            let k = key
                .deserialize(k)
                .unwrap_or_else(|e| undecodable(format!("grouped key: {e}")));
            f(&k, v, current.unwrap_or_else(&init))
        })
    }

    fn aggregate_into<AS: Serde>(
        self,
        materialized: Materialized,
        kind: &str,
        serde: AS,
        fold: impl Fn(&[u8], Option<AS::Value>, V) -> AS::Value + Send + Sync + 'static,
    ) -> KTable<Windowed<K>, AS::Value> {
        let windows = self.windows.runtime();
        let key: Arc<dyn Serde<Value = K>> = self.grouped.key.clone();
        let table_key: Arc<dyn Serde<Value = Windowed<K>>> =
            Arc::new(TimeWindowed::shared(key, self.windows.size()));
        self.grouped
            .aggregate_table(materialized, kind, serde, Some(windows), table_key, fold)
    }
}

/// A table: each key's latest value, kept in a store backed by a changelog.
pub struct KTable<K, V> {
    graph: Rc<RefCell<Graph>>,
    at: usize,
    key: Arc<dyn Serde<Value = K>>,
    value: Arc<dyn Serde<Value = V>>,
    last: Node,
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KTable<K, V> {
    /// The table's changes as a stream: every update of a key, in order.
    pub fn to_stream(self) -> KStream<K, V> {
        let (key, value) = (self.key, self.value);
        let last =
            self.graph
                .borrow_mut()
                .description
                .processor(self.at, "TOSTREAM", &self.last, &[]);
        KStream {
            graph: self.graph,
            at: self.at,
            chain: Arc::new(move |k, v| {
                let k = key
                    .deserialize(k)
                    .unwrap_or_else(|e| undecodable(format!("table key: {e}")));
                let v = value
                    .deserialize(v)
                    .unwrap_or_else(|e| undecodable(format!("table value: {e}")));
                vec![(k, v)]
            }),
            key_changed: false,
            last,
        }
    }
}
