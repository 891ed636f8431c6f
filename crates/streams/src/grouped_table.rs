//! A table regrouped by a new key ([`KTable::group_by`]) and aggregated again, as Kafka
//! Streams' `KGroupedTable`: each update of the table sends its old value, to be subtracted,
//! and its new value, to be added, through a repartition topic (`Change` records in Kafka's
//! layout, [`baton_runtime::topology::change_frame`]) to the aggregation's store.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use baton_runtime::record::undecodable;
use baton_runtime::topology::{change_frame, split_change_frame, Change, Records};

use crate::describe::Node;
use crate::dsl::{Graph, Grouped, Materialized, Pos};
use crate::serdes::read_or_fail;
use crate::serdes::{Long, Serde};
use crate::table::KTable;

/// The bytes of a table update `(key, new value, old value)` as the grouping's records.
type Regroup = Arc<dyn Fn(&[u8], Option<&[u8]>, Option<&[u8]>) -> Records + Send + Sync>;

/// A table grouped by a new key, ready to be aggregated with an adder and a subtractor.
pub struct KGroupedTable<K, V, KS, VS> {
    graph: Rc<RefCell<Graph>>,
    /// Where the table's updates come out, with their old values; `None`: the table keeps no
    /// values (the build is refused).
    at: Option<Pos>,
    select: Node,
    regroup: Regroup,
    key: Arc<KS>,
    value: Arc<VS>,
    name: Option<String>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KTable<K, V> {
    /// Groups the table by `f(key, value)`, a new key and value for each of its rows, to be
    /// aggregated with [`KGroupedTable::count`], `reduce` or `aggregate` (Kafka Streams'
    /// `KTable.groupBy`). Each update of a row subtracts its old pair from the old key's
    /// aggregate and adds its new pair to the new key's: the repartition topic
    /// (`<app id>-<name or store>-repartition`) carries both, as Kafka's `Change`.
    ///
    /// ```
    /// use baton_streams::serdes::{Long, Str};
    /// use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
    ///
    /// // Users per city, from each user's latest city.
    /// let builder = StreamsBuilder::new("cities");
    /// builder
    ///     .stream("user-cities", Consumed::with(Str, Str))
    ///     .to_table(Str, Str, Materialized::named("user-city"))
    ///     .group_by(|_, city: &String| (city.clone(), 1i64), Grouped::with(Str, Long))
    ///     .count(Materialized::named("users-per-city"))
    ///     .to_stream()
    ///     .to("users-per-city", Produced::with(Str, Long));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn group_by<K2, V2, KS, VS>(
        mut self,
        f: impl Fn(&K, &V) -> (K2, V2) + Send + Sync + 'static,
        grouped: Grouped<KS, VS>,
    ) -> KGroupedTable<K2, V2, KS, VS>
    where
        K2: Send + Sync + 'static,
        V2: Send + Sync + 'static,
        KS: Serde<Value = K2>,
        VS: Serde<Value = V2>,
    {
        self.keep_on_demand();
        let (at, _, last) = self.placed(true);
        let mut g = self.graph.borrow_mut();
        // Kafka names the selection after the grouping, when it has a name.
        let select = match &grouped.name {
            Some(n) => Node::named(n),
            None => g.description.next_name("KTABLE-SELECT-"),
        };
        let select = g.description.add_processor(at.sub, select, &[&last], &[]);
        let at = match &self.changes {
            Some(_) => Some(at),
            None => {
                g.errors.push(
                    "group_by: the table keeps no values to subtract when a row changes; keep \
                     it in a store (to_table with Materialized::named)"
                        .into(),
                );
                None
            }
        };
        drop(g);
        let (key, value) = (Arc::new(grouped.key), Arc::new(grouped.value));
        let regroup = regrouping(self.changes.clone(), f, key.clone(), value.clone());
        KGroupedTable {
            graph: self.graph,
            at,
            select,
            regroup,
            key,
            value,
            name: grouped.name,
            types: PhantomData,
        }
    }
}

/// Kafka's `KTableRepartitionMap`: an update's old pair goes on with its old value only, then
/// its new pair with its new value only; when both pairs have one key, one record with both.
fn regrouping<K, V, K2, V2, KS, VS>(
    changes: Option<crate::table::Changes<K, V>>,
    f: impl Fn(&K, &V) -> (K2, V2) + Send + Sync + 'static,
    key: Arc<KS>,
    value: Arc<VS>,
) -> Regroup
where
    K: 'static,
    V: 'static,
    KS: Serde<Value = K2>,
    VS: Serde<Value = V2>,
{
    let Some(changes) = changes else {
        return Arc::new(|_, _, _| Vec::new());
    };
    Arc::new(move |k, new, old| {
        let mut out = Vec::new();
        for (k, new, old) in changes(k, new, old) {
            let pair = |v: &V| {
                let (k2, v2) = f(&k, v);
                (key.serialize(&k2), value.serialize(&v2))
            };
            let (new, old) = (new.as_ref().map(pair), old.as_ref().map(pair));
            match (new, old) {
                (Some((nk, nv)), Some((ok, ov))) if nk == ok => {
                    out.extend(change_frame(Some(&nv), Some(&ov)).map(|c| (nk, Some(c))));
                }
                (new, old) => {
                    if let Some((ok, ov)) = old {
                        out.extend(change_frame(None, Some(&ov)).map(|c| (ok, Some(c))));
                    }
                    if let Some((nk, nv)) = new {
                        out.extend(change_frame(Some(&nv), None).map(|c| (nk, Some(c))));
                    }
                }
            }
        }
        out
    })
}

impl<K, V, KS, VS> KGroupedTable<K, V, KS, VS>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
    KS: Serde<Value = K>,
    VS: Serde<Value = V>,
{
    /// Counts each key's rows: a row added counts one, a row that leaves the key (it changed
    /// key, or was deleted) one less (Kafka's `KGroupedTable.count`; values 8-byte Longs).
    pub fn count(self, materialized: Materialized) -> KTable<K, i64> {
        self.fold_into(
            materialized,
            "KTABLE-AGGREGATE-",
            Long,
            |_, agg, _| agg.unwrap_or(0) + 1,
            |_, agg, _| agg - 1,
        )
    }

    /// Combines each key's values with `adder(aggregate, value)` (the first value is the
    /// start) and takes a value back out with `subtractor(aggregate, value)`.
    pub fn reduce(
        self,
        adder: impl Fn(V, V) -> V + Send + Sync + 'static,
        subtractor: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized,
    ) -> KTable<K, V>
    where
        VS: Clone,
    {
        let serde = (*self.value).clone();
        self.fold_into(
            materialized,
            "KTABLE-REDUCE-",
            serde,
            move |_, agg, v| match agg {
                Some(agg) => adder(agg, v),
                None => v,
            },
            move |_, agg, v| subtractor(agg, v),
        )
    }

    /// Folds each key's values into an aggregate stored with `serde`: `init()` to start,
    /// `adder(key, value, aggregate)` for a row added, `subtractor(key, value, aggregate)`
    /// for a row that leaves the key.
    pub fn aggregate<AS: Serde>(
        self,
        init: impl Fn() -> AS::Value + Send + Sync + 'static,
        adder: impl Fn(&K, V, AS::Value) -> AS::Value + Send + Sync + 'static,
        subtractor: impl Fn(&K, V, AS::Value) -> AS::Value + Send + Sync + 'static,
        serde: AS,
        materialized: Materialized,
    ) -> KTable<K, AS::Value> {
        self.fold_into(
            materialized,
            "KTABLE-AGGREGATE-",
            serde,
            move |k, agg, v| adder(k, v, agg.unwrap_or_else(&init)),
            move |k, agg, v| subtractor(k, v, agg),
        )
    }

    /// The grouping's repartition, then its store step: Kafka's `KTableAggregate` (and
    /// `KTableReduce`): the old value is taken out of the key's aggregate if it has one, then
    /// the new value is added; with neither, the key is removed.
    fn fold_into<AS: Serde>(
        self,
        materialized: Materialized,
        kind: &str,
        serde: AS,
        add: impl Fn(&K, Option<AS::Value>, V) -> AS::Value + Send + Sync + 'static,
        subtract: impl Fn(&K, AS::Value, V) -> AS::Value + Send + Sync + 'static,
    ) -> KTable<K, AS::Value> {
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        // Kafka's order (`KGroupedTableImpl.doAggregate`): the store, the sink, the source,
        // then the aggregation.
        let store = materialized.name.unwrap_or_else(|| {
            let name = g.description.next_name("KTABLE-AGGREGATE-STATE-STORE-");
            name.as_str().to_owned()
        });
        let sink = g.description.next_name("KSTREAM-SINK-");
        let source = g.description.next_name("KSTREAM-SOURCE-");
        let node = g.description.next_name(kind);
        let topic = g.topic(self.name.as_deref().unwrap_or(&store));
        g.store_format(&store, self.key.name(), serde.name());
        let at = match &self.at {
            Some(at) => g.exit(at),
            None => g.start(""),
        };
        g.description.add_sink(at.sub, sink, &topic, &self.select);
        let (regroup, to) = (self.regroup, topic.clone());
        g.edit(&at, move |s| {
            s.regroup(move |k, n, o| regroup(k, n, o)).to(&to)
        });
        g.add_repartition(&topic);
        let start = g.start_named(&topic, source);
        let from = g.description.last(start.sub);
        let last = g
            .description
            .add_processor(start.sub, node, &[&from], &[store.as_str()]);
        let at = g.exit(&start);
        let (key, value, agg) = (self.key.clone(), self.value.clone(), Arc::new(serde));
        let read = agg.clone();
        let fold = move |current: Option<&[u8]>, k: &[u8], frame: &[u8]| {
            let Change { new, old } = split_change_frame(frame)
                .unwrap_or_else(|| undecodable("a grouped table's change: not one".into()));
            let k = read_or_fail(&*key, k, "grouped key");
            let value = |v: &[u8]| read_or_fail(&*value, v, "grouped value");
            let current = current.map(|c| read_or_fail(&*read, c, "store value"));
            let kept = match (old, current) {
                (Some(old), Some(current)) => Some(subtract(&k, current, value(old))),
                (_, current) => current,
            };
            let next = match new {
                Some(new) => Some(add(&k, kept, value(new))),
                None => kept,
            };
            next.map(|a| read.serialize(&a))
        };
        let state = Some(store.clone());
        g.edit(&at, move |s| s.aggregate_or_remove(&store, fold));
        drop(g);
        let table_key: Arc<dyn Serde<Value = K>> = self.key;
        KTable::of_records(graph, at, (table_key, agg), last, "a grouped table").with_state(state)
    }
}
