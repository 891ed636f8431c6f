//! `sticky`: the pre-KIP-441 legacy StickyTaskAssignor, the baseline KIP-441 replaced.
//!
//! Stickiness over balance, blind to lag: tasks go back to their previous owners while those are
//! within quota, and new owners restore from scratch. No warm-ups, no follow-up rebalance.
//! Kafka's `TaskPairs` tie-breaker (prefer clients that form new task pairs) is left out: it is
//! quadratic in the task count and changes only which of two equally loaded clients is chosen.

use std::collections::{BTreeMap, BTreeSet};

use crate::assignment::Assignment;
use crate::client_state::{leaving_warning, to_plan, ClientState};
use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::model::Role;
use crate::TaskAssignor;

/// The `sticky` assignor.
#[derive(Debug, Default, Clone, Copy)]
pub struct StickyAssignor;

impl TaskAssignor for StickyAssignor {
    fn name(&self) -> &'static str {
        "sticky"
    }

    fn assign(&self, cluster: &Cluster) -> Assignment {
        let mut warnings: Vec<String> = leaving_warning(cluster, "sticky").into_iter().collect();
        if cluster.config.rack_aware_strategy != crate::RackStrategy::None {
            warnings.push(
                "the sticky assignor places actives without racks \
                 (rack.aware.assignment.strategy is ignored)"
                    .to_owned(),
            );
        }
        let mut run = Run::new(cluster);
        run.assign_active();
        if let Some(w) = run.assign_standby() {
            warnings.push(w);
        }
        to_plan(cluster, &run.states, &BTreeSet::new(), warnings).finish(cluster, false)
    }
}

struct Run<'a> {
    cluster: &'a Cluster,
    states: Vec<ClientState>,
    prev_active: BTreeMap<TaskIx, ClientIx>,
    prev_standby: BTreeMap<TaskIx, BTreeSet<ClientIx>>,
}

impl<'a> Run<'a> {
    fn new(cluster: &'a Cluster) -> Self {
        let mut prev_active = BTreeMap::new();
        let mut prev_standby: BTreeMap<TaskIx, BTreeSet<ClientIx>> = BTreeMap::new();
        for c in cluster.client_ixs() {
            let view = &cluster.views[c];
            for &(t, role) in &view.owned {
                if role == Role::Active {
                    prev_active.insert(t, c);
                } else {
                    prev_standby.entry(t).or_default().insert(c);
                }
            }
            // Since subscription v7 every reported task that is not a running active is a "previous standby".
            for &(t, _) in &view.reports {
                if cluster.owned_role(c, t) != Some(Role::Active) {
                    prev_standby.entry(t).or_default().insert(c);
                }
            }
        }
        Self {
            cluster,
            states: cluster
                .clients
                .iter()
                .map(|c| ClientState::new(c.capacity))
                .collect(),
            prev_active,
            prev_standby,
        }
    }

    fn has_unfulfilled_quota(&self, c: ClientIx, per_thread: u32) -> bool {
        let s = &self.states[c];
        (s.active.len() as u64) < s.capacity as u64 * per_thread as u64
    }

    fn assign_active(&mut self) {
        let total_capacity: u64 = self.states.iter().map(|s| s.capacity as u64).sum();
        let per_thread = (self.cluster.task_count() as u64 / total_capacity) as u32;
        let mut assigned = BTreeSet::new();
        for (&t, &c) in &self.prev_active.clone() {
            if self.has_unfulfilled_quota(c, per_thread) {
                self.states[c].active.insert(t);
                assigned.insert(t);
            }
        }
        let mut unassigned = Vec::new();
        for t in self.cluster.task_ixs().filter(|t| !assigned.contains(t)) {
            let standby_owner = self.prev_standby.get(&t).and_then(|owners| {
                owners
                    .iter()
                    .copied()
                    .find(|&c| self.has_unfulfilled_quota(c, per_thread))
            });
            match standby_owner {
                Some(c) => {
                    self.states[c].active.insert(t);
                }
                None => unassigned.push(t),
            }
        }
        let everyone: Vec<ClientIx> = self.cluster.client_ixs().collect();
        for t in unassigned {
            let c = self.find_client(t, &everyone);
            self.states[c].active.insert(t);
        }
    }

    fn assign_standby(&mut self) -> Option<String> {
        let wanted = self.cluster.config.num_standby_replicas;
        let mut short = 0;
        for t in self
            .cluster
            .task_ixs()
            .filter(|&t| self.cluster.is_stateful(t))
        {
            for _ in 0..wanted {
                let free: Vec<ClientIx> = self
                    .cluster
                    .client_ixs()
                    .filter(|&c| !self.states[c].has_assigned(t))
                    .collect();
                if free.is_empty() {
                    short += 1;
                    break;
                }
                let c = self.find_client(t, &free);
                self.states[c].standby.insert(t);
            }
        }
        (short > 0).then(|| {
            format!(
                "num.standby.replicas is {wanted} but {short} stateful task(s) could not get all \
                 their standbys: too few clients"
            )
        })
    }

    fn find_client(&self, t: TaskIx, within: &[ClientIx]) -> ClientIx {
        if within.len() == 1 {
            return within[0];
        }
        let previous = match self.prev_active.get(&t) {
            Some(&c) if within.contains(&c) => Some(c),
            _ => self.least_loaded_prev_standby(t, within),
        };
        let Some(previous) = previous else {
            return self.least_loaded(within.iter().copied());
        };
        if self.should_balance_load(previous) {
            return match self.least_loaded_prev_standby(t, within) {
                Some(s) if !self.should_balance_load(s) => s,
                _ => self.least_loaded(within.iter().copied()),
            };
        }
        previous
    }

    fn least_loaded_prev_standby(&self, t: TaskIx, within: &[ClientIx]) -> Option<ClientIx> {
        let owners = self.prev_standby.get(&t)?;
        let candidates: Vec<ClientIx> = owners
            .iter()
            .copied()
            .filter(|c| within.contains(c))
            .collect();
        (!candidates.is_empty()).then(|| self.least_loaded(candidates.into_iter()))
    }

    fn least_loaded(&self, clients: impl Iterator<Item = ClientIx>) -> ClientIx {
        let mut best: Option<ClientIx> = None;
        for c in clients {
            if self.states[c].assigned_count() == 0 {
                return c;
            }
            if best.is_none_or(|b| self.more_available_capacity(c, b)) {
                best = Some(c);
            }
        }
        best.expect("least_loaded needs at least one client")
    }

    /// Kafka's `hasMoreAvailableCapacityThan`: lower load, then more threads.
    fn more_available_capacity(&self, a: ClientIx, b: ClientIx) -> bool {
        let (sa, sb) = (&self.states[a], &self.states[b]);
        match sa.assigned_load().cmp(&sb.assigned_load()) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => sa.capacity > sb.capacity,
        }
    }

    fn should_balance_load(&self, c: ClientIx) -> bool {
        let s = &self.states[c];
        s.assigned_count() >= s.capacity
            && self
                .cluster
                .client_ixs()
                .any(|o| self.more_available_capacity(o, c))
    }
}
