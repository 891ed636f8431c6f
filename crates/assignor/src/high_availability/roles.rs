//! Phase 2: which holder of each stateful task is its target active, and where stateless tasks run.
//!
//! Actives per thread are balanced to within one task. Among balanced choices it keeps actives
//! where they run now, then prefers caught-up holders, so a caught-up standby is promoted instead
//! of warming up a new client.

use std::collections::{BTreeMap, BTreeSet};

use super::holders::Holders;
use super::spread::interleave;
use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::config::RackStrategy;
use crate::load::{Load, Quotas};
use crate::model::Role;
use crate::rack::RackCosts;

const NONE: ClientIx = ClientIx::MAX;

/// Target active client per task (`ClientIx::MAX` where not decided).
pub struct Actives {
    pub target: Vec<ClientIx>,
    pub count: Vec<u32>,
}

struct Budget {
    base: Vec<u32>,
    extras: u32,
    /// Clients that take nothing (leaving) have no extras either.
    took_extra: Vec<bool>,
}

impl Budget {
    fn new(q: Quotas, capacities: &[u32]) -> Self {
        Self {
            base: q.base,
            extras: q.extras,
            took_extra: capacities.iter().map(|&c| c == 0).collect(),
        }
    }

    /// Whether `c` at `count` may take one more, using the shared pool if `allow_extra`.
    fn room(&self, c: ClientIx, count: u32, allow_extra: bool) -> bool {
        let ci = c.ix();
        count < self.base[ci]
            || (allow_extra && self.extras > 0 && !self.took_extra[ci] && count == self.base[ci])
    }

    fn take(&mut self, c: ClientIx, count: u32) {
        let ci = c.ix();
        if count >= self.base[ci] {
            self.extras -= 1;
            self.took_extra[ci] = true;
        }
    }
}

pub fn choose_stateful_actives(
    cluster: &Cluster,
    capacities: &[u32],
    holders: &Holders,
    racks: Option<&RackCosts>,
) -> Actives {
    let stateful: Vec<TaskIx> = cluster
        .task_ixs()
        .filter(|&t| cluster.is_stateful(t))
        .collect();
    let clients = cluster.client_count();
    let mut budget = Budget::new(Quotas::split(stateful.len() as u64, capacities), capacities);
    let mut target = vec![NONE; cluster.task_count()];
    let mut count = vec![0u32; clients];

    let running = running_actives(cluster, capacities, holders);

    // Actives per (subtopology, client): ties go to the client with fewest of the task's subtopology.
    let mut per_sub: BTreeMap<(u32, ClientIx), u32> = BTreeMap::new();
    let sub = |t: TaskIx| cluster.tasks[t].id.subtopology;
    type PerSub = BTreeMap<(u32, ClientIx), u32>;
    let assign = |t: TaskIx,
                  c: ClientIx,
                  target: &mut [ClientIx],
                  count: &mut [u32],
                  budget: &mut Budget,
                  per_sub: &mut PerSub| {
        budget.take(c, count[c]);
        target[t] = c;
        count[c] += 1;
        *per_sub.entry((sub(t), c)).or_default() += 1;
    };

    // Within base quotas first, then with the shared extras, so that no client takes an extra
    // while a holder elsewhere still has room below its base.
    for allow_extra in [false, true] {
        // Keep running actives, unless a caught-up holder elsewhere reads the task's input
        // locally enough to be worth the switch (no state moves: it is a standby's promotion).
        for c in cluster.client_ixs() {
            for &t in &running[c] {
                if target[t] == NONE
                    && budget.room(c, count[c], allow_extra)
                    && !worth_switching(cluster, holders, racks, t, c)
                {
                    assign(t, c, &mut target, &mut count, &mut budget, &mut per_sub);
                }
            }
        }
        // Promote caught-up holders, then holders that must catch up first: fewest of the
        // task's subtopology, least loaded, least behind.
        for caught_up_only in [true, false] {
            for &t in &stateful {
                if target[t] != NONE {
                    continue;
                }
                let best = holders
                    .of(t)
                    .iter()
                    .copied()
                    .filter(|&h| {
                        (!caught_up_only || cluster.is_caught_up(h, t))
                            && budget.room(h, count[h], allow_extra)
                    })
                    .min_by_key(|&h| {
                        let spread = per_sub_count(&per_sub, sub(t), h);
                        let load = Load::new(count[h], capacities[h]);
                        promotion_key(cluster, holders, racks, t, h, spread, load)
                    });
                if let Some(h) = best {
                    assign(t, h, &mut target, &mut count, &mut budget, &mut per_sub);
                }
            }
        }
        // Every holder is full: shift actives along a chain of holders to one with room.
        for &t in &stateful {
            if target[t] == NONE {
                augment(
                    cluster,
                    holders,
                    t,
                    allow_extra,
                    &mut target,
                    &mut count,
                    &mut budget,
                );
            }
        }
    }
    let mut actives = Actives { target, count };
    place_the_rest(&stateful, holders, capacities, &mut actives);
    actives
}

/// Unbalanced, but every task keeps an active: each still without one goes to its least
/// loaded holder.
fn place_the_rest(stateful: &[TaskIx], holders: &Holders, capacities: &[u32], a: &mut Actives) {
    for &t in stateful {
        if a.target[t] == NONE {
            let h = holders
                .of(t)
                .iter()
                .copied()
                .min_by_key(|&h| (Load::new(a.count[h], capacities[h]), h))
                .expect("a stateful task has at least one holder");
            a.target[t] = h;
            a.count[h] += 1;
        }
    }
}

/// Whether a caught-up holder of `t` other than `c` reads its input enough more locally than
/// `c` to move its active there.
fn worth_switching(
    cluster: &Cluster,
    holders: &Holders,
    racks: Option<&RackCosts>,
    t: TaskIx,
    c: ClientIx,
) -> bool {
    racks.is_some_and(|r| {
        let here = r.traffic_on(t, r.rack_of(c));
        holders.of(t).iter().any(|&h| {
            h != c
                && cluster.is_caught_up(h, t)
                && r.traffic_on(t, r.rack_of(h)) + r.non_overlap < here
        })
    })
}

/// Current caught-up actives that remain holders, per client, in interleaved order.
fn running_actives(cluster: &Cluster, capacities: &[u32], holders: &Holders) -> Vec<Vec<TaskIx>> {
    let mut running: Vec<Vec<TaskIx>> = vec![Vec::new(); cluster.client_count()];
    for c in cluster.client_ixs() {
        if capacities[c] == 0 {
            continue;
        }
        let list = &mut running[c];
        for &(t, role) in &cluster.views[c].owned {
            if role == Role::Active
                && cluster.is_stateful(t)
                && holders.contains(t, c)
                && cluster.is_caught_up(c, t)
            {
                list.push(t);
            }
        }
        interleave(cluster, list);
    }
    running
}

/// How holder `h` ranks for task `t`'s active (lowest first): with racks and the min-traffic
/// strategy, cross-rack traffic before the spread of the task's subtopology (`spread`), else
/// the other way round; then, with racks, a later copy after the first (placed to read
/// locally: placement.rs); then load, lag, and the client's index.
fn promotion_key(
    cluster: &Cluster,
    holders: &Holders,
    racks: Option<&RackCosts>,
    t: TaskIx,
    h: ClientIx,
    spread: u32,
    load: Load,
) -> (i64, usize, i64, Load, crate::model::Lag, ClientIx) {
    let traffic = racks.map_or(0, |r| r.traffic_on(t, r.rack_of(h)));
    let later_copy = racks.map_or(0, |_| {
        holders.of(t).iter().position(|&x| x == h).unwrap_or(0)
    });
    let (first, second) = match racks.map(|r| r.strategy) {
        Some(RackStrategy::MinTraffic) => (traffic, spread as i64),
        _ => (spread as i64, traffic),
    };
    (first, later_copy, second, load, cluster.lag(h, t), h)
}

fn per_sub_count(per_sub: &BTreeMap<(u32, ClientIx), u32>, sub: u32, c: ClientIx) -> u32 {
    per_sub.get(&(sub, c)).copied().unwrap_or(0)
}

/// Breadth-first search for an augmenting path: `t` goes to holder `h0`, one of `h0`'s actives
/// goes to another of its holders `h1`, and so on until a client with room. Rare and small.
fn augment(
    cluster: &Cluster,
    holders: &Holders,
    t: TaskIx,
    allow_extra: bool,
    target: &mut [ClientIx],
    count: &mut [u32],
    budget: &mut Budget,
) -> bool {
    let clients = cluster.client_count();
    let mut by_client: Vec<Vec<TaskIx>> = vec![Vec::new(); clients];
    for u in cluster.task_ixs() {
        if target[u] != NONE {
            by_client[target[u]].push(u);
        }
    }
    // parent[c] = (task that would move to c, client it comes from, or NONE for `t` itself)
    let mut parent: Vec<Option<(TaskIx, ClientIx)>> = vec![None; clients];
    let mut queue = std::collections::VecDeque::new();
    for &h in holders.of(t) {
        if parent[h].is_none() {
            parent[h] = Some((t, NONE));
            queue.push_back(h);
        }
    }
    while let Some(c) = queue.pop_front() {
        if budget.room(c, count[c], allow_extra) {
            budget.take(c, count[c]);
            count[c] += 1;
            let mut at = c;
            while let Some((task, from)) = parent[at] {
                target[task] = at;
                if from == NONE {
                    break;
                }
                at = from;
            }
            return true;
        }
        for &u in &by_client[c] {
            for &g in holders.of(u) {
                if g != c && parent[g].is_none() {
                    parent[g] = Some((u, c));
                    queue.push_back(g);
                }
            }
        }
    }
    false
}

/// Stateless tasks even out each client's load, where a client's stateful load is the larger of
/// what it runs now (`running[c]`: while warm-ups are under way, the tasks it will hand over
/// too) and its target. A stateless task moves with no state, so the new clients of a
/// scale-out take them at once and the old ones, still running what they will hand over, shed
/// theirs: one crash there during long warm-ups would take down more (Kafka balances stateless
/// tasks by running actives for the same reason). Counting the target too keeps a new client
/// from taking more than it keeps once its warm-ups are done, which would move them back.
/// An owner keeps its stateless tasks while its load is under its even share rounded down;
/// the others go to the lightest client, the owner first among equals.
pub fn assign_stateless(
    cluster: &Cluster,
    capacities: &[u32],
    running: &[u32],
    actives: &mut Actives,
) {
    let stateless: Vec<TaskIx> = cluster
        .task_ixs()
        .filter(|&t| !cluster.is_stateful(t))
        .collect();
    if stateless.is_empty() {
        return;
    }
    let clients = cluster.client_count();
    let mut now: Vec<u32> = (0..clients)
        .map(|c| running[c].max(actives.count[c]))
        .collect();
    let total = now.iter().map(|&r| r as u64).sum::<u64>() + stateless.len() as u64;
    let share = Quotas::split(total, capacities);
    let mut count = vec![0u32; clients];
    let mut owner = vec![NONE; cluster.task_count()];
    for c in cluster.client_ixs() {
        let ci = c.ix();
        if capacities[ci] == 0 {
            continue;
        }
        for &(t, role) in &cluster.views[ci].owned {
            if role == Role::Active && !cluster.is_stateful(t) && actives.target[t] == NONE {
                owner[t] = c;
                if now[ci] < share.base[ci] {
                    actives.target[t] = c;
                    now[ci] += 1;
                    count[ci] += 1;
                    actives.count[ci] += 1;
                }
            }
        }
    }
    // Shed and new tasks go to the lightest client; back to their owner when it is as light
    // (a round may otherwise swap two owners' tasks for nothing).
    type Key = (Load, Load, ClientIx);
    let key = |c: ClientIx, now: &[u32], count: &[u32]| -> Key {
        let cap = capacities[c];
        (Load::new(now[c], cap), Load::new(count[c], cap), c)
    };
    let mut lightest: BTreeSet<Key> = cluster
        .client_ixs()
        .filter(|&c| capacities[c] > 0)
        .map(|c| key(c, &now, &count))
        .collect();
    for &t in &stateless {
        if actives.target[t] != NONE {
            continue;
        }
        let Some(&(load, _, first)) = lightest.first() else {
            // No client takes tasks: nothing to place them on.
            return;
        };
        let o = owner[t];
        let c = if o != NONE && Load::new(now[o], capacities[o]) == load {
            o
        } else {
            first
        };
        let ci = c.ix();
        lightest.remove(&key(c, &now, &count));
        actives.target[t] = c;
        now[ci] += 1;
        count[ci] += 1;
        actives.count[ci] += 1;
        lightest.insert(key(c, &now, &count));
    }
}
