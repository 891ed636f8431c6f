//! The typed streams DSL: `KStream`, `KGroupedStream` and `KTable`, with the meaning Kafka
//! Streams gives them. It compiles to Baton's byte-level topology
//! ([`baton_runtime::topology`]): the stateless steps between two boundaries (a source, a
//! repartition topic, a store, a sink) run as one typed function per record, so values are
//! turned into bytes only where Kafka Streams needs a serde too.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use baton_runtime::query::format::{Format, StoreFormat};
use baton_runtime::record::undecodable;
use baton_runtime::topology::sliding::Sliding;
use baton_runtime::topology::suppress::WindowEnd;
use baton_runtime::topology::{
    split_join_frame, Absorbed, GlobalTable, Layout, Place, RecordEffect, Sessions, Stream,
    Topology, TopologyError, Windows,
};

use crate::describe::{Description, Node};
use crate::serdes::read_or_fail;
use crate::serdes::{Long, Serde};
pub use crate::table::KTable;
use crate::table::TableSource;
use crate::windowed::WindowedBy;

/// A segment of stateless steps: the records one input record becomes.
pub(crate) type Chain<K, V> = Arc<dyn Fn(&[u8], &[u8]) -> Vec<(K, V)> + Send + Sync>;
/// The same segment over a table's updates ([`KTable::to_stream`]): records with a value
/// and deletes (`None`) alike, each giving records and deletes. Steps that keep keys take
/// deletes on; the others, which need a value, pass over them.
pub(crate) type Updates<K, V> =
    Arc<dyn Fn(&[u8], Option<&[u8]>) -> Vec<(K, Option<V>)> + Send + Sync>;

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
    pub(crate) graph: Rc<RefCell<Graph>>,
}

pub(crate) struct Graph {
    app_id: String,
    /// One per subtopology, in Kafka Streams' numbering order.
    pub(crate) streams: Vec<Stream>,
    repartition: Vec<String>,
    /// Repartition topics given a partition count of their own ([`KStream::repartition`]).
    repartition_partitions: Vec<(String, u32)>,
    pub(crate) description: Description,
    /// What is wrong with the application, found while it was built; `build` refuses it.
    pub(crate) errors: Vec<String>,
    /// Each store's key and value serdes by name, for queries.
    formats: Vec<(String, StoreFormat)>,
    /// Global tables: (topic, store, the placeholder sub-topology taking their number).
    pub(crate) globals: Vec<(String, String, usize)>,
    /// `process` window stores and their retention in ms ([`crate::WindowStore`]).
    pub(crate) window_stores: Vec<(String, i64)>,
    /// Sub-topologies merged into another: where their places went ([`Graph::merge_subs`]).
    merged: BTreeMap<usize, (usize, Absorbed)>,
}

impl StreamsBuilder {
    /// An application whose `application.id` is `app_id` (internal topics are named after it).
    pub fn new(app_id: &str) -> StreamsBuilder {
        StreamsBuilder {
            graph: Rc::new(RefCell::new(Graph {
                app_id: app_id.to_owned(),
                streams: Vec::new(),
                repartition: Vec::new(),
                repartition_partitions: Vec::new(),
                description: Description::default(),
                errors: Vec::new(),
                formats: Vec::new(),
                globals: Vec::new(),
                window_stores: Vec::new(),
                merged: BTreeMap::new(),
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
        let last = self.graph.borrow().description.last(at.sub);
        self.source_stream(at, last, consumed, topic.to_owned())
    }

    /// A stream of what its sources at `at` give, records without a value included: as
    /// Kafka's, a `to_table` takes them as deletes and a sink writes them as tombstones
    /// (through the steps that keep keys); steps that need a value pass over them.
    fn source_stream<KS: Serde, VS: Serde>(
        &self,
        at: Pos,
        last: Node,
        consumed: Consumed<KS, VS>,
        what: String,
    ) -> KStream<KS::Value, VS::Value> {
        self.graph
            .borrow_mut()
            .edit_sources(at.sub, Stream::with_deletes);
        let (key, value) = (Arc::new(consumed.key), Arc::new(consumed.value));
        KStream {
            graph: self.graph.clone(),
            last,
            at,
            chain: decoding(key.clone(), value.clone(), what.clone()),
            key_changed: false,
            updates: false,
            deletes: Some(decoding_updates(key, value, what)),
        }
    }

    /// One stream of the records of several topics (they must exist and have as many
    /// partitions each), all read with `consumed`'s serdes, as Kafka Streams'
    /// `builder.stream(Collection<String>)`.
    pub fn stream_of<KS: Serde, VS: Serde>(
        &self,
        topics: &[&str],
        consumed: Consumed<KS, VS>,
    ) -> KStream<KS::Value, VS::Value> {
        let mut g = self.graph.borrow_mut();
        let Some((first, rest)) = topics.split_first() else {
            g.errors.push("stream_of: no topic".into());
            drop(g);
            return self.stream("", consumed);
        };
        let at = g.start(first);
        for t in rest {
            g.edit_sources(at.sub, |s| s.also_from(t));
            g.description.also_source(at.sub, t);
        }
        let last = g.description.last(at.sub);
        drop(g);
        self.source_stream(at, last, consumed, topics.join(" or "))
    }

    /// A table of the records of `topic` (it must exist): each key's latest value, a record
    /// without a value deleting it, as Kafka Streams' `builder.table(topic)`. The topic is the
    /// store's changelog: restores, warm-ups and standbys read it, no second copy is written.
    /// The table is read in the sub-topology of the stream that joins it
    /// ([`KStream::join`]), so the two must be co-partitioned.
    pub fn table<KS: Serde, VS: Serde>(
        &self,
        topic: &str,
        consumed: Consumed<KS, VS>,
        materialized: Materialized,
    ) -> KTable<KS::Value, VS::Value> {
        let mut g = self.graph.borrow_mut();
        // Kafka's order: the store's name (`StreamsBuilder.table`), then the source's and the
        // table source's (`InternalStreamsBuilder.table`).
        let store = materialized.name.unwrap_or_else(|| {
            let prefix = format!("{topic}-STATE-STORE-");
            g.description.next_name(&prefix).as_str().to_owned()
        });
        let source_node = g.description.next_name("KSTREAM-SOURCE-");
        let table_node = g.description.next_name("KTABLE-SOURCE-");
        let rank = g.description.rank();
        g.store_format(&store, consumed.key.name(), consumed.value.name());
        drop(g);
        KTable {
            graph: self.graph.clone(),
            at: None,
            updates: None,
            changes: None,
            key: Arc::new(consumed.key),
            value: Some(Arc::new(consumed.value)),
            last: Node::default(),
            source: Some(TableSource {
                topic: topic.to_owned(),
                store,
                source_node,
                table_node,
                rank,
                placed: Rc::new(Cell::new(false)),
            }),
            state: None,
            closes: None,
            on_demand: None,
        }
    }

    /// The topology to run, or what is wrong with it.
    pub fn build(self) -> Result<Topology, TopologyError> {
        let mut g = self.graph.borrow_mut();
        if let Some(e) = g.errors.first() {
            return Err(TopologyError::Invalid(e.clone()));
        }
        let mut streams: Vec<Option<Stream>> = std::mem::take(&mut g.streams)
            .into_iter()
            .map(Some)
            .collect();
        let order = g.description.kafka_order();
        let streams: Vec<Stream> = order
            .iter()
            .filter_map(|&i| streams.get_mut(i).and_then(Option::take))
            .collect();
        let globals = g
            .globals
            .iter()
            .filter_map(|(topic, store, sub)| {
                Some(GlobalTable {
                    topic: topic.clone(),
                    store: store.clone(),
                    subtopology: order.iter().position(|i| i == sub)? as u32,
                })
            })
            .collect();
        let formats = g.formats.clone();
        let mut topology = Topology::with_globals(&g.app_id, streams, globals)?
            .with_repartition_topics(g.repartition.clone())?;
        for (topic, n) in &g.repartition_partitions {
            topology = topology.with_repartition_partitions(topic, *n)?;
        }
        for (store, retention) in &g.window_stores {
            topology = topology.with_window_store(store, *retention)?;
        }
        Ok(topology).map(|t| {
            formats
                .into_iter()
                .fold(t, |t, (store, f)| t.with_store_format(&store, f))
                .with_description(g.description.to_string())
        })
    }

    /// What [`StreamsBuilder::build`] would run, in the form of Kafka's `Topology.describe()`.
    pub fn describe(&self) -> String {
        self.graph.borrow().description.to_string()
    }
}

/// A point in the byte-level topology: a sub-topology, and the place in its steps that
/// records reach there (a root, then the branches of nested forks, [`Stream::open_branch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pos {
    pub(crate) sub: usize,
    pub(crate) place: Place,
}

impl Graph {
    /// Records how `store`'s keys and values read: the serdes' Kafka names.
    pub(crate) fn store_format(&mut self, store: &str, key: &str, value: &str) {
        self.formats.push((
            store.to_owned(),
            StoreFormat {
                key: Format::of_serde(key),
                value: Format::of_serde(value),
            },
        ));
    }

    pub(crate) fn start(&mut self, topic: &str) -> Pos {
        let name = self.description.next_name("KSTREAM-SOURCE-");
        self.start_named(topic, name)
    }

    pub(crate) fn start_named(&mut self, topic: &str, name: Node) -> Pos {
        let sub = self.streams.len();
        self.streams.push(Stream::from(&[topic]));
        self.description.add_source(sub, name, topic);
        Pos {
            sub,
            place: Place::main(),
        }
    }

    /// Writes what reaches `at` (after node `last`) to a repartition topic named after
    /// `prefix`, and reads it in a new sub-topology: where the reading starts, and its source.
    ///
    /// Kafka's `KStreamImpl.createRepartitionedSource`: the topic is `<prefix>-repartition`;
    /// a sink, a filter and a source take three numbers whatever their names, and are named
    /// `<topic>-sink`, `-filter` and `-source` unless `prefix` is itself a generated name
    /// (`KSTREAM...-<10 digits>`), when the numbered names stand.
    pub(crate) fn repartition(
        &mut self,
        prefix: &str,
        at: &Pos,
        last: &Node,
        encode: Encode,
    ) -> (Pos, Node) {
        let (start, last) = self.repartition_start(prefix, at, last, encode);
        (self.exit(&start), last)
    }

    /// As [`Graph::repartition`], the reading sub-topology left fresh: `start` is its source,
    /// with no step yet (so it may be absorbed into another).
    pub(crate) fn repartition_start(
        &mut self,
        prefix: &str,
        at: &Pos,
        last: &Node,
        encode: Encode,
    ) -> (Pos, Node) {
        let base = prefix.strip_suffix("-repartition").unwrap_or(prefix);
        let topic = self.topic(base);
        let sink = self.description.next_name("KSTREAM-SINK-");
        let filter = self.description.next_name("KSTREAM-FILTER-");
        let source = self.description.next_name("KSTREAM-SOURCE-");
        let (sink, filter, source) = if is_generated_name(prefix) {
            (sink, filter, source)
        } else {
            let named = |what: &str| Node::named(&format!("{base}-repartition-{what}"));
            (named("sink"), named("filter"), named("source"))
        };
        let filter = self.description.add_processor(at.sub, filter, &[last], &[]);
        self.description.add_sink(at.sub, sink, &topic, &filter);
        let exit = self.exit(at);
        let to = topic.clone();
        self.edit(&exit, move |s| {
            s.flat_map_records(encode, RecordEffect::ChangesKeys)
                .to(&to)
        });
        self.repartition.push(topic.clone());
        let start = self.start_named(&topic, source);
        let last = self.description.last(start.sub);
        (start, last)
    }

    /// A new branch at `at`, for steps that take the records reaching `at`: every use of a
    /// stream (a sink, a store, a join) is a branch of its own, as a Kafka Streams node may
    /// have several children.
    pub(crate) fn exit(&mut self, at: &Pos) -> Pos {
        let at = self.resolve(at);
        let (place, _) = self.streams[at.sub].open_branch(&at.place);
        Pos { sub: at.sub, place }
    }

    /// The id of the fork whose branches take the records reaching `at`.
    pub(crate) fn fork_at(&mut self, at: &Pos) -> usize {
        let at = self.resolve(at);
        self.streams[at.sub].fork_at(&at.place)
    }

    /// Adds steps at `at`, a branch just opened with [`Graph::exit`].
    pub(crate) fn edit(&mut self, at: &Pos, f: impl FnOnce(Stream) -> Stream) {
        let at = self.resolve(at);
        self.streams[at.sub].edit_branch(&at.place, f);
    }

    /// Adds tables to sub-topology `sub`'s sources.
    pub(crate) fn edit_sources(&mut self, sub: usize, f: impl FnOnce(Stream) -> Stream) {
        let sub = self.resolve_sub(sub);
        let s = std::mem::replace(&mut self.streams[sub], Stream::branch());
        self.streams[sub] = f(s);
    }

    /// Where `at` is now: a place of a sub-topology merged into another is that one's.
    pub(crate) fn resolve(&self, at: &Pos) -> Pos {
        let mut at = at.clone();
        while let Some((into, absorbed)) = self.merged.get(&at.sub) {
            let place = absorbed
                .place(&at.place)
                .unwrap_or_else(|| at.place.clone());
            at = Pos { sub: *into, place };
        }
        at
    }

    /// Sub-topology `sub`, or the one it was merged into.
    pub(crate) fn resolve_sub(&self, mut sub: usize) -> usize {
        while let Some((into, _)) = self.merged.get(&sub) {
            sub = *into;
        }
        sub
    }

    /// Merges sub-topology `from` into `into` (a join connects them, as Kafka merges the node
    /// groups a join connects): their topics must be co-partitioned, which is checked at
    /// start. `false` when it cannot be ([`Stream::absorb_stream`]).
    pub(crate) fn merge_subs(&mut self, from: usize, into: usize) -> bool {
        let (from, into) = (self.resolve_sub(from), self.resolve_sub(into));
        if from == into {
            return true;
        }
        let other = std::mem::replace(&mut self.streams[from], Stream::branch());
        match self.streams[into].absorb_stream(other) {
            Ok(absorbed) => {
                self.description.absorb(from, into);
                self.merged.insert(from, (into, absorbed));
                true
            }
            Err(other) => {
                self.streams[from] = *other;
                false
            }
        }
    }

    /// Records `topic` as a repartition topic this application makes and owns.
    pub(crate) fn add_repartition(&mut self, topic: &str) {
        self.repartition.push(topic.to_owned());
    }

    /// A topic of the application's own, `<app id>-<name>` (a foreign-key join's).
    pub(crate) fn internal_topic(&self, name: &str) -> String {
        format!("{}-{name}", self.app_id)
    }

    pub(crate) fn topic(&self, name: &str) -> String {
        format!("{}-{name}-repartition", self.app_id)
    }
}

/// A stream's records (and deletes, `None`) as the bytes a repartition topic or a store step
/// takes.
pub(crate) type Encode =
    Box<dyn Fn(&[u8], Option<&[u8]>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> + Send + Sync>;

/// Whether `name` has the form of a name Kafka generates: Java's
/// `name.matches("KSTREAM.*-[0-9]{10}")`.
fn is_generated_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= "KSTREAM-".len() + 10
        && name.starts_with("KSTREAM")
        && b[b.len() - 11] == b'-'
        && b[b.len() - 10..].iter().all(u8::is_ascii_digit)
}

/// Reads a record's key and value with the serdes; a record that does not decode fails as
/// undecodable (`--on-deserialization-error`), naming `topic`.
/// `what` names the bytes in the failure (a topic, or a processor's output).
/// The records a segment gives, as the bytes `key` and `value` make of them: what a
/// repartition topic, a store step or a sink takes. With `deletes` (a table's updates), a
/// delete gives the deletes of its keys; without, a delete gives nothing.
pub(crate) fn encoding<K, V, KS, VS>(
    chain: Chain<K, V>,
    deletes: Option<Updates<K, V>>,
    key: Arc<KS>,
    value: Arc<VS>,
) -> Encode
where
    K: 'static,
    V: 'static,
    KS: Serde<Value = K> + ?Sized,
    VS: Serde<Value = V> + ?Sized,
{
    Box::new(move |k: &[u8], v: Option<&[u8]>| match (v, &deletes) {
        (_, Some(updates)) => updates(k, v)
            .iter()
            .map(|(k, v)| (key.serialize(k), v.as_ref().map(|v| value.serialize(v))))
            .collect(),
        (Some(v), None) => chain(k, v)
            .iter()
            .map(|(k, v)| (key.serialize(k), Some(value.serialize(v))))
            .collect(),
        (None, None) => Vec::new(),
    })
}

/// Reads a table's updates (records and deletes) with the serdes; one that does not decode
/// fails as undecodable, naming `what`.
pub(crate) fn decoding_updates<KS: Serde + ?Sized, VS: Serde + ?Sized>(
    key: Arc<KS>,
    value: Arc<VS>,
    what: String,
) -> Updates<KS::Value, VS::Value> {
    let (key_what, value_what) = (format!("{what}: key"), format!("{what}: value"));
    Arc::new(move |k, v| {
        let k = read_or_fail(&*key, k, &key_what);
        let v = v.map(|v| read_or_fail(&*value, v, &value_what));
        vec![(k, v)]
    })
}

pub(crate) fn decoding<KS: Serde, VS: Serde>(
    key: Arc<KS>,
    value: Arc<VS>,
    what: String,
) -> Chain<KS::Value, VS::Value> {
    let (key_what, value_what) = (format!("{what}: key"), format!("{what}: value"));
    Arc::new(move |k, v| {
        let k = read_or_fail(&*key, k, &key_what);
        let v = read_or_fail(&*value, v, &value_what);
        vec![(k, v)]
    })
}

/// The serdes a stream is read with: [`StreamsBuilder::stream`].
pub struct Consumed<KS, VS> {
    pub(crate) key: KS,
    pub(crate) value: VS,
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
    pub(crate) key: KS,
    pub(crate) value: VS,
    pub(crate) name: Option<String>,
}

impl<KS: Serde, VS: Serde> Grouped<KS, VS> {
    pub fn with(key: KS, value: VS) -> Self {
        Grouped {
            key,
            value,
            name: None,
        }
    }

    /// Names the repartition topic, as Kafka's `Grouped.as(name)`; a `group_by`'s key
    /// selection is named `name` too, as in Kafka.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }
}

/// How [`KStream::repartition`] writes its topic: the serdes, the topic's name
/// (`<application id>-<name>-repartition`) and its partition count, as Kafka's `Repartitioned`.
pub struct Repartitioned<KS, VS> {
    key: KS,
    value: VS,
    name: Option<String>,
    partitions: Option<u32>,
}

impl<KS: Serde, VS: Serde> Repartitioned<KS, VS> {
    /// The stream's key and value serdes; the topic named by the operation's number, with the
    /// partition count of the stream that writes it.
    pub fn with(key: KS, value: VS) -> Self {
        Repartitioned {
            key,
            value,
            name: None,
            partitions: None,
        }
    }

    /// Names the topic `<application id>-<name>-repartition`, as `Repartitioned.as(name)`.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// The topic's partition count, hence the number of tasks reading it, as
    /// `Repartitioned.withNumberOfPartitions(n)`.
    pub fn with_partitions(mut self, partitions: u32) -> Self {
        self.partitions = Some(partitions);
        self
    }
}

/// The serdes of a stream joined with a table ([`KStream::join`]), and the name of its
/// repartition topic (`<application id>-<name>-repartition`) when its keys changed.
pub struct Joined<KS, VS> {
    pub(crate) key: KS,
    pub(crate) value: VS,
    pub(crate) name: Option<String>,
}

impl<KS: Serde, VS: Serde> Joined<KS, VS> {
    /// The stream's key and value serdes (the table's are its own).
    pub fn with(key: KS, value: VS) -> Self {
        Joined {
            key,
            value,
            name: None,
        }
    }

    /// Names the repartition topic and the join, as Kafka's `Joined.as(name)`.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }
}

/// A store's name: its changelog is `<application id>-<name>-changelog`, as in Kafka Streams.
pub struct Materialized {
    pub(crate) name: Option<String>,
    /// Kafka's `count(Materialized)` with no name takes one number more than `count()`.
    burns_for_count: bool,
}

impl Materialized {
    /// The store's name when named; otherwise one number is taken, as Kafka's
    /// `MaterializedInternal` takes one for a store it may not make.
    pub(crate) fn name_or_burn(self, description: &mut Description) -> Option<String> {
        if self.name.is_none() {
            description.burn();
        }
        self.name
    }

    /// As Kafka's `Materialized.as(name)`.
    pub fn named(name: &str) -> Self {
        Materialized {
            name: Some(name.to_owned()),
            burns_for_count: false,
        }
    }

    /// A generated name, numbered as Kafka numbers the store of its operations without a
    /// `Materialized`: `count()`, `reduce(reducer)`, `aggregate(initializer, aggregator)`
    /// (`KSTREAM-AGGREGATE-STATE-STORE-<n>`, `KSTREAM-REDUCE-STATE-STORE-<n>`), and
    /// `table(topic)` (`<topic>-STATE-STORE-<n>`). Name stores whose state must survive a
    /// change of the topology.
    pub fn generated() -> Self {
        Materialized {
            name: None,
            burns_for_count: false,
        }
    }

    /// A generated name, numbered as Kafka numbers it when given a `Materialized` without a
    /// name (`Materialized.with(keySerde, valueSerde)`): as [`Materialized::generated`],
    /// except that `count` takes one number more first, as Kafka's
    /// `KGroupedStreamImpl.count(Named, Materialized)` does "for compatibility".
    pub fn unnamed() -> Self {
        Materialized {
            name: None,
            burns_for_count: true,
        }
    }
}

/// A stream of records with keys of type `K` and values of type `V`.
pub struct KStream<K, V> {
    pub(crate) graph: Rc<RefCell<Graph>>,
    pub(crate) at: Pos,
    pub(crate) chain: Chain<K, V>,
    /// A step may have changed keys since the last repartition: a grouping repartitions.
    pub(crate) key_changed: bool,
    /// Its records are a table's updates: since an aggregation, only steps that keep the key
    /// and give at most one record per record. The record cache may then keep the last
    /// update of each key only.
    pub(crate) updates: bool,
    /// The last node, for `describe`.
    pub(crate) last: Node,
    /// The segment with its deletes, where its records may be deletes (a table's updates):
    /// a sink writes them as tombstones. `None`: they cannot be.
    pub(crate) deletes: Option<Updates<K, V>>,
}

/// What a stateless step does to keys and record counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Each record gives at most one, with its key.
    KeepsKeys,
    /// Keys may change.
    ChangesKeys,
    /// Each record may give several, with its key.
    FansOut,
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KStream<K, V> {
    fn then<K2, V2>(
        self,
        kind: &str,
        effect: Effect,
        step: impl Fn(K, V, &mut Vec<(K2, V2)>) + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        self.then_named(kind, None, effect, step)
    }

    /// As [`KStream::then`], the step's node named `name` when given (Kafka's `Named`).
    fn then_named<K2, V2>(
        self,
        kind: &str,
        name: Option<&str>,
        effect: Effect,
        step: impl Fn(K, V, &mut Vec<(K2, V2)>) + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        let prev = self.chain;
        let last = self.graph.borrow_mut().description.named_processor(
            self.at.sub,
            kind,
            name,
            &[&self.last],
        );
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
            key_changed: self.key_changed || effect == Effect::ChangesKeys,
            updates: self.updates && effect == Effect::KeepsKeys,
            last,
            deletes: None,
        }
    }

    /// Keeps the records for which `f(key, value)` holds. A delete passes.
    pub fn filter(self, f: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KStream<K, V> {
        self.then_keyed("FILTER", Effect::KeepsKeys, move |k, v, emit| match v {
            Some(v) if !f(&k, &v) => {}
            v => emit(k, v),
        })
    }

    /// A step that keeps keys, over records and deletes alike (`None`): it runs once per
    /// record whether the stream's records go on as values only ([`KStream::chain`]) or with
    /// their deletes ([`KStream::deletes`]).
    fn then_keyed<V2: Send + Sync + 'static>(
        self,
        kind: &str,
        effect: Effect,
        step: impl Fn(K, Option<V>, &mut dyn FnMut(K, Option<V2>)) + Send + Sync + 'static,
    ) -> KStream<K, V2> {
        let step = Arc::new(step);
        let deletes = self.deletes.clone().map(|prev| -> Updates<K, V2> {
            let step = step.clone();
            Arc::new(move |k, v| {
                let mut out = Vec::new();
                for (k, v) in prev(k, v) {
                    step(k, v, &mut |k, v| out.push((k, v)));
                }
                out
            })
        });
        // Straight into the values' output: no buffer per record on the path every record takes.
        let mut next = self.then(kind, effect, move |k, v, out| {
            step(k, Some(v), &mut |k, v| {
                if let Some(v) = v {
                    out.push((k, v));
                }
            });
        });
        next.deletes = deletes;
        next
    }

    /// Keeps the records for which `f(key, value)` does not hold.
    pub fn filter_not(self, f: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KStream<K, V> {
        self.filter(move |k, v| !f(k, v))
    }

    /// Replaces each value with `f(value)`. A delete stays a delete.
    pub fn map_values<V2: Send + Sync + 'static>(
        self,
        f: impl Fn(&V) -> V2 + Send + Sync + 'static,
    ) -> KStream<K, V2> {
        self.then_keyed("MAPVALUES", Effect::KeepsKeys, move |k, v, emit| {
            emit(k, v.map(|v| f(&v)))
        })
    }

    /// Replaces each record with `f(key, value)`; keys may change.
    pub fn map<K2: Send + Sync + 'static, V2: Send + Sync + 'static>(
        self,
        f: impl Fn(&K, &V) -> (K2, V2) + Send + Sync + 'static,
    ) -> KStream<K2, V2> {
        self.then("MAP", Effect::ChangesKeys, move |k, v, out| {
            out.push(f(&k, &v))
        })
    }

    /// Replaces each record's key with `f(key, value)`.
    pub fn select_key<K2: Send + Sync + 'static>(
        self,
        f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
    ) -> KStream<K2, V> {
        self.then("KEY-SELECT", Effect::ChangesKeys, move |k, v, out| {
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
        self.then("FLATMAP", Effect::ChangesKeys, move |k, v, out| {
            out.extend(f(&k, &v))
        })
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
        self.then_keyed(
            "FLATMAPVALUES",
            Effect::FansOut,
            move |k, v, emit| match v {
                Some(v) => f(&v).into_iter().for_each(|v2| emit(k.clone(), Some(v2))),
                None => emit(k, None),
            },
        )
    }

    /// Calls `f(key, value)` for each record and passes it on.
    pub fn peek(self, f: impl Fn(&K, &V) + Send + Sync + 'static) -> KStream<K, V> {
        self.then_keyed("PEEK", Effect::KeepsKeys, move |k, v, emit| {
            if let Some(v) = &v {
                f(&k, v);
            }
            emit(k, v)
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
        g.description.sink(self.at.sub, topic, &self.last);
        let (key, value) = (Arc::new(produced.key), Arc::new(produced.value));
        // A delete is written as a tombstone: the key and no value.
        let encode = encoding(self.chain, self.deletes, key, value);
        let topic = topic.to_owned();
        let at = g.exit(&self.at);
        let effect = if self.updates {
            RecordEffect::KeepsUpdates
        } else {
            RecordEffect::ChangesKeys
        };
        g.edit(&at, move |s| s.flat_map_records(encode, effect).to(&topic));
    }

    /// Joins each record with its key's value in `table` (read with
    /// [`StreamsBuilder::table`]): `joiner(value, table value)`; a record whose key the table
    /// lacks is dropped, as Kafka Streams' stream-table `join`. When a step changed keys, the
    /// stream first goes through a repartition topic with the table's partition count.
    ///
    /// ```
    /// use baton_streams::serdes::{Str};
    /// use baton_streams::{Consumed, Joined, Materialized, Produced, StreamsBuilder};
    ///
    /// let builder = StreamsBuilder::new("greet");
    /// let names = builder.table("names", Consumed::with(Str, Str), Materialized::named("names"));
    /// builder
    ///     .stream("visits", Consumed::with(Str, Str))
    ///     .join(&names, |page: &String, name: &String| format!("{name} saw {page}"), Joined::with(Str, Str))
    ///     .to("greetings", Produced::with(Str, Str));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn join<VT, VR, KS, VS>(
        self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, &VT) -> VR + Send + Sync + 'static,
        joined: Joined<KS, VS>,
    ) -> KStream<K, VR>
    where
        VT: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        self.join_with(table, joined, true, move |v, t| t.map(|t| joiner(v, &t)))
    }

    /// As [`KStream::join`], keeping records whose key the table lacks: `joiner(value, None)`
    /// (Kafka Streams' `leftJoin`).
    pub fn left_join<VT, VR, KS, VS>(
        self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, Option<&VT>) -> VR + Send + Sync + 'static,
        joined: Joined<KS, VS>,
    ) -> KStream<K, VR>
    where
        VT: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        self.join_with(table, joined, false, move |v, t| {
            Some(joiner(v, t.as_ref()))
        })
    }

    fn join_with<VT, VR, KS, VS>(
        self,
        table: &KTable<K, VT>,
        joined: Joined<KS, VS>,
        inner: bool,
        f: impl Fn(&V, Option<VT>) -> Option<VR> + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        VT: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        let graph = self.graph.clone();
        let (key, value) = (Arc::new(joined.key), Arc::new(joined.value));
        let encode = encoding(self.chain, None, key.clone(), value.clone());
        let stream = (self.at, self.last, self.key_changed);
        let given = (joined.name.as_deref(), inner);
        let placed = match (&table.source, &table.state, &table.at) {
            (Some(_), ..) => join_refusal(table)
                .map(|src| place_source_join(&mut graph.borrow_mut(), stream, encode, src, given)),
            (None, Some(store), Some(at)) => {
                let kept = (store.as_str(), at.sub);
                place_kept_join(&mut graph.borrow_mut(), stream, encode, kept, given)
            }
            _ => Err(JoinRefused::NotKept),
        };
        let (at, last) = match placed {
            Ok(placed) => placed,
            Err(why) => {
                graph.borrow_mut().errors.push(why.to_string());
                return KStream {
                    graph,
                    at: Pos {
                        sub: 0,
                        place: Place::main(),
                    },
                    chain: Arc::new(|_, _| Vec::new()),
                    key_changed: false,
                    updates: false,
                    last: Node::default(),
                    deletes: None,
                };
            }
        };
        let what = match &table.source {
            Some(src) => format!("{}: value", src.topic),
            None => "the joined table: value".to_owned(),
        };
        // A table read from a topic or kept in a store always has its serde.
        let table_value = table.value.clone();
        KStream {
            graph,
            at,
            chain: Arc::new(move |k, v| {
                let (v, t) = split_join_frame(v).unwrap_or_else(|| {
                    undecodable("join: a value that is not a joined pair".into())
                });
                let k = read_or_fail(&*key, k, "joined key");
                let v = read_or_fail(&*value, v, "joined value");
                let t = t.and_then(|t| {
                    let serde = table_value.as_ref()?;
                    Some(read_or_fail(&**serde, t, &what))
                });
                f(&v, t).map(|r| (k, r)).into_iter().collect()
            }),
            key_changed: false,
            updates: false,
            last,
            deletes: None,
        }
    }

    /// Writes the stream through a repartition topic and reads it back, partitioned by key
    /// (Kafka Streams' `repartition`): after a key change, or to run the steps that follow
    /// on another number of tasks ([`Repartitioned::with_partitions`]). The topic is made at
    /// start; one made before with another partition count is refused.
    ///
    /// ```
    /// use baton_streams::serdes::Str;
    /// use baton_streams::{Consumed, Produced, Repartitioned, StreamsBuilder};
    ///
    /// let builder = StreamsBuilder::new("clicks");
    /// builder
    ///     .stream("clicks", Consumed::with(Str, Str))
    ///     .select_key(|_, user: &String| user.clone())
    ///     .repartition(Repartitioned::with(Str, Str).named("by-user").with_partitions(6))
    ///     .to("clicks-by-user", Produced::with(Str, Str));
    /// let topology = builder.build().unwrap();
    /// assert_eq!(topology.repartition_partitions("clicks-by-user-repartition"), Some(6));
    /// ```
    pub fn repartition<KS, VS>(self, repartitioned: Repartitioned<KS, VS>) -> KStream<K, V>
    where
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        let Repartitioned {
            key,
            value,
            name,
            partitions,
        } = repartitioned;
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        // Kafka's `doRepartition`: the operation's number is taken first, named or not.
        let prefix = match name {
            Some(n) => n,
            None => g
                .description
                .next_name("KSTREAM-REPARTITION-")
                .as_str()
                .to_owned(),
        };
        let (key, value) = (Arc::new(key), Arc::new(value));
        // A table's deletes go through as tombstones, and the reading side takes them.
        let carries_deletes = self.deletes.is_some();
        let encode = encoding(self.chain, self.deletes, key.clone(), value.clone());
        let (at, last) = g.repartition(&prefix, &self.at, &self.last, encode);
        if carries_deletes {
            g.edit_sources(at.sub, Stream::with_deletes);
        }
        let topic = g.topic(prefix.strip_suffix("-repartition").unwrap_or(&prefix));
        if let Some(n) = partitions {
            g.repartition_partitions.push((topic.clone(), n));
        }
        drop(g);
        KStream {
            graph,
            at,
            chain: decoding(key.clone(), value.clone(), topic.clone()),
            key_changed: false,
            updates: false,
            last,
            deletes: carries_deletes.then(|| decoding_updates(key, value, topic)),
        }
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
        // Kafka's `groupBy` names its key selection after the grouping, when it has a name.
        let name = grouped.name.clone();
        self.then_named(
            "KEY-SELECT",
            name.as_deref(),
            Effect::ChangesKeys,
            move |k, v, out| {
                let k2 = f(&k, &v);
                out.push((k2, v));
            },
        )
        .grouped(grouped, true)
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
    pub(crate) key: Arc<KS>,
    pub(crate) value: Arc<VS>,
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
        self.aggregate_into(materialized, "COUNT", Long, counting)
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
        self.aggregate_into(materialized, "REDUCE", serde, reducing(f))
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
        let fold = folding(self.key.clone(), init, f);
        self.aggregate_into(materialized, "AGGREGATE", serde, fold)
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
    ///
    /// With [`crate::SessionWindows`], per session of each key (Kafka's
    /// `windowedBy(SessionWindows...)`): see [`crate::SessionWindowedKStream`].
    pub fn windowed_by<W: WindowedBy<K, V, KS, VS>>(self, windows: W) -> W::Windowed {
        windows.cut(self)
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
        self.aggregate_table(materialized, kind, serde, Windowing::Keyed, key, fold)
    }

    /// The aggregation's steps, then its table, keyed with `table_key` (the grouped key's
    /// serde, or its windowed form).
    pub(crate) fn aggregate_table<TK: Send + Sync + 'static, AS: Serde>(
        self,
        materialized: Materialized,
        kind: &str,
        serde: AS,
        windowing: Windowing<AS::Value>,
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
        // Kafka's order (`KGroupedStreamImpl`, `GroupedStreamAggregateBuilder.build`): the
        // store's name, the aggregation's, then the repartition's three.
        let prefix = if kind == "REDUCE" {
            "KSTREAM-REDUCE-"
        } else {
            "KSTREAM-AGGREGATE-"
        };
        if kind == "COUNT" && materialized.burns_for_count {
            g.description.burn();
        }
        let store = materialized.name.unwrap_or_else(|| {
            let store_prefix = format!("{prefix}STATE-STORE-");
            g.description.next_name(&store_prefix).as_str().to_owned()
        });
        let node = g.description.next_name(prefix);
        g.store_format(&store, key.name(), serde.name());
        let (mut at, chain) = (stream.at, stream.chain);
        let mut last = stream.last;
        let encode = encoding(chain, None, key.clone(), value.clone());
        if repartition {
            (at, last) = g.repartition(name.as_deref().unwrap_or(&store), &at, &last, encode);
        } else {
            // Keys as they came (decoded and encoded again): the store sits beside the source.
            at = g.exit(&at);
            g.edit(&at, move |s| {
                s.flat_map_records(encode, RecordEffect::KeepsKeys)
            });
        }
        last = g
            .description
            .add_processor(at.sub, node, &[&last], &[store.as_str()]);
        let a_serde = Arc::new(serde);
        let merge_serde = a_serde.clone();
        let (agg, v_serde) = (a_serde.clone(), value);
        let step = move |current: Option<&[u8]>, k: &[u8], v: &[u8]| {
            let current = current.map(|c| read_or_fail(&*agg, c, "store value"));
            let v = read_or_fail(&*v_serde, v, "grouped value");
            agg.serialize(&fold(k, current, v))
        };
        let state = matches!(windowing, Windowing::Keyed).then(|| store.clone());
        // Kafka's window close for suppress (`GraphGraceSearchUtil`): a session closes its
        // gap after its end, plus the grace.
        let closes = match &windowing {
            Windowing::Keyed => None,
            Windowing::Time(w) => Some((WindowEnd::Time { size_ms: w.size_ms }, w.grace_ms)),
            Windowing::Sliding(w) => Some((WindowEnd::Time { size_ms: w.diff_ms }, w.grace_ms)),
            Windowing::Session(w, _) => {
                Some((WindowEnd::Session, w.grace_ms.saturating_add(w.gap_ms)))
            }
        };
        g.edit(&at, move |s| match windowing {
            Windowing::Keyed => s.aggregate_as(&store, Layout::Timestamped, step),
            Windowing::Time(w) => s.window_aggregate(&store, w, step),
            Windowing::Sliding(w) => s.sliding_aggregate(&store, w, step),
            Windowing::Session(w, merge) => {
                let merge = move |k: &[u8], acc: Option<&[u8]>, session: &[u8]| {
                    let read = |v: &[u8]| read_or_fail(&*merge_serde, v, "store value");
                    merge_serde.serialize(&merge(k, acc.map(read), read(session)))
                };
                s.session_aggregate(&store, w, step, merge)
            }
        });
        drop(g);
        KTable::of_records(graph, at, (table_key, a_serde), last, "an aggregation")
            .with_state(state)
            .closing(closes)
    }
}

/// Kafka's `count` as an aggregation's fold: one more per record.
pub(crate) fn counting<V>(_: &[u8], current: Option<i64>, _: V) -> i64 {
    current.unwrap_or(0) + 1
}

/// Kafka's `reduce` as a fold: a key's first value starts it, then `f(aggregate, value)`.
pub(crate) fn reducing<V>(
    f: impl Fn(V, V) -> V + Send + Sync + 'static,
) -> impl Fn(&[u8], Option<V>, V) -> V + Send + Sync + 'static {
    move |_, current, v| match current {
        Some(acc) => f(acc, v),
        None => v,
    }
}

/// Kafka's `aggregate` as a fold: the key read with `key`, `init()` to start a key, then
/// `f(key, value, aggregate)`.
pub(crate) fn folding<K, V, A, KS: Serde<Value = K> + ?Sized>(
    key: Arc<KS>,
    init: impl Fn() -> A + Send + Sync + 'static,
    f: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
) -> impl Fn(&[u8], Option<A>, V) -> A + Send + Sync + 'static {
    move |k, current, v| {
        let k = read_or_fail(&*key, k, "grouped key");
        f(&k, v, current.unwrap_or_else(&init))
    }
}

/// How an aggregation keeps its state: per key, per time window, or per session (with the
/// merger of two sessions' aggregates, `merge(key, so far or None to start, session)`).
pub(crate) enum Windowing<A> {
    Keyed,
    Time(Windows),
    Sliding(Sliding),
    Session(Sessions, SessionMerge<A>),
}

pub(crate) type SessionMerge<A> = Arc<dyn Fn(&[u8], Option<A>, A) -> A + Send + Sync>;

/// The table a stream joins, or why it cannot be joined: only a table read with
/// [`StreamsBuilder::table`], and once per joining stream.
fn join_refusal<K, VT>(table: &KTable<K, VT>) -> Result<&TableSource, JoinRefused> {
    let Some(src) = table.source.as_ref() else {
        return Err(JoinRefused::NotKept);
    };
    if src.placed.replace(true) {
        return Err(JoinRefused::JoinedTwice(src.topic.clone()));
    }
    Ok(src)
}

/// Why a table cannot be joined (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum JoinRefused {
    #[error("join: only a table read with StreamsBuilder::table or kept in a store (an aggregation's, a grouped table's, a to_table or an operation with a named Materialized) can be joined")]
    NotKept,
    #[error("join: {0}; a stream joining an aggregation's table must come straight from its topics (its steps stateless) or after a key change, which repartitions it")]
    Unabsorbed(#[from] crate::merge::Unabsorbed),
    #[error("join: table {0:?} is joined twice; read it once per joining stream (a second StreamsBuilder::table)")]
    JoinedTwice(String),
}

/// Where a stream (`at`, `last`, whether its keys changed) joins a table read from a topic:
/// the stream, through a repartition topic if its keys changed, reads the table's topic into
/// its store in its own sub-topology. The join's place and node.
fn place_source_join(
    g: &mut Graph,
    (mut at, mut last, key_changed): (Pos, Node, bool),
    encode: Encode,
    src: &TableSource,
    (name, inner): (Option<&str>, bool),
) -> (Pos, Node) {
    if key_changed {
        (at, last) = g.repartition(&join_prefix(name, &last), &at, &last, encode);
    } else {
        at = g.exit(&at);
        g.edit(&at, move |s| {
            s.flat_map_records(encode, RecordEffect::KeepsKeys)
        });
    }
    let store = src.store.clone();
    last = describe_join(g, &at, src, name, inner, &last);
    let table_topic = src.topic.clone();
    {
        let store = store.clone();
        g.edit_sources(at.sub, move |s| s.table(&table_topic, &store));
    }
    g.edit(&at, move |s| {
        if inner {
            s.join_table(&store)
        } else {
            s.left_join_table(&store)
        }
    });
    (at, last)
}

/// Where a stream joins a table kept in `store` by sub-topology `sub` (an aggregation's, a
/// `to_table`'s): the stream, through a repartition topic if its keys changed, is read in
/// that sub-topology, as Kafka puts a stream joining a table in the table's sub-topology.
fn place_kept_join(
    g: &mut Graph,
    (at, last, key_changed): (Pos, Node, bool),
    encode: Encode,
    (store, sub): (&str, usize),
    (name, inner): (Option<&str>, bool),
) -> Result<(Pos, Node), JoinRefused> {
    let (start, last, encode) = if key_changed {
        let (start, last) = g.repartition_start(&join_prefix(name, &last), &at, &last, encode);
        (start, last, None)
    } else {
        (at, last, Some(encode))
    };
    // A stream that passed a step of its own sub-topology brings that sub-topology with it,
    // as Kafka merges the node groups a join connects.
    let joined_at = match g.absorb(&start, sub) {
        Ok(at) => at,
        Err(_) if g.merge_subs(start.sub, sub) => g.resolve(&start),
        Err(why) => return Err(why.into()),
    };
    let at = g.exit(&joined_at);
    let kept = store.to_owned();
    g.edit(&at, move |s| {
        let s = match encode {
            Some(encode) => s.flat_map_records(encode, RecordEffect::KeepsKeys),
            None => s,
        };
        s.join_kept(&kept, inner)
    });
    let node = join_node(&mut g.description, name, inner);
    let last = g.description.add_processor(sub, node, &[&last], &[store]);
    Ok((at, last))
}

/// A stream-table join's repartition topic's prefix (Kafka's `repartitionForJoin`): the
/// join's name, else the stream's last node's.
fn join_prefix(name: Option<&str>, last: &Node) -> String {
    name.unwrap_or(last.as_str()).to_owned()
}

/// A stream-table join's node: its given name, else numbered as Kafka numbers it.
pub(crate) fn join_node(d: &mut Description, name: Option<&str>, inner: bool) -> Node {
    match name {
        Some(n) => Node::named(n),
        None => d.next_name(if inner {
            "KSTREAM-JOIN-"
        } else {
            "KSTREAM-LEFTJOIN-"
        }),
    }
}

/// The join's nodes in the description: the table's source and processor in the joining
/// stream's sub-topology, then the join (named as given, else as Kafka numbers it), which
/// is returned.
fn describe_join(
    g: &mut Graph,
    at: &Pos,
    src: &TableSource,
    name: Option<&str>,
    inner: bool,
    last: &Node,
) -> Node {
    let store = src.store.as_str();
    crate::table_joins::describe_source(&mut g.description, at.sub, src);
    let join_node = join_node(&mut g.description, name, inner);
    g.description
        .add_processor(at.sub, join_node, &[last], &[store])
}
