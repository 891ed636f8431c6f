//! The JSON form of an assignment written by `baton assign`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::assignment::{Assignment, ClientAssignment, PendingMove};
use crate::rack::Traffic;

#[derive(Serialize)]
struct Json<'a> {
    clients: BTreeMap<&'a str, &'a ClientAssignment>,
    followup_rebalance: bool,
    probe_after_ms: Option<u64>,
    warnings: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    active_moves: &'a [Move<'a>],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    standby_moves: &'a [Move<'a>],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    forced: &'a [Move<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    traffic: Option<Traffic>,
}

/// A pending move of an active or a standby, or a move past the scale-down timeout, for the
/// JSON output.
#[derive(Serialize)]
struct Move<'a> {
    task: String,
    from: &'a str,
    to: &'a str,
}

/// Serializes an assignment; identical assignments give identical bytes.
pub fn to_json<'a>(assignment: &'a Assignment, pretty: bool) -> String {
    let moves = |list: &'a [PendingMove]| -> Vec<Move<'a>> {
        list.iter()
            .map(|m| Move {
                task: m.task.to_string(),
                from: &m.from.0,
                to: &m.to.0,
            })
            .collect()
    };
    let (active_moves, standby_moves, forced) = (
        moves(&assignment.pending),
        moves(&assignment.standby_moves),
        moves(&assignment.forced),
    );
    let json = Json {
        clients: assignment
            .clients
            .iter()
            .map(|(id, a)| (id.0.as_str(), a))
            .collect(),
        followup_rebalance: assignment.followup_rebalance,
        probe_after_ms: assignment.probe_after_ms,
        warnings: &assignment.warnings,
        active_moves: &active_moves,
        standby_moves: &standby_moves,
        forced: &forced,
        traffic: assignment.traffic,
    };
    let text = if pretty {
        serde_json::to_string_pretty(&json)
    } else {
        serde_json::to_string(&json)
    };
    text.expect("an assignment always serializes")
}
