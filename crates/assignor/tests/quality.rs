//! The quality case: 1000 stateful tasks on 90 clients, 10 join; 1 standby, 2 warm-ups.
//! Each assignor starts from its own converged 90-client assignment. Run with `--nocapture` to
//! see the figures recorded in docs/BENCHMARKS.md.

mod common;

use baton_assignor::{ClusterState, HighAvailabilityAssignor, KafkaAssignor, TaskAssignor};
use common::*;

fn scale_out(assignor: &dyn TaskAssignor) -> Convergence {
    let tasks = stateful_tasks(1000, 100, 150_000);
    let clients = (0..90).map(|i| fresh(&format!("c{i:03}"), 1)).collect();
    let state = ClusterState {
        config: config(100, 2, 1),
        tasks,
        clients,
    };
    let start = converge(assignor, state, 5000);
    assert!(
        start.converged,
        "{}: 90 clients did not converge",
        assignor.name()
    );
    let mut state = start.state.unwrap();
    for i in 90..100 {
        state.clients.push(fresh(&format!("c{i:03}"), 1));
    }
    let run = converge(assignor, state, 5000);
    assert!(
        run.converged,
        "{}: no convergence after scale-out",
        assignor.name()
    );
    check_balance(
        run.state.as_ref().unwrap(),
        run.last.as_ref().unwrap(),
        false,
        assignor.name() != "kafka",
    )
    .unwrap_or_else(|e| panic!("{}: {e}", assignor.name()));
    println!(
        "{:<18} follow-up rebalances {:>4}  active moves {:>5}",
        assignor.name(),
        run.followups,
        run.active_moves
    );
    run
}

#[test]
fn scale_out_90_to_100_clients() {
    let ours = scale_out(&HighAvailabilityAssignor);
    assert!(ours.followups <= 51, "{} follow-ups", ours.followups);
    assert!(
        ours.active_moves <= 110,
        "{} active moves",
        ours.active_moves
    );
    assert!(ours.active_moves >= 100, "the minimum is 100");

    let kafka = scale_out(&KafkaAssignor);
    assert!(
        kafka.followups > 10 * ours.followups.max(1),
        "kafka: {} follow-ups",
        kafka.followups
    );
    assert!(
        kafka.active_moves > 10 * ours.active_moves,
        "kafka: {} moves",
        kafka.active_moves
    );
}
