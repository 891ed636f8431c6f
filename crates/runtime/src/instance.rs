//! An application instance: prepares topics and the state directory, then runs its stream
//! threads, the drain watcher, the state cleaner and `/metrics` until shut down or drained.

use std::collections::BTreeMap;
use std::sync::Arc;

use baton_kafka::client::NewTopic;
use baton_kafka::Client;
use tokio::sync::watch;

use crate::config::RuntimeConfig;
use crate::context::Context;
use crate::error::{kafka, Result, RuntimeError};
use crate::query::api::Queries;
use crate::state_dir::StateDir;
use crate::thread::{Exit, StreamThread};
use crate::topology::{Topology, TopologyError};
use crate::{cleanup, control, metrics};

/// Runs `topology` until `shutdown` turns true (then commits, closes and leaves) or until the
/// instance is drained. Returns how it ended.
pub async fn run(
    cfg: RuntimeConfig,
    topology: Topology,
    shutdown: watch::Receiver<bool>,
) -> Result<Exit> {
    run_with_queries(cfg, topology, shutdown, Queries::new()).await
}

/// [`run`], with `queries` answering this instance's interactive queries in-process from the
/// moment it has started (docs/QUERIES.md), whether or not it also serves them over HTTP.
pub async fn run_with_queries(
    cfg: RuntimeConfig,
    topology: Topology,
    shutdown: watch::Receiver<bool>,
    queries: Queries,
) -> Result<Exit> {
    cfg.validate()?;
    #[cfg(feature = "failpoints")]
    arm_fail_points();
    let bootstrap: Vec<&str> = cfg.bootstrap.iter().map(String::as_str).collect();
    let client = Client::new(&bootstrap, &cfg.instance_id);

    // Bounded, and given up on shutdown: a broker that is down or silent at startup is an
    // error the operator sees, not a hang.
    let mut stop = shutdown.clone();
    let dead_letters = cfg.dead_letter_topics();
    let (wire, sink_partitions, control_from) = tokio::select! {
        prepared = tokio::time::timeout(
            cfg.startup_timeout,
            prepare(&client, &topology, &dead_letters),
        ) => {
            prepared.map_err(|_| RuntimeError::Unanswered(format!(
                "the broker at {} did not answer within {:.0} s of startup (startup.timeout.ms)",
                cfg.bootstrap.join(","),
                cfg.startup_timeout.as_secs_f64()
            )))??
        }
        _ = stop.wait_for(|s| *s) => return Ok(Exit::Shutdown),
    };

    let state_dir = StateDir::new(&cfg.state_dir);
    // Held until this function returns.
    let _lock = state_dir.lock()?;
    crate::legacy_layout::refuse_earlier_layouts(&state_dir, &topology)?;
    let process_id = state_dir.process_id()?;
    let metrics_addr = cfg.metrics_addr;
    let threads = cfg.threads;
    let Some(globals) = open_globals(&cfg, &topology, &client, &mut stop).await? else {
        return Ok(Exit::Shutdown);
    };
    let mut ctx = Context::new(client, cfg, topology, wire, sink_partitions, process_id);
    ctx.globals = globals;
    let ctx = Arc::new(ctx);
    ctx.learn_topic_ids().await;
    cleanup::scan(&ctx);
    queries.bind(ctx.clone());
    tracing::info!(instance = %ctx.cfg.instance_id, process = %process_id, threads, assignor = %ctx.cfg.assignor, "starting");

    let mut background = Vec::new();
    if let Some(addr) = metrics_addr {
        let listener = metrics::bind(addr).await?;
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving /metrics");
        background.push(tokio::spawn(metrics::serve(listener, ctx.clone())));
    }
    // Stopped after the threads, so a query under way when the instance drains or shuts down
    // is answered (by another copy, if its own was released) rather than cut off.
    let (queries_done, queries_stop) = watch::channel(false);
    let mut http_queries = None;
    if !ctx.cfg.user_endpoint.is_empty() {
        let listener = crate::query::server::bind(&ctx.cfg.user_endpoint).await?;
        tracing::info!(addr = %ctx.cfg.user_endpoint, "serving interactive queries");
        http_queries = Some(tokio::spawn(crate::query::server::serve(
            listener,
            ctx.clone(),
            queries_stop,
        )));
        background.push(tokio::spawn(crate::query::server::seed_routing(
            ctx.clone(),
        )));
    }
    background.push(tokio::spawn(control::watch(ctx.clone(), control_from)));
    background.push(tokio::spawn(control::publish_progress(ctx.clone())));
    background.push(tokio::spawn(cleanup::run(ctx.clone())));
    background.push(tokio::spawn(crate::global::follow(ctx.clone())));

    // The threads stop on the caller's shutdown or on a thread's failure alike.
    let mut outside = shutdown;
    let forward = ctx.clone();
    background.push(tokio::spawn(async move {
        if outside.wait_for(|stop| *stop).await.is_ok() {
            forward.stop();
        }
    }));
    let result = run_threads(&ctx, threads).await;
    queries_done.send_replace(true);
    if let Some(q) = http_queries {
        finish_queries(q).await;
    }
    for b in background {
        b.abort();
    }
    if let Some(failure) = ctx.failure() {
        return Err(RuntimeError::Failed(failure));
    }
    if matches!(result, Ok(Exit::Drained)) {
        tracing::info!(instance = %ctx.cfg.instance_id, "drained: every thread holds nothing; exiting");
    }
    result
}

/// The global tables' stores, read to their topics' ends (Kafka's global thread does so
/// before any stream thread starts); `None` when shut down meanwhile.
async fn open_globals(
    cfg: &RuntimeConfig,
    topology: &Topology,
    client: &Client,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Vec<crate::global::GlobalStore>>> {
    let globals = crate::global::open(&cfg.state_dir, topology)?;
    tokio::select! {
        read = crate::global::bootstrap(client, &globals) => read.map(|()| Some(globals)),
        _ = stop.wait_for(|s| *s) => Ok(None),
    }
}

/// Runs the stream threads until every one has stopped: drained when all drained, shut down
/// when any was, the last error otherwise.
async fn run_threads(ctx: &Arc<Context>, threads: u32) -> Result<Exit> {
    let mut handles = Vec::new();
    for i in 0..threads {
        let thread = StreamThread::new(ctx.clone(), i);
        handles.push(tokio::spawn(thread.run(ctx.stopping())));
    }
    let mut result = Ok(Exit::Drained);
    for h in handles {
        match h.await {
            Ok(Ok(Exit::Drained)) => {}
            Ok(Ok(Exit::Shutdown)) => {
                if result.is_ok() {
                    result = Ok(Exit::Shutdown);
                }
            }
            Ok(Err(e)) => result = Err(e),
            Err(e) => {
                result = Err(RuntimeError::Config(format!(
                    "a stream thread panicked: {e}"
                )));
            }
        }
    }
    result
}

/// Gives the queries under way when the threads stopped a little time to finish.
async fn finish_queries(server: tokio::task::JoinHandle<()>) {
    let abort = server.abort_handle();
    if tokio::time::timeout(crate::query::server::DRAIN_QUERIES, server)
        .await
        .is_err()
    {
        abort.abort();
        tracing::info!("queries still under way when the instance stopped were cut off");
    }
}

/// A repartition topic's partition count: beside a table or a source topic, theirs (a join
/// or a merge needs co-partitioned sides); else the largest of its writer's sources; `None`
/// while one of those is not known yet.
fn repartition_count(
    topology: &Topology,
    partitions: &BTreeMap<String, u32>,
    topic: &str,
    writer: u32,
) -> Option<u32> {
    if let Some(n) = topology.repartition_partitions(topic) {
        return Some(n);
    }
    let table = topology
        .sources_beside(topic)
        .into_iter()
        .filter_map(|t| partitions.get(t).copied())
        .max();
    let writer_count = |writer: u32| -> Option<u32> {
        let sources = topology.sources_of(writer);
        let counts: Option<Vec<u32>> = sources.iter().map(|s| partitions.get(s).copied()).collect();
        counts?.into_iter().max()
    };
    table.or_else(|| {
        // Repartition topics read together (a join of two re-keyed streams) take the largest
        // count among their writers', as Kafka co-partitions them.
        let writers = topology.repartition_topics();
        let others = topology
            .repartitions_beside(topic)
            .into_iter()
            .filter_map(|t| writers.iter().find(|(w, _)| *w == t).map(|&(_, sub)| sub));
        std::iter::once(writer)
            .chain(others)
            .map(writer_count)
            .collect::<Option<Vec<u32>>>()?
            .into_iter()
            .max()
    })
}

/// Arms the fail points `FAILPOINTS` names (`name=actions;...`), once per process: the fault
/// suite's way to make the runtime's own code fail where no input can.
#[cfg(feature = "failpoints")]
fn arm_fail_points() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Ok(spec) = std::env::var("FAILPOINTS") else {
            return;
        };
        for point in spec.split(';').filter(|p| !p.is_empty()) {
            let armed = point
                .split_once('=')
                .ok_or_else(|| format!("{point:?} is not name=actions"))
                .and_then(|(name, actions)| fail::cfg(name, actions));
            match armed {
                Ok(()) => tracing::warn!(point, "fail point armed"),
                Err(e) => tracing::error!(point, error = %e, "fail point not armed"),
            }
        }
    });
}

/// Creates the changelog, sink, dead-letter and control topics. Returns the wire topology,
/// the partition count of each topic records are written to (sinks, dead letters), and where
/// to follow the control topic from.
async fn prepare(
    client: &Client,
    topology: &Topology,
    dead_letters: &[&str],
) -> Result<(baton_protocol::bridge::Topology, BTreeMap<String, u32>, i64)> {
    let mut partitions = partition_counts(client, topology, dead_letters).await?;
    let mut topics = settle_repartition_topics(topology, &mut partitions)?;
    let wire = topology.wire(&partitions)?;
    for s in wire.subtopologies.values() {
        // A table's changelog is its source topic, which the user made.
        for t in s
            .changelog_topics
            .iter()
            .filter(|t| !s.source_topics.contains(t))
        {
            topics.push(NewTopic {
                name: t.clone(),
                partitions: s.partitions as i32,
                compacted: true,
            });
        }
    }
    let mut sink_partitions = BTreeMap::new();
    for (sub, s) in &wire.subtopologies {
        for sink in topology.sinks_of(*sub) {
            let n = partitions.get(sink).copied().unwrap_or(s.partitions);
            sink_partitions.insert(sink.to_owned(), n);
            if !partitions.contains_key(sink) {
                topics.push(NewTopic {
                    name: sink.to_owned(),
                    partitions: n as i32,
                    compacted: false,
                });
            }
        }
    }
    for &topic in dead_letters {
        // One partition when it has to be made: dead letters are few, and read in order.
        let n = partitions.get(topic).copied().unwrap_or(1);
        sink_partitions.insert(topic.to_owned(), n);
        if !partitions.contains_key(topic) {
            topics.push(NewTopic {
                name: topic.to_owned(),
                partitions: 1,
                compacted: false,
            });
        }
    }
    check_changelog_partitions(client, &topics).await?;
    create_topics(client, topology, &wire, topics).await?;
    control::ensure_control_topic(client, topology.app_id()).await?;
    let control_from = control::start_position(client, topology.app_id()).await;
    Ok((wire, sink_partitions, control_from))
}

/// The repartition topics still to make, each with its partition count, which `partitions`
/// takes too. A repartition topic fed from another one takes that one's count: settled in
/// rounds, each taking the topics whose writer's counts are known.
fn settle_repartition_topics(
    topology: &Topology,
    partitions: &mut BTreeMap<String, u32>,
) -> Result<Vec<NewTopic>> {
    let mut topics = Vec::new();
    // A repartition topic made before with another count than the one asked for now: its
    // records are partitioned for that count, and its readers' tasks follow it.
    for (topic, _) in topology.repartition_topics() {
        if let (Some(found), Some(expected)) = (
            partitions.get(topic).copied(),
            topology.repartition_partitions(topic),
        ) {
            if found != expected {
                return Err(TopologyError::BadRepartition {
                    topic: topic.to_owned(),
                    why: format!(
                        "it exists with {found} partitions, the application asks for \
                         {expected}: delete it (its records are partitioned for {found}) or \
                         use another --app-id"
                    ),
                }
                .into());
            }
        }
    }
    let mut unsettled: Vec<(&str, u32)> = topology
        .repartition_topics()
        .into_iter()
        .filter(|(t, _)| !partitions.contains_key(*t))
        .collect();
    while !unsettled.is_empty() {
        let before = unsettled.len();
        let mut waiting = Vec::new();
        for (topic, writer) in unsettled {
            match repartition_count(topology, partitions, topic, writer) {
                Some(n) => {
                    partitions.insert(topic.to_owned(), n);
                    topics.push(NewTopic {
                        name: topic.to_owned(),
                        partitions: n as i32,
                        compacted: false,
                    });
                }
                None => waiting.push((topic, writer)),
            }
        }
        if waiting.len() == before {
            let (_, writer) = waiting[0];
            return Err(TopologyError::MissingTopic(topology.sources_of(writer).join(", ")).into());
        }
        unsettled = waiting;
    }
    Ok(topics)
}

/// Makes `topics`; window stores' changelogs are compacted and time-limited (Kafka Streams'
/// settings), made one by one, each with its retention.
async fn create_topics(
    client: &Client,
    topology: &Topology,
    wire: &baton_protocol::bridge::Topology,
    topics: Vec<NewTopic>,
) -> Result<()> {
    let windowed: BTreeMap<String, i64> = wire
        .subtopologies
        .keys()
        .flat_map(|&sub| topology.stores_of(sub))
        .filter_map(|store| {
            let ms = topology.changelog_retention_ms(store)?;
            Some((topology.changelog_topic(store), ms))
        })
        .collect();
    let (timed, rest): (Vec<NewTopic>, Vec<NewTopic>) = topics
        .into_iter()
        .partition(|t| windowed.contains_key(&t.name));
    if !rest.is_empty() {
        client
            .create_topics(&rest)
            .await
            .map_err(kafka("creating changelog and sink topics"))?;
    }
    for t in timed {
        let retention = windowed[&t.name];
        create_changelog(client, &t.name, t.partitions, Some(retention))
            .await
            .map_err(kafka("creating window stores' changelog topics"))?;
    }
    Ok(())
}

/// Creates a changelog topic as Kafka Streams makes one: compacted, or for a window store
/// (`retention_ms`) compacted and time-limited.
pub(crate) async fn create_changelog(
    client: &Client,
    name: &str,
    partitions: i32,
    retention_ms: Option<i64>,
) -> baton_kafka::Result<()> {
    let topic = NewTopic {
        name: name.to_owned(),
        partitions,
        compacted: retention_ms.is_none(),
    };
    let one = std::slice::from_ref(&topic);
    match retention_ms {
        None => client.create_topics(one).await,
        Some(ms) => {
            let ms = ms.to_string();
            let configs = [("cleanup.policy", "compact,delete"), ("retention.ms", &ms)];
            client.create_topics_with(one, &configs).await
        }
    }
}

/// A changelog made earlier with another partition count (the input was re-created with
/// more partitions, or another application used the name) would map a task's state to the
/// wrong partition: refuse to start rather than restore the wrong data.
async fn check_changelog_partitions(client: &Client, wanted: &[NewTopic]) -> Result<()> {
    let changelogs: Vec<String> = wanted
        .iter()
        .filter(|t| t.compacted)
        .map(|t| t.name.clone())
        .collect();
    if changelogs.is_empty() {
        return Ok(());
    }
    let meta = client
        .metadata(Some(&changelogs))
        .await
        .map_err(kafka("reading changelog metadata"))?;
    for t in &meta.topics {
        let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
            continue;
        };
        let Some(want) = wanted.iter().find(|c| c.name == name) else {
            continue;
        };
        let found = t.partitions.len() as u32;
        if t.error_code == 0 && found != want.partitions as u32 {
            return Err(TopologyError::PartitionMismatch {
                topic: name,
                expected: want.partitions as u32,
                found,
            }
            .into());
        }
    }
    Ok(())
}

/// Partition counts of the source topics (which must exist) and of the sink topics that do.
async fn partition_counts(
    client: &Client,
    topology: &Topology,
    dead_letters: &[&str],
) -> Result<BTreeMap<String, u32>> {
    let mut names: Vec<String> = topology
        .source_topics()
        .into_iter()
        .chain(topology.sink_topics())
        .chain(topology.globals().iter().map(|g| g.topic.as_str()))
        .chain(dead_letters.iter().copied())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    let meta = client
        .metadata(Some(&names))
        .await
        .map_err(kafka("reading topic metadata"))?;
    let mut out = BTreeMap::new();
    for t in &meta.topics {
        let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
            continue;
        };
        if t.error_code == 0 && !t.partitions.is_empty() {
            out.insert(name, t.partitions.len() as u32);
        }
    }
    for g in topology.globals() {
        if !out.contains_key(&g.topic) {
            return Err(TopologyError::MissingTopic(g.topic.clone()).into());
        }
    }
    for source in topology.source_topics() {
        if !out.contains_key(source) && !topology.is_repartition_topic(source) {
            return Err(TopologyError::MissingTopic(source.to_owned()).into());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Stream;

    /// Two repartition topics read by one sub-topology (a join of two re-keyed streams) take
    /// the larger of their writers' partition counts, so that they are co-partitioned.
    #[test]
    fn repartition_topics_read_together_take_the_largest_count() {
        let rekey = |input: &str, out: &str| {
            Stream::from(&[input])
                .map(|k, v| (v.to_vec(), k.to_vec()))
                .to(out)
        };
        let t = Topology::new(
            "app",
            vec![
                rekey("orders", "app-left-repartition"),
                rekey("payments", "app-right-repartition"),
                Stream::from(&["app-left-repartition", "app-right-repartition"]).to("out"),
            ],
        )
        .unwrap()
        .with_repartition_topics([
            "app-left-repartition".into(),
            "app-right-repartition".into(),
        ])
        .unwrap();
        let mut partitions = BTreeMap::from([("orders".to_owned(), 2), ("payments".to_owned(), 3)]);
        let made = settle_repartition_topics(&t, &mut partitions).unwrap();
        let counts: Vec<(String, i32)> = made.into_iter().map(|n| (n.name, n.partitions)).collect();
        assert_eq!(
            counts,
            [
                ("app-left-repartition".to_owned(), 3),
                ("app-right-repartition".to_owned(), 3)
            ]
        );
    }
}
