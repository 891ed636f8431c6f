//! Phase 1: which clients hold a copy (active or standby) of each stateful task.
//!
//! Copies per thread are balanced to within one task between clients, and among balanced
//! layouts this keeps as many copies as it can where their state already is:
//! 1. Every client keeps the copies it has, best first (caught-up actives, then copies it holds
//!    or is warming up, then stale state on disk by lag) up to its quota.
//! 2. Copies still missing go to the least-loaded clients, preferring racks the task is not on.
//!
//! Because step 1 ranks a destination's warm-up as high as a standby, a task being warmed up
//! keeps its destination from one round to the next.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::diversity::Diversity;
use super::holders::Holders;
use super::spread::interleave;
use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::load::{Load, Quotas};
use crate::model::{Lag, Role};
use crate::rack::{RackCosts, RackIx};

/// How strongly a client's existing state argues for keeping a copy there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Claim {
    /// Runs the task now and is caught up.
    RunningActive = 0,
    /// Holds the task in some role, or is caught up.
    Held = 1,
    /// Has stale state on disk.
    Stale = 2,
}

/// How many pops a rack-diverse search may look through before settling for any client.
const RACK_SEARCH_LIMIT: usize = 32;

/// What the placement weighs when racks count: the costs, and the tasks whose state is nowhere
/// yet (they restore from scratch wherever they go, so they may go where reads are local).
pub struct RackPlan<'a> {
    pub costs: &'a RackCosts,
    pub new: Vec<TaskIx>,
}

impl<'a> RackPlan<'a> {
    pub fn new(cluster: &Cluster, costs: &'a RackCosts) -> Self {
        let mut has_state = vec![false; cluster.task_count()];
        for view in &cluster.views {
            for &(t, _) in &view.owned {
                has_state[t] = true;
            }
        }
        for (t, reports) in cluster.reporters.iter().enumerate() {
            let end = cluster.tasks[t].end_offset_sum;
            if reports
                .iter()
                .any(|&(_, lag)| lag != Lag::Behind(end) && lag != Lag::Unknown)
            {
                has_state[t] = true;
            }
        }
        let new = cluster
            .task_ixs()
            .filter(|&t| cluster.is_stateful(t) && !has_state[t])
            .collect();
        RackPlan { costs, new }
    }
}

pub fn place_copies(
    cluster: &Cluster,
    capacities: &[u32],
    r: usize,
    racks: Option<&RackPlan>,
) -> Holders {
    let tasks = cluster.task_count();
    let stateful: Vec<TaskIx> = cluster
        .task_ixs()
        .filter(|&t| cluster.is_stateful(t))
        .collect();
    let quotas = Quotas::split_capped(
        stateful.len() as u64 * r as u64,
        capacities,
        stateful.len() as u32,
    );
    if r == 1 {
        if let Some(holders) = super::spread_placement::place(cluster, capacities, &quotas) {
            return holders;
        }
    }
    let mut holders = Holders::new(tasks, r);
    let mut copies = vec![0u32; cluster.client_count()];
    let diversity = Diversity::new(cluster, capacities);

    // The fill step hands out what the keep step left of the extras.
    let mut quotas = quotas;
    quotas.extras = keep_existing(
        cluster,
        capacities,
        &quotas,
        &diversity,
        &mut holders,
        &mut copies,
    );
    if let Some(RackPlan { costs, new }) = racks {
        // New tasks get their first copy first, moved between racks to read their input
        // locally; their standbys then keep to other racks than it, as a task's other copies
        // do. The roles phase makes that first copy the active.
        quotas.extras = fill_missing(
            cluster,
            capacities,
            &quotas,
            Want {
                tasks: new,
                copies_each: 1,
            },
            &diversity,
            &mut holders,
            &mut copies,
        );
        let mut first = vec![ClientIx::MAX; tasks];
        for &t in new {
            if let Some(&c) = holders.of(t).first() {
                first[t] = c;
            }
        }
        let placed: Vec<TaskIx> = new
            .iter()
            .copied()
            .filter(|&t| first[t] != ClientIx::MAX)
            .collect();
        let before = first.clone();
        crate::rack::optimize(costs, cluster, &placed, &mut first);
        for &t in &placed {
            let (from, to) = (before[t], first[t]);
            if from != to {
                holders.replace(t, from, to);
            }
        }
    }
    fill_missing(
        cluster,
        capacities,
        &quotas,
        Want {
            tasks: &stateful,
            copies_each: r,
        },
        &diversity,
        &mut holders,
        &mut copies,
    );
    diversity.untangle(&stateful, &mut holders);
    holders
}

/// Tasks whose state is nowhere yet restore from scratch wherever they go: their actives move
/// between racks for the least traffic ([`crate::rack`]), each client keeping its number of
/// actives, never onto a rack where one of their standbys is. A move onto one of the task's
/// standbys swaps the two roles; otherwise the copy moves.
pub fn place_new_tasks_by_rack(
    cluster: &Cluster,
    racks: &RackPlan,
    holders: &mut Holders,
    target: &mut [ClientIx],
) {
    let costs = racks.costs;
    // With tag keys configured, copies keep apart by tags, which racks cannot see: tasks with
    // standbys keep the holder the roles phase chose (the one that reads most locally).
    let by_tags = !cluster.config.rack_aware_assignment_tags.is_empty();
    let new: Vec<TaskIx> = racks
        .new
        .iter()
        .copied()
        .filter(|&t| !by_tags || holders.of(t).len() == 1)
        .collect();
    let before: Vec<ClientIx> = new.iter().map(|&t| target[t]).collect();
    // An active never joins its own standby's rack.
    let mut standby_racks: Vec<Vec<RackIx>> = vec![Vec::new(); cluster.task_count()];
    for &t in &new {
        standby_racks[t] = holders
            .of(t)
            .iter()
            .filter(|&&h| h != target[t])
            .map(|&h| costs.rack_of(h))
            .collect();
    }
    crate::rack::optimize_avoiding(costs, cluster, &new, target, |t| {
        std::mem::take(&mut standby_racks[t])
    });
    for (&t, from) in new.iter().zip(before) {
        let to = target[t];
        if to != from && !holders.contains(t, to) {
            holders.replace(t, from, to);
        }
    }
}

/// Every client's claim on keeping a copy of a stateful task, sorted strongest first:
/// `(claim, a, b, client, task)`. Running and Held claims are client-major in interleaved
/// order; Stale claims are global by lag, so the freshest stale state wins.
pub(super) type ClaimRow = (Claim, u64, u64, ClientIx, TaskIx);

pub(super) fn claims(cluster: &Cluster, capacities: &[u32]) -> Vec<ClaimRow> {
    let mut claims: Vec<ClaimRow> = Vec::new();
    let acceptable = cluster.config.acceptable_recovery_lag;
    for c in cluster.client_ixs() {
        if capacities[c] == 0 {
            continue;
        }
        let view = &cluster.views[c];
        let mut running = Vec::new();
        let mut held = Vec::new();
        let mut seen: Vec<TaskIx> = view
            .owned
            .iter()
            .map(|&(t, _)| t)
            .chain(view.reports.iter().map(|&(t, _)| t))
            .filter(|&t| cluster.is_stateful(t))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            let lag = cluster.lag(c, t);
            let caught_up = lag.is_caught_up(acceptable);
            match cluster.owned_role(c, t) {
                Some(Role::Active) if caught_up => running.push(t),
                Some(_) => held.push(t),
                None if caught_up => held.push(t),
                None => {
                    let end = cluster.tasks[t].end_offset_sum;
                    if let Lag::Behind(n) = lag {
                        if n < end {
                            claims.push((Claim::Stale, n, c.0 as u64, c, t));
                        }
                    }
                }
            }
        }
        for (claim, mut list) in [(Claim::RunningActive, running), (Claim::Held, held)] {
            interleave(cluster, &mut list);
            for (rank, t) in list.into_iter().enumerate() {
                claims.push((claim, c.0 as u64, rank as u64, c, t));
            }
        }
    }
    claims.sort_unstable();
    claims
}

fn keep_existing(
    cluster: &Cluster,
    capacities: &[u32],
    quotas: &Quotas,
    diversity: &Diversity,
    holders: &mut Holders,
    copies: &mut [u32],
) -> u32 {
    let claims = claims(cluster, capacities);
    let mut extras = quotas.extras;
    let mut took_extra = vec![false; copies.len()];
    for within_base in [true, false] {
        for &(_, _, _, c, t) in &claims {
            let ci = c.ix();
            if holders.is_full(t) || holders.contains(t, c) {
                continue;
            }
            // With tags configured a copy stays only where it keeps the task's copies apart
            // (a moved standby's old copy stays until its replacement caught up: handover.rs).
            if diversity.by_tags() && !diversity.allows(c, holders.of(t)) {
                continue;
            }
            if copies[ci] < quotas.base[ci] {
                // room within the base quota
            } else if !within_base && extras > 0 && !took_extra[ci] && copies[ci] == quotas.base[ci]
            {
                extras -= 1;
                took_extra[ci] = true;
            } else {
                continue;
            }
            holders.add(t, c);
            copies[ci] += 1;
        }
    }
    // The fill step hands out what is left of the pool.
    extras
}

/// Which tasks [`fill_missing`] gives copies, and how many each ends with (at most `r`).
struct Want<'a> {
    tasks: &'a [TaskIx],
    copies_each: usize,
}

fn fill_missing(
    cluster: &Cluster,
    capacities: &[u32],
    quotas: &Quotas,
    want: Want,
    diversity: &Diversity,
    holders: &mut Holders,
    copies: &mut [u32],
) -> u32 {
    let Want {
        tasks: stateful,
        copies_each: upto,
    } = want;
    let mut extras = quotas.extras;
    let key = |c: ClientIx, n: u32| Reverse((Load::new(n, capacities[c]), c));
    let mut below_base: BinaryHeap<Reverse<(Load, ClientIx)>> = BinaryHeap::new();
    let mut at_base: BinaryHeap<Reverse<(Load, ClientIx)>> = BinaryHeap::new();
    for c in cluster.client_ixs() {
        let ci = c.ix();
        if capacities[ci] == 0 {
            continue;
        }
        if copies[ci] < quotas.base[ci] {
            below_base.push(key(c, copies[ci]));
        } else if copies[ci] == quotas.base[ci] {
            at_base.push(key(c, copies[ci]));
        }
    }

    let mut skipped = Vec::new();
    for &t in stateful {
        while holders.of(t).len() < upto && !holders.is_full(t) {
            let pick = pick_client(holders, copies, t, diversity, &mut below_base, &mut skipped)
                .or_else(|| {
                    if extras == 0 {
                        return None;
                    }
                    let c = pick_client(holders, copies, t, diversity, &mut at_base, &mut skipped)?;
                    extras -= 1;
                    Some(c)
                })
                .or_else(|| {
                    let room = |c: ClientIx| {
                        let ci = c.ix();
                        capacities[ci] > 0
                            && (copies[ci] < quotas.base[ci]
                                || (extras > 0 && copies[ci] == quotas.base[ci]))
                    };
                    let (x, d) = make_room(cluster, capacities, stateful, holders, t, room)?;
                    let di = d.ix();
                    if copies[di] >= quotas.base[di] {
                        extras -= 1;
                    }
                    copies[di] += 1;
                    copies[x] -= 1;
                    // d's heap entry is now stale (pick_client drops it); offer d afresh.
                    if copies[di] < quotas.base[di] {
                        below_base.push(key(d, copies[di]));
                    } else if copies[di] == quotas.base[di] {
                        at_base.push(key(d, copies[di]));
                    }
                    Some(x)
                })
                .or_else(|| least_loaded_without(cluster, capacities, copies, holders, t));
            let Some(c) = pick else {
                // Fewer eligible clients than copies: r was capped so this cannot happen.
                debug_assert!(false, "no client can take a copy of task {t}");
                break;
            };
            holders.add(t, c);
            let ci = c.ix();
            copies[ci] += 1;
            if copies[ci] < quotas.base[ci] {
                below_base.push(key(c, copies[ci]));
            } else if copies[ci] == quotas.base[ci] {
                at_base.push(key(c, copies[ci]));
            }
        }
    }
    extras
}

/// Pops the least-loaded client that can take `task`, preferring one that keeps its copies
/// apart ([`Diversity`]).
///
/// An entry whose count no longer matches `copies` is stale (its client gained a copy through
/// [`make_room`] and was offered again) and is dropped.
fn pick_client(
    holders: &Holders,
    copies: &[u32],
    task: TaskIx,
    diversity: &Diversity,
    heap: &mut BinaryHeap<Reverse<(Load, ClientIx)>>,
    skipped: &mut Vec<Reverse<(Load, ClientIx)>>,
) -> Option<ClientIx> {
    let mut fallback: Option<Reverse<(Load, ClientIx)>> = None;
    let mut chosen = None;
    let mut looked = 0;
    while let Some(entry) = heap.pop() {
        let c = entry.0 .1;
        if entry.0 .0.count != copies[c] {
            continue;
        }
        if holders.contains(task, c) {
            skipped.push(entry);
            continue;
        }
        if !diversity.active() || diversity.allows(c, holders.of(task)) {
            chosen = Some(c);
            break;
        }
        looked += 1;
        if fallback.is_none() {
            fallback = Some(entry);
        } else {
            skipped.push(entry);
        }
        if looked >= RACK_SEARCH_LIMIT {
            break;
        }
    }
    if chosen.is_none() {
        if let Some(entry) = fallback.take() {
            chosen = Some(entry.0 .1);
        }
    } else if let Some(entry) = fallback.take() {
        skipped.push(entry);
    }
    heap.extend(skipped.drain(..));
    chosen
}

/// Every client with room already holds `task`: search breadth-first for a chain of moves that
/// makes room. `task` goes to a client `x0` without it, `x0` hands one of its copies to `x1`,
/// and so on until a client with room. Returns `(x0, last)`.
///
/// Rare (few clients, many copies per task), so the search rebuilds what it needs.
fn make_room(
    cluster: &Cluster,
    capacities: &[u32],
    stateful: &[TaskIx],
    holders: &mut Holders,
    task: TaskIx,
    room: impl Fn(ClientIx) -> bool,
) -> Option<(ClientIx, ClientIx)> {
    let n = cluster.client_count();
    let mut held: Vec<Vec<TaskIx>> = vec![Vec::new(); n];
    for &u in stateful {
        for &c in holders.of(u) {
            held[c].push(u);
        }
    }
    // The copy that moves off a full client is its weakest: never its running active while
    // another will do (moving it would move the active too, and the next round, with the
    // released task back in play, would move another: a flip that never settles), and
    // otherwise the one furthest behind.
    for (x, list) in held.iter_mut().enumerate() {
        let x = ClientIx::new(x);
        list.sort_by_key(|&u| {
            (
                cluster.owned_role(x, u) == Some(Role::Active),
                Reverse(cluster.lag(x, u)),
                u,
            )
        });
    }
    const ROOT: ClientIx = ClientIx::MAX;
    // parent[y] = (x, u): `u` moves from `x` to `y`; ROOT marks a chain start.
    let mut parent: Vec<Option<(ClientIx, TaskIx)>> = vec![None; n];
    let mut queue = std::collections::VecDeque::new();
    for x in cluster.client_ixs() {
        if capacities[x] > 0 && !holders.contains(task, x) {
            parent[x] = Some((ROOT, task));
            queue.push_back(x);
        }
    }
    while let Some(x) = queue.pop_front() {
        if room(x) {
            let last = x;
            let mut at = x;
            while let Some((from, u)) = parent[at] {
                if from == ROOT {
                    return Some((at, last));
                }
                holders.replace(u, from, at);
                at = from;
            }
            return None;
        }
        for &u in &held[x] {
            for y in cluster.client_ixs() {
                if capacities[y] > 0 && parent[y].is_none() && !holders.contains(u, y) {
                    parent[y] = Some((x, u));
                    queue.push_back(y);
                }
            }
        }
    }
    None
}

/// Last resort when quotas cannot be met without two copies on one client: overshoot a quota.
fn least_loaded_without(
    cluster: &Cluster,
    capacities: &[u32],
    copies: &[u32],
    holders: &Holders,
    task: TaskIx,
) -> Option<ClientIx> {
    cluster
        .client_ixs()
        .filter(|&c| capacities[c] > 0 && !holders.contains(task, c))
        .min_by_key(|&c| (Load::new(copies[c], capacities[c]), c))
}
