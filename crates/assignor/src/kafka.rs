//! `kafka`: Kafka Streams' HighAvailabilityTaskAssignor, reproduced for parity and comparison.
//!
//! The target layout is a pure function of tasks, clients and capacities (round robin, then a
//! skew-reducing loop); stickiness only comes from lags, through warm-ups and standby swaps.
//! Every tie is broken by task order and client order, as in Kafka: client ids stand in for
//! process UUIDs and order as Java's `UUID.compareTo` does ([`crate::ClientId`]). With
//! `rack.aware.assignment.strategy`, actives are moved between racks as Kafka's
//! `optimizeActiveTasks` does, to the same (least) total cost. Kafka polls its planned moves
//! from a priority queue, fewest caught-up clients first, then by task; so does the port
//! ([`kafka_poll_order`]).

use std::collections::BTreeSet;

use crate::assignment::Assignment;
use crate::client_state::{leaving_warning, to_plan, ClientState, PrioritySet};
use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::index::indices;
use crate::rack::{self, RackCosts};
use crate::TaskAssignor;

mod java_queue;
mod tag_aware;

use java_queue::JavaPriorityQueue;

/// The `kafka` assignor.
#[derive(Debug, Default, Clone, Copy)]
pub struct KafkaAssignor;

impl TaskAssignor for KafkaAssignor {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn assign(&self, cluster: &Cluster) -> Assignment {
        let mut warnings: Vec<String> = leaving_warning(cluster, "kafka").into_iter().collect();
        let mut run = Run::new(cluster);
        let racks = match RackCosts::new(cluster) {
            Ok(costs) => costs,
            Err(why) => {
                warnings.push(why.to_string());
                None
            }
        };
        let stateful: Vec<TaskIx> = cluster
            .task_ixs()
            .filter(|&t| cluster.is_stateful(t))
            .collect();
        run.assign_active_stateful(&stateful);
        if let Some(costs) = &racks {
            run.optimize_actives(costs, &stateful);
        }
        if let Some(w) = run.assign_standbys(&stateful) {
            warnings.push(w);
        }
        let mut budget = cluster.config.max_warmup_replicas as i64;
        let needed_active = run.active_movements(&mut budget);
        let needed_standby = run.standby_movements(&mut budget);
        run.assign_stateless();
        if let Some(costs) = &racks {
            let stateless: Vec<TaskIx> = cluster
                .task_ixs()
                .filter(|&t| !cluster.is_stateful(t))
                .collect();
            run.optimize_actives(costs, &stateless);
        }
        let followup = needed_active + needed_standby > 0;
        let mut plan = to_plan(cluster, &run.states, &run.warmups, warnings);
        plan.pending = run.pending;
        plan.finish_with_racks(cluster, followup, racks.as_ref())
    }
}

struct Run<'a> {
    cluster: &'a Cluster,
    states: Vec<ClientState>,
    warmups: BTreeSet<(ClientIx, TaskIx)>,
    pending: Vec<(TaskIx, ClientIx, ClientIx)>,
}

/// The order Kafka visits its planned moves in: it polls them from a `java.util.PriorityQueue`
/// ordered by (number of caught-up clients, task) and nothing else (Kafka's HOTFIX #12585;
/// before it, Kafka walked the queue's heap array instead). Two standbys of one task are two
/// moves that compare equal: they come out as Java's heap shuffles them ([`JavaPriorityQueue`]),
/// offered in Kafka's order (clients, then each client's tasks, ascending).
fn kafka_poll_order(movements: Vec<Movement>) -> Vec<Movement> {
    let mut queue = JavaPriorityQueue::new(|a: &Movement, b: &Movement| {
        (a.caught_up, a.task).cmp(&(b.caught_up, b.task))
    });
    for m in movements {
        queue.offer(m);
    }
    std::iter::from_fn(|| queue.poll()).collect()
}

/// A planned move of `task` away from `destination`, which is not caught up.
struct Movement {
    caught_up: usize,
    task: TaskIx,
    destination: ClientIx,
}

impl<'a> Run<'a> {
    fn new(cluster: &'a Cluster) -> Self {
        Self {
            cluster,
            states: cluster
                .clients
                .iter()
                .map(|c| ClientState::new(c.capacity))
                .collect(),
            warmups: BTreeSet::new(),
            pending: Vec::new(),
        }
    }

    /// Every client, in index order.
    fn clients(&self) -> impl DoubleEndedIterator<Item = ClientIx> + ExactSizeIterator {
        indices(self.states.len())
    }

    fn lag(&self, c: ClientIx, t: TaskIx) -> i64 {
        self.cluster.lag(c, t).as_kafka_long()
    }

    fn caught_up(&self, c: ClientIx, t: TaskIx) -> bool {
        self.cluster.is_caught_up(c, t)
    }

    /// All clients ordered by (lag, client), Kafka's `tasksToClientByLag`.
    fn by_lag(&self, t: TaskIx) -> Vec<ClientIx> {
        let mut v: Vec<ClientIx> = self.clients().collect();
        v.sort_by_key(|&c| (self.lag(c, t), c));
        v
    }

    fn assign_active_stateful(&mut self, stateful: &[TaskIx]) {
        let n = self.states.len();
        for (i, &t) in stateful.iter().enumerate() {
            self.states[i % n].active.insert(t);
        }
        balance_over_threads(&mut self.states, Kind::Active, |_, _| true);
    }

    /// Kafka's `optimizeActiveTasks`: the same total cost as its min-cost flow (not always the
    /// same tasks: ties may fall differently).
    fn optimize_actives(&mut self, costs: &RackCosts, tasks: &[TaskIx]) {
        let mut target = vec![ClientIx::MAX; self.cluster.task_count()];
        for (c, state) in self.states.iter().enumerate() {
            for &t in &state.active {
                target[t] = ClientIx::new(c);
            }
        }
        let before = target.clone();
        rack::optimize(costs, self.cluster, tasks, &mut target);
        for &t in tasks {
            let (from, to) = (before[t], target[t]);
            if from != to {
                self.states[from].active.remove(&t);
                self.states[to].active.insert(t);
            }
        }
    }

    fn assign_standbys(&mut self, stateful: &[TaskIx]) -> Option<String> {
        let wanted = self.cluster.config.num_standby_replicas;
        if wanted == 0 {
            return None;
        }
        if !self.cluster.config.rack_aware_assignment_tags.is_empty() {
            let short = tag_aware::assign_standbys(self.cluster, &mut self.states, stateful);
            let cluster = self.cluster;
            balance_over_threads(&mut self.states, Kind::Standby, |src, dst| {
                tag_aware::same_tags(cluster, src, dst)
            });
            return (short > 0).then(|| {
                format!(
                    "num.standby.replicas is {wanted} but {short} standby replica(s) could not be \
                     assigned: too few clients"
                )
            });
        }
        let mut set = PrioritySet::new();
        for c in self.clients() {
            set.offer(c, self.states[c].assigned_load());
        }
        let mut short = 0usize;
        for &t in stateful {
            for _ in 0..wanted {
                let states = &self.states;
                let Some(c) = set.poll(|c| !states[c].has_assigned(t)) else {
                    short += 1;
                    break;
                };
                self.states[c].standby.insert(t);
                set.offer(c, self.states[c].assigned_load());
            }
        }
        balance_over_threads(&mut self.states, Kind::Standby, |_, _| true);
        (short > 0).then(|| {
            format!(
                "num.standby.replicas is {wanted} but {short} stateful task(s) could not get all \
                 their standbys: too few clients"
            )
        })
    }

    fn caught_up_count(&self, t: TaskIx) -> usize {
        self.clients().filter(|&c| self.caught_up(c, t)).count()
    }

    /// Not caught up, and some client is strictly less behind.
    fn should_move(&self, t: TaskIx, c: ClientIx) -> bool {
        if self.caught_up(c, t) {
            return false;
        }
        let best = self
            .clients()
            .map(|x| self.lag(x, t))
            .min()
            .unwrap_or(i64::MAX);
        best < self.lag(c, t)
    }

    fn load_set(&self) -> PrioritySet {
        let mut set = PrioritySet::new();
        for c in self.clients() {
            set.offer(c, self.states[c].assigned_load());
        }
        set
    }

    fn reoffer(&self, set: &mut PrioritySet, clients: [ClientIx; 2]) {
        for c in clients {
            set.offer(c, self.states[c].assigned_load());
        }
    }

    fn active_movements(&mut self, budget: &mut i64) -> usize {
        let mut movements = Vec::new();
        for c in self.clients() {
            for &t in &self.states[c].active {
                if self.cluster.is_stateful(t) && self.should_move(t, c) {
                    movements.push(Movement {
                        caught_up: self.caught_up_count(t),
                        task: t,
                        destination: c,
                    });
                }
            }
        }
        let movements = kafka_poll_order(movements);
        let mut set = self.load_set();
        for m in &movements {
            let (t, dest) = (m.task, m.destination);
            // a. A caught-up standby swaps roles with the destination: no warm-up needed.
            let states = &self.states;
            let cluster = self.cluster;
            if let Some(src) =
                set.poll(|c| cluster.is_caught_up(c, t) && states[c].standby.contains(&t))
            {
                self.swap(t, src, dest);
                self.reoffer(&mut set, [src, dest]);
                continue;
            }
            // b. Any caught-up client takes the active; the destination warms up if budget allows.
            if let Some(src) = set.poll(|c| cluster.is_caught_up(c, t)) {
                self.move_and_warm_up(t, src, dest, budget);
                self.reoffer(&mut set, [src, dest]);
                continue;
            }
            // c. No caught-up client: the most caught-up one ahead of the destination (KAFKA-13600).
            if let Some(src) = self.by_lag(t).into_iter().take_while(|&c| c != dest).next() {
                if self.states[src].standby.contains(&t) {
                    self.swap(t, src, dest);
                } else {
                    self.move_and_warm_up(t, src, dest, budget);
                }
                self.reoffer(&mut set, [src, dest]);
            }
            // Kafka throws here; should_move guarantees a more caught-up client exists.
        }
        movements.len()
    }

    fn standby_movements(&mut self, budget: &mut i64) -> usize {
        let mut movements = Vec::new();
        for c in self.clients() {
            for &t in &self.states[c].standby {
                if !self.warmups.contains(&(c, t)) && self.should_move(t, c) {
                    movements.push(Movement {
                        caught_up: self.caught_up_count(t),
                        task: t,
                        destination: c,
                    });
                }
            }
        }
        let movements = kafka_poll_order(movements);
        let mut set = self.load_set();
        let mut needed = 0;
        for m in &movements {
            let (t, dest) = (m.task, m.destination);
            let states = &self.states;
            let cluster = self.cluster;
            let src = set
                .poll(|c| cluster.is_caught_up(c, t) && !states[c].has_assigned(t))
                .or_else(|| {
                    self.by_lag(t)
                        .into_iter()
                        .take_while(|&c| c != dest)
                        .find(|&c| !self.states[c].has_assigned(t))
                });
            let Some(src) = src else { continue };
            self.states[src].standby.insert(t);
            if *budget > 0 {
                self.warmups.insert((dest, t));
                self.pending.push((t, src, dest));
            } else {
                self.states[dest].standby.remove(&t);
            }
            *budget -= 1;
            self.reoffer(&mut set, [src, dest]);
            needed += 1;
        }
        needed
    }

    fn swap(&mut self, t: TaskIx, src: ClientIx, dest: ClientIx) {
        self.states[src].standby.remove(&t);
        self.states[src].active.insert(t);
        self.states[dest].active.remove(&t);
        self.states[dest].standby.insert(t);
        self.pending.push((t, src, dest));
    }

    fn move_and_warm_up(&mut self, t: TaskIx, src: ClientIx, dest: ClientIx, budget: &mut i64) {
        self.states[src].active.insert(t);
        self.states[dest].active.remove(&t);
        if *budget > 0 {
            self.states[dest].standby.insert(t);
            self.warmups.insert((dest, t));
        }
        *budget -= 1;
        self.pending.push((t, src, dest));
    }

    fn assign_stateless(&mut self) {
        let mut set = PrioritySet::new();
        for c in self.clients() {
            set.offer(c, self.states[c].active_load());
        }
        for t in self
            .cluster
            .task_ixs()
            .filter(|&t| !self.cluster.is_stateful(t))
        {
            let c = set.poll(|_| true).expect("at least one client");
            self.states[c].active.insert(t);
            set.offer(c, self.states[c].active_load());
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Active,
    Standby,
}

/// Kafka's `balanceTasksOverThreads`: move tasks from more to less loaded clients until no move
/// helps, between clients that `allowed(src, dst)`.
fn balance_over_threads(
    states: &mut [ClientState],
    kind: Kind,
    allowed: impl Fn(ClientIx, ClientIx) -> bool,
) {
    let n = states.len();
    loop {
        let mut moved = false;
        for src in indices::<ClientIx>(n) {
            for dst in indices::<ClientIx>(n) {
                if src == dst
                    || !should_move_a_task(&states[src], &states[dst])
                    || !allowed(src, dst)
                {
                    continue;
                }
                let snapshot: Vec<TaskIx> = match kind {
                    Kind::Active => states[src].active.iter().copied().collect(),
                    Kind::Standby => states[src].standby.iter().copied().collect(),
                };
                for t in snapshot {
                    if !should_move_a_task(&states[src], &states[dst]) {
                        break;
                    }
                    if states[dst].has_assigned(t) {
                        continue;
                    }
                    match kind {
                        Kind::Active => {
                            states[src].active.remove(&t);
                            states[dst].active.insert(t);
                        }
                        Kind::Standby => {
                            states[src].standby.remove(&t);
                            states[dst].standby.insert(t);
                        }
                    }
                    moved = true;
                }
            }
        }
        if !moved {
            return;
        }
    }
}

fn should_move_a_task(src: &ClientState, dst: &ClientState) -> bool {
    let skew = src.assigned_load_f64() - dst.assigned_load_f64();
    if skew <= 0.0 {
        return false;
    }
    let at_dst = (dst.assigned_count() as f64 + 1.0) / dst.capacity as f64;
    let at_src = (src.assigned_count() as f64 - 1.0) / src.capacity as f64;
    let proposed = at_src - at_dst;
    proposed >= 0.0 && proposed < skew
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(caught_up: usize, task: u32) -> Movement {
        Movement {
            caught_up,
            task: TaskIx(task),
            destination: ClientIx(0),
        }
    }

    /// Kafka's `PriorityQueue.poll()` loop: fewest caught-up clients first, then task order,
    /// whatever order the moves were offered in (not the heap array's order, 1, 2, 4, 5, 3).
    #[test]
    fn moves_come_in_kafkas_poll_order() {
        let order: Vec<u32> = kafka_poll_order((1..=5).rev().map(|t| mv(1, t)).collect())
            .iter()
            .map(|m| m.task.0)
            .collect();
        assert_eq!(order, vec![1, 2, 3, 4, 5]);
        let by_caught_up: Vec<u32> = kafka_poll_order(vec![mv(2, 0), mv(1, 9), mv(1, 3)])
            .iter()
            .map(|m| m.task.0)
            .collect();
        assert_eq!(by_caught_up, vec![3, 9, 0]);
    }
}
