//! What an instance's stream threads share: the Kafka client, the topology, the status board
//! and the drain flag.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use baton_kafka::Client;
use baton_protocol::bridge::Topology as WireTopology;
use baton_protocol::TopicPartition;
use tokio::sync::watch;

use crate::config::RuntimeConfig;
use crate::query::copies::LocalCopies;
use crate::query::metrics::QueryMetrics;
use crate::query::routing::Routing;
use crate::repeats::Repeats;
use crate::state_dir::StateDir;
use crate::status::Status;
use crate::topology::Topology;

pub struct Context {
    pub client: Arc<Client>,
    pub cfg: RuntimeConfig,
    pub topology: Topology,
    pub wire: WireTopology,
    /// Partition counts of the sink topics.
    pub sink_partitions: BTreeMap<String, u32>,
    pub process_id: uuid::Uuid,
    pub state_dir: StateDir,
    pub status: Status,
    /// The stores held here, for queries.
    pub copies: LocalCopies,
    /// The global tables' stores, read whole on this instance ([`crate::global`]).
    pub globals: Vec<crate::global::GlobalStore>,
    pub queries: QueryMetrics,
    /// Where every task's copies are, from the latest assignment.
    routing: Mutex<Routing>,
    leaving: AtomicBool,
    /// `baton retry` requests seen so far: each thread retries its failed tasks once per.
    retries: AtomicU64,
    leaders: Mutex<BTreeMap<TopicPartition, String>>,
    /// The largest record batch the broker is believed to take, learnt from its refusals.
    batch_limit: AtomicUsize,
    /// Turns true when the instance must stop: shut down from outside, or a thread failed.
    stop: watch::Sender<bool>,
    /// Why a thread stopped the instance, if one did.
    failure: Mutex<Option<String>>,
    /// Failures under way (fetches, produces, commits), each logged once ([`Context::failing`]).
    repeats: Mutex<Repeats>,
    /// Whether `repeats` holds any failure: a success (every fetched partition, every produce)
    /// then takes no lock when nothing is failing, which is nearly always.
    any_failing: AtomicBool,
    born: std::time::Instant,
    /// The ids of the source and changelog topics as this process first saw them
    /// ([`Context::learn_topic_ids`]): fetches by id tell a topic made again from the old one.
    topic_ids: Mutex<BTreeMap<String, uuid::Uuid>>,
}

impl Context {
    pub fn new(
        client: Arc<Client>,
        cfg: RuntimeConfig,
        topology: Topology,
        wire: WireTopology,
        sink_partitions: BTreeMap<String, u32>,
        process_id: uuid::Uuid,
    ) -> Context {
        Context {
            state_dir: StateDir::new(&cfg.state_dir),
            client,
            cfg,
            topology,
            wire,
            sink_partitions,
            process_id,
            status: Status::default(),
            copies: LocalCopies::default(),
            globals: Vec::new(),
            queries: QueryMetrics::default(),
            routing: Mutex::new(Routing::default()),
            leaving: AtomicBool::new(false),
            retries: AtomicU64::new(0),
            leaders: Mutex::new(BTreeMap::new()),
            batch_limit: AtomicUsize::new(baton_kafka::records::DEFAULT_BATCH_LIMIT),
            stop: watch::channel(false).0,
            failure: Mutex::new(None),
            repeats: Mutex::new(Repeats::default()),
            any_failing: AtomicBool::new(false),
            born: std::time::Instant::now(),
            topic_ids: Mutex::new(BTreeMap::new()),
        }
    }

    /// An operator asked this instance to open its failed tasks again (`baton retry`).
    pub fn request_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// How many retries were asked for so far.
    pub fn retry_requests(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Asks the broker for the ids of the topics this application reads (its sources and
    /// changelogs). A broker that gives none, or does not answer, leaves fetches by name.
    pub async fn learn_topic_ids(&self) {
        let topics: std::collections::BTreeSet<String> = self
            .wire
            .subtopologies
            .values()
            .flat_map(|s| s.source_topics.iter().chain(&s.changelog_topics).cloned())
            .collect();
        let topics: Vec<String> = topics.into_iter().collect();
        match self.client.topic_ids(&topics).await {
            Ok(ids) => *self.topic_ids.lock().unwrap_or_else(|e| e.into_inner()) = ids,
            Err(e) => tracing::warn!(error = %e, "reading topic ids; fetching by topic name"),
        }
    }

    /// The topic ids learnt at startup.
    pub fn topic_ids(&self) -> BTreeMap<String, uuid::Uuid> {
        self.topic_ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `subject` (what failed, and where) failed with `error`: logged when it starts, then at
    /// most every 10 s while it repeats ([`crate::repeats`]).
    pub fn failing(&self, subject: &str, error: &dyn std::fmt::Display) {
        let line = {
            let mut repeats = self.repeats.lock().unwrap_or_else(|e| e.into_inner());
            self.any_failing.store(true, Ordering::Relaxed);
            repeats.failed(subject, &error.to_string(), self.born.elapsed())
        };
        if let Some(line) = line {
            crate::repeats::log(subject, line);
        }
    }

    /// The `subject` of [`Context::failing`] succeeded: a failure under way is logged as
    /// ended. `subject` is built, and the lock taken, only while some failure is under way (a
    /// success racing the first failure elsewhere is seen by the next success).
    pub fn recovered(&self, subject: impl FnOnce() -> String) {
        if !self.any_failing.load(Ordering::Relaxed) {
            return;
        }
        let line = {
            let mut repeats = self.repeats.lock().unwrap_or_else(|e| e.into_inner());
            let subject = subject();
            let line = repeats.succeeded(&subject, self.born.elapsed());
            if repeats.is_empty() {
                self.any_failing.store(false, Ordering::Relaxed);
            }
            line.map(|l| (subject, l))
        };
        if let Some((subject, line)) = line {
            crate::repeats::log(&subject, line);
        }
    }

    /// Where every task's copies are, as the latest assignment says.
    pub fn routing(&self) -> std::sync::MutexGuard<'_, Routing> {
        self.routing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A thread's assignment of `generation` came with host maps: they replace older ones.
    pub fn set_routing(&self, generation: i32, info: &baton_protocol::AssignmentInfo) {
        let mut r = self.routing();
        if generation >= r.generation || r.is_empty() {
            *r = Routing::from_info(generation, info);
        }
    }

    /// Largest record batch to send, in bytes.
    pub fn batch_limit(&self) -> usize {
        self.batch_limit.load(Ordering::Relaxed)
    }

    /// The broker refused a batch of `refused` bytes: send at most half that from now on.
    pub fn shrink_batch_limit(&self, refused: usize) {
        let limit = (refused / 2).max(1024);
        let before = self.batch_limit.fetch_min(limit, Ordering::Relaxed);
        if limit < before {
            tracing::info!(refused_bytes = refused, limit_bytes = limit, "the broker refused a record batch as too large; sending smaller batches from now on");
        }
    }

    /// Turns true when the instance must stop.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Stops the instance because of `error` (the first failure is the one reported).
    pub fn fail(&self, error: String) {
        tracing::error!(error = %error, "stopping the instance");
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(error);
        self.stop();
    }

    /// Why the instance was stopped by one of its threads, if it was.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The consumer group: the application id, as in Kafka Streams.
    pub fn group(&self) -> &str {
        self.topology.app_id()
    }

    pub fn is_leaving(&self) -> bool {
        self.leaving.load(Ordering::SeqCst)
    }

    /// Marks the instance as leaving (drain): its threads rejoin with the leaving flag.
    pub fn set_leaving(&self) {
        self.leaving.store(true, Ordering::SeqCst);
    }

    /// Takes a drain back: threads that have not drained yet rejoin as staying.
    pub fn clear_leaving(&self) {
        self.leaving.store(false, Ordering::SeqCst);
    }

    /// The leader of a partition, from a cache that [`Context::forget_leader`] invalidates.
    pub async fn leader(&self, topic: &str, partition: i32) -> baton_kafka::Result<String> {
        let key = TopicPartition::new(topic, partition);
        if let Some(l) = self.lock_leaders().get(&key) {
            return Ok(l.clone());
        }
        let l = self.client.leader(topic, partition).await?;
        self.lock_leaders().insert(key, l.clone());
        Ok(l)
    }

    pub fn forget_leader(&self, topic: &str, partition: i32) {
        self.lock_leaders()
            .remove(&TopicPartition::new(topic, partition));
    }

    fn lock_leaders(&self) -> std::sync::MutexGuard<'_, BTreeMap<TopicPartition, String>> {
        self.leaders.lock().unwrap_or_else(|e| e.into_inner())
    }
}
