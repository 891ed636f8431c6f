//! Table-table joins (Kafka Streams' `KTable.join(KTable, ValueJoiner)` and `leftJoin`): both
//! tables are kept in their stores in one sub-topology, and an update of either looks the
//! other's row of its key up; the result is a table whose updates (and deletes) go on as any
//! table's.

use std::sync::Arc;

use baton_runtime::record::undecodable;
use baton_runtime::topology::{split_row_pair, Place, Root, RowPair, TableJoinKind};

use crate::describe::Node;
use crate::dsl::Materialized;
use crate::dsl::{Pos, Updates};
use crate::serdes::{read_or_fail, Serde};
use crate::table::{KTable, TableSource};

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

    /// As [`KTable::join`], the result written with `serde` and, when `materialized` names a
    /// store, kept there (Kafka's `join(other, joiner, Materialized)`): queryable by that name,
    /// its updates carrying the values they replace. Unnamed, the store's number is taken as
    /// Kafka takes it, and nothing is kept.
    pub fn join_as<VO, VS>(
        self,
        other: KTable<K, VO>,
        joiner: impl Fn(&V, &VO) -> VS::Value + Send + Sync + 'static,
        serde: VS,
        materialized: Materialized,
    ) -> KTable<K, VS::Value>
    where
        VO: Send + Sync + 'static,
        VS: Serde,
    {
        let joiner = move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o?));
        self.join_kept_as(other, (TableJoinKind::Inner, joiner), serde, materialized)
    }

    /// As [`KTable::left_join`], kept as [`KTable::join_as`] keeps it.
    pub fn left_join_as<VO, VS>(
        self,
        other: KTable<K, VO>,
        joiner: impl Fn(&V, Option<&VO>) -> VS::Value + Send + Sync + 'static,
        serde: VS,
        materialized: Materialized,
    ) -> KTable<K, VS::Value>
    where
        VO: Send + Sync + 'static,
        VS: Serde,
    {
        let joiner = move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o));
        self.join_kept_as(other, (TableJoinKind::Left, joiner), serde, materialized)
    }

    /// As [`KTable::outer_join`], kept as [`KTable::join_as`] keeps it.
    pub fn outer_join_as<VO, VS>(
        self,
        other: KTable<K, VO>,
        joiner: impl Fn(Option<&V>, Option<&VO>) -> VS::Value + Send + Sync + 'static,
        serde: VS,
        materialized: Materialized,
    ) -> KTable<K, VS::Value>
    where
        VO: Send + Sync + 'static,
        VS: Serde,
    {
        let joiner = move |v: Option<&V>, o: Option<&VO>| Some(joiner(v, o));
        self.join_kept_as(other, (TableJoinKind::Outer, joiner), serde, materialized)
    }

    fn join_kept_as<VO, VS>(
        self,
        other: KTable<K, VO>,
        (kind, joiner): (
            TableJoinKind,
            impl Fn(Option<&V>, Option<&VO>) -> Option<VS::Value> + Send + Sync + 'static,
        ),
        serde: VS,
        materialized: Materialized,
    ) -> KTable<K, VS::Value>
    where
        VO: Send + Sync + 'static,
        VS: Serde,
    {
        // Kafka's order: the store's number (named or not), then the join's.
        let store = materialized.name_or_burn(&mut self.graph.borrow_mut().description);
        self.join_table(other, kind, joiner).kept_as(serde, store)
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
        let graph = self.graph.clone();
        self.keep_on_demand();
        other.keep_on_demand();
        let placed = match (side_of(&self), side_of(&other)) {
            (Some(Side::Source), Some(Side::Source)) => Some(join_sources(&mut self, &other, kind)),
            (Some(left), Some(right)) => join_kept(&self, &other, (left, right), kind),
            _ => None,
        };
        let Some((at, last)) = placed else {
            graph.borrow_mut().errors.push(
                "join: a table joins another read with StreamsBuilder::table and not used yet, \
                 or one kept in a store (an aggregation's, a to_table's, a table operation's with \
                 a named Materialized) in the same sub-topology; these are neither"
                    .into(),
            );
            return KTable::<K, V>::unplaced(graph, self.key);
        };
        let updates = joined_rows(
            self.key.clone(),
            (self.value.clone(), other.value.clone()),
            joiner,
        );
        KTable::joined(graph, at, (self.key, updates), last)
    }
}

/// What a table is to a join: a table read from a topic and not used yet, or one whose rows
/// are kept in a timestamped store beside its updates.
pub(crate) enum Side {
    Source,
    Kept { store: String, at: Pos, last: Node },
}

pub(crate) fn side_of<K, V>(t: &KTable<K, V>) -> Option<Side> {
    match (&t.source, &t.state, &t.at) {
        (Some(src), _, None) if !src.placed.get() => Some(Side::Source),
        (_, Some(store), Some(at)) => Some(Side::Kept {
            store: store.clone(),
            at: at.clone(),
            last: t.last.clone(),
        }),
        _ => None,
    }
}

/// Two tables read from their topics: one sub-topology reads both into their stores.
fn join_sources<K, V, VO>(
    left: &mut KTable<K, V>,
    right: &KTable<K, VO>,
    kind: TableJoinKind,
) -> (Pos, Node)
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
    VO: Send + Sync + 'static,
{
    let (src, other_src) = (
        left.source.as_ref().expect("a source side"),
        right.source.as_ref().expect("a source side"),
    );
    let (left_store, right_store) = (src.store.clone(), other_src.store.clone());
    other_src.placed.set(true);
    src.placed.set(true);
    let (at, _, left_last) = left.placed(true);
    let mut g = left.graph.borrow_mut();
    let route = route_into(&mut g, at.sub, other_src);
    let right_last = describe_source(&mut g.description, at.sub, other_src);
    let stores = (left_store.as_str(), right_store.as_str());
    let last = describe_joins(
        &mut g.description,
        at.sub,
        (&left_last, &right_last),
        stores,
    );
    let junction = join_into(&mut g, (&at, &left_store), (&route, &right_store), kind);
    (junction, last)
}

/// A table kept in a store joined with another kept in a store (their sub-topologies merged
/// into one), or with a table read from its topic, which that sub-topology then reads too.
fn join_kept<K, V, VO>(
    left: &KTable<K, V>,
    right: &KTable<K, VO>,
    sides: (Side, Side),
    kind: TableJoinKind,
) -> Option<(Pos, Node)> {
    let mut g = left.graph.borrow_mut();
    let (l, r) = match sides {
        // Kept in two sub-topologies: one sub-topology reads both, as Kafka merges them.
        (
            Side::Kept { store, at, last },
            Side::Kept {
                store: rs,
                at: ra,
                last: rl,
            },
        ) if g.merge_subs(ra.sub, at.sub) => {
            let (at, ra) = (g.resolve(&at), g.resolve(&ra));
            ((store, at, last), (rs, ra, rl))
        }
        (Side::Kept { store, at, last }, Side::Source) => {
            let src = right.source.as_ref()?;
            src.placed.set(true);
            let route = route_into(&mut g, at.sub, src);
            let right_last = describe_source(&mut g.description, at.sub, src);
            ((store, at, last), (src.store.clone(), route, right_last))
        }
        (Side::Source, Side::Kept { store, at, last }) => {
            let src = left.source.as_ref()?;
            src.placed.set(true);
            let route = route_into(&mut g, at.sub, src);
            let left_last = describe_source(&mut g.description, at.sub, src);
            ((src.store.clone(), route, left_last), (store, at, last))
        }
        _ => return None,
    };
    let sub = l.1.sub;
    let stores = (l.0.as_str(), r.0.as_str());
    let last = describe_joins(&mut g.description, sub, (&l.2, &r.2), stores);
    let junction = join_into(&mut g, (&l.1, &l.0), (&r.1, &r.0), kind);
    Some((junction, last))
}

/// Sub-topology `sub` reads `src`'s topic too, into its store: where its records go.
fn route_into(g: &mut crate::dsl::Graph, sub: usize, src: &TableSource) -> Pos {
    let sub = g.resolve_sub(sub);
    let stream = std::mem::replace(
        &mut g.streams[sub],
        baton_runtime::topology::Stream::branch(),
    );
    g.streams[sub] = stream.route_table(&src.topic);
    let route = Pos {
        sub,
        place: Place {
            root: Root::Source(src.topic.clone()),
            path: Vec::new(),
        },
    };
    let store = src.store.clone();
    g.edit(&route, move |s| s.upsert(&store));
    route
}

/// Each side's updates look up the other side's store, both into one junction: where the
/// joined table's updates come out.
fn join_into(
    g: &mut crate::dsl::Graph,
    (left, left_store): (&Pos, &str),
    (right, right_store): (&Pos, &str),
    kind: TableJoinKind,
) -> Pos {
    let (left, right) = (&g.resolve(left), &g.resolve(right));
    let sub = left.sub;
    let junction = g.junction(sub);
    for (from, theirs, is_left) in [(left, right_store, true), (right, left_store, false)] {
        let exit = g.exit(from);
        let theirs = theirs.to_owned();
        g.edit(&exit, move |s| {
            s.table_join(&theirs, is_left, kind).to_junction(junction)
        });
    }
    Pos {
        sub,
        place: Place {
            root: Root::Junction(junction),
            path: Vec::new(),
        },
    }
}

/// A table read from its topic in sub-topology `sub`: its source and table source (its
/// store); the table source.
pub(crate) fn describe_source(
    d: &mut crate::describe::Description,
    sub: usize,
    src: &TableSource,
) -> Node {
    let source = d.add_source(sub, src.source_node.clone(), &src.topic);
    let last = d.add_processor(sub, src.table_node.clone(), &[&source], &[&src.store]);
    d.rank_subtopology(sub, src.rank);
    last
}

/// The join's nodes in sub-topology `sub`, in Kafka's order (`KTableImpl.doJoin`): the merge
/// and both joins. The merge.
fn describe_joins(
    d: &mut crate::describe::Description,
    sub: usize,
    (left_last, right_last): (&Node, &Node),
    (left_store, right_store): (&str, &str),
) -> Node {
    let merge = d.next_name("KTABLE-MERGE-");
    let this_join = d.next_name("KTABLE-JOINTHIS-");
    let other_join = d.next_name("KTABLE-JOINOTHER-");
    let this_j = d.add_processor(sub, this_join, &[left_last], &[right_store]);
    let other_j = d.add_processor(sub, other_join, &[right_last], &[left_store]);
    d.add_processor(sub, merge, &[&this_j, &other_j], &[])
}

pub(crate) type ValueSerde<V> = Option<Arc<dyn crate::serdes::Serde<Value = V>>>;

/// A joined table value read with its table's serde.
fn read_value<T: Send + Sync + 'static>(serde: &ValueSerde<T>, bytes: &[u8]) -> T {
    let serde = serde
        .as_ref()
        .expect("a table read from a topic has its serde");
    read_or_fail(&**serde, bytes, "joined table value")
}

/// The joined table's updates: a delete, or the pair read with both tables' serdes and
/// joined.
pub(crate) fn joined_rows<K, V, VO, VR>(
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
