//! An application instance: prepares topics and the state directory, then runs its stream
//! threads, the drain watcher, the state cleaner and `/metrics` until shut down or drained.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use baton_kafka::client::NewTopic;
use baton_kafka::Client;
use tokio::sync::watch;

use crate::config::RuntimeConfig;
use crate::context::Context;
use crate::error::{kafka, Result, RuntimeError};
use crate::thread::{Exit, StreamThread};
use crate::topology::{Topology, TopologyError};
use crate::{cleanup, control, metrics};

/// The file under the state directory that keeps this instance's process id across restarts,
/// so the assignor recognises the state it left.
const PROCESS_ID_FILE: &str = "process-id";
/// The file whose lock marks the state directory as in use.
const LOCK_FILE: &str = ".lock";

/// Runs `topology` until `shutdown` turns true (then commits, closes and leaves) or until the
/// instance is drained. Returns how it ended.
pub async fn run(
    cfg: RuntimeConfig,
    topology: Topology,
    shutdown: watch::Receiver<bool>,
) -> Result<Exit> {
    cfg.validate().map_err(RuntimeError::Config)?;
    let bootstrap: Vec<&str> = cfg.bootstrap.iter().map(String::as_str).collect();
    let client = Client::new(&bootstrap, &cfg.instance_id);

    let partitions = partition_counts(&client, &topology).await?;
    let wire = topology.wire(&partitions)?;
    let mut topics = Vec::new();
    for s in wire.subtopologies.values() {
        for t in &s.changelog_topics {
            topics.push(NewTopic {
                name: t.clone(),
                partitions: s.partitions as i32,
                compacted: true,
            });
        }
    }
    let mut sink_partitions = BTreeMap::new();
    for (sub, s) in &wire.subtopologies {
        if let Some(sink) = topology.sink_of(*sub) {
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
    client
        .create_topics(&topics)
        .await
        .map_err(kafka("creating changelog and sink topics"))?;
    control::ensure_control_topic(&client, topology.app_id()).await?;

    std::fs::create_dir_all(&cfg.state_dir).map_err(|source| RuntimeError::Io {
        what: format!("state dir {}", cfg.state_dir.display()),
        source,
    })?;
    // Held until this function returns: a second instance on the same directory is refused
    // instead of waiting forever for stores this one holds.
    let _lock = lock_state_dir(&cfg.state_dir)?;
    let process_id = process_id(&cfg.state_dir)?;
    let metrics_addr = cfg.metrics_addr;
    let threads = cfg.threads;
    let ctx = Arc::new(Context::new(
        client,
        cfg,
        topology,
        wire,
        sink_partitions,
        process_id,
    ));
    cleanup::scan(&ctx);
    tracing::info!(instance = %ctx.cfg.instance_id, process = %process_id, threads, assignor = %ctx.cfg.assignor, "starting");

    let mut background = Vec::new();
    if let Some(addr) = metrics_addr {
        let listener = metrics::bind(addr).await?;
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving /metrics");
        background.push(tokio::spawn(metrics::serve(listener, ctx.clone())));
    }
    background.push(tokio::spawn(control::watch(ctx.clone())));
    background.push(tokio::spawn(cleanup::run(ctx.clone())));

    let mut handles = Vec::new();
    for i in 0..threads {
        let thread = StreamThread::new(ctx.clone(), i);
        handles.push(tokio::spawn(thread.run(shutdown.clone())));
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
    for b in background {
        b.abort();
    }
    if matches!(result, Ok(Exit::Drained)) {
        tracing::info!(instance = %ctx.cfg.instance_id, "drained: every thread holds nothing; exiting");
    }
    result
}

/// Partition counts of the source topics (which must exist) and of the sink topics that do.
async fn partition_counts(client: &Client, topology: &Topology) -> Result<BTreeMap<String, u32>> {
    let mut names: Vec<String> = topology
        .source_topics()
        .into_iter()
        .chain(topology.sink_topics())
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
    for source in topology.source_topics() {
        if !out.contains_key(source) {
            return Err(TopologyError::MissingTopic(source.to_owned()).into());
        }
    }
    Ok(out)
}

/// Locks the state directory for this process (an advisory lock the OS drops on exit, even
/// after `kill -9`).
pub fn lock_state_dir(state_dir: &Path) -> Result<std::fs::File> {
    let path = state_dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| RuntimeError::Io {
            what: format!("lock file {}", path.display()),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(RuntimeError::Config(format!(
            "state dir {} is in use by another instance; give each instance its own",
            state_dir.display()
        ))),
        Err(std::fs::TryLockError::Error(source)) => Err(RuntimeError::Io {
            what: format!("locking {}", path.display()),
            source,
        }),
    }
}

/// The process id kept under the state directory, created on first use.
fn process_id(state_dir: &Path) -> Result<uuid::Uuid> {
    let path = state_dir.join(PROCESS_ID_FILE);
    let io = |source| RuntimeError::Io {
        what: format!("process id file {}", path.display()),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(s) => s.trim().parse().map_err(|e| {
            RuntimeError::Config(format!("{}: not a process id: {e}", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4();
            std::fs::write(&path, id.to_string()).map_err(io)?;
            Ok(id)
        }
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_dir_serves_one_instance_at_a_time() {
        let dir = std::env::temp_dir().join(format!("baton-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = lock_state_dir(&dir).unwrap();
        let err = lock_state_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("is in use by another instance"), "{err}");
        drop(first);
        lock_state_dir(&dir).unwrap();
        let id = process_id(&dir).unwrap();
        assert_eq!(
            process_id(&dir).unwrap(),
            id,
            "the process id survives a restart"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
