//! Foreign-key table joins (Kafka Streams' `KTable.join(other, foreignKeyExtractor, joiner)`
//! and `leftJoin`, KIP-213): each row of this table joins the row of the other table whose
//! key its value names. The two tables need not be co-partitioned: each row subscribes to its
//! foreign key through a registration topic read beside the other table, and is answered
//! through a response topic read beside this one ([`baton_runtime::topology::fk_join`]), both
//! made by Baton with Kafka's names, and the subscriptions kept in a store with a changelog.

use std::sync::Arc;

use baton_runtime::topology::fk_join::{ForeignKeyFn, ForeignKeyStep};

use crate::describe::{Description, Node};
use crate::dsl::{Graph, Materialized, Pos};
use crate::serdes::{read_or_fail, Serde};
use crate::table::KTable;
use crate::table_joins::{joined_rows, side_of, Side};

/// The name of a foreign-key join (Kafka's `TableJoined.as(name)`): its nodes, store and
/// topics are named after it (`<app id>-<name>-subscription-registration-topic`,
/// `<name>-subscription-store`, `<app id>-<name>-subscription-response-topic`, ...) instead of
/// numbered. Kafka's custom partitioners are not offered: Baton partitions by key bytes.
#[derive(Debug, Clone, Default)]
pub struct TableJoined {
    name: Option<String>,
}

impl TableJoined {
    /// As Kafka's `TableJoined.as(name)`.
    pub fn named(name: &str) -> Self {
        TableJoined {
            name: Some(name.to_owned()),
        }
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KTable<K, V> {
    /// The table of `joiner(value, other value)` for each row of this table whose foreign
    /// key, `foreign_key(value)`, is a key of `other` (Kafka Streams' `KTable.join(other,
    /// foreignKeyExtractor, joiner)`). A row without a foreign key (`None`) joins nothing. An
    /// update of either side updates the rows it joins; a row that leaves (deleted, or its
    /// foreign key now names no row) is deleted. Both tables must be kept in stores: read with
    /// [`crate::StreamsBuilder::table`] or kept with a named `Materialized`.
    ///
    /// ```
    /// use baton_streams::serdes::Str;
    /// use baton_streams::{Consumed, Materialized, Produced, StreamsBuilder};
    ///
    /// // Orders "<product>|<quantity>" with their product's name.
    /// let builder = StreamsBuilder::new("order-names");
    /// let orders = builder.table("orders", Consumed::with(Str, Str), Materialized::named("orders"));
    /// let products = builder.table("products", Consumed::with(Str, Str), Materialized::named("products"));
    /// orders
    ///     .join_on_foreign_key(
    ///         products,
    ///         |order: &String| order.split('|').next().map(str::to_owned),
    ///         |order: &String, name: &String| format!("{order} {name}"),
    ///     )
    ///     .to_stream()
    ///     .to("named-orders", Produced::with(Str, Str));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn join_on_foreign_key<KO, VO, VR>(
        self,
        other: KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR>
    where
        KO: Send + Sync + 'static,
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
    {
        let joiner = move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o?));
        let how = (TableJoined::default(), Materialized::generated());
        let (joined, _) = self.join_foreign((other, foreign_key, false), joiner, how);
        joined
    }

    /// The table of `joiner(value, other value or None)` for each row of this table (Kafka
    /// Streams' `KTable.leftJoin(other, foreignKeyExtractor, joiner)`): a row whose foreign
    /// key names no row of `other`, or that has none, joins `None`.
    pub fn left_join_on_foreign_key<KO, VO, VR>(
        self,
        other: KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR>
    where
        KO: Send + Sync + 'static,
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
    {
        let joiner = move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o));
        let how = (TableJoined::default(), Materialized::generated());
        let (joined, _) = self.join_foreign((other, foreign_key, true), joiner, how);
        joined
    }

    /// As [`KTable::join_on_foreign_key`], its nodes, store and topics named after `named`
    /// (Kafka's `join(other, extractor, joiner, TableJoined.as(name))`).
    pub fn join_on_foreign_key_named<KO, VO, VR>(
        self,
        other: KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
        named: TableJoined,
    ) -> KTable<K, VR>
    where
        KO: Send + Sync + 'static,
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
    {
        let joiner = move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o?));
        let how = (named, Materialized::generated());
        let (joined, _) = self.join_foreign((other, foreign_key, false), joiner, how);
        joined
    }

    /// As [`KTable::left_join_on_foreign_key`], named as
    /// [`KTable::join_on_foreign_key_named`] names it.
    pub fn left_join_on_foreign_key_named<KO, VO, VR>(
        self,
        other: KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
        named: TableJoined,
    ) -> KTable<K, VR>
    where
        KO: Send + Sync + 'static,
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
    {
        let joiner = move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o));
        let how = (named, Materialized::generated());
        let (joined, _) = self.join_foreign((other, foreign_key, true), joiner, how);
        joined
    }

    /// As [`KTable::join_on_foreign_key_named`] (`TableJoined::default()` names nothing), the
    /// result written with `serde` and, when `materialized` names a store, kept there (Kafka's
    /// `join(other, extractor, joiner, TableJoined, Materialized)`): queryable by that name,
    /// its updates carrying the values they replace.
    pub fn join_on_foreign_key_as<KO, VO, VS>(
        self,
        other: KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, &VO) -> VS::Value + Send + Sync + 'static,
        named: TableJoined,
        serde: VS,
        materialized: Materialized,
    ) -> KTable<K, VS::Value>
    where
        KO: Send + Sync + 'static,
        VO: Send + Sync + 'static,
        VS: Serde,
    {
        let joiner = move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o?));
        let how = (named, materialized);
        let (joined, store) = self.join_foreign((other, foreign_key, false), joiner, how);
        joined.kept_as(serde, store)
    }

    /// As [`KTable::left_join_on_foreign_key`], named and kept as
    /// [`KTable::join_on_foreign_key_as`] names and keeps it.
    pub fn left_join_on_foreign_key_as<KO, VO, VS>(
        self,
        other: KTable<KO, VO>,
        foreign_key: impl Fn(&V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VO>) -> VS::Value + Send + Sync + 'static,
        named: TableJoined,
        serde: VS,
        materialized: Materialized,
    ) -> KTable<K, VS::Value>
    where
        KO: Send + Sync + 'static,
        VO: Send + Sync + 'static,
        VS: Serde,
    {
        let joiner = move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o));
        let how = (named, materialized);
        let (joined, store) = self.join_foreign((other, foreign_key, true), joiner, how);
        joined.kept_as(serde, store)
    }

    /// Kafka's `KTableImpl.doJoinOnForeignKey`: the joined table, and the store `materialized`
    /// names, if it does.
    fn join_foreign<KO, VO, VR>(
        mut self,
        (mut other, foreign_key, left): (
            KTable<KO, VO>,
            impl Fn(&V) -> Option<KO> + Send + Sync + 'static,
            bool,
        ),
        joiner: impl Fn(Option<&V>, Option<&VO>) -> Option<VR> + Send + Sync + 'static,
        (named, materialized): (TableJoined, Materialized),
    ) -> (KTable<K, VR>, Option<String>)
    where
        KO: Send + Sync + 'static,
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
    {
        let graph = self.graph.clone();
        let (Some(this), Some(that), Some(value)) =
            (kept(&mut self), kept(&mut other), self.value.clone())
        else {
            graph.borrow_mut().errors.push(
                "join_on_foreign_key: both tables must be kept in stores (read with \
                 StreamsBuilder::table, or an aggregation's, a to_table's or a table \
                 operation's with a named Materialized), to look their rows up"
                    .into(),
            );
            return (KTable::<K, V>::unplaced(graph, self.key), None);
        };
        let (fk_serde, what) = (other.key.clone(), "a foreign-key join's left value");
        let extract: ForeignKeyFn = Arc::new(move |v: &[u8]| {
            let v = read_or_fail(&*value, v, what);
            foreign_key(&v).map(|fk| fk_serde.serialize(&fk))
        });
        let mut g = graph.borrow_mut();
        let names = Names::take(&mut g.description, named.name.as_deref(), materialized);
        let at = wire(&mut g, (&this, &that), &names, (extract, left));
        drop(g);
        let updates = joined_rows(
            self.key.clone(),
            (self.value.clone(), other.value.clone()),
            joiner,
        );
        let joined = KTable::joined(graph, at, (self.key, updates), names.output.clone());
        (joined, names.store)
    }
}

/// A side of the join: where its updates come out, its last node and its store.
struct Kept {
    at: Pos,
    last: Node,
    store: String,
}

/// The table placed and kept in its store, if it can be.
fn kept<K: Send + Sync + 'static, V: Send + Sync + 'static>(t: &mut KTable<K, V>) -> Option<Kept> {
    t.keep_on_demand();
    match side_of(t)? {
        Side::Source => {
            let store = t.source.as_ref()?.store.clone();
            t.source.as_ref()?.placed.set(true);
            let (at, _, last) = t.placed(true);
            Some(Kept { at, last, store })
        }
        Side::Kept { store, at, last } => Some(Kept { at, last, store }),
    }
}

/// The join's names, taken in Kafka's order (`KTableImpl.doJoinOnForeignKey`).
struct Names {
    /// The registration topic's name, without the application id.
    registration: String,
    send: Node,
    sink: Node,
    source: Node,
    subscriptions: String,
    receive: Node,
    join_foreign: Node,
    foreign_join: Node,
    /// The response topic's name, without the application id.
    response: String,
    response_sink: Node,
    response_source: Node,
    resolver: Node,
    output: Node,
    /// The result's store, if `Materialized` names one (else its number is taken).
    store: Option<String>,
}

impl Names {
    /// Kafka's `NamedInternal.suffixWithOrElseGet`: `<name><suffix>` when the join is named
    /// (no number taken), else the next numbered name of `prefix`.
    fn take(d: &mut Description, name: Option<&str>, materialized: Materialized) -> Names {
        const REGISTRATION: &str = "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-";
        const PROCESSOR: &str = "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-";
        let mut next = |suffix: &str, prefix: &str| match name {
            Some(n) => Node::named(&format!("{n}{suffix}")),
            None => d.next_name(prefix),
        };
        let registration = next("-subscription-registration", REGISTRATION);
        let send = next("-subscription-registration-processor", REGISTRATION);
        let sink = next("-subscription-registration-sink", "KTABLE-SINK-");
        let source = next("-subscription-registration-source", "KTABLE-SOURCE-");
        let subscriptions = next(
            "-subscription-store",
            "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-",
        );
        let receive = next("-subscription-receive", PROCESSOR);
        let join_foreign = next("-subscription-join-foreign", PROCESSOR);
        let foreign_join = next("-foreign-join-subscription", PROCESSOR);
        let response = next(
            "-subscription-response",
            "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-",
        );
        let response_sink = next("-subscription-response-sink", "KTABLE-SINK-");
        let response_source = next("-subscription-response-source", "KTABLE-SOURCE-");
        let resolver = next(
            "-subscription-response-resolver",
            "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-",
        );
        let output = next("-result", "KTABLE-FK-JOIN-OUTPUT-");
        let store = materialized.name_or_burn(d);
        Names {
            registration: format!("{}-topic", registration.as_str()),
            send,
            sink,
            source,
            subscriptions: subscriptions.as_str().to_owned(),
            receive,
            join_foreign,
            foreign_join,
            response: format!("{}-topic", response.as_str()),
            response_sink,
            response_source,
            resolver,
            output,
            store,
        }
    }
}

/// The join's steps and nodes: this table's updates subscribe; the other's sub-topology
/// reads the subscriptions and answers them, as do its updates; this table's sub-topology
/// reads the answers. Where the joined rows come out (a sub-topology that cannot read a topic
/// beside its own is an error at build, [`Graph::read_beside`]).
fn wire(
    g: &mut Graph,
    (this, that): (&Kept, &Kept),
    n: &Names,
    (foreign_key, left): (ForeignKeyFn, bool),
) -> Pos {
    const WHAT: &str = "join_on_foreign_key";
    let (registration, response) = (
        g.internal_topic(&n.registration),
        g.internal_topic(&n.response),
    );
    let d = &mut g.description;
    let send = d.add_processor(this.at.sub, n.send.clone(), &[&this.last], &[]);
    d.add_sink(this.at.sub, n.sink.clone(), &registration, &send);
    let exit = g.exit(&this.at);
    let to = registration.clone();
    g.edit(&exit, move |s| {
        s.foreign_key(ForeignKeyStep::Subscribe { foreign_key, left })
            .to(&to)
    });
    g.add_repartition(&registration);

    let start = g.start_named(&registration, n.source.clone());
    let at = g.read_beside(&start, that.at.sub, WHAT);
    let d = &mut g.description;
    let receive = d.add_processor(
        start.sub,
        n.receive.clone(),
        &[&n.source],
        &[&n.subscriptions],
    );
    let join_foreign = d.add_processor(
        start.sub,
        n.join_foreign.clone(),
        &[&receive],
        &[&that.store],
    );
    let exit = g.exit(&at);
    let (subscriptions, foreign, to) = (
        n.subscriptions.clone(),
        that.store.clone(),
        response.clone(),
    );
    g.edit(&exit, move |s| {
        s.foreign_key(ForeignKeyStep::Receive {
            subscriptions,
            foreign,
        })
        .to(&to)
    });

    let d = &mut g.description;
    let foreign_join = d.add_processor(
        that.at.sub,
        n.foreign_join.clone(),
        &[&that.last],
        &[&n.subscriptions],
    );
    let sink = d.add_sink(
        that.at.sub,
        n.response_sink.clone(),
        &response,
        &join_foreign,
    );
    d.add_parent(&sink, &foreign_join);
    let exit = g.exit(&that.at);
    let (subscriptions, to) = (n.subscriptions.clone(), response.clone());
    g.edit(&exit, move |s| {
        s.foreign_key(ForeignKeyStep::ForeignUpdate { subscriptions })
            .to(&to)
    });
    g.add_repartition(&response);

    let start = g.start_named(&response, n.response_source.clone());
    let at = g.read_beside(&start, this.at.sub, WHAT);
    let d = &mut g.description;
    let resolver = d.add_processor(
        start.sub,
        n.resolver.clone(),
        &[&n.response_source],
        &[&this.store],
    );
    d.add_processor(start.sub, n.output.clone(), &[&resolver], &[]);
    let exit = g.exit(&at);
    let primary = this.store.clone();
    g.edit(&exit, move |s| {
        s.foreign_key(ForeignKeyStep::Resolve { primary, left })
    });
    exit
}
