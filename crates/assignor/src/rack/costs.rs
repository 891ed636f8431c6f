//! KIP-925's cost model: what it costs to run a task on a client of a given rack.

use std::collections::BTreeMap;

use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::config::RackStrategy;

/// Index of a rack among the clients' racks, sorted by name.
pub type RackIx = u32;

/// Traffic costs per (task, rack), for the racks clients are on.
#[derive(Debug, Clone)]
pub struct RackCosts {
    pub strategy: RackStrategy,
    /// Cost of one input partition read across racks.
    pub traffic: i64,
    /// Cost of running a task elsewhere than where the balanced assignment put it.
    pub non_overlap: i64,
    racks: usize,
    client_rack: Vec<RackIx>,
    /// Per task: how many of its input partitions have a replica on each rack, by rack.
    present: Vec<Vec<(RackIx, u32)>>,
    partitions: Vec<u32>,
}

/// Why racks asked for are not used: the input lacks what the costs need. Its message is
/// the assignment's warning.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rack.aware.assignment.strategy is {} but {why}: actives are placed without racks", .strategy.name())]
pub struct RacksUnused {
    pub strategy: RackStrategy,
    pub why: String,
}

impl RackCosts {
    /// The costs, when the strategy asks for them and the input has what they need; otherwise
    /// why racks are not used (`Ok(None)` when not asked).
    pub fn new(cluster: &Cluster) -> Result<Option<RackCosts>, RacksUnused> {
        let strategy = cluster.config.rack_aware_strategy;
        if strategy == RackStrategy::None {
            return Ok(None);
        }
        let skip = |why: String| Err(RacksUnused { strategy, why });
        let mut index: BTreeMap<&str, RackIx> = BTreeMap::new();
        for (i, c) in cluster.clients.iter().enumerate() {
            match c.rack.as_deref() {
                Some(r) => index.insert(r, 0),
                None => return skip(format!("client {} (clients[{i}]) has no rack", c.id)),
            };
        }
        for (i, ix) in index.values_mut().enumerate() {
            *ix = i as RackIx;
        }
        if cluster.tasks.iter().all(|t| t.partitions.is_empty()) {
            return skip("no task lists its input partitions".to_owned());
        }
        let mut present = Vec::with_capacity(cluster.task_count());
        let mut partitions = Vec::with_capacity(cluster.task_count());
        for t in &cluster.tasks {
            let mut here: BTreeMap<RackIx, u32> = BTreeMap::new();
            for p in &t.partitions {
                if p.racks.is_empty() {
                    return skip(format!(
                        "partition {} of task {} has no replica rack",
                        p.partition, t.id
                    ));
                }
                for r in &p.racks {
                    if let Some(&ix) = index.get(r.as_str()) {
                        *here.entry(ix).or_default() += 1;
                    }
                }
            }
            present.push(here.into_iter().collect());
            partitions.push(t.partitions.len() as u32);
        }
        let (traffic, non_overlap) = cluster.config.rack_costs();
        Ok(Some(RackCosts {
            strategy,
            traffic,
            non_overlap,
            racks: index.len(),
            client_rack: cluster
                .clients
                .iter()
                .map(|c| index[c.rack.as_deref().expect("checked above")])
                .collect(),
            present,
            partitions,
        }))
    }

    pub fn rack_count(&self) -> usize {
        self.racks
    }

    pub fn rack_of(&self, c: ClientIx) -> RackIx {
        self.client_rack[c]
    }

    /// Input partitions of `t` with no replica on `rack`.
    pub fn misses(&self, t: TaskIx, rack: RackIx) -> u32 {
        let here = &self.present[t];
        let hits = here
            .binary_search_by_key(&rack, |&(r, _)| r)
            .map_or(0, |i| here[i].1);
        self.partitions[t] - hits
    }

    /// Traffic cost of running `t` on `rack`.
    pub fn traffic_on(&self, t: TaskIx, rack: RackIx) -> i64 {
        self.traffic * self.misses(t, rack) as i64
    }

    /// The racks where `t` reads some partition locally.
    pub fn replica_racks(&self, t: TaskIx) -> impl Iterator<Item = RackIx> + '_ {
        self.present[t].iter().map(|&(r, _)| r)
    }

    /// How many input partitions `t` reads.
    pub fn partitions(&self, t: TaskIx) -> u32 {
        self.partitions[t]
    }
}
