//! The JSON form of cluster state read by `baton assign`, with errors that say where.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use crate::cluster::{ClientSpec, Cluster, ClusterState, InputError, TaskSpec};
use crate::config::AssignmentConfig;
use crate::model::{ClientId, Lag, TaskId};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInput {
    #[serde(default)]
    config: AssignmentConfig,
    /// Epoch milliseconds of this assignment, for `clients[].leaving_since_ms`.
    #[serde(default)]
    now_ms: Option<u64>,
    tasks: Vec<RawTask>,
    clients: Vec<RawClient>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    id: String,
    #[serde(default = "default_stateful")]
    stateful: bool,
    end_offset_sum: Option<i64>,
    /// Input partitions and the racks of their replicas, for `rack.aware.assignment.strategy`.
    #[serde(default)]
    partitions: Vec<RawPartition>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPartition {
    topic: String,
    partition: i32,
    #[serde(default)]
    racks: Vec<String>,
}

fn convert_partitions(
    path: &str,
    raw: &[RawPartition],
) -> Result<Vec<crate::cluster::SourcePartition>, InputError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (j, p) in raw.iter().enumerate() {
        let at = format!("{path}[{j}]");
        if p.topic.is_empty() {
            return Err(InputError::new(format!("{at}.topic"), "must not be empty"));
        }
        if p.partition < 0 {
            return Err(InputError::new(
                format!("{at}.partition"),
                format!("{} is negative", p.partition),
            ));
        }
        let tp = crate::model::TopicPartition::new(p.topic.clone(), p.partition);
        if !seen.insert(tp.clone()) {
            return Err(InputError::new(at, format!("{tp} is listed twice")));
        }
        if let Some(k) = p.racks.iter().position(|r| r.is_empty()) {
            return Err(InputError::new(
                format!("{at}.racks[{k}]"),
                "a rack name must not be empty",
            ));
        }
        out.push(crate::cluster::SourcePartition {
            partition: tp,
            racks: p.racks.iter().cloned().collect(),
        });
    }
    Ok(out)
}

fn default_stateful() -> bool {
    true
}

fn default_capacity() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    id: String,
    #[serde(default = "default_capacity")]
    capacity: u32,
    #[serde(default)]
    rack: Option<String>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
    #[serde(default)]
    leaving: bool,
    /// Epoch milliseconds when the client started leaving.
    #[serde(default)]
    leaving_since_ms: Option<u64>,
    #[serde(default)]
    owned_active: Vec<String>,
    #[serde(default)]
    owned_standby: Vec<String>,
    #[serde(default)]
    owned_warmup: Vec<String>,
    #[serde(default)]
    offset_sums: BTreeMap<String, i64>,
    #[serde(default)]
    lags: BTreeMap<String, i64>,
}

/// Parses and validates cluster state JSON.
pub fn parse_cluster_json(text: &str) -> Result<Cluster, InputError> {
    Cluster::new(parse_cluster_state(text)?)
}

/// Parses cluster state JSON into the unvalidated model (offset sums already turned into lags).
pub fn parse_cluster_state(text: &str) -> Result<ClusterState, InputError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let raw: RawInput = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." || path == "?" {
            "input".to_owned()
        } else {
            path
        };
        InputError::new(path, e.into_inner().to_string())
    })?;
    // One document: anything after it but whitespace is an error, not ignored.
    de.end().map_err(|e| {
        InputError::new(
            "input",
            format!(
                "unexpected data after the JSON document (line {}, column {})",
                e.line(),
                e.column()
            ),
        )
    })?;
    convert(raw)
}

/// Kafka Streams' limits on a client's tags.
fn check_tags(path: &str, tags: &BTreeMap<String, String>) -> Result<(), InputError> {
    use crate::config::{MAX_TAGS, MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS};
    if tags.len() > MAX_TAGS {
        return Err(InputError::new(
            path,
            format!("{} tags, at most {MAX_TAGS}", tags.len()),
        ));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > MAX_TAG_KEY_CHARS {
            return Err(InputError::new(
                path,
                format!("key {k:?} must be 1 to {MAX_TAG_KEY_CHARS} characters"),
            ));
        }
        if v.chars().count() > MAX_TAG_VALUE_CHARS {
            return Err(InputError::new(
                format!("{path}.{k}"),
                format!("value {v:?} is over {MAX_TAG_VALUE_CHARS} characters"),
            ));
        }
    }
    Ok(())
}

fn parse_task(path: &str, text: &str) -> Result<TaskId, InputError> {
    text.parse::<TaskId>()
        .map_err(|e| InputError::new(path, e.to_string()))
}

/// Client `i`'s lags, from its offset sums (against each task's end) or given as lags; a
/// task in neither is not stateful, or not reported.
fn client_lags(
    i: usize,
    c: &RawClient,
    by_id: &BTreeMap<TaskId, (bool, u64)>,
) -> Result<BTreeMap<TaskId, Lag>, InputError> {
    let mut lags = BTreeMap::new();
    for (field, map) in [("offset_sums", &c.offset_sums), ("lags", &c.lags)] {
        let path = format!("clients[{i}].{field}");
        for (key, &value) in map {
            let id = parse_task(&path, key)?;
            let &(stateful, end) = by_id
                .get(&id)
                .ok_or_else(|| InputError::new(&path, format!("task \"{id}\" is not in tasks")))?;
            if !stateful {
                continue;
            }
            let lag = if field == "offset_sums" {
                Lag::from_offset_sum(value, end)
            } else {
                Lag::from_wire(value)
            }
            .map_err(|e| InputError::new(format!("{path}.{id}"), e.to_string()))?;
            if lags.insert(id, lag).is_some() {
                return Err(InputError::new(
                    &path,
                    format!("task \"{id}\" is given in both offset_sums and lags"),
                ));
            }
        }
    }
    Ok(lags)
}

fn convert(raw: RawInput) -> Result<ClusterState, InputError> {
    let mut tasks = Vec::with_capacity(raw.tasks.len());
    let mut by_id: BTreeMap<TaskId, (bool, u64)> = BTreeMap::new();
    for (i, t) in raw.tasks.iter().enumerate() {
        let id = parse_task(&format!("tasks[{i}].id"), &t.id)?;
        let end = match t.end_offset_sum {
            None => 0,
            Some(e) if e >= 0 => e as u64,
            Some(e) => {
                return Err(InputError::new(
                    format!("tasks[{i}].end_offset_sum"),
                    format!("{e} is negative"),
                ))
            }
        };
        by_id.insert(id, (t.stateful, end));
        tasks.push(TaskSpec {
            id,
            stateful: t.stateful,
            end_offset_sum: end,
            partitions: convert_partitions(&format!("tasks[{i}].partitions"), &t.partitions)?,
        });
    }

    let mut clients = Vec::with_capacity(raw.clients.len());
    for (i, c) in raw.clients.into_iter().enumerate() {
        let owned = |field: &str, list: &[String]| -> Result<BTreeSet<TaskId>, InputError> {
            let path = format!("clients[{i}].{field}");
            let mut set = BTreeSet::new();
            for s in list {
                let id = parse_task(&path, s)?;
                if !set.insert(id) {
                    return Err(InputError::new(
                        &path,
                        format!("task \"{id}\" is listed twice"),
                    ));
                }
            }
            Ok(set)
        };
        let owned_active = owned("owned_active", &c.owned_active)?;
        let owned_standby = owned("owned_standby", &c.owned_standby)?;
        let owned_warmup = owned("owned_warmup", &c.owned_warmup)?;

        let lags = client_lags(i, &c, &by_id)?;

        let leaving_for_ms = match (c.leaving_since_ms, raw.now_ms) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(InputError::new(
                    format!("clients[{i}].leaving_since_ms"),
                    "needs now_ms (the time of this assignment) at the top level",
                ))
            }
            (Some(since), Some(now)) if since > now => {
                return Err(InputError::new(
                    format!("clients[{i}].leaving_since_ms"),
                    format!("{since} is after now_ms {now}"),
                ))
            }
            (Some(since), Some(now)) => Some(now - since),
        };
        check_tags(&format!("clients[{i}].tags"), &c.tags)?;
        clients.push(ClientSpec {
            id: ClientId(c.id),
            capacity: c.capacity,
            rack: c.rack,
            tags: c.tags,
            leaving: c.leaving,
            leaving_for_ms,
            owned_active,
            owned_standby,
            owned_warmup,
            lags,
        });
    }
    Ok(ClusterState {
        config: raw.config,
        tasks,
        clients,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClientIx, TaskIx};

    fn err(text: &str) -> String {
        parse_cluster_json(text).unwrap_err().to_string()
    }

    #[test]
    fn leaving_since_needs_now_and_a_leaving_client() {
        let doc = |now: &str, client: &str| {
            format!(r#"{{{now}"tasks": [{{"id": "0_0"}}], "clients": [{client}]}}"#)
        };
        let e = err(&doc(
            "",
            r#"{"id": "a", "leaving": true, "leaving_since_ms": 5}"#,
        ));
        assert!(
            e.starts_with("clients[0].leaving_since_ms: needs now_ms"),
            "{e}"
        );
        let e = err(&doc(
            r#""now_ms": 4, "#,
            r#"{"id": "a", "leaving": true, "leaving_since_ms": 5}"#,
        ));
        assert_eq!(e, "clients[0].leaving_since_ms: 5 is after now_ms 4");
        let e = err(&doc(
            r#""now_ms": 9, "#,
            r#"{"id": "a", "leaving_since_ms": 5}"#,
        ));
        assert_eq!(
            e,
            "clients[0].leaving_since_ms: given for a client that is not leaving"
        );
        let ok = doc(
            r#""now_ms": 9, "#,
            r#"{"id": "a", "leaving": true, "leaving_since_ms": 5}, {"id": "b"}"#,
        );
        let c = parse_cluster_json(&ok).unwrap();
        assert_eq!(c.clients[0].leaving_for_ms, Some(4));
    }

    #[test]
    fn data_after_the_document_is_an_error() {
        let e = err(r#"{"tasks": [], "clients": []} garbage"#);
        assert!(e.contains("unexpected data after the JSON document"), "{e}");
        let ok = "{\"tasks\": [{\"id\": \"0_0\"}], \"clients\": [{\"id\": \"a\"}]}\n  \n";
        assert!(
            parse_cluster_json(ok).is_ok(),
            "{:?}",
            parse_cluster_json(ok).err()
        );
    }

    #[test]
    fn parses_the_documented_example() {
        let c = parse_cluster_json(
            r#"{"config": {"acceptable.recovery.lag": 10000, "max.warmup.replicas": 2,
                           "num.standby.replicas": 1, "probing.rebalance.interval.ms": 600000},
                "tasks": [{"id": "0_0", "stateful": true, "end_offset_sum": 150000},
                          {"id": "1_0", "stateful": false}],
                "clients": [{"id": "c1", "capacity": 2, "rack": "r1", "leaving": false,
                             "owned_active": ["0_0"], "owned_standby": [], "owned_warmup": [],
                             "offset_sums": {"0_0": -2}, "lags": {}}]}"#,
        )
        .unwrap();
        assert_eq!(c.tasks.len(), 2);
        assert_eq!(c.lag(ClientIx(0), TaskIx(0)), Lag::Running);
        assert_eq!(c.config.num_standby_replicas, 1);
    }

    #[test]
    fn offset_sums_become_lags_with_kafka_rules() {
        let c = parse_cluster_json(
            r#"{"tasks": [{"id": "0_0", "end_offset_sum": 100}, {"id": "0_1", "end_offset_sum": 100}],
                "clients": [{"id": "a", "offset_sums": {"0_0": 30, "0_1": 500}}, {"id": "b"}]}"#,
        )
        .unwrap();
        assert_eq!(c.lag(ClientIx(0), TaskIx(0)), Lag::Behind(70));
        assert_eq!(
            c.lag(ClientIx(0), TaskIx(1)),
            Lag::Behind(100),
            "corrupt state restores from scratch"
        );
        assert_eq!(
            c.lag(ClientIx(1), TaskIx(0)),
            Lag::Behind(100),
            "unreported means the whole log"
        );
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            err(r#"{"tasks": [{"id": "0_0"}], "clients": [{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "d", "lags": {"0_x": 1}}]}"#),
            "clients[3].lags: \"0_x\" is not a task id (expected SUBTOPOLOGY_PARTITION, e.g. \"0_3\")"
        );
        assert!(
            err(r#"{"tasks": [{"id": "0_0"}, {"id": "0_0"}], "clients": [{"id": "a"}]}"#)
                .starts_with("tasks[1].id: duplicate task id \"0_0\"")
        );
        assert!(
            err(r#"{"tasks": [], "clients": [{"id": "a"}, {"id": "a"}]}"#)
                .starts_with("clients[1].id: duplicate client id")
        );
        assert!(
            err(r#"{"tasks": [], "clients": [{"id": "a", "capacity": 0}]}"#)
                .starts_with("clients[0].capacity: must be at least 1")
        );
        assert!(
            err(r#"{"tasks": [], "clients": [{"id": "a", "capacity": -1}]}"#)
                .starts_with("clients[0].capacity: invalid value")
        );
        assert!(
            err(r#"{"tasks": [], "clients": [{"id": "a", "owned_active": ["9_9"]}]}"#)
                .starts_with("clients[0].owned_active: task \"9_9\" is not in tasks")
        );
        assert!(err(r#"{"tasks": [{"id": "0_0", "end_offset_sum": 5}], "clients": [{"id": "a", "offset_sums": {"0_0": -7}}]}"#)
            .starts_with("clients[0].offset_sums.0_0: -7 is not a valid offset sum"));
        assert!(err(r#"{"tasks": [], "clients": []}"#).starts_with("clients: at least one client"));
        assert_eq!(
            err(
                r#"{"tasks": [], "clients": [{"id": "a", "tags": {"a": "1", "b": "1", "c": "1", "d": "1", "e": "1", "f": "1"}}]}"#
            ),
            "clients[0].tags: 6 tags, at most 5"
        );
        assert_eq!(
            err(r#"{"tasks": [], "clients": [{"id": "a", "tags": {"zone": "a-value-longer-than-thirty-chars"}}]}"#),
            "clients[0].tags.zone: value \"a-value-longer-than-thirty-chars\" is over 30 characters"
        );
        assert!(err(r#"{"tasks": [], "clients": [{"id": "a"}], "config": {"rack.aware.assignment.tags": ["a", "b", "c", "d", "e", "f"]}}"#)
            .contains("rack.aware.assignment.tags: 6 keys, at most 5"));
        assert!(
            err(r#"{"tasks": [], "clients": [{"id": "a"}], "confg": {}}"#)
                .starts_with("confg: unknown field `confg`")
        );
        assert!(err(
            r#"{"config": {"max.warmup.replica": 1}, "tasks": [], "clients": [{"id": "a"}]}"#
        )
        .starts_with("config.max.warmup.replica: unknown field `max.warmup.replica`"));
        assert!(err(
            r#"{"config": {"max.warmup.replicas": 0}, "tasks": [], "clients": [{"id": "a"}]}"#
        )
        .starts_with("config.max.warmup.replicas: must be at least 1"));
        assert!(err("{\"tasks\": [").starts_with("tasks"));
        assert!(err(r#"{"tasks": [{"id": "1_0", "stateful": false}], "clients": [{"id": "a", "owned_standby": ["1_0"]}]}"#)
            .contains("stateless"));
    }
}
