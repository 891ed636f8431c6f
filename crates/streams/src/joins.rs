//! Stream-stream joins within a time window (Kafka Streams' `KStream.join`, `leftJoin` and
//! `outerJoin` of a `KStream` with `JoinWindows` and `StreamJoined`): each side's records are
//! kept in a window store of their own; a record of either side joins every record of the
//! other side with its key within the window. Left and outer joins keep the records that
//! found no partner in a store both sides share and send them on alone once their window
//! has closed. The two sides become one sub-topology, as in Kafka Streams.

use std::sync::Arc;
use std::time::Duration;

use baton_runtime::record::undecodable;
use baton_runtime::topology::{split_row_pair, Place, RecordEffect, Root, RowPair, Unmatched};

use crate::describe::{Description, Node};
use crate::dsl::{decoding, encoding, Chain, Graph, KStream, Pos};
use crate::serdes::read_or_fail;
use crate::serdes::Serde;
use crate::windows::millis;

/// How far apart two records may be to join (Kafka Streams' `JoinWindows`): a right record
/// from `before` earlier to `after` later than a left one (both the time difference unless
/// set apart), and how long after that a record may still come out of order (the grace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinWindows {
    before: Duration,
    after: Duration,
    grace: Duration,
}

impl JoinWindows {
    /// Records at most `difference` apart join; none is taken later
    /// (`JoinWindows.ofTimeDifferenceWithNoGrace`).
    pub fn of_time_difference_with_no_grace(difference: Duration) -> JoinWindows {
        JoinWindows::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// Records at most `difference` apart join; records out of order by up to `grace` past
    /// the window are still taken (`JoinWindows.ofTimeDifferenceAndGrace`).
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> JoinWindows {
        JoinWindows {
            before: difference,
            after: difference,
            grace,
        }
    }

    /// How much earlier than a left record a right one may be (`JoinWindows.before`).
    pub fn before(self, before: Duration) -> JoinWindows {
        JoinWindows { before, ..self }
    }

    /// How much later than a left record a right one may be (`JoinWindows.after`).
    pub fn after(self, after: Duration) -> JoinWindows {
        JoinWindows { after, ..self }
    }

    /// `(before, after, grace)` in milliseconds.
    fn millis(&self) -> (i64, i64, i64) {
        (millis(self.before), millis(self.after), millis(self.grace))
    }
}

/// The serdes of a stream-stream join (Kafka's `StreamJoined.with(key, value, otherValue)`):
/// the key's, the left side's values' and the right side's values'. The join's stores keep
/// each side's values in that side's serde. `with_name` and `with_store_name` name its steps
/// and stores as Kafka's `withName` and `withStoreName` do.
pub struct StreamJoined<KS, VS, VOS> {
    key: KS,
    value: VS,
    other: VOS,
    name: Option<String>,
    store_name: Option<String>,
}

impl<KS: Serde, VS: Serde, VOS: Serde> StreamJoined<KS, VS, VOS> {
    pub fn with(key: KS, value: VS, other: VOS) -> Self {
        StreamJoined {
            key,
            value,
            other,
            name: None,
            store_name: None,
        }
    }

    /// Names the join's steps `<name>-this-windowed`, `<name>-other-windowed`,
    /// `<name>-this-join` (`-outer-this-join` in an outer join), `<name>-other-join`
    /// (`-outer-other-join` in a left or outer join) and `<name>-merge`
    /// (`StreamJoined.withName`).
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Names the join's stores, and so their changelogs, `<name>-this-join-store` and
    /// `<name>-other-join-store` (with `outer-` before `this`/`other` as the steps' names),
    /// and a left or outer join's shared store `<name>-left-shared-join-store` or
    /// `<name>-outer-shared-join-store` (`StreamJoined.withStoreName`).
    pub fn with_store_name(mut self, name: &str) -> Self {
        self.store_name = Some(name.to_owned());
        self
    }
}

/// Which records of a stream-stream join come out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JoinKind {
    /// Pairs only.
    Inner,
    /// Pairs, and left records that found no partner in their window.
    Left,
    /// Pairs, and records of either side that found no partner.
    Outer,
}

/// A join's joiner over either value, absent for a record without a partner; `None` for a
/// pair this join cannot have (an inner join's lone record).
type PairJoiner<V, VO, VR> = Box<dyn Fn(Option<&V>, Option<&VO>) -> Option<VR> + Send + Sync>;

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KStream<K, V> {
    /// Joins each record with every record of `other` with its key within `windows`:
    /// `joiner(value, other value)` for each pair, stamped with the later of the two
    /// timestamps, as Kafka Streams' inner `join` of two streams (a record of either side
    /// joins the other side's records stored so far). Both sides must be co-partitioned
    /// (refused at start otherwise) and keep their keys since their topics (repartition a
    /// side whose keys changed first); `other` must come straight from its topics with
    /// nothing else reading it yet.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_streams::serdes::{Long, Str};
    /// use baton_streams::{Consumed, JoinWindows, Produced, StreamJoined, StreamsBuilder};
    ///
    /// let builder = StreamsBuilder::new("payments");
    /// let orders = builder.stream("orders", Consumed::with(Str, Long));
    /// let payments = builder.stream("payments", Consumed::with(Str, Long));
    /// orders
    ///     .join_stream(
    ///         payments,
    ///         |due: &i64, paid: &i64| paid - due,
    ///         JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(300)),
    ///         StreamJoined::with(Str, Long, Long),
    ///     )
    ///     .to("balance", Produced::with(Str, Long));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn join_stream<VO, VR, KS, VS, VOS>(
        self,
        other: KStream<K, VO>,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<KS, VS, VOS>,
    ) -> KStream<K, VR>
    where
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
        VOS: Serde<Value = VO>,
    {
        let joiner = Box::new(move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o?)));
        self.join_windowed(other, (JoinKind::Inner, joiner), windows, joined)
    }

    /// As [`KStream::join_stream`], and each record of this stream that found no partner
    /// within the window comes out too, as `joiner(value, None)` stamped with its own
    /// timestamp, once its window has closed (stream time past its timestamp plus the
    /// window's `after` plus the grace): Kafka Streams' `leftJoin` of two streams. A record
    /// that finds a partner later, within the window, comes out once, paired.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_streams::serdes::{Long, Str};
    /// use baton_streams::{Consumed, JoinWindows, Produced, StreamJoined, StreamsBuilder};
    ///
    /// let builder = StreamsBuilder::new("unpaid");
    /// let orders = builder.stream("orders", Consumed::with(Str, Long));
    /// let payments = builder.stream("payments", Consumed::with(Str, Long));
    /// orders
    ///     .left_join_stream(
    ///         payments,
    ///         |due: &i64, paid: Option<&i64>| due - paid.copied().unwrap_or(0),
    ///         JoinWindows::of_time_difference_and_grace(
    ///             Duration::from_secs(300),
    ///             Duration::from_secs(10),
    ///         ),
    ///         StreamJoined::with(Str, Long, Long),
    ///     )
    ///     .to("owed", Produced::with(Str, Long));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn left_join_stream<VO, VR, KS, VS, VOS>(
        self,
        other: KStream<K, VO>,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<KS, VS, VOS>,
    ) -> KStream<K, VR>
    where
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
        VOS: Serde<Value = VO>,
    {
        let joiner = Box::new(move |v: Option<&V>, o: Option<&VO>| Some(joiner(v?, o)));
        self.join_windowed(other, (JoinKind::Left, joiner), windows, joined)
    }

    /// As [`KStream::left_join_stream`] for records of either side: a record of `other`
    /// without a partner comes out as `joiner(None, other value)` once its window has closed
    /// (its timestamp plus the window's `before` plus the grace): Kafka Streams' `outerJoin`
    /// of two streams.
    pub fn outer_join_stream<VO, VR, KS, VS, VOS>(
        self,
        other: KStream<K, VO>,
        joiner: impl Fn(Option<&V>, Option<&VO>) -> VR + Send + Sync + 'static,
        windows: JoinWindows,
        joined: StreamJoined<KS, VS, VOS>,
    ) -> KStream<K, VR>
    where
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
        VOS: Serde<Value = VO>,
    {
        let joiner = Box::new(move |v: Option<&V>, o: Option<&VO>| Some(joiner(v, o)));
        self.join_windowed(other, (JoinKind::Outer, joiner), windows, joined)
    }

    fn join_windowed<VO, VR, KS, VS, VOS>(
        self,
        other: KStream<K, VO>,
        (kind, joiner): (JoinKind, PairJoiner<V, VO, VR>),
        windows: JoinWindows,
        joined: StreamJoined<KS, VS, VOS>,
    ) -> KStream<K, VR>
    where
        VO: Send + Sync + 'static,
        VR: Send + Sync + 'static,
        KS: Serde<Value = K>,
        VS: Serde<Value = V>,
        VOS: Serde<Value = VO>,
    {
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        let key = Arc::new(joined.key);
        let (value, other_value) = (Arc::new(joined.value), Arc::new(joined.other));
        // Kafka's `KStreamImpl.doJoin`: a side whose keys changed goes through a repartition
        // topic first, `<name>-left` / `-right` when the join is named, else after its last
        // node.
        let this = repartitioned(
            &mut g,
            (self.at, self.chain, self.last, self.key_changed),
            (joined.name.as_deref(), "-left"),
            (key.clone(), value.clone()),
        );
        let that = repartitioned(
            &mut g,
            (other.at, other.chain, other.last, other.key_changed),
            (joined.name.as_deref(), "-right"),
            (key.clone(), other_value.clone()),
        );
        let other_at = g.read_beside(&that.0, this.0.sub, "join_stream");
        let sub = this.0.sub;
        let given = Naming {
            name: joined.name.as_deref(),
            store: joined.store_name.as_deref(),
        };
        let names = describe_join(&mut g.description, (sub, kind, given), (&this.2, &that.2));
        let (before, after, grace) = windows.millis();
        let retention = before.saturating_add(after).saturating_add(grace);
        let unmatched = |emits: bool| {
            names.shared.as_ref().map(|store| Unmatched {
                store: store.clone(),
                emits,
                lookback_ms: (after, before),
                grace_ms: grace,
            })
        };
        let junction = g.junction(sub);
        let sides = [
            (
                &this.0,
                encoding(this.1, None, key.clone(), value.clone()),
                (names.this_store.clone(), names.other_store.clone()),
                (before, after),
                (true, unmatched(kind != JoinKind::Inner)),
            ),
            (
                &other_at,
                encoding(that.1, None, key.clone(), other_value.clone()),
                (names.other_store.clone(), names.this_store.clone()),
                (after, before),
                (false, unmatched(kind == JoinKind::Outer)),
            ),
        ];
        for (at, encode, (mine, theirs), window, (left, unmatched)) in sides {
            let exit = g.exit(at);
            g.edit(&exit, move |s| {
                s.flat_map_records(encode, RecordEffect::KeepsKeys)
                    .join_window(&mine, retention)
                    .window_join(&theirs, window, left, unmatched)
                    .to_junction(junction)
            });
        }
        drop(g);
        KStream {
            graph,
            at: Pos {
                sub,
                place: Place {
                    root: Root::Junction(junction),
                    path: Vec::new(),
                },
            },
            chain: joined_pairs(key, (value, other_value), joiner),
            key_changed: false,
            updates: false,
            last: names.merge,
            deletes: None,
        }
    }
}

/// A join side: where its records are, how they read, its last node.
type JoinSide<K, V> = (Pos, Chain<K, V>, Node);

/// A side of a stream-stream join as the join reads it: through a repartition topic when its
/// keys changed (the topic named `<join name><suffix>` when the join is named, else after
/// the side's last node, as Kafka names it), its records then read with the join's serdes.
fn repartitioned<K, V, KS, VS>(
    g: &mut Graph,
    (at, chain, last, key_changed): (Pos, Chain<K, V>, Node, bool),
    (name, suffix): (Option<&str>, &str),
    (key, value): (Arc<KS>, Arc<VS>),
) -> JoinSide<K, V>
where
    K: 'static,
    V: 'static,
    KS: Serde<Value = K> + 'static,
    VS: Serde<Value = V> + 'static,
{
    if !key_changed {
        return (at, chain, last);
    }
    let prefix = match name {
        Some(n) => format!("{n}{suffix}"),
        None => last.as_str().to_owned(),
    };
    let encode = encoding(chain, None, key.clone(), value.clone());
    let (start, last) = g.repartition_start(&prefix, &at, &last, encode);
    let chain = decoding(key, value, format!("{prefix}-repartition"));
    (start, chain, last)
}

/// The names a join's description gives it.
struct JoinNames {
    merge: Node,
    this_store: String,
    other_store: String,
    /// A left or outer join's store of records without a partner.
    shared: Option<String>,
}

/// The names a user gave a join ([`StreamJoined::with_name`], `with_store_name`).
#[derive(Clone, Copy)]
struct Naming<'a> {
    name: Option<&'a str>,
    store: Option<&'a str>,
}

/// The join's nodes in sub-topology `sub`, after the two sides' last nodes, in Kafka's order
/// (`KStreamImplJoin.join`): both window steps, then both joins, then the merge; each side's
/// store is named after its join, the shared store after the left side's join
/// (`OuterStreamJoinStoreFactory`). A given name takes the place of a generated one, which
/// still takes its number, as in Kafka.
fn describe_join(
    d: &mut Description,
    (sub, kind, given): (usize, JoinKind, Naming<'_>),
    (this, other): (&Node, &Node),
) -> JoinNames {
    let named = |d: &mut Description, suffix: &str, prefix: &str| {
        let generated = d.next_name(prefix);
        match given.name {
            Some(name) => Node::named(&format!("{name}{suffix}")),
            None => generated,
        }
    };
    let this_windowed = named(d, "-this-windowed", "KSTREAM-WINDOWED-");
    let other_windowed = named(d, "-other-windowed", "KSTREAM-WINDOWED-");
    let (this_suffix, this_prefix) = match kind {
        JoinKind::Outer => ("-outer-this-join", "KSTREAM-OUTERTHIS-"),
        _ => ("-this-join", "KSTREAM-JOINTHIS-"),
    };
    let (other_suffix, other_prefix) = match kind {
        JoinKind::Inner => ("-other-join", "KSTREAM-JOINOTHER-"),
        _ => ("-outer-other-join", "KSTREAM-OUTEROTHER-"),
    };
    let this_generated = d.next_name(this_prefix);
    let other_generated = d.next_name(other_prefix);
    let merge = named(d, "-merge", "KSTREAM-MERGE-");
    let store_of = |generated: &Node, suffix: &str| match given.store {
        Some(base) => format!("{base}{suffix}-store"),
        None => format!("{}-store", generated.as_str()),
    };
    let this_store = store_of(&this_generated, this_suffix);
    let other_store = store_of(&other_generated, other_suffix);
    let shared = (kind != JoinKind::Inner).then(|| match given.store {
        Some(base) if kind == JoinKind::Outer => format!("{base}-outer-shared-join-store"),
        Some(base) => format!("{base}-left-shared-join-store"),
        None => {
            let number = &this_generated.as_str()[this_generated.as_str().len() - 10..];
            format!("KSTREAM-OUTERSHARED-{number}-store")
        }
    });
    let step_name = |generated: Node, suffix: &str| match given.name {
        Some(name) => Node::named(&format!("{name}{suffix}")),
        None => generated,
    };
    let this_join = step_name(this_generated, this_suffix);
    let other_join = step_name(other_generated, other_suffix);
    let this_reads: Vec<&str> = [Some(other_store.as_str()), shared.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    let other_reads: Vec<&str> = [Some(this_store.as_str()), shared.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    let this_w = d.add_processor(sub, this_windowed, &[this], &[&this_store]);
    let other_w = d.add_processor(sub, other_windowed, &[other], &[&other_store]);
    let this_j = d.add_processor(sub, this_join, &[&this_w], &this_reads);
    let other_j = d.add_processor(sub, other_join, &[&other_w], &other_reads);
    let merge = d.add_processor(sub, merge, &[&this_j, &other_j], &[]);
    JoinNames {
        merge,
        this_store,
        other_store,
        shared,
    }
}

/// The joined stream's first step: a pair's key and either value read with the serdes, then
/// the joiner.
fn joined_pairs<K, V, VO, VR, KS, VS, VOS>(
    key: Arc<KS>,
    (value, other): (Arc<VS>, Arc<VOS>),
    joiner: PairJoiner<V, VO, VR>,
) -> Chain<K, VR>
where
    K: 'static,
    V: 'static,
    VO: 'static,
    VR: 'static,
    KS: Serde<Value = K>,
    VS: Serde<Value = V>,
    VOS: Serde<Value = VO>,
{
    Arc::new(move |k, frame| {
        let Some(RowPair { left, right }) = split_row_pair(frame) else {
            undecodable("join_stream: a value that is not a joined pair".into())
        };
        let k = read_or_fail(&*key, k, "joined key");
        let v = left.map(|v| read_or_fail(&*value, v, "joined value"));
        let o = right.map(|o| read_or_fail(&*other, o, "joined other value"));
        match joiner(v.as_ref(), o.as_ref()) {
            Some(joined) => vec![(k, joined)],
            None => undecodable("join_stream: a record without a partner in an inner join".into()),
        }
    })
}
