//! The balance tolerance (`stream.imbalance.percentage`): a group close enough to balance is
//! left as it is, trading exact balance for no moves at all.

use crate::assignment::Plan;
use crate::cluster::{ClientIx, Cluster};
use crate::model::Role;

/// The current assignment, kept, when the tolerance allows it: every task runs on exactly one
/// caught-up client, stateful tasks have their standbys, nobody leaves, and every client's
/// actives and copies are within the tolerance of its capacity share. Warm-ups in flight are
/// dropped then: the moves they prepared are no longer needed.
pub fn keep_current(cluster: &Cluster) -> Option<Plan> {
    let x = u64::from(cluster.config.imbalance_percentage);
    if x == 0 {
        return None;
    }
    let clients = cluster.client_count();
    // Warm-ups in flight are dropped: a scale-out stops moving once it is within tolerance.
    if cluster.clients.iter().any(|c| c.leaving) {
        return None;
    }
    let standbys = cluster.config.num_standby_replicas as usize;
    let want_standbys = standbys.min(clients - 1);
    let mut plan = Plan::new(clients);
    let mut actives = vec![0u64; clients];
    let mut copies = vec![0u64; clients];
    // Who owns what, in one pass over the clients (not clients x tasks).
    let mut owners: Vec<Vec<ClientIx>> = vec![Vec::new(); cluster.task_count()];
    let mut standby_of: Vec<Vec<ClientIx>> = vec![Vec::new(); cluster.task_count()];
    for c in cluster.client_ixs() {
        for &(t, role) in &cluster.views[c].owned {
            match role {
                Role::Active => owners[t].push(c),
                Role::Standby => standby_of[t].push(c),
                Role::Warmup => {}
            }
        }
    }
    for t in cluster.task_ixs() {
        let [owner] = owners[t][..] else {
            return None;
        };
        if cluster.is_stateful(t) && !cluster.is_caught_up(owner, t) {
            return None;
        }
        plan.push(owner, t, Role::Active);
        actives[owner] += 1;
        copies[owner] += 1;
        if cluster.is_stateful(t) {
            let held = &standby_of[t];
            if held.len() != want_standbys {
                return None;
            }
            for &c in held {
                plan.push(c, t, Role::Standby);
                copies[c] += 1;
            }
        }
    }
    let capacity: u64 = cluster.clients.iter().map(|c| u64::from(c.capacity)).sum();
    let within = |counts: &[u64]| {
        let total: u64 = counts.iter().sum();
        cluster.clients.iter().zip(counts).all(|(c, &n)| {
            // |n / cap - total / capacity| <= x% of total / capacity, in integers.
            let cap = u64::from(c.capacity);
            let (have, share) = (n * capacity, total * cap);
            100 * have.abs_diff(share) <= x * share
        })
    };
    (within(&actives) && within(&copies)).then_some(plan)
}
