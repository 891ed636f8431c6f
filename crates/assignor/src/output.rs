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
}

/// Serializes an assignment; identical assignments give identical bytes.
pub fn to_json(assignment: &Assignment, pretty: bool) -> String {
    let json = Json {
        clients: assignment
            .clients
            .iter()
            .map(|(id, a)| (id.0.as_str(), a))
            .collect(),
        followup_rebalance: assignment.followup_rebalance,
        probe_after_ms: assignment.probe_after_ms,
        warnings: &assignment.warnings,
    };
    let text = if pretty {
        serde_json::to_string_pretty(&json)
    } else {
        serde_json::to_string(&json)
    };
    text.expect("an assignment always serializes")
}
