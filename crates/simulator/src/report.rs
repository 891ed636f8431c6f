//! What a run measured.

use std::collections::BTreeMap;

use serde::Serialize;

/// One instance's active task count at a moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadSample {
    pub t_s: f64,
    /// Actives per instance (members of the group only).
    pub actives: BTreeMap<String, u32>,
}

/// A task's active going from one instance to another.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Handover {
    pub t_s: f64,
    pub task: String,
    pub from: String,
    pub to: String,
}

/// The measurements of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub assignor: String,
    pub protocol: String,
    pub probing: String,
    pub tasks: usize,
    /// Seconds without a running active, summed over tasks.
    pub unavailable_total_s: f64,
    /// 99th percentile over tasks of their seconds without a running active.
    pub unavailable_p99_s: f64,
    pub unavailable_max_s: f64,
    pub rebalances: u32,
    /// From the last event until the assignment asked for no follow-up and had no warm-ups.
    pub time_to_balance_s: Option<f64>,
    /// Moves the scale-down timeout forced (the new owner restored before running).
    pub forced_moves: u32,
    /// Times a task's active went to another instance (a crashed owner's tasks included).
    pub active_moves: u32,
    /// Instances still draining when the simulation ended: their drain could not finish.
    pub unfinished_drains: Vec<String>,
    /// Changelog records restored (actives restoring, standbys and warm-ups catching up).
    pub records_restored: f64,
    pub simulated_s: f64,
    /// `(time, tasks without a running active)` at every change.
    pub unavailable_series: Vec<(f64, u32)>,
    pub load: Vec<LoadSample>,
    /// Every move of an active, in order.
    pub handovers: Vec<Handover>,
    /// Scenario event times, for marking plots.
    pub event_times_s: Vec<f64>,
}

/// The `q` quantile (nearest rank) of `values`.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Rounds to milliseconds so JSON output is stable and readable.
pub fn ms(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
