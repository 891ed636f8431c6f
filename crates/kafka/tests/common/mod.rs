//! A real broker for each test, and a member driver.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use baton_assignor::{AssignmentConfig, TaskId};
use baton_kafka::client::NewTopic;
use baton_kafka::member::Membership;
pub use baton_kafka::testing::Broker;
use baton_kafka::{Client, GroupMember, MemberConfig};
use baton_protocol::bridge::{Subtopology, Topology};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub const PARTITIONS: u32 = 6;

pub fn topology() -> Topology {
    let mut subtopologies = BTreeMap::new();
    subtopologies.insert(
        0,
        Subtopology {
            source_topics: vec!["input".into()],
            changelog_topics: vec!["app-counts-changelog".into()],
            partitions: PARTITIONS,
        },
    );
    Topology { subtopologies }
}

pub async fn create_topics(client: &Client) {
    client
        .create_topics(&[
            NewTopic {
                name: "input".into(),
                partitions: PARTITIONS as i32,
                compacted: false,
            },
            NewTopic {
                name: "app-counts-changelog".into(),
                partitions: PARTITIONS as i32,
                compacted: true,
            },
        ])
        .await
        .unwrap();
}

pub fn config(group: &str, n: u128, session_timeout_ms: i32) -> MemberConfig {
    MemberConfig {
        group_id: group.into(),
        client_id: format!("member-{n}"),
        group_instance_id: None,
        session_timeout_ms,
        rebalance_timeout_ms: 10_000,
        process_id: uuid::Uuid::from_u128(n),
        user_endpoint: format!("host-{n}:8080"),
        topology: topology(),
        assignor: baton_assignor::AssignorKind::HighAvailability,
        metadata_limit: baton_protocol::sizing::GROUP_METADATA_LIMIT,
        assignment_config: AssignmentConfig::default(),
        rack: None,
        client_tags: Vec::new(),
    }
}

/// 200 ms by default (tuned); `BATON_HEARTBEAT_MS=3000` gives Kafka's default for measurements.
fn heartbeat_interval() -> Duration {
    Duration::from_millis(
        std::env::var("BATON_HEARTBEAT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200),
    )
}

/// A member running its join/heartbeat loop in the background.
pub struct Driver {
    pub state: watch::Receiver<Option<Membership>>,
    pub handle: JoinHandle<()>,
    pub leave: Option<tokio::sync::oneshot::Sender<()>>,
}

pub fn drive(client: Arc<Client>, cfg: MemberConfig) -> Driver {
    drive_at(client, cfg, baton_protocol::BATON_VERSION)
}

/// As [`drive`], for a member that speaks at most `version` (an older Kafka Streams).
pub fn drive_at(client: Arc<Client>, cfg: MemberConfig, version: i32) -> Driver {
    let (tx, rx) = watch::channel(None);
    let (leave_tx, mut leave_rx) = tokio::sync::oneshot::channel();
    let handle = tokio::spawn(async move {
        let mut m = GroupMember::new(client, cfg);
        m.limit_version(version);
        let mut owned: Vec<baton_protocol::TopicPartition> = Vec::new();
        loop {
            match m.join().await {
                Ok(ms) => {
                    let _ = tx.send(Some(ms.clone()));
                    // The cooperative rule: a member that lost partitions it owned has released
                    // them (nothing runs here) and rejoins at once, so they can be handed over.
                    let revoked = owned.iter().any(|p| !ms.partitions.contains(p));
                    owned = ms.partitions.clone();
                    if revoked || ms.version_probing {
                        continue;
                    }
                }
                Err(e) => {
                    // The broker is gone at the end of a test; anything else is a failure the
                    // waiting side reports.
                    eprintln!("join failed: {e}");
                    return;
                }
            }
            loop {
                tokio::select! {
                    _ = &mut leave_rx => {
                        if let Err(e) = m.leave().await {
                            eprintln!("leave failed: {e}");
                        }
                        let _ = tx.send(None);
                        return;
                    }
                    _ = tokio::time::sleep(heartbeat_interval()) => {}
                }
                match m.heartbeat().await {
                    Ok(baton_kafka::Beat::Alive) => {}
                    Ok(_) => break,
                    Err(e) => {
                        eprintln!("heartbeat of {}: {e}", m.member_id());
                        break;
                    }
                }
            }
        }
    });
    Driver {
        state: rx,
        handle,
        leave: Some(leave_tx),
    }
}

/// Waits until every driver holds an assignment of one generation that covers every task once.
pub async fn wait_settled(drivers: &[&Driver], timeout: Duration) -> Vec<Membership> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let states: Vec<Option<Membership>> =
            drivers.iter().map(|d| d.state.borrow().clone()).collect();
        if let Some(all) = states.iter().cloned().collect::<Option<Vec<Membership>>>() {
            let gen = all[0].generation;
            let mut tasks: Vec<TaskId> = all
                .iter()
                .flat_map(|m| m.info.active_tasks.clone())
                .collect();
            tasks.sort();
            let complete =
                tasks.len() == PARTITIONS as usize && tasks.windows(2).all(|w| w[0] != w[1]);
            if all.iter().all(|m| m.generation == gen) && complete {
                return all;
            }
        }
        if tokio::time::Instant::now() > deadline {
            panic!("group did not settle in {timeout:?}: {states:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
