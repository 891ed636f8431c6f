//! Cluster state in: the validated, indexed input every assignor reads.
//!
//! Tasks and clients are sorted once and referred to by dense indices (`TaskIx`, `ClientIx`) so
//! the assignors work on small integers. Lags stay sparse: a client only carries the tasks it
//! reported; every other task is `end_offset_sum` behind.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::AssignmentConfig;
use crate::model::{ClientId, Lag, Role, TaskId, TopicPartition};

pub use crate::index::{ClientIx, TaskIx};

/// One task of the application.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskSpec {
    pub id: TaskId,
    pub stateful: bool,
    /// Sum of the end offsets of the task's changelog partitions (0 for stateless tasks).
    pub end_offset_sum: u64,
    /// The input partitions the task reads, with the racks of their replicas: what
    /// `rack.aware.assignment.strategy` weighs. Empty when unknown.
    pub partitions: Vec<SourcePartition>,
}

/// An input partition of a task and the racks its replicas are on (from the broker's Metadata).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourcePartition {
    pub partition: TopicPartition,
    pub racks: BTreeSet<String>,
}

/// One application instance and what it holds now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientSpec {
    pub id: ClientId,
    /// Number of stream threads, at least 1.
    pub capacity: u32,
    pub rack: Option<String>,
    /// `client.tag.<key>` values (KIP-708); `rack.aware.assignment.tags` names the ones that
    /// count.
    pub tags: BTreeMap<String, String>,
    /// Being drained: gets no new tasks, hands its tasks over through warm-ups.
    pub leaving: bool,
    /// How long it has been leaving, when known: past `scale.down.timeout.ms` its tasks are
    /// handed over without waiting for warm-ups.
    pub leaving_for_ms: Option<u64>,
    pub owned_active: BTreeSet<TaskId>,
    pub owned_standby: BTreeSet<TaskId>,
    pub owned_warmup: BTreeSet<TaskId>,
    /// Lag per stateful task the client reported; unreported tasks lag by their end-offset sum.
    pub lags: BTreeMap<TaskId, Lag>,
}

/// Everything an assignor needs, before validation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterState {
    pub config: AssignmentConfig,
    pub tasks: Vec<TaskSpec>,
    pub clients: Vec<ClientSpec>,
}

/// Bad input, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct InputError {
    /// Where in the input, e.g. `clients[3].lags`.
    pub path: String,
    pub message: String,
}

impl InputError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// What one client holds and reported, by index.
#[derive(Debug, Clone, Default)]
pub struct ClientView {
    /// `(task, lag)` sorted by task.
    pub reports: Vec<(TaskIx, Lag)>,
    /// `(task, role)` sorted by task; a task appears once.
    pub owned: Vec<(TaskIx, Role)>,
}

/// Validated cluster state, indexed for the assignors.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub config: AssignmentConfig,
    /// Sorted by id.
    pub tasks: Vec<TaskSpec>,
    /// Sorted by id.
    pub clients: Vec<ClientSpec>,
    pub views: Vec<ClientView>,
    /// For each task, the clients that reported a lag for it, sorted by client.
    pub reporters: Vec<Vec<(ClientIx, Lag)>>,
}

/// Checks the tasks and clients one by one (ids unique and set, capacities, stateless tasks
/// without changelogs); the order that sorts each by id.
fn check_specs(
    tasks: &[TaskSpec],
    clients: &[ClientSpec],
) -> Result<(Vec<usize>, Vec<usize>), InputError> {
    let mut task_order: Vec<usize> = (0..tasks.len()).collect();
    task_order.sort_by_key(|&i| tasks[i].id);
    for w in task_order.windows(2) {
        if tasks[w[0]].id == tasks[w[1]].id {
            return Err(InputError::new(
                format!("tasks[{}].id", w[0].max(w[1])),
                format!("duplicate task id \"{}\"", tasks[w[0]].id),
            ));
        }
    }
    let mut client_order: Vec<usize> = (0..clients.len()).collect();
    client_order.sort_by(|&a, &b| clients[a].id.cmp(&clients[b].id));
    for w in client_order.windows(2) {
        if clients[w[0]].id == clients[w[1]].id {
            return Err(InputError::new(
                format!("clients[{}].id", w[0].max(w[1])),
                format!("duplicate client id \"{}\"", clients[w[0]].id),
            ));
        }
    }
    for (i, c) in clients.iter().enumerate() {
        if c.id.0.is_empty() {
            return Err(InputError::new(
                format!("clients[{i}].id"),
                "must not be empty",
            ));
        }
        if c.capacity == 0 {
            return Err(InputError::new(
                format!("clients[{i}].capacity"),
                "must be at least 1 (it is the number of stream threads)",
            ));
        }
        if c.leaving_for_ms.is_some() && !c.leaving {
            return Err(InputError::new(
                format!("clients[{i}].leaving_since_ms"),
                "given for a client that is not leaving",
            ));
        }
    }
    for (i, t) in tasks.iter().enumerate() {
        if !t.stateful && t.end_offset_sum != 0 {
            return Err(InputError::new(
                format!("tasks[{i}].end_offset_sum"),
                format!("task \"{}\" is stateless and has no changelog", t.id),
            ));
        }
    }
    Ok((task_order, client_order))
}

impl Cluster {
    /// Checks the input and builds the index. Errors name the offending field.
    pub fn new(state: ClusterState) -> Result<Cluster, InputError> {
        let ClusterState {
            config,
            tasks,
            clients,
        } = state;
        if let Err((key, msg)) = config.validate() {
            return Err(InputError::new(format!("config.{key}"), msg));
        }
        if clients.is_empty() {
            return Err(InputError::new(
                "clients",
                "at least one client is required",
            ));
        }

        let (task_order, client_order) = check_specs(&tasks, &clients)?;

        let sorted_tasks: Vec<TaskSpec> = task_order.iter().map(|&i| tasks[i].clone()).collect();
        let task_ix = |id: &TaskId| -> Option<TaskIx> {
            sorted_tasks
                .binary_search_by_key(id, |t| t.id)
                .ok()
                .map(TaskIx::new)
        };

        let mut views = Vec::with_capacity(clients.len());
        let mut reporters: Vec<Vec<(ClientIx, Lag)>> = vec![Vec::new(); sorted_tasks.len()];
        let mut sorted_clients = Vec::with_capacity(clients.len());
        for (cix, &orig) in client_order.iter().enumerate() {
            let c = &clients[orig];
            let mut view = ClientView::default();
            for (field, set, role) in [
                ("owned_active", &c.owned_active, Role::Active),
                ("owned_standby", &c.owned_standby, Role::Standby),
                ("owned_warmup", &c.owned_warmup, Role::Warmup),
            ] {
                for id in set {
                    let path = || format!("clients[{orig}].{field}");
                    let t = task_ix(id).ok_or_else(|| {
                        InputError::new(path(), format!("task \"{id}\" is not in tasks"))
                    })?;
                    if role != Role::Active && !sorted_tasks[t].stateful {
                        return Err(InputError::new(
                            path(),
                            format!("task \"{id}\" is stateless and cannot have a {role:?} copy")
                                .to_lowercase(),
                        ));
                    }
                    view.owned.push((t, role));
                }
            }
            view.owned.sort_unstable();
            for w in view.owned.windows(2) {
                if w[0].0 == w[1].0 {
                    return Err(InputError::new(
                        format!("clients[{orig}]"),
                        format!("task \"{}\" is owned in two roles", sorted_tasks[w[0].0].id),
                    ));
                }
            }
            for (id, &lag) in &c.lags {
                let t = task_ix(id).ok_or_else(|| {
                    InputError::new(
                        format!("clients[{orig}].lags"),
                        format!("task \"{id}\" is not in tasks"),
                    )
                })?;
                if !sorted_tasks[t].stateful {
                    // Kafka omits stateless tasks from offset sums; a lag for one means nothing.
                    continue;
                }
                view.reports.push((t, lag));
                reporters[t].push((ClientIx::new(cix), lag));
            }
            views.push(view);
            sorted_clients.push(c.clone());
        }

        Ok(Cluster {
            config,
            tasks: sorted_tasks,
            clients: sorted_clients,
            views,
            reporters,
        })
    }

    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    /// The lag of `client` for stateful `task`: reported, or the whole changelog.
    pub fn lag(&self, client: ClientIx, task: TaskIx) -> Lag {
        let reports = &self.views[client].reports;
        match reports.binary_search_by_key(&task, |&(t, _)| t) {
            Ok(i) => reports[i].1,
            Err(_) => Lag::Behind(self.tasks[task].end_offset_sum),
        }
    }

    /// Whether `client` may take `task` over without a visible restore.
    pub fn is_caught_up(&self, client: ClientIx, task: TaskIx) -> bool {
        self.lag(client, task)
            .is_caught_up(self.config.acceptable_recovery_lag)
    }

    /// Whether a client that reported nothing for `task` counts as caught up (an empty or tiny changelog).
    pub fn unreported_is_caught_up(&self, task: TaskIx) -> bool {
        Lag::Behind(self.tasks[task].end_offset_sum)
            .is_caught_up(self.config.acceptable_recovery_lag)
    }

    /// The role `client` holds `task` in now, if any.
    pub fn owned_role(&self, client: ClientIx, task: TaskIx) -> Option<Role> {
        let owned = &self.views[client].owned;
        owned
            .binary_search_by_key(&task, |&(t, _)| t)
            .ok()
            .map(|i| owned[i].1)
    }

    pub fn capacity(&self, client: ClientIx) -> u32 {
        self.clients[client].capacity
    }

    pub fn is_leaving(&self, client: ClientIx) -> bool {
        self.clients[client].leaving
    }

    /// A leaving client past the scale-down timeout: it runs nothing more.
    pub fn timed_out(&self, client: ClientIx) -> bool {
        let c = &self.clients[client];
        c.leaving
            && c.leaving_for_ms
                .is_some_and(|t| t >= self.config.scale_down_timeout_ms)
    }

    /// How long until a leaving client times out, if it is leaving and has not yet.
    pub fn time_left_ms(&self, client: ClientIx) -> Option<u64> {
        let c = &self.clients[client];
        let t = c.leaving_for_ms.filter(|_| c.leaving)?;
        (t < self.config.scale_down_timeout_ms).then(|| self.config.scale_down_timeout_ms - t)
    }

    pub fn is_stateful(&self, task: TaskIx) -> bool {
        self.tasks[task].stateful
    }

    pub fn client_ixs(&self) -> impl DoubleEndedIterator<Item = ClientIx> + ExactSizeIterator {
        crate::index::indices(self.clients.len())
    }

    pub fn task_ixs(&self) -> impl DoubleEndedIterator<Item = TaskIx> + ExactSizeIterator {
        crate::index::indices(self.tasks.len())
    }
}
