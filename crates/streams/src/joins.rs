//! Stream-stream joins within a time window (Kafka Streams' `KStream.join(KStream,
//! ValueJoiner, JoinWindows, StreamJoined)`): each side's records are kept in a window store
//! of their own; a record of either side joins every record of the other side with its key
//! within the window. The two sides become one sub-topology, as in Kafka Streams.

use std::sync::Arc;
use std::time::Duration;

use baton_runtime::record::undecodable;
use baton_runtime::topology::{split_join_frame, Place, RecordEffect, Root};

use crate::describe::{Description, Node};
use crate::dsl::{encoding, Chain, KStream, Pos};
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

    /// `(before, after, retention)` in milliseconds: a side's records are kept for the
    /// window's size plus the grace, as Kafka's join stores keep them.
    fn millis(&self) -> (i64, i64, i64) {
        let (before, after) = (millis(self.before), millis(self.after));
        let retention = before
            .saturating_add(after)
            .saturating_add(millis(self.grace));
        (before, after, retention)
    }
}

/// The serdes of a stream-stream join (Kafka's `StreamJoined.with(key, value, otherValue)`):
/// the key's, the left side's values' and the right side's values'. The join's stores keep
/// each side's values in that side's serde.
pub struct StreamJoined<KS, VS, VOS> {
    key: KS,
    value: VS,
    other: VOS,
}

impl<KS: Serde, VS: Serde, VOS: Serde> StreamJoined<KS, VS, VOS> {
    pub fn with(key: KS, value: VS, other: VOS) -> Self {
        StreamJoined { key, value, other }
    }
}

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
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        if self.key_changed || other.key_changed {
            g.errors.push(
                "join_stream: a side's keys changed since its topic; repartition it before the \
                 join"
                    .into(),
            );
        }
        let other_at = match g.absorb(&other.at, self.at.sub) {
            Ok(at) => at,
            Err(why) => {
                g.errors.push(format!("join_stream: {why}"));
                other.at.clone()
            }
        };
        let sub = self.at.sub;
        let (last, this_store, other_store) =
            describe_join(&mut g.description, sub, (&self.last, &other.last));
        let (before, after, retention) = windows.millis();
        let key = Arc::new(joined.key);
        let (value, other_value) = (Arc::new(joined.value), Arc::new(joined.other));
        let junction = g.junction(sub);
        let sides = [
            (
                &self.at,
                encoding(self.chain, None, key.clone(), value.clone()),
                (this_store.clone(), other_store.clone()),
                (before, after),
                true,
            ),
            (
                &other_at,
                encoding(other.chain, None, key.clone(), other_value.clone()),
                (other_store, this_store),
                (after, before),
                false,
            ),
        ];
        for (at, encode, (mine, theirs), window, left) in sides {
            let exit = g.exit(at);
            g.edit(&exit, move |s| {
                s.flat_map_records(encode, RecordEffect::KeepsKeys)
                    .join_window(&mine, retention)
                    .window_join(&theirs, window, left)
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
            last,
            deletes: None,
        }
    }
}

/// The join's nodes in sub-topology `sub`, after the two sides' last nodes, in Kafka's order
/// (`KStreamImplJoin.join`): both window steps, then both joins, then the merge; each side's
/// store is named after its join. The merge, and the two stores' names.
fn describe_join(
    d: &mut Description,
    sub: usize,
    (this, other): (&Node, &Node),
) -> (Node, String, String) {
    let this_windowed = d.next_name("KSTREAM-WINDOWED-");
    let other_windowed = d.next_name("KSTREAM-WINDOWED-");
    let this_join = d.next_name("KSTREAM-JOINTHIS-");
    let other_join = d.next_name("KSTREAM-JOINOTHER-");
    let merge = d.next_name("KSTREAM-MERGE-");
    let this_store = format!("{}-store", this_join.as_str());
    let other_store = format!("{}-store", other_join.as_str());
    let this_w = d.add_processor(sub, this_windowed, &[this], &[&this_store]);
    let other_w = d.add_processor(sub, other_windowed, &[other], &[&other_store]);
    let this_j = d.add_processor(sub, this_join, &[&this_w], &[&other_store]);
    let other_j = d.add_processor(sub, other_join, &[&other_w], &[&this_store]);
    let last = d.add_processor(sub, merge, &[&this_j, &other_j], &[]);
    (last, this_store, other_store)
}

/// The joined stream's first step: a pair's key and both values read with the serdes, then
/// the joiner.
fn joined_pairs<K, V, VO, VR, KS, VS, VOS>(
    key: Arc<KS>,
    (value, other): (Arc<VS>, Arc<VOS>),
    joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
) -> Chain<K, VR>
where
    K: 'static,
    KS: Serde<Value = K>,
    VS: Serde<Value = V>,
    VOS: Serde<Value = VO>,
{
    Arc::new(move |k, frame| {
        let Some((v, Some(o))) = split_join_frame(frame) else {
            undecodable("join_stream: a value that is not a joined pair".into())
        };
        let k = read_or_fail(&*key, k, "joined key");
        let v = read_or_fail(&*value, v, "joined value");
        let o = read_or_fail(&*other, o, "joined other value");
        vec![(k, joiner(&v, &o))]
    })
}
