//! The status board in Prometheus' text exposition: what `/metrics` serves.

use std::fmt::Write as _;

use super::{Inner, Role, Status, REBALANCE_BUCKETS};

impl Status {
    /// The Prometheus text exposition of this instance.
    pub fn render(&self, instance: &str) -> String {
        let i = self.inner();
        let inst = format!("instance=\"{}\"", escape(instance));
        let mut out = String::new();
        task_families(&mut out, &i, &inst);
        rebalance_families(&mut out, &i, &inst);
        progress_families(&mut out, &i, &inst);
        out
    }
}

/// What each held task is, how far behind, and what it did.
fn task_families(out: &mut String, i: &Inner, inst: &str) {
    family(
        out,
        "baton_task_held",
        "gauge",
        "1 for each task this instance holds, by role and phase.",
        i.held.iter().map(|(t, s)| {
            let labels = format!(
                "{inst},task=\"{t}\",role=\"{}\",phase=\"{}\"",
                s.role.as_str(),
                s.phase.as_str()
            );
            (labels, 1)
        }),
    );
    family(
        out,
        "baton_task_lag_records",
        "gauge",
        "Changelog records the task's stores are behind.",
        i.held.iter().map(|(t, s)| {
            let labels = format!("{inst},task=\"{t}\",role=\"{}\"", s.role.as_str());
            (labels, s.lag)
        }),
    );
    family(
        out,
        "baton_task_restored_records",
        "gauge",
        "Changelog records restored since the task was assigned.",
        i.held
            .iter()
            .map(|(t, s)| (format!("{inst},task=\"{t}\""), s.restored)),
    );
    family(
        out,
        "baton_task_processed_records_total",
        "counter",
        "Input records processed by this instance.",
        i.processed_total
            .iter()
            .map(|(t, n)| (format!("{inst},task=\"{t}\""), *n)),
    );
    family(
        out,
        "baton_records_skipped_total",
        "counter",
        "Output records dropped as larger than any batch the broker takes (on.oversized.record=skip).",
        i.skipped_total
            .iter()
            .map(|(t, n)| (format!("{inst},task=\"{t}\""), *n)),
    );
    family(
        out,
        "baton_late_records_dropped_total",
        "counter",
        "Records dropped for a window that had closed (stream time past its end plus grace), once per window, as Kafka Streams' dropped-records.",
        i.late_total
            .iter()
            .map(|(t, n)| (format!("{inst},task=\"{t}\""), *n)),
    );
}

/// Rebalances and heartbeats.
fn rebalance_families(out: &mut String, i: &Inner, inst: &str) {
    family(
        out,
        "baton_rebalances_total",
        "counter",
        "Rebalances this instance's threads took part in.",
        std::iter::once((inst.to_owned(), i.rebalances)),
    );
    let _ = writeln!(
        out,
        "# HELP baton_rebalance_seconds How long this instance's join rounds took, by reason.\n# TYPE baton_rebalance_seconds summary"
    );
    let _ = writeln!(
        out,
        "# HELP baton_heartbeat_gap_max_seconds The longest time between two heartbeats of a thread.\n# TYPE baton_heartbeat_gap_max_seconds gauge"
    );
    for (thread, (_, gap)) in &i.heartbeats {
        let _ = writeln!(
            out,
            "baton_heartbeat_gap_max_seconds{{{inst},thread=\"{}\"}} {gap:.3}",
            escape(thread)
        );
    }
    for (reason, (n, secs)) in &i.rebalance_seconds {
        let labels = format!("{inst},reason=\"{}\"", escape(reason));
        let _ = writeln!(out, "baton_rebalance_seconds_sum{{{labels}}} {secs:.3}");
        let _ = writeln!(out, "baton_rebalance_seconds_count{{{labels}}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP baton_rebalance_duration_seconds How long this instance's join rounds took, by reason.\n# TYPE baton_rebalance_duration_seconds histogram"
    );
    for (reason, buckets) in &i.rebalance_buckets {
        let labels = format!("{inst},reason=\"{}\"", escape(reason));
        let mut cumulative = 0;
        for (b, n) in buckets.iter().enumerate() {
            cumulative += n;
            let le = REBALANCE_BUCKETS
                .get(b)
                .map_or("+Inf".to_owned(), |le| le.to_string());
            let _ = writeln!(
                out,
                "baton_rebalance_duration_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
            );
        }
        let (n, secs) = i.rebalance_seconds.get(reason).copied().unwrap_or_default();
        let _ = writeln!(
            out,
            "baton_rebalance_duration_seconds_sum{{{labels}}} {secs:.3}"
        );
        let _ = writeln!(
            out,
            "baton_rebalance_duration_seconds_count{{{labels}}} {n}"
        );
    }
}

/// Warm-ups: how many, and how fast each copy closes its lag.
fn progress_families(out: &mut String, i: &Inner, inst: &str) {
    family(
        out,
        "baton_batches_side_by_side_total",
        "counter",
        "Batches of input whose records ran beside another task's batch, on another core (--batch-cores).",
        std::iter::once((inst.to_owned(), i.side_by_side)),
    );
    family(
        out,
        "baton_pending_moves",
        "gauge",
        "Tasks warming up on this instance: moves waiting for it to catch up.",
        std::iter::once((
            inst.to_owned(),
            i.held.values().filter(|s| s.role == Role::Warmup).count() as u64,
        )),
    );
    let _ = writeln!(
        out,
        "# HELP baton_task_catchup_rate_records_per_second How fast a copy closes its changelog lag, net of the changelog's growth (negative: it falls behind).\n# TYPE baton_task_catchup_rate_records_per_second gauge"
    );
    let _ = writeln!(
        out,
        "# HELP baton_task_eta_seconds Time until a copy catches up at its current rate (+Inf: it does not catch up).\n# TYPE baton_task_eta_seconds gauge"
    );
    for (t, p) in &i.progress {
        let (Some(rate), Some(s)) = (p.rate, i.held.get(t)) else {
            continue;
        };
        let labels = format!("{inst},task=\"{t}\",role=\"{}\"", s.role.as_str());
        let eta = if rate > 0.0 {
            format!("{:.1}", p.lag as f64 / rate)
        } else {
            "+Inf".to_owned()
        };
        let _ = writeln!(
            out,
            "baton_task_catchup_rate_records_per_second{{{labels}}} {rate:.1}"
        );
        let _ = writeln!(out, "baton_task_eta_seconds{{{labels}}} {eta}");
    }
}

/// One metric family: its HELP and TYPE lines, then one sample per (labels, value).
fn family(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl Iterator<Item = (String, u64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
