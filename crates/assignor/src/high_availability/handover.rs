//! Phase 3: turn the target into what runs now, without a stall.
//!
//! A task runs on its target active only if that client is caught up. Otherwise it keeps running
//! on a caught-up client (a caught-up holder if there is one, so that no extra copy is needed)
//! and the target catches up first: as a standby if it is one, or as a warm-up within the
//! group's `max.warmup.replicas` budget. Tasks already warming up keep their budget first, so
//! a warm-up is never abandoned half way.

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
    plan: &mut Plan,
) {
    let mut wanted = Vec::new();
    for t in cluster.task_ixs() {
        let a = target[t as usize];
        if !cluster.is_stateful(t) {
            plan.push(a, t, Role::Active);
            continue;
        }
        let runner = if cluster.is_caught_up(a, t) {
            a
        } else {
            choose_runner(cluster, capacities, holders, t, a)
        };
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
        for &h in holders.of(t) {
            if h == runner || (h == a && !runner_holds) {
                continue;
            }
            plan.push(h, t, Role::Standby);
        }
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
                    cluster.tasks[t as usize].id,
                    cluster.clients[from as usize].id,
                    cluster.clients[to as usize].id
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

/// Who runs `task` while its target `a` is not caught up.
fn choose_runner(
    cluster: &Cluster,
    capacities: &[u32],
    holders: &Holders,
    task: TaskIx,
    a: ClientIx,
) -> ClientIx {
    let leaving = |c: ClientIx| capacities[c as usize] == 0;
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
    let reporters = &cluster.reporters[task as usize];
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
    cluster.reporters[task as usize]
        .iter()
        .filter(|&&(c, _)| cluster.is_caught_up(c, task))
        .count()
}
