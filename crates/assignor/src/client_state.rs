//! Kafka's `ClientState` bookkeeping, shared by the ports of Kafka's assignors.

use std::collections::{BTreeMap, BTreeSet};

use crate::assignment::Plan;
use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::load::Load;
use crate::model::Role;

/// What one client has been given so far.
#[derive(Debug, Clone)]
pub struct ClientState {
    pub capacity: u32,
    pub active: BTreeSet<TaskIx>,
    pub standby: BTreeSet<TaskIx>,
}

impl ClientState {
    pub fn new(capacity: u32) -> Self {
        Self {
            capacity,
            active: BTreeSet::new(),
            standby: BTreeSet::new(),
        }
    }

    pub fn assigned_count(&self) -> u32 {
        (self.active.len() + self.standby.len()) as u32
    }

    pub fn has_assigned(&self, t: TaskIx) -> bool {
        self.active.contains(&t) || self.standby.contains(&t)
    }

    /// Active and standby tasks per thread (Kafka's `assignedTaskLoad`).
    pub fn assigned_load(&self) -> Load {
        Load::new(self.assigned_count(), self.capacity)
    }

    /// Active tasks per thread (Kafka's `activeTaskLoad`).
    pub fn active_load(&self) -> Load {
        Load::new(self.active.len() as u32, self.capacity)
    }

    /// Kafka computes loads as doubles; some of its decisions subtract them.
    pub fn assigned_load_f64(&self) -> f64 {
        self.assigned_count() as f64 / self.capacity as f64
    }
}

/// Kafka's `ConstrainedPrioritySet`: clients by a weight taken when offered, ties by client order.
pub struct PrioritySet {
    set: BTreeSet<(Load, ClientIx)>,
    key: BTreeMap<ClientIx, Load>,
}

impl PrioritySet {
    pub fn new() -> Self {
        Self {
            set: BTreeSet::new(),
            key: BTreeMap::new(),
        }
    }

    pub fn offer(&mut self, client: ClientIx, weight: Load) {
        if let Some(old) = self.key.insert(client, weight) {
            self.set.remove(&(old, client));
        }
        self.set.insert((weight, client));
    }

    /// Removes and returns the lightest client that satisfies `ok`.
    pub fn poll(&mut self, ok: impl Fn(ClientIx) -> bool) -> Option<ClientIx> {
        let found = self.set.iter().find(|&&(_, c)| ok(c)).copied()?;
        self.set.remove(&found);
        self.key.remove(&found.1);
        Some(found.1)
    }
}

impl Default for PrioritySet {
    fn default() -> Self {
        Self::new()
    }
}

/// Turns Kafka-style client states plus a warm-up map into a plan.
pub fn to_plan(
    cluster: &Cluster,
    states: &[ClientState],
    warmups: &BTreeSet<(ClientIx, TaskIx)>,
    warnings: Vec<String>,
) -> Plan {
    let mut plan = Plan::new(cluster.client_count());
    plan.warnings = warnings;
    for (c, s) in states.iter().enumerate() {
        let c = ClientIx::new(c);
        for &t in &s.active {
            plan.push(c, t, Role::Active);
        }
        for &t in &s.standby {
            let role = if warmups.contains(&(c, t)) {
                Role::Warmup
            } else {
                Role::Standby
            };
            plan.push(c, t, role);
        }
    }
    plan
}

/// Kafka's assignors know nothing of draining; say so rather than pretend.
pub fn leaving_warning(cluster: &Cluster, assignor: &str) -> Option<String> {
    let leaving = cluster.clients.iter().filter(|c| c.leaving).count();
    (leaving > 0).then(|| {
        format!(
            "the {assignor} assignor ignores the leaving flag ({leaving} client(s) marked leaving)"
        )
    })
}
