//! Baton's own assignor: available, balanced, minimal movement, warm-ups within budget.
//!
//! It works in three phases, each a pure function of the cluster state:
//! 1. [`placement`]: which clients hold a copy of each stateful task (balanced copies per thread,
//!    kept where the state already is);
//! 2. [`roles`]: which holder is the target active (balanced actives per thread, sticky), and
//!    where stateless tasks run;
//! 3. [`handover`]: what runs now, so that no task moves to a client that must restore first.
//!
//! Unlike Kafka's HighAvailabilityTaskAssignor, the target depends on where state is, so scaling
//! out moves only the tasks that must move, and a configured standby doubles as the warm-up of
//! the task it will take over (it costs no warm-up budget).

mod diversity;
pub(crate) mod flow;
mod handover;
mod holders;
mod placement;
mod roles;
mod spread;
mod spread_placement;
mod tolerance;

use crate::assignment::{Assignment, Plan};
use crate::cluster::{Cluster, TaskIx};
use crate::rack::{self, RackCosts};
use crate::TaskAssignor;

/// The `high-availability` assignor.
#[derive(Debug, Default, Clone, Copy)]
pub struct HighAvailabilityAssignor;

impl TaskAssignor for HighAvailabilityAssignor {
    fn name(&self) -> &'static str {
        "high-availability"
    }

    fn assign(&self, cluster: &Cluster) -> Assignment {
        if let Some(kept) = tolerance::keep_current(cluster) {
            return kept.finish(cluster, false);
        }
        match RackCosts::new(cluster) {
            Ok(None) => plan(cluster, None, None),
            Ok(Some(costs)) => {
                // Where state is, racks are weighed greedily (a standby's promotion can push
                // another task off its rack): the plan never reads more than the plan without.
                let with = plan(cluster, Some(&costs), Some(&costs));
                let without = plan(cluster, None, Some(&costs));
                let cost = |a: &Assignment| a.traffic.map_or(0, |t| t.cost);
                if cost(&with) <= cost(&without) {
                    with
                } else {
                    without
                }
            }
            Err(why) => {
                let mut a = plan(cluster, None, None);
                a.warnings.push(why.to_string());
                a
            }
        }
    }
}

/// The assignment, weighing `racks` when given; its traffic is reported by `report`.
fn plan(cluster: &Cluster, racks: Option<&RackCosts>, report: Option<&RackCosts>) -> Assignment {
    let mut plan = Plan::new(cluster.client_count());
    let mut capacities: Vec<u32> = cluster
        .clients
        .iter()
        .map(|c| if c.leaving { 0 } else { c.capacity })
        .collect();
    if capacities.iter().all(|&c| c == 0) {
        plan.warnings.push(
            "every client is leaving: none can be drained, so all of them keep taking tasks"
                .to_owned(),
        );
        capacities = cluster.clients.iter().map(|c| c.capacity).collect();
    }
    let eligible = capacities.iter().filter(|&&c| c > 0).count();
    let wanted = 1 + cluster.config.num_standby_replicas as usize;
    let r = wanted.min(eligible);
    let has_stateful = cluster.tasks.iter().any(|t| t.stateful);
    if r < wanted && has_stateful {
        plan.warnings.push(format!(
            "num.standby.replicas is {} but only {eligible} client(s) can hold copies: \
             assigning {} standby replica(s) per stateful task",
            wanted - 1,
            r - 1
        ));
    }

    let rack_plan = racks.map(|costs| placement::RackPlan::new(cluster, costs));
    let mut holders = placement::place_copies(cluster, &capacities, r, rack_plan.as_ref());
    let mut actives = roles::choose_stateful_actives(cluster, &capacities, &holders, racks);
    if let Some(rack_plan) = &rack_plan {
        placement::place_new_tasks_by_rack(cluster, rack_plan, &mut holders, &mut actives.target);
    }
    // Who runs each stateful task now: the stateless tasks' spares go where fewest run.
    let runners = handover::runners(cluster, &capacities, &holders, &actives.target);
    let mut running = vec![0; cluster.client_count()];
    for t in cluster.task_ixs().filter(|&t| cluster.is_stateful(t)) {
        running[runners[t]] += 1;
    }
    roles::assign_stateless(cluster, &capacities, &running, &mut actives);
    if let Some(costs) = racks {
        // Stateless tasks move state nowhere: they go wherever reads are local.
        let stateless: Vec<TaskIx> = cluster
            .task_ixs()
            .filter(|&t| !cluster.is_stateful(t))
            .collect();
        rack::optimize(costs, cluster, &stateless, &mut actives.target);
    }
    handover::hand_over(
        cluster,
        &capacities,
        &holders,
        &actives.target,
        &runners,
        &mut plan,
    );
    let followup = !plan.pending.is_empty() || !plan.standby_moves.is_empty();
    plan.finish_with_racks(cluster, followup, report)
}
