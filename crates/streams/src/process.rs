//! The Processor API's escape hatch: [`KStream::process`] runs a user's [`Processor`] on each
//! record with named key-value stores (each backed by its changelog and scaled like every
//! other store: warm-ups, standbys, restores), forwarding any records, and punctuating on
//! stream time as Kafka Streams' `ProcessorContext.schedule(..., STREAM_TIME, ...)` does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_assignor::TaskId;
use baton_runtime::layout::{window_store_key, window_store_start};
use baton_runtime::store::StoreError;
use baton_runtime::topology::{Stores, StreamRecord};

use crate::dsl::{decoding, KStream};
use crate::serdes::{read_or_fail, Serde};

/// A record as a processor sees it: key, value and timestamp (milliseconds since the epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct Record<K, V> {
    pub key: K,
    pub value: V,
    pub timestamp: i64,
}

/// A named key-value store a processor reads and writes, with its serdes:
/// `<application id>-<name>-changelog` is its changelog, keys and values in the serdes'
/// bytes (Kafka Streams' plain key-value store layout, no timestamp).
pub struct KeyValueStore<KS, VS> {
    name: String,
    key: KS,
    value: VS,
}

impl<KS: Serde, VS: Serde> KeyValueStore<KS, VS> {
    /// As Kafka's `Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(name), k, v)`.
    pub fn new(name: &str, key: KS, value: VS) -> Self {
        KeyValueStore {
            name: name.to_owned(),
            key,
            value,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A named window store a processor reads and writes, with its serdes: values by key and
/// window start, as Kafka's `Stores.windowStoreBuilder(Stores.persistentWindowStore(name,
/// retention, windowSize, false), k, v)` keeps them (keys: the key's bytes, the start and a
/// sequence number 0; plain values), with the changelog `<application id>-<name>-changelog`
/// kept for the retention plus a day. Declare it with [`crate::StreamsBuilder::add_window_store`]
/// and name it in [`KStream::process`]'s stores.
pub struct WindowStore<KS, VS> {
    name: String,
    key: KS,
    value: VS,
    retention: Duration,
}

impl<KS: Serde, VS: Serde> WindowStore<KS, VS> {
    /// A window store keeping each window for `retention` (of stream time).
    pub fn new(name: &str, key: KS, value: VS, retention: Duration) -> Self {
        WindowStore {
            name: name.to_owned(),
            key,
            value,
            retention,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl crate::StreamsBuilder {
    /// Declares `store` (Kafka's `addStateStore`): its changelog is made compacted and kept
    /// for its retention plus a day, as Kafka makes a window store's.
    pub fn add_window_store<KS: Serde, VS: Serde>(&self, store: &WindowStore<KS, VS>) {
        let retention = i64::try_from(store.retention.as_millis()).unwrap_or(i64::MAX);
        self.graph
            .borrow_mut()
            .window_stores
            .push((store.name.clone(), retention));
    }
}

/// What a processor may do while it handles a record or a punctuation: forward records,
/// read and write its stores, and see the record's timestamp and the task's stream time.
pub struct ProcessorContext<'a, KO, VO> {
    stores: &'a mut dyn Stores,
    allowed: &'a [String],
    forwarded: Vec<(KO, VO, i64)>,
    timestamp: i64,
    stream_time: i64,
    task: TaskId,
    error: Option<StoreError>,
}

impl<'a, KO, VO> ProcessorContext<'a, KO, VO> {
    fn new(
        stores: &'a mut dyn Stores,
        allowed: &'a [String],
        timestamp: i64,
        stream_time: i64,
        task: TaskId,
    ) -> Self {
        ProcessorContext {
            stores,
            allowed,
            forwarded: Vec::new(),
            timestamp,
            stream_time,
            task,
            error: None,
        }
    }

    /// What the processor forwarded, as the bytes of `key`'s and `value`'s serdes; or the
    /// store error that ends the record.
    fn finish<KS, VS>(self, key: &KS, value: &VS) -> Result<Vec<StreamRecord>, StoreError>
    where
        KS: Serde<Value = KO>,
        VS: Serde<Value = VO>,
    {
        if let Some(e) = self.error {
            return Err(e);
        }
        Ok(self
            .forwarded
            .into_iter()
            .map(|(k, v, ts)| StreamRecord::new(key.serialize(&k), value.serialize(&v), ts))
            .collect())
    }

    /// Passes a record on, with the timestamp of the record being processed (or of the
    /// punctuation).
    pub fn forward(&mut self, key: KO, value: VO) {
        self.forwarded.push((key, value, self.timestamp));
    }

    /// Passes a record on with its own timestamp.
    pub fn forward_at(&mut self, key: KO, value: VO, timestamp: i64) {
        self.forwarded.push((key, value, timestamp));
    }

    /// The timestamp of the record being processed; in a punctuation, the stream time.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The task's stream time: the largest record timestamp it has seen.
    pub fn stream_time(&self) -> i64 {
        self.stream_time
    }

    /// The task (`<subtopology>_<partition>`): each task has its own stores.
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// The value of `key` in `store`, if any. A store that cannot be read ends the record:
    /// its writes and forwards are dropped and the batch is tried again.
    pub fn get<KS: Serde, VS: Serde>(
        &mut self,
        store: &KeyValueStore<KS, VS>,
        key: &KS::Value,
    ) -> Option<VS::Value> {
        self.check(&store.name);
        let bytes = match self.stores.get(&store.name, &store.key.serialize(key)) {
            Ok(v) => v?,
            Err(e) => {
                self.error.get_or_insert(e);
                return None;
            }
        };
        let what = format!("store {:?}: value", store.name);
        Some(read_or_fail(&store.value, &bytes, &what))
    }

    /// Sets `key`'s value in `store` (written to its changelog with the record's outputs).
    pub fn put<KS: Serde, VS: Serde>(
        &mut self,
        store: &KeyValueStore<KS, VS>,
        key: &KS::Value,
        value: &VS::Value,
    ) {
        self.check(&store.name);
        self.stores.put(
            &store.name,
            &store.key.serialize(key),
            store.value.serialize(value),
        );
    }

    /// Deletes `key` from `store` (a tombstone in its changelog).
    pub fn delete<KS: Serde, VS: Serde>(&mut self, store: &KeyValueStore<KS, VS>, key: &KS::Value) {
        self.check(&store.name);
        self.stores.delete(&store.name, &store.key.serialize(key));
    }

    /// Sets `key`'s value in the window of `store` starting at `start` (Kafka's
    /// `WindowStore.put(key, value, windowStartTimestamp)`).
    pub fn put_window<KS: Serde, VS: Serde>(
        &mut self,
        store: &WindowStore<KS, VS>,
        key: &KS::Value,
        value: &VS::Value,
        start: i64,
    ) {
        self.check(&store.name);
        let k = window_store_key(&store.key.serialize(key), start);
        self.stores
            .put(&store.name, &k, store.value.serialize(value));
    }

    /// Removes `key`'s value from the window of `store` starting at `start` (Kafka's `put`
    /// of null).
    pub fn delete_window<KS: Serde, VS: Serde>(
        &mut self,
        store: &WindowStore<KS, VS>,
        key: &KS::Value,
        start: i64,
    ) {
        self.check(&store.name);
        let k = window_store_key(&store.key.serialize(key), start);
        self.stores.delete(&store.name, &k);
    }

    /// `key`'s values in the windows of `store` starting in `from..=to`, by start (Kafka's
    /// `WindowStore.fetch(key, timeFrom, timeTo)`).
    pub fn fetch_windows<KS: Serde, VS: Serde>(
        &mut self,
        store: &WindowStore<KS, VS>,
        key: &KS::Value,
        from: i64,
        to: i64,
    ) -> Vec<(i64, VS::Value)> {
        self.check(&store.name);
        // Windows start at 0 or later, as Kafka's segmented stores keep them (a negative
        // start's bytes sort after every other's: the range must not reach them).
        let from = from.max(0);
        if to < from {
            return Vec::new();
        }
        let k = store.key.serialize(key);
        let range = self.stores.range(
            &store.name,
            &window_store_key(&k, from),
            &window_store_key(&k, to),
        );
        let entries = match range {
            Ok(e) => e,
            Err(e) => {
                self.error.get_or_insert(e);
                return Vec::new();
            }
        };
        let what = format!("store {:?}: value", store.name);
        entries
            .into_iter()
            .filter_map(|(sk, v)| {
                let start = window_store_start(&k, &sk)?;
                Some((start, read_or_fail(&store.value, &v, &what)))
            })
            .collect()
    }

    fn check(&self, store: &str) {
        if !self.allowed.iter().any(|s| s == store) {
            panic!("store {store:?} is not connected to this processor: name it in KStream::process's stores");
        }
    }
}

/// A user's processor, as Kafka Streams' `Processor<K, V, KO, VO>`. One value serves every
/// task; what it keeps per task belongs in its stores (or keyed by [`ProcessorContext::task`]).
pub trait Processor<K, V, KO, VO>: Send + Sync + 'static {
    /// Handles one record.
    fn process(&self, record: Record<K, V>, ctx: &mut ProcessorContext<'_, KO, VO>);

    /// How often [`Processor::punctuate`] runs on stream time (`None`: never).
    fn punctuate_every(&self) -> Option<Duration> {
        None
    }

    /// Runs when the task's stream time has passed the next punctuation time: first at the
    /// first record, then each `punctuate_every` of stream time (after the record that
    /// crossed it), as Kafka's `PunctuationType.STREAM_TIME`. `stream_time` is its time.
    fn punctuate(&self, stream_time: i64, ctx: &mut ProcessorContext<'_, KO, VO>) {
        let _ = (stream_time, ctx);
    }

    /// How often [`Processor::punctuate_wall`] runs on wall-clock time (`None`: never).
    fn punctuate_wall_every(&self) -> Option<Duration> {
        None
    }

    /// Runs on each running active task every `punctuate_wall_every` of wall-clock time,
    /// whether records arrive or not, as Kafka's `PunctuationType.WALL_CLOCK_TIME`: first
    /// one interval after the task started running. `now_ms` is the time (ms since the
    /// epoch); what it forwards is stamped with it. A late punctuation is not repeated to
    /// catch up.
    fn punctuate_wall(&self, now_ms: i64, ctx: &mut ProcessorContext<'_, KO, VO>) {
        let _ = (now_ms, ctx);
    }
}

/// A schedule's interval in milliseconds, at least 1.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl<K, V> KStream<K, V>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    /// Runs `processor` on each record with the stores named in `stores` (created with
    /// [`KeyValueStore::new`]), as Kafka Streams' `process(supplier, storeNames)`. What it
    /// forwards is a stream again, read with `key`/`value` (the serdes it crosses the store
    /// step with). Keys may change: a later grouping repartitions.
    ///
    /// ```
    /// use baton_streams::serdes::{Long, Str};
    /// use baton_streams::{Consumed, KeyValueStore, Processor, ProcessorContext, Produced, Record, StreamsBuilder};
    ///
    /// /// Forwards each key's running total, kept in the store "totals".
    /// struct Totals(KeyValueStore<Str, Long>);
    /// impl Processor<String, i64, String, i64> for Totals {
    ///     fn process(&self, r: Record<String, i64>, ctx: &mut ProcessorContext<'_, String, i64>) {
    ///         let total = ctx.get(&self.0, &r.key).unwrap_or(0) + r.value;
    ///         ctx.put(&self.0, &r.key, &total);
    ///         ctx.forward(r.key, total);
    ///     }
    /// }
    ///
    /// let builder = StreamsBuilder::new("totals");
    /// builder
    ///     .stream("amounts", Consumed::with(Str, Long))
    ///     .process(Totals(KeyValueStore::new("totals", Str, Long)), &["totals"], Str, Long)
    ///     .to("running-totals", Produced::with(Str, Long));
    /// assert_eq!(builder.build().unwrap().changelog_topic("totals"), "totals-totals-changelog");
    /// ```
    pub fn process<KO, VO, KS, VS>(
        self,
        processor: impl Processor<K, V, KO, VO>,
        stores: &[&str],
        key: KS,
        value: VS,
    ) -> KStream<KO, VO>
    where
        KO: Send + Sync + 'static,
        VO: Send + Sync + 'static,
        KS: Serde<Value = KO>,
        VS: Serde<Value = VO>,
    {
        let graph = self.graph.clone();
        let mut g = graph.borrow_mut();
        let at = g.exit(&self.at);
        let last = g
            .description
            .processor(at.sub, "PROCESSOR", &self.last, stores);
        let names: Vec<String> = stores.iter().map(|s| (*s).to_owned()).collect();
        let (chain, key, value) = (self.chain, Arc::new(key), Arc::new(value));
        let (out_key, out_value) = (key.clone(), value.clone());
        let processor = Arc::new(processor);
        let every = processor.punctuate_every().map(millis);
        let wall = processor.punctuate_wall_every().map(|every| {
            let wall = wall_punctuation(
                processor.clone(),
                names.clone(),
                (key.clone(), value.clone()),
                every,
            );
            (every, wall)
        });
        let next_punctuation: Mutex<BTreeMap<TaskId, i64>> = Mutex::new(BTreeMap::new());
        let allowed = names.clone();
        let step = move |task: TaskId,
                         r: &StreamRecord,
                         stream_time: i64,
                         stores: &mut dyn Stores|
              -> Result<Vec<StreamRecord>, StoreError> {
            let mut ctx = ProcessorContext::new(stores, &allowed, r.timestamp, stream_time, task);
            // A processor takes values: a delete (a table's update) passes it by.
            let records = r.value.as_ref().map_or_else(Vec::new, |v| chain(&r.key, v));
            for (k, v) in records {
                let record = Record {
                    key: k,
                    value: v,
                    timestamp: r.timestamp,
                };
                processor.process(record, &mut ctx);
            }
            if let Some(every) = every {
                if stream_time_due(&next_punctuation, task, stream_time, every) {
                    ctx.timestamp = stream_time;
                    processor.punctuate(stream_time, &mut ctx);
                }
            }
            ctx.finish(&*key, &*value)
        };
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        g.edit(&at, move |s| {
            let s = s.process(&refs, step);
            match wall {
                Some((every, wall)) => s.punctuated_every(every, wall),
                None => s,
            }
        });
        drop(g);
        KStream {
            graph,
            at,
            chain: decoding(out_key, out_value, "a processor's output".into()),
            key_changed: true,
            updates: false,
            last,
            deletes: None,
        }
    }
}

/// Whether `task`'s stream-time punctuation is due at `stream_time` (every `every` ms of
/// stream time, from the first record); if so, its next time, on the schedule's steps.
fn stream_time_due(
    next: &Mutex<BTreeMap<TaskId, i64>>,
    task: TaskId,
    stream_time: i64,
    every: i64,
) -> bool {
    let mut next = next.lock().unwrap_or_else(|p| p.into_inner());
    let at = next.entry(task).or_insert(stream_time);
    let due = stream_time >= *at;
    if due {
        let behind = (stream_time - *at) / every + 1;
        *at = at.saturating_add(behind.saturating_mul(every));
    }
    due
}

/// A processor's wall-clock punctuation as the runtime calls it. The runtime calls every
/// punctuation of a sub-topology at its shortest interval; this one runs on its own: when
/// `every` has passed since it last ran, give or take a tenth (at most 50 ms) for the calls'
/// own jitter.
fn wall_punctuation<K, V, KO, VO, KS, VS>(
    processor: Arc<impl Processor<K, V, KO, VO>>,
    allowed: Vec<String>,
    (key, value): (Arc<KS>, Arc<VS>),
    every: Duration,
) -> impl Fn(TaskId, i64, i64, &mut dyn Stores) -> Result<Vec<StreamRecord>, StoreError>
       + Send
       + Sync
       + 'static
where
    K: 'static,
    V: 'static,
    KO: Send + Sync + 'static,
    VO: Send + Sync + 'static,
    KS: Serde<Value = KO>,
    VS: Serde<Value = VO>,
{
    let every_ms = millis(every);
    let slack = (every_ms / 10).min(50);
    let last_run: Mutex<BTreeMap<TaskId, i64>> = Mutex::new(BTreeMap::new());
    move |task: TaskId, now_ms: i64, stream_time: i64, stores: &mut dyn Stores| {
        {
            let mut last = last_run.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(&at) = last.get(&task) {
                if now_ms < at.saturating_add(every_ms - slack) {
                    return Ok(Vec::new());
                }
            }
            last.insert(task, now_ms);
        }
        let mut ctx = ProcessorContext::new(stores, &allowed, now_ms, stream_time, task);
        processor.punctuate_wall(now_ms, &mut ctx);
        ctx.finish(&*key, &*value)
    }
}
