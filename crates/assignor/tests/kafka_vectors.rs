//! `kafka` against Kafka's own answers: clusters recorded from Kafka Streams'
//! `HighAvailabilityTaskAssignor` (its Java classes run unchanged on the same input), kept in
//! `tests/kafka_vectors/` as they were recorded. Kafka sends warm-ups as standbys, so the
//! recorded `standby` holds both: the port's `standby + warmup` is compared as one set.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use baton_assignor::input::parse_cluster_json;
use baton_assignor::{KafkaAssignor, TaskAssignor};
use serde::Deserialize;

#[derive(Deserialize)]
struct Recorded {
    clients: BTreeMap<String, RecordedClient>,
    followup_rebalance: bool,
}

#[derive(Deserialize)]
struct RecordedClient {
    active: Vec<String>,
    standby: Vec<String>,
    #[serde(default)]
    warmup: Vec<String>,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka_vectors")
}

/// Every difference between the port's answer and Kafka's for one cluster, one line each.
fn differences(name: &str) -> Vec<String> {
    let input = fs::read_to_string(dir().join("inputs").join(name)).unwrap();
    let recorded: Recorded =
        serde_json::from_str(&fs::read_to_string(dir().join("kafka").join(name)).unwrap())
            .unwrap_or_else(|e| panic!("{name}: recorded answer: {e}"));
    let cluster = parse_cluster_json(&input).unwrap_or_else(|e| panic!("{name}: input: {e}"));
    let ours = KafkaAssignor.assign(&cluster);

    let mut out = Vec::new();
    if ours.followup_rebalance != recorded.followup_rebalance {
        out.push(format!(
            "{name}: followup_rebalance: kafka {} baton {}",
            recorded.followup_rebalance, ours.followup_rebalance
        ));
    }
    let ids: BTreeSet<String> = recorded
        .clients
        .keys()
        .cloned()
        .chain(ours.clients.keys().map(ToString::to_string))
        .collect();
    for id in ids {
        let theirs = recorded.clients.get(&id);
        let mine = ours.clients.get(&id.as_str().into());
        let set = |v: &mut dyn Iterator<Item = String>| v.collect::<BTreeSet<String>>();
        let their_active = set(&mut theirs.iter().flat_map(|c| c.active.iter().cloned()));
        let their_copies = set(&mut theirs
            .iter()
            .flat_map(|c| c.standby.iter().chain(&c.warmup).cloned()));
        let my_active = set(&mut mine
            .iter()
            .flat_map(|c| c.active.iter().map(ToString::to_string)));
        let my_copies = set(&mut mine
            .iter()
            .flat_map(|c| c.standby.iter().chain(&c.warmup).map(ToString::to_string)));
        for (what, k, b) in [
            ("active", &their_active, &my_active),
            ("standby+warmup", &their_copies, &my_copies),
        ] {
            if k != b {
                let only_kafka: Vec<&String> = k.difference(b).collect();
                let only_baton: Vec<&String> = b.difference(k).collect();
                out.push(format!(
                    "{name}: client {id} {what}: only in kafka {only_kafka:?}, only in baton {only_baton:?}"
                ));
            }
        }
    }
    out
}

#[test]
fn the_kafka_mode_gives_kafkas_recorded_answers() {
    let mut names: Vec<String> = fs::read_dir(dir().join("inputs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 42, "expected the 42 recorded clusters");
    let mut failed = Vec::new();
    for name in &names {
        let diffs = differences(name);
        if !diffs.is_empty() {
            failed.push(name.clone());
            for d in diffs.iter().take(6) {
                eprintln!("{d}");
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} recorded clusters differ from Kafka: {failed:?}",
        failed.len(),
        names.len()
    );
}
