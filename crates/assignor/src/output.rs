//! The JSON form of an assignment written by `baton assign`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::assignment::{Assignment, ClientAssignment};

#[derive(Serialize)]
struct Json<'a> {
    clients: BTreeMap<&'a str, &'a ClientAssignment>,
    followup_rebalance: bool,
    probe_after_ms: Option<u64>,
    warnings: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    forced: &'a [Forced<'a>],
}

/// A move past the scale-down timeout, for the JSON output.
#[derive(Serialize)]
struct Forced<'a> {
    task: String,
    from: &'a str,
    to: &'a str,
}

/// Serializes an assignment; identical assignments give identical bytes.
pub fn to_json(assignment: &Assignment, pretty: bool) -> String {
    let forced: Vec<Forced> = assignment
        .forced
        .iter()
        .map(|m| Forced {
            task: m.task.to_string(),
            from: &m.from.0,
            to: &m.to.0,
        })
        .collect();
    let json = Json {
        clients: assignment
            .clients
            .iter()
            .map(|(id, a)| (id.0.as_str(), a))
            .collect(),
        followup_rebalance: assignment.followup_rebalance,
        probe_after_ms: assignment.probe_after_ms,
        warnings: &assignment.warnings,
        forced: &forced,
    };
    let text = if pretty {
        serde_json::to_string_pretty(&json)
    } else {
        serde_json::to_string(&json)
    };
    text.expect("an assignment always serializes")
}
