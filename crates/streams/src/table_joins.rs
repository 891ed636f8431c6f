//! Table-table joins (Kafka Streams' `KTable.join(KTable, ValueJoiner)` and `leftJoin`): both
//! tables are kept in their stores in one sub-topology, and an update of either looks the
//! other's row of its key up; the result is a table whose updates (and deletes) go on as any
//! table's.

use std::sync::Arc;

use baton_runtime::record::undecodable;
use baton_runtime::topology::{split_row_pair, Place, Root, RowPair, TableJoinKind};

use crate::dsl::{Pos, Updates};
use crate::serdes::read_or_fail;
use crate::table::KTable;

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KTable<K, V> {
    /// The table of `joiner(value, other value)` for each key both tables have (Kafka Streams'
    /// `KTable.join`): an update of either side joins the other's row; a key either side
    /// deletes is deleted. Both must be tables read with [`crate::StreamsBuilder::table`]
    /// (kept in their stores, with changelogs of their own, as Kafka keeps a joined table), of
    /// co-partitioned topics (refused at start otherwise).
    ///
    /// ```
    /// use baton_streams::serdes::Str;
    /// use baton_streams::{Consumed, Materialized, Produced, StreamsBuilder};
    ///
    /// let builder = StreamsBuilder::new("profiles");
    /// let names = builder.table("names", Consumed::with(Str, Str), Materialized::named("names"));
    /// let cities = builder.table("cities", Consumed::with(Str, Str), Materialized::named("cities"));
    /// names
    ///     .join(cities, |name: &String, city: &String| format!("{name} in {city}"))
    ///     .to_stream()
    ///     .to("profiles", Produced::with(Str, Str));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn join<VO, VR>(
        self,
        other: KTable<K, VO>,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR>
    where
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
    {
        self.join_table(other, TableJoinKind::Inner, move |v, o| {
            Some(joiner(v?, o?))
        })
    }

    /// The table of `joiner(value, other value or None)` for each key of this table (Kafka
    /// Streams' `KTable.leftJoin`): a row of this table joins the other's row of its key, if
    /// any; a row of the other table with no row here gives nothing.
    pub fn left_join<VO, VR>(
        self,
        other: KTable<K, VO>,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR>
    where
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
    {
        self.join_table(other, TableJoinKind::Left, move |v, o| Some(joiner(v?, o)))
    }

    /// The table of `joiner(value or None, other value or None)` for each key either table
    /// has (Kafka Streams' `KTable.outerJoin`): a key deleted on one side keeps the other's
    /// row; deleted on both, it is deleted.
    pub fn outer_join<VO, VR>(
        self,
        other: KTable<K, VO>,
        joiner: impl Fn(Option<&V>, Option<&VO>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR>
    where
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
    {
        self.join_table(other, TableJoinKind::Outer, move |v, o| Some(joiner(v, o)))
    }

    fn join_table<VO, VR>(
        mut self,
        mut other: KTable<K, VO>,
        kind: TableJoinKind,
        joiner: impl Fn(Option<&V>, Option<&VO>) -> Option<VR> + Send + Sync + 'static,
    ) -> KTable<K, VR>
    where
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
    {
        let unused =
            |t: &Option<crate::table::TableSource>| t.as_ref().is_some_and(|s| !s.placed.get());
        let both_unread = self.at.is_none()
            && other.at.is_none()
            && unused(&self.source)
            && unused(&other.source);
        let (Some(src), Some(other_src), true) = (&self.source, &other.source, both_unread) else {
            let graph = self.graph.clone();
            graph.borrow_mut().errors.push(
                "join: only two tables read with StreamsBuilder::table, neither used yet, can \
                 be joined with each other yet"
                    .into(),
            );
            return KTable::<K, V>::unplaced(graph, self.key);
        };
        let (left_store, right_store) = (src.store.clone(), other_src.store.clone());
        let right_topic = other_src.topic.clone();
        other_src.placed.set(true);
        src.placed.set(true);
        let (at, _, left_last) = self.placed(true);
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        let sub = at.sub;
        // The other table is read in the same sub-topology, into its store.
        let route = Pos {
            sub,
            place: Place {
                root: Root::Source(right_topic.clone()),
                path: Vec::new(),
            },
        };
        let stream = std::mem::replace(
            &mut g.streams[sub],
            baton_runtime::topology::Stream::branch(),
        );
        g.streams[sub] = stream.route(&right_topic);
        let store = right_store.clone();
        g.edit(&route, move |s| s.upsert(&store));
        let other_src = other.source.take().expect("checked above");
        let stores = (left_store.as_str(), right_store.as_str());
        let last = describe_table_join(
            &mut g.description,
            sub,
            (&left_last, &other_src, &right_topic),
            stores,
        );
        let junction = g.junction(sub);
        for (from, theirs, left) in [(&at, &right_store, true), (&route, &left_store, false)] {
            let exit = g.exit(from);
            let theirs = theirs.clone();
            g.edit(&exit, move |s| {
                s.table_join(&theirs, left, kind).to_junction(junction)
            });
        }
        drop(g);
        let updates = joined_rows(
            self.key.clone(),
            (self.value.clone(), other.value.clone()),
            joiner,
        );
        KTable::joined(
            graph,
            Pos {
                sub,
                place: Place {
                    root: Root::Junction(junction),
                    path: Vec::new(),
                },
            },
            (self.key, updates),
            last,
        )
    }
}

/// The join's nodes in sub-topology `sub`: the other table's source and table source (its
/// store), then, in Kafka's order (`KTableImpl.doJoin`), the merge and both joins. The merge.
fn describe_table_join(
    d: &mut crate::describe::Description,
    sub: usize,
    (left_last, other, topic): (&crate::describe::Node, &crate::table::TableSource, &str),
    (left_store, right_store): (&str, &str),
) -> crate::describe::Node {
    let right_source = d.add_source(sub, other.source_node.clone(), topic);
    let right_last = d.add_processor(
        sub,
        other.table_node.clone(),
        &[&right_source],
        &[right_store],
    );
    d.rank_subtopology(sub, other.rank);
    let merge = d.next_name("KTABLE-MERGE-");
    let this_join = d.next_name("KTABLE-JOINTHIS-");
    let other_join = d.next_name("KTABLE-JOINOTHER-");
    let this_j = d.add_processor(sub, this_join, &[left_last], &[right_store]);
    let other_j = d.add_processor(sub, other_join, &[&right_last], &[left_store]);
    d.add_processor(sub, merge, &[&this_j, &other_j], &[])
}

type ValueSerde<V> = Option<Arc<dyn crate::serdes::Serde<Value = V>>>;

/// A joined table value read with its table's serde.
fn read_value<T: Send + Sync + 'static>(serde: &ValueSerde<T>, bytes: &[u8]) -> T {
    let serde = serde
        .as_ref()
        .expect("a table read from a topic has its serde");
    read_or_fail(&**serde, bytes, "joined table value")
}

/// The joined table's updates: a delete, or the pair read with both tables' serdes and
/// joined.
fn joined_rows<K, V, VO, VR>(
    key: Arc<dyn crate::serdes::Serde<Value = K>>,
    (value, other): (ValueSerde<V>, ValueSerde<VO>),
    joiner: impl Fn(Option<&V>, Option<&VO>) -> Option<VR> + Send + Sync + 'static,
) -> Updates<K, VR>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
    VO: Send + Sync + 'static,
    VR: Send + Sync + 'static,
{
    Arc::new(move |k, frame| {
        let k = read_or_fail(&*key, k, "joined table key");
        let Some(frame) = frame else {
            return vec![(k, None)];
        };
        let Some(RowPair { left, right }) = split_row_pair(frame) else {
            undecodable("join: a value that is not a joined pair".into())
        };
        let v = left.map(|v| read_value(&value, v));
        let o = right.map(|o| read_value(&other, o));
        vec![(k, joiner(v.as_ref(), o.as_ref()))]
    })
}
