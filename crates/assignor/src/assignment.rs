//! Assignment out: what every client runs, and whether to rebalance again.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::model::{ClientId, Role, TaskId};
use crate::rack::{self, RackCosts, Traffic};

/// What one client is told to run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ClientAssignment {
    pub active: Vec<TaskId>,
    pub standby: Vec<TaskId>,
    pub warmup: Vec<TaskId>,
    /// A leaving client that holds nothing: it may shut down.
    pub drained: bool,
}

/// A move that the assignment has decided on but not made yet, because the destination is not caught up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingMove {
    pub task: TaskId,
    /// The client running the task now.
    pub from: ClientId,
    /// Where the task will run once that client has caught up.
    pub to: ClientId,
}

/// The result of one assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub clients: BTreeMap<ClientId, ClientAssignment>,
    /// True exactly when a move (of an active or a standby) is still pending.
    pub followup_rebalance: bool,
    /// When to probe again, if a follow-up is due.
    pub probe_after_ms: Option<u64>,
    pub warnings: Vec<String>,
    pub pending: Vec<PendingMove>,
    /// Standbys moving to a client that is not caught up yet: `from` keeps its caught-up copy
    /// as the standby meanwhile, `to` warms up (or waits for a warm-up slot).
    pub standby_moves: Vec<PendingMove>,
    /// Tasks taken from a leaving client past `scale.down.timeout.ms` by a client that is not
    /// caught up: they restore before they run again.
    pub forced: Vec<PendingMove>,
    /// What the actives read across racks, when `rack.aware.assignment.strategy` is set and
    /// the input has the racks.
    pub traffic: Option<Traffic>,
}

impl Assignment {
    /// The roles of `task`: its active client and its standby and warm-up clients.
    pub fn holders(&self, task: TaskId) -> Vec<(&ClientId, Role)> {
        let mut out = Vec::new();
        for (id, a) in &self.clients {
            if a.active.binary_search(&task).is_ok() {
                out.push((id, Role::Active));
            }
            if a.standby.binary_search(&task).is_ok() {
                out.push((id, Role::Standby));
            }
            if a.warmup.binary_search(&task).is_ok() {
                out.push((id, Role::Warmup));
            }
        }
        out
    }
}

/// An assignment under construction, by index.
#[derive(Debug, Clone)]
pub struct Plan {
    pub active: Vec<Vec<TaskIx>>,
    pub standby: Vec<Vec<TaskIx>>,
    pub warmup: Vec<Vec<TaskIx>>,
    pub warnings: Vec<String>,
    /// `(task, from, to)`.
    pub pending: Vec<(TaskIx, ClientIx, ClientIx)>,
    /// `(task, from, to)`: handed over past the scale-down timeout, not caught up.
    pub forced: Vec<(TaskIx, ClientIx, ClientIx)>,
    /// `(task, from, to)`: a standby kept on `from`, caught up, while `to` catches up.
    pub standby_moves: Vec<(TaskIx, ClientIx, ClientIx)>,
}

impl Plan {
    pub fn new(clients: usize) -> Self {
        Self {
            active: vec![Vec::new(); clients],
            standby: vec![Vec::new(); clients],
            warmup: vec![Vec::new(); clients],
            warnings: Vec::new(),
            pending: Vec::new(),
            forced: Vec::new(),
            standby_moves: Vec::new(),
        }
    }

    pub fn push(&mut self, client: ClientIx, task: TaskIx, role: Role) {
        let list = match role {
            Role::Active => &mut self.active,
            Role::Standby => &mut self.standby,
            Role::Warmup => &mut self.warmup,
        };
        list[client].push(task);
    }

    /// Sorts everything into the public form. `followup` decides the probing schedule.
    pub fn finish(self, cluster: &Cluster, followup: bool) -> Assignment {
        let racks = RackCosts::new(cluster).ok().flatten();
        self.finish_with_racks(cluster, followup, racks.as_ref())
    }

    /// As [`Plan::finish`], reporting the traffic by `racks` (the assignor's own costs, not
    /// built again).
    pub fn finish_with_racks(
        self,
        cluster: &Cluster,
        followup: bool,
        racks: Option<&RackCosts>,
    ) -> Assignment {
        let ids = |v: &[TaskIx]| -> Vec<TaskId> {
            let mut out: Vec<TaskId> = v.iter().map(|&t| cluster.tasks[t].id).collect();
            out.sort_unstable();
            out
        };
        let mut clients = BTreeMap::new();
        for (c, spec) in cluster.clients.iter().enumerate() {
            let active = ids(&self.active[c]);
            let standby = ids(&self.standby[c]);
            let warmup = ids(&self.warmup[c]);
            let drained =
                spec.leaving && active.is_empty() && standby.is_empty() && warmup.is_empty();
            clients.insert(
                spec.id.clone(),
                ClientAssignment {
                    active,
                    standby,
                    warmup,
                    drained,
                },
            );
        }
        let moves = |list: &[(TaskIx, ClientIx, ClientIx)]| {
            let mut out: Vec<PendingMove> = list
                .iter()
                .map(|&(t, from, to)| PendingMove {
                    task: cluster.tasks[t].id,
                    from: cluster.clients[from].id.clone(),
                    to: cluster.clients[to].id.clone(),
                })
                .collect();
            out.sort_by_key(|m| m.task);
            out
        };
        let (pending, forced) = (moves(&self.pending), moves(&self.forced));
        let standby_moves = moves(&self.standby_moves);
        // A leaving client that still runs something is forced at its timeout: probe then at
        // the latest, so the hand-over happens without anyone's help (static members too).
        let deadline = self
            .pending
            .iter()
            .filter_map(|&(_, from, _)| cluster.time_left_ms(from))
            .min();
        let probe = followup.then(|| {
            let interval = cluster.config.probing_rebalance_interval_ms;
            deadline.map_or(interval, |d| d.min(interval))
        });
        let traffic = racks.map(|costs| {
            let actives = self
                .active
                .iter()
                .enumerate()
                .flat_map(|(c, ts)| ts.iter().map(move |&t| (t, ClientIx::new(c))));
            rack::traffic(costs, actives)
        });
        Assignment {
            clients,
            followup_rebalance: followup,
            probe_after_ms: probe,
            warnings: self.warnings,
            pending,
            standby_moves,
            forced,
            traffic,
        }
    }
}
