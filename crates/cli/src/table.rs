//! The human summary printed by `baton assign --format table`.

use std::fmt::Write;

use baton_assignor::{Assignment, Cluster, PendingMove, TaskId};

fn list(tasks: &[TaskId]) -> String {
    if tasks.is_empty() {
        return "-".to_owned();
    }
    tasks
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn render(cluster: &Cluster, assignment: &Assignment, assignor: &str) -> String {
    let mut out = String::new();
    let stateful = cluster.tasks.iter().filter(|t| t.stateful).count();
    let _ = writeln!(
        out,
        "assignor {assignor}: {} tasks ({stateful} stateful), {} clients",
        cluster.tasks.len(),
        cluster.clients.len()
    );
    let rows: Vec<Vec<String>> = cluster
        .clients
        .iter()
        .map(|spec| {
            let a = &assignment.clients[&spec.id];
            let copies = a.active.len() + a.standby.len() + a.warmup.len();
            let status = if a.drained {
                "drained"
            } else if spec.leaving {
                "leaving"
            } else {
                ""
            };
            vec![
                spec.id.0.clone(),
                spec.capacity.to_string(),
                a.active.len().to_string(),
                a.standby.len().to_string(),
                a.warmup.len().to_string(),
                format!("{:.2}", copies as f64 / spec.capacity as f64),
                status.to_owned(),
            ]
        })
        .collect();
    out.push_str(&crate::columns::render(
        &[
            "CLIENT",
            "THREADS",
            "ACTIVE",
            "STANDBY",
            "WARMUP",
            "LOAD/THREAD",
            "STATUS",
        ],
        &rows,
    ));
    let _ = writeln!(
        out,
        "(LOAD/THREAD: tasks of every kind the client holds, per stream thread; balanced clients are within one of each other)"
    );
    out.push('\n');
    for spec in &cluster.clients {
        let a = &assignment.clients[&spec.id];
        let _ = writeln!(out, "{}", spec.id.0);
        let _ = writeln!(out, "  active:  {}", list(&a.active));
        let _ = writeln!(out, "  standby: {}", list(&a.standby));
        let _ = writeln!(out, "  warmup:  {}", list(&a.warmup));
    }
    out.push('\n');
    if assignment.pending.is_empty() {
        let _ = writeln!(out, "pending moves: none; no follow-up rebalance");
    } else {
        let _ = writeln!(
            out,
            "pending moves: {} (follow-up rebalance {})",
            assignment.pending.len(),
            delay(assignment.probe_after_ms.unwrap_or_default())
        );
        write_moves(&mut out, assignment, &assignment.pending);
    }
    if !assignment.standby_moves.is_empty() {
        let _ = writeln!(
            out,
            "standby moves: {} (the old copy stays the standby until the new one catches up)",
            assignment.standby_moves.len()
        );
        write_moves(&mut out, assignment, &assignment.standby_moves);
    }
    if let Some(t) = assignment.traffic {
        let _ = writeln!(
            out,
            "cross-rack reads: {} input partition(s) (traffic cost {})",
            t.cross_rack_reads, t.cost
        );
    }
    for w in &assignment.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// One line per move: task, from, to, and how the destination catches up.
fn write_moves(out: &mut String, assignment: &Assignment, moves: &[PendingMove]) {
    for m in moves {
        let how = match assignment.clients.get(&m.to) {
            Some(a) if a.warmup.contains(&m.task) => "warming up",
            Some(a) if a.standby.contains(&m.task) => "catching up as a standby",
            _ => "waiting for a warm-up slot",
        };
        let _ = writeln!(
            out,
            "  {:<8} {} -> {} ({how})",
            m.task.to_string(),
            m.from,
            m.to
        );
    }
}

/// A delay for people: "at once", "in 45 s", "in 10 min".
fn delay(ms: u64) -> String {
    match ms {
        0 => "at once, when a warm-up catches up".into(),
        ms if ms < 60_000 => format!("in {:.0} s", ms as f64 / 1000.0),
        ms if ms % 60_000 == 0 => format!("in {} min", ms / 60_000),
        ms => format!("in {:.1} min", ms as f64 / 60_000.0),
    }
}
