//! Global tables ([`StreamsBuilder::global_table`]): a topic read whole, every partition, on
//! every instance, as Kafka Streams' `GlobalKTable`; a stream joins one by a key it maps from
//! each record ([`KStream::join_global`]), with no repartition and no co-partitioning.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use baton_runtime::record::undecodable;
use baton_runtime::topology::{split_join_frame, RecordEffect, Stream};

use crate::dsl::{encoding, join_node, Consumed, Graph, Joined, KStream, Materialized};
use crate::serdes::{read_or_fail, Serde};

/// A table read whole on every instance: [`StreamsBuilder::global_table`]. It is only joined.
pub struct GlobalKTable<K, V> {
    graph: Rc<RefCell<Graph>>,
    store: String,
    topic: String,
    key: Arc<dyn Serde<Value = K>>,
    value: Arc<dyn Serde<Value = V>>,
}

impl<K, V> GlobalKTable<K, V> {
    /// Its store's name: `<topic>-STATE-STORE-<n>` unless named.
    pub fn store_name(&self) -> &str {
        &self.store
    }
}

impl crate::StreamsBuilder {
    /// Every partition of `topic` kept on every instance, each key's latest value (a record
    /// without a value deletes its key; one without a key is passed over), as Kafka Streams'
    /// `globalTable`. The store (`<state dir>/global/<store>`) is read to the topic's end
    /// before the instance processes anything, then kept up with the topic; it has no
    /// changelog (the topic is one). Its sub-topology number is taken as Kafka takes it, and
    /// makes no tasks.
    ///
    /// ```
    /// use baton_streams::serdes::Str;
    /// use baton_streams::{Consumed, Joined, Materialized, Produced, StreamsBuilder};
    ///
    /// let builder = StreamsBuilder::new("priced-orders");
    /// let products = builder.global_table("products", Consumed::with(Str, Str), Materialized::named("products"));
    /// builder
    ///     .stream("orders", Consumed::with(Str, Str))
    ///     .join_global(
    ///         &products,
    ///         |_order: &String, product: &String| product.clone(),
    ///         |product: &String, name: &String| format!("{product}: {name}"),
    ///         Joined::with(Str, Str),
    ///     )
    ///     .to("priced", Produced::with(Str, Str));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn global_table<KS: Serde, VS: Serde>(
        &self,
        topic: &str,
        consumed: Consumed<KS, VS>,
        materialized: Materialized,
    ) -> GlobalKTable<KS::Value, VS::Value> {
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        // Kafka's order (`StreamsBuilder.globalTable`, `InternalStreamsBuilder.globalTable`):
        // the store, the source, then the table source.
        let store = materialized.name.unwrap_or_else(|| {
            let prefix = format!("{topic}-STATE-STORE-");
            g.description.next_name(&prefix).as_str().to_owned()
        });
        let source = g.description.next_name("KSTREAM-SOURCE-");
        let table = g.description.next_name("KTABLE-SOURCE-");
        let sub = g.streams.len();
        g.streams.push(Stream::from::<&str>(&[]));
        let source = g.description.add_source(sub, source, topic);
        g.description
            .add_processor(sub, table, &[&source], &[store.as_str()]);
        g.description.mark_global(sub);
        g.globals.push((topic.to_owned(), store.clone(), sub));
        g.store_format(&store, consumed.key.name(), consumed.value.name());
        drop(g);
        GlobalKTable {
            graph,
            store,
            topic: topic.to_owned(),
            key: Arc::new(consumed.key),
            value: Arc::new(consumed.value),
        }
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KStream<K, V> {
    /// Joins each record with the global table's row for `key(key, value)` (Kafka Streams'
    /// `join(GlobalKTable, KeyValueMapper, ValueJoiner)`): `joiner(value, row)`, the key kept;
    /// a record whose row is missing is dropped. No repartition, whatever the keys: every
    /// instance holds the whole table. `joined` gives the stream's serdes (its records are
    /// written with them before the join, as for [`KStream::join`]) and may name the join.
    pub fn join_global<GK, GV, VR, KS, VS>(
        self,
        global: &GlobalKTable<GK, GV>,
        key: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, &GV) -> VR + Send + Sync + 'static,
        joined: Joined<KS, VS>,
    ) -> KStream<K, VR>
    where
        GK: Send + Sync + 'static,
        GV: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        self.global_join_with(global, key, joined, true, move |v, row| {
            row.map(|row| joiner(v, &row))
        })
    }

    /// As [`KStream::join_global`], every record kept: `joiner(value, None)` when the global
    /// table has no row for its key (Kafka's `leftJoin(GlobalKTable, ...)`).
    pub fn left_join_global<GK, GV, VR, KS, VS>(
        self,
        global: &GlobalKTable<GK, GV>,
        key: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&GV>) -> VR + Send + Sync + 'static,
        joined: Joined<KS, VS>,
    ) -> KStream<K, VR>
    where
        GK: Send + Sync + 'static,
        GV: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        self.global_join_with(global, key, joined, false, move |v, row| {
            Some(joiner(v, row.as_ref()))
        })
    }

    fn global_join_with<GK, GV, VR, KS, VS>(
        self,
        global: &GlobalKTable<GK, GV>,
        key: impl Fn(&K, &V) -> GK + Send + Sync + 'static,
        joined: Joined<KS, VS>,
        inner: bool,
        f: impl Fn(&V, Option<GV>) -> Option<VR> + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        GK: Send + Sync + 'static,
        GV: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        let graph = self.graph.clone();
        if !Rc::ptr_eq(&graph, &global.graph) {
            graph.borrow_mut().errors.push(format!(
                "join_global: the global table of {} belongs to another StreamsBuilder",
                global.topic
            ));
        }
        let (stream_key, stream_value) = (Arc::new(joined.key), Arc::new(joined.value));
        let encode = encoding(self.chain, None, stream_key.clone(), stream_value.clone());
        let mut g = graph.borrow_mut();
        let at = g.exit(&self.at);
        let node = join_node(&mut g.description, joined.name.as_deref(), inner);
        let last = g
            .description
            .add_processor(at.sub, node, &[&self.last], &[]);
        let (k_serde, v_serde) = (stream_key.clone(), stream_value.clone());
        let global_key = global.key.clone();
        let lookup = move |k: &[u8], v: &[u8]| {
            let k = read_or_fail(&*k_serde, k, "joined key");
            let v = read_or_fail(&*v_serde, v, "joined value");
            Some(global_key.serialize(&key(&k, &v)))
        };
        let store = global.store.clone();
        g.edit(&at, move |s| {
            s.flat_map_records(encode, RecordEffect::KeepsKeys)
                .global_join(&store, lookup, inner)
        });
        drop(g);
        let (row_serde, what) = (global.value.clone(), format!("{}: value", global.topic));
        KStream {
            graph,
            at,
            chain: Arc::new(move |k, v| {
                let (v, row) = split_join_frame(v).unwrap_or_else(|| {
                    undecodable("join: a value that is not a joined pair".into())
                });
                let k = read_or_fail(&*stream_key, k, "joined key");
                let v = read_or_fail(&*stream_value, v, "joined value");
                let row = row.map(|row| read_or_fail(&*row_serde, row, &what));
                f(&v, row).map(|r| (k, r)).into_iter().collect()
            }),
            key_changed: self.key_changed,
            updates: false,
            last,
            deletes: None,
        }
    }
}
