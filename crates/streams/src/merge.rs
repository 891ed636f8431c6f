//! `KStream::merge`: the records of two streams as one. Streams from one point of the
//! topology (branches of a split) merge inside one typed step; streams from different points
//! meet at a junction of the byte-level stream, each record tagged with its side so that the
//! merged stream's steps read it with that side's steps before them. A stream read in a
//! sub-topology of its own that nothing else reads yet is taken into the other's (its topics
//! become routes of that sub-topology), as Kafka Streams makes merged streams one.

use std::rc::Rc;
use std::sync::Arc;

use baton_runtime::record::undecodable;
use baton_runtime::topology::{Place, RecordEffect, Root, Stream};

use crate::dsl::{Chain, Graph, KStream, Pos, Updates};

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> KStream<K, V> {
    /// The records of both streams, as Kafka Streams' `merge`: each record's results from
    /// whichever stream it reaches. Streams from one point (branches of a
    /// [`KStream::split`]) give each input record's results from `self` first, then from
    /// `other`. Streams of different topics must be co-partitioned (as many partitions, keys
    /// partitioned alike; refused at start otherwise); `other` must come straight from its
    /// topics, or from a [`KStream::repartition`], with nothing else reading it yet.
    ///
    /// ```
    /// use baton_streams::serdes::Str;
    /// use baton_streams::{Branched, Consumed, Produced, StreamsBuilder};
    ///
    /// let builder = StreamsBuilder::new("shout");
    /// let mut parts = builder
    ///     .stream("words", Consumed::with(Str, Str))
    ///     .split_named("words-")
    ///     .branch(|_, w: &String| w.len() > 3, Branched::named("long"))
    ///     .default_branch(Branched::named("short"));
    /// let long = parts.remove("words-long").unwrap().map_values(|w: &String| w.to_uppercase());
    /// let short = parts.remove("words-short").unwrap();
    /// let extra = builder.stream("more-words", Consumed::with(Str, Str));
    /// long.merge(short).merge(extra).to("shouted", Produced::with(Str, Str));
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn merge(self, other: KStream<K, V>) -> KStream<K, V> {
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        let last =
            g.description
                .named_processor(self.at.sub, "MERGE", None, &[&self.last, &other.last]);
        if !Rc::ptr_eq(&self.graph, &other.graph) {
            g.errors
                .push("merge: the streams come from different builders".into());
        }
        let key_changed = self.key_changed || other.key_changed;
        if self.at == other.at {
            let deletes = merged_updates(
                (self.deletes, self.chain.clone()),
                (other.deletes, other.chain.clone()),
            );
            let (a, b) = (self.chain, other.chain);
            drop(g);
            return KStream {
                graph,
                at: self.at,
                chain: Arc::new(move |k, v| {
                    let mut out = a(k, v);
                    out.extend(b(k, v));
                    out
                }),
                key_changed,
                updates: false,
                last,
                deletes,
            };
        }
        let other_at = g.read_beside(&other.at, self.at.sub, "merge");
        let junction = g.junction(self.at.sub);
        for (side, at) in [(0u8, &self.at), (1u8, &other_at)] {
            let exit = g.exit(at);
            g.edit(&exit, move |s| {
                s.flat_map_records(
                    move |k, v| vec![(k.to_vec(), Some(tag(side, v)))],
                    RecordEffect::KeepsKeys,
                )
                .to_junction(junction)
            });
        }
        drop(g);
        let sides = [(self.chain, self.deletes), (other.chain, other.deletes)];
        let (chain, deletes) = untagging(sides);
        KStream {
            graph,
            at: Pos {
                sub: self.at.sub,
                place: Place {
                    root: Root::Junction(junction),
                    path: Vec::new(),
                },
            },
            chain,
            key_changed,
            updates: false,
            last,
            deletes,
        }
    }
}

/// Why a stream cannot be taken into another's sub-topology: other steps read it already.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the stream of sub-topology {sub} cannot be read beside this one: its steps serve several of its topics, or it reads a topic this one reads; repartition it first")]
pub(crate) struct Unabsorbed {
    sub: usize,
}

impl Graph {
    /// Takes the sub-topology of `at` into sub-topology `into`, when nothing reads its records
    /// yet: its topics become routes of `into` leading to a junction, where `at`'s records
    /// now come out. `at` itself when it is in `into` already.
    pub(crate) fn absorb(&mut self, at: &Pos, into: usize) -> Result<Pos, Unabsorbed> {
        let (at, into) = (&self.resolve(at), self.resolve_sub(into));
        if at.sub == into {
            return Ok(at.clone());
        }
        let from = &self.streams[at.sub];
        if !from.is_fresh() || at.place != Place::main() {
            return Err(Unabsorbed { sub: at.sub });
        }
        let (topics, deletes) = (from.sources().to_vec(), from.takes_deletes());
        self.streams[at.sub] = Stream::branch();
        let junction = self.junction(into);
        for topic in &topics {
            let mut s = std::mem::replace(&mut self.streams[into], Stream::branch()).route(topic);
            if deletes {
                s = s.with_deletes();
            }
            let place = Place {
                root: Root::Source(topic.to_string()),
                path: Vec::new(),
            };
            s.edit_branch(&place, |r| r.to_junction(junction));
            self.streams[into] = s;
        }
        self.description.absorb(at.sub, into);
        Ok(Pos {
            sub: into,
            place: Place {
                root: Root::Junction(junction),
                path: Vec::new(),
            },
        })
    }

    /// Where the records at `at` are read in sub-topology `into`: absorbed when `at` is a
    /// fresh stream, else with its whole sub-topology (as Kafka merges the node groups a
    /// merge or a join connects); when neither can be, `at` as it is, the error said at
    /// build naming `what`.
    pub(crate) fn read_beside(&mut self, at: &Pos, into: usize, what: &str) -> Pos {
        match self.absorb(at, into) {
            Ok(at) => at,
            Err(_) if self.merge_subs(at.sub, into) => self.resolve(at),
            Err(why) => {
                self.errors.push(format!("{what}: {why}"));
                at.clone()
            }
        }
    }

    /// A new junction of sub-topology `sub`.
    pub(crate) fn junction(&mut self, sub: usize) -> usize {
        let sub = self.resolve_sub(sub);
        self.streams[sub].junction()
    }
}

/// A record's value as it meets a junction: its side, whether it has a value (a delete has
/// none), then the value.
fn tag(side: u8, value: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + value.map_or(0, <[u8]>::len));
    out.push(side);
    out.push(u8::from(value.is_some()));
    out.extend_from_slice(value.unwrap_or_default());
    out
}

/// The side and value of a [`tag`]ged value.
fn untag(tagged: &[u8]) -> (usize, Option<&[u8]>) {
    match tagged {
        [side, 1, value @ ..] => (*side as usize, Some(value)),
        [side, 0] => (*side as usize, None),
        _ => undecodable("merge: a value that is not tagged with its side".into()),
    }
}

/// A stream's steps: over values, and over deletes too where it carries them.
type Steps<K, V> = (Chain<K, V>, Option<Updates<K, V>>);

/// The merged stream's steps: each tagged record goes through its side's steps.
fn untagging<K: Send + Sync + 'static, V: Send + Sync + 'static>(
    sides: [Steps<K, V>; 2],
) -> Steps<K, V> {
    let any_deletes = sides.iter().any(|(_, d)| d.is_some());
    let updates: Vec<Updates<K, V>> = sides
        .iter()
        .map(|(chain, deletes)| with_deletes(deletes.clone(), chain.clone()))
        .collect();
    let chains: Vec<Chain<K, V>> = sides.into_iter().map(|(c, _)| c).collect();
    let chain: Chain<K, V> = Arc::new(move |k, v| match untag(v) {
        (side, Some(v)) => chains.get(side).map_or_else(Vec::new, |c| c(k, v)),
        (_, None) => Vec::new(),
    });
    let deletes = any_deletes.then(|| -> Updates<K, V> {
        Arc::new(move |k, v| {
            let Some(v) = v else { return Vec::new() };
            let (side, v) = untag(v);
            updates.get(side).map_or_else(Vec::new, |u| u(k, v))
        })
    });
    (chain, deletes)
}

/// A side's steps over records and deletes alike: its own, or its values-only steps.
fn with_deletes<K: 'static, V: 'static>(
    updates: Option<Updates<K, V>>,
    values: Chain<K, V>,
) -> Updates<K, V> {
    updates.unwrap_or_else(|| {
        Arc::new(move |k, v| match v {
            Some(v) => values(k, v)
                .into_iter()
                .map(|(k, v)| (k, Some(v)))
                .collect(),
            None => Vec::new(),
        })
    })
}

/// The updates of two streams merged at one point, each given with its values-only chain:
/// `None` when neither carries deletes.
fn merged_updates<K: 'static, V: 'static>(
    (a, a_values): (Option<Updates<K, V>>, Chain<K, V>),
    (b, b_values): (Option<Updates<K, V>>, Chain<K, V>),
) -> Option<Updates<K, V>> {
    if a.is_none() && b.is_none() {
        return None;
    }
    let (a, b) = (with_deletes(a, a_values), with_deletes(b, b_values));
    Some(Arc::new(move |k, v| {
        let mut out = a(k, v);
        out.extend(b(k, v));
        out
    }))
}
