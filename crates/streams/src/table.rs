//! Tables: each key's latest value. [`KTable`]'s operations have Kafka Streams' meaning: an
//! update that removes a key (a filter's rejection, a delete read from a table's topic) is a
//! delete, which the steps that keep keys pass on and a sink writes as a tombstone.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use baton_runtime::topology::suppress::WindowEnd;
use baton_runtime::topology::{RecordEffect, Stream};

use crate::describe::Node;
use crate::dsl::{decoding_updates, encoding, Graph, KStream, Materialized, Pos, Updates};
use crate::serdes::read_or_fail;

/// A table's updates with their old values: `(key, new value, old value)`, either `None`
/// (a new key has no old value; a delete no new one).
pub(crate) type Changes<K, V> = Arc<
    dyn Fn(&[u8], Option<&[u8]>, Option<&[u8]>) -> Vec<(K, Option<V>, Option<V>)> + Send + Sync,
>;

/// Reads a table's updates with their old values with the serdes.
pub(crate) fn decoding_changes<K: Send + Sync + 'static, V: Send + Sync + 'static>(
    key: Arc<dyn Serde<Value = K>>,
    value: Arc<dyn Serde<Value = V>>,
    what: String,
) -> Changes<K, V> {
    let (new_what, old_what) = (format!("{what}: new value"), format!("{what}: old value"));
    Arc::new(move |k, new, old| {
        let k = read_or_fail(&*key, k, "table key");
        let read = |v: &[u8], what: &str| read_or_fail(&*value, v, what);
        vec![(
            k,
            new.map(|v| read(v, &new_what)),
            old.map(|v| read(v, &old_what)),
        )]
    })
}
use crate::serdes::Serde;

/// A table: each key's latest value, kept in a store backed by a changelog.
pub struct KTable<K, V> {
    pub(crate) graph: Rc<RefCell<Graph>>,
    /// Where its updates come out; `None` for a table read from a topic and not used yet.
    pub(crate) at: Option<Pos>,
    /// How the records at `at` read as the table's updates (a value, or `None` for a delete).
    pub(crate) updates: Option<Updates<K, V>>,
    /// The same with each update's old value, where the records at `at` come from a store
    /// step that knows it (an aggregation, a kept table): what a grouping subtracts.
    pub(crate) changes: Option<Changes<K, V>>,
    pub(crate) key: Arc<dyn Serde<Value = K>>,
    /// The values' serde: `None` after a `map_values`, whose values no serde has written yet.
    pub(crate) value: Option<Arc<dyn Serde<Value = V>>>,
    pub(crate) last: Node,
    pub(crate) source: Option<TableSource>,
    /// The timestamped store an aggregation or an upsert keeps its rows in, beside `at`: what
    /// a stream joining it reads.
    pub(crate) state: Option<String>,
    /// For a windowed aggregation's table (and tables made from it by filters and value
    /// maps): how its keys give their window's end, and how long after it the window closes
    /// (what `suppress(until_window_closes)` waits for).
    pub(crate) closes: Option<(WindowEnd, i64)>,
    /// The store the table is kept in once an operation needs its rows or old values (a
    /// grouping, a join), named when the table was made, as Kafka names the store of a
    /// `toTable()` it materializes then ([`KTable::keep_on_demand`]).
    pub(crate) on_demand: Option<String>,
}

/// A table read from a topic ([`crate::StreamsBuilder::table`]).
pub(crate) struct TableSource {
    pub(crate) topic: String,
    pub(crate) store: String,
    /// Its nodes' names, taken when it was read, as Kafka takes them.
    pub(crate) source_node: Node,
    pub(crate) table_node: Node,
    /// When it was read, among the sources: its sub-topology's number follows from it.
    pub(crate) rank: u64,
    /// Whether a join reads it already.
    pub(crate) placed: Rc<Cell<bool>>,
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KTable<K, V> {
    /// A table whose updates are the records at `at`, read with `key` and `value`: an
    /// aggregation's, or a stream's made a table.
    pub(crate) fn of_records(
        graph: Rc<RefCell<Graph>>,
        at: Pos,
        (key, value): (Arc<dyn Serde<Value = K>>, Arc<dyn Serde<Value = V>>),
        last: Node,
        what: &str,
    ) -> KTable<K, V> {
        let updates = decoding_updates(key.clone(), value.clone(), what.to_owned());
        let changes = decoding_changes(key.clone(), value.clone(), what.to_owned());
        KTable {
            graph,
            at: Some(at),
            updates: Some(updates),
            changes: Some(changes),
            key,
            value: Some(value),
            last,
            source: None,
            state: None,
            closes: None,
            on_demand: None,
        }
    }

    /// Keeps the table in its on-demand store ([`KTable::on_demand`]) if it is kept in none
    /// yet: its updates then carry their old values, and its rows can be looked up.
    pub(crate) fn keep_on_demand(&mut self) {
        let (None, Some(at), Some(value)) = (&self.state, &self.at, &self.value) else {
            return;
        };
        let Some(store) = self.on_demand.take() else {
            return;
        };
        let mut g = self.graph.borrow_mut();
        g.store_format(&store, self.key.name(), value.name());
        g.description.add_store(&self.last, &store);
        let exit = g.exit(at);
        let kept = store.clone();
        g.edit(&exit, move |s| s.upsert(&kept));
        drop(g);
        let what = "a table kept on demand".to_owned();
        self.changes = Some(decoding_changes(self.key.clone(), value.clone(), what));
        self.at = Some(exit);
        self.state = Some(store);
    }

    /// The same table, its windows closing as given ([`KTable::closes`]).
    pub(crate) fn closing(mut self, closes: Option<(WindowEnd, i64)>) -> KTable<K, V> {
        self.closes = closes;
        self
    }

    /// The same table, its rows kept in the timestamped store `store` beside its updates.
    pub(crate) fn with_state(mut self, store: Option<String>) -> KTable<K, V> {
        self.state = store;
        self
    }

    /// A table that never gets an update: what an operation refused at build gives.
    pub(crate) fn unplaced<V2>(
        graph: Rc<RefCell<Graph>>,
        key: Arc<dyn Serde<Value = K>>,
    ) -> KTable<K, V2> {
        KTable {
            graph,
            at: None,
            updates: None,
            changes: None,
            key,
            value: None,
            last: Node::default(),
            source: None,
            state: None,
            closes: None,
            on_demand: None,
        }
    }

    /// A table whose updates are the records at `at`, read by `updates` (a join's).
    pub(crate) fn joined(
        graph: Rc<RefCell<Graph>>,
        at: Pos,
        (key, updates): (Arc<dyn Serde<Value = K>>, Updates<K, V>),
        last: Node,
    ) -> KTable<K, V> {
        KTable {
            graph,
            at: Some(at),
            updates: Some(updates),
            changes: None,
            key,
            value: None,
            last,
            source: None,
            state: None,
            closes: None,
            on_demand: None,
        }
    }

    /// Where the table's updates come out, and how they read: a table read from a topic is
    /// read there now, in a sub-topology of its own that takes the topic's deletes; with
    /// `keep`, into its store (with a changelog of its own), so its updates carry old values.
    pub(crate) fn placed(&mut self, keep: bool) -> (Pos, Updates<K, V>, Node) {
        if let (Some(at), Some(updates)) = (&self.at, &self.updates) {
            return (at.clone(), updates.clone(), self.last.clone());
        }
        let mut g = self.graph.borrow_mut();
        let (at, last, what) = match &self.source {
            Some(src) => {
                let at = g.start_named(&src.topic, src.source_node.clone());
                let source = g.description.last(at.sub);
                let stores: &[&str] = if keep { &[src.store.as_str()] } else { &[] };
                let table =
                    g.description
                        .add_processor(at.sub, src.table_node.clone(), &[&source], stores);
                g.description.rank_subtopology(at.sub, src.rank);
                g.edit_sources(at.sub, Stream::with_deletes);
                if keep {
                    let store = src.store.clone();
                    g.edit(&at, move |s| s.upsert(&store));
                }
                (at, table, src.topic.clone())
            }
            None => {
                let at = g.start("");
                let last = g.description.last(at.sub);
                (at, last, "a table".to_owned())
            }
        };
        let updates = match &self.value {
            Some(value) => decoding_updates(self.key.clone(), value.clone(), what.clone()),
            None => Arc::new(|_: &[u8], _: Option<&[u8]>| Vec::new()) as Updates<K, V>,
        };
        if let (true, Some(value)) = (keep && self.source.is_some(), &self.value) {
            self.changes = Some(decoding_changes(self.key.clone(), value.clone(), what));
        }
        self.at = Some(at.clone());
        self.updates = Some(updates.clone());
        self.last = last.clone();
        (at, updates, last)
    }

    /// A table of each update of this one through `step` (which keeps the key), named
    /// `<kind><number>` as Kafka numbers it.
    fn then<V2: Send + Sync + 'static>(
        self,
        kind: &str,
        value: Option<Arc<dyn Serde<Value = V2>>>,
        step: impl Fn(&K, Option<V>) -> Option<V2> + Send + Sync + 'static,
    ) -> KTable<K, V2> {
        self.then_kept(kind, value, None, step)
    }

    /// As [`KTable::then`], the result kept in `store` when given.
    fn then_kept<V2: Send + Sync + 'static>(
        mut self,
        kind: &str,
        value: Option<Arc<dyn Serde<Value = V2>>>,
        store: Option<String>,
        step: impl Fn(&K, Option<V>) -> Option<V2> + Send + Sync + 'static,
    ) -> KTable<K, V2> {
        let (at, prev, last) = self.placed(false);
        let closes = self.closes;
        let step = Arc::new(step);
        let changes = self.changes.clone().map(|prev| -> Changes<K, V2> {
            let step = step.clone();
            Arc::new(move |k, new, old| {
                prev(k, new, old)
                    .into_iter()
                    .map(|(k, new, old)| {
                        let (new, old) = (step(&k, new), step(&k, old));
                        (k, new, old)
                    })
                    .collect()
            })
        });
        let mut g = self.graph.borrow_mut();
        let node = g.description.next_name(kind);
        let stores: Vec<&str> = store.iter().map(String::as_str).collect();
        let last = g.description.add_processor(at.sub, node, &[&last], &stores);
        drop(g);
        let table = KTable {
            graph: self.graph,
            at: Some(at),
            updates: Some(Arc::new(move |k, v| {
                prev(k, v)
                    .into_iter()
                    .map(|(k, v)| {
                        let v2 = step(&k, v);
                        (k, v2)
                    })
                    .collect()
            })),
            changes,
            key: self.key,
            value,
            last,
            source: None,
            state: None,
            closes,
            on_demand: None,
        };
        match store {
            Some(store) => table.kept_in(&store),
            None => table,
        }
    }

    /// A join's result written with `serde`, and kept in `store` when there is one (listed
    /// with the join's last node, as Kafka lists a join's materialized store).
    pub(crate) fn kept_as<VS: Serde<Value = V>>(
        mut self,
        serde: VS,
        store: Option<String>,
    ) -> KTable<K, V> {
        self.value = Some(Arc::new(serde));
        let Some(store) = store else {
            return self;
        };
        if self.at.is_some() {
            self.graph
                .borrow_mut()
                .description
                .add_store(&self.last, &store);
        }
        self.kept_in(&store)
    }

    /// The same table, kept in `store` (timestamped, with its changelog): queryable, and its
    /// updates carry the values they replace. It needs the values' serde.
    pub(crate) fn kept_in(self, store: &str) -> KTable<K, V> {
        let (Some(at), Some(updates), Some(value)) = (self.at, self.updates, self.value) else {
            let mut g = self.graph.borrow_mut();
            g.errors.push(format!(
                "store {store:?}: the table's values have no serde to keep them with"
            ));
            drop(g);
            return KTable::<K, V>::unplaced(self.graph, self.key);
        };
        let mut g = self.graph.borrow_mut();
        g.store_format(store, self.key.name(), value.name());
        let encode = encoding(
            values_of(updates.clone()),
            Some(updates),
            self.key.clone(),
            value.clone(),
        );
        let exit = g.exit(&at);
        let kept = store.to_owned();
        g.edit(&exit, move |s| {
            s.flat_map_records(encode, RecordEffect::KeepsUpdates)
                .upsert(&kept)
        });
        drop(g);
        KTable::of_records(
            self.graph,
            exit,
            (self.key, value),
            self.last,
            "a kept table",
        )
        .with_state(Some(store.to_owned()))
        .closing(self.closes)
    }

    /// As [`KTable::filter`], the result kept in a store when `materialized` names one
    /// (Kafka's `filter(predicate, Materialized)`): queryable by that name.
    pub fn filter_as(
        self,
        f: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        materialized: Materialized,
    ) -> KTable<K, V> {
        // Kafka takes the store's number (named or not) before the filter's.
        let store = materialized.name_or_burn(&mut self.graph.borrow_mut().description);
        let value = self.value.clone();
        self.then_kept("KTABLE-FILTER-", value, store, move |k, v| {
            v.filter(|v| f(k, v))
        })
    }

    /// As [`KTable::map_values`], the result written with `serde` and kept in a store when
    /// `materialized` names one (Kafka's `mapValues(mapper, Materialized)`).
    pub fn map_values_as<VS: Serde>(
        self,
        f: impl Fn(&V) -> VS::Value + Send + Sync + 'static,
        serde: VS,
        materialized: Materialized,
    ) -> KTable<K, VS::Value> {
        let store = materialized.name_or_burn(&mut self.graph.borrow_mut().description);
        let value: Arc<dyn Serde<Value = VS::Value>> = Arc::new(serde);
        self.then_kept("KTABLE-MAPVALUES-", Some(value), store, move |_, v| {
            v.map(|v| f(&v))
        })
    }

    /// The table of the keys whose value satisfies `f`: an update that does not is a delete
    /// of its key (Kafka Streams' `KTable.filter`, whose rejected updates go on as tombstones).
    ///
    /// ```
    /// use baton_streams::serdes::{Long, Str};
    /// use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
    ///
    /// let builder = StreamsBuilder::new("busy-users");
    /// builder
    ///     .stream("clicks", Consumed::with(Str, Str))
    ///     .group_by_key(Grouped::with(Str, Str))
    ///     .count(Materialized::named("clicks-per-user"))
    ///     .filter(|_, clicks: &i64| *clicks >= 3)
    ///     .to_stream()
    ///     .to("busy-users", Produced::with(Str, Long));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn filter(self, f: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KTable<K, V> {
        let value = self.value.clone();
        self.then("KTABLE-FILTER-", value, move |k, v| v.filter(|v| f(k, v)))
    }

    /// The table of the keys whose value does not satisfy `f` (Kafka's `filterNot`).
    pub fn filter_not(self, f: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> KTable<K, V> {
        let value = self.value.clone();
        self.then("KTABLE-FILTER-", value, move |k, v| v.filter(|v| !f(k, v)))
    }

    /// The table of `f(value)` for each key (Kafka's `mapValues`); a delete stays a delete.
    pub fn map_values<V2: Send + Sync + 'static>(
        self,
        f: impl Fn(&V) -> V2 + Send + Sync + 'static,
    ) -> KTable<K, V2> {
        self.then("KTABLE-MAPVALUES-", None, move |_, v| v.map(|v| f(&v)))
    }

    /// The table's updates as a stream: every update of a key, in order; a delete (a
    /// filter's rejection, or a record without a value in a table's topic) goes on as one and
    /// reaches a sink as a tombstone.
    pub fn to_stream(mut self) -> KStream<K, V> {
        let (at, updates, from) = self.placed(false);
        let mut g = self.graph.borrow_mut();
        let node = g.description.next_name("KTABLE-TOSTREAM-");
        let last = g.description.add_processor(at.sub, node, &[&from], &[]);
        drop(g);
        KStream {
            graph: self.graph,
            at,
            chain: values_of(updates.clone()),
            key_changed: false,
            updates: true,
            last,
            deletes: Some(updates),
        }
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KStream<K, V> {
    /// The stream as a table: each record sets its key's value, a delete removes it (Kafka
    /// Streams' `toTable`). `key` and `value` are the table's serdes (Kafka's
    /// `Materialized.with`). With [`Materialized::named`], the table is kept in that store
    /// (timestamped, with its changelog) and can be queried; otherwise it is not kept, as
    /// Kafka keeps it only when named. After a key change the stream first goes through
    /// `<app id>-KSTREAM-TOTABLE-<number>-repartition`, as Kafka's.
    ///
    /// ```
    /// use baton_streams::serdes::Str;
    /// use baton_streams::{Consumed, Materialized, Produced, StreamsBuilder};
    ///
    /// let builder = StreamsBuilder::new("profiles");
    /// builder
    ///     .stream("profile-updates", Consumed::with(Str, Str))
    ///     .to_table(Str, Str, Materialized::named("profiles"))
    ///     .map_values(|p: &String| p.len() as i64)
    ///     .to_stream()
    ///     .to("profile-sizes", Produced::with(Str, baton_streams::serdes::Long));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn to_table<KS, VS>(self, key: KS, value: VS, materialized: Materialized) -> KTable<K, V>
    where
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
    {
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        // Kafka's order: the operation's name, then the store's (burnt when not named).
        let node = g.description.next_name("KSTREAM-TOTABLE-");
        // Unnamed, Kafka takes the store's number all the same, and makes the store under
        // that name when an operation needs it.
        let (store, on_demand) = match materialized.name {
            Some(name) => (Some(name), None),
            None => {
                let name = g.description.next_name("KSTREAM-TOTABLE-STATE-STORE-");
                (None, Some(name.as_str().to_owned()))
            }
        };
        if let Some(store) = &store {
            g.store_format(store, key.name(), value.name());
        }
        let (key, value) = (Arc::new(key), Arc::new(value));
        let encode = encoding(self.chain, self.deletes, key.clone(), value.clone());
        let (at, last) = if self.key_changed {
            let (at, last) = g.repartition(node.as_str(), &self.at, &self.last, encode);
            g.edit_sources(at.sub, Stream::with_deletes);
            (at, last)
        } else {
            let at = g.exit(&self.at);
            g.edit(&at, move |s| {
                s.flat_map_records(encode, RecordEffect::KeepsUpdates)
            });
            (at, self.last)
        };
        let stores: Vec<&str> = store.iter().map(String::as_str).collect();
        let last = g.description.add_processor(at.sub, node, &[&last], &stores);
        if let Some(store) = &store {
            let store = store.clone();
            g.edit(&at, move |s| s.upsert(&store));
        }
        drop(g);
        let mut table = KTable::of_records(graph, at, (key, value), last, "a table");
        if store.is_none() {
            // Not kept: its updates carry no old values until it is.
            table.changes = None;
        }
        table.on_demand = on_demand;
        table.with_state(store)
    }
}

/// A table's updates as the records with a value they give (what steps over values take).
fn values_of<K: 'static, V: 'static>(updates: Updates<K, V>) -> crate::dsl::Chain<K, V> {
    Arc::new(move |k, v| {
        updates(k, Some(v))
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?)))
            .collect()
    })
}
