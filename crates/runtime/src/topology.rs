//! The application a Baton instance runs, at the byte level: streams of records from source
//! topics through steps (filter, map, flat-map, peek) and keyed stateful steps (aggregate,
//! count) into state stores, out to a sink topic. The typed API (`baton-streams`) compiles to
//! this.
//!
//! Each stream is one subtopology, and its tasks are the partitions of its (co-partitioned)
//! sources, as in Kafka Streams: task `s_p` reads partition `p` of every source of stream `s`
//! and owns partition `p` of each of its stores' changelogs. A stateful step groups by the
//! record's key as it arrives, so no step may change keys before it within one stream. A key
//! change before a grouping writes through a repartition topic instead: one stream's sink, the
//! next stream's source, created by Baton at start ([`Topology::with_repartition_topics`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use baton_assignor::TaskId;
use baton_protocol::bridge::{Subtopology, Topology as WireTopology};
use bytes::Bytes;

pub use crate::layout::{
    session_key, split_session_key, split_timestamped, timestamped, window_store_key, windowed_key,
    Layout, Sessions, Windows, WINDOW_CHANGELOG_EXTRA_RETENTION_MS,
};
use crate::query::format::{Format, StoreFormat};
use crate::store::StoreError;

pub mod fk_join;
mod lists;
mod mem;
pub mod sliding;
mod stream_join;
pub mod suppress;
pub use mem::MemStores;
pub use stream_join::{
    join_store_key, split_unmatched_list, unmatched_key, unmatched_list, Unmatched,
};
use stream_join::{join_window_put, window_join, Side};

type FilterFn = Arc<dyn Fn(&[u8], &[u8]) -> bool + Send + Sync>;
type MapValuesFn = Arc<dyn Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync>;
type MapFn = Arc<dyn Fn(&[u8], &[u8]) -> (Vec<u8>, Vec<u8>) + Send + Sync>;
/// Store entries, key and value, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;
/// Records as bytes, a delete without a value.
pub type Records = Vec<(Vec<u8>, Option<Vec<u8>>)>;
/// Over records that may be deletes (no value), giving any, deletes too.
type FlatMapFn = Arc<dyn Fn(&[u8], Option<&[u8]>) -> Records + Send + Sync>;
type FlatMapValuesFn = Arc<dyn Fn(&[u8], &[u8]) -> Vec<Vec<u8>> + Send + Sync>;
type PeekFn = Arc<dyn Fn(&[u8], &[u8]) + Send + Sync>;
/// A user's processor over one record: the task, the record, the task's stream time and its
/// stores; the records it forwards. A store error ends the record (its writes are dropped).
type ProcessFn = Arc<
    dyn Fn(TaskId, &StreamRecord, i64, &mut dyn Stores) -> Result<Vec<StreamRecord>, StoreError>
        + Send
        + Sync,
>;
/// A processor's wall-clock punctuation: the task, the wall-clock time (ms since the epoch),
/// the task's stream time and its stores; the records it forwards.
type PunctuateFn = Arc<
    dyn Fn(TaskId, i64, i64, &mut dyn Stores) -> Result<Vec<StreamRecord>, StoreError>
        + Send
        + Sync,
>;
/// `(key, value) -> the global table's key` a record joins, or `None` for none.
pub type GlobalKeyFn = Arc<dyn Fn(&[u8], &[u8]) -> Option<Vec<u8>> + Send + Sync>;
/// `(current aggregate or None, key, value) -> new aggregate`, or `None` to remove the key.
type AggregateFn = Arc<dyn Fn(Option<&[u8]>, &[u8], &[u8]) -> Option<Vec<u8>> + Send + Sync>;
/// `(key, aggregate so far or None to start, a session's aggregate) -> the two merged`.
type MergeFn = Arc<dyn Fn(&[u8], Option<&[u8]>, &[u8]) -> Vec<u8> + Send + Sync>;
/// A table's update `(key, new value, old value)` as the records a grouping of the table
/// sends on, keys changed.
type RegroupFn = Arc<dyn Fn(&[u8], Option<&[u8]>, Option<&[u8]>) -> Records + Send + Sync>;

#[derive(Clone)]
enum Step {
    Filter(FilterFn),
    MapValues(MapValuesFn),
    Map(MapFn),
    /// Each record, a delete too, becomes any number of records (deletes too); keys may
    /// change unless `keeps_keys`; with `updates`, each record becomes at most one with its
    /// key (a table's update stays one, [`Topology::sink_is_table`]).
    FlatMap {
        f: FlatMapFn,
        keeps_keys: bool,
        updates: bool,
    },
    /// Each record becomes any number of records with its key.
    FlatMapValues(FlatMapValuesFn),
    /// Sets the record's key to its value in `store` (a timestamped key-value store, the
    /// record's timestamp beside the value), or removes it for a delete, and passes the record
    /// on with the value it replaced: Kafka Streams' `toTable` with a store.
    Upsert {
        store: String,
    },
    /// A table's update, new and old value ([`StreamRecord::old`]), becomes records under new
    /// keys (Kafka Streams' `KTable.groupBy`, whose records carry both to the aggregation).
    Regroup(RegroupFn),
    /// Sees each record and passes it on unchanged.
    Peek(PeekFn),
    /// Updates the store's value for the record's key and passes `(key, new value)` on.
    Aggregate {
        store: String,
        f: AggregateFn,
        layout: Layout,
    },
    /// Updates the store's value for the record's key in each window its timestamp falls in
    /// and passes `(windowed key, new value)` on per window; records for closed windows are
    /// dropped and counted ([`Output::late`]).
    WindowAggregate {
        store: String,
        windows: Windows,
        f: AggregateFn,
    },
    /// Kafka Streams' sliding-window aggregation ([`sliding::sliding_aggregate`]): windows
    /// of the record's key in `store` (a window store, timestamped values) made and updated
    /// where records are, each update passed on as `(windowed key, new value)`.
    SlidingAggregate {
        store: String,
        sliding: sliding::Sliding,
        f: AggregateFn,
    },
    /// Kafka Streams' session-windowed aggregation: the record's key's sessions in `store`
    /// (keys [`session_key`], plain values) within the gap of its timestamp are merged with
    /// `merge` (from `None`, the initial aggregate), removed and sent on as deletes, then the
    /// record is folded in with `f` and the merged session stored and sent on, stamped with
    /// its end. A record for a session already closed is dropped and counted.
    SessionAggregate {
        store: String,
        sessions: Sessions,
        f: AggregateFn,
        merge: MergeFn,
    },
    /// One side of a stream-stream join (Kafka's `KStreamJoinWindow`): stores the record in
    /// `store` under [`join_store_key`] (duplicates kept), unless it is older than stream time
    /// minus `retention_ms` (then counted late), drops the key's records that fell out of the
    /// retention, and passes the record on.
    JoinWindow {
        store: String,
        retention_ms: i64,
    },
    /// A stream-stream join (Kafka's `KStreamKStreamJoin`): the record with each record of its
    /// key in `other` (the other side's [`Step::JoinWindow`] store) from `before_ms` before it
    /// to `after_ms` after it, in time order, each passed on as a [`row_pair`] (left value
    /// first) stamped with the later timestamp; `left`: this side is the join's left one. A
    /// left or outer join's records without a partner are kept in `unmatched` until their
    /// window closes, then passed on alone.
    WindowJoin {
        other: String,
        before_ms: i64,
        after_ms: i64,
        left: bool,
        unmatched: Option<Unmatched>,
    },
    /// One side of a table-table join (Kafka's `KTableKTableInnerJoin`, `LeftJoin`,
    /// `RightJoin`): a table's update (a delete too) looks its key up in `other`, the other
    /// side's timestamped store, and goes on as a [`row_pair`] stamped with the later
    /// timestamp, or as a delete; `left`: this is the left side.
    TableJoin {
        other: String,
        left: bool,
        kind: TableJoinKind,
    },
    /// Looks the record's key up in a table of the stream ([`Stream::table`]), or with
    /// `kept` in a timestamped store an aggregation or an upsert of the stream keeps (its
    /// timestamp left out), and passes on the record with its value and the table's as one
    /// [`join_frame`]; with `inner`, a key the table lacks drops the record (Kafka Streams'
    /// `join`; else `leftJoin`).
    Join {
        store: String,
        inner: bool,
        kept: bool,
    },
    /// Looks up `key(record key, value)` in the global table `store` ([`GlobalTable`]) and
    /// passes on the record with its value and the row as one [`join_frame`]; with `inner`, a
    /// key the table lacks (or no key) drops the record (Kafka Streams' stream-global `join`;
    /// else `leftJoin`).
    GlobalJoin {
        store: String,
        key: GlobalKeyFn,
        inner: bool,
    },
    /// Kafka Streams' `suppress`: each table update waits in a buffer store until its time
    /// has come ([`suppress::suppress`]).
    Suppress(Arc<suppress::Suppression>),
    /// One of a foreign-key join's steps ([`fk_join::ForeignKeyStep`]).
    ForeignKey(Arc<fk_join::ForeignKeyStep>),
    /// The Processor API's escape hatch: `f` reads and writes `stores` (plain key-value
    /// stores of this stream, each with its changelog) and forwards any records, with any
    /// keys.
    Process {
        stores: Vec<String>,
        f: ProcessFn,
        /// Called every `.0` of wall-clock time ([`Topology::punctuate`]).
        wall: Option<(Duration, PunctuateFn)>,
    },
    /// Each record goes through every branch, in order, as a Kafka Streams processor passes
    /// a record to each of its children. `id` names the fork for [`fork_epoch`].
    Fork {
        id: usize,
        branches: Vec<Vec<Step>>,
    },
    /// Passes each record to the steps of junction `.0` of the stream ([`Stream::junction`]),
    /// where several paths (of several sources) meet: a merge, a join's two sides.
    Junction(usize),
    /// Writes each record to the sink `topic` (its index among the sub-topology's sinks,
    /// [`Topology::sinks_of`], set when the topology is validated); passes nothing on.
    To {
        topic: String,
        sink: u16,
    },
}

static NEXT_FORK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// How many records each fork has passed to its branches on this thread.
    static FORK_EPOCHS: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A new fork's id, unique in the process.
pub fn new_fork_id() -> usize {
    NEXT_FORK.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// How many records fork `id` has passed to its branches on this thread so far: a step in a
/// branch that shares work between the branches of one record (the typed API's `split`
/// evaluates its predicates once per record) tells one record from the next by it.
pub fn fork_epoch(id: usize) -> u64 {
    FORK_EPOCHS.with(|e| e.borrow().get(id).copied().unwrap_or(0))
}

fn next_fork_epoch(id: usize) {
    FORK_EPOCHS.with(|e| {
        let mut e = e.borrow_mut();
        if e.len() <= id {
            e.resize(id + 1, 0);
        }
        e[id] += 1;
    });
}

/// Every step of `steps`, those in forks' branches included, in order.
fn walk<'a>(steps: &'a [Step], f: &mut impl FnMut(&'a Step)) {
    for step in steps {
        f(step);
        if let Step::Fork { branches, .. } = step {
            for b in branches {
                walk(b, f);
            }
        }
    }
}

/// A joined record's value: the stream's value and the table's (if the key was there),
/// framed as `u32` length + value, then a presence byte + the table's value.
pub fn join_frame(value: &[u8], table: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + value.len() + table.map_or(0, <[u8]>::len));
    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
    out.extend_from_slice(value);
    match table {
        Some(t) => {
            out.push(1);
            out.extend_from_slice(t);
        }
        None => out.push(0),
    }
    out
}

/// The parts of a [`join_frame`]; `None` if `frame` is not one.
pub fn split_join_frame(frame: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    let len = u32::from_be_bytes(frame.get(..4)?.try_into().ok()?) as usize;
    let rest = &frame[4..];
    if rest.len() < len + 1 {
        return None;
    }
    let (value, rest) = rest.split_at(len);
    match rest[0] {
        0 if rest.len() == 1 => Some((value, None)),
        1 => Some((value, Some(&rest[1..]))),
        _ => None,
    }
}

/// A table update's new and old value as Kafka Streams writes a `Change` to a grouping's
/// repartition topic (`ChangedSerializer`): the old value then the flag 0; the new value then
/// 1; both: the new value's length (a zigzag varint), the new value, the old value, then 2.
/// `None` when both are absent, which Kafka refuses too.
pub fn change_frame(new: Option<&[u8]>, old: Option<&[u8]>) -> Option<Vec<u8>> {
    match (new, old) {
        (Some(new), Some(old)) => {
            let mut out = Vec::with_capacity(6 + new.len() + old.len());
            // Zigzag of a non-negative length: twice it.
            let mut n = (new.len() as u32) << 1;
            while n >= 0x80 {
                out.push((n as u8 & 0x7f) | 0x80);
                n >>= 7;
            }
            out.push(n as u8);
            out.extend_from_slice(new);
            out.extend_from_slice(old);
            out.push(2);
            Some(out)
        }
        (Some(value), None) | (None, Some(value)) => {
            let mut out = Vec::with_capacity(1 + value.len());
            out.extend_from_slice(value);
            out.push(u8::from(new.is_some()));
            Some(out)
        }
        (None, None) => None,
    }
}

/// A table update as a grouping sends it: its new value, its old value, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change<'a> {
    pub new: Option<&'a [u8]>,
    pub old: Option<&'a [u8]>,
}

/// The new and old value of a [`change_frame`]; `None` if `frame` is not one.
pub fn split_change_frame(frame: &[u8]) -> Option<Change<'_>> {
    let (&flag, body) = frame.split_last()?;
    let change = |new, old| Some(Change { new, old });
    match flag {
        0 => change(None, Some(body)),
        1 => change(Some(body), None),
        2 => {
            let (mut n, mut shift, mut used) = (0u32, 0, 0);
            loop {
                let b = *body.get(used)?;
                used += 1;
                n |= u32::from(b & 0x7f) << shift;
                if b & 0x80 == 0 {
                    break;
                }
                shift += 7;
                if shift > 28 {
                    return None;
                }
            }
            let len = ((n >> 1) as i32 ^ -((n & 1) as i32)) as usize;
            let rest = body.get(used..)?;
            let (new, old) = (rest.get(..len)?, rest.get(len..)?);
            change(Some(new), Some(old))
        }
        _ => None,
    }
}

/// A record flowing through a stream: key, value, and its timestamp (milliseconds since the
/// epoch), which every step keeps, from the input record to the outputs. A record without a
/// value is a delete: a table's update that removes its key (a tombstone at a sink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    pub key: Bytes,
    pub value: Option<Bytes>,
    pub timestamp: i64,
    /// A table's update straight from its store step (an aggregation, an upsert): the key's
    /// value before it, which a grouping of the table subtracts ([`Step::Regroup`]).
    pub old: Option<Bytes>,
    /// The partition a sink writes it to, where the step that made it knows (a foreign-key
    /// join's answer goes back to the partition of the row that asked); else its key's.
    pub partition: Option<u32>,
}

impl StreamRecord {
    pub fn new(key: impl Into<Bytes>, value: impl Into<Bytes>, timestamp: i64) -> StreamRecord {
        StreamRecord {
            key: key.into(),
            value: Some(value.into()),
            timestamp,
            old: None,
            partition: None,
        }
    }

    /// A delete of `key`.
    pub fn delete(key: impl Into<Bytes>, timestamp: i64) -> StreamRecord {
        StreamRecord {
            key: key.into(),
            value: None,
            timestamp,
            old: None,
            partition: None,
        }
    }
}

/// A record for one of a sub-topology's sinks: `sink` indexes [`Topology::sinks_of`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    pub sink: u16,
    pub record: StreamRecord,
}

/// What one input record became.
#[derive(Debug, Default)]
pub struct Output {
    /// Records for the stream's sinks, in order.
    pub records: Vec<Emitted>,
    /// Windows a record came too late for (their end plus grace was behind stream time), as
    /// Kafka Streams counts them in `dropped-records`.
    pub late: u64,
}

/// Where a list of steps starts in a stream: its main steps, the steps one source's records
/// take instead ([`Stream::route`]), or a junction that several paths lead into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    Main,
    Source(String),
    Junction(usize),
}

/// A place in a stream's steps: a root, then the branch indices of nested forks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub root: Root,
    pub path: Vec<usize>,
}

impl Place {
    /// The start of the main steps.
    pub fn main() -> Place {
        Place {
            root: Root::Main,
            path: Vec::new(),
        }
    }
}

/// One stream: sources, steps, and optionally sinks. Built with chained calls.
#[derive(Clone)]
pub struct Stream {
    sources: Vec<String>,
    /// Sources whose records take these steps instead of the main ones.
    routes: BTreeMap<String, Vec<Step>>,
    /// Steps that several paths lead into ([`Step::Junction`]).
    junctions: Vec<Vec<Step>>,
    /// Its sources' deletes (records without a value) go through the steps: a table's
    /// updates read as a stream ([`Stream::with_deletes`]). Otherwise they are passed over.
    deletes: bool,
    /// Routed sources whose deletes go through their steps: tables read beside a stream
    /// ([`Stream::route_table`]).
    delete_routes: BTreeSet<String>,
    /// Sources read into a store instead of through the steps: `(topic, store)`.
    tables: Vec<(String, String)>,
    steps: Vec<Step>,
}

impl Stream {
    /// A stream reading `sources`; several sources must be co-partitioned.
    pub fn from<S: AsRef<str>>(sources: &[S]) -> Stream {
        Stream {
            sources: sources.iter().map(|s| s.as_ref().to_owned()).collect(),
            routes: BTreeMap::new(),
            junctions: Vec::new(),
            deletes: false,
            delete_routes: BTreeSet::new(),
            tables: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// Reads `topic` too, its records taking steps of their own (empty so far, edited at
    /// `Root::Source(topic)`) instead of the main ones.
    pub fn route(mut self, topic: &str) -> Self {
        self.sources.push(topic.to_owned());
        self.routes.insert(topic.to_owned(), Vec::new());
        self
    }

    /// A new junction's number: steps that end in `Step::Junction(n)` ([`Stream::to_junction`])
    /// pass their records on to it, edited at `Root::Junction(n)`.
    pub fn junction(&mut self) -> usize {
        self.junctions.push(Vec::new());
        self.junctions.len() - 1
    }

    /// Passes the records on to junction `n`; nothing comes after.
    pub fn to_junction(mut self, n: usize) -> Self {
        self.steps.push(Step::Junction(n));
        self
    }

    /// Takes `other`'s sources, steps, junctions and tables in, each of its sources read as a
    /// route of its own (Kafka merges the node groups a join connects): where its places are
    /// now. `Err(other)` when it cannot be: its main steps serve more than one of its sources,
    /// or it reads a topic this stream reads.
    pub fn absorb_stream(&mut self, mut other: Stream) -> Result<Absorbed, Box<Stream>> {
        let tables: Vec<&String> = other.tables.iter().map(|(t, _)| t).collect();
        let main: Vec<String> = other
            .sources
            .iter()
            .filter(|t| !other.routes.contains_key(*t) && !tables.contains(t))
            .cloned()
            .collect();
        let shared = other.sources.iter().any(|t| self.sources.contains(t));
        if shared || (main.len() > 1 && !other.steps.is_empty()) {
            return Err(Box::new(other));
        }
        let offset = self.junctions.len();
        let shift = |steps: &mut Vec<Step>| shift_junctions(steps, offset);
        shift(&mut other.steps);
        other.routes.values_mut().for_each(shift);
        other.junctions.iter_mut().for_each(shift);
        let main_topic = main.first().cloned();
        // Which sources take deletes is said per source from now on: the other's do not
        // inherit this stream's.
        if std::mem::take(&mut self.deletes) {
            self.delete_routes.extend(self.sources.iter().cloned());
        }
        for t in &other.sources {
            self.sources.push(t.clone());
            if other.deletes || other.delete_routes.contains(t) {
                self.delete_routes.insert(t.clone());
            }
        }
        for (t, steps) in std::mem::take(&mut other.routes) {
            self.routes.insert(t, steps);
        }
        if let Some(t) = &main_topic {
            self.routes
                .insert(t.clone(), std::mem::take(&mut other.steps));
        }
        self.junctions.append(&mut other.junctions);
        self.tables.append(&mut other.tables);
        Ok(Absorbed {
            main_topic,
            junction_offset: offset,
        })
    }

    /// Whether nothing reads its records yet: no steps, routes, junctions or tables.
    pub fn is_fresh(&self) -> bool {
        self.steps.is_empty()
            && self.routes.is_empty()
            && self.junctions.is_empty()
            && self.tables.is_empty()
    }

    /// Its source topics.
    pub fn sources(&self) -> &[String] {
        &self.sources
    }

    /// As [`Stream::route`], for a table's topic: its deletes go through its steps whatever
    /// the stream's other sources do.
    pub fn route_table(mut self, topic: &str) -> Self {
        self.delete_routes.insert(topic.to_owned());
        self.route(topic)
    }

    /// Whether its sources' deletes go through its steps ([`Stream::with_deletes`]).
    pub fn takes_deletes(&self) -> bool {
        self.deletes
    }

    /// Every list of steps: the main ones, each route's, each junction's.
    fn roots(&self) -> impl Iterator<Item = &Vec<Step>> {
        std::iter::once(&self.steps)
            .chain(self.routes.values())
            .chain(self.junctions.iter())
    }

    /// Every step of every root, those in forks' branches included.
    fn walk_all<'a>(&'a self, f: &mut impl FnMut(&'a Step)) {
        for steps in self.roots() {
            walk(steps, f);
        }
    }

    /// Takes its sources' deletes (records without a value) through the steps, as a table's
    /// updates: steps that keep keys pass them on, a sink writes them as tombstones.
    pub fn with_deletes(mut self) -> Self {
        self.deletes = true;
        self
    }

    /// Reads `topic` too (co-partitioned with the other sources).
    pub fn also_from(mut self, topic: &str) -> Self {
        self.sources.push(topic.to_owned());
        self
    }

    /// The steps of one branch of a fork ([`Stream::fork`]): a stream without sources.
    pub fn branch() -> Stream {
        Stream::from::<&str>(&[])
    }

    /// Passes each record through every one of `branches` (built from [`Stream::branch`]), in
    /// order; nothing comes after a fork but its branches.
    pub fn fork(mut self, branches: Vec<Stream>) -> Self {
        self.steps.push(Step::Fork {
            id: new_fork_id(),
            branches: branches.into_iter().map(|b| b.steps).collect(),
        });
        self
    }

    /// Adds a branch to the fork that ends the steps at `path` (the branch indices of nested
    /// forks, from the top; a fork is made when those steps do not end in one) and returns
    /// the new branch's path and its fork's id. Building a typed graph, every later step of a
    /// node goes into one of its branches this way.
    pub fn open_branch(&mut self, at: &Place) -> (Place, usize) {
        let id = self.fork_at(at);
        let Some(Step::Fork { branches, .. }) = self.steps_at(at).last_mut() else {
            unreachable!("fork_at made the fork");
        };
        branches.push(Vec::new());
        let mut path = at.path.clone();
        path.push(branches.len() - 1);
        let place = Place {
            root: at.root.clone(),
            path,
        };
        (place, id)
    }

    /// The id of the fork that ends the steps at `path`, made if they do not end in one.
    pub fn fork_at(&mut self, at: &Place) -> usize {
        let steps = self.steps_at(at);
        match steps.last() {
            Some(Step::Fork { id, .. }) => *id,
            _ => {
                let id = new_fork_id();
                steps.push(Step::Fork {
                    id,
                    branches: Vec::new(),
                });
                id
            }
        }
    }

    /// Runs `f` on the steps at `path` ([`Stream::open_branch`]) as if they were a stream's.
    pub fn edit_branch(&mut self, at: &Place, f: impl FnOnce(Stream) -> Stream) {
        let steps = std::mem::take(self.steps_at(at));
        let edited = f(Stream {
            steps,
            ..Stream::branch()
        });
        *self.steps_at(at) = edited.steps;
    }

    fn steps_at(&mut self, at: &Place) -> &mut Vec<Step> {
        let mut steps = match &at.root {
            Root::Main => &mut self.steps,
            Root::Source(topic) => self.routes.entry(topic.clone()).or_default(),
            Root::Junction(n) => &mut self.junctions[*n],
        };
        for &b in &at.path {
            match steps.last_mut() {
                Some(Step::Fork { branches, .. }) if b < branches.len() => steps = &mut branches[b],
                _ => panic!("no branch {b} at the end of these steps"),
            }
        }
        steps
    }

    /// Keeps the records for which `f(key, value)` holds.
    pub fn filter(mut self, f: impl Fn(&[u8], &[u8]) -> bool + Send + Sync + 'static) -> Self {
        self.steps.push(Step::Filter(Arc::new(f)));
        self
    }

    /// Replaces each value with `f(key, value)`.
    pub fn map_values(
        mut self,
        f: impl Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::MapValues(Arc::new(f)));
        self
    }

    /// Replaces each record with `f(key, value)`. Not allowed before a stateful step.
    pub fn map(
        mut self,
        f: impl Fn(&[u8], &[u8]) -> (Vec<u8>, Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::Map(Arc::new(f)));
        self
    }

    /// Replaces each record with the records `f(key, value)` returns (none, one or many).
    /// Keys may change: not allowed before a stateful step. A delete is dropped.
    pub fn flat_map(
        self,
        f: impl Fn(&[u8], &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> + Send + Sync + 'static,
    ) -> Self {
        self.flat_map_records(values_only(f, false), RecordEffect::ChangesKeys)
    }

    /// As [`Stream::flat_map`], for an `f` that keeps each record's key (a typed layer that
    /// decodes and encodes it again): allowed before a stateful step. A delete passes on.
    pub fn flat_map_keeping_keys(
        self,
        f: impl Fn(&[u8], &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> + Send + Sync + 'static,
    ) -> Self {
        self.flat_map_records(values_only(f, true), RecordEffect::KeepsKeys)
    }

    /// As [`Stream::flat_map_keeping_keys`], for an `f` that also gives at most one record per
    /// record (a typed layer's steps after a table's `to_stream`): a table's updates stay a
    /// table's updates, and the record cache applies to the sink.
    pub fn map_updates(
        self,
        f: impl Fn(&[u8], &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> + Send + Sync + 'static,
    ) -> Self {
        self.flat_map_records(values_only(f, true), RecordEffect::KeepsUpdates)
    }

    /// Replaces each record, a delete (`None`) too, with the records `f(key, value)` returns,
    /// deletes too; `effect` says what `f` does to keys and record counts.
    pub fn flat_map_records(
        mut self,
        f: impl Fn(&[u8], Option<&[u8]>) -> Records + Send + Sync + 'static,
        effect: RecordEffect,
    ) -> Self {
        self.steps.push(Step::FlatMap {
            f: Arc::new(f),
            keeps_keys: effect != RecordEffect::ChangesKeys,
            updates: effect == RecordEffect::KeepsUpdates,
        });
        self
    }

    /// Sets each record's key in `store` to its value, with its timestamp (a timestamped
    /// store), or removes the key for a delete, and passes the record on (Kafka Streams'
    /// `toTable` with a store). Its changelog is `<app id>-<store>-changelog`.
    pub fn upsert(mut self, store: &str) -> Self {
        self.steps.push(Step::Upsert {
            store: store.to_owned(),
        });
        self
    }

    /// Replaces each record with one record per value `f(key, value)` returns, same key.
    pub fn flat_map_values(
        mut self,
        f: impl Fn(&[u8], &[u8]) -> Vec<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::FlatMapValues(Arc::new(f)));
        self
    }

    /// Calls `f(key, value)` for each record and passes it on unchanged.
    pub fn peek(mut self, f: impl Fn(&[u8], &[u8]) + Send + Sync + 'static) -> Self {
        self.steps.push(Step::Peek(Arc::new(f)));
        self
    }

    /// Folds each key's values into `store` with `f(current, key, value)`; passes on
    /// `(key, new aggregate)`.
    pub fn aggregate(
        self,
        store: &str,
        f: impl Fn(Option<&[u8]>, &[u8], &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.aggregate_as(store, Layout::Plain, f)
    }

    /// As [`Stream::aggregate`], with the store's values laid out as `layout` says (what `f`
    /// sees and passes on is the aggregate alone).
    pub fn aggregate_as(
        mut self,
        store: &str,
        layout: Layout,
        f: impl Fn(Option<&[u8]>, &[u8], &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::Aggregate {
            store: store.to_owned(),
            f: Arc::new(move |c: Option<&[u8]>, k: &[u8], v: &[u8]| Some(f(c, k, v))),
            layout,
        });
        self
    }

    /// Folds each key's values into `store` per time window of the record's timestamp
    /// (Kafka Streams' `windowedBy(...).aggregate`): keys in the store as
    /// [`window_store_key`], values [`Layout::Timestamped`]; passes on
    /// `(windowed_key(key, start), new aggregate)` for each window the record updates.
    pub fn window_aggregate(
        mut self,
        store: &str,
        windows: Windows,
        f: impl Fn(Option<&[u8]>, &[u8], &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::WindowAggregate {
            store: store.to_owned(),
            windows,
            f: Arc::new(move |c: Option<&[u8]>, k: &[u8], v: &[u8]| Some(f(c, k, v))),
        });
        self
    }

    /// Counts records per key into `store` (an 8-byte big-endian count); passes on
    /// `(key, count)`.
    pub fn count(self, store: &str) -> Self {
        self.aggregate(store, |current, _, _| {
            (decode_count(current).unwrap_or(0) + 1)
                .to_be_bytes()
                .to_vec()
        })
    }

    /// Reads `topic` into `store` as a table, as Kafka Streams' `builder.table(topic)`: each
    /// record sets its key's value (its value bytes as they are), a record without a value
    /// deletes it. The topic is the store's changelog (no second copy): restores, warm-ups
    /// and standbys read it. It must be co-partitioned with the stream's other sources.
    pub fn table(mut self, topic: &str, store: &str) -> Self {
        self.sources.push(topic.to_owned());
        self.tables.push((topic.to_owned(), store.to_owned()));
        self
    }

    /// Joins each record with the value of its key in the table `store` ([`Stream::table`]);
    /// records whose key the table lacks are dropped. Passes on `(key, join_frame(value,
    /// Some(table value)))`.
    pub fn join_table(mut self, store: &str) -> Self {
        self.steps.push(Step::Join {
            store: store.to_owned(),
            inner: true,
            kept: false,
        });
        self
    }

    /// As [`Stream::join_table`] (`inner`) or [`Stream::left_join_table`], with the rows an
    /// aggregation or an upsert of this stream keeps in `store` (timestamped): the table of
    /// a `count`, a `reduce`, a `to_table`.
    pub fn join_kept(mut self, store: &str, inner: bool) -> Self {
        self.steps.push(Step::Join {
            store: store.to_owned(),
            inner,
            kept: true,
        });
        self
    }

    /// As [`Stream::join_table`], keeping records whose key the table lacks (with `None`).
    pub fn left_join_table(mut self, store: &str) -> Self {
        self.steps.push(Step::Join {
            store: store.to_owned(),
            inner: false,
            kept: false,
        });
        self
    }

    /// Runs `f` on each record with `stores` (Kafka Streams' `process` with named stores):
    /// each a plain key-value store with a changelog, `f` forwarding any records. Keys may
    /// change: not allowed before a stateful step.
    pub fn process(
        mut self,
        stores: &[&str],
        f: impl Fn(TaskId, &StreamRecord, i64, &mut dyn Stores) -> Result<Vec<StreamRecord>, StoreError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.steps.push(Step::Process {
            stores: stores.iter().map(|s| (*s).to_owned()).collect(),
            f: Arc::new(f),
            wall: None,
        });
        self
    }

    /// Adds a wall-clock punctuation to the `process` step just added: `p(task, now_ms,
    /// stream_time, stores)` runs every `every` of wall-clock time on each running active of
    /// the sub-topology, its records going on through the later steps.
    pub fn punctuated_every(
        mut self,
        every: Duration,
        p: impl Fn(TaskId, i64, i64, &mut dyn Stores) -> Result<Vec<StreamRecord>, StoreError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        if let Some(Step::Process { wall, .. }) = self.steps.last_mut() {
            *wall = Some((every, Arc::new(p)));
        }
        self
    }

    /// Writes the stream's records to `topic`, partitioned by key; nothing comes after.
    pub fn to(mut self, topic: &str) -> Self {
        self.steps.push(Step::To {
            topic: topic.to_owned(),
            sink: 0,
        });
        self
    }

    /// Folds each record into `store` (timestamped) with `f(current, key, value)`, which may
    /// remove the key (`None`: a delete goes on); passes on the new aggregate with the old
    /// ([`StreamRecord::old`]). Kafka Streams' `KGroupedTable` aggregations.
    pub fn aggregate_or_remove(
        mut self,
        store: &str,
        f: impl Fn(Option<&[u8]>, &[u8], &[u8]) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::Aggregate {
            store: store.to_owned(),
            f: Arc::new(f),
            layout: Layout::Timestamped,
        });
        self
    }

    /// Aggregates each record into its key's sliding windows ([`Step::SlidingAggregate`]).
    pub fn sliding_aggregate(
        mut self,
        store: &str,
        sliding: sliding::Sliding,
        f: impl Fn(Option<&[u8]>, &[u8], &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::SlidingAggregate {
            store: store.to_owned(),
            sliding,
            f: Arc::new(move |current, key, value| Some(f(current, key, value))),
        });
        self
    }

    /// Aggregates each key's records per session ([`Step::SessionAggregate`]): `f(current or
    /// None to start, key, value)`, `merge(key, aggregate so far or None to start, session)`.
    pub fn session_aggregate(
        mut self,
        store: &str,
        sessions: Sessions,
        f: impl Fn(Option<&[u8]>, &[u8], &[u8]) -> Vec<u8> + Send + Sync + 'static,
        merge: impl Fn(&[u8], Option<&[u8]>, &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::SessionAggregate {
            store: store.to_owned(),
            sessions,
            f: Arc::new(move |c: Option<&[u8]>, k: &[u8], v: &[u8]| Some(f(c, k, v))),
            merge: Arc::new(merge),
        });
        self
    }

    /// Joins each table update with the other side's row ([`Step::TableJoin`]).
    pub fn table_join(mut self, other: &str, left: bool, kind: TableJoinKind) -> Self {
        self.steps.push(Step::TableJoin {
            other: other.to_owned(),
            left,
            kind,
        });
        self
    }

    /// Stores each record in `store` for a stream-stream join ([`Step::JoinWindow`]).
    pub fn join_window(mut self, store: &str, retention_ms: i64) -> Self {
        self.steps.push(Step::JoinWindow {
            store: store.to_owned(),
            retention_ms,
        });
        self
    }

    /// Joins each record with the other side's records within the window
    /// ([`Step::WindowJoin`]); with `unmatched`, a left or outer join.
    pub fn window_join(
        mut self,
        other: &str,
        (before_ms, after_ms): (i64, i64),
        left: bool,
        unmatched: Option<Unmatched>,
    ) -> Self {
        self.steps.push(Step::WindowJoin {
            other: other.to_owned(),
            before_ms,
            after_ms,
            left,
            unmatched,
        });
        self
    }

    /// Sends each table update `(key, new value, old value)` on as the records `f` gives,
    /// keys changed: Kafka Streams' `KTable.groupBy`. Its records must come straight from a
    /// store step that knows the old value ([`Stream::aggregate_as`], [`Stream::upsert`]).
    pub fn regroup(
        mut self,
        f: impl Fn(&[u8], Option<&[u8]>, Option<&[u8]>) -> Records + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::Regroup(Arc::new(f)));
        self
    }

    /// Joins each record with the row of a global table ([`Step::GlobalJoin`]).
    pub fn global_join(
        mut self,
        store: &str,
        key: impl Fn(&[u8], &[u8]) -> Option<Vec<u8>> + Send + Sync + 'static,
        inner: bool,
    ) -> Self {
        self.steps.push(Step::GlobalJoin {
            store: store.to_owned(),
            key: Arc::new(key),
            inner,
        });
        self
    }

    /// Holds each table update back in a buffer store until its time has come (Kafka
    /// Streams' `suppress`, [`suppress::Suppression`]); the store's changelog is Kafka's
    /// suppression buffer's.
    pub fn suppress(mut self, s: suppress::Suppression) -> Self {
        self.steps.push(Step::Suppress(Arc::new(s)));
        self
    }

    /// One of a foreign-key join's steps ([`fk_join`]).
    pub fn foreign_key(mut self, step: fk_join::ForeignKeyStep) -> Self {
        self.steps.push(Step::ForeignKey(Arc::new(step)));
        self
    }

    /// Tables first, then the steps' stores: the order of the task's changelogs.
    fn stores(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.tables.iter().map(|(_, s)| s.as_str()).collect();
        self.walk_all(&mut |s| match s {
            Step::Aggregate { store, .. }
            | Step::WindowAggregate { store, .. }
            | Step::SessionAggregate { store, .. }
            | Step::SlidingAggregate { store, .. }
            | Step::JoinWindow { store, .. }
            | Step::Upsert { store } => out.push(store),
            Step::Suppress(b) => out.push(&b.store),
            Step::ForeignKey(f) => match f.kept_store() {
                Some(store) if !out.contains(&store) => out.push(store),
                _ => {}
            },
            Step::Process { stores, .. } => out.extend(stores.iter().map(String::as_str)),
            // Both sides of a join share it.
            Step::WindowJoin {
                unmatched: Some(u), ..
            } if !out.contains(&u.store.as_str()) => out.push(&u.store),
            _ => {}
        });
        out
    }

    /// What `f` says of the first step (of any root) it says something of.
    fn find<T>(&self, f: impl Fn(&Step) -> Option<T>) -> Option<T> {
        let mut found = None;
        self.walk_all(&mut |s| {
            if found.is_none() {
                found = f(s);
            }
        });
        found
    }

    fn windows_of(&self, store: &str) -> Option<Windows> {
        self.find(|s| match s {
            Step::WindowAggregate {
                store: name,
                windows,
                ..
            } if name == store => Some(*windows),
            // For reading: a sliding window `[start, start + diff]` ends `diff` after it starts.
            Step::SlidingAggregate {
                store: name,
                sliding,
                ..
            } if name == store => Some(Windows {
                size_ms: sliding.diff_ms,
                advance_ms: sliding.diff_ms,
                grace_ms: sliding.grace_ms,
            }),
            _ => None,
        })
    }

    fn sliding_of(&self, store: &str) -> Option<sliding::Sliding> {
        self.find(|s| match s {
            Step::SlidingAggregate {
                store: name,
                sliding,
                ..
            } if name == store => Some(*sliding),
            _ => None,
        })
    }

    /// Whether a [`Step::Join`] of this stream may read `store`: a table it reads, or with
    /// `kept` a store it keeps timestamped.
    fn joinable(&self, store: &str, kept: bool) -> bool {
        match kept {
            false => self.tables.iter().any(|(_, t)| t == store),
            true => self.keeps_timestamped(store),
        }
    }

    /// Whether an aggregation or an upsert of this stream keeps `store`, timestamped.
    fn keeps_timestamped(&self, store: &str) -> bool {
        self.find(|s| match s {
            Step::Aggregate {
                store: name,
                layout: Layout::Timestamped,
                ..
            }
            | Step::Upsert { store: name }
                if name == store =>
            {
                Some(())
            }
            _ => None,
        })
        .is_some()
    }

    fn join_retention_of(&self, store: &str) -> Option<i64> {
        self.find(|s| match s {
            Step::JoinWindow {
                store: name,
                retention_ms,
            } if name == store => Some(*retention_ms),
            _ => None,
        })
    }

    fn sessions_of(&self, store: &str) -> Option<Sessions> {
        self.find(|s| match s {
            Step::SessionAggregate {
                store: name,
                sessions,
                ..
            } if name == store => Some(*sessions),
            _ => None,
        })
    }

    /// The sink topics, in the order of their first `to`.
    fn sinks(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        self.walk_all(&mut |s| {
            if let Step::To { topic, .. } = s {
                if !out.contains(&topic.as_str()) {
                    out.push(topic);
                }
            }
        });
        out
    }
}

/// Checks the steps at `at` of stream `i`; `key_changed` is where a step before them changed
/// keys, if one did.
/// What a [`Stream::flat_map_records`] step does to keys and record counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordEffect {
    /// Keys may change: not allowed before a stateful step of the same stream.
    ChangesKeys,
    /// Each record gives any number with its key.
    KeepsKeys,
    /// Each record gives at most one with its key: a table's updates stay a table's.
    KeepsUpdates,
}

/// A step over values as one over records that may be deletes: a delete passes on as it is
/// when the step keeps keys, else it is dropped (no key can be computed without a value).
fn values_only(
    f: impl Fn(&[u8], &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> + Send + Sync + 'static,
    keeps_keys: bool,
) -> impl Fn(&[u8], Option<&[u8]>) -> Records + Send + Sync + 'static {
    move |k, v| match v {
        Some(v) => f(k, v).into_iter().map(|(k, v)| (k, Some(v))).collect(),
        None if keeps_keys => vec![(k.to_vec(), None)],
        None => Vec::new(),
    }
}

/// Checks every root of stream `i`: a junction counts as after a key change when any path
/// into it changed keys.
fn check_stream(i: usize, s: &Stream) -> Result<(), TopologyError> {
    let mut into = vec![None; s.junctions.len()];
    check_steps(i, s, (&s.steps, "steps"), None, &mut into)?;
    for (topic, steps) in &s.routes {
        check_steps(i, s, (steps, &format!("routes[{topic}]")), None, &mut into)?;
    }
    for (n, steps) in s.junctions.iter().enumerate() {
        let keys = into[n].clone();
        check_steps(i, s, (steps, &format!("junctions[{n}]")), keys, &mut into)?;
    }
    Ok(())
}

fn check_steps(
    i: usize,
    s: &Stream,
    (steps, at): (&[Step], &str),
    mut key_changed: Option<String>,
    into: &mut [Option<String>],
) -> Result<(), TopologyError> {
    for (j, step) in steps.iter().enumerate() {
        let here = format!("{at}[{j}]");
        if matches!(
            step,
            Step::Fork { .. } | Step::To { .. } | Step::Junction(_)
        ) && j + 1 < steps.len()
        {
            return Err(TopologyError::Invalid(format!(
                "streams[{i}].{here}: nothing may follow a `to`, a fork or a junction in its branch"
            )));
        }
        if let Some(e) = bad_shape(i, s, step) {
            return Err(e);
        }
        if let (Some(store), Some(step)) = (keyed_store(step), &key_changed) {
            return Err(TopologyError::KeyChangeBeforeState {
                stream: i,
                step: step.clone(),
                store: store.to_owned(),
            });
        }
        match step {
            Step::Map(_)
            | Step::Process { .. }
            | Step::Regroup(_)
            | Step::FlatMap {
                keeps_keys: false, ..
            } => key_changed = key_changed.or(Some(here)),
            Step::ForeignKey(f) if f.changes_keys() => key_changed = key_changed.or(Some(here)),
            Step::Fork { branches, .. } => {
                for (b, branch) in branches.iter().enumerate() {
                    let at = format!("{here}.branches[{b}]");
                    check_steps(i, s, (branch, &at), key_changed.clone(), into)?;
                }
            }
            Step::Junction(n) => match into.get_mut(*n) {
                Some(keys) => *keys = keys.take().or(key_changed.clone()),
                None => {
                    return Err(TopologyError::Invalid(format!(
                        "streams[{i}].{here}: no junction {n}"
                    )))
                }
            },
            _ => {}
        }
    }
    Ok(())
}

/// A stateful step's store, which its records must reach keyed as they came.
fn keyed_store(step: &Step) -> Option<&str> {
    match step {
        Step::Aggregate { store, .. }
        | Step::WindowAggregate { store, .. }
        | Step::SessionAggregate { store, .. }
        | Step::SlidingAggregate { store, .. }
        | Step::JoinWindow { store, .. }
        | Step::WindowJoin { other: store, .. }
        | Step::TableJoin { other: store, .. }
        | Step::Upsert { store }
        | Step::Join { store, .. } => Some(store),
        Step::Suppress(b) => Some(&b.store),
        _ => None,
    }
}

/// What is wrong with a step of stream `i` on its own: windows that cannot work, a join of a
/// table the stream does not have.
fn bad_shape(i: usize, s: &Stream, step: &Step) -> Option<TopologyError> {
    let bad_windows = |store: &String, size_ms, advance_ms, grace_ms| {
        Some(TopologyError::BadWindows {
            stream: i,
            store: store.clone(),
            size_ms,
            advance_ms,
            grace_ms,
        })
    };
    match step {
        Step::WindowAggregate {
            store, windows: w, ..
        } if w.size_ms <= 0 || w.advance_ms <= 0 || w.advance_ms > w.size_ms || w.grace_ms < 0 => {
            bad_windows(store, w.size_ms, w.advance_ms, w.grace_ms)
        }
        Step::SlidingAggregate { store, sliding, .. }
            if sliding.diff_ms < 0 || sliding.grace_ms < 0 =>
        {
            bad_windows(store, sliding.diff_ms, 1, sliding.grace_ms)
        }
        Step::Join { store, kept, .. } if !s.joinable(store, *kept) => {
            Some(TopologyError::UnknownTable {
                stream: i,
                store: store.clone(),
            })
        }
        Step::SessionAggregate {
            store, sessions: w, ..
        } if w.gap_ms <= 0 || w.grace_ms < 0 => Some(TopologyError::BadSessions {
            stream: i,
            store: store.clone(),
            gap_ms: w.gap_ms,
            grace_ms: w.grace_ms,
        }),
        _ => None,
    }
}

/// Sets each `to`'s index among `names`; a sink is a table's only if every `to` of it comes
/// after an aggregation and only steps that keep the key and give at most one record per
/// record (`table` says whether the steps before these do).
fn number_sinks(steps: &mut [Step], names: &[String], mut table: bool, tables: &mut [bool]) {
    for step in steps {
        match step {
            Step::Aggregate { .. }
            | Step::WindowAggregate { .. }
            | Step::SessionAggregate { .. }
            | Step::SlidingAggregate { .. }
            | Step::Upsert { .. } => table = true,
            Step::Filter(_)
            | Step::MapValues(_)
            | Step::Peek(_)
            | Step::Join { .. }
            | Step::GlobalJoin { .. }
            | Step::JoinWindow { .. }
            | Step::Suppress(_)
            | Step::FlatMap { updates: true, .. } => {}
            Step::ForeignKey(f) => table = !f.changes_keys(),
            // A junction's records come from several paths: not one table's updates.
            Step::Map(_)
            | Step::FlatMap { .. }
            | Step::FlatMapValues(_)
            | Step::Process { .. }
            | Step::Regroup(_)
            | Step::WindowJoin { .. }
            | Step::TableJoin { .. }
            | Step::Junction(_) => table = false,
            Step::Fork { branches, .. } => {
                // Two branches may write the same key: read as a table, the topic then holds
                // whichever came last, as it would without the cache.
                for b in branches {
                    number_sinks(b, names, table, tables);
                }
            }
            Step::To { topic, sink } => {
                let ix = names.iter().position(|n| n == topic).unwrap_or(0);
                *sink = ix as u16;
                tables[ix] &= table;
            }
        }
    }
}

/// A count as [`Stream::count`] stores it; `None` if absent or not 8 bytes.
pub fn decode_count(value: Option<&[u8]>) -> Option<i64> {
    value
        .and_then(|v| <[u8; 8]>::try_from(v).ok())
        .map(i64::from_be_bytes)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("application id {0:?}: use 1 to 200 of [a-zA-Z0-9._-]")]
    BadAppId(String),
    #[error("the topology has no stream")]
    Empty,
    #[error("streams[{0}]: no source topic")]
    NoSource(usize),
    #[error("streams[{stream}]: topic {topic:?} is already a source of streams[{first}]")]
    SharedSource {
        stream: usize,
        first: usize,
        topic: String,
    },
    #[error("streams[{stream}]: store {store:?} is already used by streams[{first}]")]
    SharedStore {
        stream: usize,
        first: usize,
        store: String,
    },
    #[error("streams[{stream}].{step}: `map` changes keys before the stateful step on store {store:?}; use `map_values`, or group through a repartition topic")]
    KeyChangeBeforeState {
        stream: usize,
        step: String,
        store: String,
    },
    #[error("streams[{stream}]: store {store:?}: windows of {size_ms} ms advancing by {advance_ms} ms with {grace_ms} ms of grace: the size must be positive, the advance positive and at most the size, the grace not negative")]
    BadWindows {
        stream: usize,
        store: String,
        size_ms: i64,
        advance_ms: i64,
        grace_ms: i64,
    },
    #[error("streams[{stream}]: store {store:?}: sessions with a gap of {gap_ms} ms and {grace_ms} ms of grace: the gap must be positive, the grace not negative")]
    BadSessions {
        stream: usize,
        store: String,
        gap_ms: i64,
        grace_ms: i64,
    },
    #[error("streams[{stream}]: a join reads store {store:?}, which is not a table of this stream (a table joined must be read or kept in the joining stream's sub-topology)")]
    UnknownTable { stream: usize, store: String },
    #[error("{0}")]
    Invalid(String),
    #[error("streams[{stream}]: sources are not co-partitioned: {detail}")]
    NotCoPartitioned { stream: usize, detail: String },
    #[error("repartition topic {topic:?}: {why}")]
    BadRepartition { topic: String, why: String },
    #[error("topic {0:?} does not exist: create the input topic before starting (Baton never creates it)")]
    MissingTopic(String),
    #[error("topic {topic:?} has {found} partitions where this application needs {expected} (one per input partition); delete it or use another --app-id")]
    PartitionMismatch {
        topic: String,
        expected: u32,
        found: u32,
    },
}

/// A validated application.
#[derive(Clone)]
pub struct Topology {
    app_id: String,
    streams: Vec<Stream>,
    /// Per sub-topology, its sink topics in [`Emitted::sink`]'s order.
    sinks: Vec<Vec<String>>,
    /// Per sub-topology, per sink: whether it carries a table's updates
    /// ([`Topology::sink_is_table`]).
    table_sinks: Vec<Vec<bool>>,
    /// Topics Baton creates and owns: each the sink of one stream and the source of a later
    /// one, with the writing stream's partition count.
    repartition: BTreeSet<String>,
    /// Repartition topics made with a partition count of their own (Kafka's
    /// `Repartitioned.withNumberOfPartitions`), not the writing stream's.
    repartition_partitions: BTreeMap<String, u32>,
    /// What `describe` prints, when the builder knows more than the streams say.
    description: Option<String>,
    globals: Vec<GlobalTable>,
    /// The suppression buffers' stores, whose changelog records carry headers: found once,
    /// read for every batch's changelog writes.
    buffers: BTreeSet<String>,
    /// Window stores of `process` steps: how long their windows are kept
    /// ([`Topology::with_window_store`]).
    window_stores: BTreeMap<String, i64>,
    /// How each store's keys and values read, for queries; bytes where not set.
    formats: BTreeMap<String, StoreFormat>,
}

/// What a query needs to know of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreInfo {
    pub subtopology: u32,
    pub format: StoreFormat,
    /// How its values are laid out (a window store's are timestamped).
    pub layout: Layout,
    pub windows: Option<Windows>,
    /// A session store's sessions (keys [`session_key`], plain values).
    pub sessions: Option<Sessions>,
}

/// What a store holds, as queries tell it: by key and window, by key and session, or by key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Window,
    Session,
    KeyValue,
}

impl StoreKind {
    /// The kind's name in `/v1/stores`.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Window => "window",
            StoreKind::Session => "session",
            StoreKind::KeyValue => "key-value",
        }
    }
}

impl StoreInfo {
    pub fn kind(&self) -> StoreKind {
        match (self.windows, self.sessions) {
            (_, Some(_)) => StoreKind::Session,
            (Some(_), _) => StoreKind::Window,
            _ => StoreKind::KeyValue,
        }
    }
}

/// Where a processed record goes.
pub trait Stores {
    fn get(&mut self, store: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// The entries with keys in `from..=to`, in key order, writes not yet stored included.
    fn range(&mut self, store: &str, from: &[u8], to: &[u8]) -> Result<Entries, StoreError>;
    /// Sets `key`'s value, or deletes it (`None`: a tombstone in the changelog).
    fn write(&mut self, store: &str, key: &[u8], value: Option<Vec<u8>>);

    /// The first entry of the suppression buffer `store` by (buffer time, key), among keys
    /// `skip` passes over, writes not yet stored included: its time
    /// ([`suppress::buffer_time`]) and key.
    fn buffer_head(
        &mut self,
        store: &str,
        skip: &dyn Fn(&[u8]) -> bool,
    ) -> Result<BufferHead, StoreError>;

    /// How many entries the suppression buffer `store` holds, and their keys' and values'
    /// bytes, writes not yet stored included.
    fn buffer_totals(&mut self, store: &str) -> Result<(u64, u64), StoreError>;

    /// As [`Stores::write`], with a key the caller no longer needs: a store that keeps it
    /// takes it as it is.
    fn write_owned(&mut self, store: &str, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.write(store, &key, value);
    }

    fn put(&mut self, store: &str, key: &[u8], value: Vec<u8>) {
        self.write(store, key, Some(value));
    }

    fn delete(&mut self, store: &str, key: &[u8]) {
        self.write(store, key, None);
    }
}

/// Where an absorbed stream's places went ([`Stream::absorb_stream`]): its main steps are
/// the route of `main_topic`, its junction `n` is `n + junction_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Absorbed {
    pub main_topic: Option<String>,
    pub junction_offset: usize,
}

impl Absorbed {
    /// `place` of the absorbed stream, as a place of the stream that took it in; `None` for
    /// its main steps when it had none taking them.
    pub fn place(&self, place: &Place) -> Option<Place> {
        let root = match &place.root {
            Root::Main => Root::Source(self.main_topic.clone()?),
            Root::Source(t) => Root::Source(t.clone()),
            Root::Junction(n) => Root::Junction(n + self.junction_offset),
        };
        Some(Place {
            root,
            path: place.path.clone(),
        })
    }
}

/// Adds `offset` to every junction number in `steps`, forks' branches too.
fn shift_junctions(steps: &mut [Step], offset: usize) {
    for step in steps {
        match step {
            Step::Junction(n) => *n += offset,
            Step::Fork { branches, .. } => {
                for b in branches {
                    shift_junctions(b, offset);
                }
            }
            _ => {}
        }
    }
}

/// Checks that each global table has a placeholder stream, a store and a topic of its own,
/// and that every global join reads one.
fn check_globals(streams: &[Stream], globals: &[GlobalTable]) -> Result<(), TopologyError> {
    let bad = |why: String| Err(TopologyError::Invalid(why));
    for (n, g) in globals.iter().enumerate() {
        match streams.get(g.subtopology as usize) {
            Some(s) if s.sources.is_empty() && s.steps.is_empty() => {}
            _ => {
                return bad(format!(
                    "global table {}: sub-topology {} is not an empty placeholder",
                    g.store, g.subtopology
                ))
            }
        }
        let stream_source = streams.iter().any(|s| s.sources.contains(&g.topic));
        let task_store = streams
            .iter()
            .any(|s| s.stores().contains(&g.store.as_str()));
        let twice = globals[..n]
            .iter()
            .any(|o| o.store == g.store || o.topic == g.topic);
        if stream_source || task_store || twice {
            return bad(format!(
                "global table {} of {}: its topic and store must be its own",
                g.store, g.topic
            ));
        }
    }
    for s in streams {
        let mut missing = None;
        s.walk_all(&mut |step| {
            if let Step::GlobalJoin { store, .. } = step {
                if !globals.iter().any(|g| &g.store == store) {
                    missing = Some(store.clone());
                }
            }
        });
        if let Some(store) = missing {
            return bad(format!(
                "a global join reads {store}, which is no global table"
            ));
        }
    }
    Ok(())
}

/// Headers of a store's changelog records: (key, value).
pub type ChangelogHeaders = &'static [(&'static str, &'static [u8])];

/// A suppression buffer's first entry: its buffer time and key.
pub type BufferHead = Option<(i64, Vec<u8>)>;

/// The first of `base` (the head of the entries under the writes, found with the written keys
/// skipped) and of `writes`' values (`None`: removed), keys `skip` takes passed over.
pub fn overlay_head<'w>(
    base: BufferHead,
    writes: impl IntoIterator<Item = (&'w [u8], Option<&'w [u8]>)>,
    skip: &dyn Fn(&[u8]) -> bool,
) -> BufferHead {
    let written = writes
        .into_iter()
        .filter_map(|(k, v)| Some((suppress::buffer_time(v?), k)))
        .filter(|(_, k)| !skip(k))
        .min();
    match (base, written) {
        (Some(b), Some((t, k))) if (t, k) < (b.0, b.1.as_slice()) => Some((t, k.to_vec())),
        (None, Some((t, k))) => Some((t, k.to_vec())),
        (b, _) => b,
    }
}

/// `totals` (entries, key and value bytes) with each written key's entry `before` replaced by
/// its write.
pub fn overlay_totals<'w>(
    (mut entries, mut bytes): (u64, u64),
    writes: impl IntoIterator<Item = (&'w [u8], Option<&'w [u8]>, Option<u64>)>,
) -> (u64, u64) {
    for (k, v, before) in writes {
        if let Some(size) = before {
            entries = entries.saturating_sub(1);
            bytes = bytes.saturating_sub(size);
        }
        if let Some(v) = v {
            entries += 1;
            bytes += (k.len() + v.len()) as u64;
        }
    }
    (entries, bytes)
}

/// `base` (entries in key order) with `writes` in `from..=to` applied over it, in order (a
/// later write of a key replaces an earlier one; `None` removes it): a range read that sees
/// writes not yet stored.
pub fn overlay_range<'w>(
    base: Entries,
    writes: impl IntoIterator<Item = (&'w [u8], Option<&'w [u8]>)>,
    from: &[u8],
    to: &[u8],
) -> Entries {
    let mut all: BTreeMap<Vec<u8>, Vec<u8>> = base.into_iter().collect();
    for (k, v) in writes {
        if k < from || k > to {
            continue;
        }
        match v {
            Some(v) => all.insert(k.to_vec(), v.to_vec()),
            None => all.remove(k),
        };
    }
    all.into_iter().collect()
}

/// A topic read whole on every instance into a store of its own: Kafka Streams' global
/// table. Its sub-topology number is taken (as Kafka numbers its node group) but makes no
/// tasks: the stream at that index is an empty placeholder ([`Stream::from`] no topics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalTable {
    pub topic: String,
    pub store: String,
    pub subtopology: u32,
}

impl Topology {
    pub fn new(app_id: &str, streams: Vec<Stream>) -> Result<Topology, TopologyError> {
        Topology::with_globals(app_id, streams, Vec::new())
    }

    /// A topology with global tables besides its streams ([`GlobalTable`]).
    pub fn with_globals(
        app_id: &str,
        streams: Vec<Stream>,
        globals: Vec<GlobalTable>,
    ) -> Result<Topology, TopologyError> {
        check_globals(&streams, &globals)?;
        let mut t = Topology::build(app_id, streams, &globals)?;
        t.globals = globals;
        Ok(t)
    }

    fn build(
        app_id: &str,
        streams: Vec<Stream>,
        globals: &[GlobalTable],
    ) -> Result<Topology, TopologyError> {
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if app_id.is_empty() || app_id.len() > 200 || !app_id.chars().all(valid) {
            return Err(TopologyError::BadAppId(app_id.to_owned()));
        }
        if streams.is_empty() {
            return Err(TopologyError::Empty);
        }
        let mut source_of: BTreeMap<&str, usize> = BTreeMap::new();
        let mut store_of: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, s) in streams.iter().enumerate() {
            if s.sources.is_empty() {
                if globals.iter().any(|g| g.subtopology as usize == i) {
                    continue;
                }
                return Err(TopologyError::NoSource(i));
            }
            for t in &s.sources {
                if let Some(&first) = source_of.get(t.as_str()) {
                    return Err(TopologyError::SharedSource {
                        stream: i,
                        first,
                        topic: t.clone(),
                    });
                }
                source_of.insert(t, i);
            }
            for store in s.stores() {
                if let Some(&first) = store_of.get(store) {
                    return Err(TopologyError::SharedStore {
                        stream: i,
                        first,
                        store: store.to_owned(),
                    });
                }
                store_of.insert(store, i);
            }
            check_stream(i, s)?;
        }
        let mut buffers = BTreeSet::new();
        for s in &streams {
            s.walk_all(&mut |step| {
                if let Step::Suppress(b) = step {
                    buffers.insert(b.store.clone());
                }
            });
        }
        let mut streams = streams;
        let mut table_sinks = Vec::with_capacity(streams.len());
        let mut sinks = Vec::with_capacity(streams.len());
        for s in &mut streams {
            let names: Vec<String> = s.sinks().into_iter().map(str::to_owned).collect();
            let mut tables = vec![true; names.len()];
            number_sinks(&mut s.steps, &names, false, &mut tables);
            for steps in s.routes.values_mut().chain(s.junctions.iter_mut()) {
                number_sinks(steps, &names, false, &mut tables);
            }
            table_sinks.push(tables);
            sinks.push(names);
        }
        Ok(Topology {
            app_id: app_id.to_owned(),
            streams,
            sinks,
            table_sinks,
            repartition: BTreeSet::new(),
            repartition_partitions: BTreeMap::new(),
            description: None,
            formats: BTreeMap::new(),
            globals: Vec::new(),
            buffers,
            window_stores: BTreeMap::new(),
        })
    }

    /// Says how `store`'s keys and values read (their serdes), for queries.
    pub fn with_store_format(mut self, store: &str, format: StoreFormat) -> Topology {
        self.formats.insert(store.to_owned(), format);
        self
    }

    /// Whether sub-topology `sub` takes its sources' deletes through its steps.
    pub fn takes_deletes(&self, sub: u32) -> bool {
        self.streams.get(sub as usize).is_some_and(|s| s.deletes)
    }

    /// Whether sub-topology `sub` takes the deletes of source `topic` through its steps.
    pub fn takes_deletes_from(&self, sub: u32, topic: &str) -> bool {
        self.streams
            .get(sub as usize)
            .is_some_and(|s| s.deletes || s.delete_routes.contains(topic))
    }

    /// Every store, by name.
    pub fn store_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.streams.iter().flat_map(|s| s.stores()).collect();
        names.sort_unstable();
        names
    }

    /// Where `store` lives and how it reads, if the topology has it.
    pub fn store_info(&self, store: &str) -> Option<StoreInfo> {
        let (sub, stream) = self
            .streams
            .iter()
            .enumerate()
            .find(|(_, s)| s.stores().contains(&store))?;
        let windows = stream.windows_of(store);
        let mut layout = if windows.is_some() {
            Layout::Timestamped
        } else {
            Layout::Plain
        };
        stream.walk_all(&mut |step| match step {
            Step::Aggregate {
                store: name,
                layout: l,
                ..
            } if name == store => layout = *l,
            Step::Upsert { store: name } if name == store => layout = Layout::Timestamped,
            Step::ForeignKey(f) if f.kept_store() == Some(store) => layout = Layout::Timestamped,
            _ => {}
        });
        Some(StoreInfo {
            subtopology: sub as u32,
            format: self.formats.get(store).copied().unwrap_or_default(),
            layout,
            windows,
            sessions: stream.sessions_of(store),
        })
    }

    /// Whether `store` is a suppression buffer's ([`suppress`]), which the record cache
    /// leaves alone.
    pub fn is_suppression_buffer(&self, store: &str) -> bool {
        self.buffers.contains(store)
    }

    /// The headers `store`'s changelog records with a value carry: a suppression buffer's
    /// layout version, as Kafka Streams writes and checks it; none for the others.
    pub fn changelog_headers(&self, store: &str) -> ChangelogHeaders {
        match self.is_suppression_buffer(store) {
            true => suppress::SUPPRESS_HEADERS,
            false => &[],
        }
    }

    /// How `store`'s values are laid out, and so its changelog records
    /// ([`crate::layout::to_changelog`]); plain for a store the topology does not have.
    pub fn store_layout(&self, store: &str) -> Layout {
        self.store_info(store).map_or(Layout::Plain, |i| i.layout)
    }

    /// Sets what [`Topology::describe`] prints (the typed builder's node-level view).
    pub fn with_description(mut self, description: String) -> Topology {
        self.description = Some(description);
        self
    }

    /// The application's sub-topologies with their sources, stores and sinks, in the form of
    /// Kafka's `Topology.describe()`.
    pub fn describe(&self) -> String {
        if let Some(d) = &self.description {
            return d.clone();
        }
        let mut out = String::from("Topologies:\n");
        for (i, s) in self.streams.iter().enumerate() {
            out += &format!("   Sub-topology: {i}\n");
            out += &format!("    Source: (topics: [{}])\n", s.sources.join(", "));
            let mut steps = 0;
            s.walk_all(&mut |_| steps += 1);
            out += &format!(
                "    Processor: {steps} step(s) (stores: [{}])\n",
                s.stores().join(", ")
            );
            for sink in &self.sinks[i] {
                out += &format!("    Sink: (topic: {sink})\n");
            }
            out += "\n";
        }
        out
    }

    /// Marks `topics` as repartition topics: Baton creates each at start with the partition
    /// count of the stream that writes it (as Kafka Streams does), and never asks for it to
    /// exist first. Each must be the sink of one stream and a source of another; the reader
    /// may come first, as Kafka numbers sub-topologies (a table read before its joining stream
    /// puts the join first).
    pub fn with_repartition_topics(
        mut self,
        topics: impl IntoIterator<Item = String>,
    ) -> Result<Topology, TopologyError> {
        for topic in topics {
            let bad = |why: &str| TopologyError::BadRepartition {
                topic: topic.clone(),
                why: why.to_owned(),
            };
            let writers: Vec<usize> = (0..self.streams.len())
                .filter(|&i| self.sinks[i].contains(&topic))
                .collect();
            let readers: Vec<usize> = (0..self.streams.len())
                .filter(|&i| self.streams[i].sources.contains(&topic))
                .collect();
            match (writers.as_slice(), readers.as_slice()) {
                ([w], [r]) if w != r => {}
                ([_], [_]) => return Err(bad("the stream that writes it reads it too")),
                _ => {
                    return Err(bad(
                        "needs exactly one stream writing it and one reading it",
                    ))
                }
            }
            self.repartition.insert(topic);
        }
        Ok(self)
    }

    /// Gives repartition topic `topic` `partitions` partitions of its own, rather than the
    /// count of the stream that writes it; the stream reading it runs that many tasks.
    pub fn with_repartition_partitions(
        mut self,
        topic: &str,
        partitions: u32,
    ) -> Result<Topology, TopologyError> {
        let bad = |why: String| TopologyError::BadRepartition {
            topic: topic.to_owned(),
            why,
        };
        if !self.repartition.contains(topic) {
            return Err(bad("is not a repartition topic of this topology".into()));
        }
        if !(1..=i32::MAX as u32).contains(&partitions) {
            return Err(bad(format!("{partitions} partitions: at least 1")));
        }
        self.repartition_partitions
            .insert(topic.to_owned(), partitions);
        Ok(self)
    }

    /// The partition count given to repartition topic `topic`, if one was.
    pub fn repartition_partitions(&self, topic: &str) -> Option<u32> {
        self.repartition_partitions.get(topic).copied()
    }

    /// The repartition topics, each with the stream that writes it, in stream order.
    pub fn repartition_topics(&self) -> Vec<(&str, u32)> {
        let mut out: Vec<(&str, u32)> = self
            .repartition
            .iter()
            .filter_map(|t| {
                let w = self.sinks.iter().position(|s| s.contains(t))?;
                Some((t.as_str(), w as u32))
            })
            .collect();
        out.sort_by_key(|&(_, w)| w);
        out
    }

    /// How records of `topic` reach sub-topology `to`: each sub-topology on the way, from the
    /// one reading `topic`, with the topic it reads there (a sink of the one before: a
    /// repartition topic, or any topic the application writes and reads again). `None` when
    /// `topic` does not feed `to`; the shortest way when several do.
    pub fn path_from(&self, topic: &str, to: u32) -> Option<Vec<(u32, String)>> {
        let reader = |t: &str| {
            self.streams
                .iter()
                .position(|s| s.sources.iter().any(|x| x == t))
                .map(|i| i as u32)
        };
        let start = reader(topic)?;
        // Each sub-topology reached, with the one it was reached from and through which topic.
        let mut came_from: BTreeMap<u32, Option<(u32, &str)>> = BTreeMap::from([(start, None)]);
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(sub) = queue.pop_front() {
            if sub == to {
                let mut path = Vec::new();
                let mut at = sub;
                while let Some(&Some((prev, via))) = came_from.get(&at) {
                    path.push((at, via.to_owned()));
                    at = prev;
                }
                path.push((start, topic.to_owned()));
                path.reverse();
                return Some(path);
            }
            for sink in self.sinks_of(sub) {
                if let Some(next) = reader(sink) {
                    came_from.entry(next).or_insert_with(|| {
                        queue.push_back(next);
                        Some((sub, sink.as_str()))
                    });
                }
            }
        }
        None
    }

    /// Whether Baton creates `topic` ([`Topology::with_repartition_topics`]).
    pub fn is_repartition_topic(&self, topic: &str) -> bool {
        self.repartition.contains(topic)
    }

    pub fn app_id(&self) -> &str {
        &self.app_id
    }

    /// The changelog topic of `store`: `<app id>-<store>-changelog`, as Kafka Streams names it;
    /// for a table read from a topic ([`Stream::table`]), that topic.
    pub fn changelog_topic(&self, store: &str) -> String {
        self.streams
            .iter()
            .flat_map(|s| &s.tables)
            .find(|(_, t)| t == store)
            .map_or_else(
                || format!("{}-{store}-changelog", self.app_id),
                |(topic, _)| topic.clone(),
            )
    }

    /// The store that source `topic` of subtopology `sub` is read into, if it is a table.
    pub fn table_store(&self, sub: u32, topic: &str) -> Option<&str> {
        self.streams
            .get(sub as usize)?
            .tables
            .iter()
            .find(|(t, _)| t == topic)
            .map(|(_, store)| store.as_str())
    }

    /// The topics read beside `topic` by the stream reading it that no step of the
    /// application writes (tables and source topics, not repartition topics): a repartition
    /// topic feeding a join or a merge takes their partition count, as Kafka Streams
    /// co-partitions it.
    pub fn sources_beside(&self, topic: &str) -> Vec<&str> {
        self.streams
            .iter()
            .filter(|s| s.sources.iter().any(|t| t == topic))
            .flat_map(|s| s.sources.iter().map(String::as_str))
            .filter(|t| *t != topic && !self.repartition.iter().any(|r| r == t))
            .collect()
    }

    /// The repartition topics read beside `topic` by the stream reading it (a join of two
    /// re-keyed streams reads two).
    pub fn repartitions_beside(&self, topic: &str) -> Vec<&str> {
        self.streams
            .iter()
            .filter(|s| s.sources.iter().any(|t| t == topic))
            .flat_map(|s| s.sources.iter().map(String::as_str))
            .filter(|t| *t != topic && self.repartition.iter().any(|r| r == t))
            .collect()
    }

    /// How long `store`'s changelog keeps records (`retention.ms`, with
    /// `cleanup.policy=compact,delete`), for window stores: the windows' retention plus
    /// [`WINDOW_CHANGELOG_EXTRA_RETENTION_MS`], as Kafka Streams sets it. `None`: compacted only.
    pub fn changelog_retention_ms(&self, store: &str) -> Option<i64> {
        let sliding = self.streams.iter().find_map(|s| s.sliding_of(store));
        let windows = self.streams.iter().find_map(|s| s.windows_of(store));
        let sessions = self.streams.iter().find_map(|s| s.sessions_of(store));
        let joins = self.streams.iter().find_map(|s| s.join_retention_of(store));
        let declared = self.window_stores.get(store).copied();
        let retention = declared
            .or(sliding.map(|w| w.retention_ms()))
            .or(windows.map(|w| w.retention_ms()))
            .or(sessions.map(|s| s.retention_ms()))
            .or(joins)?;
        Some(retention + WINDOW_CHANGELOG_EXTRA_RETENTION_MS)
    }

    /// Declares `store`, a store of a `process` step, a window store keeping its windows for
    /// `retention_ms`: its changelog is then compacted and time-limited, as Kafka Streams makes
    /// a window store's ([`Topology::changelog_retention_ms`]).
    pub fn with_window_store(
        mut self,
        store: &str,
        retention_ms: i64,
    ) -> Result<Topology, TopologyError> {
        let of_process = self.streams.iter().any(|s| {
            s.find(|step| match step {
                Step::Process { stores, .. } if stores.iter().any(|n| n == store) => Some(()),
                _ => None,
            })
            .is_some()
        });
        if !of_process || retention_ms < 0 {
            return Err(TopologyError::Invalid(format!(
                "window store {store:?}: no process step keeps it, or its retention ({retention_ms} ms) is negative"
            )));
        }
        self.window_stores.insert(store.to_owned(), retention_ms);
        Ok(self)
    }

    /// The global tables, each read whole on every instance.
    pub fn globals(&self) -> &[GlobalTable] {
        &self.globals
    }

    /// How a global table's keys and values read, if `store` is one.
    pub fn global_format(&self, store: &str) -> Option<StoreFormat> {
        self.globals
            .iter()
            .any(|g| g.store == store)
            .then(|| self.formats.get(store).copied().unwrap_or_default())
    }

    /// Every source topic (global tables' aside).
    pub fn source_topics(&self) -> BTreeSet<&str> {
        self.streams
            .iter()
            .flat_map(|s| s.sources.iter().map(String::as_str))
            .collect()
    }

    /// Every sink topic.
    pub fn sink_topics(&self) -> BTreeSet<&str> {
        self.sinks.iter().flatten().map(String::as_str).collect()
    }

    /// The stores of subtopology `sub`, in step order.
    pub fn stores_of(&self, sub: u32) -> Vec<&str> {
        self.streams
            .get(sub as usize)
            .map(|s| s.stores())
            .unwrap_or_default()
    }

    /// The window stores of subtopology `sub`: its tasks keep a stream time.
    pub fn window_stores_of(&self, sub: u32) -> Vec<&str> {
        self.streams
            .get(sub as usize)
            .map(|s| {
                s.stores()
                    .into_iter()
                    .filter(|store| s.windows_of(store).is_some())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The sink topics of subtopology `sub`: [`Emitted::sink`] indexes them.
    pub fn sinks_of(&self, sub: u32) -> &[String] {
        self.sinks.get(sub as usize).map_or(&[], Vec::as_slice)
    }

    /// How often the wall-clock punctuations of sub-topology `sub` are due (the shortest of
    /// its processors'), if it has any.
    pub fn wall_clock_every(&self, sub: u32) -> Option<Duration> {
        let mut every: Option<Duration> = None;
        walk(&self.streams.get(sub as usize)?.steps, &mut |s| {
            if let Step::Process {
                wall: Some((d, _)), ..
            } = s
            {
                every = Some(every.map_or(*d, |e| e.min(*d)));
            }
        });
        every
    }

    /// Runs the wall-clock punctuations of task `task` at `now_ms`: each processor's records
    /// go on through the steps after it, to the sinks in `out`.
    pub fn punctuate(
        &self,
        task: TaskId,
        now_ms: i64,
        stream_time: i64,
        stores: &mut dyn Stores,
        out: &mut Output,
    ) -> Result<(), StoreError> {
        let Some(stream) = self.streams.get(task.subtopology as usize) else {
            return Ok(());
        };
        let run = Run {
            task,
            junctions: &stream.junctions,
        };
        for steps in std::iter::once(&stream.steps).chain(stream.routes.values()) {
            punctuate_steps(run, steps, now_ms, stream_time, stores, out)?;
        }
        for steps in &stream.junctions {
            punctuate_steps(run, steps, now_ms, stream_time, stores, out)?;
        }
        Ok(())
    }

    /// Whether sink `sink` of subtopology `sub` carries a table's updates: each `to` of it
    /// comes after an aggregation and only steps that keep the key and give at most one
    /// record per record. Then a later record of a key replaces an earlier one, read as a
    /// table, and the record cache may write the last only ([`crate::cache`]).
    pub fn sink_is_table(&self, sub: u32, sink: u16) -> bool {
        self.table_sinks
            .get(sub as usize)
            .and_then(|t| t.get(sink as usize))
            .copied()
            .unwrap_or(false)
    }

    pub fn sources_of(&self, sub: u32) -> &[String] {
        self.streams
            .get(sub as usize)
            .map(|s| s.sources.as_slice())
            .unwrap_or_default()
    }

    /// The topology the group leader assigns, given every source topic's partition count.
    pub fn wire(&self, partitions: &BTreeMap<String, u32>) -> Result<WireTopology, TopologyError> {
        let mut wire = WireTopology::default();
        // A global table's placeholder makes no tasks.
        let tasked = self
            .streams
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.sources.is_empty());
        for (i, s) in tasked {
            let mut counts = BTreeMap::new();
            for t in &s.sources {
                let n = *partitions
                    .get(t)
                    .ok_or_else(|| TopologyError::MissingTopic(t.clone()))?;
                counts.insert(t.as_str(), n);
            }
            let distinct: BTreeSet<u32> = counts.values().copied().collect();
            if distinct.len() != 1 {
                return Err(TopologyError::NotCoPartitioned {
                    stream: i,
                    detail: counts
                        .iter()
                        .map(|(t, n)| format!("{t} has {n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            wire.subtopologies.insert(
                i as u32,
                Subtopology {
                    source_topics: s.sources.clone(),
                    changelog_topics: s
                        .stores()
                        .into_iter()
                        .map(|st| self.changelog_topic(st))
                        .collect(),
                    partitions: distinct.into_iter().next().unwrap_or(0),
                },
            );
        }
        Ok(wire)
    }

    /// Runs one record of task `task` through its stream. `stream_time` is the task's stream
    /// time with this record counted (the largest timestamp it has seen). Stateful steps read
    /// and write `stores`; what reaches the end goes to `out` if the stream has a sink.
    pub fn process(
        &self,
        task: TaskId,
        record: StreamRecord,
        stream_time: i64,
        stores: &mut dyn Stores,
        out: &mut Output,
    ) -> Result<(), StoreError> {
        self.process_from(task, "", record, stream_time, stores, out)
    }

    /// As [`Topology::process`], for a record of source topic `topic`: one with steps of its
    /// own ([`Stream::route`]) takes them instead of the main ones.
    pub fn process_from(
        &self,
        task: TaskId,
        topic: &str,
        record: StreamRecord,
        stream_time: i64,
        stores: &mut dyn Stores,
        out: &mut Output,
    ) -> Result<(), StoreError> {
        let Some(stream) = self.streams.get(task.subtopology as usize) else {
            return Ok(());
        };
        let run = Run {
            task,
            junctions: &stream.junctions,
        };
        let steps = stream.routes.get(topic).unwrap_or(&stream.steps);
        run_steps(run, steps, lists::one(record), stream_time, stores, out)
    }
}

/// What every step of one record's run may need besides the record: its task, and the
/// junctions of its stream.
#[derive(Clone, Copy)]
struct Run<'a> {
    task: TaskId,
    junctions: &'a [Vec<Step>],
}

fn punctuate_steps(
    run: Run<'_>,
    steps: &[Step],
    now_ms: i64,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
) -> Result<(), StoreError> {
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Process {
                wall: Some((_, p)), ..
            } => {
                let records = p(run.task, now_ms, stream_time, stores)?;
                if !records.is_empty() {
                    run_steps(run, &steps[i + 1..], records, stream_time, stores, out)?;
                }
            }
            Step::Fork { branches, .. } => {
                for b in branches {
                    punctuate_steps(run, b, now_ms, stream_time, stores, out)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Runs `records` through `steps` in order; most steps keep one record one record, a
/// flat-map makes it many, each going through the later steps in order.
fn run_steps(
    run: Run<'_>,
    steps: &[Step],
    mut records: Vec<StreamRecord>,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
) -> Result<(), StoreError> {
    // Two lists taking turns, both reused ([`lists`]); a store error or a panic drops them.
    let mut next = lists::take();
    for step in steps {
        for r in records.drain(..) {
            match &r.value {
                Some(_) => run_step(run, step, r, stream_time, stores, out, &mut next)?,
                None => run_delete(run, step, r, stream_time, stores, out, &mut next)?,
            }
        }
        std::mem::swap(&mut records, &mut next);
        if records.is_empty() {
            break;
        }
    }
    lists::give(records);
    lists::give(next);
    Ok(())
}

/// One step for one record with a value; what it passes on goes to `next`.
fn run_step(
    run: Run<'_>,
    step: &Step,
    r: StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let ts = r.timestamp;
    let value: &[u8] = r.value.as_deref().unwrap_or_default();
    match step {
        Step::Filter(f) => {
            if f(&r.key, value) {
                next.push(r);
            }
        }
        Step::MapValues(f) => {
            let v = f(&r.key, value);
            next.push(StreamRecord::new(r.key, v, ts));
        }
        Step::Map(f) => {
            let (k, v) = f(&r.key, value);
            next.push(StreamRecord::new(k, v, ts));
        }
        Step::FlatMapValues(f) => next.extend(
            f(&r.key, value)
                .into_iter()
                .map(|v| StreamRecord::new(r.key.clone(), v, ts)),
        ),
        Step::Peek(f) => {
            f(&r.key, value);
            next.push(r);
        }
        Step::Aggregate { store, f, layout } => aggregate((store, f, *layout), r, stores, next)?,
        Step::WindowAggregate { store, windows, f } => {
            let w = (store.as_str(), windows, f);
            window_aggregate(w, &r, stream_time, stores, out, next)?
        }
        Step::SessionAggregate {
            store,
            sessions,
            f,
            merge,
        } => {
            let s = (store.as_str(), sessions, f, merge);
            session_aggregate(s, &r, stream_time, stores, out, next)?
        }
        Step::SlidingAggregate { store, sliding, f } => {
            let w = (store.as_str(), *sliding, f);
            sliding::sliding_aggregate(w, &r, stream_time, stores, out, next)?
        }
        Step::JoinWindow {
            store,
            retention_ms,
        } => {
            join_window_put((store, *retention_ms), &r, stream_time, stores, out)?;
            next.push(r);
        }
        Step::WindowJoin {
            other,
            before_ms,
            after_ms,
            left,
            unmatched,
        } => {
            let side = Side {
                other,
                before_ms: *before_ms,
                after_ms: *after_ms,
                left: *left,
                unmatched: unmatched.as_ref(),
            };
            window_join(side, &r, stream_time, stores, next)?
        }
        Step::Join { store, inner, kept } => {
            stream_table_join((store, *inner, *kept), r, stores, next)?
        }
        Step::GlobalJoin { store, key, inner } => {
            let row = match key(&r.key, value) {
                Some(k) => stores.get(store, &k)?,
                None => None,
            };
            if row.is_some() || !inner {
                let v = join_frame(value, row.as_deref());
                next.push(StreamRecord::new(r.key, v, ts));
            }
        }
        _ => run_any(run, step, r, stream_time, stores, out, next)?,
    }
    Ok(())
}

/// [`Step::Aggregate`] for one record: the key's aggregate folded, stored (or removed) and
/// sent on with the value it replaced.
fn aggregate(
    (store, f, layout): (&str, &AggregateFn, Layout),
    r: StreamRecord,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let (ts, value) = (r.timestamp, r.value.as_deref().unwrap_or_default());
    let current = stores.get(store, &r.key)?;
    let (agg, ts) = match layout {
        Layout::Plain => (f(current.as_deref(), &r.key, value), ts),
        Layout::Timestamped => fold_timestamped(store, current.as_deref(), &r, f),
    };
    let old = match layout {
        Layout::Plain => current.map(Bytes::from),
        Layout::Timestamped => stored_value(store, current),
    };
    match &agg {
        Some(agg) if layout == Layout::Timestamped => {
            stores.put(store, &r.key, timestamped(ts, agg))
        }
        Some(agg) => stores.put(store, &r.key, agg.clone()),
        None => stores.delete(store, &r.key),
    }
    next.push(StreamRecord {
        key: r.key,
        value: agg.map(Bytes::from),
        timestamp: ts,
        old,
        partition: None,
    });
    Ok(())
}

/// [`Step::Join`] for one record.
fn stream_table_join(
    (store, inner, kept): (&str, bool, bool),
    r: StreamRecord,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let table = match stores.get(store, &r.key)? {
        Some(row) if kept => stored_value(store, Some(row)),
        row => row.map(Bytes::from),
    };
    if table.is_some() || !inner {
        let v = join_frame(r.value.as_deref().unwrap_or_default(), table.as_deref());
        next.push(StreamRecord::new(r.key, v, r.timestamp));
    }
    Ok(())
}

/// One step for a delete (a record without a value): steps that keep keys pass it on, the
/// typed layer's steps decide, and steps that need a value pass over it, as Kafka Streams'
/// aggregations and stream-table joins pass over null values.
fn run_delete(
    run: Run<'_>,
    step: &Step,
    r: StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    match step {
        Step::Filter(_) | Step::MapValues(_) | Step::FlatMapValues(_) | Step::Peek(_) => {
            next.push(r)
        }
        Step::Map(_)
        | Step::Aggregate { .. }
        | Step::WindowAggregate { .. }
        | Step::SessionAggregate { .. }
        | Step::SlidingAggregate { .. }
        | Step::JoinWindow { .. }
        | Step::WindowJoin { .. }
        | Step::GlobalJoin { .. }
        | Step::Join { .. } => {}
        _ => run_any(run, step, r, stream_time, stores, out, next)?,
    }
    Ok(())
}

/// The steps that take a record with a value and a delete alike.
fn run_any(
    run: Run<'_>,
    step: &Step,
    r: StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let ts = r.timestamp;
    match step {
        Step::FlatMap { f, .. } => next.extend(f(&r.key, r.value.as_deref()).into_iter().map(
            |(k, v)| StreamRecord {
                key: k.into(),
                value: v.map(Bytes::from),
                timestamp: ts,
                old: None,
                partition: None,
            },
        )),
        Step::Upsert { store } => {
            let old = stored_value(store, stores.get(store, &r.key)?);
            match &r.value {
                Some(v) => stores.put(store, &r.key, timestamped(ts, v)),
                None => stores.delete(store, &r.key),
            }
            next.push(StreamRecord { old, ..r });
        }
        Step::TableJoin { other, left, kind } => {
            table_join((other, *left, *kind), r, stores, next)?
        }
        Step::Regroup(f) => next.extend(
            f(&r.key, r.value.as_deref(), r.old.as_deref())
                .into_iter()
                .map(|(k, v)| StreamRecord {
                    key: k.into(),
                    value: v.map(Bytes::from),
                    timestamp: ts,
                    old: None,
                    partition: None,
                }),
        ),
        Step::Suppress(b) => suppress::suppress(b, run.task, r, stream_time, stores, next)?,
        Step::ForeignKey(f) => fk_join::run(f, run.task, r, stores, next)?,
        Step::Process { f, .. } => next.extend(f(run.task, &r, stream_time, stores)?),
        Step::Junction(n) => {
            if let Some(steps) = run.junctions.get(*n) {
                run_steps(run, steps, lists::one(r), stream_time, stores, out)?;
            }
        }
        Step::Fork { id, branches } => {
            next_fork_epoch(*id);
            let n = branches.len();
            let mut r = Some(r);
            for (b, branch) in branches.iter().enumerate() {
                let one = if b + 1 == n { r.take() } else { r.clone() };
                if let Some(one) = one {
                    run_steps(run, branch, lists::one(one), stream_time, stores, out)?;
                }
            }
        }
        Step::To { sink, .. } => out.records.push(Emitted {
            sink: *sink,
            record: r,
        }),
        _ => unreachable!("run_step and run_delete take the others"),
    }
    Ok(())
}

/// A windowed aggregation's step for one record: each window it falls in that is still open
/// takes it (the others count as late), each new aggregate going on under its windowed key.
fn window_aggregate(
    (store, windows, f): (&str, &Windows, &AggregateFn),
    r: &StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let ts = event_time(r, "windows");
    // Kafka Streams' rule: a window takes a record while its end is after stream time minus
    // the grace period.
    let close = stream_time.saturating_sub(windows.grace_ms);
    for start in windows.starts_for(ts) {
        if start.saturating_add(windows.size_ms) <= close {
            out.late += 1;
            continue;
        }
        let key = window_store_key(&r.key, start);
        let current = stores.get(store, &key)?;
        let (agg, ts) = fold_timestamped(store, current.as_deref(), r, f);
        let windowed = windowed_key(&r.key, start);
        match agg {
            Some(agg) => {
                stores.put(store, &key, timestamped(ts, &agg));
                next.push(StreamRecord::new(windowed, agg, ts));
            }
            None => {
                stores.delete(store, &key);
                next.push(StreamRecord::delete(windowed, ts));
            }
        }
    }
    Ok(())
}

/// Folds `r` into a timestamped store value: the new aggregate and its timestamp, the newer
/// of the stored one and the record's (as Kafka Streams' aggregations stamp their results).
fn fold_timestamped(
    store: &str,
    stored: Option<&[u8]>,
    r: &StreamRecord,
    f: &AggregateFn,
) -> (Option<Vec<u8>>, i64) {
    let current = stored.map(|v| read_timestamped(store, v));
    let agg = f(
        current.map(|(_, v)| v),
        &r.key,
        r.value.as_deref().unwrap_or_default(),
    );
    let ts = current.map_or(r.timestamp, |(old, _)| old.max(r.timestamp));
    (agg, ts)
}

/// A session-windowed aggregation's step for one record ([`Step::SessionAggregate`]).
fn session_aggregate(
    (store, sessions, f, merge): (&str, &Sessions, &AggregateFn, &MergeFn),
    r: &StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let ts = event_time(r, "sessions");
    let value = r.value.as_deref().unwrap_or_default();
    // Sessions that end at or after `ts - gap` and start at or before `ts + gap`: keys
    // order by end, then start, so the end bounds the scan and the start is checked.
    let earliest_end = ts.saturating_sub(sessions.gap_ms).max(0);
    let latest_start = ts.saturating_add(sessions.gap_ms);
    let from = session_key(&r.key, 0, earliest_end);
    let to = session_key(&r.key, i64::MAX, i64::MAX);
    let mut merged = Vec::new();
    let (mut start, mut end) = (ts, ts);
    for (k, v) in stores.range(store, &from, &to)? {
        // A longer key that starts with this one sorts among these: not this key's.
        match split_session_key(&k) {
            Some((key, s, e)) if key == r.key.as_ref() && s <= latest_start => {
                (start, end) = (start.min(s), end.max(e));
                merged.push((k, v, e));
            }
            _ => {}
        }
    }
    let close = stream_time
        .saturating_sub(sessions.grace_ms)
        .saturating_sub(sessions.gap_ms);
    if end < close {
        out.late += 1;
        return Ok(());
    }
    let mut agg: Option<Vec<u8>> = None;
    for (_, v, _) in &merged {
        agg = Some(merge(&r.key, agg.as_deref(), v));
    }
    if (start, end) != (ts, ts) {
        for (k, _, e) in merged {
            stores.delete(store, &k);
            next.push(StreamRecord::delete(k, e));
        }
    }
    let key = session_key(&r.key, start, end);
    match f(agg.as_deref(), &r.key, value) {
        Some(agg) => {
            stores.put(store, &key, agg.clone());
            next.push(StreamRecord::new(key, agg, end));
        }
        None => stores.delete(store, &key),
    }
    Ok(())
}

/// Which rows a table-table join keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableJoinKind {
    /// Keys both tables have.
    Inner,
    /// Every key of the left table.
    Left,
    /// Every key of either table.
    Outer,
}

/// A table join's row: the left and the right value, either absent. A presence byte and the
/// length (`u32`, big-endian) of the left one, its bytes, a presence byte for the right one,
/// its bytes.
pub fn row_pair(left: Option<&[u8]>, right: Option<&[u8]>) -> Vec<u8> {
    let (l, r) = (left.unwrap_or_default(), right.unwrap_or_default());
    let mut out = Vec::with_capacity(6 + l.len() + r.len());
    out.push(u8::from(left.is_some()));
    out.extend_from_slice(&(l.len() as u32).to_be_bytes());
    out.extend_from_slice(l);
    out.push(u8::from(right.is_some()));
    out.extend_from_slice(r);
    out
}

/// The two sides of a [`row_pair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowPair<'a> {
    pub left: Option<&'a [u8]>,
    pub right: Option<&'a [u8]>,
}

/// The sides of a [`row_pair`]; `None` if `frame` is not one.
pub fn split_row_pair(frame: &[u8]) -> Option<RowPair<'_>> {
    let (&has_left, rest) = frame.split_first()?;
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let rest = &rest[4..];
    let (left, rest) = (rest.get(..len)?, rest.get(len..)?);
    let (&has_right, right) = rest.split_first()?;
    let side = |present: u8, bytes| match present {
        0 if bytes == b"" => Some(None),
        1 => Some(Some(bytes)),
        _ => None,
    };
    Some(RowPair {
        left: side(has_left, left)?,
        right: side(has_right, right)?,
    })
}

/// [`Step::TableJoin`] for one update: Kafka's `KTableKTableInnerJoin`, `LeftJoin` (its left
/// side), `RightJoin` (a left join's right side) and `OuterJoin`, without old values.
fn table_join(
    (other, left, kind): (&str, bool, TableJoinKind),
    r: StreamRecord,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let stored = stores.get(other, &r.key)?;
    let row = stored.as_deref().map(|v| read_timestamped(other, v));
    let keeps_mine = match kind {
        TableJoinKind::Inner => false,
        TableJoinKind::Left => left,
        TableJoinKind::Outer => true,
    };
    // Without the other row, only a join that keeps this side's rows says anything: its row,
    // or (a left join) the delete of its row; an outer join's delete of a key neither side
    // has says nothing.
    if row.is_none() && (!keeps_mine || (r.value.is_none() && kind == TableJoinKind::Outer)) {
        return Ok(());
    }
    let keeps_theirs = match kind {
        TableJoinKind::Inner => false,
        TableJoinKind::Left => !left,
        TableJoinKind::Outer => true,
    };
    let timestamp = row.map_or(r.timestamp, |(ts, _)| ts.max(r.timestamp));
    let theirs = row.map(|(_, v)| v);
    let mine = r.value.as_deref();
    let value = match (mine, theirs) {
        (None, Some(_)) if !keeps_theirs => None,
        (None, None) => None,
        _ if left => Some(row_pair(mine, theirs)),
        _ => Some(row_pair(theirs, mine)),
    };
    next.push(StreamRecord {
        key: r.key,
        value: value.map(Bytes::from),
        timestamp,
        old: None,
        partition: None,
    });
    Ok(())
}

/// A timestamped store's value without its timestamp, as a record's old value.
fn stored_value(store: &str, stored: Option<Vec<u8>>) -> Option<Bytes> {
    let stored = Bytes::from(stored?);
    read_timestamped(store, &stored);
    Some(stored.slice(8..))
}

/// The timestamp and value of a timestamped store's value; one without a timestamp fails the
/// record as undecodable, naming the store.
fn read_timestamped<'a>(store: &str, stored: &'a [u8]) -> (i64, &'a [u8]) {
    split_timestamped(stored).unwrap_or_else(|| {
        crate::record::undecodable(format!(
            "store {store:?}: a value of {} bytes has no 8-byte timestamp",
            stored.len()
        ))
    })
}

/// A record's timestamp for a step that needs event time (windows, sessions, windowed
/// joins): a negative one fails the record as undecodable.
fn event_time(r: &StreamRecord, what: &str) -> i64 {
    if r.timestamp < 0 {
        crate::record::undecodable(format!(
            "record timestamp {} is negative: {what} need event time",
            r.timestamp
        ));
    }
    r.timestamp
}

/// Baton's example application: counts events per key from `input` into the store `counts`
/// and writes each new count, as decimal text, to `output`.
pub fn count_per_key(app_id: &str, input: &str, output: &str) -> Result<Topology, TopologyError> {
    Topology::new(
        app_id,
        vec![Stream::from(&[input])
            .count("counts")
            .map_values(|_, v| {
                decode_count(Some(v))
                    .unwrap_or_default()
                    .to_string()
                    .into_bytes()
            })
            .to(output)],
    )
    .map(|t| {
        t.with_store_format(
            "counts",
            StoreFormat {
                key: Format::String,
                value: Format::Long,
            },
        )
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    /// A global table takes a sub-topology number and no task; a stream joins it by a key
    /// mapped from its records, inner or left.
    #[test]
    fn a_global_table_numbers_no_tasks_and_joins_by_a_mapped_key() {
        let global = GlobalTable {
            topic: "products".into(),
            store: "products-store".into(),
            subtopology: 0,
        };
        // Orders "order id -> product id"; the join looks the product up.
        let product_of = |_: &[u8], v: &[u8]| Some(v.to_vec());
        let orders = |inner| {
            Stream::from(&["orders"])
                .global_join("products-store", product_of, inner)
                .to("priced")
        };
        let t = Topology::with_globals(
            "shop",
            vec![Stream::from::<&str>(&[]), orders(true)],
            vec![global.clone()],
        )
        .unwrap();
        let counts = BTreeMap::from([("orders".to_owned(), 2u32)]);
        let wire = t.wire(&counts).unwrap();
        assert_eq!(wire.subtopologies.keys().collect::<Vec<_>>(), [&1]);
        assert!(!t.source_topics().contains("products"));
        let mut stores = MemStores::default();
        stores.put("products-store", b"p1", b"apple".to_vec());
        let mut out = Output::default();
        for (order, product) in [("o1", "p1"), ("o2", "p9")] {
            let r = StreamRecord::new(order.as_bytes().to_vec(), product.as_bytes().to_vec(), 5);
            t.process(TaskId::new(1, 0), r, 5, &mut stores, &mut out)
                .unwrap();
        }
        let joined: Vec<_> = out
            .records
            .iter()
            .map(|e| split_join_frame(e.record.value.as_deref().unwrap()).unwrap())
            .map(|(v, row)| (v.to_vec(), row.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(joined, vec![(b"p1".to_vec(), Some(b"apple".to_vec()))]);
        let left = Topology::with_globals(
            "shop",
            vec![Stream::from::<&str>(&[]), orders(false)],
            vec![global.clone()],
        )
        .unwrap();
        let mut out = Output::default();
        let r = StreamRecord::new(b"o2".to_vec(), b"p9".to_vec(), 5);
        left.process(TaskId::new(1, 0), r, 5, &mut stores, &mut out)
            .unwrap();
        let (_, row) = split_join_frame(out.records[0].record.value.as_deref().unwrap()).unwrap();
        assert_eq!(row, None);
        // A global join of a store no global table has, a placeholder without a global table,
        // and a global topic read by a stream too are refused.
        let refused = [
            Topology::with_globals("shop", vec![orders(true)], vec![]),
            Topology::with_globals(
                "shop",
                vec![Stream::from::<&str>(&[]), orders(true)],
                vec![],
            ),
            Topology::with_globals(
                "shop",
                vec![
                    Stream::from::<&str>(&[]),
                    Stream::from(&["products"]).to("x"),
                ],
                vec![global],
            ),
        ];
        for r in refused {
            assert!(r.is_err());
        }
    }

    #[test]
    fn row_pairs_keep_either_side_absent() {
        for (left, right) in [
            (Some(&b"ab"[..]), Some(&b"c"[..])),
            (None, Some(&b"c"[..])),
            (Some(&b""[..]), None),
            (None, None),
        ] {
            let frame = row_pair(left, right);
            assert_eq!(split_row_pair(&frame), Some(RowPair { left, right }));
        }
        for bad in [
            &b""[..],
            b"\x01\x00\x00\x00\x09ab\x00",
            b"\x00\x00\x00\x00\x00\x00x",
        ] {
            assert_eq!(split_row_pair(bad), None, "{bad:?}");
        }
    }

    /// Kafka's `ChangedSerializer` layouts, written out by hand from its comment: old then
    /// 0; new then 1; zigzag varint of the new value's length, new, old, then 2.
    #[test]
    fn change_frames_are_laid_out_as_kafkas() {
        assert_eq!(change_frame(Some(b"ab"), None).unwrap(), b"ab\x01");
        assert_eq!(change_frame(None, Some(b"c")).unwrap(), b"c\x00");
        assert_eq!(
            change_frame(Some(b"ab"), Some(b"c")).unwrap(),
            [4, b'a', b'b', b'c', 2]
        );
        assert_eq!(change_frame(None, None), None);
        let long = vec![7u8; 200];
        let frame = change_frame(Some(&long), Some(b"")).unwrap();
        assert_eq!(frame[..2], [0x90, 0x03], "zigzag 400 as a varint");
        let change = |new, old| Some(Change { new, old });
        assert_eq!(
            split_change_frame(&frame),
            change(Some(&long[..]), Some(&b""[..]))
        );
        for (new, old) in [
            (Some(&b"x"[..]), None),
            (None, Some(&b""[..])),
            (Some(&b""[..]), Some(&b"yz"[..])),
        ] {
            let frame = change_frame(new, old).unwrap();
            assert_eq!(split_change_frame(&frame), change(new, old));
        }
        for bad in [
            &b""[..],
            b"ab\x03",
            b"\x08ab\x02",
            b"\xff\xff\xff\xff\xff\x02",
        ] {
            assert_eq!(split_change_frame(bad), None, "{bad:?}");
        }
    }

    /// Kafka's `KStreamSessionWindowAggregate`, worked by hand: gap 10 ms, no grace.
    #[test]
    fn sessions_merge_within_the_gap_and_close_after_it() {
        let count = |c: Option<&[u8]>, _: &[u8], _: &[u8]| {
            (decode_count(c).unwrap_or(0) + 1).to_be_bytes().to_vec()
        };
        let merge = |_: &[u8], a: Option<&[u8]>, b: &[u8]| {
            (decode_count(a).unwrap_or(0) + decode_count(Some(b)).unwrap_or(0))
                .to_be_bytes()
                .to_vec()
        };
        let sessions = Sessions {
            gap_ms: 10,
            grace_ms: 0,
        };
        let t = Topology::new(
            "a",
            vec![Stream::from(&["in"])
                .session_aggregate("s", sessions, count, merge)
                .to("out")],
        )
        .unwrap();
        let (mut stores, mut out, mut time) = (MemStores::default(), Output::default(), 0);
        for ts in [0, 5, 30, 15, 22] {
            time = ts.max(time);
            let r = StreamRecord::new(b"a".to_vec(), b"x".to_vec(), ts);
            t.process(TaskId::new(0, 0), r, time, &mut stores, &mut out)
                .unwrap();
        }
        let got: Vec<(i64, i64, Option<i64>, i64)> = out
            .records
            .iter()
            .map(|e| {
                let (key, start, end) = split_session_key(&e.record.key).unwrap();
                assert_eq!(key, b"a");
                let n = e
                    .record
                    .value
                    .as_deref()
                    .map(|v| decode_count(Some(v)).unwrap());
                (start, end, n, e.record.timestamp)
            })
            .collect();
        let want = vec![
            (0, 0, Some(1), 0),
            // 5 is within 10 of 0: the session [0,0] goes (a delete), [0,5] holds both.
            (0, 0, None, 0),
            (0, 5, Some(2), 5),
            (30, 30, Some(1), 30),
            // 15 would make [0,15], which ended before 30 - 10: late, dropped.
            // 22 reaches [30,30]: merged into [22,30].
            (30, 30, None, 30),
            (22, 30, Some(2), 30),
        ];
        assert_eq!(got, want);
        assert_eq!(out.late, 1);
        let stored: Vec<(i64, i64)> = stores
            .0
            .keys()
            .map(|(_, k)| split_session_key(k).map(|(_, s, e)| (s, e)).unwrap())
            .collect();
        assert_eq!(stored, vec![(0, 5), (22, 30)], "ordered by end, then start");
        assert_eq!(t.changelog_retention_ms("s"), Some(10 + 86_400_000));
    }

    #[test]
    fn only_a_sink_after_an_aggregation_and_key_keeping_steps_is_a_table() {
        let counts = count_per_key("a", "in", "out").unwrap();
        assert!(counts.sink_is_table(0, 0));
        let stateless = Topology::new(
            "a",
            vec![Stream::from(&["in"])
                .map_values(|_, v| v.to_vec())
                .to("out")],
        )
        .unwrap();
        assert!(!stateless.sink_is_table(0, 0));
        let exploded = Topology::new(
            "a",
            vec![Stream::from(&["in"])
                .count("c")
                .flat_map_values(|_, v| vec![v.to_vec(), v.to_vec()])
                .to("out")],
        )
        .unwrap();
        assert!(!exploded.sink_is_table(0, 0));
        assert!(!counts.sink_is_table(7, 0));
        assert!(!counts.sink_is_table(0, 1));
    }

    fn run(t: &Topology, records: &[(&str, &str)]) -> (MemStores, Vec<(String, String)>) {
        let mut stores = MemStores::default();
        let mut out = Output::default();
        for (k, v) in records {
            t.process(
                TaskId::new(0, 0),
                StreamRecord::new(k.to_string(), v.to_string(), 0),
                0,
                &mut stores,
                &mut out,
            )
            .unwrap();
        }
        let out = out
            .records
            .into_iter()
            .map(|e| {
                (
                    String::from_utf8(e.record.key.to_vec()).unwrap(),
                    String::from_utf8(e.record.value.unwrap().to_vec()).unwrap(),
                )
            })
            .collect();
        (stores, out)
    }

    #[test]
    fn the_example_counts_per_key() {
        let t = count_per_key("app", "in", "out").unwrap();
        let (stores, out) = run(&t, &[("a", "x"), ("b", "y"), ("a", "z")]);
        assert_eq!(
            out,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "1".into()),
                ("a".into(), "2".into())
            ]
        );
        let a = stores.0.get(&("counts".to_owned(), b"a".to_vec())).cloned();
        assert_eq!(decode_count(a.as_deref()), Some(2));
        assert_eq!(t.changelog_topic("counts"), "app-counts-changelog");
    }

    #[test]
    fn filters_and_maps_apply_in_order() {
        let t = Topology::new(
            "app",
            vec![Stream::from(&["in"])
                .filter(|_, v| v != b"skip")
                .map_values(|_, v| v.to_ascii_uppercase())
                .aggregate("last", |_, _, v| v.to_vec())
                .map(|k, v| ([k, b"!"].concat(), v.to_vec()))
                .to("out")],
        )
        .unwrap();
        let (_, out) = run(&t, &[("a", "x"), ("a", "skip"), ("b", "y")]);
        assert_eq!(
            out,
            vec![("a!".into(), "X".into()), ("b!".into(), "Y".into())]
        );
    }

    /// Word count in two subtopologies: lines split into words re-keyed by word, through a
    /// repartition topic, then counted.
    #[test]
    fn a_flat_map_fans_out_and_a_repartition_topic_joins_two_streams() {
        let t = Topology::new(
            "app",
            vec![
                Stream::from(&["lines"])
                    .flat_map(|_, v| {
                        v.split(|b| *b == b' ')
                            .filter(|w| !w.is_empty())
                            .map(|w| (w.to_vec(), w.to_vec()))
                            .collect()
                    })
                    .peek(|_, _| {})
                    .to("app-words-repartition"),
                Stream::from(&["app-words-repartition"])
                    .count("counts")
                    .to("out"),
            ],
        )
        .unwrap()
        .with_repartition_topics(["app-words-repartition".to_owned()])
        .unwrap();
        let (_, out) = run(&t, &[("", "a b  a"), ("", "")]);
        assert_eq!(
            out,
            vec![
                ("a".into(), "a".into()),
                ("b".into(), "b".into()),
                ("a".into(), "a".into())
            ]
        );
        assert_eq!(t.repartition_topics(), vec![("app-words-repartition", 0)]);
        assert_eq!(
            t.path_from("lines", 1),
            Some(vec![
                (0, "lines".to_owned()),
                (1, "app-words-repartition".to_owned())
            ]),
            "lines reach the counts through the repartition topic"
        );
        assert_eq!(
            t.path_from("app-words-repartition", 1),
            Some(vec![(1, "app-words-repartition".to_owned())])
        );
        assert_eq!(t.path_from("lines", 0), Some(vec![(0, "lines".to_owned())]));
        assert_eq!(
            t.path_from("app-words-repartition", 0),
            None,
            "not upstream"
        );
        assert_eq!(t.path_from("out", 1), None, "read by no one");
        assert!(t.is_repartition_topic("app-words-repartition"));
        let e = Topology::new(
            "app",
            vec![Stream::from(&["a"]).to("b"), Stream::from(&["c"]).to("d")],
        )
        .unwrap()
        .with_repartition_topics(["b".to_owned()])
        .err()
        .unwrap();
        assert_eq!(
            e.to_string(),
            "repartition topic \"b\": needs exactly one stream writing it and one reading it"
        );
    }

    #[test]
    fn bad_topologies_say_what_and_where() {
        let e = |r: Result<Topology, TopologyError>| r.err().unwrap().to_string();
        assert!(e(Topology::new("bad id", vec![Stream::from(&["a"])])).contains("bad id"));
        assert_eq!(
            e(Topology::new("app", vec![])),
            "the topology has no stream"
        );
        assert_eq!(
            e(Topology::new(
                "app",
                vec![Stream::from(&["a"]), Stream::from(&["b", "a"])]
            )),
            "streams[1]: topic \"a\" is already a source of streams[0]"
        );
        assert_eq!(
            e(Topology::new(
                "app",
                vec![
                    Stream::from(&["a"]).count("c"),
                    Stream::from(&["b"]).count("c")
                ]
            )),
            "streams[1]: store \"c\" is already used by streams[0]"
        );
        assert!(e(Topology::new(
            "app",
            vec![Stream::from(&["a"])
                .map(|k, v| (v.to_vec(), k.to_vec()))
                .count("c")]
        ))
        .starts_with("streams[0].steps[0]: `map` changes keys"));
        let none: &[&str] = &[];
        assert_eq!(
            e(Topology::new("app", vec![Stream::from(none)])),
            "streams[0]: no source topic"
        );
    }

    #[test]
    fn subtopologies_follow_co_partitioned_sources() {
        let t = Topology::new(
            "app",
            vec![
                Stream::from(&["a", "b"]).count("c"),
                Stream::from(&["x"]).to("y"),
            ],
        )
        .unwrap();
        let parts = |v: &[(&str, u32)]| -> BTreeMap<String, u32> {
            v.iter().map(|(t, n)| (t.to_string(), *n)).collect()
        };
        let wire = t.wire(&parts(&[("a", 4), ("b", 4), ("x", 2)])).unwrap();
        assert_eq!(wire.subtopologies[&0].partitions, 4);
        assert_eq!(
            wire.subtopologies[&0].changelog_topics,
            vec!["app-c-changelog".to_string()]
        );
        assert!(wire.subtopologies[&1].changelog_topics.is_empty());
        assert_eq!(
            t.wire(&parts(&[("a", 4), ("b", 3), ("x", 2)]))
                .unwrap_err()
                .to_string(),
            "streams[0]: sources are not co-partitioned: a has 4, b has 3"
        );
        assert_eq!(
            t.wire(&parts(&[("a", 4)])).unwrap_err(),
            TopologyError::MissingTopic("b".into())
        );
    }
}
