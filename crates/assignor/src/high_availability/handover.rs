//! Phase 3: turn the target into what runs now, without a stall.
//!
//! A task runs on its target active only if that client is caught up. Otherwise it keeps running
//! on a caught-up client (a caught-up holder if there is one, so that no extra copy is needed)
//! and the target catches up first: as a standby if it is one, or as a warm-up within the
//! group's `max.warmup.replicas` budget. Only those budgeted copies are labelled warm-ups; a
//! copy in a standby slot is a standby even while it is a pending move's target. Tasks already warming up keep their budget first, so
//! a warm-up is never abandoned half way.
//!
//! A standby that moves keeps its caught-up copy (Kafka's standby task movements): while the
//! new holder is not caught up, the old copy stays the standby and the new holder warms up, so
//! a crash of the active's host in between still finds a caught-up copy, and the new holder's
//! caught-up signal ends the move at once. Unlike an active's warm-up this one takes no
//! `max.warmup.replicas` budget: it restores exactly what a standby placed there directly
//! would, and keeping the old copy costs nothing new.

use super::holders::Holders;
use crate::assignment::Plan;
use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::model::{Lag, Role};

/// A task whose target is not caught up and whose runner is outside its holders.
struct WarmupWanted {
    already_warming: bool,
    caught_up_clients: usize,
    task: TaskIx,
    to: ClientIx,
}

/// `capacities[c] == 0` marks a client that is leaving (and may keep only what it runs now).
pub fn hand_over(
    cluster: &Cluster,
    capacities: &[u32],
    holders: &Holders,
    target: &[ClientIx],
    runners: &[ClientIx],
    plan: &mut Plan,
) {
    let mut wanted = Vec::new();
    for t in cluster.task_ixs() {
        let a = target[t];
        if !cluster.is_stateful(t) {
            plan.push(a, t, Role::Active);
            continue;
        }
        let runner = runners[t];
        plan.push(runner, t, Role::Active);
        if !cluster.is_caught_up(runner, t) {
            // Taken from a leaving client past its timeout: the hand-over the drain waited for
            // is forced, and the task restores before it runs again.
            if let Some(from) = cluster
                .client_ixs()
                .find(|&c| cluster.timed_out(c) && cluster.owned_role(c, t) == Some(Role::Active))
            {
                plan.forced.push((t, from, runner));
            }
        }
        let runner_holds = holders.contains(t, runner);
        place_standbys(cluster, capacities, holders, t, runner, a, plan);
        if runner != a {
            plan.pending.push((t, runner, a));
            if !runner_holds {
                wanted.push(WarmupWanted {
                    already_warming: cluster.owned_role(a, t) == Some(Role::Warmup),
                    caught_up_clients: caught_up_count(cluster, t),
                    task: t,
                    to: a,
                });
            }
        }
    }
    if !plan.forced.is_empty() {
        let moves: Vec<String> = plan
            .forced
            .iter()
            .map(|&(t, from, to)| {
                format!(
                    "{} {} -> {}",
                    cluster.tasks[t].id, cluster.clients[from].id, cluster.clients[to].id
                )
            })
            .collect();
        plan.warnings.push(format!(
            "scale-down timeout ({} ms): {} task(s) taken from leaving clients before their new \
             owners caught up; they restore first: {}",
            cluster.config.scale_down_timeout_ms,
            moves.len(),
            moves.join(", ")
        ));
    }
    wanted.sort_by_key(|w| (!w.already_warming, w.caught_up_clients, w.task));
    let budget = cluster.config.max_warmup_replicas as usize;
    for w in wanted.into_iter().take(budget) {
        plan.push(w.to, w.task, Role::Warmup);
    }
}

/// The standbys of stateful task `t`, which `runner` runs and whose target active is `a`. Its
/// standby slots are its holders but the target; a slot whose holder is not caught up (or is
/// the runner, busy running the task until the hand-over) keeps an old caught-up copy
/// meanwhile, and the new holder warms up (no budget). The target, when it holds a copy, warms
/// up too, so its caught-up signal hands the task over at once rather than at the next probe.
fn place_standbys(
    cluster: &Cluster,
    capacities: &[u32],
    holders: &Holders,
    t: TaskIx,
    runner: ClientIx,
    a: ClientIx,
    plan: &mut Plan,
) {
    let runner_holds = holders.contains(t, runner);
    let slots = holders.of(t).len().saturating_sub(1);
    let mut caught_up = 0;
    let mut behind = Vec::new();
    for &h in holders.of(t) {
        if h == runner || (h == a && !runner_holds) {
            continue;
        }
        if h == a {
            // The target, catching up in one of the task's standby slots: a standby, and the
            // pending move's target (the runtime hands the task over once it catches up).
            plan.push(h, t, Role::Standby);
        } else if cluster.is_caught_up(h, t) {
            plan.push(h, t, Role::Standby);
            caught_up += 1;
        } else {
            behind.push(h);
        }
    }
    // Looked for only when a slot needs one.
    let mut old: Option<std::vec::IntoIter<ClientIx>> = None;
    let mut next_old = || {
        old.get_or_insert_with(|| old_standbys(cluster, capacities, holders, t, runner))
            .next()
    };
    for h in behind {
        match (caught_up < slots).then(&mut next_old).flatten() {
            Some(c) => {
                plan.push(c, t, Role::Standby);
                // Fills a slot the old copy keeps meanwhile: a standby, listed as the move's
                // target in `standby_moves`; no warm-up budget.
                plan.push(h, t, Role::Standby);
                plan.standby_moves.push((t, c, h));
                caught_up += 1;
            }
            None => plan.push(h, t, Role::Standby),
        }
    }
    if runner_holds && runner != a && caught_up < slots {
        if let Some(c) = next_old() {
            plan.push(c, t, Role::Standby);
            plan.standby_moves.push((t, c, a));
        }
    }
}

/// Staying clients that hold `task` as a caught-up standby now but are no longer its holders:
/// the copies a moving standby leaves behind, most caught up first.
fn old_standbys(
    cluster: &Cluster,
    capacities: &[u32],
    holders: &Holders,
    task: TaskIx,
    runner: ClientIx,
) -> std::vec::IntoIter<ClientIx> {
    let is_old = |c: ClientIx| {
        c != runner
            && capacities[c] > 0
            && !holders.contains(task, c)
            && cluster.owned_role(c, task) == Some(Role::Standby)
            && cluster.is_caught_up(c, task)
    };
    // Its reporters; every client when, within the acceptable lag, an unreported copy is
    // caught up too (as `choose_runner` looks).
    let mut old: Vec<ClientIx> = if cluster.unreported_is_caught_up(task) {
        cluster.client_ixs().filter(|&c| is_old(c)).collect()
    } else {
        cluster.reporters[task]
            .iter()
            .map(|&(c, _)| c)
            .filter(|&c| is_old(c))
            .collect()
    };
    old.sort_unstable_by_key(|&c| (cluster.lag(c, task), c));
    old.into_iter()
}

/// Who runs each stateful task now: its target if that is caught up, else see
/// [`choose_runner`]. Stateless tasks' entries are unused (they have no target yet).
pub fn runners(
    cluster: &Cluster,
    capacities: &[u32],
    holders: &Holders,
    target: &[ClientIx],
) -> Vec<ClientIx> {
    cluster
        .task_ixs()
        .map(|t| {
            let a = target[t];
            if !cluster.is_stateful(t) || cluster.is_caught_up(a, t) {
                // Stateless: `a` is still unset here, and never read.
                a
            } else {
                choose_runner(cluster, capacities, holders, t, a)
            }
        })
        .collect()
}

/// Who runs `task` while its target `a` is not caught up.
fn choose_runner(
    cluster: &Cluster,
    capacities: &[u32],
    holders: &Holders,
    task: TaskIx,
    a: ClientIx,
) -> ClientIx {
    let leaving = |c: ClientIx| capacities[c] == 0;
    // Past the scale-down timeout a leaving client runs nothing, caught up or not.
    let runs_now =
        |c: ClientIx| cluster.owned_role(c, task) == Some(Role::Active) && !cluster.timed_out(c);
    // A caught-up holder: no extra copy needed. Prefer the one running it now.
    if let Some(h) = holders
        .of(task)
        .iter()
        .copied()
        .filter(|&h| cluster.is_caught_up(h, task))
        .min_by_key(|&h| (!runs_now(h), cluster.lag(h, task), h))
    {
        return h;
    }
    // Any caught-up client, e.g. one over its quota, or a leaving one that runs the task now.
    // When the changelog is within the acceptable lag, a client that reported nothing is caught up too.
    let reporters = &cluster.reporters[task];
    let may_run = |c: ClientIx| {
        (runs_now(c) || !leaving(c)) && !cluster.timed_out(c) && cluster.is_caught_up(c, task)
    };
    let rank = |c: ClientIx| (!runs_now(c), cluster.lag(c, task), c);
    let caught_up = if cluster.unreported_is_caught_up(task) {
        cluster
            .client_ixs()
            .filter(|&c| may_run(c))
            .min_by_key(|&c| rank(c))
    } else {
        reporters
            .iter()
            .map(|&(c, _)| c)
            .filter(|&c| may_run(c))
            .min_by_key(|&c| rank(c))
    };
    if let Some(c) = caught_up {
        return c;
    }
    // Nobody is caught up: the most caught-up client restores, the target if it ties. A leaving
    // client restores nothing it does not already run.
    let target_lag = cluster.lag(a, task);
    match reporters
        .iter()
        .filter(|&&(c, lag)| {
            lag != Lag::Unknown && !cluster.timed_out(c) && (runs_now(c) || !leaving(c))
        })
        .min_by_key(|&&(c, lag)| (lag, !runs_now(c), c))
    {
        Some(&(c, lag)) if lag < target_lag => c,
        _ => a,
    }
}

fn caught_up_count(cluster: &Cluster, task: TaskIx) -> usize {
    if cluster.unreported_is_caught_up(task) {
        return cluster
            .client_ixs()
            .filter(|&c| cluster.is_caught_up(c, task))
            .count();
    }
    cluster.reporters[task]
        .iter()
        .filter(|&&(c, _)| cluster.is_caught_up(c, task))
        .count()
}
