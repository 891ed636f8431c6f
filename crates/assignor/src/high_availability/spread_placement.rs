//! Phase 1 without standbys, for clients with equal threads: one copy per stateful task,
//! spread per subtopology.
//!
//! Subtopologies differ in cost (one may hold a large join, another a small count), so a client
//! with all of one subtopology's tasks is unbalanced even when its task count is right. With one
//! copy per task, each client gets `floor` or `ceil` of each subtopology's tasks (by capacity),
//! and its total stays within the overall quota.
//!
//! Each subtopology's extras (its remainder after the `floor` shares) go to the clients with the
//! lowest total so far, which keeps totals within one of each other; among equals, to the client
//! that already holds more of the subtopology, so fewer tasks move. Clients then keep their
//! strongest claims up to their quota per subtopology, and the rest go to clients with room.

use std::collections::BTreeMap;

use super::flow::Network;
use super::holders::Holders;
use super::placement::{claims, Claim};
use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::load::{Load, Quotas};
use crate::model::Role;

/// The holders, or `None` when the per-subtopology quotas cannot also meet `total` (unequal
/// capacities can make the two disagree): the caller then places by totals alone.
pub fn place(cluster: &Cluster, capacities: &[u32], total: &Quotas) -> Option<Holders> {
    let clients = cluster.client_count();
    // With unequal threads, shares by capacity per subtopology and in total pull apart and cost
    // moves; the spread is then left to the roles phase (best effort).
    let mut threads = capacities.iter().filter(|&&c| c > 0);
    let first = threads.next()?;
    if threads.any(|c| c != first) {
        return None;
    }
    let mut by_sub: BTreeMap<u32, Vec<TaskIx>> = BTreeMap::new();
    for t in cluster.task_ixs().filter(|&t| cluster.is_stateful(t)) {
        by_sub
            .entry(cluster.tasks[t].id.subtopology)
            .or_default()
            .push(t);
    }
    let sub_of = |t: TaskIx| cluster.tasks[t].id.subtopology;
    let claims = claims(cluster, capacities);

    // What each client holds of each subtopology now (kept in preference to moving), each
    // task counted once: where it warms up if it does (the move was decided; counting the
    // source too could flip the decision and abandon the warm-up), else its strongest claim.
    // Stale state on disk is no reason to choose quotas.
    let mut counted: Vec<Option<ClientIx>> = vec![None; cluster.task_count()];
    for &(_, _, _, c, t) in &claims {
        if cluster.owned_role(c, t) == Some(Role::Warmup) {
            counted[t] = Some(c);
        }
    }
    for &(claim, _, _, c, t) in &claims {
        if claim != Claim::Stale && counted[t].is_none() {
            counted[t] = Some(c);
        }
    }
    let mut have: BTreeMap<u32, Vec<u32>> = by_sub.keys().map(|&s| (s, vec![0; clients])).collect();
    for (t, c) in counted.iter().enumerate() {
        if let (Some(c), Some(v)) = (c, have.get_mut(&sub_of(TaskIx::new(t)))) {
            v[*c] += 1;
        }
    }

    let splits: BTreeMap<u32, Quotas> = by_sub
        .iter()
        .map(|(&s, tasks)| (s, Quotas::split(tasks.len() as u64, capacities)))
        .collect();
    let eligible: Vec<ClientIx> = cluster
        .client_ixs()
        .filter(|&c| capacities[c] > 0)
        .collect();
    // Keeping what clients hold first gives the fewest moves; when that breaks the totals,
    // lowest totals first always meets them for equal capacities.
    let quota = fewest_moves(&splits, &have, &eligible, capacities, total).or_else(|| {
        [Prefer::Keeping, Prefer::LowestTotal]
            .into_iter()
            .find_map(|prefer| extras(&splits, &have, &eligible, capacities, total, prefer))
    })?;
    let mut holders = Holders::new(cluster.task_count(), 1);
    let mut count: BTreeMap<u32, Vec<u32>> =
        by_sub.keys().map(|&s| (s, vec![0; clients])).collect();
    let mut copies = vec![0u32; clients];
    for &(_, _, _, c, t) in &claims {
        let s = sub_of(t);
        let ci = c.ix();
        if holders.is_full(t) || count[&s][ci] >= quota[&s][ci] {
            continue;
        }
        holders.add(t, c);
        count.get_mut(&s).expect("every subtopology counted")[ci] += 1;
        copies[ci] += 1;
    }
    for (s, tasks) in &by_sub {
        let mut open: Vec<ClientIx> = eligible
            .iter()
            .copied()
            .filter(|&c| count[s][c] < quota[s][c])
            .collect();
        open.sort_by_key(|&c| (Load::new(copies[c], capacities[c]), c));
        let mut next = open.into_iter();
        let mut current = next.next();
        for &t in tasks {
            if holders.is_full(t) {
                continue;
            }
            while let Some(c) = current {
                if count[s][c] < quota[s][c] {
                    break;
                }
                current = next.next();
            }
            let Some(c) = current else {
                debug_assert!(false, "quotas of subtopology {s} cover its tasks");
                return None;
            };
            holders.add(t, c);
            count.get_mut(s).expect("every subtopology counted")[c] += 1;
            copies[c] += 1;
        }
    }
    Some(holders)
}

/// The largest problem solved exactly, in edges (subtopologies x clients) times extras (one
/// shortest-path search each). Larger ones use the greedy, which keeps the spread but may move
/// a few more tasks than needed.
const EXACT_LIMIT: usize = 5_000_000;

/// The extras that keep the most tasks where they are, as a min-cost flow: each
/// subtopology's extras flow to distinct clients, each client takes between the extras its
/// total needs and one more; an extra that lets a client keep a task it holds earns 1.
fn fewest_moves(
    splits: &BTreeMap<u32, Quotas>,
    have: &BTreeMap<u32, Vec<u32>>,
    eligible: &[ClientIx],
    capacities: &[u32],
    total: &Quotas,
) -> Option<BTreeMap<u32, Vec<u32>>> {
    let extras: usize = splits.values().map(|q| q.extras as usize).sum();
    if splits.len() * eligible.len() * extras.max(1) > EXACT_LIMIT {
        return None;
    }
    let clients = capacities.len();
    let bases = base_totals(splits, clients);
    let (source, sink) = (0, 1 + splits.len() + eligible.len());
    let mut net = Network::new(sink + 1);
    // Outweighs every keep on a path: the lower bounds are met first.
    let must = splits.len() as i64 + 2;
    let mut wanted = 0i64;
    let mut lows = Vec::new();
    for (j, &c) in eligible.iter().enumerate() {
        let ci = c.ix();
        let low = i64::from(total.base[ci]) - i64::from(bases[ci]);
        if low < 0 {
            return None;
        }
        let node = 1 + splits.len() + j;
        lows.push((net.add(node, sink, low, -must), low));
        net.add(node, sink, 1, 0);
    }
    let mut picks = Vec::new();
    for (i, (s, q)) in splits.iter().enumerate() {
        net.add(source, 1 + i, i64::from(q.extras), 0);
        wanted += i64::from(q.extras);
        for (j, &c) in eligible.iter().enumerate() {
            let keeps = have[s][c] > q.base[c];
            let id = net.add(1 + i, 1 + splits.len() + j, 1, if keeps { -1 } else { 0 });
            picks.push((*s, c, id));
        }
    }
    let sent = net.min_cost_max_flow(source, sink);
    if sent != wanted || lows.iter().any(|&(id, low)| net.flow_on(id) != low) {
        return None;
    }
    let mut quota: BTreeMap<u32, Vec<u32>> =
        splits.iter().map(|(&s, q)| (s, q.base.clone())).collect();
    for (s, c, id) in picks {
        if net.flow_on(id) > 0 {
            quota.get_mut(&s).expect("every subtopology has quotas")[c] += 1;
        }
    }
    Some(quota)
}

/// What decides who gets a subtopology's extra task first.
#[derive(Clone, Copy)]
enum Prefer {
    /// Clients that hold more than their `floor` share (they keep it), then the lowest total.
    Keeping,
    /// The lowest total, then clients that hold more.
    LowestTotal,
}

/// Each client's tasks from the `floor` shares alone, over every subtopology.
fn base_totals(splits: &BTreeMap<u32, Quotas>, clients: usize) -> Vec<u32> {
    let mut totals = vec![0u32; clients];
    for q in splits.values() {
        for (t, b) in totals.iter_mut().zip(&q.base) {
            *t += b;
        }
    }
    totals
}

/// Per-subtopology quotas `floor + extra`, or `None` when the totals miss `total`'s quotas.
fn extras(
    splits: &BTreeMap<u32, Quotas>,
    have: &BTreeMap<u32, Vec<u32>>,
    eligible: &[ClientIx],
    capacities: &[u32],
    total: &Quotas,
    prefer: Prefer,
) -> Option<BTreeMap<u32, Vec<u32>>> {
    let clients = capacities.len();
    let mut totals = base_totals(splits, clients);
    let mut quota = BTreeMap::new();
    for (&s, q) in splits {
        let held = &have[&s];
        let mut order: Vec<ClientIx> = eligible
            .iter()
            .copied()
            .filter(|&c| totals[c] <= total.base[c])
            .collect();
        order.sort_by_key(|&c| {
            let ci = c.ix();
            let gives_up = held[ci] <= q.base[ci];
            let load = Load::new(totals[ci], capacities[ci]);
            match prefer {
                Prefer::Keeping => (gives_up, load, false, c),
                Prefer::LowestTotal => (false, load, gives_up, c),
            }
        });
        if order.len() < q.extras as usize {
            return None;
        }
        let mut mine = q.base.clone();
        for &c in order.iter().take(q.extras as usize) {
            mine[c] += 1;
            totals[c] += 1;
        }
        quota.insert(s, mine);
    }
    let over = (0..clients).filter(|&c| totals[c] > total.base[c]).count() as u32;
    let fits = (0..clients).all(|c| totals[c] >= total.base[c] && totals[c] <= total.base[c] + 1);
    (fits && over == total.extras).then_some(quota)
}
