//! Rack-aware active placement (KIP-925): run actives where their input partitions have
//! replicas, without changing how many actives each client runs.
//!
//! [`costs`] is Kafka's cost model; [`exchange`] solves it exactly, fast (see there why the
//! tasks × clients flow can be solved over racks).

mod costs;
mod exchange;

pub use costs::{RackCosts, RackIx, RacksUnused};
pub use exchange::{exchange, Item};

use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::config::RackStrategy;

/// Moves the actives of `tasks` (their clients in `target`, indexed by task) between racks for
/// the least traffic cost; each client keeps its number of them (of each subtopology, with
/// `balance_subtopology`). Non-overlap is counted against `target` as given.
pub fn optimize(costs: &RackCosts, cluster: &Cluster, tasks: &[TaskIx], target: &mut [ClientIx]) {
    optimize_avoiding(costs, cluster, tasks, target, |_| Vec::new());
}

/// As [`optimize`], with no task moved to a rack in `blocked(task)`.
pub fn optimize_avoiding(
    costs: &RackCosts,
    cluster: &Cluster,
    tasks: &[TaskIx],
    target: &mut [ClientIx],
    mut blocked: impl FnMut(TaskIx) -> Vec<RackIx>,
) {
    let per_subtopology = costs.strategy == RackStrategy::BalanceSubtopology;
    let items: Vec<Item> = tasks
        .iter()
        .map(|&t| Item {
            task: t,
            client: target[t],
            group: if per_subtopology {
                cluster.tasks[t].id.subtopology
            } else {
                0
            },
            blocked: blocked(t),
        })
        .collect();
    for (item, c) in items.iter().zip(exchange(costs, &items)) {
        target[item.task] = c;
    }
}

/// What a set of actives reads across racks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Traffic {
    /// Input partitions read from another rack.
    pub cross_rack_reads: u64,
    /// Those reads times `rack.aware.assignment.traffic_cost`.
    pub cost: i64,
}

/// The traffic of `actives` (`(task, client)` pairs).
pub fn traffic(
    costs: &RackCosts,
    actives: impl IntoIterator<Item = (TaskIx, ClientIx)>,
) -> Traffic {
    let mut out = Traffic::default();
    for (t, c) in actives {
        let misses = costs.misses(t, costs.rack_of(c));
        out.cross_rack_reads += misses as u64;
        out.cost += costs.traffic * misses as i64;
    }
    out
}

#[cfg(test)]
mod tests;
